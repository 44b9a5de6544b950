/* test_promises.c - what the tokenizer promises besides refusing bad
 * files (test_errors.c): bad ids are refused, ids and specials as the tokenizer defines them, HF's
 * post-processors and split behaviours, thread-safe encoding, and the
 * fuzzers' finds (layer: text). */
#include <jansson.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/internal.h"
#include "text/text_fixture.h"

/* ------------------------------------------------------------------------ */
/* Streaming and API promises                                               */
/* ------------------------------------------------------------------------ */

static void test_decode_rejects_out_of_range_id(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("tests/data/tokenizers/tiny/spm.json");
	int32_t bad[] = {5, 100000};
	char *s = (char *)0x1;
	strata_error err;
	assert_int_equal(strata_tokenizer_decode(t, bad, 2, false, &s, NULL,
						 &err), STRATA_E_INVALID_ARG);
	assert_ptr_equal(s, (char *)0x1);
	assert_non_null(strstr(err.message, "100000"));
	strata_text_stream *d;
	const char *p;
	size_t k;
	assert_int_equal(strata_text_stream_create(t, NULL, 0, false, &d, &err),
			 0);
	assert_int_equal(strata_text_stream_push(d, -1, &p, &k, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(k, 0);
	strata_text_stream_destroy(d);
	/* A prompt id outside the vocabulary is refused at creation. */
	d = (strata_text_stream *)0x1;
	assert_int_equal(strata_text_stream_create(t, bad, 2, false, &d, &err),
			 STRATA_E_INVALID_ARG);
	assert_ptr_equal(d, (strata_text_stream *)0x1);
	assert_non_null(strstr(err.message, "100000"));
	strata_tokenizer_destroy(t);
}

static void test_specials_follow_the_tokenizer(void **state)
{
	(void)state;
	strata_tokenizer_specials sp;
	strata_tokenizer *t = tt_load("tests/data/tokenizers/hf-gpt2");
	strata_tokenizer_get_specials(t, &sp);
	assert_false(sp.add_bos); /* GPT-2's post-processor adds nothing */
	assert_int_equal(sp.eos, 50256);
	assert_int_equal(strata_tokenizer_find(t, "<|endoftext|>", 13), 50256);
	assert_true(strata_tokenizer_is_special(t, 50256));
	assert_int_equal(strata_tokenizer_vocab_count(t), 50257);
	size_t len;
	assert_memory_equal(strata_tokenizer_piece(t, 995, &len),
			    "\xc4\xa0world", 7);
	assert_null(strata_tokenizer_piece(t, 50257, &len));
	strata_tokenizer_destroy(t);
	t = tt_load("tests/data/tokenizers/hf-llama2-spm-bpe");
	strata_tokenizer_get_specials(t, &sp);
	assert_true(sp.add_bos);
	assert_int_equal(sp.bos, 1);
	assert_int_equal(sp.unk, 0);
	assert_int_equal(sp.eos, 2); /* "</s>", named by convention */
	strata_tokenizer_destroy(t);
}

/* tokenizer_config.json, when present, names the special tokens. */
static void test_config_names_specials(void **state)
{
	(void)state;
	char dir[4096], path[4200];
	snprintf(dir, sizeof dir, "%s/tests/text_config_%d", STRATA_BINARY_DIR,
		 (int)getpid());
	assert_int_equal(mkdir(dir, 0700), 0);
	size_t n = 0;
	char *json = tt_read("tests/data/tokenizers/tiny/spm.json", &n);
	assert_non_null(json);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	FILE *f = fopen(path, "wb");
	fwrite(json, 1, n, f);
	fclose(f);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	f = fopen(path, "wb");
	fputs("{\"bos_token\": {\"content\": \"</s>\"}, \"eos_token\": "
	      "\"<s>\", \"pad_token\": \"<unk>\", \"unk_token\": \"no\"}", f);
	fclose(f);
	strata_tokenizer *t;
	strata_error err;
	assert_int_equal(strata_tokenizer_load(dir, &t, &err), STRATA_OK);
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(t, &sp);
	assert_int_equal(sp.bos, 2);
	assert_int_equal(sp.eos, 1);
	assert_int_equal(sp.pad, 0);
	assert_int_equal(sp.unk, 0); /* "no" names no token: kept */
	strata_tokenizer_destroy(t);
	unlink(path);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	unlink(path);
	rmdir(dir);
	free(json);
}

/* Post-processors other than TemplateProcessing: Roberta/Bert put cls
 * first and sep last; ByteLevel adds nothing; Sequence chains them. */
static void test_post_processors_add_their_ids(void **state)
{
	(void)state;
	static const struct {
		const char *post;
		int32_t first, last; /* -1: no special there */
	} rows[] = {
		{"{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2], "
		 "\"cls\": [\"<s>\", 1], \"trim_offsets\": true}", 1, 2},
		{"{\"type\": \"BertProcessing\", \"sep\": [\"</s>\", 2], "
		 "\"cls\": [\"<unk>\", 0]}", 0, 2},
		{"{\"type\": \"Sequence\", \"processors\": [{\"type\": "
		 "\"ByteLevel\"}, {\"type\": \"TemplateProcessing\", \"single\":"
		 " [{\"Sequence\": {\"id\": \"A\"}}, {\"SpecialToken\": {\"id\":"
		 " \"</s>\"}}], \"special_tokens\": {\"</s>\": {\"ids\": [2]}}}]}",
		 -1, 2},
		{"null", -1, -1},
	};
	for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
		json_t *j = tiny("spm");
		json_object_set_new(j, "post_processor", obj(rows[r].post));
		char *s = json_dumps(j, JSON_ENCODE_ANY);
		strata_tokenizer *t;
		strata_error err;
		assert_int_equal(strata_tokenizer_from_json(s, strlen(s), "post",
							    &t, &err), STRATA_OK);
		int32_t *ids, *plain;
		size_t n, pn;
		assert_int_equal(strata_tokenizer_encode(t, "the", 3, true, &ids,
							 &n, &err), STRATA_OK);
		assert_int_equal(strata_tokenizer_encode(t, "the", 3, false,
							 &plain, &pn, &err),
				 STRATA_OK);
		size_t extra = (rows[r].first >= 0) + (rows[r].last >= 0);
		assert_int_equal(n, pn + extra);
		if (rows[r].first >= 0)
			assert_int_equal(ids[0], rows[r].first);
		if (rows[r].last >= 0)
			assert_int_equal(ids[n - 1], rows[r].last);
		strata_tokenizer_specials sp;
		strata_tokenizer_get_specials(t, &sp);
		assert_int_equal(sp.add_bos, rows[r].first >= 0);
		assert_int_equal(sp.add_eos, rows[r].last >= 0);
		strata_free(ids);
		strata_free(plain);
		strata_tokenizer_destroy(t);
		free(s);
		json_decref(j);
	}
}

/* Cutting SentencePiece-style text before each word's "▁" (meta_chunks)
 * must give exactly the ids of the uncut word, for HF BPE and for GGUF
 * score-merging alike, on text mixing scripts, runs of spaces, newlines,
 * digits and bytes without tokens. */
static void test_meta_chunks_change_no_id(void **state)
{
	(void)state;
	static const char *parts[] = {
		"In the beginning God created the heaven and the earth. ",
		"   three spaces,\n\nnew lines\t and tabs ",
		"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c ",
		"\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd emoji ",
		"caf\xc3\xa9 na\xc3\xafve 12345 3.14 ", "x\xe2\x96\x81\xe2\x96\x81y ",
	};
	char text[8192];
	size_t len = 0;
	for (int r = 0; r < 20; r++)
		for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
			size_t k = strlen(parts[(i + (size_t)r) % 6]);
			memcpy(text + len, parts[(i + (size_t)r) % 6], k);
			len += k;
		}
	const char *models[] = {"tests/data/tokenizers/hf-llama2-spm-bpe",
				"tests/data/tokenizers/generated/spm-bpe.tokenizer.json",
				"tests/data/vocab/ggml-vocab-llama-spm.gguf"};
	for (int m = 0; m < 3; m++) {
		strata_tokenizer *t = tt_load(models[m]);
		assert_non_null(t);
		assert_true(t->meta_chunks);
		int32_t *cut, *whole;
		size_t nc, nw;
		strata_error err;
		assert_int_equal(strata_tokenizer_encode(t, text, len, true, &cut,
							 &nc, &err), STRATA_OK);
		t->meta_chunks = false;
		assert_int_equal(strata_tokenizer_encode(t, text, len, true,
							 &whole, &nw, &err),
				 STRATA_OK);
		assert_int_equal(nc, nw);
		assert_memory_equal(cut, whole, nc * sizeof *cut);
		strata_free(cut);
		strata_free(whole);
		strata_tokenizer_destroy(t);
	}
	/* Byte-level vocabularies never cut. */
	strata_tokenizer *t = tt_load("tests/data/tokenizers/hf-gpt2");
	assert_false(t->meta_chunks);
	strata_tokenizer_destroy(t);
}

/* One tokenizer shared by several threads: encode and decode only read it
 * (text.h promises thread safety), so every thread gets the same ids. */
typedef struct thread_job {
	const strata_tokenizer *t;
	const char *text;
	int32_t *ids;
	size_t n;
	int ok;
} thread_job;

static void *encode_many(void *arg)
{
	thread_job *j = arg;
	strata_error err;
	j->ok = 1;
	for (int r = 0; r < 20 && j->ok; r++) {
		int32_t *ids;
		size_t n;
		char *back;
		if (strata_tokenizer_encode(j->t, j->text, strlen(j->text), true,
					    &ids, &n, &err) ||
		    strata_tokenizer_decode(j->t, ids, n, true, &back, NULL,
					    &err)) {
			j->ok = 0;
			break;
		}
		j->ok = strcmp(back, j->text) == 0 &&
			(!j->ids || (n == j->n && !memcmp(ids, j->ids,
							  n * sizeof *ids)));
		strata_free(back);
		if (!j->ids) {
			j->ids = ids;
			j->n = n;
		} else {
			strata_free(ids);
		}
	}
	return NULL;
}

static void test_encode_is_thread_safe(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("tests/data/tokenizers/hf-gpt2");
	assert_non_null(t);
	static const char text[] = "Threads share one tokenizer: 12345, "
		"\xe4\xbd\xa0\xe5\xa5\xbd, caf\xc3\xa9 \xf0\x9f\x98\x80 "
		"and the regex JIT.  ";
	pthread_t th[4];
	thread_job jobs[4];
	for (int i = 0; i < 4; i++) {
		jobs[i] = (thread_job){t, text, NULL, 0, 0};
		assert_int_equal(pthread_create(&th[i], NULL, encode_many,
						&jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_true(jobs[i].ok);
		assert_int_equal(jobs[i].n, jobs[0].n);
		assert_memory_equal(jobs[i].ids, jobs[0].ids,
				    jobs[0].n * sizeof(int32_t));
	}
	for (int i = 0; i < 4; i++)
		strata_free(jobs[i].ids);
	strata_tokenizer_destroy(t);
}

/* HF's five split behaviours (SplitDelimiterBehavior), on "a b  c" split
 * by the literal " ": the folds of tokenizers' normalizer.rs, by hand. */
static void test_split_behaviors_fold_as_hf(void **state)
{
	(void)state;
	static const struct {
		const char *behavior;
		bool invert;
		const char *want; /* pieces joined by '|' */
	} rows[] = {
		{"Isolated", false, "a| |b| | |c"},
		{"Removed", false, "a|b|c"},
		{"MergedWithPrevious", false, "a |b | |c"},
		{"MergedWithNext", false, "a| b| | c"},
		{"Contiguous", false, "a| |b|  |c"},
		{"Removed", true, " | | "},
		{"MergedWithPrevious", true, "a| b| | c"},
	};
	for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
		json_t *j = tiny("spm");
		char pre[256];
		snprintf(pre, sizeof pre, "{\"type\": \"Split\", \"pattern\": "
			 "{\"String\": \" \"}, \"behavior\": \"%s\", "
			 "\"invert\": %s}", rows[r].behavior,
			 rows[r].invert ? "true" : "false");
		json_object_set_new(j, "pre_tokenizer", obj(pre));
		json_object_set_new(j, "normalizer", json_null());
		char *s = json_dumps(j, 0);
		strata_tokenizer *t;
		strata_error err;
		assert_int_equal(strata_tokenizer_from_json(s, strlen(s), "split",
							    &t, &err), STRATA_OK);
		text_list io = {0}, tmp = {0};
		assert_int_equal(strata__text_list_push(&io, "a b  c", 6, -1, true,
							&err), STRATA_OK);
		assert_int_equal(strata__text_pretokenize(t, &io, &tmp, &err),
				 STRATA_OK);
		char got[64] = "";
		for (size_t i = 0; i < io.count; i++) {
			if (i)
				strcat(got, "|");
			strncat(got, io.arena.data + io.items[i].off,
				io.items[i].len);
		}
		if (strcmp(got, rows[r].want))
			fprintf(stderr, "%s invert=%d: got '%s' want '%s'\n",
				rows[r].behavior, rows[r].invert, got,
				rows[r].want);
		assert_string_equal(got, rows[r].want);
		strata__text_list_fini(&io);
		strata__text_list_fini(&tmp);
		strata_tokenizer_destroy(t);
		free(s);
		json_decref(j);
	}
}

/* Fuzz finds (fuzz_tokenizer_json, fuzz_tokenizer_encode, 2026-11-29):
 * a word whose characters all have no token and no unk yields no ids;
 * caching it applied an offset to a null pointer (UBSan). Both inputs
 * must now encode cleanly to exactly the ids of their other words. */
static void test_fuzz_regressions_word_without_ids(void **state)
{
	(void)state;
	size_t n = 0;
	char *json = tt_read("tests/data/tokenizers/fuzz-regressions/"
			     "json-word-without-ids.json", &n);
	assert_non_null(json);
	strata_tokenizer *t;
	strata_error err;
	int32_t *ids;
	size_t count;
	if (strata_tokenizer_from_json(json, n, "regression", &t, &err) ==
	    STRATA_OK) {
		static const char in[] = "The cat and the hat's 12345 ab";
		assert_int_equal(strata_tokenizer_encode(t, in, sizeof in - 1,
							 true, &ids, &count,
							 &err), STRATA_OK);
		strata_free(ids);
		strata_tokenizer_destroy(t);
	}
	free(json);
	char *bin = tt_read("tests/data/tokenizers/fuzz-regressions/"
			    "enc-falcon-control-byte.bin", &n);
	assert_non_null(bin);
	assert_int_equal(bin[0] % 6, 5); /* the fuzzer's falcon GGUF slot */
	t = tt_load("tests/data/vocab/ggml-vocab-falcon.gguf");
	assert_non_null(t);
	/* falcon has no token for byte 0x04 and no unk: HF drops it. */
	assert_int_equal(strata_tokenizer_encode(t, bin + 1, n - 1, false, &ids,
						 &count, &err), STRATA_OK);
	assert_int_equal(count, 0);
	strata_free(ids);
	assert_int_equal(strata_tokenizer_encode(t, "\x04\x04 a \x04", 6, false,
						 &ids, &count, &err), STRATA_OK);
	assert_int_equal(count, 2); /* " a" and " " remain */
	strata_free(ids);
	strata_tokenizer_destroy(t);
	free(bin);
	/* fuzz_tokenizer_gguf, 2026-11-29: a GGUF piece holding a NUL was
	 * copied with strndup (which stops at the NUL) into a buffer that
	 * was then overrun (ASan heap-buffer-overflow). */
	t = tt_load("tests/data/tokenizers/fuzz-regressions/"
		    "gguf-piece-with-nul.gguf");
	assert_non_null(t);
	size_t plen;
	const char *piece = strata_tokenizer_piece(t, 4, &plen);
	assert_int_equal(plen, 3);
	assert_memory_equal(piece, "a\0z", 3);
	assert_int_equal(strata_tokenizer_find(t, "a\0z", 3), 4);
	assert_int_equal(strata_tokenizer_encode(t, "a\0z", 3, false, &ids,
						 &count, &err), STRATA_OK);
	strata_free(ids);
	strata_tokenizer_destroy(t);
}

static void test_load_reports_missing_model(void **state)
{
	(void)state;
	strata_tokenizer *t = NULL;
	strata_error err;
	assert_int_equal(strata_tokenizer_load("/nonexistent/model", &t, &err),
			 STRATA_E_NOT_FOUND);
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/tests/data", STRATA_SOURCE_DIR);
	assert_int_not_equal(strata_tokenizer_load(dir, &t, &err), STRATA_OK);
	assert_non_null(strstr(err.fix, "tokenizer.json"));
	assert_null(t);
	/* issue 24: "dir/" names dir/tokenizer.json, not dir//tokenizer.json */
	strcat(dir, "//");
	assert_int_not_equal(strata_tokenizer_load(dir, &t, &err), STRATA_OK);
	assert_non_null(strstr(err.message, "tests/data/tokenizer.json"));
	assert_null(strstr(err.message, "//"));
	snprintf(dir, sizeof dir, "%s/models/stories260K/", STRATA_SOURCE_DIR);
	assert_int_equal(strata_tokenizer_load(dir, &t, &err), STRATA_OK);
	strata_tokenizer_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_rejects_out_of_range_id),
		cmocka_unit_test(test_specials_follow_the_tokenizer),
		cmocka_unit_test(test_config_names_specials),
		cmocka_unit_test(test_fuzz_regressions_word_without_ids),
		cmocka_unit_test(test_split_behaviors_fold_as_hf),
		cmocka_unit_test(test_encode_is_thread_safe),
		cmocka_unit_test(test_post_processors_add_their_ids),
		cmocka_unit_test(test_meta_chunks_change_no_id),
		cmocka_unit_test(test_load_reports_missing_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
