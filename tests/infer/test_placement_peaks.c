/* test_placement_peaks.c - the plan's memory against what a run holds,
 * exactly (issue 17: peaks at most the plan and within 1 % of it): on the
 * quantized GGUF files of tests/data/quant and every reference model, each
 * placement on one CPU device and the CPU (units resident, streamed through
 * the window, computed on the CPU; statics where the planner puts them) and
 * each uniform mode (resident, host:1, host:2, disk), a prompt of two
 * prefill chunks and decode steps, then every arena of each tier (the
 * residency engine's device and host arenas, each forward-pass site's
 * activation and KV arena) summed: at most the plan's device and host
 * totals and at least 99 % of each; and in each placement the bytes the
 * window moved are the plan's streamed bytes per pass (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define QUANT STRATA_SOURCE_DIR "/tests/data/quant/"
#define GIB (1ull << 30)
#define TOLERANCE 0.01 /* issue 17: within 1 % of the plan */

static const char *const files[] = {"model-Q8_0.gguf", "model-Q4_K_M.gguf",
				    "model-F16.gguf"};

/* A run: forced counts (-1: the planner's) of a placement, or a uniform
 * mode (depth: host:D, lookahead: disk). */
typedef struct peak_case {
	const char *name;
	strata_residency_mode mode;
	int resident, cpu;
	uint64_t depth;
} peak_case;

static const peak_case cases[] = {
	{"one cpu unit", STRATA_RESIDENCY_AUTO, -1, 1, 0},
	{"every unit on the cpu", STRATA_RESIDENCY_AUTO, 0, 99, 0},
	{"streamed and cpu interleaved", STRATA_RESIDENCY_AUTO, 0, 1, 0},
	{"one resident, the rest streamed", STRATA_RESIDENCY_AUTO, 1, 0, 0},
	{"resident", STRATA_RESIDENCY_RESIDENT, -1, -1, 0},
	{"host:1", STRATA_RESIDENCY_HOST, -1, -1, 1},
	{"host:2", STRATA_RESIDENCY_HOST, -1, -1, 2},
	{"disk", STRATA_RESIDENCY_DISK, -1, -1, 0},
};
#define CASE_COUNT (sizeof cases / sizeof *cases)

typedef struct worst {
	double host, device;
} worst;

static double ratio(uint64_t used, uint64_t planned)
{
	return planned ? (double)used / (double)planned : 1.0;
}

static strata_session *open_case(const char *path, const peak_case *k)
{
	strata_session_options o = {.model_path = path, .threads = 1,
				    .positions = 48, .prefill = 16};
	o.plan = (strata_plan_options){
		.mode = k->mode, .host_depth = k->depth,
		.device = STRATA_PLAN_DEVICE_CPU, .has_device_budget = true,
		.device_budget_bytes = GIB, .has_host_budget = true,
		.host_budget_bytes = GIB};
	if (k->resident >= 0) {
		o.plan.has_resident_units = true;
		o.plan.resident_units = (uint64_t)k->resident;
	}
	if (k->cpu >= 0) {
		o.plan.has_cpu_units = true;
		o.plan.cpu_units = (uint64_t)k->cpu;
	}
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s, %s: %s / %s", path, k->name, err.message, err.fix);
	return s;
}

/* A prompt of more than one chunk, then decode steps. */
static void run_tokens(strata_session *s)
{
	strata_forward *f = strata_session_forward(s);
	uint32_t vocab = strata_session_hparams(s)->vocab;
	int32_t tokens[24];
	for (uint32_t i = 0; i < 24; i++)
		tokens[i] = (int32_t)((i * 37u + 1) % vocab);
	float *last = calloc(vocab, sizeof *last);
	assert_non_null(last);
	strata_error err;
	assert_int_equal(strata_forward_run(f, tokens, 20, 0, NULL, last, &err),
			 STRATA_OK);
	for (uint32_t i = 20; i < 24; i++)
		assert_int_equal(strata_forward_run(f, tokens + i, 1, i, NULL,
						    last, &err),
				 STRATA_OK);
	free(last);
}

/* Bytes the window moved against the plan's streamed bytes per pass
 * (prediction and telemetry agree on each link). */
static void check_moved(const char *what, strata_session *s,
			const strata_plan_candidate *c)
{
	strata_telemetry_snapshot t;
	strata_telemetry_get(
		strata_residency_telemetry(strata_session_residency(s)), &t);
	uint64_t layers = strata_session_hparams(s)->layers;
	uint64_t all = t.units[STRATA_PLACE_RESIDENT].count +
		       t.units[STRATA_PLACE_WINDOW].count +
		       t.units[STRATA_PLACE_CPU].count;
	assert_int_equal(all % layers, 0);
	uint64_t passes = all / layers;
	if (t.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes !=
	    c->streamed_bytes * passes)
		fail_msg("%s: moved %llu bytes host to device in %llu passes, "
			 "the plan %llu a pass", what,
			 (unsigned long long)t.transfers[STRATA_DIR_HOST_TO_DEVICE]
				 .bytes,
			 (unsigned long long)passes,
			 (unsigned long long)c->streamed_bytes);
}

static void run_case(const char *path, const peak_case *k, worst *w)
{
	strata_session *s = open_case(path, k);
	const strata_plan_candidate *c =
		strata_plan_selected(strata_session_plan(s));
	assert_non_null(c);
	bool placed = k->mode == STRATA_RESIDENCY_AUTO;
	assert_int_equal(c->mode,
			 placed ? STRATA_RESIDENCY_PLACEMENT : k->mode);
	run_tokens(s);
	strata_forward *f = strata_session_forward(s);
	strata_residency *e = strata_session_residency(s);
	uint32_t devices = c->devices ? c->devices : 1;
	uint64_t dev = 0;
	for (uint32_t d = 0; d < devices; d++) {
		strata_arena_stats a, b;
		strata_residency_device_arena_stats_at(e, d, &a);
		strata_forward_site_arena_stats(f, d, &b);
		assert_true(a.high_water_bytes <= a.capacity_bytes);
		/* disk: whether the reader had the next unit in before the
		 * window let the last one go depends on timing on so small a
		 * model, so its window is counted by what its arena takes */
		dev += (k->mode == STRATA_RESIDENCY_DISK ? a.capacity_bytes
							 : a.high_water_bytes) +
		       b.high_water_bytes;
	}
	strata_arena_stats h, cpu;
	strata_residency_host_arena_stats(e, &h);
	strata_forward_site_arena_stats(f, devices, &cpu); /* none: zero */
	uint64_t host = h.high_water_bytes + cpu.high_water_bytes;
	char name[96], what[512];
	strata_plan_candidate_name(c, name, sizeof name);
	snprintf(what, sizeof what, "%s, %s (%s)", path, k->name, name);
	double rh = ratio(host, c->host_bytes), rd = ratio(dev, c->device_bytes);
	print_message("%-60.60s host %9llu / %9llu (%.4f), device %9llu / "
		      "%9llu (%.4f)\n",
		      what, (unsigned long long)host,
		      (unsigned long long)c->host_bytes, rh,
		      (unsigned long long)dev,
		      (unsigned long long)c->device_bytes, rd);
	if (host > c->host_bytes || dev > c->device_bytes ||
	    rh < 1 - TOLERANCE || rd < 1 - TOLERANCE)
		fail_msg("%s: host %llu of plan %llu, device %llu of plan %llu: "
			 "not within 1 %% below the plan", what,
			 (unsigned long long)host,
			 (unsigned long long)c->host_bytes,
			 (unsigned long long)dev,
			 (unsigned long long)c->device_bytes);
	w->host = rh < w->host ? rh : w->host;
	w->device = rd < w->device ? rd : w->device;
	if (placed)
		check_moved(what, s, c);
	strata_error err;
	assert_int_equal(strata_session_finish(s, &err), STRATA_OK);
	strata_session_close(s);
}

/* Every quantized file and case. */
static void quantized_peaks_are_the_plan(void **state)
{
	(void)state;
	worst w = {1.0, 1.0};
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		char path[512];
		snprintf(path, sizeof path, "%s%s", QUANT, files[i]);
		for (size_t k = 0; k < CASE_COUNT; k++)
			run_case(path, &cases[k], &w);
	}
	print_message("least used / planned: host %.4f, device %.4f\n", w.host,
		      w.device);
}

/* Every reference model (every family, f32/f16/bf16) and case. */
static void reference_peaks_are_the_plan(void **state)
{
	(void)state;
	worst w = {1.0, 1.0};
	for (int i = 0; i < REF_MODEL_COUNT; i++) {
		char path[1024];
		ref_path(path, sizeof path, ref_models[i], NULL);
		for (size_t k = 0; k < CASE_COUNT; k++)
			run_case(path, &cases[k], &w);
	}
	print_message("least used / planned: host %.4f, device %.4f\n", w.host,
		      w.device);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(quantized_peaks_are_the_plan),
		cmocka_unit_test(reference_peaks_are_the_plan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
