/* test_gguf.c - the GGUF reader on real files and on generated edge cases:
 * catalog facts, metadata getters, nested arrays, versions, endianness. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/readers.h"
#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

#define DATA STRATA_SOURCE_DIR "/tests/data/gguf/"

static strata_catalog *open_ok(const char *path)
{
	strata_catalog *c = NULL;
	strata_error e;
	strata_status s = strata_catalog_open(path, &c, &e);
	if (s)
		fail_msg("%s: %s / %s", path, e.message, e.fix);
	return c;
}

static void stories260k_catalog_facts(void **state)
{
	(void)state;
	strata_catalog *c = open_ok(DATA "stories260K.gguf");
	assert_int_equal(strata_catalog_format(c), STRATA_FORMAT_GGUF);
	assert_int_equal(strata_catalog_count(c), 48);
	assert_int_equal(strata_catalog_file_count(c), 1);
	const strata_catalog_file *f = strata_catalog_file_at(c, 0);
	assert_int_equal(f->size, 1185376);
	assert_int_equal(f->data_offset % 32, 0);
	const strata_tensor *t = strata_catalog_find(c, "token_embd.weight");
	assert_non_null(t);
	assert_int_equal(t->dtype, STRATA_DTYPE_F32);
	assert_int_equal(t->n_dims, 2);
	assert_int_equal(t->shape[0], 64);   /* ne[0]: the embedding width */
	assert_int_equal(t->shape[1], 512);  /* vocab */
	assert_int_equal(t->shape_hf[0], 512);
	assert_int_equal(t->shape_hf[1], 64);
	assert_int_equal(t->bytes, 512 * 64 * 4);
	t = strata_catalog_find(c, "blk.4.ffn_down.weight");
	assert_non_null(t);
	assert_int_equal(t->shape[0], 172);
	assert_int_equal(t->shape[1], 64);
	assert_null(strata_catalog_find(c, "blk.5.ffn_down.weight"));
	/* every tensor inside the data section and the sum fits the file */
	uint64_t sum = 0;
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *x = strata_catalog_tensor(c, i);
		assert_true(x->offset >= f->data_offset);
		assert_true(x->offset + x->bytes <= f->size);
		assert_int_equal((x->offset - f->data_offset) % 32, 0);
		assert_ptr_equal(strata_catalog_find(c, x->name), x);
		sum += x->bytes;
	}
	assert_true(sum <= f->size - f->data_offset);
	assert_true(sum > f->size - f->data_offset - 48 * 32);
	strata_catalog_destroy(c);
}

static void stories260k_metadata_getters(void **state)
{
	(void)state;
	strata_catalog *c = open_ok(DATA "stories260K.gguf");
	const strata_gguf *g = strata_catalog_gguf(c);
	strata_error e;
	assert_non_null(g);
	const char *s;
	size_t n;
	assert_int_equal(strata_gguf_get_string(g, "general.architecture", &s,
						&n, &e), STRATA_OK);
	assert_int_equal(n, 5);
	assert_memory_equal(s, "llama", 5);
	uint64_t u;
	assert_int_equal(strata_gguf_get_u64(g, "llama.embedding_length", &u,
					     &e), STRATA_OK);
	assert_int_equal(u, 64);
	assert_int_equal(strata_gguf_get_u64(g, "llama.block_count", &u, &e),
			 STRATA_OK);
	assert_int_equal(u, 5);
	assert_int_equal(strata_gguf_get_u64(g, "llama.attention.head_count_kv",
					     &u, &e), STRATA_OK);
	assert_int_equal(u, 4);
	double d;
	assert_int_equal(strata_gguf_get_f64(g,
			"llama.attention.layer_norm_rms_epsilon", &d, &e),
			 STRATA_OK);
	assert_true(d > 0.9e-5 && d < 1.1e-5);
	/* a string is not a number: E_CKPT_METADATA naming the key */
	assert_int_equal(strata_gguf_get_u64(g, "general.architecture", &u, &e),
			 STRATA_E_CKPT_METADATA);
	assert_non_null(strstr(e.message, "general.architecture"));
	assert_int_equal(strata_gguf_get_u64(g, "no.such.key", &u, &e),
			 STRATA_E_NOT_FOUND);
	/* the vocabulary: 512 strings, 512 f32 scores */
	strata_gguf_type et;
	uint64_t count;
	assert_int_equal(strata_gguf_get_array(g, "tokenizer.ggml.tokens", &et,
					       &count, &e), STRATA_OK);
	assert_int_equal(et, STRATA_GGUF_STRING);
	assert_int_equal(count, 512);
	long kv = strata_gguf_find(g, "tokenizer.ggml.tokens");
	assert_true(kv >= 0);
	assert_int_equal(strata_gguf_kv_type(g, kv), STRATA_GGUF_ARRAY);
	strata_gguf_array_string(g, kv, 1, &s, &n);
	assert_int_equal(n, 3);
	assert_memory_equal(s, "<s>", 3);
	assert_int_equal(strata_gguf_get_array(g, "tokenizer.ggml.scores", &et,
					       &count, &e), STRATA_OK);
	assert_int_equal(et, STRATA_GGUF_F32);
	assert_int_equal(count, 512);
	/* the file's own odd key: u32 0xFFFFFFFF */
	assert_int_equal(strata_gguf_get_u64(g,
			"tokenizer.ggml.seperator_token_id", &u, &e), STRATA_OK);
	assert_int_equal(u, 0xFFFFFFFFu);
	strata_catalog_destroy(c);
}

static void llama2_tiny_f16_and_vocab(void **state)
{
	(void)state;
	strata_catalog *c = open_ok(DATA "llama-2-tiny-random.gguf");
	assert_int_equal(strata_catalog_count(c), 12);
	int f16 = 0, f32 = 0;
	for (size_t i = 0; i < 12; i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		f16 += t->dtype == STRATA_DTYPE_F16;
		f32 += t->dtype == STRATA_DTYPE_F32;
	}
	assert_int_equal(f16, 9);
	assert_int_equal(f32, 3);
	const strata_tensor *t = strata_catalog_find(c, "token_embd.weight");
	assert_non_null(t);
	assert_int_equal(t->shape[0], 8);
	assert_int_equal(t->shape[1], 32000);
	uint64_t count;
	strata_gguf_type et;
	strata_error e;
	assert_int_equal(strata_gguf_get_array(strata_catalog_gguf(c),
			"tokenizer.ggml.tokens", &et, &count, &e), STRATA_OK);
	assert_int_equal(count, 32000);
	strata_catalog_destroy(c);
}

static void vocab_only_file_opens(void **state)
{
	(void)state;
	strata_catalog *c = open_ok(DATA "ggml-vocab-bert-bge.gguf");
	assert_int_equal(strata_catalog_count(c), 0);
	const strata_gguf *g = strata_catalog_gguf(c);
	const char *s;
	size_t n;
	strata_error e;
	assert_int_equal(strata_gguf_get_string(g, "tokenizer.ggml.model", &s,
						&n, &e), STRATA_OK);
	assert_memory_equal(s, "bert", 4);
	assert_int_equal(strata_gguf_get_string(g, "general.architecture", &s,
						&n, &e), STRATA_OK);
	strata_catalog_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* Generated files                                                          */
/* ------------------------------------------------------------------------ */

static strata_status parse(ckw_buf *b, strata_catalog **out, strata_error *e)
{
	strata_catalog *c = NULL;
	strata_status s = strata__catalog_create(STRATA_FORMAT_GGUF, &c, e);
	if (!s)
		s = strata__gguf_read_mem(c, b->p, b->len, "mem.gguf", e);
	if (s || !out)
		strata_catalog_destroy(c);
	else
		*out = c;
	return s;
}

static void nested_arrays_and_every_scalar_type(void **state)
{
	(void)state;
	ckw_buf b = {0};
	ckw_put(&b, "GGUF", 4);
	ckw_u32(&b, 2);	/* version 2 */
	ckw_u64(&b, 0);	/* tensors */
	ckw_u64(&b, 5);	/* pairs */
	ckw_str(&b, "a.i8"); ckw_u32(&b, STRATA_GGUF_I8); ckw_u8(&b, 0xfe);
	ckw_str(&b, "a.f64"); ckw_u32(&b, STRATA_GGUF_F64);
	double d = 2.5; uint64_t bits; memcpy(&bits, &d, 8); ckw_u64(&b, bits);
	ckw_str(&b, "a.bool"); ckw_u32(&b, STRATA_GGUF_BOOL); ckw_u8(&b, 1);
	/* [[1,2],[3]] as arrays of i16 */
	ckw_str(&b, "a.nested"); ckw_u32(&b, STRATA_GGUF_ARRAY);
	ckw_u32(&b, STRATA_GGUF_ARRAY); ckw_u64(&b, 2);
	ckw_u32(&b, STRATA_GGUF_I16); ckw_u64(&b, 2); ckw_u8(&b, 1); ckw_u8(&b, 0);
	ckw_u8(&b, 0xff); ckw_u8(&b, 0xff);
	ckw_u32(&b, STRATA_GGUF_I16); ckw_u64(&b, 1); ckw_u8(&b, 3); ckw_u8(&b, 0);
	ckw_str(&b, "a.strs"); ckw_u32(&b, STRATA_GGUF_ARRAY);
	ckw_u32(&b, STRATA_GGUF_STRING); ckw_u64(&b, 2); ckw_str(&b, "x");
	ckw_u64(&b, 3); ckw_put(&b, "a\0b", 3); /* a NUL inside a string value */
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(parse(&b, &c, &e), STRATA_OK);
	const strata_gguf *g = strata_catalog_gguf(c);
	double f;
	uint64_t u;
	bool bo;
	assert_int_equal(strata_gguf_get_f64(g, "a.i8", &f, &e), STRATA_OK);
	assert_true(f == -2.0);
	assert_int_equal(strata_gguf_get_u64(g, "a.i8", &u, &e),
			 STRATA_E_CKPT_METADATA); /* negative */
	assert_int_equal(strata_gguf_get_f64(g, "a.f64", &f, &e), STRATA_OK);
	assert_true(f == 2.5);
	assert_int_equal(strata_gguf_get_bool(g, "a.bool", &bo, &e), STRATA_OK);
	assert_true(bo);
	strata_gguf_type et;
	uint64_t n;
	assert_int_equal(strata_gguf_get_array(g, "a.nested", &et, &n, &e),
			 STRATA_OK);
	assert_int_equal(et, STRATA_GGUF_ARRAY);
	assert_int_equal(n, 2);
	long kv = strata_gguf_find(g, "a.strs");
	const char *s;
	size_t len;
	strata_gguf_array_string(g, kv, 1, &s, &len);
	assert_int_equal(len, 3);
	assert_memory_equal(s, "a\0b", 3);
	strata_catalog_destroy(c);
	ckw_free(&b);
}

static void scalar_array_elements(void **state)
{
	(void)state;
	ckw_buf b = {0};
	ckw_put(&b, "GGUF", 4);
	ckw_u32(&b, 3); ckw_u64(&b, 0); ckw_u64(&b, 1);
	ckw_str(&b, "ids"); ckw_u32(&b, STRATA_GGUF_ARRAY);
	ckw_u32(&b, STRATA_GGUF_I32); ckw_u64(&b, 2);
	ckw_u32(&b, 7); ckw_u32(&b, 0xffffffffu);
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(parse(&b, &c, &e), STRATA_OK);
	const strata_gguf *g = strata_catalog_gguf(c);
	long kv = strata_gguf_find(g, "ids");
	assert_int_equal(strata_gguf_array_i64(g, kv, 0), 7);
	assert_int_equal(strata_gguf_array_i64(g, kv, 1), -1);
	assert_true(strata_gguf_array_f64(g, kv, 1) == -1.0);
	strata_catalog_destroy(c);
	ckw_free(&b);
}

static void version_one_and_big_endian_are_refused(void **state)
{
	(void)state;
	ckw_buf b = {0};
	strata_error e;
	ckw_put(&b, "GGUF", 4);
	ckw_u32(&b, 1);
	ckw_zero(&b, 16);
	assert_int_equal(parse(&b, NULL, &e), STRATA_E_CKPT_VERSION);
	assert_non_null(strstr(e.message, "version 1"));
	b.len = 4;
	ckw_u32(&b, 0x03000000u); /* 3 written big-endian */
	ckw_zero(&b, 16);
	assert_int_equal(parse(&b, NULL, &e), STRATA_E_CKPT_VERSION);
	assert_non_null(strstr(e.message, "big-endian"));
	ckw_free(&b);
}

static void quantised_sizes_are_exact(void **state)
{
	(void)state;
	/* one tensor of every ggml type, 256 x 2 elements */
	ckw_buf b = {0};
	int types = 0;
	for (int t = 0; t < STRATA_DTYPE_COUNT; t++)
		types += strata_dtype_ggml_id((strata_dtype)t) >= 0;
	assert_int_equal(types, 32); /* ggml ids 0..39 less 4, 5, 31-33, 36-38 */
	ckw_put(&b, "GGUF", 4);
	ckw_u32(&b, 3); ckw_u64(&b, (uint64_t)types); ckw_u64(&b, 0);
	uint64_t off = 0;
	for (int t = 0; t < STRATA_DTYPE_COUNT; t++) {
		int id = strata_dtype_ggml_id((strata_dtype)t);
		if (id < 0)
			continue;
		char name[32];
		snprintf(name, sizeof name, "t.%d", id);
		ckw_str(&b, name); ckw_u32(&b, 2); ckw_u64(&b, 256); ckw_u64(&b, 2);
		ckw_u32(&b, (uint32_t)id); ckw_u64(&b, off);
		const strata_dtype_info *d = strata_dtype_get((strata_dtype)t);
		uint64_t bytes_ = 512 / d->block_elements * d->block_bytes;
		off += (bytes_ + 31) / 32 * 32;
	}
	ckw_pad(&b, 32);
	ckw_zero(&b, off);
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(parse(&b, &c, &e), STRATA_OK);
	const strata_tensor *q4k = strata_catalog_find(c, "t.12");
	assert_int_equal(q4k->dtype, STRATA_DTYPE_Q4_K);
	assert_int_equal(q4k->bytes, 2 * 144);
	const strata_tensor *mx = strata_catalog_find(c, "t.39");
	assert_int_equal(mx->dtype, STRATA_DTYPE_MXFP4);
	assert_int_equal(mx->bytes, 16 * 17);
	const strata_tensor *tq1 = strata_catalog_find(c, "t.34");
	assert_int_equal(tq1->bytes, 2 * 54);
	strata_catalog_destroy(c);
	ckw_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stories260k_catalog_facts),
		cmocka_unit_test(stories260k_metadata_getters),
		cmocka_unit_test(llama2_tiny_f16_and_vocab),
		cmocka_unit_test(vocab_only_file_opens),
		cmocka_unit_test(nested_arrays_and_every_scalar_type),
		cmocka_unit_test(scalar_array_elements),
		cmocka_unit_test(version_one_and_big_endian_are_refused),
		cmocka_unit_test(quantised_sizes_are_exact),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
