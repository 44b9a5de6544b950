/* test_placement_run.c - placements run for real (issue 17): on every
 * reference model and stories260K, a run whose units are resident on one
 * to three CPU devices (CPU backends each bounded by its budget), streamed
 * through the last device's window, or computed on the CPU gives logits
 * within 1e-5 of the resident run and the same greedy text; forced counts
 * are the ones run (the telemetry's units per kind); every device's and
 * the host's peak stays within the plan's figure; and the bytes the window
 * moved are the plan's streamed bytes per pass; and the window's first
 * streamed unit starts copying as a pass starts (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define STORIES STRATA_SOURCE_DIR "/models/stories260K"
#define GIB (1ull << 30)

/* One placement case: forced counts (-1: the planner's), and device
 * budgets: 0 devices is one device of 1 GiB; else the first devices hold
 * about one unit each (small) and the last 1 GiB. */
typedef struct place_case {
	const char *name;
	int resident, cpu; /* -1: not forced; -2: every unit; -3: all but one */
	uint32_t devices;
} place_case;

static const place_case cases[] = {
	{"one cpu unit", -1, 1, 0},
	{"every unit on the cpu", -1, -2, 0},
	{"streamed and cpu interleaved", 0, 1, 0},
	{"split over two devices", -2, 0, 2},
	{"split over three devices, streamed", -3, 0, 3},
	{"split over two devices and the cpu", -3, 1, 2},
};
#define CASE_COUNT (sizeof cases / sizeof *cases)

typedef struct run_out {
	float *logits;	 /* (n, vocab) */
	int32_t greedy[65];
} run_out;

static strata_status collect(void *user, int32_t tok, strata_error *err)
{
	(void)err;
	int32_t *out = user;
	out[++out[0]] = tok;
	return STRATA_OK;
}

/* Bytes a device of the split needs for one resident unit (the first
 * with the statics): from the resident plan's figures. */
static uint64_t one_unit_device(const strata_plan *p, bool statics)
{
	const strata_plan_candidate *c = strata_plan_selected(p);
	const strata_plan_memory *m = strata_plan_get_memory(p);
	const strata_plan_layout_info *info = strata_plan_get_layout_info(p);
	uint64_t unit = (info->largest_unit_bytes + STRATA_ALIGN - 1) /
			STRATA_ALIGN * STRATA_ALIGN;
	return (statics ? c->static_device_bytes : 0) + unit +
	       2 * m->kv_buffer_bytes + m->workspace_bytes +
	       m->product_workspace_bytes;
}

static strata_session *open_run(const char *path, strata_plan_options po,
				uint32_t positions, uint32_t prefill)
{
	strata_session_options o = {.model_path = path, .threads = 1,
				    .positions = positions,
				    .prefill = prefill, .plan = po};
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s: %s / %s", path, err.message, err.fix);
	return s;
}

/* The reference tokens' logits in one prefill, then greedy tokens. */
static void run_it(strata_session *s, const int32_t *tokens, uint32_t n,
		   uint32_t n_greedy, run_out *out)
{
	strata_forward *f = strata_session_forward(s);
	const strata_infer_hparams *hp = strata_session_hparams(s);
	strata_error err;
	strata_status st = strata_forward_run(f, tokens, n, 0, out->logits,
					      NULL, &err);
	if (st)
		fail_msg("forward: %s", err.message);
	strata_forward_reset(f);
	strata_sampler *smp;
	strata_sampler_params sp = {.temperature = 0, .top_p = 1,
				    .repeat_penalty = 1};
	assert_int_equal(strata_sampler_create(&sp, hp->vocab, &smp, &err),
			 STRATA_OK);
	out->greedy[0] = 0;
	st = strata_generate(f, smp, tokens, n, n_greedy, -1, collect,
			     out->greedy, NULL, &err);
	if (st)
		fail_msg("generate: %s", err.message);
	strata_sampler_destroy(smp);
	assert_int_equal(strata_session_finish(s, &err), STRATA_OK);
}

/* The plan options of case k for a model of `layers` units. */
static strata_plan_options options_of(const place_case *k, uint32_t layers,
				      const strata_plan *resident)
{
	strata_plan_options po = {.mode = STRATA_RESIDENCY_AUTO,
				  .has_device_budget = true,
				  .device_budget_bytes = GIB,
				  .has_host_budget = true,
				  .host_budget_bytes = GIB};
	uint64_t n = layers;
	if (k->resident != -1) {
		po.has_resident_units = true;
		po.resident_units = k->resident >= 0 ? (uint64_t)k->resident
				    : n > (uint64_t)(-k->resident - 2)
					    ? n - (uint64_t)(-k->resident - 2)
					    : 0;
	}
	if (k->cpu != -1) {
		po.has_cpu_units = true;
		po.cpu_units = k->cpu >= 0 ? (uint64_t)k->cpu : n;
	}
	if (k->devices > 1) {
		po.device_count = k->devices;
		for (uint32_t d = 0; d + 1 < k->devices; d++)
			po.device_budgets[d] = one_unit_device(resident, d == 0);
		po.device_budgets[k->devices - 1] = GIB;
		po.device_budget_bytes = po.device_budgets[0];
	}
	return po;
}

/* Telemetry and arenas of a placement run against its plan. */
static void check_figures(const char *what, strata_session *s,
			  const strata_plan_options *po)
{
	const strata_plan *p = strata_session_plan(s);
	const strata_plan_candidate *c = strata_plan_selected(p);
	uint32_t layers = strata_session_hparams(s)->layers;
	assert_int_equal(c->mode, STRATA_RESIDENCY_PLACEMENT);
	if (po->has_cpu_units)
		assert_int_equal(c->cpu_units, po->cpu_units < layers
							 ? po->cpu_units
							 : layers);
	if (po->has_resident_units)
		assert_int_equal(c->resident_units,
				 po->resident_units < layers - c->cpu_units
					 ? po->resident_units
					 : layers - c->cpu_units);
	strata_residency *e = strata_session_residency(s);
	strata_telemetry_snapshot t;
	strata_telemetry_get(strata_residency_telemetry(e), &t);
	/* forced splits: both passes alike, each pass acquires every unit */
	uint64_t all = t.units[STRATA_PLACE_RESIDENT].count +
		       t.units[STRATA_PLACE_WINDOW].count +
		       t.units[STRATA_PLACE_CPU].count;
	assert_int_equal(all % layers, 0);
	uint64_t passes = all / layers;
	if (t.units[STRATA_PLACE_CPU].count != c->cpu_units * passes ||
	    t.units[STRATA_PLACE_RESIDENT].count != c->resident_units * passes ||
	    t.units[STRATA_PLACE_WINDOW].count != c->window_units * passes)
		fail_msg("%s: ran %llu resident, %llu window, %llu cpu over "
			 "%llu passes; plan r%llu c%llu w%llu", what,
			 (unsigned long long)t.units[STRATA_PLACE_RESIDENT].count,
			 (unsigned long long)t.units[STRATA_PLACE_WINDOW].count,
			 (unsigned long long)t.units[STRATA_PLACE_CPU].count,
			 (unsigned long long)passes,
			 (unsigned long long)c->resident_units,
			 (unsigned long long)c->cpu_units,
			 (unsigned long long)c->window_units);
	/* prediction and telemetry agree on the bytes moved */
	assert_int_equal(t.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes,
			 c->streamed_bytes * passes);
	/* every device's peak and the host's within the plan */
	strata_forward *f = strata_session_forward(s);
	for (uint32_t d = 0; d < c->devices; d++) {
		strata_arena_stats a, b;
		strata_residency_device_arena_stats_at(e, d, &a);
		strata_forward_site_arena_stats(f, d, &b);
		if (a.high_water_bytes + b.high_water_bytes >
		    c->split_device_bytes[d])
			fail_msg("%s: device %u peak %llu + %llu over its plan "
				 "%llu", what, d,
				 (unsigned long long)a.high_water_bytes,
				 (unsigned long long)b.high_water_bytes,
				 (unsigned long long)c->split_device_bytes[d]);
	}
	strata_arena_stats h, cpu;
	strata_residency_host_arena_stats(e, &h);
	strata_forward_site_arena_stats(f, c->devices, &cpu);
	if (h.high_water_bytes + cpu.high_water_bytes > c->host_bytes)
		fail_msg("%s: host peak %llu + %llu over its plan %llu", what,
			 (unsigned long long)h.high_water_bytes,
			 (unsigned long long)cpu.high_water_bytes,
			 (unsigned long long)c->host_bytes);
}

static void check_model(const char *path, const int32_t *tokens, uint32_t n,
			uint32_t n_greedy, uint32_t vocab, const float *ref)
{
	uint64_t cells = (uint64_t)n * vocab;
	run_out want = {.logits = strata_alloc(cells * sizeof(float))};
	run_out got = {.logits = strata_alloc(cells * sizeof(float))};
	strata_plan_options po = {.mode = STRATA_RESIDENCY_RESIDENT,
				  .has_device_budget = true,
				  .device_budget_bytes = GIB,
				  .has_host_budget = true,
				  .host_budget_bytes = GIB};
	uint32_t positions = n + n_greedy + 1;
	strata_session *rs = open_run(path, po, positions, n);
	run_it(rs, tokens, n, n_greedy, &want);
	if (ref)
		assert_true(ref_max_diff(want.logits, ref, cells) <= 1e-3);
	uint32_t layers = strata_session_hparams(rs)->layers;
	for (size_t i = 0; i < CASE_COUNT; i++) {
		char what[256];
		snprintf(what, sizeof what, "%s, %s", path, cases[i].name);
		strata_plan_options o = options_of(&cases[i], layers,
						   strata_session_plan(rs));
		strata_session *s = open_run(path, o, positions, n);
		run_it(s, tokens, n, n_greedy, &got);
		double d = ref_max_diff(got.logits, want.logits, cells);
		if (d > 1e-5)
			fail_msg("%s: logits %g from resident", what, d);
		if (memcmp(got.greedy, want.greedy,
			   (1 + n_greedy) * sizeof(int32_t)))
			fail_msg("%s: greedy text differs from resident", what);
		check_figures(what, s, &o);
		strata_session_close(s);
	}
	strata_session_close(rs);
	strata_free(want.logits);
	strata_free(got.logits);
}

static void test_every_reference_model(void **state)
{
	(void)state;
	for (int i = 0; i < REF_MODEL_COUNT; i++) {
		char path[1024];
		ref_path(path, sizeof path, ref_models[i], NULL);
		ref_data r;
		ref_load(ref_models[i], &r);
		uint32_t n = r.n_tokens, g = r.n_greedy > 8 ? 8 : r.n_greedy;
		check_model(path, r.tokens, n, g, r.vocab, r.logits);
		ref_free(&r);
	}
}

static void test_stories260k(void **state)
{
	(void)state;
	static const int32_t tokens[] = {1, 403, 407, 261, 378, 109, 434};
	check_model(STORIES, tokens, 7, 12, 512, NULL);
}

/* Three resident units of five, the other two streamed (the window two
 * units deep): acquiring the first unit of a pass starts the copies of
 * the first streamed units, so they overlap the resident units' compute
 * as the plan's window fill prices it (cost.c), rather than waiting until
 * the pass is within the window's depth of them. */
static void test_window_starts_with_the_pass(void **state)
{
	(void)state;
	strata_plan_options po = {.mode = STRATA_RESIDENCY_AUTO,
				  .has_device_budget = true,
				  .device_budget_bytes = GIB,
				  .has_host_budget = true,
				  .host_budget_bytes = GIB,
				  .has_resident_units = true,
				  .resident_units = 3,
				  .has_cpu_units = true,
				  .cpu_units = 0};
	strata_session *s = open_run(STORIES, po, 16, 4);
	const strata_plan_candidate *c =
		strata_plan_selected(strata_session_plan(s));
	assert_int_equal(c->mode, STRATA_RESIDENCY_PLACEMENT);
	assert_int_equal(c->resident_units, 3);
	assert_int_equal(c->window_units, 2);
	assert_int_equal(c->decode_depth, 2);
	strata_residency *e = strata_session_residency(s);
	strata_error err;
	strata_residency_view v;
	strata_arena_stats before, after;
	strata_residency_device_arena_stats(e, &before);
	assert_int_equal(strata_residency_set_pass(e, false, &err), STRATA_OK);
	assert_int_equal(strata_residency_acquire(e, 0, 0, &v, &err), STRATA_OK);
	strata_residency_device_arena_stats(e, &after);
	/* both streamed units (3 and 4) are placed while unit 0 is held */
	assert_int_equal(after.live_blocks, before.live_blocks + 2);
	assert_true(after.used_bytes > before.used_bytes);
	assert_int_equal(strata_residency_release(e, 0, 0, &err), STRATA_OK);
	/* and the resident units after it keep the window they opened */
	for (uint64_t u = 1; u < 5; u++) {
		assert_int_equal(strata_residency_acquire(e, 0, u, &v, &err),
				 STRATA_OK);
		assert_int_equal(strata_residency_release(e, 0, u, &err),
				 STRATA_OK);
	}
	strata_telemetry_snapshot t;
	strata_telemetry_get(strata_residency_telemetry(e), &t);
	assert_int_equal(t.prefetch_misses, 0);
	assert_int_equal(t.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes,
			 c->streamed_bytes);
	strata_session_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_reference_model),
		cmocka_unit_test(test_stories260k),
		cmocka_unit_test(test_window_starts_with_the_pass),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
