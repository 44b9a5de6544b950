/* plan_batch.c - strata plan's throughput against --batch: the plan's
 * inputs planned again at batch 1, 2, 4 ... up to the forward pass's most
 * sequences, shown as a table or a JSON key (issue 19) (layer: cli). */
#include <stdio.h>

#include "cli/commands.h"
#include "strata/infer.h"

static size_t curve(const strata_plan *p, strata_plan_batch_point *pts,
		    strata_error *err)
{
	size_t n = 0;
	if (strata_plan_batch_curve(p, STRATA_FORWARD_MAX_SEQUENCES, pts,
				    STRATA_PLAN_BATCH_POINTS_MAX, &n,
				    err) != STRATA_OK)
		return 0;
	return n;
}

void strata_cli_print_batch_curve(FILE *f, const strata_plan *p)
{
	strata_plan_batch_point pts[STRATA_PLAN_BATCH_POINTS_MAX];
	strata_error err;
	size_t n = curve(p, pts, &err);
	fprintf(f, "\nthroughput against --batch (predicted; a step decodes a "
		   "token of every sequence, one pass of the weights):\n");
	if (!n) {
		fprintf(f, "  not predicted: %s\n", err.message);
		return;
	}
	fprintf(f, "  %6s  %-22s %11s %12s %11s %11s\n", "batch", "selected",
		"decode ms", "tokens/s", "KV cache", "device");
	for (size_t i = 0; i < n; i++) {
		char kv[32], dev[32];
		if (!pts[i].fits) {
			fprintf(f, "  %6llu  %s\n",
				(unsigned long long)pts[i].batch,
				"(nothing fits)");
			continue;
		}
		fprintf(f, "  %6llu  %-22s %11.3f %12.1f %11s %11s\n",
			(unsigned long long)pts[i].batch, pts[i].selected,
			pts[i].decode_ms, pts[i].tokens_per_second,
			strata_size_format(pts[i].kv_cache_bytes, kv, sizeof kv),
			strata_size_format(pts[i].device_bytes, dev, sizeof dev));
	}
	uint64_t best = strata_plan_batch_best(pts, n);
	if (best)
		fprintf(f, "most tokens/s: --batch %llu\n",
			(unsigned long long)best);
}

void strata_cli_write_batch_curve(strata_json *j, const strata_plan *p)
{
	strata_plan_batch_point pts[STRATA_PLAN_BATCH_POINTS_MAX];
	strata_error err;
	size_t n = curve(p, pts, &err);
	strata_json_key(j, "throughput_by_batch");
	strata_plan_batch_curve_json(pts, n, j);
	strata_json_key(j, "best_batch");
	uint64_t best = strata_plan_batch_best(pts, n);
	if (best)
		strata_json_u64(j, best);
	else
		strata_json_null(j);
}
