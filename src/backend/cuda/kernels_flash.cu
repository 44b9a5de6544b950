/* kernels_flash.cu - CUDA attention for prefill on tensor cores: tiled,
 * causal and windowed, grouped-query aware, flash-attention style (an online
 * softmax over tiles of keys, no score matrix beyond one tile) (layer:
 * backend).
 *
 * A block takes FA_ROWS "rows" of one key/value head: row r of kv head g is
 * query r / group of query head g * group + r % group, so the query heads
 * that share a kv head read each tile of keys and values once. Each of the
 * FA_WARPS warps owns 16 rows. Per tile of FA_KEYS keys: the tile is loaded
 * into shared memory, each warp forms its 16 x FA_KEYS scores with WMMA
 * (bf16 inputs, f32 accumulation), the running softmax of each row updates
 * its maximum and sum and rescales the row's output, and the warp adds P . V
 * (again on tensor cores) to its output rows, which live in shared memory.
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
 * Head sizes of 64 and 128 run here; others, decode (one query) and calls
 * with too few rows to fill the device go to kernels_attention.cu.
 */
#include <mma.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

using namespace nvcuda;

#define FA_WARPS 8
#define FA_THREADS (FA_WARPS * 32)
#define FA_ROWS (FA_WARPS * 16) /* rows of a block: 16 per warp */
#define FA_KEYS 64		/* keys of a tile */
/* A score row: FA_KEYS f32, or after the softmax its weights as bf16 hi at
 * element 0 and lo at element FA_PLO (both 32-byte aligned, as WMMA's loads
 * want), 288 bytes either way. */
#define FA_LDS 72
#define FA_PLO 80

typedef __nv_bfloat16 bf16;

typedef struct fa_args {
	float *out;
	const float *q, *k, *v;
	uint32_t n, pos0, heads, kv_heads, window;
	float scale;
} fa_args;

/* Shared memory of one block, for head size D: the tile's keys and values
 * (hi, lo; the queries' hi and lo use the same bytes before the first
 * tile), the scores, and the output rows. Row strides keep every WMMA
 * fragment's start 32-byte aligned. */
template <int D> struct fa_smem {
	static constexpr int LDH = D + 8; /* bf16 row stride, keys and values */
	static constexpr int LDO = D + 4; /* f32 row stride of the output */
	static constexpr size_t HALF_TILE = (size_t)FA_KEYS * LDH;
	static constexpr size_t KV_BYTES = 4 * HALF_TILE * sizeof(bf16);
	static constexpr size_t Q_BYTES = 2 * (size_t)FA_ROWS * LDH * sizeof(bf16);
	static constexpr size_t S_BYTES = (size_t)FA_ROWS * FA_LDS * sizeof(float);
	static constexpr size_t O_BYTES = (size_t)FA_ROWS * LDO * sizeof(float);
	static constexpr size_t TOTAL = KV_BYTES + S_BYTES + O_BYTES;
	static_assert(Q_BYTES <= KV_BYTES, "the queries fit the tile's bytes");
};

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>
	frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>
	frag_bt; /* K^T from row-major keys */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>
	frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* ------------------------------------------------------------------------ */

__device__ __forceinline__ void split_store(bf16 *hi, bf16 *lo, float x)
{
	bf16 h = __float2bfloat16_rn(x);
	*hi = h;
	*lo = __float2bfloat16_rn(x - __bfloat162float(h));
}

/* acc += a . b over the split terms (terms 3: hi.hi + hi.lo + lo.hi). */
template <typename FB>
__device__ __forceinline__ void mma_terms(frag_c &acc, const frag_a &ah,
					  const frag_a &al, const FB &bh,
					  const FB &bl, int terms)
{
	wmma::mma_sync(acc, ah, bh, acc);
	if (terms > 1) {
		wmma::mma_sync(acc, ah, bl, acc);
		wmma::mma_sync(acc, al, bh, acc);
	}
}

/* First key a query at position p sees. */
__device__ __forceinline__ uint64_t first_key(uint64_t p, uint32_t window)
{
	return window && p + 1 > window ? p + 1 - window : 0;
}

/* Rows [row0, row0 + FA_ROWS) of kv head kvh: the queries split into the
 * tile bytes, then each warp's 16 rows as fragments; the output rows
 * zeroed. */
template <int D>
__device__ __forceinline__ void load_queries(const fa_args &a, uint64_t row0,
					     uint32_t kvh, bf16 *tile,
					     float *so, frag_a *qh, frag_a *ql)
{
	typedef fa_smem<D> L;
	const uint32_t group = a.heads / a.kv_heads, warp = threadIdx.x >> 5;
	const uint64_t rows = (uint64_t)a.n * group;
	bf16 *hi = tile, *lo = tile + (size_t)FA_ROWS * L::LDH;
	for (uint32_t idx = threadIdx.x; idx < FA_ROWS * D; idx += FA_THREADS) {
		const uint32_t row = idx / D, e = idx % D;
		const uint64_t r = row0 + row;
		float x = 0.0f;
		if (r < rows)
			x = a.q[((r / group) * a.heads + (uint64_t)kvh * group +
				 r % group) * D + e];
		split_store(&hi[row * L::LDH + e], &lo[row * L::LDH + e], x);
		so[row * L::LDO + e] = 0.0f;
	}
	__syncthreads();
#pragma unroll
	for (int c = 0; c < D / 16; c++) {
		wmma::load_matrix_sync(qh[c], hi + warp * 16 * L::LDH + c * 16,
				       L::LDH);
		wmma::load_matrix_sync(ql[c], lo + warp * 16 * L::LDH + c * 16,
				       L::LDH);
	}
	__syncthreads(); /* the tile bytes are free for keys */
}

/* Keys and values t0 .. t0 + FA_KEYS of kv head kvh, split; rows past cnt
 * are zero. */
template <int D>
__device__ __forceinline__ void load_tile(const fa_args &a, uint64_t t0,
					  uint32_t cnt, uint32_t kvh,
					  bf16 *tile)
{
	typedef fa_smem<D> L;
	const uint64_t kv_stride = (uint64_t)a.kv_heads * D;
	bf16 *kh = tile, *kl = tile + L::HALF_TILE;
	bf16 *vh = tile + 2 * L::HALF_TILE, *vl = tile + 3 * L::HALF_TILE;
	for (uint32_t idx = threadIdx.x; idx < FA_KEYS * D; idx += FA_THREADS) {
		const uint32_t kk = idx / D, e = idx % D;
		float kx = 0.0f, vx = 0.0f;
		if (kk < cnt) {
			const uint64_t at =
				(t0 + kk) * kv_stride + (uint64_t)kvh * D + e;
			kx = a.k[at];
			vx = a.v[at];
		}
		const uint32_t s = kk * L::LDH + e;
		split_store(&kh[s], &kl[s], kx);
		split_store(&vh[s], &vl[s], vx);
	}
}

/* The running softmax of row `row` (two lanes per row, 32 keys each) over
 * the tile's scores, which it replaces with the weights (hi, lo); the
 * row's output rescaled. m and l are the row's maximum and sum so far. */
template <int D>
__device__ __forceinline__ void softmax_row(const fa_args &a, float *srow,
					    float *orow, uint64_t t0,
					    uint64_t first, uint64_t pos,
					    float &m, float &l)
{
	const uint32_t half = threadIdx.x & 1;
	float sv[32], tm = -INFINITY;
#pragma unroll
	for (int j = 0; j < 32; j++) {
		const uint64_t t = t0 + half * 32 + j;
		const bool ok = t >= first && t <= pos; /* causal, window */
		sv[j] = ok ? srow[half * 32 + j] * a.scale : -INFINITY;
		tm = fmaxf(tm, sv[j]);
	}
	tm = fmaxf(tm, __shfl_xor_sync(STRATA__FULL_MASK, tm, 1));
	const float nm = fmaxf(m, tm);
	/* no key yet (nm -inf): nothing to rescale; else c = 0 on the
	 * row's first keys, where m is -inf */
	const float c = nm == -INFINITY ? 1.0f : expf(m - nm);
	__syncwarp(); /* both lanes have read the scores the weights replace */
	bf16 *ph = (bf16 *)srow, *pl = ph + FA_PLO;
	float rs = 0.0f;
#pragma unroll
	for (int j = 0; j < 32; j++) {
		const float p = sv[j] == -INFINITY ? 0.0f : expf(sv[j] - nm);
		rs += p;
		split_store(&ph[half * 32 + j], &pl[half * 32 + j], p);
	}
	rs += __shfl_xor_sync(STRATA__FULL_MASK, rs, 1);
	l = l * c + rs;
	m = nm;
	for (uint32_t e = half * (D / 2); e < (half + 1) * (D / 2); e++)
		orow[e] *= c;
}

/* One warp's 16 rows: scores against the tile's keys into s (16 x FA_KEYS,
 * ldm FA_LDS). */
template <int D>
__device__ __forceinline__ void warp_scores(const frag_a *qh, const frag_a *ql,
					    const bf16 *tile, float *s,
					    int terms)
{
	typedef fa_smem<D> L;
	const bf16 *kh = tile, *kl = tile + L::HALF_TILE;
#pragma unroll
	for (int kb = 0; kb < FA_KEYS / 16; kb++) {
		frag_c acc;
		wmma::fill_fragment(acc, 0.0f);
#pragma unroll
		for (int c = 0; c < D / 16; c++) {
			frag_bt bh, bl;
			const size_t at = (size_t)kb * 16 * L::LDH + c * 16;
			wmma::load_matrix_sync(bh, kh + at, L::LDH);
			if (terms > 1)
				wmma::load_matrix_sync(bl, kl + at, L::LDH);
			mma_terms(acc, qh[c], ql[c], bh, bl, terms);
		}
		wmma::store_matrix_sync(s + kb * 16, acc, FA_LDS,
					wmma::mem_row_major);
	}
}

/* One warp's 16 output rows o (ldm LDO) += P (the weights in s) . V. */
template <int D>
__device__ __forceinline__ void warp_values(const float *s, const bf16 *tile,
					    float *o, int terms)
{
	typedef fa_smem<D> L;
	const bf16 *vh = tile + 2 * L::HALF_TILE, *vl = tile + 3 * L::HALF_TILE;
	const bf16 *ph = (const bf16 *)s, *pl = ph + FA_PLO;
	frag_a pah[FA_KEYS / 16], pal[FA_KEYS / 16];
#pragma unroll
	for (int kb = 0; kb < FA_KEYS / 16; kb++) {
		wmma::load_matrix_sync(pah[kb], ph + kb * 16, 2 * FA_LDS);
		wmma::load_matrix_sync(pal[kb], pl + kb * 16, 2 * FA_LDS);
	}
#pragma unroll 2
	for (int db = 0; db < D / 16; db++) {
		frag_c acc;
		wmma::load_matrix_sync(acc, o + db * 16, L::LDO,
				       wmma::mem_row_major);
#pragma unroll
		for (int kb = 0; kb < FA_KEYS / 16; kb++) {
			frag_b bh, bl;
			const size_t at = (size_t)kb * 16 * L::LDH + db * 16;
			wmma::load_matrix_sync(bh, vh + at, L::LDH);
			if (terms > 1)
				wmma::load_matrix_sync(bl, vl + at, L::LDH);
			mma_terms(acc, pah[kb], pal[kb], bh, bl, terms);
		}
		wmma::store_matrix_sync(o + db * 16, acc, L::LDO,
					wmma::mem_row_major);
	}
}

/* One block per (FA_ROWS rows, kv head); the row tiles run last first, so
 * the longest (latest queries, most keys) start first. */
template <int D>
__global__ void __launch_bounds__(FA_THREADS)
	flash_attention_kernel(fa_args a, int terms)
{
	typedef fa_smem<D> L;
	extern __shared__ __align__(128) unsigned char fa_sh[];
	bf16 *tile = (bf16 *)fa_sh;
	float *ss = (float *)(fa_sh + L::KV_BYTES);
	float *so = (float *)(fa_sh + L::KV_BYTES + L::S_BYTES);
	const uint32_t group = a.heads / a.kv_heads, kvh = blockIdx.y;
	const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const uint64_t rows = (uint64_t)a.n * group;
	const uint64_t row0 = (uint64_t)(gridDim.x - 1 - blockIdx.x) * FA_ROWS;
	const uint64_t last = (row0 + FA_ROWS < rows ? row0 + FA_ROWS : rows) - 1;
	const uint64_t hi = a.pos0 + last / group + 1;
	const uint64_t lo = first_key(a.pos0 + row0 / group, a.window);

	frag_a qh[D / 16], ql[D / 16];
	load_queries<D>(a, row0, kvh, tile, so, qh, ql);

	/* this lane's row (two lanes a row); a padding row past the last
	 * takes the last one's position, so it never meets an empty row */
	const uint32_t mine = warp * 16 + (lane >> 1);
	const uint64_t r = row0 + mine < rows ? row0 + mine : rows - 1;
	const uint64_t pos = a.pos0 + r / group, first = first_key(pos, a.window);
	float *srow = ss + (size_t)mine * FA_LDS, *orow = so + (size_t)mine * L::LDO;
	float *swarp = ss + (size_t)warp * 16 * FA_LDS;
	float *owarp = so + (size_t)warp * 16 * L::LDO;
	float m = -INFINITY, l = 0.0f;
	for (uint64_t t0 = lo; t0 < hi; t0 += FA_KEYS) {
		const uint32_t cnt =
			(uint32_t)(hi - t0 < FA_KEYS ? hi - t0 : FA_KEYS);
		load_tile<D>(a, t0, cnt, kvh, tile);
		__syncthreads();
		warp_scores<D>(qh, ql, tile, swarp, terms);
		__syncwarp();
		softmax_row<D>(a, srow, orow, t0, first, pos, m, l);
		__syncwarp();
		warp_values<D>(swarp, tile, owarp, terms);
		__syncthreads(); /* the tile is read before the next loads */
	}
	if (row0 + mine >= rows)
		return;
	const float inv = 1.0f / l;
	const uint32_t half = lane & 1;
	float *dst = a.out + ((r / group) * a.heads + (uint64_t)kvh * group +
			      r % group) * D;
	for (uint32_t e = half * (D / 2); e < (half + 1) * (D / 2); e++)
		dst[e] = orow[e] * inv;
}

/* ------------------------------------------------------------------------ */

template <int D>
static cudaError_t launch(cudaStream_t s, const fa_args &a, int terms)
{
	/* above 48 KiB of shared memory a kernel must ask for it, on each
	 * device; asked once per head size and device (the call is
	 * idempotent, so a race between threads is harmless) */
	static unsigned long long asked = 0;
	int dev = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e != cudaSuccess)
		return e;
	const unsigned long long bit = 1ull << (dev & 63);
	if (dev >= 64 || !(asked & bit)) {
		e = cudaFuncSetAttribute(flash_attention_kernel<D>,
					 cudaFuncAttributeMaxDynamicSharedMemorySize,
					 (int)fa_smem<D>::TOTAL);
		if (e != cudaSuccess)
			return e;
		if (dev < 64)
			asked |= bit;
	}
	const uint64_t rows = (uint64_t)a.n * (a.heads / a.kv_heads);
	dim3 grid((unsigned)((rows + FA_ROWS - 1) / FA_ROWS), a.kv_heads);
	flash_attention_kernel<D><<<grid, FA_THREADS, fa_smem<D>::TOTAL, s>>>(
		a, terms);
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
	const size_t need = head_dim == 64 ? fa_smem<64>::TOTAL
					   : fa_smem<128>::TOTAL;
	if (smem_optin() < need)
		return 0;
	const uint64_t rows = (uint64_t)n * (heads / kv_heads);
	const uint64_t blocks = (rows + FA_ROWS - 1) / FA_ROWS * kv_heads;
	return rows / FA_ROWS < (1u << 31) && blocks >= min_blocks;
}

extern "C" cudaError_t strata__cuda_flash_attention(
	cudaStream_t s, float *out, const float *q, const float *k,
	const float *v, uint32_t n, uint32_t pos0, uint32_t heads,
	uint32_t kv_heads, uint32_t head_dim, uint32_t window, float scale,
	int terms)
{
	fa_args a = {out, q, k, v, n, pos0, heads, kv_heads, window, scale};
	terms = terms == 1 ? 1 : 3;
	switch (head_dim) {
	case 64:
		return launch<64>(s, a, terms);
	case 128:
		return launch<128>(s, a, terms);
	}
	return cudaErrorInvalidValue;
}
