/* test_habits.c - what a new user meets first (issue 25): "did you
 * mean" for a mistyped option, named from the command's own help; a
 * version line with the commit and the build's features; `-f -` reading
 * the prompt from stdin; --quiet and --no-mmap (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/cli_runner.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"

static cli_result run_in(const char *const *argv, const char *in)
{
	cli_result r;
	assert_int_equal(cli_run(argv, in, in ? strlen(in) : 0, NULL, &r), 0);
	return r;
}

static void expect_suggestion(const char *const *argv, const char *wanted)
{
	cli_result r = run_in(argv, NULL);
	assert_int_equal(r.exit_code, 2);
	char line[256];
	snprintf(line, sizeof line, "(did you mean '%s'?)", wanted);
	if (!strstr(r.err, line))
		fail_msg("wanted %s in: %s", line, r.err);
	cli_result_free(&r);
}

static void test_cli_unknown_option_names_the_likeliest(void **state)
{
	(void)state;
	const char *run_temp[] = {"run", MODEL, "-p", "x", "--temp", "0", NULL};
	expect_suggestion(run_temp, "--temperature");
	const char *run_typo[] = {"run", MODEL, "-p", "x", "--seeed", "1", NULL};
	expect_suggestion(run_typo, "--seed");
	const char *plan[] = {"plan", MODEL, "--jsn", NULL};
	expect_suggestion(plan, "--json");
	const char *inspect[] = {"inspect", MODEL, "--tensor", NULL};
	expect_suggestion(inspect, "--tensors");
	/* residency options come from the shared help part */
	const char *budget[] = {"run", MODEL, "-p", "x", "--device-memroy",
				"1MiB", NULL};
	expect_suggestion(budget, "--device-memory");
}

static void test_cli_unknown_option_far_from_all_names_none(void **state)
{
	(void)state;
	const char *argv[] = {"run", MODEL, "-p", "x", "--zzzzzzzz", "1", NULL};
	cli_result r = run_in(argv, NULL);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "unknown option '--zzzzzzzz'"));
	assert_null(strstr(r.err, "did you mean"));
	cli_result_free(&r);
}

static void test_cli_version_names_commit_and_backends(void **state)
{
	(void)state;
	const char *argv[] = {"--version", NULL};
	cli_result r = run_in(argv, NULL);
	assert_int_equal(r.exit_code, 0);
	assert_true(!strncmp(r.out, "strata ", 7));
	const char *c = strstr(r.out, "(commit ");
	assert_non_null(c);
	assert_true(c[8] != ')'); /* a commit or "unknown", never empty */
	assert_non_null(strstr(r.out, "\nbackends: cpu"));
	assert_non_null(strstr(r.out, "\nthis processor:"));
	cli_result_free(&r);
}

static void test_cli_run_prompt_from_stdin_equals_prompt_option(void **state)
{
	(void)state;
	const char *from_opt[] = {"run", MODEL, "-p", "Once upon a", "-n", "8",
				  "--temperature", "0", "--device", "cpu",
				  NULL};
	const char *from_stdin[] = {"run", MODEL, "-f", "-", "-n", "8",
				    "--temperature", "0", "--device", "cpu",
				    NULL};
	cli_result a = run_in(from_opt, NULL);
	cli_result b = run_in(from_stdin, "Once upon a");
	assert_int_equal(a.exit_code, 0);
	assert_int_equal(b.exit_code, 0);
	assert_true(a.out_len > 0);
	assert_string_equal(a.out, b.out);
	cli_result_free(&a);
	cli_result_free(&b);
}

static void test_cli_single_safetensors_file_is_its_folder(void **state)
{
	(void)state;
	const char *dir[] = {"run", MODEL, "-p", "Once upon a", "-n", "8",
			     "--temperature", "0", "--device", "cpu", NULL};
	const char *file[] = {"run", MODEL "/model.safetensors", "-p",
			      "Once upon a", "-n", "8", "--temperature", "0",
			      "--device", "cpu", NULL};
	cli_result a = run_in(dir, NULL), b = run_in(file, NULL);
	assert_int_equal(b.exit_code, 0);
	assert_string_equal(a.out, b.out);
	cli_result_free(&a);
	cli_result_free(&b);
	const char *tok_dir[] = {"tokenize", MODEL, "-p", "Hello", NULL};
	const char *tok_file[] = {"tokenize", MODEL "/model.safetensors", "-p",
				  "Hello", NULL};
	a = run_in(tok_dir, NULL);
	b = run_in(tok_file, NULL);
	assert_int_equal(b.exit_code, 0);
	assert_string_equal(a.out, b.out);
	cli_result_free(&a);
	cli_result_free(&b);
}

/* Writes an empty file `name` into dir. */
static void touch(const char *dir, const char *name)
{
	char path[8192];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
}

/* cmd fails with exit 1, and stderr holds both pieces. */
static void expect_error(const char *const *argv, const char *what,
			 const char *fix)
{
	cli_result r = run_in(argv, NULL);
	assert_int_equal(r.exit_code, 1);
	if (!strstr(r.err, what) || !strstr(r.err, fix))
		fail_msg("wanted '%s' and '%s' in: %s", what, fix, r.err);
	cli_result_free(&r);
}

static void test_cli_foreign_model_folders_say_what_to_do(void **state)
{
	(void)state;
	char pt[4096], spm[4096];
	cli_tmpdir(pt, sizeof pt, "habits-pytorch");
	touch(pt, "pytorch_model.bin");
	touch(pt, "config.json");
	for (int i = 0; i < 3; i++) {
		const char *cmd = (const char *[]){"run", "plan", "inspect"}[i];
		const char *argv[] = {cmd, pt, "-p", "x", NULL};
		if (i > 0)
			argv[2] = NULL;
		expect_error(argv, "holds PyTorch pickle weights",
			     "save_pretrained");
	}
	cli_tmpdir(spm, sizeof spm, "habits-spm");
	touch(spm, "tokenizer.model");
	const char *tok[] = {"tokenize", spm, "-p", "x", NULL};
	expect_error(tok, "has tokenizer.model (SentencePiece) but no "
		     "tokenizer.json", "AutoTokenizer");
	const char *hub[] = {"run", "someone/some-model-7B", "-p", "x", NULL};
	expect_error(hub, "looks like a Hugging Face hub id",
		     "hf download someone/some-model-7B");
	const char *hub_plan[] = {"plan", "someone/some-model-7B", NULL};
	expect_error(hub_plan, "looks like a Hugging Face hub id",
		     "--local-dir");
}

/* The seed a run printed, from its stderr summary ("; seed S"). */
static unsigned long long printed_seed(const cli_result *r)
{
	const char *p = strstr(r->err, "; seed ");
	assert_non_null(p);
	return strtoull(p + 7, NULL, 10);
}

static void test_cli_run_default_seed_is_new_and_printed(void **state)
{
	(void)state;
	const char *argv[] = {"run", MODEL, "-p", "Once upon a", "-n", "40",
			      "--temperature", "1.5", "--device", "cpu", NULL};
	cli_result a = run_in(argv, NULL), b = run_in(argv, NULL);
	assert_int_equal(a.exit_code, 0);
	assert_int_equal(b.exit_code, 0);
	assert_true(printed_seed(&a) != printed_seed(&b));
	/* the printed seed repeats the run, and the telemetry names it */
	char seed[32], dir[4096], tel[8192];
	snprintf(seed, sizeof seed, "%llu", printed_seed(&a));
	cli_tmpdir(dir, sizeof dir, "habits-seed");
	snprintf(tel, sizeof tel, "%s/telemetry.json", dir);
	const char *again[] = {"run", MODEL, "-p", "Once upon a", "-n", "40",
			       "--temperature", "1.5", "--device", "cpu",
			       "--seed", seed, "--telemetry", tel, NULL};
	cli_result c = run_in(again, NULL);
	assert_int_equal(c.exit_code, 0);
	assert_string_equal(a.out, c.out);
	assert_int_equal(printed_seed(&c), printed_seed(&a));
	FILE *f = fopen(tel, "r");
	assert_non_null(f);
	char doc[65536];
	size_t n = fread(doc, 1, sizeof doc - 1, f);
	fclose(f);
	doc[n] = '\0';
	char want[64];
	snprintf(want, sizeof want, "\"seed\": %s", seed);
	if (!strstr(doc, want))
		fail_msg("no %s in the telemetry", want);
	cli_result_free(&a);
	cli_result_free(&b);
	cli_result_free(&c);
}

/* --quiet: the same stdout, nothing on stderr; an error still prints.
 * --no-mmap: the same text read instead of mapped. Neither is plan's. */
static void test_cli_quiet_and_no_mmap(void **state)
{
	(void)state;
	const char *run[] = {"run", MODEL, "-p", "Once upon a", "-n", "12",
			     "--seed", "7", "--device", "cpu", NULL};
	const char *quiet[] = {"run", MODEL, "-p", "Once upon a", "-n", "12",
			       "--seed", "7", "--device", "cpu", "--quiet",
			       NULL};
	const char *read[] = {"run", MODEL, "-p", "Once upon a", "-n", "12",
			      "--seed", "7", "--device", "cpu", "--no-mmap",
			      NULL};
	cli_result a = run_in(run, NULL), q = run_in(quiet, NULL),
		   r = run_in(read, NULL);
	assert_int_equal(a.exit_code, 0);
	assert_int_equal(q.exit_code, 0);
	assert_int_equal(r.exit_code, 0);
	assert_true(a.err_len > 0 && a.out_len > 0);
	assert_string_equal(q.err, "");
	assert_string_equal(a.out, q.out);
	assert_string_equal(a.out, r.out);
	/* no bar where stderr is not a terminal */
	assert_null(strstr(a.err, "loading ["));
	cli_result_free(&a);
	cli_result_free(&q);
	cli_result_free(&r);
	const char *bad[] = {"run", MODEL, "-p", "x", "--quiet", "-n", "-3",
			     NULL};
	cli_result b = run_in(bad, NULL);
	assert_int_equal(b.exit_code, 2);
	assert_non_null(strstr(b.err, "strata: error: "));
	cli_result_free(&b);
	char dir[4096], out[8192];
	cli_tmpdir(dir, sizeof dir, "habits-quiet");
	snprintf(out, sizeof out, "%s/l.f32", dir);
	const char *logits[] = {"logits", MODEL, "--tokens", "1 403 407",
				"--out", out, "--device", "cpu", "--quiet",
				NULL};
	cli_result l = run_in(logits, NULL);
	assert_int_equal(l.exit_code, 0);
	assert_string_equal(l.err, "");
	cli_result_free(&l);
	const char *batch[] = {"batch", MODEL, "--device", "cpu", "--quiet",
			       NULL};
	cli_result t = run_in(batch, "{\"id\":\"a\",\"prompt\":\"Once\","
				     "\"max_tokens\":4}\n");
	assert_int_equal(t.exit_code, 0);
	assert_string_equal(t.err, "");
	assert_non_null(strstr(t.out, "\"id\":\"a\""));
	cli_result_free(&t);
	const char *plan_help[] = {"plan", "--help", NULL};
	cli_result h = run_in(plan_help, NULL);
	assert_null(strstr(h.out, "--no-mmap"));
	assert_null(strstr(h.out, "--quiet"));
	cli_result_free(&h);
	const char *run_help[] = {"run", "--help", NULL};
	h = run_in(run_help, NULL);
	assert_non_null(strstr(h.out, "--no-mmap"));
	assert_non_null(strstr(h.out, "--quiet"));
	cli_result_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_unknown_option_names_the_likeliest),
		cmocka_unit_test(test_cli_unknown_option_far_from_all_names_none),
		cmocka_unit_test(test_cli_version_names_commit_and_backends),
		cmocka_unit_test(test_cli_run_prompt_from_stdin_equals_prompt_option),
		cmocka_unit_test(test_cli_single_safetensors_file_is_its_folder),
		cmocka_unit_test(test_cli_foreign_model_folders_say_what_to_do),
		cmocka_unit_test(test_cli_run_default_seed_is_new_and_printed),
		cmocka_unit_test(test_cli_quiet_and_no_mmap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
