/* test_cuda_kernels_figures.c - figures, not parity: decode-shaped products
 * against the device's own copy rate, one decode layer step by step, decode
 * attention over a long cache (layer: backend tests).
 *
 * Tolerances: 1e-4 relative for f32 work (only the summation order
 * differs), 2e-2 for half-precision inputs (issue 8). Each case prints its
 * measured worst error. Skipped (77) where no CUDA device is present. */
#include "backend/kernels_fixture.h"

/* ------------------------------------------------------------------------ */
/* Figures: decode-shaped products against the device's own copy rate      */
/* ------------------------------------------------------------------------ */

/* Seconds per call of fn over `reps` calls on the compute stream. */
typedef void (*timed_fn)(void *arg);

static double time_on_stream(timed_fn fn, void *arg, int reps)
{
	strata_event *a = NULL, *b = NULL;
	OK(strata_event_create(F.b, &a, ERR));
	OK(strata_event_create(F.b, &b, ERR));
	fn(arg); /* warm-up */
	OK(strata_event_record(F.b, a, F.gs, ERR));
	for (int i = 0; i < reps; i++)
		fn(arg);
	OK(strata_event_record(F.b, b, F.gs, ERR));
	OK(strata_event_wait(F.b, b, ERR));
	double sec = 0;
	OK(strata_event_elapsed(F.b, a, b, &sec, ERR));
	strata_event_destroy(F.b, a);
	strata_event_destroy(F.b, b);
	return sec / reps;
}

typedef struct mm_arg {
	float *y;
	const float *x;
	const void *w;
	uint32_t n, in, out;
	int half; /* 0: f32 matmul slot, 1: bf16 */
	void *dst; /* d2d copy instead when set */
	uint64_t bytes;
} mm_arg;

static void run_mm(void *p)
{
	mm_arg *m = p;
	if (m->dst) {
		assert_int_equal(cudaMemcpyAsync(m->dst, m->w, m->bytes,
						 cudaMemcpyDeviceToDevice,
						 F.gs->cuda),
				 cudaSuccess);
	} else if (m->half) {
		OK(strata_cuda_matmul_half(F.gpu, m->y, m->x, m->w,
					   STRATA_CUDA_BF16, NULL, m->n, m->in,
					   m->out, ERR));
	} else {
		OK(strata_kernel_matmul(F.gpu, m->y, m->x, &(strata_weight){STRATA_WEIGHT_F32, m->w, m->out, m->in}, NULL, m->n, ERR));
	}
}

static void test_decode_products_reach_memory_bandwidth(void **state)
{
	(void)state;
	if (getenv("STRATA_CUDA_NO_TIMING"))
		skip(); /* under compute-sanitizer times mean nothing */
	const uint32_t in = 4096, out = 14336; /* a llama-8B MLP projection */
	const uint64_t w16 = (uint64_t)in * out * 2, w32 = w16 * 2;
	void *w = dev_alloc(w32), *dst = dev_alloc(w32);
	float *x = dev_alloc((uint64_t)8 * in * 4), *y = dev_alloc((uint64_t)8 * out * 4);
	assert_int_equal(cudaMemset(w, 0, w32), cudaSuccess);
	assert_int_equal(cudaMemset(x, 0, (uint64_t)8 * in * 4), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	/* device-to-device copy: reads and writes, so 2x bytes of traffic */
	mm_arg cp = {.w = w, .dst = dst, .bytes = w32};
	double t_copy = time_on_stream(run_mm, &cp, 10);
	double hbm = 2.0 * (double)w32 / t_copy;
	printf("  device-to-device copy: %.0f GB/s of traffic (the reference)\n", hbm / 1e9);
	const uint32_t dflt = F.gemv_default;
	for (uint32_t n = 1; n <= 8; n *= 2) {
		for (int path = 0; path < 2; path++) {
			strata__cuda_gemv_rows_max = path ? 0 : 8;
			mm_arg h = {.y = y, .x = x, .w = w, .n = n, .in = in,
				    .out = out, .half = 1};
			double t = time_on_stream(run_mm, &h, 20);
			double rate = (double)w16 / t;
			printf("  bf16 n=%u %ux%u %s: %.1f us, %.0f GB/s of weights, %.0f%% of the copy rate%s\n",
			       n, out, in, path ? "cublasGemmEx" : "GEMV kernel",
			       t * 1e6, rate / 1e9, 100.0 * rate / hbm,
			       (n <= dflt) == !path ? " (default)" : "");
			/* half of the copy rate is far below what a working
			 * GEMV does and far above what a broken one (no
			 * vector loads) does */
			if (n == 1 && !path)
				assert_true(rate > 0.5 * hbm);
		}
	}
	strata__cuda_gemv_rows_max = dflt;
	mm_arg f = {.y = y, .x = x, .w = w, .n = 1, .in = in, .out = out};
	double t = time_on_stream(run_mm, &f, 20);
	printf("  f32 cuBLAS n=1 %ux%u: %.1f us, %.0f GB/s of weights, %.0f%% of the copy rate\n",
	       out, in, t * 1e6, (double)w32 / t / 1e9, 100.0 * (double)w32 / t / hbm);
	dev_free_all();
	/* prefill: 128 rows through cublasGemmEx (bf16 in, f32 out) */
	w = dev_alloc(w16);
	x = dev_alloc((uint64_t)128 * in * 4);
	y = dev_alloc((uint64_t)128 * out * 4);
	assert_int_equal(cudaMemset(w, 0, w16), cudaSuccess);
	assert_int_equal(cudaMemset(x, 0, (uint64_t)128 * in * 4), cudaSuccess);
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	mm_arg g = {.y = y, .x = x, .w = w, .n = 128, .in = in, .out = out, .half = 1};
	t = time_on_stream(run_mm, &g, 20);
	printf("  bf16 GEMM n=128 %ux%u (with x conversion): %.1f us, %.1f TFLOP/s\n",
	       out, in, t * 1e6, 2.0 * 128 * in * (double)out / t / 1e12);
	dev_free_all();
}

typedef struct att_arg {
	float *out, *q, *k, *v;
	strata_attention_shape s;
} att_arg;

static void run_att(void *p)
{
	att_arg *a = p;
	OK(strata_kernel_attention(F.gpu, a->out, a->q, a->k, a->v, &a->s, ERR));
}

/* A figure only: each step of one decode layer of the 7.5 GB llama of
 * bench/gpu (dim 4096, ffn 14336, 32/8 heads of 128, bf16), timed alone,
 * and the layer's sum against its weights: where a decode token's time
 * goes besides reading the weights. */
typedef struct layer_arg {
	int step; /* one step, OUT_STEP, or WHOLE_LAYER */
	float *x, *xb, *q, *k, *v, *att, *hb, *logits, *inv_freq;
	void *wq, *wk, *wv, *wo, *wg, *wu, *wd, *wout, *norm;
	strata_attention_shape s;
} layer_arg;

#define LAYER_STEPS 6 /* the norms fold into the products after them */
#define OUT_STEP 6    /* the output product: vocab 32000 */
#define WHOLE_LAYER 9

static void run_layer_step(void *p)
{
	layer_arg *a = p;
	const uint32_t dim = 4096, ffn = 14336, kvd = 1024;
	const strata_cuda_half_norm norm = {a->norm, 1e-5f};
	switch (a->step) {
	case 0: {
		strata_cuda_half_part p[3] = {{a->q, a->wq, NULL, dim},
					      {a->k, a->wk, NULL, kvd},
					      {a->v, a->wv, NULL, kvd}};
		OK(strata_cuda_matmul_half_parts(F.gpu, a->x, &norm,
						 STRATA_CUDA_BF16, 1, dim, p, 3,
						 false, ERR));
		break;
	}
	case 1:
		OK(strata_cuda_rope_qk(F.gpu, a->q, a->k + 64 * 1024, 1,
				       a->s.pos0, 32, 8, 128, a->inv_freq,
				       STRATA_ROPE_HALF, ERR));
		break;
	case 2:
		OK(strata_kernel_attention(F.gpu, a->att, a->q, a->k, a->v,
					   &a->s, ERR));
		break;
	case 3: {
		strata_cuda_half_part p = {a->x, a->wo, NULL, dim};
		OK(strata_cuda_matmul_half_parts(F.gpu, a->att, NULL,
						 STRATA_CUDA_BF16, 1, dim, &p, 1,
						 true, ERR));
		break;
	}
	case 4:
		OK(strata_cuda_gated_half(F.gpu, a->hb, a->x, &norm, a->wg,
					  a->wu, STRATA_CUDA_BF16, dim, ffn,
					  ERR));
		break;
	case 5: {
		strata_cuda_half_part p = {a->x, a->wd, NULL, dim};
		OK(strata_cuda_matmul_half_parts(F.gpu, a->hb, NULL,
						 STRATA_CUDA_BF16, 1, ffn, &p, 1,
						 true, ERR));
		break;
	}
	case OUT_STEP:
		OK(strata_cuda_matmul_half(F.gpu, a->logits, a->xb, a->wout,
					   STRATA_CUDA_BF16, NULL, 1, dim,
					   32000, ERR));
		break;
	case WHOLE_LAYER:
		for (a->step = 0; a->step < LAYER_STEPS; a->step++)
			run_layer_step(a);
		a->step = WHOLE_LAYER;
		break;
	}
}

static void test_decode_layer_figure(void **state)
{
	(void)state;
	if (getenv("STRATA_CUDA_NO_TIMING"))
		skip();
	const uint32_t dim = 4096, ffn = 14336, kvd = 1024, pos = 64;
	const char *names[LAYER_STEPS + 1] = {
		"norm+q,k,v", "rope (q, k)", "attention", "o product +=",
		"norm+gate,up", "down product +=", "output product"};
	const uint64_t bytes[LAYER_STEPS + 1] = {
		(uint64_t)(dim + 2 * kvd) * dim * 2, 0, 0,
		(uint64_t)dim * dim * 2, (uint64_t)2 * ffn * dim * 2,
		(uint64_t)dim * ffn * 2, (uint64_t)32000 * dim * 2};
	layer_arg a = {
		.x = dev_alloc(dim * 4), .xb = dev_alloc(dim * 4),
		.q = dev_alloc(dim * 4), .att = dev_alloc(dim * 4),
		.k = dev_alloc((uint64_t)(pos + 1) * kvd * 4),
		.v = dev_alloc((uint64_t)(pos + 1) * kvd * 4),
		.hb = dev_alloc(ffn * 4), .logits = dev_alloc(32000 * 4),
		.inv_freq = dev_alloc(64 * 4), .norm = dev_alloc(dim * 2),
		.wq = dev_alloc((uint64_t)dim * dim * 2),
		.wk = dev_alloc((uint64_t)kvd * dim * 2),
		.wv = dev_alloc((uint64_t)kvd * dim * 2),
		.wo = dev_alloc((uint64_t)dim * dim * 2),
		.wg = dev_alloc((uint64_t)ffn * dim * 2),
		.wu = dev_alloc((uint64_t)ffn * dim * 2),
		.wd = dev_alloc((uint64_t)dim * ffn * 2),
		.wout = dev_alloc((uint64_t)32000 * dim * 2),
		.s = {.n = 1, .pos0 = pos, .heads = 32, .kv_heads = 8,
		      .head_dim = 128, .scale = 0.088f},
	};
	assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
	/* the products under each GEMV tuning, the shipped one first */
	const int unroll0 = strata__cuda_gemv_unroll;
	const int split0 = strata__cuda_gemv_split;
	const int tune[][2] = {{unroll0, split0}, {4, 1}, {8, 1}, {4, 2},
			       {8, 2}, {8, 4}};
	const int products[] = {0, 3, 4, 5, OUT_STEP};
	for (size_t t = 0; t < sizeof tune / sizeof *tune; t++) {
		strata__cuda_gemv_unroll = tune[t][0];
		strata__cuda_gemv_split = tune[t][1];
		char line[512];
		int len = snprintf(line, sizeof line, "  GEMV %d in flight, %d warps/row%s:",
				   tune[t][0], tune[t][1], t ? "" : " (default)");
		for (size_t i = 0; i < sizeof products / sizeof *products; i++) {
			a.step = products[i];
			double sec = time_on_stream(run_layer_step, &a, 50);
			len += snprintf(line + len, sizeof line - (size_t)len,
					" %s %.1f us %.0f GB/s;", names[a.step],
					sec * 1e6, bytes[a.step] / sec / 1e9);
		}
		a.step = WHOLE_LAYER;
		printf("%s layer back to back %.1f us\n", line,
		       time_on_stream(run_layer_step, &a, 50) * 1e6);
	}
	strata__cuda_gemv_unroll = unroll0;
	strata__cuda_gemv_split = split0;
	double total = 0;
	uint64_t weights = 0;
	for (int i = 0; i <= OUT_STEP; i++) {
		a.step = i;
		double t = time_on_stream(run_layer_step, &a, 50);
		if (i < LAYER_STEPS)
			total += t, weights += bytes[i];
		if (bytes[i])
			printf("  decode layer: %-16s %6.1f us, %4.0f GB/s\n",
			       names[i], t * 1e6, bytes[i] / t / 1e9);
		else
			printf("  decode layer: %-16s %6.1f us\n", names[i],
			       t * 1e6);
	}
	printf("  decode layer: the steps alone %.1f us, %.0f MB of weights at "
	       "%.0f GB/s over the sum\n", total * 1e6,
	       weights / 1e6, weights / total / 1e9);
	a.step = WHOLE_LAYER;
	double layer = time_on_stream(run_layer_step, &a, 50);
	printf("  decode layer: back to back %.1f us, %.0f GB/s of weights\n",
	       layer * 1e6, weights / layer / 1e9);
	dev_free_all();
}

/* A figure only: decode attention time over a long cache (llama-8B heads). */
static void test_decode_attention_figure(void **state)
{
	(void)state;
	if (getenv("STRATA_CUDA_NO_TIMING"))
		skip();
	const uint32_t heads = 32, kv = 8, hd = 128;
	for (uint32_t pos = 512; pos <= 8192; pos *= 4) {
		uint64_t cache = (uint64_t)(pos + 1) * kv * hd * 4;
		att_arg a = {.out = dev_alloc(heads * hd * 4),
			     .q = dev_alloc(heads * hd * 4),
			     .k = dev_alloc(cache), .v = dev_alloc(cache),
			     .s = {.n = 1, .pos0 = pos, .heads = heads,
				   .kv_heads = kv, .head_dim = hd,
				   .scale = 0.088f}};
		assert_int_equal(cudaMemset(a.q, 0, heads * hd * 4), cudaSuccess);
		assert_int_equal(cudaMemset(a.k, 0, cache), cudaSuccess);
		assert_int_equal(cudaMemset(a.v, 0, cache), cudaSuccess);
		assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
		const uint32_t dflt = strata__cuda_attention_blocks_per_sm;
		for (uint32_t per = 1; per <= 16; per *= 2) {
			strata__cuda_attention_blocks_per_sm = per;
			double t = time_on_stream(run_att, &a, 20);
			printf("  attention decode pos=%u h=%u/%u hd=%u, %2u blocks/SM: %.1f us, %.0f GB/s of cache%s\n",
			       pos, heads, kv, hd, per, t * 1e6,
			       2.0 * (double)cache / t / 1e9,
			       per == dflt ? " (default)" : "");
		}
		strata__cuda_attention_blocks_per_sm = dflt;
		dev_free_all();
	}
}

int main(void)
{
	if (gpu_skip_without_device("test_backend_cuda_kernels_figures"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_products_reach_memory_bandwidth),
		cmocka_unit_test(test_decode_attention_figure),
		cmocka_unit_test(test_decode_layer_figure),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
