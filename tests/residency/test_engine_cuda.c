/* test_engine_cuda.c - the residency engine on the CUDA backend: every mode
 * over a real safetensors file, the bytes read back from the device checked
 * against the file, the plan's bounds kept (layer: residency). Skipped (77)
 * where there is no CUDA device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "residency/workload_fixture.h"
#include "support/gpu_skip.h"

static const wl_spec spec = {.text_units = {0, 1, 2, 3, 5, 6}, .text_count = 6,
			     .vision_count = 2, .bf16 = true};

/* Copies a device tensor back and checks it against the file. */
static void check_device(strata_backend *b, strata_stream *s, const workload *w,
			 const strata_residency_tensor *t, const void *dev)
{
	uint64_t bytes = t->exec_bytes ? t->exec_bytes : t->tensor->bytes;
	void *host = malloc(bytes);
	strata_error err;
	assert_non_null(host);
	assert_int_equal(
		strata_backend_copy_d2h_async(b, s, host, dev, bytes, &err),
		STRATA_OK);
	assert_int_equal(strata_backend_synchronize(b, s, &err), STRATA_OK);
	wl_check_tensor(w, t, host);
	free(host);
}

static void test_every_mode_on_cuda(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &spec);
	strata_backend *b = NULL;
	strata_error err;
	assert_int_equal(strata_backend_create("cuda", 0, NULL, &b, &err),
			 STRATA_OK);
	strata_stream *s = NULL;
	assert_int_equal(strata_stream_create(b, &s, &err), STRATA_OK);
	strata_residency_mode modes[] = {STRATA_RESIDENCY_RESIDENT, STRATA_RESIDENCY_HOST,
					 STRATA_RESIDENCY_HOST, STRATA_RESIDENCY_DISK};
	uint64_t depths[] = {0, 1, 3, 2};
	for (size_t m = 0; m < 4; m++) {
		strata_residency_config c = wl_config(&w, modes[m], depths[m]);
		strata_residency *e = NULL;
		assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
		/* execution order: sort positions by (group, unit) */
		size_t order[2 * WL_MAX_UNITS];
		for (size_t i = 0; i < w.unit_count; i++)
			order[i] = i;
		for (size_t i = 1; i < w.unit_count; i++)
			for (size_t j = i; j > 0; j--) {
				const strata_residency_unit *x = &w.units[order[j - 1]],
							    *y = &w.units[order[j]];
				if (x->group < y->group ||
				    (x->group == y->group && x->unit < y->unit))
					break;
				size_t t = order[j];
				order[j] = order[j - 1];
				order[j - 1] = t;
			}
		for (int tok = 0; tok < 2; tok++)
			for (size_t i = 0; i < w.unit_count; i++) {
				const strata_residency_unit *u = &w.units[order[i]];
				strata_residency_view v;
				assert_int_equal(strata_residency_acquire(e, u->group, u->unit,
									  &v, &err),
						 STRATA_OK);
				for (size_t t = 0; t < v.count; t++)
					check_device(b, s, &w, &v.tensors[t], v.data[t]);
				assert_int_equal(strata_residency_release(e, u->group, u->unit, &err),
						 STRATA_OK);
			}
		assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
		void *data;
		const strata_residency_tensor *t;
		assert_int_equal(strata_residency_static(e, "lm_head.weight", &data, &t, &err),
				 STRATA_OK);
		check_device(b, s, &w, t, data);
		strata_telemetry_snapshot snap;
		strata_telemetry_get(strata_residency_telemetry(e), &snap);
		strata_arena_stats dev;
		strata_residency_device_arena_stats(e, &dev);
		assert_true(snap.peak_bytes[STRATA_TIER_DEVICE] <= snap.planned_bytes[STRATA_TIER_DEVICE]);
		assert_int_equal(snap.peak_bytes[STRATA_TIER_DEVICE], dev.high_water_bytes);
		const strata_transfer_stats *x = snap.transfers;
		assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].count, 0); /* staged */
		if (modes[m] == STRATA_RESIDENCY_HOST)
			assert_int_equal(x[STRATA_DIR_HOST_TO_DEVICE].count,
					 w.static_count + 2 * w.unit_count);
		print_message("%s depth %llu: h2d %llu bytes in %.6f s, stalls %llu (%.6f s)\n",
			      strata_residency_mode_name(modes[m]),
			      (unsigned long long)depths[m],
			      (unsigned long long)x[STRATA_DIR_HOST_TO_DEVICE].bytes,
			      (double)x[STRATA_DIR_HOST_TO_DEVICE].ns / 1e9,
			      (unsigned long long)snap.stalls, (double)snap.stall_ns / 1e9);
		strata_residency_destroy(e);
	}
	strata_stream_destroy(b, s);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

int main(void)
{
	if (gpu_skip_without_device("test_residency_engine_cuda"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_mode_on_cuda),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
