/* test_moe_group.c - strata__moe_group (a layer's device experts in one
 * strata_kernel_experts call, issue 22) on the CPU: on the four mixture-
 * of-experts models of tests/data/families, resident, with every layer's
 * experts on the CPU and a device cache of two, and with prompt experts
 * streamed (a streamed expert runs between the grouped hits), the
 * prompt's logits in one pass and then token by token are the same bits
 * with the knob 1 as with 0: the CPU's experts slot (kernels_experts.c)
 * or, where it declines, the wrapper's one-expert-at-a-time composition
 * adds the experts in their order (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "infer/moe_knob_fixture.h"

static const moe_case cases[] = {
	{"resident", -1, 0, 0},
	{"experts on the cpu, 2 cached", 0, 2, 0},
	{"experts on the cpu, 2 cached, streamed", 0, 2, 2},
};

/* The case's logits with the knob at `group` (restored after). */
static float *run(const char *path, const moe_case *k, const ref_data *r,
		  int group)
{
	strata_session *s = moe_open(path, k, r, 1);
	const int was = strata__moe_group;
	strata__moe_group = group;
	float *out = moe_logits(s, r, k->name);
	strata__moe_group = was;
	strata_session_close(s);
	return out;
}

static void test_moe_group_same_bits_on_cpu(void **state)
{
	(void)state;
	for (size_t m = 0; m < MOE_MODELS; m++) {
		char path[1024];
		ref_family_path(path, sizeof path, moe_models[m], NULL);
		ref_data r;
		ref_load_family(moe_models[m], &r);
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			float *off = run(path, &cases[c], &r, 0);
			float *on = run(path, &cases[c], &r, 1);
			const size_t bytes = (size_t)2 * r.n_tokens * r.vocab *
					     sizeof *off;
			if (memcmp(off, on, bytes))
				fail_msg("%s, %s: --moe-group 1 changed the "
					 "logits (max |d| %.3g)",
					 moe_models[m], cases[c].name,
					 ref_max_diff(off, on,
						      (uint64_t)2 * r.n_tokens *
							      r.vocab));
			print_message("%-24s %-40s same bits\n", moe_models[m],
				      cases[c].name);
			strata_free(off);
			strata_free(on);
		}
		ref_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_moe_group_same_bits_on_cpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
