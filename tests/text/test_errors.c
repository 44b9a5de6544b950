/* test_errors.c - hostile tokenizer files (a catalogue of faults, one
 * per enum entry, each expecting its code and words) and allocation
 * failure at every site (layer: text); the streaming decoder is
 * test_stream.c, the small API promises test_promises.c. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/internal.h"
#include "text/text_fixture.h"
#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

/* ------------------------------------------------------------------------ */
/* tokenizer.json faults                                                    */
/* ------------------------------------------------------------------------ */

#define JSON_FAULTS(X)                                                         \
	X(NOT_JSON, STRATA_E_TEXT_TOKENIZER, "not a JSON object")              \
	X(TOP_ARRAY, STRATA_E_TEXT_TOKENIZER, "not a JSON object")             \
	X(DUPLICATE_KEY, STRATA_E_TEXT_TOKENIZER, "duplicate")                 \
	X(NO_MODEL, STRATA_E_TEXT_TOKENIZER, "no 'model'")                     \
	X(MODEL_WORDPIECE, STRATA_E_TEXT_UNSUPPORTED, "model type 'WordPiece'") \
	X(MODEL_UNIGRAM, STRATA_E_TEXT_UNSUPPORTED, "model type 'Unigram'")    \
	X(NORMALIZER_BERT, STRATA_E_TEXT_UNSUPPORTED, "'BertNormalizer'")      \
	X(PRETOK_BERT, STRATA_E_TEXT_UNSUPPORTED, "'BertPreTokenizer'")        \
	X(DECODER_WORDPIECE, STRATA_E_TEXT_UNSUPPORTED, "decoder 'WordPiece'") \
	X(POST_UNKNOWN, STRATA_E_TEXT_UNSUPPORTED, "post-processor 'Foo'")     \
	X(DROPOUT, STRATA_E_TEXT_UNSUPPORTED, "dropout")                       \
	X(CONT_PREFIX, STRATA_E_TEXT_UNSUPPORTED, "continuing_subword_prefix") \
	X(EOW_SUFFIX, STRATA_E_TEXT_UNSUPPORTED, "end_of_word_suffix")         \
	X(MERGE_UNKNOWN_PIECE, STRATA_E_TEXT_TOKENIZER, "not in the vocab")    \
	X(MERGE_THREE_PARTS, STRATA_E_TEXT_TOKENIZER, "two pieces")            \
	X(MERGE_RESULT_MISSING, STRATA_E_TEXT_TOKENIZER, "makes a piece")      \
	X(MERGE_NOT_STRING, STRATA_E_TEXT_TOKENIZER, "a merge must be")        \
	X(VOCAB_ID_NEGATIVE, STRATA_E_TEXT_TOKENIZER, "out of range")          \
	X(VOCAB_ID_HUGE, STRATA_E_TEXT_TOKENIZER, "out of range")              \
	X(VOCAB_ID_STRING, STRATA_E_TEXT_TOKENIZER, "out of range")            \
	X(VOCAB_DUP_ID, STRATA_E_TEXT_TOKENIZER, "given twice")                \
	X(ADDED_NO_CONTENT, STRATA_E_TEXT_TOKENIZER, "without content")        \
	X(ADDED_ID_CONFLICT, STRATA_E_TEXT_TOKENIZER, "given twice")           \
	X(UNK_MISSING, STRATA_E_TEXT_TOKENIZER, "unk_token")                   \
	X(BAD_REGEX, STRATA_E_TEXT_UNSUPPORTED, "does not compile")            \
	X(BAD_BEHAVIOR, STRATA_E_TEXT_UNSUPPORTED, "'Sideways'")               \
	X(TEMPLATE_UNKNOWN, STRATA_E_TEXT_TOKENIZER, "special token")          \
	X(TEMPLATE_ID_RANGE, STRATA_E_TEXT_TOKENIZER, "outside the vocab")     \
	X(BOOL_WRONG_TYPE, STRATA_E_TEXT_TOKENIZER, "true/false")              \
	X(METASPACE_SCHEME, STRATA_E_TEXT_UNSUPPORTED, "'sometimes'")          \
	X(METASPACE_LONG_REPL, STRATA_E_TEXT_TOKENIZER, "one character")

typedef enum json_fault {
#define JF_ENUM(name, code, words) JF_##name,
	JSON_FAULTS(JF_ENUM)
#undef JF_ENUM
	JF_COUNT
} json_fault;

static const struct {
	const char *name;
	strata_status code;
	const char *words;
} json_expect[] = {
#define JF_ROW(name, code, words) {#name, code, words},
	JSON_FAULTS(JF_ROW)
#undef JF_ROW
};

/* The faulty text for fault f, built from the tiny byte-level or SPM
 * file; caller frees. */
static char *make_fault(json_fault f)
{
	json_t *j = tiny(f >= JF_UNK_MISSING && f != JF_BAD_REGEX &&
				 f != JF_BAD_BEHAVIOR ? "spm" : "bytelevel");
	json_t *m = json_object_get(j, "model");
	json_t *vocab = json_object_get(m, "vocab");
	json_t *merges = json_object_get(m, "merges");
	json_t *added = json_object_get(j, "added_tokens");
	switch (f) {
	case JF_NOT_JSON:
		json_decref(j);
		return strdup("{\"model\": ");
	case JF_TOP_ARRAY:
		json_decref(j);
		return strdup("[1, 2]");
	case JF_DUPLICATE_KEY:
		json_decref(j);
		return strdup("{\"model\": {}, \"model\": {}}");
	case JF_NO_MODEL:
		json_object_del(j, "model");
		break;
	case JF_MODEL_WORDPIECE:
		json_object_set_new(m, "type", json_string("WordPiece"));
		break;
	case JF_MODEL_UNIGRAM:
		json_object_set_new(m, "type", json_string("Unigram"));
		break;
	case JF_NORMALIZER_BERT:
		json_object_set_new(j, "normalizer",
				    obj("{\"type\": \"BertNormalizer\"}"));
		break;
	case JF_PRETOK_BERT:
		json_object_set_new(j, "pre_tokenizer",
				    obj("{\"type\": \"BertPreTokenizer\"}"));
		break;
	case JF_DECODER_WORDPIECE:
		json_object_set_new(j, "decoder",
				    obj("{\"type\": \"WordPiece\", \"prefix\": \"##\"}"));
		break;
	case JF_POST_UNKNOWN:
		json_object_set_new(j, "post_processor", obj("{\"type\": \"Foo\"}"));
		break;
	case JF_DROPOUT:
		json_object_set_new(m, "dropout", json_real(0.1));
		break;
	case JF_CONT_PREFIX:
		json_object_set_new(m, "continuing_subword_prefix",
				    json_string("##"));
		break;
	case JF_EOW_SUFFIX:
		json_object_set_new(m, "end_of_word_suffix", json_string("</w>"));
		break;
	case JF_MERGE_UNKNOWN_PIECE:
		json_array_append_new(merges, json_string("zzz qqq"));
		break;
	case JF_MERGE_THREE_PARTS:
		json_array_append_new(merges, json_string("a b c"));
		break;
	case JF_MERGE_RESULT_MISSING:
		json_array_append_new(merges, json_string("q z"));
		break;
	case JF_MERGE_NOT_STRING:
		json_array_append_new(merges, json_integer(7));
		break;
	case JF_VOCAB_ID_NEGATIVE:
		json_object_set_new(vocab, "zz", json_integer(-5));
		break;
	case JF_VOCAB_ID_HUGE:
		json_object_set_new(vocab, "zz", json_integer(1ll << 40));
		break;
	case JF_VOCAB_ID_STRING:
		json_object_set_new(vocab, "zz", json_string("5"));
		break;
	case JF_VOCAB_DUP_ID:
		json_object_set_new(vocab, "zz", json_integer(3));
		break;
	case JF_ADDED_NO_CONTENT:
		json_object_del(json_array_get(added, 0), "content");
		break;
	case JF_ADDED_ID_CONFLICT:
		json_object_set_new(json_array_get(added, 0), "id",
				    json_integer(5));
		break;
	case JF_UNK_MISSING:
		json_object_set_new(m, "unk_token", json_string("<nope>"));
		break;
	case JF_BAD_REGEX:
		json_object_set_new(j, "pre_tokenizer",
				    obj("{\"type\": \"Split\", \"pattern\": "
					"{\"Regex\": \"(ab\"}, \"behavior\": "
					"\"Isolated\", \"invert\": false}"));
		break;
	case JF_BAD_BEHAVIOR:
		json_object_set_new(j, "pre_tokenizer",
				    obj("{\"type\": \"Split\", \"pattern\": "
					"{\"String\": \" \"}, \"behavior\": "
					"\"Sideways\"}"));
		break;
	case JF_TEMPLATE_UNKNOWN:
		json_object_set_new(j, "post_processor",
				    obj("{\"type\": \"TemplateProcessing\", "
					"\"single\": [{\"SpecialToken\": {\"id\": "
					"\"<x>\"}}], \"special_tokens\": {}}"));
		break;
	case JF_TEMPLATE_ID_RANGE:
		json_object_set_new(j, "post_processor",
				    obj("{\"type\": \"TemplateProcessing\", "
					"\"single\": [{\"SpecialToken\": {\"id\": "
					"\"<s>\"}}], \"special_tokens\": {\"<s>\": "
					"{\"ids\": [999999]}}}"));
		break;
	case JF_BOOL_WRONG_TYPE:
		json_object_set_new(m, "byte_fallback", json_string("yes"));
		break;
	case JF_METASPACE_SCHEME:
		json_object_set_new(j, "pre_tokenizer",
				    obj("{\"type\": \"Metaspace\", \"replacement\":"
					" \"_\", \"prepend_scheme\": \"sometimes\"}"));
		break;
	case JF_METASPACE_LONG_REPL:
		json_object_set_new(j, "pre_tokenizer",
				    obj("{\"type\": \"Metaspace\", \"replacement\":"
					" \"__\"}"));
		break;
	case JF_COUNT:
		break;
	}
	char *s = json_dumps(j, 0);
	json_decref(j);
	return s;
}

static void test_json_faults_give_named_errors(void **state)
{
	(void)state;
	for (int f = 0; f < JF_COUNT; f++) {
		char *s = make_fault((json_fault)f);
		strata_tokenizer *t = (strata_tokenizer *)0x1;
		strata_error err;
		strata_status st = strata_tokenizer_from_json(s, strlen(s), "x.json",
							      &t, &err);
		if (st != json_expect[f].code ||
		    !strstr(err.message, json_expect[f].words)) {
			fprintf(stderr, "fault %s: got %s '%s'\n",
				json_expect[f].name, strata_status_name(st),
				err.message);
			fail();
		}
		assert_ptr_equal(t, (strata_tokenizer *)0x1); /* untouched */
		assert_true(err.fix[0] != '\0');
		free(s);
	}
}

/* The unmodified tiny files load: the faults above are the only reason. */
static void test_json_tiny_files_load(void **state)
{
	(void)state;
	const char *names[] = {"bytelevel", "spm", "meta"};
	for (int i = 0; i < 3; i++) {
		json_t *j = tiny(names[i]);
		char *s = json_dumps(j, 0);
		strata_tokenizer *t;
		strata_error err;
		assert_int_equal(strata_tokenizer_from_json(s, strlen(s), names[i],
							    &t, &err), STRATA_OK);
		strata_tokenizer_destroy(t);
		free(s);
		json_decref(j);
	}
}

/* ------------------------------------------------------------------------ */
/* GGUF faults (a small GGUF v3 from the tests' checkpoint writer)          */
/* ------------------------------------------------------------------------ */

/* A 6-token SentencePiece vocabulary or a byte-level one with merges;
 * `fault` bends one thing. */
#define GGUF_FAULTS(X)                                                         \
	X(NONE, STRATA_OK, "")                                                 \
	X(MODEL_T5, STRATA_E_TEXT_UNSUPPORTED, "'t5'")                         \
	X(MODEL_NONE, STRATA_E_TEXT_TOKENIZER, "no vocabulary")                \
	X(NO_MODEL, STRATA_E_TEXT_TOKENIZER, "no tokenizer.ggml.model")        \
	X(NO_TOKENS, STRATA_E_TEXT_TOKENIZER, "tokenizer.ggml.tokens: missing") \
	X(SCORES_SHORT, STRATA_E_TEXT_TOKENIZER, "another length")             \
	X(SCORE_NAN, STRATA_E_TEXT_TOKENIZER, "NaN")                           \
	X(BOS_RANGE, STRATA_E_TEXT_TOKENIZER, "outside the vocabulary")        \
	X(TOKENS_WRONG_TYPE, STRATA_E_TEXT_TOKENIZER, "wrong element type")    \
	X(BPE_UNKNOWN_PRE, STRATA_E_TEXT_UNSUPPORTED, "'klingon'")             \
	X(BPE_NO_MERGES, STRATA_E_TEXT_TOKENIZER, "merges: missing")           \
	X(BPE_BAD_MERGE, STRATA_E_TEXT_TOKENIZER, "two pieces")                \
	X(BPE_NONE, STRATA_OK, "")                                             \
	X(BPE_LLAMA3, STRATA_OK, "")

typedef enum gguf_fault {
#define GF_ENUM(name, code, words) GF_##name,
	GGUF_FAULTS(GF_ENUM)
#undef GF_ENUM
	GF_COUNT
} gguf_fault;

static const struct {
	const char *name;
	strata_status code;
	const char *words;
} gguf_expect[] = {
#define GF_ROW(name, code, words) {#name, code, words},
	GGUF_FAULTS(GF_ROW)
#undef GF_ROW
};

static void write_gguf(const char *path, gguf_fault f)
{
	bool bpe = f >= GF_BPE_UNKNOWN_PRE;
	static const char *const spm_tok[] = {"<unk>", "<s>", "</s>",
					      "\xe2\x96\x81", "a",
					      "\xe2\x96\x81\x61", "<0x62>"};
	static const char *const bpe_tok[] = {"a", "b", "\xc4\xa0",
					      "\xc4\xa0\x61", "ab",
					      "<|endoftext|>", "c"};
	static const uint32_t ids[7] = {0, 1, 2, 3, 4, 5, 6};
	uint32_t types[7];
	float scores[7];
	uint64_t n_scores = f == GF_SCORES_SHORT ? 6 : 7;
	for (int i = 0; i < 7; i++) {
		scores[i] = f == GF_SCORE_NAN && i == 4 ? NAN : (float)-i;
		types[i] = bpe ? (i == 5 ? 3 : 1) : (i == 0 ? 2 : i < 3 ? 3 : 1);
	}
	const char *merges[2] = {f == GF_BPE_BAD_MERGE ? "ab" : "\xc4\xa0 a",
				 "a b"};
	ckw_kv kv[10];
	size_t n = 0;
	if (f != GF_NO_MODEL)
		kv[n++] = CKW_KV_STR("tokenizer.ggml.model",
				     f == GF_MODEL_T5     ? "t5"
				     : f == GF_MODEL_NONE ? "none"
				     : bpe		  ? "gpt2"
							  : "llama");
	if (f == GF_TOKENS_WRONG_TYPE)
		kv[n++] = CKW_KV_ARRAY("tokenizer.ggml.tokens", STRATA_GGUF_U32,
				       7, ids);
	else if (f != GF_NO_TOKENS)
		kv[n++] = CKW_KV_ARRAY("tokenizer.ggml.tokens",
				       STRATA_GGUF_STRING, 7,
				       bpe ? bpe_tok : spm_tok);
	kv[n++] = CKW_KV_ARRAY("tokenizer.ggml.scores", STRATA_GGUF_F32,
			       n_scores, scores);
	kv[n++] = CKW_KV_ARRAY("tokenizer.ggml.token_type", STRATA_GGUF_I32, 7,
			       types);
	kv[n++] = CKW_KV_U32("tokenizer.ggml.unknown_token_id", 0);
	kv[n++] = CKW_KV_U32("tokenizer.ggml.bos_token_id",
			     f == GF_BOS_RANGE ? 70 : 1);
	if (bpe) {
		kv[n++] = CKW_KV_STR("tokenizer.ggml.pre",
				     f == GF_BPE_UNKNOWN_PRE ? "klingon"
				     : f == GF_BPE_LLAMA3    ? "llama-bpe"
							     : "gpt-2");
		if (f != GF_BPE_NO_MERGES)
			kv[n++] = CKW_KV_ARRAY("tokenizer.ggml.merges",
					       STRATA_GGUF_STRING, 2, merges);
	}
	ckw_gguf_file(path, kv, n, NULL, 0, NULL);
}

static void gguf_path(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/tests/text_%s_%d.gguf", STRATA_BINARY_DIR, name,
		 (int)getpid());
}

static void test_gguf_faults_give_named_errors(void **state)
{
	(void)state;
	char path[4096];
	for (int f = 0; f < GF_COUNT; f++) {
		gguf_path(path, sizeof path, gguf_expect[f].name);
		write_gguf(path, (gguf_fault)f);
		strata_tokenizer *t = NULL;
		strata_error err;
		strata_status st = strata_tokenizer_load(path, &t, &err);
		unlink(path);
		if (st != gguf_expect[f].code ||
		    (st && !strstr(err.message, gguf_expect[f].words))) {
			fprintf(stderr, "gguf fault %s: got %s '%s'\n",
				gguf_expect[f].name, strata_status_name(st),
				st ? err.message : "");
			fail();
		}
		if (st) {
			assert_null(t);
			continue;
		}
		/* The good ones tokenize as their rules say. */
		int32_t *ids;
		size_t n;
		assert_int_equal(strata_tokenizer_encode(t, " ab", 3, false, &ids,
							 &n, &err), STRATA_OK);
		if (f == GF_NONE) { /* "▁▁ab" -> ▁ ▁a <0x62> */
			assert_int_equal(n, 3);
			assert_int_equal(ids[0], 3);
			assert_int_equal(ids[1], 5);
			assert_int_equal(ids[2], 6);
		} else { /* "Ġab" -> Ġa b: "Ġ a" ranks before "a b" */
			assert_int_equal(n, 2);
			assert_int_equal(ids[0], 3);
			assert_int_equal(ids[1], 1);
		}
		strata_free(ids);
		/* llama.cpp: BOS by default for llama (SPM) and the Llama-3
		 * family, not for other gpt2 vocabularies. */
		strata_tokenizer_specials sp;
		strata_tokenizer_get_specials(t, &sp);
		assert_int_equal(sp.add_bos, f != GF_BPE_NONE);
		strata_tokenizer_destroy(t);
	}
}

/* ------------------------------------------------------------------------ */
/* Allocation failure at every site                                         */
/* ------------------------------------------------------------------------ */

/* Runs load + encode + decode + stream with the n-th allocation failing,
 * for n = 0, 1, ... until it all succeeds; every failure must be E_NOMEM
 * and leak nothing (ASan checks). */
static strata_status oom_once(const char *json, size_t len, const char *gguf,
			      long n)
{
	strata_tokenizer *t = NULL;
	strata_error err;
	int32_t *ids = NULL;
	size_t count = 0;
	char *text = NULL;
	strata_text_stream *d = NULL;
	static const char in[] = "The cat and the hat's 123 <|eot|> \xe2\x82\xac ab";
	strata_alloc_fail_after(n);
	strata_status st = gguf ? strata_tokenizer_load(gguf, &t, &err)
				: strata_tokenizer_from_json(json, len, "oom", &t,
							     &err);
	if (!st)
		st = strata_tokenizer_encode(t, in, sizeof in - 1, true, &ids,
					     &count, &err);
	if (!st)
		st = strata_tokenizer_decode(t, ids, count, false, &text, NULL,
					     &err);
	if (!st)
		st = strata_text_stream_create(t, ids, count / 2, true, &d, &err);
	for (size_t i = count / 2; !st && i <= count; i++) {
		const char *p;
		size_t k;
		st = i < count ? strata_text_stream_push(d, ids[i], &p, &k, &err)
			       : strata_text_stream_finish(d, &p, &k, &err);
	}
	strata_alloc_fail_after(-1);
	if (st && st != STRATA_E_NOMEM)
		fprintf(stderr, "oom at %ld: %s\n", n, err.message);
	strata_text_stream_destroy(d);
	strata_free(text);
	strata_free(ids);
	strata_tokenizer_destroy(t);
	return st;
}

static void oom_loop(const char *json, size_t len, const char *gguf)
{
	long n = 0;
	strata_status st;
	while ((st = oom_once(json, len, gguf, n)) != STRATA_OK) {
		if (st != STRATA_E_NOMEM)
			fprintf(stderr, "oom at %ld gave %s\n", n,
				strata_status_name(st));
		assert_int_equal(st, STRATA_E_NOMEM);
		n++;
	}
	assert_true(n > 20);
}

static void test_oom_every_site_json(void **state)
{
	(void)state;
	const char *names[] = {"bytelevel", "spm", "meta"};
	for (int i = 0; i < 3; i++) {
		json_t *j = tiny(names[i]);
		char *s = json_dumps(j, 0);
		oom_loop(s, strlen(s), NULL);
		free(s);
		json_decref(j);
	}
}

static void test_oom_every_site_gguf(void **state)
{
	(void)state;
	char path[4096];
	gguf_fault kinds[] = {GF_NONE, GF_BPE_NONE};
	for (int i = 0; i < 2; i++) {
		gguf_path(path, sizeof path, "oom");
		write_gguf(path, kinds[i]);
		oom_loop(NULL, 0, path);
		unlink(path);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_faults_give_named_errors),
		cmocka_unit_test(test_json_tiny_files_load),
		cmocka_unit_test(test_gguf_faults_give_named_errors),
		cmocka_unit_test(test_oom_every_site_json),
		cmocka_unit_test(test_oom_every_site_gguf),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
