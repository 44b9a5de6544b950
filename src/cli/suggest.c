/* suggest.c - "did you mean" for an unknown option: the command's own help
 * text is the list of what it accepts, so the suggestion can never name an
 * option the command does not take (layer: cli). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"

#define MAX_OPTION_BYTES 64

/* Edit distance (insert, delete, substitute, swap of neighbours) between
 * two short strings; anything over MAX_OPTION_BYTES counts as far. */
static size_t distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	if (n >= MAX_OPTION_BYTES || m >= MAX_OPTION_BYTES)
		return (size_t)-1;
	size_t d[MAX_OPTION_BYTES + 1][MAX_OPTION_BYTES + 1];
	for (size_t i = 0; i <= n; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[n][m];
}

/* How well a known option fits what was typed: 0 best; (size_t)-1 none.
 * An unambiguous abbreviation (--temp for --temperature) fits best, then
 * a typo within a third of the length. */
static size_t fit(const char *typed, const char *known)
{
	size_t n = strlen(typed);
	if (n >= 4 && !strncmp(typed, known, n))
		return 0;
	size_t d = distance(typed, known);
	size_t limit = strlen(known) / 3;
	return d <= (limit ? limit : 1) ? d : (size_t)-1;
}

/* The option names of a help text: words starting with '-' that open an
 * indented line ("  --top-k K   ..."), or follow ", " on it ("-n, --n"). */
static void best_option(const char *help, const char *typed, char *out,
			size_t cap)
{
	size_t best = (size_t)-1;
	int ties = 0;
	out[0] = '\0';
	for (const char *line = help; line && *line;) {
		const char *end = strchr(line, '\n');
		const char *p = line;
		while (*p == ' ')
			p++;
		while (p > line && *p == '-' && (!end || p < end)) {
			char name[MAX_OPTION_BYTES];
			size_t k = strcspn(p, " ,=\n[");
			if (k == 0 || k >= sizeof name)
				break;
			memcpy(name, p, k);
			name[k] = '\0';
			size_t f = strcmp(name, typed) ? fit(typed, name)
						       : (size_t)-1;
			if (f < best) {
				best = f;
				ties = 0;
				snprintf(out, cap, "%s", name);
			} else if (f == best && f != (size_t)-1 &&
				   strcmp(out, name)) {
				ties++;
			}
			p += k;
			if (strncmp(p, ", -", 3))
				break;
			p += 2;
		}
		line = end ? end + 1 : NULL;
	}
	if (ties)
		out[0] = '\0'; /* two as likely: name neither */
}

int strata_cli_unknown_option(const char *cmd, const char *opt,
			      void (*help)(FILE *))
{
	char *text = NULL;
	size_t len = 0;
	char guess[MAX_OPTION_BYTES] = "";
	FILE *f = help ? open_memstream(&text, &len) : NULL;
	if (f) {
		help(f);
		if (fclose(f) == 0 && text)
			best_option(text, opt, guess, sizeof guess);
	}
	free(text); /* open_memstream's buffer is the C library's */
	if (guess[0])
		return strata_cli_usage(cmd, "unknown option '%s' (did you "
					"mean '%s'?)", opt, guess);
	return strata_cli_usage(cmd, "unknown option '%s'", opt);
}
