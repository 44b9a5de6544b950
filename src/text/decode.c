/* decode.c - ids back to text through the tokenizer's decoder chain
 * (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace), and the
 * streaming detokenizer that never emits half a character (layer: text).
 *
 * The chain works on a list of strings, one per token, exactly as HF's
 * Decoder::decode_chain does; the whole-text decoder and the streaming one
 * share it, the latter running it on one token at a time.
 */
#include <string.h>

#include <utf8proc.h>

#include "text/internal.h"

struct strata_detokenizer {
	const strata_tokenizer *t;
	bool skip_special;
	bool started; /* a token has gone through the chain */
	text_buf pending; /* bytes of an unfinished character */
	text_buf out;
	text_list a, b;
};

/* ------------------------------------------------------------------------ */
/* Chain steps                                                              */
/* ------------------------------------------------------------------------ */

static strata_status bytelevel_bytes(const char *p, size_t n, text_buf *out,
				     strata_error *err)
{
	size_t start = out->len, i = 0;
	while (i < n) {
		utf8proc_int32_t c;
		utf8proc_ssize_t k = utf8proc_iterate(
			(const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i),
			&c);
		int b = k > 0 ? strata__bytelevel_byte((uint32_t)c) : -1;
		if (b < 0) { /* HF: an unmapped token keeps its own bytes */
			out->len = start;
			return strata__text_buf_add(out, p, n, err);
		}
		unsigned char byte = (unsigned char)b;
		strata_status st = strata__text_buf_add(out, &byte, 1, err);
		if (st)
			return st;
		i += (size_t)k;
	}
	return STRATA_OK;
}

static int byte_token(const char *p, size_t n)
{
	if (n != 6 || memcmp(p, "<0x", 3) || p[5] != '>')
		return -1;
	int v = 0;
	for (int i = 3; i < 5; i++) {
		char c = p[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
			: c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static strata_status replace_all(const char *p, size_t n, const char *a,
				 size_t an, const char *b, size_t bn,
				 text_buf *out, strata_error *err)
{
	size_t from = 0, i = 0;
	strata_status st = STRATA_OK;
	while (!st && an && i + an <= n) {
		if (memcmp(p + i, a, an)) {
			i++;
			continue;
		}
		st = strata__text_buf_add(out, p + from, i - from, err);
		if (!st)
			st = strata__text_buf_add(out, b, bn, err);
		i += an;
		from = i;
	}
	return st ? st : strata__text_buf_add(out, p + from, n - from, err);
}

/* ByteFallback: runs of <0xNN> become their bytes when those form valid
 * UTF-8, else one U+FFFD per byte token (HF). In a stream the bytes pass
 * through raw; the stream's own buffer judges validity. */
static strata_status bytefallback(const text_list *in, text_list *out,
				  bool stream, strata_error *err)
{
	text_buf run = {0};
	size_t run_tokens = 0;
	strata_status st = STRATA_OK;
	for (size_t i = 0; !st && i <= in->count; i++) {
		const char *p = i < in->count ? in->arena.data + in->items[i].off
					      : NULL;
		size_t n = p ? in->items[i].len : 0;
		int v = p ? byte_token(p, n) : -1;
		if (v >= 0) {
			unsigned char c = (unsigned char)v;
			st = strata__text_buf_add(&run, &c, 1, err);
			run_tokens++;
			continue;
		}
		if (run_tokens) {
			bool ok = true;
			for (size_t k = 0; ok && k < run.len;) {
				size_t l = strata__utf8_valid_len(
					(unsigned char *)run.data + k, run.len - k);
				ok = l > 0;
				k += l;
			}
			if (ok || stream)
				st = strata__text_list_push(out, run.data, run.len,
							    -1, false, err);
			for (size_t k = 0; !st && !ok && !stream && k < run_tokens;
			     k++)
				st = strata__text_list_push(out, "\xEF\xBF\xBD", 3,
							    -1, false, err);
			run.len = 0;
			run_tokens = 0;
		}
		if (!st && p)
			st = strata__text_list_push(out, p, n, -1, false, err);
	}
	strata__text_buf_fini(&run);
	return st;
}

static strata_status strip_token(const text_dec *d, const char *p, size_t n,
				 text_list *out, strata_error *err)
{
	size_t a = 0, b = n;
	for (uint32_t k = 0; k < d->start && b - a >= d->a_len &&
			     !memcmp(p + a, d->a, d->a_len); k++)
		a += d->a_len;
	for (uint32_t k = 0; k < d->stop && b - a >= d->a_len &&
			     !memcmp(p + b - d->a_len, d->a, d->a_len); k++)
		b -= d->a_len;
	return strata__text_list_push(out, p + a, b - a, -1, false, err);
}

/* One step over the token strings of `in` into `out`. index0: the position
 * of in's first token in the whole stream (Metaspace treats token 0
 * apart). */
static strata_status dec_step(const strata_tokenizer *t, size_t k,
			      const text_list *in, text_list *out,
			      bool stream, size_t index0, strata_error *err)
{
	const text_dec *d = &t->decs[k];
	strata_status st = STRATA_OK;
	text_buf b = {0};
	if (d->kind == TEXT_DEC_BYTEFALLBACK)
		return bytefallback(in, out, stream, err);
	if (d->kind == TEXT_DEC_BYTELEVEL || d->kind == TEXT_DEC_FUSE) {
		for (size_t i = 0; !st && i < in->count; i++) {
			const char *p = in->arena.data + in->items[i].off;
			size_t n = in->items[i].len;
			st = d->kind == TEXT_DEC_BYTELEVEL
				     ? bytelevel_bytes(p, n, &b, err)
				     : strata__text_buf_add(&b, p, n, err);
		}
		if (!st && (in->count || d->kind == TEXT_DEC_FUSE))
			st = strata__text_list_push(out, b.data ? b.data : "",
						    b.len, -1, false, err);
		strata__text_buf_fini(&b);
		return st;
	}
	for (size_t i = 0; !st && i < in->count; i++) {
		const char *p = in->arena.data + in->items[i].off;
		size_t n = in->items[i].len;
		b.len = 0;
		switch (d->kind) {
		case TEXT_DEC_REPLACE:
			st = replace_all(p, n, d->a, d->a_len, d->b, d->b_len, &b,
					 err);
			break;
		case TEXT_DEC_METASPACE: {
			/* HF: in token 0 every replacement character goes
			 * (unless prepend_scheme is never), elsewhere each
			 * becomes a space. */
			bool drop = index0 + i == 0 &&
				    d->prepend != TEXT_PREPEND_NEVER;
			st = replace_all(p, n, d->a, d->a_len, " ", drop ? 0 : 1,
					 &b, err);
			break;
		}
		case TEXT_DEC_STRIP:
			st = strip_token(d, p, n, out, err);
			continue;
		default:
			break;
		}
		if (!st)
			st = strata__text_list_push(out, b.data ? b.data : "",
						    b.len, -1, false, err);
	}
	strata__text_buf_fini(&b);
	return st;
}

/* Runs the chain over *a (b is scratch); the result is left in *a. */
static strata_status run_chain(const strata_tokenizer *t, text_list *a,
			       text_list *b, bool stream, size_t index0,
			       bool fused_before_first, strata_error *err)
{
	bool fused = false;
	for (size_t k = 0; k < t->n_decs; k++) {
		const text_dec *d = &t->decs[k];
		if (d->kind == TEXT_DEC_FUSE)
			fused = true;
		/* After Fuse a whole text is one token, so in a stream Strip
		 * only touches the stream's first token. */
		if (stream && d->kind == TEXT_DEC_STRIP && fused &&
		    !fused_before_first)
			continue;
		strata__text_list_clear(b);
		strata_status st = dec_step(t, k, a, b, stream, index0, err);
		if (st)
			return st;
		text_list x = *a;
		*a = *b;
		*b = x;
	}
	return STRATA_OK;
}

static strata_status push_token(const strata_tokenizer *t, text_list *l,
				int32_t id, bool skip_special, bool *pushed,
				strata_error *err)
{
	*pushed = false;
	if (id < 0 || (uint32_t)id >= t->n_ids || !t->piece[id])
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass ids from this tokenizer",
				   "token id %d is not in the vocabulary "
				   "(0..%u)", id, t->n_ids - 1);
	if (skip_special && (t->attr[id] & TEXT_ATTR_SKIP))
		return STRATA_OK;
	*pushed = true;
	if (t->dec_piece && t->dec_piece[id])
		return strata__text_list_push(l, t->dec_piece[id], t->dec_len[id],
					      -1, false, err);
	return strata__text_list_push(l, t->piece[id], t->piece_len[id], -1,
				      false, err);
}

/* ------------------------------------------------------------------------ */
/* Whole decode                                                             */
/* ------------------------------------------------------------------------ */

strata_status strata_tokenizer_decode(const strata_tokenizer *t,
				      const int32_t *ids, size_t count,
				      bool skip_special, char **text,
				      size_t *len, strata_error *err)
{
	if (!t || (!ids && count) || !text)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass a tokenizer, ids and an output",
				   "decode: missing argument");
	text_list a = {0}, b = {0};
	text_buf joined = {0}, out = {0};
	strata_status st = STRATA_OK;
	bool pushed;
	for (size_t i = 0; !st && i < count; i++)
		st = push_token(t, &a, ids[i], skip_special, &pushed, err);
	if (!st && t->has_decoder)
		st = run_chain(t, &a, &b, false, 0, true, err);
	for (size_t i = 0; !st && i < a.count; i++) {
		/* Without a decoder HF joins tokens with spaces. */
		if (i && !t->has_decoder)
			st = strata__text_buf_add(&joined, " ", 1, err);
		if (!st)
			st = strata__text_buf_add(&joined,
						  a.arena.data + a.items[i].off,
						  a.items[i].len, err);
	}
	if (!st)
		st = strata__utf8_lossy(&out, joined.data ? joined.data : "",
					joined.len, err);
	if (!st && !out.data)
		st = strata__text_buf_add(&out, "", 0, err);
	if (!st) {
		*text = out.data;
		if (len)
			*len = out.len;
		out.data = NULL;
	}
	strata__text_buf_fini(&out);
	strata__text_buf_fini(&joined);
	strata__text_list_fini(&a);
	strata__text_list_fini(&b);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Streaming                                                                */
/* ------------------------------------------------------------------------ */

strata_status strata_detokenizer_create(const strata_tokenizer *t,
					bool skip_special,
					strata_detokenizer **out,
					strata_error *err)
{
	if (!t || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass a tokenizer and an output",
				   "detokenizer: missing argument");
	strata_detokenizer *d = strata_calloc_or_error(1, sizeof *d,
						       "detokenizer", err);
	if (!d)
		return STRATA_E_NOMEM;
	d->t = t;
	d->skip_special = skip_special;
	*out = d;
	return STRATA_OK;
}

void strata_detokenizer_destroy(strata_detokenizer *d)
{
	if (!d)
		return;
	strata__text_buf_fini(&d->pending);
	strata__text_buf_fini(&d->out);
	strata__text_list_fini(&d->a);
	strata__text_list_fini(&d->b);
	strata_free(d);
}

/* Moves every complete character of d->pending to d->out; a sequence that
 * cannot become valid goes out as U+FFFD; at the end, a partial character
 * waits unless `final`. */
static strata_status drain(strata_detokenizer *d, bool final,
			   strata_error *err)
{
	const unsigned char *p = (const unsigned char *)d->pending.data;
	size_t n = d->pending.len, i = 0;
	strata_status st = STRATA_OK;
	while (!st && i < n) {
		size_t k = strata__utf8_valid_len(p + i, n - i);
		if (k) {
			st = strata__text_buf_add(&d->out, p + i, k, err);
			i += k;
			continue;
		}
		size_t part = strata__utf8_partial_len(p + i, n - i);
		if (part && i + part == n && !final)
			break; /* may still complete */
		st = strata__text_buf_add(&d->out, "\xEF\xBF\xBD", 3, err);
		i += part ? part : 1;
	}
	if (!st && d->pending.data) {
		memmove(d->pending.data, d->pending.data + i, n - i);
		d->pending.len = n - i;
	}
	return st;
}

strata_status strata_detokenizer_push(strata_detokenizer *d, int32_t id,
				      const char **text, size_t *len,
				      strata_error *err)
{
	const strata_tokenizer *t = d->t;
	d->out.len = 0;
	strata__text_list_clear(&d->a);
	bool pushed;
	strata_status st = push_token(t, &d->a, id, d->skip_special, &pushed,
				      err);
	if (!st && pushed && t->has_decoder)
		st = run_chain(t, &d->a, &d->b, true, d->started ? 1 : 0,
			       !d->started, err);
	for (size_t i = 0; !st && pushed && i < d->a.count; i++) {
		if (d->started && !t->has_decoder)
			st = strata__text_buf_add(&d->pending, " ", 1, err);
		if (!st)
			st = strata__text_buf_add(&d->pending,
						  d->a.arena.data + d->a.items[i].off,
						  d->a.items[i].len, err);
	}
	if (!st && pushed)
		d->started = true;
	if (!st)
		st = drain(d, false, err);
	*text = d->out.data ? d->out.data : "";
	*len = st ? 0 : d->out.len;
	return st;
}

strata_status strata_detokenizer_flush(strata_detokenizer *d,
				       const char **text, size_t *len,
				       strata_error *err)
{
	d->out.len = 0;
	strata_status st = drain(d, true, err);
	*text = d->out.data ? d->out.data : "";
	*len = st ? 0 : d->out.len;
	return st;
}
