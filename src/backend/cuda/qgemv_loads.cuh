/* qgemv_loads.cuh - what the two decode GEMVs on stored blocks share
 * (kernels_qgemv.cu, f32 activations; kernels_qgemv_q8.cu, 8-bit
 * activations): unaligned word loads of the weights streamed past the
 * caches, the K-quants' 6-bit scales and mins, and the split of a row over
 * the warps of a block (layer: backend). */
#ifndef STRATA_BACKEND_CUDA_QGEMV_LOADS_CUH
#define STRATA_BACKEND_CUDA_QGEMV_LOADS_CUH

#include <stdint.h>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_launch.h"

#define QG_THREADS 256u /* 8 warps */
#define QG_WARPS (QG_THREADS / 32u)
/* Warps a launch aims at before it splits rows (8 warps of a block on
 * each of ~132 multiprocessors, several blocks each). */
#define QG_TARGET_WARPS 8192u

/* Eight bytes at p (any alignment), as two words, from aligned word loads
 * streamed past the caches (the weights are read once). The third word
 * is read only when p is off a word boundary; it then holds at least one
 * byte of the eight, so the read stays inside the allocation's words. */
static __device__ __forceinline__ uint2 ld64(const uint8_t *p)
{
	const uintptr_t a = (uintptr_t)p;
	const unsigned *q = (const unsigned *)(a & ~(uintptr_t)3);
	const unsigned sh = (unsigned)(a & 3) * 8;
	const unsigned w0 = __ldcs(q), w1 = __ldcs(q + 1);
	const unsigned w2 = sh ? __ldcs(q + 2) : 0u;
	return make_uint2(__funnelshift_r(w0, w1, sh),
			  __funnelshift_r(w1, w2, sh));
}

/* Four bytes at p (any alignment), as ld64. */
static __device__ __forceinline__ unsigned ld32(const uint8_t *p)
{
	const uintptr_t a = (uintptr_t)p;
	const unsigned *q = (const unsigned *)(a & ~(uintptr_t)3);
	const unsigned sh = (unsigned)(a & 3) * 8;
	const unsigned w0 = __ldcs(q);
	const unsigned w1 = sh ? __ldcs(q + 1) : 0u;
	return __funnelshift_r(w0, w1, sh);
}

/* An f16 at p (2-byte aligned) as f32. */
static __device__ __forceinline__ float ld_f16(const uint8_t *p)
{
	return __half2float(__ushort_as_half(__ldcs((const unsigned short *)p)));
}

/* The 16-byte head of Q4_K and Q5_K (f16 d, f16 dmin, 12 bytes of 6-bit
 * scales and mins), as words; sub-block j's scale and min as base's
 * strata__q4k_scale_min reads them. */
static __device__ __forceinline__ int head_byte(const unsigned (&h)[4], int i)
{
	return (int)((h[1 + i / 4] >> (8 * (i % 4))) & 0xffu);
}

static __device__ __forceinline__ void
head_scale_min(const unsigned (&h)[4], int j, float *dl, float *ml)
{
	int sc, m;
	if (j < 4) {
		sc = head_byte(h, j) & 63;
		m = head_byte(h, j + 4) & 63;
	} else {
		sc = (head_byte(h, j + 4) & 0x0f) |
		     ((head_byte(h, j - 4) >> 2) & 0x30);
		m = (head_byte(h, j + 4) >> 4) | ((head_byte(h, j) >> 2) & 0x30);
	}
	const float d = __half2float(__ushort_as_half((unsigned short)(h[0] & 0xffffu)));
	const float dmin = __half2float(__ushort_as_half((unsigned short)(h[0] >> 16)));
	*dl = __fmul_rn(d, (float)sc);
	*ml = __fmul_rn(dmin, (float)m);
}

/* Warps a row: enough rows in flight for QG_TARGET_WARPS (1 .. 8), at
 * least one step a warp; strata__cuda_qgemv_split overrides (tests). */
static inline int qgemv_split(uint32_t out, uint32_t steps)
{
	int split = strata__cuda_qgemv_split;
	if (split <= 0) {
		split = 1;
		while (split < (int)QG_WARPS &&
		       (uint64_t)out * (uint64_t)split * 2 <= QG_TARGET_WARPS)
			split *= 2;
	}
	if (split > (int)QG_WARPS)
		split = (int)QG_WARPS;
	while (split > 1 && (split & (split - 1)))
		split--; /* a power of two divides the block's warps */
	while (split > 1 && steps < (uint32_t)split)
		split /= 2;
	return split;
}

#endif
