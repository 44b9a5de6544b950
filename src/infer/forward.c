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
 * position in the KV cache (kv_cache.c, which also saves and restores a
 * sequence's keys and values): the calls here act on the selected one,
 * forward_step.c decodes a token of several at once, forward_blocks.c holds
 * the steps those share, and
 * forward_create.c makes and drops the pass and its buffers.
 *
 * Every step is a call of the kernel table's wrappers on weights in their
 * stored type: the backend runs its fused kernels where it has them (a
 * norm folded into the products that read it, q/k/v in one launch, rope on
 * queries and keys at once) and the plain ones otherwise, so this file
 * reads the same for every backend.
 */
#include <math.h>
#include <string.h>

#include "infer/forward_internal.h"

/* The selected sequence's key / value cache rows (in the cache's type). */
static void *k_at(const strata_forward *f, uint32_t layer, uint32_t pos)
{
	return strata__kv_keys(f->kv, f->seq, layer, pos);
}

static void *v_at(const strata_forward *f, uint32_t layer, uint32_t pos)
{
	return strata__kv_values(f->kv, f->seq, layer, pos);
}

/* Where a chunk's rows are: n rows at positions pos ... */
typedef struct rows {
	uint32_t n, pos;
} rows;

/* x += attention(rmsnorm(x)) for rows at positions pos .. pos+n-1: q, k and
 * v (k and v straight into an f32 cache; into k_new / v_new, then stored
 * in the cache's type, for an f16/bf16 one) from the normed rows, the
 * rotation, attention over the cache, the output projection added to x. */
static strata_status attention_block(strata_forward *f,
				     const strata_forward_weights *w,
				     uint32_t layer, void *arg,
				     strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const rows *r = arg;
	uint32_t n = r->n, pos = r->pos;
	bool typed = f->kv_type != STRATA_WEIGHT_F32;
	float *k = typed ? f->k_new : k_at(f, layer, pos);
	float *v = typed ? f->v_new : v_at(f, layer, pos);
	uint64_t count = (uint64_t)n * f->kv_dim;
	const strata_attention_shape shape =
		strata__forward_attention_shape(f, layer, n, pos);
	const float *bq, *bk, *bv;
	strata_status st = strata__forward_biases(f, w, &bq, &bk, &bv, err);
	if (st)
		return st;
	const strata_kernel_norm norm = {w->attn_norm, hp->norm_eps};
	const strata_kernel_product qkv[] = {
		{f->q, w->wq, bq}, {k, w->wk, bk}, {v, w->wv, bv}};
	if ((st = strata_kernel_products(f->c, f->x, &norm, f->xb, n, qkv, 3,
					 false, NULL, err)) ||
	    (st = strata__forward_qk_norm(f, w, f->q, k, n, err)) ||
	    (st = strata_kernel_rope_qk(f->c, f->q, k, n, pos, hp->heads,
					hp->kv_heads, hp->head_dim,
					strata__forward_inv_freq(f, layer),
					hp->rope_layout, err)) ||
	    (typed && ((st = strata_kernel_kv_store(f->c, k_at(f, layer, pos),
						    f->kv_type, k, count,
						    err)) ||
		       (st = strata_kernel_kv_store(f->c, v_at(f, layer, pos),
						    f->kv_type, v, count,
						    err)))) ||
	    (st = strata_kernel_attention(f->c, f->att, f->q,
					  k_at(f, layer, 0), v_at(f, layer, 0),
					  &shape, err)))
		return st;
	return strata__forward_output(f, f->att, &w->wo, &w->attn_post_norm, n,
				      err);
}

/* One layer: attention, then the MLP, its weights held for both. */
static strata_status layer_block(strata_forward *f,
				 const strata_forward_weights *w,
				 uint32_t layer, void *arg, strata_error *err)
{
	const rows *r = arg;
	strata_status st = attention_block(f, w, layer, arg, err);
	return st ? st : strata__forward_mlp(f, w, r->n, err);
}

/* Final norm and LM head where the LM head can write the caller's memory:
 * every row into logits (n, vocab), or the last row into last (vocab). */
static strata_status head_in_place(strata_forward *f, uint32_t n,
				   float *logits, float *last,
				   const strata_weight *norm_w,
				   const strata_weight *lm_head,
				   strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	uint32_t first = logits ? 0 : n - 1;
	float *out = logits ? logits : last;
	strata_status st = strata_kernel_rmsnorm(
		f->c, f->xb, f->x + (uint64_t)first * hp->dim, norm_w,
		n - first, hp->norm_eps, err);
	if (st == STRATA_OK)
		st = strata_kernel_matmul(f->c, out, f->xb, lm_head, NULL,
					  n - first, err);
	if (st == STRATA_OK)
		st = strata__forward_cap_logits(
			f, out, (uint64_t)(n - first) * hp->vocab, err);
	if (st == STRATA_OK && logits && last)
		memcpy(last, logits + (uint64_t)(n - 1) * hp->vocab,
		       hp->vocab * sizeof *last);
	return st;
}

/* The same where it cannot: the final norm over the rows wanted, then the
 * LM head one row at a time into logit_row (the plan's logits buffer is one
 * row), each row copied back behind its product; one wait at the end. */
static strata_status head_rows(strata_forward *f, uint32_t n, float *logits,
			       float *last, const strata_weight *norm_w,
			       const strata_weight *lm_head, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	uint32_t first = logits ? 0 : n - 1, count = n - first;
	uint64_t row_bytes = (uint64_t)hp->vocab * sizeof(float);
	strata_status st = strata_kernel_rmsnorm(
		f->c, f->xb, f->x + (uint64_t)first * hp->dim, norm_w, count,
		hp->norm_eps, err);
	for (uint32_t r = 0; st == STRATA_OK && r < count; r++) {
		float *dst = logits ? logits + (uint64_t)r * hp->vocab : last;
		st = strata_kernel_matmul(f->c, f->logit_row,
					  f->xb + (uint64_t)r * hp->dim,
					  lm_head, NULL, 1, err);
		if (st == STRATA_OK)
			st = strata__forward_cap_logits(f, f->logit_row,
							hp->vocab, err);
		if (st == STRATA_OK)
			st = strata_compute_download(f->c, dst, f->logit_row,
						     row_bytes, err);
	}
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	if (st == STRATA_OK && logits && last)
		memcpy(last, logits + (uint64_t)(n - 1) * hp->vocab, row_bytes);
	return st;
}

static strata_status head(strata_forward *f, uint32_t n, float *logits,
			  float *last, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	strata_weight norm_w = strata__forward_static(
		s->final_norm, s->final_norm_elem, 1, hp->dim);
	const strata_weight lm_head = strata__forward_static(
		s->lm_head, s->lm_head_elem, hp->vocab, hp->dim);
	strata_status st = strata__forward_final_norm(f, &norm_w, err);
	if (st)
		return st;
	if (f->logits_in_place)
		return head_in_place(f, n, logits, last, &norm_w, &lm_head,
				     err);
	return head_rows(f, n, logits, last, &norm_w, &lm_head, err);
}

/* One chunk of at most `batch` positions. */
static strata_status chunk(strata_forward *f, const int32_t *tokens,
			   uint32_t n, uint32_t pos, float *logits, float *last,
			   strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	rows r = {n, pos};
	/* a placement runs a long enough chunk on its prefill split; the
	 * embedding is where the statics are (the stream is rewritten) */
	strata_status st = strata__forward_pass(
		f, f->prefill_from && n >= f->prefill_from, err);
	if (st == STRATA_OK)
		st = strata__forward_move(f, f->head_site, n, false, err);
	if (st == STRATA_OK)
		st = strata__forward_embed(f, tokens, n, err);
	for (uint32_t l = 0; st == STRATA_OK && l < hp->layers; l++)
		st = strata__forward_layer_at(f, l, n, pos, layer_block, &r,
					      err);
	if (st == STRATA_OK)
		st = strata__forward_move(f, f->head_site, n, true, err);
	if (st == STRATA_OK && (logits || last))
		st = head(f, n, logits, last, err);
	else if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err); /* faults show here */
	return st;
}

strata_status strata_forward_run(strata_forward *f, const int32_t *tokens,
				 uint32_t n, uint32_t pos, float *logits,
				 float *last, strata_error *err)
{
	if (!f || !tokens || n == 0 || pos != f->kv->pos[f->seq])
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: no tokens, or position %u "
				   "is not the next one (%u)",
				   pos, f ? f->kv->pos[f->seq] : 0);
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
		f->kv->pos[f->seq] = pos + done;
	}
	return STRATA_OK;
}

void strata_forward_reset(strata_forward *f)
{
	f->kv->pos[f->seq] = 0;
}

strata_status strata_forward_truncate(strata_forward *f, uint32_t positions,
				      strata_error *err)
{
	if (positions > f->kv->pos[f->seq])
		return strata_fail(err, STRATA_E_INVALID_ARG, "this is a bug in "
				   "the caller", "forward pass: keep %u "
				   "positions of %u cached", positions,
				   f->kv->pos[f->seq]);
	f->kv->pos[f->seq] = positions; /* rows past it are overwritten */
	return STRATA_OK;
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
	return seq < f->sequences ? f->kv->pos[seq] : 0;
}

uint32_t strata_forward_position(const strata_forward *f)
{
	return f->kv->pos[f->seq];
}

uint32_t strata_forward_context(const strata_forward *f)
{
	return f->context;
}

const strata_infer_hparams *strata_forward_hparams(const strata_forward *f)
{
	return f->hp;
}

strata_kv_cache *strata_forward_kv_cache(const strata_forward *f)
{
	return f->kv;
}

uint32_t strata_forward_selected(const strata_forward *f)
{
	return f->seq;
}
