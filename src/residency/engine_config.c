/* engine_config.c - the residency engine's config checked before
 * anything is taken (modes, hooks, tensors, a placement's units), and its
 * units laid out in execution order: one slot per unit with its tensors'
 * offsets in an aligned block (layer: residency). Called by the create
 * (engine.c) through engine_create.h. */
#include <inttypes.h>
#include <stdlib.h>

#include "residency/engine_create.h"

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
strata_status strata__res_sort_units(const strata_residency_config *c,
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

strata_status strata__res_check_config(const strata_residency_config *c,
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
strata_status strata__res_build_units(strata_residency *e,
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
