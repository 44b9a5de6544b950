/* kernels_flash_direct.cu - CUDA prefill attention on tensor cores over an
 * f16 or bf16 KV cache at one rounding (terms 1, the fast precision): the
 * cached keys and values go by cp.async straight into the layout the mma
 * fragments read, with no conversion pass (layer: backend).
 *
 * The same attention as kernels_flash.cu's kernel (which keeps f32 caches
 * and the split precision, terms 3): a block takes FD_ROWS rows of one kv
 * head (row r is query r / group of query head kvh * group + r % group),
 * heavy row tiles first, each warp 16 rows with its queries, scores,
 * online softmax and output in registers; causal and windowed masks as
 * there. What differs:
 * - keys and values stay in the cache's type E: a tile of FD_KEYS keys
 *   arrives by cp.async into shared memory as K [key][dim] and V
 *   [key][dim] (row-major, as cached), double-buffered: tile t + 1 copies
 *   in while the warps compute on tile t, one __syncthreads per tile;
 * - the mma is m16n8k16 in E itself (.bf16 or .f16, f32 accumulate); the
 *   queries (f32 in memory) are rounded to E once, into A fragments kept
 *   for the whole block, and the softmax's weights are rounded to E as
 *   they become P . V's A fragments;
 * - K's B fragments come by ldmatrix.x4 (two k-steps of one 8-key
 *   fragment per instruction), V's by ldmatrix.x4.trans from the
 *   row-major V (two 8-dim fragments of one 16-key step): no transposed
 *   copy, one instruction per two mma.
 * Rows are padded to D + 8 elements (D * 2 + 16 bytes: 272 at D 128, 144
 * at 64, both 4 banks past a multiple of 128 bytes), so the eight 16-byte
 * rows one ldmatrix phase reads fall on distinct banks, and each row stays
 * 16-byte aligned for cp.async and ldmatrix.
 *
 * Occupancy: 4 warps x 16 rows = 64 rows, tiles of 64 keys. Shared memory
 * is 2 stages x (K + V) x 64 x (D + 8) x 2 bytes = 68 KiB at D 128 (36 at
 * 64): three blocks fit an H100/H200 multiprocessor's 228 KiB. A thread
 * holds its 16 x D output (D / 2 floats), scores of a tile (32 floats) and
 * queries (D / 4 words), ~130 registers of data at D 128. Built for sm_90
 * (CUDA 13), at most 255 registers a thread (two blocks of 128 threads
 * resident) ptxas takes 230 at D 128, without spills; held to 168 (three
 * blocks) it spills 28 bytes. So D 128 runs two blocks per multiprocessor
 * (8 warps), or three with strata__cuda_flash_direct 2 (12 warps, the
 * small spill: the lead's GPU comparison decides); D 64 takes 167
 * registers at three blocks without spilling and always runs three.
 * Eight warps of 16 rows would share each tile twice as widely but could
 * not keep two blocks resident below 128 registers at D 128.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 for .bf16/.f16, and ldmatrix),
 * lane l, g = l / 4, t = l % 4:
 *   A (16 x 16): a[0] = (row g, k 2t..2t+1), a[1] = (g + 8, 2t..),
 *                a[2] = (g, 2t + 8..), a[3] = (g + 8, 2t + 8..);
 *   B (16 x 8, k x n): b[0] = (k 2t..2t+1, n g), b[1] = (k 2t + 8.., n g);
 *   C (16 x 8, f32): c[0..1] = (row g, n 2t..2t+1), c[2..3] = (g + 8, ..);
 *   ldmatrix.x4: lanes 8i .. 8i + 7 give the addresses of rows 0 .. 7 of
 *   matrix i; register i of lane l is matrix i's (row g, cols 2t..2t+1),
 *   with .trans its (rows 2t..2t+1, col g); the lower index in the low
 *   half of each register, as the mma reads it.
 * Walk-through of lane 13 (g 3, t 1) at D 128:
 *   S = Q K^T: B[k][n] = K[key n][dim k]. For key fragment j and k-steps
 *   2c, 2c + 1 lane 13 addresses matrix 13 / 8 = 1, row 13 % 8 = 5: key j
 *   8 + 5, dims 32 c + 8 .. + 15. It receives r[0] = K[j 8 + 3][32 c + 2,
 *   + 3] = b[0] of k-step 2c (k 2t = 2 within it, n g = 3), r[1] =
 *   K[j 8 + 3][32 c + 10, 11] = b[1] (k 2t + 8 = 10), r[2], r[3] the same
 *   16 dims on: k-step 2c + 1.
 *   O = P V: B[k][n] = V[key k][dim n]. For key step s and dim fragments
 *   2jj, 2jj + 1 lane 13 addresses key 16 s + (13 & 7) + (13 & 8) = 16 s
 *   + 13, dims 16 jj + (13 / 16) 8 = 16 jj: row 5 of matrix 1, which
 *   covers keys 16 s + 8 .. 15, dims 16 jj .. + 7. With .trans it receives
 *   r[0] = V[16 s + 2, 3][16 jj + 3] = b[0] of fragment 2jj (k 2t = 2, n
 *   g = 3), r[1] = V[16 s + 10, 11][16 jj + 3] = b[1], r[2], r[3] the same
 *   for dims 16 jj + 8 ..: fragment 2jj + 1.
 *   P as A: score fragments 2s (keys 16 s + 0..7) and 2s + 1 (+ 8..15)
 *   hold (row g, keys 2t..) in c[0..1] and (g + 8, ..) in c[2..3], so
 *   a[0] = pair(c[0], c[1]) of 2s, a[1] = pair(c[2], c[3]) of 2s, a[2],
 *   a[3] the same of 2s + 1: the A layout above.
 *
 * Precision: the cached keys and values are read exactly; the queries and
 * the weights are each rounded to E once (relative 2^-8 in bf16, 2^-11 in
 * f16); sums are f32, the softmax's denominator sums the unrounded
 * weights (test_cuda_kernels_attention states the tolerance). An f16
 * query beyond 65504 would overflow; attention queries are far below.
 *
 * Alignment: only 16-byte aligned caches come here (cp.async of 16);
 * kernels_flash.cu keeps the others.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/flash_common.cuh"

#define FD_THREADS (FD_WARPS * 32)
#define FD_KEYS 64 /* keys of a tile */

extern "C" {
int strata__cuda_flash_direct = 1;
}

/* Shared memory of one block: [stage 2][key FD_KEYS][LD] keys, then the
 * same for values, elements of E. */
template <int D> struct fd_smem {
	static constexpr int LD = D + 8;
	static constexpr size_t TILE = (size_t)FD_KEYS * LD;
	static constexpr size_t BYTES = 2 * 2 * TILE * 2;
};

/* ------------------------------------------------------------------------ */

/* A pair of E (x in the low half, y high) from f32, rounded to nearest
 * even, and c (16 x 8, f32) += a (16 x 16) . b (16 x 8) in E. */
template <typename E> struct fd_elem;
template <> struct fd_elem<__nv_bfloat16> {
	static __device__ __forceinline__ uint32_t pair(float x, float y)
	{
		return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x)) |
		       ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(y))
			<< 16);
	}
	static __device__ __forceinline__ void mma(float c[4],
						   const uint32_t a[4],
						   uint32_t b0, uint32_t b1)
	{
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
		      "r"(b1));
	}
};
template <> struct fd_elem<__half> {
	static __device__ __forceinline__ uint32_t pair(float x, float y)
	{
		return (uint32_t)__half_as_ushort(__float2half_rn(x)) |
		       ((uint32_t)__half_as_ushort(__float2half_rn(y)) << 16);
	}
	static __device__ __forceinline__ void mma(float c[4],
						   const uint32_t a[4],
						   uint32_t b0, uint32_t b1)
	{
		asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
		      "r"(b1));
	}
};

/* Four 8 x 8 matrices of 16-bit elements from shared memory, lane l giving
 * row l % 8 of matrix l / 8; volatile: it must stay between the barriers
 * around its tile. */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
		     "{%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p)
{
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
		     "{%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

/* Keys and values t0 .. t0 + FD_KEYS of kv head kvh into one stage's dk,
 * dv ([key][LD]), keys past cnt zero (so that their zero weights never
 * meet uninitialised values), asynchronously: one commit group. */
template <int D, typename E>
__device__ __forceinline__ void fd_stage(const fa_args &a, uint64_t t0,
					 uint32_t cnt, uint32_t kvh, E *dk,
					 E *dv)
{
	constexpr int CH = D / 8; /* 16-byte chunks of a row */
	const uint64_t stride = (uint64_t)a.kv_heads * D;
	const E *k = (const E *)a.k + (uint64_t)kvh * D;
	const E *v = (const E *)a.v + (uint64_t)kvh * D;
	for (uint32_t idx = threadIdx.x; idx < FD_KEYS * CH;
	     idx += FD_THREADS) {
		const uint32_t key = idx / CH, e = idx % CH * 8;
		const bool in = key < cnt;
		const uint64_t at = in ? (t0 + key) * stride + e : 0;
		const uint32_t to = key * fd_smem<D>::LD + e;
		cp_async16(dk + to, k + at, in ? 16 : 0);
		cp_async16(dv + to, v + at, in ? 16 : 0);
	}
	cp_async_commit();
}

/* The online softmax's step for one tile: scale and mask the scores s
 * (keys t0 - lo + ..., masks where the tile crosses a row's first or last
 * key), the new maxima m, the factor c the old sums and outputs take, and
 * mz, the maximum the weights subtract. As kernels_flash.cu does it. */
__device__ __forceinline__ void fd_softmax(float s[FD_KEYS / 8][4],
					   uint32_t rel0, bool whole,
					   const uint32_t rfirst[2],
					   const uint32_t rpos[2], uint32_t t2,
					   float scale, float m[2], float c[2],
					   float mz[2])
{
	float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
	for (int j = 0; j < FD_KEYS / 8; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int h = i >> 1;
			const uint32_t key = rel0 + j * 8 + t2 + (i & 1);
			const bool ok = whole ||
					(key >= rfirst[h] && key <= rpos[h]);
			s[j][i] = ok ? s[j][i] * scale : -INFINITY;
			mx[h] = fmaxf(mx[h], s[j][i]);
		}
#pragma unroll
	for (int h = 0; h < 2; h++) {
		mx[h] = fmaxf(mx[h],
			      __shfl_xor_sync(STRATA__FULL_MASK, mx[h], 1));
		mx[h] = fmaxf(mx[h],
			      __shfl_xor_sync(STRATA__FULL_MASK, mx[h], 2));
		const float nm = fmaxf(m[h], mx[h]);
		/* no key yet (nm -inf): nothing to rescale; else c = 0 on
		 * the row's first keys, where m is -inf */
		c[h] = nm == -INFINITY ? 1.0f : fast_exp2(m[h] - nm);
		m[h] = nm;
		/* a row with no key yet subtracts 0: its scores are all
		 * -inf, whose weights exp2 makes 0 */
		mz[h] = nm == -INFINITY ? 0.f : nm;
	}
}

/* One block per (FD_ROWS rows, kv head), the row tiles last first (the
 * longest start first), at least MINB blocks per multiprocessor (the
 * registers a thread may take follow). Lane l holds rows g = l / 4 and
 * g + 8 of its warp's 16, columns 2 (l % 4) and + 1 of every 8-wide
 * fragment. */
template <int D, typename E, int MINB>
__global__ void __launch_bounds__(FD_THREADS, MINB)
	flash_direct_kernel(fa_args a)
{
	typedef fd_smem<D> L;
	typedef fd_elem<E> X;
	extern __shared__ __align__(128) unsigned char fd_sh[];
	E *const sk = (E *)fd_sh;	  /* [2][FD_KEYS][LD] */
	E *const sv = sk + 2 * L::TILE; /* [2][FD_KEYS][LD] */
	const uint32_t group = a.heads / a.kv_heads, kvh = blockIdx.y;
	const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const uint32_t g = lane >> 2, t2 = (lane & 3) * 2;
	const uint64_t rows = (uint64_t)a.n * group;
	const uint64_t row0 = (uint64_t)(gridDim.x - 1 - blockIdx.x) * FD_ROWS;
	const uint64_t last = (row0 + FD_ROWS < rows ? row0 + FD_ROWS : rows) - 1;
	const uint64_t hi = a.pos0 + last / group + 1;
	const uint64_t lo = first_key(a.pos0 + row0 / group, a.window);

	/* this lane's two rows; a padding row past the last takes the last
	 * one's position, so it never meets an empty row; their ranges as
	 * offsets from lo, and the block's bounds: a tile inside every row's
	 * range needs no mask */
	uint64_t r[2];
	uint32_t rpos[2], rfirst[2];
	bool live[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const uint64_t want = row0 + warp * 16 + g + 8 * h;
		live[h] = want < rows;
		r[h] = live[h] ? want : rows - 1;
		const uint64_t pos = a.pos0 + r[h] / group;
		rpos[h] = (uint32_t)(pos - lo);
		rfirst[h] = (uint32_t)(first_key(pos, a.window) - lo);
	}
	const uint64_t pos_min = a.pos0 + row0 / group;
	const uint64_t first_max = first_key(a.pos0 + last / group, a.window);

	/* the queries rounded to E, as A fragments of k-step c */
	uint32_t qf[D / 16][4];
#pragma unroll
	for (int c = 0; c < D / 16; c++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int h = i & 1, kof = c * 16 + t2 + (i >> 1) * 8;
			const float *p =
				a.q + row_at(a, r[h], kvh, group) * D + kof;
			qf[c][i] = X::pair(live[h] ? p[0] : 0.f,
					   live[h] ? p[1] : 0.f);
		}

	float o[D / 8][4];
#pragma unroll
	for (int j = 0; j < D / 8; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
	float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

	/* this lane's ldmatrix rows (see the walk-through above): K's key
	 * l % 8 at dims 8 (l / 8) of 32; V's key l % 8 + (l & 8) of 16 at
	 * dims 8 (l / 16) of 16 */
	const uint32_t k_off = (lane & 7) * L::LD + (lane >> 3) * 8;
	const uint32_t v_off = ((lane & 7) + (lane & 8)) * L::LD + (lane >> 4) * 8;

	const uint32_t tiles = (uint32_t)((hi - lo + FD_KEYS - 1) / FD_KEYS);
	fd_stage<D, E>(a, lo, (uint32_t)(hi - lo < FD_KEYS ? hi - lo : FD_KEYS),
		       kvh, sk, sv);
	for (uint32_t it = 0; it < tiles; it++) {
		const uint64_t t0 = lo + (uint64_t)it * FD_KEYS;
		cp_async_wait();
		/* tile it is in for every thread, and every warp is done
		 * with tile it - 1, whose stage the next copy takes */
		__syncthreads();
		if (it + 1 < tiles) {
			const uint64_t t1 = t0 + FD_KEYS;
			const size_t nx = (size_t)((it + 1) & 1) * L::TILE;
			fd_stage<D, E>(a, t1,
				       (uint32_t)(hi - t1 < FD_KEYS ? hi - t1
								    : FD_KEYS),
				       kvh, sk + nx, sv + nx);
		}
		const E *kt = sk + (size_t)(it & 1) * L::TILE;
		const E *vt = sv + (size_t)(it & 1) * L::TILE;

		/* scores: 8 fragments of 16 rows x 8 keys */
		float s[FD_KEYS / 8][4];
#pragma unroll
		for (int j = 0; j < FD_KEYS / 8; j++) {
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
			for (int c2 = 0; c2 < D / 32; c2++) {
				uint32_t b[4];
				ldsm_x4(b, kt + j * 8 * L::LD + k_off + c2 * 32);
				X::mma(s[j], qf[2 * c2], b[0], b[1]);
				X::mma(s[j], qf[2 * c2 + 1], b[2], b[3]);
			}
		}

		const bool whole = t0 + FD_KEYS <= pos_min + 1 && t0 >= first_max;
		float c[2], mz[2];
		fd_softmax(s, (uint32_t)(t0 - lo), whole, rfirst, rpos, t2,
			   a.scale, m, c, mz);
		l[0] *= c[0]; /* this lane's part of the sums */
		l[1] *= c[1];
#pragma unroll
		for (int j = 0; j < D / 8; j++) {
			o[j][0] *= c[0];
			o[j][1] *= c[0];
			o[j][2] *= c[1];
			o[j][3] *= c[1];
		}

		/* the weights, rounded to E, straight into P . V's A
		 * fragments: keys of step ks are score fragments 2 ks and
		 * 2 ks + 1 */
#pragma unroll
		for (int ks = 0; ks < FD_KEYS / 16; ks++) {
			uint32_t pf[4];
#pragma unroll
			for (int f = 0; f < 2; f++) {
				float p[4];
#pragma unroll
				for (int i = 0; i < 4; i++) {
					p[i] = fast_exp2(s[2 * ks + f][i] -
							 mz[i >> 1]);
					l[i >> 1] += p[i];
				}
				pf[2 * f] = X::pair(p[0], p[1]);
				pf[2 * f + 1] = X::pair(p[2], p[3]);
			}
#pragma unroll
			for (int jj = 0; jj < D / 16; jj++) {
				uint32_t b[4];
				ldsm_x4_trans(b, vt + ks * 16 * L::LD + v_off +
							 jj * 16);
				X::mma(o[2 * jj], pf, b[0], b[1]);
				X::mma(o[2 * jj + 1], pf, b[2], b[3]);
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

template <int D, typename E, int MINB>
static cudaError_t fd_launch(cudaStream_t s, const fa_args &a)
{
	/* above 48 KiB of shared memory a kernel must ask for it, on each
	 * device, and the carveout that lets three blocks share a
	 * multiprocessor is asked for with it (the copies bypass L1);
	 * asked once per kernel and device (idempotent: a race between
	 * threads is harmless) */
	static unsigned long long asked = 0;
	const size_t bytes = fd_smem<D>::BYTES;
	int dev = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e != cudaSuccess)
		return e;
	const unsigned long long bit = 1ull << (dev & 63);
	if (dev >= 64 || !(asked & bit)) {
		e = cudaFuncSetAttribute(flash_direct_kernel<D, E, MINB>,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 (int)bytes);
		if (e == cudaSuccess)
			e = cudaFuncSetAttribute(
				flash_direct_kernel<D, E, MINB>,
				cudaFuncAttributePreferredSharedMemoryCarveout,
				(int)cudaSharedmemCarveoutMaxShared);
		if (e != cudaSuccess)
			return e;
		if (dev < 64)
			asked |= bit;
	}
	const uint64_t rows = (uint64_t)a.n * (a.heads / a.kv_heads);
	dim3 grid((unsigned)((rows + FD_ROWS - 1) / FD_ROWS), a.kv_heads);
	flash_direct_kernel<D, E, MINB><<<grid, FD_THREADS, bytes, s>>>(a);
	return cudaGetLastError();
}

size_t strata__cuda_flash_direct_bytes(uint32_t head_dim)
{
	return head_dim == 64	 ? fd_smem<64>::BYTES
	       : head_dim == 128 ? fd_smem<128>::BYTES
				 : 0;
}

template <typename E>
static cudaError_t fd_launch_dim(cudaStream_t s, const fa_args &a,
				 uint32_t head_dim)
{
	switch (head_dim) {
	case 64:
		return fd_launch<64, E, 3>(s, a);
	case 128:
		return strata__cuda_flash_direct == 2 ? fd_launch<128, E, 3>(s, a)
						      : fd_launch<128, E, 2>(s, a);
	}
	return cudaErrorInvalidValue;
}

cudaError_t strata__cuda_flash_direct_launch(cudaStream_t s, const fa_args &a,
					     int kv_type, uint32_t head_dim)
{
	if (!a.vec4)
		return cudaErrorInvalidValue;
	switch (kv_type) {
	case STRATA__CUDA_KV_F16:
		return fd_launch_dim<__half>(s, a, head_dim);
	case STRATA__CUDA_KV_BF16:
		return fd_launch_dim<__nv_bfloat16>(s, a, head_dim);
	}
	return cudaErrorInvalidValue;
}
