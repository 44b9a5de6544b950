/* test_cuda_lazy.c - a CUDA build does not load cuBLAS when it starts, only
 * when the first CUDA compute context is made (issue 25: `strata
 * --version` took 0.43 s and 219 MiB with cuBLAS linked, 0.01 s and 4 MiB
 * without). The first half runs everywhere; the second needs a GPU
 * (layer: backend tests). */
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/backend_cuda.h"
#include "strata/backend_kernels.h"
#include "support/gpu_skip.h"

static int find_cublas(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	if (info->dlpi_name && strstr(info->dlpi_name, "libcublas"))
		*(int *)data = 1;
	return 0;
}

static bool cublas_loaded(void)
{
	int found = 0;
	dl_iterate_phdr(find_cublas, &found);
	return found;
}

static void test_start_and_device_count_load_no_cublas(void **state)
{
	(void)state;
	assert_false(cublas_loaded());
	(void)strata_backend_device_count("cuda"); /* the runtime only */
	assert_false(cublas_loaded());
}

static void test_first_compute_context_loads_cublas(void **state)
{
	(void)state;
	if (!gpu_skip_with_device())
		skip();
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	strata_error err;
	assert_int_equal(strata_backend_cuda_create(NULL, &b, &err), STRATA_OK);
	assert_false(cublas_loaded()); /* memory alone needs no cuBLAS */
	if (strata_compute_create_on(b, 0, &c, &err) != STRATA_OK)
		fail_msg("compute context: %s", err.message);
	assert_true(cublas_loaded());
	strata_compute_destroy(c);
	strata_backend_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start_and_device_count_load_no_cublas),
		cmocka_unit_test(test_first_compute_context_loads_cublas),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
