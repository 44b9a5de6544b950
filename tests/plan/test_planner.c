/* test_planner.c - the planner's candidates and its automatic choice with
 * its explanation codes, option units and forced modes, the nothing-fits
 * error, predictions, the JSON document and allocation failures (layer:
 * plan). The memory model is in test_memory_model.c, the budgets in
 * test_budgets.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "strata/backend.h"
#include "strata/plan.h"
#include "planner_fixture.h"

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void resident_is_chosen_when_it_fits(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(RESIDENT_DEVICE, 0);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_RESIDENT);
	assert_true(strata_plan_device_total(p) == RESIDENT_DEVICE);
	assert_true(strata_plan_host_total(p) == 0);
	assert_true(has_code(p, STRATA_EXPLAIN_RESIDENT_FITS));
	assert_true(has_code(p, STRATA_EXPLAIN_DEVICE_BUDGET_FROM_OPTION));
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_true(c->weights.static_bytes == MiB &&
		    c->weights.window_bytes == 32 * MiB &&
		    c->weights.depth == 8);
	strata_plan_destroy(p);
	/* the backend's own device bytes count: now it is one byte short */
	o.backend_reserved_bytes = 1;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_candidate_at(p, 0)->device_bytes ==
		    RESIDENT_DEVICE + 1);
	assert_false(strata_plan_candidate_at(p, 0)->fits);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_DISK);
	strata_plan_destroy(p);
	o.backend_reserved_bytes = 0;
	/* one byte less and resident no longer fits: the exact edge */
	o.device_budget_bytes = RESIDENT_DEVICE - 1;
	o.host_budget_bytes = 64 * MiB;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_HOST);
	assert_true(has_code(p, STRATA_EXPLAIN_RESIDENT_EXCEEDS_DEVICE_BUDGET));
	assert_true(strata_plan_candidate_at(p, 0)->device_shortfall_bytes == 1);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void host_window_is_the_fastest_fitting_depth(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	/* room for a window of 3 units, not 4 */
	uint64_t dev = MiB + 3 * 4 * MiB + KV_CPU + WS;
	strata_plan_options o = opts(dev, 64 * MiB);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	/* resident, host:1..4 (4 is the first that does not fit), disk */
	assert_int_equal(uniform_count(p), 6);
	for (size_t d = 1; d <= 4; d++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, d);
		assert_int_equal(c->mode, STRATA_RESIDENCY_HOST);
		assert_true(c->weights.depth == d);
		assert_true(c->weights.window_bytes == d * 4 * MiB);
		/* every unit; on cpu the device is host memory: nothing is
		 * loaded through a staging buffer */
		assert_true(c->host_bytes == 32 * MiB);
		assert_int_equal(c->staging_bytes, 0);
		assert_int_equal(c->fits, d <= 3);
	}
	/* depth 1 cannot overlap copy and compute; 2 and 3 tie: the smaller
	 * window wins */
	const strata_plan_candidate *c1 = strata_plan_candidate_at(p, 1);
	const strata_plan_candidate *c2 = strata_plan_candidate_at(p, 2);
	assert_true(c1->predicted_ms_per_forward > c2->predicted_ms_per_forward);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_HOST);
	assert_true(strata_plan_depth(p) == 2);
	assert_true(strata_plan_weight_device_bytes(p) == MiB + 8 * MiB);
	assert_true(strata_plan_device_total(p) == MiB + 8 * MiB + KV_CPU + WS);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_WINDOW_SELECTED));
	strata_plan_destroy(p);
	/* the host tier too small for every unit: disk, two units ahead */
	o.host_budget_bytes = 8 * MiB;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_DISK);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_WINDOW_EXCEEDS_HOST_BUDGET));
	assert_true(has_code(p, STRATA_EXPLAIN_DISK_SELECTED));
	assert_true(strata_plan_depth(p) == 2 && strata_plan_lookahead(p) == 2 &&
		    strata_plan_queue(p) == 1);
	assert_true(strata_plan_host_total(p) == 8 * MiB);
	assert_true(strata_plan_get_memory(p)->staging_bytes == 8 * MiB);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void disk_options_follow_the_host_budget(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	uint64_t dev = MiB + 2 * 4 * MiB + KV_CPU + WS;
	strata_plan_options o = opts(dev, 0);
	o.mode = STRATA_RESIDENCY_DISK;
	strata_plan *p;
	strata_error err;
	/* host 0: straight from disk to the device */
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_lookahead(p) == 0 && strata_plan_queue(p) == 0);
	assert_true(has_code(p, STRATA_EXPLAIN_DISK_DIRECT_TO_DEVICE));
	assert_true(has_code(p, STRATA_EXPLAIN_FORCED_BY_OPTION));
	strata_plan_destroy(p);
	/* invalid combinations */
	const struct {
		uint64_t host;
		bool has_la, has_q;
		uint64_t la, q;
	} bad[] = {
		{0, true, false, 1, 0},	   /* lookahead with host 0 */
		{0, false, true, 0, 2},	   /* queue with host 0 */
		{MiB, true, false, 0, 0},  /* lookahead 0 with host */
		{MiB, false, true, 0, 0},  /* queue 0 with host */
		{MiB, true, true, 1, 2},   /* more reads than slots */
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		o.host_budget_bytes = bad[i].host;
		o.has_lookahead = bad[i].has_la;
		o.lookahead = bad[i].la;
		o.has_queue = bad[i].has_q;
		o.queue = bad[i].q;
		p = (strata_plan *)&o; /* must be set to NULL */
		assert_int_equal(strata_plan_create(f->layout, &f->arch,
						    STRATA_DTYPE_BF16, &o,
						    &no_machine, &p, &err),
				 STRATA_E_PLAN_OPTIONS);
		assert_null(p);
	}
	/* a host budget smaller than one unit: direct reads, not a misfit */
	o.host_budget_bytes = MiB;
	o.has_lookahead = o.has_queue = false;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_lookahead(p) == 0 && strata_plan_host_total(p) == 0);
	assert_true(has_code(p, STRATA_EXPLAIN_DISK_DIRECT_TO_DEVICE));
	strata_plan_destroy(p);
	/* given lookahead and queue are used as given */
	o.host_budget_bytes = 64 * MiB;
	o.lookahead = 3;
	o.queue = 2;
	o.has_lookahead = o.has_queue = true;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_lookahead(p) == 3 && strata_plan_queue(p) == 2);
	assert_true(strata_plan_host_total(p) == 12 * MiB);
	strata_plan_destroy(p);
	/* lookahead/queue with a non-disk forced mode */
	o.mode = STRATA_RESIDENCY_RESIDENT;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_OPTIONS);
	fixture_free(f);
}

static void nothing_fits_names_shortfalls_and_the_smallest_budget(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(MiB, 0);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	assert_non_null(p); /* the candidates stay available to show */
	assert_null(strata_plan_selected(p));
	assert_true(has_code(p, STRATA_EXPLAIN_NOTHING_FITS));
	assert_non_null(strstr(err.message, "resident needs "));
	assert_non_null(strstr(err.message, "host:1 needs "));
	assert_non_null(strstr(err.message, "disk needs "));
	/* one change makes it fit: disk reads straight to the device with
	 * host 0, so only the device budget is short; the fix names it in
	 * the units the option takes, and only it */
	const strata_plan_candidate *disk = last_of(p, STRATA_RESIDENCY_DISK);
	char size[32], want[96];
	strata_plan_size_option(disk->device_bytes, size, sizeof size);
	snprintf(want, sizeof want, "give --device-memory %s (then disk fits",
		 size);
	if (!strstr(err.fix, want))
		fail_msg("fix '%s' lacks '%s'", err.fix, want);
	assert_null(strstr(err.fix, "--host-memory"));
	uint64_t typed;
	assert_int_equal(strata_size_parse(size, &typed, &err), STRATA_OK);
	assert_true(typed >= disk->device_bytes &&
		    typed - disk->device_bytes < disk->device_bytes / 100 + 1);
	uint64_t exact = disk->device_bytes;
	strata_plan_destroy(p);
	/* the named size fits; the exact bytes fit; one byte less does not */
	o.device_budget_bytes = typed;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_DISK);
	strata_plan_destroy(p);
	o.device_budget_bytes = exact;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	strata_plan_destroy(p);
	o.device_budget_bytes = exact - 1;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* Sizes the options take: whole units, else hundredths rounded up, never
 * below the bytes. */
static void sizes_are_given_in_option_units(void **state)
{
	(void)state;
	const struct {
		uint64_t bytes;
		const char *text;
	} cases[] = {{2 * GiB, "2GiB"}, {3 * MiB, "3MiB"}, {512, "512"},
		     {GiB + 1, "1.01GiB"}, {36 * MiB + 5, "36.01MiB"},
		     {1536, "1.50KiB"}, {1537, "1.51KiB"}};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char buf[32];
		strata_plan_size_option(cases[i].bytes, buf, sizeof buf);
		assert_string_equal(buf, cases[i].text);
	}
}

static void forced_modes_select_only_themselves(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(GiB, GiB);
	o.mode = STRATA_RESIDENCY_HOST;
	o.host_depth = 3;
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_HOST);
	assert_true(strata_plan_depth(p) == 3);
	assert_true(has_code(p, STRATA_EXPLAIN_FORCED_BY_OPTION));
	strata_plan_destroy(p);
	/* a depth deeper than the model is sized as asked (not clamped) */
	o.host_depth = 100;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_depth(p) == 100);
	assert_true(strata_plan_selected(p)->weights.window_bytes == 32 * MiB);
	strata_plan_destroy(p);
	/* forced resident that does not fit is an error, not a fallback */
	o = opts(RESIDENT_DEVICE - 256, GiB);
	o.mode = STRATA_RESIDENCY_RESIDENT;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	assert_true(has_code(p, STRATA_EXPLAIN_FORCED_MODE_DOES_NOT_FIT));
	strata_plan_destroy(p);
	fixture_free(f);
}

static void predictions_follow_bytes_and_bandwidths(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	/* room for the CUDA driver's bytes of the pinned host window */
	strata_plan_options o =
		opts(MiB + 8 * MiB + KV_CPU + WS +
			     strata_plan_cuda_driver_bytes(GiB),
		     GiB);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	o.h2d_bandwidth = 1e9;
	o.memory_bandwidth = 1e12;
	o.disk_bandwidth = 1e8;
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	const strata_plan_memory *m = strata_plan_get_memory(p);
	double compute =
		(double)(33 * MiB + m->kv_cache_bytes) / 1e12; /* seconds */
	double h2d = (double)(32 * MiB) / 1e9;
	const strata_plan_candidate *res = strata_plan_candidate_at(p, 0);
	const strata_plan_candidate *h1 = strata_plan_candidate_at(p, 1);
	const strata_plan_candidate *h2 = strata_plan_candidate_at(p, 2);
	assert_float_equal(res->predicted_ms_per_forward, compute * 1e3, 1e-9);
	assert_float_equal(h1->predicted_ms_per_forward, (compute + h2d) * 1e3,
			   1e-9);
	assert_float_equal(h2->predicted_ms_per_forward, h2d * 1e3, 1e-9);
	assert_float_equal(h2->tokens_per_second, 1.0 / h2d, 1e-6);
	assert_true(h2->moved_bytes_per_forward == 32 * MiB);
	/* disk reads the file bytes (half: bf16 on disk) */
	const strata_plan_candidate *d = last_of(p, STRATA_RESIDENCY_DISK);
	assert_float_equal(d->predicted_ms_per_forward,
			   (double)(16 * MiB) / 1e8 * 1e3, 1e-9);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void unknown_architecture_sizes_weights_only(void **state)
{
	(void)state;
	fixture *f = fixture_make(2);
	strata_plan_arch unknown = {.known = false};
	strata_plan_options o = opts(GiB, GiB);
	strata_plan *p;
	strata_error err;
	assert_int_equal(strata_plan_create(f->layout, &unknown,
					    STRATA_DTYPE_BF16, &o, &no_machine,
					    &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_device_total(p) == 9 * MiB);
	assert_true(has_code(p, STRATA_EXPLAIN_ARCHITECTURE_UNKNOWN));
	strata_json j;
	strata_json_init(&j, false);
	strata_plan_write_json(p, "m", &j);
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	json_error_t jerr;
	json_t *doc = json_loads(j.buf, 0, &jerr);
	assert_non_null(doc);
	assert_true(json_is_null(json_object_get(
		json_object_get(doc, "architecture"), "layers")));
	assert_true(json_is_null(
		json_object_get(json_object_get(doc, "memory"), "kv_cache_bytes")));
	json_t *c0 = json_array_get(json_object_get(doc, "candidates"), 0);
	assert_true(json_is_null(json_object_get(c0, "kv_cache_bytes")));
	json_decref(doc);
	strata_json_fini(&j);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void json_has_the_documented_shape(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(MiB + 12 * MiB + KV_CPU + WS, 64 * MiB);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	strata_json j;
	strata_json_init(&j, true);
	strata_plan_write_json(p, "model-dir", &j);
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	json_error_t jerr;
	json_t *doc = json_loads(j.buf, 0, &jerr);
	assert_non_null(doc);
	json_t *cands = json_object_get(doc, "candidates");
	assert_int_equal(json_array_size(cands), strata_plan_candidate_count(p));
	size_t i;
	json_t *c;
	json_array_foreach(cands, i, c) {
		json_t *w = json_object_get(c, "weights");
		assert_int_equal(json_object_size(w), 4); /* exactly these */
		const strata_plan_candidate *pc = strata_plan_candidate_at(p, i);
		assert_true((uint64_t)json_integer_value(json_object_get(
				    w, "static_bytes")) == pc->weights.static_bytes);
		assert_true((uint64_t)json_integer_value(json_object_get(
				    w, "window_bytes")) == pc->weights.window_bytes);
		assert_true((uint64_t)json_integer_value(json_object_get(
				    w, "required_bytes")) ==
			    pc->weights.required_bytes);
		assert_true((uint64_t)json_integer_value(
				    json_object_get(w, "depth")) == pc->weights.depth);
		assert_true(json_is_integer(json_object_get(c, "device_bytes")));
		assert_true(json_is_integer(json_object_get(c, "kv_cache_bytes")));
		assert_true(json_is_boolean(json_object_get(c, "fits")));
	}
	/* a plan alone has exactly the six budget keys scripts know */
	assert_int_equal(json_object_size(json_object_get(doc, "budgets")), 6);
	assert_null(json_object_get(json_object_get(doc, "budgets"),
				    "shared_by"));
	json_t *sel = json_object_get(doc, "selected");
	assert_string_equal(json_string_value(json_object_get(sel, "name")),
			    "host:2");
	assert_int_equal(json_integer_value(json_object_get(sel, "index")),
			 strata_plan_selected_index(p));
	json_t *ex = json_object_get(doc, "explanations");
	assert_int_equal(json_array_size(ex), strata_plan_explanation_count(p));
	bool found = false;
	json_array_foreach(ex, i, c) found |= !strcmp(
		json_string_value(json_object_get(c, "code")),
		"host_window_selected");
	assert_true(found);
	json_decref(doc);
	strata_json_fini(&j);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void sparse_units_list_a_bounded_number_of_windows(void **state)
{
	(void)state;
	strata_plan_param prm[2] = {
		{.name = "a", .owner = {.kind = STRATA_OWNER_UNIT, .group = "g",
					.group_len = 1, .unit = 0}},
		{.name = "b", .owner = {.kind = STRATA_OWNER_UNIT, .group = "g",
					.group_len = 1,
					.unit = UINT64_C(1) << 63}},
	};
	fixture *f = calloc(1, sizeof *f);
	f->bytes[0] = 256;
	f->bytes[1] = 512;
	strata_plan_layout *l;
	strata_error err;
	assert_int_equal(strata_plan_layout_create(prm, 2, fixture_bytes, f,
						   NULL, 0, &l, &err),
			 STRATA_OK);
	strata_plan_arch unknown = {0};
	strata_plan_options o = opts(GiB, GiB);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	strata_plan *p;
	assert_int_equal(strata_plan_create(l, &unknown, STRATA_DTYPE_F32, &o,
					    &no_machine, &p, &err),
			 STRATA_OK);
	/* resident, host:1..256, host:2^63+1, disk */
	assert_int_equal(uniform_count(p),
			 STRATA_PLAN_MAX_HOST_CANDIDATES + 3);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_WINDOW_LIST_TRUNCATED));
	const strata_plan_candidate *last = strata_plan_candidate_at(
		p, STRATA_PLAN_MAX_HOST_CANDIDATES + 1);
	assert_true(last->weights.depth == (UINT64_C(1) << 63) + 1);
	assert_true(last->weights.window_bytes == 768);
	strata_plan_destroy(p);
	strata_plan_layout_destroy(l);
	free(f);
}

static void plan_allocation_failures_leave_nothing(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(MiB + 12 * MiB + KV_CPU + WS, 64 * MiB);
	for (long k = 0;; k++) {
		strata_plan *p = NULL;
		strata_error err;
		strata_alloc_fail_after(k);
		strata_status s = strata_plan_create(f->layout, &f->arch,
						     STRATA_DTYPE_BF16, &o,
						     &no_machine, &p, &err);
		strata_alloc_fail_after(-1);
		if (s == STRATA_OK) {
			assert_true(strata_plan_depth(p) == 2);
			strata_plan_destroy(p);
			assert_true(k > 0);
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
		cmocka_unit_test(resident_is_chosen_when_it_fits),
		cmocka_unit_test(host_window_is_the_fastest_fitting_depth),
		cmocka_unit_test(disk_options_follow_the_host_budget),
		cmocka_unit_test(nothing_fits_names_shortfalls_and_the_smallest_budget),
		cmocka_unit_test(sizes_are_given_in_option_units),
		cmocka_unit_test(forced_modes_select_only_themselves),
		cmocka_unit_test(predictions_follow_bytes_and_bandwidths),
		cmocka_unit_test(unknown_architecture_sizes_weights_only),
		cmocka_unit_test(json_has_the_documented_shape),
		cmocka_unit_test(sparse_units_list_a_bounded_number_of_windows),
		cmocka_unit_test(plan_allocation_failures_leave_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
