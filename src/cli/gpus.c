/* gpus.c - the --gpus all|N|LIST option of `strata batch` and `strata
 * plan`: device indices and names (layer: cli). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/gpus.h"

static strata_status bad(strata_error *err, const char *fix,
			 const char *spec, const char *what)
{
	char shown[64];
	strata_escape(shown, sizeof shown, spec, strlen(spec));
	return strata_fail(err, STRATA_E_USAGE, fix, "--gpus: '%s' %s", shown,
			   what);
}

/* "K,L,...": every entry a decimal index, none twice. */
static strata_status parse_list(const char *spec, uint32_t *idx, uint32_t *n,
				strata_error *err)
{
	*n = 0;
	for (const char *p = spec; *p;) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p || (*p < '0' || *p > '9') ||
		    (*end && *end != ',') || (*end == ',' && !end[1]) ||
		    *n == STRATA_CLI_MAX_DEVICES || v > 1u << 16)
			return bad(err, "give device indices like 0,1 (at most "
				   "64, each below 65537)", spec,
				   "is not a list of device indices");
		for (uint32_t i = 0; i < *n; i++)
			if (idx[i] == v)
				return strata_fail(err, STRATA_E_USAGE,
						   "list each device once",
						   "--gpus: device %lu is listed "
						   "twice", v);
		idx[(*n)++] = (uint32_t)v;
		p = *end ? end + 1 : end;
	}
	return STRATA_OK;
}

static void fill(bool cuda, const uint32_t *idx, uint32_t n,
		 strata_cli_gpus *g)
{
	g->count = n;
	g->cuda = cuda;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(g->names[i], sizeof g->names[i], "%s:%u",
			 cuda ? "cuda" : "cpu", cuda ? idx[i] : i);
		g->ptrs[i] = g->names[i];
		g->index[i] = cuda ? idx[i] : 0;
	}
}

/* ------------------------------------------------------------------------ */

strata_status strata_cli_gpus_parse(const char *spec, bool cuda,
				    uint32_t visible, bool check_visible,
				    strata_cli_gpus *g, strata_error *err)
{
	uint32_t idx[STRATA_CLI_MAX_DEVICES], n = 0;
	if (!strcmp(spec, "all")) {
		if (visible == 0)
			return bad(err, "give a count instead (--gpus N)", spec,
				   "needs a visible CUDA device and none is");
		for (n = 0; n < visible && n < STRATA_CLI_MAX_DEVICES; n++)
			idx[n] = n;
	} else if (!strchr(spec, ',')) {
		char *end;
		unsigned long v = strtoul(spec, &end, 10);
		if (end != spec && !*end && v == 0)
			return bad(err, "a count starts at 1: --gpus 1 is the "
				   "first device alone, a list like 0,1 "
				   "names devices", spec, "is a count of none");
		if (end == spec || *spec < '0' || *spec > '9' || *end ||
		    v > STRATA_CLI_MAX_DEVICES)
			return bad(err, "give all, a count from 1 to 64, or a "
				   "list of indices like 0,1", spec,
				   "is not all, a count or a list");
		for (n = 0; n < v; n++)
			idx[n] = n;
	} else {
		strata_status st = parse_list(spec, idx, &n, err);
		if (st)
			return st;
	}
	for (uint32_t i = 0; cuda && check_visible && i < n; i++)
		if (idx[i] >= visible)
			return strata_fail(err, STRATA_E_USAGE,
					   "list visible devices (see "
					   "CUDA_VISIBLE_DEVICES)",
					   "--gpus: cuda:%u is not visible (%u "
					   "CUDA devices)", idx[i], visible);
	fill(cuda, idx, n, g);
	return STRATA_OK;
}

void strata_cli_gpus_single(bool cuda, uint32_t index, strata_cli_gpus *g)
{
	fill(cuda, &index, 1, g);
}
