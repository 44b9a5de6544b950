/* q8gemv_blocks.cuh - what the 8-bit-activation decode GEMVs share
 * (kernels_qgemv_q8.cu, one product; kernels_experts.cu, a layer's routed
 * experts in one launch): the quantized x's layout and its quantization
 * (qdot.c's quantize16, bit for bit), a lane's codes of x, and the
 * readers of Q8_0 and Q4_0 blocks with their integer products. Moved here
 * unchanged from kernels_qgemv_q8.cu, whose header comment says why the
 * kernels are built this way; the K-quants' readers stay there
 * (layer: backend). */
#ifndef STRATA_BACKEND_CUDA_Q8GEMV_BLOCKS_CUH
#define STRATA_BACKEND_CUDA_Q8GEMV_BLOCKS_CUH

#include <float.h>
#include <stdint.h>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/qgemv_loads.cuh"

/* A quantized x on the device: codes (n, in) int8, then from byte
 * align256(n in) the (dx, s) pairs (n, in / 16) of f32 (kernels_qgemv_q8.cu's
 * header comment); q8x_at's view of one at buf. */
struct q8x {
	const int8_t *q;
	const float2 *ds; /* (dx, s) of each 16 */
	uint32_t in;
};

static uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

static q8x q8x_at(const void *buf, uint32_t n, uint32_t in)
{
	q8x x;
	x.q = (const int8_t *)buf;
	x.ds = (const float2 *)((const char *)buf + align256((uint64_t)n * in));
	x.in = in;
	return x;
}

/* 16 floats at p: four 16-byte loads where p is aligned, else one by one. */
static __device__ __forceinline__ void ld16(const float *p, float *v)
{
	if (!((uintptr_t)p & 15)) {
#pragma unroll
		for (int k = 0; k < 4; k++) {
			const float4 a = __ldg((const float4 *)p + k);
			v[4 * k] = a.x, v[4 * k + 1] = a.y;
			v[4 * k + 2] = a.z, v[4 * k + 3] = a.w;
		}
		return;
	}
#pragma unroll
	for (int k = 0; k < 16; k++)
		v[k] = __ldg(p + k);
}

/* Group `at` (16 values v) quantized as qdot.c's quantize16: codes of
 * v / dx, dx = max|v| / 127 (1 where that is 0, so the codes are 0),
 * rounded to nearest even; a NaN or infinity makes the codes 0 and dx
 * NaN. */
static __device__ __forceinline__ void quantize16(const float *v, int8_t *q,
						  float2 *ds, uint64_t at)
{
	float amax = 0.0f;
	bool bad = false;
#pragma unroll
	for (int k = 0; k < 16; k++) {
		const float a = fabsf(v[k]);
		bad |= !(a <= FLT_MAX); /* NaN or infinite */
		amax = a > amax ? a : amax;
	}
	float dx = amax / 127.0f;
	if (!(dx > 0.0f))
		dx = 1.0f; /* every v is 0 (or tiny past f32's reach) */
	int sum = 0;
	unsigned packed[4] = {0u, 0u, 0u, 0u};
#pragma unroll
	for (int k = 0; k < 16; k++) {
		float t = v[k] / dx;
		t = t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t;
		const int c = bad ? 0 : (int)rintf(t);
		sum += c;
		packed[k / 4] |= ((unsigned)c & 0xffu) << (8 * (k % 4));
	}
	*(uint4 *)(q + 16 * at) =
		make_uint4(packed[0], packed[1], packed[2], packed[3]);
	const float dd = bad ? __int_as_float(0x7fc00000) : amax / 127.0f;
	ds[at] = make_float2(dd, dd * (float)sum);
}

/* Each type as kernels_qgemv.cu's of the same name: STEP elements a warp
 * step, load() a lane's weights of step s (ok false past the row's end or
 * when !live), dot() its products with the n rows of x added to acc. The
 * factors multiply as the CPU's chunk_dot does: (weight factor x dx) x
 * integer sum, min terms as min x s. */

static __device__ __forceinline__ unsigned xq4(const q8x &x, uint32_t r,
					       uint32_t col)
{
	return __ldg((const unsigned *)(x.q + (uint64_t)r * x.in + col));
}

static __device__ __forceinline__ uint2 xq8(const q8x &x, uint32_t r,
					    uint32_t col)
{
	return __ldg((const uint2 *)(x.q + (uint64_t)r * x.in + col));
}

/* dx, and (dx, s), of the 16 elements holding column col of row r */
static __device__ __forceinline__ float xd(const q8x &x, uint32_t r,
					   uint32_t col)
{
	return __ldg(&x.ds[(uint64_t)r * (x.in / 16) + col / 16].x);
}

static __device__ __forceinline__ float2 xds(const q8x &x, uint32_t r,
					     uint32_t col)
{
	return __ldg(x.ds + (uint64_t)r * (x.in / 16) + col / 16);
}

/* Q8_0: 8 blocks a step, 4 lanes a block, 8 codes a lane (half of one
 * 16-element run of x). */
struct Q8Q8_0 {
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
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		if (!g.ok)
			return;
		const uint32_t col = 256 * s + 8 * lane;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const uint2 a = xq8(x, r, col);
			const int t = __dp4a((int)g.q.y, (int)a.y,
					     __dp4a((int)g.q.x, (int)a.x, 0));
			acc[r] += __fmul_rn(g.d, xd(x, r, col)) * (float)t;
		}
	}
};

/* Q8_0 on rows that start and end on 8-byte boundaries (w 8-byte aligned,
 * a multiple of 4 blocks a row): the same lanes as Q8Q8_0, each loading
 * the two aligned 8-byte words around its bytes [34 b + 8 k, + 10) (its
 * codes at + 2; the block's f16 d at + 0 for k = 0, whose lane hands it
 * to the block's other three by a shuffle): two loads a lane where
 * Q8Q8_0 issues up to four, and never past the row's last word. */
struct Q8Q8_0A {
	enum { STEP = 256 };
	struct regs {
		uint2 a, b;
		unsigned o; /* (34 b + 8 k) % 8: 0, 2, 4 or 6 */
		bool ok;
	};
	static __device__ __forceinline__ void load(regs &g, const uint8_t *row,
						    uint32_t s, unsigned lane,
						    uint32_t in, bool live)
	{
		const uint32_t b = 8 * s + lane / 4;
		g.ok = live && b < in / 32;
		g.o = 0;
		g.a = g.b = make_uint2(0u, 0u); /* what the shuffle reads */
		if (!g.ok)
			return;
		const uint64_t at = (uint64_t)b * 34 + 8 * (lane % 4);
		const uint2 *p = (const uint2 *)(row + (at & ~(uint64_t)7));
		g.a = __ldcs(p);
		g.b = __ldcs(p + 1);
		g.o = (unsigned)(at & 7);
	}
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		/* every lane takes part in the shuffle, loaded or not */
		const unsigned dw = g.o < 4 ? g.a.x : g.a.y;
		const unsigned dh = __shfl_sync(STRATA__FULL_MASK,
						(dw >> (8 * (g.o & 3))) & 0xffffu,
						lane & ~3u);
		if (!g.ok)
			return;
		const float d = __half2float(__ushort_as_half((unsigned short)dh));
		const unsigned c = g.o + 2, sh = 8 * (c & 3);
		const unsigned w0 = c < 4 ? g.a.x : c < 8 ? g.a.y : g.b.x;
		const unsigned w1 = c < 4 ? g.a.y : c < 8 ? g.b.x : g.b.y;
		const unsigned w2 = c < 4 ? g.b.x : g.b.y;
		const unsigned q0 = __funnelshift_r(w0, w1, sh);
		const unsigned q1 = __funnelshift_r(w1, w2, sh);
		const uint32_t col = 256 * s + 8 * lane;
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const uint2 a = xq8(x, r, col);
			const int t = __dp4a((int)q1, (int)a.y,
					     __dp4a((int)q0, (int)a.x, 0));
			acc[r] += __fmul_rn(d, xd(x, r, col)) * (float)t;
		}
	}
};

/* Q4_0: 8 blocks a step, 4 lanes a block, 4 bytes a lane: 4 low nibbles
 * (elements 4 (lane % 4) ..) and their 4 high ones (16 further on). */
struct Q8Q4_0 {
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
	template <int NR>
	static __device__ __forceinline__ void dot(const regs &g, const q8x &x,
						   uint32_t s, unsigned lane,
						   uint32_t n, float (&acc)[NR])
	{
		if (!g.ok)
			return;
		/* nibble - 8, a signed byte each */
		const int lo = (int)__vsub4(g.q & 0x0f0f0f0fu, 0x08080808u);
		const int hi = (int)__vsub4((g.q >> 4) & 0x0f0f0f0fu, 0x08080808u);
		const uint32_t col = 32 * (8 * s + lane / 4) + 4 * (lane % 4);
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if ((uint32_t)r >= n)
				break;
			const int ta = __dp4a(lo, (int)xq4(x, r, col), 0);
			const int tb = __dp4a(hi, (int)xq4(x, r, col + 16), 0);
			acc[r] += __fmul_rn(g.d, xd(x, r, col)) * (float)ta +
				  __fmul_rn(g.d, xd(x, r, col + 16)) * (float)tb;
		}
	}
};

#endif
