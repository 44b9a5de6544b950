/* quantize_hf.c - the Hugging Face side of strata quantize: tensor names,
 * the architecture metadata and llama3's rope factors, as llama.cpp's
 * convert_hf_to_gguf.py writes them for llama, mistral (as llama), qwen2,
 * qwen3, gemma2, gemma3 (text) and phi3 (layer: model). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/quantize_internal.h"

/* HF suffix (after model.layers.N.) -> GGUF suffix (after blk.N.). */
static const struct {
	const char *hf, *gguf;
} layer_names[] = {
	{"input_layernorm.weight", "attn_norm.weight"},
	{"post_attention_layernorm.weight", "ffn_norm.weight"},
	{"self_attn.q_proj.weight", "attn_q.weight"},
	{"self_attn.k_proj.weight", "attn_k.weight"},
	{"self_attn.v_proj.weight", "attn_v.weight"},
	{"self_attn.o_proj.weight", "attn_output.weight"},
	{"self_attn.q_proj.bias", "attn_q.bias"},
	{"self_attn.k_proj.bias", "attn_k.bias"},
	{"self_attn.v_proj.bias", "attn_v.bias"},
	{"self_attn.o_proj.bias", "attn_output.bias"},
	{"mlp.gate_proj.weight", "ffn_gate.weight"},
	{"mlp.up_proj.weight", "ffn_up.weight"},
	{"mlp.down_proj.weight", "ffn_down.weight"},
	{"self_attn.q_norm.weight", "attn_q_norm.weight"},
	{"self_attn.k_norm.weight", "attn_k_norm.weight"},
	{"self_attn.qkv_proj.weight", "attn_qkv.weight"},  /* phi3, fused */
	{"mlp.gate_up_proj.weight", "ffn_up.weight"},	    /* phi3, fused */
	{"pre_feedforward_layernorm.weight", "ffn_norm.weight"}, /* gemma */
	{"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
	/* mixture of experts: the router, Qwen2-MoE's shared expert */
	{"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}, /* mixtral */
	{"mlp.gate.weight", "ffn_gate_inp.weight"},
	{"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
	{"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
	{"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
	{"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};

/* An expert's tensor after model.layers.N.: its expert number and the
 * stacked GGUF name of its kind (llama.cpp's ffn_{gate,up,down}_exps,
 * every expert of a layer one 3-D tensor), or NULL. */
static const char *expert_name(const char *hf, unsigned *expert)
{
	static const struct {
		const char *hf, *gguf;
	} kinds[] = {
		{"w1", "ffn_gate_exps.weight"}, {"w3", "ffn_up_exps.weight"},
		{"w2", "ffn_down_exps.weight"},
		{"gate_proj", "ffn_gate_exps.weight"},
		{"up_proj", "ffn_up_exps.weight"},
		{"down_proj", "ffn_down_exps.weight"},
	};
	char kind[16];
	int at = 0;
	if ((sscanf(hf, "block_sparse_moe.experts.%u.%15[a-z_0-9].weight%n",
		    expert, kind, &at) != 2 &&
	     sscanf(hf, "mlp.experts.%u.%15[a-z_0-9].weight%n", expert, kind,
		    &at) != 2) ||
	    at <= 0 || hf[at] != '\0')
		return NULL;
	bool mixtral = hf[0] == 'b';
	for (size_t i = mixtral ? 0 : 3; i < (mixtral ? 3u : 6u); i++)
		if (!strcmp(kind, kinds[i].hf))
			return kinds[i].gguf;
	return NULL;
}

/* Gemma's post_attention_layernorm is the norm of the attention's output
 * (llama.cpp's post_attention_norm), not the MLP's input norm. */
static const char *layer_name(const char *hf, bool gemma)
{
	if (gemma && !strcmp(hf, "post_attention_layernorm.weight"))
		return "post_attention_norm.weight";
	for (size_t i = 0; i < sizeof layer_names / sizeof *layer_names; i++)
		if (!strcmp(hf, layer_names[i].hf))
			return layer_names[i].gguf;
	return NULL;
}

strata_status strata__quant_hf_name(const char *hf, strata_family family,
				    char *out, size_t cap, bool *skip,
				    int64_t *expert, strata_error *err)
{
	*skip = false;
	*expert = -1;
	const char *fixed[][2] = {
		{"model.embed_tokens.weight", "token_embd.weight"},
		{"model.norm.weight", "output_norm.weight"},
		{"lm_head.weight", "output.weight"},
	};
	for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
		if (!strcmp(hf, fixed[i][0])) {
			snprintf(out, cap, "%s", fixed[i][1]);
			return STRATA_OK;
		}
	if (strata_str_ends_with(hf, "rotary_emb.inv_freq")) {
		*skip = true; /* recomputed from rope_theta */
		return STRATA_OK;
	}
	unsigned layer;
	int at = 0;
	bool gemma = family == STRATA_FAMILY_GEMMA2 ||
		     family == STRATA_FAMILY_GEMMA3;
	const char *g = NULL;
	if (sscanf(hf, "model.layers.%u.%n", &layer, &at) == 1 && at > 0 &&
	    (g = layer_name(hf + at, gemma))) {
		snprintf(out, cap, "blk.%u.%s", layer, g);
		return STRATA_OK;
	}
	unsigned e;
	if (at > 0 && (g = expert_name(hf + at, &e))) {
		snprintf(out, cap, "blk.%u.%s", layer, g);
		*expert = e;
		return STRATA_OK;
	}
	char esc[160];
	return strata_fail(err, STRATA_E_MODEL_TENSOR_EXTRA,
			   "convert the model with llama.cpp's convert_hf_to_gguf.py, "
			   "then quantize the GGUF",
			   "tensor '%s' has no GGUF name strata knows",
			   strata_escape(esc, sizeof esc, hf, strlen(hf)));
}

/* ------------------------------------------------------------------------ */
/* Metadata                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct meta {
	strata_gguf_writer *w;
	const char *arch;
	strata_error *err;
	strata_status s;
} meta;

static void put_u32(meta *m, const char *key, uint64_t v)
{
	char k[128];
	snprintf(k, sizeof k, "%s.%s", m->arch, key);
	if (!m->s && v > UINT32_MAX)
		m->s = strata_fail(m->err, STRATA_E_MODEL_CONFIG,
				   "check config.json",
				   "'%s' is %" PRIu64 ", above GGUF's u32", k, v);
	if (!m->s)
		m->s = strata_gguf_writer_set_uint(m->w, k, STRATA_GGUF_U32, v,
						   m->err);
}

static void put_f32(meta *m, const char *key, double v)
{
	char k[128];
	snprintf(k, sizeof k, "%s.%s", m->arch, key);
	if (!m->s)
		m->s = strata_gguf_writer_set_f32(m->w, k, (float)v, m->err);
}

static void put_str(meta *m, const char *key, const char *v)
{
	if (!m->s)
		m->s = strata_gguf_writer_set_string(m->w, key, v, strlen(v),
						     m->err);
}

/* The last path component of dir (the model's folder name). */
static void base_name(const char *path, char *out, size_t cap)
{
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--;
	size_t b = n;
	while (b > 0 && path[b - 1] != '/')
		b--;
	snprintf(out, cap, "%.*s", (int)(n - b), path + b);
	if (strata_str_ends_with(out, ".safetensors"))
		out[strlen(out) - strlen(".safetensors")] = '\0';
}

const char *strata__quant_hf_arch(strata_family f)
{
	switch (f) {
	case STRATA_FAMILY_LLAMA:
	case STRATA_FAMILY_MISTRAL: return "llama";
	case STRATA_FAMILY_QWEN2: return "qwen2";
	case STRATA_FAMILY_QWEN3: return "qwen3";
	case STRATA_FAMILY_GEMMA2: return "gemma2";
	case STRATA_FAMILY_GEMMA3: return "gemma3";
	case STRATA_FAMILY_PHI3: return "phi3";
	case STRATA_FAMILY_MIXTRAL: return "llama"; /* as llama.cpp writes it */
	case STRATA_FAMILY_QWEN2_MOE: return "qwen2moe";
	case STRATA_FAMILY_QWEN3_MOE: return "qwen3moe";
	default: return NULL;
	}
}

/* Gemma's sliding layers as llama.cpp's pattern: layer l slides unless
 * (l + 1) % p == 0. The smallest p >= 1 that gives d's layers, or 0 when
 * none does (a pattern GGUF cannot say). */
static uint64_t swa_pattern(const strata_model_desc *d)
{
	for (uint64_t p = 1; p <= d->layers + 1; p++) {
		bool ok = true;
		for (uint64_t l = 0; l < d->layers && ok; l++)
			ok = strata_model_layer_windowed(d, l) == ((l + 1) % p != 0);
		if (ok)
			return p;
	}
	return 0;
}

/* What Gemma 2 and 3 add: the soft caps, the window and its pattern
 * (written when it is not llama.cpp's 2 or 6), query_pre_attn_scalar
 * (strata's own key; llama.cpp has none), Gemma 3's local rope base. */
static void gemma_metadata(meta *m, const strata_model_desc *d)
{
	bool g2 = d->family == STRATA_FAMILY_GEMMA2;
	if (d->attn_softcap > 0)
		put_f32(m, "attn_logit_softcapping", d->attn_softcap);
	if (d->final_softcap > 0)
		put_f32(m, "final_logit_softcapping", d->final_softcap);
	if (d->sliding_window)
		put_u32(m, "attention.sliding_window", d->sliding_window);
	uint64_t p = swa_pattern(d);
	if (!m->s && d->sliding_window && !p)
		m->s = strata_fail(m->err, STRATA_E_UNSUPPORTED,
				   "use the Hugging Face checkpoint",
				   "config.json's layer_types follow no "
				   "every-n-th-layer-is-global pattern, which is "
				   "all GGUF %s can say", m->arch);
	if (d->sliding_window && p != (g2 ? 2u : 6u))
		put_u32(m, "attention.sliding_window_pattern", p);
	if (d->query_scale > 0)
		put_f32(m, "attention.query_pre_attn_scalar", d->query_scale);
	if (!g2 && d->rope_local_theta > 0)
		put_f32(m, "rope.freq_base_swa", d->rope_local_theta);
}

/* The mixture-of-experts keys llama.cpp's converters write: the expert
 * counts, the experts' and the shared expert's widths (not for Mixtral,
 * whose experts are feed_forward_length wide), and expert_weights_norm
 * (whether the chosen experts' weights are renormalised: llama.cpp's own
 * qwen2moe and qwen3moe graphs fix it, so strata writes the config's). */
static void moe_metadata(meta *m, const strata_model_desc *d)
{
	put_u32(m, "expert_count", d->experts);
	put_u32(m, "expert_used_count", d->experts_used);
	if (d->family == STRATA_FAMILY_MIXTRAL)
		return;
	put_u32(m, "expert_feed_forward_length", d->moe_intermediate);
	if (d->shared_intermediate)
		put_u32(m, "expert_shared_feed_forward_length",
			d->shared_intermediate);
	char k[128];
	snprintf(k, sizeof k, "%s.expert_weights_norm", m->arch);
	if (!m->s)
		m->s = strata_gguf_writer_set_uint(m->w, k, STRATA_GGUF_BOOL,
						   d->norm_topk_prob, m->err);
}

/* The rope scalings GGUF holds as metadata or as tensors (rope_freqs,
 * Phi-3's rope_factors_long/short). */
static strata_status check_rope(const strata_model_desc *d, strata_error *err)
{
	const strata_rope_scaling *r = &d->rope_scaling;
	if (r->kind == STRATA_ROPE_DEFAULT || r->kind == STRATA_ROPE_LLAMA3 ||
	    (r->kind == STRATA_ROPE_LINEAR && r->factor > 0) ||
	    (r->kind == STRATA_ROPE_LONGROPE && d->family == STRATA_FAMILY_PHI3 &&
	     r->factor_count && r->original_max_position_embeddings))
		return STRATA_OK;
	return strata_fail(err, STRATA_E_UNSUPPORTED,
			   "run the Hugging Face checkpoint itself (strata runs "
			   "its rope scaling), or convert it with llama.cpp's "
			   "convert_hf_to_gguf.py",
			   "rope scaling '%s' has no GGUF form strata writes "
			   "or reads", r->type);
}

strata_status strata__quant_hf_metadata(strata_gguf_writer *w,
					const char *model_dir,
					const strata_model_desc *d,
					strata_error *err)
{
	meta m = {w, strata__quant_hf_arch(d->family), err, STRATA_OK};
	const strata_rope_scaling *r = &d->rope_scaling;
	strata_status s = check_rope(d, err);
	if (s)
		return s;
	char name[256];
	base_name(model_dir, name, sizeof name);
	put_str(&m, "general.architecture", m.arch);
	put_str(&m, "general.type", "model");
	put_str(&m, "general.name", name);
	put_u32(&m, "block_count", d->layers);
	put_u32(&m, "context_length", d->max_positions);
	put_u32(&m, "embedding_length", d->hidden);
	put_u32(&m, "feed_forward_length", d->intermediate);
	put_u32(&m, "attention.head_count", d->heads);
	put_u32(&m, "attention.head_count_kv", d->kv_heads);
	put_f32(&m, "rope.freq_base", d->rope_theta);
	put_f32(&m, "attention.layer_norm_rms_epsilon", d->rms_eps);
	put_u32(&m, "attention.key_length", d->head_dim);
	put_u32(&m, "attention.value_length", d->head_dim);
	put_u32(&m, "rope.dimension_count",
		d->rope_dims ? d->rope_dims : d->head_dim);
	put_u32(&m, "vocab_size", d->vocab);
	if (r->kind == STRATA_ROPE_LINEAR) {
		char k[128];
		snprintf(k, sizeof k, "%s.rope.scaling.type", m.arch);
		put_str(&m, k, "linear");
		put_f32(&m, "rope.scaling.factor", r->factor);
	}
	if (r->kind == STRATA_ROPE_LONGROPE) {
		/* llama.cpp's Phi-3 converter: the original context and the
		 * cos/sin scale; the factors are tensors */
		put_u32(&m, "rope.scaling.original_context_length",
			r->original_max_position_embeddings);
		put_f32(&m, "rope.scaling.attn_factor",
			strata__quant_longrope_scale(d));
	}
	if (d->family == STRATA_FAMILY_GEMMA2 ||
	    d->family == STRATA_FAMILY_GEMMA3)
		gemma_metadata(&m, d);
	else if (d->family == STRATA_FAMILY_PHI3 && d->sliding_window)
		put_u32(&m, "attention.sliding_window", d->sliding_window);
	if (d->experts)
		moe_metadata(&m, d);
	if (m.s)
		return m.s;
	return strata__quant_hf_vocab(w, model_dir, d, err);
}

/* ------------------------------------------------------------------------ */
/* llama3 rope                                                              */
/* ------------------------------------------------------------------------ */

strata_status strata__quant_rope_factors(const strata_model_desc *d,
					 float **out, strata_error *err)
{
	*out = NULL;
	const strata_rope_scaling *r = &d->rope_scaling;
	if (r->kind != STRATA_ROPE_LLAMA3)
		return STRATA_OK;
	uint64_t half = d->head_dim / 2;
	if (!half || !(r->factor > 0) || !(r->high_freq_factor > r->low_freq_factor))
		return strata_fail(err, STRATA_E_MODEL_CONFIG, "check config.json",
				   "llama3 rope scaling needs factor > 0 and "
				   "high_freq_factor > low_freq_factor");
	float *f = strata_alloc_or_error(half * sizeof *f, "rope factors", err);
	if (!f)
		return STRATA_E_NOMEM;
	/* llama.cpp's converter: per frequency, 1 above the high-frequency
	 * wavelength bound, `factor` below the low one, a smooth blend
	 * between */
	double ctx = (double)r->original_max_position_embeddings;
	double lo_wave = ctx / r->low_freq_factor, hi_wave = ctx / r->high_freq_factor;
	for (uint64_t i = 0; i < half; i++) {
		double freq = 1.0 / pow(d->rope_theta,
					(double)(2 * i) / (double)d->head_dim);
		double wave = 2.0 * M_PI / freq, v;
		if (wave < hi_wave) {
			v = 1.0;
		} else if (wave > lo_wave) {
			v = r->factor;
		} else {
			double smooth = (ctx / wave - r->low_freq_factor) /
					(r->high_freq_factor - r->low_freq_factor);
			v = 1.0 / ((1.0 - smooth) / r->factor + smooth);
		}
		f[i] = (float)v;
	}
	*out = f;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Phi-3 longrope                                                           */
/* ------------------------------------------------------------------------ */

double strata__quant_longrope_scale(const strata_model_desc *d)
{
	const strata_rope_scaling *r = &d->rope_scaling;
	if (r->attention_factor > 0)
		return r->attention_factor;
	/* transformers' default (and llama.cpp's converter's) from the ratio
	 * of the context to the original one */
	double orig = (double)r->original_max_position_embeddings;
	double ratio = (d->max_positions ? (double)d->max_positions : 2048.0) /
		       orig;
	return ratio <= 1.0 ? 1.0 : sqrt(1.0 + log(ratio) / log(orig));
}
