/* test_cuda_forward.c - the forward pass on the CUDA backend through the
 * session `strata run` and `strata logits` use (issue 8): every reference
 * model of tests/data/reference in every residency mode the engine runs on
 * CUDA (resident, host:1, host:2, disk with a host lookahead of 1 and of 2;
 * disk reads straight into device memory are refused by the engine there)
 * gives logits within 1e-3 (f32 weights) or 2e-2 (bf16/f16 weights, kept
 * half on the device) of transformers', greedy tokens equal to the CPU
 * backend's on the f32 models, and stories260K's greedy text from BOS equal
 * to llama2.c's byte for byte. Device memory: the engine's and the forward
 * pass's peaks within the plan, and generating allocates no device memory.
 * Exits 77 (skipped) where no CUDA device is visible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"
#include "support/gpu_skip.h"
#include "strata/text.h"

#define MIB (1ull << 20)
#define STORIES_HF STRATA_SOURCE_DIR "/models/stories260K"
#define STORIES_GGUF STRATA_SOURCE_DIR "/tests/data/gguf/stories260K.gguf"
#define STORIES_TEXT                                                           \
	STRATA_SOURCE_DIR "/tests/data/reference/stories260K-greedy-200.txt"

typedef struct mode_case {
	const char *name;
	strata_plan_options o;
} mode_case;

/* Budgets stated, so each mode is the one run (the models are KiB to a
 * few MiB; the device budget leaves room for the compute context). */
static const mode_case modes[] = {
	{"resident", {.mode = STRATA_RESIDENCY_RESIDENT}},
	{"host:1", {.mode = STRATA_RESIDENCY_HOST, .host_depth = 1,
		    .has_device_budget = true, .device_budget_bytes = 256 * MIB,
		    .has_host_budget = true, .host_budget_bytes = 256 * MIB}},
	{"host:2", {.mode = STRATA_RESIDENCY_HOST, .host_depth = 2,
		    .has_device_budget = true, .device_budget_bytes = 256 * MIB,
		    .has_host_budget = true, .host_budget_bytes = 256 * MIB}},
	{"disk lookahead 1", {.mode = STRATA_RESIDENCY_DISK,
			      .has_device_budget = true,
			      .device_budget_bytes = 256 * MIB,
			      .has_host_budget = true,
			      .host_budget_bytes = 256 * MIB, .has_lookahead = true,
			      .lookahead = 1}},
	{"disk lookahead 2", {.mode = STRATA_RESIDENCY_DISK,
			      .has_device_budget = true,
			      .device_budget_bytes = 256 * MIB,
			      .has_host_budget = true,
			      .host_budget_bytes = 256 * MIB, .has_lookahead = true,
			      .lookahead = 2}},
};
#define MODE_COUNT (sizeof modes / sizeof *modes)

/* A part of the test, for the sanitizer runs (scripts/gpu-build), where
 * racecheck makes every launch cost tens of milliseconds and the whole
 * test would take an hour. STRATA_TEST_MODES=N keeps the first N modes:
 * the modes run the same kernels on the same shapes, only the weights
 * come from elsewhere, so resident alone (N = 1) gives racecheck every
 * kernel. STRATA_TEST_SHARD=I/N runs job j (the reference models in
 * order, then stories260K's text from its HF and its GGUF files) only
 * where j % N == I, so N processes share the jobs; as they share the
 * device too, the check that generating takes no device memory (free
 * memory before and after) is left out. Unset: everything. */
typedef struct subset {
	size_t modes;
	unsigned shard, shards;
} subset;

static subset test_subset(void)
{
	subset s = {MODE_COUNT, 0, 1};
	const char *m = getenv("STRATA_TEST_MODES");
	const char *sh = getenv("STRATA_TEST_SHARD");
	if (m && (atoi(m) < 1 || (size_t)atoi(m) > MODE_COUNT))
		s.modes = 0; /* refused by main */
	else if (m)
		s.modes = (size_t)atoi(m);
	if (sh && (sscanf(sh, "%u/%u", &s.shard, &s.shards) != 2 ||
		   s.shards == 0 || s.shard >= s.shards))
		s.shards = 0;
	return s;
}

static bool runs_job(const subset *s, unsigned job)
{
	return job % s->shards == s->shard;
}

typedef struct ids {
	int32_t v[256];
	uint32_t n;
} ids;

static strata_status collect(void *user, int32_t tok, strata_error *err)
{
	(void)err;
	ids *r = user;
	if (r->n < 256)
		r->v[r->n++] = tok;
	return STRATA_OK;
}

static strata_session *open_session(const char *path, strata_plan_device d,
				    const strata_plan_options *mode,
				    uint32_t prompt, uint32_t positions)
{
	strata_session_options so = {
		.model_path = path, .plan = *mode, .threads = 2,
		.positions = positions, .prefill = prompt,
		/* f32 activations: the tolerances above (fast rounds
		 * prefill's inputs to bf16 once) */
		.precision = STRATA_PRECISION_EXACT,
	};
	so.plan.device = d;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&so, &s, &err))
		fail_msg("%s on %s: %s (%s)", path, strata_plan_device_name(d),
			 err.message, err.fix);
	return s;
}

static uint64_t device_free(strata_session *s)
{
	strata_backend_memory m;
	strata_error err;
	assert_int_equal(
		strata_backend_memory_info(strata_session_backend(s), &m, &err),
		STRATA_OK);
	return m.free_bytes;
}

static void greedy(strata_session *s, const int32_t *prompt, uint32_t n,
		   uint32_t count, int32_t eos, ids *out)
{
	strata_sampler *smp;
	strata_error err;
	strata_sampler_params sp = {.temperature = 0, .top_p = 1,
				    .repeat_penalty = 1};
	assert_int_equal(strata_sampler_create(&sp,
					       strata_session_hparams(s)->vocab,
					       &smp, &err),
			 STRATA_OK);
	strata_forward_reset(strata_session_forward(s));
	out->n = 0;
	if (strata_generate(strata_session_forward(s), smp, prompt, n, count,
			    eos, collect, out, NULL, &err))
		fail_msg("generate: %s", err.message);
	strata_sampler_destroy(smp);
}

/* The plan's promises, measured: the engine's device peak within the
 * plan's weight share, the forward arena exactly the plan's figure for
 * the one site (KV cache, workspace, the logits rows read back from the
 * device); streamed modes moved bytes with CUDA-timed copies. */
static void check_memory(strata_session *s, const char *what)
{
	strata_residency *e = strata_session_residency(s);
	strata_arena_stats wa, fa;
	strata_residency_device_arena_stats(e, &wa);
	strata_forward_arena_stats(strata_session_forward(s), &fa);
	const strata_plan_memory *pm = strata_plan_get_memory(
		strata_session_plan(s));
	uint64_t site = strata_plan_site_bytes(pm, UINT64_MAX, false, true);
	if (wa.high_water_bytes >
		    strata_plan_weight_device_bytes(strata_session_plan(s)) ||
	    fa.high_water_bytes != site)
		fail_msg("%s: weights %llu of %llu planned, buffers %llu of "
			 "%llu",
			 what, (unsigned long long)wa.high_water_bytes,
			 (unsigned long long)strata_plan_weight_device_bytes(
				 strata_session_plan(s)),
			 (unsigned long long)fa.high_water_bytes,
			 (unsigned long long)site);
	strata_error err;
	assert_int_equal(strata_session_finish(s, &err), STRATA_OK);
	strata_telemetry_snapshot snap;
	strata_telemetry_get(strata_residency_telemetry(e), &snap);
	/* the host: the tier and the load staging, held together while the
	 * engine loads, are the plan's host total (disk's ring fills after
	 * the staging is gone: its arena holds the ring from the start) */
	uint64_t host = snap.peak_bytes[STRATA_TIER_HOST];
	uint64_t plan_host = strata_plan_host_total(strata_session_plan(s));
	if (strata_plan_mode(strata_session_plan(s)) != STRATA_RESIDENCY_DISK &&
	    (host > plan_host || (double)host < 0.99 * (double)plan_host))
		fail_msg("%s: host peak %llu, plan %llu", what,
			 (unsigned long long)host, (unsigned long long)plan_host);
	if (strata_plan_mode(strata_session_plan(s)) == STRATA_RESIDENCY_HOST) {
		assert_true(snap.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes > 0);
		assert_true(snap.transfers[STRATA_DIR_HOST_TO_DEVICE].ns > 0);
	}
	if (strata_plan_mode(strata_session_plan(s)) == STRATA_RESIDENCY_DISK)
		assert_true(snap.transfers[STRATA_DIR_DISK_TO_DEVICE].bytes +
				    snap.transfers[STRATA_DIR_DISK_TO_HOST].bytes >
			    0);
	print_message(
		"  %s: device peak weights %llu B (plan %llu), buffers "
		"%llu B (plan %llu), stalls %llu (%.3f ms)\n",
		what, (unsigned long long)wa.high_water_bytes,
		(unsigned long long)strata_plan_weight_device_bytes(
			strata_session_plan(s)),
		(unsigned long long)fa.high_water_bytes,
		(unsigned long long)site,
		(unsigned long long)snap.stalls, snap.stall_ns / 1e6);
}

static void check_model(const char *name, const subset *sub)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	bool half = strstr(name, "f16") != NULL;
	double tol = half ? 2e-2 : 1e-3;
	uint32_t positions = r.n_tokens + r.n_greedy;
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *logits = strata_alloc(cells * sizeof *logits);
	assert_non_null(logits);
	strata_error err;
	ids cpu = {0}, gpu = {0};
	strata_session *s = open_session(path, STRATA_PLAN_DEVICE_CPU,
					 &modes[0].o, r.n_tokens, positions);
	greedy(s, r.tokens, r.n_tokens, r.n_greedy, -1, &cpu);
	strata_session_close(s);
	/* a backend of our own reads the device's free memory around each
	 * session (they share the device's primary context) */
	strata_backend *probe;
	strata_backend_memory before, after;
	assert_int_equal(strata_backend_create("cuda", 0, NULL, &probe, &err),
			 STRATA_OK);
	for (size_t m = 0; m < sub->modes; m++) {
		assert_int_equal(strata_backend_memory_info(probe, &before,
							    &err),
				 STRATA_OK);
		s = open_session(path, STRATA_PLAN_DEVICE_CUDA, &modes[m].o,
				 r.n_tokens, positions);
		assert_int_equal(strata_plan_mode(strata_session_plan(s)),
				 modes[m].o.mode);
		if (strata_forward_run(strata_session_forward(s), r.tokens,
				       r.n_tokens, 0, logits, NULL, &err))
			fail_msg("%s %s: %s", name, modes[m].name, err.message);
		double d = ref_max_diff(logits, r.logits, cells);
		print_message("%s %s: max |dlogit| %.3g (tolerance %g)\n", name,
			      modes[m].name, d, tol);
		if (!(d <= tol))
			fail_msg("%s %s: logits differ from transformers' by "
				 "%g", name, modes[m].name, d);
		/* A second generation takes no device memory: nothing is
		 * allocated per token (the first may load kernels lazily). */
		greedy(s, r.tokens, r.n_tokens, r.n_greedy, -1, &gpu);
		uint64_t after_first = device_free(s);
		greedy(s, r.tokens, r.n_tokens, r.n_greedy, -1, &gpu);
		uint64_t after_second = device_free(s);
		if (sub->shards == 1 && after_second != after_first)
			/* shares run side by side */
			fail_msg("%s %s: the device's free memory went from %llu "
				 "to %llu B over a second generation",
				 name, modes[m].name,
				 (unsigned long long)after_first,
				 (unsigned long long)after_second);
		if (!half) {
			assert_int_equal(gpu.n, cpu.n);
			if (memcmp(gpu.v, cpu.v, cpu.n * sizeof *cpu.v))
				fail_msg("%s %s: greedy tokens differ from the "
					 "CPU backend's", name, modes[m].name);
		}
		check_memory(s, modes[m].name);
		assert_int_equal(strata_backend_memory_info(probe, &after,
							    &err),
				 STRATA_OK);
		/* A figure, not a bound: allocation granularity and cuBLAS's
		 * handle dominate at these sizes. */
		print_message("  %s: device memory taken %lld B, plan device "
			      "total %llu B\n",
			      modes[m].name,
			      (long long)(before.free_bytes - after.free_bytes),
			      (unsigned long long)strata_plan_device_total(
				      strata_session_plan(s)));
		strata_session_close(s);
	}
	strata_backend_destroy(probe);
	strata_free(logits);
	ref_free(&r);
}

static void test_reference_models_every_mode(void **state)
{
	(void)state;
	subset sub = test_subset();
	for (unsigned i = 0; i < REF_MODEL_COUNT; i++)
		if (runs_job(&sub, i))
			check_model(ref_models[i], &sub);
}

/* Greedy from BOS (an empty prompt) for 200 tokens, decoded as `strata
 * run` does (the continuation of the prompt's text), is llama2.c's text;
 * both layouts, every mode. */
static void stories_text(const char *path, const mode_case *m,
			 const char *expect, size_t expect_len)
{
	strata_error err;
	strata_tokenizer *tok;
	strata_text_stream *d;
	int32_t *prompt;
	size_t n;
	if (strata_tokenizer_load(path, &tok, &err))
		fail_msg("%s: %s", path, err.message);
	assert_int_equal(strata_tokenizer_encode(tok, "", 0, true, &prompt, &n,
						 &err),
			 STRATA_OK);
	assert_true(n >= 1);
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(tok, &sp);
	strata_session *s = open_session(path, STRATA_PLAN_DEVICE_CUDA, &m->o,
					 (uint32_t)n, (uint32_t)n + 200);
	ids out;
	greedy(s, prompt, (uint32_t)n, 200,
	       sp.eos >= 0 ? sp.eos : strata_session_hparams(s)->eos, &out);
	assert_int_equal(strata_text_stream_create(tok, prompt, n, true, &d,
						   &err),
			 STRATA_OK);
	char *text = strata_alloc(64 * 1024);
	size_t len = 0;
	for (uint32_t i = 0; i <= out.n; i++) {
		const char *piece;
		size_t plen;
		strata_status st =
			i < out.n ? strata_text_stream_push(d, out.v[i], &piece,
							    &plen, &err)
				  : strata_text_stream_finish(d, &piece, &plen,
							      &err);
		assert_int_equal(st, STRATA_OK);
		assert_true(len + plen < 64 * 1024);
		memcpy(text + len, piece, plen);
		len += plen;
	}
	if (len != expect_len || memcmp(text, expect, len))
		fail_msg("%s %s: greedy text differs from llama2.c's (%zu "
			 "bytes, expected %zu)",
			 path, m->name, len, expect_len);
	strata_free(text);
	strata_text_stream_destroy(d);
	strata_session_close(s);
	strata_free(prompt);
	strata_tokenizer_destroy(tok);
}

static void test_stories_greedy_text(void **state)
{
	(void)state;
	subset sub = test_subset();
	if (!runs_job(&sub, REF_MODEL_COUNT) &&
	    !runs_job(&sub, REF_MODEL_COUNT + 1))
		return;
	char *expect;
	size_t len;
	strata_error err;
	assert_int_equal(strata_file_read_all(STORIES_TEXT, 1 << 20, &expect,
					      &len, &err),
			 STRATA_OK);
	for (size_t m = 0; m < sub.modes; m++) {
		if (runs_job(&sub, REF_MODEL_COUNT))
			stories_text(STORIES_HF, &modes[m], expect, len);
		if (runs_job(&sub, REF_MODEL_COUNT + 1))
			stories_text(STORIES_GGUF, &modes[m], expect, len);
	}
	strata_free(expect);
}

/* Disk mode with host memory 0 reads straight into device memory, which
 * the residency engine does only where the host can address the device
 * (src/residency/engine_sizes.c); on CUDA the planner never offers it, so the
 * run is refused at planning with the host memory that fits. */
static void test_disk_direct_is_refused_with_a_fix(void **state)
{
	(void)state;
	strata_session_options so = {
		.model_path = STORIES_GGUF, .positions = 4, .prefill = 1,
	};
	so.plan = (strata_plan_options){
		.mode = STRATA_RESIDENCY_DISK, .device = STRATA_PLAN_DEVICE_CUDA,
		.has_device_budget = true, .device_budget_bytes = 256 * MIB,
		.has_host_budget = true, .host_budget_bytes = 0};
	strata_session *s = NULL;
	strata_error err;
	/* the planner itself says so: on CUDA units pass through pinned host
	 * memory, so disk with host 0 does not fit, and the fix names the
	 * host memory that does */
	assert_int_equal(strata_session_open(&so, &s, &err),
			 STRATA_E_PLAN_NOTHING_FITS);
	assert_null(s);
	/* "nothing fits the budgets (device 256MiB, host 0): disk needs ...
	 * on the device and ... of host memory" (src/plan/select.c) */
	assert_non_null(strstr(err.message, "host 0)"));
	assert_non_null(strstr(err.message, "of host memory"));
	assert_non_null(strstr(err.fix, "--host-memory"));
	assert_null(strstr(err.fix, "--host-memory 0 "));
}

/* --device cuda:N past the visible devices is a clear error. */
static void test_missing_device_is_refused(void **state)
{
	(void)state;
	strata_session_options so = {
		.model_path = STORIES_GGUF,
		.positions = 4,
		.prefill = 1,
		.device_index = strata_backend_device_count("cuda"),
	};
	so.plan.device = STRATA_PLAN_DEVICE_CUDA;
	strata_session *s = NULL;
	strata_error err;
	assert_int_equal(strata_session_open(&so, &s, &err),
			 STRATA_E_BACKEND_UNAVAILABLE);
	assert_null(s);
	assert_true(err.fix[0] != 0);
}

int main(void)
{
	if (gpu_skip_without_device("test_infer_cuda_forward"))
		return GPU_SKIP_EXIT;
	subset sub = test_subset();
	if (sub.shards == 0 || sub.modes == 0) {
		fprintf(stderr, "STRATA_TEST_SHARD=%s, STRATA_TEST_MODES=%s: "
				"I/N with I < N, and 1 to %zu, wanted\n",
			getenv("STRATA_TEST_SHARD") ? getenv("STRATA_TEST_SHARD")
						    : "(unset)",
			getenv("STRATA_TEST_MODES") ? getenv("STRATA_TEST_MODES")
						    : "(unset)",
			MODE_COUNT);
		return 1;
	}
	if (sub.modes < MODE_COUNT || sub.shards > 1)
		printf("part of the test: the first %zu of %zu modes, share "
		       "%u of %u\n",
		       sub.modes, MODE_COUNT, sub.shard, sub.shards);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference_models_every_mode),
		cmocka_unit_test(test_stories_greedy_text),
		cmocka_unit_test(test_disk_direct_is_refused_with_a_fix),
		cmocka_unit_test(test_missing_device_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
