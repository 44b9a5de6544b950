/* template_load.c - strata_chat_template_load: a model's own chat template
 * and special tokens, from tokenizer_config.json or a GGUF file's
 * tokenizer.chat_template (layer: text).
 *
 * Trust: both files are hostile; only their strings are copied out, and
 * the template itself is checked when it is created. */
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "strata/checkpoint.h"
#include "text/internal.h"

static const char no_template_fix[] =
	"this model ships no chat template: pass one with --chat-template "
	"FILE (or render with strata template FILE.jinja)";

static char *dup_n(const char *s, size_t n, strata_error *err)
{
	char *d = strata_alloc_or_error(n + 1, "chat template text", err);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* A token as tokenizer_config.json writes it: "x" or {"content": "x"}. */
static strata_status config_token(json_t *root, const char *key, char **out,
				  strata_error *err)
{
	json_t *v = json_object_get(root, key);
	if (json_is_object(v))
		v = json_object_get(v, "content");
	*out = NULL;
	if (!json_is_string(v))
		return STRATA_OK;
	return (*out = dup_n(json_string_value(v), json_string_length(v), err))
		       ? STRATA_OK : STRATA_E_NOMEM;
}

/* With want_template false a missing file or template is no error: only
 * the tokens are wanted (*source stays NULL). */
static strata_status from_config(const char *dir, bool want_template,
				 char **source, size_t *len, char **bos,
				 char **eos, strata_error *err)
{
	size_t dn = strlen(dir);
	char *path = strata_alloc_or_error(dn + 24, "a path", err);
	if (!path)
		return STRATA_E_NOMEM;
	memcpy(path, dir, dn);
	memcpy(path + dn, "/tokenizer_config.json", 23);
	char *text = NULL;
	size_t n = 0;
	strata_status st = strata_file_read_all(path, STRATA_TEXT_MAX_JSON_BYTES,
						&text, &n, err);
	if (st) {
		strata_free(path);
		if (!want_template && st == STRATA_E_NOT_FOUND)
			return STRATA_OK;
		if (st == STRATA_E_NOT_FOUND || st == STRATA_E_IO)
			strata_error_set_fix(err, "%s", no_template_fix);
		return st;
	}
	json_error_t je;
	json_t *root = json_loadb(text, n, 0, &je);
	strata_free(text);
	if (!json_is_object(root)) {
		st = strata_fail(err, STRATA_E_PARSE, "re-download the model's "
				 "tokenizer_config.json", "%s is not a JSON "
				 "object (%s)", path, root ? "other JSON" : je.text);
		json_decref(root);
		strata_free(path);
		return st;
	}
	json_t *t = json_object_get(root, "chat_template");
	if (json_is_array(t)) { /* [{"name": ..., "template": ...}] */
		json_t *pick = NULL, *item;
		size_t i;
		json_array_foreach(t, i, item) {
			json_t *name = json_object_get(item, "name");
			if (json_is_string(name) &&
			    !strcmp(json_string_value(name), "default"))
				pick = json_object_get(item, "template");
		}
		t = pick;
	}
	if (!json_is_string(t) && want_template) {
		st = strata_fail(err, STRATA_E_NOT_FOUND, no_template_fix,
				 "%s has no chat_template (a string, or a "
				 "list with one named \"default\")", path);
	} else if (want_template &&
		   !(*source = dup_n(json_string_value(t),
				     json_string_length(t), err))) {
		st = STRATA_E_NOMEM;
	} else {
		*len = want_template ? json_string_length(t) : 0;
		if ((st = config_token(root, "bos_token", bos, err)) ||
		    (st = config_token(root, "eos_token", eos, err))) {
			strata_free(*source);
			strata_free(*bos);
			*bos = NULL;
		}
	}
	json_decref(root);
	strata_free(path);
	return st;
}

/* The piece of the token whose id the key holds, or NULL. */
static strata_status gguf_token(const strata_gguf *g, const char *key,
				char **out, strata_error *err)
{
	uint64_t id, count;
	strata_gguf_type elem;
	*out = NULL;
	long kv = strata_gguf_find(g, "tokenizer.ggml.tokens");
	if (strata_gguf_find(g, key) < 0 || kv < 0 ||
	    strata_gguf_get_u64(g, key, &id, NULL) ||
	    strata_gguf_get_array(g, "tokenizer.ggml.tokens", &elem, &count,
				  NULL) ||
	    elem != STRATA_GGUF_STRING || id >= count)
		return STRATA_OK;
	const char *s;
	size_t n;
	strata_gguf_array_string(g, kv, id, &s, &n);
	return (*out = dup_n(s, n, err)) ? STRATA_OK : STRATA_E_NOMEM;
}

static strata_status from_gguf(const char *path, bool want_template,
			       char **source, size_t *len, char **bos,
			       char **eos, strata_error *err)
{
	strata_catalog *c = NULL;
	strata_status st = strata_catalog_open(path, &c, err);
	if (st)
		return st;
	const strata_gguf *g = strata_catalog_gguf(c);
	const char *s = NULL;
	size_t n = 0;
	if (!g) {
		st = strata_fail(err, STRATA_E_NOT_FOUND, "give a .gguf file or "
				 "a directory with tokenizer_config.json",
				 "%s is not a GGUF file", path);
	} else if (want_template &&
		   strata_gguf_find(g, "tokenizer.chat_template") < 0) {
		st = strata_fail(err, STRATA_E_NOT_FOUND, no_template_fix,
				 "%s has no tokenizer.chat_template", path);
	} else if (!want_template ||
		   !(st = strata_gguf_get_string(g, "tokenizer.chat_template",
						 &s, &n, err))) {
		if (want_template && !(*source = dup_n(s, n, err))) {
			st = STRATA_E_NOMEM;
		} else {
			*len = want_template ? n : 0;
			if ((st = gguf_token(g, "tokenizer.ggml.bos_token_id", bos,
					     err)) ||
			    (st = gguf_token(g, "tokenizer.ggml.eos_token_id", eos,
					     err))) {
				strata_free(*source);
				strata_free(*bos);
				*bos = NULL;
			}
		}
	}
	strata_catalog_destroy(c);
	return st;
}

/* strata_chat_template_load, and with want_template false the tokens
 * alone (text/internal.h). */
static strata_status load(const char *model_path, bool want_template,
			  char **source, size_t *len, char **bos, char **eos,
			  strata_error *err)
{
	struct stat sb;
	if (!model_path || stat(model_path, &sb) != 0)
		return strata_fail(err, STRATA_E_NOT_FOUND, "give a model "
				   "directory, a .gguf file or a .jinja file",
				   "model '%s' does not exist",
				   model_path ? model_path : "(null)");
	char *s = NULL, *b = NULL, *e = NULL;
	size_t n = 0;
	strata_status st = S_ISDIR(sb.st_mode)
				   ? from_config(model_path, want_template, &s,
						 &n, &b, &e, err)
				   : from_gguf(model_path, want_template, &s, &n,
					       &b, &e, err);
	if (st)
		return st;
	if (source) {
		*source = s;
		*len = n;
	}
	*bos = b;
	*eos = e;
	return STRATA_OK;
}

strata_status strata_chat_template_load(const char *model_path, char **source,
					size_t *len, char **bos, char **eos,
					strata_error *err)
{
	return load(model_path, true, source, len, bos, eos, err);
}

strata_status strata__chat_tokens_load(const char *model_path, char **bos,
				       char **eos, strata_error *err)
{
	return load(model_path, false, NULL, NULL, bos, eos, err);
}
