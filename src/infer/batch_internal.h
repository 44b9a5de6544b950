/* batch_internal.h - one replica's running sequences, shared by batch.c
 * (threads, routing, failover) and batch_seqs.c (prefill each request,
 * decode all of them together) (layer: infer). Not a public header. */
#ifndef STRATA_INFER_BATCH_INTERNAL_H
#define STRATA_INFER_BATCH_INTERNAL_H

#include "strata/batch.h"

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
	bool done;			 /* result complete */
	bool failed;			 /* its work failed on this replica */
	uint64_t t0, t_first;		 /* start of its work, first token */
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
	uint32_t *ids;			 /* (count) a step's sequences */
	int32_t *tokens;		 /* (count) a step's tokens */
	strata_batch_replica_stats *stats; /* the replica's, borrowed */
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
 * history, the prefix cache's longest match (cache may be NULL), the
 * prefill of the rest, the prompt saved to the cache, the first sample.
 * The result's device and home must be set. On failure the slot is still
 * taken (marked failed): strata__batch_seq_end frees it. */
strata_status strata__batch_seq_start(strata__batch_seqs *ss, uint32_t slot,
				      size_t req,
				      const strata_batch_request *q,
				      strata_batch_result *res,
				      strata_prefix_cache *cache,
				      strata_error *err);

/* One decode step of every taken slot that is not done, then a sample for
 * each; does nothing when none waits. On failure those slots are marked
 * failed. */
strata_status strata__batch_seqs_step(strata__batch_seqs *ss,
				      strata_error *err);

/* Frees the slot's sampler and history and the slot; the result keeps its
 * tokens and gets its final timings. */
void strata__batch_seq_end(strata__batch_seqs *ss, uint32_t slot);

/* Where routing keys' prefix state lives (batch_residence.c): 64 bits of
 * each key's BLAKE3 digest to the replica it lives on, and how many of its
 * requests in a row ran elsewhere (a key moves on the second). */
#define STRATA__RESIDENCE_MOVE_AFTER 2u
typedef struct strata__residence {
	uint64_t *tag; /* 0: empty */
	uint32_t *device;
	uint8_t *strikes;
	size_t cap, count;
} strata__residence;

uint64_t strata__residence_tag(const void *key, size_t key_bytes);
/* Where the key lives: `home` until it has moved. */
uint32_t strata__residence_home(const strata__residence *t, uint64_t tag,
				uint32_t home);
/* A request of the key, living on `resident`, ran on `device`. E_NOMEM. */
strata_status strata__residence_note(strata__residence *t, uint64_t tag,
				     uint32_t resident, uint32_t device,
				     strata_error *err);
void strata__residence_fini(strata__residence *t);

#endif
