/* test_throughput.c - throughput against --batch (issue 19): each point
 * is the plan of the same inputs at that batch (its KV cache the batch's,
 * its selection its own); in a streamed mode one pass of the weights serves
 * the whole batch, so the bytes over the link per step stay the same and
 * tokens per second grow with the batch; a batch whose KV cache no longer
 * fits is a point that does not fit; the best batch is the fastest that
 * fits; the JSON form has a key per field (layer: plan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "strata/plan.h"
#include "planner_fixture.h"

static size_t curve_of(const strata_plan_options *o, uint64_t max_batch,
		       strata_plan_batch_point *pts)
{
	fixture *f = fixture_make(8);
	strata_plan *p = NULL;
	strata_error err;
	assert_int_equal(plan_bf16(f, o, &p, &err), STRATA_OK);
	size_t n = 0;
	assert_int_equal(strata_plan_batch_curve(p, max_batch, pts,
						 STRATA_PLAN_BATCH_POINTS_MAX,
						 &n, &err),
			 STRATA_OK);
	strata_plan_destroy(p);
	fixture_free(f);
	return n;
}

static void test_points_are_each_batchs_own_plan(void **state)
{
	(void)state;
	strata_plan_options o = opts(2 * GiB, 2 * GiB);
	o.shape.batch = 3; /* its own batch is a point too */
	strata_plan_batch_point pts[STRATA_PLAN_BATCH_POINTS_MAX];
	size_t n = curve_of(&o, 100, pts);
	static const uint64_t want[] = {1, 2, 3, 4, 8, 16, 32, 64, 100};
	assert_int_equal(n, sizeof want / sizeof *want);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(pts[i].batch, want[i]);
		assert_true(pts[i].fits);
		assert_string_equal(pts[i].selected, "resident");
		/* the KV cache is the batch's: KV_CPU per sequence */
		assert_int_equal(pts[i].kv_cache_bytes, want[i] * KV_CPU);
		assert_true(pts[i].decode_ms > 0);
		double rate = (double)want[i] * 1e3 / pts[i].decode_ms;
		assert_true(pts[i].tokens_per_second > rate * (1 - 1e-12) &&
			    pts[i].tokens_per_second < rate * (1 + 1e-12));
	}
}

static void test_streamed_pass_serves_the_whole_batch(void **state)
{
	(void)state;
	strata_plan_options o = opts(64 * MiB, 2 * GiB);
	o.mode = STRATA_RESIDENCY_HOST;
	o.host_depth = 2;
	strata_plan_batch_point pts[STRATA_PLAN_BATCH_POINTS_MAX];
	size_t n = curve_of(&o, 8, pts);
	assert_int_equal(n, 4); /* 1 2 4 8 */
	for (size_t i = 0; i < n; i++) {
		assert_true(pts[i].fits);
		assert_string_equal(pts[i].selected, "host:2");
		/* the weights cross the link once a step, whatever the batch */
		assert_int_equal(pts[i].streamed_bytes, pts[0].streamed_bytes);
		assert_true(pts[i].streamed_bytes > 0);
		if (i == 0)
			continue;
		assert_true(pts[i].tokens_per_second >
			    pts[i - 1].tokens_per_second);
		/* a step of twice the sequences costs less than two steps */
		assert_true(pts[i].decode_ms < 2 * pts[i - 1].decode_ms);
	}
	assert_int_equal(strata_plan_batch_best(pts, n), 8);
}

static void test_batch_past_the_budget_does_not_fit(void **state)
{
	(void)state;
	/* room for the resident weights and about four sequences' KV */
	strata_plan_options o = opts(RESIDENT_DEVICE + 4 * KV_CPU, 2 * GiB);
	o.mode = STRATA_RESIDENCY_RESIDENT;
	strata_plan_batch_point pts[STRATA_PLAN_BATCH_POINTS_MAX];
	size_t n = curve_of(&o, 16, pts);
	assert_int_equal(n, 5); /* 1 2 4 8 16 */
	assert_true(pts[0].fits && pts[1].fits);
	assert_false(pts[3].fits);
	assert_false(pts[4].fits);
	assert_string_equal(pts[4].selected, "");
	uint64_t best = strata_plan_batch_best(pts, n);
	assert_true(best == 2 || best == 4);
	for (size_t i = 0; i < n; i++)
		if (pts[i].batch > best)
			assert_true(!pts[i].fits ||
				    pts[i].tokens_per_second <=
					    pts[best == 2 ? 1 : 2]
						    .tokens_per_second);
	assert_int_equal(strata_plan_batch_best(pts + 3, 2), 0);
}

static void test_curve_json_has_every_field(void **state)
{
	(void)state;
	strata_plan_options o = opts(2 * GiB, 2 * GiB);
	strata_plan_batch_point pts[STRATA_PLAN_BATCH_POINTS_MAX];
	size_t n = curve_of(&o, 4, pts);
	pts[n - 1].fits = false; /* a point that does not fit: null name */
	strata_json j;
	strata_json_init(&j, false);
	strata_plan_batch_curve_json(pts, n, &j);
	strata_error err;
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	json_error_t je;
	json_t *a = json_loads(j.buf, 0, &je);
	assert_non_null(a);
	assert_int_equal(json_array_size(a), n);
	static const char *const keys[] = {
		"batch", "fits", "selected", "predicted_decode_ms",
		"tokens_per_second", "device_bytes", "host_bytes",
		"kv_cache_bytes", "streamed_bytes"};
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
			assert_non_null(json_object_get(json_array_get(a, i),
							keys[k]));
	assert_true(json_is_null(json_object_get(json_array_get(a, n - 1),
						 "selected")));
	assert_int_equal(json_integer_value(json_object_get(
				 json_array_get(a, 1), "batch")),
			 2);
	json_decref(a);
	strata_json_fini(&j);
}

static void test_curve_refuses_bad_arguments(void **state)
{
	(void)state;
	strata_plan_batch_point pts[4];
	size_t n = 9;
	strata_error err;
	assert_int_equal(strata_plan_batch_curve(NULL, 4, pts, 4, &n, &err),
			 STRATA_E_INVALID_ARG);
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(2 * GiB, 2 * GiB);
	strata_plan *p = NULL;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_batch_curve(p, 0, pts, 4, &n, &err),
			 STRATA_E_INVALID_ARG);
	/* a short array takes the smallest batches and the largest */
	assert_int_equal(strata_plan_batch_curve(p, 256, pts, 4, &n, &err),
			 STRATA_OK);
	assert_int_equal(n, 4);
	assert_int_equal(pts[0].batch, 1);
	assert_int_equal(pts[3].batch, 256);
	strata_plan_destroy(p);
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_points_are_each_batchs_own_plan),
		cmocka_unit_test(test_streamed_pass_serves_the_whole_batch),
		cmocka_unit_test(test_batch_past_the_budget_does_not_fit),
		cmocka_unit_test(test_curve_json_has_every_field),
		cmocka_unit_test(test_curve_refuses_bad_arguments),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
