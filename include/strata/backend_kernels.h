/* backend_kernels.h - the compute-kernel half of the backend interface: a
 * compute context and the f32 kernels the forward pass is made of (layer:
 * backend).
 *
 * A backend that can compute points its ops table at one const
 * strata_kernel_ops (backend.h, slot `kernels`). Kernels run on a
 * strata_compute: the backend's execution context (the CPU backend's is a
 * persistent thread pool, so no thread is created and nothing is allocated
 * per token; the CUDA backend's owns the compute stream its kernels queue
 * on). Activations are f32 in the backend's device memory (host RAM for
 * the CPU backend); weights are strata_weight, in their stored type, which
 * each kernel table lists among the types it takes. Shapes are given on
 * every pointer below, row-major, outermost first.
 *
 * Fused slots (a norm folded into the products that read it, products
 * sharing their input, gate and up with their SwiGLU, rope on queries and
 * keys at once) are optional: the wrappers ask the table whether it takes a
 * call and otherwise run the default composition of plain kernels, so a
 * caller writes each step once for every backend.
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

/* The numerics of a compute context (X(NAME, "text"), --precision):
 * FAST (the default, 0): what llama.cpp and transformers compute, as fast
 * as they are: on the CPU, one-row products on block-type weights take x
 * quantized to 8 bits (integer dot products); on CUDA, decode products on
 * block types likewise where the kernels have that path, and prefill's
 * products and attention take their f32 inputs rounded to bf16 once.
 * EXACT: f32 activations everywhere: on the CPU the f32 product's bits
 * over the exactly decoded weights; on CUDA f32 x in decode and prefill
 * inputs split into bf16 hi + lo (about 16 bits, two or three tensor-core
 * products). docs/infer.md#precision says what each costs and how far
 * from exact each lands. */
#define STRATA_PRECISION_MAP(X)                                                \
	X(FAST, "fast")                                                        \
	X(EXACT, "exact")

typedef enum strata_precision {
#define STRATA_PRECISION_ENUM(name, text) STRATA_PRECISION_##name,
	STRATA_PRECISION_MAP(STRATA_PRECISION_ENUM)
#undef STRATA_PRECISION_ENUM
	STRATA_PRECISION_COUNT
} strata_precision;

/* "fast" / "exact"; "unknown" outside the enum. */
const char *strata_precision_name(strata_precision p);
/* Parses "fast" or "exact" (exactly) into *out; anything else is E_USAGE
 * naming the text (escaped) with the fix listing both. *out is unchanged
 * on error. */
strata_status strata_precision_parse(const char *text, strata_precision *out,
				     strata_error *err);

/* The stored type of a weight (X(NAME, "text")); infer's
 * STRATA_INFER_ELEM_MAP is this list. Each name is also base's strata_block_type
 * of that name (the block layouts are base's, strata_block_decode). The
 * CPU and CUDA tables compute on all of them (their products; norms take
 * f32, and f16/bf16 on CUDA). */
#define STRATA_WEIGHT_TYPE_MAP(X)                                              \
	X(F32, "f32")                                                          \
	X(BF16, "bf16")                                                        \
	X(F16, "f16")                                                          \
	X(Q8_0, "q8_0")                                                        \
	X(Q4_0, "q4_0")                                                        \
	X(Q4_1, "q4_1")                                                        \
	X(Q5_0, "q5_0")                                                        \
	X(Q5_1, "q5_1")                                                        \
	X(Q2_K, "q2_k")                                                        \
	X(Q3_K, "q3_k")                                                        \
	X(Q4_K, "q4_k")                                                        \
	X(Q5_K, "q5_k")                                                        \
	X(Q6_K, "q6_k")                                                        \
	X(IQ4_NL, "iq4_nl")                                                    \
	X(IQ4_XS, "iq4_xs")

typedef enum strata_weight_type {
#define STRATA_WEIGHT_TYPE_ENUM(name, text) STRATA_WEIGHT_##name,
	STRATA_WEIGHT_TYPE_MAP(STRATA_WEIGHT_TYPE_ENUM)
#undef STRATA_WEIGHT_TYPE_ENUM
	STRATA_WEIGHT_TYPE_COUNT
} strata_weight_type;

/* "f32", "bf16", "f16"; "unknown" outside the enum. */
const char *strata_weight_type_name(strata_weight_type t);
/* base's block format of t (STRATA_BLOCK_COUNT outside the enum). */
strata_block_type strata_weight_type_block(strata_weight_type t);
/* One bit per type, for strata_kernel_ops.weight_types. */
#define STRATA_WEIGHT_BIT(t) (1u << (unsigned)(t))

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
	float softcap;	     /* 0: none; else scores (after scale) become
				softcap * tanh(score / softcap) (Gemma 2) */
	/* The element type of the KV cache's k and v: F32 (0, the
	 * default), F16 or BF16, among the table's kv_types. */
	strata_weight_type kv_type;
} strata_attention_shape;

/* Element-wise maps of strata_kernel_map (y and x of `count` floats, a a
 * scalar): the few steps some families add to llama's. */
typedef enum strata_map_op {
	STRATA_MAP_SCALE,     /* y = x * a (Gemma's embedding scale) */
	STRATA_MAP_SOFTCAP,   /* y = a * tanh(x / a) (Gemma 2's logits) */
	STRATA_MAP_ADD_CONST, /* y = x + a (Gemma's norms, 1 + w) */
	STRATA_MAP_GELU_MUL,  /* y = gelu_tanh(y) * x (GeGLU: y the gate) */
} strata_map_op;

/* A weight as stored: rows x cols elements of `type`, row-major, in the
 * backend's device memory. A product's weight is (out, in); a norm's, a
 * bias's or a rope divisor's is one row. */
typedef struct strata_weight {
	strata_weight_type type;
	const void *data;
	uint32_t rows, cols;
} strata_weight;

/* RMSNorm folded into what reads its output: rmsnorm(x) * w, w (1, dim). */
typedef struct strata_kernel_norm {
	strata_weight w;
	float eps;
} strata_kernel_norm;

/* One product of strata_kernel_products: y (n, w.rows) = x . w^T (+ bias
 * (w.rows, f32) when not NULL). */
typedef struct strata_kernel_product {
	float *y;
	strata_weight w;
	const float *bias;
} strata_kernel_product;
#define STRATA_KERNEL_PRODUCTS_MAX 3u

/* One routed expert of strata_kernel_experts (a mixture-of-experts
 * layer's hit): its weights as stored, gate and up (ffn, dim), down (dim,
 * ffn), and the m rows of x routed to it (host memory: their ids,
 * increasing, and their routing weights); m 0: nothing to do. */
typedef struct strata_kernel_expert {
	strata_weight gate, up, down;
	const int32_t *rows;
	const float *weight;
	uint32_t m;
} strata_kernel_expert;

/* The buffers strata_kernel_experts' default composition runs in (device
 * memory of the context), each of n rows: `in` (n, dim) an expert's rows
 * of x gathered, h and h2 (n, ffn) its gate's and up's products, out (n,
 * dim) its output rows. */
typedef struct strata_kernel_experts_scratch {
	float *in, *h, *h2, *out;
} strata_kernel_experts_scratch;

struct strata_stream;
struct strata_backend;
typedef struct strata_compute strata_compute;

/* How a compute context is made (strata_compute_create_with); a zeroed
 * struct is the default: one worker per online processor, FAST. */
typedef struct strata_compute_options {
	uint32_t threads;	    /* CPU workers; 0: one per processor */
	strata_precision precision; /* the numerics (STRATA_PRECISION_MAP) */
} strata_compute_options;

/* The kernel slots. `ctx` is the compute context's own state. Arguments are
 * checked by the strata_kernel_* wrappers (shapes, and weight types against
 * `weight_types`), so slots trust them. Slots marked optional may be NULL;
 * the wrappers then compose plain kernels. */
typedef struct strata_kernel_ops {
	const char *name; /* "cpu", "cuda" */
	/* STRATA_WEIGHT_BIT of each type matmul, rmsnorm and embed take */
	uint32_t weight_types;
	/* STRATA_WEIGHT_BIT of each KV cache type attention reads and
	 * kv_store writes besides F32 (which every table takes). */
	uint32_t kv_types;
	/* o->threads: 0 picks the machine's online processor count;
	 * o->precision is checked by the wrapper (in range). */
	strata_status (*compute_create)(const struct strata_compute_options *o,
					void **ctx, strata_error *err);
	void (*compute_destroy)(void *ctx);
	uint32_t (*compute_threads)(void *ctx);
	/* Optional: the context's own stream, which its kernels queue on
	 * (it belongs to the context). NULL: each kernel has finished when
	 * it returns, and the context computes on memory the host
	 * addresses, so copies around it are plain memcpy. */
	struct strata_stream *(*compute_stream)(void *ctx);
	/* y (n, w.rows) = x (n, w.cols) . w^T (+ bias (w.rows) when not
	 * NULL). y must not alias x or w. */
	strata_status (*matmul)(void *ctx, float *y, const float *x,
				const strata_weight *w, const float *bias,
				uint32_t n, strata_error *err);
	/* y (n, w.cols) = x / sqrt(mean(x^2) + eps) * w; y may be x. */
	strata_status (*rmsnorm)(void *ctx, float *y, const float *x,
				 const strata_weight *w, uint32_t n, float eps,
				 strata_error *err);
	/* Rotates x (n, heads, head_dim) in place; row i is at position
	 * pos0 + i; inv_freq (head_dim / 2) are the per-pair frequencies. */
	strata_status (*rope)(void *ctx, float *x, uint32_t n, uint32_t pos0,
			      uint32_t heads, uint32_t head_dim,
			      const float *inv_freq, strata_rope_layout layout,
			      strata_error *err);
	/* out (n, heads, head_dim) = softmax(q k^T * scale, causal and
	 * window masked) v, with q (n, heads, head_dim) and the caches
	 * k, v (positions, kv_heads, head_dim) of shape->kv_type; query
	 * head h reads kv head h / (heads / kv_heads). */
	strata_status (*attention)(void *ctx, float *out, const float *q,
				   const void *k, const void *v,
				   const strata_attention_shape *shape,
				   strata_error *err);
	/* gate (count) = silu(gate) * up (count). */
	strata_status (*swiglu)(void *ctx, float *gate, const float *up,
				uint64_t count, strata_error *err);
	/* y (count) += x (count). */
	strata_status (*add)(void *ctx, float *y, const float *x,
			     uint64_t count, strata_error *err);
	/* y (count) = op(x, a) (strata_map_op); y may be x. */
	strata_status (*map)(void *ctx, float *y, const float *x,
			     uint64_t count, strata_map_op op, float a,
			     strata_error *err);
	/* x (n, table.cols) = table rows tokens[0..n); tokens are host
	 * memory, checked against table.rows by the wrapper. */
	strata_status (*embed)(void *ctx, float *x, const strata_weight *table,
			       const int32_t *tokens, uint32_t n,
			       strata_error *err);
	/* Optional (needed for tables that take more than f32): dst
	 * (w.rows x w.cols, f32) = w's elements, w not f32. */
	strata_status (*to_f32)(void *ctx, float *dst, const strata_weight *w,
				strata_error *err);
	/* Optional, with products: whether products takes this call (norm
	 * NULL: the products alone). */
	bool (*products_take)(void *ctx, const strata_kernel_norm *norm,
			      uint32_t n, const strata_kernel_product *p,
			      uint32_t count);
	/* y_i (n, w_i.rows) = x' . w_i^T (+ bias_i) for products sharing x
	 * (n, in), or y_i += that when `accumulate`; x' is x, or
	 * rmsnorm(x) * norm->w when norm is not NULL. */
	strata_status (*products)(void *ctx, const float *x,
				  const strata_kernel_norm *norm, uint32_t n,
				  const strata_kernel_product *p,
				  uint32_t count, bool accumulate,
				  strata_error *err);
	/* Optional, with gated: whether gated takes this call. */
	bool (*gated_take)(void *ctx, const strata_kernel_norm *norm,
			   uint32_t n, const strata_weight *gate,
			   const strata_weight *up);
	/* y (n, gate.rows) = silu(x' . gate^T) * (x' . up^T), x' as for
	 * products; y does not alias x. */
	strata_status (*gated)(void *ctx, float *y, const float *x,
			       const strata_kernel_norm *norm,
			       const strata_weight *gate,
			       const strata_weight *up, uint32_t n,
			       strata_error *err);
	/* Optional: rope on queries q (n, heads, head_dim) and keys k (n,
	 * kv_heads, head_dim) at once, the same floats as two rope calls. */
	strata_status (*rope_qk)(void *ctx, float *q, float *k, uint32_t n,
				 uint32_t pos0, uint32_t heads,
				 uint32_t kv_heads, uint32_t head_dim,
				 const float *inv_freq,
				 strata_rope_layout layout, strata_error *err);
	/* Needed for kv_types: dst (count elements of `type`) = src (count
	 * f32): F32 a copy, F16 / BF16 rounded to nearest even (NaN stays
	 * NaN, overflow becomes infinity), bit for bit as base's encoder
	 * (strata_block_encode). */
	strata_status (*kv_store)(void *ctx, void *dst, strata_weight_type type,
				  const float *src, uint64_t count,
				  strata_error *err);
	/* Optional: x[rows[i]] (dim) += weight[i] * y[i] (dim) for i < m,
	 * one launch for a mixture of experts' outputs (the wrapper runs a
	 * scale and an add a row without it); rows and weight are host
	 * memory, rows distinct and checked by the wrapper. */
	strata_status (*scatter_add)(void *ctx, float *x, const float *y,
				     const int32_t *rows, const float *weight,
				     uint32_t m, uint32_t dim,
				     strata_error *err);
	/* Optional: takes `bytes` of the products' input workspace now
	 * (the plan's product_workspace_bytes) instead of at the first
	 * product that needs them. */
	strata_status (*reserve)(void *ctx, uint64_t bytes, strata_error *err);
	/* Optional, with experts: whether experts takes this call. */
	bool (*experts_take)(void *ctx, uint32_t n,
			     const strata_kernel_expert *e, uint32_t count);
	/* y (n, dim) += a layer's routed experts over x (n, dim), as
	 * strata_kernel_experts says, in as few launches as the table can
	 * (CUDA: five for all the hits, kernels_experts.cu); the wrapper has
	 * checked every shape, row and weight type; hits of m 0 are to be
	 * skipped. */
	strata_status (*experts)(void *ctx, float *y, const float *x,
				 uint32_t n, const strata_kernel_expert *e,
				 uint32_t count, strata_error *err);
} strata_kernel_ops;

/* The CPU kernels (src/backend/cpu/kernels_*.c): products on every weight
 * type as stored, norms on f32. */
extern const strata_kernel_ops strata_cpu_kernel_ops;
#define STRATA_CPU_WEIGHT_TYPES ((1u << STRATA_WEIGHT_TYPE_COUNT) - 1)

/* A compute context: {ops, ctx}, and the backend it was made on (NULL for
 * one made with strata_compute_create), whose copies and waits its stream
 * goes through. */
struct strata_compute {
	const strata_kernel_ops *ops;
	void *ctx;
	struct strata_backend *backend;
	strata_precision precision; /* as it was made */
};

/* Creates a compute context on `ops` (e.g. &strata_cpu_kernel_ops) with
 * `threads` workers (0: one per online processor), at the default
 * precision (FAST). The caller owns *out (strata_compute_destroy).
 * E_NOMEM / E_THREAD on failure, nothing leaked. */
strata_status strata_compute_create(const strata_kernel_ops *ops,
				    uint32_t threads, strata_compute **out,
				    strata_error *err);
/* The same with options (o NULL: the defaults); a precision outside
 * STRATA_PRECISION_MAP is E_INVALID_ARG. */
strata_status strata_compute_create_with(const strata_kernel_ops *ops,
					 const strata_compute_options *o,
					 strata_compute **out,
					 strata_error *err);
void strata_compute_destroy(strata_compute *c); /* NULL is fine */

/* The same on a backend's own kernel table; E_BACKEND_UNAVAILABLE naming
 * the backend when it has none. b must outlive the context. */
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
/* Both of the above with options (o NULL: the defaults): on b's kernel
 * table, and, when device_bytes is not NULL, measured as
 * strata_compute_create_measured measures. */
strata_status strata_compute_create_on_with(struct strata_backend *b,
					    const strata_compute_options *o,
					    strata_compute **out,
					    uint64_t *device_bytes,
					    strata_error *err);
uint32_t strata_compute_threads(const strata_compute *c);

/* The context's stream (it belongs to the context: never destroy it), for
 * the backend's event_record, stream_wait_event and synchronize; NULL
 * where kernels finish before they return (the CPU's). */
struct strata_stream *strata_compute_stream(const strata_compute *c);

/* Copies ordered after the kernels queued before them: host to device
 * (src must stay unchanged until strata_compute_finish) and device to host
 * (dst holds the bytes after strata_compute_finish). A memcpy where the
 * context has no stream; through the context's backend otherwise
 * (E_INVALID_ARG when it was made without one). Nothing is queued on
 * error. */
strata_status strata_compute_upload(strata_compute *c, void *dst,
				    const void *src, uint64_t bytes,
				    strata_error *err);
strata_status strata_compute_download(strata_compute *c, void *dst,
				      const void *src, uint64_t bytes,
				      strata_error *err);
/* Waits until everything queued on the context has run; a kernel's fault
 * shows here at the latest. */
strata_status strata_compute_finish(strata_compute *c, strata_error *err);
/* The reserve slot; nothing to do where the table has none. */
strata_status strata_compute_reserve(strata_compute *c, uint64_t bytes,
				     strata_error *err);

/* Wrappers: check shapes once (zero sizes, overflow of the buffer sizes,
 * GQA divisibility, token ids, weight types the table takes: E_UNSUPPORTED
 * naming the type and the table) and call the slot. */
strata_status strata_kernel_matmul(strata_compute *c, float *y, const float *x,
				   const strata_weight *w, const float *bias,
				   uint32_t n, strata_error *err);
strata_status strata_kernel_rmsnorm(strata_compute *c, float *y,
				    const float *x, const strata_weight *w,
				    uint32_t n, float eps, strata_error *err);
strata_status strata_kernel_rope(strata_compute *c, float *x, uint32_t n,
				 uint32_t pos0, uint32_t heads,
				 uint32_t head_dim, const float *inv_freq,
				 strata_rope_layout layout, strata_error *err);
strata_status strata_kernel_attention(strata_compute *c, float *out,
				      const float *q, const void *k,
				      const void *v,
				      const strata_attention_shape *shape,
				      strata_error *err);
/* KV cache rows in their type: dst (count elements of type) = src (count
 * f32, device memory of c). F32 is a device copy; F16 and BF16 round to
 * nearest even. E_UNSUPPORTED naming the type and the table when the
 * table has no such KV type (strata_kernel_kv_takes). */
strata_status strata_kernel_kv_store(strata_compute *c, void *dst,
				     strata_weight_type type, const float *src,
				     uint64_t count, strata_error *err);
/* Whether the table reads and writes KV caches of type t (F32 always). */
bool strata_kernel_kv_takes(const strata_compute *c, strata_weight_type t);
/* Bytes of one KV element of type t: 4 (F32), 2 (F16, BF16); 0 for a
 * type no KV cache holds. */
uint32_t strata_kv_type_bytes(strata_weight_type t);
strata_status strata_kernel_swiglu(strata_compute *c, float *gate,
				   const float *up, uint64_t count,
				   strata_error *err);
strata_status strata_kernel_add(strata_compute *c, float *y, const float *x,
				uint64_t count, strata_error *err);
strata_status strata_kernel_map(strata_compute *c, float *y, const float *x,
				uint64_t count, strata_map_op op, float a,
				strata_error *err);
strata_status strata_kernel_embed(strata_compute *c, float *x,
				  const strata_weight *table,
				  const int32_t *tokens, uint32_t n,
				  strata_error *err);
/* x[rows[i]] (dim) += weight[i] * y[i] (dim) for the m rows of y; x has
 * x_rows rows; rows and weight are host memory, rows distinct. The
 * product is rounded before the sum, as a scale then an add would. */
strata_status strata_kernel_scatter_add(strata_compute *c, float *x,
					uint32_t x_rows, float *y,
					const int32_t *rows,
					const float *weight, uint32_t m,
					uint32_t dim, strata_error *err);

/* f32 weights as strata_weight: the usual case on the CPU. */
static inline strata_weight strata_weight_f32(const float *data,
					      uint32_t rows, uint32_t cols)
{
	return (strata_weight){STRATA_WEIGHT_F32, data, rows, cols};
}

/* w's elements as f32 for the kernels that take f32 only (biases, rope
 * divisors): *out is w->data itself when w is f32 (or NULL when w->data
 * is), else w converted into `scratch` (w->rows x w->cols floats). */
strata_status strata_kernel_as_f32(strata_compute *c, const strata_weight *w,
				   float *scratch, const float **out,
				   strata_error *err);

/* Products sharing x (n, in): y_i = x' . w_i^T (+ bias_i), or y_i += that
 * when `accumulate`, with x' = x, or rmsnorm(x) * norm->w when norm is not
 * NULL. One fused call where the table takes it; else the norm into
 * `normed` (n, in; needed when norm is given), then one matmul per
 * product, each into `scratch` (n, its rows; needed with accumulate) then
 * added. count <= STRATA_KERNEL_PRODUCTS_MAX; no y_i aliases x. */
strata_status strata_kernel_products(strata_compute *c, const float *x,
				     const strata_kernel_norm *norm,
				     float *normed, uint32_t n,
				     const strata_kernel_product *p,
				     uint32_t count, bool accumulate,
				     float *scratch, strata_error *err);

/* The MLP's gate: y (n, gate.rows) = silu(x' . gate^T) * (x' . up^T), x'
 * as for strata_kernel_products (norm into `normed` where not fused). One
 * fused call where the table takes it; else the two products (up into
 * `up_out`, n x up.rows) and the SwiGLU. */
strata_status strata_kernel_gated(strata_compute *c, float *y, const float *x,
				  const strata_kernel_norm *norm,
				  float *normed, const strata_weight *gate,
				  const strata_weight *up, float *up_out,
				  uint32_t n, strata_error *err);

/* A mixture-of-experts layer's routed experts at once: for each hit e[i]
 * in order, for each of its rows r = e[i].rows[j], y[r] (dim) +=
 * e[i].weight[j] * down(silu(x[r] . gate^T) * (x[r] . up^T)), the product
 * rounded before the sum; x (n, dim) the normed input rows, y (n, dim)
 * the residual stream (not x). Every hit's weights have the first's
 * shapes, its rows increase and lie in [0, n). The table's experts slot
 * where it takes the call (CUDA, decode: every hit in five launches);
 * else, expert by expert, the gather (strata_kernel_embed) into s->in,
 * strata_kernel_gated into s->h (s->h2 its up product), the down into
 * s->out and strata_kernel_scatter_add: the same bits as those calls
 * made one expert at a time. E_INVALID_ARG naming the hit for a bad
 * shape, row or buffer. */
strata_status strata_kernel_experts(strata_compute *c, float *y,
				    const float *x, uint32_t n,
				    const strata_kernel_expert *e,
				    uint32_t count,
				    const strata_kernel_experts_scratch *s,
				    strata_error *err);

/* Rope on queries q (n, heads, head_dim) and keys k (n, kv_heads,
 * head_dim): the table's one call where it has it, else two. */
strata_status strata_kernel_rope_qk(strata_compute *c, float *q, float *k,
				    uint32_t n, uint32_t pos0, uint32_t heads,
				    uint32_t kv_heads, uint32_t head_dim,
				    const float *inv_freq,
				    strata_rope_layout layout,
				    strata_error *err);

#endif
