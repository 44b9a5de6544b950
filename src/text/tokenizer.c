/* tokenizer.c - the tokenizer object: vocabulary tables, added tokens and
 * the encode pipeline; accessors; loading MODEL (layer: text). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <utf8proc.h>

#include "strata/checkpoint.h"
#include "text/internal.h"

bool strata__text_is_ws(uint32_t c);

/* ------------------------------------------------------------------------ */
/* Building                                                                 */
/* ------------------------------------------------------------------------ */

strata_tokenizer *strata__tokenizer_new(strata_error *err)
{
	strata_tokenizer *t = strata_calloc_or_error(1, sizeof *t, "tokenizer",
						     err);
	if (!t)
		return NULL;
	t->unk_model = -1;
	for (int b = 0; b < 256; b++)
		t->byte_ids[b] = -1;
	t->specials = (strata_tokenizer_specials){-1, -1, -1, -1, false, false};
	return t;
}

void strata_tokenizer_destroy(strata_tokenizer *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->n_ids; i++) {
		if (t->model_bytes && t->model_bytes[i] != t->piece[i])
			strata_free(t->model_bytes[i]);
		if (t->piece)
			strata_free(t->piece[i]);
	}
	strata_free(t->piece);
	strata_free(t->piece_len);
	strata_free(t->attr);
	for (uint32_t i = 0; t->dec_piece && i < t->n_ids; i++)
		strata_free(t->dec_piece[i]);
	strata_free(t->dec_piece);
	strata_free(t->dec_len);
	strata_free(t->model_bytes);
	strata_free(t->model_len);
	strata_free(t->scores);
	strata__text_smap_fini(&t->model_map);
	strata__text_smap_fini(&t->piece_map);
	strata__text_pmap_fini(&t->merges);
	strata__text_norms_free(t->norms, t->n_norms);
	strata__text_pres_free(t->pres, t->n_pres);
	strata__text_decs_free(t->decs, t->n_decs);
	for (size_t i = 0; i < t->n_added; i++)
		strata_free(t->added[i].content);
	strata_free(t->added);
	strata_free(t->prefix_ids);
	strata_free(t->suffix_ids);
	strata_free(t);
}

strata_status strata__tokenizer_alloc_ids(strata_tokenizer *t, uint32_t n,
					  strata_error *err)
{
	if (n > STRATA_TEXT_MAX_VOCAB)
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check the tokenizer file",
				   "vocabulary of %u ids exceeds the limit of %u",
				   n, STRATA_TEXT_MAX_VOCAB);
	t->piece = strata_calloc_or_error(n, sizeof *t->piece, "pieces", err);
	t->piece_len = strata_calloc_or_error(n, sizeof *t->piece_len,
					      "piece lengths", err);
	t->attr = strata_calloc_or_error(n, 1, "token attributes", err);
	t->model_bytes = strata_calloc_or_error(n, sizeof *t->model_bytes,
						"model pieces", err);
	t->model_len = strata_calloc_or_error(n, sizeof *t->model_len,
					      "model piece lengths", err);
	if (!t->piece || !t->piece_len || !t->attr || !t->model_bytes ||
	    !t->model_len)
		return STRATA_E_NOMEM; /* destroy frees what was made */
	t->n_ids = n;
	memset(t->attr, TEXT_ATTR_HOLE, n);
	return STRATA_OK;
}

strata_status strata__tokenizer_set_piece(strata_tokenizer *t, int32_t id,
					  const char *p, size_t n,
					  bool in_model, strata_error *err)
{
	if (id < 0 || (uint32_t)id >= t->n_ids)
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check the tokenizer file",
				   "token id %d outside 0..%u", id, t->n_ids);
	if (n > STRATA_TEXT_MAX_TOKEN_BYTES)
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check the tokenizer file",
				   "token %d is %zu bytes long (limit %u)", id, n,
				   STRATA_TEXT_MAX_TOKEN_BYTES);
	if (t->piece[id]) {
		/* An added token restating a vocabulary entry is fine. */
		if (t->piece_len[id] == n && !memcmp(t->piece[id], p, n))
			return STRATA_OK;
		char a[64], b[64];
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check the tokenizer file",
				   "id %d is given twice: '%s' and '%s'", id,
				   strata_escape(a, sizeof a, t->piece[id],
						 t->piece_len[id]),
				   strata_escape(b, sizeof b, p, n));
	}
	/* Not strndup: it stops at a NUL, and GGUF pieces may hold NULs
	 * (fuzz_tokenizer_gguf found the overflow). */
	char *c = strata__text_memdup(p, n);
	if (!c)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "no memory for token %d", id);
	t->piece[id] = c;
	t->piece_len[id] = (uint32_t)n;
	t->attr[id] = in_model ? 0 : TEXT_ATTR_ADDED;
	return STRATA_OK;
}

/* Byte-level pieces stand for bytes: "Ġt" is " t". A piece with a code
 * point outside GPT-2's table stands for its own UTF-8 bytes (HF's
 * ByteLevel decoder does the same) and is left out of the model map. */
static strata_status bytelevel_unmap(const char *p, size_t n, char **out,
				     size_t *out_len, strata_error *err)
{
	char *b = strata_alloc_or_error(n + 1, "byte-level piece", err);
	if (!b)
		return STRATA_E_NOMEM;
	size_t i = 0, k = 0;
	while (i < n) {
		utf8proc_int32_t c;
		utf8proc_ssize_t l = utf8proc_iterate(
			(const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i),
			&c);
		int byte = l > 0 ? strata__bytelevel_byte((uint32_t)c) : -1;
		if (byte < 0) {
			strata_free(b);
			*out = NULL;
			return STRATA_OK;
		}
		b[k++] = (char)byte;
		i += (size_t)l;
	}
	b[k] = '\0';
	*out = b;
	*out_len = k;
	return STRATA_OK;
}

#define META "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/* Whether s[i] starts a "▁" that follows a character other than "▁". */
static bool meta_cut_at(const char *s, size_t n, size_t i)
{
	return i >= 1 && i + 3 <= n && !memcmp(s + i, META, 3) &&
	       !(i >= 3 && !memcmp(s + i - 3, META, 3));
}

static bool meta_chunks_safe(const strata_tokenizer *t)
{
	if (strata__text_smap_get(&t->model_map, META, 3) < 0)
		return false; /* a lone "▁" could be unk and fuse across */
	for (uint32_t i = 0; i < t->n_ids; i++) {
		const char *p = t->model_bytes[i];
		for (size_t k = 1; p && k + 3 <= t->model_len[i]; k++)
			if (meta_cut_at(p, t->model_len[i], k))
				return false;
	}
	return true;
}

strata_status strata__tokenizer_finish_vocab(strata_tokenizer *t,
					     strata_error *err)
{
	strata_status st = strata__text_smap_init(&t->model_map, t->n_ids, err);
	if (!st)
		st = strata__text_smap_init(&t->piece_map, t->n_ids, err);
	for (uint32_t i = 0; !st && i < t->n_ids; i++) {
		if (!t->piece[i])
			continue;
		st = strata__text_smap_put(&t->piece_map, t->piece[i],
					   t->piece_len[i], (int32_t)i, NULL,
					   err);
		if (st || (t->attr[i] & TEXT_ATTR_ADDED))
			continue;
		if (!t->byte_level) {
			t->model_bytes[i] = t->piece[i];
			t->model_len[i] = t->piece_len[i];
		} else {
			size_t l = 0;
			st = bytelevel_unmap(t->piece[i], t->piece_len[i],
					     &t->model_bytes[i], &l, err);
			t->model_len[i] = (uint32_t)l;
		}
		if (!st && t->model_bytes[i])
			st = strata__text_smap_put(&t->model_map,
						   t->model_bytes[i],
						   t->model_len[i], (int32_t)i,
						   NULL, err);
	}
	t->meta_chunks = !st && !t->byte_level && meta_chunks_safe(t);
	for (int b = 0; !st && b < 256; b++) {
		char name[8];
		snprintf(name, sizeof name, "<0x%02X>", b);
		t->byte_ids[b] = strata__text_smap_get(&t->piece_map, name, 6);
	}
	return st;
}

strata_status strata__tokenizer_add_merge(strata_tokenizer *t,
					  const char *l, size_t ln,
					  const char *r, size_t rn,
					  int32_t rank, const char *what,
					  strata_error *err)
{
	int32_t a = strata__text_smap_get(&t->piece_map, l, ln);
	int32_t b = strata__text_smap_get(&t->piece_map, r, rn);
	char sa[48], sb[48];
	if (a < 0 || b < 0)
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check the tokenizer's merges",
				   "%s: merge %d ('%s' '%s') names a piece not in "
				   "the vocabulary", what, rank,
				   strata_escape(sa, sizeof sa, l, ln),
				   strata_escape(sb, sizeof sb, r, rn));
	/* The merged piece: looked up as text, it must exist. */
	size_t n = ln + rn;
	char small[256], *buf = n <= sizeof small ? small
			  : strata_alloc_or_error(n, "merge text", err);
	if (!buf)
		return STRATA_E_NOMEM;
	memcpy(buf, l, ln);
	memcpy(buf + ln, r, rn);
	int32_t m = strata__text_smap_get(&t->piece_map, buf, n);
	if (buf != small)
		strata_free(buf);
	if (m < 0)
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check the tokenizer's merges",
				   "%s: merge %d ('%s' '%s') makes a piece not in "
				   "the vocabulary", what, rank,
				   strata_escape(sa, sizeof sa, l, ln),
				   strata_escape(sb, sizeof sb, r, rn));
	return strata__text_pmap_put(&t->merges, a, b, rank, m, err);
}

strata_status strata__tokenizer_add_added(strata_tokenizer *t,
					  const text_added *a,
					  strata_error *err)
{
	if (!a->len)
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check the tokenizer's added tokens",
				   "added token %d is empty", a->id);
	void *p = t->added;
	size_t cap = t->n_added;
	strata_status st = strata_grow(&p, &cap, t->n_added + 1, sizeof *a,
				       "added tokens", err);
	if (st)
		return st;
	t->added = p;
	char *c = strata_alloc_or_error(a->len + 1, "added token", err);
	if (!c)
		return STRATA_E_NOMEM;
	memcpy(c, a->content, a->len);
	c[a->len] = '\0';
	t->added[t->n_added] = *a;
	t->added[t->n_added++].content = c;
	if (a->special && a->id >= 0 && (uint32_t)a->id < t->n_ids)
		t->attr[a->id] |= TEXT_ATTR_SPECIAL | TEXT_ATTR_SKIP;
	return STRATA_OK;
}

static int added_cmp(const void *x, const void *y)
{
	const text_added *a = x, *b = y;
	unsigned char ca = (unsigned char)a->content[0];
	unsigned char cb = (unsigned char)b->content[0];
	if (ca != cb)
		return ca < cb ? -1 : 1;
	if (a->len != b->len)
		return a->len > b->len ? -1 : 1; /* longest first */
	return a->id < b->id ? -1 : a->id > b->id;
}

/* A normalized added token decodes as its normalized content and is
 * then not skipped as special (TEXT_ATTR_SKIP). */
static strata_status set_dec_piece(strata_tokenizer *t, const text_added *a,
				   strata_error *err)
{
	if (a->id < 0 || (uint32_t)a->id >= t->n_ids)
		return STRATA_OK;
	if (!t->dec_piece) {
		t->dec_piece = strata_calloc_or_error(t->n_ids,
						      sizeof *t->dec_piece,
						      "decode pieces", err);
		t->dec_len = strata_calloc_or_error(t->n_ids, sizeof *t->dec_len,
						    "decode piece lengths", err);
		if (!t->dec_piece || !t->dec_len)
			return STRATA_E_NOMEM;
	}
	char *c = strata_alloc_or_error(a->len + 1, "decode piece", err);
	if (!c)
		return STRATA_E_NOMEM;
	memcpy(c, a->content, a->len);
	c[a->len] = '\0';
	strata_free(t->dec_piece[a->id]);
	t->dec_piece[a->id] = c;
	t->dec_len[a->id] = (uint32_t)a->len;
	t->attr[a->id] &= (uint8_t)~TEXT_ATTR_SKIP;
	return STRATA_OK;
}

strata_status strata__tokenizer_finish_added(strata_tokenizer *t,
					     strata_error *err)
{
	/* HF matches a `normalized` added token in normalized text, so its
	 * content is normalized too ("<s>" under Prepend("▁") is "▁<s>"). */
	for (size_t i = 0; i < t->n_added; i++) {
		text_added *a = &t->added[i];
		if (!a->normalized || !t->n_norms)
			continue;
		text_buf b = {0};
		strata_status st = strata__text_normalize(t, a->content, a->len,
							  &b, err);
		if (!st && !b.len)
			st = strata_fail(err, STRATA_E_TEXT_TOKENIZER,
					 "check the tokenizer's added tokens",
					 "added token %d normalizes to nothing",
					 a->id);
		if (st) {
			strata__text_buf_fini(&b);
			return st;
		}
		bool same = b.len == a->len && !memcmp(b.data, a->content, a->len);
		strata_free(a->content);
		a->content = b.data;
		a->len = b.len;
		if (!same && (st = set_dec_piece(t, a, err)))
			return st;
	}
	if (t->n_added)
		qsort(t->added, t->n_added, sizeof *t->added, added_cmp);
	size_t j = 0;
	for (int c = 0; c <= 256; c++) {
		while (j < t->n_added &&
		       (unsigned char)t->added[j].content[0] < c)
			j++;
		t->added_start[c] = (uint32_t)j;
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Added-token splitting                                                    */
/* ------------------------------------------------------------------------ */

static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len)
{
	utf8proc_int32_t c;
	utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
					      (utf8proc_ssize_t)(n - i), &c);
	*len = k > 0 ? (size_t)k : 1;
	return k > 0 ? (uint32_t)c : 0xFFFD;
}

static size_t cp_before(const char *s, size_t i)
{
	size_t j = i - 1;
	while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80)
		j--;
	return j;
}

static bool is_word(uint32_t c)
{
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
	return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
	       (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO) ||
	       c == '_';
}

/* The added token at s[i], longest first; single_word tokens must not
 * touch word characters on either side. */
static const text_added *added_at(const strata_tokenizer *t, bool normalized,
				  const char *s, size_t n, size_t i)
{
	unsigned char c = (unsigned char)s[i];
	for (uint32_t k = t->added_start[c]; k < t->added_start[c + 1]; k++) {
		const text_added *a = &t->added[k];
		if (a->normalized != normalized || a->len > n - i ||
		    memcmp(s + i, a->content, a->len))
			continue;
		if (a->single_word) {
			size_t l;
			if (i > 0 && is_word(cp_at(s, n, cp_before(s, i), &l)))
				continue;
			if (i + a->len < n &&
			    is_word(cp_at(s, n, i + a->len, &l)))
				continue;
		}
		return a;
	}
	return NULL;
}

/* Splits s into text pieces and added-token pieces (id >= 0), appending
 * to out. lstrip/rstrip tokens swallow the whitespace beside them. */
static strata_status split_added(const strata_tokenizer *t, bool normalized,
				 const char *s, size_t n, bool at_start,
				 text_list *out, strata_error *err)
{
	size_t from = 0, i = 0;
	strata_status st = STRATA_OK;
	while (!st && i < n) {
		const text_added *a = t->n_added ? added_at(t, normalized, s, n, i)
						 : NULL;
		if (!a) {
			i++;
			continue;
		}
		size_t a0 = i, a1 = i + a->len, l;
		while (a->lstrip && a0 > from &&
		       strata__text_is_ws(cp_at(s, n, cp_before(s, a0), &l)))
			a0 = cp_before(s, a0);
		while (a->rstrip && a1 < n && strata__text_is_ws(cp_at(s, n, a1, &l)))
			a1 += l;
		if (a0 > from)
			st = strata__text_list_push(out, s + from, a0 - from, -1,
						    at_start && from == 0, err);
		if (!st)
			st = strata__text_list_push(out, s + a0, a1 - a0, a->id,
						    false, err);
		from = i = a1;
	}
	if (!st && n > from)
		st = strata__text_list_push(out, s + from, n - from, -1,
					    at_start && from == 0, err);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                 */
/* ------------------------------------------------------------------------ */

/* A per-call cache of short words: natural text repeats its words, and a
 * word's ids depend on nothing else (HF keeps a similar cache). Keys point
 * into e->b's arena, which does not move while the model runs. */
#define WORD_CACHE_MAX_BYTES 64
#define WORD_CACHE_MAX_WORDS 65536

typedef struct cached {
	uint32_t off, n; /* ids in enc.cache_ids */
} cached;

typedef struct enc {
	text_buf clean, norm;
	text_list a, b;
	text_scratch s;
	text_smap cache;
	cached *words;
	size_t n_words, words_cap;
	int32_t *cache_ids;
	size_t n_cache_ids, cache_ids_cap;
} enc;

static void enc_fini(enc *e)
{
	strata__text_buf_fini(&e->clean);
	strata__text_buf_fini(&e->norm);
	strata__text_list_fini(&e->a);
	strata__text_list_fini(&e->b);
	strata__text_scratch_fini(&e->s);
	strata__text_smap_fini(&e->cache);
	strata_free(e->words);
	strata_free(e->cache_ids);
}

/* Tokenizes word w through the cache. */
static strata_status enc_word(const strata_tokenizer *t, enc *e,
			      const char *w, size_t n, strata_error *err)
{
	if (n > WORD_CACHE_MAX_BYTES)
		return strata__text_model_word(t, w, n, &e->s, err);
	int32_t k = strata__text_smap_get(&e->cache, w, n);
	if (k >= 0) {
		cached c = e->words[k];
		for (uint32_t i = 0; i < c.n; i++) {
			strata_status st = strata__text_push_id(
				&e->s, e->cache_ids[c.off + i], err);
			if (st)
				return st;
		}
		return STRATA_OK;
	}
	size_t from = e->s.n_ids;
	strata_status st = strata__text_model_word(t, w, n, &e->s, err);
	size_t got = e->s.n_ids - from;
	if (st || e->n_words >= WORD_CACHE_MAX_WORDS)
		return st;
	void *p = e->cache_ids;
	if ((st = strata_grow(&p, &e->cache_ids_cap, e->n_cache_ids + got,
			      sizeof *e->cache_ids, "word cache", err)))
		return st;
	e->cache_ids = p;
	p = e->words;
	if ((st = strata_grow(&p, &e->words_cap, e->n_words + 1,
			      sizeof *e->words, "word cache", err)))
		return st;
	e->words = p;
	if (!e->cache.cap &&
	    (st = strata__text_smap_init(&e->cache, 1024, err)))
		return st;
	if ((st = strata__text_smap_put(&e->cache, w, n, (int32_t)e->n_words,
					NULL, err)))
		return st;
	if (got) /* a word can yield no ids (dropped unknowns) */
		memcpy(e->cache_ids + e->n_cache_ids, e->s.ids + from,
		       got * sizeof *e->cache_ids);
	e->words[e->n_words++] = (cached){(uint32_t)e->n_cache_ids,
					  (uint32_t)got};
	e->n_cache_ids += got;
	return STRATA_OK;
}

/* A piece to the model: SentencePiece-style text without a pre-tokenizer
 * arrives as one long word; where the vocabulary allows (meta_chunks) it
 * is cut before each word's "▁", which gives the same ids (no merge spans
 * a cut) and lets the word cache work. ignore_merges looks at the whole
 * word, so it keeps the word whole. */
static strata_status enc_piece(const strata_tokenizer *t, enc *e,
			       const char *w, size_t n, strata_error *err)
{
	if (!t->meta_chunks || t->ignore_merges || n <= WORD_CACHE_MAX_BYTES)
		return enc_word(t, e, w, n, err);
	size_t from = 0;
	for (size_t i = 1; i <= n; i++) {
		if (i < n && !meta_cut_at(w, n, i))
			continue;
		strata_status st = enc_word(t, e, w + from, i - from, err);
		if (st)
			return st;
		from = i;
	}
	return STRATA_OK;
}

/* raw text -> added split -> normalize -> added split (normalized) into
 * e->b, then pre-tokenize. */
static strata_status enc_pieces(const strata_tokenizer *t, enc *e,
				strata_error *err)
{
	strata_status st = split_added(t, false, e->clean.data, e->clean.len,
				       true, &e->a, err);
	for (size_t i = 0; !st && i < e->a.count; i++) {
		text_piece p = e->a.items[i];
		const char *s = e->a.arena.data + p.off;
		if (p.id >= 0) {
			st = strata__text_list_push(&e->b, s, p.len, p.id, false,
						    err);
			continue;
		}
		e->norm.len = 0;
		st = strata__text_normalize(t, s, p.len, &e->norm, err);
		if (!st)
			st = split_added(t, true, e->norm.data ? e->norm.data : "",
					 e->norm.len, p.at_start, &e->b, err);
	}
	if (!st)
		st = strata__text_pretokenize(t, &e->b, &e->a, err);
	return st;
}

strata_status strata_tokenizer_encode(const strata_tokenizer *t,
				      const char *text, size_t len,
				      bool add_special, int32_t **ids,
				      size_t *count, strata_error *err)
{
	if (!t || (!text && len) || !ids || !count)
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass a tokenizer, "
				   "text and outputs", "encode: missing argument");
	enc e = {0};
	strata_status st = strata__utf8_lossy(&e.clean, text ? text : "", len,
					      err);
	if (!st)
		st = enc_pieces(t, &e, err);
	for (size_t i = 0; !st && add_special && i < t->n_prefix; i++)
		st = strata__text_push_id(&e.s, t->prefix_ids[i], err);
	for (size_t i = 0; !st && i < e.b.count; i++) {
		text_piece p = e.b.items[i];
		st = p.id >= 0 ? strata__text_push_id(&e.s, p.id, err)
			       : enc_piece(t, &e, e.b.arena.data + p.off, p.len,
					   err);
	}
	for (size_t i = 0; !st && add_special && i < t->n_suffix; i++)
		st = strata__text_push_id(&e.s, t->suffix_ids[i], err);
	if (!st && !e.s.ids) {
		e.s.ids = strata_alloc_or_error(sizeof(int32_t), "token ids", err);
		if (!e.s.ids)
			st = STRATA_E_NOMEM;
	}
	if (!st) {
		*ids = e.s.ids;
		*count = e.s.n_ids;
		e.s.ids = NULL;
	}
	enc_fini(&e);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */
/* ------------------------------------------------------------------------ */

uint32_t strata_tokenizer_vocab_count(const strata_tokenizer *t)
{
	return t ? t->n_ids : 0;
}

const char *strata_tokenizer_piece(const strata_tokenizer *t, int32_t id,
				   size_t *len)
{
	if (!t || id < 0 || (uint32_t)id >= t->n_ids || !t->piece[id])
		return NULL;
	if (len)
		*len = t->piece_len[id];
	return t->piece[id];
}

bool strata_tokenizer_is_special(const strata_tokenizer *t, int32_t id)
{
	return t && id >= 0 && (uint32_t)id < t->n_ids &&
	       (t->attr[id] & TEXT_ATTR_SPECIAL);
}

int32_t strata_tokenizer_find(const strata_tokenizer *t, const char *piece,
			      size_t len)
{
	return t ? strata__text_smap_get(&t->piece_map, piece, len) : -1;
}

void strata_tokenizer_get_specials(const strata_tokenizer *t,
				   strata_tokenizer_specials *out)
{
	*out = t->specials;
}

/* ------------------------------------------------------------------------ */
/* Loading MODEL                                                            */
/* ------------------------------------------------------------------------ */

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}

static strata_status load_gguf(const char *path, strata_tokenizer **out,
			       strata_error *err)
{
	strata_catalog *c = NULL;
	strata_status st = strata_catalog_open(path, &c, err);
	if (st)
		return st;
	const strata_gguf *g = strata_catalog_gguf(c);
	st = g ? strata_tokenizer_from_gguf(g, path, out, err)
	       : strata_fail(err, STRATA_E_TEXT_TOKENIZER,
			     "give a .gguf file or a directory with "
			     "tokenizer.json", "%s is not a GGUF file", path);
	strata_catalog_destroy(c);
	return st;
}

/* tokenizer_config.json's bos/eos/unk/pad names (a string, or an object
 * with "content"), when the directory has one and they name tokens. A
 * missing or unreadable config changes nothing: it is optional. */
static void read_config(strata_tokenizer *t, const char *dir)
{
	text_buf path = {0};
	char *text = NULL;
	size_t len = 0;
	if (strata__text_buf_add(&path, dir, strlen(dir), NULL) ||
	    strata__text_buf_add(&path, "/tokenizer_config.json", 22, NULL) ||
	    strata_file_read_all(path.data, 16u << 20, &text, &len, NULL)) {
		strata__text_buf_fini(&path);
		return;
	}
	json_t *root = json_loadb(text, len, 0, NULL);
	static const char *const keys[] = {"bos_token", "eos_token",
					   "unk_token", "pad_token"};
	int32_t *dst[] = {&t->specials.bos, &t->specials.eos, &t->specials.unk,
			  &t->specials.pad};
	for (int i = 0; root && i < 4; i++) {
		json_t *v = json_object_get(root, keys[i]);
		if (json_is_object(v))
			v = json_object_get(v, "content");
		if (!json_is_string(v))
			continue;
		int32_t id = strata__text_smap_get(&t->piece_map,
						   json_string_value(v),
						   json_string_length(v));
		if (id >= 0)
			*dst[i] = id;
	}
	json_decref(root);
	strata_free(text);
	strata__text_buf_fini(&path);
}

strata_status strata_tokenizer_load(const char *model_path,
				    strata_tokenizer **out, strata_error *err)
{
	struct stat sb;
	if (!model_path || stat(model_path, &sb) != 0)
		return strata_fail(err, STRATA_E_NOT_FOUND,
				   "give a directory holding tokenizer.json or "
				   "a .gguf file", "model '%s' does not exist",
				   model_path ? model_path : "(null)");
	if (!S_ISDIR(sb.st_mode) && !ends_with(model_path, ".json"))
		return load_gguf(model_path, out, err);
	text_buf path = {0};
	strata_status st = strata__text_buf_add(&path, model_path,
						strlen(model_path), err);
	if (!st && S_ISDIR(sb.st_mode))
		st = strata__text_buf_add(&path, "/tokenizer.json", 15, err);
	char *json = NULL;
	size_t len = 0;
	if (!st)
		st = strata_file_read_all(path.data, STRATA_TEXT_MAX_JSON_BYTES,
					  &json, &len, err);
	if (st == STRATA_E_NOT_FOUND || st == STRATA_E_IO)
		strata_error_set_fix(err, "a model directory needs "
				     "tokenizer.json (or pass a .gguf file)");
	if (!st)
		st = strata_tokenizer_from_json(json, len, path.data, out, err);
	if (!st && S_ISDIR(sb.st_mode))
		read_config(*out, model_path);
	strata_free(json);
	strata__text_buf_fini(&path);
	return st;
}
