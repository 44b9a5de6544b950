/* test_scheduler_oom.c - the continuous scheduler (the server's request
 * path) under allocation failure: every failing create is E_NOMEM with
 * nothing left; with the n-th allocation of a submit and its run failing,
 * for every n, the request either is refused (E_NOMEM, no event) or gets
 * exactly one done event (FAILED when the worker's allocation failed, else
 * the tokens of a clean run), and the scheduler serves the next request
 * as if nothing happened; leaks show under make asan (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/scheduler_fixture.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define MAX_NEW 6

static strata_scheduler_options options(void)
{
	strata_scheduler_options o = {.queue_cap = 4, .eos = -1};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 64;
	o.session.prefill = 16;
	o.session.plan.mode = STRATA_RESIDENCY_AUTO;
	o.session.plan.device = STRATA_PLAN_DEVICE_CPU;
	o.session.plan.shape.batch = 2;
	return o;
}

/* Submits the greedy request (prompt 1 403 407 261) and waits for its
 * end; the submit's status. */
static strata_status run_one(strata_scheduler *s, seen *out)
{
	static const int32_t prompt[] = {1, 403, 407, 261};
	strata_scheduler_request q = {.prompt = prompt, .n_prompt = 4,
				      .max_tokens = MAX_NEW,
				      .on_event = seen_on_event, .user = out};
	strata_sampler_params_default(&q.sampler);
	q.sampler.temperature = 0;
	uint64_t id;
	strata_error err;
	strata_status st = strata_scheduler_submit(s, &q, &id, &err);
	if (st == STRATA_OK)
		seen_wait(out);
	return st;
}

/* Each failing create is E_NOMEM and leaves *out NULL; then it opens. */
static void test_create_oom_leaves_nothing(void **state)
{
	(void)state;
	strata_scheduler_options o = options();
	strata_scheduler *s = NULL;
	strata_error err;
	long k = 0;
	for (;; k++) {
		assert_true(k < 100000);
		strata_alloc_fail_after(k);
		strata_status st = strata_scheduler_create(&o, &s, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM)
			fail_msg("k=%ld: %d %s", k, st, err.message);
		assert_null(s);
	}
	assert_true(k >= 3);
	strata_scheduler_destroy(s);
}

/* The n-th allocation of a submit and its run fails, for every n until a
 * run sees no failure: refused with no event, or one done event (FAILED,
 * or the clean tokens); after each, a clean request gets the clean
 * tokens, and the statistics count every end. */
static void test_request_oom_ends_it_once(void **state)
{
	(void)state;
	strata_scheduler_options o = options();
	strata_scheduler *s = NULL;
	strata_error err;
	assert_int_equal(strata_scheduler_create(&o, &s, &err), STRATA_OK);
	seen clean;
	seen_init(&clean);
	assert_int_equal(run_one(s, &clean), STRATA_OK);
	assert_int_equal(clean.n, MAX_NEW);
	long k = 0, refused = 0, failed = 0;
	for (;; k++) {
		assert_true(k < 100000);
		seen r;
		seen_init(&r);
		strata_alloc_fail_after(k);
		strata_status st = run_one(s, &r);
		uint64_t injected = strata_alloc_injected_failures();
		strata_alloc_fail_after(-1);
		if (st != STRATA_OK) {
			assert_int_equal(st, STRATA_E_NOMEM);
			assert_int_equal(r.done_events, 0);
			refused++;
		} else {
			assert_int_equal(r.done_events, 1);
			if (r.finish == STRATA_SCHEDULER_FINISH_FAILED) {
				failed++;
			} else {
				assert_int_equal(r.finish,
						 STRATA_SCHEDULER_FINISH_LENGTH);
				assert_int_equal(r.n, clean.n);
				assert_memory_equal(r.tokens, clean.tokens,
						    clean.n * sizeof *clean.tokens);
			}
		}
		seen_fini(&r);
		seen after;
		seen_init(&after);
		assert_int_equal(run_one(s, &after), STRATA_OK);
		assert_int_equal(after.finish, STRATA_SCHEDULER_FINISH_LENGTH);
		assert_memory_equal(after.tokens, clean.tokens,
				    clean.n * sizeof *clean.tokens);
		seen_fini(&after);
		if (injected == 0)
			break;
	}
	print_message("# %ld allocations: %ld refused at submit, %ld failed "
		      "in the worker\n", k, refused, failed);
	assert_true(refused >= 1);
	strata_scheduler_stats sst;
	strata_scheduler_get_stats(s, &sst);
	assert_int_equal(sst.failed, (uint64_t)failed);
	assert_int_equal(sst.waiting, 0);
	assert_int_equal(sst.running, 0);
	seen_fini(&clean);
	strata_scheduler_destroy(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_oom_leaves_nothing),
		cmocka_unit_test(test_request_oom_ends_it_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
