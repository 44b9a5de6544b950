/* catalog.h - building a tensor catalog: an arena for the many small
 * strings a header holds and the catalog builder the readers fill
 * (layer: checkpoint). The builder knows no reader; readers.h is the other
 * side of the seam. Not a public API: names are strata__ and may change. */
#ifndef STRATA_CHECKPOINT_CATALOG_H
#define STRATA_CHECKPOINT_CATALOG_H

#include "strata/checkpoint.h"

/* ------------------------------------------------------------------------ */
/* Arena: bump allocation in chunks, freed all at once                      */
/* ------------------------------------------------------------------------ */

typedef struct strata__arena_chunk strata__arena_chunk;
typedef struct strata__arena {
	strata__arena_chunk *head;
} strata__arena;

/* 8-byte aligned, NULL on allocation failure; n may be 0. */
void *strata__arena_alloc(strata__arena *a, size_t n);
/* Copies n bytes and adds a NUL (the bytes may hold NULs themselves). */
char *strata__arena_strndup(strata__arena *a, const char *s, size_t n);
void strata__arena_fini(strata__arena *a);

/* ------------------------------------------------------------------------ */
/* Catalog builder                                                          */
/* ------------------------------------------------------------------------ */

struct strata_catalog {
	strata_format format;
	strata_tensor *tensors; /* [count], file order */
	size_t count, cap;
	strata_catalog_file *files; /* [file_count] */
	size_t file_count, file_cap;
	uint32_t *slots; /* open addressing: tensor index + 1, 0 = empty */
	size_t slot_cap; /* power of two, >= 2 * count */
	strata__arena arena; /* names and paths */
	strata_gguf *gguf;   /* NULL unless GGUF */
};

strata_status strata__catalog_create(strata_format f, strata_catalog **out,
				     strata_error *err);
/* Adds a file; path is copied. *index receives its index. */
strata_status strata__catalog_add_file(strata_catalog *c, const char *path,
				       uint64_t size, uint64_t data_offset,
				       uint32_t *index, strata_error *err);
/* Records st as the identity of the file added last (its opener's fstat):
 * strata_catalog_file_open checks it at every later open. */
void strata__catalog_set_identity(strata_catalog *c, const struct stat *st);
/* Adds t (name copied, `elements`/`shape_hf` filled in here). A name already
 * present is E_CKPT_DUPLICATE naming both files. */
strata_status strata__catalog_add_tensor(strata_catalog *c,
					 const strata_tensor *t,
					 strata_error *err);
/* Checks the tensors of file `f` (added from index `first` on) do not
 * overlap; with `cover`, also that they tile [data_offset, size) with no
 * hole (safetensors requires this). */
strata_status strata__catalog_check_ranges(strata_catalog *c, uint32_t f,
					   size_t first, bool cover,
					   strata_error *err);

/* Valid UTF-8 without NUL bytes and without overlong forms or surrogates. */
bool strata__utf8_valid(const char *s, size_t n);

/* Value checks of payload bytes as they are read (weight_store.c): the
 * bytes of one element or block of t's type, the unit a checked read is
 * split in, or 0 where its values are not checked (F32, which the forward
 * pass's NaN logits catch, and types strata cannot decode). */
uint32_t strata__tensor_check_unit(const strata_tensor *t);
/* Checks the `bytes` bytes at p (whole units), which are t's bytes from
 * byte `at` of it (a whole unit too), for NaN and infinities:
 * STRATA_E_CKPT_VALUE naming the tensor and its first bad element or
 * block ("tensor 'x': BF16 element 7 of 64 holds NaN or infinity"). */
strata_status strata__tensor_check_values(const strata_tensor *t,
					  const void *p, uint64_t at,
					  uint64_t bytes, strata_error *err);
/* The largest whole number of t's check units in at most `room` bytes of
 * what is left of it from byte `at`: at least one unit, so a piece always
 * moves on (populate.c). */
uint64_t strata__piece_bytes(const strata_tensor *t, uint64_t at,
			     uint64_t room);
/* Brings the pages of [p, p + bytes) of a mapping in: the page tables
 * filled (MADV_POPULATE_READ, Linux 5.14; before it, one read per page),
 * after read-ahead of the range where `ahead` (MADV_WILLNEED). A page
 * past the file's end is EFAULT there, never SIGBUS. 0 or an errno. */
int strata__populate(const unsigned char *p, uint64_t bytes, bool ahead);
/* Tensor t, mapped at p, brought in as strata__populate does, and (where
 * its type is checked) its values checked piece by piece just after each
 * piece's pages, the whole tensor's read-ahead running meanwhile; a large
 * tensor's pieces spread over one thread per processor (up to 8), the
 * caller's among them. 0; an errno; or -1 with *err filled by the first
 * bad piece in file order (strata__tensor_check_values). */
int strata__populate_checked(const strata_tensor *t, const unsigned char *p,
			     strata_error *err);

/* A checked read of one group (read_checked.c): tensors[0..count), back to
 * back in the file, `bytes` in all, each into dst[i]; read from fd in
 * scatter reads of about 512 KiB, each checked at once
 * (strata__tensor_check_values), a group of 16 MiB or more split in spans
 * on up to 8 threads (the online processors). The first error in file
 * order; the buffers then hold what was read. */
typedef struct strata__read_group {
	uint64_t bytes;
	size_t count;
	const strata_tensor *tensors[STRATA_PREADV_MAX];
	void *dst[STRATA_PREADV_MAX];
} strata__read_group;
strata_status strata__read_checked(int fd, const strata__read_group *g,
				   const char *path, strata_error *err);

/* Checked mappings of cold tensors (read_cold.c). */
typedef struct strata__cold_region {
	unsigned char *base; /* an anonymous mapping of `bytes`, read-only */
	size_t bytes;
	const unsigned char *data; /* the tensor's first byte in it */
} strata__cold_region;
/* Whether at most a tenth of the pages of [offset, offset + bytes) of the
 * mapping at base are in the page cache (mincore); false where it cannot
 * tell. */
bool strata__range_cold(const unsigned char *base, uint64_t offset,
			uint64_t bytes);
/* Tensor t's file range, its ends rounded out to 4096, read from fd
 * (opened O_DIRECT) into a fresh anonymous mapping in 4 MiB pieces on up to
 * 4 threads, its values checked piece by piece as they land (where its
 * type is checked); *out owns the mapping (munmap base, bytes). E_NOMEM;
 * E_CKPT_READ; E_CKPT_VALUE; E_UNSUPPORTED where the filesystem refuses
 * the direct reads (map it instead). Nothing is left mapped on error. */
strata_status strata__read_cold(const strata_tensor *t, int fd,
				const char *path, strata__cold_region *out,
				strata_error *err);

#define STRATA__MAX_NAME_BYTES 1024

#endif /* STRATA_CHECKPOINT_CATALOG_H */
