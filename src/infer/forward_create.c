/* forward_create.c - making and dropping a forward pass: its shape, its
 * buffers in one arena of the backend's device memory, the rotary
 * frequencies, and the byte counts the plan is checked against (layer:
 * infer). The passes themselves are forward.c's. */
#include <math.h>
#include <string.h>

#include "infer/forward_internal.h"

/* `count` buffers of the forward pass, each rows x cols elements of
 * `elem` bytes (f32, or the KV cache's type). */
typedef struct buf_spec {
	float **slot; /* NULL: counted here, taken by the KV cache */
	uint64_t rows, cols, count;
	const char *what;
	uint32_t elem;
} buf_spec;

#define MAX_BUFFERS 24

/* ------------------------------------------------------------------------ */

/* Layers of the decode split on site s (their KV cache lives there). */
static uint64_t kv_layers_of(const strata_forward *f, uint32_t s)
{
	uint64_t n = 0;
	for (uint32_t l = 0; l < f->hp->layers; l++)
		n += f->layer_site[0][l] == s;
	return n;
}

/* The buffers of site s for hp, context and batch (f's shape and sites
 * must be set). Returns the count. */
static size_t buffer_list(strata_forward *f, uint32_t s, buf_spec *out)
{
	const strata_infer_hparams *hp = f->hp;
	strata_forward_site_state *st = &f->site[s];
	/* (sequences x layers x context) cannot overflow: each is 32 bits */
	uint64_t layer_rows = (uint64_t)f->sequences * f->context;
	size_t n = 0;
	uint32_t kv_elem = strata_kv_type_bytes(f->kv_type);
#define BUF_OF(field, r, c, w, e)                                              \
	out[n++] = (buf_spec){&st->field, (r), (c), 1, (w), (e)}
#define BUF(field, r, c, w) BUF_OF(field, r, c, w, sizeof(float))
	BUF(x, f->rows, hp->dim, "residual stream");
	BUF(xb, f->rows, hp->dim, "normed activations");
	BUF(q, f->rows, f->q_dim, "queries");
	BUF(att, f->rows, f->q_dim, "attention output");
	BUF(hb, f->rows, hp->ffn, "MLP gate");
	BUF(hb2, f->rows, hp->ffn, "MLP up");
	/* the KV cache's blocks: counted here, taken by the cache; one pair
	 * for every layer, or with sites a pair per layer of this site */
	uint64_t kv_rows = f->placed ? layer_rows : layer_rows * hp->layers;
	uint64_t kv_count = f->placed ? kv_layers_of(f, s) : 1;
	if (kv_count) {
		out[n++] = (buf_spec){NULL, kv_rows, f->kv_dim, kv_count,
				      "key cache", kv_elem};
		out[n++] = (buf_spec){NULL, kv_rows, f->kv_dim, kv_count,
				      "value cache", kv_elem};
	}
	if (st->stages) {
		BUF_OF(k_stage, layer_rows, f->kv_dim, "staged keys", kv_elem);
		BUF_OF(v_stage, layer_rows, f->kv_dim, "staged values", kv_elem);
	}
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
	if (f->sequences > 1 || f->kv_type != STRATA_WEIGHT_F32) {
		/* a mixed step's rows: a prompt chunk beside decodes; with an
		 * f16/bf16 cache, the new rows before they are stored (the
		 * plan's "key" and "value" buffers) */
		BUF(k_new, f->rows, f->kv_dim, "step keys");
		BUF(v_new, f->rows, f->kv_dim, "step values");
	}
	uint64_t mlp = (uint64_t)f->rows * hp->ffn;
	uint64_t bias = (uint64_t)f->q_dim + 2ull * f->kv_dim;
	if (bias < hp->head_dim / 2)
		bias = hp->head_dim / 2;
	if (s == f->head_site && !st->addressable)
		BUF(logit_row, f->sequences, hp->vocab, "logits rows");
	if (mlp < bias)
		BUF(own_bias, 1, bias, "biases (f32)");
#undef BUF
#undef BUF_OF
	return n;
}

/* Bytes of site s's buffers, each rounded up to the arena's alignment. */
static strata_status device_total(strata_forward *f, uint32_t s,
				  uint64_t *out, strata_error *err)
{
	buf_spec b[MAX_BUFFERS];
	size_t n = buffer_list(f, s, b);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t cells, bytes;
		strata_status st;
		if ((st = strata_checked_mul(b[i].rows, b[i].cols, &cells,
					     b[i].what, err)) ||
		    (st = strata_checked_mul(cells, b[i].elem, &bytes,
					     b[i].what, err)) ||
		    (st = strata_checked_align(bytes, &bytes, b[i].what, err)) ||
		    (st = strata_checked_mul(bytes, b[i].count, &bytes,
					     b[i].what, err)) ||
		    (st = strata_checked_add(total, bytes, &total,
					     "forward pass device bytes", err)))
			return st;
	}
	*out = total;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

static strata_status bad_sites(strata_error *err, const char *what)
{
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller",
			   "forward pass sites: %s", what);
}

/* The sites of o: each one's backend, compute context (NULL before
 * create: device_bytes reads none), kind and whether host code addresses
 * its memory; the layers' sites (borrowed); which sites run something and
 * which stage a layer's KV cache. One site, o's backend (NULL: the CPU's,
 * made at create), without a placement. */
static strata_status set_sites(strata_forward *f,
			       const strata_forward_options *o,
			       strata_error *err)
{
	uint32_t n = o->site_count ? o->site_count : 1;
	if (n > STRATA_FORWARD_MAX_SITES ||
	    (o->site_count && (!o->sites || !o->decode_site ||
			       o->head_site >= n)))
		return bad_sites(err, "too many, or no list of them");
	f->site_count = n;
	f->placed = o->site_count > 0;
	f->head_site = o->site_count ? o->head_site : 0;
	f->prefill_from = o->site_count ? o->prefill_from : 0;
	f->tel = o->telemetry;
	f->experts = o->experts;
	for (uint32_t s = 0; s < n; s++) {
		strata_forward_site_state *st = &f->site[s];
		st->b = o->site_count ? o->sites[s].backend : o->backend;
		st->c = o->site_count ? o->sites[s].compute : o->compute;
		st->device = o->site_count ? o->sites[s].device : true;
		strata_backend_caps caps = {.device_addressable = true};
		if (o->site_count && (!st->b || !st->c))
			return bad_sites(err, "a site without backend or compute");
		strata_status e = st->b ? strata_backend_get_caps(st->b, &caps,
								  err)
					: STRATA_OK;
		if (e)
			return e;
		st->addressable = caps.device_addressable;
	}
	/* one site: no lists, every layer on site 0 */
	f->layer_site[0] = (uint8_t *)(o->site_count ? o->decode_site : NULL);
	f->layer_site[1] = (uint8_t *)(o->site_count && o->prefill_site
					       ? o->prefill_site
					       : f->layer_site[0]);
	f->site[f->head_site].used = true;
	for (uint32_t l = 0; f->placed && l < f->hp->layers; l++) {
		uint32_t d = f->layer_site[0][l], p = f->layer_site[1][l];
		if (d >= n || p >= n)
			return bad_sites(err, "a layer's site is past the last");
		f->site[d].used = f->site[p].used = true;
		f->site[p].stages |= p != d && f->prefill_from;
	}
	if (!f->placed)
		f->site[0].used = true;
	return STRATA_OK;
}

/* The shape fields of f, which the buffer list reads: prefill chunks of at
 * most `batch` (the context at most), `sequences` KV caches, activation
 * rows for the larger of a chunk and one decode step of every sequence,
 * and the sites (whether logits land in place: the host addresses the
 * head site's memory; a backend of the pass's own, b NULL, is the CPU's). */
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
	f->hp = hp;
	f->context = o->context;
	/* a step of several sequences may take prompt chunks of each */
	uint64_t most = (uint64_t)o->context * sequences;
	f->batch = o->batch > most ? (uint32_t)most : o->batch;
	f->sequences = sequences;
	f->rows = f->batch > sequences ? f->batch : sequences;
	f->q_dim = hp->heads * hp->head_dim;
	f->kv_dim = hp->kv_heads * hp->head_dim;
	if (!strata_kv_type_bytes(o->kv_type))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "use --kv-type f32, f16 or bf16",
				   "forward pass: no KV cache holds %s elements",
				   strata_weight_type_name(o->kv_type));
	f->kv_type = o->kv_type;
	return set_sites(f, o, err);
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
	if ((!o->site_count && !o->compute) || !o->src || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "forward pass: NULL argument");
	strata_forward *f = strata_calloc_or_error(1, sizeof *f,
						   "forward pass", err);
	if (!f)
		return STRATA_E_NOMEM;
	*f = shape;
	f->src = o->src;
	if (!f->site[0].b) {
		st = strata_backend_cpu_create(NULL, &f->own_b, err);
		f->site[0].b = f->own_b;
	}
	for (uint32_t s = 0; st == STRATA_OK && s < f->site_count; s++)
		if (f->site[s].b->ops->kernels != f->site[s].c->ops)
			st = strata_fail(err, STRATA_E_INVALID_ARG,
					 "make the compute context on the forward "
					 "pass's backend (strata_compute_create_on)",
					 "forward pass: %s kernels over a backend "
					 "whose kernels are another's",
					 f->site[s].c->ops->name);
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

/* Copies host's frequencies to site i's inv_freq (local: its
 * inv_freq_local), waiting for the copy: host is rewritten next. */
static strata_status upload_freqs(strata_forward *f, uint32_t i, int local,
				  const float *host, uint64_t bytes,
				  strata_error *err)
{
	strata_forward_site_state *site = &f->site[i];
	if (!site->used)
		return STRATA_OK;
	strata_status st = strata_compute_upload(
		site->c, local ? site->inv_freq_local : site->inv_freq, host,
		bytes, err);
	return st ? st : strata_compute_finish(site->c, err);
}

/* The rotary frequencies, computed on the host with the divisors read back
 * from the head site, where the statics are (converted to f32 there first
 * when of another type), then copied to every site's inv_freq. */
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
	for (uint32_t i = 0; st == STRATA_OK && i < f->site_count; i++)
		st = upload_freqs(f, i, 0, host, bytes, err);
	/* host now holds the sliding layers' frequencies, where they differ */
	if (st == STRATA_OK && f->site[f->head_site].inv_freq_local &&
	    strata_infer_rope_local_freqs(hp, host))
		for (uint32_t i = 0; st == STRATA_OK && i < f->site_count; i++)
			st = upload_freqs(f, i, 1, host, bytes, err);
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

/* E_RES_BUDGET unless site s's `total` bytes are the plan's figure for
 * the site (none given: not checked). */
static strata_status check_planned(const strata_forward *f, uint32_t s,
				   uint64_t total,
				   const strata_plan_memory *planned,
				   strata_error *err)
{
	const strata_forward_site_state *st = &f->site[s];
	if (!planned)
		return STRATA_OK;
	uint64_t want = strata_plan_site_bytes(
		planned, f->placed ? kv_layers_of(f, s) : UINT64_MAX, st->stages,
		s == f->head_site && !st->addressable);
	if (want == total)
		return STRATA_OK;
	return strata_fail(err, STRATA_E_RES_BUDGET,
			   "this is a bug in strata (the plan's memory model "
			   "and the forward pass disagree); report it",
			   "the forward pass takes %llu bytes of buffers on "
			   "site %u, the plan counted %llu",
			   (unsigned long long)total, s,
			   (unsigned long long)want);
}

/* Site s's arena and buffers, checked against the plan's figure. */
static strata_status make_site(strata_forward *f, uint32_t s,
			       const strata_plan_memory *planned,
			       strata_error *err)
{
	strata_forward_site_state *site = &f->site[s];
	uint64_t total;
	buf_spec bl[MAX_BUFFERS];
	size_t n = buffer_list(f, s, bl);
	strata_status st = device_total(f, s, &total, err);
	if (st == STRATA_OK)
		st = check_planned(f, s, total, planned, err);
	if (st == STRATA_OK)
		st = strata_arena_create(site->b, STRATA_ARENA_DEVICE, total,
					 "forward pass buffers", &site->arena,
					 err);
	for (size_t i = 0; st == STRATA_OK && i < n; i++) {
		void *p = NULL;
		if (!bl[i].slot)
			continue;
		st = strata_arena_alloc(site->arena, bl[i].rows * bl[i].cols *
							     bl[i].elem,
					&p, err);
		*bl[i].slot = p;
	}
	site->bias_f32 = site->own_bias ? site->own_bias : site->hb;
	return st;
}

/* The KV cache: in site 0's arena, or each layer's on its decode site. */
static strata_status make_cache(strata_forward *f, strata_error *err)
{
	const strata_kv_cache_shape kvs = {f->hp->layers, f->kv_dim,
					   f->context, f->sequences,
					   f->kv_type};
	if (!f->placed)
		return strata_kv_cache_create(&kvs, f->site[0].arena,
					      f->site[0].c, &f->kv, err);
	uint32_t n = f->hp->layers;
	strata_arena **a = strata_calloc_or_error(n, sizeof *a, "KV sites", err);
	strata_compute **c = a ? strata_calloc_or_error(n, sizeof *c,
							"KV sites", err)
			       : NULL;
	strata_status st = c ? STRATA_OK : STRATA_E_NOMEM;
	for (uint32_t l = 0; c && l < n; l++) {
		a[l] = f->site[f->layer_site[0][l]].arena;
		c[l] = f->site[f->layer_site[0][l]].c;
	}
	if (st == STRATA_OK)
		st = strata__kv_cache_create_sites(&kvs, a, c, &f->kv, err);
	strata_free(a);
	strata_free(c);
	return st;
}

/* The host buffers: a mixed step's token ids; the residual stream where
 * two sites are both out of host code's reach (two GPUs): their copies go
 * through it. */
static strata_status make_host_buffers(strata_forward *f, strata_error *err)
{
	uint32_t far = 0;
	for (uint32_t s = 0; s < f->site_count; s++)
		far += f->site[s].used && !f->site[s].addressable;
	/* a mixed step's token ids, gathered from its segments */
	f->step_tokens = strata_alloc_or_error((uint64_t)f->rows *
						       sizeof *f->step_tokens,
					       "step token ids", err);
	if (!f->step_tokens)
		return STRATA_E_NOMEM;
	if (far < 2)
		return STRATA_OK;
	f->bounce = strata_alloc_or_error((uint64_t)f->rows * f->hp->dim *
						  sizeof(float),
					  "activation bounce buffer", err);
	return f->bounce ? STRATA_OK : STRATA_E_NOMEM;
}

strata_status strata_forward_create(const strata_forward_options *o,
				    strata_forward **out, strata_error *err)
{
	strata_forward *f = NULL;
	strata_status st = start(o, &f, err);
	if (st)
		return st;
	for (uint32_t s = 0; st == STRATA_OK && s < f->site_count; s++)
		if (f->site[s].used)
			st = make_site(f, s, o->planned, err);
	if (st == STRATA_OK)
		st = make_cache(f, err);
	if (st == STRATA_OK)
		st = make_host_buffers(f, err);
	f->arena = f->site[0].arena;
	if (st == STRATA_OK)
		st = strata__forward_move(f, f->head_site, 0, false, err);
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
	uint64_t total = 0;
	for (uint32_t s = 0; s < f.site_count; s++) {
		uint64_t b = 0;
		if (f.site[s].used && (st = device_total(&f, s, &b, err)))
			return st;
		total = strata_sat_add_u64(total, b);
	}
	*out = total;
	return STRATA_OK;
}

void strata_forward_arena_stats(const strata_forward *f,
				strata_arena_stats *out)
{
	memset(out, 0, sizeof *out);
	if (f && f->arena)
		strata_arena_get_stats(f->arena, out);
}

void strata_forward_site_arena_stats(const strata_forward *f, uint32_t s,
				     strata_arena_stats *out)
{
	memset(out, 0, sizeof *out);
	if (f && s < f->site_count && f->site[s].arena)
		strata_arena_get_stats(f->site[s].arena, out);
}

void strata_forward_destroy(strata_forward *f)
{
	if (!f)
		return;
	/* every buffer is a block of a site's arena */
	strata_kv_cache_destroy(f->kv);
	strata_free(f->moe_host);
	for (uint32_t s = 0; s < f->site_count; s++)
		strata_arena_destroy(f->site[s].arena);
	strata_backend_destroy(f->own_b);
	strata_free(f->bounce);
	strata_free(f->step_tokens);
	strata_free(f);
}
