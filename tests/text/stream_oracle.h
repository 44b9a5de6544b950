/* stream_oracle.h - the streaming decoder's promise as one check, shared by
 * the text tests and the tokenizer fuzzers (layer: text, tests).
 *
 * For ids split at k, with W = decode(ids) and P = decode(ids[:k]) (the
 * whole decoder, same skip_special): a stream continuing ids[:k] and fed
 * ids[k:] gives W without its first len(P) bytes when P is a prefix of W,
 * else W from the first character where P and W differ; every piece a
 * push or the finish returns is whole, valid UTF-8. With k = 0 that is the
 * whole decode, byte for byte. Needs text/internal.h.
 */
#ifndef STRATA_STREAM_ORACLE_H
#define STRATA_STREAM_ORACLE_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "strata/text.h"

static inline bool so_valid_utf8(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = strata__utf8_valid_len((const unsigned char *)s + i,
						  n - i);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

/* Byte offset in w where the continuation of p starts (see above). */
static inline size_t so_continuation_start(const char *p, size_t pn,
					   const char *w, size_t wn)
{
	if (pn <= wn && !memcmp(p, w, pn))
		return pn;
	size_t i = 0;
	while (i < pn && i < wn) {
		size_t k = strata__utf8_valid_len((const unsigned char *)p + i,
						  pn - i);
		k = k ? k : 1;
		if (i + k > wn || memcmp(p + i, w + i, k))
			break;
		i += k;
	}
	return i;
}

/* The stream's whole output continuing ids[:k] with ids[k:n], malloc'd
 * (NUL-ended, *len bytes); NULL when a call failed (*st says how) or a
 * piece was not whole UTF-8 (*st = STRATA_OK, *bad_piece = true). */
static inline char *so_stream(const strata_tokenizer *t, const int32_t *ids,
			      size_t n, size_t k, bool skip, size_t *len,
			      strata_status *st, bool *bad_piece)
{
	strata_error err;
	strata_text_stream *s = NULL;
	*bad_piece = false;
	*len = 0;
	*st = strata_text_stream_create(t, ids, k, skip, &s, &err);
	if (*st)
		return NULL;
	size_t cap = 64;
	char *out = malloc(cap);
	for (size_t i = k; out && i <= n; i++) {
		const char *p;
		size_t m;
		*st = i < n ? strata_text_stream_push(s, ids[i], &p, &m, &err)
			    : strata_text_stream_finish(s, &p, &m, &err);
		if (*st || !so_valid_utf8(p, m)) {
			*bad_piece = !*st;
			free(out);
			out = NULL;
			break;
		}
		while (*len + m + 1 > cap) {
			char *o = realloc(out, cap *= 2);
			if (!o) {
				free(out);
				out = NULL;
				break;
			}
			out = o;
		}
		if (out) {
			memcpy(out + *len, p, m);
			*len += m;
			out[*len] = '\0';
		}
	}
	strata_text_stream_destroy(s);
	return out;
}

/* NULL when the promise holds for split k (or a call ran out of memory),
 * else what broke it. */
static inline const char *so_check(const strata_tokenizer *t,
				   const int32_t *ids, size_t n, size_t k,
				   bool skip)
{
	strata_error err;
	char *w = NULL, *p = NULL, *s = NULL;
	size_t wn = 0, pn = 0, sn = 0;
	strata_status st;
	bool bad_piece = false;
	const char *why = NULL;
	if (strata_tokenizer_decode(t, ids, n, skip, &w, &wn, &err) ||
	    strata_tokenizer_decode(t, ids, k, skip, &p, &pn, &err))
		goto done;
	s = so_stream(t, ids, n, k, skip, &sn, &st, &bad_piece);
	if (bad_piece)
		why = "a piece is not whole UTF-8";
	else if (!s && st != STRATA_E_NOMEM)
		why = "a stream call failed";
	else if (s) {
		size_t off = so_continuation_start(p, pn, w, wn);
		if (sn != wn - off || memcmp(s, w + off, sn))
			why = "the stream differs from the whole decode";
	}
done:
	free(s);
	strata_free(p);
	strata_free(w);
	return why;
}

#endif
