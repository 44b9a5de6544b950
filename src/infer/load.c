/* load.c - the plain weight source: every tensor of the model read once
 * into host memory and converted to f32, or (strata_infer_load_stored) the
 * matrices, embedding and LM head included, kept in their stored type for
 * the CPU's stored products (F16, BF16, the GGUF block types) and the rest
 * converted (layer: infer).
 *
 * For tests, tools and the CPU bench; `strata run` streams through the
 * residency engine instead. Payloads are read with the checkpoint's file
 * and offsets, already checked against the file size by the catalog.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "strata/infer.h"

struct strata_infer_loaded {
	void **bufs;	  /* one per distinct tensor */
	bool stored;	  /* matrices kept in their stored type */
	size_t count;
	strata_infer_statics statics;
	strata_infer_layer *layers; /* [layers] */
	const void **expert_ptrs;   /* [layers][3][experts], or NULL */
};

/* ------------------------------------------------------------------------ */

/* The payload of t into a new buffer of `bytes` (f32 conversion when
 * `convert`, else the stored bytes, checked for NaN and infinities). */
static strata_status read_tensor(const strata_catalog *c,
				 const strata_tensor *t, bool convert,
				 void **out, strata_error *err)
{
	uint64_t bytes = t->bytes;
	strata_status st;
	if (convert && (st = strata_infer_f32_bytes(t, &bytes, err)))
		return st;
	if (bytes > SIZE_MAX || t->bytes > SIZE_MAX)
		return strata_fail(err, STRATA_E_OVERFLOW, "use a 64-bit host",
				   "tensor '%s' does not fit in memory",
				   t->name);
	void *dst = strata_alloc_or_error((size_t)bytes, t->name, err);
	void *raw = dst;
	if (!dst)
		return STRATA_E_NOMEM;
	if (convert && t->dtype != STRATA_DTYPE_F32 &&
	    !(raw = strata_alloc_or_error((size_t)t->bytes, t->name, err))) {
		strata_free(dst);
		return STRATA_E_NOMEM;
	}
	const strata_catalog_file *f = strata_catalog_file_at(c, t->file);
	int fd = -1;
	st = strata_catalog_file_open(c, t->file, 0, &fd, err);
	if (st == STRATA_OK) {
		st = strata_pread_full(fd, raw, (size_t)t->bytes,
				       (off_t)t->offset, f->path, err);
		strata_sys.close(fd);
	}
	if (st == STRATA_OK && raw != dst)
		st = strata_dtype_to_f32(t->dtype, raw, t->elements, dst, err);
	else if (st == STRATA_OK && !convert)
		st = strata_dtype_check_finite(t->dtype, raw, t->elements, err);
	if (raw != dst)
		strata_free(raw);
	if (st) {
		if (st == STRATA_E_CKPT_VALUE || st == STRATA_E_UNSUPPORTED)
			strata_error_prefix(err, "tensor '%s'", t->name);
		strata_free(dst);
		return st;
	}
	*out = dst;
	return STRATA_OK;
}

/* Loads t (once: a tied head shares the embedding's buffer). With `elem`,
 * a matrix the CPU's stored products read stays in its type (F16, BF16,
 * the GGUF block types) and *elem says which; else it is f32. */
static strata_status load(const strata_catalog *c, strata_infer_loaded *l,
			  const strata_tensor *t, const float **out,
			  uint8_t *elem, strata_error *err)
{
	*out = NULL;
	if (elem)
		*elem = STRATA_ELEM_F32;
	if (!t)
		return STRATA_OK;
	uint8_t e = STRATA_ELEM_F32;
	bool keep = elem && t->dtype != STRATA_DTYPE_F32 &&
		    strata_infer_elem_of(t->dtype, &e);
	void *buf;
	strata_status st = read_tensor(c, t, !keep, &buf, err);
	if (st)
		return st;
	l->bufs[l->count++] = buf;
	*out = buf;
	if (keep)
		*elem = e;
	return STRATA_OK;
}

static strata_status loaded_acquire(void *user, uint32_t layer,
				    strata_infer_layer *out, strata_error *err)
{
	(void)err;
	*out = ((strata_infer_loaded *)user)->layers[layer];
	return STRATA_OK;
}

static strata_status loaded_release(void *user, uint32_t layer,
				    strata_error *err)
{
	(void)user;
	(void)layer;
	(void)err;
	return STRATA_OK;
}

static const strata_infer_source_ops loaded_ops = {
	.acquire = loaded_acquire,
	.release = loaded_release,
};

/* The slots the products read (the rest, norms and biases, stay f32). */
static bool is_matrix(int slot)
{
	switch (slot) {
	case STRATA_SLOT_WQ: case STRATA_SLOT_WK: case STRATA_SLOT_WV:
	case STRATA_SLOT_WO: case STRATA_SLOT_W_GATE: case STRATA_SLOT_W_UP:
	case STRATA_SLOT_W_DOWN: case STRATA_SLOT_ROUTER:
	case STRATA_SLOT_SH_GATE: case STRATA_SLOT_SH_UP:
	case STRATA_SLOT_SH_DOWN:
		return true;
	default:
		return false;
	}
}

static strata_status load_layer(const strata_catalog *c,
				strata_infer_loaded *l,
				const strata_tensor *const *s,
				strata_infer_layer *w, strata_error *err)
{
	const float **field[STRATA_SLOT_COUNT] = {
#define STRATA_INFER_SLOT_FIELD(name, fld, hf, gguf, opt) &w->fld,
		STRATA_INFER_SLOT_MAP(STRATA_INFER_SLOT_FIELD)
#undef STRATA_INFER_SLOT_FIELD
	};
	for (int i = 0; i < STRATA_SLOT_COUNT; i++) {
		strata_status st = load(c, l, s[i], field[i],
					l->stored && is_matrix(i) ? &w->elem[i]
								  : NULL,
					err);
		if (st)
			return st;
	}
	return STRATA_OK;
}

/* Layer i's experts: each tensor loaded (as stored with `stored`), and
 * the pointers of every expert of each kind (a stacked tensor's experts
 * one after the other, its bytes split evenly). */
static strata_status load_experts(const strata_catalog *c,
				  strata_infer_loaded *l,
				  const strata_infer_tensors *t, uint32_t i,
				  strata_infer_layer *w, strata_error *err)
{
	if (!t->experts)
		return STRATA_OK;
	w->experts = t->experts;
	for (uint32_t k = 0; k < 3; k++) {
		const void **ptrs = l->expert_ptrs +
				    ((uint64_t)i * 3 + k) * t->experts;
		w->expert[k] = ptrs;
		for (uint32_t e = 0; e < strata_infer_expert_tensors(t); e++) {
			const strata_tensor *x =
				strata_infer_expert_tensor(t, i, k, e);
			const float *data;
			strata_status st = load(c, l, x, &data,
						l->stored ? &w->expert_elem[k]
							  : NULL,
						err);
			if (st)
				return st;
			if (!t->experts_stacked) {
				ptrs[e] = data;
				continue;
			}
			bool kept = w->expert_elem[k] != STRATA_ELEM_F32 ||
				    x->dtype == STRATA_DTYPE_F32;
			uint64_t bytes = kept ? x->bytes
					      : x->elements * sizeof(float);
			for (uint32_t j = 0; j < t->experts; j++)
				ptrs[j] = (const char *)data +
					  bytes / t->experts * j;
		}
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

static strata_status load_all(const strata_catalog *c,
			      const strata_infer_tensors *t, bool stored,
			      strata_infer_loaded **out,
			      strata_infer_source *src, strata_error *err)
{
	strata_infer_loaded *l = strata_calloc_or_error(1, sizeof *l,
							"weights", err);
	if (!l)
		return STRATA_E_NOMEM;
	l->stored = stored;
	uint64_t max = 4 + (uint64_t)t->layers * STRATA_SLOT_COUNT +
		       (uint64_t)t->layers * 3 * (t->experts ? strata_infer_expert_tensors(t) : 0);
	l->bufs = strata_calloc_or_error(max, sizeof *l->bufs,
					 "weight buffers", err);
	l->layers = strata_calloc_or_error(t->layers, sizeof *l->layers,
					   "layer weights", err);
	if (t->experts)
		l->expert_ptrs = strata_calloc_or_error(
			(uint64_t)t->layers * 3 * t->experts,
			sizeof *l->expert_ptrs, "expert pointers", err);
	strata_status st = STRATA_E_NOMEM;
	if (!l->bufs || !l->layers || (t->experts && !l->expert_ptrs))
		goto fail;
	strata_infer_statics *sx = &l->statics;
	uint8_t *embed_elem = stored ? &sx->embed_elem : NULL;
	uint8_t *head_elem = stored ? &sx->lm_head_elem : NULL;
	if ((st = load(c, l, t->embed, &sx->embed, embed_elem, err)) ||
	    (st = load(c, l, t->final_norm, &sx->final_norm, NULL, err)))
		goto fail;
	if (t->lm_head == t->embed) {
		sx->lm_head = sx->embed;
		sx->lm_head_elem = sx->embed_elem;
	} else if ((st = load(c, l, t->lm_head, &sx->lm_head, head_elem,
			      err))) {
		goto fail;
	}
	if ((st = load(c, l, t->rope_freqs, &sx->rope_freqs, NULL, err)))
		goto fail;
	for (uint32_t i = 0; i < t->layers; i++)
		if ((st = load_layer(c, l, t->layer[i], &l->layers[i], err)) ||
		    (st = load_experts(c, l, t, i, &l->layers[i], err)))
			goto fail;
	src->ops = &loaded_ops;
	src->pass = NULL;
	src->user = l;
	src->statics = l->statics;
	*out = l;
	return STRATA_OK;
fail:
	strata_infer_loaded_destroy(l);
	return st;
}

strata_status strata_infer_load_all(const strata_catalog *c,
				    const strata_infer_tensors *t,
				    strata_infer_loaded **out,
				    strata_infer_source *src, strata_error *err)
{
	return load_all(c, t, false, out, src, err);
}

strata_status strata_infer_load_stored(const strata_catalog *c,
				       const strata_infer_tensors *t,
				       strata_infer_loaded **out,
				       strata_infer_source *src,
				       strata_error *err)
{
	return load_all(c, t, true, out, src, err);
}

void strata_infer_loaded_destroy(strata_infer_loaded *l)
{
	if (!l)
		return;
	for (size_t i = 0; l->bufs && i < l->count; i++)
		strata_free(l->bufs[i]);
	strata_free(l->bufs);
	strata_free(l->layers);
	strata_free(l->expert_ptrs);
	strata_free(l);
}

/* ------------------------------------------------------------------------ */

strata_dtype strata_infer_elem_dtype(uint8_t elem)
{
	switch (elem) {
#define ELEM_DTYPE(name, text) \
	case STRATA_ELEM_##name: return STRATA_DTYPE_##name;
		STRATA_INFER_ELEM_MAP(ELEM_DTYPE)
#undef ELEM_DTYPE
	default: return STRATA_DTYPE_F32;
	}
}

bool strata_infer_elem_of(strata_dtype t, uint8_t *out)
{
	switch (t) {
#define DTYPE_ELEM(name, text) \
	case STRATA_DTYPE_##name: *out = STRATA_ELEM_##name; return true;
		STRATA_INFER_ELEM_MAP(DTYPE_ELEM)
#undef DTYPE_ELEM
	default: return false;
	}
}
