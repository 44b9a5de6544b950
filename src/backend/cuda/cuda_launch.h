/* cuda_launch.h - the launchers of the CUDA kernels, callable from C: each
 * queues one kernel on a stream and returns the launch status (layer:
 * backend).
 *
 * This header is shared by the .cu files (compiled as C++ by nvcc) and the
 * C glue, so it uses only plain types and the CUDA runtime's C API; shapes
 * were checked by the kernel wrappers (kernels.c) before any call here. All
 * pointers are device pointers. A return of cudaSuccess means the kernel was
 * queued, not that it ran: execution errors surface at the next
 * synchronisation.
 */
#ifndef STRATA_BACKEND_CUDA_LAUNCH_H
#define STRATA_BACKEND_CUDA_LAUNCH_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of half-precision weights (strata_cuda_half's values). */
enum { STRATA__CUDA_BF16 = 0, STRATA__CUDA_F16 = 1 };

/* Rows of x the GEMV kernel can take (it keeps one sum per row in
 * registers); which row counts use it is strata__cuda_gemv_rows_max. */
#define STRATA__CUDA_GEMV_ROWS 8u

/* y (n, dim) = x / sqrt(mean(x^2) + eps) * w (dim); y may be x. */
cudaError_t strata__cuda_rmsnorm(cudaStream_t s, float *y, const float *x,
				 const float *w, uint32_t n, uint32_t dim,
				 float eps);
/* The same with weights (dim) in bf16 or f16. */
cudaError_t strata__cuda_rmsnorm_half(cudaStream_t s, float *y, const float *x,
				      const void *w, int type, uint32_t n,
				      uint32_t dim, float eps);
/* dst = rmsnorm(x) * w as a half matmul input of `type` (bf16 or f16;
 * the weights w (dim) in it too, or f32 with w_f32): terms 1 rounded
 * once, terms 2 split as strata__cuda_to_half_split lays it out (2 n dim
 * elements); the same bits as the norm (strata__cuda_rmsnorm_half, or
 * strata__cuda_rmsnorm) followed by that conversion. */
cudaError_t strata__cuda_rmsnorm_to_half(cudaStream_t s, void *dst,
					 const float *x, const void *w,
					 int w_f32, int type, uint32_t n,
					 uint32_t dim, float eps, int terms);
/* x (n, heads, head_dim) and x2 (n, heads2, head_dim) rotated in place in
 * one launch (heads2 0: x alone); layout 0 rotate-half, 1 interleaved
 * (strata_rope_layout). */
cudaError_t strata__cuda_rope(cudaStream_t s, float *x, uint32_t heads,
			      float *x2, uint32_t heads2, uint32_t n,
			      uint32_t pos0, uint32_t head_dim,
			      const float *inv_freq, int layout);
/* The KV cache's element types the attention kernels read (kv_type). */
#define STRATA__CUDA_KV_F32 0
#define STRATA__CUDA_KV_F16 1
#define STRATA__CUDA_KV_BF16 2
/* dst (count elements of kv_type) = src (count f32), rounded to nearest
 * even; F32 a copy. */
cudaError_t strata__cuda_kv_store(cudaStream_t s, void *dst, int kv_type,
				  const float *src, uint64_t count);
/* out (n, heads, hd) = softmax(q k^T * scale, causal, window) v over the
 * caches k, v (positions, kv_heads, hd) of kv_type. The keys of each (query, head)
 * are split over several blocks when there are too few pairs to fill
 * `target_blocks` (decode): partial results go to `partials` (device,
 * partial_floats floats) and a second kernel combines them. */
cudaError_t strata__cuda_attention(cudaStream_t s, float *out, const float *q,
				   const void *k, const void *v, int kv_type,
				   uint32_t n,
				   uint32_t pos0, uint32_t heads,
				   uint32_t kv_heads, uint32_t head_dim,
				   uint32_t window, float scale, float softcap,
				   uint32_t target_blocks, float *partials,
				   uint64_t partial_floats);
/* Whether the tensor-core prefill kernel (kernels_flash.cu) takes a call:
 * two queries or more, head size 64 or 128, at least min_blocks blocks of
 * work (fewer go to strata__cuda_attention, which splits keys), and a
 * device whose blocks may take the kernel's shared memory (72 KiB at
 * head size 128). */
int strata__cuda_flash_takes(uint32_t n, uint32_t heads, uint32_t kv_heads,
			     uint32_t head_dim, uint32_t min_blocks);
/* 1 (2: three blocks a multiprocessor at head size 128): a 2-byte cache
 * at one rounding goes to kernels_flash_direct.cu; 0: to the f32-staging
 * kernel of kernels_flash.cu (tests compare them). */
extern int strata__cuda_flash_direct;
/* The same result as strata__cuda_attention on tensor cores, tiled, the
 * score matrix never formed; terms 3: inputs split into bf16 hi + lo
 * (~1e-5 of the f32 result), 1: rounded to bf16 once. */
cudaError_t strata__cuda_flash_attention(cudaStream_t s, float *out,
					 const float *q, const void *k,
					 const void *v, int kv_type,
					 uint32_t n,
					 uint32_t pos0, uint32_t heads,
					 uint32_t kv_heads, uint32_t head_dim,
					 uint32_t window, float scale,
					 int terms);
cudaError_t strata__cuda_map(cudaStream_t s, float *y, const float *x,
			     uint64_t count, int op, float a);
cudaError_t strata__cuda_swiglu(cudaStream_t s, float *gate, const float *up,
				uint64_t count);
cudaError_t strata__cuda_add(cudaStream_t s, float *y, const float *x,
			     uint64_t count);
/* x (n, dim, f32) = table rows tokens (device int32, n); the table's
 * elements f32 (half < 0) or STRATA__CUDA_BF16 / F16, converted exactly. */
cudaError_t strata__cuda_embed(cudaStream_t s, float *x, const void *table,
			       int half, const int32_t *tokens, uint32_t n,
			       uint32_t dim);
/* x[rows[i]] (dim) += weight[i] * y[i] (dim), i < m; rows and weight
 * device memory. */
cudaError_t strata__cuda_scatter_add(cudaStream_t s, float *x, const float *y,
				     const int32_t *rows, const float *weight,
				     uint32_t m, uint32_t dim);
/* y (n, out) += bias (out) on every row. */
cudaError_t strata__cuda_bias_add(cudaStream_t s, float *y, const float *bias,
				  uint32_t n, uint32_t out);
/* dst (count, bf16 or f16) = src (count, f32), round to nearest even. */
cudaError_t strata__cuda_to_half(cudaStream_t s, void *dst, const float *src,
				 uint64_t count, int type);
/* dst (2 * count, bf16 or f16) = src split in two terms: dst[0, count) is
 * src rounded, dst[count, 2 count) the rounded remainder, so that products
 * with both keep about 16 (bf16) or 22 (f16) bits of the f32 input. */
cudaError_t strata__cuda_to_half_split(cudaStream_t s, void *dst,
				       const float *src, uint64_t count,
				       int type);
/* GEMV tuning (kernels_gemv.cu; tests set them to compare): 16-byte
 * loads in flight per lane (4 or 8) and warps per output row (1, 2, 4; 0:
 * picked from the row count). */
extern int strata__cuda_gemv_unroll;
extern int strata__cuda_gemv_split;

/* y (n, out) = x (n, in) . w (out, in, bf16 or f16)^T (+ bias), f32
 * accumulation; n <= STRATA__CUDA_GEMV_ROWS. */
cudaError_t strata__cuda_gemv_half(cudaStream_t s, float *y, const float *x,
				   const void *w, int type, const float *bias,
				   uint32_t n, uint32_t in, uint32_t out);

/* y_i (out_i) (+)= x (in) . w_i (out_i, in)^T (+ bias_i) for the parts of
 * one launch: one row of x, f32 accumulation, weights of one type; with
 * norm, x is taken as rmsnorm(x) * norm. */
#define STRATA__CUDA_GEMV_PARTS 3
typedef struct strata__cuda_gemv_part {
	float *y;
	const void *w;
	const float *bias; /* or NULL */
	uint32_t out;
} strata__cuda_gemv_part;
typedef struct strata__cuda_gemv_parts {
	strata__cuda_gemv_part part[STRATA__CUDA_GEMV_PARTS];
	int count;
	int accumulate;	  /* y_i += instead of y_i = */
	const void *norm; /* rmsnorm's weights (in), same type, or NULL */
	float eps;
} strata__cuda_gemv_parts;
cudaError_t strata__cuda_gemv_half_parts(cudaStream_t s,
					 const strata__cuda_gemv_parts *p,
					 const float *x, int type, uint32_t in);

/* y (out) = silu(x (in) . gate^T) * (x . up^T): one row, f32 accumulation,
 * gate and up (out, in) of one half type; with norm (in, that type, or
 * NULL) x is taken as rmsnorm(x) * norm. */
cudaError_t strata__cuda_gemv_half_glu(cudaStream_t s, float *y,
				       const float *x, const void *gate,
				       const void *up, int type, uint32_t in,
				       uint32_t out, const void *norm,
				       float eps);

/* The block types of kernels_quant.cu: base's strata_block_type values
 * (cuda_compute.c asserts each equal). */
enum {
	STRATA__CUDA_Q8_0 = 3,
	STRATA__CUDA_Q4_0 = 4,
	STRATA__CUDA_Q4_1 = 5,
	STRATA__CUDA_Q5_0 = 6,
	STRATA__CUDA_Q5_1 = 7,
	STRATA__CUDA_Q2_K = 8,
	STRATA__CUDA_Q3_K = 9,
	STRATA__CUDA_Q4_K = 10,
	STRATA__CUDA_Q5_K = 11,
	STRATA__CUDA_Q6_K = 12,
	STRATA__CUDA_IQ4_NL = 13,
	STRATA__CUDA_IQ4_XS = 14,
};

/* Whether the block kernels take rows of `cols` elements of block type
 * `type` (a type above, cols whole blocks). */
int strata__cuda_quant_takes(int type, uint32_t cols);

/* y (n, out) = x (n, in) . w (out, in, block type `type`, as stored)^T
 * (+ bias), f32 accumulation; 1 <= n <= STRATA__CUDA_GEMV_ROWS, in whole
 * blocks, x 16-byte aligned. */
cudaError_t strata__cuda_gemv_quant(cudaStream_t s, float *y, const float *x,
				    const void *w, int type, const float *bias,
				    uint32_t n, uint32_t in, uint32_t out);

/* The decode GEMV built for the memory's rate (kernels_qgemv.cu): whether
 * it takes a product (Q8_0, Q4_0 on whole 32-element blocks; Q4_K, Q5_K,
 * Q6_K; w 4-byte aligned; x any float's alignment, 16 bytes fastest),
 * and the product itself, with strata__cuda_gemv_quant's contract (which
 * calls it where it takes).
 * Tuning (tests and benches set them to compare): whether it is used at
 * all (0: every product takes kernels_quant.cu's general GEMV), warps
 * sharing a row (0: picked from the row count; 1, 2, 4, 8) and steps
 * whose loads a lane issues before using any (4 or 8). */
extern int strata__cuda_qgemv_enabled;
extern int strata__cuda_qgemv_split;
extern int strata__cuda_qgemv_unroll;
int strata__cuda_qgemv_takes(int type, const void *w, uint32_t in);
cudaError_t strata__cuda_qgemv(cudaStream_t s, float *y, const float *x,
			       const void *w, int type, const float *bias,
			       uint32_t n, uint32_t in, uint32_t out);

/* The same kernel fused for decode, one row of x: the parts of p (their
 * w of block type `type`, each taken by strata__cuda_qgemv_takes), with
 * p->accumulate (y +=) and p->norm (rmsnorm's f32 weights, or NULL) as
 * strata__cuda_gemv_half_parts; glu: exactly two parts of equal rows,
 * gate and up, and part 0's y = silu(x . gate) * (x . up). */
cudaError_t strata__cuda_qgemv_fused(cudaStream_t s,
				     const strata__cuda_gemv_parts *p,
				     const float *x, int type, uint32_t in,
				     int glu);

/* The decode GEMV on 8-bit activations (kernels_qgemv_q8.cu), as
 * llama.cpp's MMVQ computes. strata__cuda_quantize_x quantizes x (n, in;
 * 1 <= n <= STRATA__CUDA_GEMV_ROWS, in whole 32-element blocks, any
 * float's alignment) into qx (strata__cuda_q8x_bytes(n, in) bytes, 16-byte
 * aligned) as the CPU's q8 decode does (per 16: dx = max|x| / 127, codes
 * rounded to nearest even, dx times their sum); with norm (rmsnorm's f32
 * weights, in) x is taken as rmsnorm(x) * norm first. strata__cuda_q8gemv
 * then computes the parts of p against it with strata__cuda_qgemv_fused's
 * contract, for n rows (y_i (n, out_i)), p->norm NULL (it is in qx); glu
 * needs n 1. strata__cuda_q8gemv_takes: Q8_0, Q4_0 on whole 32-element
 * blocks, Q4_K, Q5_K, Q6_K on whole super-blocks, w 4-byte aligned. The
 * tuning hooks are strata__cuda_qgemv_split and _unroll, and
 * strata__cuda_q8gemv_aligned (1: Q8_0 rows on 8-byte boundaries, and
 * Q4_K and Q5_K weights on 16-byte ones, take aligned 8- and 16-byte
 * loads; 0: the funnel-shifted words everywhere), strata__cuda_q8gemv_wide
 * (1, the default: Q4_K and Q5_K on 16-byte aligned weights, and Q6_K,
 * take the wide lanes of qgemv_q8_kquants.cuh, 16-byte loads of codes and
 * a lane two whole 16-element runs; 0: the lanes above for all),
 * strata__cuda_q8gemv_wide_q8_0 (1, the default: Q8_0 weights on 16-byte
 * boundaries with rows of a multiple of 256 elements take the wide lanes
 * of qgemv_q8_0_wide.cuh, a lane one whole 16-element run from two
 * aligned 16-byte loads; others keep the lanes above; 0: the lanes above
 * for all), and
 * strata__cuda_pdl
 * (1: the decode chain's kernels, the quantizations, these GEMVs and the
 * half ones (kernels_gemv.cu), rope, the decode attention and its combine
 * and the cache stores, are launched
 * as programmatic dependents of the kernel before them (cuda_common.cuh),
 * and a GEMV starts its weight loads while x is made; 0: ordinary
 * launches). */
extern int strata__cuda_q8gemv_aligned;
extern int strata__cuda_q8gemv_wide;
extern int strata__cuda_q8gemv_wide_q8_0;
extern int strata__cuda_pdl;
uint64_t strata__cuda_q8x_bytes(uint32_t n, uint32_t in);
int strata__cuda_q8gemv_takes(int type, const void *w, uint32_t in);
cudaError_t strata__cuda_quantize_x(cudaStream_t s, void *qx, const float *x,
				    uint32_t n, uint32_t in, const float *norm,
				    float eps);
cudaError_t strata__cuda_q8gemv(cudaStream_t s,
				const strata__cuda_gemv_parts *p,
				const void *qx, uint32_t n, int type,
				uint32_t in, int glu);

/* dst = columns [c0, c0 + cols) of `rows` rows of src (block type `type`,
 * rows of `in` elements) decoded as strata__cuda_dequant does, then in
 * bf16, row-major (rows, cols): `terms` 1, rounded once; 2, rounded and
 * (at dst + rows cols) the rounding's remainder rounded, so hi + lo keeps
 * ~16 bits. c0 and cols whole 32-element chunks, dst 16-byte aligned. */
cudaError_t strata__cuda_dequant_bf16(cudaStream_t s, void *dst,
				      const void *src, int type, uint64_t rows,
				      uint32_t in, uint32_t c0, uint32_t cols,
				      int terms);

/* dst (terms planes of (n, cols), bf16) = columns [c0, c0 + cols) of x
 * (n, in, f32): rounded, and with terms 2 the remainder rounded (as
 * strata__cuda_to_half_split). */
cudaError_t strata__cuda_split_cols(cudaStream_t s, void *dst,
				    const float *x, uint32_t n, uint32_t in,
				    uint32_t c0, uint32_t cols, int terms);

/* dst (rows, cols, f32) = rows of src (block type `type`, rows of cols
 * elements) decoded bit-identically to base's strata_block_decode: row i
 * is src's row ids[i] (device int32) when ids is not NULL, else row i.
 * dst 16-byte aligned. */
cudaError_t strata__cuda_dequant(cudaStream_t s, float *dst, const void *src,
				 int type, uint64_t rows, uint32_t cols,
				 const int32_t *ids);

#ifdef __cplusplus
}
#endif

#endif
