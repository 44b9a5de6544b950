/* stdin.c - all of the standard input, bounded, for the commands that read
 * their input there (run -f -, template, batch) (layer: cli). */
#include <stdio.h>

#include "cli/commands.h"

strata_status strata_cli_read_stdin(size_t cap, char **text, size_t *len,
				    strata_error *err)
{
	size_t n = 0, have = 4096;
	char *buf = strata_alloc_or_error(have + 1, "the standard input", err);
	if (!buf)
		return STRATA_E_NOMEM;
	for (;;) {
		if (n == have) {
			if (have >= cap) {
				int c = fgetc(stdin);
				if (c == EOF)
					break; /* exactly cap bytes */
				strata_free(buf);
				return strata_fail(err, STRATA_E_USAGE,
						   "give a shorter input, or "
						   "split it",
						   "the standard input holds "
						   "more than %zu bytes", cap);
			}
			size_t grown = have * 2 < cap ? have * 2 : cap;
			char *b = strata_realloc(buf, grown + 1);
			if (!b) {
				strata_free(buf);
				return strata_fail(err, STRATA_E_NOMEM,
						   "free memory, or give a "
						   "shorter input",
						   "no memory for %zu bytes of "
						   "the standard input",
						   grown);
			}
			buf = b;
			have = grown;
		}
		size_t got = fread(buf + n, 1, have - n, stdin);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(stdin)) {
		strata_free(buf);
		return strata_fail(err, STRATA_E_IO, "check what feeds the "
				   "standard input",
				   "reading the standard input failed");
	}
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return STRATA_OK;
}
