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
#undef W
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
	strata_status st = strata_kernel_gated(f->c, f->hb, f->x, &norm, f->xb,
					       &w->w_gate, &w->w_up, f->hb2, n,
					       err);
	if (st)
		return st;
	return strata__forward_residual(f, f->x, f->hb, &w->w_down, n, err);
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
	st = step(f, &w, layer, arg, err);
	/* After a failed step the release still happens; its own error then
	 * goes to a scratch value so the first failure is the one reported. */
	strata_error scratch;
	strata_status rst = f->src->ops->release(f->src->user, layer,
						 st ? &scratch : err);
	return st ? st : rst;
}
