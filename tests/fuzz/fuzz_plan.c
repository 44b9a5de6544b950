/* fuzz_plan.c - libFuzzer target for the plan layer's untrusted inputs:
 * tensor names (topology rule), the sizing over any layout they make, the
 * planner over arbitrary budgets, and /proc/meminfo text. Checks the
 * sizing invariants on every input: the window grows with depth, depth 1
 * is the largest unit, no window exceeds every unit together. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strata/plan.h"

#define MAX_NAMES 256

static strata_status bytes_of(void *ctx, size_t i, uint64_t *out,
			      strata_error *err)
{
	(void)err;
	const uint8_t *seed = ctx;
	*out = (uint64_t)seed[i % 16] * 256u + i; /* varied, small */
	return STRATA_OK;
}

static void check_layout(strata_plan_layout *l)
{
	strata_plan_layout_info info;
	strata_plan_layout_get_info(l, &info);
	uint64_t prev = 0, w;
	for (uint64_t d = 0; d < 6; d++) {
		if (strata_plan_layout_window(l, d, &w, NULL) != STRATA_OK)
			return;
		if (w < prev || w > info.all_units_bytes)
			abort();
		if (d == 1 && w != info.largest_unit_bytes)
			abort();
		prev = w;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t avail;
	strata_plan_parse_meminfo((const char *)data, size, &avail, NULL);
	if (size < 16)
		return 0;
	uint8_t seed[16];
	memcpy(seed, data, 16);
	char *text = malloc(size - 16 + 1);
	memcpy(text, data + 16, size - 16);
	text[size - 16] = '\0';
	strata_plan_param params[MAX_NAMES];
	size_t n = 0;
	for (char *s = text, *next; s && n < MAX_NAMES; s = next) {
		next = strchr(s, '\n');
		if (next)
			*next++ = '\0';
		strata_owner o;
		if (strata_topology_owner(s, &o, NULL) != STRATA_OK)
			continue;
		if (o.kind == STRATA_OWNER_UNIT &&
		    (o.group_len > strlen(s) || o.group < s))
			abort();
		params[n++] = (strata_plan_param){.name = s, .owner = o};
	}
	const char *excl[] = {"*.x*"};
	strata_plan_layout *l = NULL;
	if (strata_plan_layout_create(params, n, bytes_of, seed, excl,
				      seed[0] & 1, &l, NULL) == STRATA_OK) {
		check_layout(l);
		strata_plan_options o = {
			.device = seed[1] & 1 ? STRATA_PLAN_DEVICE_CUDA
					      : STRATA_PLAN_DEVICE_CPU,
			.has_device_budget = true,
			.device_budget_bytes = (uint64_t)seed[2] << (seed[3] % 40),
			.has_host_budget = true,
			.host_budget_bytes = (uint64_t)seed[4] << (seed[5] % 40),
			.mode = (strata_residency_mode)(seed[6] % 4),
			.host_depth = seed[7] % 5,
		};
		strata_plan_arch a = {.known = seed[8] & 1, .layers = seed[9],
				      .hidden = seed[10], .intermediate = seed[11],
				      .heads = seed[12], .kv_heads = seed[13],
				      .head_dim = seed[14], .vocab = seed[15]};
		strata_plan_machine m = {0};
		strata_plan *p = NULL;
		strata_plan_create(l, &a, STRATA_DTYPE_BF16, &o, &m, &p, NULL);
		if (p && strata_plan_selected(p) &&
		    !strata_plan_selected(p)->fits)
			abort();
		strata_plan_destroy(p);
	}
	strata_plan_layout_destroy(l);
	free(text);
	return 0;
}
