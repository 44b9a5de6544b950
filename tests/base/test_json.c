/* test_json.c - the streaming JSON writer: escaping, exact 64-bit
 * integers, nesting misuse, pretty and compact forms (layer: base). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "strata/base.h"

static void sample(strata_json *j)
{
	strata_json_object_begin(j);
	strata_json_kv_string(j, "name", "a \"q\" \\ b\n\t\r\x01\x1f\x7f/é");
	strata_json_kv_u64(j, "max", UINT64_MAX);
	strata_json_key(j, "min");
	strata_json_i64(j, INT64_MIN);
	strata_json_kv_double(j, "half", 0.5);
	strata_json_kv_double(j, "inf", 1.0 / 0.0);
	strata_json_kv_bool(j, "yes", true);
	strata_json_kv_string(j, "none", NULL);
	strata_json_key(j, "list");
	strata_json_array_begin(j);
	strata_json_u64(j, 1);
	strata_json_array_begin(j);
	strata_json_array_end(j);
	strata_json_object_begin(j);
	strata_json_object_end(j);
	strata_json_string_n(j, "a\0b", 3);
	strata_json_null(j);
	strata_json_array_end(j);
	strata_json_object_end(j);
}

static void test_compact_document_exact_text(void **state)
{
	(void)state;
	strata_json j;
	strata_json_init(&j, false);
	sample(&j);
	assert_int_equal(strata_json_finish(&j, NULL), STRATA_OK);
	assert_string_equal(
		j.buf,
		"{\"name\":\"a \\\"q\\\" \\\\ b\\n\\t\\r\\u0001\\u001f\\u007f/é\","
		"\"max\":18446744073709551615,\"min\":-9223372036854775808,"
		"\"half\":0.5,\"inf\":null,\"yes\":true,\"none\":null,"
		"\"list\":[1,[],{},\"a\\u0000b\",null]}\n");
	assert_int_equal(j.len, strlen(j.buf));
	strata_json_fini(&j);
	assert_null(j.buf);
}

static void test_pretty_document_parses_back(void **state)
{
	(void)state;
	strata_json j;
	strata_json_init(&j, true);
	sample(&j);
	assert_int_equal(strata_json_finish(&j, NULL), STRATA_OK);
	assert_non_null(strstr(j.buf, "{\n  \"name\": \"a"));
	assert_non_null(strstr(j.buf, "\n  \"list\": [\n    1,\n    [],\n    {},"));
	assert_non_null(strstr(j.buf, "\n  ]\n}\n"));
	json_error_t je;
	/* jansson's integers are signed: read 2^64-1 as a real. */
	json_t *doc = json_loads(j.buf, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
	if (!doc)
		fail_msg("not JSON: %s\n%s", je.text, j.buf);
	assert_string_equal(json_string_value(json_object_get(doc, "name")),
			    "a \"q\" \\ b\n\t\r\x01\x1f\x7f/é");
	assert_true(json_real_value(json_object_get(doc, "half")) == 0.5);
	assert_true(json_is_null(json_object_get(doc, "none")));
	json_t *list = json_object_get(doc, "list");
	assert_int_equal(json_array_size(list), 5);
	size_t n;
	const char *s = NULL;
	assert_int_equal(json_unpack(json_array_get(list, 3), "s%", &s, &n), 0);
	assert_int_equal(n, 3);
	json_decref(doc);
	strata_json_fini(&j);
}

typedef enum misuse_kind {
	MISUSE_KEY_AT_TOP,
	MISUSE_KEY_IN_ARRAY,
	MISUSE_KEY_TWICE,
	MISUSE_VALUE_WITHOUT_KEY,
	MISUSE_CLOSE_OBJECT_AS_ARRAY,
	MISUSE_CLOSE_ARRAY_AS_OBJECT,
	MISUSE_CLOSE_AT_TOP,
	MISUSE_KEY_WITHOUT_VALUE,
	MISUSE_UNCLOSED,
	MISUSE_TWO_ROOTS,
	MISUSE_TOO_DEEP,
	MISUSE_EMPTY,
	MISUSE_COUNT
} misuse_kind;

static void write_misuse(strata_json *j, misuse_kind k)
{
	switch (k) {
	case MISUSE_KEY_AT_TOP:
		strata_json_key(j, "k");
		strata_json_u64(j, 1);
		break;
	case MISUSE_KEY_IN_ARRAY:
		strata_json_array_begin(j);
		strata_json_key(j, "k");
		strata_json_u64(j, 1);
		strata_json_array_end(j);
		break;
	case MISUSE_KEY_TWICE:
		strata_json_object_begin(j);
		strata_json_key(j, "a");
		strata_json_key(j, "b");
		strata_json_u64(j, 1);
		strata_json_object_end(j);
		break;
	case MISUSE_VALUE_WITHOUT_KEY:
		strata_json_object_begin(j);
		strata_json_u64(j, 1);
		strata_json_object_end(j);
		break;
	case MISUSE_CLOSE_OBJECT_AS_ARRAY:
		strata_json_object_begin(j);
		strata_json_array_end(j);
		break;
	case MISUSE_CLOSE_ARRAY_AS_OBJECT:
		strata_json_array_begin(j);
		strata_json_object_end(j);
		break;
	case MISUSE_CLOSE_AT_TOP:
		strata_json_u64(j, 1);
		strata_json_object_end(j);
		break;
	case MISUSE_KEY_WITHOUT_VALUE:
		strata_json_object_begin(j);
		strata_json_key(j, "a");
		strata_json_object_end(j);
		break;
	case MISUSE_UNCLOSED:
		strata_json_object_begin(j);
		break;
	case MISUSE_TWO_ROOTS:
		strata_json_object_begin(j);
		strata_json_object_end(j);
		strata_json_u64(j, 2);
		break;
	case MISUSE_TOO_DEEP:
		for (int i = 0; i < 65; i++)
			strata_json_array_begin(j);
		for (int i = 0; i < 65; i++)
			strata_json_array_end(j);
		break;
	case MISUSE_EMPTY:
	case MISUSE_COUNT:
		break;
	}
}

static void test_each_misuse_is_detected(void **state)
{
	(void)state;
	for (int k = 0; k < MISUSE_COUNT; k++) {
		for (int pretty = 0; pretty < 2; pretty++) {
			strata_json j;
			strata_error e;
			strata_json_init(&j, pretty);
			write_misuse(&j, (misuse_kind)k);
			if (strata_json_finish(&j, &e) != STRATA_E_INTERNAL)
				fail_msg("misuse %d not detected", k);
			assert_non_null(strstr(e.message, "out of order"));
			strata_json_fini(&j);
		}
	}
	/* 64 levels is the limit, not an error. */
	strata_json j;
	strata_json_init(&j, false);
	for (int i = 0; i < 64; i++)
		strata_json_array_begin(&j);
	for (int i = 0; i < 64; i++)
		strata_json_array_end(&j);
	assert_int_equal(strata_json_finish(&j, NULL), STRATA_OK);
	strata_json_fini(&j);
	/* A lone scalar is a whole document. */
	strata_json_init(&j, true);
	strata_json_u64(&j, 0);
	assert_int_equal(strata_json_finish(&j, NULL), STRATA_OK);
	assert_string_equal(j.buf, "0\n");
	strata_json_fini(&j);
}

static void test_allocation_failure_sticks_and_is_reported(void **state)
{
	(void)state;
	for (long n = 0;; n++) {
		strata_json j;
		strata_error e;
		strata_json_init(&j, true);
		strata_alloc_fail_after(n);
		sample(&j);
		strata_status s = strata_json_finish(&j, &e);
		strata_alloc_fail_after(-1);
		strata_json_fini(&j);
		if (s == STRATA_OK) {
			assert_true(n > 0);
			break;
		}
		assert_int_equal(s, STRATA_E_NOMEM);
		assert_non_null(strstr(e.message, "out of memory"));
		assert_true(n < 50);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compact_document_exact_text),
		cmocka_unit_test(test_pretty_document_parses_back),
		cmocka_unit_test(test_each_misuse_is_detected),
		cmocka_unit_test(test_allocation_failure_sticks_and_is_reported),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
