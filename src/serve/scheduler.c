/* scheduler.c - the continuous scheduler: requests come and go at any time,
 * and every step is one pass of the weights (strata_forward_step_segments)
 * carrying the decode token of every running sequence and chunks of the
 * prompts still to read (each at most the plan's prefill chunk, as many
 * rows as a step takes), as strata batch steps (batch_seqs.c, issue 19); a
 * slot freed by a finished request takes a waiting one at the next step,
 * and a request that finds every slot (the plan's --batch, the KV cache's
 * bound) taken waits in the queue (layer: serve).
 *
 * Threads: any thread submits and cancels; one worker owns the session and
 * every slot. One mutex guards the queue, the slots' ownership, the flags
 * and the figures; the forward passes and the requests' callbacks run
 * outside it. A request's done event is fired by the worker alone, once:
 * for a request that never took a slot (cancelled while waiting, or at
 * shutdown) as for one that ran.
 *
 * Each request draws its samples in the order strata_generate does, with
 * its own sampler and history, so its tokens do not depend on what runs
 * beside it (tests/serve/test_scheduler.c holds it to strata_generate's).
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "strata/serve.h"

/* One request, from submit to its done event. */
typedef struct sreq {
	uint64_t id;
	int32_t *hist;	       /* prompt then generated; n_prompt + max */
	uint32_t n_prompt, max_tokens;
	int32_t stop_token;    /* -1: none */
	strata_sampler *smp;
	strata_scheduler_event_fn fn;
	void *user;
	uint64_t t_submit, t_start, t_first;
	bool cancel;	       /* asked; the worker ends it */
	struct sreq *next;     /* the waiting queue's link */
} sreq;

/* One sequence of the forward pass. Free when r is NULL. */
typedef struct slot {
	sreq *r;
	uint32_t fed;	     /* prompt tokens computed (or restored) */
	uint32_t reused;     /* of them, restored from the prefix cache */
	bool fresh;	     /* admitted; the prefix cache not yet asked */
	uint64_t joined;     /* admission order: prompts read first first */
	uint32_t generated;  /* tokens drawn and kept (EOS not) */
	int32_t next;	     /* the decode token of the next step */
	bool done;
	strata_scheduler_finish finish;
	strata_error err;
} slot;

struct strata_scheduler {
	strata_scheduler_options o;
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	bool ready, stop, draining, held;
	strata_status open_status;
	strata_error open_err;
	strata_session *session;
	strata_prefix_cache *cache; /* NULL: none; the worker's alone */
	uint32_t context, vocab, nslots;
	uint32_t chunk;	   /* a prompt segment's most rows: the plan's */
	uint32_t step_cap; /* a step's most rows (the forward pass's) */
	int32_t eos;
	slot *slots;		/* (nslots) */
	float *logits;		/* (nslots, vocab), pinned where it can be */
	strata_forward_segment *segs; /* (nslots) the step's */
	uint32_t *order; /* (nslots) prompts to read, by admission */
	uint64_t joins;		/* requests admitted so far */
	sreq *qhead, *qtail;
	uint64_t qcount;
	uint64_t ending; /* let go (queue or slot), done event not yet fired */
	uint64_t next_id;
	strata_scheduler_stats st;
};

/* ------------------------------------------------------------------------ */

const char *strata_scheduler_finish_name(strata_scheduler_finish f)
{
	switch (f) {
#define STRATA_SCHEDULER_FINISH_CASE(name, text)                               \
	case STRATA_SCHEDULER_FINISH_##name:                                   \
		return text;
		STRATA_SCHEDULER_FINISH_MAP(STRATA_SCHEDULER_FINISH_CASE)
#undef STRATA_SCHEDULER_FINISH_CASE
	}
	return "unknown";
}

static void sreq_free(sreq *r)
{
	if (!r)
		return;
	strata_sampler_destroy(r->smp);
	strata_free(r->hist);
	strata_free(r);
}

/* The done event, outside the mutex; then the request is freed. */
static void fire_done(sreq *r, strata_scheduler_finish finish,
		      const strata_error *err, uint32_t generated)
{
	strata_scheduler_event ev = {
		.done = true, .token = -1, .finish = finish,
		.err = finish == STRATA_SCHEDULER_FINISH_FAILED ? err : NULL,
		.prompt_tokens = r->n_prompt, .generated_tokens = generated,
		.queue_ns = r->t_start ? r->t_start - r->t_submit : 0,
		.first_token_ns = r->t_first ? r->t_first - r->t_submit : 0,
	};
	r->fn(r->user, &ev);
	sreq_free(r);
}

/* Counts a request's end in the figures; s->mu is held. */
static void count_end_locked(strata_scheduler *s, strata_scheduler_finish f)
{
	if (f == STRATA_SCHEDULER_FINISH_CANCELLED)
		s->st.cancelled++;
	else if (f == STRATA_SCHEDULER_FINISH_FAILED)
		s->st.failed++;
	else
		s->st.finished++;
}

/* Takes the cancelled requests out of the queue into *ended (a list
 * through next); s->mu is held. */
static void take_cancelled_locked(strata_scheduler *s, sreq **ended)
{
	sreq **pp = &s->qhead, *prev = NULL;
	while (*pp) {
		sreq *r = *pp;
		if (!r->cancel) {
			prev = r;
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		if (s->qtail == r)
			s->qtail = prev;
		s->qcount--;
		s->ending++;
		count_end_locked(s, STRATA_SCHEDULER_FINISH_CANCELLED);
		r->next = *ended;
		*ended = r;
	}
}

/* Waiting requests into free slots (their caches reset); s->mu is held. */
static void admit_locked(strata_scheduler *s)
{
	strata_kv_cache *kv =
		strata_forward_kv_cache(strata_session_forward(s->session));
	for (uint32_t i = 0; i < s->nslots && s->qhead; i++) {
		if (s->slots[i].r)
			continue;
		sreq *r = s->qhead;
		s->qhead = r->next;
		if (!s->qhead)
			s->qtail = NULL;
		s->qcount--;
		r->next = NULL;
		r->t_start = strata_now_ns();
		s->st.queue_ns_sum += r->t_start - r->t_submit;
		memset(&s->slots[i], 0, sizeof s->slots[i]);
		s->slots[i].r = r;
		s->slots[i].fresh = true;
		s->slots[i].joined = s->joins++;
		strata_kv_cache_reset(kv, i);
	}
}

/* Cancelled slots are done; then the step's segments: the decode token of
 * every decoding slot (one row each), then the prompts still to read, in
 * admission order, each the most of it the rows left take, at most the
 * plan's prefill chunk (as batch_seqs.c's build_step). A step holds every
 * decode row: its rows are at least the slots. Returns the segment count,
 * *rows the rows; s->mu is held (for the cancel flags). */
static uint32_t build_step_locked(strata_scheduler *s, uint32_t *rows)
{
	uint32_t n = 0, waiting = 0, used = 0;
	for (uint32_t i = 0; i < s->nslots; i++) {
		slot *sl = &s->slots[i];
		if (!sl->r || sl->done)
			continue;
		if (sl->r->cancel) {
			sl->done = true;
			sl->finish = STRATA_SCHEDULER_FINISH_CANCELLED;
			continue;
		}
		if (sl->fed < sl->r->n_prompt) {
			/* insertion by admission order: the count is small */
			uint32_t k = waiting++;
			while (k &&
			       s->slots[s->order[k - 1]].joined > sl->joined) {
				s->order[k] = s->order[k - 1];
				k--;
			}
			s->order[k] = i;
			continue;
		}
		s->segs[n++] = (strata_forward_segment){i, &sl->next, 1, true};
		used++;
	}
	for (uint32_t k = 0; k < waiting && used < s->step_cap; k++) {
		slot *sl = &s->slots[s->order[k]];
		uint32_t left = sl->r->n_prompt - sl->fed;
		uint32_t take = s->step_cap - used;
		take = take < s->chunk ? take : s->chunk;
		take = left < take ? left : take;
		s->segs[n++] = (strata_forward_segment){
			s->order[k], sl->r->hist + sl->fed, take, take == left};
		used += take;
	}
	*rows = used;
	return n;
}

/* After a forward pass gave the slot's logits (its prompt all computed, or
 * a decode token): strata_generate's draw, EOS, budget and context rules,
 * then the token event. */
static void advance(strata_scheduler *s, uint32_t i, float *logits)
{
	slot *sl = &s->slots[i];
	sreq *r = sl->r;
	strata_forward *f = strata_session_forward(s->session);
	uint32_t pos = strata_forward_position_of(f, i);
	if (strata_logits_check(logits, s->vocab, pos ? pos - 1 : 0,
				&sl->err)) {
		sl->done = true;
		sl->finish = STRATA_SCHEDULER_FINISH_FAILED;
		return;
	}
	size_t n_hist = (size_t)r->n_prompt + sl->generated;
	int32_t tok = strata_sampler_sample(r->smp, logits, r->hist, n_hist);
	if (!r->t_first) {
		r->t_first = strata_now_ns();
		pthread_mutex_lock(&s->mu);
		s->st.first_token_ns_sum += r->t_first - r->t_submit;
		s->st.first_token_count++;
		pthread_mutex_unlock(&s->mu);
	}
	if ((tok == s->eos && s->eos >= 0) || tok == r->stop_token) {
		sl->done = true;
		sl->finish = STRATA_SCHEDULER_FINISH_EOS;
		return;
	}
	r->hist[n_hist] = tok;
	sl->generated++;
	strata_scheduler_event ev = {.token = tok,
				     .prompt_tokens = r->n_prompt,
				     .generated_tokens = sl->generated};
	if (!r->fn(r->user, &ev)) {
		sl->done = true;
		sl->finish = STRATA_SCHEDULER_FINISH_STOPPED;
	} else if (sl->generated == r->max_tokens) {
		sl->done = true;
		sl->finish = STRATA_SCHEDULER_FINISH_LENGTH;
	} else if (pos >= s->context) {
		sl->done = true; /* the context is full: stop, not fail */
		sl->finish = STRATA_SCHEDULER_FINISH_CONTEXT;
	} else {
		sl->next = tok;
	}
}

static void fail_slot(slot *sl, const strata_error *e)
{
	sl->done = true;
	sl->finish = STRATA_SCHEDULER_FINISH_FAILED;
	sl->err = *e;
}

/* The cache's figures into the statistics others read (the cache itself
 * is the worker's alone). */
static void publish_prefix(strata_scheduler *s)
{
	strata_prefix_cache_stats ps;
	strata_prefix_cache_get_stats(s->cache, &ps);
	pthread_mutex_lock(&s->mu);
	s->st.prefix = ps;
	pthread_mutex_unlock(&s->mu);
}

/* Each slot admitted since the last round starts from the longest cached
 * prefix of its prompt (all but its last token, computed for its
 * logits): those positions are restored, not computed. A failed restore
 * fails the request. */
static void apply_prefixes(strata_scheduler *s)
{
	strata_forward *f = strata_session_forward(s->session);
	bool asked = false;
	for (uint32_t i = 0; i < s->nslots; i++) {
		slot *sl = &s->slots[i];
		if (!sl->r || !sl->fresh)
			continue;
		sl->fresh = false;
		if (!s->cache || sl->done)
			continue;
		strata_error e;
		uint32_t reused = 0;
		strata_status st = strata_forward_select(f, i, &e);
		if (st == STRATA_OK)
			st = strata_prefix_cache_apply(s->cache, f, sl->r->hist,
						       sl->r->n_prompt,
						       &reused, &e);
		asked = true;
		if (st) {
			fail_slot(sl, &e);
			continue;
		}
		sl->fed = sl->reused = reused;
	}
	if (asked)
		publish_prefix(s);
}

/* The slot's prompt is all computed: it is saved to the prefix cache
 * (a failed save costs a later request its reuse, never this request
 * its answer), then its first token is drawn. */
static void prompt_done(strata_scheduler *s, uint32_t i, float *logits)
{
	slot *sl = &s->slots[i];
	if (s->cache) {
		strata_forward *f = strata_session_forward(s->session);
		strata_error e;
		if (strata_forward_select(f, i, &e) == STRATA_OK)
			(void)strata_prefix_cache_save_extending(
				s->cache, f, sl->r->hist, sl->r->n_prompt, &e);
		publish_prefix(s);
	}
	advance(s, i, logits);
}

static void count_pass(strata_scheduler *s, uint32_t rows)
{
	pthread_mutex_lock(&s->mu);
	s->st.steps++;
	s->st.step_rows += rows;
	pthread_mutex_unlock(&s->mu);
}

/* One pass over the segments built: every decode token and the prompt
 * chunks beside them. Each segment that decoded, or whose prompt the step
 * ended, draws its next token (row j of the logits for the j-th asking).
 * A failed pass fails every slot of it. */
static void run_step(strata_scheduler *s, uint32_t n, uint32_t rows)
{
	strata_error e;
	strata_status st = strata_forward_step_segments(
		strata_session_forward(s->session), s->segs, n, s->logits, &e);
	count_pass(s, rows);
	uint32_t row = 0;
	for (uint32_t k = 0; k < n; k++) {
		const strata_forward_segment *g = &s->segs[k];
		slot *sl = &s->slots[g->seq];
		if (st) {
			fail_slot(sl, &e);
			continue;
		}
		bool prompt = sl->fed < sl->r->n_prompt;
		if (prompt)
			sl->fed += g->n;
		if (!g->logits)
			continue;
		float *logits = s->logits + (uint64_t)row++ * s->vocab;
		if (prompt)
			prompt_done(s, g->seq, logits);
		else
			advance(s, g->seq, logits);
	}
}

/* Fires the done events of finished slots and frees them. Each slot is
 * let go under the mutex first, its request counted as ending until its
 * event has fired: cancel and drain never reach a request being freed,
 * and a drain still waits for the event. */
static void end_done_slots(strata_scheduler *s)
{
	for (uint32_t i = 0; i < s->nslots; i++) {
		slot *sl = &s->slots[i];
		if (!sl->r || !sl->done)
			continue;
		sreq *r = sl->r;
		pthread_mutex_lock(&s->mu);
		count_end_locked(s, sl->finish);
		s->st.prompt_tokens += r->n_prompt;
		s->st.prompt_computed += sl->fed - sl->reused;
		s->st.generated_tokens += sl->generated;
		sl->r = NULL;
		sl->done = false;
		s->ending++;
		pthread_mutex_unlock(&s->mu);
		fire_done(r, sl->finish, &sl->err, sl->generated);
		pthread_mutex_lock(&s->mu);
		s->ending--;
		pthread_cond_broadcast(&s->done_cv);
		pthread_mutex_unlock(&s->mu);
	}
}

static uint32_t taken_locked(const strata_scheduler *s)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->nslots; i++)
		n += s->slots[i].r != NULL;
	return n;
}

/* Opens the session and the step's buffers, on the worker's thread. */
static strata_status open_worker(strata_scheduler *s, strata_error *err)
{
	strata_status st = strata_session_open(&s->o.session, &s->session, err);
	if (st)
		return st;
	strata_forward *f = strata_session_forward(s->session);
	s->nslots = strata_forward_sequences(f);
	s->context = strata_forward_context(f);
	s->vocab = strata_session_hparams(s->session)->vocab;
	s->eos = s->o.eos >= 0 ? s->o.eos
			       : strata_session_hparams(s->session)->eos;
	s->step_cap = strata_forward_step_rows(f);
	uint64_t chunk = strata_plan_get_options(strata_session_plan(
				 s->session))->shape.prefill_chunk;
	s->chunk = chunk && chunk < s->step_cap ? (uint32_t)chunk
						: s->step_cap;
	if (s->o.prefix_cache_bytes) {
		uint64_t budget =
			s->o.prefix_cache_bytes ==
					STRATA_BATCH_PREFIX_CACHE_FROM_PLAN
				? strata_plan_host_spare_bytes(
					  strata_session_plan(s->session))
				: s->o.prefix_cache_bytes;
		st = strata_prefix_cache_create(strata_session_backend(
							s->session),
						budget, &s->cache, err);
		if (st)
			return st;
		strata_prefix_cache_get_stats(s->cache, &s->st.prefix);
		s->st.prefix_cache = true;
	}
	void *logits = NULL;
	st = strata_backend_host_alloc(strata_session_backend(s->session),
				       (uint64_t)s->nslots * s->vocab *
					       sizeof(float),
				       true, &logits, err);
	s->logits = logits;
	if (st)
		return st;
	s->slots = strata_calloc_or_error(s->nslots, sizeof *s->slots,
					  "scheduler slots", err);
	s->segs = s->slots ? strata_calloc_or_error(s->nslots, sizeof *s->segs,
						    "step segments", err)
			   : NULL;
	s->order = s->segs ? strata_calloc_or_error(s->nslots,
						    sizeof *s->order,
						    "prompt order", err)
			   : NULL;
	return s->order ? STRATA_OK : STRATA_E_NOMEM;
}

static void *worker(void *arg)
{
	strata_scheduler *s = arg;
	strata_status st = open_worker(s, &s->open_err);
	pthread_mutex_lock(&s->mu);
	s->open_status = st;
	s->ready = true;
	s->st.slots = s->nslots;
	pthread_cond_broadcast(&s->done_cv);
	if (st) {
		pthread_mutex_unlock(&s->mu);
		return NULL;
	}
	for (;;) {
		while (!s->stop &&
		       (s->held || (!s->qhead && taken_locked(s) == 0)))
			pthread_cond_wait(&s->work_cv, &s->mu);
		if (s->stop && !s->qhead && taken_locked(s) == 0)
			break;
		sreq *ended = NULL;
		take_cancelled_locked(s, &ended);
		admit_locked(s);
		s->st.running = taken_locked(s);
		s->st.waiting = s->qcount;
		pthread_mutex_unlock(&s->mu);
		apply_prefixes(s);
		pthread_mutex_lock(&s->mu);
		uint32_t rows = 0;
		uint32_t n = build_step_locked(s, &rows);
		pthread_mutex_unlock(&s->mu);
		while (ended) {
			sreq *next = ended->next;
			fire_done(ended, STRATA_SCHEDULER_FINISH_CANCELLED,
				  NULL, 0);
			ended = next;
			pthread_mutex_lock(&s->mu);
			s->ending--;
			pthread_cond_broadcast(&s->done_cv);
			pthread_mutex_unlock(&s->mu);
		}
		if (n)
			run_step(s, n, rows);
		end_done_slots(s);
		pthread_mutex_lock(&s->mu);
		pthread_cond_broadcast(&s->done_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* ------------------------------------------------------------------------ */

static void release(strata_scheduler *s)
{
	if (s->logits)
		strata_backend_host_free(strata_session_backend(s->session),
					 s->logits);
	strata_free(s->slots);
	strata_free(s->segs);
	strata_free(s->order);
	strata_prefix_cache_destroy(s->cache); /* before its backend goes */
	strata_session_close(s->session);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_mutex_destroy(&s->mu);
	strata_free(s);
}

strata_status strata_scheduler_create(const strata_scheduler_options *o,
				      strata_scheduler **out,
				      strata_error *err)
{
	if (!o || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "scheduler: no options or result given");
	strata_scheduler *s = strata_calloc_or_error(1, sizeof *s, "scheduler",
						     err);
	if (!s)
		return STRATA_E_NOMEM;
	s->o = *o;
	if (!s->o.queue_cap)
		s->o.queue_cap = 64;
	s->st.queue_cap = s->o.queue_cap;
	s->next_id = 1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work_cv, NULL);
	pthread_cond_init(&s->done_cv, NULL);
	if (pthread_create(&s->thread, NULL, worker, s) != 0) {
		release(s);
		return strata_fail(err, STRATA_E_THREAD,
				   "raise the process's thread limit",
				   "cannot start the scheduler's worker");
	}
	s->thread_started = true;
	pthread_mutex_lock(&s->mu);
	while (!s->ready)
		pthread_cond_wait(&s->done_cv, &s->mu);
	strata_status st = s->open_status;
	pthread_mutex_unlock(&s->mu);
	if (st) {
		*err = s->open_err;
		pthread_join(s->thread, NULL);
		release(s);
		return st;
	}
	*out = s;
	return STRATA_OK;
}

void strata_scheduler_destroy(strata_scheduler *s)
{
	if (!s)
		return;
	strata_scheduler_drain(s, 0);
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_broadcast(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	release(s);
}

/* The checks a request must pass before it is queued. */
static strata_status check_request(const strata_scheduler *s,
				   const strata_scheduler_request *r,
				   strata_error *err)
{
	if (!r || !r->prompt || r->n_prompt == 0 || !r->on_event)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give a prompt of at least one token",
				   "the request has no prompt");
	if (r->max_tokens == 0)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "ask for at least one token",
				   "max_tokens is 0");
	if ((uint64_t)r->n_prompt + r->max_tokens > s->context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "shorten the prompt or lower max_tokens",
				   "the prompt's %u tokens and max_tokens %u "
				   "pass the context of %u",
				   r->n_prompt, r->max_tokens, s->context);
	for (uint32_t i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || (uint32_t)r->prompt[i] >= s->vocab)
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "give token ids below the "
					   "vocabulary size",
					   "prompt token %u (%d) is outside "
					   "the vocabulary of %u",
					   i, r->prompt[i], s->vocab);
	return STRATA_OK;
}

strata_status strata_scheduler_submit(strata_scheduler *s,
				      const strata_scheduler_request *r,
				      uint64_t *id, strata_error *err)
{
	strata_status st = check_request(s, r, err);
	if (st)
		return st;
	sreq *q = strata_calloc_or_error(1, sizeof *q, "request", err);
	uint64_t cap = (uint64_t)r->n_prompt + r->max_tokens;
	if (q)
		q->hist = strata_alloc_or_error(cap * sizeof *q->hist,
						"token history", err);
	if (!q || !q->hist) {
		sreq_free(q);
		return STRATA_E_NOMEM;
	}
	if ((st = strata_sampler_create(&r->sampler, s->vocab, &q->smp, err))) {
		sreq_free(q);
		return st;
	}
	memcpy(q->hist, r->prompt, r->n_prompt * sizeof *q->hist);
	q->n_prompt = r->n_prompt;
	q->max_tokens = r->max_tokens;
	q->stop_token = r->has_stop_token ? r->stop_token : -1;
	q->fn = r->on_event;
	q->user = r->user;
	q->t_submit = strata_now_ns();
	pthread_mutex_lock(&s->mu);
	if (s->draining || s->stop || s->qcount >= s->o.queue_cap) {
		s->st.refused_busy++;
		bool draining = s->draining || s->stop;
		uint64_t cap_now = s->o.queue_cap;
		pthread_mutex_unlock(&s->mu);
		sreq_free(q);
		return draining
			? strata_fail(err, STRATA_E_BUSY,
				      "retry against another server",
				      "the server is shutting down")
			: strata_fail(err, STRATA_E_BUSY,
				      "retry later, or start the server with "
				      "a larger --max-queue",
				      "all %llu places of the queue are taken",
				      (unsigned long long)cap_now);
	}
	q->id = s->next_id++;
	if (s->qtail)
		s->qtail->next = q;
	else
		s->qhead = q;
	s->qtail = q;
	s->qcount++;
	s->st.submitted++;
	s->st.waiting = s->qcount;
	if (id)
		*id = q->id;
	pthread_cond_signal(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	return STRATA_OK;
}

void strata_scheduler_cancel(strata_scheduler *s, uint64_t id)
{
	if (!s || !id)
		return;
	pthread_mutex_lock(&s->mu);
	for (sreq *q = s->qhead; q; q = q->next)
		if (q->id == id)
			q->cancel = true;
	for (uint32_t i = 0; i < s->nslots; i++)
		if (s->slots[i].r && s->slots[i].r->id == id)
			s->slots[i].r->cancel = true;
	pthread_cond_signal(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
}

/* Waits on done_cv until nothing runs or waits, or the deadline (0: none)
 * passes; s->mu is held. True when empty. */
static bool wait_empty_locked(strata_scheduler *s, uint64_t deadline_ns)
{
	while (s->qhead || s->ending || taken_locked(s)) {
		if (!deadline_ns) {
			pthread_cond_wait(&s->done_cv, &s->mu);
			continue;
		}
		uint64_t now = strata_now_ns();
		if (now >= deadline_ns)
			return false;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t wait = deadline_ns - now;
		if (wait > 50000000u)
			wait = 50000000u; /* re-read the monotonic clock */
		uint64_t ns = (uint64_t)ts.tv_nsec + wait;
		ts.tv_sec += (time_t)(ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&s->done_cv, &s->mu, &ts);
	}
	return true;
}

void strata_scheduler_drain(strata_scheduler *s, uint64_t grace_ns)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->draining = true;
	s->held = false; /* a held worker would never empty the queue */
	pthread_cond_broadcast(&s->work_cv);
	bool empty = grace_ns &&
		     wait_empty_locked(s, strata_now_ns() + grace_ns);
	if (!empty) {
		for (sreq *q = s->qhead; q; q = q->next)
			q->cancel = true;
		for (uint32_t i = 0; i < s->nslots; i++)
			if (s->slots[i].r)
				s->slots[i].r->cancel = true;
		pthread_cond_signal(&s->work_cv);
		wait_empty_locked(s, 0);
	}
	pthread_mutex_unlock(&s->mu);
}

void strata_scheduler_hold(strata_scheduler *s, bool hold)
{
	pthread_mutex_lock(&s->mu);
	s->held = hold;
	pthread_cond_broadcast(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
}

uint32_t strata_scheduler_context(const strata_scheduler *s)
{
	return s->context;
}

strata_session *strata_scheduler_session(strata_scheduler *s)
{
	return s->session;
}

void strata_scheduler_get_stats(strata_scheduler *s,
				strata_scheduler_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	out->waiting = s->qcount;
	out->running = taken_locked(s);
	pthread_mutex_unlock(&s->mu);
}
