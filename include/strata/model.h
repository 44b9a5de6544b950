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
	X(QWEN2, "qwen2")

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
	uint64_t original_max_position_embeddings; /* llama3, yarn */
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
} strata_model_desc;

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

#endif
