/* test_cuda_kernels.c - every CUDA kernel against the CPU kernel on seeded
 * random inputs: matmul (f32 cuBLAS, bf16/f16 GEMV and GEMM), RMSNorm, RoPE
 * both layouts with Llama 3 frequencies, attention decode/prefill with GQA,
 * causal mask and sliding window, SwiGLU, add, embed, and device top-k
 * against a sorted reference (layer: backend tests).
 *
 * Tolerances: 1e-4 relative for f32 work (only the summation order
 * differs), 2e-2 for half-precision inputs (issue 8). Each case prints its
 * measured worst error. Skipped (77) where no CUDA device is present. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backend/cuda_test_util.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.h"

#define F32_TOL 1e-4
/* x split into two half terms before cuBLAS: ~16 bits (bf16) of x kept */
#define SPLIT_TOL 1e-3
#define MAX_BLOCKS 64

static struct {
	strata_backend *b;
	strata_arena *arena;
	strata_compute *cpu, *gpu;
	strata_stream *gs; /* the CUDA compute stream */
	uint32_t gemv_default; /* strata__cuda_gemv_rows_max as shipped */
	void *blocks[MAX_BLOCKS];
	int count;
} F;

/* ------------------------------------------------------------------------ */

#define OK(call)                                                               \
	do {                                                                   \
		strata_error e_;                                               \
		strata_status s_ = (call);                                     \
		if (s_ != STRATA_OK)                                           \
			fail_msg("%s: %s (fix: %s)", #call, e_.message,        \
				 e_.fix);                                      \
	} while (0)
#define ERR (&e_)

static void dev_free_all(void)
{
	for (int i = 0; i < F.count; i++)
		assert_int_equal(strata_arena_free(F.arena, F.blocks[i], NULL),
				 STRATA_OK);
	F.count = 0;
}

static void *dev_alloc(uint64_t bytes)
{
	void *p = NULL;
	if (F.count == MAX_BLOCKS)
		dev_free_all(); /* left by a failed case */
	OK(strata_arena_alloc(F.arena, bytes, &p, ERR));
	F.blocks[F.count++] = p;
	return p;
}

/* Queued on the compute stream, so later kernels see the bytes. */
static void *upload(const void *h, uint64_t bytes)
{
	void *d = dev_alloc(bytes);
	OK(strata_backend_copy_h2d_async(F.b, F.gs, d, h, bytes, ERR));
	return d;
}

static void download(void *h, const void *d, uint64_t bytes)
{
	OK(strata_cuda_copy_d2h_async(F.b, F.gs, h, d, bytes, ERR));
	OK(strata_backend_synchronize(F.b, F.gs, ERR));
}

static float *host_floats(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof *p);
	assert_non_null(p);
	return p;
}

static void expect_close(const char *what, const float *want, const float *got,
			 size_t n, double tol)
{
	size_t at;
	double e = cuda_test_rel_err(want, got, n, &at);
	printf("  %-52s worst rel err %.3g (tol %.0e)\n", what, e, tol);
	if (!(e <= tol))
		fail_msg("%s: element %zu: want %.9g got %.9g (rel %.3g > %.0e)",
			 what, at, (double)want[at], (double)got[at], e, tol);
}

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
	OK(strata_kernel_matmul(F.cpu, want, x, w, bias ? b : NULL, n, in, out,
				ERR));
	float *dx = upload(x, (uint64_t)n * in * 4);
	float *dw = upload(w, (uint64_t)out * in * 4);
	float *db = upload(b, (uint64_t)out * 4);
	float *dy = dev_alloc((uint64_t)n * out * 4);
	OK(strata_kernel_matmul(F.gpu, dy, dx, dw, bias ? db : NULL, n, in, out,
				ERR));
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

static uint16_t bf16_bits(float f) /* exact for values bf16 can hold */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

static uint16_t f16_bits(float f) /* exact for normal values f16 can hold */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) == 0)
		return (uint16_t)((u >> 16) & 0x8000u);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t exp = ((u >> 23) & 0xffu) - 127u + 15u;
	return (uint16_t)(sign | (exp << 10) | ((u >> 13) & 0x3ffu));
}

/* w (n) on the device as `type`'s bits (w's values must be exact in it). */
static void *upload_half(strata_cuda_half type, const float *w, size_t n)
{
	uint16_t *h = calloc(n, 2);
	assert_non_null(h);
	for (size_t i = 0; i < n; i++)
		h[i] = type == STRATA_CUDA_BF16 ? bf16_bits(w[i]) : f16_bits(w[i]);
	void *d = upload(h, (uint64_t)n * 2);
	OK(strata_backend_synchronize(F.b, F.gs, ERR)); /* h read: free it */
	free(h);
	return d;
}

/* k/64 with |k| <= 64: exact in f32, bf16 and f16 alike. */
static void fill_sixty_fourths(float *x, size_t n, uint64_t seed)
{
	cuda_test_fill(x, n, seed, 1.0f);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)lrintf(x[i] * 64.0f) / 64.0f;
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
	OK(strata_kernel_matmul(F.cpu, want, x, w, bias ? b : NULL, n, in, out,
				ERR));
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
	assert_int_equal(strata_kernel_matmul(F.gpu, d + 8, d, d + 16, NULL, 1,
					      0x80000000u, 1, &err),
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
	OK(strata_kernel_rmsnorm(F.cpu, xn, x, g, 1, in, 1e-5f, ERR));
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
		OK(strata_kernel_matmul(F.cpu, want[i], xn, w, i == 1 ? b : NULL,
					n, in, outs[i], ERR));
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
	OK(strata_kernel_matmul(F.cpu, want, xn, wg, NULL, 1, in, out, ERR));
	OK(strata_kernel_matmul(F.cpu, up, xn, wu, NULL, 1, in, out, ERR));
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

/* ------------------------------------------------------------------------ */
/* Normalisation, rotation, element-wise                                    */
/* ------------------------------------------------------------------------ */

static void test_rmsnorm_matches_cpu_in_and_out_of_place(void **state)
{
	(void)state;
	const uint32_t n = 5, dim = 4096;
	float *x = host_floats(n * dim), *w = host_floats(dim);
	float *want = host_floats(n * dim), *got = host_floats(n * dim);
	cuda_test_fill(x, n * dim, 40, 3.0f);
	cuda_test_fill(w, dim, 41, 1.0f);
	OK(strata_kernel_rmsnorm(F.cpu, want, x, w, n, dim, 1e-5f, ERR));
	float *dx = upload(x, n * dim * 4), *dw = upload(w, dim * 4);
	float *dy = dev_alloc(n * dim * 4);
	OK(strata_kernel_rmsnorm(F.gpu, dy, dx, dw, n, dim, 1e-5f, ERR));
	download(got, dy, n * dim * 4);
	expect_close("rmsnorm n=5 dim=4096", want, got, n * dim, 1e-5);
	OK(strata_kernel_rmsnorm(F.gpu, dx, dx, dw, n, dim, 1e-5f, ERR));
	download(got, dx, n * dim * 4);
	expect_close("rmsnorm in place", want, got, n * dim, 1e-5);
	dev_free_all();
	/* half weights read as stored: the same as the f32 kernel on their
	 * values (w in sixty-fourths is exact in both types) */
	fill_sixty_fourths(w, dim, 42);
	OK(strata_kernel_rmsnorm(F.cpu, want, x, w, n, dim, 1e-5f, ERR));
	for (int t = 0; t < 2; t++) {
		dx = upload(x, n * dim * 4);
		void *dwh = upload_half(t ? STRATA_CUDA_F16 : STRATA_CUDA_BF16,
					w, dim);
		dy = dev_alloc(n * dim * 4);
		OK(strata_cuda_rmsnorm_half(F.gpu, dy, dx, dwh,
					    t ? STRATA_CUDA_F16 : STRATA_CUDA_BF16,
					    n, dim, 1e-5f, ERR));
		download(got, dy, n * dim * 4);
		expect_close(t ? "rmsnorm f16 weights" : "rmsnorm bf16 weights",
			     want, got, n * dim, 1e-5);
		dev_free_all();
	}
	free(x), free(w), free(want), free(got);
}

/* Llama 3 rope_scaling frequencies (factor 8, low 1, high 4, 8192). */
static void llama3_freqs(float *f, uint32_t hd, double theta)
{
	const double factor = 8.0, lo = 1.0, hi = 4.0, orig = 8192.0;
	for (uint32_t i = 0; i < hd / 2; i++) {
		double base = 1.0 / pow(theta, 2.0 * i / hd);
		double wavelen = 2.0 * M_PI / base;
		double v;
		if (wavelen < orig / hi) {
			v = base;
		} else if (wavelen > orig / lo) {
			v = base / factor;
		} else {
			double s = (orig / wavelen - lo) / (hi - lo);
			v = (1.0 - s) * base / factor + s * base;
		}
		f[i] = (float)v;
	}
}

static void check_rope(uint32_t n, uint32_t pos0, uint32_t heads, uint32_t hd,
		       strata_rope_layout layout, uint64_t seed)
{
	size_t count = (size_t)n * heads * hd;
	float *x = host_floats(count), *got = host_floats(count);
	float *freq = host_floats(hd / 2);
	cuda_test_fill(x, count, seed, 1.0f);
	llama3_freqs(freq, hd, 500000.0);
	float *dx = upload(x, count * 4), *df = upload(freq, hd / 2 * 4);
	OK(strata_kernel_rope(F.cpu, x, n, pos0, heads, hd, freq, layout, ERR));
	OK(strata_kernel_rope(F.gpu, dx, n, pos0, heads, hd, df, layout, ERR));
	download(got, dx, count * 4);
	char what[96];
	snprintf(what, sizeof what, "rope %s n=%u pos0=%u heads=%u hd=%u",
		 strata_rope_layout_name(layout), n, pos0, heads, hd);
	expect_close(what, x, got, count, 1e-5);
	dev_free_all();
	free(x), free(got), free(freq);
}

static void test_rope_matches_cpu_both_layouts_llama3(void **state)
{
	(void)state;
	check_rope(9, 0, 8, 128, STRATA_ROPE_HALF, 50);
	check_rope(9, 0, 8, 128, STRATA_ROPE_INTERLEAVED, 51);
	check_rope(3, 131000, 4, 64, STRATA_ROPE_HALF, 52);
	check_rope(1, 4097, 32, 128, STRATA_ROPE_HALF, 53);
	/* queries and keys in one launch: the same floats as two calls */
	const uint32_t n = 5, hq = 8, hk = 2, hd = 64;
	size_t cq = (size_t)n * hq * hd, ck = (size_t)n * hk * hd;
	float *q = host_floats(cq), *k = host_floats(ck), *freq = host_floats(hd / 2);
	float *gq = host_floats(cq), *gk = host_floats(ck);
	cuda_test_fill(q, cq, 54, 1.0f);
	cuda_test_fill(k, ck, 55, 1.0f);
	llama3_freqs(freq, hd, 500000.0);
	float *dq = upload(q, cq * 4), *dk = upload(k, ck * 4);
	float *df = upload(freq, hd / 2 * 4);
	OK(strata_cuda_rope_qk(F.gpu, dq, dk, n, 77, hq, hk, hd, df,
			       STRATA_ROPE_INTERLEAVED, ERR));
	OK(strata_kernel_rope(F.cpu, q, n, 77, hq, hd, freq,
			      STRATA_ROPE_INTERLEAVED, ERR));
	OK(strata_kernel_rope(F.cpu, k, n, 77, hk, hd, freq,
			      STRATA_ROPE_INTERLEAVED, ERR));
	download(gq, dq, cq * 4);
	download(gk, dk, ck * 4);
	expect_close("rope q,k in one launch: q", q, gq, cq, 1e-5);
	expect_close("rope q,k in one launch: k", k, gk, ck, 1e-5);
	dev_free_all();
	free(q), free(k), free(freq), free(gq), free(gk);
}

static void test_swiglu_add_embed_match_cpu(void **state)
{
	(void)state;
	const uint64_t count = 100003;
	float *g = host_floats(count), *u = host_floats(count);
	float *got = host_floats(count);
	cuda_test_fill(g, count, 60, 6.0f);
	cuda_test_fill(u, count, 61, 2.0f);
	float *dg = upload(g, count * 4), *du = upload(u, count * 4);
	OK(strata_kernel_swiglu(F.cpu, g, u, count, ERR));
	OK(strata_kernel_swiglu(F.gpu, dg, du, count, ERR));
	download(got, dg, count * 4);
	expect_close("swiglu count=100003", g, got, count, 1e-5);
	OK(strata_kernel_add(F.cpu, g, u, count, ERR));
	OK(strata_kernel_add(F.gpu, dg, du, count, ERR));
	download(got, dg, count * 4);
	expect_close("add count=100003", g, got, count, 1e-6);
	dev_free_all();
	free(g), free(u), free(got);

	/* embed: exact copies, including a batch past the id chunk size */
	const uint32_t vocab = 1000, dim = 8, n = 20000;
	float *table = host_floats(vocab * dim);
	float *want = host_floats((size_t)n * dim), *out = host_floats((size_t)n * dim);
	int32_t *tok = calloc(n, sizeof *tok);
	assert_non_null(tok);
	cuda_test_fill(table, vocab * dim, 62, 1.0f);
	for (uint32_t i = 0; i < n; i++)
		tok[i] = (int32_t)((i * 7919u + 3u) % vocab);
	tok[0] = 0;
	tok[n - 1] = (int32_t)vocab - 1;
	float *dt = upload(table, vocab * dim * 4);
	float *dx = dev_alloc((uint64_t)n * dim * 4);
	OK(strata_kernel_embed(F.cpu, want, table, vocab, tok, n, dim, ERR));
	OK(strata_kernel_embed(F.gpu, dx, dt, vocab, tok, n, dim, ERR));
	download(out, dx, (uint64_t)n * dim * 4);
	assert_memory_equal(want, out, (size_t)n * dim * 4);
	printf("  %-52s exact\n", "embed n=20000 dim=8");
	dev_free_all();
	free(table), free(want), free(out), free(tok);
}

/* ------------------------------------------------------------------------ */
/* Attention                                                                */
/* ------------------------------------------------------------------------ */

static void check_attention(uint32_t n, uint32_t pos0, uint32_t heads,
			    uint32_t kv_heads, uint32_t hd, uint32_t window,
			    uint64_t seed)
{
	const uint32_t positions = pos0 + n;
	size_t nq = (size_t)n * heads * hd, nkv = (size_t)positions * kv_heads * hd;
	float *q = host_floats(nq), *k = host_floats(nkv), *v = host_floats(nkv);
	float *want = host_floats(nq), *got = host_floats(nq);
	cuda_test_fill(q, nq, seed, 1.0f);
	cuda_test_fill(k, nkv, seed + 1, 1.0f);
	cuda_test_fill(v, nkv, seed + 2, 1.0f);
	strata_attention_shape s = {.n = n, .pos0 = pos0, .heads = heads,
				    .kv_heads = kv_heads, .head_dim = hd,
				    .window = window,
				    .scale = 1.0f / sqrtf((float)hd)};
	OK(strata_kernel_attention(F.cpu, want, q, k, v, &s, ERR));
	float *dq = upload(q, nq * 4), *dk = upload(k, nkv * 4);
	float *dv = upload(v, nkv * 4), *dout = dev_alloc(nq * 4);
	/* the shipped key-split target, then fewer and more splits */
	const uint32_t dflt = strata__cuda_attention_blocks_per_sm;
	const uint32_t per[] = {dflt, 1, 16};
	for (size_t r = 0; r < sizeof per / sizeof *per; r++) {
		strata__cuda_attention_blocks_per_sm = per[r];
		OK(strata_kernel_attention(F.gpu, dout, dq, dk, dv, &s, ERR));
		download(got, dout, nq * 4);
		char what[96];
		snprintf(what, sizeof what,
			 "attention n=%u pos0=%u h=%u/%u hd=%u win=%u split/SM=%u",
			 n, pos0, heads, kv_heads, hd, window, per[r]);
		expect_close(what, want, got, nq, F32_TOL);
	}
	strata__cuda_attention_blocks_per_sm = dflt;
	dev_free_all();
	free(q), free(k), free(v), free(want), free(got);
}

static void test_attention_decode_matches_cpu(void **state)
{
	(void)state;
	check_attention(1, 0, 4, 4, 64, 0, 70);      /* first token */
	check_attention(1, 300, 8, 2, 64, 0, 71);    /* GQA 4:1 */
	check_attention(1, 1000, 32, 8, 128, 0, 72); /* llama-8B shape */
	check_attention(1, 517, 14, 2, 64, 0, 73);   /* qwen2-0.5B shape */
	check_attention(1, 99, 8, 8, 80, 0, 74);     /* head size not 2^k */
	check_attention(1, 70, 2, 1, 30, 0, 75);     /* head size not 4k */
	check_attention(1, 8191, 32, 8, 128, 0, 76); /* long cache, many splits */
	check_attention(1, 700, 8, 2, 256, 0, 77);   /* gemma-style heads */
	check_attention(1, 2, 16, 16, 128, 0, 78);   /* warps without keys */
}

static void test_attention_prefill_causal_matches_cpu(void **state)
{
	(void)state;
	check_attention(37, 0, 8, 2, 64, 0, 80);
	check_attention(16, 200, 8, 4, 128, 0, 81); /* chunk after a prefix */
	check_attention(300, 0, 4, 1, 32, 0, 82);   /* several key tiles */
	check_attention(200, 0, 1, 1, 64, 0, 83);   /* key splits, some empty */
	check_attention(4, 2000, 2, 1, 128, 0, 84); /* few pairs, long cache */
}

static void test_attention_sliding_window_matches_cpu(void **state)
{
	(void)state;
	check_attention(20, 100, 8, 2, 64, 50, 90);
	check_attention(1, 400, 8, 2, 64, 129, 91);
	check_attention(64, 0, 4, 2, 64, 16, 92); /* window inside the prompt */
}

/* ------------------------------------------------------------------------ */
/* Figures: decode-shaped products against the device's own copy rate      */
/* ------------------------------------------------------------------------ */

/* Seconds per call of fn over `reps` calls on the compute stream. */
typedef void (*timed_fn)(void *arg);

static double time_on_stream(timed_fn fn, void *arg, int reps)
{
	strata_event *a = NULL, *b = NULL;
	OK(strata_event_create(F.b, &a, ERR));
	OK(strata_event_create(F.b, &b, ERR));
	fn(arg); /* warm-up */
	OK(strata_event_record(F.b, a, F.gs, ERR));
	for (int i = 0; i < reps; i++)
		fn(arg);
	OK(strata_event_record(F.b, b, F.gs, ERR));
	OK(strata_event_wait(F.b, b, ERR));
	double sec = 0;
	OK(strata_event_elapsed(F.b, a, b, &sec, ERR));
	strata_event_destroy(F.b, a);
	strata_event_destroy(F.b, b);
	return sec / reps;
}

typedef struct mm_arg {
	float *y;
	const float *x;
	const void *w;
	uint32_t n, in, out;
	int half; /* 0: f32 matmul slot, 1: bf16 */
	void *dst; /* d2d copy instead when set */
	uint64_t bytes;
} mm_arg;

static void run_mm(void *p)
{
	mm_arg *m = p;
	if (m->dst) {
		assert_int_equal(cudaMemcpyAsync(m->dst, m->w, m->bytes,
						 cudaMemcpyDeviceToDevice,
						 F.gs->cuda),
				 cudaSuccess);
	} else if (m->half) {
		OK(strata_cuda_matmul_half(F.gpu, m->y, m->x, m->w,
					   STRATA_CUDA_BF16, NULL, m->n, m->in,
					   m->out, ERR));
	} else {
		OK(strata_kernel_matmul(F.gpu, m->y, m->x, m->w, NULL, m->n,
					m->in, m->out, ERR));
	}
}

static void test_decode_products_reach_memory_bandwidth(void **state)
{
	(void)state;
	if (getenv("STRATA_CUDA_NO_TIMING"))
		skip(); /* under compute-sanitizer times mean nothing */
	const uint32_t in = 4096, out = 14336; /* a llama-8B MLP projection */
	const uint64_t w16 = (uint64_t)in * out * 2, w32 = w16 * 2;
	void *w = dev_alloc(w32), *dst = dev_alloc(w32);
	float *x = dev_alloc((uint64_t)8 * in * 4), *y = dev_alloc((uint64_t)8 * out * 4);
	assert_int_equal(cudaMemset(w, 0, w32), cudaSuccess);
	assert_int_equal(cudaMemset(x, 0, (uint64_t)8 * in * 4), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	/* device-to-device copy: reads and writes, so 2x bytes of traffic */
	mm_arg cp = {.w = w, .dst = dst, .bytes = w32};
	double t_copy = time_on_stream(run_mm, &cp, 10);
	double hbm = 2.0 * (double)w32 / t_copy;
	printf("  device-to-device copy: %.0f GB/s of traffic (the reference)\n", hbm / 1e9);
	const uint32_t dflt = F.gemv_default;
	for (uint32_t n = 1; n <= 8; n *= 2) {
		for (int path = 0; path < 2; path++) {
			strata__cuda_gemv_rows_max = path ? 0 : 8;
			mm_arg h = {.y = y, .x = x, .w = w, .n = n, .in = in,
				    .out = out, .half = 1};
			double t = time_on_stream(run_mm, &h, 20);
			double rate = (double)w16 / t;
			printf("  bf16 n=%u %ux%u %s: %.1f us, %.0f GB/s of weights, %.0f%% of the copy rate%s\n",
			       n, out, in, path ? "cublasGemmEx" : "GEMV kernel",
			       t * 1e6, rate / 1e9, 100.0 * rate / hbm,
			       (n <= dflt) == !path ? " (default)" : "");
			/* half of the copy rate is far below what a working
			 * GEMV does and far above what a broken one (no
			 * vector loads) does */
			if (n == 1 && !path)
				assert_true(rate > 0.5 * hbm);
		}
	}
	strata__cuda_gemv_rows_max = dflt;
	mm_arg f = {.y = y, .x = x, .w = w, .n = 1, .in = in, .out = out};
	double t = time_on_stream(run_mm, &f, 20);
	printf("  f32 cuBLAS n=1 %ux%u: %.1f us, %.0f GB/s of weights, %.0f%% of the copy rate\n",
	       out, in, t * 1e6, (double)w32 / t / 1e9, 100.0 * (double)w32 / t / hbm);
	dev_free_all();
	/* prefill: 128 rows through cublasGemmEx (bf16 in, f32 out) */
	w = dev_alloc(w16);
	x = dev_alloc((uint64_t)128 * in * 4);
	y = dev_alloc((uint64_t)128 * out * 4);
	assert_int_equal(cudaMemset(w, 0, w16), cudaSuccess);
	assert_int_equal(cudaMemset(x, 0, (uint64_t)128 * in * 4), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	mm_arg g = {.y = y, .x = x, .w = w, .n = 128, .in = in, .out = out, .half = 1};
	t = time_on_stream(run_mm, &g, 20);
	printf("  bf16 GEMM n=128 %ux%u (with x conversion): %.1f us, %.1f TFLOP/s\n",
	       out, in, t * 1e6, 2.0 * 128 * in * (double)out / t / 1e12);
	dev_free_all();
}

typedef struct att_arg {
	float *out, *q, *k, *v;
	strata_attention_shape s;
} att_arg;

static void run_att(void *p)
{
	att_arg *a = p;
	OK(strata_kernel_attention(F.gpu, a->out, a->q, a->k, a->v, &a->s, ERR));
}

/* A figure only: each step of one decode layer of the 7.5 GB llama of
 * bench/gpu (dim 4096, ffn 14336, 32/8 heads of 128, bf16), timed alone,
 * and the layer's sum against its weights: where a decode token's time
 * goes besides reading the weights. */
typedef struct layer_arg {
	int step; /* one step, OUT_STEP, or WHOLE_LAYER */
	float *x, *xb, *q, *k, *v, *att, *hb, *logits, *inv_freq;
	void *wq, *wk, *wv, *wo, *wg, *wu, *wd, *wout, *norm;
	strata_attention_shape s;
} layer_arg;

#define LAYER_STEPS 6 /* the norms fold into the products after them */
#define OUT_STEP 6    /* the output product: vocab 32000 */
#define WHOLE_LAYER 9

static void run_layer_step(void *p)
{
	layer_arg *a = p;
	const uint32_t dim = 4096, ffn = 14336, kvd = 1024;
	const strata_cuda_half_norm norm = {a->norm, 1e-5f};
	switch (a->step) {
	case 0: {
		strata_cuda_half_part p[3] = {{a->q, a->wq, NULL, dim},
					      {a->k, a->wk, NULL, kvd},
					      {a->v, a->wv, NULL, kvd}};
		OK(strata_cuda_matmul_half_parts(F.gpu, a->x, &norm,
						 STRATA_CUDA_BF16, 1, dim, p, 3,
						 false, ERR));
		break;
	}
	case 1:
		OK(strata_cuda_rope_qk(F.gpu, a->q, a->k + 64 * 1024, 1,
				       a->s.pos0, 32, 8, 128, a->inv_freq,
				       STRATA_ROPE_HALF, ERR));
		break;
	case 2:
		OK(strata_kernel_attention(F.gpu, a->att, a->q, a->k, a->v,
					   &a->s, ERR));
		break;
	case 3: {
		strata_cuda_half_part p = {a->x, a->wo, NULL, dim};
		OK(strata_cuda_matmul_half_parts(F.gpu, a->att, NULL,
						 STRATA_CUDA_BF16, 1, dim, &p, 1,
						 true, ERR));
		break;
	}
	case 4:
		OK(strata_cuda_gated_half(F.gpu, a->hb, a->x, &norm, a->wg,
					  a->wu, STRATA_CUDA_BF16, dim, ffn,
					  ERR));
		break;
	case 5: {
		strata_cuda_half_part p = {a->x, a->wd, NULL, dim};
		OK(strata_cuda_matmul_half_parts(F.gpu, a->hb, NULL,
						 STRATA_CUDA_BF16, 1, ffn, &p, 1,
						 true, ERR));
		break;
	}
	case OUT_STEP:
		OK(strata_cuda_matmul_half(F.gpu, a->logits, a->xb, a->wout,
					   STRATA_CUDA_BF16, NULL, 1, dim,
					   32000, ERR));
		break;
	case WHOLE_LAYER:
		for (a->step = 0; a->step < LAYER_STEPS; a->step++)
			run_layer_step(a);
		a->step = WHOLE_LAYER;
		break;
	}
}

static void test_decode_layer_figure(void **state)
{
	(void)state;
	if (getenv("STRATA_CUDA_NO_TIMING"))
		skip();
	const uint32_t dim = 4096, ffn = 14336, kvd = 1024, pos = 64;
	const char *names[LAYER_STEPS + 1] = {
		"norm+q,k,v", "rope (q, k)", "attention", "o product +=",
		"norm+gate,up", "down product +=", "output product"};
	const uint64_t bytes[LAYER_STEPS + 1] = {
		(uint64_t)(dim + 2 * kvd) * dim * 2, 0, 0,
		(uint64_t)dim * dim * 2, (uint64_t)2 * ffn * dim * 2,
		(uint64_t)dim * ffn * 2, (uint64_t)32000 * dim * 2};
	layer_arg a = {
		.x = dev_alloc(dim * 4), .xb = dev_alloc(dim * 4),
		.q = dev_alloc(dim * 4), .att = dev_alloc(dim * 4),
		.k = dev_alloc((uint64_t)(pos + 1) * kvd * 4),
		.v = dev_alloc((uint64_t)(pos + 1) * kvd * 4),
		.hb = dev_alloc(ffn * 4), .logits = dev_alloc(32000 * 4),
		.inv_freq = dev_alloc(64 * 4), .norm = dev_alloc(dim * 2),
		.wq = dev_alloc((uint64_t)dim * dim * 2),
		.wk = dev_alloc((uint64_t)kvd * dim * 2),
		.wv = dev_alloc((uint64_t)kvd * dim * 2),
		.wo = dev_alloc((uint64_t)dim * dim * 2),
		.wg = dev_alloc((uint64_t)ffn * dim * 2),
		.wu = dev_alloc((uint64_t)ffn * dim * 2),
		.wd = dev_alloc((uint64_t)dim * ffn * 2),
		.wout = dev_alloc((uint64_t)32000 * dim * 2),
		.s = {.n = 1, .pos0 = pos, .heads = 32, .kv_heads = 8,
		      .head_dim = 128, .scale = 0.088f},
	};
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	/* the products under each GEMV tuning, the shipped one first */
	const int unroll0 = strata__cuda_gemv_unroll;
	const int split0 = strata__cuda_gemv_split;
	const int tune[][2] = {{unroll0, split0}, {4, 1}, {8, 1}, {4, 2},
			       {8, 2}, {8, 4}};
	const int products[] = {0, 3, 4, 5, OUT_STEP};
	for (size_t t = 0; t < sizeof tune / sizeof *tune; t++) {
		strata__cuda_gemv_unroll = tune[t][0];
		strata__cuda_gemv_split = tune[t][1];
		char line[512];
		int len = snprintf(line, sizeof line, "  GEMV %d in flight, %d warps/row%s:",
				   tune[t][0], tune[t][1], t ? "" : " (default)");
		for (size_t i = 0; i < sizeof products / sizeof *products; i++) {
			a.step = products[i];
			double sec = time_on_stream(run_layer_step, &a, 50);
			len += snprintf(line + len, sizeof line - (size_t)len,
					" %s %.1f us %.0f GB/s;", names[a.step],
					sec * 1e6, bytes[a.step] / sec / 1e9);
		}
		a.step = WHOLE_LAYER;
		printf("%s layer back to back %.1f us\n", line,
		       time_on_stream(run_layer_step, &a, 50) * 1e6);
	}
	strata__cuda_gemv_unroll = unroll0;
	strata__cuda_gemv_split = split0;
	double total = 0;
	uint64_t weights = 0;
	for (int i = 0; i <= OUT_STEP; i++) {
		a.step = i;
		double t = time_on_stream(run_layer_step, &a, 50);
		if (i < LAYER_STEPS)
			total += t, weights += bytes[i];
		if (bytes[i])
			printf("  decode layer: %-16s %6.1f us, %4.0f GB/s\n",
			       names[i], t * 1e6, bytes[i] / t / 1e9);
		else
			printf("  decode layer: %-16s %6.1f us\n", names[i],
			       t * 1e6);
	}
	printf("  decode layer: the steps alone %.1f us, %.0f MB of weights at "
	       "%.0f GB/s over the sum\n", total * 1e6,
	       weights / 1e6, weights / total / 1e9);
	a.step = WHOLE_LAYER;
	double layer = time_on_stream(run_layer_step, &a, 50);
	printf("  decode layer: back to back %.1f us, %.0f GB/s of weights\n",
	       layer * 1e6, weights / layer / 1e9);
	dev_free_all();
}

/* A figure only: decode attention time over a long cache (llama-8B heads). */
static void test_decode_attention_figure(void **state)
{
	(void)state;
	if (getenv("STRATA_CUDA_NO_TIMING"))
		skip();
	const uint32_t heads = 32, kv = 8, hd = 128;
	for (uint32_t pos = 512; pos <= 8192; pos *= 4) {
		uint64_t cache = (uint64_t)(pos + 1) * kv * hd * 4;
		att_arg a = {.out = dev_alloc(heads * hd * 4),
			     .q = dev_alloc(heads * hd * 4),
			     .k = dev_alloc(cache), .v = dev_alloc(cache),
			     .s = {.n = 1, .pos0 = pos, .heads = heads,
				   .kv_heads = kv, .head_dim = hd,
				   .scale = 0.088f}};
		assert_int_equal(cudaMemset(a.q, 0, heads * hd * 4), cudaSuccess);
		assert_int_equal(cudaMemset(a.k, 0, cache), cudaSuccess);
		assert_int_equal(cudaMemset(a.v, 0, cache), cudaSuccess);
		assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
		const uint32_t dflt = strata__cuda_attention_blocks_per_sm;
		for (uint32_t per = 1; per <= 16; per *= 2) {
			strata__cuda_attention_blocks_per_sm = per;
			double t = time_on_stream(run_att, &a, 20);
			printf("  attention decode pos=%u h=%u/%u hd=%u, %2u blocks/SM: %.1f us, %.0f GB/s of cache%s\n",
			       pos, heads, kv, hd, per, t * 1e6,
			       2.0 * (double)cache / t / 1e9,
			       per == dflt ? " (default)" : "");
		}
		strata__cuda_attention_blocks_per_sm = dflt;
		dev_free_all();
	}
}

/* ------------------------------------------------------------------------ */
/* Top-k                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct ref_cand {
	float v;
	int32_t i;
} ref_cand;

static int rank_cmp(const void *pa, const void *pb)
{
	const ref_cand *a = pa, *b = pb;
	if (a->v != b->v)
		return a->v > b->v ? -1 : 1;
	return a->i < b->i ? -1 : (a->i > b->i);
}

static void check_topk(const float *logits, uint32_t vocab, uint32_t k,
		       const char *what)
{
	ref_cand *r = calloc(vocab, sizeof *r);
	assert_non_null(r);
	for (uint32_t i = 0; i < vocab; i++)
		r[i] = (ref_cand){isnan(logits[i]) ? -INFINITY : logits[i],
				  (int32_t)i};
	qsort(r, vocab, sizeof *r, rank_cmp);
	float *dl = upload(logits, (uint64_t)vocab * 4);
	float values[STRATA_CUDA_TOPK_MAX];
	int32_t ids[STRATA_CUDA_TOPK_MAX];
	OK(strata_cuda_topk(F.gpu, dl, vocab, k, values, ids, ERR));
	for (uint32_t j = 0; j < k; j++) {
		if (j >= vocab) {
			assert_int_equal(ids[j], -1);
			continue;
		}
		if (ids[j] != r[j].i || memcmp(&values[j], &r[j].v, 4) != 0)
			fail_msg("%s: rank %u: want id %d (%g), got id %d (%g)",
				 what, j, r[j].i, (double)r[j].v, ids[j],
				 (double)values[j]);
	}
	printf("  %-52s exact\n", what);
	dev_free_all();
	free(r);
}

static void test_topk_matches_sorted_reference(void **state)
{
	(void)state;
	float *l = host_floats(151936);
	cuda_test_fill(l, 32000, 100, 10.0f);
	check_topk(l, 32000, 1, "argmax vocab=32000");
	check_topk(l, 32000, 40, "top-40 vocab=32000");
	check_topk(l, 32000, 256, "top-256 vocab=32000");
	/* many ties: the lower id must come first */
	for (uint32_t i = 0; i < 151936; i++)
		l[i] = (float)((i * 7919u) % 1000u) - 500.0f;
	check_topk(l, 151936, 50, "top-50 with ties vocab=151936");
	check_topk(l, 151936, 1, "argmax with ties vocab=151936");
	/* NaN and -inf rank last, among themselves by id */
	cuda_test_fill(l, 300, 101, 1.0f);
	for (uint32_t i = 0; i < 300; i += 3)
		l[i] = NAN;
	for (uint32_t i = 1; i < 300; i += 7)
		l[i] = -INFINITY;
	check_topk(l, 300, 256, "top-256 with NaN and -inf vocab=300");
	/* fewer logits than k */
	cuda_test_fill(l, 10, 102, 1.0f);
	check_topk(l, 10, 20, "top-20 of vocab=10 pads with -1");
	free(l);
}

static void test_topk_refuses_k_out_of_range(void **state)
{
	(void)state;
	float *dl = dev_alloc(64);
	float v[1];
	int32_t id[1];
	strata_error err;
	assert_int_equal(strata_cuda_topk(F.gpu, dl, 16, 0, v, id, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_cuda_topk(F.gpu, dl, 16, STRATA_CUDA_TOPK_MAX + 1,
					  v, id, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "257"));
	assert_true(err.fix[0] != '\0');
	/* a CPU compute context is not a CUDA one */
	assert_int_equal(strata_cuda_topk(F.cpu, dl, 16, 1, v, id, &err),
			 STRATA_E_INVALID_ARG);
	dev_free_all();
}

/* ------------------------------------------------------------------------ */

static int setup(void **state)
{
	(void)state;
	strata_error err;
	if (strata_backend_cuda_create(NULL, &F.b, &err) != STRATA_OK ||
	    strata_arena_create(F.b, STRATA_ARENA_DEVICE, (uint64_t)768 << 20,
				"kernel test", &F.arena, &err) != STRATA_OK ||
	    strata_compute_create(&strata_cpu_kernel_ops, 2, &F.cpu, &err) !=
		    STRATA_OK ||
	    strata_compute_create_on(F.b, 0, &F.gpu, &err) != STRATA_OK) {
		fprintf(stderr, "setup: %s\n  fix: %s\n", err.message, err.fix);
		return -1;
	}
	F.gs = strata_cuda_compute_stream(F.gpu);
	F.gemv_default = strata__cuda_gemv_rows_max;
	return F.gs ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	strata_compute_destroy(F.gpu);
	strata_compute_destroy(F.cpu);
	strata_arena_destroy(F.arena);
	strata_backend_destroy(F.b);
	return 0;
}

int main(void)
{
	if (gpu_skip_without_device("test_cuda_kernels"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matmul_f32_matches_cpu),
		cmocka_unit_test(test_matmul_refuses_dimensions_cublas_cannot_take),
		cmocka_unit_test(test_matmul_half_gemv_matches_cpu),
		cmocka_unit_test(test_matmul_half_gemm_matches_cpu),
		cmocka_unit_test(test_matmul_half_parts_matches_cpu),
		cmocka_unit_test(test_gemv_tunings_match_cpu),
		cmocka_unit_test(test_rmsnorm_matches_cpu_in_and_out_of_place),
		cmocka_unit_test(test_rope_matches_cpu_both_layouts_llama3),
		cmocka_unit_test(test_swiglu_add_embed_match_cpu),
		cmocka_unit_test(test_attention_decode_matches_cpu),
		cmocka_unit_test(test_attention_prefill_causal_matches_cpu),
		cmocka_unit_test(test_attention_sliding_window_matches_cpu),
		cmocka_unit_test(test_decode_products_reach_memory_bandwidth),
		cmocka_unit_test(test_decode_attention_figure),
		cmocka_unit_test(test_decode_layer_figure),
		cmocka_unit_test(test_topk_matches_sorted_reference),
		cmocka_unit_test(test_topk_refuses_k_out_of_range),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
