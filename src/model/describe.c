/* describe.c - the architecture description from config.json (jansson) or
 * GGUF metadata (layer: model).
 *
 * Trust: config.json and GGUF metadata are hostile: each value is checked
 * for type and range, and the message names the key. Keys both old and new
 * transformers write are read: `rope_theta`/`rope_scaling` and
 * `rope_parameters`, `torch_dtype` and `dtype`.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "strata/model.h"

#define MAX_CONFIG_BYTES (16u << 20)
#define MAX_DIM (1ull << 40) /* far above any real width; keeps products safe */

static const char *const family_names[] = {
#define NAME(name, text) text,
	STRATA_FAMILY_MAP(NAME)
#undef NAME
};

static const char *const rope_names[] = {
#define NAME(name, text) text,
	STRATA_ROPE_MAP(NAME)
#undef NAME
};

const char *strata_family_name(strata_family f)
{
	return (unsigned)f < sizeof family_names / sizeof *family_names
		       ? family_names[f]
		       : "unknown";
}

static strata_family family_of(const char *arch)
{
	for (int f = 1; f < (int)(sizeof family_names / sizeof *family_names); f++)
		if (!strcmp(arch, family_names[f]))
			return (strata_family)f;
	return STRATA_FAMILY_UNKNOWN;
}

static void set_rope_kind(strata_rope_scaling *r, const char *type)
{
	snprintf(r->type, sizeof r->type, "%s", type);
	r->kind = STRATA_ROPE_OTHER;
	for (int k = 0; k < STRATA_ROPE_OTHER; k++)
		if (!strcmp(type, rope_names[k]))
			r->kind = (strata_rope_kind)k;
	if (!strcmp(type, "su")) /* Phi-3's first name for longrope */
		r->kind = STRATA_ROPE_LONGROPE;
}

bool strata_model_layer_windowed(const strata_model_desc *d, uint64_t l)
{
	if (!d->sliding_window)
		return false;
	if (!d->has_layer_types)
		return true;
	return l < 4096 && (d->window_layers[l / 64] >> (l % 64)) & 1;
}

/* ------------------------------------------------------------------------ */
/* config.json                                                              */
/* ------------------------------------------------------------------------ */

typedef struct cfg {
	json_t *root;
	const char *name;
	strata_error *err;
} cfg;

static strata_status bad(cfg *c, const char *key, const char *want)
{
	return strata_fail(c->err, STRATA_E_MODEL_CONFIG,
			   "fix or re-download config.json",
			   "%s: \"%s\" must be %s", c->name, key, want);
}

/* An integer in [min, MAX_DIM]; absent or null leaves *out (a default). */
static strata_status get_uint(cfg *c, json_t *obj, const char *key,
			      uint64_t min, uint64_t *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v))
		return STRATA_OK;
	if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min ||
	    (uint64_t)json_integer_value(v) > MAX_DIM)
		return bad(c, key, min ? "a positive integer" : "a non-negative integer");
	*out = (uint64_t)json_integer_value(v);
	return STRATA_OK;
}

static strata_status get_num(cfg *c, json_t *obj, const char *key,
			     double *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v))
		return STRATA_OK;
	if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
	    json_number_value(v) < 0)
		return bad(c, key, "a non-negative number");
	*out = json_number_value(v);
	return STRATA_OK;
}

static strata_status get_bool(cfg *c, const char *key, bool *out)
{
	json_t *v = json_object_get(c->root, key);
	if (!v || json_is_null(v))
		return STRATA_OK;
	if (!json_is_boolean(v))
		return bad(c, key, "true or false");
	*out = json_is_true(v);
	return STRATA_OK;
}

/* A token id, or the first of a list of them (eos_token_id may list
 * several). Lenient on purpose, as transformers is: an id that is not a
 * plain non-negative 31-bit integer reads as "not given" (-1), since the
 * ids only end generation and never size anything. */
static int64_t get_id(cfg *c, const char *key)
{
	json_t *v = json_object_get(c->root, key);
	if (json_is_array(v))
		v = json_array_get(v, 0);
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) < INT32_MAX)
		return (int64_t)json_integer_value(v);
	return -1;
}

static strata_status get_str(cfg *c, json_t *obj, const char *key, char *dst,
			     size_t cap)
{
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v))
		return STRATA_OK;
	if (!json_is_string(v) || json_string_length(v) >= cap)
		return bad(c, key, "a short string");
	if (!json_string_length(v)) /* a name ("" is no type at all) */
		return bad(c, key, "a non-empty string");
	snprintf(dst, cap, "%s", json_string_value(v));
	return STRATA_OK;
}

/* longrope's two lists of positive divisors, of one length each. */
static strata_status read_factors(cfg *c, json_t *o, const char *key,
				  strata_rope_scaling *r)
{
	const char *names[2] = {"short_factor", "long_factor"};
	float *dst[2] = {r->short_factor, r->long_factor};
	size_t cap = sizeof r->short_factor / sizeof *r->short_factor;
	for (int k = 0; k < 2; k++) {
		json_t *a = json_object_get(o, names[k]);
		size_t n = json_array_size(a);
		if (!json_is_array(a) || n == 0 || n > cap ||
		    (k == 1 && n != r->factor_count))
			return bad(c, key,
				   "a longrope scaling with short_factor and long_factor lists of one length (at most 256)");
		for (size_t i = 0; i < n; i++) {
			json_t *v = json_array_get(a, i);
			double x = json_is_number(v) ? json_number_value(v) : 0;
			if (!(x > 0) || !isfinite(x))
				return bad(c, names[k], "a list of positive numbers");
			dst[k][i] = (float)x;
		}
		r->factor_count = (uint32_t)n;
	}
	return STRATA_OK;
}

/* One rope object (rope_scaling or rope_parameters): its type and scaling
 * into *r, its rope_theta (when given) into *theta. */
static strata_status read_rope_obj(cfg *c, const char *key, json_t *o,
				   strata_rope_scaling *r, double *theta)
{
	char type[32] = "default";
	strata_status s;
	if ((s = get_str(c, o, "type", type, sizeof type)) ||
	    (s = get_str(c, o, "rope_type", type, sizeof type)) ||
	    (s = get_num(c, o, "rope_theta", theta)) ||
	    (s = get_num(c, o, "factor", &r->factor)) ||
	    (s = get_num(c, o, "low_freq_factor", &r->low_freq_factor)) ||
	    (s = get_num(c, o, "high_freq_factor", &r->high_freq_factor)) ||
	    (s = get_uint(c, o, "original_max_position_embeddings", 1,
			  &r->original_max_position_embeddings)))
		return s;
	set_rope_kind(r, type);
	if (r->kind == STRATA_ROPE_LONGROPE &&
	    ((s = get_num(c, o, "attention_factor", &r->attention_factor)) ||
	     (s = read_factors(c, o, key, r))))
		return s;
	if (r->kind == STRATA_ROPE_LLAMA3 &&
	    (r->factor <= 0 || !r->original_max_position_embeddings ||
	     r->high_freq_factor <= r->low_freq_factor))
		return bad(c, key,
			   "a llama3 scaling with factor > 0, original_max_position_embeddings and high_freq_factor > low_freq_factor");
	return STRATA_OK;
}

static bool same_scaling(const strata_rope_scaling *a,
			 const strata_rope_scaling *b)
{
	return a->kind == b->kind && !strcmp(a->type, b->type) &&
	       a->factor == b->factor &&
	       a->low_freq_factor == b->low_freq_factor &&
	       a->high_freq_factor == b->high_freq_factor &&
	       a->original_max_position_embeddings ==
		       b->original_max_position_embeddings &&
	       a->attention_factor == b->attention_factor &&
	       a->factor_count == b->factor_count &&
	       !memcmp(a->short_factor, b->short_factor,
		       a->factor_count * sizeof *a->short_factor) &&
	       !memcmp(a->long_factor, b->long_factor,
		       a->factor_count * sizeof *a->long_factor);
}

/* Gemma 3 under transformers 5 keys rope_parameters by layer type: the
 * full-attention layers' object is the model's rope, the sliding layers'
 * gives their base (their rope is never scaled). */
static strata_status read_rope_by_layer_type(cfg *c, json_t *o,
					     strata_model_desc *d,
					     bool *handled)
{
	json_t *full = json_object_get(o, "full_attention");
	json_t *slide = json_object_get(o, "sliding_attention");
	*handled = full || slide;
	if (!*handled)
		return STRATA_OK;
	if (!json_is_object(full) || !json_is_object(slide))
		return bad(c, "rope_parameters",
			   "an object for full_attention and for sliding_attention");
	strata_rope_scaling r = {0}, local = {0};
	strata_status s = read_rope_obj(c, "rope_parameters", full, &r,
					&d->rope_theta);
	if (!s)
		s = read_rope_obj(c, "rope_parameters", slide, &local,
				  &d->rope_local_theta);
	if (!s && local.kind != STRATA_ROPE_DEFAULT)
		return bad(c, "rope_parameters",
			   "an unscaled rope for sliding_attention");
	if (!s)
		d->rope_scaling = r;
	return s;
}

/* rope_theta, then rope_scaling (transformers 4.x), then rope_parameters
 * (5.x; its rope_theta wins). Files converted between versions may hold
 * both objects: a scaling in either is taken, and two different scalings
 * are refused rather than one silently ignored. */
static strata_status read_rope(cfg *c, strata_model_desc *d)
{
	strata_status s = get_num(c, c->root, "rope_theta", &d->rope_theta);
	const char *keys[] = {"rope_scaling", "rope_parameters"};
	bool scaled = false;
	for (int k = 0; k < 2 && !s; k++) {
		json_t *o = json_object_get(c->root, keys[k]);
		if (!o || json_is_null(o))
			continue;
		if (!json_is_object(o))
			return bad(c, keys[k], "an object or null");
		bool by_type = false;
		if ((s = read_rope_by_layer_type(c, o, d, &by_type)))
			return s;
		if (by_type) {
			scaled = d->rope_scaling.kind != STRATA_ROPE_DEFAULT;
			continue;
		}
		strata_rope_scaling r = {0};
		if ((s = read_rope_obj(c, keys[k], o, &r, &d->rope_theta)))
			return s;
		if (r.kind == STRATA_ROPE_DEFAULT) {
			if (!scaled)
				d->rope_scaling = r;
			continue;
		}
		if (scaled && !same_scaling(&d->rope_scaling, &r))
			return bad(c, keys[k],
				   "the same scaling as rope_scaling when both are given");
		d->rope_scaling = r;
		scaled = true;
	}
	/* a base of 0 gives every frequency 1/0^x: all-NaN logits */
	if (!s && d->family != STRATA_FAMILY_UNKNOWN && !(d->rope_theta > 0))
		return bad(c, "rope_theta", "a positive number (the RoPE base)");
	return s;
}

static strata_status read_sizes(cfg *c, strata_model_desc *d)
{
	json_t *r = c->root;
	strata_status s;
	if ((s = get_uint(c, r, "hidden_size", 1, &d->hidden)) ||
	    (s = get_uint(c, r, "intermediate_size", 1, &d->intermediate)) ||
	    (s = get_uint(c, r, "num_hidden_layers", 1, &d->layers)) ||
	    (s = get_uint(c, r, "num_attention_heads", 1, &d->heads)) ||
	    (s = get_uint(c, r, "vocab_size", 1, &d->vocab)) ||
	    (s = get_uint(c, r, "max_position_embeddings", 1, &d->max_positions)))
		return s;
	d->kv_heads = d->heads;
	if ((s = get_uint(c, r, "num_key_value_heads", 1, &d->kv_heads)))
		return s;
	if (d->heads)
		d->head_dim = d->hidden / d->heads;
	if ((s = get_uint(c, r, "head_dim", 1, &d->head_dim)) ||
	    (s = get_num(c, r, "rms_norm_eps", &d->rms_eps)))
		return s;
	if (d->family == STRATA_FAMILY_UNKNOWN)
		return STRATA_OK;
	/* a known family needs every size to check or run it */
	const char *need[] = {"hidden_size", "intermediate_size",
			      "num_hidden_layers", "num_attention_heads",
			      "vocab_size"};
	uint64_t have[] = {d->hidden, d->intermediate, d->layers, d->heads,
			   d->vocab};
	for (int i = 0; i < 5; i++)
		if (!have[i])
			return bad(c, need[i], "present for this architecture");
	if (d->kv_heads > d->heads || d->heads % d->kv_heads)
		return bad(c, "num_key_value_heads",
			   "a divisor of num_attention_heads");
	if (!d->head_dim)
		return bad(c, "head_dim", "a positive integer");
	return STRATA_OK;
}

/* layer_types (transformers 5, and Gemma's own): which layers slide. */
static strata_status read_layer_types(cfg *c, strata_model_desc *d)
{
	json_t *a = json_object_get(c->root, "layer_types");
	if (!a || json_is_null(a))
		return STRATA_OK;
	if (!json_is_array(a) || json_array_size(a) != d->layers ||
	    d->layers > 4096)
		return bad(c, "layer_types",
			   "a list with one entry per layer (num_hidden_layers)");
	memset(d->window_layers, 0, sizeof d->window_layers);
	for (size_t l = 0; l < d->layers; l++) {
		const char *t = json_string_value(json_array_get(a, l));
		if (!t || (strcmp(t, "sliding_attention") &&
			   strcmp(t, "full_attention")))
			return bad(c, "layer_types",
				   "a list of \"sliding_attention\" and \"full_attention\"");
		if (!strcmp(t, "sliding_attention"))
			d->window_layers[l / 64] |= 1ull << (l % 64);
	}
	d->has_layer_types = true;
	return STRATA_OK;
}

/* Gemma's defaults when a config leaves layer_types out: Gemma 2
 * alternates (layer 0 slides), Gemma 3 slides except every
 * sliding_window_pattern-th layer. */
static strata_status gemma_default_layers(cfg *c, strata_model_desc *d)
{
	uint64_t pattern = d->family == STRATA_FAMILY_GEMMA2 ? 2 : 6;
	strata_status s = get_uint(c, c->root, "sliding_window_pattern", 1,
				   &pattern);
	if (s || d->has_layer_types || d->layers > 4096)
		return s;
	for (uint64_t l = 0; l < d->layers; l++)
		if ((l + 1) % pattern)
			d->window_layers[l / 64] |= 1ull << (l % 64);
	d->has_layer_types = true;
	return STRATA_OK;
}

/* The mixture-of-experts keys: every layer sparse (decoder_sparse_step 1,
 * no mlp_only_layers: other layouts are refused by name at run). */
static strata_status read_moe(cfg *c, strata_model_desc *d)
{
	json_t *r = c->root;
	strata_family f = d->family;
	strata_status s;
	d->norm_topk_prob = f == STRATA_FAMILY_MIXTRAL; /* Mixtral always */
	d->moe_intermediate = d->intermediate;
	if ((s = get_uint(c, r, "num_local_experts", 1, &d->experts)) ||
	    (s = get_uint(c, r, "num_experts", 1, &d->experts)) ||
	    (s = get_uint(c, r, "num_experts_per_tok", 1, &d->experts_used)) ||
	    (s = get_uint(c, r, "moe_intermediate_size", 1,
			  &d->moe_intermediate)) ||
	    (s = get_uint(c, r, "shared_expert_intermediate_size", 0,
			  &d->shared_intermediate)))
		return s;
	if (f != STRATA_FAMILY_MIXTRAL &&
	    (s = get_bool(c, "norm_topk_prob", &d->norm_topk_prob)))
		return s;
	if (f != STRATA_FAMILY_QWEN2_MOE)
		d->shared_intermediate = 0;
	if (!d->experts || !d->experts_used || d->experts_used > d->experts ||
	    d->experts > 4096)
		return bad(c, "num_experts_per_tok",
			   "between 1 and the number of experts (at most 4096)");
	uint64_t step = 1;
	if ((s = get_uint(c, r, "decoder_sparse_step", 0, &step)))
		return s;
	json_t *dense = json_object_get(r, "mlp_only_layers");
	if (step != 1 || json_array_size(dense) > 0)
		return bad(c, "decoder_sparse_step",
			   "1 with no mlp_only_layers (every layer of experts)");
	return STRATA_OK;
}

/* What Qwen3, Gemma 2/3, Phi-3 and the expert families compute beyond
 * llama. */
static strata_status read_family_extras(cfg *c, strata_model_desc *d)
{
	strata_family f = d->family;
	bool gemma = f == STRATA_FAMILY_GEMMA2 || f == STRATA_FAMILY_GEMMA3;
	strata_status s = STRATA_OK;
	if (f == STRATA_FAMILY_MIXTRAL || f == STRATA_FAMILY_QWEN2_MOE ||
	    f == STRATA_FAMILY_QWEN3_MOE) {
		if ((s = read_moe(c, d)))
			return s;
	}
	d->qk_norm = f == STRATA_FAMILY_QWEN3 || f == STRATA_FAMILY_GEMMA3 ||
		     f == STRATA_FAMILY_QWEN3_MOE;
	d->fused_qkv = f == STRATA_FAMILY_PHI3;
	if (!gemma)
		return STRATA_OK;
	d->norm_plus_one = d->sandwich_norms = d->embed_scaled = true;
	if (f == STRATA_FAMILY_GEMMA2) { /* Gemma2Config's defaults */
		d->attn_softcap = 50.0;
		d->final_softcap = 30.0;
	}
	if (!d->tied_given)
		d->tied_embeddings = true; /* Gemma ties by default */
	json_t *r = c->root;
	const char *caps[2] = {"attn_logit_softcapping",
			       "final_logit_softcapping"};
	double *dst[2] = {&d->attn_softcap, &d->final_softcap};
	for (int k = 0; k < 2 && !s; k++) {
		json_t *v = json_object_get(r, caps[k]);
		if (json_is_null(v))
			*dst[k] = 0; /* null: no capping */
		else
			s = get_num(c, r, caps[k], dst[k]);
	}
	if (!s)
		s = get_num(c, r, "query_pre_attn_scalar", &d->query_scale);
	if (!s)
		s = get_num(c, r, "rope_local_base_freq", &d->rope_local_theta);
	if (!s)
		s = get_str(c, r, "hidden_activation", d->hidden_act,
			    sizeof d->hidden_act);
	if (!s)
		s = read_layer_types(c, d);
	if (!s)
		s = gemma_default_layers(c, d);
	return s;
}

static strata_status read_config(cfg *c, strata_model_desc *d)
{
	strata_status s = get_str(c, c->root, "model_type", d->architecture,
				  sizeof d->architecture);
	if (s)
		return s;
	d->family = family_of(d->architecture);
	if (d->family != STRATA_FAMILY_UNKNOWN) { /* transformers' defaults */
		d->rope_theta = 10000.0;
		d->rms_eps = 1e-6;
	}
	if ((s = read_sizes(c, d)) || (s = read_rope(c, d)) ||
	    (s = get_bool(c, "tie_word_embeddings", &d->tied_embeddings)) ||
	    (s = get_bool(c, "attention_bias", &d->attention_bias)) ||
	    (s = get_str(c, c->root, "torch_dtype", d->dtype, sizeof d->dtype)) ||
	    (s = get_str(c, c->root, "dtype", d->dtype, sizeof d->dtype)) ||
	    (s = get_str(c, c->root, "hidden_act", d->hidden_act,
			 sizeof d->hidden_act)))
		return s;
	json_t *tie = json_object_get(c->root, "tie_word_embeddings");
	d->tied_given = json_is_boolean(tie);
	d->bos_token_id = get_id(c, "bos_token_id");
	d->eos_token_id = get_id(c, "eos_token_id");
	d->attention_out_bias = d->attention_bias; /* llama: all four */
	if (d->family == STRATA_FAMILY_QWEN3 || d->family == STRATA_FAMILY_GEMMA2 ||
	    d->family == STRATA_FAMILY_GEMMA3 ||
	    d->family == STRATA_FAMILY_QWEN3_MOE)
		d->attention_out_bias = false; /* their attention_bias: q/k/v */
	if (d->family == STRATA_FAMILY_QWEN2_MOE) {
		bool qkv = true; /* Qwen2-MoE's qkv_bias, true by default */
		if ((s = get_bool(c, "qkv_bias", &qkv)))
			return s;
		d->attention_bias = qkv;
		d->attention_out_bias = false;
	}
	if (d->family == STRATA_FAMILY_QWEN2) {
		d->attention_bias = true; /* Qwen2 always biases q, k, v */
		d->attention_out_bias = false;
	}
	uint64_t window = 0;
	if ((s = get_uint(c, c->root, "sliding_window", 0, &window)))
		return s;
	bool use_window = d->family == STRATA_FAMILY_MISTRAL ||
			  d->family == STRATA_FAMILY_MIXTRAL ||
			  d->family == STRATA_FAMILY_PHI3 ||
			  d->family == STRATA_FAMILY_GEMMA2 ||
			  d->family == STRATA_FAMILY_GEMMA3;
	if (d->family == STRATA_FAMILY_QWEN2 || d->family == STRATA_FAMILY_QWEN3 ||
	    d->family == STRATA_FAMILY_QWEN2_MOE ||
	    d->family == STRATA_FAMILY_QWEN3_MOE) {
		if ((s = get_bool(c, "use_sliding_window", &use_window)))
			return s;
		d->layer_windows = use_window;
	}
	d->sliding_window = use_window ? window : 0;
	return read_family_extras(c, d);
}

strata_status strata_model_describe_config(const char *text, size_t len,
					   const char *name,
					   strata_model_desc *out,
					   strata_error *err)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return strata_fail(err, STRATA_E_MODEL_CONFIG,
				   "fix or re-download config.json",
				   "%s is not valid JSON: %s (line %d)", name,
				   je.text, je.line);
	strata_model_desc d = {.source = STRATA_FORMAT_SAFETENSORS,
			       .bos_token_id = -1, .eos_token_id = -1};
	cfg c = {root, name, err};
	strata_status s = json_is_object(root)
		? read_config(&c, &d)
		: strata_fail(err, STRATA_E_MODEL_CONFIG,
			      "fix or re-download config.json",
			      "%s is not a JSON object", name);
	json_decref(root);
	if (!s)
		*out = d;
	return s;
}

/* ------------------------------------------------------------------------ */

strata_status strata_model_describe(const char *model_path,
				    const strata_catalog *c,
				    strata_model_desc *out, strata_error *err)
{
	if (strata_catalog_format(c) == STRATA_FORMAT_GGUF)
		return strata_model_describe_gguf(c, out, err);
	char path[4096];
	struct stat st;
	if (stat(model_path, &st) == 0 && S_ISDIR(st.st_mode)) {
		int n = (int)strlen(model_path); /* models/x/ as models/x */
		while (n > 1 && model_path[n - 1] == '/')
			n--;
		snprintf(path, sizeof path, "%.*s/config.json", n, model_path);
	} else {
		const char *slash = strrchr(model_path, '/');
		int dir = slash ? (int)(slash - model_path) : 1;
		snprintf(path, sizeof path, "%.*s/config.json", dir,
			 slash ? model_path : ".");
	}
	if (stat(path, &st) != 0) {
		*out = (strata_model_desc){.source = STRATA_FORMAT_SAFETENSORS,
					   .headers_only = true,
					   .bos_token_id = -1,
					   .eos_token_id = -1};
		snprintf(out->architecture, sizeof out->architecture, "unknown");
		return STRATA_OK; /* headers alone: size it, but no family */
	}
	char *text = NULL;
	size_t len = 0;
	strata_status s = strata_file_read_all(path, MAX_CONFIG_BYTES, &text,
					       &len, err);
	if (!s)
		s = strata_model_describe_config(text, len, path, out, err);
	strata_free(text);
	return s;
}
