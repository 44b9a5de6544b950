/* describe_gguf.c - the architecture description from GGUF metadata
 * (`general.architecture` and its `ARCH.*` keys) and tensor facts the
 * metadata leaves out (layer: model). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "strata/model.h"

#define MAX_DIM (1ull << 40)

typedef struct meta {
	const strata_gguf *g;
	char arch[64];
	strata_error *err;
} meta;

/* ARCH.key as an integer in [1, MAX_DIM]; absent leaves *out. */
static strata_status get_uint(meta *m, const char *key, uint64_t *out)
{
	char full[160];
	snprintf(full, sizeof full, "%s.%s", m->arch, key);
	if (strata_gguf_find(m->g, full) < 0)
		return STRATA_OK;
	uint64_t v;
	strata_status s = strata_gguf_get_u64(m->g, full, &v, m->err);
	if (!s && (v == 0 || v > MAX_DIM))
		s = strata_fail(m->err, STRATA_E_MODEL_CONFIG,
				"the file is corrupt; re-convert the model",
				"GGUF metadata '%s' is %" PRIu64
				", not a plausible size",
				full, v);
	if (s)
		return s == STRATA_E_NOMEM ? s : (m->err->code = STRATA_E_MODEL_CONFIG);
	*out = v;
	return STRATA_OK;
}

static strata_status get_num(meta *m, const char *key, double *out)
{
	char full[160];
	snprintf(full, sizeof full, "%s.%s", m->arch, key);
	if (strata_gguf_find(m->g, full) < 0)
		return STRATA_OK;
	double v;
	strata_status s = strata_gguf_get_f64(m->g, full, &v, m->err);
	if (!s && !(v >= 0 && v < 1e30))
		s = strata_fail(m->err, STRATA_E_MODEL_CONFIG,
				"the file is corrupt; re-convert the model",
				"GGUF metadata '%s' is not a plausible value",
				full);
	if (s)
		return m->err->code = STRATA_E_MODEL_CONFIG;
	*out = v;
	return STRATA_OK;
}

static strata_status read_rope(meta *m, strata_model_desc *d)
{
	char full[160];
	snprintf(full, sizeof full, "%s.rope.scaling.type", m->arch);
	const char *s;
	size_t n;
	strata_error e;
	if (strata_gguf_get_string(m->g, full, &s, &n, &e) == STRATA_OK) {
		char type[32];
		snprintf(type, sizeof type, "%.*s", (int)(n < 31 ? n : 31), s);
		snprintf(d->rope_scaling.type, sizeof d->rope_scaling.type,
			 "%s", type);
		d->rope_scaling.kind = !strcmp(type, "linear") ? STRATA_ROPE_LINEAR
				       : !strcmp(type, "none") ? STRATA_ROPE_DEFAULT
							      : STRATA_ROPE_OTHER;
	}
	strata_status st;
	if ((st = get_num(m, "rope.freq_base", &d->rope_theta)) ||
	    (st = get_num(m, "rope.scaling.factor", &d->rope_scaling.factor)) ||
	    (st = get_uint(m, "rope.scaling.original_context_length",
			   &d->rope_scaling.original_max_position_embeddings)))
		return st;
	if (d->family != STRATA_FAMILY_UNKNOWN && !(d->rope_theta > 0))
		/* 1/0^x: all-NaN logits */
		return strata_fail(m->err, STRATA_E_MODEL_CONFIG,
				   "convert the model again with a positive RoPE base",
				   "GGUF metadata '%s.rope.freq_base' is %g; the "
				   "RoPE base must be positive",
				   m->arch, d->rope_theta);
	return STRATA_OK;
}

/* tokenizer.ggml.*_token_id, or -1: like config.json's ids, they only end
 * generation, so an unusable one reads as "not given". */
static int64_t get_id(const strata_gguf *g, const char *key)
{
	uint64_t v;
	strata_error ignored;
	if (strata_gguf_find(g, key) < 0 ||
	    strata_gguf_get_u64(g, key, &v, &ignored) != STRATA_OK ||
	    v >= INT32_MAX)
		return -1;
	return (int64_t)v;
}

/* A known family needs every size to check or run it: the first one
 * missing (or the head counts contradicting each other) is named. */
static strata_status check_known(const meta *m, const strata_model_desc *d)
{
	static const char *const keys[] = {
		"embedding_length", "feed_forward_length", "block_count",
		"attention.head_count", "vocab_size", "attention.key_length"};
	const uint64_t have[] = {d->hidden, d->intermediate, d->layers,
				 d->heads, d->vocab, d->head_dim};
	for (int i = 0; i < 6; i++)
		if (!have[i])
			return strata_fail(m->err, STRATA_E_MODEL_CONFIG,
					   "the file lacks hyperparameters; re-convert it with a current llama.cpp",
					   "GGUF metadata: '%s.%s' is missing%s",
					   m->arch, keys[i],
					   i == 4 ? " (and no token_embd.weight or tokenizer.ggml.tokens gives the vocabulary)"
						  : "");
	if (d->kv_heads > d->heads || d->heads % d->kv_heads)
		return strata_fail(m->err, STRATA_E_MODEL_CONFIG,
				   "the file is corrupt; re-convert the model",
				   "GGUF metadata: '%s.attention.head_count_kv' (%" PRIu64
				   ") does not divide '%s.attention.head_count' (%" PRIu64 ")",
				   m->arch, d->kv_heads, m->arch, d->heads);
	return STRATA_OK;
}

static void tensor_facts(const strata_catalog *c, strata_model_desc *d)
{
	const strata_tensor *emb = strata_catalog_find(c, "token_embd.weight");
	if (!d->vocab && emb && emb->n_dims == 2)
		d->vocab = emb->shape_hf[0];
	strata_gguf_type et;
	uint64_t count;
	strata_error e;
	if (!d->vocab && strata_gguf_get_array(strata_catalog_gguf(c),
			"tokenizer.ggml.tokens", &et, &count, &e) == STRATA_OK)
		d->vocab = count;
	d->tied_embeddings = !strata_catalog_find(c, "output.weight");
	d->attention_bias = strata_catalog_find(c, "blk.0.attn_q.bias") != NULL;
	d->attention_out_bias =
		strata_catalog_find(c, "blk.0.attn_output.bias") != NULL;
	if (emb)
		snprintf(d->dtype, sizeof d->dtype, "%s",
			 strata_dtype_get(emb->dtype)->name);
}

/* Gemma's sliding layers: every layer but each pattern-th (llama.cpp's
 * set_swa_pattern: 2 for Gemma 2, 6 for Gemma 3, or the file's own). */
static strata_status gemma_layers(meta *m, strata_model_desc *d)
{
	uint64_t pattern = d->family == STRATA_FAMILY_GEMMA2 ? 2 : 6;
	strata_status st = get_uint(m, "attention.sliding_window_pattern",
				    &pattern);
	if (st || d->layers > 4096)
		return st;
	for (uint64_t l = 0; l < d->layers; l++)
		if ((l + 1) % pattern)
			d->window_layers[l / 64] |= 1ull << (l % 64);
	d->has_layer_types = true;
	return STRATA_OK;
}

/* The mixture-of-experts keys (llama.cpp's): expert_count (a llama file
 * with it is Mixtral), expert_used_count, the experts' width
 * (expert_feed_forward_length, else feed_forward_length as Mixtral's),
 * the shared expert's (qwen2moe), expert_weights_norm (absent: what
 * llama.cpp's graph of the architecture does: Mixtral and Qwen3-MoE
 * renormalise, Qwen2-MoE does not). */
static strata_status moe_keys(meta *m, strata_model_desc *d)
{
	strata_status st;
	if ((st = get_uint(m, "expert_count", &d->experts)) || !d->experts)
		return st;
	if (d->family == STRATA_FAMILY_LLAMA)
		d->family = STRATA_FAMILY_MIXTRAL;
	d->moe_intermediate = d->intermediate;
	if ((st = get_uint(m, "expert_used_count", &d->experts_used)) ||
	    (st = get_uint(m, "expert_feed_forward_length",
			   &d->moe_intermediate)) ||
	    (st = get_uint(m, "expert_shared_feed_forward_length",
			   &d->shared_intermediate)))
		return st;
	if (d->family != STRATA_FAMILY_MIXTRAL &&
	    d->family != STRATA_FAMILY_QWEN2_MOE &&
	    d->family != STRATA_FAMILY_QWEN3_MOE)
		return strata_fail(m->err, STRATA_E_UNSUPPORTED,
				   "use a llama (Mixtral), qwen2moe or qwen3moe GGUF of experts",
				   "GGUF %s with experts is not a family strata runs",
				   m->arch);
	if (d->experts > 4096 || !d->experts_used ||
	    d->experts_used > d->experts)
		return strata_fail(m->err, STRATA_E_MODEL_CONFIG,
				   "the file is corrupt; re-convert the model",
				   "GGUF metadata: '%s.expert_used_count' (%" PRIu64
				   ") must be between 1 and '%s.expert_count' (%" PRIu64
				   ", at most 4096)",
				   m->arch, d->experts_used, m->arch, d->experts);
	if (d->family != STRATA_FAMILY_QWEN2_MOE)
		d->shared_intermediate = 0;
	d->norm_topk_prob = d->family != STRATA_FAMILY_QWEN2_MOE;
	char full[160];
	snprintf(full, sizeof full, "%s.expert_weights_norm", m->arch);
	if (strata_gguf_find(m->g, full) >= 0 &&
	    strata_gguf_get_bool(m->g, full, &d->norm_topk_prob, m->err))
		return m->err->code = STRATA_E_MODEL_CONFIG;
	return STRATA_OK;
}

/* Phi-3's longrope as llama.cpp's converter writes it: the divisor
 * lists as tensors rope_factors_long/short (both, of head_dim / 2 or of
 * the rope's dimensions / 2 entries; their values are payload, read by
 * the forward pass's hyper-parameters, strata_infer_hparams_read), the
 * original context and rope.scaling.attn_factor. */
static strata_status phi3_longrope(meta *m, const strata_catalog *c,
				   strata_model_desc *d)
{
	const strata_tensor *l = strata_catalog_find(c, "rope_factors_long.weight");
	const strata_tensor *s = strata_catalog_find(c, "rope_factors_short.weight");
	strata_rope_scaling *r = &d->rope_scaling;
	uint64_t half = (d->rope_dims ? d->rope_dims : d->head_dim) / 2;
	if (!l || !s || l->n_dims != 1 || s->n_dims != 1 ||
	    l->shape_hf[0] != half || s->shape_hf[0] != half || !half ||
	    half > 256)
		return strata_fail(m->err, STRATA_E_MODEL_TENSOR_SHAPE,
				   "the file is corrupt; re-convert the model",
				   "GGUF Phi-3 longrope needs rope_factors_long.weight "
				   "and rope_factors_short.weight, each a vector of "
				   "%" PRIu64 " (at most 256)", half);
	r->kind = STRATA_ROPE_LONGROPE;
	snprintf(r->type, sizeof r->type, "longrope");
	r->factor_count = (uint32_t)half;
	strata_status st = get_num(m, "rope.scaling.attn_factor",
				   &r->attention_factor);
	if (!st && !r->original_max_position_embeddings)
		st = strata_fail(m->err, STRATA_E_MODEL_CONFIG,
				 "the file lacks hyperparameters; re-convert it with a current llama.cpp",
				 "GGUF metadata: '%s.rope.scaling.original_context_length' "
				 "is missing (longrope needs it)", m->arch);
	return st;
}

/* What Qwen3, Gemma 2/3 and Phi-3 compute beyond llama, as llama.cpp's
 * GGUF holds it. Its converter stores Gemma's norms as 1 + w already, so
 * they are plain here; the scale of queries is 1/sqrt(head size) unless
 * the file says query_pre_attn_scalar (llama.cpp's 27B rule is not
 * guessed). */
static strata_status family_extras(meta *m, const strata_catalog *c,
				   strata_model_desc *d)
{
	strata_family f = d->family;
	d->qk_norm = f == STRATA_FAMILY_QWEN3 || f == STRATA_FAMILY_GEMMA3 ||
		     f == STRATA_FAMILY_QWEN3_MOE;
	d->fused_qkv = f == STRATA_FAMILY_PHI3;
	if (f == STRATA_FAMILY_PHI3 &&
	    (strata_catalog_find(c, "rope_factors_long.weight") ||
	     strata_catalog_find(c, "rope_factors_short.weight")))
		return phi3_longrope(m, c, d);
	if (f != STRATA_FAMILY_GEMMA2 && f != STRATA_FAMILY_GEMMA3)
		return STRATA_OK;
	d->sandwich_norms = d->embed_scaled = true;
	d->tied_embeddings = !strata_catalog_find(c, "output.weight");
	snprintf(d->hidden_act, sizeof d->hidden_act, "gelu_pytorch_tanh");
	if (f == STRATA_FAMILY_GEMMA3)
		d->rope_local_theta = 10000.0; /* llama.cpp's fixed local base */
	strata_status st;
	if ((st = get_num(m, "attn_logit_softcapping", &d->attn_softcap)) ||
	    (st = get_num(m, "final_logit_softcapping", &d->final_softcap)) ||
	    (st = get_num(m, "attention.query_pre_attn_scalar",
			  &d->query_scale)) ||
	    (st = get_num(m, "rope.freq_base_swa", &d->rope_local_theta)))
		return st;
	return gemma_layers(m, d);
}

strata_status strata_model_describe_gguf(const strata_catalog *c,
					 strata_model_desc *out,
					 strata_error *err)
{
	meta m = {strata_catalog_gguf(c), "", err};
	strata_model_desc d = {.source = STRATA_FORMAT_GGUF,
			       .bos_token_id = -1, .eos_token_id = -1};
	const char *s;
	size_t n;
	strata_status st = strata_gguf_get_string(m.g, "general.architecture",
						  &s, &n, err);
	if (st == STRATA_E_NOT_FOUND) { /* metadata alone: size it only */
		d.headers_only = true;
		*out = d;
		snprintf(out->architecture, sizeof out->architecture, "unknown");
		return STRATA_OK;
	}
	if (st)
		return err->code = STRATA_E_MODEL_CONFIG;
	if (n == 0 || n >= sizeof m.arch || memchr(s, '\0', n))
		return strata_fail(err, STRATA_E_MODEL_CONFIG,
				   "the file is corrupt; re-convert the model",
				   "GGUF general.architecture is empty, too long or holds NUL");
	memcpy(m.arch, s, n);
	snprintf(d.architecture, sizeof d.architecture, "%s", m.arch);
	/* llama.cpp writes Mistral models as arch "llama" */
	d.family = !strcmp(m.arch, "llama") ? STRATA_FAMILY_LLAMA
		   : !strcmp(m.arch, "mistral") ? STRATA_FAMILY_MISTRAL
		   : !strcmp(m.arch, "qwen2") ? STRATA_FAMILY_QWEN2
		   : !strcmp(m.arch, "qwen3") ? STRATA_FAMILY_QWEN3
		   : !strcmp(m.arch, "gemma2") ? STRATA_FAMILY_GEMMA2
		   : !strcmp(m.arch, "gemma3") ? STRATA_FAMILY_GEMMA3
		   : !strcmp(m.arch, "phi3") ? STRATA_FAMILY_PHI3
		   : !strcmp(m.arch, "qwen2moe") ? STRATA_FAMILY_QWEN2_MOE
		   : !strcmp(m.arch, "qwen3moe") ? STRATA_FAMILY_QWEN3_MOE
					      : STRATA_FAMILY_UNKNOWN;
	if (d.family != STRATA_FAMILY_UNKNOWN) { /* llama.cpp's defaults */
		d.rope_theta = 10000.0;
		d.rms_eps = 1e-5;
	}
	if ((st = get_uint(&m, "embedding_length", &d.hidden)) ||
	    (st = get_uint(&m, "feed_forward_length", &d.intermediate)) ||
	    (st = get_uint(&m, "block_count", &d.layers)) ||
	    (st = get_uint(&m, "attention.head_count", &d.heads)) ||
	    (st = get_uint(&m, "context_length", &d.max_positions)) ||
	    (st = get_uint(&m, "vocab_size", &d.vocab)) ||
	    (st = get_num(&m, "attention.layer_norm_rms_epsilon", &d.rms_eps)) ||
	    (st = get_uint(&m, "attention.sliding_window", &d.sliding_window)) ||
	    (st = read_rope(&m, &d)))
		return st;
	d.kv_heads = d.heads;
	if (d.heads)
		d.head_dim = d.hidden / d.heads;
	if ((st = get_uint(&m, "attention.head_count_kv", &d.kv_heads)) ||
	    (st = get_uint(&m, "attention.key_length", &d.head_dim)) ||
	    (st = get_uint(&m, "rope.dimension_count", &d.rope_dims)))
		return st;
	if (d.family != STRATA_FAMILY_UNKNOWN && (st = moe_keys(&m, &d)))
		return st;
	tensor_facts(c, &d);
	if (d.family != STRATA_FAMILY_UNKNOWN && (st = check_known(&m, &d)))
		return st;
	if ((st = family_extras(&m, c, &d)))
		return st;
	d.bos_token_id = get_id(m.g, "tokenizer.ggml.bos_token_id");
	d.eos_token_id = get_id(m.g, "tokenizer.ggml.eos_token_id");
	*out = d;
	return STRATA_OK;
}
