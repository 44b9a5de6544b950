/* hf_json.c - builds a tokenizer from a Hugging Face tokenizer.json: BPE
 * model, added tokens, normalizers, pre-tokenizers, post-processor and
 * decoder (layer: text).
 *
 * Trust: the file is hostile. Ids are range-checked, sizes capped, every
 * component type checked; a component strata does not implement is
 * E_TEXT_UNSUPPORTED naming it. `truncation` and `padding` are batch
 * length policies, not tokenization, and are ignored.
 */
#include <string.h>

#include <jansson.h>

#include "text/tokenizer_build.h"

typedef struct hf {
	strata_tokenizer *t;
	const char *what;
	strata_error *err;
} hf;

static strata_status bad(hf *h, const char *msg, const char *detail)
{
	char shown[96] = "";
	if (detail)
		strata_escape(shown, sizeof shown, detail, strlen(detail));
	return strata_fail(h->err, STRATA_E_TEXT_TOKENIZER,
			   "check or re-download the tokenizer file",
			   "%s: %s%s", h->what, msg, shown);
}

static strata_status unsupported(hf *h, const char *kind, const char *type)
{
	char shown[64];
	strata_escape(shown, sizeof shown, type, strlen(type));
	return strata_fail(h->err, STRATA_E_TEXT_UNSUPPORTED,
			   "use a BPE tokenizer (byte-level or SentencePiece "
			   "style) or a GGUF vocabulary",
			   "%s: %s '%s' is not supported", h->what, kind, shown);
}

static const char *type_of(const json_t *o)
{
	const char *s = json_string_value(json_object_get(o, "type"));
	return s ? s : "";
}

/* Optional bool member: absent or null gives dflt. */
static int get_bool(hf *h, const json_t *o, const char *key, bool dflt,
		    bool *out)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		*out = dflt;
		return 0;
	}
	if (!json_is_boolean(v)) {
		bad(h, "expected true/false for ", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

static int get_str(hf *h, const json_t *o, const char *key, const char **s,
		   size_t *n)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v)) {
		bad(h, "expected a string for ", key);
		return -1;
	}
	*s = json_string_value(v);
	*n = json_string_length(v);
	return 0;
}

/* A Split/Replace pattern: {"String": s} or {"Regex": r}. */
static strata_status get_pattern(hf *h, const json_t *o, pcre2_code **re,
				 char **lit, size_t *lit_len)
{
	json_t *p = json_object_get(o, "pattern");
	json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
	if (json_is_string(s) && lit) {
		*lit = strata__text_memdup(json_string_value(s),
					   json_string_length(s));
		*lit_len = json_string_length(s);
		return *lit ? STRATA_OK
			    : strata_fail(h->err, STRATA_E_NOMEM,
					  "free some memory", "no memory");
	}
	if (json_is_string(s))
		return strata__text_regex(json_string_value(s),
					  json_string_length(s), true, h->what,
					  re, h->err);
	if (json_is_string(r))
		return strata__text_regex(json_string_value(r),
					  json_string_length(r), false, h->what,
					  re, h->err);
	return bad(h, "a pattern must be {\"String\": ...} or {\"Regex\": ...}",
		   NULL);
}

/* ------------------------------------------------------------------------ */
/* Normalizers                                                              */
/* ------------------------------------------------------------------------ */

static strata_status add_norm(hf *h, text_norm n)
{
	strata_tokenizer *t = h->t;
	void *p = t->norms;
	size_t cap = t->n_norms;
	strata_status st = strata_grow(&p, &cap, t->n_norms + 1, sizeof n,
				       "normalizers", h->err);
	if (st) {
		strata_free(n.a);
		strata_free(n.b);
		pcre2_code_free(n.re);
		return st;
	}
	t->norms = p;
	t->norms[t->n_norms++] = n;
	return STRATA_OK;
}

static strata_status parse_norm(hf *h, const json_t *o, int depth)
{
	if (!o || json_is_null(o))
		return STRATA_OK;
	const char *ty = type_of(o);
	static const struct { const char *name; text_norm_kind k; } simple[] = {
		{"NFC", TEXT_NORM_NFC}, {"NFD", TEXT_NORM_NFD},
		{"NFKC", TEXT_NORM_NFKC}, {"NFKD", TEXT_NORM_NFKD},
		{"Lowercase", TEXT_NORM_LOWERCASE},
	};
	for (size_t i = 0; i < sizeof simple / sizeof *simple; i++)
		if (!strcmp(ty, simple[i].name))
			return add_norm(h, (text_norm){.kind = simple[i].k});
	if (!strcmp(ty, "Sequence") && depth < 8) {
		json_t *list = json_object_get(o, "normalizers");
		if (!json_is_array(list))
			return bad(h, "normalizer Sequence needs a list", NULL);
		for (size_t i = 0; i < json_array_size(list); i++) {
			strata_status st = parse_norm(h, json_array_get(list, i),
						      depth + 1);
			if (st)
				return st;
		}
		return STRATA_OK;
	}
	text_norm n = {0};
	const char *s;
	size_t len;
	if (!strcmp(ty, "Prepend")) {
		if (get_str(h, o, "prepend", &s, &len))
			return h->err->code;
		n.kind = TEXT_NORM_PREPEND;
		n.a = strata__text_memdup(s, len);
		n.a_len = len;
		if (!n.a)
			return strata_fail(h->err, STRATA_E_NOMEM,
					   "free some memory", "no memory");
		return add_norm(h, n);
	}
	if (!strcmp(ty, "Replace")) {
		if (get_str(h, o, "content", &s, &len))
			return h->err->code;
		n.kind = TEXT_NORM_REPLACE;
		n.b = strata__text_memdup(s, len);
		n.b_len = len;
		strata_status st = n.b ? get_pattern(h, o, &n.re, &n.a, &n.a_len)
				       : strata_fail(h->err, STRATA_E_NOMEM,
						     "free some memory",
						     "no memory");
		if (st) {
			strata_free(n.b);
			return st;
		}
		return add_norm(h, n);
	}
	if (!strcmp(ty, "Strip")) {
		n.kind = TEXT_NORM_STRIP;
		if (get_bool(h, o, "strip_left", true, &n.left) ||
		    get_bool(h, o, "strip_right", true, &n.right))
			return h->err->code;
		return add_norm(h, n);
	}
	return unsupported(h, "normalizer", ty);
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizers                                                           */
/* ------------------------------------------------------------------------ */

static strata_status add_pre(hf *h, text_pre p)
{
	strata_tokenizer *t = h->t;
	void *v = t->pres;
	size_t cap = t->n_pres;
	strata_status st = strata_grow(&v, &cap, t->n_pres + 1, sizeof p,
				       "pre-tokenizers", h->err);
	if (st) {
		pcre2_code_free(p.re);
		return st;
	}
	t->pres = v;
	t->pres[t->n_pres++] = p;
	return STRATA_OK;
}

static strata_status split_regex(hf *h, const char *pat,
				 text_split_behavior bh, bool invert)
{
	text_pre p = {.kind = TEXT_PRE_SPLIT, .behavior = bh, .invert = invert};
	strata_status st = strata__text_regex(pat, strlen(pat), false, h->what,
					      &p.re, h->err);
	return st ? st : add_pre(h, p);
}

static int get_behavior(hf *h, const json_t *o, text_split_behavior dflt,
			text_split_behavior *out)
{
	const char *s = json_string_value(json_object_get(o, "behavior"));
	*out = dflt;
	if (!s)
		return 0;
#define TEXT_SPLIT_MATCH(name, text)                                           \
	if (!strcmp(s, text)) {                                                \
		*out = TEXT_SPLIT_##name;                                      \
		return 0;                                                      \
	}
	TEXT_SPLIT_MAP(TEXT_SPLIT_MATCH)
#undef TEXT_SPLIT_MATCH
	unsupported(h, "split behavior", s);
	return -1;
}

static int get_prepend(hf *h, const json_t *o, text_prepend *out)
{
	const char *s = json_string_value(json_object_get(o, "prepend_scheme"));
	bool legacy;
	if (get_bool(h, o, "add_prefix_space", true, &legacy))
		return -1;
	*out = legacy ? TEXT_PREPEND_ALWAYS : TEXT_PREPEND_NEVER;
	if (!s)
		return 0;
	if (!strcmp(s, "always"))
		*out = TEXT_PREPEND_ALWAYS;
	else if (!strcmp(s, "first"))
		*out = TEXT_PREPEND_FIRST;
	else if (!strcmp(s, "never"))
		*out = TEXT_PREPEND_NEVER;
	else {
		unsupported(h, "Metaspace prepend_scheme", s);
		return -1;
	}
	return 0;
}

static int get_replacement(hf *h, const json_t *o, char *dst, size_t *len)
{
	const char *s;
	size_t n;
	if (get_str(h, o, "replacement", &s, &n))
		return -1;
	if (!n || n > 4 || strata__utf8_valid_len((const unsigned char *)s,
						  n) != n) {
		bad(h, "Metaspace replacement must be one character", NULL);
		return -1;
	}
	memcpy(dst, s, n);
	*len = n;
	return 0;
}

static strata_status parse_metaspace(hf *h, const json_t *o)
{
	text_pre p = {.kind = TEXT_PRE_METASPACE};
	if (get_replacement(h, o, p.repl, &p.repl_len) ||
	    get_prepend(h, o, &p.prepend) ||
	    get_bool(h, o, "split", true, &p.split))
		return h->err->code;
	return add_pre(h, p);
}

static strata_status parse_pre(hf *h, const json_t *o, int depth)
{
	if (!o || json_is_null(o))
		return STRATA_OK;
	const char *ty = type_of(o);
	text_split_behavior bh;
	if (!strcmp(ty, "Sequence") && depth < 8) {
		json_t *list = json_object_get(o, "pretokenizers");
		if (!json_is_array(list))
			return bad(h, "pre-tokenizer Sequence needs a list", NULL);
		for (size_t i = 0; i < json_array_size(list); i++) {
			strata_status st = parse_pre(h, json_array_get(list, i),
						     depth + 1);
			if (st)
				return st;
		}
		return STRATA_OK;
	}
	if (!strcmp(ty, "ByteLevel") && h->t->byte_level)
		return unsupported(h, "pre-tokenizer after ByteLevel", ty);
	if (!strcmp(ty, "ByteLevel")) {
		text_pre p = {.kind = TEXT_PRE_BYTELEVEL};
		bool use_regex;
		if (get_bool(h, o, "add_prefix_space", true, &p.add_prefix_space) ||
		    get_bool(h, o, "use_regex", true, &use_regex))
			return h->err->code;
		h->t->byte_level = true;
		if (use_regex) {
			strata_status st = strata__text_regex(
				strata__gpt2_pattern, strlen(strata__gpt2_pattern),
				false, h->what, &p.re, h->err);
			if (st)
				return st;
		}
		return add_pre(h, p);
	}
	if (!strcmp(ty, "Split")) {
		text_pre p = {.kind = TEXT_PRE_SPLIT};
		if (get_behavior(h, o, TEXT_SPLIT_ISOLATED, &p.behavior) ||
		    get_bool(h, o, "invert", false, &p.invert))
			return h->err->code;
		strata_status st = get_pattern(h, o, &p.re, NULL, NULL);
		return st ? st : add_pre(h, p);
	}
	/* Metaspace or a second ByteLevel on byte-level characters: no
	 * tokenizer in use does it, so refuse rather than guess. */
	if (!strcmp(ty, "Metaspace") && h->t->byte_level)
		return unsupported(h, "pre-tokenizer after ByteLevel", ty);
	if (!strcmp(ty, "Metaspace"))
		return parse_metaspace(h, o);
	if (!strcmp(ty, "Digits")) {
		bool each;
		if (get_bool(h, o, "individual_digits", false, &each))
			return h->err->code;
		return split_regex(h, each ? "\\p{N}" : "\\p{N}+",
				   TEXT_SPLIT_ISOLATED, false);
	}
	if (!strcmp(ty, "Punctuation")) {
		if (get_behavior(h, o, TEXT_SPLIT_ISOLATED, &bh))
			return h->err->code;
		/* HF: Unicode punctuation or ASCII punctuation, per char. */
		return split_regex(h, "[\\p{P}!-/:-@\\[-`{-~]", bh, false);
	}
	/* These two are Rust code in HF, not onig regexes: \s there is
	 * White_Space and \w is Alphabetic, marks, decimal digits,
	 * connector punctuation and joiners (Rust regex's Unicode \w);
	 * PCRE2's own \s and \w differ (U+180E, combining marks). */
	if (!strcmp(ty, "WhitespaceSplit"))
		return split_regex(h, "\\p{White_Space}+", TEXT_SPLIT_REMOVED,
				   false);
	if (!strcmp(ty, "Whitespace"))
		return split_regex(h, "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
				   "\\p{Join_Control}]+|[^\\p{Alphabetic}"
				   "\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"
				   "\\p{White_Space}]+", TEXT_SPLIT_REMOVED, true);
	return unsupported(h, "pre-tokenizer", ty);
}

/* ------------------------------------------------------------------------ */
/* Decoders                                                                 */
/* ------------------------------------------------------------------------ */

static strata_status add_dec(hf *h, text_dec d)
{
	strata_tokenizer *t = h->t;
	void *v = t->decs;
	size_t cap = t->n_decs;
	strata_status st = strata_grow(&v, &cap, t->n_decs + 1, sizeof d,
				       "decoders", h->err);
	if (st) {
		strata_free(d.a);
		strata_free(d.b);
		return st;
	}
	t->decs = v;
	t->decs[t->n_decs++] = d;
	return STRATA_OK;
}

static strata_status dup2(hf *h, const char *s, size_t n, char **out)
{
	*out = strata__text_memdup(s, n);
	return *out ? STRATA_OK
		    : strata_fail(h->err, STRATA_E_NOMEM, "free some memory",
				  "no memory for a decoder");
}

static strata_status parse_dec(hf *h, const json_t *o, int depth)
{
	if (!o || json_is_null(o))
		return STRATA_OK;
	const char *ty = type_of(o);
	text_dec d = {0};
	const char *s;
	size_t n;
	h->t->has_decoder = true;
	if (!strcmp(ty, "Sequence") && depth < 8) {
		json_t *list = json_object_get(o, "decoders");
		if (!json_is_array(list))
			return bad(h, "decoder Sequence needs a list", NULL);
		for (size_t i = 0; i < json_array_size(list); i++) {
			strata_status st = parse_dec(h, json_array_get(list, i),
						     depth + 1);
			if (st)
				return st;
		}
		return STRATA_OK;
	}
	if (!strcmp(ty, "ByteLevel"))
		return add_dec(h, (text_dec){.kind = TEXT_DEC_BYTELEVEL});
	if (!strcmp(ty, "ByteFallback"))
		return add_dec(h, (text_dec){.kind = TEXT_DEC_BYTEFALLBACK});
	if (!strcmp(ty, "Fuse"))
		return add_dec(h, (text_dec){.kind = TEXT_DEC_FUSE});
	if (!strcmp(ty, "Replace")) {
		json_t *pat = json_object_get(json_object_get(o, "pattern"),
					      "String");
		if (!json_is_string(pat))
			return unsupported(h, "decoder Replace pattern",
					   "Regex");
		if (get_str(h, o, "content", &s, &n))
			return h->err->code;
		d.kind = TEXT_DEC_REPLACE;
		d.a_len = json_string_length(pat);
		d.b_len = n;
		strata_status st = dup2(h, json_string_value(pat), d.a_len, &d.a);
		if (!st)
			st = dup2(h, s, n, &d.b);
		if (st) {
			strata_free(d.a);
			return st;
		}
		return add_dec(h, d);
	}
	if (!strcmp(ty, "Strip")) {
		json_int_t a = json_integer_value(json_object_get(o, "start"));
		json_int_t b = json_integer_value(json_object_get(o, "stop"));
		if (get_str(h, o, "content", &s, &n))
			return h->err->code;
		if (a < 0 || b < 0 || a > 1000 || b > 1000 || !n)
			return bad(h, "decoder Strip needs content and small "
				   "start/stop", NULL);
		d.kind = TEXT_DEC_STRIP;
		d.start = (uint32_t)a;
		d.stop = (uint32_t)b;
		d.a_len = n;
		strata_status st = dup2(h, s, n, &d.a);
		return st ? st : add_dec(h, d);
	}
	if (!strcmp(ty, "Metaspace")) {
		char r[8];
		d.kind = TEXT_DEC_METASPACE;
		if (get_replacement(h, o, r, &d.a_len) ||
		    get_prepend(h, o, &d.prepend))
			return h->err->code;
		strata_status st = dup2(h, r, d.a_len, &d.a);
		return st ? st : add_dec(h, d);
	}
	return unsupported(h, "decoder", ty);
}

/* ------------------------------------------------------------------------ */
/* Post-processor                                                           */
/* ------------------------------------------------------------------------ */

static strata_status append_ids(hf *h, int32_t **v, size_t *n,
				const json_t *ids)
{
	for (size_t i = 0; i < json_array_size(ids); i++) {
		json_int_t id = json_integer_value(json_array_get(ids, i));
		if (!json_is_integer(json_array_get(ids, i)) || id < 0 ||
		    id >= (json_int_t)h->t->n_ids)
			return bad(h, "post-processor names an id outside the "
				   "vocabulary", NULL);
		void *p = *v;
		size_t cap = *n;
		strata_status st = strata_grow(&p, &cap, *n + 1, sizeof **v,
					       "post-processor ids", h->err);
		if (st)
			return st;
		*v = p;
		(*v)[(*n)++] = (int32_t)id;
	}
	return STRATA_OK;
}

static strata_status parse_template(hf *h, const json_t *o)
{
	json_t *single = json_object_get(o, "single");
	json_t *specials = json_object_get(o, "special_tokens");
	if (!json_is_array(single))
		return bad(h, "TemplateProcessing needs a 'single' list", NULL);
	bool seen_seq = false;
	for (size_t i = 0; i < json_array_size(single); i++) {
		json_t *it = json_array_get(single, i);
		json_t *sp = json_object_get(it, "SpecialToken");
		if (json_object_get(it, "Sequence")) {
			seen_seq = true;
			continue;
		}
		const char *name = json_string_value(json_object_get(sp, "id"));
		json_t *ids = json_object_get(json_object_get(specials,
							      name ? name : ""),
					      "ids");
		if (!name || !json_is_array(ids))
			return bad(h, "TemplateProcessing item without a known "
				   "special token", NULL);
		strata_status st =
			seen_seq ? append_ids(h, &h->t->suffix_ids,
					      &h->t->n_suffix, ids)
				 : append_ids(h, &h->t->prefix_ids,
					      &h->t->n_prefix, ids);
		if (st)
			return st;
	}
	return STRATA_OK;
}

static strata_status parse_post(hf *h, const json_t *o, int depth)
{
	if (!o || json_is_null(o))
		return STRATA_OK;
	const char *ty = type_of(o);
	if (!strcmp(ty, "ByteLevel"))
		return STRATA_OK; /* offsets only */
	if (!strcmp(ty, "TemplateProcessing"))
		return parse_template(h, o);
	if ((!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing"))) {
		json_t *cls = json_array_get(json_object_get(o, "cls"), 1);
		json_t *sep = json_array_get(json_object_get(o, "sep"), 1);
		json_t *a = json_pack("[O]", cls), *b = json_pack("[O]", sep);
		strata_status st = a && b ? append_ids(h, &h->t->prefix_ids,
						       &h->t->n_prefix, a)
					  : strata_fail(h->err, STRATA_E_NOMEM,
							"free some memory",
							"no memory");
		if (!st)
			st = append_ids(h, &h->t->suffix_ids, &h->t->n_suffix, b);
		json_decref(a);
		json_decref(b);
		return st;
	}
	if (!strcmp(ty, "Sequence") && depth < 8) {
		json_t *list = json_object_get(o, "processors");
		for (size_t i = 0; i < json_array_size(list); i++) {
			strata_status st = parse_post(h, json_array_get(list, i),
						      depth + 1);
			if (st)
				return st;
		}
		return STRATA_OK;
	}
	return unsupported(h, "post-processor", ty);
}

/* ------------------------------------------------------------------------ */
/* Model and added tokens                                                   */
/* ------------------------------------------------------------------------ */

static strata_status check_model(hf *h, const json_t *m)
{
	const char *ty = type_of(m);
	if (!json_is_object(m))
		return bad(h, "no 'model' object", NULL);
	if (*ty && strcmp(ty, "BPE"))
		return unsupported(h, "model type", ty);
	if (!json_is_object(json_object_get(m, "vocab")) ||
	    !json_is_array(json_object_get(m, "merges")))
		return *ty ? bad(h, "BPE model needs 'vocab' and 'merges'", NULL)
			   : unsupported(h, "model type", "(untyped, not BPE)");
	json_t *d = json_object_get(m, "dropout");
	if (d && !json_is_null(d) && json_number_value(d) != 0.0)
		return unsupported(h, "BPE option", "dropout");
	const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	for (int i = 0; i < 2; i++) {
		const char *s = json_string_value(json_object_get(m, keys[i]));
		if (s && *s)
			return unsupported(h, "BPE option", keys[i]);
	}
	return STRATA_OK;
}

/* Largest id named by the vocabulary or the added tokens, plus one. */
static strata_status count_ids(hf *h, const json_t *vocab, const json_t *added,
			       uint32_t *n)
{
	json_int_t max = -1;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)vocab, k, v) {
		json_int_t id = json_integer_value(v);
		if (!json_is_integer(v) || id < 0 || id >= STRATA_TEXT_MAX_VOCAB)
			return bad(h, "vocabulary id out of range for ", k);
		max = id > max ? id : max;
	}
	for (size_t i = 0; i < json_array_size(added); i++) {
		json_t *id = json_object_get(json_array_get(added, i), "id");
		json_int_t x = json_integer_value(id);
		if (!json_is_integer(id) || x < 0 || x >= STRATA_TEXT_MAX_VOCAB)
			return bad(h, "added token id out of range", NULL);
		max = x > max ? x : max;
	}
	if (max < 0)
		return bad(h, "empty vocabulary", NULL);
	*n = (uint32_t)max + 1;
	return STRATA_OK;
}

static strata_status load_merges(hf *h, const json_t *merges)
{
	strata_status st = strata__text_pmap_init(&h->t->merges,
						  json_array_size(merges),
						  h->err);
	for (size_t i = 0; !st && i < json_array_size(merges); i++) {
		json_t *m = json_array_get(merges, i);
		const char *l, *r;
		size_t ln, rn;
		if (json_is_string(m)) {
			l = json_string_value(m);
			const char *sp = memchr(l, ' ', json_string_length(m));
			if (!sp || memchr(sp + 1, ' ', json_string_length(m) -
							       (size_t)(sp + 1 - l)))
				return bad(h, "a merge must be two pieces "
					   "separated by one space", NULL);
			ln = (size_t)(sp - l);
			r = sp + 1;
			rn = json_string_length(m) - ln - 1;
		} else if (json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) &&
			   json_is_string(json_array_get(m, 1))) {
			l = json_string_value(json_array_get(m, 0));
			ln = json_string_length(json_array_get(m, 0));
			r = json_string_value(json_array_get(m, 1));
			rn = json_string_length(json_array_get(m, 1));
		} else {
			return bad(h, "a merge must be \"a b\" or [\"a\", \"b\"]",
				   NULL);
		}
		st = strata__tokenizer_add_merge(h->t, l, ln, r, rn, (int32_t)i,
						 h->what, h->err);
	}
	return st;
}

static strata_status load_added(hf *h, const json_t *added)
{
	for (size_t i = 0; i < json_array_size(added); i++) {
		json_t *o = json_array_get(added, i);
		text_added a = {.id = (int32_t)json_integer_value(
					json_object_get(o, "id"))};
		const char *s;
		if (get_str(h, o, "content", &s, &a.len) ||
		    get_bool(h, o, "special", false, &a.special) ||
		    get_bool(h, o, "normalized", !a.special, &a.normalized) ||
		    get_bool(h, o, "lstrip", false, &a.lstrip) ||
		    get_bool(h, o, "rstrip", false, &a.rstrip) ||
		    get_bool(h, o, "single_word", false, &a.single_word))
			return h->err->code;
		a.content = (char *)s;
		strata_status st = strata__tokenizer_add_added(h->t, &a, h->err);
		if (st)
			return st;
	}
	return STRATA_OK;
}

static strata_status set_pieces(hf *h, const json_t *vocab,
				const json_t *added)
{
	const char *k;
	json_t *v;
	strata_status st = STRATA_OK;
	json_object_foreach((json_t *)vocab, k, v) {
		st = strata__tokenizer_set_piece(h->t,
						 (int32_t)json_integer_value(v),
						 k, strlen(k), true, h->err);
		if (st)
			return st;
	}
	for (size_t i = 0; !st && i < json_array_size(added); i++) {
		json_t *o = json_array_get(added, i);
		json_t *c = json_object_get(o, "content");
		if (!json_is_string(c) || !json_string_length(c))
			return bad(h, "added token without content", NULL);
		st = strata__tokenizer_set_piece(
			h->t, (int32_t)json_integer_value(json_object_get(o, "id")),
			json_string_value(c), json_string_length(c), false,
			h->err);
	}
	return st;
}

/* tokenizer.json does not name EOS (tokenizer_config.json does, and
 * strata_tokenizer_load reads it when present); without it, the first
 * special added token with a conventional end-of-text name is taken. */
static void guess_eos(strata_tokenizer *t)
{
	static const char *const names[] = {
		"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>",
		"<|im_end|>", "<|eot_id|>",
	};
	for (size_t i = 0; t->specials.eos < 0 && i < sizeof names /
							   sizeof *names; i++) {
		int32_t id = strata__text_smap_get(&t->piece_map, names[i],
						   strlen(names[i]));
		if (id >= 0 && (t->attr[id] & TEXT_ATTR_SPECIAL))
			t->specials.eos = id;
	}
}

static strata_status build(hf *h, const json_t *root)
{
	strata_tokenizer *t = h->t;
	const json_t *m = json_object_get(root, "model");
	const json_t *added = json_object_get(root, "added_tokens");
	strata_status st = check_model(h, m);
	if (st)
		return st;
	if (added && !json_is_null(added) && !json_is_array(added))
		return bad(h, "'added_tokens' must be a list", NULL);
	const json_t *vocab = json_object_get(m, "vocab");
	uint32_t n = 0;
	if ((st = count_ids(h, vocab, added, &n)) ||
	    (st = strata__tokenizer_alloc_ids(t, n, h->err)) ||
	    (st = parse_pre(h, json_object_get(root, "pre_tokenizer"), 0)) ||
	    (st = parse_norm(h, json_object_get(root, "normalizer"), 0)) ||
	    (st = set_pieces(h, vocab, added)) ||
	    (st = strata__tokenizer_finish_vocab(t, h->err)) ||
	    (st = load_merges(h, json_object_get(m, "merges"))))
		return st;
	if (get_bool(h, m, "byte_fallback", false, &t->byte_fallback) ||
	    get_bool(h, m, "fuse_unk", false, &t->fuse_unk) ||
	    get_bool(h, m, "ignore_merges", false, &t->ignore_merges))
		return h->err->code;
	const char *unk = json_string_value(json_object_get(m, "unk_token"));
	if (unk) {
		t->unk_model = strata__text_smap_get(&t->piece_map, unk,
						     strlen(unk));
		if (t->unk_model < 0)
			return bad(h, "unk_token is not in the vocabulary: ",
				   unk);
		t->specials.unk = t->unk_model;
	}
	t->model = TEXT_MODEL_BPE;
	if ((st = load_added(h, added)) ||
	    (st = strata__tokenizer_finish_added(t, h->err)) ||
	    (st = parse_post(h, json_object_get(root, "post_processor"), 0)) ||
	    (st = parse_dec(h, json_object_get(root, "decoder"), 0)))
		return st;
	if (t->n_prefix) {
		t->specials.bos = t->prefix_ids[0];
		t->specials.add_bos = true;
	}
	if (t->n_suffix) {
		t->specials.eos = t->suffix_ids[t->n_suffix - 1];
		t->specials.add_eos = true;
	}
	guess_eos(t);
	return STRATA_OK;
}

strata_status strata_tokenizer_from_json(const char *json, size_t len,
					 const char *what,
					 strata_tokenizer **out,
					 strata_error *err)
{
	if (!json || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass the JSON text and an output",
				   "tokenizer: missing argument");
	what = what ? what : "tokenizer.json";
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root || !json_is_object(root)) {
		json_decref(root);
		return strata_fail(err, STRATA_E_TEXT_TOKENIZER,
				   "check or re-download the tokenizer file",
				   "%s: not a JSON object (line %d column %d: %s)",
				   what, je.line, je.column,
				   root ? "top level is not an object" : je.text);
	}
	strata_tokenizer *t = strata__tokenizer_new(err);
	hf h = {t, what, err};
	strata_status st = t ? build(&h, root) : STRATA_E_NOMEM;
	json_decref(root);
	if (st) {
		strata_tokenizer_destroy(t);
		return st;
	}
	*out = t;
	return STRATA_OK;
}
