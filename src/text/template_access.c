/* template_access.c - attribute and item access, slices, iteration and
 * calls of the chat-template interpreter, as Jinja2's sandboxed
 * environment does them: `a.b` tries the attribute (a method) and then
 * the item, `a[b]` the item and then the attribute; a missing one is
 * undefined, which fails only when used (layer: text). */
#include <stdio.h>
#include <string.h>

#include "text/template_internal.h"

static const char *owner_name(const tv *v)
{
	switch (v->type) {
	case TV_NONE: return "None";
	case TV_BOOL: return "bool object";
	case TV_INT: return "int object";
	case TV_FLOAT: return "float object";
	case TV_STR: return "str object";
	case TV_LIST: return v->flags & TVF_TUPLE ? "tuple object"
						   : "list object";
	case TV_DICT: return "dict object";
	case TV_NS: return "jinja2.utils.Namespace object";
	case TV_FUNC: return "function object";
	default: return "jinja2.runtime.LoopContext object";
	}
}

static int missing(tctx *c, uint32_t pos, const tv *obj, const char *name,
		   size_t n, const tv *key, tv *out)
{
	tundef *u = tpl_alloc(c->a, sizeof *u);
	if (!u)
		return tpl_fail_alloc(c, pos);
	memset(u, 0, sizeof *u);
	u->owner = owner_name(obj);
	u->name = name ? name : "";
	u->name_len = name ? n : 0;
	if (key && (key->type == TV_INT || key->type == TV_BOOL)) {
		u->key_is_int = true;
		u->key = key->type == TV_INT ? key->i : key->b;
	}
	*out = tv_undef();
	out->u = u;
	return 0;
}

/* loop.index, loop.first ... */
static bool loop_attr(tctx *c, const tloop *L, const char *name, size_t n,
		      const tv *self, tv *out)
{
#define IS(s) (n == sizeof s - 1 && !memcmp(name, s, n))
	int64_t i = L->index0, len = L->length;
	if (IS("index"))
		*out = tv_int(i + 1);
	else if (IS("index0"))
		*out = tv_int(i);
	else if (IS("revindex"))
		*out = tv_int(len - i);
	else if (IS("revindex0"))
		*out = tv_int(len - i - 1);
	else if (IS("first"))
		*out = tv_bool(i == 0);
	else if (IS("last"))
		*out = tv_bool(i == len - 1);
	else if (IS("length"))
		*out = tv_int(len);
	else if (IS("depth"))
		*out = tv_int(L->depth);
	else if (IS("depth0"))
		*out = tv_int(L->depth - 1);
	else if (IS("previtem"))
		*out = i > 0 ? L->items[i - 1] : tv_undef();
	else if (IS("nextitem"))
		*out = i + 1 < len ? L->items[i + 1] : tv_undef();
	else
		return tpl_loop_method(c, self, name, n, out);
	return true;
#undef IS
}

int tpl_getattr(tctx *c, uint32_t pos, const tv *obj, const char *name,
		size_t n, tv *out)
{
	tv *v;
	switch (obj->type) {
	case TV_UNDEF:
		return tpl_fail_undefined(c, pos, obj);
	case TV_DICT:
		if (tpl_method(c, obj, name, n, out))
			return 0;
		if ((v = tv_dict_get_str(obj->d, name, n))) {
			*out = *v;
			return 0;
		}
		break;
	case TV_NS:
		if ((v = tv_dict_get_str(obj->d, name, n))) {
			*out = *v;
			return 0;
		}
		break;
	case TV_LOOP:
		if (loop_attr(c, obj->loop, name, n, obj, out))
			return 0;
		break;
	default:
		if (tpl_method(c, obj, name, n, out))
			return 0;
	}
	return missing(c, pos, obj, name, n, NULL, out);
}

int tpl_getitem(tctx *c, uint32_t pos, const tv *obj, const tv *key, tv *out)
{
	if (obj->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, obj);
	bool int_key = key->type == TV_INT || key->type == TV_BOOL;
	int64_t k = key->type == TV_INT ? key->i : key->type == TV_BOOL ? key->b : 0;
	if (obj->type == TV_DICT || obj->type == TV_NS) {
		tv *v = tv_dict_get(obj->d, *key);
		if (v) {
			*out = *v;
			return 0;
		}
	} else if (obj->type == TV_LIST && int_key) {
		int64_t n = (int64_t)obj->l->n;
		if (k < 0)
			k += n;
		if (k >= 0 && k < n) {
			*out = obj->l->items[k];
			return 0;
		}
	} else if (obj->type == TV_STR && int_key) {
		int64_t n = (int64_t)tpl_utf8_count(obj->s.p, obj->s.n);
		if (k < 0)
			k += n;
		if (k >= 0 && k < n) {
			size_t at = tpl_utf8_offset(obj->s.p, obj->s.n, (size_t)k);
			size_t len;
			tpl_utf8_decode(obj->s.p + at, obj->s.n - at, &len);
			*out = tv_strref(obj->s.p + at, len);
			return 0;
		}
	}
	if (key->type == TV_STR) {
		if (obj->type == TV_LOOP)
			return tpl_getattr(c, pos, obj, key->s.p, key->s.n, out);
		if (obj->type != TV_NS &&
		    tpl_method(c, obj, key->s.p, key->s.n, out))
			return 0;
		return missing(c, pos, obj, key->s.p, key->s.n, NULL, out);
	}
	if (int_key)
		return missing(c, pos, obj, NULL, 0, key, out);
	tv s;
	if (tpl_to_str(c, pos, key, &s))
		return -1;
	return missing(c, pos, obj, s.s.p, s.s.n, NULL, out);
}

/* Python's slice.indices(). */
static int slice_bound(tctx *c, uint32_t pos, const tv *v, int64_t len,
		       int64_t step, bool is_start, int64_t *out)
{
	if (v->type == TV_NONE) {
		*out = step > 0 ? (is_start ? 0 : len)
				: (is_start ? len - 1 : -1);
		return 0;
	}
	if (v->type != TV_INT && v->type != TV_BOOL)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"slice indices must be integers or None, not "
				"%s", tv_type_name(v));
	int64_t i = v->type == TV_INT ? v->i : v->b;
	if (i < 0) {
		i += len;
		if (i < 0)
			i = step < 0 ? -1 : 0;
	} else if (i >= len) {
		i = step < 0 ? len - 1 : len;
	}
	*out = i;
	return 0;
}

int tpl_slice(tctx *c, uint32_t pos, const tv *obj, const tv *start,
	      const tv *stop, const tv *step, tv *out)
{
	if (obj->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, obj);
	if (obj->type != TV_LIST && obj->type != TV_STR)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"'%s' object is not subscriptable with a slice",
				tv_type_name(obj));
	int64_t st = 1;
	if (step->type != TV_NONE) {
		if (step->type != TV_INT)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"slice step must be an integer");
		if (!(st = step->i))
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"slice step cannot be zero");
	}
	bool is_str = obj->type == TV_STR;
	int64_t len = is_str ? (int64_t)tpl_utf8_count(obj->s.p, obj->s.n)
			     : (int64_t)obj->l->n;
	int64_t a = 0, b = 0; /* set by slice_bound; gcc 13 -O3 cannot tell */
	if (slice_bound(c, pos, start, len, st, true, &a) ||
	    slice_bound(c, pos, stop, len, st, false, &b))
		return -1;
	size_t count = 0;
	if (st > 0 && b > a)
		count = (size_t)((b - a + st - 1) / st);
	else if (st < 0 && a > b)
		count = (size_t)((a - b - st - 1) / -st);
	if (tpl_step(c, pos, count))
		return -1;
	if (!is_str) {
		if (tv_list_new(c->a, count, out))
			return tpl_fail_alloc(c, pos);
		for (size_t i = 0; i < count; i++)
			out->l->items[out->l->n++] =
				obj->l->items[a + (int64_t)i * st];
		out->flags = obj->flags & TVF_TUPLE;
		return 0;
	}
	if (st == 1) {
		size_t x = tpl_utf8_offset(obj->s.p, obj->s.n, (size_t)a);
		size_t y = count ? tpl_utf8_offset(obj->s.p, obj->s.n, (size_t)b) : x;
		*out = tv_strref(obj->s.p + x, y - x);
		return 0;
	}
	size_t *offs = tpl_alloc(c->a, ((size_t)len + 1) * sizeof *offs);
	tbuf buf;
	tbuf_init(&buf, c->a, 0);
	if (!offs)
		return tpl_fail_alloc(c, pos);
	for (size_t i = 0, at = 0; i <= (size_t)len; i++) {
		offs[i] = at;
		if (at < obj->s.n) {
			size_t k;
			tpl_utf8_decode(obj->s.p + at, obj->s.n - at, &k);
			at += k;
		}
	}
	for (size_t i = 0; i < count; i++) {
		int64_t j = a + (int64_t)i * st;
		tbuf_put(&buf, obj->s.p + offs[j], offs[j + 1] - offs[j]);
	}
	if (buf.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(buf.p ? buf.p : "", buf.n);
	return 0;
}

int tpl_iterate(tctx *c, uint32_t pos, const tv *v, tv **items, size_t *n)
{
	static tv none[1];
	switch (v->type) {
	case TV_UNDEF:
		*items = none;
		*n = 0;
		return 0;
	case TV_LIST:
		*items = v->l->items ? v->l->items : none;
		*n = v->l->n;
		return 0;
	case TV_DICT:
		*items = v->d->keys ? v->d->keys : none;
		*n = v->d->n;
		return 0;
	case TV_STR: {
		size_t count = tpl_utf8_count(v->s.p, v->s.n);
		tv *out = tpl_alloc(c->a, (count ? count : 1) * sizeof *out);
		if (!out)
			return tpl_fail_alloc(c, pos);
		for (size_t i = 0, at = 0; i < count; i++) {
			size_t k;
			tpl_utf8_decode(v->s.p + at, v->s.n - at, &k);
			out[i] = tv_strref(v->s.p + at, k);
			at += k;
		}
		*items = out;
		*n = count;
		return 0;
	}
	default:
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"'%s' object is not iterable", tv_type_name(v));
	}
}

const tv *tpl_kwarg(const char *const *kw, const tv *kwv, size_t nkw,
		    const char *name)
{
	for (size_t i = 0; i < nkw; i++)
		if (!strcmp(kw[i], name))
			return &kwv[i];
	return NULL;
}

/* Binds arguments to a macro's parameters (defaults evaluated in the new
 * frame, as Jinja2 does) and renders its body. */
static int call_macro(tctx *c, uint32_t pos, tfunc *fn, const tv *args,
		      size_t n, const char *const *kw, const tv *kwv,
		      size_t nkw, tv *out)
{
	const tnode *m = fn->macro;
	const char *label = m->kind == TN_MACRO ? m->name : "caller";
	if (n > m->nkw)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"macro '%s' takes not more than %zu "
				"argument(s)", label, m->nkw);
	tframe *f = tpl_alloc(c->a, sizeof *f);
	if (!f)
		return tpl_fail_alloc(c, pos);
	memset(f, 0, sizeof *f);
	f->parent = fn->scope;
	for (size_t k = 0; k < nkw; k++) {
		size_t p = 0;
		while (p < m->nkw && strcmp(m->kw[p], kw[k]))
			p++;
		if (p == m->nkw)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"macro '%s' takes no keyword argument "
					"'%s'", label, kw[k]);
	}
	tframe *saved = c->frame;
	c->frame = f;
	for (size_t p = 0; p < m->nkw; p++) {
		tv v = tv_undef();
		const tv *given = p < n ? &args[p]
					: tpl_kwarg(kw, kwv, nkw, m->kw[p]);
		if (given) {
			v = *given;
		} else if (m->list2[p] && tpl_eval(c, m->list2[p], &v)) {
			c->frame = saved;
			return -1;
		}
		if (tpl_frame_set(c, f, m->kw[p], strlen(m->kw[p]), v)) {
			c->frame = saved;
			return tpl_fail_alloc(c, pos);
		}
	}
	c->frame = saved;
	if (m->kind == TN_MACRO && c->caller.type == TV_FUNC) {
		if (tpl_frame_set(c, f, "caller", 6, c->caller))
			return tpl_fail_alloc(c, pos);
		c->caller = tv_undef();
	}
	int control = c->control;
	c->control = 0;
	int rc = tpl_capture(c, pos, m->list, m->n, f, out);
	c->control = control;
	return rc;
}

int tpl_call(tctx *c, uint32_t pos, const tv *fn, const tv *args, size_t n,
	     const char *const *kw, const tv *kwv, size_t nkw, tv *out)
{
	if (fn->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, fn);
	if (fn->type != TV_FUNC)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"'%s' object is not callable", tv_type_name(fn));
	if (fn->fn->macro)
		return call_macro(c, pos, fn->fn, args, n, kw, kwv, nkw, out);
	return fn->fn->call(c, fn->fn, pos, args, n, kw, kwv, nkw, out);
}
