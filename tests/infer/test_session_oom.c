/* test_session_oom.c - opening a session (catalog, hyper-parameters,
 * tensors, plan, weight store, backend, window with its loads and
 * mapping, compute, forward pass) and running a pass, with every
 * allocation failing in turn, on each model family and weight format the
 * recent work added: the shipped safetensors model in every residency
 * mode, its GGUF, quantized GGUFs (the block decoders), and the Qwen3,
 * Gemma, Phi-3, Mixtral and Qwen3-MoE checkpoints. Each failure is a
 * clean E_NOMEM (or an error that says memory), with nothing left open;
 * ASan checks the leaks (issue 20) (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "strata/infer.h"

#define DATA STRATA_SOURCE_DIR "/tests/data/"

typedef struct model_case {
	const char *path;
	strata_residency_mode mode;
	uint64_t depth;
	bool no_map;
} model_case;

static strata_status open_and_run(const model_case *m, strata_error *err)
{
	strata_session_options o = {.model_path = m->path, .threads = 1,
				    .positions = 8, .prefill = 4,
				    .no_map = m->no_map};
	o.plan.mode = m->mode;
	o.plan.host_depth = m->depth;
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_session *s = NULL;
	strata_status st = strata_session_open(&o, &s, err);
	static const int32_t tokens[4] = {1, 2, 3, 4};
	if (st == STRATA_OK) {
		assert_non_null(s);
		st = strata_forward_run(strata_session_forward(s), tokens, 4, 0,
					NULL, NULL, err);
	} else {
		assert_null(s); /* nothing survives a failed open */
	}
	if (st == STRATA_OK)
		st = strata_session_finish(s, err);
	strata_session_close(s);
	return st;
}

/* Loops n = 0, 1, ... until the open and the pass succeed; returns the
 * number of allocations the whole thing made. */
static long oom_loop(const model_case *m)
{
	strata_error err;
	for (long n = 0;; n++) {
		strata_alloc_fail_after(n);
		strata_status st = open_and_run(m, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			return n;
		if (st != STRATA_E_NOMEM && !strstr(err.message, "memory"))
			fail_msg("%s, allocation %ld: %s: %s", m->path, n,
				 strata_status_name(st), err.message);
		if (n > 200000)
			fail_msg("%s: no success after %ld allocations",
				 m->path, n);
	}
}

static void run_cases(const model_case *cases, size_t n)
{
	strata_error err;
	for (size_t i = 0; i < n; i++) {
		/* the model must open and run at all first */
		if (open_and_run(&cases[i], &err) != STRATA_OK)
			fail_msg("%s: %s", cases[i].path, err.message);
		long allocs = oom_loop(&cases[i]);
		print_message("%s (mode %d): %ld allocations, each failed once\n",
			      cases[i].path, (int)cases[i].mode, allocs);
		assert_true(allocs > 0);
	}
}

static void test_safetensors_every_mode_survives_oom(void **state)
{
	(void)state;
	const char *m = STRATA_SOURCE_DIR "/models/stories260K";
	const model_case cases[] = {
		{m, STRATA_RESIDENCY_RESIDENT, 0, false}, /* mapped */
		{m, STRATA_RESIDENCY_RESIDENT, 0, true},  /* read */
		{m, STRATA_RESIDENCY_HOST, 2, false},
		{m, STRATA_RESIDENCY_DISK, 0, false},
	};
	run_cases(cases, sizeof cases / sizeof *cases);
}

static void test_gguf_and_quantized_survive_oom(void **state)
{
	(void)state;
	const model_case cases[] = {
		{DATA "gguf/stories260K.gguf", STRATA_RESIDENCY_RESIDENT, 0, false},
		{DATA "quant/model-Q8_0.gguf", STRATA_RESIDENCY_RESIDENT, 0, false},
		{DATA "quant/model-Q4_K_M.gguf", STRATA_RESIDENCY_RESIDENT, 0, false},
		{DATA "quant/model-IQ4_XS.gguf", STRATA_RESIDENCY_HOST, 1, false},
	};
	run_cases(cases, sizeof cases / sizeof *cases);
}

static void test_new_families_survive_oom(void **state)
{
	(void)state;
	const model_case cases[] = {
		{DATA "families/qwen3_f32", STRATA_RESIDENCY_RESIDENT, 0, false},
		{DATA "families/gemma3_bf16", STRATA_RESIDENCY_RESIDENT, 0, false},
		{DATA "families/gemma2_f32", STRATA_RESIDENCY_DISK, 0, false},
		{DATA "families/phi3_f32", STRATA_RESIDENCY_RESIDENT, 0, false},
		{DATA "families/mixtral_f32", STRATA_RESIDENCY_RESIDENT, 0, false},
		{DATA "families/qwen3_moe_f32", STRATA_RESIDENCY_HOST, 1, false},
	};
	run_cases(cases, sizeof cases / sizeof *cases);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_safetensors_every_mode_survives_oom),
		cmocka_unit_test(test_gguf_and_quantized_survive_oom),
		cmocka_unit_test(test_new_families_survive_oom),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
