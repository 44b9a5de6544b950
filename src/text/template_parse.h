/* template_parse.h - the parser state shared by the expression parser
 * (template_parse.c) and the statement parser (template_stmt.c)
 * (layer: text). */
#ifndef STRATA_TEXT_TEMPLATE_PARSE_H
#define STRATA_TEXT_TEMPLATE_PARSE_H

#include <string.h>

#include "text/template_internal.h"

#define MAX_NEST 100

typedef struct parser {
	tpl_arena *a;
	const ttoken *t;
	size_t n, i;
	tpl_diag *diag;
	int nest;  /* expression depth */
	int loops; /* enclosing for loops, for break/continue */
	const char *block_stack[MAX_NEST]; /* open statement names */
	int blocks;
} parser;

typedef struct nvec {
	tnode **p;
	size_t n, cap;
} nvec;

static inline const ttoken *cur(parser *P) { return &P->t[P->i]; }

static inline const ttoken *peek(parser *P, size_t k)
{
	return P->i + k < P->n ? &P->t[P->i + k] : &P->t[P->n - 1];
}

static inline void advance(parser *P)
{
	if (P->i + 1 < P->n)
		P->i++;
}

static inline bool is_op(const ttoken *t, tk_op op)
{
	return t->type == TK_OP && t->op == op;
}

static inline bool is_name(const ttoken *t, const char *s)
{
	size_t k = strlen(s);
	return t->type == TK_NAME && t->n == k && !memcmp(t->p, s, k);
}

int tpl_pfail(parser *P, uint32_t pos, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Records an allocation failure (an empty message: E_NOMEM); -1. */
int tpl_pfail_alloc(parser *P);
/* The arena's node, name copy and vector growth record their own
 * allocation failure (tpl_pfail_alloc): a caller only returns. */
tnode *tpl_pnode(parser *P, tn_kind kind, uint32_t pos);
int tpl_pvpush(parser *P, nvec *v, tnode *x);
char *tpl_pname(parser *P, const ttoken *t);
int tpl_pexpect_op(parser *P, tk_op op, const char *text);
int tpl_pexpect_type(parser *P, tk_type type, const char *what);
const char *tpl_pdescribe(const ttoken *t, char *buf, size_t cap);
tnode *tpl_parse_expression(parser *P, bool with_condexpr);
tnode *tpl_parse_tuple(parser *P, bool simplified, bool with_condexpr,
		       const char *extra_end, bool explicit_parens);
tnode *tpl_parse_filter(parser *P, tnode *operand, bool start_inline);
tnode *tpl_parse_primary(parser *P);
int tpl_parse_call_args(parser *P, tnode *x);

#endif
