/* test_cpu_decode_q8.c - the CPU's fused one-row slots on the GGUF block
 * types (kernels_decode_q8.c) give, bit for bit, what the plain Q8 decode
 * products give composed: the norm folded into q/k/v-like products of
 * mixed types with biases, residual products added in place, the gate and
 * up with their SwiGLU; every block type of the activation-quantized
 * scheme, on the AVX-512 VNNI, AVX2 and portable kernels, over 1, 2 and 3
 * threads, small products (one task a part) and spread ones, row counts
 * not a multiple of 4 and 32-element types with a partial last chunk. The
 * reference is one-row matmul, add and swiglu, whose matmul is the plain
 * path (it takes no fused slot for the block types). Under --precision
 * exact the slots decline (layer: backend). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"
#include "support/random_blocks.h"

void strata__cpu_isa_limit(int level);
bool strata__qdot_vnni_usable(void);

#define OK(call) assert_int_equal((call), STRATA_OK)

static uint32_t seed = 12345;

static float frand(void)
{
	return (float)rb_next(&seed) / (float)(1u << 23) - 1.0f;
}

/* A (rows, cols) weight of type t, random finite blocks. */
static strata_weight make_weight(strata_weight_type t, uint32_t rows,
				 uint32_t cols)
{
	strata_block_type b = strata_weight_type_block(t);
	size_t bytes = (size_t)rows * cols / strata_block_elements(b) *
		       strata_block_bytes(b);
	unsigned char *p = strata_alloc(bytes + 1);
	assert_non_null(p);
	rb_fill(b, p, bytes, &seed);
	return (strata_weight){t, p, rows, cols};
}

static float *rand_floats(uint64_t n)
{
	float *v = strata_alloc(n * sizeof *v + 4);
	assert_non_null(v);
	for (uint64_t i = 0; i < n; i++)
		v[i] = frand();
	return v;
}

static void assert_bits(const float *got, const float *want, uint32_t n,
			const char *what, strata_weight_type t)
{
	for (uint32_t i = 0; i < n; i++)
		if (memcmp(&got[i], &want[i], sizeof *got))
			fail_msg("%s, %s: element %u is %.9g, the plain kernels "
				 "give %.9g", what, strata_weight_type_name(t),
				 i, got[i], want[i]);
}

static bool products_fused(strata_compute *c, const strata_kernel_product *p,
			   uint32_t count)
{
	return c->ops->products_take(c->ctx, NULL, 1, p, count);
}

/* ------------------------------------------------------------------------ */

/* q, k, v (types t, t and v_type: a Q4_K_M-like mix) from the normed x
 * with biases, then one added into a residual, fused against composed. */
static void check_products(strata_compute *c, strata_weight_type t,
			   strata_weight_type v_type, uint32_t in,
			   const uint32_t rows[3])
{
	strata_weight norm_w = {STRATA_WEIGHT_F32, rand_floats(in), 1, in};
	strata_weight w[3];
	float *bias[3], *y[3], *want[3];
	for (int i = 0; i < 3; i++) {
		w[i] = make_weight(i == 2 ? v_type : t, rows[i], in);
		bias[i] = rand_floats(rows[i]);
		y[i] = rand_floats(rows[i]);
		want[i] = rand_floats(rows[i]);
	}
	float *x = rand_floats(in), *normed = rand_floats(in);
	const strata_kernel_norm norm = {norm_w, 1e-5f};
	strata_error err;
	OK(strata_kernel_rmsnorm(c, normed, x, &norm_w, 1, 1e-5f, &err));
	for (int i = 0; i < 3; i++)
		OK(strata_kernel_matmul(c, want[i], normed, &w[i], bias[i], 1,
					&err));
	const strata_kernel_product p[] = {{y[0], w[0], bias[0]},
					   {y[1], w[1], bias[1]},
					   {y[2], w[2], bias[2]}};
	assert_true(products_fused(c, p, 3));
	float *scratch = rand_floats(in);
	OK(strata_kernel_products(c, x, &norm, scratch, 1, p, 3, false, NULL,
				  &err));
	for (int i = 0; i < 3; i++)
		assert_bits(y[i], want[i], rows[i], "normed products", w[i].type);
	/* residual: y[0] += x . w^T (+ bias); no scratch, so only the
	 * fused slot can run it */
	float *res = rand_floats(rows[0]), *res_want = strata_alloc(rows[0] * 4);
	memcpy(res_want, res, rows[0] * 4);
	OK(strata_kernel_matmul(c, want[0], x, &w[0], bias[0], 1, &err));
	OK(strata_kernel_add(c, res_want, want[0], rows[0], &err));
	const strata_kernel_product r = {res, w[0], bias[0]};
	OK(strata_kernel_products(c, x, NULL, NULL, 1, &r, 1, true, NULL,
				  &err));
	assert_bits(res, res_want, rows[0], "residual product", t);
	for (int i = 0; i < 3; i++) {
		strata_free((void *)w[i].data);
		strata_free(bias[i]), strata_free(y[i]), strata_free(want[i]);
	}
	strata_free((void *)norm_w.data), strata_free(scratch);
	strata_free(x), strata_free(normed), strata_free(res);
	strata_free(res_want);
}

/* silu(normed x . gate^T) * (normed x . up^T), fused (no up buffer, so
 * only the fused slot can run it) against composed. */
static void check_gated(strata_compute *c, strata_weight_type t, uint32_t in,
			uint32_t rows)
{
	strata_weight norm_w = {STRATA_WEIGHT_F32, rand_floats(in), 1, in};
	strata_weight gate = make_weight(t, rows, in), up = make_weight(t, rows, in);
	float *x = rand_floats(in), *normed = rand_floats(in);
	float *y = rand_floats(rows), *want = rand_floats(rows);
	float *u = rand_floats(rows);
	strata_error err;
	OK(strata_kernel_rmsnorm(c, normed, x, &norm_w, 1, 1e-6f, &err));
	OK(strata_kernel_matmul(c, want, normed, &gate, NULL, 1, &err));
	OK(strata_kernel_matmul(c, u, normed, &up, NULL, 1, &err));
	OK(strata_kernel_swiglu(c, want, u, rows, &err));
	const strata_kernel_norm norm = {norm_w, 1e-6f};
	float *scratch = rand_floats(in);
	OK(strata_kernel_gated(c, y, x, &norm, scratch, &gate, &up, NULL, 1,
			       &err));
	assert_bits(y, want, rows, "gated", t);
	strata_free((void *)norm_w.data), strata_free((void *)gate.data);
	strata_free((void *)up.data), strata_free(scratch);
	strata_free(x), strata_free(normed), strata_free(y), strata_free(want);
	strata_free(u);
}

/* One ISA level, every thread count, type and shape. */
static void check_isa(int isa)
{
	strata__cpu_isa_limit(isa);
	/* small (one task a part), odd rows, and large enough to spread */
	const uint32_t shapes[][4] = {
		{256, 16, 8, 8}, {512, 203, 37, 37}, {1024, 1000, 260, 260}};
	for (uint32_t threads = 1; threads <= 3; threads++) {
		strata_compute *c = NULL;
		strata_error err;
		OK(strata_compute_create(&strata_cpu_kernel_ops, threads, &c,
					 &err));
		for (int t = STRATA_WEIGHT_Q8_0; t <= STRATA_WEIGHT_IQ4_XS; t++) {
			strata_weight_type wt = (strata_weight_type)t;
			strata_weight_type vt = wt == STRATA_WEIGHT_Q4_K
							? STRATA_WEIGHT_Q6_K : wt;
			for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
				check_products(c, wt, vt, shapes[s][0],
					       &shapes[s][1]);
				check_gated(c, wt, shapes[s][0],
					    shapes[s][1] + 3);
			}
			if (strata_block_elements(strata_weight_type_block(wt)) ==
			    32) { /* a partial last chunk (3 blocks) */
				const uint32_t rows[3] = {301, 65, 65};
				check_products(c, wt, wt, 512 + 96, rows);
				check_gated(c, wt, 512 + 96, 517);
			}
		}
		strata_compute_destroy(c);
	}
	strata__cpu_isa_limit(2);
}

static void test_vnni_fused_equal_plain(void **state)
{
	(void)state;
	if (!strata__qdot_vnni_usable())
		skip();
	check_isa(2);
}

static void test_avx2_fused_equal_plain(void **state)
{
	(void)state;
	check_isa(1);
}

static void test_portable_fused_equal_plain(void **state)
{
	(void)state;
	check_isa(0);
}

/* --precision exact keeps the exact kernels: the slots decline. */
static void test_exact_declines(void **state)
{
	(void)state;
	const strata_compute_options o = {.threads = 2,
					  .precision = STRATA_PRECISION_EXACT};
	strata_compute *c = NULL;
	strata_error err;
	OK(strata_compute_create_with(&strata_cpu_kernel_ops, &o, &c, &err));
	strata_weight w = make_weight(STRATA_WEIGHT_Q4_K, 8, 256);
	float y[8];
	const strata_kernel_product p = {y, w, NULL};
	assert_false(products_fused(c, &p, 1));
	assert_false(c->ops->gated_take(c->ctx, NULL, 1, &w, &w));
	strata_free((void *)w.data);
	strata_compute_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vnni_fused_equal_plain),
		cmocka_unit_test(test_avx2_fused_equal_plain),
		cmocka_unit_test(test_portable_fused_equal_plain),
		cmocka_unit_test(test_exact_declines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
