/* hparams.c - the forward pass's runtime view of a model's shape, filled
 * from the model layer's description (the one reader of config.json and
 * GGUF metadata); the rotary frequencies (layer: infer).
 *
 * Trust: the description is type-checked by the model layer; here every
 * count is checked against the forward pass's caps (u32 sizes) and against
 * the others (heads * head_dim, GQA ratio) before anything is sized from
 * it, and every feature the forward pass cannot run is refused by name
 * (rope scaling other than llama3, activations other than silu, qwen2's
 * per-layer window, partial rope).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "strata/infer.h"

#define MAX_DIM (1u << 20)
#define MAX_LAYERS 4096u
#define MAX_HEADS 4096u

/* Where a description came from, for naming keys in errors. */
typedef struct origin {
	const strata_model_desc *d;
	bool gguf;
	strata_error *err;
} origin;

/* ------------------------------------------------------------------------ */

/* v must lie in [lo, hi]; the key is named as the file spells it:
 * config.json's `cfg_key`, or GGUF's `ARCH.gguf_key`. */
static strata_status fit(const origin *o, const char *cfg_key,
			 const char *gguf_key, uint64_t v, uint32_t lo,
			 uint32_t hi, uint32_t *out)
{
	if (v >= lo && v <= hi) {
		*out = (uint32_t)v;
		return STRATA_OK;
	}
	if (o->gguf)
		return strata_fail(o->err, STRATA_E_MODEL_CONFIG,
				   "fix or regenerate the GGUF file",
				   "GGUF metadata: '%s.%s' is %" PRIu64
				   ", outside [%u, %u]",
				   o->d->architecture, gguf_key, v, lo, hi);
	return strata_fail(o->err, STRATA_E_MODEL_CONFIG,
			   "fix or regenerate the model's configuration",
			   "config.json: '%s' is %" PRIu64
			   ", must be an integer in [%u, %u]",
			   cfg_key, v, lo, hi);
}

/* The families the forward pass runs: llama, mistral and qwen2 from
 * config.json; llama and qwen2 from GGUF (llama.cpp writes Mistral as
 * llama). GGUF llama's q/k rows are permuted by the converters so that
 * heads rotate adjacent pairs. */
static strata_status take_family(const origin *o, strata_infer_hparams *hp)
{
	const strata_model_desc *d = o->d;
	char shown[64];
	strata_escape(shown, sizeof shown, d->architecture,
		      strlen(d->architecture));
	if (o->gguf && d->family != STRATA_FAMILY_UNKNOWN &&
	    d->family != STRATA_FAMILY_MISTRAL) {
		/* llama.cpp writes Mixtral as a llama, rows permuted too */
		hp->rope_layout = d->family == STRATA_FAMILY_LLAMA ||
						  d->family == STRATA_FAMILY_MIXTRAL
					  ? STRATA_ROPE_INTERLEAVED
					  : STRATA_ROPE_HALF;
	} else if (o->gguf) {
		return strata_fail(o->err, STRATA_E_MODEL_ARCH,
				   "use a llama, qwen2, qwen3, gemma2, gemma3, "
				   "phi3, qwen2moe or qwen3moe GGUF",
				   "GGUF architecture '%s' is not a family "
				   "strata can run",
				   shown);
	} else if (d->family == STRATA_FAMILY_UNKNOWN) {
		return strata_fail(o->err, STRATA_E_MODEL_ARCH,
				   "use a llama, mistral, qwen2, qwen3, gemma2, "
				   "gemma3_text or phi3 model",
				   "config.json: model_type '%s' is not a "
				   "family strata can run",
				   shown);
	} else {
		hp->rope_layout = STRATA_ROPE_HALF;
	}
	hp->family = d->family;
	hp->gguf = o->gguf;
	return STRATA_OK;
}

static strata_status take_sizes(const origin *o, strata_infer_hparams *hp)
{
	const strata_model_desc *d = o->d;
	strata_status st;
	/* transformers' and llama.cpp's default context when none is given */
	uint64_t context = d->max_positions ? d->max_positions : 2048;
	if ((st = fit(o, "hidden_size", "embedding_length", d->hidden, 2,
		      MAX_DIM, &hp->dim)) ||
	    (st = fit(o, "intermediate_size", "feed_forward_length",
		      d->intermediate, 1, MAX_DIM, &hp->ffn)) ||
	    (st = fit(o, "num_hidden_layers", "block_count", d->layers, 1,
		      MAX_LAYERS, &hp->layers)) ||
	    (st = fit(o, "num_attention_heads", "attention.head_count",
		      d->heads, 1, MAX_HEADS, &hp->heads)) ||
	    (st = fit(o, "num_key_value_heads", "attention.head_count_kv",
		      d->kv_heads, 1, MAX_HEADS, &hp->kv_heads)) ||
	    (st = fit(o, "head_dim", "attention.key_length", d->head_dim, 0,
		      MAX_DIM, &hp->head_dim)) ||
	    (st = fit(o, "max_position_embeddings", "context_length", context,
		      1, UINT32_MAX, &hp->context)) ||
	    (st = fit(o, "vocab_size", "vocab_size", d->vocab, 0, INT32_MAX,
		      &hp->vocab)))
		return st;
	/* GGUF's sliding_window is not applied to llama (llama.cpp ignores
	 * it too) but is to the families whose layers slide there (Gemma,
	 * Phi-3); config.json's windows are. */
	bool slides = d->family == STRATA_FAMILY_GEMMA2 ||
		      d->family == STRATA_FAMILY_GEMMA3 ||
		      d->family == STRATA_FAMILY_PHI3;
	if ((!o->gguf || slides) &&
	    (st = fit(o, "sliding_window", "", d->sliding_window, 0,
		      UINT32_MAX, &hp->window)))
		return st;
	hp->norm_eps = (float)d->rms_eps;
	hp->rope_theta = d->rope_theta;
	hp->tied = o->d->tied_given ? (int8_t)d->tied_embeddings : -1;
	hp->bos = (int32_t)d->bos_token_id;
	hp->eos = (int32_t)d->eos_token_id;
	return STRATA_OK;
}

/* Phi-3's longrope: a divisor list per context range, and cos/sin scaled
 * by attention_factor, or by transformers' default from the ratio of the
 * context to the original one. Queries and keys both carry the scale, so
 * it is the attention scores' factor squared. */
static strata_status take_longrope(const origin *o,
				   const strata_rope_scaling *r,
				   strata_infer_hparams *hp)
{
	uint64_t orig = r->original_max_position_embeddings;
	if (r->factor_count != hp->head_dim / 2 || !orig)
		return strata_fail(o->err, STRATA_E_MODEL_CONFIG,
				   "fix or regenerate the model's configuration",
				   "config.json: longrope needs head_dim / 2 = %u "
				   "short and long factors and "
				   "original_max_position_embeddings (has %u)",
				   hp->head_dim / 2, r->factor_count);
	double f = r->attention_factor;
	if (!(f > 0)) {
		double ratio = (double)hp->context / (double)orig;
		f = ratio <= 1.0 ? 1.0
				 : sqrt(1.0 + log(ratio) / log((double)orig));
	}
	hp->rope_ext_count = r->factor_count;
	memcpy(hp->rope_short, r->short_factor,
	       r->factor_count * sizeof *hp->rope_short);
	memcpy(hp->rope_long, r->long_factor,
	       r->factor_count * sizeof *hp->rope_long);
	hp->rope_original_context = (double)orig;
	hp->attn_scale *= (float)(f * f);
	return STRATA_OK;
}

/* config.json: default or llama3 rope scaling. GGUF stores llama3 as a
 * rope_freqs tensor, so only a scaling type with a real factor is refused. */
static strata_status take_rope(const origin *o, strata_infer_hparams *hp)
{
	const strata_rope_scaling *r = &o->d->rope_scaling;
	if (o->gguf) {
		if (r->kind != STRATA_ROPE_DEFAULT && r->factor != 0 &&
		    r->factor != 1)
			return strata_fail(o->err, STRATA_E_UNSUPPORTED,
					   "use a GGUF without rope scaling",
					   "GGUF metadata: rope scaling type "
					   "'%.31s' (factor %g) is not supported",
					   r->type, r->factor);
		if (o->d->rope_dims && o->d->rope_dims != hp->head_dim)
			return strata_fail(o->err, STRATA_E_UNSUPPORTED,
					   "use a model whose rope covers whole heads",
					   "GGUF: rope over %" PRIu64 " of %u head "
					   "dimensions is not supported",
					   o->d->rope_dims, hp->head_dim);
		return STRATA_OK;
	}
	if (r->kind == STRATA_ROPE_DEFAULT)
		return STRATA_OK;
	if (r->kind == STRATA_ROPE_LINEAR && r->factor > 0) {
		hp->rope_linear = true;
		hp->rope_factor = r->factor;
		return STRATA_OK;
	}
	if (r->kind == STRATA_ROPE_LONGROPE)
		return take_longrope(o, r, hp);
	if (r->kind != STRATA_ROPE_LLAMA3)
		return strata_fail(o->err, STRATA_E_UNSUPPORTED,
				   "use a model with default, linear, llama3 "
				   "or longrope rope scaling",
				   "config.json: rope scaling type '%.31s' is "
				   "not supported",
				   r->type);
	/* the model layer checked factor > 0, high > low and the original
	 * context; the blend also divides by low_freq_factor */
	if (!(r->low_freq_factor > 0))
		return strata_fail(o->err, STRATA_E_MODEL_CONFIG,
				   "fix or regenerate the model's configuration",
				   "config.json: 'rope_scaling' needs factor > 0 "
				   "and high_freq_factor > low_freq_factor > 0");
	hp->rope_factor = r->factor;
	hp->rope_low_freq_factor = r->low_freq_factor;
	hp->rope_high_freq_factor = r->high_freq_factor;
	hp->rope_original_context = (double)r->original_max_position_embeddings;
	return STRATA_OK;
}

/* What the families beyond llama compute, from the description. */
static void take_extras(const origin *o, strata_infer_hparams *hp)
{
	const strata_model_desc *d = o->d;
	hp->qk_norm = d->qk_norm;
	hp->norm_plus_one = d->norm_plus_one;
	hp->sandwich_norms = d->sandwich_norms;
	hp->embed_scaled = d->embed_scaled;
	hp->fused_qkv = d->fused_qkv;
	hp->attn_softcap = (float)d->attn_softcap;
	hp->final_softcap = (float)d->final_softcap;
	double qs = d->query_scale > 0 ? d->query_scale : (double)hp->head_dim;
	hp->attn_scale = (float)(1.0 / sqrt(qs));
	hp->rope_local_theta = d->rope_local_theta;
	hp->has_layer_types = d->has_layer_types;
	memcpy(hp->window_layers, d->window_layers, sizeof hp->window_layers);
	if (d->experts) { /* sizes the model layer checked (<= 2^40, 4096) */
		hp->experts = (uint32_t)d->experts;
		hp->experts_used = (uint32_t)d->experts_used;
		hp->moe_ffn = (uint32_t)d->moe_intermediate;
		hp->shared_ffn = (uint32_t)d->shared_intermediate;
		hp->norm_topk_prob = d->norm_topk_prob;
		hp->ffn = hp->moe_ffn > hp->shared_ffn ? hp->moe_ffn
						       : hp->shared_ffn;
	}
}

/* What the MLP and attention support beyond the shape. */
static strata_status take_features(const origin *o, strata_infer_hparams *hp)
{
	const char *act = o->d->hidden_act;
	if (!strcmp(act, "gelu_pytorch_tanh") &&
	    (o->d->family == STRATA_FAMILY_GEMMA2 ||
	     o->d->family == STRATA_FAMILY_GEMMA3)) {
		hp->gelu = true;
	} else if (act[0] && strcmp(act, "silu") && strcmp(act, "swish")) {
		char shown[64];
		strata_escape(shown, sizeof shown, act, strlen(act));
		return strata_fail(o->err, STRATA_E_UNSUPPORTED,
				   "use a model with the SwiGLU (silu) MLP, or a "
				   "Gemma with gelu_pytorch_tanh",
				   "config.json: hidden_act %s is not supported",
				   shown);
	}
	if (o->d->layer_windows)
		return strata_fail(o->err, STRATA_E_UNSUPPORTED,
				   "use a model without use_sliding_window",
				   "config.json: %s's per-layer sliding window "
				   "(past max_window_layers) is not supported",
				   strata_family_name(o->d->family));
	return STRATA_OK;
}

static strata_status check(const strata_infer_hparams *hp, strata_error *err)
{
	if (hp->heads % hp->kv_heads)
		return strata_fail(err, STRATA_E_MODEL_CONFIG,
				   "fix the model's head counts",
				   "%u attention heads are not a multiple of "
				   "%u key/value heads",
				   hp->heads, hp->kv_heads);
	if (hp->head_dim == 0 || hp->head_dim % 2 ||
	    (uint64_t)hp->heads * hp->head_dim > MAX_DIM)
		return strata_fail(err, STRATA_E_MODEL_CONFIG,
				   "fix the model's head size",
				   "head size %u (x %u heads) is not a usable "
				   "even size",
				   hp->head_dim, hp->heads);
	return STRATA_OK;
}

/* GGUF Phi-3 longrope: the divisor lists are tensors (the model layer
 * checked both are vectors of head_dim / 2), read here: two small
 * payload reads, the only ones making hyper-parameters takes. */
static strata_status gguf_longrope(const strata_catalog *c,
				   const strata_model_desc *d,
				   strata_infer_hparams *hp, strata_error *err)
{
	if (!hp->gguf || d->rope_scaling.kind != STRATA_ROPE_LONGROPE)
		return STRATA_OK;
	strata_rope_scaling local = d->rope_scaling;
	const char *names[2] = {"rope_factors_long.weight",
				"rope_factors_short.weight"};
	float *dst[2] = {local.long_factor, local.short_factor};
	strata_weight_store *ws = NULL;
	strata_status st = strata_weight_store_create(c, NULL, &ws, err);
	unsigned char raw[256 * 4];
	for (int i = 0; st == STRATA_OK && i < 2; i++) {
		const strata_tensor *t = strata_catalog_find(c, names[i]);
		if (!t || t->bytes > sizeof raw || t->elements != local.factor_count) {
			st = strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
					 "the file is corrupt; re-convert the model",
					 "tensor '%s' is not a vector of %u",
					 names[i], local.factor_count);
			break;
		}
		void *const dsts[1] = {raw};
		st = strata_weight_store_read(ws, &t, dsts, 1, err);
		if (st == STRATA_OK)
			st = strata_dtype_to_f32(t->dtype, raw, t->elements,
						 dst[i], err);
		for (uint32_t k = 0; st == STRATA_OK && k < local.factor_count; k++)
			if (!(dst[i][k] > 0 && isfinite(dst[i][k])))
				st = strata_fail(err, STRATA_E_MODEL_CONFIG,
						 "fix or regenerate the GGUF file",
						 "%s[%u] is %g, not a positive divisor",
						 names[i], k, (double)dst[i][k]);
	}
	strata_weight_store_destroy(ws);
	if (st)
		return st;
	origin o = {d, true, err};
	return take_longrope(&o, &local, hp);
}

/* ------------------------------------------------------------------------ */

const char *strata_infer_family_name(strata_infer_family f)
{
	return strata_family_name(f);
}

void strata_infer_plan_arch(const strata_infer_hparams *hp,
			    strata_plan_arch *out)
{
	*out = (strata_plan_arch){
		.known = true, .family = strata_infer_family_name(hp->family),
		.layers = hp->layers, .hidden = hp->dim,
		.intermediate = hp->ffn, .heads = hp->heads,
		.kv_heads = hp->kv_heads, .head_dim = hp->head_dim,
		.vocab = hp->vocab, .max_context = hp->context,
		.experts = hp->experts, .experts_used = hp->experts_used,
		.local_rope = hp->rope_local_theta > 0,
		.norm_plus_one = hp->norm_plus_one,
	};
}

strata_status strata_infer_hparams_from_desc(const strata_model_desc *d,
					     strata_infer_hparams *out,
					     strata_error *err)
{
	origin o = {d, d->source == STRATA_FORMAT_GGUF, err};
	strata_infer_hparams hp = {0};
	strata_status st;
	if ((st = take_family(&o, &hp)) || (st = take_sizes(&o, &hp)) ||
	    (st = check(&hp, err)))
		return st;
	take_extras(&o, &hp);
	if ((st = take_rope(&o, &hp)) || (st = take_features(&o, &hp)))
		return st;
	*out = hp;
	return STRATA_OK;
}

strata_status strata_infer_hparams_read(const char *model_path,
					const strata_catalog *c,
					strata_infer_hparams *out,
					strata_error *err)
{
	strata_model_desc d;
	strata_infer_hparams hp;
	strata_status st = strata_model_describe(model_path, c, &d, err);
	if (st)
		return st;
	if (d.headers_only)
		return d.source == STRATA_FORMAT_GGUF
			? strata_fail(err, STRATA_E_MODEL_CONFIG,
				      "use a GGUF written by a current converter",
				      "GGUF metadata: 'general.architecture' "
				      "is missing")
			: strata_fail(err, STRATA_E_MODEL_CONFIG,
				      "a safetensors model directory needs its "
				      "config.json",
				      "%s: no config.json next to the weights",
				      model_path);
	if ((st = strata_infer_hparams_from_desc(&d, &hp, err)) ||
	    (st = gguf_longrope(c, &d, &hp, err)))
		return st;
	/* The one check of config against tensors that inspect makes too:
	 * run and plan never use a vocab_size, head count or tie that the
	 * tensors contradict. */
	if ((st = strata_model_check_tensors(&d, c, err)))
		return st;
	const char *embed_name = hp.gguf ? "token_embd.weight"
					 : "model.embed_tokens.weight";
	const strata_tensor *e = strata_catalog_find(c, embed_name);
	if (!e)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_MISSING,
				   "use a complete checkpoint",
				   "embedding tensor '%s' is missing",
				   embed_name);
	if (e->n_dims != 2 || e->shape_hf[0] == 0 ||
	    e->shape_hf[0] > INT32_MAX || e->shape_hf[1] != hp.dim)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
				   "use a checkpoint that matches its "
				   "configuration",
				   "embedding '%s' is not (vocab, %u)",
				   embed_name, hp.dim);
	hp.vocab = (uint32_t)e->shape_hf[0];
	*out = hp;
	return STRATA_OK;
}

strata_status strata_infer_config_parse(const char *json, size_t len,
					strata_infer_hparams *out,
					strata_error *err)
{
	strata_model_desc d;
	strata_status st = strata_model_describe_config(json, len,
							"config.json", &d, err);
	if (st)
		return st;
	return strata_infer_hparams_from_desc(&d, out, err);
}

uint32_t strata_infer_layer_window(const strata_infer_hparams *hp,
				   uint32_t l)
{
	if (!hp->window || !hp->has_layer_types)
		return hp->window;
	return l < 4096 && (hp->window_layers[l / 64] >> (l % 64)) & 1
		       ? hp->window
		       : 0;
}

bool strata_infer_rope_local_freqs(const strata_infer_hparams *hp,
				   float *inv_freq)
{
	if (!(hp->rope_local_theta > 0))
		return false;
	const uint32_t d = hp->head_dim;
	for (uint32_t i = 0; i < d / 2; i++)
		inv_freq[i] = (float)(1.0 / pow(hp->rope_local_theta,
						(double)(2 * i) / d));
	return true;
}

void strata_infer_rope_freqs(const strata_infer_hparams *hp, float *inv_freq)
{
	strata_infer_rope_freqs_for(hp, 0, inv_freq);
}

void strata_infer_rope_freqs_for(const strata_infer_hparams *hp,
				 uint32_t context, float *inv_freq)
{
	const uint32_t d = hp->head_dim;
	const float *ext = NULL;
	if (hp->rope_ext_count)
		ext = context > hp->rope_original_context ? hp->rope_long
							  : hp->rope_short;
	for (uint32_t i = 0; i < d / 2; i++) {
		/* transformers forms theta^(2i/d) in float32. */
		float f = (float)(1.0 / pow(hp->rope_theta,
					    (double)(2 * i) / d));
		if (ext) /* longrope: 1 / (ext_i * theta^(2i/d)) */
			f = (float)(1.0 / (ext[i] * pow(hp->rope_theta,
							(double)(2 * i) / d)));
		if (hp->rope_linear)
			f = (float)(f / hp->rope_factor);
		if (hp->rope_factor > 0 && !hp->rope_linear) {
			/* Llama 3: long wavelengths slowed by `factor`, short
			 * ones kept, a smooth blend between. */
			double wl = 2.0 * M_PI / f;
			double lo_wl = hp->rope_original_context /
				       hp->rope_low_freq_factor;
			double hi_wl = hp->rope_original_context /
				       hp->rope_high_freq_factor;
			if (wl > lo_wl) {
				f = (float)(f / hp->rope_factor);
			} else if (wl >= hi_wl) {
				double s = (hp->rope_original_context / wl -
					    hp->rope_low_freq_factor) /
					   (hp->rope_high_freq_factor -
					    hp->rope_low_freq_factor);
				f = (float)((1 - s) * f / hp->rope_factor +
					    s * f);
			}
		}
		inv_freq[i] = f;
	}
}
