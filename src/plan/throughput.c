/* throughput.c - predicted throughput against the batch: the plan of the
 * same inputs at each batch size, with its selection, its decode step and
 * the tokens per second that make (issue 19) (layer: plan).
 *
 * Each point is a whole plan (strata_plan_create), not a scaling of one
 * figure: the KV cache and the workspaces grow with the batch and may push
 * the selection to another mode, or past the budgets. The step's time is
 * the candidate's own prediction (placement.c's pass model), in which a
 * pass streams the weights once for all the batch's sequences: in the
 * streamed modes a larger batch spreads one pass of the weights over more
 * tokens, which is where their throughput comes from (FlexGen).
 */
#include <string.h>

#include "plan/internal.h"

/* ------------------------------------------------------------------------ */

/* Inserts b into the increasing list v[0 .. *n) unless there or full. */
static void add_batch(uint64_t *v, size_t *n, size_t cap, uint64_t b)
{
	size_t i = 0;
	while (i < *n && v[i] < b)
		i++;
	if ((i < *n && v[i] == b) || *n == cap)
		return;
	memmove(v + i + 1, v + i, (*n - i) * sizeof *v);
	v[i] = b;
	(*n)++;
}

static void point_of(const strata_plan *q, uint64_t batch,
		     strata_plan_batch_point *pt)
{
	memset(pt, 0, sizeof *pt);
	pt->batch = batch;
	const strata_plan_candidate *c = q ? strata_plan_selected(q) : NULL;
	if (!c)
		return;
	pt->fits = true;
	strata_plan_candidate_name(c, pt->selected, sizeof pt->selected);
	pt->decode_ms = c->predicted_decode_ms;
	/* from the step's own prediction, a token per sequence */
	pt->tokens_per_second = c->predicted_decode_ms > 0
					? (double)batch * 1e3 / c->predicted_decode_ms
					: 0.0;
	pt->device_bytes = c->device_bytes;
	pt->host_bytes = c->host_bytes;
	pt->kv_cache_bytes = q->memory.kv_cache_bytes;
	pt->streamed_bytes = c->streamed_bytes;
}

/* ------------------------------------------------------------------------ */

strata_status strata_plan_batch_curve(const strata_plan *p, uint64_t max_batch,
				      strata_plan_batch_point *out, size_t cap,
				      size_t *count, strata_error *err)
{
	if (!p || !out || !count || !max_batch)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "batch curve: NULL argument or a largest "
				   "batch of 0");
	uint64_t batches[STRATA_PLAN_BATCH_POINTS_MAX];
	size_t n = 0;
	if (cap > STRATA_PLAN_BATCH_POINTS_MAX)
		cap = STRATA_PLAN_BATCH_POINTS_MAX;
	add_batch(batches, &n, cap, max_batch);
	if (p->options.shape.batch && p->options.shape.batch <= max_batch)
		add_batch(batches, &n, cap, p->options.shape.batch);
	for (uint64_t b = 1; b < max_batch && n < cap; b *= 2)
		add_batch(batches, &n, cap, b);
	*count = 0;
	for (size_t i = 0; i < n; i++) {
		strata_plan_options o = p->given;
		o.shape.batch = batches[i];
		strata_plan *q = NULL;
		strata_error e;
		strata_status st = strata_plan_create(p->layout, &p->arch,
						      p->weight_dtype, &o,
						      &p->machine, &q, &e);
		if (st != STRATA_OK && !q) {
			*err = e;
			return strata_error_prefix(err, "--batch %llu",
						   (unsigned long long)batches[i]);
		}
		point_of(q, batches[i], &out[i]);
		strata_plan_destroy(q);
	}
	*count = n;
	return STRATA_OK;
}

uint64_t strata_plan_batch_best(const strata_plan_batch_point *points,
				size_t count)
{
	uint64_t best = 0;
	double rate = 0.0;
	for (size_t i = 0; points && i < count; i++)
		if (points[i].fits && (best == 0 ||
				       points[i].tokens_per_second > rate)) {
			best = points[i].batch;
			rate = points[i].tokens_per_second;
		}
	return best;
}

void strata_plan_batch_curve_json(const strata_plan_batch_point *points,
				  size_t count, strata_json *j)
{
	strata_json_array_begin(j);
	for (size_t i = 0; i < count; i++) {
		const strata_plan_batch_point *pt = &points[i];
		strata_json_object_begin(j);
		strata_json_kv_u64(j, "batch", pt->batch);
		strata_json_kv_bool(j, "fits", pt->fits);
		strata_json_key(j, "selected");
		if (pt->fits)
			strata_json_string(j, pt->selected);
		else
			strata_json_null(j);
		strata_json_kv_double(j, "predicted_decode_ms", pt->decode_ms);
		strata_json_kv_double(j, "tokens_per_second",
				      pt->tokens_per_second);
		strata_json_kv_u64(j, "device_bytes", pt->device_bytes);
		strata_json_kv_u64(j, "host_bytes", pt->host_bytes);
		strata_json_kv_u64(j, "kv_cache_bytes", pt->kv_cache_bytes);
		strata_json_kv_u64(j, "streamed_bytes", pt->streamed_bytes);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
}
