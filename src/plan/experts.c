/* experts.c - routed experts computed on the CPU from host memory with a
 * device cache of hot ones (llama.cpp's --n-cpu-moe, KTransformers): which
 * tensors they are, their exact host and cache bytes, and what they add to
 * every candidate's totals, fit and predicted times (layer: plan).
 *
 * Headers only: no payload byte is read. The prediction is stated in
 * docs/plan.md "Experts": routing is taken as uniform, so the cache holds
 * a token's expert with probability slots / (layers x experts); a miss
 * reads its expert once from host memory (decode) or computes its rows on
 * the CPU (prefill, the larger of the bytes over host memory bandwidth
 * and the products over the CPU's rate); a hit reads its slot on the
 * device; a missed expert a pass gives enough rows (a prompt's) is copied
 * to the device through a stream slot instead, and costs the copy. The
 * layer waits for its experts, so these add to the pass. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/internal.h"

#define MAX_LAYERS 4096u

/* ------------------------------------------------------------------------ */

int64_t strata_plan_expert_layer(const char *name)
{
	unsigned l;
	int at = 0;
	if (sscanf(name, "blk.%u.%n", &l, &at) == 1 && at > 0) {
		const char *r = name + at;
		return (!strcmp(r, "ffn_gate_exps.weight") ||
			!strcmp(r, "ffn_up_exps.weight") ||
			!strcmp(r, "ffn_down_exps.weight"))
			       ? (int64_t)l
			       : -1;
	}
	at = 0;
	if (sscanf(name, "model.layers.%u.%n", &l, &at) == 1 && at > 0) {
		const char *r = name + at;
		if (!strncmp(r, "mlp.experts.", 12) ||
		    !strncmp(r, "block_sparse_moe.experts.", 25))
			return (int64_t)l;
	}
	return -1;
}

void strata_plan_experts_globs_free(char **globs, size_t n)
{
	for (size_t i = 0; globs && i < n; i++)
		strata_free(globs[i]);
	strata_free(globs);
}

/* The globs of layers [0, layers) of the catalog's naming: one for all of
 * them when every expert layer is taken. */
static strata_status make_globs(bool gguf, uint64_t layers, bool all,
				char ***out, size_t *n, strata_error *err)
{
	size_t count = all ? 1 : (size_t)layers;
	char **g = strata_calloc_or_error(count ? count : 1, sizeof *g,
					  "expert globs", err);
	if (!g)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < count; i++) {
		char buf[96];
		if (all)
			snprintf(buf, sizeof buf, "%s",
				 gguf ? "blk.*.ffn_*_exps.weight"
				      : "model.layers.*.experts.*");
		else
			snprintf(buf, sizeof buf,
				 gguf ? "blk.%zu.ffn_*_exps.weight"
				      : "model.layers.%zu.*experts.*",
				 i);
		size_t len = strlen(buf) + 1;
		if (!(g[i] = strata_alloc_or_error(len, "expert globs", err))) {
			strata_plan_experts_globs_free(g, i);
			return STRATA_E_NOMEM;
		}
		memcpy(g[i], buf, len);
	}
	*out = g;
	*n = count;
	return STRATA_OK;
}

/* One (layer, kind)'s per-expert host and device bytes and elements. */
typedef struct per_layer {
	uint64_t host, slot, elements;
} per_layer;

strata_status strata_plan_experts_size(const strata_catalog *c,
				       strata_plan_device device,
				       uint64_t layers, uint64_t slots,
				       uint64_t experts, uint64_t experts_used,
				       strata_plan_experts *out, char ***globs,
				       size_t *n_globs, strata_error *err)
{
	*globs = NULL;
	*n_globs = 0;
	uint64_t stream_rows = out->stream_rows; /* the caller's option */
	memset(out, 0, sizeof *out);
	if (!layers || !experts)
		return STRATA_OK;
	per_layer *pl = strata_calloc_or_error(MAX_LAYERS, sizeof *pl,
					       "expert sizes", err);
	if (!pl)
		return STRATA_E_NOMEM;
	uint64_t top = 0, host = 0;
	bool gguf = strata_catalog_format(c) == STRATA_FORMAT_GGUF;
	strata_status st = STRATA_OK;
	for (size_t i = 0; st == STRATA_OK && i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		int64_t l = strata_plan_expert_layer(t->name);
		if (l < 0 || l >= MAX_LAYERS)
			continue;
		top = (uint64_t)l + 1 > top ? (uint64_t)l + 1 : top;
		if ((uint64_t)l >= layers)
			continue;
		strata_plan_exec h, d;
		if ((st = strata_plan_tensor_exec(t, STRATA_PLAN_DEVICE_CPU, &h,
						  err)) ||
		    (st = strata_plan_tensor_exec(t, device, &d, err)))
			break;
		/* stacked: every expert one slab; else one expert */
		uint64_t per = gguf ? experts : 1, slab = d.bytes / per, a;
		if ((st = strata_checked_align(slab, &a, "expert slot bytes",
					       err)) ||
		    (st = strata_checked_add(host, h.bytes, &host,
					     "expert host bytes", err)))
			break;
		if (gguf || strstr(t->name, ".experts.0.")) {
			pl[l].host += h.bytes / per;
			pl[l].slot += a;
			pl[l].elements += t->elements / per;
		}
	}
	if (st == STRATA_OK) {
		uint64_t n = layers < top ? layers : top;
		uint64_t all = n * experts; /* more slots would sit empty */
		slots = slots < all ? slots : all;
		strata_plan_experts x = {.layers = n, .experts = experts,
					 .experts_used = experts_used,
					 .host_bytes = host,
					 .cache_slots = slots,
					 .stream_rows = stream_rows};
		for (uint64_t l = 0; l < n; l++) {
			x.expert_bytes = pl[l].host > x.expert_bytes ? pl[l].host : x.expert_bytes;
			x.slot_bytes = pl[l].slot > x.slot_bytes ? pl[l].slot : x.slot_bytes;
			x.expert_elements = pl[l].elements > x.expert_elements
						    ? pl[l].elements : x.expert_elements;
		}
		st = strata_checked_mul(slots, x.slot_bytes, &x.cache_bytes,
					"expert cache bytes", err);
		if (st == STRATA_OK && n)
			st = make_globs(gguf, n, n == top, globs, n_globs, err);
		if (st == STRATA_OK)
			*out = n ? x : (strata_plan_experts){0};
	}
	strata_free(pl);
	return st;
}

/* ------------------------------------------------------------------------ */
/* What they add to a candidate                                             */
/* ------------------------------------------------------------------------ */

/* Experts of one layer that `rows` rows route to at least once, routing
 * taken as uniform. */
static double distinct(const strata_plan_experts *x, double rows)
{
	double e = (double)x->experts, k = (double)x->experts_used;
	return e * (1.0 - pow(1.0 - k / e, rows));
}

uint64_t strata_plan_experts_stream_rows(const strata_plan *p)
{
	const strata_plan_experts *x = &p->options.experts;
	const strata_plan_options *o = &p->options;
	if (!x->layers)
		return 0;
	if (x->stream_rows)
		return x->stream_rows;
	if (o->device != STRATA_PLAN_DEVICE_CUDA || !(o->h2d_bandwidth > 0) ||
	    !(o->cpu_flops > 0) || !x->expert_elements)
		return 0;
	double copy = (double)x->slot_bytes / o->h2d_bandwidth;
	double row = 2.0 * (double)x->expert_elements / o->cpu_flops;
	double r = ceil(copy / row);
	return r < 2.0 ? 2 : r > 1e9 ? 1000000000u : (uint64_t)r;
}

/* Seconds the experts add to a pass of `rows` rows: each missed call on
 * the CPU (its bytes over host memory; in a prompt, or its products at
 * the CPU's rate), or copied and computed on the device when the pass
 * gives it stream rows or more. */
static double pass_seconds(const strata_plan *p, double rows, bool prefill)
{
	const strata_plan_experts *x = &p->options.experts;
	const strata_plan_options *o = &p->options;
	double all = (double)x->layers * (double)x->experts;
	double hit = all > 0 ? (double)x->cache_slots / all : 0.0;
	hit = hit > 1.0 ? 1.0 : hit;
	double per_layer = distinct(x, rows);
	double calls = per_layer * (double)x->layers;
	/* rows each called expert gets, routing uniform */
	double each = per_layer > 0 ? rows * (double)x->experts_used / per_layer
				    : 0.0;
	double bw = o->host_memory_bandwidth > 0 ? o->host_memory_bandwidth
						 : STRATA_PLAN_DEFAULT_CPU_MEM_BW;
	double cpu_one = (double)x->expert_bytes / bw;
	if (prefill && o->cpu_flops > 0)
		cpu_one = fmax(cpu_one, 2.0 * each * (double)x->expert_elements /
						o->cpu_flops);
	uint64_t sr = strata_plan_experts_stream_rows(p);
	if (sr && each >= (double)sr && o->h2d_bandwidth > 0)
		cpu_one = (double)x->slot_bytes / o->h2d_bandwidth;
	double dev_bytes = calls * hit * (double)x->slot_bytes;
	double dev = o->memory_bandwidth > 0 ? dev_bytes / o->memory_bandwidth
					     : 0.0;
	return calls * (1.0 - hit) * cpu_one + dev;
}

void strata__plan_experts_apply(const strata_plan *p, strata_plan_candidate *c)
{
	const strata_plan_experts *x = &p->options.experts;
	if (!x->layers)
		return;
	const strata_plan_budgets *b = &p->budgets;
	uint64_t cache = x->cache_bytes; /* and the stream slot, if any */
	if (strata_plan_experts_stream_rows(p))
		cache = strata_sat_add_u64(cache, x->slot_bytes);
	c->split_device_bytes[0] =
		strata_sat_add_u64(c->split_device_bytes[0], cache);
	c->device_bytes = c->split_device_bytes[0];
	c->host_weight_bytes = strata_sat_add_u64(c->host_weight_bytes,
						  x->host_bytes);
	c->host_bytes = strata_sat_add_u64(
		c->host_bytes, strata_sat_add_u64(x->host_bytes, x->scratch_bytes));
	bool placed = c->mode == STRATA_RESIDENCY_PLACEMENT;
	uint32_t devices = placed && c->devices ? c->devices : 1;
	c->fits_device = true;
	c->device_shortfall_bytes = 0;
	for (uint32_t d = 0; d < devices; d++) {
		uint64_t have = placed ? b->split_device_bytes[d]
				       : b->device_budget_bytes;
		uint64_t t = placed ? c->split_device_bytes[d] : c->device_bytes;
		if (t > have) {
			c->fits_device = false;
			if (t - have > c->device_shortfall_bytes)
				c->device_shortfall_bytes = t - have;
		}
	}
	c->fits_host = c->host_bytes <= b->host_budget_bytes;
	c->host_shortfall_bytes =
		c->fits_host ? 0 : c->host_bytes - b->host_budget_bytes;
	uint64_t both = strata_sat_add_u64(c->device_bytes, c->host_bytes);
	c->fits = c->fits_device && c->fits_host &&
		  (!b->ram_bytes || both <= b->ram_bytes);
	if (b->ram_bytes && both > b->ram_bytes && c->fits_device)
		c->device_shortfall_bytes = both - b->ram_bytes;
	double batch = (double)p->options.shape.batch;
	double chunk = batch * (double)p->options.shape.prefill_chunk;
	double dec = pass_seconds(p, batch, false) * 1e3;
	double pre = pass_seconds(p, chunk, true) * 1e3;
	c->predicted_decode_ms += dec;
	c->predicted_prefill_ms += pre;
	/* the experts are CPU work in the chain of each pass's terms */
	c->decode_cost.cpu_ms += dec;
	c->decode_cost.total_ms += dec;
	c->prefill_cost.cpu_ms += pre;
	c->prefill_cost.total_ms += pre;
	c->predicted_ms_per_forward += dec;
	double t = c->predicted_ms_per_forward / 1e3;
	c->tokens_per_second = t > 0 ? batch / t : 0.0;
}
