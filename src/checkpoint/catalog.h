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

#define STRATA__MAX_NAME_BYTES 1024

#endif /* STRATA_CHECKPOINT_CATALOG_H */
