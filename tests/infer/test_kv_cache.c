/* test_kv_cache.c - the KV cache object on its own: its bytes, its two
 * blocks of an arena (refused when the arena has no room, given back when
 * destroyed), positions per sequence, and save / restore of one sequence
 * leaving the others alone (layer: infer tests). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/forward_internal.h"

#define LAYERS 2u
#define KV_DIM 8u
#define CONTEXT 6u
#define SEQS 3u

typedef struct fixture {
	strata_backend *b;
	strata_compute *c;
	strata_arena *arena;
} fixture;

static void open_fixture(fixture *x, uint64_t arena_bytes)
{
	strata_error err;
	assert_int_equal(strata_backend_cpu_create(NULL, &x->b, &err),
			 STRATA_OK);
	assert_int_equal(strata_compute_create_on(x->b, 1, &x->c, &err),
			 STRATA_OK);
	assert_int_equal(strata_arena_create(x->b, STRATA_ARENA_DEVICE,
					     arena_bytes, "test arena",
					     &x->arena, &err),
			 STRATA_OK);
}

static void close_fixture(fixture *x)
{
	strata_arena_destroy(x->arena);
	strata_compute_destroy(x->c);
	strata_backend_destroy(x->b);
}

static const strata_kv_cache_shape shape = {LAYERS, KV_DIM, CONTEXT, SEQS,
						   STRATA_WEIGHT_F32};

static void test_blocks_come_from_the_arena_and_go_back(void **state)
{
	(void)state;
	strata_error err;
	uint64_t bytes;
	assert_int_equal(strata_kv_cache_keys_bytes(&shape, &bytes, &err),
			 STRATA_OK);
	assert_true(bytes == (uint64_t)SEQS * LAYERS * CONTEXT * KV_DIM * 4);
	uint64_t block;
	assert_int_equal(strata_checked_align(bytes, &block, "kv", &err),
			 STRATA_OK);
	fixture x;
	open_fixture(&x, 2 * block);
	strata_kv_cache *kv;
	assert_int_equal(strata_kv_cache_create(&shape, x.arena, x.c, &kv,
						&err),
			 STRATA_OK);
	strata_arena_stats s;
	strata_arena_get_stats(x.arena, &s);
	assert_true(s.live_blocks == 2 && s.used_bytes == 2 * block);
	assert_true(strata_kv_cache_get_shape(kv)->sequences == SEQS);
	for (uint32_t q = 0; q < SEQS; q++)
		assert_int_equal(strata_kv_cache_position(kv, q), 0);
	strata_kv_cache_destroy(kv);
	strata_arena_get_stats(x.arena, &s);
	assert_true(s.live_blocks == 0 && s.used_bytes == 0);
	/* no room for the values: refused, the keys' block given back */
	strata_arena *small;
	assert_int_equal(strata_arena_create(x.b, STRATA_ARENA_DEVICE,
					     block, "small arena", &small,
					     &err),
			 STRATA_OK);
	kv = NULL;
	assert_int_equal(strata_kv_cache_create(&shape, small, x.c, &kv, &err),
			 STRATA_E_RES_BUDGET);
	assert_null(kv);
	strata_arena_get_stats(small, &s);
	assert_true(s.live_blocks == 0);
	strata_arena_destroy(small);
	close_fixture(&x);
}

static void test_bad_shapes_are_refused(void **state)
{
	(void)state;
	strata_error err;
	uint64_t bytes;
	strata_kv_cache_shape bad = shape;
	bad.sequences = 0;
	assert_int_equal(strata_kv_cache_keys_bytes(&bad, &bytes, &err),
			 STRATA_E_INVALID_ARG);
	bad.sequences = STRATA_FORWARD_MAX_SEQUENCES + 1;
	assert_int_equal(strata_kv_cache_keys_bytes(&bad, &bytes, &err),
			 STRATA_E_INVALID_ARG);
	bad = (strata_kv_cache_shape){UINT32_MAX, UINT32_MAX, UINT32_MAX, 256,
				      STRATA_WEIGHT_F32};
	assert_int_equal(strata_kv_cache_keys_bytes(&bad, &bytes, &err),
			 STRATA_E_OVERFLOW);
	assert_non_null(strstr(err.message, "key cache"));
}

/* Fills sequence seq's cached rows with seq * 1000 + index, as positions
 * 0 .. n-1 of every layer. */
static void fill(strata_kv_cache *kv, uint32_t seq, uint32_t n)
{
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t i = 0; i < n * KV_DIM; i++) {
			((float *)strata__kv_keys(kv, seq, l, 0))[i] =
				(float)(seq * 1000 + l * 100 + i);
			((float *)strata__kv_values(kv, seq, l, 0))[i] =
				-(float)(seq * 1000 + l * 100 + i);
		}
	kv->pos[seq] = n;
}

static void test_save_and_restore_one_sequence(void **state)
{
	(void)state;
	strata_error err;
	uint64_t bytes, part, all;
	assert_int_equal(strata_kv_cache_keys_bytes(&shape, &bytes, &err),
			 STRATA_OK);
	fixture x;
	open_fixture(&x, 2 * bytes + 2 * STRATA_ALIGN);
	strata_kv_cache *kv;
	assert_int_equal(strata_kv_cache_create(&shape, x.arena, x.c, &kv,
						&err),
			 STRATA_OK);
	fill(kv, 1, 5);
	fill(kv, 2, 3);
	assert_int_equal(strata_kv_cache_part_bytes(kv, 4, &part, &err),
			 STRATA_OK);
	assert_int_equal(strata_kv_cache_bytes(kv, 4, &all, &err), STRATA_OK);
	assert_true(part == 4 * KV_DIM * 4 && all == 2 * LAYERS * part);
	float saved[2 * LAYERS][4 * KV_DIM];
	float *parts[2 * LAYERS];
	for (uint32_t i = 0; i < 2 * LAYERS; i++)
		parts[i] = saved[i];
	assert_int_equal(strata_kv_cache_save(kv, 1, 4, parts, 2 * LAYERS,
					      part, &err),
			 STRATA_OK);
	assert_true(saved[2][3] == 1000.0f + 100 + 3); /* layer 1's keys */
	assert_true(saved[3][3] == -(1000.0f + 100 + 3));
	/* past the cached count, a bad count or sequence: refused */
	assert_int_equal(strata_kv_cache_save(kv, 2, 4, parts, 2 * LAYERS,
					      part, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_kv_cache_save(kv, 1, 4, parts, 3, part, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_kv_cache_save(kv, SEQS, 4, parts, 2 * LAYERS,
					      part, &err),
			 STRATA_E_INVALID_ARG);
	/* into sequence 0: its rows become sequence 1's, 2 is untouched */
	const float *const *in = (const float *const *)parts;
	assert_int_equal(strata_kv_cache_restore(kv, 0, in, 2 * LAYERS, 4, 3,
						 &err),
			 STRATA_OK);
	assert_int_equal(strata_kv_cache_position(kv, 0), 3);
	assert_true(((float *)strata__kv_keys(kv, 0, 1, 2))[1] ==
		    1000.0f + 100 + 17);
	assert_int_equal(strata_kv_cache_position(kv, 2), 3);
	assert_true(((float *)strata__kv_keys(kv, 2, 0, 0))[0] == 2000.0f);
	assert_int_equal(strata_kv_cache_restore(kv, 0, in, 2 * LAYERS, 4, 5,
						 &err),
			 STRATA_E_INVALID_ARG);
	strata_kv_cache_reset(kv, 0);
	assert_int_equal(strata_kv_cache_position(kv, 0), 0);
	strata_kv_cache_destroy(kv);
	close_fixture(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks_come_from_the_arena_and_go_back),
		cmocka_unit_test(test_bad_shapes_are_refused),
		cmocka_unit_test(test_save_and_restore_one_sequence),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
