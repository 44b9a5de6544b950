/* test_cost.c - the cost model of a pass (src/plan/cost.c, docs/plan.md
 * "Cost model"): each stored type priced at its own measured rate on the
 * processor computing it, streamed compute overlapping the link, the
 * fixed costs of kernels and crossings, and the terms each candidate
 * reports. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "strata/plan.h"
#include "planner_fixture.h"

/* 8 layers of 4 MiB, the first four Q8_0 and the rest F32, a 1 MiB
 * embedding and a 1 MiB output head (both F32). */
static fixture *typed_make(void)
{
	fixture *f = calloc(1, sizeof *f);
	add_param(f, "model.embed_tokens.weight", 1 * MiB);
	add_param(f, "lm_head.weight", 1 * MiB);
	for (size_t l = 0; l < 8; l++) {
		char name[48];
		snprintf(name, sizeof name, "model.layers.%zu.mlp.weight", l);
		add_param(f, name, 4 * MiB);
		f->params[f->n - 1].type = l < 4 ? STRATA_BLOCK_Q8_0
						 : STRATA_BLOCK_F32;
	}
	strata_error err;
	assert_int_equal(strata_plan_layout_create(f->params, f->n,
						   fixture_bytes, f, NULL, 0,
						   &f->layout, &err),
			 STRATA_OK);
	f->arch = (strata_plan_arch){.known = true, .family = "llama",
				     .layers = 8, .hidden = 64,
				     .intermediate = 128, .heads = 4,
				     .kv_heads = 2, .head_dim = 16,
				     .vocab = 100, .max_context = 512};
	return f;
}

static strata_plan_options cuda_opts(void)
{
	strata_plan_options o = opts(GiB, GiB);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	o.h2d_bandwidth = 50e9;
	o.host_memory_bandwidth = 100e9;
	o.memory_bandwidth = 4e12;
	o.device_flops = 100e12;
	o.cpu_flops = 1e12;
	o.cpu_launch_seconds = o.device_launch_seconds = 1e-15;
	o.crossing_seconds = 1e-15;
	o.device_layer_seconds = o.device_row_seconds = 1e-15;
	o.mixed_placements = true;
	/* the rates as if strata calibrate had measured them (the file's
	 * bits): a tier's rates an option gives are every type's */
	o.calibrated_rates = ~0u;
	return o;
}

/* Forces the placement rR cC, the rest streamed (--resident-units R
 * --cpu-units C). */
static void force_units(strata_plan_options *o, uint64_t resident,
			uint64_t cpu)
{
	o->has_resident_units = o->has_cpu_units = true;
	o->resident_units = resident;
	o->cpu_units = cpu;
}

/* Type t's CPU rate as strata calibrate measured it (its file's bit). */
static void cpu_rate(strata_plan_options *o, strata_block_type t,
		     strata_plan_type_rate r)
{
	o->cpu_types[t] = r;
	o->calibrated_cpu_types |= 1u << t;
}

/* Every type's CPU rate measured, all at r. */
static void cpu_rate_all(strata_plan_options *o, strata_plan_type_rate r)
{
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++)
		o->cpu_types[t] = r;
	o->calibrated_cpu_types = ~0u;
}

static strata_plan *plan_of(const fixture *f, const strata_plan_options *o)
{
	strata_plan *p = NULL;
	strata_error err;
	if (strata_plan_create(f->layout, &f->arch, STRATA_DTYPE_F32, o,
			       &no_machine, &p, &err) != STRATA_OK)
		fail_msg("%s / %s", err.message, err.fix);
	return p;
}

/* The placement candidate with the statics where asked, or NULL. */
static const strata_plan_candidate *placement(const strata_plan *p,
					      bool statics_cpu)
{
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, i);
		if (c->mode == STRATA_RESIDENCY_PLACEMENT &&
		    c->statics_on_cpu == statics_cpu)
			return c;
	}
	return NULL;
}

static void near_at(double got, double want, int line)
{
	if (fabs(got - want) > 1e-9 + 1e-9 * fabs(want))
		fail_msg("line %d: %.12f, expected %.12f", line, got, want);
}
#define near(got, want) near_at((got), (want), __LINE__)

static const char *explanation(const strata_plan *p, strata_explain code,
			       const char *with)
{
	for (size_t i = 0; i < strata_plan_explanation_count(p); i++) {
		const strata_plan_explanation *e = strata_plan_explanation_at(p, i);
		if (e->code == code && (!with || strstr(e->text, with)))
			return e->text;
	}
	return NULL;
}

/* Every unit on the CPU: its Q8_0 units at the CPU's measured Q8_0 rate,
 * its F32 units at the host memory rate (none measured for F32), and the
 * plan names F32 as the type that took the fallback. */
static void each_type_is_priced_at_its_own_rate(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	cpu_rate(&o, STRATA_BLOCK_Q8_0, (strata_plan_type_rate){.gemv = 25e9, .gemm = 0.5e12});
	force_units(&o, 0, 8);
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = placement(p, false);
	assert_non_null(c);
	assert_int_equal(c->cpu_units, 8);
	double q8 = 4.0 * 4 * MiB / 25e9, f32 = 4.0 * 4 * MiB / 100e9;
	double kv = (double)KV_CPU / 100e9;
	near(c->decode_cost.cpu_ms, (q8 + f32 + kv) * 1e3);
	assert_true(c->decode_cost.resident_ms == 0 &&
		    c->decode_cost.streamed_ms == 0 &&
		    c->decode_cost.link_ms == 0);
	/* the statics: the head only (the embedding is a lookup), at B = 1
	 * row on the device, where it is memory bound */
	near(c->decode_cost.statics_ms, 1.0 * MiB / 4e12 * 1e3);
	assert_int_equal(c->decode_cost.bound, STRATA_PLAN_BOUND_CPU);
	near(c->decode_cost.total_ms,
	     c->decode_cost.cpu_ms + c->decode_cost.statics_ms +
		     c->decode_cost.overhead_ms);
	const char *t = explanation(p, STRATA_EXPLAIN_RATES_TYPE_DEFAULT, "CPU");
	assert_non_null(t);
	assert_non_null(strstr(t, "F32"));
	assert_null(strstr(t, "Q8_0"));
	/* a slower measured rate makes exactly that share slower */
	strata_plan_destroy(p);
	o.cpu_types[STRATA_BLOCK_Q8_0].gemv = 12.5e9;
	p = plan_of(f, &o);
	c = placement(p, false);
	near(c->decode_cost.cpu_ms, (2 * q8 + f32 + kv) * 1e3);
	/* an option's host memory rate prices every type on the CPU */
	strata_plan_destroy(p);
	o.calibrated_rates &= ~(1u << STRATA_PLAN_RATE_HOST_MEMORY);
	p = plan_of(f, &o);
	c = placement(p, false);
	near(c->decode_cost.cpu_ms, (2 * f32 + kv) * 1e3);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* CPU units are priced at their type's measured decode-layer rate, which
 * holds the layer's kernel costs (no per-kernel overhead added); a type
 * without one keeps its GEMV rate and the overhead; an option's host
 * memory rate still prices every type. */
static void cpu_units_take_the_layer_rate(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	o.cpu_launch_seconds = 1e-6;
	cpu_rate(&o, STRATA_BLOCK_Q8_0, (strata_plan_type_rate){.gemv = 25e9, .gemm = 0.5e12});
	o.cpu_layer[STRATA_BLOCK_Q8_0] = 20e9;
	force_units(&o, 0, 8);
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = placement(p, false);
	assert_non_null(c);
	double q8 = 4.0 * 4 * MiB / 20e9, f32 = 4.0 * 4 * MiB / 100e9;
	double kv = (double)KV_CPU / 100e9;
	near(c->decode_cost.cpu_ms, (q8 + f32 + kv) * 1e3);
	near(c->decode_cost.overhead_ms,
	     8.0 * STRATA_PLAN_KERNELS_PER_UNIT * 1e-6 * 1e3);
	strata_plan_destroy(p);
	/* every type with a layer rate: the kernels' cost is in it */
	cpu_rate(&o, STRATA_BLOCK_F32, (strata_plan_type_rate){.gemv = 90e9, .gemm = 1e12});
	o.cpu_layer[STRATA_BLOCK_F32] = 50e9;
	p = plan_of(f, &o);
	c = placement(p, false);
	near(c->decode_cost.cpu_ms,
	     (q8 + 4.0 * 4 * MiB / 50e9 + kv) * 1e3);
	near(c->decode_cost.overhead_ms, 0.0);
	strata_plan_destroy(p);
	/* --host-memory-bandwidth: every CPU type at that rate, as before */
	o.calibrated_rates &= ~(1u << STRATA_PLAN_RATE_HOST_MEMORY);
	p = plan_of(f, &o);
	c = placement(p, false);
	near(c->decode_cost.cpu_ms, (2 * f32 + kv) * 1e3);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* A streamed unit's compute overlaps the copy of the next: a prompt pass
 * of host:2 takes max(link, compute), of host:1 their sum; a prompt's
 * products run at the type's dense rate (the tensor-core path's for a
 * half type), not the f32 product's. */
static void streamed_compute_overlaps_the_link(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	o.shape.prefill_chunk = 128;
	o.device_types[STRATA_BLOCK_F32] = (strata_plan_type_rate){.gemv = 3e12, .gemm = 2e12};
	o.device_types[STRATA_BLOCK_Q8_0] = (strata_plan_type_rate){.gemv = 1e12, .gemm = 1e12};
	o.calibrated_device_types = 1u << STRATA_BLOCK_F32 |
				    1u << STRATA_BLOCK_Q8_0;
	o.mode = STRATA_RESIDENCY_HOST;
	for (uint64_t depth = 1; depth <= 2; depth++) {
		o.host_depth = depth;
		strata_plan *p = plan_of(f, &o);
		const strata_plan_candidate *c = NULL;
		for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
			const strata_plan_candidate *k =
				strata_plan_candidate_at(p, i);
			if (k->mode == STRATA_RESIDENCY_HOST &&
			    k->weights.depth == depth)
				c = k;
		}
		assert_non_null(c);
		const strata_plan_cost *k = &c->prefill_cost;
		/* elements: 4 MiB of F32 is 1 Mi elements a unit, of Q8_0
		 * 4 MiB x 32 / 34 */
		double T = 128, e32 = 4.0 * MiB / 4, e8 = 4.0 * MiB * 32 / 34;
		double compute = 4 * (2 * e32 * T / 2e12 + 2 * e8 * T / 1e12);
		double kv = (double)KV_CPU / 4e12;
		near(k->streamed_ms, (compute + kv) * 1e3);
		near(k->link_ms, 32.0 * MiB / 50e9 * 1e3);
		double chain = k->streamed_ms + k->statics_ms + k->overhead_ms;
		if (depth == 1) {
			near(k->total_ms, chain + k->link_ms);
		} else {
			near(k->total_ms, fmax(chain, k->link_ms));
			assert_int_equal(k->bound, chain > k->link_ms
							   ? STRATA_PLAN_BOUND_DEVICE
							   : STRATA_PLAN_BOUND_LINK);
		}
		strata_plan_destroy(p);
	}
	fixture_free(f);
}

/* The CPU's reads and the link's copies share one host memory. r0 c4 w4
 * (statics on the device), a CPU computing at 80 GB/s alone of a host
 * memory of 100, a 50 GB/s link; together (calibrate's shared rates) the
 * CPU reads at 40 and the link at 25: the CPU units take twice as long,
 * the link 16 MiB / 25 GB/s, and the pass at least the 32 MiB both read
 * over 100 GB/s (the most the memory gave: alone to the CPU). */
static void cpu_and_link_share_host_memory(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	cpu_rate_all(&o, (strata_plan_type_rate){.gemv = 80e9, .gemm = 1e12});
	force_units(&o, 0, 4);
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = placement(p, false);
	assert_non_null(c);
	double alone = c->decode_cost.cpu_ms;
	near(c->decode_cost.link_ms, 16.0 * MiB / 50e9 * 1e3);
	strata_plan_destroy(p);
	o.host_memory_shared_bandwidth = 40e9;
	o.h2d_shared_bandwidth = 25e9;
	p = plan_of(f, &o);
	c = placement(p, false);
	const strata_plan_cost *k = &c->decode_cost;
	near(k->cpu_ms, alone * 100e9 / 40e9);
	near(k->link_ms, 16.0 * MiB / 25e9 * 1e3);
	double read = 32.0 * MiB + (double)KV_CPU / 2; /* 4 layers of 8 */
	near(k->host_memory_ms, read / 100e9 * 1e3);
	assert_int_equal(k->bound, STRATA_PLAN_BOUND_LINK);
	strata_plan_destroy(p);
	/* a memory that gave the two together less than the CPU alone
	 * would bound the pass: both read at 20 + 10 GB/s, alone 30 */
	o.host_memory_bandwidth = 30e9;
	o.host_memory_shared_bandwidth = 20e9;
	o.h2d_shared_bandwidth = 10e9;
	cpu_rate_all(&o, (strata_plan_type_rate){.gemv = 300e9, .gemm = 1e12});
	p = plan_of(f, &o);
	c = placement(p, false);
	k = &c->decode_cost;
	near(k->host_memory_ms, read / 50e9 * 1e3); /* the link alone */
	near(k->link_ms, 16.0 * MiB / 10e9 * 1e3);
	assert_true(k->total_ms >= k->host_memory_ms);
	strata_plan_destroy(p);
	/* the units all on the CPU stream nothing: no sharing */
	o = cuda_opts();
	o.host_memory_shared_bandwidth = 40e9;
	o.h2d_shared_bandwidth = 25e9;
	cpu_rate_all(&o, (strata_plan_type_rate){.gemv = 80e9, .gemm = 1e12});
	force_units(&o, 0, 8);
	p = plan_of(f, &o);
	c = placement(p, false);
	near(c->decode_cost.cpu_ms, 2 * alone);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* A prompt finds the window empty (switching from decode's split drops
 * it): r2 c0 w6. Bound by its chain, the prefill waits for its first
 * streamed unit's copy (4 MiB over 50 GB/s) less the two resident units'
 * compute; bound by the link, its last streamed unit's compute and the
 * statics follow the last copy. A decode step keeps max() and neither. */
static void prefill_fills_an_empty_window(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	force_units(&o, 2, 0);
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = placement(p, false);
	assert_non_null(c);
	assert_int_equal(c->prefill_window_units, 6);
	const strata_plan_cost *k = &c->prefill_cost;
	near(k->window_fill_ms,
	     fmax(0.0, 4.0 * MiB / 50e9 * 1e3 - k->resident_ms));
	assert_true(k->window_fill_ms > 0);
	near(k->link_tail_ms, k->streamed_ms / 6.0 + k->statics_ms);
	assert_true(k->link_tail_ms > 0);
	double chain = k->resident_ms + k->streamed_ms + k->cpu_ms +
		       k->statics_ms + k->overhead_ms;
	near(k->total_ms, fmax(fmax(k->link_ms + k->link_tail_ms,
				    chain + k->window_fill_ms),
			       k->host_memory_ms));
	/* the fixture's prompt is bound by one of the two, as said */
	assert_true(k->bound == STRATA_PLAN_BOUND_LINK
			    ? k->link_ms + k->link_tail_ms >=
				      chain + k->window_fill_ms
			    : k->link_ms + k->link_tail_ms <=
				      chain + k->window_fill_ms);
	near(c->decode_cost.window_fill_ms, 0.0);
	near(c->decode_cost.link_tail_ms, 0.0);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* The fixed costs: each CPU unit's kernels on the pool, and each change
 * of site of the residual stream (half a measured round trip). r2 c3 w3
 * with the statics on the device runs R R C W C W C W: six changes. */
static void fixed_costs_count_kernels_and_crossings(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	o.crossing_seconds = 1e-3;
	o.cpu_launch_seconds = 1e-4;
	force_units(&o, 2, 3);
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = placement(p, false);
	assert_non_null(c);
	assert_true(c->resident_units == 2 && c->cpu_units == 3 &&
		    c->window_units == 3);
	assert_int_equal(c->decode_cost.crossings, 6);
	near(c->decode_cost.overhead_ms,
	     (6 * 1e-3 / 2 + 3.0 * STRATA_PLAN_KERNELS_PER_UNIT * 1e-4) * 1e3);
	/* with the statics on the CPU the stream starts and ends there */
	const strata_plan_candidate *s = placement(p, true);
	assert_non_null(s);
	assert_int_equal(s->decode_cost.crossings, 8); /* S R R ... W S */
	/* a device's launches are a floor under its compute, not added */
	strata_plan_destroy(p);
	o.crossing_seconds = 1e-15;
	o.cpu_launch_seconds = 1e-15;
	o.device_launch_seconds = 1.0;
	force_units(&o, 8, 0);
	p = plan_of(f, &o);
	c = placement(p, true);
	assert_non_null(c);
	const strata_plan_cost *k = &c->decode_cost;
	near(k->resident_ms + k->overhead_ms,
	     8.0 * STRATA_PLAN_KERNELS_PER_UNIT * 1e3);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* The selected candidate's terms are explained, and a uniform mode's
 * terms are its decode and prefill predictions. */
static void terms_are_reported_and_add_up(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	o.has_device_budget = true;
	o.device_budget_bytes = 20 * MiB;
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *sel = strata_plan_selected(p);
	assert_non_null(sel);
	assert_non_null(explanation(p, STRATA_EXPLAIN_PREDICTION_TERMS,
				    "decode"));
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, i);
		near(c->decode_cost.total_ms, c->predicted_decode_ms);
		near(c->prefill_cost.total_ms, c->predicted_prefill_ms);
		const strata_plan_cost *k = &c->decode_cost;
		double chain = k->resident_ms + k->streamed_ms + k->cpu_ms +
			       k->statics_ms + k->overhead_ms;
		assert_true(k->total_ms >= chain - 1e-9 &&
			    k->total_ms >= k->link_ms - 1e-9);
		assert_true(k->total_ms <= chain + k->link_ms + 1e-9);
	}
	strata_plan_destroy(p);
	fixture_free(f);
}

/* On CUDA the residency engine loads what the device holds through one
 * pinned buffer of the largest unit (any unit resident), at least the
 * largest static tensor, while the host tier already holds the statics
 * on the CPU: the plan's host total counts it (issue 17: a Q8_0 run's
 * host peak was the statics plus that buffer, 510 MB, against a plan of
 * 409 MB without it). */
static void cuda_counts_the_load_staging(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	force_units(&o, 8, 0);
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = placement(p, true);
	assert_non_null(c);
	assert_int_equal(c->staging_bytes, 4 * MiB);
	const strata_plan_memory *m = strata_plan_get_memory(p);
	assert_int_equal(c->host_bytes, 2 * MiB + 4 * MiB + m->workspace_bytes);
	strata_plan_destroy(p);
	/* nothing resident, nothing streamed: the largest static */
	force_units(&o, 0, 8);
	p = plan_of(f, &o);
	c = placement(p, false);
	assert_non_null(c);
	assert_int_equal(c->staging_bytes, 1 * MiB);
	strata_plan_destroy(p);
	/* on cpu the device is host memory: nothing is staged */
	o.device = STRATA_PLAN_DEVICE_CPU;
	p = plan_of(f, &o);
	c = placement(p, false);
	assert_non_null(c);
	assert_int_equal(c->staging_bytes, 0);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* ------------------------------------------------------------------------ */
/* A device layer's fixed costs (issue 17)                                  */
/* ------------------------------------------------------------------------ */

/* The resident candidate (every unit and the statics on the device),
 * prefill chunks of 64 rows: its decode and prefill totals, at layer
 * costs l and r (0: the plan's fallback). */
static void resident_totals(const fixture *f, strata_plan_options o, double l,
			    double r, double *decode, double *prefill)
{
	o.device_layer_seconds = l;
	o.device_row_seconds = r;
	o.shape.prefill_chunk = 64;
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = NULL;
	for (size_t i = 0; i < strata_plan_candidate_count(p) && !c; i++)
		if (strata_plan_candidate_at(p, i)->mode ==
		    STRATA_RESIDENCY_RESIDENT)
			c = strata_plan_candidate_at(p, i);
	assert_non_null(c);
	*decode = c->predicted_decode_ms;
	*prefill = c->predicted_prefill_ms;
	strata_plan_destroy(p);
}

/* On a device each layer adds its fixed costs to the chain: a decode
 * step L, a prefill chunk L + R x rows, exactly, per unit. */
static void device_layers_add_their_fixed_costs(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options o = cuda_opts();
	double d0, p0, d1, p1;
	resident_totals(f, o, 1e-15, 1e-15, &d0, &p0);
	resident_totals(f, o, 1e-3, 1e-5, &d1, &p1);
	near(d1 - d0, 8 * (1e-3 + 1e-5 * 1) * 1e3);
	near(p1 - p0, 8 * (1e-3 + 1e-5 * 64) * 1e3);
	/* a type's own measure wins over the fallback: the four Q8_0 units
	 * at 3 ms, the four F32 ones at the fallback's 1 ms */
	o.device_types[STRATA_BLOCK_Q8_0] = (strata_plan_type_rate){
		.gemv = 1e12, .gemm = 1e12, .layer_seconds = 3e-3,
		.row_seconds = 1e-15};
	o.device_types[STRATA_BLOCK_F32] =
		(strata_plan_type_rate){.gemv = 1e12, .gemm = 1e12};
	resident_totals(f, o, 1e-15, 1e-15, &d0, &p0);
	resident_totals(f, o, 1e-3, 1e-15, &d1, &p1);
	near(d1 - d0, 4 * 1e-3 * 1e3);
	double d2, p2;
	o.device_types[STRATA_BLOCK_Q8_0].layer_seconds = 1e-15;
	resident_totals(f, o, 1e-15, 1e-15, &d2, &p2);
	near(d0 - d2, 4 * 3e-3 * 1e3);
	fixture_free(f);
}

/* The options' rates of a rates file (written, read, applied). */
static strata_plan_options with_file(strata_plan_options o, const char *text)
{
	char path[] = "/tmp/strata-cost-rates-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *fp = fdopen(fd, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	strata_plan_rates r;
	bool found = false;
	strata_error err;
	strata_status s = strata_plan_rates_load(path, &r, &found, &err);
	unlink(path);
	if (s != STRATA_OK)
		fail_msg("%s / %s", err.message, err.fix);
	strata_plan_rates_apply(&r, 0, &o);
	return o;
}

#define HOST_RATES(types)                                                      \
	"{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": " \
	"1e10, \"cpu_flops\": 1e11, \"threads\": 2, \"gemm_rows\": 64, "        \
	"\"launch_seconds\": 1e-5, \"types\": {" types "}}, \"devices\": ["
#define TYPE_RATES(name, extra)                                                \
	"\"" name "\": {\"gemv_bytes_per_second\": 1e10, \"gemm_flops\": 1e11" \
	extra "}"
#define CUDA0                                                                  \
	"{\"device\": \"cuda:0\", \"h2d_bytes_per_second\": 5e10, "            \
	"\"d2h_bytes_per_second\": 5e10, \"memory_bytes_per_second\": 4e12, "  \
	"\"device_flops\": 1e14, \"launch_seconds\": 1e-15, "                  \
	"\"crossing_seconds\": 1e-15, \"types\": {\"F32\": "                   \
	"{\"gemv_bytes_per_second\": 3e12, \"gemm_flops\": 1e14}, \"Q8_0\": "  \
	"{\"gemv_bytes_per_second\": 2e12, \"gemm_flops\": 2e14"

/* On a cpu device (the CI's) a rates file's fixed layer costs move the
 * predictions by exactly units x cost; a file without them (an earlier
 * strata's) keeps today's price: 6 kernels a unit at the kernel cost. */
static void a_rates_file_fixed_cost_moves_the_prediction(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options base = opts(GiB, GiB);
	base.mixed_placements = true;
	strata_plan_options a = with_file(base, HOST_RATES(
		TYPE_RATES("F32", ", \"layer_fixed_seconds\": 2e-4, "
				  "\"row_fixed_seconds\": 3e-6") ", "
		TYPE_RATES("Q8_0", ", \"layer_fixed_seconds\": 2e-4, "
				   "\"row_fixed_seconds\": 3e-6")) "]}");
	strata_plan_options b = with_file(base, HOST_RATES(
		TYPE_RATES("F32", ", \"layer_fixed_seconds\": 5e-4, "
				  "\"row_fixed_seconds\": 1e-6") ", "
		TYPE_RATES("Q8_0", ", \"layer_fixed_seconds\": 5e-4, "
				   "\"row_fixed_seconds\": 1e-6")) "]}");
	strata_plan_options old = with_file(base, HOST_RATES(
		TYPE_RATES("F32", "") ", " TYPE_RATES("Q8_0", "")) "]}");
	assert_true(a.cpu_types[STRATA_BLOCK_Q8_0].layer_seconds == 2e-4 &&
		    a.cpu_types[STRATA_BLOCK_Q8_0].row_seconds == 3e-6 &&
		    old.cpu_types[STRATA_BLOCK_Q8_0].layer_seconds == 0);
	double da, pa, db, pb, dold, pold;
	/* resident_totals sets the fallbacks: 0 leaves them to the plan
	 * (none on cpu) */
	resident_totals(f, a, 0, 0, &da, &pa);
	resident_totals(f, b, 0, 0, &db, &pb);
	resident_totals(f, old, 0, 0, &dold, &pold);
	near(db - da, 8 * ((5e-4 - 2e-4) + (1e-6 - 3e-6) * 1) * 1e3);
	near(pb - pa, 8 * ((5e-4 - 2e-4) + (1e-6 - 3e-6) * 64) * 1e3);
	near(dold - da, 8 * (STRATA_PLAN_KERNELS_PER_UNIT * 1e-5 -
			     (2e-4 + 3e-6)) * 1e3);
	fixture_free(f);
}

/* On cuda a file without the fixed costs takes the documented defaults
 * (STRATA_PLAN_DEFAULT_DEVICE_LAYER_S and _ROW_S), a type's measure
 * replaces them. */
static void old_files_take_the_device_defaults(void **state)
{
	(void)state;
	fixture *f = typed_make();
	strata_plan_options base = opts(GiB, GiB);
	base.device = STRATA_PLAN_DEVICE_CUDA;
	base.mixed_placements = true;
	strata_plan_options old = with_file(base, HOST_RATES(
		TYPE_RATES("F32", "")) CUDA0 "}}}]}");
	strata_plan_options got = with_file(base, HOST_RATES(
		TYPE_RATES("F32", "")) CUDA0 ", \"layer_fixed_seconds\": 1e-4, "
		"\"row_fixed_seconds\": 1e-6}}}]}");
	assert_true(got.device_types[STRATA_BLOCK_Q8_0].layer_seconds == 1e-4);
	double dold, pold, dgot, pgot;
	resident_totals(f, old, 0, 0, &dold, &pold);
	resident_totals(f, got, 0, 0, &dgot, &pgot);
	/* the four Q8_0 units differ; the F32 ones take the defaults in both */
	const double L = STRATA_PLAN_DEFAULT_DEVICE_LAYER_S,
		     R = STRATA_PLAN_DEFAULT_DEVICE_ROW_S;
	near(dold - dgot, 4 * ((L - 1e-4) + (R - 1e-6)) * 1e3);
	near(pold - pgot, 4 * ((L - 1e-4) + (R - 1e-6) * 64) * 1e3);
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(each_type_is_priced_at_its_own_rate),
		cmocka_unit_test(cpu_units_take_the_layer_rate),
		cmocka_unit_test(streamed_compute_overlaps_the_link),
		cmocka_unit_test(cpu_and_link_share_host_memory),
		cmocka_unit_test(prefill_fills_an_empty_window),
		cmocka_unit_test(fixed_costs_count_kernels_and_crossings),
		cmocka_unit_test(terms_are_reported_and_add_up),
		cmocka_unit_test(cuda_counts_the_load_staging),
		cmocka_unit_test(device_layers_add_their_fixed_costs),
		cmocka_unit_test(a_rates_file_fixed_cost_moves_the_prediction),
		cmocka_unit_test(old_files_take_the_device_defaults),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
