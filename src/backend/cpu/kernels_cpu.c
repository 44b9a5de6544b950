/* kernels_cpu.c - the CPU backend's kernel table: kernels over a
 * persistent thread pool (layer: backend).
 *
 * The table takes every weight type: f32 products go to the f32 kernel,
 * the others (bf16, f16, the GGUF block types) to the stored product
 * (kernels_quant.c), which reads them as stored; an embedding row in a
 * stored type is decoded exactly; norms are f32, or half (bf16, f16) decoded
 * exactly as they are used (a norm in a block type is E_UNSUPPORTED).
 *
 * The fused slots (products, gated) take one row of activations on f32,
 * bf16 and f16 weights (a decode step; kernels_decode.c), and on the block
 * types in the Q8 decode mode (kernels_decode_q8.c), the norm folded
 * in: computed once on the calling thread onto its stack (rows of at most
 * FOLD_MAX, so a step allocates nothing), the same bits as the rmsnorm
 * kernel's. Everything else (prefill, block types under --precision
 * exact, the generic path) gets the wrappers' compositions of the plain
 * kernels. A mixture-of-experts layer's routed experts are one job
 * (kernels_experts.c) where every hit has a few rows. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels_internal.h"

/* The precision's decode path (strata_precision, docs/infer.md#precision):
 * FAST takes x quantized to 8 bits with integer dot products on the stored
 * blocks, as llama.cpp computes; EXACT takes f32 x against the exactly
 * decoded weights (the f32 product's bits). */
static strata_status cpu_compute_create(const strata_compute_options *o,
					void **ctx, strata_error *err)
{
	strata__pool *p;
	strata_status st = strata__pool_create(o->threads, &p, err);
	if (st == STRATA_OK) {
		strata__pool_set_decode_mode(p, o->precision ==
							STRATA_PRECISION_EXACT
						? STRATA__DECODE_EXACT
						: STRATA__DECODE_Q8);
		*ctx = p;
	}
	return st;
}

static void cpu_compute_destroy(void *ctx)
{
	strata__pool_destroy(ctx);
}

static uint32_t cpu_compute_threads(void *ctx)
{
	return strata__pool_threads(ctx);
}

static strata_status cpu_matmul(void *ctx, float *y, const float *x,
			       const strata_weight *w, const float *bias,
			       uint32_t n, strata_error *err)
{
	if (strata__cpu_decode_take(n, &w, 1)) { /* one row: kernels_decode.c */
		const strata_kernel_product p = {y, *w, bias};
		return strata__cpu_decode_products(ctx, x, &p, 1, false, err);
	}
	if (w->type == STRATA_WEIGHT_F32)
		return strata__cpu_matmul(ctx, y, x, w->data, bias, n,
					  w->cols, w->rows, err);
	strata_block_type bt = strata_weight_type_block(w->type);
	if (w->cols % strata_block_elements(bt))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the weight source; report it",
				   "matmul kernel: %u columns are not whole %s blocks",
				   w->cols, strata_block_name(bt));
	return strata__cpu_matmul_stored(ctx, y, x, w->data, bt, bias, n,
					 w->cols, w->rows, err);
}

static strata_status cpu_rmsnorm(void *ctx, float *y, const float *x,
				const strata_weight *w, uint32_t n, float eps,
				strata_error *err)
{
	if (w->type == STRATA_WEIGHT_F32)
		return strata__cpu_rmsnorm(ctx, y, x, w->data, n, w->cols, eps,
					   err);
	/* a half norm (the CPU computing a unit a CUDA run keeps as CUDA
	 * does, issue 17): decoded exactly, on the stack up to 16384 */
	strata_block_type bt = strata_weight_type_block(w->type);
	if (w->type != STRATA_WEIGHT_BF16 && w->type != STRATA_WEIGHT_F16)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "load norms as f32 or half (every strata weight source does)",
				   "rmsnorm kernel: the cpu kernels take no %s norm weights",
				   strata_weight_type_name(w->type));
	float local[16384];
	float *f32 = w->cols <= 16384 ? local
				      : strata_alloc_or_error((uint64_t)w->cols * sizeof(float),
							      "rmsnorm weight (f32)", err);
	if (!f32)
		return STRATA_E_NOMEM;
	strata_block_decode(bt, w->data, f32, w->cols);
	strata_status st = strata__cpu_rmsnorm(ctx, y, x, f32, n, w->cols, eps,
					       err);
	if (f32 != local)
		strata_free(f32);
	return st;
}

static strata_status cpu_embed(void *ctx, float *x, const strata_weight *table,
			      const int32_t *tokens, uint32_t n,
			      strata_error *err)
{
	if (table->type == STRATA_WEIGHT_F32)
		return strata__cpu_embed(ctx, x, table->data, tokens, n,
					 table->cols, err);
	/* a stored table: each row decoded exactly (the wrapper checked the
	 * ids against table->rows) */
	strata_block_type bt = strata_weight_type_block(table->type);
	uint64_t row_bytes = (uint64_t)table->cols / strata_block_elements(bt) *
			     strata_block_bytes(bt);
	const unsigned char *base = table->data;
	for (uint32_t i = 0; i < n; i++)
		(void)strata_block_decode(bt, base + (uint64_t)tokens[i] * row_bytes,
					  x + (uint64_t)i * table->cols,
					  table->cols);
	return STRATA_OK;
}

/* A vector or matrix of another type as f32 (half biases and divisors of
 * a unit a CUDA run keeps as CUDA does, computed here: issue 17), each row
 * decoded exactly. */
static strata_status cpu_to_f32(void *ctx, float *dst, const strata_weight *w,
				strata_error *err)
{
	(void)ctx;
	strata_block_type bt = strata_weight_type_block(w->type);
	uint32_t per = strata_block_elements(bt);
	if (!per || w->cols % per)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the weight source; report it",
				   "to_f32 kernel: %u columns are not whole %s blocks",
				   w->cols, strata_weight_type_name(w->type));
	(void)strata_block_decode(bt, w->data, dst,
				  (uint64_t)w->rows * w->cols);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Fused decode slots                                                       */
/* ------------------------------------------------------------------------ */

#define FOLD_MAX 16384u

static bool norm_takes(const strata_kernel_norm *norm, uint32_t cols)
{
	return !norm || (norm->w.cols == cols && cols <= FOLD_MAX &&
			 (norm->w.type == STRATA_WEIGHT_F32 ||
			  norm->w.type == STRATA_WEIGHT_BF16 ||
			  norm->w.type == STRATA_WEIGHT_F16));
}

/* x, or the norm of x (one row of at most FOLD_MAX) into normed. */
static strata_status fold_norm(void *ctx, const float *x,
			       const strata_kernel_norm *norm, float *normed,
			       const float **out, strata_error *err)
{
	*out = x;
	if (!norm)
		return STRATA_OK;
	*out = normed;
	return cpu_rmsnorm(ctx, normed, x, &norm->w, 1, norm->eps, err);
}

static bool cpu_products_take(void *ctx, const strata_kernel_norm *norm,
			      uint32_t n, const strata_kernel_product *p,
			      uint32_t count)
{
	const strata_weight *w[STRATA_KERNEL_PRODUCTS_MAX];
	for (uint32_t i = 0; i < count; i++)
		w[i] = &p[i].w;
	return norm_takes(norm, p[0].w.cols) &&
	       (strata__cpu_decode_take(n, w, count) ||
		strata__cpu_decode_q8_take(ctx, n, w, count));
}

static strata_status cpu_products(void *ctx, const float *x,
				  const strata_kernel_norm *norm, uint32_t n,
				  const strata_kernel_product *p,
				  uint32_t count, bool accumulate,
				  strata_error *err)
{
	float normed[FOLD_MAX];
	const float *in;
	const strata_weight *w[STRATA_KERNEL_PRODUCTS_MAX];
	for (uint32_t i = 0; i < count; i++)
		w[i] = &p[i].w;
	bool q8 = strata__cpu_decode_q8_take(ctx, n, w, count);
	strata_status st = fold_norm(ctx, x, norm, normed, &in, err);
	if (st == STRATA_OK && q8)
		st = strata__cpu_decode_q8_products(ctx, in, p, count,
						    accumulate, err);
	else if (st == STRATA_OK)
		st = strata__cpu_decode_products(ctx, in, p, count, accumulate,
						 err);
	return st;
}

static bool cpu_gated_take(void *ctx, const strata_kernel_norm *norm,
			   uint32_t n, const strata_weight *gate,
			   const strata_weight *up)
{
	const strata_weight *w[] = {gate, up};
	return gate->type == up->type && norm_takes(norm, gate->cols) &&
	       (strata__cpu_decode_take(n, w, 2) ||
		strata__cpu_decode_q8_take(ctx, n, w, 2));
}

static strata_status cpu_gated(void *ctx, float *y, const float *x,
			       const strata_kernel_norm *norm,
			       const strata_weight *gate,
			       const strata_weight *up, uint32_t n,
			       strata_error *err)
{
	float normed[FOLD_MAX];
	const float *in;
	const strata_weight *w[] = {gate, up};
	bool q8 = strata__cpu_decode_q8_take(ctx, n, w, 2);
	strata_status st = fold_norm(ctx, x, norm, normed, &in, err);
	if (st == STRATA_OK && q8)
		st = strata__cpu_decode_q8_gated(ctx, y, in, gate, up, err);
	else if (st == STRATA_OK)
		st = strata__cpu_decode_gated(ctx, y, in, gate, up, err);
	return st;
}

const strata_kernel_ops strata_cpu_kernel_ops = {
	.name = "cpu",
	.weight_types = STRATA_CPU_WEIGHT_TYPES,
	.kv_types = STRATA_WEIGHT_BIT(STRATA_WEIGHT_F16) |
		    STRATA_WEIGHT_BIT(STRATA_WEIGHT_BF16),
	.kv_store = strata__cpu_kv_store,
	.compute_create = cpu_compute_create,
	.compute_destroy = cpu_compute_destroy,
	.compute_threads = cpu_compute_threads,
	.matmul = cpu_matmul,
	.rmsnorm = cpu_rmsnorm,
	.to_f32 = cpu_to_f32,
	.rope = strata__cpu_rope,
	.attention = strata__cpu_attention,
	.swiglu = strata__cpu_swiglu,
	.add = strata__cpu_add,
	.map = strata__cpu_map,
	.scatter_add = strata__cpu_scatter_add,
	.embed = cpu_embed,
	.products_take = cpu_products_take,
	.products = cpu_products,
	.gated_take = cpu_gated_take,
	.gated = cpu_gated,
	.experts_take = strata__cpu_experts_take,
	.experts = strata__cpu_experts,
};
