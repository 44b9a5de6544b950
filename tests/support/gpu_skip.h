/* gpu_skip.h - the one way a test that needs a GPU reports itself skipped
 * where none is visible: CTest reads exit code 77 as "Skipped" (support for
 * every test folder, layer: backend; prefix gpu_skip). */
#ifndef STRATA_TESTS_SUPPORT_GPU_SKIP_H
#define STRATA_TESTS_SUPPORT_GPU_SKIP_H

#include <stdbool.h>
#include <stdio.h>

#include "strata/backend.h"

/* The exit code CTest reads as skipped (SKIP_RETURN_CODE in strata.cmake). */
#define GPU_SKIP_EXIT 77

/* True, after saying so on stdout, where no CUDA device is visible: the
 * caller's main returns GPU_SKIP_EXIT. `test` names the test in the line. */
static inline bool gpu_skip_without_device(const char *test)
{
	if (strata_backend_device_count("cuda") > 0)
		return false;
	printf("%s: no CUDA device visible: skipped\n", test);
	return true;
}

/* For one cmocka case inside a CPU test: true where a CUDA device IS
 * visible, for cases whose expectation holds only without one. */
static inline bool gpu_skip_with_device(void)
{
	return strata_backend_device_count("cuda") > 0;
}

#endif
