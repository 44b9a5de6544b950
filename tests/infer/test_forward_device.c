/* test_forward_device.c - the forward pass with its buffers in backend
 * device memory (the CUDA path's structure), run here on the CPU backend:
 * logits and greedy tokens bit-identical to the host-memory forward pass in
 * every residency mode; the device arena is exactly the computed size and
 * fits what the plan counts for the KV cache and workspace; and a window
 * made for CUDA keeps bf16/f16 tensors half, so the engine's device bytes
 * equal the CUDA plan's weight bytes; KV save/restore through the device
 * cache; OOM loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define GIB (1ull << 30)
#define CONTEXT 64u
#define BATCH 8u

/* The window of each mode comes from a plan with these options. */
#define BUDGETS(host)                                                          \
	.has_device_budget = true, .device_budget_bytes = GIB,                       \
	.has_host_budget = true, .host_budget_bytes = (host)
static const strata_plan_options modes[] = {
	{.mode = STRATA_RESIDENCY_RESIDENT, BUDGETS(GIB)},
	{.mode = STRATA_RESIDENCY_HOST, .host_depth = 1, BUDGETS(GIB)},
	{.mode = STRATA_RESIDENCY_DISK, BUDGETS(0)},
	{.mode = STRATA_RESIDENCY_DISK, BUDGETS(GIB), .has_lookahead = true,
	 .lookahead = 2, .has_queue = true, .queue = 2},
};
#define MODE_COUNT (sizeof modes / sizeof *modes)

static void check_model(const char *name)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	ref_open m;
	ref_open_model(path, &m);
	strata_error err;
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *host = strata_alloc(cells * sizeof *host);
	float *dev = strata_alloc(cells * sizeof *dev);
	int32_t host_greedy[65], dev_greedy[65];
	ref_pass p;
	ref_pass_open(name, 2,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = CONTEXT,
					       .batch = BATCH},
		      &p);
	ref_run_greedy(p.f, &r, r.vocab, host, host_greedy);
	ref_pass_close(&p);
	assert_true(ref_max_diff(host, r.logits, cells) <= 1e-3);

	uint64_t need;
	assert_int_equal(strata_forward_device_bytes(
				 &(strata_forward_options){.hp = &m.hp,
							   .context = CONTEXT,
							   .batch = BATCH},
				 &need, &err),
			 STRATA_OK);
	uint64_t planned = ref_planned_buffers(&m.hp, CONTEXT, 1, BATCH);
	if (need != planned)
		fail_msg("%s: forward buffers %llu, planned %llu", name,
			 (unsigned long long)need, (unsigned long long)planned);
	strata_weight_store *ws;
	assert_int_equal(strata_weight_store_create(m.cat, NULL, &ws, &err),
			 STRATA_OK);
	for (size_t i = 0; i < MODE_COUNT; i++) {
		char what[160];
		snprintf(what, sizeof what, "%s mode %zu", name, i);
		ref_window w;
		ref_window_open(&m, ws, STRATA_PLAN_DEVICE_CPU, modes[i], 0,
				what, &w);
		ref_pass_open(what, 2,
			      (strata_forward_options){.hp = &m.hp,
						       .backend = w.b,
						       .src = &w.src,
						       .context = CONTEXT,
						       .batch = BATCH},
			      &p);
		ref_run_greedy(p.f, &r, r.vocab, dev, dev_greedy);
		if (memcmp(dev, host, cells * sizeof *dev))
			fail_msg("%s: device-mode logits differ", what);
		assert_memory_equal(dev_greedy, host_greedy,
				    (1 + r.n_greedy) * sizeof(int32_t));
		strata_arena_stats as;
		strata_forward_arena_stats(p.f, &as);
		assert_true(as.capacity_bytes == need);
		assert_true(as.high_water_bytes == need);
		ref_pass_close(&p);
		ref_window_close(&w);
	}
	strata_weight_store_destroy(ws);
	strata_free(host);
	strata_free(dev);
	ref_close_model(&m);
	ref_free(&r);
}

static void test_device_buffers_match_host_buffers(void **state)
{
	(void)state;
	for (int i = 0; i < REF_MODEL_COUNT; i++)
		check_model(ref_models[i]);
}

/* Window sizes for CUDA: half tensors stay 2 bytes, so the engine's device
 * arena in resident mode is the CUDA plan's weight share to the byte. */
static void check_cuda_sizes(const char *name)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_open m;
	ref_open_model(path, &m);
	strata_error err;
	strata_plan_source *ps;
	assert_int_equal(strata_plan_source_create(m.cat,
						   STRATA_PLAN_DEVICE_CUDA,
						   NULL, 0, &ps, &err),
			 STRATA_OK);
	strata_plan_weights pw;
	assert_int_equal(strata_plan_layout_weights(
				 strata_plan_source_layout(ps),
				 STRATA_RESIDENCY_RESIDENT, 0, &pw, &err),
			 STRATA_OK);
	strata_weight_store *ws;
	assert_int_equal(strata_weight_store_create(m.cat, NULL, &ws, &err),
			 STRATA_OK);
	ref_window w;
	ref_window_open(&m, ws, STRATA_PLAN_DEVICE_CUDA,
			(strata_plan_options){.mode = STRATA_RESIDENCY_RESIDENT,
					      BUDGETS(GIB)},
			0, name, &w);
	/* resident: every tensor is loaded at create, so the arena's high
	 * water is what the engine's tensors take in their slots; the plan's
	 * device region holds them exactly, and the seed's figure (the
	 * tensors' own bytes, unaligned) is no more */
	strata_arena_stats as;
	strata_residency_device_arena_stats(strata_infer_window_engine(w.w),
					    &as);
	uint64_t region = strata_plan_weight_device_bytes(w.plan.plan);
	if (as.high_water_bytes != region || as.capacity_bytes != region ||
	    pw.required_bytes > region)
		fail_msg("%s: engine %llu bytes, CUDA plan %llu (seed %llu)",
			 name, (unsigned long long)as.high_water_bytes,
			 (unsigned long long)region,
			 (unsigned long long)pw.required_bytes);
	bool half = strstr(name, "f16") != NULL;
	strata_infer_layer l;
	assert_int_equal(w.src.ops->acquire(w.src.user, 0, &l, &err),
			 STRATA_OK);
	assert_int_equal(l.elem[STRATA_SLOT_WQ] != STRATA_ELEM_F32, half);
	assert_int_equal(w.src.statics.lm_head_elem != STRATA_ELEM_F32, half);
	assert_int_equal(w.src.ops->release(w.src.user, 0, &err), STRATA_OK);
	ref_window_close(&w);
	strata_weight_store_destroy(ws);
	strata_plan_source_destroy(ps);
	ref_close_model(&m);
}

static void test_cuda_window_keeps_half_weights(void **state)
{
	(void)state;
	for (int i = 0; i < REF_MODEL_COUNT; i++)
		check_cuda_sizes(ref_models[i]);
}

/* Every allocation of the device-mode forward pass can fail: E_NOMEM (or
 * the arena's own refusal), nothing leaked (ASan). */
static void test_device_forward_survives_oom(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, "qwen2_bias_f32", NULL);
	ref_open m;
	ref_open_model(path, &m);
	int32_t tokens[6] = {1, 5, 9, 13, 17, 21};
	float last[1024];
	assert_true(m.hp.vocab <= 1024);
	for (long n = 0;; n++) {
		strata_error err;
		strata_backend *b = NULL;
		strata_compute *c = NULL;
		strata_forward *f = NULL;
		strata_alloc_fail_after(n);
		strata_status st = strata_backend_cpu_create(NULL, &b, &err);
		if (!st)
			st = strata_compute_create_on(b, 2, &c, &err);
		if (!st)
			st = strata_forward_create(
				&(strata_forward_options){.hp = &m.hp,
							  .backend = b,
							  .compute = c,
							  .src = &m.src,
							  .context = 8,
							  .batch = 2},
				&f, &err);
		if (!st)
			st = strata_forward_run(f, tokens, 6, 0, NULL, last,
						&err);
		strata_alloc_fail_after(-1);
		strata_forward_destroy(f);
		strata_compute_destroy(c);
		strata_backend_destroy(b);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM && st != STRATA_E_DEVICE_OOM)
			fail_msg("allocation %ld: %s %s", n,
				 strata_status_name(st), err.message);
		assert_true(n < 10000);
	}
	ref_close_model(&m);
}

/* KV save and restore (the prefix cache) copy through the backend in
 * device mode: a restored prefix continues exactly as the uncut run. */
static void test_device_kv_save_restore(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, "llama_gqa2_f32", NULL);
	ref_data r;
	ref_load("llama_gqa2_f32", &r);
	ref_open m;
	ref_open_model(path, &m);
	strata_error err;
	strata_backend *b;
	assert_int_equal(strata_backend_cpu_create(NULL, &b, &err), STRATA_OK);
	ref_pass p;
	ref_pass_open("llama_gqa2_f32", 2,
		      (strata_forward_options){.hp = &m.hp, .backend = b,
					       .src = &m.src,
					       .context = CONTEXT,
					       .batch = BATCH},
		      &p);
	strata_forward *f = p.f;
	uint32_t n = r.n_tokens;
	float *whole = strata_alloc((size_t)r.vocab * sizeof *whole);
	float *cont = strata_alloc((size_t)r.vocab * sizeof *cont);
	assert_int_equal(strata_forward_run(f, r.tokens, n, 0, NULL, whole,
					    &err),
			 STRATA_OK);
	strata_forward_reset(f);
	uint64_t part;
	assert_int_equal(strata_kv_cache_part_bytes(strata_forward_kv_cache(f),
						    n - 1, &part, &err),
			 STRATA_OK);
	/* each part its own block, as the prefix cache keeps them */
	uint32_t count = 2 * m.hp.layers;
	float **parts = strata_calloc(count, sizeof *parts);
	for (uint32_t i = 0; i < count; i++)
		parts[i] = strata_alloc(part);
	assert_int_equal(strata_forward_run(f, r.tokens, n - 1, 0, NULL, NULL,
					    &err),
			 STRATA_OK);
	assert_int_equal(strata_kv_cache_save(strata_forward_kv_cache(f),
					      strata_forward_selected(f), n - 1,
					      parts, count, part, &err),
			 STRATA_OK);
	strata_forward_reset(f);
	/* overwrite the cache, then restore */
	assert_int_equal(strata_forward_run(f, r.tokens + 1, n - 1, 0, NULL,
					    NULL, &err),
			 STRATA_OK);
	assert_int_equal(strata_kv_cache_restore(strata_forward_kv_cache(f),
						 strata_forward_selected(f),
						 (const float *const *)parts,
						 count, n - 1, n - 1, &err),
			 STRATA_OK);
	assert_int_equal(strata_forward_position(f), n - 1);
	assert_int_equal(strata_forward_run(f, r.tokens + n - 1, 1, n - 1,
					    NULL, cont, &err),
			 STRATA_OK);
	assert_memory_equal(cont, whole, (size_t)r.vocab * sizeof *cont);
	for (uint32_t i = 0; i < count; i++)
		strata_free(parts[i]);
	strata_free(parts);
	strata_free(whole);
	strata_free(cont);
	ref_pass_close(&p);
	strata_backend_destroy(b);
	ref_close_model(&m);
	ref_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_buffers_match_host_buffers),
		cmocka_unit_test(test_cuda_window_keeps_half_weights),
		cmocka_unit_test(test_device_forward_survives_oom),
		cmocka_unit_test(test_device_kv_save_restore),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
