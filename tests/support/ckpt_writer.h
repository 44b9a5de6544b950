/* ckpt_writer.h - the one checkpoint writer of the tests: safetensors (one
 * file, or shards with their index) and GGUF (metadata and tensors) from a
 * list of tensors, with a fault hook that bends the finished bytes of each
 * file before they are written; and the byte buffer the fault catalogues
 * build their bent files with (support for every test folder, layer:
 * checkpoint; prefix ckw).
 *
 * The writer is for tests: it aborts on allocation failure, and the *_file
 * functions fail the cmocka test when a write fails. What it writes is what
 * the readers accept (tests/checkpoint proves it on every shape used). */
#ifndef STRATA_TESTS_SUPPORT_CKPT_WRITER_H
#define STRATA_TESTS_SUPPORT_CKPT_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* Bytes                                                                    */
/* ------------------------------------------------------------------------ */

/* A growable byte buffer; {0} is empty. */
typedef struct ckw_buf {
	unsigned char *p;
	size_t len, cap;
} ckw_buf;

void ckw_put(ckw_buf *b, const void *src, size_t n);
void ckw_u8(ckw_buf *b, uint8_t v);
void ckw_u32(ckw_buf *b, uint32_t v); /* little-endian, as both formats */
void ckw_u64(ckw_buf *b, uint64_t v);
void ckw_str(ckw_buf *b, const char *s); /* GGUF string: u64 length, bytes */
void ckw_zero(ckw_buf *b, size_t n);
void ckw_pad(ckw_buf *b, size_t align); /* zeros up to a multiple of align */
void ckw_free(ckw_buf *b);

/* Writes n bytes to path; 0 on success, -1 on failure. */
int ckw_write_file(const char *path, const void *p, size_t n);
/* A fresh temporary directory (the caller frees the string). */
char *ckw_temp_dir(void);

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                              */
/* ------------------------------------------------------------------------ */

/* ggml tensor types the writer sizes itself (any other needs `bytes`;
 * CKW_Q6_K is named for tests that give them). */
enum {
	CKW_F32 = 0, CKW_F16 = 1, CKW_Q8_0 = 8, CKW_Q6_K = 14, CKW_BF16 = 30,
};

/* One tensor. shape is outermost first (safetensors' order; GGUF writes
 * it reversed, ne0 first). type is the ggml type for GGUF; dtype the
 * safetensors name ("F32", "BF16", ...; NULL: from type). data holds
 * `bytes` bytes of the stored type; NULL writes zeros (or a hole, with
 * ckw_options.sparse). bytes 0: computed from type and shape. */
typedef struct ckw_tensor {
	const char *name;
	uint32_t type;
	const char *dtype;
	uint32_t n_dims;
	uint64_t shape[8];
	const void *data;
	uint64_t bytes;
} ckw_tensor;

/* One GGUF metadata pair. Scalars in u (integers, bool), f (F32/F64) or
 * s (STRING). An ARRAY has elem_type and count elements at items: packed
 * little-endian scalars, or `const char *const *` for STRING. */
typedef struct ckw_kv {
	const char *key;
	uint32_t type; /* STRATA_GGUF_* */
	uint64_t u;
	double f;
	const char *s;
	uint32_t elem_type;
	uint64_t count;
	const void *items;
} ckw_kv;

#define CKW_KV_U32(k, v) ((ckw_kv){.key = (k), .type = 4, .u = (v)})
#define CKW_KV_F32(k, v) ((ckw_kv){.key = (k), .type = 6, .f = (v)})
#define CKW_KV_STR(k, v) ((ckw_kv){.key = (k), .type = 8, .s = (v)})
#define CKW_KV_ARRAY(k, et, n, p)                                              \
	((ckw_kv){.key = (k), .type = 9, .elem_type = (et), .count = (n),      \
		  .items = (p)})

/* Where the parts of one finished file begin, for a fault hook. */
typedef struct ckw_parts {
	const char *file; /* its name, e.g. "model-00001-of-00002.safetensors" */
	size_t header;	  /* safetensors: the JSON header; GGUF: the first pair */
	size_t tensors;	  /* GGUF: the first tensor info; safetensors: header */
	size_t data;	  /* the first payload byte */
} ckw_parts;

/* Changes or cuts `file` (the whole file's bytes) before it is written. */
typedef void (*ckw_fault_fn)(ckw_buf *file, const ckw_parts *at, void *ctx);

typedef struct ckw_options {
	ckw_fault_fn fault; /* NULL: none */
	void *fault_ctx;
	uint32_t alignment;   /* GGUF data alignment; 0: 32 (general.alignment
				 is written only when it is not 32) */
	const char *metadata; /* safetensors: a JSON object for __metadata__ */
	bool sparse; /* tensors without data are holes (ftruncate), not zeros:
			large files that cost no disk */
} ckw_options;

/* The bytes of one safetensors file (header padded with spaces to 8 bytes,
 * then the payloads back to back in the order given). o may be NULL. */
void ckw_safetensors(ckw_buf *out, const ckw_tensor *t, size_t n,
		     const ckw_options *o);
/* The same, written to path (the fault hook sees it first). */
void ckw_safetensors_file(const char *path, const ckw_tensor *t, size_t n,
			  const ckw_options *o);
/* dir/model-0000i-of-0000N.safetensors, tensors split in `shards` runs of
 * consecutive tensors, and dir/model.safetensors.index.json naming each
 * tensor's shard (metadata.total_size: the payload bytes). */
void ckw_safetensors_sharded(const char *dir, const ckw_tensor *t, size_t n,
			     size_t shards, const ckw_options *o);

/* The bytes of one GGUF v3 file: magic, version, counts, the pairs, the
 * tensor infos, padding to the alignment, then each payload padded to it. */
void ckw_gguf(ckw_buf *out, const ckw_kv *kv, size_t n_kv,
	      const ckw_tensor *t, size_t n, const ckw_options *o);
void ckw_gguf_file(const char *path, const ckw_kv *kv, size_t n_kv,
		   const ckw_tensor *t, size_t n, const ckw_options *o);

/* Payload bytes of t (t->bytes, or computed from its type and shape). */
uint64_t ckw_tensor_bytes(const ckw_tensor *t);

#endif
