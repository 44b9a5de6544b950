/* util.c - error printing and option-value parsing shared by the commands
 * (layer: cli). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"

int strata_cli_fail(const strata_error *err)
{
	strata_error_print(stderr, err);
	return err->code == STRATA_E_USAGE ? STRATA_EXIT_USAGE
					   : STRATA_EXIT_ERROR;
}

int strata_cli_output(const char *option, const char *path)
{
	strata_error e;
	if (strata_file_check_output(path, &e) == STRATA_OK)
		return 0;
	strata_error_prefix(&e, "%s", option);
	return strata_cli_fail(&e);
}

int strata_cli_usage(const char *cmd, const char *fmt, ...)
{
	strata_error e;
	va_list ap;
	va_start(ap, fmt);
	e.code = STRATA_E_USAGE;
	vsnprintf(e.message, sizeof e.message, fmt, ap);
	va_end(ap);
	snprintf(e.fix, sizeof e.fix, "run 'strata %s --help' for usage", cmd);
	return strata_cli_fail(&e);
}

strata_status strata_cli_parse_u64(const char *option, const char *text,
				   uint64_t *out, strata_error *err)
{
	char shown[64];
	strata_escape(shown, sizeof shown, text, strlen(text));
	if (!isdigit((unsigned char)text[0]))
		return strata_fail(err, STRATA_E_USAGE,
				   "give a whole non-negative number",
				   "%s: '%s' is not a non-negative integer",
				   option, shown);
	errno = 0;
	char *end;
	unsigned long long v = strtoull(text, &end, 10);
	if (*end != '\0')
		return strata_fail(err, STRATA_E_USAGE,
				   "give a whole non-negative number",
				   "%s: '%s' is not a non-negative integer",
				   option, shown);
	if (errno == ERANGE)
		return strata_fail(err, STRATA_E_USAGE,
				   "give a number below 2^64",
				   "%s: '%s' does not fit in 64 bits", option,
				   shown);
	*out = v;
	return STRATA_OK;
}

int strata_cli_parse_float(const char *cmd, const char *option,
			   const char *text, float lo, float hi, float *out)
{
	char *end;
	float x = strtof(text, &end);
	if (end == text || *end || !isfinite(x) || x < lo || x > hi)
		return strata_cli_usage(cmd, "%s: '%s' is not a number in "
					"[%g, %g]", option, text, lo, hi);
	*out = x;
	return 0;
}

void strata_cli_load_bar_init(strata_progress *bar,
			      const strata_cli_residency *r)
{
	strata_progress_init(bar, r->quiet ? NULL : stderr, "loading", 0);
	bar->bytes = true;
	bar->delay_ns = 1000000000ull;
}

void strata_cli_load_bar_update(void *bar, uint64_t done_bytes,
				uint64_t total_bytes)
{
	strata_progress *p = bar;
	p->total = total_bytes;
	strata_progress_update(p, done_bytes);
}
