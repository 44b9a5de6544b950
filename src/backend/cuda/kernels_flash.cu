/* kernels_flash.cu - CUDA attention for prefill on tensor cores: tiled,
 * causal and windowed, grouped-query aware, flash-attention style (an online
 * softmax over tiles of keys, no score matrix beyond one tile) (layer:
 * backend).
 *
 * A block takes FA_ROWS "rows" of one key/value head: row r of kv head g is
 * query r / group of query head g * group + r % group, so the query heads
 * that share a kv head read each tile of keys and values once. Each of the
 * FA_WARPS warps owns 16 rows and keeps everything of them in registers, as
 * FlashAttention-2 does: its queries as mma A fragments, its scores of a
 * tile of FA_KEYS keys (16 x 64, from mma.sync m16n8k16), the running
 * softmax's maximum and sum, and its 16 x D output. The scores' accumulator
 * layout is the A fragment layout of the next product, so the softmax's
 * weights go into P . V without passing through shared memory; only the
 * tile's keys (row-major) and values (transposed) are shared, converted to
 * bf16 once per block and tile from f32 that cp.async brought into a stage
 * while the warps computed on the tile before.
 *
 * Precision: the f32 queries, keys, values and weights are each split into
 * a bf16 term and the bf16 of the remainder (hi + lo, about 16 bits), and a
 * product is hi.hi + hi.lo + lo.hi (the lo.lo term is below the f32 sums'
 * own rounding at these sizes): results track the f32 CPU kernel to ~1e-5
 * (test_cuda_kernels_attention, F32_TOL). With `terms` 1 (the compute
 * context's prefill precision "bf16", cuda_compute.c) only hi.hi is formed,
 * as transformers and llama.cpp do in bf16: three times fewer tensor-core
 * operations, inputs rounded to 8 bits.
 *
 * A KV cache of f16 or bf16 (--kv-type) is staged as it is stored, 2-byte
 * elements by cp.async (half the bytes of f32's), and converted to the
 * bf16 terms with the rest: a bf16 element is its own hi term (lo 0), an
 * f16 element (11 bits) is hi + lo exactly, so the products see the cached
 * values unchanged.
 *
 * Head sizes of 64 and 128 run here; others, decode (one query) and calls
 * with too few rows to fill the device go to kernels_attention.cu. Calls at
 * one rounding (terms 1) over a 16-byte aligned f16 or bf16 cache go to
 * kernels_flash_direct.cu instead (strata__cuda_flash_direct), which reads
 * the cached elements as they are.
 */
#include <cuda_bf16.h>
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/flash_common.cuh"

#define FA_WARPS 8
#define FA_THREADS (FA_WARPS * 32)
#define FA_ROWS (FA_WARPS * 16) /* rows of a block: 16 per warp */
#define FA_KEYS 64		/* keys of a tile */

typedef __nv_bfloat16 bf16;

/* Shared memory of one block for head size D and T terms: the stage, where
 * the next tile's f32 keys and values arrive by cp.async while the warps
 * compute on the current one, then per term the current tile's keys
 * [key][dim] and values transposed [dim][key] as bf16. The row strides
 * (+4 floats, +8 bf16) make the conversion's and the fragments' accesses of
 * a warp hit distinct banks. A 2-byte cache's stage holds its elements
 * with rows of LDS2 (+8: rows stay 16-byte aligned), in the f32 stage's
 * first half. */
template <int D> struct fa_smem {
	static constexpr int LDS = D + 4;
	static constexpr int LDS2 = D + 8;
	static constexpr int LDK = D + 8;
	static constexpr int LDV = FA_KEYS + 8;
	static constexpr size_t STAGE_FLOATS = (size_t)FA_KEYS * LDS;
	static constexpr size_t STAGE_BYTES = 2 * STAGE_FLOATS * sizeof(float);
	static constexpr size_t K_ELEMS = (size_t)FA_KEYS * LDK;
	static constexpr size_t V_ELEMS = (size_t)D * LDV;
	static constexpr size_t TERM_BYTES = (K_ELEMS + V_ELEMS) * sizeof(bf16);
	static constexpr size_t bytes(int terms)
	{
		return STAGE_BYTES + (terms > 1 ? 2 : 1) * TERM_BYTES;
	}
};

/* ------------------------------------------------------------------------ */

__device__ __forceinline__ uint32_t pack2(bf16 a, bf16 b)
{
	return (uint32_t)__bfloat16_as_ushort(a) |
	       ((uint32_t)__bfloat16_as_ushort(b) << 16);
}

/* x, y (consecutive along k) as the bf16 pair hi and the pair of their
 * remainders lo. */
__device__ __forceinline__ void split2(float x, float y, uint32_t &hi,
				       uint32_t &lo)
{
	const bf16 hx = __float2bfloat16_rn(x), hy = __float2bfloat16_rn(y);
	hi = pack2(hx, hy);
	lo = pack2(__float2bfloat16_rn(x - __bfloat162float(hx)),
		   __float2bfloat16_rn(y - __bfloat162float(hy)));
}

/* c (16 x 8, f32) += a (16 x 16, bf16, row-major) . b (16 x 8, bf16). */
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4],
					 uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
		       "r"(b1));
}

/* c += a . b over the terms (T 3: hi.hi + hi.lo + lo.hi). */
template <int T>
__device__ __forceinline__ void mma_terms(float c[4], const uint32_t ah[4],
					  const uint32_t al[4], const bf16 *bh,
					  const bf16 *bl, int off8)
{
	const uint32_t h0 = *(const uint32_t *)bh;
	const uint32_t h1 = *(const uint32_t *)(bh + off8);
	mma16816(c, ah, h0, h1);
	if (T > 1) {
		mma16816(c, ah, *(const uint32_t *)bl,
			 *(const uint32_t *)(bl + off8));
		mma16816(c, al, h0, h1);
	}
}

/* x as a cache element of E. */
template <typename E> __device__ __forceinline__ E fa_of(float x);
template <> __device__ __forceinline__ float fa_of(float x) { return x; }
template <> __device__ __forceinline__ __half fa_of(float x)
{
	return __float2half_rn(x);
}
template <> __device__ __forceinline__ bf16 fa_of(float x)
{
	return __float2bfloat16_rn(x);
}

/* Stage row stride (elements) of a cache of E. */
template <int D, typename E> struct fa_stage {
	static constexpr int LD = sizeof(E) == 4 ? fa_smem<D>::LDS
						 : fa_smem<D>::LDS2;
	static constexpr size_t ELEMS = (size_t)FA_KEYS * LD;
	static constexpr int PER16 = 16 / (int)sizeof(E); /* a cp.async */
};

/* Keys and values t0 .. t0 + FA_KEYS of kv head kvh into the stage (keys
 * past cnt zero), as stored: asynchronously where they are 16-byte
 * aligned, else by plain loads. */
template <int D, typename E>
__device__ __forceinline__ void stage_tile(const fa_args &a, uint64_t t0,
					   uint32_t cnt, uint32_t kvh,
					   void *stage)
{
	typedef fa_stage<D, E> S;
	constexpr int P = S::PER16;
	const uint64_t kv_stride = (uint64_t)a.kv_heads * D;
	const E *k = (const E *)a.k, *v = (const E *)a.v;
	E *sk = (E *)stage, *sv = sk + S::ELEMS;
	for (uint32_t idx = threadIdx.x; idx < FA_KEYS * D / P;
	     idx += FA_THREADS) {
		const uint32_t key = idx / (D / P), e = idx % (D / P) * P;
		const bool in = key < cnt;
		const uint64_t at =
			in ? (t0 + key) * kv_stride + (uint64_t)kvh * D + e : 0;
		E *dk = sk + key * S::LD + e, *dv = sv + key * S::LD + e;
		if (a.vec4) {
			cp_async16(dk, k + at, in ? 16 : 0);
			cp_async16(dv, v + at, in ? 16 : 0);
			continue;
		}
		for (int j = 0; j < P; j++) {
			dk[j] = in ? k[at + j] : fa_of<E>(0.f);
			dv[j] = in ? v[at + j] : fa_of<E>(0.f);
		}
	}
	cp_async_commit();
}

/* Four staged elements (16-byte aligned for f32, 8 for 2-byte) as f32. */
__device__ __forceinline__ float4 staged4(const float *p)
{
	return *(const float4 *)p;
}
__device__ __forceinline__ float4 staged4(const __half *p)
{
	const uint2 raw = *(const uint2 *)p;
	const float2 a = __half22float2(*(const __half2 *)&raw.x);
	const float2 b = __half22float2(*(const __half2 *)&raw.y);
	return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 staged4(const bf16 *p)
{
	const uint2 raw = *(const uint2 *)p;
	const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.x);
	const float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.y);
	return make_float4(a.x, a.y, b.x, b.y);
}

/* The staged tile as bf16 terms: keys row-major, values transposed. A
 * warp's 32 threads take 32 consecutive keys of the same four elements. */
template <int D, int T, typename E>
__device__ __forceinline__ void convert_tile(const void *stage, bf16 *sh)
{
	typedef fa_smem<D> L;
	typedef fa_stage<D, E> S;
	const E *sk = (const E *)stage, *sv = sk + S::ELEMS;
	bf16 *kh = sh, *vh = sh + L::K_ELEMS;
	bf16 *kl = sh + L::K_ELEMS + L::V_ELEMS, *vl = kl + L::K_ELEMS;
	for (uint32_t idx = threadIdx.x; idx < FA_KEYS * D / 4;
	     idx += FA_THREADS) {
		const uint32_t key = idx % FA_KEYS, e = idx / FA_KEYS * 4;
		const float4 kx = staged4(sk + key * S::LD + e);
		const float4 vx = staged4(sv + key * S::LD + e);
		uint32_t h0, l0, h1, l1;
		split2(kx.x, kx.y, h0, l0);
		split2(kx.z, kx.w, h1, l1);
		*(uint2 *)&kh[key * L::LDK + e] = make_uint2(h0, h1);
		if (T > 1)
			*(uint2 *)&kl[key * L::LDK + e] = make_uint2(l0, l1);
		const float vv[4] = {vx.x, vx.y, vx.z, vx.w};
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const bf16 h = __float2bfloat16_rn(vv[j]);
			vh[(e + j) * L::LDV + key] = h;
			if (T > 1)
				vl[(e + j) * L::LDV + key] = __float2bfloat16_rn(
					vv[j] - __bfloat162float(h));
		}
	}
}

/* One block per (FA_ROWS rows, kv head); the row tiles run last first, so
 * the longest (latest queries, most keys) start first. Lane l of a warp
 * holds rows g = l / 4 and g + 8 of the warp's 16, columns 2 (l % 4) and
 * 2 (l % 4) + 1 of every 8-wide fragment (mma.sync's accumulator layout). */
template <int D, int T, typename E>
__global__ void __launch_bounds__(FA_THREADS)
	flash_attention_kernel(fa_args a)
{
	typedef fa_smem<D> L;
	extern __shared__ __align__(128) unsigned char fa_sh[];
	void *stage = fa_sh;
	bf16 *sh = (bf16 *)(fa_sh + L::STAGE_BYTES);
	const bf16 *kh = sh, *vh = sh + L::K_ELEMS;
	const bf16 *kl = sh + L::K_ELEMS + L::V_ELEMS, *vl = kl + L::K_ELEMS;
	const uint32_t group = a.heads / a.kv_heads, kvh = blockIdx.y;
	const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const uint32_t g = lane >> 2, t2 = (lane & 3) * 2;
	const uint64_t rows = (uint64_t)a.n * group;
	const uint64_t row0 = (uint64_t)(gridDim.x - 1 - blockIdx.x) * FA_ROWS;
	const uint64_t last = (row0 + FA_ROWS < rows ? row0 + FA_ROWS : rows) - 1;
	const uint64_t hi = a.pos0 + last / group + 1;
	const uint64_t lo = first_key(a.pos0 + row0 / group, a.window);

	/* this lane's two rows; a padding row past the last takes the last
	 * one's position, so it never meets an empty row */
	uint64_t r[2], pos[2], first[2];
	bool live[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const uint64_t want = row0 + warp * 16 + g + 8 * h;
		live[h] = want < rows;
		r[h] = live[h] ? want : rows - 1;
		pos[h] = a.pos0 + r[h] / group;
		first[h] = first_key(pos[h], a.window);
	}

	/* the same as offsets from lo, and the block's bounds: a tile of keys
	 * inside every row's range needs no mask */
	uint32_t rpos[2], rfirst[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		rpos[h] = (uint32_t)(pos[h] - lo);
		rfirst[h] = (uint32_t)(first[h] - lo);
	}
	const uint64_t pos_min = a.pos0 + row0 / group;
	const uint64_t first_max = first_key(a.pos0 + last / group, a.window);

	/* the queries as A fragments, k-step c: registers {row g, k 2t},
	 * {row g+8, k 2t}, {row g, k 2t+8}, {row g+8, k 2t+8} */
	uint32_t qh[D / 16][4], ql[D / 16][4];
#pragma unroll
	for (int c = 0; c < D / 16; c++) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int h = i & 1, kof = c * 16 + t2 + (i >> 1) * 8;
			const float *p = a.q + row_at(a, r[h], kvh, group) * D + kof;
			const float x = live[h] ? p[0] : 0.f;
			const float y = live[h] ? p[1] : 0.f;
			split2(x, y, qh[c][i], ql[c][i]);
		}
	}

	float o[D / 8][4];
#pragma unroll
	for (int j = 0; j < D / 8; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
	float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

	/* the next tile copies in while the warps compute on this one */
	stage_tile<D, E>(a, lo,
			 (uint32_t)(hi - lo < FA_KEYS ? hi - lo : FA_KEYS), kvh,
			 stage);
	for (uint64_t t0 = lo; t0 < hi; t0 += FA_KEYS) {
		cp_async_wait();
		__syncthreads(); /* staged, and the last tile is read */
		convert_tile<D, T, E>(stage, sh);
		__syncthreads(); /* converted: the stage is free */
		const uint64_t t1 = t0 + FA_KEYS;
		if (t1 < hi)
			stage_tile<D, E>(a, t1,
					 (uint32_t)(hi - t1 < FA_KEYS ? hi - t1
								      : FA_KEYS),
					 kvh, stage);

		/* scores: 8 fragments of 16 x 8 keys */
		float s[FA_KEYS / 8][4];
#pragma unroll
		for (int j = 0; j < FA_KEYS / 8; j++) {
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
			const size_t at = (size_t)(j * 8 + g) * L::LDK + t2;
#pragma unroll
			for (int c = 0; c < D / 16; c++)
				mma_terms<T>(s[j], qh[c], ql[c], kh + at + c * 16,
					     kl + at + c * 16, 8);
		}

		/* the online softmax, per row: scale, mask where the tile
		 * crosses a row's first or last key (the diagonal, a
		 * window's edge), maximum over the quad */
		float mx[2] = {-INFINITY, -INFINITY};
		const bool whole = t0 + FA_KEYS <= pos_min + 1 && t0 >= first_max;
#pragma unroll
		for (int j = 0; j < FA_KEYS / 8; j++)
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const int h = i >> 1;
				const uint32_t key = (uint32_t)(t0 - lo) + j * 8 +
						     t2 + (i & 1);
				const bool ok = whole || (key >= rfirst[h] &&
							  key <= rpos[h]);
				s[j][i] = ok ? s[j][i] * a.scale : -INFINITY;
				mx[h] = fmaxf(mx[h], s[j][i]);
			}
		float c[2], mz[2];
#pragma unroll
		for (int h = 0; h < 2; h++) {
			mx[h] = fmaxf(mx[h], __shfl_xor_sync(STRATA__FULL_MASK,
							     mx[h], 1));
			mx[h] = fmaxf(mx[h], __shfl_xor_sync(STRATA__FULL_MASK,
							     mx[h], 2));
			const float nm = fmaxf(m[h], mx[h]);
			/* no key yet (nm -inf): nothing to rescale; else c
			 * = 0 on the row's first keys, where m is -inf */
			c[h] = nm == -INFINITY ? 1.0f : fast_exp2(m[h] - nm);
			m[h] = nm;
			/* a row with no key yet subtracts 0: its scores are
			 * all -inf, whose weights exp2 makes 0 */
			mz[h] = nm == -INFINITY ? 0.f : nm;
			l[h] *= c[h]; /* this lane's part of the sum */
		}
#pragma unroll
		for (int j = 0; j < D / 8; j++) {
			o[j][0] *= c[0];
			o[j][1] *= c[0];
			o[j][2] *= c[1];
			o[j][3] *= c[1];
		}

		/* the weights, straight into P . V's A fragments: keys of
		 * k-step ks are score fragments 2 ks and 2 ks + 1 */
#pragma unroll
		for (int ks = 0; ks < FA_KEYS / 16; ks++) {
			uint32_t ph[4], pl[4];
#pragma unroll
			for (int f = 0; f < 2; f++) {
				float p[4];
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const float sv = s[2 * ks + f][i];
					p[i] = fast_exp2(sv - mz[i >> 1]);
					l[i >> 1] += p[i];
				}
				split2(p[0], p[1], ph[2 * f], pl[2 * f]);
				split2(p[2], p[3], ph[2 * f + 1], pl[2 * f + 1]);
			}
#pragma unroll
			for (int j = 0; j < D / 8; j++) {
				const size_t at = (size_t)(j * 8 + g) * L::LDV +
						  ks * 16 + t2;
				mma_terms<T>(o[j], ph, pl, vh + at, vl + at, 8);
			}
		}
	}

#pragma unroll
	for (int h = 0; h < 2; h++) {
		l[h] += __shfl_xor_sync(STRATA__FULL_MASK, l[h], 1);
		l[h] += __shfl_xor_sync(STRATA__FULL_MASK, l[h], 2);
	}
#pragma unroll
	for (int h = 0; h < 2; h++) {
		if (!live[h])
			continue;
		const float inv = 1.0f / l[h];
		float *dst = a.out + row_at(a, r[h], kvh, group) * D + t2;
#pragma unroll
		for (int j = 0; j < D / 8; j++) {
			dst[j * 8] = o[j][2 * h] * inv;
			dst[j * 8 + 1] = o[j][2 * h + 1] * inv;
		}
	}
}

/* ------------------------------------------------------------------------ */

template <int D, int T, typename E>
static cudaError_t launch(cudaStream_t s, const fa_args &a)
{
	/* above 48 KiB of shared memory a kernel must ask for it, on each
	 * device; asked once per kernel and device (the call is idempotent,
	 * so a race between threads is harmless) */
	static unsigned long long asked = 0;
	const size_t bytes = fa_smem<D>::bytes(T);
	int dev = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e != cudaSuccess)
		return e;
	const unsigned long long bit = 1ull << (dev & 63);
	if (dev >= 64 || !(asked & bit)) {
		e = cudaFuncSetAttribute(flash_attention_kernel<D, T, E>,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 (int)bytes);
		if (e != cudaSuccess)
			return e;
		if (dev < 64)
			asked |= bit;
	}
	const uint64_t rows = (uint64_t)a.n * (a.heads / a.kv_heads);
	dim3 grid((unsigned)((rows + FA_ROWS - 1) / FA_ROWS), a.kv_heads);
	flash_attention_kernel<D, T, E><<<grid, FA_THREADS, bytes, s>>>(a);
	return cudaGetLastError();
}

/* The shared memory a block of this device may opt in to (bytes; 0 when
 * it cannot be told), asked once per device: a GPU with less than the
 * kernel needs (consumer parts running the PTX) keeps the other kernel. */
static size_t smem_optin(void)
{
	static int known[64];
	int dev = 0, v = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0)
		return 0;
	if (dev < 64 && known[dev])
		return (size_t)known[dev];
	if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin,
				   dev) != cudaSuccess || v < 0) {
		(void)cudaGetLastError();
		return 0;
	}
	if (dev < 64)
		known[dev] = v; /* idempotent: a race writes the same value */
	return (size_t)v;
}

extern "C" int strata__cuda_flash_takes(uint32_t n, uint32_t heads,
					uint32_t kv_heads, uint32_t head_dim,
					uint32_t min_blocks)
{
	if (n < 2 || (head_dim != 64 && head_dim != 128))
		return 0;
	/* the call may go to either kernel (terms, cache type and alignment
	 * decide): the device must take the larger need */
	const size_t old_need = head_dim == 64 ? fa_smem<64>::bytes(3)
					       : fa_smem<128>::bytes(3);
	const size_t direct_need = strata__cuda_flash_direct_bytes(head_dim);
	if (smem_optin() < (old_need > direct_need ? old_need : direct_need))
		return 0;
	const uint64_t rows = (uint64_t)n * (heads / kv_heads);
	const uint64_t blocks = (rows + FA_ROWS - 1) / FA_ROWS * kv_heads;
	/* the grid's x counts row tiles of either kernel (FD_ROWS is the
	 * smaller) */
	return rows / FD_ROWS < (1u << 31) && blocks >= min_blocks;
}

/* The kernel for head size D on a cache of E. */
template <typename E>
static cudaError_t launch_type(cudaStream_t s, const fa_args &a,
			       uint32_t head_dim, bool one)
{
	switch (head_dim) {
	case 64:
		return one ? launch<64, 1, E>(s, a) : launch<64, 3, E>(s, a);
	case 128:
		return one ? launch<128, 1, E>(s, a) : launch<128, 3, E>(s, a);
	}
	return cudaErrorInvalidValue;
}

extern "C" cudaError_t strata__cuda_flash_attention(
	cudaStream_t s, float *out, const float *q, const void *k,
	const void *v, int kv_type, uint32_t n, uint32_t pos0, uint32_t heads,
	uint32_t kv_heads, uint32_t head_dim, uint32_t window, float scale,
	int terms)
{
	const int vec4 = !(((uintptr_t)k | (uintptr_t)v) & 15);
	fa_args a = {out,      q,      k,	   v,
		     n,	       pos0,   heads,	   kv_heads,
		     window,   scale * 1.4426950408889634f, vec4};
	const bool one = terms == 1;
	if (one && vec4 && strata__cuda_flash_direct &&
	    (kv_type == STRATA__CUDA_KV_F16 || kv_type == STRATA__CUDA_KV_BF16))
		return strata__cuda_flash_direct_launch(s, a, kv_type, head_dim);
	switch (kv_type) {
	case STRATA__CUDA_KV_F32:
		return launch_type<float>(s, a, head_dim, one);
	case STRATA__CUDA_KV_F16:
		return launch_type<__half>(s, a, head_dim, one);
	case STRATA__CUDA_KV_BF16:
		return launch_type<bf16>(s, a, head_dim, one);
	}
	return cudaErrorInvalidValue;
}
