/* gguf_vocab.c - builds a tokenizer from a GGUF file's tokenizer.ggml.*
 * metadata: "llama" (SentencePiece BPE by score, byte fallback, space
 * prefix) and "gpt2" (byte-level BPE by merge rank with the split regexes
 * named by tokenizer.ggml.pre) (layer: text).
 *
 * Trust: GGUF metadata is hostile; the checkpoint layer bounds the arrays,
 * this file checks types, counts against each other, ids against the
 * vocabulary and every score for NaN. The split regexes are the models'
 * own (their tokenizer.json pre-tokenizers), in the sequences llama.cpp
 * applies them; each is a Split with the Isolated behaviour.
 */
#include <math.h>
#include <string.h>

#include "strata/checkpoint.h"
#include "text/tokenizer_build.h"

/* GGUF token types (llama.cpp's llama_token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define LLAMA3_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* tokenizer.ggml.pre -> its split regexes, applied in order. */
static const struct pre_entry {
	const char *names; /* space-separated aliases */
	const char *re[7];
	bool ignore_merges;
} pre_table[] = {
	{"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+",
		     "[0-9][0-9][0-9]"}, false},
	{"gpt-2 phi-2 mpt olmo jais trillion jina-es jina-de jina-v2-es "
	 "jina-v2-de gigachat mellum", {GPT2_RE}, false},
	/* llama.cpp sets ignore_merges (and adds BOS unless the file says
	 * otherwise) for the Llama-3 family, not for dbrx / smaug. */
	{"llama-bpe llama3 llama-v3 falcon3 falcon-h1 pixtral", {LLAMA3_RE},
	 true},
	{"dbrx smaug-bpe", {LLAMA3_RE}, false},
	{"qwen2 deepseek-r1-qwen stablelm2 hunyuan", {QWEN2_RE}, false},
	{"starcoder refact command-r smollm codeshell exaone minerva",
	 {"\\p{N}", GPT2_RE}, false},
	{"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_RE, "[0-9][0-9][0-9]"},
	 false},
	{"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
			    "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}, false},
	{"deepseek-llm",
	 {"[\r\n]",
	  "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
	  "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+",
	  "\\p{N}+"}, false},
	{"poro-chat bloom gpt3-finnish", {" ?[^(\\s|.,!?…。，、।۔،)]+"}, false},
};

typedef struct gv {
	const strata_gguf *g;
	const char *what;
	strata_tokenizer *t;
	strata_error *err;
} gv;

static strata_status bad(gv *v, const char *key, const char *msg)
{
	return strata_fail(v->err, STRATA_E_TEXT_TOKENIZER,
			   "re-convert the model with a current llama.cpp",
			   "%s: %s: %s", v->what, key, msg);
}

/* An array key with element type `want`; absent is count 0 when optional. */
static strata_status get_array(gv *v, const char *key, strata_gguf_type want,
			       bool required, long *kv, uint64_t *count)
{
	*kv = strata_gguf_find(v->g, key);
	*count = 0;
	if (*kv < 0)
		return required ? bad(v, key, "missing") : STRATA_OK;
	strata_gguf_type elem;
	strata_status st = strata_gguf_get_array(v->g, key, &elem, count, v->err);
	if (st)
		return st;
	bool ok = elem == want ||
		  (want == STRATA_GGUF_I32 && (elem == STRATA_GGUF_U32 ||
					       elem == STRATA_GGUF_I64)) ||
		  (want == STRATA_GGUF_F32 && elem == STRATA_GGUF_F64);
	return ok ? STRATA_OK : bad(v, key, "has the wrong element type");
}

/* A special id: absent, or UINT32_MAX, means none. */
static strata_status get_id(gv *v, const char *key, int32_t *out)
{
	*out = -1;
	if (strata_gguf_find(v->g, key) < 0)
		return STRATA_OK;
	uint64_t x;
	strata_status st = strata_gguf_get_u64(v->g, key, &x, v->err);
	if (st == STRATA_OK && x != UINT32_MAX && x != UINT64_MAX) {
		if (x >= v->t->n_ids)
			return strata_fail(v->err, STRATA_E_TEXT_TOKENIZER,
					   "re-convert the model",
					   "%s: %s = %llu is outside the "
					   "vocabulary of %u", v->what, key,
					   (unsigned long long)x, v->t->n_ids);
		*out = (int32_t)x;
	}
	return st == STRATA_E_CKPT_METADATA ? STRATA_OK : st;
}

static strata_status get_flag(gv *v, const char *key, bool dflt, bool *out)
{
	*out = dflt;
	if (strata_gguf_find(v->g, key) < 0)
		return STRATA_OK;
	return strata_gguf_get_bool(v->g, key, out, v->err);
}

static strata_status add_pre_re(gv *v, const char *re, const char *name)
{
	strata_tokenizer *t = v->t;
	text_pre p = {.kind = TEXT_PRE_SPLIT, .behavior = TEXT_SPLIT_ISOLATED};
	strata_status st = strata__text_regex(re, strlen(re), false, name,
					      &p.re, v->err);
	if (st)
		return st;
	void *a = t->pres;
	size_t cap = t->n_pres;
	st = strata_grow(&a, &cap, t->n_pres + 1, sizeof p, "pre-tokenizers",
			 v->err);
	if (st) {
		pcre2_code_free(p.re);
		return st;
	}
	t->pres = a;
	t->pres[t->n_pres++] = p;
	return STRATA_OK;
}

static bool has_name(const char *names, const char *s, size_t n)
{
	while (*names) {
		size_t k = strcspn(names, " ");
		if (k == n && !memcmp(names, s, n))
			return true;
		names += k + (names[k] == ' ');
	}
	return false;
}

static strata_status set_pre(gv *v)
{
	const char *pre = "default";
	size_t n = 7;
	if (strata_gguf_find(v->g, "tokenizer.ggml.pre") >= 0) {
		strata_status st = strata_gguf_get_string(
			v->g, "tokenizer.ggml.pre", &pre, &n, v->err);
		if (st)
			return st;
	}
	for (size_t i = 0; i < sizeof pre_table / sizeof *pre_table; i++) {
		if (!has_name(pre_table[i].names, pre, n))
			continue;
		for (int k = 0; k < 7 && pre_table[i].re[k]; k++) {
			strata_status st = add_pre_re(v, pre_table[i].re[k],
						      v->what);
			if (st)
				return st;
		}
		v->t->ignore_merges = pre_table[i].ignore_merges;
		/* The Llama-3 family adds BOS unless add_bos_token says no. */
		if (pre_table[i].ignore_merges &&
		    strata_gguf_find(v->g, "tokenizer.ggml.add_bos_token") < 0)
			v->t->specials.add_bos = v->t->specials.bos >= 0;
		return STRATA_OK;
	}
	char shown[64];
	strata_escape(shown, sizeof shown, pre, n);
	return strata_fail(v->err, STRATA_E_TEXT_UNSUPPORTED,
			   "use a model whose pre-tokenizer strata knows "
			   "(gpt-2, llama-bpe, qwen2, falcon, mpt, refact, "
			   "starcoder, deepseek-llm, deepseek-coder, ...)",
			   "%s: tokenizer.ggml.pre '%s' is not supported",
			   v->what, shown);
}

static strata_status add_dec(gv *v, text_dec d, const char *a,
			     const char *b)
{
	strata_tokenizer *t = v->t;
	d.a = a ? strata_strdup(a) : NULL;
	d.b = b ? strata_strdup(b) : NULL;
	d.a_len = a ? strlen(a) : 0;
	d.b_len = b ? strlen(b) : 0;
	void *p = t->decs;
	size_t cap = t->n_decs;
	strata_status st = (a && !d.a) || (b && !d.b)
		? strata_fail(v->err, STRATA_E_NOMEM, "free some memory",
			      "no memory for a decoder")
		: strata_grow(&p, &cap, t->n_decs + 1, sizeof d, "decoders",
			      v->err);
	if (st) {
		strata_free(d.a);
		strata_free(d.b);
		return st;
	}
	t->decs = p;
	t->decs[t->n_decs++] = d;
	t->has_decoder = true;
	return STRATA_OK;
}

static strata_status add_norm(gv *v, text_norm_kind k, const char *a,
			      const char *b)
{
	strata_tokenizer *t = v->t;
	text_norm n = {.kind = k};
	n.a = strata_strdup(a);
	n.b = b ? strata_strdup(b) : NULL;
	n.a_len = strlen(a);
	n.b_len = b ? strlen(b) : 0;
	void *p = t->norms;
	size_t cap = t->n_norms;
	strata_status st = !n.a || (b && !n.b)
		? strata_fail(v->err, STRATA_E_NOMEM, "free some memory",
			      "no memory for a normalizer")
		: strata_grow(&p, &cap, t->n_norms + 1, sizeof n, "normalizers",
			      v->err);
	if (st) {
		strata_free(n.a);
		strata_free(n.b);
		return st;
	}
	t->norms = p;
	t->norms[t->n_norms++] = n;
	return STRATA_OK;
}

/* llama: " " -> "▁" with a leading "▁" (add_space_prefix), merges by
 * score; the decoder undoes both. */
static strata_status setup_spm(gv *v)
{
	strata_tokenizer *t = v->t;
	bool space;
	strata_status st = get_flag(v, "tokenizer.ggml.add_space_prefix", true,
				    &space);
	t->model = TEXT_MODEL_SPM;
	t->unk_model = t->specials.unk;
	if (!st && space)
		st = add_norm(v, TEXT_NORM_PREPEND, "\xE2\x96\x81", NULL);
	if (!st)
		st = add_norm(v, TEXT_NORM_REPLACE, " ", "\xE2\x96\x81");
	if (!st)
		st = add_dec(v, (text_dec){.kind = TEXT_DEC_REPLACE},
			     "\xE2\x96\x81", " ");
	if (!st)
		st = add_dec(v, (text_dec){.kind = TEXT_DEC_BYTEFALLBACK}, NULL,
			     NULL);
	if (!st)
		st = add_dec(v, (text_dec){.kind = TEXT_DEC_FUSE}, NULL, NULL);
	if (!st && space)
		st = add_dec(v, (text_dec){.kind = TEXT_DEC_STRIP, .start = 1},
			     " ", NULL);
	return st;
}

static strata_status load_merges(gv *v)
{
	long kv;
	uint64_t n;
	strata_status st = get_array(v, "tokenizer.ggml.merges",
				     STRATA_GGUF_STRING, true, &kv, &n);
	if (!st)
		st = strata__text_pmap_init(&v->t->merges, n, v->err);
	for (uint64_t i = 0; !st && i < n; i++) {
		const char *s;
		size_t len;
		strata_gguf_array_string(v->g, kv, i, &s, &len);
		/* The first space after the first byte splits, as llama.cpp
		 * reads merges (a piece may itself be a space). */
		const char *sp = s && len > 1 ? memchr(s + 1, ' ', len - 1)
					      : NULL;
		if (!sp || sp == s + len - 1)
			return bad(v, "tokenizer.ggml.merges",
				   "an entry is not two pieces split by a space");
		st = strata__tokenizer_add_merge(v->t, s, (size_t)(sp - s),
						 sp + 1, len - (size_t)(sp - s) - 1,
						 (int32_t)i, v->what, v->err);
	}
	return st;
}

static strata_status load_tokens(gv *v, long kv_tok, long kv_type,
				 uint64_t n_type, long kv_score,
				 uint64_t n_score)
{
	strata_tokenizer *t = v->t;
	for (uint32_t i = 0; i < t->n_ids; i++) {
		const char *s;
		size_t len;
		strata_gguf_array_string(v->g, kv_tok, i, &s, &len);
		if (!s)
			return bad(v, "tokenizer.ggml.tokens", "unreadable entry");
		strata_status st = strata__tokenizer_set_piece(t, (int32_t)i, s,
							       len, true, v->err);
		if (st)
			return st;
		if (kv_score >= 0 && i < n_score) {
			double sc = strata_gguf_array_f64(v->g, kv_score, i);
			if (isnan(sc))
				return bad(v, "tokenizer.ggml.scores",
					   "a score is NaN");
			t->scores[i] = (float)sc;
		}
		int64_t ty = kv_type >= 0 && i < n_type
				     ? strata_gguf_array_i64(v->g, kv_type, i)
				     : TT_NORMAL;
		if (ty == TT_CONTROL || ty == TT_USER) {
			text_added a = {.id = (int32_t)i, .content = (char *)s,
					.len = len, .special = ty == TT_CONTROL};
			if (len)
				st = strata__tokenizer_add_added(t, &a, v->err);
			if (st)
				return st;
		}
	}
	return STRATA_OK;
}

/* The ids encoding adds around a text (add_bos / add_eos). */
static strata_status add_bos_eos(gv *v)
{
	strata_tokenizer *t = v->t;
	if (t->specials.add_bos) {
		t->prefix_ids = strata_alloc_or_error(sizeof *t->prefix_ids,
						      "BOS", v->err);
		if (!t->prefix_ids)
			return STRATA_E_NOMEM;
		t->prefix_ids[t->n_prefix++] = t->specials.bos;
	}
	if (t->specials.add_eos) {
		t->suffix_ids = strata_alloc_or_error(sizeof *t->suffix_ids,
						      "EOS", v->err);
		if (!t->suffix_ids)
			return STRATA_E_NOMEM;
		t->suffix_ids[t->n_suffix++] = t->specials.eos;
	}
	return STRATA_OK;
}

static strata_status build(gv *v)
{
	strata_tokenizer *t = v->t;
	const char *model;
	size_t mlen;
	strata_status st = strata_gguf_get_string(v->g, "tokenizer.ggml.model",
						  &model, &mlen, v->err);
	if (st)
		return strata_fail(v->err, STRATA_E_TEXT_TOKENIZER,
				   "use a GGUF that embeds its vocabulary",
				   "%s has no tokenizer.ggml.model", v->what);
	if ((mlen == 4 && !memcmp(model, "none", 4)) ||
	    (mlen == 8 && !memcmp(model, "no_vocab", 8)))
		return strata_fail(v->err, STRATA_E_TEXT_TOKENIZER,
				   "give token ids (strata logits --tokens, "
				   "strata bench), or convert the checkpoint "
				   "from a folder that has its tokenizer.json",
				   "%s has no vocabulary (tokenizer.ggml.model "
				   "'%.*s': written without a tokenizer)",
				   v->what, (int)mlen, model);
	bool spm = mlen == 5 && !memcmp(model, "llama", 5);
	bool bpe = mlen == 4 && !memcmp(model, "gpt2", 4);
	if (!spm && !bpe) {
		char shown[48];
		strata_escape(shown, sizeof shown, model, mlen);
		return strata_fail(v->err, STRATA_E_TEXT_UNSUPPORTED,
				   "use a model with a BPE vocabulary "
				   "(tokenizer.ggml.model llama or gpt2)",
				   "%s: tokenizer.ggml.model '%s' is not "
				   "supported (only BPE: llama, gpt2)",
				   v->what, shown);
	}
	long kv_tok, kv_type, kv_score;
	uint64_t n_tok, n_type, n_score;
	if ((st = get_array(v, "tokenizer.ggml.tokens", STRATA_GGUF_STRING,
			    true, &kv_tok, &n_tok)) ||
	    (st = get_array(v, "tokenizer.ggml.token_type", STRATA_GGUF_I32,
			    false, &kv_type, &n_type)) ||
	    (st = get_array(v, "tokenizer.ggml.scores", STRATA_GGUF_F32, spm,
			    &kv_score, &n_score)))
		return st;
	if (!n_tok || (kv_type >= 0 && n_type != n_tok) ||
	    (kv_score >= 0 && n_score != n_tok))
		return bad(v, "tokenizer.ggml.tokens",
			   "empty, or token_type/scores of another length");
	if (n_tok > STRATA_TEXT_MAX_VOCAB)
		return bad(v, "tokenizer.ggml.tokens", "too many tokens");
	if ((st = strata__tokenizer_alloc_ids(t, (uint32_t)n_tok, v->err)))
		return st;
	t->scores = strata_calloc_or_error(n_tok, sizeof *t->scores, "scores",
					   v->err);
	if (!t->scores)
		return STRATA_E_NOMEM;
	t->byte_level = bpe;
	if ((st = load_tokens(v, kv_tok, kv_type, n_type, kv_score, n_score)) ||
	    (st = strata__tokenizer_finish_vocab(t, v->err)) ||
	    (st = get_id(v, "tokenizer.ggml.bos_token_id", &t->specials.bos)) ||
	    (st = get_id(v, "tokenizer.ggml.eos_token_id", &t->specials.eos)) ||
	    (st = get_id(v, "tokenizer.ggml.unknown_token_id",
			 &t->specials.unk)) ||
	    (st = get_id(v, "tokenizer.ggml.padding_token_id",
			 &t->specials.pad)) ||
	    (st = get_flag(v, "tokenizer.ggml.add_bos_token", spm,
			   &t->specials.add_bos)) ||
	    (st = get_flag(v, "tokenizer.ggml.add_eos_token", false,
			   &t->specials.add_eos)))
		return st;
	if (spm)
		st = setup_spm(v);
	else if (!(st = set_pre(v)) && !(st = load_merges(v)))
		st = add_dec(v, (text_dec){.kind = TEXT_DEC_BYTELEVEL}, NULL,
			     NULL);
	if (st || (st = strata__tokenizer_finish_added(t, v->err)))
		return st;
	if ((t->specials.add_bos && t->specials.bos < 0) ||
	    (t->specials.add_eos && t->specials.eos < 0))
		return bad(v, "tokenizer.ggml.add_bos_token",
			   "BOS/EOS is to be added but its id is not set");
	return add_bos_eos(v);
}

strata_status strata_tokenizer_from_gguf(const struct strata_gguf *g,
					 const char *what,
					 strata_tokenizer **out,
					 strata_error *err)
{
	if (!g || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass GGUF metadata and an output",
				   "tokenizer: missing argument");
	strata_tokenizer *t = strata__tokenizer_new(err);
	gv v = {g, what ? what : "GGUF", t, err};
	strata_status st = t ? build(&v) : STRATA_E_NOMEM;
	if (st) {
		strata_tokenizer_destroy(t);
		return st;
	}
	*out = t;
	return STRATA_OK;
}
