/* test_router.c - the router over two schedulers on stories260K: one key
 * goes to its BLAKE3 home while loads are even, a full queue passes the
 * request to the other replica and only every replica full refuses it,
 * each request's load is released at its done event, greedy answers do
 * not depend on the replica, round-robin alternates, and bad options are
 * refused (layer: serve). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/serve.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define MAX_NEW 8u

typedef struct seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int32_t tokens[MAX_NEW];
	uint32_t n;
	int done_events;
} seen;

static bool on_event(void *user, const strata_scheduler_event *ev)
{
	seen *s = user;
	pthread_mutex_lock(&s->mu);
	if (ev->done)
		s->done_events++;
	else if (s->n < MAX_NEW)
		s->tokens[s->n++] = ev->token;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return true;
}

static void wait_done(seen *s)
{
	pthread_mutex_lock(&s->mu);
	while (s->done_events == 0)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	assert_int_equal(s->done_events, 1);
}

static strata_scheduler *open_sched(uint32_t queue)
{
	strata_scheduler_options o = {.queue_cap = queue, .eos = -1};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 64;
	o.session.prefill = 32;
	o.session.plan.mode = STRATA_RESIDENCY_AUTO;
	o.session.plan.device = STRATA_PLAN_DEVICE_CPU;
	o.session.plan.shape.batch = 1;
	strata_scheduler *s = NULL;
	strata_error err;
	if (strata_scheduler_create(&o, &s, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return s;
}

static const int32_t prompt[] = {1, 403, 407, 261, 378};

static strata_status submit(strata_router *rt, const char *key, seen *s,
			    uint32_t *replica)
{
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	strata_scheduler_request q = {.prompt = prompt, .n_prompt = 5,
				      .max_tokens = MAX_NEW,
				      .on_event = on_event, .user = s};
	strata_sampler_params_default(&q.sampler);
	q.sampler.temperature = 0;
	strata_error err;
	uint64_t id;
	strata_status st = strata_router_submit(rt, key, strlen(key), &q,
						replica, &id, &err);
	return st;
}

/* ------------------------------------------------------------------------ */

/* Both replicas held with room for one waiting request each: the key's
 * first request waits at home, the second finds home full and goes to
 * the other, the third is refused by both (E_BUSY, no load left
 * behind); released, both answer alike and every load returns to 0. */
static void test_router_full_queue_passes_on(void **state)
{
	(void)state;
	strata_scheduler *s[2] = {open_sched(1), open_sched(1)};
	const char *names[] = {"cpu:0", "cpu:1"};
	strata_router_options o = {.schedulers = s, .names = names,
				   .count = 2, .spill_threshold = 1000};
	strata_router *rt = NULL;
	strata_error err;
	assert_int_equal(strata_router_create(&o, &rt, &err), 0);
	assert_string_equal(strata_router_name(rt, 1), "cpu:1");
	assert_int_equal(strata_router_context(rt), 64);
	uint32_t home = 0;
	assert_int_equal(strata_shard_home("k", 1, 2, &home, &err), 0);
	strata_scheduler_hold(s[0], true);
	strata_scheduler_hold(s[1], true);
	seen a, b, c;
	uint32_t ra = 9, rb = 9, rc = 9;
	assert_int_equal(submit(rt, "k", &a, &ra), 0);
	assert_int_equal(ra, home);
	assert_int_equal(submit(rt, "k", &b, &rb), 0);
	assert_int_equal(rb, 1 - home);
	assert_int_equal(submit(rt, "k", &c, &rc), STRATA_E_BUSY);
	strata_router_replica_stats h, other;
	strata_router_get_stats(rt, home, &h);
	strata_router_get_stats(rt, 1 - home, &other);
	assert_int_equal(h.routed, 1);
	assert_int_equal(h.routed_home, 1);
	assert_int_equal(h.spilled_away, 1);
	assert_int_equal(h.refused, 2); /* b, then c */
	assert_int_equal(h.load, 5 + MAX_NEW);
	assert_int_equal(other.routed, 1);
	assert_int_equal(other.spilled_in, 1);
	assert_int_equal(other.refused, 1); /* c */
	assert_int_equal(other.load, 5 + MAX_NEW);
	strata_scheduler_hold(s[0], false);
	strata_scheduler_hold(s[1], false);
	wait_done(&a);
	wait_done(&b);
	assert_int_equal(a.n, MAX_NEW);
	assert_memory_equal(a.tokens, b.tokens, sizeof a.tokens);
	strata_router_drain(rt, 0);
	strata_router_get_stats(rt, home, &h);
	strata_router_get_stats(rt, 1 - home, &other);
	assert_int_equal(h.load, 0);
	assert_int_equal(other.load, 0);
	assert_int_equal(h.peak_load, 5 + MAX_NEW);
	/* drained: every replica refuses */
	assert_int_equal(submit(rt, "k", &c, &rc), STRATA_E_BUSY);
	strata_router_destroy(rt);
	strata_scheduler_destroy(s[0]);
	strata_scheduler_destroy(s[1]);
}

/* Round-robin places request i on replica i mod 2, whatever the key. */
static void test_router_round_robin(void **state)
{
	(void)state;
	strata_scheduler *s[2] = {open_sched(8), open_sched(8)};
	strata_router_options o = {.schedulers = s, .count = 2,
				   .route = STRATA_BATCH_ROUTE_ROUND_ROBIN};
	strata_router *rt = NULL;
	strata_error err;
	assert_int_equal(strata_router_create(&o, &rt, &err), 0);
	assert_string_equal(strata_router_name(rt, 0), "replica-0");
	assert_int_equal(strata_router_spill_threshold(rt), 64);
	seen r[4];
	for (uint32_t i = 0; i < 4; i++) {
		uint32_t d = 9;
		assert_int_equal(submit(rt, "same", &r[i], &d), 0);
		assert_int_equal(d, i % 2);
	}
	for (int i = 0; i < 4; i++)
		wait_done(&r[i]);
	strata_router_destroy(rt);
	strata_scheduler_destroy(s[0]);
	strata_scheduler_destroy(s[1]);
}

static void test_router_bad_options(void **state)
{
	(void)state;
	strata_scheduler *s = open_sched(1);
	strata_router *rt = NULL;
	strata_error err;
	strata_router_options o = {.schedulers = &s, .count = 0};
	assert_int_equal(strata_router_create(&o, &rt, &err),
			 STRATA_E_INVALID_ARG);
	o.count = STRATA_BATCH_MAX_REPLICAS + 1;
	assert_int_equal(strata_router_create(&o, &rt, &err),
			 STRATA_E_INVALID_ARG);
	o.count = 1;
	o.route = STRATA_BATCH_ROUTE_FOLLOW;
	assert_int_equal(strata_router_create(&o, &rt, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "follow"));
	assert_null(rt);
	strata_scheduler_destroy(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_router_full_queue_passes_on),
		cmocka_unit_test(test_router_round_robin),
		cmocka_unit_test(test_router_bad_options),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
