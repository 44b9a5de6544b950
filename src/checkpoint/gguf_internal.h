/* gguf_internal.h - the in-memory form of a GGUF file's metadata, shared by
 * the reader (gguf.c) and the getters (gguf_meta.c) (layer: checkpoint). */
#ifndef STRATA_CHECKPOINT_GGUF_INTERNAL_H
#define STRATA_CHECKPOINT_GGUF_INTERNAL_H

#include "checkpoint/catalog.h"

typedef struct gguf_str {
	const char *s; /* NUL-terminated copy; may hold NULs itself */
	uint64_t len;
} gguf_str;

typedef struct gguf_value {
	strata_gguf_type type;
	union {
		uint64_t u; /* unsigned integer types */
		int64_t i;  /* signed integer types */
		double f;   /* F32, F64 */
		bool b;
		gguf_str str;
		struct {
			strata_gguf_type elem;
			uint64_t count;
			/* scalars: count raw little-endian elements;
			 * STRING: gguf_str[count]; ARRAY: gguf_value[count] */
			void *items;
		} arr;
	};
} gguf_value;

typedef struct gguf_kv {
	const char *key; /* NUL-terminated, UTF-8, no NULs */
	gguf_value v;
} gguf_kv;

struct strata_gguf {
	uint32_t version;
	uint64_t kv_count;
	gguf_kv *kv;	   /* [kv_count], in the arena */
	uint32_t *slots;   /* key table: kv index + 1, 0 = empty */
	size_t slot_cap;   /* power of two */
	uint32_t alignment; /* general.alignment or 32 */
	uint64_t data_offset;
	strata__arena arena;
};

/* Bytes of one element of a scalar type; 0 for STRING, ARRAY, unknown. */
size_t strata__gguf_scalar_bytes(strata_gguf_type t);
const char *strata__gguf_type_name(strata_gguf_type t);
/* Index of key in g->kv or -1 (hash lookup). */
long strata__gguf_lookup(const strata_gguf *g, const char *key);
uint64_t strata__gguf_key_hash(const char *s);
/* Frees the metadata (the catalog that holds it calls this); NULL is fine. */
void strata__gguf_destroy(strata_gguf *g);

#endif
