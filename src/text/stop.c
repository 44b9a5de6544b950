/* stop.c - the stop-string matcher: generated text, fed piece by piece,
 * comes out with whatever could still be the start of a stop string held
 * back, and ends at the first stop string that appears (layer: text).
 *
 * The text of a generation arrives in pieces (strata_text_stream's pushes,
 * one per token), and a stop string may be split over several of them.
 * A piece is appended to what was held; the stop string that ends first
 * in that text (the longest of those ending at the same byte) is the
 * match. With none, the longest tail that is a proper prefix of some
 * stop string is held, and so is an unfinished UTF-8 character; the rest
 * is settled. So the output never depends on how the text was split, and
 * a match can never begin in text already given out: every tail that
 * could begin one was held.
 *
 * Trust: stop strings come from requests (untrusted): their count and
 * length are capped, each must be non-empty valid UTF-8 (so a match
 * begins on a character boundary of valid text). Each push costs
 * O((held + piece) x total stop bytes) in the worst case, bounded by the
 * caps.
 */
#include <string.h>

#include "text/internal.h"

struct strata_stop_matcher {
	char **stops; /* count strings, NUL-terminated, lens[i] bytes */
	size_t *lens;
	size_t count;
	text_buf held; /* text that may still begin a stop string */
	text_buf out;  /* what the last call returned */
	bool stopped;
};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* First occurrence of needle (nn >= 1 bytes) in hay (hn bytes), or -1. */
static long find(const char *hay, size_t hn, const char *needle, size_t nn)
{
	if (nn > hn)
		return -1;
	for (size_t i = 0; i + nn <= hn; i++) {
		const char *p = memchr(hay + i, needle[0], hn - nn + 1 - i);
		if (!p)
			return -1;
		i = (size_t)(p - hay);
		if (!memcmp(p, needle, nn))
			return (long)i;
	}
	return -1;
}

/* Length of the longest tail of p (n bytes) that is a proper prefix of s
 * (sn bytes); 0 when none is. */
static size_t prefix_tail(const char *p, size_t n, const char *s, size_t sn)
{
	size_t from = n >= sn ? n - sn + 1 : 0;
	for (size_t i = from; i < n; i++)
		if (p[i] == s[0] && !memcmp(p + i, s, n - i))
			return n - i;
	return 0;
}

/* Bytes at the end of p (n bytes) that begin a UTF-8 character still
 * missing bytes; 0 when p ends on a boundary (or in invalid bytes, which
 * no later byte can make valid). */
static size_t unfinished_char(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		size_t i = n - k;
		if ((u[i] & 0xC0) == 0x80)
			continue; /* a continuation byte: look further back */
		return !strata__utf8_valid_len(u + i, k) &&
				       strata__utf8_partial_len(u + i, k) == k
			       ? k : 0;
	}
	return 0;
}

static strata_status set_out(strata_stop_matcher *m, const char *p, size_t n,
			     const char **text, size_t *len, strata_error *err)
{
	m->out.len = 0;
	strata_status st = strata__text_buf_add(&m->out, p, n, err);
	if (st)
		return st;
	*text = m->out.data ? m->out.data : "";
	*len = n;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Public functions                                                         */
/* ------------------------------------------------------------------------ */

strata_status strata_stop_matcher_create(const char *const *stops,
					 const size_t *lens, size_t count,
					 strata_stop_matcher **out,
					 strata_error *err)
{
	if (!out || (count && !stops))
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass the stop "
				   "strings", "stop matcher created without "
				   "its arguments");
	if (count > STRATA_STOP_MAX_COUNT)
		return strata_fail(err, STRATA_E_INVALID_ARG, "give fewer stop "
				   "strings", "%zu stop strings, more "
				   "than the %u allowed", count,
				   STRATA_STOP_MAX_COUNT);
	for (size_t i = 0; i < count; i++) {
		size_t n = !stops[i] ? 0 : lens ? lens[i] : strlen(stops[i]);
		if (n == 0)
			return strata_fail(err, STRATA_E_INVALID_ARG, "give "
					   "non-empty stop strings",
					   "stop string %zu is empty", i + 1);
		if (n > STRATA_STOP_MAX_BYTES)
			return strata_fail(err, STRATA_E_INVALID_ARG, "give "
					   "shorter stop strings",
					   "stop string %zu is %zu bytes, more "
					   "than the %u allowed", i + 1, n,
					   STRATA_STOP_MAX_BYTES);
		if (!strata__utf8_all_valid(stops[i], n))
			return strata_fail(err, STRATA_E_INVALID_ARG, "give stop "
					   "strings as UTF-8 text", "stop "
					   "string %zu is not valid UTF-8", i + 1);
	}
	strata_stop_matcher *m = strata_calloc_or_error(1, sizeof *m,
							"a stop matcher", err);
	if (!m)
		return STRATA_E_NOMEM;
	if (count) {
		m->stops = strata_calloc_or_error(count, sizeof *m->stops,
						  "stop strings", err);
		m->lens = strata_calloc_or_error(count, sizeof *m->lens,
						 "stop strings", err);
		if (!m->stops || !m->lens)
			goto nomem;
	}
	for (size_t i = 0; i < count; i++, m->count++) {
		size_t n = lens ? lens[i] : strlen(stops[i]);
		if (!(m->stops[i] = strata__text_memdup(stops[i], n)))
			goto nomem;
		m->lens[i] = n;
	}
	*out = m;
	return STRATA_OK;
nomem:
	strata_stop_matcher_destroy(m);
	return strata_fail(err, STRATA_E_NOMEM, "free memory",
			   "no memory for %zu stop strings", count);
}

void strata_stop_matcher_destroy(strata_stop_matcher *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->count; i++)
		strata_free(m->stops[i]);
	strata_free(m->stops);
	strata_free(m->lens);
	strata__text_buf_fini(&m->held);
	strata__text_buf_fini(&m->out);
	strata_free(m);
}

void strata_stop_matcher_reset(strata_stop_matcher *m)
{
	if (m) {
		m->held.len = 0;
		m->stopped = false;
	}
}

size_t strata_stop_matcher_held(const strata_stop_matcher *m)
{
	return m ? m->held.len : 0;
}

strata_status strata_stop_matcher_push(strata_stop_matcher *m,
				       const char *piece, size_t n,
				       const char **text, size_t *len,
				       int *matched, strata_error *err)
{
	if (!m || !text || !len || !matched || (n && !piece))
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass the matcher "
				   "and the text", "stop matcher push called "
				   "without its arguments");
	*len = 0;
	*matched = -1;
	if (m->stopped)
		return strata_fail(err, STRATA_E_INVALID_ARG, "stop feeding text "
				   "once a stop string matched (or reset the "
				   "matcher for a new text)", "the stop matcher "
				   "already matched a stop string");
	size_t was = m->held.len;
	strata_status st = strata__text_buf_add(&m->held, piece, n, err);
	if (st)
		return st;
	const char *p = m->held.data;
	size_t all = m->held.len, best_end = SIZE_MAX, best_at = 0;
	int best = -1;
	for (size_t i = 0; i < m->count; i++) {
		long at = find(p, all, m->stops[i], m->lens[i]);
		size_t end = at < 0 ? SIZE_MAX : (size_t)at + m->lens[i];
		if (at >= 0 && (end < best_end ||
				(end == best_end && (size_t)at < best_at))) {
			best_end = end;
			best_at = (size_t)at;
			best = (int)i;
		}
	}
	size_t keep = 0, give = best >= 0 ? best_at : all;
	if (best < 0) {
		for (size_t i = 0; i < m->count; i++) {
			size_t k = prefix_tail(p, all, m->stops[i], m->lens[i]);
			keep = k > keep ? k : keep;
		}
		size_t u = unfinished_char(p, all);
		keep = u > keep ? u : keep;
		give = all - keep;
	}
	if ((st = set_out(m, p, give, text, len, err))) {
		m->held.len = was; /* as before the call */
		return st;
	}
	if (best >= 0) {
		m->stopped = true;
		m->held.len = 0;
		*matched = best;
	} else {
		memmove(m->held.data, m->held.data + give, keep);
		m->held.len = keep;
	}
	return STRATA_OK;
}

strata_status strata_stop_matcher_finish(strata_stop_matcher *m,
					 const char **text, size_t *len,
					 strata_error *err)
{
	if (!m || !text || !len)
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass the matcher",
				   "stop matcher finish called without its "
				   "arguments");
	*len = 0;
	strata_status st = set_out(m, m->held.data, m->held.len, text, len,
				   err);
	if (st == STRATA_OK)
		m->held.len = 0;
	return st;
}
