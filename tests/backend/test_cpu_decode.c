/* test_cpu_decode.c - the CPU's fused one-row slots (kernels_decode.c)
 * give, bit for bit, what the plain kernels give composed: the norm
 * folded into q/k/v-like products with biases, residual products added in
 * place, the gate and up with their SwiGLU, on f32, bf16 and f16 weights,
 * widths that are not a multiple of 8 and row counts that are not a
 * multiple of 4, over 1, 2 and 3 threads; the reference is the products
 * at two rows of x (the stored product's and the f32 product's own paths,
 * whose rows do not depend on how many there are) (layer: backend). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"

void strata__cpu_isa_limit(int level);

#define OK(call) assert_int_equal((call), STRATA_OK)

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* A (rows, cols) weight of type t with random values (halves: rounded). */
static strata_weight make_weight(strata_weight_type t, uint32_t rows,
				 uint32_t cols)
{
	uint64_t n = (uint64_t)rows * cols;
	float *f = strata_alloc(n * sizeof *f);
	assert_non_null(f);
	for (uint64_t i = 0; i < n; i++)
		f[i] = frand() * 0.25f;
	void *data = f;
	if (t != STRATA_WEIGHT_F32) {
		strata_block_type b = strata_weight_type_block(t);
		data = strata_alloc(n * 2);
		assert_non_null(data);
		assert_true(strata_block_encode(b, f, data, n) ==
			    STRATA_BLOCK_ALL_FINITE);
		strata_free(f);
	}
	return (strata_weight){t, data, rows, cols};
}

static float *rand_floats(uint64_t n)
{
	float *v = strata_alloc(n * sizeof *v + 4);
	assert_non_null(v);
	for (uint64_t i = 0; i < n; i++)
		v[i] = frand();
	return v;
}

/* y (rows) = x . w^T (+ bias) through the plain product at two rows of x
 * (both x), the first row kept. */
static void plain_row(strata_compute *c, float *y, const float *x,
		      const strata_weight *w, const float *bias)
{
	float *x2 = strata_alloc((uint64_t)2 * w->cols * sizeof *x2);
	float *y2 = strata_alloc((uint64_t)2 * w->rows * sizeof *y2);
	assert_non_null(x2);
	assert_non_null(y2);
	memcpy(x2, x, w->cols * sizeof *x);
	memcpy(x2 + w->cols, x, w->cols * sizeof *x);
	strata_error err;
	OK(strata_kernel_matmul(c, y2, x2, w, bias, 2, &err));
	memcpy(y, y2, w->rows * sizeof *y);
	strata_free(x2);
	strata_free(y2);
}

static void assert_bits(const float *got, const float *want, uint32_t n,
			const char *what)
{
	for (uint32_t i = 0; i < n; i++)
		if (memcmp(&got[i], &want[i], sizeof *got))
			fail_msg("%s: element %u is %.9g, the plain kernels "
				 "give %.9g", what, i, got[i], want[i]);
}

/* ------------------------------------------------------------------------ */

/* Three products sharing the normed x, with biases (q, k, v), then one
 * added into a residual (o), fused against composed. */
static void check_products(strata_compute *c, strata_weight_type t,
			   uint32_t in, const uint32_t rows[3])
{
	strata_weight norm_w = make_weight(t, 1, in);
	strata_weight w[3];
	float *bias[3], *y[3], *want[3];
	for (int i = 0; i < 3; i++) {
		w[i] = make_weight(t, rows[i], in);
		bias[i] = rand_floats(rows[i]);
		y[i] = rand_floats(rows[i]);
		want[i] = rand_floats(rows[i]);
	}
	float *x = rand_floats(in), *normed = rand_floats(in);
	const strata_kernel_norm norm = {norm_w, 1e-5f};
	strata_error err;
	OK(strata_kernel_rmsnorm(c, normed, x, &norm_w, 1, 1e-5f, &err));
	for (int i = 0; i < 3; i++)
		plain_row(c, want[i], normed, &w[i], bias[i]);
	const strata_kernel_product p[] = {{y[0], w[0], bias[0]},
					   {y[1], w[1], bias[1]},
					   {y[2], w[2], bias[2]}};
	float *scratch = rand_floats(in);
	OK(strata_kernel_products(c, x, &norm, scratch, 1, p, 3, false, NULL,
				  &err));
	strata_free(scratch);
	for (int i = 0; i < 3; i++)
		assert_bits(y[i], want[i], rows[i], "normed products");
	/* residual: y[0] += x . w^T, on the rows wq has (in columns) */
	float *res = rand_floats(rows[0]), *res_want = strata_alloc(rows[0] * 4);
	float *prod = strata_alloc(rows[0] * 4);
	memcpy(res_want, res, rows[0] * 4);
	plain_row(c, prod, x, &w[0], NULL);
	OK(strata_kernel_add(c, res_want, prod, rows[0], &err));
	const strata_kernel_product r = {res, w[0], NULL};
	OK(strata_kernel_products(c, x, NULL, NULL, 1, &r, 1, true, prod,
				  &err));
	assert_bits(res, res_want, rows[0], "residual product");
	for (int i = 0; i < 3; i++) {
		strata_free((void *)w[i].data);
		strata_free(bias[i]), strata_free(y[i]), strata_free(want[i]);
	}
	strata_free((void *)norm_w.data);
	strata_free(x), strata_free(normed), strata_free(res);
	strata_free(res_want), strata_free(prod);
}

/* silu(normed x . gate^T) * (normed x . up^T), fused against composed. */
static void check_gated(strata_compute *c, strata_weight_type t, uint32_t in,
			uint32_t rows)
{
	strata_weight norm_w = make_weight(STRATA_WEIGHT_F32, 1, in);
	strata_weight gate = make_weight(t, rows, in), up = make_weight(t, rows, in);
	float *x = rand_floats(in), *normed = rand_floats(in);
	float *y = rand_floats(rows), *want = rand_floats(rows);
	float *u = rand_floats(rows);
	strata_error err;
	OK(strata_kernel_rmsnorm(c, normed, x, &norm_w, 1, 1e-6f, &err));
	plain_row(c, want, normed, &gate, NULL);
	plain_row(c, u, normed, &up, NULL);
	OK(strata_kernel_swiglu(c, want, u, rows, &err));
	const strata_kernel_norm norm = {norm_w, 1e-6f};
	float *scratch = rand_floats(in), *up_out = rand_floats(rows);
	OK(strata_kernel_gated(c, y, x, &norm, scratch, &gate, &up, up_out, 1,
			       &err));
	strata_free(scratch), strata_free(up_out);
	assert_bits(y, want, rows, "gated");
	strata_free((void *)norm_w.data), strata_free((void *)gate.data);
	strata_free((void *)up.data);
	strata_free(x), strata_free(normed), strata_free(y), strata_free(want);
	strata_free(u);
}

/* the types the fused slots take (f32 runs the plain kernels) */
static const strata_weight_type types[] = {STRATA_WEIGHT_BF16,
					   STRATA_WEIGHT_F16};

static void test_fused_products_equal_plain(void **state)
{
	(void)state;
	/* small (one task a part), odd widths, and large enough to spread */
	const uint32_t shapes[][4] = {
		{64, 64, 16, 16}, {203, 37, 9, 9}, {1000, 260, 65, 65},
		{2048, 1024, 256, 256}};
	for (uint32_t threads = 1; threads <= 3; threads++) {
		strata_compute *c = NULL;
		strata_error err;
		OK(strata_compute_create(&strata_cpu_kernel_ops, threads, &c,
					 &err));
		for (size_t t = 0; t < sizeof types / sizeof *types; t++)
			for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
				check_products(c, types[t], shapes[s][0],
					       &shapes[s][1]);
		strata_compute_destroy(c);
	}
}

static void test_fused_gated_equal_plain(void **state)
{
	(void)state;
	const uint32_t shapes[][2] = {{64, 172}, {203, 37}, {1024, 2819}};
	for (uint32_t threads = 1; threads <= 3; threads++) {
		strata_compute *c = NULL;
		strata_error err;
		OK(strata_compute_create(&strata_cpu_kernel_ops, threads, &c,
					 &err));
		for (size_t t = 0; t < sizeof types / sizeof *types; t++)
			for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
				check_gated(c, types[t], shapes[s][0],
					    shapes[s][1]);
		strata_compute_destroy(c);
	}
}

/* On the generic path (no AVX2) the fused slots decline and the wrappers
 * compose the plain kernels: the same results as there. */
static void test_generic_path_composes(void **state)
{
	(void)state;
	strata__cpu_isa_limit(0);
	strata_compute *c = NULL;
	strata_error err;
	OK(strata_compute_create(&strata_cpu_kernel_ops, 2, &c, &err));
	const uint32_t rows[3] = {300, 76, 76};
	check_products(c, STRATA_WEIGHT_BF16, 515, rows);
	check_gated(c, STRATA_WEIGHT_F16, 515, 301);
	strata_compute_destroy(c);
	strata__cpu_isa_limit(2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fused_products_equal_plain),
		cmocka_unit_test(test_fused_gated_equal_plain),
		cmocka_unit_test(test_generic_path_composes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
