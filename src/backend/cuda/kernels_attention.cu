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
	const float *q, *k, *v;
	uint32_t n, pos0, heads, kv_heads, head_dim, window;
	float scale;
	uint32_t splits, chunk; /* keys of a pair cut into splits of chunk */
	float *partials;	/* splits > 1: (pair, split, head_dim + 2) */
	int vec;		/* head rows load as float4 */
} att_args;

/* Score of one key row against sq (shared), by one thread: independent
 * 16-byte loads, so many keys are in flight at once. */
__device__ __forceinline__ float key_score(const att_args &a, const float *sq,
					   const float *kr)
{
	float d = 0.0f;
	if (a.vec) {
		const float4 *k4 = (const float4 *)kr;
		const float4 *q4 = (const float4 *)sq;
#pragma unroll 8
		for (uint32_t e = 0; e < a.head_dim / 4; e++) {
			float4 x = k4[e], y = q4[e];
			d += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
		}
	} else {
		for (uint32_t e = 0; e < a.head_dim; e++)
			d += sq[e] * kr[e];
	}
	return d * a.scale;
}

/* One block per (pair, split): the split's keys in tiles of ATT_TILE, a
 * running softmax over them. With one split the result is final; with more,
 * (m, l, unnormalised o) go to the partials for attention_combine. */
__global__ void attention_kernel(att_args a)
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
		const float *kb = a.k + (uint64_t)kvh * hd;
		const float *vb0 = a.v + (uint64_t)kvh * hd;
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
			const float *vb = vb0 + t0 * kv_stride;
			for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x) {
				float acc = so[e] * c;
#pragma unroll 8
				for (uint32_t j = 0; j < cnt; j++)
					acc += sp[j] * vb[j * kv_stride + e];
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

/* One block per pair: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s,
 * M the largest m_s; empty splits (m = -inf) weigh 0. */
__global__ void attention_combine(att_args a)
{
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
	rope_kernel<<<strata__grid(count, ROPE_THREADS), ROPE_THREADS, 0, s>>>(
		x, heads, x2, heads2, n, pos0, head_dim, inv_freq, layout);
	return cudaGetLastError();
}

extern "C" uint64_t strata__cuda_attention_smem_bytes(uint32_t head_dim)
{
	return ((uint64_t)2 * head_dim + ATT_TILE) * sizeof(float);
}

extern "C" cudaError_t strata__cuda_attention(
	cudaStream_t s, float *out, const float *q, const float *k,
	const float *v, uint32_t n, uint32_t pos0, uint32_t heads,
	uint32_t kv_heads, uint32_t head_dim, uint32_t window, float scale,
	uint32_t target_blocks, float *partials, uint64_t partial_floats)
{
	const uint64_t pairs = (uint64_t)n * heads;
	/* The most keys a query sees: the last one sees pos0 + n (or the
	 * window). Splits keep at least ATT_MIN_SPLIT_KEYS keys each. */
	uint64_t keys = (uint64_t)pos0 + n;
	if (window && keys > window)
		keys = window;
	uint64_t splits = 1;
	if (pairs < target_blocks)
		splits = (target_blocks + pairs - 1) / pairs;
	uint64_t by_keys = (keys + ATT_MIN_SPLIT_KEYS - 1) / ATT_MIN_SPLIT_KEYS;
	if (splits > by_keys)
		splits = by_keys;
	uint64_t room = partial_floats / (pairs * (head_dim + 2));
	if (splits > room)
		splits = room;
	if (splits < 2)
		splits = 1;
	att_args a = {out, q, k, v, n, pos0, heads, kv_heads, head_dim,
		      window, scale, (uint32_t)splits,
		      (uint32_t)((keys + splits - 1) / splits), partials,
		      head_dim % 4 == 0 && (uintptr_t)k % 16 == 0};
	attention_kernel<<<strata__grid(pairs * splits, 1), ATT_THREADS,
			   strata__cuda_attention_smem_bytes(head_dim), s>>>(a);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess || splits == 1)
		return e;
	attention_combine<<<strata__grid(pairs, 1), ATT_THREADS, 0, s>>>(a);
	return cudaGetLastError();
}
