/* test_alloc.c - fallible allocation, the failure-injection hook and
 * strata_grow (layer: base). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/base.h"

static void test_zero_bytes_is_a_unique_pointer(void **state)
{
	(void)state;
	void *a = strata_alloc(0), *b = strata_alloc(0);
	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	strata_free(a);
	strata_free(b);
	strata_free(NULL);
}

static void test_calloc_checks_the_product(void **state)
{
	(void)state;
	assert_null(strata_calloc(SIZE_MAX / 2, 3));
	uint32_t *p = strata_calloc(16, sizeof *p);
	assert_non_null(p);
	for (int i = 0; i < 16; i++)
		assert_int_equal(p[i], 0);
	strata_free(p);
	strata_error e;
	assert_null(strata_calloc_or_error(SIZE_MAX / 2, 3, "the table", &e));
	assert_int_equal(e.code, STRATA_E_NOMEM);
	assert_non_null(strstr(e.message, "the table"));
	assert_true(e.fix[0] != '\0');
}

static void test_fail_after_n_fails_the_next_and_later(void **state)
{
	(void)state;
	strata_alloc_fail_after(2);
	void *a = strata_alloc(8), *b = strata_alloc(8);
	void *c = strata_alloc(8), *d = strata_calloc(1, 8);
	assert_non_null(a);
	assert_non_null(b);
	assert_null(c);
	assert_null(d); /* stays failing until reset */
	assert_null(strata_strdup("x"));
	assert_int_equal(strata_alloc_injected_failures(), 3);
	strata_alloc_fail_after(-1);
	assert_int_equal(strata_alloc_injected_failures(), 0);
	void *e = strata_alloc(8);
	assert_non_null(e);
	strata_free(a);
	strata_free(b);
	strata_free(e);
}

/* A multi-allocation operation under the loop SQLite's faultsim uses:
 * each failing run returns E_NOMEM, leaks nothing (ASan), and the loop
 * ends with a success. */
typedef struct three {
	char *a, *b, *c;
} three;

static strata_status make_three(three *t, strata_error *err)
{
	three n = {0};
	if (!(n.a = strata_alloc_or_error(10, "a", err)) ||
	    !(n.b = strata_alloc_or_error(20, "b", err)) ||
	    !(n.c = strata_alloc_or_error(30, "c", err))) {
		strata_free(n.a);
		strata_free(n.b);
		return STRATA_E_NOMEM;
	}
	*t = n;
	return STRATA_OK;
}

static void test_oom_loop_over_a_multi_step_operation(void **state)
{
	(void)state;
	long n;
	for (n = 0;; n++) {
		three t = {0};
		strata_error e;
		strata_alloc_fail_after(n);
		strata_status s = make_three(&t, &e);
		strata_alloc_fail_after(-1);
		if (s == STRATA_OK) {
			strata_free(t.a);
			strata_free(t.b);
			strata_free(t.c);
			break;
		}
		assert_int_equal(s, STRATA_E_NOMEM);
		assert_null(t.a); /* all or nothing */
		assert_non_null(strstr(e.message, "cannot allocate"));
	}
	assert_int_equal(n, 3);
}

static void test_realloc_failure_keeps_the_old_block(void **state)
{
	(void)state;
	char *p = strata_alloc(4);
	memcpy(p, "abc", 4);
	strata_alloc_fail_after(0);
	assert_null(strata_realloc(p, 1000));
	strata_alloc_fail_after(-1);
	assert_string_equal(p, "abc");
	p = strata_realloc(p, 1000);
	assert_non_null(p);
	assert_string_equal(p, "abc");
	strata_free(p);
}

static void test_aligned_allocation(void **state)
{
	(void)state;
	assert_null(strata_alloc_aligned(3, 64));
	assert_null(strata_alloc_aligned(2, 64)); /* below pointer size */
	void *p = strata_alloc_aligned(4096, 10);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % 4096, 0);
	strata_free(p);
	p = strata_alloc_aligned(64, 0);
	assert_non_null(p);
	strata_free(p);
}

static void test_strdup_and_strndup(void **state)
{
	(void)state;
	char *a = strata_strdup("hello"), *b = strata_strndup("hello", 3);
	char *c = strata_strndup("hi", 10);
	assert_string_equal(a, "hello");
	assert_string_equal(b, "hel");
	assert_string_equal(c, "hi");
	strata_free(a);
	strata_free(b);
	strata_free(c);
}

static void test_grow_doubles_and_fails_cleanly(void **state)
{
	(void)state;
	int *buf = NULL;
	size_t cap = 0;
	strata_error e;
	assert_int_equal(strata_grow((void **)&buf, &cap, 1, sizeof *buf, "ints",
				     &e),
			 STRATA_OK);
	assert_int_equal(cap, 8);
	buf[7] = 7;
	assert_int_equal(strata_grow((void **)&buf, &cap, 8, sizeof *buf, "ints",
				     &e),
			 STRATA_OK);
	assert_int_equal(cap, 8); /* enough already: no change */
	assert_int_equal(strata_grow((void **)&buf, &cap, 100, sizeof *buf, "ints",
				     &e),
			 STRATA_OK);
	assert_int_equal(cap, 128);
	assert_int_equal(buf[7], 7);

	/* Injected failure: buffer and capacity unchanged. */
	int *old = buf;
	strata_alloc_fail_after(0);
	assert_int_equal(strata_grow((void **)&buf, &cap, 1000, sizeof *buf,
				     "ints", &e),
			 STRATA_E_NOMEM);
	strata_alloc_fail_after(-1);
	assert_ptr_equal(buf, old);
	assert_int_equal(cap, 128);
	assert_non_null(strstr(e.message, "ints"));

	/* Sizes that cannot be represented are overflow, not a huge malloc. */
	assert_int_equal(strata_grow((void **)&buf, &cap, SIZE_MAX, 1, "bytes", &e),
			 STRATA_E_OVERFLOW);
	assert_int_equal(strata_grow((void **)&buf, &cap, SIZE_MAX / 4,
				     sizeof *buf, "ints", &e),
			 STRATA_E_OVERFLOW);
	assert_ptr_equal(buf, old);
	assert_int_equal(cap, 128);
	strata_free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zero_bytes_is_a_unique_pointer),
		cmocka_unit_test(test_calloc_checks_the_product),
		cmocka_unit_test(test_fail_after_n_fails_the_next_and_later),
		cmocka_unit_test(test_oom_loop_over_a_multi_step_operation),
		cmocka_unit_test(test_realloc_failure_keeps_the_old_block),
		cmocka_unit_test(test_aligned_allocation),
		cmocka_unit_test(test_strdup_and_strndup),
		cmocka_unit_test(test_grow_doubles_and_fails_cleanly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
