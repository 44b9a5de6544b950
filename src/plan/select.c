/* select.c - the choice among a plan's candidates (uniform modes and
 * placements), its explanations, and the nothing-fits error with the one
 * change that makes it fit (layer: plan). */
#include <stdio.h>
#include <string.h>

#include "plan/internal.h"

#define explain strata__plan_explain

static const char *sz(uint64_t bytes, char buf[32])
{
	return strata_size_format(bytes, buf, 32);
}

/* ------------------------------------------------------------------------ */
/* Selection                                                                */
/* ------------------------------------------------------------------------ */

static bool eligible(const strata_plan *p, const strata_plan_candidate *c)
{
	const strata_plan_options *o = &p->options;
	bool forced_units = o->has_resident_units || o->has_cpu_units;
	if (c->mode == STRATA_RESIDENCY_PLACEMENT)
		return o->mode == STRATA_RESIDENCY_AUTO &&
		       (o->mixed_placements || forced_units);
	if (forced_units)
		return false;
	if (o->mode == STRATA_RESIDENCY_AUTO)
		return true;
	if (c->mode != o->mode)
		return false;
	return o->mode != STRATA_RESIDENCY_HOST || o->host_depth == 0 ||
	       c->weights.depth == o->host_depth;
}

/* The fitting eligible candidate of `mode` with the best time; ties go to
 * the smaller device total. -1 when none fits. */
static long best_of(const strata_plan *p, strata_residency_mode mode)
{
	long best = -1;
	for (size_t i = 0; i < p->candidate_count; i++) {
		const strata_plan_candidate *c = &p->candidates[i];
		if (c->mode != mode || !c->fits || !eligible(p, c))
			continue;
		if (best < 0) {
			best = (long)i;
			continue;
		}
		const strata_plan_candidate *b = &p->candidates[best];
		if (c->predicted_ms_per_forward < b->predicted_ms_per_forward ||
		    (c->predicted_ms_per_forward == b->predicted_ms_per_forward &&
		     c->device_bytes < b->device_bytes))
			best = (long)i;
	}
	return best;
}

static const strata_plan_candidate *first_of(const strata_plan *p,
					     strata_residency_mode mode)
{
	for (size_t i = 0; i < p->candidate_count; i++)
		if (p->candidates[i].mode == mode &&
		    eligible(p, &p->candidates[i]))
			return &p->candidates[i];
	return NULL;
}

/* Says why a mode's first candidate does not fit. */
static void explain_misfit(strata_plan *p, const strata_plan_candidate *c,
			   strata_explain dev_code, strata_explain host_code)
{
	char a[32], b[32];
	char name[96];
	strata_plan_candidate_name(c, name, sizeof name);
	if (!c->fits_device)
		explain(p, dev_code, "%s needs %s on the device, %s over the device budget",
			name, sz(c->device_bytes, a),
			sz(c->device_shortfall_bytes, b));
	if (!c->fits_host && host_code != STRATA_EXPLAIN_COUNT)
		explain(p, host_code, "%s needs %s of host memory, %s over the host budget",
			name, sz(c->host_bytes, a),
			sz(c->host_shortfall_bytes, b));
}

/* The auto chain among the uniform modes: resident, else the best host
 * window, else disk. */
static void uniform_chain(strata_plan *p)
{
	const strata_plan_options *o = &p->options;
	char a[32], b[32];
	if (o->mode != STRATA_RESIDENCY_AUTO)
		explain(p, STRATA_EXPLAIN_FORCED_BY_OPTION,
			"--residency %s given: only that mode is considered",
			strata_residency_mode_name(o->mode));
	const strata_plan_candidate *c = first_of(p, STRATA_RESIDENCY_RESIDENT);
	if (c && c->fits) {
		p->selected = (long)(c - p->candidates);
		explain(p, STRATA_EXPLAIN_RESIDENT_FITS,
			"everything fits on the device: %s of %s",
			sz(c->device_bytes, a), sz(p->budgets.device_budget_bytes, b));
		return;
	}
	if (c)
		explain_misfit(p, c, STRATA_EXPLAIN_RESIDENT_EXCEEDS_DEVICE_BUDGET,
			       STRATA_EXPLAIN_COUNT);
	long h = best_of(p, STRATA_RESIDENCY_HOST);
	if (h >= 0) {
		c = &p->candidates[h];
		p->selected = h;
		explain(p, STRATA_EXPLAIN_HOST_WINDOW_SELECTED,
			"host:%llu streams units over host-to-device: %.3f ms per forward pass, the fastest host window that fits",
			(unsigned long long)c->weights.depth,
			c->predicted_ms_per_forward);
		return;
	}
	c = first_of(p, STRATA_RESIDENCY_HOST);
	if (c)
		explain_misfit(p, c, STRATA_EXPLAIN_HOST_WINDOW_EXCEEDS_DEVICE_BUDGET,
			       STRATA_EXPLAIN_HOST_WINDOW_EXCEEDS_HOST_BUDGET);
	c = first_of(p, STRATA_RESIDENCY_DISK);
	if (c && c->fits) {
		p->selected = (long)(c - p->candidates);
		explain(p, STRATA_EXPLAIN_DISK_SELECTED,
			"disk streams units from the checkpoint (lookahead %llu, queue %llu): %.3f ms per forward pass",
			(unsigned long long)c->lookahead,
			(unsigned long long)c->queue, c->predicted_ms_per_forward);
		if (c->lookahead == 0)
			explain(p, STRATA_EXPLAIN_DISK_DIRECT_TO_DEVICE,
				"host memory 0: reads go straight from disk to the device");
		return;
	}
	if (c)
		explain_misfit(p, c, STRATA_EXPLAIN_DISK_EXCEEDS_DEVICE_BUDGET,
			       STRATA_EXPLAIN_DISK_EXCEEDS_HOST_BUDGET);
}

/* Why the selected placement is what it is, one code per choice. */
static void explain_placement(strata_plan *p, const strata_plan_candidate *c)
{
	const strata_plan_options *o = &p->options;
	char a[32], b[32], name[96];
	strata_plan_candidate_name(c, name, sizeof name);
	uint64_t n = p->info.occupied_units;
	explain(p, STRATA_EXPLAIN_PLACEMENT_SELECTED,
		"%s: %.3f ms per decode step (%.1f tokens/s), %.3f ms per prefill chunk of %llu, the fastest placement that fits",
		name, c->predicted_decode_ms, c->tokens_per_second,
		c->predicted_prefill_ms,
		(unsigned long long)o->shape.prefill_chunk);
	explain(p, STRATA_EXPLAIN_UNITS_RESIDENT_FILL,
		"%llu of %llu units resident: %s of the %s device budget after the window, KV cache and workspace",
		(unsigned long long)c->resident_units, (unsigned long long)n,
		sz(c->device_bytes, a), sz(p->budgets.device_budget_bytes, b));
	if (c->cpu_units)
		explain(p, STRATA_EXPLAIN_CPU_UNITS_SELECTED,
			"%llu units computed on the CPU from host memory (%s at %.1f GB/s) while %llu stream over the link (%s at %.1f GB/s)",
			(unsigned long long)c->cpu_units, sz(c->cpu_bytes, a),
			o->host_memory_bandwidth / 1e9,
			(unsigned long long)c->window_units,
			sz(c->streamed_bytes, b), o->h2d_bandwidth / 1e9);
	if (c->cpu_units && c->window_units)
		explain(p, STRATA_EXPLAIN_STREAM_CPU_INTERLEAVED,
			"streamed and CPU units alternate evenly, so the next streamed unit copies in while the CPU computes (window depth %llu)",
			(unsigned long long)c->weights.depth);
	if (c->statics_on_cpu)
		explain(p, STRATA_EXPLAIN_STATICS_ON_CPU,
			"the static tensors (%s: embeddings, output head) are computed on the CPU from host memory",
			sz(p->info.static_bytes, a));
	if (c->devices > 1) {
		char list[160] = "";
		size_t len = 0;
		for (uint32_t d = 0; d < c->devices && len < sizeof list; d++)
			len += (size_t)snprintf(list + len, sizeof list - len,
						"%s%llu", d ? " + " : "",
						(unsigned long long)c->device_resident_units[d]);
		explain(p, STRATA_EXPLAIN_SPLIT_OVER_DEVICES,
			"resident units split over %u devices in layer order: %s; streamed units use the last",
			c->devices, list);
	}
	if (c->prefill_cpu_units != c->cpu_units)
		explain(p, STRATA_EXPLAIN_PREFILL_PLACEMENT,
			"prefill chunks compute %llu units on the CPU and stream %llu (the same resident units): %.3f ms per chunk; that split is faster from chunks of %llu tokens",
			(unsigned long long)c->prefill_cpu_units,
			(unsigned long long)c->prefill_window_units,
			c->predicted_prefill_ms,
			(unsigned long long)c->crossing_chunk);
}

/* The request objective (docs/plan.md "Choosing"): decode time plus the
 * prompt pass spread over STRATA_PLAN_DECODE_STEPS_PER_PROMPT steps. */
static bool better(const strata_plan_candidate *a,
		   const strata_plan_candidate *b)
{
	double k = STRATA_PLAN_DECODE_STEPS_PER_PROMPT;
	return a->predicted_decode_ms + a->predicted_prefill_ms / k <
	       b->predicted_decode_ms + b->predicted_prefill_ms / k;
}

/* The placements: the fastest that fits is selected when the caller runs
 * placements (or forced them) and it beats the uniform choice; else it
 * is named, with the time it would take. */
static void placement_choice(strata_plan *p)
{
	const strata_plan_options *o = &p->options;
	bool forced = o->has_resident_units || o->has_cpu_units;
	bool allowed = o->mode == STRATA_RESIDENCY_AUTO &&
		       (o->mixed_placements || forced);
	long best = -1;
	for (size_t i = 0; i < p->candidate_count; i++) {
		const strata_plan_candidate *c = &p->candidates[i];
		if (c->mode != STRATA_RESIDENCY_PLACEMENT || !c->fits)
			continue;
		if (best < 0 || better(c, &p->candidates[best]))
			best = (long)i;
	}
	char name[96], other[96];
	if (forced) {
		char r[48] = "the planner's choice of", c[48] = "the planner's choice of";
		if (o->has_resident_units)
			snprintf(r, sizeof r, "%llu", (unsigned long long)o->resident_units);
		if (o->has_cpu_units)
			snprintf(c, sizeof c, "%llu", (unsigned long long)o->cpu_units);
		explain(p, STRATA_EXPLAIN_PLACEMENT_FORCED,
			"--resident-units/--cpu-units given: %s units resident, %s units on the CPU (at most the units there are)",
			r, c);
	}
	if (best < 0) {
		const strata_plan_candidate *c =
			forced ? first_of(p, STRATA_RESIDENCY_PLACEMENT) : NULL;
		if (c)
			explain_misfit(p, c, STRATA_EXPLAIN_FORCED_MODE_DOES_NOT_FIT,
				       STRATA_EXPLAIN_FORCED_MODE_DOES_NOT_FIT);
		return;
	}
	const strata_plan_candidate *b = &p->candidates[best];
	const strata_plan_candidate *sel = strata_plan_selected(p);
	if (sel && sel->predicted_decode_ms <= b->predicted_decode_ms)
		return;
	strata_plan_candidate_name(b, name, sizeof name);
	if (!allowed) {
		if (sel)
			strata_plan_candidate_name(sel, other, sizeof other);
		explain(p, STRATA_EXPLAIN_PLACEMENT_NOT_RUN_YET,
			"%s would decode in %.3f ms per step against %s%s%.3f ms; the caller does not let the plan pick placements (strata run picks them on CUDA and over a layer split; on one CPU device give --resident-units/--cpu-units), so it is not selected",
			name, b->predicted_decode_ms, sel ? other : "",
			sel ? "'s " : "nothing that fits, ",
			sel ? sel->predicted_decode_ms : 0.0);
		return;
	}
	p->selected = best;
	explain_placement(p, b);
}

/* What bounds the selected candidate's predictions, and their terms. */
static void explain_terms(strata_plan *p, const strata_plan_candidate *c)
{
	const strata_plan_cost *d = &c->decode_cost, *f = &c->prefill_cost;
	explain(p, STRATA_EXPLAIN_PREDICTION_TERMS,
		"decode %.2f ms bound by %s (resident %.2f, streamed %.2f, cpu %.2f, statics %.2f, overhead %.2f, link %.2f, host memory %.2f); prefill %.2f ms bound by %s (resident %.2f, streamed %.2f, cpu %.2f, link %.2f, window fill %.2f, after the last copy %.2f, host memory %.2f)",
		d->total_ms, strata_plan_bound_name(d->bound), d->resident_ms,
		d->streamed_ms, d->cpu_ms, d->statics_ms, d->overhead_ms,
		d->link_ms, d->host_memory_ms, f->total_ms,
		strata_plan_bound_name(f->bound), f->resident_ms,
		f->streamed_ms, f->cpu_ms, f->link_ms, f->window_fill_ms,
		f->link_tail_ms, f->host_memory_ms);
}

void strata__plan_select(strata_plan *p)
{
	const strata_plan_options *o = &p->options;
	char a[32], b[32];
	uniform_chain(p);
	placement_choice(p);
	if (p->selected >= 0) {
		explain_terms(p, &p->candidates[p->selected]);
		return;
	}
	if (o->mode != STRATA_RESIDENCY_AUTO)
		explain(p, STRATA_EXPLAIN_FORCED_MODE_DOES_NOT_FIT,
			"the forced mode does not fit the budgets");
	explain(p, STRATA_EXPLAIN_NOTHING_FITS,
		"no candidate fits device budget %s and host budget %s",
		sz(p->budgets.device_budget_bytes, a), sz(p->budgets.host_budget_bytes, b));
}

/* ------------------------------------------------------------------------ */
/* Nothing fits                                                             */
/* ------------------------------------------------------------------------ */

strata_status strata_plan_size_option(uint64_t bytes, char *buf, size_t cap)
{
	static const struct {
		const char *name;
		uint64_t unit;
	} units[] = {{"GiB", UINT64_C(1) << 30},
		     {"MiB", UINT64_C(1) << 20},
		     {"KiB", UINT64_C(1) << 10}};
	for (size_t i = 0; i < 3; i++) {
		uint64_t u = units[i].unit;
		if (bytes < u)
			continue;
		if (bytes % u == 0) {
			snprintf(buf, cap, "%llu%s",
				 (unsigned long long)(bytes / u), units[i].name);
			return STRATA_OK;
		}
		/* hundredths rounded up: the value typed back is >= bytes */
		unsigned __int128 h = ((unsigned __int128)bytes * 100 + u - 1) / u;
		for (;; h++) {
			snprintf(buf, cap, "%llu.%02llu%s",
				 (unsigned long long)(h / 100),
				 (unsigned long long)(h % 100), units[i].name);
			uint64_t back;
			strata_error ignored;
			if (strata_size_parse(buf, &back, &ignored) == STRATA_OK &&
			    back >= bytes)
				return STRATA_OK;
		}
	}
	snprintf(buf, cap, "%llu", (unsigned long long)bytes);
	return STRATA_OK;
}

static const char *opt(uint64_t bytes, char buf[32])
{
	strata_plan_size_option(bytes, buf, 32);
	return buf;
}

/* The least host memory a candidate can run with: its own, except that
 * host 0 turns disk into direct reads where the device can read a file's
 * bytes itself (not on CUDA, where units pass through pinned host memory). */
static uint64_t least_host_need(const strata_plan *p,
				const strata_plan_candidate *c)
{
	if (c->mode == STRATA_RESIDENCY_DISK &&
	    p->options.device != STRATA_PLAN_DEVICE_CUDA)
		return 0;
	return c->host_bytes;
}

/* The most device bytes any device of c needs. */
static uint64_t device_need(const strata_plan_candidate *c)
{
	uint64_t m = c->device_bytes;
	for (uint32_t d = 1; d < c->devices; d++)
		m = c->split_device_bytes[d] > m ? c->split_device_bytes[d] : m;
	return m;
}

static uint64_t times(uint64_t v, uint64_t n)
{
	return v > UINT64_MAX / n ? UINT64_MAX : v * n;
}

/* The one change of budget that makes an eligible candidate fit, the
 * smallest raise among them: only the device budget short, or only the
 * host's. *c NULL when every candidate is short of both. */
static void one_change(const strata_plan *p, const strata_plan_candidate **c,
		       bool *device, uint64_t *to)
{
	const strata_plan_budgets *b = &p->budgets;
	uint64_t n = b->shared_by ? b->shared_by : 1, best = UINT64_MAX;
	*c = NULL;
	for (size_t i = 0; i < p->candidate_count; i++) {
		const strata_plan_candidate *k = &p->candidates[i];
		if (!eligible(p, k))
			continue;
		uint64_t need_d = device_need(k), need_h = least_host_need(p, k);
		bool dev_ok = need_d <= b->device_budget_bytes;
		bool host_ok = need_h <= b->host_budget_bytes;
		if (dev_ok == host_ok)
			continue;
		uint64_t raise = dev_ok ? need_h - b->host_budget_bytes
					: need_d - b->device_budget_bytes;
		if (raise < best) {
			best = raise;
			*c = k;
			*device = !dev_ok;
			/* --host-memory is the pool replicas split */
			*to = dev_ok ? times(need_h, n) : need_d;
		}
	}
}

/* The candidate of least device need (ties: least host need). */
static const strata_plan_candidate *least_pair(const strata_plan *p)
{
	const strata_plan_candidate *best = NULL;
	for (size_t i = 0; i < p->candidate_count; i++) {
		const strata_plan_candidate *k = &p->candidates[i];
		if (!eligible(p, k))
			continue;
		if (!best || device_need(k) < device_need(best) ||
		    (device_need(k) == device_need(best) &&
		     least_host_need(p, k) < least_host_need(p, best)))
			best = k;
	}
	return best;
}

/* E_PLAN_NOTHING_FITS: each mode's first (smallest) candidate and how far
 * it is over, in the units the options take, and the fix: the one change
 * of budget that makes something fit, else the pair that does. */
strata_status strata__plan_nothing_fits(const strata_plan *p,
					strata_error *err)
{
	char msg[STRATA_ERROR_MESSAGE_BYTES] = "";
	size_t len = 0;
	strata_residency_mode modes[] = {STRATA_RESIDENCY_RESIDENT,
					 STRATA_RESIDENCY_HOST,
					 STRATA_RESIDENCY_DISK,
					 STRATA_RESIDENCY_PLACEMENT};
	char name[96], a[32], b[32];
	for (size_t m = 0; m < 4; m++) {
		const strata_plan_candidate *c = first_of(p, modes[m]);
		if (!c || len >= sizeof msg)
			continue;
		strata_plan_candidate_name(c, name, sizeof name);
		len += (size_t)snprintf(msg + len, sizeof msg - len,
			"%s%s needs %s on the device and %s of host memory",
			len ? "; " : "", name, opt(device_need(c), a),
			opt(least_host_need(p, c), b));
	}
	const strata_plan_candidate *pair = least_pair(p);
	if (!pair)
		return strata_fail(err, STRATA_E_PLAN_NOTHING_FITS,
				   "check the residency options",
				   "no candidate for the requested mode");
	const strata_plan_budgets *bu = &p->budgets;
	strata_fail(err, STRATA_E_PLAN_NOTHING_FITS, "",
		    "nothing fits the budgets (device %s, host %s%s): %s",
		    opt(bu->device_budget_bytes, a), opt(bu->host_budget_bytes, b),
		    bu->ram_bytes ? ", one RAM" : "", msg);
	if (!err)
		return STRATA_E_PLAN_NOTHING_FITS;
	const char *tail = p->memory.arch_known
				   ? "; or shorten --context" : "";
	uint64_t n = bu->shared_by ? bu->shared_by : 1;
	const strata_plan_candidate *one;
	bool device;
	uint64_t to = 0; /* set before every use; gcc 13 -O3 cannot tell */
	one_change(p, &one, &device, &to);
	if (bu->ram_bytes) {
		char c3[32], c4[32];
		strata_plan_candidate_name(pair, name, sizeof name);
		strata_error_set_fix(err,
			"free memory: %s needs %s of RAM in all, and MemAvailable minus headroom leaves %s; or plan another machine with --device-memory %s --host-memory %s%s",
			name, opt(strata_sat_add_u64(pair->device_bytes,
						     pair->host_bytes), a),
			opt(bu->ram_bytes, b), opt(device_need(pair), c3),
			opt(times(least_host_need(p, pair), n), c4), tail);
	} else if (one) {
		strata_plan_candidate_name(one, name, sizeof name);
		strata_error_set_fix(err, "give %s %s (then %s fits; the %s budget is enough)%s",
				     device ? "--device-memory" : "--host-memory",
				     opt(to, a), name, device ? "host" : "device",
				     tail);
	} else {
		strata_plan_candidate_name(pair, name, sizeof name);
		strata_error_set_fix(err, "give --device-memory %s --host-memory %s (then %s fits)%s",
				     opt(device_need(pair), a),
				     opt(times(least_host_need(p, pair), n), b),
				     name, tail);
	}
	return STRATA_E_PLAN_NOTHING_FITS;
}
