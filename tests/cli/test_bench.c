/* test_bench.c - `strata bench` on the shipped stories260K on the CPU
 * (issue 19): the table has llama-bench's shape (a header, a separator with
 * right-aligned figures, one row per test in the order asked, ppN then tgN,
 * t/s as "mean ± deviation", every figure positive); --json gives the same
 * tests with the same model, size and parameter count as the table, and
 * figures consistent among themselves (each sample's t/s is its tokens over
 * its time, the mean and deviation are the samples'); bad options are
 * usage errors and a prompt past the context is a clear error (layer:
 * cli). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define MAX_ROWS 8
#define CELL 160

typedef struct table {
	char cell[MAX_ROWS + 2][7][CELL]; /* header, separator, rows */
	size_t rows;			  /* body rows */
} table;

static cli_result bench(const char *const *extra)
{
	const char *argv[32] = {"bench", MODEL, "--device", "cpu",
				"--threads", "1"};
	size_t n = 6;
	for (size_t i = 0; extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	cli_result r;
	assert_int_equal(cli_run(argv, NULL, 0, NULL, &r), 0);
	return r;
}

/* Splits "| a | b |" lines into trimmed cells; every line has 7. */
static void parse_table(const char *out, table *t)
{
	size_t line = 0;
	for (const char *p = out; *p; line++) {
		assert_true(line < MAX_ROWS + 2);
		const char *end = strchr(p, '\n');
		assert_non_null(end);
		assert_true(*p == '|');
		size_t c = 0;
		for (const char *q = p + 1; q < end; c++) {
			const char *bar = memchr(q, '|', (size_t)(end - q));
			assert_non_null(bar);
			assert_true(c < 7);
			const char *a = q, *b = bar;
			while (a < b && *a == ' ')
				a++;
			while (b > a && b[-1] == ' ')
				b--;
			assert_true((size_t)(b - a) < CELL);
			memcpy(t->cell[line][c], a, (size_t)(b - a));
			t->cell[line][c][b - a] = '\0';
			q = bar + 1;
		}
		assert_int_equal(c, 7);
		p = end + 1;
	}
	assert_true(line >= 3);
	t->rows = line - 2;
}

static void test_bench_table_has_llama_bench_shape(void **state)
{
	(void)state;
	const char *extra[] = {"-p", "16,32", "-n", "8", "-r", "3", NULL};
	cli_result r = bench(extra);
	if (r.exit_code != 0)
		fail_msg("exit %d: %s", r.exit_code, r.err);
	static table t;
	parse_table(r.out, &t);
	static const char *const head[] = {"model", "size", "params",
					   "backend", "residency", "test",
					   "t/s"};
	for (size_t c = 0; c < 7; c++)
		assert_string_equal(t.cell[0][c], head[c]);
	/* figures right-aligned (---:), text left (----) */
	static const int right[] = {0, 1, 1, 0, 0, 1, 1};
	for (size_t c = 0; c < 7; c++) {
		size_t len = strlen(t.cell[1][c]);
		assert_true(len >= 3 && strspn(t.cell[1][c], "-") >= len - 1);
		assert_int_equal(t.cell[1][c][len - 1] == ':', right[c]);
	}
	assert_int_equal(t.rows, 3);
	static const char *const tests[] = {"pp16", "pp32", "tg8"};
	for (size_t i = 0; i < 3; i++) {
		assert_string_equal(t.cell[2 + i][0], "llama stories260K F32");
		assert_string_equal(t.cell[2 + i][3], "CPU");
		assert_string_equal(t.cell[2 + i][4], "resident");
		assert_string_equal(t.cell[2 + i][5], tests[i]);
		double mean = 0, sd = -1;
		assert_int_equal(sscanf(t.cell[2 + i][6], "%lf \u00b1 %lf",
					&mean, &sd), 2);
		assert_true(mean > 0 && sd >= 0 && isfinite(mean));
	}
	cli_result_free(&r);
}

static double num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	assert_non_null(v);
	assert_true(json_is_number(v));
	return json_number_value(v);
}

static void test_bench_json_matches_table(void **state)
{
	(void)state;
	const char *targs[] = {"-p", "24", "-n", "4,6", "-r", "2", NULL};
	cli_result r = bench(targs);
	assert_int_equal(r.exit_code, 0);
	static table t;
	parse_table(r.out, &t);
	cli_result_free(&r);
	const char *jargs[] = {"-p", "24", "-n", "4,6", "-r", "2", "--json",
			       NULL};
	r = bench(jargs);
	assert_int_equal(r.exit_code, 0);
	json_error_t je;
	json_t *a = json_loads(r.out, 0, &je);
	if (!a)
		fail_msg("--json output is not JSON: %s", je.text);
	assert_true(json_is_array(a));
	assert_int_equal(json_array_size(a), t.rows);
	for (size_t i = 0; i < t.rows; i++) {
		json_t *o = json_array_get(a, i);
		assert_string_equal(json_string_value(json_object_get(o, "test")),
				    t.cell[2 + i][5]);
		assert_string_equal(json_string_value(json_object_get(o, "model")),
				    t.cell[2 + i][0]);
		assert_string_equal(
			json_string_value(json_object_get(o, "backend")),
			t.cell[2 + i][3]);
		assert_string_equal(
			json_string_value(json_object_get(o, "precision")),
			"fast"); /* the default */
		/* the table's size and parameter count are these, rounded */
		char size[32], params[32];
		snprintf(size, sizeof size, "%.2f KiB",
			 num(o, "model_size") / 1024.0);
		snprintf(params, sizeof params, "%.2f K",
			 num(o, "model_n_params") / 1000.0);
		assert_string_equal(size, t.cell[2 + i][1]);
		assert_string_equal(params, t.cell[2 + i][2]);
		double n = num(o, "n_prompt") + num(o, "n_gen");
		assert_true(n > 0 && (num(o, "n_prompt") == 0) !=
					     (num(o, "n_gen") == 0));
		assert_int_equal((int)num(o, "repetitions"), 2);
		json_t *sns = json_object_get(o, "samples_ns");
		json_t *sts = json_object_get(o, "samples_ts");
		assert_int_equal(json_array_size(sns), 2);
		assert_int_equal(json_array_size(sts), 2);
		double mean = 0, mean_ns = 0, ts[2];
		for (size_t k = 0; k < 2; k++) {
			double ns = json_number_value(json_array_get(sns, k));
			ts[k] = json_number_value(json_array_get(sts, k));
			assert_true(ns > 0 && ts[k] > 0);
			assert_true(fabs(ts[k] - n * 1e9 / ns) <= 1e-9 * ts[k]);
			mean += ts[k] / 2, mean_ns += ns / 2;
		}
		assert_true(fabs(num(o, "avg_ts") - mean) <= 1e-9 * mean);
		assert_true(fabs(num(o, "avg_ns") - mean_ns) <= 1e-9 * mean_ns);
		double sd = fabs(ts[0] - ts[1]) / sqrt(2.0);
		assert_true(fabs(num(o, "stddev_ts") - sd) <= 1e-9 * mean + 1e-9);
	}
	json_decref(a);
	cli_result_free(&r);
}

static void expect_exit(const char *const *extra, int code, const char *text)
{
	cli_result r = bench(extra);
	if (r.exit_code != code || !strstr(r.err, text))
		fail_msg("want exit %d with '%s', got %d: %s", code, text,
			 r.exit_code, r.err);
	cli_result_free(&r);
}

static void test_bench_refuses_bad_options(void **state)
{
	(void)state;
	expect_exit((const char *[]){"-r", "0", NULL}, 2, "-r");
	expect_exit((const char *[]){"-p", "12,x", NULL}, 2, "-p");
	expect_exit((const char *[]){"-p", "", NULL}, 2, "-p");
	expect_exit((const char *[]){"-p", "0", "-n", "0", NULL}, 2,
		    "no test");
	expect_exit((const char *[]){"--batch", "4", NULL}, 2, "strata batch");
	/* stories260K was trained for 512 positions */
	expect_exit((const char *[]){"-p", "4096", "-r", "1", NULL}, 1,
		    "trained for 512");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bench_table_has_llama_bench_shape),
		cmocka_unit_test(test_bench_json_matches_table),
		cmocka_unit_test(test_bench_refuses_bad_options),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
