/* session.c - a model opened for running: catalog, hyper-parameters and
 * tensors, the plan for this run's shape, the residency window over the
 * backend, the compute context and the forward pass; and the telemetry
 * document at the end (layer: infer).
 *
 * `strata run` and `strata logits` differ only in what they do with the
 * forward pass, so everything up to it lives here, once.
 *
 * On CUDA the backend comes first (its free memory is the plan's device
 * budget when no --device-memory is given); the CPU backend comes after the
 * plan, bounded by its device budget. Then the compute context (its
 * stream, where it has one, orders the window's releases), the window
 * keeping the weights the device computes on in their stored type, and a
 * forward pass whose buffers live in one arena of the backend.
 */
#include <string.h>

#include "infer/session_internal.h"

#define DEFAULT_PREFILL_CAP 512u

/* ------------------------------------------------------------------------ */

/* The backend kind that runs a plan's device. */
static const char *kind_of(strata_plan_device d)
{
	return d == STRATA_PLAN_DEVICE_CUDA ? "cuda" : "cpu";
}

bool strata_session_runs_placements(const strata_plan_options *o)
{
	/* on CUDA or over a layer split; with one CPU device the device and
	 * the CPU are one processor on one RAM, so only a forced placement
	 * runs there */
	return o->device == STRATA_PLAN_DEVICE_CUDA || o->device_count > 1;
}

strata_status strata_session_plan_source(const strata_catalog *c,
					 const strata_infer_hparams *hp,
					 const char *const *exclude,
					 size_t exclude_count,
					 strata_plan_options *po,
					 strata_plan_source **out,
					 strata_error *err)
{
	strata_plan_experts *x = &po->experts;
	if (!x->layers && x->cache_slots)
		return strata_fail(err, STRATA_E_USAGE,
				   "give --n-cpu-moe N with --expert-cache",
				   "--expert-cache %llu: no experts are on the "
				   "CPU to cache",
				   (unsigned long long)x->cache_slots);
	if (!x->layers)
		return strata_plan_source_create(c, po->device, exclude,
						 exclude_count, out, err);
	if (!hp->experts)
		return strata_fail(err, STRATA_E_USAGE,
				   "drop --n-cpu-moe and --expert-cache",
				   "--n-cpu-moe: the model has no experts (a "
				   "dense %s)",
				   strata_infer_family_name(hp->family));
	char **globs = NULL;
	size_t n = 0;
	strata_plan_shape shape = po->shape; /* the pass's rows, as planned */
	strata_plan_shape_defaults(&shape, hp->context, 1);
	uint64_t rows = shape.prefill_chunk > shape.batch ? shape.prefill_chunk
							  : shape.batch;
	strata_status st = strata_plan_experts_size(
		c, po->device, x->layers, x->cache_slots, hp->experts,
		hp->experts_used, x, &globs, &n, err);
	const char **all = NULL;
	if (st == STRATA_OK) {
		x->scratch_bytes = strata_infer_experts_scratch_bytes(
			hp, (uint32_t)rows);
		all = strata_calloc_or_error(exclude_count + n + 1, sizeof *all,
					     "exclude globs", err);
		st = all ? STRATA_OK : STRATA_E_NOMEM;
	}
	if (st == STRATA_OK) {
		for (size_t i = 0; i < exclude_count; i++)
			all[i] = exclude[i];
		for (size_t i = 0; i < n; i++)
			all[exclude_count + i] = globs[i];
		st = strata_plan_source_create(c, po->device, all,
					       exclude_count + n, out, err);
	}
	strata_free(all);
	strata_plan_experts_globs_free(globs, n);
	return st;
}

/* --batch auto: the plan made at batch 1 (po) made again at the batch of
 * most predicted tokens per second up to `most`, with the prefill chunk
 * wanted as far as that batch allows (kept at 1 when none fits or the
 * prediction cannot be made). */
static strata_status plan_best_batch(strata_session *s, uint32_t most,
				     uint64_t want_chunk,
				     const strata_plan_arch *arch,
				     const strata_plan_machine *m,
				     strata_plan_options *po,
				     strata_error *err)
{
	strata_plan_batch_point pts[STRATA_PLAN_BATCH_POINTS_MAX];
	size_t n = 0;
	strata_error ignored;
	if (most > STRATA_FORWARD_MAX_SEQUENCES)
		most = STRATA_FORWARD_MAX_SEQUENCES;
	if (strata_plan_batch_curve(s->plan, most, pts,
				    STRATA_PLAN_BATCH_POINTS_MAX, &n,
				    &ignored) != STRATA_OK)
		return STRATA_OK;
	uint64_t best = strata_plan_batch_best(pts, n);
	if (best <= 1)
		return STRATA_OK;
	strata_plan *q = NULL;
	po->shape.batch = best;
	/* context x best: within the plan's bound (no overflow: 32-bit
	 * context, at most 256 sequences) */
	po->shape.prefill_chunk = want_chunk < po->shape.context * best
					  ? want_chunk
					  : po->shape.context * best;
	strata_status st = strata_plan_create(
		strata_plan_source_layout(s->plan_source), arch,
		strata_plan_source_weight_dtype(s->plan_source), po, m, &q,
		err);
	if (st) {
		strata_plan_destroy(q);
		return st;
	}
	strata_plan_destroy(s->plan);
	s->plan = q;
	return STRATA_OK;
}

static strata_status plan_it(strata_session *s, const strata_session_options *o,
			     strata_error *err)
{
	strata_plan_options po = o->plan;
	const strata_infer_hparams *hp = &s->hp;
	uint64_t need = o->positions ? o->positions : 1;
	/* An explicit --context is a KV cache size, not a licence to run
	 * past the positions the model was trained for (docs/infer.md). */
	if (po.shape.context > hp->context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "give --context at most the trained context",
				   "--context %llu is above the %u positions "
				   "the model was trained for",
				   (unsigned long long)po.shape.context,
				   hp->context);
	if (!po.shape.context && need > hp->context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "give a shorter prompt or fewer tokens (-n)",
				   "the run needs %llu positions but the model "
				   "was trained for %u",
				   (unsigned long long)need, hp->context);
	if (o->plan_shape) /* strata plan's defaults (issue 17) */
		strata_plan_shape_defaults(&po.shape, hp->context, need);
	if (!po.shape.context)
		po.shape.context = need;
	if (!po.shape.prefill_chunk) {
		uint64_t p = o->prefill ? o->prefill : 1;
		po.shape.prefill_chunk = p < DEFAULT_PREFILL_CAP
						 ? p : DEFAULT_PREFILL_CAP;
	}
	if (!po.shape.batch)
		po.shape.batch = 1;
	/* The run runs placements (session_place.c): the plan may pick one
	 * where one can be faster (strata_session_runs_placements). */
	po.mixed_placements = strata_session_runs_placements(&po);
	if (po.shape.batch > STRATA_FORWARD_MAX_SEQUENCES)
		return strata_fail(err, STRATA_E_INVALID_ARG, "lower --batch",
				   "--batch %llu: a forward pass holds at most "
				   "%u sequences",
				   (unsigned long long)po.shape.batch,
				   STRATA_FORWARD_MAX_SEQUENCES);
	strata_plan_arch arch;
	strata_infer_plan_arch(hp, &arch);
	strata_plan_machine m = {0};
	strata_error ignored;
	m.host_available_known = strata_plan_host_available(
		&m.host_available_bytes, &ignored) == STRATA_OK;
	strata_backend_memory mem = {0};
	if (po.device == STRATA_PLAN_DEVICE_CPU) {
		/* The CPU backend's device memory is the same RAM. */
		m.device_free_known = m.host_available_known;
		m.device_free_bytes = m.host_available_bytes;
	} else {
		/* Free memory as if the compute context were not there yet:
		 * the plan counts it among its own bytes below. */
		m.device_free_known = strata_backend_memory_info(
			s->backend, &mem, &ignored) == STRATA_OK;
		m.device_free_bytes = mem.free_bytes + s->compute_device_bytes;
	}
	strata_status st = strata_session_plan_source(
		s->catalog, &s->hp, o->exclude, o->exclude_count, &po,
		&s->plan_source, err);
	if (st)
		return st;
	/* The compute context as measured (at least what its kind always
	 * takes), and what the runtime takes later as kernels first run; the
	 * planner adds the products' workspace and the driver's own bytes
	 * for each way of running. */
	uint64_t least = strata_backend_compute_bytes(kind_of(po.device));
	if (least)
		po.backend_reserved_bytes =
			(s->compute_device_bytes > least ? s->compute_device_bytes
							 : least) +
			strata_backend_runtime_bytes(kind_of(po.device));
	/* --batch auto: planned at batch 1 (its prefill chunk within one
	 * context), then again at the best batch with the chunk wanted */
	uint64_t want_chunk = po.shape.prefill_chunk;
	if (o->batch_auto_max) {
		po.shape.batch = 1;
		if (po.shape.prefill_chunk > po.shape.context)
			po.shape.prefill_chunk = po.shape.context;
	}
	st = strata_plan_create(strata_plan_source_layout(s->plan_source),
				&arch,
				strata_plan_source_weight_dtype(s->plan_source),
				&po, &m, &s->plan, err);
	if (st == STRATA_OK && o->batch_auto_max)
		st = plan_best_batch(s, o->batch_auto_max, want_chunk, &arch,
				     &m, &po, err);
	if (st)
		return st;
	s->context = (uint32_t)po.shape.context;
	s->batch = (uint32_t)po.shape.prefill_chunk;
	s->sequences = (uint32_t)po.shape.batch;
	return STRATA_OK;
}

/* Creates the backend the options name and its compute context. CUDA's
 * come before planning (`planned` false): the plan reads the free memory,
 * and reserves what the compute context took as measured here (its cuBLAS
 * handle, the runtime's own allocations), which no constant could say. The
 * CPU's come after it (`planned` true): its device memory is RAM the plan
 * reads from the machine, and the backend is bounded by the plan's device
 * budget, the one figure from --device-memory to the backend. */
static strata_status open_backend(strata_session *s,
				  const strata_session_options *o,
				  bool planned, strata_error *err)
{
	bool cpu = o->plan.device == STRATA_PLAN_DEVICE_CPU;
	if (cpu != planned)
		return STRATA_OK;
	strata_backend_cpu_options co = {
		.device_budget_bytes =
			planned ? strata_plan_device_budget_bytes(s->plan) : 0,
	};
	strata_status st = strata_backend_create(kind_of(o->plan.device),
						 cpu ? 0 : o->device_index,
						 cpu ? &co : NULL, &s->backend,
						 err);
	if (st == STRATA_OK)
		st = strata_compute_create_on_with(
			s->backend,
			&(strata_compute_options){.threads = o->threads,
						  .precision = o->precision},
			&s->compute, &s->compute_device_bytes, err);
	return st;
}

/* The expert store of the plan's experts on the CPU, its cache on the
 * session's device (the one resident layers compute on). */
static strata_status open_experts(strata_session *s,
				  const strata_session_options *o,
				  strata_forward_options *fo, strata_error *err)
{
	const strata_plan_options *po = strata_plan_get_options(s->plan);
	if (!po->experts.layers)
		return STRATA_OK;
	strata_infer_experts_options xo = {
		.hp = &s->hp, .tensors = &s->tensors, .ws = s->store,
		.layers = (uint32_t)po->experts.layers,
		.cache_slots = (uint32_t)po->experts.cache_slots,
		.rows = s->batch > s->sequences ? s->batch : s->sequences,
		.threads = o->threads, .precision = o->precision,
		.device = s->backend,
		.device_compute = s->compute, .device_kind = po->device,
		.stream_rows = (uint32_t)strata_plan_experts_stream_rows(s->plan),
	};
	strata_status st = strata_infer_experts_create(&xo, &s->experts, err);
	fo->experts = s->experts;
	return st;
}

static strata_status start_window(strata_session *s,
				  const strata_session_options *o,
				  strata_error *err)
{
	const strata_plan *p = s->plan;
	/* The window runs the plan's sizes (strata_residency_config_from_plan) */
	strata_infer_window_options wo = {
		.plan = p, .no_map = o->no_map, .progress = o->load_progress,
		.progress_user = o->load_progress_user};
	/* Disk mode reads every weight from the files on every pass: around
	 * the page cache (O_DIRECT, where the filesystem allows), which would
	 * otherwise fill with what is read once and evict the host's memory. */
	strata_weight_store_options so = {
		.direct_io = strata_plan_mode(p) == STRATA_RESIDENCY_DISK,
	};
	strata_status st;
	if ((st = strata_weight_store_create(s->catalog, &so, &s->store,
					     err)))
		return st;
	wo.compute_stream = strata_compute_stream(s->compute);
	strata_backend *wb = s->backend;
	strata__session_place_window(s, &wo, &wb);
	if ((st = strata_infer_window_create(wb, &s->tensors, s->store, &wo,
					     &s->window, &s->source, err)))
		return st;
	strata_forward_options fo = {
		.hp = &s->hp, .backend = s->backend, .compute = s->compute,
		.src = &s->source, .context = s->context, .batch = s->batch,
		.sequences = s->sequences,
		.kv_type = strata_plan_get_options(p)->shape.kv_type,
	};
	strata__session_place_forward(s, &fo);
	if ((st = open_experts(s, o, &fo, err)))
		return st;
	/* every site's buffers are exactly the plan's figure for it */
	fo.planned = strata_plan_get_memory(s->plan);
	if ((st = strata_forward_create(&fo, &s->forward, err)))
		return st;
	/* The products' workspace now, as planned, not mid-run. */
	uint64_t ws = strata_plan_get_memory(s->plan)->product_workspace_bytes;
	return strata__session_place_reserve(s, ws, err);
}

/* ------------------------------------------------------------------------ */

strata_status strata_session_open(const strata_session_options *o,
				  strata_session **out, strata_error *err)
{
	uint64_t t0 = strata_now_ns();
	strata_session *s = strata_calloc_or_error(1, sizeof *s, "session",
						   err);
	if (!s)
		return STRATA_E_NOMEM;
	strata_status st;
	/* A copy: the caller's buffer may be gone before the session is. */
	s->model_path = o->model_path ? strata_strdup(o->model_path) : NULL;
	if (o->model_path && !s->model_path) {
		strata_free(s);
		return strata_fail(err, STRATA_E_NOMEM, "free memory and retry",
				   "no memory to copy the model path");
	}
	if ((st = strata_catalog_open(o->model_path, &s->catalog, err)) ||
	    (st = strata_infer_hparams_read(o->model_path, s->catalog, &s->hp,
					    err)) ||
	    (st = strata_infer_tensors_find(s->catalog, &s->hp, &s->tensors,
					    err)) ||
	    (st = open_backend(s, o, false, err)) ||
	    (st = plan_it(s, o, err)) ||
	    (st = open_backend(s, o, true, err)) ||
	    (st = strata__session_place_open(s, o->threads, o->device_index,
					     err)) ||
	    (st = start_window(s, o, err))) {
		strata_session_close(s);
		return st;
	}
	s->load_ns = strata_now_ns() - t0;
	*out = s;
	return STRATA_OK;
}

void strata_session_close(strata_session *s)
{
	if (!s)
		return;
	strata_forward_destroy(s->forward);
	strata_infer_experts_destroy(s->experts);
	strata_compute_destroy(s->compute);
	strata_infer_window_destroy(s->window);
	strata__session_place_close(s);
	strata_backend_destroy(s->backend);
	strata_weight_store_destroy(s->store);
	strata_plan_destroy(s->plan);
	strata_plan_source_destroy(s->plan_source);
	strata_infer_tensors_fini(&s->tensors);
	strata_catalog_destroy(s->catalog);
	strata_free(s->model_path);
	strata_free(s);
}

strata_status strata_session_finish(strata_session *s, strata_error *err)
{
	return strata_residency_quiesce(strata_infer_window_engine(s->window),
					err);
}

void strata_session_print_summary(strata_session *s, FILE *f)
{
	/* the shape and choice as strata plan shows them, so the two can be
	 * compared line for line (issue 17) */
	const strata_plan_options *po = strata_plan_get_options(s->plan);
	const strata_plan_candidate *c = strata_plan_selected(s->plan);
	char name[96] = "none", dev[32], host[32];
	if (c)
		strata_plan_candidate_name(c, name, sizeof name);
	fprintf(f, "plan: %s, context %llu, batch %llu, prefill chunk %llu; "
		"device %s, host %s planned; precision %s\n", name,
		(unsigned long long)po->shape.context,
		(unsigned long long)po->shape.batch,
		(unsigned long long)po->shape.prefill_chunk,
		strata_size_format(strata_plan_device_total(s->plan), dev,
				   sizeof dev),
		strata_size_format(strata_plan_host_total(s->plan), host,
				   sizeof host),
		strata_precision_name(s->compute->precision));
	strata_residency *e = strata_infer_window_engine(s->window);
	strata_telemetry_snapshot snap;
	strata_telemetry_get(strata_residency_telemetry(e), &snap);
	strata_telemetry_print_summary(f, &snap);
	if (s->experts) {
		strata_telemetry_experts x;
		strata__session_experts_telemetry(s, &x);
		char cpu[32], up[32];
		fprintf(f, "  experts on the cpu (%llu layers): %llu routed, "
			"%llu cache hits, %llu misses (%s on the cpu), "
			"%llu streamed, %llu into the cache of %llu (%s "
			"copied)\n",
			(unsigned long long)x.layers,
			(unsigned long long)x.routed,
			(unsigned long long)x.hits,
			(unsigned long long)x.misses,
			strata_size_format(x.cpu_bytes, cpu, sizeof cpu),
			(unsigned long long)x.streamed,
			(unsigned long long)x.admissions,
			(unsigned long long)x.cache_slots,
			strata_size_format(x.upload_bytes, up, sizeof up));
	}
}

void strata__session_experts_telemetry(const strata_session *s,
				       strata_telemetry_experts *out)
{
	strata_infer_experts_stats st;
	strata_infer_experts_get_stats(s->experts, &st);
	*out = (strata_telemetry_experts){
		.layers = st.layers, .cache_slots = st.cache_slots,
		.routed = st.routed, .hits = st.hits, .misses = st.misses,
		.streamed = st.streamed,
		.admissions = st.admissions, .evictions = st.evictions,
		.cpu_bytes = st.cpu_bytes, .device_bytes = st.device_bytes,
		.upload_bytes = st.upload_bytes};
}

strata_status strata_session_write_telemetry(strata_session *s,
					     const char *path,
					     const strata_session_run *run,
					     strata_error *err)
{
	strata_residency *e = strata_infer_window_engine(s->window);
	strata_telemetry_snapshot snap;
	strata_telemetry_get(strata_residency_telemetry(e), &snap);
	strata_residency_sizes sizes;
	strata_residency_get_sizes(e, &sizes);
	strata_weight_store_stats ws;
	strata_weight_store_get_stats(s->store, &ws);
	strata_backend_caps caps = {.name = "cpu"};
	strata_error ignored;
	strata_backend_get_caps(s->backend, &caps, &ignored);
	strata_telemetry_device dev = {.name = caps.name, .snapshot = &snap};
	strata_telemetry_experts ex;
	if (s->experts)
		strata__session_experts_telemetry(s, &ex);
	strata_telemetry_report r = {
		.model = s->model_path,
		.mode = strata_residency_mode_name(strata_plan_mode(s->plan)),
		.depth = sizes.depth,
		.lookahead_units = strata_plan_lookahead(s->plan),
		.queue_depth = strata_plan_queue(s->plan),
		.static_bytes = sizes.static_bytes,
		.window_bytes = sizes.window_bytes,
		.kv_type = strata_weight_type_name(
			strata_plan_get_options(s->plan)->shape.kv_type),
		.kv_cache_bytes = strata_plan_get_memory(s->plan)->kv_cache_bytes,
		.precision = strata_precision_name(s->compute->precision),
		.load_seconds = s->load_ns / 1e9,
		.run_seconds = run->run_ns / 1e9,
		.tokens = run->tokens,
		.has_seed = run->has_seed,
		.seed = run->seed,
		.residency = &snap,
		.weight_store = &ws,
		.device_count = 1,
		.devices = &dev,
		.experts = s->experts ? &ex : NULL,
	};
	strata_json j;
	strata_json_init(&j, true);
	strata_telemetry_write_json(&j, &r);
	strata_status st = strata_json_finish(&j, err);
	if (st == STRATA_OK)
		st = strata_file_write_atomic(path, j.buf, j.len, err);
	strata_json_fini(&j);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */
/* ------------------------------------------------------------------------ */

strata_infer_experts *strata_session_experts(const strata_session *s)
{
	return s->experts;
}

strata_forward *strata_session_forward(const strata_session *s)
{
	return s->forward;
}

const strata_infer_hparams *strata_session_hparams(const strata_session *s)
{
	return &s->hp;
}

strata_backend *strata_session_backend(const strata_session *s)
{
	return s->backend;
}

const strata_plan *strata_session_plan(const strata_session *s)
{
	return s->plan;
}

strata_residency *strata_session_residency(const strata_session *s)
{
	return strata_infer_window_engine(s->window);
}

const strata_weight_store *
strata_session_weight_store(const strata_session *s)
{
	return s->store;
}

strata_infer_source *strata_session_source(strata_session *s)
{
	return &s->source;
}

const char *strata_session_model_path(const strata_session *s)
{
	return s->model_path;
}

uint64_t strata_session_load_ns(const strata_session *s)
{
	return s->load_ns;
}

strata_precision strata_session_precision(const strata_session *s)
{
	return s->compute->precision;
}
