/* forward_create.c - making and dropping a forward pass: its shape, its
 * buffers in host memory or in one arena of backend device memory, the
 * rotary frequencies and constants of device mode, and the byte counts the
 * plan is checked against (layer: infer). The passes themselves are
 * forward.c's. */
#include <math.h>
#include <string.h>

#include "infer/forward_internal.h"

/* One buffer of the forward pass: rows x cols floats. */
typedef struct buf_spec {
	float **slot;
	uint64_t rows, cols;
	const char *what;
} buf_spec;

#define MAX_BUFFERS 16

/* ------------------------------------------------------------------------ */

static float *buffer(uint64_t rows, uint64_t cols, const char *what,
		     strata_error *err)
{
	uint64_t n, bytes;
	if (strata_checked_mul(rows, cols, &n, what, err) ||
	    strata_checked_mul(n, sizeof(float), &bytes, what, err))
		return NULL;
	if (bytes > SIZE_MAX) {
		strata_fail(err, STRATA_E_OVERFLOW, "lower --context",
			    "%s: %llu bytes do not fit in memory", what,
			    (unsigned long long)bytes);
		return NULL;
	}
	return strata_alloc_or_error((size_t)bytes, what, err);
}

/* The buffers of f for hp, context and batch (f's fields must be set); the
 * device ones too when `device`. Returns the count. */
static size_t buffer_list(strata_forward *f, bool device, buf_spec *out)
{
	const strata_infer_hparams *hp = f->hp;
	/* (sequences x layers x context) cannot overflow: each is 32 bits */
	uint64_t cache_rows = (uint64_t)f->sequences * hp->layers * f->context;
	size_t n = 0;
#define BUF(field, r, c, w) out[n++] = (buf_spec){&f->field, (r), (c), (w)}
	BUF(x, f->rows, hp->dim, "residual stream");
	BUF(xb, f->rows, hp->dim, "normed activations");
	BUF(q, f->rows, f->q_dim, "queries");
	BUF(att, f->rows, f->q_dim, "attention output");
	BUF(hb, f->rows, hp->ffn, "MLP gate");
	BUF(hb2, f->rows, hp->ffn, "MLP up");
	BUF(k_cache, cache_rows, f->kv_dim, "key cache");
	BUF(v_cache, cache_rows, f->kv_dim, "value cache");
	BUF(inv_freq, hp->head_dim / 2 + (device ? 1 : 0), 1,
	    "rope frequencies");
	if (f->sequences > 1) {
		BUF(k_new, f->sequences, f->kv_dim, "step keys");
		BUF(v_new, f->sequences, f->kv_dim, "step values");
	}
	if (device) {
		uint64_t mlp = (uint64_t)f->rows * hp->ffn;
		uint64_t bias = (uint64_t)f->q_dim + 2ull * f->kv_dim;
		if (bias < hp->head_dim / 2)
			bias = hp->head_dim / 2;
		BUF(logit_row, f->sequences, hp->vocab, "logits rows");
		if (mlp < hp->dim)
			BUF(own_norm, 1, hp->dim, "norm weights (f32)");
		if (mlp < bias)
			BUF(own_bias, 1, bias, "biases (f32)");
	}
#undef BUF
	return n;
}

/* Bytes of every device buffer, each rounded up to the arena's alignment. */
static strata_status device_total(strata_forward *f, uint64_t *out,
				  strata_error *err)
{
	buf_spec b[MAX_BUFFERS];
	size_t n = buffer_list(f, true, b);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t cells, bytes;
		strata_status st;
		if ((st = strata_checked_mul(b[i].rows, b[i].cols, &cells,
					     b[i].what, err)) ||
		    (st = strata_checked_mul(cells, sizeof(float), &bytes,
					     b[i].what, err)) ||
		    (st = strata_arena_round(bytes, &bytes, b[i].what, err)) ||
		    (st = strata_checked_add(total, bytes, &total,
					     "forward pass device bytes", err)))
			return st;
	}
	*out = total;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

/* The shape fields of f, which the buffer list reads: prefill chunks of at
 * most `batch` (the context at most), `sequences` KV caches, and activation
 * rows for the larger of a chunk and one decode step of every sequence. */
static strata_status set_shape(strata_forward *f,
			       const strata_infer_hparams *hp,
			       uint32_t context, uint32_t batch,
			       uint32_t sequences, strata_error *err)
{
	if (!hp || !context || !batch || !sequences)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: NULL argument or zero "
				   "context/batch/sequences");
	if (sequences > STRATA_FORWARD_MAX_SEQUENCES)
		return strata_fail(err, STRATA_E_INVALID_ARG, "lower --batch",
				   "forward pass: %u sequences, at most %u",
				   sequences, STRATA_FORWARD_MAX_SEQUENCES);
	f->hp = hp;
	f->context = context;
	f->batch = batch > context ? context : batch;
	f->sequences = sequences;
	f->rows = f->batch > sequences ? f->batch : sequences;
	f->q_dim = hp->heads * hp->head_dim;
	f->kv_dim = hp->kv_heads * hp->head_dim;
	return STRATA_OK;
}

/* A forward pass with its fields set and no buffers yet. */
static strata_status start(const strata_infer_hparams *hp,
			   strata_compute *compute,
			   const strata_infer_source *src, uint32_t context,
			   uint32_t batch, uint32_t sequences,
			   strata_forward **out, strata_error *err)
{
	strata_forward shape = {0};
	strata_status st = set_shape(&shape, hp, context, batch, sequences,
				     err);
	if (st)
		return st;
	if (!compute || !src || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: NULL argument");
	strata_forward *f = strata_calloc_or_error(1, sizeof *f,
						   "forward pass", err);
	if (!f)
		return STRATA_E_NOMEM;
	*f = shape;
	f->c = compute;
	f->src = src;
	*out = f;
	return STRATA_OK;
}

/* Checks the GGUF rope divisors (host copy) and divides freq by them. */
static strata_status apply_divisors(const strata_infer_hparams *hp,
				    const float *div, float *freq,
				    strata_error *err)
{
	for (uint32_t i = 0; div && i < hp->head_dim / 2; i++) {
		if (!(div[i] > 0 && isfinite(div[i])))
			return strata_fail(err, STRATA_E_MODEL_CONFIG,
					   "fix or regenerate the GGUF file",
					   "rope_freqs.weight[%u] is %g, not a "
					   "positive divisor",
					   i, (double)div[i]);
		/* llama.cpp: theta = pos * base_freq / freq_factor. */
		freq[i] /= div[i];
	}
	return STRATA_OK;
}

strata_status strata_forward_create(const strata_infer_hparams *hp,
				    strata_compute *compute,
				    const strata_infer_source *src,
				    uint32_t context, uint32_t batch,
				    strata_forward **out, strata_error *err)
{
	return strata_forward_create_seqs(hp, compute, src, context, batch, 1,
					  out, err);
}

strata_status strata_forward_create_seqs(const strata_infer_hparams *hp,
					 strata_compute *compute,
					 const strata_infer_source *src,
					 uint32_t context, uint32_t batch,
					 uint32_t sequences,
					 strata_forward **out,
					 strata_error *err)
{
	strata_forward *f;
	strata_status st = start(hp, compute, src, context, batch, sequences,
				 &f, err);
	if (st)
		return st;
	buf_spec b[MAX_BUFFERS];
	size_t n = buffer_list(f, false, b);
	for (size_t i = 0; st == STRATA_OK && i < n; i++)
		if (!(*b[i].slot = buffer(b[i].rows, b[i].cols, b[i].what,
					  err)))
			st = err ? err->code : STRATA_E_NOMEM;
	if (st == STRATA_OK) {
		strata_infer_rope_freqs(hp, f->inv_freq);
		st = apply_divisors(hp, src->statics.rope_freqs, f->inv_freq,
				    err);
	}
	if (st) {
		strata_forward_destroy(f);
		return st;
	}
	*out = f;
	return STRATA_OK;
}

/* Device mode: 1.0f after the rotary frequencies, which are computed on
 * the host with the divisors read back from the device (converted first
 * when half). */
static strata_status device_constants(strata_forward *f, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	uint32_t half = hp->head_dim / 2;
	uint64_t bytes = (uint64_t)half * sizeof(float);
	float *host = strata_alloc_or_error(2 * bytes + sizeof(float),
					    "rope frequencies (host)", err);
	if (!host)
		return STRATA_E_NOMEM;
	float *div = s->rope_freqs ? host + half + 1 : NULL;
	const float *dev_div;
	f->one = f->inv_freq + half;
	host[half] = 1.0f;
	strata_status st = strata__forward_upload(f, f->one, host + half,
						  sizeof(float), err);
	if (st == STRATA_OK && div)
		st = strata__forward_as_f32(f, s->rope_freqs,
					    s->rope_freqs_elem, half,
					    f->bias_f32, &dev_div, err);
	if (st == STRATA_OK && div)
		st = strata__forward_download(f, div, dev_div, bytes, err);
	if (st == STRATA_OK)
		st = strata__forward_finish(f, err);
	if (st == STRATA_OK) {
		strata_infer_rope_freqs(hp, host);
		st = apply_divisors(hp, div, host, err);
	}
	if (st == STRATA_OK)
		st = strata__forward_upload(f, f->inv_freq, host, bytes, err);
	strata_free(host);
	return st;
}

strata_status strata_forward_create_device(const strata_infer_hparams *hp,
					   strata_backend *b,
					   strata_compute *compute,
					   const strata_infer_source *src,
					   uint32_t context, uint32_t batch,
					   strata_forward **out,
					   strata_error *err)
{
	return strata_forward_create_device_seqs(hp, b, compute, src, context,
						 batch, 1, out, err);
}

strata_status strata_forward_create_device_seqs(
	const strata_infer_hparams *hp, strata_backend *b,
	strata_compute *compute, const strata_infer_source *src,
	uint32_t context, uint32_t batch, uint32_t sequences,
	strata_forward **out, strata_error *err)
{
	strata_forward *f;
	if (!b)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: no backend for device mode");
	strata_status st = start(hp, compute, src, context, batch, sequences,
				 &f, err);
	if (st)
		return st;
	f->b = b;
	f->stream = strata_cuda_compute_stream(compute);
	uint64_t total;
	buf_spec bl[MAX_BUFFERS];
	size_t n = buffer_list(f, true, bl);
	st = device_total(f, &total, err);
	if (st == STRATA_OK)
		st = strata_arena_create(b, STRATA_ARENA_DEVICE, total,
					 "forward pass buffers", &f->arena,
					 err);
	for (size_t i = 0; st == STRATA_OK && i < n; i++) {
		void *p = NULL;
		st = strata_arena_alloc(f->arena, bl[i].rows * bl[i].cols *
							  sizeof(float),
					&p, err);
		*bl[i].slot = p;
	}
	f->norm_f32 = f->own_norm ? f->own_norm : f->hb2;
	f->bias_f32 = f->own_bias ? f->own_bias : f->hb;
	if (st == STRATA_OK)
		st = device_constants(f, err);
	if (st) {
		strata_forward_destroy(f);
		return st;
	}
	*out = f;
	return STRATA_OK;
}

strata_status strata_forward_device_bytes(const strata_infer_hparams *hp,
					  uint32_t context, uint32_t batch,
					  uint64_t *out, strata_error *err)
{
	return strata_forward_device_bytes_seqs(hp, context, batch, 1, out,
						err);
}

strata_status strata_forward_device_bytes_seqs(const strata_infer_hparams *hp,
					       uint32_t context, uint32_t batch,
					       uint32_t sequences,
					       uint64_t *out, strata_error *err)
{
	strata_forward f = {0};
	strata_status st = set_shape(&f, hp, context, batch, sequences, err);
	if (st)
		return st;
	if (!out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward device bytes: NULL argument");
	return device_total(&f, out, err);
}

void strata_forward_arena_stats(const strata_forward *f,
				strata_arena_stats *out)
{
	memset(out, 0, sizeof *out);
	if (f && f->arena)
		strata_arena_get_stats(f->arena, out);
}

void strata_forward_destroy(strata_forward *f)
{
	if (!f)
		return;
	if (f->arena) {
		/* device mode: every buffer is a block of the arena */
		strata_arena_destroy(f->arena);
		strata_free(f);
		return;
	}
	strata_free(f->x);
	strata_free(f->xb);
	strata_free(f->q);
	strata_free(f->att);
	strata_free(f->hb);
	strata_free(f->hb2);
	strata_free(f->k_new);
	strata_free(f->v_new);
	strata_free(f->k_cache);
	strata_free(f->v_cache);
	strata_free(f->inv_freq);
	strata_free(f);
}
