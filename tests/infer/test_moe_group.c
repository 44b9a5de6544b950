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

#include "infer/forward_internal.h"
#include "support/refmodel.h"

#define GIB (1ull << 30)

static const char *const models[] = {
	"mixtral_f32", "qwen2_moe_shared_f32", "qwen3_moe_f32",
	"qwen3_moe_unnorm_bf16",
};

/* experts on the CPU: -1 none; cache slots; stream rows (0: never) */
typedef struct group_case {
	const char *name;
	int layers, slots, stream;
} group_case;

static const group_case cases[] = {
	{"resident", -1, 0, 0},
	{"experts on the cpu, 2 cached", 0, 2, 0},
	{"experts on the cpu, 2 cached, streamed", 0, 2, 2},
};

/* The prompt in one pass, then token by token, with the knob at `group`:
 * (2 n, vocab) logits. */
static float *run(const char *path, const group_case *k, const ref_data *r,
		  int group)
{
	strata_session_options o = {.model_path = path, .threads = 1,
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
	uint32_t layers = strata_session_hparams(probe)->layers;
	strata_session_close(probe);
	if (k->layers >= 0) {
		o.plan.experts.layers = k->layers ? (uint32_t)k->layers : layers;
		o.plan.experts.cache_slots = (uint64_t)k->slots;
		o.plan.experts.stream_rows = (uint64_t)k->stream;
	}
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s (%s): %s / %s", path, k->name, err.message, err.fix);
	const uint64_t row = r->vocab, n = r->n_tokens;
	float *out = strata_alloc(2 * n * row * sizeof *out);
	assert_non_null(out);
	strata_forward *f = strata_session_forward(s);
	strata__moe_group = group;
	if (strata_forward_run(f, r->tokens, r->n_tokens, 0, out, NULL, &err))
		fail_msg("%s (%s) prefill: %s", path, k->name, err.message);
	strata_forward_reset(f);
	for (uint32_t t = 0; t < r->n_tokens; t++)
		if (strata_forward_run(f, r->tokens + t, 1, t,
				       out + (n + t) * row, NULL, &err))
			fail_msg("%s (%s) decode %u: %s", path, k->name, t,
				 err.message);
	strata__moe_group = 0;
	strata_session_close(s);
	return out;
}

static void test_moe_group_same_bits_on_cpu(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
		char path[1024];
		ref_family_path(path, sizeof path, models[m], NULL);
		ref_data r;
		ref_load_family(models[m], &r);
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			float *off = run(path, &cases[c], &r, 0);
			float *on = run(path, &cases[c], &r, 1);
			const size_t bytes = (size_t)2 * r.n_tokens * r.vocab *
					     sizeof *off;
			if (memcmp(off, on, bytes))
				fail_msg("%s, %s: --moe-group 1 changed the "
					 "logits (max |d| %.3g)",
					 models[m], cases[c].name,
					 ref_max_diff(off, on,
						      (uint64_t)2 * r.n_tokens *
							      r.vocab));
			print_message("%-24s %-40s same bits\n", models[m],
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
