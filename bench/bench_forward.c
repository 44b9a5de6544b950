/* bench_forward - times whole forward passes of a model under a residency
 * plan, the way `strata run` opens it: passes of N tokens (a prompt's
 * prefill) and single-token decode steps, with the bytes each pass moved,
 * the rate that makes, and device memory measured against the plan.
 *
 *   bench_forward MODEL [residency options] [--tokens 1,128] [--passes 5]
 *                 [--decode 64] [--threads N] [--precision fast|exact]
 *                 [--q8gemv-wide 0|1|both] [--q8-0-wide 0|1|both]
 *                 [--moe-group 0|1] [--cpu-grouped 0|1|both] [--quick]
 *
 * Prints one line per figure and, last, one JSON object per figure on lines
 * starting with "json " (bench/gpu collects them). The peers (accelerate,
 * transformers) are measured by bench/gpu_peer.py in the same bench/gpu run;
 * the link's own rate is the residency bench's (bench_residency --cuda).
 *
 * Peaks: each tier's residency peak (the host's with the load staging)
 * plus the forward pass's arenas there (its CPU site's on the host): every
 * buffer of that tier the plan's totals count (tier_peak).
 *
 * Experts on the CPU (--n-cpu-moe): what the expert store counted per
 * timed pass and per decode step (routed, cache hits, misses on the CPU,
 * streamed, admissions, the CPU's and the copies' bytes), beside the
 * plan's per-pass figures for the same (predicted vs counted), and the
 * routing's concentration: the share of every routed call that went to
 * the cache-size most routed experts (what a cache that kept them would
 * hit) against the uniform share, slots / (layers x experts).
 *
 * --q8gemv-wide (CUDA builds): the 8-bit decode GEMV's K-quant lanes
 * (strata__cuda_q8gemv_wide: 0 the narrow ones; 1 the wide ones, the
 * default; both: every figure measured at 0, then again at 1, in one run).
 * --moe-group 1, the default: a mixture of experts' device experts
 * (resident, or the expert cache's hits) go to strata_kernel_experts a
 * layer at a time (CUDA: the grouped decode kernels, docs/cuda.md
 * "Grouped experts"); 0: each expert through its own kernels.
 * --q8-0-wide (CUDA builds): the same for Q8_0's lanes
 * (strata__cuda_q8gemv_wide_q8_0, qgemv_q8_0_wide.cuh: 0 the current
 * ones; 1 the wide ones, the default); with both options at both, every
 * pair of the two is measured.
 *
 * --cpu-grouped (--n-cpu-moe): a layer's experts missed on the CPU in one
 * job of the CPU's pool (strata__cpu_experts_grouped 1, the default) or
 * one expert's two products at a time (0, the path before it); both:
 * every figure at 1, then again at 0, in one run. Each prints the time
 * the CPU's misses took per layer per decode step (and per pass).
 *
 * Device memory: on CUDA, the free memory before the session opens less
 * the least free memory seen after any pass; everything strata took on the
 * device (the plan's arenas, the compute context's workspaces, cuBLAS's
 * own) and nothing else, as no one else uses the device during the bench.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "infer/forward_internal.h"
#include "strata/backend.h"
#include "strata/infer.h"

#ifdef STRATA_HAVE_CUDA
/* backend/cuda/cuda_launch.h: which lanes the K-quants' q8 GEMV takes */
extern int strata__cuda_q8gemv_wide;
extern int strata__cuda_q8gemv_wide_q8_0; /* and which lanes Q8_0's takes */
#endif

#define MAX_SHAPES 8

typedef struct cfg {
	const char *model;
	strata_cli_residency r;
	uint32_t tokens[MAX_SHAPES];
	size_t n_tokens;
	uint32_t passes, decode;
	uint32_t threads; /* CPU compute threads, 0: every processor */
	bool cold; /* time the first pass too: nothing read before it */
	int wide[2]; /* strata__cuda_q8gemv_wide values to measure, in order */
	size_t n_wide;
	int wide_q8_0[2]; /* strata__cuda_q8gemv_wide_q8_0 values, in order */
	size_t n_wide_q8_0;
	int grouped[2]; /* strata__cpu_experts_grouped values, in order */
	size_t n_grouped;
} cfg;

static int usage(void)
{
	fprintf(stderr,
		"usage: bench_forward MODEL [residency options] [--tokens N,M..]\n"
		"                     [--passes K] [--decode D] [--threads N] [--cold] [--quick]\n"
		"                     [--precision fast|exact] [--q8gemv-wide 0|1|both]\n"
		"                     [--q8-0-wide 0|1|both]\n"
		"                     [--expert-hit-rate F] [--expert-admit-rate F]\n"
		"                     [--moe-group 0|1] [--cpu-grouped 0|1|both]\n"
		"  --expert-hit-rate, --expert-admit-rate: the decode hit and\n"
		"    admission shares the plan predicts with (as a run counted\n"
		"    them: the 'experts per decode step' line); 0: its own\n"
		"    model (uniform hits, rare admissions)\n"
		"  --cold: no warm-up pass (disk mode from a dropped page cache)\n"
		"  --moe-group 1: a layer's device experts in one grouped call\n"
		"    (CUDA: five launches for all hits); 0 (default): one by one\n"
		"  --cpu-grouped 1 (default): a layer's experts missed on the CPU\n"
		"    in one job of its pool; 0: one expert at a time; both: each\n");
	strata_cli_residency_print_help(stderr, 0);
	return 2;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static uint64_t median(uint64_t *v, uint32_t n)
{
	qsort(v, n, sizeof *v, cmp_u64);
	return v[n / 2];
}

/* Free device memory now (CUDA), or 0 when it cannot be told. */
static uint64_t device_free(strata_backend *b)
{
	strata_backend_memory m = {0};
	strata_error ignored;
	if (!b || strata_backend_memory_info(b, &m, &ignored) != STRATA_OK)
		return 0;
	return m.free_bytes;
}

static uint64_t free_before_open(const cfg *c)
{
	if (c->r.plan.device != STRATA_PLAN_DEVICE_CUDA)
		return 0;
	strata_backend *b = NULL;
	strata_error ignored;
	if (strata_backend_create("cuda", c->r.device_index, NULL, &b,
				  &ignored) != STRATA_OK)
		return 0;
	uint64_t f = device_free(b);
	strata_backend_destroy(b);
	return f;
}

/* Where the host is during a decode step: the source's acquire and release
 * wrapped to note when the last layer was handed back, i.e. when the host
 * had queued every layer's work. Queueing that ends long before the step
 * does means the device is the bound; ending with it, the host is. */
typedef struct spy {
	const strata_infer_source_ops *ops;
	void *user;
	uint32_t last_layer;
	uint64_t released_last_ns;
} spy;

static spy the_spy;

static strata_status spy_acquire(void *user, uint32_t layer,
				 strata_infer_layer *out, strata_error *err)
{
	(void)user;
	return the_spy.ops->acquire(the_spy.user, layer, out, err);
}

static strata_status spy_release(void *user, uint32_t layer,
				 strata_error *err)
{
	(void)user;
	strata_status st = the_spy.ops->release(the_spy.user, layer, err);
	if (layer == the_spy.last_layer)
		the_spy.released_last_ns = strata_now_ns();
	return st;
}

static const strata_infer_source_ops spy_ops = {spy_acquire, spy_release};

typedef struct figures {
	uint64_t pass_ns, decode_ns; /* medians */
	uint64_t decode_queued_ns;   /* median: step start to last release */
	uint64_t h2d_bytes_per_pass;
	uint64_t h2d_ns_per_pass; /* the link's copy time (copy events) */
	uint64_t weight_bytes, plan_device, device_used;
	uint64_t used_at_open, used_first_pass; /* device memory by stage */
	uint64_t stalls, stall_ns;
	/* the session's own plan: the selected candidate, its predictions
	 * for this shape (decode: one token; prefill: one chunk of the n
	 * tokens) and totals, and the residency's measured peaks */
	char plan_name[96];
	double predicted_decode_ms, predicted_prefill_ms;
	uint64_t plan_host, peak_device, peak_host, prefill_chunk;
	/* experts on the CPU: counted per timed pass and per decode step */
	bool experts;
	strata_infer_experts_stats pass_x, step_x;
	double top_share; /* of the cache-size most routed experts */
	uint64_t pass_cpu_ns, step_cpu_ns; /* the CPU's misses, in all */
	strata_plan_experts_figures plan_pass_x, plan_step_x;
	uint64_t slots, pairs;
} figures;

/* b - a, every count of an expert store's statistics. */
static strata_infer_experts_stats stats_sub(strata_infer_experts_stats b,
					    const strata_infer_experts_stats *a)
{
	b.routed -= a->routed, b.hits -= a->hits, b.misses -= a->misses;
	b.streamed -= a->streamed, b.admissions -= a->admissions;
	b.evictions -= a->evictions, b.cpu_bytes -= a->cpu_bytes;
	b.device_bytes -= a->device_bytes, b.upload_bytes -= a->upload_bytes;
	return b;
}

static int cmp_u64_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x < y) - (x > y);
}

/* The share of every routed call that went to the `slots` most routed
 * (layer, expert) pairs so far; *pairs: how many pairs there are. */
static double top_share(const strata_session *s, uint64_t slots,
			uint64_t *pairs)
{
	const strata_infer_experts *x = strata_session_experts(s);
	strata_infer_experts_stats st;
	strata_infer_experts_get_stats(x, &st);
	uint32_t e = strata_session_hparams(s)->experts;
	uint64_t n = (uint64_t)st.layers * e, all = 0, top = 0;
	*pairs = n;
	uint64_t *v = calloc(n ? n : 1, sizeof *v);
	if (!v)
		return 0.0;
	for (uint64_t i = 0; i < n; i++)
		all += v[i] = strata_infer_experts_routed(x, (uint32_t)(i / e),
							  (uint32_t)(i % e));
	qsort(v, n, sizeof *v, cmp_u64_desc);
	for (uint64_t i = 0; i < n && i < slots; i++)
		top += v[i];
	free(v);
	return all ? (double)top / (double)all : 0.0;
}

static strata_status weight_bytes(const strata_session *s, uint64_t *out)
{
	const strata_plan_layout_info *info =
		strata_plan_get_layout_info(strata_session_plan(s));
	*out = info->all_units_bytes + info->static_bytes;
	return STRATA_OK;
}

/* One session for passes of n tokens: a warm-up pass, then c->passes timed
 * passes from position 0, then c->decode single-token steps after a
 * one-token prompt. */
/* A tier's peak, every arena of it that the plan's total counts: the
 * residency engine's (its tier; for the host, on CUDA, the load staging
 * too, which the telemetry records) and the forward pass's sites there
 * (the devices', or the CPU site's: the workspace and KV cache of what
 * the CPU computes), whose arenas hold all of their buffers from create
 * on. The device's compute workspaces, reserved bytes and page tables
 * are no arena: device_used measures them on CUDA. */
static uint64_t tier_peak(strata_session *s, const strata_telemetry_snapshot *b,
			  strata_tier tier)
{
	const strata_plan_candidate *c =
		strata_plan_selected(strata_session_plan(s));
	uint64_t peak = b->peak_bytes[tier];
	bool placed = c && c->mode == STRATA_RESIDENCY_PLACEMENT;
	uint32_t devices = placed && c->devices ? c->devices : 1;
	uint32_t from = tier == STRATA_TIER_HOST ? devices : 0;
	uint32_t to = tier == STRATA_TIER_HOST ? devices + 1 : devices;
	for (uint32_t i = from; i < to; i++) {
		strata_arena_stats a;
		strata_forward_site_arena_stats(strata_session_forward(s), i,
						&a);
		peak += a.high_water_bytes;
	}
	return peak;
}

static int measure(const cfg *c, uint32_t n, figures *out)
{
	memset(out, 0, sizeof *out);
	strata_session_options so = {
		.model_path = c->model, .plan = c->r.plan,
		.exclude = c->r.exclude, .exclude_count = c->r.exclude_count,
		.device_index = c->r.device_index,
		.positions = n > c->decode + 1 ? n : c->decode + 1,
		.prefill = n, .threads = c->threads, .no_map = c->r.no_map,
		.precision = c->r.precision,
	};
	uint64_t free0 = free_before_open(c);
	strata_session *s = NULL;
	strata_error err;
	int32_t *tok = calloc(n, sizeof *tok);
	uint64_t *ns = calloc(c->passes + c->decode + 1, sizeof *ns);
	float *last = NULL;
	int rc = 1;
	if (!tok || !ns || strata_session_open(&so, &s, &err) != STRATA_OK)
		goto fail;
	last = calloc(strata_session_hparams(s)->vocab, sizeof *last);
	if (!last)
		goto fail;
	uint64_t free_open = device_free(strata_session_backend(s));
	for (uint32_t i = 0; i < n; i++)
		tok[i] = (int32_t)((i * 7919u + 13u) %
				   strata_session_hparams(s)->vocab);
	uint64_t min_free = UINT64_MAX;
	strata_telemetry *t = strata_residency_telemetry(
		strata_session_residency(s));
	strata_telemetry_snapshot a, b;
	uint32_t first = c->cold ? 0 : 1; /* pass 0 warms up unless cold */
	strata_telemetry_get(t, &a);
	const strata_infer_experts *xs = strata_session_experts(s);
	strata_infer_experts_stats x0 = {0}, x1 = {0};
	out->experts = xs != NULL;
	for (uint32_t p = 0; p < first + c->passes; p++) {
		strata_forward_reset(strata_session_forward(s));
		if (p == first)
			strata_telemetry_get(t, &a);
		if (p == first && xs)
			strata_infer_experts_get_stats(xs, &x0);
		if (p == first)
			out->pass_cpu_ns = strata__experts_cpu_ns;
		uint64_t t0 = strata_now_ns();
		if (strata_forward_run(strata_session_forward(s), tok, n, 0,
				       NULL, last, &err))
			goto fail;
		ns[p] = strata_now_ns() - t0;
		uint64_t f = device_free(strata_session_backend(s));
		if (f && f < min_free)
			min_free = f;
		if (p == 0 && free0 > f)
			out->used_first_pass = free0 - f;
	}
	out->used_at_open = free0 > free_open ? free0 - free_open : 0;
	out->pass_cpu_ns = strata__experts_cpu_ns - out->pass_cpu_ns;
	strata_telemetry_get(t, &b);
	if (xs) {
		strata_infer_experts_get_stats(xs, &x1);
		out->pass_x = stats_sub(x1, &x0);
	}
	out->pass_ns = median(ns + first, c->passes);
	const strata_transfer_stats *ha = &a.transfers[STRATA_DIR_HOST_TO_DEVICE],
				    *hb = &b.transfers[STRATA_DIR_HOST_TO_DEVICE];
	out->h2d_bytes_per_pass = (hb->bytes - ha->bytes) / c->passes;
	out->h2d_ns_per_pass = (hb->ns - ha->ns) / c->passes;
	out->stalls = b.stalls - a.stalls;
	out->stall_ns = b.stall_ns - a.stall_ns;
	if (c->decode) {
		the_spy = (spy){
			.ops = strata_session_source(s)->ops,
			.user = strata_session_source(s)->user,
			.last_layer = strata_session_hparams(s)->layers - 1};
		strata_session_source(s)->ops = &spy_ops;
		uint64_t *queued = calloc(c->decode, sizeof *queued);
		if (!queued)
			goto fail;
		strata_forward_reset(strata_session_forward(s));
		if (strata_forward_run(strata_session_forward(s), tok, 1, 0,
				       NULL, last, &err))
			goto fail;
		if (xs)
			strata_infer_experts_get_stats(xs, &x0);
		out->step_cpu_ns = strata__experts_cpu_ns;
		for (uint32_t d = 0; d < c->decode; d++) {
			int32_t next = tok[(d + 1) % n];
			uint64_t t0 = strata_now_ns();
			if (strata_forward_run(strata_session_forward(s), &next,
					       1, d + 1, NULL, last, &err))
				goto fail;
			ns[d] = strata_now_ns() - t0;
			queued[d] = the_spy.released_last_ns - t0;
		}
		out->decode_ns = median(ns, c->decode);
		out->step_cpu_ns = strata__experts_cpu_ns - out->step_cpu_ns;
		if (xs) {
			strata_infer_experts_get_stats(xs, &x1);
			out->step_x = stats_sub(x1, &x0);
		}
		out->decode_queued_ns = median(queued, c->decode);
		free(queued);
		strata_session_source(s)->ops = the_spy.ops;
	}
	uint64_t f = device_free(strata_session_backend(s));
	if (f && f < min_free)
		min_free = f;
	weight_bytes(s, &out->weight_bytes);
	const strata_plan *plan = strata_session_plan(s);
	const strata_plan_candidate *sel = strata_plan_selected(plan);
	if (sel) {
		strata_plan_candidate_name(sel, out->plan_name,
					   sizeof out->plan_name);
		out->predicted_decode_ms = sel->predicted_decode_ms;
		out->predicted_prefill_ms = sel->predicted_prefill_ms;
	}
	out->prefill_chunk = strata_plan_get_options(plan)->shape.prefill_chunk;
	if (xs) {
		out->slots = strata_plan_get_options(plan)->experts.cache_slots;
		out->top_share = top_share(s, out->slots, &out->pairs);
		strata_plan_experts_pass(plan, 1.0, false, &out->plan_step_x);
		strata_plan_experts_pass(plan, (double)n, n > 1,
					 &out->plan_pass_x);
	}
	out->plan_device = strata_plan_device_total(plan);
	out->plan_host = strata_plan_host_total(plan);
	strata_telemetry_get(t, &b);
	out->peak_device = tier_peak(s, &b, STRATA_TIER_DEVICE);
	out->peak_host = tier_peak(s, &b, STRATA_TIER_HOST);
	out->device_used = free0 && min_free != UINT64_MAX && free0 > min_free
				   ? free0 - min_free : 0;
	if (strata_session_finish(s, &err))
		goto fail;
	rc = 0;
fail:
	if (rc)
		fprintf(stderr, "bench_forward: %s\n  fix: %s\n", err.message,
			err.fix);
	strata_session_close(s);
	free(tok), free(ns), free(last);
	return rc;
}

/* One line of expert counts per pass (or step), counted beside the
 * plan's. */
static void report_experts(const char *what, const strata_infer_experts_stats *x,
			   uint64_t n, const strata_plan_experts_figures *p)
{
	double k = n ? (double)n : 1.0;
	printf("  experts per %s: routed %.1f, hits %.1f, misses %.1f, "
	       "streamed %.1f, admissions %.1f; cpu %.1f MB, uploads %.1f MB"
	       " (plan: routed %.1f, hits %.1f, misses %.1f, streamed %.1f, "
	       "admissions %.1f; cpu %.1f MB, uploads %.1f MB)\n",
	       what, x->routed / k, x->hits / k, x->misses / k,
	       x->streamed / k, x->admissions / k, x->cpu_bytes / k / 1e6,
	       x->upload_bytes / k / 1e6, p->calls, p->hits, p->misses,
	       p->streamed, p->admissions, p->cpu_bytes / 1e6,
	       p->upload_bytes / 1e6);
}

static void report(const cfg *c, uint32_t n, int wide, int wide_q8_0,
		   const figures *f)
{
	double ms = f->pass_ns / 1e6;
	double gbs = f->weight_bytes / (double)f->pass_ns;
	printf("%u-token pass, --precision %s, --q8gemv-wide %d, --q8-0-wide "
	       "%d: %.2f ms median of %u%s (weights "
	       "%.3f GB: %.1f "
	       "GB/s; host->device %.3f GB per pass, %.1f GB/s; %" PRIu64
	       " stalls, %.2f ms)\n",
	       n, strata_precision_name(c->r.precision), wide, wide_q8_0, ms,
	       c->passes,
	       c->cold ? ", cold" : "",
	       f->weight_bytes / 1e9, gbs, f->h2d_bytes_per_pass / 1e9,
	       f->h2d_bytes_per_pass / (double)f->pass_ns, f->stalls,
	       f->stall_ns / 1e6 / c->passes);
	/* The copies' own time, from their events: how long the link was
	 * busy in a pass, and its rate while busy, so a pass slower than its
	 * bytes at the link's rate shows whether the link idled or ran slow. */
	if (f->h2d_ns_per_pass)
		printf("  link: busy %.2f ms of the pass (%.0f %%), %.1f GB/s "
		       "while copying\n",
		       f->h2d_ns_per_pass / 1e6,
		       100.0 * f->h2d_ns_per_pass / f->pass_ns,
		       f->h2d_bytes_per_pass / (double)f->h2d_ns_per_pass);
	if (strata__moe_group)
		printf("  --moe-group 1: device experts grouped a layer at a "
		       "time\n");
	if (c->decode)
		printf("  decode: %.3f ms/token median of %u (%.1f GB/s of "
		       "weights; every layer queued by the host after %.3f ms)\n",
		       f->decode_ns / 1e6, c->decode,
		       f->weight_bytes / (double)f->decode_ns,
		       f->decode_queued_ns / 1e6);
	if (f->device_used)
		printf("  device memory: %" PRIu64 " bytes used (%" PRIu64
		       " once open, %" PRIu64 " after the first pass), plan %"
		       PRIu64 " (used/plan %.4f)\n", f->device_used,
		       f->used_at_open, f->used_first_pass, f->plan_device,
		       (double)f->device_used / (double)f->plan_device);
	printf("  plan: %s, predicted decode %.3f ms/token, prefill of %"
	       PRIu64 " tokens %.3f ms; residency peaks device %" PRIu64
	       ", host %" PRIu64 " (plan %" PRIu64 ", %" PRIu64 ")\n",
	       f->plan_name, f->predicted_decode_ms, f->prefill_chunk,
	       f->predicted_prefill_ms, f->peak_device, f->peak_host,
	       f->plan_device, f->plan_host);
	if (f->experts) {
		report_experts("pass", &f->pass_x, c->passes, &f->plan_pass_x);
		if (c->decode)
			report_experts("decode step", &f->step_x, c->decode,
				       &f->plan_step_x);
		/* per layer whose experts are on the CPU, per pass / step */
		double layers = f->step_x.layers ? f->step_x.layers : 1.0;
		printf("  experts on the cpu (--cpu-grouped %d): %.1f us per "
		       "layer per pass, %.1f us per layer per decode step "
		       "(misses %.2f per layer per step)\n",
		       strata__cpu_experts_grouped,
		       f->pass_cpu_ns / 1e3 / c->passes / layers,
		       c->decode ? f->step_cpu_ns / 1e3 / c->decode / layers
				 : 0.0,
		       c->decode ? (double)f->step_x.misses / c->decode / layers
				 : 0.0);
		printf("  routing: the %" PRIu64 " most routed of %" PRIu64
		       " experts took %.1f%% of the calls (uniform: %.1f%%); "
		       "decode hit share %.3f, admissions per miss %.3f "
		       "(--expert-hit-rate, --expert-admit-rate)\n",
		       f->slots, f->pairs, 100.0 * f->top_share,
		       f->pairs ? 100.0 * (double)f->slots / (double)f->pairs
				: 0.0,
		       f->step_x.routed ? (double)f->step_x.hits /
						  (double)f->step_x.routed
					: 0.0,
		       f->step_x.misses ? (double)f->step_x.admissions /
						  (double)f->step_x.misses
					: 0.0);
	}
	printf("json {\"tokens\": %u, \"precision\": \"%s\", "
	       "\"q8gemv_wide\": %d, \"q8_0_wide\": %d, \"pass_ms\": %.4f, "
	       "\"weight_bytes\": %"
	       PRIu64 ", \"h2d_bytes_per_pass\": %" PRIu64 ", \"decode_ms\": "
	       "%.4f, \"device_used_bytes\": %" PRIu64 ", \"plan_device_bytes\": %"
	       PRIu64 ", \"stalls\": %" PRIu64 ", \"plan\": \"%s\", "
	       "\"predicted_decode_ms\": %.4f, \"predicted_prefill_ms\": %.4f, "
	       "\"prefill_chunk\": %" PRIu64 ", \"plan_host_bytes\": %" PRIu64
	       ", \"peak_device_bytes\": %" PRIu64 ", \"peak_host_bytes\": %"
	       PRIu64 "}\n",
	       n, strata_precision_name(c->r.precision), wide, wide_q8_0, ms,
	       f->weight_bytes,
	       f->h2d_bytes_per_pass,
	       f->decode_ns / 1e6, f->device_used, f->plan_device, f->stalls,
	       f->plan_name, f->predicted_decode_ms, f->predicted_prefill_ms,
	       f->prefill_chunk, f->plan_host, f->peak_device, f->peak_host);
}

/* --cpu-grouped 0|1|both into c->grouped; -1 on another value. */
static int parse_grouped(cfg *c, const char *v)
{
	if (!strcmp(v, "both")) {
		c->grouped[0] = 1, c->grouped[1] = 0, c->n_grouped = 2;
		return 0;
	}
	if (strcmp(v, "0") && strcmp(v, "1"))
		return -1;
	c->grouped[0] = atoi(v), c->n_grouped = 1;
	return 0;
}

/* --q8gemv-wide or --q8-0-wide (`opt`) 0|1|both into vals and *count;
 * -1 on another value or in a build without CUDA (the knobs are CUDA's). */
static int parse_wide(const char *opt, int vals[2], size_t *count,
		      const char *v)
{
#ifdef STRATA_HAVE_CUDA
	(void)opt;
	if (!strcmp(v, "0") || !strcmp(v, "1")) {
		vals[0] = v[0] - '0', *count = 1;
		return 0;
	}
	if (!strcmp(v, "both")) {
		vals[0] = 0, vals[1] = 1, *count = 2;
		return 0;
	}
#else
	(void)vals, (void)count, (void)v;
	fprintf(stderr, "bench_forward: %s needs a CUDA build\n", opt);
#endif
	return -1;
}

static int parse_tokens(cfg *c, const char *v)
{
	c->n_tokens = 0;
	for (const char *p = v; *p;) {
		char *end;
		unsigned long t = strtoul(p, &end, 10);
		if (end == p || !t || t > 65536 || c->n_tokens == MAX_SHAPES ||
		    (*end && *end != ','))
			return -1;
		c->tokens[c->n_tokens++] = (uint32_t)t;
		p = *end ? end + 1 : end;
	}
	return c->n_tokens ? 0 : -1;
}

int main(int argc, char **argv)
{
	cfg c = {.tokens = {1, 128}, .n_tokens = 2, .passes = 5, .decode = 64,
		 .wide = {1}, .n_wide = 1, .wide_q8_0 = {0}, .n_wide_q8_0 = 1,
		 .grouped = {1}, .n_grouped = 1};
#ifdef STRATA_HAVE_CUDA
	c.wide[0] = strata__cuda_q8gemv_wide; /* the library's defaults */
	c.wide_q8_0[0] = strata__cuda_q8gemv_wide_q8_0;
#endif
	strata_cli_residency_init(&c.r);
	c.r.loads = true; /* --no-mmap and --precision, as run takes them */
	bool quick = false;
	strata_error err;
	for (int i = 1; i < argc; i++) {
		int used = strata_cli_residency_option(&c.r, argc, argv, &i, &err);
		if (used < 0) {
			fprintf(stderr, "bench_forward: %s\n", err.message);
			return 2;
		}
		if (used)
			continue;
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick"))
			quick = true;
		else if (!strcmp(a, "--cold"))
			c.cold = true;
		else if (!strcmp(a, "--tokens") && v && !parse_tokens(&c, v))
			i++;
		else if (!strcmp(a, "--passes") && v && atoi(v) > 0)
			c.passes = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--decode") && v && atoi(v) >= 0)
			c.decode = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--expert-hit-rate") && v && atof(v) >= 0)
			c.r.plan.experts.hit_rate = atof(argv[++i]);
		else if (!strcmp(a, "--expert-admit-rate") && v && atof(v) >= 0)
			c.r.plan.experts.admit_rate = atof(argv[++i]);
		else if (!strcmp(a, "--threads") && v && atoi(v) > 0)
			c.threads = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--q8gemv-wide") && v &&
			 !parse_wide(a, c.wide, &c.n_wide, v))
			i++;
		else if (!strcmp(a, "--q8-0-wide") && v &&
			 !parse_wide(a, c.wide_q8_0, &c.n_wide_q8_0, v))
			i++;
		else if (!strcmp(a, "--cpu-grouped") && v &&
			 !parse_grouped(&c, v))
			i++;
		else if (!strcmp(a, "--moe-group") && v &&
			 (!strcmp(v, "0") || !strcmp(v, "1")))
			strata__moe_group = atoi(argv[++i]);
		else if (a[0] != '-' && !c.model)
			c.model = a;
		else
			return usage();
	}
	if (quick) {
		/* CTest: the shipped model on the CPU, a few passes. */
		c.model = c.model ? c.model
				  : STRATA_SOURCE_DIR "/models/stories260K";
		c.r.plan.device = STRATA_PLAN_DEVICE_CPU;
		c.passes = 2, c.decode = 4;
		c.tokens[0] = 1, c.tokens[1] = 16, c.n_tokens = 2;
	}
	if (!c.model)
		return usage();
	if (!c.r.device_given && !quick)
		c.r.plan.device = strata_backend_device_count("cuda") > 0
					  ? STRATA_PLAN_DEVICE_CUDA
					  : STRATA_PLAN_DEVICE_CPU;
	/* plan as `strata run` does: with the rates `strata calibrate` wrote */
	strata_error rerr;
	if (!quick && strata_cli_residency_rates(&c.r, &rerr) != STRATA_OK) {
		fprintf(stderr, "bench_forward: %s\n", rerr.message);
		return 1;
	}
	int rc = 0;
	for (size_t w = 0; w < c.n_wide * c.n_wide_q8_0 && !rc; w++) {
		const int wk = c.wide[w / c.n_wide_q8_0];
		const int w0 = c.wide_q8_0[w % c.n_wide_q8_0];
#ifdef STRATA_HAVE_CUDA
		strata__cuda_q8gemv_wide = wk;
		strata__cuda_q8gemv_wide_q8_0 = w0;
#endif
		for (size_t g = 0; g < c.n_grouped && !rc; g++) {
			strata__cpu_experts_grouped = c.grouped[g];
			for (size_t i = 0; i < c.n_tokens && !rc; i++) {
				figures f;
				rc = measure(&c, c.tokens[i], &f);
				if (!rc)
					report(&c, c.tokens[i], wk, w0, &f);
			}
		}
	}
	strata_cli_residency_fini(&c.r);
	return rc;
}
