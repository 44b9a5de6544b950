/* cli_runner.h - run the built strata binary with given stdin, capture its
 * stdout, stderr and exit code (support for every test folder, layer: cli;
 * prefix cli). */
#ifndef STRATA_TESTS_SUPPORT_CLI_RUNNER_H
#define STRATA_TESTS_SUPPORT_CLI_RUNNER_H

#include <stddef.h>

typedef struct cli_result {
	int exit_code; /* -1 when killed by a signal */
	char *out, *err; /* NUL-terminated, malloc'd */
	size_t out_len, err_len;
} cli_result;

/* Runs STRATA_CLI_PATH with argv (NULL-terminated, without argv[0]),
 * feeding in_len bytes of input on stdin (in may be NULL when in_len is
 * 0). Returns 0 or -1 on a setup
 * failure. The working directory is `dir` when not NULL. */
int cli_run(const char *const *argv, const void *in, size_t in_len,
	    const char *dir, cli_result *r);
void cli_result_free(cli_result *r);

/* A fresh empty folder under the build tree for one test's files. */
void cli_tmpdir(char *out, size_t cap, const char *name);

#endif
