/* test_batch_residence.c - the follow route's residence table on constructed
 * request sequences, no model and no timing: where new keys are placed
 * (their home unless it carries more than its share of the demand or has
 * no cache room where another has), when a spilled key moves (the second
 * spill in a row, only when that evens the demand out, never into a full
 * cache), over 2, 3 and 5 replicas and under skewed demand; keys that stop
 * appearing are forgotten, so the table stays bounded; the replicas'
 * demand and bytes always equal the sums of their keys'; allocation
 * failures leave the table as it was (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/batch_internal.h"

#define OK(call) assert_int_equal((call), STRATA_OK)

static uint64_t tag_of(uint32_t key)
{
	return strata__residence_tag(&key, sizeof key);
}

/* One request of `key` (BLAKE3 home `home`, cost `cost`, a prompt of
 * `positions`) routed, then run on `ran` (UINT32_MAX: where routing put
 * it). Returns where it was routed. */
static uint32_t request_of(strata__residence *t, uint32_t key, uint32_t home,
			   uint64_t cost, uint32_t positions, uint32_t ran)
{
	strata_error err;
	OK(strata__residence_reserve(t, &err));
	uint32_t at = strata__residence_route(t, tag_of(key), home, cost,
					      positions);
	strata__residence_ran(t, tag_of(key), ran == UINT32_MAX ? at : ran);
	return at;
}

static uint32_t request(strata__residence *t, uint32_t key, uint32_t home,
			uint64_t cost, uint32_t ran)
{
	return request_of(t, key, home, cost, 1, ran);
}

/* Every replica's demand and bytes are the sums of its keys' and the
 * count is the number of keys held. */
static void check_sums(const strata__residence *t)
{
	uint64_t load[STRATA_BATCH_MAX_REPLICAS] = {0};
	uint64_t held[STRATA_BATCH_MAX_REPLICAS] = {0};
	size_t count = 0;
	for (size_t i = 0; i < t->cap; i++) {
		if (!t->slot[i].tag)
			continue;
		assert_true(t->slot[i].device < t->replicas);
		load[t->slot[i].device] += t->slot[i].demand;
		held[t->slot[i].device] += t->slot[i].bytes;
		count++;
	}
	assert_int_equal(count, t->count);
	for (uint32_t d = 0; d < t->replicas; d++) {
		assert_int_equal(load[d], t->load[d]);
		assert_int_equal(held[d], t->held[d]);
	}
}

/* Four keys all homed on replica 0 of 2: each new one goes home while home
 * carries no more than the mean, else to the lighter replica. */
static void test_new_keys_fill_the_lighter_replica(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 2);
	assert_int_equal(request(&t, 1, 0, 10, UINT32_MAX), 0);
	assert_int_equal(request(&t, 2, 0, 10, UINT32_MAX), 1); /* 10 > 5 */
	assert_int_equal(request(&t, 3, 0, 10, UINT32_MAX), 0); /* 10 = 10 */
	assert_int_equal(request(&t, 4, 0, 10, UINT32_MAX), 1); /* 20 > 15 */
	/* known keys stay where they live whatever their home says */
	assert_int_equal(request(&t, 2, 0, 10, UINT32_MAX), 1);
	assert_int_equal(request(&t, 1, 1, 10, UINT32_MAX), 0);
	assert_int_equal(t.load[0], 30);
	assert_int_equal(t.load[1], 30);
	assert_int_equal(strata__residence_demand(&t, tag_of(1)), 20);
	assert_int_equal(strata__residence_home(&t, tag_of(9), 1), 1);
	check_sums(&t);
	strata__residence_fini(&t);
}

/* Five replicas, 25 keys whose homes are all replica 3, one request each:
 * the keys spread five to a replica (affinity would put all 25 on 3). */
static void test_new_keys_spread_over_five_replicas(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 5);
	uint32_t keys_on[5] = {0};
	for (uint32_t k = 0; k < 25; k++)
		keys_on[request(&t, k, 3, 7, UINT32_MAX)]++;
	for (uint32_t d = 0; d < 5; d++)
		assert_int_equal(keys_on[d], 5);
	check_sums(&t);
	strata__residence_fini(&t);
}

/* Caches with room for two 10-byte prompts each: a new key goes where
 * there is room even when the demand rule says otherwise, and where none
 * has room the demand rule alone decides; a spilled key does not move
 * into a full cache, and moves once there is room. A key's bytes follow
 * its last prompt. */
static void test_keys_respect_cache_room(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 2);
	strata__residence_set_room(&t, 0, 25, 10);
	strata__residence_set_room(&t, 1, 25, 10);
	assert_int_equal(request(&t, 1, 0, 100, UINT32_MAX), 0);
	assert_int_equal(request(&t, 2, 0, 1, UINT32_MAX), 1);
	assert_int_equal(request(&t, 3, 0, 1, UINT32_MAX), 1);
	/* replica 0 carries more than the mean, but 1 is full */
	assert_int_equal(request(&t, 4, 0, 1, UINT32_MAX), 0);
	assert_int_equal(t.held[0], 20);
	assert_int_equal(t.held[1], 20);
	/* no room anywhere: the lighter */
	assert_int_equal(request(&t, 5, 0, 1, UINT32_MAX), 1);
	check_sums(&t);
	/* key 4 (demand 1) on the far heavier 0, spilled twice to the full
	 * 1: it stays */
	request(&t, 4, 0, 1, 1);
	request(&t, 4, 0, 1, 1);
	assert_int_equal(strata__residence_home(&t, tag_of(4), 9), 0);
	strata__residence_set_room(&t, 1, 1000, 10);
	request(&t, 4, 0, 1, 1);
	request(&t, 4, 0, 1, 1);
	assert_int_equal(strata__residence_home(&t, tag_of(4), 9), 1);
	/* a longer prompt: more bytes */
	request_of(&t, 4, 0, 1, 3, UINT32_MAX);
	assert_int_equal(t.held[1], 60);
	check_sums(&t);
	/* emptied, the table keeps its rooms */
	strata__residence_fini(&t);
	assert_int_equal(t.room[0], 25);
	assert_int_equal(t.bytes_per_position, 10);
	assert_int_equal(t.count, 0);
	strata__residence_fini(&t);
}

/* A key moves on its second spill in a row to where it ran, not its first;
 * a request run at home between spills resets the count. */
static void test_key_moves_on_its_second_spill_in_a_row(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 2);
	/* key 4 on 1, keys 1, 2 and 3 on 0, then 0 made the heavier */
	assert_int_equal(request(&t, 4, 1, 10, UINT32_MAX), 1);
	assert_int_equal(request(&t, 1, 0, 1, UINT32_MAX), 0);
	assert_int_equal(request(&t, 2, 0, 1, UINT32_MAX), 0);
	assert_int_equal(request(&t, 3, 0, 1, UINT32_MAX), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(request(&t, 2, 0, 10, UINT32_MAX), 0);
		assert_int_equal(request(&t, 3, 0, 10, UINT32_MAX), 0);
	}
	request(&t, 1, 0, 1, 1); /* loads 44 and 10: one spill */
	assert_int_equal(strata__residence_home(&t, tag_of(1), 9), 0);
	request(&t, 1, 0, 1, 0); /* ran at home: the count starts again */
	request(&t, 1, 0, 1, 1);
	assert_int_equal(strata__residence_home(&t, tag_of(1), 9), 0);
	request(&t, 1, 0, 1, 1); /* second in a row: 47 - 10 > 5, it moves */
	assert_int_equal(strata__residence_home(&t, tag_of(1), 9), 1);
	assert_int_equal(t.load[0], 42);
	assert_int_equal(t.load[1], 15);
	assert_int_equal(request(&t, 1, 0, 1, UINT32_MAX), 1);
	check_sums(&t);
	strata__residence_fini(&t);
}

/* Skew: a hot key carrying most of the demand spills twice in a row, but
 * moving it would only move the imbalance, so it stays; a cold key beside
 * it spilled twice in a row moves; spilled back from the now lighter
 * replica, it stays (no ping-pong). */
static void test_hot_key_stays_cold_key_moves(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 2);
	assert_int_equal(request(&t, 1, 0, 5, UINT32_MAX), 0); /* cold */
	assert_int_equal(request(&t, 2, 0, 5, UINT32_MAX), 1); /* cold */
	assert_int_equal(request(&t, 100, 0, 60, UINT32_MAX), 0); /* hot */
	for (int i = 0; i < 4; i++)
		request(&t, 100, 0, 40, UINT32_MAX);
	request(&t, 100, 0, 40, 1);
	request(&t, 100, 0, 40, 1); /* 305 - 5 <= 300: it stays */
	assert_int_equal(strata__residence_home(&t, tag_of(100), 9), 0);
	assert_int_equal(strata__residence_demand(&t, tag_of(100)), 300);
	request(&t, 1, 0, 5, 1);
	request(&t, 1, 0, 5, 1); /* 315 - 5 > 15: it moves */
	assert_int_equal(strata__residence_home(&t, tag_of(1), 9), 1);
	assert_int_equal(t.load[0], 300);
	assert_int_equal(t.load[1], 20);
	request(&t, 1, 0, 5, 0);
	request(&t, 1, 0, 5, 0); /* 30 < 300: no move back */
	assert_int_equal(strata__residence_home(&t, tag_of(1), 9), 1);
	check_sums(&t);
	strata__residence_fini(&t);
}

/* Skew over three replicas: a hot key (every other request) and 11 cold
 * ones, all homed on replica 0, the hot one seen first. Each cold key,
 * new while replica 0 carries the hot key's demand, goes to replica 1 or
 * 2 (alternately: the lighter); the hot key, spilled twice in a row,
 * stays. */
static void test_skewed_demand_three_replicas(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 3);
	uint32_t keys_on[3] = {0};
	for (uint32_t i = 0; i < 22; i++) {
		uint32_t key = i % 2 ? 1 + i / 2 : 0;
		uint32_t at = request(&t, key, 0, 10, UINT32_MAX);
		if (key)
			keys_on[at]++;
		else
			assert_int_equal(at, 0);
	}
	assert_int_equal(keys_on[0], 0);
	assert_int_equal(keys_on[1], 6);
	assert_int_equal(keys_on[2], 5);
	request(&t, 0, 0, 10, 2);
	request(&t, 0, 0, 10, 2);
	assert_int_equal(strata__residence_home(&t, tag_of(0), 9), 0);
	check_sums(&t);
	strata__residence_fini(&t);
}

/* Demand halves at each epoch's end, and a key not seen for FORGET epochs
 * is forgotten: its demand leaves its replica and it is new again. */
static void test_demand_decays_and_idle_keys_go(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 2);
	const uint32_t epoch = 2 * STRATA__RESIDENCE_EPOCH_PER_REPLICA;
	request(&t, 1, 1, 64, UINT32_MAX);
	for (uint32_t i = 1; i < epoch; i++)
		request(&t, 2, 0, 1, UINT32_MAX);
	assert_int_equal(strata__residence_demand(&t, tag_of(1)), 64);
	request(&t, 2, 0, 1, UINT32_MAX); /* the next epoch's first */
	assert_int_equal(strata__residence_demand(&t, tag_of(1)), 32);
	for (uint32_t e = 1; e <= STRATA__RESIDENCE_FORGET; e++)
		for (uint32_t i = 0; i < epoch; i++)
			request(&t, 2, 0, 1, UINT32_MAX);
	/* FORGET epochs without key 1 have ended: it is gone */
	assert_int_equal(strata__residence_home(&t, tag_of(1), 7), 7);
	assert_int_equal(t.count, 1);
	assert_int_equal(t.load[1], 0);
	check_sums(&t);
	strata__residence_fini(&t);
}

/* 200000 requests of ever new keys: the table never holds more than the
 * keys of FORGET + 1 epochs, so it stops growing; the keys of the last
 * epoch are all still found where they were placed; deletion keeps every
 * key reachable (the sums and count agree after each epoch). */
static void test_table_stays_bounded(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 2);
	const uint32_t epoch = 2 * STRATA__RESIDENCE_EPOCH_PER_REPLICA;
	const size_t most = (size_t)(STRATA__RESIDENCE_FORGET + 1) * epoch;
	size_t cap_seen = 0;
	uint32_t placed[2 * STRATA__RESIDENCE_EPOCH_PER_REPLICA];
	for (uint32_t i = 0; i < 200000; i++) {
		/* some keys come back: every third request repeats one from
		 * a few epochs ago, so deletions happen inside probe runs */
		uint32_t key = i % 3 == 0 && i > 3 * epoch ? i - 3 * epoch : i;
		uint32_t at = request(&t, key, key % 2, 1 + key % 5,
				      UINT32_MAX);
		placed[i % epoch] = at;
		assert_true(t.count <= most);
		if (t.cap > cap_seen)
			cap_seen = t.cap;
		if (i % epoch == epoch - 1) {
			check_sums(&t);
			for (uint32_t j = i + 1 - epoch; j <= i; j++) {
				uint32_t k = j % 3 == 0 && j > 3 * epoch
						     ? j - 3 * epoch
						     : j;
				assert_int_equal(strata__residence_home(
							 &t, tag_of(k), 9),
						 placed[j % epoch]);
			}
		}
	}
	print_message("  table: %zu keys held at most %zu, %zu slots\n",
		      t.count, most, cap_seen);
	assert_true(cap_seen <= 4 * most);
	strata__residence_fini(&t);
}

/* Growth fails at each allocation it makes and leaves the table answering
 * as before; route then needs no allocation. */
static void test_reserve_survives_oom(void **state)
{
	(void)state;
	strata__residence t;
	strata__residence_init(&t, 2);
	strata_error err;
	uint32_t k = 0;
	while (2 * (t.count + 1) <= t.cap || t.cap == 0) {
		request(&t, k, k % 2, 3, UINT32_MAX);
		k++;
	}
	size_t cap = t.cap, count = t.count;
	uint64_t l0 = t.load[0], l1 = t.load[1];
	strata_alloc_fail_after(0);
	assert_int_equal(strata__residence_reserve(&t, &err), STRATA_E_NOMEM);
	strata_alloc_fail_after(-1);
	assert_int_equal(t.cap, cap);
	assert_int_equal(t.count, count);
	assert_int_equal(t.load[0], l0);
	assert_int_equal(t.load[1], l1);
	for (uint32_t j = 0; j < k; j++)
		assert_true(strata__residence_home(&t, tag_of(j), 9) < 2);
	OK(strata__residence_reserve(&t, &err));
	assert_true(t.cap > cap);
	for (uint32_t j = 0; j < k; j++)
		assert_true(strata__residence_home(&t, tag_of(j), 9) < 2);
	check_sums(&t);
	strata__residence_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_keys_fill_the_lighter_replica),
		cmocka_unit_test(test_new_keys_spread_over_five_replicas),
		cmocka_unit_test(test_keys_respect_cache_room),
		cmocka_unit_test(test_key_moves_on_its_second_spill_in_a_row),
		cmocka_unit_test(test_hot_key_stays_cold_key_moves),
		cmocka_unit_test(test_skewed_demand_three_replicas),
		cmocka_unit_test(test_demand_decays_and_idle_keys_go),
		cmocka_unit_test(test_table_stays_bounded),
		cmocka_unit_test(test_reserve_survives_oom),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
