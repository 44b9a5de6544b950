/* template_value.c - the chat-template interpreter's values: the arena
 * they live in, lists and dicts, truth, equality, Python's str(), repr()
 * and json.dumps() of them, UTF-8 helpers and the conversion from
 * jansson (layer: text). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "text/template_internal.h"

/* ------------------------------------------------------------------------ */
/* Arena                                                                    */
/* ------------------------------------------------------------------------ */

struct tpl_chunk {
	struct tpl_chunk *next;
	size_t used, cap;
	max_align_t data[];
};

#define CHUNK_BYTES ((size_t)64 << 10)

void tpl_arena_init(tpl_arena *a, uint64_t limit_bytes)
{
	a->head = NULL;
	a->used_bytes = 0;
	a->limit_bytes = limit_bytes;
	a->limit_hit = false;
}

void tpl_arena_fini(tpl_arena *a)
{
	struct tpl_chunk *c = a->head;
	while (c) {
		struct tpl_chunk *next = c->next;
		strata_free(c);
		c = next;
	}
	a->head = NULL;
}

void *tpl_alloc(tpl_arena *a, size_t bytes)
{
	bytes = (bytes + 15) & ~(size_t)15;
	if (bytes == 0)
		bytes = 16;
	struct tpl_chunk *c = a->head;
	if (c && c->cap - c->used >= bytes) {
		void *p = (char *)c->data + c->used;
		c->used += bytes;
		return p;
	}
	size_t cap = bytes > CHUNK_BYTES / 2 ? bytes : CHUNK_BYTES;
	if (a->limit_bytes && a->used_bytes + cap > a->limit_bytes) {
		a->limit_hit = true;
		return NULL;
	}
	struct tpl_chunk *n = strata_alloc(sizeof *n + cap);
	if (!n)
		return NULL;
	a->used_bytes += cap;
	n->cap = cap;
	n->used = bytes;
	if (c && cap == bytes && c->cap - c->used > 4096) {
		/* a big block: keep filling the current chunk after it */
		n->next = c->next;
		c->next = n;
	} else {
		n->next = c;
		a->head = n;
	}
	return n->data;
}

/* ------------------------------------------------------------------------ */
/* Buffers and builders                                                     */
/* ------------------------------------------------------------------------ */

void tbuf_init(tbuf *b, tpl_arena *a, uint64_t max_bytes)
{
	b->a = a;
	b->p = NULL;
	b->n = b->cap = 0;
	b->max_bytes = max_bytes;
	b->over = b->failed = false;
}

void tbuf_put(tbuf *b, const char *s, size_t n)
{
	if (b->over || b->failed || n == 0)
		return;
	if (b->max_bytes && b->n + n > b->max_bytes) {
		b->over = true;
		return;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1) {
			if (cap > SIZE_MAX / 2) {
				b->failed = true;
				return;
			}
			cap *= 2;
		}
		char *p = tpl_alloc(b->a, cap);
		if (!p) {
			b->failed = true;
			return;
		}
		if (b->n)
			memcpy(p, b->p, b->n);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

void tbuf_puts(tbuf *b, const char *s)
{
	tbuf_put(b, s, strlen(s));
}

void tbuf_putc(tbuf *b, char ch)
{
	tbuf_put(b, &ch, 1);
}

int tv_list_new(tpl_arena *a, size_t cap, tv *out)
{
	tlist *l = tpl_alloc(a, sizeof *l);
	if (!l)
		return -1;
	l->n = 0;
	l->cap = cap;
	l->items = NULL;
	if (cap && !(l->items = tpl_alloc(a, cap * sizeof(tv))))
		return -1;
	*out = (tv){.type = TV_LIST};
	out->l = l;
	return 0;
}

int tv_list_push(tpl_arena *a, tv *list, tv item)
{
	tlist *l = list->l;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		tv *items = tpl_alloc(a, cap * sizeof(tv));
		if (!items)
			return -1;
		if (l->n)
			memcpy(items, l->items, l->n * sizeof(tv));
		l->items = items;
		l->cap = cap;
	}
	l->items[l->n++] = item;
	return 0;
}

int tv_dict_new(tpl_arena *a, size_t cap, tv *out)
{
	tdict *d = tpl_alloc(a, sizeof *d);
	if (!d)
		return -1;
	d->n = 0;
	d->cap = cap;
	d->keys = d->vals = NULL;
	if (cap && (!(d->keys = tpl_alloc(a, cap * sizeof(tv))) ||
		    !(d->vals = tpl_alloc(a, cap * sizeof(tv)))))
		return -1;
	*out = (tv){.type = TV_DICT};
	out->d = d;
	return 0;
}

tv *tv_dict_get(const tdict *d, tv key)
{
	for (size_t i = 0; i < d->n; i++)
		if (tv_eq(&d->keys[i], &key))
			return &d->vals[i];
	return NULL;
}

tv *tv_dict_get_str(const tdict *d, const char *key, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->keys[i].type == TV_STR && d->keys[i].s.n == n &&
		    !memcmp(d->keys[i].s.p, key, n))
			return &d->vals[i];
	return NULL;
}

int tv_dict_set(tpl_arena *a, tv *dict, tv key, tv val)
{
	tdict *d = dict->d;
	tv *old = tv_dict_get(d, key);
	if (old) {
		*old = val;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4;
		tv *k = tpl_alloc(a, cap * sizeof(tv));
		tv *v = tpl_alloc(a, cap * sizeof(tv));
		if (!k || !v)
			return -1;
		if (d->n) {
			memcpy(k, d->keys, d->n * sizeof(tv));
			memcpy(v, d->vals, d->n * sizeof(tv));
		}
		d->keys = k;
		d->vals = v;
		d->cap = cap;
	}
	d->keys[d->n] = key;
	d->vals[d->n++] = val;
	return 0;
}

int tv_str_copy(tpl_arena *a, const char *p, size_t n, tv *out)
{
	char *s = tpl_alloc(a, n + 1);
	if (!s)
		return -1;
	if (n)
		memcpy(s, p, n);
	s[n] = '\0';
	*out = tv_strref(s, n);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Truth, equality, names                                                   */
/* ------------------------------------------------------------------------ */

bool tv_truthy(const tv *v)
{
	switch (v->type) {
	case TV_UNDEF:
	case TV_NONE:
		return false;
	case TV_BOOL:
		return v->b;
	case TV_INT:
		return v->i != 0;
	case TV_FLOAT:
		return v->f != 0.0;
	case TV_STR:
		return v->s.n != 0;
	case TV_LIST:
		return v->l->n != 0;
	case TV_DICT:
		return v->d->n != 0;
	default:
		return true;
	}
}

bool tv_is_str(const tv *v, const char *s)
{
	size_t n = strlen(s);
	return v->type == TV_STR && v->s.n == n && !memcmp(v->s.p, s, n);
}

static bool is_num(const tv *v)
{
	return v->type == TV_BOOL || v->type == TV_INT || v->type == TV_FLOAT;
}

static double num_f(const tv *v)
{
	return v->type == TV_FLOAT ? v->f
	       : v->type == TV_INT ? (double)v->i
				   : (double)v->b;
}

bool tv_eq(const tv *a, const tv *b)
{
	if (is_num(a) && is_num(b)) {
		if (a->type != TV_FLOAT && b->type != TV_FLOAT) {
			int64_t x = a->type == TV_INT ? a->i : a->b;
			int64_t y = b->type == TV_INT ? b->i : b->b;
			return x == y;
		}
		return num_f(a) == num_f(b);
	}
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case TV_UNDEF:
	case TV_NONE:
		return true;
	case TV_STR:
		return a->s.n == b->s.n && !memcmp(a->s.p, b->s.p, a->s.n);
	case TV_LIST:
		if (a->l->n != b->l->n ||
		    (a->flags & TVF_TUPLE) != (b->flags & TVF_TUPLE))
			return false;
		for (size_t i = 0; i < a->l->n; i++)
			if (!tv_eq(&a->l->items[i], &b->l->items[i]))
				return false;
		return true;
	case TV_DICT:
		if (a->d->n != b->d->n)
			return false;
		for (size_t i = 0; i < a->d->n; i++) {
			tv *o = tv_dict_get(b->d, a->d->keys[i]);
			if (!o || !tv_eq(&a->d->vals[i], o))
				return false;
		}
		return true;
	case TV_NS:
		return a->d == b->d;
	case TV_FUNC:
		return a->fn == b->fn;
	case TV_LOOP:
		return a->loop == b->loop;
	default:
		return false;
	}
}

const char *tv_type_name(const tv *v)
{
	static const char *const names[] = {
		"Undefined", "NoneType", "bool",      "int",
		"float",     "str",	 "list",      "dict",
		"Namespace", "function", "LoopContext",
	};
	if (v->type == TV_LIST && (v->flags & TVF_TUPLE))
		return "tuple";
	return v->type < sizeof names / sizeof *names ? names[v->type] : "?";
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                    */
/* ------------------------------------------------------------------------ */

size_t tpl_utf8_valid(const unsigned char *p, size_t n)
{
	if (!n)
		return 0;
	unsigned c = p[0];
	if (c < 0x80)
		return 1;
	size_t k;
	uint32_t cp, min;
	if (c >= 0xC2 && c <= 0xDF) {
		k = 2, cp = c & 0x1F, min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		k = 3, cp = c & 0x0F, min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		k = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < k)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return k;
}

uint32_t tpl_utf8_decode(const char *p, size_t n, size_t *len)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t k = tpl_utf8_valid(u, n);
	if (k <= 1) {
		*len = 1;
		return n ? u[0] : 0;
	}
	uint32_t cp = u[0] & (0xFF >> (k + 1));
	for (size_t i = 1; i < k; i++)
		cp = (cp << 6) | (u[i] & 0x3F);
	*len = k;
	return cp;
}

size_t tpl_utf8_encode(uint32_t cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t tpl_utf8_count(const char *p, size_t n)
{
	size_t count = 0;
	for (size_t i = 0; i < n; i++)
		count += ((unsigned char)p[i] & 0xC0) != 0x80;
	return count;
}

size_t tpl_utf8_offset(const char *p, size_t n, size_t index)
{
	size_t i = 0;
	while (i < n && index) {
		i++;
		while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80)
			i++;
		index--;
	}
	return i;
}

/* Python's str.isspace() set. */
bool tpl_py_isspace(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) ||
	       cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
	       cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ------------------------------------------------------------------------ */
/* str(), repr()                                                            */
/* ------------------------------------------------------------------------ */

/* Python's repr(float): the shortest digits that read back exactly, in
 * fixed notation for exponents -5 < e < 16, else d.ddde+XX. */
void tv_float_write(tbuf *b, double f)
{
	char buf[64];
	if (isnan(f)) {
		tbuf_puts(b, "nan");
		return;
	}
	if (isinf(f)) {
		tbuf_puts(b, f < 0 ? "-inf" : "inf");
		return;
	}
	int prec = 1;
	for (; prec <= 17; prec++) {
		snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
		if (strtod(buf, NULL) == f)
			break;
	}
	/* buf: [-]d.ddde[+-]XX */
	char digits[32];
	size_t nd = 0;
	const char *q = buf;
	bool neg = *q == '-';
	if (neg)
		q++;
	for (; *q && *q != 'e'; q++)
		if (*q != '.')
			digits[nd++] = *q;
	int exp = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	if (neg)
		tbuf_putc(b, '-');
	if (exp >= -5 && exp < 16) {
		if (exp < 0) {
			tbuf_puts(b, "0.");
			for (int i = 0; i < -exp - 1; i++)
				tbuf_putc(b, '0');
			tbuf_put(b, digits, nd);
		} else {
			for (int i = 0; i <= exp; i++)
				tbuf_putc(b, (size_t)i < nd ? digits[i] : '0');
			tbuf_putc(b, '.');
			if ((size_t)exp + 1 < nd)
				tbuf_put(b, digits + exp + 1, nd - (size_t)exp - 1);
			else
				tbuf_putc(b, '0');
		}
		return;
	}
	tbuf_putc(b, digits[0]);
	if (nd > 1) {
		tbuf_putc(b, '.');
		tbuf_put(b, digits + 1, nd - 1);
	}
	snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
	tbuf_puts(b, buf);
}

/* Python's str.isprintable() for one code point, close enough: controls,
 * surrogates, separators other than space and format characters are not. */
static bool py_printable(uint32_t cp)
{
	if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0))
		return false;
	if (cp == 0xAD || cp == 0x2028 || cp == 0x2029 ||
	    (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
	    (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF)
		return false;
	if (cp != 0x20 && tpl_py_isspace(cp))
		return false;
	return true;
}

static void repr_str(tbuf *b, const char *p, size_t n)
{
	bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
	char quote = sq && !dq ? '"' : '\'';
	tbuf_putc(b, quote);
	for (size_t i = 0; i < n;) {
		size_t k;
		uint32_t cp = tpl_utf8_decode(p + i, n - i, &k);
		char esc[16];
		if (cp == (uint32_t)quote || cp == '\\') {
			tbuf_putc(b, '\\');
			tbuf_putc(b, (char)cp);
		} else if (cp == '\n') {
			tbuf_puts(b, "\\n");
		} else if (cp == '\r') {
			tbuf_puts(b, "\\r");
		} else if (cp == '\t') {
			tbuf_puts(b, "\\t");
		} else if (py_printable(cp)) {
			tbuf_put(b, p + i, k);
		} else {
			snprintf(esc, sizeof esc,
				 cp < 0x100     ? "\\x%02x"
				 : cp < 0x10000 ? "\\u%04x"
						: "\\U%08x",
				 cp);
			tbuf_puts(b, esc);
		}
		i += k;
	}
	tbuf_putc(b, quote);
}

void tv_repr_write(tbuf *b, const tv *v)
{
	switch (v->type) {
	case TV_STR:
		repr_str(b, v->s.p, v->s.n);
		return;
	case TV_LIST: {
		bool tuple = v->flags & TVF_TUPLE;
		tbuf_putc(b, tuple ? '(' : '[');
		for (size_t i = 0; i < v->l->n; i++) {
			if (i)
				tbuf_puts(b, ", ");
			tv_repr_write(b, &v->l->items[i]);
		}
		if (tuple && v->l->n == 1)
			tbuf_putc(b, ',');
		tbuf_putc(b, tuple ? ')' : ']');
		return;
	}
	case TV_DICT:
		tbuf_putc(b, '{');
		for (size_t i = 0; i < v->d->n; i++) {
			if (i)
				tbuf_puts(b, ", ");
			tv_repr_write(b, &v->d->keys[i]);
			tbuf_puts(b, ": ");
			tv_repr_write(b, &v->d->vals[i]);
		}
		tbuf_putc(b, '}');
		return;
	default:
		tv_str_write(b, v);
	}
}

void tv_str_write(tbuf *b, const tv *v)
{
	char num[32];
	switch (v->type) {
	case TV_UNDEF:
		return;
	case TV_NONE:
		tbuf_puts(b, "None");
		return;
	case TV_BOOL:
		tbuf_puts(b, v->b ? "True" : "False");
		return;
	case TV_INT:
		snprintf(num, sizeof num, "%lld", (long long)v->i);
		tbuf_puts(b, num);
		return;
	case TV_FLOAT:
		tv_float_write(b, v->f);
		return;
	case TV_STR:
		tbuf_put(b, v->s.p, v->s.n);
		return;
	case TV_LIST:
	case TV_DICT:
		tv_repr_write(b, v);
		return;
	case TV_NS:
		tbuf_puts(b, "<Namespace ");
		for (size_t i = 0; i < v->d->n; i++) {
			if (i)
				tbuf_puts(b, ", ");
			tv_str_write(b, &v->d->keys[i]);
			tbuf_putc(b, '=');
			tv_repr_write(b, &v->d->vals[i]);
		}
		tbuf_putc(b, '>');
		return;
	case TV_FUNC:
		tbuf_puts(b, "<function ");
		tbuf_puts(b, v->fn->name);
		tbuf_putc(b, '>');
		return;
	default:
		tbuf_puts(b, "<LoopContext>");
	}
}

/* ------------------------------------------------------------------------ */
/* From jansson                                                             */
/* ------------------------------------------------------------------------ */

static int from_json(tpl_arena *a, const json_t *j, tv *out, int depth)
{
	if (depth > 200)
		return -1;
	switch (json_typeof(j)) {
	case JSON_NULL:
		*out = tv_none();
		return 0;
	case JSON_TRUE:
		*out = tv_bool(true);
		return 0;
	case JSON_FALSE:
		*out = tv_bool(false);
		return 0;
	case JSON_INTEGER:
		*out = tv_int((int64_t)json_integer_value(j));
		return 0;
	case JSON_REAL:
		*out = tv_float(json_real_value(j));
		return 0;
	case JSON_STRING:
		return tv_str_copy(a, json_string_value(j), json_string_length(j),
				   out);
	case JSON_ARRAY: {
		size_t n = json_array_size(j);
		if (tv_list_new(a, n, out))
			return -1;
		for (size_t i = 0; i < n; i++) {
			tv item;
			if (from_json(a, json_array_get(j, i), &item, depth + 1))
				return -1;
			out->l->items[out->l->n++] = item;
		}
		return 0;
	}
	case JSON_OBJECT: {
		if (tv_dict_new(a, json_object_size(j), out))
			return -1;
		const char *key;
		size_t klen;
		json_t *val;
		json_object_keylen_foreach((json_t *)j, key, klen, val) {
			tv k, v;
			if (tv_str_copy(a, key, klen, &k) ||
			    from_json(a, val, &v, depth + 1) ||
			    tv_dict_set(a, out, k, v))
				return -1;
		}
		return 0;
	}
	}
	return -1;
}

int tv_from_json(tpl_arena *a, const struct json_t *j, tv *out)
{
	return from_json(a, j, out, 0);
}
