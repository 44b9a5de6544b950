/* test_experts_run.c - routed experts computed on the CPU from host memory
 * with a device cache of hot ones (issue 22, --n-cpu-moe / --expert-cache),
 * on CPU devices as test_placement_run.c runs placements: on the four
 * mixture-of-experts models of tests/data/families, the prompt's logits in
 * one pass and then token by token are within 1e-5 of the resident run
 * whatever the layers and slots; the counts follow the routing (every call
 * a hit or a miss, no hits without a cache, with room for every expert
 * only the first call of each a miss, one token's decode routing
 * experts_used experts per layer); the plan's expert bytes are the
 * tensors' exactly, and a device budget of exactly the plan's device total
 * runs (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define SAME 1e-5
#define GIB (1ull << 30)

static const char *const models[] = {
	"mixtral_f32", "qwen2_moe_shared_f32", "qwen3_moe_f32",
	"qwen3_moe_unnorm_bf16",
};

/* layers, slots: -1 every layer / room for every expert; stream: rows
 * from which a missed expert is copied to the device (0: never) */
typedef struct expert_case {
	int layers, slots, stream;
} expert_case;

static const expert_case cases[] = {
	{-1, 0, 0}, {-1, -1, 0}, {1, 2, 0}, {-1, 3, 0}, {-1, 2, 2},
};

/* The prompt's logits in one pass, then each prompt token alone. */
typedef struct run_out {
	float *prefill, *decode; /* (n, vocab) each */
	strata_infer_experts_stats after_prefill, after_decode;
} run_out;

static strata_session *open_run(const char *path, strata_plan_options po,
				uint32_t n, strata_error *err)
{
	strata_session_options o = {.model_path = path, .threads = 1,
				    .positions = n, .prefill = n, .plan = po};
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_session *s = NULL;
	if (strata_session_open(&o, &s, err))
		return NULL;
	return s;
}

static void stats_of(strata_session *s, strata_infer_experts_stats *out)
{
	memset(out, 0, sizeof *out);
	if (strata_session_experts(s))
		strata_infer_experts_get_stats(strata_session_experts(s), out);
}

static void run_it(strata_session *s, const ref_data *r, run_out *out)
{
	strata_forward *f = strata_session_forward(s);
	uint64_t row = r->vocab;
	strata_error err;
	out->prefill = strata_alloc(r->n_tokens * row * sizeof(float));
	out->decode = strata_alloc(r->n_tokens * row * sizeof(float));
	assert_non_null(out->prefill);
	assert_non_null(out->decode);
	if (strata_forward_run(f, r->tokens, r->n_tokens, 0, out->prefill,
			       NULL, &err))
		fail_msg("prefill: %s", err.message);
	stats_of(s, &out->after_prefill);
	strata_forward_reset(f);
	for (uint32_t t = 0; t < r->n_tokens; t++)
		if (strata_forward_run(f, r->tokens + t, 1, t,
				       out->decode + t * row, NULL, &err))
			fail_msg("decode %u: %s", t, err.message);
	stats_of(s, &out->after_decode);
}

static void run_free(run_out *o)
{
	strata_free(o->prefill);
	strata_free(o->decode);
}

static strata_plan_options base_options(void)
{
	return (strata_plan_options){.mode = STRATA_RESIDENCY_AUTO,
				     .has_device_budget = true,
				     .device_budget_bytes = GIB,
				     .has_host_budget = true,
				     .host_budget_bytes = GIB};
}

/* The routing's own counts: every call once, a hit or a miss. */
static void check_counts(strata_session *s, const strata_infer_hparams *hp,
			 const run_out *o, uint32_t n, const char *what)
{
	const strata_infer_experts *x = strata_session_experts(s);
	const strata_infer_experts_stats *a = &o->after_prefill,
					 *b = &o->after_decode;
	uint64_t sum = 0, distinct = 0;
	for (uint32_t l = 0; l < b->layers; l++)
		for (uint32_t e = 0; e < hp->experts; e++) {
			uint64_t k = strata_infer_experts_routed(x, l, e);
			sum += k;
			distinct += k > 0;
		}
	if (sum != b->routed || b->hits + b->misses + b->streamed != b->routed ||
	    a->hits + a->misses + a->streamed != a->routed)
		fail_msg("%s: %llu routed by expert, %llu counted, hits %llu "
			 "+ misses %llu", what, (unsigned long long)sum,
			 (unsigned long long)b->routed,
			 (unsigned long long)b->hits,
			 (unsigned long long)b->misses);
	/* one row per decode pass: experts_used distinct experts a layer */
	assert_int_equal(b->routed - a->routed,
			 (uint64_t)n * b->layers * hp->experts_used);
	/* a prefill pass calls each expert a layer routes to once */
	assert_true(a->routed <= (uint64_t)b->layers * hp->experts);
	assert_true(a->routed >= (uint64_t)b->layers * hp->experts_used);
	/* one row never reaches a stream threshold of 2 or more */
	assert_int_equal(b->streamed, a->streamed);
	/* a streamed expert is copied (and none is computed on the CPU) */
	if (a->streamed)
		assert_true(a->upload_bytes > 0 && a->device_bytes > 0);
	if (!b->cache_slots) {
		assert_int_equal(b->hits, 0);
		assert_int_equal(b->admissions, 0);
		assert_int_equal(b->upload_bytes, 0);
	} else if (b->cache_slots >= (uint64_t)b->layers * hp->experts &&
		   !b->streamed) {
		/* room for all: each expert misses once, then hits */
		assert_int_equal(b->misses, distinct);
		assert_int_equal(b->admissions, distinct);
		assert_int_equal(b->evictions, 0);
	} else {
		uint64_t kept = b->admissions - b->evictions;
		assert_true(kept <= b->cache_slots);
		assert_true(b->admissions <= b->misses);
		assert_int_equal(kept, b->admissions < b->cache_slots
					       ? b->admissions
					       : b->cache_slots);
	}
	assert_true(b->cpu_bytes > 0);
}

/* Bytes of the expert tensors of layers [0, n) in the catalog, and each
 * layer's one expert slot (three aligned buffers) at most. */
static void expert_bytes(const strata_catalog *c, uint32_t n,
			 uint32_t experts, uint64_t *host, uint64_t *slot,
			 uint64_t *aligned)
{
	uint64_t per[64] = {0};
	*host = *aligned = 0;
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		int64_t l = strata_plan_expert_layer(t->name);
		if (l < 0 || l >= (int64_t)n)
			continue;
		*host += t->bytes; /* f32 and bf16: the CPU computes them as stored */
		*aligned += (t->bytes + STRATA_ALIGN - 1) / STRATA_ALIGN *
			    STRATA_ALIGN;
		if (strstr(t->name, ".experts.0."))
			per[l] += (t->bytes + STRATA_ALIGN - 1) / STRATA_ALIGN *
				  STRATA_ALIGN;
	}
	*slot = 0;
	for (uint32_t l = 0; l < n && l < 64; l++)
		*slot = per[l] > *slot ? per[l] : *slot;
	(void)experts;
}

/* The plan's figures: experts' host bytes and cache bytes exactly, the
 * resident candidate's device total less the units' expert bytes plus
 * the cache, its host total plus the experts and their scratch. */
static void check_sizing(strata_session *s, strata_session *resident,
			 uint32_t layers, uint32_t slots, uint32_t stream)
{
	const strata_plan *p = strata_session_plan(s);
	const strata_plan_experts *x = &strata_plan_get_options(p)->experts;
	const strata_infer_hparams *hp = strata_session_hparams(s);
	strata_catalog *c;
	strata_error err;
	assert_int_equal(strata_catalog_open(strata_session_model_path(s), &c,
					     &err), STRATA_OK);
	uint64_t host, slot, aligned;
	expert_bytes(c, layers, hp->experts, &host, &slot, &aligned);
	strata_catalog_destroy(c);
	assert_int_equal(x->layers, layers);
	assert_int_equal(x->host_bytes, host);
	assert_int_equal(x->slot_bytes, slot);
	assert_int_equal(x->cache_slots, slots);
	assert_int_equal(x->cache_bytes, (uint64_t)slots * slot);
	assert_int_equal(x->scratch_bytes,
			 strata_infer_experts_scratch_bytes(hp, 12)); /* the prompt: one pass */
	const strata_plan_candidate *a = strata_plan_selected(p);
	const strata_plan_candidate *b =
		strata_plan_selected(strata_session_plan(resident));
	assert_int_equal(a->mode, STRATA_RESIDENCY_RESIDENT);
	assert_int_equal(b->mode, STRATA_RESIDENCY_RESIDENT);
	/* the stream slot is one more slot */
	assert_int_equal(strata_plan_experts_stream_rows(p), stream);
	assert_int_equal(a->device_bytes + aligned,
			 b->device_bytes + x->cache_bytes + (stream ? slot : 0));
	assert_int_equal(a->host_bytes, b->host_bytes + host + x->scratch_bytes);
}

static void one_case(const char *name, const expert_case *k, const ref_data *r,
		     const run_out *want, strata_session *resident)
{
	char path[1024], what[160];
	ref_family_path(path, sizeof path, name, NULL);
	const strata_infer_hparams *hp = strata_session_hparams(resident);
	uint32_t layers = k->layers < 0 ? hp->layers : (uint32_t)k->layers;
	uint32_t all = layers * hp->experts;
	uint32_t slots = k->slots < 0 ? all : (uint32_t)k->slots;
	slots = slots < all ? slots : all;
	snprintf(what, sizeof what, "%s, %u layers, %u slots%s", name, layers,
		 slots, k->stream ? ", streamed" : "");
	strata_plan_options po = base_options();
	po.experts.layers = layers;
	po.experts.cache_slots = slots;
	po.experts.stream_rows = (uint64_t)k->stream;
	strata_error err;
	strata_session *s = open_run(path, po, r->n_tokens, &err);
	if (!s)
		fail_msg("%s: %s / %s", what, err.message, err.fix);
	check_sizing(s, resident, layers, slots, (uint32_t)k->stream);
	/* the plan's device total is all the run takes on the device */
	po.device_budget_bytes =
		strata_plan_device_total(strata_session_plan(s));
	strata_session_close(s);
	s = open_run(path, po, r->n_tokens, &err);
	if (!s)
		fail_msg("%s at the plan's own device total: %s", what,
			 err.message);
	run_out got;
	run_it(s, r, &got);
	uint64_t cells = (uint64_t)r->n_tokens * r->vocab;
	double dp = ref_max_diff(got.prefill, want->prefill, cells);
	double dd = ref_max_diff(got.decode, want->decode, cells);
	print_message("%-48s prefill %.2e decode %.2e; %llu routed, %llu "
		      "hits, %llu misses, %llu streamed\n", what, dp, dd,
		      (unsigned long long)got.after_decode.routed,
		      (unsigned long long)got.after_decode.hits,
		      (unsigned long long)got.after_decode.misses,
		      (unsigned long long)got.after_decode.streamed);
	/* a 12-row prompt gives some expert 2 rows or more */
	if (k->stream && !got.after_prefill.streamed)
		fail_msg("%s: no expert of the prompt was streamed", what);
	if (!(dp <= SAME) || !(dd <= SAME))
		fail_msg("%s: logits %.3g / %.3g from the resident run", what,
			 dp, dd);
	check_counts(s, hp, &got, r->n_tokens, what);
	run_free(&got);
	strata_session_close(s);
}

static void test_experts_on_cpu(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
		char path[1024];
		ref_family_path(path, sizeof path, models[m], NULL);
		ref_data r;
		ref_load_family(models[m], &r);
		assert_int_equal(r.n_tokens, 12); /* check_sizing's rows */
		strata_error err;
		strata_session *res = open_run(path, base_options(), r.n_tokens,
					       &err);
		if (!res)
			fail_msg("%s: %s", models[m], err.message);
		assert_null(strata_session_experts(res));
		run_out want;
		run_it(res, &r, &want);
		for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
			one_case(models[m], &cases[k], &r, &want, res);
		run_free(&want);
		strata_session_close(res);
		ref_free(&r);
	}
}

/* --n-cpu-moe on a dense model, and --expert-cache alone, are usage
 * errors naming the option. */
static void test_refused(void **state)
{
	(void)state;
	char path[1024];
	ref_family_path(path, sizeof path, "qwen3_f32", NULL);
	strata_plan_options po = base_options();
	po.experts.layers = 1;
	strata_error err;
	assert_null(open_run(path, po, 4, &err));
	assert_int_equal(err.code, STRATA_E_USAGE);
	assert_non_null(strstr(err.message, "--n-cpu-moe"));
	ref_family_path(path, sizeof path, "qwen3_moe_f32", NULL);
	po = base_options();
	po.experts.cache_slots = 2;
	assert_null(open_run(path, po, 4, &err));
	assert_int_equal(err.code, STRATA_E_USAGE);
	assert_non_null(strstr(err.message, "--expert-cache"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_experts_on_cpu),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
