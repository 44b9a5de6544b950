/* test_stop_chat.c - stop strings and chat prompts through the commands:
 * `run --stop` and batch's "stop" end the text before a stop string split
 * over tokens (exit 0, the stop not printed), batch's OpenAI fields give
 * what `strata run` gives with the same options, "messages" and `run
 * --chat` render the model's template (tests/data/chat-stories260K), the
 * default batch seed is new each run, printed and recorded, `strata
 * chat` through a pipe answers as a fresh rendering of the conversation
 * would while reusing the KV cache, and the bad cases are refused naming
 * their line (layer: cli). */
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

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define CHAT STRATA_SOURCE_DIR "/tests/data/chat-stories260K"
#define QWEN STRATA_SOURCE_DIR \
	"/tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"

/* stories260K's greedy text after "Once upon a time", 30 tokens:
 * ", there was a little girl named Lily. She loved to play outside in the
 * park. ..." (", there was a" is 4 tokens; "little girl" 4 more: "▁little"
 * "▁g" "ir" "l"). */
#define PROMPT "Once upon a time"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* strata run's stdout without its final newline; exit 0 expected. */
static char *run_text(const char *const *argv, cli_result *keep)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	if (r.exit_code != 0)
		fail_msg("run exit %d: %s", r.exit_code, r.err);
	assert_true(r.out_len > 0 && r.out[r.out_len - 1] == '\n');
	r.out[r.out_len - 1] = '\0';
	char *text = strdup(r.out);
	if (keep)
		*keep = r;
	else
		cli_result_free(&r);
	return text;
}

/* strata batch on model with extra args; the result lines as an array. */
static json_t *batch(const char *model, const char *in,
		     const char *const *extra, cli_result *keep)
{
	const char *argv[24] = {"batch", model, "--device", "cpu"};
	size_t n = 4;
	for (size_t i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	cli_result r;
	assert_int_equal(cli_run(argv, in, strlen(in), NULL, &r), 0);
	if (r.exit_code != 0)
		fail_msg("batch exit %d: %s", r.exit_code, r.err);
	json_t *all = json_array();
	for (char *line = r.out; *line;) {
		char *nl = strchr(line, '\n');
		assert_non_null(nl);
		json_t *o = json_loadb(line, (size_t)(nl - line), 0, NULL);
		assert_non_null(o);
		json_array_append_new(all, o);
		line = nl + 1;
	}
	if (keep)
		*keep = r;
	else
		cli_result_free(&r);
	return all;
}

static const char *text_of(json_t *all, size_t i)
{
	return json_string_value(json_object_get(json_array_get(all, i), "text"));
}

static const char *finish_of(json_t *all, size_t i)
{
	return json_string_value(json_object_get(json_array_get(all, i),
						 "finish_reason"));
}

static size_t tokens_of(json_t *all, size_t i)
{
	return json_array_size(json_object_get(json_array_get(all, i), "tokens"));
}

/* The tokens the runner generated for line i (past the cut included). */
static json_int_t generated_of(json_t *all, size_t i)
{
	json_t *g = json_object_get(json_array_get(all, i), "generated_tokens");
	assert_true(json_is_integer(g));
	return json_integer_value(g);
}

/* The seed printed on stderr ("seed N"). */
static unsigned long long seed_printed(const char *err)
{
	const char *p = strstr(err, "; seed ");
	assert_non_null(p);
	return strtoull(p + 7, NULL, 10);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* run --stop: the text ends before the stop string, which spans two
 * tokens here ("little girl"), exit 0; a stop that never comes changes
 * nothing; of two, the first to appear wins. */
static void test_run_stop_ends_text_before_a_split_stop(void **state)
{
	(void)state;
	const char *plain[] = {"run", MODEL, "-p", PROMPT, "-n", "30",
			       "--temperature", "0", NULL};
	char *full = run_text(plain, NULL);
	assert_non_null(strstr(full, "little girl"));
	const char *stop[] = {"run", MODEL, "-p", PROMPT, "-n", "30",
			      "--temperature", "0", "--stop", "little girl",
			      "--stop", "zzz", NULL};
	cli_result r;
	char *cut = run_text(stop, &r);
	assert_string_equal(cut, ", there was a ");
	assert_non_null(strstr(r.err, "stopped at a stop string"));
	/* 8 tokens: ", there was a", then the four of "little girl", the
	 * last one ending the match */
	assert_non_null(strstr(r.err, "generated 8 tokens"));
	cli_result_free(&r);
	const char *never[] = {"run", MODEL, "-p", PROMPT, "-n", "30",
			       "--temperature", "0", "--stop", "dragon", NULL};
	char *same = run_text(never, NULL);
	assert_string_equal(same, full);
	const char *two[] = {"run", MODEL, "-p", PROMPT, "-n", "30",
			     "--temperature", "0", "--stop", "park",
			     "--stop", "Lily", NULL};
	char *first = run_text(two, NULL);
	size_t at = (size_t)(strstr(full, "Lily") - full);
	assert_int_equal(strlen(first), at);
	assert_memory_equal(first, full, at);
	free(full);
	free(cut);
	free(same);
	free(first);
}

/* batch "stop" (a string, an array) and --stop as the default: the text
 * as run --stop prints it, generation ended at the token ending the
 * match (generated_tokens, fewer than max_tokens), finish_reason "stop"; "stop": [] overrides --stop; without a match
 * finish_reason is "length". */
static void test_batch_stop_fields_match_run(void **state)
{
	(void)state;
	const char *in =
		"{\"id\":1,\"prompt\":\"" PROMPT "\",\"max_tokens\":30,"
		"\"temperature\":0,\"stop\":\"little girl\"}\n"
		"{\"id\":2,\"prompt\":\"" PROMPT "\",\"max_tokens\":30,"
		"\"temperature\":0,\"stop\":[\"zzz\",\"Lily\"]}\n"
		"{\"id\":3,\"prompt\":\"" PROMPT "\",\"max_tokens\":30,"
		"\"temperature\":0}\n"
		"{\"id\":4,\"prompt\":\"" PROMPT "\",\"max_tokens\":30,"
		"\"temperature\":0,\"stop\":[]}\n";
	const char *extra[] = {"--stop", "park", NULL};
	json_t *all = batch(MODEL, in, extra, NULL);
	const char *plain[] = {"run", MODEL, "-p", PROMPT, "-n", "30",
			       "--temperature", "0", NULL};
	char *full = run_text(plain, NULL);
	assert_string_equal(text_of(all, 0), ", there was a ");
	assert_int_equal(tokens_of(all, 0), 8);
	/* generation ended at the step the stop completed: 8 of 30 */
	assert_int_equal(generated_of(all, 0), 8);
	assert_string_equal(finish_of(all, 0), "stop");
	size_t lily = (size_t)(strstr(full, "Lily") - full);
	assert_int_equal(strlen(text_of(all, 1)), lily);
	assert_memory_equal(text_of(all, 1), full, lily);
	size_t park = (size_t)(strstr(full, "park") - full);
	assert_int_equal(strlen(text_of(all, 2)), park);
	assert_int_equal(generated_of(all, 1), tokens_of(all, 1));
	assert_true(generated_of(all, 1) < 30);
	assert_int_equal(generated_of(all, 2), tokens_of(all, 2));
	assert_true(generated_of(all, 2) < 30);
	assert_string_equal(text_of(all, 3), full);
	assert_int_equal(tokens_of(all, 3), 30);
	assert_int_equal(generated_of(all, 3), 30);
	assert_string_equal(finish_of(all, 3), "length");
	json_decref(all);
	free(full);
}

/* top_p, top_k, min_p, temperature and seed as OpenAI names them give
 * what run's --top-p --top-k --min-p --temperature --seed give; fields
 * strata does not read (model, n, stream, user) are ignored, and null is
 * "not given". */
static void test_batch_openai_sampling_fields_match_run(void **state)
{
	(void)state;
	const char *in =
		"{\"id\":\"a\",\"model\":\"gpt-4o\",\"n\":1,\"stream\":false,"
		"\"user\":\"u\",\"prompt\":\"Lily went\",\"max_tokens\":20,"
		"\"temperature\":1.2,\"top_p\":0.7,\"top_k\":12,\"min_p\":0.02,"
		"\"seed\":77,\"stop\":null,\"key\":null}\n";
	json_t *all = batch(MODEL, in, NULL, NULL);
	const char *argv[] = {"run", MODEL, "-p", "Lily went", "-n", "20",
			      "--temperature", "1.2", "--top-p", "0.7",
			      "--top-k", "12", "--min-p", "0.02", "--seed",
			      "77", NULL};
	char *want = run_text(argv, NULL);
	assert_string_equal(text_of(all, 0), want);
	/* and the options matter: another top_k gives other text here */
	const char *other[] = {"run", MODEL, "-p", "Lily went", "-n", "20",
			       "--temperature", "1.2", "--seed", "77", NULL};
	char *defaults = run_text(other, NULL);
	assert_string_not_equal(defaults, want);
	json_decref(all);
	free(want);
	free(defaults);
}

/* The batch seed: new each run unless given, printed on stderr and
 * recorded as the telemetry's sampling.seed. */
static void test_batch_default_seed_is_new_printed_and_recorded(void **state)
{
	(void)state;
	char path[4096];
	cli_tmpdir(path, sizeof path - 16, "batch_seed");
	strcat(path, "/t.json");
	const char *in = "{\"id\":1,\"prompt\":\"Lily\",\"max_tokens\":4}\n";
	const char *extra[] = {"--telemetry", path, NULL};
	unsigned long long seeds[2];
	for (int k = 0; k < 2; k++) {
		cli_result r;
		json_decref(batch(MODEL, in, extra, &r));
		seeds[k] = seed_printed(r.err);
		cli_result_free(&r);
		json_t *t = json_load_file(path, 0, NULL);
		assert_non_null(t);
		json_t *s = json_object_get(json_object_get(t, "sampling"), "seed");
		assert_true(json_is_integer(s));
		assert_true((unsigned long long)json_integer_value(s) == seeds[k]);
		json_decref(t);
	}
	assert_true(seeds[0] != seeds[1]);
	const char *given[] = {"--seed", "5", "--telemetry", path, NULL};
	cli_result r;
	json_decref(batch(MODEL, in, given, &r));
	assert_true(seed_printed(r.err) == 5);
	cli_result_free(&r);
}

/* run --chat: the prompt as a user message through the model's template;
 * batch "messages" gives the same prompt and the same greedy text;
 * --chat-template overrides the template (more prompt tokens here). */
static void test_run_chat_and_batch_messages_render_the_template(void **state)
{
	(void)state;
	const char *argv[] = {"run", CHAT, "--chat", "-p", "Tell me a story",
			      "-n", "24", "--temperature", "0", NULL};
	cli_result r;
	char *chat = run_text(argv, &r);
	/* "<s>[INST]Tell me a story[/INST]": BOS once, then the text */
	assert_non_null(strstr(r.err, "prompt 24 tokens"));
	cli_result_free(&r);
	const char *in = "{\"id\":1,\"messages\":[{\"role\":\"user\",\"content\":"
			 "[{\"type\":\"text\",\"text\":\"Tell me a story\"}]}],"
			 "\"max_tokens\":24,\"temperature\":0}\n";
	json_t *all = batch(CHAT, in, NULL, NULL);
	assert_string_equal(text_of(all, 0), chat);
	assert_int_equal(json_integer_value(json_object_get(
				 json_array_get(all, 0), "prompt_tokens")), 24);
	json_decref(all);
	/* a plain prompt differs: the template is really used */
	const char *raw[] = {"run", CHAT, "-p", "Tell me a story", "-n", "24",
			     "--temperature", "0", NULL};
	char *plain_text = run_text(raw, NULL);
	assert_string_not_equal(plain_text, chat);
	const char *qwen[] = {"run", MODEL, "--chat-template", QWEN, "-p",
			      "Tell me a story", "-n", "4", "--temperature",
			      "0", NULL};
	char *q = run_text(qwen, &r);
	assert_null(strstr(r.err, "prompt 24 tokens"));
	cli_result_free(&r);
	free(q);
	free(chat);
	free(plain_text);
}

/* The refusals: a model without a template (run --chat, batch messages),
 * bad messages and OpenAI fields naming the line, a bad --stop. */
static void test_chat_and_stop_errors(void **state)
{
	(void)state;
	static const struct {
		const char *model, *input, *words;
	} cases[] = {
		{MODEL, "{\"id\":1,\"prompt\":\"a\"}\n{\"id\":2,\"messages\":"
			"[{\"role\":\"user\",\"content\":\"a\"}]}\n",
		 "line 2: "},
		{CHAT, "{\"id\":1,\"messages\":[{\"role\":\"bot\",\"content\":"
		       "\"a\"}]}\n", "line 1: message 1: role 'bot'"},
		{CHAT, "{\"id\":1,\"messages\":[{\"role\":\"user\",\"content\":"
		       "[{\"type\":\"image_url\"}]}]}\n", "type 'image_url'"},
		{CHAT, "{\"id\":1,\"messages\":[{\"role\":\"assistant\","
		       "\"content\":\"a\"}]}\n", "line 1: After the optional"},
		{CHAT, "{\"id\":1,\"messages\":{}}\n", "not a JSON array"},
		{CHAT, "{\"id\":1,\"prompt\":\"a\",\"messages\":[]}\n",
		 "both 'prompt' and 'messages'"},
		{CHAT, "{\"id\":1,\"prompt\":\"a\",\"stop\":[\"\"]}\n",
		 "'stop' holds an empty string"},
		{CHAT, "{\"id\":1,\"prompt\":\"a\",\"stop\":[1]}\n",
		 "not a string"},
		{CHAT, "{\"id\":1,\"prompt\":\"a\",\"stop\":{}}\n",
		 "'stop' is not a string or an array"},
		{CHAT, "{\"id\":1,\"prompt\":\"a\",\"top_k\":1.5}\n", "'top_k'"},
		{CHAT, "{\"id\":1,\"prompt\":\"a\",\"min_p\":-1}\n", "'min_p'"},
		{CHAT, "{\"id\":1,\"prompt\":\"a\",\"top_p\":\"x\"}\n", "'top_p'"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const char *argv[] = {"batch", cases[i].model, NULL};
		cli_result r;
		assert_int_equal(cli_run(argv, cases[i].input,
					 strlen(cases[i].input), NULL, &r), 0);
		if (r.exit_code != 1 || r.out_len != 0 ||
		    !strstr(r.err, cases[i].words) || !strstr(r.err, "fix:"))
			fail_msg("case %zu: exit %d, err '%s'", i, r.exit_code,
				 r.err);
		cli_result_free(&r);
	}
	const char *nochat[] = {"run", MODEL, "--chat", "-p", "a", NULL};
	cli_result r;
	assert_int_equal(cli_run(nochat, "", 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "--chat-template FILE"));
	cli_result_free(&r);
	const char *missing[] = {"run", MODEL, "--chat-template",
				 "/nonexistent.jinja", "-p", "a", NULL};
	assert_int_equal(cli_run(missing, "", 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "--chat-template"));
	cli_result_free(&r);
	const char *empty[] = {"run", MODEL, "-p", "a", "--stop", "", NULL};
	assert_int_equal(cli_run(empty, "", 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "empty stop string"));
	cli_result_free(&r);
	const char *bstop[] = {"batch", MODEL, "--stop", "", NULL};
	assert_int_equal(cli_run(bstop, "", 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
}

/* A batch "messages" request's greedy text (max_tokens 20) on CHAT. */
static char *batch_reply(const char *messages_json)
{
	char in[4096];
	snprintf(in, sizeof in, "{\"id\":1,\"messages\":%s,\"max_tokens\":20,"
		 "\"temperature\":0}\n", messages_json);
	json_t *all = batch(CHAT, in, NULL, NULL);
	char *t = strdup(text_of(all, 0));
	json_decref(all);
	return t;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* strata chat through a pipe: each reply is what a fresh render of the
 * whole conversation gives (batch "messages"), though the second turn
 * reuses the first turn's KV; /exit ends it (the line after it is not
 * answered); /reset starts over; --quiet leaves stderr empty. */
static void test_chat_through_a_pipe_reuses_the_kv_exactly(void **state)
{
	(void)state;
	char *t1 = batch_reply("[{\"role\":\"user\",\"content\":\"Tell me a "
			       "story\"}]");
	json_t *m2 = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "role",
			       "user", "content", "Tell me a story", "role",
			       "assistant", "content", t1, "role", "user",
			       "content", "What next?");
	char *m2s = json_dumps(m2, JSON_COMPACT);
	char *t2 = batch_reply(m2s);
	const char *argv[] = {"chat", CHAT, "-n", "20", "--temperature", "0",
			      "--device", "cpu", NULL};
	const char *in = "Tell me a story\nWhat next?\n/exit\nnot read\n";
	cli_result r;
	assert_int_equal(cli_run(argv, in, strlen(in), NULL, &r), 0);
	assert_int_equal(r.exit_code, 0);
	char want[2048];
	snprintf(want, sizeof want, "%s\n%s\n", t1, t2);
	if (strcmp(r.out, want))
		fail_msg("chat wrote '%s', expected '%s'", r.out, want);
	/* two turns; the second reused the first's 24 prompt positions
	 * and the 19 replies' tokens fed back */
	assert_int_equal(count(r.err, "strata: prompt "), 2);
	assert_non_null(strstr(r.err, "prompt 24 tokens (0 reused)"));
	assert_non_null(strstr(r.err, "(43 reused)"));
	cli_result_free(&r);
	/* /reset: the same first message gives the same first reply */
	const char *again = "Tell me a story\n/reset\nTell me a story\n";
	assert_int_equal(cli_run(argv, again, strlen(again), NULL, &r), 0);
	assert_int_equal(r.exit_code, 0);
	snprintf(want, sizeof want, "%s\n%s\n", t1, t1);
	assert_string_equal(r.out, want);
	cli_result_free(&r);
	/* --quiet: the replies alone, nothing on stderr (no greeting, no
	 * turn's figures) */
	const char *quiet[] = {"chat", CHAT, "-n", "20", "--temperature", "0",
			       "--device", "cpu", "--quiet", NULL};
	assert_int_equal(cli_run(quiet, again, strlen(again), NULL, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, want);
	if (r.err[0])
		fail_msg("chat --quiet wrote '%s' on stderr", r.err);
	cli_result_free(&r);
	free(m2s);
	json_decref(m2);
	free(t1);
	free(t2);
}

/* Chat errors: no template (exit 1, how to give one); a message the
 * context cannot hold is refused and the conversation goes on; a turn
 * the template refuses likewise. */
static void test_chat_errors(void **state)
{
	(void)state;
	const char *none[] = {"chat", MODEL, "--device", "cpu", NULL};
	cli_result r;
	assert_int_equal(cli_run(none, "hi\n", 3, NULL, &r), 0);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "--chat-template FILE"));
	cli_result_free(&r);
	const char *small[] = {"chat", CHAT, "--context", "64", "-n", "4",
			       "--temperature", "0", "--device", "cpu", NULL};
	char in[1024] = "";
	for (int i = 0; i < 40; i++)
		strcat(in, "Lily and Tom ");
	strcat(in, "\nhi\n");
	assert_int_equal(cli_run(small, in, strlen(in), NULL, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.err, "the context 64"));
	assert_non_null(strstr(r.err, "/reset"));
	/* the long message was dropped: "hi" is answered alone (17 tokens:
	 * "<s>[INST]hi[/INST]" in stories260K's small vocabulary) */
	assert_int_equal(count(r.err, "strata: prompt "), 1);
	assert_non_null(strstr(r.err, "strata: prompt 17 tokens"));
	cli_result_free(&r);
	const char *bad[] = {"chat", CHAT, "--stop", "", NULL};
	assert_int_equal(cli_run(bad, "", 0, NULL, &r), 0);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_stop_ends_text_before_a_split_stop),
		cmocka_unit_test(test_batch_stop_fields_match_run),
		cmocka_unit_test(test_batch_openai_sampling_fields_match_run),
		cmocka_unit_test(test_batch_default_seed_is_new_printed_and_recorded),
		cmocka_unit_test(test_run_chat_and_batch_messages_render_the_template),
		cmocka_unit_test(test_chat_and_stop_errors),
		cmocka_unit_test(test_chat_through_a_pipe_reuses_the_kv_exactly),
		cmocka_unit_test(test_chat_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
