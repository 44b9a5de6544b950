/* test_cost_experts.c - what the plan prices for routed experts on the
 * CPU (src/plan/experts.c, docs/plan.md "Experts"): a decode step reads
 * its routed experts only; a prompt pass calls nearly every expert once;
 * the cache hits its share in decode (uniform, or the measured one given)
 * and, overflowed by a prompt's calls, nothing in a prompt, admitting its
 * misses; on cuda the device's hits and streamed experts overlap the
 * CPU's misses; the candidates' predictions carry the experts' time; and
 * a MoE layer kept in its unit (resident, streamed or on the CPU) reads
 * and multiplies its routed experts only (src/plan/cost.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/plan.h"
#include "planner_fixture.h"

#define EXPERT_BYTES (UINT64_C(9437184)) /* 3 x 768 x 2048 bf16 */
#define LAYERS 8
#define EXPERTS 128
#define USED 8

static void near_at(double got, double want, int line)
{
	if (fabs(got - want) > 1e-9 + 1e-9 * fabs(want))
		fail_msg("line %d: %.12f, expected %.12f", line, got, want);
}
#define near(got, want) near_at((got), (want), __LINE__)

/* Qwen3-30B-A3B's experts, 8 layers of them on the CPU, `slots` cached. */
static strata_plan_options moe_opts(strata_plan_device d, uint64_t slots)
{
	strata_plan_options o = opts(16 * GiB, 64 * GiB);
	o.device = d;
	o.h2d_bandwidth = 50e9;
	o.host_memory_bandwidth = 100e9;
	o.memory_bandwidth = 4e12;
	o.device_flops = 400e12;
	o.cpu_flops = 1e12;
	o.cpu_launch_seconds = 5e-6;
	o.device_launch_seconds = 4e-6;
	o.crossing_seconds = 40e-6;
	o.calibrated_rates = ~0u;
	o.experts = (strata_plan_experts){
		.layers = LAYERS, .experts = EXPERTS, .experts_used = USED,
		.expert_bytes = EXPERT_BYTES,
		.expert_elements = EXPERT_BYTES / 2,
		.host_bytes = LAYERS * EXPERTS * EXPERT_BYTES,
		.cache_slots = slots, .slot_bytes = EXPERT_BYTES,
		.cache_bytes = slots * EXPERT_BYTES,
		.type = STRATA_BLOCK_BF16};
	return o;
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

static strata_plan_experts_figures pass(const strata_plan_options *o,
					double rows, bool prefill)
{
	fixture *f = fixture_make(4);
	strata_plan *p = plan_of(f, o);
	strata_plan_experts_figures x;
	strata_plan_experts_pass(p, rows, prefill, &x);
	strata_plan_destroy(p);
	fixture_free(f);
	return x;
}

/* One row: experts_used experts a layer, each read once from host memory
 * at the CPU's rate, with its three kernels; one round trip a layer on
 * cuda, none on cpu. */
static void decode_reads_its_routed_experts_only(void **state)
{
	(void)state;
	strata_plan_options o = moe_opts(STRATA_PLAN_DEVICE_CUDA, 0);
	strata_plan_experts_figures x = pass(&o, 1.0, false);
	near(x.calls, LAYERS * USED);
	near(x.misses, LAYERS * USED);
	near(x.hits + x.streamed + x.admissions, 0);
	near(x.cpu_bytes, (double)LAYERS * USED * EXPERT_BYTES);
	double one = (double)EXPERT_BYTES / 100e9 + 3 * 5e-6;
	near(x.cpu_ms, LAYERS * USED * one * 1e3);
	near(x.sync_ms, LAYERS * 40e-6 * 1e3);
	near(x.total_ms, x.cpu_ms + x.sync_ms);
	o = moe_opts(STRATA_PLAN_DEVICE_CPU, 0);
	x = pass(&o, 1.0, false);
	near(x.sync_ms, 0);
	near(x.total_ms, x.cpu_ms);
}

/* A pass of R rows calls experts x (1 - (1 - used / experts)^R) a layer:
 * two rows a little under twice one's, a 512-token prompt every expert
 * but a hair; the products of all of them at the CPU's rate. */
static void a_prompt_calls_nearly_every_expert(void **state)
{
	(void)state;
	strata_plan_options o = moe_opts(STRATA_PLAN_DEVICE_CPU, 0);
	double q = (double)USED / EXPERTS;
	near(pass(&o, 2.0, true).calls,
	     LAYERS * EXPERTS * (1 - (1 - q) * (1 - q)));
	strata_plan_experts_figures x = pass(&o, 512.0, true);
	near(x.calls, LAYERS * EXPERTS * (1 - pow(1 - q, 512)));
	assert_true(x.calls > LAYERS * EXPERTS - 1e-9 * LAYERS * EXPERTS);
	/* compute bound: 512 x 8 rows a layer over its experts' products
	 * (each row's products at 2 x elements), plus each expert's reads
	 * where a few rows leave it memory bound, plus its kernels */
	double flops = 2.0 * 512 * USED * (EXPERT_BYTES / 2) / 1e12 * LAYERS;
	assert_true(x.cpu_ms > flops * 1e3);
	assert_true(x.cpu_ms < (flops + x.calls * ((double)EXPERT_BYTES / 100e9 +
						   3 * 5e-6)) * 1e3);
}

/* The cache's share in decode: slots over every expert when routing is
 * taken as uniform, else the measured share given; the misses' bytes
 * fall with it; admissions as given. */
static void the_cache_hits_its_share_in_decode(void **state)
{
	(void)state;
	strata_plan_options o = moe_opts(STRATA_PLAN_DEVICE_CUDA, 96);
	strata_plan_experts_figures x = pass(&o, 1.0, false);
	double h = 96.0 / (LAYERS * EXPERTS);
	near(x.hits, LAYERS * USED * h);
	near(x.cpu_bytes, LAYERS * USED * (1 - h) * (double)EXPERT_BYTES);
	near(x.admissions, 0);
	near(x.device_bytes, x.hits * (double)EXPERT_BYTES);
	o.experts.hit_rate = 0.75;
	o.experts.admit_rate = 0.5;
	x = pass(&o, 1.0, false);
	near(x.hits, LAYERS * USED * 0.75);
	near(x.misses, LAYERS * USED * 0.25);
	near(x.admissions, x.misses * 0.5);
	near(x.upload_bytes, x.admissions * (double)EXPERT_BYTES);
	near(x.admit_ms, x.admissions * (double)EXPERT_BYTES / 50e9 * 1e3);
	/* on cuda the hits run on the device while the CPU takes the
	 * misses, once the host has launched the hits' kernels (4 each):
	 * the layer waits for the longer, then the copies in */
	double launches = x.hits * 4 * 4e-6 * 1e3;
	near(x.total_ms, fmax(x.device_ms, launches + x.cpu_ms) + x.admit_ms +
				 x.sync_ms);
	assert_true(x.device_ms > 0 && x.device_ms < x.cpu_ms);
	/* on cpu one pool runs both */
	o.device = STRATA_PLAN_DEVICE_CPU;
	x = pass(&o, 1.0, false);
	near(x.total_ms, x.cpu_ms + x.device_ms + x.admit_ms);
}

/* A prompt calls nearly every expert, so it hits the cache's share of
 * all of them whatever decode's measured share, and admits its misses as
 * rarely as decode does; with room for every expert it hits them all. */
static void a_prompt_hits_the_caches_share(void **state)
{
	(void)state;
	strata_plan_options o = moe_opts(STRATA_PLAN_DEVICE_CUDA, 96);
	o.experts.hit_rate = 0.75; /* decode's, not the prompt's */
	strata_plan_experts_figures x = pass(&o, 512.0, true);
	double share = 96.0 / (LAYERS * EXPERTS);
	near(x.hits, x.calls * share);
	near(x.admissions, 0);
	near(x.upload_bytes, x.streamed * (double)EXPERT_BYTES);
	o.experts.admit_rate = 0.25;
	o.experts.stream_rows = 100000; /* none streamed: all on the CPU */
	x = pass(&o, 512.0, true);
	near(x.streamed, 0);
	near(x.misses, x.calls * (1.0 - share));
	near(x.admissions, x.misses * 0.25);
	near(x.upload_bytes, x.admissions * (double)EXPERT_BYTES);
	o = moe_opts(STRATA_PLAN_DEVICE_CUDA, LAYERS * EXPERTS);
	x = pass(&o, 512.0, true);
	near(x.hits, x.calls);
	near(x.misses + x.admissions, 0);
}

/* Missed experts with stream_rows rows or more go over the link and run
 * on the device, the rest on the CPU, both at once at their shared
 * rates; the expected split follows the rows' binomial spread. */
static void prompt_experts_stream_from_their_rows(void **state)
{
	(void)state;
	strata_plan_options o = moe_opts(STRATA_PLAN_DEVICE_CUDA, 0);
	o.experts.stream_rows = 32; /* the mean at 512 rows: about half */
	strata_plan_experts_figures x = pass(&o, 512.0, true);
	near(x.streamed + x.misses, x.calls);
	assert_true(x.streamed > 0.4 * x.calls && x.streamed < 0.6 * x.calls);
	near(x.upload_bytes, x.streamed * (double)EXPERT_BYTES);
	assert_true(x.device_ms > x.streamed * (double)EXPERT_BYTES / 50e9 * 1e3);
	o.experts.stream_rows = 1000; /* past any expert's rows */
	x = pass(&o, 512.0, true);
	near(x.streamed, 0);
	o.h2d_shared_bandwidth = 25e9;
	o.host_memory_shared_bandwidth = 50e9;
	o.experts.stream_rows = 32;
	strata_plan_experts_figures y = pass(&o, 512.0, true);
	assert_true(y.device_ms > x.device_ms);
}

/* Every candidate's decode and prefill predictions carry the experts'
 * totals (decode: one row; prefill: the chunk's rows). */
static void candidates_carry_the_experts(void **state)
{
	(void)state;
	fixture *f = fixture_make(4);
	strata_plan_options o = moe_opts(STRATA_PLAN_DEVICE_CUDA, 0);
	strata_plan *with = plan_of(f, &o);
	o.experts = (strata_plan_experts){0};
	strata_plan *without = plan_of(f, &o);
	strata_plan_experts_figures d, p;
	strata_plan_experts_pass(with, 1.0, false, &d);
	strata_plan_experts_pass(with,
				 (double)strata_plan_get_options(with)
					 ->shape.prefill_chunk,
				 true, &p);
	const strata_plan_candidate *a = strata_plan_selected(with),
				    *b = strata_plan_selected(without);
	assert_non_null(a);
	assert_non_null(b);
	char an[96], bn[96];
	assert_string_equal(strata_plan_candidate_name(a, an, sizeof an),
			    strata_plan_candidate_name(b, bn, sizeof bn));
	near(a->predicted_decode_ms, b->predicted_decode_ms + d.total_ms);
	near(a->predicted_prefill_ms, b->predicted_prefill_ms + p.total_ms);
	strata_plan_experts_figures none;
	strata_plan_experts_pass(without, 1.0, false, &none);
	near(none.calls + none.total_ms, 0);
	strata_plan_destroy(with);
	strata_plan_destroy(without);
	fixture_free(f);
}

/* Two MoE layers of a 1 MiB attention matrix and four 1 MiB experts,
 * one routed a token, resident on cuda: decode reads the attention and a
 * quarter of the experts (one token calls one); a prompt of 64 tokens
 * calls all but (3/4)^64 of them and multiplies each row by one expert;
 * each called expert adds its four launches and each layer its router's
 * wait. Without routing (experts 0) every byte counts, as for a dense
 * layer. */
static void moe_units_read_their_routed_experts(void **state)
{
	(void)state;
	fixture *f = calloc(1, sizeof *f);
	add_param(f, "model.embed_tokens.weight", 1 * MiB);
	for (int l = 0; l < 2; l++) {
		char name[48];
		snprintf(name, sizeof name, "model.layers.%d.self_attn.q.weight", l);
		add_param(f, name, 1 * MiB);
		for (int e = 0; e < 4; e++) {
			snprintf(name, sizeof name,
				 "model.layers.%d.mlp.experts.%d.up.weight", l, e);
			add_param(f, name, 1 * MiB);
		}
	}
	strata_error err;
	assert_int_equal(strata_plan_layout_create(f->params, f->n,
						   fixture_bytes, f, NULL, 0,
						   &f->layout, &err),
			 STRATA_OK);
	strata_plan_unit u;
	strata_plan_layout_unit_at(f->layout, 0, &u);
	assert_int_equal(u.expert_type_bytes[STRATA_BLOCK_F32], 4 * MiB);
	assert_int_equal(u.type_bytes[STRATA_BLOCK_F32], 5 * MiB);
	f->arch = (strata_plan_arch){.known = true, .family = "qwen3_moe",
				     .layers = 2, .hidden = 64,
				     .intermediate = 128, .heads = 4,
				     .kv_heads = 2, .head_dim = 16,
				     .vocab = 100, .max_context = 512,
				     .experts = 4, .experts_used = 1};
	strata_plan_options o = moe_opts(STRATA_PLAN_DEVICE_CUDA, 0);
	o.experts = (strata_plan_experts){0};
	o.mode = STRATA_RESIDENCY_RESIDENT;
	o.shape.prefill_chunk = 64;
	o.device_flops = 10e12; /* decode memory bound, the prompt not */
	double M = o.memory_bandwidth, F = o.device_flops;
	double dl = o.device_launch_seconds;
	strata_plan *p = plan_of(f, &o);
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_non_null(c);
	assert_int_equal(c->mode, STRATA_RESIDENCY_RESIDENT);
	double dense = 2.0 * MiB, x = 8.0 * MiB; /* f32: 4 bytes an element */
	double kv = c->decode_cost.resident_ms / 1e3 - (dense + x / 4) / M;
	assert_true(kv >= 0 && kv * M < 0.25 * MiB); /* the KV cache's reads */
	double read = 1.0 - pow(0.75, 64);
	double dense_p = fmax(dense / M, 2.0 * (dense / 4) * 64 / F);
	double x_p = fmax(x * read / M, 2.0 * (x / 4) * 0.25 * 64 / F);
	assert_true(x_p > x * read / M); /* compute bound: one expert a row */
	near(c->prefill_cost.resident_ms, (dense_p + x_p + kv) * 1e3);
	/* two layers: one expert a token each, four launches an expert
	 * beside each layer's own, queued behind the device's compute, and
	 * the router's logits back (half a round trip) */
	double launches = (2.0 * STRATA_PLAN_KERNELS_PER_UNIT + 2.0 * 4) * dl;
	double rest = launches - c->decode_cost.resident_ms / 1e3;
	near(c->decode_cost.overhead_ms,
	     ((rest > 0 ? rest : 0) + 2.0 * o.crossing_seconds / 2.0) * 1e3);
	assert_true(rest > 0);
	strata_plan_destroy(p);
	f->arch.experts = f->arch.experts_used = 0; /* no routing known */
	p = plan_of(f, &o);
	near(strata_plan_selected(p)->decode_cost.resident_ms,
	     ((dense + x) / M + kv) * 1e3);
	strata_plan_destroy(p);
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(decode_reads_its_routed_experts_only),
		cmocka_unit_test(a_prompt_calls_nearly_every_expert),
		cmocka_unit_test(the_cache_hits_its_share_in_decode),
		cmocka_unit_test(a_prompt_hits_the_caches_share),
		cmocka_unit_test(prompt_experts_stream_from_their_rows),
		cmocka_unit_test(candidates_carry_the_experts),
		cmocka_unit_test(moe_units_read_their_routed_experts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
