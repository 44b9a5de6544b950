/* forward_family.c - the steps the families beyond llama add to its layer,
 * shared by the one-sequence pass (forward.c) and the several-sequence step
 * (forward_step.c): Qwen3's and Gemma 3's per-head q/k norms, Gemma's
 * norms as 1 + w, the norms after the attention and the MLP (Gemma's
 * "sandwich"), its embedding scale and logit soft-capping, per-layer
 * windows and rope bases (layer: infer).
 *
 * Each is a kernel-table call or none: llama, mistral and qwen2 take the
 * same calls as before, so their numbers do not move.
 */
#include <math.h>

#include "infer/forward_internal.h"

/* Norms of a layer by their place in f->norm_f32 (Gemma's 1 + w). */
enum { N_ATTN, N_ATTN_POST, N_FFN, N_FFN_POST, N_Q, N_K };

static uint64_t norm_offset(const strata_forward *f, int which)
{
	uint64_t dim = f->hp->dim;
	return which <= N_FFN_POST ? (uint64_t)which * dim
				   : 4 * dim + (uint64_t)(which - N_Q) *
						       f->hp->head_dim;
}

/* The weight a norm scales by: w itself, or 1 + w as f32 in f->norm_f32
 * (norms of every type, converted where not f32, never written in place). */
static strata_status norm_weight(strata_forward *f, const strata_weight *w,
				 int which, strata_weight *out,
				 strata_error *err)
{
	*out = *w;
	if (!f->hp->norm_plus_one || !w->data)
		return STRATA_OK;
	float *dst = f->norm_f32 + norm_offset(f, which);
	uint64_t count = (uint64_t)w->rows * w->cols;
	const float *src;
	strata_status st = strata_kernel_as_f32(f->c, w, dst, &src, err);
	if (st == STRATA_OK)
		st = strata_kernel_map(f->c, dst, src, count,
				       STRATA_MAP_ADD_CONST, 1.0f, err);
	*out = strata_weight_f32(dst, w->rows, w->cols);
	return st;
}

strata_status strata__forward_norms(strata_forward *f,
				    strata_forward_weights *w,
				    strata_error *err)
{
	strata_status st;
	if ((st = norm_weight(f, &w->attn_norm, N_ATTN, &w->attn_norm, err)) ||
	    (st = norm_weight(f, &w->attn_post_norm, N_ATTN_POST,
			      &w->attn_post_norm, err)) ||
	    (st = norm_weight(f, &w->ffn_norm, N_FFN, &w->ffn_norm, err)) ||
	    (st = norm_weight(f, &w->ffn_post_norm, N_FFN_POST,
			      &w->ffn_post_norm, err)) ||
	    (st = norm_weight(f, &w->q_norm, N_Q, &w->q_norm, err)))
		return st;
	return norm_weight(f, &w->k_norm, N_K, &w->k_norm, err);
}

strata_status strata__forward_final_norm(strata_forward *f,
					 strata_weight *w, strata_error *err)
{
	return norm_weight(f, w, N_ATTN, w, err);
}

uint64_t strata__forward_norm_floats(const strata_infer_hparams *hp)
{
	return hp->norm_plus_one ? 4ull * hp->dim + 2ull * hp->head_dim : 0;
}

strata_status strata__forward_qk_norm(strata_forward *f,
				      const strata_forward_weights *w,
				      float *q, float *k, uint32_t n,
				      strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	if (!hp->qk_norm)
		return STRATA_OK;
	/* rows of head_dim: every head of every position alike */
	strata_status st = strata_kernel_rmsnorm(f->c, q, q, &w->q_norm,
						 n * hp->heads, hp->norm_eps,
						 err);
	if (st)
		return st;
	return strata_kernel_rmsnorm(f->c, k, k, &w->k_norm, n * hp->kv_heads,
				     hp->norm_eps, err);
}

strata_status strata__forward_output(strata_forward *f, const float *x,
				     const strata_weight *w,
				     const strata_weight *post_norm,
				     uint32_t n, strata_error *err)
{
	if (!f->hp->sandwich_norms)
		return strata__forward_residual(f, f->x, x, w, n, err);
	/* Gemma: x += norm(x . w^T), the product's rows normed first */
	strata_status st = strata_kernel_matmul(f->c, f->xb, x, w, NULL, n,
						err);
	if (st == STRATA_OK)
		st = strata_kernel_rmsnorm(f->c, f->xb, f->xb, post_norm, n,
					   f->hp->norm_eps, err);
	if (st == STRATA_OK)
		st = strata_kernel_add(f->c, f->x, f->xb,
				       (uint64_t)n * f->hp->dim, err);
	return st;
}

strata_status strata__forward_embed(strata_forward *f, const int32_t *tokens,
				    uint32_t n, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	const strata_weight table = strata__forward_static(
		s->embed, s->embed_elem, hp->vocab, hp->dim);
	strata_status st = strata_kernel_embed(f->c, f->x, &table, tokens, n,
					       err);
	if (st == STRATA_OK && hp->embed_scaled)
		st = strata_kernel_map(f->c, f->x, f->x, (uint64_t)n * hp->dim,
				       STRATA_MAP_SCALE,
				       sqrtf((float)hp->dim), err);
	return st;
}

strata_status strata__forward_cap_logits(strata_forward *f, float *logits,
					 uint64_t count, strata_error *err)
{
	if (!(f->hp->final_softcap > 0))
		return STRATA_OK;
	return strata_kernel_map(f->c, logits, logits, count,
				 STRATA_MAP_SOFTCAP, f->hp->final_softcap, err);
}

const float *strata__forward_inv_freq(const strata_forward *f, uint32_t layer)
{
	if (f->inv_freq_local && strata_infer_layer_window(f->hp, layer))
		return f->inv_freq_local;
	return f->inv_freq;
}

strata_attention_shape strata__forward_attention_shape(const strata_forward *f,
						       uint32_t layer,
						       uint32_t n,
						       uint32_t pos)
{
	const strata_infer_hparams *hp = f->hp;
	float scale = hp->attn_scale > 0 ? hp->attn_scale
					 : 1.0f / sqrtf((float)hp->head_dim);
	return (strata_attention_shape){
		.n = n, .pos0 = pos, .heads = hp->heads,
		.kv_heads = hp->kv_heads, .head_dim = hp->head_dim,
		.window = strata_infer_layer_window(hp, layer),
		.scale = scale, .softcap = hp->attn_softcap,
		.kv_type = f->kv_type,
	};
}
