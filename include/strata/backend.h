/* backend.h - one interface over the machines strata computes on: memory,
 * copies, streams and events, then compute kernels (layer: backend).
 *
 * A backend is an object {ops, ctx}: `ops` is one const table per kind of
 * backend (cpu, later cuda), `ctx` its private state. Every slot returns
 * strata_status. Callers use the strata_backend_* wrappers below, never the
 * slots directly: the wrappers check arguments once, so implementations can
 * trust them, and supply defaults for optional slots.
 *
 * Memory model. The "device" tier is one planned arena per run: a single
 * region of a fixed byte budget (one cudaMalloc on CUDA; a separate bounded
 * block of RAM on the CPU backend) that strata sub-allocates itself with
 * 256-byte alignment, so exceeding the plan is impossible by construction:
 * the arena refuses, and its own high-water mark proves the peak. Host
 * buffers that feed copies come from host_alloc (pinned on CUDA). Copies run
 * asynchronously on a copy stream; events recorded on a stream complete when
 * everything queued before them has, and carry a timestamp so the time
 * between two events is measurable (wall clock on the CPU backend).
 */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/backend_kernels.h"
#include "strata/base.h"

/* Every sub-allocation in an arena starts on this boundary (bytes). */
#define STRATA_BACKEND_ALIGN 256u

typedef struct strata_stream strata_stream; /* a queue of async work */
typedef struct strata_event strata_event;   /* a point in a stream */

/* What a backend can do, reported once instead of by trial calls. */
typedef struct strata_backend_caps {
	const char *name;	 /* "cpu", "cuda:0" */
	bool device_addressable; /* host code may read/write device pointers
				    (CPU: yes), so disk reads can land there */
	bool pinned_host;	 /* host_alloc can pin pages for faster copies */
	bool async_copy;	 /* copies overlap host work (a copy thread or
				    DMA engine) */
} strata_backend_caps;

/* Device memory as the backend sees it now. */
typedef struct strata_backend_memory {
	uint64_t total_bytes; /* the device's size (CPU: the configured bound) */
	uint64_t free_bytes;  /* not yet given to an arena */
} strata_backend_memory;

/* The slots. `ctx` is the backend's own state; stream and event pointers are
 * those the same backend returned. Arguments are already checked by the
 * wrappers (non-NULL, bytes > 0 where it matters). */
typedef struct strata_backend_ops {
	/* ---- memory, transfers, streams and events (residency) ---- */
	void (*destroy)(void *ctx);
	strata_status (*get_caps)(void *ctx, strata_backend_caps *out,
				  strata_error *err);
	strata_status (*memory_info)(void *ctx, strata_backend_memory *out,
				     strata_error *err);
	/* One region of `bytes` device memory, aligned to at least
	 * STRATA_BACKEND_ALIGN; E_DEVICE_OOM when it does not fit. */
	strata_status (*device_alloc)(void *ctx, uint64_t bytes, void **out,
				      strata_error *err);
	strata_status (*device_free)(void *ctx, void *ptr, strata_error *err);
	/* Host memory for copy sources; `pinned` asks for page-locked memory
	 * and is ignored where caps.pinned_host is false. */
	strata_status (*host_alloc)(void *ctx, uint64_t bytes, bool pinned,
				    void **out, strata_error *err);
	strata_status (*host_free)(void *ctx, void *ptr, strata_error *err);
	strata_status (*stream_create)(void *ctx, strata_stream **out,
				       strata_error *err);
	/* Waits for the stream's queued work, then frees it. */
	strata_status (*stream_destroy)(void *ctx, strata_stream *s,
					strata_error *err);
	/* Queues a host-to-device copy; `src` must stay valid and unchanged
	 * until an event recorded after it completes. */
	strata_status (*copy_h2d_async)(void *ctx, strata_stream *s, void *dst,
					const void *src, uint64_t bytes,
					strata_error *err);
	strata_status (*event_create)(void *ctx, strata_event **out,
				      strata_error *err);
	strata_status (*event_destroy)(void *ctx, strata_event *e,
				       strata_error *err);
	/* Marks the point after everything queued on `s` so far. Recording
	 * again moves the mark. */
	strata_status (*event_record)(void *ctx, strata_event *e,
				      strata_stream *s, strata_error *err);
	/* Blocks the calling thread until the event's point is reached; an
	 * event never recorded is complete. */
	strata_status (*event_wait)(void *ctx, strata_event *e,
				    strata_error *err);
	strata_status (*event_query)(void *ctx, strata_event *e, bool *done,
				     strata_error *err);
	/* Seconds between two completed events (end after start). */
	strata_status (*event_elapsed)(void *ctx, strata_event *start,
				       strata_event *end, double *seconds,
				       strata_error *err);
	/* Blocks until all work queued on `s` (or every stream, s == NULL) is
	 * done. */
	strata_status (*synchronize)(void *ctx, strata_stream *s,
				     strata_error *err);
	/* Optional (NULL: nothing to do): makes the calling thread able to
	 * use this backend's streams and events (CUDA: cudaSetDevice), for
	 * background threads that queue copies. */
	strata_status (*bind_thread)(void *ctx, strata_error *err);

	/* ---- compute kernels (infer): slots below belong to the inference
	 * work and are added there; residency never calls them. ---- */
	/* The backend's kernel table (backend_kernels.h); NULL when it
	 * cannot compute. Compute contexts are made from it with
	 * strata_compute_create. */
	const strata_kernel_ops *kernels;
} strata_backend_ops;

typedef struct strata_backend {
	const strata_backend_ops *ops;
	void *ctx;
} strata_backend;

/* ------------------------------------------------------------------------ */
/* The CPU backend                                                          */
/* ------------------------------------------------------------------------ */

typedef struct strata_backend_cpu_options {
	/* Bound on the simulated device memory (all arenas together);
	 * 0: unbounded (limited only by host memory). */
	uint64_t device_memory_bytes;
	/* For tests: report the device as not host-addressable (as CUDA is),
	 * so callers' staged paths run without a GPU. The memory stays RAM. */
	bool hide_addressable;
} strata_backend_cpu_options;

/* Creates the CPU backend; opt may be NULL. Its device memory is RAM kept
 * apart from host buffers and bounded by the option; copies are memcpy run
 * by one thread per stream, so copies really overlap compute. The caller
 * owns *out and frees it with strata_backend_destroy. */
strata_status strata_backend_cpu_create(const strata_backend_cpu_options *opt,
					strata_backend **out,
					strata_error *err);

/* The memory calls the CPU backend's device regions go through, so tests can
 * inject device OOM (STYLE.md: replaceable tables). Not to be changed while
 * a backend is allocating; strata_backend_cpu_sys_reset restores them. */
typedef struct strata_backend_cpu_sys_table {
	void *(*region_alloc)(size_t alignment, size_t bytes); /* NULL: OOM */
	void (*region_free)(void *ptr);
} strata_backend_cpu_sys_table;

extern strata_backend_cpu_sys_table strata_backend_cpu_sys;
void strata_backend_cpu_sys_reset(void);

/* ------------------------------------------------------------------------ */
/* The CUDA backend                                                         */
/* ------------------------------------------------------------------------ */

/* Every function of this section exists in every build; where strata was
 * built without CUDA they return E_BACKEND_UNAVAILABLE (and the device count
 * is 0), so callers need no #ifdef. */

typedef struct strata_backend_cuda_options {
	uint32_t device; /* CUDA device index, N of --device cuda:N */
} strata_backend_cuda_options;

/* CUDA devices usable now: 0 without a driver, a GPU, or CUDA support. */
uint32_t strata_backend_cuda_device_count(void);

/* Creates the CUDA backend on one device (opt may be NULL: device 0) and
 * makes that device current on the calling thread. device_alloc is one
 * cudaMalloc per arena; host_alloc with `pinned` is cudaHostAlloc (pinning
 * costs ~0.7 s/GiB: do it once at load); streams are non-blocking CUDA
 * streams, events are CUDA events with timing; copy_h2d_async is
 * cudaMemcpyAsync. E_BACKEND_UNAVAILABLE for a missing device, E_DEVICE for
 * other CUDA failures, each with a fix. The caller owns *out. */
strata_status strata_backend_cuda_create(const strata_backend_cuda_options *opt,
					 strata_backend **out,
					 strata_error *err);

/* The backend named by --device: "cpu" (with cpu_opt, which may be NULL),
 * "cuda" (device 0) or "cuda:N". E_USAGE naming the text for anything else;
 * otherwise what the chosen backend's create returns. */
strata_status strata_backend_create_named(const char *device,
					  const strata_backend_cpu_options *cpu_opt,
					  strata_backend **out,
					  strata_error *err);

/* The CUDA calls that allocate and copy, replaceable so tests can inject
 * device OOM and copy failures (STYLE.md). Each returns a cudaError_t value
 * (0 success, 2 cudaErrorMemoryAllocation); `kind` is a cudaMemcpyKind and
 * `stream` a cudaStream_t. Not to be changed while a backend is working;
 * strata_backend_cuda_sys_reset restores the real calls. */
typedef struct strata_backend_cuda_sys_table {
	int (*device_malloc)(void **ptr, size_t bytes);
	int (*device_free)(void *ptr);
	int (*host_alloc)(void **ptr, size_t bytes, unsigned int flags);
	int (*host_free)(void *ptr);
	int (*memcpy_async)(void *dst, const void *src, size_t bytes, int kind,
			    void *stream);
	int (*mem_get_info)(size_t *free_bytes, size_t *total_bytes);
} strata_backend_cuda_sys_table;

extern strata_backend_cuda_sys_table strata_backend_cuda_sys;
void strata_backend_cuda_sys_reset(void);

/* The CUDA kernel table: the slots and shapes of backend_kernels.h on
 * device pointers, except embed's `tokens`, which stay in host memory (the
 * wrapper reads them). compute_create ignores `threads` and binds the
 * context to the device current on the calling thread: its own compute
 * stream, a cuBLAS handle with a fixed workspace, and a small scratch block
 * (STRATA_CUDA_COMPUTE_DEVICE_BYTES of device memory in all, taken once).
 * Kernels are queued on that stream and return before they run: order work
 * against copies with events (strata_cuda_compute_stream and
 * strata_cuda_stream_wait_event) and read results after a synchronize.
 * matmul on f32 weights is cuBLAS SGEMM in full f32 (TF32 never enabled). */
extern const strata_kernel_ops strata_cuda_kernel_ops;

#define STRATA_CUDA_BLAS_WORKSPACE_BYTES ((uint64_t)8 << 20)
#define STRATA_CUDA_TOPK_MAX 256u
#define STRATA_CUDA_COMPUTE_DEVICE_BYTES                                       \
	(STRATA_CUDA_BLAS_WORKSPACE_BYTES + ((uint64_t)4 << 20))

/* The compute context's stream, usable with the CUDA backend's
 * event_record / synchronize / copies (it belongs to the context: never
 * destroy it). NULL when c is not a CUDA compute context. */
strata_stream *strata_cuda_compute_stream(strata_compute *c);

/* Makes later work on `s` wait until `e` completes, without blocking the
 * host (cudaStreamWaitEvent): how compute waits for a unit's copy. */
strata_status strata_cuda_stream_wait_event(strata_backend *b,
					    strata_stream *s, strata_event *e,
					    strata_error *err);

/* Queues a device-to-host copy on `s` (logits back to the host); `dst`
 * holds the bytes once an event recorded after it completes. Nothing is
 * queued on error. */
strata_status strata_cuda_copy_d2h_async(strata_backend *b, strata_stream *s,
					 void *dst, const void *src,
					 uint64_t bytes, strata_error *err);

/* Weight types of strata_cuda_matmul_half. */
typedef enum strata_cuda_half {
	STRATA_CUDA_BF16 = 0,
	STRATA_CUDA_F16 = 1,
} strata_cuda_half;

/* y (n, out, f32) = x (n, in, f32) . w (out, in, bf16 or f16)^T (+ bias
 * (out, f32) when not NULL), f32 accumulation. One row (decode) runs as a
 * GEMV kernel on f32 x; more rows split x into two terms of w's type
 * (x = hi + lo, ~16 bits for bf16) in a workspace of the context (grown
 * with one cudaMalloc when a larger n first appears: call once with the
 * largest prefill at load to keep allocation out of the token loop) and
 * run cublasGemmEx on each. All pointers on the device. */
strata_status strata_cuda_matmul_half(strata_compute *c, float *y,
				      const float *x, const void *w,
				      strata_cuda_half type, const float *bias,
				      uint32_t n, uint32_t in, uint32_t out,
				      strata_error *err);

/* Takes `bytes` of strata_cuda_matmul_half's input workspace now, at load,
 * instead of at the first several-row product that needs them (n rows of
 * `in` take n x in x 4 bytes: the plan's product_workspace_bytes). */
strata_status strata_cuda_matmul_half_reserve(strata_compute *c,
					      uint64_t bytes,
					      strata_error *err);

/* RMSNorm folded into a one-row half product: the product reads x as
 * stored and takes rmsnorm(x) * w in its place (w (in) of the product's
 * half type, device), so the norm needs no launch of its own. Within
 * rounding of strata_cuda_rmsnorm_half then the product: the norm's factor
 * scales each finished dot product instead of each element of x. */
typedef struct strata_cuda_half_norm {
	const void *w;
	float eps;
} strata_cuda_half_norm;

/* One product of strata_cuda_matmul_half_parts (device pointers). */
typedef struct strata_cuda_half_part {
	float *y;	   /* (n, out) */
	const void *w;	   /* (out, in), the call's type */
	const float *bias; /* (out), or NULL */
	uint32_t out;
} strata_cuda_half_part;
#define STRATA_CUDA_HALF_PARTS_MAX 3u

/* y_i = x (n, in) . w_i^T (+ bias_i) for up to STRATA_CUDA_HALF_PARTS_MAX
 * products that share x and the weights' type (q, k and v; gate and up),
 * or y_i += that when `accumulate` (a residual add folded into the
 * product). One row is one GEMV launch for every part; several rows split
 * x once and run strata_cuda_matmul_half's cuBLAS path for each part. No
 * y_i may alias x or its weights. `norm` (or NULL) takes one row only. */
strata_status strata_cuda_matmul_half_parts(strata_compute *c, const float *x,
					    const strata_cuda_half_norm *norm,
					    strata_cuda_half type, uint32_t n,
					    uint32_t in,
					    const strata_cuda_half_part *parts,
					    uint32_t count, bool accumulate,
					    strata_error *err);

/* The kernel table's rope on queries q (n, heads, head_dim) and keys k (n,
 * kv_heads, head_dim) in one launch: the same floats as two calls. */
strata_status strata_cuda_rope_qk(strata_compute *c, float *q, float *k,
				  uint32_t n, uint32_t pos0, uint32_t heads,
				  uint32_t kv_heads, uint32_t head_dim,
				  const float *inv_freq,
				  strata_rope_layout layout, strata_error *err);

/* y (out) = silu(x (in) . gate^T) * (x . up^T) for one row of x: the MLP's
 * two products and its SwiGLU in one launch, the same floats as
 * strata_cuda_matmul_half_parts then the kernel table's swiglu. gate and
 * up (out, in) of one half type; y may not alias x. With `norm` (or NULL)
 * x is taken as rmsnorm(x) * norm->w. */
strata_status strata_cuda_gated_half(strata_compute *c, float *y,
				     const float *x,
				     const strata_cuda_half_norm *norm,
				     const void *gate,
				     const void *up, strata_cuda_half type,
				     uint32_t in, uint32_t out,
				     strata_error *err);

/* The kernel table's rmsnorm with its weights (dim) in bf16 or f16, read
 * as stored: y (n, dim) = x / rms(x) * w, the same floats as converting w
 * first. y may equal x. */
strata_status strata_cuda_rmsnorm_half(strata_compute *c, float *y,
				       const float *x, const void *w,
				       strata_cuda_half type, uint32_t n,
				       uint32_t dim, float eps,
				       strata_error *err);

/* The k (1 .. STRATA_CUDA_TOPK_MAX) largest of logits (vocab, device),
 * computed on the device, best first, ties to the lower id, NaN counted
 * as -inf; vocab below 2^31. Waits for the compute stream, then fills
 * values[k] and ids[k] (host memory; ids -1 past vocab). argmax is k = 1. */
strata_status strata_cuda_topk(strata_compute *c, const float *logits,
			       uint32_t vocab, uint32_t k, float *values,
			       int32_t *ids, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Wrappers (use these)                                                     */
/* ------------------------------------------------------------------------ */

/* Frees the backend and its context. Streams, events and arenas made from it
 * must be destroyed first. NULL is fine. */
void strata_backend_destroy(strata_backend *b);

strata_status strata_backend_get_caps(strata_backend *b,
				      strata_backend_caps *out,
				      strata_error *err);
strata_status strata_backend_memory_info(strata_backend *b,
					 strata_backend_memory *out,
					 strata_error *err);

/* Host buffer of `bytes` (> 0) for copy sources; free with
 * strata_backend_host_free (NULL is fine). */
strata_status strata_backend_host_alloc(strata_backend *b, uint64_t bytes,
					bool pinned, void **out,
					strata_error *err);
void strata_backend_host_free(strata_backend *b, void *ptr);

strata_status strata_stream_create(strata_backend *b, strata_stream **out,
				   strata_error *err);
/* Drains then frees; NULL is fine. */
void strata_stream_destroy(strata_backend *b, strata_stream *s);

/* Queues a copy of `bytes` from host `src` to device `dst` on `s`. If this
 * returns an error nothing was queued and no later event covers it. */
strata_status strata_backend_copy_h2d_async(strata_backend *b,
					    strata_stream *s, void *dst,
					    const void *src, uint64_t bytes,
					    strata_error *err);

strata_status strata_event_create(strata_backend *b, strata_event **out,
				  strata_error *err);
void strata_event_destroy(strata_backend *b, strata_event *e); /* NULL ok */
strata_status strata_event_record(strata_backend *b, strata_event *e,
				  strata_stream *s, strata_error *err);
strata_status strata_event_wait(strata_backend *b, strata_event *e,
				strata_error *err);
strata_status strata_event_query(strata_backend *b, strata_event *e,
				 bool *done, strata_error *err);
strata_status strata_event_elapsed(strata_backend *b, strata_event *start,
				   strata_event *end, double *seconds,
				   strata_error *err);
/* s == NULL: every stream of the backend. */
strata_status strata_backend_synchronize(strata_backend *b, strata_stream *s,
					 strata_error *err);
/* Call once on a thread other than the creating one before it queues work
 * (the residency engine's readers do). */
strata_status strata_backend_bind_thread(strata_backend *b, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Arenas: one bounded region, sub-allocated with 256-byte alignment        */
/* ------------------------------------------------------------------------ */

typedef enum strata_arena_kind {
	STRATA_ARENA_DEVICE,	  /* device memory (device_alloc) */
	STRATA_ARENA_HOST_PINNED, /* host memory for copies (host_alloc) */
} strata_arena_kind;

typedef struct strata_arena strata_arena;

typedef struct strata_arena_stats {
	uint64_t capacity_bytes;   /* the budget it was created with */
	uint64_t used_bytes;	   /* live blocks, alignment padding included */
	uint64_t high_water_bytes; /* most used_bytes ever */
	uint64_t live_blocks;
	uint64_t refused;	   /* allocations refused for lack of room */
} strata_arena_stats;

/* Takes one region of `capacity_bytes` from the backend (nothing when 0) and
 * hands out blocks from it. `what` names it in errors ("device window").
 * E_DEVICE_OOM (device) or E_NOMEM (host) when the region cannot be had.
 * The caller owns *out; destroy it before the backend. */
strata_status strata_arena_create(strata_backend *b, strata_arena_kind kind,
				  uint64_t capacity_bytes, const char *what,
				  strata_arena **out, strata_error *err);
/* Frees the region and the arena, live blocks included. NULL is fine. */
void strata_arena_destroy(strata_arena *a);

/* A block of `bytes` (> 0) starting on a STRATA_BACKEND_ALIGN boundary,
 * first fit. E_RES_BUDGET when no free run is large enough: the message
 * names the arena, the request, the bytes in use and the capacity. The
 * arena is unchanged on error. */
strata_status strata_arena_alloc(strata_arena *a, uint64_t bytes, void **out,
				 strata_error *err);
/* Returns a block; NULL is fine. A pointer the arena did not hand out is
 * E_INVALID_ARG and changes nothing. */
strata_status strata_arena_free(strata_arena *a, void *ptr, strata_error *err);
void strata_arena_get_stats(const strata_arena *a, strata_arena_stats *out);

/* `bytes` rounded up to STRATA_BACKEND_ALIGN (checked: E_OVERFLOW naming
 * `what`). */
strata_status strata_arena_round(uint64_t bytes, uint64_t *out,
				 const char *what, strata_error *err);

#endif
