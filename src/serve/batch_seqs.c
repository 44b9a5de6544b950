/* batch_seqs.c - one replica's running requests, up to --batch B of them,
 * scheduled continuously: every step is one pass of the weights
 * (strata_forward_step_segments) carrying the decode token of every
 * request decoding and chunks of the prompts of those that joined, as many
 * rows as the forward pass takes; a finished request's slot takes the next
 * one at the next step. In a streamed residency one pass of the weights so
 * serves every running request, prompts included (issue 19) (layer:
 * serve).
 *
 * Each request keeps its own sampler (its seed), history and sequence, and
 * draws its samples in the order strata_generate does, so its tokens do
 * not depend on what runs beside it: greedy or sampled, --batch B gives
 * --batch 1's tokens (tests/serve/test_batch.c).
 */
#include <string.h>

#include "serve/batch_internal.h"

/* ------------------------------------------------------------------------ */

static void slot_clear(strata__batch_seq *s)
{
	memset(s, 0, sizeof *s);
	s->req = SIZE_MAX;
}

/* What strata_generate does after a forward pass gave `logits` for the
 * slot: draw the next token, stop at EOS, the budget or the context's
 * end, else leave the token for the next step. A row no token can be drawn
 * from (NaN) fails the sequence: E_INFER_NONFINITE. */
static strata_status advance(strata__batch_seqs *ss, uint32_t slot,
			     float *logits, strata_error *err)
{
	strata__batch_seq *s = &ss->seq[slot];
	strata_batch_result *res = s->res;
	uint32_t max_new = s->q->max_tokens;
	if (s->sampled == max_new) {
		s->done = true;
		return STRATA_OK;
	}
	strata_forward *f = strata_session_forward(ss->session);
	uint32_t pos = strata_forward_position_of(f, slot);
	strata_status st = strata_logits_check(
		logits, strata_session_hparams(ss->session)->vocab,
		pos ? pos - 1 : 0, err);
	if (st) {
		s->failed = true;
		return st;
	}
	int32_t tok = strata_sampler_sample(s->smp, logits, s->hist,
					    s->n_hist);
	if (s->sampled++ == 0) {
		s->t_first = strata_now_ns();
		res->gen.first_token_ns = s->t_first - s->t0;
	}
	if (tok == ss->eos && ss->eos >= 0) {
		res->gen.stopped_at_eos = true;
		s->done = true;
		return STRATA_OK;
	}
	if (s->ends && s->ends->has_stop_token &&
	    tok == s->ends->stop_token) {
		res->stopped = true; /* the end of turn, not kept */
		s->done = true;
		return STRATA_OK;
	}
	s->hist[s->n_hist++] = tok;
	res->gen.generated_tokens++;
	res->tokens[res->n_tokens++] = tok; /* sized for max_tokens */
	bool stop = false;
	st = strata__stop_check_push(&s->stop, tok, &stop, err);
	if (st) {
		s->failed = true;
		return st;
	}
	pos = strata_forward_position_of(f, slot);
	if (stop) {
		/* the text now holds a stop string: the tokens after this
		 * one would be cut, so none is computed (its slot frees) */
		res->stopped = true;
		res->gen.stopped_by_caller = true;
		s->done = true;
	} else if (s->sampled == max_new || pos >= strata_forward_context(f))
		s->done = true; /* the context is full: stop, not fail */
	else
		s->next = tok;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata__batch_seqs_init(strata__batch_seqs *ss,
				      strata_session *s, int32_t eos,
				      bool affinity,
				      strata_batch_replica_stats *stats,
				      strata_error *err)
{
	memset(ss, 0, sizeof *ss);
	uint32_t n = strata_forward_sequences(strata_session_forward(s));
	ss->session = s;
	ss->eos = eos;
	ss->affinity = affinity;
	ss->count = n;
	ss->stats = stats;
	ss->seq = strata_calloc_or_error(n, sizeof *ss->seq, "sequence slots",
					 err);
	/* Pinned where the backend pins: every step copies its logits rows
	 * back from the device, and a pageable destination would take the
	 * driver's staging path each time. */
	void *logits = NULL;
	uint64_t logits_bytes = (uint64_t)n * strata_session_hparams(s)->vocab *
				sizeof(float);
	strata_status st = ss->seq ? strata_backend_host_alloc(
					     strata_session_backend(s),
					     logits_bytes, true, &logits, err)
				   : STRATA_E_NOMEM;
	ss->logits = logits;
	ss->segs = ss->logits ? strata_calloc_or_error(n, sizeof *ss->segs,
						       "step segments", err)
			      : NULL;
	ss->order = ss->segs ? strata_calloc_or_error(n, sizeof *ss->order,
						      "prompt order", err)
			     : NULL;
	if (!ss->order) {
		strata__batch_seqs_fini(ss);
		return st ? st : STRATA_E_NOMEM;
	}
	memset(ss->logits, 0, (size_t)logits_bytes);
	for (uint32_t i = 0; i < n; i++)
		slot_clear(&ss->seq[i]);
	return STRATA_OK;
}

void strata__batch_seqs_fini(strata__batch_seqs *ss)
{
	for (uint32_t i = 0; ss->seq && i < ss->count; i++)
		if (ss->seq[i].req != SIZE_MAX)
			strata__batch_seq_end(ss, i);
	strata_free(ss->seq);
	if (ss->logits)
		strata_backend_host_free(strata_session_backend(ss->session),
					 ss->logits);
	strata_free(ss->segs);
	strata_free(ss->order);
	memset(ss, 0, sizeof *ss);
}

uint32_t strata__batch_seqs_free_slot(const strata__batch_seqs *ss)
{
	for (uint32_t i = 0; i < ss->count; i++)
		if (ss->seq[i].req == SIZE_MAX)
			return i;
	return UINT32_MAX;
}

uint32_t strata__batch_seqs_taken(const strata__batch_seqs *ss)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < ss->count; i++)
		n += ss->seq[i].req != SIZE_MAX;
	return n;
}

strata_status strata__batch_seq_start(strata__batch_seqs *ss, uint32_t slot,
				      size_t req,
				      const strata_batch_request *q,
				      strata_batch_result *res,
				      strata_prefix_cache *cache,
				      strata_error *err)
{
	strata_forward *f = strata_session_forward(ss->session);
	strata__batch_seq *s = &ss->seq[slot];
	slot_clear(s);
	s->req = req;
	s->q = q;
	s->res = res;
	s->failed = true; /* until it has started */
	uint64_t t_start = strata_now_ns();
	uint64_t hist_cap = (uint64_t)q->n_prompt + q->max_tokens;
	res->tokens = strata_alloc_or_error(
		(q->max_tokens ? q->max_tokens : 1) * sizeof(int32_t),
		"generated ids", err);
	s->hist = res->tokens ? strata_alloc_or_error(
					hist_cap * sizeof *s->hist,
					"token history", err)
			      : NULL;
	if (!s->hist)
		return STRATA_E_NOMEM;
	memcpy(s->hist, q->prompt, q->n_prompt * sizeof *s->hist);
	s->n_hist = q->n_prompt;
	s->ends = ss->ends_of ? ss->ends_of(ss->ends_user, req) : NULL;
	strata_status st =
		s->ends ? strata__stop_check_init(&s->stop, ss->tok, q->prompt,
						  q->n_prompt, s->ends->stops,
						  s->ends->stop_lens,
						  s->ends->n_stops, err)
			: STRATA_OK;
	if (st)
		return st;
	uint32_t reused = 0;
	/* The sampler sees the prompt as history; only with no repeat
	 * penalty is a suffix-only history the same choice. */
	bool use_cache = cache && q->sampler.repeat_penalty == 1.0f;
	uint32_t vocab = strata_session_hparams(ss->session)->vocab;
	st = strata_sampler_create(&q->sampler, vocab, &s->smp, err);
	if (st == STRATA_OK)
		st = strata_forward_select(f, slot, err);
	uint64_t t_cache = strata_now_ns();
	if (st == STRATA_OK && use_cache)
		st = strata_prefix_cache_apply(cache, f, q->prompt,
					       q->n_prompt, &reused, err);
	else if (st == STRATA_OK)
		strata_forward_reset(f);
	s->t0 = strata_now_ns(); /* strata_generate's: after the cache */
	ss->stats->prefix_ns += s->t0 - t_cache;
	ss->stats->busy_ns += s->t0 - t_start;
	res->prefix_tokens = reused;
	res->gen.prompt_tokens = q->n_prompt;
	if (st)
		return st;
	s->cache = use_cache ? cache : NULL;
	s->fed = reused;
	s->joined = ss->joins++;
	s->failed = false;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* One step                                                                 */
/* ------------------------------------------------------------------------ */

static bool running(const strata__batch_seq *s)
{
	return s->req != SIZE_MAX && !s->done && !s->failed;
}

/* The step's segments: decode tokens first (each one row), then the
 * prompts still to read, in join order, each the most of it the rows
 * left take. Returns the segment count; *rows the rows, *prompt_rows
 * those of prompts. */
static uint32_t build_step(strata__batch_seqs *ss, uint32_t *rows,
			   uint32_t *prompt_rows)
{
	uint32_t n = 0, waiting = 0, used = 0;
	uint32_t cap = strata_forward_step_rows(
		strata_session_forward(ss->session));
	for (uint32_t i = 0; i < ss->count; i++) {
		strata__batch_seq *s = &ss->seq[i];
		if (!running(s))
			continue;
		if (s->fed < s->q->n_prompt) {
			/* insertion by join order: the count is small */
			uint32_t k = waiting++;
			while (k && ss->seq[ss->order[k - 1]].joined > s->joined) {
				ss->order[k] = ss->order[k - 1];
				k--;
			}
			ss->order[k] = i;
			continue;
		}
		ss->segs[n++] = (strata_forward_segment){i, &s->next, 1, true};
		used++;
	}
	*prompt_rows = 0;
	for (uint32_t k = 0; k < waiting && used < cap; k++) {
		strata__batch_seq *s = &ss->seq[ss->order[k]];
		uint32_t left = s->q->n_prompt - s->fed, take = cap - used;
		take = left < take ? left : take;
		ss->segs[n++] = (strata_forward_segment){
			ss->order[k], s->hist + s->fed, take, take == left};
		used += take;
		*prompt_rows += take;
	}
	*rows = used;
	return n;
}

/* After the step: a prompt it ended is saved to the prefix cache (its
 * positions do not change while it decodes, so the apply and save of one
 * request are never split by another's; a request spilled here from
 * where its key lives is a guest: kept while there is room, evicted
 * before this replica's own keys; round-robin has no homes to protect)
 * and its prompt time recorded. */
static strata_status prompt_read(strata__batch_seqs *ss, uint32_t slot,
				 strata_error *err)
{
	strata__batch_seq *s = &ss->seq[slot];
	strata_batch_result *res = s->res;
	res->gen.prompt_ns = strata_now_ns() - s->t0;
	if (!s->cache)
		return STRATA_OK;
	strata_forward *f = strata_session_forward(ss->session);
	bool guest = ss->affinity && res->device != res->resident_device;
	uint64_t t = strata_now_ns();
	strata_status st = strata_forward_select(f, slot, err);
	if (st == STRATA_OK)
		st = strata_prefix_cache_save(s->cache, f, s->q->prompt,
					      s->q->n_prompt, guest, err);
	ss->stats->prefix_ns += strata_now_ns() - t;
	return st;
}

/* Each segment of the step done: prompt positions counted, a sample
 * where logits came back (row j of ss->logits for the j-th asking). The
 * first failure marks its slot failed and stops the sampling. */
static strata_status after_step(strata__batch_seqs *ss, uint32_t n,
				strata_error *err)
{
	uint32_t vocab = strata_session_hparams(ss->session)->vocab, row = 0;
	strata_status st = STRATA_OK;
	for (uint32_t k = 0; k < n && st == STRATA_OK; k++) {
		const strata_forward_segment *g = &ss->segs[k];
		strata__batch_seq *s = &ss->seq[g->seq];
		bool prompt = s->fed < s->q->n_prompt;
		if (prompt)
			s->fed += g->n;
		if (!g->logits)
			continue;
		float *logits = ss->logits + (uint64_t)row++ * vocab;
		if (prompt && (st = prompt_read(ss, g->seq, err)))
			s->failed = true;
		if (st == STRATA_OK)
			st = advance(ss, g->seq, logits, err);
	}
	return st;
}

strata_status strata__batch_seqs_step(strata__batch_seqs *ss,
				      strata_error *err)
{
	uint32_t rows, prompt_rows;
	uint32_t n = build_step(ss, &rows, &prompt_rows);
	if (n == 0)
		return STRATA_OK;
	strata_forward *f = strata_session_forward(ss->session);
	uint64_t t0 = strata_now_ns();
	strata_status st = strata_forward_step_segments(f, ss->segs, n,
							ss->logits, err);
	uint64_t t1 = strata_now_ns();
	if (prompt_rows)
		ss->stats->prefill_ns += t1 - t0;
	else
		ss->stats->step_ns += t1 - t0;
	if (st) {
		ss->stats->busy_ns += t1 - t0;
		for (uint32_t k = 0; k < n; k++)
			ss->seq[ss->segs[k].seq].failed = true;
		return st;
	}
	ss->stats->passes++;
	ss->stats->pass_rows += rows;
	ss->stats->tokens += rows;
	if (rows > prompt_rows) {
		ss->stats->decode_steps++;
		ss->stats->decode_rows += rows - prompt_rows;
	}
	st = after_step(ss, n, err);
	/* as for a failed step: the rows left unsampled fail with it */
	for (uint32_t k = 0; st && k < n; k++)
		ss->seq[ss->segs[k].seq].failed = true;
	ss->stats->busy_ns += strata_now_ns() - t0; /* sampling included */
	return st;
}

void strata__batch_seq_end(strata__batch_seqs *ss, uint32_t slot)
{
	strata__batch_seq *s = &ss->seq[slot];
	if (s->done && s->t_first)
		s->res->gen.generate_ns = strata_now_ns() - s->t_first;
	if (s->done)
		ss->stats->requests++;
	strata_sampler_destroy(s->smp);
	strata_free(s->hist);
	strata__stop_check_fini(&s->stop);
	slot_clear(s);
}
