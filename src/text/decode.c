/* decode.c - ids back to text through the tokenizer's decoder chain
 * (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace), and the
 * steps the streaming decoder (stream.c) shares with it (layer: text).
 *
 * The chain works on a list of strings, one per token, exactly as HF's
 * Decoder::decode_chain does.
 */
#include <string.h>

#include <utf8proc.h>

#include "text/internal.h"

/* ------------------------------------------------------------------------ */
/* Chain steps                                                              */
/* ------------------------------------------------------------------------ */

strata_status strata__text_bytelevel(const char *p, size_t n, text_buf *out,
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

int strata__text_byte_token(const char *p, size_t n)
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

strata_status strata__text_replace(const char *p, size_t n, const char *a,
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
 * UTF-8, else one U+FFFD per byte token (HF). */
static strata_status bytefallback(const text_list *in, text_list *out,
				  strata_error *err)
{
	text_buf run = {0};
	size_t run_tokens = 0;
	strata_status st = STRATA_OK;
	for (size_t i = 0; !st && i <= in->count; i++) {
		const char *p = i < in->count ? in->arena.data + in->items[i].off
					      : NULL;
		size_t n = p ? in->items[i].len : 0;
		int v = p ? strata__text_byte_token(p, n) : -1;
		if (v >= 0) {
			unsigned char c = (unsigned char)v;
			st = strata__text_buf_add(&run, &c, 1, err);
			run_tokens++;
			continue;
		}
		if (run_tokens) {
			bool ok = strata__utf8_all_valid(run.data, run.len);
			if (ok)
				st = strata__text_list_push(out, run.data, run.len,
							    -1, false, err);
			for (size_t k = 0; !st && !ok && k < run_tokens; k++)
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

bool strata__utf8_all_valid(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	for (size_t k = 0; k < n;) {
		size_t l = strata__utf8_valid_len(u + k, n - k);
		if (!l)
			return false;
		k += l;
	}
	return true;
}

strata_status strata__text_strip(const text_dec *d, const char *p, size_t n,
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

/* One step over the token strings of `in` into `out`. */
static strata_status dec_step(const strata_tokenizer *t, size_t k,
			      const text_list *in, text_list *out,
			      strata_error *err)
{
	const text_dec *d = &t->decs[k];
	strata_status st = STRATA_OK;
	text_buf b = {0};
	if (d->kind == TEXT_DEC_BYTEFALLBACK)
		return bytefallback(in, out, err);
	if (d->kind == TEXT_DEC_BYTELEVEL || d->kind == TEXT_DEC_FUSE) {
		for (size_t i = 0; !st && i < in->count; i++) {
			const char *p = in->arena.data + in->items[i].off;
			size_t n = in->items[i].len;
			st = d->kind == TEXT_DEC_BYTELEVEL
				     ? strata__text_bytelevel(p, n, &b, err)
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
			st = strata__text_replace(p, n, d->a, d->a_len, d->b, d->b_len, &b,
					 err);
			break;
		case TEXT_DEC_METASPACE: {
			/* HF: in token 0 every replacement character goes
			 * (unless prepend_scheme is never), elsewhere each
			 * becomes a space. */
			bool drop = i == 0 &&
				    d->prepend != TEXT_PREPEND_NEVER;
			st = strata__text_replace(p, n, d->a, d->a_len, " ", drop ? 0 : 1,
					 &b, err);
			break;
		}
		case TEXT_DEC_STRIP:
			st = strata__text_strip(d, p, n, out, err);
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
			       text_list *b, strata_error *err)
{
	for (size_t k = 0; k < t->n_decs; k++) {
		strata__text_list_clear(b);
		strata_status st = dec_step(t, k, a, b, err);
		if (st)
			return st;
		text_list x = *a;
		*a = *b;
		*b = x;
	}
	return STRATA_OK;
}

strata_status strata__text_token_text(const strata_tokenizer *t, int32_t id,
				      bool skip_special, const char **p,
				      size_t *n, strata_error *err)
{
	*p = NULL;
	*n = 0;
	if (id < 0 || (uint32_t)id >= t->n_ids || !t->piece[id])
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass ids from this tokenizer",
				   "token id %d is not in the vocabulary "
				   "(0..%u)", id, t->n_ids - 1);
	if (skip_special && (t->attr[id] & TEXT_ATTR_SKIP))
		return STRATA_OK;
	if (t->dec_piece && t->dec_piece[id]) {
		*p = t->dec_piece[id];
		*n = t->dec_len[id];
	} else {
		*p = t->piece[id];
		*n = t->piece_len[id];
	}
	return STRATA_OK;
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
	for (size_t i = 0; !st && i < count; i++) {
		const char *p;
		size_t n;
		st = strata__text_token_text(t, ids[i], skip_special, &p, &n,
					     err);
		if (!st && p)
			st = strata__text_list_push(&a, p, n, -1, false, err);
	}
	if (!st && t->has_decoder)
		st = run_chain(t, &a, &b, err);
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
