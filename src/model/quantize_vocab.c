/* quantize_vocab.c - a Hugging Face tokenizer.json (and tokenizer_config
 * .json) as GGUF tokenizer.ggml.* metadata, the way llama.cpp's converter
 * names it: "llama" for SentencePiece-style BPE with byte fallback,
 * "gpt2" for byte-level BPE (layer: model).
 *
 * Trust: both files are hostile JSON; ids are checked against the vocab
 * size and every token must have exactly one id.
 *
 * SentencePiece-style scores: the token the r-th distinct merge makes
 * scores -r (so the GGUF "llama" tokenizer, which merges the highest score
 * first, merges in the tokenizer.json's rank order; for a tokenizer made
 * from SentencePiece that is -(id - first ordinary id), SentencePiece's own
 * scores); any other ordinary token scores
 * -(its id - the first ordinary id), SentencePiece's own convention;
 * control, unknown and byte tokens score 0. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "model/quantize_internal.h"

#define MAX_JSON_BYTES (512ull << 20)
#define MAX_TOKENS (1u << 24)

/* llama.cpp's token types. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

/* The split regexes strata's GGUF reader knows by tokenizer.ggml.pre. */
static const struct {
	const char *re, *pre;
} known_pre[] = {
	{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
	 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	 "llama-bpe"},
	{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
	 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	 "qwen2"},
	{"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	 "gpt-2"},
};

typedef struct vocab {
	strata_gguf_writer *w;
	strata_error *err;
	const char *path;
	json_t *tok, *cfg; /* tokenizer.json, tokenizer_config.json or NULL */
	size_t n;
	const char **text; /* [n] token strings (owned by the JSON) */
	char **pads;	   /* [n] "[PADi]" for ids nothing names, owned */
	int32_t *type;	   /* [n] */
	float *score;	   /* [n] */
	bool spm;
} vocab;

static strata_status bad(vocab *v, const char *what)
{
	return strata_fail(v->err, STRATA_E_TEXT_TOKENIZER,
			   "re-download tokenizer.json",
			   "'%s': %s", v->path, what);
}

static json_t *load_json(const char *path, strata_error *err)
{
	char *text = NULL;
	size_t len = 0;
	if (strata_file_read_all(path, MAX_JSON_BYTES, &text, &len, err))
		return NULL;
	json_error_t je;
	json_t *j = json_loadb(text, len, 0, &je);
	strata_free(text);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		strata_fail(err, STRATA_E_TEXT_TOKENIZER, "re-download it",
			    "'%s' is not a JSON object (line %d: %s)", path,
			    je.line, je.text);
		return NULL;
	}
	return j;
}

/* Puts id -> text, refusing ids outside the vocab and a second name for
 * an id that has a different one. */
static strata_status name_id(vocab *v, json_int_t id, const char *text)
{
	if (id < 0 || (uint64_t)id >= v->n)
		return bad(v, "a token id is outside the vocabulary");
	if (v->text[id] && strcmp(v->text[id], text))
		return bad(v, "two tokens share one id");
	v->text[id] = text;
	return STRATA_OK;
}

/* The ids, texts and types of model.vocab and added_tokens. */
static strata_status read_tokens(vocab *v, json_t *model)
{
	json_t *voc = json_object_get(model, "vocab");
	json_t *added = json_object_get(v->tok, "added_tokens");
	const char *key;
	json_t *val;
	strata_status s = STRATA_OK;
	json_object_foreach(voc, key, val) {
		if (!json_is_integer(val))
			return bad(v, "a vocab id is not an integer");
		if ((s = name_id(v, json_integer_value(val), key)))
			return s;
		size_t kl = strlen(key);
		v->type[json_integer_value(val)] =
			v->spm && kl == 6 && !strncmp(key, "<0x", 3) &&
					key[5] == '>'
				? TT_BYTE
				: TT_NORMAL;
	}
	size_t i;
	json_array_foreach(added, i, val) {
		json_t *id = json_object_get(val, "id");
		json_t *content = json_object_get(val, "content");
		if (!json_is_integer(id) || !json_is_string(content))
			return bad(v, "an added token lacks id or content");
		if ((s = name_id(v, json_integer_value(id),
				 json_string_value(content))))
			return s;
		v->type[json_integer_value(id)] =
			json_is_true(json_object_get(val, "special")) ? TT_CONTROL
								      : TT_USER;
	}
	const char *unk = json_string_value(json_object_get(model, "unk_token"));
	for (size_t k = 0; k < v->n; k++) {
		if (v->text[k] && unk && !strcmp(v->text[k], unk))
			v->type[k] = TT_UNKNOWN;
		if (v->text[k])
			continue;
		/* an id nothing names (a padded vocab): llama.cpp's filler */
		char pad[32];
		snprintf(pad, sizeof pad, "[PAD%zu]", k);
		size_t pl = strlen(pad) + 1;
		if (!(v->pads[k] = strata_alloc_or_error(pl, "tokens", v->err)))
			return STRATA_E_NOMEM;
		memcpy(v->pads[k], pad, pl);
		v->text[k] = v->pads[k];
		v->type[k] = TT_UNUSED;
	}
	return STRATA_OK;
}

/* One merge as "a b" (tokenizers writes either form); false otherwise. */
static bool merge_text(json_t *m, char *buf, size_t cap)
{
	if (json_is_string(m))
		return snprintf(buf, cap, "%s", json_string_value(m)) < (int)cap;
	if (json_is_array(m) && json_array_size(m) == 2 &&
	    json_is_string(json_array_get(m, 0)) &&
	    json_is_string(json_array_get(m, 1)))
		return snprintf(buf, cap, "%s %s",
				json_string_value(json_array_get(m, 0)),
				json_string_value(json_array_get(m, 1))) <
		       (int)cap;
	return false;
}

/* SentencePiece-style scores (the file comment says how). */
static strata_status spm_scores(vocab *v, json_t *model)
{
	json_t *voc = json_object_get(model, "vocab");
	json_t *merges = json_object_get(model, "merges");
	size_t first = v->n;
	for (size_t k = 0; k < v->n && first == v->n; k++)
		if (v->type[k] == TT_NORMAL)
			first = k;
	for (size_t k = 0; k < v->n; k++)
		v->score[k] = v->type[k] == TT_NORMAL ? -(float)(k - first) : 0.0f;
	bool *seen = strata_calloc_or_error(v->n, sizeof *seen, "scores", v->err);
	if (!seen)
		return STRATA_E_NOMEM;
	size_t r, rank = 0;
	json_t *m;
	char buf[1024];
	json_array_foreach(merges, r, m) {
		if (!merge_text(m, buf, sizeof buf))
			continue;
		char *sp = strchr(buf, ' ');
		if (!sp)
			continue;
		memmove(sp, sp + 1, strlen(sp + 1) + 1);
		json_t *id = json_object_get(voc, buf);
		if (!json_is_integer(id) || json_integer_value(id) < 0 ||
		    (uint64_t)json_integer_value(id) >= v->n)
			continue;
		size_t k = (size_t)json_integer_value(id);
		if (seen[k] || v->type[k] != TT_NORMAL)
			continue;
		v->score[k] = -(float)rank++;
		seen[k] = true;
	}
	strata_free(seen);
	return STRATA_OK;
}

/* A byte-level tokenizer's tokenizer.ggml.pre, from its split regex. */
static strata_status gpt2_pre(vocab *v, const char **pre)
{
	json_t *p = json_object_get(v->tok, "pre_tokenizer");
	json_t *list = json_object_get(p, "pretokenizers");
	size_t n = json_is_array(list) ? json_array_size(list) : 1;
	bool byte_level_regex = false;
	*pre = NULL;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_is_array(list) ? json_array_get(list, i) : p;
		const char *type = json_string_value(json_object_get(e, "type"));
		const char *re = json_string_value(
			json_object_get(json_object_get(e, "pattern"), "Regex"));
		if (type && !strcmp(type, "ByteLevel") &&
		    json_is_true(json_object_get(e, "use_regex")))
			byte_level_regex = true;
		for (size_t k = 0; re && k < sizeof known_pre / sizeof *known_pre;
		     k++)
			if (!strcmp(re, known_pre[k].re))
				*pre = known_pre[k].pre;
		if (re && !*pre)
			break;
	}
	if (!*pre && byte_level_regex)
		*pre = "gpt-2";
	if (!*pre)
		return strata_fail(v->err, STRATA_E_TEXT_UNSUPPORTED,
				   "convert the model with llama.cpp's convert_hf_to_gguf.py",
				   "'%s': its pre-tokenizer split is none strata's "
				   "GGUF reader knows (llama-bpe, qwen2, gpt-2)",
				   v->path);
	return STRATA_OK;
}

static strata_status put_id(vocab *v, const char *key, int64_t id)
{
	if (id < 0 || (uint64_t)id >= v->n)
		return STRATA_OK;
	return strata_gguf_writer_set_uint(v->w, key, STRATA_GGUF_U32,
					   (uint64_t)id, v->err);
}

/* The id of the token a tokenizer_config.json entry names (a string or
 * {"content": ...}), or -1. */
static int64_t config_token(vocab *v, const char *key)
{
	json_t *e = json_object_get(v->cfg, key);
	const char *s = json_is_string(e) ? json_string_value(e)
					  : json_string_value(json_object_get(e, "content"));
	for (size_t k = 0; s && k < v->n; k++)
		if (!strcmp(v->text[k], s))
			return (int64_t)k;
	return -1;
}

static strata_status put_flag(vocab *v, const char *cfg_key, const char *key)
{
	json_t *e = json_object_get(v->cfg, cfg_key);
	if (!json_is_boolean(e))
		return STRATA_OK;
	return strata_gguf_writer_set_uint(v->w, key, STRATA_GGUF_BOOL,
					   json_is_true(e), v->err);
}

static strata_status put_merges(vocab *v, json_t *model)
{
	json_t *merges = json_object_get(model, "merges");
	size_t n = json_array_size(merges), r;
	char **text = strata_calloc_or_error(n ? n : 1, sizeof *text, "merges",
					     v->err);
	if (!text)
		return STRATA_E_NOMEM;
	strata_status s = STRATA_OK;
	json_t *m;
	char buf[1024];
	json_array_foreach(merges, r, m) {
		if (!merge_text(m, buf, sizeof buf)) {
			s = bad(v, "a merge is neither \"a b\" nor [a, b]");
			break;
		}
		size_t l = strlen(buf) + 1;
		if (!(text[r] = strata_alloc_or_error(l, "merges", v->err))) {
			s = STRATA_E_NOMEM;
			break;
		}
		memcpy(text[r], buf, l);
	}
	if (!s)
		s = strata_gguf_writer_set_array(v->w, "tokenizer.ggml.merges",
						 STRATA_GGUF_STRING, text, n,
						 v->err);
	for (size_t k = 0; k < n; k++)
		strata_free(text[k]);
	strata_free(text);
	return s;
}

static strata_status write_pairs(vocab *v, json_t *model,
				 const strata_model_desc *d)
{
	strata_gguf_writer *w = v->w;
	const char *pre = NULL;
	strata_status s = v->spm ? STRATA_OK : gpt2_pre(v, &pre);
	const char *mname = v->spm ? "llama" : "gpt2";
	if (!s)
		s = strata_gguf_writer_set_string(w, "tokenizer.ggml.model",
						  mname, strlen(mname), v->err);
	if (!s && pre)
		s = strata_gguf_writer_set_string(w, "tokenizer.ggml.pre", pre,
						  strlen(pre), v->err);
	if (!s)
		s = strata_gguf_writer_set_array(w, "tokenizer.ggml.tokens",
						 STRATA_GGUF_STRING, v->text,
						 v->n, v->err);
	if (!s && v->spm)
		s = strata_gguf_writer_set_array(w, "tokenizer.ggml.scores",
						 STRATA_GGUF_F32, v->score, v->n,
						 v->err);
	if (!s)
		s = strata_gguf_writer_set_array(w, "tokenizer.ggml.token_type",
						 STRATA_GGUF_I32, v->type, v->n,
						 v->err);
	if (!s && !v->spm)
		s = put_merges(v, model);
	int64_t bos = d->bos_token_id >= 0 ? d->bos_token_id
					   : config_token(v, "bos_token");
	int64_t eos = d->eos_token_id >= 0 ? d->eos_token_id
					   : config_token(v, "eos_token");
	int64_t unk = -1;
	for (size_t k = 0; k < v->n && unk < 0; k++)
		if (v->type[k] == TT_UNKNOWN)
			unk = (int64_t)k;
	if (!s)
		s = put_id(v, "tokenizer.ggml.bos_token_id", bos);
	if (!s)
		s = put_id(v, "tokenizer.ggml.eos_token_id", eos);
	if (!s)
		s = put_id(v, "tokenizer.ggml.unknown_token_id", unk);
	if (!s)
		s = put_id(v, "tokenizer.ggml.padding_token_id",
			   config_token(v, "pad_token"));
	if (!s)
		s = put_flag(v, "add_bos_token", "tokenizer.ggml.add_bos_token");
	if (!s)
		s = put_flag(v, "add_eos_token", "tokenizer.ggml.add_eos_token");
	const char *tmpl = json_string_value(json_object_get(v->cfg, "chat_template"));
	if (!s && tmpl)
		s = strata_gguf_writer_set_string(w, "tokenizer.chat_template",
						  tmpl, strlen(tmpl), v->err);
	return s;
}

/* SentencePiece-style when the BPE falls back to bytes (or decodes them),
 * byte-level otherwise. */
static bool is_spm(json_t *tok, json_t *model)
{
	if (json_is_true(json_object_get(model, "byte_fallback")))
		return true;
	json_t *dec = json_object_get(tok, "decoder");
	json_t *list = json_object_get(dec, "decoders");
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e) {
		const char *t = json_string_value(json_object_get(e, "type"));
		if (t && !strcmp(t, "ByteFallback"))
			return true;
	}
	return false;
}

static strata_status convert(vocab *v, const strata_model_desc *d)
{
	json_t *model = json_object_get(v->tok, "model");
	const char *type = json_string_value(json_object_get(model, "type"));
	if (!type || strcmp(type, "BPE"))
		return strata_fail(v->err, STRATA_E_TEXT_UNSUPPORTED,
				   "convert the model with llama.cpp's convert_hf_to_gguf.py",
				   "'%s': tokenizer model '%s' is not BPE, the one "
				   "strata converts", v->path, type ? type : "?");
	if (!json_is_object(json_object_get(model, "vocab")))
		return bad(v, "model.vocab is not an object");
	/* ids run to the largest one named (added tokens may repeat vocab
	 * entries) or the model's vocab size when that is larger */
	json_int_t top = -1;
	const char *key;
	json_t *val;
	size_t i;
	json_object_foreach(json_object_get(model, "vocab"), key, val)
		if (json_is_integer(val) && json_integer_value(val) > top)
			top = json_integer_value(val);
	json_array_foreach(json_object_get(v->tok, "added_tokens"), i, val) {
		json_t *id = json_object_get(val, "id");
		if (json_is_integer(id) && json_integer_value(id) > top)
			top = json_integer_value(id);
	}
	if (top < 0 || top >= (json_int_t)MAX_TOKENS)
		return bad(v, "the vocabulary is empty or too large");
	size_t n = (size_t)top + 1;
	if (d->vocab > n)
		n = (size_t)d->vocab;
	if (n > MAX_TOKENS)
		return bad(v, "the vocabulary is empty or too large");
	v->n = n;
	v->spm = is_spm(v->tok, model);
	v->text = strata_calloc_or_error(n, sizeof *v->text, "tokens", v->err);
	v->pads = v->text ? strata_calloc_or_error(n, sizeof *v->pads, "tokens",
						   v->err)
			  : NULL;
	v->type = v->pads ? strata_calloc_or_error(n, sizeof *v->type, "tokens",
						   v->err)
			  : NULL;
	v->score = v->type ? strata_calloc_or_error(n, sizeof *v->score,
						    "tokens", v->err)
			   : NULL;
	if (!v->score)
		return STRATA_E_NOMEM;
	strata_status s = read_tokens(v, model);
	if (!s && v->spm)
		s = spm_scores(v, model);
	return s ? s : write_pairs(v, model, d);
}

strata_status strata__quant_hf_vocab(strata_gguf_writer *w,
				     const char *model_dir,
				     const strata_model_desc *d,
				     strata_error *err)
{
	char path[4096], cfg[4096];
	struct stat st;
	if (stat(model_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
		/* a single .safetensors file: its folder */
		const char *slash = strrchr(model_dir, '/');
		int dl = slash ? (int)(slash - model_dir) : 1;
		snprintf(path, sizeof path, "%.*s/tokenizer.json", dl,
			 slash ? model_dir : ".");
		snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json", dl,
			 slash ? model_dir : ".");
	} else {
		snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
		snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", model_dir);
	}
	if (stat(path, &st) != 0) /* no tokenizer: token ids only */
		return strata_gguf_writer_set_string(w, "tokenizer.ggml.model",
						     "none", 4, err);
	vocab v = {w, err, path, NULL, NULL, 0, NULL, NULL, NULL, NULL, false};
	if (!(v.tok = load_json(path, err)))
		return err ? err->code : STRATA_E_TEXT_TOKENIZER;
	strata_status s = STRATA_OK;
	if (stat(cfg, &st) == 0 && !(v.cfg = load_json(cfg, err)))
		s = err ? err->code : STRATA_E_TEXT_TOKENIZER;
	if (!s)
		s = convert(&v, d);
	for (size_t k = 0; v.pads && k < v.n; k++)
		strata_free(v.pads[k]);
	strata_free(v.pads);
	strata_free(v.text);
	strata_free(v.type);
	strata_free(v.score);
	json_decref(v.cfg);
	json_decref(v.tok);
	return s;
}
