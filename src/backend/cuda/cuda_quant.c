/* cuda_quant.c - the CUDA kernel table's slots on weights in ggml's block
 * types, as stored: products (a GEMV reading the blocks once for up to
 * STRATA__CUDA_GEMV_ROWS rows; for more, the weights decoded to f32 a
 * slice of rows at a time into the context's workspace and multiplied by
 * cuBLAS SGEMM in full f32), embedding rows and conversions, all decoded
 * bit-identically to base's strata_block_decode (layer: backend).
 *
 * Activations stay f32 on every path (no quantized dot products), so the
 * logits track the CPU's stored products to rounding (docs/quant.md).
 */
#include <inttypes.h>
#include <limits.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.h"

/* kernels_quant.cu's type numbers are base's block types. */
#define SAME_BLOCK(name)                                                       \
	_Static_assert(STRATA__CUDA_##name == (int)STRATA_BLOCK_##name,        \
		       "kernels_quant.cu's " #name " is base's");
SAME_BLOCK(Q8_0)
SAME_BLOCK(Q4_0)
SAME_BLOCK(Q4_1)
SAME_BLOCK(Q5_0)
SAME_BLOCK(Q5_1)
SAME_BLOCK(Q2_K)
SAME_BLOCK(Q3_K)
SAME_BLOCK(Q4_K)
SAME_BLOCK(Q5_K)
SAME_BLOCK(Q6_K)
SAME_BLOCK(IQ4_NL)
SAME_BLOCK(IQ4_XS)
#undef SAME_BLOCK

/* ------------------------------------------------------------------------ */

static strata_status launched(cudaError_t e, const char *kernel,
			      strata_error *err)
{
	if (e == cudaSuccess)
		return STRATA_OK;
	strata__cuda_fail(err, e, "CUDA kernel");
	return strata_error_prefix(err, "%s", kernel);
}

/* The block type of w for kernels_quant.cu, after checking its rows are
 * whole blocks; E_UNSUPPORTED otherwise. */
static strata_status block_of(const strata_weight *w, int *type,
			      strata_error *err)
{
	strata_block_type b = strata_weight_type_block(w->type);
	if (b < STRATA_BLOCK_COUNT && strata__cuda_quant_takes((int)b, w->cols)) {
		*type = (int)b;
		return STRATA_OK;
	}
	return strata_fail(err, STRATA_E_UNSUPPORTED,
			   "run this model with --device cpu",
			   "CUDA block kernels: a %s weight of %" PRIu32
			   " columns (rows must be whole blocks)",
			   strata_weight_type_name(w->type), w->cols);
}

/* ------------------------------------------------------------------------ */

bool strata__cuda_is_block(strata_weight_type t)
{
	return t != STRATA_WEIGHT_F32 && t != STRATA_WEIGHT_BF16 &&
	       t != STRATA_WEIGHT_F16;
}

strata_status strata__cuda_quant_matmul(strata__cuda_compute *k, float *y,
					const float *x, const strata_weight *w,
					const float *bias, uint32_t n,
					strata_error *err)
{
	int type = 0;
	uint32_t in = w->cols, out = w->rows;
	strata_status s = block_of(w, &type, err);
	if (s != STRATA_OK)
		return s;
	if (n <= STRATA__CUDA_GEMV_ROWS)
		return launched(strata__cuda_gemv_quant(k->stream.cuda, y, x,
							w->data, type, bias, n,
							in, out),
				"block-type matmul (GEMV)", err);
	if (n > INT_MAX || in > INT_MAX || out > INT_MAX)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "split the product into pieces below 2^31 rows",
				   "CUDA matmul of %u x %u by %u x %u: a dimension is above %d",
				   n, in, out, in, INT_MAX);
	/* The workspace holds n x in x 4 bytes (the plan's product
	 * workspace), so a slice of at least n weight rows at a time. */
	uint64_t row_f32 = (uint64_t)in * 4;
	s = strata__cuda_reserve_ws(k, (uint64_t)n * row_f32, err);
	if (s != STRATA_OK)
		return s;
	uint64_t slice = k->half_ws_bytes / row_f32;
	slice = slice < out ? slice : out;
	uint64_t row_bytes = (uint64_t)in /
			     strata_block_elements((strata_block_type)type) *
			     strata_block_bytes((strata_block_type)type);
	const float one = 1.0f, zero = 0.0f;
	for (uint64_t r0 = 0; r0 < out; r0 += slice) {
		uint64_t m = out - r0 < slice ? out - r0 : slice;
		s = launched(strata__cuda_dequant(k->stream.cuda, k->half_ws,
						  (const char *)w->data +
							  r0 * row_bytes,
						  type, m, in, NULL),
			     "block-type matmul (decoding)", err);
		if (s != STRATA_OK)
			return s;
		/* column-major y^T (out, n): rows [r0, r0 + m) of it are
		 * y + r0 with leading dimension out */
		cublasStatus_t bs = strata__cublas.sgemm(
			k->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n,
			(int)in, &one, k->half_ws, (int)in, x, (int)in, &zero,
			y + r0, (int)out);
		if (bs != CUBLAS_STATUS_SUCCESS)
			return strata__cublas_fail(err, bs,
						   "block-type matmul (cublasSgemm)");
	}
	if (!bias)
		return STRATA_OK;
	return launched(strata__cuda_bias_add(k->stream.cuda, y, bias, n, out),
			"bias add", err);
}

strata_status strata__cuda_quant_rows(strata__cuda_compute *k, float *dst,
				      const strata_weight *w,
				      const int32_t *dev_ids, uint64_t rows,
				      strata_error *err)
{
	int type = 0;
	strata_status s = block_of(w, &type, err);
	if (s != STRATA_OK)
		return s;
	return launched(strata__cuda_dequant(k->stream.cuda, dst, w->data, type,
					     rows, w->cols, dev_ids),
			"block-type decoding", err);
}
