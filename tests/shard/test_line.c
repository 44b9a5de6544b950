/* test_line.c - the `strata shard` input line parser: every accepted
 * shape and one case per fault (layer: shard). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/shard.h"

static void parses(const char *line, size_t len, size_t key_bytes,
		   uint64_t cost)
{
	size_t k = 999;
	uint64_t c = 999;
	strata_error e;
	if (strata_shard_parse_line(line, len, 1, &k, &c, &e) != STRATA_OK)
		fail_msg("'%s' refused: %s", line, e.message);
	assert_int_equal(k, key_bytes);
	assert_int_equal(c, cost);
}

static void refused(const char *line, uint64_t line_number, const char *why)
{
	size_t k = 999;
	uint64_t c = 999;
	strata_error e;
	assert_int_equal(strata_shard_parse_line(line, strlen(line), line_number,
						 &k, &c, &e),
			 STRATA_E_SHARD_INPUT);
	assert_int_equal(k, 999); /* outputs untouched on error */
	assert_int_equal(c, 999);
	char want[32];
	snprintf(want, sizeof want, "line %llu: ", (unsigned long long)line_number);
	assert_memory_equal(e.message, want, strlen(want));
	if (!strstr(e.message, why))
		fail_msg("'%s': message '%s' lacks '%s'", line, e.message, why);
	assert_non_null(strstr(e.fix, "KEY<TAB>COST"));
}

static void test_accepted_shapes(void **state)
{
	(void)state;
	parses("a\t1", 3, 1, 1);
	parses("\t5", 2, 0, 5); /* empty key: zero bytes are a key too */
	parses("src/foo.rs\t0", 12, 10, 0);
	parses("key with spaces\t42", 18, 15, 42);
	parses("a\tb\tc\t7", 7, 5, 7); /* key = bytes before the LAST tab */
	parses("k\t007", 5, 1, 7);
	parses("k\t18446744073709551615", 22, 1, UINT64_MAX);
	parses("k\t3\r", 4, 1, 3); /* CRLF: the '\r' is dropped */
	parses("k\r\t3\r", 5, 2, 3); /* a '\r' inside the key stays */
	/* NUL bytes and high bytes are plain key bytes. */
	parses("a\0b\xff\t9", 6, 4, 9);
}

static void test_each_fault_has_its_message(void **state)
{
	(void)state;
	refused("no tab here", 3, "no tab");
	refused("", 4, "empty");
	refused("\r", 5, "empty");
	refused("k\t", 6, "cost after the last tab is empty");
	refused("k\t\r", 7, "is empty");
	refused("k\t-1", 8, "negative");
	refused("k\t+1", 9, "not a whole number");
	refused("k\t 1", 10, "not a whole number");
	refused("k\t1 ", 11, "not a whole number");
	refused("k\t1.5", 12, "not a whole number");
	refused("k\t0x10", 13, "not a whole number");
	refused("k\t1e3", 14, "not a whole number");
	refused("k\t18446744073709551616", 15, "larger than 18446744073709551615");
	refused("k\t99999999999999999999999", 16, "larger than");
	refused("k\t99999999999999999999x", 17, "not a whole number");
	refused("k\t5\r\r", 18, "not a whole number");
	refused("k\t1\t", 19, "is empty"); /* the last tab decides */
	refused("k\t12345678901234567890123", 18446744073709551615ull,
		"larger than");
}

/* Untrusted bytes in the cost are escaped in the message. */
static void test_cost_is_escaped_in_messages(void **state)
{
	(void)state;
	strata_error e;
	size_t k;
	uint64_t c;
	const char line[] = "k\t1\x1b[2J";
	assert_int_equal(strata_shard_parse_line(line, sizeof line - 1, 2, &k,
						 &c, &e),
			 STRATA_E_SHARD_INPUT);
	assert_null(strchr(e.message, '\x1b'));
	assert_non_null(strstr(e.message, "\\x1b"));
}

/* The parser never reads past len: a line cut out of a longer buffer. */
static void test_reads_only_len_bytes(void **state)
{
	(void)state;
	const char buf[] = "key\t12\t99";
	parses(buf, 6, 3, 12);
	parses(buf, 5, 3, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepted_shapes),
		cmocka_unit_test(test_each_fault_has_its_message),
		cmocka_unit_test(test_cost_is_escaped_in_messages),
		cmocka_unit_test(test_reads_only_len_bytes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
