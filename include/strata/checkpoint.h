/* checkpoint.h - safetensors and GGUF readers, the tensor catalog, the
 * dtype table and the weight store (layer: checkpoint).
 *
 * Trust: every byte of a checkpoint, index or metadata is hostile. Opening a
 * model reads headers only (zero payload bytes); payload reads go through the
 * weight store and are checked against the catalog.
 */
#ifndef STRATA_CHECKPOINT_H
#define STRATA_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/base.h"

/* ------------------------------------------------------------------------ */
/* Tensor types                                                             */
/* ------------------------------------------------------------------------ */

/* Every type either format can declare, one X-macro list:
 * X(NAME, safetensors name or NULL, ggml type id or -1, elements per block,
 *   bytes per block, strata can convert it to f32).
 * safetensors' sub-byte types are blocks too (F4: 2 elements in 1 byte, F6:
 * 4 elements in 3 bytes), so one rule sizes every tensor exactly. ggml block
 * sizes follow ggml-common.h (QK_K = 256). Never reorder: values are stable. */
#define STRATA_DTYPE_MAP(X)                                                    \
	X(F64, "F64", 28, 1, 8, false)                                         \
	X(F32, "F32", 0, 1, 4, true)                                           \
	X(F16, "F16", 1, 1, 2, true)                                           \
	X(BF16, "BF16", 30, 1, 2, true)                                        \
	X(I64, "I64", 27, 1, 8, false)                                         \
	X(I32, "I32", 26, 1, 4, false)                                         \
	X(I16, "I16", 25, 1, 2, false)                                         \
	X(I8, "I8", 24, 1, 1, false)                                           \
	X(U64, "U64", -1, 1, 8, false)                                         \
	X(U32, "U32", -1, 1, 4, false)                                         \
	X(U16, "U16", -1, 1, 2, false)                                         \
	X(U8, "U8", -1, 1, 1, false)                                           \
	X(BOOL, "BOOL", -1, 1, 1, false)                                       \
	X(F8_E4M3, "F8_E4M3", -1, 1, 1, false)                                 \
	X(F8_E5M2, "F8_E5M2", -1, 1, 1, false)                                 \
	X(F8_E8M0, "F8_E8M0", -1, 1, 1, false)                                 \
	X(F4, "F4", -1, 2, 1, false)                                           \
	X(F6_E2M3, "F6_E2M3", -1, 4, 3, false)                                 \
	X(F6_E3M2, "F6_E3M2", -1, 4, 3, false)                                 \
	X(C64, "C64", -1, 1, 8, false)                                         \
	X(Q4_0, NULL, 2, 32, 18, true)                                         \
	X(Q4_1, NULL, 3, 32, 20, true)                                         \
	X(Q5_0, NULL, 6, 32, 22, true)                                         \
	X(Q5_1, NULL, 7, 32, 24, true)                                         \
	X(Q8_0, NULL, 8, 32, 34, true)                                         \
	X(Q8_1, NULL, 9, 32, 36, false)                                        \
	X(Q2_K, NULL, 10, 256, 84, true)                                       \
	X(Q3_K, NULL, 11, 256, 110, true)                                      \
	X(Q4_K, NULL, 12, 256, 144, true)                                      \
	X(Q5_K, NULL, 13, 256, 176, true)                                      \
	X(Q6_K, NULL, 14, 256, 210, true)                                      \
	X(Q8_K, NULL, 15, 256, 292, false)                                     \
	X(IQ2_XXS, NULL, 16, 256, 66, false)                                   \
	X(IQ2_XS, NULL, 17, 256, 74, false)                                    \
	X(IQ3_XXS, NULL, 18, 256, 98, false)                                   \
	X(IQ1_S, NULL, 19, 256, 50, false)                                     \
	X(IQ4_NL, NULL, 20, 32, 18, true)                                      \
	X(IQ3_S, NULL, 21, 256, 110, false)                                    \
	X(IQ2_S, NULL, 22, 256, 82, false)                                     \
	X(IQ4_XS, NULL, 23, 256, 136, true)                                    \
	X(IQ1_M, NULL, 29, 256, 56, false)                                     \
	X(TQ1_0, NULL, 34, 256, 54, false)                                     \
	X(TQ2_0, NULL, 35, 256, 66, false)                                     \
	X(MXFP4, NULL, 39, 32, 17, false)

typedef enum strata_dtype {
#define STRATA_DTYPE_ENUM(name, st, ggml, be, bb, fl) STRATA_DTYPE_##name,
	STRATA_DTYPE_MAP(STRATA_DTYPE_ENUM)
#undef STRATA_DTYPE_ENUM
	STRATA_DTYPE_COUNT
} strata_dtype;

typedef struct strata_dtype_info {
	const char *name;	  /* "BF16", "Q8_0" */
	uint32_t block_elements;  /* elements per block: 1, or 32/256 */
	uint32_t block_bytes;	  /* bytes per block */
	bool is_float;		  /* can be dequantised to f32 by strata */
} strata_dtype_info;

/* NULL for a value outside the table. */
const strata_dtype_info *strata_dtype_get(strata_dtype t);

/* The fix of every "strata cannot compute with this type" error: the types
 * strata computes, and the command that converts a model to one of them
 * (DESIGN.md's strata quantize; from the original F32/F16/BF16 model where
 * the file's own type cannot be read either). */
#define STRATA_FIX_CONVERT_TYPE                                                \
	"convert the model to a type strata computes (F32, F16, BF16, Q8_0, "  \
	"Q4_0-Q5_1, Q2_K-Q6_K, IQ4_NL, IQ4_XS) with strata quantize, from "   \
	"its original safetensors or a GGUF of such a type: strata quantize " \
	"MODEL OUT.gguf --type Q8_0"

/* The type a safetensors header names ("BF16"), or a GGUF tensor info's
 * ggml type id; false when the name or id is not a known type. */
bool strata_dtype_from_safetensors(const char *name, strata_dtype *out);
bool strata_dtype_from_ggml(uint32_t id, strata_dtype *out);
/* The ggml type id of t, or -1 when ggml has none. */
int strata_dtype_ggml_id(strata_dtype t);

/* The block format of t (base's strata_block_type) when strata computes on
 * t (exactly the types whose is_float is true);
 * false otherwise. */
bool strata_dtype_block(strata_dtype t, strata_block_type *out);

/* Bytes of `elements` elements of type t: checked, and an element count not
 * a multiple of the block size is an error. */
strata_status strata_dtype_bytes(strata_dtype t, uint64_t elements,
				 uint64_t *out, strata_error *err);

/* ------------------------------------------------------------------------ */
/* The catalog                                                              */
/* ------------------------------------------------------------------------ */

#define STRATA_MAX_DIMS 8

typedef enum strata_format {
	STRATA_FORMAT_SAFETENSORS,
	STRATA_FORMAT_GGUF,
} strata_format;

/* One tensor. Shape is in the checkpoint's own order: safetensors lists the
 * outermost dimension first (row-major [rows, cols]); GGUF lists ne[0]
 * (innermost, contiguous) first. `shape_hf` is always outermost-first. */
typedef struct strata_tensor {
	const char *name;	  /* owned by the catalog, NUL-terminated */
	strata_dtype dtype;
	uint32_t n_dims;
	uint64_t shape[STRATA_MAX_DIMS];    /* the file's own order */
	uint64_t shape_hf[STRATA_MAX_DIMS]; /* outermost first */
	uint64_t elements;
	uint32_t file;	 /* index into strata_catalog.files */
	uint64_t offset; /* absolute byte offset in that file */
	uint64_t bytes;
} strata_tensor;

typedef struct strata_catalog_file {
	const char *path;   /* as opened */
	uint64_t size;	    /* bytes, from fstat at open */
	uint64_t data_offset; /* start of the tensor data section */
	/* The file's identity when its header was read (fstat): every later
	 * open (strata_catalog_file_open) must find the same. False for a
	 * catalog parsed from memory. */
	bool identity_known;
	uint64_t dev, ino;
	int64_t mtime_ns;
} strata_catalog_file;

/* The tensors of one checkpoint, in file order. Name lookup is O(1). */
typedef struct strata_catalog strata_catalog;

size_t strata_catalog_count(const strata_catalog *c);
const strata_tensor *strata_catalog_tensor(const strata_catalog *c, size_t i);
/* NULL when absent. */
const strata_tensor *strata_catalog_find(const strata_catalog *c,
					 const char *name);
size_t strata_catalog_file_count(const strata_catalog *c);
const strata_catalog_file *strata_catalog_file_at(const strata_catalog *c,
						  size_t i);
strata_format strata_catalog_format(const strata_catalog *c);

/* Opens file i of c for reading its payload (O_RDONLY | O_CLOEXEC | flags,
 * never blocking on a FIFO) and checks it is the file whose header was
 * read: a regular file with the same device, inode, size and modification
 * time. A file replaced (renamed over, even by one of the same size),
 * truncated, grown or rewritten with a new mtime since is E_CKPT_READ
 * naming what changed. It cannot see an edit in place that keeps size and
 * mtime (a writer that resets the mtime), nor an edit to a file that is
 * already open (docs/checkpoint.md). The caller closes *fd. */
strata_status strata_catalog_file_open(const strata_catalog *c, size_t i,
				       int flags, int *fd, strata_error *err);

/* Opens MODEL: a directory (model.safetensors, or model.safetensors.index.json
 * and its shards) or a .gguf file. Reads headers only. On success the caller
 * owns *out and frees it with strata_catalog_destroy. */
/* Looks at what a MODEL path that could not be opened holds instead (by
 * names only): a Hugging Face hub id, a folder of PyTorch pickles (for the
 * weights, the tokenizer too), a tokenizer.model without tokenizer.json
 * (tokenizer true). Returns E_NOT_FOUND with an error that says what
 * strata reads and how to get it, or STRATA_OK (err untouched) when it
 * knows nothing better to say than the caller's own error. */
strata_status strata_model_path_explain(const char *path, bool tokenizer,
					strata_error *err);

strata_status strata_catalog_open(const char *model_path, strata_catalog **out,
				  strata_error *err);
void strata_catalog_destroy(strata_catalog *c); /* NULL is fine */

/* ------------------------------------------------------------------------ */
/* The weight store: payload reads into caller buffers                      */
/* ------------------------------------------------------------------------ */

typedef struct strata_weight_store strata_weight_store;

typedef struct strata_weight_store_options {
	uint32_t max_open_shards; /* LRU bound on open files; 0: default 4 */
	bool direct_io;		  /* O_DIRECT where the filesystem allows */
} strata_weight_store_options;

/* The diagnostics named in DESIGN.md's telemetry section. Path lists are
 * owned by the store and valid until it is destroyed. */
typedef struct strata_weight_store_stats {
	const char *backend; /* "pread" or "o_direct" */
	uint64_t cache_hits, cache_misses, evictions;
	uint64_t currently_cached_shards;
	size_t touched_count;
	const char *const *touched_shard_paths;
	size_t payload_count;
	const char *const *payload_shard_paths;
	uint64_t physical_reads, physical_read_bytes, coalesced_group_hits;
	/* Why O_DIRECT was not used although asked ("... refused O_DIRECT
	 * ..."), or NULL. Not part of the telemetry contract. */
	const char *note;
} strata_weight_store_stats;

strata_status strata_weight_store_create(const strata_catalog *c,
					 const strata_weight_store_options *opt,
					 strata_weight_store **out,
					 strata_error *err);
void strata_weight_store_destroy(strata_weight_store *ws);

/* Reads the payloads of tensors[0..n) (pointers into the store's catalog)
 * into dst[i] (each tensors[i]->bytes long, in the file's own dtype);
 * adjacent tensors of one shard are read with one call. Thread-safe: calls
 * may run concurrently; at most max_open_shards files are open at once.
 * cache_hits/misses/evictions count shard opens per group of tensors read;
 * coalesced_group_hits counts tensors that rode along in another tensor's
 * read (reads saved). A tensor not of this catalog is E_INVALID_ARG; a
 * failed or short read is E_CKPT_READ naming the tensor and file. */
strata_status strata_weight_store_read(strata_weight_store *ws,
				       const strata_tensor *const *tensors,
				       void *const *dst, size_t n,
				       strata_error *err);
/* strata_weight_store_read, with the values of every F16, BF16 and block
 * type tensor checked for NaN and infinities as they land: each read in
 * pieces of 512 KiB, each piece checked while it is in the core's cache
 * (strata_block_first_nonfinite), so the check costs no second pass over
 * memory. F32 and undecodable types are read unchecked. A bad value is
 * E_CKPT_VALUE naming the tensor and its first bad element or block; the
 * buffers then hold what was read so far. */
strata_status strata_weight_store_read_checked(
	strata_weight_store *ws, const strata_tensor *const *tensors,
	void *const *dst, size_t n, strata_error *err);
/* Keeps `count` read buffers of at least `bytes` ready for coalesced reads,
 * so that up to `count` concurrent reads of groups up to `bytes` allocate
 * nothing (a streaming reader calls this once before it starts). All or
 * nothing: E_NOMEM leaves the store as it was. */
strata_status strata_weight_store_reserve(strata_weight_store *ws,
					  uint32_t count, uint64_t bytes,
					  strata_error *err);
void strata_weight_store_get_stats(const strata_weight_store *ws,
				   strata_weight_store_stats *out);

/* Maps tensor t (of the store's catalog, t->bytes > 0) read-only from its
 * file and brings its pages in (the page cache's own pages, shared: no
 * copy and no fresh memory to fault in), setting *data to its first byte.
 * Each shard is mapped once, whole, on first use, from a descriptor that
 * passed the catalog's identity check, and stays mapped until the store is
 * destroyed: *data is valid until then. Each call counts as one physical
 * read of t->bytes. Limits: the mapping holds the file it was made from,
 * so a shard replaced (renamed over) later is never seen; one truncated
 * in place while mapped is E_CKPT_READ at this call, and after it the
 * process would be stopped by SIGBUS on the missing pages (docs/infer.md:
 * --no-mmap reads instead). E_UNSUPPORTED where the file cannot be mapped
 * (the caller reads instead); E_CKPT_READ for a file that fails the
 * identity check or cannot be read; E_INVALID_ARG for a foreign or empty
 * tensor. Thread-safe. */
strata_status strata_weight_store_map(strata_weight_store *ws,
				      const strata_tensor *t,
				      const void **data, strata_error *err);
/* strata_weight_store_map, with t's values checked as for
 * strata_weight_store_read_checked: the pages brought in 4 MiB at a time
 * (the read-ahead of the whole tensor running meanwhile), each piece
 * checked just after. E_CKPT_VALUE as there. */
strata_status strata_weight_store_map_checked(strata_weight_store *ws,
					      const strata_tensor *t,
					      const void **data,
					      strata_error *err);

/* Converts n elements of type t at src to f32 at dst, bit-exact against
 * gguf-py's dequantizer: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q2_K-Q6_K, IQ4_NL, IQ4_XS (the types whose is_float is true). Another type
 * is E_UNSUPPORTED naming it and how to convert the file; a count that
 * is not whole blocks E_CKPT_SHAPE; a NaN or infinite value or block scale
 * E_CKPT_VALUE naming the block (callers prefix the tensor's name). */
strata_status strata_dtype_to_f32(strata_dtype t, const void *src,
				  uint64_t elements, float *dst,
				  strata_error *err);

/* The checks of strata_dtype_to_f32 without keeping the result: the same
 * errors (E_CKPT_VALUE naming the first block holding NaN or infinity, ...)
 * for a tensor computed on as stored. Decodes through a stack buffer. */
strata_status strata_dtype_check_finite(strata_dtype t, const void *src,
					uint64_t elements, strata_error *err);

/* One IEEE half (as its bits) to float. */
float strata_f16_to_f32(uint16_t h);

/* ------------------------------------------------------------------------ */
/* GGUF metadata (for the model description and the text layer)             */
/* ------------------------------------------------------------------------ */

typedef enum strata_gguf_type {
	STRATA_GGUF_U8 = 0, STRATA_GGUF_I8 = 1, STRATA_GGUF_U16 = 2,
	STRATA_GGUF_I16 = 3, STRATA_GGUF_U32 = 4, STRATA_GGUF_I32 = 5,
	STRATA_GGUF_F32 = 6, STRATA_GGUF_BOOL = 7, STRATA_GGUF_STRING = 8,
	STRATA_GGUF_ARRAY = 9, STRATA_GGUF_U64 = 10, STRATA_GGUF_I64 = 11,
	STRATA_GGUF_F64 = 12,
} strata_gguf_type;

/* A GGUF file's metadata, read fully into memory at open (bounded by the
 * file size and caps). Strings are not NUL-terminated in GGUF; the getters
 * return pointer and length. Owned by the catalog that read it. */
typedef struct strata_gguf strata_gguf;

/* NULL when the catalog is not GGUF. */
const strata_gguf *strata_catalog_gguf(const strata_catalog *c);

/* The file's GGUF version (2 or 3). */
uint32_t strata_gguf_version(const strata_gguf *g);

/* Index of key, or -1 when absent. */
long strata_gguf_find(const strata_gguf *g, const char *key);
strata_gguf_type strata_gguf_kv_type(const strata_gguf *g, long kv);
/* The number of pairs, and the key of pair kv (0 <= kv < count), in file
 * order. */
uint64_t strata_gguf_kv_count(const strata_gguf *g);
const char *strata_gguf_kv_key(const strata_gguf *g, long kv);
/* Scalar getters accept any integer type whose value fits; a wrong type or
 * a value that does not fit is E_CKPT_METADATA naming the key. */
strata_status strata_gguf_get_u64(const strata_gguf *g, const char *key,
				  uint64_t *out, strata_error *err);
strata_status strata_gguf_get_f64(const strata_gguf *g, const char *key,
				  double *out, strata_error *err);
strata_status strata_gguf_get_bool(const strata_gguf *g, const char *key,
				   bool *out, strata_error *err);
strata_status strata_gguf_get_string(const strata_gguf *g, const char *key,
				     const char **s, size_t *len,
				     strata_error *err);
/* Arrays: element type and count; then element accessors by index. */
strata_status strata_gguf_get_array(const strata_gguf *g, const char *key,
				    strata_gguf_type *elem, uint64_t *count,
				    strata_error *err);
void strata_gguf_array_string(const strata_gguf *g, long kv, uint64_t i,
			      const char **s, size_t *len);
double strata_gguf_array_f64(const strata_gguf *g, long kv, uint64_t i);
int64_t strata_gguf_array_i64(const strata_gguf *g, long kv, uint64_t i);

/* ------------------------------------------------------------------------ */
/* The GGUF writer                                                          */
/* ------------------------------------------------------------------------ */

/* A GGUF v3 file being assembled: metadata pairs in the order first set
 * (setting a key again replaces its value in place), tensors in the order
 * added. Keys and names are copied. Every call but destroy returns
 * E_NOMEM on allocation failure, leaving the writer usable. */
typedef struct strata_gguf_writer strata_gguf_writer;

strata_status strata_gguf_writer_create(strata_gguf_writer **out,
					strata_error *err);
void strata_gguf_writer_destroy(strata_gguf_writer *w); /* NULL is fine */

/* Copies pair kv (an index, strata_gguf_find) of g, any type, nested
 * arrays included, byte for byte. */
strata_status strata_gguf_writer_copy(strata_gguf_writer *w,
				      const strata_gguf *g, long kv,
				      strata_error *err);
/* An unsigned integer, bool or signed integer of type t (its bits). */
strata_status strata_gguf_writer_set_uint(strata_gguf_writer *w,
					  const char *key, strata_gguf_type t,
					  uint64_t v, strata_error *err);
strata_status strata_gguf_writer_set_f32(strata_gguf_writer *w,
					 const char *key, float v,
					 strata_error *err);
strata_status strata_gguf_writer_set_string(strata_gguf_writer *w,
					    const char *key, const char *s,
					    size_t len, strata_error *err);
/* An array of count scalars of type elem (packed host values at items)
 * or, for STRATA_GGUF_STRING, of NUL-terminated strings (items is
 * `const char *const *`). */
strata_status strata_gguf_writer_set_array(strata_gguf_writer *w,
					   const char *key,
					   strata_gguf_type elem,
					   const void *items, uint64_t count,
					   strata_error *err);
/* A tensor of type t (one ggml knows) and shape ne[0..n_dims) (ne[0]
 * innermost, GGUF's order; 1 to 4 dimensions); its bytes follow from
 * both (E_CKPT_SHAPE when the elements are not whole blocks). */
strata_status strata_gguf_writer_add_tensor(strata_gguf_writer *w,
					    const char *name, strata_dtype t,
					    uint32_t n_dims, const uint64_t *ne,
					    strata_error *err);
size_t strata_gguf_writer_tensor_count(const strata_gguf_writer *w);

/* Fills dst with the `bytes` payload bytes of tensor i (in the order
 * added); an error stops the write. */
typedef strata_status (*strata_gguf_fill_fn)(void *ctx, size_t i, void *dst,
					     uint64_t bytes,
					     strata_error *err);

/* Writes the file to path through strata_file_out: the header, then each
 * tensor's payload as fill produces it, one at a time (memory: the header
 * and the largest tensor). Any error (fill's, a write's, E_NOMEM) leaves
 * path as it was and no temporary file. The writer stays the caller's. */
strata_status strata_gguf_writer_write(strata_gguf_writer *w,
				       const char *path,
				       strata_gguf_fill_fn fill, void *ctx,
				       strata_error *err);

#endif
