/* kernels_gemv_topk.cu - the half-precision GEMV for decode (bf16 or f16
 * weights, f32 activations and accumulation) and the device top-k behind
 * sampling (layer: backend).
 *
 * Decode reads every weight once per token, so the GEMV is bound by memory
 * bandwidth: a warp owns one output row and streams it in 16-byte loads,
 * applying each weight to up to eight activation rows while it is in
 * registers. Top-k runs in two stages: each block finds its chunk's best k
 * by k rounds of "largest below the previous pick", then one block does the
 * same over the blocks' candidates. The order is total (value, then the
 * lower index), so every round's pick is unique and repeats never happen.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

#define GEMV_THREADS 256u /* 8 warps: 8 output rows per block */
#define TOPK_THREADS 256u
#define TOPK_CHUNK 1024u  /* logits per first-stage block, at least */
#define NO_ID 0x7fffffff

/* ------------------------------------------------------------------------ */
/* GEMV                                                                     */
/* ------------------------------------------------------------------------ */

/* acc[r] += w's row wr . x's row r over `in`, this lane's share of it. */
template <typename T, int NR>
__device__ __forceinline__ void row_dot(float *acc, const T *wr,
					const float *x, uint32_t in,
					uint32_t lane, int vec)
{
	if (vec) {
		/* in % 8 == 0 and 16-byte aligned rows: 8 weights a load. */
#pragma unroll 4
		for (uint32_t k = lane * 8; k < in; k += 256) {
			/* streamed (evict-first): weights are read once,
			 * and must not push x out of the caches */
			uint4 raw = __ldcs((const uint4 *)(wr + k));
			const T *wv = (const T *)&raw;
			float wf[8];
#pragma unroll
			for (int t = 0; t < 8; t++)
				wf[t] = strata__to_float(wv[t]);
#pragma unroll
			for (int r = 0; r < NR; r++) {
				const float4 *xp =
					(const float4 *)(x + (uint64_t)r * in + k);
				float4 a = xp[0], b = xp[1];
				acc[r] += wf[0] * a.x + wf[1] * a.y +
					  wf[2] * a.z + wf[3] * a.w +
					  wf[4] * b.x + wf[5] * b.y +
					  wf[6] * b.z + wf[7] * b.w;
			}
		}
	} else {
		for (uint32_t k = lane; k < in; k += 32) {
			float wf = strata__to_float(wr[k]);
#pragma unroll
			for (int r = 0; r < NR; r++)
				acc[r] += wf * x[(uint64_t)r * in + k];
		}
	}
#pragma unroll
	for (int r = 0; r < NR; r++)
		acc[r] = strata__warp_sum(acc[r]);
}

template <typename T, int NR>
__global__ void gemv_kernel(float *y, const float *x, const T *w,
			    const float *bias, uint32_t in, uint32_t out,
			    int vec)
{
	const uint32_t lane = threadIdx.x & 31;
	const uint64_t row =
		(uint64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (row >= out)
		return; /* whole warps leave together: shuffles stay full */
	float acc[NR];
#pragma unroll
	for (int r = 0; r < NR; r++)
		acc[r] = 0.0f;
	row_dot<T, NR>(acc, w + row * in, x, in, lane, vec);
	if (lane == 0) {
		float b = bias ? bias[row] : 0.0f;
#pragma unroll
		for (int r = 0; r < NR; r++)
			y[(uint64_t)r * out + row] = acc[r] + b;
	}
}

/* One row of x against several matrices at once (q, k and v; gate and
 * up): one launch instead of one each, and the small matrices' rows share
 * the grid with the large ones' instead of leaving most of the device idle.
 * Rows are numbered across the parts in order. */
template <typename T>
__global__ void gemv_parts_kernel(strata__cuda_gemv_parts p, const float *x,
				  uint32_t in, int vec)
{
	const uint32_t lane = threadIdx.x & 31;
	uint64_t row =
		(uint64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	/* Parts picked with constant indices only: a dynamic index into the
	 * parameter struct would copy it to local memory in every thread. */
	float *y = NULL;
	const T *w = NULL;
	const float *bias = NULL;
#pragma unroll
	for (int i = 0; i < STRATA__CUDA_GEMV_PARTS; i++) {
		if (y || i >= p.count)
			continue;
		if (row < p.part[i].out) {
			y = p.part[i].y;
			w = (const T *)p.part[i].w;
			bias = p.part[i].bias;
		} else {
			row -= p.part[i].out;
		}
	}
	if (!y)
		return; /* whole warps leave together */
	float acc[1] = {0.0f};
	row_dot<T, 1>(acc, w + row * in, x, in, lane, vec);
	if (lane == 0) {
		float v = acc[0] + (bias ? bias[row] : 0.0f);
		y[row] = p.accumulate ? y[row] + v : v;
	}
}

template <typename T>
static void gemv_launch(cudaStream_t s, float *y, const float *x, const T *w,
			const float *bias, uint32_t n, uint32_t in,
			uint32_t out)
{
	unsigned grid = (unsigned)(((uint64_t)out + 7) / 8);
	int vec = in % 8 == 0 && ((uintptr_t)w % 16) == 0 &&
		  ((uintptr_t)x % 16) == 0;
#define GEMV_CASE(R)                                                           \
	case R:                                                                \
		gemv_kernel<T, R><<<grid, GEMV_THREADS, 0, s>>>(y, x, w, bias, \
								 in, out, vec); \
		break;
	switch (n) {
		GEMV_CASE(1)
		GEMV_CASE(2)
		GEMV_CASE(3)
		GEMV_CASE(4)
		GEMV_CASE(5)
		GEMV_CASE(6)
		GEMV_CASE(7)
		GEMV_CASE(8)
	}
#undef GEMV_CASE
}

extern "C" cudaError_t strata__cuda_gemv_half(cudaStream_t s, float *y,
					      const float *x, const void *w,
					      int type, const float *bias,
					      uint32_t n, uint32_t in,
					      uint32_t out)
{
	if (n < 1 || n > STRATA__CUDA_GEMV_ROWS)
		return cudaErrorInvalidValue;
	if (type == STRATA__CUDA_BF16)
		gemv_launch(s, y, x, (const __nv_bfloat16 *)w, bias, n, in, out);
	else
		gemv_launch(s, y, x, (const __half *)w, bias, n, in, out);
	return cudaGetLastError();
}

/* y (out) = silu(x . gate^T) * (x . up^T), one row: each warp reads its
 * row of both matrices, and the SwiGLU that would follow as a kernel of
 * its own happens as the row is written (the same formula as
 * swiglu_kernel, so the same floats). */
template <typename T>
__global__ void gemv_glu_kernel(float *y, const float *x, const T *gate,
				const T *up, uint32_t in, uint32_t out, int vec)
{
	const uint32_t lane = threadIdx.x & 31;
	const uint64_t row =
		(uint64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (row >= out)
		return;
	float g[1] = {0.0f}, u[1] = {0.0f};
	row_dot<T, 1>(g, gate + row * in, x, in, lane, vec);
	row_dot<T, 1>(u, up + row * in, x, in, lane, vec);
	if (lane == 0)
		y[row] = g[0] / (1.0f + expf(-g[0])) * u[0];
}

extern "C" cudaError_t strata__cuda_gemv_half_glu(cudaStream_t s, float *y,
						  const float *x,
						  const void *gate,
						  const void *up, int type,
						  uint32_t in, uint32_t out)
{
	unsigned grid = (unsigned)(((uint64_t)out + 7) / 8);
	int vec = in % 8 == 0 && ((uintptr_t)x % 16) == 0 &&
		  ((uintptr_t)gate % 16) == 0 && ((uintptr_t)up % 16) == 0;
	if (type == STRATA__CUDA_BF16)
		gemv_glu_kernel<<<grid, GEMV_THREADS, 0, s>>>(
			y, x, (const __nv_bfloat16 *)gate,
			(const __nv_bfloat16 *)up, in, out, vec);
	else
		gemv_glu_kernel<<<grid, GEMV_THREADS, 0, s>>>(
			y, x, (const __half *)gate, (const __half *)up, in, out,
			vec);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_gemv_half_parts(
	cudaStream_t s, const strata__cuda_gemv_parts *p, const float *x,
	int type, uint32_t in)
{
	uint64_t rows = 0;
	int vec = in % 8 == 0 && ((uintptr_t)x % 16) == 0;
	if (p->count < 1 || p->count > STRATA__CUDA_GEMV_PARTS)
		return cudaErrorInvalidValue;
	for (int i = 0; i < p->count; i++) {
		rows += p->part[i].out;
		vec = vec && ((uintptr_t)p->part[i].w % 16) == 0;
	}
	unsigned grid = (unsigned)((rows + 7) / 8);
	if (type == STRATA__CUDA_BF16)
		gemv_parts_kernel<__nv_bfloat16>
			<<<grid, GEMV_THREADS, 0, s>>>(*p, x, in, vec);
	else
		gemv_parts_kernel<__half><<<grid, GEMV_THREADS, 0, s>>>(*p, x,
									in, vec);
	return cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* Top-k                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct cand {
	float v;
	int32_t i; /* NO_ID: none */
} cand;

/* a ranks above b: larger value, or equal value and lower id. */
__device__ __forceinline__ bool above(cand a, cand b)
{
	return a.v > b.v || (a.v == b.v && a.i < b.i);
}

__device__ __forceinline__ cand warp_best(cand c)
{
	for (int o = 16; o > 0; o >>= 1) {
		cand d;
		d.v = __shfl_xor_sync(STRATA__FULL_MASK, c.v, o);
		d.i = __shfl_xor_sync(STRATA__FULL_MASK, c.i, o);
		if (above(d, c))
			c = d;
	}
	return c;
}

/* The block's best of `mine`, returned to every thread. */
__device__ cand block_best(cand mine, cand *red)
{
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const unsigned warps = blockDim.x >> 5;
	mine = warp_best(mine);
	if (lane == 0)
		red[warp] = mine;
	__syncthreads();
	cand b = red[0];
	for (unsigned i = 1; i < warps; i++)
		if (above(red[i], b))
			b = red[i];
	__syncthreads();
	return b;
}

/* NaN counts as -inf, so it can be picked but never above a number. */
__device__ __forceinline__ float clean(float v)
{
	return isnan(v) ? -INFINITY : v;
}

/* Stage 1: block b picks the best k of its chunk into partials[b*k ..]. */
__global__ void topk_chunks(const float *logits, uint32_t vocab, uint32_t k,
			    uint32_t chunk, cand *partials)
{
	__shared__ cand red[TOPK_THREADS / 32];
	const uint64_t lo = (uint64_t)blockIdx.x * chunk;
	const uint64_t hi = lo + chunk < vocab ? lo + chunk : vocab;
	cand prev = {INFINITY, -1}; /* everything ranks below it */
	for (uint32_t r = 0; r < k; r++) {
		cand best = {-INFINITY, NO_ID};
		for (uint64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
			cand c = {clean(logits[e]), (int32_t)e};
			if (above(prev, c) && above(c, best))
				best = c;
		}
		best = block_best(best, red);
		if (threadIdx.x == 0)
			partials[(uint64_t)blockIdx.x * k + r] = best;
		prev = best;
	}
}

/* Stage 2: one block merges the chunks' candidates into the final k. */
__global__ void topk_merge(const cand *partials, uint32_t count, uint32_t k,
			   float *out_values, int32_t *out_ids)
{
	__shared__ cand red[TOPK_THREADS / 32];
	cand prev = {INFINITY, -1};
	for (uint32_t r = 0; r < k; r++) {
		cand best = {-INFINITY, NO_ID};
		for (uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
			cand c = partials[e];
			if (c.i != NO_ID && above(prev, c) && above(c, best))
				best = c;
		}
		best = block_best(best, red);
		if (threadIdx.x == 0) {
			out_values[r] = best.v;
			out_ids[r] = best.i == NO_ID ? -1 : best.i;
		}
		prev = best;
	}
}

static uint32_t topk_blocks(uint32_t vocab)
{
	uint64_t b = ((uint64_t)vocab + TOPK_CHUNK - 1) / TOPK_CHUNK;
	return b > STRATA__CUDA_TOPK_BLOCKS ? STRATA__CUDA_TOPK_BLOCKS
					    : (uint32_t)(b ? b : 1);
}

extern "C" uint64_t strata__cuda_topk_scratch_bytes(uint32_t k)
{
	return (uint64_t)STRATA__CUDA_TOPK_BLOCKS * k * sizeof(cand);
}

extern "C" cudaError_t strata__cuda_topk(cudaStream_t s, const float *logits,
					 uint32_t vocab, uint32_t k,
					 void *partials, float *out_values,
					 int32_t *out_ids)
{
	if (vocab == 0 || vocab > (uint32_t)NO_ID - 1 || k == 0)
		return cudaErrorInvalidValue;
	uint32_t blocks = topk_blocks(vocab);
	uint32_t chunk = (uint32_t)(((uint64_t)vocab + blocks - 1) / blocks);
	topk_chunks<<<blocks, TOPK_THREADS, 0, s>>>(logits, vocab, k, chunk,
						    (cand *)partials);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	topk_merge<<<1, TOPK_THREADS, 0, s>>>((const cand *)partials,
					      blocks * k, k, out_values,
					      out_ids);
	return cudaGetLastError();
}
