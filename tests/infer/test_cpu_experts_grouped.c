/* test_cpu_experts_grouped.c - strata__cpu_experts_grouped (a layer's
 * experts missed on the CPU in one call of the CPU's experts slot, one job
 * of its pool, issue 22): on the four mixture-of-experts models of
 * tests/data/families with every layer's experts on the CPU (no cache;
 * a cache of two; the device's context a CPU one), the prompt's logits in
 * one pass and then token by token are the same bits with the knob 1 as
 * with 0 (one expert's kernels at a time, the path before it), and the
 * expert store counts the same routes, misses and bytes (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "infer/forward_internal.h"
#include "support/refmodel.h"

#define GIB (1ull << 30)

static const char *const models[] = {
	"mixtral_f32", "qwen2_moe_shared_f32", "qwen3_moe_f32",
	"qwen3_moe_unnorm_bf16",
};

/* cache slots of the experts on the CPU */
static const int slots[] = {0, 2};

/* The prompt in one pass, then token by token, with the knob at
 * `grouped`: (2 n, vocab) logits; the store's counters into *stats. */
static float *run(const char *path, int cache, const ref_data *r,
		  int grouped, strata_infer_experts_stats *stats)
{
	strata_session_options o = {.model_path = path, .threads = 2,
				    .positions = r->n_tokens,
				    .prefill = r->n_tokens};
	o.plan = (strata_plan_options){.mode = STRATA_RESIDENCY_AUTO,
				       .has_device_budget = true,
				       .device_budget_bytes = GIB,
				       .has_host_budget = true,
				       .host_budget_bytes = GIB};
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_session *probe = NULL, *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &probe, &err))
		fail_msg("%s: %s / %s", path, err.message, err.fix);
	o.plan.experts.layers = strata_session_hparams(probe)->layers;
	o.plan.experts.cache_slots = (uint64_t)cache;
	strata_session_close(probe);
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s (%d slots): %s / %s", path, cache, err.message,
			 err.fix);
	const uint64_t row = r->vocab, n = r->n_tokens;
	float *out = strata_alloc(2 * n * row * sizeof *out);
	assert_non_null(out);
	strata_forward *f = strata_session_forward(s);
	assert_non_null(f->experts);
	strata__cpu_experts_grouped = grouped;
	if (strata_forward_run(f, r->tokens, r->n_tokens, 0, out, NULL, &err))
		fail_msg("%s prefill: %s", path, err.message);
	strata_forward_reset(f);
	for (uint32_t t = 0; t < r->n_tokens; t++)
		if (strata_forward_run(f, r->tokens + t, 1, t,
				       out + (n + t) * row, NULL, &err))
			fail_msg("%s decode %u: %s", path, t, err.message);
	strata__cpu_experts_grouped = 1;
	strata_infer_experts_get_stats(f->experts, stats);
	strata_session_close(s);
	return out;
}

static void test_cpu_experts_grouped_same_bits(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
		char path[1024];
		ref_family_path(path, sizeof path, models[m], NULL);
		ref_data r;
		ref_load_family(models[m], &r);
		for (size_t c = 0; c < sizeof slots / sizeof *slots; c++) {
			strata_infer_experts_stats s0, s1;
			float *off = run(path, slots[c], &r, 0, &s0);
			float *on = run(path, slots[c], &r, 1, &s1);
			const uint64_t count = (uint64_t)2 * r.n_tokens *
					       r.vocab;
			if (memcmp(off, on, count * sizeof *off))
				fail_msg("%s, %d slots: the grouped misses "
					 "changed the logits (max |d| %.3g)",
					 models[m], slots[c],
					 ref_max_diff(off, on, count));
			assert_true(s1.misses > 0);
			if (memcmp(&s0, &s1, sizeof s0))
				fail_msg("%s, %d slots: the store counted "
					 "otherwise (misses %llu / %llu)",
					 models[m], slots[c],
					 (unsigned long long)s0.misses,
					 (unsigned long long)s1.misses);
			print_message("%-24s %d slots: same bits, %llu misses\n",
				      models[m], slots[c],
				      (unsigned long long)s1.misses);
			strata_free(off);
			strata_free(on);
		}
		ref_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_experts_grouped_same_bits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
