/* test_scheduler.c - the continuous scheduler on the shipped stories260K:
 * requests submitted together, and while others run, give strata_generate's
 * tokens (greedy and seeded) whatever runs beside them; steps carry several
 * sequences, prompt chunks ride beside decode tokens and a freed slot is
 * refilled, so the weight passes stay near the ideal; the queue bound,
 * the context check, cancelling (waiting and running), stop from the
 * callback and draining each end a request with exactly one done event
 * (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/scheduler_fixture.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define N_REQ 12
#define MAX_NEW 24

static void wait_done(seen *s)
{
	seen_wait(s);
	assert_false(s->token_after_done);
}

static strata_scheduler *open_sched(uint32_t slots, uint32_t queue)
{
	strata_scheduler_options o = {.queue_cap = queue, .eos = -1};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 128;
	o.session.prefill = 32;
	o.session.plan.mode = STRATA_RESIDENCY_AUTO;
	o.session.plan.device = STRATA_PLAN_DEVICE_CPU;
	o.session.plan.shape.batch = slots;
	strata_scheduler *s = NULL;
	strata_error err;
	if (strata_scheduler_create(&o, &s, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return s;
}

/* Request i: a prompt of 3 + i % 7 tokens (i >= 100: i - 100 tokens),
 * greedy for even i, seeded sampling for odd. */
static uint32_t make_prompt(int i, int32_t *p)
{
	uint32_t n = i >= 100 ? (uint32_t)(i - 100) : 3 + (uint32_t)(i % 7);
	p[0] = 1;
	for (uint32_t t = 1; t < n; t++)
		p[t] = 1 + (int32_t)((41 * i + 13 * t) % 500);
	return n;
}

static void params_of(int i, strata_sampler_params *sp)
{
	strata_sampler_params_default(sp);
	sp->temperature = i % 2 ? 0.8f : 0.0f;
	sp->seed = 77 + (uint64_t)i;
}

/* strata_generate's tokens for request i, on a session of its own. */
static void reference(int i, uint32_t max_new, seen *out)
{
	strata_session_options so = {.model_path = MODEL, .threads = 1,
				     .positions = 128, .prefill = 32};
	so.plan.mode = STRATA_RESIDENCY_AUTO;
	so.plan.device = STRATA_PLAN_DEVICE_CPU;
	int32_t p[128];
	uint32_t n = make_prompt(i, p);
	strata_sampler_params sp;
	params_of(i, &sp);
	seen_generate(&so, &sp, p, n, max_new, out);
}

static void submit(strata_scheduler *s, int i, uint32_t max_new, seen *out)
{
	int32_t p[128];
	strata_scheduler_request r = {.n_prompt = make_prompt(i, p),
				      .prompt = p, .max_tokens = max_new,
				      .on_event = seen_on_event, .user = out};
	params_of(i, &r.sampler);
	strata_error err;
	if (strata_scheduler_submit(s, &r, &out->id, &err))
		fail_msg("%s / %s", err.message, err.fix);
}

/* ------------------------------------------------------------------------ */

static void test_scheduler_tokens_match_generate(void **state)
{
	(void)state;
	static seen want[N_REQ], got[N_REQ];
	for (int i = 0; i < N_REQ; i++) {
		seen_init(&want[i]);
		seen_init(&got[i]);
		reference(i, 4 + (uint32_t)(i * 5) % 20, &want[i]);
	}
	/* 4 slots for 12 requests: slots are refilled as requests end */
	strata_scheduler *s = open_sched(4, 64);
	strata_scheduler_hold(s, true);
	for (int i = 0; i < N_REQ; i++)
		submit(s, i, 4 + (uint32_t)(i * 5) % 20, &got[i]);
	strata_scheduler_hold(s, false);
	for (int i = 0; i < N_REQ; i++) {
		wait_done(&got[i]);
		assert_int_equal(got[i].done_events, 1);
		assert_int_equal(got[i].n, want[i].n);
		assert_memory_equal(got[i].tokens, want[i].tokens,
				    want[i].n * sizeof(int32_t));
	}
	strata_scheduler_stats st;
	strata_scheduler_get_stats(s, &st);
	assert_int_equal(st.finished, N_REQ);
	assert_true((double)st.step_rows / (double)st.steps > 2.5);
	strata_scheduler_destroy(s);
}

/* 16 requests of 8 tokens with 4-token prompts on 16 slots, all submitted
 * before the first step: the prompts ride in 32-row steps (8 in the
 * first, 6 beside 8 decode tokens in the second, 2 in the third), then one
 * pass per further token: 3 + 7 = 10 passes, at most 11 (issue 19). */
static void test_scheduler_weight_passes(void **state)
{
	(void)state;
	static seen got[16];
	strata_scheduler *s = open_sched(16, 64);
	strata_scheduler_hold(s, true);
	int32_t p[4] = {1, 403, 407, 10};
	for (int i = 0; i < 16; i++) {
		seen_init(&got[i]);
		strata_scheduler_request r = {.prompt = p, .n_prompt = 4,
					      .max_tokens = 8,
					      .on_event = seen_on_event,
					      .user = &got[i]};
		params_of(1, &r.sampler);
		r.sampler.seed = (uint64_t)i;
		strata_error err;
		assert_int_equal(strata_scheduler_submit(s, &r, NULL, &err),
				 STRATA_OK);
	}
	strata_scheduler_hold(s, false);
	for (int i = 0; i < 16; i++)
		wait_done(&got[i]);
	strata_scheduler_stats st;
	strata_scheduler_get_stats(s, &st);
	/* issue 19: 16 x 8 tokens at --batch 16 in at most 11 passes */
	assert_true(st.steps <= 11);
	assert_int_equal(st.step_rows, 16 * (4 + 7));
	print_message("16 x 8 tokens at 16 slots: %llu weight passes\n",
		      (unsigned long long)st.steps);
	strata_scheduler_destroy(s);
}

/* Long prompts (read in chunks over several steps) beside short ones and
 * sequences decoding: every request still gets strata_generate's tokens. */
static void test_scheduler_long_prompts(void **state)
{
	(void)state;
	static const int id[] = {140, 104, 170, 103, 117, 118};
	static seen want[6], got[6];
	for (int k = 0; k < 6; k++) {
		seen_init(&want[k]);
		seen_init(&got[k]);
		reference(id[k], 12, &want[k]);
	}
	strata_scheduler *s = open_sched(3, 64);
	strata_scheduler_hold(s, true);
	for (int k = 0; k < 6; k++)
		submit(s, id[k], 12, &got[k]);
	strata_scheduler_hold(s, false);
	for (int k = 0; k < 6; k++) {
		wait_done(&got[k]);
		assert_int_equal(got[k].n, want[k].n);
		assert_memory_equal(got[k].tokens, want[k].tokens,
				    want[k].n * sizeof(int32_t));
	}
	strata_scheduler_destroy(s);
}

/* The samples a request drew: its tokens, and the EOS that ended it. */
static uint32_t samples_of(const seen *s)
{
	return s->n + (s->finish == STRATA_SCHEDULER_FINISH_EOS);
}

/* A 100-token prompt joining a sequence that decodes: its chunks (the
 * plan's 32 rows a step, less the decode row) ride in the decoding
 * sequence's passes, 4 of them, the last giving its first token, so the
 * passes are max(A's samples, 3 + B's): no pass of its own (the
 * scheduler before issue 19 read it in passes of its own). */
static void test_scheduler_prompt_rides_beside_decode(void **state)
{
	(void)state;
	static seen want[2], got[2];
	const int id[2] = {104, 200}; /* 4 and 100 prompt tokens, greedy */
	const uint32_t max_new[2] = {40, 8};
	for (int k = 0; k < 2; k++) {
		seen_init(&want[k]);
		seen_init(&got[k]);
		reference(id[k], max_new[k], &want[k]);
	}
	strata_scheduler *s = open_sched(2, 64);
	strata_scheduler_hold(s, true);
	for (int k = 0; k < 2; k++)
		submit(s, id[k], max_new[k], &got[k]);
	strata_scheduler_hold(s, false);
	for (int k = 0; k < 2; k++) {
		wait_done(&got[k]);
		assert_int_equal(got[k].n, want[k].n);
		assert_memory_equal(got[k].tokens, want[k].tokens,
				    want[k].n * sizeof(int32_t));
	}
	uint32_t sa = samples_of(&got[0]), sb = samples_of(&got[1]);
	strata_scheduler_stats st;
	strata_scheduler_get_stats(s, &st);
	assert_int_equal(st.steps, sa > 3 + sb ? sa : 3 + sb);
	assert_int_equal(st.step_rows, 4 + (sa - 1) + 100 + (sb - 1));
	print_message("a 100-token prompt beside a decode: %llu passes for "
		      "%u + %u samples\n", (unsigned long long)st.steps, sa,
		      sb);
	strata_scheduler_destroy(s);
}

static void test_scheduler_refusals(void **state)
{
	(void)state;
	strata_scheduler *s = open_sched(1, 2);
	strata_error err;
	int32_t p[4] = {1, 2, 3, 4};
	seen a;
	seen_init(&a);
	strata_scheduler_request r = {.prompt = p, .n_prompt = 4,
				      .max_tokens = 125,
				      .on_event = seen_on_event,
				      .user = &a};
	params_of(0, &r.sampler);
	assert_int_equal(strata_scheduler_submit(s, &r, NULL, &err),
			 STRATA_E_INFER_CONTEXT);
	assert_non_null(strstr(err.message, "context of 128"));
	r.max_tokens = 0;
	assert_int_equal(strata_scheduler_submit(s, &r, NULL, &err),
			 STRATA_E_INVALID_ARG);
	r.max_tokens = 4;
	p[2] = 100000;
	assert_int_equal(strata_scheduler_submit(s, &r, NULL, &err),
			 STRATA_E_INVALID_ARG);
	p[2] = 3;
	r.sampler.top_p = 2.0f;
	assert_int_equal(strata_scheduler_submit(s, &r, NULL, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(a.done_events, 0);
	strata_scheduler_destroy(s);
}

/* A waiting request cancelled before it runs, a running one cancelled by
 * its own callback, one stopped by its callback, a full queue refused,
 * and a drain that cancels what is left: one done event each. */
static void test_scheduler_cancel_stop_drain(void **state)
{
	(void)state;
	static seen a, b, c, d, e;
	seen_init(&a), seen_init(&b), seen_init(&c), seen_init(&d);
	seen_init(&e);
	strata_scheduler *s = open_sched(1, 2);
	b.stop_after = 3;
	c.cancel_in = s;
	submit(s, 0, 100, &a); /* takes the slot */
	submit(s, 2, 100, &b); /* waits */
	strata_error err;
	int32_t p[4] = {1, 2, 3, 4};
	strata_scheduler_request r = {.prompt = p, .n_prompt = 4,
				      .max_tokens = 4,
				      .on_event = seen_on_event,
				      .user = &e};
	params_of(0, &r.sampler);
	/* a is running or waiting, b waiting: a third waits or is refused */
	strata_status st3 = strata_scheduler_submit(s, &r, &e.id, &err);
	strata_scheduler_cancel(s, e.id);
	strata_scheduler_cancel(s, a.id);
	wait_done(&a);
	assert_int_equal(a.finish, STRATA_SCHEDULER_FINISH_CANCELLED);
	wait_done(&b);
	assert_int_equal(b.finish, STRATA_SCHEDULER_FINISH_STOPPED);
	assert_int_equal(b.n, 3);
	if (st3 == STRATA_OK) {
		wait_done(&e);
		assert_int_equal(e.done_events, 1);
	} else {
		assert_int_equal(st3, STRATA_E_BUSY);
	}
	submit(s, 4, 100, &c);
	wait_done(&c);
	assert_int_equal(c.finish, STRATA_SCHEDULER_FINISH_CANCELLED);
	assert_int_equal(c.n, 2);
	submit(s, 6, 100, &d);
	strata_scheduler_drain(s, 1000000); /* 1 ms: d cannot finish */
	assert_int_equal(d.done_events, 1);
	assert_int_equal(strata_scheduler_submit(s, &r, NULL, &err),
			 STRATA_E_BUSY);
	strata_scheduler_stats st;
	strata_scheduler_get_stats(s, &st);
	assert_int_equal(st.running + st.waiting, 0);
	strata_scheduler_destroy(s);
	assert_int_equal(a.done_events + b.done_events + c.done_events +
				 d.done_events,
			 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scheduler_tokens_match_generate),
		cmocka_unit_test(test_scheduler_weight_passes),
		cmocka_unit_test(test_scheduler_long_prompts),
		cmocka_unit_test(test_scheduler_prompt_rides_beside_decode),
		cmocka_unit_test(test_scheduler_refusals),
		cmocka_unit_test(test_scheduler_cancel_stop_drain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
