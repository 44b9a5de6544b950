/* kernels_qgemv.cu - the decode GEMV on the block types most files hold,
 * as stored (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), f32 activations and
 * accumulation, built to stream the weights at the memory's rate (layer:
 * backend).
 *
 * Decode reads every weight once per token, so what decides the time is
 * how many bytes are in flight. kernels_quant.cu's general GEMV gives each
 * lane a whole 32-element chunk and reads it byte by byte (34 loads a
 * Q8_0 block, strided by 34 bytes across the warp); here a warp reads a
 * contiguous run of blocks per step, each lane 4 or 8 bytes of codes as
 * aligned 32-bit words (a block that starts off a word boundary is put
 * together with a funnel shift), every lane's loads of QG_UNROLL steps
 * issued before any is used, and small matrices split their columns over
 * several warps of a block (QG_TARGET_WARPS) so the whole device streams.
 *
 * Codes become floats without the conversion unit (a quarter-rate
 * instruction): a byte b placed under the exponent of 2^23 is the float
 * 2^23 + b, so one byte permute and one subtraction give the code exactly.
 * Each lane sums code x activation over its elements of a (sub-)block and
 * applies the block's factor once: the same products as decoding each
 * weight first, rounded in a different order (within the tests' 1e-4 of
 * the CPU's stored product; docs/quant.md).
 */
#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/qgemv_loads.cuh"

extern "C" {
int strata__cuda_qgemv_enabled = 1;
int strata__cuda_qgemv_split = 0;
int strata__cuda_qgemv_unroll = 4;
}

/* ------------------------------------------------------------------------ */
/* Loads and code conversion                                                */
/* ------------------------------------------------------------------------ */

/* The four bytes of v as floats minus `bias`: byte k under 2^23's
 * exponent is the float 2^23 + byte, exactly. */
__device__ __forceinline__ void bytes4(unsigned v, float bias, float *f)
{
#pragma unroll
	for (int k = 0; k < 4; k++)
		f[k] = __int_as_float((int)__byte_perm(v, 0x4b000000u,
						       0x7440u + (unsigned)k)) -
		       (8388608.0f + bias);
}

/* Sum of w[0..3] x (a.x..a.w); the second form also sums the x. */
__device__ __forceinline__ float dot4(const float *w, float4 a)
{
	return w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w;
}

/* Four activations at x: one 16-byte load where x is aligned (every
 * buffer strata makes), four otherwise. */
__device__ __forceinline__ float4 ldx(const float *x)
{
	if (!((uintptr_t)x & 15))
		return __ldg((const float4 *)x);
	return make_float4(__ldg(x), __ldg(x + 1), __ldg(x + 2), __ldg(x + 3));
}

/* Activations [col, col + 4) of row xr; with NORM (one row of x), their
 * squares are added to ssq and they come back times the norm's weights g
 * (rmsnorm's factor is applied to the finished sums). */
template <bool NORM>
__device__ __forceinline__ float4 xload(const float *xr, const float *g,
					uint32_t col, float &ssq)
{
	float4 a = ldx(xr + col);
	if (NORM) {
		ssq += (a.x * a.x + a.y * a.y) + (a.z * a.z + a.w * a.w);
		const float4 w = ldx(g + col);
		a.x *= w.x, a.y *= w.y, a.z *= w.z, a.w *= w.w;
	}
	return a;
}

__device__ __forceinline__ float sum4(float4 a)
{
	return (a.x + a.y) + (a.z + a.w);
}

/* ------------------------------------------------------------------------ */
/* The types: what a lane loads for one warp step, and its products         */
/* ------------------------------------------------------------------------ */

/* Each type: STEP elements of a row per warp step; load() fills a lane's * registers for step s (ok false past the row's end or when !live);
 * dot() adds the lane's products with the rows of x (`in` floats each)
 * to acc; with NORM (one row) x is taken times gn, its squares summed in
 * ssq (xload). */

/* Q8_0 (34 bytes, f16 d then 32 int8): 8 blocks a step, 4 lanes a block,
 * 8 codes a lane. */
struct QgQ8_0 {
	enum { STEP = 256 };
	struct regs {
		uint2 q;
		float d;
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		const uint32_t b = 8 * s + lane / 4;
		g.ok = live && b < in / 32;
		if (!g.ok)
			return;
		const uint8_t *blk = row + (uint64_t)b * 34;
		g.d = ld_f16(blk);
		g.q = ld64(blk + 2 + 8 * (lane % 4));
	}
	template <int NR, bool NORM>
	static __device__ __forceinline__ void dot(const regs &g, const float *x,
						   const float *gn, float &ssq,
						   uint32_t in, uint32_t s,
						   unsigned lane, uint32_t n,
						   float (&acc)[NR])
	{
		if (!g.ok)
			return;
		float w[8];
		bytes4(g.q.x ^ 0x80808080u, 128.0f, w);
		bytes4(g.q.y ^ 0x80808080u, 128.0f, w + 4);
		const uint32_t col = 256 * s + 8 * lane;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const float *xr = x + (uint64_t)r * in;
			const float4 a = xload<NORM>(xr, gn, col, ssq);
			const float4 b = xload<NORM>(xr, gn, col + 4, ssq);
			acc[r] += g.d * (dot4(w, a) + dot4(w + 4, b));
		}
	}
};

/* Q4_0 (18 bytes, f16 d then 16 bytes: element j < 16 the low nibble of
 * byte j, j >= 16 the high nibble of byte j - 16; value nibble - 8): 8
 * blocks a step, 4 lanes a block, 4 bytes (8 codes) a lane. */
struct QgQ4_0 {
	enum { STEP = 256 };
	struct regs {
		unsigned q;
		float d;
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		const uint32_t b = 8 * s + lane / 4;
		g.ok = live && b < in / 32;
		if (!g.ok)
			return;
		const uint8_t *blk = row + (uint64_t)b * 18;
		g.d = ld_f16(blk);
		g.q = ld32(blk + 2 + 4 * (lane % 4));
	}
	template <int NR, bool NORM>
	static __device__ __forceinline__ void dot(const regs &g, const float *x,
						   const float *gn, float &ssq,
						   uint32_t in, uint32_t s,
						   unsigned lane, uint32_t n,
						   float (&acc)[NR])
	{
		if (!g.ok)
			return;
		float lo[4], hi[4];
		bytes4(g.q & 0x0f0f0f0fu, 8.0f, lo);
		bytes4((g.q >> 4) & 0x0f0f0f0fu, 8.0f, hi);
		const uint32_t col = 32 * (8 * s + lane / 4) + 4 * (lane % 4);
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const float *xr = x + (uint64_t)r * in;
			const float4 a = xload<NORM>(xr, gn, col, ssq);
			const float4 b = xload<NORM>(xr, gn, col + 16, ssq);
			acc[r] += g.d * (dot4(lo, a) + dot4(hi, b));
		}
	}
};

/* Q4_K (144 bytes: head, then 128 bytes of nibbles; sub-block s at bytes
 * 32 (s / 2), nibble s % 2) and Q5_K (176: head, 32 bytes of fifth bits,
 * element l of sub-block s has bit s of byte l, then the nibbles at 48):
 * 2 super-blocks a step, 16 lanes each, a lane 8 bytes of nibbles (8
 * elements of two sub-blocks). */
template <bool FIVE> struct QgK45 {
	enum { STEP = 512, BYTES = FIVE ? 176 : 144, QS = FIVE ? 48 : 16 };
	struct regs {
		unsigned h[4];
		uint2 q, qh;
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		const uint32_t sb = 2 * s + lane / 16, j = lane % 16;
		g.ok = live && sb < in / 256;
		if (!g.ok)
			return;
		const uint8_t *b = row + (uint64_t)sb * BYTES;
		const uint2 h01 = ld64(b), h23 = ld64(b + 8);
		g.h[0] = h01.x, g.h[1] = h01.y, g.h[2] = h23.x, g.h[3] = h23.y;
		g.q = ld64(b + QS + 32 * (j / 4) + 8 * (j % 4));
		g.qh = FIVE ? ld64(b + 16 + 8 * (j % 4)) : make_uint2(0u, 0u);
	}
	/* The 8 values of sub-block `sub` from nibbles (shifted down by 0
	 * or 4) and fifth bits. */
	static __device__ __forceinline__ void values(unsigned q, unsigned qh,
						      int sub, float *v)
	{
		unsigned c = q & 0x0f0f0f0fu;
		if (FIVE)
			c |= ((qh >> sub) & 0x01010101u) << 4;
		bytes4(c, 0.0f, v);
	}
	template <int NR, bool NORM>
	static __device__ __forceinline__ void dot(const regs &g, const float *x,
						   const float *gn, float &ssq,
						   uint32_t in, uint32_t s,
						   unsigned lane, uint32_t n,
						   float (&acc)[NR])
	{
		if (!g.ok)
			return;
		const uint32_t sb = 2 * s + lane / 16, j = lane % 16;
		const int grp = (int)(j / 4);
		float dl0, ml0, dl1, ml1, lo[8], hi[8];
		head_scale_min(g.h, 2 * grp, &dl0, &ml0);
		head_scale_min(g.h, 2 * grp + 1, &dl1, &ml1);
		values(g.q.x, g.qh.x, 2 * grp, lo);
		values(g.q.y, g.qh.y, 2 * grp, lo + 4);
		values(g.q.x >> 4, g.qh.x, 2 * grp + 1, hi);
		values(g.q.y >> 4, g.qh.y, 2 * grp + 1, hi + 4);
		const uint32_t col = 256 * sb + 64 * grp + 8 * (j % 4);
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const float *xr = x + (uint64_t)r * in;
			const float4 a0 = xload<NORM>(xr, gn, col, ssq);
			const float4 a1 = xload<NORM>(xr, gn, col + 4, ssq);
			const float4 b0 = xload<NORM>(xr, gn, col + 32, ssq);
			const float4 b1 = xload<NORM>(xr, gn, col + 36, ssq);
			acc[r] += dl0 * (dot4(lo, a0) + dot4(lo + 4, a1)) -
				  ml0 * (sum4(a0) + sum4(a1)) +
				  dl1 * (dot4(hi, b0) + dot4(hi + 4, b1)) -
				  ml1 * (sum4(b0) + sum4(b1));
		}
	}
};

/* Q6_K (210 bytes: 128 bytes of low nibbles, 64 of high bit pairs, 16
 * int8 scales, f16 d; element e = 128 h + r: low nibble r / 64 of byte
 * 64 h + r % 64, high bits 2 (r / 32) of byte 128 + 32 h + r % 32, scale
 * e / 16, value - 32): a super-block a step, a lane 4 bytes of low
 * nibbles (8 elements, 4 and 4 in two 16-element scale groups). */
struct QgQ6_K {
	enum { STEP = 256 };
	struct regs {
		unsigned ql, qh;
		float d0, d1;
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		g.ok = live && s < in / 256;
		if (!g.ok)
			return;
		const uint32_t h = lane / 16, u = lane % 16;
		const uint8_t *b = row + (uint64_t)s * 210;
		g.ql = ld32(b + 64 * h + 4 * u);
		g.qh = ld32(b + 128 + 32 * h + 4 * (u % 8));
		const float d = ld_f16(b + 208);
		const int8_t s0 = (int8_t)__ldcs((const signed char *)(b + 192 + 8 * h + u / 4));
		const int8_t s1 = (int8_t)__ldcs((const signed char *)(b + 196 + 8 * h + u / 4));
		g.d0 = __fmul_rn(d, (float)s0);
		g.d1 = __fmul_rn(d, (float)s1);
	}
	template <int NR, bool NORM>
	static __device__ __forceinline__ void dot(const regs &g, const float *x,
						   const float *gn, float &ssq,
						   uint32_t in, uint32_t s,
						   unsigned lane, uint32_t n,
						   float (&acc)[NR])
	{
		if (!g.ok)
			return;
		const uint32_t h = lane / 16, u = lane % 16;
		const unsigned sh = 2 * (u / 8);
		float lo[4], hi[4];
		bytes4((g.ql & 0x0f0f0f0fu) | ((g.qh >> sh) & 0x03030303u) << 4,
		       32.0f, lo);
		bytes4(((g.ql >> 4) & 0x0f0f0f0fu) |
			       ((g.qh >> (sh + 4)) & 0x03030303u) << 4,
		       32.0f, hi);
		const uint32_t col = 256 * s + 128 * h + 4 * u;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const float *xr = x + (uint64_t)r * in;
			const float4 a = xload<NORM>(xr, gn, col, ssq);
			const float4 b = xload<NORM>(xr, gn, col + 64, ssq);
			acc[r] += g.d0 * dot4(lo, a) + g.d1 * dot4(hi, b);
		}
	}
};

/* ------------------------------------------------------------------------ */
/* The kernel                                                               */
/* ------------------------------------------------------------------------ */

/* y (n, out) = x (n, in) . w^T (+ bias): `split` warps of a block share a
 * row, warp `part` of them its steps [steps part / split, steps (part + 1)
 * / split); each lane issues the loads of U steps before using any. */
template <typename B, int NR, int U>
__global__ void __launch_bounds__(QG_THREADS)
qgemv_kernel(float *y, const float *x, const uint8_t *w, const float *bias,
	     uint32_t n, uint32_t in, uint32_t out, uint64_t rb, int split)
{
	__shared__ float red[QG_WARPS][NR];
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t per_block = QG_WARPS / (uint32_t)split;
	const uint64_t row = (uint64_t)blockIdx.x * per_block + warp / split;
	const uint32_t part = warp % (uint32_t)split;
	const uint32_t steps = (in + B::STEP - 1) / B::STEP;
	const uint32_t s0 = (uint32_t)((uint64_t)steps * part / split);
	const uint32_t s1 = (uint32_t)((uint64_t)steps * (part + 1) / split);
	float acc[NR], unused = 0.0f;
#pragma unroll
	for (int r = 0; r < NR; r++)
		acc[r] = 0.0f;
	if (row < out) {
		const uint8_t *wr = w + row * rb;
		for (uint32_t s = s0; s < s1; s += U) {
			typename B::regs g[U];
#pragma unroll
			for (int u = 0; u < U; u++)
				B::load(g[u], wr, s + u, lane, in, s + u < s1);
#pragma unroll
			for (int u = 0; u < U; u++)
				B::template dot<NR, false>(g[u], x, NULL, unused,
							   in, s + u, lane, n,
							   acc);
		}
	}
#pragma unroll
	for (int r = 0; r < NR; r++)
		acc[r] = strata__warp_sum(acc[r]);
	if (split > 1) { /* uniform: every thread reaches the barrier */
		if (lane == 0)
#pragma unroll
			for (int r = 0; r < NR; r++)
				red[warp][r] = acc[r];
		__syncthreads();
		if (part == 0)
			for (int p = 1; p < split; p++)
#pragma unroll
				for (int r = 0; r < NR; r++)
					acc[r] += red[warp + p][r];
	}
	if (part != 0 || lane != 0 || row >= out)
		return;
	const float b = bias ? bias[row] : 0.0f;
#pragma unroll
	for (int r = 0; r < NR; r++)
		if ((uint32_t)r < n)
			y[(uint64_t)r * out + row] = acc[r] + b;
}

/* One row of x against up to three matrices of one type in one launch
 * (q, k and v; one matrix with y += for a residual), rows numbered across
 * the parts in order; or, GLU, row o of gate (part 0) and up (part 1)
 * together, written as silu(gate) * up (gemv_glu_kernel's formula). With
 * NORM, x is taken as rmsnorm(x) * norm (f32 weights): the squares of x
 * are summed as it is read and the row's sums scaled by rmsnorm's factor
 * at the end, so the norm needs no launch of its own. */
template <typename B, int U, bool NORM, bool GLU>
__global__ void __launch_bounds__(QG_THREADS)
qgemv_fused_kernel(strata__cuda_gemv_parts p, const float *x, uint32_t in,
		   uint64_t rb, int split)
{
	__shared__ float red[QG_WARPS][3];
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t part = warp % (uint32_t)split;
	uint64_t row = (uint64_t)blockIdx.x * (QG_WARPS / (uint32_t)split) +
		       warp / (uint32_t)split;
	/* constant indices only (a dynamic one copies p to local memory) */
	float *y = NULL;
	const uint8_t *w0 = NULL, *w1 = NULL;
	const float *bias = NULL;
#pragma unroll
	for (int i = 0; i < STRATA__CUDA_GEMV_PARTS; i++) {
		if (y || i >= p.count || (GLU && i > 0))
			continue;
		if (row < p.part[i].out) {
			y = p.part[i].y;
			w0 = (const uint8_t *)p.part[i].w;
			w1 = GLU ? (const uint8_t *)p.part[1].w : NULL;
			bias = p.part[i].bias;
		} else {
			row -= p.part[i].out;
		}
	}
	const uint32_t steps = (in + B::STEP - 1) / B::STEP;
	const uint32_t s0 = (uint32_t)((uint64_t)steps * part / split);
	const uint32_t s1 = (uint32_t)((uint64_t)steps * (part + 1) / split);
	const float *g = (const float *)p.norm;
	float a0[1] = {0.0f}, a1[1] = {0.0f}, ssq = 0.0f, unused = 0.0f;
	if (y) {
		const uint8_t *r0 = w0 + row * rb, *r1 = GLU ? w1 + row * rb : NULL;
		for (uint32_t s = s0; s < s1; s += U) {
			typename B::regs ga[U], gb[GLU ? U : 1];
#pragma unroll
			for (int u = 0; u < U; u++) {
				B::load(ga[u], r0, s + u, lane, in, s + u < s1);
				if (GLU)
					B::load(gb[GLU ? u : 0], r1, s + u, lane, in,
						s + u < s1);
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				B::template dot<1, NORM>(ga[u], x, g, ssq, in,
							 s + u, lane, 1, a0);
				if (GLU)
					B::template dot<1, NORM>(gb[GLU ? u : 0], x,
								 g, unused, in,
								 s + u, lane, 1,
								 a1);
			}
		}
	}
	a0[0] = strata__warp_sum(a0[0]);
	if (GLU)
		a1[0] = strata__warp_sum(a1[0]);
	if (NORM)
		ssq = strata__warp_sum(ssq);
	if (split > 1) { /* uniform: every thread reaches the barrier */
		if (lane == 0) {
			red[warp][0] = a0[0];
			red[warp][1] = a1[0];
			red[warp][2] = ssq;
		}
		__syncthreads();
		if (part == 0)
			for (int q = 1; q < split; q++) {
				a0[0] += red[warp + q][0];
				a1[0] += red[warp + q][1];
				ssq += red[warp + q][2];
			}
	}
	if (!y || part != 0 || lane != 0)
		return;
	/* rmsnorm_kernel's factor, over the same sum of squares */
	const float f = NORM ? 1.0f / sqrtf(ssq / (float)in + p.eps) : 1.0f;
	if (GLU) {
		const float gv = a0[0] * f, uv = a1[0] * f;
		y[row] = gv / (1.0f + expf(-gv)) * uv;
		return;
	}
	const float v = a0[0] * f + (bias ? bias[row] : 0.0f);
	y[row] = p.accumulate ? y[row] + v : v;
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                   */
/* ------------------------------------------------------------------------ */

template <typename B, int NR>
static void qgemv_rows(cudaStream_t s, unsigned grid, float *y,
		       const float *x, const uint8_t *w, const float *bias,
		       uint32_t n, uint32_t in, uint32_t out, uint64_t rb,
		       int split)
{
	if (strata__cuda_qgemv_unroll >= 8)
		qgemv_kernel<B, NR, 8><<<grid, QG_THREADS, 0, s>>>(
			y, x, w, bias, n, in, out, rb, split);
	else
		qgemv_kernel<B, NR, 4><<<grid, QG_THREADS, 0, s>>>(
			y, x, w, bias, n, in, out, rb, split);
}

template <typename B>
static void qgemv_launch(cudaStream_t s, float *y, const float *x,
			 const uint8_t *w, const float *bias, uint32_t n,
			 uint32_t in, uint32_t out, uint64_t rb)
{
	const uint32_t steps = (in + B::STEP - 1) / B::STEP;
	const int split = qgemv_split(out, steps);
	const uint64_t per = QG_WARPS / (uint32_t)split;
	const unsigned grid = (unsigned)((out + per - 1) / per);
	if (n == 1)
		qgemv_rows<B, 1>(s, grid, y, x, w, bias, n, in, out, rb, split);
	else if (n == 2)
		qgemv_rows<B, 2>(s, grid, y, x, w, bias, n, in, out, rb, split);
	else if (n <= 4)
		qgemv_rows<B, 4>(s, grid, y, x, w, bias, n, in, out, rb, split);
	else
		qgemv_rows<B, 8>(s, grid, y, x, w, bias, n, in, out, rb, split);
}

extern "C" int strata__cuda_qgemv_takes(int type, const void *w, uint32_t in)
{
	if (!strata__cuda_qgemv_enabled || ((uintptr_t)w & 3) || in % 32)
		return 0;
	switch (type) {
	case STRATA__CUDA_Q8_0:
	case STRATA__CUDA_Q4_0: return 1;
	case STRATA__CUDA_Q4_K:
	case STRATA__CUDA_Q5_K:
	case STRATA__CUDA_Q6_K: return in % 256 == 0;
	default: return 0;
	}
}

extern "C" cudaError_t strata__cuda_qgemv(cudaStream_t s, float *y,
					  const float *x, const void *w,
					  int type, const float *bias,
					  uint32_t n, uint32_t in, uint32_t out)
{
	const uint8_t *wb = (const uint8_t *)w;
	if (n == 0 || n > STRATA__CUDA_GEMV_ROWS || out == 0 ||
	    !strata__cuda_qgemv_takes(type, w, in))
		return cudaErrorInvalidValue;
	switch (type) {
	case STRATA__CUDA_Q8_0:
		qgemv_launch<QgQ8_0>(s, y, x, wb, bias, n, in, out,
				     (uint64_t)in / 32 * 34);
		break;
	case STRATA__CUDA_Q4_0:
		qgemv_launch<QgQ4_0>(s, y, x, wb, bias, n, in, out,
				     (uint64_t)in / 32 * 18);
		break;
	case STRATA__CUDA_Q4_K:
		qgemv_launch<QgK45<false> >(s, y, x, wb, bias, n, in, out,
					    (uint64_t)in / 256 * 144);
		break;
	case STRATA__CUDA_Q5_K:
		qgemv_launch<QgK45<true> >(s, y, x, wb, bias, n, in, out,
					   (uint64_t)in / 256 * 176);
		break;
	default:
		qgemv_launch<QgQ6_K>(s, y, x, wb, bias, n, in, out,
				     (uint64_t)in / 256 * 210);
		break;
	}
	return cudaGetLastError();
}

/* Row bytes of the types qgemv takes (strata__cuda_qgemv_takes). */
static uint64_t qgemv_row_bytes(int type, uint32_t in)
{
	switch (type) {
	case STRATA__CUDA_Q8_0: return (uint64_t)in / 32 * 34;
	case STRATA__CUDA_Q4_0: return (uint64_t)in / 32 * 18;
	case STRATA__CUDA_Q4_K: return (uint64_t)in / 256 * 144;
	case STRATA__CUDA_Q5_K: return (uint64_t)in / 256 * 176;
	default: return (uint64_t)in / 256 * 210;
	}
}

template <typename B, bool NORM, bool GLU>
static void fused_launch(cudaStream_t s, const strata__cuda_gemv_parts *p,
			 const float *x, uint32_t in, uint64_t rows,
			 uint64_t rb)
{
	const int split = qgemv_split((uint32_t)rows, (in + B::STEP - 1) / B::STEP);
	const uint64_t per = QG_WARPS / (uint32_t)split;
	const unsigned grid = (unsigned)((rows + per - 1) / per);
	if (strata__cuda_qgemv_unroll >= 8)
		qgemv_fused_kernel<B, 8, NORM, GLU><<<grid, QG_THREADS, 0, s>>>(
			*p, x, in, rb, split);
	else
		qgemv_fused_kernel<B, 4, NORM, GLU><<<grid, QG_THREADS, 0, s>>>(
			*p, x, in, rb, split);
}

template <typename B>
static void fused_by_kind(cudaStream_t s, const strata__cuda_gemv_parts *p,
			  const float *x, uint32_t in, uint64_t rows,
			  uint64_t rb, int glu)
{
	const bool norm = p->norm != NULL;
	if (glu && norm)
		fused_launch<B, true, true>(s, p, x, in, rows, rb);
	else if (glu)
		fused_launch<B, false, true>(s, p, x, in, rows, rb);
	else if (norm)
		fused_launch<B, true, false>(s, p, x, in, rows, rb);
	else
		fused_launch<B, false, false>(s, p, x, in, rows, rb);
}

extern "C" cudaError_t strata__cuda_qgemv_fused(cudaStream_t s,
						const strata__cuda_gemv_parts *p,
						const float *x, int type,
						uint32_t in, int glu)
{
	uint64_t rows = 0;
	if (p->count < 1 || p->count > STRATA__CUDA_GEMV_PARTS ||
	    (glu && (p->count != 2 || p->part[0].out != p->part[1].out)))
		return cudaErrorInvalidValue;
	for (int i = 0; i < p->count; i++) {
		if (!strata__cuda_qgemv_takes(type, p->part[i].w, in))
			return cudaErrorInvalidValue;
		rows += p->part[i].out;
	}
	if (glu)
		rows = p->part[0].out;
	const uint64_t rb = qgemv_row_bytes(type, in);
	switch (type) {
	case STRATA__CUDA_Q8_0: fused_by_kind<QgQ8_0>(s, p, x, in, rows, rb, glu); break;
	case STRATA__CUDA_Q4_0: fused_by_kind<QgQ4_0>(s, p, x, in, rows, rb, glu); break;
	case STRATA__CUDA_Q4_K: fused_by_kind<QgK45<false> >(s, p, x, in, rows, rb, glu); break;
	case STRATA__CUDA_Q5_K: fused_by_kind<QgK45<true> >(s, p, x, in, rows, rb, glu); break;
	default: fused_by_kind<QgQ6_K>(s, p, x, in, rows, rb, glu); break;
	}
	return cudaGetLastError();
}
