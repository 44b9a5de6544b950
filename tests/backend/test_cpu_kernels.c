/* test_cpu_kernels.c - the CPU kernels against plain reference loops in
 * double, and their determinism across thread counts and batch sizes
 * (layer: backend). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static float *rand_buf(size_t n)
{
	float *b = strata_alloc(n * sizeof *b + 1);
	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = frand();
	return b;
}

static strata_compute *make(uint32_t threads)
{
	strata_compute *c = NULL;
	strata_error err;
	assert_int_equal(strata_compute_create(&strata_cpu_kernel_ops, threads,
					       &c, &err),
			 STRATA_OK);
	return c;
}

static void assert_close(double got, double want, double tol)
{
	double d = fabs(got - want);
	if (d > tol * (1.0 + fabs(want)))
		fail_msg("got %.9g want %.9g (|diff| %.3g)", got, want, d);
}

/* ------------------------------------------------------------------------ */

static void check_matmul(strata_compute *c, uint32_t n, uint32_t in,
			 uint32_t out, bool with_bias)
{
	float *x = rand_buf((size_t)n * in), *w = rand_buf((size_t)out * in);
	float *b = with_bias ? rand_buf(out) : NULL;
	float *y = rand_buf((size_t)n * out), *y1 = rand_buf(out);
	strata_error err;
	assert_int_equal(
		strata_kernel_matmul(
			c, y, x,
			&(strata_weight){STRATA_WEIGHT_F32, w, out, in}, b, n,
			&err),
		STRATA_OK);
	for (uint32_t t = 0; t < n; t++) {
		for (uint32_t o = 0; o < out; o++) {
			double s = b ? b[o] : 0.0;
			for (uint32_t k = 0; k < in; k++)
				s += (double)x[t * in + k] * w[o * in + k];
			assert_close(y[t * out + o], s, 1e-5);
		}
		/* Row t alone (decode) gives the same bits as in the batch. */
		assert_int_equal(
			strata_kernel_matmul(
				c, y1, x + t * in,
				&(strata_weight){STRATA_WEIGHT_F32, w, out, in},
				b, 1, &err),
			STRATA_OK);
		assert_memory_equal(y1, y + t * out, out * sizeof *y1);
	}
	strata_free(x);
	strata_free(w);
	strata_free(b);
	strata_free(y);
	strata_free(y1);
}

static void test_matmul_matches_reference_on_odd_shapes(void **state)
{
	(void)state;
	strata_compute *c = make(3);
	static const uint32_t shapes[][3] = {
		{1, 1, 1},   {1, 7, 5},	   {3, 8, 4},	 {2, 9, 13},
		{5, 48, 136}, {7, 136, 48}, {1, 172, 64}, {12, 64, 250},
		{9, 33, 67},  {1, 768, 300}, {33, 64, 96},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		check_matmul(c, shapes[i][0], shapes[i][1], shapes[i][2],
			     false);
		check_matmul(c, shapes[i][0], shapes[i][1], shapes[i][2],
			     true);
	}
	strata_compute_destroy(c);
}

static void test_matmul_bits_do_not_depend_on_threads(void **state)
{
	(void)state;
	const uint32_t n = 17, in = 200, out = 333;
	float *x = rand_buf(n * in), *w = rand_buf(out * in);
	float *y1 = rand_buf(n * out), *y4 = rand_buf(n * out);
	strata_compute *c1 = make(1), *c4 = make(4);
	strata_error err;
	assert_int_equal(strata_compute_threads(c4), 4);
	assert_int_equal(
		strata_kernel_matmul(
			c1, y1, x,
			&(strata_weight){STRATA_WEIGHT_F32, w, out, in}, NULL,
			n, &err),
		STRATA_OK);
	for (int rep = 0; rep < 50; rep++) {
		assert_int_equal(
			strata_kernel_matmul(
				c4, y4, x,
				&(strata_weight){STRATA_WEIGHT_F32, w, out, in},
				NULL, n, &err),
			STRATA_OK);
		assert_memory_equal(y1, y4, n * out * sizeof *y1);
	}
	strata_compute_destroy(c1);
	strata_compute_destroy(c4);
	strata_free(x);
	strata_free(w);
	strata_free(y1);
	strata_free(y4);
}

static void test_rmsnorm_matches_reference(void **state)
{
	(void)state;
	strata_compute *c = make(2);
	const uint32_t n = 40, dim = 600; /* 24000 elements: threaded path */
	float *x = rand_buf(n * dim), *w = rand_buf(dim), *y = rand_buf(n * dim);
	strata_error err;
	for (int in_place = 0; in_place < 2; in_place++) {
		float *dst = in_place ? x : y;
		float *copy = rand_buf(n * dim);
		memcpy(copy, x, n * dim * sizeof *x);
		assert_int_equal(
			strata_kernel_rmsnorm(
				c, dst, x,
				&(strata_weight){STRATA_WEIGHT_F32, w, 1, dim},
				n, 1e-5f, &err),
			STRATA_OK);
		for (uint32_t i = 0; i < n; i++) {
			double ss = 0;
			for (uint32_t e = 0; e < dim; e++)
				ss += (double)copy[i * dim + e] *
				      copy[i * dim + e];
			double r = 1.0 / sqrt(ss / dim + 1e-5);
			for (uint32_t e = 0; e < dim; e++)
				assert_close(dst[i * dim + e],
					     copy[i * dim + e] * r * w[e],
					     1e-5);
		}
		strata_free(copy);
	}
	strata_free(x);
	strata_free(w);
	strata_free(y);
	strata_compute_destroy(c);
}

static void check_rope(strata_rope_layout layout)
{
	strata_compute *c = make(2);
	const uint32_t n = 5, heads = 3, d = 8, pos0 = 37;
	float inv[4] = {1.0f, 0.1f, 0.01f, 0.001f};
	float *x = rand_buf(n * heads * d), *orig = rand_buf(n * heads * d);
	memcpy(orig, x, n * heads * d * sizeof *x);
	strata_error err;
	assert_int_equal(strata_kernel_rope(c, x, n, pos0, heads, d, inv,
					    layout, &err),
			 STRATA_OK);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < heads; h++)
			for (uint32_t f = 0; f < d / 2; f++) {
				size_t base = (i * heads + h) * d;
				size_t a = layout == STRATA_ROPE_HALF
						   ? base + f
						   : base + 2 * f;
				size_t b = layout == STRATA_ROPE_HALF
						   ? base + f + d / 2
						   : base + 2 * f + 1;
				double ang = (double)(pos0 + i) * inv[f];
				double want_a = orig[a] * cos(ang) -
						orig[b] * sin(ang);
				double want_b = orig[b] * cos(ang) +
						orig[a] * sin(ang);
				assert_close(x[a], want_a, 1e-4);
				assert_close(x[b], want_b, 1e-4);
			}
	strata_free(x);
	strata_free(orig);
	strata_compute_destroy(c);
}

/* Half norm weights and biases (a unit a CUDA run keeps as CUDA does,
 * computed on the CPU: issue 17): a bf16 norm gives the bits of its f32
 * decoding, and as_f32 decodes an f16 vector exactly. */
static void test_half_norms_and_vectors(void **state)
{
	(void)state;
	strata_compute *c = make(1);
	enum { N = 3, DIM = 64 };
	float *x = rand_buf(N * DIM), want[N * DIM], got[N * DIM], wf[DIM];
	uint16_t wb[DIM], wh[DIM];
	for (int e = 0; e < DIM; e++) {
		wb[e] = (uint16_t)(0x3f80 + e);	/* bf16 near 1 */
		wh[e] = (uint16_t)(0x3c00 + 7 * e); /* f16 near 1 */
	}
	strata_block_decode(STRATA_BLOCK_BF16, wb, wf, DIM);
	strata_error err;
	assert_int_equal(strata_kernel_rmsnorm(
				 c, want, x,
				 &(strata_weight){STRATA_WEIGHT_F32, wf, 1, DIM},
				 N, 1e-5f, &err),
			 STRATA_OK);
	assert_int_equal(strata_kernel_rmsnorm(
				 c, got, x,
				 &(strata_weight){STRATA_WEIGHT_BF16, wb, 1, DIM},
				 N, 1e-5f, &err),
			 STRATA_OK);
	assert_memory_equal(got, want, sizeof got);
	float scratch[DIM], exact[DIM];
	const float *out = NULL;
	strata_block_decode(STRATA_BLOCK_F16, wh, exact, DIM);
	assert_int_equal(strata_kernel_as_f32(
				 c, &(strata_weight){STRATA_WEIGHT_F16, wh, 1, DIM},
				 scratch, &out, &err),
			 STRATA_OK);
	assert_ptr_equal(out, scratch);
	assert_memory_equal(scratch, exact, sizeof exact);
	strata_free(x);
	strata_compute_destroy(c);
}

static void test_rope_rotate_half_layout(void **state)
{
	(void)state;
	check_rope(STRATA_ROPE_HALF);
}

static void test_rope_interleaved_layout(void **state)
{
	(void)state;
	check_rope(STRATA_ROPE_INTERLEAVED);
}

/* Attention of query rows [pos0, pos0+n) against a cache of pos0+n
 * positions, checked by the textbook softmax in double. */
static void check_attention(uint32_t n, uint32_t pos0, uint32_t heads,
			    uint32_t kv_heads, uint32_t d, uint32_t window)
{
	strata_compute *c = make(3);
	uint32_t total = pos0 + n;
	float *q = rand_buf(n * heads * d);
	float *k = rand_buf(total * kv_heads * d);
	float *v = rand_buf(total * kv_heads * d);
	float *out = rand_buf(n * heads * d);
	strata_attention_shape s = {.n = n, .pos0 = pos0, .heads = heads,
				    .kv_heads = kv_heads, .head_dim = d,
				    .window = window,
				    .scale = 1.0f / sqrtf((float)d)};
	strata_error err;
	assert_int_equal(strata_kernel_attention(c, out, q, k, v, &s, &err),
			 STRATA_OK);
	double *sc = calloc(total, sizeof *sc);
	assert_non_null(sc);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < heads; h++) {
			uint32_t p = pos0 + i, g = h / (heads / kv_heads);
			uint32_t first = window && p + 1 > window
						 ? p + 1 - window : 0;
			double mx = -INFINITY, sum = 0;
			for (uint32_t t = first; t <= p; t++) {
				double dot = 0;
				for (uint32_t e = 0; e < d; e++)
					dot += (double)q[(i * heads + h) * d +
							 e] *
					       k[(t * kv_heads + g) * d + e];
				sc[t] = dot / sqrt((double)d);
				if (sc[t] > mx)
					mx = sc[t];
			}
			for (uint32_t t = first; t <= p; t++)
				sum += (sc[t] = exp(sc[t] - mx));
			for (uint32_t e = 0; e < d; e++) {
				double o = 0;
				for (uint32_t t = first; t <= p; t++)
					o += sc[t] / sum *
					     v[(t * kv_heads + g) * d + e];
				assert_close(out[(i * heads + h) * d + e], o,
					     1e-5);
			}
		}
	free(sc);
	strata_free(q);
	strata_free(k);
	strata_free(v);
	strata_free(out);
	strata_compute_destroy(c);
}

static void test_attention_causal_gqa(void **state)
{
	(void)state;
	check_attention(12, 0, 6, 6, 8, 0);   /* ratio 1, prefill */
	check_attention(12, 0, 6, 3, 8, 0);   /* ratio 2 */
	check_attention(9, 0, 8, 2, 16, 0);   /* ratio 4 */
	check_attention(1, 30, 4, 1, 8, 0);   /* decode, ratio 4 */
	check_attention(4, 20, 6, 2, 8, 0);   /* chunk after a prefix */
}

/* Long contexts: many key tiles, a last tile cut short, groups larger
 * than the kernel takes at once (20 query heads on one kv head). */
static void test_attention_long_context_tiled(void **state)
{
	(void)state;
	check_attention(3, 1000, 8, 2, 64, 0);	/* decode-like, 16 tiles */
	check_attention(130, 0, 4, 4, 32, 0);	/* prefill over 3 tiles */
	check_attention(5, 200, 20, 1, 16, 0);	/* group of 20 in 2 parts */
	check_attention(40, 500, 8, 4, 32, 150); /* window over tiles */
}

/* Chunked prefill gives the bits of one pass: attention of 300 queries in
 * one call against the same in chunks of 37 (each over the cache up to
 * its own end), element for element. */
static void test_attention_chunked_equals_one_pass(void **state)
{
	(void)state;
	strata_compute *c = make(3);
	const uint32_t n = 300, heads = 8, kv = 2, d = 32;
	float *q = rand_buf(n * heads * d), *k = rand_buf(n * kv * d);
	float *v = rand_buf(n * kv * d), *one = rand_buf(n * heads * d);
	float *chunked = rand_buf(n * heads * d);
	strata_attention_shape s = {.n = n, .heads = heads, .kv_heads = kv,
				    .head_dim = d,
				    .scale = 1.0f / sqrtf((float)d)};
	strata_error err;
	assert_int_equal(strata_kernel_attention(c, one, q, k, v, &s, &err),
			 STRATA_OK);
	for (uint32_t at = 0; at < n; at += 37) {
		s.pos0 = at;
		s.n = n - at < 37 ? n - at : 37;
		assert_int_equal(strata_kernel_attention(
					 c, chunked + (size_t)at * heads * d,
					 q + (size_t)at * heads * d, k, v, &s,
					 &err),
				 STRATA_OK);
	}
	assert_memory_equal(one, chunked, (size_t)n * heads * d * sizeof *one);
	strata_free(q);
	strata_free(k);
	strata_free(v);
	strata_free(one);
	strata_free(chunked);
	strata_compute_destroy(c);
}

static void test_attention_sliding_window(void **state)
{
	(void)state;
	check_attention(12, 0, 6, 2, 8, 5);
	check_attention(1, 40, 4, 2, 8, 4);
	check_attention(6, 10, 4, 4, 8, 1); /* window 1: only itself */
	check_attention(3, 0, 4, 4, 8, 100); /* window wider than context */
}

static void test_swiglu_add_embed(void **state)
{
	(void)state;
	strata_compute *c = make(2);
	const uint64_t count = 40000; /* several chunks */
	float *g = rand_buf(count), *u = rand_buf(count), *g0 = rand_buf(count);
	memcpy(g0, g, count * sizeof *g);
	strata_error err;
	assert_int_equal(strata_kernel_swiglu(c, g, u, count, &err), STRATA_OK);
	for (uint64_t i = 0; i < count; i++)
		assert_close(g[i], g0[i] / (1.0 + exp(-(double)g0[i])) * u[i],
			     1e-6);
	memcpy(g0, g, count * sizeof *g);
	assert_int_equal(strata_kernel_add(c, g, u, count, &err), STRATA_OK);
	for (uint64_t i = 0; i < count; i++)
		assert_true(g[i] == g0[i] + u[i]);

	float *table = rand_buf(10 * 6), *x = rand_buf(3 * 6);
	int32_t ids[3] = {9, 0, 4};
	assert_int_equal(strata_kernel_embed(c, x,
					     &(strata_weight){STRATA_WEIGHT_F32,
							      table, 10, 6},
					     ids, 3, &err),
			 STRATA_OK);
	for (int i = 0; i < 3; i++)
		assert_memory_equal(x + i * 6, table + ids[i] * 6,
				    6 * sizeof *x);
	int32_t bad[2] = {3, 10};
	assert_int_equal(strata_kernel_embed(c, x,
					     &(strata_weight){STRATA_WEIGHT_F32,
							      table, 10, 6},
					     bad, 2, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "token 10"));
	strata_free(g);
	strata_free(u);
	strata_free(g0);
	strata_free(table);
	strata_free(x);
	strata_compute_destroy(c);
}

/* scatter_add equals the scale-then-add a row at a time it replaces (a
 * compute without the op runs exactly that), bit for bit, over rows in
 * any order; a row outside x is refused. */
static void test_scatter_add_equals_scale_then_add(void **state)
{
	(void)state;
	strata_compute *c = make(2);
	const uint32_t rows = 37, dim = 70, m = 23;
	float *x = rand_buf((size_t)rows * dim), *want = rand_buf((size_t)rows * dim);
	float *y = rand_buf((size_t)m * dim), *y2 = rand_buf((size_t)m * dim);
	memcpy(want, x, (size_t)rows * dim * sizeof *x);
	memcpy(y2, y, (size_t)m * dim * sizeof *y);
	int32_t ids[23];
	float w[23];
	for (uint32_t i = 0; i < m; i++) {
		ids[i] = (int32_t)((i * 29u + 5u) % rows); /* distinct */
		w[i] = frand();
	}
	strata_error err;
	assert_int_equal(strata_kernel_scatter_add(c, x, rows, y, ids, w, m, dim, &err),
			 STRATA_OK);
	strata_kernel_ops plain = strata_cpu_kernel_ops;
	plain.scatter_add = NULL; /* the wrapper's own fallback */
	strata_compute *f = NULL;
	assert_int_equal(strata_compute_create(&plain, 2, &f, &err), STRATA_OK);
	assert_int_equal(strata_kernel_scatter_add(f, want, rows, y2, ids, w, m, dim, &err),
			 STRATA_OK);
	assert_memory_equal(x, want, (size_t)rows * dim * sizeof *x);
	ids[4] = (int32_t)rows;
	assert_int_equal(strata_kernel_scatter_add(c, x, rows, y, ids, w, m, dim, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "outside x's 37 rows"));
	strata_compute_destroy(f);
	strata_free(x), strata_free(want), strata_free(y), strata_free(y2);
	strata_compute_destroy(c);
}

static void test_wrappers_reject_bad_shapes(void **state)
{
	(void)state;
	strata_compute *c = make(1);
	float buf[64] = {0}, w[64] = {0};
	strata_error err;
	strata_attention_shape s = {.n = 1, .heads = 6, .kv_heads = 4,
				    .head_dim = 8, .scale = 1};
	assert_int_equal(strata_kernel_attention(c, buf, buf, buf, buf, &s,
						 &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "6 query heads"));
	assert_int_equal(strata_kernel_matmul(
				 c, buf, buf,
				 &(strata_weight){STRATA_WEIGHT_F32, w, 8, 8},
				 NULL, 1, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_kernel_matmul(
				 c, buf, w,
				 &(strata_weight){STRATA_WEIGHT_F32, w, 8, 8},
				 NULL, 0, &err),
			 STRATA_E_INVALID_ARG);
	float inv[4] = {1, 1, 1, 1};
	assert_int_equal(strata_kernel_rope(c, buf, 1, 0, 1, 7, inv,
					    STRATA_ROPE_HALF, &err),
			 STRATA_E_INVALID_ARG);
	assert_string_equal(strata_rope_layout_name(STRATA_ROPE_INTERLEAVED),
			    "interleaved");
	assert_string_equal(strata_rope_layout_name((strata_rope_layout)9),
			    "unknown");
	strata_compute_destroy(c);
}

static void test_compute_create_survives_oom(void **state)
{
	(void)state;
	for (long n = 0;; n++) {
		strata_compute *c = NULL;
		strata_error err;
		strata_alloc_fail_after(n);
		strata_status st = strata_compute_create(&strata_cpu_kernel_ops,
							 3, &c, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK) {
			assert_int_equal(strata_compute_threads(c), 3);
			strata_compute_destroy(c);
			break;
		}
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_null(c);
		assert_true(n < 10);
	}
}

static void test_cpu_backend_offers_its_kernels(void **state)
{
	(void)state;
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	strata_error err;
	assert_int_equal(strata_backend_cpu_create(NULL, &b, &err), STRATA_OK);
	assert_int_equal(strata_compute_create_on(b, 2, &c, &err), STRATA_OK);
	assert_string_equal(c->ops->name, "cpu");
	float x[3] = {1, 2, 3}, w[6] = {1, 0, 0, 0, 1, 1}, y[2];
	assert_int_equal(strata_kernel_matmul(
				 c, y, x,
				 &(strata_weight){STRATA_WEIGHT_F32, w, 2, 3},
				 NULL, 1, &err),
			 STRATA_OK);
	assert_true(y[0] == 1.0f && y[1] == 5.0f);
	strata_compute_destroy(c);
	strata_backend_destroy(b);
}

/* The pool runs every task of every job exactly once, also when more
 * threads than processors leave workers asleep through whole jobs. */
#include "backend/cpu/kernels_internal.h"

typedef struct pool_probe {
	uint32_t *hits;
	uint32_t job;
} pool_probe;

static void probe_task(void *arg, uint32_t t)
{
	pool_probe *p = arg;
	__atomic_add_fetch(&p->hits[t], p->job, __ATOMIC_RELAXED);
}

static void test_pool_runs_each_task_once(void **state)
{
	(void)state;
	strata__pool *pool;
	strata_error err;
	assert_int_equal(strata__pool_create(6, &pool, &err), STRATA_OK);
	uint32_t hits[64];
	for (uint32_t job = 1; job <= 20000; job++) {
		uint32_t n = 1 + (job * 2654435761u >> 7) % 64;
		memset(hits, 0, sizeof hits);
		pool_probe pr = {hits, job};
		strata__pool_run(pool, probe_task, &pr, n);
		for (uint32_t t = 0; t < n; t++)
			if (hits[t] != job)
				fail_msg("job %u task %u ran %u/%u", job, t,
					 hits[t], job);
	}
	strata__pool_destroy(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matmul_matches_reference_on_odd_shapes),
		cmocka_unit_test(test_matmul_bits_do_not_depend_on_threads),
		cmocka_unit_test(test_rmsnorm_matches_reference),
		cmocka_unit_test(test_half_norms_and_vectors),
		cmocka_unit_test(test_rope_rotate_half_layout),
		cmocka_unit_test(test_rope_interleaved_layout),
		cmocka_unit_test(test_attention_causal_gqa),
		cmocka_unit_test(test_attention_long_context_tiled),
		cmocka_unit_test(test_attention_chunked_equals_one_pass),
		cmocka_unit_test(test_attention_sliding_window),
		cmocka_unit_test(test_swiglu_add_embed),
		cmocka_unit_test(test_scatter_add_equals_scale_then_add),
		cmocka_unit_test(test_wrappers_reject_bad_shapes),
		cmocka_unit_test(test_compute_create_survives_oom),
		cmocka_unit_test(test_cpu_backend_offers_its_kernels),
		cmocka_unit_test(test_pool_runs_each_task_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
