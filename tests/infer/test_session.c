/* test_session.c - the opaque session's accessors on the shipped
 * stories260K: each part is the one the session opened for the options
 * given (the model's hyper-parameters, a forward pass of the asked shape,
 * the plan for that shape, the CPU backend, an engine and a weight store
 * that did the loads), the CPU backend bounded by the plan's device
 * budget, and the weight source is the one the forward pass
 * reads through (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/infer.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"

/* device_budget 0: the plan's from the machine. */
static strata_session *open_budgeted(uint64_t sequences, uint64_t device_budget)
{
	strata_session_options o = {.model_path = MODEL,
				    .threads = 1,
				    .positions = 48,
				    .prefill = 16};
	o.plan.mode = STRATA_RESIDENCY_AUTO;
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	o.plan.shape.batch = sequences;
	o.plan.has_device_budget = device_budget != 0;
	o.plan.device_budget_bytes = device_budget;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return s;
}

static strata_session *open_session(uint64_t sequences)
{
	return open_budgeted(sequences, 0);
}

static void test_parts_match_the_options(void **state)
{
	(void)state;
	strata_session *s = open_session(3);
	/* the session's own copy: the options' buffer may go first */
	assert_ptr_not_equal(strata_session_model_path(s), MODEL);
	assert_string_equal(strata_session_model_path(s), MODEL);
	assert_true(strata_session_load_ns(s) > 0);

	/* the hyper-parameters are the model's, read independently here */
	strata_catalog *c = NULL;
	strata_infer_hparams want;
	strata_error err;
	assert_int_equal(strata_catalog_open(MODEL, &c, &err), STRATA_OK);
	assert_int_equal(strata_infer_hparams_read(MODEL, c, &want, &err),
			 STRATA_OK);
	strata_catalog_destroy(c);
	const strata_infer_hparams *hp = strata_session_hparams(s);
	assert_int_equal(hp->vocab, want.vocab);
	assert_int_equal(hp->dim, want.dim);
	assert_int_equal(hp->layers, want.layers);
	assert_int_equal(hp->kv_heads, want.kv_heads);
	assert_int_equal(hp->eos, want.eos);

	/* the forward pass has the shape asked for, over those parameters */
	strata_forward *f = strata_session_forward(s);
	assert_non_null(f);
	assert_int_equal(strata_forward_sequences(f), 3);
	assert_int_equal(strata_forward_context(f), 48);
	assert_ptr_equal(strata_forward_hparams(f), hp);

	/* the plan was made for exactly that shape */
	const strata_plan *p = strata_session_plan(s);
	const strata_plan_options *po = strata_plan_get_options(p);
	assert_int_equal(po->shape.batch, 3);
	assert_int_equal(po->shape.context, 48);
	assert_int_equal(po->shape.prefill_chunk, 16);
	assert_int_equal(po->device, STRATA_PLAN_DEVICE_CPU);

	strata_backend_caps caps = {0};
	assert_int_equal(strata_backend_get_caps(strata_session_backend(s),
						 &caps, &err),
			 STRATA_OK);
	assert_string_equal(caps.name, "cpu");

	/* the engine holds the model's static tensors; the store read them */
	strata_residency_sizes z;
	strata_residency_get_sizes(strata_session_residency(s), &z);
	assert_true(z.static_bytes > 0 && z.window_bytes > 0);
	strata_weight_store_stats ws;
	strata_weight_store_get_stats(strata_session_weight_store(s), &ws);
	assert_true(ws.physical_reads > 0 && ws.physical_read_bytes > 0);

	const strata_infer_source *src = strata_session_source(s);
	assert_non_null(src->ops);
	assert_non_null(src->statics.embed);
	assert_int_equal(src->statics.lm_head_elem, STRATA_ELEM_F32);
	strata_session_close(s);
}

/* The source's ops, counted: wrapping them (as bench_forward's spy does)
 * changes what the forward pass calls. */
static const strata_infer_source_ops *real_ops;
static void *real_user;
static uint32_t acquired;

static strata_status count_acquire(void *user, uint32_t layer,
				   strata_infer_layer *out, strata_error *err)
{
	(void)user;
	acquired++;
	return real_ops->acquire(real_user, layer, out, err);
}

static strata_status count_release(void *user, uint32_t layer,
				   strata_error *err)
{
	(void)user;
	return real_ops->release(real_user, layer, err);
}

static const strata_infer_source_ops counting = {count_acquire,
						 count_release};

static void test_source_is_the_forward_pass_own(void **state)
{
	(void)state;
	strata_session *s = open_session(1);
	strata_infer_source *src = strata_session_source(s);
	strata_forward *f = strata_session_forward(s);
	uint32_t layers = strata_session_hparams(s)->layers;
	real_ops = src->ops;
	real_user = src->user;
	acquired = 0;
	src->ops = &counting;
	int32_t tok = 1;
	strata_error err;
	assert_int_equal(strata_forward_run(f, &tok, 1, 0, NULL, NULL, &err),
			 STRATA_OK);
	assert_int_equal(acquired, layers);
	src->ops = real_ops;
	assert_int_equal(strata_forward_run(f, &tok, 1, 1, NULL, NULL, &err),
			 STRATA_OK);
	assert_int_equal(acquired, layers);
	strata_session_close(s);
}

/* The CPU backend's bound is the plan's device budget (--device-memory, or
 * the machine's), and a budget of exactly the plan's device total still
 * opens: everything the run puts in device memory is in the plan. */
static void test_cpu_backend_bound_is_the_device_budget(void **state)
{
	(void)state;
	strata_error err;
	for (int given = 0; given < 2; given++) {
		strata_session *s = open_budgeted(2, given ? 64ull << 20 : 0);
		const strata_plan *p = strata_session_plan(s);
		strata_backend_memory mem;
		assert_int_equal(strata_backend_memory_info(strata_session_backend(s),
							    &mem, &err),
				 STRATA_OK);
		assert_true(mem.total_bytes == strata_plan_device_budget_bytes(p));
		if (given)
			assert_true(mem.total_bytes == 64ull << 20);
		assert_true(mem.total_bytes - mem.free_bytes <=
			    strata_plan_device_total(p));
		uint64_t total = strata_plan_device_total(p);
		strata_session_close(s);
		s = open_budgeted(2, total);
		assert_int_equal(strata_backend_memory_info(strata_session_backend(s),
							    &mem, &err),
				 STRATA_OK);
		assert_true(mem.total_bytes == total);
		strata_session_close(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parts_match_the_options),
		cmocka_unit_test(test_source_is_the_forward_pass_own),
		cmocka_unit_test(test_cpu_backend_bound_is_the_device_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
