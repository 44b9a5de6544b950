/* test_cuda_kernels_kv.c - the CUDA KV cache in f16 and bf16 (--kv-type):
 * the store's rounding equal bit for bit to the CPU's on finite values
 * (overflow to infinity included), and attention over a 2-byte cache
 * (the warp-per-key decode kernel at head sizes 64/128/256, the
 * key-splitting kernel with 8-byte and element loads, the tensor-core
 * prefill kernel with cp.async of 2-byte tiles and with plain loads, in
 * both precisions) against the CPU's attention over the same cache (layer:
 * backend tests).
 *
 * Tolerances: F32_TOL (1e-4) where the GPU computes in f32 or in split
 * bf16 terms (a 2-byte element is hi + lo exactly, so the cached values
 * reach the products unchanged and only the summation order differs);
 * 5e-2 for the prefill kernel at precision bf16 (terms 1: an f16 element
 * and q and the weights rounded to 8 bits once), as for an f32 cache.
 * Skipped (77) where no CUDA device is present. */
#include "backend/kernels_fixture.h"

#define BF16_ATTENTION_TOL 5e-2

static const strata_weight_type kv_types[] = {STRATA_WEIGHT_F16,
					      STRATA_WEIGHT_BF16};

static void test_kv_store_matches_cpu(void **state)
{
	(void)state;
	const size_t n = 100003;
	float *x = host_floats(n);
	cuda_test_fill(x, n, 5, 3.0f);
	/* the edges: ties, subnormals, the f16 overflow threshold */
	const float edges[] = {0.0f,	   -0.0f,	1.00048828125f,
			       1.00146484375f, 6.1e-5f,	5.96e-8f,
			       2.98e-8f,       65504.0f,	65519.0f,
			       65520.0f,       -70000.0f, 3.0e38f,
			       1.00390625f,    1.01171875f};
	memcpy(x, edges, sizeof edges);
	for (size_t i = 100; i < 200; i++)
		x[i] *= 1e-6f; /* small values: f16 subnormals */
	uint16_t *want = calloc(n, 2), *got = calloc(n, 2);
	assert_non_null(want);
	assert_non_null(got);
	float *dx = upload(x, n * 4);
	void *dy = dev_alloc(n * 2);
	for (size_t t = 0; t < 2; t++) {
		assert_true(strata_kernel_kv_takes(F.gpu, kv_types[t]));
		OK(strata_kernel_kv_store(F.cpu, want, kv_types[t], x, n, ERR));
		OK(strata_kernel_kv_store(F.gpu, dy, kv_types[t], dx, n, ERR));
		download(got, dy, n * 2);
		for (size_t i = 0; i < n; i++)
			if (got[i] != want[i])
				fail_msg("%s: %.9g -> %04x, CPU %04x",
					 strata_weight_type_name(kv_types[t]),
					 (double)x[i], got[i], want[i]);
		printf("  kv_store %-4s %zu elements: the CPU's bits\n",
		       strata_weight_type_name(kv_types[t]), n);
	}
	/* F32: a copy */
	float *dz = dev_alloc(n * 4), *back = host_floats(n);
	OK(strata_kernel_kv_store(F.gpu, dz, STRATA_WEIGHT_F32, dx, n, ERR));
	download(back, dz, n * 4);
	assert_memory_equal(back, x, n * 4);
	dev_free_all();
	free(x), free(want), free(got), free(back);
}

/* One shape over a cache of `type`, uploaded at `skew` elements past an
 * aligned address (1: the 2-byte rows lose 8- and 16-byte alignment, so
 * the kernels take their element loads). */
static void check_typed(strata_weight_type type, uint32_t n, uint32_t pos0,
			uint32_t heads, uint32_t kv_heads, uint32_t hd,
			uint32_t window, uint32_t skew, uint64_t seed)
{
	const uint32_t positions = pos0 + n;
	size_t nq = (size_t)n * heads * hd, nkv = (size_t)positions * kv_heads * hd;
	float *q = host_floats(nq), *k = host_floats(nkv), *v = host_floats(nkv);
	float *want = host_floats(nq), *got = host_floats(nq);
	uint16_t *kt = calloc(nkv + skew, 2), *vt = calloc(nkv + skew, 2);
	assert_true(kt && vt);
	cuda_test_fill(q, nq, seed, 1.0f);
	cuda_test_fill(k, nkv, seed + 1, 1.0f);
	cuda_test_fill(v, nkv, seed + 2, 1.0f);
	OK(strata_kernel_kv_store(F.cpu, kt + skew, type, k, nkv, ERR));
	OK(strata_kernel_kv_store(F.cpu, vt + skew, type, v, nkv, ERR));
	strata_attention_shape s = {.n = n, .pos0 = pos0, .heads = heads,
				    .kv_heads = kv_heads, .head_dim = hd,
				    .window = window,
				    .scale = 1.0f / sqrtf((float)hd),
				    .kv_type = type};
	OK(strata_kernel_attention(F.cpu, want, q, kt + skew, vt + skew, &s,
				   ERR));
	float *dq = upload(q, nq * 4), *dout = dev_alloc(nq * 4);
	uint16_t *dk = upload(kt, (nkv + skew) * 2);
	uint16_t *dv = upload(vt, (nkv + skew) * 2);
	const uint32_t dflt = strata__cuda_attention_blocks_per_sm;
	const uint32_t flash_dflt = strata__cuda_flash_min_blocks;
	const uint32_t per[] = {dflt, 1, 16, 0, 0};
	strata__cuda_compute *ctx = strata__cuda_compute_of(F.gpu);
	for (size_t r = 0; r < sizeof per / sizeof *per; r++) {
		const bool flash = per[r] == 0;
		const int terms = r == 4 ? 1 : 3;
		if (flash && !strata__cuda_flash_takes(n, heads, kv_heads, hd, 1))
			break;
		strata__cuda_attention_blocks_per_sm = flash ? dflt : per[r];
		strata__cuda_flash_min_blocks = flash ? 1 : UINT32_MAX;
		ctx->prefill_terms = terms;
		OK(strata_kernel_attention(F.gpu, dout, dq, dk + skew, dv + skew,
					   &s, ERR));
		download(got, dout, nq * 4);
		char what[112];
		snprintf(what, sizeof what,
			 "%s KV n=%u pos0=%u h=%u/%u hd=%u win=%u skew=%u %s%u",
			 strata_weight_type_name(type), n, pos0, heads,
			 kv_heads, hd, window, skew,
			 flash ? "flash terms=" : "split/SM=",
			 flash ? (unsigned)terms : per[r]);
		expect_close(what, want, got, nq,
			     terms == 1 ? BF16_ATTENTION_TOL : F32_TOL);
	}
	strata__cuda_attention_blocks_per_sm = dflt;
	strata__cuda_flash_min_blocks = flash_dflt;
	ctx->prefill_terms = 3;
	dev_free_all();
	free(q), free(k), free(v), free(want), free(got), free(kt), free(vt);
}

static void test_attention_decode_typed(void **state)
{
	(void)state;
	for (size_t t = 0; t < 2; t++) {
		check_typed(kv_types[t], 1, 300, 8, 2, 64, 0, 0, 170);
		check_typed(kv_types[t], 1, 1000, 32, 8, 128, 0, 0, 171);
		check_typed(kv_types[t], 1, 700, 8, 2, 256, 0, 0, 172);
		check_typed(kv_types[t], 1, 99, 8, 8, 80, 0, 0, 173);
		check_typed(kv_types[t], 1, 70, 2, 1, 30, 0, 0, 174);
		check_typed(kv_types[t], 1, 400, 8, 2, 64, 129, 0, 175);
		check_typed(kv_types[t], 1, 500, 8, 2, 80, 0, 1, 176);
	}
}

static void test_attention_prefill_typed(void **state)
{
	(void)state;
	for (size_t t = 0; t < 2; t++) {
		check_typed(kv_types[t], 37, 0, 8, 2, 64, 0, 0, 180);
		check_typed(kv_types[t], 16, 200, 8, 4, 128, 0, 0, 181);
		check_typed(kv_types[t], 600, 0, 8, 2, 128, 0, 0, 182);
		check_typed(kv_types[t], 333, 0, 8, 8, 64, 0, 0, 183);
		check_typed(kv_types[t], 257, 300, 16, 2, 128, 0, 0, 184);
		check_typed(kv_types[t], 500, 0, 8, 2, 128, 100, 0, 185);
		check_typed(kv_types[t], 200, 300, 4, 4, 64, 70, 1, 186);
		check_typed(kv_types[t], 300, 0, 4, 1, 32, 0, 1, 187);
	}
}

/* An f32 cache at one rounding: the compute context rounds its rows to
 * bf16 once in the product workspace and runs the kernel that reads a
 * 2-byte cache, so the result must equal, bit for bit, the same call over
 * a bf16 cache stored from the same values; and stay within
 * BF16_ATTENTION_TOL of the CPU's f32 attention, as the f32-staging kernel
 * (strata__cuda_flash_direct 0) does. */
static void check_f32_rounded_once(uint32_t n, uint32_t pos0, uint32_t heads,
				   uint32_t kv_heads, uint32_t hd,
				   uint32_t window, uint64_t seed)
{
	const size_t nq = (size_t)n * heads * hd;
	const size_t nkv = (size_t)(pos0 + n) * kv_heads * hd;
	float *q = host_floats(nq), *k = host_floats(nkv), *v = host_floats(nkv);
	float *want = host_floats(nq), *got = host_floats(nq);
	float *twin = host_floats(nq);
	cuda_test_fill(q, nq, seed, 1.0f);
	cuda_test_fill(k, nkv, seed + 1, 1.0f);
	cuda_test_fill(v, nkv, seed + 2, 1.0f);
	strata_attention_shape s = {.n = n, .pos0 = pos0, .heads = heads,
				    .kv_heads = kv_heads, .head_dim = hd,
				    .window = window,
				    .scale = 1.0f / sqrtf((float)hd),
				    .kv_type = STRATA_WEIGHT_F32};
	OK(strata_kernel_attention(F.cpu, want, q, k, v, &s, ERR));
	float *dq = upload(q, nq * 4), *dout = dev_alloc(nq * 4);
	float *dk = upload(k, nkv * 4), *dv = upload(v, nkv * 4);
	void *dkb = dev_alloc(nkv * 2), *dvb = dev_alloc(nkv * 2);
	OK(strata_kernel_kv_store(F.gpu, dkb, STRATA_WEIGHT_BF16, dk, nkv, ERR));
	OK(strata_kernel_kv_store(F.gpu, dvb, STRATA_WEIGHT_BF16, dv, nkv, ERR));
	strata__cuda_compute *ctx = strata__cuda_compute_of(F.gpu);
	const uint32_t flash_dflt = strata__cuda_flash_min_blocks;
	strata__cuda_flash_min_blocks = 1;
	ctx->prefill_terms = 1;
	OK(strata_cuda_matmul_half_reserve(F.gpu, 4 * nkv + 4096, ERR));
	OK(strata_kernel_attention(F.gpu, dout, dq, dk, dv, &s, ERR));
	download(got, dout, nq * 4);
	strata_attention_shape sb = s;
	sb.kv_type = STRATA_WEIGHT_BF16;
	OK(strata_kernel_attention(F.gpu, dout, dq, dkb, dvb, &sb, ERR));
	download(twin, dout, nq * 4);
	char what[112];
	snprintf(what, sizeof what, "f32 KV rounded once n=%u pos0=%u h=%u/%u hd=%u win=%u",
		 n, pos0, heads, kv_heads, hd, window);
	expect_close(what, want, got, nq, BF16_ATTENTION_TOL);
	if (memcmp(got, twin, nq * 4))
		fail_msg("%s: differs from the same call on a bf16 cache", what);
	strata__cuda_flash_direct = 0; /* the f32-staging kernel */
	OK(strata_kernel_attention(F.gpu, dout, dq, dk, dv, &s, ERR));
	download(got, dout, nq * 4);
	strata__cuda_flash_direct = 1;
	snprintf(what, sizeof what, "f32 KV staged n=%u pos0=%u h=%u/%u hd=%u win=%u",
		 n, pos0, heads, kv_heads, hd, window);
	expect_close(what, want, got, nq, BF16_ATTENTION_TOL);
	strata__cuda_flash_min_blocks = flash_dflt;
	ctx->prefill_terms = 3;
	dev_free_all();
	free(q), free(k), free(v), free(want), free(got), free(twin);
}

static void test_attention_f32_cache_rounded_once(void **state)
{
	(void)state;
	check_f32_rounded_once(37, 0, 8, 2, 64, 0, 190);
	check_f32_rounded_once(600, 0, 8, 2, 128, 0, 191);
	check_f32_rounded_once(257, 300, 16, 2, 128, 0, 192);
	check_f32_rounded_once(500, 0, 8, 2, 128, 100, 193);
	check_f32_rounded_once(200, 300, 4, 4, 64, 70, 194);
}

int main(void)
{
	if (gpu_skip_without_device("test_backend_cuda_kernels_kv"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kv_store_matches_cpu),
		cmocka_unit_test(test_attention_decode_typed),
		cmocka_unit_test(test_attention_prefill_typed),
		cmocka_unit_test(test_attention_f32_cache_rounded_once),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
