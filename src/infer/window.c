/* window.c - the residency source: a model's tensors handed to the
 * residency engine, and layer acquire/release mapped onto the engine's
 * units, so resident, host:D and disk modes all feed the same forward pass
 * (layer: infer).
 *
 * Each unit's tensors are given to the engine in slot order (infer.h's
 * STRATA_INFER_SLOT_MAP, absent biases skipped), and the slot of each is
 * remembered, so an acquired view maps to the layer struct without looking
 * at names. A mixture of experts' expert tensors follow the slots (codes
 * STRATA_SLOT_COUNT + kind * per + expert), each layer's pointers kept in
 * exp_ptrs (a stacked GGUF tensor's experts one after the other). The
 * experts of the layers the plan computes on the CPU are not the engine's
 * (experts.c holds them): those layers come without expert pointers.
 */
#include <string.h>

#include "strata/infer.h"

struct strata_infer_window {
	strata_residency *engine;
	strata_residency_tensor *rt;  /* every tensor: statics then units */
	strata_residency_unit *units; /* [layers] */
	uint16_t *slot;	  /* [layers][per_layer]: slot code of the k-th */
	uint32_t per_layer; /* tensors a layer may hold */
	uint32_t layers;
	const char *group[1]; /* the engine keeps the config's group list */
	uint8_t (*elem)[STRATA_SLOT_COUNT]; /* [layers][slot]: strata_infer_elem */
	strata_plan_device device;
	strata_residency_mode mode;
	strata_stream *compute_stream; /* CUDA: drained before a release */
	strata_backend *b;
	/* experts: the table's shape, each layer's pointers [layers][3][E],
	 * each (layer, kind)'s type and a stacked tensor's bytes per expert */
	uint32_t experts, expert_tensors;
	bool stacked;
	const void **exp_ptrs;
	uint8_t *exp_elem;
	uint64_t *exp_stride;
	bool prefill; /* the engine's current split */
	uint64_t cpu_expert_layers; /* the plan's: their experts not here */
	strata_weight_store *ws; /* what the engine's reads go through */
};

/* One expert tensor of a view into the layer's pointers. */
static void place_expert(strata_infer_window *w, uint32_t layer,
			 uint32_t code, void *data, strata_infer_layer *out)
{
	uint32_t idx = code - STRATA_SLOT_COUNT;
	uint32_t k = idx / w->expert_tensors, e = idx % w->expert_tensors;
	uint64_t lk = (uint64_t)layer * 3 + k;
	const void **ptrs = w->exp_ptrs + lk * w->experts;
	if (!w->stacked)
		ptrs[e] = data;
	for (uint32_t j = 0; w->stacked && j < w->experts; j++)
		ptrs[j] = (const char *)data + w->exp_stride[lk] * j;
	out->expert[k] = ptrs;
	out->expert_elem[k] = w->exp_elem[lk];
	out->experts = w->experts;
}

/* ------------------------------------------------------------------------ */

/* How tensor t executes on `device`: the plan's rule
 * (strata_plan_tensor_exec: matrices as stored where the backend's table
 * takes their type, vectors f32 or half on CUDA, the rest converted to
 * f32), so the engine holds what the plan sized. Returns its
 * strata_infer_elem. */
static uint8_t describe(strata_residency_tensor *r, const strata_tensor *t,
			strata_plan_device device)
{
	r->tensor = t;
	strata_plan_exec e = {.convert = true, .bytes = t->elements * 4};
	strata_error ignored; /* the plan sized every tensor: no error here */
	(void)strata_plan_tensor_exec(t, device, &e, &ignored);
	r->convert = e.convert;
	r->exec_bytes = e.bytes;
	uint8_t elem = STRATA_ELEM_F32;
	if (!e.convert)
		(void)strata_infer_elem_of(t->dtype, &elem);
	return elem;
}

/* The engine's read hook: the store's checked read, every tensor of a
 * half or block type checked for NaN and infinities piece by piece as it
 * lands, while in cache (strata_weight_store_read_checked), as its
 * conversion to f32 checked it before weights stayed stored; f32 is read
 * as it is, unchecked as ever (a NaN there shows as NaN logits, which the
 * forward pass refuses). The error names the tensor and the element or
 * block. Thread-safe: reads only w->ws. */
static strata_status window_read(void *user,
				 const strata_tensor *const *tensors,
				 void *const *dst, size_t n, strata_error *err)
{
	strata_infer_window *w = user;
	return strata_weight_store_read_checked(w->ws, tensors, dst, n, err);
}

/* The engine's map hook: the store's mapping of one tensor, checked as
 * window_read checks what it reads (strata_weight_store_map_checked). */
static strata_status window_map(void *user, const strata_tensor *t,
				const void **data, strata_error *err)
{
	strata_infer_window *w = user;
	return strata_weight_store_map_checked(w->ws, t, data, err);
}

static strata_status window_acquire(void *user, uint32_t layer,
				    strata_infer_layer *out, strata_error *err)
{
	strata_infer_window *w = user;
	strata_residency_view v;
	strata_status st = strata_residency_acquire(w->engine, 0, layer, &v,
						    err);
	if (st)
		return st;
	memset(out, 0, sizeof *out);
	const float **field[STRATA_SLOT_COUNT] = {
#define STRATA_INFER_SLOT_FIELD(name, fld, hf, gguf, opt) &out->fld,
		STRATA_INFER_SLOT_MAP(STRATA_INFER_SLOT_FIELD)
#undef STRATA_INFER_SLOT_FIELD
	};
	const uint16_t *codes = w->slot + (uint64_t)layer * w->per_layer;
	for (size_t k = 0; k < v.count; k++) {
		if (codes[k] >= STRATA_SLOT_COUNT)
			place_expert(w, layer, codes[k], v.data[k], out);
		else
			*field[codes[k]] = v.data[k];
	}
	memcpy(out->elem, w->elem[layer], sizeof out->elem);
	return STRATA_OK;
}

static strata_status window_release(void *user, uint32_t layer,
				    strata_error *err)
{
	strata_infer_window *w = user;
	/* Streamed modes refill the slot as soon as it is released: the
	 * kernels queued on it must have run first. Resident units stay, and
	 * a placement's resident and cpu units have no slot. */
	const strata_residency_unit *u = &w->units[layer];
	bool streamed = w->mode != STRATA_RESIDENCY_RESIDENT &&
			(w->mode != STRATA_RESIDENCY_PLACEMENT ||
			 (w->prefill ? u->prefill_place : u->place) ==
				 STRATA_PLACE_WINDOW);
	if (w->compute_stream && streamed) {
		strata_status st = strata_backend_synchronize(
			w->b, w->compute_stream, err);
		if (st) {
			strata_error scratch;
			strata_residency_release(w->engine, 0, layer, &scratch);
			return strata_error_prefix(err, "layer %u's kernels",
						   layer);
		}
	}
	return strata_residency_release(w->engine, 0, layer, err);
}

static strata_status window_pass(void *user, bool prefill, strata_error *err)
{
	strata_infer_window *w = user;
	strata_status st = strata_residency_set_pass(w->engine, prefill, err);
	if (st == STRATA_OK)
		w->prefill = prefill;
	return st;
}

static const strata_infer_source_ops window_ops = {
	.acquire = window_acquire,
	.release = window_release,
};

/* A placement's units: where each runs in either split, from the plan's
 * selected candidate (layers are the units, in layout order). */
static void place_units(strata_infer_window *w, const strata_plan *p)
{
	const strata_plan_candidate *c = strata_plan_selected(p);
	if (!c || c->mode != STRATA_RESIDENCY_PLACEMENT)
		return;
	for (uint32_t l = 0; l < w->layers; l++) {
		strata_residency_unit *u = &w->units[l];
		uint32_t dev = 0, pdev = 0;
		strata_plan_unit_place(c, w->layers, l, false, &u->place, &dev);
		strata_plan_unit_place(c, w->layers, l, true, &u->prefill_place,
				       &pdev);
		u->device = dev;
	}
}

static strata_status static_ptr(strata_infer_window *w, const strata_tensor *t,
				 const float **out, uint8_t *elem,
				 strata_error *err)
{
	void *data;
	const strata_residency_tensor *rt;
	strata_status st = strata_residency_static(w->engine, t->name, &data,
						   &rt, err);
	if (st == STRATA_OK) {
		strata_residency_tensor probe;
		*out = data;
		*elem = describe(&probe, t, w->device);
	}
	return st;
}

/* Fills w->rt, w->units and w->slot from t; returns the static count. */
static size_t build_units(strata_infer_window *w, const strata_infer_tensors *t)
{
	size_t n = 0;
	strata_plan_device d = w->device;
	describe(&w->rt[n++], t->embed, d);
	describe(&w->rt[n++], t->final_norm, d);
	if (t->lm_head != t->embed)
		describe(&w->rt[n++], t->lm_head, d);
	if (t->rope_freqs)
		describe(&w->rt[n++], t->rope_freqs, d);
	size_t statics = n;
	for (uint32_t l = 0; l < t->layers; l++) {
		strata_residency_unit *u = &w->units[l];
		u->group = 0;
		u->unit = l;
		u->tensors = &w->rt[n];
		uint16_t *codes = w->slot + (uint64_t)l * w->per_layer;
		for (int s = 0; s < STRATA_SLOT_COUNT; s++) {
			if (!t->layer[l][s])
				continue;
			codes[u->tensor_count++] = (uint16_t)s;
			w->elem[l][s] = describe(&w->rt[n++], t->layer[l][s],
						 d);
		}
		/* experts the CPU computes stay out of the engine (they live
		 * in the expert store, strata_infer_experts) */
		bool apart = l < w->cpu_expert_layers;
		for (uint32_t k = 0; t->experts && !apart && k < 3; k++)
			for (uint32_t e = 0; e < w->expert_tensors; e++) {
				uint64_t lk = (uint64_t)l * 3 + k;
				codes[u->tensor_count++] = (uint16_t)(
					STRATA_SLOT_COUNT +
					k * w->expert_tensors + e);
				w->exp_elem[lk] = describe(
					&w->rt[n],
					strata_infer_expert_tensor(t, l, k, e), d);
				w->exp_stride[lk] = w->rt[n++].exec_bytes /
						    t->experts;
			}
	}
	return statics;
}

/* Disk mode reads a unit per call on each reader thread: with a buffer of
 * the largest unit per reader ready, streaming allocates nothing. */
static strata_status reserve_reads(strata_weight_store *ws,
				   const strata_infer_tensors *t,
				   uint32_t reader_threads, strata_error *err)
{
	uint64_t largest = 0;
	for (uint32_t l = 0; l < t->layers; l++) {
		uint64_t sum = 0;
		for (int s = 0; s < STRATA_SLOT_COUNT; s++)
			if (t->layer[l][s])
				sum += t->layer[l][s]->bytes;
		for (uint32_t k = 0; t->experts && k < 3; k++)
			for (uint32_t e = 0; e < strata_infer_expert_tensors(t);
			     e++)
				sum += strata_infer_expert_tensor(t, l, k, e)
					       ->bytes;
		largest = sum > largest ? sum : largest;
	}
	return strata_weight_store_reserve(ws, reader_threads ? reader_threads
							      : 1,
					   largest, err);
}

/* ------------------------------------------------------------------------ */

strata_status strata_infer_window_create(strata_backend *b,
					 const strata_infer_tensors *t,
					 strata_weight_store *ws,
					 const strata_infer_window_options *o,
					 strata_infer_window **out,
					 strata_infer_source *src,
					 strata_error *err)
{
	strata_residency_config cfg = {0};
	strata_status st = strata_residency_config_from_plan(o->plan, &cfg, err);
	if (st)
		return st;
	strata_infer_window *w = strata_calloc_or_error(1, sizeof *w,
							"weight window", err);
	if (!w)
		return STRATA_E_NOMEM;
	w->layers = t->layers;
	w->device = strata_plan_get_options(o->plan)->device;
	w->mode = cfg.mode;
	w->compute_stream = o->compute_stream;
	w->b = b;
	w->experts = t->experts;
	w->stacked = t->experts_stacked;
	w->expert_tensors = t->experts ? strata_infer_expert_tensors(t) : 0;
	w->cpu_expert_layers = strata_plan_get_options(o->plan)->experts.layers;
	w->per_layer = STRATA_SLOT_COUNT + 3 * w->expert_tensors;
	uint64_t max = 4 + (uint64_t)t->layers * w->per_layer;
	uint64_t lk = (uint64_t)t->layers * 3;
	w->rt = strata_calloc_or_error(max, sizeof *w->rt, "window tensors",
				       err);
	w->units = strata_calloc_or_error(t->layers, sizeof *w->units,
					  "window units", err);
	w->slot = strata_calloc_or_error((uint64_t)t->layers * w->per_layer,
					 sizeof *w->slot, "window slots", err);
	w->elem = strata_calloc_or_error(t->layers, sizeof *w->elem,
					 "window element types", err);
	if (t->experts) {
		w->exp_ptrs = strata_calloc_or_error(lk * t->experts,
						     sizeof *w->exp_ptrs,
						     "expert pointers", err);
		w->exp_elem = strata_calloc_or_error(lk, 1, "expert types",
						     err);
		w->exp_stride = strata_calloc_or_error(
			lk, sizeof *w->exp_stride, "expert strides", err);
	}
	st = STRATA_E_NOMEM;
	if (!w->rt || !w->units || !w->slot || !w->elem ||
	    (t->experts && (!w->exp_ptrs || !w->exp_elem || !w->exp_stride)))
		goto fail;
	size_t statics = build_units(w, t);
	place_units(w, o->plan);
	w->group[0] = strncmp(t->embed->name, "token_embd", 10) ? "model"
								 : "blk";
	cfg.reader_threads = o->reader_threads;
	cfg.group_count = 1;
	cfg.groups = w->group;
	cfg.static_count = statics;
	cfg.statics = w->rt;
	cfg.unit_count = t->layers;
	cfg.units = w->units;
	w->ws = ws;
	cfg.read = window_read;
	cfg.read_user = w;
	cfg.convert = strata_residency_convert_f32;
	cfg.devices = o->devices;
	cfg.map = ws && !o->no_map ? window_map : NULL;
	cfg.progress = o->progress;
	cfg.progress_user = o->progress_user;
	if (ws && cfg.mode == STRATA_RESIDENCY_DISK &&
	    (st = reserve_reads(ws, t, o->reader_threads, err)))
		goto fail;
	if ((st = strata_residency_create(b, &cfg, &w->engine, err)))
		goto fail;
	/* the run's budgets, for the telemetry document: the engine knows
	 * only the plan's sizes */
	strata_telemetry *tel = strata_residency_telemetry(w->engine);
	strata_telemetry_set_budget(tel, STRATA_TIER_DEVICE,
				    strata_plan_device_budget_bytes(o->plan));
	strata_telemetry_set_budget(tel, STRATA_TIER_HOST,
				    strata_plan_host_budget_bytes(o->plan));
	strata_infer_statics s = {0};
	if ((st = static_ptr(w, t->embed, &s.embed, &s.embed_elem, err)) ||
	    (st = static_ptr(w, t->final_norm, &s.final_norm,
			     &s.final_norm_elem, err)) ||
	    (st = static_ptr(w, t->lm_head, &s.lm_head, &s.lm_head_elem,
			     err)) ||
	    (t->rope_freqs &&
	     (st = static_ptr(w, t->rope_freqs, &s.rope_freqs,
			      &s.rope_freqs_elem, err))))
		goto fail;
	src->ops = &window_ops;
	src->user = w;
	src->pass = window_pass;
	src->statics = s;
	*out = w;
	return STRATA_OK;
fail:
	strata_infer_window_destroy(w);
	return st;
}

void strata_infer_window_destroy(strata_infer_window *w)
{
	if (!w)
		return;
	strata_residency_destroy(w->engine);
	strata_free(w->rt);
	strata_free(w->units);
	strata_free(w->slot);
	strata_free(w->elem);
	strata_free(w->exp_ptrs);
	strata_free(w->exp_elem);
	strata_free(w->exp_stride);
	strata_free(w);
}

strata_residency *strata_infer_window_engine(strata_infer_window *w)
{
	return w->engine;
}
