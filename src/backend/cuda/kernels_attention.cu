/* kernels_attention.cu - CUDA rotary position embedding and grouped-query
 * attention over a KV cache in device memory, causal and optionally
 * windowed, for decode (one query) and prefill (many) alike (layer:
 * backend).
 *
 * Attention gives one block to each (query, head) pair and walks the keys in
 * tiles of ATT_TILE: a warp per key forms the scores (coalesced reads of the
 * key row), the tile's maximum updates a running softmax that rescales what
 * was summed so far, and each thread accumulates its own output elements
 * from the value rows. Memory is the tile's scores and two head rows in
 * shared memory, whatever the context length.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.h"

#define ATT_THREADS 128u
#define ATT_TILE 128u
#define ROPE_THREADS 256u

/* ------------------------------------------------------------------------ */

/* One thread per (row, head, pair); the angle is one float product, as the
 * CPU kernel and transformers form it. */
__global__ void rope_kernel(float *x, uint32_t n, uint32_t pos0,
			    uint32_t heads, uint32_t head_dim,
			    const float *inv_freq, int interleaved)
{
	const uint32_t half = head_dim / 2;
	const uint64_t count = (uint64_t)n * heads * half;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     idx < count; idx += stride) {
		uint32_t f = (uint32_t)(idx % half);
		uint64_t rh = idx / half; /* row * heads + head */
		uint32_t i = (uint32_t)(rh / heads);
		float pos = (float)((uint64_t)pos0 + i);
		float angle = pos * inv_freq[f];
		float c = cosf(angle), sn = sinf(angle);
		float *h = x + rh * head_dim;
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
} att_args;

/* Scores of keys t0 .. t0+cnt-1 against sq into sp, one warp per key. */
__device__ __forceinline__ void tile_scores(const att_args &a, const float *sq,
					    float *sp, uint64_t t0,
					    uint32_t cnt, uint32_t kvh)
{
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t warps = blockDim.x >> 5;
	const uint64_t kv_stride = (uint64_t)a.kv_heads * a.head_dim;
	for (uint32_t j = warp; j < cnt; j += warps) {
		const float *kr = a.k + (t0 + j) * kv_stride +
				  (uint64_t)kvh * a.head_dim;
		float d = 0.0f;
		for (uint32_t e = lane; e < a.head_dim; e += 32)
			d += sq[e] * kr[e];
		d = strata__warp_sum(d);
		if (lane == 0)
			sp[j] = d * a.scale;
	}
}

__global__ void attention_kernel(att_args a)
{
	extern __shared__ float sh[];
	__shared__ float red[ATT_THREADS / 32];
	const uint32_t hd = a.head_dim;
	float *sq = sh, *so = sh + hd, *sp = sh + 2 * hd; /* sp: ATT_TILE */
	const uint64_t total = (uint64_t)a.n * a.heads;
	const uint32_t group = a.heads / a.kv_heads;
	const uint64_t q_stride = (uint64_t)a.heads * hd;
	const uint64_t kv_stride = (uint64_t)a.kv_heads * hd;

	for (uint64_t pair = blockIdx.x; pair < total; pair += gridDim.x) {
		const uint32_t i = (uint32_t)(pair / a.heads);
		const uint32_t h = (uint32_t)(pair % a.heads);
		const uint32_t kvh = h / group;
		const uint64_t p = (uint64_t)a.pos0 + i;
		uint64_t first = 0;
		if (a.window && p + 1 > a.window)
			first = p + 1 - a.window;
		const float *qr = a.q + i * q_stride + (uint64_t)h * hd;
		for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x) {
			sq[e] = qr[e];
			so[e] = 0.0f;
		}
		__syncthreads();
		float m = -INFINITY, l = 0.0f;
		for (uint64_t t0 = first; t0 <= p; t0 += ATT_TILE) {
			uint32_t cnt = (uint32_t)(p + 1 - t0 < ATT_TILE
							  ? p + 1 - t0
							  : ATT_TILE);
			tile_scores(a, sq, sp, t0, cnt, kvh);
			__syncthreads();
			float tm = -INFINITY;
			for (uint32_t j = threadIdx.x; j < cnt; j += blockDim.x)
				tm = fmaxf(tm, sp[j]);
			tm = strata__block_max(tm, red);
			/* The new maximum rescales what was summed so far
			 * (c = 0 on the first tile, where m is -inf). */
			const float nm = fmaxf(m, tm);
			const float c = expf(m - nm);
			for (uint32_t j = threadIdx.x; j < cnt; j += blockDim.x)
				sp[j] = expf(sp[j] - nm);
			__syncthreads();
			float ts = 0.0f;
			for (uint32_t j = threadIdx.x; j < cnt; j += blockDim.x)
				ts += sp[j];
			ts = strata__block_sum(ts, red);
			l = l * c + ts;
			m = nm;
			const float *vb = a.v + t0 * kv_stride + (uint64_t)kvh * hd;
			for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x) {
				float acc = so[e] * c;
				for (uint32_t j = 0; j < cnt; j++)
					acc += sp[j] * vb[j * kv_stride + e];
				so[e] = acc;
			}
			__syncthreads();
		}
		const float inv = 1.0f / l;
		float *orow = a.out + i * q_stride + (uint64_t)h * hd;
		for (uint32_t e = threadIdx.x; e < hd; e += blockDim.x)
			orow[e] = so[e] * inv;
		__syncthreads();
	}
}

/* ------------------------------------------------------------------------ */

extern "C" cudaError_t strata__cuda_rope(cudaStream_t s, float *x, uint32_t n,
					 uint32_t pos0, uint32_t heads,
					 uint32_t head_dim,
					 const float *inv_freq, int layout)
{
	uint64_t count = (uint64_t)n * heads * (head_dim / 2);
	rope_kernel<<<strata__grid(count, ROPE_THREADS), ROPE_THREADS, 0, s>>>(
		x, n, pos0, heads, head_dim, inv_freq, layout);
	return cudaGetLastError();
}

extern "C" uint64_t strata__cuda_attention_smem_bytes(uint32_t head_dim)
{
	return ((uint64_t)2 * head_dim + ATT_TILE) * sizeof(float);
}

extern "C" cudaError_t strata__cuda_attention(cudaStream_t s, float *out,
					      const float *q, const float *k,
					      const float *v, uint32_t n,
					      uint32_t pos0, uint32_t heads,
					      uint32_t kv_heads,
					      uint32_t head_dim, uint32_t window,
					      float scale)
{
	att_args a = {out, q, k, v, n, pos0, heads, kv_heads, head_dim,
		      window, scale};
	uint64_t pairs = (uint64_t)n * heads;
	attention_kernel<<<strata__grid(pairs, 1), ATT_THREADS,
			   strata__cuda_attention_smem_bytes(head_dim), s>>>(a);
	return cudaGetLastError();
}
