/* test_memory_model.c - the bytes a tensor takes where it executes and the
 * memory model's formulas (KV cache and its types, activations,
 * workspace, staging, sites), each figure computed by hand (layer: plan). */
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

static void tensor_bytes_are_where_it_executes(void **state)
{
	(void)state;
	uint64_t b;
	strata_error err;
	const strata_plan_device cpu = STRATA_PLAN_DEVICE_CPU,
				 cuda = STRATA_PLAN_DEVICE_CUDA;
	assert_int_equal(strata_plan_tensor_device_bytes(STRATA_DTYPE_BF16,
							 1024, cpu, &b, &err),
			 STRATA_OK);
	assert_true(b == 2048); /* stored: the cpu computes on bf16 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_BF16, 1024, cuda, &b, &err);
	assert_true(b == 2048);
	strata_plan_tensor_device_bytes(STRATA_DTYPE_F16, 1000, cuda, &b, &err);
	assert_true(b == 2048); /* 2000 rounded up to 256 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_Q4_0, 512, cpu, &b, &err);
	assert_true(b == 512); /* 16 blocks of 18 bytes, rounded up to 256 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_Q4_K, 256 * 16, cpu, &b,
					&err);
	assert_true(b == 2304); /* 16 blocks of 144 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_Q8_0, 32 * 64, cuda, &b,
					&err);
	assert_true(b == (strata_backend_weight_types("cuda") &
					  STRATA_WEIGHT_BIT(STRATA_WEIGHT_Q8_0)
				  ? 2304u   /* 64 blocks of 34, rounded up */
				  : 8192u)); /* converted to f32 */
	/* a type no kernel computes on is converted (and refused at run) */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_F8_E4M3, 64, cpu, &b, &err);
	assert_true(b == 256);
	strata_plan_tensor_device_bytes(STRATA_DTYPE_I64, 64, cpu, &b, &err);
	assert_true(b == 512);
	strata_plan_tensor_device_bytes(STRATA_DTYPE_F32, 0, cpu, &b, &err);
	assert_true(b == 0);
	assert_int_equal(strata_plan_tensor_device_bytes(STRATA_DTYPE_COUNT, 1,
							 cpu, &b, &err),
			 STRATA_E_CKPT_DTYPE);
	assert_int_equal(strata_plan_tensor_device_bytes(STRATA_DTYPE_F32,
							 UINT64_MAX / 2, cpu,
							 &b, &err),
			 STRATA_E_OVERFLOW);
	assert_non_null(strstr(err.message, "tensor device bytes"));
}

/* Vectors (norms, biases) stay f32 on the cpu, whose norm kernel reads
 * f32; cuda's reads bf16 and f16 too. Matrices stay as stored on both. */
static void vectors_follow_the_norm_kernels(void **state)
{
	(void)state;
	strata_error err;
	strata_plan_exec e;
	strata_tensor norm = {.name = "n", .dtype = STRATA_DTYPE_BF16,
			      .n_dims = 1, .elements = 64, .bytes = 128};
	assert_int_equal(strata_plan_tensor_exec(&norm, STRATA_PLAN_DEVICE_CPU,
						 &e, &err),
			 STRATA_OK);
	assert_true(e.convert && e.bytes == 256);
	strata_plan_tensor_exec(&norm, STRATA_PLAN_DEVICE_CUDA, &e, &err);
	assert_true(!e.convert && e.bytes == 128);
	strata_tensor mat = {.name = "m", .dtype = STRATA_DTYPE_Q6_K,
			     .n_dims = 2, .elements = 512, .bytes = 420};
	strata_plan_tensor_exec(&mat, STRATA_PLAN_DEVICE_CPU, &e, &err);
	assert_true(!e.convert && e.bytes == 420);
	mat.dtype = STRATA_DTYPE_F32;
	mat.bytes = 2048;
	strata_plan_tensor_exec(&mat, STRATA_PLAN_DEVICE_CUDA, &e, &err);
	assert_true(!e.convert && e.bytes == 2048);
}

/* --kv-type: the KV cache at 2 bytes an element for f16 and bf16 on both
 * devices, exactly half of f32's (the activations unchanged); a type no
 * cache holds is E_PLAN_OPTIONS naming the fix. */
static void memory_model_kv_types(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	const strata_weight_type types[] = {STRATA_WEIGHT_F32,
					    STRATA_WEIGHT_F16,
					    STRATA_WEIGHT_BF16};
	const strata_plan_device devs[] = {STRATA_PLAN_DEVICE_CPU,
					   STRATA_PLAN_DEVICE_CUDA};
	strata_plan_memory m, f32;
	strata_error err;
	for (int d = 0; d < 2; d++)
		for (int t = 0; t < 3; t++) {
			strata_plan_shape sh = {.context = 256, .batch = 3,
						.prefill_chunk = 4,
						.kv_type = types[t]};
			assert_int_equal(strata_plan_memory_compute(
						 &f->arch, &sh, devs[d],
						 STRATA_DTYPE_F32, 0, 0, &m,
						 &err),
					 STRATA_OK);
			uint64_t eb = t ? 2 : 4;
			assert_int_equal(m.kv_element_bytes, eb);
			assert_int_equal(m.kv_buffer_bytes, 3 * 256 * 32 * eb);
			assert_int_equal(m.kv_cache_bytes,
					 f->arch.layers * 2 * m.kv_buffer_bytes);
			if (t == 0)
				f32 = m;
			assert_int_equal(m.kv_cache_bytes * 4,
					 f32.kv_cache_bytes * eb);
			assert_int_equal(m.workspace_bytes, f32.workspace_bytes);
		}
	strata_plan_shape sh = {.context = 256, .batch = 1, .prefill_chunk = 4,
				.kv_type = STRATA_WEIGHT_Q8_0};
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_F32, 0, 0, &m,
						    &err),
			 STRATA_E_PLAN_OPTIONS);
	assert_non_null(strstr(err.message, "q8_0"));
	assert_non_null(strstr(err.fix, "--kv-type"));
	fixture_free(f);
}

static void memory_model_formulas_are_exact(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_shape sh = {.context = 256, .batch = 1, .prefill_chunk = 1};
	strata_plan_memory m;
	strata_error err;
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_BF16, 4 * MiB,
						    2, &m, &err),
			 STRATA_OK);
	assert_true(m.arch_known && m.kv_element_bytes == 4);
	assert_true(m.kv_buffer_bytes == 256 * 32 * 4);
	assert_true(m.kv_cache_bytes == KV_CPU);
	assert_true(m.x_bytes == 256 && m.xb_bytes == 256 &&
		    m.xb2_bytes == 256 && m.q_bytes == 256);
	/* one sequence: keys and values go straight into the cache, and the
	 * tiled attention keeps no score matrix */
	assert_true(m.k_bytes == 0 && m.v_bytes == 0);
	assert_true(m.hb_bytes == 512 && m.hb2_bytes == 512);
	assert_true(m.rope_bytes == 256); /* 8 floats aligned */
	assert_true(m.moe_bytes == 0 && m.norms_bytes == 0);
	/* 128 bias floats fit the MLP gate's 128: borrowed, none of its own */
	assert_true(m.bias_bytes == 0);
	assert_true(m.logits_bytes == 512); /* 400 aligned, not in the sum */
	assert_true(m.workspace_bytes == WS);
	assert_int_equal(WS, 4 * 256 + 2 * 512 + 256);
	/* a site: its layers' KV pairs, a staged pair, the logits rows where
	 * host code cannot address it */
	assert_int_equal(strata_plan_site_bytes(&m, UINT64_MAX, false, false),
			 KV_CPU + WS);
	assert_int_equal(strata_plan_site_bytes(&m, 3, true, true),
			 WS + 4 * m.kv_buffer_bytes * 2 + 512);
	assert_int_equal(strata_plan_site_bytes(&m, 0, false, false), WS);
	assert_true(m.staging_slots == 2 && m.staging_bytes == 8 * MiB);
	/* cuda: the KV cache stays f32 with bf16 weights (the attention
	 * kernel reads f32); batch and chunk scale what they should */
	sh = (strata_plan_shape){.context = 256, .batch = 3, .prefill_chunk = 4};
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CUDA,
						    STRATA_DTYPE_BF16, 0, 0, &m,
						    &err),
			 STRATA_OK);
	assert_true(m.kv_element_bytes == 4);
	assert_true(m.kv_buffer_bytes == 3 * 256 * 32 * 4);
	/* a pass's rows: max(chunk, batch) = 4, a chunk or a step of the
	 * batch (issue 19), not chunk x batch */
	assert_true(m.x_bytes == 4 * 64 * 4);
	/* three sequences: a mixed step's new keys and values, 4 rows */
	assert_true(m.k_bytes == 4 * 32 * 4 && m.v_bytes == 4 * 32 * 4);
	assert_true(m.logits_bytes == 1280); /* 3 x 100 x 4 = 1200 aligned */
	sh.batch = 16; /* now the batch is the larger */
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CUDA,
						    STRATA_DTYPE_BF16, 0, 0, &m,
						    &err),
			 STRATA_OK);
	assert_true(m.x_bytes == 16 * 64 * 4);
	sh.batch = 3;
	/* overflow names the buffer */
	sh.context = UINT64_MAX / 2;
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_BF16, 0, 0, &m,
						    &err),
			 STRATA_E_OVERFLOW);
	assert_non_null(strstr(err.message, "KV buffer"));
	/* unknown architecture: nothing guessed */
	strata_plan_arch unknown = {.known = false};
	assert_int_equal(strata_plan_memory_compute(&unknown, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_BF16, 5, 1, &m,
						    &err),
			 STRATA_OK);
	assert_false(m.arch_known);
	assert_true(m.kv_cache_bytes == 0 && m.workspace_bytes == 0 &&
		    m.staging_bytes == 5);
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tensor_bytes_are_where_it_executes),
		cmocka_unit_test(vectors_follow_the_norm_kernels),
		cmocka_unit_test(memory_model_formulas_are_exact),
		cmocka_unit_test(memory_model_kv_types),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
