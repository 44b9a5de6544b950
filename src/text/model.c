/* model.c - the two BPE models of the tokenizer: merges by rank (Hugging
 * Face BPE, GGUF gpt2) and merges by piece score (SentencePiece BPE as
 * llama.cpp runs GGUF "llama" vocabularies) (layer: text).
 *
 * Both keep a binary heap of candidate adjacent pairs and invalidate stale
 * entries lazily when popped, so a word of n symbols costs O(n log n), not
 * the quadratic rescans of a naive loop.
 */
#include <string.h>

#include "text/internal.h"

typedef struct sym {
	int32_t id;	    /* BPE: current token id */
	uint32_t a, n;	    /* bytes [a, a+n) of the word; n == 0: merged away */
	int32_t prev, next; /* -1 at the ends */
} sym;

/* A candidate merge. key packs the order into one integer: HF orders
 * merges by (rank, position), llama.cpp SPM by (-score, left); the high 32
 * bits hold rank or an order-preserving image of -score, the low 32 bits
 * the left symbol's index: one compare per heap step. */
typedef struct cand {
	uint64_t key;
	int32_t a;     /* BPE: left id when pushed; SPM: right index */
	int32_t b;     /* BPE: right id when pushed */
	int32_t extra; /* BPE: merged id; SPM: merged byte length */
} cand;

typedef struct heap {
	cand *v;
	size_t n, cap;
} heap;

static uint64_t bpe_key(int32_t rank, int32_t left)
{
	return (uint64_t)(uint32_t)rank << 32 | (uint32_t)left;
}

/* Higher score first: map -score to an unsigned integer that sorts like
 * the float (IEEE 754 total order for non-NaN values; NaN is refused at
 * load). */
static uint64_t spm_key(float score, int32_t left)
{
	float f = -score;
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	return (uint64_t)u << 32 | (uint32_t)left;
}

static uint32_t key_left(uint64_t key)
{
	return (uint32_t)key;
}

static bool before(const cand *x, const cand *y)
{
	return x->key < y->key;
}

/* A 4-ary heap: half the depth of a binary one and the four children of
 * a node share cache lines, which matters when one word is a whole
 * document (SentencePiece-style files without a pre-tokenizer). */
static strata_status heap_push(heap *h, cand c, strata_error *err)
{
	if (h->n == h->cap) {
		void *p = h->v;
		strata_status st = strata_grow(&p, &h->cap, h->n + 1, sizeof c,
					       "merge queue", err);
		if (st)
			return st;
		h->v = p;
	}
	size_t i = h->n++;
	while (i > 0) {
		size_t up = (i - 1) / 4;
		if (!before(&c, &h->v[up]))
			break;
		h->v[i] = h->v[up];
		i = up;
	}
	h->v[i] = c;
	return STRATA_OK;
}

static cand heap_pop(heap *h)
{
	cand top = h->v[0];
	cand last = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t first = 4 * i + 1, m = i;
		const cand *best = &last;
		for (size_t k = first; k < first + 4 && k < h->n; k++) {
			if (before(&h->v[k], best)) {
				m = k;
				best = &h->v[k];
			}
		}
		if (m == i)
			break;
		h->v[i] = h->v[m];
		i = m;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

strata_status strata__text_push_id(text_scratch *s, int32_t id,
				   strata_error *err)
{
	if (s->n_ids == s->ids_cap) {
		void *p = s->ids;
		strata_status st = strata_grow(&p, &s->ids_cap, s->n_ids + 1,
					       sizeof *s->ids, "token ids", err);
		if (st)
			return st;
		s->ids = p;
	}
	s->ids[s->n_ids++] = id;
	return STRATA_OK;
}

void strata__text_scratch_fini(text_scratch *s)
{
	strata_free(s->sym);
	strata_free(s->heap);
	strata_free(s->ids);
	memset(s, 0, sizeof *s);
}

static strata_status sym_push(text_scratch *s, size_t *n, sym v,
			      strata_error *err)
{
	if (*n == s->sym_cap) {
		void *p = s->sym;
		strata_status st = strata_grow(&p, &s->sym_cap, *n + 1,
					       sizeof v, "word symbols", err);
		if (st)
			return st;
		s->sym = p;
	}
	((sym *)s->sym)[(*n)++] = v;
	return STRATA_OK;
}

static size_t char_len(const strata_tokenizer *t, const char *w, size_t n)
{
	if (t->byte_level)
		return 1;
	size_t k = strata__utf8_valid_len((const unsigned char *)w, n);
	return k ? k : 1;
}

/* ------------------------------------------------------------------------ */
/* BPE by merge rank (HF semantics)                                         */
/* ------------------------------------------------------------------------ */

/* The initial symbols of a word: one per character (per byte for
 * byte-level vocabularies); unknown characters go to <0xNN> byte tokens
 * with byte_fallback, else to unk (fused when fuse_unk), else are dropped,
 * as HF's BPE::merge_word does. */
static strata_status bpe_symbols(const strata_tokenizer *t, const char *w,
				 size_t n, text_scratch *s, size_t *count,
				 strata_error *err)
{
	size_t m = 0;
	strata_status st = STRATA_OK;
	for (size_t i = 0; !st && i < n;) {
		size_t k = char_len(t, w + i, n - i);
		int32_t id = strata__text_smap_get(&t->model_map, w + i, k);
		if (id >= 0) {
			st = sym_push(s, &m, (sym){id, (uint32_t)i, (uint32_t)k,
						   0, 0}, err);
			i += k;
			continue;
		}
		bool bytes_ok = t->byte_fallback;
		for (size_t j = 0; bytes_ok && j < k; j++)
			bytes_ok = t->byte_ids[(unsigned char)w[i + j]] >= 0;
		if (bytes_ok) {
			for (size_t j = 0; !st && j < k; j++)
				st = sym_push(s, &m,
					      (sym){t->byte_ids[(unsigned char)w[i + j]],
						    (uint32_t)(i + j), 1, 0, 0},
					      err);
		} else if (t->unk_model >= 0) {
			sym *v = s->sym;
			if (t->fuse_unk && m && v[m - 1].id == t->unk_model)
				v[m - 1].n += (uint32_t)k;
			else
				st = sym_push(s, &m, (sym){t->unk_model,
							   (uint32_t)i,
							   (uint32_t)k, 0, 0},
					      err);
		}
		i += k;
	}
	sym *v = s->sym;
	for (size_t i = 0; i < m; i++) {
		v[i].prev = (int32_t)i - 1;
		v[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
	}
	*count = m;
	return st;
}

static strata_status bpe_try(const strata_tokenizer *t, heap *h, sym *v,
			     int32_t l, int32_t r, strata_error *err)
{
	if (l < 0 || r < 0)
		return STRATA_OK;
	const struct text_pslot *m =
		strata__text_pmap_get(&t->merges, v[l].id, v[r].id);
	if (!m)
		return STRATA_OK;
	return heap_push(h, (cand){bpe_key(m->rank, l), v[l].id, v[r].id,
				   m->merged}, err);
}

static strata_status bpe_word(const strata_tokenizer *t, const char *w,
			      size_t n, text_scratch *s, strata_error *err)
{
	if (t->ignore_merges) {
		int32_t id = strata__text_smap_get(&t->model_map, w, n);
		if (id >= 0)
			return strata__text_push_id(s, id, err);
	}
	size_t m;
	strata_status st = bpe_symbols(t, w, n, s, &m, err);
	heap h = {s->heap, 0, s->heap_cap};
	sym *v = s->sym;
	for (size_t i = 0; !st && i + 1 < m; i++)
		st = bpe_try(t, &h, v, (int32_t)i, (int32_t)i + 1, err);
	while (!st && h.n) {
		cand c = heap_pop(&h);
		int32_t left = (int32_t)key_left(c.key);
		sym *L = &v[left];
		if (!L->n || L->next < 0)
			continue;
		sym *R = &v[L->next];
		/* Stale unless the pair still merges to the same id (HF's
		 * test); an unchanged left id with its right partner intact
		 * is the common case and needs no lookup. */
		if (L->id != c.a || R->id != c.b) {
			const struct text_pslot *mm =
				strata__text_pmap_get(&t->merges, L->id, R->id);
			if (!mm || mm->merged != c.extra)
				continue;
		}
		L->id = c.extra;
		L->n += R->n;
		R->n = 0;
		L->next = R->next;
		if (R->next >= 0)
			v[R->next].prev = left;
		st = bpe_try(t, &h, v, L->prev, left, err);
		if (!st)
			st = bpe_try(t, &h, v, left, L->next, err);
	}
	s->heap = h.v;
	s->heap_cap = h.cap;
	for (int32_t i = m ? 0 : -1; !st && i >= 0; i = v[i].next)
		st = strata__text_push_id(s, v[i].id, err);
	return st;
}

/* ------------------------------------------------------------------------ */
/* SentencePiece BPE by score (llama.cpp's SPM tokenizer semantics)         */
/* ------------------------------------------------------------------------ */

static strata_status spm_try(const strata_tokenizer *t, heap *h, sym *v,
			     const char *w, int32_t l, int32_t r,
			     strata_error *err)
{
	if (l < 0 || r < 0)
		return STRATA_OK;
	uint32_t len = v[l].n + v[r].n;
	int32_t id = strata__text_smap_get(&t->model_map, w + v[l].a, len);
	if (id < 0)
		return STRATA_OK;
	return heap_push(h, (cand){spm_key(t->scores[id], l), r, 0,
				   (int32_t)len}, err);
}

/* A symbol that is no token goes out as its bytes: <0xNN>, else the byte
 * itself as a piece, else unk (llama.cpp byte_to_token). */
static strata_status spm_emit(const strata_tokenizer *t, const char *p,
			      size_t n, text_scratch *s, strata_error *err)
{
	int32_t id = strata__text_smap_get(&t->model_map, p, n);
	if (id >= 0)
		return strata__text_push_id(s, id, err);
	for (size_t i = 0; i < n; i++) {
		unsigned char b = (unsigned char)p[i];
		id = t->byte_ids[b];
		if (id < 0)
			id = strata__text_smap_get(&t->model_map, p + i, 1);
		if (id < 0)
			id = t->unk_model;
		if (id < 0)
			return strata_fail(err, STRATA_E_TEXT_ENCODING,
					   "use a vocabulary with <0xNN> byte "
					   "tokens or an unknown token",
					   "byte 0x%02X has no token and the "
					   "vocabulary has no unknown token", b);
		strata_status st = strata__text_push_id(s, id, err);
		if (st)
			return st;
	}
	return STRATA_OK;
}

static strata_status spm_word(const strata_tokenizer *t, const char *w,
			      size_t n, text_scratch *s, strata_error *err)
{
	size_t m = 0;
	strata_status st = STRATA_OK;
	for (size_t i = 0; !st && i < n;) {
		size_t k = char_len(t, w + i, n - i);
		st = sym_push(s, &m, (sym){-1, (uint32_t)i, (uint32_t)k,
					   (int32_t)m - 1,
					   i + k < n ? (int32_t)m + 1 : -1},
			      err);
		i += k;
	}
	heap h = {s->heap, 0, s->heap_cap};
	sym *v = s->sym;
	for (size_t i = 0; !st && i + 1 < m; i++)
		st = spm_try(t, &h, v, w, (int32_t)i, (int32_t)i + 1, err);
	while (!st && h.n) {
		cand c = heap_pop(&h);
		int32_t left = (int32_t)key_left(c.key);
		sym *L = &v[left], *R = &v[c.a];
		if (!L->n || !R->n || L->n + R->n != (uint32_t)c.extra)
			continue; /* stale */
		L->n += R->n;
		R->n = 0;
		L->next = R->next;
		if (R->next >= 0)
			v[R->next].prev = left;
		st = spm_try(t, &h, v, w, L->prev, left, err);
		if (!st)
			st = spm_try(t, &h, v, w, left, L->next, err);
	}
	s->heap = h.v;
	s->heap_cap = h.cap;
	for (int32_t i = m ? 0 : -1; !st && i >= 0; i = v[i].next)
		st = spm_emit(t, w + v[i].a, v[i].n, s, err);
	return st;
}

strata_status strata__text_model_word(const strata_tokenizer *t,
				      const char *w, size_t n,
				      text_scratch *s, strata_error *err)
{
	if (!n)
		return STRATA_OK;
	if (n > UINT32_MAX / 2)
		return strata_fail(err, STRATA_E_TEXT_ENCODING,
				   "split the text into smaller parts",
				   "a word of %zu bytes is too long to tokenize",
				   n);
	return t->model == TEXT_MODEL_SPM ? spm_word(t, w, n, s, err)
					  : bpe_word(t, w, n, s, err);
}
