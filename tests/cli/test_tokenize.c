/* test_tokenize.c - `strata tokenize MODEL -p TEXT [--ids]
 * [--no-special]` end to end: the built binary with tokenizer.json
 * directories and vocabulary-only GGUFs, its output shapes, BOS rules,
 * errors and exit codes (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/cli_runner.h"

static char *data(const char *rel)
{
	static char buf[4][4096];
	static int k;
	char *b = buf[k++ % 4];
	snprintf(b, sizeof buf[0], "%s/tests/data/%s", STRATA_SOURCE_DIR, rel);
	return b;
}

static cli_result run(const char *const *argv)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	return r;
}

/* llama.cpp's .out lines are without BOS: --no-special --ids gives them. */
static void test_cli_tokenize_ids_match_llama_cpp_out(void **state)
{
	(void)state;
	const char *gguf = data("vocab/ggml-vocab-llama-spm.gguf");
	const char *argv[] = {"tokenize", gguf, "-p", " Hello World!", "--ids",
			      "--no-special", NULL};
	cli_result r = run(argv);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "29871 15043 2787 29991\n");
	cli_result_free(&r);
	/* The default adds BOS, as the vocabulary says. */
	const char *argv2[] = {"tokenize", gguf, "-p", " Hello World!", "--ids",
			       NULL};
	r = run(argv2);
	assert_string_equal(r.out, "1 29871 15043 2787 29991\n");
	cli_result_free(&r);
}

static void test_cli_tokenize_lists_id_and_piece(void **state)
{
	(void)state;
	const char *argv[] = {"tokenize", data("tokenizers/hf-gpt2"), "-p",
			      "Hello world\n", NULL};
	cli_result r = run(argv);
	assert_int_equal(r.exit_code, 0);
	/* GPT-2 adds no BOS; pieces as stored ("Ġ" is the space). */
	assert_string_equal(r.out, "15496\tHello\n995\t\xc4\xa0world\n"
				   "198\t\xc4\x8a\n");
	cli_result_free(&r);
	const char *argv2[] = {"tokenize", data("tokenizers/hf-llama2-spm-bpe"),
			       "-p", "Hi\\", NULL};
	r = run(argv2);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "1\t<s>\n6324\t\xe2\x96\x81Hi\n"
				   "29905\t\\x5c\n");
	cli_result_free(&r);
}

static void test_cli_tokenize_empty_text(void **state)
{
	(void)state;
	const char *argv[] = {"tokenize", data("vocab/ggml-vocab-gpt-2.gguf"),
			      "-p", "", "--ids", NULL};
	cli_result r = run(argv);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "\n");
	cli_result_free(&r);
}

/* -f FILE: the whole file, NUL bytes and invalid UTF-8 included, gives
 * the same ids as the library on the same bytes. */
static void test_cli_tokenize_file(void **state)
{
	(void)state;
	char dir[4096], path[4200];
	cli_tmpdir(dir, sizeof dir, "tokenize_file");
	snprintf(path, sizeof path, "%s/in.txt", dir);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	fwrite("Hello\0world \xff!", 1, 14, f);
	fclose(f);
	const char *argv[] = {"tokenize", data("tokenizers/hf-gpt2"), "-f", path,
			      "--ids", NULL};
	cli_result r = run(argv);
	assert_int_equal(r.exit_code, 0);
	/* "Hello" "\0" "world" " \uFFFD" "!" as GPT-2 ids: the invalid byte
	 * is U+FFFD, as the library (and HF on the replaced text) does. */
	assert_string_equal(r.out, "15496 188 6894 20543 0\n");
	cli_result_free(&r);
	const char *both[] = {"tokenize", data("tokenizers/hf-gpt2"), "-f", path,
			      "-p", "x", NULL};
	r = run(both);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
	const char *missing[] = {"tokenize", data("tokenizers/hf-gpt2"), "-f",
				 "/nonexistent/file", NULL};
	r = run(missing);
	assert_int_equal(r.exit_code, 1);
	cli_result_free(&r);
}

static void test_cli_tokenize_errors(void **state)
{
	(void)state;
	const char *no_text[] = {"tokenize", data("tokenizers/hf-gpt2"), NULL};
	cli_result r = run(no_text);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "strata: error:"));
	assert_non_null(strstr(r.err, "  fix:"));
	cli_result_free(&r);
	const char *bad_opt[] = {"tokenize", "x", "-p", "a", "--frobnicate", NULL};
	r = run(bad_opt);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
	const char *missing[] = {"tokenize", "/nonexistent/model", "-p", "a", NULL};
	r = run(missing);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "does not exist"));
	cli_result_free(&r);
	const char *wpm[] = {"tokenize", data("vocab/ggml-vocab-bert-bge.gguf"),
			     "-p", "a", NULL};
	r = run(wpm);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "'bert' is not supported"));
	assert_string_equal(r.out, "");
	cli_result_free(&r);
	const char *help[] = {"tokenize", "--help", NULL};
	r = run(help);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "--no-special"));
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_tokenize_ids_match_llama_cpp_out),
		cmocka_unit_test(test_cli_tokenize_lists_id_and_piece),
		cmocka_unit_test(test_cli_tokenize_empty_text),
		cmocka_unit_test(test_cli_tokenize_file),
		cmocka_unit_test(test_cli_tokenize_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
