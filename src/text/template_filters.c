/* template_filters.c - the filters and tests chat templates use, with
 * Jinja2 3.1's semantics, and tojson as transformers overrides it
 * (json.dumps with ensure_ascii=False, indent, separators, sort_keys; no
 * HTML escaping) (layer: text). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text/template_internal.h"

#define FARGS                                                                 \
	tctx *c, uint32_t pos, const tv *args, size_t n,                     \
		const char *const *kw, const tv *kwv, size_t nkw, tv *out

static const tv *farg(const tv *args, size_t n, size_t i, const char *const *kw,
		      const tv *kwv, size_t nkw, const char *name)
{
	if (i < n)
		return &args[i];
	return name ? tpl_kwarg(kw, kwv, nkw, name) : NULL;
}
#define ARG(i, name) farg(args, n, i, kw, kwv, nkw, name)
#define UNUSED_KW (void)kw, (void)kwv, (void)nkw

static int need_str(tctx *c, uint32_t pos, const tv *v, tv *out)
{
	if (v->type == TV_UNDEF && v->u && false)
		return tpl_fail_undefined(c, pos, v);
	return tpl_to_str(c, pos, v, out);
}

/* ------------------------------------------------------------------------ */
/* Strings                                                                  */
/* ------------------------------------------------------------------------ */

static int f_trim(FARGS)
{
	tv s;
	const tv *chars = ARG(1, "chars");
	if (chars && chars->type == TV_NONE)
		chars = NULL;
	if (need_str(c, pos, &args[0], &s) ||
	    (chars && chars->type != TV_STR &&
	     tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
		      "trim's chars must be a string")))
		return -1;
	return tpl_strip(&s, chars, 3, out);
}

static int f_case(tctx *c, uint32_t pos, const tv *v, int mode, tv *out)
{
	tv s;
	return need_str(c, pos, v, &s) || tpl_case_map(c, pos, &s, mode, out);
}

static int f_upper(FARGS)
{
	UNUSED_KW;
	(void)n;
	return f_case(c, pos, &args[0], TPL_CASE_UPPER, out);
}

static int f_lower(FARGS)
{
	UNUSED_KW;
	(void)n;
	return f_case(c, pos, &args[0], TPL_CASE_LOWER, out);
}

static int f_capitalize(FARGS)
{
	UNUSED_KW;
	(void)n;
	return f_case(c, pos, &args[0], TPL_CASE_CAPITALIZE, out);
}

/* Jinja2's title: words split at runs of [-\s({\[<], each word's first
 * character upper-cased and the rest lower-cased. */
static int f_title(FARGS)
{
	UNUSED_KW;
	(void)n;
	tv s;
	if (need_str(c, pos, &args[0], &s))
		return -1;
	tbuf b;
	tbuf_init(&b, c->a, 0);
	bool start = true;
	for (size_t i = 0; i < s.s.n;) {
		size_t k;
		uint32_t cp = tpl_utf8_decode(s.s.p + i, s.s.n - i, &k);
		bool delim = cp == '-' || cp == '(' || cp == '{' || cp == '[' ||
			     cp == '<' || tpl_py_isspace(cp);
		tv one = tv_strref(s.s.p + i, k), m;
		if (delim) {
			tbuf_put(&b, s.s.p + i, k);
		} else {
			if (tpl_case_map(c, pos, &one, start ? TPL_CASE_UPPER
							     : TPL_CASE_LOWER, &m))
				return -1;
			tbuf_put(&b, m.s.p, m.s.n);
		}
		start = delim;
		i += k;
	}
	if (b.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return 0;
}

static int f_replace(FARGS)
{
	tv s, old, new_;
	const tv *o = ARG(1, "old"), *nw = ARG(2, "new"), *cnt = ARG(3, "count");
	if (!o || !nw)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"replace needs the old and the new text");
	if (need_str(c, pos, &args[0], &s) || tpl_to_str(c, pos, o, &old) ||
	    tpl_to_str(c, pos, nw, &new_))
		return -1;
	return tpl_replace(c, pos, &s, &old, &new_,
			   cnt && cnt->type == TV_INT ? cnt->i : -1, out);
}

static int f_string(FARGS)
{
	UNUSED_KW;
	(void)n;
	return tpl_to_str(c, pos, &args[0], out);
}

/* indent(width=4, first=False, blank=False) */
static int f_indent(FARGS)
{
	tv s, pad;
	const tv *w = ARG(1, "width"), *first = ARG(2, "first"),
		 *blank = ARG(3, "blank");
	if (need_str(c, pos, &args[0], &s))
		return -1;
	if (w && w->type == TV_STR) {
		pad = *w;
	} else {
		int64_t width = w && w->type == TV_INT ? w->i : 4;
		if (width < 0 || width > 1024)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"indent width must be 0 to 1024");
		static const char spaces[1025] = {[0 ... 1023] = ' '};
		pad = tv_strref(spaces, (size_t)width);
	}
	tbuf b;
	tbuf_init(&b, c->a, 0);
	bool at_start = true, is_first = true;
	for (size_t i = 0; i <= s.s.n; i++) {
		if (at_start && i < s.s.n) {
			bool empty = s.s.p[i] == '\n';
			if ((!is_first || (first && tv_truthy(first))) &&
			    (!empty || (blank && tv_truthy(blank))))
				tbuf_put(&b, pad.s.p, pad.s.n);
			at_start = false;
		}
		if (i == s.s.n)
			break;
		tbuf_putc(&b, s.s.p[i]);
		if (s.s.p[i] == '\n') {
			at_start = true;
			is_first = false;
		}
	}
	if (b.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return tpl_step(c, pos, s.s.n / 64);
}

static int f_wordcount(FARGS)
{
	UNUSED_KW;
	(void)n;
	tv s, words;
	if (need_str(c, pos, &args[0], &s) ||
	    tpl_split(c, pos, &s, NULL, -1, false, &words))
		return -1;
	*out = tv_int((int64_t)words.l->n);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Sequences                                                                */
/* ------------------------------------------------------------------------ */

static int f_length(FARGS)
{
	UNUSED_KW;
	(void)n;
	const tv *v = &args[0];
	switch (v->type) {
	case TV_UNDEF: *out = tv_int(0); return 0;
	case TV_STR: *out = tv_int((int64_t)tpl_utf8_count(v->s.p, v->s.n)); return 0;
	case TV_LIST: *out = tv_int((int64_t)v->l->n); return 0;
	case TV_DICT:
	case TV_NS: *out = tv_int((int64_t)v->d->n); return 0;
	default:
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"object of type '%s' has no len()",
				tv_type_name(v));
	}
}

static int as_list(tctx *c, uint32_t pos, const tv *v, tv *out)
{
	tv *items;
	size_t n;
	if (v->type == TV_LIST) {
		*out = *v;
		out->flags = 0;
		return 0;
	}
	if (tpl_iterate(c, pos, v, &items, &n) || tv_list_new(c->a, n, out))
		return c->failed ? -1 : tpl_fail_alloc(c, pos);
	if (n)
		memcpy(out->l->items, items, n * sizeof *items);
	out->l->n = n;
	return 0;
}

static int f_list(FARGS)
{
	UNUSED_KW;
	(void)n;
	return as_list(c, pos, &args[0], out);
}

static int f_first_last(tctx *c, uint32_t pos, const tv *v, bool last, tv *out)
{
	tv l;
	if (as_list(c, pos, v, &l))
		return -1;
	if (!l.l->n) {
		*out = tv_undef();
		return 0;
	}
	*out = l.l->items[last ? l.l->n - 1 : 0];
	return 0;
}

static int f_first(FARGS)
{
	UNUSED_KW;
	(void)n;
	return f_first_last(c, pos, &args[0], false, out);
}

static int f_last(FARGS)
{
	UNUSED_KW;
	(void)n;
	return f_first_last(c, pos, &args[0], true, out);
}

static int f_reverse(FARGS)
{
	UNUSED_KW;
	(void)n;
	tv l, none = tv_none(), step = tv_int(-1);
	if (args[0].type == TV_STR)
		return tpl_slice(c, pos, &args[0], &none, &none, &step, out);
	if (as_list(c, pos, &args[0], &l))
		return -1;
	return tpl_slice(c, pos, &l, &none, &none, &step, out);
}

static int f_join(FARGS)
{
	tv l, sep = tv_strref("", 0);
	const tv *d = ARG(1, "d"), *attr = ARG(2, "attribute");
	if (as_list(c, pos, &args[0], &l) || (d && tpl_to_str(c, pos, d, &sep)))
		return -1;
	tbuf b;
	tbuf_init(&b, c->a, 0);
	for (size_t i = 0; i < l.l->n; i++) {
		tv item = l.l->items[i], s;
		if (attr && attr->type == TV_STR &&
		    tpl_getattr(c, pos, &item, attr->s.p, attr->s.n, &item))
			return -1;
		if (tpl_to_str(c, pos, &item, &s))
			return -1;
		if (i)
			tbuf_put(&b, sep.s.p, sep.s.n);
		tbuf_put(&b, s.s.p, s.s.n);
	}
	if (b.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return tpl_step(c, pos, l.l->n);
}

static int f_items(FARGS)
{
	UNUSED_KW;
	(void)n;
	const tv *v = &args[0];
	if (v->type == TV_UNDEF)
		return tv_list_new(c->a, 0, out) ? tpl_fail_alloc(c, pos) : 0;
	if (v->type != TV_DICT)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"can only get item pairs from a mapping, not %s",
				tv_type_name(v));
	tv fn;
	return !tpl_method(c, v, "items", 5, &fn) ||
	       tpl_call(c, pos, &fn, NULL, 0, NULL, NULL, 0, out);
}

/* Attribute path "a.b.0" of Jinja2's make_attrgetter. */
static int attr_path(tctx *c, uint32_t pos, const tv *item, const tv *path,
		     tv *out)
{
	*out = *item;
	if (path->type == TV_INT)
		return tpl_getitem(c, pos, item, path, out);
	const char *p = path->s.p, *end = p + path->s.n;
	while (p <= end) {
		const char *dot = memchr(p, '.', (size_t)(end - p));
		size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
		bool digits = len > 0 && len < 19; /* fits int64_t */
		int64_t idx = 0;
		for (size_t i = 0; i < len && digits; i++) {
			digits = p[i] >= '0' && p[i] <= '9';
			idx = idx * 10 + (p[i] - '0');
		}
		if (digits) {
			tv k = tv_int(idx);
			if (tpl_getitem(c, pos, out, &k, out))
				return -1;
		} else if (tpl_getattr(c, pos, out, p, len, out)) {
			return -1;
		}
		if (!dot)
			break;
		p = dot + 1;
	}
	return 0;
}

/* select / reject / selectattr / rejectattr. */
static int select_common(FARGS, bool attr, bool keep)
{
	tv l;
	if (as_list(c, pos, &args[0], &l))
		return -1;
	size_t first = attr ? 2 : 1;
	if (attr && (n < 2 || (args[1].type != TV_STR && args[1].type != TV_INT)))
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"selectattr/rejectattr need an attribute name");
	UNUSED_KW;
	const char *test = n > first && args[first].type == TV_STR
				   ? NULL : "truthy";
	char name[64];
	if (!test) {
		snprintf(name, sizeof name, "%.*s",
			 (int)(args[first].s.n > 60 ? 60 : args[first].s.n),
			 args[first].s.p);
		if (!tpl_test_exists(name))
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"no test named '%s'", name);
		test = name;
	}
	size_t nt = n > first + 1 ? n - first - 1 : 0;
	tv *targs = tpl_alloc(c->a, (nt + 1) * sizeof *targs);
	if (!targs || tv_list_new(c->a, l.l->n, out))
		return tpl_fail_alloc(c, pos);
	for (size_t i = 0; i < nt; i++)
		targs[i + 1] = args[first + 1 + i];
	for (size_t i = 0; i < l.l->n; i++) {
		tv v = l.l->items[i];
		bool r;
		if (attr && attr_path(c, pos, &v, &args[1], &v))
			return -1;
		if (!strcmp(test, "truthy")) {
			r = tv_truthy(&v);
		} else {
			targs[0] = v;
			if (tpl_test(c, pos, test, targs, nt + 1, &r))
				return -1;
		}
		if (r == keep)
			out->l->items[out->l->n++] = l.l->items[i];
	}
	return tpl_step(c, pos, l.l->n);
}

static int f_select(FARGS) { return select_common(c, pos, args, n, kw, kwv, nkw, out, false, true); }
static int f_reject(FARGS) { return select_common(c, pos, args, n, kw, kwv, nkw, out, false, false); }
static int f_selectattr(FARGS) { return select_common(c, pos, args, n, kw, kwv, nkw, out, true, true); }
static int f_rejectattr(FARGS) { return select_common(c, pos, args, n, kw, kwv, nkw, out, true, false); }

/* map(attribute=..., default=...) or map('filter', args...). */
static int f_map(FARGS)
{
	tv l;
	if (as_list(c, pos, &args[0], &l) || tv_list_new(c->a, l.l->n, out))
		return c->failed ? -1 : tpl_fail_alloc(c, pos);
	const tv *attr = tpl_kwarg(kw, kwv, nkw, "attribute");
	const tv *dflt = tpl_kwarg(kw, kwv, nkw, "default");
	if (!attr && (n < 2 || args[1].type != TV_STR))
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"map needs a filter name or attribute=");
	char name[64] = "";
	if (!attr) {
		snprintf(name, sizeof name, "%.*s",
			 (int)(args[1].s.n > 60 ? 60 : args[1].s.n), args[1].s.p);
		if (!tpl_filter_exists(name))
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"no filter named '%s'", name);
	}
	size_t nf = n > 2 ? n - 2 : 0;
	tv *fargs = tpl_alloc(c->a, (nf + 1) * sizeof *fargs);
	if (!fargs)
		return tpl_fail_alloc(c, pos);
	for (size_t i = 0; i < nf; i++)
		fargs[i + 1] = args[2 + i];
	for (size_t i = 0; i < l.l->n; i++) {
		tv v = l.l->items[i];
		if (attr) {
			if (attr_path(c, pos, &v, attr, &v))
				return -1;
			if (v.type == TV_UNDEF && dflt)
				v = *dflt;
		} else {
			fargs[0] = v;
			if (tpl_filter(c, pos, name, fargs, nf + 1, NULL, NULL,
				       0, &v))
				return -1;
		}
		out->l->items[out->l->n++] = v;
	}
	return tpl_step(c, pos, l.l->n);
}

static int f_unique(FARGS)
{
	UNUSED_KW;
	(void)n;
	tv l;
	if (as_list(c, pos, &args[0], &l) || tv_list_new(c->a, l.l->n, out))
		return c->failed ? -1 : tpl_fail_alloc(c, pos);
	for (size_t i = 0; i < l.l->n; i++) {
		bool seen = false;
		for (size_t j = 0; j < out->l->n && !seen; j++)
			seen = tv_eq(&out->l->items[j], &l.l->items[i]);
		if (!seen)
			out->l->items[out->l->n++] = l.l->items[i];
	}
	return tpl_step(c, pos, l.l->n * (out->l->n + 1));
}

/* ------------------------------------------------------------------------ */
/* Table                                                                    */
/* ------------------------------------------------------------------------ */

static const struct tpl_filter_entry text_filters[] = {
	{"trim", f_trim},	    {"upper", f_upper},
	{"lower", f_lower},	    {"capitalize", f_capitalize},
	{"title", f_title},	    {"replace", f_replace},
	{"string", f_string},	    {"indent", f_indent},
	{"wordcount", f_wordcount}, {"length", f_length},
	{"count", f_length},	    {"list", f_list},
	{"first", f_first},	    {"last", f_last},
	{"reverse", f_reverse},	    {"join", f_join},
	{"items", f_items},	    {"select", f_select},
	{"reject", f_reject},	    {"selectattr", f_selectattr},
	{"rejectattr", f_rejectattr}, {"map", f_map},
	{"unique", f_unique},	    {NULL, NULL},
};

const struct tpl_filter_entry *tpl_text_filters = text_filters;
