/* cuda_quant.c - the CUDA kernel table's slots on weights in ggml's block
 * types, as stored: products (a GEMV reading the blocks once for up to
 * STRATA__CUDA_GEMV_ROWS rows; for more, the weights decoded a tile at a
 * time into the context's workspace, in bf16 planes for cuBLAS on tensor
 * cores, or in f32 for SGEMM), embedding rows and conversions, all decoded
 * bit-identically to base's strata_block_decode (layer: backend).
 *
 * Decode products (up to STRATA__CUDA_GEMV_ROWS rows) on Q8_0, Q4_0, Q4_K,
 * Q5_K and Q6_K quantize x to 8 bits at --precision fast, the default (the
 * context's decode_q8), as llama.cpp and the CPU's fast decode compute:
 * kernels_qgemv_q8.cu, the CPU's codes exactly. Everywhere else, and at
 * --precision exact, activations are not quantized: the GEMV takes them
 * in f32, the tensor-core product as bf16 hi + lo (~16 bits, exact) or
 * rounded once (fast), so the exact logits track the CPU's exact stored
 * products (docs/quant.md).
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

/* Whether the 8-bit decode GEMV takes n rows of x against w: the context
 * asks for it, the kernel takes the type, and the quantized x fits the
 * scratch block's region for it. */
static bool q8_takes(const strata__cuda_compute *k, int type, const void *w,
		     uint32_t n, uint32_t in)
{
	return k->decode_q8 && strata__cuda_q8gemv_takes(type, w, in) &&
	       strata__cuda_q8x_bytes(n, in) <=
		       STRATA__CUDA_SCRATCH_ATTENTION - STRATA__CUDA_SCRATCH_Q8X;
}

/* The parts g of one type against x (n rows): x (times the norm, when
 * given) quantized into the scratch block, then the 8-bit GEMV. The next
 * product's quantization runs after this one in stream order, so one
 * buffer serves them all. */
static strata_status q8_products(strata__cuda_compute *k, const float *x,
				 const strata_kernel_norm *norm, uint32_t n,
				 strata__cuda_gemv_parts *g, int type,
				 uint32_t in, int glu, const char *what,
				 strata_error *err)
{
	void *qx = (char *)k->scratch + STRATA__CUDA_SCRATCH_Q8X;
	strata_status s = launched(
		strata__cuda_quantize_x(k->stream.cuda, qx, x, n, in,
					norm ? norm->w.data : NULL,
					norm ? norm->eps : 0.0f),
		"decode input quantization", err);
	if (s != STRATA_OK)
		return s;
	g->norm = NULL; /* folded into qx */
	g->eps = 0.0f;
	return launched(strata__cuda_q8gemv(k->stream.cuda, g, qx, n, type, in,
					    glu),
			what, err);
}

/* ------------------------------------------------------------------------ */

bool strata__cuda_is_block(strata_weight_type t)
{
	return t != STRATA_WEIGHT_F32 && t != STRATA_WEIGHT_BF16 &&
	       t != STRATA_WEIGHT_F16;
}

/* Products of more rows than the GEMV takes: 1 decodes the weights into
 * bf16 tiles for cuBLAS on tensor cores (tensor_gemm), 0 into f32 slices
 * for SGEMM (sgemm_slices); tests and benches set it to compare. */
int strata__cuda_quant_prefill = 1;
/* Columns of a tensor-core tile at most (0: QUANT_KC); tests set it low so
 * a product runs in several column chunks. */
uint32_t strata__cuda_quant_kc_max = 0;

#define QUANT_KC 2048u	     /* columns a tile, at most */
#define QUANT_TILE_ROWS 2048u /* weight rows a tile should reach */

static uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

static uint64_t row_bytes_of(const strata_weight *w, int type)
{
	return (uint64_t)w->cols / strata_block_elements((strata_block_type)type) *
	       strata_block_bytes((strata_block_type)type);
}

/* The f32 way: the weights decoded to f32 a slice of rows at a time into
 * the workspace (at least n rows: it holds n x in x 4 bytes, the plan's
 * product workspace) and multiplied by cuBLAS SGEMM. */
static strata_status sgemm_slices(strata__cuda_compute *k, float *y,
				  const float *x, const strata_weight *w,
				  int type, uint32_t n, strata_error *err)
{
	uint32_t in = w->cols, out = w->rows;
	uint64_t row_f32 = (uint64_t)in * 4;
	strata_status s = strata__cuda_reserve_ws(k, (uint64_t)n * row_f32, err);
	if (s != STRATA_OK)
		return s;
	uint64_t slice = k->half_ws_bytes / row_f32;
	slice = slice < out ? slice : out;
	uint64_t row_bytes = row_bytes_of(w, type);
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
	return STRATA_OK;
}

/* The tile shape for tensor_gemm in a workspace of ws bytes: kc columns
 * (whole blocks of be) of x split into `terms` bf16 planes first, then
 * weight tiles of *rows rows of those columns; columns are halved until a
 * tile reaches QUANT_TILE_ROWS rows (or every row). *rows is 0 when not
 * even one row fits. */
static uint32_t tile_shape(uint64_t ws, uint32_t n, uint32_t in,
			   uint32_t out, uint32_t be, int terms,
			   uint64_t *rows)
{
	uint32_t cap = strata__cuda_quant_kc_max ? strata__cuda_quant_kc_max
						 : QUANT_KC;
	uint32_t kc = in < cap ? in : (cap / be ? cap / be * be : be);
	uint32_t want = out < QUANT_TILE_ROWS ? out : QUANT_TILE_ROWS;
	for (;;) {
		uint64_t xb = align256((uint64_t)n * kc * 2 * (uint64_t)terms);
		uint64_t per = (uint64_t)kc * 2 * (uint64_t)terms;
		*rows = ws > xb ? (ws - xb) / per : 0;
		if (*rows >= want || kc <= be)
			break;
		kc = (kc / 2 + be - 1) / be * be;
	}
	if (*rows > out)
		*rows = out;
	return kc;
}

/* y (n, out) = x . w^T on tensor cores: for each chunk of kc columns, x's
 * columns split into bf16 planes (hi, and lo at the default prefill
 * precision), then each tile of weight rows decoded into bf16 planes the
 * same way and multiplied by cublasGemmEx (f32 accumulation), adding into
 * y: hi.hi + hi.lo + lo.hi keeps ~16 bits of both (f32 SGEMM's result to
 * ~1e-5); at prefill precision bf16, hi.hi alone. Every weight is decoded
 * once. */
static strata_status tensor_gemm(strata__cuda_compute *k, float *y,
				 const float *x, const strata_weight *w,
				 int type, uint32_t n, strata_error *err)
{
	const uint32_t in = w->cols, out = w->rows;
	const int terms = k->prefill_terms == 1 ? 1 : 2;
	const uint32_t be = strata_block_elements((strata_block_type)type);
	uint64_t need = (uint64_t)n * in * 4, least = align256(
		((uint64_t)n + 1) * be * 2 * (uint64_t)terms) + 256;
	strata_status s = strata__cuda_reserve_ws(k, need > least ? need : least,
						  err);
	if (s != STRATA_OK)
		return s;
	uint64_t tile_rows = 0;
	uint32_t kc = tile_shape(k->half_ws_bytes, n, in, out, be, terms,
				 &tile_rows);
	if (!tile_rows)
		return strata_fail(err, STRATA_E_DEVICE_OOM,
				   "raise --device-memory so the plan's product workspace fits",
				   "block-type matmul: a workspace of %" PRIu64 " bytes holds no weight tile",
				   k->half_ws_bytes);
	char *ws = k->half_ws;
	char *wtile = ws + align256((uint64_t)n * kc * 2 * (uint64_t)terms);
	const uint64_t row_bytes = row_bytes_of(w, type);
	const float one = 1.0f, zero = 0.0f;
	for (uint32_t k0 = 0; k0 < in; k0 += kc) {
		uint32_t kw = in - k0 < kc ? in - k0 : kc;
		s = launched(strata__cuda_split_cols(k->stream.cuda, ws, x, n,
						     in, k0, kw, terms),
			     "block-type matmul (input split)", err);
		for (uint64_t r0 = 0; s == STRATA_OK && r0 < out; r0 += tile_rows) {
			uint64_t m = out - r0 < tile_rows ? out - r0 : tile_rows;
			s = launched(strata__cuda_dequant_bf16(
					     k->stream.cuda, wtile,
					     (const char *)w->data + r0 * row_bytes,
					     type, m, in, k0, kw, terms),
				     "block-type matmul (decoding to bf16)", err);
			/* (weight plane, x plane): hi.hi, hi.lo, lo.hi */
			static const int pw[3] = {0, 0, 1}, px[3] = {0, 1, 0};
			for (int p = 0; s == STRATA_OK && p < (terms == 2 ? 3 : 1);
			     p++) {
				const char *a = wtile + (uint64_t)pw[p] * m * kw * 2;
				const char *b = ws + (uint64_t)px[p] * n * kw * 2;
				cublasStatus_t bs = strata__cublas.gemm_ex(
					k->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m,
					(int)n, (int)kw, &one, a, CUDA_R_16BF,
					(int)kw, b, CUDA_R_16BF, (int)kw,
					k0 == 0 && p == 0 ? &zero : &one, y + r0,
					CUDA_R_32F, (int)out, CUBLAS_COMPUTE_32F,
					CUBLAS_GEMM_DEFAULT);
				if (bs != CUBLAS_STATUS_SUCCESS)
					s = strata__cublas_fail(err, bs,
								"block-type matmul (cublasGemmEx)");
			}
		}
		if (s != STRATA_OK)
			return s;
	}
	return STRATA_OK;
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
	if (n <= STRATA__CUDA_GEMV_ROWS && q8_takes(k, type, w->data, n, in)) {
		strata__cuda_gemv_parts g = {.count = 1};
		g.part[0] = (strata__cuda_gemv_part){y, w->data, bias, out};
		return q8_products(k, x, NULL, n, &g, type, in, 0,
				   "block-type matmul (8-bit GEMV)", err);
	}
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
	s = strata__cuda_quant_prefill ? tensor_gemm(k, y, x, w, type, n, err)
				       : sgemm_slices(k, y, x, w, type, n, err);
	if (s != STRATA_OK || !bias)
		return s;
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

/* ------------------------------------------------------------------------ */
/* Fused decode slots                                                       */
/* ------------------------------------------------------------------------ */

/* The block type every product's weights share, when the fused decode
 * GEMV takes them all; -1 otherwise. */
static int fused_type(const strata_kernel_norm *norm, uint32_t n,
		      const strata_kernel_product *p, uint32_t count)
{
	strata_block_type b = strata_weight_type_block(p[0].w.type);
	if (n != 1 || count < 1 || count > STRATA__CUDA_GEMV_PARTS ||
	    b >= STRATA_BLOCK_COUNT ||
	    (norm && (norm->w.type != STRATA_WEIGHT_F32 ||
		      norm->w.cols != p[0].w.cols)))
		return -1;
	for (uint32_t i = 0; i < count; i++)
		if (p[i].w.type != p[0].w.type || p[i].w.cols != p[0].w.cols ||
		    !strata__cuda_qgemv_takes((int)b, p[i].w.data, p[i].w.cols))
			return -1;
	return (int)b;
}

bool strata__cuda_quant_products_take(const strata_kernel_norm *norm,
				      uint32_t n,
				      const strata_kernel_product *p,
				      uint32_t count)
{
	return fused_type(norm, n, p, count) >= 0;
}

static strata__cuda_gemv_parts fused_parts(const strata_kernel_norm *norm,
					   const strata_kernel_product *p,
					   uint32_t count, bool accumulate)
{
	strata__cuda_gemv_parts g = {.count = (int)count,
				     .accumulate = accumulate,
				     .norm = norm ? norm->w.data : NULL,
				     .eps = norm ? norm->eps : 0.0f};
	for (uint32_t i = 0; i < count; i++)
		g.part[i] = (strata__cuda_gemv_part){p[i].y, p[i].w.data,
						     p[i].bias, p[i].w.rows};
	return g;
}

strata_status strata__cuda_quant_products(strata__cuda_compute *k,
					  const float *x,
					  const strata_kernel_norm *norm,
					  const strata_kernel_product *p,
					  uint32_t count, bool accumulate,
					  strata_error *err)
{
	int type = fused_type(norm, 1, p, count);
	if (type < 0)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "CUDA fused block-type products: not taken (products_take)");
	strata__cuda_gemv_parts g = fused_parts(norm, p, count, accumulate);
	if (q8_takes(k, type, p[0].w.data, 1, p[0].w.cols))
		return q8_products(k, x, norm, 1, &g, type, p[0].w.cols, 0,
				   "block-type products (fused 8-bit GEMV)",
				   err);
	return launched(strata__cuda_qgemv_fused(k->stream.cuda, &g, x, type,
						 p[0].w.cols, 0),
			"block-type products (fused GEMV)", err);
}

bool strata__cuda_quant_gated_take(const strata_kernel_norm *norm, uint32_t n,
				   const strata_weight *gate,
				   const strata_weight *up)
{
	const strata_kernel_product p[2] = {{NULL, *gate, NULL},
					    {NULL, *up, NULL}};
	return gate->rows == up->rows && fused_type(norm, n, p, 2) >= 0;
}

strata_status strata__cuda_quant_gated(strata__cuda_compute *k, float *y,
				       const float *x,
				       const strata_kernel_norm *norm,
				       const strata_weight *gate,
				       const strata_weight *up,
				       strata_error *err)
{
	const strata_kernel_product p[2] = {{y, *gate, NULL}, {y, *up, NULL}};
	int type = gate->rows == up->rows ? fused_type(norm, 1, p, 2) : -1;
	if (type < 0)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "CUDA fused block-type gated product: not taken (gated_take)");
	strata__cuda_gemv_parts g = fused_parts(norm, p, 2, false);
	if (q8_takes(k, type, gate->data, 1, gate->cols))
		return q8_products(k, x, norm, 1, &g, type, gate->cols, 1,
				   "block-type gated product (fused 8-bit GEMV)",
				   err);
	return launched(strata__cuda_qgemv_fused(k->stream.cuda, &g, x, type,
						 gate->cols, 1),
			"block-type gated product (fused GEMV)", err);
}
