/* test_inspect.c - `strata inspect` end to end: its JSON against the
 * facts transformers wrote, the text form on a real GGUF file, and exit
 * codes and messages for bad input and bad usage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"

#define DATA STRATA_SOURCE_DIR "/tests/data/"

static void json_matches_transformers_facts(void **s)
{
	(void)s;
	const char *argv[] = {"inspect", DATA "checkpoints/tiny-qwen2-sharded",
			      "--json", "--tensors", NULL};
	cli_result r;
	assert_int_equal(cli_run(argv, NULL, 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 0);
	json_error_t je;
	json_t *j = json_loads(r.out, 0, &je);
	assert_non_null(j);
	json_t *x = json_load_file(DATA "checkpoints/expected.json", 0, &je);
	json_t *want = json_object_get(x, "tiny-qwen2-sharded");
	assert_string_equal(json_string_value(json_object_get(j, "format")),
			    "safetensors");
	assert_int_equal(json_array_size(json_object_get(j, "files")), 9);
	assert_string_equal(json_string_value(json_object_get(j, "tensor_check")), "ok");
	uint64_t total = (uint64_t)json_integer_value(json_object_get(want, "total_bytes"));
	assert_int_equal(json_integer_value(json_object_get(j, "total_bytes")), total);
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(j, "bytes_per_dtype"), "F16")), total);
	json_t *arch = json_object_get(j, "architecture");
	assert_string_equal(json_string_value(json_object_get(arch, "family")), "qwen2");
	assert_int_equal(json_integer_value(json_object_get(arch, "layers")), 3);
	assert_true(json_is_true(json_object_get(arch, "tied_embeddings")));
	json_t *groups = json_object_get(j, "groups");
	assert_int_equal(json_array_size(groups), 1);
	json_t *g = json_array_get(groups, 0);
	assert_string_equal(json_string_value(json_object_get(g, "name")), "model");
	assert_int_equal(json_integer_value(json_object_get(g, "units")), 3);
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(j, "static"), "count")), 2);
	json_t *ts = json_object_get(j, "tensors");
	json_t *wt = json_object_get(want, "tensors");
	assert_int_equal(json_array_size(ts), json_array_size(wt));
	for (size_t i = 0; i < json_array_size(wt); i++) {
		json_t *a = json_array_get(ts, i), *b = json_array_get(wt, i);
		assert_string_equal(json_string_value(json_object_get(a, "name")),
				    json_string_value(json_object_get(b, "name")));
		assert_string_equal(json_string_value(json_object_get(a, "file")),
				    json_string_value(json_object_get(b, "file")));
		assert_int_equal(json_integer_value(json_object_get(a, "offset")),
				 json_integer_value(json_object_get(b, "offset")));
		assert_int_equal(json_integer_value(json_object_get(a, "bytes")),
				 json_integer_value(json_object_get(b, "bytes")));
		assert_true(json_equal(json_object_get(a, "shape"),
				       json_object_get(b, "shape")));
	}
	json_decref(x);
	json_decref(j);
	cli_result_free(&r);
}

static void text_form_of_a_gguf_file(void **s)
{
	(void)s;
	const char *argv[] = {"inspect", DATA "gguf/stories260K.gguf",
			      "--tensors", NULL};
	cli_result r;
	assert_int_equal(cli_run(argv, NULL, 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "format: gguf v3"));
	assert_non_null(strstr(r.out, "architecture: llama (family llama)"));
	assert_non_null(strstr(r.out, "tensor check: ok"));
	assert_non_null(strstr(r.out, "tensors: 48"));
	assert_non_null(strstr(r.out, "blk: 5 units"));
	assert_non_null(strstr(r.out, "  token_embd.weight F32 [64, 512] 131072 stories260K.gguf"));
	cli_result_free(&r);
}

static void bad_input_and_usage_exit_codes(void **s)
{
	(void)s;
	char dir[512], path[600];
	cli_tmpdir(dir, sizeof dir, "inspect-bad");
	snprintf(path, sizeof path, "%s/bad.gguf", dir);
	FILE *f = fopen(path, "wb");
	fwrite("GGUF\x03\0\0\0\xff\xff", 1, 10, f);
	fclose(f);
	const char *bad[] = {"inspect", path, NULL};
	cli_result r;
	assert_int_equal(cli_run(bad, NULL, 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "strata: error: '"));
	assert_non_null(strstr(r.err, "bad.gguf"));
	assert_non_null(strstr(r.err, "\n  fix: "));
	assert_int_equal(r.out_len, 0);
	cli_result_free(&r);
	const char *none[] = {"inspect", NULL};
	assert_int_equal(cli_run(none, NULL, 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
	const char *opt[] = {"inspect", path, "--bogus", NULL};
	assert_int_equal(cli_run(opt, NULL, 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "--bogus"));
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(json_matches_transformers_facts),
		cmocka_unit_test(text_form_of_a_gguf_file),
		cmocka_unit_test(bad_input_and_usage_exit_codes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
