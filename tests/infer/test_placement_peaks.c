/* test_placement_peaks.c - the plan's memory against what a placement run
 * holds, on quantized GGUF files (issue 17: a Q8_0 run's host peak was
 * 1.25x its plan on the GPU machine): for each file and placement on one
 * CPU device and the CPU (units resident, streamed through the window,
 * computed on the CPU; statics where the planner puts them), a prompt
 * of one prefill chunk and a few decode steps, then every arena's high
 * water (the residency engine's device and host arenas, each site's
 * activation and KV arena) is at most the plan's device and host totals,
 * and below them by no more than the activation buffers the plan counts
 * and the forward pass does not take (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/infer.h"
#include "strata/plan.h"
#include "strata/residency.h"

#define QUANT STRATA_SOURCE_DIR "/tests/data/quant/"
#define GIB (1ull << 30)

static const char *const files[] = {"model-Q8_0.gguf", "model-Q4_K_M.gguf",
				    "model-F16.gguf"};

/* Forced counts (-1: the planner's). */
static const struct {
	const char *name;
	int resident, cpu;
} cases[] = {
	{"one cpu unit", -1, 1},
	{"every unit on the cpu", 0, 99},
	{"streamed and cpu interleaved", 0, 1},
	{"one resident, the rest streamed", 1, 0},
};

static double ratio(uint64_t used, uint64_t planned)
{
	return planned ? (double)used / (double)planned : 0.0;
}

static void run_case(const char *file, size_t k, double *worst_host,
		     double *worst_device)
{
	char path[512];
	snprintf(path, sizeof path, "%s%s", QUANT, file);
	strata_session_options o = {.model_path = path, .threads = 1,
				    .positions = 48, .prefill = 16};
	o.plan = (strata_plan_options){
		.device = STRATA_PLAN_DEVICE_CPU, .has_device_budget = true,
		.device_budget_bytes = GIB, .has_host_budget = true,
		.host_budget_bytes = GIB};
	if (cases[k].resident >= 0) {
		o.plan.has_resident_units = true;
		o.plan.resident_units = (uint64_t)cases[k].resident;
	}
	if (cases[k].cpu >= 0) {
		o.plan.has_cpu_units = true;
		o.plan.cpu_units = (uint64_t)cases[k].cpu;
	}
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s, %s: %s / %s", file, cases[k].name, err.message,
			 err.fix);
	const strata_plan_candidate *c =
		strata_plan_selected(strata_session_plan(s));
	assert_non_null(c);
	assert_int_equal(c->mode, STRATA_RESIDENCY_PLACEMENT);
	strata_forward *f = strata_session_forward(s);
	uint32_t vocab = strata_session_hparams(s)->vocab;
	int32_t tokens[24];
	for (uint32_t i = 0; i < 24; i++)
		tokens[i] = (int32_t)((i * 37u + 1) % vocab);
	float *last = calloc(vocab, sizeof *last);
	assert_non_null(last);
	/* a prompt of more than one chunk, then decode steps */
	assert_int_equal(strata_forward_run(f, tokens, 20, 0, NULL, last, &err),
			 STRATA_OK);
	for (uint32_t i = 20; i < 24; i++)
		assert_int_equal(strata_forward_run(f, tokens + i, 1, i, NULL,
						    last, &err),
				 STRATA_OK);
	free(last);
	strata_residency *e = strata_session_residency(s);
	uint64_t dev = 0;
	for (uint32_t d = 0; d < c->devices; d++) {
		strata_arena_stats a, b;
		strata_residency_device_arena_stats_at(e, d, &a);
		strata_forward_site_arena_stats(f, d, &b);
		dev += a.high_water_bytes + b.high_water_bytes;
	}
	strata_arena_stats h, cpu;
	strata_residency_host_arena_stats(e, &h);
	strata_forward_site_arena_stats(f, c->devices, &cpu);
	uint64_t host = h.high_water_bytes + cpu.high_water_bytes;
	char name[96];
	strata_plan_candidate_name(c, name, sizeof name);
	print_message("%-18s %-34s %-28s host %9llu / %9llu (%.4f), device "
		      "%9llu / %9llu (%.4f)\n",
		      file, cases[k].name, name, (unsigned long long)host,
		      (unsigned long long)c->host_bytes,
		      ratio(host, c->host_bytes), (unsigned long long)dev,
		      (unsigned long long)c->device_bytes,
		      ratio(dev, c->device_bytes));
	if (host > c->host_bytes || dev > c->device_bytes)
		fail_msg("%s, %s: host %llu > plan %llu or device %llu > plan "
			 "%llu", file, cases[k].name, (unsigned long long)host,
			 (unsigned long long)c->host_bytes,
			 (unsigned long long)dev,
			 (unsigned long long)c->device_bytes);
	/* the only slack: the plan's activation buffers the forward pass
	 * never takes (keys and values go straight into the KV cache, the
	 * tiled attention keeps no score matrix, the host writes the logits
	 * where it addresses the site), less its rope frequencies, on each
	 * site that computes (docs/plan.md "How close") */
	const strata_plan_memory *m = strata_plan_get_memory(strata_session_plan(s));
	uint64_t unused = m->k_bytes + m->v_bytes +
			  m->att_bytes + m->logits_bytes;
	uint64_t dev_sites = c->resident_units + c->window_units > 0 ||
			     !c->statics_on_cpu;
	uint64_t host_sites = c->cpu_units > 0 || c->statics_on_cpu;
	if (c->host_bytes - host > host_sites * unused ||
	    c->device_bytes - dev > dev_sites * unused)
		fail_msg("%s, %s: host %llu of %llu, device %llu of %llu: more "
			 "slack than the %llu unused bytes a site", file,
			 cases[k].name, (unsigned long long)host,
			 (unsigned long long)c->host_bytes,
			 (unsigned long long)dev,
			 (unsigned long long)c->device_bytes,
			 (unsigned long long)unused);
	double rh = ratio(host, c->host_bytes), rd = ratio(dev, c->device_bytes);
	if (c->host_bytes && rh < *worst_host)
		*worst_host = rh;
	if (rd < *worst_device)
		*worst_device = rd;
	assert_int_equal(strata_session_finish(s, &err), STRATA_OK);
	strata_session_close(s);
}

/* Every file and case: peaks at most the plan, short of it by no more
 * than the buffers the forward pass leaves out. */
static void peaks_are_within_the_plan(void **state)
{
	(void)state;
	double worst_host = 1.0, worst_device = 1.0;
	for (size_t i = 0; i < sizeof files / sizeof *files; i++)
		for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
			run_case(files[i], k, &worst_host, &worst_device);
	print_message("least used / planned: host %.4f, device %.4f\n",
		      worst_host, worst_device);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(peaks_are_within_the_plan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
