/* http_metrics.c - GET /metrics: the server's figures in Prometheus text
 * format 0.0.4: responses, requests, tokens, queue, time to first token,
 * weight passes, transfers and stalls summed over the replicas; then each
 * replica's own (strata_replica_*{replica, device}), the router's
 * decisions and the prefix caches' hits and misses (layer: serve).
 *
 * The sums keep the names a one-replica server always had, so a
 * dashboard of one replica reads the same on several.
 */
#include <stdio.h>
#include <string.h>

#include "serve/http_internal.h"

/* One replica's figures, read once for the whole answer. */
typedef struct replica_figures {
	strata_scheduler_stats st;
	strata_telemetry_snapshot snap;
	strata_router_replica_stats rs;
} replica_figures;

/* ------------------------------------------------------------------------ */

static void read_replica(strata_server *srv, uint32_t i, replica_figures *f)
{
	strata_scheduler *s = strata_router_scheduler(srv->router, i);
	strata_scheduler_get_stats(s, &f->st);
	strata_telemetry_get(strata_residency_telemetry(strata_session_residency(
				     strata_scheduler_session(s))),
			     &f->snap);
	strata_router_get_stats(srv->router, i, &f->rs);
}

/* The replicas' figures added up (prefix_cache: any has one). */
static void add_up(const replica_figures *r, uint32_t n, replica_figures *t)
{
	memset(t, 0, sizeof *t);
	for (uint32_t i = 0; i < n; i++) {
		const strata_scheduler_stats *a = &r[i].st;
		strata_scheduler_stats *b = &t->st;
		b->submitted += a->submitted;
		b->refused_busy += a->refused_busy;
		b->finished += a->finished;
		b->cancelled += a->cancelled;
		b->failed += a->failed;
		b->prompt_tokens += a->prompt_tokens;
		b->prompt_computed += a->prompt_computed;
		b->generated_tokens += a->generated_tokens;
		b->steps += a->steps;
		b->step_rows += a->step_rows;
		b->waiting += a->waiting;
		b->running += a->running;
		b->slots += a->slots;
		b->queue_cap += a->queue_cap;
		b->first_token_ns_sum += a->first_token_ns_sum;
		b->first_token_count += a->first_token_count;
		b->queue_ns_sum += a->queue_ns_sum;
		b->prefix_cache |= a->prefix_cache;
		b->prefix.lookups += a->prefix.lookups;
		b->prefix.hits += a->prefix.hits;
		b->prefix.reused_tokens += a->prefix.reused_tokens;
		b->prefix.saved += a->prefix.saved;
		b->prefix.evictions += a->prefix.evictions;
		b->prefix.bytes += a->prefix.bytes;
		b->prefix.budget_bytes += a->prefix.budget_bytes;
		for (int d = 0; d < STRATA_DIRECTION_COUNT; d++) {
			t->snap.transfers[d].bytes += r[i].snap.transfers[d].bytes;
			t->snap.transfers[d].count += r[i].snap.transfers[d].count;
		}
		t->snap.stalls += r[i].snap.stalls;
		t->snap.stall_ns += r[i].snap.stall_ns;
	}
}

static void responses(FILE *f, strata_server *srv)
{
	static const char *codes[] = {"200", "400", "401", "404", "413", "503"};
	fprintf(f, "# TYPE strata_http_responses_total counter\n");
	for (size_t i = 0; i < 6; i++)
		fprintf(f, "strata_http_responses_total{code=\"%s\"} %llu\n",
			codes[i],
			(unsigned long long)atomic_load(
				&srv->counts.responses[i]));
	fprintf(f, "strata_http_responses_total{code=\"other_4xx\"} %llu\n"
		   "strata_http_responses_total{code=\"5xx\"} %llu\n",
		(unsigned long long)atomic_load(&srv->counts.other_4xx),
		(unsigned long long)atomic_load(&srv->counts.server_errors));
}

/* The sums, under the names of one replica's server. */
static void totals(FILE *f, strata_server *srv, const replica_figures *t)
{
	const strata_scheduler_stats *st = &t->st;
	fprintf(f,
		"# TYPE strata_requests_total counter\n"
		"strata_requests_total{endpoint=\"completions\"} %llu\n"
		"strata_requests_total{endpoint=\"chat_completions\"} %llu\n"
		"# TYPE strata_requests_streamed_total counter\n"
		"strata_requests_streamed_total %llu\n"
		"# TYPE strata_requests_finished_total counter\n"
		"strata_requests_finished_total %llu\n"
		"# TYPE strata_requests_cancelled_total counter\n"
		"strata_requests_cancelled_total %llu\n"
		"# TYPE strata_requests_failed_total counter\n"
		"strata_requests_failed_total %llu\n"
		"# TYPE strata_requests_refused_total counter\n"
		"strata_requests_refused_total %llu\n"
		"# TYPE strata_client_disconnects_total counter\n"
		"strata_client_disconnects_total %llu\n",
		(unsigned long long)atomic_load(&srv->counts.completions),
		(unsigned long long)atomic_load(&srv->counts.chat_completions),
		(unsigned long long)atomic_load(&srv->counts.streams),
		(unsigned long long)st->finished,
		(unsigned long long)st->cancelled,
		(unsigned long long)st->failed,
		(unsigned long long)atomic_load(&srv->counts.refused),
		(unsigned long long)atomic_load(&srv->counts.client_gone));
	fprintf(f,
		"# TYPE strata_prompt_tokens_total counter\n"
		"strata_prompt_tokens_total %llu\n"
		"# TYPE strata_prompt_tokens_computed_total counter\n"
		"strata_prompt_tokens_computed_total %llu\n"
		"# TYPE strata_generated_tokens_total counter\n"
		"strata_generated_tokens_total %llu\n"
		"# TYPE strata_queue_waiting gauge\nstrata_queue_waiting %llu\n"
		"# TYPE strata_queue_running gauge\nstrata_queue_running %llu\n"
		"# TYPE strata_queue_capacity gauge\n"
		"strata_queue_capacity %llu\n"
		"# TYPE strata_slots gauge\nstrata_slots %llu\n"
		"# TYPE strata_weight_passes_total counter\n"
		"strata_weight_passes_total %llu\n"
		"# TYPE strata_step_rows_total counter\n"
		"strata_step_rows_total %llu\n"
		"# TYPE strata_time_to_first_token_seconds summary\n"
		"strata_time_to_first_token_seconds_sum %.6f\n"
		"strata_time_to_first_token_seconds_count %llu\n"
		"# TYPE strata_queue_wait_seconds_sum counter\n"
		"strata_queue_wait_seconds_sum %.6f\n",
		(unsigned long long)st->prompt_tokens,
		(unsigned long long)st->prompt_computed,
		(unsigned long long)st->generated_tokens,
		(unsigned long long)st->waiting,
		(unsigned long long)st->running,
		(unsigned long long)st->queue_cap,
		(unsigned long long)st->slots, (unsigned long long)st->steps,
		(unsigned long long)st->step_rows,
		st->first_token_ns_sum / 1e9,
		(unsigned long long)st->first_token_count,
		st->queue_ns_sum / 1e9);
}

static void transfers(FILE *f, const strata_telemetry_snapshot *snap)
{
	fprintf(f, "# TYPE strata_transfer_bytes_total counter\n");
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++)
		fprintf(f, "strata_transfer_bytes_total{direction=\"%s\"} %llu\n",
			strata_direction_name((strata_direction)d),
			(unsigned long long)snap->transfers[d].bytes);
	fprintf(f, "# TYPE strata_transfers_total counter\n");
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++)
		fprintf(f, "strata_transfers_total{direction=\"%s\"} %llu\n",
			strata_direction_name((strata_direction)d),
			(unsigned long long)snap->transfers[d].count);
	fprintf(f,
		"# TYPE strata_stalls_total counter\nstrata_stalls_total %llu\n"
		"# TYPE strata_stall_seconds_total counter\n"
		"strata_stall_seconds_total %.6f\n",
		(unsigned long long)snap->stalls, snap->stall_ns / 1e9);
}

/* The prefix caches, summed: a lookup is a request's prompt asked for; a
 * miss one that found nothing to reuse. */
static void prefix(FILE *f, const strata_scheduler_stats *st)
{
	const strata_prefix_cache_stats *p = &st->prefix;
	fprintf(f,
		"# TYPE strata_prefix_cache_lookups_total counter\n"
		"strata_prefix_cache_lookups_total %llu\n"
		"# TYPE strata_prefix_cache_hits_total counter\n"
		"strata_prefix_cache_hits_total %llu\n"
		"# TYPE strata_prefix_cache_misses_total counter\n"
		"strata_prefix_cache_misses_total %llu\n"
		"# TYPE strata_prefix_cache_reused_tokens_total counter\n"
		"strata_prefix_cache_reused_tokens_total %llu\n"
		"# TYPE strata_prefix_cache_saved_total counter\n"
		"strata_prefix_cache_saved_total %llu\n"
		"# TYPE strata_prefix_cache_evictions_total counter\n"
		"strata_prefix_cache_evictions_total %llu\n"
		"# TYPE strata_prefix_cache_bytes gauge\n"
		"strata_prefix_cache_bytes %llu\n"
		"# TYPE strata_prefix_cache_budget_bytes gauge\n"
		"strata_prefix_cache_budget_bytes %llu\n",
		(unsigned long long)p->lookups, (unsigned long long)p->hits,
		(unsigned long long)(p->lookups - p->hits),
		(unsigned long long)p->reused_tokens,
		(unsigned long long)p->saved, (unsigned long long)p->evictions,
		(unsigned long long)p->bytes,
		(unsigned long long)p->budget_bytes);
}

/* One family of per-replica values: name, type, and each replica's. */
static void family(FILE *f, strata_server *srv, const char *name,
		   const char *type, const uint64_t *v)
{
	fprintf(f, "# TYPE strata_replica_%s %s\n", name, type);
	for (uint32_t i = 0; i < strata_router_replicas(srv->router); i++)
		fprintf(f, "strata_replica_%s{replica=\"%u\",device=\"%s\"} "
			   "%llu\n",
			name, i, strata_router_name(srv->router, i),
			(unsigned long long)v[i]);
}

/* Each replica's requests, tokens, queue, passes, prefix cache and the
 * router's decisions for it. */
static void per_replica(FILE *f, strata_server *srv,
			const replica_figures *r)
{
	uint32_t n = strata_router_replicas(srv->router);
	uint64_t v[STRATA_BATCH_MAX_REPLICAS] = {0};
#define FAMILY(name, type, expr)                                               \
	do {                                                                   \
		for (uint32_t i = 0; i < n; i++)                               \
			v[i] = (expr);                                         \
		family(f, srv, name, type, v);                                 \
	} while (0)
	FAMILY("requests_total", "counter", r[i].st.submitted);
	FAMILY("requests_finished_total", "counter", r[i].st.finished);
	FAMILY("requests_cancelled_total", "counter", r[i].st.cancelled);
	FAMILY("requests_failed_total", "counter", r[i].st.failed);
	FAMILY("prompt_tokens_total", "counter", r[i].st.prompt_tokens);
	FAMILY("prompt_tokens_computed_total", "counter",
	       r[i].st.prompt_computed);
	FAMILY("generated_tokens_total", "counter", r[i].st.generated_tokens);
	FAMILY("queue_waiting", "gauge", r[i].st.waiting);
	FAMILY("queue_running", "gauge", r[i].st.running);
	FAMILY("weight_passes_total", "counter", r[i].st.steps);
	FAMILY("prefix_cache_hits_total", "counter", r[i].st.prefix.hits);
	FAMILY("prefix_cache_misses_total", "counter",
	       r[i].st.prefix.lookups - r[i].st.prefix.hits);
	FAMILY("prefix_cache_reused_tokens_total", "counter",
	       r[i].st.prefix.reused_tokens);
	FAMILY("routed_total", "counter", r[i].rs.routed);
	FAMILY("routed_home_total", "counter", r[i].rs.routed_home);
	FAMILY("spilled_in_total", "counter", r[i].rs.spilled_in);
	FAMILY("spilled_away_total", "counter", r[i].rs.spilled_away);
	FAMILY("queue_refusals_total", "counter", r[i].rs.refused);
	FAMILY("load", "gauge", r[i].rs.load);
	FAMILY("peak_load", "gauge", r[i].rs.peak_load);
#undef FAMILY
}

/* The router's decisions over every replica. */
static void router(FILE *f, strata_server *srv, const replica_figures *r)
{
	uint64_t home = 0, spilled = 0;
	for (uint32_t i = 0; i < strata_router_replicas(srv->router); i++) {
		home += r[i].rs.routed_home;
		spilled += r[i].rs.spilled_in;
	}
	fprintf(f,
		"# TYPE strata_replicas gauge\nstrata_replicas %u\n"
		"# TYPE strata_router_info gauge\n"
		"strata_router_info{route=\"%s\"} 1\n"
		"# TYPE strata_router_spill_threshold gauge\n"
		"strata_router_spill_threshold %llu\n"
		"# TYPE strata_router_decisions_total counter\n"
		"strata_router_decisions_total{decision=\"home\"} %llu\n"
		"strata_router_decisions_total{decision=\"spilled\"} %llu\n",
		strata_router_replicas(srv->router),
		strata_batch_route_name(strata_router_route(srv->router)),
		(unsigned long long)strata_router_spill_threshold(srv->router),
		(unsigned long long)home, (unsigned long long)spilled);
}

/* ------------------------------------------------------------------------ */

bool strata__http_metrics_text(strata_server *srv, char **buf, size_t *len)
{
	uint32_t n = strata_router_replicas(srv->router);
	replica_figures *r = strata_calloc(n + 1, sizeof *r);
	FILE *f = r ? open_memstream(buf, len) : NULL;
	if (!f) {
		strata_free(r);
		return false;
	}
	for (uint32_t i = 0; i < n; i++)
		read_replica(srv, i, &r[i]);
	add_up(r, n, &r[n]);
	responses(f, srv);
	totals(f, srv, &r[n]);
	transfers(f, &r[n].snap);
	prefix(f, &r[n].st);
	router(f, srv, r);
	per_replica(f, srv, r);
	strata_free(r);
	return fclose(f) == 0;
}
