/* check.c - does the catalog hold exactly the tensors the architecture
 * needs, each with its shape? One table of tensor roles, spelled the
 * Hugging Face way and the GGUF way (layer: model). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "strata/model.h"

/* Which width a dimension is. */
typedef enum dim {
	D_HIDDEN, D_INTER, D_VOCAB, D_Q, D_KV, D_HEAD, D_QKV, D_INTER2,
	D_EXPERTS, D_MOE, D_SHARED, D_ONE, D_NONE
} dim;

/* When a role is present: always; untied models only; with q/k/v or o
 * biases; with per-head q/k norms; with llama's two norms (PLAIN) or
 * Gemma's four (SANDWICH); with separate projections (SPLIT) or Phi-3's
 * fused qkv and gate_up (FUSED). */
typedef enum when {
	ALWAYS, UNTIED, QKV_BIAS, O_BIAS, QK_NORM, PLAIN, SANDWICH, SPLIT,
	FUSED, SPLIT_MLP, PLAIN_MLP, MOE_MIXTRAL, MOE_QWEN, SHARED
} when;

/* One tensor role: names with %d for the layer (or none for static),
 * shape outermost first as in shape_hf. */
typedef struct role {
	const char *hf, *gguf;
	bool per_layer;
	when when;
	dim shape[2];
	/* one tensor per expert in HF (a second %d), stacked in GGUF (its
	 * shape led by the expert count) */
	bool per_expert;
} role;

static const role roles[] = {
	{"model.embed_tokens.weight", "token_embd.weight", false, ALWAYS, {D_VOCAB, D_HIDDEN}, false},
	{"model.norm.weight", "output_norm.weight", false, ALWAYS, {D_HIDDEN, D_NONE}, false},
	{"lm_head.weight", "output.weight", false, UNTIED, {D_VOCAB, D_HIDDEN}, false},
	{"model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight", true, ALWAYS, {D_HIDDEN, D_NONE}, false},
	{"model.layers.%d.post_attention_layernorm.weight", "blk.%d.ffn_norm.weight", true, PLAIN, {D_HIDDEN, D_NONE}, false},
	{"model.layers.%d.post_attention_layernorm.weight", "blk.%d.post_attention_norm.weight", true, SANDWICH, {D_HIDDEN, D_NONE}, false},
	{"model.layers.%d.pre_feedforward_layernorm.weight", "blk.%d.ffn_norm.weight", true, SANDWICH, {D_HIDDEN, D_NONE}, false},
	{"model.layers.%d.post_feedforward_layernorm.weight", "blk.%d.post_ffw_norm.weight", true, SANDWICH, {D_HIDDEN, D_NONE}, false},
	{"model.layers.%d.self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight", true, QK_NORM, {D_HEAD, D_NONE}, false},
	{"model.layers.%d.self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight", true, QK_NORM, {D_HEAD, D_NONE}, false},
	{"model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight", true, SPLIT, {D_Q, D_HIDDEN}, false},
	{"model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight", true, SPLIT, {D_KV, D_HIDDEN}, false},
	{"model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight", true, SPLIT, {D_KV, D_HIDDEN}, false},
	{"model.layers.%d.self_attn.qkv_proj.weight", "blk.%d.attn_qkv.weight", true, FUSED, {D_QKV, D_HIDDEN}, false},
	{"model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight", true, ALWAYS, {D_HIDDEN, D_Q}, false},
	{"model.layers.%d.self_attn.q_proj.bias", "blk.%d.attn_q.bias", true, QKV_BIAS, {D_Q, D_NONE}, false},
	{"model.layers.%d.self_attn.k_proj.bias", "blk.%d.attn_k.bias", true, QKV_BIAS, {D_KV, D_NONE}, false},
	{"model.layers.%d.self_attn.v_proj.bias", "blk.%d.attn_v.bias", true, QKV_BIAS, {D_KV, D_NONE}, false},
	{"model.layers.%d.self_attn.o_proj.bias", "blk.%d.attn_output.bias", true, O_BIAS, {D_HIDDEN, D_NONE}, false},
	{"model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight", true, SPLIT_MLP, {D_INTER, D_HIDDEN}, false},
	{"model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight", true, SPLIT_MLP, {D_INTER, D_HIDDEN}, false},
	{"model.layers.%d.mlp.gate_up_proj.weight", "blk.%d.ffn_up.weight", true, FUSED, {D_INTER2, D_HIDDEN}, false},
	{"model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight", true, PLAIN_MLP, {D_HIDDEN, D_INTER}, false},
	/* mixture of experts: the router, the experts, the shared expert */
	{"model.layers.%d.block_sparse_moe.gate.weight", "blk.%d.ffn_gate_inp.weight", true, MOE_MIXTRAL, {D_EXPERTS, D_HIDDEN}, false},
	{"model.layers.%d.block_sparse_moe.experts.%d.w1.weight", "blk.%d.ffn_gate_exps.weight", true, MOE_MIXTRAL, {D_MOE, D_HIDDEN}, true},
	{"model.layers.%d.block_sparse_moe.experts.%d.w3.weight", "blk.%d.ffn_up_exps.weight", true, MOE_MIXTRAL, {D_MOE, D_HIDDEN}, true},
	{"model.layers.%d.block_sparse_moe.experts.%d.w2.weight", "blk.%d.ffn_down_exps.weight", true, MOE_MIXTRAL, {D_HIDDEN, D_MOE}, true},
	{"model.layers.%d.mlp.gate.weight", "blk.%d.ffn_gate_inp.weight", true, MOE_QWEN, {D_EXPERTS, D_HIDDEN}, false},
	{"model.layers.%d.mlp.experts.%d.gate_proj.weight", "blk.%d.ffn_gate_exps.weight", true, MOE_QWEN, {D_MOE, D_HIDDEN}, true},
	{"model.layers.%d.mlp.experts.%d.up_proj.weight", "blk.%d.ffn_up_exps.weight", true, MOE_QWEN, {D_MOE, D_HIDDEN}, true},
	{"model.layers.%d.mlp.experts.%d.down_proj.weight", "blk.%d.ffn_down_exps.weight", true, MOE_QWEN, {D_HIDDEN, D_MOE}, true},
	{"model.layers.%d.mlp.shared_expert.gate_proj.weight", "blk.%d.ffn_gate_shexp.weight", true, SHARED, {D_SHARED, D_HIDDEN}, false},
	{"model.layers.%d.mlp.shared_expert.up_proj.weight", "blk.%d.ffn_up_shexp.weight", true, SHARED, {D_SHARED, D_HIDDEN}, false},
	{"model.layers.%d.mlp.shared_expert.down_proj.weight", "blk.%d.ffn_down_shexp.weight", true, SHARED, {D_HIDDEN, D_SHARED}, false},
	{"model.layers.%d.mlp.shared_expert_gate.weight", "blk.%d.ffn_gate_inp_shexp.weight", true, SHARED, {D_ONE, D_HIDDEN}, false},
};

/* Buffers some exporters keep that carry no weights to place. */
static bool ignorable(const char *name)
{
	size_t n = strlen(name);
	const char *inv = "rotary_emb.inv_freq";
	size_t k = strlen(inv);
	return (n >= k && !strcmp(name + n - k, inv)) ||
	       !strcmp(name, "rope_freqs.weight") ||
	       !strcmp(name, "rope_factors_long.weight") ||
	       !strcmp(name, "rope_factors_short.weight");
}

static uint64_t width(const strata_model_desc *d, dim x)
{
	switch (x) {
	case D_HIDDEN: return d->hidden;
	case D_INTER: return d->intermediate;
	case D_VOCAB: return d->vocab;
	case D_Q: return d->heads * d->head_dim;   /* each <= 2^40: checked */
	case D_KV: return d->kv_heads * d->head_dim;
	case D_HEAD: return d->head_dim;
	case D_QKV: return (d->heads + 2 * d->kv_heads) * d->head_dim;
	case D_INTER2: return 2 * d->intermediate;
	case D_EXPERTS: return d->experts;
	case D_MOE: return d->moe_intermediate;
	case D_SHARED: return d->shared_intermediate;
	case D_ONE: return 1;
	default: return 0;
	}
}

static bool wanted(const strata_model_desc *d, when w)
{
	switch (w) {
	case QKV_BIAS: return d->attention_bias;
	case O_BIAS: return d->attention_out_bias;
	case QK_NORM: return d->qk_norm;
	case PLAIN: return !d->sandwich_norms;
	case SANDWICH: return d->sandwich_norms;
	case SPLIT: return !d->fused_qkv;
	case SPLIT_MLP: return !d->fused_qkv && !d->experts;
	case FUSED: return d->fused_qkv;
	case PLAIN_MLP: return !d->experts;
	case MOE_MIXTRAL: return d->experts && d->family == STRATA_FAMILY_MIXTRAL;
	case MOE_QWEN: return d->experts && d->family != STRATA_FAMILY_MIXTRAL;
	case SHARED: return d->shared_intermediate > 0;
	default: return true;
	}
}

/* The expected shape of role r (outermost first) for one tensor: HF's
 * per-expert tensors are 2-D, GGUF's stacked ones lead with the expert
 * count, and GGUF writes Qwen2-MoE's shared-expert gate as a vector. */
static uint32_t expected(const strata_model_desc *d, const role *r, bool gguf,
			 uint64_t *want)
{
	uint32_t nd = 0;
	if (gguf && r->per_expert)
		want[nd++] = d->experts;
	for (int i = 0; i < 2; i++)
		if (r->shape[i] != D_NONE &&
		    !(gguf && r->shape[i] == D_ONE))
			want[nd++] = width(d, r->shape[i]);
	return nd;
}

static void shape_text(char *buf, size_t cap, const uint64_t *s, uint32_t n)
{
	int k = snprintf(buf, cap, "[");
	for (uint32_t i = 0; i < n && k < (int)cap - 24; i++)
		k += snprintf(buf + k, cap - (size_t)k, "%s%" PRIu64,
			      i ? ", " : "", s[i]);
	snprintf(buf + k, cap - (size_t)k, "]");
}

static strata_status check_one(const strata_model_desc *d,
			       const strata_catalog *c, const role *r,
			       bool gguf, const char *name, bool *seen,
			       strata_error *err)
{
	const strata_tensor *t = strata_catalog_find(c, name);
	if (!t && r->when == UNTIED && d->tied_embeddings)
		return STRATA_OK; /* tied models may still ship lm_head */
	if (!t)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_MISSING,
				   "the checkpoint is incomplete or not this architecture; re-download it",
				   "%s model needs tensor '%s', which the checkpoint lacks",
				   strata_family_name(d->family), name);
	seen[t - strata_catalog_tensor(c, 0)] = true;
	uint64_t want[3];
	uint32_t nd = expected(d, r, gguf, want);
	bool ok = t->n_dims == nd;
	for (uint32_t i = 0; ok && i < nd; i++)
		ok = t->shape_hf[i] == want[i];
	if (!ok) {
		char w[96], got[96];
		shape_text(w, sizeof w, want, nd);
		shape_text(got, sizeof got, t->shape_hf, t->n_dims);
		return strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
				   "the config does not match the weights; use the config.json that came with them",
				   "tensor '%s' has shape %s, but the config implies %s",
				   name, got, w);
	}
	/* the one check of types run and plan share: an integer or bool
	 * tensor where a weight goes is nothing the kernels compute on */
	const strata_dtype_info *info = strata_dtype_get(t->dtype);
	if (!info || !info->is_float)
		return strata_fail(err, STRATA_E_CKPT_DTYPE,
				   STRATA_FIX_CONVERT_TYPE,
				   "tensor '%s' is %s, a type strata cannot compute",
				   name, info ? info->name : "unknown");
	return STRATA_OK;
}

strata_status strata_model_check_tensors(const strata_model_desc *d,
					 const strata_catalog *c,
					 strata_error *err)
{
	if (d->family == STRATA_FAMILY_UNKNOWN)
		return strata_fail(err, STRATA_E_MODEL_ARCH,
				   "strata checks llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, mixtral, qwen2_moe and qwen3_moe models",
				   "architecture '%s' is not one strata knows",
				   d->architecture);
	size_t n = strata_catalog_count(c);
	bool gguf = strata_catalog_format(c) == STRATA_FORMAT_GGUF;
	bool *seen = strata_calloc_or_error(n ? n : 1, sizeof *seen,
					    "tensor check", err);
	if (!seen)
		return STRATA_E_NOMEM;
	strata_status s = STRATA_OK;
	char name[160];
	for (size_t i = 0; i < sizeof roles / sizeof *roles && !s; i++) {
		const role *r = &roles[i];
		if (!wanted(d, r->when))
			continue;
		uint64_t layers = r->per_layer ? d->layers : 1;
		uint64_t experts = r->per_expert && !gguf ? d->experts : 1;
		for (uint64_t l = 0; l < layers && !s; l++)
			for (uint64_t e = 0; e < experts && !s; e++) {
				snprintf(name, sizeof name, gguf ? r->gguf : r->hf,
					 (int)l, (int)e);
				s = check_one(d, c, r, gguf, name, seen, err);
			}
	}
	for (size_t i = 0; i < n && !s; i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		if (!seen[i] && !ignorable(t->name)) {
			char shown[128];
			s = strata_fail(err, STRATA_E_MODEL_TENSOR_EXTRA,
					"the checkpoint holds weights of another architecture or more layers than config.json says",
					"tensor '%s' is not part of a %s model of %" PRIu64 " layers",
					strata_escape(shown, sizeof shown, t->name,
						      strlen(t->name)),
					strata_family_name(d->family), d->layers);
		}
	}
	strata_free(seen);
	return s;
}
