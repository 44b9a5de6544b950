/* serve.h - many requests over one model: the batch runner (one replica of
 * the model per device, each with its own worker thread, session and prefix
 * cache; requests routed by the shard allocator in its in-flight mode) and
 * the prefix cache (layer: serve).
 *
 * Its own layer above infer because serving is the one part of the runtime
 * that uses the shard layer and threads; callers of the forward pass need
 * neither. It works on token ids: encoding prompts and decoding results
 * belong to the caller, which is `strata batch` (src/cli/cmd_batch.c,
 * docs/batch.md).
 */
#ifndef STRATA_SERVE_H
#define STRATA_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/infer.h"
#include "strata/shard.h"
#include "strata/text.h"

/* Requests in flight per replica before the dispatcher waits for one to
 * finish: the allocator's loads are then the work queued now, released as
 * requests finish, not the cumulative total. With --batch B the bound is
 * max(this, 2 B): B running and as many waiting to join as one step can
 * free. */
#define STRATA_BATCH_INFLIGHT_PER_REPLICA 4u

/* The most replicas one batch opens. */
#define STRATA_BATCH_MAX_REPLICAS 64u

/* strata_batch_options.prefix_cache_bytes: each replica's cache is bounded
 * by the host memory its plan leaves spare (strata_plan_host_spare_bytes). */
#define STRATA_BATCH_PREFIX_CACHE_FROM_PLAN UINT64_MAX

/* How requests pick a replica. AFFINITY is the allocator's (home by key,
 * spill past the threshold); FOLLOW is the same allocator with the home
 * replaced by where the key lives: a new key lives on its BLAKE3 home
 * unless that replica already carries more than its share of the keys'
 * recent demand (or its prefix cache is full where another's is not),
 * then on the one with room carrying the least; a key whose requests
 * spill twice in a row moves to where they ran when that evens the demand
 * out; keys unseen for a while are forgotten (src/serve/batch_residence.c).
 * Each key's prefix so stays warm on one replica instead of splitting over
 * every replica; ROUND_ROBIN ignores keys and loads (request i on replica
 * i mod n), the peer routing is measured against. */
#define STRATA_BATCH_ROUTE_MAP(X)                                              \
	X(AFFINITY, "affinity")                                                \
	X(ROUND_ROBIN, "round-robin")                                          \
	X(FOLLOW, "follow")

typedef enum strata_batch_route {
#define STRATA_BATCH_ROUTE_ENUM(name, text) STRATA_BATCH_ROUTE_##name,
	STRATA_BATCH_ROUTE_MAP(STRATA_BATCH_ROUTE_ENUM)
#undef STRATA_BATCH_ROUTE_ENUM
} strata_batch_route;

const char *strata_batch_route_name(strata_batch_route r); /* or "unknown" */

struct strata_batch_result; /* below */
typedef struct strata_batch_options {
	/* The session every replica opens (positions and prefill are the
	 * largest any request needs; plan.device names the kind;
	 * plan.shape.batch is --batch B, the requests each replica runs
	 * together, one forward-pass sequence each; 0 is 1; with
	 * session.batch_auto_max the plan picks it, --batch auto). The
	 * replicas share one host: unless session.plan.host_shared_by is
	 * set, each replica's plan gets 1/replicas of the host budget. */
	strata_session_options session;
	uint32_t replicas;	       /* >= 1 */
	uint64_t spill_threshold;      /* allocator's, in cost units */
	/* Per replica; 0: no prefix cache; STRATA_BATCH_PREFIX_CACHE_FROM_PLAN:
	 * what the replica's plan leaves spare of its host budget. */
	uint64_t prefix_cache_bytes;
	int32_t eos; /* the tokenizer's; -1: the model's (hparams) */
	strata_batch_route route;
	/* Replica i opens session.device_index = device_indices[i] (cuda:K);
	 * NULL: every replica uses session.device_index. Borrowed for
	 * strata_batch_create. */
	const uint32_t *device_indices;
	/* Optional: strata_batch_run hands each result here as soon as it
	 * and every request before it are complete, in input order, on the
	 * thread that called strata_batch_run, outside the batch's lock;
	 * after the call its tokens are freed (r->tokens NULL, the figures
	 * kept), so results wait only while an earlier one runs (at most
	 * 4 x the in-flight bound are dispatched ahead of the last handed
	 * over). A result handed over stays handed over when a later
	 * request fails the run. An error returned fails the run with that
	 * error (strata_batch_failed_request names the request). */
	strata_status (*on_result)(void *user, size_t index,
				   const struct strata_batch_result *r,
				   strata_error *err);
	void *on_result_user;
	/* Optional: how request `index` of the run may end besides EOS and
	 * max_tokens (NULL: only those), asked on a replica's thread each
	 * time the request starts there; what it returns is borrowed until
	 * strata_batch_run returns. (A callback rather than a request
	 * field keeps a request, which `strata batch` holds for every
	 * input line, at 64 bytes.) */
	const struct strata_batch_ends *(*ends_of)(void *user, size_t index);
	void *ends_user;
	/* Decodes the requests' generated text for their stop strings
	 * (borrowed; needed only when a request has some). */
	const strata_tokenizer *tokenizer;
} strata_batch_options;

/* How a request may end besides EOS and max_tokens. Stop strings (OpenAI's
 * `stop`): the request ends at the step whose token completes one in its
 * text (decoded as `strata batch` prints it), that token kept, so what
 * follows is never computed; the caller cuts the text before the stop
 * (lens NULL: NUL-terminated; n_stops <= STRATA_STOP_MAX_COUNT). The stop
 * token ends the request as EOS does, not kept (a chat template's end of
 * turn), when has_stop_token. */
typedef struct strata_batch_ends {
	const char *const *stops;
	const size_t *stop_lens;
	uint32_t n_stops;
	bool has_stop_token;
	int32_t stop_token;
} strata_batch_ends;

/* One request; every pointer is borrowed for strata_batch_run. */
typedef struct strata_batch_request {
	const int32_t *prompt; /* n_prompt >= 1 ids */
	uint32_t n_prompt;
	uint32_t max_tokens;
	strata_sampler_params sampler;
	const void *key; /* routing key */
	size_t key_bytes;
} strata_batch_request;

/* One result. tokens is owned by the result (strata_batch_results_free). */
typedef struct strata_batch_result {
	int32_t *tokens;
	uint32_t n_tokens;
	uint32_t device, home_device; /* replica indices */
	/* the replica routing took as the key's home: home_device, or with
	 * the follow route where the key lives */
	uint32_t resident_device;
	uint32_t prefix_tokens;	      /* prompt positions taken from the cache */
	bool stopped;		      /* a stop string or the stop token ended it */
	uint64_t queue_ns;	      /* dispatch to the start of its work */
	strata_generate_stats gen;
} strata_batch_result;

/* Per-replica prefix cache and work figures. */
typedef struct strata_batch_replica_stats {
	uint64_t requests, tokens;     /* requests run, positions computed */
	/* The load the requests finished here brought: their cost, prompt
	 * + max tokens each, charged whole even when the prefix cache
	 * supplies most of the prompt or a request stops early at EOS
	 * (tokens is the work that was done). */
	uint64_t load_charged;
	uint64_t busy_ns;	       /* generating: the three below and
					  sampling */
	uint64_t prefix_ns;	       /* prefix cache applies and saves */
	uint64_t prefill_ns;	       /* steps carrying prompt chunks */
	uint64_t step_ns;	       /* steps of decode tokens only */
	uint64_t prefix_lookups, prefix_hits, prefix_reused_tokens;
	uint64_t prefix_saved, prefix_evictions, prefix_bytes;
	uint64_t prefix_skipped;       /* prefixes larger than the budget */
	uint64_t prefix_guests_declined; /* guests not saved (no free room) */
	uint64_t prefix_truncated;     /* entries cut to a shared part */
	uint64_t prefix_budget_bytes;  /* the cache's bound */
	uint64_t prefix_peak_bytes;    /* most it held, <= the bound */
	uint64_t prefix_pool_bytes;    /* host memory taken for its KV
					  (chunks, free room included),
					  <= the bound */
	bool prefix_budget_from_plan;  /* bound from the plan, not a number */
	uint64_t peak_load;	       /* allocator load, cost units */
	uint64_t routed;	       /* requests placed here */
	uint64_t routed_home;	       /* ... whose home this is */
	uint64_t routed_away;	       /* homed here, placed elsewhere */
	uint64_t passes;	       /* forward steps: passes of the weights
					  (each carries decode tokens and
					  prompt chunks together) */
	uint64_t pass_rows;	       /* their rows: tokens computed */
	uint64_t decode_steps;	       /* passes with decode tokens */
	uint64_t decode_rows;	       /* their decode rows, summed */
	uint64_t failures;	       /* requests that failed here */
	uint64_t moved_away;	       /* requests moved off after a failure */
} strata_batch_replica_stats;

typedef struct strata_batch strata_batch;

/* Opens o->replicas sessions, each on its own worker thread (so a CUDA
 * replica binds its device on the thread that uses it), and the allocator.
 * Errors: E_INVALID_ARG for 0 or more than STRATA_BATCH_MAX_REPLICAS
 * replicas, the first replica's session error (prefixed "replica N: "),
 * E_NOMEM. Nothing survives a failure. The caller owns *out. */
strata_status strata_batch_create(const strata_batch_options *o,
				  strata_batch **out, strata_error *err);

/* Stops the workers and closes the sessions; NULL is fine. */
void strata_batch_destroy(strata_batch *b);

/* Runs reqs[0..n) and fills results[0..n) in the same order. Requests are
 * dispatched in input order: each is assigned through the allocator (cost
 * = n_prompt + max_tokens, home = BLAKE3 of its key), queued to its
 * replica, and its cost released when it finishes; the dispatcher keeps at
 * most max(STRATA_BATCH_INFLIGHT_PER_REPLICA, 2 B) per replica in flight.
 * A replica runs up to B requests together, continuously: every step is
 * one pass of the weights carrying the decode token of every running
 * request and chunks of the prompts of those that joined (as many rows as
 * the forward pass takes: strata_forward_step_rows); a finished one
 * leaves and a queued one joins at the next step, and one that finds
 * every slot taken waits in its replica's queue (the slots, B KV caches
 * of the plan's context, bound the KV cache). A request's tokens do not
 * depend on B or on what runs beside it (its own sampler and seed).
 *
 * A replica whose request fails takes no more work in this run: that
 * request (its partial tokens dropped), the others running beside it and
 * everything queued there move to the least-loaded live replicas, and the
 * run goes on (the replica stats count failures and moves). A request
 * that fails a second time, or a failure with no live replica left, fails
 * the run: E_INFER_REPLICA naming the replica and request with the cause,
 * results all freed (nothing is answered twice or partly; those already
 * handed to o->on_result stay answered);
 * strata_batch_failed_request gives the request's index. Every replica is
 * live again at the next run. */
strata_status strata_batch_run(strata_batch *b,
			       const strata_batch_request *reqs, size_t n,
			       strata_batch_result *results, uint64_t *wall_ns,
			       strata_error *err);

void strata_batch_results_free(strata_batch_result *r, size_t n);

/* Test hook: replica `replica` fails (E_DEVICE) the request it starts
 * after `after` more requests, once; -1 turns it off. */
void strata_batch_inject_failure(strata_batch *b, uint32_t replica,
				 long after);
/* The request that failed the last run (meaningful after E_INFER_REPLICA
 * from strata_batch_run). */
size_t strata_batch_failed_request(const strata_batch *b);

uint32_t strata_batch_replicas(const strata_batch *b);
/* --batch B: the requests each replica runs together (with
 * session.batch_auto_max, the batch the plan picked). */
uint32_t strata_batch_sequences(const strata_batch *b);
/* Whether the plan picked it (--batch auto). */
bool strata_batch_sequences_auto(const strata_batch *b);
strata_batch_route strata_batch_route_of(const strata_batch *b);
/* The replica's session (its engine, store and plan for telemetry). */
strata_session *strata_batch_session(strata_batch *b, uint32_t replica);
void strata_batch_replica_get_stats(const strata_batch *b, uint32_t replica,
				    strata_batch_replica_stats *out);
/* The counts of every replica's statistics added up: what the summary and
 * the telemetry's totals report. */
typedef struct strata_batch_totals {
	uint64_t routed, routed_home;	      /* placements, those at home */
	uint64_t prefix_lookups, prefix_hits;
	uint64_t decode_steps, decode_rows;
	uint64_t passes, pass_rows;	      /* weight passes, their rows */
} strata_batch_totals;
void strata_batch_get_totals(const strata_batch *b, strata_batch_totals *out);
/* The allocator's statistics after the last run (in ROUND_ROBIN mode its
 * loads come from seed_load, so items and home hits stay 0: the replica
 * stats' routed counters hold them in both modes). */
void strata_batch_router_stats(const strata_batch *b, strata_shard_stats *out);
strata_status strata_batch_router_device_stats(const strata_batch *b,
					       uint32_t replica,
					       strata_shard_device_stats *out,
					       strata_error *err);

/* Writes the telemetry document (DESIGN.md) with one devices[] entry per
 * replica (named by `device_names`, one per replica) and a `router`
 * object: home-hit rate, spills, load per device, max/mean, prefix cache
 * figures. Totals in `residency` add the replicas'; run gives the
 * timing figures and the default seed (`sampling`). Atomic write. */
strata_status strata_batch_write_telemetry(strata_batch *b, const char *path,
					   const char *const *device_names,
					   const strata_session_run *run,
					   strata_error *err);

/* ------------------------------------------------------------------------ */
/* The prefix cache of one replica (src/serve/prefix_cache.c)               */
/* ------------------------------------------------------------------------ */

typedef struct strata_prefix_cache strata_prefix_cache;

/* Host memory is taken this many bytes at a time (or one entry's KV when
 * that is larger), kept and reused until the cache is destroyed. */
#define STRATA_PREFIX_CACHE_CHUNK_BYTES ((uint64_t)64 << 20)

/* At most this many entries, whatever the budget: a lookup scans every
 * entry, so on a small model whose prompts' KV is a few KiB a budget of
 * the plan's spare host memory would hold entries by the hundred thousand
 * and every request would slow with the cache's size (a 100,000-request
 * batch collapsed so); past the cap the least recently used goes. */
#define STRATA_PREFIX_CACHE_MAX_ENTRIES 1024u

/* A cache holding at most budget_bytes of saved KV (and the token ids that
 * key it). Its KV lives in chunks of host memory from `b` (pinned where
 * the backend can pin, so restores and saves are direct copies; NULL:
 * plain memory), taken as entries need them, never more than budget_bytes
 * of chunks in all, and kept until strata_prefix_cache_destroy, which must
 * come before b's destruction. E_NOMEM. */
strata_status strata_prefix_cache_create(strata_backend *b,
					 uint64_t budget_bytes,
					 strata_prefix_cache **out,
					 strata_error *err);
void strata_prefix_cache_destroy(strata_prefix_cache *c);

/* Resets f and restores into it the longest cached prefix that is a
 * token-exact prefix of prompt[0..n_prompt - 1) (the last prompt token is
 * always computed, for its logits). *reused is the positions restored
 * (0 on a miss: f is then at position 0). Never fails on a miss. */
strata_status strata_prefix_cache_apply(strata_prefix_cache *c,
					strata_forward *f,
					const int32_t *prompt,
					uint32_t n_prompt, uint32_t *reused,
					strata_error *err);

/* After a request: when the last apply hit an entry and reused at least
 * half of it, that entry is cut down to the reused positions (the part
 * proven shared) and nothing else is saved. Otherwise saves f's positions
 * [0, n_prompt) keyed by prompt (f must hold at least that many): its KV
 * goes to free blocks of the chunks, else to a new chunk while the chunks
 * stay within the budget, else to the room the least recently used
 * entries leave, evicted one at a time until it fits; then entries are
 * evicted while the entries' bytes pass the budget. A prompt already
 * held, or one larger than the whole budget, is not saved (the latter
 * counted as skipped). A `guest` entry (a request spilled here from its
 * home) is stored as the least recently used, so it goes first when room
 * is needed unless a hit warms it, and is saved only into room that is
 * free or held by other guests (else counted as guests_declined): a
 * spilled prompt never evicts the entry of a key that lives here. E_NOMEM from the entry's records
 * leaves the cache as it was; an error from taking a chunk or from the
 * copy leaves the entries evicted to make room evicted, and nothing else
 * changed. */
strata_status strata_prefix_cache_save(strata_prefix_cache *c,
				       const strata_forward *f,
				       const int32_t *prompt,
				       uint32_t n_prompt, bool guest,
				       strata_error *err);

/* As strata_prefix_cache_save (never a guest) for a caller whose apply and
 * save of one request may be split by other requests' (the continuous
 * scheduler, whose prompts take several steps): the hit the rule above
 * looks at is found again now, the entry holding the longest prefix of
 * prompt[0..n_prompt - 1), instead of the last apply's. And a hit that
 * reused all of its entry while the prompt goes on (a conversation
 * resent with its next turn) saves the longer prompt, which then replaces
 * every entry holding a strict prefix of it (counted as replaced), so the
 * turn after reuses all of this one. Errors as for save. */
strata_status strata_prefix_cache_save_extending(strata_prefix_cache *c,
						 const strata_forward *f,
						 const int32_t *prompt,
						 uint32_t n_prompt,
						 strata_error *err);

/* `bytes` are the entries' (KV blocks, rounded up to 256 bytes each, token
 * ids and records), at most budget_bytes. `pool_bytes` are the chunks
 * held, free room and rounding included, also at most budget_bytes; the
 * host memory the cache holds is pool_bytes plus the records' part of
 * `bytes` (4 bytes a position and ~250 an entry, against 2 x layers x
 * kv_dim x 4 bytes a position of KV). */
typedef struct strata_prefix_cache_stats {
	uint64_t lookups, hits, reused_tokens;
	uint64_t saved, evictions, skipped;
	uint64_t guests_declined; /* guests' saves that would have evicted */
	uint64_t truncated; /* entries cut down to the part a hit shared */
	uint64_t replaced;  /* entries a longer one holding them replaced */
	uint64_t bytes, entries, budget_bytes;
	uint64_t peak_bytes; /* the most bytes held at once */
	uint64_t pool_bytes, pool_chunks;
} strata_prefix_cache_stats;

void strata_prefix_cache_get_stats(const strata_prefix_cache *c,
				   strata_prefix_cache_stats *out);

/* ------------------------------------------------------------------------ */
/* The continuous scheduler (src/serve/scheduler.c): what `strata serve`    */
/* runs requests through                                                     */
/* ------------------------------------------------------------------------ */

/* Requests arrive at any time from any thread and leave as they finish.
 * One worker thread owns the session and steps every running sequence
 * together: each step is one strata_forward_step_segments, one pass of
 * the weights, carrying the next decode token of every decoding sequence
 * and chunks of the prompts still to read (in the order their requests
 * took a slot, each at most the plan's prefill chunk, as many rows as the
 * step takes), as strata batch steps. A finished or cancelled sequence's
 * slot takes the next waiting request at the next step; requests that
 * find every slot (the plan's batch: the KV cache holds that many
 * sequences) taken wait in a bounded queue, and a full queue refuses. */

#define STRATA_SCHEDULER_FINISH_MAP(X)                                         \
	X(LENGTH, "length")       /* max_tokens drawn */                       \
	X(EOS, "eos")             /* the model's end of text */                \
	X(STOPPED, "stop")        /* the event callback asked to stop */       \
	X(CONTEXT, "context")     /* the sequence's context is full */         \
	X(CANCELLED, "cancelled") /* strata_scheduler_cancel or shutdown */   \
	X(FAILED, "failed")       /* the forward pass failed: event's err */

typedef enum strata_scheduler_finish {
#define STRATA_SCHEDULER_FINISH_ENUM(name, text) STRATA_SCHEDULER_FINISH_##name,
	STRATA_SCHEDULER_FINISH_MAP(STRATA_SCHEDULER_FINISH_ENUM)
#undef STRATA_SCHEDULER_FINISH_ENUM
} strata_scheduler_finish;

const char *strata_scheduler_finish_name(strata_scheduler_finish f);

/* What a request's callback is told: a token (done false), or once, last,
 * the end (done true, token -1). */
typedef struct strata_scheduler_event {
	bool done;
	int32_t token;
	strata_scheduler_finish finish; /* when done */
	const strata_error *err;	/* when done with FAILED, else NULL */
	uint32_t prompt_tokens, generated_tokens;
	uint64_t queue_ns;	 /* submit to taking a slot */
	uint64_t first_token_ns; /* submit to the first token (0: none) */
} strata_scheduler_event;

/* Called on the worker thread, without the scheduler's lock held (so it
 * may call strata_scheduler_cancel or read statistics). For a token event
 * a false return ends the request with STOPPED (a stop string matched);
 * the return of the done event is ignored. After the done event the
 * request's user pointer is never used again. */
typedef bool (*strata_scheduler_event_fn)(void *user,
					  const strata_scheduler_event *ev);

typedef struct strata_scheduler_options {
	/* The session the worker opens (on its own thread): plan.shape.batch
	 * is the slots, sequences running together; positions the context
	 * when no --context is given. */
	strata_session_options session;
	uint32_t queue_cap; /* requests waiting for a slot; 0: 64 */
	int32_t eos;	    /* the tokenizer's; -1: the model's */
	/* The prefix cache's bound (strata_prefix_cache): a request whose
	 * prompt starts as a cached one's did restores those positions
	 * instead of computing them, and each prompt is saved once
	 * computed (strata_prefix_cache_save_extending). 0: none;
	 * STRATA_BATCH_PREFIX_CACHE_FROM_PLAN: what the plan leaves spare of
	 * the host budget. */
	uint64_t prefix_cache_bytes;
} strata_scheduler_options;

typedef struct strata_scheduler_request {
	const int32_t *prompt; /* n_prompt >= 1 ids, copied by submit */
	uint32_t n_prompt;
	uint32_t max_tokens; /* >= 1 */
	strata_sampler_params sampler;
	/* A second id that ends the request as EOS does (a chat template's
	 * end of turn, <|im_end|>), when has_stop_token. */
	bool has_stop_token;
	int32_t stop_token;
	strata_scheduler_event_fn on_event;
	void *user;
} strata_scheduler_request;

typedef struct strata_scheduler strata_scheduler;

/* Starts the worker, which opens o->session; returns once it has (its
 * error, when it could not, is this call's). The caller owns *out. */
strata_status strata_scheduler_create(const strata_scheduler_options *o,
				      strata_scheduler **out,
				      strata_error *err);

/* Cancels whatever still runs or waits (each gets its done event,
 * CANCELLED), stops the worker, closes the session; NULL is fine. */
void strata_scheduler_destroy(strata_scheduler *s);

/* Queues a request; *id names it for strata_scheduler_cancel. On success
 * the callback gets its events, the done event exactly once; on failure
 * it gets none. Errors: E_INVALID_ARG (no prompt, a token outside the
 * vocabulary, max_tokens 0, sampler parameters out of range: the
 * sampler's message), E_INFER_CONTEXT (prompt + max_tokens past the
 * context), E_BUSY (the queue is full, or the scheduler is draining),
 * E_NOMEM. */
strata_status strata_scheduler_submit(strata_scheduler *s,
				      const strata_scheduler_request *r,
				      uint64_t *id, strata_error *err);

/* Ends request id with CANCELLED at the next step (at once when it still
 * waits); an id that has finished, or was never given, is ignored. */
void strata_scheduler_cancel(strata_scheduler *s, uint64_t id);

/* Refuses new requests (E_BUSY), lets those running and waiting finish for
 * up to grace_ns, then cancels the rest and waits for their done events.
 * The worker stays up (destroy ends it). */
void strata_scheduler_drain(strata_scheduler *s, uint64_t grace_ns);

/* While held the worker starts no step (the one running ends) and takes
 * no request from the queue: requests submitted meanwhile all join the
 * first step after the release (tests count weight passes with it).
 * strata_scheduler_drain releases it. */
void strata_scheduler_hold(strata_scheduler *s, bool hold);

/* The positions each sequence holds. */
uint32_t strata_scheduler_context(const strata_scheduler *s);
/* The worker's session (plan, residency telemetry): only for reading
 * figures, which the worker updates as it runs. */
strata_session *strata_scheduler_session(strata_scheduler *s);

typedef struct strata_scheduler_stats {
	uint64_t submitted, refused_busy, finished, cancelled, failed;
	uint64_t prompt_tokens, generated_tokens;
	uint64_t steps;	      /* forward passes: weight passes */
	uint64_t step_rows;   /* rows over every step */
	uint64_t waiting, running; /* now */
	uint64_t slots, queue_cap;
	uint64_t first_token_ns_sum, first_token_count;
	uint64_t queue_ns_sum;
	/* prompt positions computed (prompt_tokens less those the prefix
	 * cache restored, counted as each request ends) */
	uint64_t prompt_computed;
	bool prefix_cache;		   /* one is kept */
	strata_prefix_cache_stats prefix;  /* its figures (zeros without) */
} strata_scheduler_stats;

void strata_scheduler_get_stats(strata_scheduler *s,
				strata_scheduler_stats *out);

/* ------------------------------------------------------------------------ */
/* The router (src/serve/router.c): requests over several schedulers, one   */
/* per replica, as `strata batch --gpus` routes them                         */
/* ------------------------------------------------------------------------ */

/* Each request is placed by the shard allocator in its in-flight mode, as
 * the batch runner places its requests: cost n_prompt + max_tokens, home
 * replica the BLAKE3 of its key, spilled to the least-loaded replica when
 * its home carries more than spill_threshold above it, its cost released
 * at its done event, so a load is the work a replica has now (bounded
 * load). Requests of one key (a conversation, a shared system prompt) so
 * meet their prefix on one replica's prefix cache while loads stay within
 * the threshold. ROUND_ROBIN ignores keys and loads; FOLLOW is the batch
 * runner's alone (E_INVALID_ARG here). Thread-safe: any thread submits,
 * cancels and reads figures. */
typedef struct strata_router strata_router;

typedef struct strata_router_options {
	strata_scheduler *const *schedulers; /* (count), borrowed */
	const char *const *names; /* (count) e.g. "cuda:0"; NULL: replica-i */
	uint32_t count;		  /* 1 .. STRATA_BATCH_MAX_REPLICAS */
	/* cost units; 0: replica 0's context (one long request's worth) */
	uint64_t spill_threshold;
	strata_batch_route route;
} strata_router_options;

/* The schedulers stay the caller's and must outlive the router (drain
 * them, through strata_router_drain, before destroying either). Errors:
 * E_INVALID_ARG (no schedulers, too many, the follow route), E_NOMEM. */
strata_status strata_router_create(const strata_router_options *o,
				   strata_router **out, strata_error *err);
void strata_router_destroy(strata_router *rt); /* NULL is fine */

/* Routes r by key[0..key_bytes) and submits it to the chosen replica's
 * scheduler; a replica whose queue is full passes it to the next least
 * loaded (counted as refused there). r's callback gets its events as
 * strata_scheduler_submit says, and the request's load is released just
 * before its done event. *replica and *id name it for
 * strata_router_cancel. Errors: the scheduler's (E_BUSY when every
 * replica refused), nothing routed. */
strata_status strata_router_submit(strata_router *rt, const void *key,
				   size_t key_bytes,
				   const strata_scheduler_request *r,
				   uint32_t *replica, uint64_t *id,
				   strata_error *err);
void strata_router_cancel(strata_router *rt, uint32_t replica, uint64_t id);

/* Drains every replica at once (strata_scheduler_drain each, on a thread
 * of its own): new requests are refused, those in flight get grace_ns
 * together, then the rest are cancelled; returns when every done event
 * has fired. */
void strata_router_drain(strata_router *rt, uint64_t grace_ns);

uint32_t strata_router_replicas(const strata_router *rt);
strata_scheduler *strata_router_scheduler(strata_router *rt, uint32_t i);
const char *strata_router_name(const strata_router *rt, uint32_t i);
strata_batch_route strata_router_route(const strata_router *rt);
uint64_t strata_router_spill_threshold(const strata_router *rt);
/* The context every replica holds (the smallest of theirs). */
uint32_t strata_router_context(const strata_router *rt);

/* One replica's routing figures. */
typedef struct strata_router_replica_stats {
	uint64_t routed;       /* requests placed here */
	uint64_t routed_home;  /* ... whose home this is */
	uint64_t spilled_in;   /* ... whose home is another replica */
	uint64_t spilled_away; /* homed here, placed elsewhere */
	uint64_t refused;      /* placed here, refused by its queue (full
				  or draining): passed on, or refused */
	uint64_t load, peak_load; /* cost units in flight: now, the most */
} strata_router_replica_stats;

void strata_router_get_stats(strata_router *rt, uint32_t replica,
			     strata_router_replica_stats *out);

/* ------------------------------------------------------------------------ */
/* The HTTP server (src/serve/http.c, http_api.c): OpenAI's API over a       */
/* scheduler, on libmicrohttpd                                               */
/* ------------------------------------------------------------------------ */

/* POST /v1/completions, POST /v1/chat/completions (stream: server-sent
 * events), GET /v1/models, GET /health, GET /metrics (Prometheus text) and
 * the chat page at / (docs/serve.md). Every connection has a thread of its
 * own; a request's tokens come from the scheduler's worker. Bad requests
 * are OpenAI error objects with 400 / 401 / 404 / 405 / 413 / 503, never a
 * crash: every byte of a request is hostile. */
typedef struct strata_server strata_server;

typedef struct strata_server_options {
	const char *host;	   /* NULL: 127.0.0.1 (IPv4 or IPv6 text) */
	uint16_t port;		   /* 0: a free one (strata_server_port) */
	const char *api_key;	   /* Bearer key; NULL: none */
	const char *model_name;	   /* what /v1/models and answers name */
	/* borrowed; the replicas requests are routed over (the chosen
	 * replica's scheduler runs each). NULL: one replica, `scheduler`. */
	strata_router *router;
	strata_scheduler *scheduler;		/* borrowed; without router */
	const strata_tokenizer *tokenizer;	/* borrowed */
	/* borrowed; NULL: chat requests are refused (400) naming the fix */
	const strata_chat_format *chat_format;
	uint64_t max_body_bytes;   /* 0: 4 MiB; larger bodies get 413 */
	uint32_t max_connections;  /* 0: 512 */
	uint32_t default_max_tokens; /* 0: 256 (capped by the context) */
	/* the replicas' numerics (--precision), which /v1/models shows:
	 * one per loaded model, not chosen per request */
	strata_precision precision;
} strata_server_options;

/* Listens and serves until strata_server_destroy; the strings are copied.
 * Errors: E_UNSUPPORTED when strata was built without libmicrohttpd (the
 * fix names the package), E_INVALID_ARG for a host that is not an
 * address, E_IO when the address cannot be bound, E_NOMEM. */
strata_status strata_server_create(const strata_server_options *o,
				   strata_server **out, strata_error *err);
/* The port it listens on (the one picked for port 0). */
uint16_t strata_server_port(const strata_server *s);
/* Stops taking connections; /health answers 503 from then on. Requests
 * already in flight go on (drain the scheduler to end them). */
void strata_server_quiesce(strata_server *s);
/* Waits (up to 10 s) for the answers in flight to be sent whole, then
 * closes every connection (waiting for their threads) and frees; drain the
 * scheduler first, so every answer is complete. NULL is fine. */
void strata_server_destroy(strata_server *s);

#endif
