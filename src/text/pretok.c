/* pretok.c - normalizers (NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace,
 * Strip) and pre-tokenizers (regex Split with HF's behaviours, ByteLevel,
 * Metaspace) of the tokenizer pipeline (layer: text).
 *
 * Regexes are PCRE2 (UTF + UCP, JIT when the platform has it), with
 * PCRE2's own memory routed through strata_alloc so OOM injection reaches
 * it. Input here is always valid UTF-8: the encoder cleans it first.
 */
#include <string.h>

#include <utf8proc.h>

#include "text/internal.h"

/* HF ByteLevel(use_regex) splits with GPT-2's pattern. */
const char strata__gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
	"|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------------ */
/* PCRE2 with strata's allocator                                            */
/* ------------------------------------------------------------------------ */

static void *re_alloc(size_t n, void *ctx)
{
	(void)ctx;
	return strata_alloc(n);
}

static void re_free(void *p, void *ctx)
{
	(void)ctx;
	strata_free(p);
}

strata_status strata__text_regex(const char *pat, size_t len, bool literal,
				 const char *what, pcre2_code **out,
				 strata_error *err)
{
	pcre2_general_context *g =
		pcre2_general_context_create(re_alloc, re_free, NULL);
	pcre2_compile_context *cc = g ? pcre2_compile_context_create(g) : NULL;
	if (!cc) {
		pcre2_general_context_free(g);
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "no memory for the regex of %s", what);
	}
	int code;
	PCRE2_SIZE at;
	/* PCRE2_LITERAL refuses UCP; a literal needs no classes anyway. */
	uint32_t opt = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, opt, &code, &at,
				       cc);
	pcre2_compile_context_free(cc);
	pcre2_general_context_free(g);
	if (!re) {
		char msg[160], shown[120];
		pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof msg);
		strata_escape(shown, sizeof shown, pat, len);
		if (code == PCRE2_ERROR_HEAP_FAILED)
			return strata_fail(err, STRATA_E_NOMEM, "free some memory",
					   "no memory compiling the regex of %s",
					   what);
		return strata_fail(err, STRATA_E_TEXT_UNSUPPORTED,
				   "use a tokenizer whose pattern PCRE2 accepts",
				   "%s: regex '%s' does not compile at offset %zu: %s",
				   what, shown, (size_t)at, msg);
	}
	/* JIT is an optimisation: where it fails the interpreter runs. */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	*out = re;
	return STRATA_OK;
}

/* Finds the next non-empty match at or after *off. Returns 1 with
 * [*ms, *me), 0 when there is none. Empty matches are stepped over, as HF
 * drops empty pieces. */
static int next_match(const pcre2_code *re, const char *s, size_t n,
		      size_t *off, pcre2_match_data *md, size_t *ms,
		      size_t *me, strata_error *err, strata_status *st)
{
	while (*off <= n) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, n, *off,
				     PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
			rc = pcre2_match(re, (PCRE2_SPTR)s, n, *off,
					 PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
					 NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc < 0) {
			char msg[120];
			pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg,
						sizeof msg);
			*st = strata_fail(err, rc == PCRE2_ERROR_NOMEMORY ||
					  rc == PCRE2_ERROR_HEAPLIMIT
					  ? STRATA_E_NOMEM : STRATA_E_TEXT_ENCODING,
					  "split the text into smaller parts",
					  "split regex failed at byte %zu: %s",
					  *off, msg);
			return -1;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		if (ov[1] > ov[0]) {
			*ms = ov[0];
			*me = ov[1];
			*off = ov[1];
			return 1;
		}
		/* Empty match: step one character. */
		size_t k = ov[1] < n ? strata__utf8_valid_len(
			(const unsigned char *)s + ov[1], n - ov[1]) : 1;
		*off = ov[1] + (k ? k : 1);
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Unicode helpers                                                          */
/* ------------------------------------------------------------------------ */

static size_t decode_cp(const char *s, size_t n, uint32_t *cp)
{
	utf8proc_int32_t c;
	utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s,
					      (utf8proc_ssize_t)n, &c);
	if (k <= 0) {
		*cp = 0xFFFD;
		return 1;
	}
	*cp = (uint32_t)c;
	return (size_t)k;
}

/* Unicode White_Space, as Rust's char::is_whitespace. */
static bool is_ws(uint32_t c)
{
	return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 ||
	       c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
	       c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
	       c == 0x3000;
}

bool strata__text_is_ws(uint32_t c)
{
	return is_ws(c);
}

/* ------------------------------------------------------------------------ */
/* Normalizers                                                              */
/* ------------------------------------------------------------------------ */

static strata_status unicode_form(text_norm_kind k, const char *s, size_t n,
				  text_buf *out, strata_error *err)
{
	bool ascii = true;
	for (size_t i = 0; i < n && ascii; i++)
		ascii = !((unsigned char)s[i] & 0x80);
	if (ascii) /* every normal form of ASCII is itself */
		return strata__text_buf_add(out, s, n, err);
	int opt = UTF8PROC_STABLE;
	opt |= (k == TEXT_NORM_NFC || k == TEXT_NORM_NFKC) ? UTF8PROC_COMPOSE
							    : UTF8PROC_DECOMPOSE;
	if (k == TEXT_NORM_NFKC || k == TEXT_NORM_NFKD)
		opt |= UTF8PROC_COMPAT;
	/* Decomposition grows text at most 18x per code point (Unicode's
	 * stated bound); size from a first pass instead of guessing. */
	utf8proc_ssize_t need = utf8proc_decompose(
		(const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, NULL, 0,
		(utf8proc_option_t)opt);
	if (need < 0)
		return strata_fail(err, STRATA_E_TEXT_ENCODING,
				   "pass valid UTF-8 text",
				   "normalization failed: %s",
				   utf8proc_errmsg(need));
	utf8proc_int32_t *cps = strata_calloc_or_error(
		(size_t)need + 1, sizeof *cps, "normalization buffer", err);
	if (!cps)
		return STRATA_E_NOMEM;
	utf8proc_ssize_t got = utf8proc_decompose(
		(const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, cps, need,
		(utf8proc_option_t)opt);
	if (got >= 0)
		got = utf8proc_normalize_utf32(cps, got, (utf8proc_option_t)opt);
	strata_status st = STRATA_OK;
	if (got < 0)
		st = strata_fail(err, STRATA_E_TEXT_ENCODING,
				 "pass valid UTF-8 text",
				 "normalization failed: %s", utf8proc_errmsg(got));
	for (utf8proc_ssize_t i = 0; !st && i < got; i++) {
		utf8proc_uint8_t b[4];
		utf8proc_ssize_t k8 = utf8proc_encode_char(cps[i], b);
		st = strata__text_buf_add(out, b, (size_t)k8, err);
	}
	strata_free(cps);
	return st;
}

static strata_status lowercase(const char *s, size_t n, text_buf *out,
			       strata_error *err)
{
	size_t i = 0;
	while (i < n) {
		uint32_t c;
		size_t k = decode_cp(s + i, n - i, &c);
		utf8proc_uint8_t b[4];
		/* Rust's char::to_lowercase (HF) follows SpecialCasing: U+0130
		 * is its only unconditional two-character lowercase. */
		strata_status st =
			c == 0x130 ? strata__text_buf_add(out, "i\xCC\x87", 3, err)
				   : strata__text_buf_add(
					     out, b,
					     (size_t)utf8proc_encode_char(
						     utf8proc_tolower((int32_t)c),
						     b),
					     err);
		if (st)
			return st;
		i += k;
	}
	return STRATA_OK;
}

static strata_status replace_literal(const text_norm *r, const char *s,
				     size_t n, text_buf *out,
				     strata_error *err)
{
	size_t i = 0, from = 0;
	strata_status st = STRATA_OK;
	while (!st && r->a_len && i + r->a_len <= n) {
		if (memcmp(s + i, r->a, r->a_len)) {
			i++;
			continue;
		}
		st = strata__text_buf_add(out, s + from, i - from, err);
		if (!st)
			st = strata__text_buf_add(out, r->b, r->b_len, err);
		i += r->a_len;
		from = i;
	}
	return st ? st : strata__text_buf_add(out, s + from, n - from, err);
}

static strata_status replace_regex(const text_norm *r, const char *s,
				   size_t n, text_buf *out, strata_error *err)
{
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->re, NULL);
	if (!md)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "no memory for regex match data");
	size_t off = 0, from = 0, ms, me;
	strata_status st = STRATA_OK;
	int rc;
	while ((rc = next_match(r->re, s, n, &off, md, &ms, &me, err, &st)) > 0) {
		st = strata__text_buf_add(out, s + from, ms - from, err);
		if (!st)
			st = strata__text_buf_add(out, r->b, r->b_len, err);
		if (st)
			break;
		from = me;
	}
	pcre2_match_data_free(md);
	if (st)
		return st;
	return strata__text_buf_add(out, s + from, n - from, err);
}

static strata_status strip(const text_norm *r, const char *s, size_t n,
			   text_buf *out, strata_error *err)
{
	size_t a = 0, b = n;
	while (r->left && a < b) {
		uint32_t c;
		size_t k = decode_cp(s + a, b - a, &c);
		if (!is_ws(c))
			break;
		a += k;
	}
	while (r->right && b > a) {
		size_t j = b - 1;
		while (j > a && ((unsigned char)s[j] & 0xC0) == 0x80)
			j--;
		uint32_t c;
		decode_cp(s + j, b - j, &c);
		if (!is_ws(c))
			break;
		b = j;
	}
	return strata__text_buf_add(out, s + a, b - a, err);
}

static strata_status norm_one(const text_norm *r, const char *s, size_t n,
			      text_buf *out, strata_error *err)
{
	switch (r->kind) {
	case TEXT_NORM_NFC:
	case TEXT_NORM_NFD:
	case TEXT_NORM_NFKC:
	case TEXT_NORM_NFKD:
		return unicode_form(r->kind, s, n, out, err);
	case TEXT_NORM_LOWERCASE:
		return lowercase(s, n, out, err);
	case TEXT_NORM_PREPEND: {
		/* HF prepends only to non-empty text. */
		strata_status st = n ? strata__text_buf_add(out, r->a, r->a_len,
							    err)
				     : STRATA_OK;
		return st ? st : strata__text_buf_add(out, s, n, err);
	}
	case TEXT_NORM_REPLACE:
		return r->re ? replace_regex(r, s, n, out, err)
			     : replace_literal(r, s, n, out, err);
	case TEXT_NORM_STRIP:
		return strip(r, s, n, out, err);
	}
	return strata_fail(err, STRATA_E_INTERNAL, "report a bug",
			   "unknown normalizer kind %d", (int)r->kind);
}

strata_status strata__text_normalize(const strata_tokenizer *t, const char *s,
				     size_t n, text_buf *out,
				     strata_error *err)
{
	if (!t->n_norms)
		return strata__text_buf_add(out, s, n, err);
	text_buf a = {0}, b = {0};
	strata_status st = strata__text_buf_add(&a, s, n, err);
	for (size_t i = 0; !st && i < t->n_norms; i++) {
		b.len = 0;
		st = norm_one(&t->norms[i], a.data, a.len, &b, err);
		text_buf x = a;
		a = b;
		b = x;
	}
	if (!st)
		st = strata__text_buf_add(out, a.data, a.len, err);
	strata__text_buf_fini(&a);
	strata__text_buf_fini(&b);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizers                                                           */
/* ------------------------------------------------------------------------ */

typedef struct span {
	size_t a, b;
	bool match;
} span;

typedef struct pre_ctx {
	pcre2_match_data *md;
	span *spans;
	size_t n_spans, cap;
	text_list *out;
	strata_error *err;
} pre_ctx;

static strata_status span_push(pre_ctx *c, size_t a, size_t b, bool match)
{
	if (c->n_spans == c->cap) {
		void *p = c->spans;
		strata_status st = strata_grow(&p, &c->cap, c->n_spans + 1,
					       sizeof *c->spans, "split spans",
					       c->err);
		if (st)
			return st;
		c->spans = p;
	}
	c->spans[c->n_spans++] = (span){a, b, match};
	return STRATA_OK;
}

/* HF's SplitDelimiterBehavior folds over (span, is_match); afterwards every
 * span in c->spans is emitted unless REMOVED dropped it. */
static void fold_behavior(pre_ctx *c, text_split_behavior bh)
{
	size_t n = 0;
	bool prev = false;
	switch (bh) {
	case TEXT_SPLIT_ISOLATED:
		return;
	case TEXT_SPLIT_REMOVED:
		for (size_t i = 0; i < c->n_spans; i++)
			if (!c->spans[i].match)
				c->spans[n++] = c->spans[i];
		break;
	case TEXT_SPLIT_MERGED_WITH_PREVIOUS:
		for (size_t i = 0; i < c->n_spans; i++) {
			span s = c->spans[i];
			if (s.match && !prev && n)
				c->spans[n - 1].b = s.b;
			else
				c->spans[n++] = s;
			prev = s.match;
		}
		break;
	case TEXT_SPLIT_MERGED_WITH_NEXT: {
		/* Right to left, then back in order. */
		size_t m = c->n_spans;
		for (size_t i = m; i-- > 0;) {
			span s = c->spans[i];
			if (s.match && !prev && n)
				c->spans[m - n].a = s.a;
			else
				c->spans[m - ++n] = s;
			prev = s.match;
		}
		if (n)
			memmove(c->spans, c->spans + (m - n),
				n * sizeof *c->spans);
		break;
	}
	case TEXT_SPLIT_CONTIGUOUS:
		for (size_t i = 0; i < c->n_spans; i++) {
			span s = c->spans[i];
			if (s.match == prev && n)
				c->spans[n - 1].b = s.b;
			else
				c->spans[n++] = s;
			prev = s.match;
		}
		break;
	}
	c->n_spans = n;
}

static strata_status split_piece(pre_ctx *c, const pcre2_code *re,
				 text_split_behavior bh, bool invert,
				 const char *s, size_t n, bool at_start)
{
	c->n_spans = 0;
	size_t off = 0, prev = 0, ms, me;
	strata_status st = STRATA_OK;
	int rc;
	while ((rc = next_match(re, s, n, &off, c->md, &ms, &me, c->err,
				&st)) > 0) {
		if (ms > prev && (st = span_push(c, prev, ms, invert)))
			return st;
		if ((st = span_push(c, ms, me, !invert)))
			return st;
		prev = me;
	}
	if (rc < 0)
		return st;
	if (n > prev && (st = span_push(c, prev, n, invert)))
		return st;
	fold_behavior(c, bh);
	for (size_t i = 0; i < c->n_spans; i++) {
		span sp = c->spans[i];
		st = strata__text_list_push(c->out, s + sp.a, sp.b - sp.a, -1,
					    at_start && sp.a == 0, c->err);
		if (st)
			return st;
	}
	return STRATA_OK;
}

static strata_status metaspace(pre_ctx *c, const text_pre *p, const char *s,
			       size_t n, bool at_start)
{
	text_buf b = {0};
	strata_status st = STRATA_OK;
	/* HF replaces first, then prepends unless the piece now starts with
	 * the replacement: a leading space counts. */
	bool has = (n && s[0] == ' ') ||
		   (n >= p->repl_len && !memcmp(s, p->repl, p->repl_len));
	bool pre = !has && (p->prepend == TEXT_PREPEND_ALWAYS ||
			    (p->prepend == TEXT_PREPEND_FIRST && at_start));
	if (pre)
		st = strata__text_buf_add(&b, p->repl, p->repl_len, c->err);
	for (size_t i = 0, from = 0; !st && i <= n; i++) {
		if (i < n && s[i] != ' ')
			continue;
		st = strata__text_buf_add(&b, s + from, i - from, c->err);
		if (!st && i < n)
			st = strata__text_buf_add(&b, p->repl, p->repl_len,
						  c->err);
		from = i + 1;
	}
	if (st)
		goto done;
	if (!p->split) {
		st = strata__text_list_push(c->out, b.data ? b.data : "", b.len,
					    -1, at_start, c->err);
		goto done;
	}
	/* split: every replacement character starts a new piece
	 * (MergedWithNext). */
	size_t from = 0;
	for (size_t i = 1; !st && i <= b.len; i++) {
		if (i < b.len && (i + p->repl_len > b.len ||
				  memcmp(b.data + i, p->repl, p->repl_len)))
			continue;
		st = strata__text_list_push(c->out, b.data + from, i - from, -1,
					    at_start && from == 0, c->err);
		from = i;
	}
done:
	strata__text_buf_fini(&b);
	return st;
}

static strata_status pre_one(pre_ctx *c, const strata_tokenizer *t,
			     const text_pre *p, const char *s, size_t n,
			     bool at_start)
{
	(void)t;
	switch (p->kind) {
	case TEXT_PRE_SPLIT:
		return split_piece(c, p->re, p->behavior, p->invert, s, n,
				   at_start);
	case TEXT_PRE_BYTELEVEL:
		if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
			text_buf b = {0};
			strata_status st = strata__text_buf_add(&b, " ", 1,
								c->err);
			if (!st)
				st = strata__text_buf_add(&b, s, n, c->err);
			if (!st)
				st = p->re ? split_piece(c, p->re,
							 TEXT_SPLIT_ISOLATED,
							 false, b.data, b.len,
							 at_start)
					   : strata__text_list_push(
						     c->out, b.data, b.len, -1,
						     at_start, c->err);
			strata__text_buf_fini(&b);
			return st;
		}
		if (p->re)
			return split_piece(c, p->re, TEXT_SPLIT_ISOLATED, false,
					   s, n, at_start);
		return strata__text_list_push(c->out, s, n, -1, at_start,
					      c->err);
	case TEXT_PRE_METASPACE:
		return metaspace(c, p, s, n, at_start);
	}
	return strata_fail(c->err, STRATA_E_INTERNAL, "report a bug",
			   "unknown pre-tokenizer kind %d", (int)p->kind);
}

/* After a ByteLevel step HF's later splits see the byte-level characters
 * ("Ġ" for a space), not the bytes: map the piece, split, map back. Each
 * mapped character is exactly one byte, so the way back is exact. */
static strata_status split_mapped(pre_ctx *c, const text_pre *p,
				  const char *s, size_t n, bool at_start)
{
	text_buf m = {0};
	text_list parts = {0};
	strata_status st = STRATA_OK;
	for (size_t i = 0; !st && i < n; i++) {
		utf8proc_uint8_t b[4];
		utf8proc_ssize_t k = utf8proc_encode_char(
			(utf8proc_int32_t)strata__bytelevel_cp((unsigned char)s[i]),
			b);
		st = strata__text_buf_add(&m, b, (size_t)k, c->err);
	}
	text_list *out = c->out;
	c->out = &parts;
	if (!st)
		st = split_piece(c, p->re, p->behavior, p->invert,
				 m.data ? m.data : "", m.len, at_start);
	c->out = out;
	text_buf back = {0};
	for (size_t i = 0; !st && i < parts.count; i++) {
		const char *q = parts.arena.data + parts.items[i].off;
		size_t qn = parts.items[i].len;
		back.len = 0;
		for (size_t j = 0; !st && j < qn;) {
			uint32_t cp;
			j += decode_cp(q + j, qn - j, &cp);
			unsigned char byte = (unsigned char)strata__bytelevel_byte(cp);
			st = strata__text_buf_add(&back, &byte, 1, c->err);
		}
		if (!st)
			st = strata__text_list_push(out, back.data ? back.data : "",
						    back.len, -1,
						    parts.items[i].at_start, c->err);
	}
	strata__text_buf_fini(&back);
	strata__text_list_fini(&parts);
	strata__text_buf_fini(&m);
	return st;
}

strata_status strata__text_pretokenize(const strata_tokenizer *t,
				       text_list *io, text_list *tmp,
				       strata_error *err)
{
	bool mapped = false; /* a ByteLevel step has run */
	pre_ctx c = {.err = err};
	strata_status st = STRATA_OK;
	for (size_t k = 0; !st && k < t->n_pres; k++) {
		const text_pre *p = &t->pres[k];
		if (p->re && !c.md) {
			c.md = pcre2_match_data_create(1, NULL);
			if (!c.md) {
				st = strata_fail(err, STRATA_E_NOMEM,
						 "free some memory",
						 "no memory for regex match data");
				break;
			}
		}
		strata__text_list_clear(tmp);
		c.out = tmp;
		for (size_t i = 0; !st && i < io->count; i++) {
			text_piece pc = io->items[i];
			const char *s = io->arena.data + pc.off;
			if (pc.id >= 0)
				st = strata__text_list_push(tmp, s, pc.len, pc.id,
							    pc.at_start, err);
			else if (mapped && p->kind == TEXT_PRE_SPLIT)
				st = split_mapped(&c, p, s, pc.len, pc.at_start);
			else
				st = pre_one(&c, t, p, s, pc.len, pc.at_start);
		}
		mapped = mapped || p->kind == TEXT_PRE_BYTELEVEL;
		text_list x = *io;
		*io = *tmp;
		*tmp = x;
	}
	pcre2_match_data_free(c.md);
	strata_free(c.spans);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Freeing steps                                                            */
/* ------------------------------------------------------------------------ */

void strata__text_norms_free(text_norm *n, size_t count)
{
	for (size_t i = 0; n && i < count; i++) {
		strata_free(n[i].a);
		strata_free(n[i].b);
		pcre2_code_free(n[i].re);
	}
	strata_free(n);
}

void strata__text_pres_free(text_pre *p, size_t count)
{
	for (size_t i = 0; p && i < count; i++)
		pcre2_code_free(p[i].re);
	strata_free(p);
}

void strata__text_decs_free(text_dec *d, size_t count)
{
	for (size_t i = 0; d && i < count; i++) {
		strata_free(d[i].a);
		strata_free(d[i].b);
	}
	strata_free(d);
}
