/* placement.c - the placement planner: each execution unit resident on a
 * device, streamed through a device window from host memory, or computed
 * on the CPU from host memory; the sizing of a placement on every device
 * and the host, its predicted decode and prefill times, and the search for
 * the fastest placement that fits (layer: plan).
 *
 * docs/plan.md "Placement" states the cost model and why the search finds
 * its minimum. In short: units in layout order; the first r are resident
 * (device 0 holds the first run of them, device 1 the next ...), the other
 * n - r live in host memory and are split into c computed on the CPU and
 * w = n - r - c streamed, spread evenly so that the link copies the next
 * streamed unit in while the CPU computes. A pass of T tokens costs
 *   max(link time, device time + CPU time + fixed costs)
 * (the layers run in order, so the device and the CPU take turns while
 * the link copies; cost.c). The search is exhaustive over (statics on the device or
 * the CPU, r, c), each time O(n), each fit O(n). */
#include <stdio.h>
#include <string.h>

#include "plan/internal.h"

/* Units above which r and c are searched on a grid (cost O(n^3) else). */
#define EXHAUSTIVE_UNITS 512u

/* ------------------------------------------------------------------------ */
/* Names                                                                    */
/* ------------------------------------------------------------------------ */

const char *strata_place_name(strata_place w)
{
	switch (w) {
#define STRATA_PLACE_CASE(name, text)                                          \
	case STRATA_PLACE_##name:                                              \
		return text;
		STRATA_PLACE_MAP(STRATA_PLACE_CASE)
#undef STRATA_PLACE_CASE
	case STRATA_PLACE_COUNT:
		break;
	}
	return "unknown";
}

const char *strata_plan_rate_name(strata_plan_rate r)
{
	switch (r) {
#define STRATA_PLAN_RATE_CASE(name, field, json)                               \
	case STRATA_PLAN_RATE_##name:                                          \
		return json;
		STRATA_PLAN_RATE_MAP(STRATA_PLAN_RATE_CASE)
#undef STRATA_PLAN_RATE_CASE
	case STRATA_PLAN_RATE_COUNT:
		break;
	}
	return "unknown";
}

/* ------------------------------------------------------------------------ */
/* Where each unit runs                                                     */
/* ------------------------------------------------------------------------ */

/* Of `rest` host units, is the k-th streamed when w of them are? Evenly
 * spread (Bresenham): between two streamed units the CPU computes, so the
 * link is never idle while the CPU works. */
static bool streamed_at(uint64_t k, uint64_t rest, uint64_t w)
{
	if (w == 0)
		return false;
	if (w >= rest)
		return true;
	return (k + 1) * w / rest > k * w / rest;
}

void strata_plan_unit_place(const strata_plan_candidate *c, uint64_t units,
			    uint64_t i, bool prefill, strata_place *where,
			    uint32_t *device)
{
	*device = 0;
	switch (c->mode) {
	case STRATA_RESIDENCY_RESIDENT:
		*where = STRATA_PLACE_RESIDENT;
		return;
	case STRATA_RESIDENCY_HOST:
		*where = STRATA_PLACE_WINDOW;
		return;
	case STRATA_RESIDENCY_DISK:
		*where = STRATA_PLACE_DISK;
		return;
	default:
		break;
	}
	if (i < c->resident_units) {
		*where = STRATA_PLACE_RESIDENT;
		uint64_t end = 0;
		for (uint32_t d = 0; d < c->devices; d++) {
			end += c->device_resident_units[d];
			if (i < end) {
				*device = d;
				return;
			}
		}
		return;
	}
	uint64_t rest = units - c->resident_units;
	uint64_t w = prefill ? c->prefill_window_units : c->window_units;
	bool s = streamed_at(i - c->resident_units, rest, w);
	*where = s ? STRATA_PLACE_WINDOW : STRATA_PLACE_CPU;
	*device = s && c->devices ? c->devices - 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* The cost model                                                           */
/* ------------------------------------------------------------------------ */

/* Predicted seconds of one pass of T tokens (cost.c), its terms in
 * *cost when not NULL. */
static double pass_seconds(const strata_plan *p, const strata_plan_candidate *c,
			   const strata__plan_split *b, double T,
			   strata_plan_cost *cost)
{
	strata_plan_cost k;
	strata__plan_cost(p, c, b, T, &k);
	if (cost)
		*cost = k;
	return k.total_ms / 1e3;
}

/* ------------------------------------------------------------------------ */
/* Sizing a placement                                                       */
/* ------------------------------------------------------------------------ */

/* KV bytes of `units` units computed on one tier: each unit's own layers'
 * cache where units are the layers, else (units and layers differ) the
 * whole cache on each tier that computes any unit. */
static uint64_t kv_of(const strata_plan *p, uint64_t units)
{
	if (!units || !p->memory.arch_known)
		return 0;
	if (p->arch.layers == p->info.occupied_units)
		return units * 2 * p->memory.kv_buffer_bytes;
	return p->memory.kv_cache_bytes;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return strata_sat_add_u64(a, b);
}

static uint64_t align_sat(uint64_t v)
{
	uint64_t r;
	strata_error ignored;
	return strata_checked_align(v, &r, "placement bytes", &ignored) ==
			       STRATA_OK ? r : UINT64_MAX;
}

/* The forward pass's arena on a site computing `units` units (their KV
 * cache there: each unit's own layers' where units are the layers, else
 * the whole cache), staging a layer's KV when `stages`, the logits rows
 * when it holds the head and host code cannot address it. */
static uint64_t site_of(const strata_plan *p, uint64_t units, bool stages,
			bool head_unaddressable)
{
	uint64_t kv = !units || p->arch.layers == p->info.occupied_units
			      ? units
			      : UINT64_MAX;
	return strata_plan_site_bytes(&p->memory, kv, stages,
				      head_unaddressable);
}

/* Device bytes of device d holding `resident` bytes (`units` units
 * computed there in decode; `used`: it computes something in either
 * split), the statics when `statics`, a window of `window` bytes, a
 * staged layer's KV when `stages`; pinned: host bytes the run pins. */
static uint64_t device_total(const strata_plan *p, uint64_t resident,
			     uint64_t units, bool used, bool statics,
			     bool stages, uint64_t window, uint64_t pinned)
{
	const strata_plan_memory *m = &p->memory;
	bool cuda = p->options.device == STRATA_PLAN_DEVICE_CUDA;
	uint64_t t = statics ? align_sat(p->info.static_bytes) : 0;
	t = sat_add(t, resident ? align_sat(resident) : 0);
	t = sat_add(t, window ? align_sat(window) : 0);
	if (used || statics)
		t = sat_add(t, sat_add(site_of(p, units, stages, statics && cuda),
				       m->product_workspace_bytes));
	t = sat_add(t, p->options.backend_reserved_bytes);
	if (cuda)
		t = sat_add(t, strata_plan_cuda_driver_bytes(pinned));
	return t;
}

uint64_t strata__plan_load_staging(const strata_plan *p, bool units_resident)
{
	if (p->options.device != STRATA_PLAN_DEVICE_CUDA)
		return 0;
	uint64_t s = units_resident ? p->info.largest_unit_bytes : 0;
	return p->info.largest_static_bytes > s ? p->info.largest_static_bytes
						: s;
}

/* Fills the streamed mask of one split (r resident, w of the rest
 * streamed) and the depth the window needs: the widest index distance
 * between two streamed units of a group, plus one, so a window of that
 * depth holds a streamed unit and the next one copying in. */
static uint64_t stream_mask(const strata_plan *p, uint64_t r, uint64_t w,
			    bool *mask)
{
	uint64_t n = p->info.occupied_units, rest = n - r, depth = 0;
	strata_plan_unit prev = {0}, u;
	bool have = false;
	for (uint64_t i = 0; i < n; i++) {
		mask[i] = i >= r && streamed_at(i - r, rest, w);
		if (!mask[i])
			continue;
		strata_plan_layout_unit_at(p->layout, (size_t)i, &u);
		uint64_t d = 1;
		if (have && prev.group_len == u.group_len &&
		    !memcmp(prev.group, u.group, u.group_len))
			d = u.unit - prev.unit + 1;
		depth = d > depth ? d : depth;
		prev = u;
		have = true;
	}
	return depth;
}

/* Resident units per device: greedily, each device before the last
 * takes the next units while its total stays within its budget; the last
 * takes what remains. Returns false when the split cannot hold r. */
static bool split_resident(const strata_plan *p, strata_plan_candidate *c)
{
	uint32_t D = c->devices;
	uint64_t left = c->resident_units, next = 0;
	memset(c->device_resident_units, 0, sizeof c->device_resident_units);
	for (uint32_t d = 0; d + 1 < D && left; d++) {
		uint64_t bytes = 0, k = 0;
		bool statics = d == 0 && !c->statics_on_cpu;
		while (k < left) {
			uint64_t b = sat_add(bytes, p->unit_bytes[next + k]);
			if (device_total(p, b, k + 1, true, statics, false, 0,
					 0) >
			    p->budgets.split_device_bytes[d])
				break;
			bytes = b;
			k++;
		}
		c->device_resident_units[d] = k;
		left -= k;
		next += k;
	}
	c->device_resident_units[D - 1] += left;
	return true;
}

/* Sizes candidate c (a PLACEMENT with statics, resident_units, and both
 * splits set): every device's total, the host's, the window's seed
 * figures, fit, and both predictions. mask: scratch of n bools. */
static strata_status size_placement(strata_plan *p, strata_plan_candidate *c,
				    bool *mask, strata_error *err)
{
	uint64_t n = p->info.occupied_units, r = c->resident_units;
	uint64_t win[2] = {0, 0}, exact[2] = {0, 0}, depth[2];
	uint64_t ws[2] = {c->window_units, c->prefill_window_units};
	strata_status s = STRATA_OK;
	for (int k = 0; k < 2 && s == STRATA_OK; k++) {
		depth[k] = stream_mask(p, r, ws[k], mask);
		s = strata_plan_layout_window_of(p->layout, depth[k], mask,
						 &win[k], err);
		if (s == STRATA_OK)
			s = strata_plan_layout_exact_window_of(
				p->layout, depth[k], mask, &exact[k], err);
	}
	if (s != STRATA_OK)
		return s;
	/* the larger of the two windows; its seed figures are the exact
	 * bytes of the same units, its region their aligned slots */
	int big = win[1] > win[0];
	c->decode_depth = depth[0];
	c->prefill_depth = depth[1];
	c->weights = (strata_plan_weights){
		.static_bytes =
			c->statics_on_cpu ? 0 : p->info.exact_static_bytes,
		.window_bytes = exact[big], .depth = depth[big]};
	s = strata_checked_add(c->weights.static_bytes, c->weights.window_bytes,
			       &c->weights.required_bytes, "total bytes", err);
	if (s != STRATA_OK)
		return s;
	/* each unit's KV cache stays where the decode split computes it;
	 * a unit the prefill split streams but decode computes on the CPU
	 * brings its KV through the window with its weights (moved_kv) */
	uint64_t on_dev = 0, on_cpu = 0, moved = 0, rest = n - r, host_units = 0;
	uint64_t to_cpu = 0; /* streamed in decode, computed on the CPU in
				prefill: staged through one pair on the host */
	for (uint64_t i = r; i < n; i++) {
		bool a = streamed_at(i - r, rest, ws[0]);
		bool b = streamed_at(i - r, rest, ws[1]);
		on_dev += a;
		on_cpu += !a;
		moved += b && !a;
		to_cpu += a && !b;
		host_units = sat_add(host_units, p->unit_bytes[i]);
	}
	/* The one staging buffer a placement's run has: CUDA loads what the
	 * device holds through it (the residency engine's load staging,
	 * pinned, freed once loaded, while the host tier already holds its
	 * units and statics): the largest unit when any unit is resident,
	 * at least the largest static tensor. Streamed units copy from the
	 * host tier itself, and on cpu the device is host memory: none. */
	uint64_t staging = strata__plan_load_staging(p, r > 0);
	uint64_t pinned = ws[0] || ws[1] ? sat_add(host_units, staging) : 0;
	split_resident(p, c);
	uint64_t next = 0, stream_dev = c->devices - 1;
	c->fits_device = true;
	for (uint32_t d = 0; d < c->devices; d++) {
		uint64_t k = c->device_resident_units[d], bytes = 0;
		for (uint64_t i = 0; i < k; i++)
			bytes = sat_add(bytes, p->unit_bytes[next + i]);
		next += k;
		c->device_weight_bytes[d] = bytes ? align_sat(bytes) : 0;
		bool sd = d == stream_dev;
		uint64_t units = k + (sd ? on_dev : 0);
		uint64_t t = device_total(p, bytes, units,
					  units || (sd && moved),
					  d == 0 && !c->statics_on_cpu,
					  sd && moved, sd ? win[big] : 0,
					  pinned);
		c->split_device_bytes[d] = t;
		c->fits_device &= t <= p->budgets.split_device_bytes[d];
	}
	c->device_bytes = c->split_device_bytes[0];
	c->static_device_bytes =
		c->statics_on_cpu ? 0 : align_sat(p->info.static_bytes);
	c->window_device_bytes = win[big] ? align_sat(win[big]) : 0;
	c->staging_bytes = c->load_staging_bytes = staging;
	c->host_weight_bytes =
		sat_add(host_units, c->statics_on_cpu ? p->info.static_bytes : 0);
	uint64_t h = sat_add(c->host_weight_bytes, staging);
	/* the CPU site: host code addresses it, so no logits rows */
	if (on_cpu || to_cpu || c->statics_on_cpu)
		h = sat_add(h, site_of(p, on_cpu, to_cpu > 0, false));
	c->host_bytes = h;
	c->driver_bytes = p->options.device == STRATA_PLAN_DEVICE_CUDA
				  ? strata_plan_cuda_driver_bytes(pinned)
				  : 0;
	return STRATA_OK;
}

/* The priced bytes of candidate c's decode (prefill false) or prefill
 * split, for any mode: each unit where it computes, in layer order. */
static void candidate_split(const strata_plan *p, const strata_plan_candidate *c,
			    bool prefill, strata__plan_split *b)
{
	uint64_t n = p->info.occupied_units;
	uint64_t kv = p->memory.arch_known ? p->memory.kv_cache_bytes : 0;
	memset(b, 0, sizeof *b);
	if (c->mode != STRATA_RESIDENCY_PLACEMENT) {
		/* one group wholly in a host window moves nothing after the
		 * first pass: priced as resident */
		bool whole = c->mode == STRATA_RESIDENCY_HOST &&
			     p->info.groups <= 1 &&
			     c->weights.depth >= p->info.span;
		strata_place w = c->mode == STRATA_RESIDENCY_RESIDENT || whole
					 ? STRATA_PLACE_RESIDENT
					 : STRATA_PLACE_WINDOW;
		for (uint64_t i = 0; i < n; i++)
			strata__plan_split_add(p, b, (size_t)i, w);
		strata__plan_split_end(b);
		if (w == STRATA_PLACE_RESIDENT)
			b->kv_res = kv;
		else
			b->kv_str = kv;
		return;
	}
	uint64_t r = c->resident_units, rest = n - r;
	uint64_t w = prefill ? c->prefill_window_units : c->window_units;
	b->statics_cpu = c->statics_on_cpu;
	/* a prompt after decode steps finds the window empty: switching
	 * splits drops it (strata_residency_set_pass), and it does not fill
	 * across the end of a pass */
	b->cold_window = prefill;
	/* KV stays where decode computes; prefill streams the KV of the
	 * units it moves from the CPU to the device */
	uint64_t moved = 0;
	for (uint64_t i = 0; i < n; i++) {
		strata_place where = STRATA_PLACE_RESIDENT;
		if (i >= r) {
			bool dec = streamed_at(i - r, rest, c->window_units);
			bool now = streamed_at(i - r, rest, w);
			where = now ? STRATA_PLACE_WINDOW : STRATA_PLACE_CPU;
			moved += now && !dec;
		}
		strata__plan_split_add(p, b, (size_t)i, where);
	}
	strata__plan_split_end(b);
	b->kv_res = kv_of(p, r);
	b->kv_cpu = kv_of(p, b->cpu_units);
	uint64_t dev = kv_of(p, n - b->cpu_units);
	b->kv_str = dev > b->kv_res ? dev - b->kv_res : 0;
	b->streamed = sat_add(b->streamed, kv_of(p, moved));
}

/* Tokens in flight of a decode pass (one per sequence) and a prefill
 * chunk. */
static double decode_tokens(const strata_plan *p)
{
	return (double)p->options.shape.batch;
}

static double prefill_tokens(const strata_plan *p)
{
	return (double)p->options.shape.batch *
	       (double)p->options.shape.prefill_chunk;
}

/* The smallest chunk from which the prefill split beats the decode split
 * (0: never within the context, or the splits are the same). */
static uint64_t crossing(const strata_plan *p, const strata_plan_candidate *c)
{
	if (c->mode != STRATA_RESIDENCY_PLACEMENT ||
	    c->window_units == c->prefill_window_units)
		return 0;
	strata__plan_split d, f;
	candidate_split(p, c, false, &d);
	candidate_split(p, c, true, &f);
	uint64_t top = p->options.shape.context;
	for (uint64_t t = 1; t <= top && t <= 65536; t++) {
		double T = (double)t * (double)p->options.shape.batch;
		if (pass_seconds(p, c, &f, T, NULL) <
		    pass_seconds(p, c, &d, T, NULL))
			return t;
	}
	return 0;
}

void strata__plan_predict_passes(const strata_plan *p,
				 strata_plan_candidate *c)
{
	strata__plan_split d, f;
	candidate_split(p, c, false, &d);
	candidate_split(p, c, true, &f);
	c->cpu_bytes = d.statics_cpu ? sat_add(d.cpu_bytes, p->info.static_bytes)
				     : d.cpu_bytes;
	c->streamed_bytes = d.streamed;
	c->predicted_decode_ms =
		pass_seconds(p, c, &d, decode_tokens(p), &c->decode_cost) * 1e3;
	c->predicted_prefill_ms =
		pass_seconds(p, c, &f, prefill_tokens(p), &c->prefill_cost) *
		1e3;
	if (c->mode == STRATA_RESIDENCY_PLACEMENT) {
		c->moved_bytes_per_forward = d.streamed;
		c->predicted_ms_per_forward = c->predicted_decode_ms;
		double t = c->predicted_decode_ms / 1e3;
		c->tokens_per_second = t > 0 ? decode_tokens(p) / t : 0.0;
	}
	strata__plan_experts_apply(p, c); /* experts on the CPU, if any */
}

/* Fills a uniform candidate's placement fields (every unit alike). */
void strata__plan_uniform_placement(const strata_plan *p,
				    strata_plan_candidate *c)
{
	uint64_t n = p->info.occupied_units;
	c->devices = 1;
	c->split_device_bytes[0] = c->device_bytes;
	c->resident_units = c->mode == STRATA_RESIDENCY_RESIDENT ? n : 0;
	c->device_resident_units[0] = c->resident_units;
	c->window_units = c->mode == STRATA_RESIDENCY_HOST ? n : 0;
	c->disk_units = c->mode == STRATA_RESIDENCY_DISK ? n : 0;
	c->prefill_window_units = c->window_units;
	strata__plan_predict_passes(p, c);
}

/* ------------------------------------------------------------------------ */
/* The search                                                               */
/* ------------------------------------------------------------------------ */

/* Sets a PLACEMENT candidate's splits: r resident, decode c cpu units,
 * prefill pc cpu units, and sizes it. */
static strata_status make(strata_plan *p, bool statics_cpu, uint64_t r,
			  uint64_t cpu, uint64_t pcpu, bool *mask,
			  strata_plan_candidate *out, strata_error *err)
{
	uint64_t n = p->info.occupied_units;
	strata_plan_candidate c = {.mode = STRATA_RESIDENCY_PLACEMENT};
	c.statics_on_cpu = statics_cpu;
	c.devices = p->budgets.devices ? p->budgets.devices : 1;
	c.resident_units = r;
	c.cpu_units = cpu;
	c.window_units = n - r - cpu;
	c.prefill_cpu_units = pcpu;
	c.prefill_window_units = n - r - pcpu;
	strata_status s = size_placement(p, &c, mask, err);
	if (s != STRATA_OK)
		return s;
	c.fits_host = c.host_bytes <= p->budgets.host_budget_bytes;
	uint64_t ram = p->budgets.ram_bytes;
	c.fits = c.fits_device && c.fits_host &&
		 (!ram || sat_add(c.device_bytes, c.host_bytes) <= ram);
	c.device_shortfall_bytes = 0;
	for (uint32_t d = 0; d < c.devices; d++) {
		uint64_t b = p->budgets.split_device_bytes[d];
		uint64_t t = c.split_device_bytes[d];
		if (t > b && t - b > c.device_shortfall_bytes)
			c.device_shortfall_bytes = t - b;
	}
	c.host_shortfall_bytes =
		c.fits_host ? 0 : c.host_bytes - p->budgets.host_budget_bytes;
	strata__plan_predict_passes(p, &c);
	*out = c;
	return STRATA_OK;
}

/* The range of a forced count (exactly min(N, top)) or the whole range,
 * stepped on a grid above EXHAUSTIVE_UNITS. */
static void range_of(bool forced, uint64_t value, uint64_t top,
		     uint64_t *lo, uint64_t *hi, uint64_t *step)
{
	if (forced) {
		*lo = *hi = value < top ? value : top;
		*step = 1;
		return;
	}
	*lo = 0;
	*hi = top;
	*step = top > EXHAUSTIVE_UNITS ? top / EXHAUSTIVE_UNITS + 1 : 1;
}

/* Decode time of a split without sizing it (O(n)): to skip the fit
 * check of splits that cannot beat the best so far. */
static double quick_decode(const strata_plan *p, bool statics_cpu,
			   uint64_t r, uint64_t cpu)
{
	strata_plan_candidate c = {.mode = STRATA_RESIDENCY_PLACEMENT,
				   .statics_on_cpu = statics_cpu,
				   .resident_units = r,
				   .window_units = p->info.occupied_units - r - cpu};
	strata__plan_split b;
	candidate_split(p, &c, false, &b);
	return pass_seconds(p, &c, &b, decode_tokens(p), NULL);
}

/* The least prefill time of the split (r, c) with its prefill split
 * either c (as decode) or 0 CPU units (stream everything it does not
 * hold), whichever fits and is faster; 1e300 when the decode split does
 * not fit. */
static strata_status prompt_of(strata_plan *p, bool statics_cpu, uint64_t r,
			       uint64_t c, bool *mask, double *ms,
			       strata_error *err)
{
	*ms = 1e300;
	uint64_t pcs[2] = {c, 0};
	for (int k = 0; k < (c ? 2 : 1); k++) {
		strata_plan_candidate t;
		strata_status s = make(p, statics_cpu, r, c, pcs[k], mask, &t,
				       err);
		if (s != STRATA_OK)
			return s;
		if (!t.fits && k == 0) /* the decode split must fit */
			return STRATA_OK;
		if (t.fits && t.predicted_prefill_ms < *ms)
			*ms = t.predicted_prefill_ms;
	}
	return STRATA_OK;
}

/* The fitting decode split of least decode + prompt / steps per prompt,
 * starting from the decode search's best (ties keep it): a split that
 * decodes nearly as fast but keeps a window for the prompt to stream
 * through beats one that fills the device and computes a 512-token
 * prompt on the CPU. best is replaced by that split (its prefill split as
 * decode's; the caller then searches the prefill split). */
static strata_status near_best(strata_plan *p, bool statics_cpu, bool *mask,
			       strata_plan_candidate *best, strata_error *err)
{
	const strata_plan_options *o = &p->options;
	uint64_t n = p->info.occupied_units, rlo, rhi, rstep;
	uint64_t br = best->resident_units, bc = best->cpu_units;
	double pt;
	strata_status s = prompt_of(p, statics_cpu, br, bc, mask, &pt, err);
	double bj = best->predicted_decode_ms + pt / STRATA_PLAN_DECODE_STEPS_PER_PROMPT;
	range_of(o->has_resident_units, o->resident_units, n, &rlo, &rhi,
		 &rstep);
	for (uint64_t r = rhi + 1; s == STRATA_OK && r-- > rlo;) {
		if ((rhi - r) % rstep && r != rlo)
			continue;
		uint64_t clo, chi, cstep;
		range_of(false, 0, n - r, &clo, &chi, &cstep);
		for (uint64_t c = clo; s == STRATA_OK && c <= chi; c += cstep) {
			double d = quick_decode(p, statics_cpu, r, c) * 1e3;
			if (d >= bj)
				continue;
			s = prompt_of(p, statics_cpu, r, c, mask, &pt, err);
			double j = d + pt / STRATA_PLAN_DECODE_STEPS_PER_PROMPT;
			if (s == STRATA_OK && j < bj * (1.0 - 1e-9)) {
				bj = j;
				br = r;
				bc = c;
			}
		}
	}
	if (s != STRATA_OK ||
	    (br == best->resident_units && bc == best->cpu_units))
		return s;
	return make(p, statics_cpu, br, bc, bc, mask, best, err);
}

/* The best decode split for one statics placement: the fitting (r, c)
 * of least predicted decode time (ties: more resident, then fewer CPU
 * units). Then, its resident units fixed, the prefill split of least
 * prefill time that still fits. *found false when nothing fits (best is
 * then the split with the least shortfall tried: r and c at their
 * least). */
static strata_status search(strata_plan *p, bool statics_cpu, bool *mask,
			    strata_plan_candidate *best, bool *found,
			    strata_error *err)
{
	const strata_plan_options *o = &p->options;
	uint64_t n = p->info.occupied_units, rlo, rhi, rstep;
	double best_t = 0;
	strata_status s0;
	*found = false;
	/* forced cpu units are exactly min(N, n): they bound the resident */
	uint64_t fc = o->has_cpu_units ? (o->cpu_units < n ? o->cpu_units : n) : 0;
	range_of(o->has_resident_units, o->resident_units, n - fc, &rlo, &rhi,
		 &rstep);
	for (uint64_t r = rhi + 1; r-- > rlo;) {
		if ((rhi - r) % rstep && r != rlo)
			continue;
		uint64_t clo, chi, cstep;
		range_of(o->has_cpu_units, o->cpu_units, n - r, &clo, &chi,
			 &cstep);
		for (uint64_t c = clo; c <= chi; c += cstep) {
			double t = quick_decode(p, statics_cpu, r, c);
			if (*found && t >= best_t)
				continue;
			strata_plan_candidate k;
			strata_status s = make(p, statics_cpu, r, c, c, mask,
					       &k, err);
			if (s != STRATA_OK)
				return s;
			if (!k.fits && (*found || r != rlo || c != clo))
				continue;
			*best = k;
			if (k.fits) {
				*found = true;
				best_t = t;
			}
		}
	}
	if (!*found || o->has_cpu_units)
		return STRATA_OK;
	s0 = near_best(p, statics_cpu, mask, best, err);
	if (s0 != STRATA_OK)
		return s0;
	/* the prefill pass: same resident units, its own CPU share */
	uint64_t r = best->resident_units, pbest = best->cpu_units;
	double pt = best->predicted_prefill_ms;
	for (uint64_t c = 0; c <= n - r; c++) {
		strata_plan_candidate k;
		strata_status s = make(p, statics_cpu, r, best->cpu_units, c,
				       mask, &k, err);
		if (s != STRATA_OK)
			return s;
		if (k.fits && k.predicted_prefill_ms < pt) {
			pt = k.predicted_prefill_ms;
			pbest = c;
		}
	}
	return make(p, statics_cpu, r, best->cpu_units, pbest, mask, best, err);
}

static bool same_split(const strata_plan_candidate *a,
		       const strata_plan_candidate *b)
{
	return a->statics_on_cpu == b->statics_on_cpu &&
	       a->resident_units == b->resident_units &&
	       a->cpu_units == b->cpu_units &&
	       a->prefill_cpu_units == b->prefill_cpu_units;
}

strata_status strata__plan_placements(strata_plan *p, strata_error *err)
{
	uint64_t n = p->info.occupied_units;
	if (n == 0)
		return STRATA_OK;
	bool *mask = strata_calloc_or_error((size_t)n, sizeof *mask,
					    "placement mask", err);
	if (!mask)
		return STRATA_E_NOMEM;
	strata_status s = STRATA_OK;
	strata_plan_candidate found[2];
	size_t count = 0;
	for (int statics_cpu = 0; statics_cpu < 2 && s == STRATA_OK;
	     statics_cpu++) {
		bool ok;
		s = search(p, statics_cpu, mask, &found[count], &ok, err);
		/* a placement equal to resident adds nothing */
		bool all_resident = found[count].resident_units == n &&
				    !statics_cpu;
		if (s == STRATA_OK && (ok || p->options.has_resident_units ||
				       p->options.has_cpu_units) &&
		    !all_resident &&
		    (count == 0 || !same_split(&found[0], &found[count])))
			count++;
	}
	/* the crossing is a scan over every chunk to the context: for the
	 * placements kept, not for each split the searches priced (it was
	 * 95% of a plan's time) */
	for (size_t i = 0; s == STRATA_OK && i < count; i++) {
		found[i].crossing_chunk = crossing(p, &found[i]);
		s = strata__plan_push(p, &found[i], err);
	}
	strata_free(mask);
	return s;
}
