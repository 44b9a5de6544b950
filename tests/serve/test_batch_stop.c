/* test_batch_stop.c - stop strings and stop tokens end a batch request at
 * the step they complete on, on stories260K: the tokens are the unstopped
 * run's up to the one completing the stop, fewer are generated and
 * computed than max_tokens asks, a stop that never comes changes nothing,
 * and the requests beside a stopped one (same replica, several replicas)
 * keep their tokens (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/batch_fixture.h"

#define MODEL BATCH_FIXTURE_MODEL
#define MAX_NEW 30u

/* What ends_of gives for request i of the next run (NULL: none). */
static const strata_batch_ends *ends[8];

static const strata_batch_ends *ends_of(void *user, size_t i)
{
	(void)user;
	return i < 8 ? ends[i] : NULL;
}

typedef struct fixture {
	strata_tokenizer *tok;
	int32_t *prompt;
	size_t n_prompt;
} fixture;

static strata_batch *open_batch(const strata_tokenizer *tok,
				uint32_t replicas, uint32_t sequences)
{
	strata_batch_options o = batch_fixture_options(replicas, sequences);
	o.ends_of = ends_of;
	o.tokenizer = tok;
	memset(ends, 0, sizeof ends);
	return batch_fixture_open(&o);
}

static strata_batch_request greedy(const fixture *f, int key)
{
	strata_batch_request q = {.prompt = f->prompt,
				  .n_prompt = (uint32_t)f->n_prompt,
				  .max_tokens = MAX_NEW};
	static const char keys[] = "abcdefgh";
	q.key = keys + key % 8;
	q.key_bytes = 1;
	strata_sampler_params_default(&q.sampler);
	q.sampler.temperature = 0;
	return q;
}

/* The text of tokens[0..n) continuing the prompt. */
static char *text_of(const fixture *f, const int32_t *tokens, uint32_t n)
{
	int32_t *all = test_malloc((f->n_prompt + n) * sizeof *all);
	memcpy(all, f->prompt, f->n_prompt * sizeof *all);
	memcpy(all + f->n_prompt, tokens, n * sizeof *all);
	char *whole = NULL, *head = NULL;
	size_t wl = 0, hl = 0;
	strata_error err;
	assert_int_equal(strata_tokenizer_decode(f->tok, all, f->n_prompt + n,
						 true, &whole, &wl, &err),
			 0);
	assert_int_equal(strata_tokenizer_decode(f->tok, f->prompt,
						 f->n_prompt, true, &head, &hl,
						 &err),
			 0);
	assert_true(hl <= wl);
	char *t = test_malloc(wl - hl + 1);
	memcpy(t, whole + hl, wl - hl + 1);
	strata_free(whole);
	strata_free(head);
	test_free(all);
	return t;
}

static int setup(void **state)
{
	fixture *f = test_calloc(1, sizeof *f);
	strata_error err;
	if (strata_tokenizer_load(MODEL, &f->tok, &err) ||
	    strata_tokenizer_encode(f->tok, "Once upon a time", 16, true,
				    &f->prompt, &f->n_prompt, &err))
		fail_msg("%s", err.message);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	strata_free(f->prompt);
	strata_tokenizer_destroy(f->tok);
	test_free(f);
	return 0;
}

/* ------------------------------------------------------------------------ */

/* 2 replicas of 2 sequences, 6 requests: a stop string split over tokens
 * ("little girl": ", there was a" then 4 tokens) ends its request after
 * the 8th token, tokens the unstopped run's first 8, 8 generated of 30
 * and the replica computing 22 fewer positions; a stop token (the
 * unstopped run's 6th) ends at 5, not kept; a stop that never comes, and
 * the requests beside the stopped ones, keep all 30. */
static void test_batch_stop_ends_request_at_the_step(void **state)
{
	fixture *f = *state;
	strata_batch *b = open_batch(f->tok, 2, 2);
	strata_batch_request plain = greedy(f, 0);
	strata_batch_result full;
	strata_error err;
	assert_int_equal(strata_batch_run(b, &plain, 1, &full, NULL, &err), 0);
	assert_int_equal(full.n_tokens, MAX_NEW);
	assert_false(full.stopped);
	char *text = text_of(f, full.tokens, full.n_tokens);
	assert_non_null(strstr(text, "little girl"));

	const char *girl[] = {"little girl"};
	const char *never[] = {"dragon", "zzz"};
	strata_batch_request q[6];
	for (int i = 0; i < 6; i++)
		q[i] = greedy(f, i);
	strata_batch_ends e1 = {.stops = girl, .n_stops = 1};
	strata_batch_ends e3 = {.stops = never, .n_stops = 2};
	strata_batch_ends e4 = {.has_stop_token = true,
				.stop_token = full.tokens[5]};
	ends[1] = &e1;
	ends[3] = &e3;
	ends[4] = &e4;
	strata_batch_result r[6];
	assert_int_equal(strata_batch_run(b, q, 6, r, NULL, &err), 0);
	for (int i = 0; i < 6; i++) {
		uint32_t want = i == 1 ? 8 : i == 4 ? 5 : MAX_NEW;
		assert_int_equal(r[i].n_tokens, want);
		assert_int_equal(r[i].gen.generated_tokens, want);
		assert_memory_equal(r[i].tokens, full.tokens,
				    want * sizeof(int32_t));
		assert_int_equal(r[i].stopped, i == 1 || i == 4);
		assert_false(r[i].gen.stopped_at_eos);
	}
	assert_true(r[1].gen.stopped_by_caller);
	char *cut = text_of(f, r[1].tokens, r[1].n_tokens);
	size_t at = (size_t)(strstr(text, "little girl") - text);
	assert_memory_equal(cut, text, at); /* what a full run cut gives */
	assert_string_equal(cut + at, "little girl");
	uint64_t computed = 0;
	for (uint32_t d = 0; d < 2; d++) {
		strata_batch_replica_stats s;
		strata_batch_replica_get_stats(b, d, &s);
		computed += s.tokens;
	}
	/* the first run, then 6 prompts and every generated token but the
	 * last of each (its position is never computed) */
	uint64_t per = f->n_prompt + MAX_NEW - 1;
	assert_int_equal(computed, 7 * per - (MAX_NEW - 8) - (MAX_NEW - 5 - 1));
	test_free(cut);
	test_free(text);
	strata_batch_results_free(&full, 1);
	strata_batch_results_free(r, 6);
	strata_batch_destroy(b);
}

/* A stop string without a tokenizer to decode with is refused by the
 * request's replica and then the batch, naming the cause. */
static void test_batch_stop_needs_a_tokenizer(void **state)
{
	fixture *f = *state;
	strata_batch *b = open_batch(NULL, 1, 1);
	strata_batch_request q = greedy(f, 0);
	const char *girl[] = {"little girl"};
	strata_batch_ends e = {.stops = girl, .n_stops = 1};
	ends[0] = &e;
	strata_batch_result r;
	strata_error err;
	assert_int_equal(strata_batch_run(b, &q, 1, &r, NULL, &err),
			 STRATA_E_INFER_REPLICA);
	assert_non_null(strstr(err.message, "tokenizer"));
	strata_batch_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_stop_ends_request_at_the_step),
		cmocka_unit_test(test_batch_stop_needs_a_tokenizer),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
