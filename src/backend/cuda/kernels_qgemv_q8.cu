/* kernels_qgemv_q8.cu - the decode GEMV on stored blocks with 8-bit
 * activations, as llama.cpp's MMVQ computes: x quantized once per product,
 * then integer dot products (__dp4a) of its codes with the weights' codes
 * (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) (layer: backend).
 *
 * Why: with f32 activations (kernels_qgemv.cu) every weight byte of a
 * Q8_0 row pulls four bytes of x through L1 and costs a conversion and an
 * FMA; ncu on the H200 finds that kernel L1-bound at a sixth of the
 * memory's rate. Here x is one byte an element (plus two floats per 16),
 * and four products and their sum are one instruction.
 *
 * The quantization is the CPU's (src/backend/cpu/qdot.c, quantize16), bit
 * for bit: per 16 elements dx = max|x| / 127 (an IEEE quotient), codes
 * x / dx rounded to nearest even and clamped to +-127, and s = dx times
 * the codes' sum (the K-quants' min terms take it); a NaN or infinity
 * makes its 16 codes 0 and dx NaN, so its outputs are NaN. With a norm,
 * x is rmsnorm(x) * g first, computed as the rmsnorm kernels do (squares
 * summed in double). So the CPU's q8 decode and this one share their
 * codes, and their outputs differ only by f32 summation order; each output
 * is within sum over 16s of dx / 2 times sum |w| of the exact product.
 *
 * Layout of a quantized x of n rows of `in` elements (strata__cuda_q8x_bytes
 * bytes, 16-byte aligned): codes (n, in) int8, then from byte
 * align256(n in) (dx, s) pairs (n, in / 16) of f32, so the K-quants read
 * both of a run in one 8-byte load.
 *
 * The weights are read as kernels_qgemv.cu reads them (the same lanes,
 * words and splits), each step's loads of U steps issued before any is
 * used, with aligned 8- and 16-byte loads where the rows allow them (Q8_0
 * rows on 8-byte boundaries, Q4_K and Q5_K on 16: every L1 wavefront
 * saved counts, as the f32-x kernel is L1-bound); a lane's x codes are
 * one aligned 4- or 8-byte load per row. strata__cuda_q8gemv_wide 1 gives
 * Q4_K, Q5_K and Q6_K the wide lanes of qgemv_q8_kquants.cuh instead
 * (16-byte loads, a lane two whole 16-element runs, scales decoded once
 * per lane), run by the same kernel; strata__cuda_q8gemv_wide_q8_0 1
 * gives Q8_0 rows on 16-byte boundaries the wide lanes of
 * qgemv_q8_0_wide.cuh (a lane one whole 16-element run, two 16-byte loads).
 */
#include <float.h>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/q8gemv_blocks.cuh"
#include "backend/cuda/qgemv_loads.cuh"

#define QX_THREADS 256u /* a block quantizes 256 x 16 elements */

extern "C" {
int strata__cuda_q8gemv_aligned = 1;
/* 1 since the H200 measured it (2026-12-02): Q4_K_M resident decode of the
 * 7.5 GB llama 1.511 ms/token against 3.160 on the narrow lanes
 * (docs/cuda.md "The wide K-quant lanes"); 0 keeps them to compare. */
int strata__cuda_q8gemv_wide = 1;
/* 1 since the H200 measured it (2026-12-02): Q8_0 resident decode of the
 * same llama 1.908 ms/token against 2.042 on the current lanes
 * (docs/cuda.md "The wide Q8_0 lanes"); 0 keeps those to compare. */
int strata__cuda_q8gemv_wide_q8_0 = 1;
int strata__cuda_pdl = 1;
}

/* The decode chain (cuda_common.cuh): the quantization is chained to the
 * kernel before it and lets the GEMV that follows start at once; the GEMV
 * issues its first weight loads before it waits for the quantization to
 * finish and its x to be visible, so neither the launch gap nor the
 * quantization's short run stalls the weights' stream, and lets the next
 * kernel be scheduled once its own loads are done. */

/* ------------------------------------------------------------------------ */
/* Quantizing x                                                             */
/* ------------------------------------------------------------------------ */

/* One thread per 16 elements of row blockIdx.y. */
__global__ void __launch_bounds__(QX_THREADS)
quantize_x_kernel(int8_t *q, float2 *ds, const float *x, uint32_t in)
{
	strata__chain_wait();
	strata__chain_next();
	const uint64_t row = blockIdx.y;
	const uint32_t grp = blockIdx.x * blockDim.x + threadIdx.x;
	if (grp >= in / 16)
		return;
	float v[16];
	ld16(x + row * in + 16 * grp, v);
	quantize16(v, q, ds, row * (in / 16) + grp);
}

/* The same of rmsnorm(x) * g, one block a row: its squares summed in
 * double as rmsnorm_kernel sums them, the factor computed as it does,
 * then x read again (from L1) and scaled ((x r) g) before quantizing.
 * At most 1024 threads, a group each (rows to 16384 elements read once
 * from memory), more groups a thread past that. */
__global__ void __launch_bounds__(1024)
quantize_norm_kernel(int8_t *q, float2 *ds, const float *x, const float *g,
		     uint32_t in, float eps)
{
	__shared__ double red[32];
	strata__chain_wait();
	strata__chain_next();
	const uint64_t row = blockIdx.y;
	const float *xr = x + row * in;
	const uint32_t groups = in / 16;
	float v[16];
	double ss = 0.0;
	for (uint32_t grp = threadIdx.x; grp < groups; grp += blockDim.x) {
		ld16(xr + 16 * grp, v);
#pragma unroll
		for (int k = 0; k < 16; k++)
			ss += (double)v[k] * (double)v[k];
	}
	ss = strata__block_sum(ss, red);
	const float r = 1.0f / sqrtf((float)(ss / in) + eps);
	for (uint32_t grp = threadIdx.x; grp < groups; grp += blockDim.x) {
		float w[16];
		ld16(xr + 16 * grp, v);
		ld16(g + 16 * grp, w);
#pragma unroll
		for (int k = 0; k < 16; k++)
			v[k] = __fmul_rn(__fmul_rn(v[k], r), w[k]);
		quantize16(v, q, ds, row * groups + grp);
	}
}

/* ------------------------------------------------------------------------ */
/* The types: a lane's loads of one warp step and its integer products      */
/* ------------------------------------------------------------------------ */

/* Q8_0 and Q4_0 (Q8Q8_0, Q8Q8_0A, Q8Q4_0) and what the readers share are
 * in q8gemv_blocks.cuh. */

/* Q4_K and Q5_K: 2 super-blocks a step, 16 lanes each, a lane 8 bytes of
 * nibbles: elements 8 (j % 4) .. + 8 of sub-blocks 2 (j / 4) (low
 * nibbles) and 2 (j / 4) + 1 (high), half of a 16-element run of x in
 * each; the lanes holding a run's first half add its min term. A16: the
 * weights start on a 16-byte boundary (so does every super-block: 144
 * and 176 bytes), and the head is one 16-byte load, the codes 8-byte
 * loads, where the funnel-shifted words take two or three each. */
template <bool FIVE, bool A16> struct Q8K45 {
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
		const uint8_t *qs = b + QS + 32 * (j / 4) + 8 * (j % 4);
		const uint8_t *qh = b + 16 + 8 * (j % 4);
		if (A16) {
			const uint4 h = __ldcs((const uint4 *)b);
			g.h[0] = h.x, g.h[1] = h.y, g.h[2] = h.z, g.h[3] = h.w;
			g.q = __ldcs((const uint2 *)qs);
			g.qh = FIVE ? __ldcs((const uint2 *)qh) : make_uint2(0u, 0u);
			return;
		}
		const uint2 h01 = ld64(b), h23 = ld64(b + 8);
		g.h[0] = h01.x, g.h[1] = h01.y, g.h[2] = h23.x, g.h[3] = h23.y;
		g.q = ld64(qs);
		g.qh = FIVE ? ld64(qh) : make_uint2(0u, 0u);
	}
	/* Four codes of sub-block `sub` from nibbles (shifted down by 0 or
	 * 4) and fifth bits, a byte each (0 .. 31). */
	static __device__ __forceinline__ int codes(unsigned q, unsigned qh,
						    int sub)
	{
		unsigned c = q & 0x0f0f0f0fu;
		if (FIVE)
			c |= ((qh >> sub) & 0x01010101u) << 4;
		return (int)c;
	}
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		if (!g.ok)
			return;
		const uint32_t sb = 2 * s + lane / 16, j = lane % 16;
		const int grp = (int)(j / 4);
		float dl0, ml0, dl1, ml1;
		head_scale_min(g.h, 2 * grp, &dl0, &ml0);
		head_scale_min(g.h, 2 * grp + 1, &dl1, &ml1);
		const int l0 = codes(g.q.x, g.qh.x, 2 * grp);
		const int l1 = codes(g.q.y, g.qh.y, 2 * grp);
		const int h0 = codes(g.q.x >> 4, g.qh.x, 2 * grp + 1);
		const int h1 = codes(g.q.y >> 4, g.qh.y, 2 * grp + 1);
		const uint32_t col = 256 * sb + 64 * grp + 8 * (j % 4);
		const bool mins = (j & 1) == 0;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const uint2 a = xq8(x, r, col), b = xq8(x, r, col + 32);
			const float2 da = xds(x, r, col), db = xds(x, r, col + 32);
			const int ta = __dp4a(l1, (int)a.y, __dp4a(l0, (int)a.x, 0));
			const int tb = __dp4a(h1, (int)b.y, __dp4a(h0, (int)b.x, 0));
			float v = __fmul_rn(dl0, da.x) * (float)ta +
				  __fmul_rn(dl1, db.x) * (float)tb;
			if (mins)
				v -= ml0 * da.y + ml1 * db.y;
			acc[r] += v;
		}
	}
};

/* Q6_K: a super-block a step, a lane 4 bytes of low nibbles: elements
 * 128 h + 4 u .. (scale 8 h + u / 4) and 64 further on (scale + 4), a
 * quarter of a 16-element run of x each; codes - 32 as signed bytes. */
struct Q8Q6_K {
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
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		if (!g.ok)
			return;
		const uint32_t h = lane / 16, u = lane % 16;
		const unsigned sh = 2 * (u / 8);
		const int lo = (int)__vsub4((g.ql & 0x0f0f0f0fu) |
						    ((g.qh >> sh) & 0x03030303u) << 4,
					    0x20202020u);
		const int hi = (int)__vsub4(((g.ql >> 4) & 0x0f0f0f0fu) |
						    ((g.qh >> (sh + 4)) & 0x03030303u)
							    << 4,
					    0x20202020u);
		const uint32_t col = 256 * s + 128 * h + 4 * u;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const int ta = __dp4a(lo, (int)xq4(x, r, col), 0);
			const int tb = __dp4a(hi, (int)xq4(x, r, col + 64), 0);
			acc[r] += __fmul_rn(g.d0, xd(x, r, col)) * (float)ta +
				  __fmul_rn(g.d1, xd(x, r, col + 64)) * (float)tb;
		}
	}
};

/* The wide lanes of Q4_K, Q5_K and Q6_K (strata__cuda_q8gemv_wide), on
 * q8x, xds and the loads above. */
#include "backend/cuda/qgemv_q8_kquants.cuh"

/* The wide lanes of Q8_0 (strata__cuda_q8gemv_wide_q8_0), on bytes_at,
 * xq16 and dot16 above. */
#include "backend/cuda/qgemv_q8_0_wide.cuh"

/* ------------------------------------------------------------------------ */
/* The kernel                                                               */
/* ------------------------------------------------------------------------ */

/* The parts of p (up to three matrices of one type, rows numbered across
 * them in order; y_i (n, out_i) = x . w_i^T (+ bias_i), y += with
 * accumulate) or, GLU, row o of gate (part 0) and up (part 1) together as
 * silu(gate) * up into part 0's y (one row of x). `split` warps of a
 * block share a row, warp `part` of them its steps [steps part / split,
 * steps (part + 1) / split); each lane issues the loads of U steps before
 * using any. */
template <typename B, int NR, int U, bool GLU>
__global__ void __launch_bounds__(QG_THREADS)
q8gemv_kernel(strata__cuda_gemv_parts p, q8x x, uint32_t n, uint64_t rb,
	      int split)
{
	__shared__ float red[QG_WARPS][2 * NR];
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t part = warp % (uint32_t)split, in = x.in;
	uint64_t row = (uint64_t)blockIdx.x * (QG_WARPS / (uint32_t)split) +
		       warp / (uint32_t)split;
	/* constant indices only (a dynamic one copies p to local memory) */
	float *y = NULL;
	const uint8_t *w0 = NULL, *w1 = NULL;
	const float *bias = NULL;
	uint32_t out = 0;
#pragma unroll
	for (int i = 0; i < STRATA__CUDA_GEMV_PARTS; i++) {
		if (y || i >= p.count || (GLU && i > 0))
			continue;
		if (row < p.part[i].out) {
			y = p.part[i].y;
			out = p.part[i].out;
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
	float a0[NR], a1[NR]; /* a1: up's sums (GLU) */
#pragma unroll
	for (int r = 0; r < NR; r++)
		a0[r] = a1[r] = 0.0f;
	if (y) {
		const uint8_t *r0 = w0 + row * rb, *r1 = GLU ? w1 + row * rb : NULL;
		bool waited = false;
		for (uint32_t s = s0; s < s1; s += U) {
			typename B::regs ga[U], gb[GLU ? U : 1];
#pragma unroll
			for (int u = 0; u < U; u++) {
				B::load(ga[u], r0, s + u, lane, in, s + u < s1);
				if (GLU)
					B::load(gb[GLU ? u : 0], r1, s + u, lane, in,
						s + u < s1);
			}
			if (!waited) { /* x is read from here on */
				strata__chain_wait();
				waited = true;
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				B::template dot<NR>(ga[u], x, s + u, lane, n, a0);
				if (GLU)
					B::template dot<NR>(gb[GLU ? u : 0], x,
							    s + u, lane, n, a1);
			}
		}
	}
	strata__chain_wait(); /* a block with no row waits here */
	strata__chain_next();
#pragma unroll
	for (int r = 0; r < NR; r++) {
		a0[r] = strata__warp_sum(a0[r]);
		if (GLU)
			a1[r] = strata__warp_sum(a1[r]);
	}
	if (split > 1) { /* uniform: every thread reaches the barrier */
		if (lane == 0)
#pragma unroll
			for (int r = 0; r < NR; r++) {
				red[warp][r] = a0[r];
				red[warp][NR + r] = a1[r];
			}
		__syncthreads();
		if (part == 0)
			for (int q = 1; q < split; q++)
#pragma unroll
				for (int r = 0; r < NR; r++) {
					a0[r] += red[warp + q][r];
					if (GLU)
						a1[r] += red[warp + q][NR + r];
				}
	}
	if (!y || part != 0 || lane != 0)
		return;
	if (GLU) {
		const float gv = a0[0], uv = a1[0];
		y[row] = gv / (1.0f + expf(-gv)) * uv;
		return;
	}
	const float b = bias ? bias[row] : 0.0f;
#pragma unroll
	for (int r = 0; r < NR; r++) {
		if ((uint32_t)r >= n)
			break;
		float *yr = y + (uint64_t)r * out + row;
		const float v = a0[r] + b;
		*yr = p.accumulate ? *yr + v : v;
	}
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                   */
/* ------------------------------------------------------------------------ */

typedef void (*q8gemv_fn)(strata__cuda_gemv_parts, q8x, uint32_t, uint64_t,
			  int);

/* One launch of a GEMV kernel, chained to the quantization before it
 * (strata__launch_chained's rule; the kernel's arguments are passed by
 * reference here, so it is written out). */
static void q8_launch_one(q8gemv_fn k, cudaStream_t s, unsigned grid,
			  const strata__cuda_gemv_parts &p, const q8x &x,
			  uint32_t n, uint64_t rb, int split)
{
	if (strata__cuda_pdl) {
		cudaLaunchAttribute at[1];
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cudaLaunchConfig_t c = {};
		c.gridDim = dim3(grid);
		c.blockDim = dim3(QG_THREADS);
		c.dynamicSmemBytes = 0;
		c.stream = s;
		c.attrs = at;
		c.numAttrs = 1;
		if (cudaLaunchKernelEx(&c, k, p, x, n, rb, split) == cudaSuccess)
			return;
		(void)cudaGetLastError(); /* not taken: the ordinary launch */
	}
	k<<<grid, QG_THREADS, 0, s>>>(p, x, n, rb, split);
}

/* Steps of loads in flight: strata__cuda_qgemv_unroll's 4 or 8; half
 * that for the wide lanes' gate/up (WIDE), whose two matrices' loads of
 * 4 steps would hold past 200 registers a thread (8: spill). */
template <typename B, int NR, bool GLU, bool WIDE>
static void q8_unrolled(cudaStream_t s, unsigned grid,
			const strata__cuda_gemv_parts &p, const q8x &x,
			uint32_t n, uint64_t rb, int split)
{
	const bool eight = strata__cuda_qgemv_unroll >= 8;
	if (WIDE && GLU)
		q8_launch_one(eight ? q8gemv_kernel<B, NR, 4, GLU>
				    : q8gemv_kernel<B, NR, 2, GLU>,
			      s, grid, p, x, n, rb, split);
	else
		q8_launch_one(eight ? q8gemv_kernel<B, NR, 8, GLU>
				    : q8gemv_kernel<B, NR, 4, GLU>,
			      s, grid, p, x, n, rb, split);
}

template <typename B, bool WIDE = false>
static void q8_launch(cudaStream_t s, const strata__cuda_gemv_parts &p,
		      const q8x &x, uint32_t n, uint64_t rows, uint64_t rb,
		      int glu)
{
	const int split = qgemv_split((uint32_t)rows,
				      (x.in + B::STEP - 1) / B::STEP);
	const uint64_t per = QG_WARPS / (uint32_t)split;
	const unsigned grid = (unsigned)((rows + per - 1) / per);
	if (glu)
		q8_unrolled<B, 1, true, WIDE>(s, grid, p, x, 1, rb, split);
	else if (n == 1)
		q8_unrolled<B, 1, false, WIDE>(s, grid, p, x, n, rb, split);
	else if (n == 2)
		q8_unrolled<B, 2, false, WIDE>(s, grid, p, x, n, rb, split);
	else if (n <= 4)
		q8_unrolled<B, 4, false, WIDE>(s, grid, p, x, n, rb, split);
	else
		q8_unrolled<B, 8, false, WIDE>(s, grid, p, x, n, rb, split);
}

static uint64_t q8_row_bytes(int type, uint32_t in)
{
	switch (type) {
	case STRATA__CUDA_Q8_0: return (uint64_t)in / 32 * 34;
	case STRATA__CUDA_Q4_0: return (uint64_t)in / 32 * 18;
	case STRATA__CUDA_Q4_K: return (uint64_t)in / 256 * 144;
	case STRATA__CUDA_Q5_K: return (uint64_t)in / 256 * 176;
	default: return (uint64_t)in / 256 * 210;
	}
}

/* Whether every part's weights start on a multiple of `to` bytes. */
static bool aligned_to(const strata__cuda_gemv_parts *p, uintptr_t to)
{
	for (int i = 0; i < p->count; i++)
		if ((uintptr_t)p->part[i].w % to)
			return false;
	return true;
}

/* The same, and strata__cuda_q8gemv_aligned lets the aligned kernels take
 * them. */
static bool aligned(const strata__cuda_gemv_parts *p, uintptr_t to)
{
	return strata__cuda_q8gemv_aligned && aligned_to(p, to);
}

extern "C" uint64_t strata__cuda_q8x_bytes(uint32_t n, uint32_t in)
{
	return align256((uint64_t)n * in) + 2 * (uint64_t)n * (in / 16) * 4;
}

extern "C" int strata__cuda_q8gemv_takes(int type, const void *w, uint32_t in)
{
	if (((uintptr_t)w & 3) || in == 0 || in % 32)
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

extern "C" cudaError_t strata__cuda_quantize_x(cudaStream_t s, void *qx,
					       const float *x, uint32_t n,
					       uint32_t in, const float *norm,
					       float eps)
{
	if (n == 0 || n > STRATA__CUDA_GEMV_ROWS || in == 0 || in % 32 ||
	    ((uintptr_t)qx & 15))
		return cudaErrorInvalidValue;
	const q8x v = q8x_at(qx, n, in);
	int8_t *q = (int8_t *)qx;
	float2 *ds = (float2 *)v.ds;
	const uint32_t groups = in / 16;
	if (norm) {
		const uint32_t t = groups < 1024 ? (groups + 31) / 32 * 32 : 1024;
		return strata__launch_chained(quantize_norm_kernel, dim3(1, n),
					      dim3(t), 0, s, q, ds, x, norm, in,
					      eps);
	}
	const dim3 grid((groups + QX_THREADS - 1) / QX_THREADS, n);
	return strata__launch_chained(quantize_x_kernel, grid, dim3(QX_THREADS),
				      0, s, q, ds, x, in);
}

extern "C" cudaError_t strata__cuda_q8gemv(cudaStream_t s,
					   const strata__cuda_gemv_parts *p,
					   const void *qx, uint32_t n, int type,
					   uint32_t in, int glu)
{
	uint64_t rows = 0;
	if (n == 0 || n > STRATA__CUDA_GEMV_ROWS || p->count < 1 ||
	    p->count > STRATA__CUDA_GEMV_PARTS || p->norm ||
	    (glu && (n != 1 || p->count != 2 ||
		     p->part[0].out != p->part[1].out)))
		return cudaErrorInvalidValue;
	for (int i = 0; i < p->count; i++) {
		if (!strata__cuda_q8gemv_takes(type, p->part[i].w, in) ||
		    p->part[i].out == 0)
			return cudaErrorInvalidValue;
		rows += p->part[i].out;
	}
	if (glu)
		rows = p->part[0].out;
	if (rows > UINT32_MAX)
		return cudaErrorInvalidValue;
	const q8x x = q8x_at(qx, n, in);
	const uint64_t rb = q8_row_bytes(type, in);
	switch (type) {
	case STRATA__CUDA_Q8_0:
		if (strata__cuda_q8gemv_wide_q8_0 && in % 256 == 0 &&
		    aligned_to(p, 16))
			q8_launch<Q8Q8_0W, true>(s, *p, x, n, rows, rb, glu);
		else if (rb % 8 == 0 && aligned(p, 8))
			q8_launch<Q8Q8_0A>(s, *p, x, n, rows, rb, glu);
		else
			q8_launch<Q8Q8_0>(s, *p, x, n, rows, rb, glu);
		break;
	case STRATA__CUDA_Q4_0: q8_launch<Q8Q4_0>(s, *p, x, n, rows, rb, glu); break;
	case STRATA__CUDA_Q4_K:
		if (strata__cuda_q8gemv_wide && aligned_to(p, 16))
			q8_launch<Q8K45W<false>, true>(s, *p, x, n, rows, rb, glu);
		else if (aligned(p, 16))
			q8_launch<Q8K45<false, true> >(s, *p, x, n, rows, rb, glu);
		else
			q8_launch<Q8K45<false, false> >(s, *p, x, n, rows, rb, glu);
		break;
	case STRATA__CUDA_Q5_K:
		if (strata__cuda_q8gemv_wide && aligned_to(p, 16))
			q8_launch<Q8K45W<true>, true>(s, *p, x, n, rows, rb, glu);
		else if (aligned(p, 16))
			q8_launch<Q8K45<true, true> >(s, *p, x, n, rows, rb, glu);
		else
			q8_launch<Q8K45<true, false> >(s, *p, x, n, rows, rb, glu);
		break;
	default:
		if (strata__cuda_q8gemv_wide)
			q8_launch<Q8Q6_KW, true>(s, *p, x, n, rows, rb, glu);
		else
			q8_launch<Q8Q6_K>(s, *p, x, n, rows, rb, glu);
		break;
	}
	return cudaGetLastError();
}
