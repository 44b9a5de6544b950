/* internal.h - the tokenizer's inner structures, shared by the files of
 * the text layer only (layer: text).
 *
 * A tokenizer is one pipeline whichever file it came from:
 *   added-token split (raw) -> normalizers -> added-token split (normalized)
 *   -> pre-tokenizers -> model (BPE by merge rank, or SentencePiece BPE by
 *   score) -> post-processor ids; and a decoder chain for the way back.
 * tokenizer.json and GGUF loaders only fill this structure.
 */
#ifndef STRATA_TEXT_INTERNAL_H
#define STRATA_TEXT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "strata/text.h"

/* ------------------------------------------------------------------------ */
/* Hash maps                                                                */
/* ------------------------------------------------------------------------ */

/* Bytes -> int32, open addressing. Keys are borrowed: they must outlive the
 * map (they live in the tokenizer's pieces). */
typedef struct text_smap {
	struct text_sslot {
		const char *key; /* NULL: empty slot */
		uint32_t len;
		int32_t value;
		uint64_t hash;
	} *slots;
	size_t cap, count;
} text_smap;

/* (left id, right id) -> (rank, merged id). */
typedef struct text_pmap {
	struct text_pslot {
		uint64_t key; /* UINT64_MAX: empty */
		int32_t rank, merged;
	} *slots;
	size_t cap, count;
} text_pmap;

strata_status strata__text_smap_init(text_smap *m, size_t expect,
				     strata_error *err);
void strata__text_smap_fini(text_smap *m);
/* Inserts or replaces key; *existing (may be NULL) gets the old value or
 * -1. */
strata_status strata__text_smap_put(text_smap *m, const char *key,
				    size_t len, int32_t value,
				    int32_t *existing, strata_error *err);
int32_t strata__text_smap_get(const text_smap *m, const char *key,
			      size_t len);

strata_status strata__text_pmap_init(text_pmap *m, size_t expect,
				     strata_error *err);
void strata__text_pmap_fini(text_pmap *m);
/* Keeps the first (lowest-rank) entry for a pair. */
strata_status strata__text_pmap_put(text_pmap *m, int32_t a, int32_t b,
				    int32_t rank, int32_t merged,
				    strata_error *err);
const struct text_pslot *strata__text_pmap_get(const text_pmap *m, int32_t a,
					       int32_t b);

/* ------------------------------------------------------------------------ */
/* Growable byte strings and lists of pieces                                */
/* ------------------------------------------------------------------------ */

/* n bytes of p (NULs included) and a terminating NUL; NULL on OOM. */
char *strata__text_memdup(const char *p, size_t n);

typedef struct text_buf {
	char *data;
	size_t len, cap;
} text_buf;

strata_status strata__text_buf_add(text_buf *b, const void *p, size_t n,
				   strata_error *err);
void strata__text_buf_fini(text_buf *b);

/* Pieces of text in one arena. at_start: the piece begins at offset 0 of
 * the caller's original text (Metaspace prepend_scheme "first"). id >= 0:
 * the piece is an already-recognised added token. */
typedef struct text_piece {
	size_t off, len;
	int32_t id;
	bool at_start;
} text_piece;

typedef struct text_list {
	text_buf arena;
	text_piece *items;
	size_t count, cap;
} text_list;

strata_status strata__text_list_push(text_list *l, const char *p, size_t n,
				     int32_t id, bool at_start,
				     strata_error *err);
void strata__text_list_clear(text_list *l);
void strata__text_list_fini(text_list *l);

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                    */
/* ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 character at s (n bytes left), or 0 when the
 * bytes there are not a valid character (the maximal-subpart rule). */
size_t strata__utf8_valid_len(const unsigned char *s, size_t n);
/* Length of the longest prefix of s that could still become a valid
 * character with more bytes (0 if s[0] is not a possible start). */
size_t strata__utf8_partial_len(const unsigned char *s, size_t n);
/* Appends s to b with every maximal invalid subpart replaced by U+FFFD. */
strata_status strata__utf8_lossy(text_buf *b, const char *s, size_t n,
				 strata_error *err);

/* GPT-2's byte <-> code point table: byte b is shown as code point
 * strata__bytelevel_cp(b); bytelevel_byte maps back (-1: not a mapped
 * code point). */
uint32_t strata__bytelevel_cp(unsigned char b);
int strata__bytelevel_byte(uint32_t cp);

/* ------------------------------------------------------------------------ */
/* Pipeline steps                                                           */
/* ------------------------------------------------------------------------ */

#define TEXT_NORM_MAP(X)                                                       \
	X(NFC, "NFC") X(NFD, "NFD") X(NFKC, "NFKC") X(NFKD, "NFKD")            \
	X(LOWERCASE, "Lowercase") X(PREPEND, "Prepend")                        \
	X(REPLACE, "Replace") X(STRIP, "Strip")

typedef enum text_norm_kind {
#define TEXT_NORM_ENUM(name, text) TEXT_NORM_##name,
	TEXT_NORM_MAP(TEXT_NORM_ENUM)
#undef TEXT_NORM_ENUM
} text_norm_kind;

/* Split behaviours, named as in tokenizer.json. */
#define TEXT_SPLIT_MAP(X)                                                      \
	X(REMOVED, "Removed") X(ISOLATED, "Isolated")                          \
	X(MERGED_WITH_PREVIOUS, "MergedWithPrevious")                          \
	X(MERGED_WITH_NEXT, "MergedWithNext") X(CONTIGUOUS, "Contiguous")

typedef enum text_split_behavior {
#define TEXT_SPLIT_ENUM(name, text) TEXT_SPLIT_##name,
	TEXT_SPLIT_MAP(TEXT_SPLIT_ENUM)
#undef TEXT_SPLIT_ENUM
} text_split_behavior;

typedef struct text_norm {
	text_norm_kind kind;
	char *a;	      /* Prepend text, Replace literal pattern */
	size_t a_len;
	char *b;	      /* Replace content */
	size_t b_len;
	pcre2_code *re;	      /* Replace regex pattern (instead of a) */
	bool left, right;     /* Strip */
} text_norm;

typedef enum text_pre_kind {
	TEXT_PRE_SPLIT,	    /* regex split with a behaviour */
	TEXT_PRE_BYTELEVEL, /* optional prefix space, optional GPT-2 regex */
	TEXT_PRE_METASPACE,
} text_pre_kind;

typedef enum text_prepend {
	TEXT_PREPEND_ALWAYS,
	TEXT_PREPEND_FIRST,
	TEXT_PREPEND_NEVER,
} text_prepend;

typedef struct text_pre {
	text_pre_kind kind;
	pcre2_code *re; /* SPLIT; BYTELEVEL with use_regex */
	text_split_behavior behavior;
	bool invert;
	bool add_prefix_space; /* BYTELEVEL */
	char repl[8];	       /* METASPACE replacement, UTF-8 */
	size_t repl_len;
	text_prepend prepend;
	bool split;
} text_pre;

typedef enum text_dec_kind {
	TEXT_DEC_BYTELEVEL,
	TEXT_DEC_REPLACE,
	TEXT_DEC_BYTEFALLBACK,
	TEXT_DEC_FUSE,
	TEXT_DEC_STRIP,
	TEXT_DEC_METASPACE,
} text_dec_kind;

typedef struct text_dec {
	text_dec_kind kind;
	char *a; /* REPLACE pattern, STRIP content, METASPACE replacement */
	size_t a_len;
	char *b; /* REPLACE content */
	size_t b_len;
	uint32_t start, stop; /* STRIP */
	text_prepend prepend; /* METASPACE */
} text_dec;

/* An added token matched in text before the model. */
typedef struct text_added {
	int32_t id;
	char *content; /* as matched: raw, or normalized when `normalized` */
	size_t len;
	bool special, normalized, lstrip, rstrip, single_word;
} text_added;

typedef enum text_model_kind {
	TEXT_MODEL_BPE, /* merges by rank (HF, GGUF gpt2) */
	TEXT_MODEL_SPM, /* merges by piece score (GGUF llama) */
} text_model_kind;

#define TEXT_ATTR_SPECIAL 1u /* control token: skipped by skip_special */
#define TEXT_ATTR_HOLE 2u    /* no piece for this id */
#define TEXT_ATTR_ADDED 4u   /* an added token */
/* Dropped by decode(skip_special). HF tokenizers 0.23 gives a
 * `normalized` added token back as its normalized content ("<s>" under
 * Prepend("▁") decodes as "▁<s>"), which is then no longer the special
 * string and is not skipped: tests/data/tokenizers/generated/expected.json
 * (hf-llama2-spm-bpe) records exactly that. */
#define TEXT_ATTR_SKIP 8u

struct strata_tokenizer {
	uint32_t n_ids;
	char **piece;	     /* [n_ids] as stored in the file, NUL-ended */
	uint32_t *piece_len; /* [n_ids] */
	uint8_t *attr;	     /* [n_ids] TEXT_ATTR_* */
	/* What the model sees: for byte-level vocabularies the bytes a piece
	 * stands for, else the piece itself. [n_ids], NULL entries share
	 * piece[]. */
	char **model_bytes;
	uint32_t *model_len;
	float *scores; /* [n_ids] for TEXT_MODEL_SPM */
	/* [n_ids] or NULL: what decode uses instead of piece[] (normalized
	 * added tokens, see TEXT_ATTR_SKIP); NULL entries use piece[]. */
	char **dec_piece;
	uint32_t *dec_len;
	text_smap model_map; /* model bytes -> id (model vocabulary only) */
	text_smap piece_map; /* piece -> id (everything) */
	text_pmap merges;

	text_model_kind model;
	bool byte_level; /* model works on bytes (GPT-2 mapping) */
	bool byte_fallback, fuse_unk, ignore_merges;
	/* No model piece has "▁" right after another character (only at its
	 * start or inside a run of "▁"), and "▁" is a piece: then no merge
	 * can join a character to a following "▁", so a long word may be cut
	 * before each such "▁" without changing any id (finish_vocab). */
	bool meta_chunks;
	int32_t unk_model; /* the model's unk id, -1 none */
	int32_t byte_ids[256]; /* <0xNN> ids, -1 absent */

	text_norm *norms;
	size_t n_norms;
	text_pre *pres;
	size_t n_pres;
	text_dec *decs;
	size_t n_decs;
	bool has_decoder;
	text_added *added; /* sorted by first byte, longest first */
	size_t n_added;
	uint32_t added_start[257]; /* added[] index range per first byte */

	int32_t *prefix_ids, *suffix_ids; /* post-processor */
	size_t n_prefix, n_suffix;
	strata_tokenizer_specials specials;
};

#define STRATA__TEXT_META "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/* Whether s[i] starts a "▁" that follows a character other than "▁": where
 * the encoder may cut a long SentencePiece word, and what the builder
 * checks no vocabulary piece holds before allowing it. */
static inline bool strata__text_meta_cut_at(const char *s, size_t n, size_t i)
{
	return i >= 1 && i + 3 <= n && !memcmp(s + i, STRATA__TEXT_META, 3) &&
	       !(i >= 3 && !memcmp(s + i - 3, STRATA__TEXT_META, 3));
}

/* Unicode White_Space, as HF's strip and single_word matching read it. */
bool strata__text_is_ws(uint32_t c);

/* Compiles a pattern for splitting (UTF, UCP, JIT where available). */
strata_status strata__text_regex(const char *pat, size_t len, bool literal,
				 const char *what, pcre2_code **out,
				 strata_error *err);
/* GPT-2's own split pattern, as HF ByteLevel(use_regex) uses. */
extern const char strata__gpt2_pattern[];

/* Applies the normalizer chain to s, appending the result to out. */
strata_status strata__text_normalize(const strata_tokenizer *t, const char *s,
				     size_t n, text_buf *out,
				     strata_error *err);
/* Applies the pre-tokenizer chain to the pieces of *io (id < 0 ones);
 * tmp is scratch. */
strata_status strata__text_pretokenize(const strata_tokenizer *t,
				       text_list *io, text_list *tmp,
				       strata_error *err);

/* Model scratch, reused across words. */
typedef struct text_scratch {
	void *sym;
	size_t sym_cap;
	void *heap;
	size_t heap_cap;
	int32_t *ids;
	size_t n_ids, ids_cap;
} text_scratch;

void strata__text_scratch_fini(text_scratch *s);
/* Tokenizes one pre-tokenized word, appending ids to s->ids. */
strata_status strata__text_model_word(const strata_tokenizer *t,
				      const char *w, size_t n,
				      text_scratch *s, strata_error *err);
strata_status strata__text_push_id(text_scratch *s, int32_t id,
				   strata_error *err);

void strata__text_norms_free(text_norm *n, size_t count);
void strata__text_pres_free(text_pre *p, size_t count);
void strata__text_decs_free(text_dec *d, size_t count);

/* ------------------------------------------------------------------------ */
/* Decoder steps shared by the whole decoder and the stream (decode.c)      */
/* ------------------------------------------------------------------------ */

/* The byte a "<0xNN>" piece stands for, or -1 for any other piece. */
int strata__text_byte_token(const char *p, size_t n);
/* Whether all n bytes of p are complete, valid UTF-8 (true for n = 0). */
bool strata__utf8_all_valid(const char *p, size_t n);
/* ByteLevel on one token: appends the bytes its code points stand for, or
 * the token's own bytes when one code point is unmapped (HF). */
strata_status strata__text_bytelevel(const char *p, size_t n, text_buf *out,
				     strata_error *err);
/* Strip on one token: appends p less up to d->start copies of d->a at its
 * start and d->stop at its end, as an item of out. */
strata_status strata__text_strip(const text_dec *d, const char *p, size_t n,
				 text_list *out, strata_error *err);
/* Appends p with each occurrence of a (an bytes, found left to right, not
 * overlapping) replaced by b; an = 0 copies p. */
strata_status strata__text_replace(const char *p, size_t n, const char *a,
				   size_t an, const char *b, size_t bn,
				   text_buf *out, strata_error *err);
/* The string decoding starts from for id (its piece, or a normalized added
 * token's content), borrowed from t; *p = NULL when skip_special drops it.
 * An id outside the vocabulary is E_INVALID_ARG. */
strata_status strata__text_token_text(const strata_tokenizer *t, int32_t id,
				      bool skip_special, const char **p,
				      size_t *n, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Chat formats (template_load.c)                                           */
/* ------------------------------------------------------------------------ */

/* The model's bos_token / eos_token texts as strata_chat_template_load
 * finds them, without needing a template (a directory without
 * tokenizer_config.json gives none). *bos and *eos are strata_alloc'd or
 * NULL. Errors: E_NOT_FOUND (no such model), E_PARSE, E_NOMEM. */
strata_status strata__chat_tokens_load(const char *model_path, char **bos,
				       char **eos, strata_error *err);

#endif
