/* forward_step.c - one step of several sequences at once: each sequence a
 * segment of rows, a decode token (one row) or a prompt chunk (several),
 * each at its own positions of its own KV cache (layer: infer).
 *
 * The weight products, which dominate a step and are what a streamed
 * residency pays for, run once over all rows, and each layer's weights are
 * acquired and released once per step: in host:D or disk mode one pass of
 * the weights serves every running sequence's token and the prompts being
 * read beside them (the FlexGen lesson, issue 9's --batch B; issue 19's
 * continuous batching). Attention is per segment, its queries against its
 * sequence's own cache (causal within a chunk), through the kernel a
 * one-sequence pass uses; the LM head runs over the rows whose logits are
 * wanted only.
 *
 * Only kernel-table calls and forward_blocks.c's steps are used, so the
 * step runs on every backend, host or device buffers alike. On the CPU the
 * kernels compute each row the same whatever the row count, so a step's
 * decode row is bit for bit the one-sequence decode of that token. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "infer/forward_internal.h"

/* The step's segments and where each one's rows start. */
typedef struct step_rows {
	const strata_forward_segment *segs;
	uint32_t count;
	uint32_t rows;				 /* sum of the n */
	uint32_t first[STRATA_FORWARD_MAX_SEQUENCES]; /* each one's row 0 */
} step_rows;

/* ------------------------------------------------------------------------ */

static strata_status bad_list(strata_error *err, const char *what,
			      uint32_t a, uint32_t b)
{
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller",
			   "forward step: %s (%u, %u)", what, a, b);
}

/* Checks one segment (its sequence already known distinct and in range). */
static strata_status check_segment(const strata_forward *f,
				   const strata_forward_segment *g,
				   uint32_t i, strata_error *err)
{
	if (!g->tokens || g->n == 0)
		return bad_list(err, "segment with no tokens (segment, "
				"sequence)", i, g->seq);
	if ((uint64_t)f->kv->pos[g->seq] + g->n > f->context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "give fewer tokens, or raise --context",
				   g->n == 1 ? "sequence %u has used its whole "
					       "context of %u"
					     : "sequence %u: %u more positions "
					       "do not fit its context",
				   g->seq, g->n == 1 ? f->context : g->n);
	for (uint32_t t = 0; t < g->n; t++)
		if (g->tokens[t] < 0 || (uint32_t)g->tokens[t] >= f->hp->vocab)
			return strata_fail(err, STRATA_E_INFER_TOKEN,
					   "give token ids below the "
					   "vocabulary size",
					   "token %d (segment %u, index %u) is "
					   "outside the vocabulary of %u",
					   g->tokens[t], i, t, f->hp->vocab);
	return STRATA_OK;
}

/* Checks the list and fills r (rows and each segment's first row). */
static strata_status check_step(const strata_forward *f,
				const strata_forward_segment *segs,
				uint32_t count, step_rows *r,
				strata_error *err)
{
	bool seen[STRATA_FORWARD_MAX_SEQUENCES] = {false};
	if (!f || !segs || count == 0 || count > f->sequences)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward step: %u sequences given, between "
				   "1 and %u wanted",
				   count, f ? f->sequences : 0);
	uint64_t rows = 0;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t s = segs[i].seq;
		if (s >= f->sequences || seen[s])
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "this is a bug in the caller",
					   "forward step: sequence %u (row %u) "
					   "is past the last (%u) or listed "
					   "twice",
					   s, i, f->sequences - 1);
		seen[s] = true;
		strata_status st = check_segment(f, &segs[i], i, err);
		if (st)
			return st;
		r->first[i] = (uint32_t)rows;
		rows += segs[i].n;
	}
	if (rows > f->rows)
		return bad_list(err, "more rows than a step takes (rows, most)",
				(uint32_t)(rows > UINT32_MAX ? UINT32_MAX : rows),
				f->rows);
	r->segs = segs;
	r->count = count;
	r->rows = (uint32_t)rows;
	return STRATA_OK;
}

/* Copies rows [row, row + n) of src (rows, dim) to dst (n, dim) on the
 * device: the embedding gather of those ids is exactly a row copy, and it
 * is in every backend's kernel table. */
static strata_status copy_rows(strata_forward *f, float *dst, const float *src,
			       uint32_t rows, uint32_t row, uint32_t n,
			       uint32_t dim, strata_error *err)
{
	int32_t ids[64];
	const strata_weight table = strata_weight_f32(src, rows, dim);
	strata_status st = STRATA_OK;
	for (uint32_t done = 0; st == STRATA_OK && done < n;) {
		uint32_t m = n - done < 64 ? n - done : 64;
		for (uint32_t i = 0; i < m; i++)
			ids[i] = (int32_t)(row + done + i);
		st = strata_kernel_embed(f->c, dst + (uint64_t)done * dim,
					 &table, ids, m, err);
		done += m;
	}
	return st;
}

/* A segment's new keys and values (rows `row` .. of k_new / v_new, f32,
 * keys already rotated) into its sequence's cache of f16 / bf16. */
static strata_status store_rows(strata_forward *f, uint32_t layer,
				const strata_forward_segment *g, uint32_t row,
				strata_error *err)
{
	uint32_t s = g->seq, p = f->kv->pos[s];
	uint64_t at = (uint64_t)row * f->kv_dim, count = (uint64_t)g->n * f->kv_dim;
	strata_status st = strata_kernel_kv_store(
		f->c, strata__kv_keys(f->kv, s, layer, p), f->kv_type,
		f->k_new + at, count, err);
	return st ? st
		  : strata_kernel_kv_store(
			    f->c, strata__kv_values(f->kv, s, layer, p),
			    f->kv_type, f->v_new + at, count, err);
}

/* For each segment: its new keys and values into its sequence's cache
 * (with one segment and an f32 cache the products wrote them there
 * already), its queries and keys rotated at its positions, attention over
 * its cache (causal within the segment). An f16 / bf16 cache takes its
 * rows after the rotation, in its type. */
static strata_status attend_rows(strata_forward *f, uint32_t layer,
				 const step_rows *r, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	strata_compute *c = f->c;
	bool typed = f->kv_type != STRATA_WEIGHT_F32;
	strata_status st = STRATA_OK;
	for (uint32_t i = 0; st == STRATA_OK && i < r->count; i++) {
		const strata_forward_segment *g = &r->segs[i];
		uint32_t s = g->seq, p = f->kv->pos[s], row = r->first[i];
		float *q = f->q + (uint64_t)row * f->q_dim;
		float *k = typed ? f->k_new + (uint64_t)row * f->kv_dim
				 : strata__kv_keys(f->kv, s, layer, p);
		float *v = strata__kv_values(f->kv, s, layer, p);
		const strata_attention_shape shape =
			strata__forward_attention_shape(f, layer, g->n, p);
		if (!typed && r->count > 1 &&
		    ((st = copy_rows(f, k, f->k_new, r->rows, row, g->n,
				     f->kv_dim, err)) ||
		     (st = copy_rows(f, v, f->v_new, r->rows, row, g->n,
				     f->kv_dim, err))))
			break;
		if ((st = strata_kernel_rope_qk(
			     c, q, k, g->n, p, hp->heads, hp->kv_heads,
			     hp->head_dim, strata__forward_inv_freq(f, layer),
			     hp->rope_layout, err)))
			break;
		if (typed && (st = store_rows(f, layer, g, row, err)))
			break;
		st = strata_kernel_attention(
			c, f->att + (uint64_t)row * f->q_dim, q,
			strata__kv_keys(f->kv, s, layer, 0),
			strata__kv_values(f->kv, s, layer, 0), &shape, err);
	}
	return st;
}

/* x += attention(rmsnorm(x)) for the step's rows: q, k, v and the output
 * projection over all rows at once (so the step gets whatever a
 * one-sequence pass's products get). One segment writes its keys and
 * values straight into its cache, as a one-sequence pass does; several
 * go through k_new / v_new. */
static strata_status attention_step(strata_forward *f,
				    const strata_forward_weights *w,
				    uint32_t layer, const step_rows *r,
				    strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	uint32_t s0 = r->segs[0].seq, rows = r->rows;
	bool through = r->count > 1 || f->kv_type != STRATA_WEIGHT_F32;
	float *k = through ? f->k_new
			   : strata__kv_keys(f->kv, s0, layer, f->kv->pos[s0]);
	float *v = through ? f->v_new
			   : strata__kv_values(f->kv, s0, layer,
					       f->kv->pos[s0]);
	const float *bq, *bk, *bv;
	strata_status st = strata__forward_biases(f, w, &bq, &bk, &bv, err);
	if (st)
		return st;
	const strata_kernel_norm norm = {w->attn_norm, hp->norm_eps};
	const strata_kernel_product qkv[] = {
		{f->q, w->wq, bq}, {k, w->wk, bk}, {v, w->wv, bv}};
	if ((st = strata_kernel_products(f->c, f->x, &norm, f->xb, rows, qkv,
					 3, false, NULL, err)) ||
	    (st = strata__forward_qk_norm(f, w, f->q, k, rows, err)) ||
	    (st = attend_rows(f, layer, r, err)))
		return st;
	return strata__forward_output(f, f->att, &w->wo, &w->attn_post_norm,
				      rows, err);
}

/* One layer for the step's rows, its weights held once for all of them. */
static strata_status layer_step(strata_forward *f,
				const strata_forward_weights *w,
				uint32_t layer, void *arg, strata_error *err)
{
	const step_rows *r = arg;
	strata_status st = attention_step(f, w, layer, r, err);
	return st ? st : strata__forward_mlp(f, w, r->rows, err);
}

/* Final norm and LM head over the rows wanted (the last row of each
 * segment asking for logits, gathered to the front of xb when they are not
 * every row): straight into logits (wanted, vocab) where the host
 * addresses the backend's memory; else into the logits rows, then copied
 * back. */
static strata_status head_step(strata_forward *f, const step_rows *r,
			       float *logits, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	strata_weight norm_w = strata__forward_static(
		s->final_norm, s->final_norm_elem, 1, hp->dim);
	const strata_weight lm_head = strata__forward_static(
		s->lm_head, s->lm_head_elem, hp->vocab, hp->dim);
	float *out = f->logits_in_place ? logits : f->logit_row;
	int32_t ids[STRATA_FORWARD_MAX_SEQUENCES];
	uint32_t m = 0;
	for (uint32_t i = 0; i < r->count; i++)
		if (r->segs[i].logits)
			ids[m++] = (int32_t)(r->first[i] + r->segs[i].n - 1);
	const float *x = f->x;
	strata_status st = strata__forward_final_norm(f, &norm_w, err);
	if (st == STRATA_OK && m < r->rows) {
		/* x's rows wanted, to the front of xb; normed back into x
		 * (the residual stream is not needed after the norm) */
		const strata_weight table = strata_weight_f32(f->x, r->rows,
							      hp->dim);
		st = strata_kernel_embed(f->c, f->xb, &table, ids, m, err);
		if (st == STRATA_OK)
			st = strata_kernel_rmsnorm(f->c, f->x, f->xb, &norm_w,
						   m, hp->norm_eps, err);
		x = f->x;
	} else if (st == STRATA_OK) {
		st = strata_kernel_rmsnorm(f->c, f->xb, f->x, &norm_w, m,
					   hp->norm_eps, err);
		x = f->xb;
	}
	if (st == STRATA_OK)
		st = strata_kernel_matmul(f->c, out, x, &lm_head, NULL, m, err);
	if (st == STRATA_OK)
		st = strata__forward_cap_logits(f, out, (uint64_t)m * hp->vocab,
						err);
	if (st == STRATA_OK && !f->logits_in_place)
		st = strata_compute_download(f->c, logits, f->logit_row,
					     (uint64_t)m * hp->vocab *
						     sizeof(float),
					     err);
	return st;
}

/* Whether a segment wants logits. */
static bool any_logits(const step_rows *r)
{
	for (uint32_t i = 0; i < r->count; i++)
		if (r->segs[i].logits)
			return true;
	return false;
}

/* ------------------------------------------------------------------------ */

strata_status strata_forward_step_segments(strata_forward *f,
					   const strata_forward_segment *segs,
					   uint32_t count, float *logits,
					   strata_error *err)
{
	step_rows r;
	strata_status st = check_step(f, segs, count, &r, err);
	if (st)
		return st;
	bool want = any_logits(&r);
	if (want && !logits)
		return bad_list(err, "logits wanted but no array given "
				"(segments, rows)", count, r.rows);
	if (count == 1) {
		/* one segment is a run of its sequence, whose device path
		 * folds the norms into the products and turns q and k in
		 * one launch: fewer launches than the code below */
		const uint32_t keep = f->seq;
		f->seq = segs[0].seq;
		st = strata_forward_run(f, segs[0].tokens, segs[0].n,
					f->kv->pos[segs[0].seq], NULL,
					want ? logits : NULL, err);
		f->seq = keep;
		return st;
	}
	const strata_infer_hparams *hp = f->hp;
	int32_t *tokens = f->step_tokens; /* (rows) the segments' tokens */
	for (uint32_t i = 0; i < count; i++)
		memcpy(tokens + r.first[i], segs[i].tokens,
		       segs[i].n * sizeof *tokens);
	/* decode: every layer where its KV cache is (no staging) */
	if ((st = strata__forward_pass(f, false, err)) == STRATA_OK)
		st = strata__forward_move(f, f->head_site, r.rows, false, err);
	if (st == STRATA_OK)
		st = strata__forward_embed(f, tokens, r.rows, err);
	for (uint32_t l = 0; st == STRATA_OK && l < hp->layers; l++)
		st = strata__forward_layer_at(f, l, r.rows, 0, layer_step, &r,
					      err);
	if (st == STRATA_OK)
		st = strata__forward_move(f, f->head_site, r.rows, true, err);
	if (st == STRATA_OK && want)
		st = head_step(f, &r, logits, err);
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	if (st)
		return st;
	for (uint32_t i = 0; i < count; i++)
		f->kv->pos[segs[i].seq] += segs[i].n;
	return STRATA_OK;
}

strata_status strata_forward_step(strata_forward *f, const uint32_t *seqs,
				  const int32_t *tokens, uint32_t count,
				  float *logits, strata_error *err)
{
	strata_forward_segment segs[STRATA_FORWARD_MAX_SEQUENCES];
	if (!f || !seqs || !tokens || count == 0 || count > f->sequences)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward step: %u sequences given, between "
				   "1 and %u wanted",
				   count, f ? f->sequences : 0);
	for (uint32_t i = 0; i < count; i++)
		segs[i] = (strata_forward_segment){seqs[i], &tokens[i], 1,
						   logits != NULL};
	return strata_forward_step_segments(f, segs, count, logits, err);
}

uint32_t strata_forward_step_rows(const strata_forward *f)
{
	return f->rows;
}
