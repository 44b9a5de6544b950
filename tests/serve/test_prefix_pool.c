/* test_prefix_pool.c - the prefix cache's block pool: first fit over the
 * chunks' free runs, runs merged when blocks come back, shrinking, empty
 * chunks released, chunk growth under injected allocation failures, and a
 * random take/give/shrink sequence whose blocks never overlap
 * (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/prefix_pool.h"

#define A STRATA_ALIGN

/* Each test runs once on plain memory and once on the CPU backend's host
 * memory (the path CUDA's pinned chunks take). */
static int with_backend(void **state)
{
	strata_backend *b = NULL;
	strata_error err;
	if (strata_backend_cpu_create(NULL, &b, &err))
		return -1;
	*state = b;
	return 0;
}

static int drop_backend(void **state)
{
	strata_backend_destroy(*state);
	return 0;
}

/* Blocks come from the first run that holds them, in address order, each
 * size rounded up to the alignment; nothing fits past the chunk's end. */
static void test_pool_first_fit(void **state)
{
	strata__prefix_pool p;
	strata_error err;
	strata__pool_init(&p, *state);
	assert_null(strata__pool_take(&p, 1)); /* no chunk yet */
	assert_int_equal(strata__pool_grow(&p, 8 * A, &err), STRATA_OK);
	assert_int_equal(p.held_bytes, 8 * A);
	char *a = strata__pool_take(&p, 1);
	char *b = strata__pool_take(&p, 2 * A);
	char *c = strata__pool_take(&p, A + 1);
	assert_non_null(a);
	assert_ptr_equal(b, a + A);
	assert_ptr_equal(c, b + 2 * A);
	assert_int_equal(p.used_bytes, 5 * A);
	assert_null(strata__pool_take(&p, 3 * A + 1)); /* 3 A are left */
	assert_int_equal(p.used_bytes, 5 * A);
	strata__pool_give(&p, b, 2 * A);
	/* the first run that holds it: b's hole, not the tail */
	assert_ptr_equal(strata__pool_take(&p, A), b);
	assert_ptr_equal(strata__pool_take(&p, 2 * A), c + 2 * A);
	assert_ptr_equal(strata__pool_take(&p, A), b + A);
	assert_ptr_equal(strata__pool_take(&p, A), c + 4 * A);
	assert_null(strata__pool_take(&p, 1)); /* full */
	assert_int_equal(p.used_bytes, 8 * A);
	strata__pool_fini(&p);
	assert_int_equal(p.held_bytes, 0);
}

/* A block given back merges with the free runs on both sides, so the room
 * of neighbours freed in any order is one run again. */
static void test_pool_merges_neighbours(void **state)
{
	strata__prefix_pool p;
	strata_error err;
	strata__pool_init(&p, *state);
	assert_int_equal(strata__pool_grow(&p, 4 * A, &err), STRATA_OK);
	char *blk[4];
	for (int i = 0; i < 4; i++)
		assert_non_null(blk[i] = strata__pool_take(&p, A));
	strata__pool_give(&p, blk[0], A);
	strata__pool_give(&p, blk[2], A);
	assert_null(strata__pool_take(&p, 2 * A)); /* two runs of one */
	strata__pool_give(&p, blk[1], A);	    /* joins both sides */
	char *three = strata__pool_take(&p, 3 * A);
	assert_ptr_equal(three, blk[0]);
	strata__pool_give(&p, three, 3 * A);
	strata__pool_give(&p, blk[3], A); /* joins the run before it */
	assert_int_equal(p.used_bytes, 0);
	assert_ptr_equal(strata__pool_take(&p, 4 * A), blk[0]);
	strata__pool_fini(&p);
}

/* Shrinking keeps the block's start and gives its tail back, merged with
 * the free run after it; keeping what rounds alike changes nothing. */
static void test_pool_shrink(void **state)
{
	strata__prefix_pool p;
	strata_error err;
	strata__pool_init(&p, *state);
	assert_int_equal(strata__pool_grow(&p, 8 * A, &err), STRATA_OK);
	char *a = strata__pool_take(&p, 4 * A);
	assert_non_null(a);
	strata__pool_shrink(&p, a, 4 * A, 4 * A - 1);
	assert_int_equal(p.used_bytes, 4 * A);
	strata__pool_shrink(&p, a, 4 * A, A + 1);
	assert_int_equal(p.used_bytes, 2 * A);
	assert_ptr_equal(strata__pool_take(&p, 6 * A), a + 2 * A);
	strata__pool_fini(&p);
}

/* Chunks fill in the order they came; only chunks no block lives in are
 * released, and the bytes held follow. */
static void test_pool_chunks_and_release(void **state)
{
	strata__prefix_pool p;
	strata_error err;
	strata__pool_init(&p, *state);
	assert_int_equal(strata__pool_grow(&p, 2 * A, &err), STRATA_OK);
	assert_int_equal(strata__pool_grow(&p, 4 * A, &err), STRATA_OK);
	assert_int_equal(p.chunk_count, 2);
	assert_int_equal(p.held_bytes, 6 * A);
	char *big = strata__pool_take(&p, 3 * A); /* only the second holds it */
	char *small = strata__pool_take(&p, A);	  /* the first chunk */
	assert_non_null(big);
	assert_non_null(small);
	assert_int_equal(strata__pool_release_empty(&p), 0);
	strata__pool_give(&p, small, A);
	assert_int_equal(strata__pool_release_empty(&p), 2 * A);
	assert_int_equal(p.chunk_count, 1);
	assert_int_equal(p.held_bytes, 4 * A);
	assert_ptr_equal(strata__pool_take(&p, A), big + 3 * A);
	/* a pointer of no chunk is ignored */
	char other[A];
	strata__pool_give(&p, other, A);
	assert_int_equal(p.used_bytes, 4 * A);
	strata__pool_fini(&p);
	assert_int_equal(p.chunk_count, 0);
}

/* Growing fails cleanly at each allocation (STYLE.md's OOM loop): the
 * pool as it was; a chunk size that is no multiple of the alignment is
 * refused. */
static void test_pool_grow_oom(void **state)
{
	strata__prefix_pool p;
	strata_error err;
	strata__pool_init(&p, *state);
	assert_int_equal(strata__pool_grow(&p, A + 1, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata__pool_grow(&p, 0, &err), STRATA_E_INVALID_ARG);
	long n = 0;
	for (;; n++) {
		strata_alloc_fail_after(n);
		strata_status st = strata__pool_grow(&p, 16 * A, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_int_equal(p.held_bytes, 0);
		assert_int_equal(p.chunk_count, 0);
		assert_null(strata__pool_take(&p, 1));
	}
	assert_int_equal(n, 2); /* the chunk's record, its memory */
	assert_int_equal(p.held_bytes, 16 * A);
	strata__pool_fini(&p);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random takes, gives and shrinks over three chunks: every block stays
 * whole (its fill intact, so no two blocks overlap and no free run's
 * record lands in one), the bytes used are the blocks' rounded sizes, and
 * once all come back each chunk is one run again. */
static void test_pool_random_blocks_stay_apart(void **state)
{
	enum { SLOTS = 40 };
	strata__prefix_pool p;
	strata_error err;
	strata__pool_init(&p, *state);
	for (int i = 0; i < 3; i++)
		assert_int_equal(strata__pool_grow(&p, 64 * A, &err),
				 STRATA_OK);
	unsigned char *blk[SLOTS] = {0};
	uint64_t size[SLOTS] = {0};
	uint64_t seed = 0x9e3779b97f4a7c15ull, used = 0;
	for (int step = 0; step < 4000; step++) {
		uint32_t i = (uint32_t)(rng(&seed) % SLOTS);
		if (!blk[i]) {
			uint64_t want = 1 + rng(&seed) % (6 * A);
			blk[i] = strata__pool_take(&p, want);
			if (blk[i]) {
				size[i] = want;
				used += (want + A - 1) / A * A;
				memset(blk[i], (int)i, want);
			}
		} else if (rng(&seed) % 3 == 0) {
			uint64_t keep = rng(&seed) % size[i];
			if (keep == 0)
				keep = 1;
			strata__pool_shrink(&p, blk[i], size[i], keep);
			used -= (size[i] + A - 1) / A * A -
				(keep + A - 1) / A * A;
			size[i] = keep;
		} else {
			for (uint64_t k = 0; k < size[i]; k++)
				assert_int_equal(blk[i][k], i);
			strata__pool_give(&p, blk[i], size[i]);
			used -= (size[i] + A - 1) / A * A;
			blk[i] = NULL;
		}
		assert_int_equal(p.used_bytes, used);
	}
	for (uint32_t i = 0; i < SLOTS; i++)
		if (blk[i]) {
			for (uint64_t k = 0; k < size[i]; k++)
				assert_int_equal(blk[i][k], i);
			strata__pool_give(&p, blk[i], size[i]);
		}
	assert_int_equal(p.used_bytes, 0);
	for (int i = 0; i < 3; i++)
		assert_non_null(strata__pool_take(&p, 64 * A));
	strata__pool_fini(&p);
}

#define BOTH(fn)                                                               \
	cmocka_unit_test(fn),                                                  \
		cmocka_unit_test_setup_teardown(fn, with_backend, drop_backend)

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOTH(test_pool_first_fit),
		BOTH(test_pool_merges_neighbours),
		BOTH(test_pool_shrink),
		BOTH(test_pool_chunks_and_release),
		BOTH(test_pool_grow_oom),
		BOTH(test_pool_random_blocks_stay_apart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
