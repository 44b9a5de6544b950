/* ckpt_writer.c - the tests' checkpoint writer: safetensors single and
 * sharded, GGUF, with a fault hook (support for every test folder, layer:
 * checkpoint; prefix ckw). See ckpt_writer.h. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/ckpt_writer.h"

/* ------------------------------------------------------------------------ */
/* Bytes                                                                    */
/* ------------------------------------------------------------------------ */

void ckw_put(ckw_buf *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p)
			abort(); /* test support: no way on */
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
}

void ckw_u8(ckw_buf *b, uint8_t v)
{
	ckw_put(b, &v, 1);
}

void ckw_u32(ckw_buf *b, uint32_t v)
{
	unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8),
			      (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
	ckw_put(b, x, 4);
}

void ckw_u64(ckw_buf *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		ckw_u8(b, (uint8_t)(v >> (8 * i)));
}

void ckw_str(ckw_buf *b, const char *s)
{
	ckw_u64(b, strlen(s));
	ckw_put(b, s, strlen(s));
}

void ckw_zero(ckw_buf *b, size_t n)
{
	static const unsigned char z[256];
	while (n) {
		size_t k = n < sizeof z ? n : sizeof z;
		ckw_put(b, z, k);
		n -= k;
	}
}

void ckw_pad(ckw_buf *b, size_t align)
{
	while (b->len % align)
		ckw_u8(b, 0);
}

void ckw_free(ckw_buf *b)
{
	free(b->p);
	*b = (ckw_buf){0};
}

int ckw_write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(p, 1, n, f);
	return (fclose(f) != 0 || w != n) ? -1 : 0;
}

char *ckw_temp_dir(void)
{
	char *t = strdup("/tmp/strata-ckpt-XXXXXX");
	if (!t || !mkdtemp(t))
		abort();
	return t;
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

static const char *dtype_of(const ckw_tensor *t)
{
	if (t->dtype)
		return t->dtype;
	switch (t->type) {
	case CKW_F16: return "F16";
	case CKW_BF16: return "BF16";
	default: return "F32";
	}
}

uint64_t ckw_tensor_bytes(const ckw_tensor *t)
{
	if (t->bytes)
		return t->bytes;
	uint64_t el = 1;
	for (uint32_t d = 0; d < t->n_dims; d++)
		el *= t->shape[d];
	const char *dt = t->dtype;
	if (dt && (!strcmp(dt, "F16") || !strcmp(dt, "BF16")))
		return el * 2;
	if (dt)
		return el * 4; /* other dtypes give bytes */
	switch (t->type) {
	case CKW_F16:
	case CKW_BF16: return el * 2;
	case CKW_Q8_0: return el / 32 * 34;
	default: return el * 4;
	}
}

/* A printf-like append to b (the headers are small). */
static void putf(ckw_buf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < sizeof tmp);
	ckw_put(b, tmp, (size_t)n);
}

/* A JSON string: the names the tests use are plain, but quote and
 * backslash are escaped all the same. */
static void put_json_string(ckw_buf *b, const char *s)
{
	ckw_u8(b, '"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			ckw_u8(b, '\\');
		ckw_u8(b, (uint8_t)*s);
	}
	ckw_u8(b, '"');
}

/* ------------------------------------------------------------------------ */
/* Writing a file: header bytes, then payloads (zeros, or holes)            */
/* ------------------------------------------------------------------------ */

/* Appends each payload at its offset from `data` (0-filled between). */
static void append_payloads(ckw_buf *b, const ckw_tensor *t, size_t n,
			    const uint64_t *off, size_t data)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t bytes = ckw_tensor_bytes(&t[i]);
		assert_true(data + off[i] >= b->len);
		ckw_zero(b, data + off[i] - b->len);
		if (t[i].data)
			ckw_put(b, t[i].data, bytes);
		else
			ckw_zero(b, bytes);
	}
}

static void emit(const char *path, ckw_buf *b, const ckw_tensor *t, size_t n,
		 const uint64_t *off, uint64_t end, ckw_parts *at,
		 const ckw_options *o)
{
	bool sparse = o && o->sparse;
	if (!sparse) {
		append_payloads(b, t, n, off, at->data);
		ckw_zero(b, at->data + end - b->len);
	}
	if (o && o->fault)
		o->fault(b, at, o->fault_ctx);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, b->p, b->len), (ssize_t)b->len);
	for (size_t i = 0; sparse && i < n; i++)
		if (t[i].data)
			assert_int_equal(pwrite(fd, t[i].data,
						ckw_tensor_bytes(&t[i]),
						(off_t)(at->data + off[i])),
					 (ssize_t)ckw_tensor_bytes(&t[i]));
	if (sparse)
		assert_int_equal(ftruncate(fd, (off_t)(at->data + end)), 0);
	assert_int_equal(close(fd), 0);
}

/* ------------------------------------------------------------------------ */
/* safetensors                                                              */
/* ------------------------------------------------------------------------ */

/* The header (length and JSON) of tensors t[0..n); off[i] gets each
 * payload's offset in the data section, the return value its size. */
static uint64_t st_header(ckw_buf *b, const ckw_tensor *t, size_t n,
			  uint64_t *off, const ckw_options *o)
{
	ckw_buf h = {0};
	uint64_t at = 0;
	ckw_u8(&h, '{');
	if (o && o->metadata)
		putf(&h, "\"__metadata__\":%s%s", o->metadata, n ? "," : "");
	for (size_t i = 0; i < n; i++) {
		uint64_t bytes = ckw_tensor_bytes(&t[i]);
		if (i)
			ckw_u8(&h, ',');
		put_json_string(&h, t[i].name);
		putf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_of(&t[i]));
		for (uint32_t d = 0; d < t[i].n_dims; d++)
			putf(&h, "%s%llu", d ? "," : "",
			     (unsigned long long)t[i].shape[d]);
		putf(&h, "],\"data_offsets\":[%llu,%llu]}",
		     (unsigned long long)at, (unsigned long long)(at + bytes));
		off[i] = at;
		at += bytes;
	}
	ckw_u8(&h, '}');
	while (h.len % 8)
		ckw_u8(&h, ' ');
	ckw_u64(b, h.len);
	ckw_put(b, h.p, h.len);
	ckw_free(&h);
	return at;
}

static void st_build(const char *path, ckw_buf *out, const char *name,
		     const ckw_tensor *t, size_t n, const ckw_options *o)
{
	uint64_t *off = calloc(n ? n : 1, sizeof *off);
	assert_non_null(off);
	ckw_buf b = {0};
	uint64_t end = st_header(&b, t, n, off, o);
	ckw_parts at = {name, 8, 8, b.len};
	if (path) {
		emit(path, &b, t, n, off, end, &at, o);
		ckw_free(&b);
	} else {
		append_payloads(&b, t, n, off, at.data);
		if (o && o->fault)
			o->fault(&b, &at, o->fault_ctx);
		*out = b;
	}
	free(off);
}

void ckw_safetensors(ckw_buf *out, const ckw_tensor *t, size_t n,
		     const ckw_options *o)
{
	st_build(NULL, out, "model.safetensors", t, n, o);
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

void ckw_safetensors_file(const char *path, const ckw_tensor *t, size_t n,
			  const ckw_options *o)
{
	st_build(path, NULL, base_name(path), t, n, o);
}

void ckw_safetensors_sharded(const char *dir, const ckw_tensor *t, size_t n,
			     size_t shards, const ckw_options *o)
{
	assert_true(shards >= 1 && shards <= n);
	ckw_buf index = {0};
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += ckw_tensor_bytes(&t[i]);
	putf(&index, "{\"metadata\":{\"total_size\":%llu},\"weight_map\":{",
	     (unsigned long long)total);
	size_t from = 0;
	for (size_t s = 0; s < shards; s++) {
		size_t to = n * (s + 1) / shards;
		char file[64], path[4096];
		snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors",
			 s + 1, shards);
		snprintf(path, sizeof path, "%s/%s", dir, file);
		st_build(path, NULL, file, t + from, to - from, o);
		for (size_t i = from; i < to; i++) {
			if (i)
				ckw_u8(&index, ',');
			put_json_string(&index, t[i].name);
			putf(&index, ":\"%s\"", file);
		}
		from = to;
	}
	ckw_put(&index, "}}", 2);
	char path[4096];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	assert_int_equal(ckw_write_file(path, index.p, index.len), 0);
	ckw_free(&index);
}

/* ------------------------------------------------------------------------ */
/* GGUF                                                                     */
/* ------------------------------------------------------------------------ */

static size_t scalar_bytes(uint32_t type)
{
	switch (type) {
	case 0: case 1: case 7: return 1;       /* u8 i8 bool */
	case 2: case 3: return 2;               /* u16 i16 */
	case 4: case 5: case 6: return 4;       /* u32 i32 f32 */
	case 10: case 11: case 12: return 8;    /* u64 i64 f64 */
	default: return 0;
	}
}

static void put_value(ckw_buf *b, const ckw_kv *kv)
{
	switch (kv->type) {
	case 6: {
		float f = (float)kv->f;
		ckw_put(b, &f, 4);
		return;
	}
	case 12:
		ckw_put(b, &kv->f, 8);
		return;
	case 8:
		ckw_str(b, kv->s);
		return;
	case 9:
		ckw_u32(b, kv->elem_type);
		ckw_u64(b, kv->count);
		if (kv->elem_type == 8) {
			const char *const *s = kv->items;
			for (uint64_t i = 0; i < kv->count; i++)
				ckw_str(b, s[i]);
		} else {
			ckw_put(b, kv->items,
				kv->count * scalar_bytes(kv->elem_type));
		}
		return;
	default:
		for (size_t i = 0; i < scalar_bytes(kv->type); i++)
			ckw_u8(b, (uint8_t)(kv->u >> (8 * i)));
	}
}

static void gguf_build(const char *path, ckw_buf *out, const char *name,
		       const ckw_kv *kv, size_t n_kv, const ckw_tensor *t,
		       size_t n, const ckw_options *o)
{
	uint32_t align = o && o->alignment ? o->alignment : 32;
	uint64_t *off = calloc(n ? n : 1, sizeof *off);
	assert_non_null(off);
	ckw_buf b = {0};
	ckw_parts at = {name, 0, 0, 0};
	ckw_put(&b, "GGUF", 4);
	ckw_u32(&b, 3);
	ckw_u64(&b, n);
	ckw_u64(&b, n_kv + (align != 32));
	at.header = b.len;
	if (align != 32) {
		ckw_str(&b, "general.alignment");
		ckw_u32(&b, 4);
		ckw_u32(&b, align);
	}
	for (size_t i = 0; i < n_kv; i++) {
		ckw_str(&b, kv[i].key);
		ckw_u32(&b, kv[i].type);
		put_value(&b, &kv[i]);
	}
	at.tensors = b.len;
	uint64_t end = 0;
	for (size_t i = 0; i < n; i++) {
		ckw_str(&b, t[i].name);
		ckw_u32(&b, t[i].n_dims);
		for (uint32_t d = t[i].n_dims; d-- > 0;)
			ckw_u64(&b, t[i].shape[d]); /* ne0: innermost */
		ckw_u32(&b, t[i].type);
		ckw_u64(&b, end);
		off[i] = end;
		end += (ckw_tensor_bytes(&t[i]) + align - 1) / align * align;
	}
	ckw_pad(&b, align);
	at.data = b.len;
	if (path) {
		emit(path, &b, t, n, off, end, &at, o);
		ckw_free(&b);
	} else {
		append_payloads(&b, t, n, off, at.data);
		ckw_zero(&b, at.data + end - b.len);
		if (o && o->fault)
			o->fault(&b, &at, o->fault_ctx);
		*out = b;
	}
	free(off);
}

void ckw_gguf(ckw_buf *out, const ckw_kv *kv, size_t n_kv,
	      const ckw_tensor *t, size_t n, const ckw_options *o)
{
	gguf_build(NULL, out, "model.gguf", kv, n_kv, t, n, o);
}

void ckw_gguf_file(const char *path, const ckw_kv *kv, size_t n_kv,
		   const ckw_tensor *t, size_t n, const ckw_options *o)
{
	gguf_build(path, NULL, base_name(path), kv, n_kv, t, n, o);
}
