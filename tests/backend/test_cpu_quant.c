/* test_cpu_quant.c - the CPU product on weights in their stored type
 * (strata_kernel_matmul on a strata_weight of each type) on random blocks:
 * equal, bit for bit, to the f32 product on the exact decoding
 * (strata_block_decode), for one and several rows (the decode path up to 8
 * rows, the prefill panels beyond), with a bias, rows wider than one
 * decoded chunk and widths that are not a multiple of 8, on every path the
 * processor has (AVX-512, AVX2, generic); the AVX2 and AVX-512 decoders
 * give the exact decoders' bits; refusals. The decode products run at
 * STRATA_PRECISION_EXACT (f32 x); test_cpu_qdot covers the default. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"
#include "support/random_blocks.h"

#if defined(__x86_64__)
void strata__quant_decode_avx2(strata_block_type t, const unsigned char *src,
			       float *dst, uint32_t elements);
void strata__quant_decode_avx512(strata_block_type t, const unsigned char *src,
				 float *dst, uint32_t elements);
bool strata__quant_avx2_usable(void);
bool strata__quant_avx512_usable(void);
#endif
void strata__cpu_isa_limit(int level);

static uint32_t rng = 12345;
static float frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)(rng >> 8) / (float)(1 << 24) * 2.0f - 1.0f;
}

static strata_compute *cpu(uint32_t threads)
{
	strata_compute *c;
	strata_error e;
	assert_int_equal(strata_compute_create_with(
				 &strata_cpu_kernel_ops,
				 &(strata_compute_options){
					 .threads = threads,
					 .precision = STRATA_PRECISION_EXACT},
				 &c, &e),
			 STRATA_OK);
	return c;
}

static void random_blocks(strata_block_type t, unsigned char *p, size_t bytes)
{
	rb_fill(t, p, bytes, &rng);
}

/* The kernel table's weight type of block format t. */
static strata_weight_type weight_type_of(strata_block_type t)
{
	for (int w = 0; w < STRATA_WEIGHT_TYPE_COUNT; w++)
		if (strata_weight_type_block((strata_weight_type)w) == t)
			return (strata_weight_type)w;
	fail_msg("block type %d has no weight type", (int)t);
	return STRATA_WEIGHT_F32;
}

/* Stored product against the f32 product of the decoding, n rows of x. */
static void compare(strata_compute *c, strata_block_type t, uint32_t in,
		    uint32_t out, uint32_t n, bool bias)
{
	size_t wbytes = (size_t)in / strata_block_elements(t) *
			strata_block_bytes(t) * out;
	unsigned char *w = malloc(wbytes);
	float *wf = malloc((size_t)in * out * sizeof *wf);
	float *x = malloc((size_t)n * in * sizeof *x);
	float *b = malloc(out * sizeof *b);
	float *y0 = malloc((size_t)n * out * sizeof *y0);
	float *y1 = malloc((size_t)n * out * sizeof *y1);
	random_blocks(t, w, wbytes);
	assert_true(strata_block_decode(t, w, wf, (uint64_t)in * out) ==
		    STRATA_BLOCK_ALL_FINITE);
	for (size_t i = 0; i < (size_t)n * in; i++)
		x[i] = frand();
	for (uint32_t i = 0; i < out; i++)
		b[i] = frand();
	strata_error e;
	strata_weight w32 = {STRATA_WEIGHT_F32, wf, out, in};
	strata_weight ws = {weight_type_of(t), w, out, in};
	assert_int_equal(strata_kernel_matmul(c, y0, x, &w32, bias ? b : NULL,
					      n, &e),
			 STRATA_OK);
	if (strata_kernel_matmul(c, y1, x, &ws, bias ? b : NULL, n, &e))
		fail_msg("%s: %s", strata_block_name(t), e.message);
	for (size_t i = 0; i < (size_t)n * out; i++)
		if (memcmp(&y0[i], &y1[i], sizeof *y0))
			fail_msg("%s in %u n %u output %zu: stored %.9g, f32 %.9g",
				 strata_block_name(t), in, n, i,
				 (double)y1[i], (double)y0[i]);
	free(w);
	free(wf);
	free(x);
	free(b);
	free(y0);
	free(y1);
}

static void every_type_equals_the_f32_product_of_its_decoding(void **state)
{
	(void)state;
	strata_compute *c = cpu(3);
	for (int isa = 2; isa >= 0; isa--) {
		strata__cpu_isa_limit(isa);
		for (int t = STRATA_BLOCK_F16; t < STRATA_BLOCK_COUNT; t++) {
			compare(c, (strata_block_type)t, 512, 37, 1, false);
			compare(c, (strata_block_type)t, 512, 37, 4, true);
			compare(c, (strata_block_type)t, 768, 41, 8, true);
		}
	}
	strata__cpu_isa_limit(2);
	strata_compute_destroy(c);
}

/* More rows than the decode path takes: panels of decoded rows times the
 * f32 micro-tile, every remainder (rows of x past a multiple of 3, weight
 * rows past a multiple of 4, a last panel shorter than the others). */
static void prefill_panels_equal_the_f32_product(void **state)
{
	(void)state;
	strata_compute *c = cpu(3);
	const uint32_t ns[] = {9, 10, 11, 33};
	for (int isa = 2; isa >= 0; isa--) {
		strata__cpu_isa_limit(isa);
		for (int t = STRATA_BLOCK_F16; t < STRATA_BLOCK_COUNT; t++)
			for (size_t i = 0; i < 4; i++)
				compare(c, (strata_block_type)t, 256, 43,
					ns[i], i % 2);
		/* a panel of 4 rows (wide rows), several panels a task */
		compare(c, STRATA_BLOCK_Q4_K, 16384 + 256, 9, 10, true);
		compare(c, STRATA_BLOCK_BF16, 4096 + 3, 70, 12, false);
	}
	strata__cpu_isa_limit(2);
	strata_compute_destroy(c);
}

static void rows_wider_than_a_chunk_and_odd_widths(void **state)
{
	(void)state;
	strata_compute *c = cpu(2);
	const uint32_t widths[] = {16384 + 13, 40000, 7};
	for (size_t i = 0; i < 3; i++) {
		compare(c, STRATA_BLOCK_F16, widths[i], 3, 2, true);
		compare(c, STRATA_BLOCK_BF16, widths[i], 3, 1, false);
	}
	compare(c, STRATA_BLOCK_Q8_0, 40000, 2, 3, false);
	compare(c, STRATA_BLOCK_Q4_K, 16384 + 256, 2, 2, true);
	strata_compute_destroy(c);
}

#if defined(__x86_64__)
/* decode's bits against base's, every type, many random blocks (NaN and
 * infinite factors included: 1 in 16 blocks gets an all-ones exponent) */
static void decoders_give_the_exact_bits(
	void (*decode)(strata_block_type, const unsigned char *, float *,
		       uint32_t),
	const char *name)
{
	enum { N = 4096 };
	static unsigned char raw[N * 4];
	static float a[N + 3], b[N + 3];
	for (int round = 0; round < 8; round++)
		for (int t = STRATA_BLOCK_F16; t < STRATA_BLOCK_COUNT; t++) {
			strata_block_type bt = (strata_block_type)t;
			uint32_t n = strata_block_elements(bt) == 1 ? N + 3 : N;
			random_blocks(bt, raw, sizeof raw);
			if (round % 2)
				for (size_t i = 1; i < sizeof raw; i += 97)
					raw[i] |= 0x7c;
			(void)strata_block_decode(bt, raw, a, n);
			decode(bt, raw, b, n);
			for (uint32_t i = 0; i < n; i++)
				if (memcmp(&a[i], &b[i], sizeof *a) &&
				    !(a[i] != a[i] && b[i] != b[i]))
					fail_msg("%s: the %s decoding of "
						 "element %u differs: %.9g, "
						 "base %.9g",
						 strata_block_name(bt), name, i,
						 (double)b[i], (double)a[i]);
		}
}
#endif

static void avx2_decoders_give_the_exact_bits(void **state)
{
	(void)state;
#if defined(__x86_64__)
	if (!strata__quant_avx2_usable())
		skip();
	decoders_give_the_exact_bits(strata__quant_decode_avx2, "AVX2");
#else
	skip();
#endif
}

static void avx512_decoders_give_the_exact_bits(void **state)
{
	(void)state;
#if defined(__x86_64__)
	if (!strata__quant_avx512_usable())
		skip();
	decoders_give_the_exact_bits(strata__quant_decode_avx512, "AVX-512");
#else
	skip();
#endif
}

/* The prefill path's scratch is the one allocation a product makes, once
 * per larger shape: when it fails the product says so (E_NOMEM, naming
 * the scratch) and writes nothing; the next product succeeds, and a second
 * one of the shape allocates nothing. */
static void prefill_scratch_failure_is_reported(void **state)
{
	(void)state;
	strata_compute *c = cpu(2);
	enum { IN = 512, OUT = 64, N = 16 };
	static unsigned char w[IN / 32 * 34 * OUT];
	static float x[N * IN], y[N * OUT];
	random_blocks(STRATA_BLOCK_Q8_0, w, sizeof w);
	for (size_t i = 0; i < N * IN; i++)
		x[i] = frand();
	for (size_t i = 0; i < N * OUT; i++)
		y[i] = 7.0f;
	strata_weight ws = {STRATA_WEIGHT_Q8_0, w, OUT, IN};
	strata_error e;
	strata_alloc_fail_after(0);
	strata_status st = strata_kernel_matmul(c, y, x, &ws, NULL, N, &e);
	strata_alloc_fail_after(-1);
	assert_int_equal(st, STRATA_E_NOMEM);
	assert_non_null(strstr(e.message, "scratch"));
	for (size_t i = 0; i < N * OUT; i++)
		assert_true(y[i] == 7.0f);
	assert_int_equal(strata_kernel_matmul(c, y, x, &ws, NULL, N, &e),
			 STRATA_OK);
	strata_alloc_fail_after(0);
	st = strata_kernel_matmul(c, y, x, &ws, NULL, N, &e);
	strata_alloc_fail_after(-1);
	assert_int_equal(st, STRATA_OK);
	strata_compute_destroy(c);
}

static void bad_widths_and_types_are_refused(void **state)
{
	(void)state;
	strata_compute *c = cpu(1);
	unsigned char w[144 * 2] = {0};
	float x[256] = {0}, y[2];
	strata_error e;
	strata_weight odd = {STRATA_WEIGHT_Q4_K, w, 1, 128};
	assert_int_equal(strata_kernel_matmul(c, y, x, &odd, NULL, 1, &e),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(e.message, "Q4_K"));
	strata_weight bad = {STRATA_WEIGHT_TYPE_COUNT, w, 1, 256};
	assert_int_equal(strata_kernel_matmul(c, y, x, &bad, NULL, 1, &e),
			 STRATA_E_UNSUPPORTED);
	/* norms are f32 or half on the CPU: a block type is refused */
	strata_weight norm = {STRATA_WEIGHT_Q8_0, w, 1, 32};
	assert_int_equal(strata_kernel_rmsnorm(c, y, x, &norm, 1, 1e-5f, &e),
			 STRATA_E_UNSUPPORTED);
	strata_compute_destroy(c);
}

static void stored_embedding_rows_are_decoded_exactly(void **state)
{
	(void)state;
	strata_compute *c = cpu(1);
	enum { ROWS = 5, COLS = 512 };
	static unsigned char w[ROWS * COLS / 256 * 210];
	static float want[ROWS * COLS], got[3 * COLS];
	random_blocks(STRATA_BLOCK_Q6_K, w, sizeof w);
	(void)strata_block_decode(STRATA_BLOCK_Q6_K, w, want, ROWS * COLS);
	strata_weight t = {STRATA_WEIGHT_Q6_K, w, ROWS, COLS};
	const int32_t tokens[3] = {4, 0, 2};
	strata_error e;
	assert_int_equal(strata_kernel_embed(c, got, &t, tokens, 3, &e),
			 STRATA_OK);
	for (int i = 0; i < 3; i++)
		assert_memory_equal(got + i * COLS, want + tokens[i] * COLS,
				    COLS * sizeof *got);
	strata_compute_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_type_equals_the_f32_product_of_its_decoding),
		cmocka_unit_test(rows_wider_than_a_chunk_and_odd_widths),
		cmocka_unit_test(prefill_panels_equal_the_f32_product),
		cmocka_unit_test(avx2_decoders_give_the_exact_bits),
		cmocka_unit_test(avx512_decoders_give_the_exact_bits),
		cmocka_unit_test(prefill_scratch_failure_is_reported),
		cmocka_unit_test(bad_widths_and_types_are_refused),
		cmocka_unit_test(stored_embedding_rows_are_decoded_exactly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
