/* test_quant_encode.c - the block encoders (strata_block_encode): f16 and
 * bf16 round to nearest even with ggml's specials; every type's round trip
 * decode(encode(x)) stays within its bound (a proven per-element bound for
 * the types with a defined rounding, a measured RMS bound for the searched
 * ones); zeros stay zeros; scaling the input by a power of two scales the
 * decoded output exactly; NaN or infinite input is refused, naming the
 * element, with nothing written (layer: base). */
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>

#include "base/quant_internal.h"
#include "strata/base.h"

#define N 8192 /* 32 super-blocks of 256, 256 blocks of 32 */

/* Deterministic N(0, sd) values (Box-Muller over a 64-bit LCG). */
static void gaussian(float *x, size_t n, double sd, uint64_t seed)
{
	uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		double u = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		double v = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
		x[i] = (float)(sd * sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
	}
}

static void round_trip(strata_block_type t, const float *x, float *y, size_t n)
{
	void *b = malloc((size_t)strata_block_bytes(t) * n /
			 strata_block_elements(t));
	assert_int_equal(strata_block_encode(t, x, b, n), STRATA_BLOCK_ALL_FINITE);
	assert_int_equal(strata_block_decode(t, b, y, n), STRATA_BLOCK_ALL_FINITE);
	free(b);
}

static double rel_rmse(const float *x, const float *y, size_t n)
{
	double e = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
		s += (double)x[i] * x[i];
	}
	return sqrt(e / s);
}

static uint16_t f16_bits(float f)
{
	unsigned char b[2];
	assert_int_equal(strata_block_encode(STRATA_BLOCK_F16, &f, b, 1),
			 STRATA_BLOCK_ALL_FINITE);
	return (uint16_t)(b[0] | b[1] << 8);
}

static void f16_rounds_to_nearest_even(void **state)
{
	(void)state;
	assert_int_equal(f16_bits(1.0f), 0x3c00);
	assert_int_equal(f16_bits(-0.0f), 0x8000);
	assert_int_equal(f16_bits(65504.0f), 0x7bff);
	assert_int_equal(f16_bits(65519.99f), 0x7bff);
	assert_int_equal(f16_bits(65520.0f), 0x7c00); /* tie to even: inf */
	assert_int_equal(f16_bits(0x1p-24f), 0x0001); /* smallest subnormal */
	assert_int_equal(f16_bits(0x1p-25f), 0x0000); /* tie to even: 0 */
	assert_int_equal(f16_bits(0x3p-25f), 0x0002); /* tie to even: 2 */
	assert_int_equal(f16_bits(0x1p-14f), 0x0400); /* smallest normal */
	assert_int_equal(f16_bits(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
	assert_int_equal(f16_bits(0x1.ffcp-15f), 0x0400); /* tie: even, normal */
	assert_int_equal(f16_bits(1.0f + 0x1p-11f), 0x3c00); /* tie: even */
	assert_int_equal(f16_bits(1.0f + 0x3p-11f), 0x3c02); /* tie: even */
	assert_int_equal(f16_bits(1.0f + 0x1.8p-11f), 0x3c01);
	/* the specials (not reachable through encode, which refuses them) */
	assert_int_equal(strata__f32_to_f16(INFINITY), 0x7c00);
	assert_int_equal(strata__f32_to_f16(-INFINITY), 0xfc00);
	assert_true((strata__f32_to_f16(NAN) & 0x7e00) == 0x7e00);
	/* every half survives half -> float -> half */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue; /* NaN payloads: quieted */
		assert_int_equal(strata__f32_to_f16(strata__f16_to_f32((uint16_t)h)),
				 h);
	}
}

static void bf16_rounds_to_nearest_even(void **state)
{
	(void)state;
	assert_int_equal(strata__f32_to_bf16(1.0f), 0x3f80);
	/* 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even */
	assert_int_equal(strata__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	assert_int_equal(strata__f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
	assert_int_equal(strata__f32_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);
	assert_int_equal(strata__f32_to_bf16(NAN) & 0x7fc0, 0x7fc0);
	assert_int_equal(strata__f32_to_bf16(0x1.fffffep127f), 0x7f80); /* inf */
}

/* Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: the code of each value is its rounded
 * quotient, so |x - y| <= (d / 2 when rounded, d when clipped at the top
 * code of the symmetric types) + |q| d 2^-11 (d stored as f16). */
static void defined_roundings_stay_within_their_step(void **state)
{
	(void)state;
	static const struct {
		strata_block_type t;
		float steps; /* codes over the block's range */
		float clip;  /* worst error in steps */
		bool affine;
	} kinds[] = {
		{STRATA_BLOCK_Q8_0, 127.0f, 0.5f, false},
		{STRATA_BLOCK_Q4_0, 8.0f, 1.0f, false},
		{STRATA_BLOCK_Q5_0, 16.0f, 1.0f, false},
		{STRATA_BLOCK_Q4_1, 15.0f, 0.5f, true},
		{STRATA_BLOCK_Q5_1, 31.0f, 0.5f, true},
	};
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	gaussian(x, N, 0.05, 7);
	for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
		round_trip(kinds[k].t, x, y, N);
		for (size_t b = 0; b < N / 32; b++) {
			float lo = x[32 * b], hi = lo, amax = 0;
			for (int j = 0; j < 32; j++) {
				lo = fminf(lo, x[32 * b + j]);
				hi = fmaxf(hi, x[32 * b + j]);
				amax = fmaxf(amax, fabsf(x[32 * b + j]));
			}
			float d = kinds[k].affine ? (hi - lo) / kinds[k].steps
						  : amax / kinds[k].steps;
			float top = kinds[k].affine ? kinds[k].steps
						    : 2 * kinds[k].steps;
			/* the min of the affine types is an f16 too */
			float bound = kinds[k].clip * d + top * d * 0x1p-11f +
				      (kinds[k].affine ? fabsf(lo) * 0x1p-11f : 0);
			for (int j = 0; j < 32; j++)
				if (fabsf(x[32 * b + j] - y[32 * b + j]) >
				    bound * 1.0001f)
					fail_msg("%s block %zu element %d: error %g > %g",
						 strata_block_name(kinds[k].t), b, j,
						 fabsf(x[32 * b + j] - y[32 * b + j]),
						 bound);
		}
	}
	free(x);
	free(y);
}

/* The searched types' relative RMS error on N(0, 1) values, each bound a
 * little above what the encoders reach (measured 2026-12-01): Q2_K 0.259,
 * Q3_K 0.1436, Q4_K 0.0696, Q5_K 0.0344, Q6_K 0.0168, IQ4_NL 0.0733,
 * IQ4_XS 0.0739. A uniform quantizer of b bits over +-3 sigma would give
 * about 6 / 2^b / sqrt(12) sigma: these beat that for every b. */
static void searched_types_stay_within_their_bound(void **state)
{
	(void)state;
	static const struct {
		strata_block_type t;
		double bound;
	} kinds[] = {
		{STRATA_BLOCK_Q2_K, 0.265},   {STRATA_BLOCK_Q3_K, 0.147},
		{STRATA_BLOCK_Q4_K, 0.0715},  {STRATA_BLOCK_Q5_K, 0.0355},
		{STRATA_BLOCK_Q6_K, 0.0173},  {STRATA_BLOCK_IQ4_NL, 0.0755},
		{STRATA_BLOCK_IQ4_XS, 0.076}, {STRATA_BLOCK_F16, 0.0003},
		{STRATA_BLOCK_BF16, 0.0025},
	};
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	gaussian(x, N, 1.0, 11);
	for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
		round_trip(kinds[k].t, x, y, N);
		double e = rel_rmse(x, y, N);
		if (e > kinds[k].bound)
			fail_msg("%s: relative RMS error %g above %g",
				 strata_block_name(kinds[k].t), e, kinds[k].bound);
	}
	free(x);
	free(y);
}

static void zeros_stay_zeros_and_power_of_two_scaling_is_exact(void **state)
{
	(void)state;
	float *x = calloc(N, sizeof *x), *y = malloc(N * sizeof *y);
	float *x2 = malloc(N * sizeof *x2), *y2 = malloc(N * sizeof *y2);
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		/* single f16 values below 2^-14 are subnormal, where scaling
		 * is not exact; at N(0, 1) every block type's f16 scales stay
		 * normal (Q6_K's d is the largest sub-block scale / 128) */
		bool subnormal_values = t == STRATA_BLOCK_F16;
		memset(x, 0, N * sizeof *x);
		round_trip((strata_block_type)t, x, y, N);
		for (size_t i = 0; i < N; i++)
			assert_true(y[i] == 0.0f);
		gaussian(x, N, 1.0, 3);
		for (size_t i = 0; i < N; i++)
			x2[i] = x[i] * 8.0f;
		round_trip((strata_block_type)t, x, y, N);
		round_trip((strata_block_type)t, x2, y2, N);
		for (size_t i = 0; i < N && !subnormal_values; i++)
			if (y2[i] != y[i] * 8.0f)
				fail_msg("%s element %zu: %g * 8 != %g",
					 strata_block_name((strata_block_type)t),
					 i, y[i], y2[i]);
	}
	free(x);
	free(y);
	free(x2);
	free(y2);
}

static void non_finite_input_is_refused_naming_the_element(void **state)
{
	(void)state;
	float x[256];
	unsigned char b[512];
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		uint32_t n = strata_block_elements((strata_block_type)t) == 1
				     ? 256 : strata_block_elements((strata_block_type)t);
		for (uint32_t i = 0; i < n; i++)
			x[i] = 0.5f;
		x[n - 1] = (t & 1) ? NAN : -INFINITY;
		memset(b, 0xa5, sizeof b);
		assert_int_equal(strata_block_encode((strata_block_type)t, x, b, n),
				 n - 1);
		for (size_t i = 0; i < sizeof b; i++)
			assert_int_equal(b[i], 0xa5); /* nothing written */
	}
	assert_int_equal(strata_block_encode(STRATA_BLOCK_COUNT, x, b, 32), 0);
	assert_int_equal(b[0], 0xa5);
}

/* Values whose f16 scale overflows decode as infinity: the decoder names
 * the block (quantize reports the tensor). */
static void overflowing_scales_decode_as_infinite(void **state)
{
	(void)state;
	float x[32], y[32];
	unsigned char b[34];
	for (int i = 0; i < 32; i++)
		x[i] = 1e9f;
	assert_int_equal(strata_block_encode(STRATA_BLOCK_Q8_0, x, b, 32),
			 STRATA_BLOCK_ALL_FINITE);
	assert_int_equal(strata_block_decode(STRATA_BLOCK_Q8_0, b, y, 32), 0);
}

/* The committed fuzz_quant corpus (crash inputs included) under the
 * fuzzer's checks: an encode names the first non-finite value or writes
 * codes that decode; a decode reporting every block finite wrote finite
 * values. */
static void fuzz_corpus_replays(void **state)
{
	(void)state;
	const char *folder = STRATA_SOURCE_DIR "/tests/fuzz/corpus/fuzz_quant";
	DIR *d = opendir(folder);
	assert_non_null(d);
	struct dirent *e;
	size_t files = 0;
	static unsigned char data[1 << 16], blocks[1 << 16];
	static float x[1 << 14], y[1 << 14];
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md"))
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		size_t n = fread(data, 1, sizeof data, f);
		fclose(f);
		if (n < 2)
			continue;
		strata_block_type t = (strata_block_type)(data[0] % STRATA_BLOCK_COUNT);
		uint32_t be = strata_block_elements(t), bb = strata_block_bytes(t);
		if (data[1] & 1) {
			uint64_t count = (n - 2) / 4 / be * be;
			memcpy(x, data + 2, count * 4);
			uint64_t first = STRATA_BLOCK_ALL_FINITE;
			for (uint64_t i = 0; i < count && first == STRATA_BLOCK_ALL_FINITE; i++)
				if (!isfinite(x[i]))
					first = i;
			assert_int_equal(strata_block_encode(t, x, blocks, count), first);
			if (first == STRATA_BLOCK_ALL_FINITE &&
			    strata_block_decode(t, blocks, y, count) == STRATA_BLOCK_ALL_FINITE)
				for (uint64_t i = 0; i < count; i++)
					assert_true(isfinite(y[i]));
		} else {
			uint64_t count = (n - 2) / bb * be;
			if (strata_block_decode(t, data + 2, y, count) == STRATA_BLOCK_ALL_FINITE)
				for (uint64_t i = 0; i < count; i++)
					assert_true(isfinite(y[i]));
		}
		files++;
	}
	closedir(d);
	assert_true(files >= 31);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(f16_rounds_to_nearest_even),
		cmocka_unit_test(bf16_rounds_to_nearest_even),
		cmocka_unit_test(defined_roundings_stay_within_their_step),
		cmocka_unit_test(searched_types_stay_within_their_bound),
		cmocka_unit_test(zeros_stay_zeros_and_power_of_two_scaling_is_exact),
		cmocka_unit_test(non_finite_input_is_refused_naming_the_element),
		cmocka_unit_test(overflowing_scales_decode_as_infinite),
		cmocka_unit_test(fuzz_corpus_replays),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
