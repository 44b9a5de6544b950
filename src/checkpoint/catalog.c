/* catalog.c - the tensor catalog both readers fill: tensors in file order,
 * O(1) lookup by name through an open-addressing table, range checks
 * (layer: checkpoint). It knows no reader: catalog_open.c picks one. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/catalog.h"
#include "checkpoint/gguf_internal.h"

struct strata__arena_chunk {
	strata__arena_chunk *next;
	size_t used, cap;
	max_align_t data[]; /* cap bytes */
};

#define ARENA_CHUNK_BYTES (64u * 1024u)

/* ------------------------------------------------------------------------ */
/* Arena                                                                    */
/* ------------------------------------------------------------------------ */

void *strata__arena_alloc(strata__arena *a, size_t n)
{
	size_t need = (n + 7) & ~(size_t)7;
	if (need < n)
		return NULL;
	strata__arena_chunk *h = a->head;
	if (!h || h->cap - h->used < need) {
		size_t cap = need > ARENA_CHUNK_BYTES ? need : ARENA_CHUNK_BYTES;
		if (cap > SIZE_MAX - sizeof *h)
			return NULL;
		h = strata_alloc(sizeof *h + cap);
		if (!h)
			return NULL;
		h->used = 0;
		h->cap = cap;
		/* a big block gets its own chunk behind the current one, so
		 * the current chunk's free space is not wasted */
		if (a->head && cap == need && need > ARENA_CHUNK_BYTES) {
			h->next = a->head->next;
			a->head->next = h;
			h->used = need;
			return h->data;
		}
		h->next = a->head;
		a->head = h;
	}
	void *p = (char *)h->data + h->used;
	h->used += need;
	return p;
}

char *strata__arena_strndup(strata__arena *a, const char *s, size_t n)
{
	if (n == SIZE_MAX)
		return NULL;
	char *p = strata__arena_alloc(a, n + 1);
	if (!p)
		return NULL;
	if (n)
		memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

void strata__arena_fini(strata__arena *a)
{
	strata__arena_chunk *h = a->head;
	while (h) {
		strata__arena_chunk *next = h->next;
		strata_free(h);
		h = next;
	}
	a->head = NULL;
}

bool strata__utf8_valid(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		uint32_t cp, min;
		if ((c & 0xe0) == 0xc0) {
			len = 2, cp = c & 0x1f, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3, cp = c & 0x0f, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4, cp = c & 0x07, min = 0x10000;
		} else {
			return false;
		}
		if (n - i < len)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* Builder                                                                  */
/* ------------------------------------------------------------------------ */

/* FNV-1a: names are short and the table is rebuilt rarely. */
static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static size_t slot_of(const strata_catalog *c, const char *name,
		      uint32_t *found)
{
	size_t mask = c->slot_cap - 1, i = name_hash(name) & mask;
	while (c->slots[i]) {
		if (!strcmp(c->tensors[c->slots[i] - 1].name, name)) {
			*found = c->slots[i];
			return i;
		}
		i = (i + 1) & mask;
	}
	*found = 0;
	return i;
}

static strata_status grow_slots(strata_catalog *c, strata_error *err)
{
	size_t cap = c->slot_cap ? c->slot_cap * 2 : 64;
	uint32_t *slots = strata_calloc_or_error(cap, sizeof *slots,
						 "tensor name table", err);
	if (!slots)
		return STRATA_E_NOMEM;
	uint32_t *old = c->slots;
	c->slots = slots;
	c->slot_cap = cap;
	for (size_t i = 0; i < c->count; i++) {
		uint32_t found;
		size_t s = slot_of(c, c->tensors[i].name, &found);
		c->slots[s] = (uint32_t)(i + 1);
	}
	strata_free(old);
	return STRATA_OK;
}

strata_status strata__catalog_create(strata_format f, strata_catalog **out,
				     strata_error *err)
{
	strata_catalog *c = strata_calloc_or_error(1, sizeof *c, "catalog",
						   err);
	if (!c)
		return STRATA_E_NOMEM;
	c->format = f;
	*out = c;
	return STRATA_OK;
}

strata_status strata__catalog_add_file(strata_catalog *c, const char *path,
				       uint64_t size, uint64_t data_offset,
				       uint32_t *index, strata_error *err)
{
	if (c->file_count >= UINT32_MAX - 1)
		return strata_fail(err, STRATA_E_CKPT_LIMIT,
				   "split the checkpoint differently",
				   "too many checkpoint files");
	strata_status s = strata_grow((void **)&c->files, &c->file_cap,
				      c->file_count + 1, sizeof *c->files,
				      "catalog files", err);
	if (s)
		return s;
	char *p = strata__arena_strndup(&c->arena, path, strlen(path));
	if (!p)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory copying path '%s'", path);
	c->files[c->file_count] = (strata_catalog_file){
		.path = p, .size = size, .data_offset = data_offset};
	*index = (uint32_t)c->file_count++;
	return STRATA_OK;
}

strata_status strata__catalog_add_tensor(strata_catalog *c,
					 const strata_tensor *t,
					 strata_error *err)
{
	if (c->count >= UINT32_MAX - 1)
		return strata_fail(err, STRATA_E_CKPT_LIMIT,
				   "the checkpoint is not plausible",
				   "more than %" PRIu32 " tensors", UINT32_MAX - 2);
	if (2 * (c->count + 1) > c->slot_cap) {
		strata_status s = grow_slots(c, err);
		if (s)
			return s;
	}
	uint32_t found;
	size_t slot = slot_of(c, t->name, &found);
	if (found) {
		char shown[96];
		const strata_tensor *o = &c->tensors[found - 1];
		strata_escape(shown, sizeof shown, t->name, strlen(t->name));
		return strata_fail(err, STRATA_E_CKPT_DUPLICATE,
				   "each tensor name must appear once; re-export the checkpoint",
				   "tensor '%s' appears twice: in '%s' and in '%s'",
				   shown, c->files[o->file].path,
				   c->files[t->file].path);
	}
	strata_status s = strata_grow((void **)&c->tensors, &c->cap,
				      c->count + 1, sizeof *c->tensors,
				      "catalog tensors", err);
	if (s)
		return s;
	strata_tensor n = *t;
	n.name = strata__arena_strndup(&c->arena, t->name, strlen(t->name));
	if (!n.name)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory copying a tensor name");
	n.elements = 1;
	for (uint32_t d = 0; d < n.n_dims; d++) {
		n.elements *= n.shape[d]; /* readers checked the product */
		n.shape_hf[d] = c->format == STRATA_FORMAT_GGUF
					? n.shape[n.n_dims - 1 - d]
					: n.shape[d];
	}
	c->tensors[c->count] = n;
	c->slots[slot] = (uint32_t)++c->count;
	return STRATA_OK;
}

static int by_offset(const void *a, const void *b)
{
	const strata_tensor *x = *(const strata_tensor *const *)a;
	const strata_tensor *y = *(const strata_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

strata_status strata__catalog_check_ranges(strata_catalog *c, uint32_t f,
					   size_t first, bool cover,
					   strata_error *err)
{
	const strata_catalog_file *file = &c->files[f];
	size_t n = c->count - first;
	const strata_tensor **v = strata_calloc_or_error(
		n ? n : 1, sizeof *v, "tensor range check", err);
	if (!v)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = &c->tensors[first + i];
	qsort(v, n, sizeof *v, by_offset);
	strata_status s = STRATA_OK;
	uint64_t at = file->data_offset;
	char a[96], b[96];
	for (size_t i = 0; i < n && !s; i++) {
		const strata_tensor *t = v[i];
		strata_escape(a, sizeof a, t->name, strlen(t->name));
		if (t->offset < at && i > 0) {
			strata_escape(b, sizeof b, v[i - 1]->name,
				      strlen(v[i - 1]->name));
			s = strata_fail(err, STRATA_E_CKPT_RANGE,
					"the file is corrupt; re-download or re-export it",
					"'%s': tensors '%s' and '%s' overlap (offset %" PRIu64
					" < %" PRIu64 ")",
					file->path, b, a, t->offset, at);
		} else if (cover && t->offset != at) {
			s = strata_fail(err, STRATA_E_CKPT_RANGE,
					"the file is corrupt; re-download or re-export it",
					"'%s': %" PRIu64 " bytes before tensor '%s' belong to no tensor (hole at offset %" PRIu64
					")",
					file->path, t->offset - at, a, at);
		} else if (t->offset + t->bytes > file->size) {
			/* readers checked offset + bytes does not wrap */
			s = strata_fail(err, STRATA_E_CKPT_RANGE,
					"the file is truncated; re-download it",
					"'%s': tensor '%s' ends past the end of the file (%" PRIu64
					" > %" PRIu64 ")",
					file->path, a, t->offset + t->bytes,
					file->size);
		}
		at = t->offset + t->bytes;
	}
	if (!s && cover && at != file->size)
		s = strata_fail(err, STRATA_E_CKPT_RANGE,
				"the file is corrupt or has trailing bytes; re-download or re-export it",
				"'%s': the last %" PRIu64 " bytes of the data section belong to no tensor",
				file->path, file->size - at);
	strata_free(v);
	return s;
}

/* ------------------------------------------------------------------------ */
/* Public                                                                   */
/* ------------------------------------------------------------------------ */

size_t strata_catalog_count(const strata_catalog *c)
{
	return c->count;
}

const strata_tensor *strata_catalog_tensor(const strata_catalog *c, size_t i)
{
	return i < c->count ? &c->tensors[i] : NULL;
}

const strata_tensor *strata_catalog_find(const strata_catalog *c,
					 const char *name)
{
	if (!c->slot_cap)
		return NULL;
	uint32_t found;
	slot_of(c, name, &found);
	return found ? &c->tensors[found - 1] : NULL;
}

size_t strata_catalog_file_count(const strata_catalog *c)
{
	return c->file_count;
}

const strata_catalog_file *strata_catalog_file_at(const strata_catalog *c,
						  size_t i)
{
	return i < c->file_count ? &c->files[i] : NULL;
}

void strata__catalog_set_identity(strata_catalog *c, const struct stat *st)
{
	if (!c->file_count)
		return;
	strata_catalog_file *f = &c->files[c->file_count - 1];
	f->identity_known = true;
	f->dev = (uint64_t)st->st_dev;
	f->ino = (uint64_t)st->st_ino;
	f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 +
		      st->st_mtim.tv_nsec;
}

strata_status strata_catalog_file_open(const strata_catalog *c, size_t i,
				       int flags, int *fd_out,
				       strata_error *err)
{
	const strata_catalog_file *f = strata_catalog_file_at(c, i);
	if (!f)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass a file index of the catalog",
				   "no checkpoint file %zu", i);
	int fd;
	struct stat st;
	strata_status s = strata_file_open_regular(f->path, flags, &fd, &st, err);
	if (s) {
		int e = errno;
		if (err) {
			err->code = STRATA_E_CKPT_READ;
			snprintf(err->fix, sizeof err->fix, "%s",
				 "check the checkpoint files are still there "
				 "and readable");
		}
		errno = e;
		return STRATA_E_CKPT_READ;
	}
	int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 +
			st.st_mtim.tv_nsec;
	const char *what = (uint64_t)st.st_size != f->size ? "its size"
			   : !f->identity_known		    ? NULL
			   : (uint64_t)st.st_dev != f->dev ||
				   (uint64_t)st.st_ino != f->ino
				   ? "the file (another inode)"
			   : mtime != f->mtime_ns ? "its modification time"
						  : NULL;
	if (what) {
		strata_sys.close(fd);
		return strata_fail(err, STRATA_E_CKPT_READ,
				   "the checkpoint changed while strata used it; "
				   "run again once it is complete",
				   "'%s' changed since its header was read: %s "
				   "(%" PRIu64 " bytes then, %" PRIu64 " now)",
				   f->path, what, f->size, (uint64_t)st.st_size);
	}
	*fd_out = fd;
	return STRATA_OK;
}

strata_format strata_catalog_format(const strata_catalog *c)
{
	return c->format;
}

const strata_gguf *strata_catalog_gguf(const strata_catalog *c)
{
	return c->gguf;
}

void strata_catalog_destroy(strata_catalog *c)
{
	if (!c)
		return;
	strata__gguf_destroy(c->gguf);
	strata__arena_fini(&c->arena);
	strata_free(c->tensors);
	strata_free(c->files);
	strata_free(c->slots);
	strata_free(c);
}
