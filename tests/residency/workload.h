/* workload.h - a synthetic layered model written as a real safetensors file
 * in a temporary folder, opened through the checkpoint layer, and turned
 * into a residency config (tests of the residency layer). */
#ifndef STRATA_TEST_RESIDENCY_WORKLOAD_H
#define STRATA_TEST_RESIDENCY_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/residency.h"

#define WL_MAX_TENSORS 96
#define WL_MAX_UNITS 24

typedef struct wl_spec {
	uint64_t text_units[WL_MAX_UNITS]; /* unit indices of group "model" */
	size_t text_count;
	size_t vision_count; /* units 0.. of group "model.vision" */
	bool bf16;	     /* one static and one tensor per unit in bf16 */
} wl_spec;

typedef struct workload {
	char dir[128], path[160];
	size_t count;
	char *names[WL_MAX_TENSORS];
	strata_catalog *catalog;
	strata_weight_store *store;
	const char *groups[2];
	size_t group_count;
	strata_residency_tensor statics[4];
	size_t static_count;
	strata_residency_tensor unit_tensors[WL_MAX_TENSORS];
	strata_residency_unit units[2 * WL_MAX_UNITS];
	size_t unit_count;
	uint64_t static_file_bytes, unit_file_bytes, unit_exec_bytes;
	uint64_t static_aligned_bytes;
} workload;

/* Writes, opens and classifies; asserts on failure. */
void wl_create(workload *w, const wl_spec *spec);
void wl_destroy(workload *w);

/* A config over the workload: reads through the weight store, converts
 * bf16 to f32. Budgets generous unless the test changes them. */
strata_residency_config wl_config(workload *w, strata_residency_mode mode,
				  uint64_t depth);

/* Asserts the view's tensors hold exactly what was written. */
void wl_check_view(const workload *w, const strata_residency_view *v);
/* Same for a static tensor pointer. */
void wl_check_tensor(const workload *w, const strata_residency_tensor *t,
		     const void *data);

/* One forward pass: every unit of every group in order, acquire, check,
 * release. Returns the first error (and stops there). */
strata_status wl_pass(workload *w, strata_residency *e, strata_error *err);

#endif
