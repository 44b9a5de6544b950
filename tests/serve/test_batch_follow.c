/* test_batch_follow.c - a batch over two replicas of stories260K routed by
 * the follow route answering every greedy request as one replica does
 * (the residence table's rules on their own: test_batch_residence.c)
 * (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/batch_internal.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define OK(call) assert_int_equal((call), STRATA_OK)

static strata_batch *open_batch(uint32_t replicas, strata_batch_route route)
{
	strata_batch_options o = {.replicas = replicas,
				  .spill_threshold = 60, /* about one request */
				  .prefix_cache_bytes = 1u << 20,
				  .eos = -1, .route = route};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 64;
	o.session.prefill = 40;
	o.session.plan.mode = STRATA_RESIDENCY_AUTO;
	o.session.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_batch *b = NULL;
	strata_error err;
	if (strata_batch_create(&o, &b, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return b;
}

/* 60 greedy requests over 6 keys (a shared 32-token prefix each and a
 * tail of their own) on two replicas with a threshold low enough to
 * spill: the tokens equal one replica's, request by request; each
 * request's resident device is its home or a replica its key moved to;
 * the router names the route. */
static void test_follow_answers_as_one_replica(void **state)
{
	(void)state;
	enum { R = 60, KEYS = 6, PREFIX = 32, TAIL = 4, NEW = 6 };
	static int32_t prompts[R][PREFIX + TAIL];
	static uint32_t keys[R];
	strata_batch_request q[R];
	for (uint32_t i = 0; i < R; i++) {
		keys[i] = i % KEYS;
		for (uint32_t t = 0; t < PREFIX; t++)
			prompts[i][t] = 1 + (int32_t)((keys[i] * 37 + t * 11) % 500);
		for (uint32_t t = 0; t < TAIL; t++)
			prompts[i][PREFIX + t] = 1 + (int32_t)((i * 13 + t) % 500);
		q[i] = (strata_batch_request){.prompt = prompts[i],
					      .n_prompt = PREFIX + TAIL,
					      .max_tokens = NEW,
					      .key = &keys[i],
					      .key_bytes = sizeof keys[i]};
		strata_sampler_params_default(&q[i].sampler);
		q[i].sampler.temperature = 0;
	}
	strata_batch_result one[R], two[R];
	strata_error err;
	strata_batch *b = open_batch(1, STRATA_BATCH_ROUTE_AFFINITY);
	memset(one, 0, sizeof one);
	OK(strata_batch_run(b, q, R, one, NULL, &err));
	strata_batch_destroy(b);
	b = open_batch(2, STRATA_BATCH_ROUTE_FOLLOW);
	assert_int_equal(strata_batch_route_of(b), STRATA_BATCH_ROUTE_FOLLOW);
	assert_string_equal(strata_batch_route_name(STRATA_BATCH_ROUTE_FOLLOW),
			    "follow");
	memset(two, 0, sizeof two);
	OK(strata_batch_run(b, q, R, two, NULL, &err));
	uint32_t away = 0, moved = 0;
	for (uint32_t i = 0; i < R; i++) {
		away += two[i].device != two[i].home_device;
		moved += two[i].resident_device != two[i].home_device;
		assert_int_equal(two[i].n_tokens, one[i].n_tokens);
		assert_memory_equal(two[i].tokens, one[i].tokens,
				    one[i].n_tokens * sizeof(int32_t));
		assert_true(two[i].resident_device < 2);
		assert_true(two[i].home_device < 2);
	}
	/* a figure: how much the placement moved depends on timing */
	print_message("  follow: %u of %d requests away from their key's home, "
		      "%u routed to where their key had moved\n", away, R,
		      moved);
	strata_batch_results_free(one, R);
	strata_batch_results_free(two, R);
	strata_batch_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_follow_answers_as_one_replica),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
