/* test_size.c - SIZE parsing ("2GiB", "1.5GB", "4096") and formatting
 * (layer: base). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/base.h"

static void ok(const char *text, uint64_t want)
{
	uint64_t v = 12345;
	strata_error e;
	if (strata_size_parse(text, &v, &e) != STRATA_OK)
		fail_msg("'%s' refused: %s", text, e.message);
	if (v != want)
		fail_msg("'%s' = %llu, want %llu", text, (unsigned long long)v,
			 (unsigned long long)want);
}

static void bad(const char *text, strata_status code, const char *why)
{
	uint64_t v = 12345;
	strata_error e;
	assert_int_equal(strata_size_parse(text, &v, &e), code);
	assert_int_equal(v, 12345); /* untouched */
	if (!strstr(e.message, why))
		fail_msg("'%s': message '%s' lacks '%s'", text, e.message, why);
	assert_true(e.fix[0] != '\0');
}

static void test_plain_and_unit_sizes(void **state)
{
	(void)state;
	ok("0", 0);
	ok("4096", 4096);
	ok("2GiB", 2ull << 30);
	ok("1.5GB", 1500000000ull);
	ok("1 KiB", 1024);
	ok("1KB", 1000);
	ok("7B", 7);
	ok("3 B", 3);
	ok("2gib", 2ull << 30); /* unit case does not matter */
	ok("1.5MiB", 1572864);
	ok("0.5KiB", 512);
	ok("1TiB", 1ull << 40);
	ok("1PiB", 1ull << 50);
	ok("15EiB", 15ull << 60);
	ok("18EB", 18000000000000000000ull);
	ok("18446744073709551615", UINT64_MAX);
	ok("18446744073709551615B", UINT64_MAX);
	ok("000012", 12);
}

static void test_fractions_round_down_exactly(void **state)
{
	(void)state;
	ok("0.001KiB", 1);	     /* 1.024 -> 1 */
	ok("0.0009KiB", 0);	     /* 0.9216 -> 0 */
	ok("1.999999999999999999KB", 1999); /* 18 digits, exact */
	ok("0.333333333333333333EiB", 384307168202282324ull);
	/* 15.999...EiB stays just under 2^64. */
	ok("15.999999999999999999EiB", 18446744073709551614ull);
}

static void test_garbage_is_refused(void **state)
{
	(void)state;
	bad("", STRATA_E_SIZE_SYNTAX, "it is empty");
	bad("-1", STRATA_E_SIZE_SYNTAX, "negative");
	bad("-0", STRATA_E_SIZE_SYNTAX, "negative");
	bad("+5", STRATA_E_SIZE_SYNTAX, "without a sign");
	bad("GiB", STRATA_E_SIZE_SYNTAX, "does not start with a digit");
	bad(" 1", STRATA_E_SIZE_SYNTAX, "does not start with a digit");
	bad(".5GB", STRATA_E_SIZE_SYNTAX, "does not start with a digit");
	bad("1.", STRATA_E_SIZE_SYNTAX, "a digit must follow the point");
	bad("1.5", STRATA_E_SIZE_SYNTAX, "must be whole");
	bad("1.5B", STRATA_E_SIZE_SYNTAX, "must be whole");
	bad("2XB", STRATA_E_SIZE_SYNTAX, "unknown unit");
	bad("2 k", STRATA_E_SIZE_SYNTAX, "unknown unit");
	bad("2g", STRATA_E_SIZE_SYNTAX, "unknown unit");
	bad("1  KiB", STRATA_E_SIZE_SYNTAX, "unknown unit");
	bad("1KiB ", STRATA_E_SIZE_SYNTAX, "unknown unit");
	bad("1e9", STRATA_E_SIZE_SYNTAX, "unknown unit");
	bad("0x10", STRATA_E_SIZE_SYNTAX, "unknown unit");
	bad("1.0000000000000000001KiB", STRATA_E_SIZE_SYNTAX, "at most 18 digits");
	/* Untrusted text is escaped in the message. */
	bad("4\x1b[2J", STRATA_E_SIZE_SYNTAX, "\\x1b");
}

static void test_overflow_is_refused(void **state)
{
	(void)state;
	bad("18446744073709551616", STRATA_E_OVERFLOW, "does not fit in 64 bits");
	bad("99999999999999999999999999", STRATA_E_OVERFLOW, "does not fit");
	bad("16EiB", STRATA_E_OVERFLOW, "'16EiB' does not fit");
	bad("20000000TB", STRATA_E_OVERFLOW, "does not fit");
	bad("18446744073709551615KiB", STRATA_E_OVERFLOW, "does not fit");
	bad("16.000000000000000001EiB", STRATA_E_OVERFLOW, "does not fit");
}

static void test_format_uses_binary_units(void **state)
{
	(void)state;
	char b[32];
	assert_string_equal(strata_size_format(0, b, sizeof b), "0 B");
	assert_string_equal(strata_size_format(1023, b, sizeof b), "1023 B");
	assert_string_equal(strata_size_format(1024, b, sizeof b), "1.00 KiB");
	assert_string_equal(strata_size_format(1536, b, sizeof b), "1.50 KiB");
	assert_string_equal(strata_size_format(15ull << 29, b, sizeof b),
			    "7.50 GiB");
	assert_string_equal(strata_size_format(1ull << 40, b, sizeof b),
			    "1.00 TiB");
	assert_string_equal(strata_size_format(UINT64_MAX, b, sizeof b),
			    "16.00 EiB");
	/* Formatting then parsing comes back to within the rounding. */
	uint64_t v;
	assert_int_equal(strata_size_parse("7.50GiB", &v, NULL), STRATA_OK);
	assert_int_equal(v, 15ull << 29);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_and_unit_sizes),
		cmocka_unit_test(test_fractions_round_down_exactly),
		cmocka_unit_test(test_garbage_is_refused),
		cmocka_unit_test(test_overflow_is_refused),
		cmocka_unit_test(test_format_uses_binary_units),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
