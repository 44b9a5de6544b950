/* test_calibrate_cuda.c - strata calibrate's whole-layer measure on a
 * CUDA device (issue 17): a decode step and a prefill chunk of a llama
 * layer per type through the device's kernel table, and the fixed costs
 * the plan adds per device layer derived from them, in range (layer:
 * plan). Exits 77 (skipped) where no CUDA device is visible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "plan/internal.h"
#include "strata/backend.h"
#include "strata/plan.h"
#include "support/gpu_skip.h"

/* The layer on cuda:0 directly: a 512-row chunk takes longer than a
 * decode step, and both are below what a layer of 4096 can take. */
static void a_device_layer_is_timed(void **state)
{
	(void)state;
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	strata_error err;
	assert_int_equal(strata_backend_create("cuda", 0, NULL, &b, &err),
			 STRATA_OK);
	assert_int_equal(strata_compute_create_on(b, 0, &c, &err), STRATA_OK);
	assert_int_equal(strata_compute_reserve(c, (uint64_t)512 * 14336 * 4,
						&err),
			 STRATA_OK);
	strata__plan_layer_time dec, pre;
	const strata_block_type types[] = {STRATA_BLOCK_BF16,
					   STRATA_BLOCK_Q8_0};
	for (size_t i = 0; i < 2; i++) {
		strata_status s = strata__plan_calibrate_layer(
			b, c, types[i], (uint64_t)256 << 20, 1, 2, &dec, &err);
		if (s)
			fail_msg("%s / %s", err.message, err.fix);
		s = strata__plan_calibrate_layer(b, c, types[i],
						 (uint64_t)256 << 20, 512, 2,
						 &pre, &err);
		if (s)
			fail_msg("%s / %s", err.message, err.fix);
		printf("%s: decode layer %.1f us, 512-row chunk %.1f us\n",
		       strata_block_name(types[i]), dec.seconds * 1e6,
		       pre.seconds * 1e6);
		assert_int_equal(dec.dim, 4096);
		assert_true(dec.seconds > 1e-6 && dec.seconds < 10e-3);
		assert_true(pre.seconds > dec.seconds && pre.seconds < 0.1);
	}
	strata_compute_destroy(c);
	strata_backend_destroy(b);
}

/* strata calibrate with device_layers: every asked type's fixed costs
 * measured on the device (a decode layer's under 1 ms), none on types not
 * asked for. */
static void calibrate_writes_the_device_layer_costs(void **state)
{
	(void)state;
	strata_plan_calibrate_options o = {
		.bytes = (uint64_t)256 << 20, .memory_bytes = (uint64_t)256 << 20,
		.repeats = 2,
		.types = 1u << STRATA_BLOCK_BF16 | 1u << STRATA_BLOCK_Q8_0,
		.device_layers = true};
	strata_plan_rates r;
	strata_error err;
	if (strata_plan_calibrate(&o, &r, &err))
		fail_msg("%s / %s", err.message, err.fix);
	assert_true(r.device_count >= 1);
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		const strata_plan_type_rate *k = &r.devices[0].types[t];
		bool asked = t == STRATA_BLOCK_BF16 || t == STRATA_BLOCK_Q8_0;
		if (asked) {
			printf("%s: fixed %.2f us a layer + %.4f us a row\n",
			       strata_block_name((strata_block_type)t),
			       k->layer_seconds * 1e6, k->row_seconds * 1e6);
			assert_true(k->layer_seconds > 0 &&
				    k->layer_seconds < 1e-3);
			assert_true(k->row_seconds > 0 && k->row_seconds < 1e-4);
		} else {
			assert_true(k->layer_seconds == 0 &&
				    k->row_seconds == 0);
		}
	}
}

int main(void)
{
	if (gpu_skip_without_device("test_plan_calibrate_cuda"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_device_layer_is_timed),
		cmocka_unit_test(calibrate_writes_the_device_layer_costs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
