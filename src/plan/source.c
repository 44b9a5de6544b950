/* source.c - a checkpoint catalog as sizing params: each tensor's owner by
 * the topology rule, its where-it-executes bytes, its file bytes
 * (layer: plan). Headers only: no payload byte is read. */
#include <string.h>

#include "strata/plan.h"

struct strata_plan_source {
	const strata_catalog *catalog;
	strata_plan_device device;
	strata_plan_param *params; /* [catalog count] */
	bool *excluded;		   /* [catalog count] */
	strata_plan_layout *layout;
	strata_dtype weight_dtype;
};

/* Exact device bytes of catalog tensor i (the layout puts each in its
 * STRATA_ALIGN slot); only asked for tensors not excluded. */
static strata_status tensor_bytes(void *ctx, size_t i, uint64_t *out,
				  strata_error *err)
{
	strata_plan_source *s = ctx;
	const strata_tensor *t = strata_catalog_tensor(s->catalog, i);
	strata_plan_exec e = {0};
	strata_status st = strata_plan_tensor_exec(t, s->device, &e, err);
	if (st == STRATA_OK)
		*out = e.bytes; /* exact: the layout adds the slot */
	if (st != STRATA_OK && err) {
		char shown[128];
		strata_escape(shown, sizeof shown, t->name, strlen(t->name));
		strata_error_prefix(err, "tensor '%s'", shown);
	}
	return st;
}

/* The block type tensor t computes as on device d: its own when d's
 * kernels take it as stored, else F32 (converted at load; integer types,
 * which no product reads, count as F32 too). */
static strata_block_type exec_type(const strata_tensor *t,
				   strata_plan_device d)
{
	strata_plan_exec e = {0};
	strata_error ignored;
	strata_block_type b = STRATA_BLOCK_F32;
	if (strata_plan_tensor_exec(t, d, &e, &ignored) != STRATA_OK ||
	    e.convert || !strata_dtype_block(t->dtype, &b))
		return STRATA_BLOCK_F32;
	return b;
}

static bool is_float(strata_dtype t)
{
	switch (t) {
	case STRATA_DTYPE_I64: case STRATA_DTYPE_I32: case STRATA_DTYPE_I16:
	case STRATA_DTYPE_I8: case STRATA_DTYPE_U64: case STRATA_DTYPE_U32:
	case STRATA_DTYPE_U16: case STRATA_DTYPE_U8: case STRATA_DTYPE_BOOL:
		return false;
	default:
		return true;
	}
}

/* The floating dtype with the most file bytes (ties: the lower enum). */
static strata_dtype dominant_dtype(const strata_plan_source *s, size_t n)
{
	uint64_t by[STRATA_DTYPE_COUNT] = {0};
	for (size_t i = 0; i < n; i++) {
		const strata_tensor *t = strata_catalog_tensor(s->catalog, i);
		if (!s->excluded[i] && (unsigned)t->dtype < STRATA_DTYPE_COUNT &&
		    is_float(t->dtype))
			by[t->dtype] = strata_sat_add_u64(by[t->dtype], t->bytes);
	}
	strata_dtype best = STRATA_DTYPE_F32;
	for (int d = 0; d < STRATA_DTYPE_COUNT; d++)
		if (by[d] > by[best])
			best = (strata_dtype)d;
	return best;
}

strata_status strata_plan_source_create(const strata_catalog *c,
					strata_plan_device device,
					const char *const *exclude,
					size_t n_exclude,
					strata_plan_source **out,
					strata_error *err)
{
	size_t n = strata_catalog_count(c);
	strata_plan_source *s =
		strata_calloc_or_error(1, sizeof *s, "plan source", err);
	if (!s)
		return STRATA_E_NOMEM;
	s->catalog = c;
	s->device = device;
	strata_status st = STRATA_E_NOMEM;
	s->params = strata_calloc_or_error(n ? n : 1, sizeof *s->params,
					   "plan params", err);
	s->excluded = strata_calloc_or_error(n ? n : 1, sizeof *s->excluded,
					     "plan exclusions", err);
	if (!s->params || !s->excluded)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		s->params[i].name = t->name;
		s->params[i].file_bytes = t->bytes;
		s->params[i].type = exec_type(t, device);
		s->excluded[i] =
			strata_topology_excluded(t->name, exclude, n_exclude);
		st = strata_topology_owner(t->name, &s->params[i].owner, err);
		if (st != STRATA_OK)
			goto fail;
	}
	st = strata_plan_layout_create_aligned(s->params, n, tensor_bytes, s,
					       exclude, n_exclude, STRATA_ALIGN,
					       &s->layout, err);
	if (st != STRATA_OK)
		goto fail;
	s->weight_dtype = dominant_dtype(s, n);
	*out = s;
	return STRATA_OK;
fail:
	strata_plan_source_destroy(s);
	return st;
}

void strata_plan_source_destroy(strata_plan_source *s)
{
	if (!s)
		return;
	strata_plan_layout_destroy(s->layout);
	strata_free(s->params);
	strata_free(s->excluded);
	strata_free(s);
}

const strata_plan_layout *strata_plan_source_layout(const strata_plan_source *s)
{
	return s->layout;
}

strata_dtype strata_plan_source_weight_dtype(const strata_plan_source *s)
{
	return s->weight_dtype;
}

const strata_owner *strata_plan_source_owner(const strata_plan_source *s,
					     size_t i)
{
	return &s->params[i].owner;
}

bool strata_plan_source_excluded(const strata_plan_source *s, size_t i)
{
	return s->excluded[i];
}
