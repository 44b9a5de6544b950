/* kernels_cpu.c - the CPU backend's kernel table: f32 kernels over a
 * persistent thread pool (layer: backend). */
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

const strata_kernel_ops strata_cpu_kernel_ops = {
	.name = "cpu",
	.compute_create = cpu_compute_create,
	.compute_destroy = cpu_compute_destroy,
	.compute_threads = cpu_compute_threads,
	.matmul = strata__cpu_matmul,
	.rmsnorm = strata__cpu_rmsnorm,
	.rope = strata__cpu_rope,
	.attention = strata__cpu_attention,
	.swiglu = strata__cpu_swiglu,
	.add = strata__cpu_add,
	.embed = strata__cpu_embed,
};
