/* forward_step.c - one decode step of several sequences at once: B rows,
 * each its own token, position and KV cache (layer: infer).
 *
 * The weight products, which dominate a step and are what a streamed
 * residency pays for, run once over all B rows, and each layer's weights are
 * acquired and released once per step: in host:D or disk mode one pass of
 * the weights serves B tokens (the FlexGen lesson, issue 9's --batch B).
 * Attention is per sequence, one query against that sequence's own cache
 * at its own position, through the same kernel a one-sequence decode uses.
 *
 * Only kernel-table calls and forward_blocks.c's steps are used, so the
 * step runs on every backend, host or device buffers alike. On the CPU the
 * kernels compute each row the same whatever the row count, so a step's
 * row is bit for bit the one-sequence decode of that token.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "infer/forward_internal.h"

/* ------------------------------------------------------------------------ */

static strata_status check_step(const strata_forward *f, const uint32_t *seqs,
				const int32_t *tokens, uint32_t count,
				strata_error *err)
{
	bool seen[STRATA_FORWARD_MAX_SEQUENCES] = {false};
	if (!f || !seqs || !tokens || count == 0 || count > f->sequences)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward step: %u sequences given, between "
				   "1 and %u wanted",
				   count, f ? f->sequences : 0);
	for (uint32_t i = 0; i < count; i++) {
		uint32_t s = seqs[i];
		if (s >= f->sequences || seen[s])
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "this is a bug in the caller",
					   "forward step: sequence %u (row %u) "
					   "is past the last (%u) or listed "
					   "twice",
					   s, i, f->sequences - 1);
		seen[s] = true;
		if (f->kv->pos[s] >= f->context)
			return strata_fail(err, STRATA_E_INFER_CONTEXT,
					   "give fewer tokens, or raise "
					   "--context",
					   "sequence %u has used its whole "
					   "context of %u",
					   s, f->context);
		if (tokens[i] < 0 || (uint32_t)tokens[i] >= f->hp->vocab)
			return strata_fail(err, STRATA_E_INFER_TOKEN,
					   "give token ids below the "
					   "vocabulary size",
					   "token %d (row %u) is outside the "
					   "vocabulary of %u",
					   tokens[i], i, f->hp->vocab);
	}
	return STRATA_OK;
}

/* Copies row `row` of src (rows, dim) to dst (dim) on the device: the
 * embedding gather with one id is exactly a row copy, and it is in every
 * backend's kernel table. */
static strata_status copy_row(strata_forward *f, float *dst, const float *src,
			      uint32_t rows, uint32_t row, uint32_t dim,
			      strata_error *err)
{
	int32_t id = (int32_t)row;
	const strata_weight table = strata_weight_f32(src, rows, dim);
	return strata_kernel_embed(f->c, dst, &table, &id, 1, err);
}

/* For each row i: rotate its query and new key at its sequence's position,
 * put the new key and value into that sequence's cache (one row: the
 * products wrote them there already), and attend over the cache. */
static strata_status attend_rows(strata_forward *f, uint32_t layer,
				 const uint32_t *seqs, uint32_t count,
				 strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_compute *c = f->c;
	strata_status st = STRATA_OK;
	for (uint32_t i = 0; st == STRATA_OK && i < count; i++) {
		uint32_t s = seqs[i], p = f->kv->pos[s];
		float *q = f->q + (uint64_t)i * f->q_dim;
		float *k = strata__kv_keys(f->kv, s, layer, p);
		float *v = strata__kv_values(f->kv, s, layer, p);
		const strata_attention_shape shape =
			strata__forward_attention_shape(f, layer, 1, p);
		const float *inv_freq = strata__forward_inv_freq(f, layer);
		if (count > 1 &&
		    ((st = copy_row(f, k, f->k_new, count, i, f->kv_dim,
				    err)) ||
		     (st = copy_row(f, v, f->v_new, count, i, f->kv_dim,
				    err))))
			break;
		if ((st = strata_kernel_rope(c, q, 1, p, hp->heads,
					     hp->head_dim, inv_freq,
					     hp->rope_layout, err)) ||
		    (st = strata_kernel_rope(c, k, 1, p, hp->kv_heads,
					     hp->head_dim, inv_freq,
					     hp->rope_layout, err)))
			break;
		st = strata_kernel_attention(
			c, f->att + (uint64_t)i * f->q_dim, q,
			strata__kv_keys(f->kv, s, layer, 0),
			strata__kv_values(f->kv, s, layer, 0), &shape, err);
	}
	return st;
}

/* The step's sequences. */
typedef struct step_rows {
	const uint32_t *seqs;
	uint32_t count;
} step_rows;

/* x += attention(rmsnorm(x)) for the step's rows: q, k, v and the output
 * projection over all rows at once (so the step gets whatever a
 * one-sequence decode's products get). One row writes its key and value
 * straight into its cache, as the one-sequence decode does; several go
 * through k_new / v_new. */
static strata_status attention_step(strata_forward *f,
				    const strata_forward_weights *w,
				    uint32_t layer, const step_rows *r,
				    strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const uint32_t *seqs = r->seqs, count = r->count;
	float *k = count > 1 ? f->k_new
			     : strata__kv_keys(f->kv, seqs[0], layer,
						    f->kv->pos[seqs[0]]);
	float *v = count > 1 ? f->v_new
			     : strata__kv_values(f->kv, seqs[0], layer,
						    f->kv->pos[seqs[0]]);
	const float *bq, *bk, *bv;
	strata_status st = strata__forward_biases(f, w, &bq, &bk, &bv, err);
	if (st)
		return st;
	const strata_kernel_product qkv[] = {
		{f->q, w->wq, bq}, {k, w->wk, bk}, {v, w->wv, bv}};
	if ((st = strata_kernel_rmsnorm(f->c, f->xb, f->x, &w->attn_norm,
					count, hp->norm_eps, err)) ||
	    (st = strata_kernel_products(f->c, f->xb, NULL, NULL, count, qkv,
					 3, false, NULL, err)) ||
	    (st = strata__forward_qk_norm(f, w, f->q, k, count, err)) ||
	    (st = attend_rows(f, layer, seqs, count, err)))
		return st;
	return strata__forward_output(f, f->att, &w->wo, &w->attn_post_norm,
				      count, err);
}

/* One layer for the step's rows, its weights held once for all of them. */
static strata_status layer_step(strata_forward *f,
				const strata_forward_weights *w,
				uint32_t layer, void *arg, strata_error *err)
{
	const step_rows *r = arg;
	strata_status st = attention_step(f, w, layer, r, err);
	return st ? st : strata__forward_mlp(f, w, r->count, err);
}

/* Final norm and LM head over every row: straight into logits (count,
 * vocab) where the host addresses the backend's memory; else into the
 * logits rows, then copied back. */
static strata_status head_step(strata_forward *f, uint32_t count,
			       float *logits, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	strata_weight norm_w = strata__forward_static(
		s->final_norm, s->final_norm_elem, 1, hp->dim);
	const strata_weight lm_head = strata__forward_static(
		s->lm_head, s->lm_head_elem, hp->vocab, hp->dim);
	float *out = f->logits_in_place ? logits : f->logit_row;
	strata_status st = strata__forward_final_norm(f, &norm_w, err);
	if (st == STRATA_OK)
		st = strata_kernel_rmsnorm(f->c, f->xb, f->x, &norm_w, count,
					   hp->norm_eps, err);
	if (st == STRATA_OK)
		st = strata_kernel_matmul(f->c, out, f->xb, &lm_head, NULL,
					  count, err);
	if (st == STRATA_OK)
		st = strata__forward_cap_logits(f, out,
						(uint64_t)count * hp->vocab,
						err);
	if (st == STRATA_OK && !f->logits_in_place)
		st = strata_compute_download(f->c, logits, f->logit_row,
					     (uint64_t)count * hp->vocab *
						     sizeof(float),
					     err);
	return st;
}

/* ------------------------------------------------------------------------ */

strata_status strata_forward_step(strata_forward *f, const uint32_t *seqs,
				  const int32_t *tokens, uint32_t count,
				  float *logits, strata_error *err)
{
	strata_status st = check_step(f, seqs, tokens, count, err);
	if (st)
		return st;
	if (count == 1) {
		/* one row is a one-token run of its sequence, whose device
		 * path folds the norms into the products and turns q and k
		 * in one launch: fewer launches than the per-row code below */
		const uint32_t keep = f->seq;
		f->seq = seqs[0];
		st = strata_forward_run(f, tokens, 1, f->kv->pos[seqs[0]], NULL,
					logits, err);
		f->seq = keep;
		return st;
	}
	const strata_infer_hparams *hp = f->hp;
	step_rows r = {seqs, count};
	/* decode: every layer where its KV cache is (no staging) */
	if ((st = strata__forward_pass(f, false, err)) == STRATA_OK)
		st = strata__forward_move(f, f->head_site, count, false, err);
	if (st == STRATA_OK)
		st = strata__forward_embed(f, tokens, count, err);
	for (uint32_t l = 0; st == STRATA_OK && l < hp->layers; l++)
		st = strata__forward_layer_at(f, l, count, 0, layer_step, &r,
					      err);
	if (st == STRATA_OK)
		st = strata__forward_move(f, f->head_site, count, true, err);
	if (st == STRATA_OK && logits)
		st = head_step(f, count, logits, err);
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	if (st)
		return st;
	for (uint32_t i = 0; i < count; i++)
		f->kv->pos[seqs[i]]++;
	return STRATA_OK;
}
