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
 */
#include <math.h>
#include <string.h>

#include "strata/infer.h"

struct strata_forward {
	const strata_infer_hparams *hp;
	strata_compute *c;
	const strata_infer_source *src;
	uint32_t context, batch, pos;
	uint32_t q_dim, kv_dim;
	/* activations, `batch` rows each */
	float *x;	/* (batch, dim) the residual stream */
	float *xb;	/* (batch, dim) normed input / projection output */
	float *q;	/* (batch, q_dim) */
	float *att;	/* (batch, q_dim) attention output */
	float *hb, *hb2; /* (batch, ffn) gate and up */
	float *k_cache, *v_cache; /* (layers, context, kv_dim) */
	float *inv_freq;	  /* (head_dim / 2) */
};

/* ------------------------------------------------------------------------ */

static float *buffer(uint64_t rows, uint64_t cols, const char *what,
		     strata_error *err)
{
	uint64_t n, bytes;
	if (strata_checked_mul(rows, cols, &n, what, err) ||
	    strata_checked_mul(n, sizeof(float), &bytes, what, err))
		return NULL;
	if (bytes > SIZE_MAX) {
		strata_fail(err, STRATA_E_OVERFLOW, "lower --context",
			    "%s: %llu bytes do not fit in memory", what,
			    (unsigned long long)bytes);
		return NULL;
	}
	return strata_alloc_or_error((size_t)bytes, what, err);
}

static float *k_at(const strata_forward *f, uint32_t layer, uint32_t pos)
{
	return f->k_cache +
	       ((uint64_t)layer * f->context + pos) * f->kv_dim;
}

static float *v_at(const strata_forward *f, uint32_t layer, uint32_t pos)
{
	return f->v_cache +
	       ((uint64_t)layer * f->context + pos) * f->kv_dim;
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
	strata_status st;
	if ((st = strata_kernel_rmsnorm(c, f->xb, f->x, w->attn_norm, n,
					hp->dim, hp->norm_eps, err)) ||
	    (st = strata_kernel_matmul(c, f->q, f->xb, w->wq, w->bq, n,
				       hp->dim, f->q_dim, err)) ||
	    (st = strata_kernel_matmul(c, k, f->xb, w->wk, w->bk, n, hp->dim,
				       f->kv_dim, err)) ||
	    (st = strata_kernel_matmul(c, v, f->xb, w->wv, w->bv, n, hp->dim,
				       f->kv_dim, err)) ||
	    (st = strata_kernel_rope(c, f->q, n, pos, hp->heads, hp->head_dim,
				     f->inv_freq, hp->rope_layout, err)) ||
	    (st = strata_kernel_rope(c, k, n, pos, hp->kv_heads,
				     hp->head_dim, f->inv_freq,
				     hp->rope_layout, err)) ||
	    (st = strata_kernel_attention(c, f->att, f->q, k_at(f, layer, 0),
					  v_at(f, layer, 0), &shape, err)) ||
	    (st = strata_kernel_matmul(c, f->xb, f->att, w->wo, NULL, n,
				       f->q_dim, hp->dim, err)))
		return st;
	return strata_kernel_add(c, f->x, f->xb, (uint64_t)n * hp->dim, err);
}

/* x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x))). */
static strata_status mlp_block(strata_forward *f, const strata_infer_layer *w,
			       uint32_t n, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_compute *c = f->c;
	strata_status st;
	if ((st = strata_kernel_rmsnorm(c, f->xb, f->x, w->ffn_norm, n,
					hp->dim, hp->norm_eps, err)) ||
	    (st = strata_kernel_matmul(c, f->hb, f->xb, w->w_gate, NULL, n,
				       hp->dim, hp->ffn, err)) ||
	    (st = strata_kernel_matmul(c, f->hb2, f->xb, w->w_up, NULL, n,
				       hp->dim, hp->ffn, err)) ||
	    (st = strata_kernel_swiglu(c, f->hb, f->hb2,
				       (uint64_t)n * hp->ffn, err)) ||
	    (st = strata_kernel_matmul(c, f->xb, f->hb, w->w_down, NULL, n,
				       hp->ffn, hp->dim, err)))
		return st;
	return strata_kernel_add(c, f->x, f->xb, (uint64_t)n * hp->dim, err);
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

/* One chunk of at most `batch` positions. */
static strata_status chunk(strata_forward *f, const int32_t *tokens,
			   uint32_t n, uint32_t pos, float *logits, float *last,
			   strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_status st = strata_kernel_embed(f->c, f->x, f->src->statics.embed,
					       hp->vocab, tokens, n, hp->dim,
					       err);
	for (uint32_t l = 0; st == STRATA_OK && l < hp->layers; l++)
		st = layer_pass(f, l, n, pos, err);
	if (st == STRATA_OK && (logits || last))
		st = head(f, n, logits, last, err);
	return st;
}

/* ------------------------------------------------------------------------ */

strata_status strata_forward_create(const strata_infer_hparams *hp,
				    strata_compute *compute,
				    const strata_infer_source *src,
				    uint32_t context, uint32_t batch,
				    strata_forward **out, strata_error *err)
{
	if (!hp || !compute || !src || !out || !context || !batch)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: NULL argument or zero "
				   "context/batch");
	if (batch > context)
		batch = context;
	strata_forward *f = strata_calloc_or_error(1, sizeof *f,
						   "forward pass", err);
	if (!f)
		return STRATA_E_NOMEM;
	f->hp = hp;
	f->c = compute;
	f->src = src;
	f->context = context;
	f->batch = batch;
	f->q_dim = hp->heads * hp->head_dim;
	f->kv_dim = hp->kv_heads * hp->head_dim;
	uint64_t cache_rows = (uint64_t)hp->layers * context;
	if (!(f->x = buffer(batch, hp->dim, "residual stream", err)) ||
	    !(f->xb = buffer(batch, hp->dim, "normed activations", err)) ||
	    !(f->q = buffer(batch, f->q_dim, "queries", err)) ||
	    !(f->att = buffer(batch, f->q_dim, "attention output", err)) ||
	    !(f->hb = buffer(batch, hp->ffn, "MLP gate", err)) ||
	    !(f->hb2 = buffer(batch, hp->ffn, "MLP up", err)) ||
	    !(f->k_cache = buffer(cache_rows, f->kv_dim, "key cache", err)) ||
	    !(f->v_cache = buffer(cache_rows, f->kv_dim, "value cache", err)) ||
	    !(f->inv_freq = buffer(hp->head_dim / 2, 1, "rope frequencies",
				   err))) {
		strata_status st = err ? err->code : STRATA_E_NOMEM;
		strata_forward_destroy(f);
		return st;
	}
	strata_infer_rope_freqs(hp, f->inv_freq);
	const float *div = src->statics.rope_freqs;
	for (uint32_t i = 0; div && i < hp->head_dim / 2; i++) {
		if (!(div[i] > 0 && isfinite(div[i]))) {
			strata_forward_destroy(f);
			return strata_fail(err, STRATA_E_MODEL_CONFIG,
					   "fix or regenerate the GGUF file",
					   "rope_freqs.weight[%u] is %g, not a "
					   "positive divisor",
					   i, (double)div[i]);
		}
		/* llama.cpp: theta = pos * base_freq / freq_factor. */
		f->inv_freq[i] /= div[i];
	}
	*out = f;
	return STRATA_OK;
}

void strata_forward_destroy(strata_forward *f)
{
	if (!f)
		return;
	strata_free(f->x);
	strata_free(f->xb);
	strata_free(f->q);
	strata_free(f->att);
	strata_free(f->hb);
	strata_free(f->hb2);
	strata_free(f->k_cache);
	strata_free(f->v_cache);
	strata_free(f->inv_freq);
	strata_free(f);
}

strata_status strata_forward_run(strata_forward *f, const int32_t *tokens,
				 uint32_t n, uint32_t pos, float *logits,
				 float *last, strata_error *err)
{
	if (!f || !tokens || n == 0 || pos != f->pos)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: no tokens, or position %u "
				   "is not the next one (%u)",
				   pos, f ? f->pos : 0);
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
		f->pos = pos + done;
	}
	return STRATA_OK;
}

void strata_forward_reset(strata_forward *f)
{
	f->pos = 0;
}

uint32_t strata_forward_position(const strata_forward *f)
{
	return f->pos;
}

uint32_t strata_forward_context(const strata_forward *f)
{
	return f->context;
}

const strata_infer_hparams *strata_forward_hparams(const strata_forward *f)
{
	return f->hp;
}

/* ------------------------------------------------------------------------ */
/* KV save and restore (issue 9: a replica's prefix cache)                  */
/* ------------------------------------------------------------------------ */

/* The layout of a saved prefix is, per layer in order, the key rows then the
 * value rows of positions [0, positions): (layers, 2, positions, kv_dim).
 * The cache lives in host memory (strata_alloc above), so both directions
 * are plain copies. */

strata_status strata_forward_kv_bytes(const strata_forward *f,
				      uint32_t positions, uint64_t *out,
				      strata_error *err)
{
	uint64_t rows, floats;
	if (strata_checked_mul((uint64_t)f->hp->layers * 2, positions, &rows,
			       "saved KV rows", err) ||
	    strata_checked_mul(rows, f->kv_dim, &floats, "saved KV floats",
			       err) ||
	    strata_checked_mul(floats, sizeof(float), out, "saved KV bytes",
			       err))
		return err ? err->code : STRATA_E_OVERFLOW;
	return STRATA_OK;
}

strata_status strata_forward_kv_save(const strata_forward *f,
				     uint32_t positions, float *dst,
				     uint64_t dst_bytes, strata_error *err)
{
	uint64_t need;
	strata_status st = strata_forward_kv_bytes(f, positions, &need, err);
	if (st)
		return st;
	if (positions > f->pos || dst_bytes < need)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV save: %u positions asked, %u cached; "
				   "%llu bytes given, %llu needed",
				   positions, f->pos,
				   (unsigned long long)dst_bytes,
				   (unsigned long long)need);
	size_t row = (size_t)positions * f->kv_dim;
	for (uint32_t l = 0; l < f->hp->layers; l++) {
		memcpy(dst, k_at(f, l, 0), row * sizeof(float));
		memcpy(dst + row, v_at(f, l, 0), row * sizeof(float));
		dst += 2 * row;
	}
	return STRATA_OK;
}

strata_status strata_forward_kv_restore(strata_forward *f, const float *src,
					uint32_t saved, uint32_t positions,
					strata_error *err)
{
	if (positions > saved)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV restore: %u positions asked of %u saved",
				   positions, saved);
	if (positions > f->context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "raise --context",
				   "KV restore: %u positions do not fit the "
				   "context of %u",
				   positions, f->context);
	size_t row = (size_t)positions * f->kv_dim;
	size_t stride = (size_t)saved * f->kv_dim;
	for (uint32_t l = 0; l < f->hp->layers; l++) {
		memcpy(k_at(f, l, 0), src, row * sizeof(float));
		memcpy(v_at(f, l, 0), src + stride, row * sizeof(float));
		src += 2 * stride;
	}
	f->pos = positions;
	return STRATA_OK;
}
