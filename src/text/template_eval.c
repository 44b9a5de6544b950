/* template_eval.c - the chat-template evaluator: statements (output,
 * if, for with loop.* and else, set, macros, call and filter blocks,
 * break/continue) and expressions (operators with Python's semantics),
 * under the sandbox's step budget (layer: text).
 *
 * Scopes follow Jinja2: each for-loop iteration has its own frame, so a
 * `set` inside a loop does not outlive the iteration (namespace() exists
 * for that); if-blocks share their enclosing frame.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/template_internal.h"

/* ------------------------------------------------------------------------ */
/* Errors and budget                                                        */
/* ------------------------------------------------------------------------ */

int tpl_fail(tctx *c, uint32_t pos, strata_status code, const char *fmt, ...)
{
	if (c->failed)
		return -1;
	c->failed = true;
	char msg[STRATA_ERROR_MESSAGE_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	uint32_t line, col;
	tpl_line_col(c->t->src, c->t->src_len, pos, &line, &col);
	const char *fix =
		code == STRATA_E_TEXT_TEMPLATE_LIMIT
			? "the template runs away: check it, or raise the limit "
			  "if the conversation is really that large"
		: code == STRATA_E_NOMEM ? "free memory and try again"
					 : "the template cannot render this "
					   "conversation: check the messages "
					   "against what the template expects";
	strata_fail(c->err, code, fix, "chat template line %u, column %u: %s",
		    line, col, msg);
	return -1;
}

int tpl_fail_alloc(tctx *c, uint32_t pos)
{
	if (c->a->limit_hit)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT,
				"the template used more than %llu bytes of "
				"memory", (unsigned long long)c->a->limit_bytes);
	return tpl_fail(c, pos, STRATA_E_NOMEM, "out of memory while "
			"rendering");
}

int tpl_step(tctx *c, uint32_t pos, uint64_t count)
{
	c->steps += count;
	if (c->steps <= c->max_steps)
		return 0;
	return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT, "the template "
			"ran more than %llu steps",
			(unsigned long long)c->max_steps);
}

int tpl_fail_undefined(tctx *c, uint32_t pos, const tv *v)
{
	const tundef *u = v->type == TV_UNDEF ? v->u : NULL;
	if (u && u->owner && u->key_is_int)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"%s has no element %lld", u->owner,
				(long long)u->key);
	if (u && u->owner)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"'%s' has no attribute '%.*s'", u->owner,
				(int)(u->name_len > 80 ? 80 : u->name_len),
				u->name);
	if (u)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"'%.*s' is undefined",
				(int)(u->name_len > 80 ? 80 : u->name_len),
				u->name);
	return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_RENDER,
			"an undefined value was used");
}

/* ------------------------------------------------------------------------ */
/* Frames                                                                   */
/* ------------------------------------------------------------------------ */

static tv *frame_find(tframe *f, const char *name, size_t n)
{
	for (; f; f = f->parent)
		for (size_t i = f->n; i > 0; i--)
			if (f->lens[i - 1] == n && !memcmp(f->names[i - 1], name, n))
				return &f->vals[i - 1];
	return NULL;
}

static int frame_set(tctx *c, tframe *f, const char *name, size_t n, tv v)
{
	for (size_t i = 0; i < f->n; i++)
		if (f->lens[i] == n && !memcmp(f->names[i], name, n)) {
			f->vals[i] = v;
			return 0;
		}
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 8;
		const char **names = tpl_alloc(c->a, cap * sizeof *names);
		size_t *lens = tpl_alloc(c->a, cap * sizeof *lens);
		tv *vals = tpl_alloc(c->a, cap * sizeof *vals);
		if (!names || !lens || !vals)
			return -1;
		if (f->n) {
			memcpy(names, f->names, f->n * sizeof *names);
			memcpy(lens, f->lens, f->n * sizeof *lens);
			memcpy(vals, f->vals, f->n * sizeof *vals);
		}
		f->names = names;
		f->lens = lens;
		f->vals = vals;
		f->cap = cap;
	}
	f->names[f->n] = name;
	f->lens[f->n] = n;
	f->vals[f->n++] = v;
	return 0;
}

static int lookup(tctx *c, const tnode *e, tv *out)
{
	tv *v = frame_find(c->frame, e->name, e->name_len);
	if (v) {
		*out = *v;
		return 0;
	}
	if (tpl_global(e->name, e->name_len, out))
		return 0;
	tundef *u = tpl_alloc(c->a, sizeof *u);
	if (!u)
		return tpl_fail_alloc(c, e->pos);
	memset(u, 0, sizeof *u);
	u->name = e->name;
	u->name_len = e->name_len;
	*out = tv_undef();
	out->u = u;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Expressions                                                              */
/* ------------------------------------------------------------------------ */

/* Evaluates e->list (positional) and e->kwv into arena arrays; with
 * operand, it comes first (filters and tests). */
static int eval_args(tctx *c, const tnode *e, const tv *operand, tv **args,
		     size_t *n, tv **kwv)
{
	size_t extra = operand ? 1 : 0;
	*args = tpl_alloc(c->a, (e->n + extra) * sizeof(tv));
	*kwv = tpl_alloc(c->a, e->nkw * sizeof(tv));
	if (!*args || !*kwv)
		return tpl_fail_alloc(c, e->pos);
	if (operand)
		(*args)[0] = *operand;
	for (size_t i = 0; i < e->n; i++)
		if (tpl_eval(c, e->list[i], &(*args)[i + extra]))
			return -1;
	for (size_t i = 0; i < e->nkw; i++)
		if (tpl_eval(c, e->kwv[i], &(*kwv)[i]))
			return -1;
	*n = e->n + extra;
	return 0;
}

/* A filter chain whose innermost operand is NULL takes `input` there
 * (filter blocks and `set x | f` blocks). */
static int eval_filter(tctx *c, const tnode *e, const tv *input, tv *out)
{
	tv operand, *args, *kwv;
	size_t n;
	if (e->a ? (input && e->a->kind == TN_FILTER
			    ? eval_filter(c, e->a, input, &operand)
			    : tpl_eval(c, e->a, &operand))
		 : (operand = *input, 0))
		return -1;
	if (eval_args(c, e, &operand, &args, &n, &kwv))
		return -1;
	return tpl_filter(c, e->pos, e->name, args, n, e->kw, kwv, e->nkw, out);
}

static int eval_test(tctx *c, const tnode *e, tv *out)
{
	tv operand, *args, *kwv;
	size_t n;
	if (tpl_eval(c, e->a, &operand) ||
	    eval_args(c, e, &operand, &args, &n, &kwv))
		return -1;
	if (e->nkw)
		return tpl_fail(c, e->pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"test '%s' takes no keyword arguments",
				e->name);
	bool r;
	if (tpl_test(c, e->pos, e->name, args, n, &r))
		return -1;
	*out = tv_bool(e->negated ? !r : r);
	return 0;
}

static int eval_call(tctx *c, const tnode *e, tv *out)
{
	tv fn, *args, *kwv;
	size_t n;
	if (tpl_eval(c, e->a, &fn) || eval_args(c, e, NULL, &args, &n, &kwv))
		return -1;
	return tpl_call(c, e->pos, &fn, args, n, e->kw, kwv, e->nkw, out);
}

static int eval_collection(tctx *c, const tnode *e, tv *out)
{
	if (e->kind == TN_DICT) {
		if (tv_dict_new(c->a, e->n, out))
			return tpl_fail_alloc(c, e->pos);
		for (size_t i = 0; i < e->n; i++) {
			tv k, v;
			if (tpl_eval(c, e->list[i], &k) ||
			    tpl_eval(c, e->list2[i], &v))
				return -1;
			if (k.type == TV_LIST || k.type == TV_DICT ||
			    k.type == TV_NS)
				return tpl_fail(c, e->list[i]->pos,
						STRATA_E_TEXT_TEMPLATE_RENDER,
						"unhashable type: '%s'",
						tv_type_name(&k));
			if (tv_dict_set(c->a, out, k, v))
				return tpl_fail_alloc(c, e->pos);
		}
		return 0;
	}
	if (tv_list_new(c->a, e->n, out))
		return tpl_fail_alloc(c, e->pos);
	for (size_t i = 0; i < e->n; i++)
		if (tpl_eval(c, e->list[i], &out->l->items[out->l->n++]))
			return -1;
	if (e->kind == TN_TUPLE)
		out->flags |= TVF_TUPLE;
	return 0;
}

static int eval_getitem(tctx *c, const tnode *e, tv *out)
{
	tv obj, key;
	if (tpl_eval(c, e->a, &obj))
		return -1;
	if (e->b->kind == TN_SLICE) {
		tv part[3] = {tv_none(), tv_none(), tv_none()};
		const tnode *p[3] = {e->b->a, e->b->b, e->b->c};
		for (int i = 0; i < 3; i++)
			if (p[i] && tpl_eval(c, p[i], &part[i]))
				return -1;
		return tpl_slice(c, e->pos, &obj, &part[0], &part[1], &part[2],
				 out);
	}
	if (tpl_eval(c, e->b, &key))
		return -1;
	return tpl_getitem(c, e->pos, &obj, &key, out);
}

int tpl_eval(tctx *c, const tnode *e, tv *out)
{
	if (tpl_step(c, e->pos, 1))
		return -1;
	tv a;
	switch (e->kind) {
	case TN_CONST:
		*out = e->value;
		return 0;
	case TN_NAME:
		return lookup(c, e, out);
	case TN_LIST:
	case TN_TUPLE:
	case TN_DICT:
		return eval_collection(c, e, out);
	case TN_GETATTR:
		if (tpl_eval(c, e->a, &a))
			return -1;
		return tpl_getattr(c, e->pos, &a, e->name, e->name_len, out);
	case TN_GETITEM:
		return eval_getitem(c, e, out);
	case TN_CALL:
		return eval_call(c, e, out);
	case TN_FILTER:
		return eval_filter(c, e, NULL, out);
	case TN_TEST:
		return eval_test(c, e, out);
	case TN_UNARY:
		return tpl_unary(c, e, out);
	case TN_BINOP: {
		tv b;
		if (tpl_eval(c, e->a, &a) || tpl_eval(c, e->b, &b))
			return -1;
		return tpl_arith(c, e->pos, e->op, &a, &b, out);
	}
	case TN_AND:
	case TN_OR:
		if (tpl_eval(c, e->a, &a))
			return -1;
		if (tv_truthy(&a) == (e->kind == TN_OR)) {
			*out = a;
			return 0;
		}
		return tpl_eval(c, e->b, out);
	case TN_COMPARE:
		return tpl_compare(c, e, out);
	case TN_CONCAT:
		return tpl_concat(c, e, out);
	case TN_CONDEXPR:
		if (tpl_eval(c, e->a, &a))
			return -1;
		if (tv_truthy(&a))
			return tpl_eval(c, e->b, out);
		if (e->c)
			return tpl_eval(c, e->c, out);
		*out = tv_undef();
		return 0;
	case TN_SLICE: /* x[a:b, c]: a slice inside a tuple key */
		return tpl_fail(c, e->pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"a slice can only be the whole subscript "
				"(x[a:b], not x[a:b, c])");
	default:
		return tpl_fail(c, e->pos, STRATA_E_INTERNAL, "node %d is not "
				"an expression", e->kind);
	}
}

/* ------------------------------------------------------------------------ */
/* Statements                                                               */
/* ------------------------------------------------------------------------ */

static int emit(tctx *c, uint32_t pos, const char *p, size_t n)
{
	tbuf_put(c->out, p, n);
	if (c->out->over)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT, "the "
				"rendering passed %llu bytes of output",
				(unsigned long long)c->out->max_bytes);
	if (c->out->failed)
		return tpl_fail_alloc(c, pos);
	return 0;
}

int tpl_capture(tctx *c, uint32_t pos, tnode *const *body, size_t n,
		tframe *frame, tv *out)
{
	if (c->depth >= 100)
		return tpl_fail(c, pos, STRATA_E_TEXT_TEMPLATE_LIMIT, "macro "
				"calls or captured blocks nested deeper than "
				"100 levels");
	tbuf b, *saved = c->out;
	tframe *saved_frame = c->frame;
	tbuf_init(&b, c->a, c->max_output_bytes);
	c->out = &b;
	c->frame = frame;
	c->depth++;
	int rc = tpl_exec_body(c, body, n);
	c->depth--;
	c->out = saved;
	c->frame = saved_frame;
	if (rc)
		return -1;
	*out = tv_strref(b.p ? b.p : "", b.n);
	return 0;
}

static int assign(tctx *c, const tnode *target, const tv *v)
{
	if (target->kind == TN_NAME) {
		if (frame_set(c, c->frame, target->name, target->name_len, *v))
			return tpl_fail_alloc(c, target->pos);
		return 0;
	}
	if (target->kind == TN_NSREF) {
		tv *ns = frame_find(c->frame, target->name, target->name_len);
		if (!ns || ns->type != TV_NS)
			return tpl_fail(c, target->pos,
					STRATA_E_TEXT_TEMPLATE_RENDER,
					"cannot assign attribute on "
					"non-namespace object '%s'",
					target->name);
		if (tv_dict_set(c->a, ns, target->b->value, *v))
			return tpl_fail_alloc(c, target->pos);
		return 0;
	}
	tv *items;
	size_t n;
	if (tpl_iterate(c, target->pos, v, &items, &n))
		return -1;
	if (n != target->n)
		return tpl_fail(c, target->pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"%s values to unpack (expected %zu, got %zu)",
				n > target->n ? "too many" : "not enough",
				target->n, n);
	for (size_t i = 0; i < n; i++)
		if (assign(c, target->list[i], &items[i]))
			return -1;
	return 0;
}

static int exec_for(tctx *c, const tnode *s)
{
	tv seq, *items;
	size_t n;
	if (tpl_eval(c, s->b, &seq) || tpl_iterate(c, s->pos, &seq, &items, &n))
		return -1;
	tframe frame = {.parent = c->frame}, *outer = c->frame;
	if (s->c) { /* the `if` filter runs before loop.* is known */
		tv *kept = tpl_alloc(c->a, (n ? n : 1) * sizeof *kept);
		size_t k = 0;
		if (!kept)
			return tpl_fail_alloc(c, s->pos);
		c->frame = &frame;
		for (size_t i = 0; i < n; i++) {
			tv ok;
			frame.n = 0;
			if (assign(c, s->a, &items[i]) || tpl_eval(c, s->c, &ok)) {
				c->frame = outer;
				return -1;
			}
			if (tv_truthy(&ok))
				kept[k++] = items[i];
		}
		c->frame = outer;
		items = kept;
		n = k;
	}
	tloop *L = tpl_alloc(c->a, sizeof *L);
	if (!L)
		return tpl_fail_alloc(c, s->pos);
	L->items = items;
	L->length = (int64_t)n;
	L->depth = 1; /* Jinja2: depth counts recursive loop calls only */
	tv lv = {.type = TV_LOOP};
	lv.loop = L;
	int rc = 0;
	c->frame = &frame;
	for (size_t i = 0; i < n && !rc; i++) {
		L->index0 = (int64_t)i;
		frame.n = 0;
		if (frame_set(c, &frame, "loop", 4, lv)) {
			rc = tpl_fail_alloc(c, s->pos);
			break;
		}
		rc = tpl_step(c, s->pos, 1) || assign(c, s->a, &items[i]) ||
		     tpl_exec_body(c, s->list, s->n);
		if (c->control == 1) {
			c->control = 0;
			break;
		}
		c->control = 0;
	}
	c->frame = outer;
	if (rc)
		return -1;
	if (!n && s->n2)
		return tpl_exec_body(c, s->list2, s->n2);
	return 0;
}

static int exec_set_block(tctx *c, const tnode *s)
{
	tv v;
	if (tpl_capture(c, s->pos, s->list, s->n, c->frame, &v))
		return -1;
	if (s->c && eval_filter(c, s->c, &v, &v))
		return -1;
	return assign(c, s->a, &v);
}

static int exec_macro(tctx *c, const tnode *s)
{
	tfunc *fn = tpl_alloc(c->a, sizeof *fn);
	if (!fn)
		return tpl_fail_alloc(c, s->pos);
	memset(fn, 0, sizeof *fn);
	fn->name = s->name;
	fn->macro = s;
	fn->scope = c->root;
	tv v = {.type = TV_FUNC};
	v.fn = fn;
	if (frame_set(c, c->frame, s->name, s->name_len, v))
		return tpl_fail_alloc(c, s->pos);
	return 0;
}

/* {% call(args) m(...) %}body{% endcall %}: m runs with `caller` bound to
 * the body as a macro. */
static int exec_call_block(tctx *c, const tnode *s)
{
	tfunc *fn = tpl_alloc(c->a, sizeof *fn);
	if (!fn)
		return tpl_fail_alloc(c, s->pos);
	memset(fn, 0, sizeof *fn);
	fn->name = "caller";
	fn->macro = s;
	fn->scope = c->frame;
	tv callee, *args, *kwv, v = {.type = TV_FUNC}, r;
	size_t n;
	v.fn = fn;
	if (tpl_eval(c, s->a->a, &callee) ||
	    eval_args(c, s->a, NULL, &args, &n, &kwv))
		return -1;
	tfunc *target = callee.type == TV_FUNC ? callee.fn : NULL;
	if (!target || !target->macro)
		return tpl_fail(c, s->pos, STRATA_E_TEXT_TEMPLATE_RENDER,
				"a call block needs a macro to call");
	c->caller = v;
	int rc = tpl_call(c, s->pos, &callee, args, n, s->a->kw, kwv,
			  s->a->nkw, &r);
	c->caller = tv_undef();
	if (rc)
		return -1;
	return emit(c, s->pos, r.s.p, r.s.n);
}

static int exec_stmt(tctx *c, const tnode *s)
{
	tv v;
	if (tpl_step(c, s->pos, 1))
		return -1;
	switch (s->kind) {
	case TN_DATA:
		return emit(c, s->pos, s->value.s.p, s->value.s.n);
	case TN_OUTPUT: {
		if (tpl_eval(c, s->a, &v))
			return -1;
		if (v.type == TV_STR)
			return emit(c, s->pos, v.s.p, v.s.n);
		tv str;
		if (tpl_to_str(c, s->pos, &v, &str))
			return -1;
		return emit(c, s->pos, str.s.p, str.s.n);
	}
	case TN_IF:
		if (tpl_eval(c, s->a, &v))
			return -1;
		if (tv_truthy(&v))
			return tpl_exec_body(c, s->list, s->n);
		return tpl_exec_body(c, s->list2, s->n2);
	case TN_FOR:
		return exec_for(c, s);
	case TN_SET:
		if (tpl_eval(c, s->b, &v))
			return -1;
		return assign(c, s->a, &v);
	case TN_SET_BLOCK:
		return exec_set_block(c, s);
	case TN_MACRO:
		return exec_macro(c, s);
	case TN_CALL_BLOCK:
		return exec_call_block(c, s);
	case TN_FILTER_BLOCK:
		if (tpl_capture(c, s->pos, s->list, s->n, c->frame, &v) ||
		    eval_filter(c, s->c, &v, &v) || tpl_to_str(c, s->pos, &v, &v))
			return -1;
		return emit(c, s->pos, v.s.p, v.s.n);
	case TN_BREAK:
		c->control = 1;
		return 0;
	case TN_CONTINUE:
		c->control = 2;
		return 0;
	case TN_BODY:
		return tpl_exec_body(c, s->list, s->n);
	default:
		return tpl_fail(c, s->pos, STRATA_E_INTERNAL, "node %d is not "
				"a statement", s->kind);
	}
}

int tpl_exec_body(tctx *c, tnode *const *body, size_t n)
{
	for (size_t i = 0; i < n && !c->control; i++)
		if (exec_stmt(c, body[i]))
			return -1;
	return 0;
}

tv *tpl_frame_find(tframe *f, const char *name, size_t n)
{
	return frame_find(f, name, n);
}

int tpl_frame_set(tctx *c, tframe *f, const char *name, size_t n, tv v)
{
	return frame_set(c, f, name, n, v);
}
