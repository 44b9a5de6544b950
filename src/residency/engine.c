/* engine.c - the residency engine's life cycle: its create running the
 * steps of engine_create.h in order (the config checked and the units laid
 * out, engine_config.c; the plan's sizes held and the arenas taken,
 * engine_sizes.c; what stays put loaded, engine_load.c), its destroy, and
 * the lookups of what it holds (layer: residency). The engine sizes
 * nothing itself. The moving parts of the window are in engine_window.c,
 * the reads in engine_read.c; this file wires the reads' completion to the
 * window (read_done). */
#include <string.h>

#include "residency/engine_create.h"
#include "residency/engine_window.h"

/* ------------------------------------------------------------------------ */
/* Create and destroy                                                       */
/* ------------------------------------------------------------------------ */

static void set_plan_figures(strata_residency *e)
{
	const strata_residency_config *c = &e->cfg;
	/* tiers are charged what their arenas hand out (256-aligned), the
	 * same bytes the plan sizes with */
	strata_arena_stats dev, host;
	uint64_t planned_device = 0;
	for (uint32_t d = 0; d < e->device_count; d++) {
		strata_arena_get_stats(e->dev_arenas[d], &dev);
		planned_device = strata_sat_add_u64(planned_device, dev.capacity_bytes);
	}
	strata_arena_get_stats(e->host_arena, &host);
	uint64_t planned_host = host.capacity_bytes;
	uint64_t planned_disk = 0;
	if (c->mode == STRATA_RESIDENCY_DISK)
		for (size_t i = 0; i < e->n; i++)
			planned_disk = strata_sat_add_u64(planned_disk, e->units[i].file_bytes);
	strata_telemetry_set_planned(&e->tel, STRATA_TIER_DEVICE, planned_device);
	strata_telemetry_set_planned(&e->tel, STRATA_TIER_HOST, planned_host);
	strata_telemetry_set_planned(&e->tel, STRATA_TIER_DISK, planned_disk);
}

static strata_status init_sync(strata_residency *e, strata_error *err)
{
	strata_status s = strata_telemetry_init(&e->tel, err);
	if (s != STRATA_OK)
		return s;
	e->tel_ok = true;
	if (pthread_mutex_init(&e->lock, NULL) != 0)
		return strata_fail(err, STRATA_E_THREAD, "retry",
				   "cannot make the residency engine's mutex");
	e->lock_ok = true;
	if (pthread_cond_init(&e->cond, NULL) != 0)
		return strata_fail(err, STRATA_E_THREAD, "retry",
				   "cannot make the residency engine's condition variable");
	e->cond_ok = true;
	return STRATA_OK;
}

static strata_status start_disk(strata_residency *e, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	/* host 0: the window's own reads are the only ones */
	e->q_cap = c->sizes.host_bytes ? c->queue_depth : c->sizes.depth;
	if (!e->q_cap)
		e->q_cap = 1;
	e->queue = strata_calloc_or_error(e->q_cap, sizeof *e->queue,
					  "reader queue", err);
	if (!e->queue)
		return STRATA_E_NOMEM;
	e->read_done = strata__res_read_done; /* the reads report to the window */
	return strata__res_start_readers(e, err);
}

/* The devices: a placement's (the last being b), else b alone. */
static strata_status set_devices(strata_residency *e, strata_backend *b,
				 strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	bool placement = c->mode == STRATA_RESIDENCY_PLACEMENT;
	e->device_count = placement ? c->sizes.device_count : 1;
	for (uint32_t d = 0; d < e->device_count; d++) {
		e->devices[d] = placement && c->devices ? c->devices[d] : b;
		strata_status s = strata_backend_get_caps(e->devices[d],
							  &e->dev_caps[d], err);
		if (s != STRATA_OK)
			return s;
	}
	if (e->devices[e->device_count - 1] != b)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "create the engine on the backend of the split's last device",
				   "residency config: the window's device is not the engine's backend");
	return STRATA_OK;
}

strata_status strata_residency_create(strata_backend *b,
				      const strata_residency_config *cfg,
				      strata_residency **out,
				      strata_error *err)
{
	if (!b || !cfg || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "residency config: NULL backend, config or output");
	strata_status s = strata__res_check_config(cfg, err);
	if (s != STRATA_OK)
		return s;
	strata_residency *e = strata_calloc_or_error(1, sizeof *e,
						     "residency engine", err);
	if (!e)
		return STRATA_E_NOMEM;
	e->b = b;
	e->cfg = *cfg;
	const strata_residency_unit **order = NULL;
	s = init_sync(e, err);
	if (s == STRATA_OK)
		s = strata_backend_get_caps(b, &e->caps, err);
	if (s == STRATA_OK)
		s = set_devices(e, b, err);
	if (s == STRATA_OK)
		s = strata__res_sort_units(cfg, &order, err);
	if (s == STRATA_OK)
		s = strata__res_build_units(e, order, err);
	strata_free(order);
	if (s == STRATA_OK) {
		e->static_data = strata_calloc_or_error(
			cfg->static_count ? cfg->static_count : 1,
			sizeof *e->static_data, "static tensor pointers", err);
		s = e->static_data ? STRATA_OK : STRATA_E_NOMEM;
	}
	if (s == STRATA_OK)
		s = strata__res_take_memory(e, err);
	if (s == STRATA_OK && cfg->mode != STRATA_RESIDENCY_PLACEMENT)
		e->dev_arenas[0] = e->dev_arena;
	if (s == STRATA_OK) {
		set_plan_figures(e);
		s = strata__res_buffers_init(e, &e->main_buf, err);
	}
	if (s == STRATA_OK)
		s = strata__res_take_staging(e, err);
	if (s == STRATA_OK)
		s = strata__res_load_fixed(e, err);
	strata__res_drop_staging(e);
	if (s == STRATA_OK && cfg->mode == STRATA_RESIDENCY_DISK)
		s = start_disk(e, err);
	if (s != STRATA_OK) {
		strata_residency_destroy(e);
		return s;
	}
	*out = e;
	return STRATA_OK;
}

void strata_residency_destroy(strata_residency *e)
{
	if (!e)
		return;
	strata__res_stop_readers(e);
	strata__res_drop_staging(e);
	if (e->copy_stream) {
		strata_backend_synchronize(e->b, e->copy_stream, NULL);
		strata_stream_destroy(e->b, e->copy_stream);
	}
	for (size_t i = 0; e->units && i < e->n; i++) {
		strata_event_destroy(e->b, e->units[i].ev_start);
		strata_event_destroy(e->b, e->units[i].ev_end);
	}
	if (e->cfg.mode == STRATA_RESIDENCY_PLACEMENT)
		for (uint32_t d = 0; d < e->device_count; d++)
			strata_arena_destroy(e->dev_arenas[d]);
	else
		strata_arena_destroy(e->dev_arena);
	strata_arena_destroy(e->host_arena);
	if (e->units) {
		strata_free(e->units[0].offsets);
		strata_free(e->units[0].data);
	}
	strata_free(e->units);
	strata_free(e->group_begin);
	strata_free(e->static_data);
	strata_free(e->queue);
	strata__res_buffers_fini(&e->main_buf);
	if (e->tel_ok)
		strata_telemetry_fini(&e->tel);
	if (e->cond_ok)
		pthread_cond_destroy(&e->cond);
	if (e->lock_ok)
		pthread_mutex_destroy(&e->lock);
	strata_free(e);
}

/* ------------------------------------------------------------------------ */
/* Lookups                                                                  */
/* ------------------------------------------------------------------------ */

strata_status strata_residency_static(strata_residency *e, const char *name,
				      void **data,
				      const strata_residency_tensor **tensor,
				      strata_error *err)
{
	/* a linear scan: models have a handful of static tensors */
	for (size_t i = 0; e && name && i < e->cfg.static_count; i++)
		if (!strcmp(e->cfg.statics[i].tensor->name, name)) {
			if (data)
				*data = e->static_data[i];
			if (tensor)
				*tensor = &e->cfg.statics[i];
			return STRATA_OK;
		}
	char esc[128];
	return strata_fail(err, STRATA_E_NOT_FOUND,
			   "check the tensor name against the checkpoint",
			   "no static tensor '%s' in the residency engine",
			   name ? strata_escape(esc, sizeof esc, name, strlen(name)) : "(null)");
}

void strata_residency_get_sizes(const strata_residency *e,
				strata_residency_sizes *out)
{
	*out = e->cfg.sizes;
}

strata_telemetry *strata_residency_telemetry(strata_residency *e)
{
	return &e->tel;
}

void strata_residency_device_arena_stats(const strata_residency *e,
					 strata_arena_stats *out)
{
	strata_arena_get_stats(e->dev_arena, out);
}

void strata_residency_device_arena_stats_at(const strata_residency *e,
					    uint32_t d,
					    strata_arena_stats *out)
{
	memset(out, 0, sizeof *out);
	if (d < e->device_count && e->dev_arenas[d])
		strata_arena_get_stats(e->dev_arenas[d], out);
}

void strata_residency_host_arena_stats(const strata_residency *e,
				       strata_arena_stats *out)
{
	strata_arena_get_stats(e->host_arena, out);
}
