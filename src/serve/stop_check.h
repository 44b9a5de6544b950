/* stop_check.h - where a request's generated text meets a stop string: one
 * small object per running sequence, fed each generated token, that says
 * at the step the stop completes that the sequence is done (stop_check.c;
 * layer: serve). Not a public header.
 *
 * It decodes exactly as the commands do when they print a result (the
 * streaming decoder continuing the prompt, special tokens skipped, then
 * the stop matcher), so the token it stops at is the one after which the
 * printed text is cut: generation ending there gives the text a full run
 * cut afterwards would, without computing the tokens past the cut.
 */
#ifndef STRATA_SERVE_STOP_CHECK_H
#define STRATA_SERVE_STOP_CHECK_H

#include "strata/text.h"

typedef struct strata__stop_check {
	strata_text_stream *ts;	 /* NULL: no stop strings, never stops */
	strata_stop_matcher *m;
} strata__stop_check;

/* Ready for the continuation of prompt (n_prompt ids) through tok, ended
 * by stops[0..count) (lens NULL: NUL-terminated). count 0 (or tok NULL
 * with count 0) makes a check that never stops and holds nothing.
 * Errors: the decoder's and the matcher's (E_INVALID_ARG naming the bad
 * stop string, E_NOMEM); on failure c holds nothing. */
strata_status strata__stop_check_init(strata__stop_check *c,
				      const strata_tokenizer *tok,
				      const int32_t *prompt, size_t n_prompt,
				      const char *const *stops,
				      const size_t *lens, size_t count,
				      strata_error *err);

/* One generated token: *stop is true when the text up to it holds a stop
 * string (the sequence ends with this token kept; later tokens are never
 * asked for). Errors: the decoder's (E_INVALID_ARG for an id outside the
 * vocabulary, E_NOMEM). */
strata_status strata__stop_check_push(strata__stop_check *c, int32_t token,
				      bool *stop, strata_error *err);

void strata__stop_check_fini(strata__stop_check *c); /* zeroed one fine */

#endif
