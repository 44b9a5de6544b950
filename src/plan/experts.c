/* experts.c - routed experts computed on the CPU from host memory with a
 * device cache of hot ones (llama.cpp's --n-cpu-moe, KTransformers): which
 * tensors they are, their exact host and cache bytes, and what they add to
 * every candidate's totals, fit and predicted times (layer: plan).
 *
 * Headers only: no payload byte is read. The prediction is stated in
 * docs/plan.md "Experts" and follows what the expert store and the MoE
 * step do (src/infer/experts.c, forward_moe.c): a pass of R rows calls
 * each layer's experts with a binomial spread of rows (routing taken as
 * uniform and independent); a called expert is a cache hit with the
 * cache's share (decode: slots / every expert, or the share a run
 * measured; a prompt pass, which calls nearly every expert: the uniform
 * share), else streamed through the stream slot
 * when it has stream_rows rows, else computed on the CPU (its bytes at
 * the CPU's rate for its type, or its products, and its kernels). On cuda
 * the device's queue runs the hits and streamed experts while the CPU
 * runs the misses (after the host has launched the device's); the layer
 * waits for both, then for the admissions' copies into the cache, and
 * makes one round trip of the residual rows.
 * The layer waits for its experts, so these add to the pass. */
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
	uint64_t stream_rows = out->stream_rows; /* the caller's options */
	double hit_rate = out->hit_rate, admit_rate = out->admit_rate;
	memset(out, 0, sizeof *out);
	if (!layers || !experts)
		return STRATA_OK;
	per_layer *pl = strata_calloc_or_error(MAX_LAYERS, sizeof *pl,
					       "expert sizes", err);
	if (!pl)
		return STRATA_E_NOMEM;
	uint64_t top = 0, host = 0;
	strata_block_type *type = strata_calloc_or_error(
		MAX_LAYERS, sizeof *type, "expert types", err);
	if (!type) {
		strata_free(pl);
		return STRATA_E_NOMEM;
	}
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
			strata_block_type b = STRATA_BLOCK_F32;
			if (!h.convert && !strata_dtype_block(t->dtype, &b))
				b = STRATA_BLOCK_F32;
			if (!pl[l].host)
				type[l] = b;
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
					 .stream_rows = stream_rows,
					 .hit_rate = hit_rate,
					 .admit_rate = admit_rate};
		for (uint64_t l = 0; l < n; l++) {
			if (pl[l].host > x.expert_bytes)
				x.type = type[l];
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
	strata_free(type);
	return st;
}

/* ------------------------------------------------------------------------ */
/* What they add to a candidate                                             */
/* ------------------------------------------------------------------------ */

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

/* The kernels of one expert: on the CPU the rows' gather, gate/up and
 * down (then the pool's finish); on the device the same and the
 * scatter-add of its rows (src/infer/experts.c, forward_moe.c). */
#define CPU_KERNELS_PER_EXPERT 3.0
#define DEVICE_KERNELS_PER_EXPERT 4.0

/* The share of routed calls the cache hits in decode: the caller's
 * measured one, else uniform routing's slots / (layers x experts). The
 * store keeps the most routed experts (its victim is the least routed),
 * which under uniform routing are any `slots` of them. */
static double uniform_share(const strata_plan_experts *x)
{
	double all = (double)x->layers * (double)x->experts;
	double h = all > 0 ? (double)x->cache_slots / all : 0.0;
	return h < 1.0 ? h : 1.0;
}

static double decode_share(const strata_plan_experts *x)
{
	if (x->hit_rate > 0)
		return x->hit_rate < 1.0 ? x->hit_rate : 1.0;
	return uniform_share(x);
}

/* Seconds of one expert's products over m rows at bytes / gemv and
 * 2 x m x elements / gemm, the larger (one weight read, m rows). */
static double products(double bytes, double elements, double m, double gemv,
		       double gemm)
{
	double r = gemv > 0 ? bytes / gemv : 0.0;
	double c = gemm > 0 ? 2.0 * m * elements / gemm : 0.0;
	return r > c ? r : c;
}

/* One layer of a pass of R rows, routing uniform and independent: an
 * expert gets m rows with the binomial probability of m of R draws at
 * used / experts (each row picks `used` distinct experts), so a layer
 * calls experts x (1 - (1 - used/experts)^R) of them; each called one is
 * a hit with the cache's share, else streamed when it has stream_rows
 * rows or more, else computed on the CPU. Fills the per-layer counts and
 * the seconds of the CPU's misses and of the device's hits and streamed
 * ones (their copies through the stream slot in order with their
 * products on the device's queue). */
static void layer_figures(const strata_plan *p, double R, double h,
			  double link, double cpu_scale,
			  strata_plan_experts_figures *f, double *cpu_s,
			  double *dev_s)
{
	const strata_plan_experts *x = &p->options.experts;
	const strata_plan_options *o = &p->options;
	double E = (double)x->experts, q = (double)x->experts_used / E;
	double sr = (double)strata_plan_experts_stream_rows(p);
	double el = (double)x->expert_elements, hb = (double)x->expert_bytes;
	double db = hb; /* the cache and the CPU hold one form (infer) */
	double cg, cm, dg, dm;
	strata__plan_type_rates(p, true, x->type, &cg, &cm, NULL);
	strata__plan_type_rates(p, false, x->type, &dg, &dm, NULL);
	bool cuda = o->device == STRATA_PLAN_DEVICE_CUDA;
	double cl = o->cpu_launch_seconds, dl = cuda ? o->device_launch_seconds
						     : o->cpu_launch_seconds;
	*cpu_s = *dev_s = 0.0;
	/* every expert gets every row when used = experts: one term */
	uint64_t n = R < 1.0 || q >= 1.0 ? 1 : (uint64_t)llround(R);
	double mean = (double)n * q, sd = sqrt(mean * (1.0 - q));
	double top = fmin((double)n, mean + 12.0 * sd + 16.0);
	for (uint64_t m = 1; (double)m <= top; m++) {
		/* one row calls exactly `used` experts: no rounding there */
		double called =
			n == 1 ? (double)x->experts_used
			       : E * exp(lgamma((double)n + 1) -
					 lgamma((double)m + 1) -
					 lgamma((double)(n - m) + 1) +
					 (double)m * log(q) +
					 (double)(n - m) * log1p(-q));
		double rows = q >= 1.0 ? R : (double)m;
		if (called <= 0)
			continue;
		double hits = called * h, miss = called - hits;
		f->calls += called;
		f->hits += hits;
		*dev_s += hits * (products(db, el, rows, dg, dm) +
				  DEVICE_KERNELS_PER_EXPERT * dl);
		if (sr > 0 && rows >= sr) {
			f->streamed += miss;
			*dev_s += miss * ((link > 0 ? db / link : 0.0) +
					  products(db, el, rows, dg, dm) +
					  DEVICE_KERNELS_PER_EXPERT * dl);
		} else {
			f->misses += miss;
			*cpu_s += miss * (products(hb * cpu_scale, el, rows, cg, cm) +
					  CPU_KERNELS_PER_EXPERT * cl);
		}
	}
}

void strata_plan_experts_pass(const strata_plan *p, double rows, bool prefill,
			      strata_plan_experts_figures *out)
{
	const strata_plan_experts *x = &p->options.experts;
	const strata_plan_options *o = &p->options;
	memset(out, 0, sizeof *out);
	if (!x->layers || !x->experts || !x->experts_used || !(rows > 0))
		return;
	bool cuda = o->device == STRATA_PLAN_DEVICE_CUDA;
	double H = o->host_memory_bandwidth > 0 ? o->host_memory_bandwidth
						 : STRATA_PLAN_DEFAULT_CPU_MEM_BW;
	/* The store admits a missed expert into an empty slot, else only
	 * when it has had strictly more rows than the cache's fewest (ties
	 * keep the cached one). In decode the cache then holds its share of
	 * the routed calls (measured, else uniform) and the experts a token
	 * misses trail the cached ones' rows, so admissions are taken as
	 * rare unless the caller measured them. A prompt pass calls (nearly)
	 * every expert of a layer, so its calls hit the cached share of all
	 * the experts however skewed the routing: the uniform share; its
	 * misses are admitted as rarely (counting calls instead, as the
	 * store did, admitted every one: measured 187 of 187, and the
	 * prompt ran slower with the cache than without). */
	double L = (double)x->layers;
	double h = prefill ? uniform_share(x) : decode_share(x);
	/* first alone; where the CPU and the link both work in the layer,
	 * again at the rates strata calibrate measured them at together */
	strata_plan_experts_figures f = {0};
	double cpu_s, dev_s;
	layer_figures(p, rows, h, o->h2d_bandwidth, 1.0, &f, &cpu_s, &dev_s);
	double Hs = o->host_memory_shared_bandwidth, Ls = o->h2d_shared_bandwidth;
	if (cuda && f.streamed > 0 && f.misses > 0 && Hs > 0 && Ls > 0 &&
	    Hs < H) {
		f = (strata_plan_experts_figures){0};
		layer_figures(p, rows, h, Ls, H / Hs, &f, &cpu_s, &dev_s);
	}
	double admit = !x->cache_slots ? 0.0
				       : f.misses * fmin(1.0, x->admit_rate);
	double link = o->h2d_bandwidth > 0 ? o->h2d_bandwidth : H;
	double admit_s = admit * (double)x->expert_bytes / (cuda ? link : H);
	/* the router's logits come back each layer and, with misses, their
	 * sum goes up again: one round trip of the residual rows */
	double sync_s = cuda ? o->crossing_seconds : 0.0;
	/* on cuda the device's queue runs the hits and streamed experts
	 * while the CPU computes the misses, which the host thread starts
	 * once it has launched the device's (forward_moe.c experts_apart);
	 * on cpu one pool runs both */
	double launch_s = cuda ? (f.hits + f.streamed) *
					 DEVICE_KERNELS_PER_EXPERT *
					 o->device_launch_seconds
			       : 0.0;
	double layer = (cuda ? fmax(dev_s, launch_s + cpu_s) : cpu_s + dev_s) +
		       admit_s + sync_s;
	*out = (strata_plan_experts_figures){
		.calls = L * f.calls,
		.hits = L * f.hits,
		.misses = L * f.misses,
		.streamed = L * f.streamed,
		.admissions = L * admit,
		.cpu_bytes = L * f.misses * (double)x->expert_bytes,
		.device_bytes = L * (f.hits + f.streamed) * (double)x->expert_bytes,
		.upload_bytes = L * (f.streamed + admit) * (double)x->expert_bytes,
		.cpu_ms = L * cpu_s * 1e3,
		.device_ms = L * dev_s * 1e3,
		.admit_ms = L * admit_s * 1e3,
		.sync_ms = L * sync_s * 1e3,
		.total_ms = L * layer * 1e3,
	};
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
	strata_plan_experts_figures fd, fp;
	strata_plan_experts_pass(p, batch, false, &fd);
	strata_plan_experts_pass(p, chunk, true, &fp);
	double dec = fd.total_ms, pre = fp.total_ms;
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
