/* calibrate_layer.c - the CPU's rate over a whole decode layer, per stored
 * type: a llama layer of the shape the project measures (hidden 4096, GQA
 * 32/8 of 128, FFN 14336; halved until it fits 4x the calibration's
 * bytes, so small calibrations stay small) run one token at a time through the kernel
 * table's wrappers in the forward pass's order (q/k/v with the norm
 * folded in, rope, attention over the cache, the output product added to
 * the residual, gate/up with the norm and SwiGLU, down added), weight
 * bytes over seconds (layer: plan).
 *
 * Why not the GEMV rate: a layer is seven products of very different
 * sizes and the steps between them, each a job of the CPU's pool that
 * ends when its slowest thread does. On the GPU machine's 16 cores a
 * whole decode read its weights at 0.86 of the bf16 GEMV's rate, and the
 * plan, pricing CPU units at the GEMV's, predicted 48.5 ms where 60.2 ms
 * was measured. The layer rate carries those costs in it; the plan prices
 * CPU units with it (cost.c, docs/plan.md "Cost model").
 *
 * The forward pass (infer) is a later layer than plan, so this composes
 * the same wrappers the pass calls rather than calling the pass; the pass
 * adds nothing per layer on the CPU but the weight source's acquire.
 * Each measure is the best of `repeats` runs over copies of the layer
 * (as many as fill the calibration's bytes, beyond the caches, as the
 * GEMV's matrix is). */
#include <math.h>
#include <string.h>
#include <time.h>

#include "plan/internal.h"
#include "strata/backend.h"

#define DIM_MAX 4096u	/* hidden; heads of HEAD_DIM, a quarter as kv heads */
#define DIM_MIN 512u
#define HEAD_DIM 128u
#define POSITIONS 64u	/* keys attended: a short decode context */

/* The seven weights of a layer, in the order they are laid out. */
enum { WQ, WK, WV, WO, WGATE, WUP, WDOWN, WEIGHTS };

/* A layer's shape (ffn = 3.5 dim, 14336 at 4096) and activations (f32). */
typedef struct layer_bufs {
	uint32_t dim, kv_dim, ffn, heads;
	uint32_t rows[WEIGHTS], cols[WEIGHTS];
	float *x, *xb, *q, *att, *hb, *hb2, *kc, *vc, *norm, *inv_freq;
} layer_bufs;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rows_bytes(strata_block_type t, uint32_t rows, uint32_t cols)
{
	return (uint64_t)rows * (cols / strata_block_elements(t)) *
	       strata_block_bytes(t);
}

static void shape(layer_bufs *b, uint32_t dim)
{
	b->dim = dim, b->kv_dim = dim / 4, b->ffn = dim / 2 * 7;
	b->heads = dim / HEAD_DIM;
	const uint32_t rows[WEIGHTS] = {dim, b->kv_dim, b->kv_dim, dim,
					b->ffn, b->ffn, dim};
	for (int i = 0; i < WEIGHTS; i++) {
		b->rows[i] = rows[i];
		b->cols[i] = i == WDOWN ? b->ffn : dim;
	}
}

static uint64_t layer_bytes(const layer_bufs *b, strata_block_type t)
{
	uint64_t n = 0;
	for (int i = 0; i < WEIGHTS; i++)
		n += rows_bytes(t, b->rows[i], b->cols[i]);
	return n;
}

/* Small finite values, one row encoded then copied into each row (the
 * speed of the products does not depend on the values). */
static void fill_rows(strata_block_type t, unsigned char *dst, uint32_t rows,
		      uint32_t cols, float *tmp)
{
	for (uint32_t i = 0; i < cols; i++)
		tmp[i] = ((float)((i * 37u) % 17u) - 8.0f) * 1e-3f;
	uint64_t rb = rows_bytes(t, 1, cols);
	strata_block_encode(t, tmp, dst, cols); /* finite: cannot fail */
	for (uint32_t r = 1; r < rows; r++)
		memcpy(dst + r * rb, dst, rb);
}

static void fill_f32(float *v, uint64_t n, float scale)
{
	for (uint64_t i = 0; i < n; i++)
		v[i] = (float)((i * 13u) % 11u) * scale;
}

/* One decode step of the layer at w (type wt), the forward pass's calls. */
static strata_status step(strata_compute *c, const layer_bufs *b,
			  const unsigned char *w, strata_weight_type wt,
			  strata_error *err)
{
	strata_block_type bt = strata_weight_type_block(wt);
	strata_weight m[WEIGHTS];
	for (int i = 0; i < WEIGHTS; i++) {
		m[i] = (strata_weight){wt, w, b->rows[i], b->cols[i]};
		w += rows_bytes(bt, b->rows[i], b->cols[i]);
	}
	const uint32_t pos = POSITIONS - 1, kvh = b->heads / 4;
	float *k = b->kc + (uint64_t)pos * b->kv_dim;
	float *v = b->vc + (uint64_t)pos * b->kv_dim;
	const strata_kernel_norm norm = {strata_weight_f32(b->norm, 1, b->dim),
					 1e-5f};
	const strata_kernel_product qkv[] = {
		{b->q, m[WQ], NULL}, {k, m[WK], NULL}, {v, m[WV], NULL}};
	const strata_kernel_product o = {b->x, m[WO], NULL};
	const strata_kernel_product down = {b->x, m[WDOWN], NULL};
	const strata_attention_shape shape = {
		.n = 1, .pos0 = pos, .heads = b->heads, .kv_heads = kvh,
		.head_dim = HEAD_DIM, .scale = 1.0f / sqrtf((float)HEAD_DIM)};
	fill_f32(b->x, b->dim, 1e-2f); /* the same residual each step */
	strata_status s;
	if ((s = strata_kernel_products(c, b->x, &norm, b->xb, 1, qkv, 3, false,
					NULL, err)) ||
	    (s = strata_kernel_rope_qk(c, b->q, k, 1, pos, b->heads, kvh,
				       HEAD_DIM, b->inv_freq, STRATA_ROPE_HALF,
				       err)) ||
	    (s = strata_kernel_attention(c, b->att, b->q, b->kc, b->vc, &shape,
					 err)) ||
	    (s = strata_kernel_products(c, b->att, NULL, NULL, 1, &o, 1, true,
					b->xb, err)) ||
	    (s = strata_kernel_gated(c, b->hb, b->x, &norm, b->xb, &m[WGATE],
				     &m[WUP], b->hb2, 1, err)))
		return s;
	return strata_kernel_products(c, b->hb, NULL, NULL, 1, &down, 1, true,
				      b->hb2, err);
}

static void bufs_free(layer_bufs *b)
{
	float **f[] = {&b->x, &b->xb, &b->q, &b->att, &b->hb, &b->hb2,
		       &b->kc, &b->vc, &b->norm, &b->inv_freq};
	for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
		strata_free(*f[i]);
		*f[i] = NULL;
	}
}

/* The activations of the shape b holds (b's buffers NULL before). */
static strata_status bufs_alloc(layer_bufs *b, strata_error *err)
{
	const uint64_t cache = (uint64_t)POSITIONS * b->kv_dim;
	const uint64_t dim = b->dim, ffn = b->ffn;
	b->x = strata_alloc(dim * 4), b->xb = strata_alloc(ffn * 4);
	b->q = strata_alloc(dim * 4), b->att = strata_alloc(dim * 4);
	b->hb = strata_alloc(ffn * 4), b->hb2 = strata_alloc(ffn * 4);
	b->kc = strata_alloc(cache * 4), b->vc = strata_alloc(cache * 4);
	b->norm = strata_alloc(dim * 4);
	b->inv_freq = strata_alloc(HEAD_DIM / 2 * 4);
	if (!b->x || !b->xb || !b->q || !b->att || !b->hb || !b->hb2 ||
	    !b->kc || !b->vc || !b->norm || !b->inv_freq) {
		bufs_free(b);
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "calibrate: no memory for a decode layer's "
				   "activations");
	}
	fill_f32(b->kc, cache, 1e-2f);
	fill_f32(b->vc, cache, 1e-2f);
	fill_f32(b->norm, dim, 0.1f);
	for (uint32_t i = 0; i < HEAD_DIM / 2; i++)
		b->inv_freq[i] = powf(10000.0f, -2.0f * (float)i / HEAD_DIM);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata__plan_calibrate_layer(strata_compute *c,
					   strata_block_type t, uint64_t bytes,
					   uint32_t repeats, double *out,
					   strata_error *err)
{
	strata_weight_type wt = STRATA_WEIGHT_TYPE_COUNT;
	for (int w = 0; w < STRATA_WEIGHT_TYPE_COUNT; w++)
		if (strata_weight_type_block((strata_weight_type)w) == t)
			wt = (strata_weight_type)w;
	layer_bufs b;
	memset(&b, 0, sizeof b);
	uint32_t dim = DIM_MAX;
	for (shape(&b, dim); dim > DIM_MIN && layer_bytes(&b, t) > 4 * bytes;
	     shape(&b, dim))
		dim /= 2;
	uint64_t lb = layer_bytes(&b, t);
	uint64_t copies = (bytes + lb - 1) / lb;
	strata_status s = bufs_alloc(&b, err);
	if (s)
		return s;
	unsigned char *w = strata_alloc_aligned(64, (size_t)(lb * copies));
	if (!w) {
		bufs_free(&b);
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "calibrate: no memory for %llu bytes of %s "
				   "decode layers",
				   (unsigned long long)(lb * copies),
				   strata_block_name(t));
	}
	unsigned char *at = w;
	for (uint64_t k = 0; k < copies; k++)
		for (int i = 0; i < WEIGHTS; i++) {
			fill_rows(t, at, b.rows[i], b.cols[i], b.hb2);
			at += rows_bytes(t, b.rows[i], b.cols[i]);
		}
	double best = 0;
	for (uint32_t r = 0; r <= repeats && s == STRATA_OK; r++) {
		double t0 = now();
		for (uint64_t k = 0; k < copies && s == STRATA_OK; k++)
			s = step(c, &b, w + k * lb, wt, err);
		if (s == STRATA_OK)
			s = strata_compute_finish(c, err);
		double sec = now() - t0;
		if (s == STRATA_OK && r > 0 && (best == 0 || sec < best))
			best = sec; /* run 0 warms up */
	}
	if (s == STRATA_OK)
		*out = (double)(lb * copies) / best;
	else
		strata_error_prefix(err, "%s decode layer", strata_block_name(t));
	strata_free(w);
	bufs_free(&b);
	return s;
}
