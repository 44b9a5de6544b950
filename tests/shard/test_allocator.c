/* test_allocator.c - the stream shard allocator: every seed 000 test case, the
 * spill rule's edges, statistics and the in-flight mode, OOM at creation
 * and state left unchanged by every error (layer: shard). The property
 * tests against a linear-scan model are test_model.c's. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "shard/internal.h"
#include "strata/shard.h"

#define MAX_N 64
#include "shard_fixture.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static uint32_t assign_ok(strata_shard *s, const char *key, uint64_t cost)
{
	uint32_t d = 12345;
	strata_error e;
	assert_int_equal(strata_shard_assign(s, key, strlen(key), cost, &d, &e),
			 STRATA_OK);
	return d;
}

/* The seed's way to find a key with a given home: bump the first byte. */
static void key_with_home(uint8_t key[4], uint32_t n, uint32_t want)
{
	memset(key, 0, 4);
	while (home_of(key, 4, n) != want)
		key[0]++;
}


/* ------------------------------------------------------------------------ */
/* Seed 000 test cases                                                      */
/* ------------------------------------------------------------------------ */

static void test_home_is_deterministic(void **state)
{
	(void)state;
	uint32_t a = home_of("src/foo.rs", 10, 4), b = home_of("src/foo.rs", 10, 4);
	assert_int_equal(a, b);
	assert_true(a < 4);
}

static void test_home_spreads_128_keys_over_4_devices(void **state)
{
	(void)state;
	unsigned hits[4] = {0};
	for (int i = 0; i < 128; i++) {
		char key[32];
		int len = snprintf(key, sizeof key, "src/file_%d.rs", i);
		hits[home_of(key, (size_t)len, 4)]++;
	}
	for (int d = 0; d < 4; d++)
		assert_true(hits[d] > 0);
}

static void test_zero_devices_is_a_configuration_error(void **state)
{
	(void)state;
	strata_error e;
	uint32_t d = 7;
	assert_int_equal(strata_shard_home("anything", 8, 0, &d, &e),
			 STRATA_E_SHARD_ZERO_DEVICES);
	assert_int_equal(d, 7); /* never a fake device 0 */
	assert_non_null(strstr(e.message, "no devices"));
	assert_non_null(strstr(e.message, "0"));
	assert_non_null(strstr(e.fix, "at least one device"));

	strata_shard *s = (strata_shard *)&d;
	assert_int_equal(strata_shard_create(0, 5, &s, &e),
			 STRATA_E_SHARD_ZERO_DEVICES);
	assert_ptr_equal(s, (strata_shard *)&d);
	assert_non_null(strstr(e.fix, "at least one device"));
}

static void test_device_count_cap(void **state)
{
	(void)state;
	strata_error e;
	strata_shard *s = NULL;
	assert_int_equal(strata_shard_create(STRATA_SHARD_MAX_DEVICES + 1, 0, &s,
					     &e),
			 STRATA_E_SHARD_DEVICE_RANGE);
	assert_null(s);
	assert_non_null(strstr(e.message, "16777217 devices"));
	assert_int_equal(strata_shard_create(UINT32_MAX, 0, &s, &e),
			 STRATA_E_SHARD_DEVICE_RANGE);
	/* Large counts below the cap work (the cap itself would take 1.1 GiB,
	 * too much for a unit test under ASan). */
	const uint32_t n = 1u << 18;
	assert_int_equal(strata_shard_create(n, 0, &s, &e), STRATA_OK);
	uint32_t d;
	assert_int_equal(strata_shard_assign_home(s, n - 1, 5, &d, NULL), STRATA_OK);
	assert_int_equal(d, n - 1);
	assert_int_equal(strata_shard_assign_home(s, n - 1, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 0); /* 5 > 0 + T: spills to the lowest index */
	strata_shard_destroy(s);
}

static void test_initial_placement_matches_hash(void **state)
{
	(void)state;
	strata_shard *s = make(4, 100);
	const char *key = "cold/file.bin";
	uint32_t home = home_of(key, strlen(key), 4);
	assert_int_equal(assign_ok(s, key, 10), home);
	assert_int_equal(strata_shard_loads(s)[home], 10);
	strata_shard_destroy(s);
}

static void test_zero_cost_goes_nowhere_and_changes_nothing(void **state)
{
	(void)state;
	strata_shard *s = make(2, 0);
	assert_int_equal(assign_ok(s, "warm", 3) < 2, 1);
	snapshot before;
	take(s, &before);
	assert_int_equal(assign_ok(s, "x", 0), STRATA_SHARD_NO_DEVICE);
	uint32_t d = 9;
	assert_int_equal(strata_shard_assign_home(s, 1, 0, &d, NULL), STRATA_OK);
	assert_int_equal(d, STRATA_SHARD_NO_DEVICE);
	assert_unchanged(s, &before);
	strata_shard_destroy(s);
}

static void test_spills_when_imbalance_exceeds_threshold(void **state)
{
	(void)state;
	strata_shard *s = make(2, 5);
	uint8_t key[4];
	key_with_home(key, 2, 0);
	assert_int_equal(strata_shard_seed_load(s, 0, 100, NULL), STRATA_OK);
	uint32_t d;
	assert_int_equal(strata_shard_assign(s, key, 4, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 1);
	strata_shard_destroy(s);
}

static void test_stays_home_under_threshold(void **state)
{
	(void)state;
	strata_shard *s = make(2, 100);
	uint8_t key[4];
	key_with_home(key, 2, 0);
	assert_int_equal(strata_shard_seed_load(s, 0, 50, NULL), STRATA_OK);
	uint32_t d;
	assert_int_equal(strata_shard_assign(s, key, 4, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 0);
	strata_shard_destroy(s);
}

static void test_load_grows_by_each_cost(void **state)
{
	(void)state;
	strata_shard *s = make(3, 0);
	uint64_t total = 0;
	for (int i = 0; i < 30; i++) {
		char key[16];
		snprintf(key, sizeof key, "path%d", i);
		uint32_t d = assign_ok(s, key, 1);
		assert_true(d < 3);
		uint64_t now = 0;
		for (int k = 0; k < 3; k++)
			now += strata_shard_loads(s)[k];
		assert_int_equal(now, total + 1);
		total = now;
	}
	assert_int_equal(total, 30);
	strata_shard_destroy(s);
}

static void test_least_loaded_index_stays_device_scale(void **state)
{
	(void)state;
	strata_shard *s = make(4, 0);
	for (int i = 0; i < 128; i++) {
		char key[16];
		snprintf(key, sizeof key, "path%d", i);
		assign_ok(s, key, 1);
		assert_true(strata_shard_heap_entries(s) <= 4 * 4);
	}
	uint64_t before = 0, after = 0;
	for (int k = 0; k < 4; k++)
		before += strata_shard_loads(s)[k];
	assign_ok(s, "trigger-stale-pop", 1);
	for (int k = 0; k < 4; k++)
		after += strata_shard_loads(s)[k];
	assert_int_equal(after, before + 1);
	/* The seed bounds its lazy heap at max(4n, 8); a scan needs none. */
	assert_true(strata_shard_heap_entries(s) <= 4 * 4);
	strata_shard_destroy(s);

	/* Many devices: still no per-item structure, whatever the stream. */
	s = make(40, 0);
	for (int i = 0; i < 1000; i++) {
		char key[16];
		snprintf(key, sizeof key, "path%d", i);
		assign_ok(s, key, 1 + (uint64_t)i % 3);
		assert_int_equal(strata_shard_heap_entries(s), 0);
	}
	strata_shard_destroy(s);
}

/* ------------------------------------------------------------------------ */
/* The spill rule at its exact edges                                        */
/* ------------------------------------------------------------------------ */

static void test_spill_rule_exact_edges(void **state)
{
	(void)state;
	uint32_t d;
	/* home - min == T: stays; home - min == T + 1: spills. */
	strata_shard *s = make(2, 7);
	assert_int_equal(strata_shard_seed_load(s, 0, 7, NULL), STRATA_OK);
	assert_int_equal(strata_shard_assign_home(s, 0, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 0); /* 7 - 0 = 7, not > 7 */
	assert_int_equal(strata_shard_assign_home(s, 0, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 1); /* 8 - 0 = 8 > 7 */
	strata_shard_destroy(s);

	/* T = 0 and equal loads: home == min never spills. */
	s = make(3, 0);
	for (uint32_t h = 0; h < 3; h++) {
		assert_int_equal(strata_shard_assign_home(s, h, 5, &d, NULL),
				 STRATA_OK);
		assert_int_equal(d, h);
	}
	strata_shard_destroy(s);

	/* T = 2^64-1: nothing can ever spill. */
	s = make(2, UINT64_MAX);
	assert_int_equal(strata_shard_seed_load(s, 0, UINT64_MAX - 1, NULL),
			 STRATA_OK);
	assert_int_equal(strata_shard_assign_home(s, 0, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 0);
	strata_shard_destroy(s);
}

static void test_spill_ties_go_to_lowest_index(void **state)
{
	(void)state;
	uint32_t d;
	strata_shard *s = make(5, 0);
	assert_int_equal(strata_shard_seed_load(s, 0, 10, NULL), STRATA_OK);
	assert_int_equal(strata_shard_seed_load(s, 1, 4, NULL), STRATA_OK);
	/* Devices 2, 3, 4 tie at 0: a spill from 0 goes to 2, then 3, then 4. */
	for (uint32_t want = 2; want <= 4; want++) {
		assert_int_equal(strata_shard_assign_home(s, 0, 3, &d, NULL),
				 STRATA_OK);
		assert_int_equal(d, want);
	}
	/* Now 1, 2, 3, 4 hold 4, 3, 3, 3: lowest of the three at 3. */
	assert_int_equal(strata_shard_assign_home(s, 0, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 2);
	strata_shard_destroy(s);
}

/* ------------------------------------------------------------------------ */
/* Statistics and the in-flight mode                                        */
/* ------------------------------------------------------------------------ */

static void test_statistics_count_homes_and_spills(void **state)
{
	(void)state;
	uint32_t d;
	strata_shard *s = make(3, 2);
	assert_int_equal(strata_shard_seed_load(s, 2, 4, NULL), STRATA_OK);
	/* home 2 (4 vs min 0 > 2): spills to 0. */
	assert_int_equal(strata_shard_assign_home(s, 2, 5, &d, NULL), STRATA_OK);
	assert_int_equal(d, 0);
	/* home 1 (0 vs 0): stays. */
	assert_int_equal(strata_shard_assign_home(s, 1, 2, &d, NULL), STRATA_OK);
	assert_int_equal(d, 1);
	/* home 0 (5 vs min 2 > 2): spills to 1. */
	assert_int_equal(strata_shard_assign_home(s, 0, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 1);

	strata_shard_stats st;
	strata_shard_get_stats(s, &st);
	assert_int_equal(st.device_count, 3);
	assert_int_equal(st.spill_threshold, 2);
	assert_int_equal(st.items, 3);
	assert_int_equal(st.home_hits, 1);
	assert_int_equal(st.spills, 2);
	assert_int_equal(st.largest_cost, 5);
	assert_int_equal(st.min_load, 3); /* loads 5, 3, 4 */
	assert_int_equal(st.max_load, 5);
	/* Gaps after each change: 4 (seed), 5-0=5 ... -> 5 at most. */
	assert_int_equal(st.largest_gap, 5);

	strata_shard_device_stats ds;
	assert_int_equal(strata_shard_get_device_stats(s, 0, &ds, NULL), STRATA_OK);
	assert_int_equal(ds.load, 5);
	assert_int_equal(ds.items, 1);
	assert_int_equal(ds.spilled_in, 1);
	assert_int_equal(ds.spilled_away, 1);
	assert_int_equal(strata_shard_get_device_stats(s, 1, &ds, NULL), STRATA_OK);
	assert_int_equal(ds.items, 2);
	assert_int_equal(ds.spilled_in, 1);
	assert_int_equal(ds.spilled_away, 0);
	assert_int_equal(strata_shard_get_device_stats(s, 2, &ds, NULL), STRATA_OK);
	assert_int_equal(ds.load, 4);
	assert_int_equal(ds.seeded_load, 4);
	assert_int_equal(ds.items, 0);
	assert_int_equal(ds.spilled_away, 1);
	strata_error e;
	assert_int_equal(strata_shard_get_device_stats(s, 3, &ds, &e),
			 STRATA_E_SHARD_DEVICE_RANGE);
	strata_shard_destroy(s);
}

static void test_release_lowers_load_and_steers_spills(void **state)
{
	(void)state;
	uint32_t d;
	strata_shard *s = make(3, 0);
	assert_int_equal(strata_shard_seed_load(s, 0, 10, NULL), STRATA_OK);
	assert_int_equal(strata_shard_seed_load(s, 1, 10, NULL), STRATA_OK);
	assert_int_equal(strata_shard_seed_load(s, 2, 10, NULL), STRATA_OK);
	assert_int_equal(strata_shard_release(s, 2, 10, NULL), STRATA_OK);
	assert_int_equal(strata_shard_loads(s)[2], 0);
	/* Home 0 (10) now spills to the freed device 2. */
	assert_int_equal(strata_shard_assign_home(s, 0, 1, &d, NULL), STRATA_OK);
	assert_int_equal(d, 2);
	/* Releasing the heaviest device brings the maximum down with it. */
	assert_int_equal(strata_shard_release(s, 0, 10, NULL), STRATA_OK);
	assert_int_equal(strata_shard_release(s, 1, 9, NULL), STRATA_OK);
	strata_shard_stats st;
	strata_shard_get_stats(s, &st);
	assert_int_equal(st.max_load, 1);
	assert_int_equal(st.min_load, 0);
	assert_int_equal(st.releases, 3);
	assert_int_equal(st.largest_gap, 10);
	strata_shard_device_stats ds;
	assert_int_equal(strata_shard_get_device_stats(s, 1, &ds, NULL), STRATA_OK);
	assert_int_equal(ds.released_load, 9);
	assert_int_equal(ds.load, 1);
	/* Release of 0 is allowed and changes only the counter. */
	assert_int_equal(strata_shard_release(s, 1, 0, NULL), STRATA_OK);
	strata_shard_destroy(s);
}

/* ------------------------------------------------------------------------ */
/* Errors leave the allocator exactly as it was                             */
/* ------------------------------------------------------------------------ */

static void test_errors_leave_state_unchanged(void **state)
{
	(void)state;
	strata_error e;
	uint32_t d = 77;
	strata_shard *s = make(3, 1);
	assert_int_equal(strata_shard_seed_load(s, 1, UINT64_MAX - 5, NULL),
			 STRATA_OK);
	assert_int_equal(strata_shard_assign_home(s, 0, 3, &d, NULL), STRATA_OK);
	snapshot before;
	take(s, &before);

	/* Seed overflow (exact edge: +5 fits, +6 does not, checked below). */
	assert_int_equal(strata_shard_seed_load(s, 1, 6, &e),
			 STRATA_E_SHARD_LOAD_OVERFLOW);
	assert_non_null(strstr(e.message, "device 1"));
	assert_non_null(strstr(e.message, "18446744073709551610"));
	assert_true(e.fix[0] != '\0');
	assert_unchanged(s, &before);

	/* Out-of-range device for each entry point. */
	assert_int_equal(strata_shard_seed_load(s, 3, 1, &e),
			 STRATA_E_SHARD_DEVICE_RANGE);
	assert_non_null(strstr(e.message, "device 3"));
	assert_int_equal(strata_shard_release(s, UINT32_MAX, 1, &e),
			 STRATA_E_SHARD_DEVICE_RANGE);
	d = 77;
	assert_int_equal(strata_shard_assign_home(s, 3, 1, &d, &e),
			 STRATA_E_SHARD_DEVICE_RANGE);
	assert_int_equal(d, 77);
	assert_unchanged(s, &before);

	/* Release more than held. */
	assert_int_equal(strata_shard_release(s, 0, 4, &e), STRATA_E_SHARD_RELEASE);
	assert_non_null(strstr(e.message, "holds load 3"));
	assert_unchanged(s, &before);

	/* Assign overflow on the home device (T = 2^64-1: no spill). */
	strata_shard *t = make(2, UINT64_MAX);
	assert_int_equal(strata_shard_seed_load(t, 0, UINT64_MAX, NULL), STRATA_OK);
	snapshot tb;
	take(t, &tb);
	d = 77;
	assert_int_equal(strata_shard_assign_home(t, 0, 1, &d, &e),
			 STRATA_E_SHARD_LOAD_OVERFLOW);
	assert_int_equal(d, 77);
	assert_unchanged(t, &tb);
	strata_shard_destroy(t);

	/* Assign overflow on a spill target: both loads huge, T = 0. */
	t = make(2, 0);
	assert_int_equal(strata_shard_seed_load(t, 0, UINT64_MAX, NULL), STRATA_OK);
	assert_int_equal(strata_shard_seed_load(t, 1, UINT64_MAX - 1, NULL),
			 STRATA_OK);
	take(t, &tb);
	assert_int_equal(strata_shard_assign_home(t, 0, 2, &d, &e),
			 STRATA_E_SHARD_LOAD_OVERFLOW);
	assert_non_null(strstr(e.message, "device 1"));
	assert_unchanged(t, &tb);
	/* The exact fit still works afterwards. */
	assert_int_equal(strata_shard_assign_home(t, 0, 1, &d, &e), STRATA_OK);
	assert_int_equal(d, 1);
	assert_int_equal(strata_shard_loads(t)[1], UINT64_MAX);
	strata_shard_destroy(t);

	/* Through the keyed entry point too: loads max, max-5, max; home 2
	 * spills to device 1, where 6 more overflows. */
	assert_int_equal(strata_shard_seed_load(s, 0, UINT64_MAX - 3, NULL),
			 STRATA_OK);
	assert_int_equal(strata_shard_seed_load(s, 2, UINT64_MAX, NULL), STRATA_OK);
	take(s, &before);
	uint8_t key[4];
	key_with_home(key, 3, 2);
	assert_int_equal(strata_shard_assign(s, key, 4, 6, &d, &e),
			 STRATA_E_SHARD_LOAD_OVERFLOW);
	assert_non_null(strstr(e.message, "device 1"));
	assert_unchanged(s, &before);
	strata_shard_destroy(s);
}

/* ------------------------------------------------------------------------ */
/* Allocation                                                               */
/* ------------------------------------------------------------------------ */

static void test_create_survives_every_allocation_failure(void **state)
{
	(void)state;
	for (long n = 0;; n++) {
		strata_shard *s = (strata_shard *)&n;
		strata_error e;
		strata_alloc_fail_after(n);
		strata_status st = strata_shard_create(16, 3, &s, &e);
		uint64_t injected = strata_alloc_injected_failures();
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK) {
			assert_int_equal(injected, 0);
			assert_true(n >= 2);
			strata_shard_destroy(s);
			break;
		}
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_ptr_equal(s, (strata_shard *)&n); /* untouched */
		assert_true(e.message[0] != '\0');
		assert_true(e.fix[0] != '\0');
		assert_true(n < 100);
	}
}

static void test_nothing_allocates_after_create(void **state)
{
	(void)state;
	strata_shard *s = make(8, 10);
	strata_alloc_fail_after(0); /* any allocation from here would fail */
	uint32_t d;
	for (int i = 0; i < 2000; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(strata_shard_assign(s, key, strlen(key),
						     (uint64_t)(i % 7), &d, NULL),
				 STRATA_OK);
		if (i % 10 == 0)
			assert_int_equal(strata_shard_seed_load(s, (uint32_t)i % 8,
								5, NULL),
					 STRATA_OK);
		if (i % 13 == 0)
			assert_int_equal(strata_shard_release(s, (uint32_t)i % 8,
							      0, NULL),
					 STRATA_OK);
	}
	strata_shard_stats st;
	strata_shard_get_stats(s, &st);
	uint64_t injected = strata_alloc_injected_failures();
	strata_alloc_fail_after(-1);
	assert_int_equal(injected, 0);
	strata_shard_destroy(s);
}

/* The multiply-based modulo used for the home device is exact. */
static void test_fastmod_is_exact(void **state)
{
	(void)state;
	static const uint32_t ds[] = {1, 2, 3, 5, 7, 8, 63, 64, 65, 1000003,
				      0x7fffffffu, 0x80000000u, 0xfffffffeu,
				      UINT32_MAX};
	static const uint32_t xs[] = {0, 1, 2, 62, 63, 64, 65, 0x7fffffffu,
				      0x80000000u, 0xfffffffeu, UINT32_MAX};
	for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
		for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++)
			assert_int_equal(strata__fastmod(xs[k],
							 strata__fastmod_magic(ds[i]),
							 ds[i]),
					 xs[k] % ds[i]);
	uint64_t x = 99;
	for (int i = 0; i < 2000000; i++) {
		uint32_t d = (uint32_t)(next_u64(&x) >> (next_u64(&x) % 32));
		uint32_t v = (uint32_t)next_u64(&x);
		if (d == 0)
			d = 1;
		if (strata__fastmod(v, strata__fastmod_magic(d), d) != v % d)
			fail_msg("%u mod %u", v, d);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fastmod_is_exact),
		cmocka_unit_test(test_home_is_deterministic),
		cmocka_unit_test(test_home_spreads_128_keys_over_4_devices),
		cmocka_unit_test(test_zero_devices_is_a_configuration_error),
		cmocka_unit_test(test_device_count_cap),
		cmocka_unit_test(test_initial_placement_matches_hash),
		cmocka_unit_test(test_zero_cost_goes_nowhere_and_changes_nothing),
		cmocka_unit_test(test_spills_when_imbalance_exceeds_threshold),
		cmocka_unit_test(test_stays_home_under_threshold),
		cmocka_unit_test(test_load_grows_by_each_cost),
		cmocka_unit_test(test_least_loaded_index_stays_device_scale),
		cmocka_unit_test(test_spill_rule_exact_edges),
		cmocka_unit_test(test_spill_ties_go_to_lowest_index),
		cmocka_unit_test(test_statistics_count_homes_and_spills),
		cmocka_unit_test(test_release_lowers_load_and_steers_spills),
		cmocka_unit_test(test_errors_leave_state_unchanged),
		cmocka_unit_test(test_create_survives_every_allocation_failure),
		cmocka_unit_test(test_nothing_allocates_after_create),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
