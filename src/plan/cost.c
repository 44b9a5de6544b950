/* cost.c - the cost model of a pass: each unit's products priced at the
 * measured rate of its stored type on the processor that computes it, the
 * link's time for the streamed bytes, and the fixed costs (kernels on the
 * CPU's pool, device launches, crossings of the residual stream), put
 * together the way the forward pass runs them (layer: plan).
 *
 * docs/plan.md "Cost model" states it. In short: the forward pass runs the
 * layers in order, so the device's and the CPU's compute follow one
 * another (a chain); the window copies the next streamed unit in while
 * the chain runs, so where the window prefetches (depth >= 2) a pass
 * takes max(link, chain), and where it cannot (host:1, direct disk, and
 * on cpu, where the copies and the compute read one RAM) their sum. The
 * CPU's reads and the link's copies come out of one host memory: on the
 * GPU machine a pinned copy beside a 16-thread CPU decode ran at 49 GB/s
 * (54 alone) and the decode at 64 GB/s (79 alone), 113 GB/s together
 * against 110 GB/s through the CPU kernels alone. So where both run in a
 * pass they run at the rates strata calibrate measures them at together
 * (h2d_shared, host_memory_shared), and the pass is at least everything
 * both read over the most host memory gave: alone to the CPU, alone to
 * the link, or to both together. */
#include <math.h>
#include <string.h>

#include "plan/internal.h"

static double max2(double a, double b)
{
	return a > b ? a : b;
}

/* ------------------------------------------------------------------------ */
/* Rates                                                                    */
/* ------------------------------------------------------------------------ */

/* Whether rate r came from an option (neither a default nor the file). */
static bool from_option(const strata_plan *p, strata_plan_rate r)
{
	uint32_t bit = 1u << r;
	return !(p->default_rates & bit) && !(p->options.calibrated_rates & bit);
}

/* The product rates of block type t on the CPU (cpu) or the device: the
 * type's measured rates, else the tier's f32 rates. A tier whose rates an
 * option gave uses those for every type (the option wins over the file).
 * On a cpu device the device is the CPU: its types' rates are the CPU's. */
void strata__plan_type_rates(const strata_plan *p, bool cpu,
			     strata_block_type t, double *gemv, double *gemm,
			     bool *measured)
{
	const strata_plan_options *o = &p->options;
	bool dev_is_cpu = o->device == STRATA_PLAN_DEVICE_CPU;
	const strata_plan_type_rate *tr =
		cpu || dev_is_cpu ? &o->cpu_types[t] : &o->device_types[t];
	bool opt = cpu ? from_option(p, STRATA_PLAN_RATE_HOST_MEMORY)
		       : from_option(p, STRATA_PLAN_RATE_MEMORY);
	bool opt_f = cpu ? from_option(p, STRATA_PLAN_RATE_CPU_FLOPS)
			 : from_option(p, STRATA_PLAN_RATE_DEVICE_FLOPS);
	double mem = cpu ? o->host_memory_bandwidth : o->memory_bandwidth;
	double flops = cpu ? o->cpu_flops : o->device_flops;
	*gemv = !opt && tr->gemv > 0 ? tr->gemv : mem;
	*gemm = !opt_f && tr->gemm > 0 ? tr->gemm : flops;
	if (measured)
		*measured = tr->gemv > 0 && !opt;
}

/* The routed experts of a mixture-of-experts layer at T rows (each row
 * routed to experts_used of the layer's experts, uniform and independent,
 * as src/plan/experts.c takes them): the share of their bytes a pass
 * reads (the experts called at least once) and of their elements each
 * row multiplies (its own experts). 1 and 1 where the model says no
 * routing. */
static void routed_shares(const strata_plan *p, double T, double *read,
			  double *rows)
{
	double e = (double)p->arch.experts, k = (double)p->arch.experts_used;
	if (!p->arch.known || !(e > 0) || !(k > 0) || k >= e) {
		*read = *rows = 1.0;
		return;
	}
	*read = 1.0 - pow(1.0 - k / e, T < 1.0 ? 1.0 : T);
	*rows = k / e;
}

/* Experts a MoE layer calls in a pass of T rows. */
static double called_experts(const strata_plan *p, double T)
{
	double read, rows;
	routed_shares(p, T, &read, &rows);
	return rows < 1.0 ? read * (double)p->arch.experts : 0.0;
}

/* Type t's decode-layer rate on the CPU where it prices units of t: on
 * the CPU tier (cpu) or a cpu device, measured, no option overriding
 * the memory rate; else 0. */
static double layer_rate(const strata_plan *p, bool cpu, strata_block_type t)
{
	const strata_plan_options *o = &p->options;
	bool on_cpu = cpu || o->device == STRATA_PLAN_DEVICE_CPU;
	bool opt = from_option(p, cpu ? STRATA_PLAN_RATE_HOST_MEMORY
				      : STRATA_PLAN_RATE_MEMORY);
	return on_cpu && !opt && o->cpu_layer[t] > 0 ? o->cpu_layer[t] : 0.0;
}

/* Seconds of the fixed costs of `units` device layers (resident or
 * streamed) holding `bytes` by type, at T rows: per unit the sum over
 * types t of (B_t / B) (L_t + R_t T), with L_t and R_t the seconds type
 * t's whole layer took beyond its products, per decode step and per
 * prefill row (strata calibrate, calibrate_layer.c), else the options'
 * device_layer_seconds / device_row_seconds. A type whose units the
 * CPU's decode-layer rate prices (a cpu device) has L_t inside that rate:
 * 0 here. *covered: every type's L_t is known (measured, a fallback > 0,
 * or in the layer rate); when not, the L terms are left out, and the
 * caller keeps counting kernels at the kernel cost. */
static double layer_fixed(const strata_plan *p, const uint64_t *bytes,
			  uint64_t units, double T, bool *covered)
{
	const strata_plan_options *o = &p->options;
	bool dev_is_cpu = o->device == STRATA_PLAN_DEVICE_CPU;
	double total = 0, with_l = 0, rows = 0;
	bool all = true;
	for (uint32_t k = 0; k < p->type_count; k++) {
		if (!bytes[k])
			continue;
		strata_block_type t = p->type_of[k];
		const strata_plan_type_rate *tr = dev_is_cpu ? &o->cpu_types[t]
							     : &o->device_types[t];
		double b = (double)bytes[k];
		double l = tr->layer_seconds > 0 ? tr->layer_seconds
						 : o->device_layer_seconds;
		double r = tr->row_seconds > 0 ? tr->row_seconds
					       : o->device_row_seconds;
		if (layer_rate(p, false, t) > 0)
			l = 0; /* in the layer rate */
		else if (!(l > 0))
			all = false;
		total += b;
		with_l += b * l;
		rows += b * r * T;
	}
	*covered = all;
	if (!(total > 0) || !units)
		return 0.0;
	return (double)units * ((all ? with_l : 0.0) + rows) / total;
}

/* Seconds of the products over `bytes` (by p's type index) at T rows on
 * one tier: each type's max(bytes / gemv, 2 E T / gemm), E its elements
 * (the roofline of one weight read, T rows multiplied), the routed
 * experts' part of them (`xbytes`, NULL: none) at the share of their
 * bytes the pass reads and of their elements a row multiplies. Units'
 * bytes on the CPU (`layers`) take the type's measured decode-layer rate
 * for gemv where strata calibrate gave one (and no option overrides the
 * CPU's memory rate): it holds the layer's kernels' fixed costs, so
 * *fixed_in (when not NULL) says every type had one. */
static double priced(const strata_plan *p, bool cpu, const uint64_t *bytes,
		     const uint64_t *xbytes, double T, bool layers,
		     bool *fixed_in)
{
	double read, rows;
	routed_shares(p, T, &read, &rows);
	double s = 0;
	bool all = true;
	for (uint32_t k = 0; k < p->type_count; k++) {
		if (!bytes[k])
			continue;
		strata_block_type t = p->type_of[k];
		double gemv, gemm;
		strata__plan_type_rates(p, cpu, t, &gemv, &gemm, NULL);
		double layer = layer_rate(p, cpu, t);
		if (layers && layer > 0)
			gemv = layer;
		else
			all = false;
		double per = strata_block_elements(t) /
			     (double)strata_block_bytes(t);
		double x = xbytes ? (double)xbytes[k] : 0.0;
		double b = (double)bytes[k] - x;
		s += max2(b / gemv, 2.0 * b * per * T / gemm);
		if (x > 0)
			s += max2(x * read / gemv, 2.0 * x * per * rows * T / gemm);
	}
	if (fixed_in)
		*fixed_in = all;
	return s;
}

/* ------------------------------------------------------------------------ */
/* A split's bytes                                                          */
/* ------------------------------------------------------------------------ */

void strata__plan_split_add(const strata_plan *p, strata__plan_split *b,
			    size_t i, strata_place where)
{
	uint64_t *into = where == STRATA_PLACE_RESIDENT ? b->res
			 : where == STRATA_PLACE_CPU	? b->cpu
							: b->str;
	uint64_t *into_x = where == STRATA_PLACE_RESIDENT ? b->res_x
			   : where == STRATA_PLACE_CPU	 ? b->cpu_x
							 : b->str_x;
	const uint64_t *types = p->unit_types + i * p->type_count;
	const uint64_t *xtypes = p->unit_expert_types + i * p->type_count;
	bool moe = false;
	for (uint32_t k = 0; k < p->type_count; k++) {
		into[k] = strata_sat_add_u64(into[k], types[k]);
		into_x[k] = strata_sat_add_u64(into_x[k], xtypes[k]);
		moe |= xtypes[k] > 0;
	}
	if (moe)
		(*(where == STRATA_PLACE_RESIDENT ? &b->res_moe
		   : where == STRATA_PLACE_CPU	  ? &b->cpu_moe
						  : &b->str_moe))++;
	uint64_t bytes = p->unit_bytes[i];
	switch (where) {
	case STRATA_PLACE_RESIDENT:
		b->res_units++;
		break;
	case STRATA_PLACE_CPU:
		b->cpu_units++;
		b->cpu_bytes = strata_sat_add_u64(b->cpu_bytes, bytes);
		break;
	default:
		if (!b->str_units)
			b->first_streamed = bytes;
		b->str_units++;
		b->streamed = strata_sat_add_u64(b->streamed, bytes);
		break;
	}
	bool on_cpu = where == STRATA_PLACE_CPU;
	if (b->started && on_cpu != b->last_cpu)
		b->changes++;
	if (!b->started && on_cpu != b->statics_cpu)
		b->changes++; /* from the embedding's site */
	b->started = true;
	b->last_cpu = on_cpu;
}

void strata__plan_split_end(strata__plan_split *b)
{
	if (b->started && b->last_cpu != b->statics_cpu)
		b->changes++; /* to the head's site */
}

/* ------------------------------------------------------------------------ */
/* A pass                                                                   */
/* ------------------------------------------------------------------------ */

/* Seconds of the statics: the embedding is a row lookup and the LM head
 * computes each sequence's last row only (forward.c head_in_place), so a
 * pass of any chunk pays what a decode step does: their products at B
 * rows on their tier, and two kernels (the final norm and the head). */
static double statics_seconds(const strata_plan *p, bool cpu)
{
	double B = (double)p->options.shape.batch;
	double s = priced(p, cpu, p->static_types, NULL, B, false, NULL);
	if (cpu || p->options.device == STRATA_PLAN_DEVICE_CPU)
		s += 2.0 * p->options.cpu_launch_seconds;
	return s;
}

/* Bytes a pass of T rows reads from host memory: the CPU units' weights
 * (of their experts the routed ones) and KV, the statics' products where
 * they sit on the CPU, the streamed bytes. */
static double host_read_bytes(const strata_plan *p,
			      const strata__plan_split *b, double T)
{
	double read, rows;
	routed_shares(p, T, &read, &rows);
	double s = (double)b->kv_cpu + (double)b->streamed;
	for (uint32_t k = 0; k < p->type_count; k++)
		s += (double)(b->cpu[k] - b->cpu_x[k]) + read * (double)b->cpu_x[k];
	if (b->statics_cpu)
		for (uint32_t k = 0; k < p->type_count; k++)
			s += (double)p->static_types[k];
	return s;
}

void strata__plan_cost(const strata_plan *p, const strata_plan_candidate *c,
		       const strata__plan_split *b, double T,
		       strata_plan_cost *out)
{
	const strata_plan_options *o = &p->options;
	bool cuda = o->device == STRATA_PLAN_DEVICE_CUDA;
	double M = o->memory_bandwidth, H = o->host_memory_bandwidth;
	bool cpu_fixed;
	double res = priced(p, false, b->res, b->res_x, T, true, NULL) +
		     (double)b->kv_res / M;
	double str = priced(p, false, b->str, b->str_x, T, true, NULL) +
		     (double)b->kv_str / M;
	double cpu = priced(p, true, b->cpu, b->cpu_x, T, true, &cpu_fixed) +
		     (double)b->kv_cpu / H;
	/* the CPU computing while the link streams: both at the rates
	 * strata calibrate measured them at together (one host memory) */
	bool shared = cuda && b->cpu_units && b->streamed &&
		      c->mode == STRATA_RESIDENCY_PLACEMENT;
	double Hs = o->host_memory_shared_bandwidth,
	       Ls = o->h2d_shared_bandwidth;
	if (shared && Hs > 0 && Hs < H)
		cpu *= H / Hs;
	double stat = statics_seconds(p, b->statics_cpu);
	double K = STRATA_PLAN_KERNELS_PER_UNIT;
	/* kernels on the CPU's pool add their fixed cost, unless the
	 * layer rate that priced them holds it; a device's launches queue
	 * behind its kernels, a floor on its time */
	double over = cpu_fixed ? 0.0
				: (double)b->cpu_units * K * o->cpu_launch_seconds;
	double dev_units = (double)(b->res_units + b->str_units);
	/* a MoE layer runs each expert it calls as its own kernels (gather,
	 * gate/up, down; on a device also the scatter-add), and on a device
	 * waits for its router's logits to come back (forward_moe.c) */
	double called = called_experts(p, T);
	double dev_moe = (double)(b->res_moe + b->str_moe);
	over += (double)b->cpu_moe * called * 3.0 * o->cpu_launch_seconds;
	/* a device layer's kernels that are not its weights' products
	 * (norms, rope, the KV write, attention, x's quantization, the gaps
	 * between launches), as strata calibrate timed a whole layer */
	bool res_cov, str_cov;
	double lay = layer_fixed(p, b->res, b->res_units, T, &res_cov) +
		     layer_fixed(p, b->str, b->str_units, T, &str_cov);
	over += lay;
	if (cuda)
		over += max2(0.0, (dev_units * K + dev_moe * called * 4.0) *
					  o->device_launch_seconds -
					  (res + str + lay)) +
			dev_moe * o->crossing_seconds / 2.0;
	else if (!(res_cov && str_cov))
		over += (dev_units * K + dev_moe * called * 3.0) *
			o->cpu_launch_seconds;
	else
		over += dev_moe * called * 3.0 * o->cpu_launch_seconds;
	if (cuda)
		over += (double)b->changes * o->crossing_seconds / 2.0;
	double link = (double)b->streamed /
		      (shared && Ls > 0 ? Ls : o->h2d_bandwidth);
	double chain = res + str + cpu + stat + over;
	bool prefetch = true, disk = false;
	if (c->mode == STRATA_RESIDENCY_DISK) {
		uint64_t f = p->info.unit_file_bytes ? p->info.unit_file_bytes
						     : b->streamed;
		double d = c->lookahead >= p->info.occupied_units
				   ? 0.0 : (double)f / o->disk_bandwidth;
		if (c->lookahead == 0) { /* direct: no background reads */
			link = (double)f / o->disk_bandwidth;
			prefetch = false;
		} else if (d > link) {
			link = d;
		}
		disk = d >= link;
	}
	/* a window of one unit cannot copy the next while computing; on
	 * cpu the window's copies and the compute read the same RAM */
	if ((c->mode == STRATA_RESIDENCY_HOST && c->weights.depth < 2) ||
	    !cuda)
		prefetch = false;
	double ceiling = max2(max2(H, o->h2d_bandwidth),
			      Hs > 0 && Ls > 0 ? Hs + Ls : 0.0);
	double host = cuda ? host_read_bytes(p, b, T) / ceiling : 0.0;
	/* A prompt's pass starts with an empty window. Bound by its chain,
	 * it waits for its first streamed unit's copy, less what the
	 * resident units before it compute meanwhile (the fill). Bound by
	 * the link, its copies run back to back from its first acquire,
	 * and what follows the last one overlaps nothing: that unit's
	 * compute and the statics (the head: on the CPU, 1.3 ms for a 131 MB
	 * Q8_0 head). Traced on the H200, a Q8_0 prompt under 2 GiB (r6 c7
	 * w3): the link busy 42.3 ms back to back, then 3.2 ms of its last
	 * unit and the head. Left out: the 2.65 ms before the first acquire
	 * (the embedding on the CPU and its crossing), which the first
	 * copies do not overlap: started before it, they held the crossing
	 * up behind them on the link and the prompt took 5.7 ms longer.
	 * Decode steps keep max(): their copies run beside the CPU units at
	 * the shared rate, an average over the step that holds its ends. */
	double fill = 0.0, tail = 0.0;
	if (prefetch && b->cold_window && b->first_streamed) {
		fill = max2(0.0, (double)b->first_streamed / o->h2d_bandwidth -
					 res);
		tail = str / (double)b->str_units + stat;
	}
	/* both 0 outside a prompt: max(link, chain, host) */
	double paced = link + tail, chained = chain + fill;
	double total = prefetch ? max2(max2(paced, chained), host)
				: link + chain;
	*out = (strata_plan_cost){
		.resident_ms = res * 1e3,
		.streamed_ms = str * 1e3,
		.cpu_ms = cpu * 1e3,
		.statics_ms = stat * 1e3,
		.link_ms = link * 1e3,
		.overhead_ms = over * 1e3,
		.host_memory_ms = host * 1e3,
		.window_fill_ms = fill * 1e3,
		.link_tail_ms = tail * 1e3,
		.total_ms = total * 1e3,
		.crossings = cuda ? b->changes : 0,
	};
	double dev_share = res + str + (b->statics_cpu ? 0.0 : stat);
	double cpu_share = cpu + (b->statics_cpu ? stat : 0.0);
	if (prefetch && host > paced && host > chained)
		out->bound = STRATA_PLAN_BOUND_HOST_MEMORY;
	else if (prefetch && paced > chained)
		out->bound = disk ? STRATA_PLAN_BOUND_DISK : STRATA_PLAN_BOUND_LINK;
	else
		out->bound = dev_share >= cpu_share ? STRATA_PLAN_BOUND_DEVICE
						    : STRATA_PLAN_BOUND_CPU;
}

const char *strata_plan_bound_name(strata_plan_bound b)
{
	switch (b) {
#define STRATA_PLAN_BOUND_CASE(name, text)                                     \
	case STRATA_PLAN_BOUND_##name:                                         \
		return text;
		STRATA_PLAN_BOUND_MAP(STRATA_PLAN_BOUND_CASE)
#undef STRATA_PLAN_BOUND_CASE
	}
	return "unknown";
}
