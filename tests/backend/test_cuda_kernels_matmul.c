/* test_cuda_kernels_matmul.c - matrix products against the CPU kernel: f32
 * through cuBLAS, bf16/f16 GEMV and GEMM, three products sharing x with
 * folded norms, the gated pair, every GEMV tuning, and the dimensions
 * cuBLAS cannot take (layer: backend tests).
 *
 * Tolerances: 1e-4 relative for f32 work (only the summation order
 * differs), 2e-2 for half-precision inputs (issue 8). Each case prints its
 * measured worst error. Skipped (77) where no CUDA device is present. */
#include "backend/kernels_fixture.h"

/* ------------------------------------------------------------------------ */
/* Matrix products                                                          */
/* ------------------------------------------------------------------------ */

static void check_matmul_f32(uint32_t n, uint32_t in, uint32_t out, bool bias,
			     uint64_t seed)
{
	float *x = host_floats((size_t)n * in), *w = host_floats((size_t)out * in);
	float *b = host_floats(out), *want = host_floats((size_t)n * out);
	float *got = host_floats((size_t)n * out);
	cuda_test_fill(x, (size_t)n * in, seed, 1.0f);
	cuda_test_fill(w, (size_t)out * in, seed + 1, 1.0f);
	cuda_test_fill(b, out, seed + 2, 1.0f);
	OK(strata_kernel_matmul(F.cpu, want, x, &(strata_weight){STRATA_WEIGHT_F32, w, out, in}, bias ? b : NULL, n, ERR));
	float *dx = upload(x, (uint64_t)n * in * 4);
	float *dw = upload(w, (uint64_t)out * in * 4);
	float *db = upload(b, (uint64_t)out * 4);
	float *dy = dev_alloc((uint64_t)n * out * 4);
	OK(strata_kernel_matmul(F.gpu, dy, dx, &(strata_weight){STRATA_WEIGHT_F32, dw, out, in}, bias ? db : NULL, n, ERR));
	download(got, dy, (uint64_t)n * out * 4);
	char what[96];
	snprintf(what, sizeof what, "matmul f32 n=%u in=%u out=%u%s", n, in, out,
		 bias ? " +bias" : "");
	expect_close(what, want, got, (size_t)n * out, F32_TOL);
	dev_free_all();
	free(x), free(w), free(b), free(want), free(got);
}

static void test_matmul_f32_matches_cpu(void **state)
{
	(void)state;
	check_matmul_f32(1, 4096, 1000, false, 1);
	check_matmul_f32(7, 333, 129, true, 2);
	check_matmul_f32(64, 512, 1024, true, 3);
	check_matmul_f32(3, 1, 5, false, 4);
}

/* exact_x: x also holds only k/64, so converting it for cuBLAS is exact
 * and only the summation order differs from the CPU. */
static void check_matmul_half(strata_cuda_half type, uint32_t n, uint32_t in,
			      uint32_t out, bool bias, bool exact_x,
			      double tol, uint64_t seed)
{
	float *x = host_floats((size_t)n * in), *w = host_floats((size_t)out * in);
	float *b = host_floats(out), *want = host_floats((size_t)n * out);
	float *got = host_floats((size_t)n * out);
	if (exact_x)
		fill_sixty_fourths(x, (size_t)n * in, seed);
	else
		cuda_test_fill(x, (size_t)n * in, seed, 1.0f);
	fill_sixty_fourths(w, (size_t)out * in, seed + 1);
	cuda_test_fill(b, out, seed + 2, 1.0f);
	OK(strata_kernel_matmul(F.cpu, want, x, &(strata_weight){STRATA_WEIGHT_F32, w, out, in}, bias ? b : NULL, n, ERR));
	float *dx = upload(x, (uint64_t)n * in * 4);
	void *dw = upload_half(type, w, (size_t)out * in);
	float *db = upload(b, (uint64_t)out * 4);
	float *dy = dev_alloc((uint64_t)n * out * 4);
	OK(strata_cuda_matmul_half(F.gpu, dy, dx, dw, type, bias ? db : NULL, n,
				   in, out, ERR));
	download(got, dy, (uint64_t)n * out * 4);
	char what[96];
	snprintf(what, sizeof what, "matmul %s n=%u in=%u out=%u%s%s",
		 type == STRATA_CUDA_BF16 ? "bf16" : "f16", n, in, out,
		 bias ? " +bias" : "",
		 exact_x ? " (x in k/64)"
		 : n > strata__cuda_gemv_rows_max ? " (x split)" : " (x f32)");
	expect_close(what, want, got, (size_t)n * out, tol);
	dev_free_all();
	free(x), free(w), free(b), free(want), free(got);
}

static void test_matmul_refuses_dimensions_cublas_cannot_take(void **state)
{
	(void)state;
	float *d = dev_alloc(256);
	strata_error err;
	/* refused before any memory is touched */
	assert_int_equal(strata_kernel_matmul(F.gpu, d + 8, d, &(strata_weight){STRATA_WEIGHT_F32, d + 16, 1, 0x80000000u}, NULL, 1, &err),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "2147483648"));
	assert_int_equal(strata_cuda_matmul_half(F.gpu, d + 8, d, d + 16,
						 STRATA_CUDA_BF16, NULL, 9, 1,
						 0x80000000u, &err),
			 STRATA_E_UNSUPPORTED);
	dev_free_all();
}

static void test_matmul_half_gemv_matches_cpu(void **state)
{
	(void)state;
	strata__cuda_gemv_rows_max = STRATA__CUDA_GEMV_ROWS;
	for (uint32_t n = 1; n <= 8; n++)
		check_matmul_half(STRATA_CUDA_BF16, n, 4096, 1024, n == 3, false,
				  F32_TOL, 10 + n);
	/* in % 8 != 0: the scalar path */
	check_matmul_half(STRATA_CUDA_BF16, 3, 1001, 77, true, false, F32_TOL, 20);
	check_matmul_half(STRATA_CUDA_F16, 1, 4096, 1024, false, false, F32_TOL, 21);
	check_matmul_half(STRATA_CUDA_F16, 5, 999, 33, true, false, F32_TOL, 22);
	strata__cuda_gemv_rows_max = F.gemv_default;
}

static void test_matmul_half_gemm_matches_cpu(void **state)
{
	(void)state;
	/* every row count through cuBLAS too, whatever the GEMV threshold */
	strata__cuda_gemv_rows_max = 0;
	for (uint32_t n = 1; n <= 8; n++)
		check_matmul_half(n % 2 ? STRATA_CUDA_BF16 : STRATA_CUDA_F16, n,
				  1024, 512, n == 2, true, F32_TOL, 40 + n);
	strata__cuda_gemv_rows_max = F.gemv_default;
	check_matmul_half(STRATA_CUDA_BF16, 64, 4096, 1024, true, true, F32_TOL, 30);
	check_matmul_half(STRATA_CUDA_F16, 9, 512, 256, false, true, F32_TOL, 31);
	/* general x is split into two terms of the weights' type: nearly f32 */
	check_matmul_half(STRATA_CUDA_BF16, 32, 4096, 512, false, false,
			  SPLIT_TOL, 32);
	check_matmul_half(STRATA_CUDA_F16, 17, 2048, 300, true, false,
			  SPLIT_TOL, 33);
	check_matmul_half(STRATA_CUDA_BF16, 128, 4096, 14336, false, false,
			  SPLIT_TOL, 34);
}

/* A folded norm's weights (in, of `type`, on the device) into *norm, and
 * the reference's input xn = rmsnorm(x) * weights on the CPU. */
static void fold_norm(strata_cuda_half type, const float *x, uint32_t in,
		      float *xn, strata_cuda_half_norm *norm, uint64_t seed)
{
	float *g = host_floats(in);
	fill_sixty_fourths(g, in, seed);
	OK(strata_kernel_rmsnorm(F.cpu, xn, x, &(strata_weight){STRATA_WEIGHT_F32, g, 1, in}, 1, 1e-5f, ERR));
	*norm = (strata_cuda_half_norm){upload_half(type, g, in), 1e-5f};
	free(g);
}

/* Three products sharing x in one call (q, k, v shapes), the second with a
 * bias, against the CPU product of each; with accumulate, y starts random
 * and the product is added to it; with `normed` (one row) rmsnorm folds
 * into the products. */
static void check_matmul_half_parts(strata_cuda_half type, uint32_t n,
				    bool accumulate, bool normed, uint64_t seed)
{
	const uint32_t in = 1024, outs[3] = {1024, 256, 256};
	float *x = host_floats((size_t)n * in), *b = host_floats(256);
	float *xn = host_floats((size_t)n * in);
	cuda_test_fill(x, (size_t)n * in, seed, 1.0f);
	cuda_test_fill(b, 256, seed + 1, 1.0f);
	float *dx = upload(x, (uint64_t)n * in * 4);
	strata_cuda_half_norm norm;
	if (normed)
		fold_norm(type, x, in, xn, &norm, seed + 2);
	else
		memcpy(xn, x, (size_t)n * in * sizeof *x);
	float *db = upload(b, 256 * 4);
	strata_cuda_half_part parts[3];
	float *want[3], *got[3];
	for (int i = 0; i < 3; i++) {
		size_t wn = (size_t)outs[i] * in, yn = (size_t)n * outs[i];
		float *w = host_floats(wn), *y0 = host_floats(yn);
		fill_sixty_fourths(w, wn, seed + 10 + i);
		cuda_test_fill(y0, yn, seed + 20 + i, accumulate ? 1.0f : 0.0f);
		want[i] = host_floats(yn), got[i] = host_floats(yn);
		OK(strata_kernel_matmul(F.cpu, want[i], xn, &(strata_weight){STRATA_WEIGHT_F32, w, outs[i], in}, i == 1 ? b : NULL, n, ERR));
		for (size_t j = 0; accumulate && j < yn; j++)
			want[i][j] += y0[j];
		parts[i] = (strata_cuda_half_part){
			.y = upload(y0, yn * 4), .w = upload_half(type, w, wn),
			.bias = i == 1 ? db : NULL, .out = outs[i]};
		free(w), free(y0);
	}
	OK(strata_cuda_matmul_half_parts(F.gpu, dx, normed ? &norm : NULL, type,
					 n, in, parts, 3, accumulate, ERR));
	for (int i = 0; i < 3; i++) {
		download(got[i], parts[i].y, (uint64_t)n * outs[i] * 4);
		char what[96];
		snprintf(what, sizeof what, "matmul parts %s n=%u part %d%s%s",
			 type == STRATA_CUDA_BF16 ? "bf16" : "f16", n, i,
			 accumulate ? " +=" : "", normed ? " normed" : "");
		expect_close(what, want[i], got[i], (size_t)n * outs[i],
			     n == 1 ? F32_TOL : SPLIT_TOL);
		free(want[i]), free(got[i]);
	}
	dev_free_all();
	free(x), free(xn), free(b);
}

/* silu(x . gate^T) * (x . up^T) in one launch against the CPU's two
 * products and swiglu; `normed`: with rmsnorm folded in. */
static void check_gated_half(strata_cuda_half type, uint32_t in, uint32_t out,
			     bool normed, uint64_t seed)
{
	float *x = host_floats(in), *wg = host_floats((size_t)out * in);
	float *wu = host_floats((size_t)out * in), *want = host_floats(out);
	float *up = host_floats(out), *got = host_floats(out);
	float *xn = host_floats(in);
	cuda_test_fill(x, in, seed, 1.0f);
	fill_sixty_fourths(wg, (size_t)out * in, seed + 1);
	fill_sixty_fourths(wu, (size_t)out * in, seed + 2);
	strata_cuda_half_norm norm;
	if (normed)
		fold_norm(type, x, in, xn, &norm, seed + 3);
	else
		memcpy(xn, x, (size_t)in * sizeof *x);
	OK(strata_kernel_matmul(F.cpu, want, xn, &(strata_weight){STRATA_WEIGHT_F32, wg, out, in}, NULL, 1, ERR));
	OK(strata_kernel_matmul(F.cpu, up, xn, &(strata_weight){STRATA_WEIGHT_F32, wu, out, in}, NULL, 1, ERR));
	OK(strata_kernel_swiglu(F.cpu, want, up, out, ERR));
	float *dy = dev_alloc((uint64_t)out * 4);
	OK(strata_cuda_gated_half(F.gpu, dy, upload(x, (uint64_t)in * 4),
				  normed ? &norm : NULL,
				  upload_half(type, wg, (size_t)out * in),
				  upload_half(type, wu, (size_t)out * in), type, in,
				  out, ERR));
	download(got, dy, (uint64_t)out * 4);
	char what[64];
	snprintf(what, sizeof what, "gated %s in=%u out=%u%s",
		 type == STRATA_CUDA_BF16 ? "bf16" : "f16", in, out,
		 normed ? " normed" : "");
	expect_close(what, want, got, out, F32_TOL);
	dev_free_all();
	free(x), free(xn), free(wg), free(wu), free(want), free(up), free(got);
}

/* Every GEMV tuning computes the same products: loads in flight per lane,
 * and one, two or four warps per row (a row split's partial sums meet in
 * shared memory). */
static void test_gemv_tunings_match_cpu(void **state)
{
	(void)state;
	const int unroll0 = strata__cuda_gemv_unroll;
	const int split0 = strata__cuda_gemv_split;
	strata__cuda_gemv_rows_max = STRATA__CUDA_GEMV_ROWS;
	for (int u = 4; u <= 8; u += 4) {
		for (int sp = 1; sp <= 4; sp *= 2) {
			strata__cuda_gemv_unroll = u;
			strata__cuda_gemv_split = sp;
			printf("  GEMV tuning: %d loads in flight, %d warps a row\n",
			       u, sp);
			check_matmul_half(STRATA_CUDA_BF16, 1, 4096, 1000, true,
					  false, F32_TOL, 60 + u + sp);
			check_matmul_half(STRATA_CUDA_F16, 2, 2048, 77, false,
					  false, F32_TOL, 70 + u + sp);
			check_matmul_half_parts(STRATA_CUDA_BF16, 1, true,
						sp == 2, 80 + u + sp);
			check_gated_half(STRATA_CUDA_BF16, 1024, 999, sp != 2,
					 90 + u + sp);
		}
	}
	strata__cuda_gemv_unroll = unroll0;
	strata__cuda_gemv_split = split0;
	strata__cuda_gemv_rows_max = F.gemv_default;
}

/* Part i's n x out products with the norm folded (fused, on the device)
 * equal, byte for byte, those of the norm then the products (plain). */
static void expect_same_rows(const char *what, strata_cuda_half type,
			     uint32_t n, int i, const float *fused,
			     const float *plain, uint32_t out)
{
	const size_t yn = (size_t)n * out;
	float *a = host_floats(yn), *b = host_floats(yn);
	download(a, fused, yn * 4);
	download(b, plain, yn * 4);
	printf("  %s %s n=%u part %d: norm folded == norm then products\n",
	       what, type == STRATA_CUDA_BF16 ? "bf16" : "f16", n, i);
	assert_memory_equal(a, b, yn * 4);
	free(a), free(b);
}

/* Several rows with the norm folded (prefill): the norm writes the
 * products' half input itself, and each product must equal, bit for bit,
 * the norm's f32 rows then the products without a norm. */
static void check_parts_norm_rows_bit_equal(strata_cuda_half type, uint32_t n,
					    uint64_t seed)
{
	const uint32_t in = 1024, outs[2] = {768, 256};
	float *x = host_floats((size_t)n * in), *g = host_floats(in);
	cuda_test_fill(x, (size_t)n * in, seed, 1.0f);
	fill_sixty_fourths(g, in, seed + 1);
	float *dx = upload(x, (uint64_t)n * in * 4);
	const strata_cuda_half_norm norm = {upload_half(type, g, in), 1e-5f};
	float *dxn = dev_alloc((uint64_t)n * in * 4);
	OK(strata_cuda_rmsnorm_half(F.gpu, dxn, dx, norm.w, type, n, in, 1e-5f,
				    ERR));
	strata_cuda_half_part fused[2], plain[2];
	for (int i = 0; i < 2; i++) {
		size_t wn = (size_t)outs[i] * in;
		float *w = host_floats(wn);
		fill_sixty_fourths(w, wn, seed + 10 + i);
		const void *dw = upload_half(type, w, wn);
		const uint64_t yb = (uint64_t)n * outs[i] * 4;
		fused[i] = (strata_cuda_half_part){dev_alloc(yb), dw, NULL, outs[i]};
		plain[i] = (strata_cuda_half_part){dev_alloc(yb), dw, NULL, outs[i]};
		free(w);
	}
	OK(strata_cuda_matmul_half_parts(F.gpu, dx, &norm, type, n, in, fused, 2,
					 false, ERR));
	OK(strata_cuda_matmul_half_parts(F.gpu, dxn, NULL, type, n, in, plain, 2,
					 false, ERR));
	for (int i = 0; i < 2; i++)
		expect_same_rows("parts", type, n, i, fused[i].y, plain[i].y,
				 outs[i]);
	dev_free_all();
	free(x), free(g);
}

/* The same through the kernel table with the norm's weights in f32, as
 * GGUF files store them: strata_kernel_products with the norm against
 * strata_kernel_rmsnorm then the products, bit for bit. */
static void check_products_f32_norm_rows(strata_cuda_half type, uint32_t n,
					 uint64_t seed)
{
	const uint32_t in = 1024, outs[2] = {512, 300};
	float *x = host_floats((size_t)n * in), *g = host_floats(in);
	cuda_test_fill(x, (size_t)n * in, seed, 1.0f);
	cuda_test_fill(g, in, seed + 1, 1.0f);
	float *dx = upload(x, (uint64_t)n * in * 4);
	const strata_kernel_norm norm = {
		{STRATA_WEIGHT_F32, upload(g, (uint64_t)in * 4), 1, in}, 1e-5f};
	float *dxn = dev_alloc((uint64_t)n * in * 4);
	const strata_weight_type wt =
		type == STRATA_CUDA_BF16 ? STRATA_WEIGHT_BF16 : STRATA_WEIGHT_F16;
	strata_kernel_product fused[2], plain[2];
	for (int i = 0; i < 2; i++) {
		size_t wn = (size_t)outs[i] * in;
		float *w = host_floats(wn);
		fill_sixty_fourths(w, wn, seed + 10 + i);
		const strata_weight dw = {wt, upload_half(type, w, wn), outs[i], in};
		const uint64_t yb = (uint64_t)n * outs[i] * 4;
		fused[i] = (strata_kernel_product){dev_alloc(yb), dw, NULL};
		plain[i] = (strata_kernel_product){dev_alloc(yb), dw, NULL};
		free(w);
	}
	OK(strata_kernel_products(F.gpu, dx, &norm, dxn, n, fused, 2, false,
				  NULL, ERR));
	OK(strata_kernel_rmsnorm(F.gpu, dxn, dx, &norm.w, n, norm.eps, ERR));
	OK(strata_kernel_products(F.gpu, dxn, NULL, NULL, n, plain, 2, false,
				  NULL, ERR));
	for (int i = 0; i < 2; i++)
		expect_same_rows("products, f32 norm", type, n, i, fused[i].y,
				 plain[i].y, outs[i]);
	dev_free_all();
	free(x), free(g);
}

/* The folded norm on several rows at both prefill precisions: the compute
 * context's terms (1 rounded once, 3 split in two) pick the layout the
 * norm writes, so each is checked against its own unfolded path. */
static void test_parts_norm_rows_equal_unfolded(void **state)
{
	(void)state;
	strata__cuda_compute *k = strata__cuda_compute_of(F.gpu);
	assert_non_null(k);
	const int terms0 = k->prefill_terms;
	const int terms[] = {1, 3};
	strata__cuda_gemv_rows_max = 0; /* every row count through cuBLAS */
	for (int t = 0; t < 2; t++) {
		k->prefill_terms = terms[t];
		printf("  prefill terms %d\n", terms[t]);
		check_parts_norm_rows_bit_equal(STRATA_CUDA_BF16, 7, 100 + t);
		check_parts_norm_rows_bit_equal(STRATA_CUDA_F16, 64, 110 + t);
		check_parts_norm_rows_bit_equal(STRATA_CUDA_BF16, 2, 120 + t);
		check_products_f32_norm_rows(STRATA_CUDA_BF16, 33, 130 + t);
		check_products_f32_norm_rows(STRATA_CUDA_F16, 5, 140 + t);
	}
	k->prefill_terms = terms0;
	strata__cuda_gemv_rows_max = F.gemv_default;
}

static void test_matmul_half_parts_matches_cpu(void **state)
{
	(void)state;
	check_matmul_half_parts(STRATA_CUDA_BF16, 1, false, false, 50);
	check_matmul_half_parts(STRATA_CUDA_BF16, 1, true, false, 51);
	check_matmul_half_parts(STRATA_CUDA_F16, 1, true, false, 52);
	check_matmul_half_parts(STRATA_CUDA_BF16, 7, false, false, 53);
	check_matmul_half_parts(STRATA_CUDA_F16, 7, true, false, 54);
	check_matmul_half_parts(STRATA_CUDA_BF16, 1, false, true, 57);
	check_matmul_half_parts(STRATA_CUDA_F16, 1, true, true, 58);
	check_gated_half(STRATA_CUDA_BF16, 1024, 2000, false, 55);
	check_gated_half(STRATA_CUDA_F16, 1000, 300, false, 56); /* scalar */
	check_gated_half(STRATA_CUDA_BF16, 1024, 2000, true, 59);
	check_gated_half(STRATA_CUDA_F16, 1000, 300, true, 60); /* scalar */
	/* one output aliasing the input is refused, not computed */
	strata_error err;
	float *d = dev_alloc(4096);
	strata_cuda_half_part p = {.y = d, .w = d + 512, .out = 4};
	assert_int_equal(strata_cuda_matmul_half_parts(F.gpu, d, NULL, STRATA_CUDA_BF16,
						       1, 4, &p, 1, false, &err),
			 STRATA_E_INVALID_ARG);
	dev_free_all();
}

int main(void)
{
	if (gpu_skip_without_device("test_backend_cuda_kernels_matmul"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matmul_f32_matches_cpu),
		cmocka_unit_test(test_matmul_refuses_dimensions_cublas_cannot_take),
		cmocka_unit_test(test_matmul_half_gemv_matches_cpu),
		cmocka_unit_test(test_matmul_half_gemm_matches_cpu),
		cmocka_unit_test(test_matmul_half_parts_matches_cpu),
		cmocka_unit_test(test_parts_norm_rows_equal_unfolded),
		cmocka_unit_test(test_gemv_tunings_match_cpu),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
