/* engine_sizes.c - the residency engine holding the plan's sizes: its own
 * tensors measured with the plan's sizing (plan/sizing.c), refused where
 * they do not fit the sizes given, then the arenas, stream and events of
 * exactly those bytes (layer: residency). The engine sizes nothing
 * itself. Called by the create (engine.c) through engine_create.h. */
#include <inttypes.h>
#include <string.h>

#include "residency/engine_create.h"

/* ------------------------------------------------------------------------ */
/* Holding the plan's sizes                                                 */
/* ------------------------------------------------------------------------ */

/* Bytes of sizing param i: a static tensor's slot, then a unit's block. */
static strata_status slot_bytes(void *ctx, size_t i, uint64_t *out,
				strata_error *err)
{
	const strata_residency *e = ctx;
	if (i < e->cfg.static_count)
		return strata_checked_align(strata__res_tensor_exec(&e->cfg.statics[i]),
					    out, "static tensor bytes", err);
	*out = e->units[i - e->cfg.static_count].block_bytes;
	return STRATA_OK;
}

/* Sizing params of measure(): the statics, then the units kept. */
typedef struct measured {
	const strata_residency *e;
	const size_t *pos; /* unit position of param static_count + k */
} measured;

static strata_status measured_bytes(void *ctx, size_t i, uint64_t *out,
				    strata_error *err)
{
	const measured *m = ctx;
	size_t statics = m->e->cfg.static_count;
	if (i < statics)
		return slot_bytes((void *)m->e, i, out, err);
	return slot_bytes((void *)m->e, statics + m->pos[i - statics], out, err);
}

/* What the engine's own tensors take, measured with the plan's sizing (one
 * implementation of the seed's sums, plan/sizing.c): the static slots, the
 * largest window of `depth` units (resident: every unit), every block and
 * the largest. split >= 0 (PLACEMENT): only the units that split streams
 * weigh, the others count as absent indices (the seed's rule). */
static strata_status measure(const strata_residency *e, int split,
			     strata_residency_mode mode, uint64_t depth,
			     strata_plan_weights *w,
			     strata_plan_layout_info *info, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	size_t n = c->static_count + e->n, kept = 0;
	strata_plan_param *p = strata_calloc_or_error(n ? n : 1, sizeof *p,
						      "engine size check", err);
	size_t *pos = p ? strata_calloc_or_error(e->n ? e->n : 1, sizeof *pos,
						 "engine size check", err)
			: NULL;
	if (!pos) {
		strata_free(p);
		return STRATA_E_NOMEM;
	}
	for (size_t i = 0; i < c->static_count; i++)
		p[i] = (strata_plan_param){.name = c->statics[i].tensor->name,
					   .owner = {.kind = STRATA_OWNER_STATIC}};
	for (size_t i = 0; i < e->n; i++) {
		const strata_residency_unit *u = e->units[i].cfg;
		const char *g = c->groups[u->group];
		if (split >= 0 && e->units[i].place[split] != STRATA_PLACE_WINDOW)
			continue;
		pos[kept] = i;
		p[c->static_count + kept++] = (strata_plan_param){
			.name = g,
			.owner = {.kind = STRATA_OWNER_UNIT, .group = g,
				  .group_len = strlen(g), .unit = u->unit}};
	}
	measured m = {e, pos};
	strata_plan_layout *l = NULL;
	strata_status s = strata_plan_layout_create(p, c->static_count + kept,
						    measured_bytes, &m, NULL, 0,
						    &l, err);
	strata_free(p);
	strata_free(pos);
	if (s != STRATA_OK)
		return s;
	strata_plan_layout_get_info(l, info);
	s = strata_plan_layout_weights(l, mode, depth, w, err);
	strata_plan_layout_destroy(l);
	return s;
}

static strata_status short_error(strata_error *err, const char *tier,
				 const char *what, uint64_t need, uint64_t size)
{
	return strata_fail(err, STRATA_E_RES_BUDGET,
			   "size the engine with strata_residency_config_from_plan over the same tensors (plan and engine disagree: report it if they did)",
			   "%s memory: %s need %" PRIu64 " bytes (%u-byte aligned slots), "
			   "the plan gave %" PRIu64,
			   tier, what, need, STRATA_ALIGN, size);
}

/* PLACEMENT: the statics' slots on device 0 or in host memory, each
 * split's window of its own depth over the units it streams, each
 * device's resident blocks, and every unit not resident in host memory.
 * Fills the host bytes taken. */
static strata_status check_placement(strata_residency *e, uint64_t *host,
				     strata_error *err)
{
	const strata_residency_sizes *z = &e->cfg.sizes;
	strata_plan_weights w;
	strata_plan_layout_info info;
	uint64_t depth[2] = {z->depth, z->prefill_depth};
	strata_status s = STRATA_OK;
	for (int k = 0; k < 2 && s == STRATA_OK; k++) {
		s = measure(e, k, STRATA_RESIDENCY_HOST, depth[k], &w, &info,
			    err);
		if (s == STRATA_OK && w.window_bytes > z->window_device_bytes)
			return short_error(err, "device",
					   k ? "the prefill split's window"
					     : "the decode split's window",
					   w.window_bytes, z->window_device_bytes);
	}
	if (s != STRATA_OK)
		return s;
	uint64_t statics = w.static_bytes, res[STRATA_PLAN_MAX_DEVICES] = {0};
	*host = z->statics_on_host ? statics : 0;
	if (!z->statics_on_host && statics > z->static_device_bytes)
		return short_error(err, "device", "the static tensors", statics,
				   z->static_device_bytes);
	for (size_t i = 0; i < e->n; i++) {
		const unit_slot *u = &e->units[i];
		uint64_t *to = u->fixed ? &res[u->cfg->device] : host;
		*to = strata_sat_add_u64(*to, u->block_bytes);
	}
	for (uint32_t d = 0; d < z->device_count; d++)
		if (res[d] > z->device_weight_bytes[d])
			return short_error(err, "device", "the resident units",
					   res[d], z->device_weight_bytes[d]);
	if (*host > z->host_bytes)
		return short_error(err, "host", "the units not resident",
				   *host, z->host_bytes);
	return STRATA_OK;
}

/* Refuses sizes that do not hold the engine's tensors, and fills the
 * host bytes the mode takes (every block, or the lookahead slots). */
static strata_status check_sizes(strata_residency *e, uint64_t *host,
				 strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	const strata_residency_sizes *z = &c->sizes;
	strata_plan_weights w;
	strata_plan_layout_info info;
	if (c->mode == STRATA_RESIDENCY_PLACEMENT)
		return check_placement(e, host, err);
	strata_status s = measure(e, -1,
				  c->mode == STRATA_RESIDENCY_RESIDENT
					  ? STRATA_RESIDENCY_RESIDENT
					  : STRATA_RESIDENCY_HOST,
				  c->sizes.depth, &w, &info, err);
	if (s != STRATA_OK)
		return s;
	if (w.static_bytes > z->static_device_bytes)
		return short_error(err, "device", "the static tensors",
				   w.static_bytes, z->static_device_bytes);
	if (w.window_bytes > z->window_device_bytes)
		return short_error(err, "device",
				   c->mode == STRATA_RESIDENCY_RESIDENT
					   ? "the units (every one resident)"
					   : "the units of the largest window",
				   w.window_bytes, z->window_device_bytes);
	*host = 0;
	if (c->mode == STRATA_RESIDENCY_HOST)
		*host = info.all_units_bytes;
	else if (c->mode == STRATA_RESIDENCY_DISK && z->host_bytes)
		s = strata_checked_mul(c->lookahead_units, e->host_slot_bytes, host,
				       "lookahead cache bytes", err);
	if (s == STRATA_OK && *host > z->host_bytes)
		return short_error(err, "host",
				   c->mode == STRATA_RESIDENCY_HOST
					   ? "the units (every one)"
					   : "the lookahead slots",
				   *host, z->host_bytes);
	return s;
}

/* PLACEMENT: one arena per device (device 0's with the statics unless
 * they are on the host, the last's with the window), the host arena of
 * every unit not resident, and the copy stream with each unit's events. */
static strata_status take_placement(strata_residency *e, strata_error *err)
{
	const strata_residency_sizes *z = &e->cfg.sizes;
	uint32_t last = z->device_count - 1;
	strata_status s = STRATA_OK;
	for (uint32_t d = 0; s == STRATA_OK && d < z->device_count; d++) {
		uint64_t bytes = z->device_weight_bytes[d];
		if (d == 0 && !z->statics_on_host)
			bytes = strata_sat_add_u64(bytes, z->static_device_bytes);
		if (d == last)
			bytes = strata_sat_add_u64(bytes, z->window_device_bytes);
		s = strata_backend_get_caps(e->devices[d], &e->dev_caps[d], err);
		if (s == STRATA_OK)
			s = strata_arena_create(e->devices[d], STRATA_ARENA_DEVICE,
						bytes, "device weights",
						&e->dev_arenas[d], err);
	}
	if (s != STRATA_OK)
		return s;
	e->dev_arena = e->dev_arenas[last];
	s = strata_arena_create(e->b, STRATA_ARENA_HOST_PINNED, z->host_bytes,
				"host weights", &e->host_arena, err);
	if (s == STRATA_OK)
		s = strata_stream_create(e->b, &e->copy_stream, err);
	for (size_t i = 0; s == STRATA_OK && i < e->n; i++) {
		s = strata_event_create(e->b, &e->units[i].ev_start, err);
		if (s == STRATA_OK)
			s = strata_event_create(e->b, &e->units[i].ev_end, err);
	}
	return s;
}

/* Takes the arenas: exactly the plan's bytes, once they hold the tensors. */
strata_status strata__res_take_memory(strata_residency *e, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	const strata_residency_sizes *z = &c->sizes;
	uint64_t host = 0, device = 0;
	strata_status s = check_sizes(e, &host, err);
	if (s == STRATA_OK && c->mode == STRATA_RESIDENCY_PLACEMENT)
		return take_placement(e, err);
	if (s == STRATA_OK)
		s = strata_checked_add(z->static_device_bytes, z->window_device_bytes,
				       &device, "device weight bytes", err);
	if (s != STRATA_OK)
		return s;
	bool direct = c->mode == STRATA_RESIDENCY_DISK && !z->host_bytes;
	if (direct && !e->caps.device_addressable)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "give the disk mode host memory for its lookahead (--host-memory, --lookahead)",
				   "backend '%s' cannot take disk reads straight into device memory",
				   e->caps.name);
	s = strata_arena_create(e->b, STRATA_ARENA_DEVICE, device,
				"device weights", &e->dev_arena, err);
	if (s == STRATA_OK)
		s = strata_arena_create(e->b, STRATA_ARENA_HOST_PINNED,
					c->mode == STRATA_RESIDENCY_RESIDENT ? 0 : z->host_bytes,
					"host weights", &e->host_arena, err);
	if (s != STRATA_OK)
		return s;
	bool copies = !(c->mode == STRATA_RESIDENCY_RESIDENT || direct);
	if (!copies && e->caps.device_addressable)
		return STRATA_OK; /* no copies: reads land on the device */
	s = strata_stream_create(e->b, &e->copy_stream, err);
	for (size_t i = 0; copies && s == STRATA_OK && i < e->n; i++) {
		s = strata_event_create(e->b, &e->units[i].ev_start, err);
		if (s == STRATA_OK)
			s = strata_event_create(e->b, &e->units[i].ev_end, err);
	}
	return s;
}
