/* test_cuda_kernels_quant.c - the CUDA slots on weights in every GGUF
 * block type, as stored, against the CPU's on the same bytes: decoding
 * (to_f32 and embedding rows) bit for bit equal to strata_block_decode,
 * products through the GEMV (1..8 rows, with and without a bias) and the
 * decode-then-SGEMM path (more rows, in slices of the workspace) and the
 * tensor-core path (bf16 hi + lo tiles) within 1e-4 relative of the CPU's
 * stored product (only the summation order differs, and ~16 bits kept on
 * tensor cores), the memory-rate GEMV on its awkward shapes, and rows that
 * are not whole blocks refused (layer: backend tests). Skipped (77) without a CUDA device. */
#include <stdlib.h>

#define QUANT_FIXTURE_SEED 777
#include "backend/kernels_fixture.h"
#include "backend/quant_fixture.h"

#include "support/gpu_skip.h"

static const strata_weight_type types[] = {
	STRATA_WEIGHT_Q8_0, STRATA_WEIGHT_Q4_0,	  STRATA_WEIGHT_Q4_1,
	STRATA_WEIGHT_Q5_0, STRATA_WEIGHT_Q5_1,	  STRATA_WEIGHT_Q2_K,
	STRATA_WEIGHT_Q3_K, STRATA_WEIGHT_Q4_K,	  STRATA_WEIGHT_Q5_K,
	STRATA_WEIGHT_Q6_K, STRATA_WEIGHT_IQ4_NL, STRATA_WEIGHT_IQ4_XS,
};
#define TYPES (sizeof types / sizeof *types)

/* ------------------------------------------------------------------------ */

static void test_decoding_is_bit_exact(void **state)
{
	(void)state;
	const uint32_t rows = 6, cols = 1024;
	for (size_t i = 0; i < TYPES; i++) {
		strata_block_type bt = strata_weight_type_block(types[i]);
		uint64_t bytes = weight_bytes(types[i], rows, cols);
		unsigned char *h = random_blocks(bt, bytes);
		float *want = host_floats((size_t)rows * cols);
		float *got = host_floats((size_t)rows * cols);
		(void)strata_block_decode(bt, h, want, (uint64_t)rows * cols);
		void *dw = upload(h, bytes);
		float *dy = dev_alloc((uint64_t)rows * cols * 4);
		strata_weight w = {types[i], dw, rows, cols};
		OK(F.gpu->ops->to_f32(F.gpu->ctx, dy, &w, ERR));
		download(got, dy, (uint64_t)rows * cols * 4);
		if (memcmp(want, got, (size_t)rows * cols * 4))
			fail_msg("%s: CUDA decoding differs from base's",
				 strata_weight_type_name(types[i]));
		/* embedding rows: the CPU's stored embed, bit for bit */
		const int32_t tokens[5] = {5, 0, 3, 3, 1};
		float *cpu_rows = host_floats(5 * cols);
		OK(strata_kernel_embed(F.cpu, cpu_rows, &(strata_weight){types[i], h, rows, cols}, tokens, 5, ERR));
		float *dx = dev_alloc((uint64_t)5 * cols * 4);
		OK(strata_kernel_embed(F.gpu, dx, &w, tokens, 5, ERR));
		download(got, dx, (uint64_t)5 * cols * 4);
		if (memcmp(cpu_rows, got, (size_t)5 * cols * 4))
			fail_msg("%s: CUDA embedding rows differ from the CPU's",
				 strata_weight_type_name(types[i]));
		printf("  %-8s decoding and embedding bit-exact\n",
		       strata_weight_type_name(types[i]));
		dev_free_all();
		free(h), free(want), free(got), free(cpu_rows);
	}
}

/* Bytes past the device buffer's (256-byte aligned) start that
 * check_product places the weights at. */
static uint32_t w_offset;

static void check_product(strata_weight_type t, uint32_t n, uint32_t in,
			  uint32_t out, bool bias)
{
	strata_block_type bt = strata_weight_type_block(t);
	uint64_t bytes = weight_bytes(t, out, in);
	unsigned char *h = random_blocks(bt, bytes);
	float *x = host_floats((size_t)n * in), *b = host_floats(out);
	float *want = host_floats((size_t)n * out), *got = host_floats((size_t)n * out);
	cuda_test_fill(x, (size_t)n * in, n * 31 + in, 1.0f);
	cuda_test_fill(b, out, out, 1.0f);
	OK(strata_kernel_matmul(F.cpu, want, x, &(strata_weight){t, h, out, in}, bias ? b : NULL, n, ERR));
	char *dw = (char *)dev_alloc(bytes + 16) + w_offset;
	OK(strata_backend_copy_h2d_async(F.b, F.gs, dw, h, bytes, ERR));
	float *dx = upload(x, (uint64_t)n * in * 4);
	float *db = upload(b, (uint64_t)out * 4);
	float *dy = dev_alloc((uint64_t)n * out * 4);
	OK(strata_kernel_matmul(F.gpu, dy, dx, &(strata_weight){t, dw, out, in}, bias ? db : NULL, n, ERR));
	download(got, dy, (uint64_t)n * out * 4);
	char what[96];
	snprintf(what, sizeof what, "%s n=%u in=%u out=%u%s%s",
		 strata_weight_type_name(t), n, in, out, bias ? " +bias" : "",
		 n <= STRATA__CUDA_GEMV_ROWS ? " (GEMV)" : " (SGEMM)");
	expect_close(what, want, got, (size_t)n * out, F32_TOL);
	dev_free_all();
	free(h), free(x), free(b), free(want), free(got);
}

static void test_gemv_matches_cpu(void **state)
{
	(void)state;
	for (size_t i = 0; i < TYPES; i++) {
		check_product(types[i], 1, 4096, 300, false);
		check_product(types[i], 3, 512, 77, true);
		check_product(types[i], 8, 2048, 64, i % 2 == 0);
	}
	for (uint32_t n = 1; n <= STRATA__CUDA_GEMV_ROWS; n++)
		check_product(STRATA_WEIGHT_Q4_K, n, 1024, 33, n == 5);
}

static void test_sgemm_path_matches_cpu(void **state)
{
	(void)state;
	/* the workspace starts at nothing (the GEMV uses none), so the first
	 * product, 9 rows of 512, decodes 9 weight rows a slice: 12 slices,
	 * the last of one row */
	strata__cuda_quant_prefill = 0;
	for (size_t i = 0; i < TYPES; i++) {
		check_product(types[i], 9, 512, 100, true);
		check_product(types[i], 40, 1024, 257, false);
	}
	strata__cuda_quant_prefill = 1;
}

/* The default for more than the GEMV's rows: bf16 tiles on tensor cores,
 * x and the weights each split hi + lo, within the f32 tolerance; tiles
 * of several column chunks (kc_max) and of many row tiles (a workspace
 * of only n x in x 4 bytes), in every type. */
static void test_tensor_core_path_matches_cpu(void **state)
{
	(void)state;
	assert_int_equal(strata__cuda_quant_prefill, 1);
	for (size_t i = 0; i < TYPES; i++) {
		check_product(types[i], 9, 512, 100, true);
		check_product(types[i], 40, 1024, 257, false);
		strata__cuda_quant_kc_max = 256; /* four column chunks */
		check_product(types[i], 33, 1024, 130, i % 2 == 1);
		strata__cuda_quant_kc_max = 0;
	}
	/* a prefill-sized product: 600 rows, one chunk per 2048 columns */
	check_product(STRATA_WEIGHT_Q8_0, 600, 4096, 96, true);
	check_product(STRATA_WEIGHT_Q4_K, 128, 2304, 512, false);
}

/* Prefill precision bf16 (inputs and weights rounded to bf16 once, one
 * product): within half precision's tolerance of the CPU. */
static void test_tensor_core_bf16_precision(void **state)
{
	(void)state;
	strata__cuda_compute *k = F.gpu->ctx;
	const int terms = k->prefill_terms;
	k->prefill_terms = 1;
	for (size_t i = 0; i < TYPES; i++) {
		strata_block_type bt = strata_weight_type_block(types[i]);
		const uint32_t n = 24, in = 1024, out = 200;
		uint64_t bytes = weight_bytes(types[i], out, in);
		unsigned char *h = random_blocks(bt, bytes);
		float *x = host_floats((size_t)n * in);
		float *want = host_floats((size_t)n * out);
		float *got = host_floats((size_t)n * out);
		cuda_test_fill(x, (size_t)n * in, 5 + i, 1.0f);
		OK(strata_kernel_matmul(F.cpu, want, x, &(strata_weight){types[i], h, out, in}, NULL, n, ERR));
		void *dw = upload(h, bytes);
		float *dx = upload(x, (uint64_t)n * in * 4);
		float *dy = dev_alloc((uint64_t)n * out * 4);
		OK(strata_kernel_matmul(F.gpu, dy, dx, &(strata_weight){types[i], dw, out, in}, NULL, n, ERR));
		download(got, dy, (uint64_t)n * out * 4);
		char what[64];
		snprintf(what, sizeof what, "%s n=%u bf16 once",
			 strata_weight_type_name(types[i]), n);
		expect_close(what, want, got, (size_t)n * out, 2e-2);
		dev_free_all();
		free(h), free(x), free(want), free(got);
	}
	k->prefill_terms = terms;
}

/* The memory-rate GEMV (kernels_qgemv.cu) on the shapes that stress its
 * indexing: rows of blocks that do not fill a warp step (Q8_0 and Q4_0 on
 * 800 and 96 columns), rows that start off a word boundary (34 x 25
 * bytes), weights 4 bytes past a 16-byte boundary, every row split and
 * both unrolls, against the CPU. */
static void test_fast_gemv_shapes(void **state)
{
	(void)state;
	const float *x16 = (const float *)(uintptr_t)0x10000;
	for (size_t i = 0; i < FAST_TYPES; i++) {
		int bt = (int)strata_weight_type_block(fast_types[i]);
		bool k = strata_block_elements((strata_block_type)bt) == 256;
		/* the kernel takes these (not the general GEMV) */
		assert_true(strata__cuda_qgemv_takes(bt, (const char *)x16 + 4,
						     k ? 1280 : 800));
		assert_false(strata__cuda_qgemv_takes(bt, (const char *)x16 + 2,
						      256));
		for (int split = 0; split <= 8; split = split ? split * 2 : 1)
			for (int unroll = 4; unroll <= 8; unroll += 4) {
				strata__cuda_qgemv_split = split;
				strata__cuda_qgemv_unroll = unroll;
				w_offset = unroll == 8 ? 4 : 0;
				check_product(fast_types[i], 1, k ? 1280 : 800, 45, true);
				check_product(fast_types[i], 5, k ? 2304 : 96, 19, false);
			}
		strata__cuda_qgemv_split = 0;
		strata__cuda_qgemv_unroll = 4;
		w_offset = 0;
		for (uint32_t n = 1; n <= STRATA__CUDA_GEMV_ROWS; n++)
			check_product(fast_types[i], n, 4096, 70, n % 3 == 0);
	}
}

static void test_rows_of_partial_blocks_are_refused(void **state)
{
	(void)state;
	float *d = dev_alloc(1 << 16);
	strata_error err;
	/* 48 columns: not whole 32-element blocks */
	strata_weight w = {STRATA_WEIGHT_Q8_0, d + 4096, 4, 48};
	strata_status st = strata_kernel_matmul(F.gpu, d + 8192, d, &w, NULL,
						1, &err);
	assert_int_not_equal(st, STRATA_OK);
	printf("  refused: %s\n", err.message);
	/* a K type on 32-element rows */
	w = (strata_weight){STRATA_WEIGHT_Q4_K, d + 4096, 4, 32 * 3};
	assert_int_not_equal(strata_kernel_matmul(F.gpu, d + 8192, d, &w, NULL,
						  1, &err),
			     STRATA_OK);
	dev_free_all();
}

/* The fused decode slots on block types (one row of x): q,k,v-like parts
 * with the f32 norm folded in, one part accumulating into y (a residual),
 * gate/up with SwiGLU and the norm, every type the memory-rate GEMV
 * takes, against the CPU through the same wrappers; and what they do not
 * take (two rows, a bf16 norm, mixed types) left to the unfused path.
 * Parts of odd row counts (a part ending inside a block of warps, the
 * rows of one warp step in two parts), under every row split. */
static void check_fused_slots(size_t t, const uint32_t outs[3])
{
	fused_case c;
	fused_case_init(&c, fast_types[t], t, outs);
	/* two rows, or a bf16 norm: the unfused path */
	assert_false(F.gpu->ops->products_take(F.gpu->ctx, &c.dnrm, 2, c.dp, 3));
	strata_kernel_norm half = c.dnrm;
	half.w.type = STRATA_WEIGHT_BF16;
	assert_false(F.gpu->ops->products_take(F.gpu->ctx, &half, 1, c.dp, 3));
	fused_check(&c, "fused", F32_TOL);
	fused_case_fini(&c);
}

static void test_fused_decode_slots_match_cpu(void **state)
{
	(void)state;
	static const uint32_t shapes[2][3] = {{96, 32, 40}, {33, 7, 5}};
	for (size_t t = 0; t < FAST_TYPES; t++)
		for (int sh = 0; sh < 2; sh++)
			for (int split = 0; split <= 8; split = split ? split * 2 : 1) {
				strata__cuda_qgemv_split = split;
				check_fused_slots(t, shapes[sh]);
			}
	strata__cuda_qgemv_split = 0;
}

int main(void)
{
	if (gpu_skip_without_device("test_backend_cuda_kernels_quant"))
		return GPU_SKIP_EXIT;
	/* the reference is the CPU's exact product (f32 activations), which
	 * the CUDA kernels compute at STRATA_PRECISION_EXACT: the fixture
	 * makes both contexts so; both backends' default (fast) decode
	 * quantizes x to 8 bits (docs/infer.md), 1e-2 from it:
	 * test_backend_cuda_kernels_q8 covers that path */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decoding_is_bit_exact),
		cmocka_unit_test(test_gemv_matches_cpu),
		cmocka_unit_test(test_sgemm_path_matches_cpu),
		cmocka_unit_test(test_tensor_core_path_matches_cpu),
		cmocka_unit_test(test_tensor_core_bf16_precision),
		cmocka_unit_test(test_fast_gemv_shapes),
		cmocka_unit_test(test_fused_decode_slots_match_cpu),
		cmocka_unit_test(test_rows_of_partial_blocks_are_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
