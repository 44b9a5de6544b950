/* forward_internal.h - the forward pass's state and the helpers its files
 * share: forward.c (one sequence, prefill and decode), forward_create.c
 * (making it and its buffers), forward_step.c (one decode step for several
 * sequences at once) and forward_kv.c (KV save and restore)
 * (layer: infer). Not a public header: nothing outside src/infer uses it. */
#ifndef STRATA_INFER_FORWARD_INTERNAL_H
#define STRATA_INFER_FORWARD_INTERNAL_H

#include "strata/infer.h"

struct strata_forward {
	const strata_infer_hparams *hp;
	strata_compute *c;
	const strata_infer_source *src;
	uint32_t context, batch;
	uint32_t rows;	    /* activation rows: max(batch, sequences) */
	uint32_t sequences; /* KV caches, one per sequence */
	uint32_t seq;	    /* the sequence the one-sequence calls act on */
	uint32_t pos[STRATA_FORWARD_MAX_SEQUENCES]; /* cached positions */
	uint32_t q_dim, kv_dim;
	/* activations, `rows` rows each */
	float *x;	/* (rows, dim) the residual stream */
	float *xb;	/* (rows, dim) normed input / projection output */
	float *q;	/* (rows, q_dim) */
	float *att;	/* (rows, q_dim) attention output */
	float *hb, *hb2; /* (rows, ffn) gate and up */
	/* (sequences, kv_dim) each: a step's new keys and values before
	 * they go to each sequence's cache; NULL with one sequence */
	float *k_new, *v_new;
	float *k_cache, *v_cache; /* (sequences, layers, context, kv_dim) */
	float *inv_freq;	  /* (head_dim / 2), device mode: + 1 for `one` */
	/* device mode only (NULL otherwise) */
	strata_backend *b;
	strata_arena *arena;	  /* every buffer above and below */
	strata_stream *stream;	  /* CUDA: the compute stream; NULL on CPU */
	float *logit_row;	  /* (sequences, vocab) logits rows */
	float *one;		  /* inv_freq[head_dim / 2] = 1.0f: the input
				     of the half-to-f32 conversion GEMV */
	/* Where half norms and biases are converted to f32: the MLP buffers,
	 * which no step of attention or of the head uses, when they are large
	 * enough; else buffers of their own. So the device buffers are the
	 * plan's list (its unused key/value/score buffers cover inv_freq). */
	float *norm_f32;	  /* (dim): hb2 or own */
	float *bias_f32;	  /* (max(q_dim + 2 kv_dim, head_dim / 2)): hb or own */
	float *own_norm, *own_bias;
};

/* Row `pos` of layer `layer` of sequence `seq`'s key / value cache. */
static inline float *strata__forward_k_at(const strata_forward *f,
					  uint32_t seq, uint32_t layer,
					  uint32_t pos)
{
	return f->k_cache +
	       (((uint64_t)seq * f->hp->layers + layer) * f->context + pos) *
		       f->kv_dim;
}

static inline float *strata__forward_v_at(const strata_forward *f,
					  uint32_t seq, uint32_t layer,
					  uint32_t pos)
{
	return f->v_cache +
	       (((uint64_t)seq * f->hp->layers + layer) * f->context + pos) *
		       f->kv_dim;
}

/* forward.c's helpers, for the other files: the weight product (f32 or
 * half weights), RMSNorm with the weight as stored, q/k/v of n rows of xb
 * (into f->q, k and v; one launch for half weights on the device), a
 * product added into y (the residual), a bias as f32, the embedding of n
 * tokens into x, the MLP block over n rows of x, and the copies (device to
 * host, host to device) and the wait of device mode (plain copies on the
 * CPU backend). */
strata_status strata__forward_mm(strata_forward *f, float *y, const float *x,
				 const float *w, uint8_t elem,
				 const float *bias, uint32_t n, uint32_t in,
				 uint32_t out, strata_error *err);
strata_status strata__forward_rmsnorm(strata_forward *f, float *y,
				     const float *x, const float *w,
				     uint8_t elem, uint32_t n,
				     strata_error *err);
strata_status strata__forward_qkv(strata_forward *f,
				  const strata_infer_layer *w, uint32_t n,
				  float *k, float *v, const float *bq,
				  const float *bk, const float *bv,
				  strata_error *err);
strata_status strata__forward_mm_add(strata_forward *f, float *y,
				     const float *x, const float *w,
				     uint8_t elem, uint32_t n, uint32_t in,
				     uint32_t out, float *scratch,
				     strata_error *err);
strata_status strata__forward_as_f32(strata_forward *f, const float *w,
				     uint8_t elem, uint32_t count,
				     float *scratch, const float **out,
				     strata_error *err);
strata_status strata__forward_embed(strata_forward *f, const int32_t *tokens,
				    uint32_t n, strata_error *err);
strata_status strata__forward_mlp(strata_forward *f,
				  const strata_infer_layer *w, uint32_t n,
				  strata_error *err);
strata_status strata__forward_download(const strata_forward *f, void *dst,
				       const void *src, uint64_t bytes,
				       strata_error *err);
strata_status strata__forward_upload(const strata_forward *f, void *dst,
				     const void *src, uint64_t bytes,
				     strata_error *err);
strata_status strata__forward_finish(const strata_forward *f,
				     strata_error *err);

#endif
