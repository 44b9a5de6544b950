/* test_cuda_kernels_elementwise.c - RMSNorm in and out of place, RoPE in
 * both layouts with Llama 3 frequencies, SwiGLU, add and embed against the
 * CPU kernels (layer: backend tests).
 *
 * Tolerances: 1e-4 relative for f32 work (only the summation order
 * differs), 2e-2 for half-precision inputs (issue 8). Each case prints its
 * measured worst error. Skipped (77) where no CUDA device is present. */
#include "backend/kernels_fixture.h"

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
	OK(strata_kernel_rmsnorm(F.cpu, want, x, &(strata_weight){STRATA_WEIGHT_F32, w, 1, dim}, n, 1e-5f, ERR));
	float *dx = upload(x, n * dim * 4), *dw = upload(w, dim * 4);
	float *dy = dev_alloc(n * dim * 4);
	OK(strata_kernel_rmsnorm(F.gpu, dy, dx, &(strata_weight){STRATA_WEIGHT_F32, dw, 1, dim}, n, 1e-5f, ERR));
	download(got, dy, n * dim * 4);
	expect_close("rmsnorm n=5 dim=4096", want, got, n * dim, 1e-5);
	OK(strata_kernel_rmsnorm(F.gpu, dx, dx, &(strata_weight){STRATA_WEIGHT_F32, dw, 1, dim}, n, 1e-5f, ERR));
	download(got, dx, n * dim * 4);
	expect_close("rmsnorm in place", want, got, n * dim, 1e-5);
	dev_free_all();
	/* half weights read as stored: the same as the f32 kernel on their
	 * values (w in sixty-fourths is exact in both types) */
	fill_sixty_fourths(w, dim, 42);
	OK(strata_kernel_rmsnorm(F.cpu, want, x, &(strata_weight){STRATA_WEIGHT_F32, w, 1, dim}, n, 1e-5f, ERR));
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
	OK(strata_kernel_embed(F.cpu, want, &(strata_weight){STRATA_WEIGHT_F32, table, vocab, dim}, tok, n, ERR));
	OK(strata_kernel_embed(F.gpu, dx, &(strata_weight){STRATA_WEIGHT_F32, dt, vocab, dim}, tok, n, ERR));
	download(out, dx, (uint64_t)n * dim * 4);
	assert_memory_equal(want, out, (size_t)n * dim * 4);
	printf("  %-52s exact\n", "embed n=20000 dim=8");
	/* bf16 and f16 tables (bits mixed from each f32's: signs, zeros,
	 * subnormals and normals of both), gathered in one launch and
	 * converted exactly, as the CPU converts */
	uint16_t *half = calloc((size_t)vocab * dim, sizeof *half);
	assert_non_null(half);
	for (uint32_t i = 0; i < vocab * dim; i++) {
		uint32_t b;
		memcpy(&b, &table[i], 4);
		half[i] = (uint16_t)(b ^ (b >> 16));
		if ((half[i] & 0x7c00u) == 0x7c00u ||
		    (half[i] & 0x7f80u) == 0x7f80u)
			half[i] &= 0xbfffu; /* finite in both types */
	}
	void *dh = upload(half, (uint64_t)vocab * dim * 2);
	const strata_weight_type ht[2] = {STRATA_WEIGHT_BF16, STRATA_WEIGHT_F16};
	for (int t = 0; t < 2; t++) {
		OK(strata_kernel_embed(F.cpu, want, &(strata_weight){ht[t], half, vocab, dim}, tok, n, ERR));
		OK(strata_kernel_embed(F.gpu, dx, &(strata_weight){ht[t], dh, vocab, dim}, tok, n, ERR));
		download(out, dx, (uint64_t)n * dim * 4);
		assert_memory_equal(want, out, (size_t)n * dim * 4);
		printf("  %-52s exact\n", t ? "embed f16 n=20000 dim=8" : "embed bf16 n=20000 dim=8");
	}
	free(half);
	dev_free_all();
	free(table), free(want), free(out), free(tok);
}

/* scatter_add: the CPU's floats exactly (product rounded, then the sum),
 * past the rows' chunk size (8192 a launch). */
static void test_scatter_add_matches_cpu(void **state)
{
	(void)state;
	const uint32_t rows = 12000, dim = 64, m = 9000;
	float *x = host_floats((size_t)rows * dim), *y = host_floats((size_t)m * dim);
	float *w = host_floats(m), *got = host_floats((size_t)rows * dim);
	int32_t *ids = calloc(m, sizeof *ids);
	assert_non_null(ids);
	cuda_test_fill(x, (size_t)rows * dim, 70, 1.0f);
	cuda_test_fill(y, (size_t)m * dim, 71, 1.0f);
	cuda_test_fill(w, m, 72, 1.0f);
	for (uint32_t i = 0; i < m; i++)
		ids[i] = (int32_t)((i * 7919u + 11u) % rows); /* distinct: 7919 prime */
	float *dx = upload(x, (uint64_t)rows * dim * 4), *dy = upload(y, (uint64_t)m * dim * 4);
	OK(strata_kernel_scatter_add(F.cpu, x, rows, y, ids, w, m, dim, ERR));
	OK(strata_kernel_scatter_add(F.gpu, dx, rows, dy, ids, w, m, dim, ERR));
	download(got, dx, (uint64_t)rows * dim * 4);
	assert_memory_equal(x, got, (size_t)rows * dim * 4);
	printf("  %-52s exact\n", "scatter_add m=9000 of 12000 rows, dim=64");
	dev_free_all();
	free(x), free(y), free(w), free(got), free(ids);
}

int main(void)
{
	if (gpu_skip_without_device("test_backend_cuda_kernels_elementwise"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rmsnorm_matches_cpu_in_and_out_of_place),
		cmocka_unit_test(test_rope_matches_cpu_both_layouts_llama3),
		cmocka_unit_test(test_swiglu_add_embed_match_cpu),
		cmocka_unit_test(test_scatter_add_matches_cpu),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
