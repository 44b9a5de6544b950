/* test_batch.c - strata_shard_assign_batch gives exactly what one
 * strata_shard_assign per item gives, and stops cleanly at a load overflow
 * (layer: shard). */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "strata/shard.h"

#define MAX_N 64
#include "shard_fixture.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */



/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* strata_shard_assign_batch against one strata_shard_assign per item on a
 * twin allocator: batches of every size from 0 past three hash-ahead
 * rounds, keys of 0..100 bytes (one block and the hasher's path), zero
 * and large costs; the devices and everything observable must match. */
static void test_batch_matches_one_call_at_a_time(void **state)
{
	(void)state;
	uint64_t x = 31;
	for (int round = 0; round < 40; round++) {
		uint32_t n = 1 + (uint32_t)below(&x, MAX_N);
		uint64_t t = below(&x, 3) ? below(&x, 200) : 0;
		strata_shard *a = make(n, t), *b = make(n, t);
		static uint8_t keys[27][100];
		strata_shard_item items[27];
		for (int batch = 0; batch < 60; batch++) {
			size_t count = (size_t)below(&x, 28);
			for (size_t i = 0; i < count; i++) {
				size_t len = (size_t)below(&x, 101);
				for (size_t k = 0; k < len; k++)
					keys[i][k] = (uint8_t)next_u64(&x);
				uint64_t c = below(&x, 10);
				items[i] = (strata_shard_item){
					.key = keys[i],
					.key_bytes = len,
					.cost = c == 0	 ? 0
						: c == 1 ? below(&x, 1ull << 40)
							 : 1 + below(&x, 300),
					.device = 12345,
				};
			}
			size_t placed = 99;
			assert_int_equal(strata_shard_assign_batch(a, items, count,
								   &placed, NULL),
					 STRATA_OK);
			assert_int_equal(placed, count);
			for (size_t i = 0; i < count; i++) {
				uint32_t d = 12345;
				assert_int_equal(strata_shard_assign(b, items[i].key,
								     items[i].key_bytes,
								     items[i].cost, &d,
								     NULL),
						 STRATA_OK);
				if (items[i].device != d)
					fail_msg("round %d batch %d item %zu: device %u, one at a time %u",
						 round, batch, i, items[i].device, d);
			}
			snapshot sb;
			take(b, &sb);
			assert_unchanged(a, &sb);
		}
		strata_shard_destroy(a);
		strata_shard_destroy(b);
	}
}

/* A load overflow stops a batch at the failing item: the items before it
 * are placed exactly as one call each would place them, it and those after
 * it keep their .device, and the error is the one strata_shard_assign
 * gives. The failing item sits past the first hash-ahead round. */
static void test_batch_overflow_stops_at_the_failing_item(void **state)
{
	(void)state;
	strata_shard *a = make(1, 0), *b = make(1, 0);
	assert_int_equal(strata_shard_seed_load(a, 0, UINT64_MAX - 10, NULL),
			 STRATA_OK);
	assert_int_equal(strata_shard_seed_load(b, 0, UINT64_MAX - 10, NULL),
			 STRATA_OK);
	strata_shard_item items[14];
	char keys[14][8];
	for (int i = 0; i < 14; i++) {
		snprintf(keys[i], sizeof keys[i], "k%d", i);
		/* Item 3 costs 0 (placed nowhere); the rest 1 each, so the
		 * 11th unit of load, item 11, is one too many. */
		items[i] = (strata_shard_item){.key = keys[i],
					       .key_bytes = strlen(keys[i]),
					       .cost = i == 3 ? 0 : 1,
					       .device = 77};
	}
	strata_error e, eb;
	size_t placed = 0;
	assert_int_equal(strata_shard_assign_batch(a, items, 14, &placed, &e),
			 STRATA_E_SHARD_LOAD_OVERFLOW);
	assert_int_equal(placed, 11);
	for (int i = 0; i < 11; i++) {
		uint32_t d;
		assert_int_equal(strata_shard_assign(b, keys[i], strlen(keys[i]),
						     items[i].cost, &d, NULL),
				 STRATA_OK);
		assert_int_equal(items[i].device, d);
	}
	assert_int_equal(items[3].device, STRATA_SHARD_NO_DEVICE);
	for (int i = 11; i < 14; i++)
		assert_int_equal(items[i].device, 77);
	uint32_t d = 77;
	assert_int_equal(strata_shard_assign(b, keys[11], strlen(keys[11]), 1, &d,
					     &eb),
			 STRATA_E_SHARD_LOAD_OVERFLOW);
	assert_string_equal(e.message, eb.message);
	assert_string_equal(e.fix, eb.fix);
	snapshot sb;
	take(b, &sb);
	assert_unchanged(a, &sb);
	assert_int_equal(strata_shard_loads(a)[0], UINT64_MAX);

	/* An empty batch places nothing; *placed may be left out. */
	assert_int_equal(strata_shard_assign_batch(a, items, 0, &placed, NULL),
			 STRATA_OK);
	assert_int_equal(placed, 0);
	items[0].cost = 0;
	assert_int_equal(strata_shard_assign_batch(a, items, 1, NULL, NULL),
			 STRATA_OK);
	assert_unchanged(a, &sb);
	strata_shard_destroy(a);
	strata_shard_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_matches_one_call_at_a_time),
		cmocka_unit_test(test_batch_overflow_stops_at_the_failing_item),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
