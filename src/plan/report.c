/* report.c - the plan as one JSON object, the schema of docs/plan.md
 * (layer: plan). Used by `strata plan --json` and by the telemetry
 * document's `plan` section. */
#include <stdio.h>

#include "plan/internal.h"

const char *strata_plan_candidate_name(const strata_plan_candidate *c,
				       char *buf, size_t cap)
{
	if (c->mode == STRATA_RESIDENCY_HOST) {
		snprintf(buf, cap, "host:%llu",
			 (unsigned long long)c->weights.depth);
		return buf;
	}
	if (c->mode != STRATA_RESIDENCY_PLACEMENT) {
		snprintf(buf, cap, "%s", strata_residency_mode_name(c->mode));
		return buf;
	}
	size_t len = (size_t)snprintf(buf, cap, "placement:r");
	for (uint32_t d = 0; d < c->devices && len < cap; d++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%llu",
					d ? "+" : "",
					(unsigned long long)c->device_resident_units[d]);
	if (len < cap)
		len += (size_t)snprintf(buf + len, cap - len, ",c%llu,w%llu%s",
					(unsigned long long)c->cpu_units,
					(unsigned long long)c->window_units,
					c->statics_on_cpu ? ",statics:cpu" : "");
	return buf;
}

static void candidate_name(const strata_plan_candidate *c, char *buf,
			   size_t cap)
{
	strata_plan_candidate_name(c, buf, cap);
}

/* A u64 that is null when the architecture is unknown. */
static void kv_arch_u64(strata_json *j, const char *k, bool known, uint64_t v)
{
	strata_json_key(j, k);
	if (known)
		strata_json_u64(j, v);
	else
		strata_json_null(j);
}

static void write_arch(const strata_plan *p, strata_json *j)
{
	const strata_plan_arch *a = &p->arch;
	strata_json_key(j, "architecture");
	strata_json_object_begin(j);
	strata_json_kv_bool(j, "known", a->known);
	strata_json_key(j, "family");
	if (a->known && a->family)
		strata_json_string(j, a->family);
	else
		strata_json_null(j);
	kv_arch_u64(j, "layers", a->known, a->layers);
	kv_arch_u64(j, "hidden", a->known, a->hidden);
	kv_arch_u64(j, "intermediate", a->known, a->intermediate);
	kv_arch_u64(j, "heads", a->known, a->heads);
	kv_arch_u64(j, "kv_heads", a->known, a->kv_heads);
	kv_arch_u64(j, "head_dim", a->known, a->head_dim);
	kv_arch_u64(j, "vocab", a->known, a->vocab);
	kv_arch_u64(j, "max_context", a->known && a->max_context,
		    a->max_context);
	strata_json_object_end(j);
}

/* "default", "calibrated" or "option". */
static const char *rate_source(const strata_plan *p, strata_plan_rate r)
{
	if (p->default_rates & (1u << r))
		return "default";
	return p->options.calibrated_rates & (1u << r) ? "calibrated"
						       : "option";
}

/* One pass's terms (docs/plan.md "Cost model"). */
static void write_cost(strata_json *j, const char *key,
		       const strata_plan_cost *c)
{
	strata_json_key(j, key);
	strata_json_object_begin(j);
	strata_json_kv_double(j, "resident_ms", c->resident_ms);
	strata_json_kv_double(j, "streamed_compute_ms", c->streamed_ms);
	strata_json_kv_double(j, "cpu_ms", c->cpu_ms);
	strata_json_kv_double(j, "statics_ms", c->statics_ms);
	strata_json_kv_double(j, "link_ms", c->link_ms);
	strata_json_kv_double(j, "overhead_ms", c->overhead_ms);
	strata_json_kv_double(j, "host_memory_ms", c->host_memory_ms);
	strata_json_kv_double(j, "window_fill_ms", c->window_fill_ms);
	strata_json_kv_double(j, "link_tail_ms", c->link_tail_ms);
	strata_json_kv_u64(j, "crossings", c->crossings);
	strata_json_kv_double(j, "total_ms", c->total_ms);
	strata_json_kv_string(j, "bound", strata_plan_bound_name(c->bound));
	strata_json_object_end(j);
}

/* One tier's rates of type t with where they came from: "calibrated"
 * (the file's for this type), "option" (the tier's rate an option gave,
 * which every type takes), or "f32_rate" (none measured for the type:
 * the tier's f32 rates). */
static void write_type_tier(const strata_plan *p, strata_json *j,
			    const char *key, bool cpu, strata_block_type t)
{
	double gemv, gemm;
	bool measured;
	strata__plan_type_rates(p, cpu, t, &gemv, &gemm, &measured);
	strata_plan_rate r = cpu ? STRATA_PLAN_RATE_HOST_MEMORY
				 : STRATA_PLAN_RATE_MEMORY;
	bool opt = !(p->default_rates & (1u << r)) &&
		   !(p->options.calibrated_rates & (1u << r));
	strata_json_key(j, key);
	strata_json_object_begin(j);
	strata_json_kv_double(j, "gemv_bytes_per_second", gemv);
	strata_json_kv_double(j, "gemm_flops", gemm);
	if (cpu && p->options.cpu_layer[t] > 0) /* cost.c: CPU units */
		strata_json_kv_double(j, "layer_bytes_per_second",
				      p->options.cpu_layer[t]);
	strata_json_kv_string(j, "source", measured ? "calibrated"
					   : opt    ? "option"
						    : "f32_rate");
	strata_json_object_end(j);
}

/* The stored types the weights compute as, with their rates per tier. */
static void write_type_rates(const strata_plan *p, strata_json *j)
{
	strata_json_key(j, "type_rates");
	strata_json_array_begin(j);
	for (uint32_t k = 0; k < p->type_count; k++) {
		strata_block_type t = p->type_of[k];
		uint64_t bytes = p->static_types[k];
		for (uint64_t i = 0; i < p->info.occupied_units; i++)
			bytes = strata_sat_add_u64(
				bytes, p->unit_types[i * p->type_count + k]);
		strata_json_object_begin(j);
		strata_json_kv_string(j, "type", strata_block_name(t));
		strata_json_kv_u64(j, "bytes", bytes);
		write_type_tier(p, j, "cpu", true, t);
		write_type_tier(p, j, "device", false, t);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
}


/* The plan's figures for one pass of the experts on the CPU
 * (strata_plan_experts_pass), under key. */
static void write_expert_pass(const strata_plan *p, strata_json *j,
			      const char *key, double rows, bool prefill)
{
	strata_plan_experts_figures f;
	strata_plan_experts_pass(p, rows, prefill, &f);
	strata_json_key(j, key);
	strata_json_object_begin(j);
	strata_json_kv_double(j, "rows", rows);
	strata_json_kv_double(j, "calls", f.calls);
	strata_json_kv_double(j, "hits", f.hits);
	strata_json_kv_double(j, "misses", f.misses);
	strata_json_kv_double(j, "streamed", f.streamed);
	strata_json_kv_double(j, "admissions", f.admissions);
	strata_json_kv_double(j, "cpu_bytes", f.cpu_bytes);
	strata_json_kv_double(j, "device_bytes", f.device_bytes);
	strata_json_kv_double(j, "upload_bytes", f.upload_bytes);
	strata_json_kv_double(j, "cpu_ms", f.cpu_ms);
	strata_json_kv_double(j, "device_ms", f.device_ms);
	strata_json_kv_double(j, "admit_ms", f.admit_ms);
	strata_json_kv_double(j, "sync_ms", f.sync_ms);
	strata_json_kv_double(j, "total_ms", f.total_ms);
	strata_json_object_end(j);
}

static void write_inputs(const strata_plan *p, strata_json *j)
{
	const strata_plan_options *o = &p->options;
	const strata_plan_budgets *b = &p->budgets;
	const strata_plan_layout_info *l = &p->info;
	strata_json_kv_string(j, "device", strata_plan_device_name(o->device));
	strata_json_key(j, "shape");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "context", o->shape.context);
	strata_json_kv_u64(j, "batch", o->shape.batch);
	strata_json_kv_u64(j, "prefill_chunk", o->shape.prefill_chunk);
	strata_json_object_end(j);
	strata_json_key(j, "budgets");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "device_bytes", b->device_budget_bytes);
	strata_json_kv_string(j, "device_source",
			      b->device_from_option ? "option" : "machine");
	strata_json_kv_u64(j, "device_headroom_bytes", b->device_headroom_bytes);
	strata_json_kv_u64(j, "host_bytes", b->host_budget_bytes);
	strata_json_kv_string(j, "host_source",
			      b->host_from_option ? "option" : "machine");
	strata_json_kv_u64(j, "host_headroom_bytes", b->host_headroom_bytes);
	/* cpu, no budgets: the one RAM both budgets stand for; only then,
	 * so separate budgets keep the document scripts know */
	if (b->ram_bytes)
		strata_json_kv_u64(j, "ram_bytes", b->ram_bytes);
	/* only for a replica among several, so a plan alone keeps the
	 * document scripts know (docs/plan.md) */
	if (b->shared_by > 1) {
		strata_json_kv_u64(j, "shared_by", b->shared_by);
		strata_json_kv_u64(j, "host_pool_bytes", b->host_pool_bytes);
	}
	strata_json_object_end(j);
	strata_json_key(j, "bandwidths");
	strata_json_object_begin(j);
	strata_json_kv_double(j, "h2d_bytes_per_second", o->h2d_bandwidth);
	strata_json_kv_double(j, "disk_bytes_per_second", o->disk_bandwidth);
	strata_json_kv_double(j, "memory_bytes_per_second", o->memory_bandwidth);
	strata_json_object_end(j);
	/* every rate with where it came from */
	strata_json_key(j, "rates");
	strata_json_object_begin(j);
#define STRATA_PLAN_RATE_JSON(name, field, json)                               \
	strata_json_key(j, json);                                              \
	strata_json_object_begin(j);                                           \
	strata_json_kv_double(j, "value", o->field);                           \
	strata_json_kv_string(j, "source",                                     \
			      rate_source(p, STRATA_PLAN_RATE_##name));         \
	strata_json_object_end(j);
	STRATA_PLAN_RATE_MAP(STRATA_PLAN_RATE_JSON)
#undef STRATA_PLAN_RATE_JSON
	strata_json_object_end(j);
	write_type_rates(p, j);
	strata_json_key(j, "layout");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "sized_tensors", l->sized_tensors);
	strata_json_kv_u64(j, "excluded_tensors", l->excluded_tensors);
	strata_json_kv_u64(j, "static_bytes", l->static_bytes);
	strata_json_kv_u64(j, "groups", l->groups);
	strata_json_kv_u64(j, "unit_count", l->unit_count);
	strata_json_kv_u64(j, "occupied_units", l->occupied_units);
	strata_json_kv_u64(j, "all_units_bytes", l->all_units_bytes);
	strata_json_kv_u64(j, "largest_unit_bytes", l->largest_unit_bytes);
	strata_json_kv_u64(j, "exact_static_bytes", l->exact_static_bytes);
	strata_json_kv_u64(j, "exact_all_units_bytes",
			   l->exact_all_units_bytes);
	strata_json_object_end(j);
	/* --n-cpu-moe: the experts the CPU computes (docs/plan.md) */
	const strata_plan_experts *x = &o->experts;
	if (!x->layers)
		return;
	strata_json_key(j, "experts");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "layers", x->layers);
	strata_json_kv_u64(j, "experts", x->experts);
	strata_json_kv_u64(j, "experts_used", x->experts_used);
	strata_json_kv_u64(j, "expert_bytes", x->expert_bytes);
	strata_json_kv_u64(j, "host_bytes", x->host_bytes);
	strata_json_kv_u64(j, "cache_slots", x->cache_slots);
	strata_json_kv_u64(j, "slot_bytes", x->slot_bytes);
	strata_json_kv_u64(j, "cache_bytes", x->cache_bytes);
	strata_json_kv_u64(j, "scratch_bytes", x->scratch_bytes);
	strata_json_kv_u64(j, "stream_rows", strata_plan_experts_stream_rows(p));
	strata_json_kv_double(j, "hit_rate", x->hit_rate);
	strata_json_kv_double(j, "admit_rate", x->admit_rate);
	double batch = (double)o->shape.batch;
	write_expert_pass(p, j, "decode", batch, false);
	write_expert_pass(p, j, "prefill",
			  batch * (double)o->shape.prefill_chunk, true);
	strata_json_object_end(j);
}

static void write_memory(const strata_plan *p, strata_json *j)
{
	const strata_plan_memory *m = &p->memory;
	bool k = m->arch_known;
	strata_json_key(j, "memory");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "alignment", STRATA_ALIGN);
	strata_json_kv_string(j, "kv_type",
			      strata_weight_type_name(p->options.shape.kv_type));
	kv_arch_u64(j, "kv_element_bytes", k, m->kv_element_bytes);
	kv_arch_u64(j, "kv_buffer_bytes", k, m->kv_buffer_bytes);
	kv_arch_u64(j, "kv_cache_bytes", k, m->kv_cache_bytes);
	strata_json_key(j, "activations");
	strata_json_object_begin(j);
#define STRATA_PLAN_ACT_JSON(field, json, shape)                               \
	kv_arch_u64(j, json "_bytes", k, m->field##_bytes);
	STRATA_PLAN_ACTIVATION_MAP(STRATA_PLAN_ACT_JSON)
#undef STRATA_PLAN_ACT_JSON
	strata_json_object_end(j);
	kv_arch_u64(j, "workspace_bytes", k, m->workspace_bytes);
	kv_arch_u64(j, "logits_bytes", k, m->logits_bytes);
	kv_arch_u64(j, "product_workspace_bytes", k,
		    m->product_workspace_bytes);
	strata_json_kv_u64(j, "backend_reserved_bytes",
			   p->options.backend_reserved_bytes);
	strata_json_kv_u64(j, "staging_slots", m->staging_slots);
	strata_json_kv_u64(j, "staging_slot_bytes", m->staging_slot_bytes);
	strata_json_kv_u64(j, "staging_bytes", m->staging_bytes);
	strata_json_object_end(j);
}

/* "placement": one {group, unit, where, device} per occupied unit. */
static void write_units(const strata_plan *p, const strata_plan_candidate *c,
			strata_json *j)
{
	uint64_t n = p->info.occupied_units;
	strata_json_key(j, "placement");
	strata_json_array_begin(j);
	for (uint64_t i = 0; i < n; i++) {
		strata_plan_unit u;
		strata_place where;
		uint32_t dev;
		strata_plan_layout_unit_at(p->layout, (size_t)i, &u);
		strata_plan_unit_place(c, n, i, false, &where, &dev);
		strata_json_object_begin(j);
		strata_json_key(j, "group");
		strata_json_string_n(j, u.group, u.group_len);
		strata_json_kv_u64(j, "unit", u.unit);
		strata_json_kv_string(j, "where", strata_place_name(where));
		strata_json_key(j, "device");
		if (where == STRATA_PLACE_RESIDENT || where == STRATA_PLACE_WINDOW)
			strata_json_u64(j, dev);
		else
			strata_json_null(j);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
}

/* The placement's counts, per device totals, and both passes. */
static void write_placement(const strata_plan *p,
			    const strata_plan_candidate *c, strata_json *j)
{
	write_units(p, c, j);
	strata_json_kv_string(j, "statics",
			      c->statics_on_cpu ? "cpu" : "resident");
	strata_json_kv_u64(j, "resident_units", c->resident_units);
	strata_json_kv_u64(j, "window_units", c->window_units);
	strata_json_kv_u64(j, "cpu_units", c->cpu_units);
	strata_json_kv_u64(j, "disk_units", c->disk_units);
	strata_json_key(j, "devices");
	strata_json_array_begin(j);
	for (uint32_t d = 0; d < c->devices; d++) {
		strata_json_object_begin(j);
		strata_json_kv_u64(j, "device", d);
		strata_json_kv_u64(j, "resident_units",
				   c->device_resident_units[d]);
		strata_json_kv_u64(j, "device_bytes", c->split_device_bytes[d]);
		strata_json_kv_u64(j, "budget_bytes",
				   p->budgets.split_device_bytes[d]);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
	strata_json_kv_u64(j, "cpu_bytes", c->cpu_bytes);
	strata_json_kv_u64(j, "streamed_bytes", c->streamed_bytes);
	strata_json_key(j, "prefill_placement");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "cpu_units", c->prefill_cpu_units);
	strata_json_kv_u64(j, "window_units", c->prefill_window_units);
	strata_json_object_end(j);
	strata_json_kv_double(j, "predicted_decode_ms", c->predicted_decode_ms);
	strata_json_kv_double(j, "predicted_prefill_ms",
			      c->predicted_prefill_ms);
	strata_json_kv_u64(j, "crossing_chunk", c->crossing_chunk);
	write_cost(j, "decode_cost", &c->decode_cost);
	write_cost(j, "prefill_cost", &c->prefill_cost);
}

static void write_candidate(const strata_plan *p,
			    const strata_plan_candidate *c, strata_json *j)
{
	bool k = p->memory.arch_known;
	char name[96];
	candidate_name(c, name, sizeof name);
	strata_json_object_begin(j);
	strata_json_kv_string(j, "name", name);
	strata_json_kv_string(j, "mode", strata_residency_mode_name(c->mode));
	/* exactly the seed's four numbers, of the tensors' own bytes; the
	 * regions that hold them (each tensor in a STRATA_ALIGN slot, the
	 * region rounded up) are the two keys after it */
	strata_json_key(j, "weights");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "static_bytes", c->weights.static_bytes);
	strata_json_kv_u64(j, "window_bytes", c->weights.window_bytes);
	strata_json_kv_u64(j, "required_bytes", c->weights.required_bytes);
	strata_json_kv_u64(j, "depth", c->weights.depth);
	strata_json_object_end(j);
	strata_json_kv_u64(j, "static_device_bytes", c->static_device_bytes);
	strata_json_kv_u64(j, "window_device_bytes", c->window_device_bytes);
	strata_json_kv_u64(j, "lookahead", c->lookahead);
	strata_json_kv_u64(j, "queue", c->queue);
	kv_arch_u64(j, "kv_cache_bytes", k, p->memory.kv_cache_bytes);
	kv_arch_u64(j, "workspace_bytes", k, p->memory.workspace_bytes);
	strata_json_kv_u64(j, "driver_bytes", c->driver_bytes);
	strata_json_kv_u64(j, "device_bytes", c->device_bytes);
	strata_json_kv_u64(j, "host_weight_bytes", c->host_weight_bytes);
	strata_json_kv_u64(j, "staging_bytes", c->staging_bytes);
	strata_json_kv_u64(j, "load_staging_bytes", c->load_staging_bytes);
	strata_json_kv_u64(j, "host_bytes", c->host_bytes);
	strata_json_kv_bool(j, "fits_device", c->fits_device);
	strata_json_kv_bool(j, "fits_host", c->fits_host);
	strata_json_kv_bool(j, "fits", c->fits);
	strata_json_kv_u64(j, "device_shortfall_bytes", c->device_shortfall_bytes);
	strata_json_kv_u64(j, "host_shortfall_bytes", c->host_shortfall_bytes);
	strata_json_kv_u64(j, "moved_bytes_per_forward", c->moved_bytes_per_forward);
	strata_json_kv_double(j, "predicted_ms_per_forward",
			      c->predicted_ms_per_forward);
	strata_json_kv_double(j, "tokens_per_second", c->tokens_per_second);
	write_placement(p, c, j);
	strata_json_object_end(j);
}

void strata_plan_write_json(const strata_plan *p, const char *model,
			    strata_json *j)
{
	strata_json_object_begin(j);
	strata_plan_write_json_fields(p, model, j);
	strata_json_object_end(j);
}

void strata_plan_write_json_fields(const strata_plan *p, const char *model,
				   strata_json *j)
{
	strata_json_key(j, "model");
	if (model)
		strata_json_string(j, model);
	else
		strata_json_null(j);
	write_inputs(p, j);
	write_arch(p, j);
	write_memory(p, j);
	strata_json_key(j, "candidates");
	strata_json_array_begin(j);
	for (size_t i = 0; i < p->candidate_count; i++)
		write_candidate(p, &p->candidates[i], j);
	strata_json_array_end(j);
	strata_json_key(j, "selected");
	const strata_plan_candidate *sel = strata_plan_selected(p);
	if (sel) {
		char name[96];
		candidate_name(sel, name, sizeof name);
		strata_json_object_begin(j);
		strata_json_kv_u64(j, "index", (uint64_t)p->selected);
		strata_json_kv_string(j, "name", name);
		strata_json_kv_string(j, "mode",
				      strata_residency_mode_name(sel->mode));
		strata_json_kv_u64(j, "depth", sel->weights.depth);
		strata_json_kv_u64(j, "lookahead", sel->lookahead);
		strata_json_kv_u64(j, "queue", sel->queue);
		strata_json_kv_string(
			j, "kv_type",
			strata_weight_type_name(p->options.shape.kv_type));
		kv_arch_u64(j, "kv_cache_bytes", p->memory.arch_known,
			    p->memory.kv_cache_bytes);
		strata_json_kv_u64(j, "device_bytes", sel->device_bytes);
		strata_json_kv_u64(j, "host_bytes", sel->host_bytes);
		strata_json_kv_double(j, "predicted_decode_ms",
				      sel->predicted_decode_ms);
		strata_json_kv_double(j, "predicted_prefill_ms",
				      sel->predicted_prefill_ms);
		write_cost(j, "decode_cost", &sel->decode_cost);
		write_cost(j, "prefill_cost", &sel->prefill_cost);
		strata_json_object_end(j);
	} else {
		strata_json_null(j);
	}
	strata_json_key(j, "explanations");
	strata_json_array_begin(j);
	for (size_t i = 0; i < p->explanation_count; i++) {
		strata_json_object_begin(j);
		strata_json_kv_string(j, "code",
				      strata_explain_code(p->explanations[i].code));
		strata_json_kv_string(j, "text", p->explanations[i].text);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
}
