/* test_families_gguf.c - strata quantize's GGUF of the families beyond
 * llama (tests/data/families): each dense model written as F32 runs to
 * transformers' float64 logits within 1e-4 and to the Hugging Face run's
 * within 1e-5; as Q8_0 within Q8_0_TOLERANCE relative RMS; its metadata and tensor
 * names are llama.cpp's (architecture, Gemma's four norms stored as
 * 1 + w, Phi-3's fused tensors, Qwen3's q/k norms, the q/k rows not
 * permuted); the mixture-of-experts models likewise, their experts
 * stacked as llama.cpp's ffn_*_exps with its expert keys; Phi-3
 * longrope with llama.cpp's rope_factors_long/short tensors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define TOLERANCE 1e-4
#define SAME 1e-5
/* Q8_0 (an f16 scale per 32 weights, 8-bit codes: each weight within
 * 1/254 of its block's largest) measured 2.1e-3 to 3.2e-2 relative RMS
 * logit error against float64 over these models (largest for phi3_f32
 * and qwen3_tied_bf16: rows of 48-64 weights are one or two blocks, so
 * errors do not average out). 6e-2 is twice the worst; a wrong scale,
 * layout or a missing 1 + w moves it to the order of 1. */
#define Q8_0_TOLERANCE 6e-2
#define CONTEXT 64

static const char *const dense[] = {
	"qwen3_f32", "qwen3_tied_bf16", "gemma2_f32", "gemma3_f32",
	"gemma3_bf16", "phi3_f32",
};

static const char *const moe[] = {
	"mixtral_f32", "qwen2_moe_shared_f32", "qwen3_moe_f32",
	"qwen3_moe_unnorm_bf16",
};
/* Q8_0 of an expert model: a position whose router has a near tie can
 * pick another expert than float64 did (qwen3_moe_f32's position 10:
 * 0.48 relative RMS, every other position of the four models 1.1e-2 to
 * 3.4e-2). So at most one position per model past Q8_0_TOLERANCE, and
 * the whole within MOE_Q8_0_TOLERANCE (measured at most 0.132); a wrong
 * stack order or layout puts every position near 1. */
#define MOE_Q8_0_TOLERANCE 0.2

static char tmp_dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(tmp_dir, sizeof tmp_dir, "/tmp/strata-famgguf-XXXXXX");
	return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(tmp_dir);
}

static strata_status quantize(const char *name, const char *type, char *out,
			      size_t cap, strata_error *err)
{
	char in[1024];
	ref_family_path(in, sizeof in, name, NULL);
	snprintf(out, cap, "%s/%s-%s.gguf", tmp_dir, name, type);
	strata_quantize_options o = {.type = type, .threads = 2};
	return strata_quantize(in, out, &o, NULL, err);
}

/* Prefill logits of the model at path, on the CPU, with a KV cache of
 * `context` positions (Phi-3 longrope: past its original 64, the long
 * factors). */
static float *prefill_in(const char *path, const ref_data *r,
			 uint32_t context)
{
	ref_open m;
	ref_open_model(path, &m);
	float *logits = strata_alloc((uint64_t)r->n_tokens * r->vocab *
				     sizeof *logits);
	assert_non_null(logits);
	ref_logits(path, &m, r->tokens, r->n_tokens, context, 8, logits);
	ref_close_model(&m);
	return logits;
}

static float *prefill(const char *path, const ref_data *r)
{
	return prefill_in(path, r, CONTEXT);
}

static void read_f32(const strata_catalog *cat, const char *name, float *out,
		     uint64_t n)
{
	const strata_tensor *t = strata_catalog_find(cat, name);
	if (!t)
		fail_msg("tensor '%s' is missing", name);
	strata_error err;
	strata_weight_store *ws;
	void *raw = strata_alloc(t->bytes);
	void *const dsts[1] = {raw};
	assert_int_equal(strata_weight_store_create(cat, NULL, &ws, &err),
			 STRATA_OK);
	assert_int_equal(strata_weight_store_read(ws, &t, dsts, 1, &err),
			 STRATA_OK);
	assert_int_equal(strata_dtype_to_f32(t->dtype, raw, n, out, &err),
			 STRATA_OK);
	strata_weight_store_destroy(ws);
	strata_free(raw);
}

static void expect_key(const strata_gguf *g, const char *key, double want)
{
	double v = -1;
	strata_error err;
	if (strata_gguf_get_f64(g, key, &v, &err) != STRATA_OK) {
		uint64_t u;
		if (strata_gguf_get_u64(g, key, &u, &err))
			fail_msg("key '%s' is missing", key);
		v = (double)u;
	}
	if (!(v == want || (want != 0 && v / want - 1 < 1e-6 &&
			    v / want - 1 > -1e-6)))
		fail_msg("key '%s' is %g, not %g", key, v, want);
}

/* llama.cpp's names and keys, Gemma's 1 + w, and halves kept (the q rows
 * are the Hugging Face rows exactly). */
static void check_layout(const char *name, const char *gguf)
{
	char hf[1024];
	ref_family_path(hf, sizeof hf, name, NULL);
	strata_catalog *g, *h;
	strata_error err;
	assert_int_equal(strata_catalog_open(gguf, &g, &err), STRATA_OK);
	assert_int_equal(strata_catalog_open(hf, &h, &err), STRATA_OK);
	const strata_gguf *m = strata_catalog_gguf(g);
	const char *arch;
	size_t n;
	assert_int_equal(strata_gguf_get_string(m, "general.architecture",
						&arch, &n, &err),
			 STRATA_OK);
	bool gemma = !strncmp(name, "gemma", 5), phi = !strncmp(name, "phi3", 4);
	const char *want = gemma ? (name[5] == '2' ? "gemma2" : "gemma3")
			   : phi ? "phi3" : "qwen3";
	assert_int_equal(n, strlen(want));
	assert_memory_equal(arch, want, n);
	strata_model_desc d;
	assert_int_equal(strata_model_describe(hf, h, &d, &err), STRATA_OK);
	char key[128];
	snprintf(key, sizeof key, "%s.attention.key_length", want);
	expect_key(m, key, (double)d.head_dim);
	snprintf(key, sizeof key, "%s.embedding_length", want);
	expect_key(m, key, (double)d.hidden);
	if (!strcmp(want, "gemma2")) {
		expect_key(m, "gemma2.attn_logit_softcapping", 5.0);
		expect_key(m, "gemma2.final_logit_softcapping", 12.0);
		expect_key(m, "gemma2.attention.sliding_window", 4);
		expect_key(m, "gemma2.attention.query_pre_attn_scalar", 24);
	}
	if (!strcmp(want, "gemma3")) {
		expect_key(m, "gemma3.rope.freq_base", 1e6);
		expect_key(m, "gemma3.rope.freq_base_swa", 1e4);
		uint64_t p = 1; /* the first global layer's number */
		while (p <= d.layers && strata_model_layer_windowed(&d, p - 1))
			p++;
		if (p != 6)
			expect_key(m, "gemma3.attention.sliding_window_pattern",
				   (double)p);
	}
	const char *names[] = {"blk.0.attn_q_norm.weight",
			       "blk.0.post_attention_norm.weight",
			       "blk.0.post_ffw_norm.weight",
			       "blk.0.attn_qkv.weight", "blk.0.attn_k.weight",
			       "blk.0.ffn_gate.weight"};
	bool has[] = {!phi && !(gemma && name[5] == '2'), gemma, gemma, phi,
		      !phi, !phi};
	for (int i = 0; i < 6; i++)
		if ((strata_catalog_find(g, names[i]) != NULL) != has[i])
			fail_msg("%s: tensor '%s' %s", name, names[i],
				 has[i] ? "is missing" : "should not be there");
	float a[4096], b[4096];
	const char *hq = phi ? "model.layers.0.self_attn.qkv_proj.weight"
			     : "model.layers.0.self_attn.q_proj.weight";
	const strata_tensor *q = strata_catalog_find(h, hq);
	assert_non_null(q);
	uint64_t cells = q->shape_hf[0] * q->shape_hf[1];
	float *x = strata_alloc(cells * sizeof *x), *y = strata_alloc(cells * sizeof *y);
	read_f32(h, hq, x, cells);
	read_f32(g, phi ? "blk.0.attn_qkv.weight" : "blk.0.attn_q.weight", y,
		 cells);
	assert_memory_equal(x, y, cells * sizeof *x); /* not permuted */
	strata_free(x);
	strata_free(y);
	assert_true(d.hidden <= 4096);
	read_f32(h, "model.layers.0.input_layernorm.weight", a, d.hidden);
	read_f32(g, "blk.0.attn_norm.weight", b, d.hidden);
	for (uint64_t i = 0; i < d.hidden; i++)
		assert_float_equal(b[i], a[i] + (gemma ? 1.0f : 0.0f), 0);
	strata_catalog_destroy(g);
	strata_catalog_destroy(h);
}

static const char *moe_arch(const char *name)
{
	return !strncmp(name, "mixtral", 7) ? "llama"
	       : !strncmp(name, "qwen2", 5) ? "qwen2moe" : "qwen3moe";
}

/* llama.cpp's expert keys and names: each of the three stacks of layer
 * 0 is (experts, rows, cols) with expert e's rows the HF expert e's, the
 * router f32, Qwen2-MoE's shared expert and its gate as a vector. */
static void check_moe_layout(const char *name, const char *gguf)
{
	char hf[1024], key[128];
	ref_family_path(hf, sizeof hf, name, NULL);
	strata_catalog *g, *h;
	strata_error err;
	assert_int_equal(strata_catalog_open(gguf, &g, &err), STRATA_OK);
	assert_int_equal(strata_catalog_open(hf, &h, &err), STRATA_OK);
	const strata_gguf *m = strata_catalog_gguf(g);
	const char *arch, *want = moe_arch(name);
	size_t n;
	assert_int_equal(strata_gguf_get_string(m, "general.architecture",
						&arch, &n, &err), STRATA_OK);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(arch, want, n);
	strata_model_desc d;
	assert_int_equal(strata_model_describe(hf, h, &d, &err), STRATA_OK);
	snprintf(key, sizeof key, "%s.expert_count", want);
	expect_key(m, key, (double)d.experts);
	snprintf(key, sizeof key, "%s.expert_used_count", want);
	expect_key(m, key, (double)d.experts_used);
	bool mixtral = !strcmp(want, "llama"), shared = d.shared_intermediate;
	if (!mixtral) {
		snprintf(key, sizeof key, "%s.expert_feed_forward_length", want);
		expect_key(m, key, (double)d.moe_intermediate);
		bool norm = !d.norm_topk_prob;
		snprintf(key, sizeof key, "%s.expert_weights_norm", want);
		assert_int_equal(strata_gguf_get_bool(m, key, &norm, &err),
				 STRATA_OK);
		assert_int_equal(norm, d.norm_topk_prob);
	}
	if (shared) {
		snprintf(key, sizeof key,
			 "%s.expert_shared_feed_forward_length", want);
		expect_key(m, key, (double)d.shared_intermediate);
		const strata_tensor *sg =
			strata_catalog_find(g, "blk.0.ffn_gate_inp_shexp.weight");
		assert_non_null(sg);
		assert_int_equal(sg->n_dims, 1);
		assert_non_null(strata_catalog_find(g, "blk.0.ffn_down_shexp.weight"));
	}
	const strata_tensor *router =
		strata_catalog_find(g, "blk.0.ffn_gate_inp.weight");
	assert_non_null(router);
	assert_int_equal(router->dtype, STRATA_DTYPE_F32);
	const char *stacks[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
	const char *parts[2][3] = {{"w1", "w3", "w2"},
				   {"gate_proj", "up_proj", "down_proj"}};
	for (int k = 0; k < 3; k++) {
		char gn[128];
		snprintf(gn, sizeof gn, "blk.0.%s.weight", stacks[k]);
		const strata_tensor *t = strata_catalog_find(g, gn);
		assert_non_null(t);
		uint64_t rows = k == 2 ? d.hidden : d.moe_intermediate;
		uint64_t cols = k == 2 ? d.moe_intermediate : d.hidden;
		assert_int_equal(t->n_dims, 3);
		assert_int_equal(t->shape_hf[0], d.experts);
		assert_int_equal(t->shape_hf[1], rows);
		assert_int_equal(t->shape_hf[2], cols);
		uint64_t per = rows * cols;
		float *all = strata_alloc(per * d.experts * sizeof *all);
		float *one = strata_alloc(per * sizeof *one);
		read_f32(g, gn, all, per * d.experts);
		for (uint64_t e = 0; e < d.experts; e++) {
			char hn[160];
			snprintf(hn, sizeof hn,
				 mixtral ? "model.layers.0.block_sparse_moe.experts.%u.%s.weight"
					 : "model.layers.0.mlp.experts.%u.%s.weight",
				 (unsigned)e, parts[!mixtral][k]);
			read_f32(h, hn, one, per);
			assert_memory_equal(all + e * per, one, per * sizeof *one);
		}
		strata_free(all);
		strata_free(one);
	}
	strata_catalog_destroy(g);
	strata_catalog_destroy(h);
}

/* RMS of a - b over RMS of b. */
static double rel_rms(const float *a, const float *b, const ref_data *r)
{
	double num = 0, den = 0;
	for (uint64_t i = 0; i < (uint64_t)r->n_tokens * r->vocab; i++) {
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += (double)b[i] * b[i];
	}
	return den > 0 ? sqrt(num / den) : 1;
}

static double worst_diff(const float *a, const float *b, const ref_data *r)
{
	return ref_max_diff(a, b, (uint64_t)r->n_tokens * r->vocab);
}

typedef void layout_fn(const char *name, const char *gguf);

/* The model written as F32 GGUF runs to transformers' float64 logits
 * within TOLERANCE and to the Hugging Face folder's run within SAME; its
 * layout is checked; `width` pads the name in the printed line. */
static void check_f32(const char *name, int width, layout_fn *layout)
{
	char hf[1024], out[1024];
	strata_error err;
	if (quantize(name, "F32", out, sizeof out, &err))
		fail_msg("%s: quantize: %s", name, err.message);
	ref_data r;
	ref_load_family(name, &r);
	ref_family_path(hf, sizeof hf, name, NULL);
	float *want = prefill(hf, &r), *got = prefill(out, &r);
	double ref = worst_diff(got, r.logits, &r);
	double same = worst_diff(got, want, &r);
	print_message("%-*s F32  vs float64 %.2e  vs HF run %.2e\n", width,
		      name, ref, same);
	if (!(ref <= TOLERANCE) || !(same <= SAME))
		fail_msg("%s: GGUF F32 logits %.3g from transformers', "
			 "%.3g from the HF run", name, ref, same);
	layout(name, out);
	assert_int_equal(unlink(out), 0);
	strata_free(want);
	strata_free(got);
	ref_free(&r);
}

/* The prefill logits of the model written as Q8_0 GGUF (the file removed
 * again), with its reference data in *r (the caller frees both). */
static float *q8_0_logits(const char *name, ref_data *r)
{
	char out[1024];
	strata_error err;
	if (quantize(name, "Q8_0", out, sizeof out, &err))
		fail_msg("%s: quantize: %s", name, err.message);
	ref_load_family(name, r);
	float *got = prefill(out, r);
	assert_int_equal(unlink(out), 0);
	return got;
}

static void test_dense_f32(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof dense / sizeof *dense; i++)
		check_f32(dense[i], 18, check_layout);
}

/* Relative RMS of position t's logits. */
static double position_rms(const float *a, const ref_data *r, uint32_t t)
{
	double num = 0, den = 0;
	for (uint64_t i = (uint64_t)t * r->vocab; i < (uint64_t)(t + 1) * r->vocab; i++) {
		num += ((double)a[i] - r->logits[i]) * ((double)a[i] - r->logits[i]);
		den += (double)r->logits[i] * r->logits[i];
	}
	return den > 0 ? sqrt(num / den) : 1;
}

static void test_moe_f32(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof moe / sizeof *moe; i++)
		check_f32(moe[i], 22, check_moe_layout);
}

static void test_moe_q8_0(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof moe / sizeof *moe; i++) {
		const char *name = moe[i];
		ref_data r;
		float *got = q8_0_logits(name, &r);
		double d = rel_rms(got, r.logits, &r);
		uint32_t past = 0;
		for (uint32_t t = 0; t < r.n_tokens; t++)
			past += position_rms(got, &r, t) > Q8_0_TOLERANCE;
		print_message("%-22s Q8_0 vs float64: relative RMS %.2e, "
			      "%u position(s) past %.0e\n", name, d, past,
			      Q8_0_TOLERANCE);
		if (!(d <= MOE_Q8_0_TOLERANCE) || past > 1)
			fail_msg("%s: Q8_0 logits %.3g from transformers', %u "
				 "positions past %g", name, d, past,
				 Q8_0_TOLERANCE);
		strata_free(got);
		ref_free(&r);
	}
}

static void test_dense_q8_0(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof dense / sizeof *dense; i++) {
		const char *name = dense[i];
		ref_data r;
		float *got = q8_0_logits(name, &r);
		double d = rel_rms(got, r.logits, &r);
		print_message("%-18s Q8_0 vs float64: relative RMS %.2e, "
			      "max %.2e\n", name, d,
			      worst_diff(got, r.logits, &r));
		if (!(d <= Q8_0_TOLERANCE))
			fail_msg("%s: Q8_0 logits %.3g from transformers'", name,
				 d);
		strata_free(got);
		ref_free(&r);
	}
}

/* Phi-3 longrope: the divisor lists as llama.cpp's rope_factors_long
 * and rope_factors_short tensors, the original context and attn_factor
 * as keys; the GGUF runs as the Hugging Face folder with the short
 * factors (context 64, transformers' float64 within 1e-4) and with the
 * long ones (context 256, equal to the HF run). */
static void test_longrope(void **state)
{
	(void)state;
	const char *name = "phi3_longrope_f32";
	char hf[1024], out[1024];
	strata_error err;
	if (quantize(name, "F32", out, sizeof out, &err))
		fail_msg("%s: quantize: %s", name, err.message);
	ref_data r;
	ref_load_family(name, &r);
	ref_family_path(hf, sizeof hf, name, NULL);
	strata_catalog *g, *h;
	assert_int_equal(strata_catalog_open(out, &g, &err), STRATA_OK);
	assert_int_equal(strata_catalog_open(hf, &h, &err), STRATA_OK);
	strata_model_desc d;
	assert_int_equal(strata_model_describe(hf, h, &d, &err), STRATA_OK);
	const strata_rope_scaling *rs = &d.rope_scaling;
	float got[256];
	read_f32(g, "rope_factors_long.weight", got, rs->factor_count);
	assert_memory_equal(got, rs->long_factor, rs->factor_count * sizeof *got);
	read_f32(g, "rope_factors_short.weight", got, rs->factor_count);
	assert_memory_equal(got, rs->short_factor, rs->factor_count * sizeof *got);
	const strata_gguf *m = strata_catalog_gguf(g);
	expect_key(m, "phi3.rope.scaling.original_context_length",
		   (double)rs->original_max_position_embeddings);
	expect_key(m, "phi3.context_length", (double)d.max_positions);
	double ratio = (double)d.max_positions /
		       (double)rs->original_max_position_embeddings;
	expect_key(m, "phi3.rope.scaling.attn_factor",
		   rs->attention_factor > 0
			   ? rs->attention_factor
			   : sqrt(1 + log(ratio) /
					      log((double)rs->original_max_position_embeddings)));
	strata_catalog_destroy(g);
	strata_catalog_destroy(h);
	for (int i = 0; i < 2; i++) {
		uint32_t context = i ? 256 : CONTEXT;
		float *want = prefill_in(hf, &r, context);
		float *gg = prefill_in(out, &r, context);
		double same = worst_diff(gg, want, &r);
		double ref = worst_diff(gg, r.logits, &r);
		print_message("%s context %u: vs HF run %.2e, vs float64 %.2e\n",
			      name, context, same, ref);
		if (!(same <= SAME) || (!i && !(ref <= TOLERANCE)))
			fail_msg("%s context %u: GGUF %.3g from the HF run, "
				 "%.3g from float64", name, context, same, ref);
		/* the long factors change the logits: they are applied */
		if (i && !(ref > 1e-2))
			fail_msg("%s: context 256 gave the short factors' logits",
				 name);
		strata_free(want);
		strata_free(gg);
	}
	assert_int_equal(unlink(out), 0);
	ref_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dense_f32),
		cmocka_unit_test(test_dense_q8_0),
		cmocka_unit_test(test_moe_f32),
		cmocka_unit_test(test_moe_q8_0),
		cmocka_unit_test(test_longrope),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
