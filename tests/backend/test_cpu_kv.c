/* test_cpu_kv.c - the CPU KV cache in f16 and bf16 (kernels_kv.c): the
 * store's rounding on every path the processor has (scalar, AVX2/F16C,
 * AVX-512) equal bit for bit to each other and to base's encoder
 * (strata_block_encode) on finite values, NaN kept NaN and overflow
 * infinite; the read paths equal to base's decoder on every 16-bit
 * pattern; attention over an f16/bf16 cache equal bit for bit to
 * attention over an f32 cache holding the same rounded values (decode,
 * prefill, GQA, windows, soft-capping, several tiles); the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"

void strata__cpu_kv_convert_at(int level, strata_weight_type type, bool store,
			       void *dst, const void *src, uint64_t count);

static const strata_weight_type types[] = {STRATA_WEIGHT_F16,
					   STRATA_WEIGHT_BF16};

static uint32_t rng = 2718281u;
static uint32_t next(void)
{
	rng = rng * 1664525u + 1013904223u;
	return rng;
}

static float frand(void)
{
	return (float)(next() >> 8) / (float)(1 << 24) * 2.0f - 1.0f;
}

static float from_bits(uint32_t b)
{
	float f;
	memcpy(&f, &b, sizeof f);
	return f;
}

static strata_compute *cpu(uint32_t threads)
{
	strata_compute *c;
	strata_error err;
	assert_int_equal(strata_compute_create(&strata_cpu_kernel_ops, threads,
					       &c, &err),
			 STRATA_OK);
	return c;
}

static strata_block_type block_of(strata_weight_type t)
{
	return t == STRATA_WEIGHT_F16 ? STRATA_BLOCK_F16 : STRATA_BLOCK_BF16;
}

/* Values that test the rounding: ties, both sides of every f16 limit
 * (subnormal, smallest normal, largest finite, the overflow threshold),
 * signed zeros, infinities, NaNs, and random values over all exponents. */
static size_t edge_values(float *x, size_t cap)
{
	static const uint32_t bits[] = {
		0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u,
		0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x3f801001u, /* f16 ties */
		0x3f808000u, 0x3f818000u, 0x3f807fffu, /* bf16 ties */
		0x33000000u, 0x33000001u, 0x32ffffffu, 0x33400000u, /* 2^-25 */
		0x33800000u, 0x34000000u, 0x387fc000u, 0x387fe000u, /* subnormal */
		0x38800000u, 0x387fffffu, 0x477fe000u, 0x477fefffu, /* limits */
		0x477ff000u, 0x47800000u, 0x7f7fffffu, 0xff7fffffu,
		0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
		0x7f800001u, 0x7fa12345u, 0x00000001u, 0x807fffffu,
	};
	size_t n = 0;
	for (size_t i = 0; i < sizeof bits / sizeof *bits && n < cap; i++)
		x[n++] = from_bits(bits[i]);
	for (; n < cap; n++) /* any bits, half of them small values */
		x[n] = n % 2 ? from_bits(next()) : frand() * 1e-3f;
	return n;
}

/* ------------------------------------------------------------------------ */

static void test_store_paths_agree_with_base(void **state)
{
	(void)state;
	enum { N = 4099 }; /* no multiple of 8 or 16: the tails too */
	float *x = malloc(N * sizeof *x);
	uint16_t *want = malloc(N * 2), *got = malloc(N * 2);
	assert_non_null(x);
	assert_non_null(want);
	assert_non_null(got);
	edge_values(x, N);
	for (size_t t = 0; t < 2; t++) {
		strata__cpu_kv_convert_at(0, types[t], true, want, x, N);
		for (int level = 1; level <= 2; level++) {
			memset(got, 0xa5, N * 2);
			strata__cpu_kv_convert_at(level, types[t], true, got, x,
						  N);
			for (size_t i = 0; i < N; i++)
				if (got[i] != want[i])
					fail_msg("%s level %d: %08x -> %04x, "
						 "scalar %04x",
						 strata_weight_type_name(types[t]),
						 level,
						 (unsigned)((uint32_t *)x)[i],
						 got[i], want[i]);
		}
		for (size_t i = 0; i < N; i++) {
			uint16_t h = 0;
			if (isnan(x[i])) { /* quiet NaN of the same sign */
				float back;
				strata_block_decode(block_of(types[t]),
						    &want[i], &back, 1);
				assert_true(isnan(back));
				assert_int_equal(signbit(back) != 0,
						 signbit(x[i]) != 0);
				continue;
			}
			if (isinf(x[i]) ||
			    (types[t] == STRATA_WEIGHT_F16 &&
			     fabsf(x[i]) >= 65520.0f)) {
				float back;
				strata_block_decode(block_of(types[t]),
						    &want[i], &back, 1);
				assert_true(isinf(back));
				continue;
			}
			assert_int_equal(strata_block_encode(block_of(types[t]),
							     &x[i], &h, 1),
					 STRATA_BLOCK_ALL_FINITE);
			if (h != want[i])
				fail_msg("%s: %08x -> %04x, base %04x",
					 strata_weight_type_name(types[t]),
					 (unsigned)((uint32_t *)x)[i], want[i],
					 h);
		}
	}
	free(x);
	free(want);
	free(got);
}

static void test_load_paths_agree_with_base(void **state)
{
	(void)state;
	enum { N = 65536 };
	uint16_t *h = malloc(N * 2);
	float *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
	assert_non_null(h);
	assert_non_null(want);
	assert_non_null(got);
	for (uint32_t i = 0; i < N; i++)
		h[i] = (uint16_t)i;
	for (size_t t = 0; t < 2; t++) {
		strata_block_decode(block_of(types[t]), h, want, N);
		for (int level = 0; level <= 2; level++) {
			strata__cpu_kv_convert_at(level, types[t], false, got,
						  h, N);
			for (uint32_t i = 0; i < N; i++) {
				if (isnan(want[i]) && isnan(got[i]))
					continue;
				if (memcmp(&got[i], &want[i], 4))
					fail_msg("%s level %d: %04x -> %g, "
						 "base %g",
						 strata_weight_type_name(types[t]),
						 level, i, got[i], want[i]);
			}
		}
	}
	free(h);
	free(want);
	free(got);
}

/* The kv_store slot through the wrapper, in several pool tasks: the
 * scalar path's bits; F32 is a copy. */
static void test_kv_store_kernel(void **state)
{
	(void)state;
	enum { N = 70001 };
	strata_compute *c = cpu(3);
	float *x = malloc(N * sizeof *x), *copy = malloc(N * sizeof *copy);
	uint16_t *want = malloc(N * 2), *got = malloc(N * 2);
	assert_non_null(x);
	assert_non_null(copy);
	assert_non_null(want);
	assert_non_null(got);
	for (size_t i = 0; i < N; i++)
		x[i] = frand() * 40.0f;
	strata_error err;
	for (size_t t = 0; t < 2; t++) {
		assert_true(strata_kernel_kv_takes(c, types[t]));
		strata__cpu_kv_convert_at(0, types[t], true, want, x, N);
		assert_int_equal(strata_kernel_kv_store(c, got, types[t], x, N,
							&err),
				 STRATA_OK);
		assert_memory_equal(got, want, N * 2);
	}
	assert_int_equal(strata_kernel_kv_store(c, copy, STRATA_WEIGHT_F32, x,
						N, &err),
			 STRATA_OK);
	assert_memory_equal(copy, x, N * sizeof *x);
	free(x);
	free(copy);
	free(want);
	free(got);
	strata_compute_destroy(c);
}

/* Attention over a cache of `type` against attention over an f32 cache of
 * the same (rounded) values: the same bits. */
static void check_typed(strata_weight_type type, uint32_t n, uint32_t pos0,
			uint32_t heads, uint32_t kv_heads, uint32_t d,
			uint32_t window, float softcap)
{
	strata_compute *c = cpu(3);
	uint64_t total = (uint64_t)pos0 + n, kv = total * kv_heads * d;
	uint64_t qn = (uint64_t)n * heads * d;
	float *q = malloc(qn * 4), *k = malloc(kv * 4), *v = malloc(kv * 4);
	float *kr = malloc(kv * 4), *vr = malloc(kv * 4);
	float *want = malloc(qn * 4), *got = malloc(qn * 4);
	uint16_t *kt = malloc(kv * 2), *vt = malloc(kv * 2);
	assert_true(q && k && v && kr && vr && want && got && kt && vt);
	for (uint64_t i = 0; i < qn; i++)
		q[i] = frand();
	for (uint64_t i = 0; i < kv; i++)
		k[i] = frand() * 2.0f, v[i] = frand();
	strata_error err;
	assert_int_equal(strata_kernel_kv_store(c, kt, type, k, kv, &err),
			 STRATA_OK);
	assert_int_equal(strata_kernel_kv_store(c, vt, type, v, kv, &err),
			 STRATA_OK);
	strata_block_decode(block_of(type), kt, kr, kv);
	strata_block_decode(block_of(type), vt, vr, kv);
	strata_attention_shape s = {.n = n, .pos0 = pos0, .heads = heads,
				    .kv_heads = kv_heads, .head_dim = d,
				    .window = window, .softcap = softcap,
				    .scale = 1.0f / sqrtf((float)d)};
	assert_int_equal(strata_kernel_attention(c, want, q, kr, vr, &s, &err),
			 STRATA_OK);
	s.kv_type = type;
	assert_int_equal(strata_kernel_attention(c, got, q, kt, vt, &s, &err),
			 STRATA_OK);
	if (memcmp(got, want, qn * 4))
		fail_msg("%s cache: n %u pos0 %u heads %u/%u d %u: not the "
			 "bits of the f32 cache of its values",
			 strata_weight_type_name(type), n, pos0, heads,
			 kv_heads, d);
	/* and not those of the unrounded cache (the test can fail) */
	s.kv_type = STRATA_WEIGHT_F32;
	assert_int_equal(strata_kernel_attention(c, want, q, k, v, &s, &err),
			 STRATA_OK);
	assert_true(memcmp(got, want, qn * 4) != 0);
	free(q), free(k), free(v), free(kr), free(vr);
	free(want), free(got), free(kt), free(vt);
	strata_compute_destroy(c);
}

static void test_attention_typed_is_f32_of_rounded(void **state)
{
	(void)state;
	for (size_t t = 0; t < 2; t++) {
		check_typed(types[t], 1, 40, 8, 2, 64, 0, 0);	/* decode */
		check_typed(types[t], 1, 300, 4, 4, 128, 0, 0); /* 5 tiles */
		check_typed(types[t], 33, 0, 6, 3, 32, 0, 0);	/* prefill */
		check_typed(types[t], 20, 90, 20, 1, 16, 0, 0); /* group 20 */
		check_typed(types[t], 17, 150, 8, 4, 48, 70, 0); /* window */
		check_typed(types[t], 5, 10, 4, 2, 8, 0, 30.0f); /* softcap */
	}
}

static void test_refusals(void **state)
{
	(void)state;
	strata_compute *c = cpu(1);
	strata_error err;
	float x[4] = {0}, out[64];
	uint16_t h[64] = {0};
	assert_int_equal(strata_kv_type_bytes(STRATA_WEIGHT_F32), 4);
	assert_int_equal(strata_kv_type_bytes(STRATA_WEIGHT_F16), 2);
	assert_int_equal(strata_kv_type_bytes(STRATA_WEIGHT_BF16), 2);
	assert_int_equal(strata_kv_type_bytes(STRATA_WEIGHT_Q8_0), 0);
	assert_false(strata_kernel_kv_takes(c, STRATA_WEIGHT_Q8_0));
	assert_true(strata_kernel_kv_takes(c, STRATA_WEIGHT_F32));
	assert_int_equal(strata_kernel_kv_store(c, h, STRATA_WEIGHT_Q8_0, x, 4,
						&err),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "q8_0"));
	assert_non_null(strstr(err.fix, "--kv-type"));
	strata_attention_shape s = {.n = 1, .heads = 1, .kv_heads = 1,
				    .head_dim = 4, .scale = 0.5f,
				    .kv_type = STRATA_WEIGHT_Q4_K};
	assert_int_equal(strata_kernel_attention(c, out, x, h, h, &s, &err),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "q4_k"));
	/* a head too large for the typed rows' stack copy */
	enum { D = 2048 };
	float *q = calloc(D, 4), *o = calloc(D, 4);
	uint16_t *kv = calloc(D, 2);
	s = (strata_attention_shape){.n = 1, .heads = 1, .kv_heads = 1,
				     .head_dim = D, .scale = 0.5f,
				     .kv_type = STRATA_WEIGHT_F16};
	assert_int_equal(strata_kernel_attention(c, o, q, kv, kv, &s, &err),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "head size 2048"));
	free(q), free(o), free(kv);
	strata_compute_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_paths_agree_with_base),
		cmocka_unit_test(test_load_paths_agree_with_base),
		cmocka_unit_test(test_kv_store_kernel),
		cmocka_unit_test(test_attention_typed_is_f32_of_rounded),
		cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
