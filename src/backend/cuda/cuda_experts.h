/* cuda_experts.h - the launcher of a layer's routed experts in a few
 * kernels (kernels_experts.cu), callable from C: the device table of the
 * hits and the call's buffers (layer: backend).
 *
 * Shared by kernels_experts.cu (nvcc, C++) and cuda_experts.c, so plain
 * types only. Every pointer is device memory; cuda_experts.c checked the
 * shapes and built the table. A return of cudaSuccess means the kernels
 * were queued.
 */
#ifndef STRATA_BACKEND_CUDA_EXPERTS_H
#define STRATA_BACKEND_CUDA_EXPERTS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One hit of the table: an expert's weights, as stored, and its rows'
 * slots: slots first .. first + m - 1 (1 <= m <= STRATA__CUDA_GEMV_ROWS)
 * hold its gathered input rows, then their products, in order. */
typedef struct strata__cuda_expert_hit {
	const void *gate, *up; /* (ffn, dim) */
	const void *down;      /* (dim, ffn) */
	uint32_t first, m;
} strata__cuda_expert_hit;

/* A layer's hits: y (n, dim) += sum over slots s of x's row slot_row[s]
 * run through its hit's expert, times slot_weight[s], row r's slots
 * (row_slot[row_first[r] .. row_first[r + 1]), increasing: the hits'
 * order) added one after the other, each product rounded first. */
typedef struct strata__cuda_experts_args {
	float *y;
	const float *x;
	uint32_t n, dim, ffn;
	const strata__cuda_expert_hit *hits; /* count */
	uint32_t count;
	uint32_t slots;	   /* the hits' m summed */
	uint32_t rows_max; /* the largest m */
	const int32_t *slot_row;   /* (slots) */
	const float *slot_weight;  /* (slots) */
	const uint32_t *row_first; /* (n + 1) */
	const uint32_t *row_slot;  /* (slots) */
	/* STRATA__CUDA_Q8_0 or STRATA__CUDA_Q4_0: gate and up, and down;
	 * *_aligned: every hit's such weights start on 8 bytes (Q8_0's
	 * aligned reader, kernels_qgemv_q8.cu's rule) */
	int gate_type, down_type;
	int gate_aligned, down_aligned;
	/* workspace, 16-byte aligned: qx strata__cuda_q8x_bytes(slots,
	 * dim), h (slots, ffn) f32, qh strata__cuda_q8x_bytes(slots, ffn),
	 * out (slots, dim) f32 */
	void *qx, *qh;
	float *h, *out;
} strata__cuda_experts_args;

/* Whether the grouped kernels read `type` (a STRATA__CUDA_* block type)
 * on rows of `in` elements: Q8_0 and Q4_0 on whole 32-element blocks. */
int strata__cuda_experts_takes(int type, uint32_t in);

/* Five kernels, chained (strata__cuda_pdl): x's slot rows gathered and
 * quantized to 8 bits; every hit's gate and up with their SwiGLU (one
 * grid over the hits and the ffn rows) into h; h quantized; every hit's
 * down into out; the weighted sum into y. The products are
 * kernels_qgemv_q8.cu's, lane for lane, split and unroll chosen as there,
 * so each slot's products are the bits strata__cuda_q8gemv gives that
 * expert alone. */
cudaError_t strata__cuda_experts(cudaStream_t s,
				 const strata__cuda_experts_args *a);

#ifdef __cplusplus
}
#endif

#endif
