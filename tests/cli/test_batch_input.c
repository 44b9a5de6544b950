/* test_batch_input.c - `strata batch`'s request parser on its own: the
 * defaults a request gets (key = the first 256 bytes of the prompt,
 * max_tokens and sampler from the options), every allocation failing
 * cleanly, windows handing out every request once, and the fuzz corpus
 * replayed (layer: cli). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cli/batch_input.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define CHAT_MODEL STRATA_SOURCE_DIR "/tests/data/chat-stories260K"
#define CORPUS STRATA_SOURCE_DIR "/tests/fuzz/corpus/fuzz_batch_input"

static strata_tokenizer *tok;

static int setup(void **state)
{
	(void)state;
	strata_error err;
	return strata_tokenizer_load(MODEL, &tok, &err) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	strata_tokenizer_destroy(tok);
	return 0;
}

static batch_input_options options(void)
{
	batch_input_options bo = {.tok = tok, .default_max_tokens = 7};
	strata_sampler_params_default(&bo.sampler);
	bo.sampler.seed = 5;
	return bo;
}

/* Without key, the key is the prompt's first 256 bytes; without the
 * optional fields, the options' defaults; given fields override them. */
static void test_defaults_and_fields(void **state)
{
	(void)state;
	char text[2048], prompt[400];
	memset(prompt, 'a', sizeof prompt - 1);
	prompt[sizeof prompt - 1] = '\0';
	snprintf(text, sizeof text,
		 "{\"id\":1,\"prompt\":\"%s\"}\n"
		 "{\"id\":\"x\",\"prompt\":\"Once\",\"max_tokens\":3,"
		 "\"temperature\":0,\"seed\":9,\"key\":\"k\"}\n",
		 prompt);
	batch_input_options bo = options();
	batch_input in;
	strata_error err;
	assert_int_equal(batch_input_parse(&bo, text, strlen(text), &in, &err),
			 0);
	assert_int_equal(in.count, 2);
	const strata_batch_request *a = &in.items[0].req, *b = &in.items[1].req;
	assert_int_equal(a->key_bytes, 256);
	assert_memory_equal(a->key, prompt, 256);
	assert_int_equal(a->max_tokens, 7);
	assert_int_equal(a->sampler.seed, 5);
	assert_true(a->sampler.temperature == bo.sampler.temperature);
	assert_int_equal(b->key_bytes, 1);
	assert_memory_equal(b->key, "k", 1);
	assert_int_equal(b->max_tokens, 3);
	assert_int_equal(b->sampler.seed, 9);
	assert_true(b->sampler.temperature == 0);
	assert_int_equal(in.items[1].line, 2);
	assert_true(b->n_prompt >= 1);
	batch_input_fini(&in);
}

/* Every allocation of a parse fails cleanly: E_NOMEM (or the tokenizer's
 * error carrying it), nothing kept. */
static void test_parse_oom(void **state)
{
	(void)state;
	const char *text = "{\"id\":1,\"prompt\":\"Once upon a time\"}\n"
			   "{\"id\":2,\"prompt\":\"Lily\",\"key\":\"q\"}\n";
	batch_input_options bo = options();
	batch_input in;
	strata_error err;
	long n = 0;
	for (;; n++) {
		strata_alloc_fail_after(n);
		strata_status st =
			batch_input_parse(&bo, text, strlen(text), &in, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM && st != STRATA_E_INFER_BATCH_INPUT)
			fail_msg("n=%ld: %s", n, err.message);
		assert_int_equal(in.count, 0);
		assert_null(in.items);
	}
	assert_true(n >= 3);
	assert_int_equal(in.count, 2);
	batch_input_fini(&in);
}

/* The OpenAI fields parse into the request (stop strings pooled,
 * messages rendered with no second BOS), and every allocation of such a
 * parse fails cleanly. */
static void test_openai_fields_and_their_oom(void **state)
{
	(void)state;
	const char *text =
		"{\"id\":1,\"prompt\":\"Once\",\"stop\":[\"a b\",\"cd\"],"
		"\"top_p\":0.5,\"top_k\":3,\"min_p\":null,\"model\":\"m\"}\n"
		"{\"id\":2,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
		"\"stop\":\"x\"}\n"
		"{\"id\":3,\"prompt\":\"Lily\"}\n";
	strata_tokenizer *ct = NULL;
	strata_chat_format *f = NULL;
	strata_error err;
	assert_int_equal(strata_tokenizer_load(CHAT_MODEL, &ct, &err), STRATA_OK);
	assert_int_equal(strata_chat_format_load(CHAT_MODEL, NULL, ct, &f, &err),
			 STRATA_OK);
	batch_input_options bo = options();
	bo.tok = ct;
	bo.chat = f;
	batch_input in;
	long n = 0;
	for (;; n++) {
		assert_true(n < 100000); /* the parse succeeds unhindered */
		strata_alloc_fail_after(n);
		strata_status st =
			batch_input_parse(&bo, text, strlen(text), &in, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM && st != STRATA_E_INFER_BATCH_INPUT &&
		    st != STRATA_E_TEXT_TEMPLATE_LIMIT)
			fail_msg("n=%ld: %s", n, err.message);
		assert_int_equal(in.count, 0);
		assert_null(in.items);
	}
	assert_int_equal(in.count, 3);
	const char *v[STRATA_STOP_MAX_COUNT];
	size_t lens[STRATA_STOP_MAX_COUNT];
	assert_int_equal(batch_input_stops(&in, 0, v, lens), 2);
	assert_int_equal(lens[0], 3);
	assert_memory_equal(v[0], "a b", 3);
	assert_int_equal(lens[1], 2);
	assert_memory_equal(v[1], "cd", 2);
	assert_int_equal(batch_input_stops(&in, 1, v, lens), 1);
	assert_int_equal(batch_input_stops(&in, 2, v, lens), -1);
	const strata_batch_request *a = &in.items[0].req, *b = &in.items[1].req;
	assert_true(a->sampler.top_p == 0.5f);
	assert_int_equal(a->sampler.top_k, 3);
	assert_true(a->sampler.min_p == bo.sampler.min_p);
	assert_false(in.items[0].chat);
	assert_true(in.items[1].chat);
	/* "<s>[INST]Hi[/INST]": one BOS, from the template */
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(ct, &sp);
	assert_int_equal(b->prompt[0], sp.bos);
	assert_int_not_equal(b->prompt[1], sp.bos);
	/* the key defaults to the rendering */
	assert_memory_equal(b->key, "<s>[INST]Hi[/INST]", b->key_bytes);
	batch_input_fini(&in);
	strata_chat_format_destroy(f);
	strata_tokenizer_destroy(ct);
}

/* Every input the fuzzer kept parses or fails with a line named, as in
 * fuzz_batch_input.c. */
static void test_fuzz_corpus_replays(void **state)
{
	(void)state;
	DIR *d = opendir(CORPUS);
	assert_non_null(d);
	size_t files = 0;
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
		batch_input_options bo = options();
		batch_input in;
		strata_status st = batch_input_parse(&bo, buf, len, &in, &err);
		if (st) {
			assert_int_equal(in.count, 0);
			assert_true(strstr(err.message, "line ") ||
				    strstr(err.message, "no requests"));
		}
		batch_input_fini(&in);
		strata_free(buf);
		files++;
	}
	closedir(d);
	assert_true(files >= 2);
}

static strata_status parse_text(const char *text, batch_input *in,
				strata_error *err)
{
	batch_input_options bo = options();
	return batch_input_parse(&bo, text, strlen(text), in, err);
}

/* A repeated id names the earliest line that repeats one and the first
 * line that had it, as the pairwise check did; equal ids are equal JSON
 * values (1 and "1" differ, "a" and "\u0061" do not). */
static void test_repeated_id_is_the_first_repeat(void **state)
{
	(void)state;
	batch_input in;
	strata_error err;
	assert_int_equal(parse_text("{\"id\":\"a\",\"prompt\":\"x\"}\n"
				    "{\"id\":\"b\",\"prompt\":\"x\"}\n"
				    "{\"id\":\"b\",\"prompt\":\"x\"}\n"
				    "{\"id\":\"a\",\"prompt\":\"x\"}\n"
				    "{\"id\":\"b\",\"prompt\":\"x\"}\n",
				    &in, &err),
			 STRATA_E_INFER_BATCH_INPUT);
	assert_string_equal(err.message, "line 3: 'id' repeats the id of line 2");
	assert_null(in.items);
	assert_int_equal(parse_text("{\"id\":1,\"prompt\":\"x\"}\n"
				    "{\"id\":\"1\",\"prompt\":\"x\"}\n\n"
				    "{\"id\":\"\\u0031\",\"prompt\":\"x\"}\n",
				    &in, &err),
			 STRATA_E_INFER_BATCH_INPUT);
	assert_string_equal(err.message, "line 4: 'id' repeats the id of line 2");
	assert_int_equal(parse_text("{\"id\":1,\"prompt\":\"x\"}\n"
				    "{\"id\":\"1\",\"prompt\":\"x\"}\n",
				    &in, &err),
			 STRATA_OK);
	assert_int_equal(in.count, 2);
	size_t len;
	const char *id = batch_input_id(&in, 1, &len);
	assert_int_equal(len, 3);
	assert_memory_equal(id, "\"1\"", 3);
	batch_input_fini(&in);
}

/* 200,000 requests with the repeat at the end: the pairwise check took
 * 2.5 s at 10k and over 600 s at 100k (issue 20, defect 2); sorting takes
 * well under a second on top of the parse. */
static void test_repeated_id_among_many_is_fast(void **state)
{
	(void)state;
	const size_t n = 200000;
	size_t cap = n * 40 + 64, len = 0;
	char *text = malloc(cap);
	assert_non_null(text);
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"{\"id\":%zu,\"prompt\":\"a\"}\n", i);
	len += (size_t)snprintf(text + len, cap - len,
				"{\"id\":%d,\"prompt\":\"a\"}\n", 77777);
	batch_input_options bo = options();
	batch_input in;
	strata_error err;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(batch_input_parse(&bo, text, len, &in, &err),
			 STRATA_E_INFER_BATCH_INPUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_string_equal(err.message,
			    "line 200001: 'id' repeats the id of line 77778");
	double s = (double)(t1.tv_sec - t0.tv_sec) +
		   (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	/* quadratic work takes minutes; AddressSanitizer alone makes the
	 * linear parse ~30x slower (35 s under make asan's parallel ctest),
	 * ThreadSanitizer about 15x (26 s under make tsan); the check parses
	 * every line once and the whole parse a second time */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	const double limit = 120;
#else
	const double limit = 20;
#endif
	if (s > limit)
		fail_msg("200k requests took %.1f s (limit %.0f s)", s, limit);
	/* the parsed state is a small multiple of the input (no JSON kept) */
	text[len - 20] = '\0';
	len = strlen(text);
	len = (size_t)(strrchr(text, '\n') - text) + 1;
	assert_int_equal(batch_input_parse(&bo, text, len, &in, &err), 0);
	assert_int_equal(in.count, n);
	size_t held = in.items_cap * sizeof *in.items + in.text_cap +
		      in.tokens_cap * sizeof *in.tokens;
	if (held > 6 * len)
		fail_msg("%zu bytes held for %zu bytes of input", held, len);
	batch_input_fini(&in);
	free(text);
}

/* A seed in [2^63, 2^64), as `run --seed` takes, though jansson holds only
 * int64; past 2^64, or another too-big integer, is still an error. */
static void test_seed_takes_all_64_bits(void **state)
{
	(void)state;
	batch_input in;
	strata_error err;
	assert_int_equal(parse_text("{\"id\":1,\"prompt\":\"x\",\"seed\" : "
				    "18446744073709551615}\n"
				    "{\"seed\":9223372036854775808,\"id\":2,"
				    "\"prompt\":\"x\"}\n",
				    &in, &err),
			 STRATA_OK);
	assert_true(in.items[0].req.sampler.seed == UINT64_MAX);
	assert_true(in.items[1].req.sampler.seed == (uint64_t)1 << 63);
	batch_input_fini(&in);
	static const char *const bad[] = {
		"{\"id\":1,\"prompt\":\"x\",\"seed\":18446744073709551616}\n",
		"{\"id\":1,\"prompt\":\"x\",\"max_tokens\":18446744073709551615}\n",
		"{\"id\":18446744073709551615,\"prompt\":\"x\"}\n",
		"{\"id\":1,\"prompt\":\"x\",\"seed\":-18446744073709551615}\n",
		"{\"id\":1,\"prompt\":\"x\",\"seed\":18446744073709551615,}\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		assert_int_equal(parse_text(bad[i], &in, &err),
				 STRATA_E_INFER_BATCH_INPUT);
		assert_non_null(strstr(err.message, "line 1: "));
		assert_null(in.items);
	}
}

/* The same request from the whole parse (w) and from a window (v). */
static void assert_same_request(const batch_input *w, size_t i,
				const batch_input *v, size_t k)
{
	const batch_item *a = &w->items[i], *b = &v->items[k];
	assert_int_equal(a->line, b->line);
	assert_int_equal(a->req.n_prompt, b->req.n_prompt);
	assert_memory_equal(a->req.prompt, b->req.prompt,
			    a->req.n_prompt * sizeof *a->req.prompt);
	assert_int_equal(a->req.key_bytes, b->req.key_bytes);
	assert_memory_equal(a->req.key, b->req.key, a->req.key_bytes);
	assert_int_equal(a->req.max_tokens, b->req.max_tokens);
	size_t la, lb;
	const char *ia = batch_input_id(w, i, &la), *ib = batch_input_id(v, k, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(ia, ib, la);
	const char *sa[STRATA_STOP_MAX_COUNT], *sb[STRATA_STOP_MAX_COUNT];
	size_t na[STRATA_STOP_MAX_COUNT], nb[STRATA_STOP_MAX_COUNT];
	long ca = batch_input_stops(w, i, sa, na);
	assert_int_equal(ca, batch_input_stops(v, k, sb, nb));
	for (long j = 0; j < ca; j++) {
		assert_int_equal(na[j], nb[j]);
		assert_memory_equal(sa[j], sb[j], na[j]);
	}
}

static const char windows_text[] =
	"{\"id\":1,\"prompt\":\"Once upon a time\",\"max_tokens\":9}\n\n"
	"{\"id\":2,\"prompt\":\"Lily\",\"key\":\"q\",\"stop\":[\"a\",\"bc\"]}\n"
	"  \n"
	"{\"id\":\"x\",\"prompt\":\"The cat sat on the mat\"}\n"
	"{\"id\":4,\"prompt\":\"Tom\"}\n"
	"{\"id\":5,\"prompt\":\"One day, a big bear\",\"max_tokens\":40}\n"
	"{\"id\":6,\"prompt\":\"Sun\"}\n"
	"{\"id\":7,\"prompt\":\"Once\"}";

/* The check counts the requests and the figures the runner is sized by;
 * windows of 3 hand out every request once, in input order, each the
 * same as the whole parse's, then nothing. */
static void test_windows_hand_out_every_request_once(void **state)
{
	(void)state;
	batch_input_options bo = options();
	size_t len = strlen(windows_text);
	batch_input whole, win = {0};
	batch_source src;
	strata_error err;
	assert_int_equal(batch_input_parse(&bo, windows_text, len, &whole, &err),
			 STRATA_OK);
	assert_int_equal(whole.count, 7);
	assert_int_equal(batch_source_check(&bo, windows_text, len, &src, &err),
			 STRATA_OK);
	assert_int_equal(src.count, 7);
	uint64_t positions = 0;
	uint32_t prefill = 0;
	for (size_t i = 0; i < whole.count; i++) {
		const strata_batch_request *q = &whole.items[i].req;
		if (q->n_prompt + (uint64_t)q->max_tokens > positions)
			positions = q->n_prompt + (uint64_t)q->max_tokens;
		if (q->n_prompt > prefill)
			prefill = q->n_prompt;
	}
	assert_int_equal(src.positions, positions);
	assert_int_equal(src.prefill, prefill);
	static const size_t sizes[] = {3, 3, 1, 0, 0};
	size_t seen = 0;
	for (size_t w = 0; w < sizeof sizes / sizeof *sizes; w++) {
		assert_int_equal(batch_source_next(&bo, &src, 3, &win, &err),
				 STRATA_OK);
		assert_int_equal(win.count, sizes[w]);
		for (size_t k = 0; k < win.count; k++)
			assert_same_request(&whole, seen + k, &win, k);
		seen += win.count;
		assert_int_equal(src.taken, seen);
	}
	assert_int_equal(whole.items[6].line, 9);
	batch_input_fini(&win);
	batch_source_fini(&src);
	batch_input_fini(&whole);
}

/* Every allocation of a window failing: E_NOMEM, the window empty and
 * the cursor where it was, so the same window parses once memory is
 * there; every allocation of the check failing leaves the source empty. */
static void test_window_oom_keeps_the_cursor(void **state)
{
	(void)state;
	batch_input_options bo = options();
	size_t len = strlen(windows_text);
	batch_input whole, win = {0};
	batch_source src;
	strata_error err;
	assert_int_equal(batch_input_parse(&bo, windows_text, len, &whole, &err),
			 STRATA_OK);
	long n = 0;
	for (;; n++) {
		strata_alloc_fail_after(n);
		strata_status st = batch_source_check(&bo, windows_text, len,
						      &src, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_int_equal(src.count, 0);
		assert_null(src.buf);
	}
	assert_true(n >= 3);
	assert_int_equal(batch_source_next(&bo, &src, 2, &win, &err), 0);
	size_t at = src.at, taken = src.taken;
	batch_input_fini(&win);
	for (n = 0;; n++) {
		strata_alloc_fail_after(n);
		strata_status st = batch_source_next(&bo, &src, 4, &win, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_int_equal(win.count, 0);
		assert_null(win.items);
		assert_int_equal(src.at, at);
		assert_int_equal(src.taken, taken);
	}
	assert_true(n >= 3);
	assert_int_equal(win.count, 4);
	for (size_t k = 0; k < 4; k++)
		assert_same_request(&whole, 2 + k, &win, k);
	batch_input_fini(&win);
	batch_source_fini(&src);
	batch_input_fini(&whole);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_and_fields),
		cmocka_unit_test(test_parse_oom),
		cmocka_unit_test(test_openai_fields_and_their_oom),
		cmocka_unit_test(test_fuzz_corpus_replays),
		cmocka_unit_test(test_repeated_id_is_the_first_repeat),
		cmocka_unit_test(test_repeated_id_among_many_is_fast),
		cmocka_unit_test(test_seed_takes_all_64_bits),
		cmocka_unit_test(test_windows_hand_out_every_request_once),
		cmocka_unit_test(test_window_oom_keeps_the_cursor),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
