/* kernels_gemv.cu - the half-precision GEMV for decode (bf16 or f16
 * weights, f32 activations and accumulation) (layer: backend).
 *
 * Decode reads every weight once per token, so the GEMV is bound by memory
 * bandwidth: one or a few warps own an output row and stream it in 16-byte
 * loads, several in flight per lane, applying each weight to up to eight
 * activation rows while it is in registers.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

#define GEMV_THREADS 256u /* 8 warps */
#define GEMV_WARPS (GEMV_THREADS / 32u)

/* ------------------------------------------------------------------------ */
/* GEMV                                                                     */
/* ------------------------------------------------------------------------ */

/* Tuning (test_cuda_kernels sets them to compare): 16-byte loads in
 * flight per lane before any is used, and warps sharing one output row (0:
 * by the product). Measured on an H200 over one decode layer of the 7.5 GB
 * llama (4096 -> 6144 q,k,v, 4096 -> 4096, 4096 -> 2 x 14336, 14336 ->
 * 4096), back to back: 4 loads and one warp a row 138 us, 8 loads 146 us,
 * two warps a row for every product 143 us (slower o and down products,
 * faster q,k,v and gate/up with the norm folded in), four 179 us. So: 4,
 * and two warps a row only where a norm is folded in: 134 us. */
extern "C" {
int strata__cuda_gemv_unroll = 4;
int strata__cuda_gemv_split = 0;
}

/* The warps of a block share GEMV_WARPS / split rows, each warp one split
 * of the row's columns (a row split needs columns of whole 16-byte loads
 * per warp, and costs a shared-memory reduction). A folded norm adds work
 * per element of x, which two warps a row share (see the tuning above). */
static int gemv_split(uint32_t in, int vec, bool norm)
{
	int split = strata__cuda_gemv_split;
	if (split <= 0)
		split = norm ? 2 : 1;
	while (split > 1 && (!vec || in % (8u * split) != 0))
		split /= 2;
	return split;
}

/* acc[m][r] += w[m]'s row . x's row r over columns [k0, k1), this lane's
 * share, for M matrices at once (their loads in flight together). vec: the
 * rows and x are 16-byte aligned and k0, k1 multiples of 8, so each load
 * is 8 weights; U of them per lane are issued before any is used. The
 * weights are read once, streamed (evict-first) so they do not push x out
 * of the caches. NORM (one row): x is taken times the norm's weights g,
 * and ssq sums x's squares, for the caller to scale by rmsnorm's factor. */
template <typename T, int M, int NR, int U, bool NORM>
__device__ __forceinline__ void dot_rows(float (&acc)[M][NR],
					 const T *const (&w)[M], const T *g,
					 float &ssq, const float *x,
					 uint32_t in, uint32_t k0, uint32_t k1,
					 uint32_t lane, int vec)
{
	static_assert(!NORM || NR == 1, "the norm folds into one row");
	if (!vec) {
		for (uint32_t k = k0 + lane; k < k1; k += 32) {
			float xg[NR];
#pragma unroll
			for (int r = 0; r < NR; r++)
				xg[r] = x[(uint64_t)r * in + k];
			if (NORM) {
				ssq += xg[0] * xg[0];
				xg[0] *= strata__to_float(g[k]);
			}
#pragma unroll
			for (int m = 0; m < M; m++) {
				float wf = strata__to_float(w[m][k]);
#pragma unroll
				for (int r = 0; r < NR; r++)
					acc[m][r] += wf * xg[r];
			}
		}
		return;
	}
	for (uint32_t k = k0 + lane * 8; k < k1; k += 256 * U) {
		uint4 raw[M][U];
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int m = 0; m < M; m++)
				raw[m][u] = k + u * 256 < k1
						    ? __ldcs((const uint4 *)(w[m] + k +
									 u * 256))
						    : make_uint4(0, 0, 0, 0);
#pragma unroll
		for (int u = 0; u < U; u++) {
			const uint32_t kk = k + u * 256;
			if (kk >= k1)
				break;
#pragma unroll
			for (int r = 0; r < NR; r++) {
				const float4 *xp =
					(const float4 *)(x + (uint64_t)r * in + kk);
				const float4 a = xp[0], b = xp[1];
				float xe[8] = {a.x, a.y, a.z, a.w,
					       b.x, b.y, b.z, b.w};
				if (NORM) {
					const uint4 graw =
						__ldg((const uint4 *)(g + kk));
					const T *gv = (const T *)&graw;
#pragma unroll
					for (int t = 0; t < 8; t++) {
						ssq += xe[t] * xe[t];
						xe[t] *= strata__to_float(gv[t]);
					}
				}
#pragma unroll
				for (int m = 0; m < M; m++) {
					const T *wv = (const T *)&raw[m][u];
					float d = 0.0f;
#pragma unroll
					for (int t = 0; t < 8; t++)
						d += strata__to_float(wv[t]) * xe[t];
					acc[m][r] += d;
				}
			}
		}
	}
}

/* The block's rows of M matrices against x: warp `w` takes split
 * (w % split) of the columns of the block's row w / split; the row's
 * complete sums come back in every lane of the row's first warp, whose
 * *first is then true (false in the others, and where !valid: past the
 * last row, nothing read). NORM: the sums come back scaled by rmsnorm's
 * factor over x (in columns, eps) with x times g. Every thread of the
 * block must call it: a split's reduction has a barrier. */
template <typename T, int M, int NR, int U, bool NORM>
__device__ __forceinline__ void block_rows(float (&acc)[M][NR],
					   const T *const (&w)[M], bool valid,
					   const float *x, uint32_t in, int vec,
					   int split, const T *g, float eps,
					   bool *first)
{
	__shared__ float red[GEMV_WARPS][M * NR + 1];
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t part = warp % (uint32_t)split;
	const uint32_t cols = in / (uint32_t)split;
	float ssq = 0.0f;
#pragma unroll
	for (int m = 0; m < M; m++)
#pragma unroll
		for (int r = 0; r < NR; r++)
			acc[m][r] = 0.0f;
	strata__chain_wait(); /* a chained launch: x is written before us */
	if (valid)
		dot_rows<T, M, NR, U, NORM>(acc, w, g, ssq, x, in, part * cols,
					    part * cols + cols, lane, vec);
	strata__chain_next();
#pragma unroll
	for (int m = 0; m < M; m++)
#pragma unroll
		for (int r = 0; r < NR; r++)
			acc[m][r] = strata__warp_sum(acc[m][r]);
	if (NORM)
		ssq = strata__warp_sum(ssq);
	*first = valid && part == 0;
	if (split > 1) {
		if (lane == 0) {
#pragma unroll
			for (int m = 0; m < M; m++)
#pragma unroll
				for (int r = 0; r < NR; r++)
					red[warp][m * NR + r] = acc[m][r];
			red[warp][M * NR] = ssq;
		}
		__syncthreads();
		if (*first)
			for (uint32_t s = 1; s < (uint32_t)split; s++) {
#pragma unroll
				for (int m = 0; m < M; m++)
#pragma unroll
					for (int r = 0; r < NR; r++)
						acc[m][r] +=
							red[warp + s][m * NR + r];
				ssq += red[warp + s][M * NR];
			}
	}
	if (NORM && *first) {
		/* rmsnorm_kernel's factor, over the same sum of squares */
		const float f = 1.0f / sqrtf(ssq / (float)in + eps);
#pragma unroll
		for (int m = 0; m < M; m++)
			acc[m][0] *= f;
	}
}

/* This warp's row of the launch: rows per block are GEMV_WARPS / split. */
__device__ __forceinline__ uint64_t warp_row(int split)
{
	return (uint64_t)blockIdx.x * (GEMV_WARPS / (uint32_t)split) +
	       (threadIdx.x >> 5) / (uint32_t)split;
}

template <typename T, int NR, int U>
__global__ void gemv_kernel(float *y, const float *x, const T *w,
			    const float *bias, uint32_t in, uint32_t out,
			    int vec, int split)
{
	const uint64_t row = warp_row(split);
	const bool valid = row < out;
	const T *const wr[1] = {valid ? w + row * in : w};
	float acc[1][NR];
	bool first;
	block_rows<T, 1, NR, U, false>(acc, wr, valid, x, in, vec, split, NULL,
				       0.0f, &first);
	if (first && (threadIdx.x & 31) == 0) {
		float b = bias ? bias[row] : 0.0f;
#pragma unroll
		for (int r = 0; r < NR; r++)
			y[(uint64_t)r * out + row] = acc[0][r] + b;
	}
}

/* One row of x against several matrices at once (q, k and v; gate and
 * up): one launch instead of one each, and the small matrices' rows share
 * the grid with the large ones' instead of leaving most of the device idle.
 * Rows are numbered across the parts in order. */
template <typename T, int U, bool NORM>
__global__ void gemv_parts_kernel(strata__cuda_gemv_parts p, const float *x,
				  uint32_t in, int vec, int split)
{
	uint64_t row = warp_row(split);
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
	const T *const wr[1] = {y ? w + row * in : NULL};
	float acc[1][1];
	bool first;
	block_rows<T, 1, 1, U, NORM>(acc, wr, y != NULL, x, in, vec, split,
				     (const T *)p.norm, p.eps, &first);
	if (first && (threadIdx.x & 31) == 0) {
		float v = acc[0][0] + (bias ? bias[row] : 0.0f);
		y[row] = p.accumulate ? y[row] + v : v;
	}
}

/* y (out) = silu(x . gate^T) * (x . up^T), one row: each warp reads its
 * row of both matrices (their loads in flight together), and the SwiGLU
 * that would follow as a kernel of its own happens as the row is written
 * (the same formula as swiglu_kernel, so the same floats). */
template <typename T, int U, bool NORM>
__global__ void gemv_glu_kernel(float *y, const float *x, const T *gate,
				const T *up, uint32_t in, uint32_t out, int vec,
				int split, const T *norm, float eps)
{
	const uint64_t row = warp_row(split);
	const bool valid = row < out;
	const T *const wr[2] = {valid ? gate + row * in : gate,
				valid ? up + row * in : up};
	float acc[2][1];
	bool first;
	block_rows<T, 2, 1, U, NORM>(acc, wr, valid, x, in, vec, split, norm,
				     eps, &first);
	if (first && (threadIdx.x & 31) == 0) {
		const float g = acc[0][0], u = acc[1][0];
		y[row] = g / (1.0f + expf(-g)) * u;
	}
}

static unsigned gemv_grid(uint64_t rows, int split)
{
	const uint64_t per = GEMV_WARPS / (uint32_t)split;
	return (unsigned)((rows + per - 1) / per);
}

template <typename T>
static void gemv_launch(cudaStream_t s, float *y, const float *x, const T *w,
			const float *bias, uint32_t n, uint32_t in,
			uint32_t out)
{
	int vec = in % 8 == 0 && ((uintptr_t)w % 16) == 0 &&
		  ((uintptr_t)x % 16) == 0;
	int split = n == 1 ? gemv_split(in, vec, false) : 1;
	const dim3 grid(gemv_grid(out, split)), block(GEMV_THREADS);
	void (*k)(float *, const float *, const T *, const float *, uint32_t,
		  uint32_t, int, int) = NULL;
	if (n == 1 && strata__cuda_gemv_unroll >= 8)
		k = gemv_kernel<T, 1, 8>;
	else
		switch (n) {
		case 1: k = gemv_kernel<T, 1, 4>; break;
		case 2: k = gemv_kernel<T, 2, 4>; break;
		case 3: k = gemv_kernel<T, 3, 4>; break;
		case 4: k = gemv_kernel<T, 4, 4>; break;
		case 5: k = gemv_kernel<T, 5, 4>; break;
		case 6: k = gemv_kernel<T, 6, 4>; break;
		case 7: k = gemv_kernel<T, 7, 4>; break;
		case 8: k = gemv_kernel<T, 8, 4>; break;
		}
	if (k)
		(void)strata__launch_chained(k, grid, block, 0, s, y, x, w, bias,
					     in, out, vec, split);
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

/* The instance of kernel K<T, U, NORM> for the loads in flight and norm. */
#define GEMV_BY_TUNING(kernel, T, norm)                                        \
	(strata__cuda_gemv_unroll >= 8 ? ((norm) ? kernel<T, 8, true>          \
						 : kernel<T, 8, false>)        \
				       : ((norm) ? kernel<T, 4, true>          \
						 : kernel<T, 4, false>))

template <typename T>
static void glu_launch(cudaStream_t s, float *y, const float *x,
		       const void *gate, const void *up, uint32_t in,
		       uint32_t out, int vec, const void *norm, float eps)
{
	const int split = gemv_split(in, vec, norm != NULL);
	const unsigned grid = gemv_grid(out, split);
	const T *g = (const T *)gate, *u = (const T *)up, *nw = (const T *)norm;
	(void)strata__launch_chained(GEMV_BY_TUNING(gemv_glu_kernel, T,
						    norm != NULL),
				     dim3(grid), dim3(GEMV_THREADS), 0, s, y, x,
				     g, u, in, out, vec, split, nw, eps);
}

extern "C" cudaError_t strata__cuda_gemv_half_glu(
	cudaStream_t s, float *y, const float *x, const void *gate,
	const void *up, int type, uint32_t in, uint32_t out,
	const void *norm, float eps)
{
	int vec = in % 8 == 0 && ((uintptr_t)x % 16) == 0 &&
		  ((uintptr_t)gate % 16) == 0 && ((uintptr_t)up % 16) == 0 &&
		  ((uintptr_t)norm % 16) == 0;
	if (type == STRATA__CUDA_BF16)
		glu_launch<__nv_bfloat16>(s, y, x, gate, up, in, out, vec, norm,
					  eps);
	else
		glu_launch<__half>(s, y, x, gate, up, in, out, vec, norm, eps);
	return cudaGetLastError();
}

template <typename T>
static void parts_launch(cudaStream_t s, const strata__cuda_gemv_parts *p,
			 const float *x, uint32_t in, uint64_t rows, int vec)
{
	const int split = gemv_split(in, vec, p->norm != NULL);
	const unsigned grid = gemv_grid(rows, split);
	(void)strata__launch_chained(GEMV_BY_TUNING(gemv_parts_kernel, T,
						    p->norm != NULL),
				     dim3(grid), dim3(GEMV_THREADS), 0, s, *p, x,
				     in, vec, split);
}

extern "C" cudaError_t strata__cuda_gemv_half_parts(
	cudaStream_t s, const strata__cuda_gemv_parts *p, const float *x,
	int type, uint32_t in)
{
	uint64_t rows = 0;
	int vec = in % 8 == 0 && ((uintptr_t)x % 16) == 0 &&
		  ((uintptr_t)p->norm % 16) == 0;
	if (p->count < 1 || p->count > STRATA__CUDA_GEMV_PARTS)
		return cudaErrorInvalidValue;
	for (int i = 0; i < p->count; i++) {
		rows += p->part[i].out;
		vec = vec && ((uintptr_t)p->part[i].w % 16) == 0;
	}
	if (type == STRATA__CUDA_BF16)
		parts_launch<__nv_bfloat16>(s, p, x, in, rows, vec);
	else
		parts_launch<__half>(s, p, x, in, rows, vec);
	return cudaGetLastError();
}
