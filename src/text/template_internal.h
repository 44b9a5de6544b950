/* template_internal.h - the chat-template interpreter's inner types: the
 * arena, values, tokens, syntax nodes and the render context, shared by
 * the template_*.c files of the text layer only (layer: text).
 *
 * The interpreter is a tree walker over the Jinja subset that real chat
 * templates use, with the semantics of Jinja2 3.1 as Hugging Face
 * transformers configures it (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols). Every value of one render lives in one
 * arena that is freed whole at the end, so there is no reference counting
 * and a namespace that holds itself cannot leak.
 */
#ifndef STRATA_TEXT_TEMPLATE_INTERNAL_H
#define STRATA_TEXT_TEMPLATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "strata/text.h"

/* ------------------------------------------------------------------------ */
/* Arena                                                                    */
/* ------------------------------------------------------------------------ */

/* A bump allocator over chunks from strata_alloc, with a byte budget: an
 * allocation past the budget fails like an allocation the system refused,
 * but says so (limit_hit), so the caller reports the limit, not E_NOMEM. */
typedef struct tpl_arena {
	struct tpl_chunk *head;
	uint64_t used_bytes, limit_bytes;
	bool limit_hit;
} tpl_arena;

void tpl_arena_init(tpl_arena *a, uint64_t limit_bytes);
void tpl_arena_fini(tpl_arena *a);
void *tpl_alloc(tpl_arena *a, size_t bytes); /* 8-aligned; NULL on failure */

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum tv_type {
	TV_UNDEF,
	TV_NONE,
	TV_BOOL,
	TV_INT,
	TV_FLOAT,
	TV_STR,
	TV_LIST, /* also tuples (flag TVF_TUPLE) */
	TV_DICT,
	TV_NS,	 /* namespace(): a dict whose attributes can be set */
	TV_FUNC, /* globals, bound methods, macros, loop.cycle */
	TV_LOOP, /* the loop variable of a for */
} tv_type;

#define TVF_TUPLE 1u

struct tlist;
struct tdict;
struct tfunc;
struct tloop;
struct tundef;

typedef struct tv {
	uint8_t type;  /* tv_type */
	uint8_t flags; /* TVF_* */
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *p; /* UTF-8, not NUL-terminated */
			size_t n;
		} s;
		struct tlist *l;
		struct tdict *d; /* TV_DICT and TV_NS */
		struct tfunc *fn;
		struct tloop *loop;
		struct tundef *u; /* may be NULL: a plain undefined */
	};
} tv;

typedef struct tlist {
	size_t n, cap;
	tv *items;
} tlist;

typedef struct tdict {
	size_t n, cap;
	tv *keys, *vals;
} tdict;

/* Why a value is undefined, for the message when it is used. */
typedef struct tundef {
	const char *name; /* the missing name, attribute or key */
	size_t name_len;
	const char *owner; /* "dict object" ... or NULL for a variable */
	bool key_is_int;
	int64_t key;
} tundef;

struct tctx;
typedef int (*tbuiltin_fn)(struct tctx *c, struct tfunc *self, uint32_t pos,
			   const tv *args, size_t nargs, const char *const *kw,
			   const tv *kwv, size_t nkw, tv *out);

typedef struct tfunc {
	const char *name;
	tbuiltin_fn call;	  /* NULL for a macro */
	tv self;		  /* bound object of a method */
	const struct tnode *macro; /* a macro's definition */
	struct tframe *scope;	   /* the frame a macro body sees */
} tfunc;

typedef struct tloop {
	const tv *items; /* the (filtered) sequence */
	int64_t index0, length, depth;
} tloop;

static inline tv tv_undef(void) { tv v = {.type = TV_UNDEF}; v.u = NULL; return v; }
static inline tv tv_none(void) { tv v = {.type = TV_NONE}; return v; }
static inline tv tv_bool(bool b) { tv v = {.type = TV_BOOL}; v.b = b; return v; }
static inline tv tv_int(int64_t i) { tv v = {.type = TV_INT}; v.i = i; return v; }
static inline tv tv_float(double f) { tv v = {.type = TV_FLOAT}; v.f = f; return v; }
static inline tv tv_strref(const char *p, size_t n)
{
	tv v = {.type = TV_STR};
	v.s.p = p;
	v.s.n = n;
	return v;
}

/* A growable byte buffer in the arena (rendered output, str(), JSON). */
typedef struct tbuf {
	tpl_arena *a;
	char *p;
	size_t n, cap;
	uint64_t max_bytes; /* 0: no limit but the arena's */
	bool over;	    /* max_bytes was passed */
	bool failed;	    /* the arena refused */
} tbuf;

void tbuf_init(tbuf *b, tpl_arena *a, uint64_t max_bytes);
void tbuf_put(tbuf *b, const char *s, size_t n);
void tbuf_puts(tbuf *b, const char *s);
void tbuf_putc(tbuf *b, char ch);

/* Builders; each returns 0 or -1 when the arena refused. */
int tv_list_new(tpl_arena *a, size_t cap, tv *out);
int tv_list_push(tpl_arena *a, tv *list, tv item);
int tv_dict_new(tpl_arena *a, size_t cap, tv *out);
int tv_dict_set(tpl_arena *a, tv *dict, tv key, tv val);
int tv_str_copy(tpl_arena *a, const char *p, size_t n, tv *out);
/* The value of key in a dict, or NULL. */
tv *tv_dict_get(const tdict *d, tv key);
tv *tv_dict_get_str(const tdict *d, const char *key, size_t n);

bool tv_truthy(const tv *v);
bool tv_is_str(const tv *v, const char *s); /* equal to the C string */
/* Python ==: numbers across int/float/bool, deep lists and dicts. */
bool tv_eq(const tv *a, const tv *b);
/* Python's type name as Jinja2 writes it in messages ("str", "dict"). */
const char *tv_type_name(const tv *v);

/* Python str() and repr() of a value appended to b; Undefined is "". */
void tv_str_write(tbuf *b, const tv *v);
void tv_repr_write(tbuf *b, const tv *v);
void tv_float_write(tbuf *b, double f); /* Python repr(float) */
/* Python json.dumps(v, ensure_ascii=False, indent, separators, sort_keys):
 * indent < 0 none, else that many spaces (indent_str overrides when not
 * NULL). Returns 0, or -1 naming the value that JSON cannot hold in
 * *bad (type name). */
int tv_json_write(tbuf *b, const tv *v, int indent, const char *indent_str,
		  const char *item_sep, const char *key_sep, bool sort_keys,
		  const char **bad);

/* UTF-8 helpers: strings here are always valid UTF-8. */
size_t tpl_utf8_count(const char *p, size_t n); /* code points */
size_t tpl_utf8_offset(const char *p, size_t n, size_t index); /* byte */
uint32_t tpl_utf8_decode(const char *p, size_t n, size_t *len);
size_t tpl_utf8_encode(uint32_t cp, char out[4]);
bool tpl_py_isspace(uint32_t cp);
/* Length of valid UTF-8 starting at p (0 when invalid). */
size_t tpl_utf8_valid(const unsigned char *p, size_t n);

/* Converts a jansson value (as text) into an arena value. */
struct json_t;
int tv_from_json(tpl_arena *a, const struct json_t *j, tv *out);

/* ------------------------------------------------------------------------ */
/* Tokens                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum tk_type {
	TK_EOF,
	TK_DATA,
	TK_VAR_BEGIN,
	TK_VAR_END,
	TK_BLOCK_BEGIN,
	TK_BLOCK_END,
	TK_NAME,
	TK_STRING,
	TK_INT,
	TK_FLOAT,
	TK_OP,
} tk_type;

/* Operators; the lexer's longest match picks one. */
typedef enum tk_op {
	OP_ADD, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE,
	OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
	OP_EQ, OP_NE, OP_GT, OP_GTEQ, OP_LT, OP_LTEQ, OP_ASSIGN, OP_DOT,
	OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON,
	/* not tokens: node operators */
	OP_NOT, OP_NEG, OP_POS, OP_IN, OP_NOTIN,
} tk_op;

typedef struct ttoken {
	uint8_t type; /* tk_type */
	uint8_t op;   /* tk_op for TK_OP */
	uint32_t pos; /* byte offset in the normalized source */
	const char *p; /* name, data or unescaped string (arena) */
	size_t n;
	int64_t i;
	double f;
} ttoken;

/* ------------------------------------------------------------------------ */
/* Syntax nodes                                                             */
/* ------------------------------------------------------------------------ */

typedef enum tn_kind {
	/* expressions */
	TN_CONST, TN_NAME, TN_LIST, TN_TUPLE, TN_DICT, TN_GETATTR, TN_GETITEM,
	TN_SLICE, TN_CALL, TN_FILTER, TN_TEST, TN_UNARY, TN_BINOP, TN_AND,
	TN_OR, TN_COMPARE, TN_CONCAT, TN_CONDEXPR, TN_NSREF,
	/* statements */
	TN_DATA, TN_OUTPUT, TN_IF, TN_FOR, TN_SET, TN_SET_BLOCK, TN_MACRO,
	TN_CALL_BLOCK, TN_FILTER_BLOCK, TN_BREAK, TN_CONTINUE, TN_BODY,
} tn_kind;

typedef struct tnode {
	uint8_t kind; /* tn_kind */
	uint8_t op;   /* tk_op of a unary/binary/compare node */
	bool negated; /* TEST: is not */
	uint32_t pos;
	struct tnode *a, *b, *c; /* operands; SLICE: start stop step */
	struct tnode **list;	 /* args, items, body, compare operands */
	size_t n;
	struct tnode **list2; /* dict values, else body, macro defaults */
	size_t n2;
	const char **kw; /* keyword argument names (NUL-terminated) */
	struct tnode **kwv;
	size_t nkw;
	const char *name; /* NAME, GETATTR, FILTER, TEST, MACRO (NUL-term.) */
	size_t name_len;
	tv value; /* CONST, DATA */
} tnode;

/* ------------------------------------------------------------------------ */
/* Lexing and parsing                                                       */
/* ------------------------------------------------------------------------ */

/* A parse-time failure: offset and text, reported by the caller with the
 * line and column of the offset. */
typedef struct tpl_diag {
	uint32_t pos;
	char message[320];
} tpl_diag;

/* Lexes the normalized source into *toks (arena). Returns 0 or -1 with
 * diag filled (arena failure: diag->message empty). */
int tpl_lex(tpl_arena *a, const char *src, size_t n, ttoken **toks,
	    size_t *count, tpl_diag *diag);

/* Parses tokens into a TN_BODY root. Same return convention. */
int tpl_parse(tpl_arena *a, const ttoken *toks, size_t count, tnode **root,
	      tpl_diag *diag);

/* Line and column (1-based, columns in bytes) of an offset. */
void tpl_line_col(const char *src, size_t n, uint32_t pos, uint32_t *line,
		  uint32_t *col);

/* ------------------------------------------------------------------------ */
/* Rendering                                                                */
/* ------------------------------------------------------------------------ */

typedef struct tframe {
	struct tframe *parent;
	size_t n, cap;
	const char **names;
	size_t *lens;
	tv *vals;
} tframe;

struct strata_chat_template {
	tpl_arena arena; /* tokens and nodes */
	char *src;	 /* normalized source (arena), for line numbers */
	size_t src_len;
	tnode *root;
};

typedef struct tctx {
	const struct strata_chat_template *t;
	tpl_arena *a;
	strata_error *err;
	tbuf *out;
	tframe *frame, *root;
	uint64_t steps, max_steps;
	uint64_t max_output_bytes;
	int depth;    /* macro calls and nested captures */
	int control;  /* 1 break, 2 continue, pending */
	struct tm now;
	tv caller; /* the body of the call block being run, or undefined */
	bool failed;
} tctx;

/* Fails the render: err gets code and "line L, column C: message". Returns
 * -1 so callers can `return tpl_fail(...)`. */
int tpl_fail(tctx *c, uint32_t pos, strata_status code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* An arena refusal at pos: the memory limit or E_NOMEM. */
int tpl_fail_alloc(tctx *c, uint32_t pos);
/* Counts one step against the budget. */
int tpl_step(tctx *c, uint32_t pos, uint64_t count);
/* An error for using an undefined value (the Jinja2 message). */
int tpl_fail_undefined(tctx *c, uint32_t pos, const tv *v);

int tpl_exec_body(tctx *c, tnode *const *body, size_t n);
/* Runs body in frame into a fresh buffer whose text becomes *out. */
int tpl_capture(tctx *c, uint32_t pos, tnode *const *body, size_t n,
		tframe *frame, tv *out);
tv *tpl_frame_find(tframe *f, const char *name, size_t n);
int tpl_frame_set(tctx *c, tframe *f, const char *name, size_t n, tv v);
/* obj[start:stop:step] for lists, tuples and strings (None: omitted). */
int tpl_slice(tctx *c, uint32_t pos, const tv *obj, const tv *start,
	      const tv *stop, const tv *step, tv *out);
int tpl_eval(tctx *c, const tnode *e, tv *out);
/* Jinja2's environment.getattr / getitem. */
int tpl_getattr(tctx *c, uint32_t pos, const tv *obj, const char *name,
		size_t n, tv *out);
int tpl_getitem(tctx *c, uint32_t pos, const tv *obj, const tv *key, tv *out);
/* Calls a callable value. */
int tpl_call(tctx *c, uint32_t pos, const tv *fn, const tv *args, size_t n,
	     const char *const *kw, const tv *kwv, size_t nkw, tv *out);
/* Sequence view of an iterable (list, tuple, dict keys, string chars,
 * undefined: empty); -1 with an error for others. */
int tpl_iterate(tctx *c, uint32_t pos, const tv *v, tv **items, size_t *n);
/* Operators (template_ops.c): e is the node of its kind. */
int tpl_arith(tctx *c, uint32_t pos, int op, const tv *a, const tv *b, tv *out);
int tpl_compare(tctx *c, const tnode *e, tv *out);
int tpl_unary(tctx *c, const tnode *e, tv *out);
int tpl_concat(tctx *c, const tnode *e, tv *out);
/* str(v) as a new string value. */
int tpl_to_str(tctx *c, uint32_t pos, const tv *v, tv *out);
/* Python comparison a < b (numbers, strings, lists); -1 on a type error. */
int tpl_less(tctx *c, uint32_t pos, const tv *a, const tv *b, bool *out);

/* Builtins (template_filters*.c, template_tests.c, template_methods.c). */
typedef int (*tpl_filter_fn)(tctx *c, uint32_t pos, const tv *args, size_t n,
			     const char *const *kw, const tv *kwv, size_t nkw,
			     tv *out);
struct tpl_filter_entry {
	const char *name;
	tpl_filter_fn fn;
};
extern const struct tpl_filter_entry *tpl_text_filters; /* NULL-ended */
int tpl_filter(tctx *c, uint32_t pos, const char *name, const tv *args,
	       size_t n, const char *const *kw, const tv *kwv, size_t nkw,
	       tv *out);
int tpl_test(tctx *c, uint32_t pos, const char *name, const tv *args,
	     size_t n, bool *out);
bool tpl_filter_exists(const char *name);
bool tpl_test_exists(const char *name);
/* A bound method of a str, dict or list, or false. */
bool tpl_method(tctx *c, const tv *obj, const char *name, size_t n, tv *out);
bool tpl_loop_method(tctx *c, const tv *loop, const char *name, size_t n,
		     tv *out);
/* Shared by the str methods and the filters (template_methods.c). */
enum { TPL_CASE_UPPER, TPL_CASE_LOWER, TPL_CASE_TITLE, TPL_CASE_CAPITALIZE };
int tpl_case_map(tctx *c, uint32_t pos, const tv *s, int mode, tv *out);
int tpl_strip(const tv *s, const tv *chars, int which, tv *out);
int tpl_split(tctx *c, uint32_t pos, const tv *s, const tv *sep,
	      int64_t maxsplit, bool from_right, tv *out);
int tpl_replace(tctx *c, uint32_t pos, const tv *s, const tv *old,
		const tv *new_, int64_t count, tv *out);
/* A global function (range, namespace, raise_exception, strftime_now,
 * dict, cycler ...), or false. */
bool tpl_global(const char *name, size_t n, tv *out);
/* Keyword argument by name, or NULL. */
const tv *tpl_kwarg(const char *const *kw, const tv *kwv, size_t nkw,
		    const char *name);

#endif
