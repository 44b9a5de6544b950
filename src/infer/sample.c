/* sample.c - choosing the next token: repetition penalty, then greedy, or
 * temperature with top-k, top-p and min-p filtering, drawn with a seeded
 * generator so the same seed gives the same text (layer: infer).
 *
 * The order follows llama.cpp's common chain: penalty, top-k, softmax at the
 * temperature, top-p, min-p, draw. Candidate buffers are sized at create, so
 * sampling never allocates.
 */
#include <math.h>
#include <stdlib.h>

#include "strata/infer.h"

typedef struct cand {
	float logit, p;
	int32_t id;
} cand;

struct strata_sampler {
	strata_sampler_params p;
	uint32_t vocab;
	uint64_t rng;	/* xorshift64* state, never 0 */
	cand *c;	/* (vocab) */
};

/* ------------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Uniform in [0, 1) with 24 bits. */
static float next_uniform(strata_sampler *s)
{
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	uint64_t r = s->rng * 0x2545F4914F6CDD1Dull;
	return (float)(r >> 40) / 16777216.0f;
}

/* Descending logit, then ascending id, so ties order the same everywhere. */
static int by_logit(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

static void penalise(const strata_sampler *s, float *logits,
		     const int32_t *history, size_t n)
{
	if (s->p.repeat_penalty == 1.0f || n == 0)
		return;
	size_t from = s->p.repeat_last_n && n > s->p.repeat_last_n
			      ? n - s->p.repeat_last_n : 0;
	/* Each distinct token once: mark by negating through a pass over the
	 * candidate ids (c[].id doubles as a seen flag here). */
	for (size_t i = from; i < n; i++)
		if (history[i] >= 0 && (uint32_t)history[i] < s->vocab)
			s->c[history[i]].id = -1;
	for (size_t i = from; i < n; i++) {
		int32_t t = history[i];
		if (t < 0 || (uint32_t)t >= s->vocab || s->c[t].id != -1)
			continue;
		s->c[t].id = t;
		logits[t] = logits[t] > 0 ? logits[t] / s->p.repeat_penalty
					  : logits[t] * s->p.repeat_penalty;
	}
}

/* The lowest id of the largest logit (NaN never wins). The best value is
 * kept in a register: comparing against logits[best] made every step wait
 * on a load that depends on the last step's choice, 131 us over a
 * 32000-token vocabulary, more than a decode step of some models. */
static int32_t argmax(const float *logits, uint32_t vocab)
{
	int32_t best = 0;
	float top = logits[0];
	for (uint32_t i = 1; i < vocab; i++) {
		if (logits[i] > top) {
			top = logits[i];
			best = (int32_t)i;
		}
	}
	return best;
}

/* ------------------------------------------------------------------------ */

void strata_sampler_params_default(strata_sampler_params *p)
{
	*p = (strata_sampler_params){.temperature = 0.8f, .top_k = 40,
				     .top_p = 0.95f, .min_p = 0.05f,
				     .repeat_penalty = 1.0f,
				     .repeat_last_n = 64, .seed = 0};
}

strata_status strata_sampler_create(const strata_sampler_params *p,
				    uint32_t vocab, strata_sampler **out,
				    strata_error *err)
{
	const char *bad = NULL;
	if (!(p->temperature >= 0 && isfinite(p->temperature)))
		bad = "--temperature must be a finite number >= 0";
	else if (!(p->top_p > 0 && p->top_p <= 1))
		bad = "--top-p must be in (0, 1]";
	else if (!(p->min_p >= 0 && p->min_p <= 1))
		bad = "--min-p must be in [0, 1]";
	else if (!(p->repeat_penalty > 0 && isfinite(p->repeat_penalty)))
		bad = "--repeat-penalty must be a finite number > 0";
	else if (vocab == 0)
		bad = "the vocabulary is empty";
	if (bad)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give a value in the stated range",
				   "sampler: %s", bad);
	strata_sampler *s = strata_calloc_or_error(1, sizeof *s, "sampler",
						   err);
	if (!s)
		return STRATA_E_NOMEM;
	s->c = strata_calloc_or_error(vocab, sizeof *s->c,
				      "sampler candidates", err);
	if (!s->c) {
		strata_free(s);
		return STRATA_E_NOMEM;
	}
	for (uint32_t i = 0; i < vocab; i++)
		s->c[i].id = (int32_t)i;
	s->p = *p;
	s->vocab = vocab;
	s->rng = splitmix(p->seed) | 1;
	*out = s;
	return STRATA_OK;
}

void strata_sampler_destroy(strata_sampler *s)
{
	if (!s)
		return;
	strata_free(s->c);
	strata_free(s);
}

strata_status strata_logits_check(const float *logits, uint32_t vocab,
				  uint64_t position, strata_error *err)
{
	bool finite = false;
	for (uint32_t i = 0; i < vocab; i++) {
		float v = logits[i];
		if (isnan(v) || v == INFINITY)
			return strata_fail(err, STRATA_E_INFER_NONFINITE,
					   "check the weights and config.json "
					   "(rope_theta, norms) for NaN, "
					   "infinite or zero values",
					   "the logits of position %llu hold %s "
					   "(token id %u): no token can be drawn",
					   (unsigned long long)position,
					   isnan(v) ? "NaN" : "+inf", i);
		finite |= isfinite(v);
	}
	if (!finite && vocab)
		return strata_fail(err, STRATA_E_INFER_NONFINITE,
				   "check the weights for infinite values",
				   "the logits of position %llu are all -inf: no "
				   "token can be drawn",
				   (unsigned long long)position);
	return STRATA_OK;
}

int32_t strata_sampler_sample(strata_sampler *s, float *logits,
			      const int32_t *history, size_t n_history)
{
	penalise(s, logits, history, n_history);
	if (s->p.temperature == 0.0f)
		return argmax(logits, s->vocab);

	uint32_t n = s->vocab;
	for (uint32_t i = 0; i < n; i++)
		s->c[i] = (cand){.logit = logits[i], .id = (int32_t)i};
	bool filters = s->p.top_k || s->p.top_p < 1.0f || s->p.min_p > 0.0f;
	if (filters)
		qsort(s->c, n, sizeof *s->c, by_logit);
	if (s->p.top_k && s->p.top_k < n)
		n = s->p.top_k;

	float max = s->c[0].logit;
	for (uint32_t i = 1; i < n; i++)
		if (s->c[i].logit > max)
			max = s->c[i].logit;
	double sum = 0;
	for (uint32_t i = 0; i < n; i++) {
		s->c[i].p = expf((s->c[i].logit - max) / s->p.temperature);
		sum += s->c[i].p;
	}
	for (uint32_t i = 0; i < n; i++)
		s->c[i].p = (float)(s->c[i].p / sum);
	if (s->p.top_p < 1.0f) { /* smallest prefix reaching top_p */
		double acc = 0;
		for (uint32_t i = 0; i < n; i++) {
			acc += s->c[i].p;
			if (acc >= s->p.top_p) {
				n = i + 1;
				break;
			}
		}
	}
	if (s->p.min_p > 0.0f) { /* sorted: c[0] has the largest p */
		float floor_p = s->p.min_p * s->c[0].p;
		uint32_t keep = 1;
		while (keep < n && s->c[keep].p >= floor_p)
			keep++;
		n = keep;
	}
	double total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += s->c[i].p;
	double r = next_uniform(s) * total, acc = 0;
	for (uint32_t i = 0; i < n; i++) {
		acc += s->c[i].p;
		if (r < acc)
			return s->c[i].id;
	}
	return s->c[n - 1].id;
}
