/* engine_window.c - the moving part of the residency engine: the device
 * window that follows execution order within a group, prefetch of the next
 * units while one computes, the host lookahead cache of the disk mode with
 * its eviction, and acquire/release (layer: residency).
 *
 * Invariants (all under e->lock):
 * - device: only units of e->cur_group are placed, and every placed unit's
 *   index lies within `depth` of the window's anchor (its first unit; in a
 *   placement the first streamed unit from there, window_anchor), so the
 *   device holds at most the seed's window bytes beyond the static tensors;
 *   the arena, sized to exactly that (256-aligned), refuses anything more.
 * - host (disk mode): every cached unit sits in one lookahead slot of the
 *   host arena; a slot is reused only by evicting a unit outside the
 *   lookahead range whose copy to the device is finished.
 */
#include <inttypes.h>
#include <string.h>

#include "residency/engine_window.h"

typedef enum placed { PLACED, NOT_NOW } placed;

static uint64_t idx(const strata_residency *e, size_t pos)
{
	return e->units[pos].cfg->unit;
}

static bool has_cache(const strata_residency *e)
{
	return e->cfg.mode == STRATA_RESIDENCY_DISK && e->cfg.sizes.host_bytes;
}

static strata_status reader_failed(strata_residency *e, strata_error *err)
{
	if (err) {
		*err = e->fail_err;
		err->code = STRATA_E_RES_READER;
	}
	return STRATA_E_RES_READER;
}

/* Bytes one host-to-device load of u moves (queue_copy). */
static uint64_t copied(const strata_residency *e, const unit_slot *u)
{
	return e->cfg.mode == STRATA_RESIDENCY_PLACEMENT ? u->block_bytes
							 : u->exec_bytes;
}

/* ------------------------------------------------------------------------ */
/* Device slots                                                             */
/* ------------------------------------------------------------------------ */

/* Frees a unit's device block, first waiting for the load that fills it. */
static strata_status drop_device(strata_residency *e, unit_slot *u,
				 strata_error *err)
{
	if (u->dev == DEV_NONE || u->fixed)
		return STRATA_OK; /* a resident unit of a placement never moves */
	if (u->dev == DEV_LOADING && !u->dev_by_reader) {
		/* the copy happened: count it even though nobody used it */
		double sec = 0;
		strata_event_wait(e->b, u->ev_end, NULL);
		strata_event_elapsed(e->b, u->ev_start, u->ev_end, &sec, NULL);
		strata_telemetry_record_transfer(&e->tel, STRATA_DIR_HOST_TO_DEVICE,
						 copied(e, u), (uint64_t)(sec * 1e9));
		u->copy_pending = false;
	}
	while (u->dev == DEV_LOADING && u->dev_by_reader) {
		if (e->failed)
			return reader_failed(e, err);
		pthread_cond_wait(&e->cond, &e->lock);
	}
	strata_arena_free(e->dev_arena, u->dev_block, NULL);
	strata_telemetry_sub_resident(&e->tel, STRATA_TIER_DEVICE, u->block_bytes);
	u->dev_block = NULL;
	u->dev = DEV_NONE;
	return STRATA_OK;
}

/* Marks finished copies ready and records their time. */
static void poll_copies(strata_residency *e)
{
	if (!e->copy_stream)
		return;
	for (size_t p = 0; p < e->n; p++) {
		unit_slot *u = &e->units[p];
		bool done = false;
		if (u->dev != DEV_LOADING || u->dev_by_reader ||
		    strata_event_query(e->b, u->ev_end, &done, NULL) != STRATA_OK ||
		    !done)
			continue;
		double sec = 0;
		strata_event_elapsed(e->b, u->ev_start, u->ev_end, &sec, NULL);
		strata_telemetry_record_transfer(&e->tel, STRATA_DIR_HOST_TO_DEVICE,
						 copied(e, u), (uint64_t)(sec * 1e9));
		u->dev = DEV_READY;
		u->copy_pending = false;
	}
}

/* Queues the copies of one cached unit to its device block. If queueing
 * fails midway the copies already queued are waited for, so no completion
 * fires into a freed block. */
static strata_status queue_copy(strata_residency *e, unit_slot *u,
				strata_error *err)
{
	strata_status s = strata_event_record(e->b, u->ev_start, e->copy_stream, err);
	/* a placement copies a unit's block in one go: one copy per unit on
	 * the link, and its bytes are the plan's (aligned) unit bytes */
	if (s == STRATA_OK && e->cfg.mode == STRATA_RESIDENCY_PLACEMENT)
		s = strata_backend_copy_h2d_async(e->b, e->copy_stream,
						  u->dev_block, u->host_block,
						  u->block_bytes, err);
	for (size_t t = 0; s == STRATA_OK && e->cfg.mode != STRATA_RESIDENCY_PLACEMENT &&
			   t < u->cfg->tensor_count; t++)
		s = strata_backend_copy_h2d_async(
			e->b, e->copy_stream, u->dev_block + u->offsets[t],
			u->host_block + u->offsets[t],
			strata__res_tensor_exec(&u->cfg->tensors[t]), err);
	if (s == STRATA_OK)
		s = strata_event_record(e->b, u->ev_end, e->copy_stream, err);
	if (s != STRATA_OK)
		strata_backend_synchronize(e->b, e->copy_stream, NULL);
	return s;
}

/* Starts loading unit `pos` into a new device block, from its host copy or
 * (host 0) straight from disk. NOT_NOW when its source or a slot is not
 * available yet; that is not an error. */
static strata_status place(strata_residency *e, size_t pos, size_t want,
			   placed *out, strata_error *err)
{
	unit_slot *u = &e->units[pos];
	bool direct = !has_cache(e) && e->cfg.mode == STRATA_RESIDENCY_DISK;
	*out = NOT_NOW;
	if (direct ? e->in_flight >= e->q_cap : u->host != HOST_CACHED)
		return STRATA_OK;
	void *block = NULL;
	strata_error aerr;
	strata_status s = strata_arena_alloc(e->dev_arena, u->block_bytes, &block, &aerr);
	if (s == STRATA_E_RES_BUDGET)
		return STRATA_OK; /* the window is full until a release */
	if (s != STRATA_OK) {
		if (err)
			*err = aerr;
		return s;
	}
	u->dev_block = block;
	for (size_t t = 0; t < u->cfg->tensor_count; t++)
		u->data[t] = u->dev_block + u->offsets[t];
	if (direct) {
		strata__res_enqueue(e, pos, u->dev_block, STRATA_DIR_DISK_TO_DEVICE);
		u->dev_by_reader = true;
	} else {
		s = queue_copy(e, u, err);
		if (s != STRATA_OK) {
			strata_arena_free(e->dev_arena, block, NULL);
			u->dev_block = NULL;
			return s;
		}
		u->dev_by_reader = false;
		u->copy_pending = true;
		u->last_use = ++e->tick;
		u->uses++;
	}
	u->dev = DEV_LOADING;
	strata_telemetry_add_resident(&e->tel, STRATA_TIER_DEVICE, u->block_bytes);
	if (pos != want)
		strata_telemetry_record_prefetch(&e->tel);
	*out = PLACED;
	return STRATA_OK;
}

/* Where the window starts: the lowest held position of the current group,
 * else the cursor while its acquire is still waiting, else the one after
 * it. */
static size_t window_first(const strata_residency *e)
{
	size_t gb = e->group_begin[e->cur_group], ge = e->group_begin[e->cur_group + 1];
	for (size_t p = gb; p < ge; p++)
		if (e->units[p].dev == DEV_HELD)
			return p;
	return e->cursor_done ? e->cursor + 1 : e->cursor;
}

/* Where the window's depth counts from, for a window starting at `first`
 * of group g: `first` itself, except in a placement, where units that do
 * not stream (resident, cpu) hold no window bytes: there it is the first
 * streamed unit at or after `first` (ge: none is left in the group). So
 * the first streamed unit of a pass starts copying as the pass starts,
 * while the resident and cpu units before it compute, as the plan prices
 * a pass's window fill (cost.c); depth alone would start it only once
 * the pass reached the unit `depth` before it. */
static size_t window_anchor(const strata_residency *e, size_t first,
			    size_t ge)
{
	if (e->cfg.mode != STRATA_RESIDENCY_PLACEMENT)
		return first;
	while (first < ge && !strata__res_streams(e, &e->units[first]))
		first++;
	return first;
}

/* Fills the window in execution order: units from the window's anchor
 * whose index is within `depth` of it, stopping at the first that cannot
 * start. */
static strata_status place_window(strata_residency *e, size_t want,
				  strata_error *err)
{
	if (e->cfg.mode == STRATA_RESIDENCY_RESIDENT || !e->cursor_valid)
		return STRATA_OK;
	size_t ge = e->group_begin[e->cur_group + 1];
	size_t first = window_first(e);
	if (want < first)
		first = want; /* the unit being acquired opens the window */
	first = window_anchor(e, first, ge);
	if (first >= ge)
		return STRATA_OK;
	uint64_t anchor = idx(e, first);
	uint64_t depth = strata__res_depth(e);
	for (size_t p = first; p < ge && idx(e, p) - anchor < depth; p++) {
		/* units the split does not stream weigh nothing: skipped */
		if (e->units[p].dev != DEV_NONE ||
		    !strata__res_streams(e, &e->units[p]))
			continue;
		placed r;
		strata_status s = place(e, p, want, &r, err);
		if (s != STRATA_OK)
			return s;
		if (r == NOT_NOW)
			break;
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Host lookahead cache (disk mode)                                         */
/* ------------------------------------------------------------------------ */

/* First position the lookahead counts from: the cursor until its unit has
 * been handed out, then the one after it (cyclic: the next token starts
 * again at the first unit). */
static size_t lookahead_base(const strata_residency *e)
{
	if (!e->cursor_valid)
		return 0;
	return e->cursor_done ? (e->cursor + 1) % e->n : e->cursor;
}

static bool in_lookahead(const strata_residency *e, size_t pos)
{
	size_t base = lookahead_base(e);
	return (pos + e->n - base) % e->n < e->cfg.lookahead_units;
}

/* True when a beats b as the unit to evict. */
static bool worse(const strata_residency *e, const unit_slot *a,
		  const unit_slot *b)
{
	if (e->cfg.eviction == STRATA_EVICT_LFU && a->uses != b->uses)
		return a->uses < b->uses;
	if (a->last_use != b->last_use)
		return a->last_use < b->last_use;
	return a < b; /* the lower position, i.e. (group, unit) order */
}

size_t strata__res_victim(const strata_residency *e, bool urgent)
{
	const unit_slot *victim = NULL;
	for (size_t p = 0; p < e->n; p++) {
		const unit_slot *u = &e->units[p];
		if (u->host != HOST_CACHED || u->copy_pending || in_lookahead(e, p))
			continue;
		if (!victim || worse(e, u, victim))
			victim = u;
	}
	if (!victim && urgent) {
		size_t base = lookahead_base(e), far = 0;
		for (size_t p = 0; p < e->n; p++) {
			const unit_slot *u = &e->units[p];
			size_t d = (p + e->n - base) % e->n;
			if (u->host == HOST_CACHED && !u->copy_pending && d > far) {
				far = d;
				victim = u;
			}
		}
	}
	return victim ? (size_t)(victim - e->units) : SIZE_MAX;
}

/* Evicts one cached unit (strata__res_victim); false when nothing can go. */
static bool evict_one(strata_residency *e, bool urgent)
{
	size_t p = strata__res_victim(e, urgent);
	if (p == SIZE_MAX)
		return false;
	unit_slot *victim = &e->units[p];
	strata_arena_free(e->host_arena, victim->host_block, NULL);
	victim->host_block = NULL;
	victim->host = HOST_NONE;
	strata_telemetry_sub_resident(&e->tel, STRATA_TIER_HOST, e->host_slot_bytes);
	strata_telemetry_record_eviction(&e->tel, e->host_slot_bytes);
	return true;
}

/* Starts background reads for the lookahead range, in order, while the
 * queue and the slots allow. */
static strata_status schedule_reads(strata_residency *e, size_t want,
				    strata_error *err)
{
	if (!has_cache(e) || !e->n)
		return STRATA_OK;
	size_t base = lookahead_base(e);
	uint64_t la = e->cfg.lookahead_units < e->n ? e->cfg.lookahead_units : e->n;
	for (uint64_t k = 0; k < la && e->in_flight < e->q_cap; k++) {
		size_t pos = (base + k) % e->n;
		unit_slot *u = &e->units[pos];
		if (u->host != HOST_NONE || u->dev != DEV_NONE)
			continue;
		void *block = NULL;
		strata_error aerr;
		strata_status s;
		while ((s = strata_arena_alloc(e->host_arena, e->host_slot_bytes,
					       &block, &aerr)) == STRATA_E_RES_BUDGET &&
		       evict_one(e, k == 0))
			;
		if (s == STRATA_E_RES_BUDGET)
			break; /* every slot is busy; a later pump retries */
		if (s != STRATA_OK) {
			if (err)
				*err = aerr;
			return s;
		}
		u->host_block = block;
		u->host = HOST_READING;
		strata_telemetry_add_resident(&e->tel, STRATA_TIER_HOST, e->host_slot_bytes);
		if (pos != want)
			strata_telemetry_record_prefetch(&e->tel);
		strata__res_enqueue(e, pos, u->host_block, STRATA_DIR_DISK_TO_HOST);
	}
	return STRATA_OK;
}

/* A failure is kept for the next acquire and the engine stays failed: the
 * forward pass cannot continue without the unit, and a clear error beats
 * a retry that hides a bad disk. A unit that reached the host cache is
 * promoted to the device window now, rather than at the next acquire or
 * release, so its copy runs while the current unit computes; host 0 needs
 * nothing: its reads are the placement. */
void strata__res_read_done(strata_residency *e, const read_job *j,
			   strata_status s, const strata_error *jerr, uint64_t ns)
{
	unit_slot *u = &e->units[j->pos];
	if (s != STRATA_OK) {
		if (!e->failed) {
			e->failed = true;
			e->fail_err = *jerr;
			strata_error_prefix(&e->fail_err,
					    "background read of unit %" PRIu64
					    " of group '%s'",
					    u->cfg->unit,
					    e->cfg.groups[u->cfg->group]);
		}
		return;
	}
	strata_telemetry_record_transfer(&e->tel, j->dir, u->file_bytes, ns);
	if (j->dir == STRATA_DIR_DISK_TO_HOST) {
		u->host = HOST_CACHED;
		u->last_use = ++e->tick;
	} else {
		u->dev = DEV_READY;
	}
	if (e->failed || !has_cache(e) || e->stop)
		return;
	strata_error err;
	strata_error_clear(&err);
	if (place_window(e, SIZE_MAX, &err) != STRATA_OK && !e->failed) {
		e->failed = true;
		e->fail_err = err;
		strata_error_prefix(&e->fail_err, "promoting a unit to the device");
	}
}

static strata_status pump(strata_residency *e, size_t want, strata_error *err)
{
	poll_copies(e);
	strata_status s = schedule_reads(e, want, err);
	if (s == STRATA_OK)
		s = place_window(e, want, err);
	return s;
}

/* ------------------------------------------------------------------------ */
/* Acquire and release                                                      */
/* ------------------------------------------------------------------------ */

static strata_status find_unit(strata_residency *e, uint32_t group,
			       uint64_t unit, size_t *pos, strata_error *err)
{
	if (group < e->cfg.group_count) {
		size_t lo = e->group_begin[group], hi = e->group_begin[group + 1];
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (idx(e, mid) < unit)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < e->group_begin[group + 1] && idx(e, lo) == unit) {
			*pos = lo;
			return STRATA_OK;
		}
	}
	return strata_fail(err, STRATA_E_NOT_FOUND,
			   "ask only for units the model has",
			   "no execution unit %" PRIu64 " in group %" PRIu32 " (%s)",
			   unit, group,
			   group < e->cfg.group_count ? e->cfg.groups[group] : "out of range");
}

static strata_status held_error(strata_residency *e, size_t held, size_t pos,
				strata_error *err)
{
	const strata_residency_unit *h = e->units[held].cfg, *w = e->units[pos].cfg;
	return strata_fail(err, STRATA_E_RES_STATE,
			   "release each unit before acquiring one outside its window",
			   "unit %" PRIu64 " of group '%s' is still held while acquiring unit %"
			   PRIu64 " of group '%s' (window depth %" PRIu64 ")",
			   h->unit, e->cfg.groups[h->group], w->unit,
			   e->cfg.groups[w->group], strata__res_depth(e));
}

/* Moves the window to the group and position of `pos`: drains the old
 * group (the seed sizes windows per group) and drops units that were
 * skipped or fall outside the window that starts here. */
static strata_status move_window(strata_residency *e, size_t pos,
				 strata_error *err)
{
	uint32_t g = e->units[pos].cfg->group;
	if (e->cursor_valid && g != e->cur_group) {
		size_t ob = e->group_begin[e->cur_group], oe = e->group_begin[e->cur_group + 1];
		for (size_t p = ob; p < oe; p++)
			if (e->units[p].dev == DEV_HELD)
				return held_error(e, p, pos, err);
		for (size_t p = ob; p < oe; p++) {
			strata_status s = drop_device(e, &e->units[p], err);
			if (s != STRATA_OK)
				return s;
		}
	}
	size_t gb = e->group_begin[g], ge = e->group_begin[g + 1];
	/* units the window starting here holds are kept (window_anchor) */
	size_t at = window_anchor(e, pos, ge);
	uint64_t from = idx(e, at < ge ? at : pos);
	for (size_t p = gb; p < ge; p++) {
		unit_slot *u = &e->units[p];
		uint64_t a = idx(e, p), b = idx(e, pos);
		bool far = (a > b ? a - b : b - a) >= strata__res_depth(e);
		if (u->dev == DEV_HELD && far)
			return held_error(e, p, pos, err);
		bool outside = a < from || a - from >= strata__res_depth(e);
		if (p != pos && u->dev != DEV_HELD && u->dev != DEV_NONE &&
		    (p < pos || (far && outside))) {
			strata_status s = drop_device(e, u, err);
			if (s != STRATA_OK)
				return s;
		}
	}
	e->cur_group = g;
	e->cursor = pos;
	e->cursor_valid = true;
	e->cursor_done = false;
	return STRATA_OK;
}

/* Waits until unit `pos` is on the device; lock held, released while
 * blocked. Every wait ends: a copy completes, a reader finishes or fails,
 * and a unit that can never start is an error. */
static strata_status wait_ready(strata_residency *e, size_t pos, strata_error *err)
{
	unit_slot *u = &e->units[pos];
	for (;;) {
		if (e->failed)
			return reader_failed(e, err);
		strata_status s = pump(e, pos, err);
		if (s != STRATA_OK)
			return s;
		if (u->dev == DEV_READY)
			return STRATA_OK;
		if (u->dev == DEV_LOADING && !u->dev_by_reader) {
			strata_event *ev = u->ev_end;
			pthread_mutex_unlock(&e->lock);
			strata_event_wait(e->b, ev, NULL);
			pthread_mutex_lock(&e->lock);
			continue;
		}
		if (u->dev == DEV_LOADING || u->host == HOST_READING || e->in_flight) {
			pthread_cond_wait(&e->cond, &e->lock);
			continue;
		}
		bool copying = false;
		for (size_t p = 0; p < e->n; p++)
			copying |= e->units[p].copy_pending;
		if (copying) {
			pthread_mutex_unlock(&e->lock);
			strata_backend_synchronize(e->b, e->copy_stream, NULL);
			pthread_mutex_lock(&e->lock);
			continue;
		}
		return strata_fail(err, STRATA_E_RES_BUDGET,
				   "release held units before acquiring the next, or raise the budgets",
				   "unit %" PRIu64 " of group '%s' (%" PRIu64
				   " bytes) cannot be placed: the window is full of held units",
				   u->cfg->unit, e->cfg.groups[u->cfg->group], u->block_bytes);
	}
}

strata_status strata_residency_acquire(strata_residency *e, uint32_t group,
				       uint64_t unit,
				       strata_residency_view *view,
				       strata_error *err)
{
	if (!e || !view)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "acquire with a NULL engine or view");
	pthread_mutex_lock(&e->lock);
	size_t pos = 0;
	strata_status s = e->failed ? reader_failed(e, err)
				    : find_unit(e, group, unit, &pos, err);
	unit_slot *u = s == STRATA_OK ? &e->units[pos] : NULL;
	if (u && u->dev == DEV_HELD)
		s = strata_fail(err, STRATA_E_RES_STATE,
				"release a unit before acquiring it again",
				"unit %" PRIu64 " of group '%s' is already held",
				unit, e->cfg.groups[group]);
	if (s == STRATA_OK && e->cfg.mode != STRATA_RESIDENCY_RESIDENT)
		s = move_window(e, pos, err);
	if (s == STRATA_OK && e->cfg.mode == STRATA_RESIDENCY_PLACEMENT &&
	    !strata__res_streams(e, u)) {
		/* resident: on its device since create; cpu: its host copy */
		if (!u->fixed)
			for (size_t t = 0; t < u->cfg->tensor_count; t++)
				u->data[t] = u->host_block + u->offsets[t];
	} else if (s == STRATA_OK) {
		poll_copies(e);
		if (u->dev == DEV_READY) {
			strata_telemetry_record_hit(&e->tel);
		} else {
			bool started = u->dev == DEV_LOADING || u->host == HOST_READING;
			if (!started)
				strata_telemetry_record_miss(&e->tel);
			uint64_t t0 = strata_now_ns();
			s = wait_ready(e, pos, err);
			strata_telemetry_record_stall(&e->tel, strata_now_ns() - t0);
		}
	}
	if (s == STRATA_OK) {
		u->dev = DEV_HELD;
		u->held_at = strata_now_ns();
		e->cursor = pos;
		e->cursor_valid = true;
		e->cursor_done = true;
		view->count = u->cfg->tensor_count;
		view->tensors = u->cfg->tensors;
		view->data = u->data;
		s = pump(e, SIZE_MAX, err); /* the next units start now */
		if (s != STRATA_OK)
			u->dev = u->fixed || strata__res_streams(e, u) ? DEV_READY
								      : DEV_NONE;
	}
	pthread_mutex_unlock(&e->lock);
	return s;
}

strata_status strata_residency_release(strata_residency *e, uint32_t group,
				       uint64_t unit, strata_error *err)
{
	if (!e)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "release with a NULL engine");
	pthread_mutex_lock(&e->lock);
	size_t pos = 0;
	strata_status s = find_unit(e, group, unit, &pos, err);
	unit_slot *u = s == STRATA_OK ? &e->units[pos] : NULL;
	if (u && u->dev != DEV_HELD)
		s = strata_fail(err, STRATA_E_RES_STATE,
				"release only units acquired and not yet released",
				"unit %" PRIu64 " of group '%s' is not held",
				unit, e->cfg.groups[group]);
	if (s == STRATA_OK)
		strata_telemetry_record_unit(&e->tel, u->place[e->prefill],
					     u->block_bytes,
					     strata_now_ns() - u->held_at);
	if (s == STRATA_OK && (e->cfg.mode == STRATA_RESIDENCY_RESIDENT || u->fixed)) {
		u->dev = DEV_READY; /* resident: loaded once, kept */
	} else if (s == STRATA_OK && !strata__res_streams(e, u)) {
		u->dev = DEV_NONE; /* a cpu unit: its host copy stays */
		if (!e->failed)
			s = pump(e, SIZE_MAX, err);
	} else if (s == STRATA_OK) {
		u->dev = DEV_READY;
		s = drop_device(e, u, err);
		if (s == STRATA_OK && !e->failed)
			s = pump(e, SIZE_MAX, err);
	}
	pthread_mutex_unlock(&e->lock);
	return s;
}

strata_status strata_residency_quiesce(strata_residency *e, strata_error *err)
{
	if (!e)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "quiesce with a NULL engine");
	pthread_mutex_lock(&e->lock);
	while (e->in_flight && !e->failed)
		pthread_cond_wait(&e->cond, &e->lock);
	strata_status s = e->failed ? reader_failed(e, err) : STRATA_OK;
	pthread_mutex_unlock(&e->lock);
	if (e->copy_stream)
		strata_backend_synchronize(e->b, e->copy_stream, NULL);
	pthread_mutex_lock(&e->lock);
	poll_copies(e);
	pthread_mutex_unlock(&e->lock);
	return s;
}

strata_status strata_residency_set_pass(strata_residency *e, bool prefill,
					strata_error *err)
{
	if (!e)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "set_pass with a NULL engine");
	if (e->cfg.mode != STRATA_RESIDENCY_PLACEMENT || e->prefill == prefill)
		return STRATA_OK;
	pthread_mutex_lock(&e->lock);
	strata_status s = STRATA_OK;
	for (size_t p = 0; p < e->n; p++)
		if (e->units[p].dev == DEV_HELD)
			s = strata_fail(err, STRATA_E_RES_STATE,
					"release every unit before switching passes",
					"unit %" PRIu64 " is held while switching to the %s split",
					e->units[p].cfg->unit,
					prefill ? "prefill" : "decode");
	/* the other split's window goes: its units may be cpu units here */
	for (size_t p = 0; s == STRATA_OK && p < e->n; p++)
		s = drop_device(e, &e->units[p], err);
	if (s == STRATA_OK) {
		e->prefill = prefill;
		e->cursor_valid = false;
	}
	pthread_mutex_unlock(&e->lock);
	return s;
}
