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
/* Makes every thread's scratch at least `bytes` (64-byte aligned), kept
 * until the pool is destroyed or a larger reserve: called outside a job,
 * so a product allocates only when a larger shape first comes. Fails with
 * E_NOMEM (the old scratch kept). */
strata_status strata__pool_reserve(strata__pool *p, uint64_t bytes,
				   strata_error *err);
/* Inside a task: the scratch of the thread running it (reserved bytes). */
void *strata__pool_scratch(strata__pool *p);
/* Outside a job: one buffer of at least `bytes` (64-byte aligned) for the
 * caller to fill before a job its tasks read, kept like the scratch; NULL
 * with E_NOMEM naming `what` when it cannot grow (the old one kept). */
void *strata__pool_shared(strata__pool *p, uint64_t bytes, const char *what,
			  strata_error *err);
/* The path of the stored decode products (kernels_quant.c): one of
 * STRATA__DECODE_*, set when the compute context is created. */
enum { STRATA__DECODE_Q8 = 0, STRATA__DECODE_EXACT = 1 };
int strata__pool_decode_mode(const strata__pool *p);
void strata__pool_set_decode_mode(strata__pool *p, int mode);

#if defined(__x86_64__)
/* The vector decoders of stored weights (quant_avx2.c, quant_avx512.c):
 * `elements` (whole blocks) from src into dst, the bits of base's
 * strata_block_decode; the types a set lacks go to the narrower one, then
 * to base. Usable only where the matching _usable says so. */
void strata__quant_decode_avx2(strata_block_type t, const unsigned char *src,
			       float *dst, uint32_t elements);
void strata__quant_decode_avx512(strata_block_type t, const unsigned char *src,
				 float *dst, uint32_t elements);
bool strata__quant_avx2_usable(void);
bool strata__quant_avx512_usable(void);
#endif

/* Test hook: the widest path the matrix products take (2 AVX-512, the
 * default; 1 AVX2; 0 generic), within what the processor has; the f32
 * product has no AVX-512 path and takes AVX2 at 2. */
void strata__cpu_isa_limit(int level);
int strata__cpu_isa_max(void);
/* Tuning hook: how many chunks ahead of its decoding the stored decode
 * product prefetches each weight row (0 leaves it to the hardware). */
void strata__quant_prefetch(uint32_t chunks);

/* The KV cache in f16 / bf16 (kernels_kv.c): the kv_store slot; a
 * reader of `n` cache elements of type t (F16 or BF16) into f32, the
 * widest path the processor has; and, for tests, either direction at a
 * given path (0 scalar, 1 AVX2/F16C, 2 AVX-512; capped at what the
 * processor has). */
typedef void (*strata__kv_load_fn)(float *dst, const void *src, uint64_t n);
strata_status strata__cpu_kv_store(void *ctx, void *dst,
				   strata_weight_type type, const float *src,
				   uint64_t count, strata_error *err);
strata__kv_load_fn strata__cpu_kv_loader(strata_weight_type type);
void strata__cpu_kv_convert_at(int level, strata_weight_type type, bool store,
			       void *dst, const void *src, uint64_t count);

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
				    const void *k, const void *v,
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
strata_status strata__cpu_scatter_add(void *ctx, float *x, const float *y,
				      const int32_t *rows, const float *weight,
				      uint32_t m, uint32_t dim,
				      strata_error *err);
strata_status strata__cpu_add(void *ctx, float *y, const float *x,
			      uint64_t count, strata_error *err);
strata_status strata__cpu_embed(void *ctx, float *x, const float *table,
				const int32_t *tokens, uint32_t n, uint32_t dim,
				strata_error *err);

/* The fused one-row products (kernels_decode.c): whether this processor
 * runs them (AVX2, FMA, F16C, within the ISA limit), and whether they take
 * n rows of these weights (n 1; each f32, bf16 or f16). products: y_i =
 * x . w_i^T (+ bias_i), or y_i += that (accumulate), one job for all;
 * gated: y = silu(x . gate^T) * (x . up^T), gate and up of one type. */
bool strata__cpu_decode_usable(void);
bool strata__cpu_decode_take(uint32_t n, const strata_weight *const *w,
			     uint32_t count);
strata_status strata__cpu_decode_products(void *ctx, const float *x,
					  const strata_kernel_product *p,
					  uint32_t count, bool accumulate,
					  strata_error *err);
strata_status strata__cpu_decode_gated(void *ctx, float *y, const float *x,
				       const strata_weight *gate,
				       const strata_weight *up,
				       strata_error *err);
/* Outputs [o0, o1) of one row of x (in) against w (f32, bf16 or f16, rows
 * of `in` as stored) into y[o0 .. o1): the fused products' sums (the bits
 * of the plain product); only where strata__cpu_decode_usable says so. */
void strata__cpu_decode_rows(float *y, const void *w, strata_weight_type t,
			     const float *x, uint32_t in, uint32_t o0,
			     uint32_t o1);
/* The same slots on the GGUF block types through the activation-quantized
 * kernels (kernels_decode_q8.c): whether they take n rows of these weights
 * (n 1, each a block type of qdot.h's scheme, whole blocks, the pool in
 * the Q8 decode mode), then products and gated as above, the bits of the
 * plain Q8 products composed. */
bool strata__cpu_decode_q8_take(void *ctx, uint32_t n,
				const strata_weight *const *w, uint32_t count);
strata_status strata__cpu_decode_q8_products(void *ctx, const float *x,
					     const strata_kernel_product *p,
					     uint32_t count, bool accumulate,
					     strata_error *err);
strata_status strata__cpu_decode_q8_gated(void *ctx, float *y, const float *x,
					  const strata_weight *gate,
					  const strata_weight *up,
					  strata_error *err);

/* A mixture-of-experts layer's routed experts in one job of the pool
 * (kernels_experts.c): whether the experts slot takes the call (every hit
 * of at most STRATA__CPU_EXPERTS_ROWS rows, one where a matrix is bf16,
 * f16 or f32, on types the fused decode products take, at most
 * STRATA__CPU_EXPERTS_HITS hits), then the call,
 * the bits of the wrapper's composition one expert at a time. */
#define STRATA__CPU_EXPERTS_ROWS 8u
#define STRATA__CPU_EXPERTS_HITS 64u
bool strata__cpu_experts_take(void *ctx, uint32_t n,
			      const strata_kernel_expert *e, uint32_t count);
strata_status strata__cpu_experts(void *ctx, float *y, const float *x,
				  uint32_t n, const strata_kernel_expert *e,
				  uint32_t count, strata_error *err);

#endif
