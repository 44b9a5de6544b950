/* test_chat.c - chat prompts: OpenAI messages checked, rendered through
 * the model's own template with its bos / eos texts (or a --chat-template
 * file), byte for byte as transformers renders the same conversation,
 * and encoded without a second BOS (layer: text).
 *
 * References: tests/data/chat-templates/expected.json (transformers'
 * renderings of eleven real templates), with every string content given
 * here as an array of one text part; tests/data/chat-stories260K (the
 * stories260K model with Mistral Nemo's template). */
#include "text/text_fixture.h"

#include "strata/base.h"

#define CHAT_MODEL STRATA_SOURCE_DIR "/tests/data/chat-stories260K"
#define PLAIN_MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define PLAIN_GGUF STRATA_SOURCE_DIR "/models/stories260K/stories260K.gguf"
#define NEMO STRATA_SOURCE_DIR \
	"/tests/data/chat-templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static json_t *parse(const char *text)
{
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	if (!j)
		fail_msg("test JSON: %s", je.text);
	return j;
}

static strata_chat_format *load(const char *model, const char *file)
{
	strata_chat_format *f = NULL;
	strata_error err;
	if (strata_chat_format_load(model, file, NULL, &f, &err))
		fail_msg("load %s: %s (%s)", model, err.message, err.fix);
	return f;
}

static void render_expect(const strata_chat_format *f, const char *messages,
			  bool agp, const char *want)
{
	json_t *m = parse(messages);
	char *out = NULL;
	size_t len = 0;
	strata_error err;
	if (strata_chat_format_render(f, m, agp, &out, &len, &err))
		fail_msg("render: %s", err.message);
	if (len != strlen(want) || memcmp(out, want, len))
		fail_msg("rendered '%s', expected '%s'", out, want);
	strata_free(out);
	json_decref(m);
}

static void check_fails(const char *messages, const char *want_message)
{
	json_t *m = parse(messages);
	strata_error err;
	assert_int_equal(strata_chat_messages_check(m, &err), STRATA_E_INVALID_ARG);
	if (!strstr(err.message, want_message))
		fail_msg("'%s' gave '%s', expected '%s'", messages, err.message,
			 want_message);
	assert_true(err.fix[0] != '\0');
	json_decref(m);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* The model's template with its own <s> and </s>. */
static void test_model_template_renders_with_its_tokens(void **state)
{
	(void)state;
	strata_chat_format *f = load(CHAT_MODEL, NULL);
	assert_string_equal(strata_chat_format_bos(f), "<s>");
	assert_string_equal(strata_chat_format_eos(f), "</s>");
	render_expect(f, "[{\"role\":\"user\",\"content\":\"Hi\"},"
			 "{\"role\":\"assistant\",\"content\":\"Hello.\"},"
			 "{\"role\":\"user\",\"content\":\"Bye\"}]",
		      true, "<s>[INST]Hi[/INST]Hello.</s>[INST]Bye[/INST]");
	render_expect(f, "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
			 "{\"role\":\"user\",\"content\":[{\"type\":\"text\","
			 "\"text\":\"one\"},{\"type\":\"text\",\"text\":"
			 "\"two\"}]}]",
		      true, "<s>[INST]Be brief.\n\none\ntwo[/INST]");
	strata_chat_format_destroy(f);
}

/* Every case of expected.json whose template needs no clock, with each
 * content as a one-part array: the renderings are transformers' own. */
static void test_parts_render_as_transformers_renders_strings(void **state)
{
	(void)state;
	size_t n = 0;
	char *text = tt_read("tests/data/chat-templates/expected.json", &n);
	assert_non_null(text);
	json_t *cases = json_loadb(text, n, 0, NULL);
	free(text);
	assert_true(json_is_array(cases));
	size_t i, checked = 0, raised = 0;
	json_t *c;
	json_array_foreach(cases, i, c) {
		char rel[512];
		snprintf(rel, sizeof rel, "tests/data/chat-templates/%s",
			 json_string_value(json_object_get(c, "template")));
		size_t sn = 0;
		char *src = tt_read(rel, &sn);
		assert_non_null(src);
		if (strstr(src, "strftime_now")) {
			free(src);
			continue;
		}
		strata_chat_format *f = NULL;
		strata_error err;
		assert_int_equal(strata_chat_format_create(
					 src, sn,
					 json_string_value(json_object_get(c, "bos_token")),
					 json_string_value(json_object_get(c, "eos_token")),
					 &f, &err), STRATA_OK);
		free(src);
		json_t *msgs = json_deep_copy(json_object_get(c, "messages"));
		size_t k;
		json_t *m;
		json_array_foreach(msgs, k, m) {
			json_t *part = json_pack("{s:s,s:O}", "type", "text", "text",
						 json_object_get(m, "content"));
			json_object_set_new(m, "content", json_pack("[o]", part));
		}
		char *out = NULL;
		size_t len = 0;
		bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
		strata_status st = strata_chat_format_render(f, msgs, agp, &out,
							     &len, &err);
		json_t *want = json_object_get(c, "expected");
		if (want) {
			if (st || len != json_string_length(want) ||
			    memcmp(out, json_string_value(want), len))
				fail_msg("case %zu (%s) differs: %s", i, rel,
					 st ? err.message : out);
			checked++;
		} else {
			assert_int_equal(st, STRATA_E_TEXT_TEMPLATE_RAISED);
			assert_string_equal(err.message, json_string_value(
						json_object_get(c, "error")));
			raised++;
		}
		strata_free(out);
		json_decref(msgs);
		strata_chat_format_destroy(f);
	}
	json_decref(cases);
	/* 8 of the 11 templates need no clock: 5 conversations each, with
	 * and without the generation prompt */
	assert_int_equal(checked + raised, 80);
	assert_int_equal(raised, 4);
}

static void test_bad_messages_are_refused_naming_the_message(void **state)
{
	(void)state;
	check_fails("{}", "messages is not a JSON array");
	check_fails("[]", "holds 0 messages");
	check_fails("[{\"role\":\"user\",\"content\":\"a\"}, 3]",
		    "message 2: not a JSON object");
	check_fails("[{\"content\":\"a\"}]", "message 1: \"role\" is missing");
	check_fails("[{\"role\":\"wizard\",\"content\":\"a\"}]",
		    "message 1: role 'wizard' is not one of system, user, "
		    "assistant, tool");
	check_fails("[{\"role\":\"user\"}]", "message 1: \"content\" is missing");
	check_fails("[{\"role\":\"user\",\"content\":7}]",
		    "\"content\" is not a string or an array");
	check_fails("[{\"role\":\"user\",\"content\":null}]",
		    "\"content\" is not a string or an array");
	check_fails("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
		    "\"image_url\":{\"url\":\"x\"}}]}]",
		    "content part 1 has type 'image_url'");
	check_fails("[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]",
		    "content part 1 has no \"text\" string");
	check_fails("[{\"role\":\"user\",\"content\":[\"x\"]}]",
		    "content part 1 is not an object");
	check_fails("[{\"role\":\"user\",\"content\":\"a\",\"name\":1}]",
		    "\"name\" is not a string");
	/* what OpenAI accepts passes */
	json_t *ok = parse("[{\"role\":\"system\",\"content\":\"s\"},"
			   "{\"role\":\"user\",\"content\":\"u\",\"name\":\"n\"},"
			   "{\"role\":\"assistant\",\"content\":null,"
			   "\"tool_calls\":[]},{\"role\":\"tool\",\"content\":"
			   "\"r\",\"tool_call_id\":\"abcdefghi\"}]");
	strata_error err;
	assert_int_equal(strata_chat_messages_check(ok, &err), STRATA_OK);
	json_decref(ok);
}

/* A model without a template says how to give one; --chat-template gives
 * one, the tokens still the model's. */
static void test_missing_template_says_how_to_give_one(void **state)
{
	(void)state;
	strata_chat_format *f = NULL;
	strata_error err;
	assert_int_equal(strata_chat_format_load(PLAIN_MODEL, NULL, NULL, &f,
						 &err), STRATA_E_NOT_FOUND);
	assert_null(f);
	assert_non_null(strstr(err.fix, "--chat-template FILE"));
	assert_int_equal(strata_chat_format_load(PLAIN_GGUF, NULL, NULL, &f,
						 &err), STRATA_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "tokenizer.chat_template"));
	assert_non_null(strstr(err.fix, "--chat-template FILE"));
	assert_int_equal(strata_chat_format_load(PLAIN_MODEL, "/nonexistent.jinja",
						 NULL, &f, &err),
			 STRATA_E_NOT_FOUND);
	assert_non_null(strstr(err.fix, "--chat-template"));

	const char *msgs = "[{\"role\":\"user\",\"content\":\"Hi\"}]";
	f = load(PLAIN_MODEL, NEMO);
	assert_string_equal(strata_chat_format_eos(f), "</s>");
	render_expect(f, msgs, true, "<s>[INST]Hi[/INST]");
	strata_chat_format_destroy(f);
	/* the GGUF names its tokens by id: their pieces */
	f = load(PLAIN_GGUF, NEMO);
	assert_string_equal(strata_chat_format_bos(f), "<s>");
	assert_string_equal(strata_chat_format_eos(f), "</s>");
	render_expect(f, msgs, true, "<s>[INST]Hi[/INST]");
	strata_chat_format_destroy(f);
	/* the override wins over the model's own template */
	char path[4096];
	snprintf(path, sizeof path, "%s/tests/data/chat-templates/"
		 "Qwen-Qwen2.5-7B-Instruct.jinja", STRATA_SOURCE_DIR);
	f = load(CHAT_MODEL, path);
	render_expect(f, msgs, true,
		      "<|im_start|>system\nYou are Qwen, created by Alibaba "
		      "Cloud. You are a helpful assistant.<|im_end|>\n"
		      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	strata_chat_format_destroy(f);
}

/* A bad template file names the file and the line. */
static void test_bad_template_file_names_file_and_line(void **state)
{
	(void)state;
	char path[4096];
	snprintf(path, sizeof path, "%s/bad.jinja", STRATA_BINARY_DIR);
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	fputs("{{ bos_token }}\n{% for m in messages %}{{ m.content }\n", fp);
	fclose(fp);
	strata_chat_format *f = NULL;
	strata_error err;
	assert_int_equal(strata_chat_format_load(CHAT_MODEL, path, NULL, &f,
						 &err), STRATA_E_TEXT_TEMPLATE);
	assert_non_null(strstr(err.message, "bad.jinja: chat template line 2"));
	remove(path);
}

/* The template writes <s>; encoding adds no second one, and </s> written
 * by it is the EOS id. */
static void test_encode_adds_no_second_bos(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("tests/data/chat-stories260K");
	strata_chat_format *f = NULL;
	strata_error err;
	assert_int_equal(strata_chat_format_load(CHAT_MODEL, NULL, t, &f, &err),
			 STRATA_OK);
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(t, &sp);
	json_t *m = parse("[{\"role\":\"user\",\"content\":\"Hi\"},"
			  "{\"role\":\"assistant\",\"content\":\"Yes\"},"
			  "{\"role\":\"user\",\"content\":\"Go\"}]");
	int32_t *ids = NULL;
	size_t n = 0;
	assert_int_equal(strata_chat_format_encode(f, t, m, true, &ids, &n, &err),
			 STRATA_OK);
	assert_true(n > 4);
	assert_int_equal(ids[0], sp.bos);
	assert_int_not_equal(ids[1], sp.bos);
	size_t eos_count = 0;
	for (size_t i = 0; i < n; i++)
		eos_count += ids[i] == sp.eos;
	assert_int_equal(eos_count, 1);
	strata_free(ids);
	json_decref(m);
	strata_chat_format_destroy(f);
	strata_tokenizer_destroy(t);
}

/* The template's own refusal comes through with its message. */
static void test_template_refusal_comes_through(void **state)
{
	(void)state;
	strata_chat_format *f = load(CHAT_MODEL, NULL);
	json_t *m = parse("[{\"role\":\"assistant\",\"content\":\"first\"}]");
	char *out = NULL;
	size_t len = 0;
	strata_error err;
	assert_int_equal(strata_chat_format_render(f, m, true, &out, &len, &err),
			 STRATA_E_TEXT_TEMPLATE_RAISED);
	assert_null(out);
	assert_non_null(strstr(err.message, "must alternate"));
	json_decref(m);
	strata_chat_format_destroy(f);
}

/* Every allocation failure in load and render is E_NOMEM, output
 * untouched; then both succeed. */
static void test_allocation_failures_are_errors(void **state)
{
	(void)state;
	strata_chat_format *f = NULL;
	strata_error err;
	for (long k = 0;; k++) {
		strata_alloc_fail_after(k);
		strata_status st = strata_chat_format_load(CHAT_MODEL, NULL, NULL,
							   &f, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_null(f);
	}
	json_t *m = parse("[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
			  "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]");
	for (long k = 0;; k++) {
		char *out = NULL;
		size_t len = 0;
		strata_alloc_fail_after(k);
		strata_status st = strata_chat_format_render(f, m, true, &out,
							     &len, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK) {
			assert_string_equal(out, "<s>[INST]a\nb[/INST]");
			strata_free(out);
			break;
		}
		assert_true(st == STRATA_E_NOMEM ||
			    st == STRATA_E_TEXT_TEMPLATE_LIMIT);
		assert_null(out);
	}
	json_decref(m);
	strata_chat_format_destroy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_template_renders_with_its_tokens),
		cmocka_unit_test(test_parts_render_as_transformers_renders_strings),
		cmocka_unit_test(test_bad_messages_are_refused_naming_the_message),
		cmocka_unit_test(test_missing_template_says_how_to_give_one),
		cmocka_unit_test(test_bad_template_file_names_file_and_line),
		cmocka_unit_test(test_encode_adds_no_second_bos),
		cmocka_unit_test(test_template_refusal_comes_through),
		cmocka_unit_test(test_allocation_failures_are_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
