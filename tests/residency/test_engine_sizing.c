/* test_engine_sizing.c - the residency engine takes the plan's sizes on
 * the seed's layouts (group windows, sparse indices, the dense geometry,
 * every overflow named) to the byte: each exact size creates, one byte
 * less is refused (layer: residency). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "residency/workload_fixture.h"

/* The seed's layouts as engine configs, read from nowhere: every payload is
 * zeros. The sizing itself (the seed's tests) is the plan's, tested in
 * tests/plan/test_sizing.c; here the engine takes sizes that hold exactly
 * its tensors (each in its own 256-byte slot) and refuses a byte less. */
static strata_status zero_read(void *user, const strata_tensor *const *t,
			       void *const *dst, size_t n, strata_error *err)
{
	(void)user;
	(void)err;
	for (size_t i = 0; i < n; i++)
		memset(dst[i], 0, t[i]->bytes);
	return STRATA_OK;
}

/* Host mode of this depth with these device window and host sizes: create
 * succeeds at the exact window and refuses it one byte short. */
static void window_edge(strata_backend *b, strata_residency_config c,
			uint64_t depth, uint64_t window, uint64_t host)
{
	c.sizes.depth = depth;
	c.sizes.window_device_bytes = window;
	c.sizes.host_bytes = host;
	wl_create_expect(b, &c, STRATA_OK, NULL);
	if (window) {
		c.sizes.window_device_bytes = window - 1;
		wl_create_expect(b, &c, STRATA_E_RES_BUDGET, "largest window");
	}
}

static void test_sizing_keeps_group_windows_exact(void **state)
{
	(void)state;
	/* seed 001: sizing_keeps_group_windows_and_excluded_parameters_exact
	 * (exclusion happens before the engine: excluded tensors are simply
	 * not in its config) */
	static strata_tensor t[7];
	const uint64_t bytes[7] = {7, 2, 3, 5, 11, 13, 17};
	static strata_residency_tensor rt[7];
	for (int i = 0; i < 7; i++) {
		t[i] = (strata_tensor){.name = "t", .bytes = bytes[i]};
		rt[i] = (strata_residency_tensor){.tensor = &t[i]};
	}
	const char *groups[] = {"decoder", "vision"};
	strata_residency_unit units[] = {
		{.group = 0, .unit = 0, .tensor_count = 1, .tensors = &rt[1]},
		{.group = 0, .unit = 1, .tensor_count = 2, .tensors = &rt[2]},
		{.group = 0, .unit = 2, .tensor_count = 1, .tensors = &rt[4]},
		{.group = 1, .unit = 2, .tensor_count = 1, .tensors = &rt[6]},
		{.group = 1, .unit = 0, .tensor_count = 1, .tensors = &rt[5]},
	};
	strata_residency_config c = {
		.mode = STRATA_RESIDENCY_HOST, .group_count = 2, .groups = groups,
		.static_count = 1, .statics = &rt[0], .unit_count = 5, .units = units,
		.read = zero_read, .sizes = {.static_device_bytes = 256}};
	/* in slots: decoder 256, 512, 256; vision 256, (absent), 256; every
	 * unit 1536 */
	strata_backend *b = wl_cpu(false);
	window_edge(b, c, 2, 768, 1536);
	window_edge(b, c, 3, 1024, 1536);
	window_edge(b, c, 1, 512, 1536);
	/* the static slot, one byte short */
	c.sizes = (strata_residency_sizes){.depth = 2, .static_device_bytes = 255,
					   .window_device_bytes = 768, .host_bytes = 1536};
	wl_create_expect(b, &c, STRATA_E_RES_BUDGET, "static tensors need 256 bytes");
	/* resident: the window is every unit of every group */
	c.mode = STRATA_RESIDENCY_RESIDENT;
	c.sizes = (strata_residency_sizes){.depth = 5, .static_device_bytes = 256,
					   .window_device_bytes = 1536};
	wl_create_expect(b, &c, STRATA_OK, NULL);
	c.sizes.window_device_bytes--;
	wl_create_expect(b, &c, STRATA_E_RES_BUDGET, "every one resident");
	strata_backend_destroy(b);
}

static void test_sizing_sparse_indices_and_overflow(void **state)
{
	(void)state;
	static strata_tensor t[3] = {{.name = "a", .bytes = 11},
				     {.name = "b", .bytes = 17},
				     {.name = "c", .bytes = UINT64_MAX}};
	static strata_residency_tensor rt[3] = {{.tensor = &t[0]}, {.tensor = &t[1]},
						{.tensor = &t[2]}};
	const char *groups[] = {"decoder"};
	strata_residency_unit units[] = {
		{.group = 0, .unit = 0, .tensor_count = 1, .tensors = &rt[0]},
		{.group = 0, .unit = UINT64_MAX - 1, .tensor_count = 1, .tensors = &rt[1]},
	};
	strata_residency_config c = {.mode = STRATA_RESIDENCY_HOST, .group_count = 1,
				     .groups = groups, .unit_count = 2, .units = units,
				     .read = zero_read};
	/* seed: sparse indices do not expand the positions between them */
	strata_backend *b = wl_cpu(false);
	window_edge(b, c, 2, 256, 512);
	window_edge(b, c, UINT64_MAX, 512, 512);
	/* a tensor whose slot overflows is named */
	units[0].tensors = &rt[2];
	c.sizes = (strata_residency_sizes){.depth = 2, .window_device_bytes = UINT64_MAX,
					   .host_bytes = UINT64_MAX};
	wl_create_expect(b, &c, STRATA_E_OVERFLOW, "tensor bytes");
	/* a unit given twice is refused */
	units[0].tensors = &rt[0];
	units[1].unit = 0;
	wl_create_expect(b, &c, STRATA_E_INVALID_ARG, "given twice");
	strata_backend_destroy(b);
}

static void test_sizing_sparse_windows_equal_dense_geometry(void **state)
{
	(void)state;
	/* seed 001: sparse_windows_equal_the_dense_geometry_for_every_small_occupancy,
	 * with unit u weighing (u + 1) slots: the engine takes exactly the
	 * dense window and refuses a byte less */
	static strata_tensor t[8];
	static strata_residency_tensor rt[8];
	const char *groups[] = {"decoder"};
	strata_backend *b = wl_cpu(false);
	for (unsigned occupied = 0; occupied < 256; occupied++) {
		uint64_t bytes[8], all = 0;
		strata_residency_unit units[8];
		size_t n = 0;
		for (int u = 0; u < 8; u++) {
			bytes[u] = occupied & (1u << u) ? ((uint64_t)u + 1) * 256 : 0;
			all += bytes[u];
			if (!bytes[u])
				continue;
			t[n] = (strata_tensor){.name = "weight", .bytes = bytes[u]};
			rt[n] = (strata_residency_tensor){.tensor = &t[n]};
			units[n] = (strata_residency_unit){.group = 0, .unit = (uint64_t)u,
							   .tensor_count = 1, .tensors = &rt[n]};
			n++;
		}
		strata_residency_config c = {.mode = STRATA_RESIDENCY_HOST, .group_count = 1,
					     .groups = groups, .unit_count = n, .units = units,
					     .read = zero_read};
		for (uint64_t depth = 1; depth <= 10; depth++) {
			uint64_t expected = 0;
			for (int start = 0; start < 8; start++) {
				uint64_t sum = 0;
				for (uint64_t k = 0; k < depth && start + k < 8; k++)
					sum += bytes[start + k];
				if (sum > expected)
					expected = sum;
			}
			window_edge(b, c, depth, expected, all);
		}
	}
	strata_backend_destroy(b);
}

static void test_sizing_every_byte_overflow_is_named(void **state)
{
	(void)state;
	/* seed 001: every_byte_and_unit_count_overflow_is_rejected; the sums
	 * are the plan's (tests/plan/test_sizing.c), the engine reports them
	 * as they come and creates nothing */
	static strata_tensor half = {.name = "h", .bytes = UINT64_MAX / 2 + 1};
	static strata_residency_tensor rhalf = {.tensor = &half};
	const strata_residency_tensor pair[2] = {rhalf, rhalf};
	const char *groups[] = {"g"};
	strata_backend *b = wl_cpu(false);
	strata_residency_sizes huge = {.depth = 2, .static_device_bytes = UINT64_MAX,
				       .window_device_bytes = UINT64_MAX,
				       .host_bytes = UINT64_MAX};
	/* static bytes: two static tensors */
	strata_residency_config c = {.mode = STRATA_RESIDENCY_HOST, .static_count = 2,
				     .statics = pair, .group_count = 1, .groups = groups,
				     .read = zero_read, .sizes = huge};
	wl_create_expect(b, &c, STRATA_E_OVERFLOW, "static bytes");
	/* unit block bytes: two tensors of one unit */
	strata_residency_unit u2[2] = {{.group = 0, .unit = 0, .tensor_count = 2, .tensors = pair}};
	c = (strata_residency_config){.mode = STRATA_RESIDENCY_HOST, .group_count = 1,
				      .groups = groups, .unit_count = 1, .units = u2,
				      .read = zero_read, .sizes = huge};
	wl_create_expect(b, &c, STRATA_E_OVERFLOW, "unit block bytes");
	/* window bytes: two units in one window */
	u2[0] = (strata_residency_unit){.group = 0, .unit = 0, .tensor_count = 1, .tensors = &rhalf};
	u2[1] = (strata_residency_unit){.group = 0, .unit = 1, .tensor_count = 1, .tensors = &rhalf};
	c.unit_count = 2;
	wl_create_expect(b, &c, STRATA_E_OVERFLOW, "window bytes");
	/* the bounded-residency total: static + window (the plan's "total
	 * bytes") */
	strata_residency_unit u1 = {.group = 0, .unit = 0, .tensor_count = 1, .tensors = &rhalf};
	c = (strata_residency_config){.mode = STRATA_RESIDENCY_HOST, .static_count = 1,
				      .statics = &rhalf, .group_count = 1, .groups = groups,
				      .unit_count = 1, .units = &u1, .read = zero_read,
				      .sizes = huge};
	wl_create_expect(b, &c, STRATA_E_OVERFLOW, "total bytes");
	strata_backend_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizing_keeps_group_windows_exact),
		cmocka_unit_test(test_sizing_sparse_indices_and_overflow),
		cmocka_unit_test(test_sizing_sparse_windows_equal_dense_geometry),
		cmocka_unit_test(test_sizing_every_byte_overflow_is_named),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
