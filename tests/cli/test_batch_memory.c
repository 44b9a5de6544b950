/* test_batch_memory.c - `strata batch`'s memory does not grow with the
 * number of requests beyond the input's bytes and 16 bytes a request: a
 * bad or repeated last line among 200,000 is found in bounded peak RSS,
 * measured in the child by wait4 (layer: cli). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/cli_runner.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define REQUESTS 200000

/* Sanitizers' shadow memory and quarantine are not the program's: the
 * bound is checked in plain builds only (the errors everywhere). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

typedef struct child_run {
	int exit_code;
	long peak_kib; /* the child's peak RSS (ru_maxrss) */
	char err[512]; /* the start of its stderr */
} child_run;

/* Runs `strata batch MODEL --device cpu` with the file at path as stdin,
 * stdout discarded. */
static void run_batch_on(const char *path, const char *dir, child_run *r)
{
	char err_path[600];
	snprintf(err_path, sizeof err_path, "%s/stderr", dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int in = open(path, O_RDONLY);
		int out = open("/dev/null", O_WRONLY);
		int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 ||
		    dup2(out, 1) < 0 || dup2(err, 2) < 0)
			_exit(127);
		execl(STRATA_CLI_PATH, STRATA_CLI_PATH, "batch", MODEL,
		      "--device", "cpu", (char *)NULL);
		_exit(127);
	}
	int status;
	struct rusage ru;
	assert_int_equal(wait4(pid, &status, 0, &ru), pid);
	assert_true(WIFEXITED(status));
	r->exit_code = WEXITSTATUS(status);
	r->peak_kib = ru.ru_maxrss;
	FILE *f = fopen(err_path, "r");
	assert_non_null(f);
	size_t n = fread(r->err, 1, sizeof r->err - 1, f);
	r->err[n] = '\0';
	fclose(f);
}

/* REQUESTS minimal requests then `last` (a line), into dir/in.jsonl;
 * returns the file's bytes. */
static long write_input(const char *dir, const char *last, char *path,
			size_t cap)
{
	snprintf(path, cap, "%s/in.jsonl", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < REQUESTS; i++)
		fprintf(f, "{\"id\":%d,\"prompt\":\"a\"}\n", i);
	fprintf(f, "%s\n", last);
	long bytes = ftell(f);
	assert_int_equal(fclose(f), 0);
	return bytes;
}

/* One bad line after REQUESTS good ones: the error is expected, and the
 * peak RSS over a one-line input's grows by at most the input's bytes,
 * 24 bytes a request (16 kept, slack for the array's doubling) and 4 MiB
 * (before the fix: about 140 bytes of parsed state a request, 28 MiB
 * here). */
static void check_bounded(const char *name, const char *last,
			  const char *expect)
{
	char dir[512], path[600], one[600];
	cli_tmpdir(dir, sizeof dir, name);
	long bytes = write_input(dir, last, path, sizeof path);
	snprintf(one, sizeof one, "%s/one.jsonl", dir);
	FILE *f = fopen(one, "w");
	assert_non_null(f);
	fprintf(f, "{bad\n");
	assert_int_equal(fclose(f), 0);
	child_run base, big;
	run_batch_on(one, dir, &base);
	assert_int_equal(base.exit_code, 1);
	run_batch_on(path, dir, &big);
	assert_int_equal(big.exit_code, 1);
	if (!strstr(big.err, expect))
		fail_msg("expected '%s' in: %s", expect, big.err);
	long grown = big.peak_kib - base.peak_kib;
	long bound = (bytes + 24L * REQUESTS) / 1024 + 4096;
	printf("# %s: %d requests, %ld input bytes: peak RSS %ld KiB, "
	       "%ld KiB over one line's (bound %ld KiB)\n",
	       name, REQUESTS, bytes, big.peak_kib, grown, bound);
	if (!SANITIZED && grown > bound)
		fail_msg("peak RSS grew by %ld KiB, over %ld KiB", grown, bound);
}

static void test_bad_last_line_found_in_bounded_memory(void **state)
{
	(void)state;
	check_bounded("batch_memory_bad", "{\"id\":\"z\",\"prompt\":",
		      "strata: error: line 200001: not a JSON object");
}

static void test_repeated_last_id_found_in_bounded_memory(void **state)
{
	(void)state;
	check_bounded("batch_memory_repeat", "{\"id\":17,\"prompt\":\"b\"}",
		      "strata: error: line 200001: 'id' repeats the id of "
		      "line 18");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_last_line_found_in_bounded_memory),
		cmocka_unit_test(test_repeated_last_id_found_in_bounded_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
