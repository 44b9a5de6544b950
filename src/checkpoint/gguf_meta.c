/* gguf_meta.c - typed getters over a GGUF file's metadata, for the model
 * description and the text layer (layer: checkpoint). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "checkpoint/gguf_internal.h"

static const char *const type_names[] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
	"string", "array", "u64", "i64", "f64",
};

/* ------------------------------------------------------------------------ */

size_t strata__gguf_scalar_bytes(strata_gguf_type t)
{
	switch (t) {
	case STRATA_GGUF_U8: case STRATA_GGUF_I8: case STRATA_GGUF_BOOL:
		return 1;
	case STRATA_GGUF_U16: case STRATA_GGUF_I16:
		return 2;
	case STRATA_GGUF_U32: case STRATA_GGUF_I32: case STRATA_GGUF_F32:
		return 4;
	case STRATA_GGUF_U64: case STRATA_GGUF_I64: case STRATA_GGUF_F64:
		return 8;
	default:
		return 0;
	}
}

const char *strata__gguf_type_name(strata_gguf_type t)
{
	return (unsigned)t <= STRATA_GGUF_F64 ? type_names[t] : "unknown";
}

uint64_t strata__gguf_key_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

long strata__gguf_lookup(const strata_gguf *g, const char *key)
{
	if (!g || !g->slot_cap)
		return -1;
	size_t mask = g->slot_cap - 1;
	size_t at = strata__gguf_key_hash(key) & mask;
	while (g->slots[at]) {
		if (!strcmp(g->kv[g->slots[at] - 1].key, key))
			return (long)g->slots[at] - 1;
		at = (at + 1) & mask;
	}
	return -1;
}

static bool is_signed(strata_gguf_type t)
{
	return t == STRATA_GGUF_I8 || t == STRATA_GGUF_I16 ||
	       t == STRATA_GGUF_I32 || t == STRATA_GGUF_I64;
}

static bool is_unsigned(strata_gguf_type t)
{
	return t == STRATA_GGUF_U8 || t == STRATA_GGUF_U16 ||
	       t == STRATA_GGUF_U32 || t == STRATA_GGUF_U64;
}

static const gguf_value *get(const strata_gguf *g, const char *key,
			     strata_error *err)
{
	long i = strata__gguf_lookup(g, key);
	if (i < 0) {
		strata_fail(err, STRATA_E_NOT_FOUND,
			    "the file lacks this key; re-convert it with a current llama.cpp",
			    "GGUF metadata has no key '%s'", key);
		return NULL;
	}
	return &g->kv[i].v;
}

static strata_status wrong(const char *key, const gguf_value *v,
			   const char *want, strata_error *err)
{
	return strata_fail(err, STRATA_E_CKPT_METADATA,
			   "the file is corrupt or not the kind of model expected",
			   "GGUF metadata '%s' is %s, expected %s", key,
			   strata__gguf_type_name(v->type), want);
}

/* ------------------------------------------------------------------------ */
/* Public                                                                   */
/* ------------------------------------------------------------------------ */

uint32_t strata_gguf_version(const strata_gguf *g)
{
	return g->version;
}

long strata_gguf_find(const strata_gguf *g, const char *key)
{
	return strata__gguf_lookup(g, key);
}

uint64_t strata_gguf_kv_count(const strata_gguf *g)
{
	return g->kv_count;
}

const char *strata_gguf_kv_key(const strata_gguf *g, long kv)
{
	return g->kv[kv].key;
}

strata_gguf_type strata_gguf_kv_type(const strata_gguf *g, long kv)
{
	return g->kv[kv].v.type;
}

strata_status strata_gguf_get_u64(const strata_gguf *g, const char *key,
				  uint64_t *out, strata_error *err)
{
	const gguf_value *v = get(g, key, err);
	if (!v)
		return STRATA_E_NOT_FOUND;
	if (is_unsigned(v->type)) {
		*out = v->u;
		return STRATA_OK;
	}
	if (is_signed(v->type) && v->i >= 0) {
		*out = (uint64_t)v->i;
		return STRATA_OK;
	}
	if (is_signed(v->type))
		return strata_fail(err, STRATA_E_CKPT_METADATA,
				   "the file is corrupt",
				   "GGUF metadata '%s' is negative (%" PRId64
				   "), expected a count",
				   key, v->i);
	return wrong(key, v, "an integer", err);
}

strata_status strata_gguf_get_f64(const strata_gguf *g, const char *key,
				  double *out, strata_error *err)
{
	const gguf_value *v = get(g, key, err);
	if (!v)
		return STRATA_E_NOT_FOUND;
	if (v->type == STRATA_GGUF_F32 || v->type == STRATA_GGUF_F64)
		*out = v->f;
	else if (is_unsigned(v->type))
		*out = (double)v->u;
	else if (is_signed(v->type))
		*out = (double)v->i;
	else
		return wrong(key, v, "a number", err);
	return STRATA_OK;
}

strata_status strata_gguf_get_bool(const strata_gguf *g, const char *key,
				   bool *out, strata_error *err)
{
	const gguf_value *v = get(g, key, err);
	if (!v)
		return STRATA_E_NOT_FOUND;
	if (v->type != STRATA_GGUF_BOOL)
		return wrong(key, v, "bool", err);
	*out = v->b;
	return STRATA_OK;
}

strata_status strata_gguf_get_string(const strata_gguf *g, const char *key,
				     const char **s, size_t *len,
				     strata_error *err)
{
	const gguf_value *v = get(g, key, err);
	if (!v)
		return STRATA_E_NOT_FOUND;
	if (v->type != STRATA_GGUF_STRING)
		return wrong(key, v, "string", err);
	*s = v->str.s;
	*len = (size_t)v->str.len;
	return STRATA_OK;
}

strata_status strata_gguf_get_array(const strata_gguf *g, const char *key,
				    strata_gguf_type *elem, uint64_t *count,
				    strata_error *err)
{
	const gguf_value *v = get(g, key, err);
	if (!v)
		return STRATA_E_NOT_FOUND;
	if (v->type != STRATA_GGUF_ARRAY)
		return wrong(key, v, "array", err);
	*elem = v->arr.elem;
	*count = v->arr.count;
	return STRATA_OK;
}

/* The element accessors trust kv and i (callers got them from find and
 * get_array); a wrong element type yields an empty string or 0. */
void strata_gguf_array_string(const strata_gguf *g, long kv, uint64_t i,
			      const char **s, size_t *len)
{
	const gguf_value *v = &g->kv[kv].v;
	if (v->type != STRATA_GGUF_ARRAY || v->arr.elem != STRATA_GGUF_STRING ||
	    i >= v->arr.count) {
		*s = "";
		*len = 0;
		return;
	}
	const gguf_str *e = &((const gguf_str *)v->arr.items)[i];
	*s = e->s;
	*len = (size_t)e->len;
}

/* Truncates toward zero; NaN and out-of-range values give 0, not UB. */
static int64_t to_i64(double d)
{
	if (!(d > -9.2e18 && d < 9.2e18))
		return 0;
	return (int64_t)d;
}

/* One scalar element, widened: returns false for non-scalar arrays. */
static bool element(const gguf_value *v, uint64_t i, int64_t *iv, double *fv)
{
	size_t n = strata__gguf_scalar_bytes(v->arr.elem);
	if (v->type != STRATA_GGUF_ARRAY || !n || i >= v->arr.count)
		return false;
	const unsigned char *p = (const unsigned char *)v->arr.items + i * n;
	uint64_t u = 0;
	for (size_t k = n; k-- > 0;)
		u = u << 8 | p[k];
	switch (v->arr.elem) {
	case STRATA_GGUF_I8: *iv = (int8_t)u; break;
	case STRATA_GGUF_I16: *iv = (int16_t)u; break;
	case STRATA_GGUF_I32: *iv = (int32_t)u; break;
	case STRATA_GGUF_F32: {
		float f;
		uint32_t w = (uint32_t)u;
		memcpy(&f, &w, 4);
		*fv = f;
		*iv = to_i64(f);
		return true;
	}
	case STRATA_GGUF_F64:
		memcpy(fv, &u, 8);
		*iv = to_i64(*fv);
		return true;
	default: *iv = (int64_t)u; break;
	}
	*fv = v->arr.elem == STRATA_GGUF_U64 ? (double)u : (double)*iv;
	return true;
}

double strata_gguf_array_f64(const strata_gguf *g, long kv, uint64_t i)
{
	int64_t iv = 0;
	double fv = 0;
	return element(&g->kv[kv].v, i, &iv, &fv) ? fv : 0.0;
}

int64_t strata_gguf_array_i64(const strata_gguf *g, long kv, uint64_t i)
{
	int64_t iv = 0;
	double fv = 0;
	return element(&g->kv[kv].v, i, &iv, &fv) ? iv : 0;
}

void strata__gguf_destroy(strata_gguf *g)
{
	if (!g)
		return;
	strata_free(g->slots);
	strata__arena_fini(&g->arena);
	strata_free(g);
}
