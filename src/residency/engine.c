/* engine.c - the residency engine's life cycle: checking the config and
 * that the plan's sizes hold its tensors, taking the arenas of exactly those
 * sizes, loading what stays put, and tearing it all down (layer:
 * residency). The engine sizes nothing itself. The moving parts of the
 * window are in engine_window.c, the reads in engine_read.c; this file
 * wires the reads' completion to the window (read_done). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "residency/engine_window.h"

/* ------------------------------------------------------------------------ */
/* Execution order                                                          */
/* ------------------------------------------------------------------------ */

static int by_group_unit(const void *pa, const void *pb)
{
	const strata_residency_unit *a = *(const strata_residency_unit *const *)pa;
	const strata_residency_unit *b = *(const strata_residency_unit *const *)pb;
	if (a->group != b->group)
		return a->group < b->group ? -1 : 1;
	return a->unit < b->unit ? -1 : a->unit > b->unit;
}

/* The units in execution order; the caller frees *out. Duplicates are
 * refused: a {group, unit} is one unit. */
static strata_status sort_units(const strata_residency_config *c,
				const strata_residency_unit ***out,
				strata_error *err)
{
	const strata_residency_unit **p =
		strata_calloc_or_error(c->unit_count ? c->unit_count : 1,
				       sizeof *p, "unit order", err);
	if (!p)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < c->unit_count; i++)
		p[i] = &c->units[i];
	qsort(p, c->unit_count, sizeof *p, by_group_unit);
	for (size_t i = 1; i < c->unit_count; i++)
		if (p[i]->group == p[i - 1]->group && p[i]->unit == p[i - 1]->unit) {
			strata_fail(err, STRATA_E_INVALID_ARG,
				    "list each execution unit once",
				    "unit %" PRIu64 " of group '%s' is given twice",
				    p[i]->unit, c->groups[p[i]->group]);
			strata_free(p);
			return STRATA_E_INVALID_ARG;
		}
	*out = p;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Checking the config                                                      */
/* ------------------------------------------------------------------------ */

static strata_status bad(strata_error *err, const char *fix, const char *what)
{
	return strata_fail(err, STRATA_E_INVALID_ARG, fix,
			   "residency config: %s", what);
}

static strata_status check_tensors(const strata_residency_config *c,
				   const strata_residency_tensor *t, size_t n,
				   strata_error *err)
{
	if (n && !t)
		return bad(err, "pass the tensor array", "a tensor list is NULL");
	for (size_t i = 0; i < n; i++) {
		if (!t[i].tensor)
			return bad(err, "point every tensor at its catalog entry",
				   "a tensor has no catalog entry");
		if (t[i].convert && !c->convert)
			return bad(err, "give a conversion hook",
				   "a tensor is marked for conversion but there is no hook");
		if (!t[i].convert && t[i].exec_bytes &&
		    t[i].exec_bytes != t[i].tensor->bytes)
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "mark the tensor for conversion, or give its file size",
					   "residency config: tensor '%s' is %" PRIu64
					   " bytes in the file but %" PRIu64
					   " where it executes, without a conversion",
					   t[i].tensor->name, t[i].tensor->bytes,
					   t[i].exec_bytes);
	}
	return STRATA_OK;
}

static bool place_ok(strata_place w)
{
	return w == STRATA_PLACE_RESIDENT || w == STRATA_PLACE_WINDOW ||
	       w == STRATA_PLACE_CPU;
}

/* PLACEMENT: each unit resident (in both splits, on a device of the
 * split), window or cpu, and a window depth for each split that streams. */
static strata_status check_places(const strata_residency_config *c,
				  strata_error *err)
{
	const strata_residency_sizes *z = &c->sizes;
	if (z->device_count == 0 || z->device_count > STRATA_PLAN_MAX_DEVICES ||
	    (z->device_count > 1 && !c->devices))
		return bad(err, "size the engine with strata_residency_config_from_plan",
			   "a placement needs 1 to 8 devices and their backends");
	bool streams[2] = {false, false};
	for (size_t i = 0; i < c->unit_count; i++) {
		const strata_residency_unit *u = &c->units[i];
		bool res = u->place == STRATA_PLACE_RESIDENT;
		if (!place_ok(u->place) || !place_ok(u->prefill_place) ||
		    res != (u->prefill_place == STRATA_PLACE_RESIDENT) ||
		    (res && u->device >= z->device_count))
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "place each unit resident (in both passes, on a device of the split), window or cpu",
					   "residency config: unit %" PRIu64 " is %s in decode and %s in prefill (device %u of %u)",
					   u->unit, strata_place_name(u->place),
					   strata_place_name(u->prefill_place),
					   u->device, z->device_count);
		streams[0] |= u->place == STRATA_PLACE_WINDOW;
		streams[1] |= u->prefill_place == STRATA_PLACE_WINDOW;
	}
	if ((streams[0] && !z->depth) || (streams[1] && !z->prefill_depth))
		return bad(err, "size the engine with strata_residency_config_from_plan",
			   "a placement that streams units needs a window depth");
	return STRATA_OK;
}

static strata_status check_config(const strata_residency_config *c,
				  strata_error *err)
{
	if (c->mode != STRATA_RESIDENCY_RESIDENT && c->mode != STRATA_RESIDENCY_HOST &&
	    c->mode != STRATA_RESIDENCY_DISK && c->mode != STRATA_RESIDENCY_PLACEMENT)
		return bad(err, "resolve the mode with the planner first",
			   "the mode must be resident, host, disk or placement");
	if (!c->read)
		return bad(err, "give a read function (a weight store)",
			   "no read function");
	if (c->unit_count && (!c->units || !c->groups || !c->group_count))
		return bad(err, "pass the unit and group arrays", "units without groups");
	if (c->mode == STRATA_RESIDENCY_HOST && c->sizes.depth == 0)
		return bad(err, "use a host window depth of at least 1",
			   "host mode with depth 0");
	if (c->mode == STRATA_RESIDENCY_DISK && c->unit_count && c->sizes.depth == 0)
		return bad(err, "size the engine with strata_residency_config_from_plan",
			   "disk mode with a window depth of 0");
	if (c->mode == STRATA_RESIDENCY_DISK && c->sizes.host_bytes &&
	    (c->lookahead_units == 0 || c->queue_depth == 0))
		return bad(err, "give --lookahead and --queue of at least 1, or host memory 0",
			   "disk mode with host memory needs a lookahead and a queue");
	strata_status s = check_tensors(c, c->statics, c->static_count, err);
	if (s == STRATA_OK && c->mode == STRATA_RESIDENCY_PLACEMENT)
		s = check_places(c, err);
	for (size_t i = 0; s == STRATA_OK && i < c->unit_count; i++) {
		if (c->units[i].group >= c->group_count)
			return bad(err, "use a group index below the group count",
				   "a unit's group is out of range");
		s = check_tensors(c, c->units[i].tensors, c->units[i].tensor_count, err);
	}
	return s;
}

/* ------------------------------------------------------------------------ */
/* Building                                                                 */
/* ------------------------------------------------------------------------ */

/* Unit slots, their tensor offsets and view pointers, group bounds, and the
 * largest figures the buffers are sized by. */
static strata_status build_units(strata_residency *e,
				 const strata_residency_unit *const *p,
				 strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	size_t total = 0;
	e->max_tensors = 0;
	for (size_t i = 0; i < c->static_count; i++)
		if (c->statics[i].convert && c->statics[i].tensor->bytes > e->scratch_bytes)
			e->scratch_bytes = c->statics[i].tensor->bytes;
	if (c->static_count)
		e->max_tensors = 1;
	for (size_t i = 0; i < c->unit_count; i++) {
		total += p[i]->tensor_count;
		if (p[i]->tensor_count > e->max_tensors)
			e->max_tensors = p[i]->tensor_count;
	}
	e->n = c->unit_count;
	e->units = strata_calloc_or_error(e->n ? e->n : 1, sizeof *e->units,
					  "unit slots", err);
	uint64_t *offsets = e->units ? strata_calloc_or_error(total ? total : 1,
							      sizeof *offsets,
							      "tensor offsets", err)
				     : NULL;
	void **data = offsets ? strata_calloc_or_error(total ? total : 1,
						       sizeof *data, "unit views", err)
			      : NULL;
	e->group_begin = data ? strata_calloc_or_error(c->group_count + 1,
						       sizeof *e->group_begin,
						       "group bounds", err)
			      : NULL;
	if (e->units) {
		/* unit 0 keeps the bases, which destroy frees */
		e->units[0].offsets = offsets;
		e->units[0].data = data;
	}
	if (!e->group_begin)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < e->n; i++) {
		unit_slot *u = &e->units[i];
		const strata_residency_unit *cu = p[i];
		u->cfg = cu;
		if (c->mode == STRATA_RESIDENCY_PLACEMENT) {
			u->place[0] = cu->place;
			u->place[1] = cu->prefill_place;
		} else {
			u->place[0] = c->mode == STRATA_RESIDENCY_RESIDENT ? STRATA_PLACE_RESIDENT
				      : c->mode == STRATA_RESIDENCY_HOST   ? STRATA_PLACE_WINDOW
									   : STRATA_PLACE_DISK;
			u->place[1] = u->place[0];
		}
		u->fixed = c->mode == STRATA_RESIDENCY_PLACEMENT &&
			   cu->place == STRATA_PLACE_RESIDENT;
		u->offsets = offsets;
		u->data = data;
		offsets += cu->tensor_count;
		data += cu->tensor_count;
		for (size_t t = 0; t < cu->tensor_count; t++) {
			const strata_residency_tensor *ct = &cu->tensors[t];
			uint64_t b = strata__res_tensor_exec(ct), r;
			u->offsets[t] = u->block_bytes;
			strata_status s = strata_checked_align(b, &r, "tensor bytes", err);
			if (s == STRATA_OK)
				s = strata_checked_add(u->block_bytes, r, &u->block_bytes,
						       "unit block bytes", err);
			if (s != STRATA_OK)
				return s;
			u->exec_bytes += b; /* bounded by block_bytes */
			u->file_bytes += ct->tensor->bytes; /* likewise or less */
			if (ct->convert && ct->tensor->bytes > e->scratch_bytes)
				e->scratch_bytes = ct->tensor->bytes;
		}
		if (u->block_bytes > e->host_slot_bytes)
			e->host_slot_bytes = u->block_bytes;
	}
	for (uint32_t g = 0, i = 0; g <= c->group_count; g++) {
		while (i < e->n && e->units[i].cfg->group < g)
			i++;
		e->group_begin[g] = i;
	}
	return STRATA_OK;
}

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
static strata_status take_memory(strata_residency *e, strata_error *err)
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

/* A load through the staging buffer onto device `dev` (its own stream,
 * made for the load, where it is not the window's device): each tensor
 * read into the staging buffer, then its copy to the device queued at
 * once, so the link copies tensor i while tensor i+1 is read from disk or
 * the page cache and the load takes about the longer of the two, not
 * their sum (issue 25). The buffer is not reused within the call (each
 * tensor has its own offset), and the call waits for every copy before it
 * returns, so the next load may fill it again. *read_ns: the time spent
 * reading; *copy_ns: from the first copy queued to the last done (the
 * span the copies were in flight, overlapping the reads). */
static strata_status load_staged(strata_residency *e, uint32_t dev,
				 unsigned char *block,
				 const strata_residency_tensor *t, size_t count,
				 const uint64_t *offsets, uint64_t *moved,
				 uint64_t *read_ns, uint64_t *copy_ns,
				 strata_error *err)
{
	strata_backend *b = e->devices[dev];
	strata_stream *stream = e->copy_stream, *own = NULL;
	strata_status s = STRATA_OK;
	if (b != e->b || !stream) {
		s = strata_stream_create(b, &own, err);
		stream = own;
	}
	uint64_t first = 0;
	for (size_t i = 0; s == STRATA_OK && i < count; i++) {
		uint64_t t0 = strata_now_ns();
		s = strata__res_read_tensors(e, t + i, 1, offsets + i, e->staging,
					     &e->main_buf, err);
		uint64_t t1 = strata_now_ns();
		*read_ns += t1 - t0;
		if (s != STRATA_OK)
			break;
		uint64_t n = strata__res_tensor_exec(&t[i]);
		*moved += n;
		if (!first)
			first = t1;
		s = strata_backend_copy_h2d_async(b, stream, block + offsets[i],
						  e->staging + offsets[i], n, err);
	}
	/* wait even after an error: the staging buffer is reused */
	if (stream) {
		strata_status w = strata_backend_synchronize(b, stream,
							     s == STRATA_OK ? err : NULL);
		if (s == STRATA_OK)
			s = w;
	}
	*copy_ns = first ? strata_now_ns() - first : 0;
	if (own)
		strata_stream_destroy(b, own);
	return s;
}

/* On a backend whose device memory is this process's (the CPU), each
 * tensor of a device block kept as stored is mapped from its file
 * (cfg.map) rather than read into the block: no copy, and none of the
 * block's fresh pages faulted in, which was most of a load's time (issue
 * 25). A file that cannot be mapped, or a tensor at an address its
 * kernels could not read (below 4-byte alignment), is read as before. The
 * block stays allocated, so the tiers' figures are the plan's either way.
 * Fills e->main_buf.mapped[0..count). */
static strata_status map_tensors(strata_residency *e, strata_tier tier,
				 uint32_t dev, const strata_residency_tensor *t,
				 size_t count, strata_error *err)
{
	const void **m = e->main_buf.mapped;
	if (!m)
		return STRATA_OK;
	bool may = tier == STRATA_TIER_DEVICE &&
		   e->dev_caps[dev].device_addressable;
	for (size_t i = 0; i < count; i++) {
		m[i] = NULL;
		if (!may || t[i].convert || !t[i].tensor->bytes)
			continue;
		const void *p = NULL;
		strata_status s = e->cfg.map(e->cfg.read_user, t[i].tensor, &p,
					     err);
		if (s == STRATA_E_UNSUPPORTED)
			continue;
		if (s != STRATA_OK)
			return s;
		if ((uintptr_t)p % 4 == 0)
			m[i] = p;
	}
	return STRATA_OK;
}

/* Reads tensors into a fresh block of arena `a` on the calling thread
 * (or maps them, map_tensors: e->main_buf.mapped says which), charging
 * `tier` and recording the transfer; a device tier's block is on device
 * `dev`. */
static strata_status load_now(strata_residency *e, strata_arena *a,
			      strata_tier tier, strata_direction dir,
			      uint32_t dev,
			      const strata_residency_tensor *t, size_t count,
			      const uint64_t *offsets, uint64_t block_bytes,
			      uint64_t file_bytes,
			      unsigned char **out, strata_error *err)
{
	void *block = NULL;
	strata_status s = strata_arena_alloc(a, block_bytes, &block, err);
	if (s != STRATA_OK)
		return s;
	strata_telemetry_add_resident(&e->tel, tier, block_bytes);
	/* a device host code cannot write (CUDA) is loaded through the staging
	 * buffer, each tensor's copy overlapping the next one's read */
	bool staged = tier == STRATA_TIER_DEVICE &&
		      !e->dev_caps[dev].device_addressable;
	if (staged) {
		uint64_t moved = 0, read_ns = 0, copy_ns = 0;
		/* maps nothing here (the device is not addressable): clears
		 * the list the per-tensor reads and the caller look at */
		s = map_tensors(e, tier, dev, t, count, err);
		if (s == STRATA_OK)
			s = load_staged(e, dev, block, t, count, offsets, &moved, &read_ns,
				&copy_ns, err);
		if (s != STRATA_OK)
			return s; /* the block goes with the arena at destroy */
		strata_telemetry_record_transfer(&e->tel, STRATA_DIR_DISK_TO_HOST,
						 file_bytes, read_ns);
		strata_telemetry_record_transfer(&e->tel, STRATA_DIR_HOST_TO_DEVICE,
						 moved, copy_ns);
		*out = block;
		return STRATA_OK;
	}
	uint64_t t0 = strata_now_ns();
	s = map_tensors(e, tier, dev, t, count, err);
	if (s != STRATA_OK)
		return s;
	s = strata__res_read_tensors(e, t, count, offsets, (unsigned char *)block,
				     &e->main_buf, err);
	if (s != STRATA_OK)
		return s; /* the block goes with the arena at destroy */
	strata_telemetry_record_transfer(&e->tel, dir, file_bytes,
					 strata_now_ns() - t0);
	*out = block;
	return STRATA_OK;
}

/* The load-time staging buffer of a device host code cannot write: one
 * unit block or static tensor slot, charged to the host tier while it
 * exists (create only). */
static strata_status take_staging(strata_residency *e, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	bool addressable = true, units = c->mode == STRATA_RESIDENCY_RESIDENT;
	for (uint32_t d = 0; d < e->device_count; d++)
		addressable &= e->dev_caps[d].device_addressable;
	for (size_t i = 0; i < e->n; i++)
		units |= e->units[i].fixed;
	uint64_t need = units ? e->host_slot_bytes : 0;
	for (size_t i = 0; i < c->static_count; i++) {
		uint64_t b = 0;
		strata_status s = strata_checked_align(strata__res_tensor_exec(&c->statics[i]),
						       &b, "static tensor bytes", err);
		if (s != STRATA_OK)
			return s;
		if (b > need)
			need = b;
	}
	if (addressable || need == 0)
		return STRATA_OK;
	void *p = NULL;
	strata_status s = strata_backend_host_alloc(e->b, need, true, &p, err);
	if (s != STRATA_OK)
		return strata_error_prefix(err, "load staging buffer");
	e->staging = p;
	e->staging_bytes = need;
	strata_telemetry_add_resident(&e->tel, STRATA_TIER_HOST, need);
	return STRATA_OK;
}

static void drop_staging(strata_residency *e)
{
	if (!e->staging)
		return;
	strata_backend_host_free(e->b, e->staging);
	strata_telemetry_sub_resident(&e->tel, STRATA_TIER_HOST, e->staging_bytes);
	e->staging = NULL;
	e->staging_bytes = 0;
}

/* The file bytes the create loads: the statics, and every unit unless
 * they stream from disk. */
static uint64_t load_total(const strata_residency *e)
{
	const strata_residency_config *c = &e->cfg;
	uint64_t total = 0;
	for (size_t i = 0; i < c->static_count; i++)
		total = strata_sat_add_u64(total, c->statics[i].tensor->bytes);
	for (size_t i = 0; c->mode != STRATA_RESIDENCY_DISK && i < e->n; i++)
		total = strata_sat_add_u64(total, e->units[i].file_bytes);
	return total;
}

static void progress(const strata_residency *e, uint64_t *done,
		     uint64_t bytes, uint64_t total)
{
	*done = strata_sat_add_u64(*done, bytes);
	if (e->cfg.progress)
		e->cfg.progress(e->cfg.progress_user, *done, total);
}

/* Every unit, onto its device (resident, or fixed by the placement) or
 * into host memory. */
static strata_status load_units(strata_residency *e, uint64_t *done,
				uint64_t total, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	strata_status s = STRATA_OK;
	for (size_t i = 0; s == STRATA_OK && i < e->n; i++) {
		unit_slot *u = &e->units[i];
		unsigned char *block = NULL;
		bool resident = c->mode == STRATA_RESIDENCY_RESIDENT || u->fixed;
		uint32_t dev = u->fixed ? u->cfg->device : 0;
		s = load_now(e, resident ? e->dev_arenas[dev] : e->host_arena,
			     resident ? STRATA_TIER_DEVICE : STRATA_TIER_HOST,
			     resident ? STRATA_DIR_DISK_TO_DEVICE : STRATA_DIR_DISK_TO_HOST,
			     dev, u->cfg->tensors, u->cfg->tensor_count, u->offsets,
			     u->block_bytes, u->file_bytes, &block, err);
		if (s != STRATA_OK) {
			strata_error_prefix(err, "loading unit %" PRIu64 " of group '%s'",
					    u->cfg->unit, c->groups[u->cfg->group]);
			break;
		}
		if (resident) {
			const void **m = e->main_buf.mapped;
			u->dev_block = block;
			u->dev = DEV_READY;
			for (size_t t = 0; t < u->cfg->tensor_count; t++)
				u->data[t] = m && m[t] ? (void *)m[t]
						       : block + u->offsets[t];
		} else {
			u->host_block = block;
			u->host = HOST_CACHED;
		}
		progress(e, done, u->file_bytes, total);
	}
	return s;
}

static strata_status load_fixed(strata_residency *e, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	static const uint64_t zero_offset = 0;
	strata_status s = STRATA_OK;
	uint64_t done = 0, total = load_total(e);
	if (c->map && !(e->main_buf.mapped = strata_calloc_or_error(
				e->max_tensors ? e->max_tensors : 1,
				sizeof *e->main_buf.mapped, "mapped tensor list",
				err)))
		return STRATA_E_NOMEM;
	for (size_t i = 0; s == STRATA_OK && i < c->static_count; i++) {
		const strata_residency_tensor *t = &c->statics[i];
		unsigned char *block = NULL;
		uint64_t aligned = 0;
		s = strata_checked_align(strata__res_tensor_exec(t), &aligned,
					 "static tensor bytes", err);
		bool host = c->sizes.statics_on_host &&
			    c->mode == STRATA_RESIDENCY_PLACEMENT;
		if (s == STRATA_OK)
			s = load_now(e, host ? e->host_arena : e->dev_arenas[0],
				     host ? STRATA_TIER_HOST : STRATA_TIER_DEVICE,
				     host ? STRATA_DIR_DISK_TO_HOST
					  : STRATA_DIR_DISK_TO_DEVICE,
				     0, t, 1, &zero_offset, aligned,
				     t->tensor->bytes, &block, err);
		if (s == STRATA_OK) {
			const void **m = e->main_buf.mapped;
			e->static_data[i] = m && m[0] ? (void *)m[0] : block;
			progress(e, &done, t->tensor->bytes, total);
		} else {
			strata_error_prefix(err, "loading static tensor '%s'", t->tensor->name);
		}
	}
	if (s == STRATA_OK && c->mode != STRATA_RESIDENCY_DISK)
		s = load_units(e, &done, total, err);
	/* later reads on this thread (the window's) map nothing */
	strata_free(e->main_buf.mapped);
	e->main_buf.mapped = NULL;
	return s;
}

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
		return bad(err, "create the engine on the backend of the split's last device",
			   "the window's device is not the engine's backend");
	return STRATA_OK;
}

strata_status strata_residency_create(strata_backend *b,
				      const strata_residency_config *cfg,
				      strata_residency **out,
				      strata_error *err)
{
	if (!b || !cfg || !out)
		return bad(err, "this is a bug in the caller; report it",
			   "NULL backend, config or output");
	strata_status s = check_config(cfg, err);
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
		s = sort_units(cfg, &order, err);
	if (s == STRATA_OK)
		s = build_units(e, order, err);
	strata_free(order);
	if (s == STRATA_OK) {
		e->static_data = strata_calloc_or_error(
			cfg->static_count ? cfg->static_count : 1,
			sizeof *e->static_data, "static tensor pointers", err);
		s = e->static_data ? STRATA_OK : STRATA_E_NOMEM;
	}
	if (s == STRATA_OK)
		s = take_memory(e, err);
	if (s == STRATA_OK && cfg->mode != STRATA_RESIDENCY_PLACEMENT)
		e->dev_arenas[0] = e->dev_arena;
	if (s == STRATA_OK) {
		set_plan_figures(e);
		s = strata__res_buffers_init(e, &e->main_buf, err);
	}
	if (s == STRATA_OK)
		s = take_staging(e, err);
	if (s == STRATA_OK)
		s = load_fixed(e, err);
	drop_staging(e);
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
	drop_staging(e);
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
