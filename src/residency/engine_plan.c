/* engine_plan.c - the one route from the planner to the engine: the
 * selected candidate's mode, sizes, lookahead and queue copied into the
 * engine's config, so the engine's arenas are the bytes the plan sized
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
	bool disk = c->mode == STRATA_RESIDENCY_DISK;
	cfg->mode = c->mode;
	cfg->sizes = (strata_residency_sizes){
		.depth = c->weights.depth,
		.static_bytes = c->weights.static_bytes,
		.window_bytes = c->weights.window_bytes,
		/* the weights' share of the device; KV cache and workspace
		 * are the forward pass's own buffers */
		.static_device_bytes = c->static_device_bytes,
		.window_device_bytes = c->window_device_bytes,
		/* host: every unit (host mode), the lookahead ring (disk
		 * mode; 0 when reads go straight to the device) */
		.host_bytes = c->mode == STRATA_RESIDENCY_HOST ? c->host_weight_bytes
			      : disk ? c->staging_bytes : 0,
	};
	cfg->lookahead_units = disk ? c->lookahead : 0;
	cfg->queue_depth = disk ? c->queue : 0;
	return STRATA_OK;
}
