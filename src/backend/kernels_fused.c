/* kernels_fused.c - the wrappers over the kernel table's optional fused
 * slots and their default compositions of plain kernels: a weight as f32,
 * products sharing their input (a norm folded in), the MLP's gate, rope on
 * queries and keys (layer: backend).
 *
 * Each wrapper asks the table first (products_take, gated_take) and runs
 * the fused slot when it says yes. Otherwise the norm, where one is given,
 * runs on its own into the caller's buffer, and the fused slot is asked
 * again without it; failing that, the plain kernels run one after the
 * other. So a backend fuses exactly what it can and the caller writes each
 * step once for every backend. A mixture-of-experts layer's routed
 * experts go to the table's experts slot, or one expert at a time.
 */
#include "strata/backend.h"
#include "strata/backend_kernels.h"

static strata_status bad(strata_error *err, const char *kernel,
			 const char *what)
{
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller of the kernel",
			   "%s kernel: %s", kernel, what);
}

/* Runs the norm into `normed` unless the fused slot takes it (*fused says
 * whether it takes the call without the norm); *x and *norm are what the
 * fused slot or the plain kernels then read. */
static strata_status unfold_norm(strata_compute *c, bool fused,
				 bool takes_norm, const float **x,
				 const strata_kernel_norm **norm,
				 float *normed, uint32_t n, const char *kernel,
				 strata_error *err)
{
	if (!*norm || (fused && takes_norm))
		return STRATA_OK;
	if (!normed)
		return bad(err, kernel, "a norm without its output buffer");
	strata_status st = strata_kernel_rmsnorm(c, normed, *x, &(*norm)->w, n,
						 (*norm)->eps, err);
	*x = normed;
	*norm = NULL;
	return st;
}

/* A hit's weight: data, the shape wanted, a type the table takes. */
static strata_status expert_weight(const strata_compute *c,
				   const strata_weight *w, uint32_t rows,
				   uint32_t cols, uint32_t hit,
				   strata_error *err)
{
	if (!w->data || w->rows != rows || w->cols != cols)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller of the kernel",
				   "experts kernel: hit %u: a NULL weight or one "
				   "of %u x %u where the first hit's is %u x %u",
				   hit, w->rows, w->cols, rows, cols);
	if ((unsigned)w->type >= STRATA_WEIGHT_TYPE_COUNT ||
	    !(c->ops->weight_types & STRATA_WEIGHT_BIT(w->type)))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "run the model on a backend that computes "
				   "on this type, or convert it to f32",
				   "experts kernel: the %s kernels take no %s "
				   "weights",
				   c->ops->name, strata_weight_type_name(w->type));
	return STRATA_OK;
}

/* Every hit against the first's shapes (ffn, dim) and x's n rows. */
static strata_status check_experts(const strata_compute *c, uint32_t n,
				   const strata_kernel_expert *e,
				   uint32_t count, strata_error *err)
{
	const uint32_t ffn = e[0].gate.rows, dim = e[0].gate.cols;
	if (!ffn || !dim)
		return bad(err, "experts", "zero weight dimension");
	for (uint32_t i = 0; i < count; i++) {
		const strata_kernel_expert *h = &e[i];
		strata_status st = expert_weight(c, &h->gate, ffn, dim, i, err);
		if (st == STRATA_OK)
			st = expert_weight(c, &h->up, ffn, dim, i, err);
		if (st == STRATA_OK)
			st = expert_weight(c, &h->down, dim, ffn, i, err);
		if (st)
			return st;
		if (h->m && (!h->rows || !h->weight || h->m > n))
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "this is a bug in the caller of the kernel",
					   "experts kernel: hit %u: %u rows of "
					   "x's %u, or no rows or weights",
					   i, h->m, n);
		for (uint32_t j = 0; j < h->m; j++)
			if (h->rows[j] < 0 || (uint32_t)h->rows[j] >= n ||
			    (j && h->rows[j] <= h->rows[j - 1]))
				return strata_fail(err, STRATA_E_INVALID_ARG,
						   "give each hit rows of x, increasing",
						   "experts kernel: hit %u: row %d "
						   "at %u is outside x's %u rows or "
						   "not above the one before",
						   i, h->rows[j], j, n);
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata_kernel_as_f32(strata_compute *c, const strata_weight *w,
				   float *scratch, const float **out,
				   strata_error *err)
{
	if (!c || !w || !out)
		return bad(err, "as_f32", "NULL argument");
	*out = w->data;
	if (!w->data || w->type == STRATA_WEIGHT_F32)
		return STRATA_OK;
	*out = scratch;
	if (!scratch || !w->rows || !w->cols)
		return bad(err, "as_f32", "no scratch, or a zero dimension");
	if ((unsigned)w->type >= STRATA_WEIGHT_TYPE_COUNT ||
	    !(c->ops->weight_types & STRATA_WEIGHT_BIT(w->type)) ||
	    !c->ops->to_f32)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "run the model on a backend that computes "
				   "on this type, or convert it to f32",
				   "as_f32 kernel: the %s kernels cannot "
				   "convert %s weights",
				   c->ops->name, strata_weight_type_name(w->type));
	return c->ops->to_f32(c->ctx, scratch, w, err);
}

strata_status strata_kernel_products(strata_compute *c, const float *x,
				     const strata_kernel_norm *norm,
				     float *normed, uint32_t n,
				     const strata_kernel_product *p,
				     uint32_t count, bool accumulate,
				     float *scratch, strata_error *err)
{
	if (!c || !x || !p || !count || count > STRATA_KERNEL_PRODUCTS_MAX)
		return bad(err, "products", "NULL buffer or a bad count");
	for (uint32_t i = 0; i < count; i++)
		if (!p[i].y || (const float *)p[i].y == x ||
		    p[i].w.cols != p[0].w.cols)
			return bad(err, "products",
				   "NULL or aliased output, or unequal inputs");
	const strata_kernel_ops *k = c->ops;
	bool fused = k->products && k->products_take(c->ctx, NULL, n, p, count);
	bool takes_norm = fused && norm &&
			  k->products_take(c->ctx, norm, n, p, count);
	strata_status st = unfold_norm(c, fused, takes_norm, &x, &norm, normed,
				       n, "products", err);
	if (st)
		return st;
	if (fused)
		return k->products(c->ctx, x, norm, n, p, count, accumulate,
				   err);
	if (accumulate && !scratch)
		return bad(err, "products", "accumulate without scratch");
	for (uint32_t i = 0; st == STRATA_OK && i < count; i++) {
		if (!accumulate) {
			st = strata_kernel_matmul(c, p[i].y, x, &p[i].w,
						  p[i].bias, n, err);
			continue;
		}
		st = strata_kernel_matmul(c, scratch, x, &p[i].w, p[i].bias, n,
					  err);
		if (st == STRATA_OK)
			st = strata_kernel_add(c, p[i].y, scratch,
					       (uint64_t)n * p[i].w.rows, err);
	}
	return st;
}

strata_status strata_kernel_gated(strata_compute *c, float *y, const float *x,
				  const strata_kernel_norm *norm,
				  float *normed, const strata_weight *gate,
				  const strata_weight *up, float *up_out,
				  uint32_t n, strata_error *err)
{
	if (!c || !y || !x || !gate || !up || y == x ||
	    gate->rows != up->rows || gate->cols != up->cols)
		return bad(err, "gated", "NULL, aliased or unequal arguments");
	const strata_kernel_ops *k = c->ops;
	bool fused = k->gated && k->gated_take(c->ctx, NULL, n, gate, up);
	if (fused) {
		bool takes_norm = norm && k->gated_take(c->ctx, norm, n, gate, up);
		strata_status st = unfold_norm(c, fused, takes_norm, &x, &norm,
					       normed, n, "gated", err);
		return st ? st : k->gated(c->ctx, y, x, norm, gate, up, n, err);
	}
	if (!up_out)
		return bad(err, "gated", "no buffer for the up product");
	/* the two products take the norm where their slot can fold it (CUDA
	 * prefill: the norm writes the products' input) */
	const strata_kernel_product p[] = {{y, *gate, NULL},
					   {up_out, *up, NULL}};
	strata_status st = strata_kernel_products(c, x, norm, normed, n, p, 2,
						  false, NULL, err);
	if (st == STRATA_OK)
		st = strata_kernel_swiglu(c, y, up_out,
					  (uint64_t)n * gate->rows, err);
	return st;
}

strata_status strata_kernel_rope_qk(strata_compute *c, float *q, float *k,
				    uint32_t n, uint32_t pos0, uint32_t heads,
				    uint32_t kv_heads, uint32_t head_dim,
				    const float *inv_freq,
				    strata_rope_layout layout,
				    strata_error *err)
{
	if (!c || !q || !k || !inv_freq)
		return bad(err, "rope", "NULL buffer");
	if (!n || !heads || !kv_heads || !head_dim || head_dim % 2)
		return bad(err, "rope", "zero dimension or odd head size");
	if (layout != STRATA_ROPE_HALF && layout != STRATA_ROPE_INTERLEAVED)
		return bad(err, "rope", "unknown layout");
	if ((uint64_t)pos0 + n > UINT32_MAX)
		return bad(err, "rope", "position past 2^32");
	if (c->ops->rope_qk)
		return c->ops->rope_qk(c->ctx, q, k, n, pos0, heads, kv_heads,
				       head_dim, inv_freq, layout, err);
	strata_status st = strata_kernel_rope(c, q, n, pos0, heads, head_dim,
					      inv_freq, layout, err);
	if (st == STRATA_OK)
		st = strata_kernel_rope(c, k, n, pos0, kv_heads, head_dim,
					inv_freq, layout, err);
	return st;
}

strata_status strata_kernel_experts(strata_compute *c, float *y,
				    const float *x, uint32_t n,
				    const strata_kernel_expert *e,
				    uint32_t count,
				    const strata_kernel_experts_scratch *s,
				    strata_error *err)
{
	if (!c || !y || !x || (const float *)y == x || !n || (count && !e))
		return bad(err, "experts", "NULL, aliased or empty buffers");
	if (!count)
		return STRATA_OK;
	strata_status st = check_experts(c, n, e, count, err);
	if (st)
		return st;
	const strata_kernel_ops *k = c->ops;
	if (k->experts && k->experts_take(c->ctx, n, e, count))
		return k->experts(c->ctx, y, x, n, e, count, err);
	if (!s || !s->in || !s->h || !s->h2 || !s->out)
		return bad(err, "experts", "no buffers for one expert at a time");
	/* one expert at a time, as forward_moe.c ran them before the slot */
	const uint32_t dim = e[0].gate.cols;
	const strata_weight rows = strata_weight_f32(x, n, dim);
	for (uint32_t i = 0; st == STRATA_OK && i < count; i++) {
		const strata_kernel_expert *h = &e[i];
		if (!h->m)
			continue;
		st = strata_kernel_embed(c, s->in, &rows, h->rows, h->m, err);
		if (st == STRATA_OK)
			st = strata_kernel_gated(c, s->h, s->in, NULL, NULL,
						 &h->gate, &h->up, s->h2, h->m,
						 err);
		if (st == STRATA_OK)
			st = strata_kernel_matmul(c, s->out, s->h, &h->down,
						  NULL, h->m, err);
		if (st == STRATA_OK)
			st = strata_kernel_scatter_add(c, y, n, s->out, h->rows,
						       h->weight, h->m, dim,
						       err);
	}
	return st;
}
