/* kernels_elementwise.cu - CUDA RMSNorm, SwiGLU, residual add, bias add,
 * embedding lookup, f32-to-half conversion and RMSNorm into a half matmul
 * input (layer: backend).
 *
 * Each kernel follows the CPU kernel's formula step for step (RMSNorm's mean
 * of squares in double, silu as g / (1 + e^-g)), so the two agree to float
 * rounding; element loops use a grid stride so any count fits one launch.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

#define EW_THREADS 256u
/* 1024: a decode row (n = 1) is one block, so its threads are all the
 * norm gets; 256 took 7.8 us for 4096 elements on an H200. */
#define NORM_THREADS 1024u

/* ------------------------------------------------------------------------ */

/* 1 / sqrt(mean(x^2) + eps) of one row, the squares summed in double as
 * the CPU kernel sums them; every thread of the block calls it and gets
 * the same sum, so the same factor. */
__device__ __forceinline__ float rms_factor(const float *xr, uint32_t dim,
					    float eps, double *red)
{
	double ss = 0.0;
	for (uint32_t e = threadIdx.x; e < dim; e += blockDim.x) {
		double v = xr[e];
		ss += v * v;
	}
	ss = strata__block_sum(ss, red);
	return 1.0f / sqrtf((float)(ss / dim) + eps);
}

/* One block per row (grid stride over rows). Weights f32, or half ones
 * read as they are stored (exactly their f32 values), which spares decode
 * a conversion launch per norm. */
template <typename W>
__global__ void rmsnorm_kernel(float *y, const float *x, const W *w,
			       uint32_t n, uint32_t dim, float eps)
{
	__shared__ double red[NORM_THREADS / 32];
	for (uint32_t row = blockIdx.x; row < n; row += gridDim.x) {
		const float *xr = x + (uint64_t)row * dim;
		float *yr = y + (uint64_t)row * dim;
		const float r = rms_factor(xr, dim, eps, red);
		for (uint32_t e = threadIdx.x; e < dim; e += blockDim.x)
			yr[e] = (xr[e] * r) * strata__to_float(w[e]);
	}
}

/* rmsnorm_kernel's rows written straight as a matmul's half input: the
 * same value per element, rounded to T (TERMS 1), or split as
 * to_half_split_kernel splits it (TERMS 2: the rounded value at dst, the
 * rounded remainder `count` further on). So a prefill product with the
 * norm folded in sees the bits the norm-then-convert pair gave it, without
 * the f32 rows' write and read between the two launches. The norm's
 * weights W are the product's type or f32 (GGUF files store norms in f32),
 * read as rmsnorm_kernel reads them. */
template <typename W, typename T, int TERMS>
__global__ void rmsnorm_to_half_kernel(T *dst, const float *x, const W *w,
				       uint32_t n, uint32_t dim, float eps)
{
	__shared__ double red[NORM_THREADS / 32];
	const uint64_t count = (uint64_t)n * dim;
	for (uint32_t row = blockIdx.x; row < n; row += gridDim.x) {
		const float *xr = x + (uint64_t)row * dim;
		T *dr = dst + (uint64_t)row * dim;
		const float r = rms_factor(xr, dim, eps, red);
		for (uint32_t e = threadIdx.x; e < dim; e += blockDim.x) {
			const float v = (xr[e] * r) * strata__to_float(w[e]);
			const T hi = strata__from_float<T>(v);
			dr[e] = hi;
			if (TERMS > 1)
				dr[count + e] = strata__from_float<T>(
					v - strata__to_float(hi));
		}
	}
}

__global__ void swiglu_kernel(float *gate, const float *up, uint64_t count)
{
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride) {
		float g = gate[i];
		gate[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

__global__ void add_kernel(float *y, const float *x, uint64_t count)
{
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride)
		y[i] += x[i];
}

/* op as strata_map_op: 0 scale, 1 softcap, 2 add a constant, 3 GeGLU
 * (y = gelu_tanh(y) * x). */
__global__ void map_kernel(float *y, const float *x, uint64_t count, int op,
			   float a)
{
	const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride) {
		float v = x[i];
		if (op == 0) {
			y[i] = v * a;
		} else if (op == 1) {
			y[i] = a * tanhf(v / a);
		} else if (op == 2) {
			y[i] = v + a;
		} else {
			float g = y[i];
			y[i] = 0.5f * g *
			       (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * v;
		}
	}
}

__device__ __forceinline__ float embed_value(float v) { return v; }
__device__ __forceinline__ float embed_value(__nv_bfloat16 v)
{
	return strata__to_float(v);
}
__device__ __forceinline__ float embed_value(__half v)
{
	return strata__to_float(v);
}

/* Rows `tokens` of table into x as f32 (a half element converts
 * exactly), every row of the pass in one launch. */
template <typename T>
__global__ void embed_kernel(float *x, const T *table, const int32_t *tokens,
			     uint32_t n, uint32_t dim)
{
	uint64_t count = (uint64_t)n * dim;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride) {
		uint64_t row = i / dim, e = i % dim;
		x[i] = embed_value(
			table[(uint64_t)(uint32_t)tokens[row] * dim + e]);
	}
}

/* x[rows[i]] += weight[i] * y[i], the product rounded first (no FMA), as
 * the scale and add it replaces. */
__global__ void scatter_add_kernel(float *x, const float *y,
				   const int32_t *rows, const float *weight,
				   uint32_t m, uint32_t dim)
{
	uint64_t count = (uint64_t)m * dim;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride) {
		uint64_t r = i / dim, e = i % dim;
		float *o = x + (uint64_t)(uint32_t)rows[r] * dim + e;
		*o = __fadd_rn(*o, __fmul_rn(weight[r], y[i]));
	}
}

__global__ void bias_add_kernel(float *y, const float *bias, uint32_t n,
				uint32_t out)
{
	uint64_t count = (uint64_t)n * out;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride)
		y[i] += bias[i % out];
}

template <typename T>
__global__ void to_half_kernel(T *dst, const float *src, uint64_t count)
{
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride)
		dst[i] = strata__from_float<T>(src[i]);
}

/* hi[i] + lo[i] == src[i] to about twice the half type's precision: hi is
 * src rounded, lo the rounded remainder (lo sits `count` after hi). */
template <typename T>
__global__ void to_half_split_kernel(T *dst, const float *src, uint64_t count)
{
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride) {
		T hi = strata__from_float<T>(src[i]);
		dst[i] = hi;
		dst[count + i] = strata__from_float<T>(src[i] - strata__to_float(hi));
	}
}

/* ------------------------------------------------------------------------ */

extern "C" cudaError_t strata__cuda_rmsnorm(cudaStream_t s, float *y,
					    const float *x, const float *w,
					    uint32_t n, uint32_t dim, float eps)
{
	rmsnorm_kernel<<<strata__grid(n, 1), NORM_THREADS, 0, s>>>(y, x, w, n,
								    dim, eps);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_rmsnorm_half(cudaStream_t s, float *y,
						 const float *x, const void *w,
						 int type, uint32_t n,
						 uint32_t dim, float eps)
{
	unsigned grid = strata__grid(n, 1);
	if (type == STRATA__CUDA_BF16)
		rmsnorm_kernel<<<grid, NORM_THREADS, 0, s>>>(
			y, x, (const __nv_bfloat16 *)w, n, dim, eps);
	else
		rmsnorm_kernel<<<grid, NORM_THREADS, 0, s>>>(
			y, x, (const __half *)w, n, dim, eps);
	return cudaGetLastError();
}

template <typename W, typename T>
static cudaError_t rmsnorm_to_half(cudaStream_t s, void *dst, const float *x,
				   const void *w, uint32_t n, uint32_t dim,
				   float eps, int terms)
{
	const unsigned grid = strata__grid(n, 1);
	if (terms > 1)
		rmsnorm_to_half_kernel<W, T, 2><<<grid, NORM_THREADS, 0, s>>>(
			(T *)dst, x, (const W *)w, n, dim, eps);
	else
		rmsnorm_to_half_kernel<W, T, 1><<<grid, NORM_THREADS, 0, s>>>(
			(T *)dst, x, (const W *)w, n, dim, eps);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_rmsnorm_to_half(cudaStream_t s, void *dst,
						    const float *x,
						    const void *w, int w_f32,
						    int type, uint32_t n,
						    uint32_t dim, float eps,
						    int terms)
{
	if (type == STRATA__CUDA_BF16)
		return w_f32 ? rmsnorm_to_half<float, __nv_bfloat16>(
				       s, dst, x, w, n, dim, eps, terms)
			     : rmsnorm_to_half<__nv_bfloat16, __nv_bfloat16>(
				       s, dst, x, w, n, dim, eps, terms);
	return w_f32 ? rmsnorm_to_half<float, __half>(s, dst, x, w, n, dim, eps,
						      terms)
		     : rmsnorm_to_half<__half, __half>(s, dst, x, w, n, dim, eps,
						       terms);
}

extern "C" cudaError_t strata__cuda_swiglu(cudaStream_t s, float *gate,
					   const float *up, uint64_t count)
{
	swiglu_kernel<<<strata__grid(count, EW_THREADS), EW_THREADS, 0, s>>>(
		gate, up, count);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_add(cudaStream_t s, float *y,
					const float *x, uint64_t count)
{
	add_kernel<<<strata__grid(count, EW_THREADS), EW_THREADS, 0, s>>>(
		y, x, count);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_map(cudaStream_t s, float *y,
					const float *x, uint64_t count, int op,
					float a)
{
	map_kernel<<<strata__grid(count, EW_THREADS), EW_THREADS, 0, s>>>(
		y, x, count, op, a);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_embed(cudaStream_t s, float *x,
					  const void *table, int half,
					  const int32_t *tokens, uint32_t n,
					  uint32_t dim)
{
	unsigned grid = strata__grid((uint64_t)n * dim, EW_THREADS);
	if (half < 0)
		embed_kernel<<<grid, EW_THREADS, 0, s>>>(
			x, (const float *)table, tokens, n, dim);
	else if (half == STRATA__CUDA_BF16)
		embed_kernel<<<grid, EW_THREADS, 0, s>>>(
			x, (const __nv_bfloat16 *)table, tokens, n, dim);
	else
		embed_kernel<<<grid, EW_THREADS, 0, s>>>(
			x, (const __half *)table, tokens, n, dim);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_scatter_add(cudaStream_t s, float *x,
						const float *y,
						const int32_t *rows,
						const float *weight, uint32_t m,
						uint32_t dim)
{
	scatter_add_kernel<<<strata__grid((uint64_t)m * dim, EW_THREADS),
			     EW_THREADS, 0, s>>>(x, y, rows, weight, m, dim);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_bias_add(cudaStream_t s, float *y,
					     const float *bias, uint32_t n,
					     uint32_t out)
{
	bias_add_kernel<<<strata__grid((uint64_t)n * out, EW_THREADS),
			  EW_THREADS, 0, s>>>(y, bias, n, out);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_to_half(cudaStream_t s, void *dst,
					    const float *src, uint64_t count,
					    int type)
{
	unsigned grid = strata__grid(count, EW_THREADS);
	if (type == STRATA__CUDA_BF16)
		to_half_kernel<<<grid, EW_THREADS, 0, s>>>(
			(__nv_bfloat16 *)dst, src, count);
	else
		to_half_kernel<<<grid, EW_THREADS, 0, s>>>((__half *)dst, src,
							   count);
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_to_half_split(cudaStream_t s, void *dst,
						  const float *src,
						  uint64_t count, int type)
{
	unsigned grid = strata__grid(count, EW_THREADS);
	if (type == STRATA__CUDA_BF16)
		to_half_split_kernel<<<grid, EW_THREADS, 0, s>>>(
			(__nv_bfloat16 *)dst, src, count);
	else
		to_half_split_kernel<<<grid, EW_THREADS, 0, s>>>(
			(__half *)dst, src, count);
	return cudaGetLastError();
}
