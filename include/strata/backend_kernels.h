/* backend_kernels.h - the compute-kernel half of the backend interface: a
 * compute context and the f32 kernels the forward pass is made of (layer:
 * backend).
 *
 * A backend that can compute points its ops table at one const
 * strata_kernel_ops (backend.h, slot `kernels`). Kernels run on a
 * strata_compute: the backend's execution context (the CPU backend's is a
 * persistent thread pool, so no thread is created and nothing is allocated
 * per token). Buffers are f32 in the backend's device memory (host RAM for
 * the CPU backend); shapes are given on every pointer below, row-major,
 * outermost first.
 *
 * Results are deterministic: each output element is computed by one thread
 * in a fixed order, so the thread count and the batch size (prefill n > 1
 * or decode n = 1) never change a single bit of any result.
 */
#ifndef STRATA_BACKEND_KERNELS_H
#define STRATA_BACKEND_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/base.h"

/* How RoPE pairs the elements of a head (X(NAME, "text")). */
#define STRATA_ROPE_LAYOUT_MAP(X)                                              \
	X(HALF, "rotate-half")                                                 \
	X(INTERLEAVED, "interleaved")

typedef enum strata_rope_layout {
#define STRATA_ROPE_LAYOUT_ENUM(name, text) STRATA_ROPE_##name,
	STRATA_ROPE_LAYOUT_MAP(STRATA_ROPE_LAYOUT_ENUM)
#undef STRATA_ROPE_LAYOUT_ENUM
} strata_rope_layout;

/* "rotate-half" / "interleaved"; "unknown" outside the enum. */
const char *strata_rope_layout_name(strata_rope_layout l);

/* The shape of one attention call: n queries at positions pos0 .. pos0+n-1
 * over a KV cache that already holds positions 0 .. pos0+n-1. */
typedef struct strata_attention_shape {
	uint32_t n;	     /* queries */
	uint32_t pos0;	     /* position of the first query */
	uint32_t heads;	     /* query heads */
	uint32_t kv_heads;   /* key/value heads; heads % kv_heads == 0 */
	uint32_t head_dim;
	uint32_t window;     /* 0: full causal; else a query at p sees keys
				p-window+1 .. p (mistral sliding window) */
	float scale;	     /* score multiplier, usually 1/sqrt(head_dim) */
} strata_attention_shape;

typedef struct strata_compute strata_compute;

/* The kernel slots. `ctx` is the compute context's own state. Arguments are
 * checked by the strata_kernel_* wrappers, so slots trust them. */
typedef struct strata_kernel_ops {
	const char *name; /* "cpu" */
	/* threads: 0 picks the machine's online processor count. */
	strata_status (*compute_create)(uint32_t threads, void **ctx,
					strata_error *err);
	void (*compute_destroy)(void *ctx);
	uint32_t (*compute_threads)(void *ctx);
	/* y (n, out) = x (n, in) . w (out, in)^T (+ bias (out) when not
	 * NULL). y must not alias x or w. */
	strata_status (*matmul)(void *ctx, float *y, const float *x,
				const float *w, const float *bias, uint32_t n,
				uint32_t in, uint32_t out, strata_error *err);
	/* y (n, dim) = x / sqrt(mean(x^2) + eps) * w (dim); y may be x. */
	strata_status (*rmsnorm)(void *ctx, float *y, const float *x,
				 const float *w, uint32_t n, uint32_t dim,
				 float eps, strata_error *err);
	/* Rotates x (n, heads, head_dim) in place; row i is at position
	 * pos0 + i; inv_freq (head_dim / 2) are the per-pair frequencies. */
	strata_status (*rope)(void *ctx, float *x, uint32_t n, uint32_t pos0,
			      uint32_t heads, uint32_t head_dim,
			      const float *inv_freq, strata_rope_layout layout,
			      strata_error *err);
	/* out (n, heads, head_dim) = softmax(q k^T * scale, causal and
	 * window masked) v, with q (n, heads, head_dim) and the caches
	 * k, v (positions, kv_heads, head_dim); query head h reads kv head
	 * h / (heads / kv_heads). */
	strata_status (*attention)(void *ctx, float *out, const float *q,
				   const float *k, const float *v,
				   const strata_attention_shape *shape,
				   strata_error *err);
	/* gate (count) = silu(gate) * up (count). */
	strata_status (*swiglu)(void *ctx, float *gate, const float *up,
				uint64_t count, strata_error *err);
	/* y (count) += x (count). */
	strata_status (*add)(void *ctx, float *y, const float *x,
			     uint64_t count, strata_error *err);
	/* x (n, dim) = table (vocab, dim) rows tokens[0..n); ids are checked
	 * against vocab by the wrapper. */
	strata_status (*embed)(void *ctx, float *x, const float *table,
			       const int32_t *tokens, uint32_t n, uint32_t dim,
			       strata_error *err);
} strata_kernel_ops;

/* The CPU kernels (src/backend/cpu/kernels_*.c). */
extern const strata_kernel_ops strata_cpu_kernel_ops;

/* A compute context: {ops, ctx}. */
struct strata_compute {
	const strata_kernel_ops *ops;
	void *ctx;
};

/* Creates a compute context on `ops` (e.g. &strata_cpu_kernel_ops) with
 * `threads` workers (0: one per online processor). The caller owns *out
 * (strata_compute_destroy). E_NOMEM / E_THREAD on failure, nothing leaked. */
strata_status strata_compute_create(const strata_kernel_ops *ops,
				    uint32_t threads, strata_compute **out,
				    strata_error *err);
void strata_compute_destroy(strata_compute *c); /* NULL is fine */

struct strata_backend;
/* The same on a backend's own kernel table; E_BACKEND_UNAVAILABLE naming
 * the backend when it has none. */
strata_status strata_compute_create_on(struct strata_backend *b,
				       uint32_t threads, strata_compute **out,
				       strata_error *err);
/* The same, saying how many bytes of the backend's device memory making
 * the context took (its free memory before less after, cuBLAS's handle and
 * the runtime's own allocations included; 0 where the backend cannot tell
 * or its device memory is the host's, as on the CPU backend). Plans
 * reserve this much beside their buffers on CUDA. */
strata_status strata_compute_create_measured(struct strata_backend *b,
					     uint32_t threads,
					     strata_compute **out,
					     uint64_t *device_bytes,
					     strata_error *err);
uint32_t strata_compute_threads(const strata_compute *c);

/* Wrappers: check shapes once (zero sizes, overflow of the buffer sizes,
 * GQA divisibility, token ids) and call the slot. */
strata_status strata_kernel_matmul(strata_compute *c, float *y, const float *x,
				   const float *w, const float *bias,
				   uint32_t n, uint32_t in, uint32_t out,
				   strata_error *err);
strata_status strata_kernel_rmsnorm(strata_compute *c, float *y,
				    const float *x, const float *w, uint32_t n,
				    uint32_t dim, float eps, strata_error *err);
strata_status strata_kernel_rope(strata_compute *c, float *x, uint32_t n,
				 uint32_t pos0, uint32_t heads,
				 uint32_t head_dim, const float *inv_freq,
				 strata_rope_layout layout, strata_error *err);
strata_status strata_kernel_attention(strata_compute *c, float *out,
				      const float *q, const float *k,
				      const float *v,
				      const strata_attention_shape *shape,
				      strata_error *err);
strata_status strata_kernel_swiglu(strata_compute *c, float *gate,
				   const float *up, uint64_t count,
				   strata_error *err);
strata_status strata_kernel_add(strata_compute *c, float *y, const float *x,
				uint64_t count, strata_error *err);
strata_status strata_kernel_embed(strata_compute *c, float *x,
				  const float *table, uint32_t vocab,
				  const int32_t *tokens, uint32_t n,
				  uint32_t dim, strata_error *err);

#endif
