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
			      : disk ? c->staging_bytes - c->load_staging_bytes
				     : 0,
	};
	if (c->mode == STRATA_RESIDENCY_PLACEMENT) {
		/* each split streams through its own depth; the devices hold
		 * their resident units, the host every other unit (and the
		 * statics when the CPU computes them) */
		cfg->sizes.depth = c->decode_depth;
		cfg->sizes.prefill_depth = c->prefill_depth;
		cfg->sizes.host_bytes = c->host_weight_bytes;
		cfg->sizes.device_count = c->devices ? c->devices : 1;
		for (uint32_t d = 0; d < cfg->sizes.device_count &&
				     d < STRATA_PLAN_MAX_DEVICES; d++)
			cfg->sizes.device_weight_bytes[d] = c->device_weight_bytes[d];
		cfg->sizes.statics_on_host = c->statics_on_cpu;
	}
	cfg->lookahead_units = disk ? c->lookahead : 0;
	cfg->queue_depth = disk ? c->queue : 0;
	return STRATA_OK;
}
