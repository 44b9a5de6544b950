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

int strata_cli_generation_option(const char *cmd, const char *opt,
				 const char *v, const strata_cli_generation *g,
				 bool *known)
{
	strata_sampler_params *sp = g->sp;
	if (!strcmp(opt, "--temperature"))
		return strata_cli_parse_float(cmd, opt, v, 0, 1e6f,
					      &sp->temperature);
	if (!strcmp(opt, "--top-p"))
		return strata_cli_parse_float(cmd, opt, v, 1e-9f, 1, &sp->top_p);
	if (!strcmp(opt, "--min-p"))
		return strata_cli_parse_float(cmd, opt, v, 0, 1, &sp->min_p);
	if (!strcmp(opt, "--repeat-penalty"))
		return strata_cli_parse_float(cmd, opt, v, 1e-6f, 1e6f,
					      &sp->repeat_penalty);
	if (strcmp(opt, "-n") && strcmp(opt, "--top-k") &&
	    strcmp(opt, "--seed") && strcmp(opt, "--threads")) {
		*known = false;
		return 0;
	}
	uint64_t u;
	strata_error err;
	if (strata_cli_parse_u64(opt, v, &u, &err))
		return strata_cli_fail(&err);
	if (!strcmp(opt, "-n"))
		*g->n = u;
	else if (!strcmp(opt, "--top-k"))
		sp->top_k = u > UINT32_MAX ? UINT32_MAX : (uint32_t)u;
	else if (!strcmp(opt, "--seed"))
		sp->seed = u, *g->seed_given = true;
	else
		*g->threads = u;
	if (*g->n > (1u << 24) || *g->threads > 4096)
		return strata_cli_usage(cmd, "%s: '%s' is too large", opt, v);
	return 0;
}
