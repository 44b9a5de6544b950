/* test_shard.c - `strata shard` end to end: the built binary on real
 * stdin/stdout, its output contract, errors and exit codes, and the
 * statistics file (layer: cli). */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"
#include "strata/shard.h"

static char tmp[4096];

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static cli_result run(const char *const *argv, const char *in, size_t len)
{
	cli_result r;
	assert_int_equal(cli_run(argv, in, len, NULL, &r), 0);
	return r;
}

/* What the output must be: the same input through the library. */
static char *expected(const char *in, size_t len, uint32_t n, uint64_t t,
		      const uint32_t *seed_dev, const uint64_t *seed_cost,
		      int seeds)
{
	strata_shard *s;
	assert_int_equal(strata_shard_create(n, t, &s, NULL), STRATA_OK);
	for (int i = 0; i < seeds; i++)
		assert_int_equal(strata_shard_seed_load(s, seed_dev[i], seed_cost[i],
							NULL),
				 STRATA_OK);
	char *out = malloc(2 * len + 64), *o = out;
	const char *p = in, *end = in + len;
	uint64_t line = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		size_t key;
		uint64_t cost;
		uint32_t d;
		assert_int_equal(strata_shard_parse_line(p, l, ++line, &key, &cost,
							 NULL),
				 STRATA_OK);
		assert_int_equal(strata_shard_assign(s, p, key, cost, &d, NULL),
				 STRATA_OK);
		memcpy(o, p, key);
		o += key;
		o += d == STRATA_SHARD_NO_DEVICE ? sprintf(o, "\t-\n")
						 : sprintf(o, "\t%u\n", d);
		p += l + (nl ? 1 : 0);
	}
	*o = '\0';
	strata_shard_destroy(s);
	return out;
}

static void assert_error_shape(const cli_result *r, int code,
			       const char *what)
{
	assert_int_equal(r->exit_code, code);
	if (strncmp(r->err, "strata: error: ", 15) != 0 || !strstr(r->err, what) ||
	    !strstr(r->err, "\n  fix: "))
		fail_msg("stderr '%s' lacks '%s' or the error shape", r->err, what);
	/* Exactly two lines: the error and its fix. */
	int lines = 0;
	for (const char *c = r->err; *c; c++)
		lines += *c == '\n';
	assert_int_equal(lines, 2);
}

static json_t *load_json(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!j)
		fail_msg("%s: %s", path, je.text);
	return j;
}

static uint64_t ju(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v))
		fail_msg("stats key '%s' missing or not an integer", k);
	return (uint64_t)json_integer_value(v);
}

/* ------------------------------------------------------------------------ */
/* The contract                                                             */
/* ------------------------------------------------------------------------ */

static const char stream[] =
	"src/a.c\t10\n"
	"with spaces in key\t3\n"
	"tabs\tinside\tthe key\t7\n"
	"free\t0\n"
	"\t4\n" /* empty key */
	"src/b.c\t18446744073709\n"
	"src/c.c\t1\n"
	"src/d.c\t1\n";

static void test_output_contract_in_input_order(void **state)
{
	(void)state;
	const char *argv[] = {"shard", "--gpus", "3", "--spill-threshold", "5",
			      NULL};
	cli_result r = run(argv, stream, sizeof stream - 1);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.err, "");
	char *want = expected(stream, sizeof stream - 1, 3, 5, NULL, NULL, 0);
	assert_string_equal(r.out, want);
	/* Spot-check the shapes by hand too. */
	assert_non_null(strstr(r.out, "free\t-\n"));
	assert_non_null(strstr(r.out, "tabs\tinside\tthe key\t"));
	assert_int_equal(r.out[0], 's');
	free(want);
	cli_result_free(&r);
}

static void test_seed_loads_steer_placement(void **state)
{
	(void)state;
	char in[8192];
	size_t len = 0;
	for (int i = 0; i < 200; i++)
		len += (size_t)sprintf(in + len, "item-%d\t%d\n", i, 1 + i % 5);
	const char *argv[] = {"shard", "--gpus", "4", "--spill-threshold=10",
			      "--seed-load", "0:500", "--seed-load=2:30",
			      "--seed-load", "0:1", NULL};
	cli_result r = run(argv, in, len);
	assert_int_equal(r.exit_code, 0);
	uint32_t sd[] = {0, 2, 0};
	uint64_t sc[] = {500, 30, 1};
	char *want = expected(in, len, 4, 10, sd, sc, 3);
	assert_string_equal(r.out, want);
	/* Device 0 starts 501 ahead: nothing can land there. */
	assert_null(strstr(r.out, "\t0\n"));
	free(want);
	cli_result_free(&r);
}

static void test_crlf_and_missing_final_newline(void **state)
{
	(void)state;
	const char in[] = "a\t1\r\nb\t0\r\nc\t2";
	const char *argv[] = {"shard", "--gpus", "1", "--spill-threshold", "0",
			      NULL};
	cli_result r = run(argv, in, sizeof in - 1);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "a\t0\nb\t-\nc\t0\n");
	cli_result_free(&r);
}

static void test_empty_input_and_long_keys(void **state)
{
	(void)state;
	const char *argv[] = {"shard", "--gpus", "2", "--spill-threshold", "1",
			      NULL};
	cli_result r = run(argv, "", 0);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "");
	cli_result_free(&r);

	/* A 3 MiB key with bytes of every value except newline. */
	size_t klen = 3u << 20;
	char *in = malloc(klen + 16);
	for (size_t i = 0; i < klen; i++)
		in[i] = (char)(i % 251 == '\n' ? 'x' : i % 251);
	size_t len = klen + (size_t)sprintf(in + klen, "\t9\n");
	r = run(argv, in, len);
	assert_int_equal(r.exit_code, 0);
	char *want = expected(in, len, 2, 1, NULL, NULL, 0);
	assert_int_equal(r.out_len, len); /* "9" became one device digit */
	assert_memory_equal(r.out, want, r.out_len);
	free(want);
	free(in);
	cli_result_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Malformed input                                                          */
/* ------------------------------------------------------------------------ */

typedef struct bad_case {
	const char *third_line;
	const char *message;
} bad_case;

static void test_malformed_line_stops_with_its_number(void **state)
{
	(void)state;
	static const bad_case cases[] = {
		{"no tab at all", "line 3: no tab"},
		{"", "line 3: no tab between KEY and COST (the line is empty)"},
		{"k\t-4", "line 3: cost '-4' is negative"},
		{"k\tten", "line 3: cost 'ten' is not a whole number"},
		{"k\t12a", "is not a whole number"},
		{"k\t", "line 3: the cost after the last tab is empty"},
		{"k\t18446744073709551616", "is larger than 18446744073709551615"},
		{"k\t1.0", "not a whole number"},
	};
	char stats[4200];
	snprintf(stats, sizeof stats, "%s/stats.json", tmp);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char in[256];
		int len = snprintf(in, sizeof in, "a\t1\nb\t2\n%s\nc\t3\n",
				   cases[i].third_line);
		unlink(stats);
		const char *argv[] = {"shard", "--gpus", "2", "--spill-threshold",
				      "0", "--stats", stats, NULL};
		cli_result r = run(argv, in, (size_t)len);
		assert_error_shape(&r, 1, cases[i].message);
		assert_non_null(strstr(r.err, "lines 1 to 2 were already placed"));
		/* The two good lines were emitted, nothing after them. */
		char *want = expected("a\t1\nb\t2\n", 8, 2, 0, NULL, NULL, 0);
		assert_string_equal(r.out, want);
		free(want);
		struct stat st;
		assert_int_not_equal(stat(stats, &st), 0); /* no stats file */
		cli_result_free(&r);
	}
}

static void test_bad_first_line_and_old_stats_kept(void **state)
{
	(void)state;
	char stats[4200];
	snprintf(stats, sizeof stats, "%s/old.json", tmp);
	FILE *f = fopen(stats, "w");
	fputs("previous\n", f);
	fclose(f);
	const char *argv[] = {"shard", "--gpus", "2", "--spill-threshold", "0",
			      "--stats", stats, NULL};
	cli_result r = run(argv, "x\t1\t-\n", 6);
	assert_error_shape(&r, 1, "line 1: cost '-' is negative");
	assert_non_null(strstr(r.err, "nothing was written"));
	assert_string_equal(r.out, "");
	char buf[32] = {0};
	f = fopen(stats, "r");
	assert_non_null(fgets(buf, sizeof buf, f));
	fclose(f);
	assert_string_equal(buf, "previous\n");
	cli_result_free(&r);
}

static void test_load_overflow_names_the_line(void **state)
{
	(void)state;
	const char *argv[] = {"shard", "--gpus", "1", "--spill-threshold", "0",
			      NULL};
	const char in[] = "a\t18446744073709551615\nb\t0\nc\t1\n";
	cli_result r = run(argv, in, sizeof in - 1);
	assert_error_shape(&r, 1, "line 3: assign: device 0 load overflowed");
	assert_string_equal(r.out, "a\t0\nb\t-\n");
	cli_result_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Batches                                                                  */
/* ------------------------------------------------------------------------ */

/* The command places lines in batches (up to 32 lines whose keys share a
 * 4 KiB buffer; a longer key alone). Streams that cross every kind of
 * batch boundary must give exactly one library call per line's output,
 * and errors must still name their line with everything before written. */

/* Appends line i of a stream whose key lengths and costs cross batch
 * boundaries in every way: short keys, 1500-byte keys (the key buffer
 * fills before 32 lines), 5000-byte keys (placed alone), zero costs. */
static size_t batch_line(char *o, int i)
{
	size_t len = 0;
	int klen = i % 37 == 5 ? 5000 : i % 13 == 0 ? 1500 : 0;
	for (int k = 0; k < klen; k++)
		o[len++] = (char)('a' + (i + k) % 26);
	len += (size_t)sprintf(o + len, "k%d\t%d\n", i, i % 11 == 0 ? 0 : 1 + i % 50);
	return len;
}

static void test_batches_keep_order_and_line_numbers(void **state)
{
	(void)state;
	char *in = malloc(1000 * 5100);
	size_t len = 0, len69 = 0;
	for (int i = 1; i <= 1000; i++) {
		len += batch_line(in + len, i);
		if (i == 69)
			len69 = len;
	}
	const char *argv[] = {"shard", "--gpus", "5", "--spill-threshold", "20",
			      NULL};
	cli_result r = run(argv, in, len);
	assert_int_equal(r.exit_code, 0);
	char *want = expected(in, len, 5, 20, NULL, NULL, 0);
	assert_int_equal(r.out_len, strlen(want));
	assert_memory_equal(r.out, want, r.out_len);
	free(want);
	cli_result_free(&r);

	/* Line 70 malformed: lines 1 to 69 (three batches' worth, with long
	 * keys among them) are placed and written, nothing after. */
	memcpy(in + len69, "no tab here\n", 12);
	r = run(argv, in, len);
	assert_error_shape(&r, 1, "line 70: no tab");
	assert_non_null(strstr(r.err, "lines 1 to 69 were already placed"));
	want = expected(in, len69, 5, 20, NULL, NULL, 0);
	assert_string_equal(r.out, want);
	free(want);
	cli_result_free(&r);
	free(in);

	/* A load overflow in the middle of a batch names its line: line 1
	 * leaves room for 43 more units, lines 2 to 44 fill it. */
	char small[1024];
	len = (size_t)sprintf(small, "a\t%" PRIu64 "\n", UINT64_MAX - 43);
	for (int i = 2; i <= 50; i++)
		len += (size_t)sprintf(small + len, "k%d\t1\n", i);
	const char *one[] = {"shard", "--gpus", "1", "--spill-threshold", "0",
			     NULL};
	r = run(one, small, len);
	assert_error_shape(&r, 1, "line 45: assign: device 0 load overflowed");
	assert_non_null(strstr(r.err, "lines 1 to 44 were already placed"));
	char *end44 = strstr(small, "k45\t");
	want = expected(small, (size_t)(end44 - small), 1, 0, NULL, NULL, 0);
	assert_string_equal(r.out, want);
	free(want);
	cli_result_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Usage errors                                                             */
/* ------------------------------------------------------------------------ */

static void usage_error(const char *const *argv, const char *what)
{
	cli_result r = run(argv, "a\t1\n", 4);
	assert_error_shape(&r, 2, what);
	assert_string_equal(r.out, "");
	cli_result_free(&r);
}

static void test_usage_errors_exit_2(void **state)
{
	(void)state;
	usage_error((const char *[]){"shard", "--spill-threshold", "1", NULL},
		    "--gpus N is required");
	usage_error((const char *[]){"shard", "--gpus", "2", NULL},
		    "--spill-threshold T is required");
	usage_error((const char *[]){"shard", "--gpus", "0", "--spill-threshold",
				     "1", NULL},
		    "no devices to shard onto");
	usage_error((const char *[]){"shard", "--gpus", "two",
				     "--spill-threshold", "1", NULL},
		    "--gpus: 'two' is not a non-negative integer");
	usage_error((const char *[]){"shard", "--gpus", "-1",
				     "--spill-threshold", "1", NULL},
		    "--gpus");
	usage_error((const char *[]){"shard", "--gpus", "2",
				     "--spill-threshold", "99999999999999999999",
				     NULL},
		    "does not fit in 64 bits");
	usage_error((const char *[]){"shard", "--gpus", "16777217",
				     "--spill-threshold", "1", NULL},
		    "--gpus 16777217 is more than the 16777216 devices");
	usage_error((const char *[]){"shard", "--gpus", "4294967296",
				     "--spill-threshold", "1", NULL},
		    "is more than the 16777216 devices");
	usage_error((const char *[]){"shard", "--gpus", "2", "--spill-threshold",
				     "1", "--frobnicate", NULL},
		    "unknown option '--frobnicate'");
	usage_error((const char *[]){"shard", "--gpus", "2", "--spill-treshold",
				     "1", NULL},
		    "unknown option '--spill-treshold' (did you mean "
		    "'--spill-threshold'?)");
	usage_error((const char *[]){"shard", "--gpu=2", "--spill-threshold",
				     "1", NULL},
		    "unknown option '--gpu' (did you mean '--gpus'?)");
	usage_error((const char *[]){"shard", "--gpus", "2", "--spill-threshold",
				     "1", "stray", NULL},
		    "unexpected argument 'stray'");
	usage_error((const char *[]){"shard", "--gpus", NULL},
		    "--gpus needs a value");
	usage_error((const char *[]){"shard", "--gpus", "2", "--gpus", "3",
				     "--spill-threshold", "1", NULL},
		    "--gpus given twice");
	usage_error((const char *[]){"shard", "--gpus", "2", "--spill-threshold",
				     "1", "--seed-load", "2:5", NULL},
		    "device 2 is out of range for --gpus 2");
	usage_error((const char *[]){"shard", "--gpus", "2", "--spill-threshold",
				     "1", "--seed-load", "5", NULL},
		    "is not DEV:COST");
	usage_error((const char *[]){"shard", "--gpus", "2", "--spill-threshold",
				     "1", "--seed-load", "1:x", NULL},
		    "--seed-load cost: 'x'");
	usage_error((const char *[]){"shard", "--gpus", "2", "--spill-threshold",
				     "1", "--seed-load", "1:18446744073709551615",
				     "--seed-load", "1:1", NULL},
		    "load overflowed");
}

static void test_help_prints_usage(void **state)
{
	(void)state;
	cli_result r = run((const char *[]){"shard", "--help", NULL}, "", 0);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "usage: strata shard --gpus N"));
	assert_non_null(strstr(r.out, "--stats FILE"));
	cli_result_free(&r);
	r = run((const char *[]){"--help", NULL}, "", 0);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "shard"));
	cli_result_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */
/* ------------------------------------------------------------------------ */

static void test_stats_json_matches_library(void **state)
{
	(void)state;
	char stats[4200], in[65536];
	snprintf(stats, sizeof stats, "%s/s.json", tmp);
	size_t len = 0;
	for (int i = 0; i < 1000; i++)
		len += (size_t)sprintf(in + len, "job/%d\t%d\n", i,
				       i % 10 == 0 ? 0 : 1 + (i * 7919) % 100);
	const char *argv[] = {"shard", "--gpus", "5", "--spill-threshold", "40",
			      "--seed-load", "3:200", "--stats", stats, NULL};
	cli_result r = run(argv, in, len);
	assert_int_equal(r.exit_code, 0);

	/* The same stream through the library. */
	strata_shard *s;
	assert_int_equal(strata_shard_create(5, 40, &s, NULL), STRATA_OK);
	assert_int_equal(strata_shard_seed_load(s, 3, 200, NULL), STRATA_OK);
	for (int i = 0; i < 1000; i++) {
		char key[32];
		uint32_t d;
		int kl = sprintf(key, "job/%d", i);
		assert_int_equal(strata_shard_assign(s, key, (size_t)kl,
						     i % 10 == 0 ? 0 : 1 + (i * 7919) % 100,
						     &d, NULL),
				 STRATA_OK);
	}
	strata_shard_stats st;
	strata_shard_get_stats(s, &st);

	json_t *j = load_json(stats);
	assert_int_equal(ju(j, "schema_version"), 1);
	assert_int_equal(ju(j, "devices"), 5);
	assert_int_equal(ju(j, "spill_threshold"), 40);
	assert_int_equal(ju(j, "lines"), 1000);
	assert_int_equal(ju(j, "items"), 900);
	assert_int_equal(ju(j, "zero_cost_items"), 100);
	assert_int_equal(ju(j, "home_hits"), st.home_hits);
	assert_int_equal(ju(j, "spills"), st.spills);
	assert_int_equal(ju(j, "home_hits") + ju(j, "spills"), 900);
	assert_true(st.spills > 0);
	double rate = json_real_value(json_object_get(j, "home_hit_rate"));
	assert_true(rate > 0.0 && rate < 1.0);
	assert_true(rate == (double)st.home_hits / 900.0);
	assert_int_equal(ju(j, "largest_cost"), st.largest_cost);
	assert_int_equal(ju(j, "min_load"), st.min_load);
	assert_int_equal(ju(j, "max_load"), st.max_load);
	assert_int_equal(ju(j, "final_gap"), st.max_load - st.min_load);
	assert_int_equal(ju(j, "largest_gap"), st.largest_gap);
	json_t *per = json_object_get(j, "per_device");
	assert_int_equal(json_array_size(per), 5);
	uint64_t items = 0, in_sum = 0, away_sum = 0;
	for (uint32_t d = 0; d < 5; d++) {
		json_t *o = json_array_get(per, d);
		strata_shard_device_stats ds;
		assert_int_equal(strata_shard_get_device_stats(s, d, &ds, NULL),
				 STRATA_OK);
		assert_int_equal(ju(o, "device"), d);
		assert_int_equal(ju(o, "load"), ds.load);
		assert_int_equal(ju(o, "seeded_load"), d == 3 ? 200 : 0);
		assert_int_equal(ju(o, "items"), ds.items);
		assert_int_equal(ju(o, "spilled_in"), ds.spilled_in);
		assert_int_equal(ju(o, "spilled_away"), ds.spilled_away);
		items += ds.items;
		in_sum += ds.spilled_in;
		away_sum += ds.spilled_away;
	}
	assert_int_equal(items, 900);
	assert_int_equal(in_sum, st.spills);
	assert_int_equal(away_sum, st.spills);
	json_decref(j);
	strata_shard_destroy(s);
	cli_result_free(&r);
}

static void test_stats_empty_stream_and_exact_u64(void **state)
{
	(void)state;
	char stats[4200];
	snprintf(stats, sizeof stats, "%s/e.json", tmp);
	const char *argv[] = {"shard", "--gpus", "2", "--spill-threshold", "0",
			      "--seed-load", "1:18446744073709551615",
			      "--stats", stats, NULL};
	cli_result r = run(argv, "", 0);
	assert_int_equal(r.exit_code, 0);
	cli_result_free(&r);
	size_t n = 0;
	FILE *f = fopen(stats, "r");
	char text[4096];
	n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	/* jansson's integers are signed: check the exact text instead. */
	assert_non_null(strstr(text, "\"max_load\": 18446744073709551615"));
	assert_non_null(strstr(text, "\"home_hit_rate\": null"));
	assert_non_null(strstr(text, "\"lines\": 0"));
	assert_non_null(strstr(text, "\"largest_gap\": 18446744073709551615"));
}

static void test_stats_write_failure_is_an_error(void **state)
{
	(void)state;
	/* a missing folder is refused before the stream runs */
	const char *argv[] = {"shard", "--gpus", "2", "--spill-threshold", "0",
			      "--stats", "no/such/folder/s.json", NULL};
	cli_result r;
	assert_int_equal(cli_run(argv, "a\t1\n", 4, tmp, &r), 0);
	assert_error_shape(&r, 1, "--stats: output 'no/such/folder/s.json': "
				  "there is no folder");
	assert_int_equal(r.out_len, 0);
	cli_result_free(&r);
	/* a FIFO nobody reads fails at the write, after the stream */
	char fifo[4200];
	snprintf(fifo, sizeof fifo, "%s/stats.fifo", tmp);
	unlink(fifo);
	assert_int_equal(mkfifo(fifo, 0644), 0);
	argv[6] = fifo;
	assert_int_equal(cli_run(argv, "a\t1\n", 4, tmp, &r), 0);
	assert_error_shape(&r, 1, "--stats: cannot open output");
	assert_int_equal(strncmp(r.out, "a\t", 2), 0); /* the stream was done */
	cli_result_free(&r);
	unlink(fifo);
}

/* stdout that cannot take the output (a full disk): exit 1, no stats. */
static void test_stdout_write_failure_is_an_error(void **state)
{
	(void)state;
	if (access("/dev/full", W_OK) != 0)
		skip();
	char cmd[16384], stats[4200], err[4200];
	snprintf(stats, sizeof stats, "%s/full.json", tmp);
	snprintf(err, sizeof err, "%s/full.err", tmp);
	snprintf(cmd, sizeof cmd,
		 "printf 'a\t1\nb\t2\n' | '%s' shard --gpus 2 --spill-threshold 1 "
		 "--stats '%s' >/dev/full 2>'%s'",
		 STRATA_CLI_PATH, stats, err);
	int rc = system(cmd);
	assert_true(WIFEXITED(rc));
	assert_int_equal(WEXITSTATUS(rc), 1);
	struct stat st;
	assert_int_not_equal(stat(stats, &st), 0);
	char text[1024] = {0};
	FILE *f = fopen(err, "r");
	assert_non_null(f);
	assert_true(fread(text, 1, sizeof text - 1, f) > 0);
	fclose(f);
	assert_non_null(strstr(text, "strata: error: writing stdout failed"));
	assert_non_null(strstr(text, "\n  fix: "));
}

static int setup(void **state)
{
	(void)state;
	cli_tmpdir(tmp, sizeof tmp, "shard");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_output_contract_in_input_order),
		cmocka_unit_test(test_seed_loads_steer_placement),
		cmocka_unit_test(test_crlf_and_missing_final_newline),
		cmocka_unit_test(test_empty_input_and_long_keys),
		cmocka_unit_test(test_malformed_line_stops_with_its_number),
		cmocka_unit_test(test_bad_first_line_and_old_stats_kept),
		cmocka_unit_test(test_load_overflow_names_the_line),
		cmocka_unit_test(test_batches_keep_order_and_line_numbers),
		cmocka_unit_test(test_usage_errors_exit_2),
		cmocka_unit_test(test_help_prints_usage),
		cmocka_unit_test(test_stats_json_matches_library),
		cmocka_unit_test(test_stats_empty_stream_and_exact_u64),
		cmocka_unit_test(test_stats_write_failure_is_an_error),
		cmocka_unit_test(test_stdout_write_failure_is_an_error),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
