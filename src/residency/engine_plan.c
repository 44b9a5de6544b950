/* engine_plan.c - filling the engine's config from the planner's selected
 * candidate, so the engine runs with exactly the budgets the plan sized
 * (layer: residency). */
#include "strata/residency.h"

strata_status strata_residency_config_from_plan(const strata_plan *p,
						strata_residency_config *cfg,
						strata_error *err)
{
	const strata_plan_candidate *c = p ? strata_plan_selected(p) : NULL;
	if (!c || !cfg)
		return strata_fail(err, STRATA_E_PLAN_NOTHING_FITS,
				   "raise --device-memory or --host-memory, or pick another --residency",
				   "the plan has no selected residency mode to run with");
	cfg->mode = c->mode;
	cfg->depth = c->weights.depth;
	/* the weights' share of the device: static + window, aligned slots;
	 * KV cache and workspace are the forward pass's own buffers */
	cfg->device_budget_bytes = strata_plan_weight_device_bytes(p);
	/* host: every unit (host mode), the lookahead slots (disk mode) */
	cfg->host_budget_bytes = c->mode == STRATA_RESIDENCY_RESIDENT ? 0 : c->host_bytes;
	cfg->lookahead_units = c->mode == STRATA_RESIDENCY_DISK ? c->lookahead : 0;
	cfg->queue_depth = c->mode == STRATA_RESIDENCY_DISK ? c->queue : 0;
	return STRATA_OK;
}
