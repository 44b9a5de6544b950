/* test_sampling.c - the sampler: greedy, temperature, top-k, top-p, min-p,
 * repetition penalty, seeded determinism, parameter errors and OOM. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "strata/infer.h"

static strata_sampler *make(strata_sampler_params p, uint32_t vocab)
{
	strata_sampler *s = NULL;
	strata_error err;
	assert_int_equal(strata_sampler_create(&p, vocab, &s, &err), STRATA_OK);
	return s;
}

static strata_sampler_params plain(float t, uint64_t seed)
{
	return (strata_sampler_params){.temperature = t, .top_p = 1,
				       .repeat_penalty = 1, .seed = seed};
}

/* Logits whose softmax at T=1 is exactly probs (up to a constant). */
static void logits_of(const double *probs, uint32_t n, float *out)
{
	for (uint32_t i = 0; i < n; i++)
		out[i] = probs[i] > 0 ? (float)log(probs[i]) : -1e30f;
}

static void draw(strata_sampler *s, const float *logits, uint32_t vocab,
		 int draws, int *counts)
{
	float work[16];
	memset(counts, 0, vocab * sizeof *counts);
	for (int i = 0; i < draws; i++) {
		memcpy(work, logits, vocab * sizeof *work);
		int32_t t = strata_sampler_sample(s, work, NULL, 0);
		assert_true(t >= 0 && (uint32_t)t < vocab);
		counts[t]++;
	}
}

/* ------------------------------------------------------------------------ */

static void test_greedy_picks_argmax_lowest_id_on_tie(void **state)
{
	(void)state;
	strata_sampler *s = make(plain(0, 1), 5);
	float l[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
	assert_int_equal(strata_sampler_sample(s, l, NULL, 0), 1);
	strata_sampler_destroy(s);
}

static void test_same_seed_same_tokens(void **state)
{
	(void)state;
	double p[6] = {0.3, 0.2, 0.2, 0.1, 0.1, 0.1};
	float l[6], w[6];
	logits_of(p, 6, l);
	strata_sampler *a = make(plain(1, 42), 6), *b = make(plain(1, 42), 6);
	strata_sampler *c = make(plain(1, 43), 6);
	int differ = 0;
	for (int i = 0; i < 500; i++) {
		memcpy(w, l, sizeof w);
		int32_t ta = strata_sampler_sample(a, w, NULL, 0);
		memcpy(w, l, sizeof w);
		int32_t tb = strata_sampler_sample(b, w, NULL, 0);
		memcpy(w, l, sizeof w);
		int32_t tc = strata_sampler_sample(c, w, NULL, 0);
		assert_int_equal(ta, tb);
		differ += ta != tc;
	}
	assert_true(differ > 100);
	strata_sampler_destroy(a);
	strata_sampler_destroy(b);
	strata_sampler_destroy(c);
}

static void test_temperature_one_follows_softmax(void **state)
{
	(void)state;
	double p[3] = {0.5, 0.3, 0.2};
	float l[3];
	logits_of(p, 3, l);
	strata_sampler *s = make(plain(1, 9), 3);
	int counts[3];
	draw(s, l, 3, 40000, counts);
	for (int i = 0; i < 3; i++)
		assert_true(fabs(counts[i] / 40000.0 - p[i]) < 0.015);
	strata_sampler_destroy(s);
	/* T = 0.5 squares the odds: 0.25 : 0.09 : 0.04. */
	s = make(plain(0.5f, 9), 3);
	draw(s, l, 3, 40000, counts);
	double z = 0.25 + 0.09 + 0.04;
	assert_true(fabs(counts[0] / 40000.0 - 0.25 / z) < 0.015);
	assert_true(fabs(counts[2] / 40000.0 - 0.04 / z) < 0.015);
	strata_sampler_destroy(s);
}

static void test_top_k_keeps_k_likeliest(void **state)
{
	(void)state;
	double p[6] = {0.05, 0.3, 0.1, 0.25, 0.2, 0.1};
	float l[6];
	logits_of(p, 6, l);
	strata_sampler_params sp = plain(1, 3);
	sp.top_k = 3;
	strata_sampler *s = make(sp, 6);
	int counts[6];
	draw(s, l, 6, 20000, counts);
	assert_int_equal(counts[0] + counts[2] + counts[5], 0);
	/* Renormalised over {1, 3, 4}: 0.3/0.75 = 0.4. */
	assert_true(fabs(counts[1] / 20000.0 - 0.4) < 0.02);
	assert_true(counts[3] > 0 && counts[4] > 0);
	strata_sampler_destroy(s);
	sp.top_k = 1;
	s = make(sp, 6);
	draw(s, l, 6, 200, counts);
	assert_int_equal(counts[1], 200);
	strata_sampler_destroy(s);
}

static void test_top_p_keeps_smallest_prefix(void **state)
{
	(void)state;
	double p[4] = {0.15, 0.5, 0.05, 0.3};
	float l[4];
	logits_of(p, 4, l);
	strata_sampler_params sp = plain(1, 5);
	sp.top_p = 0.75f; /* 0.5 + 0.3 = 0.8 >= 0.75: keep {1, 3} */
	strata_sampler *s = make(sp, 4);
	int counts[4];
	draw(s, l, 4, 20000, counts);
	assert_int_equal(counts[0] + counts[2], 0);
	assert_true(fabs(counts[1] / 20000.0 - 0.5 / 0.8) < 0.02);
	strata_sampler_destroy(s);
}

static void test_min_p_drops_unlikely(void **state)
{
	(void)state;
	double p[4] = {0.4, 0.3, 0.19, 0.11};
	float l[4];
	logits_of(p, 4, l);
	strata_sampler_params sp = plain(1, 6);
	sp.min_p = 0.5f; /* keep p >= 0.2: {0, 1} */
	strata_sampler *s = make(sp, 4);
	int counts[4];
	draw(s, l, 4, 20000, counts);
	assert_int_equal(counts[2] + counts[3], 0);
	assert_true(counts[0] > counts[1] && counts[1] > 0);
	strata_sampler_destroy(s);
}

static void test_repeat_penalty_llama_cpp_rule(void **state)
{
	(void)state;
	strata_sampler_params sp = plain(0, 1);
	sp.repeat_penalty = 2.0f;
	sp.repeat_last_n = 2;
	strata_sampler *s = make(sp, 4);
	float l[4] = {2.0f, 1.9f, -1.0f, 0.5f};
	int32_t hist[3] = {0, 2, 2};
	/* Last 2 of history: {2}; token 0 is outside the window. */
	assert_int_equal(strata_sampler_sample(s, l, hist, 3), 0);
	assert_true(l[2] == -2.0f); /* negative: multiplied, once */
	assert_true(l[0] == 2.0f);
	float m[4] = {2.0f, 1.9f, -1.0f, 0.5f};
	int32_t hist2[2] = {2, 0};
	assert_int_equal(strata_sampler_sample(s, m, hist2, 2), 1);
	assert_true(m[0] == 1.0f); /* positive: divided */
	strata_sampler_destroy(s);
}

static void test_bad_parameters_are_refused(void **state)
{
	(void)state;
	strata_sampler_params bad[] = {
		{.temperature = -1, .top_p = 1, .repeat_penalty = 1},
		{.temperature = NAN, .top_p = 1, .repeat_penalty = 1},
		{.temperature = 1, .top_p = 0, .repeat_penalty = 1},
		{.temperature = 1, .top_p = 1.5f, .repeat_penalty = 1},
		{.temperature = 1, .top_p = 1, .min_p = 2, .repeat_penalty = 1},
		{.temperature = 1, .top_p = 1, .repeat_penalty = 0},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		strata_sampler *s = NULL;
		strata_error err;
		assert_int_equal(strata_sampler_create(&bad[i], 10, &s, &err),
				 STRATA_E_INVALID_ARG);
		assert_null(s);
		assert_non_null(strstr(err.message, "sampler:"));
	}
	strata_sampler_params ok = plain(1, 0);
	strata_sampler *s = NULL;
	strata_error err;
	assert_int_equal(strata_sampler_create(&ok, 0, &s, &err),
			 STRATA_E_INVALID_ARG);
}

static void test_sampler_create_survives_oom(void **state)
{
	(void)state;
	strata_sampler_params p;
	strata_sampler_params_default(&p);
	for (long n = 0;; n++) {
		strata_sampler *s = NULL;
		strata_error err;
		strata_alloc_fail_after(n);
		strata_status st = strata_sampler_create(&p, 1000, &s, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK) {
			strata_sampler_destroy(s);
			break;
		}
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_null(s);
	}
}

/* A row holding NaN or +inf, or only -inf, has no token to draw: an error
 * naming the position and the id (issue 20, defect 7); -inf entries among
 * finite ones (masked ids) are fine. */
static void test_nonfinite_logits_are_refused(void **state)
{
	(void)state;
	float row[4] = {0.5f, -INFINITY, 2.0f, 1.0f};
	strata_error err;
	assert_int_equal(strata_logits_check(row, 4, 7, &err), STRATA_OK);
	row[3] = NAN;
	assert_int_equal(strata_logits_check(row, 4, 7, &err),
			 STRATA_E_INFER_NONFINITE);
	assert_string_equal(err.message, "the logits of position 7 hold NaN "
					 "(token id 3): no token can be drawn");
	row[3] = INFINITY;
	assert_int_equal(strata_logits_check(row, 4, 9, &err),
			 STRATA_E_INFER_NONFINITE);
	assert_non_null(strstr(err.message, "+inf (token id 3)"));
	for (int i = 0; i < 4; i++)
		row[i] = -INFINITY;
	assert_int_equal(strata_logits_check(row, 4, 0, &err),
			 STRATA_E_INFER_NONFINITE);
	assert_non_null(strstr(err.message, "all -inf"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greedy_picks_argmax_lowest_id_on_tie),
		cmocka_unit_test(test_same_seed_same_tokens),
		cmocka_unit_test(test_temperature_one_follows_softmax),
		cmocka_unit_test(test_top_k_keeps_k_likeliest),
		cmocka_unit_test(test_top_p_keeps_smallest_prefix),
		cmocka_unit_test(test_min_p_drops_unlikely),
		cmocka_unit_test(test_repeat_penalty_llama_cpp_rule),
		cmocka_unit_test(test_bad_parameters_are_refused),
		cmocka_unit_test(test_sampler_create_survives_oom),
		cmocka_unit_test(test_nonfinite_logits_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
