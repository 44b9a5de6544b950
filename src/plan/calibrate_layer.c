/* calibrate_layer.c - the time of a whole layer, per stored type, on any
 * backend: a llama layer of the shape the project measures (hidden 4096,
 * GQA 32/8 of 128, FFN 14336; halved until it fits 4x the calibration's
 * bytes, so small calibrations stay small) run through the kernel
 * table's wrappers in the forward pass's order (q/k/v with the norm
 * folded in, rope, attention over the cache, the output product added to
 * the residual, gate/up with the norm and SwiGLU, down added), one token
 * (a decode step over a short cache) or a chunk of rows from position 0
 * (a prefill chunk), its weights and activations in the backend's own
 * memory (layer: plan).
 *
 * On the CPU the decode gives the CPU's decode-layer rate (weight bytes
 * over seconds); on a device, calibrate.c subtracts the layer's products
 * priced at the type's measured rates and keeps the rest, the layer's
 * fixed costs (docs/plan.md "Cost model", issue 17: the H200 decoded the
 * resident Q8_0 llama 0.39 ms a token slower than its products).
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
/* Layer passes a timed run queues at least (cycling over the copies):
 * a device's one wait at the end then weighs little against them. */
#define MIN_STEPS 8u
/* A fixed cost measured at or below 0 (the layer's products ran faster
 * than the type's measured rates): written as this, "measured, none". */
#define FIXED_FLOOR_S 1e-9

/* The seven weights of a layer, in the order they are laid out. */
enum { WQ, WK, WV, WO, WGATE, WUP, WDOWN, WEIGHTS };

/* A layer's shape (ffn = 3.5 dim, 14336 at 4096), its rows (1: decode;
 * else a prefill chunk from position 0) and activations (f32, in the
 * backend's memory): x, q, att (rows, dim); xb, hb, hb2 (rows, ffn); the
 * cache kc, vc (positions, kv_dim); norm (dim); inv_freq (HEAD_DIM / 2). */
typedef struct layer_bufs {
	uint32_t dim, kv_dim, ffn, heads, n, positions;
	uint32_t rows[WEIGHTS], cols[WEIGHTS];
	strata_arena *arena;
	float *x, *xb, *q, *att, *hb, *hb2, *kc, *vc, *norm, *inv_freq;
	float *host; /* (max(rows x ffn, positions x kv_dim)) staging */
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

/* One pass of the layer at w (type wt) over b's rows, the forward pass's
 * calls (forward.c attention_block, forward_blocks.c mlp). */
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
	const uint32_t n = b->n, pos = b->positions - n, kvh = b->heads / 4;
	float *k = b->kc + (uint64_t)pos * b->kv_dim;
	float *v = b->vc + (uint64_t)pos * b->kv_dim;
	const strata_kernel_norm norm = {strata_weight_f32(b->norm, 1, b->dim),
					 1e-5f};
	const strata_kernel_product qkv[] = {
		{b->q, m[WQ], NULL}, {k, m[WK], NULL}, {v, m[WV], NULL}};
	const strata_kernel_product o = {b->x, m[WO], NULL};
	const strata_kernel_product down = {b->x, m[WDOWN], NULL};
	const strata_attention_shape shape = {
		.n = n, .pos0 = pos, .heads = b->heads, .kv_heads = kvh,
		.head_dim = HEAD_DIM, .scale = 1.0f / sqrtf((float)HEAD_DIM)};
	strata_status s;
	if ((s = strata_kernel_products(c, b->x, &norm, b->xb, n, qkv, 3, false,
					NULL, err)) ||
	    (s = strata_kernel_rope_qk(c, b->q, k, n, pos, b->heads, kvh,
				       HEAD_DIM, b->inv_freq, STRATA_ROPE_HALF,
				       err)) ||
	    (s = strata_kernel_attention(c, b->att, b->q, b->kc, b->vc, &shape,
					 err)) ||
	    (s = strata_kernel_products(c, b->att, NULL, NULL, n, &o, 1, true,
					b->xb, err)) ||
	    (s = strata_kernel_gated(c, b->hb, b->x, &norm, b->xb, &m[WGATE],
				     &m[WUP], b->hb2, n, err)))
		return s;
	return strata_kernel_products(c, b->hb, NULL, NULL, n, &down, 1, true,
				      b->hb2, err);
}

static void bufs_free(layer_bufs *b)
{
	strata_arena_destroy(b->arena);
	strata_free(b->host);
	b->arena = NULL;
	b->host = NULL;
}

/* Uploads `count` floats of fill_f32(scale) to dst. */
static strata_status put_f32(strata_compute *c, layer_bufs *b, float *dst,
			     uint64_t count, float scale, strata_error *err)
{
	fill_f32(b->host, count, scale);
	strata_status s = strata_compute_upload(c, dst, b->host, count * 4, err);
	return s ? s : strata_compute_finish(c, err);
}

/* The arena (weights of `wbytes`, then the activations) and the staging
 * of the shape b holds. */
static strata_status bufs_alloc(strata_backend *be, strata_compute *c,
				layer_bufs *b, uint64_t wbytes, void **w,
				strata_error *err)
{
	const uint64_t n = b->n, dim = b->dim, ffn = b->ffn;
	const uint64_t cache = (uint64_t)b->positions * b->kv_dim;
	const uint64_t len[] = {n * dim, n * ffn, n * dim, n * dim, n * ffn,
				n * ffn, cache, cache, dim, HEAD_DIM / 2};
	float **at[] = {&b->x, &b->xb, &b->q, &b->att, &b->hb, &b->hb2,
			&b->kc, &b->vc, &b->norm, &b->inv_freq};
	const size_t count = sizeof len / sizeof *len;
	uint64_t cap = wbytes + (count + 2) * STRATA_ALIGN;
	for (size_t i = 0; i < count; i++)
		cap += len[i] * 4;
	uint64_t stage = n * ffn > cache ? n * ffn : cache;
	b->host = strata_alloc((size_t)(stage < ffn ? ffn : stage) * 4);
	if (!b->host)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "calibrate: no memory for a layer's staging");
	strata_status s = strata_arena_create(be, STRATA_ARENA_DEVICE, cap,
					      "calibration layer", &b->arena,
					      err);
	if (s == STRATA_OK)
		s = strata_arena_alloc(b->arena, wbytes, w, err);
	for (size_t i = 0; i < count && s == STRATA_OK; i++)
		s = strata_arena_alloc(b->arena, len[i] * 4, (void **)at[i],
				       err);
	if (s == STRATA_OK)
		s = put_f32(c, b, b->kc, cache, 1e-2f, err);
	if (s == STRATA_OK)
		s = put_f32(c, b, b->vc, cache, 1e-2f, err);
	if (s == STRATA_OK)
		s = put_f32(c, b, b->norm, dim, 0.1f, err);
	if (s == STRATA_OK) {
		for (uint32_t i = 0; i < HEAD_DIM / 2; i++)
			b->host[i] = powf(10000.0f, -2.0f * (float)i / HEAD_DIM);
		s = strata_compute_upload(c, b->inv_freq, b->host,
					  HEAD_DIM / 2 * 4, err);
	}
	if (s == STRATA_OK)
		s = strata_compute_finish(c, err);
	if (s != STRATA_OK)
		bufs_free(b);
	return s;
}

/* Copies of the layer's weights (type t, lb bytes each) at w: one copy
 * encoded on the host, uploaded into each. */
static strata_status put_weights(strata_compute *c, layer_bufs *b,
				 strata_block_type t, unsigned char *w,
				 uint64_t lb, uint64_t copies,
				 strata_error *err)
{
	unsigned char *one = strata_alloc((size_t)lb);
	if (!one)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "calibrate: no memory for %llu bytes of a "
				   "%s layer",
				   (unsigned long long)lb, strata_block_name(t));
	unsigned char *at = one;
	for (int i = 0; i < WEIGHTS; i++) {
		fill_rows(t, at, b->rows[i], b->cols[i], b->host);
		at += rows_bytes(t, b->rows[i], b->cols[i]);
	}
	strata_status s = STRATA_OK;
	for (uint64_t k = 0; k < copies && s == STRATA_OK; k++)
		s = strata_compute_upload(c, w + k * lb, one, lb, err);
	if (s == STRATA_OK)
		s = strata_compute_finish(c, err);
	strata_free(one);
	return s;
}

/* ------------------------------------------------------------------------ */

strata_status strata__plan_calibrate_layer(strata_backend *be,
					   strata_compute *c,
					   strata_block_type t, uint64_t bytes,
					   uint32_t rows, uint32_t repeats,
					   strata__plan_layer_time *out,
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
	b.n = rows ? rows : 1;
	b.positions = b.n == 1 ? POSITIONS : b.n;
	uint64_t lb = layer_bytes(&b, t);
	uint64_t copies = (bytes + lb - 1) / lb;
	uint64_t steps = copies > MIN_STEPS ? copies : MIN_STEPS;
	unsigned char *w = NULL;
	strata_status s = bufs_alloc(be, c, &b, lb * copies, (void **)&w, err);
	if (s == STRATA_OK)
		s = put_weights(c, &b, t, w, lb, copies, err);
	double best = 0;
	for (uint32_t r = 0; r <= repeats && s == STRATA_OK; r++) {
		/* the same residual each run (the steps add to it) */
		s = put_f32(c, &b, b.x, (uint64_t)b.n * b.dim, 1e-2f, err);
		double t0 = now();
		for (uint64_t k = 0; k < steps && s == STRATA_OK; k++)
			s = step(c, &b, w + (k % copies) * lb, wt, err);
		if (s == STRATA_OK)
			s = strata_compute_finish(c, err);
		double sec = now() - t0;
		if (s == STRATA_OK && r > 0 && (best == 0 || sec < best))
			best = sec; /* run 0 warms up */
	}
	if (s == STRATA_OK) {
		double elements = 0;
		for (int i = 0; i < WEIGHTS; i++)
			elements += (double)b.rows[i] * b.cols[i];
		*out = (strata__plan_layer_time){
			.seconds = best / (double)steps, .bytes = lb,
			.elements = elements, .dim = b.dim, .rows = b.n};
	} else if (err) {
		strata_error_prefix(err, "%s layer of %u rows",
				    strata_block_name(t), b.n);
	}
	bufs_free(&b);
	return s;
}

void strata__plan_layer_fixed(const strata__plan_layer_time *decode,
			      const strata__plan_layer_time *prefill,
			      double gemv, double gemm, double *layer_seconds,
			      double *row_seconds)
{
	double d = decode->seconds - (double)decode->bytes / gemv;
	double l = d > FIXED_FLOOR_S ? d : FIXED_FLOOR_S;
	*layer_seconds = l;
	if (!prefill || !prefill->rows) {
		*row_seconds = 0;
		return;
	}
	double T = (double)prefill->rows;
	double products = (double)prefill->bytes / gemv;
	double dense = 2.0 * prefill->elements * T / gemm;
	double r = (prefill->seconds - (dense > products ? dense : products) -
		    l) / T;
	*row_seconds = r > FIXED_FLOOR_S / T ? r : FIXED_FLOOR_S / T;
}
