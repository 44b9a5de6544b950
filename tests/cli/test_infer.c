/* test_infer.c - `strata run` and `strata logits` end to end: the real
 * stories260K greedy text byte for byte, logits against transformers in
 * every residency mode (bit-identical across modes), seeded sampling,
 * telemetry, and errors with their exit codes (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"
#include "support/refmodel.h"

#define DATA STRATA_SOURCE_DIR "/tests/data"
#define STORIES DATA "/gguf/stories260K.gguf"
#define STORIES_TEXT DATA "/reference/stories260K-greedy-200.txt"

static cli_result run(const char *const *argv)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	return r;
}

static char *slurp(const char *path, size_t *len)
{
	char *buf = NULL;
	strata_error err;
	if (strata_file_read_all(path, 1u << 26, &buf, len, &err))
		return NULL;
	return buf;
}

/* ------------------------------------------------------------------------ */

static void expect_stories_text(const char *const *argv)
{
	size_t want_len;
	char *want = slurp(STORIES_TEXT, &want_len);
	assert_non_null(want);
	cli_result r = run(argv);
	if (r.exit_code != 0)
		fail_msg("exit %d: %s", r.exit_code, r.err);
	/* llama2.c's text, then the newline that ends it */
	if (r.out_len != want_len + 1 || memcmp(r.out, want, want_len) ||
	    r.out[want_len] != '\n')
		fail_msg("text differs from llama2.c's:\n%s", r.out);
	assert_non_null(strstr(r.err, "time to first token"));
	assert_non_null(strstr(r.err, "tokens/s"));
	cli_result_free(&r);
	strata_free(want);
}

/* The shipped model in both of its formats (models/stories260K). */
static const char *const shipped_models[] = {
	STRATA_SOURCE_DIR "/models/stories260K/stories260K.gguf",
	STRATA_SOURCE_DIR "/models/stories260K",
};

/* Every residency mode, with budgets that make each the one run. */
static const char *const greedy_modes[][8] = {
	{"--residency", "resident"},
	{"--residency", "host:1", "--device-memory", "64MiB", "--host-memory",
	 "64MiB"},
	{"--residency", "host:2", "--device-memory", "64MiB", "--host-memory",
	 "64MiB"},
	{"--residency", "disk", "--device-memory", "64MiB", "--host-memory",
	 "0"},
	{"--residency", "disk", "--device-memory", "64MiB", "--host-memory",
	 "64MiB", "--lookahead", "2"},
};

/* Issue 10: greedy from BOS (empty prompt) over 200 positions gives
 * llama2.c's text byte for byte, for both formats in every mode. */
static void test_run_stories_greedy_matches_llama2c(void **state)
{
	(void)state;
	for (size_t f = 0; f < 2; f++) {
		for (size_t m = 0;
		     m < sizeof greedy_modes / sizeof *greedy_modes; m++) {
			const char *argv[20] = {"run", shipped_models[f], "-p",
						"", "-n", "200",
						"--temperature", "0"};
			size_t n = 8;
			for (size_t k = 0; k < 8 && greedy_modes[m][k]; k++)
				argv[n++] = greedy_modes[m][k];
			argv[n] = NULL;
			print_message("%s %s %s\n", shipped_models[f],
				      greedy_modes[m][0], greedy_modes[m][1]);
			expect_stories_text(argv);
		}
	}
	/* The copy kept with the checkpoint tests is the same file. */
	const char *copy[] = {"run", STORIES, "-p", "", "-n", "200",
			      "--temperature", "0", NULL};
	expect_stories_text(copy);
}

/* Issue 24: the printed text continues the prompt's text, so the first
 * token's space is kept ("Once upon a" + "▁time" is " time"), from
 * tokenizer.json and from the GGUF. */
static void test_run_continuation_keeps_its_space(void **state)
{
	(void)state;
	for (size_t f = 0; f < 2; f++) {
		const char *argv[] = {"run", shipped_models[f], "-p", "Once upon a",
				      "-n", "6", "--temperature", "0", NULL};
		cli_result r = run(argv);
		assert_int_equal(r.exit_code, 0);
		assert_string_equal(r.out, " time, there was a little\n");
		cli_result_free(&r);
	}
}

static void test_run_same_seed_same_text(void **state)
{
	(void)state;
	const char *a[] = {"run", STORIES, "-p", "Once upon a time", "-n",
			   "60", "--temperature", "1.0", "--top-k", "0",
			   "--top-p", "1", "--min-p", "0", "--seed", "7", NULL};
	cli_result r1 = run(a), r2 = run(a);
	assert_int_equal(r1.exit_code, 0);
	assert_int_equal(r2.exit_code, 0);
	assert_true(r1.out_len > 20);
	assert_string_equal(r1.out, r2.out);
	const char *b[] = {"run", STORIES, "-p", "Once upon a time", "-n",
			   "60", "--temperature", "1.0", "--top-k", "0",
			   "--top-p", "1", "--min-p", "0", "--seed", "8", NULL};
	cli_result r3 = run(b);
	assert_int_equal(r3.exit_code, 0);
	assert_string_not_equal(r1.out, r3.out);
	cli_result_free(&r1);
	cli_result_free(&r2);
	cli_result_free(&r3);
}

/* ------------------------------------------------------------------------ */

/* On the CPU backend the device is RAM too, so the planner gives the host
 * nothing unless told: the split is stated explicitly. */
static const char *const mode_args[][8] = {
	{"--residency", "resident", NULL},
	{"--residency", "host:1", "--device-memory", "64MiB", "--host-memory",
	 "64MiB", NULL},
	{"--residency", "host:2", "--device-memory", "64MiB", "--host-memory",
	 "64MiB", NULL},
	{"--residency", "disk", "--device-memory", "64MiB", "--host-memory",
	 "0", NULL},
	{"--residency", "disk", "--device-memory", "64MiB", "--host-memory",
	 "64MiB", "--lookahead", "2"},
};
#define MODES (sizeof mode_args / sizeof *mode_args)

static void logits_in_every_mode(const char *name)
{
	ref_data ref;
	ref_load(name, &ref);
	char model[1024], dir[1024], out[1200], tel[1200], ids[1024] = "";
	ref_path(model, sizeof model, name, NULL);
	cli_tmpdir(dir, sizeof dir, name);
	for (uint32_t i = 0; i < ref.n_tokens; i++)
		snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d",
			 i ? " " : "", ref.tokens[i]);
	char *first = NULL;
	size_t first_len = 0;
	for (size_t m = 0; m < MODES; m++) {
		snprintf(out, sizeof out, "%s/logits-%zu.f32", dir, m);
		snprintf(tel, sizeof tel, "%s/telemetry-%zu.json", dir, m);
		const char *argv[20] = {"logits", model, "--tokens", ids,
					"--out", out, "--telemetry", tel};
		size_t n = 8;
		for (size_t k = 0; k < 8 && mode_args[m][k]; k++)
			argv[n++] = mode_args[m][k];
		cli_result r = run(argv);
		if (r.exit_code != 0)
			fail_msg("%s mode %zu: exit %d: %s", name, m,
				 r.exit_code, r.err);
		cli_result_free(&r);
		size_t len;
		char *got = slurp(out, &len);
		assert_non_null(got);
		assert_int_equal(len, (size_t)ref.n_tokens * ref.vocab * 4);
		double d = ref_max_diff((const float *)got, ref.logits,
					(uint64_t)ref.n_tokens * ref.vocab);
		if (!(d <= 1e-3))
			fail_msg("%s mode %zu: max |dlogit| %.3g", name, m, d);
		if (!first) {
			first = got;
			first_len = len;
		} else {
			assert_memory_equal(got, first, first_len);
			strata_free(got);
		}
		json_error_t je;
		json_t *doc = json_load_file(tel, 0, &je);
		assert_non_null(doc);
		json_t *res = json_object_get(doc, "residency");
		json_t *tr = json_object_get(res, "transfers");
		assert_int_equal(json_array_size(tr), 6);
		/* Order (DESIGN.md): d2h, d2disk, h2d, h2disk, disk2d, disk2h */
		uint64_t h2d = json_integer_value(json_object_get(
			json_array_get(tr, 2), "bytes"));
		uint64_t disk = json_integer_value(json_object_get(
					json_array_get(tr, 4), "bytes")) +
				json_integer_value(json_object_get(
					json_array_get(tr, 5), "bytes"));
		if (m == 1 || m == 2)
			assert_true(h2d > 0);
		if (m >= 3)
			assert_true(disk > 0);
		assert_non_null(json_object_get(doc, "weight_store"));
		assert_non_null(json_object_get(doc, "devices"));
		assert_non_null(json_object_get(doc, "plan"));
		json_decref(doc);
	}
	strata_free(first);
	ref_free(&ref);
}

static void test_logits_every_mode_match_transformers(void **state)
{
	(void)state;
	logits_in_every_mode("llama_gqa1_f32");
	logits_in_every_mode("mistral_window_bf16");
	logits_in_every_mode("qwen2_bias_tied_f16");
	logits_in_every_mode("llama3_rope_bf16");
}

/* ------------------------------------------------------------------------ */

static void test_logits_errors_leave_no_file(void **state)
{
	(void)state;
	char dir[1024], out[1100], model[1024];
	cli_tmpdir(dir, sizeof dir, "logits-errors");
	snprintf(out, sizeof out, "%s/never.f32", dir);
	ref_path(model, sizeof model, "llama_gqa2_f32", NULL);
	const char *big[] = {"logits", model, "--tokens", "1 2 200", "--out",
			     out, NULL};
	cli_result r = run(big);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "token 200"));
	assert_non_null(strstr(r.err, "fix:"));
	cli_result_free(&r);
	FILE *f = fopen(out, "rb");
	assert_null(f);
	const char *garbage[] = {"logits", model, "--tokens", "1 x", "--out",
				 out, NULL};
	r = run(garbage);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "'x'"));
	cli_result_free(&r);
	const char *empty[] = {"logits", model, "--tokens", " ", "--out", out,
			       NULL};
	r = run(empty);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
	const char *no_out[] = {"logits", model, "--tokens", "1", NULL};
	r = run(no_out);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
	const char *batch[] = {"logits", model, "--tokens", "1", "--out", out,
			       "--batch", "2", NULL};
	r = run(batch);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "strata batch's --batch"));
	cli_result_free(&r);
	const char *cuda[] = {"logits", model, "--tokens", "1", "--out", out,
			      "--device", "cuda", NULL};
	r = run(cuda);
	assert_int_equal(r.exit_code, 1);
	cli_result_free(&r);
	assert_null(fopen(out, "rb"));
}

static void test_run_usage_errors(void **state)
{
	(void)state;
	const char *both[] = {"run", STORIES, "-p", "a", "-f", "x", NULL};
	const char *none[] = {"run", STORIES, NULL};
	const char *temp[] = {"run", STORIES, "-p", "a", "--temperature", "-1",
			      NULL};
	const char *topp[] = {"run", STORIES, "-p", "a", "--top-p", "0",
			      NULL};
	const char *unknown[] = {"run", STORIES, "-p", "a", "--frobnicate",
				 "1", NULL};
	const char *batch[] = {"run", STORIES, "-p", "a", "--batch", "2",
			       NULL};
	const char *const *cases[] = {both, none, temp, topp, unknown, batch};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		cli_result r = run(cases[i]);
		if (r.exit_code != 2)
			fail_msg("case %zu: exit %d: %s", i, r.exit_code,
				 r.err);
		assert_non_null(strstr(r.err, "strata: error:"));
		cli_result_free(&r);
	}
	const char *too_long[] = {"run", STORIES, "-p", "a", "-n", "100000",
				  NULL};
	cli_result r = run(too_long);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "positions"));
	cli_result_free(&r);
	const char *missing[] = {"run", DATA "/nope", "-p", "a", NULL};
	r = run(missing);
	assert_int_equal(r.exit_code, 1);
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_stories_greedy_matches_llama2c),
		cmocka_unit_test(test_run_continuation_keeps_its_space),
		cmocka_unit_test(test_run_same_seed_same_text),
		cmocka_unit_test(test_logits_every_mode_match_transformers),
		cmocka_unit_test(test_logits_errors_leave_no_file),
		cmocka_unit_test(test_run_usage_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
