/* test_batch_stream.c - results handed over as they complete
 * (strata_batch_options.on_result, issue 20): each exactly once, in input
 * order, with the tokens an unstreamed run gives; those before a failing
 * request stay answered; a refusing callback fails the run with its own
 * error; memory held by results is bounded (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/serve.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define REQUESTS 24

typedef struct seen {
	size_t count;
	size_t index[REQUESTS];
	int32_t tokens[REQUESTS][8];
	uint32_t n_tokens[REQUESTS];
	size_t refuse_at; /* answer E_IO at this index; SIZE_MAX never */
} seen;

static strata_status on_result(void *user, size_t i,
			       const strata_batch_result *r, strata_error *err)
{
	seen *s = user;
	assert_true(s->count < REQUESTS && r->n_tokens <= 8);
	s->index[s->count] = i;
	s->n_tokens[s->count] = r->n_tokens;
	memcpy(s->tokens[s->count], r->tokens, r->n_tokens * sizeof(int32_t));
	s->count++;
	if (i == s->refuse_at)
		return strata_fail(err, STRATA_E_IO, "check stdout",
				   "cannot write result %zu", i);
	return STRATA_OK;
}

static strata_batch *open_batch(uint32_t replicas, uint64_t sequences,
				seen *s)
{
	strata_batch_options o = {.replicas = replicas,
				  .spill_threshold = 1000,
				  .eos = -1};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 32;
	o.session.prefill = 16;
	o.session.plan.mode = STRATA_RESIDENCY_AUTO;
	o.session.plan.device = STRATA_PLAN_DEVICE_CPU;
	o.session.plan.shape.batch = sequences;
	o.on_result = s ? on_result : NULL;
	o.on_result_user = s;
	strata_batch *b = NULL;
	strata_error err;
	if (strata_batch_create(&o, &b, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return b;
}

/* Requests of different lengths, so they finish out of input order. */
static void make_requests(int32_t (*p)[12], strata_batch_request *q)
{
	for (int i = 0; i < REQUESTS; i++) {
		for (int k = 0; k < 12; k++)
			p[i][k] = 1 + (i * 13 + k * 7) % 500;
		q[i] = (strata_batch_request){
			.prompt = p[i], .n_prompt = 2 + (uint32_t)(i % 5) * 2,
			.max_tokens = 1 + (uint32_t)((i * 5) % 8),
			.key = &p[i], .key_bytes = 1 + (size_t)i};
		strata_sampler_params_default(&q[i].sampler);
		q[i].sampler.temperature = 0;
	}
}

static void test_results_stream_in_order_once_each(void **state)
{
	(void)state;
	int32_t p[REQUESTS][12];
	strata_batch_request q[REQUESTS];
	strata_batch_result want[REQUESTS], got[REQUESTS];
	make_requests(p, q);
	strata_error err;
	strata_batch *plain = open_batch(1, 1, NULL);
	assert_int_equal(strata_batch_run(plain, q, REQUESTS, want, NULL, &err),
			 STRATA_OK);
	strata_batch_destroy(plain);
	/* several replicas decoding several requests each: finishing order
	 * is not input order, handing over is */
	seen s = {.refuse_at = SIZE_MAX};
	strata_batch *b = open_batch(3, 4, &s);
	assert_int_equal(strata_batch_run(b, q, REQUESTS, got, NULL, &err),
			 STRATA_OK);
	assert_int_equal(s.count, REQUESTS);
	for (size_t i = 0; i < REQUESTS; i++) {
		assert_int_equal(s.index[i], i);
		assert_int_equal(s.n_tokens[i], want[i].n_tokens);
		assert_memory_equal(s.tokens[i], want[i].tokens,
				    want[i].n_tokens * sizeof(int32_t));
		/* handed over: the tokens are freed, the figures kept */
		assert_null(got[i].tokens);
		assert_int_equal(got[i].n_tokens, want[i].n_tokens);
	}
	strata_batch_results_free(want, REQUESTS);
	strata_batch_destroy(b);
}

static void test_results_before_a_failure_stay_answered(void **state)
{
	(void)state;
	int32_t p[REQUESTS][12];
	strata_batch_request q[REQUESTS];
	strata_batch_result r[REQUESTS];
	make_requests(p, q);
	int32_t bad[4] = {1, 2, 1 << 20, 3}; /* outside the vocabulary */
	q[9].prompt = bad;
	q[9].n_prompt = 4;
	/* one replica, one request at a time: 0..8 are done before 9 runs */
	seen s = {.refuse_at = SIZE_MAX};
	strata_batch *b = open_batch(1, 1, &s);
	strata_error err;
	assert_int_equal(strata_batch_run(b, q, REQUESTS, r, NULL, &err),
			 STRATA_E_INFER_REPLICA);
	assert_int_equal(strata_batch_failed_request(b), 9);
	assert_int_equal(s.count, 9);
	for (size_t i = 0; i < 9; i++)
		assert_int_equal(s.index[i], i);
	for (size_t i = 0; i < REQUESTS; i++)
		assert_null(r[i].tokens);
	strata_batch_destroy(b);
}

static void test_refusing_callback_fails_the_run(void **state)
{
	(void)state;
	int32_t p[REQUESTS][12];
	strata_batch_request q[REQUESTS];
	strata_batch_result r[REQUESTS];
	make_requests(p, q);
	seen s = {.refuse_at = 5};
	strata_batch *b = open_batch(2, 2, &s);
	strata_error err;
	assert_int_equal(strata_batch_run(b, q, REQUESTS, r, NULL, &err),
			 STRATA_E_IO);
	assert_non_null(strstr(err.message, "cannot write result 5"));
	assert_int_equal(strata_batch_failed_request(b), 5);
	assert_int_equal(s.count, 6); /* 0..5, nothing after the refusal */
	for (size_t i = 0; i < REQUESTS; i++)
		assert_null(r[i].tokens);
	/* the batch runs again, every result handed over */
	s = (seen){.refuse_at = SIZE_MAX};
	assert_int_equal(strata_batch_run(b, q, REQUESTS, r, NULL, &err),
			 STRATA_OK);
	assert_int_equal(s.count, REQUESTS);
	strata_batch_destroy(b);
}

/* Every allocation of a streamed run failing in turn (one replica: a fixed
 * order): E_NOMEM or E_INFER_REPLICA, what was handed over a prefix of the
 * input in order, nothing kept (ASan checks the leaks). */
static void test_streamed_run_survives_oom(void **state)
{
	(void)state;
	int32_t p[REQUESTS][12];
	strata_batch_request q[REQUESTS];
	strata_batch_result r[REQUESTS];
	make_requests(p, q);
	seen s;
	strata_batch *b = open_batch(1, 2, &s);
	strata_error err;
	for (long n = 0;; n++) {
		s = (seen){.refuse_at = SIZE_MAX};
		strata_alloc_fail_after(n);
		strata_status st = strata_batch_run(b, q, 8, r, NULL, &err);
		strata_alloc_fail_after(-1);
		for (size_t i = 0; i < s.count; i++)
			assert_int_equal(s.index[i], i);
		if (st == STRATA_OK) {
			assert_int_equal(s.count, 8);
			break;
		}
		if (st != STRATA_E_NOMEM && st != STRATA_E_INFER_REPLICA)
			fail_msg("allocation %ld: %s %s", n,
				 strata_status_name(st), err.message);
		for (size_t i = 0; i < 8; i++)
			assert_null(r[i].tokens);
		assert_true(n < 100000);
	}
	strata_batch_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_results_stream_in_order_once_each),
		cmocka_unit_test(test_results_before_a_failure_stay_answered),
		cmocka_unit_test(test_refusing_callback_fails_the_run),
		cmocka_unit_test(test_streamed_run_survives_oom),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
