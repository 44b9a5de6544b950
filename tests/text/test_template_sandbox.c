/* test_template_sandbox.c - the chat-template interpreter's promises on
 * hostile input: a catalogue of bad templates (one enum per fault, each
 * with its named status and message), the sandbox's limits (steps, output,
 * memory, range, recursion) and their exact edges, no reach outside the
 * template, bad messages/tools/extra JSON, and every allocation failing in
 * turn (E_NOMEM, nothing leaked) (layer: text). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "strata/text.h"
#include "text_fixture.h"

typedef enum bad_kind {
	BAD_UNCLOSED_VAR,
	BAD_UNCLOSED_BLOCK,
	BAD_UNCLOSED_COMMENT,
	BAD_UNCLOSED_RAW,
	BAD_MISSING_ENDIF,
	BAD_STRAY_ENDFOR,
	BAD_UNKNOWN_TAG,
	BAD_UNKNOWN_FILTER,
	BAD_UNKNOWN_TEST,
	BAD_BRACKETS,
	BAD_CLOSER,
	BAD_STRING,
	BAD_ESCAPE,
	BAD_SURROGATE,
	BAD_INCLUDE,
	BAD_EXTENDS,
	BAD_IMPORT,
	BAD_BREAK_OUTSIDE,
	BAD_ASSIGN_CONST,
	BAD_BIG_INT,
	BAD_RECURSIVE_FOR,
	BAD_CHAR,
	BAD_POSITIONAL_AFTER_KW,
	BAD_STAR_ARGS,
	BAD_EMPTY_EXPR,
	BAD_DEEP_PARENS,
	BAD_DEEP_NOT,
	BAD_DEEP_BLOCKS,
	BAD_INVALID_UTF8,
	BAD_NUL,
	BAD_COUNT
} bad_kind;

static const struct {
	const char *source;
	const char *says;
} bad[BAD_COUNT] = {
	[BAD_UNCLOSED_VAR] = {"ab\n{{ x", "line 2, column 1: this tag is never closed"},
	[BAD_UNCLOSED_BLOCK] = {"{% if x", "never closed (expected '%}')"},
	[BAD_UNCLOSED_COMMENT] = {"{# x", "missing end of comment"},
	[BAD_UNCLOSED_RAW] = {"{% raw %}x", "missing end of raw"},
	[BAD_MISSING_ENDIF] = {"{% if x %}a", "'endif'"},
	[BAD_STRAY_ENDFOR] = {"{% endfor %}", "unknown tag 'endfor'"},
	[BAD_UNKNOWN_TAG] = {"{% for x in y %}{% do x %}{% endfor %}",
			     "unknown tag 'do'; the innermost block that "
			     "needs to be closed is 'for'"},
	[BAD_UNKNOWN_FILTER] = {"{{ x | frob }}", "no filter named 'frob'"},
	[BAD_UNKNOWN_TEST] = {"{% if x is frob %}{% endif %}",
			      "no test named 'frob'"},
	[BAD_BRACKETS] = {"{{ (1] }}", "unexpected ']', expected ')'"},
	[BAD_CLOSER] = {"{{ 1) }}", "unexpected ')'"},
	[BAD_STRING] = {"{{ 'abc }}", "unterminated string literal"},
	[BAD_ESCAPE] = {"{{ '\\x4' }}", "truncated \\xXX escape"},
	[BAD_SURROGATE] = {"{{ '\\ud800' }}", "surrogate"},
	[BAD_INCLUDE] = {"{% include 'x.jinja' %}", "no access to other files"},
	[BAD_EXTENDS] = {"{% extends 'base' %}", "no access to other files"},
	[BAD_IMPORT] = {"{% import 'm' as m %}", "no access to other files"},
	[BAD_BREAK_OUTSIDE] = {"{% break %}", "'break' outside of a for loop"},
	[BAD_ASSIGN_CONST] = {"{% set 'a' = 2 %}", "can't assign"},
	[BAD_BIG_INT] = {"{{ 99999999999999999999 }}", "does not fit in 64 bits"},
	[BAD_RECURSIVE_FOR] = {"{% for x in y recursive %}{% endfor %}",
			       "recursive for loops are not supported"},
	[BAD_CHAR] = {"{{ a ! b }}", "unexpected character '!'"},
	[BAD_POSITIONAL_AFTER_KW] = {"{{ f(a=1, 2) }}", "positional argument"},
	[BAD_STAR_ARGS] = {"{{ f(*x) }}", "*args and **kwargs"},
	[BAD_EMPTY_EXPR] = {"{{ }}", "expected an expression"},
	[BAD_DEEP_PARENS] = {NULL, "brackets nested deeper than 256 levels"},
	[BAD_DEEP_NOT] = {NULL, "expression nested deeper than 100 levels"},
	[BAD_DEEP_BLOCKS] = {NULL, "nested deeper than 100 levels"},
	[BAD_INVALID_UTF8] = {"ok \xff", "byte 3 is not valid UTF-8"},
	[BAD_NUL] = {NULL, "byte 1 is a NUL byte"},
};

static char *repeat(const char *a, int n, const char *mid, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), lm = strlen(mid);
	char *s = malloc((la + lb) * (size_t)n + lm + 1), *p = s;
	for (int i = 0; i < n; i++, p += la)
		memcpy(p, a, la);
	memcpy(p, mid, lm);
	p += lm;
	for (int i = 0; i < n; i++, p += lb)
		memcpy(p, b, lb);
	*p = '\0';
	return s;
}

static void every_bad_template_is_refused_by_name(void **state)
{
	(void)state;
	for (int k = 0; k < BAD_COUNT; k++) {
		char *src = NULL;
		size_t len;
		if (k == BAD_DEEP_PARENS)
			src = repeat("(", 300, "1", ")");
		else if (k == BAD_DEEP_NOT)
			src = repeat(" not", 300, " x", "");
		else if (k == BAD_DEEP_BLOCKS)
			src = repeat("{% if x %}", 150, "a", "{% endif %}");
		else if (k == BAD_NUL)
			src = strdup("a?b"), src[1] = '\0';
		else
			src = strdup(bad[k].source);
		if (k == BAD_DEEP_PARENS || k == BAD_DEEP_NOT) {
			char *w = malloc(strlen(src) + 8);
			sprintf(w, "{{ %s }}", src);
			free(src);
			src = w;
		}
		len = k == BAD_NUL ? 3 : strlen(src);
		strata_chat_template *t = NULL;
		strata_error err;
		strata_status st = strata_chat_template_create(src, len, &t, &err);
		if (st != STRATA_E_TEXT_TEMPLATE || !strstr(err.message, bad[k].says))
			fprintf(stderr, "fault %d: status %d, '%s'\n", k, st,
				st ? err.message : "(accepted)");
		assert_int_equal(st, STRATA_E_TEXT_TEMPLATE);
		assert_null(t);
		assert_non_null(strstr(err.message, bad[k].says));
		assert_non_null(strstr(err.fix, "docs/templates.md"));
		if (k != BAD_INVALID_UTF8 && k != BAD_NUL)
			assert_non_null(strstr(err.message, "chat template line "));
		free(src);
	}
}

/* Renders src with o (NULL: defaults) over messages; returns the status
 * and fills err; *out is freed here. */
static strata_status render(const char *src, const char *messages,
			    const strata_chat_template_options *o,
			    strata_error *err, char **text)
{
	strata_chat_template *t = NULL;
	strata_status st = strata_chat_template_create(src, strlen(src), &t, err);
	assert_int_equal(st, STRATA_OK);
	char *out = NULL;
	size_t len = 0;
	st = strata_chat_template_render(t, messages, strlen(messages), o, &out,
					 &len, err);
	strata_chat_template_destroy(t);
	if (text)
		*text = out;
	else
		strata_free(out);
	return st;
}

static void limits_stop_runaway_templates(void **state)
{
	(void)state;
	strata_chat_template_options o;
	strata_chat_template_options_init(&o);
	o.max_output_bytes = 1 << 20;
	o.max_memory_bytes = 64 << 20;
	static const struct {
		const char *src;
		const char *says;
	} cases[] = {
		{"{% set r = range(5000) %}{% for i in r %}{% for j in r %}"
		 "{% endfor %}{% endfor %}", "ran more than 10000000 steps"},
		{"{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
		 "passed 1048576 bytes of output"},
		{"{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
		 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		 "more than 67108864 bytes of memory"},
		{"{% for i in range(1000000) %}{% endfor %}", "range too big"},
		{"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
		 "nested deeper than 100 levels"},
		{"{{ 'x' * 1000000000000 }}", "memory limit"},
		{"{% set x %}{% for i in range(100000) %}{{ 'yyyyyyyyyy' * 10 }}"
		 "{% endfor %}{% endset %}", "bytes of output"},
		{"{{ {'a': 1} | tojson(indent=64) * 1 }}{% for i in range(99999) %}"
		 "{{ range(99999) | list | tojson }}{% endfor %}", "output"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		strata_error err;
		strata_status st = render(cases[i].src, "[]", &o, &err, NULL);
		if (st != STRATA_E_TEXT_TEMPLATE_LIMIT ||
		    !strstr(err.message, cases[i].says))
			fprintf(stderr, "limit %zu: %d %s\n", i, st, err.message);
		assert_int_equal(st, STRATA_E_TEXT_TEMPLATE_LIMIT);
		assert_non_null(strstr(err.message, cases[i].says));
	}
}

/* Exactly max_output_bytes is fine; one byte more is the limit. The same
 * edge for max_steps. */
static void limits_are_exact_at_their_edge(void **state)
{
	(void)state;
	strata_chat_template_options o;
	strata_chat_template_options_init(&o);
	o.max_output_bytes = 10;
	strata_error err;
	char *text = NULL;
	assert_int_equal(render("{{ 'x' * 10 }}", "[]", &o, &err, &text), STRATA_OK);
	assert_string_equal(text, "xxxxxxxxxx");
	strata_free(text);
	assert_int_equal(render("{{ 'x' * 11 }}", "[]", &o, &err, NULL),
			 STRATA_E_TEXT_TEMPLATE_LIMIT);
	/* steps: find the count a template needs, then allow one fewer */
	strata_chat_template_options_init(&o);
	uint64_t need = 0;
	for (uint64_t s = 1; s < 1000 && !need; s++) {
		o.max_steps = s;
		if (render("{% for m in messages %}{{ m.role }}{% endfor %}",
			   "[{\"role\": \"user\"}, {\"role\": \"assistant\"}]", &o,
			   &err, NULL) == STRATA_OK)
			need = s;
		else
			assert_int_equal(err.code, STRATA_E_TEXT_TEMPLATE_LIMIT);
	}
	assert_true(need > 4);
}

static void templates_reach_nothing_outside(void **state)
{
	(void)state;
	char *text = NULL;
	strata_error err;
	/* no environment, no config, no Python internals: all undefined */
	assert_int_equal(render("[{{ environ }}{{ os }}{{ config }}{{ self }}"
				"{{ ''.__class__ }}{{ messages.__len__ }}"
				"{{ cycler }}{{ lipsum }}{{ request }}]",
				"[]", NULL, &err, &text), STRATA_OK);
	assert_string_equal(text, "[]");
	strata_free(text);
	/* values are immutable: no mutating method exists */
	assert_int_equal(render("{{ messages.append(1) }}", "[]", NULL, &err,
				NULL), STRATA_E_TEXT_TEMPLATE_RENDER);
	assert_non_null(strstr(err.message, "'list object' has no attribute "
			       "'append'"));
	assert_int_equal(render("{% set d = {} %}{{ d.update({'a': 1}) }}", "[]",
				NULL, &err, NULL), STRATA_E_TEXT_TEMPLATE_RENDER);
	/* a namespace that holds itself is fine (and frees, under ASan) */
	assert_int_equal(render("{% set ns = namespace() %}{% set ns.me = ns %}"
				"{{ ns.me.me.me is defined }}", "[]", NULL,
				&err, &text), STRATA_OK);
	assert_string_equal(text, "True");
	strata_free(text);
	/* raise_exception's message is the error's whole message */
	assert_int_equal(render("{{ raise_exception('Roles must alternate') }}",
				"[]", NULL, &err, NULL),
			 STRATA_E_TEXT_TEMPLATE_RAISED);
	assert_string_equal(err.message, "Roles must alternate");
	assert_non_null(strstr(err.fix, "line 1"));
}

static void bad_inputs_are_named(void **state)
{
	(void)state;
	strata_chat_template *t = NULL;
	strata_error err;
	const char *src = "{{ messages | length }}{{ tools | length }}";
	assert_int_equal(strata_chat_template_create(src, strlen(src), &t, &err),
			 STRATA_OK);
	strata_chat_template_options o;
	strata_chat_template_options_init(&o);
	char *out = NULL;
	size_t len = 0;
	static const struct {
		const char *messages, *tools, *extra, *says;
	} cases[] = {
		{"[{", NULL, NULL, "the messages is not valid JSON"},
		{"{\"role\": \"user\"}", NULL, NULL, "must be a JSON array"},
		{"[]", "{}", NULL, "the tools must be a JSON array"},
		{"[]", "[1,", NULL, "the tools is not valid JSON"},
		{"[]", NULL, "[1]", "the extra variables must be a JSON object"},
		{"[{\"a\": 1, \"a\": 2}]", NULL, NULL, "duplicate"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		o.tools_json = cases[i].tools;
		o.extra_json = cases[i].extra;
		strata_status st = strata_chat_template_render(
			t, cases[i].messages, strlen(cases[i].messages), &o,
			&out, &len, &err);
		if (st != STRATA_E_INVALID_ARG || !strstr(err.message, cases[i].says))
			fprintf(stderr, "input %zu: %d %s\n", i, st, err.message);
		assert_int_equal(st, STRATA_E_INVALID_ARG);
		assert_non_null(strstr(err.message, cases[i].says));
		assert_null(out);
	}
	o.tools_json = "[{\"name\": \"f\"}]";
	o.extra_json = "{\"messages\": [1, 2, 3]}";
	assert_int_equal(strata_chat_template_render(t, "[]", 2, &o, &out, &len,
						     &err), STRATA_OK);
	assert_string_equal(out, "31"); /* extra variables override */
	strata_free(out);
	strata_chat_template_destroy(t);
	strata_chat_template_destroy(NULL);
}

/* Every allocation of create and render fails in turn: each failure is
 * E_NOMEM (never a crash or another code) and leaks nothing. */
static void every_allocation_failure_is_nomem(void **state)
{
	(void)state;
	size_t n = 0;
	char *src = tt_read("tests/data/chat-templates/"
			    "meta-llama-Llama-3.1-8B-Instruct.jinja", &n);
	assert_non_null(src);
	const char *messages = "[{\"role\": \"system\", \"content\": \"s\"}, "
			       "{\"role\": \"user\", \"content\": \"u\"}]";
	strata_chat_template_options o;
	strata_chat_template_options_init(&o);
	o.bos_token = "<s>";
	bool done = false;
	long failures = 0;
	for (long k = 0; k < 10000 && !done; k++) {
		strata_chat_template *t = NULL;
		strata_error err;
		char *out = NULL;
		size_t len = 0;
		strata_alloc_fail_after(k);
		strata_status st = strata_chat_template_create(src, n, &t, &err);
		if (!st)
			st = strata_chat_template_render(t, messages,
							 strlen(messages), &o,
							 &out, &len, &err);
		strata_alloc_fail_after(-1);
		if (st) {
			if (st != STRATA_E_NOMEM)
				fprintf(stderr, "fail after %ld: %d %s\n", k, st,
					err.message);
			assert_int_equal(st, STRATA_E_NOMEM);
			assert_null(out);
			failures++;
		} else {
			assert_non_null(strstr(out, "<|eot_id|>"));
			done = true;
		}
		strata_free(out);
		strata_chat_template_destroy(t);
	}
	assert_true(done);
	assert_true(failures > 3);
	free(src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_bad_template_is_refused_by_name),
		cmocka_unit_test(limits_stop_runaway_templates),
		cmocka_unit_test(limits_are_exact_at_their_edge),
		cmocka_unit_test(templates_reach_nothing_outside),
		cmocka_unit_test(bad_inputs_are_named),
		cmocka_unit_test(every_allocation_failure_is_nomem),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
