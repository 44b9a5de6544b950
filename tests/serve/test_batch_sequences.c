/* test_batch_sequences.c - the batch runner with --batch B > 1 on the
 * shipped stories260K: greedy and seeded requests give --batch 1's tokens
 * (and, on one replica, the same prefix-cache hits) whatever B and the
 * replicas; steps carry several sequences; a replica failing with several
 * requests running hands them all on; every allocation of a B > 1 run fails
 * cleanly; a B past the forward pass's cap is refused (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/batch_fixture.h"

#define MODEL BATCH_FIXTURE_MODEL
#define REQUESTS 14

static strata_batch *open_batch(uint32_t replicas, uint64_t sequences,
				uint64_t cache_bytes)
{
	strata_batch_options o = batch_fixture_options(replicas, sequences);
	o.prefix_cache_bytes = cache_bytes;
	return batch_fixture_open(&o);
}

/* Requests over three shared 10-token prefixes with their own tails and
 * budgets (0 to 12 new tokens); every other one samples at temperature 0.8
 * with its own seed. */
static void make_requests(int32_t (*p)[20], strata_batch_request *q)
{
	static const uint32_t budget[] = {5, 12, 0, 3, 1, 7, 9};
	for (int i = 0; i < REQUESTS; i++) {
		uint32_t n = 12 + (uint32_t)(i % 5);
		for (uint32_t t = 0; t < n; t++)
			p[i][t] = 1 + (int32_t)((t < 10 ? 37 * (i % 3) + 11 * t
							: 53 * i + 7 * t) %
						499);
		q[i] = (strata_batch_request){.prompt = p[i],
					      .n_prompt = n,
					      .max_tokens = budget[i % 7],
					      .key = &p[i][0],
					      .key_bytes = sizeof(int32_t)};
		strata_sampler_params_default(&q[i].sampler);
		q[i].sampler.temperature = i % 2 ? 0.8f : 0.0f;
		q[i].sampler.seed = 1000 + (uint64_t)i;
	}
}

static void run_ok(strata_batch *b, const strata_batch_request *q,
		   strata_batch_result *r)
{
	strata_error err;
	if (strata_batch_run(b, q, REQUESTS, r, NULL, &err))
		fail_msg("%s / %s", err.message, err.fix);
}

static void same_tokens(const strata_batch_result *got,
			const strata_batch_result *want, bool same_prefix)
{
	for (int i = 0; i < REQUESTS; i++) {
		assert_int_equal(got[i].n_tokens, want[i].n_tokens);
		assert_memory_equal(got[i].tokens, want[i].tokens,
				    want[i].n_tokens * sizeof(int32_t));
		assert_int_equal(got[i].gen.stopped_at_eos,
				 want[i].gen.stopped_at_eos);
		assert_int_equal(got[i].gen.prompt_tokens,
				 want[i].gen.prompt_tokens);
		if (same_prefix)
			assert_int_equal(got[i].prefix_tokens,
					 want[i].prefix_tokens);
	}
}

/* Mean sequences per decode step of replica d. */
static double rows_per_step(const strata_batch *b, uint32_t d)
{
	strata_batch_replica_stats s;
	strata_batch_replica_get_stats(b, d, &s);
	assert_true(s.decode_steps > 0);
	/* the time split: each part measured, none more than the whole */
	assert_true(s.step_ns > 0 && s.prefill_ns > 0);
	assert_true(s.prefix_ns + s.prefill_ns + s.step_ns <= s.busy_ns);
	return (double)s.decode_rows / (double)s.decode_steps;
}

/* ------------------------------------------------------------------------ */

static void test_batch_b_gives_batch_1_tokens(void **state)
{
	(void)state;
	int32_t p[REQUESTS][20];
	strata_batch_request q[REQUESTS];
	strata_batch_result want[REQUESTS], got[REQUESTS];
	make_requests(p, q);
	strata_batch *b = open_batch(1, 1, 1u << 20);
	assert_int_equal(strata_batch_sequences(b), 1);
	run_ok(b, q, want);
	assert_true(rows_per_step(b, 0) == 1.0);
	strata_batch_destroy(b);
	uint32_t hits = 0;
	for (int i = 0; i < REQUESTS; i++)
		hits += want[i].prefix_tokens > 0;
	assert_true(hits >= 6); /* the shared prefixes are reused */

	b = open_batch(1, 4, 1u << 20);
	assert_int_equal(strata_batch_sequences(b), 4);
	run_ok(b, q, got);
	/* requests that join in one step read their prompts in that pass
	 * side by side, before either is saved: only later joiners find a
	 * prefix, so the counts differ from --batch 1's, not the tokens */
	same_tokens(got, want, false);
	uint32_t hits4 = 0;
	for (int i = 0; i < REQUESTS; i++)
		hits4 += got[i].prefix_tokens > 0;
	assert_true(hits4 >= 3);
	assert_true(rows_per_step(b, 0) > 1.5);
	strata_batch_results_free(got, REQUESTS);
	strata_batch_destroy(b);

	/* no prefix cache, more sequences than ever run at once */
	b = open_batch(1, 16, 0);
	run_ok(b, q, got);
	same_tokens(got, want, false);
	strata_batch_results_free(got, REQUESTS);
	strata_batch_destroy(b);

	/* two replicas of three sequences each */
	b = open_batch(2, 3, 1u << 20);
	run_ok(b, q, got);
	same_tokens(got, want, false);
	strata_batch_results_free(got, REQUESTS);
	strata_batch_destroy(b);
	strata_batch_results_free(want, REQUESTS);
}

/* A replica failing while several requests run on it hands all of them
 * (and its queue) on: results complete and equal to a run without the
 * failure. */
static void test_batch_b_failed_replica_moves_running(void **state)
{
	(void)state;
	int32_t p[REQUESTS][20];
	strata_batch_request q[REQUESTS];
	strata_batch_result want[REQUESTS], got[REQUESTS];
	make_requests(p, q);
	strata_batch *b = open_batch(2, 3, 1u << 20);
	run_ok(b, q, want);
	uint32_t count[2] = {0, 0};
	for (int i = 0; i < REQUESTS; i++)
		count[want[i].device]++;
	uint32_t victim = count[1] > count[0];
	/* its third request fails to start, beside two running ones */
	strata_batch_inject_failure(b, victim, 2);
	run_ok(b, q, got);
	same_tokens(got, want, false);
	strata_batch_replica_stats st;
	strata_batch_replica_get_stats(b, victim, &st);
	assert_int_equal(st.failures, 1);
	assert_true(st.moved_away >= 1);
	strata_error err;
	for (uint32_t d = 0; d < 2; d++) {
		strata_shard_device_stats ds;
		assert_int_equal(
			strata_batch_router_device_stats(b, d, &ds, &err), 0);
		assert_int_equal(ds.load, 0);
	}
	strata_batch_results_free(got, REQUESTS);
	strata_batch_results_free(want, REQUESTS);
	strata_batch_destroy(b);
}

/* Every allocation of a B = 3 run fails cleanly: E_NOMEM or
 * E_INFER_REPLICA, no result keeps tokens, loads released. */
static void test_batch_b_run_oom(void **state)
{
	(void)state;
	int32_t p[REQUESTS][20];
	strata_batch_request q[REQUESTS];
	strata_batch_result r[REQUESTS];
	make_requests(p, q);
	strata_batch *b = open_batch(1, 3, 1u << 20);
	strata_error err;
	long n = 0;
	for (;; n++) {
		strata_alloc_fail_after(n);
		strata_status st = strata_batch_run(b, q, 4, r, NULL, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM && st != STRATA_E_INFER_REPLICA)
			fail_msg("n=%ld: %s", n, err.message);
		for (int i = 0; i < 4; i++)
			assert_null(r[i].tokens);
		strata_shard_device_stats ds;
		assert_int_equal(
			strata_batch_router_device_stats(b, 0, &ds, &err), 0);
		assert_int_equal(ds.load, 0);
	}
	assert_true(n >= 4);
	strata_batch_results_free(r, 4);
	strata_batch_destroy(b);
}

/* More sequences than a forward pass holds: the session says so. */
static void test_batch_b_past_cap_refused(void **state)
{
	(void)state;
	strata_batch_options o = {.replicas = 1, .eos = -1};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 8;
	o.session.prefill = 8;
	o.session.plan.mode = STRATA_RESIDENCY_AUTO;
	o.session.plan.device = STRATA_PLAN_DEVICE_CPU;
	o.session.plan.shape.batch = STRATA_FORWARD_MAX_SEQUENCES + 1;
	strata_batch *b = NULL;
	strata_error err;
	assert_int_equal(strata_batch_create(&o, &b, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "--batch 257"));
	assert_non_null(strstr(err.fix, "lower --batch"));
	assert_null(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_b_gives_batch_1_tokens),
		cmocka_unit_test(test_batch_b_failed_replica_moves_running),
		cmocka_unit_test(test_batch_b_run_oom),
		cmocka_unit_test(test_batch_b_past_cap_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
