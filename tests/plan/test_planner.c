/* test_planner.c - where-it-executes bytes, the memory model's formulas,
 * budgets, candidates, the automatic choice and its explanation codes,
 * option errors, the nothing-fits error and the JSON document. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "strata/backend.h"
#include "strata/plan.h"
#include "planner_fixture.h"

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void tensor_bytes_are_where_it_executes(void **state)
{
	(void)state;
	uint64_t b;
	strata_error err;
	const strata_plan_device cpu = STRATA_PLAN_DEVICE_CPU,
				 cuda = STRATA_PLAN_DEVICE_CUDA;
	assert_int_equal(strata_plan_tensor_device_bytes(STRATA_DTYPE_BF16,
							 1024, cpu, &b, &err),
			 STRATA_OK);
	assert_true(b == 2048); /* stored: the cpu computes on bf16 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_BF16, 1024, cuda, &b, &err);
	assert_true(b == 2048);
	strata_plan_tensor_device_bytes(STRATA_DTYPE_F16, 1000, cuda, &b, &err);
	assert_true(b == 2048); /* 2000 rounded up to 256 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_Q4_0, 512, cpu, &b, &err);
	assert_true(b == 512); /* 16 blocks of 18 bytes, rounded up to 256 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_Q4_K, 256 * 16, cpu, &b,
					&err);
	assert_true(b == 2304); /* 16 blocks of 144 */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_Q8_0, 32 * 64, cuda, &b,
					&err);
	assert_true(b == (strata_backend_weight_types("cuda") &
					  STRATA_WEIGHT_BIT(STRATA_WEIGHT_Q8_0)
				  ? 2304u   /* 64 blocks of 34, rounded up */
				  : 8192u)); /* converted to f32 */
	/* a type no kernel computes on is converted (and refused at run) */
	strata_plan_tensor_device_bytes(STRATA_DTYPE_F8_E4M3, 64, cpu, &b, &err);
	assert_true(b == 256);
	strata_plan_tensor_device_bytes(STRATA_DTYPE_I64, 64, cpu, &b, &err);
	assert_true(b == 512);
	strata_plan_tensor_device_bytes(STRATA_DTYPE_F32, 0, cpu, &b, &err);
	assert_true(b == 0);
	assert_int_equal(strata_plan_tensor_device_bytes(STRATA_DTYPE_COUNT, 1,
							 cpu, &b, &err),
			 STRATA_E_CKPT_DTYPE);
	assert_int_equal(strata_plan_tensor_device_bytes(STRATA_DTYPE_F32,
							 UINT64_MAX / 2, cpu,
							 &b, &err),
			 STRATA_E_OVERFLOW);
	assert_non_null(strstr(err.message, "tensor device bytes"));
}

/* Vectors (norms, biases) stay f32 on the cpu, whose norm kernel reads
 * f32; cuda's reads bf16 and f16 too. Matrices stay as stored on both. */
static void vectors_follow_the_norm_kernels(void **state)
{
	(void)state;
	strata_error err;
	strata_plan_exec e;
	strata_tensor norm = {.name = "n", .dtype = STRATA_DTYPE_BF16,
			      .n_dims = 1, .elements = 64, .bytes = 128};
	assert_int_equal(strata_plan_tensor_exec(&norm, STRATA_PLAN_DEVICE_CPU,
						 &e, &err),
			 STRATA_OK);
	assert_true(e.convert && e.bytes == 256);
	strata_plan_tensor_exec(&norm, STRATA_PLAN_DEVICE_CUDA, &e, &err);
	assert_true(!e.convert && e.bytes == 128);
	strata_tensor mat = {.name = "m", .dtype = STRATA_DTYPE_Q6_K,
			     .n_dims = 2, .elements = 512, .bytes = 420};
	strata_plan_tensor_exec(&mat, STRATA_PLAN_DEVICE_CPU, &e, &err);
	assert_true(!e.convert && e.bytes == 420);
	mat.dtype = STRATA_DTYPE_F32;
	mat.bytes = 2048;
	strata_plan_tensor_exec(&mat, STRATA_PLAN_DEVICE_CUDA, &e, &err);
	assert_true(!e.convert && e.bytes == 2048);
}

/* --kv-type: the KV cache at 2 bytes an element for f16 and bf16 on both
 * devices, exactly half of f32's (the activations unchanged); a type no
 * cache holds is E_PLAN_OPTIONS naming the fix. */
static void memory_model_kv_types(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	const strata_weight_type types[] = {STRATA_WEIGHT_F32,
					    STRATA_WEIGHT_F16,
					    STRATA_WEIGHT_BF16};
	const strata_plan_device devs[] = {STRATA_PLAN_DEVICE_CPU,
					   STRATA_PLAN_DEVICE_CUDA};
	strata_plan_memory m, f32;
	strata_error err;
	for (int d = 0; d < 2; d++)
		for (int t = 0; t < 3; t++) {
			strata_plan_shape sh = {.context = 256, .batch = 3,
						.prefill_chunk = 4,
						.kv_type = types[t]};
			assert_int_equal(strata_plan_memory_compute(
						 &f->arch, &sh, devs[d],
						 STRATA_DTYPE_F32, 0, 0, &m,
						 &err),
					 STRATA_OK);
			uint64_t eb = t ? 2 : 4;
			assert_int_equal(m.kv_element_bytes, eb);
			assert_int_equal(m.kv_buffer_bytes, 3 * 256 * 32 * eb);
			assert_int_equal(m.kv_cache_bytes,
					 f->arch.layers * 2 * m.kv_buffer_bytes);
			if (t == 0)
				f32 = m;
			assert_int_equal(m.kv_cache_bytes * 4,
					 f32.kv_cache_bytes * eb);
			assert_int_equal(m.workspace_bytes, f32.workspace_bytes);
		}
	strata_plan_shape sh = {.context = 256, .batch = 1, .prefill_chunk = 4,
				.kv_type = STRATA_WEIGHT_Q8_0};
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_F32, 0, 0, &m,
						    &err),
			 STRATA_E_PLAN_OPTIONS);
	assert_non_null(strstr(err.message, "q8_0"));
	assert_non_null(strstr(err.fix, "--kv-type"));
	fixture_free(f);
}

static void memory_model_formulas_are_exact(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_shape sh = {.context = 256, .batch = 1, .prefill_chunk = 1};
	strata_plan_memory m;
	strata_error err;
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_BF16, 4 * MiB,
						    2, &m, &err),
			 STRATA_OK);
	assert_true(m.arch_known && m.kv_element_bytes == 4);
	assert_true(m.kv_buffer_bytes == 256 * 32 * 4);
	assert_true(m.kv_cache_bytes == KV_CPU);
	assert_true(m.x_bytes == 256 && m.xb_bytes == 256 &&
		    m.xb2_bytes == 256 && m.q_bytes == 256);
	/* one sequence: keys and values go straight into the cache, and the
	 * tiled attention keeps no score matrix */
	assert_true(m.k_bytes == 0 && m.v_bytes == 0);
	assert_true(m.hb_bytes == 512 && m.hb2_bytes == 512);
	assert_true(m.rope_bytes == 256); /* 8 floats aligned */
	assert_true(m.moe_bytes == 0 && m.norms_bytes == 0);
	/* 128 bias floats fit the MLP gate's 128: borrowed, none of its own */
	assert_true(m.bias_bytes == 0);
	assert_true(m.logits_bytes == 512); /* 400 aligned, not in the sum */
	assert_true(m.workspace_bytes == WS);
	assert_int_equal(WS, 4 * 256 + 2 * 512 + 256);
	/* a site: its layers' KV pairs, a staged pair, the logits rows where
	 * host code cannot address it */
	assert_int_equal(strata_plan_site_bytes(&m, UINT64_MAX, false, false),
			 KV_CPU + WS);
	assert_int_equal(strata_plan_site_bytes(&m, 3, true, true),
			 WS + 4 * m.kv_buffer_bytes * 2 + 512);
	assert_int_equal(strata_plan_site_bytes(&m, 0, false, false), WS);
	assert_true(m.staging_slots == 2 && m.staging_bytes == 8 * MiB);
	/* cuda: the KV cache stays f32 with bf16 weights (the attention
	 * kernel reads f32); batch and chunk scale what they should */
	sh = (strata_plan_shape){.context = 256, .batch = 3, .prefill_chunk = 4};
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CUDA,
						    STRATA_DTYPE_BF16, 0, 0, &m,
						    &err),
			 STRATA_OK);
	assert_true(m.kv_element_bytes == 4);
	assert_true(m.kv_buffer_bytes == 3 * 256 * 32 * 4);
	/* a pass's rows: max(chunk, batch) = 4, a chunk or a step of the
	 * batch (issue 19), not chunk x batch */
	assert_true(m.x_bytes == 4 * 64 * 4);
	/* three sequences: a mixed step's new keys and values, 4 rows */
	assert_true(m.k_bytes == 4 * 32 * 4 && m.v_bytes == 4 * 32 * 4);
	assert_true(m.logits_bytes == 1280); /* 3 x 100 x 4 = 1200 aligned */
	sh.batch = 16; /* now the batch is the larger */
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CUDA,
						    STRATA_DTYPE_BF16, 0, 0, &m,
						    &err),
			 STRATA_OK);
	assert_true(m.x_bytes == 16 * 64 * 4);
	sh.batch = 3;
	/* overflow names the buffer */
	sh.context = UINT64_MAX / 2;
	assert_int_equal(strata_plan_memory_compute(&f->arch, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_BF16, 0, 0, &m,
						    &err),
			 STRATA_E_OVERFLOW);
	assert_non_null(strstr(err.message, "KV buffer"));
	/* unknown architecture: nothing guessed */
	strata_plan_arch unknown = {.known = false};
	assert_int_equal(strata_plan_memory_compute(&unknown, &sh,
						    STRATA_PLAN_DEVICE_CPU,
						    STRATA_DTYPE_BF16, 5, 1, &m,
						    &err),
			 STRATA_OK);
	assert_false(m.arch_known);
	assert_true(m.kv_cache_bytes == 0 && m.workspace_bytes == 0 &&
		    m.staging_bytes == 5);
	fixture_free(f);
}

static void resident_is_chosen_when_it_fits(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(RESIDENT_DEVICE, 0);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_RESIDENT);
	assert_true(strata_plan_device_total(p) == RESIDENT_DEVICE);
	assert_true(strata_plan_host_total(p) == 0);
	assert_true(has_code(p, STRATA_EXPLAIN_RESIDENT_FITS));
	assert_true(has_code(p, STRATA_EXPLAIN_DEVICE_BUDGET_FROM_OPTION));
	const strata_plan_candidate *c = strata_plan_selected(p);
	assert_true(c->weights.static_bytes == MiB &&
		    c->weights.window_bytes == 32 * MiB &&
		    c->weights.depth == 8);
	strata_plan_destroy(p);
	/* the backend's own device bytes count: now it is one byte short */
	o.backend_reserved_bytes = 1;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_candidate_at(p, 0)->device_bytes ==
		    RESIDENT_DEVICE + 1);
	assert_false(strata_plan_candidate_at(p, 0)->fits);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_DISK);
	strata_plan_destroy(p);
	o.backend_reserved_bytes = 0;
	/* one byte less and resident no longer fits: the exact edge */
	o.device_budget_bytes = RESIDENT_DEVICE - 1;
	o.host_budget_bytes = 64 * MiB;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_HOST);
	assert_true(has_code(p, STRATA_EXPLAIN_RESIDENT_EXCEEDS_DEVICE_BUDGET));
	assert_true(strata_plan_candidate_at(p, 0)->device_shortfall_bytes == 1);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void host_window_is_the_fastest_fitting_depth(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	/* room for a window of 3 units, not 4 */
	uint64_t dev = MiB + 3 * 4 * MiB + KV_CPU + WS;
	strata_plan_options o = opts(dev, 64 * MiB);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	/* resident, host:1..4 (4 is the first that does not fit), disk */
	assert_int_equal(uniform_count(p), 6);
	for (size_t d = 1; d <= 4; d++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, d);
		assert_int_equal(c->mode, STRATA_RESIDENCY_HOST);
		assert_true(c->weights.depth == d);
		assert_true(c->weights.window_bytes == d * 4 * MiB);
		/* every unit; on cpu the device is host memory: nothing is
		 * loaded through a staging buffer */
		assert_true(c->host_bytes == 32 * MiB);
		assert_int_equal(c->staging_bytes, 0);
		assert_int_equal(c->fits, d <= 3);
	}
	/* depth 1 cannot overlap copy and compute; 2 and 3 tie: the smaller
	 * window wins */
	const strata_plan_candidate *c1 = strata_plan_candidate_at(p, 1);
	const strata_plan_candidate *c2 = strata_plan_candidate_at(p, 2);
	assert_true(c1->predicted_ms_per_forward > c2->predicted_ms_per_forward);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_HOST);
	assert_true(strata_plan_depth(p) == 2);
	assert_true(strata_plan_weight_device_bytes(p) == MiB + 8 * MiB);
	assert_true(strata_plan_device_total(p) == MiB + 8 * MiB + KV_CPU + WS);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_WINDOW_SELECTED));
	strata_plan_destroy(p);
	/* the host tier too small for every unit: disk, two units ahead */
	o.host_budget_bytes = 8 * MiB;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_DISK);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_WINDOW_EXCEEDS_HOST_BUDGET));
	assert_true(has_code(p, STRATA_EXPLAIN_DISK_SELECTED));
	assert_true(strata_plan_depth(p) == 2 && strata_plan_lookahead(p) == 2 &&
		    strata_plan_queue(p) == 1);
	assert_true(strata_plan_host_total(p) == 8 * MiB);
	assert_true(strata_plan_get_memory(p)->staging_bytes == 8 * MiB);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void disk_options_follow_the_host_budget(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	uint64_t dev = MiB + 2 * 4 * MiB + KV_CPU + WS;
	strata_plan_options o = opts(dev, 0);
	o.mode = STRATA_RESIDENCY_DISK;
	strata_plan *p;
	strata_error err;
	/* host 0: straight from disk to the device */
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_lookahead(p) == 0 && strata_plan_queue(p) == 0);
	assert_true(has_code(p, STRATA_EXPLAIN_DISK_DIRECT_TO_DEVICE));
	assert_true(has_code(p, STRATA_EXPLAIN_FORCED_BY_OPTION));
	strata_plan_destroy(p);
	/* invalid combinations */
	const struct {
		uint64_t host;
		bool has_la, has_q;
		uint64_t la, q;
	} bad[] = {
		{0, true, false, 1, 0},	   /* lookahead with host 0 */
		{0, false, true, 0, 2},	   /* queue with host 0 */
		{MiB, true, false, 0, 0},  /* lookahead 0 with host */
		{MiB, false, true, 0, 0},  /* queue 0 with host */
		{MiB, true, true, 1, 2},   /* more reads than slots */
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		o.host_budget_bytes = bad[i].host;
		o.has_lookahead = bad[i].has_la;
		o.lookahead = bad[i].la;
		o.has_queue = bad[i].has_q;
		o.queue = bad[i].q;
		p = (strata_plan *)&o; /* must be set to NULL */
		assert_int_equal(strata_plan_create(f->layout, &f->arch,
						    STRATA_DTYPE_BF16, &o,
						    &no_machine, &p, &err),
				 STRATA_E_PLAN_OPTIONS);
		assert_null(p);
	}
	/* a host budget smaller than one unit: direct reads, not a misfit */
	o.host_budget_bytes = MiB;
	o.has_lookahead = o.has_queue = false;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_lookahead(p) == 0 && strata_plan_host_total(p) == 0);
	assert_true(has_code(p, STRATA_EXPLAIN_DISK_DIRECT_TO_DEVICE));
	strata_plan_destroy(p);
	/* given lookahead and queue are used as given */
	o.host_budget_bytes = 64 * MiB;
	o.lookahead = 3;
	o.queue = 2;
	o.has_lookahead = o.has_queue = true;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_lookahead(p) == 3 && strata_plan_queue(p) == 2);
	assert_true(strata_plan_host_total(p) == 12 * MiB);
	strata_plan_destroy(p);
	/* lookahead/queue with a non-disk forced mode */
	o.mode = STRATA_RESIDENCY_RESIDENT;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_OPTIONS);
	fixture_free(f);
}

static void nothing_fits_names_shortfalls_and_the_smallest_budget(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(MiB, 0);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	assert_non_null(p); /* the candidates stay available to show */
	assert_null(strata_plan_selected(p));
	assert_true(has_code(p, STRATA_EXPLAIN_NOTHING_FITS));
	assert_non_null(strstr(err.message, "resident needs "));
	assert_non_null(strstr(err.message, "host:1 needs "));
	assert_non_null(strstr(err.message, "disk needs "));
	/* one change makes it fit: disk reads straight to the device with
	 * host 0, so only the device budget is short; the fix names it in
	 * the units the option takes, and only it */
	const strata_plan_candidate *disk = last_of(p, STRATA_RESIDENCY_DISK);
	char size[32], want[96];
	strata_plan_size_option(disk->device_bytes, size, sizeof size);
	snprintf(want, sizeof want, "give --device-memory %s (then disk fits",
		 size);
	if (!strstr(err.fix, want))
		fail_msg("fix '%s' lacks '%s'", err.fix, want);
	assert_null(strstr(err.fix, "--host-memory"));
	uint64_t typed;
	assert_int_equal(strata_size_parse(size, &typed, &err), STRATA_OK);
	assert_true(typed >= disk->device_bytes &&
		    typed - disk->device_bytes < disk->device_bytes / 100 + 1);
	uint64_t exact = disk->device_bytes;
	strata_plan_destroy(p);
	/* the named size fits; the exact bytes fit; one byte less does not */
	o.device_budget_bytes = typed;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_DISK);
	strata_plan_destroy(p);
	o.device_budget_bytes = exact;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	strata_plan_destroy(p);
	o.device_budget_bytes = exact - 1;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* Sizes the options take: whole units, else hundredths rounded up, never
 * below the bytes. */
static void sizes_are_given_in_option_units(void **state)
{
	(void)state;
	const struct {
		uint64_t bytes;
		const char *text;
	} cases[] = {{2 * GiB, "2GiB"}, {3 * MiB, "3MiB"}, {512, "512"},
		     {GiB + 1, "1.01GiB"}, {36 * MiB + 5, "36.01MiB"},
		     {1536, "1.50KiB"}, {1537, "1.51KiB"}};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char buf[32];
		strata_plan_size_option(cases[i].bytes, buf, sizeof buf);
		assert_string_equal(buf, cases[i].text);
	}
}

static void forced_modes_select_only_themselves(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(GiB, GiB);
	o.mode = STRATA_RESIDENCY_HOST;
	o.host_depth = 3;
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_int_equal(strata_plan_mode(p), STRATA_RESIDENCY_HOST);
	assert_true(strata_plan_depth(p) == 3);
	assert_true(has_code(p, STRATA_EXPLAIN_FORCED_BY_OPTION));
	strata_plan_destroy(p);
	/* a depth deeper than the model is sized as asked (not clamped) */
	o.host_depth = 100;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	assert_true(strata_plan_depth(p) == 100);
	assert_true(strata_plan_selected(p)->weights.window_bytes == 32 * MiB);
	strata_plan_destroy(p);
	/* forced resident that does not fit is an error, not a fallback */
	o = opts(RESIDENT_DEVICE - 256, GiB);
	o.mode = STRATA_RESIDENCY_RESIDENT;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	assert_true(has_code(p, STRATA_EXPLAIN_FORCED_MODE_DOES_NOT_FIT));
	strata_plan_destroy(p);
	fixture_free(f);
}

static void budgets_come_from_the_machine_with_headroom(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CPU};
	strata_plan_machine m = {.host_available_known = true,
				 .host_available_bytes = 20 * GiB};
	strata_plan *p;
	strata_error err;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	const strata_plan_budgets *b = strata_plan_get_budgets(p);
	assert_true(b->device_headroom_bytes == 2 * GiB);
	/* cpu: one RAM that both tiers share, so every mode that fits it
	 * runs (host:1 too, not "host budget 0") */
	assert_true(b->device_budget_bytes == 18 * GiB && b->host_budget_bytes == 18 * GiB);
	assert_true(b->ram_bytes == 18 * GiB);
	assert_true(has_code(p, STRATA_EXPLAIN_DEVICE_BUDGET_FROM_MACHINE));
	assert_true(has_code(p, STRATA_EXPLAIN_ONE_RAM_SHARED));
	assert_true(strata_plan_host_spare_bytes(p) ==
		    18 * GiB - strata_plan_device_total(p) -
			    strata_plan_host_total(p));
	strata_plan_destroy(p);
	o.mode = STRATA_RESIDENCY_HOST;
	o.host_depth = 1;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_depth(p) == 1);
	o.mode = STRATA_RESIDENCY_AUTO;
	o.host_depth = 0;
	assert_true(strata_plan_get_options(p)->shape.context == 512);
	strata_plan_destroy(p);
	/* an explicit device budget leaves the rest of RAM to the host */
	o.has_device_budget = true;
	o.device_budget_bytes = 4 * GiB;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_get_budgets(p)->host_budget_bytes == 14 * GiB);
	strata_plan_destroy(p);
	/* and an explicit host budget leaves the rest to the device */
	o.has_device_budget = false;
	o.has_host_budget = true;
	o.host_budget_bytes = 5 * GiB;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_get_budgets(p)->device_budget_bytes == 13 * GiB);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_BUDGET_FROM_OPTION));
	strata_plan_destroy(p);
	o.has_host_budget = false;
	/* a prefill chunk longer than the context cannot run */
	o.shape = (strata_plan_shape){.context = 16, .prefill_chunk = 17};
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_E_PLAN_OPTIONS);
	/* ... at one sequence: a step of 2 takes prompt chunks of both, up
	 * to context x batch (issue 19), and no more */
	o.shape = (strata_plan_shape){.context = 16, .batch = 2,
				      .prefill_chunk = 32};
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_OK);
	strata_plan_destroy(p);
	o.shape.prefill_chunk = 33;
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_E_PLAN_OPTIONS);
	o.shape = (strata_plan_shape){0};
	/* small machines keep at least 1 GiB */
	assert_true(strata_plan_headroom(STRATA_PLAN_DEVICE_CPU, 3 * GiB) == GiB);
	assert_true(strata_plan_headroom(STRATA_PLAN_DEVICE_CUDA, 100 * GiB) ==
		    5 * GiB);
	assert_true(strata_plan_headroom(STRATA_PLAN_DEVICE_CPU, 100) == 100);
	/* cuda with no way to tell its free memory */
	o = (strata_plan_options){.device = STRATA_PLAN_DEVICE_CUDA};
	assert_int_equal(strata_plan_create(f->layout, &f->arch,
					    STRATA_DTYPE_BF16, &o, &m, &p, &err),
			 STRATA_E_PLAN_OPTIONS);
	assert_non_null(strstr(err.fix, "--device-memory"));
	fixture_free(f);
}

/* A plan that must succeed; the caller destroys it. */
static strata_plan *plan_ok(const fixture *f, const strata_plan_options *o,
			    const strata_plan_machine *m)
{
	strata_plan *p = NULL;
	strata_error err;
	if (strata_plan_create(f->layout, &f->arch, STRATA_DTYPE_BF16, o, m,
			       &p, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return p;
}

/* Replicas on one machine (host_shared_by) split its host budget evenly;
 * on cpu the RAM of their device arenas too, unless --device-memory gives
 * each its own; what a plan leaves spare is the prefix cache's bound. */
static void replicas_share_the_host_budget(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_machine m = {.host_available_known = true,
				 .host_available_bytes = 20 * GiB,
				 .device_free_known = true,
				 .device_free_bytes = 100 * GiB};
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CPU,
				 .host_shared_by = 4};
	/* cpu, nothing given: 18 GiB of RAM (2 GiB headroom) over 4 arenas */
	strata_plan *p = plan_ok(f, &o, &m);
	const strata_plan_budgets *b = strata_plan_get_budgets(p);
	assert_true(b->shared_by == 4);
	assert_true(b->device_budget_bytes == 18 * GiB / 4);
	assert_true(b->ram_bytes == 18 * GiB / 4 && b->host_pool_bytes == 18 * GiB);
	assert_true(strata_plan_host_spare_bytes(p) ==
		    18 * GiB / 4 - strata_plan_device_total(p) -
			    strata_plan_host_total(p));
	strata_plan_destroy(p);
	/* cpu, 4 GiB per arena: 18 - 4 x 4 GiB left to the host pool */
	o.has_device_budget = true;
	o.device_budget_bytes = 4 * GiB;
	p = plan_ok(f, &o, &m);
	b = strata_plan_get_budgets(p);
	assert_true(b->host_pool_bytes == 2 * GiB);
	assert_true(b->host_budget_bytes == GiB / 2);
	strata_plan_destroy(p);
	/* arenas past the RAM: no host pool, not an underflow */
	o.device_budget_bytes = 5 * GiB;
	p = plan_ok(f, &o, &m);
	assert_true(strata_plan_get_budgets(p)->host_budget_bytes == 0);
	strata_plan_destroy(p);
	/* cpu, --host-memory 8 GiB: 2 GiB each; the arenas share the rest */
	o.has_device_budget = false;
	o.has_host_budget = true;
	o.host_budget_bytes = 8 * GiB;
	p = plan_ok(f, &o, &m);
	b = strata_plan_get_budgets(p);
	assert_true(b->host_budget_bytes == 2 * GiB && b->host_pool_bytes == 8 * GiB);
	assert_true(b->device_budget_bytes == 10 * GiB / 4);
	strata_plan_destroy(p);
	/* cuda: each GPU's own free memory; the host pool (18 GiB) split,
	 * and only host memory is spare for a host-side cache */
	o = (strata_plan_options){.device = STRATA_PLAN_DEVICE_CUDA,
				  .host_shared_by = 4};
	p = plan_ok(f, &o, &m);
	b = strata_plan_get_budgets(p);
	assert_true(b->device_budget_bytes == 95 * GiB);
	assert_true(b->host_budget_bytes == 18 * GiB / 4);
	assert_true(strata_plan_mode(p) == STRATA_RESIDENCY_RESIDENT);
	/* resident on cuda still loads through the pinned staging buffer
	 * of the largest unit (4 MiB) */
	assert_int_equal(strata_plan_host_total(p), 4 * MiB);
	assert_true(strata_plan_host_spare_bytes(p) == 18 * GiB / 4 - 4 * MiB);
	bool split = false;
	for (size_t i = 0; i < strata_plan_explanation_count(p); i++)
		split |= strstr(strata_plan_explanation_at(p, i)->text,
				"split between 4 replicas") != NULL;
	assert_true(split);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* On cuda the spare host memory is pinned by whoever takes it (the batch
 * prefix cache), so it is bounded by the page tables the device budget's
 * remainder pays for: all of it with room, the exact edge of the driver's
 * formula with 4 MiB of room, nothing with none. */
static void cuda_spare_is_what_the_device_can_pin(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CUDA,
				 .has_device_budget = true,
				 .device_budget_bytes = 64 * GiB,
				 .has_host_budget = true,
				 .host_budget_bytes = 64 * GiB,
				 .shape = {.context = 256, .batch = 1}};
	strata_plan *p = plan_ok(f, &o, &no_machine);
	assert_true(strata_plan_mode(p) == STRATA_RESIDENCY_RESIDENT);
	const uint64_t total = strata_plan_device_total(p);
	const uint64_t h = strata_plan_host_total(p);
	assert_true(strata_plan_host_spare_bytes(p) == 64 * GiB - h);
	strata_plan_destroy(p);
	o.device_budget_bytes = total + 4 * MiB;
	p = plan_ok(f, &o, &no_machine);
	assert_true(strata_plan_device_total(p) == total);
	const uint64_t spare = strata_plan_host_spare_bytes(p);
	/* the pinned tiers (none: resident), not the load staging, which is
	 * gone once the run starts */
	const uint64_t pin = h - strata_plan_selected(p)->load_staging_bytes;
	const uint64_t base = strata_plan_cuda_driver_bytes(pin);
	assert_true(spare > 0 && spare < 64 * GiB - h);
	assert_true(strata_plan_cuda_driver_bytes(pin + spare) - base <=
		    4 * MiB);
	assert_true(strata_plan_cuda_driver_bytes(pin + spare + 1) - base >
		    4 * MiB);
	strata_plan_destroy(p);
	o.device_budget_bytes = total;
	p = plan_ok(f, &o, &no_machine);
	assert_true(strata_plan_host_spare_bytes(p) == 0);
	strata_plan_destroy(p);
	fixture_free(f);
}

/* The spare bytes at the exact edge, and the nothing-fits fix in the
 * units a user gives: --host-memory is the pool, so n times a share. */
static void spare_bytes_and_shared_nothing_fits_fix(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(RESIDENT_DEVICE, 3 * MiB);
	strata_plan *p = plan_ok(f, &o, &no_machine);
	strata_error err;
	/* resident fills the device exactly: the host budget is spare */
	assert_true(strata_plan_device_total(p) == RESIDENT_DEVICE);
	assert_true(strata_plan_host_spare_bytes(p) == 3 * MiB);
	strata_plan_destroy(p);
	/* nothing fits: nothing spare */
	o = opts(MiB, 0);
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	assert_true(strata_plan_host_spare_bytes(p) == 0);
	strata_plan_destroy(p);
	/* cuda, room on the device, no host memory: disk's one lookahead
	 * slot (4 MiB) and the load staging of the largest static (1 MiB)
	 * are the one change; replicas give the pool, n shares */
	o = opts(24 * MiB, 0);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	strata_plan_destroy(p);
	if (!strstr(err.fix, "give --host-memory 5MiB (then disk fits; the device budget is enough)"))
		fail_msg("fix: %s", err.fix);
	o.host_shared_by = 2;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_E_PLAN_NOTHING_FITS);
	strata_plan_destroy(p);
	if (!strstr(err.fix, "give --host-memory 10MiB (then disk fits"))
		fail_msg("fix: %s", err.fix);
	fixture_free(f);
}

static void predictions_follow_bytes_and_bandwidths(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	/* room for the CUDA driver's bytes of the pinned host window */
	strata_plan_options o =
		opts(MiB + 8 * MiB + KV_CPU + WS +
			     strata_plan_cuda_driver_bytes(GiB),
		     GiB);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	o.h2d_bandwidth = 1e9;
	o.memory_bandwidth = 1e12;
	o.disk_bandwidth = 1e8;
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	const strata_plan_memory *m = strata_plan_get_memory(p);
	double compute =
		(double)(33 * MiB + m->kv_cache_bytes) / 1e12; /* seconds */
	double h2d = (double)(32 * MiB) / 1e9;
	const strata_plan_candidate *res = strata_plan_candidate_at(p, 0);
	const strata_plan_candidate *h1 = strata_plan_candidate_at(p, 1);
	const strata_plan_candidate *h2 = strata_plan_candidate_at(p, 2);
	assert_float_equal(res->predicted_ms_per_forward, compute * 1e3, 1e-9);
	assert_float_equal(h1->predicted_ms_per_forward, (compute + h2d) * 1e3,
			   1e-9);
	assert_float_equal(h2->predicted_ms_per_forward, h2d * 1e3, 1e-9);
	assert_float_equal(h2->tokens_per_second, 1.0 / h2d, 1e-6);
	assert_true(h2->moved_bytes_per_forward == 32 * MiB);
	/* disk reads the file bytes (half: bf16 on disk) */
	const strata_plan_candidate *d = last_of(p, STRATA_RESIDENCY_DISK);
	assert_float_equal(d->predicted_ms_per_forward,
			   (double)(16 * MiB) / 1e8 * 1e3, 1e-9);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void unknown_architecture_sizes_weights_only(void **state)
{
	(void)state;
	fixture *f = fixture_make(2);
	strata_plan_arch unknown = {.known = false};
	strata_plan_options o = opts(GiB, GiB);
	strata_plan *p;
	strata_error err;
	assert_int_equal(strata_plan_create(f->layout, &unknown,
					    STRATA_DTYPE_BF16, &o, &no_machine,
					    &p, &err),
			 STRATA_OK);
	assert_true(strata_plan_device_total(p) == 9 * MiB);
	assert_true(has_code(p, STRATA_EXPLAIN_ARCHITECTURE_UNKNOWN));
	strata_json j;
	strata_json_init(&j, false);
	strata_plan_write_json(p, "m", &j);
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	json_error_t jerr;
	json_t *doc = json_loads(j.buf, 0, &jerr);
	assert_non_null(doc);
	assert_true(json_is_null(json_object_get(
		json_object_get(doc, "architecture"), "layers")));
	assert_true(json_is_null(
		json_object_get(json_object_get(doc, "memory"), "kv_cache_bytes")));
	json_t *c0 = json_array_get(json_object_get(doc, "candidates"), 0);
	assert_true(json_is_null(json_object_get(c0, "kv_cache_bytes")));
	json_decref(doc);
	strata_json_fini(&j);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void json_has_the_documented_shape(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(MiB + 12 * MiB + KV_CPU + WS, 64 * MiB);
	strata_plan *p;
	strata_error err;
	assert_int_equal(plan_bf16(f, &o, &p, &err), STRATA_OK);
	strata_json j;
	strata_json_init(&j, true);
	strata_plan_write_json(p, "model-dir", &j);
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	json_error_t jerr;
	json_t *doc = json_loads(j.buf, 0, &jerr);
	assert_non_null(doc);
	json_t *cands = json_object_get(doc, "candidates");
	assert_int_equal(json_array_size(cands), strata_plan_candidate_count(p));
	size_t i;
	json_t *c;
	json_array_foreach(cands, i, c) {
		json_t *w = json_object_get(c, "weights");
		assert_int_equal(json_object_size(w), 4); /* exactly these */
		const strata_plan_candidate *pc = strata_plan_candidate_at(p, i);
		assert_true((uint64_t)json_integer_value(json_object_get(
				    w, "static_bytes")) == pc->weights.static_bytes);
		assert_true((uint64_t)json_integer_value(json_object_get(
				    w, "window_bytes")) == pc->weights.window_bytes);
		assert_true((uint64_t)json_integer_value(json_object_get(
				    w, "required_bytes")) ==
			    pc->weights.required_bytes);
		assert_true((uint64_t)json_integer_value(
				    json_object_get(w, "depth")) == pc->weights.depth);
		assert_true(json_is_integer(json_object_get(c, "device_bytes")));
		assert_true(json_is_integer(json_object_get(c, "kv_cache_bytes")));
		assert_true(json_is_boolean(json_object_get(c, "fits")));
	}
	/* a plan alone has exactly the six budget keys scripts know */
	assert_int_equal(json_object_size(json_object_get(doc, "budgets")), 6);
	assert_null(json_object_get(json_object_get(doc, "budgets"),
				    "shared_by"));
	json_t *sel = json_object_get(doc, "selected");
	assert_string_equal(json_string_value(json_object_get(sel, "name")),
			    "host:2");
	assert_int_equal(json_integer_value(json_object_get(sel, "index")),
			 strata_plan_selected_index(p));
	json_t *ex = json_object_get(doc, "explanations");
	assert_int_equal(json_array_size(ex), strata_plan_explanation_count(p));
	bool found = false;
	json_array_foreach(ex, i, c) found |= !strcmp(
		json_string_value(json_object_get(c, "code")),
		"host_window_selected");
	assert_true(found);
	json_decref(doc);
	strata_json_fini(&j);
	strata_plan_destroy(p);
	fixture_free(f);
}

static void sparse_units_list_a_bounded_number_of_windows(void **state)
{
	(void)state;
	strata_plan_param prm[2] = {
		{.name = "a", .owner = {.kind = STRATA_OWNER_UNIT, .group = "g",
					.group_len = 1, .unit = 0}},
		{.name = "b", .owner = {.kind = STRATA_OWNER_UNIT, .group = "g",
					.group_len = 1,
					.unit = UINT64_C(1) << 63}},
	};
	fixture *f = calloc(1, sizeof *f);
	f->bytes[0] = 256;
	f->bytes[1] = 512;
	strata_plan_layout *l;
	strata_error err;
	assert_int_equal(strata_plan_layout_create(prm, 2, fixture_bytes, f,
						   NULL, 0, &l, &err),
			 STRATA_OK);
	strata_plan_arch unknown = {0};
	strata_plan_options o = opts(GiB, GiB);
	o.device = STRATA_PLAN_DEVICE_CUDA;
	strata_plan *p;
	assert_int_equal(strata_plan_create(l, &unknown, STRATA_DTYPE_F32, &o,
					    &no_machine, &p, &err),
			 STRATA_OK);
	/* resident, host:1..256, host:2^63+1, disk */
	assert_int_equal(uniform_count(p),
			 STRATA_PLAN_MAX_HOST_CANDIDATES + 3);
	assert_true(has_code(p, STRATA_EXPLAIN_HOST_WINDOW_LIST_TRUNCATED));
	const strata_plan_candidate *last = strata_plan_candidate_at(
		p, STRATA_PLAN_MAX_HOST_CANDIDATES + 1);
	assert_true(last->weights.depth == (UINT64_C(1) << 63) + 1);
	assert_true(last->weights.window_bytes == 768);
	strata_plan_destroy(p);
	strata_plan_layout_destroy(l);
	free(f);
}

static void plan_allocation_failures_leave_nothing(void **state)
{
	(void)state;
	fixture *f = fixture_make(8);
	strata_plan_options o = opts(MiB + 12 * MiB + KV_CPU + WS, 64 * MiB);
	for (long k = 0;; k++) {
		strata_plan *p = NULL;
		strata_error err;
		strata_alloc_fail_after(k);
		strata_status s = strata_plan_create(f->layout, &f->arch,
						     STRATA_DTYPE_BF16, &o,
						     &no_machine, &p, &err);
		strata_alloc_fail_after(-1);
		if (s == STRATA_OK) {
			assert_true(strata_plan_depth(p) == 2);
			strata_plan_destroy(p);
			assert_true(k > 0);
			break;
		}
		assert_int_equal(s, STRATA_E_NOMEM);
		assert_null(p);
	}
	fixture_free(f);
}

static void meminfo_is_parsed_strictly(void **state)
{
	(void)state;
	const char ok[] = "MemTotal:       24000000 kB\n"
			  "MemFree:         1000 kB\n"
			  "MemAvailable:   2048 kB\n";
	uint64_t b = 0;
	strata_error err;
	assert_int_equal(strata_plan_parse_meminfo(ok, strlen(ok), &b, &err),
			 STRATA_OK);
	assert_true(b == 2048 * 1024);
	const char *bad[] = {"MemTotal: 5 kB\n", "MemAvailable: kB\n",
			     "MemAvailable: 12", "XMemAvailable: 5 kB\n",
			     "MemAvailable: 99999999999999999999999 kB\n"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		assert_int_not_equal(strata_plan_parse_meminfo(
					     bad[i], strlen(bad[i]), &b, &err),
				     STRATA_OK);
	/* this machine's own file reads */
	assert_int_equal(strata_plan_host_available(&b, &err), STRATA_OK);
	assert_true(b > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tensor_bytes_are_where_it_executes),
		cmocka_unit_test(vectors_follow_the_norm_kernels),
		cmocka_unit_test(memory_model_formulas_are_exact),
		cmocka_unit_test(memory_model_kv_types),
		cmocka_unit_test(resident_is_chosen_when_it_fits),
		cmocka_unit_test(host_window_is_the_fastest_fitting_depth),
		cmocka_unit_test(disk_options_follow_the_host_budget),
		cmocka_unit_test(nothing_fits_names_shortfalls_and_the_smallest_budget),
		cmocka_unit_test(sizes_are_given_in_option_units),
		cmocka_unit_test(forced_modes_select_only_themselves),
		cmocka_unit_test(budgets_come_from_the_machine_with_headroom),
		cmocka_unit_test(replicas_share_the_host_budget),
		cmocka_unit_test(spare_bytes_and_shared_nothing_fits_fix),
		cmocka_unit_test(cuda_spare_is_what_the_device_can_pin),
		cmocka_unit_test(predictions_follow_bytes_and_bandwidths),
		cmocka_unit_test(unknown_architecture_sizes_weights_only),
		cmocka_unit_test(json_has_the_documented_shape),
		cmocka_unit_test(sparse_units_list_a_bounded_number_of_windows),
		cmocka_unit_test(plan_allocation_failures_leave_nothing),
		cmocka_unit_test(meminfo_is_parsed_strictly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
