/* test_cuda_step.c - several sequences per forward pass on the CUDA backend
 * (issue 9's --batch B): through the session `strata batch` opens with
 * --batch 4, on every reference model, resident and host:1, each row of
 * strata_forward_step gives the logits of that token decoded alone by a
 * one-sequence session within 1e-4 (f32 weights: the several-row product is
 * a GEMM where one row is a GEMV) or 2e-2 (bf16/f16 weights, kept half: the
 * several-row half product keeps activations nearly f32), for sequences
 * at different positions in any order and subset; a mixed step (a prompt
 * chunk beside a decode token) within the same bounds. Exits 77 (skipped) where
 * no CUDA device is visible (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"
#include "support/gpu_skip.h"

#define MIB (1ull << 20)
#define SEQS 4u
#define DECODES 3u
#define POSITIONS 32u

static const strata_plan_options modes[] = {
	{.mode = STRATA_RESIDENCY_RESIDENT},
	{.mode = STRATA_RESIDENCY_HOST, .host_depth = 1,
	 .has_device_budget = true, .device_budget_bytes = 256 * MIB,
	 .has_host_budget = true, .host_budget_bytes = 256 * MIB},
};

/* Which sequences each step runs, in that row order (count first); each
 * sequence gets DECODES tokens. */
static const uint32_t schedule[][SEQS + 1] = {
	{4, 0, 1, 2, 3}, {2, 3, 1}, {3, 2, 0, 1}, {3, 0, 3, 2},
};
#define STEPS (sizeof schedule / sizeof *schedule)

static strata_session *open_session(const char *path,
				    const strata_plan_options *mode,
				    uint64_t sequences)
{
	strata_session_options so = {.model_path = path, .plan = *mode,
				     .threads = 2, .positions = POSITIONS,
				     .prefill = 8,
				     .precision = STRATA_PRECISION_EXACT};
	so.plan.device = STRATA_PLAN_DEVICE_CUDA;
	so.plan.shape.batch = sequences;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&so, &s, &err))
		fail_msg("%s: %s (%s)", path, err.message, err.fix);
	return s;
}

static uint32_t prompt_of(const ref_data *r, uint32_t k, int32_t *out)
{
	uint32_t n = 2 + 2 * k;
	for (uint32_t i = 0; i < n; i++)
		out[i] = r->tokens[(i + k) % r->n_tokens];
	return n;
}

static int32_t token_of(const ref_data *r, uint32_t k, uint32_t j)
{
	return r->tokens[(5 * k + 3 * j + 1) % r->n_tokens];
}

static void check_model(const char *name, const strata_plan_options *mode)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	strata_error err;
	int32_t p[16], toks[SEQS];
	uint64_t row = r.vocab;
	float *want = strata_alloc(SEQS * DECODES * row * sizeof(float));
	float *got = strata_alloc(SEQS * row * sizeof(float));
	assert_true(want && got);
	/* one sequence at a time */
	strata_session *s = open_session(path, mode, 1);
	for (uint32_t k = 0; k < SEQS; k++) {
		uint32_t n = prompt_of(&r, k, p);
		strata_forward_reset(strata_session_forward(s));
		assert_int_equal(strata_forward_run(strata_session_forward(s),
						    p, n, 0, NULL, NULL, &err),
				 STRATA_OK);
		for (uint32_t j = 0; j < DECODES; j++) {
			int32_t t = token_of(&r, k, j);
			assert_int_equal(strata_forward_run(
						 strata_session_forward(s), &t,
						 1, n + j, NULL,
						 want + (k * DECODES + j) * row,
						 &err),
					 STRATA_OK);
		}
	}
	bool half = strata_session_source(s)->statics.lm_head_elem !=
		    STRATA_ELEM_F32;
	strata_session_close(s);
	/* all of them, stepped together */
	s = open_session(path, mode, SEQS);
	assert_int_equal(strata_forward_sequences(strata_session_forward(s)),
			 SEQS);
	for (uint32_t k = 0; k < SEQS; k++) {
		uint32_t n = prompt_of(&r, k, p);
		assert_int_equal(strata_forward_select(
					 strata_session_forward(s), k, &err),
				 STRATA_OK);
		assert_int_equal(strata_forward_run(strata_session_forward(s),
						    p, n, 0, NULL, NULL, &err),
				 STRATA_OK);
	}
	uint32_t done[SEQS] = {0};
	double worst = 0;
	for (size_t st = 0; st < STEPS; st++) {
		uint32_t count = schedule[st][0];
		const uint32_t *seqs = &schedule[st][1];
		for (uint32_t i = 0; i < count; i++)
			toks[i] = token_of(&r, seqs[i], done[seqs[i]]);
		if (strata_forward_step(strata_session_forward(s), seqs, toks,
					count, got, &err))
			fail_msg("%s step %zu: %s", name, st, err.message);
		for (uint32_t i = 0; i < count; i++) {
			uint32_t k = seqs[i];
			double d = ref_max_diff(
				got + i * row,
				want + (k * DECODES + done[k]) * row, row);
			worst = d > worst ? d : worst;
			done[k]++;
		}
	}
	printf("%s %s: step rows within %.3g of one-sequence decodes\n", name,
	       strata_residency_mode_name(mode->mode), worst);
	if (worst > (half ? 2e-2 : 1e-4))
		fail_msg("%s: step logits %.3g from one-sequence decodes", name,
			 worst);
	strata_session_close(s);
	strata_free(want);
	strata_free(got);
	ref_free(&r);
}

/* A mixed step (issue 19): sequence 0 (prefilled) decodes a token while
 * sequence 1 reads a 6-token prompt whole, in one pass: both logits rows
 * within the tolerance above of one-sequence runs. */
static void check_mixed(const char *name, const strata_plan_options *mode)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	strata_error err;
	int32_t p0[8], p1[6];
	for (uint32_t i = 0; i < 8; i++)
		p0[i] = r.tokens[i % r.n_tokens];
	for (uint32_t i = 0; i < 6; i++)
		p1[i] = r.tokens[(3 * i + 2) % r.n_tokens];
	uint64_t row = r.vocab;
	float *want = strata_alloc(2 * row * sizeof(float));
	float *got = strata_alloc(2 * row * sizeof(float));
	assert_true(want && got);
	strata_session *s = open_session(path, mode, 1);
	strata_forward *f = strata_session_forward(s);
	assert_int_equal(strata_forward_run(f, p0, 4, 0, NULL, NULL, &err),
			 STRATA_OK);
	assert_int_equal(strata_forward_run(f, p0 + 4, 1, 4, NULL, want, &err),
			 STRATA_OK);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, p1, 6, 0, NULL, want + row,
					    &err),
			 STRATA_OK);
	bool half = strata_session_source(s)->statics.lm_head_elem !=
		    STRATA_ELEM_F32;
	strata_session_close(s);
	s = open_session(path, mode, SEQS);
	f = strata_session_forward(s);
	assert_true(strata_forward_step_rows(f) >= 7);
	assert_int_equal(strata_forward_run(f, p0, 4, 0, NULL, NULL, &err),
			 STRATA_OK);
	const strata_forward_segment segs[] = {{0, p0 + 4, 1, true},
					       {1, p1, 6, true}};
	if (strata_forward_step_segments(f, segs, 2, got, &err))
		fail_msg("%s mixed step: %s", name, err.message);
	double d0 = ref_max_diff(got, want, row);
	double d1 = ref_max_diff(got + row, want + row, row);
	printf("%s %s: mixed step within %.3g (decode) and %.3g (prompt)\n",
	       name, strata_residency_mode_name(mode->mode), d0, d1);
	double tol = half ? 2e-2 : 1e-4;
	if (d0 > tol || d1 > tol)
		fail_msg("%s: mixed step logits %.3g / %.3g from own runs",
			 name, d0, d1);
	strata_session_close(s);
	strata_free(want);
	strata_free(got);
	ref_free(&r);
}

static void test_step_rows_match_one_sequence_decodes(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
		for (int i = 0; i < REF_MODEL_COUNT; i++)
			check_model(ref_models[i], &modes[m]);
}

static void test_mixed_step_matches_own_runs(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
		for (int i = 0; i < REF_MODEL_COUNT; i++)
			check_mixed(ref_models[i], &modes[m]);
}

int main(void)
{
	if (gpu_skip_without_device("test_infer_cuda_step"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_step_rows_match_one_sequence_decodes),
		cmocka_unit_test(test_mixed_step_matches_own_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
