/* kernels_quant.cu - products and decoding on weights in ggml's block
 * types as stored (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL; Q2_K .. Q6_K,
 * IQ4_XS), f32 activations and accumulation (layer: backend).
 *
 * Every type is read in chunks of 32 elements (a 32-element block, or one
 * eighth of a 256-element super-block), decoded in registers exactly as
 * base's decoders do (quant_legacy.c, quant_kquants.c: each sub-block
 * factor rounded to f32 first, then one product and, for the types with a
 * min, one difference, with the _rn intrinsics so nvcc fuses nothing), so
 * decoding here is bit-identical to the CPU's. The GEMV (decode, up to
 * STRATA__CUDA_GEMV_ROWS rows of x) gives a warp each output row and each
 * lane a chunk at a time, reading the blocks once; several-row products
 * decode the weights into f32 (strata__cuda_dequant) for cuBLAS SGEMM
 * (cuda_compute.c).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

#define QUANT_THREADS 256u /* 8 warps: 8 output rows a block */
#define QUANT_WARPS (QUANT_THREADS / 32u)

/* ggml's kvalues_iq4nl, as base's strata__iq4nl_levels. */
__constant__ int8_t iq4nl_levels[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10,
	1,    13,   25,  38,  53,  69,  89,  113,
};

/* ------------------------------------------------------------------------ */
/* Decoding one chunk of 32 elements                                        */
/* ------------------------------------------------------------------------ */

__device__ __forceinline__ float load_f16(const uint8_t *p)
{
	unsigned short h = (unsigned short)(p[0] | (p[1] << 8));
	return __half2float(__ushort_as_half(h));
}

/* Nibble j (0..31) of a 32-element block's 16 bytes: low nibbles first. */
__device__ __forceinline__ int nibble(const uint8_t *qs, int j)
{
	return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
}

__device__ __forceinline__ uint32_t load_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

__device__ __forceinline__ void q4k_scale_min(const uint8_t *s, int j,
					      int *sc, int *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
		*m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
	}
}

__device__ __forceinline__ int q3k_scale(const uint8_t *s, int i)
{
	int lo = (s[i % 8] >> (4 * (i / 8))) & 0x0f;
	int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
	return (lo | hi << 4) - 32;
}

/* Elements [32 c, 32 c + 32) of a row of type T (row: its first block). */
template <int T>
__device__ __forceinline__ void decode32(const uint8_t *row, uint32_t c,
					 float (&y)[32])
{
	if (T == STRATA__CUDA_Q8_0) {
		const uint8_t *b = row + (uint64_t)c * 34;
		float d = load_f16(b);
#pragma unroll
		for (int j = 0; j < 32; j++)
			y[j] = __fmul_rn((float)(int8_t)b[2 + j], d);
	} else if (T == STRATA__CUDA_Q4_0 || T == STRATA__CUDA_IQ4_NL) {
		const uint8_t *b = row + (uint64_t)c * 18;
		float d = load_f16(b);
#pragma unroll
		for (int j = 0; j < 32; j++) {
			int q = nibble(b + 2, j);
			float v = T == STRATA__CUDA_Q4_0 ? (float)(q - 8)
							 : (float)iq4nl_levels[q];
			y[j] = __fmul_rn(d, v);
		}
	} else if (T == STRATA__CUDA_Q4_1) {
		const uint8_t *b = row + (uint64_t)c * 20;
		float d = load_f16(b), m = load_f16(b + 2);
#pragma unroll
		for (int j = 0; j < 32; j++)
			y[j] = __fadd_rn(__fmul_rn(d, (float)nibble(b + 4, j)),
					 m);
	} else if (T == STRATA__CUDA_Q5_0) {
		const uint8_t *b = row + (uint64_t)c * 22;
		float d = load_f16(b);
		uint32_t qh = load_u32(b + 2);
#pragma unroll
		for (int j = 0; j < 32; j++) {
			int q = nibble(b + 6, j) | (int)((qh >> j) & 1) << 4;
			y[j] = __fmul_rn(d, (float)(q - 16));
		}
	} else if (T == STRATA__CUDA_Q5_1) {
		const uint8_t *b = row + (uint64_t)c * 24;
		float d = load_f16(b), m = load_f16(b + 2);
		uint32_t qh = load_u32(b + 4);
#pragma unroll
		for (int j = 0; j < 32; j++) {
			int q = nibble(b + 8, j) | (int)((qh >> j) & 1) << 4;
			y[j] = __fadd_rn(__fmul_rn(d, (float)q), m);
		}
	} else if (T == STRATA__CUDA_Q2_K) {
		const uint8_t *b = row + (uint64_t)(c / 8) * 84;
		int s = c % 8;
		float d = load_f16(b + 80), dmin = load_f16(b + 82);
		const uint8_t *qs = b + 16;
#pragma unroll
		for (int half = 0; half < 2; half++) {
			int sb = b[2 * s + half];
			float dl = __fmul_rn(d, (float)(sb & 0x0f));
			float ml = __fmul_rn(dmin, (float)(sb >> 4));
#pragma unroll
			for (int i = 0; i < 16; i++) {
				int e = 32 * s + 16 * half + i, j = e % 128 / 32;
				int q = (qs[32 * (e / 128) + e % 32] >> (2 * j)) & 3;
				y[16 * half + i] = __fsub_rn(__fmul_rn(dl, (float)q),
							     ml);
			}
		}
	} else if (T == STRATA__CUDA_Q3_K) {
		const uint8_t *b = row + (uint64_t)(c / 8) * 110;
		int s = c % 8;
		const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
		float d = load_f16(b + 108);
#pragma unroll
		for (int half = 0; half < 2; half++) {
			float dl = __fmul_rn(d, (float)q3k_scale(sc, 2 * s + half));
#pragma unroll
			for (int i = 0; i < 16; i++) {
				int e = 32 * s + 16 * half + i, j = e % 128 / 32,
				    l = e % 32;
				int q = (qs[32 * (e / 128) + l] >> (2 * j)) & 3;
				int h = (hm[l] >> (e / 32)) & 1;
				y[16 * half + i] = __fmul_rn(
					dl, (float)(q - ((h ^ 1) << 2)));
			}
		}
	} else if (T == STRATA__CUDA_Q4_K || T == STRATA__CUDA_Q5_K) {
		const int bb = T == STRATA__CUDA_Q4_K ? 144 : 176;
		const uint8_t *b = row + (uint64_t)(c / 8) * bb;
		int s = c % 8, sc, m;
		float d = load_f16(b), dmin = load_f16(b + 2);
		q4k_scale_min(b + 4, s, &sc, &m);
		float dl = __fmul_rn(d, (float)sc), ml = __fmul_rn(dmin, (float)m);
		const uint8_t *qh = b + 16;
		const uint8_t *q = b + (T == STRATA__CUDA_Q4_K ? 16 : 48) +
				   32 * (s / 2);
		int shift = 4 * (s % 2);
#pragma unroll
		for (int l = 0; l < 32; l++) {
			int v = (q[l] >> shift) & 0x0f;
			if (T == STRATA__CUDA_Q5_K)
				v |= ((qh[l] >> s) & 1) << 4;
			y[l] = __fsub_rn(__fmul_rn(dl, (float)v), ml);
		}
	} else if (T == STRATA__CUDA_Q6_K) {
		const uint8_t *b = row + (uint64_t)(c / 8) * 210;
		int s = c % 8;
		const uint8_t *ql = b, *qh = b + 128, *sc = b + 192;
		float d = load_f16(b + 208);
#pragma unroll
		for (int half = 0; half < 2; half++) {
			float dl = __fmul_rn(d, (float)(int8_t)sc[2 * s + half]);
#pragma unroll
			for (int i = 0; i < 16; i++) {
				int e = 32 * s + 16 * half + i, h = e / 128,
				    r = e % 128;
				int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) &
					 0x0f;
				int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
				y[16 * half + i] =
					__fmul_rn(dl, (float)((lo | hi << 4) - 32));
			}
		}
	} else { /* IQ4_XS */
		const uint8_t *b = row + (uint64_t)(c / 8) * 136;
		int ib = c % 8;
		float d = load_f16(b);
		unsigned sh = (unsigned)(b[2] | (b[3] << 8));
		const uint8_t *sl = b + 4, *qs = b + 8;
		int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
			 (int)((sh >> (2 * ib)) & 3) << 4;
		float dl = __fmul_rn(d, (float)(ls - 32));
#pragma unroll
		for (int l = 0; l < 32; l++) {
			int q = (qs[16 * ib + l % 16] >> (4 * (l / 16))) & 0x0f;
			y[l] = __fmul_rn(dl, (float)iq4nl_levels[q]);
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                  */
/* ------------------------------------------------------------------------ */

/* y (n, out) = x (n, in) . w^T (+ bias): one warp an output row, each lane
 * a chunk of 32 columns at a time; NR >= n rows of x share each decoded
 * chunk. x rows are 16-byte aligned (in is a multiple of 32). */
template <int T, int NR>
__global__ void gemv_quant_kernel(float *y, const float *x, const uint8_t *w,
				  const float *bias, uint32_t n, uint32_t in,
				  uint32_t out, uint64_t row_bytes)
{
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t chunks = in / 32;
	for (uint64_t o = (uint64_t)blockIdx.x * QUANT_WARPS + warp; o < out;
	     o += (uint64_t)gridDim.x * QUANT_WARPS) {
		const uint8_t *row = w + o * row_bytes;
		float acc[NR];
#pragma unroll
		for (int r = 0; r < NR; r++)
			acc[r] = 0.0f;
		for (uint32_t c = lane; c < chunks; c += 32) {
			float v[32];
			decode32<T>(row, c, v);
#pragma unroll
			for (int r = 0; r < NR; r++) {
				if ((uint32_t)r >= n)
					break;
				const float4 *xr = (const float4 *)(
					x + (uint64_t)r * in + (uint64_t)c * 32);
#pragma unroll
				for (int q = 0; q < 8; q++) {
					float4 a = __ldg(xr + q);
					acc[r] += v[4 * q] * a.x +
						  v[4 * q + 1] * a.y +
						  v[4 * q + 2] * a.z +
						  v[4 * q + 3] * a.w;
				}
			}
		}
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			float s = strata__warp_sum(acc[r]);
			if (lane == 0)
				y[(uint64_t)r * out + o] =
					bias ? s + bias[o] : s;
		}
	}
}

/* dst (rows, cols, f32) = the decoding of rows of src: row i is src row
 * ids[i] when ids is given, else row i. One thread a chunk. */
template <int T>
__global__ void dequant_kernel(float *dst, const uint8_t *src, uint64_t rows,
			       uint32_t cols, uint64_t row_bytes,
			       const int32_t *ids)
{
	const uint32_t per_row = cols / 32;
	const uint64_t total = rows * per_row;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < total; i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t r = i / per_row;
		uint32_t c = (uint32_t)(i % per_row);
		uint64_t from = ids ? (uint64_t)ids[r] : r;
		float v[32];
		decode32<T>(src + from * row_bytes, c, v);
		float4 *d = (float4 *)(dst + r * cols + (uint64_t)c * 32);
#pragma unroll
		for (int q = 0; q < 8; q++)
			d[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2],
					   v[4 * q + 3]);
	}
}

/* dst = the decoding of columns [c0, c0 + cols) of rows [r0, r0 + rows)
 * of src in bf16, row-major (rows, cols), as `terms` terms: term 0 the
 * value rounded, term 1 (terms 2) what rounding left, rounded, at dst +
 * rows cols. One thread a 32-element chunk; c0 and cols whole chunks. */
template <int T>
__global__ void dequant_bf16_kernel(__nv_bfloat16 *dst, const uint8_t *src,
				    uint64_t rows, uint32_t cols, uint32_t c0,
				    uint64_t row_bytes, int terms)
{
	const uint32_t per_row = cols / 32;
	const uint64_t total = rows * per_row, plane = rows * cols;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < total; i += (uint64_t)gridDim.x * blockDim.x) {
		const uint64_t r = i / per_row;
		const uint32_t c = (uint32_t)(i % per_row);
		float v[32];
		decode32<T>(src + r * row_bytes, c0 / 32 + c, v);
		__nv_bfloat16 *d = dst + r * cols + (uint64_t)c * 32;
#pragma unroll
		for (int q = 0; q < 4; q++) {
			__align__(16) __nv_bfloat16 hi[8], lo[8];
#pragma unroll
			for (int t = 0; t < 8; t++) {
				hi[t] = __float2bfloat16_rn(v[8 * q + t]);
				lo[t] = __float2bfloat16_rn(
					v[8 * q + t] - __bfloat162float(hi[t]));
			}
			((uint4 *)d)[q] = *(const uint4 *)hi;
			if (terms > 1)
				((uint4 *)(d + plane))[q] = *(const uint4 *)lo;
		}
	}
}

/* dst (terms planes of (n, cols), bf16) = columns [c0, c0 + cols) of x
 * (n, in) split as to_half_split_kernel does (term 1 the remainder). */
__global__ void split_cols_kernel(__nv_bfloat16 *dst, const float *x,
				  uint32_t n, uint32_t in, uint32_t c0,
				  uint32_t cols, int terms)
{
	const uint64_t total = (uint64_t)n * cols;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < total; i += (uint64_t)gridDim.x * blockDim.x) {
		const uint64_t r = i / cols;
		const float v = x[r * in + c0 + i % cols];
		const __nv_bfloat16 hi = __float2bfloat16_rn(v);
		dst[i] = hi;
		if (terms > 1)
			dst[total + i] = __float2bfloat16_rn(v - __bfloat162float(hi));
	}
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                */
/* ------------------------------------------------------------------------ */

/* Bytes of one row of `cols` elements of type t; 0 for a type these
 * kernels do not take. */
static uint64_t row_bytes_of(int t, uint32_t cols)
{
	switch (t) {
	case STRATA__CUDA_Q8_0: return (uint64_t)cols / 32 * 34;
	case STRATA__CUDA_Q4_0: return (uint64_t)cols / 32 * 18;
	case STRATA__CUDA_Q4_1: return (uint64_t)cols / 32 * 20;
	case STRATA__CUDA_Q5_0: return (uint64_t)cols / 32 * 22;
	case STRATA__CUDA_Q5_1: return (uint64_t)cols / 32 * 24;
	case STRATA__CUDA_IQ4_NL: return (uint64_t)cols / 32 * 18;
	case STRATA__CUDA_Q2_K: return (uint64_t)cols / 256 * 84;
	case STRATA__CUDA_Q3_K: return (uint64_t)cols / 256 * 110;
	case STRATA__CUDA_Q4_K: return (uint64_t)cols / 256 * 144;
	case STRATA__CUDA_Q5_K: return (uint64_t)cols / 256 * 176;
	case STRATA__CUDA_Q6_K: return (uint64_t)cols / 256 * 210;
	case STRATA__CUDA_IQ4_XS: return (uint64_t)cols / 256 * 136;
	default: return 0;
	}
}

#define QUANT_TYPES(X)                                                         \
	X(Q8_0) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(IQ4_NL) X(Q2_K) X(Q3_K)     \
	X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_XS)

template <int T>
static void gemv_launch(cudaStream_t s, float *y, const float *x,
			const uint8_t *w, const float *bias, uint32_t n,
			uint32_t in, uint32_t out, uint64_t rb)
{
	unsigned grid = strata__grid(out, QUANT_WARPS);
	if (n == 1)
		gemv_quant_kernel<T, 1><<<grid, QUANT_THREADS, 0, s>>>(
			y, x, w, bias, n, in, out, rb);
	else if (n == 2)
		gemv_quant_kernel<T, 2><<<grid, QUANT_THREADS, 0, s>>>(
			y, x, w, bias, n, in, out, rb);
	else if (n <= 4)
		gemv_quant_kernel<T, 4><<<grid, QUANT_THREADS, 0, s>>>(
			y, x, w, bias, n, in, out, rb);
	else
		gemv_quant_kernel<T, 8><<<grid, QUANT_THREADS, 0, s>>>(
			y, x, w, bias, n, in, out, rb);
}

extern "C" int strata__cuda_quant_takes(int type, uint32_t cols)
{
	uint32_t per = type == STRATA__CUDA_Q2_K || type == STRATA__CUDA_Q3_K ||
				       type == STRATA__CUDA_Q4_K ||
				       type == STRATA__CUDA_Q5_K ||
				       type == STRATA__CUDA_Q6_K ||
				       type == STRATA__CUDA_IQ4_XS
			       ? 256u
			       : 32u;
	return row_bytes_of(type, cols) != 0 && cols % per == 0;
}

extern "C" cudaError_t strata__cuda_gemv_quant(cudaStream_t s, float *y,
					       const float *x, const void *w,
					       int type, const float *bias,
					       uint32_t n, uint32_t in,
					       uint32_t out)
{
	uint64_t rb = row_bytes_of(type, in);
	const uint8_t *wb = (const uint8_t *)w;
	if (!rb || n == 0 || n > STRATA__CUDA_GEMV_ROWS)
		return cudaErrorInvalidValue;
	if (strata__cuda_qgemv_takes(type, w, in))
		return strata__cuda_qgemv(s, y, x, w, type, bias, n, in, out);
	switch (type) {
#define GEMV_CASE(name)                                                        \
	case STRATA__CUDA_##name:                                              \
		gemv_launch<STRATA__CUDA_##name>(s, y, x, wb, bias, n, in, out, \
						 rb);                          \
		break;
		QUANT_TYPES(GEMV_CASE)
#undef GEMV_CASE
	default:
		return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_dequant(cudaStream_t s, float *dst,
					    const void *src, int type,
					    uint64_t rows, uint32_t cols,
					    const int32_t *ids)
{
	uint64_t rb = row_bytes_of(type, cols);
	const uint8_t *sb = (const uint8_t *)src;
	if (!rb)
		return cudaErrorInvalidValue;
	unsigned grid = strata__grid(rows * (cols / 32), 256);
	switch (type) {
#define DEQUANT_CASE(name)                                                     \
	case STRATA__CUDA_##name:                                              \
		dequant_kernel<STRATA__CUDA_##name><<<grid, 256, 0, s>>>(       \
			dst, sb, rows, cols, rb, ids);                         \
		break;
		QUANT_TYPES(DEQUANT_CASE)
#undef DEQUANT_CASE
	default:
		return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_dequant_bf16(cudaStream_t s, void *dst,
						 const void *src, int type,
						 uint64_t rows, uint32_t in,
						 uint32_t c0, uint32_t cols,
						 int terms)
{
	uint64_t rb = row_bytes_of(type, in);
	const uint8_t *sb = (const uint8_t *)src;
	__nv_bfloat16 *d = (__nv_bfloat16 *)dst;
	if (!rb || cols % 32 || c0 % 32 || (uint64_t)c0 + cols > in ||
	    terms < 1 || terms > 2 || ((uintptr_t)dst & 15))
		return cudaErrorInvalidValue;
	unsigned grid = strata__grid(rows * (cols / 32), 256);
	switch (type) {
#define DEQUANT_BF16_CASE(name)                                                \
	case STRATA__CUDA_##name:                                              \
		dequant_bf16_kernel<STRATA__CUDA_##name><<<grid, 256, 0, s>>>(  \
			d, sb, rows, cols, c0, rb, terms);                     \
		break;
		QUANT_TYPES(DEQUANT_BF16_CASE)
#undef DEQUANT_BF16_CASE
	default:
		return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

extern "C" cudaError_t strata__cuda_split_cols(cudaStream_t s, void *dst,
					       const float *x, uint32_t n,
					       uint32_t in, uint32_t c0,
					       uint32_t cols, int terms)
{
	if ((uint64_t)c0 + cols > in || terms < 1 || terms > 2)
		return cudaErrorInvalidValue;
	split_cols_kernel<<<strata__grid((uint64_t)n * cols, 256), 256, 0, s>>>(
		(__nv_bfloat16 *)dst, x, n, in, c0, cols, terms);
	return cudaGetLastError();
}
