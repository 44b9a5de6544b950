/* moe_knob_fixture.h - what the tests of a mixture-of-experts knob share
 * (test_moe_group.c, test_cpu_experts_grouped.c; layer: infer): the four
 * expert models of tests/data/families, a CPU session on one of them with
 * its experts placed as a case asks, and its logits over the reference
 * prompt in one pass and then token by token, so a test compares those
 * with the knob at 0 and at 1. */
#ifndef STRATA_TESTS_INFER_MOE_KNOB_FIXTURE_H
#define STRATA_TESTS_INFER_MOE_KNOB_FIXTURE_H

#include <stdint.h>

#include "infer/forward_internal.h"
#include "support/refmodel.h"

#define MOE_GIB (1ull << 30)

static const char *const moe_models[] = {
	"mixtral_f32", "qwen2_moe_shared_f32", "qwen3_moe_f32",
	"qwen3_moe_unnorm_bf16",
};
#define MOE_MODELS (sizeof moe_models / sizeof *moe_models)

/* Where a case puts the experts: cpu_layers -1 none on the CPU (resident),
 * 0 every layer's, else that many; the CPU cache's slots; the rows from
 * which a prompt streams an expert (0: never). */
typedef struct moe_case {
	const char *name;
	int cpu_layers, slots, stream;
} moe_case;

/* A CPU session on `path` (a GiB of each budget, the automatic plan) with
 * the experts placed as k says, sized for the prompt r. */
static strata_session *moe_open(const char *path, const moe_case *k,
				const ref_data *r, uint32_t threads)
{
	strata_session_options o = {.model_path = path, .threads = threads,
				    .positions = r->n_tokens,
				    .prefill = r->n_tokens};
	o.plan = (strata_plan_options){.mode = STRATA_RESIDENCY_AUTO,
				       .has_device_budget = true,
				       .device_budget_bytes = MOE_GIB,
				       .has_host_budget = true,
				       .host_budget_bytes = MOE_GIB};
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_session *probe = NULL, *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &probe, &err))
		fail_msg("%s: %s / %s", path, err.message, err.fix);
	uint32_t layers = strata_session_hparams(probe)->layers;
	strata_session_close(probe);
	if (k->cpu_layers >= 0) {
		o.plan.experts.layers =
			k->cpu_layers ? (uint32_t)k->cpu_layers : layers;
		o.plan.experts.cache_slots = (uint64_t)k->slots;
		o.plan.experts.stream_rows = (uint64_t)k->stream;
	}
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s (%s): %s / %s", path, k->name, err.message, err.fix);
	return s;
}

/* The prompt in one pass, then token by token: (2 n, vocab) logits into a
 * new buffer. */
static float *moe_logits(strata_session *s, const ref_data *r,
			 const char *what)
{
	const uint64_t row = r->vocab, n = r->n_tokens;
	float *out = strata_alloc(2 * n * row * sizeof *out);
	assert_non_null(out);
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	if (strata_forward_run(f, r->tokens, r->n_tokens, 0, out, NULL, &err))
		fail_msg("%s prefill: %s", what, err.message);
	strata_forward_reset(f);
	for (uint32_t t = 0; t < r->n_tokens; t++)
		if (strata_forward_run(f, r->tokens + t, 1, t,
				       out + (n + t) * row, NULL, &err))
			fail_msg("%s decode %u: %s", what, t, err.message);
	return out;
}

#endif
