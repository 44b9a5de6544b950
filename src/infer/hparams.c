/* hparams.c - a model's shape for the forward pass, from config.json or GGUF
 * metadata; the rotary frequencies (layer: infer).
 *
 * Trust: config.json and GGUF metadata are hostile. Every count is checked
 * against a cap and against the others (heads * head_dim, GQA ratio) before
 * anything is sized from it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "strata/infer.h"

#define MAX_DIM (1u << 20)
#define MAX_LAYERS 4096u
#define MAX_HEADS 4096u
#define MAX_CONFIG_BYTES (1u << 20)

static const char *const family_names[] = {
#define STRATA_INFER_FAMILY_NAME(name, text) text,
	STRATA_INFER_FAMILY_MAP(STRATA_INFER_FAMILY_NAME)
#undef STRATA_INFER_FAMILY_NAME
};

/* ------------------------------------------------------------------------ */

static strata_status bad_key(strata_error *err, const char *where,
			     const char *key, const char *why)
{
	return strata_fail(err, STRATA_E_MODEL_CONFIG,
			   "fix or regenerate the model's configuration",
			   "%s: '%s' %s", where, key, why);
}

/* An integer key in [lo, hi]; absent: *out = dflt, or an error when dflt
 * is UINT64_MAX (required). */
static strata_status json_u32(json_t *o, const char *key, uint64_t dflt,
			      uint32_t lo, uint32_t hi, uint32_t *out,
			      strata_error *err)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		if (dflt == UINT64_MAX)
			return bad_key(err, "config.json", key, "is missing");
		*out = (uint32_t)dflt;
		return STRATA_OK;
	}
	if (!json_is_integer(v) || json_integer_value(v) < lo ||
	    json_integer_value(v) > hi) {
		char why[96];
		snprintf(why, sizeof why, "must be an integer in [%u, %u]", lo,
			 hi);
		return bad_key(err, "config.json", key, why);
	}
	*out = (uint32_t)json_integer_value(v);
	return STRATA_OK;
}

static strata_status json_num(json_t *o, const char *key, double dflt,
			      double *out, strata_error *err)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		*out = dflt;
		return STRATA_OK;
	}
	if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
	    json_number_value(v) < 0)
		return bad_key(err, "config.json", key,
			       "must be a finite non-negative number");
	*out = json_number_value(v);
	return STRATA_OK;
}

/* rope_scaling (legacy) or rope_parameters (transformers 5). */
static strata_status read_rope(json_t *root, strata_infer_hparams *hp,
			       strata_error *err)
{
	json_t *rp = json_object_get(root, "rope_parameters");
	json_t *rs = json_object_get(root, "rope_scaling");
	double theta = 10000.0;
	strata_status st = json_num(root, "rope_theta", 10000.0, &theta, err);
	if (st)
		return st;
	if (json_is_object(rp) && json_object_get(rp, "rope_theta") &&
	    (st = json_num(rp, "rope_theta", theta, &theta, err)))
		return st;
	hp->rope_theta = theta;
	json_t *sc = json_is_object(rs) ? rs : json_is_object(rp) ? rp : NULL;
	if (!sc)
		return STRATA_OK;
	json_t *type = json_object_get(sc, "rope_type");
	if (!type)
		type = json_object_get(sc, "type");
	const char *t = json_is_string(type) ? json_string_value(type)
					      : "default";
	if (!strcmp(t, "default"))
		return STRATA_OK;
	if (strcmp(t, "llama3"))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "use a model with default or llama3 rope "
				   "scaling",
				   "config.json: rope scaling type '%.40s' is "
				   "not supported",
				   t);
	if ((st = json_num(sc, "factor", 0, &hp->rope_factor, err)) ||
	    (st = json_num(sc, "low_freq_factor", 1,
			   &hp->rope_low_freq_factor, err)) ||
	    (st = json_num(sc, "high_freq_factor", 4,
			   &hp->rope_high_freq_factor, err)) ||
	    (st = json_num(sc, "original_max_position_embeddings", 8192,
			   &hp->rope_original_context, err)))
		return st;
	if (!(hp->rope_factor > 0) ||
	    !(hp->rope_high_freq_factor > hp->rope_low_freq_factor) ||
	    !(hp->rope_low_freq_factor > 0) || !(hp->rope_original_context > 0))
		return bad_key(err, "config.json", "rope_scaling",
			       "needs factor > 0 and high_freq_factor > "
			       "low_freq_factor > 0");
	return STRATA_OK;
}

static strata_status read_family(json_t *root, strata_infer_hparams *hp,
				 strata_error *err)
{
	json_t *mt = json_object_get(root, "model_type");
	const char *t = json_is_string(mt) ? json_string_value(mt) : "";
	if (!strcmp(t, "llama"))
		hp->family = STRATA_FAMILY_LLAMA;
	else if (!strcmp(t, "mistral"))
		hp->family = STRATA_FAMILY_MISTRAL;
	else if (!strcmp(t, "qwen2"))
		hp->family = STRATA_FAMILY_QWEN2;
	else {
		char shown[64];
		strata_escape(shown, sizeof shown, t, strlen(t));
		return strata_fail(err, STRATA_E_MODEL_ARCH,
				   "use a llama, mistral or qwen2 model",
				   "config.json: model_type '%s' is not a "
				   "family strata can run",
				   shown);
	}
	return STRATA_OK;
}

static strata_status read_window(json_t *root, strata_infer_hparams *hp,
				 strata_error *err)
{
	if (hp->family == STRATA_FAMILY_QWEN2) {
		json_t *u = json_object_get(root, "use_sliding_window");
		if (json_is_true(u))
			return strata_fail(err, STRATA_E_UNSUPPORTED,
					   "use a qwen2 model without "
					   "use_sliding_window",
					   "config.json: qwen2's per-layer "
					   "sliding window is not supported");
		return STRATA_OK;
	}
	if (hp->family != STRATA_FAMILY_MISTRAL)
		return STRATA_OK;
	return json_u32(root, "sliding_window", 0, 0, UINT32_MAX, &hp->window,
			err);
}

static int32_t json_id(json_t *root, const char *key)
{
	json_t *v = json_object_get(root, key);
	if (json_is_array(v))
		v = json_array_get(v, 0);
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) < INT32_MAX)
		return (int32_t)json_integer_value(v);
	return -1;
}

static strata_status parse_config(const char *text, size_t len,
				  strata_infer_hparams *hp, strata_error *err)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(root)) {
		json_decref(root);
		return strata_fail(err, STRATA_E_MODEL_CONFIG,
				   "fix or regenerate the model's config.json",
				   "config.json: not a JSON object (line %d: "
				   "%.80s)",
				   je.line, je.text);
	}
	uint32_t hd = 0;
	double eps = 1e-6;
	strata_status st;
	if ((st = read_family(root, hp, err)) ||
	    (st = json_u32(root, "hidden_size", UINT64_MAX, 2, MAX_DIM,
			   &hp->dim, err)) ||
	    (st = json_u32(root, "intermediate_size", UINT64_MAX, 1, MAX_DIM,
			   &hp->ffn, err)) ||
	    (st = json_u32(root, "num_hidden_layers", UINT64_MAX, 1,
			   MAX_LAYERS, &hp->layers, err)) ||
	    (st = json_u32(root, "num_attention_heads", UINT64_MAX, 1,
			   MAX_HEADS, &hp->heads, err)) ||
	    (st = json_u32(root, "num_key_value_heads", hp->heads, 1,
			   MAX_HEADS, &hp->kv_heads, err)) ||
	    (st = json_u32(root, "head_dim", 0, 0, MAX_DIM, &hd, err)) ||
	    (st = json_u32(root, "max_position_embeddings", 2048, 1,
			   UINT32_MAX, &hp->context, err)) ||
	    (st = json_u32(root, "vocab_size", 0, 0, INT32_MAX, &hp->vocab,
			   err)) ||
	    (st = json_num(root, "rms_norm_eps", 1e-6, &eps, err)) ||
	    (st = read_rope(root, hp, err)) || (st = read_window(root, hp, err)))
		goto out;
	json_t *act = json_object_get(root, "hidden_act");
	if (act && !(json_is_string(act) &&
		     (!strcmp(json_string_value(act), "silu") ||
		      !strcmp(json_string_value(act), "swish")))) {
		st = strata_fail(err, STRATA_E_UNSUPPORTED,
				 "use a model with the SwiGLU (silu) MLP",
				 "config.json: hidden_act %.40s is not "
				 "supported",
				 json_is_string(act) ? json_string_value(act)
						     : "(not a string)");
		goto out;
	}
	json_t *tie = json_object_get(root, "tie_word_embeddings");
	hp->tied = json_is_boolean(tie) ? (int8_t)json_is_true(tie) : -1;
	hp->head_dim = hd ? hd : hp->dim / hp->heads;
	hp->norm_eps = (float)eps;
	hp->rope_layout = STRATA_ROPE_HALF;
	hp->bos = json_id(root, "bos_token_id");
	hp->eos = json_id(root, "eos_token_id");
out:
	json_decref(root);
	return st;
}

static strata_status from_json(const char *model_path,
			       strata_infer_hparams *hp, strata_error *err)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/config.json", model_path) >=
	    sizeof path)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "use a shorter path", "model path too long");
	char *text = NULL;
	size_t len = 0;
	strata_status st = strata_file_read_all(path, MAX_CONFIG_BYTES, &text,
						&len, err);
	if (st)
		return strata_error_set_fix(err, "a safetensors model directory "
					    "needs its config.json");
	st = parse_config(text, len, hp, err);
	strata_free(text);
	return st;
}

/* ------------------------------------------------------------------------ */

static strata_status gguf_u32(const strata_gguf *g, const char *arch,
			      const char *suffix, uint64_t dflt, uint32_t lo,
			      uint32_t hi, uint32_t *out, strata_error *err)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	uint64_t v;
	if (strata_gguf_find(g, key) < 0) {
		if (dflt == UINT64_MAX)
			return strata_fail(err, STRATA_E_MODEL_CONFIG,
					   "use a GGUF written by a current "
					   "converter",
					   "GGUF metadata: '%s' is missing",
					   key);
		*out = (uint32_t)dflt;
		return STRATA_OK;
	}
	strata_status st = strata_gguf_get_u64(g, key, &v, err);
	if (st)
		return st;
	if (v < lo || v > hi)
		return strata_fail(err, STRATA_E_MODEL_CONFIG,
				   "fix or regenerate the GGUF file",
				   "GGUF metadata: '%s' is %llu, outside "
				   "[%u, %u]",
				   key, (unsigned long long)v, lo, hi);
	*out = (uint32_t)v;
	return STRATA_OK;
}

static strata_status gguf_f64(const strata_gguf *g, const char *arch,
			      const char *suffix, double dflt, double *out,
			      strata_error *err)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	*out = dflt;
	if (strata_gguf_find(g, key) < 0)
		return STRATA_OK;
	strata_status st = strata_gguf_get_f64(g, key, out, err);
	if (st == STRATA_OK && !(isfinite(*out) && *out >= 0))
		return strata_fail(err, STRATA_E_MODEL_CONFIG,
				   "fix or regenerate the GGUF file",
				   "GGUF metadata: '%s' is not a finite "
				   "non-negative number",
				   key);
	return st;
}

static int32_t gguf_id(const strata_gguf *g, const char *key)
{
	uint64_t v;
	strata_error ignored;
	if (strata_gguf_get_u64(g, key, &v, &ignored) != STRATA_OK ||
	    v >= INT32_MAX)
		return -1;
	return (int32_t)v;
}

static strata_status from_gguf(const strata_gguf *g, strata_infer_hparams *hp,
			       strata_error *err)
{
	const char *arch;
	size_t alen;
	strata_status st = strata_gguf_get_string(g, "general.architecture",
						  &arch, &alen, err);
	if (st)
		return st;
	char a[32];
	if (alen == 5 && !memcmp(arch, "llama", 5)) {
		hp->family = STRATA_FAMILY_LLAMA;
		/* llama.cpp's converters permute q/k so that GGUF llama
		 * rotates adjacent pairs. */
		hp->rope_layout = STRATA_ROPE_INTERLEAVED;
	} else if (alen == 5 && !memcmp(arch, "qwen2", 5)) {
		hp->family = STRATA_FAMILY_QWEN2;
		hp->rope_layout = STRATA_ROPE_HALF;
	} else {
		char shown[64];
		strata_escape(shown, sizeof shown, arch, alen);
		return strata_fail(err, STRATA_E_MODEL_ARCH,
				   "use a llama or qwen2 GGUF",
				   "GGUF architecture '%s' is not a family "
				   "strata can run",
				   shown);
	}
	memcpy(a, arch, alen);
	a[alen] = '\0';
	double eps, theta;
	uint32_t rope_dims = 0, key_length = 0;
	if ((st = gguf_u32(g, a, "embedding_length", UINT64_MAX, 2, MAX_DIM,
			   &hp->dim, err)) ||
	    (st = gguf_u32(g, a, "feed_forward_length", UINT64_MAX, 1, MAX_DIM,
			   &hp->ffn, err)) ||
	    (st = gguf_u32(g, a, "block_count", UINT64_MAX, 1, MAX_LAYERS,
			   &hp->layers, err)) ||
	    (st = gguf_u32(g, a, "attention.head_count", UINT64_MAX, 1,
			   MAX_HEADS, &hp->heads, err)) ||
	    (st = gguf_u32(g, a, "attention.head_count_kv", hp->heads, 1,
			   MAX_HEADS, &hp->kv_heads, err)) ||
	    (st = gguf_u32(g, a, "context_length", 2048, 1, UINT32_MAX,
			   &hp->context, err)) ||
	    (st = gguf_u32(g, a, "rope.dimension_count", 0, 0, MAX_DIM,
			   &rope_dims, err)) ||
	    (st = gguf_u32(g, a, "attention.key_length", 0, 0, MAX_DIM,
			   &key_length, err)) ||
	    (st = gguf_f64(g, a, "attention.layer_norm_rms_epsilon", 1e-5,
			   &eps, err)) ||
	    (st = gguf_f64(g, a, "rope.freq_base", 10000.0, &theta, err)))
		return st;
	/* key_length is the head size where it is not dim / heads. */
	hp->head_dim = key_length ? key_length : hp->dim / hp->heads;
	if (rope_dims && rope_dims != hp->head_dim)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "use a model whose rope covers whole heads",
				   "GGUF: rope over %u of %u head dimensions "
				   "is not supported",
				   rope_dims, hp->head_dim);
	hp->norm_eps = (float)eps;
	hp->rope_theta = theta;
	hp->gguf = true;
	hp->bos = gguf_id(g, "tokenizer.ggml.bos_token_id");
	hp->eos = gguf_id(g, "tokenizer.ggml.eos_token_id");
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

/* ------------------------------------------------------------------------ */

const char *strata_infer_family_name(strata_infer_family f)
{
	if ((unsigned)f >= sizeof family_names / sizeof *family_names)
		return "unknown";
	return family_names[f];
}

strata_status strata_infer_hparams_read(const char *model_path,
					const strata_catalog *c,
					strata_infer_hparams *out,
					strata_error *err)
{
	strata_infer_hparams hp = {0};
	hp.bos = hp.eos = -1;
	hp.tied = -1;
	const strata_gguf *g = strata_catalog_gguf(c);
	strata_status st = g ? from_gguf(g, &hp, err)
			     : from_json(model_path, &hp, err);
	if (st || (st = check(&hp, err)))
		return st;
	const char *embed_name = g ? "token_embd.weight"
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
	strata_infer_hparams hp = {0};
	hp.bos = hp.eos = -1;
	hp.tied = -1;
	strata_status st = parse_config(json, len, &hp, err);
	if (st || (st = check(&hp, err)))
		return st;
	*out = hp;
	return STRATA_OK;
}

void strata_infer_rope_freqs(const strata_infer_hparams *hp, float *inv_freq)
{
	const uint32_t d = hp->head_dim;
	for (uint32_t i = 0; i < d / 2; i++) {
		/* transformers forms theta^(2i/d) in float32. */
		float f = (float)(1.0 / pow(hp->rope_theta,
					    (double)(2 * i) / d));
		if (hp->rope_factor > 0) {
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
