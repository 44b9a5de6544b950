/* test_scheduler_prefix.c - the continuous scheduler's prefix cache on the
 * shipped stories260K: a request sharing a cached prompt's start computes
 * only its new positions (the scheduler's prompt_computed), a
 * conversation resent with its next turn reuses the whole previous
 * prompt, requests sharing a prefix at once all answer right, and every
 * answer is the greedy tokens of a cold strata_generate (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/scheduler_fixture.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define MAX_NEW 12u
#define SHARED 40u /* a "system prompt" every request starts with */

static void wait_done(seen *s)
{
	seen_wait(s);
	assert_int_equal(s->done_events, 1);
	assert_false(s->token_after_done);
}

static void session_opts(strata_session_options *so, uint32_t slots)
{
	memset(so, 0, sizeof *so);
	so->model_path = MODEL;
	so->threads = 1;
	so->positions = 160;
	so->prefill = 32;
	so->plan.mode = STRATA_RESIDENCY_AUTO;
	so->plan.device = STRATA_PLAN_DEVICE_CPU;
	so->plan.shape.batch = slots;
}

static strata_scheduler *open_sched(uint64_t cache_bytes)
{
	strata_scheduler_options o = {.eos = -1,
				      .prefix_cache_bytes = cache_bytes};
	session_opts(&o.session, 4);
	strata_scheduler *s = NULL;
	strata_error err;
	if (strata_scheduler_create(&o, &s, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return s;
}

/* A cold run's greedy tokens for prompt[0..n), on a session of its own. */
static void reference(const int32_t *prompt, uint32_t n, seen *out)
{
	strata_session_options so;
	session_opts(&so, 1);
	strata_sampler_params sp;
	strata_sampler_params_default(&sp);
	sp.temperature = 0;
	seen_generate(&so, &sp, prompt, n, MAX_NEW, out);
}

/* Submits prompt[0..n) greedy into *s (initialised here). */
static void submit(strata_scheduler *sch, const int32_t *prompt, uint32_t n,
		   seen *s)
{
	seen_init(s);
	strata_scheduler_request q = {.prompt = prompt, .n_prompt = n,
				      .max_tokens = MAX_NEW,
				      .on_event = seen_on_event, .user = s};
	strata_sampler_params_default(&q.sampler);
	q.sampler.temperature = 0;
	strata_error err;
	if (strata_scheduler_submit(sch, &q, NULL, &err))
		fail_msg("%s", err.message);
}

/* Runs prompt[0..n) alone; checks its tokens against a cold run and
 * returns the prompt positions it computed. */
static uint64_t ask(strata_scheduler *sch, const int32_t *prompt, uint32_t n,
		    seen *got)
{
	strata_scheduler_stats a, b;
	strata_scheduler_get_stats(sch, &a);
	submit(sch, prompt, n, got);
	wait_done(got);
	strata_scheduler_get_stats(sch, &b);
	seen want;
	seen_init(&want);
	reference(prompt, n, &want);
	assert_int_equal(got->n, want.n);
	assert_memory_equal(got->tokens, want.tokens, want.n * sizeof(int32_t));
	return b.prompt_computed - a.prompt_computed;
}

/* SHARED tokens, then `tail` tokens of their own (from `salt`). */
static uint32_t make_prompt(int32_t *p, uint32_t tail, int salt)
{
	p[0] = 1;
	for (uint32_t t = 1; t < SHARED; t++)
		p[t] = 1 + (int32_t)((13 * t + 5) % 500);
	for (uint32_t t = 0; t < tail; t++)
		p[SHARED + t] = 1 + (int32_t)((41 * salt + 7 * t + 3) % 500);
	return SHARED + tail;
}

/* ------------------------------------------------------------------------ */

/* A's prompt is computed whole; B, sharing its first SHARED tokens,
 * computes only its own; a conversation resent with B's answer and a new
 * turn computes all but the 40 shared (B cut A's entry to them), and the
 * turn after that reuses every position of the one before; every answer
 * is the cold run's. */
static void test_scheduler_prefix_computes_only_new_positions(void **state)
{
	(void)state;
	strata_scheduler *sch = open_sched(1u << 20);
	int32_t a[64], b[64], c[128], d[160];
	uint32_t na = make_prompt(a, 5, 1), nb = make_prompt(b, 6, 2);
	seen ga, gb, gc, gd;
	assert_int_equal(ask(sch, a, na, &ga), na);
	assert_int_equal(ask(sch, b, nb, &gb), nb - SHARED);
	/* the next turn: B's prompt, its answer, 4 more tokens */
	memcpy(c, b, nb * sizeof *c);
	memcpy(c + nb, gb.tokens, gb.n * sizeof *c);
	uint32_t nc = nb + gb.n;
	for (int t = 0; t < 4; t++)
		c[nc++] = 1 + (int32_t)((97 * t + 11) % 500);
	assert_int_equal(ask(sch, c, nc, &gc), nc - SHARED);
	memcpy(d, c, nc * sizeof *d);
	memcpy(d + nc, gc.tokens, gc.n * sizeof *d);
	uint32_t nd = nc + gc.n;
	for (int t = 0; t < 3; t++)
		d[nd++] = 1 + (int32_t)((31 * t + 17) % 500);
	assert_int_equal(ask(sch, d, nd, &gd), nd - nc);
	strata_scheduler_stats st;
	strata_scheduler_get_stats(sch, &st);
	assert_true(st.prefix_cache);
	assert_int_equal(st.prefix.lookups, 4);
	assert_int_equal(st.prefix.hits, 3);
	assert_int_equal(st.prefix.reused_tokens, SHARED * 2 + nc);
	assert_int_equal(st.prefix.truncated, 1); /* A's cut to SHARED */
	/* the cut A by C's entry, C's by D's */
	assert_int_equal(st.prefix.replaced, 2);
	assert_int_equal(st.prefix.entries, 1);	  /* D's */
	assert_int_equal(st.prompt_tokens, na + nb + nc + nd);
	assert_int_equal(st.prompt_computed,
			 na + (nb - SHARED) + (nc - SHARED) + (nd - nc));
	strata_scheduler_destroy(sch);
}

/* Six requests sharing a prefix submitted at once (four slots, so two
 * wait and find the first ones saved): every answer is the cold run's,
 * and what was not computed is what the cache restored. */
static void test_scheduler_prefix_concurrent_requests(void **state)
{
	(void)state;
	strata_scheduler *sch = open_sched(1u << 20);
	int32_t p[6][64];
	uint32_t n[6];
	seen got[6], want[6];
	strata_scheduler_hold(sch, true);
	for (int i = 0; i < 6; i++) {
		n[i] = make_prompt(p[i], 3 + (uint32_t)i, 10 + i);
		submit(sch, p[i], n[i], &got[i]);
	}
	strata_scheduler_hold(sch, false);
	for (int i = 0; i < 6; i++) {
		wait_done(&got[i]);
		seen_init(&want[i]);
		reference(p[i], n[i], &want[i]);
		assert_int_equal(got[i].n, want[i].n);
		assert_memory_equal(got[i].tokens, want[i].tokens,
				    want[i].n * sizeof(int32_t));
	}
	strata_scheduler_stats st;
	strata_scheduler_get_stats(sch, &st);
	assert_int_equal(st.prefix.lookups, 6);
	assert_true(st.prefix.hits >= 2); /* the two that waited */
	assert_int_equal(st.prompt_computed + st.prefix.reused_tokens,
			 st.prompt_tokens);
	strata_scheduler_destroy(sch);
}

/* Without a cache every position is computed and nothing is looked up. */
static void test_scheduler_without_prefix_cache(void **state)
{
	(void)state;
	strata_scheduler *sch = open_sched(0);
	int32_t a[64], b[64];
	uint32_t na = make_prompt(a, 5, 1), nb = make_prompt(b, 6, 2);
	seen ga, gb;
	assert_int_equal(ask(sch, a, na, &ga), na);
	assert_int_equal(ask(sch, b, nb, &gb), nb);
	strata_scheduler_stats st;
	strata_scheduler_get_stats(sch, &st);
	assert_false(st.prefix_cache);
	assert_int_equal(st.prefix.lookups, 0);
	strata_scheduler_destroy(sch);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scheduler_prefix_computes_only_new_positions),
		cmocka_unit_test(test_scheduler_prefix_concurrent_requests),
		cmocka_unit_test(test_scheduler_without_prefix_cache),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
