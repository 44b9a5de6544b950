/* tensors.c - finds a llama-family model's tensors in a catalog by name and
 * checks their shapes and types against the hyper-parameters (layer: infer).
 *
 * Trust: the catalog is already bounds-checked by the checkpoint layer; here
 * a wrong shape or a type that cannot become f32 is refused before any
 * payload is read, naming the tensor and both shapes.
 */
#include <stdio.h>
#include <string.h>

#include "strata/infer.h"

typedef struct slot_info {
	const char *hf, *gguf;
	bool optional;
} slot_info;

static const slot_info slots[STRATA_SLOT_COUNT] = {
#define STRATA_INFER_SLOT_INFO(name, field, hf, gguf, opt) {hf, gguf, opt},
	STRATA_INFER_SLOT_MAP(STRATA_INFER_SLOT_INFO)
#undef STRATA_INFER_SLOT_INFO
};

/* ------------------------------------------------------------------------ */

static void shape_text(char *buf, size_t cap, const uint64_t *s, uint32_t n)
{
	size_t at = (size_t)snprintf(buf, cap, "(");
	for (uint32_t i = 0; i < n && at < cap; i++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%llu",
				       i ? ", " : "", (unsigned long long)s[i]);
	if (at < cap)
		snprintf(buf + at, cap - at, ")");
}

static strata_status check_type(const strata_tensor *t, strata_error *err);

/* Checks t against the expected shape (rows, cols), cols 0 for a vector. */
static strata_status check_shape(const strata_tensor *t, uint64_t rows,
				 uint64_t cols, strata_error *err)
{
	uint64_t want[2] = {rows, cols};
	uint32_t n = cols ? 2 : 1;
	bool ok = t->n_dims == n && t->shape_hf[0] == rows &&
		  (n == 1 || t->shape_hf[1] == cols);
	if (!ok) {
		char a[96], b[96];
		shape_text(a, sizeof a, want, n);
		shape_text(b, sizeof b, t->shape_hf, t->n_dims);
		return strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
				   "use a checkpoint that matches its "
				   "configuration",
				   "tensor '%s' should be %s but is %s",
				   t->name, a, b);
	}
	return check_type(t, err);
}

/* t's type must be one strata computes with. */
static strata_status check_type(const strata_tensor *t, strata_error *err)
{
	const strata_dtype_info *info = strata_dtype_get(t->dtype);
	if (!info || !info->is_float)
		return strata_fail(err, STRATA_E_CKPT_DTYPE,
				   STRATA_FIX_CONVERT_TYPE,
				   "tensor '%s' has type %s, which strata cannot "
				   "compute with",
				   t->name, info ? info->name : "unknown");
	return STRATA_OK;
}

static strata_status find(const strata_catalog *c, const char *name,
			  bool optional, uint64_t rows, uint64_t cols,
			  const strata_tensor **out, strata_error *err)
{
	const strata_tensor *t = strata_catalog_find(c, name);
	*out = t;
	if (!t) {
		if (optional)
			return STRATA_OK;
		return strata_fail(err, STRATA_E_MODEL_TENSOR_MISSING,
				   "use a complete checkpoint of this "
				   "architecture",
				   "tensor '%s' is missing", name);
	}
	return check_shape(t, rows, cols, err);
}

/* Expected (rows, cols) of a layer slot. */
static void slot_shape(const strata_infer_hparams *hp, strata_infer_slot s,
		       uint64_t *rows, uint64_t *cols)
{
	uint64_t q = (uint64_t)hp->heads * hp->head_dim;
	uint64_t kv = (uint64_t)hp->kv_heads * hp->head_dim;
	switch (s) {
	case STRATA_SLOT_WQ: *rows = q; *cols = hp->dim; break;
	case STRATA_SLOT_WK:
	case STRATA_SLOT_WV: *rows = kv; *cols = hp->dim; break;
	case STRATA_SLOT_BQ: *rows = q; *cols = 0; break;
	case STRATA_SLOT_BK:
	case STRATA_SLOT_BV: *rows = kv; *cols = 0; break;
	case STRATA_SLOT_WO: *rows = hp->dim; *cols = q; break;
	case STRATA_SLOT_W_GATE:
	case STRATA_SLOT_W_UP: *rows = hp->ffn; *cols = hp->dim; break;
	case STRATA_SLOT_W_DOWN: *rows = hp->dim; *cols = hp->ffn; break;
	case STRATA_SLOT_Q_NORM:
	case STRATA_SLOT_K_NORM: *rows = hp->head_dim; *cols = 0; break;
	case STRATA_SLOT_ROUTER: *rows = hp->experts; *cols = hp->dim; break;
	case STRATA_SLOT_SH_GATE:
	case STRATA_SLOT_SH_UP: *rows = hp->shared_ffn; *cols = hp->dim; break;
	case STRATA_SLOT_SH_DOWN: *rows = hp->dim; *cols = hp->shared_ffn; break;
	case STRATA_SLOT_SH_ROUTER: /* GGUF: a vector */
		*rows = hp->gguf ? hp->dim : 1;
		*cols = hp->gguf ? 0 : hp->dim;
		break;
	default: *rows = hp->dim; *cols = 0; break;
	}
	if (hp->fused_qkv && s == STRATA_SLOT_WQ)
		*rows = q + 2 * kv; /* qkv_proj */
	if (hp->fused_qkv && s == STRATA_SLOT_W_GATE)
		*rows = 2 * (uint64_t)hp->ffn; /* gate_up_proj */
}

/* Slot s's tensor name within a layer, as the family spells it, or NULL
 * when the family has no such tensor; *required whether it must be there. */
static const char *slot_name(const strata_infer_hparams *hp,
			     strata_infer_slot s, bool *required)
{
	bool g = hp->gguf;
	*required = !slots[s].optional;
	switch (s) {
	case STRATA_SLOT_Q_NORM:
	case STRATA_SLOT_K_NORM:
		*required = hp->qk_norm;
		return hp->qk_norm ? (g ? slots[s].gguf : slots[s].hf) : NULL;
	case STRATA_SLOT_ATTN_POST_NORM:
	case STRATA_SLOT_FFN_POST_NORM:
		*required = hp->sandwich_norms;
		return hp->sandwich_norms ? (g ? slots[s].gguf : slots[s].hf)
					  : NULL;
	case STRATA_SLOT_FFN_NORM: /* Gemma's post_attention_layernorm is
				      the attention output's norm */
		return hp->sandwich_norms && !g ? "pre_feedforward_layernorm.weight"
						: (g ? slots[s].gguf : slots[s].hf);
	case STRATA_SLOT_WQ:
		if (hp->fused_qkv)
			return g ? "attn_qkv.weight" : "self_attn.qkv_proj.weight";
		break;
	case STRATA_SLOT_ROUTER:
		*required = hp->experts > 0;
		if (!hp->experts)
			return NULL;
		return g || hp->family != STRATA_FAMILY_MIXTRAL
			       ? (g ? slots[s].gguf : slots[s].hf)
			       : "block_sparse_moe.gate.weight";
	case STRATA_SLOT_SH_GATE:
	case STRATA_SLOT_SH_UP:
	case STRATA_SLOT_SH_DOWN:
	case STRATA_SLOT_SH_ROUTER:
		*required = hp->shared_ffn > 0;
		return hp->shared_ffn ? (g ? slots[s].gguf : slots[s].hf) : NULL;
	case STRATA_SLOT_W_GATE:
	case STRATA_SLOT_W_UP:
	case STRATA_SLOT_W_DOWN:
		if (hp->experts) { /* the experts' own, below */
			*required = false;
			return NULL;
		}
		if (hp->fused_qkv && s == STRATA_SLOT_W_GATE) /* llama.cpp
			names the fused pair ffn_up */
			return g ? "ffn_up.weight" : "mlp.gate_up_proj.weight";
		if (hp->fused_qkv && s == STRATA_SLOT_W_UP) {
			*required = false;
			return NULL; /* rows of the fused tensor */
		}
		break;
	case STRATA_SLOT_WK:
	case STRATA_SLOT_WV:
		if (hp->fused_qkv) {
			*required = false;
			return NULL; /* rows of the fused tensor */
		}
		break;
	default:
		break;
	}
	return g ? slots[s].gguf : slots[s].hf;
}

static bool used(const strata_infer_tensors *t, const strata_tensor *x)
{
	if (x == t->embed || x == t->final_norm || x == t->lm_head ||
	    x == t->rope_freqs)
		return true;
	uint64_t experts = (uint64_t)t->layers * 3 *
			   (t->expert ? strata_infer_expert_tensors(t) : 0);
	for (uint64_t i = 0; i < experts; i++)
		if (t->expert[i] == x)
			return true;
	for (uint32_t l = 0; l < t->layers; l++)
		for (int s = 0; s < STRATA_SLOT_COUNT; s++)
			if (t->layer[l][s] == x)
				return true;
	return false;
}

/* Every tensor the checkpoint holds must be used, except the rotary
 * buffers old transformers checkpoints saved (recomputed here anyway). */
static strata_status check_extra(const strata_catalog *c,
				 const strata_infer_tensors *t,
				 strata_infer_family family, strata_error *err)
{
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *x = strata_catalog_tensor(c, i);
		/* Phi-3's GGUF longrope factors are hyper-parameters, read
		 * with them (hparams.c) */
		if (used(t, x) || strata_str_ends_with(x->name, "rotary_emb.inv_freq") ||
		    !strcmp(x->name, "rope_factors_long.weight") ||
		    !strcmp(x->name, "rope_factors_short.weight"))
			continue;
		char shown[160];
		strata_escape(shown, sizeof shown, x->name, strlen(x->name));
		return strata_fail(err, STRATA_E_MODEL_TENSOR_EXTRA,
				   "use a checkpoint of a family strata runs, "
				   "without extra tensors",
				   "tensor '%s' has no place in the %s "
				   "forward pass; running without it would "
				   "compute a different model",
				   shown, strata_infer_family_name(family));
	}
	return STRATA_OK;
}

/* One expert tensor: (rows, cols), led by the expert count when stacked;
 * every expert of a kind in one layer of one type (the kind's elem). */
static strata_status find_expert(const strata_catalog *c,
				 const strata_infer_hparams *hp, uint32_t l,
				 uint32_t k, uint32_t e,
				 const strata_tensor *first,
				 const strata_tensor **out, strata_error *err)
{
	static const char *const hf_mixtral[3] = {"w1", "w3", "w2"};
	static const char *const hf_qwen[3] = {"gate_proj", "up_proj",
					       "down_proj"};
	static const char *const gguf[3] = {"ffn_gate_exps", "ffn_up_exps",
					    "ffn_down_exps"};
	char name[192];
	if (hp->gguf)
		snprintf(name, sizeof name, "blk.%u.%s.weight", l, gguf[k]);
	else if (hp->family == STRATA_FAMILY_MIXTRAL)
		snprintf(name, sizeof name,
			 "model.layers.%u.block_sparse_moe.experts.%u.%s.weight",
			 l, e, hf_mixtral[k]);
	else
		snprintf(name, sizeof name, "model.layers.%u.mlp.experts.%u.%s.weight",
			 l, e, hf_qwen[k]);
	uint64_t rows = k == STRATA_EXPERT_DOWN ? hp->dim : hp->moe_ffn;
	uint64_t cols = k == STRATA_EXPERT_DOWN ? hp->moe_ffn : hp->dim;
	const strata_tensor *t = strata_catalog_find(c, name);
	*out = t;
	if (!t)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_MISSING,
				   "use a complete checkpoint of this "
				   "architecture",
				   "tensor '%s' is missing", name);
	if (hp->gguf) {
		bool ok = t->n_dims == 3 && t->shape_hf[0] == hp->experts &&
			  t->shape_hf[1] == rows && t->shape_hf[2] == cols;
		if (!ok)
			return strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
					   "use a checkpoint that matches its "
					   "configuration",
					   "tensor '%s' should be (%u, %llu, %llu)",
					   name, hp->experts,
					   (unsigned long long)rows,
					   (unsigned long long)cols);
		return check_type(t, err);
	}
	strata_status st = check_shape(t, rows, cols, err);
	if (st == STRATA_OK && first && first->dtype != t->dtype)
		st = strata_fail(err, STRATA_E_UNSUPPORTED,
				 "store every expert of a layer in one type",
				 "tensor '%s' is %s but expert 0's is %s", name,
				 strata_dtype_get(t->dtype)->name,
				 strata_dtype_get(first->dtype)->name);
	return st;
}

static strata_status find_experts(const strata_catalog *c,
				  const strata_infer_hparams *hp,
				  strata_infer_tensors *t, strata_error *err)
{
	if (!hp->experts)
		return STRATA_OK;
	t->experts = hp->experts;
	t->experts_stacked = hp->gguf;
	uint32_t per = strata_infer_expert_tensors(t);
	t->expert = strata_calloc_or_error((uint64_t)hp->layers * 3 * per,
					   sizeof *t->expert,
					   "expert tensor table", err);
	if (!t->expert)
		return STRATA_E_NOMEM;
	for (uint32_t l = 0; l < hp->layers; l++)
		for (uint32_t k = 0; k < 3; k++)
			for (uint32_t e = 0; e < per; e++) {
				const strata_tensor **slot =
					&t->expert[((uint64_t)l * 3 + k) * per + e];
				strata_status st = find_expert(
					c, hp, l, k, e,
					e ? slot[-(ptrdiff_t)e] : NULL, slot, err);
				if (st)
					return st;
			}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata_infer_tensors_find(const strata_catalog *c,
					const strata_infer_hparams *hp,
					strata_infer_tensors *out,
					strata_error *err)
{
	strata_infer_tensors t = {.layers = hp->layers};
	bool g = hp->gguf;
	strata_status st;
	if ((st = find(c, g ? "token_embd.weight" : "model.embed_tokens.weight",
		       false, hp->vocab, hp->dim, &t.embed, err)) ||
	    (st = find(c, g ? "output_norm.weight" : "model.norm.weight", false,
		       hp->dim, 0, &t.final_norm, err)) ||
	    (st = find(c, g ? "output.weight" : "lm_head.weight", true,
		       hp->vocab, hp->dim, &t.lm_head, err)))
		return st;
	if (g && (st = find(c, "rope_freqs.weight", true, hp->head_dim / 2, 0,
			    &t.rope_freqs, err)))
		return st;
	if (!t.lm_head && hp->tied == 0)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_MISSING,
				   "use a complete checkpoint, or set "
				   "tie_word_embeddings if the head is the "
				   "embedding",
				   "tensor 'lm_head.weight' is missing and "
				   "config.json says the embeddings are not "
				   "tied");
	if (!t.lm_head) /* tied: the embedding doubles as the LM head */
		t.lm_head = t.embed;
	t.layer = strata_calloc_or_error(hp->layers, sizeof *t.layer,
					 "layer tensor table", err);
	if (!t.layer)
		return STRATA_E_NOMEM;
	for (uint32_t l = 0; l < hp->layers; l++) {
		for (int s = 0; s < STRATA_SLOT_COUNT; s++) {
			bool required;
			const char *slot = slot_name(hp, (strata_infer_slot)s,
						     &required);
			if (!slot)
				continue;
			char name[160];
			snprintf(name, sizeof name,
				 g ? "blk.%u.%s" : "model.layers.%u.%s", l, slot);
			uint64_t rows, cols;
			slot_shape(hp, (strata_infer_slot)s, &rows, &cols);
			st = find(c, name, !required, rows, cols,
				  &t.layer[l][s], err);
			if (st) {
				strata_free(t.layer);
				return st;
			}
		}
	}
	if ((st = find_experts(c, hp, &t, err)) ||
	    (st = check_extra(c, &t, hp->family, err))) {
		strata_free(t.layer);
		strata_free(t.expert);
		return st;
	}
	*out = t;
	return STRATA_OK;
}

void strata_infer_tensors_fini(strata_infer_tensors *t)
{
	if (!t)
		return;
	strata_free(t->layer);
	strata_free(t->expert);
	t->layer = NULL;
	t->expert = NULL;
}

strata_status strata_infer_f32_bytes(const strata_tensor *t, uint64_t *out,
				     strata_error *err)
{
	char what[200];
	snprintf(what, sizeof what, "f32 bytes of tensor '%s'", t->name);
	return strata_checked_mul(t->elements, sizeof(float), out, what, err);
}
