/* main.c - the strata command-line tool: dispatch to one command
 * (layer: cli). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "strata/backend.h"
#include "strata_commit.h"

const strata_command strata_commands[] = {
	{"shard", "place keyed work items on devices (stdin -> stdout)", strata_cmd_shard},
	{"inspect", "describe a checkpoint from its headers", strata_cmd_inspect},
	{"plan", "size every residency mode of a model and choose one", strata_cmd_plan},
	{"calibrate", "measure the memory, link and compute rates plans predict with", strata_cmd_calibrate},
	{"tokenize", "show the token ids of a text", strata_cmd_tokenize},
	{"template", "render a conversation through a chat template", strata_cmd_template},
	{"run", "generate text from a prompt", strata_cmd_run},
	{"logits", "write the logits of every position of a token list", strata_cmd_logits},
	{"batch", "run JSONL generation requests over model replicas", strata_cmd_batch},
	{"chat", "talk with a model: each line a message, replies streamed", strata_cmd_chat},
	{"bench", "measure prompt and generation throughput (llama-bench's table)", strata_cmd_bench},
	{"serve", "serve a model over HTTP with OpenAI's API", strata_cmd_serve},
	{"quantize", "write a model as GGUF in a llama.cpp quantization type", strata_cmd_quantize},
	{NULL, NULL, NULL},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: strata COMMAND [OPTIONS]\n\ncommands:\n");
	for (const strata_command *c = strata_commands; c->name; c++)
		fprintf(f, "  %-10s %s\n", c->name, c->summary);
	fprintf(f, "\n'strata COMMAND --help' describes a command.\n");
}

/* The version, the commit it was built from, what the build holds and what
 * this processor offers the CPU kernels (asked of the processor, not of the
 * CUDA driver, so --version stays instant). */
static void print_version(void)
{
	printf("strata %s (commit %s)\n", STRATA_VERSION, STRATA_COMMIT);
	printf(strata_backend_has_kind("cuda")
		       ? "backends: cpu cuda\n"
		       : "backends: cpu (built without CUDA)\n");
	printf("this processor:");
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2"))
		printf(" avx2");
	if (__builtin_cpu_supports("fma"))
		printf(" fma");
	if (__builtin_cpu_supports("avx512f"))
		printf(" avx512f");
	if (__builtin_cpu_supports("avx512vnni"))
		printf(" avx512vnni");
#endif
	printf("\n");
}

/* SIGINT, SIGTERM, SIGHUP: the default action (the process ends at once,
 * with the signal's status), after removing the temporary file of an
 * atomic write in progress, so a signal never leaves a partial file. */
static void on_signal(int sig)
{
	strata_file_abandon_pending();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void catch_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
		struct sigaction sa, old;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		/* a signal ignored by whoever started us stays ignored */
		if (sigaction(sigs[i], NULL, &old) == 0 &&
		    old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
	}
}

/* A closed stdin, stdout or stderr would be taken by the next open(), and
 * a model file or the telemetry's temporary file would then receive what
 * was printed: each gets /dev/null opened read-only instead, where writes
 * fail (EBADF) and so still count as lost output. */
static void hold_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int n = open("/dev/null", O_RDONLY);
			if (n >= 0 && n != fd) {
				dup2(n, fd);
				close(n);
			}
		}
}

/* Output the command wrote to stdout that did not all arrive (a full
 * disk, /dev/full, a closed stdout) fails the command: exit 1. */
static int check_stdout(int rc)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return rc;
	if (rc == STRATA_EXIT_OK) {
		int e = errno;
		fprintf(stderr, "strata: error: writing to stdout failed%s%s\n",
			e ? ": " : "", e ? strerror(e) : "");
		fprintf(stderr, "  fix: check where stdout goes (a full disk, "
				"a closed pipe)\n");
	}
	return rc == STRATA_EXIT_OK ? STRATA_EXIT_ERROR : rc;
}

int main(int argc, char **argv)
{
	hold_std_fds();
	catch_signals();
	if (argc < 2) {
		usage(stderr);
		return STRATA_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return check_stdout(STRATA_EXIT_OK);
	}
	if (!strcmp(argv[1], "--version")) {
		print_version();
		return check_stdout(STRATA_EXIT_OK);
	}
	for (const strata_command *c = strata_commands; c->name; c++)
		if (!strcmp(argv[1], c->name))
			return check_stdout(c->main(argc - 1, argv + 1));
	fprintf(stderr, "strata: error: unknown command '%s'\n", argv[1]);
	fprintf(stderr, "  fix: run 'strata --help' for the list of commands\n");
	return STRATA_EXIT_USAGE;
}
