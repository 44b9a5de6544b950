/* test_vocab.c - every .inp/.out pair of llama.cpp's BPE vocabulary
 * GGUFs (gpt2 and llama types) must tokenize exactly; unsupported vocab
 * types fail clearly (layer: text). */
#include "text/text_fixture.h"

#define SEP "\n__ggml_vocab_test__\n"

/* Runs every pair of vocab `name`; returns the number of mismatches. */
static int run_pairs(const char *name, int *count)
{
	char rel[256];
	snprintf(rel, sizeof rel, "tests/data/vocab/ggml-vocab-%s.gguf", name);
	strata_tokenizer *t = tt_load(rel);
	if (!t)
		return -1;
	size_t ilen, olen;
	snprintf(rel, sizeof rel, "tests/data/vocab/ggml-vocab-%s.gguf.inp",
		 name);
	char *inp = tt_read(rel, &ilen);
	snprintf(rel, sizeof rel, "tests/data/vocab/ggml-vocab-%s.gguf.out",
		 name);
	char *out = tt_read(rel, &olen);
	assert_non_null(inp);
	assert_non_null(out);
	int bad = 0;
	*count = 0;
	char *s = inp, *line = out;
	for (;;) {
		char *end = strstr(s, SEP);
		if (!end)
			break;
		char *nl = strchr(line, '\n');
		assert_non_null(nl);
		*nl = '\0';
		int32_t want[4096];
		size_t nw = 0;
		for (char *p = line; *p;) {
			char *e;
			long v = strtol(p, &e, 10);
			if (e == p)
				break;
			want[nw++] = (int32_t)v;
			p = e;
		}
		int32_t *ids;
		size_t n;
		strata_error err;
		assert_int_equal(strata_tokenizer_encode(t, s, (size_t)(end - s),
							 false, &ids, &n, &err),
				 STRATA_OK);
		if (n != nw || memcmp(ids, want, n * sizeof *ids)) {
			fprintf(stderr, "%s: mismatch on '%.*s'\n", name,
				(int)(end - s), s);
			tt_print_ids("want", want, nw);
			tt_print_ids("got ", ids, n);
			bad++;
		}
		strata_free(ids);
		(*count)++;
		s = end + strlen(SEP);
		line = nl + 1;
	}
	free(inp);
	free(out);
	strata_tokenizer_destroy(t);
	return bad;
}

static void check_vocab(const char *name)
{
	int count = 0;
	int bad = run_pairs(name, &count);
	fprintf(stderr, "%s: %d of %d pairs match\n", name, count - bad, count);
	assert_int_equal(bad, 0);
	assert_int_equal(count, 46);
}

static void test_vocab_gpt2_pairs_match(void **state)
{
	(void)state;
	check_vocab("gpt-2");
}

static void test_vocab_llama_spm_pairs_match(void **state)
{
	(void)state;
	check_vocab("llama-spm");
}

static void test_vocab_falcon_pairs_match(void **state)
{
	(void)state;
	check_vocab("falcon");
}

static void test_vocab_mpt_pairs_match(void **state)
{
	(void)state;
	check_vocab("mpt");
}

static void test_vocab_refact_pairs_match(void **state)
{
	(void)state;
	check_vocab("refact");
}

static void test_vocab_deepseek_llm_pairs_match(void **state)
{
	(void)state;
	check_vocab("deepseek-llm");
}

/* The default (tokenize MODEL) adds BOS where the vocabulary says so. */
static void test_vocab_llama_adds_bos_by_default(void **state)
{
	(void)state;
	strata_tokenizer *t = tt_load("tests/data/vocab/ggml-vocab-llama-spm.gguf");
	assert_non_null(t);
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(t, &sp);
	assert_true(sp.add_bos);
	assert_int_equal(sp.bos, 1);
	assert_int_equal(sp.eos, 2);
	int32_t *ids;
	size_t n;
	strata_error err;
	assert_int_equal(strata_tokenizer_encode(t, "Hello world", 11, true, &ids,
						 &n, &err), STRATA_OK);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 15043);
	assert_int_equal(ids[2], 3186);
	char *text;
	size_t len;
	assert_int_equal(strata_tokenizer_decode(t, ids, n, true, &text, &len,
						 &err), STRATA_OK);
	assert_string_equal(text, "Hello world");
	strata_free(text);
	strata_free(ids);
	strata_tokenizer_destroy(t);
}

static void test_vocab_bert_wpm_is_unsupported(void **state)
{
	(void)state;
	char path[4096];
	snprintf(path, sizeof path, "%s/tests/data/vocab/ggml-vocab-bert-bge.gguf",
		 STRATA_SOURCE_DIR);
	strata_tokenizer *t = NULL;
	strata_error err;
	assert_int_equal(strata_tokenizer_load(path, &t, &err),
			 STRATA_E_TEXT_UNSUPPORTED);
	assert_null(t);
	assert_non_null(strstr(err.message, "'bert'"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vocab_gpt2_pairs_match),
		cmocka_unit_test(test_vocab_llama_spm_pairs_match),
		cmocka_unit_test(test_vocab_falcon_pairs_match),
		cmocka_unit_test(test_vocab_mpt_pairs_match),
		cmocka_unit_test(test_vocab_refact_pairs_match),
		cmocka_unit_test(test_vocab_deepseek_llm_pairs_match),
		cmocka_unit_test(test_vocab_llama_adds_bos_by_default),
		cmocka_unit_test(test_vocab_bert_wpm_is_unsupported),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
