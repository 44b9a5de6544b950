/* telemetry_json.c - the telemetry document (docs/telemetry.md) and the
 * end-of-run summary for people (layer: residency; seed 001's projection). */
#include <inttypes.h>

#include "strata/residency.h"

static double seconds(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* The `residency` object: exactly the seed's fields, transfers in the fixed
 * order of STRATA_DIRECTION_MAP. */
static void write_residency(strata_json *j, const strata_telemetry_snapshot *s)
{
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "planned_disk_bytes", s->planned_bytes[STRATA_TIER_DISK]);
	strata_json_kv_u64(j, "planned_host_bytes", s->planned_bytes[STRATA_TIER_HOST]);
	strata_json_kv_u64(j, "planned_device_bytes", s->planned_bytes[STRATA_TIER_DEVICE]);
	strata_json_kv_u64(j, "current_host_bytes", s->current_bytes[STRATA_TIER_HOST]);
	strata_json_kv_u64(j, "current_device_bytes", s->current_bytes[STRATA_TIER_DEVICE]);
	strata_json_kv_u64(j, "peak_host_bytes", s->peak_bytes[STRATA_TIER_HOST]);
	strata_json_kv_u64(j, "peak_device_bytes", s->peak_bytes[STRATA_TIER_DEVICE]);
	strata_json_key(j, "transfers");
	strata_json_array_begin(j);
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++) {
		const strata_transfer_stats *x = &s->transfers[d];
		strata_json_object_begin(j);
		strata_json_kv_string(j, "direction", strata_direction_name(d));
		strata_json_kv_u64(j, "count", x->count);
		strata_json_kv_u64(j, "bytes", x->bytes);
		strata_json_kv_double(j, "seconds", seconds(x->ns));
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
	strata_json_object_end(j);
}

static void write_paths(strata_json *j, const char *key, size_t n,
			const char *const *paths)
{
	strata_json_key(j, key);
	strata_json_array_begin(j);
	for (size_t i = 0; i < n; i++)
		strata_json_string(j, paths[i]);
	strata_json_array_end(j);
}

static void write_store(strata_json *j, const strata_weight_store_stats *w)
{
	static const strata_weight_store_stats none = {.backend = "none"};
	if (!w)
		w = &none;
	strata_json_object_begin(j);
	strata_json_kv_string(j, "backend", w->backend ? w->backend : "none");
	strata_json_kv_u64(j, "cache_hits", w->cache_hits);
	strata_json_kv_u64(j, "cache_misses", w->cache_misses);
	strata_json_kv_u64(j, "evictions", w->evictions);
	strata_json_kv_u64(j, "currently_cached_shards", w->currently_cached_shards);
	write_paths(j, "touched_shard_paths", w->touched_count, w->touched_shard_paths);
	write_paths(j, "payload_shard_paths", w->payload_count, w->payload_shard_paths);
	strata_json_kv_u64(j, "physical_reads", w->physical_reads);
	strata_json_kv_u64(j, "physical_read_bytes", w->physical_read_bytes);
	strata_json_kv_u64(j, "coalesced_group_hits", w->coalesced_group_hits);
	strata_json_object_end(j);
}

static void write_device(strata_json *j, const strata_telemetry_device *d)
{
	static const strata_telemetry_snapshot zero;
	const strata_telemetry_snapshot *s = d->snapshot ? d->snapshot : &zero;
	strata_json_object_begin(j);
	strata_json_kv_string(j, "name", d->name ? d->name : "unknown");
	strata_json_kv_u64(j, "budget_device_bytes", s->budget_bytes[STRATA_TIER_DEVICE]);
	strata_json_kv_u64(j, "budget_host_bytes", s->budget_bytes[STRATA_TIER_HOST]);
	strata_json_key(j, "residency");
	write_residency(j, s);
	strata_json_kv_u64(j, "prefetch_requests", s->prefetch_requests);
	strata_json_kv_u64(j, "prefetch_hits", s->prefetch_hits);
	strata_json_kv_u64(j, "prefetch_misses", s->prefetch_misses);
	strata_json_kv_u64(j, "stalls", s->stalls);
	strata_json_kv_double(j, "stall_seconds", seconds(s->stall_ns));
	strata_json_kv_u64(j, "evictions", s->evictions);
	strata_json_kv_u64(j, "evicted_bytes", s->evicted_bytes);
	strata_json_object_end(j);
}

static void write_stats(strata_json *j, const char *key, const char *name,
			const strata_transfer_stats *x)
{
	strata_json_object_begin(j);
	if (key)
		strata_json_kv_string(j, key, name);
	strata_json_kv_u64(j, "count", x->count);
	strata_json_kv_u64(j, "bytes", x->bytes);
	strata_json_kv_double(j, "seconds", seconds(x->ns));
	strata_json_object_end(j);
}

static double share(uint64_t ns, double run_seconds)
{
	return run_seconds > 0 ? seconds(ns) / run_seconds : 0.0;
}

/* The `placement` object (beside the seed's): per unit kind the units
 * acquired, their bytes and the time they were held (a cpu unit's is the
 * CPU's compute), the activation and KV staging copies between sites,
 * and how much of the run each link and the CPU were busy. */
static void write_placement(strata_json *j, const strata_telemetry_snapshot *s,
			    double run_seconds)
{
	static const char *const links[] = {"host_to_device", "device_to_host",
					    "device_to_device"};
	strata_json_object_begin(j);
	strata_json_key(j, "units");
	strata_json_object_begin(j);
	for (int k = 0; k < STRATA_PLACE_COUNT; k++) {
		strata_json_key(j, strata_place_name((strata_place)k));
		write_stats(j, NULL, NULL, &s->units[k]);
	}
	strata_json_object_end(j);
	strata_json_key(j, "activations");
	strata_json_array_begin(j);
	for (int k = 0; k < 3; k++)
		write_stats(j, "link", links[k], &s->activations[k]);
	strata_json_array_end(j);
	strata_json_key(j, "kv_staged");
	strata_json_array_begin(j);
	write_stats(j, "direction", "to_computing_site", &s->kv_staged[0]);
	write_stats(j, "direction", "back_to_cache", &s->kv_staged[1]);
	strata_json_array_end(j);
	strata_json_key(j, "busy_fraction");
	strata_json_object_begin(j);
	strata_json_kv_double(j, "host_to_device",
			      share(s->transfers[STRATA_DIR_HOST_TO_DEVICE].ns,
				    run_seconds));
	strata_json_kv_double(j, "disk",
			      share(strata_sat_add_u64(
					    s->transfers[STRATA_DIR_DISK_TO_HOST].ns,
					    s->transfers[STRATA_DIR_DISK_TO_DEVICE].ns),
				    run_seconds));
	strata_json_kv_double(j, "cpu_compute",
			      share(s->units[STRATA_PLACE_CPU].ns, run_seconds));
	uint64_t act = 0;
	for (int k = 0; k < 3; k++)
		act = strata_sat_add_u64(act, s->activations[k].ns);
	strata_json_kv_double(j, "activations", share(act, run_seconds));
	strata_json_object_end(j);
	strata_json_object_end(j);
}

/* ------------------------------------------------------------------------ */

/* "experts": the CPU's experts and the device cache's counts. */
static void write_experts(strata_json *j, const strata_telemetry_experts *x)
{
	strata_json_key(j, "experts");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "layers", x->layers);
	strata_json_kv_u64(j, "cache_slots", x->cache_slots);
	strata_json_kv_u64(j, "routed", x->routed);
	strata_json_kv_u64(j, "hits", x->hits);
	strata_json_kv_u64(j, "misses", x->misses);
	strata_json_kv_u64(j, "streamed", x->streamed);
	strata_json_kv_u64(j, "admissions", x->admissions);
	strata_json_kv_u64(j, "evictions", x->evictions);
	strata_json_kv_u64(j, "cpu_bytes", x->cpu_bytes);
	strata_json_kv_u64(j, "device_bytes", x->device_bytes);
	strata_json_kv_u64(j, "upload_bytes", x->upload_bytes);
	strata_json_object_end(j);
}

void strata_telemetry_write_json(strata_json *j,
				 const strata_telemetry_report *r)
{
	static const strata_telemetry_snapshot zero;
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "schema_version", STRATA_TELEMETRY_SCHEMA_VERSION);
	strata_json_key(j, "model");
	strata_json_object_begin(j);
	strata_json_kv_string(j, "path", r->model ? r->model : "");
	strata_json_object_end(j);

	strata_json_key(j, "plan");
	strata_json_object_begin(j);
	strata_json_kv_string(j, "mode", r->mode ? r->mode : "unknown");
	strata_json_kv_u64(j, "depth", r->depth);
	strata_json_kv_u64(j, "lookahead_units", r->lookahead_units);
	strata_json_kv_u64(j, "queue_depth", r->queue_depth);
	strata_json_kv_u64(j, "static_bytes", r->static_bytes);
	strata_json_kv_u64(j, "window_bytes", r->window_bytes);
	strata_json_kv_string(j, "kv_type", r->kv_type ? r->kv_type : "f32");
	strata_json_kv_u64(j, "kv_cache_bytes", r->kv_cache_bytes);
	strata_json_kv_string(j, "precision",
			      r->precision ? r->precision : "fast");
	strata_json_object_end(j);

	strata_json_key(j, "timing");
	strata_json_object_begin(j);
	strata_json_kv_double(j, "load_seconds", r->load_seconds);
	strata_json_kv_double(j, "run_seconds", r->run_seconds);
	strata_json_kv_u64(j, "tokens", r->tokens);
	strata_json_kv_double(j, "tokens_per_second",
			      r->run_seconds > 0 ? (double)r->tokens / r->run_seconds
						 : 0.0);
	strata_json_object_end(j);

	if (r->has_seed) {
		strata_json_key(j, "sampling");
		strata_json_object_begin(j);
		strata_json_kv_u64(j, "seed", r->seed);
		strata_json_object_end(j);
	}

	strata_json_key(j, "residency");
	write_residency(j, r->residency ? r->residency : &zero);
	strata_json_key(j, "weight_store");
	write_store(j, r->weight_store);
	strata_json_key(j, "devices");
	strata_json_array_begin(j);
	for (size_t i = 0; i < r->device_count; i++)
		write_device(j, &r->devices[i]);
	strata_json_array_end(j);
	strata_json_key(j, "placement");
	write_placement(j, r->residency ? r->residency : &zero, r->run_seconds);
	if (r->experts)
		write_experts(j, r->experts);
	strata_json_object_end(j);
}

/* ------------------------------------------------------------------------ */

/* Units per kind with the time they were held, and the activation
 * copies between sites, where there were any. */
static void print_placement(FILE *f, const strata_telemetry_snapshot *s)
{
	static const char *const links[] = {"host_to_device", "device_to_host",
					    "device_to_device"};
	char a[32];
	int kinds = 0;
	for (int k = 0; k < STRATA_PLACE_COUNT; k++)
		kinds += s->units[k].count > 0;
	if (kinds > 1 || s->units[STRATA_PLACE_CPU].count) {
		fprintf(f, "  units by placement:");
		for (int k = 0; k < STRATA_PLACE_COUNT; k++)
			if (s->units[k].count)
				fprintf(f, " %s %" PRIu64 " (%s, held %.3f s)",
					strata_place_name((strata_place)k),
					s->units[k].count,
					strata_size_format(s->units[k].bytes, a, sizeof a),
					seconds(s->units[k].ns));
		fprintf(f, "\n");
	}
	for (int k = 0; k < 3; k++)
		if (s->activations[k].count)
			fprintf(f, "  activations %-16s %10s in %6" PRIu64 " copies, %.3f s\n",
				links[k],
				strata_size_format(s->activations[k].bytes, a, sizeof a),
				s->activations[k].count, seconds(s->activations[k].ns));
	if (s->kv_staged[0].count || s->kv_staged[1].count)
		fprintf(f, "  KV staged: %" PRIu64 " copies to the computing site, %" PRIu64 " back\n",
			s->kv_staged[0].count, s->kv_staged[1].count);
}

void strata_telemetry_print_summary(FILE *f, const strata_telemetry_snapshot *s)
{
	char a[32], b[32], c[32];
	fprintf(f, "residency:\n");
	bool moved = false;
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++) {
		const strata_transfer_stats *x = &s->transfers[d];
		if (!x->count)
			continue;
		moved = true;
		double sec = seconds(x->ns);
		fprintf(f, "  %-15s %10s in %6" PRIu64 " transfers, %.3f s",
			strata_direction_name(d), strata_size_format(x->bytes, a, sizeof a),
			x->count, sec);
		if (sec > 0)
			fprintf(f, " (%.2f GB/s)", (double)x->bytes / sec / 1e9);
		fprintf(f, "\n");
	}
	if (!moved)
		fprintf(f, "  no transfers\n");
	static const strata_tier shown[] = {STRATA_TIER_DEVICE, STRATA_TIER_HOST};
	for (size_t i = 0; i < sizeof shown / sizeof *shown; i++) {
		strata_tier t = shown[i];
		fprintf(f, "  peak %-6s %10s of %s planned", strata_tier_name(t),
			strata_size_format(s->peak_bytes[t], a, sizeof a),
			strata_size_format(s->planned_bytes[t], b, sizeof b));
		if (s->budget_bytes[t])
			fprintf(f, ", budget %s",
				strata_size_format(s->budget_bytes[t], c, sizeof c));
		fprintf(f, "\n");
	}
	/* Each acquire either found its unit ready or waited (a stall); a
	 * miss is a stall whose load had not even started. The loads
	 * started ahead are a separate count, not a sum of these. */
	fprintf(f, "  units acquired: %" PRIu64 "; %" PRIu64 " found ready, %" PRIu64
		   " waited %.3f s in all (%" PRIu64 " of them before their load "
		   "had started)\n",
		strata_sat_add_u64(s->prefetch_hits, s->stalls), s->prefetch_hits,
		s->stalls, seconds(s->stall_ns), s->prefetch_misses);
	fprintf(f, "  prefetch: %" PRIu64 " unit loads started ahead of need\n",
		s->prefetch_requests);
	if (s->evictions)
		fprintf(f, "  evictions: %" PRIu64 " (%s)\n", s->evictions,
			strata_size_format(s->evicted_bytes, a, sizeof a));
	print_placement(f, s);
}
