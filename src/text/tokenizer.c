/* tokenizer.c - the tokenizer object at work: added-token splitting, the
 * encode pipeline and the accessors (layer: text). Building one is
 * tokenizer_build.c, loading MODEL is tokenizer_load.c. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/internal.h"

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
		if (i < n && !strata__text_meta_cut_at(w, n, i))
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
