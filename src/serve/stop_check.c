/* stop_check.c - a running sequence's stop strings, checked token by
 * token so the sequence ends at the step its text completes one (layer:
 * serve; see stop_check.h). */
#include <string.h>

#include "serve/stop_check.h"

strata_status strata__stop_check_init(strata__stop_check *c,
				      const strata_tokenizer *tok,
				      const int32_t *prompt, size_t n_prompt,
				      const char *const *stops,
				      const size_t *lens, size_t count,
				      strata_error *err)
{
	memset(c, 0, sizeof *c);
	if (count == 0)
		return STRATA_OK;
	if (!tok)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give the tokenizer with the stop strings",
				   "stop strings need a tokenizer to be "
				   "matched");
	/* skip_special true: the text the commands print and cut */
	strata_status st = strata_text_stream_create(tok, prompt, n_prompt,
						     true, &c->ts, err);
	if (st == STRATA_OK)
		st = strata_stop_matcher_create(stops, lens, count, &c->m,
						err);
	if (st)
		strata__stop_check_fini(c);
	return st;
}

strata_status strata__stop_check_push(strata__stop_check *c, int32_t token,
				      bool *stop, strata_error *err)
{
	*stop = false;
	if (!c->ts)
		return STRATA_OK;
	const char *t = NULL, *out = NULL;
	size_t len = 0, n = 0;
	int matched = -1;
	strata_status st = strata_text_stream_push(c->ts, token, &t, &len,
						   err);
	if (st == STRATA_OK && len)
		st = strata_stop_matcher_push(c->m, t, len, &out, &n, &matched,
					      err);
	*stop = st == STRATA_OK && matched >= 0;
	return st;
}

void strata__stop_check_fini(strata__stop_check *c)
{
	strata_stop_matcher_destroy(c->m);
	strata_text_stream_destroy(c->ts);
	memset(c, 0, sizeof *c);
}
