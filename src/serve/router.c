/* router.c - requests over several continuous schedulers, one per replica:
 * placed by the shard allocator in its in-flight mode (BLAKE3 home by key,
 * spill past the threshold, each request's cost released at its done
 * event), as the batch runner places its requests (layer: serve).
 *
 * Threads: any thread submits; the schedulers' workers fire the events.
 * One mutex guards the allocator (not thread-safe) and the figures; the
 * scheduler calls run outside it. Each request carries a ticket (its
 * replica and cost, the caller's callback) that the wrapped callback
 * frees after the done event, which the scheduler fires exactly once, so
 * every load taken is released exactly once.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "strata/serve.h"

typedef struct replica {
	strata_scheduler *s;
	char name[32];
	strata_router_replica_stats st;
} replica;

struct strata_router {
	strata_router_options o;
	replica *r;
	strata_shard *shard;
	pthread_mutex_t mu;
	uint64_t next; /* round-robin's counter */
	uint32_t context;
};

/* One routed request, from submit to its done event. */
typedef struct ticket {
	strata_router *rt;
	uint32_t replica;
	uint64_t cost;
	strata_scheduler_event_fn fn;
	void *user;
} ticket;

/* ------------------------------------------------------------------------ */

/* Request t's cost leaves its replica; rt->mu is held. Loads only move
 * or drop by what was added, so the release cannot fail. */
static void release_locked(strata_router *rt, const ticket *t)
{
	strata_error ignored;
	(void)strata_shard_release(rt->shard, t->replica, t->cost, &ignored);
}

static bool on_event(void *user, const strata_scheduler_event *ev)
{
	ticket *t = user;
	if (ev->done) {
		strata_router *rt = t->rt;
		pthread_mutex_lock(&rt->mu);
		release_locked(rt, t);
		pthread_mutex_unlock(&rt->mu);
	}
	bool go = t->fn(t->user, ev);
	if (ev->done)
		strata_free(t);
	return go;
}

/* Places a request of t->cost for key: its home and the chosen replica
 * (whose load then holds the cost); rt->mu is held. */
static strata_status place_locked(strata_router *rt, const void *key,
				  size_t key_bytes, ticket *t, uint32_t *home,
				  strata_error *err)
{
	uint32_t n = rt->o.count, d = 0;
	strata_status st;
	if (rt->o.route == STRATA_BATCH_ROUTE_ROUND_ROBIN) {
		d = (uint32_t)(rt->next++ % n);
		*home = d;
		st = strata_shard_seed_load(rt->shard, d, t->cost, err);
	} else {
		st = strata_shard_home(key, key_bytes, n, home, err);
		if (st == STRATA_OK)
			st = strata_shard_assign_home(rt->shard, *home, t->cost,
						      &d, err);
	}
	if (st)
		return st;
	t->replica = d;
	return STRATA_OK;
}

/* The least-loaded replica not yet tried, or UINT32_MAX; rt->mu held. */
static uint32_t next_untried(const strata_router *rt, const bool *tried)
{
	const uint64_t *loads = strata_shard_loads(rt->shard);
	uint32_t best = UINT32_MAX;
	for (uint32_t d = 0; d < rt->o.count; d++)
		if (!tried[d] && (best == UINT32_MAX || loads[d] < loads[best]))
			best = d;
	return best;
}

/* The request's figures once replica d took it, its load then `load`. */
static void count_placed(strata_router *rt, uint32_t home, uint32_t d,
			 uint64_t load)
{
	pthread_mutex_lock(&rt->mu);
	replica *r = &rt->r[d];
	r->st.routed++;
	if (d == home)
		r->st.routed_home++;
	else {
		r->st.spilled_in++;
		rt->r[home].st.spilled_away++;
	}
	if (load > r->st.peak_load)
		r->st.peak_load = load;
	pthread_mutex_unlock(&rt->mu);
}

/* ------------------------------------------------------------------------ */

strata_status strata_router_create(const strata_router_options *o,
				   strata_router **out, strata_error *err)
{
	if (!o || !out || !o->schedulers || o->count == 0 ||
	    o->count > STRATA_BATCH_MAX_REPLICAS)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give between 1 and 64 schedulers",
				   "router: %u replicas", o ? o->count : 0);
	if (o->route == STRATA_BATCH_ROUTE_FOLLOW)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "route by affinity or round-robin",
				   "router: the follow route is the batch "
				   "runner's alone");
	strata_router *rt = strata_calloc_or_error(1, sizeof *rt, "router",
						   err);
	if (!rt)
		return STRATA_E_NOMEM;
	rt->o = *o;
	rt->r = strata_calloc_or_error(o->count, sizeof *rt->r,
				       "router replicas", err);
	rt->context = UINT32_MAX;
	for (uint32_t i = 0; rt->r && i < o->count; i++) {
		rt->r[i].s = o->schedulers[i];
		if (o->names && o->names[i])
			snprintf(rt->r[i].name, sizeof rt->r[i].name, "%s",
				 o->names[i]);
		else
			snprintf(rt->r[i].name, sizeof rt->r[i].name,
				 "replica-%u", i);
		uint32_t c = strata_scheduler_context(o->schedulers[i]);
		rt->context = c < rt->context ? c : rt->context;
	}
	if (!rt->o.spill_threshold)
		rt->o.spill_threshold = rt->r ? rt->context : 1;
	rt->o.schedulers = NULL; /* borrowed array: rt->r holds them */
	rt->o.names = NULL;
	strata_status st = rt->r ? strata_shard_create(o->count,
						       rt->o.spill_threshold,
						       &rt->shard, err)
				 : STRATA_E_NOMEM;
	if (st) {
		strata_free(rt->r);
		strata_free(rt);
		return st;
	}
	pthread_mutex_init(&rt->mu, NULL);
	*out = rt;
	return STRATA_OK;
}

void strata_router_destroy(strata_router *rt)
{
	if (!rt)
		return;
	strata_shard_destroy(rt->shard);
	pthread_mutex_destroy(&rt->mu);
	strata_free(rt->r);
	strata_free(rt);
}

strata_status strata_router_submit(strata_router *rt, const void *key,
				   size_t key_bytes,
				   const strata_scheduler_request *r,
				   uint32_t *replica, uint64_t *id,
				   strata_error *err)
{
	ticket *t = strata_calloc_or_error(1, sizeof *t, "route ticket", err);
	if (!t)
		return STRATA_E_NOMEM;
	*t = (ticket){.rt = rt, .cost = (uint64_t)r->n_prompt + r->max_tokens,
		      .fn = r->on_event, .user = r->user};
	strata_scheduler_request q = *r;
	q.on_event = on_event;
	q.user = t;
	bool tried[STRATA_BATCH_MAX_REPLICAS] = {false};
	uint32_t home = 0;
	pthread_mutex_lock(&rt->mu);
	strata_status st = place_locked(rt, key ? key : "", key ? key_bytes : 0,
					t, &home, err);
	while (st == STRATA_OK) {
		uint32_t d = t->replica;
		uint64_t load = strata_shard_loads(rt->shard)[d];
		pthread_mutex_unlock(&rt->mu);
		/* the done event may fire (and free t) before this returns */
		st = strata_scheduler_submit(rt->r[d].s, &q, id, err);
		if (st == STRATA_OK) {
			count_placed(rt, home, d, load);
			if (replica)
				*replica = d;
			return STRATA_OK;
		}
		pthread_mutex_lock(&rt->mu);
		tried[d] = true;
		if (st == STRATA_E_BUSY)
			rt->r[d].st.refused++;
		uint32_t next = next_untried(rt, tried);
		if (st != STRATA_E_BUSY || next == UINT32_MAX) {
			release_locked(rt, t);
			break;
		}
		/* the queue is full: the load moves to the next least loaded */
		strata_error ignored;
		release_locked(rt, t);
		(void)strata_shard_seed_load(rt->shard, next, t->cost,
					     &ignored);
		t->replica = next;
		st = STRATA_OK;
	}
	pthread_mutex_unlock(&rt->mu);
	strata_free(t);
	return st;
}

void strata_router_cancel(strata_router *rt, uint32_t replica, uint64_t id)
{
	if (rt && replica < rt->o.count)
		strata_scheduler_cancel(rt->r[replica].s, id);
}

typedef struct drain_job {
	strata_scheduler *s;
	uint64_t grace_ns;
	pthread_t thread;
	bool started;
} drain_job;

static void *drain_one(void *arg)
{
	drain_job *j = arg;
	strata_scheduler_drain(j->s, j->grace_ns);
	return NULL;
}

void strata_router_drain(strata_router *rt, uint64_t grace_ns)
{
	if (!rt)
		return;
	drain_job jobs[STRATA_BATCH_MAX_REPLICAS];
	for (uint32_t i = 0; i < rt->o.count; i++) {
		jobs[i] = (drain_job){.s = rt->r[i].s, .grace_ns = grace_ns};
		/* one at a time where no thread can be had: still every
		 * replica drained, each within its grace */
		jobs[i].started = i > 0 && pthread_create(&jobs[i].thread, NULL,
							  drain_one,
							  &jobs[i]) == 0;
		if (i > 0 && !jobs[i].started)
			drain_one(&jobs[i]);
	}
	drain_one(&jobs[0]);
	for (uint32_t i = 1; i < rt->o.count; i++)
		if (jobs[i].started)
			pthread_join(jobs[i].thread, NULL);
}

uint32_t strata_router_replicas(const strata_router *rt)
{
	return rt->o.count;
}

strata_scheduler *strata_router_scheduler(strata_router *rt, uint32_t i)
{
	return i < rt->o.count ? rt->r[i].s : NULL;
}

const char *strata_router_name(const strata_router *rt, uint32_t i)
{
	return i < rt->o.count ? rt->r[i].name : "unknown";
}

strata_batch_route strata_router_route(const strata_router *rt)
{
	return rt->o.route;
}

uint64_t strata_router_spill_threshold(const strata_router *rt)
{
	return rt->o.spill_threshold;
}

uint32_t strata_router_context(const strata_router *rt)
{
	return rt->context;
}

void strata_router_get_stats(strata_router *rt, uint32_t replica,
			     strata_router_replica_stats *out)
{
	memset(out, 0, sizeof *out);
	if (replica >= rt->o.count)
		return;
	pthread_mutex_lock(&rt->mu);
	*out = rt->r[replica].st;
	out->load = strata_shard_loads(rt->shard)[replica];
	pthread_mutex_unlock(&rt->mu);
}
