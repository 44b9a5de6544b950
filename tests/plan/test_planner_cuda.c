/* test_planner_cuda.c - what CUDA plans count that CPU plans do not: the
 * driver's own device bytes for each candidate's pinned host memory and
 * its allocations, the half products' workspace, and the disk mode staged
 * through pinned host memory (no reads straight to the device). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/plan.h"
#include "planner_fixture.h"

/* What a CUDA run takes beside its buffers, as plans count it: page tables
 * for pinned host memory (whole 2 MiB granules of 8 bytes per 4 KiB page,
 * and one more; an H200 took 16 MiB for 7 GB pinned), the last granule of
 * three allocations, and with half weights the products' workspace for the
 * most rows a pass multiplies. Each CUDA candidate's device total is the
 * sum of its parts; CPU plans count none of it. */
static void cuda_plans_count_the_driver_and_the_product_workspace(void **state)
{
	(void)state;
	const uint64_t g = STRATA_PLAN_CUDA_GRANULE;
	assert_int_equal(g, 2 * MiB);
	assert_int_equal(strata_plan_cuda_pinned_bytes(0), 0);
	assert_int_equal(strata_plan_cuda_pinned_bytes(1), 2 * MiB);
	assert_int_equal(strata_plan_cuda_pinned_bytes(7000000000ull), 16 * MiB);
	assert_int_equal(strata_plan_cuda_pinned_bytes(GiB), 4 * MiB);
	assert_int_equal(strata_plan_cuda_pinned_bytes(UINT64_MAX) % g, 0);
	assert_int_equal(strata_plan_cuda_driver_bytes(0), 3 * g);
	fixture *f = fixture_make(8);
	strata_error err;
	for (int cuda = 0; cuda < 2; cuda++) {
		for (int half = 0; half < 2; half++) {
			strata_plan_options o = opts(GiB, GiB);
			o.device = cuda ? STRATA_PLAN_DEVICE_CUDA
					: STRATA_PLAN_DEVICE_CPU;
			o.shape.prefill_chunk = 5;
			o.shape.batch = 3;
			o.backend_reserved_bytes = cuda ? 12 * MiB : 0;
			strata_plan *p = NULL;
			assert_int_equal(strata_plan_create(
						 f->layout, &f->arch,
						 half ? STRATA_DTYPE_BF16
						      : STRATA_DTYPE_F32,
						 &o, &no_machine, &p, &err),
					 STRATA_OK);
			const strata_plan_memory *m = strata_plan_get_memory(p);
			/* 5 rows (the chunk beats the batch) x the widest
			 * input (intermediate 128) x two half terms, aligned */
			assert_int_equal(m->product_workspace_bytes,
					 cuda && half ? 5 * 128 * 4 /* 2560: aligned */
						      : 0);
			for (size_t i = 0; i < strata_plan_candidate_count(p);
			     i++) {
				const strata_plan_candidate *c =
					strata_plan_candidate_at(p, i);
				if (c->mode == STRATA_RESIDENCY_PLACEMENT)
					continue; /* test_placement.c */
				uint64_t drv = cuda ? strata_plan_cuda_driver_bytes(
							      c->host_bytes -
							      c->load_staging_bytes)
						    : 0;
				assert_int_equal(c->driver_bytes, drv);
				/* the one site's KV cache and workspace, and
				 * on cuda the logits rows read back */
				assert_int_equal(c->device_bytes,
						 c->static_device_bytes +
							 c->window_device_bytes +
							 m->kv_cache_bytes +
							 m->workspace_bytes +
							 (cuda ? m->logits_bytes : 0) +
							 m->product_workspace_bytes +
							 o.backend_reserved_bytes + drv);
				/* cuda loads through pinned staging: the
				 * largest unit when resident, else the
				 * largest static (1 MiB), beside the tiers */
				uint64_t load = !cuda ? 0
						: c->mode == STRATA_RESIDENCY_RESIDENT
							? 4 * MiB
							: 1 * MiB;
				assert_int_equal(c->load_staging_bytes, load);
				assert_int_equal(c->host_bytes,
						 c->host_weight_bytes +
							 c->staging_bytes);
			}
			strata_plan_destroy(p);
		}
	}
	fixture_free(f);
}

/* On CUDA every unit passes through pinned host memory: with host 0 the
 * disk mode does not fit (it names the host shortfall) instead of
 * planning reads straight to the device that no run can make; one unit of
 * host memory makes it fit, with a lookahead of 1; lookahead 0 is refused. */
static void cuda_disk_mode_stages_through_host_memory(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(GiB, 0);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	o.mode = STRATA_RESIDENCY_DISK;
	strata_plan *p = NULL;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	/* the plan comes back for its table and reasons */
	assert_non_null(p);
	assert_false(has_code(p, STRATA_EXPLAIN_DISK_DIRECT_TO_DEVICE));
	assert_true(has_code(p, STRATA_EXPLAIN_DISK_EXCEEDS_HOST_BUDGET));
	assert_true(strata_plan_selected(p) == NULL);
	strata_plan_destroy(p);
	/* only the host is short: the fix is that one change */
	/* one lookahead slot and the load staging of the largest static */
	if (!strstr(err.fix, "give --host-memory 5MiB (then disk fits"))
		fail_msg("fix: %s", err.fix);
	o.host_budget_bytes = 64 * MiB; /* units of this fixture are 4 MiB */
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_lookahead(p) >= 1 && strata_plan_queue(p) >= 1);
	assert_false(has_code(p, STRATA_EXPLAIN_DISK_DIRECT_TO_DEVICE));
	strata_plan_destroy(p);
	o.has_lookahead = true;
	o.lookahead = 0;
	p = (strata_plan *)&o;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_OPTIONS);
	assert_null(p);
	assert_non_null(strstr(err.message, "pinned host memory"));
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cuda_plans_count_the_driver_and_the_product_workspace),
		cmocka_unit_test(cuda_disk_mode_stages_through_host_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
