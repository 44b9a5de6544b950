/* test_cuda_families.c - the families beyond llama on CUDA (issue 22):
 * every model of tests/data/families (Qwen3, Gemma 2, Gemma 3, Phi-3 with
 * and without longrope, Mixtral, Qwen2-MoE with its shared expert,
 * Qwen3-MoE normalised and not) through the session `strata run` uses,
 * resident, streamed through a window, in placements with units computed
 * on the CPU, and for the mixtures of experts with every layer's experts
 * on the CPU (no device cache, and a cache of two), gives every position's
 * logits within 1e-3 of transformers' float64 ones, the bound.
 * f32 activations (--precision exact): the bound is for them. Skipped (77)
 * without a GPU (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/gpu_skip.h"
#include "support/refmodel.h"

#define TOLERANCE 1e-3
#define GIB (1ull << 30)
#define MIB (1ull << 20)

typedef struct family_case {
	const char *name;
	strata_residency_mode mode;
	uint64_t depth;		/* host:D */
	int resident, cpu;	/* placement forced (-1: not) */
	int expert_slots;	/* experts on the CPU, this cache (-1: no) */
} family_case;

static const family_case cases[] = {
	{"resident", STRATA_RESIDENCY_RESIDENT, 0, -1, -1, -1},
	{"host:1", STRATA_RESIDENCY_HOST, 1, -1, -1, -1},
	{"one resident, the rest on the cpu", STRATA_RESIDENCY_AUTO, 0, 1, 99,
	 -1},
	{"streamed and cpu interleaved", STRATA_RESIDENCY_AUTO, 0, 0, 1, -1},
	{"experts on the cpu", STRATA_RESIDENCY_RESIDENT, 0, -1, -1, 0},
	{"experts on the cpu, 2 cached", STRATA_RESIDENCY_RESIDENT, 0, -1, -1,
	 2},
};
#define CASE_COUNT (sizeof cases / sizeof *cases)

static strata_plan_options options_of(const family_case *k, uint32_t layers)
{
	strata_plan_options po = {.mode = k->mode, .host_depth = k->depth,
				  .has_device_budget = true,
				  .device_budget_bytes = 512 * MIB,
				  .has_host_budget = true,
				  .host_budget_bytes = GIB};
	if (k->resident >= 0) {
		po.has_resident_units = po.has_cpu_units = true;
		po.resident_units = (uint64_t)k->resident;
		po.cpu_units = (uint64_t)k->cpu;
	}
	if (k->expert_slots >= 0) {
		po.experts.layers = layers;
		po.experts.cache_slots = (uint64_t)k->expert_slots;
	}
	return po;
}

static strata_session *open_cuda(const char *path, strata_plan_options po,
				 uint32_t n)
{
	strata_session_options o = {.model_path = path, .threads = 2,
				    .positions = n, .prefill = n, .plan = po,
				    .precision = STRATA_PRECISION_EXACT};
	o.plan.device = STRATA_PLAN_DEVICE_CUDA;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s: %s / %s", path, err.message, err.fix);
	return s;
}

static void check_family(const char *name)
{
	char path[1024];
	ref_family_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load_family(name, &r);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *logits = strata_alloc(cells * sizeof *logits);
	assert_non_null(logits);
	strata_session *s =
		open_cuda(path, options_of(&cases[0], 0), r.n_tokens);
	const strata_infer_hparams *hp = strata_session_hparams(s);
	uint32_t layers = hp->layers;
	bool moe = hp->experts > 0;
	strata_session_close(s);
	for (size_t c = 0; c < CASE_COUNT; c++) {
		if (cases[c].expert_slots >= 0 && !moe)
			continue;
		s = open_cuda(path, options_of(&cases[c], layers), r.n_tokens);
		char plan[96], what[256];
		strata_plan_candidate_name(
			strata_plan_selected(strata_session_plan(s)), plan,
			sizeof plan);
		snprintf(what, sizeof what, "%s %s (%s), against transformers'",
			 name, cases[c].name, plan);
		double d = ref_run_compare(what, strata_session_forward(s), &r,
					   r.logits, TOLERANCE, logits, NULL);
		print_message("%-22s %-36s max |dlogit| %.2e (%s)\n", name,
			      cases[c].name, d, plan);
		strata_error err;
		assert_int_equal(strata_session_finish(s, &err), STRATA_OK);
		strata_session_close(s);
	}
	strata_free(logits);
	ref_free(&r);
}

static void test_families_every_placement(void **state)
{
	(void)state;
	for (size_t i = 0; i < REF_FAMILY_COUNT; i++)
		check_family(ref_families[i]);
}

int main(void)
{
	if (gpu_skip_without_device("test_infer_cuda_families"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_families_every_placement),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
