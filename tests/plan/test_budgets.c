/* test_budgets.c - the planner's budgets: from the machine with headroom or
 * from the options, shared by replicas on one machine, what a plan leaves
 * spare (the prefix cache's bound, on CUDA what the device can pin), and
 * the strict reading of /proc/meminfo (layer: plan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/plan.h"
#include "planner_fixture.h"

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void budgets_come_from_the_machine_with_headroom(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CPU};
	strata_plan_machine m = {.host_available_known = true,
				 .host_available_bytes = 20 * GiB};
	strata_plan *p;
	strata_error err;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	const strata_plan_budgets *b = strata_plan_get_budgets(p);
	assert_true(b->device_headroom_bytes == 2 * GiB);
	/* cpu: one RAM that both tiers share, so every mode that fits it
	 * runs (host:1 too, not "host budget 0") */
	assert_true(b->device_budget_bytes == 18 * GiB && b->host_budget_bytes == 18 * GiB);
	assert_true(b->ram_bytes == 18 * GiB);
	assert_true(has_code(p, STRATA_EXPLAIN_DEVICE_BUDGET_FROM_MACHINE));
	assert_true(has_code(p, STRATA_EXPLAIN_ONE_RAM_SHARED));
	assert_true(strata_plan_host_spare_bytes(p) ==
		    18 * GiB - strata_plan_device_total(p) -
			    strata_plan_host_total(p));
	strata_plan_destroy(p);
	o.mode = STRATA_RESIDENCY_HOST;
	o.host_depth = 1;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_depth(p) == 1);
	o.mode = STRATA_RESIDENCY_AUTO;
	o.host_depth = 0;
	assert_true(strata_plan_get_options(p)->shape.context == 512);
	strata_plan_destroy(p);
	/* an explicit device budget leaves the rest of RAM to the host */
	o.has_device_budget = true;
	o.device_budget_bytes = 4 * GiB;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_get_budgets(p)->host_budget_bytes == 14 * GiB);
	strata_plan_destroy(p);
	/* and an explicit host budget leaves the rest to the device */
	o.has_device_budget = false;
	o.has_host_budget = true;
	o.host_budget_bytes = 5 * GiB;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_get_budgets(p)->device_budget_bytes == 13 * GiB);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_BUDGET_FROM_OPTION));
	strata_plan_destroy(p);
	o.has_host_budget = false;
	/* a prefill chunk longer than the context cannot run */
	o.shape = (strata_plan_shape){.context = 16, .prefill_chunk = 17};
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_E_PLAN_OPTIONS);
	/* ... at one sequence: a step of 2 takes prompt chunks of both, up
	 * to context x batch (issue 19), and no more */
	o.shape = (strata_plan_shape){.context = 16, .batch = 2,
				      .prefill_chunk = 32};
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	strata_plan_destroy(p);
	o.shape.prefill_chunk = 33;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_E_PLAN_OPTIONS);
	o.shape = (strata_plan_shape){0};
	/* small machines keep at least 1 GiB */
	assert_true(strata_plan_headroom(STRATA_PLAN_DEVICE_CPU, 3 * GiB) == GiB);
	assert_true(strata_plan_headroom(STRATA_PLAN_DEVICE_CUDA, 100 * GiB) ==
		    5 * GiB);
	assert_true(strata_plan_headroom(STRATA_PLAN_DEVICE_CPU, 100) == 100);
	/* cuda with no way to tell its free memory */
	o = (strata_plan_options){.device = STRATA_PLAN_DEVICE_CUDA};
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_E_PLAN_OPTIONS);
	assert_non_null(strstr(err.fix, "--device-memory"));
	fixture_free(f);
}

/* A plan that must succeed; the caller destroys it. */
static strata_plan *plan_ok(const fixture *f, const strata_plan_options *o,
			    const strata_plan_machine *m)
{
	strata_plan *p = NULL;
	strata_error err;
	if (strata_plan_create(f->layout, &f->arch, STRATA_DTYPE_BF16, o, m,
			       &p, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return p;
}

/* Replicas on one machine (host_shared_by) split its host budget evenly;
 * on cpu the RAM of their device arenas too, unless --device-memory gives
 * each its own; what a plan leaves spare is the prefix cache's bound. */
static void replicas_share_the_host_budget(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_machine m = {.host_available_known = true,
				 .host_available_bytes = 20 * GiB,
				 .device_free_known = true,
				 .device_free_bytes = 100 * GiB};
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CPU,
				 .host_shared_by = 4};
	/* cpu, nothing given: 18 GiB of RAM (2 GiB headroom) over 4 arenas */
	strata_plan *p = plan_ok(f, &o, &m);
	const strata_plan_budgets *b = strata_plan_get_budgets(p);
	assert_true(b->shared_by == 4);
	assert_true(b->device_budget_bytes == 18 * GiB / 4);
	assert_true(b->ram_bytes == 18 * GiB / 4 && b->host_pool_bytes == 18 * GiB);
	assert_true(strata_plan_host_spare_bytes(p) ==
		    18 * GiB / 4 - strata_plan_device_total(p) -
			    strata_plan_host_total(p));
	strata_plan_destroy(p);
	/* cpu, 4 GiB per arena: 18 - 4 x 4 GiB left to the host pool */
	o.has_device_budget = true;
	o.device_budget_bytes = 4 * GiB;
	p = plan_ok(f, &o, &m);
	b = strata_plan_get_budgets(p);
	assert_true(b->host_pool_bytes == 2 * GiB);
	assert_true(b->host_budget_bytes == GiB / 2);
	strata_plan_destroy(p);
	/* arenas past the RAM: no host pool, not an underflow */
	o.device_budget_bytes = 5 * GiB;
	p = plan_ok(f, &o, &m);
	assert_true(strata_plan_get_budgets(p)->host_budget_bytes == 0);
	strata_plan_destroy(p);
	/* cpu, --host-memory 8 GiB: 2 GiB each; the arenas share the rest */
	o.has_device_budget = false;
	o.has_host_budget = true;
	o.host_budget_bytes = 8 * GiB;
	p = plan_ok(f, &o, &m);
	b = strata_plan_get_budgets(p);
	assert_true(b->host_budget_bytes == 2 * GiB && b->host_pool_bytes == 8 * GiB);
	assert_true(b->device_budget_bytes == 10 * GiB / 4);
	strata_plan_destroy(p);
	/* cuda: each GPU's own free memory; the host pool (18 GiB) split,
	 * and only host memory is spare for a host-side cache */
	o = (strata_plan_options){.device = STRATA_PLAN_DEVICE_CUDA,
				  .host_shared_by = 4};
	p = plan_ok(f, &o, &m);
	b = strata_plan_get_budgets(p);
	assert_true(b->device_budget_bytes == 95 * GiB);
	assert_true(b->host_budget_bytes == 18 * GiB / 4);
	assert_true(strata_plan_mode(p) == STRATA_RESIDENCY_RESIDENT);
	/* resident on cuda still loads through the pinned staging buffer
	 * of the largest unit (4 MiB) */
	assert_int_equal(strata_plan_host_total(p), 4 * MiB);
	assert_true(strata_plan_host_spare_bytes(p) == 18 * GiB / 4 - 4 * MiB);
	bool split = false;
	for (size_t i = 0; i < strata_plan_explanation_count(p); i++)
		split |= strstr(strata_plan_explanation_at(p, i)->text,
				"split between 4 replicas") != NULL;
	assert_true(split);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* On cuda the spare host memory is pinned by whoever takes it (the batch
 * prefix cache), so it is bounded by the page tables the device budget's
 * remainder pays for: all of it with room, the exact edge of the driver's
 * formula with 4 MiB of room, nothing with none. */
static void cuda_spare_is_what_the_device_can_pin(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CUDA,
				 .has_device_budget = true,
				 .device_budget_bytes = 64 * GiB,
				 .has_host_budget = true,
				 .host_budget_bytes = 64 * GiB,
				 .shape = {.context = 256, .batch = 1}};
	strata_plan *p = plan_ok(f, &o, &no_machine);
	assert_true(strata_plan_mode(p) == STRATA_RESIDENCY_RESIDENT);
	const uint64_t total = strata_plan_device_total(p);
	const uint64_t h = strata_plan_host_total(p);
	assert_true(strata_plan_host_spare_bytes(p) == 64 * GiB - h);
	strata_plan_destroy(p);
	o.device_budget_bytes = total + 4 * MiB;
	p = plan_ok(f, &o, &no_machine);
	assert_true(strata_plan_device_total(p) == total);
	const uint64_t spare = strata_plan_host_spare_bytes(p);
	/* the pinned tiers (none: resident), not the load staging, which is
	 * gone once the run starts */
	const uint64_t pin = h - strata_plan_selected(p)->load_staging_bytes;
	const uint64_t base = strata_plan_cuda_driver_bytes(pin);
	assert_true(spare > 0 && spare < 64 * GiB - h);
	assert_true(strata_plan_cuda_driver_bytes(pin + spare) - base <=
		    4 * MiB);
	assert_true(strata_plan_cuda_driver_bytes(pin + spare + 1) - base >
		    4 * MiB);
	strata_plan_destroy(p);
	o.device_budget_bytes = total;
	p = plan_ok(f, &o, &no_machine);
	assert_true(strata_plan_host_spare_bytes(p) == 0);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* The spare bytes at the exact edge, and the nothing-fits fix in the
 * units a user gives: --host-memory is the pool, so n times a share. */
static void spare_bytes_and_shared_nothing_fits_fix(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(RESIDENT_DEVICE, 3 * MiB);
	strata_plan *p = plan_ok(f, &o, &no_machine);
	strata_error err;
	/* resident fills the device exactly: the host budget is spare */
	assert_true(strata_plan_device_total(p) == RESIDENT_DEVICE);
	assert_true(strata_plan_host_spare_bytes(p) == 3 * MiB);
	strata_plan_destroy(p);
	/* nothing fits: nothing spare */
	o = opts(MiB, 0);
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	assert_true(strata_plan_host_spare_bytes(p) == 0);
	strata_plan_destroy(p);
	/* cuda, room on the device, no host memory: disk's one lookahead
	 * slot (4 MiB) and the load staging of the largest static (1 MiB)
	 * are the one change; replicas give the pool, n shares */
	o = opts(24 * MiB, 0);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	strata_plan_destroy(p);
	if (!strstr(err.fix, "give --host-memory 5MiB (then disk fits; the device budget is enough)"))
		fail_msg("fix: %s", err.fix);
	o.host_shared_by = 2;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	strata_plan_destroy(p);
	if (!strstr(err.fix, "give --host-memory 10MiB (then disk fits"))
		fail_msg("fix: %s", err.fix);
	fixture_free(f);
}

static void meminfo_is_parsed_strictly(void **state)
{
	(void)state;
	const char ok[] = "MemTotal:       24000000 kB\n"
			  "MemFree:         1000 kB\n"
			  "MemAvailable:   2048 kB\n";
	uint64_t b = 0;
	strata_error err;
	assert_int_equal(strata_plan_parse_meminfo(ok, strlen(ok), &b, &err),
			 STRATA_OK);
	assert_true(b == 2048 * 1024);
	const char *bad[] = {"MemTotal: 5 kB\n", "MemAvailable: kB\n",
			     "MemAvailable: 12", "XMemAvailable: 5 kB\n",
			     "MemAvailable: 99999999999999999999999 kB\n"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		assert_int_not_equal(strata_plan_parse_meminfo(
					     bad[i], strlen(bad[i]), &b, &err),
				     STRATA_OK);
	/* this machine's own file reads */
	assert_int_equal(strata_plan_host_available(&b, &err), STRATA_OK);
	assert_true(b > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(budgets_come_from_the_machine_with_headroom),
		cmocka_unit_test(replicas_share_the_host_budget),
		cmocka_unit_test(spare_bytes_and_shared_nothing_fits_fix),
		cmocka_unit_test(cuda_spare_is_what_the_device_can_pin),
		cmocka_unit_test(meminfo_is_parsed_strictly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
