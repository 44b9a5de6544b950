/* shard_fixture.h - what the allocator's test files share: a snapshot of
 * everything observable about an allocator (to prove a call changed
 * nothing, or that two allocators agree) and a small deterministic random
 * stream, an allocator made or a home found with the outcome asserted.
 * Include after cmocka.h and strata/shard.h, with MAX_N defined. */
#ifndef STRATA_TESTS_SHARD_FIXTURE_H
#define STRATA_TESTS_SHARD_FIXTURE_H

/* Everything observable about an allocator, to prove a call changed
 * nothing. Buffers are zeroed so padding compares equal. */
typedef struct snapshot {
	uint64_t loads[MAX_N];
	strata_shard_stats st;
	strata_shard_device_stats dev[MAX_N];
} snapshot;

static inline void take(const strata_shard *s, snapshot *out)
{
	memset(out, 0, sizeof *out);
	uint32_t n = strata_shard_device_count(s);
	assert_true(n <= MAX_N);
	memcpy(out->loads, strata_shard_loads(s), n * sizeof(uint64_t));
	strata_shard_get_stats(s, &out->st);
	for (uint32_t d = 0; d < n; d++)
		assert_int_equal(strata_shard_get_device_stats(s, d, &out->dev[d],
							       NULL),
				 STRATA_OK);
}

static inline void assert_unchanged(const strata_shard *s, const snapshot *before)
{
	snapshot now;
	take(s, &now);
	assert_memory_equal(&now, before, sizeof now);
}

/* splitmix64: a small deterministic generator for the random streams. */
static inline uint64_t next_u64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t below(uint64_t *x, uint64_t n)
{
	return n ? next_u64(x) % n : 0;
}

static inline strata_shard *make(uint32_t n, uint64_t t)
{
	strata_shard *s = NULL;
	strata_error e;
	assert_int_equal(strata_shard_create(n, t, &s, &e), STRATA_OK);
	assert_non_null(s);
	return s;
}

static inline uint32_t home_of(const void *key, size_t len, uint32_t n)
{
	uint32_t d;
	assert_int_equal(strata_shard_home(key, len, n, &d, NULL), STRATA_OK);
	return d;
}

#endif
