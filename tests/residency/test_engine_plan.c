/* test_engine_plan.c - the engine and the planner agree to the byte: a plan
 * made from a real checkpoint's headers fills the engine's config (the one
 * route, strata_residency_config_from_plan), the engine's arenas are the
 * plan's weight figures, and a run stays within them in every mode
 * (layer: residency). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "residency/workload_fixture.h"

static const wl_spec mixed = {.text_units = {0, 1, 2, 3, 5, 6}, .text_count = 6,
			      .vision_count = 3, .bf16 = true};

static void run_mode(strata_residency_mode mode, uint64_t host_depth,
		     uint64_t host_budget, bool has_host)
{
	workload w;
	wl_create(&w, &mixed);
	strata_plan_options o = {.mode = mode, .host_depth = host_depth,
				 .has_device_budget = true, .device_budget_bytes = 1 << 24,
				 .has_host_budget = has_host, .host_budget_bytes = host_budget};
	wl_planned p;
	strata_error err;
	assert_int_equal(wl_plan(&w, &o, &p, &err), STRATA_OK);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_RESIDENT, 0);
	assert_int_equal(strata_residency_config_from_plan(p.plan, &c, &err), STRATA_OK);
	assert_int_equal(c.mode, mode);
	strata_backend *b = wl_cpu(false);
	strata_residency *e = NULL;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	strata_residency_sizes z;
	strata_residency_get_sizes(e, &z);
	const strata_plan_candidate *sel = strata_plan_selected(p.plan);
	/* the plan's numbers, handed over once and enforced */
	strata_arena_stats dev, host;
	strata_residency_device_arena_stats(e, &dev);
	strata_residency_host_arena_stats(e, &host);
	assert_int_equal(dev.capacity_bytes, strata_plan_weight_device_bytes(p.plan));
	assert_int_equal(z.static_device_bytes + z.window_device_bytes,
			 sel->static_device_bytes + sel->window_device_bytes);
	assert_int_equal(z.depth, sel->weights.depth);
	assert_int_equal(z.static_bytes, sel->weights.static_bytes);
	assert_int_equal(z.window_bytes, sel->weights.window_bytes);
	assert_int_equal(host.capacity_bytes, z.host_bytes);
	assert_true(z.host_bytes <= sel->host_bytes);
	/* the plan is exact, not generous: the static tensors fill their
	 * region as soon as they are loaded */
	assert_true(dev.high_water_bytes >= sel->static_device_bytes);
	for (int tok = 0; tok < 2; tok++)
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
	assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
	strata_telemetry_snapshot s;
	strata_telemetry_get(strata_residency_telemetry(e), &s);
	assert_true(s.peak_bytes[STRATA_TIER_DEVICE] <= strata_plan_weight_device_bytes(p.plan));
	assert_true(s.peak_bytes[STRATA_TIER_HOST] <= strata_plan_host_total(p.plan));
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_plan_destroy(&p);
	wl_destroy(&w);
}

static void test_resident_plan_equals_engine(void **state)
{
	(void)state;
	run_mode(STRATA_RESIDENCY_RESIDENT, 0, 1 << 24, true);
}

static void test_host_plans_equal_engine(void **state)
{
	(void)state;
	for (uint64_t d = 1; d <= 4; d++)
		run_mode(STRATA_RESIDENCY_HOST, d, 1 << 24, true);
}

static void test_disk_plans_equal_engine(void **state)
{
	(void)state;
	run_mode(STRATA_RESIDENCY_DISK, 0, 1 << 24, true);
	run_mode(STRATA_RESIDENCY_DISK, 0, 0, true); /* direct to the device */
}

static void test_plan_without_selection_is_an_error(void **state)
{
	(void)state;
	strata_residency_config c = {0};
	strata_error err;
	assert_int_equal(strata_residency_config_from_plan(NULL, &c, &err),
			 STRATA_E_PLAN_NOTHING_FITS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resident_plan_equals_engine),
		cmocka_unit_test(test_host_plans_equal_engine),
		cmocka_unit_test(test_disk_plans_equal_engine),
		cmocka_unit_test(test_plan_without_selection_is_an_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
