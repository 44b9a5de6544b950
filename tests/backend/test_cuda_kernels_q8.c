/* test_cuda_kernels_q8.c - the CUDA decode GEMV on 8-bit activations
 * (kernels_qgemv_q8.cu, the default for 1..8 rows on Q8_0, Q4_0, Q4_K,
 * Q5_K and Q6_K) against the CPU's q8 decode on the same bytes (the same
 * codes of x, so within 1e-4: only f32 summation order differs) and
 * against the exact product (within the scheme's bound: the sum over 16s
 * of dx / 2 times the sum of |w|), 1..8 rows, rows of blocks that do not
 * fill a warp step, weights off 16-byte boundaries, x off 16-byte
 * boundaries, every row split and unroll, Q8_0's aligned-row kernel and
 * its fallback, the dependent launch against the ordinary one (the same
 * bits); the fused slots (norm folded in,
 * y +=, gate/up); NaN in x; and --precision's choice of the path; and the
 * wide lanes of Q4_K, Q5_K and Q6_K (strata__cuda_q8gemv_wide 1,
 * qgemv_q8_kquants.cuh) against the current ones and the CPU on the 7.5 GB
 * llama's shapes and odd ones, every slot and tuning above (layer: backend
 * tests); and the same checks of Q8_0's wide lanes
 * (strata__cuda_q8gemv_wide_q8_0 1, qgemv_q8_0_wide.cuh), with rows of
 * other lengths and weights off 16-byte boundaries keeping the current
 * lanes bit for bit. Skipped (77) without a CUDA device. */
#include <math.h>
#include <stdlib.h>

/* both backends' fast decode: x quantized to 8 bits */
#define KERNELS_FIXTURE_PRECISION STRATA_PRECISION_FAST
#define QUANT_FIXTURE_SEED 4242
#include "backend/kernels_fixture.h"
#include "backend/quant_fixture.h"

#include "support/gpu_skip.h"

/* Against the CPU's q8 decode: the same codes, f32 sums in another order. */
#define Q8_CPU_TOL 1e-4

static bool decode_q8(void)
{
	return ((strata__cuda_compute *)F.gpu->ctx)->decode_q8;
}

/* Each output of the q8 product within the scheme's bound of the exact
 * one (w decoded exactly, sums in double): sum over 16s of dx / 2 times
 * sum |w|, plus f32 rounding (1e-5 of sum |w x|). Returns the worst
 * error relative to |exact| + rms, as expect_close measures it. */
static double expect_within_bound(const char *what, const float *got,
				  const float *w, const float *x,
				  const float *bias, uint32_t n, uint32_t in,
				  uint32_t out)
{
	double worst = 0.0, ss = 0.0;
	double *exact = calloc((size_t)n * out, sizeof *exact);
	assert_non_null(exact);
	for (uint32_t r = 0; r < n; r++)
		for (uint32_t o = 0; o < out; o++) {
			const float *wr = w + (uint64_t)o * in;
			const float *xr = x + (uint64_t)r * in;
			double e = bias ? bias[o] : 0.0, bound = 0.0, mag = 0.0;
			for (uint32_t g = 0; g < in; g += 16) {
				float amax = 0.0f;
				double aw = 0.0;
				for (uint32_t i = g; i < g + 16; i++) {
					amax = fmaxf(amax, fabsf(xr[i]));
					aw += fabs((double)wr[i]);
					e += (double)wr[i] * xr[i];
					mag += fabs((double)wr[i] * xr[i]);
				}
				bound += (double)(amax / 127.0f) / 2.0 * aw;
			}
			double err = fabs((double)got[(uint64_t)r * out + o] - e);
			if (!(err <= bound * (1 + 1e-3) + 1e-5 * mag + 1e-6))
				fail_msg("%s: row %u output %u: %.9g, exact %.9g, "
					 "error %.3g past the bound %.3g",
					 what, r, o, (double)got[(uint64_t)r * out + o],
					 e, err, bound);
			exact[(uint64_t)r * out + o] = e;
			ss += e * e;
		}
	double rms = sqrt(ss / ((double)n * out));
	for (uint64_t i = 0; i < (uint64_t)n * out; i++) {
		double d = fabs((double)got[i] - exact[i]) /
			   (fabs(exact[i]) + rms + 1e-30);
		worst = d > worst ? d : worst;
	}
	free(exact);
	return worst;
}

/* Bytes past a device buffer's start at which check_product places the
 * weights, and floats at which it places x. */
static uint32_t w_offset, x_offset;

/* y (n, out) = x . w^T (+ bias) of random blocks of type t on both
 * backends: the CUDA product within Q8_CPU_TOL of the CPU's q8 decode and
 * within the bound of the exact product. Returns that exact distance. */
static double check_product(strata_weight_type t, uint32_t n, uint32_t in,
			    uint32_t out, bool bias)
{
	strata_block_type bt = strata_weight_type_block(t);
	uint64_t bytes = weight_bytes(t, out, in);
	unsigned char *h = random_blocks(bt, bytes);
	float *x = host_floats((size_t)n * in), *b = host_floats(out);
	float *w = host_floats((size_t)out * in);
	float *want = host_floats((size_t)n * out), *got = host_floats((size_t)n * out);
	assert_true(strata_block_decode(bt, h, w, (uint64_t)out * in) ==
		    STRATA_BLOCK_ALL_FINITE);
	cuda_test_fill(x, (size_t)n * in, n * 31 + in + out, 1.0f);
	cuda_test_fill(b, out, out, 1.0f);
	OK(strata_kernel_matmul(F.cpu, want, x, &(strata_weight){t, h, out, in}, bias ? b : NULL, n, ERR));
	char *dw = (char *)dev_alloc(bytes + 16) + w_offset;
	OK(strata_backend_copy_h2d_async(F.b, F.gs, dw, h, bytes, ERR));
	float *dx = (float *)dev_alloc((uint64_t)n * in * 4 + 64) + x_offset;
	OK(strata_backend_copy_h2d_async(F.b, F.gs, dx, x, (uint64_t)n * in * 4, ERR));
	float *db = upload(b, (uint64_t)out * 4);
	float *dy = dev_alloc((uint64_t)n * out * 4);
	OK(strata_kernel_matmul(F.gpu, dy, dx, &(strata_weight){t, dw, out, in}, bias ? db : NULL, n, ERR));
	download(got, dy, (uint64_t)n * out * 4);
	char what[96];
	snprintf(what, sizeof what, "%s n=%u in=%u out=%u%s w+%u x+%u",
		 strata_weight_type_name(t), n, in, out, bias ? " +bias" : "",
		 w_offset, 4 * x_offset);
	expect_close(what, want, got, (size_t)n * out, Q8_CPU_TOL);
	double d = expect_within_bound(what, got, w, x, bias ? b : NULL, n, in,
				       out);
	dev_free_all();
	free(h), free(x), free(b), free(w), free(want), free(got);
	return d;
}

/* ------------------------------------------------------------------------ */

static void test_q8_gemv_matches_cpu_q8_and_bound(void **state)
{
	(void)state;
	assert_true(decode_q8());
	for (size_t i = 0; i < FAST_TYPES; i++) {
		int bt = (int)strata_weight_type_block(fast_types[i]);
		assert_true(strata__cuda_q8gemv_takes(bt, (void *)(uintptr_t)0x10004, 4096));
		assert_false(strata__cuda_q8gemv_takes(bt, (void *)(uintptr_t)0x10002, 4096));
		double worst = 0.0;
		for (uint32_t n = 1; n <= STRATA__CUDA_GEMV_ROWS; n++) {
			double d = check_product(fast_types[i], n, 4096, 70, n % 3 == 0);
			worst = d > worst ? d : worst;
		}
		/* the down projection's width */
		check_product(fast_types[i], 2, 14336, 24, true);
		printf("  %-8s worst distance from the exact product %.3g\n",
		       strata_weight_type_name(fast_types[i]), worst);
	}
}

/* Rows of blocks that do not fill a warp step (800 and 96 columns of
 * 32-element blocks: 25 and 3 blocks; 1280 of super-blocks: 5), rows off
 * a word boundary (25 x 34 bytes), weights 4 bytes past a 16-byte
 * boundary, x 4 and 8 bytes past one, every split and both unrolls. */
static void test_q8_gemv_awkward_shapes(void **state)
{
	(void)state;
	for (size_t i = 0; i < FAST_TYPES; i++) {
		bool k = strata_block_elements(strata_weight_type_block(fast_types[i])) == 256;
		for (int split = 0; split <= 8; split = split ? split * 2 : 1)
			for (int unroll = 4; unroll <= 8; unroll += 4) {
				strata__cuda_qgemv_split = split;
				strata__cuda_qgemv_unroll = unroll;
				w_offset = unroll == 8 ? 4 : 0;
				x_offset = (uint32_t)split % 3;
				check_product(fast_types[i], 1, k ? 1280 : 800, 45, true);
				check_product(fast_types[i], 5, k ? 2304 : 96, 19, false);
				check_product(fast_types[i], 8, k ? 256 : 32, 9, true);
			}
		strata__cuda_qgemv_split = 0;
		strata__cuda_qgemv_unroll = 4;
		w_offset = x_offset = 0;
	}
}

/* Q8_0 rows on 8-byte boundaries (w 8-byte aligned, a multiple of 4
 * blocks a row) take the two-load kernel, others the funnel-shifted
 * words: both, and the aligned kind forced off, on rows of 36 blocks (4.5
 * warp steps), 128 (16) and 4 (half a step), every split. */
static void test_q8_0_aligned_rows_and_not(void **state)
{
	(void)state;
	for (int aligned = 0; aligned <= 1; aligned++)
		for (uint32_t off = 0; off <= 4; off += 4)
			for (int split = 0; split <= 8; split = split ? split * 2 : 1) {
				strata__cuda_q8gemv_aligned = aligned;
				strata__cuda_qgemv_split = split;
				w_offset = off;
				check_product(STRATA_WEIGHT_Q8_0, 3, 1152, 45, true);
				check_product(STRATA_WEIGHT_Q8_0, 1, 4096, 33, false);
				check_product(STRATA_WEIGHT_Q8_0, 8, 128, 7, true);
			}
	strata__cuda_q8gemv_aligned = 1;
	strata__cuda_qgemv_split = 0;
	w_offset = 0;
}

/* One type's GEMV launched as a programmatic dependent of the quantization
 * and launched the ordinary way give the same bits, 1 and 5 rows and
 * gate/up with the norm; `label` names the lanes in the failure. */
static void dependent_launch_same_bits(strata_weight_type type,
				       uint32_t seed, const char *label)
{
	const uint32_t in = 4096, out = 70;
	strata_block_type bt = strata_weight_type_block(type);
	uint64_t bytes = weight_bytes(type, out, in);
	unsigned char *h = random_blocks(bt, bytes), *hu = random_blocks(bt, bytes);
	float *x = host_floats(5 * in), *g = host_floats(in);
	float *got[2] = {host_floats(6 * out), host_floats(6 * out)};
	float *glu[2] = {host_floats(out), host_floats(out)};
	cuda_test_fill(x, 5 * in, seed, 2.0f);
	cuda_test_fill(g, in, seed + 2, 1.0f);
	strata_weight dw = {type, upload(h, bytes), out, in};
	strata_weight du = {type, upload(hu, bytes), out, in};
	float *dx = upload(x, 5 * in * 4), *dg = upload(g, in * 4);
	float *dy = dev_alloc(5 * out * 4), *dn = dev_alloc(in * 4);
	float *dup = dev_alloc(out * 4);
	strata_kernel_norm nrm = {{STRATA_WEIGHT_F32, dg, 1, in}, 1e-5f};
	for (int pdl = 0; pdl <= 1; pdl++) {
		strata__cuda_pdl = pdl;
		for (uint32_t n = 1; n <= 5; n += 4) {
			OK(strata_kernel_matmul(F.gpu, dy, dx, &dw, NULL, n, ERR));
			download(got[pdl] + (n == 5 ? 0 : 5 * out), dy, n * out * 4);
		}
		OK(strata_kernel_gated(F.gpu, dy, dx, &nrm, dn, &dw, &du, dup, 1, ERR));
		download(glu[pdl], dy, out * 4);
	}
	strata__cuda_pdl = 1;
	if (memcmp(got[0], got[1], 6 * out * 4) || memcmp(glu[0], glu[1], out * 4))
		fail_msg("%s%s: the dependent launch changed the bits", label,
			 strata_weight_type_name(type));
	printf("  %s%-8s dependent and ordinary launches bit-identical\n", label,
	       strata_weight_type_name(type));
	dev_free_all();
	free(h), free(hu), free(x), free(g);
	free(got[0]), free(got[1]), free(glu[0]), free(glu[1]);
}

/* The GEMV launched as a programmatic dependent of the quantization
 * (the default) and launched the ordinary way give the same bits, on
 * every type. */
static void test_dependent_launch_gives_the_same_bits(void **state)
{
	(void)state;
	for (size_t i = 0; i < FAST_TYPES; i++)
		dependent_launch_same_bits(fast_types[i], 17 + (uint32_t)i, "");
}

/* STRATA_PRECISION_EXACT (decode_q8 0) gives the f32 product (1e-4 of
 * the exact one), which the q8 path does not. */
static void test_exact_decode_is_f32(void **state)
{
	(void)state;
	strata__cuda_compute *k = F.gpu->ctx;
	const uint32_t in = 2048, out = 64;
	strata_block_type bt = STRATA_BLOCK_Q8_0;
	uint64_t bytes = weight_bytes(STRATA_WEIGHT_Q8_0, out, in);
	unsigned char *h = random_blocks(bt, bytes);
	float *x = host_floats(in), *w = host_floats((size_t)out * in);
	float *exact = host_floats(out), *got = host_floats(out);
	assert_true(strata_block_decode(bt, h, w, (uint64_t)out * in) ==
		    STRATA_BLOCK_ALL_FINITE);
	cuda_test_fill(x, in, 3, 1.0f);
	for (uint32_t o = 0; o < out; o++) {
		double e = 0;
		for (uint32_t i = 0; i < in; i++)
			e += (double)w[(uint64_t)o * in + i] * x[i];
		exact[o] = (float)e;
	}
	strata_weight dw = {STRATA_WEIGHT_Q8_0, upload(h, bytes), out, in};
	float *dx = upload(x, in * 4), *dy = dev_alloc(out * 4);
	for (int q8 = 0; q8 <= 1; q8++) {
		k->decode_q8 = q8;
		OK(strata_kernel_matmul(F.gpu, dy, dx, &dw, NULL, 1, ERR));
		download(got, dy, out * 4);
		size_t at;
		double d = cuda_test_rel_err(exact, got, out, &at);
		printf("  Q8_0 decode_q8=%d: %.3g from the exact product\n", q8, d);
		if (q8 ? !(d > 1e-4) : !(d <= 1e-4))
			fail_msg("decode_q8=%d: %.3g from exact", q8, d);
	}
	k->decode_q8 = 1;
	dev_free_all();
	free(h), free(x), free(w), free(exact), free(got);
}

/* A NaN in x makes its outputs NaN, as on the CPU, never a number. */
static void test_nan_in_x_gives_nan(void **state)
{
	(void)state;
	const uint32_t in = 512, out = 16;
	for (size_t i = 0; i < FAST_TYPES; i++) {
		strata_block_type bt = strata_weight_type_block(fast_types[i]);
		uint64_t bytes = weight_bytes(fast_types[i], out, in);
		unsigned char *h = random_blocks(bt, bytes);
		float *x = host_floats(in), *got = host_floats(out);
		cuda_test_fill(x, in, 9, 1.0f);
		x[37] = NAN;
		strata_weight dw = {fast_types[i], upload(h, bytes), out, in};
		float *dx = upload(x, in * 4), *dy = dev_alloc(out * 4);
		OK(strata_kernel_matmul(F.gpu, dy, dx, &dw, NULL, 1, ERR));
		download(got, dy, out * 4);
		for (uint32_t o = 0; o < out; o++)
			if (!isnan(got[o]))
				fail_msg("%s: output %u is %g, not NaN",
					 strata_weight_type_name(fast_types[i]), o,
					 (double)got[o]);
		dev_free_all();
		free(h), free(x), free(got);
	}
}

/* The fused slots (one row): three parts with the f32 norm folded in (a
 * bias on part 1), one part y += (a residual), gate/up with the norm and
 * SwiGLU, against the CPU's q8 decode through the same wrappers (its
 * rmsnorm, then its q8 products). */
static void check_fused(strata_weight_type t, const uint32_t outs[3])
{
	fused_case c;
	fused_case_init(&c, t, (uint64_t)t, outs);
	fused_check(&c, "q8 fused", Q8_CPU_TOL);
	fused_case_fini(&c);
}

static void test_q8_fused_slots_match_cpu_q8(void **state)
{
	(void)state;
	static const uint32_t shapes[2][3] = {{96, 32, 40}, {33, 7, 5}};
	for (size_t t = 0; t < FAST_TYPES; t++)
		for (int sh = 0; sh < 2; sh++)
			for (int split = 0; split <= 8; split = split ? split * 2 : 1) {
				strata__cuda_qgemv_split = split;
				check_fused(fast_types[t], shapes[sh]);
			}
	strata__cuda_qgemv_split = 0;
}

/* The precision picks the path when the context is made: fast (the
 * default, and what zeroed or NULL options give) quantizes x and rounds
 * prefill inputs to bf16 once, exact does neither; a precision outside
 * the enum is refused. */
static void test_precision_picks_the_decode_path(void **state)
{
	(void)state;
	static const struct {
		bool given;
		strata_precision p;
		int q8, terms;
	} cases[] = {{true, STRATA_PRECISION_FAST, 1, 1},
		     {true, STRATA_PRECISION_EXACT, 0, 3},
		     {false, STRATA_PRECISION_FAST, 1, 1}};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		strata_compute *c = NULL;
		const strata_compute_options o = {.precision = cases[i].p};
		OK(strata_compute_create_on_with(F.b, cases[i].given ? &o : NULL,
						 &c, NULL, ERR));
		strata__cuda_compute *k = c->ctx;
		assert_int_equal(k->decode_q8, cases[i].q8);
		assert_int_equal(k->prefill_terms, cases[i].terms);
		assert_int_equal(c->precision, cases[i].p);
		strata_compute_destroy(c);
	}
	strata_compute *c = NULL;
	strata_error e;
	assert_int_equal(strata_compute_create_on_with(
				 F.b,
				 &(strata_compute_options){
					 .precision = STRATA_PRECISION_COUNT},
				 &c, NULL, &e),
			 STRATA_E_INVALID_ARG);
	assert_null(c);
}

/* ------------------------------------------------------------------------ */
/* The wide lanes (strata__cuda_q8gemv_wide 1, _wide_q8_0 1)              */
/* ------------------------------------------------------------------------ */

static const strata_weight_type wide_types[] = {
	STRATA_WEIGHT_Q4_K, STRATA_WEIGHT_Q5_K, STRATA_WEIGHT_Q6_K,
	STRATA_WEIGHT_Q8_0,
};
#define WIDE_TYPES (sizeof wide_types / sizeof *wide_types)

/* Both wide knobs (the K-quants' and Q8_0's): each type reads only its own. */
static void set_wide(int v)
{
	strata__cuda_q8gemv_wide = v;
	strata__cuda_q8gemv_wide_q8_0 = v;
}

/* Whether the wide lanes take weights of type t placed w_offset bytes past
 * a 16-byte boundary, rows of `in` elements (Q4_K and Q5_K need the
 * boundary; Q6_K, 2-byte aligned super-blocks, does not; Q8_0 needs it and
 * rows of whole groups of 8 blocks, in a multiple of 256). */
static bool wide_takes(strata_weight_type t, uint32_t in)
{
	if (t == STRATA_WEIGHT_Q8_0)
		return w_offset % 16 == 0 && in % 256 == 0;
	return t == STRATA_WEIGHT_Q6_K || w_offset % 16 == 0;
}

/* y (n, out) = x . w^T (+ bias) of one set of random blocks of type t for
 * each n of ns, with the wide lanes and the current ones: the wide product
 * within Q8_CPU_TOL of the CPU's q8 decode and of the current kernel (the
 * same codes and factors; not the same bits: a wide lane sums a whole
 * 16-element run where two narrow lanes sum half each, so the f32 terms
 * are added in another order), and with `bound` within the scheme's bound
 * of the exact product. Where the wide lanes do not take the weights
 * (Q4_K, Q5_K off 16-byte boundaries) the knob must change no bit. y is
 * filled with NaN before each product, so a kernel that leaves rows
 * unwritten fails. */
static void check_wide(strata_weight_type t, const uint32_t *ns, size_t count,
		       uint32_t in, uint32_t out, bool bias, bool bound)
{
	strata_block_type bt = strata_weight_type_block(t);
	uint64_t bytes = weight_bytes(t, out, in);
	unsigned char *h = random_blocks(bt, bytes);
	const uint32_t nmax = STRATA__CUDA_GEMV_ROWS;
	float *x = host_floats((size_t)nmax * in), *b = host_floats(out);
	float *want = host_floats((size_t)nmax * out);
	float *got[2] = {host_floats((size_t)nmax * out),
			 host_floats((size_t)nmax * out)};
	float *w = bound ? host_floats((size_t)out * in) : NULL;
	if (w)
		assert_true(strata_block_decode(bt, h, w, (uint64_t)out * in) ==
			    STRATA_BLOCK_ALL_FINITE);
	cuda_test_fill(b, out, out + 7, 1.0f);
	char *dw = (char *)dev_alloc(bytes + 16) + w_offset;
	OK(strata_backend_copy_h2d_async(F.b, F.gs, dw, h, bytes, ERR));
	float *dx = (float *)dev_alloc((uint64_t)nmax * in * 4 + 64) + x_offset;
	float *db = upload(b, (uint64_t)out * 4);
	float *dy = dev_alloc((uint64_t)nmax * out * 4);
	for (size_t i = 0; i < count; i++) {
		const uint32_t n = ns[i];
		const uint64_t ybytes = (uint64_t)n * out * 4;
		cuda_test_fill(x, (size_t)n * in, n * 37 + in + out, 1.0f);
		OK(strata_backend_copy_h2d_async(F.b, F.gs, dx, x, (uint64_t)n * in * 4, ERR));
		OK(strata_kernel_matmul(F.cpu, want, x, &(strata_weight){t, h, out, in},
					bias ? b : NULL, n, ERR));
		for (int wide = 0; wide <= 1; wide++) {
			for (uint64_t k = 0; k < (uint64_t)n * out; k++)
				got[wide][k] = NAN;
			OK(strata_backend_copy_h2d_async(F.b, F.gs, dy, got[wide], ybytes, ERR));
			set_wide(wide);
			OK(strata_kernel_matmul(F.gpu, dy, dx, &(strata_weight){t, dw, out, in},
						bias ? db : NULL, n, ERR));
			set_wide(0);
			download(got[wide], dy, ybytes);
		}
		char what[112];
		snprintf(what, sizeof what, "wide %s n=%u in=%u out=%u%s w+%u x+%u",
			 strata_weight_type_name(t), n, in, out,
			 bias ? " +bias" : "", w_offset, 4 * x_offset);
		expect_close(what, want, got[1], (size_t)n * out, Q8_CPU_TOL);
		expect_close("  ... against the current lanes", got[0], got[1],
			     (size_t)n * out, Q8_CPU_TOL);
		if (!wide_takes(t, in) && memcmp(got[0], got[1], ybytes))
			fail_msg("%s: the knob changed bits where the wide lanes "
				 "do not take the weights", what);
		if (w)
			expect_within_bound(what, got[1], w, x, bias ? b : NULL,
					    n, in, out);
	}
	dev_free_all();
	free(h), free(x), free(b), free(want), free(got[0]), free(got[1]);
	free(w);
}

/* The 7.5 GB llama's products (q/o 4096x4096, gate/up 14336x4096, down
 * 4096x14336) and an odd small one (in 256: 8 lanes of a warp's 32 load;
 * out 3: a block of 8 warps with 5 idle), 1..8 rows (every kernel's row
 * count, partly filled), against the current lanes and the CPU. */
static void test_wide_lanes_match_current_and_cpu(void **state)
{
	(void)state;
	static const uint32_t all[] = {1, 2, 3, 4, 5, 6, 7, 8};
	static const uint32_t some[] = {1, 2, 3, 5, 8};
	for (size_t i = 0; i < WIDE_TYPES; i++) {
		check_wide(wide_types[i], all, 8, 4096, 4096, true, true);
		check_wide(wide_types[i], some, 5, 4096, 14336, false, false);
		check_wide(wide_types[i], some, 5, 14336, 4096, true, false);
		check_wide(wide_types[i], all, 8, 256, 3, true, true);
	}
}

/* Rows of super-blocks that do not fill a wide warp step (1280: 5 of a
 * step's 4 + 4; 2304: 9), row counts that do not fill a block (45, 19,
 * 4097), weights 4 and 8 bytes past a 16-byte boundary (Q4_K and Q5_K
 * keep the current lanes there, bit for bit; Q6_K's super-blocks start on
 * every even offset whatever the weights' own), x 4 and 8 bytes past
 * one, every row split and both unrolls. Q8_0's wide step is 16 blocks
 * (512 elements): 1280 is 2.5 steps, 2304 4.5, 256 half of one; off a
 * 16-byte boundary it keeps the current lanes, bit for bit. */
static void test_wide_lanes_awkward_shapes(void **state)
{
	(void)state;
	static const uint32_t one[] = {1}, five[] = {5}, eight[] = {8};
	static const uint32_t offsets[] = {0, 4, 8};
	for (size_t i = 0; i < WIDE_TYPES; i++)
		for (int split = 0; split <= 8; split = split ? split * 2 : 1)
			for (int unroll = 4; unroll <= 8; unroll += 4) {
				strata__cuda_qgemv_split = split;
				strata__cuda_qgemv_unroll = unroll;
				w_offset = offsets[(uint32_t)(split + unroll) % 3];
				x_offset = (uint32_t)split % 3;
				check_wide(wide_types[i], one, 1, 1280, 45, true, true);
				check_wide(wide_types[i], five, 1, 2304, 19, false, true);
				check_wide(wide_types[i], eight, 1, 256, 9, true, true);
			}
	strata__cuda_qgemv_split = 0;
	strata__cuda_qgemv_unroll = 4;
	w_offset = x_offset = 0;
	static const uint32_t two[] = {2};
	for (size_t i = 0; i < WIDE_TYPES; i++)
		check_wide(wide_types[i], two, 1, 4096, 4097, true, false);
}

/* Q8_0 rows the wide lanes do not take keep the current lanes, bit for
 * bit: 4128 and 96 elements (129 and 3 blocks: not whole groups of 8), on
 * and off 16-byte boundaries; and rows they take whose last warp step is
 * half empty (768: a step and a group of 8 blocks) with 1..8 rows. */
static void test_wide_q8_0_other_rows_keep_current_lanes(void **state)
{
	(void)state;
	static const uint32_t all[] = {1, 2, 3, 4, 5, 6, 7, 8};
	static const uint32_t offsets[] = {0, 8};
	for (int i = 0; i < 2; i++) {
		w_offset = offsets[i];
		check_wide(STRATA_WEIGHT_Q8_0, all, 8, 4128, 33, true, true);
		check_wide(STRATA_WEIGHT_Q8_0, all, 8, 96, 11, false, true);
		check_wide(STRATA_WEIGHT_Q8_0, all, 8, 768, 21, true, true);
	}
	w_offset = 0;
}

/* The fused slots (three parts with the norm folded in, y +=, gate/up
 * with SwiGLU: the wide lanes' halved unroll) on the wide lanes against
 * the CPU's q8 decode, every split. */
static void test_wide_fused_slots_match_cpu_q8(void **state)
{
	(void)state;
	static const uint32_t shapes[2][3] = {{96, 32, 40}, {33, 7, 5}};
	set_wide(1);
	for (size_t t = 0; t < WIDE_TYPES; t++)
		for (int sh = 0; sh < 2; sh++)
			for (int split = 0; split <= 8; split = split ? split * 2 : 1)
				for (int unroll = 4; unroll <= 8; unroll += 4) {
					strata__cuda_qgemv_split = split;
					strata__cuda_qgemv_unroll = unroll;
					check_fused(wide_types[t], shapes[sh]);
				}
	strata__cuda_qgemv_split = 0;
	strata__cuda_qgemv_unroll = 4;
	set_wide(0);
}

/* A NaN in x makes every output NaN on the wide lanes too (its run's dx
 * is NaN; the lanes add every run's term, mins included), in each row it
 * is in and only there. */
static void test_wide_nan_in_x_gives_nan(void **state)
{
	(void)state;
	const uint32_t in = 1280, out = 37, n = 3;
	set_wide(1);
	for (size_t i = 0; i < WIDE_TYPES; i++) {
		strata_block_type bt = strata_weight_type_block(wide_types[i]);
		uint64_t bytes = weight_bytes(wide_types[i], out, in);
		unsigned char *h = random_blocks(bt, bytes);
		float *x = host_floats(n * in), *got = host_floats(n * out);
		cuda_test_fill(x, n * in, 11, 1.0f);
		x[in + 1100] = NAN; /* row 1, the fifth super-block */
		strata_weight dw = {wide_types[i], upload(h, bytes), out, in};
		float *dx = upload(x, n * in * 4), *dy = dev_alloc(n * out * 4);
		OK(strata_kernel_matmul(F.gpu, dy, dx, &dw, NULL, n, ERR));
		download(got, dy, n * out * 4);
		for (uint32_t r = 0; r < n; r++)
			for (uint32_t o = 0; o < out; o++)
				if (isnan(got[r * out + o]) != (r == 1))
					fail_msg("wide %s: row %u output %u is %g",
						 strata_weight_type_name(wide_types[i]),
						 r, o, (double)got[r * out + o]);
		dev_free_all();
		free(h), free(x), free(got);
	}
	set_wide(0);
}

/* The wide lanes launched as a programmatic dependent of the quantization
 * and the ordinary way give the same bits (the same kernel, one order of
 * sums). */
static void test_wide_dependent_launch_gives_the_same_bits(void **state)
{
	(void)state;
	set_wide(1);
	for (size_t i = 0; i < WIDE_TYPES; i++)
		dependent_launch_same_bits(wide_types[i], 23 + (uint32_t)i, "wide ");
	set_wide(0);
}

int main(void)
{
	if (gpu_skip_without_device("test_backend_cuda_kernels_q8"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_q8_gemv_matches_cpu_q8_and_bound),
		cmocka_unit_test(test_q8_gemv_awkward_shapes),
		cmocka_unit_test(test_q8_0_aligned_rows_and_not),
		cmocka_unit_test(test_dependent_launch_gives_the_same_bits),
		cmocka_unit_test(test_exact_decode_is_f32),
		cmocka_unit_test(test_nan_in_x_gives_nan),
		cmocka_unit_test(test_q8_fused_slots_match_cpu_q8),
		cmocka_unit_test(test_precision_picks_the_decode_path),
		cmocka_unit_test(test_wide_lanes_match_current_and_cpu),
		cmocka_unit_test(test_wide_lanes_awkward_shapes),
		cmocka_unit_test(test_wide_q8_0_other_rows_keep_current_lanes),
		cmocka_unit_test(test_wide_fused_slots_match_cpu_q8),
		cmocka_unit_test(test_wide_nan_in_x_gives_nan),
		cmocka_unit_test(test_wide_dependent_launch_gives_the_same_bits),
	};
	/* the narrow lanes unless a test says otherwise (the wide ones, the
	 * default, are the tests that set the knob to 1 and back) */
	set_wide(0);
	return cmocka_run_group_tests(tests, setup, teardown);
}
