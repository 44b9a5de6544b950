/* kernels_internal.h - what the CPU kernel files share: the persistent
 * thread pool and the kernel entry points (layer: backend). */
#ifndef STRATA_BACKEND_CPU_KERNELS_INTERNAL_H
#define STRATA_BACKEND_CPU_KERNELS_INTERNAL_H

#include "strata/backend_kernels.h"

/* A fixed set of worker threads created once; the calling thread works too.
 * One job at a time: strata__pool_run returns when every task is done. */
typedef struct strata__pool strata__pool;

/* task: index in [0, n_tasks); each task runs exactly once, on any thread. */
typedef void (*strata__pool_fn)(void *arg, uint32_t task);

/* threads counts the caller: threads - 1 workers are started. */
strata_status strata__pool_create(uint32_t threads, strata__pool **out,
				  strata_error *err);
void strata__pool_destroy(strata__pool *p);
uint32_t strata__pool_threads(const strata__pool *p);
/* Runs fn(arg, 0 .. n_tasks-1) spread over the pool; not reentrant. */
void strata__pool_run(strata__pool *p, strata__pool_fn fn, void *arg,
		      uint32_t n_tasks);

/* The slots of strata_cpu_kernel_ops; ctx is a strata__pool. */
strata_status strata__cpu_matmul(void *ctx, float *y, const float *x,
				 const float *w, const float *bias, uint32_t n,
				 uint32_t in, uint32_t out, strata_error *err);
strata_status strata__cpu_matmul_stored(void *ctx, float *y, const float *x,
					const void *w, strata_block_type type,
					const float *bias, uint32_t n,
					uint32_t in, uint32_t out,
					strata_error *err);
strata_status strata__cpu_attention(void *ctx, float *out, const float *q,
				    const float *k, const float *v,
				    const strata_attention_shape *shape,
				    strata_error *err);
strata_status strata__cpu_rope(void *ctx, float *x, uint32_t n, uint32_t pos0,
			       uint32_t heads, uint32_t head_dim,
			       const float *inv_freq, strata_rope_layout layout,
			       strata_error *err);
strata_status strata__cpu_rmsnorm(void *ctx, float *y, const float *x,
				  const float *w, uint32_t n, uint32_t dim,
				  float eps, strata_error *err);
strata_status strata__cpu_swiglu(void *ctx, float *gate, const float *up,
				 uint64_t count, strata_error *err);
strata_status strata__cpu_map(void *ctx, float *y, const float *x,
			      uint64_t count, strata_map_op op, float a,
			      strata_error *err);
strata_status strata__cpu_add(void *ctx, float *y, const float *x,
			      uint64_t count, strata_error *err);
strata_status strata__cpu_embed(void *ctx, float *x, const float *table,
				const int32_t *tokens, uint32_t n, uint32_t dim,
				strata_error *err);

#endif
