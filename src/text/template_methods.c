/* template_methods.c - the methods templates call on values (Python's
 * str, dict and list methods that do not modify anything, as Jinja2's
 * ImmutableSandboxedEnvironment allows) and the globals range, namespace,
 * dict, raise_exception and strftime_now (layer: text). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "text/template_internal.h"

#define ARGS                                                                  \
	tctx *c, tfunc *self, uint32_t pos, const tv *args, size_t n,        \
		const char *const *kw, const tv *kwv, size_t nkw, tv *out

/* Positional argument i, else keyword `name`, else NULL. */
static const tv *arg(const tv *args, size_t n, size_t i, const char *const *kw,
		     const tv *kwv, size_t nkw, const char *name)
{
	if (i < n)
		return &args[i];
	return name ? tpl_kwarg(kw, kwv, nkw, name) : NULL;
}
#define ARG(i, name) arg(args, n, i, kw, kwv, nkw, name)

static int want_str(tctx *c, uint32_t pos, const tv *v, const char *what)
{
	if (v && v->type == TV_STR)
		return 0;
	if (v && v->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, v);
	return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "%s must be a "
			"string, not %s", what, v ? tv_type_name(v) : "nothing");
}

static int str_out(tctx *c, uint32_t pos, tbuf *b, tv *out)
{
	if (b->failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b->p ? b->p : "", b->n);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Case mapping and stripping                                               */
/* ------------------------------------------------------------------------ */

static bool cased(uint32_t cp)
{
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
	return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL ||
	       k == UTF8PROC_CATEGORY_LT;
}

int tpl_case_map(tctx *c, uint32_t pos, const tv *s, int mode, tv *out)
{
	tbuf b;
	tbuf_init(&b, c->a, 0);
	bool prev_cased = false, first = true;
	for (size_t i = 0; i < s->s.n;) {
		size_t k;
		uint32_t cp = tpl_utf8_decode(s->s.p + i, s->s.n - i, &k), m;
		utf8proc_int32_t x = (utf8proc_int32_t)cp;
		switch (mode) {
		case TPL_CASE_UPPER: m = (uint32_t)utf8proc_toupper(x); break;
		case TPL_CASE_LOWER: m = (uint32_t)utf8proc_tolower(x); break;
		case TPL_CASE_CAPITALIZE:
			m = (uint32_t)(first ? utf8proc_totitle(x)
					     : utf8proc_tolower(x));
			break;
		default:
			m = (uint32_t)(prev_cased ? utf8proc_tolower(x)
						  : utf8proc_totitle(x));
			prev_cased = cased(cp);
		}
		char enc[4];
		tbuf_put(&b, enc, tpl_utf8_encode(m, enc));
		first = false;
		i += k;
	}
	return str_out(c, pos, &b, out);
}

static bool in_chars(uint32_t cp, const tv *chars)
{
	if (!chars)
		return tpl_py_isspace(cp);
	for (size_t i = 0; i < chars->s.n;) {
		size_t k;
		if (tpl_utf8_decode(chars->s.p + i, chars->s.n - i, &k) == cp)
			return true;
		i += k;
	}
	return false;
}

/* which: 1 left, 2 right, 3 both; chars NULL strips whitespace. */
int tpl_strip(const tv *s, const tv *chars, int which, tv *out)
{
	size_t a = 0, b = s->s.n;
	while ((which & 1) && a < b) {
		size_t k;
		if (!in_chars(tpl_utf8_decode(s->s.p + a, b - a, &k), chars))
			break;
		a += k;
	}
	while ((which & 2) && b > a) {
		size_t st = b - 1, k;
		while (st > a && ((unsigned char)s->s.p[st] & 0xC0) == 0x80)
			st--;
		if (!in_chars(tpl_utf8_decode(s->s.p + st, b - st, &k), chars))
			break;
		b = st;
	}
	*out = tv_strref(s->s.p + a, b - a);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* str methods                                                              */
/* ------------------------------------------------------------------------ */

static int m_strip(ARGS)
{
	const tv *chars = ARG(0, "chars");
	if (chars && chars->type == TV_NONE)
		chars = NULL;
	if (chars && want_str(c, pos, chars, "strip characters"))
		return -1;
	int which = !strcmp(self->name, "lstrip") ? 1
		    : !strcmp(self->name, "rstrip") ? 2 : 3;
	return tpl_strip(&self->self, chars, which, out);
}

static int m_case(ARGS)
{
	(void)args, (void)n, (void)kw, (void)kwv, (void)nkw;
	int mode = !strcmp(self->name, "upper") ? TPL_CASE_UPPER
		   : !strcmp(self->name, "lower") ? TPL_CASE_LOWER
		   : !strcmp(self->name, "title") ? TPL_CASE_TITLE
						  : TPL_CASE_CAPITALIZE;
	return tpl_case_map(c, pos, &self->self, mode, out);
}

/* Python str.split / rsplit with optional sep and maxsplit. */
int tpl_split(tctx *c, uint32_t pos, const tv *s, const tv *sep,
	      int64_t maxsplit, bool from_right, tv *out)
{
	if (tv_list_new(c->a, 0, out))
		return tpl_fail_alloc(c, pos);
	const char *p = s->s.p;
	size_t len = s->s.n;
	if (sep && sep->s.n == 0)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"split: empty separator");
	tv parts;
	if (tv_list_new(c->a, 0, &parts))
		return tpl_fail_alloc(c, pos);
	if (sep) {
		size_t start = 0;
		int64_t done = 0;
		if (!from_right) {
			const char *hit;
			while ((maxsplit < 0 || done < maxsplit) &&
			       (hit = memmem(p + start, len - start, sep->s.p,
					     sep->s.n))) {
				if (tv_list_push(c->a, &parts,
						 tv_strref(p + start,
							   (size_t)(hit - p) - start)))
					return tpl_fail_alloc(c, pos);
				start = (size_t)(hit - p) + sep->s.n;
				done++;
			}
			if (tv_list_push(c->a, &parts,
					 tv_strref(p + start, len - start)))
				return tpl_fail_alloc(c, pos);
			*out = parts;
			return tpl_step(c, pos, parts.l->n);
		}
		size_t end = len;
		while ((maxsplit < 0 || done < maxsplit) && end >= sep->s.n) {
			size_t i = end - sep->s.n + 1, found = SIZE_MAX;
			while (i-- > 0)
				if (!memcmp(p + i, sep->s.p, sep->s.n)) {
					found = i;
					break;
				}
			if (found == SIZE_MAX)
				break;
			if (tv_list_push(c->a, &parts,
					 tv_strref(p + found + sep->s.n,
						   end - found - sep->s.n)))
				return tpl_fail_alloc(c, pos);
			end = found;
			done++;
		}
		if (tv_list_push(c->a, &parts, tv_strref(p, end)))
			return tpl_fail_alloc(c, pos);
		/* reverse into out */
		for (size_t i = parts.l->n; i > 0; i--)
			if (tv_list_push(c->a, out, parts.l->items[i - 1]))
				return tpl_fail_alloc(c, pos);
		return tpl_step(c, pos, parts.l->n);
	}
	/* whitespace runs; maxsplit counted from the left only */
	size_t i = 0;
	int64_t done = 0;
	for (;;) {
		size_t k;
		while (i < len && tpl_py_isspace(tpl_utf8_decode(p + i, len - i, &k)))
			i += k;
		if (i >= len)
			break;
		if (maxsplit >= 0 && done == maxsplit) {
			tv rest;
			tpl_strip(&(tv){.type = TV_STR, .s = {p + i, len - i}},
				  NULL, 2, &rest);
			if (tv_list_push(c->a, &parts, rest))
				return tpl_fail_alloc(c, pos);
			break;
		}
		size_t start = i;
		while (i < len && !tpl_py_isspace(tpl_utf8_decode(p + i, len - i, &k)))
			i += k;
		if (tv_list_push(c->a, &parts, tv_strref(p + start, i - start)))
			return tpl_fail_alloc(c, pos);
		done++;
	}
	*out = parts;
	return tpl_step(c, pos, parts.l->n);
}

static int m_split(ARGS)
{
	const tv *sep = ARG(0, "sep"), *max = ARG(1, "maxsplit");
	if (sep && sep->type == TV_NONE)
		sep = NULL;
	if (sep && want_str(c, pos, sep, "the separator"))
		return -1;
	int64_t maxsplit = -1;
	if (max && max->type == TV_INT)
		maxsplit = max->i;
	return tpl_split(c, pos, &self->self, sep, maxsplit,
			 !strcmp(self->name, "rsplit"), out);
}

static int m_splitlines(ARGS)
{
	const tv *keep = ARG(0, "keepends");
	bool keepends = keep && tv_truthy(keep);
	const tv *s = &self->self;
	if (tv_list_new(c->a, 0, out))
		return tpl_fail_alloc(c, pos);
	size_t start = 0, i = 0;
	while (i < s->s.n) {
		size_t k;
		uint32_t cp = tpl_utf8_decode(s->s.p + i, s->s.n - i, &k);
		bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C ||
			   (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
			   cp == 0x2028 || cp == 0x2029;
		if (!brk) {
			i += k;
			continue;
		}
		size_t end = i;
		i += k;
		if (cp == '\r' && i < s->s.n && s->s.p[i] == '\n')
			i++;
		if (tv_list_push(c->a, out, tv_strref(s->s.p + start,
						      (keepends ? i : end) - start)))
			return tpl_fail_alloc(c, pos);
		start = i;
	}
	if (start < s->s.n &&
	    tv_list_push(c->a, out, tv_strref(s->s.p + start, s->s.n - start)))
		return tpl_fail_alloc(c, pos);
	return 0;
}

static bool has_affix(const tv *s, const tv *x, bool suffix)
{
	if (x->s.n > s->s.n)
		return false;
	const char *at = suffix ? s->s.p + s->s.n - x->s.n : s->s.p;
	return !memcmp(at, x->s.p, x->s.n);
}

static int m_affix(ARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	bool suffix = !strcmp(self->name, "endswith");
	if (n < 1)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"%s needs an argument", self->name);
	const tv *x = &args[0];
	if (x->type == TV_LIST && (x->flags & TVF_TUPLE)) {
		for (size_t i = 0; i < x->l->n; i++) {
			if (want_str(c, pos, &x->l->items[i], self->name))
				return -1;
			if (has_affix(&self->self, &x->l->items[i], suffix)) {
				*out = tv_bool(true);
				return 0;
			}
		}
		*out = tv_bool(false);
		return 0;
	}
	if (want_str(c, pos, x, "the argument"))
		return -1;
	*out = tv_bool(has_affix(&self->self, x, suffix));
	return 0;
}

/* s.replace(old, new[, count]) and the replace filter. */
int tpl_replace(tctx *c, uint32_t pos, const tv *s, const tv *old,
		const tv *new_, int64_t count, tv *out)
{
	tbuf b;
	tbuf_init(&b, c->a, 0);
	size_t i = 0;
	int64_t done = 0;
	if (!old->s.n) { /* Python inserts new between every character */
		for (;;) {
			if (count >= 0 && done >= count)
				break;
			tbuf_put(&b, new_->s.p, new_->s.n);
			done++;
			if (i >= s->s.n)
				break;
			size_t k;
			tpl_utf8_decode(s->s.p + i, s->s.n - i, &k);
			tbuf_put(&b, s->s.p + i, k);
			i += k;
		}
		tbuf_put(&b, s->s.p + i, s->s.n - i);
		if (tpl_step(c, pos, (uint64_t)done))
			return -1;
		return str_out(c, pos, &b, out);
	}
	const char *hit;
	while ((count < 0 || done < count) &&
	       (hit = memmem(s->s.p + i, s->s.n - i, old->s.p, old->s.n))) {
		tbuf_put(&b, s->s.p + i, (size_t)(hit - s->s.p) - i);
		tbuf_put(&b, new_->s.p, new_->s.n);
		i = (size_t)(hit - s->s.p) + old->s.n;
		done++;
	}
	tbuf_put(&b, s->s.p + i, s->s.n - i);
	if (tpl_step(c, pos, (uint64_t)done))
		return -1;
	return str_out(c, pos, &b, out);
}

static int m_replace(ARGS)
{
	const tv *old = ARG(0, "old"), *new_ = ARG(1, "new"),
		 *cnt = ARG(2, "count");
	if (want_str(c, pos, old, "replace's old text") ||
	    want_str(c, pos, new_, "replace's new text"))
		return -1;
	return tpl_replace(c, pos, &self->self, old, new_,
			   cnt && cnt->type == TV_INT ? cnt->i : -1, out);
}

static int m_find(ARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	if (n < 1 || want_str(c, pos, &args[0], "the text to find"))
		return n < 1 ? tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"%s needs an argument", self->name)
			     : -1;
	const tv *s = &self->self, *x = &args[0];
	bool count = !strcmp(self->name, "count");
	bool right = !strcmp(self->name, "rfind");
	int64_t found = -1, hits = 0;
	for (size_t i = 0; i + x->s.n <= s->s.n;) {
		if (!memcmp(s->s.p + i, x->s.p, x->s.n)) {
			if (found < 0 || right)
				found = (int64_t)tpl_utf8_count(s->s.p, i);
			hits++;
			if (!count && !right)
				break;
			i += x->s.n ? x->s.n : 1;
		} else {
			i++;
		}
	}
	*out = tv_int(count ? hits : found);
	return 0;
}

static int m_join(ARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	tv *items;
	size_t count;
	if (n < 1 || tpl_iterate(c, pos, &args[0], &items, &count))
		return n < 1 ? tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"join needs an argument") : -1;
	tbuf b;
	tbuf_init(&b, c->a, 0);
	for (size_t i = 0; i < count; i++) {
		if (items[i].type != TV_STR)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"sequence item %zu: expected str "
					"instance, %s found", i,
					tv_type_name(&items[i]));
		if (i)
			tbuf_put(&b, self->self.s.p, self->self.s.n);
		tbuf_put(&b, items[i].s.p, items[i].s.n);
	}
	return str_out(c, pos, &b, out);
}

static int m_is(ARGS)
{
	(void)args, (void)n, (void)kw, (void)kwv, (void)nkw, (void)c, (void)pos;
	const tv *s = &self->self;
	const char *w = self->name + 2;
	bool r = s->s.n > 0, any_cased = false;
	for (size_t i = 0; i < s->s.n && r;) {
		size_t k;
		uint32_t cp = tpl_utf8_decode(s->s.p + i, s->s.n - i, &k);
		utf8proc_category_t g = utf8proc_category((utf8proc_int32_t)cp);
		bool alpha = g >= UTF8PROC_CATEGORY_LU && g <= UTF8PROC_CATEGORY_LO;
		bool digit = g == UTF8PROC_CATEGORY_ND;
		if (!strcmp(w, "digit"))
			r = digit;
		else if (!strcmp(w, "alpha"))
			r = alpha;
		else if (!strcmp(w, "alnum"))
			r = alpha || digit;
		else if (!strcmp(w, "space"))
			r = tpl_py_isspace(cp);
		else if (!strcmp(w, "upper"))
			r = g != UTF8PROC_CATEGORY_LL;
		else
			r = g != UTF8PROC_CATEGORY_LU;
		if (cased(cp))
			any_cased = true;
		i += k;
	}
	if (!strcmp(w, "upper") || !strcmp(w, "lower"))
		r = r && any_cased;
	*out = tv_bool(r);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* dict and list methods                                                    */
/* ------------------------------------------------------------------------ */

static int m_items(ARGS)
{
	(void)args, (void)n, (void)kw, (void)kwv, (void)nkw;
	const tdict *d = self->self.d;
	bool keys = !strcmp(self->name, "keys"), vals = !strcmp(self->name, "values");
	if (tv_list_new(c->a, d->n, out))
		return tpl_fail_alloc(c, pos);
	for (size_t i = 0; i < d->n; i++) {
		tv item;
		if (keys || vals) {
			item = keys ? d->keys[i] : d->vals[i];
		} else {
			if (tv_list_new(c->a, 2, &item))
				return tpl_fail_alloc(c, pos);
			item.flags = TVF_TUPLE;
			item.l->items[0] = d->keys[i];
			item.l->items[1] = d->vals[i];
			item.l->n = 2;
		}
		out->l->items[out->l->n++] = item;
	}
	return tpl_step(c, pos, d->n);
}

static int m_get(ARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	if (n < 1)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"get needs a key");
	tv *v = tv_dict_get(self->self.d, args[0]);
	*out = v ? *v : n > 1 ? args[1] : tv_none();
	return 0;
}

static int m_index(ARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	if (n < 1)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"%s needs an argument", self->name);
	const tlist *l = self->self.l;
	int64_t hits = 0;
	for (size_t i = 0; i < l->n; i++) {
		if (!tv_eq(&l->items[i], &args[0]))
			continue;
		if (!strcmp(self->name, "index")) {
			*out = tv_int((int64_t)i);
			return 0;
		}
		hits++;
	}
	if (!strcmp(self->name, "index"))
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"list.index(x): x not in list");
	*out = tv_int(hits);
	return 0;
}

static const struct method {
	uint8_t type;
	const char *name;
	tbuiltin_fn fn;
} methods[] = {
	{TV_STR, "strip", m_strip},	   {TV_STR, "lstrip", m_strip},
	{TV_STR, "rstrip", m_strip},	   {TV_STR, "upper", m_case},
	{TV_STR, "lower", m_case},	   {TV_STR, "title", m_case},
	{TV_STR, "capitalize", m_case},	   {TV_STR, "split", m_split},
	{TV_STR, "rsplit", m_split},	   {TV_STR, "splitlines", m_splitlines},
	{TV_STR, "startswith", m_affix},   {TV_STR, "endswith", m_affix},
	{TV_STR, "replace", m_replace},	   {TV_STR, "find", m_find},
	{TV_STR, "rfind", m_find},	   {TV_STR, "count", m_find},
	{TV_STR, "join", m_join},	   {TV_STR, "isdigit", m_is},
	{TV_STR, "isalpha", m_is},	   {TV_STR, "isalnum", m_is},
	{TV_STR, "isspace", m_is},	   {TV_STR, "isupper", m_is},
	{TV_STR, "islower", m_is},	   {TV_DICT, "items", m_items},
	{TV_DICT, "keys", m_items},	   {TV_DICT, "values", m_items},
	{TV_DICT, "get", m_get},	   {TV_LIST, "index", m_index},
	{TV_LIST, "count", m_index},
};

bool tpl_method(tctx *c, const tv *obj, const char *name, size_t n, tv *out)
{
	for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
		const struct method *m = &methods[i];
		if (m->type != obj->type || strlen(m->name) != n ||
		    memcmp(m->name, name, n))
			continue;
		tfunc *fn = tpl_alloc(c->a, sizeof *fn);
		if (!fn) {
			tpl_fail_alloc(c, 0);
			*out = tv_undef();
			return true;
		}
		memset(fn, 0, sizeof *fn);
		fn->name = m->name;
		fn->call = m->fn;
		fn->self = *obj;
		*out = (tv){.type = TV_FUNC};
		out->fn = fn;
		return true;
	}
	return false;
}
