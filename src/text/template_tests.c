/* template_tests.c - the tests of `x is NAME` with Jinja2 3.1's meanings:
 * undefined is iterable and a sequence, a bool is a number, `mapping`
 * means a dict, `string` a str (layer: text). */
#include <string.h>

#include "text/template_internal.h"

typedef int (*test_fn)(tctx *c, uint32_t pos, const tv *args, size_t n,
		       bool *out);

static int need(tctx *c, uint32_t pos, size_t n, size_t want, const char *name)
{
	if (n >= want)
		return 0;
	return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "test '%s' "
			"needs an argument", name);
}

#define SIMPLE(fname, expr)                                                   \
	static int fname(tctx *c, uint32_t pos, const tv *args, size_t n,    \
			 bool *out)                                           \
	{                                                                     \
		(void)c, (void)pos, (void)n;                                  \
		const tv *v = &args[0];                                      \
		(void)v;                                                      \
		*out = (expr);                                                \
		return 0;                                                     \
	}

SIMPLE(t_defined, v->type != TV_UNDEF)
SIMPLE(t_undefined, v->type == TV_UNDEF)
SIMPLE(t_none, v->type == TV_NONE)
SIMPLE(t_boolean, v->type == TV_BOOL)
SIMPLE(t_true, v->type == TV_BOOL && v->b)
SIMPLE(t_false, v->type == TV_BOOL && !v->b)
SIMPLE(t_integer, v->type == TV_INT)
SIMPLE(t_float, v->type == TV_FLOAT)
SIMPLE(t_number, v->type == TV_INT || v->type == TV_FLOAT || v->type == TV_BOOL)
SIMPLE(t_string, v->type == TV_STR)
SIMPLE(t_mapping, v->type == TV_DICT)
SIMPLE(t_iterable, v->type == TV_UNDEF || v->type == TV_STR ||
			   v->type == TV_LIST || v->type == TV_DICT)
SIMPLE(t_sequence, v->type == TV_UNDEF || v->type == TV_STR ||
			   v->type == TV_LIST || v->type == TV_DICT)
SIMPLE(t_callable, v->type == TV_FUNC)
SIMPLE(t_escaped, false)
SIMPLE(t_truthy, tv_truthy(v))

static int t_case(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out,
		  int mode)
{
	(void)n;
	tv s, m;
	if (tpl_to_str(c, pos, &args[0], &s) ||
	    tpl_case_map(c, pos, &s, mode, &m))
		return -1;
	*out = tv_eq(&s, &m);
	return 0;
}

static int t_lower(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	return t_case(c, pos, args, n, out, TPL_CASE_LOWER);
}

static int t_upper(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	return t_case(c, pos, args, n, out, TPL_CASE_UPPER);
}

static int int_of(tctx *c, uint32_t pos, const tv *v, int64_t *out)
{
	if (v->type == TV_INT || v->type == TV_BOOL) {
		*out = v->type == TV_INT ? v->i : v->b;
		return 0;
	}
	return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "expected an "
			"integer, got %s", tv_type_name(v));
}

static int t_parity(tctx *c, uint32_t pos, const tv *args, size_t n,
		    bool *out, int64_t mod, int64_t rem)
{
	(void)n;
	int64_t x = 0;
	if (int_of(c, pos, &args[0], &x))
		return -1;
	*out = ((x % mod) + mod) % mod == rem;
	return 0;
}

static int t_even(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	return t_parity(c, pos, args, n, out, 2, 0);
}

static int t_odd(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	return t_parity(c, pos, args, n, out, 2, 1);
}

static int t_divisibleby(tctx *c, uint32_t pos, const tv *args, size_t n,
			 bool *out)
{
	int64_t d = 0;
	if (need(c, pos, n, 2, "divisibleby") || int_of(c, pos, &args[1], &d))
		return -1;
	if (!d)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"divisibleby 0");
	return t_parity(c, pos, args, n, out, d < 0 ? -d : d, 0);
}

static int t_eq(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	if (need(c, pos, n, 2, "eq"))
		return -1;
	*out = tv_eq(&args[0], &args[1]);
	return 0;
}

static int t_ne(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	if (t_eq(c, pos, args, n, out))
		return -1;
	*out = !*out;
	return 0;
}

static int t_sameas(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	if (need(c, pos, n, 2, "sameas"))
		return -1;
	const tv *a = &args[0], *b = &args[1];
	bool scalar = a->type == TV_NONE || a->type == TV_BOOL ||
		      a->type == TV_UNDEF;
	*out = a->type == b->type &&
	       (scalar ? tv_eq(a, b)
		: a->type == TV_LIST ? a->l == b->l
		: a->type == TV_DICT || a->type == TV_NS ? a->d == b->d
		: a->type == TV_STR ? a->s.p == b->s.p && a->s.n == b->s.n
				    : tv_eq(a, b));
	return 0;
}

static int t_order(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out,
		   bool swap, bool negate, const char *name)
{
	if (need(c, pos, n, 2, name))
		return -1;
	bool lt;
	if (tpl_less(c, pos, swap ? &args[1] : &args[0],
		     swap ? &args[0] : &args[1], &lt))
		return -1;
	*out = negate ? !lt : lt;
	return 0;
}

static int t_lt(tctx *c, uint32_t pos, const tv *a, size_t n, bool *o) { return t_order(c, pos, a, n, o, false, false, "lt"); }
static int t_gt(tctx *c, uint32_t pos, const tv *a, size_t n, bool *o) { return t_order(c, pos, a, n, o, true, false, "gt"); }
static int t_le(tctx *c, uint32_t pos, const tv *a, size_t n, bool *o) { return t_order(c, pos, a, n, o, true, true, "le"); }
static int t_ge(tctx *c, uint32_t pos, const tv *a, size_t n, bool *o) { return t_order(c, pos, a, n, o, false, true, "ge"); }

static int t_in(tctx *c, uint32_t pos, const tv *args, size_t n, bool *out)
{
	if (need(c, pos, n, 2, "in"))
		return -1;
	const tv *seq = &args[1], *x = &args[0];
	*out = false;
	if (seq->type == TV_STR && x->type == TV_STR)
		*out = !x->s.n || memmem(seq->s.p, seq->s.n, x->s.p, x->s.n);
	else if (seq->type == TV_LIST)
		for (size_t i = 0; i < seq->l->n && !*out; i++)
			*out = tv_eq(x, &seq->l->items[i]);
	else if (seq->type == TV_DICT)
		*out = tv_dict_get(seq->d, *x) != NULL;
	else if (seq->type != TV_UNDEF)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"argument of type '%s' is not iterable",
				tv_type_name(seq));
	return 0;
}

static int t_filter_test(tctx *c, uint32_t pos, const tv *args, size_t n,
			 bool *out, bool tests)
{
	if (need(c, pos, n, 1, tests ? "test" : "filter"))
		return -1;
	char name[64] = "";
	if (args[0].type == TV_STR && args[0].s.n < sizeof name)
		memcpy(name, args[0].s.p, args[0].s.n);
	*out = tests ? tpl_test_exists(name) : tpl_filter_exists(name);
	return 0;
}

static int t_filter(tctx *c, uint32_t pos, const tv *a, size_t n, bool *o) { return t_filter_test(c, pos, a, n, o, false); }
static int t_test(tctx *c, uint32_t pos, const tv *a, size_t n, bool *o) { return t_filter_test(c, pos, a, n, o, true); }

static const struct {
	const char *name;
	test_fn fn;
} tests[] = {
	{"defined", t_defined},	    {"undefined", t_undefined},
	{"none", t_none},	    {"boolean", t_boolean},
	{"true", t_true},	    {"false", t_false},
	{"integer", t_integer},	    {"float", t_float},
	{"number", t_number},	    {"string", t_string},
	{"mapping", t_mapping},	    {"iterable", t_iterable},
	{"sequence", t_sequence},   {"callable", t_callable},
	{"escaped", t_escaped},	    {"lower", t_lower},
	{"upper", t_upper},	    {"even", t_even},
	{"odd", t_odd},		    {"divisibleby", t_divisibleby},
	{"eq", t_eq},		    {"equalto", t_eq},
	{"==", t_eq},		    {"ne", t_ne},
	{"!=", t_ne},		    {"sameas", t_sameas},
	{"lt", t_lt},		    {"lessthan", t_lt},
	{"<", t_lt},		    {"le", t_le},
	{"<=", t_le},		    {"gt", t_gt},
	{"greaterthan", t_gt},	    {">", t_gt},
	{"ge", t_ge},		    {">=", t_ge},
	{"in", t_in},		    {"filter", t_filter},
	{"test", t_test},	    {"truthy", t_truthy},
};

static test_fn find(const char *name)
{
	for (size_t i = 0; i < sizeof tests / sizeof *tests; i++)
		if (!strcmp(tests[i].name, name))
			return tests[i].fn;
	return NULL;
}

bool tpl_test_exists(const char *name)
{
	return find(name) != NULL && strcmp(name, "truthy");
}

int tpl_test(tctx *c, uint32_t pos, const char *name, const tv *args,
	     size_t n, bool *out)
{
	test_fn fn = find(name);
	if (!fn)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER, "no test "
				"named '%s'", name);
	if (tpl_step(c, pos, 1))
		return -1;
	return fn(c, pos, args, n, out);
}
