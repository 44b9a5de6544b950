/* cuda_compute.c - the CUDA kernel table: a compute context (stream, cuBLAS
 * handle, fixed workspace) and the slots that queue kernels on it; GEMM in
 * f32 and half precision through cuBLAS; the typed and fused slots over
 * the half-precision kernels (layer: backend).
 *
 * Every slot only queues work and returns: errors reported here are launch
 * errors; a fault while a kernel runs shows at the next synchronisation
 * (event wait, synchronize), as CUDA reports it. Device memory is
 * taken once when the context is made (STRATA_CUDA_COMPUTE_DEVICE_BYTES);
 * the only later allocation is the half-precision input workspace, which
 * grows to the largest prefill and then stays.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.h"

/* ------------------------------------------------------------------------ */

strata_status strata__cublas_fail(strata_error *err, cublasStatus_t st,
				  const char *what)
{
	if (st == CUBLAS_STATUS_ALLOC_FAILED)
		return strata_fail(err, STRATA_E_DEVICE_OOM,
				   "lower --device-memory or the residency depth (strata plan shows what fits)",
				   "%s: cuBLAS is out of device memory", what);
	if (st == CUBLAS_STATUS_NOT_INITIALIZED)
		return strata_fail(err, STRATA_E_BACKEND_UNAVAILABLE,
				   "check the NVIDIA driver and the CUDA libraries (nvidia-smi), or run with --device cpu",
				   "%s: cuBLAS could not start (%s)", what,
				   strata__cublas.status_name(st));
	return strata_fail(err, STRATA_E_DEVICE,
			   "if the device is healthy (nvidia-smi) this is a bug in strata; report it with the message",
			   "%s: cuBLAS failed (%s: %s)", what,
			   strata__cublas.status_name(st),
			   strata__cublas.status_string(st));
}

strata__cuda_compute *strata__cuda_compute_of(strata_compute *c)
{
	return c && c->ops == &strata_cuda_kernel_ops ? c->ctx : NULL;
}

/* A launcher's result as a strata status. */
static strata_status launched(cudaError_t e, const char *kernel,
			      strata_error *err)
{
	if (e == cudaSuccess)
		return STRATA_OK;
	strata__cuda_fail(err, e, "CUDA kernel");
	return strata_error_prefix(err, "%s", kernel);
}

/* ------------------------------------------------------------------------ */
/* The context                                                              */
/* ------------------------------------------------------------------------ */

static void compute_destroy(void *ctx)
{
	strata__cuda_compute *k = ctx;
	if (!k)
		return;
	(void)cudaSetDevice(k->device);
	if (k->stream.cuda)
		(void)cudaStreamSynchronize(k->stream.cuda);
	if (k->blas)
		(void)strata__cublas.destroy(k->blas);
	if (k->blas_ws)
		strata_backend_cuda_sys.device_free(k->blas_ws);
	if (k->half_ws)
		strata_backend_cuda_sys.device_free(k->half_ws);
	if (k->stream.cuda)
		(void)cudaStreamDestroy(k->stream.cuda);
	strata_free(k);
}

/* The precision's numerics (strata_precision, docs/cuda.md#precision):
 * prefill's half-precision inputs rounded to bf16 once (FAST: one
 * tensor-core product, as transformers and llama.cpp compute in bf16,
 * about twice the speed) or split into bf16 hi + lo (EXACT: ~16 bits, two
 * or three products); decode's block-type products on x quantized to 8
 * bits (FAST: the dp4a GEMV, kernels_qgemv_q8.cu, as llama.cpp and the
 * CPU's fast decode compute) or on f32 x (EXACT). */
static strata_status compute_create(const strata_compute_options *o,
				    void **ctx, strata_error *err)
{
	/* o->threads: the device decides its own parallelism */
	strata__cuda_compute *k = strata_calloc(1, sizeof *k);
	if (!k)
		return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
				   "cannot allocate a CUDA compute context");
	bool exact = o->precision == STRATA_PRECISION_EXACT;
	k->prefill_terms = exact ? 3 : 1;
	k->decode_q8 = !exact;
	strata_status s = STRATA_OK;
	cudaError_t e = cudaGetDevice(&k->device);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&k->stream.cuda,
					      cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		s = strata__cuda_fail(err, e, "creating a CUDA compute context");
		goto fail;
	}
	k->stream.device = k->device;
	int sms = 0;
	e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
				   k->device);
	if (e != cudaSuccess) {
		s = strata__cuda_fail(err, e, "reading the device's properties");
		goto fail;
	}
	k->sm_count = sms > 0 ? (uint32_t)sms : 1;
	/* One region: the cuBLAS workspace, then the scratch block. */
	e = (cudaError_t)strata_backend_cuda_sys.device_malloc(
		&k->blas_ws, (size_t)STRATA_CUDA_COMPUTE_DEVICE_BYTES);
	if (e != cudaSuccess) {
		k->blas_ws = NULL;
		s = strata__cuda_fail(err, e, "CUDA compute context");
		strata_error_prefix(err, "%" PRIu64 " bytes of workspace",
				    (uint64_t)STRATA_CUDA_COMPUTE_DEVICE_BYTES);
		goto fail;
	}
	k->scratch = (char *)k->blas_ws + STRATA_CUDA_BLAS_WORKSPACE_BYTES;
	const float one = 1.0f;
	e = cudaMemcpy((char *)k->scratch + STRATA__CUDA_SCRATCH_ONE, &one,
		       sizeof one, cudaMemcpyHostToDevice);
	if (e != cudaSuccess) {
		s = strata__cuda_fail(err, e, "CUDA compute context constants");
		goto fail;
	}
	s = strata__cublas_load(err);
	if (s)
		goto fail;
	cublasStatus_t bs = strata__cublas.create(&k->blas);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		k->blas = NULL;
		s = strata__cublas_fail(err, bs, "creating a cuBLAS handle");
		goto fail;
	}
	/* Our own workspace, so cuBLAS allocates nothing behind the plan;
	 * default math: f32 products stay f32 (TF32 is opt-in and not
	 * asked for), half inputs use tensor cores with f32 accumulation. */
	bs = strata__cublas.set_stream(k->blas, k->stream.cuda);
	if (bs == CUBLAS_STATUS_SUCCESS)
		bs = strata__cublas.set_workspace(k->blas, k->blas_ws,
					(size_t)STRATA_CUDA_BLAS_WORKSPACE_BYTES);
	if (bs == CUBLAS_STATUS_SUCCESS)
		bs = strata__cublas.set_math_mode(k->blas, CUBLAS_DEFAULT_MATH);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		s = strata__cublas_fail(err, bs, "configuring cuBLAS");
		goto fail;
	}
	*ctx = k;
	return STRATA_OK;
fail:
	compute_destroy(k);
	return s;
}

static uint32_t compute_threads(void *ctx)
{
	(void)ctx;
	return 1; /* one queue of work; the device spreads each kernel */
}

/* ------------------------------------------------------------------------ */
/* Slots                                                                    */
/* ------------------------------------------------------------------------ */

/* cuBLAS takes int dimensions. */
static strata_status blas_dims(uint32_t n, uint32_t in, uint32_t out,
			       strata_error *err)
{
	if (n <= INT_MAX && in <= INT_MAX && out <= INT_MAX)
		return STRATA_OK;
	return strata_fail(err, STRATA_E_UNSUPPORTED,
			   "split the product into pieces below 2^31 rows",
			   "CUDA matmul of %u x %u by %u x %u: a dimension is above %d",
			   n, in, out, in, INT_MAX);
}

static strata_status f32_matmul(void *ctx, float *y, const float *x,
				const float *w, const float *bias, uint32_t n,
				uint32_t in, uint32_t out, strata_error *err)
{
	strata__cuda_compute *k = ctx;
	strata_status s = blas_dims(n, in, out, err);
	if (s != STRATA_OK)
		return s;
	const float one = 1.0f, zero = 0.0f;
	/* Row-major y (n, out) = x (n, in) . w (out, in)^T is, column-major,
	 * y^T (out, n) = w^T . x^T with w read as (in, out). */
	cublasStatus_t bs = strata__cublas.sgemm(k->blas, CUBLAS_OP_T, CUBLAS_OP_N,
					(int)out, (int)n, (int)in, &one, w,
					(int)in, x, (int)in, &zero, y, (int)out);
	if (bs != CUBLAS_STATUS_SUCCESS)
		return strata__cublas_fail(err, bs, "matmul (cublasSgemm)");
	if (!bias)
		return STRATA_OK;
	return launched(strata__cuda_bias_add(k->stream.cuda, y, bias, n, out),
			"bias add", err);
}

static strata_status f32_rmsnorm(void *ctx, float *y, const float *x,
				 const float *w, uint32_t n, uint32_t dim,
				 float eps, strata_error *err)
{
	strata__cuda_compute *k = ctx;
	return launched(strata__cuda_rmsnorm(k->stream.cuda, y, x, w, n, dim, eps),
			"rmsnorm", err);
}

static strata_status cuda_rope(void *ctx, float *x, uint32_t n, uint32_t pos0,
			       uint32_t heads, uint32_t head_dim,
			       const float *inv_freq, strata_rope_layout layout,
			       strata_error *err)
{
	strata__cuda_compute *k = ctx;
	return launched(strata__cuda_rope(k->stream.cuda, x, heads, NULL, 0, n,
					  pos0, head_dim, inv_freq,
					  layout == STRATA_ROPE_INTERLEAVED),
			"rope", err);
}

/* Measured on an H200 (test_cuda_kernels, decode, 32/8 heads of 128, the
 * warp-per-key kernel): 4 blocks per multiprocessor reads the cache at
 * 1334 GB/s at 8192 positions and 842 GB/s at 2048, against 971 and 758
 * with 2 and 1172 and 718 with 8; at 512 positions every choice from 2 up
 * is within 2%. */
uint32_t strata__cuda_attention_blocks_per_sm = 4;

/* Prefill attention of fewer blocks than this (a short chunk after a long
 * prefix) keeps the key-splitting kernel, which fills the device. */
uint32_t strata__cuda_flash_min_blocks = 64;

/* Head sizes up to this run in the attention kernel (its shared memory is
 * a few head rows; llama-family heads are 64 .. 256). */
#define ATTENTION_HEAD_DIM_MAX 2048u

/* The launchers' code of a KV cache type (the wrapper let only these by). */
static int cuda_kv_type(strata_weight_type t)
{
	return t == STRATA_WEIGHT_F16	 ? STRATA__CUDA_KV_F16
	       : t == STRATA_WEIGHT_BF16 ? STRATA__CUDA_KV_BF16
					 : STRATA__CUDA_KV_F32;
}

static strata_status cuda_kv_store(void *ctx, void *dst,
				   strata_weight_type type, const float *src,
				   uint64_t count, strata_error *err)
{
	strata__cuda_compute *c = ctx;
	return launched(strata__cuda_kv_store(c->stream.cuda, dst,
					      cuda_kv_type(type), src, count),
			"KV store", err);
}

/* At one rounding (--precision fast) the tensor-core kernel rounds an f32
 * cache's keys and values to bf16 anyway, tile by tile in every block
 * that reads them. Rounded once here instead, rows [0, pos0 + n) of each
 * into the product workspace, they go to the kernel that reads a 2-byte
 * cache straight into its tiles (kernels_flash_direct.cu): the same
 * roundings of the same values, a ~0.1 ms copy a 2048-token pass. The
 * workspace is free between the q/k/v products and the output product
 * (the stream orders them); where the plan sized it too small for the
 * copy, or strata__cuda_flash_direct is 0, the f32 cache is read as
 * stored. Sets *k, *v and *kt to what the kernel then reads. */
static void cache_as_bf16(strata__cuda_compute *c,
			  const strata_attention_shape *sh, const void **k,
			  const void **v, int *kt)
{
	const uint64_t elems = ((uint64_t)sh->pos0 + sh->n) *
			       sh->kv_heads * sh->head_dim;
	const uint64_t v_at = (elems * 2 + 255) / 256 * 256;
	if (c->prefill_terms != 1 || *kt != STRATA__CUDA_KV_F32 ||
	    !strata__cuda_flash_direct || !c->half_ws ||
	    c->half_ws_bytes < v_at + elems * 2 ||
	    (((uintptr_t)*k | (uintptr_t)*v) & 15))
		return;
	char *ws = c->half_ws;
	if (strata__cuda_to_half(c->stream.cuda, ws, *k, elems,
				 STRATA__CUDA_BF16) != cudaSuccess ||
	    strata__cuda_to_half(c->stream.cuda, ws + v_at, *v, elems,
				 STRATA__CUDA_BF16) != cudaSuccess)
		return; /* the launch error stays for the attention's check */
	*k = ws;
	*v = ws + v_at;
	*kt = STRATA__CUDA_KV_BF16;
}

static strata_status cuda_attention(void *ctx, float *out, const float *q,
				    const void *kc, const void *vc,
				    const strata_attention_shape *sh,
				    strata_error *err)
{
	strata__cuda_compute *c = ctx;
	int kt = cuda_kv_type(sh->kv_type);
	if (sh->head_dim > ATTENTION_HEAD_DIM_MAX)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "run this model with --device cpu",
				   "CUDA attention: head size %u is above %u",
				   sh->head_dim, ATTENTION_HEAD_DIM_MAX);
	/* the tensor-core kernel has no soft-capping (Gemma 2 goes to the
	 * key-splitting kernel) */
	if (!(sh->softcap > 0) &&
	    strata__cuda_flash_takes(sh->n, sh->heads, sh->kv_heads,
				     sh->head_dim,
				     strata__cuda_flash_min_blocks)) {
		cache_as_bf16(c, sh, &kc, &vc, &kt);
		return launched(strata__cuda_flash_attention(
					c->stream.cuda, out, q, kc, vc, kt,
					sh->n, sh->pos0, sh->heads, sh->kv_heads,
					sh->head_dim, sh->window, sh->scale,
					c->prefill_terms),
				"attention (tensor cores)", err);
	}
	float *partials = (float *)((char *)c->scratch +
				    STRATA__CUDA_SCRATCH_ATTENTION);
	uint64_t floats = (STRATA__CUDA_SCRATCH_BYTES -
			   STRATA__CUDA_SCRATCH_ATTENTION) / sizeof(float);
	return launched(strata__cuda_attention(c->stream.cuda, out, q, kc, vc,
					       kt, sh->n, sh->pos0, sh->heads,
					       sh->kv_heads, sh->head_dim,
					       sh->window, sh->scale, sh->softcap,
					       strata__cuda_attention_blocks_per_sm *
						       c->sm_count,
					       partials,
					       floats),
			"attention", err);
}

static strata_status cuda_swiglu(void *ctx, float *gate, const float *up,
				 uint64_t count, strata_error *err)
{
	strata__cuda_compute *k = ctx;
	return launched(strata__cuda_swiglu(k->stream.cuda, gate, up, count),
			"swiglu", err);
}

static strata_status cuda_map(void *ctx, float *y, const float *x,
			       uint64_t count, strata_map_op op, float a,
			       strata_error *err)
{
	strata__cuda_compute *k = ctx;
	return launched(strata__cuda_map(k->stream.cuda, y, x, count, (int)op,
					 a),
			"map", err);
}

/* rows and weights go to the scratch's token block (ids in its first
 * half, weights in its second) in chunks, in stream order as embed's. */
static strata_status cuda_scatter_add(void *ctx, float *x, const float *y,
				      const int32_t *rows, const float *weight,
				      uint32_t m, uint32_t dim,
				      strata_error *err)
{
	strata__cuda_compute *k = ctx;
	const uint32_t per = STRATA__CUDA_TOKENS_MAX / 2;
	char *block = (char *)k->scratch + STRATA__CUDA_SCRATCH_TOKENS;
	int32_t *dev_rows = (int32_t *)block;
	float *dev_weight = (float *)(block + (size_t)per * sizeof(int32_t));
	for (uint32_t at = 0; at < m; at += per) {
		uint32_t c = m - at < per ? m - at : per;
		int e = strata_backend_cuda_sys.memcpy_async(
			dev_rows, rows + at, (size_t)c * sizeof *rows,
			cudaMemcpyHostToDevice, (void *)k->stream.cuda);
		if (e == cudaSuccess)
			e = strata_backend_cuda_sys.memcpy_async(
				dev_weight, weight + at, (size_t)c * sizeof *weight,
				cudaMemcpyHostToDevice, (void *)k->stream.cuda);
		if (e != cudaSuccess) {
			strata__cuda_fail(err, (cudaError_t)e, "rows copy");
			return strata_error_prefix(err, "scatter_add");
		}
		strata_status s = launched(
			strata__cuda_scatter_add(k->stream.cuda, x,
						 y + (uint64_t)at * dim, dev_rows,
						 dev_weight, c, dim),
			"scatter_add", err);
		if (s != STRATA_OK)
			return s;
	}
	return STRATA_OK;
}

static strata_status cuda_add(void *ctx, float *y, const float *x,
			      uint64_t count, strata_error *err)
{
	strata__cuda_compute *k = ctx;
	return launched(strata__cuda_add(k->stream.cuda, y, x, count), "add",
			err);
}

/* tokens are host memory (the wrapper has read them): they go to the
 * scratch block in chunks; stream order keeps a chunk from being
 * overwritten before the kernel that reads it has run. An f32 or half
 * table (`half`: -1, or STRATA__CUDA_BF16 / F16) is gathered by the
 * embed kernel, a block-type one (`blocks`) decoded row by row. */
static strata_status gather_embed(void *ctx, float *x, const void *table,
				  int half, const strata_weight *blocks,
				  const int32_t *tokens, uint32_t n,
				  uint32_t dim, strata_error *err)
{
	strata__cuda_compute *k = ctx;
	int32_t *dev_tokens =
		(int32_t *)((char *)k->scratch + STRATA__CUDA_SCRATCH_TOKENS);
	for (uint32_t at = 0; at < n; at += STRATA__CUDA_TOKENS_MAX) {
		uint32_t m = n - at < STRATA__CUDA_TOKENS_MAX
				     ? n - at
				     : STRATA__CUDA_TOKENS_MAX;
		int e = strata_backend_cuda_sys.memcpy_async(
			dev_tokens, tokens + at, (size_t)m * sizeof *tokens,
			cudaMemcpyHostToDevice, (void *)k->stream.cuda);
		if (e != cudaSuccess) {
			strata__cuda_fail(err, (cudaError_t)e, "token ids copy");
			return strata_error_prefix(err, "embed");
		}
		strata_status s =
			blocks ? strata__cuda_quant_rows(k, x + (uint64_t)at * dim,
							 blocks, dev_tokens, m,
							 err)
			       : launched(strata__cuda_embed(k->stream.cuda,
							     x + (uint64_t)at * dim,
							     table, half,
							     dev_tokens, m, dim),
					  "embed", err);
		if (s != STRATA_OK)
			return s;
	}
	return STRATA_OK;
}


/* ------------------------------------------------------------------------ */
/* The half-precision kernels (backend_cuda.h)                              */
/* ------------------------------------------------------------------------ */

/* Measured on an H200 (test_cuda_kernels, 14336x4096 bf16): the GEMV kernel
 * moves 88% of the device copy rate at one row against cuBLAS's 83%, but
 * falls to 69% at two rows where cuBLAS holds 83%; so one row. */
uint32_t strata__cuda_gemv_rows_max = 1;

static strata_status not_cuda_compute(strata_error *err, const char *call)
{
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller; report it",
			   "%s: not a CUDA compute context, or a NULL or zero argument",
			   call);
}

/* Makes the half-precision input workspace hold `bytes`. The old one may
 * still be read by queued work, so the stream is drained before it goes. */
strata_status strata__cuda_reserve_ws(strata__cuda_compute *k, uint64_t bytes,
				      strata_error *err)
{
	if (bytes <= k->half_ws_bytes)
		return STRATA_OK;
	void *p = NULL;
	int e = bytes <= SIZE_MAX
			? strata_backend_cuda_sys.device_malloc(&p, (size_t)bytes)
			: (int)cudaErrorMemoryAllocation;
	if (e != cudaSuccess) {
		strata__cuda_fail(err, (cudaError_t)e, "matmul input workspace");
		return strata_error_prefix(err, "%" PRIu64 " bytes for", bytes);
	}
	if (k->half_ws) {
		cudaError_t ce = cudaStreamSynchronize(k->stream.cuda);
		if (ce != cudaSuccess) {
			strata_backend_cuda_sys.device_free(p);
			return strata__cuda_fail(err, ce, "matmul workspace swap");
		}
		strata_backend_cuda_sys.device_free(k->half_ws);
	}
	k->half_ws = p;
	k->half_ws_bytes = bytes;
	return STRATA_OK;
}

/* The workspace for a product's input x (n, in) in half terms: the
 * dimensions cuBLAS takes, and room for two terms of n x in (*elems). */
static strata_status input_workspace(strata__cuda_compute *k, uint32_t n,
				     uint32_t in, uint32_t out,
				     uint64_t *elems, strata_error *err)
{
	uint64_t bytes;
	strata_status s = blas_dims(n, in, out, err);
	if (s == STRATA_OK)
		s = strata_checked_mul(n, in, elems, "matmul input elements",
				       err);
	if (s == STRATA_OK)
		s = strata_checked_mul(*elems, 4, &bytes, "matmul input bytes",
				       err);
	return s == STRATA_OK ? strata__cuda_reserve_ws(k, bytes, err) : s;
}

/* x (n, in) split into two half terms in the workspace: hi, then lo (or,
 * at prefill precision bf16, rounded once: the hi term alone).
 * cuBLAS on tensor cores takes inputs of the weights' type only; rounding
 * the f32 activations to bf16 once moves small models' logits by up to
 * 0.3, while hi + lo keeps ~16 bits, and the second product this costs is
 * hidden many times over by the weights' transfer in streamed modes. */
static strata_status split_input(strata__cuda_compute *k, const float *x,
				 strata_cuda_half type, uint32_t n,
				 uint32_t in, uint32_t out, strata_error *err)
{
	uint64_t elems;
	strata_status s = input_workspace(k, n, in, out, &elems, err);
	if (s != STRATA_OK)
		return s;
	if (k->prefill_terms == 1)
		return launched(strata__cuda_to_half(k->stream.cuda, k->half_ws,
						     x, elems, (int)type),
				"matmul input conversion", err);
	return launched(strata__cuda_to_half_split(k->stream.cuda, k->half_ws,
						   x, elems, (int)type),
			"matmul input conversion", err);
}

/* rmsnorm(x) * norm (n, in) into the workspace as split_input lays x out,
 * in one launch: the prefill products' norm folded in as decode's is, so
 * the normed rows never go through f32 memory (the same bits). */
static strata_status norm_input(strata__cuda_compute *k, const float *x,
				const void *norm_w, bool norm_f32, float eps,
				strata_cuda_half type, uint32_t n, uint32_t in,
				uint32_t out, strata_error *err)
{
	uint64_t elems;
	strata_status s = input_workspace(k, n, in, out, &elems, err);
	if (s != STRATA_OK)
		return s;
	return launched(strata__cuda_rmsnorm_to_half(k->stream.cuda, k->half_ws,
						     x, norm_w, norm_f32,
						     (int)type, n, in, eps,
						     k->prefill_terms == 1 ? 1 : 2),
			"matmul input norm", err);
}

/* y (n, out) (+)= the split input . w^T (+ bias) with cuBLAS: one product
 * per term, the second adding to the first. */
static strata_status gemm_split(strata__cuda_compute *k, float *y,
				const void *w, strata_cuda_half type,
				const float *bias, uint32_t n, uint32_t in,
				uint32_t out, bool accumulate,
				strata_error *err)
{
	cudaDataType_t dt = type == STRATA_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_16F;
	const float one = 1.0f, zero = 0.0f;
	uint64_t term_bytes = (uint64_t)n * in * 2;
	const int terms = k->prefill_terms == 1 ? 1 : 2;
	for (int term = 0; term < terms; term++) {
		const char *x_term = (const char *)k->half_ws + term * term_bytes;
		cublasStatus_t bs = strata__cublas.gemm_ex(
			k->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n,
			(int)in, &one, w, dt, (int)in, x_term, dt, (int)in,
			term || accumulate ? &one : &zero, y, CUDA_R_32F,
			(int)out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
		if (bs != CUBLAS_STATUS_SUCCESS)
			return strata__cublas_fail(err, bs,
						   "matmul (cublasGemmEx)");
	}
	if (!bias)
		return STRATA_OK;
	return launched(strata__cuda_bias_add(k->stream.cuda, y, bias, n, out),
			"bias add", err);
}

strata_status strata_cuda_matmul_half_reserve(strata_compute *c,
					      uint64_t bytes,
					      strata_error *err)
{
	strata__cuda_compute *k = strata__cuda_compute_of(c);
	if (!k)
		return not_cuda_compute(err, "strata_cuda_matmul_half_reserve");
	return bytes ? strata__cuda_reserve_ws(k, bytes, err) : STRATA_OK;
}

strata_status strata_cuda_matmul_half(strata_compute *c, float *y,
				      const float *x, const void *w,
				      strata_cuda_half type, const float *bias,
				      uint32_t n, uint32_t in, uint32_t out,
				      strata_error *err)
{
	strata__cuda_compute *k = strata__cuda_compute_of(c);
	if (!k || !y || !x || !w || !n || !in || !out ||
	    (type != STRATA_CUDA_BF16 && type != STRATA_CUDA_F16) ||
	    (const void *)y == (const void *)x || (const void *)y == w)
		return not_cuda_compute(err, "strata_cuda_matmul_half");
	if (n <= strata__cuda_gemv_rows_max && n <= STRATA__CUDA_GEMV_ROWS)
		return launched(strata__cuda_gemv_half(k->stream.cuda, y, x, w,
						       (int)type, bias, n, in,
						       out),
				"half-precision matmul (GEMV)", err);
	strata_status s = split_input(k, x, type, n, in, out, err);
	if (s != STRATA_OK)
		return s;
	return gemm_split(k, y, w, type, bias, n, in, out, false, err);
}

/* Several rows of strata_cuda_matmul_half_parts through cuBLAS: x split
 * (or normed, with norm_w: weights of the products' type, or f32 with
 * norm_f32) into the workspace once, then each part's products. */
static strata_status rows_products(strata__cuda_compute *k, const float *x,
				   const void *norm_w, bool norm_f32, float eps,
				   strata_cuda_half type, uint32_t n,
				   uint32_t in,
				   const strata_cuda_half_part *parts,
				   uint32_t count, bool accumulate,
				   strata_error *err)
{
	uint32_t widest = 0;
	for (uint32_t i = 0; i < count; i++)
		widest = parts[i].out > widest ? parts[i].out : widest;
	strata_status s =
		norm_w ? norm_input(k, x, norm_w, norm_f32, eps, type, n, in,
				    widest, err)
		       : split_input(k, x, type, n, in, widest, err);
	for (uint32_t i = 0; s == STRATA_OK && i < count; i++)
		s = gemm_split(k, parts[i].y, parts[i].w, type, parts[i].bias,
			       n, in, parts[i].out, accumulate, err);
	return s;
}

strata_status strata_cuda_matmul_half_parts(strata_compute *c, const float *x,
					    const strata_cuda_half_norm *norm,
					    strata_cuda_half type, uint32_t n,
					    uint32_t in,
					    const strata_cuda_half_part *parts,
					    uint32_t count, bool accumulate,
					    strata_error *err)
{
	strata__cuda_compute *k = strata__cuda_compute_of(c);
	bool ok = k && x && n && in && parts && count &&
		  count <= STRATA_CUDA_HALF_PARTS_MAX &&
		  (type == STRATA_CUDA_BF16 || type == STRATA_CUDA_F16) &&
		  (!norm || norm->w);
	for (uint32_t i = 0; ok && i < count; i++) {
		const strata_cuda_half_part *p = &parts[i];
		ok = p->y && p->w && p->out && (const void *)p->y != x &&
		     (const void *)p->y != p->w;
	}
	if (!ok)
		return not_cuda_compute(err, "strata_cuda_matmul_half_parts");
	if (n == 1 && (strata__cuda_gemv_rows_max >= 1 || norm)) {
		strata__cuda_gemv_parts g = {.count = (int)count,
					     .accumulate = accumulate,
					     .norm = norm ? norm->w : NULL,
					     .eps = norm ? norm->eps : 0.0f};
		for (uint32_t i = 0; i < count; i++)
			g.part[i] = (strata__cuda_gemv_part){
				parts[i].y, parts[i].w, parts[i].bias,
				parts[i].out};
		return launched(strata__cuda_gemv_half_parts(k->stream.cuda,
							     &g, x, (int)type,
							     in),
				"half-precision matmul (GEMV, parts)", err);
	}
	return rows_products(k, x, norm ? norm->w : NULL, false,
			     norm ? norm->eps : 0.0f, type, n, in, parts, count,
			     accumulate, err);
}

strata_status strata_cuda_rope_qk(strata_compute *c, float *q, float *k,
				  uint32_t n, uint32_t pos0, uint32_t heads,
				  uint32_t kv_heads, uint32_t head_dim,
				  const float *inv_freq,
				  strata_rope_layout layout, strata_error *err)
{
	strata__cuda_compute *x = strata__cuda_compute_of(c);
	if (!x || !q || !k || !n || !heads || !kv_heads || !head_dim ||
	    head_dim % 2 || !inv_freq)
		return not_cuda_compute(err, "strata_cuda_rope_qk");
	return launched(strata__cuda_rope(x->stream.cuda, q, heads, k,
					  kv_heads, n, pos0, head_dim,
					  inv_freq,
					  layout == STRATA_ROPE_INTERLEAVED),
			"rope (queries and keys)", err);
}

strata_status strata_cuda_gated_half(strata_compute *c, float *y,
				     const float *x,
				     const strata_cuda_half_norm *norm,
				     const void *gate,
				     const void *up, strata_cuda_half type,
				     uint32_t in, uint32_t out,
				     strata_error *err)
{
	strata__cuda_compute *k = strata__cuda_compute_of(c);
	if (!k || !y || !x || !gate || !up || !in || !out ||
	    (type != STRATA_CUDA_BF16 && type != STRATA_CUDA_F16) ||
	    (const void *)y == (const void *)x || (norm && !norm->w))
		return not_cuda_compute(err, "strata_cuda_gated_half");
	return launched(strata__cuda_gemv_half_glu(k->stream.cuda, y, x, gate,
						   up, (int)type, in, out,
						   norm ? norm->w : NULL,
						   norm ? norm->eps : 0.0f),
			"gated product (GEMV)", err);
}

strata_status strata_cuda_rmsnorm_half(strata_compute *c, float *y,
				       const float *x, const void *w,
				       strata_cuda_half type, uint32_t n,
				       uint32_t dim, float eps,
				       strata_error *err)
{
	strata__cuda_compute *k = strata__cuda_compute_of(c);
	if (!k || !y || !x || !w || !n || !dim ||
	    (type != STRATA_CUDA_BF16 && type != STRATA_CUDA_F16))
		return not_cuda_compute(err, "strata_cuda_rmsnorm_half");
	return launched(strata__cuda_rmsnorm_half(k->stream.cuda, y, x, w,
						  (int)type, n, dim, eps),
			"rmsnorm (half weights)", err);
}

/* ------------------------------------------------------------------------ */
/* The kernel table: typed weights and fused slots                          */
/* ------------------------------------------------------------------------ */

/* The slots reach the half-precision functions above through a compute
 * object of their own context, so each path is the one those functions'
 * tests check. */
#define AS_COMPUTE(ctx)                                                        \
	(&(strata_compute){.ops = &strata_cuda_kernel_ops, .ctx = (ctx)})

static bool is_half(strata_weight_type t)
{
	return t == STRATA_WEIGHT_BF16 || t == STRATA_WEIGHT_F16;
}

static strata_cuda_half half_of(strata_weight_type t)
{
	return t == STRATA_WEIGHT_BF16 ? STRATA_CUDA_BF16 : STRATA_CUDA_F16;
}

static strata_stream *cuda_compute_stream(void *ctx)
{
	strata__cuda_compute *k = ctx;
	return &k->stream;
}

static strata_status cuda_matmul(void *ctx, float *y, const float *x,
				 const strata_weight *w, const float *bias,
				 uint32_t n, strata_error *err)
{
	if (w->type == STRATA_WEIGHT_F32)
		return f32_matmul(ctx, y, x, w->data, bias, n, w->cols, w->rows,
				  err);
	if (strata__cuda_is_block(w->type))
		return strata__cuda_quant_matmul(ctx, y, x, w, bias, n, err);
	return strata_cuda_matmul_half(AS_COMPUTE(ctx), y, x, w->data,
				       half_of(w->type), bias, n, w->cols,
				       w->rows, err);
}

static strata_status cuda_rmsnorm(void *ctx, float *y, const float *x,
				  const strata_weight *w, uint32_t n, float eps,
				  strata_error *err)
{
	if (w->type == STRATA_WEIGHT_F32)
		return f32_rmsnorm(ctx, y, x, w->data, n, w->cols, eps, err);
	if (strata__cuda_is_block(w->type))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "load norms as f32 or half (the plan's rule does)",
				   "rmsnorm kernel: the cuda kernels take no %s norm weights",
				   strata_weight_type_name(w->type));
	return strata_cuda_rmsnorm_half(AS_COMPUTE(ctx), y, x, w->data,
					half_of(w->type), n, w->cols, eps, err);
}

/* dst (count, f32) = src (count, half): the half-precision GEMV with one
 * input of 1.0 (in = 1, out = count) is exactly that conversion, with no
 * kernel of its own. */
static strata_status half_to_f32(void *ctx, float *dst, const void *src,
				 strata_weight_type type, uint64_t count,
				 strata_error *err)
{
	strata__cuda_compute *k = ctx;
	if (count > UINT32_MAX)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "convert the weight in pieces below 2^32 elements",
				   "CUDA conversion of %" PRIu64 " elements to f32",
				   count);
	const float *one = (const float *)((const char *)k->scratch +
					   STRATA__CUDA_SCRATCH_ONE);
	return strata_cuda_matmul_half(AS_COMPUTE(ctx), dst, one, src,
				       half_of(type), NULL, 1, 1,
				       (uint32_t)count, err);
}

static strata_status cuda_to_f32(void *ctx, float *dst, const strata_weight *w,
				 strata_error *err)
{
	if (strata__cuda_is_block(w->type))
		return strata__cuda_quant_rows(ctx, dst, w, NULL, w->rows, err);
	return half_to_f32(ctx, dst, w->data, w->type,
			   (uint64_t)w->rows * w->cols, err);
}

/* An f32 or half table is gathered by the embed kernel, every token of
 * the pass in one launch (a bf16 table was converted a row a launch:
 * 2048 launches, 7.6 ms of a 2048-token prompt on the H200); a
 * block-type one is decoded on the device. */
static strata_status cuda_embed(void *ctx, float *x, const strata_weight *table,
				const int32_t *tokens, uint32_t n,
				strata_error *err)
{
	uint32_t dim = table->cols;
	if (table->type == STRATA_WEIGHT_F32)
		return gather_embed(ctx, x, table->data, -1, NULL, tokens, n,
				    dim, err);
	if (strata__cuda_is_block(table->type))
		return gather_embed(ctx, x, NULL, -1, table, tokens, n, dim,
				    err);
	int half = table->type == STRATA_WEIGHT_BF16 ? STRATA__CUDA_BF16
						     : STRATA__CUDA_F16;
	return gather_embed(ctx, x, table->data, half, NULL, tokens, n, dim,
			    err);
}

/* strata_cuda_matmul_half_parts: up to its part count, of one half type,
 * and a norm of that type; on several rows an f32 norm too (the GGUF
 * files' norms), which rows_products folds the same way. */
static bool cuda_products_take(void *ctx, const strata_kernel_norm *norm,
			       uint32_t n, const strata_kernel_product *p,
			       uint32_t count)
{
	(void)ctx;
	if (strata__cuda_is_block(p[0].w.type))
		return strata__cuda_quant_products_take(norm, n, p, count);
	if (count > STRATA_CUDA_HALF_PARTS_MAX || !is_half(p[0].w.type))
		return false;
	for (uint32_t i = 1; i < count; i++)
		if (p[i].w.type != p[0].w.type)
			return false;
	return !norm || norm->w.type == p[0].w.type ||
	       (n > 1 && norm->w.type == STRATA_WEIGHT_F32);
}

static strata_status cuda_products(void *ctx, const float *x,
				   const strata_kernel_norm *norm, uint32_t n,
				   const strata_kernel_product *p,
				   uint32_t count, bool accumulate,
				   strata_error *err)
{
	if (strata__cuda_is_block(p[0].w.type))
		return strata__cuda_quant_products(ctx, x, norm, p, count,
						   accumulate, err);
	strata_cuda_half_part parts[STRATA_CUDA_HALF_PARTS_MAX];
	for (uint32_t i = 0; i < count; i++)
		parts[i] = (strata_cuda_half_part){p[i].y, p[i].w.data,
						   p[i].bias, p[i].w.rows};
	if (norm && n > 1 && norm->w.type == STRATA_WEIGHT_F32)
		return rows_products(ctx, x, norm->w.data, true, norm->eps,
				     half_of(p[0].w.type), n, p[0].w.cols,
				     parts, count, accumulate, err);
	strata_cuda_half_norm fold = {norm ? norm->w.data : NULL,
				      norm ? norm->eps : 0.0f};
	return strata_cuda_matmul_half_parts(AS_COMPUTE(ctx), x,
					     norm ? &fold : NULL,
					     half_of(p[0].w.type), n,
					     p[0].w.cols, parts, count,
					     accumulate, err);
}

/* strata_cuda_gated_half: one row, gate and up (and a norm) of one half
 * type. */
static bool cuda_gated_take(void *ctx, const strata_kernel_norm *norm,
			    uint32_t n, const strata_weight *gate,
			    const strata_weight *up)
{
	(void)ctx;
	if (strata__cuda_is_block(gate->type))
		return strata__cuda_quant_gated_take(norm, n, gate, up);
	return n == 1 && is_half(gate->type) && up->type == gate->type &&
	       (!norm || norm->w.type == gate->type);
}

static strata_status cuda_gated(void *ctx, float *y, const float *x,
				const strata_kernel_norm *norm,
				const strata_weight *gate,
				const strata_weight *up, uint32_t n,
				strata_error *err)
{
	(void)n; /* one row: gated_take */
	if (strata__cuda_is_block(gate->type))
		return strata__cuda_quant_gated(ctx, y, x, norm, gate, up, err);
	strata_cuda_half_norm fold = {norm ? norm->w.data : NULL,
				      norm ? norm->eps : 0.0f};
	return strata_cuda_gated_half(AS_COMPUTE(ctx), y, x,
				      norm ? &fold : NULL, gate->data,
				      up->data, half_of(gate->type),
				      gate->cols, gate->rows, err);
}

static strata_status cuda_rope_qk(void *ctx, float *q, float *k, uint32_t n,
				  uint32_t pos0, uint32_t heads,
				  uint32_t kv_heads, uint32_t head_dim,
				  const float *inv_freq,
				  strata_rope_layout layout, strata_error *err)
{
	return strata_cuda_rope_qk(AS_COMPUTE(ctx), q, k, n, pos0, heads,
				   kv_heads, head_dim, inv_freq, layout, err);
}

static strata_status cuda_reserve(void *ctx, uint64_t bytes, strata_error *err)
{
	return strata_cuda_matmul_half_reserve(AS_COMPUTE(ctx), bytes, err);
}

const strata_kernel_ops strata_cuda_kernel_ops = {
	.name = "cuda",
	.weight_types = STRATA_CUDA_WEIGHT_TYPES,
	.kv_types = STRATA_WEIGHT_BIT(STRATA_WEIGHT_F16) |
		    STRATA_WEIGHT_BIT(STRATA_WEIGHT_BF16),
	.kv_store = cuda_kv_store,
	.compute_create = compute_create,
	.compute_destroy = compute_destroy,
	.compute_threads = compute_threads,
	.compute_stream = cuda_compute_stream,
	.matmul = cuda_matmul,
	.rmsnorm = cuda_rmsnorm,
	.rope = cuda_rope,
	.attention = cuda_attention,
	.swiglu = cuda_swiglu,
	.add = cuda_add,
	.map = cuda_map,
	.embed = cuda_embed,
	.scatter_add = cuda_scatter_add,
	.to_f32 = cuda_to_f32,
	.products_take = cuda_products_take,
	.products = cuda_products,
	.gated_take = cuda_gated_take,
	.gated = cuda_gated,
	.rope_qk = cuda_rope_qk,
	.reserve = cuda_reserve,
	.experts_take = strata__cuda_experts_take,
	.experts = strata__cuda_experts_run,
};
