/* cuda_internal.h - what the CUDA backend's C files share: the stream,
 * event and compute-context structures and the CUDA-to-strata error mapping
 * (layer: backend). */
#ifndef STRATA_BACKEND_CUDA_INTERNAL_H
#define STRATA_BACKEND_CUDA_INTERNAL_H

#include <pthread.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "strata/backend_cuda.h"

/* A CUDA stream. Streams made by stream_create are listed in the backend;
 * a compute context embeds its own (owned = false for the backend). */
struct strata_stream {
	cudaStream_t cuda;
	int device;
	struct strata_stream *next_stream;
};

/* A CUDA event with timing. `recorded` stays false until the first record,
 * so waiting on or querying a never-recorded event is "complete". */
struct strata_event {
	cudaEvent_t cuda;
	bool recorded;
};

/* The compute context behind strata_cuda_kernel_ops. */
typedef struct strata__cuda_compute {
	struct strata_stream stream; /* kernels queue here */
	cublasHandle_t blas;
	int device;
	uint32_t sm_count;    /* multiprocessors: sizes split attention */
	void *blas_ws;	      /* STRATA_CUDA_BLAS_WORKSPACE_BYTES */
	void *scratch;	      /* token ids, 1.0f, then split attention */
	void *half_ws;	      /* x converted for cublasGemmEx; grown */
	uint64_t half_ws_bytes;
	/* products and attention of prefill (n > 1 rows) with half-precision
	 * inputs: 3 (f32 inputs split in bf16 hi + lo, the default) or 1
	 * (rounded once): --precision exact / fast, cuda_compute.c */
	int prefill_terms;
	/* decode products (1 .. STRATA__CUDA_GEMV_ROWS rows) on the block
	 * types kernels_qgemv_q8.cu takes: 1 (the default) with x quantized
	 * to 8 bits as llama.cpp computes, 0 with f32 x (exact to f32
	 * rounding); --precision fast / exact, cuda_compute.c */
	int decode_q8;
} strata__cuda_compute;

/* Byte layout of the scratch block (inside STRATA_CUDA_COMPUTE_DEVICE_BYTES,
 * after the cuBLAS workspace): token ids, the constant 1.0f (the input of
 * the half-to-f32 conversion GEMV, written when the context is made), the
 * decode GEMV's quantized x, then the partial results of split attention. */
#define STRATA__CUDA_TOKENS_MAX 16384u /* token ids per embed launch */
#define STRATA__CUDA_SCRATCH_TOKENS 0u
#define STRATA__CUDA_SCRATCH_ONE (STRATA__CUDA_TOKENS_MAX * 4u)
/* x quantized for the decode GEMV (strata__cuda_quantize_x), up to the
 * attention's partials: 896 KiB, 1.5 bytes an element (8 rows of 75000) */
#define STRATA__CUDA_SCRATCH_Q8X ((uint64_t)128 << 10)
#define STRATA__CUDA_SCRATCH_ATTENTION ((uint64_t)1 << 20)
#define STRATA__CUDA_SCRATCH_BYTES ((uint64_t)4 << 20)

/* Test hook: split attention aims at this many blocks per multiprocessor
 * when there are too few (query, head) pairs (decode). */
extern uint32_t strata__cuda_attention_blocks_per_sm;

/* Test hook: prefill attention runs on the tensor-core kernel from this
 * many blocks of work up (strata__cuda_flash_takes). */
extern uint32_t strata__cuda_flash_min_blocks;

/* Test hook: half-precision products of up to this many rows (and at most
 * STRATA__CUDA_GEMV_ROWS) use the GEMV kernel, more use cuBLAS. */
extern uint32_t strata__cuda_gemv_rows_max;

/* Test and bench hooks of the block-type products (cuda_quant.c): more
 * rows than the GEMV takes go to tensor cores (1, the default) or f32
 * SGEMM (0); a tensor-core tile's columns at most (0: 2048). */
extern int strata__cuda_quant_prefill;
extern uint32_t strata__cuda_quant_kc_max;

/* Fills err from a failed CUDA call: E_DEVICE_OOM for allocation failures,
 * E_BACKEND_UNAVAILABLE when there is no usable device or driver, E_DEVICE
 * otherwise; the message names `what` and CUDA's own name and text for the
 * error, the fix says what to do. Clears CUDA's non-sticky last error.
 * Returns the code. */
strata_status strata__cuda_fail(strata_error *err, cudaError_t e,
				const char *what);
/* cuBLAS, opened at the first compute context (cublas_load.c): these are
 * its functions; `loaded` once strata__cublas_load succeeded. */
typedef struct strata_cublas_api {
	bool loaded;
	__typeof__(&cublasCreate) create;
	__typeof__(&cublasDestroy) destroy;
	__typeof__(&cublasSetStream) set_stream;
	__typeof__(&cublasSetWorkspace) set_workspace;
	__typeof__(&cublasSetMathMode) set_math_mode;
	__typeof__(&cublasSgemm) sgemm;
	__typeof__(&cublasGemmEx) gemm_ex;
	__typeof__(&cublasGetStatusName) status_name;
	__typeof__(&cublasGetStatusString) status_string;
} strata_cublas_api;
extern strata_cublas_api strata__cublas;

/* Opens cuBLAS once per process (thread-safe); E_BACKEND_UNAVAILABLE
 * naming the library and the loader's reason when it cannot. */
strata_status strata__cublas_load(strata_error *err);

strata_status strata__cublas_fail(strata_error *err, cublasStatus_t st,
				  const char *what);

/* Makes the context's product workspace (half_ws) hold `bytes`, draining
 * the stream before an old one goes (cuda_compute.c). */
strata_status strata__cuda_reserve_ws(strata__cuda_compute *k, uint64_t bytes,
				      strata_error *err);

/* The slots on ggml block types (cuda_quant.c): whether t is one; y (n,
 * w->rows) = x (n, w->cols) . w^T (+ bias); dst (rows, w->cols, f32) =
 * rows of w decoded (row i is w's row dev_ids[i], device int32, or row i
 * when dev_ids is NULL). */
bool strata__cuda_is_block(strata_weight_type t);
strata_status strata__cuda_quant_matmul(strata__cuda_compute *k, float *y,
					const float *x, const strata_weight *w,
					const float *bias, uint32_t n,
					strata_error *err);
strata_status strata__cuda_quant_rows(strata__cuda_compute *k, float *dst,
				      const strata_weight *w,
				      const int32_t *dev_ids, uint64_t rows,
				      strata_error *err);

/* The fused decode slots on block types (cuda_quant.c), one row of x:
 * the products of one block type the memory-rate GEMV takes (an f32
 * norm folded in, y += with accumulate), and gate/up with SwiGLU. The
 * _take functions say whether the slot takes the call. */
bool strata__cuda_quant_products_take(const strata_kernel_norm *norm,
				      uint32_t n,
				      const strata_kernel_product *p,
				      uint32_t count);
strata_status strata__cuda_quant_products(strata__cuda_compute *k,
					  const float *x,
					  const strata_kernel_norm *norm,
					  const strata_kernel_product *p,
					  uint32_t count, bool accumulate,
					  strata_error *err);
bool strata__cuda_quant_gated_take(const strata_kernel_norm *norm, uint32_t n,
				   const strata_weight *gate,
				   const strata_weight *up);
strata_status strata__cuda_quant_gated(strata__cuda_compute *k, float *y,
				       const float *x,
				       const strata_kernel_norm *norm,
				       const strata_weight *gate,
				       const strata_weight *up,
				       strata_error *err);

/* The experts slot (cuda_experts.c): a layer's routed experts in the
 * grouped kernels of kernels_experts.cu, where _take says it takes the
 * call (the 8-bit decode GEMVs' types and rows, the scratch block's
 * room). */
bool strata__cuda_experts_take(void *ctx, uint32_t n,
			       const strata_kernel_expert *e, uint32_t count);
strata_status strata__cuda_experts_run(void *ctx, float *y, const float *x,
				       uint32_t n,
				       const strata_kernel_expert *e,
				       uint32_t count, strata_error *err);

/* The compute context of c, or NULL when c is not a CUDA one. */
strata__cuda_compute *strata__cuda_compute_of(strata_compute *c);

#endif
