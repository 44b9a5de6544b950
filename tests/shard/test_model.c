/* test_model.c - the allocator against the seed's rule written as
 * plainly as possible (a linear scan), over random streams: assignments
 * from zero loads, with seeded loads, with releases, past 64 devices where
 * its groups grow, and the balance invariant at every step (layer: shard).
 * Split from test_allocator.c, which holds the seed's cases and the edges. */
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
/* Property test against a naive model                                      */
/* ------------------------------------------------------------------------ */

/* The seed's rule written as plainly as possible: a linear scan for the
 * least-loaded device. */
typedef struct model {
	uint32_t n;
	uint64_t t;
	uint64_t load[MAX_N];
} model;

static bool model_assign(model *m, uint32_t home, uint64_t cost,
			 uint32_t *device)
{
	if (cost == 0) {
		*device = STRATA_SHARD_NO_DEVICE;
		return true;
	}
	uint32_t least = 0;
	for (uint32_t d = 1; d < m->n; d++)
		if (m->load[d] < m->load[least])
			least = d;
	uint32_t target = home;
	if (m->load[home] > m->load[least] &&
	    m->load[home] - m->load[least] > m->t)
		target = least;
	if (m->load[target] > UINT64_MAX - cost)
		return false;
	m->load[target] += cost;
	*device = target;
	return true;
}

static uint64_t random_cost(uint64_t *x)
{
	switch (below(x, 8)) {
	case 0:
		return 0;
	case 1:
		return 1 + below(x, 4);
	case 2:
		return below(x, (1ull << 40) + 1);
	default:
		return 1 + below(x, 1000);
	}
}

static uint64_t random_threshold(uint64_t *x)
{
	switch (below(x, 5)) {
	case 0:
		return 0;
	case 1:
		return below(x, 50);
	case 2:
		return below(x, 5000);
	case 3:
		return below(x, 1ull << 40);
	default:
		return UINT64_MAX - below(x, 2);
	}
}

static uint64_t max_minus_min(const uint64_t *load, uint32_t n)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	for (uint32_t d = 0; d < n; d++) {
		lo = load[d] < lo ? load[d] : lo;
		hi = load[d] > hi ? load[d] : hi;
	}
	return hi - lo;
}

/* One random stream. mode 0: assignments only, from all-zero loads (the
 * plain invariant applies); 1: seeded first; 2: seeds and releases
 * interleaved (in-flight use). */
static void run_stream(uint64_t seed, int mode, int steps)
{
	uint64_t x = seed;
	model m = {.n = 1 + (uint32_t)below(&x, MAX_N), .t = random_threshold(&x)};
	strata_shard *s = make(m.n, m.t);
	uint64_t widest = 0; /* the model's largest gap after any change */
	if (mode >= 1)
		for (uint32_t i = 0, k = (uint32_t)below(&x, 2 * m.n); i < k; i++) {
			uint32_t d = (uint32_t)below(&x, m.n);
			uint64_t c = below(&x, 1ull << 41);
			m.load[d] += c; /* no overflow: at most 128 x 2^41 */
			assert_int_equal(strata_shard_seed_load(s, d, c, NULL),
					 STRATA_OK);
			uint64_t g = max_minus_min(m.load, m.n);
			widest = g > widest ? g : widest;
		}
	uint64_t initial_gap = max_minus_min(m.load, m.n), largest = 0;
	for (int step = 0; step < steps; step++) {
		uint64_t r = below(&x, 100);
		if (mode == 2 && r < 10) {
			uint32_t d = (uint32_t)below(&x, m.n);
			uint64_t c = below(&x, m.load[d] + 2); /* may exceed */
			strata_status want = c > m.load[d] ? STRATA_E_SHARD_RELEASE
							   : STRATA_OK;
			assert_int_equal(strata_shard_release(s, d, c, NULL), want);
			if (want == STRATA_OK)
				m.load[d] -= c;
		} else if (mode == 2 && r < 15) {
			uint32_t d = (uint32_t)below(&x, m.n);
			uint64_t c = below(&x, 1ull << 40);
			m.load[d] += c;
			assert_int_equal(strata_shard_seed_load(s, d, c, NULL),
					 STRATA_OK);
		} else {
			uint64_t cost = random_cost(&x);
			uint32_t want = 0, got = 999;
			if (r < 40) { /* through the hash */
				uint64_t k = next_u64(&x);
				uint32_t home = home_of(&k, sizeof k, m.n);
				assert_true(model_assign(&m, home, cost, &want));
				assert_int_equal(strata_shard_assign(s, &k, sizeof k,
								     cost, &got, NULL),
						 STRATA_OK);
			} else {
				uint32_t home = (uint32_t)below(&x, m.n);
				assert_true(model_assign(&m, home, cost, &want));
				assert_int_equal(strata_shard_assign_home(s, home, cost,
									  &got, NULL),
						 STRATA_OK);
			}
			if (got != want)
				fail_msg("seed %" PRIu64 " step %d: device %u, model %u",
					 seed, step, got, want);
			largest = cost > largest ? cost : largest;
		}
		assert_memory_equal(strata_shard_loads(s), m.load,
				    m.n * sizeof(uint64_t));
		strata_shard_stats st;
		strata_shard_get_stats(s, &st);
		uint64_t gap = max_minus_min(m.load, m.n);
		assert_int_equal(st.max_load - st.min_load, gap);
		widest = gap > widest ? gap : widest;
		assert_int_equal(st.largest_gap, widest);
		/* The balance invariant: max - min <= T + largest cost, from
		 * balanced loads; from seeded loads the initial gap bounds it. */
		if (mode < 2) {
			uint64_t bound = strata_sat_add_u64(m.t, largest);
			if (initial_gap > bound)
				bound = initial_gap;
			if (gap > bound)
				fail_msg("seed %" PRIu64 " step %d: gap %" PRIu64
					 " > bound %" PRIu64,
					 seed, step, gap, bound);
		}
	}
	strata_shard_destroy(s);
}

static void test_matches_linear_scan_model(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 60; seed++)
		run_stream(seed, 0, 2000);
}

static void test_matches_model_with_seeded_loads(void **state)
{
	(void)state;
	for (uint64_t seed = 1000; seed < 1060; seed++)
		run_stream(seed, 1, 2000);
}

static void test_matches_model_with_releases(void **state)
{
	(void)state;
	for (uint64_t seed = 2000; seed < 2060; seed++)
		run_stream(seed, 2, 2000);
}

/* Past 64 devices the allocator's groups grow past 8 devices and the last
 * group can be partial (src/shard/allocator.c): the same rule as the
 * model, with assignments, seed loads and releases, at device counts that
 * give groups of 16, 16, 32, 64 and 128 devices with 1, 5, 12, 1 and 36
 * left over in the last. */
static void test_matches_model_past_64_devices(void **state)
{
	(void)state;
	static const uint32_t ns[] = {65, 101, 300, 1025, 4132};
	static uint64_t load[4132];
	uint64_t x = 7;
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
		uint32_t n = ns[i];
		uint64_t t = below(&x, 2) ? below(&x, 100) : 0;
		strata_shard *s = make(n, t);
		memset(load, 0, sizeof load);
		for (int step = 0; step < 20000; step++) {
			uint32_t d = (uint32_t)below(&x, n);
			uint64_t r = below(&x, 100), cost = below(&x, 1000);
			if (r < 5) {
				assert_int_equal(strata_shard_seed_load(s, d, cost,
									NULL),
						 STRATA_OK);
				load[d] += cost;
			} else if (r < 15) {
				cost = below(&x, load[d] + 1);
				assert_int_equal(strata_shard_release(s, d, cost,
								      NULL),
						 STRATA_OK);
				load[d] -= cost;
			} else {
				uint32_t least = 0, want = d, got = 0;
				for (uint32_t k = 1; k < n; k++)
					if (load[k] < load[least])
						least = k;
				if (load[d] > load[least] &&
				    load[d] - load[least] > t)
					want = least;
				assert_int_equal(strata_shard_assign_home(s, d, cost,
									  &got, NULL),
						 STRATA_OK);
				if (cost == 0)
					want = STRATA_SHARD_NO_DEVICE;
				else
					load[want] += cost;
				if (got != want)
					fail_msg("n %u step %d: device %u, model %u",
						 n, step, got, want);
			}
		}
		assert_memory_equal(strata_shard_loads(s), load,
				    n * sizeof(uint64_t));
		uint64_t lo = UINT64_MAX;
		for (uint32_t k = 0; k < n; k++)
			lo = load[k] < lo ? load[k] : lo;
		strata_shard_stats st;
		strata_shard_get_stats(s, &st);
		assert_int_equal(st.min_load, lo);
		strata_shard_destroy(s);
	}
}

/* The invariant from zero loads with the threshold and costs the CLI
 * would see, one device count at a time up to 64. */
static void test_balance_invariant_every_step(void **state)
{
	(void)state;
	uint64_t x = 42;
	for (uint32_t n = 1; n <= MAX_N; n++) {
		uint64_t t = below(&x, 100);
		strata_shard *s = make(n, t);
		uint64_t largest = 0;
		for (int i = 0; i < 3000; i++) {
			uint64_t cost = 1 + below(&x, 1ull << (below(&x, 40) + 1));
			uint64_t k = next_u64(&x);
			uint32_t d;
			assert_int_equal(strata_shard_assign(s, &k, sizeof k, cost,
							     &d, NULL),
					 STRATA_OK);
			largest = cost > largest ? cost : largest;
			uint64_t gap = max_minus_min(strata_shard_loads(s), n);
			assert_true(gap <= t + largest);
		}
		strata_shard_stats st;
		strata_shard_get_stats(s, &st);
		assert_true(st.largest_gap <= t + largest);
		assert_int_equal(st.largest_cost, largest);
		strata_shard_destroy(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_linear_scan_model),
		cmocka_unit_test(test_matches_model_with_seeded_loads),
		cmocka_unit_test(test_matches_model_with_releases),
		cmocka_unit_test(test_matches_model_past_64_devices),
		cmocka_unit_test(test_balance_invariant_every_step),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
