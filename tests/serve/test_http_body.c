/* test_http_body.c - the server's request-body parse on its own
 * (strata__http_parse_body): named bodies accepted or refused naming
 * their field, every allocation failing as a 503 out of memory with
 * nothing leaked, and the fuzz_http_body corpus replayed (layer: serve). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serve/http_internal.h"

#define CHAT_MODEL STRATA_SOURCE_DIR "/tests/data/chat-stories260K"
#define PLAIN_MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define CORPUS STRATA_SOURCE_DIR "/tests/fuzz/corpus/fuzz_http_body"

static strata_tokenizer *tok, *plain_tok;
static strata_chat_format *chat_format;

static int setup(void **state)
{
	(void)state;
	strata_error err;
	return strata_tokenizer_load(CHAT_MODEL, &tok, &err) ||
			       strata_chat_format_load(CHAT_MODEL, NULL, tok,
						       &chat_format, &err) ||
			       strata_tokenizer_load(PLAIN_MODEL, &plain_tok,
						     &err)
		       ? -1
		       : 0;
}

static int teardown(void **state)
{
	(void)state;
	strata_chat_format_destroy(chat_format);
	strata_tokenizer_destroy(tok);
	strata_tokenizer_destroy(plain_tok);
	return 0;
}

/* One parse; the caller frees with parsed_fini. */
typedef struct parsed {
	bool ok;
	strata__http_params g;
	strata__http_reply r;
	json_t *req;
} parsed;

static void parse(bool chat, const char *body, size_t len,
		  const strata_chat_format *cf, parsed *p)
{
	memset(p, 0, sizeof *p);
	p->g = (strata__http_params){.tok = cf ? tok : plain_tok,
				     .chat_format = cf, .stop_token = -1};
	p->ok = strata__http_parse_body(chat, body, len, &p->g, &p->req,
					&p->r);
}

static void parsed_fini(parsed *p)
{
	json_decref(p->r.body);
	json_decref(p->req);
	strata_free(p->g.ids);
}

/* The error's param (NULL for JSON null) and message. */
static const char *error_param(const parsed *p)
{
	json_t *e = json_object_get(p->r.body, "error");
	return json_string_value(json_object_get(e, "param"));
}

static const char *error_message(const parsed *p)
{
	json_t *e = json_object_get(p->r.body, "error");
	return json_string_value(json_object_get(e, "message"));
}

typedef struct body_case {
	bool chat;
	const char *body;
	const char *param; /* NULL: accepted, "": refused with param null */
	const char *message;
} body_case;

static const body_case cases[] = {
	{false, "{\"prompt\":\"Once upon a time\",\"max_tokens\":8}", NULL, NULL},
	{false, "{\"prompt\":[[1,403,407]],\"stop\":[\"a\",\"bc\"]}", NULL, NULL},
	{true, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", NULL,
	 NULL},
	{false, "{\"prompt\":\"x\"", "", "the body is not valid JSON"},
	{false, "[1]", "", "the body must be a JSON object"},
	/* jansson's text quotes the bad escape's byte, not UTF-8: escaped */
	{false, "{\"prompt\":\"\\\xff\"}", "", "not valid JSON"},
	{false, "{\"prompt\":\"a\",\"prompt\":\"b\"}", "", "not valid JSON"},
	{false, "{}", "prompt", "'prompt' is required"},
	{false, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens",
	 "'max_tokens' is 0"},
	{false, "{\"prompt\":\"x\",\"temperature\":3}", "temperature",
	 "'temperature' is 3"},
	{false, "{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop", "'stop'"},
	{false, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
	 "stop", "at most 4"},
	{false, "{\"prompt\":[1,99999]}", "prompt", "prompt item 1"},
	{false, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "2 strings"},
	{false, "{\"prompt\":\"x\",\"n\":2}", "n", "one choice"},
	{false, "{\"prompt\":\"x\",\"stream\":1}", "stream", "true or false"},
	{true, "{\"messages\":[]}", "messages", "non-empty array"},
	{true, "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}",
	 "messages", "role"},
};

/* Each named body is accepted (ids in the vocabulary; a chat's end of
 * turn as its stop token) or refused with a 400 naming its field. */
static void test_bodies_accepted_or_refused_by_field(void **state)
{
	(void)state;
	uint32_t vocab = strata_tokenizer_vocab_count(tok);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const body_case *c = &cases[i];
		parsed p;
		parse(c->chat, c->body, strlen(c->body), chat_format, &p);
		if (!c->param) {
			if (!p.ok)
				fail_msg("case %zu refused: %s", i,
					 error_message(&p));
			assert_null(p.r.body);
			assert_true(p.g.n_ids >= 1);
			for (size_t k = 0; k < p.g.n_ids; k++)
				assert_true((uint32_t)p.g.ids[k] < vocab);
			assert_true(!c->chat || p.g.stop_token >= 0);
		} else {
			assert_false(p.ok);
			assert_int_equal(p.r.status, 400);
			const char *param = error_param(&p), *m = error_message(&p);
			assert_non_null(m);
			if (c->param[0])
				assert_string_equal(param ? param : "(null)",
						    c->param);
			else
				assert_null(param);
			if (!strstr(m, c->message))
				fail_msg("case %zu: '%s' not in '%s'", i,
					 c->message, m);
		}
		parsed_fini(&p);
	}
	/* "stop" strings point into the body kept in req */
	parsed p;
	const char *b = cases[1].body;
	parse(false, b, strlen(b), chat_format, &p);
	assert_true(p.ok);
	assert_int_equal(p.g.n_stops, 2);
	assert_int_equal(p.g.stop_lens[1], 2);
	assert_memory_equal(p.g.stops[1], "bc", 2);
	assert_int_equal(p.g.n_ids, 3);
	assert_int_equal(p.g.ids[2], 407);
	parsed_fini(&p);
}

/* messages without a chat template: a 400 that says how to get one. */
static void test_chat_without_template_is_refused(void **state)
{
	(void)state;
	const char *b = cases[2].body;
	parsed p;
	parse(true, b, strlen(b), NULL, &p);
	assert_false(p.ok);
	assert_int_equal(p.r.status, 400);
	assert_string_equal(error_param(&p), "messages");
	assert_non_null(strstr(error_message(&p), "--chat-template"));
	parsed_fini(&p);
}

/* Every allocation of each accepted body's parse failing: refused with a
 * 503 out of memory (never a 400 blaming the request), nothing leaked;
 * then it succeeds unhindered. */
static void test_parse_oom_is_a_503(void **state)
{
	(void)state;
	static const char *const bodies[] = {
		"{\"prompt\":\"Once upon a time, there was\",\"stop\":\"a\"}",
		"{\"prompt\":[1,403,407,261]}",
		"{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief\"},"
		"{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
		"\"stop\":[\"x\",\"yz\"]}",
	};
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
		long n = 0;
		bool chat = strstr(bodies[i], "messages") != NULL;
		for (;; n++) {
			assert_true(n < 100000);
			parsed p;
			strata_alloc_fail_after(n);
			parse(chat, bodies[i], strlen(bodies[i]), chat_format, &p);
			strata_alloc_fail_after(-1);
			bool ok = p.ok;
			if (!ok) {
				assert_int_equal(p.r.status, 503);
				assert_non_null(strstr(error_message(&p),
						       "out of memory"));
			}
			parsed_fini(&p);
			if (ok)
				break;
		}
		assert_true(n >= 1);
	}
}

/* Every input the fuzzer kept: accepted within bounds, or an OpenAI
 * error object with 400 or 503, as fuzz_http_body.c checks. */
static void test_fuzz_corpus_replays(void **state)
{
	(void)state;
	DIR *d = opendir(CORPUS);
	assert_non_null(d);
	size_t files = 0, accepted = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", CORPUS, e->d_name);
		char *buf;
		size_t len;
		strata_error err;
		assert_int_equal(strata_file_read_all(path, 1 << 20, &buf, &len,
						      &err),
				 0);
		parsed p;
		if (len) {
			parse(buf[0] & 1, buf + 1, len - 1, chat_format, &p);
			if (p.ok) {
				assert_true(p.g.n_ids >= 1);
				accepted++;
			} else {
				assert_true(p.r.status == 400 ||
					    p.r.status == 503);
				assert_non_null(error_message(&p));
			}
			parsed_fini(&p);
		}
		strata_free(buf);
		files++;
	}
	closedir(d);
	assert_true(files >= 20);
	assert_true(accepted >= 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bodies_accepted_or_refused_by_field),
		cmocka_unit_test(test_chat_without_template_is_refused),
		cmocka_unit_test(test_parse_oom_is_a_503),
		cmocka_unit_test(test_fuzz_corpus_replays),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
