/* generate.c - the generation loop: prefill the prompt in one pass, then
 * sample and decode one token at a time until EOS, the token budget or the
 * context runs out, timing each phase (layer: infer). */
#include <string.h>

#include "strata/infer.h"

strata_status strata_generate(strata_forward *f, strata_sampler *s,
			      const int32_t *prompt, uint32_t n_prompt,
			      uint32_t max_new, int32_t eos,
			      strata_token_fn on_token, void *user,
			      strata_generate_stats *stats, strata_error *err)
{
	strata_generate_stats st0 = {0};
	if (!f || !s || !prompt || n_prompt == 0 || !on_token)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give at least one prompt token",
				   "generation needs a prompt of at least one "
				   "token");
	uint32_t vocab = strata_forward_hparams(f)->vocab;
	uint64_t hist_cap = (uint64_t)n_prompt + max_new;
	int32_t *hist = strata_calloc_or_error(hist_cap ? hist_cap : 1,
					       sizeof *hist, "token history",
					       err);
	float *logits = strata_calloc_or_error(vocab, sizeof *logits,
					       "logits", err);
	strata_status st = STRATA_E_NOMEM;
	if (!hist || !logits)
		goto out;
	memcpy(hist, prompt, n_prompt * sizeof *hist);
	size_t n_hist = n_prompt;

	uint64_t t0 = strata_now_ns();
	uint32_t pos = strata_forward_position(f);
	st = strata_forward_run(f, prompt, n_prompt, pos, NULL, logits, err);
	if (st)
		goto out;
	st0.prompt_tokens = n_prompt;
	st0.prompt_ns = strata_now_ns() - t0;
	pos += n_prompt;

	uint64_t t_first = 0;
	for (uint32_t i = 0; i < max_new; i++) {
		if ((st = strata_logits_check(logits, vocab, pos - 1, err)))
			goto out;
		int32_t tok = strata_sampler_sample(s, logits, hist, n_hist);
		if (i == 0) {
			t_first = strata_now_ns();
			st0.first_token_ns = t_first - t0;
		}
		if (tok == eos && eos >= 0) {
			st0.stopped_at_eos = true;
			break;
		}
		hist[n_hist++] = tok;
		st0.generated_tokens++;
		if ((st = on_token(user, tok, err)) == STRATA_E_INFER_STOP) {
			st0.stopped_by_caller = true;
			break;
		}
		if (st)
			goto out;
		if (i + 1 == max_new)
			break;
		if (pos >= strata_forward_context(f))
			break; /* the context is full: stop, not fail */
		if ((st = strata_forward_run(f, &tok, 1, pos, NULL, logits,
					     err)))
			goto out;
		pos++;
	}
	if (t_first)
		st0.generate_ns = strata_now_ns() - t_first;
	st = STRATA_OK;
out:
	if (stats)
		*stats = st0;
	strata_free(hist);
	strata_free(logits);
	return st;
}
