/* kernels_cpu.c - the CPU backend's kernel table: f32 kernels over a
 * persistent thread pool (layer: backend).
 *
 * The table takes f32 weights only (the wrappers refuse others), so the
 * slots below hand the weights' data to the f32 kernels as it is. None of
 * the optional fused slots is filled: the wrappers' compositions of these
 * kernels are what the CPU runs. */
#include "backend/cpu/kernels_internal.h"

static strata_status cpu_compute_create(uint32_t threads, void **ctx,
					strata_error *err)
{
	strata__pool *p;
	strata_status st = strata__pool_create(threads, &p, err);
	if (st == STRATA_OK)
		*ctx = p;
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
	return strata__cpu_matmul(ctx, y, x, w->data, bias, n, w->cols,
				  w->rows, err);
}

static strata_status cpu_rmsnorm(void *ctx, float *y, const float *x,
				const strata_weight *w, uint32_t n, float eps,
				strata_error *err)
{
	return strata__cpu_rmsnorm(ctx, y, x, w->data, n, w->cols, eps, err);
}

static strata_status cpu_embed(void *ctx, float *x, const strata_weight *table,
			      const int32_t *tokens, uint32_t n,
			      strata_error *err)
{
	return strata__cpu_embed(ctx, x, table->data, tokens, n, table->cols,
				 err);
}

const strata_kernel_ops strata_cpu_kernel_ops = {
	.name = "cpu",
	.weight_types = STRATA_WEIGHT_BIT(STRATA_WEIGHT_F32),
	.compute_create = cpu_compute_create,
	.compute_destroy = cpu_compute_destroy,
	.compute_threads = cpu_compute_threads,
	.matmul = cpu_matmul,
	.rmsnorm = cpu_rmsnorm,
	.rope = strata__cpu_rope,
	.attention = strata__cpu_attention,
	.swiglu = strata__cpu_swiglu,
	.add = strata__cpu_add,
	.embed = cpu_embed,
};
