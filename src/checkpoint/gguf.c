/* gguf.c - the GGUF reader: header, every metadata value type (nested arrays
 * included), tensor infos, alignment and data offset, into the catalog
 * (layer: checkpoint).
 *
 * Trust: the file is hostile. Every count and length is checked against the
 * bytes left in the file before anything proportional to it is allocated,
 * so memory stays bounded by a small multiple of the file size. Only the
 * header is read: its end is known only once parsed, so reads go through a
 * read-ahead window of a quarter of what was read so far (4 KiB to 256 KiB);
 * the bytes it fetches past the header's end, at most max(4 KiB, header/4),
 * are never interpreted.
 * Versions 2 and 3, little-endian only.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/gguf_internal.h"
#include "checkpoint/readers.h"

#define READ_AHEAD_BYTES (256u * 1024u)
#define FIRST_WINDOW_BYTES 4096u
#define MAX_KEY_BYTES 65535u	/* GGUF spec: keys are at most 2^16 - 1 */
#define MAX_ARRAY_DEPTH 8	/* nested arrays; real files use 1 */
#define MAX_DIMS 4		/* GGML_MAX_DIMS */
#define DEFAULT_ALIGNMENT 32u

/* A cursor over the file, from memory or through buffered pread. */
typedef struct reader {
	const unsigned char *mem; /* whole file in memory, or NULL */
	int fd;
	uint64_t size, pos;	  /* file size; next byte to read */
	unsigned char *buf;	  /* read-ahead window (fd mode) */
	uint64_t buf_start;
	size_t buf_len;
	const char *name;
	char ctx[160];		  /* what is being read, for messages */
	strata_error *err;
	strata_gguf *g;
	strata_catalog *c;
} reader;

/* ------------------------------------------------------------------------ */
/* Reading                                                                  */
/* ------------------------------------------------------------------------ */

static strata_status truncated(reader *r, uint64_t need)
{
	return strata_fail(r->err, STRATA_E_CKPT_TRUNCATED,
			   "the file is truncated or corrupt; re-download it",
			   "'%s': file ends inside %s (needs %" PRIu64
			   " bytes at offset %" PRIu64 ", file is %" PRIu64
			   " bytes)",
			   r->name, r->ctx, need, r->pos, r->size);
}

static strata_status rd(reader *r, void *dst, uint64_t n)
{
	if (n > r->size - r->pos)
		return truncated(r, n);
	unsigned char *d = dst;
	if (r->mem) {
		memcpy(d, r->mem + r->pos, (size_t)n);
		r->pos += n;
		return STRATA_OK;
	}
	while (n) {
		if (r->pos >= r->buf_start &&
		    r->pos < r->buf_start + r->buf_len) {
			size_t off = (size_t)(r->pos - r->buf_start);
			size_t k = r->buf_len - off;
			if (k > n)
				k = (size_t)n;
			memcpy(d, r->buf + off, k);
			d += k, n -= k, r->pos += k;
			continue;
		}
		if (n >= READ_AHEAD_BYTES) { /* big string: straight in */
			strata_status s = strata_pread_full(
				r->fd, d, (size_t)n, (off_t)r->pos, r->name,
				r->err);
			if (s)
				return s;
			r->pos += n;
			return STRATA_OK;
		}
		uint64_t window = r->pos / 4;
		if (window < FIRST_WINDOW_BYTES)
			window = FIRST_WINDOW_BYTES;
		if (window > READ_AHEAD_BYTES)
			window = READ_AHEAD_BYTES;
		uint64_t want = r->size - r->pos;
		if (want > window)
			want = window;
		if (want < n)
			want = n;
		r->buf_len = 0;
		strata_status s = strata_pread_full(r->fd, r->buf, (size_t)want,
						    (off_t)r->pos, r->name,
						    r->err);
		if (s)
			return s;
		r->buf_start = r->pos;
		r->buf_len = (size_t)want;
	}
	return STRATA_OK;
}

static strata_status rd_u32(reader *r, uint32_t *v)
{
	unsigned char b[4];
	strata_status s = rd(r, b, 4);
	if (!s)
		*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
		     (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return s;
}

static strata_status rd_u64(reader *r, uint64_t *v)
{
	unsigned char b[8];
	strata_status s = rd(r, b, 8);
	if (s)
		return s;
	uint64_t x = 0;
	for (int i = 7; i >= 0; i--)
		x = x << 8 | b[i];
	*v = x;
	return STRATA_OK;
}

static uint64_t left(const reader *r)
{
	return r->size - r->pos;
}

static strata_status nomem(reader *r)
{
	return strata_fail(r->err, STRATA_E_NOMEM, "free some memory",
			   "'%s': out of memory reading %s", r->name, r->ctx);
}

/* A string's length, checked against the bytes left before allocating. */
static strata_status rd_str(reader *r, uint64_t max, gguf_str *out)
{
	uint64_t len;
	strata_status s = rd_u64(r, &len);
	if (s)
		return s;
	if (len > left(r))
		return strata_fail(r->err, STRATA_E_CKPT_TRUNCATED,
				   "the file is truncated or corrupt; re-download it",
				   "'%s': %s claims a %" PRIu64
				   "-byte string but only %" PRIu64 " bytes are left",
				   r->name, r->ctx, len, left(r));
	if (len > max)
		return strata_fail(r->err, STRATA_E_CKPT_LIMIT,
				   "the file is corrupt; re-download it",
				   "'%s': %s is %" PRIu64 " bytes long, over the %" PRIu64
				   "-byte limit",
				   r->name, r->ctx, len, max);
	char *p = strata__arena_alloc(&r->g->arena, (size_t)len + 1);
	if (!p)
		return nomem(r);
	s = rd(r, p, len);
	if (s)
		return s;
	p[len] = '\0';
	out->s = p;
	out->len = len;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Metadata values                                                          */
/* ------------------------------------------------------------------------ */

static strata_status rd_value(reader *r, strata_gguf_type t, int depth,
			      gguf_value *v);

static strata_status bad_type(reader *r, uint32_t t)
{
	return strata_fail(r->err, STRATA_E_CKPT_METADATA,
			   "the file is corrupt or from a newer GGUF version",
			   "'%s': %s has unknown value type %" PRIu32, r->name,
			   r->ctx, t);
}

static strata_status rd_scalar(reader *r, strata_gguf_type t, gguf_value *v)
{
	unsigned char b[8] = {0};
	size_t n = strata__gguf_scalar_bytes(t);
	strata_status s = rd(r, b, n);
	if (s)
		return s;
	uint64_t u = 0;
	for (size_t i = n; i-- > 0;)
		u = u << 8 | b[i];
	switch (t) {
	case STRATA_GGUF_I8: v->i = (int8_t)u; break;
	case STRATA_GGUF_I16: v->i = (int16_t)u; break;
	case STRATA_GGUF_I32: v->i = (int32_t)u; break;
	case STRATA_GGUF_I64: v->i = (int64_t)u; break;
	case STRATA_GGUF_F32: {
		float f;
		uint32_t w = (uint32_t)u;
		memcpy(&f, &w, 4);
		v->f = f;
		break;
	}
	case STRATA_GGUF_F64: memcpy(&v->f, &u, 8); break;
	case STRATA_GGUF_BOOL:
		if (u > 1)
			return strata_fail(r->err, STRATA_E_CKPT_METADATA,
					   "the file is corrupt; re-download it",
					   "'%s': %s is a bool with value %" PRIu64
					   " (must be 0 or 1)",
					   r->name, r->ctx, u);
		v->b = u == 1;
		break;
	default: v->u = u; break;
	}
	return STRATA_OK;
}

static strata_status rd_array(reader *r, int depth, gguf_value *v)
{
	uint32_t et;
	uint64_t count;
	strata_status s = rd_u32(r, &et);
	if (!s)
		s = rd_u64(r, &count);
	if (s)
		return s;
	if (et > STRATA_GGUF_F64)
		return bad_type(r, et);
	if (et == STRATA_GGUF_ARRAY && depth >= MAX_ARRAY_DEPTH)
		return strata_fail(r->err, STRATA_E_CKPT_LIMIT,
				   "the file is corrupt; re-download it",
				   "'%s': %s nests arrays deeper than %d",
				   r->name, r->ctx, MAX_ARRAY_DEPTH);
	/* the smallest encoding of one element bounds the count */
	size_t esz = strata__gguf_scalar_bytes((strata_gguf_type)et);
	uint64_t min = esz ? esz : et == STRATA_GGUF_STRING ? 8 : 12;
	if (count > left(r) / min)
		return strata_fail(r->err, STRATA_E_CKPT_LIMIT,
				   "the file is truncated or corrupt; re-download it",
				   "'%s': %s claims %" PRIu64 " %s elements but only %" PRIu64
				   " bytes are left",
				   r->name, r->ctx, count,
				   strata__gguf_type_name((strata_gguf_type)et),
				   left(r));
	v->arr.elem = (strata_gguf_type)et;
	v->arr.count = count;
	size_t item = esz ? esz
		      : et == STRATA_GGUF_STRING ? sizeof(gguf_str)
						 : sizeof(gguf_value);
	/* count * item <= 2 * file bytes: the check above bounds it */
	v->arr.items = strata__arena_alloc(&r->g->arena, (size_t)(count * item));
	if (!v->arr.items)
		return nomem(r);
	if (esz) {
		s = rd(r, v->arr.items, count * esz);
		if (!s && et == STRATA_GGUF_BOOL)
			for (uint64_t i = 0; i < count; i++)
				if (((unsigned char *)v->arr.items)[i] > 1)
					return strata_fail(
						r->err, STRATA_E_CKPT_METADATA,
						"the file is corrupt; re-download it",
						"'%s': %s element %" PRIu64
						" is a bool that is neither 0 nor 1",
						r->name, r->ctx, i);
		return s;
	}
	for (uint64_t i = 0; i < count && !s; i++) {
		if (et == STRATA_GGUF_STRING)
			s = rd_str(r, UINT64_MAX, &((gguf_str *)v->arr.items)[i]);
		else
			s = rd_value(r, STRATA_GGUF_ARRAY, depth + 1,
				     &((gguf_value *)v->arr.items)[i]);
	}
	return s;
}

static strata_status rd_value(reader *r, strata_gguf_type t, int depth,
			      gguf_value *v)
{
	v->type = t;
	if (t == STRATA_GGUF_STRING)
		return rd_str(r, UINT64_MAX, &v->str);
	if (t == STRATA_GGUF_ARRAY)
		return rd_array(r, depth, v);
	if (!strata__gguf_scalar_bytes(t))
		return bad_type(r, (uint32_t)t);
	return rd_scalar(r, t, v);
}

/* ------------------------------------------------------------------------ */
/* Header and key-value pairs                                               */
/* ------------------------------------------------------------------------ */

static strata_status rd_header(reader *r, uint64_t *n_tensors, uint64_t *n_kv)
{
	unsigned char magic[4];
	uint32_t version;
	snprintf(r->ctx, sizeof r->ctx, "the magic number");
	strata_status s = rd(r, magic, 4);
	if (s)
		return s;
	if (memcmp(magic, "GGUF", 4))
		return strata_fail(r->err, STRATA_E_CKPT_FORMAT,
				   "give a GGUF file (it starts with the bytes 'GGUF')",
				   "'%s' is not a GGUF file (bad magic)", r->name);
	snprintf(r->ctx, sizeof r->ctx, "the header");
	if ((s = rd_u32(r, &version)))
		return s;
	uint32_t swapped = __builtin_bswap32(version);
	if ((version & 0xffff) == 0 && swapped >= 1 && swapped <= 3)
		return strata_fail(r->err, STRATA_E_CKPT_VERSION,
				   "convert it to little-endian (llama.cpp gguf-py: gguf-convert-endian.py --order little)",
				   "'%s' is a big-endian GGUF v%" PRIu32
				   " file; strata reads little-endian GGUF only",
				   r->name, swapped);
	if (version < 2 || version > 3)
		return strata_fail(r->err, STRATA_E_CKPT_VERSION,
				   version == 1 ? "re-convert the model with a current llama.cpp (GGUF v3)"
						: "the file is corrupt or from a newer GGUF; strata reads v2 and v3",
				   "'%s' is GGUF version %" PRIu32
				   "; strata reads versions 2 and 3",
				   r->name, version);
	r->g->version = version;
	if ((s = rd_u64(r, n_tensors)) || (s = rd_u64(r, n_kv)))
		return s;
	/* smallest pair: 8 (key len) + 1 + 4 + 1 bytes; the tensor count is
	 * checked once the metadata is read (check_tensor_count) */
	if (*n_kv > left(r) / 14)
		return strata_fail(r->err, STRATA_E_CKPT_LIMIT,
				   "the file is truncated or corrupt; re-download it",
				   "'%s' claims %" PRIu64 " metadata pairs but only %" PRIu64
				   " bytes are left",
				   r->name, *n_kv, left(r));
	return STRATA_OK;
}

static strata_status check_key(reader *r, const gguf_str *k, uint64_t i)
{
	char shown[96];
	if (k->len == 0 || !strata__utf8_valid(k->s, (size_t)k->len))
		return strata_fail(r->err, STRATA_E_CKPT_NAME,
				   "the file is corrupt; re-download it",
				   "'%s': metadata key %" PRIu64
				   " '%s' is empty or not valid UTF-8",
				   r->name, i,
				   strata_escape(shown, sizeof shown, k->s,
						 (size_t)k->len));
	if (strata__gguf_lookup(r->g, k->s) >= 0)
		return strata_fail(r->err, STRATA_E_CKPT_METADATA,
				   "each metadata key must appear once; the file is corrupt",
				   "'%s': metadata key '%s' appears twice", r->name,
				   strata_escape(shown, sizeof shown, k->s,
						 (size_t)k->len));
	return STRATA_OK;
}

static void index_key(strata_gguf *g, uint64_t i)
{
	size_t mask = g->slot_cap - 1;
	size_t at = strata__gguf_key_hash(g->kv[i].key) & mask;
	while (g->slots[at])
		at = (at + 1) & mask;
	g->slots[at] = (uint32_t)(i + 1);
}

static strata_status rd_alignment(reader *r, const gguf_kv *kv)
{
	if (kv->v.type != STRATA_GGUF_U32)
		return strata_fail(r->err, STRATA_E_CKPT_ALIGNMENT,
				   "general.alignment must be a uint32; the file is corrupt",
				   "'%s': general.alignment has type %s, not u32",
				   r->name, strata__gguf_type_name(kv->v.type));
	uint64_t a = kv->v.u;
	if (a == 0 || (a & (a - 1)))
		return strata_fail(r->err, STRATA_E_CKPT_ALIGNMENT,
				   "general.alignment must be a power of two; the file is corrupt",
				   "'%s': general.alignment is %" PRIu64
				   ", not a power of two",
				   r->name, a);
	r->g->alignment = (uint32_t)a;
	return STRATA_OK;
}

static strata_status rd_kvs(reader *r, uint64_t n_kv)
{
	strata_gguf *g = r->g;
	g->kv = strata__arena_alloc(&g->arena, (size_t)(n_kv * sizeof *g->kv));
	size_t cap = 16;
	while (cap < 2 * n_kv)
		cap *= 2;
	g->slots = strata_calloc(cap, sizeof *g->slots);
	if (!g->kv || !g->slots)
		return nomem(r);
	g->slot_cap = cap;
	for (uint64_t i = 0; i < n_kv; i++) {
		gguf_str k;
		uint32_t t;
		snprintf(r->ctx, sizeof r->ctx, "the key of metadata pair %" PRIu64, i);
		strata_status s = rd_str(r, MAX_KEY_BYTES, &k);
		if (!s)
			s = check_key(r, &k, i);
		if (s)
			return s;
		char shown[96];
		strata_escape(shown, sizeof shown, k.s, (size_t)k.len);
		snprintf(r->ctx, sizeof r->ctx, "metadata value '%s'", shown);
		if ((s = rd_u32(r, &t)))
			return s;
		if (t > STRATA_GGUF_F64)
			return bad_type(r, t);
		g->kv[i].key = k.s;
		if ((s = rd_value(r, (strata_gguf_type)t, 0, &g->kv[i].v)))
			return s;
		g->kv_count = i + 1;
		index_key(g, i);
		if (!strcmp(k.s, "general.alignment") &&
		    (s = rd_alignment(r, &g->kv[i])))
			return s;
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Tensor infos                                                             */
/* ------------------------------------------------------------------------ */

static strata_status rd_tensor_shape(reader *r, const char *name,
				     strata_tensor *t)
{
	uint32_t n_dims;
	strata_status s = rd_u32(r, &n_dims);
	if (s)
		return s;
	if (n_dims == 0 || n_dims > MAX_DIMS)
		return strata_fail(r->err, STRATA_E_CKPT_SHAPE,
				   "the file is corrupt; re-download it",
				   "'%s': tensor '%s' has %" PRIu32
				   " dimensions (GGUF allows 1 to %d)",
				   r->name, name, n_dims, MAX_DIMS);
	t->n_dims = n_dims;
	uint64_t elements = 1;
	for (uint32_t d = 0; d < n_dims; d++) {
		if ((s = rd_u64(r, &t->shape[d])))
			return s;
		if (t->shape[d] == 0 || t->shape[d] > INT64_MAX)
			return strata_fail(r->err, STRATA_E_CKPT_SHAPE,
					   "the file is corrupt; re-download it",
					   "'%s': tensor '%s' dimension %" PRIu32 " is %" PRIu64
					   " (must be 1 to 2^63-1)",
					   r->name, name, d, t->shape[d]);
		if (!strata_mul_u64(elements, t->shape[d], &elements) ||
		    elements > INT64_MAX)
			return strata_fail(r->err, STRATA_E_OVERFLOW,
					   "the file is corrupt; re-download it",
					   "'%s': the element count of tensor '%s' overflows",
					   r->name, name);
	}
	t->elements = elements;
	return STRATA_OK;
}

static strata_status rd_tensor_type(reader *r, const char *name,
				    strata_tensor *t)
{
	uint32_t type;
	strata_status s = rd_u32(r, &type);
	if (s)
		return s;
	if (!strata_dtype_from_ggml(type, &t->dtype))
		return strata_fail(r->err, STRATA_E_CKPT_DTYPE,
				   "the file is corrupt or uses a ggml type strata does not know",
				   "'%s': tensor '%s' has unknown ggml type %" PRIu32,
				   r->name, name, type);
	const strata_dtype_info *d = strata_dtype_get(t->dtype);
	if (t->shape[0] % d->block_elements)
		return strata_fail(r->err, STRATA_E_CKPT_SHAPE,
				   "the file is corrupt; re-download it",
				   "'%s': tensor '%s' row of %" PRIu64
				   " elements is not a whole number of %s blocks (%" PRIu32 ")",
				   r->name, name, t->shape[0], d->name,
				   d->block_elements);
	return strata_dtype_bytes(t->dtype, t->elements, &t->bytes, r->err);
}

static strata_status rd_tensor_info(reader *r, uint64_t i, uint32_t file)
{
	gguf_str name;
	char shown[96];
	snprintf(r->ctx, sizeof r->ctx, "the name of tensor info %" PRIu64, i);
	strata_status s = rd_str(r, STRATA__MAX_NAME_BYTES, &name);
	if (s)
		return s;
	strata_escape(shown, sizeof shown, name.s, (size_t)name.len);
	if (!name.len || !strata__utf8_valid(name.s, (size_t)name.len))
		return strata_fail(r->err, STRATA_E_CKPT_NAME,
				   "the file is corrupt; re-download it",
				   "'%s': tensor %" PRIu64
				   " name '%s' is empty or not valid UTF-8",
				   r->name, i, shown);
	snprintf(r->ctx, sizeof r->ctx, "the info of tensor '%s'", shown);
	strata_tensor t = {.name = name.s, .file = file};
	if ((s = rd_tensor_shape(r, shown, &t)) ||
	    (s = rd_tensor_type(r, shown, &t)) || (s = rd_u64(r, &t.offset)))
		return s;
	if (t.offset % r->g->alignment)
		return strata_fail(r->err, STRATA_E_CKPT_ALIGNMENT,
				   "the file is corrupt; re-download it",
				   "'%s': tensor '%s' offset %" PRIu64
				   " is not a multiple of the alignment %" PRIu32,
				   r->name, shown, t.offset, r->g->alignment);
	if (t.offset > r->size || t.bytes > r->size - t.offset)
		return strata_fail(r->err, STRATA_E_CKPT_RANGE,
				   "the file is truncated or corrupt; re-download it",
				   "'%s': tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64
				   ") cannot fit in a %" PRIu64 "-byte file",
				   r->name, shown, t.bytes, t.offset, r->size);
	return strata__catalog_add_tensor(r->c, &t, r->err);
}

/* Infos hold offsets relative to the data section, whose start is known
 * only after the last info: shift them once it is. */
static strata_status place_data(reader *r, uint32_t file)
{
	uint64_t a = r->g->alignment, off;
	if (!strata_add_u64(r->pos, a - 1, &off))
		return strata_fail(r->err, STRATA_E_OVERFLOW, "the file is corrupt",
				   "'%s': data offset overflows", r->name);
	off -= off % a;
	r->g->data_offset = off;
	r->c->files[file].data_offset = off;
	for (size_t i = 0; i < r->c->count; i++) {
		strata_tensor *t = &r->c->tensors[i];
		if (!strata_add_u64(t->offset, off, &t->offset))
			return strata_fail(r->err, STRATA_E_CKPT_RANGE,
					   "the file is corrupt",
					   "'%s': tensor offset overflows", r->name);
	}
	return strata__catalog_check_ranges(r->c, file, 0, false, r->err);
}

/* Smallest tensor info: 8 (name length) + 1 + 4 + 8 + 4 + 8 bytes. */
static strata_status check_tensor_count(reader *r, uint64_t n)
{
	if (n > left(r) / 33)
		return strata_fail(r->err, STRATA_E_CKPT_LIMIT,
				   "the file is truncated or corrupt; re-download it",
				   "'%s' claims %" PRIu64 " tensors but only %" PRIu64
				   " bytes are left for their infos",
				   r->name, n, left(r));
	return STRATA_OK;
}

static strata_status read_all(reader *r)
{
	strata_gguf *g = strata_calloc(1, sizeof *g);
	if (!g)
		return nomem(r);
	g->alignment = DEFAULT_ALIGNMENT;
	r->c->gguf = g;
	r->g = g;
	uint64_t n_tensors = 0, n_kv = 0;
	uint32_t file = 0;
	strata_status s = rd_header(r, &n_tensors, &n_kv);
	if (!s)
		s = rd_kvs(r, n_kv);
	if (!s)
		s = check_tensor_count(r, n_tensors);
	if (!s)
		s = strata__catalog_add_file(r->c, r->name, r->size, 0, &file,
					     r->err);
	for (uint64_t i = 0; i < n_tensors && !s; i++)
		s = rd_tensor_info(r, i, file);
	if (!s)
		s = place_data(r, file);
	return s;
}

/* ------------------------------------------------------------------------ */
/* Public within the layer                                                  */
/* ------------------------------------------------------------------------ */

strata_status strata__gguf_read_fd(strata_catalog *c, int fd, uint64_t size,
				   const char *name, strata_error *err)
{
	reader r = {.fd = fd, .size = size, .name = name, .err = err, .c = c};
	r.buf = strata_alloc(READ_AHEAD_BYTES);
	if (!r.buf)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "'%s': out of memory for the read buffer", name);
	strata_status s = read_all(&r);
	strata_free(r.buf);
	return s;
}

strata_status strata__gguf_read_mem(strata_catalog *c, const void *data,
				    size_t size, const char *name,
				    strata_error *err)
{
	reader r = {.mem = data, .fd = -1, .size = size, .name = name,
		    .err = err, .c = c};
	return read_all(&r);
}

