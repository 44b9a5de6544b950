/* template_stmt.c - the chat-template statement parser: template data,
 * {{ output }}, and the statements of Jinja2 that chat templates use
 * (if, for, set, macro, call, filter, break, continue, print and
 * transformers' generation block); tpl_parse is its entry (layer: text).
 *
 * Tags that would reach outside the template (include, import, extends)
 * and the ones chat templates do not use are refused by name.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/template_parse.h"

static tnode *parse_statement(parser *P);

static bool at_end_name(parser *P, const char *const *ends)
{
	for (; ends && *ends; ends++)
		if (is_name(cur(P), *ends))
			return true;
	return false;
}

static int fail_eof(parser *P, const char *const *ends)
{
	char want[160] = "";
	size_t k = 0;
	for (; ends && *ends && k < sizeof want - 40; ends++)
		k += (size_t)snprintf(want + k, sizeof want - k, "%s'%s'",
				      k ? " or " : "", *ends);
	return tpl_pfail(P, cur(P)->pos, "unexpected end of template: "
			 "looking for the tag %s; the innermost block that "
			 "needs to be closed is '%s'", want,
			 P->blocks ? P->block_stack[P->blocks - 1] : "?");
}

/* Data, outputs and statements until a block whose name is in ends (left
 * as the current token) or the end of the template. */
static int subparse(parser *P, const char *const *ends, nvec *body)
{
	for (;;) {
		const ttoken *t = cur(P);
		tnode *x = NULL;
		if (t->type == TK_EOF) {
			return ends ? fail_eof(P, ends) : 0;
		} else if (t->type == TK_DATA) {
			if (!(x = tpl_pnode(P, TN_DATA, t->pos)))
				return -1;
			x->value = tv_strref(t->p, t->n);
			advance(P);
		} else if (t->type == TK_VAR_BEGIN) {
			advance(P);
			if (!(x = tpl_pnode(P, TN_OUTPUT, t->pos)))
				return -1;
			if (!(x->a = tpl_parse_tuple(P, false, true, NULL, false)) ||
			    tpl_pexpect_type(P, TK_VAR_END, "'}}'"))
				return -1;
		} else if (t->type == TK_BLOCK_BEGIN) {
			advance(P);
			if (at_end_name(P, ends))
				return 0;
			if (!(x = parse_statement(P)) ||
			    tpl_pexpect_type(P, TK_BLOCK_END, "'%}'"))
				return -1;
		} else {
			char b[80];
			return tpl_pfail(P, t->pos, "unexpected '%s'",
					 tpl_pdescribe(t, b, sizeof b));
		}
		if (tpl_pvpush(P, body, x))
			return -1;
	}
}

/* `%}` then a body up to one of ends (current token afterwards). */
static int parse_statements(parser *P, const char *const *ends, nvec *body)
{
	if (is_op(cur(P), OP_COLON))
		advance(P);
	if (tpl_pexpect_type(P, TK_BLOCK_END, "'%}'"))
		return -1;
	return subparse(P, ends, body);
}

static int open_block(parser *P, const char *name)
{
	if (P->blocks >= MAX_NEST)
		return tpl_pfail(P, cur(P)->pos, "statements nested deeper "
				 "than %d levels", MAX_NEST);
	P->block_stack[P->blocks++] = name;
	return 0;
}

/* The rest of a block statement with one body (set, macro, call, filter,
 * generation): `%}`, the body up to the tag `end` into x->list, the end
 * tag consumed; the block is open as `name` meanwhile. */
static int parse_block(parser *P, tnode *x, const char *name,
		       const char *end)
{
	const char *const ends[] = {end, NULL};
	nvec body = {0};
	if (open_block(P, name) || parse_statements(P, ends, &body))
		return -1;
	advance(P); /* the end tag */
	P->blocks--;
	x->list = body.p;
	x->n = body.n;
	return 0;
}

static int expect_name(parser *P, const char *name)
{
	if (is_name(cur(P), name)) {
		advance(P);
		return 0;
	}
	char b[80];
	return tpl_pfail(P, cur(P)->pos, "expected '%s', got '%s'", name,
			 tpl_pdescribe(cur(P), b, sizeof b));
}

static bool assignable(const tnode *x)
{
	if (x->kind == TN_NAME)
		return true;
	if (x->kind != TN_TUPLE)
		return false;
	for (size_t i = 0; i < x->n; i++)
		if (x->list[i]->kind != TN_NAME)
			return false;
	return true;
}

static tnode *parse_target(parser *P, const char *extra_end)
{
	tnode *x = tpl_parse_tuple(P, true, false, extra_end, false);
	if (x && !assignable(x)) {
		tpl_pfail(P, x->pos, "can't assign to this expression (only "
			  "names and tuples of names)");
		return NULL;
	}
	return x;
}

/* ------------------------------------------------------------------------ */
/* Statements                                                               */
/* ------------------------------------------------------------------------ */

static tnode *parse_if(parser *P, uint32_t pos)
{
	static const char *const ends[] = {"elif", "else", "endif", NULL};
	static const char *const endif[] = {"endif", NULL};
	tnode *top = tpl_pnode(P, TN_IF, pos), *x = top;
	if (!x || open_block(P, "if"))
		return NULL;
	for (;;) {
		nvec body = {0};
		if (!(x->a = tpl_parse_tuple(P, false, false, NULL, false)) ||
		    parse_statements(P, ends, &body))
			return NULL;
		x->list = body.p;
		x->n = body.n;
		if (is_name(cur(P), "elif")) {
			tnode *e = tpl_pnode(P, TN_IF, cur(P)->pos);
			if (!e || !(x->list2 = tpl_alloc(P->a, sizeof(tnode *)))) {
				tpl_pfail_alloc(P);
				return NULL;
			}
			advance(P);
			x->list2[0] = e;
			x->n2 = 1;
			x = e;
			continue;
		}
		if (is_name(cur(P), "else")) {
			advance(P);
			nvec other = {0};
			if (parse_statements(P, endif, &other))
				return NULL;
			x->list2 = other.p;
			x->n2 = other.n;
		}
		advance(P); /* endif */
		P->blocks--;
		return top;
	}
}

static tnode *parse_for(parser *P, uint32_t pos)
{
	static const char *const ends[] = {"endfor", "else", NULL};
	static const char *const endfor[] = {"endfor", NULL};
	tnode *x = tpl_pnode(P, TN_FOR, pos);
	if (!x)
		return NULL;
	if (!(x->a = parse_target(P, "in")) || expect_name(P, "in") ||
	    !(x->b = tpl_parse_tuple(P, false, false, "recursive", false)))
		return NULL;
	if (is_name(cur(P), "if")) {
		advance(P);
		if (!(x->c = tpl_parse_expression(P, true)))
			return NULL;
	}
	if (is_name(cur(P), "recursive")) {
		tpl_pfail(P, cur(P)->pos, "recursive for loops are not "
			  "supported");
		return NULL;
	}
	nvec body = {0}, other = {0};
	P->loops++;
	if (open_block(P, "for") || parse_statements(P, ends, &body))
		return NULL;
	P->loops--;
	if (is_name(cur(P), "else")) {
		advance(P);
		if (parse_statements(P, endfor, &other))
			return NULL;
	}
	advance(P);
	P->blocks--;
	x->list = body.p;
	x->n = body.n;
	x->list2 = other.p;
	x->n2 = other.n;
	return x;
}

static tnode *parse_set(parser *P, uint32_t pos)
{
	tnode *x = tpl_pnode(P, TN_SET, pos);
	if (!x)
		return NULL;
	if (cur(P)->type == TK_NAME && is_op(peek(P, 1), OP_DOT)) {
		tnode *ns = tpl_pnode(P, TN_NSREF, cur(P)->pos);
		if (!ns || !(ns->name = tpl_pname(P, cur(P))))
			return NULL;
		ns->name_len = cur(P)->n;
		advance(P);
		advance(P);
		if (cur(P)->type != TK_NAME) {
			tpl_pexpect_type(P, TK_NAME, "an attribute name");
			return NULL;
		}
		tnode *attr = tpl_pnode(P, TN_CONST, cur(P)->pos);
		char *an = tpl_pname(P, cur(P));
		if (!attr || !an)
			return NULL;
		attr->value = tv_strref(an, cur(P)->n);
		advance(P);
		ns->b = attr;
		x->a = ns;
	} else if (!(x->a = parse_target(P, NULL))) {
		return NULL;
	}
	if (is_op(cur(P), OP_ASSIGN)) {
		advance(P);
		x->b = tpl_parse_tuple(P, false, true, NULL, false);
		return x->b ? x : NULL;
	}
	x->kind = TN_SET_BLOCK;
	if (is_op(cur(P), OP_PIPE) && !(x->c = tpl_parse_filter(P, NULL, false)))
		return NULL;
	if (parse_block(P, x, "set", "endset"))
		return NULL;
	return x;
}

/* (a, b=default, ...) into x->kw (names) and x->list2 (defaults, NULL
 * where none). */
static int parse_signature(parser *P, tnode *x)
{
	if (tpl_pexpect_op(P, OP_LPAREN, "("))
		return -1;
	const char **names = NULL;
	nvec defs = {0};
	size_t n = 0, cap = 0;
	bool had_default = false;
	while (!is_op(cur(P), OP_RPAREN)) {
		if (n && tpl_pexpect_op(P, OP_COMMA, ","))
			return -1;
		if (cur(P)->type != TK_NAME)
			return tpl_pexpect_type(P, TK_NAME, "a parameter name");
		if (n == cap) {
			cap = cap ? cap * 2 : 4;
			const char **nn = tpl_alloc(P->a, cap * sizeof *nn);
			if (!nn)
				return tpl_pfail_alloc(P);
			if (n)
				memcpy(nn, names, n * sizeof *nn);
			names = nn;
		}
		if (!(names[n++] = tpl_pname(P, cur(P))))
			return -1;
		advance(P);
		tnode *d = NULL;
		if (is_op(cur(P), OP_ASSIGN)) {
			advance(P);
			if (!(d = tpl_parse_expression(P, true)))
				return -1;
			had_default = true;
		} else if (had_default) {
			return tpl_pfail(P, cur(P)->pos, "non-default parameter "
					 "follows default parameter");
		}
		if (tpl_pvpush(P, &defs, d))
			return -1;
	}
	advance(P);
	x->kw = names;
	x->nkw = n;
	x->list2 = defs.p;
	x->n2 = defs.n;
	return 0;
}

/* macro NAME(sig) ... endmacro, and call[(sig)] expr ... endcall. */
static tnode *parse_macro(parser *P, uint32_t pos, bool is_call)
{
	tnode *x = tpl_pnode(P, is_call ? TN_CALL_BLOCK : TN_MACRO, pos);
	if (!x)
		return NULL;
	if (!is_call) {
		if (cur(P)->type != TK_NAME) {
			tpl_pexpect_type(P, TK_NAME, "a macro name");
			return NULL;
		}
		if (!(x->name = tpl_pname(P, cur(P))))
			return NULL;
		x->name_len = cur(P)->n;
		advance(P);
		if (parse_signature(P, x))
			return NULL;
	} else {
		if (is_op(cur(P), OP_LPAREN) && parse_signature(P, x))
			return NULL;
		if (!(x->a = tpl_parse_expression(P, true)))
			return NULL;
		if (x->a->kind != TN_CALL) {
			tpl_pfail(P, x->a->pos, "expected a call after 'call'");
			return NULL;
		}
	}
	int loops = P->loops;
	P->loops = 0; /* a macro body is outside any loop */
	if (parse_block(P, x, is_call ? "call" : "macro",
			is_call ? "endcall" : "endmacro"))
		return NULL;
	P->loops = loops;
	return x;
}

/* filter NAME ... endfilter, generation ... endgeneration. */
static tnode *parse_wrapped(parser *P, uint32_t pos, bool is_filter)
{
	tnode *x = tpl_pnode(P, is_filter ? TN_FILTER_BLOCK : TN_BODY, pos);
	if (!x)
		return NULL;
	if (is_filter && !(x->c = tpl_parse_filter(P, NULL, true)))
		return NULL;
	if (parse_block(P, x, is_filter ? "filter" : "generation",
			is_filter ? "endfilter" : "endgeneration"))
		return NULL;
	return x;
}

static tnode *parse_print(parser *P, uint32_t pos)
{
	tnode *x = tpl_pnode(P, TN_BODY, pos);
	nvec outs = {0};
	if (!x)
		return NULL;
	while (cur(P)->type != TK_BLOCK_END) {
		if (outs.n && tpl_pexpect_op(P, OP_COMMA, ","))
			return NULL;
		tnode *o = tpl_pnode(P, TN_OUTPUT, cur(P)->pos);
		if (!o)
			return NULL;
		if (!(o->a = tpl_parse_expression(P, true)) ||
		    tpl_pvpush(P, &outs, o))
			return NULL;
	}
	x->list = outs.p;
	x->n = outs.n;
	return x;
}

static tnode *parse_statement(parser *P)
{
	const ttoken *t = cur(P);
	if (t->type != TK_NAME) {
		tpl_pfail(P, t->pos, "expected a tag name after '{%%'");
		return NULL;
	}
	uint32_t pos = t->pos;
	advance(P);
	if (is_name(t, "if"))
		return parse_if(P, pos);
	if (is_name(t, "for"))
		return parse_for(P, pos);
	if (is_name(t, "set"))
		return parse_set(P, pos);
	if (is_name(t, "macro") || is_name(t, "call"))
		return parse_macro(P, pos, is_name(t, "call"));
	if (is_name(t, "filter") || is_name(t, "generation"))
		return parse_wrapped(P, pos, is_name(t, "filter"));
	if (is_name(t, "print"))
		return parse_print(P, pos);
	if (is_name(t, "break") || is_name(t, "continue")) {
		if (!P->loops) {
			tpl_pfail(P, pos, "'%.*s' outside of a for loop",
				  (int)t->n, t->p);
			return NULL;
		}
		return tpl_pnode(P, is_name(t, "break") ? TN_BREAK
							: TN_CONTINUE, pos);
	}
	if (is_name(t, "include") || is_name(t, "import") ||
	    is_name(t, "from") || is_name(t, "extends")) {
		tpl_pfail(P, pos, "'%.*s' is not allowed: a chat template "
			  "gets no access to other files", (int)t->n, t->p);
		return NULL;
	}
	char name[64];
	snprintf(name, sizeof name, "%.*s", (int)(t->n > 40 ? 40 : t->n), t->p);
	if (P->blocks)
		tpl_pfail(P, pos, "encountered unknown tag '%s'; the innermost "
			  "block that needs to be closed is '%s'", name,
			  P->block_stack[P->blocks - 1]);
	else
		tpl_pfail(P, pos, "encountered unknown tag '%s'", name);
	return NULL;
}

int tpl_parse(tpl_arena *a, const ttoken *toks, size_t count, tnode **root,
	      tpl_diag *diag)
{
	parser P = {.a = a, .t = toks, .n = count, .diag = diag};
	nvec body = {0};
	if (subparse(&P, NULL, &body))
		return -1;
	tnode *x = tpl_pnode(&P, TN_BODY, 0);
	if (!x)
		return -1;
	x->list = body.p;
	x->n = body.n;
	*root = x;
	return 0;
}
