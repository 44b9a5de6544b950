/* json.c - a streaming JSON writer with exact 64-bit integers
 * (layer: base). Reading JSON is jansson's job; writing is ours because
 * jansson's integers are signed and byte counts are not. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/base.h"

#define MAX_DEPTH ((int)(sizeof(((strata_json *)0)->need_comma)))

/* ------------------------------------------------------------------------ */

static void put(strata_json *j, const char *s, size_t n)
{
	if (j->status != STRATA_OK)
		return;
	if (strata_grow((void **)&j->buf, &j->cap, j->len + n + 2, 1,
			"JSON output", NULL) != STRATA_OK) {
		j->status = STRATA_E_NOMEM;
		return;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

static void puts_(strata_json *j, const char *s)
{
	put(j, s, strlen(s));
}

static void newline(strata_json *j)
{
	if (!j->pretty)
		return;
	put(j, "\n", 1);
	for (int i = 0; i < j->depth; i++)
		put(j, "  ", 2);
}

/* Records the first misuse; later calls write nothing (put checks). */
static void misuse(strata_json *j)
{
	if (j->status == STRATA_OK)
		j->status = STRATA_E_INTERNAL;
}

/* Comma and indentation before a member or element of the open level. */
static void separate(strata_json *j)
{
	if (j->need_comma[j->depth - 1])
		put(j, ",", 1);
	j->need_comma[j->depth - 1] = true;
	newline(j);
}

/* Checks a value may go here, then writes what precedes it. */
static void before_value(strata_json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->depth == 0) {
		if (j->root_started)
			misuse(j); /* a second top-level value */
		j->root_started = true;
		return;
	}
	if (j->is_object[j->depth - 1]) {
		misuse(j); /* a value in an object needs its key first */
		return;
	}
	separate(j);
}

static void open_(strata_json *j, const char *c, bool object)
{
	before_value(j);
	if (j->depth >= MAX_DEPTH) {
		misuse(j);
		return;
	}
	puts_(j, c);
	j->is_object[j->depth] = object;
	j->need_comma[j->depth++] = false;
}

static void close_(strata_json *j, const char *c, bool object)
{
	if (j->depth == 0 || j->after_key ||
	    j->is_object[j->depth - 1] != object) {
		misuse(j);
		return;
	}
	bool had_items = j->need_comma[--j->depth];
	if (had_items)
		newline(j);
	puts_(j, c);
}

static void quoted(strata_json *j, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	put(j, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		char u[7];
		if (c == '"')
			esc = "\\\"";
		else if (c == '\\')
			esc = "\\\\";
		else if (c == '\n')
			esc = "\\n";
		else if (c == '\r')
			esc = "\\r";
		else if (c == '\t')
			esc = "\\t";
		else if (c < 0x20 || c == 0x7f) {
			memcpy(u, "\\u00", 4);
			u[4] = hex[c >> 4];
			u[5] = hex[c & 15];
			u[6] = '\0';
			esc = u;
		}
		if (esc) {
			put(j, s + i - run, run);
			run = 0;
			puts_(j, esc);
		} else {
			run++;
		}
	}
	put(j, s + n - run, run);
	put(j, "\"", 1);
}

/* ------------------------------------------------------------------------ */

void strata_json_init(strata_json *j, bool pretty)
{
	memset(j, 0, sizeof *j);
	j->pretty = pretty;
	j->status = STRATA_OK;
}

void strata_json_fini(strata_json *j)
{
	strata_free(j->buf);
	j->buf = NULL;
	j->len = j->cap = 0;
}

void strata_json_object_begin(strata_json *j) { open_(j, "{", true); }
void strata_json_object_end(strata_json *j) { close_(j, "}", true); }
void strata_json_array_begin(strata_json *j) { open_(j, "[", false); }
void strata_json_array_end(strata_json *j) { close_(j, "]", false); }

void strata_json_key(strata_json *j, const char *key)
{
	if (j->after_key || j->depth == 0 || !j->is_object[j->depth - 1]) {
		misuse(j);
		return;
	}
	separate(j);
	quoted(j, key, strlen(key));
	put(j, j->pretty ? ": " : ":", j->pretty ? 2 : 1);
	j->after_key = true;
}

void strata_json_string_n(strata_json *j, const char *s, size_t n)
{
	before_value(j);
	quoted(j, s, n);
}

void strata_json_string(strata_json *j, const char *s)
{
	strata_json_string_n(j, s, strlen(s));
}

void strata_json_u64(strata_json *j, uint64_t v)
{
	char b[24];
	before_value(j);
	snprintf(b, sizeof b, "%" PRIu64, v);
	puts_(j, b);
}

void strata_json_i64(strata_json *j, int64_t v)
{
	char b[24];
	before_value(j);
	snprintf(b, sizeof b, "%" PRId64, v);
	puts_(j, b);
}

void strata_json_double(strata_json *j, double v)
{
	char b[40];
	before_value(j);
	if (!isfinite(v)) {
		puts_(j, "null");
		return;
	}
	/* The shortest of %.15g .. %.17g that reads back as the same double:
	 * 0.062 rather than 0.061999999999999999, and still exact. */
	for (int digits = 15; digits <= 17; digits++) {
		snprintf(b, sizeof b, "%.*g", digits, v);
		if (strtod(b, NULL) == v)
			break;
	}
	puts_(j, b);
}

void strata_json_bool(strata_json *j, bool v)
{
	before_value(j);
	puts_(j, v ? "true" : "false");
}

void strata_json_null(strata_json *j)
{
	before_value(j);
	puts_(j, "null");
}

void strata_json_kv_string(strata_json *j, const char *k, const char *v)
{
	strata_json_key(j, k);
	if (v)
		strata_json_string(j, v);
	else
		strata_json_null(j);
}

void strata_json_kv_u64(strata_json *j, const char *k, uint64_t v)
{
	strata_json_key(j, k);
	strata_json_u64(j, v);
}

void strata_json_kv_double(strata_json *j, const char *k, double v)
{
	strata_json_key(j, k);
	strata_json_double(j, v);
}

void strata_json_kv_bool(strata_json *j, const char *k, bool v)
{
	strata_json_key(j, k);
	strata_json_bool(j, v);
}

strata_status strata_json_finish(strata_json *j, strata_error *err)
{
	if (j->status == STRATA_OK && (j->depth != 0 || j->after_key || !j->len))
		j->status = STRATA_E_INTERNAL;
	if (j->status == STRATA_OK)
		put(j, "\n", 1);
	if (j->status == STRATA_E_NOMEM)
		return strata_fail(err, STRATA_E_NOMEM,
				   "free host memory and try again",
				   "out of memory writing a JSON document");
	if (j->status != STRATA_OK)
		return strata_fail(err, j->status, "report this as a bug",
				   "JSON document written out of order "
				   "(unbalanced or a key without a value)");
	return STRATA_OK;
}
