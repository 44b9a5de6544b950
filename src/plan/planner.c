/* planner.c - the automatic planner: budgets, candidates (resident, host:D,
 * disk), their fit, and the choice with stable explanation codes
 * (layer: plan). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plan/internal.h"

#define explain strata__plan_explain

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

const char *strata_explain_code(strata_explain e)
{
	switch (e) {
#define STRATA_EXPLAIN_CASE(name, code)                                        \
	case STRATA_EXPLAIN_##name:                                            \
		return code;
		STRATA_EXPLAIN_MAP(STRATA_EXPLAIN_CASE)
#undef STRATA_EXPLAIN_CASE
	case STRATA_EXPLAIN_COUNT:
		break;
	}
	return "unknown";
}

/* Appends an explanation; past the fixed capacity the rest are dropped,
 * which the capacity (twice the most one plan writes) rules out. */
void strata__plan_explain(strata_plan *p, strata_explain code,
			  const char *fmt, ...)
{
	if (p->explanation_count >= STRATA__PLAN_MAX_EXPLANATIONS)
		return;
	strata_plan_explanation *e = &p->explanations[p->explanation_count++];
	e->code = code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->text, sizeof e->text, fmt, ap);
	va_end(ap);
}

static const char *sz(uint64_t bytes, char buf[32])
{
	return strata_size_format(bytes, buf, 32);
}

static strata_status options_error(strata_error *err, const char *fix,
				   const char *msg)
{
	return strata_fail(err, STRATA_E_PLAN_OPTIONS, fix, "%s", msg);
}

/* Rates not given take their defaults (plan.h); on cpu the "device" is
 * RAM, so its memory rate is the host's and "host to device" a copy inside
 * RAM. Remembers which took a default (the rates_default explanation). */
static void resolve_rates(strata_plan *p)
{
	strata_plan_options *o = &p->options;
	bool cuda = o->device == STRATA_PLAN_DEVICE_CUDA;
	uint32_t def = 0;
#define DEFAULT_RATE(name, field, value)                                       \
	do {                                                                   \
		if (!(o->field > 0)) {                                         \
			o->field = (value);                                    \
			def |= 1u << STRATA_PLAN_RATE_##name;                  \
		}                                                              \
	} while (0)
	DEFAULT_RATE(MEMORY, memory_bandwidth,
		     cuda ? STRATA_PLAN_DEFAULT_HBM_BW
			  : STRATA_PLAN_DEFAULT_CPU_MEM_BW);
	DEFAULT_RATE(HOST_MEMORY, host_memory_bandwidth,
		     cuda ? STRATA_PLAN_DEFAULT_CPU_MEM_BW : o->memory_bandwidth);
	DEFAULT_RATE(H2D, h2d_bandwidth,
		     cuda ? STRATA_PLAN_DEFAULT_H2D_BW : o->memory_bandwidth);
	DEFAULT_RATE(D2H, d2h_bandwidth, o->h2d_bandwidth);
	/* unmeasured: the link and the CPU as fast together as alone */
	DEFAULT_RATE(H2D_SHARED, h2d_shared_bandwidth, o->h2d_bandwidth);
	DEFAULT_RATE(HOST_MEMORY_SHARED, host_memory_shared_bandwidth,
		     o->host_memory_bandwidth);
	DEFAULT_RATE(DISK, disk_bandwidth, STRATA_PLAN_DEFAULT_DISK_BW);
	DEFAULT_RATE(CPU_FLOPS, cpu_flops, STRATA_PLAN_DEFAULT_CPU_FLOPS);
	DEFAULT_RATE(DEVICE_FLOPS, device_flops,
		     cuda ? STRATA_PLAN_DEFAULT_DEVICE_FLOPS : o->cpu_flops);
	DEFAULT_RATE(CPU_LAUNCH, cpu_launch_seconds,
		     STRATA_PLAN_DEFAULT_CPU_LAUNCH_S);
	DEFAULT_RATE(DEVICE_LAUNCH, device_launch_seconds,
		     cuda ? STRATA_PLAN_DEFAULT_DEVICE_LAUNCH_S
			  : o->cpu_launch_seconds);
	/* on cpu the "crossing" is a memcpy inside RAM: not priced */
	DEFAULT_RATE(CROSSING, crossing_seconds,
		     cuda ? STRATA_PLAN_DEFAULT_CROSSING_S : 0.0);
	/* a device layer's fixed costs where no type's measure gives them;
	 * on cpu none (the kernels' cost stays as it was priced) */
	DEFAULT_RATE(DEVICE_LAYER, device_layer_seconds,
		     cuda ? STRATA_PLAN_DEFAULT_DEVICE_LAYER_S : 0.0);
	DEFAULT_RATE(DEVICE_ROW, device_row_seconds,
		     cuda ? STRATA_PLAN_DEFAULT_DEVICE_ROW_S : 0.0);
#undef DEFAULT_RATE
	p->default_rates = def;
	/* the weights' bytes an element where they execute (plan.h's rule):
	 * 2 for bf16, 34/32 for Q8_0, 4 where converted */
	const uint64_t elems = (uint64_t)1 << 20;
	uint64_t bytes = 0;
	strata_error ignored;
	p->element_bytes = strata_plan_tensor_device_bytes(
				   p->weight_dtype, elems, o->device, &bytes,
				   &ignored) == STRATA_OK
				   ? (double)bytes / (double)elems
				   : 4.0;
}

/* Fills defaults and rejects what cannot be planned. */
static strata_status resolve_options(strata_plan *p, strata_error *err)
{
	strata_plan_options *o = &p->options;
	strata_plan_shape *sh = &o->shape;
	strata_plan_shape_defaults(sh, p->arch.known ? p->arch.max_context : 0,
				   0);
	/* a step of the batch may carry prompt chunks of every sequence */
	uint64_t per = sh->batch ? sh->batch : 1; /* no product: no overflow */
	if (sh->prefill_chunk / per > sh->context ||
	    (sh->prefill_chunk / per == sh->context && sh->prefill_chunk % per))
		return options_error(err, "use a prefill chunk no longer than the context (times --batch)",
				     "the prefill chunk is longer than the context");
	if (!strata_kv_type_bytes(sh->kv_type))
		return options_error(err, "use --kv-type f32, f16 or bf16",
				     "the KV cache type is not one a KV cache holds");
	resolve_rates(p);
	bool forced_units = o->has_resident_units || o->has_cpu_units;
	if (forced_units && o->mode != STRATA_RESIDENCY_AUTO)
		return options_error(err, "drop --residency, or drop --resident-units/--cpu-units",
				     "--resident-units and --cpu-units place units one by one; --residency names a uniform placement");
	if (o->device_count > STRATA_PLAN_MAX_DEVICES)
		return strata_fail(err, STRATA_E_PLAN_OPTIONS,
				   "split over fewer devices",
				   "a layer split over %u devices: at most %u",
				   o->device_count, STRATA_PLAN_MAX_DEVICES);
	if (o->device_count > 1 && !o->has_device_budget)
		return options_error(err, "give --device-memory SIZE (each device's budget)",
				     "a layer split over several devices needs each device's budget");
	if ((o->has_lookahead || o->has_queue) &&
	    (o->mode == STRATA_RESIDENCY_RESIDENT ||
	     o->mode == STRATA_RESIDENCY_HOST))
		return options_error(err, "drop --lookahead/--queue, or use --residency disk",
				     "--lookahead and --queue apply to disk residency only");
	return STRATA_OK;
}

void strata_plan_shape_defaults(strata_plan_shape *s, uint64_t trained,
				uint64_t needed)
{
	if (s->context == 0) {
		uint64_t c = trained ? trained : STRATA_PLAN_UNKNOWN_CONTEXT;
		if (c > STRATA_PLAN_DEFAULT_CONTEXT)
			c = STRATA_PLAN_DEFAULT_CONTEXT;
		if (needed > c)
			c = trained && needed > trained ? trained : needed;
		s->context = c;
	}
	if (s->batch == 0)
		s->batch = 1;
	if (s->prefill_chunk == 0)
		s->prefill_chunk = s->context < STRATA_PLAN_DEFAULT_PREFILL_CHUNK
					   ? s->context
					   : STRATA_PLAN_DEFAULT_PREFILL_CHUNK;
}

/* The budgets of one plan. With options.host_shared_by = n > 1 the plan is
 * one replica of n on one machine: the host budget (the option or the
 * machine's) is one pool split evenly between them, and on cpu so is the
 * RAM their device arenas come from when no --device-memory is given. A
 * --device-memory is each replica's own (each GPU has its memory). */
static strata_status budgets(strata_plan *p, const strata_plan_machine *m,
			     strata_error *err)
{
	const strata_plan_options *o = &p->options;
	strata_plan_budgets b = {0};
	bool cuda = o->device == STRATA_PLAN_DEVICE_CUDA;
	uint32_t n = o->host_shared_by > 1 ? o->host_shared_by : 1;
	b.shared_by = n;
	if (o->has_device_budget) {
		b.device_budget_bytes = o->device_budget_bytes;
		b.device_from_option = true;
	} else {
		bool known = cuda ? m->device_free_known
				  : m->host_available_known;
		uint64_t avail = cuda ? m->device_free_bytes
				      : m->host_available_bytes;
		if (!known)
			return strata_fail(err, STRATA_E_PLAN_OPTIONS,
					   "give --device-memory SIZE",
					   "cannot tell how much %s memory is free",
					   strata_plan_device_name(o->device));
		b.device_headroom_bytes =
			strata_plan_headroom(o->device, avail);
		b.device_budget_bytes = avail - b.device_headroom_bytes;
		/* on cpu the host tier given by option comes out of the
		 * same RAM, and the replicas share what is left */
		if (!cuda && o->has_host_budget)
			b.device_budget_bytes = b.device_budget_bytes > o->host_budget_bytes
						 ? b.device_budget_bytes - o->host_budget_bytes
						 : 0;
		if (!cuda)
			b.device_budget_bytes /= n;
	}
	if (o->has_host_budget) {
		b.host_pool_bytes = o->host_budget_bytes;
		b.host_from_option = true;
	} else {
		if (!m->host_available_known)
			return strata_fail(err, STRATA_E_PLAN_OPTIONS,
					   "give --host-memory SIZE",
					   "cannot tell how much host memory is available");
		uint64_t avail = m->host_available_bytes;
		b.host_headroom_bytes =
			strata_plan_headroom(STRATA_PLAN_DEVICE_CPU, avail);
		b.host_pool_bytes = avail - b.host_headroom_bytes;
		/* on cpu the "device" arenas (n of them) and the host tier
		 * share RAM */
		if (!cuda)
			b.host_pool_bytes =
				b.device_budget_bytes < b.host_pool_bytes / n
					? b.host_pool_bytes - n * b.device_budget_bytes
					: 0;
	}
	b.host_budget_bytes = b.host_pool_bytes / n;
	if (!cuda && !o->has_device_budget && !o->has_host_budget) {
		/* one RAM, neither budget given: each candidate fits when
		 * its device and host bytes together fit the RAM, so every
		 * mode that fits runs (not the device arena taking it all) */
		uint64_t avail = m->host_available_bytes;
		b.host_headroom_bytes = b.device_headroom_bytes;
		b.host_pool_bytes = avail - b.device_headroom_bytes;
		b.ram_bytes = b.host_pool_bytes / n;
		b.device_budget_bytes = b.host_budget_bytes = b.ram_bytes;
	}
	b.devices = o->device_count > 1 ? o->device_count : 1;
	for (uint32_t i = 0; i < b.devices; i++)
		b.split_device_bytes[i] =
			o->device_budgets[i] ? o->device_budgets[i]
					     : b.device_budget_bytes;
	b.device_budget_bytes = b.split_device_bytes[0];
	p->budgets = b;
	return STRATA_OK;
}

/* lookahead/queue of the disk candidate (DESIGN.md): host 0 -> direct
 * (0, 0); otherwise both >= 1 and queue <= lookahead. */
static strata_status disk_settings(strata_plan *p, uint64_t *lookahead,
				   uint64_t *queue, strata_error *err)
{
	const strata_plan_options *o = &p->options;
	uint64_t host = p->budgets.host_budget_bytes, largest = p->info.largest_unit_bytes;
	/* A GPU cannot read a file: on CUDA each unit passes through pinned
	 * host memory (no GPUDirect Storage here), so the disk mode needs a
	 * lookahead of at least one unit and never reads "straight" through. */
	bool staged = o->device == STRATA_PLAN_DEVICE_CUDA;
	if (staged && ((o->has_lookahead && o->lookahead == 0) ||
		       (o->has_queue && o->queue == 0)))
		return options_error(err, "give --lookahead and --queue of at least 1, and --host-memory for at least one unit",
				     "on CUDA the disk mode reads each unit into pinned host memory first, so lookahead and queue must be at least 1");
	if (host == 0 && !staged) {
		if ((o->has_lookahead && o->lookahead) ||
		    (o->has_queue && o->queue))
			return options_error(err, "give --lookahead 0 --queue 0, or a --host-memory above 0",
					     "with host memory 0 disk reads go straight to the device, so lookahead and queue must be 0");
		*lookahead = *queue = 0;
		return STRATA_OK;
	}
	if ((o->has_lookahead && o->lookahead == 0) ||
	    (o->has_queue && o->queue == 0))
		return options_error(err, "give --lookahead and --queue of at least 1, or --host-memory 0",
				     "with host memory above 0 the disk mode needs a lookahead and a queue of at least 1");
	if (!staged && !o->has_lookahead && !o->has_queue && largest &&
	    host / largest == 0) {
		/* not one unit fits the host budget: read straight to the
		 * device, using less host memory than allowed */
		*lookahead = *queue = 0;
		return STRATA_OK;
	}
	/* on CUDA the load staging (the largest static tensor) shares it */
	if (staged)
		host = host > p->info.largest_static_bytes
			       ? host - p->info.largest_static_bytes
			       : 0;
	uint64_t la = o->has_lookahead ? o->lookahead : 2;
	if (!o->has_lookahead) {
		/* default: two units ahead, fewer when the budget is small */
		if (la > p->info.occupied_units)
			la = p->info.occupied_units ? p->info.occupied_units : 1;
		while (la > 1 && largest && host / largest < la)
			la--;
	}
	uint64_t q = o->has_queue ? o->queue : 1;
	if (q > la)
		return options_error(err, "give a --queue no larger than --lookahead",
				     "more background reads (--queue) than lookahead slots to read into");
	*lookahead = la;
	*queue = q;
	return STRATA_OK;
}

/* The window of a uniform candidate in the device's region: its units in
 * their aligned slots (the seed's figure, c->weights, has none). */
static strata_status region_window(const strata_plan *p,
				   const strata_plan_candidate *c,
				   uint64_t *out, strata_error *err)
{
	if (c->mode == STRATA_RESIDENCY_RESIDENT) {
		*out = p->info.all_units_bytes; /* no overflow: sized */
		return STRATA_OK;
	}
	return strata_plan_layout_window(p->layout, c->weights.depth, out, err);
}

/* Fills a candidate's totals and fit from its mode's weights. */
static strata_status size_candidate(strata_plan *p, strata_plan_candidate *c,
				    strata_error *err)
{
	const strata_plan_memory *m = &p->memory;
	strata_status s = region_window(p, c, &c->window_device_bytes, err);
	if (s == STRATA_OK)
		s = strata_checked_align(p->info.static_bytes,
					 &c->static_device_bytes,
					 "static device bytes", err);
	if (s == STRATA_OK)
		s = strata_checked_align(c->window_device_bytes,
					 &c->window_device_bytes,
					 "window device bytes", err);
	/* disk's lookahead ring: the host tier of the residency engine */
	uint64_t slots = c->mode == STRATA_RESIDENCY_DISK ? c->lookahead : 0;
	if (s == STRATA_OK)
		s = strata_checked_mul(slots, p->info.largest_unit_bytes,
				       &c->staging_bytes, "staging ring bytes",
				       err);
	c->host_weight_bytes =
		c->mode == STRATA_RESIDENCY_HOST ? p->info.all_units_bytes : 0;
	/* CUDA loads what the device holds through one pinned buffer
	 * beside the host tier (none on cpu) */
	uint64_t load = strata__plan_load_staging(
		p, c->mode == STRATA_RESIDENCY_RESIDENT);
	c->load_staging_bytes = load;
	if (s == STRATA_OK)
		s = strata_checked_add(c->staging_bytes, load,
				       &c->staging_bytes, "staging bytes", err);
	if (s == STRATA_OK)
		s = strata_checked_add(c->host_weight_bytes, c->staging_bytes,
				       &c->host_bytes, "host total bytes", err);
	/* on CUDA the host tiers are pinned, which costs device memory too;
	 * the load staging is pinned only while the engine loads, before
	 * the forward pass takes its buffers */
	c->driver_bytes = p->options.device == STRATA_PLAN_DEVICE_CUDA
				  ? strata_plan_cuda_driver_bytes(
					    c->host_bytes - load)
				  : 0;
	uint64_t d = 0;
	/* the forward pass's one site on the device, every layer's KV cache
	 * there, the logits rows where host code cannot address it */
	const uint64_t parts[] = {c->static_device_bytes,
				  c->window_device_bytes,
				  strata_plan_site_bytes(
					  m, UINT64_MAX, false,
					  p->options.device ==
						  STRATA_PLAN_DEVICE_CUDA),
				  m->product_workspace_bytes,
				  p->options.backend_reserved_bytes,
				  c->driver_bytes};
	for (size_t i = 0; s == STRATA_OK && i < sizeof parts / sizeof *parts;
	     i++)
		s = strata_checked_add(d, parts[i], &d, "device total bytes",
				       err);
	if (s != STRATA_OK)
		return s;
	c->device_bytes = d;
	c->fits_device = d <= p->budgets.device_budget_bytes;
	c->fits_host = c->host_bytes <= p->budgets.host_budget_bytes;
	uint64_t ram = p->budgets.ram_bytes;
	uint64_t both = strata_sat_add_u64(d, c->host_bytes);
	c->fits = c->fits_device && c->fits_host && (!ram || both <= ram);
	c->device_shortfall_bytes = c->fits_device ? 0 : d - p->budgets.device_budget_bytes;
	if (ram && both > ram && c->fits_device)
		c->device_shortfall_bytes = both - ram; /* the one RAM's */
	c->host_shortfall_bytes =
		c->fits_host ? 0 : c->host_bytes - p->budgets.host_budget_bytes;
	strata__plan_predict(&p->info, m, &p->options, c);
	strata__plan_uniform_placement(p, c);
	return STRATA_OK;
}

static strata_status add_candidate(strata_plan *p, strata_residency_mode mode,
				   uint64_t depth, uint64_t lookahead,
				   uint64_t queue, strata_error *err)
{
	strata_plan_candidate c = {.mode = mode, .lookahead = lookahead,
				   .queue = queue};
	strata_status s = strata_plan_layout_weights(p->layout, mode, depth,
						     &c.weights, err);
	if (s == STRATA_OK)
		s = size_candidate(p, &c, err);
	if (s == STRATA_OK)
		s = strata__plan_push(p, &c, err);
	return s;
}

strata_status strata__plan_push(strata_plan *p, const strata_plan_candidate *c,
				strata_error *err)
{
	strata_status s = strata_grow((void **)&p->candidates,
				      &p->candidate_cap, p->candidate_count + 1,
				      sizeof *c, "plan candidates", err);
	if (s != STRATA_OK)
		return s;
	p->candidates[p->candidate_count++] = *c;
	return STRATA_OK;
}

/* host:D for D = 1.. until one does not fit or D holds a whole group;
 * a forced depth is added as asked (not clamped). */
static strata_status host_candidates(strata_plan *p, strata_error *err)
{
	const strata_plan_options *o = &p->options;
	uint64_t span = p->info.span, d = 1;
	strata_status s = STRATA_OK;
	for (; d <= span && d <= STRATA_PLAN_MAX_HOST_CANDIDATES; d++) {
		s = add_candidate(p, STRATA_RESIDENCY_HOST, d, 0, 0, err);
		if (s != STRATA_OK || !p->candidates[p->candidate_count - 1].fits)
			break;
	}
	bool stopped_fitting = s == STRATA_OK && d <= span &&
			       d <= STRATA_PLAN_MAX_HOST_CANDIDATES;
	if (s == STRATA_OK && !stopped_fitting &&
	    span > STRATA_PLAN_MAX_HOST_CANDIDATES) {
		explain(p, STRATA_EXPLAIN_HOST_WINDOW_LIST_TRUNCATED,
			"host windows listed up to depth %u, then depth %llu, which holds a whole group",
			STRATA_PLAN_MAX_HOST_CANDIDATES,
			(unsigned long long)span);
		s = add_candidate(p, STRATA_RESIDENCY_HOST, span, 0, 0, err);
	}
	if (s == STRATA_OK && o->mode == STRATA_RESIDENCY_HOST &&
	    o->host_depth) {
		bool listed = false;
		for (size_t i = 0; i < p->candidate_count; i++)
			listed |= p->candidates[i].mode == STRATA_RESIDENCY_HOST &&
				  p->candidates[i].weights.depth == o->host_depth;
		if (!listed)
			s = add_candidate(p, STRATA_RESIDENCY_HOST,
					  o->host_depth, 0, 0, err);
	}
	return s;
}

/* The stored types whose products no per-type rate prices, on each tier:
 * they take the tier's f32 rates (rates_type_default). */
static void explain_type_rates(strata_plan *p)
{
	int last = p->options.device == STRATA_PLAN_DEVICE_CPU ? 1 : 0;
	for (int cpu = 1; cpu >= last; cpu--) {
		char list[160] = "";
		size_t len = 0;
		for (uint32_t k = 0; k < p->type_count; k++) {
			double gemv, gemm;
			bool measured;
			strata__plan_type_rates(p, cpu, p->type_of[k], &gemv,
						&gemm, &measured);
			if (measured || len >= sizeof list)
				continue;
			len += (size_t)snprintf(list + len, sizeof list - len,
						"%s%s", len ? ", " : "",
						strata_block_name(p->type_of[k]));
		}
		if (len)
			explain(p, STRATA_EXPLAIN_RATES_TYPE_DEFAULT,
				"%s products of %.160s priced at the %s rates (no per-type rate measured; strata calibrate measures them)",
				cpu ? "CPU" : "device", list,
				cpu ? "host memory / cpu_flops"
				    : "memory / device_flops");
	}
}

/* Which rates are defaults (no rates file, no option) and which came from
 * the rates file strata calibrate writes. */
static void explain_rates(strata_plan *p)
{
	char def[200] = "", cal[200] = "";
	size_t dl = 0, cl = 0;
	for (int r = 0; r < STRATA_PLAN_RATE_COUNT; r++) {
		const char *name = strata_plan_rate_name((strata_plan_rate)r);
		if (p->default_rates & (1u << r)) {
			if (dl < sizeof def)
				dl += (size_t)snprintf(def + dl, sizeof def - dl,
						       "%s%s", dl ? ", " : "", name);
		} else if (p->options.calibrated_rates & (1u << r)) {
			if (cl < sizeof cal)
				cl += (size_t)snprintf(cal + cl, sizeof cal - cl,
						       "%s%s", cl ? ", " : "", name);
		}
	}
	explain_type_rates(p);
	if (dl)
		explain(p, STRATA_EXPLAIN_RATES_DEFAULT,
			"default rates (not measured here; strata calibrate measures them): %.180s", def);
	if (cl)
		explain(p, STRATA_EXPLAIN_RATES_CALIBRATED,
			"measured by strata calibrate: %.180s", cal);
}

static void explain_inputs(strata_plan *p)
{
	const strata_plan_budgets *b = &p->budgets;
	bool cpu = p->options.device == STRATA_PLAN_DEVICE_CPU;
	char x[32], y[32], z[32], split[64] = "";
	if (b->shared_by > 1)
		snprintf(split, sizeof split, ", split between %u replicas",
			 b->shared_by);
	if (b->device_from_option)
		explain(p, STRATA_EXPLAIN_DEVICE_BUDGET_FROM_OPTION,
			"device budget %s from --device-memory%s",
			sz(b->device_budget_bytes, x),
			b->shared_by > 1 ? " (each replica's own)" : "");
	else
		explain(p, STRATA_EXPLAIN_DEVICE_BUDGET_FROM_MACHINE,
			"device budget %s: %s minus %s headroom%s",
			sz(b->device_budget_bytes, x),
			cpu ? "MemAvailable (cpu: the device is RAM)"
			    : "the GPU's free memory",
			sz(b->device_headroom_bytes, y), cpu ? split : "");
	if (b->host_from_option)
		explain(p, STRATA_EXPLAIN_HOST_BUDGET_FROM_OPTION,
			"host budget %s from --host-memory%s%s%s",
			sz(b->host_budget_bytes, x), b->shared_by > 1 ? " " : "",
			b->shared_by > 1 ? sz(b->host_pool_bytes, z) : "",
			split);
	else
		explain(p, STRATA_EXPLAIN_HOST_BUDGET_FROM_MACHINE,
			"host budget %s: MemAvailable minus %s headroom%s%s",
			sz(b->host_budget_bytes, x), sz(b->host_headroom_bytes, y),
			cpu ? " minus the device budget (cpu: one RAM)" : "",
			split);
	if (b->ram_bytes)
		explain(p, STRATA_EXPLAIN_ONE_RAM_SHARED,
			"cpu, neither budget given: the device arena and the host tier share %s of RAM, so a candidate fits when both together fit it",
			sz(b->ram_bytes, x));
	explain_rates(p);
	if (!p->arch.known)
		explain(p, STRATA_EXPLAIN_ARCHITECTURE_UNKNOWN,
			"architecture unknown (%.120s): weights are sized, KV cache and workspace are not, so device totals are weights only",
			p->arch.unknown_reason ? p->arch.unknown_reason
					       : "not described");
	if (p->info.occupied_units == 0)
		explain(p, STRATA_EXPLAIN_NO_EXECUTION_UNITS,
			"no tensor belongs to an execution unit: only resident applies");
}

static strata_status build(strata_plan *p, strata_error *err)
{
	strata_status s = strata_plan_memory_compute(
		&p->arch, &p->options.shape, p->options.device,
		p->weight_dtype, p->info.largest_unit_bytes, 0, &p->memory, err);
	if (s == STRATA_OK)
		s = add_candidate(p, STRATA_RESIDENCY_RESIDENT, 0, 0, 0, err);
	if (s != STRATA_OK || p->info.occupied_units == 0)
		return s;
	s = host_candidates(p, err);
	uint64_t la = 0, q = 0;
	if (s == STRATA_OK)
		s = disk_settings(p, &la, &q, err);
	if (s == STRATA_OK)
		s = add_candidate(p, STRATA_RESIDENCY_DISK, 0, la, q, err);
	if (s == STRATA_OK)
		s = strata__plan_placements(p, err);
	return s;
}

/* Each occupied unit's bytes and their prefix sums, for the placements. */
static strata_status unit_table(strata_plan *p, strata_error *err)
{
	size_t n = (size_t)p->info.occupied_units;
	p->unit_bytes = strata_calloc_or_error(n ? n : 1, sizeof *p->unit_bytes,
					       "plan unit bytes", err);
	p->unit_prefix = strata_calloc_or_error(n + 1, sizeof *p->unit_prefix,
						"plan unit prefix", err);
	if (!p->unit_bytes || !p->unit_prefix)
		return STRATA_E_NOMEM;
	uint64_t present[STRATA_BLOCK_COUNT];
	memcpy(present, p->info.static_compute_type_bytes, sizeof present);
	for (size_t i = 0; i < n; i++) {
		strata_plan_unit u;
		strata_plan_layout_unit_at(p->layout, i, &u);
		p->unit_bytes[i] = u.bytes;
		p->unit_prefix[i + 1] =
			strata_sat_add_u64(p->unit_prefix[i], u.bytes);
		for (int t = 0; t < STRATA_BLOCK_COUNT; t++)
			present[t] |= u.type_bytes[t];
	}
	int index[STRATA_BLOCK_COUNT];
	p->type_count = 0;
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		index[t] = present[t] ? (int)p->type_count : -1;
		if (present[t])
			p->type_of[p->type_count++] = (strata_block_type)t;
	}
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++)
		if (index[t] >= 0)
			p->static_types[index[t]] =
				p->info.static_compute_type_bytes[t];
	size_t cells = (n ? n : 1) * (p->type_count ? p->type_count : 1);
	p->unit_types = strata_calloc_or_error(2 * cells, sizeof *p->unit_types,
					       "plan unit types", err);
	if (!p->unit_types)
		return STRATA_E_NOMEM;
	p->unit_expert_types = p->unit_types + cells;
	for (size_t i = 0; i < n; i++) {
		strata_plan_unit u;
		strata_plan_layout_unit_at(p->layout, i, &u);
		for (int t = 0; t < STRATA_BLOCK_COUNT; t++)
			if (index[t] >= 0) {
				size_t k = i * p->type_count + (size_t)index[t];
				p->unit_types[k] = u.type_bytes[t];
				p->unit_expert_types[k] = u.expert_type_bytes[t];
			}
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Public                                                                   */
/* ------------------------------------------------------------------------ */

strata_status strata_plan_create(const strata_plan_layout *layout,
				 const strata_plan_arch *arch,
				 strata_dtype weight_dtype,
				 const strata_plan_options *options,
				 const strata_plan_machine *machine,
				 strata_plan **out, strata_error *err)
{
	if (!layout || !options || !machine || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass a layout, options and machine",
				   "strata_plan_create called with NULL");
	*out = NULL;
	strata_plan *p = strata_calloc_or_error(1, sizeof *p, "plan", err);
	if (!p)
		return STRATA_E_NOMEM;
	p->layout = layout;
	strata_plan_layout_get_info(layout, &p->info);
	if (arch)
		p->arch = *arch;
	p->options = *options;
	p->given = *options;
	p->machine = *machine;
	p->weight_dtype = weight_dtype;
	p->selected = -1;
	strata_status s = resolve_options(p, err);
	if (s == STRATA_OK)
		s = budgets(p, machine, err);
	if (s == STRATA_OK)
		s = unit_table(p, err);
	if (s == STRATA_OK)
		s = build(p, err);
	if (s != STRATA_OK) {
		strata_plan_destroy(p);
		return s;
	}
	explain_inputs(p);
	strata__plan_select(p);
	const strata_plan_candidate *sel = strata_plan_selected(p);
	p->memory.staging_slots =
		sel && sel->mode == STRATA_RESIDENCY_DISK ? sel->lookahead : 0;
	p->memory.staging_slot_bytes =
		p->memory.staging_slots ? p->info.largest_unit_bytes : 0;
	p->memory.staging_bytes = sel ? sel->staging_bytes : 0;
	*out = p;
	return sel ? STRATA_OK : strata__plan_nothing_fits(p, err);
}

void strata_plan_destroy(strata_plan *p)
{
	if (!p)
		return;
	strata_free(p->candidates);
	strata_free(p->unit_types);
	strata_free(p->unit_bytes);
	strata_free(p->unit_prefix);
	strata_free(p);
}

size_t strata_plan_candidate_count(const strata_plan *p)
{
	return p->candidate_count;
}

const strata_plan_candidate *strata_plan_candidate_at(const strata_plan *p,
						      size_t i)
{
	return i < p->candidate_count ? &p->candidates[i] : NULL;
}

const strata_plan_candidate *strata_plan_selected(const strata_plan *p)
{
	return p->selected >= 0 ? &p->candidates[p->selected] : NULL;
}

long strata_plan_selected_index(const strata_plan *p)
{
	return p->selected;
}

size_t strata_plan_explanation_count(const strata_plan *p)
{
	return p->explanation_count;
}

const strata_plan_explanation *strata_plan_explanation_at(const strata_plan *p,
							  size_t i)
{
	return i < p->explanation_count ? &p->explanations[i] : NULL;
}

const strata_plan_budgets *strata_plan_get_budgets(const strata_plan *p)
{
	return &p->budgets;
}

const strata_plan_memory *strata_plan_get_memory(const strata_plan *p)
{
	return &p->memory;
}

const strata_plan_options *strata_plan_get_options(const strata_plan *p)
{
	return &p->options;
}

const strata_plan_arch *strata_plan_get_arch(const strata_plan *p)
{
	return &p->arch;
}

const strata_plan_layout_info *strata_plan_get_layout_info(const strata_plan *p)
{
	return &p->info;
}

strata_residency_mode strata_plan_mode(const strata_plan *p)
{
	const strata_plan_candidate *c = strata_plan_selected(p);
	return c ? c->mode : STRATA_RESIDENCY_AUTO;
}

#define SELECTED_FIELD(fn, expr)                                               \
	uint64_t fn(const strata_plan *p)                                      \
	{                                                                      \
		const strata_plan_candidate *c = strata_plan_selected(p);      \
		return c ? (expr) : 0;                                         \
	}

SELECTED_FIELD(strata_plan_depth, c->weights.depth)
SELECTED_FIELD(strata_plan_lookahead, c->lookahead)
SELECTED_FIELD(strata_plan_queue, c->queue)
SELECTED_FIELD(strata_plan_device_total, c->device_bytes)
SELECTED_FIELD(strata_plan_host_total, c->host_bytes)
SELECTED_FIELD(strata_plan_weight_device_bytes,
	       c->static_device_bytes + c->window_device_bytes)
#undef SELECTED_FIELD

uint64_t strata_plan_device_budget_bytes(const strata_plan *p)
{
	return p->budgets.device_budget_bytes;
}

uint64_t strata_plan_host_budget_bytes(const strata_plan *p)
{
	return p->budgets.host_budget_bytes;
}

static uint64_t left(uint64_t budget, uint64_t used)
{
	return budget > used ? budget - used : 0;
}

/* The most of `spare` more pinned host memory whose page tables (the
 * driver's device memory, strata_plan_cuda_driver_bytes) the device
 * budget's remainder pays for: the candidate's own pinned memory is
 * already counted in its device bytes. */
static uint64_t pinnable(const strata_plan *p, const strata_plan_candidate *c,
			 uint64_t spare)
{
	const uint64_t room = left(p->budgets.device_budget_bytes, c->device_bytes);
	/* a uniform mode's load staging is gone once the run starts */
	const uint64_t pinned = c->mode == STRATA_RESIDENCY_PLACEMENT
					? c->host_bytes
					: c->host_bytes - c->load_staging_bytes;
	const uint64_t base = strata_plan_cuda_driver_bytes(pinned);
	uint64_t lo = 0, hi = spare;
	while (lo < hi) { /* the cost only grows with the bytes pinned */
		uint64_t mid = lo + (hi - lo) / 2 + 1;
		if (strata_plan_cuda_driver_bytes(pinned + mid) - base <=
		    room)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

uint64_t strata_plan_host_spare_bytes(const strata_plan *p)
{
	const strata_plan_candidate *c = strata_plan_selected(p);
	if (!c)
		return 0;
	uint64_t spare = left(p->budgets.host_budget_bytes, c->host_bytes);
	if (p->budgets.ram_bytes) /* one RAM for both tiers */
		return left(p->budgets.ram_bytes,
			    strata_sat_add_u64(c->device_bytes, c->host_bytes));
	if (p->options.device == STRATA_PLAN_DEVICE_CUDA)
		return pinnable(p, c, spare);
	if (p->options.device == STRATA_PLAN_DEVICE_CPU) {
		/* the device arena is the same RAM */
		uint64_t dev = left(p->budgets.device_budget_bytes, c->device_bytes);
		spare = spare > UINT64_MAX - dev ? UINT64_MAX : spare + dev;
	}
	return spare;
}
