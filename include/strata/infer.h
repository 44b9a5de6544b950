/* infer.h - the llama-family forward pass (llama, mistral, qwen2) over the
 * backend's kernels and a window of resident weights; sampling; generation
 * (layer: infer).
 *
 * Weights reach the forward pass only through a weight source: acquire(l)
 * hands out layer l's tensors as f32 device pointers, release(l) gives them
 * back. Two sources exist: the residency engine (every mode of DESIGN.md)
 * and, for tests and tools, a plain loader that converts everything to f32
 * in host memory once.
 */
#ifndef STRATA_INFER_H
#define STRATA_INFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/backend_kernels.h"
#include "strata/base.h"
#include "strata/checkpoint.h"
#include "strata/model.h"
#include "strata/plan.h"
#include "strata/residency.h"

/* ------------------------------------------------------------------------ */
/* Hyper-parameters                                                         */
/* ------------------------------------------------------------------------ */

/* The families are the model layer's (strata_family): the forward pass runs
 * llama, mistral and qwen2, and refuses UNKNOWN. */
typedef strata_family strata_infer_family;

const char *strata_infer_family_name(strata_infer_family f); /* or "unknown" */

/* Everything the forward pass needs to know about a model's shape. */
typedef struct strata_infer_hparams {
	strata_infer_family family;
	bool gguf;	     /* tensor names are GGUF's (blk.N.attn_q ...) */
	uint32_t vocab;	     /* rows of the embedding */
	uint32_t dim;	     /* hidden size */
	uint32_t ffn;	     /* intermediate size */
	uint32_t layers;
	uint32_t heads, kv_heads, head_dim;
	uint32_t context;    /* trained context (max positions) */
	uint32_t window;     /* sliding window in positions; 0: none */
	float norm_eps;
	double rope_theta;
	strata_rope_layout rope_layout;
	/* Llama 3 rope_scaling (type "llama3"); factor 0: none. */
	double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
	double rope_original_context;
	int32_t bos, eos; /* -1: none */
	int8_t tied;	  /* tie_word_embeddings: 1, 0, or -1 when not said */
	/* Beyond llama (the model layer's strata_model_desc says what each
	 * is): all false / 0 for llama, mistral and qwen2. */
	bool qk_norm, norm_plus_one, sandwich_norms, embed_scaled, fused_qkv;
	bool gelu;	     /* GeGLU (gelu_pytorch_tanh) instead of SwiGLU */
	float attn_softcap, final_softcap; /* 0: none */
	float attn_scale;    /* score multiplier: 1/sqrt(query_pre_attn_scalar
				or head_dim), times longrope's factor^2 */
	double rope_local_theta; /* sliding layers' base; 0: rope_theta */
	bool rope_linear;	 /* linear scaling by rope_factor (full layers) */
	/* longrope: one divisor per frequency, for contexts up to
	 * rope_original_context (short) and beyond (long); 0 entries: none. */
	uint32_t rope_ext_count;
	float rope_short[256], rope_long[256];
	bool has_layer_types;	    /* else the window is on every layer */
	uint64_t window_layers[64]; /* bit l: layer l slides */
	/* Mixture of experts (0 experts: dense). ffn is then the larger of
	 * the experts' and the shared expert's widths (the MLP buffers). */
	uint32_t experts, experts_used, moe_ffn, shared_ffn;
	bool norm_topk_prob;
} strata_infer_hparams;

/* The window layer l attends through (0: full attention). */
uint32_t strata_infer_layer_window(const strata_infer_hparams *hp,
				   uint32_t l);

/* The forward pass's view of a model description (strata_model_describe,
 * the one reader of config.json and GGUF metadata): sizes checked against
 * the forward pass's caps, rope layout from the format, bos/eos ids.
 * E_MODEL_CONFIG naming the key for a size outside the caps, E_MODEL_ARCH
 * for a family it cannot run, E_UNSUPPORTED naming a feature it cannot run
 * (rope scaling other than llama3, an activation other than silu, qwen2's
 * per-layer window, partial rope). vocab is the description's. Fills *out
 * only on success. */
strata_status strata_infer_hparams_from_desc(const strata_model_desc *d,
					     strata_infer_hparams *out,
					     strata_error *err);

/* Reads the hyper-parameters of MODEL through strata_model_describe
 * (config.json for a safetensors catalog, the GGUF metadata otherwise) and
 * strata_infer_hparams_from_desc. The vocabulary size comes from the
 * embedding tensor. A model without config.json or general.architecture
 * is E_MODEL_CONFIG. */
strata_status strata_infer_hparams_read(const char *model_path,
					const strata_catalog *c,
					strata_infer_hparams *out,
					strata_error *err);

/* The plan's view of hp (known, family, shapes, and what the forward
 * pass's buffers need beyond them): what `strata plan` and a session
 * plan with, so both size the forward pass's buffers alike. */
void strata_infer_plan_arch(const strata_infer_hparams *hp,
			    strata_plan_arch *out);

/* The same from the text of a config.json alone (len bytes, untrusted),
 * through strata_model_describe_config; vocab is the config's vocab_size. */
strata_status strata_infer_config_parse(const char *json, size_t len,
					strata_infer_hparams *out,
					strata_error *err);

/* The rotary frequencies (head_dim / 2), Llama 3 and linear scaling
 * applied; longrope's short divisors. */
void strata_infer_rope_freqs(const strata_infer_hparams *hp, float *inv_freq);
/* The same for a run of `context` positions: longrope takes its long
 * divisors when the context exceeds the original one (llama.cpp's rule;
 * transformers switches by the current length instead, which re-rotates
 * earlier positions mid-sequence). */
void strata_infer_rope_freqs_for(const strata_infer_hparams *hp,
				 uint32_t context, float *inv_freq);
/* The sliding layers' frequencies where they differ (Gemma 3's local base,
 * never scaled); false (nothing written) where every layer shares one. */
bool strata_infer_rope_local_freqs(const strata_infer_hparams *hp,
				   float *inv_freq);

/* ------------------------------------------------------------------------ */
/* Weights                                                                  */
/* ------------------------------------------------------------------------ */

/* The slot of each layer tensor, in a fixed order; names per format. */
#define STRATA_INFER_SLOT_MAP(X)                                               \
	X(ATTN_NORM, attn_norm, "input_layernorm.weight", "attn_norm.weight", 0) \
	X(WQ, wq, "self_attn.q_proj.weight", "attn_q.weight", 0)               \
	X(WK, wk, "self_attn.k_proj.weight", "attn_k.weight", 0)               \
	X(WV, wv, "self_attn.v_proj.weight", "attn_v.weight", 0)               \
	X(BQ, bq, "self_attn.q_proj.bias", "attn_q.bias", 1)                   \
	X(BK, bk, "self_attn.k_proj.bias", "attn_k.bias", 1)                   \
	X(BV, bv, "self_attn.v_proj.bias", "attn_v.bias", 1)                   \
	X(WO, wo, "self_attn.o_proj.weight", "attn_output.weight", 0)          \
	X(FFN_NORM, ffn_norm, "post_attention_layernorm.weight",              \
	  "ffn_norm.weight", 0)                                                \
	X(W_GATE, w_gate, "mlp.gate_proj.weight", "ffn_gate.weight", 0)        \
	X(W_UP, w_up, "mlp.up_proj.weight", "ffn_up.weight", 0)                \
	X(W_DOWN, w_down, "mlp.down_proj.weight", "ffn_down.weight", 0)        \
	X(Q_NORM, q_norm, "self_attn.q_norm.weight", "attn_q_norm.weight", 1)  \
	X(K_NORM, k_norm, "self_attn.k_norm.weight", "attn_k_norm.weight", 1)  \
	X(ATTN_POST_NORM, attn_post_norm, "post_attention_layernorm.weight",  \
	  "post_attention_norm.weight", 1)                                     \
	X(FFN_POST_NORM, ffn_post_norm, "post_feedforward_layernorm.weight",  \
	  "post_ffw_norm.weight", 1)                                           \
	X(ROUTER, router, "mlp.gate.weight", "ffn_gate_inp.weight", 1)         \
	X(SH_GATE, sh_gate, "mlp.shared_expert.gate_proj.weight",             \
	  "ffn_gate_shexp.weight", 1)                                          \
	X(SH_UP, sh_up, "mlp.shared_expert.up_proj.weight",                   \
	  "ffn_up_shexp.weight", 1)                                            \
	X(SH_DOWN, sh_down, "mlp.shared_expert.down_proj.weight",             \
	  "ffn_down_shexp.weight", 1)                                          \
	X(SH_ROUTER, sh_router, "mlp.shared_expert_gate.weight",              \
	  "ffn_gate_inp_shexp.weight", 1)

typedef enum strata_infer_slot {
#define STRATA_INFER_SLOT_ENUM(name, field, hf, gguf, opt) STRATA_SLOT_##name,
	STRATA_INFER_SLOT_MAP(STRATA_INFER_SLOT_ENUM)
#undef STRATA_INFER_SLOT_ENUM
	STRATA_SLOT_COUNT
} strata_infer_slot;

/* How a weight's elements are stored where the forward pass reads them.
 * F32 is zero, so sources that fill nothing but pointers hand out f32.
 * The GGUF block types are read as stored by the CPU's products (the plain
 * source keeps its matrices so); each is the strata_dtype of its name. The
 * list is the kernel table's own weight types, so the two cannot drift. */
#define STRATA_INFER_ELEM_MAP(X) STRATA_WEIGHT_TYPE_MAP(X)

typedef enum strata_infer_elem {
#define STRATA_INFER_ELEM_ENUM(name, text) STRATA_ELEM_##name,
	STRATA_INFER_ELEM_MAP(STRATA_INFER_ELEM_ENUM)
#undef STRATA_INFER_ELEM_ENUM
} strata_infer_elem;

/* The checkpoint type of an elem value (F32 for one outside the map), and
 * the elem of a type (false when the type has none). */
strata_dtype strata_infer_elem_dtype(uint8_t elem);
bool strata_infer_elem_of(strata_dtype t, uint8_t *out);

/* One layer's tensors, row-major [out, in], f32 unless elem says otherwise
 * (on CUDA bf16/f16 weights stay half: elem[slot] is then BF16 or F16 and
 * the pointer, typed float for the CPU's sake, points at half elements).
 * Biases are NULL where the model has none (qwen2 has q/k/v biases). */
typedef struct strata_infer_layer {
	const float *attn_norm;		   /* (dim) */
	const float *wq, *wk, *wv;	   /* (heads*hd, dim), (kv*hd, dim) x2 */
	const float *bq, *bk, *bv;	   /* (heads*hd), (kv*hd) x2, or NULL */
	const float *wo;		   /* (dim, heads*hd) */
	const float *ffn_norm;		   /* (dim) */
	const float *w_gate, *w_up;	   /* (ffn, dim) */
	const float *w_down;		   /* (dim, ffn) */
	/* Qwen3 / Gemma 3: (head_dim) each; Gemma: the norms of the
	 * attention's and the MLP's outputs, (dim) each. NULL where the
	 * family has none. Phi-3's fused qkv_proj is wq ((q + 2 kv) rows,
	 * wk and wv NULL) and its gate_up_proj w_gate (2 ffn rows, w_up
	 * NULL): the forward pass takes rows of them. */
	const float *q_norm, *k_norm;
	const float *attn_post_norm, *ffn_post_norm;
	/* Mixture of experts: the router (experts, dim) and Qwen2-MoE's
	 * shared expert with its gate (1, dim); NULL where absent. */
	const float *router, *sh_gate, *sh_up, *sh_down, *sh_router;
	uint8_t elem[STRATA_SLOT_COUNT];   /* strata_infer_elem per slot */
	/* Each expert's gate, up and down (STRATA_EXPERT_*): `experts`
	 * pointers per kind, owned by the source, and the kind's one type. */
	uint32_t experts;
	const void *const *expert[3];
	uint8_t expert_elem[3];
} strata_infer_layer;

/* The tensors outside the layers. */
typedef struct strata_infer_statics {
	const float *embed;	 /* (vocab, dim) */
	const float *final_norm; /* (dim) */
	const float *lm_head;	 /* (vocab, dim); the embedding when tied */
	const float *rope_freqs; /* (head_dim / 2) divisors of the rotary
				    frequencies (GGUF Llama 3), or NULL */
	/* strata_infer_elem of each (F32 unless kept half on CUDA) */
	uint8_t embed_elem, final_norm_elem, lm_head_elem, rope_freqs_elem;
} strata_infer_statics;

/* The catalog tensors of one model, found by name and checked against the
 * hyper-parameters' shapes. layer[l][slot] is NULL only for absent optional
 * tensors (biases); lm_head is the embedding when the model ties them. */
typedef struct strata_infer_tensors {
	const strata_tensor *embed, *final_norm, *lm_head;
	const strata_tensor *rope_freqs; /* GGUF rope_freqs.weight or NULL */
	const strata_tensor *(*layer)[STRATA_SLOT_COUNT]; /* [layers] */
	uint32_t layers;
	/* Mixture of experts: per layer, per kind (gate, up, down), one
	 * tensor per expert (HF) or one stacked tensor whose experts follow
	 * each other (GGUF, experts_stacked); NULL and 0 for dense models.
	 * strata_infer_expert_tensor indexes it. */
	uint32_t experts;
	bool experts_stacked;
	const strata_tensor **expert;
} strata_infer_tensors;

/* The kinds of an expert's tensors. */
enum { STRATA_EXPERT_GATE, STRATA_EXPERT_UP, STRATA_EXPERT_DOWN };

/* Tensors per layer per kind: 1 stacked, else one per expert. */
static inline uint32_t strata_infer_expert_tensors(const strata_infer_tensors *t)
{
	return t->experts_stacked ? 1 : t->experts;
}

/* The tensor of layer l, kind k, expert e (e ignored when stacked). */
static inline const strata_tensor *
strata_infer_expert_tensor(const strata_infer_tensors *t, uint32_t l,
			   uint32_t k, uint32_t e)
{
	uint32_t per = strata_infer_expert_tensors(t);
	return t->expert[((uint64_t)l * 3 + k) * per + (t->experts_stacked ? 0 : e)];
}

/* Finds and checks every tensor: E_MODEL_TENSOR_MISSING naming the tensor
 * (an untied model without its LM head included), E_MODEL_TENSOR_SHAPE with
 * expected and found shapes, E_CKPT_DTYPE for a type strata cannot convert
 * to f32, E_MODEL_TENSOR_EXTRA for a tensor the forward pass would ignore
 * (an MLP bias, q/k norms...): running without it would be a silently
 * different model. GGUF's rope_freqs.weight (llama.cpp's form of Llama 3
 * rope scaling) is used: the frequencies are divided by it. The caller frees with
 * strata_infer_tensors_fini. */
strata_status strata_infer_tensors_find(const strata_catalog *c,
					const strata_infer_hparams *hp,
					strata_infer_tensors *out,
					strata_error *err);
void strata_infer_tensors_fini(strata_infer_tensors *t);
/* Bytes of a tensor as f32 where it executes (checked). */
strata_status strata_infer_f32_bytes(const strata_tensor *t, uint64_t *out,
				     strata_error *err);

/* Where the forward pass gets its weights. acquire fills *out with layer
 * `layer`'s pointers, valid until release(layer). */
typedef struct strata_infer_source_ops {
	strata_status (*acquire)(void *user, uint32_t layer,
				 strata_infer_layer *out, strata_error *err);
	strata_status (*release)(void *user, uint32_t layer, strata_error *err);
} strata_infer_source_ops;

typedef struct strata_infer_source {
	const strata_infer_source_ops *ops;
	void *user;
	strata_infer_statics statics;
	/* Optional (NULL: one split): the passes that follow are prefill
	 * passes (true) or decode passes, for a placement whose two splits
	 * differ; called with no layer held. */
	strata_status (*pass)(void *user, bool prefill, strata_error *err);
} strata_infer_source;

/* The plain source: every tensor read once (through `read`, or pread of the
 * catalog's file when NULL) and converted to f32 in host memory. For tests,
 * tools and benches; `strata run` goes through the residency engine. */
typedef struct strata_infer_loaded strata_infer_loaded;
strata_status strata_infer_load_all(const strata_catalog *c,
				    const strata_infer_tensors *t,
				    strata_infer_loaded **out,
				    strata_infer_source *src, strata_error *err);
/* The same with the matrices (the layers' products, the embedding and the
 * LM head) kept in their stored type, elem naming it: for the CPU backend,
 * whose products read F16, BF16 and the GGUF block types as stored (each
 * weight travels at its file's bytes). Norms and biases are f32. A block
 * holding NaN or infinity is E_CKPT_VALUE naming the tensor. */
strata_status strata_infer_load_stored(const strata_catalog *c,
				       const strata_infer_tensors *t,
				       strata_infer_loaded **out,
				       strata_infer_source *src,
				       strata_error *err);
void strata_infer_loaded_destroy(strata_infer_loaded *l);

/* The residency source: the model's tensors handed to the residency engine
 * (static: embedding, final norm, LM head; one unit per layer in the group
 * "model" or "blk"), converted to f32 where they execute. acquire/release
 * of a layer are the engine's; so every mode of DESIGN.md runs the same
 * forward pass. */
typedef struct strata_infer_window_options {
	/* The plan the window runs (borrowed for the call): its selected
	 * candidate's mode and sizes reach the engine through
	 * strata_residency_config_from_plan, and its device says where the
	 * weights execute: CPU converts every type to f32; CUDA keeps f32,
	 * f16 and bf16 as they are and converts the rest
	 * (strata_plan_tensor_device_bytes' rule, so the engine's tensors
	 * fill the plan's sizes). */
	const strata_plan *plan;
	uint32_t reader_threads;	/* disk: 0 = 1 */
	/* CUDA: the compute stream the forward pass queues on. In streamed
	 * modes a released layer's device slot is refilled at once, so
	 * release first waits for this stream's queued kernels. NULL on the
	 * CPU, whose kernels finish before they return. */
	strata_stream *compute_stream;
	/* A placement over several devices (the plan's selected candidate
	 * has `devices` of them): their backends, borrowed; b must be the
	 * last (the window's). NULL: b alone. */
	strata_backend *const *devices;
	/* Resident weights the CPU computes on as stored are read, not
	 * mapped from their files (--no-mmap; strata_weight_store_map). */
	bool no_map;
	/* The load's progress (strata_residency_progress_fn); optional. */
	void (*progress)(void *user, uint64_t done_bytes, uint64_t total_bytes);
	void *progress_user;
} strata_infer_window_options;

typedef struct strata_infer_window strata_infer_window;

/* Builds the engine's config from t (which must outlive the window), reads
 * through `ws` (borrowed) and creates the engine on b. Errors are the
 * engine's (E_RES_BUDGET naming the tier, read and conversion errors). The
 * caller owns *out; *src is valid until strata_infer_window_destroy. */
strata_status strata_infer_window_create(strata_backend *b,
					 const strata_infer_tensors *t,
					 strata_weight_store *ws,
					 const strata_infer_window_options *o,
					 strata_infer_window **out,
					 strata_infer_source *src,
					 strata_error *err);
void strata_infer_window_destroy(strata_infer_window *w); /* NULL is fine */
/* The engine, for its telemetry and sizes. */
strata_residency *strata_infer_window_engine(strata_infer_window *w);

/* ------------------------------------------------------------------------ */
/* The forward pass                                                         */
/* ------------------------------------------------------------------------ */

typedef struct strata_forward strata_forward;
typedef struct strata_kv_cache strata_kv_cache;

/* The most sequences (KV caches) one forward pass holds. */
#define STRATA_FORWARD_MAX_SEQUENCES 256u

/* One site of a placement: where some layers (or the embedding and the
 * head) run. device: a device of the split (resident or window units);
 * else the CPU computing from host memory (cpu units, statics on the
 * CPU); it names the links in the telemetry. */
typedef struct strata_forward_site {
	strata_backend *backend;
	strata_compute *compute; /* made on that backend's kernel table */
	bool device;
} strata_forward_site;

/* Sites a forward pass spans at most: the devices of a split and the CPU. */
#define STRATA_FORWARD_MAX_SITES (STRATA_PLAN_MAX_DEVICES + 1)

/* What a forward pass is made of. hp, backend, compute, src, sites and
 * the site lists are borrowed and must outlive it. */
/* ------------------------------------------------------------------------ */
/* Experts on the CPU (experts.c)                                           */
/* ------------------------------------------------------------------------ */

/* The routed experts of a model's first `layers` layers, held in host
 * memory and computed on the CPU, with a device cache of `cache_slots`
 * of them whose hits run on the device (llama.cpp's --n-cpu-moe,
 * KTransformers; docs/infer.md "Experts on the CPU"). */
typedef struct strata_infer_experts strata_infer_experts;

typedef struct strata_infer_experts_options {
	const strata_infer_hparams *hp;	     /* must outlive the store */
	const strata_infer_tensors *tensors; /* read at create only */
	strata_weight_store *ws;	     /* read at create only */
	uint32_t layers;      /* 1 .. hp->layers */
	uint32_t cache_slots; /* 0: every expert of those layers on the CPU */
	uint32_t rows;	      /* activation rows of a pass at most */
	uint32_t threads;     /* the CPU's compute threads; 0: every processor */
	strata_precision precision; /* the CPU's numerics (the session's) */
	/* the cache's device and the compute context the forward pass runs
	 * those layers on (hits run there); needed with slots only */
	strata_backend *device;
	strata_compute *device_compute;
	strata_plan_device device_kind; /* the form the device computes */
	/* a missed expert routed this many rows or more in one pass is
	 * copied to the device through a slot of its own and computed
	 * there (strata_plan_experts_stream_rows); 0: never */
	uint32_t stream_rows;
} strata_infer_experts_options;

typedef struct strata_infer_experts_stats {
	uint32_t layers, cache_slots;
	uint64_t routed;	/* expert calls asked: hits + misses + streamed */
	uint64_t hits, misses;	/* ran on the device / on the CPU */
	uint64_t streamed;	/* copied to the device for one pass, ran there */
	uint64_t admissions, evictions; /* experts into / out of the cache */
	uint64_t cpu_bytes;	/* expert weights the CPU computed with */
	uint64_t device_bytes;	/* expert weights hits read on the device */
	uint64_t upload_bytes;	/* copied host to device into the cache */
} strata_infer_experts_stats;

/* Reads the experts (their bytes are the plan's expert host_bytes),
 * makes the cache (one device block of cache_slots x the largest
 * expert's slot) and the CPU's compute context. E_INVALID_ARG for a
 * dense model, a layer count out of range or a cache without a device,
 * E_UNSUPPORTED where the device and the CPU compute a type in different
 * forms with a cache, read errors naming the tensor, E_NOMEM,
 * E_DEVICE_OOM. The caller owns *out. */
strata_status strata_infer_experts_create(const strata_infer_experts_options *o,
					  strata_infer_experts **out,
					  strata_error *err);
void strata_infer_experts_destroy(strata_infer_experts *x); /* NULL is fine */
void strata_infer_experts_get_stats(const strata_infer_experts *x,
				    strata_infer_experts_stats *out);
/* How often expert `expert` of layer `layer` was routed so far (0 for a
 * layer whose experts are not here). */
uint64_t strata_infer_experts_routed(const strata_infer_experts *x,
				     uint32_t layer, uint32_t expert);
/* The host scratch a store of `rows` rows takes (the plan's
 * strata_plan_experts.scratch_bytes). */
uint64_t strata_infer_experts_scratch_bytes(const strata_infer_hparams *hp,
					    uint32_t rows);

typedef struct strata_forward_options {
	const strata_infer_hparams *hp;
	/* Where the buffers live: one arena of its device memory. NULL: a
	 * CPU backend of the forward pass's own (compute must then be
	 * the CPU kernels'). */
	strata_backend *backend;
	strata_compute *compute; /* made on that backend's kernel table */
	const strata_infer_source *src;
	uint32_t context;   /* positions each KV cache holds */
	uint32_t batch;	    /* positions per pass at most (prefill chunk) */
	uint32_t sequences; /* KV caches (issue 9's --batch B); 0 is 1 */
	/* The KV cache's elements (--kv-type): STRATA_WEIGHT_F32 (0, the
	 * default), _F16 or _BF16, which every site's kernels must keep
	 * (strata_kernel_kv_takes; else E_UNSUPPORTED) */
	strata_weight_type kv_type;
	/* A placement: site_count sites (backend and compute above are then
	 * not used), layer l running on sites[decode_site[l]] in decode
	 * passes and on sites[prefill_site[l]] in chunks of at least
	 * prefill_from positions (0: never; prefill_site NULL: decode's);
	 * the embedding and the head on sites[head_site]. Each layer's KV
	 * cache lives on its decode site. 0 sites: one, backend/compute. */
	uint32_t site_count;
	const strata_forward_site *sites;
	const uint8_t *decode_site, *prefill_site; /* [hp->layers] */
	uint32_t head_site;
	uint32_t prefill_from;
	/* Where the activation and KV staging copies between sites are
	 * recorded (borrowed); NULL: nowhere. */
	strata_telemetry *telemetry;
	/* The routed experts of the store's layers run through it
	 * (borrowed; NULL: every expert from the source) */
	strata_infer_experts *experts;
	/* The plan's buffers (strata_plan_get_memory; borrowed; NULL: not
	 * checked): each site's arena must be exactly the plan's figure for
	 * it (strata_plan_site_bytes), else create fails with E_RES_BUDGET
	 * naming both, so the plan and the forward pass cannot drift. */
	const strata_plan_memory *planned;
} strata_forward_options;

/* Creates a forward pass: the KV caches (`sequences` of `context`
 * positions), activations for max(batch, sequences) rows, the rotary
 * frequencies and the step's new keys and values, in one arena of the
 * backend's device memory (exactly strata_forward_device_bytes, within the
 * plan's KV cache and workspace). Weights are used in the type the source
 * hands them (strata_infer_layer.elem) through the kernel table, which
 * refuses a type it does not take; norms, biases and embedding rows of
 * other types than f32 are converted on the device as they are used. Where
 * host code addresses the backend's memory (the CPU backend) logits are
 * written straight into the caller's arrays, else they are read back
 * through the compute context's copies. The one-sequence calls (run,
 * reset, position, kv_*) act on the selected sequence (strata_forward_select;
 * 0 at first); strata_forward_step runs one decode step of several at once.
 * E_INVALID_ARG for a NULL argument, a zero context or batch, or more than
 * STRATA_FORWARD_MAX_SEQUENCES sequences; E_DEVICE_OOM when the arena cannot
 * be had, E_NOMEM / E_OVERFLOW naming the buffer. */
strata_status strata_forward_create(const strata_forward_options *o,
				    strata_forward **out, strata_error *err);
/* The device bytes strata_forward_create takes for o's hp, context, batch,
 * sequences and backend (compute and src are not read); with sites, the
 * sum over every site's arena. */
strata_status strata_forward_device_bytes(const strata_forward_options *o,
					  uint64_t *out, strata_error *err);
/* The device arena's figures (of site 0 with a placement). */
void strata_forward_arena_stats(const strata_forward *f,
				strata_arena_stats *out);
/* Site s's arena (zeros for a site with none or past the last). */
void strata_forward_site_arena_stats(const strata_forward *f, uint32_t s,
				     strata_arena_stats *out);
void strata_forward_destroy(strata_forward *f);

/* Runs tokens[0..n) at positions pos .. pos+n-1 (pos must equal the number
 * of positions already cached), in chunks of at most `batch`. When `logits`
 * is not NULL it receives the logits of every position, (n, vocab); with
 * `last` not NULL, only the last position's (vocab). Errors:
 * E_INFER_CONTEXT past the context, E_INFER_TOKEN for an id outside the
 * vocabulary, weight-source and kernel errors as they come (the cache then
 * holds an undefined suffix: restart with strata_forward_reset). */
strata_status strata_forward_run(strata_forward *f, const int32_t *tokens,
				 uint32_t n, uint32_t pos, float *logits,
				 float *last, strata_error *err);
/* Forgets every cached position (of the selected sequence). */
void strata_forward_reset(strata_forward *f);
/* Keeps the first `positions` cached positions of the selected sequence
 * and forgets the rest, so a conversation whose new prompt shares only a
 * prefix with what is cached recomputes only the rest. More than are
 * cached is E_INVALID_ARG (nothing changes). */
strata_status strata_forward_truncate(strata_forward *f, uint32_t positions,
				      strata_error *err);
uint32_t strata_forward_position(const strata_forward *f);

/* Makes sequence `seq` (< strata_forward_sequences) the one that run,
 * reset, position and kv_* act on; the others keep their caches and
 * positions. E_INVALID_ARG past the last sequence (nothing changes). */
strata_status strata_forward_select(strata_forward *f, uint32_t seq,
				    strata_error *err);
uint32_t strata_forward_sequences(const strata_forward *f);
/* Positions cached for sequence seq (0 past the last). */
uint32_t strata_forward_position_of(const strata_forward *f, uint32_t seq);

/* One decode step of `count` sequences at once: tokens[i] at the next
 * position of sequence seqs[i] (distinct, each below
 * strata_forward_sequences). The weight products run once over the
 * `count` rows, each layer's weights acquired and released once, so in a
 * streamed mode one pass of the weights serves `count` tokens; attention
 * runs per sequence over its own cache. logits (count, vocab), row i for
 * seqs[i]. Each row's result is the bits strata_forward_run of that one
 * token on that sequence gives (the kernels' rows do not depend on the
 * row count), on the CPU backend; one row is that run on every backend. Errors: E_INVALID_ARG for a bad list,
 * E_INFER_CONTEXT for a sequence whose context is full, E_INFER_TOKEN,
 * weight-source and kernel errors as they come (the listed sequences'
 * caches then hold an undefined suffix); on success each listed position
 * advances by one. The selection does not change. */
strata_status strata_forward_step(strata_forward *f, const uint32_t *seqs,
				  const int32_t *tokens, uint32_t count,
				  float *logits, strata_error *err);
uint32_t strata_forward_context(const strata_forward *f);

/* One sequence's part of a mixed step: n tokens at its next positions (a
 * prompt chunk, or n = 1 for a decode token); `logits`: the logits of its
 * last token are wanted. */
typedef struct strata_forward_segment {
	uint32_t seq;
	const int32_t *tokens; /* (n) borrowed for the call */
	uint32_t n;	       /* >= 1 */
	bool logits;
} strata_forward_segment;

/* One mixed step (issue 19): the segments' tokens, a prompt chunk of one
 * sequence beside decode tokens of others, all in one pass of the weights
 * (each layer acquired and released once; products over every row),
 * attention per segment over its own sequence's cache (causal within a
 * chunk). logits receives one row (vocab) per segment whose `logits` is
 * set, in segment order; NULL when none is wanted. Rows in all: at most
 * strata_forward_step_rows. Each segment's logits equal strata_forward_run
 * of those tokens on that sequence to rounding (1e-5; bit for bit for a
 * one-token segment on the CPU). Errors as strata_forward_step's
 * (E_INVALID_ARG also for too many rows or a segment with no tokens); on
 * success each listed sequence advances by its n. */
strata_status strata_forward_step_segments(strata_forward *f,
					   const strata_forward_segment *segs,
					   uint32_t count, float *logits,
					   strata_error *err);
/* The most rows one step takes: max(prefill chunk, sequences). */
uint32_t strata_forward_step_rows(const strata_forward *f);
const strata_infer_hparams *strata_forward_hparams(const strata_forward *f);

/* The forward pass's KV cache (it owns it: valid until
 * strata_forward_destroy), for a prefix cache (f is const for callers that
 * only save, as strchr's string is); and the sequence the one-sequence
 * calls act on. */
strata_kv_cache *strata_forward_kv_cache(const strata_forward *f);
uint32_t strata_forward_selected(const strata_forward *f);

/* ------------------------------------------------------------------------ */
/* The KV cache                                                             */
/* ------------------------------------------------------------------------ */

/* The keys and values of `sequences` sequences, each `context` positions of
 * every layer, in a backend's device memory as elements of kv_type (f32,
 * f16 or bf16: --kv-type), and how many positions each sequence holds. A
 * forward pass makes one (strata_forward_kv_cache); a prefix cache saves
 * and restores sequences of it. */
typedef struct strata_kv_cache_shape {
	uint32_t layers;
	uint32_t kv_dim;    /* kv_heads x head_dim */
	uint32_t context;   /* positions of each sequence */
	uint32_t sequences; /* 1 .. STRATA_FORWARD_MAX_SEQUENCES */
	/* STRATA_WEIGHT_F32 (0, the default), _F16 or _BF16 */
	strata_weight_type kv_type;
} strata_kv_cache_shape;

/* Bytes of the keys (and as many of the values): (sequences, layers,
 * context, kv_dim) elements of kv_type; E_OVERFLOW naming the product,
 * E_INVALID_ARG for a zero or too large count, E_UNSUPPORTED for a
 * kv_type no KV cache holds. */
strata_status strata_kv_cache_keys_bytes(const strata_kv_cache_shape *shape,
					 uint64_t *out, strata_error *err);

/* Takes the keys and the values as two blocks of `arena` (device memory
 * of the backend that `compute` computes on; both borrowed, outliving the
 * cache); every sequence starts empty. Save and restore copy through
 * `compute`. The caller owns *out; E_RES_BUDGET when the arena has no room,
 * E_NOMEM, nothing taken on error. */
strata_status strata_kv_cache_create(const strata_kv_cache_shape *shape,
				     strata_arena *arena,
				     strata_compute *compute,
				     strata_kv_cache **out, strata_error *err);
/* Returns the blocks to the arena; NULL is fine. */
void strata_kv_cache_destroy(strata_kv_cache *kv);

const strata_kv_cache_shape *strata_kv_cache_get_shape(const strata_kv_cache *kv);
/* Positions cached for sequence seq (0 past the last). */
uint32_t strata_kv_cache_position(const strata_kv_cache *kv, uint32_t seq);
/* Forgets every cached position of sequence seq. */
void strata_kv_cache_reset(strata_kv_cache *kv, uint32_t seq);

/* Save and restore, for a prefix cache (issue 9; src/serve/prefix_cache.c).
 * The keys and values of positions [0, positions) depend on those tokens
 * only, so a later sequence starting with the same tokens can start from
 * them instead of recomputing. A saved prefix is `count` = 2 x layers
 * parts, each its own block of memory: parts[2 l] the keys of layer l,
 * parts[2 l + 1] its values, each (positions, kv_dim) rows from position
 * 0 in the cache's kv_type (f32 or, with an f16/bf16 cache, 2-byte
 * elements behind the float pointers: the bytes are copied as they are). part_bytes: the bytes of one part of `positions`; bytes: of
 * all of them (E_OVERFLOW naming the sum). save copies sequence seq's
 * cached positions [0, positions) into the parts (each part_bytes >=
 * strata_kv_cache_part_bytes; count 2 x layers; positions at most the
 * cached count; else E_INVALID_ARG); the cache is unchanged. restore
 * copies the first `positions` rows of parts holding `saved` rows each (as
 * save wrote them) back into sequence seq and sets its position to
 * `positions`, so the next run starts there (E_INVALID_ARG for positions
 * past saved or a wrong count, E_INFER_CONTEXT past the context). The
 * copies go through the compute context (strata_compute_download /
 * upload): every part's copy is queued behind the kernels and both calls
 * wait once, at the end, so the parts must stay valid until the call
 * returns (nothing after it); pinned host parts (strata_backend_host_alloc)
 * make the copies direct DMA on CUDA. If a restore's copy fails the
 * sequence's position is reset to 0. */
strata_status strata_kv_cache_part_bytes(const strata_kv_cache *kv,
					 uint32_t positions, uint64_t *out,
					 strata_error *err);
strata_status strata_kv_cache_bytes(const strata_kv_cache *kv,
				    uint32_t positions, uint64_t *out,
				    strata_error *err);
strata_status strata_kv_cache_save(const strata_kv_cache *kv, uint32_t seq,
				   uint32_t positions, float *const *parts,
				   uint32_t count, uint64_t part_bytes,
				   strata_error *err);
strata_status strata_kv_cache_restore(strata_kv_cache *kv, uint32_t seq,
				      const float *const *parts,
				      uint32_t count, uint32_t saved,
				      uint32_t positions, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct strata_sampler_params {
	float temperature;    /* 0: greedy (lowest id wins a tie) */
	uint32_t top_k;	      /* 0: off */
	float top_p;	      /* 1: off */
	float min_p;	      /* 0: off; keep p >= min_p * p_max */
	float repeat_penalty; /* 1: off; llama.cpp rule over the history */
	uint32_t repeat_last_n; /* history length penalised; 0: all */
	uint64_t seed;
} strata_sampler_params;

/* temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat 1.0 (64), seed 0 */
void strata_sampler_params_default(strata_sampler_params *p);

typedef struct strata_sampler strata_sampler;

/* E_INVALID_ARG naming a parameter out of range (negative temperature, top_p
 * outside (0, 1], ...). Buffers for `vocab` candidates are taken here, so
 * sampling never allocates. */
strata_status strata_sampler_create(const strata_sampler_params *p,
				    uint32_t vocab, strata_sampler **out,
				    strata_error *err);
void strata_sampler_destroy(strata_sampler *s);

/* A logits row (vocab values) that holds a NaN or +inf, or no finite value
 * at all, is E_INFER_NONFINITE naming `position` and the first bad id: no
 * token can be drawn from it (a zero RoPE base or NaN weights give such
 * rows; the sampler would emit the last id every step). Generation checks
 * every row before sampling. */
strata_status strata_logits_check(const float *logits, uint32_t vocab,
				  uint64_t position, strata_error *err);

/* Picks the next token from logits (vocab; modified in place) given the
 * tokens so far. Same seed and inputs give the same choice. The row must
 * pass strata_logits_check. */
int32_t strata_sampler_sample(strata_sampler *s, float *logits,
			      const int32_t *history, size_t n_history);

/* ------------------------------------------------------------------------ */
/* Generation                                                               */
/* ------------------------------------------------------------------------ */

/* Called with each new token; a non-OK return stops generation with that
 * status (err already filled), except STRATA_E_INFER_STOP: the caller has
 * what it wants (a stop string matched), generation ends there as it ends
 * at EOS, successfully, with stats.stopped_by_caller set (that token
 * counted as generated, not fed back). */
typedef strata_status (*strata_token_fn)(void *user, int32_t token,
					 strata_error *err);

typedef struct strata_generate_stats {
	uint64_t prompt_tokens, generated_tokens;
	uint64_t prompt_ns;	   /* the prefill */
	uint64_t first_token_ns;   /* start to the first sampled token */
	uint64_t generate_ns;	   /* after the first token to the end */
	bool stopped_at_eos;
	bool stopped_by_caller; /* on_token returned STRATA_E_INFER_STOP */
} strata_generate_stats;

/* Prefills prompt[0..n_prompt) (n_prompt >= 1) then samples up to max_new
 * tokens, calling on_token for each, stopping after `eos` (when >= 0; the
 * EOS token itself is not passed on) or at the context's end. */
strata_status strata_generate(strata_forward *f, strata_sampler *s,
			      const int32_t *prompt, uint32_t n_prompt,
			      uint32_t max_new, int32_t eos,
			      strata_token_fn on_token, void *user,
			      strata_generate_stats *stats, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Sessions: a model opened for running, the way `strata run` and `strata   */
/* logits` do it                                                            */
/* ------------------------------------------------------------------------ */

typedef struct strata_session_options {
	const char *model_path;
	strata_plan_options plan;	/* residency options, as parsed */
	const char *const *exclude;	/* --exclude globs */
	size_t exclude_count;
	uint32_t device_index;		/* N of --device cuda:N */
	uint32_t threads;		/* compute threads; 0: every processor */
	/* --precision: the numerics of every compute context the session
	 * makes (strata_precision; 0, the default, is FAST) */
	strata_precision precision;
	uint32_t positions;		/* positions the run needs (prompt + new) */
	uint32_t prefill;		/* longest pass wanted (prompt length) */
	/* Shape fields the options leave 0 take strata plan's defaults
	 * (strata_plan_shape_defaults, the context raised to `positions`
	 * when they need more), so plan and run size the same shape; false:
	 * the context is `positions` and the prefill chunk `prefill` (at
	 * most 512), the work in hand exactly (logits, batch). */
	bool plan_shape;
	/* --batch auto (issue 19): when not 0, plan.shape.batch is not read
	 * and the forward pass holds the batch of most predicted tokens per
	 * second among 1 .. batch_auto_max (strata_plan_batch_curve and
	 * strata_plan_batch_best; 1 when none fits), planned at that batch
	 * (strata_forward_sequences tells which). */
	uint32_t batch_auto_max;
	/* Read resident CPU weights instead of mapping them (--no-mmap). */
	bool no_map;
	/* Called on the opening thread as the weights load, with the file
	 * bytes loaded so far and in all (a progress bar); optional. */
	void (*load_progress)(void *user, uint64_t done_bytes,
			      uint64_t total_bytes);
	void *load_progress_user;
} strata_session_options;

/* A model opened for running: catalog, hyper-parameters, tensors, plan,
 * weight store, backend, residency window, compute context and forward
 * pass, opened in that order. Opaque: callers reach its parts through the
 * strata_session_* accessors below. */
typedef struct strata_session strata_session;

/* Opens o->model_path, plans it with o->plan (the selected mode, or the
 * forced one), loads the static tensors and starts the window. The context
 * is --context when given, else o->positions; a run needing more positions
 * than the model was trained for is E_INFER_CONTEXT. The prefill pass is
 * --prefill-chunk when given, else o->prefill (capped at 512); with
 * o->plan_shape both defaults are strata plan's instead; the forward
 * pass holds --batch sequences (o->plan.shape.batch, 0 or 1: one; above
 * STRATA_FORWARD_MAX_SEQUENCES is E_INVALID_ARG), and the plan is made for
 * exactly that shape. Errors as they come from each step,
 * E_PLAN_NOTHING_FITS naming the shortfalls. The caller owns *out
 * (strata_session_close). */
strata_status strata_session_open(const strata_session_options *o,
				  strata_session **out, strata_error *err);

/* The plan source of catalog c as a session plans it: the --exclude
 * globs and, with po->experts.layers (--n-cpu-moe), those layers' routed
 * experts, which leave their units for the CPU: po->experts is sized here
 * (strata_plan_experts_size, and the CPU's scratch for po's shape, its
 * defaults taken where unset). E_USAGE for --n-cpu-moe on a dense model or
 * --expert-cache alone; the source's errors. The caller owns *out. */
strata_status strata_session_plan_source(const strata_catalog *c,
					 const strata_infer_hparams *hp,
					 const char *const *exclude,
					 size_t exclude_count,
					 strata_plan_options *po,
					 strata_plan_source **out,
					 strata_error *err);

/* Whether a session planned with options o lets the plan select a
 * placement of units (strata_plan_options.mixed_placements): on CUDA and
 * over a layer split; on one CPU device the device and the CPU are one
 * processor on one RAM, so only a forced placement runs there. strata
 * plan asks the same, so plan and run choose alike. */
bool strata_session_runs_placements(const strata_plan_options *o);
void strata_session_close(strata_session *s); /* NULL is fine */

/* Ends the run's background work (reads and copies already started) so the
 * telemetry figures are final; call once after the last forward pass and
 * before the summary or the document. E_RES_READER if a read had failed. */
strata_status strata_session_finish(strata_session *s, strata_error *err);

/* The end-of-run residency summary for people (bytes per direction with
 * GB/s, peaks against budgets, stalls), written to f. */
void strata_session_print_summary(strata_session *s, FILE *f);

/* Writes the telemetry document (DESIGN.md) for this session to path,
 * atomically, with run's figures (the forward passes' time and positions,
 * and the sampler's seed when the run sampled). Call
 * strata_session_finish first. */
typedef struct strata_session_run {
	uint64_t run_ns; /* the forward passes */
	uint64_t tokens; /* positions they computed */
	bool has_seed;	 /* the run sampled: its seed is in the document */
	uint64_t seed;
} strata_session_run;
strata_status strata_session_write_telemetry(strata_session *s,
					     const char *path,
					     const strata_session_run *run,
					     strata_error *err);

/* The session's parts, for the commands and the serve layer. Each returns
 * what the session owns: valid until strata_session_close, never NULL for
 * an open session (the weight source's statics and ops included), and not
 * to be destroyed by the caller. */
/* The forward pass, with the session's --batch sequences. */
strata_forward *strata_session_forward(const strata_session *s);
/* The store of the experts the plan computes on the CPU (--n-cpu-moe), or
 * NULL. */
strata_infer_experts *strata_session_experts(const strata_session *s);
/* The model's hyper-parameters (vocab, eos, layers ...). */
const strata_infer_hparams *strata_session_hparams(const strata_session *s);
/* The backend the forward pass runs on (its memory, its pinned host
 * allocations). */
strata_backend *strata_session_backend(const strata_session *s);
/* The plan the session runs: the selected mode, budgets and memory. */
const strata_plan *strata_session_plan(const strata_session *s);
/* The residency engine behind the window: telemetry and sizes. */
strata_residency *strata_session_residency(const strata_session *s);
/* The weight store the window reads through: its statistics. */
const strata_weight_store *
strata_session_weight_store(const strata_session *s);
/* The weight source the forward pass reads through, borrowed by it: the
 * statics' element types say where weights stay half; a caller that wraps
 * its ops (a bench timing the layers) changes what the forward pass calls,
 * and must put them back before the next forward pass it does not mean to
 * wrap. */
strata_infer_source *strata_session_source(strata_session *s);
/* The model path given to strata_session_open (the session's own copy,
 * so the options' buffer need not outlive it). */
const char *strata_session_model_path(const strata_session *s);
/* Nanoseconds strata_session_open took, through the first loads. */
uint64_t strata_session_load_ns(const strata_session *s);
/* The numerics every compute context of the session was made with
 * (strata_session_options.precision, --precision). */
strata_precision strata_session_precision(const strata_session *s);

#endif
