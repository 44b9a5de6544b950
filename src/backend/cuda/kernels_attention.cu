/* kernels_attention.cu - CUDA rotary position embedding and grouped-query
 * attention over a KV cache in device memory, causal and optionally
 * windowed, for decode (one query) and prefill (many) alike (layer:
 * backend).
 *
 * Attention gives each (query, head) pair one block, or several when there
 * are too few pairs to fill the device (decode: one query, a few dozen
 * heads), each block taking a slice of the keys; a second kernel then
 * merges the slices' softmax statistics. A block walks its keys in tiles of
 * ATT_TILE: one thread per key forms a score (its own row, 16-byte loads, so
 * a whole tile of loads is in flight), the tile's maximum updates a running
 * softmax that rescales what was summed so far, and each thread accumulates
 * its own output elements from the value rows (coalesced). Memory is a
 * tile of scores and two head rows in shared memory, whatever the context.
 * One query (decode) of a head size of 64, 128 or 256 runs a kernel of
 * its own instead, a warp per key (attention_decode_kernel).
 *
 * The cache is f32, f16 or bf16 (--kv-type): each kernel is a template on
 * the element type E, reading E from the cache and computing in f32 (a
 * 2-byte row is half the bytes, read as 8-byte groups of four where the
 * f32 kernel reads float4). kv_store_kernel writes a pass's new f32 rows
 * into the cache's type, rounded to nearest even.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

#define ATT_THREADS 128u
#define ATT_TILE 128u /* one key per thread: equal to ATT_THREADS */
static_assert(ATT_TILE == ATT_THREADS, "a tile is one key per thread");
#define ROPE_THREADS 256u
/* Keys per split, at least: a tile, so no split leaves threads without a
 * key (at 65 keys, 32 made 3 splits and a combine: 13 us on an H200). */
#define ATT_MIN_SPLIT_KEYS ATT_TILE

/* ------------------------------------------------------------------------ */

/* One thread per (row, head, pair); the angle is one float product, as the
 * CPU kernel and transformers form it. A row's heads are x's `heads`
 * then x2's `heads2` (queries and keys in one launch; heads2 0: x only). */
__global__ void rope_kernel(float *x, uint32_t heads, float *x2,
			    uint32_t heads2, uint32_t n, uint32_t pos0,
			    uint32_t head_dim, const float *inv_freq,
			    int interleaved)
{
	strata__chain_wait();
	strata__chain_next();
	const uint32_t half = head_dim / 2, all = heads + heads2;
	const uint64_t count = (uint64_t)n * all * half;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     idx < count; idx += stride) {
		uint32_t f = (uint32_t)(idx % half);
		uint64_t rh = idx / half; /* row * all + head */
		uint32_t i = (uint32_t)(rh / all), head = (uint32_t)(rh % all);
		float pos = (float)((uint64_t)pos0 + i);
		float angle = pos * inv_freq[f];
		float c = cosf(angle), sn = sinf(angle);
		float *h = head < heads
				   ? x + ((uint64_t)i * heads + head) * head_dim
				   : x2 + ((uint64_t)i * heads2 + head - heads) *
						  head_dim;
		float *a = interleaved ? &h[2 * f] : &h[f];
		float *b = interleaved ? &h[2 * f + 1] : &h[f + half];
		float x0 = *a, x1 = *b;
		*a = x0 * c - x1 * sn;
		*b = x1 * c + x0 * sn;
	}
}

typedef struct att_args {
	float *out;
	const float *q;
	const void *k, *v; /* elements of the kernel's E */
	uint32_t n, pos0, heads, kv_heads, head_dim, window;
	float scale;
	float softcap;		/* 0: none (Gemma 2: cap * tanh(s / cap)) */
	uint32_t splits, chunk; /* keys of a pair cut into splits of chunk */
	float *partials;	/* splits > 1: (pair, split, head_dim + 2) */
	int vec;		/* head rows load as groups of four */
} att_args;

/* Four consecutive cache elements as f32 (p aligned to four of them). */
__device__ __forceinline__ float4 load4(const float *p)
{
	return *(const float4 *)p;
}
__device__ __forceinline__ float4 load4(const __half *p)
{
	const uint2 raw = *(const uint2 *)p;
	const float2 a = __half22float2(*(const __half2 *)&raw.x);
	const float2 b = __half22float2(*(const __half2 *)&raw.y);
	return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16 *p)
{
	const uint2 raw = *(const uint2 *)p;
	const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.x);
	const float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.y);
	return make_float4(a.x, a.y, b.x, b.y);
}

/* A scaled score, soft-capped where the model caps them. */
__device__ __forceinline__ float capped(const att_args &a, float s)
{
	return a.softcap > 0.0f ? a.softcap * tanhf(s / a.softcap) : s;
}

/* Score of one key row against sq (shared), by one thread: independent
 * 16-byte (f32) or 8-byte (f16, bf16) loads, so many keys are in flight
 * at once. */
template <typename E>
__device__ __forceinline__ float key_score(const att_args &a, const float *sq,
					   const E *kr)
{
	float d = 0.0f;
	if (a.vec) {
		const float4 *q4 = (const float4 *)sq;
#pragma unroll 8
		for (uint32_t e = 0; e < a.head_dim / 4; e++) {
			float4 x = load4(kr + 4 * e), y = q4[e];
			d += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
		}
	} else {
		for (uint32_t e = 0; e < a.head_dim; e++)
			d += sq[e] * strata__to_float(kr[e]);
	}
	return capped(a, d * a.scale);
}

/* One block per (pair, split): the split's keys in tiles of ATT_TILE, a
 * running softmax over them. With one split the result is final; with more,
 * (m, l, unnormalised o) go to the partials for attention_combine. */
template <typename E> __global__ void attention_kernel(att_args a)
{
	extern __shared__ float sh[];
	__shared__ float red[ATT_THREADS / 32];
	const uint32_t hd = a.head_dim;
	float *sq = sh, *so = sh + hd, *sp = sh + 2 * hd; /* sp: ATT_TILE */
	const uint64_t items = (uint64_t)a.n * a.heads * a.splits;
	const uint32_t group = a.heads / a.kv_heads;
	const uint64_t q_stride = (uint64_t)a.heads * hd;
	const uint64_t kv_stride = (uint64_t)a.kv_heads * hd;

	for (uint64_t item = blockIdx.x; item < items; item += gridDim.x) {
		const uint64_t pair = item / a.splits;
		const uint32_t split = (uint32_t)(item % a.splits);
		const uint32_t i = (uint32_t)(pair / a.heads);
		const uint32_t h = (uint32_t)(pair % a.heads);
		const uint32_t kvh = h / group;
		const uint64_t p = (uint64_t)a.pos0 + i;
		uint64_t first = 0;
		if (a.window && p + 1 > a.window)
			first = p + 1 - a.window;
		/* this split's keys: [lo, hi), possibly empty */
		uint64_t lo = first + (uint64_t)split * a.chunk;
		uint64_t hi = lo + a.chunk < p + 1 ? lo + a.chunk : p + 1;
		const float *qr = a.q + i * q_stride + (uint64_t)h * hd;
		for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x) {
			sq[e] = qr[e];
			so[e] = 0.0f;
		}
		__syncthreads();
		const E *kb = (const E *)a.k + (uint64_t)kvh * hd;
		const E *vb0 = (const E *)a.v + (uint64_t)kvh * hd;
		float m = -INFINITY, l = 0.0f;
		for (uint64_t t0 = lo; t0 < hi; t0 += ATT_TILE) {
			uint32_t cnt = (uint32_t)(hi - t0 < ATT_TILE ? hi - t0
								   : ATT_TILE);
			float sc = -INFINITY;
			if (threadIdx.x < cnt)
				sc = key_score(a, sq,
					       kb + (t0 + threadIdx.x) * kv_stride);
			float tm = strata__block_max(sc, red);
			/* The new maximum rescales what was summed so far
			 * (c = 0 on the first tile, where m is -inf). */
			const float nm = fmaxf(m, tm);
			const float c = expf(m - nm);
			float w = 0.0f;
			if (threadIdx.x < cnt) {
				w = expf(sc - nm);
				sp[threadIdx.x] = w;
			}
			float ts = strata__block_sum(w, red); /* barrier: sp ready */
			l = l * c + ts;
			m = nm;
			const E *vb = vb0 + t0 * kv_stride;
			for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x) {
				float acc = so[e] * c;
#pragma unroll 8
				for (uint32_t j = 0; j < cnt; j++)
					acc += sp[j] * strata__to_float(
							       vb[j * kv_stride + e]);
				so[e] = acc;
			}
			__syncthreads();
		}
		if (a.splits == 1) {
			const float inv = 1.0f / l;
			float *orow = a.out + i * q_stride + (uint64_t)h * hd;
			for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x)
				orow[e] = so[e] * inv;
		} else {
			float *part = a.partials + item * (hd + 2);
			for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x)
				part[e] = so[e];
			if (threadIdx.x == 0) {
				part[hd] = m;	  /* -inf for an empty split */
				part[hd + 1] = l; /* 0 for an empty split */
			}
		}
		__syncthreads();
	}
}

/* Decode (one query) for head sizes of 32 * PER: a block per (head, split)
 * as above, but a warp per key instead of a thread per key, so each key
 * and value row is one coalesced read (lane l holds elements l + 32 j), and
 * each warp has KEYS rows of keys and values in flight before it uses any.
 * Every warp keeps its own running softmax over its keys; the block merges
 * the warps' (m, l, o) at the end. On an H200 with 32/8 heads of 128 this
 * took 64 positions from 13.5 to 8.0 us, 512 from 22 to 11.7 and 8192 from
 * 110 to 50 us, against attention_kernel's thread per key and serial pass
 * over a tile's values. It is one function of about 95 lines, past the
 * style's 80, on purpose: the loads in flight, the running softmax and the
 * warps' merge share one set of registers, and kept whole the order that
 * was tuned on the H200 (loads issued before any is used, docs/cuda.md)
 * stays visible in one place. */
#define DEC_WARPS 4u
#define DEC_THREADS (DEC_WARPS * 32u)

template <int PER, typename E>
__global__ void attention_decode_kernel(att_args a)
{
	constexpr int KEYS = 32 / PER; /* rows in flight: 64 floats a lane */
	__shared__ float wm[DEC_WARPS], wl[DEC_WARPS];
	__shared__ float wo[DEC_WARPS][PER * 32];
	strata__chain_wait();
	strata__chain_next();
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t hd = PER * 32, group = a.heads / a.kv_heads;
	const uint64_t kv_stride = (uint64_t)a.kv_heads * hd;
	const uint64_t item = blockIdx.x;
	const uint32_t h = (uint32_t)(item / a.splits);
	const uint32_t split = (uint32_t)(item % a.splits);
	const uint64_t p = a.pos0;
	uint64_t first = 0;
	if (a.window && p + 1 > a.window)
		first = p + 1 - a.window;
	const uint64_t lo = first + (uint64_t)split * a.chunk;
	const uint64_t hi = lo + a.chunk < p + 1 ? lo + a.chunk : p + 1;
	const E *kb = (const E *)a.k + (uint64_t)(h / group) * hd + lane;
	const E *vb = (const E *)a.v + (uint64_t)(h / group) * hd + lane;
	float q[PER], o[PER];
#pragma unroll
	for (int j = 0; j < PER; j++) {
		q[j] = a.q[(uint64_t)h * hd + lane + 32 * j];
		o[j] = 0.0f;
	}
	float m = -INFINITY, l = 0.0f;
	for (uint64_t t0 = lo + (uint64_t)warp * KEYS; t0 < hi;
	     t0 += (uint64_t)DEC_WARPS * KEYS) {
		const uint32_t cnt =
			(uint32_t)(hi - t0 < (uint64_t)KEYS ? hi - t0 : KEYS);
		float kr[KEYS][PER], vr[KEYS][PER];
#pragma unroll
		for (int c = 0; c < KEYS; c++)
#pragma unroll
			for (int j = 0; j < PER; j++) {
				const uint64_t at = (t0 + c) * kv_stride + 32 * j;
				kr[c][j] = (uint32_t)c < cnt
						   ? strata__to_float(kb[at])
						   : 0.0f;
				vr[c][j] = (uint32_t)c < cnt
						   ? strata__to_float(vb[at])
						   : 0.0f;
			}
		float sc[KEYS], tm = -INFINITY;
#pragma unroll
		for (int c = 0; c < KEYS; c++) {
			float d = 0.0f;
#pragma unroll
			for (int j = 0; j < PER; j++)
				d += q[j] * kr[c][j];
			sc[c] = (uint32_t)c < cnt
					? capped(a, strata__warp_sum(d) * a.scale)
					: -INFINITY;
			tm = fmaxf(tm, sc[c]);
		}
		/* c = 0 on the warp's first keys, where m is -inf */
		const float nm = fmaxf(m, tm), c0 = expf(m - nm);
		l *= c0;
#pragma unroll
		for (int j = 0; j < PER; j++)
			o[j] *= c0;
#pragma unroll
		for (int c = 0; c < KEYS; c++) {
			const float w = (uint32_t)c < cnt ? expf(sc[c] - nm) : 0.0f;
			l += w;
#pragma unroll
			for (int j = 0; j < PER; j++)
				o[j] += w * vr[c][j];
		}
		m = nm;
	}
	if (lane == 0)
		wm[warp] = m, wl[warp] = l;
#pragma unroll
	for (int j = 0; j < PER; j++)
		wo[warp][lane + 32 * j] = o[j];
	__syncthreads();
	if (warp != 0)
		return;
	/* the warps' softmaxes merged; a warp without keys (m = -inf)
	 * weighs 0 */
	float big = -INFINITY, sum = 0.0f, f[DEC_WARPS];
	for (uint32_t w = 0; w < DEC_WARPS; w++)
		big = fmaxf(big, wm[w]);
	for (uint32_t w = 0; w < DEC_WARPS; w++) {
		f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - big);
		sum += f[w] * wl[w];
	}
	float *dst = a.splits == 1 ? a.out + (uint64_t)h * hd
				   : a.partials + item * (hd + 2);
	const float inv = a.splits == 1 ? 1.0f / sum : 1.0f;
#pragma unroll
	for (int j = 0; j < PER; j++) {
		float v = 0.0f;
		for (uint32_t w = 0; w < DEC_WARPS; w++)
			v += f[w] * wo[w][lane + 32 * j];
		dst[lane + 32 * j] = v * inv;
	}
	if (a.splits > 1 && lane == 0) {
		dst[hd] = big;	   /* -inf for an empty split */
		dst[hd + 1] = sum; /* 0 for an empty split */
	}
}

/* One block per pair: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s,
 * M the largest m_s; empty splits (m = -inf) weigh 0. */
__global__ void attention_combine(att_args a)
{
	strata__chain_wait();
	strata__chain_next();
	const uint32_t hd = a.head_dim;
	const uint64_t pairs = (uint64_t)a.n * a.heads;
	for (uint64_t pair = blockIdx.x; pair < pairs; pair += gridDim.x) {
		const float *part = a.partials + pair * a.splits * (hd + 2);
		float big = -INFINITY;
		for (uint32_t s = 0; s < a.splits; s++)
			big = fmaxf(big, part[s * (hd + 2) + hd]);
		float l = 0.0f;
		for (uint32_t s = 0; s < a.splits; s++) {
			float ms = part[s * (hd + 2) + hd];
			if (ms != -INFINITY)
				l += expf(ms - big) * part[s * (hd + 2) + hd + 1];
		}
		const float inv = 1.0f / l;
		float *orow = a.out + pair * hd; /* (i, h) rows are contiguous */
		for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x) {
			float o = 0.0f;
			for (uint32_t s = 0; s < a.splits; s++) {
				float ms = part[s * (hd + 2) + hd];
				if (ms != -INFINITY)
					o += expf(ms - big) * part[s * (hd + 2) + e];
			}
			orow[e] = o * inv;
		}
	}
}

/* ------------------------------------------------------------------------ */

extern "C" cudaError_t strata__cuda_rope(cudaStream_t s, float *x,
					 uint32_t heads, float *x2,
					 uint32_t heads2, uint32_t n,
					 uint32_t pos0, uint32_t head_dim,
					 const float *inv_freq, int layout)
{
	uint64_t count = (uint64_t)n * (heads + heads2) * (head_dim / 2);
	return strata__launch_chained(rope_kernel,
				      dim3(strata__grid(count, ROPE_THREADS)),
				      dim3(ROPE_THREADS), 0, s, x, heads, x2,
				      heads2, n, pos0, head_dim, inv_freq,
				      layout);
}

extern "C" uint64_t strata__cuda_attention_smem_bytes(uint32_t head_dim)
{
	return ((uint64_t)2 * head_dim + ATT_TILE) * sizeof(float);
}

/* Splits of `keys` for `pairs` (query, head) pairs: enough blocks for
 * target_blocks, but none with fewer than min_keys keys, and no more than
 * the partials hold; 1 when splitting would not pay. */
static uint64_t attention_splits(uint64_t pairs, uint64_t keys,
				 uint32_t target_blocks, uint64_t min_keys,
				 uint32_t head_dim, uint64_t partial_floats)
{
	uint64_t splits = 1;
	if (pairs < target_blocks)
		splits = (target_blocks + pairs - 1) / pairs;
	uint64_t by_keys = (keys + min_keys - 1) / min_keys;
	if (splits > by_keys)
		splits = by_keys;
	uint64_t room = partial_floats / (pairs * (head_dim + 2));
	if (splits > room)
		splits = room;
	return splits < 2 ? 1 : splits;
}

/* The decode kernel for this head size: PER elements of a row per lane. */
template <typename E>
static bool launch_decode(cudaStream_t s, const att_args &a, unsigned grid)
{
	void (*k)(att_args) = a.head_dim == 64	  ? attention_decode_kernel<2, E>
			      : a.head_dim == 128 ? attention_decode_kernel<4, E>
			      : a.head_dim == 256 ? attention_decode_kernel<8, E>
						  : NULL;
	if (!k)
		return false;
	(void)strata__launch_chained(k, dim3(grid), dim3(DEC_THREADS), 0, s, a);
	return true; /* an error is the caller's cudaGetLastError */
}

/* The attention kernels on a cache of E. */
template <typename E>
static void launch_attention(cudaStream_t s, const att_args &a, bool decode,
			     uint64_t blocks, uint32_t head_dim)
{
	if (!(decode && launch_decode<E>(s, a, (unsigned)blocks)))
		attention_kernel<E><<<strata__grid(blocks, 1), ATT_THREADS,
				      strata__cuda_attention_smem_bytes(head_dim),
				      s>>>(a);
}

/* f32 as a cache element of E, rounded to nearest even. */
template <typename E> __device__ __forceinline__ E kv_of(float x)
{
	return strata__from_float<E>(x);
}
template <> __device__ __forceinline__ float kv_of(float x) { return x; }

/* Rows of f32 into a cache of E (E float: a copy). */
template <typename E>
__global__ void kv_store_kernel(E *dst, const float *src, uint64_t count)
{
	strata__chain_wait();
	strata__chain_next();
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride)
		dst[i] = kv_of<E>(src[i]);
}

extern "C" cudaError_t strata__cuda_attention(
	cudaStream_t s, float *out, const float *q, const void *k,
	const void *v, int kv_type, uint32_t n, uint32_t pos0, uint32_t heads,
	uint32_t kv_heads, uint32_t head_dim, uint32_t window, float scale,
	float softcap, uint32_t target_blocks, float *partials,
	uint64_t partial_floats)
{
	if (kv_type != STRATA__CUDA_KV_F32 && kv_type != STRATA__CUDA_KV_F16 &&
	    kv_type != STRATA__CUDA_KV_BF16)
		return cudaErrorInvalidValue;
	const uintptr_t group_bytes = kv_type == STRATA__CUDA_KV_F32 ? 16 : 8;
	const uint64_t pairs = (uint64_t)n * heads;
	/* The most keys a query sees: the last one sees pos0 + n (or the
	 * window). */
	uint64_t keys = (uint64_t)pos0 + n;
	if (window && keys > window)
		keys = window;
	/* One query of a head size the warp-per-key kernel takes: its splits
	 * keep two rounds of every warp's keys in flight. */
	const bool decode = n == 1 && (head_dim == 64 || head_dim == 128 ||
				       head_dim == 256);
	const uint64_t min_keys =
		decode ? 2ull * DEC_WARPS * (32u / (head_dim / 32u))
		       : ATT_MIN_SPLIT_KEYS;
	const uint64_t splits = attention_splits(pairs, keys, target_blocks,
						 min_keys, head_dim,
						 partial_floats);
	att_args a = {out, q, k, v, n, pos0, heads, kv_heads, head_dim,
		      window, scale, softcap, (uint32_t)splits,
		      (uint32_t)((keys + splits - 1) / splits), partials,
		      head_dim % 4 == 0 && (uintptr_t)k % group_bytes == 0};
	if (kv_type == STRATA__CUDA_KV_F16)
		launch_attention<__half>(s, a, decode, pairs * splits, head_dim);
	else if (kv_type == STRATA__CUDA_KV_BF16)
		launch_attention<__nv_bfloat16>(s, a, decode, pairs * splits,
						head_dim);
	else
		launch_attention<float>(s, a, decode, pairs * splits, head_dim);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess || splits == 1)
		return e;
	return strata__launch_chained(attention_combine,
				      dim3(strata__grid(pairs, 1)),
				      dim3(ATT_THREADS), 0, s, a);
}

extern "C" cudaError_t strata__cuda_kv_store(cudaStream_t s, void *dst,
					     int kv_type, const float *src,
					     uint64_t count)
{
	const unsigned threads = 256;
	if (!count)
		return cudaSuccess;
	const dim3 grid(strata__grid(count, threads)), block(threads);
	if (kv_type == STRATA__CUDA_KV_F32)
		return strata__launch_chained(kv_store_kernel<float>, grid, block,
					      0, s, (float *)dst, src, count);
	if (kv_type == STRATA__CUDA_KV_F16)
		return strata__launch_chained(kv_store_kernel<__half>, grid,
					      block, 0, s, (__half *)dst, src,
					      count);
	if (kv_type == STRATA__CUDA_KV_BF16)
		return strata__launch_chained(kv_store_kernel<__nv_bfloat16>,
					      grid, block, 0, s,
					      (__nv_bfloat16 *)dst, src, count);
	return cudaErrorInvalidValue;
}
