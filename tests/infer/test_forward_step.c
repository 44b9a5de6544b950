/* test_forward_step.c - one decode step of several sequences at once
 * (issue 9's --batch B): on every reference model and stories260K, each
 * row of a step is bit for bit the one-sequence decode of that token, for
 * sequences at different positions, in any order and any subset, with host
 * buffers and with device-mode buffers (CPU backend) under a streamed
 * window; a step acquires each layer's weights once whatever the row count;
 * the device bytes count every sequence's KV cache and fit the plan's
 * batch; bad step lists are refused with nothing changed; OOM loop
 * (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define GIB (1ull << 30)
#define CONTEXT 48u
#define BATCH 8u
#define SEQS 4u
#define DECODES 4u /* per sequence over the schedule below */

/* Which sequences each step runs, in that row order: all, subsets,
 * reversed; every sequence gets DECODES tokens in all. */
static const uint32_t schedule[][SEQS + 1] = {
	{4, 0, 1, 2, 3}, {2, 3, 1}, {1, 2}, {4, 3, 0, 2, 1},
	{3, 1, 0, 3},	 {1, 0},    {1, 2},
};
#define STEPS (sizeof schedule / sizeof *schedule)

/* Prompt k: the reference tokens rotated by k, 3 + 2k of them, so the
 * sequences differ in content and in position. */
static uint32_t prompt_of(const ref_data *r, uint32_t k, int32_t *out)
{
	uint32_t n = 3 + 2 * k;
	for (uint32_t i = 0; i < n; i++)
		out[i] = r->tokens[(i + k) % r->n_tokens];
	return n;
}

/* The token sequence k feeds at its j-th decode. */
static int32_t token_of(const ref_data *r, uint32_t k, uint32_t j)
{
	return r->tokens[(5 * k + 3 * j + 1) % r->n_tokens];
}

/* want[k][j] (vocab): logits of sequence k's j-th decode, one sequence at
 * a time through strata_forward_run. */
static void one_at_a_time(const ref_open *m, const ref_data *r, float *want)
{
	strata_error err;
	int32_t p[16];
	ref_pass pass;
	ref_pass_open("one at a time", 2,
		      (strata_forward_options){.hp = &m->hp, .src = &m->src,
					       .context = CONTEXT,
					       .batch = BATCH},
		      &pass);
	strata_forward *f = pass.f;
	for (uint32_t k = 0; k < SEQS; k++) {
		uint32_t n = prompt_of(r, k, p);
		strata_forward_reset(f);
		assert_int_equal(strata_forward_run(f, p, n, 0, NULL, NULL,
						    &err),
				 STRATA_OK);
		for (uint32_t j = 0; j < DECODES; j++) {
			int32_t t = token_of(r, k, j);
			float *row = want + ((uint64_t)k * DECODES + j) * r->vocab;
			assert_int_equal(strata_forward_run(f, &t, 1, n + j,
							    NULL, row, &err),
					 STRATA_OK);
		}
	}
	ref_pass_close(&pass);
}

/* Prefills each sequence of f, then runs the schedule through
 * strata_forward_step and compares every row with want. */
static void stepped(const char *name, strata_forward *f, const ref_data *r,
		    const float *want)
{
	strata_error err;
	int32_t p[16], toks[SEQS];
	uint32_t done[SEQS] = {0}, n[SEQS];
	float *got = strata_alloc((uint64_t)SEQS * r->vocab * sizeof *got);
	assert_non_null(got);
	for (uint32_t k = 0; k < SEQS; k++) {
		n[k] = prompt_of(r, k, p);
		assert_int_equal(strata_forward_select(f, k, &err), STRATA_OK);
		assert_int_equal(strata_forward_run(f, p, n[k], 0, NULL, NULL,
						    &err),
				 STRATA_OK);
	}
	for (size_t s = 0; s < STEPS; s++) {
		uint32_t count = schedule[s][0];
		const uint32_t *seqs = &schedule[s][1];
		for (uint32_t i = 0; i < count; i++)
			toks[i] = token_of(r, seqs[i], done[seqs[i]]);
		if (strata_forward_step(f, seqs, toks, count, got, &err))
			fail_msg("%s step %zu: %s", name, s, err.message);
		for (uint32_t i = 0; i < count; i++) {
			uint32_t k = seqs[i];
			const float *w = want + ((uint64_t)k * DECODES +
						 done[k]) * r->vocab;
			if (memcmp(got + (uint64_t)i * r->vocab, w,
				   r->vocab * sizeof *got))
				fail_msg("%s step %zu row %u (sequence %u): "
					 "logits differ from its own decode",
					 name, s, i, k);
			done[k]++;
			assert_int_equal(strata_forward_position_of(f, k),
					 n[k] + done[k]);
		}
	}
	for (uint32_t k = 0; k < SEQS; k++)
		assert_int_equal(done[k], DECODES);
	strata_free(got);
}

/* Device-mode buffers on the CPU backend under a host:1 window (weights
 * streamed one layer at a time): the same bits, and the arena is the
 * computed size, every sequence's cache included, within the plan. */
static void stepped_device(const char *name, ref_open *m, const ref_data *r,
			   const float *want)
{
	strata_error err;
	strata_plan_options po = {.mode = STRATA_RESIDENCY_HOST, .host_depth = 1,
				  .has_device_budget = true, .device_budget_bytes = GIB,
				  .has_host_budget = true, .host_budget_bytes = GIB};
	strata_weight_store *ws;
	uint64_t one, need;
	assert_int_equal(strata_weight_store_create(m->cat, NULL, &ws, &err),
			 STRATA_OK);
	ref_window w;
	ref_window_open(m, ws, STRATA_PLAN_DEVICE_CPU, po, 0, name, &w);
	ref_pass p;
	ref_pass_open(name, 2,
		      (strata_forward_options){.hp = &m->hp, .backend = w.b,
					       .src = &w.src,
					       .context = CONTEXT,
					       .batch = BATCH,
					       .sequences = SEQS},
		      &p);
	stepped(name, p.f, r, want);
	assert_int_equal(strata_forward_device_bytes(
				 &(strata_forward_options){.hp = &m->hp,
							   .context = CONTEXT,
							   .batch = BATCH,
							   .sequences = SEQS},
				 &need, &err),
			 STRATA_OK);
	assert_int_equal(strata_forward_device_bytes(
				 &(strata_forward_options){.hp = &m->hp,
							   .context = CONTEXT,
							   .batch = BATCH},
				 &one, &err),
			 STRATA_OK);
	uint64_t cache = 2ull * m->hp.layers * CONTEXT * m->hp.kv_heads *
			 m->hp.head_dim * sizeof(float);
	assert_true(need >= one + (SEQS - 1) * cache);
	assert_int_equal(need,
			 ref_planned_buffers(&m->hp, CONTEXT, SEQS, BATCH));
	strata_arena_stats as;
	strata_forward_arena_stats(p.f, &as);
	assert_true(as.capacity_bytes == need);
	ref_pass_close(&p);
	ref_window_close(&w);
	strata_weight_store_destroy(ws);
}

typedef void check_fn(const char *name, const char *path,
		      const ref_data *r);

/* check on every reference model (its reference tokens), then on
 * stories260K with `story` as its tokens. */
static void every_model(check_fn *check, const int32_t *story, uint32_t n)
{
	char path[1024];
	ref_data r;
	for (int i = 0; i < REF_MODEL_COUNT; i++) {
		ref_path(path, sizeof path, ref_models[i], NULL);
		ref_load(ref_models[i], &r);
		check(ref_models[i], path, &r);
		ref_free(&r);
	}
	memset(&r, 0, sizeof r);
	r.n_tokens = n;
	memcpy(r.tokens, story, n * sizeof *story);
	r.vocab = 512;
	check("stories260K", STRATA_SOURCE_DIR "/models/stories260K", &r);
}

static void check_model(const char *name, const char *path,
			const ref_data *r)
{
	ref_open m;
	ref_open_model(path, &m);
	float *want = strata_alloc((uint64_t)SEQS * DECODES * r->vocab *
				   sizeof *want);
	assert_non_null(want);
	one_at_a_time(&m, r, want);
	ref_pass p;
	ref_pass_open(name, 2,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = CONTEXT,
					       .batch = BATCH,
					       .sequences = SEQS},
		      &p);
	stepped(name, p.f, r, want);
	ref_pass_close(&p);
	stepped_device(name, &m, r, want);
	strata_free(want);
	ref_close_model(&m);
}

static void test_step_rows_are_one_sequence_decodes(void **state)
{
	(void)state;
	/* stories260K: tokens of "Once upon a time" and after */
	static const int32_t story[] = {1, 403, 407, 261, 378, 1076 % 512,
					 29, 442, 395, 263, 267, 312};
	every_model(check_model, story, sizeof story / sizeof *story);
}

/* ------------------------------------------------------------------------ */

/* The loaded source with a count of acquires. */
typedef struct counting {
	const strata_infer_source *inner;
	uint64_t acquires;
} counting;

static strata_status count_acquire(void *user, uint32_t layer,
				   strata_infer_layer *out, strata_error *err)
{
	counting *c = user;
	c->acquires++;
	return c->inner->ops->acquire(c->inner->user, layer, out, err);
}

static strata_status count_release(void *user, uint32_t layer,
				   strata_error *err)
{
	counting *c = user;
	return c->inner->ops->release(c->inner->user, layer, err);
}

static const strata_infer_source_ops counting_ops = {count_acquire,
						     count_release};

/* Four sequences in one step cost one pass of the weights, as one does;
 * four one-sequence decodes cost four. */
static void test_step_acquires_each_layer_once(void **state)
{
	(void)state;
	ref_open m;
	ref_open_model(STRATA_SOURCE_DIR "/models/stories260K", &m);
	counting cnt = {.inner = &m.src};
	strata_infer_source src = {.ops = &counting_ops, .user = &cnt,
				   .statics = m.src.statics};
	strata_error err;
	ref_pass p;
	ref_pass_open("stories260K", 1,
		      (strata_forward_options){.hp = &m.hp, .src = &src,
					       .context = 16, .batch = 4,
					       .sequences = SEQS},
		      &p);
	strata_forward *f = p.f;
	uint32_t seqs[SEQS] = {0, 1, 2, 3};
	int32_t toks[SEQS] = {1, 50, 100, 200};
	float *logits = strata_alloc((uint64_t)SEQS * m.hp.vocab * 4);
	assert_int_equal(strata_forward_step(f, seqs, toks, SEQS, logits,
					     &err),
			 STRATA_OK);
	assert_int_equal(cnt.acquires, m.hp.layers);
	for (uint32_t k = 0; k < SEQS; k++) {
		assert_int_equal(strata_forward_select(f, k, &err), STRATA_OK);
		assert_int_equal(strata_forward_run(f, &toks[k], 1, 1, NULL,
						    logits, &err),
				 STRATA_OK);
	}
	assert_int_equal(cnt.acquires, (1 + SEQS) * m.hp.layers);
	strata_free(logits);
	ref_pass_close(&p);
	ref_close_model(&m);
}

/* A bad list changes no position; one sequence's full context is its own
 * error; the selection is checked. */
static void test_step_refuses_bad_lists(void **state)
{
	(void)state;
	ref_open m;
	ref_open_model(STRATA_SOURCE_DIR "/models/stories260K", &m);
	strata_error err;
	ref_pass p;
	ref_pass_open("stories260K", 1,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = 2, .batch = 4,
					       .sequences = 3},
		      &p);
	strata_forward *f = p.f;
	assert_int_equal(strata_forward_sequences(f), 3);
	float *logits = strata_alloc((uint64_t)3 * m.hp.vocab * 4);
	uint32_t dup[2] = {1, 1}, past[2] = {0, 3}, ok[3] = {2, 0, 1};
	int32_t toks[3] = {5, 6, 7}, bad[3] = {5, -1, 7};
	assert_int_equal(strata_forward_step(f, dup, toks, 2, logits, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "listed twice"));
	assert_int_equal(strata_forward_step(f, past, toks, 2, logits, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_forward_step(f, ok, toks, 0, logits, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_forward_step(f, ok, toks, 4, logits, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_forward_step(f, ok, bad, 3, logits, &err),
			 STRATA_E_INFER_TOKEN);
	for (uint32_t k = 0; k < 3; k++)
		assert_int_equal(strata_forward_position_of(f, k), 0);
	/* context 2: two steps fit, the third is refused for sequence 0 */
	assert_int_equal(strata_forward_step(f, ok, toks, 3, logits, &err),
			 STRATA_OK);
	assert_int_equal(strata_forward_step(f, ok, toks, 1, logits, &err),
			 STRATA_OK);
	assert_int_equal(strata_forward_step(f, ok, toks, 3, logits, &err),
			 STRATA_E_INFER_CONTEXT);
	assert_non_null(strstr(err.message, "sequence 2"));
	assert_int_equal(strata_forward_position_of(f, 0), 1);
	assert_int_equal(strata_forward_position_of(f, 2), 2);
	assert_int_equal(strata_forward_select(f, 3, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_forward_select(f, 1, &err), STRATA_OK);
	assert_int_equal(strata_forward_position(f), 1);
	/* too many sequences */
	assert_int_equal(
		strata_forward_create(
			&(strata_forward_options){
				.hp = &m.hp,
				.compute = p.c,
				.src = &m.src,
				.context = 2,
				.batch = 4,
				.sequences = STRATA_FORWARD_MAX_SEQUENCES + 1},
			&f, &err),
		STRATA_E_INVALID_ARG);
	strata_free(logits);
	ref_pass_close(&p);
	ref_close_model(&m);
}

/* Every allocation of a several-sequence forward pass fails cleanly. */
static void test_step_allocation_failures(void **state)
{
	(void)state;
	ref_open m;
	ref_open_model(STRATA_SOURCE_DIR "/models/stories260K", &m);
	strata_error err;
	uint32_t seqs[2] = {1, 0};
	int32_t toks[2] = {3, 4};
	float *logits = strata_alloc((uint64_t)2 * m.hp.vocab * 4);
	for (long n = 0;; n++) {
		strata_compute *c = NULL;
		strata_forward *f = NULL;
		strata_alloc_fail_after(n);
		strata_status st = strata_compute_create(&strata_cpu_kernel_ops,
							 1, &c, &err);
		if (!st)
			st = strata_forward_create(
				&(strata_forward_options){.hp = &m.hp,
							  .compute = c,
							  .src = &m.src,
							  .context = 8,
							  .batch = 2,
							  .sequences = 2},
				&f, &err);
		if (!st)
			st = strata_forward_step(f, seqs, toks, 2, logits,
						 &err);
		strata_alloc_fail_after(-1);
		strata_forward_destroy(f);
		strata_compute_destroy(c);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM && st != STRATA_E_THREAD)
			fail_msg("allocation %ld: %s %s", n,
				 strata_status_name(st), err.message);
		assert_true(n < 10000);
	}
	strata_free(logits);
	ref_close_model(&m);
}

/* ------------------------------------------------------------------------ */
/* Mixed steps: prompt chunks beside decode tokens (issue 19)               */
/* ------------------------------------------------------------------------ */

#define MIX_TOL 1e-5f

/* want (vocab): the logits of tokens[0..n)'s last position after
 * prefix[0..np), one sequence through strata_forward_run. */
static void run_alone(const ref_open *m, const int32_t *prefix, uint32_t np,
		      const int32_t *tokens, uint32_t n, float *want)
{
	strata_error err;
	ref_pass p;
	ref_pass_open("alone", 2,
		      (strata_forward_options){.hp = &m->hp, .src = &m->src,
					       .context = CONTEXT,
					       .batch = BATCH},
		      &p);
	strata_forward *f = p.f;
	if (np)
		assert_int_equal(strata_forward_run(f, prefix, np, 0, NULL,
						    NULL, &err),
				 STRATA_OK);
	assert_int_equal(strata_forward_run(f, tokens, n, np, NULL, want, &err),
			 STRATA_OK);
	ref_pass_close(&p);
}

/* Two mixed steps on four sequences: sequences 0 and 1 (prefilled) decode
 * a token each while 2 reads a 6-token prompt whole and 3 the first 3 of
 * its 5 (no logits wanted), then 3 reads its last 2 beside 2's first
 * decode. Every logits row wanted is its sequence's own run to MIX_TOL. */
static void check_mixed(const char *name, const char *path, const ref_data *r)
{
	ref_open m;
	ref_open_model(path, &m);
	strata_error err;
	ref_pass p;
	ref_pass_open(name, 2,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = CONTEXT,
					       .batch = BATCH + 4,
					       .sequences = SEQS},
		      &p);
	strata_forward *f = p.f;
	assert_int_equal(strata_forward_step_rows(f), BATCH + 4);
	int32_t t[SEQS][8];
	for (uint32_t k = 0; k < SEQS; k++)
		for (uint32_t i = 0; i < 8; i++)
			t[k][i] = r->tokens[(3 * k + i) % r->n_tokens];
	for (uint32_t k = 0; k < 2; k++) {
		assert_int_equal(strata_forward_select(f, k, &err), STRATA_OK);
		assert_int_equal(strata_forward_run(f, t[k], 4, 0, NULL, NULL,
						    &err),
				 STRATA_OK);
	}
	uint64_t v = r->vocab;
	float *got = strata_alloc(4 * v * sizeof *got);
	float *want = strata_alloc(v * sizeof *want);
	assert_non_null(got);
	assert_non_null(want);
	const strata_forward_segment one[] = {
		{0, &t[0][4], 1, true}, {2, t[2], 6, true},
		{1, &t[1][4], 1, true}, {3, t[3], 3, false}};
	if (strata_forward_step_segments(f, one, 4, got, &err))
		fail_msg("%s: %s", name, err.message);
	const uint32_t pos1[SEQS] = {5, 5, 6, 3};
	for (uint32_t k = 0; k < SEQS; k++)
		assert_int_equal(strata_forward_position_of(f, k), pos1[k]);
	/* rows: 0's decode, 2's prompt, 1's decode (3 wanted none) */
	const uint32_t seq_of[3] = {0, 2, 1};
	for (uint32_t i = 0; i < 3; i++) {
		uint32_t k = seq_of[i];
		if (k == 2)
			run_alone(&m, NULL, 0, t[2], 6, want);
		else
			run_alone(&m, t[k], 4, &t[k][4], 1, want);
		double d = ref_max_diff(got + i * v, want, v);
		if (d > MIX_TOL)
			fail_msg("%s: step 1 row %u (sequence %u) is %g from "
				 "its own run", name, i, k, d);
	}
	const strata_forward_segment two[] = {{3, &t[3][3], 2, true},
					      {2, &t[2][6], 1, true}};
	if (strata_forward_step_segments(f, two, 2, got, &err))
		fail_msg("%s: %s", name, err.message);
	run_alone(&m, NULL, 0, t[3], 5, want);
	assert_true(ref_max_diff(got, want, v) <= MIX_TOL);
	run_alone(&m, t[2], 6, &t[2][6], 1, want);
	assert_true(ref_max_diff(got + v, want, v) <= MIX_TOL);
	/* too many rows, an empty segment: refused, nothing moves */
	int32_t many[BATCH + 5] = {0};
	const strata_forward_segment big[] = {{0, many, BATCH + 4, true},
					      {1, many, 1, true}};
	assert_int_equal(strata_forward_step_segments(f, big, 2, got, &err),
			 STRATA_E_INVALID_ARG);
	const strata_forward_segment empty[] = {{0, many, 0, true}};
	assert_int_equal(strata_forward_step_segments(f, empty, 1, got, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_forward_position_of(f, 0), 5);
	strata_free(got);
	strata_free(want);
	ref_pass_close(&p);
	ref_close_model(&m);
}

static void test_step_segments_match_own_runs(void **state)
{
	(void)state;
	static const int32_t story[] = {1, 403, 407, 261, 378, 29,
					 442, 395, 263, 267, 312, 40};
	every_model(check_mixed, story, sizeof story / sizeof *story);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_step_rows_are_one_sequence_decodes),
		cmocka_unit_test(test_step_acquires_each_layer_once),
		cmocka_unit_test(test_step_refuses_bad_lists),
		cmocka_unit_test(test_step_allocation_failures),
		cmocka_unit_test(test_step_segments_match_own_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
