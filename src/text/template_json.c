/* template_json.c - Python's json.dumps of chat-template values, as
 * transformers' tojson filter calls it: ensure_ascii=False (only '"', '\\'
 * and control characters escaped), indent as spaces or a string, the item
 * and key separators, sort_keys, floats as repr (layer: text). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text/template_internal.h"

/* ------------------------------------------------------------------------ */
/* json.dumps                                                               */
/* ------------------------------------------------------------------------ */

static void json_str(tbuf *b, const char *p, size_t n)
{
	tbuf_putc(b, '"');
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)p[i];
		const char *esc = NULL;
		char u[8];
		switch (ch) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		case '\b': esc = "\\b"; break;
		case '\f': esc = "\\f"; break;
		default:
			if (ch < 0x20) {
				snprintf(u, sizeof u, "\\u%04x", ch);
				esc = u;
			}
		}
		if (!esc)
			continue;
		tbuf_put(b, p + run, i - run);
		tbuf_puts(b, esc);
		run = i + 1;
	}
	tbuf_put(b, p + run, n - run);
	tbuf_putc(b, '"');
}

typedef struct json_opts {
	int indent;
	const char *indent_str;
	const char *item_sep, *key_sep;
	bool sort_keys;
	const char **bad;
} json_opts;

static void json_newline(tbuf *b, const json_opts *o, int level)
{
	tbuf_putc(b, '\n');
	for (int i = 0; i < level; i++) {
		if (o->indent_str)
			tbuf_puts(b, o->indent_str);
		else
			for (int k = 0; k < o->indent; k++)
				tbuf_putc(b, ' ');
	}
}

static int str_cmp(const tv *a, const tv *b)
{
	size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
	int r = memcmp(a->s.p, b->s.p, n);
	return r ? r : (a->s.n > b->s.n) - (a->s.n < b->s.n);
}

static int json_value(tbuf *b, const tv *v, const json_opts *o, int level);

static int json_dict(tbuf *b, const tdict *d, const json_opts *o, int level)
{
	if (!d->n) {
		tbuf_puts(b, "{}");
		return 0;
	}
	size_t *order = tpl_alloc(b->a, d->n * sizeof *order);
	if (!order) {
		b->failed = true;
		return 0;
	}
	for (size_t i = 0; i < d->n; i++) {
		order[i] = i;
		if (d->keys[i].type != TV_STR && o->sort_keys) {
			*o->bad = "dict with keys of mixed type";
			return -1;
		}
	}
	for (size_t i = 1; o->sort_keys && i < d->n; i++) /* stable insert */
		for (size_t j = i; j > 0 && str_cmp(&d->keys[order[j - 1]],
						    &d->keys[order[j]]) > 0; j--) {
			size_t t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	tbuf_putc(b, '{');
	for (size_t i = 0; i < d->n; i++) {
		const tv *k = &d->keys[order[i]];
		if (i)
			tbuf_puts(b, o->item_sep);
		if (o->indent >= 0)
			json_newline(b, o, level + 1);
		if (k->type == TV_STR) {
			json_str(b, k->s.p, k->s.n);
		} else if (k->type == TV_NONE || k->type == TV_BOOL ||
			   k->type == TV_INT || k->type == TV_FLOAT) {
			tbuf_putc(b, '"');
			if (k->type == TV_NONE)
				tbuf_puts(b, "null");
			else if (k->type == TV_BOOL)
				tbuf_puts(b, k->b ? "true" : "false");
			else
				tv_str_write(b, k);
			tbuf_putc(b, '"');
		} else {
			*o->bad = tv_type_name(k);
			return -1;
		}
		tbuf_puts(b, o->key_sep);
		if (json_value(b, &d->vals[order[i]], o, level + 1))
			return -1;
	}
	if (o->indent >= 0)
		json_newline(b, o, level);
	tbuf_putc(b, '}');
	return 0;
}

static int json_value(tbuf *b, const tv *v, const json_opts *o, int level)
{
	if (level > 200) {
		*o->bad = "value nested deeper than 200 levels";
		return -1;
	}
	switch (v->type) {
	case TV_NONE:
		tbuf_puts(b, "null");
		return 0;
	case TV_BOOL:
		tbuf_puts(b, v->b ? "true" : "false");
		return 0;
	case TV_INT:
		tv_str_write(b, v);
		return 0;
	case TV_FLOAT:
		if (isnan(v->f))
			tbuf_puts(b, "NaN");
		else if (isinf(v->f))
			tbuf_puts(b, v->f < 0 ? "-Infinity" : "Infinity");
		else
			tv_float_write(b, v->f);
		return 0;
	case TV_STR:
		json_str(b, v->s.p, v->s.n);
		return 0;
	case TV_LIST:
		if (!v->l->n) {
			tbuf_puts(b, "[]");
			return 0;
		}
		tbuf_putc(b, '[');
		for (size_t i = 0; i < v->l->n; i++) {
			if (i)
				tbuf_puts(b, o->item_sep);
			if (o->indent >= 0)
				json_newline(b, o, level + 1);
			if (json_value(b, &v->l->items[i], o, level + 1))
				return -1;
		}
		if (o->indent >= 0)
			json_newline(b, o, level);
		tbuf_putc(b, ']');
		return 0;
	case TV_DICT:
		return json_dict(b, v->d, o, level);
	default:
		*o->bad = tv_type_name(v);
		return -1;
	}
}

int tv_json_write(tbuf *b, const tv *v, int indent, const char *indent_str,
		  const char *item_sep, const char *key_sep, bool sort_keys,
		  const char **bad)
{
	json_opts o = {indent, indent_str, item_sep, key_sep, sort_keys, bad};
	return json_value(b, v, &o, 0);
}

