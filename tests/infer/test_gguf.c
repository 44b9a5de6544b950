/* test_gguf.c - the GGUF path against transformers: a reference model
 * (llama, GQA 4, untied) rewritten here as GGUF the way llama.cpp's
 * converter writes it (q/k rows permuted for interleaved rope, ne0 first),
 * in F32, F16, BF16 and with Q8_0 matrices. F32 logits must be within 1e-3
 * of transformers'; Q8_0 logits within 5% of the logit range (8-bit
 * weights), and its blocks must dequantise to scale x int8 exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/ckpt_writer.h"
#include "support/refmodel.h"

#define MODEL "llama_gqa4_f16" /* dim 64, ffn 96, 3 layers, 8/2 heads */

/* Round to nearest even, subnormals included (the f16 reference weights
 * have some). */
static uint16_t to_half(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	uint32_t sign = (u >> 16) & 0x8000, m = u & 0x7FFFFF;
	int32_t e = (int32_t)((u >> 23) & 0xFF) - 127 + 15;
	if (((u >> 23) & 0xFF) == 0)
		return (uint16_t)sign;
	assert_true(e < 31);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)sign;
		uint32_t full = m | 0x800000, shift = (uint32_t)(14 - e);
		uint32_t hm = full >> shift, rest = full & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		if (rest > half || (rest == half && (hm & 1)))
			hm++;
		return (uint16_t)(sign | hm);
	}
	uint32_t h = ((uint32_t)e << 10) + (m >> 13), rest = m & 0x1FFF;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++; /* a carry into the exponent is the right result */
	return (uint16_t)(sign | h);
}

static float from_half(uint16_t h)
{
	uint32_t e = (h >> 10) & 31, m = h & 1023;
	float v = e ? ldexpf(1.0f + m / 1024.0f, (int)e - 15)
		    : ldexpf(m / 1024.0f, -14);
	return (h & 0x8000) ? -v : v;
}

typedef struct gtensor {
	char name[64];
	uint64_t rows, cols; /* cols 0: vector */
	const float *data;   /* (rows, cols), already permuted */
	float *owned;
	uint32_t type;	     /* ggml type: 0 F32, 1 F16, 8 Q8_0, 30 BF16 */
} gtensor;

enum { G_F32 = 0, G_F16 = 1, G_Q8_0 = 8, G_BF16 = 30 };

static uint64_t gbytes(const gtensor *t)
{
	uint64_t el = t->rows * (t->cols ? t->cols : 1);
	switch (t->type) {
	case G_Q8_0: return el / 32 * 34;
	case G_F16:
	case G_BF16: return el * 2;
	default: return el * 4;
	}
}

/* llama.cpp's permute for q/k: within each head, rows (j*hd/2 + i) go to
 * (2i + j), so adjacent pairs rotate together. */
static float *permute(const float *w, uint64_t rows, uint64_t cols,
		      uint32_t heads)
{
	float *out = strata_alloc(rows * cols * sizeof *out);
	uint64_t hd = rows / heads, half = hd / 2;
	for (uint64_t h = 0; h < heads; h++)
		for (uint64_t j = 0; j < 2; j++)
			for (uint64_t i = 0; i < half; i++)
				memcpy(out + (h * hd + 2 * i + j) * cols,
				       w + (h * hd + j * half + i) * cols,
				       cols * sizeof *out);
	return out;
}

/* t's payload in its ggml type (caller frees): the reference weights are
 * exactly representable in their own 16-bit type, so F16/BF16 round
 * nothing; Q8_0 blocks are 32 int8 under one f16 scale. */
static void *encode(const gtensor *t)
{
	uint64_t el = t->rows * (t->cols ? t->cols : 1);
	unsigned char *out = malloc(gbytes(t) ? gbytes(t) : 1);
	assert_non_null(out);
	if (t->type == G_F32) {
		memcpy(out, t->data, el * 4);
		return out;
	}
	if (t->type == G_F16 || t->type == G_BF16) {
		for (uint64_t i = 0; i < el; i++) {
			uint32_t u;
			memcpy(&u, &t->data[i], 4);
			uint16_t h = t->type == G_F16 ? to_half(t->data[i])
						      : (uint16_t)(u >> 16);
			memcpy(out + 2 * i, &h, 2);
		}
		return out;
	}
	for (uint64_t b = 0; b < el / 32; b++) {
		const float *x = t->data + b * 32;
		float amax = 0;
		for (int i = 0; i < 32; i++)
			amax = fmaxf(amax, fabsf(x[i]));
		float d = amax / 127.0f;
		uint16_t dh = to_half(d);
		float id = d ? 1.0f / d : 0.0f;
		memcpy(out + b * 34, &dh, 2);
		for (int i = 0; i < 32; i++)
			out[b * 34 + 2 + i] = (unsigned char)(int8_t)lrintf(x[i] * id);
	}
	return out;
}

static void write_gguf_arch(const char *path, const ref_open *m,
			    uint32_t type, const char *arch,
			    const float *rope_freqs);

static void write_gguf(const char *path, const ref_open *m, uint32_t type)
{
	write_gguf_arch(path, m, type, "llama", NULL);
}

/* llama: q/k permuted for interleaved rope; qwen2: rotate-half as stored,
 * with its q/k/v biases. */
static void write_gguf_arch(const char *path, const ref_open *m,
			    uint32_t type, const char *arch,
			    const float *rope_freqs)
{
	bool q8 = type == G_Q8_0, llama = !strcmp(arch, "llama");
	const strata_infer_hparams *hp = &m->hp;
	const strata_infer_source *s = &m->src;
	gtensor t[128];
	size_t n = 0;
	t[n++] = (gtensor){"token_embd.weight", hp->vocab, hp->dim,
			   s->statics.embed, NULL, type};
	t[n++] = (gtensor){"output_norm.weight", hp->dim, 0,
			   s->statics.final_norm, NULL, G_F32};
	if (s->statics.lm_head != s->statics.embed)
		t[n++] = (gtensor){"output.weight", hp->vocab, hp->dim,
				   s->statics.lm_head, NULL, type};
	if (rope_freqs)
		t[n++] = (gtensor){"rope_freqs.weight", hp->head_dim / 2, 0,
				   rope_freqs, NULL, G_F32};
	uint64_t q = (uint64_t)hp->heads * hp->head_dim;
	uint64_t kv = (uint64_t)hp->kv_heads * hp->head_dim;
	for (uint32_t l = 0; l < hp->layers; l++) {
		strata_infer_layer w;
		strata_error err;
		assert_int_equal(s->ops->acquire(s->user, l, &w, &err),
				 STRATA_OK);
		struct {
			const char *name;
			uint64_t rows, cols;
			const float *d;
			uint32_t perm_heads;
		} L[] = {
			{"attn_norm.weight", hp->dim, 0, w.attn_norm, 0},
			{"attn_q.weight", q, hp->dim, w.wq,
			 llama ? hp->heads : 0},
			{"attn_k.weight", kv, hp->dim, w.wk,
			 llama ? hp->kv_heads : 0},
			{"attn_v.weight", kv, hp->dim, w.wv, 0},
			{"attn_output.weight", hp->dim, q, w.wo, 0},
			{"ffn_norm.weight", hp->dim, 0, w.ffn_norm, 0},
			{"ffn_gate.weight", hp->ffn, hp->dim, w.w_gate, 0},
			{"ffn_up.weight", hp->ffn, hp->dim, w.w_up, 0},
			{"ffn_down.weight", hp->dim, hp->ffn, w.w_down, 0},
		};
		const struct {
			const char *name;
			uint64_t rows;
			const float *d;
		} B[] = {{"attn_q.bias", q, w.bq}, {"attn_k.bias", kv, w.bk},
			 {"attn_v.bias", kv, w.bv}};
		for (size_t i = 0; i < 3; i++) {
			if (!B[i].d)
				continue;
			gtensor *g = &t[n++];
			*g = (gtensor){.rows = B[i].rows, .data = B[i].d,
				       .type = G_F32};
			snprintf(g->name, sizeof g->name, "blk.%u.%s", l,
				 B[i].name);
		}
		for (size_t i = 0; i < sizeof L / sizeof *L; i++) {
			gtensor *g = &t[n++];
			snprintf(g->name, sizeof g->name, "blk.%u.%s", l,
				 L[i].name);
			g->rows = L[i].rows;
			g->cols = L[i].cols;
			g->owned = L[i].perm_heads
					   ? permute(L[i].d, L[i].rows,
						     L[i].cols, L[i].perm_heads)
					   : NULL;
			g->data = g->owned ? g->owned : L[i].d;
			g->type = q8 && !g->cols ? G_F32 : type;
		}
	}
	char keys[8][96];
	static const char *const suffix[8] = {
		"context_length", "embedding_length", "feed_forward_length",
		"block_count", "attention.head_count", "attention.head_count_kv",
		"attention.layer_norm_rms_epsilon", "rope.freq_base"};
	for (int i = 0; i < 8; i++)
		snprintf(keys[i], sizeof keys[i], "%s.%s", arch, suffix[i]);
	const ckw_kv meta[9] = {
		CKW_KV_STR("general.architecture", arch),
		CKW_KV_U32(keys[0], 256),
		CKW_KV_U32(keys[1], hp->dim),
		CKW_KV_U32(keys[2], hp->ffn),
		CKW_KV_U32(keys[3], hp->layers),
		CKW_KV_U32(keys[4], hp->heads),
		CKW_KV_U32(keys[5], hp->kv_heads),
		CKW_KV_F32(keys[6], hp->norm_eps),
		CKW_KV_F32(keys[7], (float)hp->rope_theta),
	};
	ckw_tensor ct[128];
	void *payload[128];
	for (size_t i = 0; i < n; i++) {
		payload[i] = encode(&t[i]);
		ct[i] = (ckw_tensor){.name = t[i].name, .type = t[i].type,
				     .n_dims = t[i].cols ? 2 : 1,
				     .shape = {t[i].rows, t[i].cols},
				     .data = payload[i], .bytes = gbytes(&t[i])};
	}
	ckw_gguf_file(path, meta, 9, ct, n, NULL);
	for (size_t i = 0; i < n; i++) {
		free(payload[i]);
		strata_free(t[i].owned);
	}
}

static void logits_of(const char *path, const ref_data *r, float *out)
{
	ref_open m;
	ref_open_model(path, &m);
	ref_logits(path, &m, r->tokens, r->n_tokens, 32, 16, out);
	ref_close_model(&m);
}

static void test_gguf_f32_and_q8_0_match_transformers(void **state)
{
	(void)state;
	char src[1024], f32[1200], q8[1200];
	ref_path(src, sizeof src, MODEL, NULL);
	snprintf(f32, sizeof f32, "%s/tests/infer-%s-f32.gguf",
		 STRATA_BINARY_DIR, MODEL);
	snprintf(q8, sizeof q8, "%s/tests/infer-%s-q8_0.gguf",
		 STRATA_BINARY_DIR, MODEL);
	ref_open m;
	ref_open_model(src, &m);
	write_gguf(f32, &m, G_F32);
	write_gguf(q8, &m, G_Q8_0);
	ref_close_model(&m);

	ref_data r;
	ref_load(MODEL, &r);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *got = strata_alloc(cells * sizeof *got);
	logits_of(f32, &r, got);
	double d32 = ref_max_diff(got, r.logits, cells);
	print_message("gguf f32 (interleaved rope): max |dlogit| %.2e\n", d32);
	assert_true(d32 <= 1e-3);

	logits_of(q8, &r, got);
	double dq = ref_max_diff(got, r.logits, cells), scale = 0;
	for (uint64_t i = 0; i < cells; i++)
		scale = fmax(scale, fabs(r.logits[i]));
	print_message("gguf q8_0: max |dlogit| %.3g (max |logit| %.3g)\n", dq,
		      scale);
	/* 8-bit weights: a few percent of the logit range, and far from
	 * the f32 answer's agreement (so the test sees Q8_0 really ran). */
	assert_true(dq <= 0.05 * scale);
	assert_true(dq > 10 * d32);
	strata_free(got);
	ref_free(&r);
}

/* The 16-bit GGUF types hold the reference weights exactly (f16 model as
 * F16, bf16 model as BF16), so they must agree with transformers as F32
 * does. */
static void check_16bit(const char *model, uint32_t type, const char *tag)
{
	char src[1024], path[1200];
	ref_path(src, sizeof src, model, NULL);
	snprintf(path, sizeof path, "%s/tests/infer-%s-%s.gguf",
		 STRATA_BINARY_DIR, model, tag);
	ref_open m;
	ref_open_model(src, &m);
	write_gguf(path, &m, type);
	ref_close_model(&m);
	ref_data r;
	ref_load(model, &r);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *got = strata_alloc(cells * sizeof *got);
	logits_of(path, &r, got);
	double d = ref_max_diff(got, r.logits, cells);
	print_message("gguf %s (%s): max |dlogit| %.2e\n", tag, model, d);
	assert_true(d <= 1e-3);
	strata_free(got);
	ref_free(&r);
}

static void test_gguf_f16_and_bf16_match_transformers(void **state)
{
	(void)state;
	check_16bit("llama_gqa4_f16", G_F16, "f16");
	check_16bit("llama_gqa2_tied_bf16", G_BF16, "bf16");
}

/* qwen2 as GGUF: rotate-half rope, q/k/v biases under blk.N.attn_*.bias. */
static void test_gguf_qwen2_matches_transformers(void **state)
{
	(void)state;
	char src[1024], path[1200];
	ref_path(src, sizeof src, "qwen2_bias_f32", NULL);
	snprintf(path, sizeof path, "%s/tests/infer-qwen2.gguf",
		 STRATA_BINARY_DIR);
	ref_open m;
	ref_open_model(src, &m);
	write_gguf_arch(path, &m, G_F32, "qwen2", NULL);
	ref_close_model(&m);
	ref_open g;
	ref_open_model(path, &g);
	assert_int_equal(g.hp.family, STRATA_FAMILY_QWEN2);
	assert_int_equal(g.hp.rope_layout, STRATA_ROPE_HALF);
	assert_non_null(g.t.layer[0][STRATA_SLOT_BQ]);
	ref_close_model(&g);
	ref_data r;
	ref_load("qwen2_bias_f32", &r);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *got = strata_alloc(cells * sizeof *got);
	logits_of(path, &r, got);
	double d = ref_max_diff(got, r.logits, cells);
	print_message("gguf qwen2 f32: max |dlogit| %.2e\n", d);
	assert_true(d <= 1e-3);
	strata_free(got);
	ref_free(&r);
}

/* Llama 3 rope scaling the way llama.cpp's converter stores it: a
 * rope_freqs.weight tensor of per-frequency divisors, computed here from
 * the config's llama3 parameters with the converter's formula. */
static void test_gguf_llama3_rope_freqs_match_transformers(void **state)
{
	(void)state;
	char src[1024], path[1200];
	ref_path(src, sizeof src, "llama3_rope_f32", NULL);
	snprintf(path, sizeof path, "%s/tests/infer-llama3.gguf",
		 STRATA_BINARY_DIR);
	ref_open m;
	ref_open_model(src, &m);
	const strata_infer_hparams *hp = &m.hp;
	assert_true(hp->rope_factor > 0);
	float div[64];
	for (uint32_t i = 0; i < hp->head_dim / 2; i++) {
		double f = 1.0 / pow(hp->rope_theta, 2.0 * i / hp->head_dim);
		double wl = 2 * M_PI / f;
		double lo = hp->rope_original_context / hp->rope_low_freq_factor;
		double hi = hp->rope_original_context / hp->rope_high_freq_factor;
		if (wl < hi)
			div[i] = 1.0f;
		else if (wl > lo)
			div[i] = (float)hp->rope_factor;
		else {
			double sm = (hp->rope_original_context / wl -
				     hp->rope_low_freq_factor) /
				    (hp->rope_high_freq_factor -
				     hp->rope_low_freq_factor);
			div[i] = (float)(1.0 / ((1 - sm) / hp->rope_factor + sm));
		}
	}
	char plain[1300];
	snprintf(plain, sizeof plain, "%s.plain", path);
	write_gguf_arch(path, &m, G_F32, "llama", div);
	write_gguf_arch(plain, &m, G_F32, "llama", NULL);
	ref_close_model(&m);
	ref_data r;
	ref_load("llama3_rope_f32", &r);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *got = strata_alloc(cells * sizeof *got);
	logits_of(path, &r, got);
	double d = ref_max_diff(got, r.logits, cells);
	print_message("gguf llama3 rope_freqs: max |dlogit| %.2e\n", d);
	assert_true(d <= 1e-3);
	/* Without the divisors the same weights answer differently: the
	 * tensor is really applied. */
	logits_of(plain, &r, got);
	double without = ref_max_diff(got, r.logits, cells);
	print_message("  without rope_freqs: %.3g\n", without);
	assert_true(without > 1e-2);
	strata_free(got);
	ref_free(&r);
}

/* One Q8_0 block through the converter the loader uses: d x q exactly. */
static void test_q8_0_block_dequantises_exactly(void **state)
{
	(void)state;
	unsigned char block[34];
	uint16_t d = to_half(0.0371f);
	memcpy(block, &d, 2);
	for (int i = 0; i < 32; i++)
		block[2 + i] = (unsigned char)(int8_t)(i * 8 - 128);
	float out[32];
	strata_error err;
	assert_int_equal(strata_dtype_to_f32(STRATA_DTYPE_Q8_0, block, 32, out,
					     &err),
			 STRATA_OK);
	for (int i = 0; i < 32; i++)
		assert_true(out[i] == from_half(d) * (float)(i * 8 - 128));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gguf_f32_and_q8_0_match_transformers),
		cmocka_unit_test(test_gguf_f16_and_bf16_match_transformers),
		cmocka_unit_test(test_gguf_qwen2_matches_transformers),
		cmocka_unit_test(test_gguf_llama3_rope_freqs_match_transformers),
		cmocka_unit_test(test_q8_0_block_dequantises_exactly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
