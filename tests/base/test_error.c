/* test_error.c - status names from the X-macro list, error values,
 * prefixing, escaping, checked arithmetic and the CLI error lines
 * (layer: base). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "strata/base.h"

/* Every code in the map has its own name and text, and values never
 * collide: derived from the same X-macro list the library uses. */
static void test_every_status_has_name_and_text(void **state)
{
	(void)state;
	static const struct {
		strata_status code;
		const char *name, *text;
	} all[] = {
#define ROW(name, value, text) {STRATA_##name, #name, text},
		STRATA_STATUS_MAP(ROW)
#undef ROW
	};
	size_t n = sizeof all / sizeof all[0];
	assert_true(n > 20);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(strata_status_name(all[i].code), all[i].name);
		assert_string_equal(strata_status_text(all[i].code), all[i].text);
		assert_true(strlen(all[i].text) > 0);
		for (size_t k = 0; k < i; k++)
			assert_int_not_equal(all[i].code, all[k].code);
	}
	assert_int_equal(STRATA_OK, 0);
	assert_int_equal(STRATA_E_NOMEM, 100);
	assert_int_equal(STRATA_E_SHARD_ZERO_DEVICES, 200);
	assert_string_equal(strata_status_name((strata_status)99999), "unknown");
	assert_string_equal(strata_status_text((strata_status)-1), "unknown");
}

static void test_fail_fills_code_message_and_fix(void **state)
{
	(void)state;
	strata_error e;
	strata_error_clear(&e);
	assert_int_equal(e.code, STRATA_OK);
	assert_string_equal(e.message, "");
	assert_int_equal(strata_fail(&e, STRATA_E_IO, "check the disk",
				     "reading '%s' at %d failed", "x.bin", 42),
			 STRATA_E_IO);
	assert_int_equal(e.code, STRATA_E_IO);
	assert_string_equal(e.message, "reading 'x.bin' at 42 failed");
	assert_string_equal(e.fix, "check the disk");
	/* NULL err still returns the code; NULL fix is an empty fix. */
	assert_int_equal(strata_fail(NULL, STRATA_E_PARSE, "f", "m"), STRATA_E_PARSE);
	assert_int_equal(strata_fail(&e, STRATA_E_PARSE, NULL, "m"), STRATA_E_PARSE);
	assert_string_equal(e.fix, "");
	assert_int_equal(strata_error_set_fix(&e, "try %d", 3), STRATA_E_PARSE);
	assert_string_equal(e.fix, "try 3");
	strata_error_clear(NULL);
}

static void test_long_messages_truncate_without_overrun(void **state)
{
	(void)state;
	strata_error e;
	char big[2000];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	strata_fail(&e, STRATA_E_IO, big, "%s", big);
	assert_int_equal(strlen(e.message), STRATA_ERROR_MESSAGE_BYTES - 1);
	assert_int_equal(strlen(e.fix), STRATA_ERROR_FIX_BYTES - 1);
	/* Prefixing a full message keeps the prefix and stays bounded. */
	assert_int_equal(strata_error_prefix(&e, "ctx %d", 1), STRATA_E_IO);
	assert_int_equal(strlen(e.message), STRATA_ERROR_MESSAGE_BYTES - 1);
	assert_memory_equal(e.message, "ctx 1: aaa", 10);
}

static void test_prefix_keeps_code_and_fix(void **state)
{
	(void)state;
	strata_error e;
	strata_fail(&e, STRATA_E_CKPT_RANGE, "re-download it", "tensor ends late");
	assert_int_equal(strata_error_prefix(&e, "'%s'", "model.safetensors"),
			 STRATA_E_CKPT_RANGE);
	assert_string_equal(e.message, "'model.safetensors': tensor ends late");
	assert_string_equal(e.fix, "re-download it");
	assert_int_equal(strata_error_prefix(NULL, "x"), STRATA_E_INTERNAL);
}

static void test_escape_makes_bytes_printable(void **state)
{
	(void)state;
	char b[64];
	assert_string_equal(strata_escape(b, sizeof b, "plain text", 10),
			    "plain text");
	assert_string_equal(strata_escape(b, sizeof b, "a\nb\\c\x7f\xff\0", 8),
			    "a\\x0ab\\x5cc\\x7f\\xff\\x00");
	/* Exactly fitting text is not truncated. */
	char small[8];
	assert_string_equal(strata_escape(small, sizeof small, "1234567", 7),
			    "1234567");
	/* One byte more and it ends with "..." inside the buffer. */
	assert_string_equal(strata_escape(small, sizeof small, "12345678", 8),
			    "1234...");
	assert_string_equal(strata_escape(small, sizeof small, "\x01\x02\x03", 3),
			    "\\x01...");
	/* Tiny buffers stay NUL-terminated; cap 0 is left alone. */
	char t[2] = {'z', 'z'};
	assert_string_equal(strata_escape(t, 2, "abc", 3), "");
	assert_ptr_equal(strata_escape(t, 0, "abc", 3), t);
	assert_string_equal(strata_escape(b, sizeof b, "", 0), "");
}

static void test_checked_add_at_exact_edges(void **state)
{
	(void)state;
	uint64_t r = 7;
	strata_error e;
	assert_int_equal(strata_checked_add(UINT64_MAX, 0, &r, "x", &e), STRATA_OK);
	assert_int_equal(r, UINT64_MAX);
	assert_int_equal(strata_checked_add(UINT64_MAX - 1, 1, &r, "x", &e),
			 STRATA_OK);
	assert_int_equal(r, UINT64_MAX);
	r = 7;
	assert_int_equal(strata_checked_add(UINT64_MAX, 1, &r, "static bytes", &e),
			 STRATA_E_OVERFLOW);
	assert_int_equal(r, 7); /* untouched */
	assert_string_equal(e.message, "static bytes overflowed: "
				       "18446744073709551615 + 1 exceeds 2^64-1");
	assert_true(e.fix[0] != '\0');
	assert_false(strata_add_u64(1ull << 63, 1ull << 63, &r));
	assert_true(strata_add_u64((1ull << 63) - 1, 1ull << 63, &r));
	assert_int_equal(r, UINT64_MAX);
	assert_int_equal(strata_sat_add_u64(UINT64_MAX, 5), UINT64_MAX);
	assert_int_equal(strata_sat_add_u64(2, 3), 5);
}

static void test_checked_mul_at_exact_edges(void **state)
{
	(void)state;
	uint64_t r = 7;
	strata_error e;
	/* (2^32-1)(2^32+1) = 2^64-1 fits; 2^32 * 2^32 does not. */
	assert_int_equal(strata_checked_mul(0xffffffffull, 0x100000001ull, &r,
					    "x", &e),
			 STRATA_OK);
	assert_int_equal(r, UINT64_MAX);
	assert_int_equal(strata_checked_mul(UINT64_MAX, 1, &r, "x", &e), STRATA_OK);
	assert_int_equal(strata_checked_mul(0, UINT64_MAX, &r, "x", &e), STRATA_OK);
	assert_int_equal(r, 0);
	r = 7;
	assert_int_equal(strata_checked_mul(1ull << 32, 1ull << 32, &r,
					    "tensor bytes", &e),
			 STRATA_E_OVERFLOW);
	assert_int_equal(r, 7);
	assert_string_equal(e.message, "tensor bytes overflowed: 4294967296 * "
				       "4294967296 exceeds 2^64-1");
	assert_int_equal(strata_checked_mul(UINT64_MAX, 2, &r, "y", NULL),
			 STRATA_E_OVERFLOW);
}

static void test_checked_align_at_exact_edges(void **state)
{
	(void)state;
	uint64_t r = 7;
	strata_error e;
	assert_int_equal(STRATA_ALIGN & (STRATA_ALIGN - 1), 0); /* a power of 2 */
	assert_int_equal(strata_checked_align(0, &r, "x", &e), STRATA_OK);
	assert_int_equal(r, 0);
	assert_int_equal(strata_checked_align(1, &r, "x", &e), STRATA_OK);
	assert_int_equal(r, STRATA_ALIGN);
	assert_int_equal(strata_checked_align(STRATA_ALIGN, &r, "x", &e), STRATA_OK);
	assert_int_equal(r, STRATA_ALIGN);
	assert_int_equal(strata_checked_align(STRATA_ALIGN + 1, &r, "x", &e), STRATA_OK);
	assert_int_equal(r, 2 * STRATA_ALIGN);
	/* the largest multiple of the alignment is the last that fits */
	uint64_t top = UINT64_MAX & ~(uint64_t)(STRATA_ALIGN - 1);
	assert_int_equal(strata_checked_align(top, &r, "x", &e), STRATA_OK);
	assert_true(r == top);
	r = 7;
	assert_int_equal(strata_checked_align(top + 1, &r, "slot bytes", &e),
			 STRATA_E_OVERFLOW);
	assert_int_equal(r, 7);
	assert_non_null(strstr(e.message, "slot bytes overflowed"));
	assert_int_equal(strata_checked_align(UINT64_MAX, &r, "y", NULL),
			 STRATA_E_OVERFLOW);
}

static void test_error_print_format(void **state)
{
	(void)state;
	char buf[1024] = {0};
	FILE *f = fmemopen(buf, sizeof buf, "w");
	strata_error e;
	strata_fail(&e, STRATA_E_IO, "check the disk", "cannot read 'x'");
	strata_error_print(f, &e);
	/* No message: the code's text stands in; no fix: no fix line. */
	strata_error_clear(&e);
	e.code = STRATA_E_NOMEM;
	strata_error_print(f, &e);
	fclose(f);
	assert_string_equal(buf, "strata: error: cannot read 'x'\n"
				 "  fix: check the disk\n"
				 "strata: error: out of host memory\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_status_has_name_and_text),
		cmocka_unit_test(test_fail_fills_code_message_and_fix),
		cmocka_unit_test(test_long_messages_truncate_without_overrun),
		cmocka_unit_test(test_prefix_keeps_code_and_fix),
		cmocka_unit_test(test_escape_makes_bytes_printable),
		cmocka_unit_test(test_checked_add_at_exact_edges),
		cmocka_unit_test(test_checked_mul_at_exact_edges),
		cmocka_unit_test(test_checked_align_at_exact_edges),
		cmocka_unit_test(test_error_print_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
