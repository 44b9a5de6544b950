/* tokenizer_build.c - building a tokenizer: the vocabulary tables, merges
 * and added tokens that both loaders (hf_json.c, gguf_vocab.c) fill, and
 * destroying one (layer: text). It knows no loader. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/tokenizer_build.h"

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

static bool meta_chunks_safe(const strata_tokenizer *t)
{
	if (strata__text_smap_get(&t->model_map, STRATA__TEXT_META, 3) < 0)
		return false; /* a lone "▁" could be unk and fuse across */
	for (uint32_t i = 0; i < t->n_ids; i++) {
		const char *p = t->model_bytes[i];
		for (size_t k = 1; p && k + 3 <= t->model_len[i]; k++)
			if (strata__text_meta_cut_at(p, t->model_len[i], k))
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
