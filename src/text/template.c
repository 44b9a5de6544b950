/* template.c - the chat-template API: create (UTF-8 check, Jinja2's line
 * break normalization, lexing, parsing), render (the variables
 * transformers passes, the sandbox's limits, the output) and destroy
 * (layer: text). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "text/template_internal.h"

#define DEFAULT_STEPS ((uint64_t)10 * 1000 * 1000)
#define DEFAULT_OUTPUT ((uint64_t)16 << 20)
#define DEFAULT_MEMORY ((uint64_t)256 << 20)

void strata_chat_template_options_init(strata_chat_template_options *o)
{
	memset(o, 0, sizeof *o);
}

static const char syntax_fix[] =
	"the template is not Jinja that strata's interpreter reads "
	"(docs/templates.md lists what is supported): fix it, or give "
	"another with --chat-template";

/* Jinja2's lexer: \r\n, \r and \n all become \n, and one line break at the
 * very end is dropped (keep_trailing_newline=False). */
static size_t normalize(const char *src, size_t len, char *dst)
{
	size_t k = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
			dst[k++] = '\n';
		} else {
			dst[k++] = src[i];
		}
	}
	if (k && dst[k - 1] == '\n')
		k--;
	dst[k] = '\0';
	return k;
}

strata_status strata_chat_template_create(const char *source, size_t len,
					  strata_chat_template **out,
					  strata_error *err)
{
	if (!source && len)
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass the "
				   "template's text", "no template source given");
	if (len > STRATA_TEMPLATE_MAX_SOURCE_BYTES)
		return strata_fail(err, STRATA_E_TEXT_TEMPLATE, syntax_fix,
				   "chat template is %zu bytes, more than the "
				   "%zu this reader takes", len,
				   STRATA_TEMPLATE_MAX_SOURCE_BYTES);
	for (size_t i = 0; i < len;) {
		size_t k = tpl_utf8_valid((const unsigned char *)source + i,
					  len - i);
		if (!k || source[i] == '\0')
			return strata_fail(err, STRATA_E_TEXT_TEMPLATE,
					   syntax_fix, "chat template byte %zu "
					   "is %s", i, k ? "a NUL byte"
					   : "not valid UTF-8");
		i += k;
	}
	strata_chat_template *t = strata_calloc(1, sizeof *t);
	if (!t)
		return strata_fail(err, STRATA_E_NOMEM, "free memory",
				   "no memory for a chat template");
	tpl_arena_init(&t->arena, 0);
	tpl_diag diag = {0};
	ttoken *toks = NULL;
	size_t count = 0;
	if (!(t->src = tpl_alloc(&t->arena, len + 1)))
		goto nomem;
	t->src_len = normalize(source, len, t->src);
	if (tpl_lex(&t->arena, t->src, t->src_len, &toks, &count, &diag) ||
	    tpl_parse(&t->arena, toks, count, &t->root, &diag)) {
		if (!diag.message[0])
			goto nomem;
		uint32_t line, col;
		tpl_line_col(t->src, t->src_len, diag.pos, &line, &col);
		strata_fail(err, STRATA_E_TEXT_TEMPLATE, syntax_fix,
			    "chat template line %u, column %u: %s", line, col,
			    diag.message);
		strata_chat_template_destroy(t);
		return STRATA_E_TEXT_TEMPLATE;
	}
	*out = t;
	return STRATA_OK;
nomem:
	strata_chat_template_destroy(t);
	return strata_fail(err, STRATA_E_NOMEM, "free memory",
			   "no memory to parse a chat template of %zu bytes",
			   len);
}

void strata_chat_template_destroy(strata_chat_template *t)
{
	if (!t)
		return;
	tpl_arena_fini(&t->arena);
	strata_free(t);
}

/* ------------------------------------------------------------------------ */
/* Render                                                                   */
/* ------------------------------------------------------------------------ */

static int parse_json(tctx *c, const char *text, size_t len, const char *what,
		      int want, tv *out)
{
	json_error_t je;
	json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES
				       | JSON_ALLOW_NUL, &je);
	if (!j) {
		strata_fail(c->err, STRATA_E_INVALID_ARG, "give valid JSON",
			    "%s is not valid JSON: %s (line %d, column %d)",
			    what, je.text, je.line, je.column);
		return -1;
	}
	if ((int)json_typeof(j) != want) {
		json_decref(j);
		strata_fail(c->err, STRATA_E_INVALID_ARG, "give a JSON %s",
			    "%s must be a JSON %s",
			    what, want == JSON_ARRAY ? "array" : "object");
		strata_error_set_fix(c->err, "give %s as a JSON %s", what,
				     want == JSON_ARRAY ? "array" : "object");
		return -1;
	}
	int rc = tv_from_json(c->a, j, out);
	json_decref(j);
	if (rc) {
		if (c->a->limit_hit)
			strata_fail(c->err, STRATA_E_TEXT_TEMPLATE_LIMIT,
				    "give a smaller conversation", "%s does "
				    "not fit the template's memory limit", what);
		else
			strata_fail(c->err, STRATA_E_NOMEM, "free memory",
				    "no memory for %s (or it nests deeper "
				    "than 200 levels)", what);
	}
	return rc;
}

static int set_var(tctx *c, const char *name, tv v)
{
	if (tpl_frame_set(c, c->root, name, strlen(name), v)) {
		strata_fail(c->err, STRATA_E_NOMEM, "free memory",
			    "no memory for the template's variables");
		return -1;
	}
	return 0;
}

static int set_token(tctx *c, const char *name, const char *value)
{
	tv v = tv_undef();
	if (value && tv_str_copy(c->a, value, strlen(value), &v)) {
		strata_fail(c->err, STRATA_E_NOMEM, "free memory",
			    "no memory for the template's variables");
		return -1;
	}
	return value ? set_var(c, name, v) : 0;
}

/* The variables transformers passes: messages, tools, documents,
 * add_generation_prompt, the special tokens, then the extra ones. */
static int bind(tctx *c, const char *messages, size_t len,
		const strata_chat_template_options *o)
{
	tv v;
	if (parse_json(c, messages, len, "the messages", JSON_ARRAY, &v) ||
	    set_var(c, "messages", v))
		return -1;
	v = tv_none();
	if (o->tools_json && parse_json(c, o->tools_json, strlen(o->tools_json),
					"the tools", JSON_ARRAY, &v))
		return -1;
	if (set_var(c, "tools", v) || set_var(c, "documents", tv_none()) ||
	    set_var(c, "add_generation_prompt", tv_bool(o->add_generation_prompt)) ||
	    set_token(c, "bos_token", o->bos_token) ||
	    set_token(c, "eos_token", o->eos_token))
		return -1;
	if (!o->extra_json)
		return 0;
	if (parse_json(c, o->extra_json, strlen(o->extra_json),
		       "the extra variables", JSON_OBJECT, &v))
		return -1;
	for (size_t i = 0; i < v.d->n; i++) {
		char *name = tpl_alloc(c->a, v.d->keys[i].s.n + 1);
		if (!name) {
			strata_fail(c->err, STRATA_E_NOMEM, "free memory",
				    "no memory for the template's variables");
			return -1;
		}
		memcpy(name, v.d->keys[i].s.p, v.d->keys[i].s.n);
		name[v.d->keys[i].s.n] = '\0';
		if (tpl_frame_set(c, c->root, name, v.d->keys[i].s.n,
				  v.d->vals[i])) {
			strata_fail(c->err, STRATA_E_NOMEM, "free memory",
				    "no memory for the template's variables");
			return -1;
		}
	}
	return 0;
}

strata_status strata_chat_template_render(const strata_chat_template *t,
					  const char *messages_json, size_t len,
					  const strata_chat_template_options *o,
					  char **out, size_t *out_len,
					  strata_error *err)
{
	strata_chat_template_options defaults;
	if (!o) {
		strata_chat_template_options_init(&defaults);
		o = &defaults;
	}
	if (!t || !out || !out_len || (!messages_json && len))
		return strata_fail(err, STRATA_E_INVALID_ARG, "pass a template "
				   "and the messages", "chat template render "
				   "called without its arguments");
	tpl_arena arena;
	tpl_arena_init(&arena, o->max_memory_bytes ? o->max_memory_bytes
						   : DEFAULT_MEMORY);
	tframe root = {0};
	tbuf buf;
	strata_error local;
	tctx c = {.t = t, .a = &arena, .err = err ? err : &local, .out = &buf,
		  .frame = &root, .root = &root,
		  .max_steps = o->max_steps ? o->max_steps : DEFAULT_STEPS,
		  .max_output_bytes = o->max_output_bytes ? o->max_output_bytes
							  : DEFAULT_OUTPUT};
	c.caller = tv_undef();
	tbuf_init(&buf, &arena, c.max_output_bytes);
	time_t now = o->fixed_time ? (time_t)o->now_unix : time(NULL);
	if (o->fixed_time ? !gmtime_r(&now, &c.now) : !localtime_r(&now, &c.now))
		memset(&c.now, 0, sizeof c.now);
	strata_status st = STRATA_OK;
	if (bind(&c, messages_json ? messages_json : "", len, o) ||
	    tpl_exec_body(&c, t->root->list, t->root->n) || c.failed) {
		st = c.err->code ? c.err->code : STRATA_E_INTERNAL;
		goto done;
	}
	char *text = strata_alloc(buf.n + 1);
	if (!text) {
		st = strata_fail(err, STRATA_E_NOMEM, "free memory", "no "
				 "memory for a rendering of %zu bytes", buf.n);
		goto done;
	}
	if (buf.n)
		memcpy(text, buf.p, buf.n);
	text[buf.n] = '\0';
	*out = text;
	*out_len = buf.n;
done:
	tpl_arena_fini(&arena);
	return st;
}
