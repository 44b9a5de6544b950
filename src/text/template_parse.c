/* template_parse.c - the chat-template parser: tokens to syntax nodes,
 * with Jinja2 3.1's grammar and operator precedence (condexpr < or < and <
 * not < compare < + - < ~ < * / // % < ** < unary, filters and tests)
 * and its statements: if/elif/else, for (targets, `if` filter, else),
 * set (names, tuples, namespace attributes, blocks), macro, call, filter
 * blocks, break/continue, print and transformers' generation block
 * (layer: text).
 *
 * Trust: tokens come from hostile text. Nesting is bounded (MAX_NEST) so
 * no input can exhaust the stack.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/template_internal.h"

#include "text/template_parse.h"

int tpl_pfail(parser *P, uint32_t pos, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	P->diag->pos = pos;
	vsnprintf(P->diag->message, sizeof P->diag->message, fmt, ap);
	va_end(ap);
	return -1;
}

int tpl_pfail_alloc(parser *P)
{
	P->diag->pos = P->t[P->i].pos;
	P->diag->message[0] = '\0';
	return -1;
}

const char *tpl_pdescribe(const ttoken *t, char *buf, size_t cap)
{
	static const char *const names[] = {
		"end of template", "template data", "begin of print statement",
		"end of print statement", "begin of statement block",
		"end of statement block", "name", "string", "integer", "float",
	};
	if (t->type == TK_NAME || t->type == TK_OP) {
		static const char *const optext[] = {
			"+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(",
			")", "{", "}", "==", "!=", ">", ">=", "<", "<=", "=",
			".", ":", "|", ",", ";",
		};
		if (t->type == TK_OP)
			snprintf(buf, cap, "%s", optext[t->op]);
		else
			snprintf(buf, cap, "%.*s", (int)(t->n > 60 ? 60 : t->n), t->p);
		return buf;
	}
	return names[t->type < 10 ? t->type : 0];
}

int tpl_pexpect_op(parser *P, tk_op op, const char *text)
{
	if (is_op(cur(P), op)) {
		advance(P);
		return 0;
	}
	char b[80];
	return tpl_pfail(P, cur(P)->pos, "expected '%s', got '%s'", text,
		    tpl_pdescribe(cur(P), b, sizeof b));
}

int tpl_pexpect_type(parser *P, tk_type type, const char *what)
{
	if (cur(P)->type == type) {
		advance(P);
		return 0;
	}
	char b[80];
	return tpl_pfail(P, cur(P)->pos, "expected %s, got '%s'", what,
		    tpl_pdescribe(cur(P), b, sizeof b));
}

tnode *tpl_pnode(parser *P, tn_kind kind, uint32_t pos)
{
	tnode *x = tpl_alloc(P->a, sizeof *x);
	if (!x) {
		tpl_pfail_alloc(P);
		return NULL;
	}
	memset(x, 0, sizeof *x);
	x->kind = (uint8_t)kind;
	x->pos = pos;
	return x;
}

int tpl_pvpush(parser *P, nvec *v, tnode *x)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 4;
		tnode **p = tpl_alloc(P->a, cap * sizeof *p);
		if (!p)
			return tpl_pfail_alloc(P);
		if (v->n)
			memcpy(p, v->p, v->n * sizeof *p);
		v->p = p;
		v->cap = cap;
	}
	v->p[v->n++] = x;
	return 0;
}

char *tpl_pname(parser *P, const ttoken *t)
{
	char *s = tpl_alloc(P->a, t->n + 1);
	if (!s) {
		tpl_pfail_alloc(P);
		return NULL;
	}
	memcpy(s, t->p, t->n);
	s[t->n] = '\0';
	return s;
}

/* ------------------------------------------------------------------------ */
/* Expressions                                                              */
/* ------------------------------------------------------------------------ */

static tnode *parse_unary(parser *P, bool with_filter);
static tnode *parse_postfix(parser *P, tnode *x);

static bool enter(parser *P)
{
	if (P->nest >= MAX_NEST) {
		tpl_pfail(P, cur(P)->pos, "expression nested deeper than %d levels",
		     MAX_NEST);
		return false;
	}
	P->nest++;
	return true;
}

/* ( args, name=kw, ... ) into x->list / x->kw; *args and **kwargs are
 * refused. */
int tpl_parse_call_args(parser *P, tnode *x)
{
	uint32_t pos = cur(P)->pos;
	if (tpl_pexpect_op(P, OP_LPAREN, "("))
		return -1;
	nvec args = {0}, kwv = {0};
	const char **kw = NULL;
	size_t nkw = 0, kwcap = 0;
	while (!is_op(cur(P), OP_RPAREN)) {
		if (args.n || nkw) {
			if (tpl_pexpect_op(P, OP_COMMA, ","))
				return -1;
			if (is_op(cur(P), OP_RPAREN))
				break;
		}
		if (is_op(cur(P), OP_MUL) || is_op(cur(P), OP_POW))
			return tpl_pfail(P, cur(P)->pos, "*args and **kwargs in "
				    "calls are not supported");
		tnode *v;
		if (cur(P)->type == TK_NAME && is_op(peek(P, 1), OP_ASSIGN)) {
			const char *k = tpl_pname(P, cur(P));
			if (!k)
				return -1;
			advance(P);
			advance(P);
			if (!(v = tpl_parse_expression(P, true)))
				return -1;
			if (nkw == kwcap) {
				kwcap = kwcap ? kwcap * 2 : 4;
				const char **nk = tpl_alloc(P->a, kwcap * sizeof *nk);
				if (!nk)
					return tpl_pfail_alloc(P);
				if (nkw)
					memcpy(nk, kw, nkw * sizeof *nk);
				kw = nk;
			}
			kw[nkw++] = k;
			if (tpl_pvpush(P, &kwv, v))
				return -1;
		} else {
			if (nkw)
				return tpl_pfail(P, pos, "invalid syntax for function "
					    "call expression (a positional "
					    "argument after a keyword one)");
			if (!(v = tpl_parse_expression(P, true)) || tpl_pvpush(P, &args, v))
				return -1;
		}
	}
	advance(P);
	x->list = args.p;
	x->n = args.n;
	x->kw = kw;
	x->kwv = kwv.p;
	x->nkw = nkw;
	return 0;
}

tnode *tpl_parse_filter(parser *P, tnode *operand, bool start_inline)
{
	while (is_op(cur(P), OP_PIPE) || start_inline) {
		if (!start_inline)
			advance(P);
		start_inline = false;
		if (cur(P)->type != TK_NAME) {
			tpl_pexpect_type(P, TK_NAME, "a filter name");
			return NULL;
		}
		tnode *f = tpl_pnode(P, TN_FILTER, cur(P)->pos);
		if (!f || !(f->name = tpl_pname(P, cur(P))))
			return NULL;
		f->name_len = cur(P)->n;
		advance(P);
		if (!tpl_filter_exists(f->name)) {
			tpl_pfail(P, f->pos, "no filter named '%s'", f->name);
			return NULL;
		}
		f->a = operand;
		if (is_op(cur(P), OP_LPAREN) && tpl_parse_call_args(P, f))
			return NULL;
		operand = f;
	}
	return operand;
}

static tnode *parse_test(parser *P, tnode *operand)
{
	tnode *x = tpl_pnode(P, TN_TEST, cur(P)->pos);
	if (!x)
		return NULL;
	advance(P); /* is */
	if (is_name(cur(P), "not")) {
		x->negated = true;
		advance(P);
	}
	if (cur(P)->type != TK_NAME) {
		tpl_pexpect_type(P, TK_NAME, "a test name");
		return NULL;
	}
	if (!(x->name = tpl_pname(P, cur(P))))
		return NULL;
	x->name_len = cur(P)->n;
	advance(P);
	if (!tpl_test_exists(x->name)) {
		tpl_pfail(P, x->pos, "no test named '%s'", x->name);
		return NULL;
	}
	x->a = operand;
	const ttoken *t = cur(P);
	if (is_op(t, OP_LPAREN)) {
		if (tpl_parse_call_args(P, x))
			return NULL;
	} else if ((t->type == TK_NAME || t->type == TK_STRING ||
		    t->type == TK_INT || t->type == TK_FLOAT ||
		    is_op(t, OP_LBRACKET) || is_op(t, OP_LBRACE)) &&
		   !is_name(t, "else") && !is_name(t, "or") &&
		   !is_name(t, "and")) {
		if (is_name(t, "is")) {
			tpl_pfail(P, t->pos, "you cannot chain multiple tests "
			     "with is");
			return NULL;
		}
		tnode *arg = tpl_parse_primary(P);
		if (!arg || !(arg = parse_postfix(P, arg)))
			return NULL;
		if (!(x->list = tpl_alloc(P->a, sizeof *x->list))) {
			tpl_pfail_alloc(P);
			return NULL;
		}
		x->list[0] = arg;
		x->n = 1;
	}
	return x;
}

/* [a:b:c] or [expr] after `[` was consumed. */
static tnode *parse_subscribed(parser *P)
{
	uint32_t pos = cur(P)->pos;
	tnode *parts[3] = {NULL, NULL, NULL};
	if (!is_op(cur(P), OP_COLON)) {
		tnode *e = tpl_parse_expression(P, true);
		if (!e || !is_op(cur(P), OP_COLON))
			return e;
		parts[0] = e;
	}
	advance(P); /* : */
	if (!is_op(cur(P), OP_COLON) && !is_op(cur(P), OP_RBRACKET) &&
	    !is_op(cur(P), OP_COMMA) && !(parts[1] = tpl_parse_expression(P, true)))
		return NULL;
	if (is_op(cur(P), OP_COLON)) {
		advance(P);
		if (!is_op(cur(P), OP_RBRACKET) && !is_op(cur(P), OP_COMMA) &&
		    !(parts[2] = tpl_parse_expression(P, true)))
			return NULL;
	}
	tnode *s = tpl_pnode(P, TN_SLICE, pos);
	if (!s)
		return NULL;
	s->a = parts[0];
	s->b = parts[1];
	s->c = parts[2];
	return s;
}

static tnode *parse_subscript(parser *P, tnode *x)
{
	const ttoken *t = cur(P);
	uint32_t pos = t->pos;
	advance(P);
	if (is_op(t, OP_DOT)) {
		const ttoken *at = cur(P);
		tnode *g;
		if (at->type == TK_NAME) {
			g = tpl_pnode(P, TN_GETATTR, pos);
			if (!g || !(g->name = tpl_pname(P, at)))
				return NULL;
			g->name_len = at->n;
		} else if (at->type == TK_INT) {
			tnode *k = tpl_pnode(P, TN_CONST, at->pos);
			g = tpl_pnode(P, TN_GETITEM, pos);
			if (!k || !g)
				return NULL;
			k->value = tv_int(at->i);
			g->b = k;
		} else {
			tpl_pfail(P, at->pos, "expected a name or number after '.'");
			return NULL;
		}
		advance(P);
		g->a = x;
		return g;
	}
	nvec args = {0};
	while (!is_op(cur(P), OP_RBRACKET)) {
		if (args.n && tpl_pexpect_op(P, OP_COMMA, ","))
			return NULL;
		tnode *e = parse_subscribed(P);
		if (!e || tpl_pvpush(P, &args, e))
			return NULL;
	}
	advance(P);
	if (!args.n) {
		tpl_pfail(P, pos, "expected a subscript expression inside []");
		return NULL;
	}
	tnode *g = tpl_pnode(P, TN_GETITEM, pos), *key = args.p[0];
	if (!g)
		return NULL;
	if (args.n > 1) {
		if (!(key = tpl_pnode(P, TN_TUPLE, pos)))
			return NULL;
		key->list = args.p;
		key->n = args.n;
	}
	g->a = x;
	g->b = key;
	return g;
}

/* callee( args ): the call node, its arguments parsed. */
static tnode *parse_call(parser *P, tnode *callee)
{
	tnode *c = tpl_pnode(P, TN_CALL, cur(P)->pos);
	if (!c)
		return NULL;
	c->a = callee;
	return tpl_parse_call_args(P, c) ? NULL : c;
}

static tnode *parse_postfix(parser *P, tnode *x)
{
	for (;;) {
		const ttoken *t = cur(P);
		if (is_op(t, OP_DOT) || is_op(t, OP_LBRACKET)) {
			if (!(x = parse_subscript(P, x)))
				return NULL;
		} else if (is_op(t, OP_LPAREN)) {
			if (!(x = parse_call(P, x)))
				return NULL;
		} else {
			return x;
		}
	}
}

static tnode *parse_filter_expr(parser *P, tnode *x)
{
	for (;;) {
		const ttoken *t = cur(P);
		if (is_op(t, OP_PIPE)) {
			x = tpl_parse_filter(P, x, false);
		} else if (is_name(t, "is")) {
			x = parse_test(P, x);
		} else if (is_op(t, OP_LPAREN)) {
			x = parse_call(P, x);
		} else {
			return x;
		}
		if (!x)
			return NULL;
	}
}

static tnode *parse_list_or_dict(parser *P, bool dict)
{
	tnode *x = tpl_pnode(P, dict ? TN_DICT : TN_LIST, cur(P)->pos);
	if (!x)
		return NULL;
	advance(P);
	tk_op close = dict ? OP_RBRACE : OP_RBRACKET;
	nvec keys = {0}, vals = {0};
	while (!is_op(cur(P), close)) {
		if (keys.n && tpl_pexpect_op(P, OP_COMMA, ","))
			return NULL;
		if (is_op(cur(P), close))
			break;
		tnode *k = tpl_parse_expression(P, true);
		if (!k || tpl_pvpush(P, &keys, k))
			return NULL;
		if (dict) {
			tnode *v;
			if (tpl_pexpect_op(P, OP_COLON, ":") ||
			    !(v = tpl_parse_expression(P, true)) || tpl_pvpush(P, &vals, v))
				return NULL;
		}
	}
	advance(P);
	x->list = keys.p;
	x->n = keys.n;
	x->list2 = vals.p;
	x->n2 = vals.n;
	return x;
}

tnode *tpl_parse_primary(parser *P)
{
	const ttoken *t = cur(P);
	tnode *x = NULL;
	char b[80];
	switch (t->type) {
	case TK_NAME:
		if (!(x = tpl_pnode(P, TN_CONST, t->pos)))
			return NULL;
		if (is_name(t, "true") || is_name(t, "True")) {
			x->value = tv_bool(true);
		} else if (is_name(t, "false") || is_name(t, "False")) {
			x->value = tv_bool(false);
		} else if (is_name(t, "none") || is_name(t, "None")) {
			x->value = tv_none();
		} else {
			x->kind = TN_NAME;
			if (!(x->name = tpl_pname(P, t)))
				return NULL;
			x->name_len = t->n;
		}
		advance(P);
		return x;
	case TK_STRING: {
		if (!(x = tpl_pnode(P, TN_CONST, t->pos)))
			return NULL;
		size_t total = 0, j = P->i;
		for (; P->t[j].type == TK_STRING; j++)
			total += P->t[j].n;
		char *s = tpl_alloc(P->a, total + 1);
		if (!s)
			break;
		size_t k = 0;
		for (; cur(P)->type == TK_STRING; advance(P)) {
			memcpy(s + k, cur(P)->p, cur(P)->n);
			k += cur(P)->n;
		}
		s[k] = '\0';
		x->value = tv_strref(s, k);
		return x;
	}
	case TK_INT:
	case TK_FLOAT:
		if (!(x = tpl_pnode(P, TN_CONST, t->pos)))
			return NULL;
		x->value = t->type == TK_INT ? tv_int(t->i) : tv_float(t->f);
		advance(P);
		return x;
	case TK_OP:
		if (t->op == OP_LPAREN) {
			advance(P);
			if (!(x = tpl_parse_tuple(P, false, true, NULL, true)) ||
			    tpl_pexpect_op(P, OP_RPAREN, ")"))
				return NULL;
			return x;
		}
		if (t->op == OP_LBRACKET || t->op == OP_LBRACE)
			return parse_list_or_dict(P, t->op == OP_LBRACE);
		/* fall through */
	default:
		tpl_pfail(P, t->pos, "unexpected '%s'", tpl_pdescribe(t, b, sizeof b));
		return NULL;
	}
	tpl_pfail_alloc(P);
	return NULL;
}

static tnode *parse_unary(parser *P, bool with_filter)
{
	if (!enter(P))
		return NULL;
	const ttoken *t = cur(P);
	tnode *x;
	if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
		x = tpl_pnode(P, TN_UNARY, t->pos);
		if (!x)
			return NULL;
		x->op = t->op == OP_SUB ? OP_NEG : OP_POS;
		advance(P);
		if (!(x->a = parse_unary(P, false)))
			return NULL;
	} else if (!(x = tpl_parse_primary(P))) {
		return NULL;
	}
	if (!(x = parse_postfix(P, x)))
		return NULL;
	if (with_filter && !(x = parse_filter_expr(P, x)))
		return NULL;
	P->nest--;
	return x;
}

static tnode *binop(parser *P, tn_kind kind, tk_op op, uint32_t pos,
		    tnode *l, tnode *r)
{
	tnode *x = tpl_pnode(P, kind, pos);
	if (!x)
		return NULL;
	x->op = (uint8_t)op;
	x->a = l;
	x->b = r;
	return x;
}

/* One level of left-associative binary operators (Jinja2's ** is one
 * too): operands from `operand`, joined while the current token is one of
 * the level's operators (is_level). */
static tnode *parse_left(parser *P, tnode *(*operand)(parser *),
			 bool (*is_level)(const ttoken *))
{
	tnode *l = operand(P);
	while (l && is_level(cur(P))) {
		uint32_t pos = cur(P)->pos;
		tk_op op = (tk_op)cur(P)->op;
		advance(P);
		tnode *r = operand(P);
		if (!r)
			return NULL;
		l = binop(P, TN_BINOP, op, pos, l, r);
	}
	return l;
}

static tnode *unary_with_filter(parser *P)
{
	return parse_unary(P, true);
}

static bool is_pow_op(const ttoken *t)
{
	return is_op(t, OP_POW);
}

static bool is_mul_op(const ttoken *t)
{
	return is_op(t, OP_MUL) || is_op(t, OP_DIV) || is_op(t, OP_FLOORDIV) ||
	       is_op(t, OP_MOD);
}

static bool is_add_op(const ttoken *t)
{
	return is_op(t, OP_ADD) || is_op(t, OP_SUB);
}

static tnode *parse_pow(parser *P)
{
	return parse_left(P, unary_with_filter, is_pow_op);
}

static tnode *parse_math2(parser *P)
{
	return parse_left(P, parse_pow, is_mul_op);
}

static tnode *parse_concat(parser *P)
{
	tnode *l = parse_math2(P);
	if (!l || !is_op(cur(P), OP_TILDE))
		return l;
	nvec args = {0};
	if (tpl_pvpush(P, &args, l))
		return NULL;
	uint32_t pos = cur(P)->pos;
	while (is_op(cur(P), OP_TILDE)) {
		advance(P);
		tnode *r = parse_math2(P);
		if (!r || tpl_pvpush(P, &args, r))
			return NULL;
	}
	tnode *x = tpl_pnode(P, TN_CONCAT, pos);
	if (!x)
		return NULL;
	x->list = args.p;
	x->n = args.n;
	return x;
}

static tnode *parse_math1(parser *P)
{
	return parse_left(P, parse_concat, is_add_op);
}

static tnode *parse_compare(parser *P)
{
	uint32_t pos = cur(P)->pos;
	tnode *first = parse_math1(P);
	if (!first)
		return NULL;
	nvec ops = {0};
	for (;;) {
		const ttoken *t = cur(P);
		tk_op op;
		if (t->type == TK_OP && (t->op == OP_EQ || t->op == OP_NE ||
					 t->op == OP_LT || t->op == OP_LTEQ ||
					 t->op == OP_GT || t->op == OP_GTEQ)) {
			op = (tk_op)t->op;
			advance(P);
		} else if (is_name(t, "in")) {
			op = OP_IN;
			advance(P);
		} else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
			op = OP_NOTIN;
			advance(P);
			advance(P);
		} else {
			break;
		}
		tnode *r = parse_math1(P);
		if (!r)
			return NULL;
		r = binop(P, TN_BINOP, op, t->pos, NULL, r); /* operand */
		if (!r || tpl_pvpush(P, &ops, r))
			return NULL;
	}
	if (!ops.n)
		return first;
	tnode *x = tpl_pnode(P, TN_COMPARE, pos);
	if (!x)
		return NULL;
	x->a = first;
	x->list = ops.p;
	x->n = ops.n;
	return x;
}

static tnode *parse_not(parser *P)
{
	if (!is_name(cur(P), "not"))
		return parse_compare(P);
	if (!enter(P))
		return NULL;
	uint32_t pos = cur(P)->pos;
	advance(P);
	tnode *a = parse_not(P);
	P->nest--;
	if (!a)
		return NULL;
	tnode *x = binop(P, TN_UNARY, OP_NOT, pos, a, NULL);
	return x;
}

static tnode *parse_andor(parser *P, bool is_or)
{
	tnode *l = is_or ? parse_andor(P, false) : parse_not(P);
	while (l && is_name(cur(P), is_or ? "or" : "and")) {
		uint32_t pos = cur(P)->pos;
		advance(P);
		tnode *r = is_or ? parse_andor(P, false) : parse_not(P);
		if (!r)
			return NULL;
		l = binop(P, is_or ? TN_OR : TN_AND, OP_ADD, pos, l, r);
	}
	return l;
}

tnode *tpl_parse_expression(parser *P, bool with_condexpr)
{
	if (!enter(P))
		return NULL;
	tnode *x = parse_andor(P, true);
	while (x && with_condexpr && is_name(cur(P), "if")) {
		uint32_t pos = cur(P)->pos;
		advance(P);
		tnode *test = parse_andor(P, true), *other = NULL;
		if (!test)
			return NULL;
		if (is_name(cur(P), "else")) {
			advance(P);
			if (!(other = tpl_parse_expression(P, true)))
				return NULL;
		}
		tnode *c = tpl_pnode(P, TN_CONDEXPR, pos);
		if (!c)
			return NULL;
		c->a = test;
		c->b = x;
		c->c = other;
		x = c;
	}
	P->nest--;
	return x;
}

static bool tuple_end(parser *P, const char *extra_end)
{
	const ttoken *t = cur(P);
	return t->type == TK_VAR_END || t->type == TK_BLOCK_END ||
	       t->type == TK_EOF || is_op(t, OP_RPAREN) ||
	       (extra_end && is_name(t, extra_end));
}

tnode *tpl_parse_tuple(parser *P, bool simplified, bool with_condexpr,
		       const char *extra_end, bool explicit_parens)
{
	uint32_t pos = cur(P)->pos;
	nvec args = {0};
	bool is_tuple = false;
	for (;;) {
		if (args.n && tpl_pexpect_op(P, OP_COMMA, ","))
			return NULL;
		if (tuple_end(P, extra_end))
			break;
		tnode *e = simplified ? tpl_parse_primary(P)
				      : tpl_parse_expression(P, with_condexpr);
		if (!e || tpl_pvpush(P, &args, e))
			return NULL;
		if (!is_op(cur(P), OP_COMMA))
			break;
		is_tuple = true;
	}
	if (!is_tuple && args.n)
		return args.p[0];
	if (!is_tuple && !explicit_parens) {
		char b[80];
		tpl_pfail(P, cur(P)->pos, "expected an expression, got '%s'",
		     tpl_pdescribe(cur(P), b, sizeof b));
		return NULL;
	}
	tnode *x = tpl_pnode(P, TN_TUPLE, pos);
	if (!x)
		return NULL;
	x->list = args.p;
	x->n = args.n;
	return x;
}
