/* forward.c - the llama-family forward pass: embedding, then per layer
 * RMSNorm, q/k/v (+ biases), RoPE, grouped-query attention over the KV
 * cache, output projection, residual, RMSNorm, SwiGLU MLP, residual; then the
 * final norm and the LM head (layer: infer).
 *
 * A pass takes up to `batch` positions at once (prefill is matrix-matrix,
 * decode is the same code with one row). Each layer's weights are acquired
 * from the weight source just before use and released just after, so a
 * residency window can stream them. Everything is allocated at create: a
 * token costs no allocation.
 *
 * A forward pass may hold several sequences, each its own KV cache and
 * position (strata_forward_create_seqs): the calls here act on the selected
 * one, forward_step.c decodes a token of several at once, forward_kv.c
 * saves and restores a sequence's keys and values, forward_create.c makes
 * and drops the pass and its buffers.
 *
 * Two homes for the buffers: host memory (strata_forward_create: the CPU
 * path, logits written straight into the caller's array), or one arena of
 * backend device memory (strata_forward_create_device: CUDA, where kernels
 * only queue work, logits come back by a device-to-host copy, and weights
 * kept in bf16/f16 go through the half-precision matmul).
 */
#include <math.h>
#include <string.h>

#include "infer/forward_internal.h"

/* The selected sequence's key / value cache rows. */
static float *k_at(const strata_forward *f, uint32_t layer, uint32_t pos)
{
	return strata__forward_k_at(f, f->seq, layer, pos);
}

static float *v_at(const strata_forward *f, uint32_t layer, uint32_t pos)
{
	return strata__forward_v_at(f, f->seq, layer, pos);
}

/* Host to device (device mode): queued on the compute stream on CUDA, so
 * src must stay as it is until finish() (the caller waits once for all its
 * copies); a copy where the CPU backend's memory is plain RAM. */
static strata_status upload(const strata_forward *f, void *dst, const void *src,
			    uint64_t bytes, strata_error *err)
{
	if (!f->stream) {
		memcpy(dst, src, bytes);
		return STRATA_OK;
	}
	return strata_backend_copy_h2d_async(f->b, f->stream, dst, src, bytes,
					     err);
}

/* Device to host, queued after the kernels that produce src (CUDA: valid
 * after finish()); at once on the CPU backend, whose kernels have run. */
static strata_status download(const strata_forward *f, void *dst,
			      const void *src, uint64_t bytes, strata_error *err)
{
	if (!f->stream) {
		memcpy(dst, src, bytes);
		return STRATA_OK;
	}
	return strata_cuda_copy_d2h_async(f->b, f->stream, dst, src, bytes,
					  err);
}

static strata_status finish(const strata_forward *f, strata_error *err)
{
	return f->stream ? strata_backend_synchronize(f->b, f->stream, err)
			 : STRATA_OK;
}

/* dst (count, f32, device) = src (count, bf16 or f16, device): the
 * half-precision GEMV with one input of 1.0 (in = 1, out = count) is exactly
 * that conversion, with no kernel of its own. */
static strata_status to_f32(strata_forward *f, float *dst, const void *src,
			    uint8_t elem, uint32_t count, strata_error *err)
{
	strata_cuda_half t = elem == STRATA_ELEM_BF16 ? STRATA_CUDA_BF16
						      : STRATA_CUDA_F16;
	return strata_cuda_matmul_half(f->c, dst, f->one, src, t, NULL, 1, 1,
				       count, err);
}

/* w as f32 for the kernels that take only f32 (norms, biases): w itself,
 * or its conversion into `scratch`. */
static strata_status as_f32(strata_forward *f, const float *w, uint8_t elem,
			    uint32_t count, float *scratch, const float **out,
			    strata_error *err)
{
	*out = w;
	if (!w || elem == STRATA_ELEM_F32)
		return STRATA_OK;
	*out = scratch;
	return to_f32(f, scratch, w, elem, count, err);
}

/* y (n, out) = x (n, in) . w^T (+ bias): f32 weights through the kernel
 * table, half ones through the CUDA half-precision product, which keeps
 * the activations f32 (one row) or nearly so (several; see
 * strata_cuda_matmul_half). */
static strata_status mm(strata_forward *f, float *y, const float *x,
			const float *w, uint8_t elem, const float *bias,
			uint32_t n, uint32_t in, uint32_t out,
			strata_error *err)
{
	if (elem == STRATA_ELEM_F32)
		return strata_kernel_matmul(f->c, y, x, w, bias, n, in, out,
					    err);
	strata_cuda_half t = elem == STRATA_ELEM_BF16 ? STRATA_CUDA_BF16
						      : STRATA_CUDA_F16;
	return strata_cuda_matmul_half(f->c, y, x, w, t, bias, n, in, out,
				       err);
}

/* y (n, dim) = rmsnorm(x) * w, w as stored (f32 through the kernel table,
 * half on the device without a conversion of its own). */
static strata_status rmsnorm(strata_forward *f, float *y, const float *x,
			     const float *w, uint8_t elem, uint32_t n,
			     strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	if (elem == STRATA_ELEM_F32)
		return strata_kernel_rmsnorm(f->c, y, x, w, n, hp->dim,
					     hp->norm_eps, err);
	return strata_cuda_rmsnorm_half(f->c, y, x, w,
					elem == STRATA_ELEM_BF16
						? STRATA_CUDA_BF16
						: STRATA_CUDA_F16,
					n, hp->dim, hp->norm_eps, err);
}

/* The norm before products whose weights share its half type folds into
 * them when they take one row on the device (strata_cuda_half_norm): *fold
 * is then set and the products read x as stored. Otherwise the norm runs
 * into f->xb and *fold is NULL. */
static strata_status norm_or_fold(strata_forward *f, const float *w,
				  uint8_t elem, bool products_of_elem,
				  uint32_t n, strata_cuda_half_norm *fold,
				  const strata_cuda_half_norm **out,
				  strata_error *err)
{
	*out = NULL;
	if (f->stream && n == 1 && elem != STRATA_ELEM_F32 &&
	    products_of_elem) {
		*fold = (strata_cuda_half_norm){w, f->hp->norm_eps};
		*out = fold;
		return STRATA_OK;
	}
	return rmsnorm(f, f->xb, f->x, w, elem, n, err);
}

/* The rotation of n rows of queries and keys at positions pos..: one
 * launch on CUDA, the kernel table's two calls elsewhere. */
static strata_status rope(strata_forward *f, float *q, float *k, uint32_t n,
			  uint32_t pos, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	if (f->stream)
		return strata_cuda_rope_qk(f->c, q, k, n, pos, hp->heads,
					   hp->kv_heads, hp->head_dim,
					   f->inv_freq, hp->rope_layout, err);
	strata_status st = strata_kernel_rope(f->c, q, n, pos, hp->heads,
					      hp->head_dim, f->inv_freq,
					      hp->rope_layout, err);
	if (st == STRATA_OK)
		st = strata_kernel_rope(f->c, k, n, pos, hp->kv_heads,
					hp->head_dim, f->inv_freq,
					hp->rope_layout, err);
	return st;
}

/* Products sharing their input x (n, in): q, k and v; gate and up. Half
 * weights of one type go to the device in one call, which decodes them in
 * one launch; anything else one product at a time. */
typedef struct product {
	float *y;
	const float *w;
	uint8_t elem;
	const float *bias;
	uint32_t out;
} product;

static strata_status mm_shared(strata_forward *f, const float *x,
			       const strata_cuda_half_norm *norm, uint32_t n,
			       uint32_t in, const product *p, uint32_t count,
			       strata_error *err)
{
	bool together = p[0].elem != STRATA_ELEM_F32 &&
			count <= STRATA_CUDA_HALF_PARTS_MAX;
	for (uint32_t i = 1; i < count; i++)
		together = together && p[i].elem == p[0].elem;
	if (!together) {
		strata_status st = STRATA_OK;
		for (uint32_t i = 0; st == STRATA_OK && i < count; i++)
			st = mm(f, p[i].y, x, p[i].w, p[i].elem, p[i].bias, n,
				in, p[i].out, err);
		return st;
	}
	strata_cuda_half_part parts[STRATA_CUDA_HALF_PARTS_MAX];
	for (uint32_t i = 0; i < count; i++)
		parts[i] = (strata_cuda_half_part){p[i].y, p[i].w, p[i].bias,
						   p[i].out};
	return strata_cuda_matmul_half_parts(
		f->c, x, norm,
		p[0].elem == STRATA_ELEM_BF16 ? STRATA_CUDA_BF16
					      : STRATA_CUDA_F16,
		n, in, parts, count, false, err);
}

/* y (n, out) += x (n, in) . w^T, the residual add: on the device with half
 * weights folded into the product; otherwise the product into `scratch`
 * (n, out), then the add. */
static strata_status mm_add(strata_forward *f, float *y, const float *x,
			    const float *w, uint8_t elem, uint32_t n,
			    uint32_t in, uint32_t out, float *scratch,
			    strata_error *err)
{
	if (elem != STRATA_ELEM_F32) {
		strata_cuda_half_part part = {y, w, NULL, out};
		return strata_cuda_matmul_half_parts(
			f->c, x, NULL,
			elem == STRATA_ELEM_BF16 ? STRATA_CUDA_BF16
						 : STRATA_CUDA_F16,
			n, in, &part, 1, true, err);
	}
	strata_status st = mm(f, scratch, x, w, elem, NULL, n, in, out, err);
	if (st == STRATA_OK)
		st = strata_kernel_add(f->c, y, scratch, (uint64_t)n * out,
				       err);
	return st;
}

/* x += attention(rmsnorm(x)) for rows at positions pos .. pos+n-1. */
static strata_status attention_block(strata_forward *f,
				     const strata_infer_layer *w,
				     uint32_t layer, uint32_t n, uint32_t pos,
				     strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_compute *c = f->c;
	float *k = k_at(f, layer, pos), *v = v_at(f, layer, pos);
	strata_attention_shape shape = {
		.n = n, .pos0 = pos, .heads = hp->heads,
		.kv_heads = hp->kv_heads, .head_dim = hp->head_dim,
		.window = hp->window,
		.scale = 1.0f / sqrtf((float)hp->head_dim),
	};
	const uint8_t *e = w->elem;
	const float *bq, *bk, *bv;
	float *bias = f->bias_f32;
	const uint8_t en = e[STRATA_SLOT_ATTN_NORM];
	strata_cuda_half_norm fold;
	const strata_cuda_half_norm *norm;
	strata_status st;
	if ((st = as_f32(f, w->bq, e[STRATA_SLOT_BQ], f->q_dim, bias, &bq,
			 err)) ||
	    (st = as_f32(f, w->bk, e[STRATA_SLOT_BK], f->kv_dim,
			 bias ? bias + f->q_dim : NULL, &bk, err)) ||
	    (st = as_f32(f, w->bv, e[STRATA_SLOT_BV], f->kv_dim,
			 bias ? bias + f->q_dim + f->kv_dim : NULL, &bv, err)) ||
	    (st = norm_or_fold(f, w->attn_norm, en,
			       e[STRATA_SLOT_WQ] == en &&
				       e[STRATA_SLOT_WK] == en &&
				       e[STRATA_SLOT_WV] == en,
			       n, &fold, &norm, err)) ||
	    (st = mm_shared(f, norm ? f->x : f->xb, norm, n, hp->dim,
			    (const product[]){
				    {f->q, w->wq, e[STRATA_SLOT_WQ], bq, f->q_dim},
				    {k, w->wk, e[STRATA_SLOT_WK], bk, f->kv_dim},
				    {v, w->wv, e[STRATA_SLOT_WV], bv, f->kv_dim},
			    },
			    3, err)) ||
	    (st = rope(f, f->q, k, n, pos, err)) ||
	    (st = strata_kernel_attention(c, f->att, f->q, k_at(f, layer, 0),
					  v_at(f, layer, 0), &shape, err)))
		return st;
	return mm_add(f, f->x, f->att, w->wo, e[STRATA_SLOT_WO], n, f->q_dim,
		      hp->dim, f->xb, err);
}

/* x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x))). */
static strata_status mlp_block(strata_forward *f, const strata_infer_layer *w,
			       uint32_t n, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_compute *c = f->c;
	const uint8_t *e = w->elem;
	const uint8_t g = e[STRATA_SLOT_W_GATE];
	/* decode on the device: both products and the SwiGLU in one */
	const bool gated = f->stream && n == 1 && g != STRATA_ELEM_F32 &&
			   g == e[STRATA_SLOT_W_UP];
	strata_cuda_half_norm fold;
	const strata_cuda_half_norm *norm;
	strata_status st = norm_or_fold(f, w->ffn_norm, e[STRATA_SLOT_FFN_NORM],
					gated && g == e[STRATA_SLOT_FFN_NORM],
					n, &fold, &norm, err);
	if (st)
		return st;
	if (gated) {
		st = strata_cuda_gated_half(
			c, f->hb, norm ? f->x : f->xb, norm, w->w_gate, w->w_up,
			g == STRATA_ELEM_BF16 ? STRATA_CUDA_BF16 : STRATA_CUDA_F16,
			hp->dim, hp->ffn, err);
	} else {
		st = mm_shared(f, f->xb, NULL, n, hp->dim,
			       (const product[]){
				       {f->hb, w->w_gate, g, NULL, hp->ffn},
				       {f->hb2, w->w_up, e[STRATA_SLOT_W_UP],
					NULL, hp->ffn},
			       },
			       2, err);
		if (st == STRATA_OK)
			st = strata_kernel_swiglu(c, f->hb, f->hb2,
						  (uint64_t)n * hp->ffn, err);
	}
	if (st)
		return st;
	return mm_add(f, f->x, f->hb, w->w_down, e[STRATA_SLOT_W_DOWN], n,
		      hp->ffn, hp->dim, f->xb, err);
}

/* One layer with its weights held only for the duration. */
static strata_status layer_pass(strata_forward *f, uint32_t layer, uint32_t n,
				uint32_t pos, strata_error *err)
{
	strata_infer_layer w;
	strata_status st = f->src->ops->acquire(f->src->user, layer, &w, err);
	if (st)
		return strata_error_prefix(err, "layer %u", layer);
	st = attention_block(f, &w, layer, n, pos, err);
	if (st == STRATA_OK)
		st = mlp_block(f, &w, n, err);
	/* After a failed step the release still happens; its own error then
	 * goes to a scratch value so the first failure is the one reported. */
	strata_error scratch;
	strata_status rst = f->src->ops->release(f->src->user, layer,
						 st ? &scratch : err);
	return st ? st : rst;
}

/* Final norm and LM head: every row into logits (n, vocab), or the last
 * row into last (vocab). */
static strata_status head(strata_forward *f, uint32_t n, float *logits,
			  float *last, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	strata_status st;
	if (logits) {
		if ((st = strata_kernel_rmsnorm(f->c, f->xb, f->x,
						s->final_norm, n, hp->dim,
						hp->norm_eps, err)) ||
		    (st = strata_kernel_matmul(f->c, logits, f->xb,
					       s->lm_head, NULL, n, hp->dim,
					       hp->vocab, err)))
			return st;
		if (last)
			memcpy(last, logits + (uint64_t)(n - 1) * hp->vocab,
			       hp->vocab * sizeof *last);
		return STRATA_OK;
	}
	float *row = f->x + (uint64_t)(n - 1) * hp->dim;
	if ((st = strata_kernel_rmsnorm(f->c, f->xb, row, s->final_norm, 1,
					hp->dim, hp->norm_eps, err)))
		return st;
	return strata_kernel_matmul(f->c, last, f->xb, s->lm_head, NULL, 1,
				    hp->dim, hp->vocab, err);
}

/* The same in device mode: the final norm over the rows wanted, then the
 * LM head one row at a time into logit_row (the plan's logits buffer is one
 * row), each row copied back behind its product; one wait at the end. */
static strata_status head_device(strata_forward *f, uint32_t n, float *logits,
				 float *last, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	uint32_t first = logits ? 0 : n - 1, rows = n - first;
	uint64_t row_bytes = (uint64_t)hp->vocab * sizeof(float);
	strata_status st = rmsnorm(f, f->xb, f->x + (uint64_t)first * hp->dim,
				   s->final_norm, s->final_norm_elem, rows,
				   err);
	for (uint32_t r = 0; st == STRATA_OK && r < rows; r++) {
		float *dst = logits ? logits + (uint64_t)r * hp->vocab : last;
		st = mm(f, f->logit_row, f->xb + (uint64_t)r * hp->dim,
			s->lm_head, s->lm_head_elem, NULL, 1, hp->dim,
			hp->vocab, err);
		if (st == STRATA_OK)
			st = download(f, dst, f->logit_row, row_bytes, err);
	}
	if (st == STRATA_OK)
		st = finish(f, err);
	if (st == STRATA_OK && logits && last)
		memcpy(last, logits + (uint64_t)(n - 1) * hp->vocab, row_bytes);
	return st;
}

/* x (n, dim) = the embedding rows of tokens; a half table is converted row
 * by row (device mode), an f32 one gathered by the embed kernel. */
static strata_status embed(strata_forward *f, const int32_t *tokens,
			   uint32_t n, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	if (s->embed_elem == STRATA_ELEM_F32)
		return strata_kernel_embed(f->c, f->x, s->embed, hp->vocab,
					   tokens, n, hp->dim, err);
	const uint16_t *table = (const uint16_t *)(const void *)s->embed;
	strata_status st = STRATA_OK;
	for (uint32_t i = 0; st == STRATA_OK && i < n; i++)
		st = to_f32(f, f->x + (uint64_t)i * hp->dim,
			    table + (uint64_t)tokens[i] * hp->dim,
			    s->embed_elem, hp->dim, err);
	return st;
}

/* One chunk of at most `batch` positions. */
static strata_status chunk(strata_forward *f, const int32_t *tokens,
			   uint32_t n, uint32_t pos, float *logits, float *last,
			   strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_status st = embed(f, tokens, n, err);
	for (uint32_t l = 0; st == STRATA_OK && l < hp->layers; l++)
		st = layer_pass(f, l, n, pos, err);
	if (st == STRATA_OK && (logits || last))
		st = f->arena ? head_device(f, n, logits, last, err)
			      : head(f, n, logits, last, err);
	else if (st == STRATA_OK)
		st = finish(f, err); /* kernel faults show here, not later */
	return st;
}

/* forward_internal.h's names for the helpers above (forward_step.c). */
strata_status strata__forward_mm(strata_forward *f, float *y, const float *x,
				 const float *w, uint8_t elem,
				 const float *bias, uint32_t n, uint32_t in,
				 uint32_t out, strata_error *err)
{
	return mm(f, y, x, w, elem, bias, n, in, out, err);
}

strata_status strata__forward_rmsnorm(strata_forward *f, float *y,
				     const float *x, const float *w,
				     uint8_t elem, uint32_t n,
				     strata_error *err)
{
	return rmsnorm(f, y, x, w, elem, n, err);
}

strata_status strata__forward_qkv(strata_forward *f,
				  const strata_infer_layer *w, uint32_t n,
				  float *k, float *v, const float *bq,
				  const float *bk, const float *bv,
				  strata_error *err)
{
	const uint8_t *e = w->elem;
	const product p[] = {
		{f->q, w->wq, e[STRATA_SLOT_WQ], bq, f->q_dim},
		{k, w->wk, e[STRATA_SLOT_WK], bk, f->kv_dim},
		{v, w->wv, e[STRATA_SLOT_WV], bv, f->kv_dim},
	};
	return mm_shared(f, f->xb, NULL, n, f->hp->dim, p, 3, err);
}

strata_status strata__forward_mm_add(strata_forward *f, float *y,
				     const float *x, const float *w,
				     uint8_t elem, uint32_t n, uint32_t in,
				     uint32_t out, float *scratch,
				     strata_error *err)
{
	return mm_add(f, y, x, w, elem, n, in, out, scratch, err);
}

strata_status strata__forward_as_f32(strata_forward *f, const float *w,
				     uint8_t elem, uint32_t count,
				     float *scratch, const float **out,
				     strata_error *err)
{
	return as_f32(f, w, elem, count, scratch, out, err);
}

strata_status strata__forward_embed(strata_forward *f, const int32_t *tokens,
				    uint32_t n, strata_error *err)
{
	return embed(f, tokens, n, err);
}

strata_status strata__forward_mlp(strata_forward *f,
				  const strata_infer_layer *w, uint32_t n,
				  strata_error *err)
{
	return mlp_block(f, w, n, err);
}

strata_status strata__forward_download(const strata_forward *f, void *dst,
				       const void *src, uint64_t bytes,
				       strata_error *err)
{
	return download(f, dst, src, bytes, err);
}

strata_status strata__forward_upload(const strata_forward *f, void *dst,
				     const void *src, uint64_t bytes,
				     strata_error *err)
{
	return upload(f, dst, src, bytes, err);
}

strata_status strata__forward_finish(const strata_forward *f,
				     strata_error *err)
{
	return finish(f, err);
}

strata_status strata_forward_run(strata_forward *f, const int32_t *tokens,
				 uint32_t n, uint32_t pos, float *logits,
				 float *last, strata_error *err)
{
	if (!f || !tokens || n == 0 || pos != f->pos[f->seq])
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: no tokens, or position %u "
				   "is not the next one (%u)",
				   pos, f ? f->pos[f->seq] : 0);
	if ((uint64_t)pos + n > f->context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "give a shorter prompt or fewer tokens, or "
				   "raise --context",
				   "%u positions do not fit the context of %u "
				   "(%u already used)",
				   n, f->context, pos);
	for (uint32_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint32_t)tokens[i] >= f->hp->vocab)
			return strata_fail(err, STRATA_E_INFER_TOKEN,
					   "give token ids below the "
					   "vocabulary size",
					   "token %d (index %u) is outside the "
					   "vocabulary of %u",
					   tokens[i], i, f->hp->vocab);
	for (uint32_t done = 0; done < n;) {
		uint32_t m = n - done < f->batch ? n - done : f->batch;
		float *lg = logits ? logits + (uint64_t)done * f->hp->vocab
				   : NULL;
		float *ls = done + m == n ? last : NULL;
		strata_status st = chunk(f, tokens + done, m, pos + done, lg,
					 ls, err);
		if (st)
			return st;
		done += m;
		f->pos[f->seq] = pos + done;
	}
	return STRATA_OK;
}

void strata_forward_reset(strata_forward *f)
{
	f->pos[f->seq] = 0;
}

strata_status strata_forward_select(strata_forward *f, uint32_t seq,
				   strata_error *err)
{
	if (seq >= f->sequences)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: sequence %u of %u", seq,
				   f->sequences);
	f->seq = seq;
	return STRATA_OK;
}

uint32_t strata_forward_sequences(const strata_forward *f)
{
	return f->sequences;
}

uint32_t strata_forward_position_of(const strata_forward *f, uint32_t seq)
{
	return seq < f->sequences ? f->pos[seq] : 0;
}

uint32_t strata_forward_position(const strata_forward *f)
{
	return f->pos[f->seq];
}

uint32_t strata_forward_context(const strata_forward *f)
{
	return f->context;
}

const strata_infer_hparams *strata_forward_hparams(const strata_forward *f)
{
	return f->hp;
}
