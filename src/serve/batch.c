/* batch.c - the batch runner: replicas with one worker thread each, requests
 * routed by the shard allocator in its in-flight mode, results kept in input
 * order (layer: serve).
 *
 * Threads: the caller's thread dispatches; each replica's worker opens its
 * own session (so a CUDA replica binds its device on the thread that runs
 * it), then takes requests from its queue, up to --batch B at a time, and
 * steps them together (batch_seqs.c). One mutex guards the queues, the
 * allocator (which is not thread-safe) and the run's bookkeeping; the
 * forward passes run outside it.
 */
#include <pthread.h>
#include <string.h>

#include "serve/batch_internal.h"

typedef struct replica {
	strata_batch *b;
	uint32_t index;
	pthread_t thread;
	bool started, ready;
	strata_status open_status;
	strata_error open_err;
	strata_session *session;
	strata_prefix_cache *cache;
	strata__batch_seqs seqs; /* its running requests (this thread's) */
	size_t *queue; /* ring of request indices, queue_cap */
	size_t head, count;
	bool dead;   /* failed in this run: takes no more of its work */
	long inject; /* test hook: fail the request after this many; -1 off */
	strata_batch_replica_stats stats;
} replica;

struct strata_batch {
	strata_batch_options o;
	uint32_t device_indices[STRATA_BATCH_MAX_REPLICAS];
	strata_shard *shard;
	replica *r;
	size_t queue_cap;
	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	bool stop;
	/* the run in progress */
	const strata_batch_request *reqs;
	strata_batch_result *results;
	uint64_t *dispatched_ns;
	uint64_t *failures; /* per request: failed attempts in this run */
	bool *finished;	    /* per request: its result is complete */
	size_t delivered;   /* results handed to o.on_result so far */
	bool refused;	    /* o.on_result failed: hand over no more */
	size_t in_flight;
	bool failed;
	size_t failed_request;
	strata_error fail_err;
	strata__residence residence; /* the follow route's; across runs */
	bool batch_auto; /* --batch auto: the plan picked the batch */
};

/* ------------------------------------------------------------------------ */

/* Records the first failure of the run; b->mu is held. */
static void fail_locked(strata_batch *b, const strata_error *e,
			uint32_t replica_index, size_t request)
{
	if (b->failed)
		return;
	b->failed = true;
	b->failed_request = request;
	strata_fail(&b->fail_err, STRATA_E_INFER_REPLICA, e->fix,
		    "replica %u failed on request %zu%s: %s", replica_index,
		    request,
		    b->failures[request] > 1 ? ", which had failed on "
					       "another replica too"
					 : " and no replica is left",
		    e->message);
}

/* The live replica with the least load, or UINT32_MAX; b->mu is held. */
static uint32_t least_live(const strata_batch *b)
{
	const uint64_t *loads = strata_shard_loads(b->shard);
	uint32_t best = UINT32_MAX;
	for (uint32_t d = 0; d < b->o.replicas; d++)
		if (!b->r[d].dead &&
		    (best == UINT32_MAX || loads[d] < loads[best]))
			best = d;
	return best;
}

/* Moves request i's load from replica `from` to `to` and queues it there
 * (a queue holds every request in flight, so there is room); b->mu is
 * held. Loads only move, so they cannot overflow. */
static void requeue_locked(strata_batch *b, size_t i, uint32_t from,
			   uint32_t to)
{
	const strata_batch_request *q = &b->reqs[i];
	uint64_t cost = (uint64_t)q->n_prompt + q->max_tokens;
	strata_error ignored;
	(void)strata_shard_release(b->shard, from, cost, &ignored);
	(void)strata_shard_seed_load(b->shard, to, cost, &ignored);
	replica *r = &b->r[to];
	b->results[i].device = to;
	r->queue[(r->head + r->count) % b->queue_cap] = i;
	r->count++;
	uint64_t load = strata_shard_loads(b->shard)[to];
	if (load > r->stats.peak_load)
		r->stats.peak_load = load;
}

/* Request i leaves replica r, finished or dropped: its load released, one
 * fewer in flight; b->mu is held. */
static void release_locked(strata_batch *b, replica *r, size_t i)
{
	const strata_batch_request *q = &b->reqs[i];
	strata_error ignored;
	(void)strata_shard_release(b->shard, r->index,
				   (uint64_t)q->n_prompt + q->max_tokens,
				   &ignored);
	b->in_flight--;
}

/* Request i leaves a failed replica for the least-loaded live one, its
 * partial result dropped; b->mu is held. */
static void move_one_locked(strata_batch *b, replica *r, size_t i)
{
	strata_batch_result *res = &b->results[i];
	strata_free(res->tokens);
	uint32_t home = res->home_device, resident = res->resident_device;
	memset(res, 0, sizeof *res);
	res->home_device = home;
	res->resident_device = resident;
	requeue_locked(b, i, r->index, least_live(b));
	r->stats.moved_away++;
}

/* Replica r failed requests failed[0..nf) (nf >= 1) while beside[0..nb)
 * ran with them: r takes no more work in this run, and all of them with
 * everything queued on r move to the least-loaded live replicas. False
 * (the batch then fails, *culprit naming the request) when one of the
 * failed had failed before, when no replica is left, or when the run is
 * already failing. b->mu is held. */
static bool move_off_locked(strata_batch *b, replica *r, const size_t *failed,
			    uint32_t nf, const size_t *beside, uint32_t nb,
			    size_t *culprit)
{
	bool again = false;
	r->dead = true;
	r->stats.failures += nf;
	*culprit = failed[0];
	for (uint32_t k = 0; k < nf; k++)
		if (b->failures[failed[k]]++ && !again) {
			again = true;
			*culprit = failed[k];
		}
	if (b->failed || again || least_live(b) == UINT32_MAX)
		return false;
	for (uint32_t k = 0; k < nf; k++)
		move_one_locked(b, r, failed[k]);
	for (uint32_t k = 0; k < nb; k++)
		move_one_locked(b, r, beside[k]);
	while (r->count) {
		size_t j = r->queue[r->head];
		r->head = (r->head + 1) % b->queue_cap;
		r->count--;
		requeue_locked(b, j, r->index, least_live(b));
		r->stats.moved_away++;
	}
	pthread_cond_broadcast(&b->work_cv);
	return true;
}

/* After a round: finished requests leave; on a failure (rs) the failed
 * ones and those beside them move off r, or the batch fails and they are
 * dropped. b->mu is held. */
static void settle_locked(strata_batch *b, replica *r, strata_status rs,
			  const strata_error *e)
{
	strata__batch_seqs *ss = &r->seqs;
	size_t failed[STRATA_FORWARD_MAX_SEQUENCES];
	size_t beside[STRATA_FORWARD_MAX_SEQUENCES];
	uint32_t nf = 0, nb = 0;
	for (uint32_t slot = 0; slot < ss->count; slot++) {
		strata__batch_seq *s = &ss->seq[slot];
		size_t i = s->req;
		if (i == SIZE_MAX || (!s->done && rs == STRATA_OK))
			continue;
		if (s->done) {
			r->stats.load_charged += (uint64_t)b->reqs[i].n_prompt +
						 b->reqs[i].max_tokens;
			release_locked(b, r, i);
			b->finished[i] = true;
		} else if (s->failed)
			failed[nf++] = i;
		else
			beside[nb++] = i;
		strata__batch_seq_end(ss, slot);
	}
	if (rs != STRATA_OK && nf == 0) {
		/* a failure no slot took: it counts against all of them */
		memcpy(failed, beside, nb * sizeof *failed);
		nf = nb;
		nb = 0;
	}
	size_t culprit;
	if (rs == STRATA_OK || nf == 0 ||
	    move_off_locked(b, r, failed, nf, beside, nb, &culprit))
		return;
	fail_locked(b, e, r->index, culprit);
	for (uint32_t k = 0; k < nf; k++)
		release_locked(b, r, failed[k]);
	for (uint32_t k = 0; k < nb; k++)
		release_locked(b, r, beside[k]);
}

/* The batch is failing (or r never opened): queued and running requests
 * leave r without running. b->mu is held. */
static void drop_all_locked(strata_batch *b, replica *r)
{
	while (r->count) {
		size_t i = r->queue[r->head];
		r->head = (r->head + 1) % b->queue_cap;
		r->count--;
		release_locked(b, r, i);
	}
	for (uint32_t slot = 0; slot < r->seqs.count; slot++) {
		size_t i = r->seqs.seq[slot].req;
		if (i == SIZE_MAX)
			continue;
		strata__batch_seq_end(&r->seqs, slot);
		release_locked(b, r, i);
	}
}

/* Outside the mutex: starts the joiners join[0..n) (each already given a
 * slot: its prefix restored, nothing computed), then one step, one pass
 * of the weights, of every running request: decode tokens and prompt
 * chunks together. The first failure stops the round; the slots say
 * which requests it touched. */
static strata_status run_round(replica *r, const uint32_t *slots,
			       const bool *inject, uint32_t n, strata_error *e)
{
	strata_batch *b = r->b;
	for (uint32_t k = 0; k < n; k++) {
		strata__batch_seq *s = &r->seqs.seq[slots[k]];
		size_t i = s->req;
		if (inject[k]) {
			s->failed = true;
			return strata_fail(e, STRATA_E_DEVICE,
					   "none: a test injected it",
					   "injected replica failure");
		}
		strata_status st = strata__batch_seq_start(
			&r->seqs, slots[k], i, &b->reqs[i], &b->results[i],
			r->cache, e);
		if (st)
			return st;
	}
	return strata__batch_seqs_step(&r->seqs, e);
}

/* Opens the replica's session and its sequence slots (on this thread). */
static strata_status open_replica(replica *r)
{
	strata_batch *b = r->b;
	strata_session_options so = b->o.session;
	if (b->o.device_indices)
		so.device_index = b->o.device_indices[r->index];
	strata_status st = strata_session_open(&so, &r->session,
					       &r->open_err);
	if (st == STRATA_OK)
		st = strata__batch_seqs_init(
			&r->seqs, r->session,
			b->o.eos >= 0 ? b->o.eos
				      : strata_session_hparams(r->session)->eos,
			b->o.route != STRATA_BATCH_ROUTE_ROUND_ROBIN, &r->stats,
			&r->open_err);
	r->seqs.tok = b->o.tokenizer;
	r->seqs.ends_of = b->o.ends_of;
	r->seqs.ends_user = b->o.ends_user;
	return st;
}

/* Each round: queued requests join free slots (at a step boundary), one
 * step reads the joiners' prompts beside every running request's decode
 * token, and finished requests leave. */
static void *worker(void *arg)
{
	replica *r = arg;
	strata_batch *b = r->b;
	strata_status st = open_replica(r);
	uint32_t slots[STRATA_FORWARD_MAX_SEQUENCES];
	bool inject[STRATA_FORWARD_MAX_SEQUENCES];
	pthread_mutex_lock(&b->mu);
	r->open_status = st;
	r->ready = true;
	pthread_cond_broadcast(&b->done_cv);
	for (;;) {
		uint32_t running = strata__batch_seqs_taken(&r->seqs);
		while (!b->stop && r->count == 0 && running == 0)
			pthread_cond_wait(&b->work_cv, &b->mu);
		if (r->count == 0 && running == 0)
			break; /* stopping with nothing queued */
		if (b->failed || st != STRATA_OK) {
			drop_all_locked(b, r);
			pthread_cond_broadcast(&b->done_cv);
			continue;
		}
		uint32_t n = 0, slot;
		while (r->count &&
		       (slot = strata__batch_seqs_free_slot(&r->seqs)) !=
			       UINT32_MAX) {
			size_t i = r->queue[r->head];
			r->head = (r->head + 1) % b->queue_cap;
			r->count--;
			r->seqs.seq[slot].req = i; /* taken; started below */
			b->results[i].queue_ns =
				strata_now_ns() - b->dispatched_ns[i];
			inject[n] = r->inject == 0;
			r->inject -= r->inject >= 0;
			slots[n++] = slot;
		}
		pthread_mutex_unlock(&b->mu);
		strata_error e;
		strata_status rs = run_round(r, slots, inject, n, &e);
		pthread_mutex_lock(&b->mu);
		settle_locked(b, r, rs, &e);
		pthread_cond_broadcast(&b->done_cv);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* Stops and joins every started worker, closes what they opened. */
static void stop_workers(strata_batch *b)
{
	pthread_mutex_lock(&b->mu);
	b->stop = true;
	pthread_cond_broadcast(&b->work_cv);
	pthread_mutex_unlock(&b->mu);
	for (uint32_t i = 0; i < b->o.replicas; i++)
		if (b->r[i].started)
			pthread_join(b->r[i].thread, NULL);
}

/* ------------------------------------------------------------------------ */

const char *strata_batch_route_name(strata_batch_route r)
{
	switch (r) {
#define STRATA_BATCH_ROUTE_CASE(name, text)                                    \
	case STRATA_BATCH_ROUTE_##name:                                        \
		return text;
		STRATA_BATCH_ROUTE_MAP(STRATA_BATCH_ROUTE_CASE)
#undef STRATA_BATCH_ROUTE_CASE
	}
	return "unknown";
}

void strata_batch_destroy(strata_batch *b)
{
	if (!b)
		return;
	if (b->r) {
		stop_workers(b);
		for (uint32_t i = 0; i < b->o.replicas; i++) {
			strata__batch_seqs_fini(&b->r[i].seqs);
			/* before the session: its chunks are the backend's */
			strata_prefix_cache_destroy(b->r[i].cache);
			strata_session_close(b->r[i].session);
			strata_free(b->r[i].queue);
		}
	}
	strata_free(b->r);
	strata__residence_fini(&b->residence);
	strata_shard_destroy(b->shard);
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->work_cv);
	pthread_cond_destroy(&b->done_cv);
	strata_free(b);
}

/* Replica i's prefix cache bound: the option's bytes, or what its plan
 * leaves spare of the host budget (docs/batch.md). */
static uint64_t cache_budget(const strata_batch *b, uint32_t i)
{
	if (b->o.prefix_cache_bytes != STRATA_BATCH_PREFIX_CACHE_FROM_PLAN)
		return b->o.prefix_cache_bytes;
	return strata_plan_host_spare_bytes(
		strata_session_plan(b->r[i].session));
}

/* The follow route's room per replica: its prefix cache's bound, each
 * cached prompt position taking its KV and its id. */
static strata_status residence_rooms(strata_batch *b, strata_error *err)
{
	uint64_t per;
	strata_status st = strata_kv_cache_bytes(
		strata_forward_kv_cache(
			strata_session_forward(b->r[0].session)),
		1, &per, err);
	for (uint32_t i = 0; st == STRATA_OK && i < b->o.replicas; i++)
		strata__residence_set_room(&b->residence, i,
					   cache_budget(b, i),
					   per + sizeof(int32_t));
	return st;
}

/* --batch B, 0 being 1 (a B past the forward pass's cap fails the
 * sessions' opening, with its own error). */
static uint32_t sequences_of(const strata_batch_options *o)
{
	/* --batch auto: the most it may pick until the sessions say */
	uint64_t n = o->session.batch_auto_max ? o->session.batch_auto_max
					       : o->session.plan.shape.batch;
	return n == 0 ? 1
	       : n > STRATA_FORWARD_MAX_SEQUENCES
		       ? STRATA_FORWARD_MAX_SEQUENCES
		       : (uint32_t)n;
}

/* B running and as many waiting to join as one step can free, so a slot
 * that frees at a step boundary finds a request queued. */
static size_t inflight_per_replica(const strata_batch_options *o)
{
	size_t two_b = 2 * (size_t)sequences_of(o);
	return two_b > STRATA_BATCH_INFLIGHT_PER_REPLICA
		       ? two_b
		       : STRATA_BATCH_INFLIGHT_PER_REPLICA;
}

/* Starts the workers and waits until each has opened its session. */
static strata_status start_workers(strata_batch *b, strata_error *err)
{
	for (uint32_t i = 0; i < b->o.replicas; i++) {
		replica *r = &b->r[i];
		if (pthread_create(&r->thread, NULL, worker, r) != 0)
			return strata_fail(err, STRATA_E_THREAD,
					   "run fewer replicas",
					   "cannot start the worker thread of "
					   "replica %u", i);
		r->started = true;
	}
	pthread_mutex_lock(&b->mu);
	strata_status st = STRATA_OK;
	for (uint32_t i = 0; i < b->o.replicas; i++) {
		while (!b->r[i].ready)
			pthread_cond_wait(&b->done_cv, &b->mu);
		if (b->r[i].open_status && st == STRATA_OK) {
			st = b->r[i].open_status;
			if (err) {
				*err = b->r[i].open_err;
				strata_error_prefix(err, "replica %u", i);
			}
		}
	}
	pthread_mutex_unlock(&b->mu);
	return st;
}

strata_status strata_batch_create(const strata_batch_options *o,
				  strata_batch **out, strata_error *err)
{
	if (!o || !out || o->replicas == 0 ||
	    o->replicas > STRATA_BATCH_MAX_REPLICAS)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give between 1 and 64 replicas",
				   "batch: %u replicas",
				   o ? o->replicas : 0);
	strata_batch *b = strata_calloc_or_error(1, sizeof *b, "batch", err);
	if (!b)
		return STRATA_E_NOMEM;
	b->o = *o;
	strata__residence_init(&b->residence, o->replicas);
	if (!b->o.session.plan.host_shared_by)
		b->o.session.plan.host_shared_by = o->replicas;
	b->o.device_indices = NULL; /* read by the workers before create ends */
	if (o->device_indices) {
		b->o.device_indices = b->device_indices;
		memcpy(b->device_indices, o->device_indices,
		       o->replicas * sizeof *o->device_indices);
	}
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->work_cv, NULL);
	pthread_cond_init(&b->done_cv, NULL);
	b->queue_cap = (size_t)o->replicas * inflight_per_replica(o);
	strata_status st = strata_shard_create(o->replicas, o->spill_threshold,
					       &b->shard, err);
	if (st == STRATA_OK && !(b->r = strata_calloc_or_error(
					 o->replicas, sizeof *b->r,
					 "replicas", err)))
		st = STRATA_E_NOMEM;
	for (uint32_t i = 0; st == STRATA_OK && i < o->replicas; i++) {
		b->r[i].b = b;
		b->r[i].index = i;
		b->r[i].inject = -1;
		if (!(b->r[i].queue = strata_calloc_or_error(
			      b->queue_cap, sizeof(size_t), "replica queue",
			      err)))
			st = STRATA_E_NOMEM;
	}
	if (st == STRATA_OK)
		st = start_workers(b, err);
	b->batch_auto = o->session.batch_auto_max != 0;
	if (st == STRATA_OK && o->session.batch_auto_max) {
		/* the batch the first replica's plan picked (every replica
		 * plans the same shape on the same kind of device) */
		b->o.session.plan.shape.batch = strata_forward_sequences(
			strata_session_forward(b->r[0].session));
		b->o.session.batch_auto_max = 0;
	}
	/* After the sessions open: a bound from the plan needs the plan.
	 * The workers touch a cache only for a request, dispatched later
	 * under the mutex. */
	for (uint32_t i = 0; st == STRATA_OK && o->prefix_cache_bytes &&
			     i < o->replicas; i++)
		st = strata_prefix_cache_create(
			strata_session_backend(b->r[i].session),
			cache_budget(b, i), &b->r[i].cache, err);
	if (st == STRATA_OK && o->prefix_cache_bytes)
		st = residence_rooms(b, err);
	if (st) {
		strata_batch_destroy(b);
		return st;
	}
	*out = b;
	return STRATA_OK;
}

/* Assigns request i and queues it; b->mu is held and a slot is free. */
static strata_status dispatch_locked(strata_batch *b, size_t i,
				     strata_error *err)
{
	const strata_batch_request *q = &b->reqs[i];
	uint32_t home, dev = (uint32_t)(i % b->o.replicas);
	uint64_t cost = (uint64_t)q->n_prompt + q->max_tokens, tag = 0;
	strata_status st = strata_shard_home(q->key, q->key_bytes,
					     b->o.replicas, &home, err);
	uint32_t resident = home;
	bool follow = b->o.route == STRATA_BATCH_ROUTE_FOLLOW;
	if (st == STRATA_OK && follow) {
		tag = strata__residence_tag(q->key, q->key_bytes);
		st = strata__residence_reserve(&b->residence, err);
		if (st == STRATA_OK)
			resident = strata__residence_route(
				&b->residence, tag, home, cost, q->n_prompt);
	}
	if (st == STRATA_OK && b->o.route == STRATA_BATCH_ROUTE_ROUND_ROBIN)
		st = strata_shard_seed_load(b->shard, dev, cost, err);
	else if (st == STRATA_OK)
		st = strata_shard_assign_home(b->shard, resident, cost, &dev,
					      err);
	if (st)
		return st;
	if (b->r[dev].dead) {
		/* a failed replica takes no new work: the least-loaded live
		 * one does (the run is failing when none is left) */
		uint32_t to = least_live(b);
		strata_error ignored;
		if (to == UINT32_MAX)
			return strata_fail(err, STRATA_E_INFER_REPLICA,
					   "check the devices",
					   "every replica failed");
		(void)strata_shard_release(b->shard, dev, cost, &ignored);
		(void)strata_shard_seed_load(b->shard, to, cost, &ignored);
		dev = to;
	}
	replica *r = &b->r[dev];
	r->stats.routed++;
	if (dev == home)
		r->stats.routed_home++;
	else
		b->r[home].stats.routed_away++;
	uint64_t load = strata_shard_loads(b->shard)[dev];
	if (load > r->stats.peak_load)
		r->stats.peak_load = load;
	if (follow)
		strata__residence_ran(&b->residence, tag, dev);
	b->results[i].device = dev;
	b->results[i].home_device = home;
	b->results[i].resident_device = resident;
	b->dispatched_ns[i] = strata_now_ns();
	r->queue[(r->head + r->count) % b->queue_cap] = i;
	r->count++;
	b->in_flight++;
	pthread_cond_broadcast(&b->work_cv);
	return STRATA_OK;
}

/* Hands o.on_result every result that is complete and whose predecessors
 * have all been handed over, in input order, outside the lock, and frees
 * its tokens, also once a later request has failed the run (what is done
 * is not lost); a refusal fails the run with the callback's error and
 * ends the handing over. b->mu is held (and released around each call). */
static void deliver_locked(strata_batch *b, size_t n)
{
	while (b->o.on_result && !b->refused && b->delivered < n &&
	       b->finished[b->delivered]) {
		size_t i = b->delivered++;
		strata_batch_result *r = &b->results[i];
		strata_error e;
		pthread_mutex_unlock(&b->mu);
		strata_status st = b->o.on_result(b->o.on_result_user, i, r, &e);
		strata_free(r->tokens);
		r->tokens = NULL;
		pthread_mutex_lock(&b->mu);
		if (st != STRATA_OK)
			b->refused = true;
		if (st != STRATA_OK && !b->failed) {
			b->failed = true;
			b->failed_request = i;
			b->fail_err = e;
		}
	}
}

/* The dispatcher waits while the queues are full, and with on_result
 * while this many requests are dispatched but not yet handed over (a long
 * request early in the input holds the results after it: this bounds
 * them). */
static bool must_wait_locked(const strata_batch *b, size_t next)
{
	return !b->failed &&
	       (b->in_flight >= b->queue_cap ||
		(b->o.on_result && next - b->delivered >= 4 * b->queue_cap));
}

strata_status strata_batch_run(strata_batch *b,
			       const strata_batch_request *reqs, size_t n,
			       strata_batch_result *results, uint64_t *wall_ns,
			       strata_error *err)
{
	memset(results, 0, n * sizeof *results);
	for (size_t i = 0; i < n; i++)
		if (!reqs[i].prompt || reqs[i].n_prompt == 0)
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "give every request a prompt",
					   "batch: request %zu has no prompt "
					   "ids", i);
	/* dispatch times, then failure counts: n each */
	uint64_t *stamps = strata_calloc_or_error(n ? 2 * n : 1,
						  sizeof *stamps,
						  "dispatch times", err);
	bool *finished = stamps ? strata_calloc_or_error(n ? n : 1,
							 sizeof *finished,
							 "finished requests",
							 err)
				: NULL;
	if (!finished) {
		strata_free(stamps);
		return STRATA_E_NOMEM;
	}
	uint64_t t0 = strata_now_ns();
	strata_status st = STRATA_OK;
	pthread_mutex_lock(&b->mu);
	b->reqs = reqs;
	b->results = results;
	b->dispatched_ns = stamps;
	b->failures = stamps + n;
	b->finished = finished;
	b->delivered = 0;
	b->refused = false;
	b->failed = false;
	for (uint32_t d = 0; d < b->o.replicas; d++)
		b->r[d].dead = false;
	for (size_t i = 0; i < n && st == STRATA_OK && !b->failed; i++) {
		while (deliver_locked(b, n), must_wait_locked(b, i))
			pthread_cond_wait(&b->done_cv, &b->mu);
		if (!b->failed)
			st = dispatch_locked(b, i, err);
	}
	while (deliver_locked(b, n), b->in_flight)
		pthread_cond_wait(&b->done_cv, &b->mu);
	deliver_locked(b, n);
	if (st == STRATA_OK && b->failed) {
		st = b->fail_err.code;
		if (err)
			*err = b->fail_err;
	}
	b->reqs = NULL;
	b->results = NULL;
	b->dispatched_ns = NULL;
	b->failures = NULL;
	b->finished = NULL;
	pthread_mutex_unlock(&b->mu);
	strata_free(stamps);
	strata_free(finished);
	if (wall_ns)
		*wall_ns = strata_now_ns() - t0;
	if (st) /* no partial answers (beyond those handed over) */
		strata_batch_results_free(results, n);
	return st;
}

void strata_batch_results_free(strata_batch_result *r, size_t n)
{
	for (size_t i = 0; r && i < n; i++) {
		strata_free(r[i].tokens);
		r[i].tokens = NULL;
		r[i].n_tokens = 0;
	}
}

void strata_batch_inject_failure(strata_batch *b, uint32_t replica,
				 long after)
{
	pthread_mutex_lock(&b->mu);
	if (replica < b->o.replicas)
		b->r[replica].inject = after;
	pthread_mutex_unlock(&b->mu);
}

size_t strata_batch_failed_request(const strata_batch *b)
{
	return b->failed_request;
}

uint32_t strata_batch_replicas(const strata_batch *b)
{
	return b->o.replicas;
}

uint32_t strata_batch_sequences(const strata_batch *b)
{
	return sequences_of(&b->o);
}

bool strata_batch_sequences_auto(const strata_batch *b)
{
	return b->batch_auto;
}

strata_batch_route strata_batch_route_of(const strata_batch *b)
{
	return b->o.route;
}

strata_session *strata_batch_session(strata_batch *b, uint32_t replica)
{
	return replica < b->o.replicas ? b->r[replica].session : NULL;
}

void strata_batch_replica_get_stats(const strata_batch *b, uint32_t replica,
				    strata_batch_replica_stats *out)
{
	const struct replica *r = &b->r[replica];
	*out = r->stats;
	if (r->cache) {
		strata_prefix_cache_stats c;
		strata_prefix_cache_get_stats(r->cache, &c);
		out->prefix_lookups = c.lookups;
		out->prefix_hits = c.hits;
		out->prefix_reused_tokens = c.reused_tokens;
		out->prefix_saved = c.saved;
		out->prefix_evictions = c.evictions;
		out->prefix_bytes = c.bytes;
		out->prefix_skipped = c.skipped;
		out->prefix_guests_declined = c.guests_declined;
		out->prefix_truncated = c.truncated;
		out->prefix_budget_bytes = c.budget_bytes;
		out->prefix_peak_bytes = c.peak_bytes;
		out->prefix_pool_bytes = c.pool_bytes;
		out->prefix_budget_from_plan =
			b->o.prefix_cache_bytes ==
			STRATA_BATCH_PREFIX_CACHE_FROM_PLAN;
	}
}

void strata_batch_get_totals(const strata_batch *b, strata_batch_totals *out)
{
	memset(out, 0, sizeof *out);
	for (uint32_t i = 0; i < b->o.replicas; i++) {
		strata_batch_replica_stats r;
		strata_batch_replica_get_stats(b, i, &r);
		out->routed += r.routed;
		out->routed_home += r.routed_home;
		out->prefix_lookups += r.prefix_lookups;
		out->prefix_hits += r.prefix_hits;
		out->decode_steps += r.decode_steps;
		out->decode_rows += r.decode_rows;
		out->passes += r.passes;
		out->pass_rows += r.pass_rows;
	}
}

void strata_batch_router_stats(const strata_batch *b, strata_shard_stats *out)
{
	strata_shard_get_stats(b->shard, out);
}

strata_status strata_batch_router_device_stats(const strata_batch *b,
					       uint32_t replica,
					       strata_shard_device_stats *out,
					       strata_error *err)
{
	return strata_shard_get_device_stats(b->shard, replica, out, err);
}
