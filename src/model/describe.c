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
		       b->original_max_position_embeddings;
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
	if (d->family == STRATA_FAMILY_QWEN2) {
		d->attention_bias = true; /* Qwen2 always biases q, k, v */
		d->attention_out_bias = false;
	}
	uint64_t window = 0;
	if ((s = get_uint(c, c->root, "sliding_window", 0, &window)))
		return s;
	bool use_window = d->family == STRATA_FAMILY_MISTRAL;
	if (d->family == STRATA_FAMILY_QWEN2) {
		if ((s = get_bool(c, "use_sliding_window", &use_window)))
			return s;
		d->layer_windows = use_window;
	}
	d->sliding_window = use_window ? window : 0;
	return STRATA_OK;
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
