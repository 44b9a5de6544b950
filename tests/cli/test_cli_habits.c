/* test_cli_habits.c - what a new user meets first (issue 25): "did you
 * mean" for a mistyped option, named from the command's own help; a
 * version line with the commit and the build's features; `-f -` reading
 * the prompt from stdin (layer: cli). */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_unknown_option_names_the_likeliest),
		cmocka_unit_test(test_cli_unknown_option_far_from_all_names_none),
		cmocka_unit_test(test_cli_version_names_commit_and_backends),
		cmocka_unit_test(test_cli_run_prompt_from_stdin_equals_prompt_option),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
