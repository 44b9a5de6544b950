/* main.c - the strata command-line tool: dispatch to one command
 * (layer: cli). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "strata_commit.h"

const strata_command strata_commands[] = {
	{"shard", "place keyed work items on devices (stdin -> stdout)", strata_cmd_shard},
	{"inspect", "describe a checkpoint from its headers", strata_cmd_inspect},
	{"plan", "size every residency mode of a model and choose one", strata_cmd_plan},
	{"tokenize", "show the token ids of a text", strata_cmd_tokenize},
	{"run", "generate text from a prompt", strata_cmd_run},
	{"logits", "write the logits of every position of a token list", strata_cmd_logits},
	{"batch", "run JSONL generation requests over model replicas", strata_cmd_batch},
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
#ifdef STRATA_BUILT_WITH_CUDA
	printf("backends: cpu cuda\n");
#else
	printf("backends: cpu (built without CUDA)\n");
#endif
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

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return STRATA_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return STRATA_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		print_version();
		return STRATA_EXIT_OK;
	}
	for (const strata_command *c = strata_commands; c->name; c++)
		if (!strcmp(argv[1], c->name))
			return c->main(argc - 1, argv + 1);
	fprintf(stderr, "strata: error: unknown command '%s'\n", argv[1]);
	fprintf(stderr, "  fix: run 'strata --help' for the list of commands\n");
	return STRATA_EXIT_USAGE;
}
