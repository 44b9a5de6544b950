/* model.h - what a checkpoint is: the architecture's hyperparameters from
 * config.json or GGUF metadata, and the check that the catalog holds
 * exactly the tensors that architecture needs (layer: model).
 *
 * Trust: config.json and metadata are hostile; every value is type- and
 * range-checked, and a wrong one is E_MODEL_CONFIG naming the key. An
 * architecture strata does not know is described as `unknown` (not an
 * error: the checkpoint can still be sized); only the tensor check and
 * inference need a known family.
 */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/base.h"
#include "strata/checkpoint.h"

/* X(NAME, "name"): model families strata can check and run. */
#define STRATA_FAMILY_MAP(X)                                                   \
	X(UNKNOWN, "unknown")                                                  \
	X(LLAMA, "llama")                                                      \
	X(MISTRAL, "mistral")                                                  \
	X(QWEN2, "qwen2")                                                      \
	X(QWEN3, "qwen3")                                                      \
	X(GEMMA2, "gemma2")                                                    \
	X(GEMMA3, "gemma3_text")                                               \
	X(PHI3, "phi3")                                                        \
	X(MIXTRAL, "mixtral")                                                  \
	X(QWEN2_MOE, "qwen2_moe")                                              \
	X(QWEN3_MOE, "qwen3_moe")

typedef enum strata_family {
#define STRATA_FAMILY_ENUM(name, text) STRATA_FAMILY_##name,
	STRATA_FAMILY_MAP(STRATA_FAMILY_ENUM)
#undef STRATA_FAMILY_ENUM
} strata_family;

/* "llama" ...; "unknown" outside the enum. */
const char *strata_family_name(strata_family f);

/* X(NAME, "rope_type"): RoPE frequency schedules. */
#define STRATA_ROPE_MAP(X)                                                     \
	X(DEFAULT, "default")                                                  \
	X(LLAMA3, "llama3")                                                    \
	X(LINEAR, "linear")                                                    \
	X(LONGROPE, "longrope")                                                \
	X(OTHER, "other")

typedef enum strata_rope_kind {
#define STRATA_ROPE_ENUM(name, text) STRATA_ROPE_##name,
	STRATA_ROPE_MAP(STRATA_ROPE_ENUM)
#undef STRATA_ROPE_ENUM
} strata_rope_kind;

typedef struct strata_rope_scaling {
	strata_rope_kind kind;
	char type[32];	/* as the checkpoint spells it ("llama3", "yarn") */
	double factor;	/* 0 when not given */
	double low_freq_factor, high_freq_factor;	/* llama3 */
	uint64_t original_max_position_embeddings; /* llama3, yarn, longrope */
	/* longrope (phi3): a divisor per frequency for contexts up to the
	 * original one (short) and beyond it (long), and the cos/sin scale
	 * (attention_factor; 0: from the context ratio, as transformers). */
	double attention_factor;
	uint32_t factor_count; /* entries of each list */
	float short_factor[256], long_factor[256];
} strata_rope_scaling;

typedef struct strata_model_desc {
	strata_family family;
	char architecture[64];	/* as the checkpoint names it: config
				 * model_type or general.architecture */
	strata_format source;	/* where the description came from */
	bool headers_only;	/* no config.json / general.architecture:
				 * family UNKNOWN, sizes 0 (sizing only) */
	uint64_t hidden;	/* hidden_size / embedding_length */
	uint64_t intermediate;	/* intermediate_size / feed_forward_length */
	uint64_t layers;
	uint64_t heads, kv_heads, head_dim;
	uint64_t vocab;
	uint64_t max_positions; /* max_position_embeddings / context_length */
	double rms_eps;
	double rope_theta;
	strata_rope_scaling rope_scaling;
	bool tied_embeddings;	/* no separate output projection */
	bool attention_bias;	/* q/k/v (llama: and o) projections have bias */
	bool attention_out_bias; /* o_proj has a bias (llama attention_bias) */
	uint64_t sliding_window; /* tokens; 0: full attention */
	char dtype[16];		/* config torch dtype ("bfloat16"), or "" */
	/* Facts only some readers need (the forward pass refuses what it
	 * cannot run from these; describing never does). */
	bool tied_given;	/* the file states tie_word_embeddings (GGUF
				 * never does: tied_embeddings is inferred) */
	bool layer_windows;	/* qwen2 use_sliding_window: a window on the
				 * layers past max_window_layers */
	char hidden_act[32];	/* config hidden_act ("silu"), or "" */
	uint64_t rope_dims;	/* GGUF rope.dimension_count; 0: whole head */
	int64_t bos_token_id, eos_token_id; /* -1: not given (an array's
					     * first id for eos lists) */
	/* What the families beyond llama compute differently (all false /
	 * 0 for llama, mistral and qwen2). */
	bool qk_norm;	      /* q and k RMSNorm per head (qwen3, gemma3) */
	bool norm_plus_one;   /* norms scale by 1 + w (gemma) */
	bool sandwich_norms;  /* gemma: a norm after attention and after the
			       * MLP too, before each residual add */
	bool embed_scaled;    /* gemma: embedding rows times sqrt(hidden) */
	bool fused_qkv;	      /* phi3: qkv_proj and gate_up_proj */
	double attn_softcap;  /* gemma2: scores cap * tanh(s / cap); 0 none */
	double final_softcap; /* gemma2: logits likewise; 0 none */
	double query_scale;   /* query_pre_attn_scalar: scores scale by its
			       * inverse square root; 0: head_dim's */
	double rope_local_theta; /* gemma3: the sliding layers' RoPE base
				  * (their rope unscaled); 0: rope_theta */
	/* Layers that attend through the sliding window: bit l of
	 * window_layers[l / 64]. has_layer_types false: every layer when
	 * sliding_window is set (mistral, phi3). */
	bool has_layer_types;
	uint64_t window_layers[64]; /* 4096 layers */
	/* Mixture of experts (mixtral, qwen2_moe, qwen3_moe): every layer's
	 * MLP is `experts` experts of moe_intermediate, experts_used of them
	 * per token by the router's softmax; norm_topk_prob: their weights
	 * renormalised to sum 1 (always for Mixtral); shared_intermediate:
	 * Qwen2-MoE's shared expert, gated by a sigmoid (0: none). */
	uint64_t experts, experts_used, moe_intermediate, shared_intermediate;
	bool norm_topk_prob;
} strata_model_desc;

/* Whether layer l of d attends through its sliding window. */
bool strata_model_layer_windowed(const strata_model_desc *d, uint64_t l);

/* Describes the model at model_path whose catalog is c: from
 * model_path/config.json for safetensors (a single .safetensors file uses
 * the config.json next to it when there is one), from c's metadata for GGUF.
 * No config at all gives family UNKNOWN with the hyperparameters 0: not an
 * error. Fills *out only on success. */
strata_status strata_model_describe(const char *model_path,
				    const strata_catalog *c,
				    strata_model_desc *out, strata_error *err);

/* The same from config.json text (len bytes); `name` names it in errors. */
strata_status strata_model_describe_config(const char *text, size_t len,
					   const char *name,
					   strata_model_desc *out,
					   strata_error *err);

/* The same from GGUF metadata; `c` supplies tensor facts (tied output,
 * biases, vocab from the embedding) the metadata may leave out. */
strata_status strata_model_describe_gguf(const strata_catalog *c,
					 strata_model_desc *out,
					 strata_error *err);

/* Checks that c holds every tensor d's architecture needs, each with the
 * expected shape (outermost first, shape_hf), and nothing else (rotary
 * inv_freq buffers and GGUF rope_freqs are allowed). Errors name the
 * tensor: E_MODEL_TENSOR_MISSING, E_MODEL_TENSOR_SHAPE (expected and found),
 * E_MODEL_TENSOR_EXTRA; a family UNKNOWN is E_MODEL_ARCH. */
strata_status strata_model_check_tensors(const strata_model_desc *d,
					 const strata_catalog *c,
					 strata_error *err);

/* ------------------------------------------------------------------------ */
/* strata quantize                                                          */
/* ------------------------------------------------------------------------ */

typedef struct strata_quantize_options {
	const char *type; /* a preset of strata_quantize_type_names() */
	unsigned threads; /* encoder threads; 0: one per online CPU */
} strata_quantize_options;

typedef struct strata_quantize_stats {
	uint64_t tensors;    /* written */
	uint64_t quantized;  /* of them, in a block type */
	uint64_t fallbacks;  /* given a fallback type for their row length */
	uint64_t in_bytes;   /* payload bytes read */
	uint64_t out_bytes;  /* payload bytes written */
	uint64_t elapsed_ns;
} strata_quantize_stats;

/* "F32|F16|...|IQ4_XS": the --type presets, llama-quantize's names. */
const char *strata_quantize_type_names(void);

/* Writes the model at `in` (a directory or single file of safetensors with
 * config.json, of the llama, mistral or qwen2 family; or any .gguf) to
 * `out` as GGUF of preset o->type: llama.cpp's tensor names and
 * architecture metadata (a GGUF's pairs are copied), the tokenizer from
 * tokenizer.json, each tensor in the type the preset gives it
 * (docs/quantize.md). F32 writes every tensor dequantized, bit-exact.
 * `out` is written through a temporary file and renamed: on any error it
 * is as it was. Errors: E_USAGE (unknown type), the catalog's and model's
 * (unreadable or unknown input), E_CKPT_VALUE (NaN or infinity in a
 * tensor, named), E_IO (a failed write), E_NOMEM. stats (may be NULL) is
 * filled on success. */
strata_status strata_quantize(const char *in, const char *out,
			      const strata_quantize_options *o,
			      strata_quantize_stats *stats, strata_error *err);

#endif
