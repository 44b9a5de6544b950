/* template_ops.c - the chat-template interpreter's operators with
 * Python's semantics: arithmetic (64-bit integers, checked; floor division
 * and modulo toward minus infinity; str and list repetition and
 * concatenation), comparisons (chained), `in`, unary operators, `~` and
 * str() (layer: text). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text/template_internal.h"

/* ------------------------------------------------------------------------ */
/* Operators                                                                */
/* ------------------------------------------------------------------------ */

static bool is_num(const tv *v)
{
	return v->type == TV_INT || v->type == TV_FLOAT || v->type == TV_BOOL;
}

static double as_f(const tv *v)
{
	return v->type == TV_FLOAT ? v->f : v->type == TV_INT ? (double)v->i
							     : (double)v->b;
}

static int64_t as_i(const tv *v)
{
	return v->type == TV_INT ? v->i : v->b;
}

static const char *op_text(int op)
{
	switch (op) {
	case OP_ADD: return "+";
	case OP_SUB: return "-";
	case OP_MUL: return "*";
	case OP_DIV: return "/";
	case OP_FLOORDIV: return "//";
	case OP_MOD: return "%";
	case OP_POW: return "**";
	case OP_LT: return "<";
	case OP_LTEQ: return "<=";
	case OP_GT: return ">";
	default: return ">=";
	}
}

static int type_error(tctx *c, uint32_t pos, int op, const tv *a, const tv *b)
{
	if (a->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, a);
	if (b->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, b);
	if (op == OP_ADD && a->type == TV_STR)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"can only concatenate str (not \"%s\") to str",
				tv_type_name(b));
	return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
			"unsupported operand type(s) for %s: '%s' and '%s'",
			op_text(op), tv_type_name(a), tv_type_name(b));
}

/* seq * count for strings and lists. */
static int repeat(tctx *c, uint32_t pos, const tv *seq, int64_t count, tv *out)
{
	if (count < 0)
		count = 0;
	size_t unit = seq->type == TV_STR ? seq->s.n : seq->l->n;
	if (unit && (uint64_t)count > c->a->limit_bytes / unit)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT,
				"repeating a sequence %lld times passes the "
				"memory limit", (long long)count);
	if (tpl_step(c, pos, (uint64_t)count))
		return -1;
	if (seq->type == TV_STR) {
		tbuf b;
		tbuf_init(&b, c->a, 0);
		for (int64_t i = 0; i < count; i++)
			tbuf_put(&b, seq->s.p, seq->s.n);
		if (b.failed)
			return tpl_fail_alloc(c, pos);
		*out = tv_strref(b.p ? b.p : "", b.n);
		return 0;
	}
	if (tv_list_new(c->a, unit * (size_t)count, out))
		return tpl_fail_alloc(c, pos);
	for (int64_t i = 0; i < count; i++)
		for (size_t k = 0; k < unit; k++)
			out->l->items[out->l->n++] = seq->l->items[k];
	return 0;
}

static int arith_int(tctx *c, uint32_t pos, int op, int64_t x, int64_t y,
		     tv *out)
{
	int64_t r = 0;
	bool ovf = false;
	switch (op) {
	case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
	case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
	case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
	case OP_FLOORDIV:
	case OP_MOD:
		if (y == 0)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"integer division or modulo by zero");
		if (x == INT64_MIN && y == -1) {
			ovf = op == OP_FLOORDIV;
			r = 0;
			break;
		}
		r = op == OP_FLOORDIV ? x / y : x % y;
		if ((x % y != 0) && ((x < 0) != (y < 0)))
			r = op == OP_FLOORDIV ? r - 1 : r + y;
		break;
	case OP_POW:
		if (y < 0) {
			*out = tv_float(pow((double)x, (double)y));
			return 0;
		}
		r = 1;
		for (int64_t k = 0; k < y && !ovf; k++) {
			ovf = __builtin_mul_overflow(r, x, &r);
			if (r == 0 || r == 1)
				break;
		}
		if (x == -1)
			r = (y % 2) ? -1 : 1;
		break;
	}
	if (ovf)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"integer overflow in %lld %s %lld (integers are "
				"64-bit here)", (long long)x, op_text(op),
				(long long)y);
	*out = tv_int(r);
	return 0;
}

int tpl_arith(tctx *c, uint32_t pos, int op, const tv *a, const tv *b,
		 tv *out)
{
	if (is_num(a) && is_num(b)) {
		if (op == OP_DIV) {
			if (as_f(b) == 0.0)
				return tpl_fail(c, pos,
						STRATA_E_TEXT_TEMPLATE_RENDER,
						"division by zero");
			*out = tv_float(as_f(a) / as_f(b));
			return 0;
		}
		if (a->type != TV_FLOAT && b->type != TV_FLOAT)
			return arith_int(c, pos, op, as_i(a), as_i(b), out);
		double x = as_f(a), y = as_f(b), r;
		if ((op == OP_FLOORDIV || op == OP_MOD) && y == 0.0)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"float division or modulo by zero");
		switch (op) {
		case OP_ADD: r = x + y; break;
		case OP_SUB: r = x - y; break;
		case OP_MUL: r = x * y; break;
		case OP_FLOORDIV: r = floor(x / y); break;
		case OP_MOD:
			r = fmod(x, y);
			if (r != 0 && ((r < 0) != (y < 0)))
				r += y;
			break;
		default: r = pow(x, y); break;
		}
		*out = tv_float(r);
		return 0;
	}
	if (op == OP_ADD && a->type == b->type &&
	    (a->type == TV_STR || a->type == TV_LIST)) {
		if (a->type == TV_STR) {
			tbuf s;
			tbuf_init(&s, c->a, 0);
			tbuf_put(&s, a->s.p, a->s.n);
			tbuf_put(&s, b->s.p, b->s.n);
			if (s.failed)
				return tpl_fail_alloc(c, pos);
			*out = tv_strref(s.p ? s.p : "", s.n);
			return 0;
		}
		if (tv_list_new(c->a, a->l->n + b->l->n, out))
			return tpl_fail_alloc(c, pos);
		if (a->l->n)
			memcpy(out->l->items, a->l->items, a->l->n * sizeof(tv));
		if (b->l->n)
			memcpy(out->l->items + a->l->n, b->l->items,
			       b->l->n * sizeof(tv));
		out->l->n = a->l->n + b->l->n;
		out->flags = a->flags & b->flags & TVF_TUPLE;
		return 0;
	}
	if (op == OP_MUL && (a->type == TV_STR || a->type == TV_LIST) &&
	    (b->type == TV_INT || b->type == TV_BOOL))
		return repeat(c, pos, a, as_i(b), out);
	if (op == OP_MUL && (b->type == TV_STR || b->type == TV_LIST) &&
	    (a->type == TV_INT || a->type == TV_BOOL))
		return repeat(c, pos, b, as_i(a), out);
	return type_error(c, pos, op, a, b);
}

int tpl_less(tctx *c, uint32_t pos, const tv *a, const tv *b, bool *out)
{
	if (is_num(a) && is_num(b)) {
		if (a->type != TV_FLOAT && b->type != TV_FLOAT)
			*out = as_i(a) < as_i(b);
		else
			*out = as_f(a) < as_f(b);
		return 0;
	}
	if (a->type == TV_STR && b->type == TV_STR) {
		size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
		int r = memcmp(a->s.p, b->s.p, n);
		*out = r < 0 || (r == 0 && a->s.n < b->s.n);
		return 0;
	}
	if (a->type == TV_LIST && b->type == TV_LIST) {
		size_t n = a->l->n < b->l->n ? a->l->n : b->l->n;
		for (size_t i = 0; i < n; i++) {
			if (tv_eq(&a->l->items[i], &b->l->items[i]))
				continue;
			return tpl_less(c, pos, &a->l->items[i], &b->l->items[i],
					out);
		}
		*out = a->l->n < b->l->n;
		return 0;
	}
	if (a->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, a);
	if (b->type == TV_UNDEF)
		return tpl_fail_undefined(c, pos, b);
	return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "'<' not "
			"supported between instances of '%s' and '%s'",
			tv_type_name(a), tv_type_name(b));
}

static int contains(tctx *c, uint32_t pos, const tv *item, const tv *in,
		    bool *out)
{
	switch (in->type) {
	case TV_UNDEF:
		*out = false;
		return 0;
	case TV_STR:
		if (item->type != TV_STR)
			return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
					"'in <string>' requires string as left "
					"operand, not %s", tv_type_name(item));
		*out = item->s.n == 0 ||
		       memmem(in->s.p, in->s.n, item->s.p, item->s.n) != NULL;
		return tpl_step(c, pos, in->s.n / 64);
	case TV_LIST:
		*out = false;
		for (size_t i = 0; i < in->l->n && !*out; i++)
			*out = tv_eq(item, &in->l->items[i]);
		return tpl_step(c, pos, in->l->n);
	case TV_DICT:
	case TV_NS:
		*out = tv_dict_get(in->d, *item) != NULL;
		return tpl_step(c, pos, in->d->n);
	default:
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"argument of type '%s' is not iterable",
				tv_type_name(in));
	}
}

int tpl_compare(tctx *c, const tnode *e, tv *out)
{
	tv left;
	if (tpl_eval(c, e->a, &left))
		return -1;
	for (size_t i = 0; i < e->n; i++) {
		const tnode *o = e->list[i];
		tv right;
		bool r = false;
		if (tpl_eval(c, o->b, &right))
			return -1;
		switch (o->op) {
		case OP_EQ: r = tv_eq(&left, &right); break;
		case OP_NE: r = !tv_eq(&left, &right); break;
		case OP_LT:
			if (tpl_less(c, o->pos, &left, &right, &r))
				return -1;
			break;
		case OP_GT:
			if (tpl_less(c, o->pos, &right, &left, &r))
				return -1;
			break;
		case OP_LTEQ:
		case OP_GTEQ: {
			bool lt;
			const tv *x = o->op == OP_LTEQ ? &right : &left;
			const tv *y = o->op == OP_LTEQ ? &left : &right;
			if (tpl_less(c, o->pos, x, y, &lt))
				return -1;
			r = !lt;
			break;
		}
		case OP_IN:
		case OP_NOTIN:
			if (contains(c, o->pos, &left, &right, &r))
				return -1;
			if (o->op == OP_NOTIN)
				r = !r;
			break;
		}
		if (!r) {
			*out = tv_bool(false);
			return 0;
		}
		left = right;
	}
	*out = tv_bool(true);
	return 0;
}

int tpl_unary(tctx *c, const tnode *e, tv *out)
{
	tv v;
	if (tpl_eval(c, e->a, &v))
		return -1;
	if (e->op == OP_NOT) {
		*out = tv_bool(!tv_truthy(&v));
		return 0;
	}
	if (!is_num(&v)) {
		if (v.type == TV_UNDEF)
			return tpl_fail_undefined(c, e->pos, &v);
		return tpl_fail(c, e->pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"bad operand type for unary %s: '%s'",
				e->op == OP_NEG ? "-" : "+", tv_type_name(&v));
	}
	if (e->op == OP_POS)
		*out = v.type == TV_BOOL ? tv_int(v.b) : v;
	else if (v.type == TV_FLOAT)
		*out = tv_float(-v.f);
	else if (as_i(&v) == INT64_MIN)
		return tpl_fail(c, e->pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"integer overflow in unary -");
	else
		*out = tv_int(-as_i(&v));
	return 0;
}

int tpl_to_str(tctx *c, uint32_t pos, const tv *v, tv *out)
{
	if (v->type == TV_STR) {
		*out = *v;
		return 0;
	}
	tbuf b;
	tbuf_init(&b, c->a, 0);
	tv_str_write(&b, v);
	if (b.failed)
		return tpl_fail_alloc(c, pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return 0;
}

int tpl_concat(tctx *c, const tnode *e, tv *out)
{
	tbuf b;
	tbuf_init(&b, c->a, 0);
	for (size_t i = 0; i < e->n; i++) {
		tv v;
		if (tpl_eval(c, e->list[i], &v))
			return -1;
		tv_str_write(&b, &v);
	}
	if (b.failed)
		return tpl_fail_alloc(c, e->pos);
	*out = tv_strref(b.p ? b.p : "", b.n);
	return 0;
}

