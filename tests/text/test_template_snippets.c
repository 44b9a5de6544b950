/* test_template_snippets.c - strata's chat-template interpreter against
 * Jinja2 itself: tests/data/chat-templates/snippets.json holds 120 small
 * templates (whitespace control, operators, statements, filters, tests,
 * methods, globals, errors) rendered by Jinja2 with transformers' settings
 * (tools/make_template_cases.py). Every rendering must be byte-exact and
 * every case Jinja2 refuses must be refused, with the status that names
 * the kind of failure (layer: text). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "strata/text.h"
#include "text_fixture.h"

#define FIXED_NOW 1785024000 /* 2026-07-26 00:00:00 UTC, as the generator */

/* The status a Jinja2 exception class must come out as. */
static bool status_fits(const char *jinja_class, strata_status st)
{
	if (!strcmp(jinja_class, "TemplateError"))
		return st == STRATA_E_TEXT_TEMPLATE_RAISED;
	if (!strcmp(jinja_class, "OverflowError"))
		return st == STRATA_E_TEXT_TEMPLATE_LIMIT;
	if (!strcmp(jinja_class, "TemplateSyntaxError") ||
	    !strcmp(jinja_class, "TemplateAssertionError") ||
	    !strcmp(jinja_class, "SyntaxError"))
		return st == STRATA_E_TEXT_TEMPLATE;
	/* runtime errors; {% include %} is refused at parse time here */
	return st == STRATA_E_TEXT_TEMPLATE_RENDER || st == STRATA_E_TEXT_TEMPLATE;
}

static void every_snippet_matches_jinja2(void **state)
{
	(void)state;
	size_t n = 0;
	char *text = tt_read("tests/data/chat-templates/snippets.json", &n);
	assert_non_null(text);
	json_t *root = json_loadb(text, n, 0, NULL);
	free(text);
	json_t *cases = json_object_get(root, "cases");
	assert_true(json_array_size(cases) >= 100);
	size_t i, good = 0;
	json_t *c;
	json_array_foreach(cases, i, c) {
		const char *name = json_string_value(json_object_get(c, "name"));
		json_t *src = json_object_get(c, "template");
		char *vars = json_dumps(json_object_get(c, "vars"), 0);
		strata_chat_template *t = NULL;
		strata_error err;
		strata_status st = strata_chat_template_create(
			json_string_value(src), json_string_length(src), &t, &err);
		char *out = NULL;
		size_t len = 0;
		if (!st) {
			strata_chat_template_options o;
			strata_chat_template_options_init(&o);
			o.extra_json = vars;
			o.fixed_time = true;
			o.now_unix = FIXED_NOW;
			st = strata_chat_template_render(t, "[]", 2, &o, &out,
							 &len, &err);
		}
		json_t *want = json_object_get(c, "expected");
		bool ok;
		if (want) {
			ok = !st && len == json_string_length(want) &&
			     !memcmp(out, json_string_value(want), len);
			if (!ok && st)
				fprintf(stderr, "%s: error %s\n", name, err.message);
			else if (!ok)
				fprintf(stderr, "%s:\n  want [%s]\n  got  [%s]\n",
					name, json_string_value(want), out);
		} else {
			const char *cls = json_string_value(json_object_get(c, "error"));
			ok = st && status_fits(cls, st);
			if (!ok)
				fprintf(stderr, "%s: Jinja2 raises %s; got status "
					"%d (%s)\n", name, cls, st,
					st ? err.message : out);
		}
		good += ok;
		strata_free(out);
		strata_chat_template_destroy(t);
		free(vars);
	}
	fprintf(stderr, "%zu of %zu snippets as Jinja2\n", good,
		json_array_size(cases));
	assert_int_equal(good, json_array_size(cases));
	json_decref(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_snippet_matches_jinja2),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
