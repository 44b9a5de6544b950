/* test_placement.c - the placement planner: per-unit placements (resident,
 * window, cpu), their exact sizes, the search's optimality against every
 * forced placement, forcing, the layer split over several devices and
 * the prefill split (layer: plan). */
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

/* CUDA-like rates where the host reads twice as fast as the link and
 * the device's own memory is far faster: the regime of GPU-MACHINE.md. */
static strata_plan_options cuda_opts(uint64_t device, uint64_t host)
{
	strata_plan_options o = opts(device, host);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	o.h2d_bandwidth = 50e9;
	o.host_memory_bandwidth = 100e9;
	o.memory_bandwidth = 4e12;
	o.device_flops = 100e12;
	o.cpu_flops = 1e12;
	/* the fixture's units are 4 MiB, where real kernels' fixed costs
	 * would outweigh their bytes: these tests price the bytes alone
	 * (test_cost.c prices the fixed costs) */
	o.cpu_launch_seconds = o.device_launch_seconds = 1e-15;
	o.crossing_seconds = 1e-15;
	o.mixed_placements = true;
	return o;
}

static strata_plan *plan_ok(const fixture *f, const strata_plan_options *o)
{
	strata_plan *p = NULL;
	strata_error err;
	if (plan_bf16(f, o, &p, &err) != STRATA_OK)
		fail_msg("%s / %s", err.message, err.fix);
	return p;
}

/* The device room one resident unit takes beyond the window and the
 * fixed buffers: its 4 MiB and its KV. */
#define UNIT_KV (2 * 32768u)

/* The best fitting placement candidate's decode time, or -1. */
static double best_placement_ms(const strata_plan *p)
{
	double best = -1;
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, i);
		if (c->mode == STRATA_RESIDENCY_PLACEMENT && c->fits &&
		    (best < 0 || c->predicted_decode_ms < best))
			best = c->predicted_decode_ms;
	}
	return best;
}

/* ------------------------------------------------------------------------ */

/* The search returns the minimum of the cost model: no forced placement
 * (every r resident, c on the CPU, statics wherever) that fits decodes
 * faster than what the planner chose. */
static void search_is_optimal_over_every_forced_placement(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	const uint64_t budgets[] = {24 * MiB, 33 * MiB, 41 * MiB};
	for (size_t b = 0; b < 3; b++) {
		strata_plan_options o = cuda_opts(budgets[b], GiB);
		strata_plan *p = plan_ok(f, &o);
		const strata_plan_candidate *sel = strata_plan_selected(p);
		assert_non_null(sel);
		/* the largest budget holds everything resident */
		assert_int_equal(sel->mode, b < 2 ? STRATA_RESIDENCY_PLACEMENT
						  : STRATA_RESIDENCY_RESIDENT);
		double chosen = sel->predicted_decode_ms;
		if (b < 2)
			assert_true(chosen <= best_placement_ms(p) * 1.01);
		strata_plan_destroy(p);
		size_t fitting = 0;
		for (uint64_t r = 0; r <= 8; r++)
			for (uint64_t c = 0; c + r <= 8; c++) {
				o.has_resident_units = o.has_cpu_units = true;
				o.resident_units = r;
				o.cpu_units = c;
				strata_error err;
				strata_status s = plan_bf16(f, &o, &p, &err);
				if (s == STRATA_OK) {
					fitting++;
					double t = best_placement_ms(p);
					if (t < chosen - 1e-9)
						fail_msg("budget %zu: r%llu c%llu decodes in %f < %f",
							 b, (unsigned long long)r,
							 (unsigned long long)c, t, chosen);
				} else {
					assert_int_equal(s, STRATA_E_PLAN_NOTHING_FITS);
				}
				strata_plan_destroy(p);
			}
		assert_true(fitting > 0);
	}
	fixture_free(f);
}

/* Resident units fill what the window, KV cache and workspace leave; the
 * rest split so the CPU (twice the link's rate) takes about two thirds. */
static void resident_fill_then_a_balanced_split(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(33 * MiB, GiB);
	strata_plan *p = plan_ok(f, &o);
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_true(c->device_bytes <= 33 * MiB);
	assert_true(c->resident_units > 0 && c->resident_units < 8);
	uint64_t rest = 8 - c->resident_units;
	assert_true(c->cpu_units + c->window_units == rest);
	/* balanced: moving one unit either way is no faster */
	assert_true(c->cpu_units >= rest / 2);
	assert_true(has_code(p, STRATA_EXPLAIN_PLACEMENT_SELECTED));
	assert_true(has_code(p, STRATA_EXPLAIN_UNITS_RESIDENT_FILL));
	assert_true(has_code(p, STRATA_EXPLAIN_CPU_UNITS_SELECTED));
	if (c->window_units)
		assert_true(has_code(p, STRATA_EXPLAIN_STREAM_CPU_INTERLEAVED));
	/* the placement reads back unit by unit */
	uint64_t counts[4] = {0};
	for (uint64_t i = 0; i < 8; i++) {
		strata_place w;
		uint32_t d;
		strata_plan_unit_place(c, 8, i, false, &w, &d);
		counts[w]++;
		assert_true(d == 0);
		if (i < c->resident_units)
			assert_int_equal(w, STRATA_PLACE_RESIDENT);
	}
	assert_true(counts[STRATA_PLACE_RESIDENT] == c->resident_units);
	assert_true(counts[STRATA_PLACE_CPU] == c->cpu_units);
	assert_true(counts[STRATA_PLACE_WINDOW] == c->window_units);
	/* a bigger device holds more units resident */
	uint64_t before = c->resident_units;
	strata_plan_destroy(p);
	o = cuda_opts(41 * MiB, GiB);
	p = plan_ok(f, &o);
	assert_true(strata_plan_selected(p)->resident_units > before);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* Forced counts are honoured exactly (at most the units there are); the
 * uniform modes are no longer eligible; every budget one byte short of
 * the forced placement is refused. */
static void forced_counts_are_exact_and_budgets_exact(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(GiB, GiB);
	o.mixed_placements = false; /* forcing implies placements */
	o.has_resident_units = o.has_cpu_units = true;
	o.resident_units = 3;
	o.cpu_units = 2;
	strata_plan *p = plan_ok(f, &o);
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_int_equal(c->mode, STRATA_RESIDENCY_PLACEMENT);
	/* the candidate with the statics on the device */
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *k = strata_plan_candidate_at(p, i);
		if (k->mode == STRATA_RESIDENCY_PLACEMENT && !k->statics_on_cpu)
			c = k;
	}
	assert_false(c->statics_on_cpu);
	assert_true(c->resident_units == 3 && c->cpu_units == 2 &&
		    c->window_units == 3);
	assert_true(c->prefill_cpu_units == 2); /* forced for both passes */
	assert_true(has_code(p, STRATA_EXPLAIN_PLACEMENT_FORCED));
	uint64_t dev = c->device_bytes, host = c->host_bytes;
	/* the window: two streamed units of 4 MiB, the seed's figures over
	 * the streamed units, unaligned by the plan (already whole here) */
	assert_true(c->weights.window_bytes == 8 * MiB);
	assert_true(c->weights.static_bytes == MiB);
	assert_true(c->weights.required_bytes == 9 * MiB);
	strata_plan_destroy(p);
	strata_error err;
	o.has_device_budget = true;
	o.device_budget_bytes = dev;
	o.host_budget_bytes = host;
	strata_plan_destroy(plan_ok(f, &o));
	o.device_budget_bytes = dev - 1;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	assert_true(has_code(p, STRATA_EXPLAIN_FORCED_MODE_DOES_NOT_FIT));
	strata_plan_destroy(p);
	o.device_budget_bytes = dev;
	o.host_budget_bytes = host - 1;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	strata_plan_destroy(p);
	/* more than there are: every unit */
	o = cuda_opts(GiB, GiB);
	o.has_cpu_units = true;
	o.cpu_units = 100;
	p = plan_ok(f, &o);
	c = strata_plan_selected(p);
	assert_true(c->cpu_units == 8 - c->resident_units);
	strata_plan_destroy(p);
	/* a uniform mode and forced units do not go together */
	o.mode = STRATA_RESIDENCY_HOST;
	p = (strata_plan *)&o;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_OPTIONS);
	assert_null(p);
	assert_non_null(strstr(err.fix, "--residency"));
	fixture_free(f);
}

/* A caller whose forward pass runs only the uniform modes keeps them,
 * and is told what a placement would give. */
static void placements_wait_for_a_forward_pass_that_runs_them(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(24 * MiB, GiB);
	o.mixed_placements = false;
	strata_plan *p = plan_ok(f, &o);
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_int_equal(c->mode, STRATA_RESIDENCY_HOST);
	assert_true(best_placement_ms(p) < c->predicted_decode_ms);
	assert_true(has_code(p, STRATA_EXPLAIN_PLACEMENT_NOT_RUN_YET));
	strata_plan_destroy(p);
	fixture_free(f);
}

/* A layer split: each device its own budget and its own run of resident
 * units, streamed units through the last; every device within budget. */
static void split_over_devices_each_with_its_budget(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(20 * MiB, GiB);
	o.device_count = 3;
	o.device_budgets[0] = 20 * MiB;
	o.device_budgets[1] = 16 * MiB;
	o.device_budgets[2] = 24 * MiB;
	strata_plan *p = plan_ok(f, &o);
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_int_equal(c->mode, STRATA_RESIDENCY_PLACEMENT);
	assert_true(c->devices == 3);
	uint64_t sum = 0;
	for (uint32_t d = 0; d < 3; d++) {
		assert_true(c->split_device_bytes[d] <= o.device_budgets[d]);
		sum += c->device_resident_units[d];
	}
	assert_true(sum == c->resident_units);
	assert_true(c->device_resident_units[0] > 0 &&
		    c->device_resident_units[1] > 0);
	assert_true(has_code(p, STRATA_EXPLAIN_SPLIT_OVER_DEVICES));
	/* units in layer order: device 0's first, then 1's, then 2's */
	uint32_t last = 0;
	for (uint64_t i = 0; i < c->resident_units; i++) {
		strata_place w;
		uint32_t d;
		strata_plan_unit_place(c, 8, i, false, &w, &d);
		assert_true(d >= last);
		last = d;
	}
	/* forcing the same resident count sizes each device the same */
	uint64_t need1 = c->split_device_bytes[1];
	strata_plan_destroy(p);
	o.has_resident_units = true;
	o.resident_units = sum;
	p = plan_ok(f, &o);
	assert_true(strata_plan_selected(p)->split_device_bytes[1] == need1);
	strata_plan_destroy(p);
	/* a split needs each device's budget */
	o = cuda_opts(14 * MiB, GiB);
	o.has_device_budget = false;
	o.device_count = 2;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_OPTIONS);
	assert_non_null(strstr(err.fix, "--device-memory"));
	fixture_free(f);
}

/* With a slow CPU a prefill chunk streams what decode computes on the
 * CPU: its own split over the same resident units, faster than decode's
 * split at that chunk, with the chunk where they cross. */
static void prefill_has_its_own_split_and_a_crossing(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(24 * MiB, GiB);
	/* the CPU's products read bf16 below the memory's rate (as on the
	 * GPU machine: a decode layer at 76-97 GB/s of 110), so the link
	 * adds to them until both together reach the memory's */
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++)
		o.cpu_types[t].gemv = 40e9;
	o.calibrated_rates |= 1u << STRATA_PLAN_RATE_HOST_MEMORY; /* as the
		file gives them: an option's rate would price every type */
	o.cpu_flops = 1e11; /* and slow to multiply */
	o.shape.prefill_chunk = 64;
	strata_plan *p = plan_ok(f, &o);
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_true(c->cpu_units > 0);
	assert_true(c->prefill_cpu_units < c->cpu_units);
	assert_true(c->crossing_chunk >= 1 && c->crossing_chunk <= 64);
	assert_true(has_code(p, STRATA_EXPLAIN_PREFILL_PLACEMENT));
	double prefill = c->predicted_prefill_ms;
	uint64_t r = c->resident_units, cpu = c->cpu_units;
	bool statics = c->statics_on_cpu;
	strata_plan_destroy(p);
	/* decode's split forced for the prefill too is slower there */
	o.has_resident_units = o.has_cpu_units = true;
	o.resident_units = r;
	o.cpu_units = cpu;
	p = plan_ok(f, &o);
	bool compared = false;
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *k = strata_plan_candidate_at(p, i);
		if (k->mode != STRATA_RESIDENCY_PLACEMENT ||
		    k->statics_on_cpu != statics || !k->fits)
			continue;
		assert_true(k->predicted_prefill_ms > prefill);
		compared = true;
	}
	assert_true(compared);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* The uniform modes are placements with every unit alike; every
 * candidate predicts both passes. */
static void uniform_modes_are_uniform_placements(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(GiB, GiB);
	strata_plan *p = plan_ok(f, &o);
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, i);
		assert_true(c->predicted_decode_ms > 0 &&
			    c->predicted_prefill_ms > 0);
		if (c->mode == STRATA_RESIDENCY_PLACEMENT)
			continue;
		strata_place want = c->mode == STRATA_RESIDENCY_RESIDENT
					    ? STRATA_PLACE_RESIDENT
				    : c->mode == STRATA_RESIDENCY_HOST
					    ? STRATA_PLACE_WINDOW
					    : STRATA_PLACE_DISK;
		for (uint64_t u = 0; u < 8; u++) {
			strata_place w;
			uint32_t d;
			strata_plan_unit_place(c, 8, u, false, &w, &d);
			assert_int_equal(w, want);
		}
	}
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_RESIDENT);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* The seed's window over a subset of units: only streamed units weigh. */
static void window_of_streamed_units_is_the_seed_over_them(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	bool mask[8] = {true, false, true, false, false, false, true, true};
	uint64_t w;
	strata_error err;
	assert_int_equal(strata_plan_layout_window_of(f->layout, 3, mask, &w,
						      &err),
			 STRATA_OK);
	assert_true(w == 8 * MiB); /* 0 and 2, or 6 and 7 */
	assert_int_equal(strata_plan_layout_window_of(f->layout, 2, mask, &w,
						      &err),
			 STRATA_OK);
	assert_true(w == 8 * MiB); /* 6 and 7 */
	mask[7] = false;
	assert_int_equal(strata_plan_layout_window_of(f->layout, 2, mask, &w,
						      &err),
			 STRATA_OK);
	assert_true(w == 4 * MiB);
	assert_int_equal(strata_plan_layout_window_of(f->layout, 8, NULL, &w,
						      &err),
			 STRATA_OK);
	assert_true(w == 32 * MiB);
	assert_true(strata_plan_layout_unit_count(f->layout) == 8);
	strata_plan_unit u;
	strata_plan_layout_unit_at(f->layout, 5, &u);
	assert_true(u.unit == 5 && u.bytes == 4 * MiB && u.group_len == 5);
	fixture_free(f);
}

/* --json: every candidate's placement, unit by unit, and both passes. */
static void json_lists_each_unit_and_both_passes(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(33 * MiB, GiB);
	strata_plan *p = plan_ok(f, &o);
	strata_json j;
	strata_json_init(&j, false);
	strata_plan_write_json(p, "m", &j);
	strata_error err;
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	json_error_t je;
	json_t *doc = json_loadb(j.buf, j.len, 0, &je);
	strata_json_fini(&j);
	assert_non_null(doc);
	json_t *cands = json_object_get(doc, "candidates");
	assert_true(json_array_size(cands) == strata_plan_candidate_count(p));
	for (size_t i = 0; i < json_array_size(cands); i++) {
		json_t *c = json_array_get(cands, i);
		json_t *pl = json_object_get(c, "placement");
		assert_true(json_array_size(pl) == 8);
		assert_true(json_object_size(json_object_get(c, "weights")) == 4);
		assert_true(json_is_number(json_object_get(c, "predicted_decode_ms")));
		assert_true(json_is_number(json_object_get(c, "predicted_prefill_ms")));
		json_t *u0 = json_array_get(pl, 0);
		assert_string_equal(json_string_value(json_object_get(u0, "group")),
				    "model");
		const char *w = json_string_value(json_object_get(u0, "where"));
		assert_true(!strcmp(w, "resident") || !strcmp(w, "window") ||
			    !strcmp(w, "cpu") || !strcmp(w, "disk"));
	}
	json_t *sel = json_object_get(doc, "selected");
	assert_true(json_is_number(json_object_get(sel, "predicted_decode_ms")));
	json_t *rates = json_object_get(doc, "rates");
	json_t *h = json_object_get(rates, "host_memory_bytes_per_second");
	assert_string_equal(json_string_value(json_object_get(h, "source")),
			    "option");
	h = json_object_get(rates, "disk_bytes_per_second");
	assert_string_equal(json_string_value(json_object_get(h, "source")),
			    "default");
	json_decref(doc);
	assert_true(has_code(p, STRATA_EXPLAIN_RATES_DEFAULT));
	strata_plan_destroy(p);
	fixture_free(f);
}

/* Allocation failures while placing leave nothing behind. */
static void placement_allocation_failures_leave_nothing(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = cuda_opts(33 * MiB, GiB);
	for (int n = 0;; n++) {
		strata_alloc_fail_after(n);
		strata_plan *p = NULL;
		strata_error err;
		strata_status s = plan_bf16(f, &o, &p, &err);
		strata_alloc_fail_after(-1);
		if (s == STRATA_OK) {
			strata_plan_destroy(p);
			break;
		}
		assert_int_equal(s, STRATA_E_NOMEM);
		assert_null(p);
	}
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(search_is_optimal_over_every_forced_placement),
		cmocka_unit_test(resident_fill_then_a_balanced_split),
		cmocka_unit_test(forced_counts_are_exact_and_budgets_exact),
		cmocka_unit_test(placements_wait_for_a_forward_pass_that_runs_them),
		cmocka_unit_test(split_over_devices_each_with_its_budget),
		cmocka_unit_test(prefill_has_its_own_split_and_a_crossing),
		cmocka_unit_test(uniform_modes_are_uniform_placements),
		cmocka_unit_test(window_of_streamed_units_is_the_seed_over_them),
		cmocka_unit_test(json_lists_each_unit_and_both_passes),
		cmocka_unit_test(placement_allocation_failures_leave_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
