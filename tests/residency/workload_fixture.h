/* workload_fixture.h - a synthetic layered model written as a real
 * safetensors file in a temporary folder, opened through the checkpoint layer, and turned
 * into a residency config (tests of the residency layer). */
#ifndef STRATA_TESTS_RESIDENCY_WORKLOAD_FIXTURE_H
#define STRATA_TESTS_RESIDENCY_WORKLOAD_FIXTURE_H

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

/* Units 0 .. 5 of group "model" and 2 of "model.vision": the layout most
 * engine tests run. */
extern const wl_spec wl_dense;

/* Writes, opens and classifies; asserts on failure. */
void wl_create(workload *w, const wl_spec *spec);
void wl_destroy(workload *w);

/* A plan over the workload's catalog on the CPU (architecture unknown, a
 * machine of 1 GiB); o->device is set to CPU. The plan's own status: a
 * forced mode that does not fit is E_PLAN_NOTHING_FITS with p->plan set.
 * Destroy with wl_plan_destroy. */
typedef struct wl_planned {
	strata_plan_source *src;
	strata_plan *plan;
	strata_plan_arch arch;
} wl_planned;
strata_status wl_plan(workload *w, strata_plan_options *o, wl_planned *p,
		      strata_error *err);
void wl_plan_destroy(wl_planned *p);

/* A config over the workload: reads through the weight store, converts
 * bf16 to f32, and its mode and sizes come from a plan made with `o`
 * (strata_residency_config_from_plan), as a run's do. Asserts the plan
 * selects something. */
strata_residency_config wl_config_planned(workload *w,
					  const strata_plan_options *o);
/* The same for a forced mode with budgets of 16 MiB: host:depth, resident,
 * or disk with a lookahead of 2 and a queue of 1. */
strata_residency_config wl_config(workload *w, strata_residency_mode mode,
				  uint64_t depth);
/* Disk mode with this lookahead and queue; lookahead 0: host memory 0, the
 * reads go straight to the device. */
strata_residency_config wl_config_disk(workload *w, uint64_t lookahead,
				       uint64_t queue);

/* Asserts the view's tensors hold exactly what was written. */
void wl_check_view(const workload *w, const strata_residency_view *v);
/* Same for a static tensor pointer. */
void wl_check_tensor(const workload *w, const strata_residency_tensor *t,
		     const void *data);

/* A CPU backend; `hidden` hides its device memory from host code, as
 * CUDA's is, so loads go through staging. Asserts it is made. */
strata_backend *wl_cpu(bool hidden);

/* Creates an engine over c on b expecting `want` (destroyed again when
 * made); on an error its message must name `says` (NULL: any). */
void wl_create_expect(strata_backend *b, const strata_residency_config *c,
		      strata_status want, const char *says);

/* One forward pass: every unit of every group in order, acquire, check,
 * release. Returns the first error (and stops there). */
strata_status wl_pass(workload *w, strata_residency *e, strata_error *err);

#endif
