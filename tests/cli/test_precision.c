/* test_precision.c - `--precision fast|exact`, the one option that picks
 * the numerics (issues 18 and 19), on the small llama of tests/data/quant
 * (layer: cli): exact gives the f32-activation logits (within 1e-3 of the
 * float64 reference, closer than llama.cpp's own), fast is the default and
 * quantizes x to 8 bits (a different result, within llama.cpp's distance
 * of the reference); a bad value is a usage error (exit 2) naming it with
 * the fix; every command that computes lists it and takes it, plan (whose
 * figures do not depend on it) does not; the telemetry document and run's
 * summary say which one ran. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"

#define QUANT STRATA_SOURCE_DIR "/tests/data/quant/"
#define VOCAB 512
#define POSITIONS 40
#define VALUES ((size_t)POSITIONS * VOCAB)

static char dir[1024], ids[1024];
static float got[VALUES], exact_ref[VALUES], llama[VALUES];

static void read_floats(const char *path, float *out, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	assert_int_equal(fread(out, sizeof *out, n, f), n);
	assert_int_equal(fgetc(f), EOF);
	fclose(f);
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double d = 0;
	for (size_t i = 0; i < n; i++) {
		double e = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
		if (!(e <= d)) /* NaN counts as a difference */
			d = e;
	}
	return d;
}

static cli_result run(const char *const *argv, const char *in)
{
	cli_result r;
	assert_int_equal(cli_run(argv, in, in ? strlen(in) : 0, NULL, &r), 0);
	return r;
}

/* `strata logits` of type's file on the CPU in passes of 8 tokens (so
 * every product is a decode-shaped one, the path the precision picks),
 * with `precision` ("" for none given) into out. */
static void logits(const char *type, const char *precision, float *out)
{
	char model[512], path[1200];
	snprintf(model, sizeof model, QUANT "model-%s.gguf", type);
	snprintf(path, sizeof path, "%s/logits-%s-%s.f32", dir, type,
		 precision[0] ? precision : "default");
	const char *argv[20] = {"logits", model, "--tokens", ids, "--out", path,
				"--device", "cpu", "--prefill-chunk", "8",
				"--quiet"};
	size_t n = 11;
	if (precision[0]) {
		argv[n++] = "--precision";
		argv[n++] = precision;
	}
	cli_result r = run(argv, NULL);
	if (r.exit_code != 0)
		fail_msg("%s --precision %s: exit %d: %s", type, precision,
			 r.exit_code, r.err);
	cli_result_free(&r);
	read_floats(path, out, VALUES);
}

static void references(const char *type)
{
	char path[512];
	snprintf(path, sizeof path, QUANT "model-%s.ref.f32", type);
	read_floats(path, exact_ref, VALUES);
	snprintf(path, sizeof path, QUANT "model-%s.logits.f32", type);
	read_floats(path, llama, VALUES);
}

static const char *const types[] = {"Q8_0", "Q4_0", "Q4_K_M", "IQ4_XS"};
#define TYPES (sizeof types / sizeof *types)

/* exact: f32 activations against the exactly decoded weights, the
 * float64 reference's result to 1e-3 (docs/infer.md#precision). */
static void exact_gives_the_f32_logits(void **state)
{
	(void)state;
	for (size_t i = 0; i < TYPES; i++) {
		references(types[i]);
		logits(types[i], "exact", got);
		double d = max_diff(got, exact_ref, VALUES);
		double dl = max_diff(llama, exact_ref, VALUES);
		print_message("%-7s exact: %.3g from the reference (llama.cpp "
			      "%.3g)\n", types[i], d, dl);
		if (!(d < 1e-3 && d < dl))
			fail_msg("%s: --precision exact is %.3g from the "
				 "reference (llama.cpp %.3g)", types[i], d, dl);
	}
}

/* fast is the default (the same bits with and without the option), takes
 * x quantized to 8 bits (further from the reference than exact: a fast
 * that computed exactly would fail here), within llama.cpp's distance. */
static void fast_is_the_default_and_quantizes_activations(void **state)
{
	(void)state;
	static float fast[VALUES], exact[VALUES];
	for (size_t i = 0; i < TYPES; i++) {
		references(types[i]);
		logits(types[i], "", got);
		logits(types[i], "fast", fast);
		logits(types[i], "exact", exact);
		assert_memory_equal(got, fast, sizeof fast);
		double d = max_diff(fast, exact_ref, VALUES);
		double dx = max_diff(fast, exact, VALUES);
		double dl = max_diff(llama, exact_ref, VALUES);
		print_message("%-7s fast: %.3g from the reference, %.3g from "
			      "exact (llama.cpp %.3g)\n", types[i], d, dx, dl);
		if (!(dx > 1e-3 && d < dl))
			fail_msg("%s: fast %.3g from the reference and %.3g "
				 "from exact (llama.cpp %.3g)", types[i], d,
				 dx, dl);
	}
}

static void bad_values_are_usage_errors(void **state)
{
	(void)state;
	char out[1200];
	snprintf(out, sizeof out, "%s/never.f32", dir);
	const char *model = QUANT "model-Q8_0.gguf";
	const char *bad[][2] = {
		{"--precision", "fastest"}, {"--precision", "FAST"},
		{"--precision=", NULL},	    {"--precision=bf16", NULL},
		{"--precision", NULL}, /* no value at the end */
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		const char *argv[12] = {"logits", model, "--tokens", "1 2",
					"--out", out, "--device", "cpu",
					bad[i][0], bad[i][1], NULL};
		cli_result r = run(argv, NULL);
		if (r.exit_code != 2 || !strstr(r.err, "strata: error: ") ||
		    !strstr(r.err, "--precision") ||
		    !strstr(r.err, "fix: ") || !strstr(r.err, "exact"))
			fail_msg("case %zu: exit %d: %s", i, r.exit_code,
				 r.err);
		cli_result_free(&r);
		assert_null(fopen(out, "rb"));
	}
	const char *named[] = {"logits", model, "--tokens", "1", "--out", out,
			       "--precision", "fastest", NULL};
	cli_result r = run(named, NULL);
	assert_non_null(strstr(r.err, "'fastest'"));
	cli_result_free(&r);
}

/* Every command that computes lists --precision in its help and runs
 * with it; plan, whose sizes and predictions it does not change, has
 * none. */
static void every_computing_command_takes_it(void **state)
{
	(void)state;
	const char *const cmds[] = {"run", "chat", "logits", "batch", "serve",
				    "bench"};
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		const char *argv[] = {cmds[i], "--help", NULL};
		cli_result r = run(argv, NULL);
		assert_int_equal(r.exit_code, 0);
		if (!strstr(r.out, "\n  --precision fast|exact "))
			fail_msg("strata %s --help lists no --precision",
				 cmds[i]);
		cli_result_free(&r);
	}
	const char *plan_help[] = {"plan", "--help", NULL};
	cli_result r = run(plan_help, NULL);
	assert_null(strstr(r.out, "--precision"));
	cli_result_free(&r);
	const char *model = QUANT "model-Q4_0.gguf";
	const char *gen[] = {"run", model, "-p", "Once upon a time", "-n", "8",
			     "--device", "cpu", "--temperature", "0",
			     "--precision=exact", "--quiet", NULL};
	r = run(gen, NULL);
	if (r.exit_code != 0 || !r.out[0])
		fail_msg("run --precision=exact: exit %d: %s", r.exit_code,
			 r.err);
	cli_result_free(&r);
	const char *batch[] = {"batch", model, "--device", "cpu", "--precision",
			       "exact", NULL};
	r = run(batch, "{\"id\": \"a\", \"prompt\": \"Once\", "
		       "\"max_tokens\": 4}\n");
	if (r.exit_code != 0 || !strstr(r.out, "\"a\""))
		fail_msg("batch --precision exact: exit %d: %s", r.exit_code,
			 r.err);
	cli_result_free(&r);
}

/* The telemetry document's plan.precision at `path`. */
static void telemetry_says(const char *path, const char *want,
			   const char *what)
{
	json_error_t je;
	/* counters are u64 (a random seed may pass jansson's int64) */
	json_t *doc = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
	if (!doc)
		fail_msg("%s: no telemetry document: %s", what, je.text);
	const char *got = json_string_value(
		json_object_get(json_object_get(doc, "plan"), "precision"));
	if (!got || strcmp(got, want))
		fail_msg("%s: plan.precision is %s, want %s", what,
			 got ? got : "(absent)", want);
	json_decref(doc);
	unlink(path);
}

/* run, logits and batch write the precision they computed at into the
 * telemetry document (the default's name too), and run's summary line
 * ends with it. */
static void the_telemetry_and_summary_say_which(void **state)
{
	(void)state;
	const char *model = QUANT "model-Q4_0.gguf";
	char path[1200];
	snprintf(path, sizeof path, "%s/telemetry.json", dir);
	const char *given[] = {NULL, "fast", "exact"};
	for (size_t i = 0; i < 3; i++) {
		const char *want = given[i] ? given[i] : "fast";
		const char *argv[20] = {"run", model, "-p", "Once upon", "-n",
					"3", "--device", "cpu",
					"--temperature", "0", "--telemetry",
					path};
		size_t n = 12;
		if (given[i]) {
			argv[n++] = "--precision";
			argv[n++] = given[i];
		}
		cli_result r = run(argv, NULL);
		if (r.exit_code != 0)
			fail_msg("run: exit %d: %s", r.exit_code, r.err);
		char line[64];
		snprintf(line, sizeof line, " planned; precision %s\n", want);
		if (!strstr(r.err, "\nplan: ") || !strstr(r.err, line))
			fail_msg("run --precision %s: the summary says no "
				 "'%s': %s", want, line, r.err);
		cli_result_free(&r);
		telemetry_says(path, want, "run");
	}
	const char *logit[] = {"logits", model, "--tokens", "1 2 3", "--out",
			       "/dev/null", "--device", "cpu", "--precision",
			       "exact", "--telemetry", path, "--quiet", NULL};
	cli_result r = run(logit, NULL);
	if (r.exit_code != 0)
		fail_msg("logits: exit %d: %s", r.exit_code, r.err);
	cli_result_free(&r);
	telemetry_says(path, "exact", "logits");
	const char *batch[] = {"batch", model, "--device", "cpu", "--precision",
			       "exact", "--telemetry", path, NULL};
	r = run(batch, "{\"id\": \"a\", \"prompt\": \"Once\", "
		       "\"max_tokens\": 2}\n");
	if (r.exit_code != 0)
		fail_msg("batch: exit %d: %s", r.exit_code, r.err);
	cli_result_free(&r);
	telemetry_says(path, "exact", "batch");
}

int main(void)
{
	cli_tmpdir(dir, sizeof dir, "precision");
	FILE *f = fopen(QUANT "tokens.txt", "r");
	if (!f)
		return 1;
	for (int i = 0, t; i < POSITIONS && fscanf(f, "%d", &t) == 1; i++) {
		size_t at = strlen(ids);
		snprintf(ids + at, sizeof ids - at, "%s%d", i ? " " : "", t);
	}
	fclose(f);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exact_gives_the_f32_logits),
		cmocka_unit_test(fast_is_the_default_and_quantizes_activations),
		cmocka_unit_test(bad_values_are_usage_errors),
		cmocka_unit_test(every_computing_command_takes_it),
		cmocka_unit_test(the_telemetry_and_summary_say_which),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
