/* batch_telemetry.c - the telemetry document of a batch: one devices[]
 * entry per replica, totals over them, and the router's statistics
 * (layer: serve). */
#include <string.h>

#include "strata/serve.h"

/* Sequences per decode step: B when every step was full, 1 at --batch 1. */
static double per_step(uint64_t rows, uint64_t steps)
{
	return steps ? (double)rows / (double)steps : 0;
}

/* --batch B and how full the replicas' decode steps were, over all. */
static void write_batching(strata_json *j, const strata_batch *b)
{
	strata_batch_totals t;
	strata_batch_get_totals(b, &t);
	strata_json_kv_u64(j, "batch", strata_batch_sequences(b));
	/* --batch auto: the plan's best_batch for strata batch */
	strata_json_kv_bool(j, "batch_auto", strata_batch_sequences_auto(b));
	strata_json_kv_u64(j, "decode_steps", t.decode_steps);
	strata_json_kv_double(j, "sequences_per_step",
			      per_step(t.decode_rows, t.decode_steps));
	/* every step is one pass of the weights: decode tokens and prompt
	 * chunks together (issue 19) */
	strata_json_kv_u64(j, "weight_passes", t.passes);
	strata_json_kv_double(j, "rows_per_pass",
			      per_step(t.pass_rows, t.passes));
}

/* Largest, mean and their ratio of one figure over the replicas. */
static void write_spread(strata_json *j, const char *max_key,
			 const char *mean_key, const char *ratio_key,
			 const uint64_t *v, uint32_t n)
{
	uint64_t max = 0, sum = 0;
	for (uint32_t i = 0; i < n; i++) {
		max = v[i] > max ? v[i] : max;
		sum += v[i];
	}
	double mean = n ? (double)sum / n : 0;
	strata_json_kv_u64(j, max_key, max);
	strata_json_kv_double(j, mean_key, mean);
	strata_json_kv_double(j, ratio_key, mean > 0 ? max / mean : 0);
}

/* How evenly the replicas were used, two ways: the load charged (the
 * routing cost, prompt + max tokens of each request run there, whole even
 * when the prefix cache supplies most of the prompt) and the positions
 * computed (the work done: prompt positions past the cache, generated
 * tokens). Affinity routing balances the first; prefix hits make the
 * second smaller and less even. */
static void write_balance(strata_json *j, const strata_batch *b)
{
	uint64_t charged[STRATA_BATCH_MAX_REPLICAS] = {0};
	uint64_t positions[STRATA_BATCH_MAX_REPLICAS] = {0};
	uint32_t n = strata_batch_replicas(b);
	for (uint32_t i = 0; i < n; i++) {
		strata_batch_replica_stats r;
		strata_batch_replica_get_stats(b, i, &r);
		charged[i] = r.load_charged;
		positions[i] = r.tokens;
	}
	write_spread(j, "max_load", "mean_load", "max_over_mean", charged, n);
	write_spread(j, "max_positions", "mean_positions",
		     "positions_max_over_mean", positions, n);
}

static void write_prefix_cache(strata_json *j,
			       const strata_batch_replica_stats *r)
{
	strata_json_key(j, "prefix_cache");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "lookups", r->prefix_lookups);
	strata_json_kv_u64(j, "hits", r->prefix_hits);
	strata_json_kv_u64(j, "reused_tokens", r->prefix_reused_tokens);
	strata_json_kv_u64(j, "saved", r->prefix_saved);
	strata_json_kv_u64(j, "evictions", r->prefix_evictions);
	strata_json_kv_u64(j, "skipped", r->prefix_skipped);
	strata_json_kv_u64(j, "guests_declined", r->prefix_guests_declined);
	strata_json_kv_u64(j, "truncated", r->prefix_truncated);
	strata_json_kv_u64(j, "bytes", r->prefix_bytes);
	strata_json_kv_u64(j, "peak_bytes", r->prefix_peak_bytes);
	strata_json_kv_u64(j, "pool_bytes", r->prefix_pool_bytes);
	strata_json_kv_u64(j, "budget_bytes", r->prefix_budget_bytes);
	strata_json_kv_string(j, "budget_source",
			      r->prefix_budget_from_plan ? "plan" : "option");
	strata_json_object_end(j);
}

/* One per_device[] entry: placements, load (charged in all, the largest
 * in flight, in flight now: 0 after a run), work and the prefix cache. */
static void write_device(strata_json *j, const strata_batch *b, uint32_t i,
			 const strata_batch_replica_stats *r)
{
	strata_shard_device_stats d;
	strata_error ignored;
	(void)strata_batch_router_device_stats(b, i, &d, &ignored);
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "device", i);
	strata_json_kv_u64(j, "requests", r->routed);
	strata_json_kv_u64(j, "spilled_in", r->routed - r->routed_home);
	strata_json_kv_u64(j, "spilled_away", r->routed_away);
	strata_json_kv_u64(j, "load_total", r->load_charged);
	strata_json_kv_u64(j, "load_peak", r->peak_load);
	strata_json_kv_u64(j, "load_now", d.load);
	strata_json_kv_u64(j, "positions_computed", r->tokens);
	strata_json_kv_u64(j, "failures", r->failures);
	strata_json_kv_u64(j, "moved_away", r->moved_away);
	strata_json_kv_double(j, "busy_seconds", r->busy_ns / 1e9);
	strata_json_kv_double(j, "prefix_cache_seconds", r->prefix_ns / 1e9);
	strata_json_kv_double(j, "prefill_seconds", r->prefill_ns / 1e9);
	strata_json_kv_double(j, "decode_step_seconds", r->step_ns / 1e9);
	strata_json_kv_u64(j, "decode_steps", r->decode_steps);
	strata_json_kv_double(j, "sequences_per_step",
			      per_step(r->decode_rows, r->decode_steps));
	strata_json_kv_u64(j, "weight_passes", r->passes);
	write_prefix_cache(j, r);
	strata_json_object_end(j);
}

/* The `router` object: placements, how evenly the replicas were loaded,
 * each replica's figures and prefix cache, the batching. */
static void write_router(strata_json *j, strata_batch *b,
			 strata_batch_route route)
{
	strata_shard_stats s;
	strata_batch_router_stats(b, &s);
	uint32_t n = strata_batch_replicas(b);
	strata_batch_totals t;
	strata_batch_get_totals(b, &t);
	strata_json_key(j, "router");
	strata_json_object_begin(j);
	strata_json_kv_string(j, "route", strata_batch_route_name(route));
	strata_json_kv_u64(j, "devices", n);
	strata_json_kv_u64(j, "spill_threshold", s.spill_threshold);
	strata_json_kv_u64(j, "requests", t.routed);
	strata_json_kv_u64(j, "home_hits", t.routed_home);
	strata_json_kv_u64(j, "spills", t.routed - t.routed_home);
	strata_json_kv_double(j, "home_hit_rate",
			      t.routed ? (double)t.routed_home / t.routed : 0);
	write_balance(j, b);
	strata_json_key(j, "per_device");
	strata_json_array_begin(j);
	for (uint32_t i = 0; i < n; i++) {
		strata_batch_replica_stats r;
		strata_batch_replica_get_stats(b, i, &r);
		write_device(j, b, i, &r);
	}
	strata_json_array_end(j);
	strata_json_kv_u64(j, "prefix_lookups", t.prefix_lookups);
	strata_json_kv_u64(j, "prefix_hits", t.prefix_hits);
	strata_json_kv_double(j, "prefix_hit_rate",
			      t.prefix_lookups ? (double)t.prefix_hits /
							 t.prefix_lookups
					       : 0);
	write_batching(j, b);
	strata_json_object_end(j);
}

/* Adds b's weight-store counters into a (paths stay a's: every replica
 * reads the same model). */
static void add_store(strata_weight_store_stats *a,
		      const strata_weight_store_stats *b)
{
	a->cache_hits += b->cache_hits;
	a->cache_misses += b->cache_misses;
	a->evictions += b->evictions;
	a->currently_cached_shards += b->currently_cached_shards;
	a->physical_reads += b->physical_reads;
	a->physical_read_bytes += b->physical_read_bytes;
	a->coalesced_group_hits += b->coalesced_group_hits;
}

/* Writes doc with router's members added before its closing brace:
 * doc up to its last '}', then ",", then everything after router's opening
 * brace. Both are finished documents. */
static strata_status splice_write(const char *path, const strata_json *doc,
				  const strata_json *router, strata_error *err)
{
	char *close = strrchr(doc->buf, '}');
	char *open = strchr(router->buf, '{');
	if (!close || !open)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in strata",
				   "telemetry document has no object to extend");
	size_t head = (size_t)(close - doc->buf);
	while (head && (doc->buf[head - 1] == '\n' ||
			doc->buf[head - 1] == ' '))
		head--;
	const char *tail = open + 1;
	size_t tail_len = strlen(tail);
	size_t len = head + 1 + tail_len;
	char *text = strata_alloc_or_error(len + 1, "telemetry", err);
	if (!text)
		return STRATA_E_NOMEM;
	memcpy(text, doc->buf, head);
	text[head] = ',';
	memcpy(text + head + 1, tail, tail_len + 1);
	strata_status st = strata_file_write_atomic(path, text, len, err);
	strata_free(text);
	return st;
}

strata_status strata_batch_write_telemetry(strata_batch *b, const char *path,
					   const char *const *device_names,
					   const strata_session_run *run,
					   strata_error *err)
{
	uint32_t n = strata_batch_replicas(b);
	strata_telemetry_snapshot snaps[STRATA_BATCH_MAX_REPLICAS], total;
	strata_telemetry_device devs[STRATA_BATCH_MAX_REPLICAS];
	strata_weight_store_stats ws;
	memset(&total, 0, sizeof total);
	for (uint32_t i = 0; i < n; i++) {
		strata_session *s = strata_batch_session(b, i);
		strata_status st = strata_session_finish(s, err);
		if (st)
			return st;
		strata_residency *e = strata_session_residency(s);
		strata_telemetry_get(strata_residency_telemetry(e), &snaps[i]);
		strata_telemetry_snapshot_add(&total, &snaps[i]);
		devs[i].name = device_names[i];
		devs[i].snapshot = &snaps[i];
		strata_weight_store_stats one;
		strata_weight_store_get_stats(strata_session_weight_store(s),
					      i ? &one : &ws);
		if (i)
			add_store(&ws, &one);
	}
	strata_session *s0 = strata_batch_session(b, 0);
	const strata_plan *p0 = strata_session_plan(s0);
	strata_residency *e0 = strata_session_residency(s0);
	strata_residency_sizes sizes;
	strata_residency_get_sizes(e0, &sizes);
	uint64_t load_ns = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t l = strata_session_load_ns(strata_batch_session(b, i));
		load_ns = l > load_ns ? l : load_ns;
	}
	strata_telemetry_report r = {
		.model = strata_session_model_path(s0),
		.mode = strata_residency_mode_name(strata_plan_mode(p0)),
		.depth = sizes.depth,
		.lookahead_units = strata_plan_lookahead(p0),
		.queue_depth = strata_plan_queue(p0),
		.static_bytes = sizes.static_bytes,
		.window_bytes = sizes.window_bytes,
		.kv_type = strata_weight_type_name(
			strata_plan_get_options(p0)->shape.kv_type),
		.kv_cache_bytes = strata_plan_get_memory(p0)->kv_cache_bytes,
		.precision = strata_precision_name(strata_session_precision(s0)),
		.load_seconds = load_ns / 1e9,
		.run_seconds = run->run_ns / 1e9,
		.tokens = run->tokens,
		.has_seed = run->has_seed,
		.seed = run->seed,
		.residency = &total,
		.weight_store = &ws,
		.device_count = n,
		.devices = devs,
	};
	/* The shared writer makes the whole document; the router object goes
	 * in before its closing brace, written by the same writer so its
	 * numbers have the same exact forms. */
	strata_json doc, router;
	strata_json_init(&doc, true);
	strata_json_init(&router, true);
	strata_telemetry_write_json(&doc, &r);
	strata_status st = strata_json_finish(&doc, err);
	strata_json_object_begin(&router);
	write_router(&router, b, strata_batch_route_of(b));
	strata_json_object_end(&router);
	if (st == STRATA_OK)
		st = strata_json_finish(&router, err);
	if (st == STRATA_OK)
		st = splice_write(path, &doc, &router, err);
	strata_json_fini(&doc);
	strata_json_fini(&router);
	return st;
}
