/* kernels_experts.cu - a mixture-of-experts layer's routed experts in five
 * kernels, whatever the number of hits: the gather and 8-bit quantization
 * of their input rows, all gates and ups (SwiGLU fused), the quantization
 * of their outputs, all downs, and the weighted sum into the residual
 * stream (layer: backend).
 *
 * Why: one expert's decode step was a gather, two quantizations, two
 * GEMVs and a scatter-add (and three small copies), so a Qwen3-MoE token
 * at top-8 queued ~48 launches a layer, and on the H200 that launch chain,
 * not the weights' bytes, set the decode rate (docs/cuda.md "Grouped
 * experts"). Here each GEMV's grid is (its rows' blocks, hits): block
 * (b, h) reads hit h's weight pointers and rows from a table the copy
 * before the chain uploaded, and computes as kernels_qgemv_q8.cu's
 * q8gemv_kernel computes one expert alone (the same block readers,
 * q8gemv_blocks.cuh, the same lanes, split and unroll), so every slot's
 * gate, up and down values are those bits.
 *
 * The sum is deterministic: down writes each slot's row to its own place
 * (no atomics), and one thread per output element adds that element's
 * slots in the hits' order, each product rounded before the sum, as the
 * expert-by-expert scatter-adds did.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_experts.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/q8gemv_blocks.cuh"
#include "backend/cuda/qgemv_loads.cuh"

#define GX_THREADS 256u /* gather: a block quantizes 256 x 16 elements */
#define SUM_THREADS 256u

/* ------------------------------------------------------------------------ */
/* Kernels                                                                  */
/* ------------------------------------------------------------------------ */

/* Slot blockIdx.y's row of x (x's row ids[slot], or row slot where ids is
 * NULL) quantized as kernels_qgemv_q8.cu's quantize_x_kernel quantizes
 * it, one thread per 16 elements. */
__global__ void __launch_bounds__(GX_THREADS)
gather_quantize_kernel(int8_t *q, float2 *ds, const float *x,
		       const int32_t *ids, uint32_t in)
{
	strata__chain_wait();
	strata__chain_next();
	const uint64_t slot = blockIdx.y;
	const uint32_t grp = blockIdx.x * blockDim.x + threadIdx.x;
	if (grp >= in / 16)
		return;
	const uint64_t row = ids ? (uint64_t)(uint32_t)ids[slot] : slot;
	float v[16];
	ld16(x + row * in + 16 * grp, v);
	quantize16(v, q, ds, slot * (in / 16) + grp);
}

/* Rows [row0, row0 + per) of hit blockIdx.y's gate and up (GLU: y =
 * silu(x . gate) * (x . up)) or down, over its m slots of the quantized
 * x; y (slots, out), its rows at the hit's first slot. The body is
 * q8gemv_kernel's for one matrix: `split` warps share a row, each lane
 * issues the loads of U steps before using any, and the weights are read
 * before the wait for x (the table was copied before the chain began). */
template <typename B, int NR, int U, bool GLU>
__global__ void __launch_bounds__(QG_THREADS)
experts_gemv_kernel(const strata__cuda_expert_hit *hits, q8x xs, float *y,
		    uint32_t out, uint64_t rb, int split)
{
	__shared__ float red[QG_WARPS][2 * NR];
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t part = warp % (uint32_t)split, in = xs.in;
	const uint64_t row = (uint64_t)blockIdx.x * (QG_WARPS / (uint32_t)split) +
			     warp / (uint32_t)split;
	const strata__cuda_expert_hit h = hits[blockIdx.y];
	const uint8_t *w0 = (const uint8_t *)(GLU ? h.gate : h.down);
	const uint8_t *w1 = GLU ? (const uint8_t *)h.up : NULL;
	const uint32_t n = h.m;
	q8x x;
	x.q = xs.q + (uint64_t)h.first * in;
	x.ds = xs.ds + (uint64_t)h.first * (in / 16);
	x.in = in;
	const bool live = row < out;
	const uint32_t steps = (in + B::STEP - 1) / B::STEP;
	const uint32_t s0 = (uint32_t)((uint64_t)steps * part / split);
	const uint32_t s1 = (uint32_t)((uint64_t)steps * (part + 1) / split);
	float a0[NR], a1[NR]; /* a1: up's sums (GLU) */
#pragma unroll
	for (int r = 0; r < NR; r++)
		a0[r] = a1[r] = 0.0f;
	if (live) {
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
	if (!live || part != 0 || lane != 0)
		return;
#pragma unroll
	for (int r = 0; r < NR; r++) {
		if ((uint32_t)r >= n)
			break;
		float *yr = y + ((uint64_t)h.first + r) * out + row;
		if (GLU) {
			const float gv = a0[r], uv = a1[r];
			*yr = gv / (1.0f + expf(-gv)) * uv;
		} else {
			*yr = a0[r];
		}
	}
}

/* y[i] (n, dim) += slot_weight[s] * out[s] over row i's slots in order,
 * the product rounded before the sum (scatter_add_kernel's arithmetic). */
__global__ void __launch_bounds__(SUM_THREADS)
experts_sum_kernel(float *y, const float *out, const float *slot_weight,
		   const uint32_t *row_first, const uint32_t *row_slot,
		   uint32_t n, uint32_t dim)
{
	strata__chain_wait();
	const uint64_t count = (uint64_t)n * dim;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < count; i += stride) {
		const uint64_t r = i / dim, e = i % dim;
		float acc = y[i];
		for (uint32_t k = row_first[r]; k < row_first[r + 1]; k++) {
			const uint32_t s = row_slot[k];
			acc = __fadd_rn(acc, __fmul_rn(slot_weight[s],
						       out[(uint64_t)s * dim + e]));
		}
		y[i] = acc;
	}
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                   */
/* ------------------------------------------------------------------------ */

static cudaError_t gather_quantize(cudaStream_t s, void *qbuf, const float *x,
				   const int32_t *ids, uint32_t slots,
				   uint32_t in)
{
	const q8x v = q8x_at(qbuf, slots, in);
	const uint32_t groups = in / 16;
	const dim3 grid((groups + GX_THREADS - 1) / GX_THREADS, slots);
	return strata__launch_chained(gather_quantize_kernel, grid,
				      dim3(GX_THREADS), 0, s, (int8_t *)qbuf,
				      (float2 *)v.ds, x, ids, in);
}

template <typename B, int NR, bool GLU>
static cudaError_t gemv_rows(cudaStream_t s, const strata__cuda_experts_args *a,
			     const q8x &x, float *y, uint32_t out, uint64_t rb,
			     int split, dim3 grid)
{
	if (strata__cuda_qgemv_unroll >= 8)
		return strata__launch_chained(experts_gemv_kernel<B, NR, 8, GLU>,
					      grid, dim3(QG_THREADS), 0, s,
					      a->hits, x, y, out, rb, split);
	return strata__launch_chained(experts_gemv_kernel<B, NR, 4, GLU>, grid,
				      dim3(QG_THREADS), 0, s, a->hits, x, y,
				      out, rb, split);
}

/* One grouped GEMV: out rows of every hit against the quantized slots of
 * x, the split q8_launch picks for one expert's `out` rows, NR the
 * smallest of 1, 2, 4, 8 holding every hit's rows. */
template <typename B, bool GLU>
static cudaError_t gemv(cudaStream_t s, const strata__cuda_experts_args *a,
			const q8x &x, float *y, uint32_t out, uint64_t rb)
{
	const int split = qgemv_split(out, (x.in + B::STEP - 1) / B::STEP);
	const uint32_t per = QG_WARPS / (uint32_t)split;
	const dim3 grid((out + per - 1) / per, a->count);
	if (a->rows_max == 1)
		return gemv_rows<B, 1, GLU>(s, a, x, y, out, rb, split, grid);
	if (a->rows_max == 2)
		return gemv_rows<B, 2, GLU>(s, a, x, y, out, rb, split, grid);
	if (a->rows_max <= 4)
		return gemv_rows<B, 4, GLU>(s, a, x, y, out, rb, split, grid);
	return gemv_rows<B, 8, GLU>(s, a, x, y, out, rb, split, grid);
}

/* The block reader of `type` (aligned: Q8_0's, where the rows allow). */
template <bool GLU>
static cudaError_t gemv_typed(cudaStream_t s,
			      const strata__cuda_experts_args *a, int type,
			      int aligned, const q8x &x, float *y,
			      uint32_t out)
{
	if (type == STRATA__CUDA_Q4_0)
		return gemv<Q8Q4_0, GLU>(s, a, x, y, out,
					 (uint64_t)x.in / 32 * 18);
	const uint64_t rb = (uint64_t)x.in / 32 * 34;
	if (rb % 8 == 0 && aligned && strata__cuda_q8gemv_aligned)
		return gemv<Q8Q8_0A, GLU>(s, a, x, y, out, rb);
	return gemv<Q8Q8_0, GLU>(s, a, x, y, out, rb);
}

extern "C" int strata__cuda_experts_takes(int type, uint32_t in)
{
	return (type == STRATA__CUDA_Q8_0 || type == STRATA__CUDA_Q4_0) &&
	       in > 0 && in % 32 == 0;
}

extern "C" cudaError_t strata__cuda_experts(cudaStream_t s,
					    const strata__cuda_experts_args *a)
{
	if (!a->count || a->count > 65535 || !a->slots || a->slots > 65535 ||
	    !a->rows_max || a->rows_max > STRATA__CUDA_GEMV_ROWS ||
	    !strata__cuda_experts_takes(a->gate_type, a->dim) ||
	    !strata__cuda_experts_takes(a->down_type, a->ffn) ||
	    (((uintptr_t)a->qx | (uintptr_t)a->qh) & 15))
		return cudaErrorInvalidValue;
	const q8x x = q8x_at(a->qx, a->slots, a->dim);
	const q8x hq = q8x_at(a->qh, a->slots, a->ffn);
	cudaError_t e = gather_quantize(s, a->qx, a->x, a->slot_row, a->slots,
					a->dim);
	if (e == cudaSuccess)
		e = gemv_typed<true>(s, a, a->gate_type, a->gate_aligned, x,
				     a->h, a->ffn);
	if (e == cudaSuccess)
		e = gather_quantize(s, a->qh, a->h, NULL, a->slots, a->ffn);
	if (e == cudaSuccess)
		e = gemv_typed<false>(s, a, a->down_type, a->down_aligned, hq,
				      a->out, a->dim);
	if (e == cudaSuccess)
		e = strata__launch_chained(
			experts_sum_kernel,
			dim3(strata__grid((uint64_t)a->n * a->dim, SUM_THREADS)),
			dim3(SUM_THREADS), 0, s, a->y, (const float *)a->out,
			a->slot_weight, a->row_first, a->row_slot, a->n, a->dim);
	return e;
}
