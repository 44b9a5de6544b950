/* test_cuda_placement.c - placements on CUDA (issue 17): on every
 * reference model, runs with units computed on the CPU from host memory,
 * streamed through the GPU's window and interleaved with CPU units, and
 * with the statics on the CPU, give logits within 1e-3 of the resident
 * CUDA run (the CPU's f32 kernels against the GPU's) and the same greedy
 * text; the kinds run are the plan's and the window moved the plan's
 * streamed bytes per pass. Skipped (77) without a GPU (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/gpu_skip.h"
#include "support/refmodel.h"

#define GIB (1ull << 30)

typedef struct cuda_case {
	const char *name;
	int resident, cpu; /* -1: not forced */
} cuda_case;

static const cuda_case cases[] = {
	{"one cpu unit", -1, 1},
	{"every unit streamed", 0, 0},
	{"streamed and cpu interleaved", 0, 1},
	{"one resident, the rest on the cpu", 1, 99},
};
#define CASE_COUNT (sizeof cases / sizeof *cases)

static strata_session *open_cuda(const char *path, strata_plan_options po,
				 uint32_t positions, uint32_t prefill)
{
	strata_session_options o = {.model_path = path, .positions = positions,
				    .prefill = prefill, .plan = po,
				    .precision = STRATA_PRECISION_EXACT};
	o.plan.device = STRATA_PLAN_DEVICE_CUDA;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s: %s / %s", path, err.message, err.fix);
	return s;
}

static void snapshot(strata_session *s, strata_telemetry_snapshot *t)
{
	strata_telemetry_get(
		strata_residency_telemetry(strata_session_residency(s)), t);
}

/* The kinds run and the bytes moved against the plan, counted from
 * `before` (taken once the session is open: on CUDA the resident units'
 * one load is a host-to-device copy too, and it is no pass's). */
static void check_run(const char *what, strata_session *s, uint32_t layers,
		      const strata_telemetry_snapshot *before)
{
	const strata_plan_candidate *c =
		strata_plan_selected(strata_session_plan(s));
	assert_int_equal(c->mode, STRATA_RESIDENCY_PLACEMENT);
	strata_telemetry_snapshot t;
	snapshot(s, &t);
	t.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes -=
		before->transfers[STRATA_DIR_HOST_TO_DEVICE].bytes;
	for (int k = 0; k < STRATA_PLACE_COUNT; k++)
		t.units[k].count -= before->units[k].count;
	uint64_t all = t.units[STRATA_PLACE_RESIDENT].count +
		       t.units[STRATA_PLACE_WINDOW].count +
		       t.units[STRATA_PLACE_CPU].count;
	uint64_t passes = all / layers;
	if (all % layers || t.units[STRATA_PLACE_CPU].count != c->cpu_units * passes ||
	    t.units[STRATA_PLACE_WINDOW].count != c->window_units * passes ||
	    t.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes !=
		    c->streamed_bytes * passes)
		fail_msg("%s: ran %llu window, %llu cpu units, moved %llu "
			 "bytes over %llu passes; plan w%llu c%llu, %llu "
			 "bytes a pass", what,
			 (unsigned long long)t.units[STRATA_PLACE_WINDOW].count,
			 (unsigned long long)t.units[STRATA_PLACE_CPU].count,
			 (unsigned long long)t.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes,
			 (unsigned long long)passes,
			 (unsigned long long)c->window_units,
			 (unsigned long long)c->cpu_units,
			 (unsigned long long)c->streamed_bytes);
}

/* Every arena of each tier against the plan (issue 17: at most the plan
 * and within 1 % of it): each device's residency and forward-pass arenas
 * against its total less what no arena holds (the backend's reserved
 * bytes, the driver's page tables, the product workspace of a device that
 * computes); the host's peak (its tier and the load staging, as the
 * telemetry records them) and the CPU site's arena against the host
 * total. */
static void check_peaks(const char *what, strata_session *s)
{
	const strata_plan *p = strata_session_plan(s);
	const strata_plan_candidate *c = strata_plan_selected(p);
	const strata_plan_options *o = strata_plan_get_options(p);
	const strata_plan_memory *m = strata_plan_get_memory(p);
	strata_residency *e = strata_session_residency(s);
	strata_forward *f = strata_session_forward(s);
	for (uint32_t d = 0; d < c->devices; d++) {
		strata_arena_stats a, b;
		strata_residency_device_arena_stats_at(e, d, &a);
		strata_forward_site_arena_stats(f, d, &b);
		uint64_t plan = c->split_device_bytes[d] -
				o->backend_reserved_bytes - c->driver_bytes -
				(b.capacity_bytes ? m->product_workspace_bytes
						  : 0);
		uint64_t used = a.high_water_bytes + b.high_water_bytes;
		if (used > plan || (double)used < 0.99 * (double)plan)
			fail_msg("%s: device %u arenas %llu + %llu, plan %llu",
				 what, d, (unsigned long long)a.high_water_bytes,
				 (unsigned long long)b.high_water_bytes,
				 (unsigned long long)plan);
	}
	strata_telemetry_snapshot t;
	snapshot(s, &t);
	strata_arena_stats cpu;
	strata_forward_site_arena_stats(f, c->devices, &cpu);
	uint64_t host = t.peak_bytes[STRATA_TIER_HOST] + cpu.high_water_bytes;
	if (host > c->host_bytes ||
	    (double)host < 0.99 * (double)c->host_bytes)
		fail_msg("%s: host peak %llu + CPU site %llu, plan %llu", what,
			 (unsigned long long)t.peak_bytes[STRATA_TIER_HOST],
			 (unsigned long long)cpu.high_water_bytes,
			 (unsigned long long)c->host_bytes);
}

static void check_model(const char *name)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *want = strata_alloc(cells * sizeof(float));
	float *got = strata_alloc(cells * sizeof(float));
	int32_t want_g[65], got_g[65];
	/* rg: r with the greedy tokens every run makes, at most 16 */
	uint32_t g = r.n_greedy > 16 ? 16 : r.n_greedy;
	uint32_t positions = r.n_tokens + g + 1;
	ref_data rg = r;
	rg.n_greedy = g;
	strata_plan_options po = {.mode = STRATA_RESIDENCY_RESIDENT,
				  .has_host_budget = true,
				  .host_budget_bytes = GIB};
	strata_session *rs = open_cuda(path, po, positions, r.n_tokens);
	strata_error err;
	ref_run_greedy(strata_session_forward(rs), &rg, rg.vocab, want, want_g);
	assert_int_equal(strata_session_finish(rs, &err), STRATA_OK);
	uint32_t layers = strata_session_hparams(rs)->layers;
	strata_session_close(rs);
	for (size_t i = 0; i < CASE_COUNT; i++) {
		char what[256];
		snprintf(what, sizeof what, "%s, %s", name, cases[i].name);
		strata_plan_options o = {.mode = STRATA_RESIDENCY_AUTO,
					 .has_host_budget = true,
					 .host_budget_bytes = GIB};
		o.has_resident_units = cases[i].resident >= 0;
		o.resident_units = (uint64_t)(cases[i].resident >= 0
						      ? cases[i].resident : 0);
		o.has_cpu_units = cases[i].cpu >= 0;
		o.cpu_units = (uint64_t)(cases[i].cpu >= 0 ? cases[i].cpu : 0);
		strata_session *s = open_cuda(path, o, positions, r.n_tokens);
		strata_telemetry_snapshot before;
		snapshot(s, &before);
		/* CUDA's half products against the CPU's f32 */
		char cmp[300];
		snprintf(cmp, sizeof cmp, "%s, against resident", what);
		ref_run_compare(cmp, strata_session_forward(s), &rg, want, 1e-3,
				got, got_g);
		assert_int_equal(strata_session_finish(s, &err), STRATA_OK);
		if (memcmp(got_g, want_g, (1 + g) * sizeof(int32_t)))
			fail_msg("%s: greedy text differs from resident", what);
		check_run(what, s, layers, &before);
		check_peaks(what, s);
		strata_session_close(s);
	}
	strata_free(want);
	strata_free(got);
	ref_free(&r);
}

static void test_cuda_placements_every_reference_model(void **state)
{
	(void)state;
	for (int i = 0; i < REF_MODEL_COUNT; i++)
		check_model(ref_models[i]);
}

int main(void)
{
	if (gpu_skip_without_device("test_infer_cuda_placement"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_placements_every_reference_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
