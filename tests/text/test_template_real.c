/* test_template_real.c - the eleven real chat templates of
 * tests/data/chat-templates rendered byte for byte as transformers
 * renders them (expected.json: 110 cases, each template's own errors
 * included), and loading a model's template from tokenizer_config.json
 * (layer: text). */
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

/* expected.json's clock: transformers' strftime_now fixed to 2026-07-26. */
#define FIXED_NOW 1785067200 /* 2026-07-26 12:00:00 UTC */

static strata_chat_template *load(const char *name)
{
	char rel[512];
	snprintf(rel, sizeof rel, "tests/data/chat-templates/%s", name);
	size_t n = 0;
	char *src = tt_read(rel, &n);
	assert_non_null(src);
	strata_chat_template *t = NULL;
	strata_error err;
	if (strata_chat_template_create(src, n, &t, &err))
		fprintf(stderr, "%s: %s\n", name, err.message);
	free(src);
	assert_non_null(t);
	return t;
}

/* Where two texts first differ, shown with some context. */
static void show_diff(const char *want, size_t wn, const char *got, size_t gn)
{
	size_t i = 0;
	while (i < wn && i < gn && want[i] == got[i])
		i++;
	size_t from = i > 40 ? i - 40 : 0;
	fprintf(stderr, "  first difference at byte %zu\n  want: %.*s|\n"
		"  got:  %.*s|\n", i, (int)((wn > from ? wn - from : 0) > 120 ? 120
						: wn - from), want + from,
		(int)((gn > from ? gn - from : 0) > 120 ? 120 : gn - from),
		got + from);
}

static void every_case_renders_byte_exact(void **state)
{
	(void)state;
	size_t n = 0;
	char *text = tt_read("tests/data/chat-templates/expected.json", &n);
	assert_non_null(text);
	json_t *cases = json_loadb(text, n, 0, NULL);
	free(text);
	assert_true(json_is_array(cases));
	assert_int_equal(json_array_size(cases), 110);
	size_t i, passed = 0, errors_checked = 0;
	json_t *c;
	json_array_foreach(cases, i, c) {
		const char *name = json_string_value(json_object_get(c, "template"));
		strata_chat_template *t = load(name);
		char *messages = json_dumps(json_object_get(c, "messages"),
					    JSON_COMPACT);
		strata_chat_template_options o;
		strata_chat_template_options_init(&o);
		o.add_generation_prompt =
			json_is_true(json_object_get(c, "add_generation_prompt"));
		o.bos_token = json_string_value(json_object_get(c, "bos_token"));
		o.eos_token = json_string_value(json_object_get(c, "eos_token"));
		o.fixed_time = true;
		o.now_unix = FIXED_NOW;
		char *out = NULL;
		size_t len = 0;
		strata_error err;
		strata_status st = strata_chat_template_render(
			t, messages, strlen(messages), &o, &out, &len, &err);
		json_t *want = json_object_get(c, "expected");
		json_t *want_err = json_object_get(c, "error");
		bool ok;
		if (want_err) {
			ok = st == STRATA_E_TEXT_TEMPLATE_RAISED &&
			     !strcmp(err.message, json_string_value(want_err));
			errors_checked += ok;
			if (!ok)
				fprintf(stderr, "case %zu (%s, %s): want error "
					"'%s', got status %d '%s'\n", i, name,
					json_string_value(json_object_get(c, "conversation")),
					json_string_value(want_err), st,
					st ? err.message : "(rendered)");
		} else {
			ok = st == STRATA_OK && len == json_string_length(want) &&
			     !memcmp(out, json_string_value(want), len);
			if (!ok) {
				fprintf(stderr, "case %zu (%s, %s, agp=%d):\n", i,
					name, json_string_value(json_object_get(
						      c, "conversation")),
					o.add_generation_prompt);
				if (st)
					fprintf(stderr, "  error: %s\n", err.message);
				else
					show_diff(json_string_value(want),
						  json_string_length(want), out,
						  len);
			}
		}
		passed += ok;
		strata_free(out);
		free(messages);
		strata_chat_template_destroy(t);
	}
	json_decref(cases);
	fprintf(stderr, "%zu of 110 cases exact (%zu template errors "
		"reproduced)\n", passed, errors_checked);
	assert_int_equal(passed, 110);
	assert_int_equal(errors_checked, 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_case_renders_byte_exact),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
