/* experts.c - routed experts computed on the CPU from host memory, with a
 * device cache of the hot ones whose hits run on the device (llama.cpp's
 * --n-cpu-moe, KTransformers) (layer: infer).
 *
 * The experts of the plan's first `layers` MoE layers are read once into
 * host memory in the type the CPU computes them in (the residency engine
 * never holds them: window.c leaves them out). The forward pass's MoE
 * step (forward_moe.c) asks for each routed expert: a hit runs on the
 * device from its cache slot; a miss runs on this store's own CPU compute
 * context over the layer's normed rows read back from the device, its
 * weighted outputs summed on the host and added on the device once per
 * layer; a layer's misses go to the CPU's experts slot together (one job
 * of its pool for all of them, kernels_experts.c), not one expert's two
 * products at a time. After the layer, each missed expert may enter the cache: an
 * empty slot takes it; else the victim is the cached expert that has had
 * the fewest rows so far (ties: the least recently used), and the missed
 * one takes its slot only when it has had strictly more. Rows, not calls:
 * a prompt calls nearly every expert once, so counting calls left them
 * level and every miss of a prompt pushed out a cached expert (measured:
 * 187 admissions in 187 misses, prompts slower with the cache than
 * without); rows rank a prompt's experts by the share of the tokens they
 * took, and ties keep the one in. Every expert is ranked by its rows
 * before the current pass: a pass routes the layers in order, so counting
 * this pass's rows would favour the early layers' experts over the cached
 * experts of later layers not yet routed (a repeated prompt then pushed
 * those out just before their own hits).
 * Copies into a slot are queued on the device's compute context after
 * the kernels already queued there, so a slot a hit of this layer reads
 * is overwritten only after that hit ran. A missed expert a pass routes
 * stream_rows rows or more (a prompt's) is instead copied through a slot
 * of its own and computed on the device, as llama.cpp offloads a large
 * batch's products: the copy costs less than the CPU's rows.
 *
 * Sizes are the plan's (strata_plan_experts_size): the host copies are
 * exactly its host_bytes, the cache one device block of cache_bytes, the
 * scratch its scratch_bytes (strata_infer_experts_scratch_bytes).
 */
#include <inttypes.h>
#include <string.h>

#include "infer/forward_internal.h"

/* One (layer, kind): each expert's host weights and device slab sizes. */
typedef struct kind_data {
	void *host;	     /* stacked: every expert; else NULL */
	void **each;	     /* [experts] per-expert tensors' host copies */
	uint64_t host_per;   /* bytes of one expert here */
	uint64_t dev_bytes;  /* one expert on the device, unaligned */
	uint64_t dev_offset; /* in a slot */
	uint8_t host_elem, dev_elem;
	uint32_t rows, cols;
} kind_data;

struct strata_infer_experts {
	const strata_infer_hparams *hp;
	uint32_t layers, experts, slots;
	uint32_t stream_rows;	  /* 0: never; else slot `slots` streams */
	kind_data *kind;	  /* [layers][3] */
	/* the device whose pinned memory holds the host copies when
	 * experts are copied to it (a cache or the stream slot): pageable
	 * copies ran at a third of the link and held the host thread */
	strata_backend *pin_b;
	strata_backend *cpu_b;
	strata_compute *cpu_c;
	strata_compute *dev_c;	  /* the cache's context; NULL: no cache */
	strata_arena *arena;	  /* the cache's block */
	unsigned char *cache;	  /* slots x slot_bytes */
	uint64_t slot_bytes;
	int32_t *where;		  /* [layers][experts]: slot or -1 */
	uint64_t *routed;	  /* [layers][experts]: calls */
	uint64_t *routed_rows;	  /* [layers][experts]: rows of those calls */
	uint64_t *rows_before;	  /* [layers][experts]: rows before `pass` */
	uint64_t *seen;		  /* [layers][experts]: last pass routed */
	uint64_t pass, last_key;  /* passes routed; the last call's key */
	uint32_t *slot_key;	  /* [slots]: layer * experts + expert */
	uint64_t *slot_used;	  /* [slots]: tick of the last hit; 0 empty */
	uint64_t tick;
	/* host scratch, `rows` rows each: the layer's normed input, one
	 * expert's gathered rows, its gate/up, its output, the sum */
	float *in, *gather, *hb, *hb2, *out, *acc;
	uint32_t rows;
	strata_infer_experts_stats stats;
};

/* ------------------------------------------------------------------------ */

uint64_t strata_infer_experts_scratch_bytes(const strata_infer_hparams *hp,
					    uint32_t rows)
{
	return (uint64_t)rows * (4ull * hp->dim + 2ull * hp->moe_ffn) *
	       sizeof(float);
}

/* The kind's host copy of tensor t: read as stored when the CPU takes its
 * type, else read and converted to f32 (elem F32). */
static void host_free(const strata_infer_experts *x, void *p)
{
	if (x->pin_b)
		strata_backend_host_free(x->pin_b, p);
	else
		strata_free(p);
}

static strata_status load_host(const strata_infer_experts *x,
			       strata_weight_store *ws, const strata_tensor *t,
			       void **out, uint8_t *elem, strata_error *err)
{
	strata_plan_exec e;
	strata_status st = strata_plan_tensor_exec(t, STRATA_PLAN_DEVICE_CPU, &e,
						   err);
	if (st)
		return st;
	void *dst = NULL;
	if (x->pin_b) {
		if (strata_backend_host_alloc(x->pin_b, e.bytes, true, &dst, err))
			return strata_error_prefix(err, "expert weights (host)");
	} else {
		dst = strata_alloc_or_error(e.bytes, "expert weights (host)", err);
	}
	void *raw = e.convert ? strata_alloc_or_error(t->bytes,
						      "expert read buffer", err)
			      : dst;
	if (!dst || !raw) {
		host_free(x, dst);
		return STRATA_E_NOMEM;
	}
	void *const dsts[1] = {raw};
	st = strata_weight_store_read(ws, &t, dsts, 1, err);
	if (st == STRATA_OK && e.convert)
		st = strata_dtype_to_f32(t->dtype, raw, t->elements, dst, err);
	if (e.convert)
		strata_free(raw);
	if (st) {
		host_free(x, dst);
		return strata_error_prefix(err, "tensor '%s'", t->name);
	}
	*elem = STRATA_ELEM_F32;
	if (!e.convert)
		(void)strata_infer_elem_of(t->dtype, elem);
	*out = dst;
	return STRATA_OK;
}

/* One (layer, kind): host copies and the device form of one expert. */
static strata_status load_kind(strata_infer_experts *x,
			       const strata_infer_experts_options *o,
			       uint32_t l, uint32_t k, uint64_t *offset,
			       strata_error *err)
{
	const strata_infer_tensors *t = o->tensors;
	kind_data *d = &x->kind[(uint64_t)l * 3 + k];
	const strata_tensor *first = strata_infer_expert_tensor(t, l, k, 0);
	bool stacked = t->experts_stacked;
	uint32_t per = stacked ? x->experts : 1;
	d->rows = k == STRATA_EXPERT_DOWN ? o->hp->dim : o->hp->moe_ffn;
	d->cols = k == STRATA_EXPERT_DOWN ? o->hp->moe_ffn : o->hp->dim;
	strata_plan_exec h, v;
	strata_status st;
	if ((st = strata_plan_tensor_exec(first, STRATA_PLAN_DEVICE_CPU, &h,
					  err)) ||
	    (st = strata_plan_tensor_exec(first, o->device_kind, &v, err)))
		return st;
	if (h.convert != v.convert && (x->slots || x->stream_rows))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "use --expert-cache 0 for this model's type",
				   "tensor '%s': the device and the CPU compute "
				   "its type in different forms; the expert "
				   "cache holds one", first->name);
	d->host_per = h.bytes / per;
	d->dev_bytes = v.bytes / per;
	d->dev_offset = *offset;
	uint64_t a;
	if ((st = strata_checked_align(d->dev_bytes, &a, "expert slot", err)))
		return st;
	*offset += a;
	if (stacked) {
		st = load_host(x, o->ws, first, &d->host, &d->host_elem, err);
	} else {
		d->each = strata_calloc_or_error(x->experts, sizeof *d->each,
						 "expert pointers", err);
		if (!d->each)
			return STRATA_E_NOMEM;
		for (uint32_t e = 0; e < x->experts && st == STRATA_OK; e++)
			st = load_host(x, o->ws,
				       strata_infer_expert_tensor(t, l, k, e),
				       &d->each[e], &d->host_elem, err);
	}
	d->dev_elem = d->host_elem; /* one form (above) */
	return st;
}

static const void *host_of(const kind_data *d, uint32_t e)
{
	return d->host ? (const char *)d->host + d->host_per * e : d->each[e];
}

static strata_status make_cache(strata_infer_experts *x,
				const strata_infer_experts_options *o,
				strata_error *err)
{
	uint64_t n = (uint64_t)x->layers * x->experts;
	x->where = strata_alloc_or_error(n * sizeof *x->where, "expert slots",
					 err);
	x->routed = strata_calloc_or_error(n, sizeof *x->routed,
					   "expert routing counts", err);
	x->routed_rows = strata_calloc_or_error(3 * n, sizeof *x->routed_rows,
						"expert routing counts", err);
	if (!x->where || !x->routed || !x->routed_rows)
		return STRATA_E_NOMEM;
	for (uint64_t i = 0; i < n; i++)
		x->where[i] = -1;
	x->rows_before = x->routed_rows + n;
	x->seen = x->routed_rows + 2 * n;
	x->last_key = UINT64_MAX; /* the first call starts pass 1 */
	uint32_t blocks = x->slots + (x->stream_rows ? 1u : 0u);
	if (!blocks)
		return STRATA_OK;
	x->slot_key = strata_calloc_or_error(blocks, sizeof *x->slot_key,
					     "expert cache", err);
	x->slot_used = strata_calloc_or_error(blocks, sizeof *x->slot_used,
					      "expert cache", err);
	if (!x->slot_key || !x->slot_used)
		return STRATA_E_NOMEM;
	uint64_t bytes;
	strata_status st = strata_checked_mul(blocks, x->slot_bytes, &bytes,
					      "expert cache bytes", err);
	if (st == STRATA_OK)
		st = strata_arena_create(o->device, STRATA_ARENA_DEVICE, bytes,
					 "expert cache", &x->arena, err);
	if (st == STRATA_OK)
		st = strata_arena_alloc(x->arena, bytes, (void **)&x->cache,
					err);
	x->dev_c = o->device_compute;
	return st;
}

static strata_status make_scratch(strata_infer_experts *x, strata_error *err)
{
	const strata_infer_hparams *hp = x->hp;
	uint64_t bytes = strata_infer_experts_scratch_bytes(hp, x->rows);
	float *p = strata_alloc_or_error(bytes, "expert scratch (host)", err);
	if (!p)
		return STRATA_E_NOMEM;
	uint64_t r = x->rows, dim = hp->dim, ffn = hp->moe_ffn;
	x->in = p;
	x->gather = x->in + r * dim;
	x->out = x->gather + r * dim;
	x->acc = x->out + r * dim;
	x->hb = x->acc + r * dim;
	x->hb2 = x->hb + r * ffn;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata_infer_experts_create(const strata_infer_experts_options *o,
					  strata_infer_experts **out,
					  strata_error *err)
{
	*out = NULL;
	const strata_infer_hparams *hp = o->hp;
	if (!hp->experts || !o->layers || o->layers > hp->layers || !o->rows ||
	    ((o->cache_slots || o->stream_rows) &&
	     (!o->device || !o->device_compute)))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give an expert model, 1 to its layer count "
				   "and a device for a cache",
				   "experts on the CPU: %u layers of %u (%u "
				   "experts), %u cache slots",
				   o->layers, hp->layers, hp->experts,
				   o->cache_slots);
	strata_infer_experts *x = strata_calloc_or_error(1, sizeof *x,
							 "expert store", err);
	if (!x)
		return STRATA_E_NOMEM;
	x->hp = hp;
	x->layers = o->layers;
	x->experts = hp->experts;
	x->slots = o->cache_slots;
	x->stream_rows = o->stream_rows;
	x->pin_b = o->cache_slots || o->stream_rows ? o->device : NULL;
	x->rows = o->rows;
	strata_status st = STRATA_OK;
	x->kind = strata_calloc_or_error((uint64_t)x->layers * 3,
					 sizeof *x->kind, "expert table", err);
	if (!x->kind)
		st = STRATA_E_NOMEM;
	for (uint32_t l = 0; st == STRATA_OK && l < x->layers; l++) {
		uint64_t off = 0;
		for (uint32_t k = 0; st == STRATA_OK && k < 3; k++)
			st = load_kind(x, o, l, k, &off, err);
		x->slot_bytes = off > x->slot_bytes ? off : x->slot_bytes;
	}
	if (st == STRATA_OK)
		st = make_cache(x, o, err);
	if (st == STRATA_OK)
		st = make_scratch(x, err);
	if (st == STRATA_OK)
		st = strata_backend_cpu_create(NULL, &x->cpu_b, err);
	if (st == STRATA_OK)
		st = strata_compute_create_on_with(
			x->cpu_b,
			&(strata_compute_options){.threads = o->threads,
						  .precision = o->precision},
			&x->cpu_c, NULL, err);
	if (st) {
		strata_infer_experts_destroy(x);
		return st;
	}
	*out = x;
	return STRATA_OK;
}

void strata_infer_experts_destroy(strata_infer_experts *x)
{
	if (!x)
		return;
	for (uint64_t i = 0; x->kind && i < (uint64_t)x->layers * 3; i++) {
		host_free(x, x->kind[i].host);
		for (uint32_t e = 0; x->kind[i].each && e < x->experts; e++)
			host_free(x, x->kind[i].each[e]);
		strata_free(x->kind[i].each);
	}
	strata_free(x->kind);
	strata_compute_destroy(x->cpu_c);
	strata_backend_destroy(x->cpu_b);
	strata_arena_destroy(x->arena);
	strata_free(x->where);
	strata_free(x->routed);
	strata_free(x->routed_rows);
	strata_free(x->slot_key);
	strata_free(x->slot_used);
	strata_free(x->in);
	strata_free(x);
}

void strata_infer_experts_get_stats(const strata_infer_experts *x,
				    strata_infer_experts_stats *out)
{
	*out = x->stats;
	out->cache_slots = x->slots;
	out->layers = x->layers;
}

uint64_t strata_infer_experts_routed(const strata_infer_experts *x,
				     uint32_t layer, uint32_t expert)
{
	if (layer >= x->layers || expert >= x->experts)
		return 0;
	return x->routed[(uint64_t)layer * x->experts + expert];
}

/* ------------------------------------------------------------------------ */
/* What the forward pass's MoE step asks                                    */
/* ------------------------------------------------------------------------ */

bool strata__experts_apart(const strata_infer_experts *x, uint32_t layer)
{
	return x && layer < x->layers;
}

float *strata__experts_input(strata_infer_experts *x)
{
	return x->in;
}

static uint64_t expert_bytes(const strata_infer_experts *x, uint32_t layer,
			     bool device)
{
	const kind_data *d = &x->kind[(uint64_t)layer * 3];
	uint64_t b = 0;
	for (int k = 0; k < 3; k++)
		b += device ? d[k].dev_bytes : d[k].host_per;
	return b;
}

/* The device weights of layer's expert in slot s. */
static void slot_weights(const strata_infer_experts *x, uint32_t layer,
			 uint32_t s, strata_weight w[3])
{
	const kind_data *d = &x->kind[(uint64_t)layer * 3];
	const unsigned char *base = x->cache + (uint64_t)s * x->slot_bytes;
	for (int k = 0; k < 3; k++)
		w[k] = (strata_weight){(strata_weight_type)d[k].dev_elem,
				       base + d[k].dev_offset, d[k].rows,
				       d[k].cols};
}

/* Copies expert e of layer into slot s of the device cache (queued on
 * the device's context, after what is queued there). */
static strata_status upload(strata_infer_experts *x, uint32_t layer,
			    uint32_t e, uint32_t s, strata_error *err)
{
	const kind_data *d = &x->kind[(uint64_t)layer * 3];
	unsigned char *base = x->cache + (uint64_t)s * x->slot_bytes;
	strata_status st = STRATA_OK;
	for (int k = 0; k < 3 && st == STRATA_OK; k++) {
		/* host and device hold one form (load_kind) */
		st = strata_compute_upload(x->dev_c, base + d[k].dev_offset,
					   host_of(&d[k], e), d[k].dev_bytes,
					   err);
		x->stats.upload_bytes += d[k].dev_bytes;
	}
	if (st)
		return strata_error_prefix(err, "expert %u of layer %u to the "
					   "device", e, layer);
	return STRATA_OK;
}

strata_expert_route strata__experts_route(strata_infer_experts *x,
					  uint32_t layer, uint32_t e,
					  uint32_t m, const strata_compute *c,
					  strata_weight w[3], strata_error *err,
					  strata_status *st)
{
	uint64_t key = (uint64_t)layer * x->experts + e;
	*st = STRATA_OK;
	/* a pass routes each key once, in increasing order */
	if (key <= x->last_key)
		x->pass++;
	x->last_key = key;
	if (x->seen[key] != x->pass) {
		x->seen[key] = x->pass;
		x->rows_before[key] = x->routed_rows[key];
	}
	x->routed[key]++;
	x->routed_rows[key] += m;
	x->stats.routed++;
	int32_t s = x->where[key];
	bool here = c == x->dev_c;
	if (here && s < 0 && x->stream_rows && m >= x->stream_rows) {
		/* a prompt's expert: through the stream slot, on the device
		 * (the slot's last reader was queued before this copy) */
		*st = upload(x, layer, e, x->slots, err);
		slot_weights(x, layer, x->slots, w);
		x->stats.streamed++;
		x->stats.device_bytes += expert_bytes(x, layer, true);
		return STRATA_EXPERT_STREAMED;
	}
	if (s < 0 || !here) {
		x->stats.misses++;
		x->stats.cpu_bytes += expert_bytes(x, layer, false);
		return STRATA_EXPERT_MISS;
	}
	x->slot_used[s] = ++x->tick;
	slot_weights(x, layer, (uint32_t)s, w);
	x->stats.hits++;
	x->stats.device_bytes += expert_bytes(x, layer, true);
	return STRATA_EXPERT_HIT;
}

void strata__experts_begin(strata_infer_experts *x, uint32_t n)
{
	memset(x->acc, 0, (uint64_t)n * x->hp->dim * sizeof *x->acc);
}

float *strata__experts_sum(strata_infer_experts *x)
{
	return x->acc;
}

strata_status strata__experts_cpu(strata_infer_experts *x, uint32_t layer,
				  uint32_t e, uint32_t n, const int32_t *rows,
				  const float *weight, uint32_t m,
				  strata_error *err)
{
	const strata_infer_hparams *hp = x->hp;
	const kind_data *d = &x->kind[(uint64_t)layer * 3];
	strata_weight w[3];
	for (int k = 0; k < 3; k++)
		w[k] = (strata_weight){(strata_weight_type)d[k].host_elem,
				       host_of(&d[k], e), d[k].rows, d[k].cols};
	const strata_weight in = strata_weight_f32(x->in, n, hp->dim);
	strata_status st = strata_kernel_embed(x->cpu_c, x->gather, &in, rows,
					       m, err);
	if (st == STRATA_OK)
		st = strata_kernel_gated(x->cpu_c, x->hb, x->gather, NULL, NULL,
					 &w[STRATA_EXPERT_GATE],
					 &w[STRATA_EXPERT_UP], x->hb2, m, err);
	if (st == STRATA_OK)
		st = strata_kernel_matmul(x->cpu_c, x->out, x->hb,
					  &w[STRATA_EXPERT_DOWN], NULL, m, err);
	if (st == STRATA_OK)
		st = strata_compute_finish(x->cpu_c, err);
	for (uint32_t i = 0; st == STRATA_OK && i < m; i++) {
		float *a = x->acc + (uint64_t)rows[i] * hp->dim;
		const float *o = x->out + (uint64_t)i * hp->dim;
		for (uint32_t j = 0; j < hp->dim; j++)
			a[j] += weight[i] * o[j];
	}
	return st;
}

int strata__cpu_experts_grouped = 1;
_Atomic uint64_t strata__experts_cpu_ns;

/* Hits a strata_kernel_experts call takes here: the CPU slot's most
 * (STRATA__CPU_EXPERTS_HITS, kernels_experts.c); a layer of more misses
 * makes more calls, in expert order, so the sum keeps its order. */
#define CPU_BATCH 64u

strata_status strata__experts_cpu_misses(strata_infer_experts *x,
					 uint32_t layer, uint32_t n,
					 const uint32_t *count,
					 const bool *miss, const int32_t *rows,
					 const float *weight,
					 strata_error *err)
{
	const kind_data *d = &x->kind[(uint64_t)layer * 3];
	const strata_kernel_experts_scratch s = {x->gather, x->hb, x->hb2,
						 x->out};
	strata_kernel_expert hits[CPU_BATCH];
	strata_status st = STRATA_OK;
	uint32_t k = 0, at = 0;
	for (uint32_t e = 0; st == STRATA_OK && e < x->experts; e++) {
		if (miss[e]) {
			strata_weight w[3];
			for (int i = 0; i < 3; i++)
				w[i] = (strata_weight){
					(strata_weight_type)d[i].host_elem,
					host_of(&d[i], e), d[i].rows,
					d[i].cols};
			hits[k++] = (strata_kernel_expert){
				w[STRATA_EXPERT_GATE], w[STRATA_EXPERT_UP],
				w[STRATA_EXPERT_DOWN], rows + at, weight + at,
				count[e]};
		}
		at += count[e];
		if (k && (k == CPU_BATCH || e + 1 == x->experts)) {
			st = strata_kernel_experts(x->cpu_c, x->acc, x->in, n,
						   hits, k, &s, err);
			k = 0;
		}
	}
	return st ? st : strata_compute_finish(x->cpu_c, err);
}

/* The slot a missed expert may take: an empty one, else the one with
 * the fewest rows before this pass (ties: least recently used); -1
 * unless the missed expert had strictly more. */
static uint64_t rank(const strata_infer_experts *x, uint64_t key)
{
	return x->seen[key] == x->pass ? x->rows_before[key]
				       : x->routed_rows[key];
}

static int32_t victim(const strata_infer_experts *x, uint64_t key)
{
	int32_t best = -1;
	uint64_t least = 0;
	for (uint32_t s = 0; s < x->slots; s++) {
		if (!x->slot_used[s])
			return (int32_t)s;
		uint64_t r = rank(x, x->slot_key[s]);
		if (best < 0 || r < least ||
		    (r == least && x->slot_used[s] < x->slot_used[best]))
			best = (int32_t)s, least = r;
	}
	if (best >= 0 && rank(x, key) <= least)
		return -1;
	return best;
}

strata_status strata__experts_admit(strata_infer_experts *x, uint32_t layer,
				    uint32_t e, strata_error *err)
{
	uint64_t key = (uint64_t)layer * x->experts + e;
	if (!x->slots || x->where[key] >= 0)
		return STRATA_OK;
	int32_t s = victim(x, key);
	if (s < 0)
		return STRATA_OK;
	if (x->slot_used[s]) {
		x->where[x->slot_key[s]] = -1;
		x->stats.evictions++;
	}
	strata_status st = upload(x, layer, e, (uint32_t)s, err);
	if (st)
		return st;
	x->where[key] = s;
	x->slot_key[s] = (uint32_t)key;
	x->slot_used[s] = ++x->tick;
	x->stats.admissions++;
	return STRATA_OK;
}
