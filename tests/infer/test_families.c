/* test_families.c - the families beyond llama (Qwen3, Gemma 2, Gemma 3,
 * Phi-3, and the mixture-of-experts Mixtral, Qwen3-MoE with and without
 * normalised top-k, Qwen2-MoE with its shared expert; tests/data/families)
 * against transformers' float64
 * logits: every position within 1e-4 with weights as f32 and as stored,
 * greedy text equal, one-token decode and a several-sequence step equal to
 * the prefill, and the residency window (host:1, disk) equal to the plain
 * loader (to 1e-4: stored and expanded products round apart). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define TOLERANCE 1e-4
#define CONTEXT 64 /* <= phi3_longrope's original context: short factors */

/* A forward pass on the CPU over src with its compute context. */
static void make(const strata_infer_hparams *hp,
		 const strata_infer_source *src, uint32_t sequences,
		 ref_pass *p)
{
	ref_pass_open("family", 2,
		      (strata_forward_options){.hp = hp, .src = src,
					       .context = CONTEXT, .batch = 8,
					       .sequences = sequences},
		      p);
}

/* Prefill logits and greedy tokens through a pass over src, every
 * position within `tolerance` of want (ref_run_compare); returns the
 * largest difference. */
static double run(const char *what, const strata_infer_hparams *hp,
		  const strata_infer_source *src, const ref_data *r,
		  const float *want, double tolerance, float *logits,
		  int32_t *greedy)
{
	ref_pass p;
	make(hp, src, 1, &p);
	double worst = ref_run_compare(what, p.f, r, want, tolerance, logits,
				       greedy);
	ref_pass_close(&p);
	return worst;
}

/* Every position within TOLERANCE of transformers' logits. */
static void check_logits(const char *name, const char *how,
			 const strata_infer_hparams *hp,
			 const strata_infer_source *src, const ref_data *r,
			 float *logits, int32_t *greedy)
{
	char what[160];
	snprintf(what, sizeof what, "%s (%s)", name, how);
	double worst = run(what, hp, src, r, r->logits, TOLERANCE, logits,
			   greedy);
	print_message("%-20s %-7s max |dlogit| %.2e\n", name, how, worst);
}

static void check_greedy(const char *name, const int32_t *got,
			 const ref_data *r)
{
	assert_int_equal(got[0], r->n_greedy);
	for (uint32_t i = 0; i < r->n_greedy; i++)
		if (got[1 + i] != r->greedy[i])
			fail_msg("%s: greedy token %u is %d, transformers chose "
				 "%d",
				 name, i, got[1 + i], r->greedy[i]);
}

/* Decode one token at a time, and two sequences in one step: each row
 * as the prefill's. */
static void check_decode(const char *name, ref_open *m, const ref_data *r,
			 const float *prefill)
{
	ref_pass p;
	make(&m->hp, &m->src, 2, &p);
	strata_forward *f = p.f;
	strata_error err;
	float *row = strata_alloc(2 * r->vocab * sizeof *row);
	assert_non_null(row);
	for (uint32_t i = 0; i < r->n_tokens; i++) {
		const uint32_t seqs[2] = {0, 1};
		const int32_t toks[2] = {r->tokens[i], r->tokens[i]};
		assert_int_equal(strata_forward_step(f, seqs, toks, 2, row,
						     &err),
				 STRATA_OK);
		for (int s = 0; s < 2; s++) {
			double d = ref_max_diff(row + (uint64_t)s * r->vocab,
						prefill + (uint64_t)i * r->vocab,
						r->vocab);
			if (!(d <= 1e-5))
				fail_msg("%s: step row %d position %u differs "
					 "from the prefill by %.3g",
					 name, s, i, d);
		}
	}
	strata_free(row);
	ref_pass_close(&p);
}

/* host:1 and disk through the residency engine, as a run plans them. */
static void check_window(const char *name, ref_open *m, const ref_data *r,
			 const float *plain)
{
	const strata_plan_options modes[2] = {
		{.mode = STRATA_RESIDENCY_HOST, .host_depth = 1,
		 .has_device_budget = true, .device_budget_bytes = 1ull << 30,
		 .has_host_budget = true, .host_budget_bytes = 1ull << 30},
		{.mode = STRATA_RESIDENCY_DISK, .has_device_budget = true,
		 .device_budget_bytes = 1ull << 30, .has_host_budget = true},
	};
	uint64_t cells = (uint64_t)r->n_tokens * r->vocab;
	float *got = strata_alloc(cells * sizeof *got);
	int32_t greedy[65];
	strata_error err;
	strata_weight_store *ws;
	assert_int_equal(strata_weight_store_create(m->cat, NULL, &ws, &err),
			 STRATA_OK);
	for (int i = 0; i < 2; i++) {
		char what[160];
		snprintf(what, sizeof what, "%s window", name);
		ref_window w;
		ref_window_open(m, ws, STRATA_PLAN_DEVICE_CPU, modes[i], 0, what,
				&w);
		/* the window keeps matrices as stored (bf16 products), the
		 * plain loader expands them: equal to float rounding */
		snprintf(what, sizeof what,
			 "%s: the %s window's logits against the plain loader's",
			 name, i ? "disk" : "host:1");
		run(what, &m->hp, &w.src, r, plain, 1e-4, got, greedy);
		check_greedy(name, greedy, r);
		ref_window_close(&w);
	}
	strata_weight_store_destroy(ws);
	strata_free(got);
}

static void check_family(const char *name)
{
	char path[1024];
	ref_family_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load_family(name, &r);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *plain = strata_alloc(cells * sizeof *plain);
	float *stored = strata_alloc(cells * sizeof *stored);
	int32_t greedy[65];
	ref_open m;
	ref_open_model(path, &m);
	check_logits(name, "f32", &m.hp, &m.src, &r, plain, greedy);
	check_greedy(name, greedy, &r);
	check_decode(name, &m, &r, plain);
	check_window(name, &m, &r, plain);
	ref_close_model(&m);
	ref_open_model_stored(path, &m);
	check_logits(name, "stored", &m.hp, &m.src, &r, stored, greedy);
	check_greedy(name, greedy, &r);
	ref_close_model(&m);
	strata_free(plain);
	strata_free(stored);
	ref_free(&r);
}

static void test_families(void **state)
{
	(void)state;
	for (int i = 0; i < REF_FAMILY_COUNT; i++)
		check_family(ref_families[i]);
}

/* Phi-3's longrope takes its long factors past the original context
 * (llama.cpp's rule): the logits then move away from transformers'
 * short-factor reference, which proves the factor lists are read. */
static void test_longrope_long_factors(void **state)
{
	(void)state;
	const char *name = "phi3_longrope_f32";
	char path[1024];
	ref_family_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load_family(name, &r);
	ref_open m;
	ref_open_model(path, &m);
	float s[64], l[64];
	assert_true(m.hp.head_dim / 2 <= 64);
	strata_infer_rope_freqs_for(&m.hp, 64, s);
	strata_infer_rope_freqs_for(&m.hp, 65, l);
	for (uint32_t i = 0; i < m.hp.head_dim / 2; i++)
		assert_true(l[i] < s[i]); /* long divisors are larger */
	ref_close_model(&m);
	ref_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_families),
		cmocka_unit_test(test_longrope_long_factors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
