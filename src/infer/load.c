/* load.c - the plain weight source: every tensor of the model read once and
 * converted to f32 in host memory (layer: infer).
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
	float **bufs;	  /* one per distinct tensor */
	size_t count;
	strata_infer_statics statics;
	strata_infer_layer *layers; /* [layers] */
};

/* ------------------------------------------------------------------------ */

static strata_status read_tensor(const strata_catalog *c,
				 const strata_tensor *t, float **out,
				 strata_error *err)
{
	uint64_t f32_bytes;
	strata_status st = strata_infer_f32_bytes(t, &f32_bytes, err);
	if (st)
		return st;
	if (f32_bytes > SIZE_MAX || t->bytes > SIZE_MAX)
		return strata_fail(err, STRATA_E_OVERFLOW, "use a 64-bit host",
				   "tensor '%s' does not fit in memory",
				   t->name);
	float *dst = strata_alloc_or_error((size_t)f32_bytes, t->name, err);
	void *raw = dst;
	if (!dst)
		return STRATA_E_NOMEM;
	if (t->dtype != STRATA_DTYPE_F32 &&
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
	if (raw != dst)
		strata_free(raw);
	if (st) {
		strata_free(dst);
		return st;
	}
	*out = dst;
	return STRATA_OK;
}

/* Loads t (once: a tied head shares the embedding's buffer). */
static strata_status load(const strata_catalog *c, strata_infer_loaded *l,
			  const strata_tensor *t, const float **out,
			  strata_error *err)
{
	*out = NULL;
	if (!t)
		return STRATA_OK;
	float *buf;
	strata_status st = read_tensor(c, t, &buf, err);
	if (st)
		return st;
	l->bufs[l->count++] = buf;
	*out = buf;
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
		strata_status st = load(c, l, s[i], field[i], err);
		if (st)
			return st;
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata_infer_load_all(const strata_catalog *c,
				    const strata_infer_tensors *t,
				    strata_infer_loaded **out,
				    strata_infer_source *src, strata_error *err)
{
	strata_infer_loaded *l = strata_calloc_or_error(1, sizeof *l,
							"weights", err);
	if (!l)
		return STRATA_E_NOMEM;
	uint64_t max = 4 + (uint64_t)t->layers * STRATA_SLOT_COUNT;
	l->bufs = strata_calloc_or_error(max, sizeof *l->bufs,
					 "weight buffers", err);
	l->layers = strata_calloc_or_error(t->layers, sizeof *l->layers,
					   "layer weights", err);
	strata_status st = STRATA_E_NOMEM;
	if (!l->bufs || !l->layers)
		goto fail;
	if ((st = load(c, l, t->embed, &l->statics.embed, err)) ||
	    (st = load(c, l, t->final_norm, &l->statics.final_norm, err)))
		goto fail;
	if (t->lm_head == t->embed)
		l->statics.lm_head = l->statics.embed;
	else if ((st = load(c, l, t->lm_head, &l->statics.lm_head, err)))
		goto fail;
	if ((st = load(c, l, t->rope_freqs, &l->statics.rope_freqs, err)))
		goto fail;
	for (uint32_t i = 0; i < t->layers; i++)
		if ((st = load_layer(c, l, t->layer[i], &l->layers[i], err)))
			goto fail;
	src->ops = &loaded_ops;
	src->user = l;
	src->statics = l->statics;
	*out = l;
	return STRATA_OK;
fail:
	strata_infer_loaded_destroy(l);
	return st;
}

void strata_infer_loaded_destroy(strata_infer_loaded *l)
{
	if (!l)
		return;
	for (size_t i = 0; l->bufs && i < l->count; i++)
		strata_free(l->bufs[i]);
	strata_free(l->bufs);
	strata_free(l->layers);
	strata_free(l);
}
