/* test_sizing.c - seed 001's exact sizing: static bytes plus the largest
 * window of `depth` consecutive units per group, every seed case, a random
 * property test against a dense sliding window, and the OOM loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/plan.h"

/* A parameter as the seed's tests write it. */
typedef struct tparam {
	const char *name;
	const char *group; /* NULL: static */
	uint64_t unit;
	uint64_t bytes;
} tparam;

typedef struct bytes_ctx {
	const tparam *t;
	size_t calls;
} bytes_ctx;

static strata_status bytes_of(void *ctx, size_t i, uint64_t *out,
			      strata_error *err)
{
	(void)err;
	bytes_ctx *c = ctx;
	c->calls++;
	*out = c->t[i].bytes;
	return STRATA_OK;
}

static strata_plan_param *params_of(const tparam *t, size_t n)
{
	strata_plan_param *p = calloc(n ? n : 1, sizeof *p);
	for (size_t i = 0; i < n; i++) {
		p[i].name = t[i].name;
		if (t[i].group) {
			p[i].owner.kind = STRATA_OWNER_UNIT;
			p[i].owner.group = t[i].group;
			p[i].owner.group_len = strlen(t[i].group);
			p[i].owner.unit = t[i].unit;
		} else {
			p[i].owner.kind = STRATA_OWNER_STATIC;
			p[i].owner.role = "input";
			p[i].owner.role_len = 5;
		}
	}
	return p;
}

static strata_status size(const tparam *t, size_t n,
			  strata_residency_mode mode, uint64_t depth,
			  const char *const *excl, size_t n_excl,
			  strata_plan_weights *w, strata_error *err)
{
	strata_plan_param *p = params_of(t, n);
	bytes_ctx ctx = {.t = t};
	strata_status s = strata_plan_size(p, n, bytes_of, &ctx, excl, n_excl,
					   mode, depth, w, err);
	free(p);
	return s;
}

#define N(a) (sizeof(a) / sizeof *(a))

/* seed 001: sizing_keeps_group_windows_and_excluded_parameters_exact */
static const tparam seed_layout[] = {
	{"embedding", NULL, 0, 7},
	{"a", "decoder", 0, 2},
	{"b", "decoder", 1, 3},
	{"c", "decoder", 1, 5},
	{"d", "decoder", 2, 11},
	{"e", "vision", 0, 13},
	{"f", "vision", 2, 17},
	{"bank", "decoder", UINT64_MAX, UINT64_MAX},
};

static void sizing_keeps_group_windows_and_excluded_parameters_exact(
	void **state)
{
	(void)state;
	const char *excl[] = {"bank"};
	strata_plan_weights w;
	strata_error err;
	assert_int_equal(size(seed_layout, N(seed_layout), STRATA_RESIDENCY_HOST,
			      2, excl, 1, &w, &err),
			 STRATA_OK);
	assert_true(w.static_bytes == 7 && w.window_bytes == 19 &&
		    w.required_bytes == 26 && w.depth == 2);
	assert_int_equal(size(seed_layout, N(seed_layout), STRATA_RESIDENCY_HOST,
			      3, excl, 1, &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes == 30);
	assert_int_equal(size(seed_layout, N(seed_layout), STRATA_RESIDENCY_DISK,
			      0, excl, 1, &w, &err),
			 STRATA_OK);
	assert_true(w.depth == 2);
	/* resident holds every unit of every group */
	assert_int_equal(size(seed_layout, N(seed_layout),
			      STRATA_RESIDENCY_RESIDENT, 0, excl, 1, &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes == 2 + 3 + 5 + 11 + 13 + 17);
	assert_true(w.depth == 3 + 3);
	assert_true(w.required_bytes == 7 + 51);
}

static strata_status must_not_be_called(void *ctx, size_t i, uint64_t *out,
					strata_error *err)
{
	(void)ctx;
	(void)i;
	(void)out;
	(void)err;
	fail_msg("excluded tensor's bytes were evaluated");
	return STRATA_E_INTERNAL;
}

static void excluded_parameters_do_not_evaluate_byte_geometry(void **state)
{
	(void)state;
	strata_plan_param p = {.name = "bank",
			       .owner = {.kind = STRATA_OWNER_UNIT,
					 .group = "decoder",
					 .group_len = 7,
					 .unit = UINT64_MAX}};
	const char *excl[] = {"bank"};
	strata_plan_weights w;
	strata_error err;
	assert_int_equal(strata_plan_size(&p, 1, must_not_be_called, NULL, excl,
					  1, STRATA_RESIDENCY_HOST, 3, &w, &err),
			 STRATA_OK);
	assert_true(w.required_bytes == 0);
	/* a glob excludes just the same */
	const char *glob[] = {"ba*"};
	assert_int_equal(strata_plan_size(&p, 1, must_not_be_called, NULL, glob,
					  1, STRATA_RESIDENCY_HOST, 3, &w, &err),
			 STRATA_OK);
}

static void sparse_unit_indices_do_not_expand_all_intervening_positions(
	void **state)
{
	(void)state;
	const tparam t[] = {{"a", "decoder", 0, 11},
			    {"b", "decoder", UINT64_MAX - 1, 17}};
	strata_plan_weights w;
	strata_error err;
	assert_int_equal(size(t, 2, STRATA_RESIDENCY_HOST, 2, NULL, 0, &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes == 17);
	assert_int_equal(size(t, 2, STRATA_RESIDENCY_HOST, UINT64_MAX, NULL, 0,
			      &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes == 28);
	/* the example: indices 0 and 2^63 */
	const tparam u[] = {{"a", "g", 0, 5},
			    {"b", "g", UINT64_C(1) << 63, 6}};
	assert_int_equal(size(u, 2, STRATA_RESIDENCY_HOST, UINT64_C(1) << 63,
			      NULL, 0, &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes == 6);
	assert_int_equal(size(u, 2, STRATA_RESIDENCY_HOST,
			      (UINT64_C(1) << 63) + 1, NULL, 0, &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes == 11);
	assert_int_equal(size(u, 2, STRATA_RESIDENCY_DISK, 0, NULL, 0, &w, &err),
			 STRATA_OK);
	assert_true(w.depth == 2 && w.window_bytes == 6);
}

static void sparse_windows_equal_the_dense_geometry_for_every_small_occupancy(
	void **state)
{
	(void)state;
	for (unsigned occupied = 0; occupied < 256; occupied++) {
		uint64_t bytes[8];
		tparam t[8];
		size_t n = 0;
		for (unsigned u = 0; u < 8; u++) {
			bytes[u] = (occupied & (1u << u)) ? u + 1 : 0;
			if (bytes[u])
				t[n++] = (tparam){"weight", "decoder", u,
						  bytes[u]};
		}
		for (uint64_t depth = 1; depth <= 10; depth++) {
			uint64_t expected = 0;
			for (size_t start = 0; start < 8; start++) {
				uint64_t sum = 0;
				for (size_t k = start;
				     k < 8 && k < start + depth; k++)
					sum += bytes[k];
				if (sum > expected)
					expected = sum;
			}
			strata_plan_weights w;
			strata_error err;
			assert_int_equal(size(t, n, STRATA_RESIDENCY_HOST, depth,
					      NULL, 0, &w, &err),
					 STRATA_OK);
			assert_true(w.window_bytes == expected);
		}
	}
}

static void every_byte_and_unit_count_overflow_is_rejected(void **state)
{
	(void)state;
	const struct {
		tparam t[2];
		size_t n;
		const char *what;
	} cases[] = {
		{{{"a", NULL, 0, UINT64_MAX}, {"b", NULL, 0, 1}}, 2,
		 "static bytes"},
		{{{"a", "g", 0, UINT64_MAX}, {"b", "g", 0, 1}}, 2,
		 "unit bytes"},
		{{{"a", "g", 0, UINT64_MAX}, {"b", "g", 1, 1}}, 2,
		 "window bytes"},
		{{{"a", NULL, 0, UINT64_MAX}, {"b", "g", 0, 1}}, 2,
		 "total bytes"},
		{{{"a", "g", UINT64_MAX, 1}}, 1, "group unit count"},
		{{{"a", "g", UINT64_MAX - 1, 1}, {"b", "h", 0, 1}}, 2,
		 "total unit count"},
	};
	for (size_t i = 0; i < N(cases); i++) {
		strata_plan_weights w = {.depth = 99};
		strata_error err;
		assert_int_equal(size(cases[i].t, cases[i].n,
				      STRATA_RESIDENCY_HOST, 2, NULL, 0, &w,
				      &err),
				 STRATA_E_OVERFLOW);
		char want[64];
		snprintf(want, sizeof want, "%s overflowed", cases[i].what);
		if (!strstr(err.message, want))
			fail_msg("case %zu: '%s' lacks '%s'", i, err.message,
				 want);
		assert_true(w.depth == 99); /* untouched on error */
	}
	/* resident's sum of all groups names the window too */
	const tparam r[] = {{"a", "g", 0, UINT64_MAX}, {"b", "h", 0, 1}};
	strata_plan_weights w;
	strata_error err;
	assert_int_equal(size(r, 2, STRATA_RESIDENCY_HOST, 2, NULL, 0, &w, &err),
			 STRATA_OK);
	assert_int_equal(size(r, 2, STRATA_RESIDENCY_RESIDENT, 0, NULL, 0, &w,
			      &err),
			 STRATA_E_OVERFLOW);
	assert_non_null(strstr(err.message, "window bytes overflowed"));
}

/* Brute force over a dense array of positions, for small layouts. */
static uint64_t dense_window(const tparam *t, size_t n, const char *group,
			     uint64_t depth)
{
	uint64_t pos[32] = {0};
	for (size_t i = 0; i < n; i++)
		if (t[i].group && !strcmp(t[i].group, group))
			pos[t[i].unit] += t[i].bytes;
	uint64_t best = 0;
	for (uint64_t s = 0; s < 32; s++) {
		uint64_t sum = 0;
		for (uint64_t k = s; k < 32 && k < s + depth; k++)
			sum += pos[k];
		if (sum > best)
			best = sum;
	}
	return best;
}

static void random_layouts_match_a_dense_sliding_window(void **state)
{
	(void)state;
	static const char *const groups[] = {"model", "vision", "blk"};
	srand(12345);
	for (int round = 0; round < 2000; round++) {
		tparam t[24];
		size_t n = (size_t)(rand() % 24);
		uint64_t st = 0;
		for (size_t i = 0; i < n; i++) {
			bool stat = rand() % 5 == 0;
			t[i] = (tparam){"w", stat ? NULL : groups[rand() % 3],
					(uint64_t)(rand() % 32),
					(uint64_t)(rand() % 1000)};
			if (stat)
				st += t[i].bytes;
		}
		uint64_t depth = (uint64_t)(rand() % 34);
		uint64_t expected = 0;
		for (size_t g = 0; g < 3; g++) {
			uint64_t d = dense_window(t, n, groups[g], depth);
			if (d > expected)
				expected = d;
		}
		strata_plan_weights w;
		strata_error err;
		assert_int_equal(size(t, n, STRATA_RESIDENCY_HOST, depth, NULL,
				      0, &w, &err),
				 STRATA_OK);
		assert_true(w.static_bytes == st);
		assert_true(w.window_bytes == expected);
		assert_true(w.required_bytes == st + expected);
	}
}

static void many_sparse_tensors_cost_follows_tensor_count(void **state)
{
	(void)state;
	/* 100000 tensors at indices spread over the whole u64 range: a dense
	 * array would be impossible, so finishing at all is the check */
	size_t n = 100000;
	tparam *t = calloc(n, sizeof *t);
	for (size_t i = 0; i < n; i++)
		t[i] = (tparam){"w", "g", (uint64_t)i * UINT64_C(184467440737095),
				1};
	strata_plan_weights w;
	strata_error err;
	assert_int_equal(size(t, n, STRATA_RESIDENCY_HOST, UINT64_C(1) << 60,
			      NULL, 0, &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes > 0 && w.window_bytes < n);
	free(t);
}

static void allocation_failures_are_reported_and_leak_nothing(void **state)
{
	(void)state;
	strata_plan_param *p = params_of(seed_layout, N(seed_layout));
	const char *excl[] = {"bank"};
	for (long k = 0;; k++) {
		bytes_ctx ctx = {.t = seed_layout};
		strata_plan_layout *l = NULL;
		strata_error err;
		strata_alloc_fail_after(k);
		strata_status s = strata_plan_layout_create(
			p, N(seed_layout), bytes_of, &ctx, excl, 1, &l, &err);
		strata_alloc_fail_after(-1);
		if (s == STRATA_OK) {
			strata_plan_weights w;
			assert_int_equal(strata_plan_layout_weights(
						 l, STRATA_RESIDENCY_HOST, 2, &w,
						 &err),
					 STRATA_OK);
			assert_true(w.required_bytes == 26);
			strata_plan_layout_destroy(l);
			assert_true(k > 0);
			break;
		}
		assert_int_equal(s, STRATA_E_NOMEM);
		assert_null(l);
	}
	free(p);
}

static void layout_info_counts_units_and_exclusions(void **state)
{
	(void)state;
	strata_plan_param *p = params_of(seed_layout, N(seed_layout));
	bytes_ctx ctx = {.t = seed_layout};
	const char *excl[] = {"bank"};
	strata_plan_layout *l;
	strata_error err;
	assert_int_equal(strata_plan_layout_create(p, N(seed_layout), bytes_of,
						   &ctx, excl, 1, &l, &err),
			 STRATA_OK);
	assert_int_equal(ctx.calls, N(seed_layout) - 1);
	strata_plan_layout_info info;
	strata_plan_layout_get_info(l, &info);
	assert_true(info.static_bytes == 7 && info.unit_count == 6 &&
		    info.span == 3 && info.groups == 2 &&
		    info.occupied_units == 5 && info.all_units_bytes == 51 &&
		    info.largest_unit_bytes == 17 && info.sized_tensors == 7 &&
		    info.excluded_tensors == 1);
	uint64_t win;
	assert_int_equal(strata_plan_layout_window(l, 0, &win, &err), STRATA_OK);
	assert_true(win == 0);
	assert_int_equal(strata_plan_layout_window(l, 1, &win, &err), STRATA_OK);
	assert_true(win == 17);
	strata_plan_weights w;
	assert_int_equal(strata_plan_layout_weights(l, STRATA_RESIDENCY_AUTO, 0,
						    &w, &err),
			 STRATA_E_INVALID_ARG);
	strata_plan_layout_destroy(l);
	free(p);
}

/* issue 17: a layout with slots keeps the seed's figures of the tensors'
 * own bytes and, apart, the sums of their 256-byte slots (what a region
 * holds); a slot past 2^64 - 1 is named. */
static void aligned_layout_keeps_the_seed_figures_exact(void **state)
{
	(void)state;
	const char *excl[] = {"bank"};
	strata_plan_param *p = params_of(seed_layout, N(seed_layout));
	bytes_ctx ctx = {.t = seed_layout};
	strata_plan_layout *l = NULL;
	strata_error err;
	assert_int_equal(strata_plan_layout_create_aligned(
				 p, N(seed_layout), bytes_of, &ctx, excl, 1,
				 256, &l, &err),
			 STRATA_OK);
	strata_plan_weights w;
	assert_int_equal(strata_plan_layout_weights(l, STRATA_RESIDENCY_HOST, 2,
						    &w, &err),
			 STRATA_OK);
	assert_true(w.static_bytes == 7 && w.window_bytes == 19 &&
		    w.required_bytes == 26 && w.depth == 2);
	uint64_t win;
	assert_int_equal(strata_plan_layout_window(l, 2, &win, &err), STRATA_OK);
	assert_true(win == 3 * 256); /* b, c, d */
	assert_int_equal(strata_plan_layout_exact_window_of(l, 3, NULL, &win,
							    &err),
			 STRATA_OK);
	assert_true(win == 30);
	strata_plan_layout_info info;
	strata_plan_layout_get_info(l, &info);
	assert_true(info.static_bytes == 256 && info.exact_static_bytes == 7);
	assert_true(info.all_units_bytes == 6 * 256 &&
		    info.exact_all_units_bytes == 51);
	strata_plan_unit u;
	strata_plan_layout_unit_at(l, 1, &u); /* decoder 1: b + c */
	assert_true(u.bytes == 512 && u.exact_bytes == 8);
	assert_int_equal(strata_plan_layout_weights(l, STRATA_RESIDENCY_RESIDENT,
						    0, &w, &err),
			 STRATA_OK);
	assert_true(w.window_bytes == 51 && w.depth == 6);
	strata_plan_layout_destroy(l);
	/* an unexcluded bank of 2^64 - 1 bytes has no slot */
	l = NULL;
	assert_int_equal(strata_plan_layout_create_aligned(
				 p, N(seed_layout), bytes_of, &ctx, NULL, 0,
				 256, &l, &err),
			 STRATA_E_OVERFLOW);
	assert_null(l);
	assert_non_null(strstr(err.message, "tensor device bytes"));
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			sizing_keeps_group_windows_and_excluded_parameters_exact),
		cmocka_unit_test(excluded_parameters_do_not_evaluate_byte_geometry),
		cmocka_unit_test(
			sparse_unit_indices_do_not_expand_all_intervening_positions),
		cmocka_unit_test(
			sparse_windows_equal_the_dense_geometry_for_every_small_occupancy),
		cmocka_unit_test(every_byte_and_unit_count_overflow_is_rejected),
		cmocka_unit_test(random_layouts_match_a_dense_sliding_window),
		cmocka_unit_test(many_sparse_tensors_cost_follows_tensor_count),
		cmocka_unit_test(allocation_failures_are_reported_and_leak_nothing),
		cmocka_unit_test(layout_info_counts_units_and_exclusions),
		cmocka_unit_test(aligned_layout_keeps_the_seed_figures_exact),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
