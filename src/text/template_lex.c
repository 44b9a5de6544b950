/* template_lex.c - the chat-template lexer: data, tags and the tokens
 * inside them, with whitespace control exactly as Jinja2 3.1's lexer does
 * it under trim_blocks and lstrip_blocks (`{%-`, `-%}`, `{%+`, `+%}`), raw
 * blocks, comments and Python string escapes (layer: text).
 *
 * Trust: the source is hostile. It has been checked to be UTF-8 and its
 * line breaks normalized (template.c); every scan here is bounded by n.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/template_internal.h"

typedef struct lexer {
	tpl_arena *a;
	const char *s;
	size_t n, pos;
	ttoken *toks;
	size_t count, cap;
	tpl_diag *diag;
	bool line_starting;
	char stack[256]; /* open brackets inside a tag */
	int depth;
} lexer;

static int fail(lexer *L, size_t pos, const char *fmt, const char *arg)
{
	L->diag->pos = (uint32_t)pos;
	snprintf(L->diag->message, sizeof L->diag->message, fmt, arg);
	return -1;
}

static int fail_alloc(lexer *L)
{
	L->diag->pos = (uint32_t)L->pos;
	L->diag->message[0] = '\0';
	return -1;
}

static ttoken *push(lexer *L, tk_type type, size_t pos)
{
	if (L->count == L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 64;
		ttoken *t = tpl_alloc(L->a, cap * sizeof *t);
		if (!t)
			return NULL;
		if (L->count)
			memcpy(t, L->toks, L->count * sizeof *t);
		L->toks = t;
		L->cap = cap;
	}
	ttoken *t = &L->toks[L->count++];
	memset(t, 0, sizeof *t);
	t->type = (uint8_t)type;
	t->pos = (uint32_t)pos;
	return t;
}

static bool starts(const lexer *L, size_t at, const char *lit)
{
	size_t k = strlen(lit);
	return at + k <= L->n && !memcmp(L->s + at, lit, k);
}

/* Length of the Python whitespace character at `at`, or 0. */
static size_t space_at(const lexer *L, size_t at)
{
	if (at >= L->n)
		return 0;
	size_t k;
	uint32_t cp = tpl_utf8_decode(L->s + at, L->n - at, &k);
	return tpl_py_isspace(cp) ? k : 0;
}

static size_t skip_spaces(const lexer *L, size_t at)
{
	size_t k;
	while ((k = space_at(L, at)))
		at += k;
	return at;
}

/* Length of text after stripping Python whitespace at its end. */
static size_t rstrip_len(const char *p, size_t n)
{
	while (n) {
		size_t start = n - 1;
		while (start && ((unsigned char)p[start] & 0xC0) == 0x80)
			start--;
		size_t k;
		if (!tpl_py_isspace(tpl_utf8_decode(p + start, n - start, &k)))
			break;
		n = start;
	}
	return n;
}

/* Emits the data before a tag, with Jinja2's OptionalLStrip rule: `-`
 * strips all whitespace; otherwise, for blocks and comments, lstrip_blocks
 * strips spaces between the line start and the tag. */
static int emit_data(lexer *L, size_t start, size_t end, char sign,
		     bool is_var)
{
	size_t n = end - start;
	const char *p = L->s + start;
	if (sign == '-') {
		n = rstrip_len(p, n);
	} else if (sign != '+' && !is_var) {
		size_t l_pos = 0;
		for (size_t i = n; i > 0; i--)
			if (p[i - 1] == '\n') {
				l_pos = i;
				break;
			}
		if ((l_pos > 0 || L->line_starting) && l_pos < n &&
		    rstrip_len(p + l_pos, n - l_pos) == 0)
			n = l_pos;
	}
	if (!n)
		return 0;
	ttoken *t = push(L, TK_DATA, start);
	if (!t)
		return fail_alloc(L);
	t->p = p;
	t->n = n;
	return 0;
}

/* A tag end at `at`: for blocks `+%}`, `-%}\s*`, `%}\n?`; for variables
 * `-}}\s*`, `}}`. Returns the position after it, or 0. */
static size_t tag_end(const lexer *L, size_t at, bool block)
{
	if (block) {
		if (starts(L, at, "+%}"))
			return at + 3;
		if (starts(L, at, "-%}"))
			return skip_spaces(L, at + 3);
		if (starts(L, at, "%}"))
			return at + 2 + (starts(L, at + 2, "\n") ? 1 : 0);
		return 0;
	}
	if (starts(L, at, "-}}"))
		return skip_spaces(L, at + 3);
	if (starts(L, at, "}}"))
		return at + 2;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Literals                                                                 */
/* ------------------------------------------------------------------------ */

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* Python's unicode-escape decoding of a string literal's body. */
static int unescape(lexer *L, size_t at, const char *p, size_t n, ttoken *t)
{
	char *o = tpl_alloc(L->a, n + 1);
	if (!o)
		return fail_alloc(L);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\\' || i + 1 == n) {
			o[k++] = p[i];
			continue;
		}
		char e = p[++i];
		const char *simple = strchr("\\'\"abfnrtv\n", e);
		if (simple && e) {
			static const char to[] = "\\'\"\a\b\f\n\r\t\v";
			if (e != '\n')
				o[k++] = to[simple - "\\'\"abfnrtv\n"];
			continue;
		}
		if (e >= '0' && e <= '7') {
			unsigned v = 0;
			int d = 0;
			for (; d < 3 && i < n && p[i] >= '0' && p[i] <= '7'; d++)
				v = v * 8 + (unsigned)(p[i++] - '0');
			i--;
			k += tpl_utf8_encode(v, o + k);
			continue;
		}
		int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
		if (!digits) {
			if (e == 'N')
				return fail(L, at, "%s", "\\N{...} escapes are "
					    "not supported in string literals");
			o[k++] = '\\';
			o[k++] = e;
			continue;
		}
		uint32_t v = 0;
		for (int d = 0; d < digits; d++) {
			int h = i + 1 + (size_t)d < n ? hexval(p[i + 1 + d]) : -1;
			if (h < 0)
				return fail(L, at, "truncated \\%s escape in a "
					    "string literal", e == 'x' ? "xXX"
					    : e == 'u' ? "uXXXX" : "UXXXXXXXX");
			v = v * 16 + (uint32_t)h;
		}
		i += (size_t)digits;
		if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
			return fail(L, at, "%s", "string literal escape is not "
				    "a Unicode scalar value (a surrogate or "
				    "past U+10FFFF)");
		k += tpl_utf8_encode(v, o + k);
	}
	o[k] = '\0';
	t->p = o;
	t->n = k;
	return 0;
}

static int lex_string(lexer *L)
{
	size_t at = L->pos;
	char q = L->s[at];
	size_t i = at + 1;
	while (i < L->n && L->s[i] != q)
		i += L->s[i] == '\\' && i + 1 < L->n ? 2 : 1;
	if (i >= L->n)
		return fail(L, at, "%s", "unterminated string literal");
	ttoken *t = push(L, TK_STRING, at);
	if (!t)
		return fail_alloc(L);
	L->pos = i + 1;
	return unescape(L, at, L->s + at + 1, i - at - 1, t);
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Digits with single underscores between them; returns the end. */
static size_t digits_at(const lexer *L, size_t at, int base)
{
	size_t i = at;
	while (i < L->n) {
		char c = L->s[i];
		int v = hexval(c);
		if (v >= 0 && v < base) {
			i++;
		} else if (c == '_' && i > at && i + 1 < L->n &&
			   hexval(L->s[i + 1]) >= 0 &&
			   hexval(L->s[i + 1]) < base) {
			i++;
		} else {
			break;
		}
	}
	return i;
}

static int lex_number(lexer *L)
{
	size_t at = L->pos, i = digits_at(L, at, 10);
	bool is_float = false;
	size_t end = i;
	if (!(at > 0 && L->s[at - 1] == '.')) {
		size_t j = i;
		if (j + 1 < L->n && L->s[j] == '.' && is_digit(L->s[j + 1])) {
			j = digits_at(L, j + 1, 10);
			is_float = true;
			end = j;
		}
		if (j < L->n && (L->s[j] == 'e' || L->s[j] == 'E')) {
			size_t k = j + 1;
			if (k < L->n && (L->s[k] == '+' || L->s[k] == '-'))
				k++;
			if (k < L->n && is_digit(L->s[k])) {
				end = digits_at(L, k, 10);
				is_float = true;
			}
		}
	}
	char buf[128];
	size_t bn = 0;
	ttoken *t;
	if (is_float) {
		for (size_t k = at; k < end && bn + 1 < sizeof buf; k++)
			if (L->s[k] != '_')
				buf[bn++] = L->s[k];
		buf[bn] = '\0';
		if (!(t = push(L, TK_FLOAT, at)))
			return fail_alloc(L);
		t->f = strtod(buf, NULL);
		L->pos = end;
		return 0;
	}
	int base = 10;
	size_t start = at;
	if (L->s[at] == '0' && at + 1 < L->n) {
		char x = L->s[at + 1] | 0x20;
		base = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 10;
		if (base != 10) {
			start = at + 2;
			if (start < L->n && L->s[start] == '_')
				start++;
			end = digits_at(L, start, base);
			if (end == start)
				return fail(L, at, "%s", "invalid number literal");
		} else {
			end = at + 1; /* 0(_?0)* */
			while (end < L->n && (L->s[end] == '0' ||
					      (L->s[end] == '_' && end + 1 < L->n &&
					       L->s[end + 1] == '0')))
				end++;
		}
	}
	uint64_t v = 0;
	for (size_t k = start; k < end; k++) {
		if (L->s[k] == '_')
			continue;
		uint64_t d = (uint64_t)hexval(L->s[k]);
		if (v > (UINT64_C(0x7FFFFFFFFFFFFFFF) - d) / (uint64_t)base)
			return fail(L, at, "%s", "integer literal does not fit "
				    "in 64 bits");
		v = v * (uint64_t)base + d;
	}
	if (!(t = push(L, TK_INT, at)))
		return fail_alloc(L);
	t->i = (int64_t)v;
	L->pos = end;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Operators and tags                                                       */
/* ------------------------------------------------------------------------ */

static const struct {
	const char *text;
	tk_op op;
} ops[] = {
	{"//", OP_FLOORDIV}, {"**", OP_POW},	 {"==", OP_EQ},
	{"!=", OP_NE},	     {">=", OP_GTEQ},	 {"<=", OP_LTEQ},
	{"+", OP_ADD},	     {"-", OP_SUB},	 {"/", OP_DIV},
	{"*", OP_MUL},	     {"%", OP_MOD},	 {"~", OP_TILDE},
	{"[", OP_LBRACKET},  {"]", OP_RBRACKET}, {"(", OP_LPAREN},
	{")", OP_RPAREN},    {"{", OP_LBRACE},	 {"}", OP_RBRACE},
	{">", OP_GT},	     {"<", OP_LT},	 {"=", OP_ASSIGN},
	{".", OP_DOT},	     {":", OP_COLON},	 {"|", OP_PIPE},
	{",", OP_COMMA},     {";", OP_SEMICOLON},
};

static int lex_operator(lexer *L)
{
	for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
		if (!starts(L, L->pos, ops[k].text))
			continue;
		char c = ops[k].text[0];
		char buf[2] = {c, 0};
		if (c == '{' || c == '(' || c == '[') {
			if (L->depth == (int)sizeof L->stack)
				return fail(L, L->pos, "%s", "brackets nested "
					    "deeper than 256 levels");
			L->stack[L->depth++] = c == '{' ? '}' : c == '(' ? ')' : ']';
		} else if (c == '}' || c == ')' || c == ']') {
			if (!L->depth)
				return fail(L, L->pos, "unexpected '%s'", buf);
			if (L->stack[--L->depth] != c) {
				char m[2] = {L->stack[L->depth], 0};
				fail(L, L->pos, "unexpected '%s'", buf);
				size_t len = strlen(L->diag->message);
				snprintf(L->diag->message + len,
					 sizeof L->diag->message - len,
					 ", expected '%s'", m);
				return -1;
			}
		}
		ttoken *t = push(L, TK_OP, L->pos);
		if (!t)
			return fail_alloc(L);
		t->op = (uint8_t)ops[k].op;
		L->pos += strlen(ops[k].text);
		return 0;
	}
	char c[8];
	size_t k;
	tpl_utf8_decode(L->s + L->pos, L->n - L->pos, &k);
	memcpy(c, L->s + L->pos, k);
	c[k] = '\0';
	return fail(L, L->pos, "unexpected character '%s' inside a tag", c);
}

static bool name_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && is_digit(c));
}

/* The tokens of one `{{ ... }}` or `{% ... %}` up to and including its end. */
static int lex_tag(lexer *L, bool block, size_t open)
{
	L->depth = 0;
	for (;;) {
		if (L->pos >= L->n)
			return fail(L, open, "this tag is never closed "
				    "(expected '%s')", block ? "%}" : "}}");
		size_t end;
		if (!L->depth && (end = tag_end(L, L->pos, block))) {
			if (!push(L, block ? TK_BLOCK_END : TK_VAR_END, L->pos))
				return fail_alloc(L);
			L->line_starting = L->s[end - 1] == '\n';
			L->pos = end;
			return 0;
		}
		char c = L->s[L->pos];
		size_t sp = space_at(L, L->pos);
		if (sp) {
			L->pos += sp;
		} else if (is_digit(c)) {
			if (lex_number(L))
				return -1;
		} else if (name_char(c, true)) {
			size_t i = L->pos;
			while (i < L->n && name_char(L->s[i], false))
				i++;
			ttoken *t = push(L, TK_NAME, L->pos);
			if (!t)
				return fail_alloc(L);
			t->p = L->s + L->pos;
			t->n = i - L->pos;
			L->pos = i;
		} else if (c == '\'' || c == '"') {
			if (lex_string(L))
				return -1;
		} else if (lex_operator(L)) {
			return -1;
		}
	}
}

/* `{% raw %}` at `at` (any sign, spaces): the position after its end. */
static size_t raw_begin(const lexer *L, size_t at, char *sign)
{
	size_t i = at + 2;
	*sign = 0;
	if (i < L->n && (L->s[i] == '-' || L->s[i] == '+'))
		*sign = L->s[i++];
	i = skip_spaces(L, i);
	if (!starts(L, i, "raw"))
		return 0;
	i = skip_spaces(L, i + 3);
	if (starts(L, i, "-%}"))
		return skip_spaces(L, i + 3);
	return starts(L, i, "%}") ? i + 2 : 0;
}

static int lex_raw(lexer *L, size_t open)
{
	for (size_t i = L->pos; i + 1 < L->n; i++) {
		if (L->s[i] != '{' || L->s[i + 1] != '%')
			continue;
		size_t j = i + 2;
		char sign = 0;
		if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
			sign = L->s[j++];
		j = skip_spaces(L, j);
		if (!starts(L, j, "endraw"))
			continue;
		size_t end = tag_end(L, skip_spaces(L, j + 6), true);
		if (!end)
			continue;
		if (emit_data(L, L->pos, i, sign, false))
			return -1;
		L->line_starting = L->s[end - 1] == '\n';
		L->pos = end;
		return 0;
	}
	return fail(L, open, "%s", "missing end of raw directive "
		    "({% endraw %})");
}

static int lex_comment(lexer *L, size_t open)
{
	for (size_t i = L->pos; i < L->n; i++) {
		size_t end = 0;
		if ((L->s[i] == '+' || L->s[i] == '-') && starts(L, i + 1, "#}"))
			end = L->s[i] == '+' ? i + 3 : skip_spaces(L, i + 3);
		else if (starts(L, i, "#}"))
			end = i + 2 + (starts(L, i + 2, "\n") ? 1 : 0);
		if (end) {
			L->line_starting = L->s[end - 1] == '\n';
			L->pos = end;
			return 0;
		}
	}
	return fail(L, open, "%s", "missing end of comment tag ('#}')");
}

int tpl_lex(tpl_arena *a, const char *src, size_t n, ttoken **toks,
	    size_t *count, tpl_diag *diag)
{
	lexer L = {.a = a, .s = src, .n = n, .diag = diag,
		   .line_starting = true};
	while (L.pos < n) {
		size_t t = L.pos;
		while (t + 1 < n && !(src[t] == '{' && (src[t + 1] == '{' ||
							src[t + 1] == '%' ||
							src[t + 1] == '#')))
			t++;
		if (t + 1 >= n) { /* the rest is data */
			ttoken *d = push(&L, TK_DATA, L.pos);
			if (!d)
				return fail_alloc(&L);
			d->p = src + L.pos;
			d->n = n - L.pos;
			break;
		}
		char kind = src[t + 1];
		char sign = t + 2 < n && (src[t + 2] == '-' || src[t + 2] == '+')
				    ? src[t + 2] : 0;
		size_t after;
		if (kind == '%' && (after = raw_begin(&L, t, &sign))) {
			if (emit_data(&L, L.pos, t, sign, false))
				return -1;
			L.pos = after;
			if (lex_raw(&L, t))
				return -1;
			continue;
		}
		if (emit_data(&L, L.pos, t, sign, kind == '{'))
			return -1;
		L.pos = t + 2 + (sign ? 1 : 0);
		L.line_starting = false;
		if (kind == '#') {
			if (lex_comment(&L, t))
				return -1;
			continue;
		}
		if (!push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, t))
			return fail_alloc(&L);
		if (lex_tag(&L, kind == '%', t))
			return -1;
	}
	if (!push(&L, TK_EOF, n))
		return fail_alloc(&L);
	*toks = L.toks;
	*count = L.count;
	return 0;
}

void tpl_line_col(const char *src, size_t n, uint32_t pos, uint32_t *line,
		  uint32_t *col)
{
	uint32_t l = 1, c = 1;
	for (size_t i = 0; i < pos && i < n; i++) {
		if (src[i] == '\n') {
			l++;
			c = 1;
		} else {
			c++;
		}
	}
	*line = l;
	*col = c;
}
