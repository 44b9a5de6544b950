/* test_robust.c - the strata process under hostile surroundings (issue
 * 20): lost stdout (/dev/full, closed) exits 1; output paths that are
 * devices, FIFOs, links or sockets are written or refused, never replaced;
 * FIFOs in place of input files are refused at once; SIGINT, SIGTERM and
 * SIGHUP end a batch within 0.2 s leaving no temporary file (layer: cli). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/cli_runner.h"
#include "strata/base.h"
#include "strata/checkpoint.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"

static char dir[4096];

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Starts strata with argv (no argv[0]): stdin from `in` (a path, NULL:
 * /dev/null), stdout to `out` (a path opened for writing; NULL: closed),
 * stderr to `err_path`. Returns the pid. */
static pid_t spawn(const char *const *argv, const char *in, const char *out,
		   const char *err_path)
{
	const char *args[64] = {STRATA_CLI_PATH};
	int n = 1;
	for (; argv[n - 1] && n < 63; n++)
		args[n] = argv[n - 1];
	args[n] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int i = open(in ? in : "/dev/null", O_RDONLY);
		int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (i < 0 || e < 0 || dup2(i, 0) < 0 || dup2(e, 2) < 0)
			_exit(126);
		if (out) {
			int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (o < 0 || dup2(o, 1) < 0)
				_exit(126);
		} else {
			close(1);
		}
		execv(args[0], (char *const *)args);
		_exit(127);
	}
	return pid;
}

/* Waits at most limit_ms; a child still running is killed and fails the
 * test (a hang is the defect these tests look for). The exit code, or
 * 128 + the signal. */
static int wait_for(pid_t pid, uint64_t limit_ms)
{
	uint64_t end = now_ms() + limit_ms;
	int status;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("strata still running after %llu ms",
				 (unsigned long long)limit_ms);
		}
		usleep(2000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status)
				 : 128 + WTERMSIG(status);
}

static char *path_of(const char *name)
{
	static char p[4][4200];
	static int k;
	char *s = p[k++ & 3];
	snprintf(s, sizeof p[0], "%s/%s", dir, name);
	return s;
}

static char *slurp(const char *path)
{
	char *buf = NULL;
	size_t len;
	strata_error e;
	if (strata_file_read_all(path, 1u << 24, &buf, &len, &e))
		fail_msg("%s: %s", path, e.message);
	return buf;
}

static int run_to(const char *const *argv, const char *out)
{
	return wait_for(spawn(argv, NULL, out, path_of("err")), 60000);
}

/* ------------------------------------------------------------------------ */

static const char *const run_argv[] = {"run", MODEL, "-p", "Once", "-n", "8",
				       NULL};
static const char *const inspect_argv[] = {"inspect", MODEL, NULL};
static const char *const plan_argv[] = {"plan", MODEL, NULL};
static const char *const *const printing[] = {run_argv, inspect_argv,
					      plan_argv};

/* defect 5: run, inspect and plan exited 0 having written nothing */
static void test_lost_stdout_exits_1(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof printing / sizeof *printing; i++) {
		assert_int_equal(run_to(printing[i], path_of("out")), 0);
		assert_int_equal(run_to(printing[i], "/dev/full"), 1);
		char *err = slurp(path_of("err"));
		assert_non_null(strstr(err, "writing to stdout failed"));
		free(err);
		assert_int_equal(run_to(printing[i], NULL), 1);
	}
}

/* defect 1: as root, --telemetry /dev/null turned /dev/null into a JSON
 * file and --out /dev/stdout replaced what the link named */
static void test_output_paths_are_written_not_replaced(void **state)
{
	(void)state;
	const char *const tel[] = {"run", MODEL, "-p", "Once", "-n", "4",
				   "--telemetry", "/dev/null", NULL};
	assert_int_equal(run_to(tel, path_of("out")), 0);
	struct stat st;
	assert_int_equal(stat("/dev/null", &st), 0);
	assert_true(S_ISCHR(st.st_mode));

	/* logits to /dev/stdout land in the file stdout is, the same inode */
	const char *const lg[] = {"logits", MODEL, "--tokens", "1 403",
				  "--out", "/dev/stdout", NULL};
	struct stat before, after;
	close(open(path_of("out"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
	assert_int_equal(stat(path_of("out"), &before), 0);
	pid_t pid = spawn(lg, NULL, NULL, path_of("err"));
	(void)pid;
	assert_int_equal(wait_for(pid, 60000), 1); /* closed stdout: lost */
	int fd = open(path_of("out"), O_WRONLY | O_TRUNC);
	close(fd);
	assert_int_equal(run_to(lg, path_of("out")), 0);
	assert_int_equal(stat(path_of("out"), &after), 0);
	assert_int_equal(before.st_ino, after.st_ino);
	assert_int_equal(after.st_size, 2 * 512 * 4); /* [2, vocab] f32 */

	/* a link to a file: the link stays, the file gets the document */
	assert_int_equal(symlink("real.json", path_of("link.json")), 0);
	const char *const lk[] = {"run", MODEL, "-p", "Once", "-n", "4",
				  "--telemetry", path_of("link.json"), NULL};
	assert_int_equal(run_to(lk, path_of("out")), 0);
	assert_int_equal(lstat(path_of("link.json"), &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	char *doc = slurp(path_of("real.json"));
	assert_non_null(strstr(doc, "\"schema_version\""));
	free(doc);
}

/* A socket (or a folder) as an output is refused before anything runs. */
static void test_unwritable_output_refused_before_running(void **state)
{
	(void)state;
	int sfd = socket(AF_UNIX, SOCK_STREAM, 0), cwd = open(".", O_RDONLY);
	struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "sock"};
	assert_int_equal(chdir(dir), 0);
	assert_int_equal(bind(sfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(fchdir(cwd), 0);
	close(cwd);
	const char *const a[] = {"run", MODEL, "-p", "Once", "-n", "4",
				 "--telemetry", path_of("sock"), NULL};
	assert_int_equal(run_to(a, path_of("out")), 1);
	char *out = slurp(path_of("out")), *err = slurp(path_of("err"));
	assert_string_equal(out, ""); /* nothing generated */
	assert_non_null(strstr(err, "--telemetry"));
	assert_non_null(strstr(err, "a socket"));
	free(out), free(err);
	const char *const s[] = {"shard", "--gpus", "2", "--spill-threshold",
				 "9", "--stats", dir, NULL};
	assert_int_equal(run_to(s, path_of("out")), 1);
	err = slurp(path_of("err"));
	assert_non_null(strstr(err, "a folder"));
	free(err);
	close(sfd);
}

/* defect 3: a FIFO prompt file, config.json or tokenizer.json hung */
static void test_fifo_inputs_are_refused_at_once(void **state)
{
	(void)state;
	assert_int_equal(mkfifo(path_of("prompt"), 0644), 0);
	const char *const f[] = {"run", MODEL, "-f", path_of("prompt"), NULL};
	assert_int_equal(wait_for(spawn(f, NULL, path_of("out"),
					path_of("err")), 20000), 1);
	char *err = slurp(path_of("err"));
	assert_non_null(strstr(err, "FIFO"));
	free(err);
	static const char *const faked[] = {"config.json", "tokenizer.json"};
	for (size_t i = 0; i < 2; i++) {
		char cmd[40000];
		snprintf(cmd, sizeof cmd,
			 "rm -rf '%s/m' && mkdir '%s/m' && cp '%s'/* '%s/m/' "
			 "&& rm '%s/m/%s' && mkfifo '%s/m/%s'",
			 dir, dir, MODEL, dir, dir, faked[i], dir, faked[i]);
		assert_int_equal(system(cmd), 0);
		const char *const a[] = {"run", path_of("m"), "-p", "Once",
					 NULL};
		assert_int_equal(wait_for(spawn(a, NULL, path_of("out"),
						path_of("err")), 20000), 1);
		err = slurp(path_of("err"));
		if (!strstr(err, "FIFO"))
			fail_msg("%s: %s", faked[i], err);
		free(err);
	}
}

/* defect 10: each signal ends a batch within 0.2 s (its default action,
 * status 128 + signal) and no temporary file is left by the telemetry. */
static void test_signals_end_a_batch_quickly(void **state)
{
	(void)state;
	FILE *f = fopen(path_of("reqs"), "w");
	assert_non_null(f);
	for (int i = 0; i < 20000; i++)
		fprintf(f, "{\"id\": %d, \"prompt\": \"Once upon\", "
			   "\"max_tokens\": 64}\n", i);
	fclose(f);
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	for (size_t i = 0; i < 3; i++) {
		const char *const a[] = {"batch", MODEL, "--device", "cpu",
					 "--telemetry", path_of("t.json"), NULL};
		pid_t pid = spawn(a, path_of("reqs"), path_of("out"),
				  path_of("err"));
		usleep(400000);
		uint64_t t0 = now_ms();
		assert_int_equal(kill(pid, sigs[i]), 0);
		assert_int_equal(wait_for(pid, 5000), 128 + sigs[i]);
		uint64_t took = now_ms() - t0;
		if (took > 200)
			fail_msg("signal %d took %llu ms", sigs[i],
				 (unsigned long long)took);
		char cmd[4300];
		snprintf(cmd, sizeof cmd,
			 "test $(ls -A '%s' | grep -c '[.]tmp[.]') -eq 0", dir);
		assert_int_equal(system(cmd), 0);
	}
}

/* defect 6: an explicit --context lifted the trained limit (705 positions
 * ran on a model trained for 512); defect 9: --context 4294967296 exited 1
 * where every other out-of-range value exits 2 */
static void test_context_past_training_is_refused(void **state)
{
	(void)state;
	const char *const past[] = {"run", MODEL, "-p", "Once", "-n", "700",
				    "--context", "1024", NULL};
	assert_int_equal(run_to(past, path_of("out")), 1);
	char *err = slurp(path_of("err"));
	assert_non_null(strstr(err, "--context 1024 is above the 512 positions"));
	free(err);
	const char *const huge[] = {"run", MODEL, "-p", "Once", "--context",
				    "4294967296", NULL};
	assert_int_equal(run_to(huge, path_of("out")), 2);
	const char *const edge[] = {"run", MODEL, "-p", "Once", "-n", "4",
				    "--context", "512", NULL};
	assert_int_equal(run_to(edge, path_of("out")), 0);
	/* within the trained context, --context still ends generation early */
	const char *const cut[] = {"run", MODEL, "-p", "Once", "-n", "700",
				   "--context", "64", NULL};
	assert_int_equal(run_to(cut, path_of("out")), 0);
}

/* defect 7: NaN weights gave all-NaN logits and the sampler emitted the
 * last id every step, exit 0; now the first such row is an error naming
 * its position, in run and in batch, and no token is printed. */
static void test_nan_logits_are_an_error_not_a_token(void **state)
{
	(void)state;
	char cmd[40000];
	snprintf(cmd, sizeof cmd, "rm -rf '%s/nan' && mkdir '%s/nan' && "
		 "cp '%s'/*.json '%s'/model.safetensors '%s/nan/'",
		 dir, dir, MODEL, MODEL, dir);
	assert_int_equal(system(cmd), 0);
	strata_catalog *c;
	strata_error e;
	if (strata_catalog_open(path_of("nan"), &c, &e))
		fail_msg("%s", e.message);
	const strata_tensor *t = strata_catalog_find(c, "model.norm.weight");
	assert_non_null(t);
	assert_int_equal(t->dtype, STRATA_DTYPE_F32);
	float nan[64];
	for (size_t i = 0; i < 64; i++)
		nan[i] = __builtin_nanf("");
	int fd = open(strata_catalog_file_at(c, t->file)->path, O_WRONLY);
	assert_true(fd >= 0 && t->bytes <= sizeof nan);
	assert_int_equal(pwrite(fd, nan, t->bytes, (off_t)t->offset),
			 (ssize_t)t->bytes);
	close(fd);
	strata_catalog_destroy(c);
	const char *const a[] = {"run", path_of("nan"), "-p", "Once", "-n",
				 "5", "--temperature", "0", NULL};
	assert_int_equal(run_to(a, path_of("out")), 1);
	char *out = slurp(path_of("out")), *err = slurp(path_of("err"));
	assert_string_equal(out, "");
	if (!strstr(err, "the logits of position 1 hold NaN"))
		fail_msg("%s", err);
	free(out), free(err);
	FILE *f = fopen(path_of("one"), "w");
	fputs("{\"id\": 1, \"prompt\": \"Once\", \"max_tokens\": 3}\n", f);
	fclose(f);
	const char *const b[] = {"batch", path_of("nan"), "--device", "cpu",
				 NULL};
	assert_int_equal(wait_for(spawn(b, path_of("one"), path_of("out"),
					path_of("err")), 60000), 1);
	err = slurp(path_of("err"));
	if (!strstr(err, "hold NaN"))
		fail_msg("%s", err);
	free(err);
}

static int setup(void **state)
{
	(void)state;
	cli_tmpdir(dir, sizeof dir, "robust");
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lost_stdout_exits_1),
		cmocka_unit_test(test_output_paths_are_written_not_replaced),
		cmocka_unit_test(test_unwritable_output_refused_before_running),
		cmocka_unit_test(test_fifo_inputs_are_refused_at_once),
		cmocka_unit_test(test_signals_end_a_batch_quickly),
		cmocka_unit_test(test_context_past_training_is_refused),
		cmocka_unit_test(test_nan_logits_are_an_error_not_a_token),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
