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

#include "infer/moe_knob_fixture.h"

/* every layer's experts on the CPU, no cache and a cache of two */
static const moe_case cases[] = {
	{"no cache", 0, 0, 0},
	{"2 cached", 0, 2, 0},
};

/* The case's logits with the knob at `grouped` (restored after); the
 * store's counters into *stats. */
static float *run(const char *path, const moe_case *k, const ref_data *r,
		  int grouped, strata_infer_experts_stats *stats)
{
	strata_session *s = moe_open(path, k, r, 2);
	strata_forward *f = strata_session_forward(s);
	assert_non_null(f->experts);
	const int was = strata__cpu_experts_grouped;
	strata__cpu_experts_grouped = grouped;
	float *out = moe_logits(s, r, k->name);
	strata__cpu_experts_grouped = was;
	strata_infer_experts_get_stats(f->experts, stats);
	strata_session_close(s);
	return out;
}

static void test_cpu_experts_grouped_same_bits(void **state)
{
	(void)state;
	for (size_t m = 0; m < MOE_MODELS; m++) {
		char path[1024];
		ref_family_path(path, sizeof path, moe_models[m], NULL);
		ref_data r;
		ref_load_family(moe_models[m], &r);
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			strata_infer_experts_stats s0, s1;
			float *off = run(path, &cases[c], &r, 0, &s0);
			float *on = run(path, &cases[c], &r, 1, &s1);
			const uint64_t count = (uint64_t)2 * r.n_tokens *
					       r.vocab;
			if (memcmp(off, on, count * sizeof *off))
				fail_msg("%s, %d slots: the grouped misses "
					 "changed the logits (max |d| %.3g)",
					 moe_models[m], cases[c].slots,
					 ref_max_diff(off, on, count));
			assert_true(s1.misses > 0);
			if (memcmp(&s0, &s1, sizeof s0))
				fail_msg("%s, %d slots: the store counted "
					 "otherwise (misses %llu / %llu)",
					 moe_models[m], cases[c].slots,
					 (unsigned long long)s0.misses,
					 (unsigned long long)s1.misses);
			print_message("%-24s %d slots: same bits, %llu misses\n",
				      moe_models[m], cases[c].slots,
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
