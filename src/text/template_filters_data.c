/* template_filters_data.c - the chat-template filters on data: tojson (as
 * transformers defines it), default, numbers (int, float, abs, round,
 * sum, min, max), sort, dictsort, batch, attr, escape, safe and format;
 * and the filter dispatcher over both filter tables (layer: text). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/template_internal.h"

#define FARGS                                                                 \
	tctx *c, uint32_t pos, const tv *args, size_t n,                     \
		const char *const *kw, const tv *kwv, size_t nkw, tv *out
#define ARG(i, name) (i < n ? &args[i] : tpl_kwarg(kw, kwv, nkw, name))

/* tojson(indent=None, separators=None, sort_keys=False, ensure_ascii=False):
 * Python's json.dumps; with an indent the item separator is ",". */
static int f_tojson(FARGS)
{
	const tv *indent = ARG(1, "indent"), *seps = tpl_kwarg(kw, kwv, nkw, "separators");
	const tv *sort = tpl_kwarg(kw, kwv, nkw, "sort_keys");
	const tv *ascii = tpl_kwarg(kw, kwv, nkw, "ensure_ascii");
	if (ascii && tv_truthy(ascii))
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "tojson: "
				"ensure_ascii=True is not supported");
	int ind = -1;
	const char *ind_str = NULL;
	char *tmp;
	if (indent && indent->type == TV_INT) {
		ind = indent->i < 0 ? 0 : indent->i > 64 ? 64 : (int)indent->i;
	} else if (indent && indent->type == TV_STR) {
		if (!(tmp = tpl_alloc(c->a, indent->s.n + 1)))
			return tpl_fail_alloc(c, pos);
		memcpy(tmp, indent->s.p, indent->s.n);
		tmp[indent->s.n] = '\0';
		ind = 0;
		ind_str = tmp;
	} else if (indent && indent->type != TV_NONE) {
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "tojson: "
				"indent must be an integer or a string");
	}
	const char *item = ind >= 0 ? "," : ", ", *key = ": ";
	if (seps && seps->type != TV_NONE) {
		if (seps->type != TV_LIST || seps->l->n != 2 ||
		    seps->l->items[0].type != TV_STR ||
		    seps->l->items[1].type != TV_STR)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"tojson: separators must be two strings");
		tv a, b;
		if (tv_str_copy(c->a, seps->l->items[0].s.p, seps->l->items[0].s.n, &a) ||
		    tv_str_copy(c->a, seps->l->items[1].s.p, seps->l->items[1].s.n, &b))
			return tpl_fail_alloc(c, pos);
		item = a.s.p;
		key = b.s.p;
	}
	tbuf b;
	tbuf_init(&b, c->a, c->max_output_bytes);
	const char *bad = NULL;
	if (tv_json_write(&b, &args[0], ind, ind_str, item, key,
			  sort && tv_truthy(sort), &bad))
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "tojson: "
				"object of type %s is not JSON serializable", bad);
	if (b.over)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT, "tojson: "
				"the JSON passed the output limit");
	if (b.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return tpl_step(c, pos, b.n / 64);
}

static int f_default(FARGS)
{
	const tv *d = ARG(1, "default_value"), *boolean = ARG(2, "boolean");
	const tv *v = &args[0];
	bool use = v->type == TV_UNDEF ||
		   (boolean && tv_truthy(boolean) && !tv_truthy(v));
	*out = use ? (d ? *d : tv_strref("", 0)) : *v;
	(void)c, (void)pos;
	return 0;
}

static int f_safe(FARGS)
{
	(void)c, (void)pos, (void)n, (void)kw, (void)kwv, (void)nkw;
	*out = args[0];
	return 0;
}

static int f_escape(FARGS)
{
	(void)n, (void)kw, (void)kwv, (void)nkw;
	tv s;
	if (tpl_to_str(c, pos, &args[0], &s))
		return -1;
	tbuf b;
	tbuf_init(&b, c->a, 0);
	for (size_t i = 0; i < s.s.n; i++) {
		char ch = s.s.p[i];
		const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;"
				: ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
				: ch == '\'' ? "&#39;" : NULL;
		if (e)
			tbuf_puts(&b, e);
		else
			tbuf_putc(&b, ch);
	}
	if (b.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return 0;
}

static int f_attr(FARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	if (n < 2 || args[1].type != TV_STR)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"attr needs an attribute name");
	return tpl_getattr(c, pos, &args[0], args[1].s.p, args[1].s.n, out);
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                  */
/* ------------------------------------------------------------------------ */

static bool parse_number(const tv *s, int base, bool want_int, tv *out)
{
	char buf[128];
	tv t;
	tpl_strip(s, NULL, 3, &t);
	if (!t.s.n || t.s.n >= sizeof buf)
		return false;
	size_t k = 0;
	for (size_t i = 0; i < t.s.n; i++)
		if (t.s.p[i] != '_')
			buf[k++] = t.s.p[i];
	buf[k] = '\0';
	char *end;
	if (want_int) {
		long long v = strtoll(buf, &end, base);
		if (*end == '\0') {
			*out = tv_int(v);
			return true;
		}
	}
	double f = strtod(buf, &end);
	if (*end != '\0')
		return false;
	*out = want_int ? tv_int((int64_t)f) : tv_float(f);
	return !want_int || (isfinite(f) && fabs(f) < 9.2e18);
}

static int f_int(FARGS)
{
	const tv *d = ARG(1, "default"), *base = ARG(2, "base");
	const tv *v = &args[0];
	(void)c, (void)pos;
	if (v->type == TV_INT || v->type == TV_BOOL)
		*out = tv_int(v->type == TV_INT ? v->i : v->b);
	else if (v->type == TV_FLOAT && isfinite(v->f) && fabs(v->f) < 9.2e18)
		*out = tv_int((int64_t)v->f);
	else if (!(v->type == TV_STR &&
		   parse_number(v, base && base->type == TV_INT ? (int)base->i : 10,
				true, out)))
		*out = d ? *d : tv_int(0);
	return 0;
}

static int f_float(FARGS)
{
	const tv *d = ARG(1, "default");
	const tv *v = &args[0];
	(void)c, (void)pos;
	if (v->type == TV_INT || v->type == TV_BOOL)
		*out = tv_float(v->type == TV_INT ? (double)v->i : v->b);
	else if (v->type == TV_FLOAT)
		*out = *v;
	else if (!(v->type == TV_STR && parse_number(v, 10, false, out)))
		*out = d ? *d : tv_float(0.0);
	return 0;
}

static int f_abs(FARGS)
{
	(void)n, (void)kw, (void)kwv, (void)nkw;
	const tv *v = &args[0];
	if (v->type == TV_FLOAT)
		*out = tv_float(fabs(v->f));
	else if (v->type == TV_INT && v->i != INT64_MIN)
		*out = tv_int(v->i < 0 ? -v->i : v->i);
	else if (v->type == TV_BOOL)
		*out = tv_int(v->b);
	else
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"bad operand type for abs(): '%s'",
				tv_type_name(v));
	return 0;
}

static int f_round(FARGS)
{
	const tv *prec = ARG(1, "precision"), *method = ARG(2, "method");
	const tv *v = &args[0];
	if (v->type != TV_FLOAT && v->type != TV_INT && v->type != TV_BOOL)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"round needs a number, not %s", tv_type_name(v));
	double x = v->type == TV_FLOAT ? v->f : v->type == TV_INT ? (double)v->i : v->b;
	int64_t p = prec && prec->type == TV_INT ? prec->i : 0;
	if (p < -20 || p > 20)
		p = p < 0 ? -20 : 20;
	double scale = pow(10.0, (double)p), r;
	if (method && tv_is_str(method, "floor"))
		r = floor(x * scale) / scale;
	else if (method && tv_is_str(method, "ceil"))
		r = ceil(x * scale) / scale;
	else
		r = rint(x * scale) / scale; /* Python round: half to even */
	*out = v->type == TV_FLOAT ? tv_float(r) : tv_int((int64_t)r);
	return 0;
}

static int item_key(tctx *c, uint32_t pos, const tv *item, const tv *attr,
		    bool fold, tv *out)
{
	*out = *item;
	if (attr && attr->type == TV_STR &&
	    tpl_getattr(c, pos, item, attr->s.p, attr->s.n, out))
		return -1;
	if (fold && out->type == TV_STR)
		return tpl_case_map(c, pos, out, TPL_CASE_LOWER, out);
	return 0;
}

static int f_sum(FARGS)
{
	const tv *attr = ARG(1, "attribute"), *start = ARG(2, "start");
	tv *items, acc = start ? *start : tv_int(0);
	size_t count;
	if (tpl_iterate(c, pos, &args[0], &items, &count))
		return -1;
	for (size_t i = 0; i < count; i++) {
		tv v;
		if (item_key(c, pos, &items[i], attr, false, &v))
			return -1;
		bool fl = acc.type == TV_FLOAT || v.type == TV_FLOAT;
		if ((acc.type != TV_INT && acc.type != TV_FLOAT) ||
		    (v.type != TV_INT && v.type != TV_FLOAT && v.type != TV_BOOL))
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"sum: unsupported operand types '%s' "
					"and '%s'", tv_type_name(&acc),
					tv_type_name(&v));
		double fv = v.type == TV_FLOAT ? v.f : v.type == TV_INT ? (double)v.i : v.b;
		if (fl) {
			acc = tv_float((acc.type == TV_FLOAT ? acc.f : (double)acc.i) + fv);
		} else {
			int64_t r;
			if (__builtin_add_overflow(acc.i, v.type == TV_INT ? v.i : v.b, &r))
				return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
						"sum: integer overflow");
			acc = tv_int(r);
		}
	}
	*out = acc;
	return tpl_step(c, pos, count);
}

/* Insertion sort by key (stable, as Python's sort). */
static int sort_items(tctx *c, uint32_t pos, tv *items, tv *keys, size_t count,
		      bool reverse)
{
	if (tpl_step(c, pos, count * count / 4))
		return -1;
	for (size_t i = 1; i < count; i++)
		for (size_t j = i; j > 0; j--) {
			bool lt;
			const tv *a = &keys[j], *b = &keys[j - 1];
			if (tpl_less(c, pos, reverse ? b : a, reverse ? a : b, &lt))
				return -1;
			if (!lt)
				break;
			tv t = items[j]; items[j] = items[j - 1]; items[j - 1] = t;
			t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
		}
	return 0;
}

static int f_sort(FARGS)
{
	const tv *rev = ARG(1, "reverse"), *cs = ARG(2, "case_sensitive"),
		 *attr = ARG(3, "attribute");
	tv *items;
	size_t count;
	if (tpl_iterate(c, pos, &args[0], &items, &count) ||
	    tv_list_new(c->a, count, out))
		return c->failed ? -1 : tpl_fail_alloc(c, pos);
	tv *keys = tpl_alloc(c->a, (count ? count : 1) * sizeof *keys);
	if (!keys)
		return tpl_fail_alloc(c, pos);
	for (size_t i = 0; i < count; i++) {
		out->l->items[i] = items[i];
		if (item_key(c, pos, &items[i], attr, !(cs && tv_truthy(cs)), &keys[i]))
			return -1;
	}
	out->l->n = count;
	return sort_items(c, pos, out->l->items, keys, count, rev && tv_truthy(rev));
}

static int f_minmax(tctx *c, uint32_t pos, const tv *args, size_t n,
		    const char *const *kw, const tv *kwv, size_t nkw, tv *out,
		    bool max)
{
	const tv *cs = ARG(1, "case_sensitive"), *attr = ARG(2, "attribute");
	tv *items, best_key = tv_undef();
	size_t count;
	if (tpl_iterate(c, pos, &args[0], &items, &count))
		return -1;
	*out = tv_undef();
	for (size_t i = 0; i < count; i++) {
		tv k;
		bool lt;
		if (item_key(c, pos, &items[i], attr, !(cs && tv_truthy(cs)), &k))
			return -1;
		if (i && tpl_less(c, pos, max ? &best_key : &k,
				  max ? &k : &best_key, &lt))
			return -1;
		if (!i || lt) {
			best_key = k;
			*out = items[i];
		}
	}
	return 0;
}

static int f_min(FARGS) { return f_minmax(c, pos, args, n, kw, kwv, nkw, out, false); }
static int f_max(FARGS) { return f_minmax(c, pos, args, n, kw, kwv, nkw, out, true); }

static int f_dictsort(FARGS)
{
	const tv *cs = ARG(1, "case_sensitive"), *by = ARG(2, "by"),
		 *rev = ARG(3, "reverse");
	if (args[0].type != TV_DICT)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"dictsort needs a mapping, not %s",
				tv_type_name(&args[0]));
	tv fn, pairs;
	if (!tpl_method(c, &args[0], "items", 5, &fn) ||
	    tpl_call(c, pos, &fn, NULL, 0, NULL, NULL, 0, &pairs))
		return -1;
	size_t count = pairs.l->n, which = by && tv_is_str(by, "value") ? 1 : 0;
	tv *keys = tpl_alloc(c->a, (count ? count : 1) * sizeof *keys);
	if (!keys)
		return tpl_fail_alloc(c, pos);
	for (size_t i = 0; i < count; i++)
		if (item_key(c, pos, &pairs.l->items[i].l->items[which], NULL,
			     !(cs && tv_truthy(cs)), &keys[i]))
			return -1;
	*out = pairs;
	return sort_items(c, pos, pairs.l->items, keys, count, rev && tv_truthy(rev));
}

static int f_batch(FARGS)
{
	const tv *size = ARG(1, "linecount"), *fill = ARG(2, "fill_with");
	tv *items, row;
	size_t count;
	if (!size || size->type != TV_INT || size->i <= 0)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"batch needs a positive count");
	if (tpl_iterate(c, pos, &args[0], &items, &count) ||
	    tv_list_new(c->a, 0, out))
		return c->failed ? -1 : tpl_fail_alloc(c, pos);
	size_t per = (size_t)size->i;
	for (size_t i = 0; i < count; i += per) {
		if (tv_list_new(c->a, per, &row))
			return tpl_fail_alloc(c, pos);
		for (size_t k = 0; k < per; k++) {
			if (i + k < count)
				row.l->items[row.l->n++] = items[i + k];
			else if (fill && fill->type != TV_NONE)
				row.l->items[row.l->n++] = *fill;
		}
		if (tv_list_push(c->a, out, row))
			return tpl_fail_alloc(c, pos);
	}
	return tpl_step(c, pos, count);
}

/* "%s and %d" | format(a, b): printf-style with %s %d %i %r %f %%. */
static int f_format(FARGS)
{
	(void)kw, (void)kwv, (void)nkw;
	if (args[0].type != TV_STR)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"format needs a format string");
	const tv *f = &args[0];
	tbuf b;
	tbuf_init(&b, c->a, 0);
	size_t next = 1;
	for (size_t i = 0; i < f->s.n; i++) {
		if (f->s.p[i] != '%' || i + 1 == f->s.n) {
			tbuf_putc(&b, f->s.p[i]);
			continue;
		}
		char spec = f->s.p[++i];
		if (spec == '%') {
			tbuf_putc(&b, '%');
			continue;
		}
		if (next >= n)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"not enough arguments for format string");
		const tv *v = &args[next++];
		if (spec == 'r')
			tv_repr_write(&b, v);
		else if (spec == 's' || spec == 'd' || spec == 'i' || spec == 'f')
			tv_str_write(&b, v);
		else
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"format: unsupported conversion '%%%c'",
					spec);
	}
	if (b.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                 */
/* ------------------------------------------------------------------------ */

static const struct tpl_filter_entry data_filters[] = {
	{"tojson", f_tojson},	{"default", f_default}, {"d", f_default},
	{"safe", f_safe},	{"escape", f_escape},	{"e", f_escape},
	{"attr", f_attr},	{"int", f_int},		{"float", f_float},
	{"abs", f_abs},		{"round", f_round},	{"sum", f_sum},
	{"sort", f_sort},	{"min", f_min},		{"max", f_max},
	{"dictsort", f_dictsort}, {"batch", f_batch},	{"format", f_format},
	{NULL, NULL},
};

static tpl_filter_fn find(const char *name)
{
	for (const struct tpl_filter_entry *e = data_filters; e->name; e++)
		if (!strcmp(e->name, name))
			return e->fn;
	for (const struct tpl_filter_entry *e = tpl_text_filters; e->name; e++)
		if (!strcmp(e->name, name))
			return e->fn;
	return NULL;
}

bool tpl_filter_exists(const char *name)
{
	return find(name) != NULL;
}

int tpl_filter(tctx *c, uint32_t pos, const char *name, const tv *args,
	       size_t n, const char *const *kw, const tv *kwv, size_t nkw,
	       tv *out)
{
	tpl_filter_fn fn = find(name);
	if (!fn)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "no "
				"filter named '%s'", name);
	if (tpl_step(c, pos, 1))
		return -1;
	return fn(c, pos, args, n, kw, kwv, nkw, out);
}
