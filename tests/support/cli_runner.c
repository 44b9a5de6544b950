/* cli_runner.c - run the built strata binary with files as stdin, stdout
 * and stderr, so tests see exactly what a shell would (support for every
 * test folder, layer: cli; prefix cli). */
#include "support/cli_runner.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 4096, n = 0;
	char *b = malloc(cap + 1);
	size_t got;
	while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			char *nb = realloc(b, 2 * cap + 1);
			if (!nb) {
				free(b);
				b = NULL;
				break;
			}
			b = nb;
			cap *= 2;
		}
	}
	fclose(f);
	if (b) {
		b[n] = '\0';
		*len = n;
	}
	return b;
}

/* The test process's scratch folders, removed when it exits (they held
 * one folder per run per test before, never removed). */
static char made[32][4096];
static int n_made;

static void remove_made(void)
{
	char cmd[4200];
	for (int i = 0; i < n_made; i++) {
		snprintf(cmd, sizeof cmd, "rm -rf '%.4095s'", made[i]);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", made[i]);
	}
}

void cli_tmpdir(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/tests/tmp-%s-%ld", STRATA_BINARY_DIR, name,
		 (long)getpid());
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
	if (system(cmd) != 0 || mkdir(out, 0755) != 0) {
		fprintf(stderr, "cannot make %s\n", out);
		exit(1);
	}
	if (n_made == 0)
		atexit(remove_made);
	if (n_made < (int)(sizeof made / sizeof *made))
		snprintf(made[n_made++], sizeof *made, "%s", out);
}

int cli_run(const char *const *argv, const void *in, size_t in_len,
	    const char *dir, cli_result *r)
{
	char base[4096], pin[4200], pout[4200], perr[4200];
	memset(r, 0, sizeof *r);
	snprintf(base, sizeof base, "%s/tests/cli-run-%ld", STRATA_BINARY_DIR,
		 (long)getpid());
	snprintf(pin, sizeof pin, "%s.in", base);
	snprintf(pout, sizeof pout, "%s.out", base);
	snprintf(perr, sizeof perr, "%s.err", base);
	FILE *f = fopen(pin, "wb");
	if (!f)
		return -1;
	/* in may be NULL for no input; fwrite must not see a NULL pointer. */
	int wrote = !in_len || fwrite(in, 1, in_len, f) == in_len;
	if (fclose(f) != 0 || !wrote)
		return -1;
	const char *args[64];
	int n = 0;
	args[n++] = STRATA_CLI_PATH;
	for (; argv[n - 1] && n < 63; n++)
		args[n] = argv[n - 1];
	args[n] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int i = open(pin, O_RDONLY), o = open(pout, O_WRONLY | O_CREAT | O_TRUNC, 0644),
		    e = open(perr, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (i < 0 || o < 0 || e < 0 || dup2(i, 0) < 0 || dup2(o, 1) < 0 ||
		    dup2(e, 2) < 0)
			_exit(126);
		if (dir && chdir(dir) != 0)
			_exit(126);
		execv(args[0], (char *const *)args);
		_exit(127);
	}
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	r->out = slurp(pout, &r->out_len);
	r->err = slurp(perr, &r->err_len);
	unlink(pin);
	unlink(pout);
	unlink(perr);
	return r->out && r->err ? 0 : -1;
}

void cli_result_free(cli_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}
