/* forward_moe.c - the mixture-of-experts MLP (Mixtral, Qwen2-MoE,
 * Qwen3-MoE) over the kernel table (layer: infer).
 *
 * The router's logits come back to the host (rows x experts floats), where
 * the softmax and the top-k choice are made in double, as transformers does
 * in float32 on the softmax's output; every chosen expert then runs once
 * over all the rows routed to it (gathered into moe_in with the embedding
 * gather, which copies rows of any f32 table), and each output row is
 * scaled by its weight and added to its row of the residual stream.
 * Qwen2-MoE adds its shared expert, scaled by the sigmoid of its gate.
 * A layer whose routed experts are on the CPU (experts.c) runs them
 * through the expert store instead: cache hits here, misses there (all
 * of a layer's misses in one call of the CPU's experts slot).
 *
 * With strata__moe_group 1 the experts on the device (the layer's own,
 * or the cache's hits) go to strata_kernel_experts together, so a
 * backend can run them in a few launches (CUDA's grouped decode kernels,
 * docs/cuda.md "Grouped experts"); they still add to x in the same order,
 * and where the backend declines the call the wrapper runs them one at a
 * time exactly as expert_run does (the CPU's bits are unchanged).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "infer/forward_internal.h"

/* 1: a layer's device experts in one strata_kernel_experts call, the
 * default since the H200 measured it (2026-12-02, an 8-layer
 * Qwen3-30B-A3B-shaped Q8_0 model: resident decode 1.202 ms/token against
 * 2.843 one expert at a time; with the experts on the CPU and a 96-slot
 * cache 1.922 against 2.931); 0: each expert its own kernels (expert_run),
 * to compare (bench_forward --moe-group; the tests set it themselves). */
int strata__moe_group = 1;

/* Hits gathered for one strata_kernel_experts call: passed on when full,
 * before a streamed expert runs (its slot's bytes are rewritten by the
 * next stream) and at the end, so the experts add to x in their order. */
#define GROUP_MAX 64u
typedef struct group {
	strata_kernel_expert e[GROUP_MAX];
	uint32_t count;
} group;

uint64_t strata__forward_moe_host_bytes(const strata_infer_hparams *hp,
					uint32_t rows)
{
	if (!hp->experts)
		return 0;
	return (uint64_t)rows * hp->experts * sizeof(float) +
	       (uint64_t)rows * hp->experts_used *
		       (sizeof(int32_t) + sizeof(float));
}

/* Row r's experts_used choices from its logits: softmax, the largest
 * (ties: the lower index, as torch.topk on CPU), renormalised when the
 * model says. */
static void route_row(const strata_infer_hparams *hp, const float *logits,
		      uint32_t *chosen, float *weight)
{
	double max = -INFINITY, sum = 0.0, p[4096];
	for (uint32_t e = 0; e < hp->experts; e++)
		max = logits[e] > max ? logits[e] : max;
	for (uint32_t e = 0; e < hp->experts; e++)
		sum += (p[e] = exp((double)logits[e] - max));
	double picked = 0.0;
	for (uint32_t k = 0; k < hp->experts_used; k++) {
		uint32_t best = 0;
		double bp = -1.0;
		for (uint32_t e = 0; e < hp->experts; e++)
			if (p[e] > bp) {
				bp = p[e];
				best = e;
			}
		chosen[k] = best;
		weight[k] = (float)(bp / sum);
		picked += bp / sum;
		p[best] = -2.0; /* taken */
	}
	for (uint32_t k = 0; hp->norm_topk_prob && k < hp->experts_used; k++)
		weight[k] = (float)(weight[k] / picked);
}

/* Routes n rows: moe_rows / moe_weights grouped by expert, count[e] rows
 * each. */
static void route(strata_forward *f, uint32_t n, uint32_t *count)
{
	const strata_infer_hparams *hp = f->hp;
	uint32_t chosen[4096];
	float weight[4096];
	uint32_t *first = count + hp->experts; /* scratch: offsets */
	memset(count, 0, hp->experts * sizeof *count);
	int32_t *ids = f->moe_rows;
	float *ws = f->moe_weights;
	/* two passes: counts, then each choice at its expert's offset */
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			uint32_t at = 0;
			for (uint32_t e = 0; e < hp->experts; e++) {
				first[e] = at;
				at += count[e];
			}
		}
		for (uint32_t r = 0; r < n; r++) {
			route_row(hp, f->moe_host + (uint64_t)r * hp->experts,
				  chosen, weight);
			for (uint32_t k = 0; k < hp->experts_used; k++) {
				uint32_t e = chosen[k];
				if (pass == 0) {
					count[e]++;
					continue;
				}
				ids[first[e]] = (int32_t)r;
				ws[first[e]++] = weight[k];
			}
		}
	}
}

/* x[rows[i]] += weight[i] * out[i] for the m rows of out of the n rows
 * of the pass: one launch (two a row made a 512-token prefill of a
 * Qwen3-30B-A3B-shaped layer 8,192 launches). */
static strata_status scatter_add(strata_forward *f, const int32_t *rows,
				 const float *weight, uint32_t n, uint32_t m,
				 strata_error *err)
{
	return strata_kernel_scatter_add(f->c, f->x, n, f->moe_out, rows,
					 weight, m, f->hp->dim, err);
}

/* One expert (its gate, up and down) over the m rows routed to it (their
 * ids in rows). */
static strata_status expert_run(strata_forward *f, const strata_weight *gate,
				const strata_weight *up,
				const strata_weight *down, uint32_t n,
				const int32_t *rows, const float *weight,
				uint32_t m, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_weight normed = strata_weight_f32(f->xb, n, hp->dim);
	strata_status st = strata_kernel_embed(f->c, f->moe_in, &normed, rows,
					       m, err);
	if (st == STRATA_OK)
		st = strata_kernel_gated(f->c, f->hb, f->moe_in, NULL, NULL,
					 gate, up, f->hb2, m, err);
	if (st == STRATA_OK)
		st = strata_kernel_matmul(f->c, f->moe_out, f->hb, down, NULL,
					  m, err);
	return st ? st : scatter_add(f, rows, weight, n, m, err);
}

static strata_status group_flush(strata_forward *f, group *g, uint32_t n,
				 strata_error *err)
{
	const strata_kernel_experts_scratch s = {f->moe_in, f->hb, f->hb2,
						 f->moe_out};
	strata_status st = strata_kernel_experts(f->c, f->x, f->xb, n, g->e,
						 g->count, &s, err);
	g->count = 0;
	return st;
}

/* One expert over its m rows: into g where grouping (g not NULL), else
 * its own kernels now. */
static strata_status expert_add(strata_forward *f, group *g,
				const strata_weight *gate,
				const strata_weight *up,
				const strata_weight *down, uint32_t n,
				const int32_t *rows, const float *weight,
				uint32_t m, strata_error *err)
{
	if (!g)
		return expert_run(f, gate, up, down, n, rows, weight, m, err);
	g->e[g->count++] = (strata_kernel_expert){*gate, *up, *down, rows,
						  weight, m};
	return g->count == GROUP_MAX ? group_flush(f, g, n, err) : STRATA_OK;
}

/* Expert e of the layer's own weights (from the source). */
static strata_status expert(strata_forward *f, group *g,
			    const strata_forward_weights *w, uint32_t e,
			    uint32_t n, const int32_t *rows,
			    const float *weight, uint32_t m, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_weight gate = {w->expert_elem[STRATA_EXPERT_GATE],
				    w->expert[STRATA_EXPERT_GATE][e],
				    hp->moe_ffn, hp->dim};
	const strata_weight up = {w->expert_elem[STRATA_EXPERT_UP],
				  w->expert[STRATA_EXPERT_UP][e], hp->moe_ffn,
				  hp->dim};
	const strata_weight down = {w->expert_elem[STRATA_EXPERT_DOWN],
				    w->expert[STRATA_EXPERT_DOWN][e], hp->dim,
				    hp->moe_ffn};
	return expert_add(f, g, &gate, &up, &down, n, rows, weight, m, err);
}

/* The layer's missed experts one at a time on the CPU (the path before
 * strata__experts_cpu_misses, kept as its reference: knob 0). */
static strata_status misses_each(strata_forward *f, uint32_t layer,
				 uint32_t n, const uint32_t *count,
				 const bool *miss, strata_error *err)
{
	strata_status st = STRATA_OK;
	for (uint32_t e = 0, at = 0; st == STRATA_OK && e < f->hp->experts;
	     at += count[e], e++)
		if (miss[e])
			st = strata__experts_cpu(f->experts, layer, e, n,
						 f->moe_rows + at,
						 f->moe_weights + at, count[e],
						 err);
	return st;
}

/* A layer whose experts are on the CPU (experts.c): hits run here from
 * the device cache; the misses on the CPU over the normed rows read back
 * (f->xb, already there: the router's read-back waited for it), their sum
 * added to the residual stream in one step; then the missed experts may
 * enter the cache. */
static strata_status experts_apart(strata_forward *f, group *g,
				   uint32_t layer, uint32_t n,
				   const uint32_t *count, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_infer_experts *x = f->experts;
	bool miss[4096];
	uint32_t at = 0, misses = 0;
	strata_status st = STRATA_OK;
	for (uint32_t e = 0; st == STRATA_OK && e < hp->experts; e++) {
		strata_weight dw[3];
		miss[e] = false;
		strata_expert_route r =
			count[e] ? strata__experts_route(x, layer, e, count[e],
							 f->c, dw, err, &st)
				 : STRATA_EXPERT_MISS;
		/* a streamed expert runs now, after the hits before it */
		bool now = r == STRATA_EXPERT_STREAMED;
		if (count[e] && now && g && g->count && st == STRATA_OK)
			st = group_flush(f, g, n, err);
		if (count[e] && r != STRATA_EXPERT_MISS && st == STRATA_OK)
			st = expert_add(f, now ? NULL : g,
					&dw[STRATA_EXPERT_GATE],
					&dw[STRATA_EXPERT_UP],
					&dw[STRATA_EXPERT_DOWN], n,
					f->moe_rows + at, f->moe_weights + at,
					count[e], err);
		else if (count[e])
			misses += miss[e] = true;
		at += count[e];
	}
	if (st == STRATA_OK && g && g->count)
		st = group_flush(f, g, n, err);
	if (st || !misses)
		return st;
	uint64_t bytes = (uint64_t)n * hp->dim * sizeof(float);
	strata__experts_begin(x, n);
	uint64_t t0 = strata_now_ns();
	st = strata__cpu_experts_grouped
		     ? strata__experts_cpu_misses(x, layer, n, count, miss,
						  f->moe_rows, f->moe_weights,
						  err)
		     : misses_each(f, layer, n, count, miss, err);
	atomic_fetch_add_explicit(&strata__experts_cpu_ns,
				  strata_now_ns() - t0, memory_order_relaxed);
	/* the sum into moe_out after the hits' kernels that use it, then
	 * added; the host sum is the next layer's again: wait for it */
	if (st == STRATA_OK)
		st = strata_compute_upload(f->c, f->moe_out,
					   strata__experts_sum(x), bytes, err);
	if (st == STRATA_OK)
		st = strata_kernel_add(f->c, f->x, f->moe_out,
				       (uint64_t)n * hp->dim, err);
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	for (uint32_t e = 0; st == STRATA_OK && e < hp->experts; e++)
		if (miss[e])
			st = strata__experts_admit(x, layer, e, err);
	return st;
}

/* Qwen2-MoE: x += sigmoid(xb . g) * down(silu(gate xb) * up xb). */
static strata_status shared_expert(strata_forward *f,
				   const strata_forward_weights *w, uint32_t n,
				   strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_status st = strata_kernel_gated(f->c, f->hb, f->xb, NULL, NULL,
					       &w->sh_gate, &w->sh_up, f->hb2,
					       n, err);
	if (st == STRATA_OK)
		st = strata_kernel_matmul(f->c, f->moe_out, f->hb, &w->sh_down,
					  NULL, n, err);
	if (st == STRATA_OK)
		st = strata_kernel_matmul(f->c, f->moe_logits, f->xb,
					  &w->sh_router, NULL, n, err);
	if (st == STRATA_OK)
		st = strata_compute_download(f->c, f->moe_host, f->moe_logits,
					     (uint64_t)n * sizeof(float), err);
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	for (uint32_t r = 0; st == STRATA_OK && r < n; r++) {
		f->moe_rows[r] = (int32_t)r;
		f->moe_weights[r] = (float)(1.0 / (1.0 + exp(-(double)f->moe_host[r])));
	}
	(void)hp;
	return st ? st : scatter_add(f, f->moe_rows, f->moe_weights, n, n, err);
}

strata_status strata__forward_moe(strata_forward *f,
				  const strata_forward_weights *w, uint32_t n,
				  strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	uint32_t count[2 * 4096];
	strata_status st = strata_kernel_rmsnorm(f->c, f->xb, f->x,
						 &w->ffn_norm, n, hp->norm_eps,
						 err);
	if (st == STRATA_OK)
		st = strata_kernel_matmul(f->c, f->moe_logits, f->xb,
					  &w->router, NULL, n, err);
	if (st == STRATA_OK)
		st = strata_compute_download(f->c, f->moe_host, f->moe_logits,
					     (uint64_t)n * hp->experts *
						     sizeof(float),
					     err);
	bool apart = strata__experts_apart(f->experts, w->layer);
	if (st == STRATA_OK && apart) /* the CPU's input rows */
		st = strata_compute_download(f->c,
					     strata__experts_input(f->experts),
					     f->xb,
					     (uint64_t)n * hp->dim * sizeof(float),
					     err);
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	if (st)
		return st;
	route(f, n, count);
	uint32_t at = 0;
	group grouped, *g = strata__moe_group ? &grouped : NULL;
	grouped.count = 0;
	if (apart)
		st = experts_apart(f, g, w->layer, n, count, err);
	for (uint32_t e = 0; !apart && st == STRATA_OK && e < hp->experts; e++) {
		if (count[e])
			st = expert(f, g, w, e, n, f->moe_rows + at,
				    f->moe_weights + at, count[e], err);
		at += count[e];
	}
	if (!apart && st == STRATA_OK && g && g->count)
		st = group_flush(f, g, n, err);
	/* the expert outputs are added before the shared expert reuses the
	 * routing arrays: the device runs them in order, and the host
	 * arrays are only rewritten after the next finish */
	if (st == STRATA_OK && hp->shared_ffn)
		st = strata_compute_finish(f->c, err);
	if (st == STRATA_OK && hp->shared_ffn)
		st = shared_expert(f, w, n, err);
	return st;
}
