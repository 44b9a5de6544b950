/* test_kv_type.c - the forward pass with an f16 or bf16 KV cache
 * (--kv-type) on the ten reference models: the logits of every position
 * within the tolerance derived below of the f32 cache's; decode one token
 * at a time and prefill in chunks bit for bit the one-pass prefill over
 * the same cache type; a step of several sequences bit for bit each one's
 * own decode; the forward pass's device bytes count the cache at its
 * element size; a type no cache holds refused (layer: infer).
 *
 * The tolerance. Storing K and V rounds each element to relative u (f16:
 * 2^-11, bf16: 2^-8, half an ulp). A layer's attention output is a convex
 * combination of value rows, so rounding V moves it by at most u max|v|;
 * rounding K moves each score by at most u |q . k| scale, which moves the
 * softmax weights by about that relative amount (scores of order 1 in
 * these models): each layer adds an error of at most about 2u relative to
 * its activations, and the residual stream carries every layer's error to
 * the head, where they add: L layers and the head, 2u (L + 1) of the
 * logits' size, tol = 2 u (L + 1) max(1, max |logit|). Measured (printed
 * below): 1.1 to 2.8 u max|logit|, against the tolerance's 6 to 12. A bug
 * (a row at the wrong position, a wrong conversion) moves logits by their
 * own size, far outside it.  */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define CONTEXT 64u

static const strata_weight_type kv_types[] = {STRATA_WEIGHT_F16,
					      STRATA_WEIGHT_BF16};

static strata_compute *cpu(void)
{
	strata_compute *c;
	strata_error err;
	assert_int_equal(strata_compute_create(&strata_cpu_kernel_ops, 2, &c,
					       &err),
			 STRATA_OK);
	return c;
}

static strata_forward *make(const ref_open *m, strata_compute *c,
			    uint32_t batch, uint32_t sequences,
			    strata_weight_type kv)
{
	strata_forward *f = NULL;
	strata_error err;
	strata_forward_options o = {.hp = &m->hp, .compute = c, .src = &m->src,
				    .context = CONTEXT, .batch = batch,
				    .sequences = sequences, .kv_type = kv};
	if (strata_forward_create(&o, &f, &err))
		fail_msg("forward pass with a %s cache: %s",
			 strata_weight_type_name(kv), err.message);
	return f;
}

/* Logits of every position of r's tokens, one pass (or chunks of
 * `batch`) over a cache of kv. */
static void prefill(const ref_open *m, const ref_data *r, uint32_t batch,
		    strata_weight_type kv, float *out)
{
	strata_compute *c = cpu();
	strata_forward *f = make(m, c, batch, 1, kv);
	strata_error err;
	assert_int_equal(strata_forward_run(f, r->tokens, r->n_tokens, 0, out,
					    NULL, &err),
			 STRATA_OK);
	strata_forward_destroy(f);
	strata_compute_destroy(c);
}

/* The same one token at a time. */
static void decode(const ref_open *m, const ref_data *r,
		   strata_weight_type kv, float *out)
{
	strata_compute *c = cpu();
	strata_forward *f = make(m, c, 1, 1, kv);
	strata_error err;
	for (uint32_t i = 0; i < r->n_tokens; i++)
		assert_int_equal(strata_forward_run(f, r->tokens + i, 1, i,
						    NULL,
						    out + (uint64_t)i * r->vocab,
						    &err),
				 STRATA_OK);
	strata_forward_destroy(f);
	strata_compute_destroy(c);
}

/* Two sequences: sequence 1 takes the first half of the tokens, sequence
 * 0 the tokens from 3 on; then steps of both (in the order 1, 0) over the
 * rest of each: every row the bits of that sequence's own decode. */
static void stepped(const char *name, const ref_open *m, const ref_data *r,
		    strata_weight_type kv)
{
	const uint32_t half = r->n_tokens / 2, start0 = 3;
	const uint32_t steps = r->n_tokens - start0 - half; /* both have them */
	uint64_t v = r->vocab;
	float *want0 = strata_alloc(steps * v * 4), *want1 = strata_alloc(steps * v * 4);
	float *got = strata_alloc(2 * v * 4);
	assert_true(want0 && want1 && got);
	strata_compute *c = cpu();
	strata_error err;
	/* one sequence at a time */
	const int32_t *seq_tokens[2] = {r->tokens + start0, r->tokens};
	float *want[2] = {want0, want1};
	for (int s = 0; s < 2; s++) {
		strata_forward *f = make(m, c, 8, 1, kv);
		assert_int_equal(strata_forward_run(f, seq_tokens[s], half, 0,
						    NULL, NULL, &err),
				 STRATA_OK);
		for (uint32_t j = 0; j < steps; j++)
			assert_int_equal(strata_forward_run(
						 f, seq_tokens[s] + half + j, 1,
						 half + j, NULL,
						 want[s] + j * v, &err),
					 STRATA_OK);
		strata_forward_destroy(f);
	}
	strata_forward *f = make(m, c, 8, 2, kv);
	for (uint32_t s = 0; s < 2; s++) {
		assert_int_equal(strata_forward_select(f, s, &err), STRATA_OK);
		assert_int_equal(strata_forward_run(f, seq_tokens[s], half, 0,
						    NULL, NULL, &err),
				 STRATA_OK);
	}
	const uint32_t order[2] = {1, 0};
	for (uint32_t j = 0; j < steps; j++) {
		int32_t toks[2] = {seq_tokens[1][half + j],
				   seq_tokens[0][half + j]};
		assert_int_equal(strata_forward_step(f, order, toks, 2, got, &err),
				 STRATA_OK);
		if (memcmp(got, want1 + j * v, v * 4) ||
		    memcmp(got + v, want0 + j * v, v * 4))
			fail_msg("%s, %s cache: step %u differs from each "
				 "sequence's own decode",
				 name, strata_weight_type_name(kv), j);
	}
	strata_forward_destroy(f);
	strata_compute_destroy(c);
	strata_free(want0);
	strata_free(want1);
	strata_free(got);
}

static double tolerance(strata_weight_type kv, uint32_t layers,
			const float *logits, uint64_t n)
{
	double u = kv == STRATA_WEIGHT_F16 ? 0x1p-11 : 0x1p-8, big = 1;
	for (uint64_t i = 0; i < n; i++)
		big = fabs(logits[i]) > big ? fabs(logits[i]) : big;
	return 2 * u * (layers + 1) * big;
}

static void check_model(const char *name)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	ref_open m;
	ref_open_model(path, &m);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *f32 = strata_alloc(cells * 4), *typed = strata_alloc(cells * 4);
	float *other = strata_alloc(cells * 4);
	assert_true(f32 && typed && other);
	prefill(&m, &r, CONTEXT, STRATA_WEIGHT_F32, f32);
	for (size_t t = 0; t < 2; t++) {
		strata_weight_type kv = kv_types[t];
		prefill(&m, &r, CONTEXT, kv, typed);
		double d = ref_max_diff(typed, f32, cells);
		double tol = tolerance(kv, m.hp.layers, f32, cells);
		print_message("%-22s %-4s KV: max |dlogit| %.2e (tolerance "
			      "%.2e)\n",
			      name, strata_weight_type_name(kv), d, tol);
		if (!(d <= tol))
			fail_msg("%s, %s cache: max |dlogit| %.3g > %.3g",
				 name, strata_weight_type_name(kv), d, tol);
		/* the rounding changed something: the cache is the type */
		assert_true(d > 0);
		decode(&m, &r, kv, other);
		if (memcmp(other, typed, cells * 4))
			fail_msg("%s, %s cache: decode differs from prefill",
				 name, strata_weight_type_name(kv));
		prefill(&m, &r, 5, kv, other);
		if (ref_max_diff(other, typed, cells) > 1e-5)
			fail_msg("%s, %s cache: chunks of 5 differ from one "
				 "pass",
				 name, strata_weight_type_name(kv));
		stepped(name, &m, &r, kv);
	}
	strata_free(f32);
	strata_free(typed);
	strata_free(other);
	ref_close_model(&m);
	ref_free(&r);
}

static void test_every_reference_model(void **state)
{
	(void)state;
	for (size_t i = 0; i < REF_MODEL_COUNT; i++)
		check_model(ref_models[i]);
}

/* The device bytes count the cache at its element size: exactly the f32
 * cache's half less, plus the step's f32 key and value rows (which the
 * plan's key and value buffers cover). */
static void test_device_bytes(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, ref_models[0], NULL);
	ref_open m;
	ref_open_model(path, &m);
	strata_error err;
	uint64_t bytes[3];
	const strata_weight_type all[3] = {STRATA_WEIGHT_F32, STRATA_WEIGHT_F16,
					   STRATA_WEIGHT_BF16};
	for (int i = 0; i < 3; i++) {
		strata_forward_options o = {.hp = &m.hp, .src = &m.src,
					    .context = CONTEXT, .batch = 4,
					    .kv_type = all[i]};
		assert_int_equal(strata_forward_device_bytes(&o, &bytes[i], &err),
				 STRATA_OK);
	}
	uint64_t kv_f32 = (uint64_t)m.hp.layers * CONTEXT * m.hp.kv_heads *
			  m.hp.head_dim * 4 * 2;
	uint64_t rows = 4ull * m.hp.kv_heads * m.hp.head_dim * 4;
	rows = (rows + STRATA_ALIGN - 1) / STRATA_ALIGN * STRATA_ALIGN;
	assert_int_equal(bytes[1], bytes[2]);
	/* each cache block and each row buffer is aligned on its own */
	assert_true(bytes[0] - kv_f32 / 2 + 2 * rows >= bytes[1]);
	assert_true(bytes[1] + kv_f32 / 2 >= bytes[0] + 2 * rows -
						     4 * STRATA_ALIGN);
	assert_true(bytes[1] < bytes[0]);
	uint64_t planned = ref_planned_buffers(&m.hp, CONTEXT, 1, 4);
	assert_true(bytes[1] <= planned);
	ref_close_model(&m);
}

/* A session (as strata run opens one) with each cache type: the plan's
 * KV at the type's bytes, and the forward pass's arena at its peak, a run
 * having decoded past the prompt, exactly the plan's KV cache and
 * workspace. */
static void test_session_within_plan(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, ref_models[2], NULL);
	const strata_weight_type all[3] = {STRATA_WEIGHT_F32, STRATA_WEIGHT_F16,
					   STRATA_WEIGHT_BF16};
	uint64_t kv32 = 0;
	for (int i = 0; i < 3; i++) {
		strata_session_options so = {.model_path = path, .threads = 2,
					     .positions = 40, .prefill = 8};
		so.plan.mode = STRATA_RESIDENCY_RESIDENT;
		so.plan.shape.kv_type = all[i];
		strata_session *s = NULL;
		strata_error err;
		if (strata_session_open(&so, &s, &err))
			fail_msg("%s: %s", strata_weight_type_name(all[i]),
				 err.message);
		const strata_plan_memory *pm =
			strata_plan_get_memory(strata_session_plan(s));
		assert_int_equal(pm->kv_element_bytes, i ? 2 : 4);
		if (i == 0)
			kv32 = pm->kv_cache_bytes;
		assert_int_equal(pm->kv_cache_bytes * (i ? 2 : 1), kv32);
		strata_forward *f = strata_session_forward(s);
		int32_t toks[8] = {1, 5, 9, 12, 7, 3, 2, 4};
		float *logits = strata_alloc(
			(uint64_t)strata_session_hparams(s)->vocab * 4);
		assert_non_null(logits);
		assert_int_equal(strata_forward_run(f, toks, 8, 0, NULL, logits,
						    &err),
				 STRATA_OK);
		for (uint32_t p = 8; p < 20; p++)
			assert_int_equal(strata_forward_run(f, &toks[p % 8], 1, p,
							    NULL, logits, &err),
					 STRATA_OK);
		strata_arena_stats a;
		strata_forward_arena_stats(f, &a);
		print_message("%-4s KV: forward arena peak %llu of %llu planned "
			      "(KV %llu)\n",
			      strata_weight_type_name(all[i]),
			      (unsigned long long)a.high_water_bytes,
			      (unsigned long long)(pm->kv_cache_bytes +
						   pm->workspace_bytes),
			      (unsigned long long)pm->kv_cache_bytes);
		/* the plan's memory model is exact on the CPU */
		assert_int_equal(a.high_water_bytes,
				 pm->kv_cache_bytes + pm->workspace_bytes);
		strata_free(logits);
		strata_session_close(s);
	}
}

static void test_refusals(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, ref_models[0], NULL);
	ref_open m;
	ref_open_model(path, &m);
	strata_compute *c = cpu();
	strata_forward *f = NULL;
	strata_error err;
	strata_forward_options o = {.hp = &m.hp, .compute = c, .src = &m.src,
				    .context = CONTEXT, .batch = 4,
				    .kv_type = STRATA_WEIGHT_Q8_0};
	assert_int_equal(strata_forward_create(&o, &f, &err),
			 STRATA_E_UNSUPPORTED);
	assert_null(f);
	assert_non_null(strstr(err.message, "q8_0"));
	assert_non_null(strstr(err.fix, "--kv-type"));
	strata_kv_cache_shape s = {.layers = 2, .kv_dim = 8, .context = 4,
				   .sequences = 1, .kv_type = STRATA_WEIGHT_Q4_0};
	uint64_t bytes;
	assert_int_equal(strata_kv_cache_keys_bytes(&s, &bytes, &err),
			 STRATA_E_UNSUPPORTED);
	s.kv_type = STRATA_WEIGHT_BF16;
	assert_int_equal(strata_kv_cache_keys_bytes(&s, &bytes, &err),
			 STRATA_OK);
	assert_int_equal(bytes, 2 * 8 * 4 * 2);
	strata_compute_destroy(c);
	ref_close_model(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_reference_model),
		cmocka_unit_test(test_device_bytes),
		cmocka_unit_test(test_session_within_plan),
		cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
