/* engine_create.h - the steps of the residency engine's create, each in the
 * file of its job: the config and the unit layout (engine_config.c), the
 * plan's sizes held and the arenas taken (engine_sizes.c), the loads of
 * what stays put (engine_load.c); engine.c runs them in order and tears
 * down (layer: residency). Not a public header. */
#ifndef STRATA_RESIDENCY_ENGINE_CREATE_H
#define STRATA_RESIDENCY_ENGINE_CREATE_H

#include "residency/engine_internal.h"

/* Refuses a config the engine cannot run (mode, hooks, tensors, a
 * placement's units and depths) with STRATA_E_INVALID_ARG; takes nothing. */
strata_status strata__res_check_config(const strata_residency_config *c,
				       strata_error *err);
/* The config's units in execution order (group, then unit) into *out,
 * which the caller frees; a {group, unit} given twice is refused. */
strata_status strata__res_sort_units(const strata_residency_config *c,
				     const strata_residency_unit ***out,
				     strata_error *err);
/* e->units from the sorted units p: each slot's tensor offsets and view
 * pointers (unit 0 owns both arrays, freed at destroy), the group bounds,
 * and the largest figures the buffers are sized by. */
strata_status strata__res_build_units(strata_residency *e,
				      const strata_residency_unit *const *p,
				      strata_error *err);
/* Checks that the plan's sizes hold the engine's tensors (STRATA_E_RES_BUDGET
 * names the tier and the bytes where they do not), then takes the arenas
 * of exactly those sizes, the copy stream and the units' events; what it
 * took is e's, freed by destroy even on failure. */
strata_status strata__res_take_memory(strata_residency *e, strata_error *err);
/* The load-time staging buffer where a device is not addressable by host
 * code, charged to the host tier; strata__res_drop_staging frees it (safe
 * when there is none). */
strata_status strata__res_take_staging(strata_residency *e, strata_error *err);
void strata__res_drop_staging(strata_residency *e);
/* Loads the static tensors and every unit that does not stream from disk
 * into their arenas, calling cfg.progress; the error names the tensor or
 * unit that failed. */
strata_status strata__res_load_fixed(strata_residency *e, strata_error *err);

#endif
