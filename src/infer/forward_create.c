/* forward_create.c - making and dropping a forward pass: its shape, its
 * buffers in one arena of the backend's device memory, the rotary
 * frequencies, and the byte counts the plan is checked against (layer:
 * infer). The passes themselves are forward.c's. */
#include <math.h>
#include <string.h>

#include "infer/forward_internal.h"

/* One buffer of the forward pass: rows x cols floats. */
typedef struct buf_spec {
	float **slot;
	uint64_t rows, cols;
	const char *what;
} buf_spec;

#define MAX_BUFFERS 20

/* ------------------------------------------------------------------------ */

/* The buffers of f for hp, context and batch (f's fields must be set,
 * logits_in_place included). Returns the count. */
static size_t buffer_list(strata_forward *f, buf_spec *out)
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
	/* the KV cache's two blocks: counted here, taken by the cache */
	out[n++] = (buf_spec){NULL, cache_rows, f->kv_dim, "key cache"};
	out[n++] = (buf_spec){NULL, cache_rows, f->kv_dim, "value cache"};
	BUF(inv_freq, hp->head_dim / 2, 1, "rope frequencies");
	if (hp->rope_local_theta > 0)
		BUF(inv_freq_local, hp->head_dim / 2, 1,
		    "sliding layers' rope frequencies");
	if (hp->experts) {
		BUF(moe_logits, f->rows, hp->experts, "router logits");
		BUF(moe_in, f->rows, hp->dim, "expert input rows");
		BUF(moe_out, f->rows, hp->dim, "expert output rows");
	}
	if (strata__forward_norm_floats(hp))
		BUF(norm_f32, 1, strata__forward_norm_floats(hp),
		    "norm weights (1 + w, f32)");
	if (f->sequences > 1) {
		BUF(k_new, f->sequences, f->kv_dim, "step keys");
		BUF(v_new, f->sequences, f->kv_dim, "step values");
	}
	uint64_t mlp = (uint64_t)f->rows * hp->ffn;
	uint64_t bias = (uint64_t)f->q_dim + 2ull * f->kv_dim;
	if (bias < hp->head_dim / 2)
		bias = hp->head_dim / 2;
	if (!f->logits_in_place)
		BUF(logit_row, f->sequences, hp->vocab, "logits rows");
	if (mlp < bias)
		BUF(own_bias, 1, bias, "biases (f32)");
#undef BUF
	return n;
}

/* Bytes of every device buffer, each rounded up to the arena's alignment. */
static strata_status device_total(strata_forward *f, uint64_t *out,
				  strata_error *err)
{
	buf_spec b[MAX_BUFFERS];
	size_t n = buffer_list(f, b);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t cells, bytes;
		strata_status st;
		if ((st = strata_checked_mul(b[i].rows, b[i].cols, &cells,
					     b[i].what, err)) ||
		    (st = strata_checked_mul(cells, sizeof(float), &bytes,
					     b[i].what, err)) ||
		    (st = strata_checked_align(bytes, &bytes, b[i].what, err)) ||
		    (st = strata_checked_add(total, bytes, &total,
					     "forward pass device bytes", err)))
			return st;
	}
	*out = total;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

/* The shape fields of f, which the buffer list reads: prefill chunks of at
 * most `batch` (the context at most), `sequences` KV caches, activation
 * rows for the larger of a chunk and one decode step of every sequence,
 * and whether logits land in place (the host addresses b's memory; a
 * backend of the pass's own, b NULL, is the CPU's). */
static strata_status set_shape(strata_forward *f,
			       const strata_forward_options *o,
			       strata_error *err)
{
	const strata_infer_hparams *hp = o ? o->hp : NULL;
	uint32_t sequences = o && o->sequences ? o->sequences : 1;
	if (!hp || !o->context || !o->batch)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: NULL argument or zero "
				   "context/batch");
	if (sequences > STRATA_FORWARD_MAX_SEQUENCES)
		return strata_fail(err, STRATA_E_INVALID_ARG, "lower --batch",
				   "forward pass: %u sequences, at most %u",
				   sequences, STRATA_FORWARD_MAX_SEQUENCES);
	strata_backend_caps caps = {.device_addressable = true};
	strata_status st = o->backend ? strata_backend_get_caps(o->backend,
								 &caps, err)
				      : STRATA_OK;
	if (st)
		return st;
	f->hp = hp;
	f->context = o->context;
	f->batch = o->batch > o->context ? o->context : o->batch;
	f->sequences = sequences;
	f->rows = f->batch > sequences ? f->batch : sequences;
	f->q_dim = hp->heads * hp->head_dim;
	f->kv_dim = hp->kv_heads * hp->head_dim;
	f->logits_in_place = caps.device_addressable;
	return STRATA_OK;
}

/* A forward pass with its fields set, its backend (given, or its own CPU
 * backend) and no buffers yet. */
static strata_status start(const strata_forward_options *o,
			   strata_forward **out, strata_error *err)
{
	strata_forward shape = {0};
	strata_status st = set_shape(&shape, o, err);
	if (st)
		return st;
	if (!o->compute || !o->src || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: NULL argument");
	strata_forward *f = strata_calloc_or_error(1, sizeof *f,
						   "forward pass", err);
	if (!f)
		return STRATA_E_NOMEM;
	*f = shape;
	f->c = o->compute;
	f->src = o->src;
	f->b = o->backend;
	if (!f->b) {
		st = strata_backend_cpu_create(NULL, &f->own_b, err);
		f->b = f->own_b;
	}
	if (st == STRATA_OK && f->b->ops->kernels != f->c->ops)
		st = strata_fail(err, STRATA_E_INVALID_ARG,
				 "make the compute context on the forward "
				 "pass's backend (strata_compute_create_on)",
				 "forward pass: %s kernels over a backend "
				 "whose kernels are another's",
				 f->c->ops->name);
	if (st) {
		strata_forward_destroy(f);
		return st;
	}
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

/* The rotary frequencies, computed on the host with the divisors read back
 * from the backend (converted to f32 there first when of another type),
 * then copied to inv_freq. */
static strata_status rope_frequencies(strata_forward *f, strata_error *err)
{
	const strata_infer_hparams *hp = f->hp;
	const strata_infer_statics *s = &f->src->statics;
	uint32_t half = hp->head_dim / 2;
	uint64_t bytes = (uint64_t)half * sizeof(float);
	float *host = strata_alloc_or_error(2 * bytes, "rope frequencies (host)",
					    err);
	if (!host)
		return STRATA_E_NOMEM;
	float *div = s->rope_freqs ? host + half : NULL;
	const strata_weight divisors = strata__forward_static(
		s->rope_freqs, s->rope_freqs_elem, 1, half);
	const float *dev_div;
	strata_status st = STRATA_OK;
	if (div)
		st = strata_kernel_as_f32(f->c, &divisors, f->bias_f32, &dev_div,
					  err);
	if (st == STRATA_OK && div)
		st = strata_compute_download(f->c, div, dev_div, bytes, err);
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	if (st == STRATA_OK) {
		strata_infer_rope_freqs_for(hp, f->context, host);
		st = apply_divisors(hp, div, host, err);
	}
	if (st == STRATA_OK)
		st = strata_compute_upload(f->c, f->inv_freq, host, bytes, err);
	/* the upload reads host until the queue has run it: finish first */
	if (st == STRATA_OK && f->inv_freq_local)
		st = strata_compute_finish(f->c, err);
	if (st == STRATA_OK && f->inv_freq_local &&
	    strata_infer_rope_local_freqs(hp, host))
		st = strata_compute_upload(f->c, f->inv_freq_local, host, bytes,
					   err);
	/* the upload reads host until the context's queue has run it */
	if (st == STRATA_OK)
		st = strata_compute_finish(f->c, err);
	strata_free(host);
	return st;
}

/* The routing's host arrays (one block): logits read back, then the
 * chosen rows and weights. */
static strata_status moe_host_buffers(strata_forward *f, strata_error *err)
{
	uint64_t bytes = strata__forward_moe_host_bytes(f->hp, f->rows);
	if (!bytes)
		return STRATA_OK;
	char *p = strata_alloc_or_error(bytes, "expert routing (host)", err);
	if (!p)
		return STRATA_E_NOMEM;
	uint64_t choices = (uint64_t)f->rows * f->hp->experts_used;
	f->moe_host = (float *)p;
	f->moe_rows = (int32_t *)(p + (uint64_t)f->rows * f->hp->experts *
					      sizeof(float));
	f->moe_weights = (float *)(f->moe_rows + choices);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata_forward_create(const strata_forward_options *o,
				    strata_forward **out, strata_error *err)
{
	strata_forward *f = NULL;
	strata_status st = start(o, &f, err);
	if (st)
		return st;
	uint64_t total;
	buf_spec bl[MAX_BUFFERS];
	size_t n = buffer_list(f, bl);
	st = device_total(f, &total, err);
	if (st == STRATA_OK)
		st = strata_arena_create(f->b, STRATA_ARENA_DEVICE, total,
					 "forward pass buffers", &f->arena,
					 err);
	for (size_t i = 0; st == STRATA_OK && i < n; i++) {
		void *p = NULL;
		if (!bl[i].slot)
			continue;
		st = strata_arena_alloc(f->arena, bl[i].rows * bl[i].cols *
							  sizeof(float),
					&p, err);
		*bl[i].slot = p;
	}
	const strata_kv_cache_shape kvs = {f->hp->layers, f->kv_dim,
					   f->context, f->sequences};
	if (st == STRATA_OK)
		st = strata_kv_cache_create(&kvs, f->arena, f->c, &f->kv, err);
	f->bias_f32 = f->own_bias ? f->own_bias : f->hb;
	if (st == STRATA_OK)
		st = moe_host_buffers(f, err);
	if (st == STRATA_OK)
		st = rope_frequencies(f, err);
	if (st) {
		strata_forward_destroy(f);
		return st;
	}
	*out = f;
	return STRATA_OK;
}

strata_status strata_forward_device_bytes(const strata_forward_options *o,
					  uint64_t *out, strata_error *err)
{
	strata_forward f = {0};
	strata_status st = set_shape(&f, o, err);
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
	/* every buffer is a block of the arena */
	strata_kv_cache_destroy(f->kv);
	strata_free(f->moe_host);
	strata_arena_destroy(f->arena);
	strata_backend_destroy(f->own_b);
	strata_free(f);
}
