/* forward_blocks.c - the steps the one-sequence pass (forward.c) and the
 * several-sequence step (forward_step.c) share: a layer's weights as the
 * kernel table takes them, held for one step, the biases as f32, the
 * residual product and the MLP block (layer: infer).
 *
 * Everything goes through the kernel table's wrappers, which choose the
 * fused kernels where the backend has them, so these read the same on
 * every backend and no step looks at which one it runs on.
 */
#include "infer/forward_internal.h"

/* ------------------------------------------------------------------------ */

strata_weight strata__forward_static(const void *data, uint8_t elem,
				     uint32_t rows, uint32_t cols)
{
	return (strata_weight){(strata_weight_type)elem, data, rows, cols};
}

/* Rows [first, first + rows) of a row-major weight of `cols` columns in
 * its stored type: Phi-3's fused tensors hold q, k, v (and gate, up) one
 * after the other. */
static strata_weight rows_of(const strata_weight *w, uint32_t first,
			     uint32_t rows)
{
	strata_block_type b = strata_weight_type_block(w->type);
	uint64_t row_bytes = (uint64_t)w->cols / strata_block_elements(b) *
			     strata_block_bytes(b);
	return (strata_weight){w->type,
			       (const char *)w->data + first * row_bytes, rows,
			       w->cols};
}

void strata__forward_weights_of(const strata_forward *f,
				const strata_infer_layer *l,
				strata_forward_weights *out)
{
	const strata_infer_hparams *hp = f->hp;
	const uint8_t *e = l->elem;
	uint32_t dim = hp->dim, q = f->q_dim, kv = f->kv_dim, ffn = hp->ffn;
#define W(slot, field, rows, cols)                                             \
	out->field = strata__forward_static(l->field, e[STRATA_SLOT_##slot],   \
					    (rows), (cols))
	W(ATTN_NORM, attn_norm, 1, dim);
	W(WQ, wq, q, dim);
	W(WK, wk, kv, dim);
	W(WV, wv, kv, dim);
	W(BQ, bq, 1, q);
	W(BK, bk, 1, kv);
	W(BV, bv, 1, kv);
	W(WO, wo, dim, q);
	W(FFN_NORM, ffn_norm, 1, dim);
	W(W_GATE, w_gate, ffn, dim);
	W(W_UP, w_up, ffn, dim);
	W(W_DOWN, w_down, dim, ffn);
	W(Q_NORM, q_norm, 1, hp->head_dim);
	W(K_NORM, k_norm, 1, hp->head_dim);
	W(ATTN_POST_NORM, attn_post_norm, 1, dim);
	W(FFN_POST_NORM, ffn_post_norm, 1, dim);
	W(ROUTER, router, hp->experts, dim);
	W(SH_GATE, sh_gate, hp->shared_ffn, dim);
	W(SH_UP, sh_up, hp->shared_ffn, dim);
	W(SH_DOWN, sh_down, dim, hp->shared_ffn);
	W(SH_ROUTER, sh_router, 1, dim);
#undef W
	out->experts = l->experts;
	for (int k = 0; k < 3; k++) {
		out->expert[k] = l->expert[k];
		out->expert_elem[k] = l->expert_elem[k];
	}
	if (hp->fused_qkv) { /* the tensors are whole in wq and w_gate */
		const strata_weight qkv = {out->wq.type, out->wq.data,
					   q + 2 * kv, dim};
		const strata_weight gate_up = {out->w_gate.type,
					       out->w_gate.data, 2 * ffn, dim};
		out->wq = rows_of(&qkv, 0, q);
		out->wk = rows_of(&qkv, q, kv);
		out->wv = rows_of(&qkv, q + kv, kv);
		out->w_gate = rows_of(&gate_up, 0, ffn);
		out->w_up = rows_of(&gate_up, ffn, ffn);
	}
}

strata_status strata__forward_biases(strata_forward *f,
				     const strata_forward_weights *w,
				     const float **bq, const float **bk,
				     const float **bv, strata_error *err)
{
	float *s = f->bias_f32;
	strata_status st;
	if ((st = strata_kernel_as_f32(f->c, &w->bq, s, bq, err)) ||
	    (st = strata_kernel_as_f32(f->c, &w->bk, s + f->q_dim, bk, err)))
		return st;
	return strata_kernel_as_f32(f->c, &w->bv, s + f->q_dim + f->kv_dim, bv,
				    err);
}

strata_status strata__forward_residual(strata_forward *f, float *y,
				       const float *x, const strata_weight *w,
				       uint32_t n, strata_error *err)
{
	const strata_kernel_product p = {y, *w, NULL};
	return strata_kernel_products(f->c, x, NULL, NULL, n, &p, 1, true,
				      f->xb, err);
}

strata_status strata__forward_mlp(strata_forward *f,
				  const strata_forward_weights *w, uint32_t n,
				  strata_error *err)
{
	const strata_kernel_norm norm = {w->ffn_norm, f->hp->norm_eps};
	strata_status st;
	if (f->hp->experts)
		return strata__forward_moe(f, w, n, err);
	if (f->hp->gelu) { /* GeGLU: the two products, then gelu(g) * u */
		const strata_kernel_product gu[] = {{f->hb, w->w_gate, NULL},
						    {f->hb2, w->w_up, NULL}};
		st = strata_kernel_products(f->c, f->x, &norm, f->xb, n, gu, 2,
					    false, NULL, err);
		if (st == STRATA_OK)
			st = strata_kernel_map(f->c, f->hb, f->hb2,
					       (uint64_t)n * f->hp->ffn,
					       STRATA_MAP_GELU_MUL, 0.0f, err);
	} else {
		st = strata_kernel_gated(f->c, f->hb, f->x, &norm, f->xb,
					 &w->w_gate, &w->w_up, f->hb2, n, err);
	}
	if (st)
		return st;
	return strata__forward_output(f, f->hb, &w->w_down, &w->ffn_post_norm,
				      n, err);
}

strata_status strata__forward_layer(strata_forward *f, uint32_t layer,
				    strata_forward_layer_fn step, void *arg,
				    strata_error *err)
{
	strata_infer_layer l;
	strata_status st = f->src->ops->acquire(f->src->user, layer, &l, err);
	if (st)
		return strata_error_prefix(err, "layer %u", layer);
	strata_forward_weights w;
	strata__forward_weights_of(f, &l, &w);
	w.layer = layer;
	st = strata__forward_norms(f, &w, err);
	if (st == STRATA_OK)
		st = step(f, &w, layer, arg, err);
	/* After a failed step the release still happens; its own error then
	 * goes to a scratch value so the first failure is the one reported. */
	strata_error scratch;
	strata_status rst = f->src->ops->release(f->src->user, layer,
						 st ? &scratch : err);
	return st ? st : rst;
}
