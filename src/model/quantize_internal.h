/* quantize_internal.h - what the files of strata quantize share: the
 * presets and the per-tensor type rule (quantize_types.c), the Hugging
 * Face side (quantize_hf.c: tensor names, metadata, tokenizer) and the
 * engine (quantize.c) (layer: model). Not a public API. */
#ifndef STRATA_MODEL_QUANTIZE_INTERNAL_H
#define STRATA_MODEL_QUANTIZE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/checkpoint.h"
#include "strata/model.h"

typedef struct strata__quant_preset {
	const char *name;  /* "Q4_K_M" */
	strata_dtype base; /* the type of most tensors */
	uint32_t ftype;	   /* llama.cpp's general.file_type */
} strata__quant_preset;

/* NULL for a name that is no preset. */
const strata__quant_preset *strata__quant_preset_find(const char *name);
/* false for F32, F16 and BF16. */
bool strata__quant_preset_is_block(const strata__quant_preset *p);

/* What the type rule looks at. */
typedef struct strata__quant_tensor {
	const char *name;   /* the GGUF name (blk.N.attn_v.weight) */
	uint32_t n_dims;
	uint64_t row;	    /* ne0: elements per row */
	uint64_t layer;	    /* N of blk.N, else 0 */
	uint64_t layers;    /* block count */
	uint64_t gqa;	    /* heads per KV head (1 when unknown) */
	bool has_output;    /* the model has its own output.weight */
} strata__quant_tensor;

/* The type tensor t gets under preset p; *fell_back when its row length
 * forced a fallback type. */
strata_dtype strata__quant_tensor_type(const strata__quant_preset *p,
				       const strata__quant_tensor *t,
				       bool *fell_back);

/* One tensor of the output: where its values come from and how. */
typedef struct strata__quant_job {
	char *name;		  /* GGUF name, owned */
	const strata_tensor *src; /* in the input catalog, or NULL */
	/* an expert stack: stack_count tensors of the input (src is the
	 * first), one after another along the outermost dimension; owned */
	const strata_tensor **stack;
	uint32_t stack_count;
	float *values;		  /* generated values (rope_freqs), owned */
	strata_dtype out;
	uint32_t n_dims;
	uint64_t ne[4];		  /* ne0 first */
	uint32_t permute_heads;	  /* llama q/k rows: heads to permute, or 0 */
	bool add_one;		  /* gemma norms: stored as 1 + w */
} strata__quant_job;

/* The Hugging Face side (quantize_hf.c). The GGUF name of an HF tensor:
 * STRATA_OK with *skip true for tensors GGUF leaves out (rotary
 * inv_freq), E_MODEL_TENSOR_EXTRA for a name it has no place for. An
 * expert's tensor gets its layer's stacked name and *expert its number
 * (else -1). */
strata_status strata__quant_hf_name(const char *hf, strata_family family,
				    char *out, size_t cap, bool *skip,
				    int64_t *expert, strata_error *err);
/* The GGUF general.architecture llama.cpp writes for family f, or NULL
 * for a family strata quantize does not convert. */
const char *strata__quant_hf_arch(strata_family f);
/* llama.cpp's converter metadata for d (general.*, ARCH.*, the rope
 * scaling) and, when model_dir has tokenizer.json, tokenizer.ggml.*. */
strata_status strata__quant_hf_metadata(strata_gguf_writer *w,
					const char *model_dir,
					const strata_model_desc *d,
					strata_error *err);
/* llama3 rope's per-frequency factors (head_dim / 2 of them, owned by
 * the caller), or NULL with STRATA_OK when d's rope is not llama3. */
strata_status strata__quant_rope_factors(const strata_model_desc *d,
					 float **out, strata_error *err);
/* Phi-3 longrope's cos/sin scale: config.json's attention_factor, else
 * transformers' default from the context ratio (the value llama.cpp's
 * converter writes as rope.scaling.attn_factor). */
double strata__quant_longrope_scale(const strata_model_desc *d);
/* The GGUF tokenizer.ggml.* pairs from model_dir/tokenizer.json
 * (quantize_vocab.c); nothing when there is no tokenizer.json. */
strata_status strata__quant_hf_vocab(strata_gguf_writer *w,
				     const char *model_dir,
				     const strata_model_desc *d,
				     strata_error *err);

#endif
