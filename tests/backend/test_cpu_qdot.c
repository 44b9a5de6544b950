/* test_cpu_qdot.c - the CPU decode product on quantized activations (the
 * default for the block types, src/backend/cpu/qdot.h) on random blocks of
 * every type with the scheme: each kernel (AVX-512 VNNI, AVX2, portable)
 * equals the portable reference of the integer scheme up to the order of
 * its f32 sums, and every output is within the derived bound of the f32
 * product of the exactly decoded weights (sum over 16s of dx / 2 times the
 * sum of |w|: the scheme computes w . x^ exactly, then rounds); STRATA_PRECISION_EXACT gives that f32 product's bits
 * and a bad value is refused; the activation buffer's allocation failure
 * is E_NOMEM naming it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cpu/kernels_internal.h"
#include "backend/cpu/qdot.h"
#include "strata/backend.h"
#include "strata/backend_kernels.h"
#include "support/random_blocks.h"

static uint32_t rng = 4242;
static float frand(void)
{
	return (float)rb_next(&rng) / (float)(1 << 24) * 2.0f - 1.0f;
}

static strata_compute *cpu(uint32_t threads)
{
	strata_compute *c;
	strata_error e;
	if (strata_compute_create(&strata_cpu_kernel_ops, threads, &c, &e))
		fail_msg("%s", e.message);
	return c;
}

static strata_weight_type weight_type_of(strata_block_type t)
{
	for (int w = 0; w < STRATA_WEIGHT_TYPE_COUNT; w++)
		if (strata_weight_type_block((strata_weight_type)w) == t)
			return (strata_weight_type)w;
	fail_msg("block type %d has no weight type", (int)t);
	return STRATA_WEIGHT_F32;
}

/* The code bytes [from, to) of a block of the types with a min term: with
 * them zeroed a block decodes to its min terms alone. */
static const struct {
	strata_block_type t;
	uint32_t from, to;
} code_bytes[] = {
	{STRATA_BLOCK_Q4_1, 4, 20},   {STRATA_BLOCK_Q5_1, 4, 24},
	{STRATA_BLOCK_Q2_K, 16, 80},  {STRATA_BLOCK_Q4_K, 16, 144},
	{STRATA_BLOCK_Q5_K, 16, 176},
};

/* Each weight's min term (0 for the types without one). */
static void min_terms(strata_block_type t, const unsigned char *w,
		      size_t bytes, float *c, uint64_t elements)
{
	memset(c, 0, elements * sizeof *c);
	for (size_t k = 0; k < sizeof code_bytes / sizeof *code_bytes; k++) {
		if (code_bytes[k].t != t)
			continue;
		unsigned char *z = malloc(bytes);
		memcpy(z, w, bytes);
		uint32_t bb = strata_block_bytes(t);
		for (size_t b = 0; b < bytes / bb; b++)
			memset(z + b * bb + code_bytes[k].from, 0,
			       code_bytes[k].to - code_bytes[k].from);
		(void)strata_block_decode(t, z, c, elements);
		free(z);
	}
}

typedef struct shape {
	uint32_t in, out, n;
	bool bias;
} shape;

/* One product of every kernel against the reference and the bound. */
static void check(strata_compute *c, strata_block_type t, shape s)
{
	uint64_t wbytes = (uint64_t)s.in / strata_block_elements(t) *
			  strata_block_bytes(t) * s.out;
	uint64_t we = (uint64_t)s.in * s.out;
	unsigned char *w = malloc(wbytes);
	float *wf = malloc(we * sizeof *wf), *mins = malloc(we * sizeof *wf);
	float *x = malloc((size_t)s.n * s.in * sizeof *x);
	float *b = malloc(s.out * sizeof *b);
	float *yq = malloc((size_t)s.n * s.out * sizeof *yq);
	float *yr = malloc((size_t)s.n * s.out * sizeof *yr);
	float *yf = malloc((size_t)s.n * s.out * sizeof *yf);
	rb_fill(t, w, wbytes, &rng);
	assert_true(strata_block_decode(t, w, wf, we) == STRATA_BLOCK_ALL_FINITE);
	min_terms(t, w, wbytes, mins, we);
	for (size_t i = 0; i < (size_t)s.n * s.in; i++)
		x[i] = frand() * (i % 7 == 0 ? 4.0f : 1.0f);
	for (uint32_t i = 0; i < s.out; i++)
		b[i] = frand();
	const float *bias = s.bias ? b : NULL;
	strata_error e;
	strata_weight ws = {weight_type_of(t), w, s.out, s.in};
	strata_weight w32 = {STRATA_WEIGHT_F32, wf, s.out, s.in};
	if (strata_kernel_matmul(c, yq, x, &ws, bias, s.n, &e))
		fail_msg("%s: %s", strata_block_name(t), e.message);
	assert_int_equal(strata_kernel_matmul(c, yf, x, &w32, bias, s.n, &e),
			 STRATA_OK);
	/* the reference of the scheme, called directly */
	void *buf = strata_alloc_aligned(64, strata__qdot_x_bytes(s.n, s.in));
	strata__qjob j = {.y = yr, .bias = bias, .w = w, .type = t,
			  .row_bytes = wbytes / s.out,
			  .block_bytes = strata_block_bytes(t),
			  .chunk_bytes = QDOT_CHUNK / strata_block_elements(t) *
					 strata_block_bytes(t),
			  .n = s.n, .in = s.in, .out = s.out,
			  .rows_per_task = s.out,
			  .off = strata__qdot_offset(t)};
	strata__qdot_quantize_x(t, x, s.n, s.in, buf, &j.x);
	strata__qdot_rows_c(&j, 0, s.out);
	strata_free(buf);
	size_t moved = 0; /* outputs x's quantization moved: the path taken */
	for (uint32_t r = 0; r < s.n; r++)
		for (uint32_t o = 0; o < s.out; o++) {
			const float *xr = x + (uint64_t)r * s.in;
			const float *wr = wf + (uint64_t)o * s.in;
			const float *mr = mins + (uint64_t)o * s.in;
			double bound = 0, mag = bias ? fabs(bias[o]) : 0;
			for (uint32_t g = 0; g < s.in; g += 16) {
				double amax = 0, aw = 0;
				for (uint32_t i = g; i < g + 16; i++) {
					amax = fmax(amax, fabs(xr[i]));
					aw += fabs(wr[i]);
					mag += (fabs(wr[i]) + 2 * fabs(mr[i])) *
					       fabs(xr[i]);
				}
				bound += amax / 127 / 2 * aw;
			}
			size_t i = (size_t)r * s.out + o;
			moved += yq[i] != yf[i];
			double slack = 1e-5 * mag + 1e-30;
			if (!(fabs(yq[i] - yr[i]) <= slack))
				fail_msg("%s in %u n %u output %zu: kernel %.9g, "
					 "reference %.9g (slack %.3g)",
					 strata_block_name(t), s.in, s.n, i,
					 (double)yq[i], (double)yr[i], slack);
			if (!(fabs(yq[i] - yf[i]) <= bound + slack))
				fail_msg("%s in %u n %u output %zu: %.9g, f32 "
					 "product %.9g: %.3g apart, bound %.3g",
					 strata_block_name(t), s.in, s.n, i,
					 (double)yq[i], (double)yf[i],
					 fabs(yq[i] - yf[i]), bound + slack);
		}
	if (!moved)
		fail_msg("%s: every output is the f32 product's", strata_block_name(t));
	free(w), free(wf), free(mins), free(x), free(b);
	free(yq), free(yr), free(yf);
}

static void every_kernel_matches_the_reference_within_the_bound(void **state)
{
	(void)state;
	strata_compute *c = cpu(3);
	const shape shapes[] = {
		{512, 37, 1, false}, {768, 41, 4, true}, {256, 9, 8, true},
		{4096 + 256, 5, 2, false},
		/* the last two and three rows of a task together, and x's
		 * rows four at a time then one to three */
		{512, 6, 5, true}, {1024, 7, 3, false}, {768, 11, 6, true},
	};
	for (int isa = 2; isa >= 0; isa--) {
		strata__cpu_isa_limit(isa);
		for (int t = STRATA_BLOCK_F16; t < STRATA_BLOCK_COUNT; t++) {
			strata_block_type bt = (strata_block_type)t;
			if (!strata__qdot_has(bt))
				continue;
			for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
				check(c, bt, shapes[k]);
			if (strata_block_elements(bt) == 32) {
				/* partial last chunks: 1, 3 and 7 blocks */
				check(c, bt, (shape){32, 6, 1, true});
				check(c, bt, (shape){256 + 96, 7, 3, false});
				check(c, bt, (shape){40000, 2, 5, true});
			}
		}
	}
	strata__cpu_isa_limit(2);
	strata_compute_destroy(c);
}

/* Products of m <= 4 rows of x against one weight matrix w (type bt):
 * rows 4 .. 4 + m of x alone (qdot_rows.h's stream: x's chunks prepared
 * once a task in the thread's scratch, the weight rows one by one) must
 * give the bits of those rows in the product of all 4 + m rows, whose
 * path takes four weight rows in step (x's rows 0-3, then 4 .. 4 + m
 * together); and rows 0-3 alone those of rows 0-3 there. */
static void check_stream_bits(strata_compute *c, strata_block_type bt,
			      shape s, uint32_t m)
{
	uint64_t wbytes = (uint64_t)s.in / strata_block_elements(bt) *
			  strata_block_bytes(bt) * s.out;
	unsigned char *w = malloc(wbytes);
	float *x = malloc(8 * (size_t)s.in * sizeof *x);
	float *b = malloc(s.out * sizeof *b);
	float *ya = malloc(8 * (size_t)s.out * sizeof *ya);
	float *yb = malloc(8 * (size_t)s.out * sizeof *yb);
	rb_fill(bt, w, wbytes, &rng);
	for (size_t i = 0; i < 8 * (size_t)s.in; i++)
		x[i] = frand();
	for (uint32_t i = 0; i < s.out; i++)
		b[i] = frand();
	strata_weight ws = {weight_type_of(bt), w, s.out, s.in};
	strata_error e;
	const float *bias = s.bias ? b : NULL;
	assert_int_equal(strata_kernel_matmul(c, ya, x, &ws, bias, 4 + m, &e),
			 STRATA_OK);
	assert_int_equal(strata_kernel_matmul(c, yb, x + (size_t)4 * s.in, &ws,
					      bias, m, &e),
			 STRATA_OK);
	if (memcmp(ya + (size_t)4 * s.out, yb, m * s.out * sizeof *yb))
		fail_msg("%s in %u out %u, %u rows: the stream differs from "
			 "the rows in step", strata_block_name(bt), s.in, s.out,
			 m);
	assert_int_equal(strata_kernel_matmul(c, yb, x, &ws, bias, 4, &e),
			 STRATA_OK);
	if (memcmp(ya, yb, 4 * s.out * sizeof *yb))
		fail_msg("%s in %u out %u: four rows streamed differ from "
			 "them in step", strata_block_name(bt), s.in, s.out);
	free(w), free(x), free(b), free(ya), free(yb);
}

/* Up to four rows of x stream the weight rows one by one; their outputs
 * are the bits of the four-rows-in-step path, 1 to 4 rows of x: tasks
 * split over threads, partial last chunks (the 32-element types), a bias,
 * a row of 40000, on each SIMD kernel. */
static void streamed_rows_give_the_bits_of_rows_in_step(void **state)
{
	(void)state;
	strata_compute *c = cpu(3);
	const shape shapes[] = {
		{768, 101, 1, true}, {4096 + 256, 23, 1, false},
		{256 + 96, 203, 1, true}, {40000, 9, 1, false},
	};
	for (int isa = 2; isa >= 1; isa--) {
		strata__cpu_isa_limit(isa);
		for (int t = STRATA_BLOCK_F16; t < STRATA_BLOCK_COUNT; t++) {
			strata_block_type bt = (strata_block_type)t;
			if (!strata__qdot_has(bt))
				continue;
			for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
				for (uint32_t m = 1; m <= 4; m++)
					if (shapes[k].in %
					    strata_block_elements(bt) == 0)
						check_stream_bits(c, bt,
								  shapes[k], m);
		}
	}
	strata__cpu_isa_limit(2);
	strata_compute_destroy(c);
}

/* Rows of x that are all zero, or hold one huge value: zero factors and a
 * group whose other values round to 0 stay within the bound. */
static void zero_and_skewed_rows_stay_within_the_bound(void **state)
{
	(void)state;
	strata_compute *c = cpu(2);
	enum { IN = 512, OUT = 8 };
	static unsigned char w[IN / 32 * 34 * OUT];
	static float wf[IN * OUT], x[2 * IN], y[2 * OUT], yf[2 * OUT];
	rb_fill(STRATA_BLOCK_Q8_0, w, sizeof w, &rng);
	(void)strata_block_decode(STRATA_BLOCK_Q8_0, w, wf, IN * OUT);
	memset(x, 0, sizeof x);
	x[IN + 5] = 1e30f;
	x[IN + 6] = 1.0f;
	strata_weight ws = {STRATA_WEIGHT_Q8_0, w, OUT, IN};
	strata_weight w32 = {STRATA_WEIGHT_F32, wf, OUT, IN};
	strata_error e;
	assert_int_equal(strata_kernel_matmul(c, y, x, &ws, NULL, 2, &e),
			 STRATA_OK);
	assert_int_equal(strata_kernel_matmul(c, yf, x, &w32, NULL, 2, &e),
			 STRATA_OK);
	for (int o = 0; o < OUT; o++) {
		assert_true(y[o] == 0.0f);
		double bound = 1e30 / 127 / 2 * fabs(wf[o * IN + 6]) +
			       1e-5 * fabs((double)yf[OUT + o]);
		assert_true(fabs((double)y[OUT + o] - yf[OUT + o]) <= bound);
	}
	strata_compute_destroy(c);
}

/* x's quantization gives the same bytes on every path (AVX2's vectors,
 * the portable loop), ties and tiny, huge and non-finite groups included;
 * NaN or infinity in a group makes its factor NaN. */
static void x_quantization_is_the_same_on_every_path(void **state)
{
	(void)state;
	enum { N = 3, IN = 1024 + 96 };
	static float x[N * IN];
	for (int i = 0; i < N * IN; i++)
		x[i] = frand() * (i % 5 == 0 ? 8.0f : 1.0f);
	for (int i = 0; i < 32; i++) /* a group of ties: k + 1/2 of dx */
		x[i] = (float)(i - 16) + 0.5f, x[31] = 127;
	for (int i = 64; i < 80; i++)
		x[i] = 1e-42f * (float)(i - 70); /* subnormal */
	x[IN + 40] = NAN;
	x[IN + 300] = INFINITY;
	x[2 * IN + 7] = 3e38f;
	uint64_t bytes = strata__qdot_x_bytes(N, IN);
	unsigned char *a = strata_alloc_aligned(64, bytes);
	unsigned char *b = strata_alloc_aligned(64, bytes);
	strata__qx qa, qb;
	for (int t = STRATA_BLOCK_F16; t < STRATA_BLOCK_COUNT; t++) {
		strata_block_type bt = (strata_block_type)t;
		if (!strata__qdot_has(bt))
			continue;
		strata__cpu_isa_limit(0);
		strata__qdot_quantize_x(bt, x, N, IN, a, &qa);
		strata__cpu_isa_limit(2);
		strata__qdot_quantize_x(bt, x, N, IN, b, &qb);
		if (memcmp(a, b, bytes))
			fail_msg("%s: the quantized x differ between paths",
				 strata_block_name(bt));
	}
	/* the NaN's and the infinity's 16s: NaN factors, zero codes */
	int nan_d = 0;
	for (uint32_t i = 0; i < 2 * qa.groups * N; i++)
		nan_d += qa.d[i] != qa.d[i];
	assert_int_equal(nan_d, 2);
	strata_free(a);
	strata_free(b);
}

/* STRATA_PRECISION_EXACT: the decode shape gives the f32 product's bits
 * (test_cpu_quant checks every type), where the default (FAST) takes x
 * quantized to 8 bits and lands elsewhere; a precision outside the enum
 * is refused at the compute's creation, and a name neither fast nor exact
 * at parsing, naming it. */
static void the_exact_path_stays_reachable(void **state)
{
	(void)state;
	enum { IN = 512, OUT = 16 };
	static unsigned char w[IN / 32 * 34 * OUT];
	static float wf[IN * OUT], x[IN], y[OUT], yf[OUT], yq[OUT];
	rb_fill(STRATA_BLOCK_Q8_0, w, sizeof w, &rng);
	(void)strata_block_decode(STRATA_BLOCK_Q8_0, w, wf, IN * OUT);
	for (int i = 0; i < IN; i++)
		x[i] = frand();
	strata_weight ws = {STRATA_WEIGHT_Q8_0, w, OUT, IN};
	strata_weight w32 = {STRATA_WEIGHT_F32, wf, OUT, IN};
	strata_error e;
	strata_compute *c = NULL;
	assert_int_equal(strata_compute_create_with(
				 &strata_cpu_kernel_ops,
				 &(strata_compute_options){
					 .threads = 2,
					 .precision = STRATA_PRECISION_EXACT},
				 &c, &e),
			 STRATA_OK);
	assert_int_equal(c->precision, STRATA_PRECISION_EXACT);
	assert_int_equal(strata_kernel_matmul(c, y, x, &ws, NULL, 1, &e),
			 STRATA_OK);
	assert_int_equal(strata_kernel_matmul(c, yf, x, &w32, NULL, 1, &e),
			 STRATA_OK);
	assert_memory_equal(y, yf, sizeof y);
	strata_compute_destroy(c);
	c = cpu(2); /* the default */
	assert_int_equal(c->precision, STRATA_PRECISION_FAST);
	assert_int_equal(strata_kernel_matmul(c, yq, x, &ws, NULL, 1, &e),
			 STRATA_OK);
	assert_true(memcmp(yq, yf, sizeof yq) != 0);
	strata_compute_destroy(c);
	strata_compute *bad = NULL;
	assert_int_equal(strata_compute_create_with(
				 &strata_cpu_kernel_ops,
				 &(strata_compute_options){
					 .precision = STRATA_PRECISION_COUNT},
				 &bad, &e),
			 STRATA_E_INVALID_ARG);
	assert_null(bad);
	strata_precision p = STRATA_PRECISION_EXACT;
	assert_int_equal(strata_precision_parse("int8", &p, &e),
			 STRATA_E_USAGE);
	assert_int_equal(p, STRATA_PRECISION_EXACT);
	assert_non_null(strstr(e.message, "'int8'"));
	assert_non_null(strstr(e.fix, "fast"));
	assert_non_null(strstr(e.fix, "exact"));
	assert_int_equal(strata_precision_parse("fast", &p, &e), STRATA_OK);
	assert_int_equal(p, STRATA_PRECISION_FAST);
	assert_string_equal(strata_precision_name(STRATA_PRECISION_EXACT),
			    "exact");
	assert_string_equal(strata_precision_name(STRATA_PRECISION_COUNT),
			    "unknown");
}

/* The quantized activations' buffer is the one allocation of a decode
 * product, once per larger shape: its failure is E_NOMEM naming it, with
 * nothing written; the same shape afterwards allocates nothing. */
static void activation_buffer_failure_is_reported(void **state)
{
	(void)state;
	strata_compute *c = cpu(2);
	enum { IN = 1024, OUT = 8 };
	static unsigned char w[IN / 256 * 144 * OUT];
	static float x[IN], y[OUT];
	rb_fill(STRATA_BLOCK_Q4_K, w, sizeof w, &rng);
	for (int i = 0; i < IN; i++)
		x[i] = frand();
	for (int i = 0; i < OUT; i++)
		y[i] = 7.0f;
	strata_weight ws = {STRATA_WEIGHT_Q4_K, w, OUT, IN};
	strata_error e;
	strata_alloc_fail_after(0);
	strata_status st = strata_kernel_matmul(c, y, x, &ws, NULL, 1, &e);
	strata_alloc_fail_after(-1);
	assert_int_equal(st, STRATA_E_NOMEM);
	assert_non_null(strstr(e.message, "quantized activations"));
	for (int i = 0; i < OUT; i++)
		assert_true(y[i] == 7.0f);
	assert_int_equal(strata_kernel_matmul(c, y, x, &ws, NULL, 1, &e),
			 STRATA_OK);
	strata_alloc_fail_after(0);
	st = strata_kernel_matmul(c, y, x, &ws, NULL, 1, &e);
	strata_alloc_fail_after(-1);
	assert_int_equal(st, STRATA_OK);
	strata_compute_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_kernel_matches_the_reference_within_the_bound),
		cmocka_unit_test(streamed_rows_give_the_bits_of_rows_in_step),
		cmocka_unit_test(zero_and_skewed_rows_stay_within_the_bound),
		cmocka_unit_test(x_quantization_is_the_same_on_every_path),
		cmocka_unit_test(the_exact_path_stays_reachable),
		cmocka_unit_test(activation_buffer_failure_is_reported),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
