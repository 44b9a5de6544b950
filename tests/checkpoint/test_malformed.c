/* test_malformed.c - the catalogue of malformed checkpoints: each fault,
 * generated here from a valid file, is one enum value with the status code
 * and message fragment it must produce (ggml test-gguf.cpp style). Every
 * file is opened through strata_catalog_open, so each message must also
 * name the file. Plus OOM-injection loops over opening real files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "checkpoint/readers.h"
#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

/* X(NAME, expected status, fragment the message must contain) */
#define GGUF_FAULTS(X)                                                         \
	X(G_BAD_MAGIC, E_CKPT_FORMAT, "bad magic")                             \
	X(G_TRUNC_MAGIC, E_CKPT_TRUNCATED, "inside the magic number")          \
	X(G_TRUNC_VERSION, E_CKPT_TRUNCATED, "inside the header")              \
	X(G_TRUNC_COUNTS, E_CKPT_TRUNCATED, "inside the header")               \
	X(G_VERSION_0, E_CKPT_VERSION, "version 0")                            \
	X(G_VERSION_4, E_CKPT_VERSION, "version 4")                            \
	X(G_BIG_ENDIAN, E_CKPT_VERSION, "big-endian GGUF v3")                  \
	X(G_HUGE_TENSOR_COUNT, E_CKPT_LIMIT, "1099511627776 tensors")          \
	X(G_HUGE_KV_COUNT, E_CKPT_LIMIT, "1099511627776 metadata pairs")       \
	X(G_TRUNC_KEY_LEN, E_CKPT_LIMIT, "claims 3 metadata pairs but only 3 bytes are left") \
	X(G_KEY_LEN_LIES, E_CKPT_TRUNCATED, "-byte string but only")           \
	X(G_EMPTY_KEY, E_CKPT_NAME, "metadata key 0 '' is empty")              \
	X(G_KEY_BAD_UTF8, E_CKPT_NAME, "not valid UTF-8")                      \
	X(G_DUP_KEY, E_CKPT_METADATA, "'general.architecture' appears twice")  \
	X(G_BAD_VALUE_TYPE, E_CKPT_METADATA, "unknown value type 13")          \
	X(G_TRUNC_VALUE, E_CKPT_TRUNCATED, "metadata value 'general.alignment'") \
	X(G_STRING_LEN_LIES, E_CKPT_TRUNCATED, "claims a 1152921504606846976-byte string") \
	X(G_BAD_BOOL, E_CKPT_METADATA, "must be 0 or 1")                       \
	X(G_ARRAY_HUGE_COUNT, E_CKPT_LIMIT, "claims 1099511627776 u32 elements") \
	X(G_ARRAY_BAD_ELEM_TYPE, E_CKPT_METADATA, "unknown value type 77")     \
	X(G_ARRAY_TOO_DEEP, E_CKPT_LIMIT, "nests arrays deeper than 8")        \
	X(G_ALIGN_NOT_POW2, E_CKPT_ALIGNMENT, "48, not a power of two")        \
	X(G_ALIGN_ZERO, E_CKPT_ALIGNMENT, "0, not a power of two")             \
	X(G_ALIGN_WRONG_TYPE, E_CKPT_ALIGNMENT, "has type u64, not u32")       \
	X(G_TRUNC_TENSOR_NAME, E_CKPT_LIMIT, "claims 2 tensors but only 3 bytes are left") \
	X(G_TENSOR_NAME_LEN_LIES, E_CKPT_TRUNCATED, "name of tensor info 0 claims a 1048576-byte string") \
	X(G_TENSOR_NAME_TOO_LONG, E_CKPT_LIMIT, "2000 bytes long")             \
	X(G_TENSOR_NAME_BAD_UTF8, E_CKPT_NAME, "tensor 0 name 'a\\xc3(' is empty or not valid UTF-8") \
	X(G_DUP_TENSOR, E_CKPT_DUPLICATE, "tensor 'a' appears twice")          \
	X(G_TOO_MANY_DIMS, E_CKPT_SHAPE, "has 5 dimensions")                   \
	X(G_ZERO_DIMS, E_CKPT_SHAPE, "has 0 dimensions")                       \
	X(G_ZERO_DIM, E_CKPT_SHAPE, "dimension 1 is 0")                        \
	X(G_DIM_OVERFLOW, E_OVERFLOW, "element count of tensor 'a' overflows") \
	X(G_BAD_GGML_TYPE, E_CKPT_DTYPE, "unknown ggml type 4")                \
	X(G_ROW_NOT_BLOCKS, E_CKPT_SHAPE, "not a whole number of Q8_0 blocks") \
	X(G_MISALIGNED_OFFSET, E_CKPT_ALIGNMENT, "offset 16 is not a multiple of the alignment 32") \
	X(G_TENSOR_PAST_EOF, E_CKPT_RANGE, "cannot fit in a")                  \
	X(G_TENSORS_OVERLAP, E_CKPT_RANGE, "tensors 'a' and 'b' overlap")      \
	X(G_DATA_TRUNCATED, E_CKPT_RANGE, "tensor 'b' ends past the end of the file") \
	X(G_TRUNC_TENSOR_INFO, E_CKPT_TRUNCATED, "info of tensor 'b'")        \
	X(G_TRUNC_ARRAY, E_CKPT_LIMIT, "'x.extra' claims 2 u8 elements but only 1 bytes are left")

#define ST_FAULTS(X)                                                           \
	X(S_SHORT_FILE, E_CKPT_TRUNCATED, "too short for a safetensors header length") \
	X(S_LEN_PAST_EOF, E_CKPT_TRUNCATED, "runs past the end of the")        \
	X(S_LEN_OVER_CAP, E_CKPT_LIMIT, "over the format's 100 MB limit")      \
	X(S_NOT_JSON, E_CKPT_HEADER, "not valid JSON")                         \
	X(S_NOT_OBJECT, E_CKPT_HEADER, "JSON but not an object")               \
	X(S_DUP_KEYS, E_CKPT_HEADER, "duplicate object key")                   \
	X(S_BAD_UTF8_NAME, E_CKPT_HEADER, "not valid JSON")                    \
	X(S_META_NOT_STRING, E_CKPT_METADATA, "__metadata__ value 'n' is not a string") \
	X(S_META_NOT_OBJECT, E_CKPT_METADATA, "__metadata__ is not an object") \
	X(S_UNKNOWN_DTYPE, E_CKPT_DTYPE, "tensor 'a' has unknown dtype 'Q4'")  \
	X(S_NO_DTYPE, E_CKPT_HEADER, "tensor 'a' has no dtype string")         \
	X(S_NEGATIVE_DIM, E_CKPT_SHAPE, "dimension 0 is not a non-negative integer") \
	X(S_SHAPE_OVERFLOW, E_OVERFLOW, "element count of tensor 'a' overflows") \
	X(S_TOO_MANY_DIMS, E_CKPT_LIMIT, "tensor 'a' has 9 dimensions")        \
	X(S_SHAPE_BYTES_MISMATCH, E_CKPT_SHAPE, "needs 16 bytes but its range holds 12") \
	X(S_OFFSETS_REVERSED, E_CKPT_RANGE, "byte range [16, 8)")              \
	X(S_OFFSETS_PAST_DATA, E_CKPT_RANGE, "is not inside the 32-byte data section") \
	X(S_OVERLAP, E_CKPT_RANGE, "tensors 'a' and 'b' overlap")              \
	X(S_HOLE, E_CKPT_RANGE, "8 bytes before tensor 'b' belong to no tensor") \
	X(S_TRAILING_BYTES, E_CKPT_RANGE, "last 8 bytes of the data section belong to no tensor") \
	X(S_EMPTY_NAME, E_CKPT_NAME, "tensor name '' is empty")                \
	X(S_OFFSETS_NOT_PAIR, E_CKPT_HEADER, "data_offsets is not [begin, end]") \
	X(S_SUBBYTE_NOT_WHOLE, E_CKPT_SHAPE, "3 elements of F4 are not a whole number of 2-element blocks") \
	X(S_HEADER_NOT_UTF8_JSON_NUL, E_CKPT_HEADER, "not valid JSON")        \
	X(S_DATA_TRUNCATED, E_CKPT_RANGE, "[16, 32) is not inside the 20-byte data section")

typedef enum fault {
#define ENUM(name, code, text) name,
	GGUF_FAULTS(ENUM) G_COUNT_, ST_FAULTS(ENUM) FAULT_COUNT
#undef ENUM
} fault;

typedef struct expect {
	const char *name;
	strata_status code;
	const char *text;
} expect;

static const expect expected[] = {
#define ROW(name, code, text) [name] = {#name, STRATA_##code, text},
	GGUF_FAULTS(ROW) ST_FAULTS(ROW)
#undef ROW
};

/* ------------------------------------------------------------------------ */
/* GGUF: a valid file of two tensors, bent per fault                        */
/* ------------------------------------------------------------------------ */

typedef struct marks {
	size_t version, counts, key0, value1, name0, info1_end, array_elems;
} marks;

static void tensor_info(ckw_buf *b, fault f, const char *name, uint32_t nd,
			const uint64_t *dims, uint32_t type, uint64_t off)
{
	if (f == G_TENSOR_NAME_LEN_LIES && !strcmp(name, "a")) {
		ckw_u64(b, 1u << 20);
	} else if (f == G_TENSOR_NAME_TOO_LONG && !strcmp(name, "a")) {
		ckw_u64(b, 2000);
		for (int i = 0; i < 2000; i++)
			ckw_u8(b, 'n');
	} else {
		ckw_str(b, name);
	}
	ckw_u32(b, nd);
	for (uint32_t d = 0; d < nd; d++)
		ckw_u64(b, dims[d]);
	ckw_u32(b, type);
	ckw_u64(b, off);
}

static void gguf_kvs(ckw_buf *b, fault f, marks *m)
{
	m->key0 = b->len;
	const char *k0 = f == G_EMPTY_KEY ? "" : f == G_KEY_BAD_UTF8 ? "gen\xff" : "general.architecture";
	ckw_str(b, k0);
	ckw_u32(b, f == G_BAD_VALUE_TYPE ? 13 : STRATA_GGUF_STRING);
	if (f == G_STRING_LEN_LIES)
		ckw_u64(b, 1ull << 60);
	else
		ckw_str(b, "llama");
	if (f == G_KEY_LEN_LIES) { /* key 1 claims more than the file has */
		ckw_u64(b, 1u << 30);
		return;
	}
	ckw_str(b, "general.alignment");
	ckw_u32(b, f == G_ALIGN_WRONG_TYPE ? STRATA_GGUF_U64 : STRATA_GGUF_U32);
	m->value1 = b->len + 2;
	uint32_t a = f == G_ALIGN_NOT_POW2 ? 48 : f == G_ALIGN_ZERO ? 0 : 32;
	if (f == G_ALIGN_WRONG_TYPE)
		ckw_u64(b, a);
	else
		ckw_u32(b, a);
	ckw_str(b, f == G_DUP_KEY ? "general.architecture" : "x.extra");
	switch (f) {
	case G_BAD_BOOL:
		ckw_u32(b, STRATA_GGUF_BOOL);
		ckw_u8(b, 2);
		break;
	case G_ARRAY_HUGE_COUNT:
		ckw_u32(b, STRATA_GGUF_ARRAY);
		ckw_u32(b, STRATA_GGUF_U32);
		ckw_u64(b, 1ull << 40);
		break;
	case G_ARRAY_BAD_ELEM_TYPE:
		ckw_u32(b, STRATA_GGUF_ARRAY);
		ckw_u32(b, 77);
		ckw_u64(b, 1);
		break;
	case G_ARRAY_TOO_DEEP:
		ckw_u32(b, STRATA_GGUF_ARRAY);
		for (int i = 0; i < 10; i++) {
			ckw_u32(b, STRATA_GGUF_ARRAY);
			ckw_u64(b, 1);
		}
		ckw_zero(b, 64);
		break;
	default: /* [[1, 2]] of u8 */
		ckw_u32(b, STRATA_GGUF_ARRAY);
		ckw_u32(b, STRATA_GGUF_ARRAY);
		ckw_u64(b, 1);
		ckw_u32(b, STRATA_GGUF_U8);
		m->array_elems = b->len + 8;
		ckw_u64(b, 2);
		ckw_u8(b, 1);
		ckw_u8(b, 2);
	}
}

static void gguf_tensors(ckw_buf *b, fault f, marks *m)
{
	uint64_t dims[5] = {32, 2, 1, 1, 1};
	uint32_t nd = f == G_TOO_MANY_DIMS ? 5 : f == G_ZERO_DIMS ? 0 : 2;
	uint32_t type = 0; /* F32: 256 bytes */
	if (f == G_ZERO_DIM)
		dims[1] = 0;
	if (f == G_TRUNC_TENSOR_INFO) /* small enough to fit what is left */
		dims[1] = 1;
	if (f == G_DIM_OVERFLOW)
		dims[0] = dims[1] = 1ull << 40;
	if (f == G_BAD_GGML_TYPE)
		type = 4;
	if (f == G_ROW_NOT_BLOCKS)
		dims[0] = 16, type = 8;
	uint64_t off = f == G_MISALIGNED_OFFSET ? 16
		       : f == G_TENSOR_PAST_EOF ? 1ull << 40 : 0;
	m->name0 = b->len + 3;
	const char *n0 = f == G_TENSOR_NAME_BAD_UTF8 ? "a\xc3(" : "a";
	tensor_info(b, f, n0, nd, dims, type, off);
	uint64_t d1[1] = {32};
	tensor_info(b, f, f == G_DUP_TENSOR ? "a" : "b", 1, d1, 1,
		    f == G_TENSORS_OVERLAP ? 128 : 256);
	m->info1_end = b->len - 3;
}

static void build_gguf(fault f, ckw_buf *b)
{
	marks m = {0};
	ckw_put(b, f == G_BAD_MAGIC ? "GGUX" : "GGUF", 4);
	m.version = b->len + 2;
	ckw_u32(b, f == G_VERSION_0 ? 0 : f == G_VERSION_4 ? 4
		 : f == G_BIG_ENDIAN ? 0x03000000u : 3);
	m.counts = b->len + 5;
	ckw_u64(b, f == G_HUGE_TENSOR_COUNT ? 1ull << 40 : 2);
	ckw_u64(b, f == G_HUGE_KV_COUNT ? 1ull << 40 : 3);
	gguf_kvs(b, f, &m);
	gguf_tensors(b, f, &m);
	ckw_pad(b, 32);
	for (int i = 0; i < 320; i++)
		ckw_u8(b, (uint8_t)i);
	size_t cut = f == G_TRUNC_MAGIC ? 2 : f == G_TRUNC_VERSION ? m.version
		   : f == G_TRUNC_COUNTS ? m.counts : f == G_TRUNC_KEY_LEN ? m.key0 + 3
		   : f == G_TRUNC_VALUE ? m.value1 : f == G_TRUNC_TENSOR_NAME ? m.name0
		   : f == G_TRUNC_TENSOR_INFO ? m.info1_end
		   : f == G_TRUNC_ARRAY ? m.array_elems + 1
		   : f == G_DATA_TRUNCATED ? b->len - 10 : b->len;
	b->len = cut;
}

/* ------------------------------------------------------------------------ */
/* safetensors: headers with two F32 tensors a [4] and b [4]                 */
/* ------------------------------------------------------------------------ */

#define A_OK "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"
#define B_OK "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}"

static void st_file(ckw_buf *b, const char *hdr, size_t hdr_len, size_t data)
{
	ckw_u64(b, hdr_len);
	ckw_put(b, hdr, hdr_len);
	ckw_zero(b, data);
}

static void build_st(fault f, ckw_buf *b)
{
	const char *h = NULL;
	size_t data = 32;
	switch (f) {
	case S_SHORT_FILE: ckw_put(b, "\x10\0\0\0\0", 5); return;
	case S_LEN_PAST_EOF: ckw_u64(b, 4096); ckw_put(b, "{}", 2); return;
	case S_LEN_OVER_CAP: ckw_u64(b, 200000000); ckw_put(b, "{}", 2); return;
	case S_NOT_JSON: h = "{\"a\":"; break;
	case S_NOT_OBJECT: h = "[1,2]"; break;
	case S_DUP_KEYS: h = "{" A_OK "," A_OK "}"; break;
	case S_BAD_UTF8_NAME: h = "{\"a\xff\":{}}"; break;
	case S_META_NOT_STRING: h = "{\"__metadata__\":{\"n\":1}," A_OK "," B_OK "}"; break;
	case S_META_NOT_OBJECT: h = "{\"__metadata__\":[]," A_OK "," B_OK "}"; break;
	case S_UNKNOWN_DTYPE: h = "{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}," B_OK "}"; break;
	case S_NO_DTYPE: h = "{\"a\":{\"shape\":[4],\"data_offsets\":[0,16]}," B_OK "}"; break;
	case S_NEGATIVE_DIM: h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}," B_OK "}"; break;
	case S_SHAPE_OVERFLOW: h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,16]}," B_OK "}"; break;
	case S_TOO_MANY_DIMS: h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,16]}," B_OK "}"; break;
	case S_SHAPE_BYTES_MISMATCH: h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}," B_OK "}"; break;
	case S_OFFSETS_REVERSED: h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,8]}," B_OK "}"; break;
	case S_OFFSETS_PAST_DATA: h = "{" A_OK ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[32,48]}}"; break;
	case S_OVERLAP: h = "{" A_OK ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}"; data = 24; break;
	case S_HOLE: h = "{" A_OK ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}"; data = 40; break;
	case S_TRAILING_BYTES: h = "{" A_OK "," B_OK "}"; data = 40; break;
	case S_EMPTY_NAME: h = "{\"\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}," B_OK "}"; break;
	case S_OFFSETS_NOT_PAIR: h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}," B_OK "}"; break;
	case S_SUBBYTE_NOT_WHOLE: h = "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}," B_OK "}"; break;
	case S_HEADER_NOT_UTF8_JSON_NUL: st_file(b, "{\"a\0\":1}", 9, 0); return;
	case S_DATA_TRUNCATED: h = "{" A_OK "," B_OK "}"; data = 20; break;
	default: fail_msg("no builder for fault %d", (int)f);
	}
	st_file(b, h, strlen(h), data);
}

/* ------------------------------------------------------------------------ */

static void each_fault_gives_its_error(void **state)
{
	(void)state;
	char *dir = ckw_temp_dir();
	int checked = 0, bad = 0;
	for (int f = 0; f < FAULT_COUNT; f++) {
		if (f == G_COUNT_)
			continue;
		const expect *x = &expected[f];
		ckw_buf b = {0};
		char path[512];
		if (f < G_COUNT_)
			build_gguf((fault)f, &b);
		else
			build_st((fault)f, &b);
		snprintf(path, sizeof path, "%s/%s.%s", dir, x->name,
			 f < G_COUNT_ ? "gguf" : "safetensors");
		assert_int_equal(ckw_write_file(path, b.p, b.len), 0);
		ckw_free(&b);
		strata_catalog *c = NULL;
		strata_error e;
		strata_status s = strata_catalog_open(path, &c, &e);
		if (s != x->code || !strstr(e.message, x->text) ||
		    !strstr(e.message, x->name) || !e.fix[0] || c) {
			print_error("%s: got %s '%s' (fix '%s'), want %s '%s'\n",
				    x->name, strata_status_name(s),
				    s ? e.message : "", s ? e.fix : "",
				    strata_status_name(x->code), x->text);
			bad++;
		}
		unlink(path);
		checked++;
	}
	assert_int_equal(bad, 0);
	assert_true(checked >= 30);
	rmdir(dir);
	free(dir);
}

/* The unbent builders give files that open: the faults are the only
 * difference. */
static void the_base_files_are_valid(void **state)
{
	(void)state;
	ckw_buf b = {0};
	strata_catalog *c = NULL;
	strata_error e;
	build_gguf(FAULT_COUNT, &b);
	assert_int_equal(strata__catalog_create(STRATA_FORMAT_GGUF, &c, &e), 0);
	if (strata__gguf_read_mem(c, b.p, b.len, "base.gguf", &e))
		fail_msg("%s", e.message);
	assert_int_equal(strata_catalog_count(c), 2);
	strata_catalog_destroy(c);
	ckw_free(&b);
	const char *h = "{\"__metadata__\":{\"n\":\"1\"}," A_OK "," B_OK "}";
	st_file(&b, h, strlen(h), 32);
	assert_int_equal(strata__catalog_create(STRATA_FORMAT_SAFETENSORS, &c, &e), 0);
	if (strata__safetensors_read_mem(c, b.p, b.len, "base.safetensors", &e))
		fail_msg("%s", e.message);
	assert_int_equal(strata_catalog_count(c), 2);
	strata_catalog_destroy(c);
	ckw_free(&b);
}

/* SQLite faultsim: fail the n-th allocation for n = 0, 1, ... until the
 * open succeeds; every failure is E_NOMEM and leaks nothing (ASan). */
static void oom_loop(const char *path)
{
	long k;
	for (k = 0;; k++) {
		strata_catalog *c = NULL;
		strata_error e;
		strata_alloc_fail_after(k);
		strata_status s = strata_catalog_open(path, &c, &e);
		strata_alloc_fail_after(-1);
		if (!s) {
			strata_catalog_destroy(c);
			break;
		}
		if (s != STRATA_E_NOMEM)
			fail_msg("%s: n=%ld gave %s: %s", path, k,
				 strata_status_name(s), e.message);
		assert_null(c);
	}
	assert_true(k > 2);
}

/* jansson allocates with malloc (its parse errors do not tell an allocation
 * failure apart reliably), so the loop covers strata's own allocations. */
static void oom_while_opening_fails_cleanly(void **state)
{
	(void)state;
	oom_loop(STRATA_SOURCE_DIR "/tests/data/gguf/stories260K.gguf");
	oom_loop(STRATA_SOURCE_DIR "/tests/data/gguf/ggml-vocab-bert-bge.gguf");
	oom_loop(STRATA_SOURCE_DIR "/tests/data/checkpoints/tiny-qwen2-sharded");
	oom_loop(STRATA_SOURCE_DIR "/tests/data/checkpoints/mixed-dtypes");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_base_files_are_valid),
		cmocka_unit_test(each_fault_gives_its_error),
		cmocka_unit_test(oom_while_opening_fails_cleanly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
