/* batch_internal.h - one replica's running sequences, shared by batch.c
 * (threads, routing, failover) and batch_seqs.c (prefill each request,
 * decode all of them together) (layer: serve). Not a public header. */
#ifndef STRATA_SERVE_BATCH_INTERNAL_H
#define STRATA_SERVE_BATCH_INTERNAL_H

#include "serve/stop_check.h"
#include "strata/serve.h"

/* One sequence slot of a replica: the forward pass's sequence of the same
 * index. Free when req is SIZE_MAX. */
typedef struct strata__batch_seq {
	size_t req;			 /* request index in the run */
	const strata_batch_request *q;	 /* borrowed for the run */
	strata_batch_result *res;	 /* borrowed for the run */
	strata_sampler *smp;
	int32_t *hist;			 /* prompt then generated, n_hist */
	size_t n_hist;
	uint32_t sampled;		 /* samples drawn, EOS included */
	int32_t next;			 /* the token the next step feeds */
	uint32_t fed;			 /* prompt positions computed (the
					    prefix cache's included) */
	uint64_t joined;		 /* join order: prompts read first
					    come first */
	strata_prefix_cache *cache;	 /* where its prompt is saved once
					    computed; NULL: not saved */
	bool done;			 /* result complete */
	bool failed;			 /* its work failed on this replica */
	uint64_t t0, t_first;		 /* start of its work, first token */
	const strata_batch_ends *ends;	 /* NULL: none */
	strata__stop_check stop;	 /* its stop strings */
} strata__batch_seq;

/* Up to `count` sequences of one session, stepped together. */
typedef struct strata__batch_seqs {
	strata_session *session;	 /* borrowed */
	int32_t eos;			 /* -1: none */
	bool affinity;			 /* requests away from their resident
					    device are cache guests */
	uint32_t count;			 /* the session's sequences: --batch */
	strata__batch_seq *seq;		 /* (count) */
	float *logits;			 /* (count, vocab) */
	strata_forward_segment *segs;	 /* (count) a step's segments */
	uint32_t *order;		 /* (count) prompts to read, by join */
	uint64_t joins;			 /* requests joined so far */
	strata_batch_replica_stats *stats; /* the replica's, borrowed */
	const strata_tokenizer *tok;	 /* for stop strings; borrowed */
	/* each request's ends (strata_batch_options.ends_of); NULL: none */
	const strata_batch_ends *(*ends_of)(void *user, size_t index);
	void *ends_user;
} strata__batch_seqs;

/* Slots for every sequence of session s (all free). E_NOMEM; on failure
 * nothing is held. */
strata_status strata__batch_seqs_init(strata__batch_seqs *ss,
				      strata_session *s, int32_t eos,
				      bool affinity,
				      strata_batch_replica_stats *stats,
				      strata_error *err);
void strata__batch_seqs_fini(strata__batch_seqs *ss);

/* A free slot's index, or UINT32_MAX; and how many are taken. */
uint32_t strata__batch_seqs_free_slot(const strata__batch_seqs *ss);
uint32_t strata__batch_seqs_taken(const strata__batch_seqs *ss);

/* Takes `slot` for request `req` (q and res for the run): the result's
 * token array, a sampler with the request's own seed, the prompt as
 * history, the prefix cache's longest match restored (cache may be NULL;
 * a copy, no pass of the weights). The rest of the prompt is read by the
 * steps that follow, in chunks beside the others' decode tokens; once it
 * is all computed it is saved to the cache and the first token drawn.
 * The result's device and home must be set. On failure the slot is still
 * taken (marked failed): strata__batch_seq_end frees it. */
strata_status strata__batch_seq_start(strata__batch_seqs *ss, uint32_t slot,
				      size_t req,
				      const strata_batch_request *q,
				      strata_batch_result *res,
				      strata_prefix_cache *cache,
				      strata_error *err);

/* One mixed step, one pass of the weights (strata_forward_step_segments):
 * the decode token of every slot decoding, then chunks of the prompts
 * still to read, in join order, as many rows as the step takes; a sample
 * for each slot decoded or whose prompt the step ended (that prompt saved
 * to the cache first). Does nothing when none waits. On failure the slots
 * in the step are marked failed. */
strata_status strata__batch_seqs_step(strata__batch_seqs *ss,
				      strata_error *err);

/* Frees the slot's sampler and history and the slot; the result keeps its
 * tokens and gets its final timings. */
void strata__batch_seq_end(strata__batch_seqs *ss, uint32_t slot);

/* Where routing keys' prefix state lives, for the follow route
 * (batch_residence.c): 64 bits of each key's BLAKE3 digest to the replica
 * it lives on, its recent demand (request cost, halved each epoch), the
 * prefix cache bytes its prompt takes and how many of its requests in a
 * row ran elsewhere; each replica's demand and bytes are the sums of its
 * keys', its room the bytes its prefix cache holds. */
#define STRATA__RESIDENCE_MOVE_AFTER 2u	 /* spills in a row before a move */
/* requests between halvings, per replica */
#define STRATA__RESIDENCE_EPOCH_PER_REPLICA 128u
#define STRATA__RESIDENCE_FORGET 4u	 /* epochs unseen before forgetting */
typedef struct strata__residence_key {
	uint64_t tag;	 /* 0: empty slot */
	uint64_t demand; /* cost of its requests, halved each epoch */
	uint64_t bytes;	 /* cache bytes of its last request's prompt */
	uint32_t device; /* where it lives */
	uint32_t seen;	 /* the epoch of its last request */
	uint8_t strikes; /* its requests in a row run elsewhere */
} strata__residence_key;
typedef struct strata__residence {
	strata__residence_key *slot;
	size_t cap, count;
	uint32_t replicas;
	uint32_t epoch;
	uint64_t placed; /* requests routed in this epoch */
	uint64_t load[STRATA_BATCH_MAX_REPLICAS]; /* demand of its keys */
	uint64_t held[STRATA_BATCH_MAX_REPLICAS]; /* bytes of its keys */
	uint64_t room[STRATA_BATCH_MAX_REPLICAS]; /* its cache's bound */
	uint64_t bytes_per_position; /* a cached prompt's, KV and id */
} strata__residence;

/* An empty table for `replicas` (1..STRATA_BATCH_MAX_REPLICAS) replicas,
 * each with unbounded room; fini empties it again, keeping the count, the
 * rooms and the bytes per position (0 until set: keys take no room). */
void strata__residence_init(strata__residence *t, uint32_t replicas);
/* Replica `device`'s prefix cache holds `bytes`; every cached prompt
 * position takes `per_position` (the same for every replica). */
void strata__residence_set_room(strata__residence *t, uint32_t device,
				uint64_t bytes, uint64_t per_position);
void strata__residence_fini(strata__residence *t);
uint64_t strata__residence_tag(const void *key, size_t key_bytes);
/* Room for one more key, so the next route cannot fail. E_NOMEM leaves the
 * table as it was. */
strata_status strata__residence_reserve(strata__residence *t,
					strata_error *err);
/* A request of `cost` with an n_prompt-token prompt for the key whose
 * BLAKE3 home is `home`: where the key lives (placing it when new), its
 * demand and bytes counted there. Needs a reserve since the last route. */
uint32_t strata__residence_route(strata__residence *t, uint64_t tag,
				 uint32_t home, uint64_t cost,
				 uint32_t n_prompt);
/* The key's request routed last ran on `device`: spilled requests count
 * towards a move (batch_residence.c says when one is made). */
void strata__residence_ran(strata__residence *t, uint64_t tag,
			   uint32_t device);
/* Where the key lives (`home` when unknown) and its demand (0); for tests
 * and figures. */
uint32_t strata__residence_home(const strata__residence *t, uint64_t tag,
				uint32_t home);
uint64_t strata__residence_demand(const strata__residence *t, uint64_t tag);

#endif
