/* safetensors.c - the safetensors reader: one file, or the shards a
 * model.safetensors.index.json lists, into the catalog (layer: checkpoint).
 *
 * Trust: every file is hostile. The 8-byte header length is checked against
 * the file and a 100 MB cap before anything is allocated; the JSON header
 * goes through jansson with duplicate keys refused; every dtype, shape and
 * byte range is checked (checked arithmetic) and the ranges must tile the
 * data section exactly, as the format requires. Only headers are read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "checkpoint/readers.h"

#define MAX_HEADER_BYTES (100ull * 1000 * 1000) /* the format's own cap */
#define MAX_SHARD_NAME 255

#define FIX_CORRUPT "the file is corrupt; re-download or re-export it"

/* One tensor entry while parsing: sorted by offset before adding. */
typedef struct entry {
	strata_tensor t;
	uint64_t begin, end;
} entry;

/* ------------------------------------------------------------------------ */
/* One header                                                               */
/* ------------------------------------------------------------------------ */

static strata_status check_metadata(json_t *v, const char *name,
				    strata_error *err)
{
	if (json_is_null(v))
		return STRATA_OK; /* written by some exporters; means none */
	if (!json_is_object(v))
		return strata_fail(err, STRATA_E_CKPT_METADATA, FIX_CORRUPT,
				   "'%s': __metadata__ is not an object", name);
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x) {
		if (!json_is_string(x)) {
			char shown[96];
			return strata_fail(err, STRATA_E_CKPT_METADATA,
					   FIX_CORRUPT,
					   "'%s': __metadata__ value '%s' is not a string (the format allows strings only)",
					   name,
					   strata_escape(shown, sizeof shown, k,
							 strlen(k)));
		}
	}
	return STRATA_OK;
}

/* A JSON integer >= 0, or false. */
static bool get_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

static strata_status parse_shape(json_t *shape, const char *file,
				 const char *tn, strata_tensor *t,
				 strata_error *err)
{
	if (!json_is_array(shape))
		return strata_fail(err, STRATA_E_CKPT_HEADER, FIX_CORRUPT,
				   "'%s': tensor '%s' has no shape array", file,
				   tn);
	size_t n = json_array_size(shape);
	if (n > STRATA_MAX_DIMS)
		return strata_fail(err, STRATA_E_CKPT_LIMIT,
				   "strata supports tensors of up to 8 dimensions",
				   "'%s': tensor '%s' has %zu dimensions", file,
				   tn, n);
	t->n_dims = (uint32_t)n;
	uint64_t elements = 1;
	for (size_t d = 0; d < n; d++) {
		if (!get_u64(json_array_get(shape, d), &t->shape[d]))
			return strata_fail(err, STRATA_E_CKPT_SHAPE, FIX_CORRUPT,
					   "'%s': tensor '%s' dimension %zu is not a non-negative integer",
					   file, tn, d);
		if (!strata_mul_u64(elements, t->shape[d], &elements))
			return strata_fail(err, STRATA_E_OVERFLOW, FIX_CORRUPT,
					   "'%s': the element count of tensor '%s' overflows 64 bits",
					   file, tn);
	}
	t->elements = elements;
	return STRATA_OK;
}

static strata_status parse_entry(json_t *v, const char *file, const char *tn,
				 uint64_t data_bytes, entry *out,
				 strata_error *err)
{
	if (!json_is_object(v))
		return strata_fail(err, STRATA_E_CKPT_HEADER, FIX_CORRUPT,
				   "'%s': tensor '%s' is not an object", file, tn);
	json_t *dt = json_object_get(v, "dtype");
	if (!json_is_string(dt))
		return strata_fail(err, STRATA_E_CKPT_HEADER, FIX_CORRUPT,
				   "'%s': tensor '%s' has no dtype string", file,
				   tn);
	if (!strata_dtype_from_safetensors(json_string_value(dt), &out->t.dtype)) {
		char shown[64];
		const char *s = json_string_value(dt);
		return strata_fail(err, STRATA_E_CKPT_DTYPE,
				   "re-export the tensor in a safetensors dtype (e.g. BF16, F16, F32)",
				   "'%s': tensor '%s' has unknown dtype '%s'", file,
				   tn, strata_escape(shown, sizeof shown, s, strlen(s)));
	}
	strata_status s = parse_shape(json_object_get(v, "shape"), file, tn,
				      &out->t, err);
	if (s)
		return s;
	json_t *off = json_object_get(v, "data_offsets");
	if (!json_is_array(off) || json_array_size(off) != 2 ||
	    !get_u64(json_array_get(off, 0), &out->begin) ||
	    !get_u64(json_array_get(off, 1), &out->end))
		return strata_fail(err, STRATA_E_CKPT_HEADER, FIX_CORRUPT,
				   "'%s': tensor '%s' data_offsets is not [begin, end] of non-negative integers",
				   file, tn);
	if (out->end < out->begin || out->end > data_bytes)
		return strata_fail(err, STRATA_E_CKPT_RANGE, FIX_CORRUPT,
				   "'%s': tensor '%s' byte range [%" PRIu64 ", %" PRIu64
				   ") is not inside the %" PRIu64 "-byte data section",
				   file, tn, out->begin, out->end, data_bytes);
	s = strata_dtype_bytes(out->t.dtype, out->t.elements, &out->t.bytes,
			       err);
	if (s)
		return strata_error_prefix(err, "'%s': tensor '%s'", file, tn);
	if (out->t.bytes != out->end - out->begin)
		return strata_fail(err, STRATA_E_CKPT_SHAPE, FIX_CORRUPT,
				   "'%s': tensor '%s' shape needs %" PRIu64
				   " bytes but its range holds %" PRIu64,
				   file, tn, out->t.bytes, out->end - out->begin);
	return STRATA_OK;
}

static int entry_by_begin(const void *a, const void *b)
{
	const entry *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

static strata_status parse_entries(strata_catalog *c, json_t *root,
				   uint64_t data_bytes, const char *file,
				   entry *v, size_t *n, strata_error *err)
{
	const char *k;
	json_t *x;
	strata_status s = STRATA_OK;
	*n = 0;
	json_object_foreach(root, k, x) {
		if (!strcmp(k, "__metadata__")) {
			s = check_metadata(x, file, err);
		} else {
			char tn[96];
			size_t len = strlen(k);
			strata_escape(tn, sizeof tn, k, len);
			if (len == 0 || len > STRATA__MAX_NAME_BYTES)
				return strata_fail(err, STRATA_E_CKPT_NAME,
						   FIX_CORRUPT,
						   "'%s': tensor name '%s' is empty or longer than %d bytes",
						   file, tn,
						   STRATA__MAX_NAME_BYTES);
			v[*n] = (entry){0};
			v[*n].t.name = k;
			s = parse_entry(x, file, tn, data_bytes, &v[*n], err);
			++*n;
		}
		if (s)
			return s;
	}
	(void)c;
	return STRATA_OK;
}

strata_status strata__safetensors_parse_header(strata_catalog *c,
					       const char *json,
					       size_t header_len,
					       uint64_t file_size,
					       const char *name,
					       strata_error *err)
{
	json_error_t je;
	json_t *root = json_loadb(json, header_len, JSON_REJECT_DUPLICATES, &je);
	/* jansson leaves the text empty when its lexer cannot allocate */
	if (!root && (json_error_code(&je) == json_error_out_of_memory ||
		      !je.text[0]))
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "'%s': out of memory parsing the header", name);
	if (!root)
		return strata_fail(err, STRATA_E_CKPT_HEADER, FIX_CORRUPT,
				   "'%s': the header is not valid JSON: %s (at byte %d)",
				   name, je.text, je.position);
	strata_status s = STRATA_OK;
	entry *v = NULL;
	if (!json_is_object(root)) {
		s = strata_fail(err, STRATA_E_CKPT_HEADER, FIX_CORRUPT,
				"'%s': the header is JSON but not an object",
				name);
		goto done;
	}
	uint64_t data_offset = 8 + (uint64_t)header_len;
	size_t n = json_object_size(root);
	v = strata_calloc_or_error(n ? n : 1, sizeof *v, "safetensors entries",
				   err);
	if (!v) {
		s = STRATA_E_NOMEM;
		goto done;
	}
	s = parse_entries(c, root, file_size - data_offset, name, v, &n, err);
	if (s)
		goto done;
	qsort(v, n, sizeof *v, entry_by_begin);
	uint32_t file;
	size_t first = c->count;
	s = strata__catalog_add_file(c, name, file_size, data_offset, &file,
				     err);
	for (size_t i = 0; i < n && !s; i++) {
		v[i].t.file = file;
		v[i].t.offset = data_offset + v[i].begin;
		s = strata__catalog_add_tensor(c, &v[i].t, err);
	}
	if (!s)
		s = strata__catalog_check_ranges(c, file, first, true, err);
done:
	strata_free(v);
	json_decref(root);
	return s;
}

/* The 8-byte length and the header, from memory (fuzzers) or a file. */
static strata_status check_length(uint64_t n, uint64_t size, const char *name,
				  strata_error *err)
{
	if (size < 8)
		return strata_fail(err, STRATA_E_CKPT_TRUNCATED, FIX_CORRUPT,
				   "'%s' is %" PRIu64
				   " bytes, too short for a safetensors header length",
				   name, size);
	if (n > MAX_HEADER_BYTES)
		return strata_fail(err, STRATA_E_CKPT_LIMIT, FIX_CORRUPT,
				   "'%s': header length %" PRIu64
				   " is over the format's 100 MB limit",
				   name, n);
	if (n > size - 8)
		return strata_fail(err, STRATA_E_CKPT_TRUNCATED,
				   "the file is truncated; re-download it",
				   "'%s': header length %" PRIu64
				   " runs past the end of the %" PRIu64 "-byte file",
				   name, n, size);
	return STRATA_OK;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t x = 0;
	for (int i = 7; i >= 0; i--)
		x = x << 8 | p[i];
	return x;
}

strata_status strata__safetensors_read_mem(strata_catalog *c,
					   const void *data, size_t size,
					   const char *name, strata_error *err)
{
	uint64_t n = size >= 8 ? le64(data) : 0;
	strata_status s = check_length(n, size, name, err);
	if (s)
		return s;
	return strata__safetensors_parse_header(
		c, (const char *)data + 8, (size_t)n, size, name, err);
}

strata_status strata__safetensors_open_file(strata_catalog *c,
					    const char *path,
					    strata_error *err)
{
	int fd;
	struct stat st;
	strata_status s = strata_file_open_regular(path, 0, &fd, &st, err);
	if (s)
		return s;
	unsigned char len8[8];
	char *hdr = NULL;
	uint64_t size = (uint64_t)st.st_size, n = 0;
	if (size >= 8 && (s = strata_pread_full(fd, len8, 8, 0, path, err)))
		goto done;
	if (size >= 8)
		n = le64(len8);
	if ((s = check_length(n, size, path, err)))
		goto done;
	hdr = strata_alloc_or_error((size_t)n + 1, "safetensors header", err);
	if (!hdr) {
		s = STRATA_E_NOMEM;
		goto done;
	}
	if ((s = strata_pread_full(fd, hdr, (size_t)n, 8, path, err)))
		goto done;
	s = strata__safetensors_parse_header(c, hdr, (size_t)n, size, path,
					     err);
	if (!s)
		strata__catalog_set_identity(c, &st);
done:
	strata_free(hdr);
	strata_sys.close(fd);
	return s;
}
