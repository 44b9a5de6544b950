/* test_cuda_select.c - --device names: cpu, cuda, cuda:N, and every
 * malformed spelling refused as a usage error; runs in every build, with or
 * without a GPU (layer: backend tests). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"

static void test_cpu_name_makes_the_cpu_backend(void **state)
{
	(void)state;
	strata_backend *b = NULL;
	strata_error err;
	assert_int_equal(strata_backend_create_named("cpu", NULL, &b, &err),
			 STRATA_OK);
	strata_backend_caps caps;
	assert_int_equal(strata_backend_get_caps(b, &caps, &err), STRATA_OK);
	assert_string_equal(caps.name, "cpu");
	strata_backend_destroy(b);
}

static void test_malformed_names_are_usage_errors(void **state)
{
	(void)state;
	const char *bad[] = {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:+1",
			     "cuda:1x", "cuda: 1", "cuda:1234567890", "cudax",
			     "cuda0", "cpu:0", "cuda:\x01"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		strata_backend *b = NULL;
		strata_error err;
		assert_int_equal(strata_backend_create_named(bad[i], NULL, &b, &err),
				 STRATA_E_USAGE);
		assert_null(b);
		assert_non_null(strstr(err.message, "unknown device"));
		assert_non_null(strstr(err.fix, "cuda:N"));
	}
	strata_error err;
	strata_backend *b = NULL;
	assert_int_equal(strata_backend_create_named("cuda:\x01", NULL, &b, &err),
			 STRATA_E_USAGE);
	assert_non_null(strstr(err.message, "\\x01")); /* escaped, not raw */
}

static void test_cuda_names_reach_the_cuda_backend(void **state)
{
	(void)state;
	uint32_t count = strata_backend_device_count("cuda");
	strata_backend *b = NULL;
	strata_error err;
	/* one past the last device: unavailable, with a fix, on any machine */
	char name[32];
	snprintf(name, sizeof name, "cuda:%u", count);
	assert_int_equal(strata_backend_create_named(name, NULL, &b, &err),
			 STRATA_E_BACKEND_UNAVAILABLE);
	assert_null(b);
	assert_true(err.fix[0] != '\0');
	strata_status s = strata_backend_create_named("cuda", NULL, &b, &err);
	if (count == 0) {
		assert_int_equal(s, STRATA_E_BACKEND_UNAVAILABLE);
		return;
	}
	assert_int_equal(s, STRATA_OK);
	strata_backend_caps caps;
	assert_int_equal(strata_backend_get_caps(b, &caps, &err), STRATA_OK);
	assert_string_equal(caps.name, "cuda:0");
	strata_backend_destroy(b);
	snprintf(name, sizeof name, "cuda:%u", count - 1);
	assert_int_equal(strata_backend_create_named(name, NULL, &b, &err),
			 STRATA_OK);
	strata_backend_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_name_makes_the_cpu_backend),
		cmocka_unit_test(test_malformed_names_are_usage_errors),
		cmocka_unit_test(test_cuda_names_reach_the_cuda_backend),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
