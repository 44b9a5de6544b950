/* forward_internal.h - the forward pass's and the KV cache's state and the
 * steps the forward pass's files share: forward.c (one sequence, prefill
 * and decode), forward_blocks.c (the layer's weights as the kernels take
 * them, the biases, the MLP block), forward_create.c (making it and its
 * buffers), forward_step.c (one decode step for several sequences at once)
 * and kv_cache.c (the KV cache, its save and restore) (layer: infer). Not a
 * public header: nothing outside src/infer uses it. */
#ifndef STRATA_INFER_FORWARD_INTERNAL_H
#define STRATA_INFER_FORWARD_INTERNAL_H

#include "strata/infer.h"

/* Each layer's keys and values are (sequences, context, kv_dim) elements of
 * shape.kv_type (f32, f16 or bf16: elem_bytes each) at
 * k[layer] / v[layer]: in one pair of blocks of one arena (one site), or,
 * for a placement, each layer's pair in the arena of the site that
 * computes it in decode (strata__kv_cache_create_sites). A forward pass
 * computing a layer elsewhere points k[layer] / v[layer] at a staging copy
 * for that layer's step (forward_sites.c). */
struct strata_kv_cache {
	strata_kv_cache_shape shape;
	uint32_t elem_bytes;	/* 4 (f32) or 2 (f16, bf16) */
	void **k, **v;		/* [layers] */
	strata_compute **c;	/* [layers]: save and restore copy through it */
	strata_arena **arena;	/* [layers]: where each pair was taken */
	bool split;		/* a pair per layer; else k[0], v[0] are the two
				   blocks of arena[0] */
	uint32_t pos[STRATA_FORWARD_MAX_SEQUENCES]; /* cached positions */
};

/* Byte offset of row `pos` of sequence `seq` in a layer's block. */
static inline uint64_t strata__kv_offset(const strata_kv_cache *kv,
					 uint32_t seq, uint32_t pos)
{
	const strata_kv_cache_shape *s = &kv->shape;
	return ((uint64_t)seq * s->context + pos) * s->kv_dim * kv->elem_bytes;
}

/* Row `pos` of layer `layer` of sequence `seq`'s keys / values, in the
 * cache's type (f32 rows a float pointer may take: kv_type F32). */
static inline void *strata__kv_keys(const strata_kv_cache *kv, uint32_t seq,
				    uint32_t layer, uint32_t pos)
{
	return (char *)kv->k[layer] + strata__kv_offset(kv, seq, pos);
}

static inline void *strata__kv_values(const strata_kv_cache *kv,
				      uint32_t seq, uint32_t layer,
				      uint32_t pos)
{
	return (char *)kv->v[layer] + strata__kv_offset(kv, seq, pos);
}

/* kv_cache.c. The cache with layer l's keys and values in arenas[l]
 * (device memory of the backend computes[l] computes on), each a block of
 * (sequences, context, kv_dim) of shape->kv_type. The caller owns *out. */
strata_status strata__kv_cache_create_sites(const strata_kv_cache_shape *shape,
					    strata_arena *const *arenas,
					    strata_compute *const *computes,
					    strata_kv_cache **out,
					    strata_error *err);

/* One site: its backend and compute context, one arena of its device
 * memory with the activations (`rows` rows each, as below), the KV cache
 * of the layers whose decode split computes here, and a one-layer KV
 * staging pair where a pass computes here a layer whose cache is on
 * another site. */
typedef struct strata_forward_site_state {
	strata_backend *b;
	strata_compute *c;
	strata_arena *arena;
	bool device;	  /* a device of the split; else the CPU */
	bool addressable; /* host code reads and writes its memory */
	bool used;	  /* runs some layer, or the head */
	bool stages;	  /* holds k_stage / v_stage */
	float *x, *xb, *q, *att, *hb, *hb2, *k_new, *v_new, *inv_freq;
	float *inv_freq_local, *norm_f32;
	float *moe_logits, *moe_in, *moe_out;
	float *logit_row, *own_bias, *bias_f32;
	/* (sequences, context, kv_dim) each, of the KV cache's type */
	float *k_stage, *v_stage;
} strata_forward_site_state;

struct strata_forward {
	const strata_infer_hparams *hp;
	strata_compute *c;
	const strata_infer_source *src;
	uint32_t context, batch;
	uint32_t rows;	    /* activation rows: max(batch, sequences) */
	uint32_t sequences; /* KV caches, one per sequence */
	uint32_t seq;	    /* the sequence the one-sequence calls act on */
	uint32_t q_dim, kv_dim;
	strata_weight_type kv_type; /* the KV cache's elements */
	/* activations, `rows` rows each */
	float *x;	/* (rows, dim) the residual stream */
	float *xb;	/* (rows, dim) normed input / projection output */
	float *q;	/* (rows, q_dim) */
	float *att;	/* (rows, q_dim) attention output */
	float *hb, *hb2; /* (rows, ffn) gate and up */
	/* (rows, kv_dim) each, f32: a step's new keys and values before
	 * they go to each sequence's cache; NULL with one sequence and an
	 * f32 cache */
	float *k_new, *v_new;
	strata_kv_cache *kv;	  /* `sequences` caches, in the arena */
	float *inv_freq;	  /* (head_dim / 2) */
	float *inv_freq_local;	  /* the sliding layers' (Gemma 3), or NULL */
	float *norm_f32;	  /* Gemma's 1 + w norms (norm floats), or NULL */
	/* Mixture of experts (NULL for dense models): the router's logits
	 * (rows, experts), one expert's input rows and output rows (rows,
	 * dim) on the device; on the host the logits read back, and the
	 * routing (rows x experts_used ids and weights, grouped by expert). */
	float *moe_logits, *moe_in, *moe_out;
	float *moe_host;
	int32_t *moe_rows;
	float *moe_weights;
	strata_backend *b;	  /* where every buffer lives */
	strata_backend *own_b;	  /* b when made here (none was given) */
	strata_arena *arena;	  /* every buffer above and below */
	/* The host addresses b's memory: the LM head writes the caller's
	 * logits itself. Else it writes logit_row, copied back. */
	bool logits_in_place;
	float *logit_row;	  /* (sequences, vocab), or NULL in place */
	/* Where biases of another type are converted to f32: the MLP gate
	 * buffer, which no step of attention uses, when it is large enough,
	 * else a buffer of its own. So the buffers stay the plan's list
	 * (its unused key/value/score buffers cover inv_freq). */
	float *bias_f32;	  /* (max(q_dim + 2 kv_dim, head_dim / 2)) */
	float *own_bias;
	/* The sites (forward_sites.c). c, b, the activations, logit_row,
	 * logits_in_place and bias_f32 above are those of site `cur`, where
	 * the residual stream is now. One site without a placement. */
	strata_forward_site_state site[STRATA_FORWARD_MAX_SITES];
	uint32_t site_count, cur, head_site;
	bool placed;		  /* made with sites: KV cache per layer */
	uint8_t *layer_site[2];	  /* [layers]: decode, prefill split */
	uint32_t prefill_from;	  /* chunk size running the prefill split */
	bool prefill;		  /* the split the source was last told */
	strata_telemetry *tel;	  /* NULL: copies not recorded */
	strata_infer_experts *experts; /* experts on the CPU, or NULL */
	float *bounce;		  /* (rows, dim) host, device to device */
	int32_t *step_tokens;	  /* (rows) host: a mixed step's ids */
};

/* One layer's weights as the kernels take them: each slot's data, stored
 * type and shape (a norm, a bias: one row). Absent biases have NULL data. */
typedef struct strata_forward_weights {
	strata_weight attn_norm, wq, wk, wv, bq, bk, bv, wo;
	strata_weight ffn_norm, w_gate, w_up, w_down;
	strata_weight q_norm, k_norm, attn_post_norm, ffn_post_norm;
	strata_weight router, sh_gate, sh_up, sh_down, sh_router;
	uint32_t layer;	  /* the layer's index */
	uint32_t experts; /* each expert's gate, up, down: the layer's */
	const void *const *expert[3];
	uint8_t expert_elem[3];
} strata_forward_weights;

/* forward_blocks.c. The weights of an acquired layer l. */
void strata__forward_weights_of(const strata_forward *f,
				const strata_infer_layer *l,
				strata_forward_weights *out);
/* A weight of the statics (embed, final_norm, lm_head, rope divisors). */
strata_weight strata__forward_static(const void *data, uint8_t elem,
				     uint32_t rows, uint32_t cols);
/* The q, k and v biases as f32 (NULL where absent), converted into
 * f->bias_f32 when they are of another type. */
strata_status strata__forward_biases(strata_forward *f,
				     const strata_forward_weights *w,
				     const float **bq, const float **bk,
				     const float **bv, strata_error *err);
/* x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x))) over n rows. */
strata_status strata__forward_mlp(strata_forward *f,
				  const strata_forward_weights *w, uint32_t n,
				  strata_error *err);
/* y (n, dim) += x (n, in) . w^T, the residual add (xb as scratch). */
strata_status strata__forward_residual(strata_forward *f, float *y,
				       const float *x, const strata_weight *w,
				       uint32_t n, strata_error *err);
/* Acquires layer `layer`, runs `step` on it, releases it; the first
 * failure is the one reported, and the release happens after a failed
 * step too. */
typedef strata_status (*strata_forward_layer_fn)(strata_forward *f,
						 const strata_forward_weights *w,
						 uint32_t layer, void *arg,
						 strata_error *err);
strata_status strata__forward_layer(strata_forward *f, uint32_t layer,
				    strata_forward_layer_fn step, void *arg,
				    strata_error *err);

/* forward_moe.c: x += the mixture of experts of rmsnorm(x) over n rows
 * (the router's top-k softmax, each chosen expert's SwiGLU MLP, Qwen2-MoE's
 * gated shared expert). */
strata_status strata__forward_moe(strata_forward *f,
				  const strata_forward_weights *w, uint32_t n,
				  strata_error *err);
/* Test and bench knob (forward_moe.c): 1 runs a layer's device experts
 * through one strata_kernel_experts call (CUDA: the grouped decode
 * kernels), 0 (the default) each expert through its own kernels. */
extern int strata__moe_group;
/* Host bytes of the routing buffers for hp and `rows` rows (0: dense). */
uint64_t strata__forward_moe_host_bytes(const strata_infer_hparams *hp,
					uint32_t rows);

/* experts.c: what the MoE step asks of the experts on the CPU. apart:
 * layer's experts are the store's. input: the host rows (rows, dim) the
 * layer's normed input is read back into. route: counts expert e's call
 * of m rows and says where it runs (device weights in w; *st the stream
 * copy's error). begin zeroes the host sum of n rows; cpu adds expert e's
 * weighted outputs of the m rows `rows` (of input) into it; sum is it.
 * admit may copy expert e into the cache after its miss. */
bool strata__experts_apart(const strata_infer_experts *x, uint32_t layer);
float *strata__experts_input(strata_infer_experts *x);
typedef enum strata_expert_route {
	STRATA_EXPERT_HIT,	/* w: its cache slot, run it on c */
	STRATA_EXPERT_STREAMED, /* w: copied to the stream slot, run it on c */
	STRATA_EXPERT_MISS,	/* run it on the CPU (strata__experts_cpu) */
} strata_expert_route;
strata_expert_route strata__experts_route(strata_infer_experts *x,
					  uint32_t layer, uint32_t e,
					  uint32_t m, const strata_compute *c,
					  strata_weight w[3], strata_error *err,
					  strata_status *st);
void strata__experts_begin(strata_infer_experts *x, uint32_t n);
strata_status strata__experts_cpu(strata_infer_experts *x, uint32_t layer,
				  uint32_t e, uint32_t n, const int32_t *rows,
				  const float *weight, uint32_t m,
				  strata_error *err);
/* A layer's missed experts at once (miss[e]: expert e of the layer
 * missed, its count[e] rows at their offset in rows / weight, grouped by
 * expert as the router lays them out): strata_kernel_experts on the
 * store's CPU context, the CPU's slot one job of the pool for them all;
 * the same bits as strata__experts_cpu expert by expert. */
strata_status strata__experts_cpu_misses(strata_infer_experts *x,
					 uint32_t layer, uint32_t n,
					 const uint32_t *count,
					 const bool *miss, const int32_t *rows,
					 const float *weight,
					 strata_error *err);
/* Test and bench knob (experts.c): 1 (the default) runs a layer's misses
 * through strata__experts_cpu_misses, 0 through strata__experts_cpu one
 * expert at a time (the path before it; bench_forward --cpu-grouped). */
extern int strata__cpu_experts_grouped;
/* Bench counter (bench_forward): nanoseconds the layers' CPU misses took,
 * every session's together (forward_moe.c adds; never reset). */
extern _Atomic uint64_t strata__experts_cpu_ns;
float *strata__experts_sum(strata_infer_experts *x);
strata_status strata__experts_admit(strata_infer_experts *x, uint32_t layer,
				    uint32_t e, strata_error *err);

/* forward_family.c: the steps of the families beyond llama (each a no-op
 * for llama, mistral and qwen2). */
/* Gemma: every norm of w as 1 + w (f32, in f->norm_f32); the final norm
 * likewise (it borrows the first norm's place, used before any layer). */
strata_status strata__forward_norms(strata_forward *f,
				    strata_forward_weights *w,
				    strata_error *err);
strata_status strata__forward_final_norm(strata_forward *f,
					 strata_weight *w, strata_error *err);
uint64_t strata__forward_norm_floats(const strata_infer_hparams *hp);
/* Qwen3 / Gemma 3: q (n, heads, head_dim) and k (n, kv_heads, head_dim)
 * RMSNormed per head, in place. */
strata_status strata__forward_qk_norm(strata_forward *f,
				      const strata_forward_weights *w,
				      float *q, float *k, uint32_t n,
				      strata_error *err);
/* f->x += x . w^T, or with sandwich norms f->x += norm(x . w^T). */
strata_status strata__forward_output(strata_forward *f, const float *x,
				     const strata_weight *w,
				     const strata_weight *post_norm,
				     uint32_t n, strata_error *err);
/* f->x = embedding rows of tokens (times sqrt(dim) for Gemma). */
strata_status strata__forward_embed(strata_forward *f, const int32_t *tokens,
				    uint32_t n, strata_error *err);
/* Gemma 2's final soft-capping of count logits, in place. */
strata_status strata__forward_cap_logits(strata_forward *f, float *logits,
					 uint64_t count, strata_error *err);
/* Layer l's rotary frequencies and attention shape. */
const float *strata__forward_inv_freq(const strata_forward *f, uint32_t layer);
strata_attention_shape strata__forward_attention_shape(const strata_forward *f,
						       uint32_t layer,
						       uint32_t n,
						       uint32_t pos);

/* forward_sites.c. Makes site s the current one (the fields above); the
 * residual stream's first `rows` rows follow it when copy is true. */
strata_status strata__forward_move(strata_forward *f, uint32_t s,
				   uint32_t rows, bool copy, strata_error *err);
/* Tells the source which split the passes that follow run (a no-op when
 * it does not change). */
strata_status strata__forward_pass(strata_forward *f, bool prefill,
				   strata_error *err);
/* Runs layer `layer` on its site of the current split: the residual
 * stream's n rows moved there, the layer's KV rows [0, pos) of the
 * selected sequence staged there when its cache is elsewhere and the new
 * rows [pos, pos + n) copied back after; then strata__forward_layer. */
strata_status strata__forward_layer_at(strata_forward *f, uint32_t layer,
				       uint32_t n, uint32_t pos,
				       strata_forward_layer_fn step, void *arg,
				       strata_error *err);


#endif
