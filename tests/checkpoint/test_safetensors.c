/* test_safetensors.c - the safetensors reader against files written by
 * transformers/safetensors (tests/data/checkpoints, expected.json), a real
 * third-party file, and generated sharded directories. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sys/stat.h>
#include <jansson.h>

#include "checkpoint/readers.h"
#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

#define DATA STRATA_SOURCE_DIR "/tests/data/"

static json_t *expected;

static int load_expected(void **state)
{
	(void)state;
	json_error_t je;
	expected = json_load_file(DATA "checkpoints/expected.json", 0, &je);
	return expected ? 0 : -1;
}

static int free_expected(void **state)
{
	(void)state;
	json_decref(expected);
	return 0;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* Every fact the libraries wrote equals what strata's catalog says. */
static void compare_with_expected(const char *model)
{
	char path[512];
	snprintf(path, sizeof path, DATA "checkpoints/%s", model);
	strata_catalog *c = NULL;
	strata_error e;
	if (strata_catalog_open(path, &c, &e))
		fail_msg("%s: %s", model, e.message);
	json_t *x = json_object_get(expected, model);
	json_t *tensors = json_object_get(x, "tensors");
	json_t *files = json_object_get(x, "files");
	assert_int_equal(strata_catalog_count(c), json_array_size(tensors));
	assert_int_equal(strata_catalog_file_count(c), json_array_size(files));
	for (size_t i = 0; i < json_array_size(files); i++) {
		json_t *f = json_array_get(files, i);
		const strata_catalog_file *cf = strata_catalog_file_at(c, i);
		assert_string_equal(base_name(cf->path),
				    json_string_value(json_object_get(f, "name")));
		assert_int_equal(cf->size,
				 json_integer_value(json_object_get(f, "size")));
	}
	uint64_t total = 0;
	for (size_t i = 0; i < json_array_size(tensors); i++) {
		json_t *t = json_array_get(tensors, i);
		const char *name = json_string_value(json_object_get(t, "name"));
		const strata_tensor *ct = strata_catalog_find(c, name);
		if (!ct)
			fail_msg("%s: tensor %s missing", model, name);
		/* expected.json is sorted by (file, offset): file order */
		assert_ptr_equal(ct, strata_catalog_tensor(c, i));
		assert_string_equal(strata_dtype_get(ct->dtype)->name,
				    json_string_value(json_object_get(t, "dtype")));
		json_t *shape = json_object_get(t, "shape");
		assert_int_equal(ct->n_dims, json_array_size(shape));
		for (size_t d = 0; d < ct->n_dims; d++) {
			uint64_t want = (uint64_t)json_integer_value(
				json_array_get(shape, d));
			assert_int_equal(ct->shape[d], want);
			assert_int_equal(ct->shape_hf[d], want);
		}
		assert_int_equal(ct->offset,
				 json_integer_value(json_object_get(t, "offset")));
		assert_int_equal(ct->bytes,
				 json_integer_value(json_object_get(t, "bytes")));
		assert_string_equal(
			base_name(strata_catalog_file_at(c, ct->file)->path),
			json_string_value(json_object_get(t, "file")));
		total += ct->bytes;
	}
	assert_int_equal(total, json_integer_value(
					json_object_get(x, "total_bytes")));
	strata_catalog_destroy(c);
}

static void tiny_llama_matches_transformers(void **s)
{
	(void)s;
	compare_with_expected("tiny-llama");
}

static void sharded_qwen2_matches_transformers(void **s)
{
	(void)s;
	compare_with_expected("tiny-qwen2-sharded");
}

static void tiny_mistral_matches_transformers(void **s)
{
	(void)s;
	compare_with_expected("tiny-mistral");
}

static void every_torch_dtype_matches_safetensors(void **s)
{
	(void)s;
	compare_with_expected("mixed-dtypes");
}

static void real_file_null_metadata_and_unordered_offsets(void **s)
{
	(void)s;
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(strata_catalog_open(
		DATA "safetensors/discollama-adapters.safetensors", &c, &e),
		STRATA_OK);
	assert_int_equal(strata_catalog_count(c), 8);
	/* file order is data order, not key order */
	const strata_tensor *t0 = strata_catalog_tensor(c, 0);
	assert_string_equal(t0->name, "model.layers.31.self_attn.q_proj.lora_b");
	assert_int_equal(t0->offset, 8 + 864);
	const strata_tensor *t = strata_catalog_find(
		c, "model.layers.30.self_attn.v_proj.lora_b");
	assert_int_equal(t->shape[0], 8);
	assert_int_equal(t->shape[1], 1024);
	assert_int_equal(t->offset, 8 + 864 + 131072);
	strata_catalog_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* Generated sharded directories                                            */
/* ------------------------------------------------------------------------ */

/* A shard with one F32 tensor per name, 4 elements each (zeros). */
static void write_shard(const char *dir, const char *file, const char *a,
			const char *b)
{
	char path[512];
	const ckw_tensor t[2] = {
		{.name = a, .type = CKW_F32, .n_dims = 1, .shape = {4}},
		{.name = b, .type = CKW_F32, .n_dims = 1, .shape = {4}},
	};
	snprintf(path, sizeof path, "%s/%s", dir, file);
	ckw_safetensors_file(path, t, b ? 2 : 1, NULL);
}

static void write_index(const char *dir, const char *map)
{
	char text[1024], path[512];
	snprintf(text, sizeof text, "{\"metadata\":{},\"weight_map\":{%s}}", map);
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	assert_int_equal(ckw_write_file(path, text, strlen(text)), 0);
}

static strata_status open_dir(const char *dir, strata_error *e)
{
	strata_catalog *c = NULL;
	strata_status s = strata_catalog_open(dir, &c, e);
	strata_catalog_destroy(c);
	return s;
}

static void index_faults_are_named(void **s)
{
	(void)s;
	char *d = ckw_temp_dir();
	strata_error e;
	write_shard(d, "a.safetensors", "x", "y");
	write_shard(d, "b.safetensors", "z", NULL);
	write_index(d, "\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_OK);

	/* listed shard missing */
	write_index(d, "\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"c.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "'c.safetensors', which does not exist"));

	/* index puts a tensor in the wrong shard */
	write_index(d, "\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"a.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "tensor 'z'"));

	/* a shard holds a tensor the index does not list */
	write_index(d, "\"x\":\"a.safetensors\",\"z\":\"b.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "'y'"));
	assert_non_null(strstr(e.message, "not listed"));

	/* index lists a tensor no shard has */
	write_index(d, "\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\",\"w\":\"b.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "'w'"));

	/* a tensor in two shards */
	write_shard(d, "b.safetensors", "z", "x");
	write_index(d, "\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_DUPLICATE);
	assert_non_null(strstr(e.message, "'x' appears twice"));

	/* a "shard" that is a FIFO is missing, never opened (it would block) */
	char fifo[600];
	snprintf(fifo, sizeof fifo, "%s/f.safetensors", d);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	write_index(d, "\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"f.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "'f.safetensors', which does not exist"));
	assert_int_equal(open_dir(fifo, &e), STRATA_E_CKPT_FORMAT);
	unlink(fifo);

	/* a shard name that climbs out of the directory */
	write_index(d, "\"x\":\"../a.safetensors\"");
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "not a plain file name"));

	/* no weight_map; not JSON */
	write_index(d, "");
	char path[512];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", d);
	ckw_write_file(path, "{\"metadata\":{}}", 15);
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "weight_map"));
	ckw_write_file(path, "{\"weight_map\":", 14);
	assert_int_equal(open_dir(d, &e), STRATA_E_CKPT_INDEX);
	assert_non_null(strstr(e.message, "not valid JSON"));
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	assert_int_equal(system(cmd), 0);
	free(d);
}

static void empty_directory_says_what_is_missing(void **s)
{
	(void)s;
	char *d = ckw_temp_dir();
	strata_error e;
	assert_int_equal(open_dir(d, &e), STRATA_E_NOT_FOUND);
	assert_non_null(strstr(e.message, "model.safetensors"));
	assert_true(strlen(e.fix) > 0);
	assert_int_equal(open_dir("/nonexistent-strata-model", &e),
			 STRATA_E_NOT_FOUND);
	rmdir(d);
	free(d);
}

/* The format's newer types: sub-byte floats size by bits (F4: 4 bits,
 * F6: 6 bits per element), F8_E8M0 and C64 by bytes. */
static void newer_dtypes_size_exactly(void **s)
{
	(void)s;
	const ckw_tensor t[] = {
		{.name = "a", .dtype = "F4", .n_dims = 2, .shape = {2, 4},
		 .bytes = 4},
		{.name = "b", .dtype = "F6_E3M2", .n_dims = 1, .shape = {8},
		 .bytes = 6},
		{.name = "c", .dtype = "F8_E8M0", .n_dims = 1, .shape = {3},
		 .bytes = 3},
		{.name = "d", .dtype = "C64", .n_dims = 1, .shape = {1},
		 .bytes = 8},
	};
	ckw_buf f = {0};
	ckw_safetensors(&f, t, 4, NULL);
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(strata__catalog_create(STRATA_FORMAT_SAFETENSORS, &c, &e), 0);
	if (strata__safetensors_read_mem(c, f.p, f.len, "new.safetensors", &e))
		fail_msg("%s", e.message);
	assert_int_equal(strata_catalog_find(c, "a")->dtype, STRATA_DTYPE_F4);
	assert_int_equal(strata_catalog_find(c, "a")->bytes, 4);
	assert_int_equal(strata_catalog_find(c, "b")->bytes, 6);
	assert_int_equal(strata_catalog_find(c, "c")->dtype, STRATA_DTYPE_F8_E8M0);
	assert_int_equal(strata_catalog_find(c, "d")->bytes, 8);
	strata_catalog_destroy(c);
	ckw_free(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tiny_llama_matches_transformers),
		cmocka_unit_test(sharded_qwen2_matches_transformers),
		cmocka_unit_test(tiny_mistral_matches_transformers),
		cmocka_unit_test(every_torch_dtype_matches_safetensors),
		cmocka_unit_test(real_file_null_metadata_and_unordered_offsets),
		cmocka_unit_test(index_faults_are_named),
		cmocka_unit_test(empty_directory_says_what_is_missing),
		cmocka_unit_test(newer_dtypes_size_exactly),
	};
	return cmocka_run_group_tests(tests, load_expected, free_expected);
}
