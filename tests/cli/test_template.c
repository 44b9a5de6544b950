/* test_template.c - `strata template TEMPLATE.jinja|MODEL --messages
 * FILE` end to end: cases of tests/data/chat-templates/expected.json byte
 * for byte on stdout (a template's raise_exception: exit 1 with its
 * message), a model's template from tokenizer_config.json (string and
 * list forms) and from GGUF, and the usage and input errors (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"

/* A growable byte buffer for the little GGUF file below. */
typedef struct bytes {
	unsigned char *p;
	size_t len, cap;
} bytes;

static void b_put(bytes *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
}

static void b_u32(bytes *b, uint32_t v)
{
	unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8),
			      (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
	b_put(b, x, 4);
}

static void b_u64(bytes *b, uint64_t v)
{
	b_u32(b, (uint32_t)v);
	b_u32(b, (uint32_t)(v >> 32));
}

static void b_str(bytes *b, const char *s)
{
	b_u64(b, strlen(s));
	b_put(b, s, strlen(s));
}

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(p, 1, n, f);
	return (fclose(f) != 0 || w != n) ? -1 : 0;
}

static char *data(const char *rel)
{
	static char buf[4][4096];
	static int k;
	char *b = buf[k++ % 4];
	snprintf(b, sizeof buf[0], "%s/tests/data/%s", STRATA_SOURCE_DIR, rel);
	return b;
}

static void put(const char *dir, const char *name, const char *text,
		char *path, size_t cap)
{
	snprintf(path, cap, "%s/%s", dir, name);
	assert_int_equal(write_file(path, text, strlen(text)), 0);
}

static cli_result run(const char *const *argv)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	return r;
}

static void test_cli_template_renders_every_expected_case(void **state)
{
	(void)state;
	char dir[1024], msgs[1200], tpl[1200];
	cli_tmpdir(dir, sizeof dir, "template-cases");
	FILE *f = fopen(data("chat-templates/expected.json"), "rb");
	assert_non_null(f);
	json_t *cases = json_loadf(f, 0, NULL);
	fclose(f);
	assert_int_equal(json_array_size(cases), 110);
	size_t i, exact = 0, refused = 0, want_exact = 0, want_refused = 0;
	json_t *c;
	json_array_foreach(cases, i, c) {
		/* every template's errors, and a fifth of the renderings (the
		 * library test renders all 110): a process per case is slow */
		bool is_error = json_object_get(c, "error") != NULL;
		if (!is_error && i % 5)
			continue;
		want_exact += !is_error;
		want_refused += is_error;
		char *m = json_dumps(json_object_get(c, "messages"), 0);
		put(dir, "messages.json", m, msgs, sizeof msgs);
		free(m);
		snprintf(tpl, sizeof tpl, "chat-templates/%s",
			 json_string_value(json_object_get(c, "template")));
		const char *argv[] = {
			"template", data(tpl), "--messages", msgs, "--now",
			"2026-07-26", "--bos-token",
			json_string_value(json_object_get(c, "bos_token")),
			"--eos-token",
			json_string_value(json_object_get(c, "eos_token")),
			json_is_true(json_object_get(c, "add_generation_prompt"))
				? "--add-generation-prompt" : NULL,
			NULL};
		cli_result r = run(argv);
		json_t *want = json_object_get(c, "expected");
		if (want) {
			bool ok = r.exit_code == 0 &&
				  r.out_len == json_string_length(want) &&
				  !memcmp(r.out, json_string_value(want), r.out_len);
			if (!ok)
				fprintf(stderr, "case %zu: exit %d, %s\n", i,
					r.exit_code, r.err);
			exact += ok;
		} else {
			char line[512];
			snprintf(line, sizeof line, "strata: error: %s\n",
				 json_string_value(json_object_get(c, "error")));
			bool ok = r.exit_code == 1 && r.out_len == 0 &&
				  strstr(r.err, line) == r.err;
			if (!ok)
				fprintf(stderr, "case %zu: exit %d, %s\n", i,
					r.exit_code, r.err);
			refused += ok;
		}
		cli_result_free(&r);
	}
	json_decref(cases);
	assert_int_equal(exact, want_exact);
	assert_int_equal(refused, want_refused);
	assert_int_equal(want_refused, 4);
	assert_true(want_exact >= 20);
}

static const char tiny_template[] =
	"{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
	"{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
	"{{ eos_token }}";

static void test_cli_template_reads_tokenizer_config(void **state)
{
	(void)state;
	char dir[1024], path[1200], msgs[1200];
	cli_tmpdir(dir, sizeof dir, "template-model");
	json_t *cfg = json_pack("{s:s, s:{s:s}, s:s}", "chat_template",
				tiny_template, "bos_token", "content", "<s>",
				"eos_token", "</s>");
	char *text = json_dumps(cfg, 0);
	put(dir, "tokenizer_config.json", text, path, sizeof path);
	free(text);
	json_decref(cfg);
	put(dir, "m.json", "[{\"role\": \"user\", \"content\": \"hi\"}]", msgs,
	    sizeof msgs);
	const char *argv[] = {"template", dir, "--messages", msgs,
			      "--add-generation-prompt", NULL};
	cli_result r = run(argv);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "<s>[user]hi[assistant]</s>");
	cli_result_free(&r);
	const char *over[] = {"template", dir, "--messages", msgs,
			      "--bos-token", "B", "--eos-token", "", NULL};
	r = run(over);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "B[user]hi");
	cli_result_free(&r);

	/* the list form: the template named "default" */
	put(dir, "tokenizer_config.json",
	    "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
	    " {\"name\": \"default\", \"template\": \"D{{ messages|length }}\"}]}",
	    path, sizeof path);
	const char *list[] = {"template", dir, "--messages", msgs, NULL};
	r = run(list);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "D1");
	cli_result_free(&r);

	/* no template at all: exit 1, and the fix names --chat-template */
	put(dir, "tokenizer_config.json", "{\"bos_token\": \"<s>\"}", path,
	    sizeof path);
	r = run(list);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "has no chat_template"));
	assert_non_null(strstr(r.err, "--chat-template"));
	cli_result_free(&r);
}

static void kv_str(bytes *b, const char *key, const char *val)
{
	b_str(b, key);
	b_u32(b, 8); /* string */
	b_str(b, val);
}

static void test_cli_template_reads_gguf(void **state)
{
	(void)state;
	char dir[1024], path[1200], msgs[1200];
	cli_tmpdir(dir, sizeof dir, "template-gguf");
	bytes b = {0};
	b_put(&b, "GGUF", 4);
	b_u32(&b, 3);
	b_u64(&b, 0); /* tensors */
	b_u64(&b, 5); /* key-values */
	kv_str(&b, "general.architecture", "llama");
	kv_str(&b, "tokenizer.chat_template", tiny_template);
	b_str(&b, "tokenizer.ggml.tokens");
	b_u32(&b, 9); /* array */
	b_u32(&b, 8); /* of strings */
	b_u64(&b, 3);
	b_str(&b, "<unk>");
	b_str(&b, "<bos>");
	b_str(&b, "<eos>");
	b_str(&b, "tokenizer.ggml.bos_token_id");
	b_u32(&b, 4);
	b_u32(&b, 1);
	b_str(&b, "tokenizer.ggml.eos_token_id");
	b_u32(&b, 4);
	b_u32(&b, 2);
	while (b.len % 32)
		b_put(&b, "", 1);
	snprintf(path, sizeof path, "%s/chat.gguf", dir);
	assert_int_equal(write_file(path, b.p, b.len), 0);
	free(b.p);
	char gguf[1200];
	snprintf(gguf, sizeof gguf, "%s", path);
	put(dir, "m.json", "[{\"role\": \"user\", \"content\": \"yo\"}]", msgs,
	    sizeof msgs);
	const char *argv[] = {"template", gguf, "--messages", msgs, NULL};
	cli_result r = run(argv);
	if (r.exit_code)
		fprintf(stderr, "%s\n", r.err);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "<bos>[user]yo<eos>");
	cli_result_free(&r);
}

static void test_cli_template_errors_and_exit_codes(void **state)
{
	(void)state;
	char dir[1024], tpl[1200], bad[1200], msgs[1200], obj[1200];
	cli_tmpdir(dir, sizeof dir, "template-errors");
	put(dir, "t.jinja", tiny_template, tpl, sizeof tpl);
	put(dir, "bad.jinja", "line one\n{% for x in %}", bad, sizeof bad);
	put(dir, "m.json", "[]", msgs, sizeof msgs);
	put(dir, "o.json", "{\"role\": \"user\"}", obj, sizeof obj);
	struct {
		const char *argv[8];
		int code;
		const char *says;
	} cases[] = {
		{{"template", tpl, NULL}, 2, "--messages"},
		{{"template", "--messages", msgs, NULL}, 2, "no TEMPLATE"},
		{{"template", tpl, "--messages", msgs, "--bogus", NULL}, 2,
		 "--bogus"},
		{{"template", tpl, "--messages", NULL}, 2, "needs a value"},
		{{"template", tpl, "--messages", msgs, "--now", "July", NULL},
		 2, "not a date"},
		{{"template", bad, "--messages", msgs, NULL}, 1,
		 "line 2, column 13"},
		{{"template", tpl, "--messages", obj, NULL}, 1,
		 "must be a JSON array"},
		{{"template", dir, "--messages", msgs, NULL}, 1,
		 "tokenizer_config.json"},
		{{"template", tpl, "--messages", "/nonexistent/m.json", NULL},
		 1, "nonexistent"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		cli_result r = run(cases[i].argv);
		if (r.exit_code != cases[i].code || !strstr(r.err, cases[i].says))
			fprintf(stderr, "case %zu: exit %d: %s\n", i,
				r.exit_code, r.err);
		assert_int_equal(r.exit_code, cases[i].code);
		assert_non_null(strstr(r.err, cases[i].says));
		assert_int_equal(r.out_len, 0);
		cli_result_free(&r);
	}
	const char *help[] = {"template", "--help", NULL};
	cli_result r = run(help);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "--add-generation-prompt"));
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_template_renders_every_expected_case),
		cmocka_unit_test(test_cli_template_reads_tokenizer_config),
		cmocka_unit_test(test_cli_template_reads_gguf),
		cmocka_unit_test(test_cli_template_errors_and_exit_codes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
