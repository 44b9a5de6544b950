/* gguf_write.c - the GGUF writer: metadata pairs (copied from a GGUF file
 * or set), tensor infos, and the payloads streamed into a file that
 * appears whole or not at all (layer: checkpoint).
 *
 * What it writes is GGUF v3 as ggml's gguf.cpp reads it: magic, version,
 * tensor and pair counts, the pairs, the tensor infos (name, dimensions
 * ne0 first, ggml type, offset from the data section), zero padding to
 * the alignment (general.alignment when set, else 32), then each payload
 * at its offset, padded to the alignment. */
#include <inttypes.h>
#include <string.h>

#include "checkpoint/gguf_internal.h"

#define DEFAULT_ALIGNMENT 32u

typedef struct wbuf {
	unsigned char *p;
	size_t len, cap;
	bool failed; /* an allocation failed: the buffer is unusable */
} wbuf;

typedef struct wpair {
	char *key;
	wbuf value; /* type, then the value, as GGUF serialises them */
} wpair;

typedef struct wtensor {
	char *name;
	strata_dtype dtype;
	uint32_t n_dims;
	uint64_t ne[4];
	uint64_t bytes, offset;
} wtensor;

struct strata_gguf_writer {
	wpair *pairs;
	size_t n_pairs, cap_pairs;
	wtensor *tensors;
	size_t n_tensors, cap_tensors;
};

/* ------------------------------------------------------------------------ */
/* Bytes                                                                    */
/* ------------------------------------------------------------------------ */

static void put(wbuf *b, const void *src, size_t n)
{
	if (b->failed)
		return;
	if (n > b->cap - b->len) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap - b->len < n) {
			if (cap > SIZE_MAX / 2) {
				b->failed = true;
				return;
			}
			cap *= 2;
		}
		unsigned char *p = strata_alloc(cap);
		if (!p) {
			b->failed = true;
			return;
		}
		if (b->len)
			memcpy(p, b->p, b->len);
		strata_free(b->p);
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
}

static void put_le(wbuf *b, uint64_t v, size_t bytes)
{
	unsigned char t[8];
	for (size_t i = 0; i < bytes; i++)
		t[i] = (unsigned char)(v >> (8 * i));
	put(b, t, bytes);
}

static void put_str(wbuf *b, const char *s, uint64_t len)
{
	put_le(b, len, 8);
	put(b, s, (size_t)len);
}

static void put_f32(wbuf *b, float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	put_le(b, u, 4);
}

static void put_f64(wbuf *b, double f)
{
	uint64_t u;
	memcpy(&u, &f, sizeof u);
	put_le(b, u, 8);
}

/* A value of the reader's form, without its type tag. */
static void put_value(wbuf *b, const gguf_value *v)
{
	switch (v->type) {
	case STRATA_GGUF_STRING:
		put_str(b, v->str.s, v->str.len);
		return;
	case STRATA_GGUF_F32:
		put_f32(b, (float)v->f);
		return;
	case STRATA_GGUF_F64:
		put_f64(b, v->f);
		return;
	case STRATA_GGUF_BOOL:
		put_le(b, v->b ? 1 : 0, 1);
		return;
	case STRATA_GGUF_ARRAY: {
		put_le(b, v->arr.elem, 4);
		put_le(b, v->arr.count, 8);
		size_t eb = strata__gguf_scalar_bytes(v->arr.elem);
		if (eb) { /* scalars are kept as their raw bytes */
			put(b, v->arr.items, (size_t)(v->arr.count * eb));
		} else if (v->arr.elem == STRATA_GGUF_STRING) {
			const gguf_str *s = v->arr.items;
			for (uint64_t i = 0; i < v->arr.count; i++)
				put_str(b, s[i].s, s[i].len);
		} else {
			const gguf_value *e = v->arr.items;
			for (uint64_t i = 0; i < v->arr.count; i++) {
				put_le(b, e[i].type, 4);
				put_value(b, &e[i]);
			}
		}
		return;
	}
	case STRATA_GGUF_I8: case STRATA_GGUF_I16: case STRATA_GGUF_I32:
	case STRATA_GGUF_I64:
		put_le(b, (uint64_t)v->i, strata__gguf_scalar_bytes(v->type));
		return;
	default:
		put_le(b, v->u, strata__gguf_scalar_bytes(v->type));
		return;
	}
}

/* ------------------------------------------------------------------------ */
/* Pairs and tensors                                                        */
/* ------------------------------------------------------------------------ */

static strata_status nomem(strata_error *err, const char *what)
{
	return strata_fail(err, STRATA_E_NOMEM, "free host memory",
			   "out of memory building the GGUF %s", what);
}

/* The pair named key, created (empty) when absent; NULL on E_NOMEM. */
static wpair *pair_slot(strata_gguf_writer *w, const char *key,
			strata_error *err)
{
	for (size_t i = 0; i < w->n_pairs; i++)
		if (!strcmp(w->pairs[i].key, key)) {
			w->pairs[i].value.len = 0;
			return &w->pairs[i];
		}
	if (w->n_pairs == w->cap_pairs) {
		size_t cap = w->cap_pairs ? 2 * w->cap_pairs : 32;
		wpair *p = strata_alloc(cap * sizeof *p);
		if (!p) {
			nomem(err, "metadata");
			return NULL;
		}
		if (w->n_pairs)
			memcpy(p, w->pairs, w->n_pairs * sizeof *p);
		strata_free(w->pairs);
		w->pairs = p;
		w->cap_pairs = cap;
	}
	size_t n = strlen(key);
	char *k = strata_alloc(n + 1);
	if (!k) {
		nomem(err, "metadata");
		return NULL;
	}
	memcpy(k, key, n + 1);
	wpair *p = &w->pairs[w->n_pairs++];
	memset(p, 0, sizeof *p);
	p->key = k;
	return p;
}

static strata_status pair_done(wpair *p, strata_error *err)
{
	return p->value.failed ? nomem(err, "metadata") : STRATA_OK;
}

strata_status strata_gguf_writer_create(strata_gguf_writer **out,
					strata_error *err)
{
	strata_gguf_writer *w = strata_alloc(sizeof *w);
	if (!w)
		return nomem(err, "writer");
	memset(w, 0, sizeof *w);
	*out = w;
	return STRATA_OK;
}

void strata_gguf_writer_destroy(strata_gguf_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_pairs; i++) {
		strata_free(w->pairs[i].key);
		strata_free(w->pairs[i].value.p);
	}
	for (size_t i = 0; i < w->n_tensors; i++)
		strata_free(w->tensors[i].name);
	strata_free(w->pairs);
	strata_free(w->tensors);
	strata_free(w);
}

strata_status strata_gguf_writer_copy(strata_gguf_writer *w,
				      const strata_gguf *g, long kv,
				      strata_error *err)
{
	if (kv < 0 || (uint64_t)kv >= g->kv_count)
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass a pair index",
				   "GGUF pair %ld does not exist", kv);
	wpair *p = pair_slot(w, g->kv[kv].key, err);
	if (!p)
		return STRATA_E_NOMEM;
	put_le(&p->value, g->kv[kv].v.type, 4);
	put_value(&p->value, &g->kv[kv].v);
	return pair_done(p, err);
}

strata_status strata_gguf_writer_set_uint(strata_gguf_writer *w,
					  const char *key, strata_gguf_type t,
					  uint64_t v, strata_error *err)
{
	wpair *p = pair_slot(w, key, err);
	if (!p)
		return STRATA_E_NOMEM;
	put_le(&p->value, t, 4);
	put_le(&p->value, v, strata__gguf_scalar_bytes(t));
	return pair_done(p, err);
}

strata_status strata_gguf_writer_set_f32(strata_gguf_writer *w,
					 const char *key, float v,
					 strata_error *err)
{
	wpair *p = pair_slot(w, key, err);
	if (!p)
		return STRATA_E_NOMEM;
	put_le(&p->value, STRATA_GGUF_F32, 4);
	put_f32(&p->value, v);
	return pair_done(p, err);
}

strata_status strata_gguf_writer_set_string(strata_gguf_writer *w,
					    const char *key, const char *s,
					    size_t len, strata_error *err)
{
	wpair *p = pair_slot(w, key, err);
	if (!p)
		return STRATA_E_NOMEM;
	put_le(&p->value, STRATA_GGUF_STRING, 4);
	put_str(&p->value, s, len);
	return pair_done(p, err);
}

strata_status strata_gguf_writer_set_array(strata_gguf_writer *w,
					   const char *key,
					   strata_gguf_type elem,
					   const void *items, uint64_t count,
					   strata_error *err)
{
	size_t eb = strata__gguf_scalar_bytes(elem);
	if (!eb && elem != STRATA_GGUF_STRING)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass scalars or strings",
				   "GGUF array '%s' of %s", key,
				   strata__gguf_type_name(elem));
	wpair *p = pair_slot(w, key, err);
	if (!p)
		return STRATA_E_NOMEM;
	put_le(&p->value, STRATA_GGUF_ARRAY, 4);
	put_le(&p->value, elem, 4);
	put_le(&p->value, count, 8);
	if (eb) {
		const unsigned char *s = items;
		for (uint64_t i = 0; i < count; i++) { /* host to little-endian */
			uint64_t v = 0;
			memcpy(&v, s + i * eb, eb);
			put_le(&p->value, v, eb);
		}
	} else {
		const char *const *s = items;
		for (uint64_t i = 0; i < count; i++)
			put_str(&p->value, s[i], strlen(s[i]));
	}
	return pair_done(p, err);
}

strata_status strata_gguf_writer_add_tensor(strata_gguf_writer *w,
					    const char *name, strata_dtype t,
					    uint32_t n_dims, const uint64_t *ne,
					    strata_error *err)
{
	int id = strata_dtype_ggml_id(t);
	if (id < 0 || n_dims == 0 || n_dims > 4)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "use a ggml type and 1 to 4 dimensions",
				   "GGUF tensor '%s': type %s with %u dimensions",
				   name, strata_dtype_get(t) ? strata_dtype_get(t)->name : "?",
				   n_dims);
	uint64_t elements = 1;
	strata_status s = STRATA_OK;
	for (uint32_t i = 0; i < n_dims && !s; i++)
		s = strata_checked_mul(elements, ne[i], &elements,
				       "tensor elements", err);
	uint64_t bytes;
	if (s || (s = strata_dtype_bytes(t, elements, &bytes, err)))
		return strata_error_prefix(err, "GGUF tensor '%s'", name);
	if (w->n_tensors == w->cap_tensors) {
		size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
		wtensor *p = strata_alloc(cap * sizeof *p);
		if (!p)
			return nomem(err, "tensor list");
		if (w->n_tensors)
			memcpy(p, w->tensors, w->n_tensors * sizeof *p);
		strata_free(w->tensors);
		w->tensors = p;
		w->cap_tensors = cap;
	}
	size_t n = strlen(name);
	char *copy = strata_alloc(n + 1);
	if (!copy)
		return nomem(err, "tensor list");
	memcpy(copy, name, n + 1);
	wtensor *wt = &w->tensors[w->n_tensors++];
	memset(wt, 0, sizeof *wt);
	wt->name = copy;
	wt->dtype = t;
	wt->n_dims = n_dims;
	memcpy(wt->ne, ne, n_dims * sizeof *ne);
	wt->bytes = bytes;
	return STRATA_OK;
}

size_t strata_gguf_writer_tensor_count(const strata_gguf_writer *w)
{
	return w->n_tensors;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */
/* ------------------------------------------------------------------------ */

/* general.alignment when the writer holds it as a u32 power of two. */
static uint32_t alignment_of(const strata_gguf_writer *w)
{
	for (size_t i = 0; i < w->n_pairs; i++) {
		const wpair *p = &w->pairs[i];
		if (strcmp(p->key, "general.alignment") || p->value.len != 8 ||
		    p->value.p[0] != STRATA_GGUF_U32)
			continue;
		uint32_t a = (uint32_t)p->value.p[4] | p->value.p[5] << 8 |
			     (uint32_t)p->value.p[6] << 16 |
			     (uint32_t)p->value.p[7] << 24;
		if (a && !(a & (a - 1)))
			return a;
	}
	return DEFAULT_ALIGNMENT;
}

static uint64_t pad_to(uint64_t v, uint32_t a)
{
	return (v + a - 1) / a * a;
}

/* The header: counts, pairs, tensor infos (offsets laid out here), zeros
 * up to the data section. */
static strata_status header(strata_gguf_writer *w, uint32_t align, wbuf *h,
			    strata_error *err)
{
	put(h, "GGUF", 4);
	put_le(h, 3, 4);
	put_le(h, w->n_tensors, 8);
	put_le(h, w->n_pairs, 8);
	for (size_t i = 0; i < w->n_pairs; i++) {
		put_str(h, w->pairs[i].key, strlen(w->pairs[i].key));
		put(h, w->pairs[i].value.p, w->pairs[i].value.len);
	}
	uint64_t off = 0;
	for (size_t i = 0; i < w->n_tensors; i++) {
		wtensor *t = &w->tensors[i];
		put_str(h, t->name, strlen(t->name));
		put_le(h, t->n_dims, 4);
		for (uint32_t d = 0; d < t->n_dims; d++)
			put_le(h, t->ne[d], 8);
		put_le(h, (uint64_t)strata_dtype_ggml_id(t->dtype), 4);
		t->offset = off;
		put_le(h, off, 8);
		off = pad_to(off + t->bytes, align);
	}
	static const unsigned char zeros[256];
	put(h, zeros, (size_t)(pad_to(h->len, align) - h->len));
	return h->failed ? nomem(err, "header") : STRATA_OK;
}

static strata_status write_tensors(strata_gguf_writer *w, uint32_t align,
				   strata_file_out *f, strata_gguf_fill_fn fill,
				   void *ctx, strata_error *err)
{
	uint64_t most = 0;
	for (size_t i = 0; i < w->n_tensors; i++)
		if (w->tensors[i].bytes > most)
			most = w->tensors[i].bytes;
	if (most > SIZE_MAX - align)
		return strata_fail(err, STRATA_E_OVERFLOW, "use a 64-bit build",
				   "a tensor of %" PRIu64 " bytes", most);
	unsigned char *buf = strata_alloc((size_t)most + align);
	if (!buf)
		return nomem(err, "tensor buffer");
	strata_status s = STRATA_OK;
	for (size_t i = 0; i < w->n_tensors && !s; i++) {
		const wtensor *t = &w->tensors[i];
		size_t pad = (size_t)(pad_to(t->bytes, align) - t->bytes);
		s = fill(ctx, i, buf, t->bytes, err);
		if (!s) {
			memset(buf + t->bytes, 0, pad);
			s = strata_file_out_write(f, buf, (size_t)t->bytes + pad,
						  err);
		}
	}
	strata_free(buf);
	return s;
}

strata_status strata_gguf_writer_write(strata_gguf_writer *w,
				       const char *path,
				       strata_gguf_fill_fn fill, void *ctx,
				       strata_error *err)
{
	uint32_t align = alignment_of(w);
	wbuf h = {0};
	strata_status s = header(w, align, &h, err);
	strata_file_out *f = NULL;
	if (!s)
		s = strata_file_out_open(path, &f, err);
	if (!s)
		s = strata_file_out_write(f, h.p, h.len, err);
	strata_free(h.p);
	if (!s)
		s = write_tensors(w, align, f, fill, ctx, err);
	if (s) {
		strata_file_out_abort(f);
		return s;
	}
	return strata_file_out_commit(f, err);
}
