/* test_experts_cost.c - the plan's figures for the experts on the CPU
 * (strata_plan_experts_pass, docs/plan.md "Experts") against what the
 * expert store counts running them, on the four mixtures of experts of
 * tests/data/families on a CPU device: a decode step's calls, misses and
 * CPU bytes are exactly the plan's (one row routes experts_used experts a
 * layer, each read whole, nothing else); a cache with room for every
 * expert hits every call once warm; a prompt whose calls overflow the
 * cache hits nothing and admits every miss, as the plan says (layer:
 * infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define GIB (1ull << 30)

static const char *const models[] = {
	"mixtral_f32", "qwen2_moe_shared_f32", "qwen3_moe_f32",
	"qwen3_moe_unnorm_bf16",
};

static strata_session *open_run(const char *name, uint32_t layers,
				uint32_t slots, uint32_t n)
{
	char path[1024];
	ref_family_path(path, sizeof path, name, NULL);
	strata_session_options o = {
		.model_path = path, .threads = 1, .positions = n, .prefill = n,
		.plan = {.mode = STRATA_RESIDENCY_AUTO,
			 .device = STRATA_PLAN_DEVICE_CPU,
			 .has_device_budget = true, .device_budget_bytes = GIB,
			 .has_host_budget = true, .host_budget_bytes = GIB,
			 .experts = {.layers = layers, .cache_slots = slots}}};
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s: %s / %s", name, err.message, err.fix);
	return s;
}

static strata_infer_experts_stats stats_of(strata_session *s)
{
	strata_infer_experts_stats st;
	strata_infer_experts_get_stats(strata_session_experts(s), &st);
	return st;
}

/* The counts between a (before) and b (after). */
static strata_infer_experts_stats added(strata_infer_experts_stats a,
					strata_infer_experts_stats b)
{
	b.routed -= a.routed, b.hits -= a.hits, b.misses -= a.misses;
	b.streamed -= a.streamed, b.admissions -= a.admissions;
	b.evictions -= a.evictions, b.cpu_bytes -= a.cpu_bytes;
	b.upload_bytes -= a.upload_bytes;
	return b;
}

/* The n tokens one at a time from position 0: the counts they add. */
static strata_infer_experts_stats decode(strata_session *s, const ref_data *r)
{
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	strata_infer_experts_stats a = stats_of(s);
	strata_forward_reset(f);
	for (uint32_t t = 0; t < r->n_tokens; t++)
		if (strata_forward_run(f, r->tokens + t, 1, t, NULL, NULL, &err))
			fail_msg("decode %u: %s", t, err.message);
	return added(a, stats_of(s));
}

/* One expert's three tensors of layer 0 in the catalog, as the CPU
 * computes them (f32 and bf16: as stored). */
static uint64_t one_expert_bytes(strata_session *s)
{
	strata_catalog *c;
	strata_error err;
	assert_int_equal(strata_catalog_open(strata_session_model_path(s), &c,
					     &err), STRATA_OK);
	uint64_t b = 0;
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		if (strata_plan_expert_layer(t->name) == 0 &&
		    strstr(t->name, ".experts.0."))
			b += t->bytes;
	}
	strata_catalog_destroy(c);
	return b;
}

/* No cache: each decode step's counts are the plan's, exactly. */
static void test_decode_counts_are_the_plans(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
		ref_data r;
		ref_load_family(models[m], &r);
		for (uint32_t layers = 1; layers <= 2; layers++) {
			strata_session *s = open_run(models[m], layers, 0,
						     r.n_tokens);
			const strata_plan *p = strata_session_plan(s);
			const strata_infer_hparams *hp = strata_session_hparams(s);
			strata_plan_experts_figures f;
			strata_plan_experts_pass(p, 1.0, false, &f);
			/* a token reads experts_used experts a layer, whole */
			double per = (double)layers * hp->experts_used;
			assert_true(f.calls == per && f.misses == per);
			assert_true(f.hits == 0 && f.admissions == 0 &&
				    f.upload_bytes == 0);
			assert_true(f.cpu_bytes ==
				    per * (double)one_expert_bytes(s));
			strata_infer_experts_stats got = decode(s, &r);
			double n = (double)r.n_tokens;
			print_message("%-24s %u layers: %llu calls, %llu B on "
				      "the cpu; plan %.0f, %.0f B a token\n",
				      models[m], layers,
				      (unsigned long long)got.routed,
				      (unsigned long long)got.cpu_bytes,
				      f.calls, f.cpu_bytes);
			assert_true((double)got.routed == n * f.calls);
			assert_true((double)got.misses == n * f.misses);
			assert_true((double)got.cpu_bytes == n * f.cpu_bytes);
			assert_int_equal(got.hits, 0);
			assert_int_equal(got.upload_bytes, 0);
			strata_session_close(s);
		}
		ref_free(&r);
	}
}

/* Room for every expert: the plan's share is 1, and once each expert
 * has been in, a second sweep of the same tokens hits every call. */
static void test_full_cache_hits_every_call(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
		ref_data r;
		ref_load_family(models[m], &r);
		char path[1024];
		ref_family_path(path, sizeof path, models[m], NULL);
		strata_session *probe = open_run(models[m], 2, 0, r.n_tokens);
		uint32_t all = 2 * strata_session_hparams(probe)->experts;
		strata_session_close(probe);
		strata_session *s = open_run(models[m], 2, all, r.n_tokens);
		strata_plan_experts_figures f;
		strata_plan_experts_pass(strata_session_plan(s), 1.0, false, &f);
		assert_true(f.hits == f.calls && f.misses == 0 &&
			    f.cpu_bytes == 0);
		(void)decode(s, &r); /* every expert it routes to comes in */
		strata_infer_experts_stats got = decode(s, &r);
		assert_true((double)got.hits == (double)r.n_tokens * f.hits);
		assert_int_equal(got.misses, 0);
		assert_int_equal(got.cpu_bytes, 0);
		strata_session_close(s);
		ref_free(&r);
	}
}

/* One prompt pass from position 0: the counts it adds. */
static strata_infer_experts_stats prompt(strata_session *s, const ref_data *r,
					 const char *name)
{
	strata_forward *fw = strata_session_forward(s);
	strata_error err;
	strata_infer_experts_stats a = stats_of(s);
	strata_forward_reset(fw);
	if (strata_forward_run(fw, r->tokens, r->n_tokens, 0, NULL, NULL, &err))
		fail_msg("%s: %s", name, err.message);
	return added(a, stats_of(s));
}

/* A prompt calling more experts than the cache holds, three times. The
 * first pass fills the two empty slots and evicts nothing (every expert
 * ranks by its rows before the pass: none); the second replaces what
 * the first pass's rows rank lower; from then on the two with the most
 * rows stay and every pass hits both. The plan gives a prompt the
 * cache's uniform share and no admissions. */
static void test_prompt_keeps_the_cache(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
		ref_data r;
		ref_load_family(models[m], &r);
		strata_session *s = open_run(models[m], 2, 2, r.n_tokens);
		const strata_infer_hparams *hp = strata_session_hparams(s);
		strata_plan_experts_figures f;
		strata_plan_experts_pass(strata_session_plan(s),
					 (double)r.n_tokens, true, &f);
		assert_true(f.calls > 2.0); /* the pass overflows 2 slots */
		double share = 2.0 / (2.0 * hp->experts);
		assert_true(fabs(f.hits - f.calls * share) <= 1e-9 * f.calls);
		assert_true(f.admissions == 0 && f.upload_bytes == 0);
		strata_infer_experts_stats p1 = prompt(s, &r, models[m]);
		strata_infer_experts_stats p2 = prompt(s, &r, models[m]);
		strata_infer_experts_stats p3 = prompt(s, &r, models[m]);
		print_message("%-24s prompt passes: admissions %llu, %llu, "
			      "%llu of %llu calls; hits %llu, %llu, %llu\n",
			      models[m], (unsigned long long)p1.admissions,
			      (unsigned long long)p2.admissions,
			      (unsigned long long)p3.admissions,
			      (unsigned long long)p1.routed,
			      (unsigned long long)p1.hits,
			      (unsigned long long)p2.hits,
			      (unsigned long long)p3.hits);
		assert_true(p1.routed > 2);
		assert_int_equal(p1.hits, 0);
		assert_int_equal(p1.admissions, 2);
		assert_int_equal(p1.evictions, 0);
		assert_true(p2.admissions < p2.misses);
		assert_int_equal(p2.admissions, p2.evictions);
		assert_int_equal(p3.admissions, 0);
		assert_int_equal(p3.hits, 2);
		strata_session_close(s);
		ref_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_counts_are_the_plans),
		cmocka_unit_test(test_full_cache_hits_every_call),
		cmocka_unit_test(test_prompt_keeps_the_cache),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
