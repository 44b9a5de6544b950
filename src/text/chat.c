/* chat.c - chat prompts: an OpenAI `messages` array checked and rendered
 * through the model's own chat template with its bos / eos texts, and
 * encoded the way transformers' apply_chat_template encodes (layer: text).
 *
 * Trust: the messages come from requests (untrusted): their shape is
 * checked here, message by message, before the template (itself
 * sandboxed, template.c) sees them. The template file and the model's
 * files are hostile too; template_load.c and the parser check them.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "text/internal.h"

struct strata_chat_format {
	strata_chat_template *tpl;
	char *bos, *eos; /* NULL: none */
};

static const char *const roles[] = {"system", "user", "assistant", "tool"};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static strata_status bad_message(strata_error *err, size_t i, const char *fix,
				 const char *what)
{
	return strata_fail(err, STRATA_E_INVALID_ARG, fix, "message %zu: %s",
			   i + 1, what);
}

static strata_status check_parts(const json_t *content, size_t i,
				 strata_error *err)
{
	static const char fix[] = "give content as a string or an array of "
				  "{\"type\": \"text\", \"text\": \"...\"} parts";
	size_t k;
	json_t *part;
	json_array_foreach(content, k, part) {
		char what[160];
		json_t *type = json_object_get(part, "type");
		if (!json_is_object(part) || !json_is_string(type)) {
			snprintf(what, sizeof what, "content part %zu is not an "
				 "object with a \"type\"", k + 1);
			return bad_message(err, i, fix, what);
		}
		if (strcmp(json_string_value(type), "text")) {
			char shown[64];
			strata_escape(shown, sizeof shown, json_string_value(type),
				      json_string_length(type));
			snprintf(what, sizeof what, "content part %zu has type "
				 "'%s'; only text parts are supported", k + 1,
				 shown);
			return bad_message(err, i, "send text parts only (this "
					   "model reads no images or audio)",
					   what);
		}
		if (!json_is_string(json_object_get(part, "text"))) {
			snprintf(what, sizeof what, "content part %zu has no "
				 "\"text\" string", k + 1);
			return bad_message(err, i, fix, what);
		}
	}
	return STRATA_OK;
}

static strata_status check_one(const json_t *m, size_t i, strata_error *err)
{
	if (!json_is_object(m))
		return bad_message(err, i, "give each message as an object "
				   "{\"role\": ..., \"content\": ...}",
				   "not a JSON object");
	json_t *role = json_object_get(m, "role");
	const char *r = json_string_value(role);
	bool known = false;
	for (size_t k = 0; r && k < sizeof roles / sizeof *roles; k++)
		known |= !strcmp(r, roles[k]);
	if (!known) {
		char shown[64], what[128];
		if (r)
			strata_escape(shown, sizeof shown, r,
				      json_string_length(role));
		snprintf(what, sizeof what, r ? "role '%s' is not one of "
			 "system, user, assistant, tool" : "%s\"role\" is "
			 "missing or not a string", r ? shown : "");
		return bad_message(err, i, "give each message a role: system, "
				   "user, assistant or tool", what);
	}
	json_t *c = json_object_get(m, "content");
	bool may_omit = !strcmp(r, "tool") ||
			(!strcmp(r, "assistant") &&
			 json_object_get(m, "tool_calls"));
	if (json_is_array(c)) {
		strata_status st = check_parts(c, i, err);
		if (st)
			return st;
	} else if (!json_is_string(c) && !((!c || json_is_null(c)) && may_omit)) {
		return bad_message(err, i, "give the message's content as a "
				   "string or an array of text parts",
				   c ? "\"content\" is not a string or an array"
				     : "\"content\" is missing");
	}
	static const char *const strings[] = {"name", "tool_call_id"};
	for (size_t k = 0; k < 2; k++) {
		json_t *v = json_object_get(m, strings[k]);
		if (v && !json_is_string(v)) {
			char what[64];
			snprintf(what, sizeof what, "\"%s\" is not a string",
				 strings[k]);
			return bad_message(err, i, "give it as a string", what);
		}
	}
	return STRATA_OK;
}

/* parts -> one string, the texts joined by "\n"; NULL on OOM. */
static json_t *joined(const json_t *parts)
{
	size_t total = 0, k;
	json_t *part;
	json_array_foreach(parts, k, part)
		total += json_string_length(json_object_get(part, "text")) + 1;
	char *buf = strata_alloc(total + 1);
	if (!buf)
		return NULL;
	size_t n = 0;
	json_array_foreach(parts, k, part) {
		json_t *t = json_object_get(part, "text");
		if (k)
			buf[n++] = '\n';
		memcpy(buf + n, json_string_value(t), json_string_length(t));
		n += json_string_length(t);
	}
	json_t *s = json_stringn_nocheck(buf, n);
	strata_free(buf);
	return s;
}

/* The messages as the template's JSON text: contents of parts joined.
 * strata_alloc'd (the caller frees), NULL on OOM. */
static char *messages_text(const json_t *messages, size_t *len)
{
	json_t *copy = json_array();
	size_t i;
	json_t *m;
	bool ok = copy != NULL;
	json_array_foreach(messages, i, m) {
		json_t *c = ok ? json_object_get(m, "content") : NULL;
		json_t *o = ok ? json_copy((json_t *)m) : NULL;
		if (o && json_is_array(c)) {
			json_t *s = joined(c);
			if (!s || json_object_set_new(o, "content", s))
				ok = false;
		}
		if (!o || json_array_append_new(copy, o))
			ok = false;
	}
	char *text = NULL;
	if (ok) {
		size_t n = json_dumpb(copy, NULL, 0, JSON_COMPACT);
		text = n ? strata_alloc(n + 1) : NULL;
		if (text) {
			*len = json_dumpb(copy, text, n, JSON_COMPACT);
			text[*len] = '\0';
		}
	}
	json_decref(copy);
	return text;
}

static char *dup_or_null(const char *s, bool *oom)
{
	if (!s)
		return NULL;
	char *d = strata__text_memdup(s, strlen(s));
	*oom |= d == NULL;
	return d;
}

/* The piece of special id `id` of tok as a NUL-terminated copy, or NULL. */
static char *special_piece(const strata_tokenizer *tok, int32_t id, bool *oom)
{
	size_t n = 0;
	const char *p = tok && id >= 0 ? strata_tokenizer_piece(tok, id, &n)
				       : NULL;
	if (!p)
		return NULL;
	char *d = strata__text_memdup(p, n);
	*oom |= d == NULL;
	return d;
}

/* ------------------------------------------------------------------------ */
/* Public functions                                                         */
/* ------------------------------------------------------------------------ */

strata_status strata_chat_format_create(const char *source, size_t len,
					const char *bos, const char *eos,
					strata_chat_format **out,
					strata_error *err)
{
	if (!out)
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass where the "
				   "format goes", "chat format created without "
				   "its arguments");
	strata_chat_format *f = strata_calloc_or_error(1, sizeof *f,
						       "a chat format", err);
	if (!f)
		return STRATA_E_NOMEM;
	strata_status st = strata_chat_template_create(source, len, &f->tpl,
						       err);
	bool oom = false;
	if (st == STRATA_OK) {
		f->bos = dup_or_null(bos, &oom);
		f->eos = dup_or_null(eos, &oom);
		if (oom)
			st = strata_fail(err, STRATA_E_NOMEM, "free memory",
					 "no memory for the chat tokens");
	}
	if (st) {
		strata_chat_format_destroy(f);
		return st;
	}
	*out = f;
	return STRATA_OK;
}

void strata_chat_format_destroy(strata_chat_format *f)
{
	if (!f)
		return;
	strata_chat_template_destroy(f->tpl);
	strata_free(f->bos);
	strata_free(f->eos);
	strata_free(f);
}

const char *strata_chat_format_bos(const strata_chat_format *f)
{
	return f ? f->bos : NULL;
}

const char *strata_chat_format_eos(const strata_chat_format *f)
{
	return f ? f->eos : NULL;
}

strata_status strata_chat_format_load(const char *model_path,
				      const char *template_file,
				      const strata_tokenizer *tok,
				      strata_chat_format **out,
				      strata_error *err)
{
	char *src = NULL, *bos = NULL, *eos = NULL;
	size_t len = 0;
	strata_status st;
	if (template_file) {
		st = strata_file_read_all(template_file,
					  STRATA_TEMPLATE_MAX_SOURCE_BYTES, &src,
					  &len, err);
		if (st)
			strata_error_set_fix(err, "give --chat-template a "
					     "readable template file (.jinja) "
					     "of at most 4 MiB");
		if (st == STRATA_OK)
			st = strata__chat_tokens_load(model_path, &bos, &eos,
						      err);
	} else {
		st = strata_chat_template_load(model_path, &src, &len, &bos,
					       &eos, err);
	}
	bool oom = false;
	strata_tokenizer_specials sp = {.bos = -1, .eos = -1};
	if (tok)
		strata_tokenizer_get_specials(tok, &sp);
	if (st == STRATA_OK && !bos)
		bos = special_piece(tok, sp.bos, &oom);
	if (st == STRATA_OK && !eos)
		eos = special_piece(tok, sp.eos, &oom);
	if (st == STRATA_OK && oom)
		st = strata_fail(err, STRATA_E_NOMEM, "free memory",
				 "no memory for the chat tokens");
	if (st == STRATA_OK)
		st = strata_chat_format_create(src, len, bos, eos, out, err);
	if (st == STRATA_E_TEXT_TEMPLATE && template_file)
		strata_error_prefix(err, "%s", template_file);
	strata_free(src);
	strata_free(bos);
	strata_free(eos);
	return st;
}

strata_status strata_chat_messages_check(const json_t *messages,
					 strata_error *err)
{
	if (!json_is_array(messages))
		return strata_fail(err, STRATA_E_INVALID_ARG, "give messages as "
				   "an array of {\"role\", \"content\"} objects",
				   "messages is not a JSON array");
	size_t n = json_array_size(messages);
	if (n == 0 || n > STRATA_CHAT_MAX_MESSAGES)
		return strata_fail(err, STRATA_E_INVALID_ARG, "give at least "
				   "one message, at most 65536", "messages "
				   "holds %zu messages", n);
	for (size_t i = 0; i < n; i++) {
		strata_status st = check_one(json_array_get(messages, i), i,
					     err);
		if (st)
			return st;
	}
	return STRATA_OK;
}

strata_status strata_chat_format_render(const strata_chat_format *f,
					const json_t *messages,
					bool add_generation_prompt,
					char **out, size_t *out_len,
					strata_error *err)
{
	if (!f || !out || !out_len)
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass a chat format "
				   "and the messages", "chat render called "
				   "without its arguments");
	strata_status st = strata_chat_messages_check(messages, err);
	if (st)
		return st;
	size_t len = 0;
	char *text = messages_text(messages, &len);
	if (!text)
		return strata_fail(err, STRATA_E_NOMEM, "free memory",
				   "no memory for the messages' JSON");
	strata_chat_template_options o;
	strata_chat_template_options_init(&o);
	o.add_generation_prompt = add_generation_prompt;
	o.bos_token = f->bos;
	o.eos_token = f->eos;
	st = strata_chat_template_render(f->tpl, text, len, &o, out, out_len,
					 err);
	strata_free(text);
	return st;
}

strata_status strata_chat_format_encode(const strata_chat_format *f,
					const strata_tokenizer *tok,
					const json_t *messages,
					bool add_generation_prompt,
					int32_t **ids, size_t *count,
					strata_error *err)
{
	if (!tok || !ids || !count)
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass a tokenizer",
				   "chat encode called without its arguments");
	char *text = NULL;
	size_t len = 0, n = 0;
	int32_t *got = NULL;
	strata_status st = strata_chat_format_render(f, messages,
						     add_generation_prompt,
						     &text, &len, err);
	if (st == STRATA_OK)
		st = strata_tokenizer_encode(tok, text, len, false, &got, &n,
					     err);
	strata_free(text);
	if (st == STRATA_OK && n == 0) {
		strata_free(got);
		return strata_fail(err, STRATA_E_TEXT_TEMPLATE_RENDER, "check "
				   "the chat template: it wrote no text for "
				   "these messages", "the rendered chat prompt "
				   "encodes to no tokens");
	}
	if (st == STRATA_OK) {
		*ids = got;
		*count = n;
	}
	return st;
}
