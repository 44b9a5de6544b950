/* test_reference.c - the forward pass against transformers on ten tiny
 * random models (tests/data/reference: llama GQA 1/2/4, tied and untied,
 * llama3 rope scaling, mistral sliding window, qwen2 biases; f32, bf16,
 * f16): logits of every position within 1e-3, greedy generations equal,
 * and decode one token at a time bit-identical to prefill. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define TOLERANCE 1e-3

static strata_compute *compute(uint32_t threads)
{
	strata_compute *c;
	strata_error err;
	assert_int_equal(strata_compute_create(&strata_cpu_kernel_ops, threads,
					       &c, &err),
			 STRATA_OK);
	return c;
}

static void check_model(const char *name, uint32_t batch)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	ref_open m;
	ref_open_model(path, &m);
	assert_int_equal(m.hp.vocab, r.vocab);
	ref_pass p;
	ref_pass_open(name, 2,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = 64, .batch = batch},
		      &p);
	strata_forward *f = p.f;
	strata_error err;
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *logits = strata_alloc(cells * sizeof *logits);
	float *one = strata_alloc(cells * sizeof *one);
	assert_int_equal(strata_forward_run(f, r.tokens, r.n_tokens, 0, logits,
					    NULL, &err),
			 STRATA_OK);
	double worst = 0;
	for (uint32_t i = 0; i < r.n_tokens; i++) {
		double d = ref_max_diff(logits + (uint64_t)i * r.vocab,
					r.logits + (uint64_t)i * r.vocab,
					r.vocab);
		if (!(d <= TOLERANCE))
			fail_msg("%s: position %u max |dlogit| %.3g > %.0e",
				 name, i, d, TOLERANCE);
		if (d > worst)
			worst = d;
	}
	print_message("%-22s max |dlogit| %.2e over %u positions\n", name,
		      worst, r.n_tokens);
	/* Decode, one position per pass: the same bits as the prefill. */
	strata_forward_reset(f);
	for (uint32_t i = 0; i < r.n_tokens; i++)
		assert_int_equal(strata_forward_run(f, r.tokens + i, 1, i,
						    NULL,
						    one + (uint64_t)i * r.vocab,
						    &err),
				 STRATA_OK);
	assert_memory_equal(one, logits, cells * sizeof *one);

	/* Greedy: 32 tokens equal to transformers'. */
	strata_forward_reset(f);
	strata_sampler_params sp = {.temperature = 0, .top_p = 1,
				    .repeat_penalty = 1};
	strata_sampler *s;
	assert_int_equal(strata_sampler_create(&sp, m.hp.vocab, &s, &err),
			 STRATA_OK);
	int32_t got[65] = {0};
	strata_generate_stats stats;
	assert_int_equal(strata_generate(f, s, r.tokens, r.n_tokens,
					 r.n_greedy, -1, ref_collect, got,
					 &stats, &err),
			 STRATA_OK);
	assert_int_equal(got[0], r.n_greedy);
	for (uint32_t i = 0; i < r.n_greedy; i++)
		if (got[1 + i] != r.greedy[i])
			fail_msg("%s: greedy token %u is %d, transformers "
				 "chose %d",
				 name, i, got[1 + i], r.greedy[i]);
	assert_int_equal(stats.generated_tokens, r.n_greedy);
	assert_int_equal(stats.prompt_tokens, r.n_tokens);
	strata_sampler_destroy(s);
	strata_free(logits);
	strata_free(one);
	ref_pass_close(&p);
	ref_close_model(&m);
	ref_free(&r);
}

static void test_reference_logits_and_greedy(void **state)
{
	(void)state;
	for (int i = 0; i < REF_MODEL_COUNT; i++)
		check_model(ref_models[i], 16);
}

/* Prefill in chunks of 5 (12 tokens: 5 + 5 + 2) must equal one pass. */
static void test_reference_chunked_prefill(void **state)
{
	(void)state;
	check_model("mistral_window_f32", 5);
	check_model("qwen2_bias_f32", 5);
}

/* Generation stops at EOS (not passed on), at -n, and at the context's
 * end; the stats count what happened. */
static void test_generation_stops_at_eos_n_and_context(void **state)
{
	(void)state;
	const char *name = "llama_gqa2_f32";
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	ref_open m;
	ref_open_model(path, &m);
	strata_compute *c = compute(1);
	strata_sampler_params sp = {.temperature = 0, .top_p = 1,
				    .repeat_penalty = 1};
	strata_sampler *s;
	strata_error err;
	assert_int_equal(strata_sampler_create(&sp, m.hp.vocab, &s, &err),
			 STRATA_OK);
	/* EOS = the first greedy token not seen before it, at index k > 0:
	 * k tokens come out. */
	uint32_t k = 1;
	for (bool seen = true; seen && k < r.n_greedy; k += seen) {
		seen = false;
		for (uint32_t j = 0; j < k; j++)
			seen |= r.greedy[j] == r.greedy[k];
	}
	assert_true(k < r.n_greedy);
	strata_forward *f;
	assert_int_equal(
		strata_forward_create(&(strata_forward_options){.hp = &m.hp,
								.compute = c,
								.src = &m.src,
								.context = 64,
								.batch = 16},
				      &f, &err),
		STRATA_OK);
	int32_t got[65] = {0};
	strata_generate_stats st;
	assert_int_equal(strata_generate(f, s, r.tokens, r.n_tokens, 32,
					 r.greedy[k], ref_collect, got, &st,
					 &err),
			 STRATA_OK);
	assert_true(st.stopped_at_eos);
	assert_int_equal(got[0], k);
	assert_int_equal(st.generated_tokens, k);
	assert_true(st.first_token_ns > 0 && st.prompt_ns > 0);
	strata_forward_destroy(f);
	/* A context of 14 positions: the 12-token prompt, then 3 tokens
	 * (the last sampled from position 13's logits), then it stops. */
	assert_int_equal(
		strata_forward_create(&(strata_forward_options){.hp = &m.hp,
								.compute = c,
								.src = &m.src,
								.context = 14,
								.batch = 16},
				      &f, &err),
		STRATA_OK);
	got[0] = 0;
	assert_int_equal(strata_generate(f, s, r.tokens, r.n_tokens, 32, -1,
					 ref_collect, got, &st, &err),
			 STRATA_OK);
	assert_false(st.stopped_at_eos);
	assert_int_equal(got[0], 3);
	assert_memory_equal(got + 1, r.greedy, 3 * sizeof(int32_t));
	strata_forward_destroy(f);
	strata_sampler_destroy(s);
	strata_compute_destroy(c);
	ref_close_model(&m);
	ref_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference_logits_and_greedy),
		cmocka_unit_test(test_reference_chunked_prefill),
		cmocka_unit_test(test_generation_stops_at_eos_n_and_context),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
