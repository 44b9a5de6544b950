/* cuda_experts.c - the CUDA kernel table's experts slot: a mixture-of-
 * experts layer's routed experts (every hit of a decode step) through the
 * grouped kernels of kernels_experts.cu, five launches and one copy
 * whatever the number of hits (layer: backend).
 *
 * The slot takes a call where the one-expert path would have run the
 * 8-bit decode GEMVs anyway: --precision fast (the context's decode_q8),
 * gate and up of one type and the downs of one type, each Q8_0 or Q4_0
 * (q8gemv_blocks.cuh's readers; the K-quants' are kernels_qgemv_q8.cu's
 * own), at most STRATA__CUDA_GEMV_ROWS rows a hit, and the hits' table
 * and buffers inside the context's scratch block. Anything else (bf16
 * experts, prefill's many rows, the exact precision) is declined, and the
 * wrapper runs one expert at a time as before.
 *
 * Where things go: the table (hits, then each slot's row and weight, then
 * each x row's slots) is built on the stack and copied to the scratch
 * block's token region, in stream order as the embed kernel's ids are;
 * the quantized rows, the gates' outputs, their quantization and the
 * downs' outputs take the scratch block from its q8 region on (the
 * attention partials' too: the stream has run attention before this).
 */
#include <string.h>

#include "backend/cuda/cuda_experts.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.h"

/* The host table's bytes at most (the token region holds 64 KiB). */
#define TABLE_BYTES_MAX ((uint64_t)16 << 10)

static uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

/* Where each part of one call lives (byte offsets). */
typedef struct layout {
	uint32_t hits, slots, rows_max;
	uint64_t slot_row, slot_weight, row_first, row_slot, table_bytes;
	uint64_t qx, h, qh, out, work_bytes; /* from the q8 region */
} layout;

/* The call's layout; false where it does not fit (or a hit has more rows
 * than the GEMV holds). */
static bool plan_layout(uint32_t n, const strata_kernel_expert *e,
			uint32_t count, layout *l)
{
	memset(l, 0, sizeof *l);
	for (uint32_t i = 0; i < count; i++) {
		if (!e[i].m)
			continue;
		if (e[i].m > STRATA__CUDA_GEMV_ROWS)
			return false;
		l->hits++;
		l->slots += e[i].m;
		l->rows_max = e[i].m > l->rows_max ? e[i].m : l->rows_max;
	}
	if (!l->hits)
		return false;
	const uint32_t dim = e[0].gate.cols, ffn = e[0].gate.rows;
	const uint64_t s = l->slots;
	l->slot_row = (uint64_t)l->hits * sizeof(strata__cuda_expert_hit);
	l->slot_weight = l->slot_row + s * 4;
	l->row_first = l->slot_weight + s * 4;
	l->row_slot = l->row_first + ((uint64_t)n + 1) * 4;
	l->table_bytes = l->row_slot + s * 4;
	l->qx = 0;
	l->h = l->qx + align256(strata__cuda_q8x_bytes(l->slots, dim));
	l->qh = l->h + align256(s * ffn * 4);
	l->out = l->qh + align256(strata__cuda_q8x_bytes(l->slots, ffn));
	l->work_bytes = l->out + s * dim * 4;
	return l->table_bytes <= TABLE_BYTES_MAX &&
	       l->table_bytes <= (uint64_t)STRATA__CUDA_TOKENS_MAX * 4 &&
	       l->work_bytes <= STRATA__CUDA_SCRATCH_BYTES -
					STRATA__CUDA_SCRATCH_Q8X;
}

/* The block type the grouped kernels read for w, or -1. */
static int grouped_type(const strata_weight *w)
{
	strata_block_type b = strata_weight_type_block(w->type);
	if (b >= STRATA_BLOCK_COUNT || ((uintptr_t)w->data & 3) ||
	    !strata__cuda_experts_takes((int)b, w->cols))
		return -1;
	return (int)b;
}

/* The table of the call into t (l's layout): each hit with rows, its
 * slots' rows and weights, then each x row's slots in the hits' order
 * (counted, summed to offsets, filled, the offsets shifted back). */
static void fill_table(char *t, const layout *l, uint32_t n,
		       const strata_kernel_expert *e, uint32_t count)
{
	strata__cuda_expert_hit *hits = (strata__cuda_expert_hit *)t;
	int32_t *slot_row = (int32_t *)(t + l->slot_row);
	float *slot_weight = (float *)(t + l->slot_weight);
	uint32_t *first = (uint32_t *)(t + l->row_first);
	uint32_t *row_slot = (uint32_t *)(t + l->row_slot);
	uint32_t h = 0, at = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (!e[i].m)
			continue;
		hits[h++] = (strata__cuda_expert_hit){e[i].gate.data,
						      e[i].up.data,
						      e[i].down.data, at,
						      e[i].m};
		memcpy(slot_row + at, e[i].rows, (size_t)e[i].m * 4);
		memcpy(slot_weight + at, e[i].weight, (size_t)e[i].m * 4);
		at += e[i].m;
	}
	memset(first, 0, ((size_t)n + 1) * 4);
	for (uint32_t s = 0; s < l->slots; s++)
		first[slot_row[s] + 1]++;
	for (uint32_t r = 0; r < n; r++)
		first[r + 1] += first[r];
	for (uint32_t s = 0; s < l->slots; s++)
		row_slot[first[slot_row[s]]++] = s;
	for (uint32_t r = n; r > 0; r--)
		first[r] = first[r - 1];
	first[0] = 0;
}

/* ------------------------------------------------------------------------ */

bool strata__cuda_experts_take(void *ctx, uint32_t n,
			       const strata_kernel_expert *e, uint32_t count)
{
	const strata__cuda_compute *k = ctx;
	layout l;
	if (!k->decode_q8 || !plan_layout(n, e, count, &l))
		return false;
	const int gt = grouped_type(&e[0].gate), dt = grouped_type(&e[0].down);
	if (gt < 0 || dt < 0)
		return false;
	for (uint32_t i = 0; i < count; i++)
		if (e[i].m && (grouped_type(&e[i].gate) != gt ||
			       grouped_type(&e[i].up) != gt ||
			       grouped_type(&e[i].down) != dt))
			return false;
	return true;
}

strata_status strata__cuda_experts_run(void *ctx, float *y, const float *x,
				       uint32_t n,
				       const strata_kernel_expert *e,
				       uint32_t count, strata_error *err)
{
	strata__cuda_compute *k = ctx;
	layout l;
	if (!strata__cuda_experts_take(ctx, n, e, count) ||
	    !plan_layout(n, e, count, &l))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "CUDA grouped experts: not taken (experts_take)");
	_Alignas(16) char table[TABLE_BYTES_MAX];
	fill_table(table, &l, n, e, count);
	char *dt = (char *)k->scratch + STRATA__CUDA_SCRATCH_TOKENS;
	char *w = (char *)k->scratch + STRATA__CUDA_SCRATCH_Q8X;
	/* from pageable memory: the copy has read the table when it returns */
	int ce = strata_backend_cuda_sys.memcpy_async(
		dt, table, (size_t)l.table_bytes, cudaMemcpyHostToDevice,
		(void *)k->stream.cuda);
	if (ce != cudaSuccess) {
		strata__cuda_fail(err, (cudaError_t)ce, "expert table copy");
		return strata_error_prefix(err, "grouped experts");
	}
	int gate_aligned = 1, down_aligned = 1;
	for (uint32_t i = 0; i < count; i++)
		if (e[i].m) {
			gate_aligned &= !((uintptr_t)e[i].gate.data % 8) &&
					!((uintptr_t)e[i].up.data % 8);
			down_aligned &= !((uintptr_t)e[i].down.data % 8);
		}
	const strata__cuda_experts_args a = {
		.y = y,
		.x = x,
		.n = n,
		.dim = e[0].gate.cols,
		.ffn = e[0].gate.rows,
		.hits = (const strata__cuda_expert_hit *)dt,
		.count = l.hits,
		.slots = l.slots,
		.rows_max = l.rows_max,
		.slot_row = (const int32_t *)(dt + l.slot_row),
		.slot_weight = (const float *)(dt + l.slot_weight),
		.row_first = (const uint32_t *)(dt + l.row_first),
		.row_slot = (const uint32_t *)(dt + l.row_slot),
		.gate_type = grouped_type(&e[0].gate),
		.down_type = grouped_type(&e[0].down),
		.gate_aligned = gate_aligned,
		.down_aligned = down_aligned,
		.qx = w + l.qx,
		.h = (float *)(w + l.h),
		.qh = w + l.qh,
		.out = (float *)(w + l.out),
	};
	cudaError_t le = strata__cuda_experts(k->stream.cuda, &a);
	if (le == cudaSuccess)
		return STRATA_OK;
	strata__cuda_fail(err, le, "CUDA kernel");
	return strata_error_prefix(err, "grouped experts");
}
