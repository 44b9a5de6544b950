/* test_stop.c - the stop-string matcher: text before the first stop
 * string, never a partial stop string given out, the same result however
 * the text is split, UTF-8 characters never cut, errors and allocation
 * failures leaving the matcher as it was (layer: text).
 *
 * Reference: a direct scan of the whole text (ref_cut below) for the
 * stop string that ends first, the longest of those ending at the same
 * byte. */
#include "text/text_fixture.h"

#include "strata/base.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Bytes of text before the first stop (the whole text when none); *which
 * the index of that stop or -1. */
static size_t ref_cut(const char *text, size_t n, const char *const *stops,
		      size_t count, int *which)
{
	for (size_t end = 1; end <= n; end++) {
		size_t best_len = 0;
		int best = -1;
		for (size_t i = 0; i < count; i++) {
			size_t k = strlen(stops[i]);
			if (k <= end && !memcmp(text + end - k, stops[i], k) &&
			    k > best_len)
				best_len = k, best = (int)i;
		}
		if (best >= 0) {
			*which = best;
			return end - best_len;
		}
	}
	*which = -1;
	return n;
}

typedef struct fed {
	char out[512];
	size_t len;
	int matched;
	size_t max_held;
} fed;

/* Feeds text cut at the given offsets (cuts ascending, inside (0, n)),
 * then finishes unless a stop matched. Every piece given out must be
 * whole UTF-8 when the text is. */
static void feed(strata_stop_matcher *m, const char *text, size_t n,
		 const size_t *cuts, size_t ncuts, fed *f)
{
	strata_error err;
	const char *p;
	size_t len;
	memset(f, 0, sizeof *f);
	f->matched = -1;
	strata_stop_matcher_reset(m);
	size_t at = 0;
	for (size_t c = 0; c <= ncuts && f->matched < 0; c++) {
		size_t end = c < ncuts ? cuts[c] : n;
		assert_int_equal(strata_stop_matcher_push(m, text + at, end - at,
							  &p, &len, &f->matched,
							  &err), STRATA_OK);
		assert_true(f->len + len < sizeof f->out);
		memcpy(f->out + f->len, p, len);
		f->len += len;
		size_t h = strata_stop_matcher_held(m);
		f->max_held = h > f->max_held ? h : f->max_held;
		at = end;
	}
	if (f->matched < 0) {
		assert_int_equal(strata_stop_matcher_finish(m, &p, &len, &err),
				 STRATA_OK);
		memcpy(f->out + f->len, p, len);
		f->len += len;
	}
}

static strata_stop_matcher *make(const char *const *stops, size_t count)
{
	strata_stop_matcher *m = NULL;
	strata_error err;
	assert_int_equal(strata_stop_matcher_create(stops, NULL, count, &m,
						    &err), STRATA_OK);
	return m;
}

static void push_expect(strata_stop_matcher *m, const char *piece,
			const char *want, int want_match)
{
	const char *p;
	size_t len;
	int matched;
	strata_error err;
	assert_int_equal(strata_stop_matcher_push(m, piece, strlen(piece), &p,
						  &len, &matched, &err),
			 STRATA_OK);
	if (len != strlen(want) || memcmp(p, want, len))
		fail_msg("push '%s' gave '%.*s', expected '%s'", piece,
			 (int)len, p, want);
	assert_int_equal(matched, want_match);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_stop_split_over_pieces_is_found_and_not_printed(void **state)
{
	(void)state;
	const char *stops[] = {"world"};
	strata_stop_matcher *m = make(stops, 1);
	push_expect(m, "Hello wor", "Hello ", -1);
	assert_int_equal(strata_stop_matcher_held(m), 3);
	push_expect(m, "ld! more", "", 0);
	strata_error err;
	const char *p;
	size_t len;
	int matched;
	assert_int_equal(strata_stop_matcher_push(m, "x", 1, &p, &len, &matched,
						  &err), STRATA_E_INVALID_ARG);
	assert_int_equal(len, 0);
	assert_int_equal(strata_stop_matcher_finish(m, &p, &len, &err), STRATA_OK);
	assert_int_equal(len, 0);
	strata_stop_matcher_reset(m);
	push_expect(m, "all the world", "all the ", 0);
	strata_stop_matcher_destroy(m);
}

static void test_held_text_comes_out_when_it_is_no_stop(void **state)
{
	(void)state;
	const char *stops[] = {"abc", "\n\n"};
	strata_stop_matcher *m = make(stops, 2);
	push_expect(m, "xab", "x", -1);
	push_expect(m, "d\n", "abd", -1);
	push_expect(m, "y", "\ny", -1);
	push_expect(m, "a", "", -1);
	strata_error err;
	const char *p;
	size_t len;
	assert_int_equal(strata_stop_matcher_finish(m, &p, &len, &err), STRATA_OK);
	assert_int_equal(len, 1);
	assert_memory_equal(p, "a", 1);
	strata_stop_matcher_destroy(m);
}

static void test_first_stop_to_end_wins_then_the_longest(void **state)
{
	(void)state;
	/* "ab" ends (byte 3) before "xabc" could (byte 4) */
	const char *a[] = {"xabc", "ab"};
	strata_stop_matcher *m = make(a, 2);
	push_expect(m, "zxa", "z", -1);
	push_expect(m, "bc", "x", 1);
	strata_stop_matcher_destroy(m);
	/* both end at the same byte: the longer is cut */
	const char *b[] = {"bc", "abc"};
	m = make(b, 2);
	push_expect(m, "zabcd", "z", 1);
	strata_stop_matcher_destroy(m);
}

/* Every way of cutting the texts into up to three pieces, byte by byte
 * too, gives the reference's text, and the stop never shows. */
static void test_every_split_gives_the_same_text(void **state)
{
	(void)state;
	const char *stops[] = {"</s>", "User:", "ss", "\xC3\xA9t\xC3\xA9"};
	const char *texts[] = {
		"a story</s>and more", "no stop here at all", "User:",
		"wait User", "l'\xC3\xA9t\xC3\xA9 fut", "mississippi",
		"</s</s>", "<<</s>>", "\xE2\x82\xAC\xF0\x9F\x98\x80 User: hi",
	};
	strata_stop_matcher *m = make(stops, 4);
	for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
		const char *text = texts[t];
		size_t n = strlen(text);
		int which;
		size_t want = ref_cut(text, n, stops, 4, &which);
		fed f;
		for (size_t i = 0; i <= n; i++)
			for (size_t j = i; j <= n; j++) {
				size_t cuts[2] = {i, j};
				size_t nc = 0;
				size_t use[2];
				for (size_t k = 0; k < 2; k++)
					if (cuts[k] > 0 && cuts[k] < n &&
					    (!nc || use[nc - 1] < cuts[k]))
						use[nc++] = cuts[k];
				feed(m, text, n, use, nc, &f);
				if (f.len != want || memcmp(f.out, text, want) ||
				    f.matched != which)
					fail_msg("'%s' cut at %zu,%zu gave '%.*s' "
						 "(stop %d), expected '%.*s' "
						 "(stop %d)", text, i, j,
						 (int)f.len, f.out, f.matched,
						 (int)want, text, which);
			}
		size_t bytes[64];
		for (size_t k = 1; k < n; k++)
			bytes[k - 1] = k;
		feed(m, text, n, bytes, n ? n - 1 : 0, &f);
		assert_int_equal(f.len, want);
		assert_memory_equal(f.out, text, want);
		/* a held tail is shorter than the longest stop (6 bytes) */
		assert_true(f.max_held < 6);
	}
	strata_stop_matcher_destroy(m);
}

/* Byte by byte, a piece that comes out never ends inside a character,
 * with or without stop strings. */
static void test_pieces_are_whole_characters(void **state)
{
	(void)state;
	const char *text = "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z\xE4\xB8\xAD";
	size_t n = strlen(text);
	for (size_t count = 0; count < 2; count++) {
		const char *stops[] = {"zz"};
		strata_stop_matcher *m = make(stops, count);
		size_t total = 0;
		strata_error err;
		for (size_t i = 0; i < n; i++) {
			const char *p;
			size_t len;
			int matched;
			assert_int_equal(strata_stop_matcher_push(m, text + i, 1, &p,
								  &len, &matched,
								  &err), STRATA_OK);
			const unsigned char *u = (const unsigned char *)p;
			if (len)
				assert_true((u[0] & 0xC0) != 0x80);
			total += len;
			assert_true(total == 0 || (text[total] & 0xC0) != 0x80 ||
				    total == n);
		}
		const char *p;
		size_t len;
		assert_int_equal(strata_stop_matcher_finish(m, &p, &len, &err),
				 STRATA_OK);
		assert_int_equal(total + len, n);
		strata_stop_matcher_destroy(m);
	}
}

static void test_bad_stop_strings_are_refused(void **state)
{
	(void)state;
	strata_stop_matcher *m = NULL;
	strata_error err;
	const char *empty[] = {"ok", ""};
	assert_int_equal(strata_stop_matcher_create(empty, NULL, 2, &m, &err),
			 STRATA_E_INVALID_ARG);
	assert_string_equal(err.message, "stop string 2 is empty");
	const char *bad_utf8[] = {"\xC3"};
	assert_int_equal(strata_stop_matcher_create(bad_utf8, NULL, 1, &m, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "not valid UTF-8"));
	static char big[STRATA_STOP_MAX_BYTES + 2];
	memset(big, 'a', sizeof big - 1);
	const char *longs[] = {big};
	assert_int_equal(strata_stop_matcher_create(longs, NULL, 1, &m, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "1025 bytes"));
	const char *many[STRATA_STOP_MAX_COUNT + 1];
	for (size_t i = 0; i <= STRATA_STOP_MAX_COUNT; i++)
		many[i] = "x";
	assert_int_equal(strata_stop_matcher_create(many, NULL,
						    STRATA_STOP_MAX_COUNT + 1, &m,
						    &err), STRATA_E_INVALID_ARG);
	assert_null(m);
	/* lengths given: a NUL inside a stop string is data */
	const char *nul[] = {"a\0b"};
	size_t lens[] = {3};
	assert_int_equal(strata_stop_matcher_create(nul, lens, 1, &m, &err),
			 STRATA_OK);
	const char *p;
	size_t len;
	int matched;
	assert_int_equal(strata_stop_matcher_push(m, "xa\0b", 4, &p, &len,
						  &matched, &err), STRATA_OK);
	assert_int_equal(matched, 0);
	assert_int_equal(len, 1);
	strata_stop_matcher_destroy(m);
}

/* Each allocation failure is E_NOMEM and leaves the matcher as before:
 * the same push then succeeds with the same result. */
static void test_allocation_failures_leave_it_unchanged(void **state)
{
	(void)state;
	const char *stops[] = {"world", "abc"};
	strata_stop_matcher *m = NULL;
	strata_error err;
	for (long k = 0;; k++) {
		strata_alloc_fail_after(k);
		strata_status st = strata_stop_matcher_create(stops, NULL, 2, &m,
							      &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_null(m);
	}
	push_expect(m, "hi wo", "hi ", -1);
	static char long_piece[5000];
	memset(long_piece, 'q', sizeof long_piece - 1);
	for (long k = 0;; k++) {
		const char *p;
		size_t len;
		int matched;
		strata_alloc_fail_after(k);
		strata_status st = strata_stop_matcher_push(m, long_piece,
							    strlen(long_piece),
							    &p, &len, &matched,
							    &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK) {
			assert_int_equal(len, 2 + strlen(long_piece));
			assert_memory_equal(p, "wo", 2);
			break;
		}
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_int_equal(len, 0);
		assert_int_equal(strata_stop_matcher_held(m), 2);
	}
	strata_stop_matcher_destroy(m);
}

/* With the streaming decoder of a real tokenizer: a stop string split
 * over several tokens ends the text there, none of it printed. */
static void test_with_the_text_stream_a_stop_over_tokens(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("models/stories260K/tokenizer.json");
	const char *text = "Once upon a time, there was a little girl named Lily.";
	int32_t *ids = NULL;
	size_t n = 0;
	strata_error err;
	assert_int_equal(strata_tokenizer_encode(t, text, strlen(text), true,
						 &ids, &n, &err), STRATA_OK);
	const char *stops[] = {"little girl"};
	strata_stop_matcher *m = make(stops, 1);
	strata_text_stream *s = NULL;
	assert_int_equal(strata_text_stream_create(t, ids, 1, true, &s, &err),
			 STRATA_OK);
	char out[256];
	size_t len = 0, held_at_match = 0;
	int matched = -1;
	for (size_t i = 1; i < n && matched < 0; i++) {
		const char *p, *q;
		size_t pn, qn;
		assert_int_equal(strata_text_stream_push(s, ids[i], &p, &pn, &err),
				 STRATA_OK);
		size_t held_before = strata_stop_matcher_held(m);
		assert_int_equal(strata_stop_matcher_push(m, p, pn, &q, &qn,
							  &matched, &err),
				 STRATA_OK);
		if (matched >= 0)
			held_at_match = held_before;
		memcpy(out + len, q, qn);
		len += qn;
	}
	assert_int_equal(matched, 0);
	/* the match began in an earlier token, held back: it was split */
	assert_true(held_at_match > 0);
	const char *want = "Once upon a time, there was a ";
	assert_int_equal(len, strlen(want));
	assert_memory_equal(out, want, len);
	strata_text_stream_destroy(s);
	strata_stop_matcher_destroy(m);
	strata_free(ids);
	strata_tokenizer_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stop_split_over_pieces_is_found_and_not_printed),
		cmocka_unit_test(test_held_text_comes_out_when_it_is_no_stop),
		cmocka_unit_test(test_first_stop_to_end_wins_then_the_longest),
		cmocka_unit_test(test_every_split_gives_the_same_text),
		cmocka_unit_test(test_pieces_are_whole_characters),
		cmocka_unit_test(test_bad_stop_strings_are_refused),
		cmocka_unit_test(test_allocation_failures_leave_it_unchanged),
		cmocka_unit_test(test_with_the_text_stream_a_stop_over_tokens),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
