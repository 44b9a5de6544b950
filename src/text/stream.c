/* stream.c - the streaming decoder: the text that ids pushed after a prompt
 * add to the prompt's text, token by token, exactly as the whole decoder
 * (decode.c) gives decode(prompt + pushed) minus decode(prompt)
 * (layer: text).
 *
 * Every decoder step runs as a stage over a stream. Up to the first step
 * that joins the tokens (ByteLevel, Fuse) a stage sees whole tokens
 * ("items"), as HF's decode_chain does; after it a stage sees pieces of the
 * one joined text, which HF's later steps see as their single token 0.
 * Then come HF's final join of the tokens, the UTF-8 stage (complete
 * characters out, invalid bytes as U+FFFD, as the whole decoder's final
 * lossy pass) and the prompt stage, which drops the prompt's own text.
 *
 * A stage holds back only what a later token can still change: a
 * ByteFallback run until it ends (the run's validity decides its text),
 * the start of a Replace pattern, what a Strip step may still remove at the
 * end of the text, an incomplete character. A push computes every stage's
 * next state aside (nxt) and adopts them all only when every stage
 * succeeded, so a failed push leaves the stream as it was.
 */
#include <string.h>

#include "text/internal.h"

typedef enum stage_kind {
	STAGE_DEC,    /* decoder step t->decs[k] */
	STAGE_JOIN,   /* HF's join of the decoded tokens: "" or, with no
		       * decoder, " " */
	STAGE_UTF8,   /* complete characters only */
	STAGE_PROMPT, /* drops the text the prompt's own decode holds */
} stage_kind;

typedef struct stage_state {
	text_buf hold;	  /* bytes held back (each kind says which) */
	uint64_t items;	  /* items seen: Metaspace's token index, JOIN's
			   * separators */
	uint64_t matched; /* PROMPT: bytes of the prompt's tail matched */
	uint32_t run;	  /* ByteFallback on items: byte tokens in hold */
	uint32_t lead;	  /* Strip on the text: leading copies removed */
	/* Strip: the text's start is behind; ByteFallback on the text: the
	 * text is no byte token; PROMPT: the text left the prompt's. */
	bool past;
} stage_state;

typedef struct stage {
	stage_kind kind;
	const text_dec *d; /* STAGE_DEC */
	bool joined;	   /* its input is pieces of the one joined text */
	stage_state cur, nxt;
} stage;

struct strata_text_stream {
	const strata_tokenizer *t;
	bool skip_special;
	bool priming;  /* pushing the prompt: PROMPT passes everything */
	bool finished;
	stage *stages;
	size_t n_stages;
	text_buf ptail; /* the prompt's text still held at its end */
	text_list io[2];
	text_buf tmp, emit; /* scratch: a stage's input, its output */
	text_buf out;	    /* what the last call returned */
};

static const char FFFD[] = "\xEF\xBF\xBD";

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static strata_status add(text_buf *b, const void *p, size_t n,
			 strata_error *err)
{
	return strata__text_buf_add(b, p, n, err);
}

/* tmp = the stage's held bytes followed by every input item. */
static strata_status gather(strata_text_stream *s, const stage *g,
			    const text_list *in, strata_error *err)
{
	s->tmp.len = 0;
	strata_status st = add(&s->tmp, g->cur.hold.data, g->cur.hold.len, err);
	for (size_t i = 0; !st && i < in->count; i++)
		st = add(&s->tmp, in->arena.data + in->items[i].off,
			 in->items[i].len, err);
	return st;
}

static const char *item(const text_list *l, size_t i, size_t *n)
{
	*n = l->items[i].len;
	return l->arena.data + l->items[i].off;
}

/* Length of the longest proper prefix of a (an bytes) that ends p (n
 * bytes); 0 when none does. */
static size_t partial_suffix(const char *p, size_t n, const char *a,
			     size_t an)
{
	for (size_t k = an ? an - 1 : 0; k > 0; k--)
		if (k <= n && !memcmp(p + n - k, a, k))
			return k;
	return 0;
}

/* Whether p (n <= 6 bytes) can still grow into a "<0xNN>" piece. */
static bool could_be_byte_token(const char *p, size_t n)
{
	static const char shape[] = "<0x..>";
	if (n > 6)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		bool hex = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') ||
			   (c >= 'a' && c <= 'f');
		if (shape[i] == '.' ? !hex : c != shape[i])
			return false;
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* Steps on whole tokens                                                    */
/* ------------------------------------------------------------------------ */

/* ByteFallback on items: a run of byte tokens is held until a token that
 * is not one ends it (or the stream ends); then it is one item when its
 * bytes are valid UTF-8, else one U+FFFD item per byte token (HF). */
static strata_status items_bytefallback(stage *g, const text_list *in,
					text_list *out, bool final,
					strata_error *err)
{
	text_buf *run = &g->nxt.hold;
	strata_status st = add(run, g->cur.hold.data, g->cur.hold.len, err);
	for (size_t i = 0; !st && i <= in->count; i++) {
		size_t n = 0;
		const char *p = i < in->count ? item(in, i, &n) : NULL;
		int v = p ? strata__text_byte_token(p, n) : -1;
		if (v >= 0) {
			unsigned char c = (unsigned char)v;
			st = add(run, &c, 1, err);
			g->nxt.run++;
			continue;
		}
		if (g->nxt.run && (p || final)) {
			bool ok = strata__utf8_all_valid(run->data, run->len);
			if (ok)
				st = strata__text_list_push(out, run->data,
							    run->len, -1, false,
							    err);
			for (uint32_t k = 0; !st && !ok && k < g->nxt.run; k++)
				st = strata__text_list_push(out, FFFD, 3, -1,
							    false, err);
			run->len = 0;
			g->nxt.run = 0;
		}
		if (!st && p)
			st = strata__text_list_push(out, p, n, -1, false, err);
	}
	return st;
}

/* A step that maps each token on its own (Replace, Strip, Metaspace) or
 * joins them (ByteLevel, Fuse: one piece of the joined text out). */
static strata_status items_step(strata_text_stream *s, stage *g,
				const text_list *in, text_list *out,
				strata_error *err)
{
	const text_dec *d = g->d;
	bool join = d->kind == TEXT_DEC_BYTELEVEL || d->kind == TEXT_DEC_FUSE;
	strata_status st = STRATA_OK;
	s->emit.len = 0;
	for (size_t i = 0; !st && i < in->count; i++) {
		size_t n;
		const char *p = item(in, i, &n);
		if (!join)
			s->emit.len = 0;
		switch (d->kind) {
		case TEXT_DEC_BYTELEVEL:
			st = strata__text_bytelevel(p, n, &s->emit, err);
			break;
		case TEXT_DEC_FUSE:
			st = add(&s->emit, p, n, err);
			break;
		case TEXT_DEC_STRIP:
			st = strata__text_strip(d, p, n, out, err);
			continue;
		case TEXT_DEC_METASPACE: {
			/* HF: in token 0 every replacement character goes
			 * (unless prepend_scheme is never), elsewhere each
			 * becomes a space. */
			bool drop = g->cur.items + i == 0 &&
				    d->prepend != TEXT_PREPEND_NEVER;
			st = strata__text_replace(p, n, d->a, d->a_len, " ",
						  drop ? 0 : 1, &s->emit, err);
			break;
		}
		default: /* TEXT_DEC_REPLACE */
			st = strata__text_replace(p, n, d->a, d->a_len, d->b,
						  d->b_len, &s->emit, err);
			break;
		}
		if (!st && !join)
			st = strata__text_list_push(out, s->emit.data, s->emit.len,
						    -1, false, err);
	}
	g->nxt.items += in->count;
	if (!st && join && in->count)
		st = strata__text_list_push(out, s->emit.data, s->emit.len, -1,
					    false, err);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Steps on the joined text                                                 */
/* ------------------------------------------------------------------------ */

/* Replace (and Metaspace, whose text is token 0) on the joined text,
 * scanning left to right as the whole decoder does; bytes that may still
 * start a match wait for the next piece. */
static strata_status text_replace(strata_text_stream *s, stage *g,
				  const char *a, size_t an, const char *b,
				  size_t bn, bool final, strata_error *err)
{
	const char *p = s->tmp.data;
	size_t n = s->tmp.len, i = 0, from = 0;
	strata_status st = STRATA_OK;
	while (!st && an && i < n) {
		if (n - i >= an) {
			if (memcmp(p + i, a, an)) {
				i++;
				continue;
			}
			st = add(&s->emit, p + from, i - from, err);
			if (!st)
				st = add(&s->emit, b, bn, err);
			i += an;
			from = i;
			continue;
		}
		if (!final && !memcmp(p + i, a, n - i))
			break; /* may still become a match */
		i++;
	}
	if (!st)
		st = add(&s->emit, p + from, (an && i < n ? i : n) - from, err);
	if (!st && an && i < n)
		st = add(&g->nxt.hold, p + i, n - i, err);
	return st;
}

/* Strip on the joined text: up to start copies of content go from the
 * text's start, up to stop copies from its end. What may still be removed
 * at the end waits: for a one-character content (HF's Strip holds a char)
 * the trailing copies and a partial copy, whose place is unambiguous in
 * UTF-8; for any other content the last stop copies' worth of bytes. */
static strata_status text_strip(strata_text_stream *s, stage *g, bool final,
				strata_error *err)
{
	const text_dec *d = g->d;
	const char *p = s->tmp.data;
	size_t n = s->tmp.len, i = 0, an = d->a_len;
	while (!g->nxt.past) {
		bool more = g->nxt.lead < d->start;
		if (more && n - i >= an && !memcmp(p + i, d->a, an)) {
			i += an;
			g->nxt.lead++;
			continue;
		}
		if (more && !final && n - i < an && !memcmp(p + i, d->a, n - i))
			return add(&g->nxt.hold, p + i, n - i, err);
		g->nxt.past = true;
	}
	const char *q = p + i;
	size_t m = n - i, keep = m;
	if (final) {
		for (uint32_t k = 0; k < d->stop && keep >= an &&
				     !memcmp(q + keep - an, d->a, an); k++)
			keep -= an;
	} else if (d->stop && an == strata__utf8_valid_len(
					      (const unsigned char *)d->a, an)) {
		keep -= partial_suffix(q, m, d->a, an);
		for (uint32_t k = 0; k < d->stop && keep >= an &&
				     !memcmp(q + keep - an, d->a, an); k++)
			keep -= an;
	} else if (d->stop) {
		uint64_t h = (uint64_t)d->stop * an;
		keep = h >= m ? 0 : m - (size_t)h;
	}
	strata_status st = add(&s->emit, q, keep, err);
	return st ? st : add(&g->nxt.hold, q + keep, m - keep, err);
}

/* ByteFallback on the joined text: the text is a byte token only when it
 * is exactly "<0xNN>", so its first six bytes wait until they cannot be. */
static strata_status text_bytefallback(strata_text_stream *s, stage *g,
				       bool final, strata_error *err)
{
	const char *p = s->tmp.data;
	size_t n = s->tmp.len;
	if (g->nxt.past)
		return add(&s->emit, p, n, err);
	int v = strata__text_byte_token(p, n);
	if (final && v >= 0) {
		unsigned char c = (unsigned char)v;
		return c < 0x80 ? add(&s->emit, &c, 1, err)
				: add(&s->emit, FFFD, 3, err);
	}
	if (!final && could_be_byte_token(p, n))
		return add(&g->nxt.hold, p, n, err);
	g->nxt.past = true;
	return add(&s->emit, p, n, err);
}

/* ByteLevel on the joined text maps it whole or not at all (an unmapped
 * code point keeps the text's own bytes), so the text waits to the end.
 * No tokenizer strata has seen runs ByteLevel after a join. */
static strata_status text_bytelevel(strata_text_stream *s, stage *g,
				    bool final, strata_error *err)
{
	if (!final)
		return add(&g->nxt.hold, s->tmp.data, s->tmp.len, err);
	return strata__text_bytelevel(s->tmp.data, s->tmp.len, &s->emit, err);
}

static strata_status text_step(strata_text_stream *s, stage *g, bool final,
			       strata_error *err)
{
	const text_dec *d = g->d;
	switch (d->kind) {
	case TEXT_DEC_REPLACE:
		return text_replace(s, g, d->a, d->a_len, d->b, d->b_len, final,
				    err);
	case TEXT_DEC_METASPACE:
		return text_replace(s, g, d->a, d->a_len, " ",
				    d->prepend == TEXT_PREPEND_NEVER, final, err);
	case TEXT_DEC_STRIP:
		return text_strip(s, g, final, err);
	case TEXT_DEC_BYTEFALLBACK:
		return text_bytefallback(s, g, final, err);
	case TEXT_DEC_BYTELEVEL:
		return text_bytelevel(s, g, final, err);
	default: /* TEXT_DEC_FUSE: the text is one token already */
		return add(&s->emit, s->tmp.data, s->tmp.len, err);
	}
}

/* ------------------------------------------------------------------------ */
/* Join, UTF-8 and prompt stages                                            */
/* ------------------------------------------------------------------------ */

static strata_status join_items(strata_text_stream *s, stage *g,
				const text_list *in, strata_error *err)
{
	strata_status st = STRATA_OK;
	for (size_t i = 0; !st && i < in->count; i++) {
		size_t n;
		const char *p = item(in, i, &n);
		/* Without a decoder HF joins tokens with spaces. */
		if (!s->t->has_decoder && g->cur.items + i)
			st = add(&s->emit, " ", 1, err);
		if (!st)
			st = add(&s->emit, p, n, err);
	}
	g->nxt.items += in->count;
	return st;
}

/* Complete characters out; a maximal invalid subpart becomes U+FFFD as in
 * the whole decoder's lossy pass; an incomplete character at the end
 * waits unless final. */
static strata_status utf8_stage(strata_text_stream *s, stage *g, bool final,
				strata_error *err)
{
	const unsigned char *p = (const unsigned char *)s->tmp.data;
	size_t n = s->tmp.len, i = 0;
	strata_status st = STRATA_OK;
	while (!st && i < n) {
		size_t k = strata__utf8_valid_len(p + i, n - i);
		if (k) {
			st = add(&s->emit, p + i, k, err);
			i += k;
			continue;
		}
		size_t part = strata__utf8_partial_len(p + i, n - i);
		if (part && i + part == n && !final)
			return add(&g->nxt.hold, p + i, n - i, err);
		st = add(&s->emit, FFFD, 3, err);
		i += part ? part : 1;
	}
	return st;
}

/* Drops the prompt's text: the characters that match what the prompt's
 * own decode still held at its end (ptail), up to the first that differs;
 * everything after that is the continuation. */
static strata_status prompt_stage(strata_text_stream *s, stage *g,
				  strata_error *err)
{
	const unsigned char *p = (const unsigned char *)s->tmp.data;
	size_t n = s->tmp.len, i = 0;
	while (!s->priming && !g->nxt.past && i < n &&
	       g->nxt.matched < s->ptail.len) {
		size_t k = strata__utf8_valid_len(p + i, n - i);
		k = k ? k : 1; /* the UTF-8 stage lets only characters pass */
		if (g->nxt.matched + k > s->ptail.len ||
		    memcmp(s->ptail.data + g->nxt.matched, p + i, k)) {
			g->nxt.past = true;
			break;
		}
		g->nxt.matched += k;
		i += k;
	}
	return add(&s->emit, p + i, n - i, err);
}

/* ------------------------------------------------------------------------ */
/* Driver                                                                   */
/* ------------------------------------------------------------------------ */

static strata_status stage_run(strata_text_stream *s, stage *g,
			       const text_list *in, text_list *out, bool final,
			       strata_error *err)
{
	text_buf h = g->nxt.hold;
	g->nxt = g->cur;
	g->nxt.hold = h;
	g->nxt.hold.len = 0;
	if (g->kind == STAGE_DEC && !g->joined) {
		if (g->d->kind == TEXT_DEC_BYTEFALLBACK)
			return items_bytefallback(g, in, out, final, err);
		return items_step(s, g, in, out, err);
	}
	s->emit.len = 0;
	strata_status st = STRATA_OK;
	if (g->kind == STAGE_JOIN && !g->joined)
		st = join_items(s, g, in, err);
	else if (!(st = gather(s, g, in, err)))
		st = g->kind == STAGE_DEC    ? text_step(s, g, final, err)
		     : g->kind == STAGE_UTF8 ? utf8_stage(s, g, final, err)
		     : g->kind == STAGE_PROMPT ? prompt_stage(s, g, err)
					       : add(&s->emit, s->tmp.data,
						     s->tmp.len, err);
	if (!st)
		st = strata__text_list_push(out, s->emit.data, s->emit.len, -1,
					    false, err);
	return st;
}

/* Runs one token's text (p, n; p NULL for none) through every stage into
 * s->out, computing the stages' next states; adopts them only if commit
 * and everything succeeded. */
static strata_status run_stages(strata_text_stream *s, const char *p,
				size_t n, bool final, bool commit,
				strata_error *err)
{
	text_list *in = &s->io[0], *out = &s->io[1];
	strata__text_list_clear(in);
	s->out.len = 0;
	strata_status st = p ? strata__text_list_push(in, p, n, -1, false, err)
			     : STRATA_OK;
	for (size_t k = 0; !st && k < s->n_stages; k++) {
		strata__text_list_clear(out);
		st = stage_run(s, &s->stages[k], in, out, final, err);
		text_list *x = in;
		in = out;
		out = x;
	}
	for (size_t i = 0; !st && i < in->count; i++) {
		size_t len;
		const char *q = item(in, i, &len);
		st = add(&s->out, q, len, err);
	}
	if (!st && !s->out.data)
		st = add(&s->out, "", 0, err);
	for (size_t k = 0; !st && commit && k < s->n_stages; k++) {
		stage *g = &s->stages[k];
		text_buf h = g->cur.hold;
		g->cur = g->nxt;
		g->nxt.hold = h;
	}
	return st;
}

static strata_status build_stages(strata_text_stream *s, strata_error *err)
{
	const strata_tokenizer *t = s->t;
	s->n_stages = t->n_decs + 3;
	s->stages = strata_calloc_or_error(s->n_stages, sizeof *s->stages,
					   "streaming decoder", err);
	if (!s->stages)
		return STRATA_E_NOMEM;
	bool joined = false;
	for (size_t k = 0; k < t->n_decs; k++) {
		s->stages[k] = (stage){.kind = STAGE_DEC, .d = &t->decs[k],
				       .joined = joined};
		joined |= t->decs[k].kind == TEXT_DEC_BYTELEVEL ||
			  t->decs[k].kind == TEXT_DEC_FUSE;
	}
	s->stages[t->n_decs] = (stage){.kind = STAGE_JOIN, .joined = joined};
	s->stages[t->n_decs + 1] = (stage){.kind = STAGE_UTF8, .joined = true};
	s->stages[t->n_decs + 2] = (stage){.kind = STAGE_PROMPT, .joined = true};
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Public functions                                                         */
/* ------------------------------------------------------------------------ */

void strata_text_stream_destroy(strata_text_stream *s)
{
	if (!s)
		return;
	for (size_t k = 0; s->stages && k < s->n_stages; k++) {
		strata__text_buf_fini(&s->stages[k].cur.hold);
		strata__text_buf_fini(&s->stages[k].nxt.hold);
	}
	strata_free(s->stages);
	strata__text_buf_fini(&s->ptail);
	strata__text_list_fini(&s->io[0]);
	strata__text_list_fini(&s->io[1]);
	strata__text_buf_fini(&s->tmp);
	strata__text_buf_fini(&s->emit);
	strata__text_buf_fini(&s->out);
	strata_free(s);
}

strata_status strata_text_stream_create(const strata_tokenizer *t,
					const int32_t *prompt, size_t n_prompt,
					bool skip_special,
					strata_text_stream **out,
					strata_error *err)
{
	if (!t || !out || (!prompt && n_prompt))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass a tokenizer, the prompt's ids and an "
				   "output",
				   "text stream: missing argument");
	strata_text_stream *s = strata_calloc_or_error(1, sizeof *s,
						       "streaming decoder", err);
	if (!s)
		return STRATA_E_NOMEM;
	s->t = t;
	s->skip_special = skip_special;
	s->priming = true;
	strata_status st = build_stages(s, err);
	for (size_t i = 0; !st && i < n_prompt; i++) {
		const char *p;
		size_t n;
		st = strata__text_token_text(t, prompt[i], skip_special, &p, &n,
					     err);
		if (!st && p)
			st = run_stages(s, p, n, false, true, err);
	}
	/* What finishing here would still give is the end of the prompt's
	 * text, which the pushes after it may continue. */
	if (!st)
		st = run_stages(s, NULL, 0, true, false, err);
	if (!st)
		st = add(&s->ptail, s->out.data, s->out.len, err);
	if (st) {
		strata_text_stream_destroy(s);
		return st;
	}
	s->priming = false;
	*out = s;
	return STRATA_OK;
}

strata_status strata_text_stream_push(strata_text_stream *s, int32_t id,
				      const char **text, size_t *len,
				      strata_error *err)
{
	*text = "";
	*len = 0;
	if (s->finished)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "create a new stream for a new text",
				   "text stream: push after finish");
	const char *p;
	size_t n;
	strata_status st = strata__text_token_text(s->t, id, s->skip_special,
						   &p, &n, err);
	if (st || !p)
		return st; /* a dropped special token changes nothing */
	st = run_stages(s, p, n, false, true, err);
	if (!st) {
		*text = s->out.data;
		*len = s->out.len;
	}
	return st;
}

strata_status strata_text_stream_finish(strata_text_stream *s,
					const char **text, size_t *len,
					strata_error *err)
{
	*text = "";
	*len = 0;
	if (s->finished)
		return STRATA_OK;
	strata_status st = run_stages(s, NULL, 0, true, true, err);
	if (!st) {
		s->finished = true;
		*text = s->out.data;
		*len = s->out.len;
	}
	return st;
}
