/* backend_cuda.h - the CUDA backend's own functions, beside the tables
 * of backend.h: its creation, its replaceable CUDA calls, its kernel table
 * and the half-precision kernels behind that table's slots (layer:
 * backend).
 *
 * These exist only where strata was built with CUDA (STRATA_HAVE_CUDA).
 * Nothing outside the backend layer uses them: other code reaches a CUDA
 * device through strata_backend_create("cuda", ...) and the tables; the
 * backend's own tests and benches call them to check each kernel.
 */
#ifndef STRATA_BACKEND_CUDA_H
#define STRATA_BACKEND_CUDA_H

#include "strata/backend.h"

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
 * against copies with events (strata_compute_stream and
 * strata_stream_wait_event) and read results after a synchronize.
 * matmul on f32 weights is cuBLAS SGEMM in full f32 (TF32 never enabled);
 * on bf16/f16 weights, strata_cuda_matmul_half; on block types a GEMV on
 * the stored blocks up to 8 rows, else the weights decoded to f32 a slice
 * at a time for SGEMM (cuda_quant.c); the fused slots are the functions
 * below. */
extern const strata_kernel_ops strata_cuda_kernel_ops;
/* Its weight types: f32, bf16, f16 and every GGUF block type, whose
 * products, embedding rows and conversions read the blocks as stored
 * (kernels_quant.cu); norms take f32 and half only. */
#define STRATA_CUDA_WEIGHT_TYPES ((1u << STRATA_WEIGHT_TYPE_COUNT) - 1)

#define STRATA_CUDA_BLAS_WORKSPACE_BYTES ((uint64_t)8 << 20)
#define STRATA_CUDA_COMPUTE_DEVICE_BYTES                                       \
	(STRATA_CUDA_BLAS_WORKSPACE_BYTES + ((uint64_t)4 << 20))
/* What CUDA takes later, as strata's kernels first run (kernels' code, local
 * memory): on the H200 (2026-12-02) a session's measured device use passed
 * its plan by up to 6.98 MB (the Q8_0 mixture of experts with the experts on
 * the CPU and a device cache) and 2 MiB (a Q4_K_M decode) before the plans
 * counted it; strata_backend_runtime_bytes. */
#define STRATA_CUDA_RUNTIME_DEVICE_BYTES ((uint64_t)8 << 20)

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

/* RMSNorm folded into a half product: the product reads x as stored and
 * takes rmsnorm(x) * w in its place (w (in) of the product's half type,
 * device). One row: the norm needs no launch of its own, and the result is
 * within rounding of strata_cuda_rmsnorm_half then the product (the norm's
 * factor scales each finished dot product instead of each element of x).
 * Several rows: the norm writes the product's half input directly, and the
 * result is that of the norm then the product, bit for bit. */
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
 * y_i may alias x or its weights. `norm` (or NULL): see above. */
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

#endif
