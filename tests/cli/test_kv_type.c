/* test_kv_type.c - `--kv-type f32|f16|bf16` from the command line: plan
 * --json sizes the KV cache at the type (kv_type and kv_cache_bytes in the
 * selected object and the memory object: f16 and bf16 exactly half of
 * f32's at the same shape) and the text plan names it; run's and logits'
 * telemetry carry it; greedy text of stories260K over 48 tokens is the f32
 * cache's for both half types; logits with a half cache differ from f32's
 * but stay close; bad values and q8_0 are usage errors (exit 2) that name
 * the value and the fix, on every command that takes the option (layer:
 * cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"

#define STORIES STRATA_SOURCE_DIR "/models/stories260K"

static const char *const types[] = {"f32", "f16", "bf16"};

static cli_result run(const char *const *argv)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	return r;
}

static json_t *parse(const char *text)
{
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	if (!j)
		fail_msg("not JSON (%s): %s", je.text, text);
	return j;
}

static json_t *load(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
	if (!j)
		fail_msg("%s: %s", path, je.text);
	return j;
}

/* ------------------------------------------------------------------------ */

static void plan_sizes_the_cache_at_the_type(void **state)
{
	(void)state;
	json_int_t kv[3] = {0};
	for (int i = 0; i < 3; i++) {
		const char *argv[] = {"plan", STORIES, "--device", "cpu",
				      "--context", "256", "--batch", "3",
				      "--kv-type", types[i], "--json", NULL};
		cli_result r = run(argv);
		if (r.exit_code != 0)
			fail_msg("plan --kv-type %s: %s", types[i], r.err);
		json_t *j = parse(r.out);
		json_t *sel = json_object_get(j, "selected");
		json_t *mem = json_object_get(j, "memory");
		assert_string_equal(json_string_value(json_object_get(sel, "kv_type")),
				    types[i]);
		assert_string_equal(json_string_value(json_object_get(mem, "kv_type")),
				    types[i]);
		kv[i] = json_integer_value(json_object_get(sel, "kv_cache_bytes"));
		assert_int_equal(kv[i], json_integer_value(json_object_get(
						mem, "kv_cache_bytes")));
		assert_int_equal(json_integer_value(json_object_get(
					 mem, "kv_element_bytes")),
				 i == 0 ? 4 : 2);
		json_decref(j);
		cli_result_free(&r);
	}
	/* stories260K: 5 layers, 4 kv heads of 8, K and V of 3 x 256
	 * positions (each buffer a whole number of 64-byte lines) */
	assert_int_equal(kv[0], 5 * 2 * 3 * 256 * 4 * 8 * 4);
	assert_int_equal(kv[1], kv[0] / 2);
	assert_int_equal(kv[2], kv[0] / 2);
	const char *text[] = {"plan", STORIES, "--device", "cpu", "--context",
			      "256", "--kv-type", "bf16", NULL};
	cli_result r = run(text);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "KV cache: bf16, 160.00 KiB"));
	cli_result_free(&r);
}

/* Greedy text of 48 tokens, and the telemetry's kv_type. */
static char *greedy(const char *type, const char *tel)
{
	const char *argv[] = {"run", STORIES, "--device", "cpu", "-p",
			      "Once upon a time", "-n", "48", "--temperature",
			      "0", "--kv-type", type, "--telemetry", tel,
			      "--quiet", NULL};
	cli_result r = run(argv);
	if (r.exit_code != 0)
		fail_msg("run --kv-type %s: %s", type, r.err);
	json_t *j = load(tel);
	json_t *plan = json_object_get(j, "plan");
	assert_string_equal(json_string_value(json_object_get(plan, "kv_type")),
			    type);
	assert_true(json_number_value(json_object_get(plan, "kv_cache_bytes")) >
		    0);
	json_decref(j);
	char *out = strdup(r.out);
	cli_result_free(&r);
	return out;
}

static void greedy_text_equals_f32s(void **state)
{
	(void)state;
	char dir[1024], tel[1100];
	cli_tmpdir(dir, sizeof dir, "kv_type_greedy");
	snprintf(tel, sizeof tel, "%s/t.json", dir);
	char *want = greedy("f32", tel);
	assert_true(strlen(want) > 100);
	for (int i = 1; i < 3; i++) {
		char *got = greedy(types[i], tel);
		assert_string_equal(got, want);
		free(got);
	}
	free(want);
}

/* Logits of 15 positions: a half cache changes them, a little; the
 * telemetry of logits says which. */
static void logits_differ_a_little(void **state)
{
	(void)state;
	char dir[1024], out[3][1100], tel[1100];
	cli_tmpdir(dir, sizeof dir, "kv_type_logits");
	snprintf(tel, sizeof tel, "%s/t.json", dir);
	float *l[3] = {0};
	long bytes = 0;
	for (int i = 0; i < 3; i++) {
		snprintf(out[i], sizeof out[i], "%s/l-%s.f32", dir, types[i]);
		const char *argv[] = {"logits", STORIES, "--device", "cpu",
				      "--tokens",
				      "1 36 157 171 24 145 194 108 58 16 77 73 199 0 5",
				      "--out", out[i], "--kv-type", types[i],
				      "--telemetry", tel, NULL};
		cli_result r = run(argv);
		if (r.exit_code != 0)
			fail_msg("logits --kv-type %s: %s", types[i], r.err);
		cli_result_free(&r);
		json_t *j = load(tel);
		assert_string_equal(json_string_value(json_object_get(
					    json_object_get(j, "plan"), "kv_type")),
				    types[i]);
		json_decref(j);
		FILE *f = fopen(out[i], "rb");
		assert_non_null(f);
		fseek(f, 0, SEEK_END);
		bytes = ftell(f);
		rewind(f);
		l[i] = malloc((size_t)bytes);
		assert_int_equal(fread(l[i], 1, (size_t)bytes, f), (size_t)bytes);
		fclose(f);
	}
	size_t n = (size_t)bytes / 4;
	for (int i = 1; i < 3; i++) {
		double worst = 0;
		for (size_t k = 0; k < n; k++)
			worst = fmax(worst, fabs(l[i][k] - l[0][k]));
		print_message("stories260K %s KV: max |dlogit| %.3g\n",
			      types[i], worst);
		assert_true(worst > 0);
		/* the reference models' bound (tests/infer/test_kv_type.c):
		 * 2 u (layers + 1) max|logit|, logits here below 20 */
		assert_true(worst < 2 * (i == 1 ? 0x1p-11 : 0x1p-8) * 6 * 20);
	}
	for (int i = 0; i < 3; i++)
		free(l[i]);
}

static void bad_values_are_usage_errors(void **state)
{
	(void)state;
	const char *cmds[][8] = {
		{"plan", STORIES, NULL},
		{"run", STORIES, "-p", "x", "-n", "1", NULL},
		{"logits", STORIES, "--tokens", "1", "--out", "/dev/null", NULL},
		{"bench", STORIES, "-p", "4", "-n", "1", NULL},
		{"batch", STORIES, NULL},
		{"serve", STORIES, NULL},
		{"chat", STORIES, NULL},
	};
	const char *bad[][2] = {
		{"q8_0", "quantized KV cache is not supported"},
		{"f8", "'f8' is not a KV cache type"},
		{"", "'' is not a KV cache type"},
	};
	for (size_t c = 0; c < sizeof cmds / sizeof *cmds; c++)
		for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
			const char *argv[16];
			size_t n = 0;
			for (; cmds[c][n]; n++)
				argv[n] = cmds[c][n];
			argv[n++] = "--kv-type";
			argv[n++] = bad[b][0];
			argv[n] = NULL;
			cli_result r = run(argv);
			if (r.exit_code != 2 || !strstr(r.err, bad[b][1]) ||
			    !strstr(r.err, "fix: use"))
				fail_msg("%s --kv-type '%s': exit %d, %s",
					 cmds[c][0], bad[b][0], r.exit_code,
					 r.err);
			cli_result_free(&r);
		}
	/* the help names the option */
	const char *help[] = {"run", "--help", NULL};
	cli_result r = run(help);
	assert_non_null(strstr(r.out, "--kv-type f32|f16|bf16"));
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(plan_sizes_the_cache_at_the_type),
		cmocka_unit_test(greedy_text_equals_f32s),
		cmocka_unit_test(logits_differ_a_little),
		cmocka_unit_test(bad_values_are_usage_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
