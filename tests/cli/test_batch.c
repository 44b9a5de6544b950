/* test_batch.c - `strata batch` end to end on the shipped stories260K
 * with CPU replicas: results in input order, the same key on the same
 * replica, greedy text identical to `strata run` and across replica counts,
 * the prefix cache hit and changing nothing, spills under a zero threshold,
 * the telemetry's devices[] and router, and bad input refused whole
 * (layer: cli). */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"

static const char *const prompts[] = {
	"Once upon a time",
	"Once upon a time, there was a little dog",
	"Lily and Tom went to the park",
	"The sun was hot and the bird",
	"Once upon a time, there was a little girl",
	"One day, a big bear",
	"Lily and Tom went to the shop to buy",
	"The cat sat on the mat",
};
#define PROMPTS (sizeof prompts / sizeof *prompts)

/* Appends one request line to buf. */
static void add_line(char *buf, size_t cap, const char *id, const char *p,
		     int max_tokens, double temp, int seed, const char *key)
{
	json_t *o = json_pack("{s:s, s:s, s:i, s:f, s:i}", "id", id, "prompt",
			      p, "max_tokens", max_tokens, "temperature", temp,
			      "seed", seed);
	assert_non_null(o);
	if (key)
		json_object_set_new(o, "key", json_string(key));
	char *s = json_dumps(o, JSON_COMPACT);
	assert_true(strlen(buf) + strlen(s) + 2 < cap);
	strcat(buf, s);
	strcat(buf, "\n");
	free(s);
	json_decref(o);
}

/* Runs strata batch with extra args on input; expects exit 0 and returns
 * the result lines as a JSON array. */
static json_t *batch(const char *in, const char *const *extra)
{
	const char *argv[32] = {"batch", MODEL};
	size_t n = 2;
	for (size_t i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	cli_result r;
	assert_int_equal(cli_run(argv, in, strlen(in), NULL, &r), 0);
	if (r.exit_code != 0)
		fail_msg("exit %d: %s", r.exit_code, r.err);
	assert_non_null(strstr(r.err, "requests/s"));
	json_t *all = json_array();
	for (char *line = r.out; *line;) {
		char *nl = strchr(line, '\n');
		assert_non_null(nl); /* every result ends with a newline */
		json_error_t je;
		json_t *o = json_loadb(line, (size_t)(nl - line), 0, &je);
		if (!o)
			fail_msg("bad output line: %s", je.text);
		json_array_append_new(all, o);
		line = nl + 1;
	}
	cli_result_free(&r);
	return all;
}

/* Whether result i of two batch runs (batch()'s arrays) has the same
 * tokens. */
static bool same_tokens(json_t *a, json_t *b, size_t i)
{
	return json_equal(json_object_get(json_array_get(a, i), "tokens"),
			  json_object_get(json_array_get(b, i), "tokens"));
}

static const char *field_s(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	assert_non_null(v);
	return json_string_value(v);
}

static long long field_i(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v))
		fail_msg("field %s missing or not an integer", k);
	return json_integer_value(v);
}

/* The greedy requests: every prompt, 24 new tokens, keyed by prompt. */
static void greedy_input(char *buf, size_t cap)
{
	buf[0] = '\0';
	for (size_t i = 0; i < PROMPTS; i++) {
		char id[16];
		snprintf(id, sizeof id, "r%zu", i);
		add_line(buf, cap, id, prompts[i], 24, 0.0, 0, NULL);
	}
}

/* ------------------------------------------------------------------------ */

/* Results come in input order with every promised field. */
static void test_batch_results_in_input_order(void **state)
{
	(void)state;
	char in[8192];
	greedy_input(in, sizeof in);
	const char *extra[] = {"--device", "cpu", "--gpus", "3", NULL};
	json_t *all = batch(in, extra);
	assert_int_equal(json_array_size(all), PROMPTS);
	bool used[3] = {false, false, false};
	for (size_t i = 0; i < PROMPTS; i++) {
		json_t *o = json_array_get(all, i);
		char id[16];
		snprintf(id, sizeof id, "r%zu", i);
		assert_string_equal(field_s(o, "id"), id);
		assert_non_null(field_s(o, "text"));
		assert_true(json_array_size(json_object_get(o, "tokens")) <= 24);
		long long dev = field_i(o, "device");
		assert_true(dev >= 0 && dev < 3);
		used[dev] = true;
		assert_true(field_i(o, "home_device") < 3);
		assert_true(field_i(o, "prompt_tokens") > 1);
		json_t *t = json_object_get(o, "timings");
		assert_true(json_is_number(json_object_get(t, "prompt_s")));
		assert_true(json_is_number(json_object_get(t, "generate_s")));
	}
	/* 8 distinct keys over 3 replicas: BLAKE3 homes use more than one */
	assert_true((int)used[0] + used[1] + used[2] >= 2);
	json_decref(all);
}

/* Greedy text equals `strata run`'s for every request, byte for byte. */
static void test_batch_greedy_equals_run(void **state)
{
	(void)state;
	char in[8192];
	greedy_input(in, sizeof in);
	const char *extra[] = {"--device", "cpu", "--gpus", "2", NULL};
	json_t *all = batch(in, extra);
	for (size_t i = 0; i < PROMPTS; i++) {
		const char *argv[] = {"run",	       MODEL, "-p", prompts[i],
				      "-n",	       "24",  "--temperature",
				      "0",	       NULL};
		cli_result r;
		assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
		assert_int_equal(r.exit_code, 0);
		const char *text = field_s(json_array_get(all, i), "text");
		/* run ends its text with a newline; batch's text is the text */
		assert_true(r.out_len > 0 && r.out[r.out_len - 1] == '\n');
		r.out[r.out_len - 1] = '\0';
		if (strcmp(text, r.out))
			fail_msg("request %zu: batch '%s' vs run '%s'", i, text,
				 r.out);
		cli_result_free(&r);
	}
	json_decref(all);
}

/* Issue 24: a result's text continues its prompt's text (the first
 * token's space kept), and the summary counts one request as one. */
static void test_batch_text_continues_the_prompt(void **state)
{
	(void)state;
	char in[512] = "";
	add_line(in, sizeof in, "a", "Once upon a", 6, 0, 0, NULL);
	const char *argv[] = {"batch", MODEL, "--device", "cpu", NULL};
	cli_result r;
	assert_int_equal(cli_run(argv, in, strlen(in), NULL, &r), 0);
	assert_int_equal(r.exit_code, 0);
	json_t *o = json_loads(r.out, 0, NULL);
	assert_non_null(o);
	assert_string_equal(field_s(o, "text"), " time, there was a little");
	assert_non_null(strstr(r.err, "batch of 1 request on"));
	json_decref(o);
	cli_result_free(&r);
}

/* Tokens are the same on 1, 2 and 3 replicas, greedy and seeded. */
static void test_batch_same_output_any_replica_count(void **state)
{
	(void)state;
	char in[8192] = "";
	for (size_t i = 0; i < PROMPTS; i++) {
		char id[16];
		snprintf(id, sizeof id, "s%zu", i);
		add_line(in, sizeof in, id, prompts[i], 20, i % 2 ? 0.8 : 0.0,
			 (int)i + 7, NULL);
	}
	const char *counts[] = {"1", "2", "3"};
	json_t *ref = NULL;
	for (size_t c = 0; c < 3; c++) {
		const char *extra[] = {"--device", "cpu", "--gpus", counts[c],
				       NULL};
		json_t *all = batch(in, extra);
		if (!ref) {
			ref = all;
			continue;
		}
		for (size_t i = 0; i < PROMPTS; i++)
			assert_true(same_tokens(ref, all, i));
		json_decref(all);
	}
	json_decref(ref);
}

/* Replicas stream weights as `strata run` does: every residency mode
 * gives the same tokens on 2 replicas. */
static void test_batch_every_residency_mode(void **state)
{
	(void)state;
	char in[8192];
	greedy_input(in, sizeof in);
	static const char *const modes[][12] = {
		{"--device", "cpu", "--gpus", "2", "--residency", "resident",
		 NULL},
		{"--device", "cpu", "--gpus", "2", "--residency", "host:1",
		 "--device-memory", "64MiB", "--host-memory", "64MiB", NULL},
		{"--device", "cpu", "--gpus", "2", "--residency", "disk",
		 "--device-memory", "64MiB", "--host-memory", "0", NULL},
	};
	json_t *ref = batch(in, modes[0]);
	for (size_t m = 1; m < 3; m++) {
		json_t *all = batch(in, modes[m]);
		for (size_t i = 0; i < PROMPTS; i++)
			assert_true(same_tokens(ref, all, i));
		json_decref(all);
	}
	json_decref(ref);
}

/* --batch B: replicas decode several requests per forward step, streamed
 * or not, with --batch 1's tokens and text (greedy and seeded requests of
 * different lengths); the telemetry says the batch and how full the steps
 * were. */
static void test_batch_several_sequences_same_output(void **state)
{
	(void)state;
	char in[8192] = "", path[512];
	for (size_t i = 0; i < PROMPTS; i++) {
		char id[16];
		snprintf(id, sizeof id, "b%zu", i);
		add_line(in, sizeof in, id, prompts[i], 8 + 5 * (int)i,
			 i % 2 ? 0.8 : 0.0, (int)i + 3, NULL);
	}
	cli_tmpdir(path, sizeof path, "batch_b");
	strcat(path, "/t.json");
	const char *const runs[][16] = {
		{"--device", "cpu", "--batch", "1", NULL},
		{"--device", "cpu", "--batch", "4", NULL},
		{"--device", "cpu", "--batch", "3", "--gpus", "2",
		 "--residency", "host:1", "--device-memory", "64MiB",
		 "--host-memory", "64MiB", NULL},
		{"--device", "cpu", "--batch", "8", "--residency", "disk",
		 "--device-memory", "64MiB", "--host-memory", "0",
		 "--telemetry", path, NULL},
	};
	json_t *ref = batch(in, runs[0]);
	for (size_t r = 1; r < sizeof runs / sizeof *runs; r++) {
		json_t *all = batch(in, runs[r]);
		for (size_t i = 0; i < PROMPTS; i++) {
			json_t *a = json_array_get(ref, i);
			json_t *b = json_array_get(all, i);
			assert_true(json_equal(json_object_get(a, "tokens"),
					       json_object_get(b, "tokens")));
			assert_string_equal(field_s(a, "text"),
					    field_s(b, "text"));
		}
		json_decref(all);
	}
	json_decref(ref);
	json_error_t je;
	json_t *t = json_load_file(path, 0, &je);
	assert_non_null(t);
	json_t *router = json_object_get(t, "router");
	assert_int_equal(field_i(router, "batch"), 8);
	assert_true(field_i(router, "decode_steps") > 0);
	double per = json_real_value(json_object_get(router,
						     "sequences_per_step"));
	assert_true(per > 1.0 && per <= 8.0);
	json_decref(t);
}

/* With no spilling, a key always lands on its home, the same replica. */
static void test_batch_same_key_same_device(void **state)
{
	(void)state;
	char in[8192] = "";
	const char *keys[] = {"alpha", "beta", "gamma"};
	for (size_t i = 0; i < 12; i++) {
		char id[16];
		snprintf(id, sizeof id, "k%zu", i);
		add_line(in, sizeof in, id, prompts[i % PROMPTS], 4, 0.0, 0,
			 keys[i % 3]);
	}
	const char *extra[] = {"--device", "cpu", "--gpus", "3",
			       "--spill-threshold", "1000000", NULL};
	json_t *all = batch(in, extra);
	long long dev_of[3] = {-1, -1, -1};
	for (size_t i = 0; i < 12; i++) {
		json_t *o = json_array_get(all, i);
		long long d = field_i(o, "device");
		assert_int_equal(d, field_i(o, "home_device"));
		if (dev_of[i % 3] < 0)
			dev_of[i % 3] = d;
		assert_int_equal(d, dev_of[i % 3]);
	}
	json_decref(all);
}

/* Round-robin routing ignores keys: request i on replica i mod n, with
 * the same tokens as affinity routing. */
static void test_batch_round_robin(void **state)
{
	(void)state;
	char in[8192];
	greedy_input(in, sizeof in);
	const char *rr[] = {"--device", "cpu", "--gpus", "3", "--route",
			    "round-robin", NULL};
	const char *aff[] = {"--device", "cpu", "--gpus", "3", NULL};
	json_t *a = batch(in, rr), *b = batch(in, aff);
	for (size_t i = 0; i < PROMPTS; i++) {
		json_t *o = json_array_get(a, i);
		assert_int_equal(field_i(o, "device"), (long long)(i % 3));
		assert_true(same_tokens(a, b, i));
	}
	json_decref(a);
	json_decref(b);
}

/* A zero threshold spills work off a hot home, and spilled requests still
 * give the same tokens. */
static void test_batch_spills_keep_outputs(void **state)
{
	(void)state;
	char in[8192] = "", path[512];
	for (size_t i = 0; i < 12; i++) {
		char id[16];
		snprintf(id, sizeof id, "h%zu", i);
		add_line(in, sizeof in, id, prompts[i % PROMPTS], 16, 0.0, 0,
			 "one-key");
	}
	cli_tmpdir(path, sizeof path, "batch_spill");
	strcat(path, "/t.json");
	const char *a[] = {"--device", "cpu", "--gpus", "3",
			   "--spill-threshold", "0", "--telemetry", path, NULL};
	const char *b[] = {"--device", "cpu", "--gpus", "1", NULL};
	json_t *spilled = batch(in, a), *single = batch(in, b);
	size_t away = 0;
	for (size_t i = 0; i < 12; i++) {
		json_t *o = json_array_get(spilled, i);
		away += field_i(o, "device") != field_i(o, "home_device");
		assert_true(same_tokens(spilled, single, i));
	}
	assert_true(away > 0);
	json_error_t je;
	json_t *t = json_load_file(path, 0, &je);
	assert_non_null(t);
	json_t *router = json_object_get(t, "router");
	assert_int_equal(field_i(router, "spills"), (long long)away);
	assert_int_equal(field_i(router, "requests"), 12);
	json_t *devs = json_object_get(t, "devices");
	assert_int_equal(json_array_size(devs), 3);
	for (size_t i = 0; i < 3; i++) {
		char want[16];
		snprintf(want, sizeof want, "cpu:%zu", i);
		assert_string_equal(
			field_s(json_array_get(devs, i), "name"), want);
	}
	json_t *per = json_object_get(router, "per_device");
	long long total = 0;
	for (size_t i = 0; i < 3; i++) {
		json_t *d = json_array_get(per, i);
		total += field_i(d, "requests");
		assert_int_equal(field_i(d, "load_now"), 0); /* all released */
	}
	assert_int_equal(total, 12);
	json_decref(t);
	json_decref(spilled);
	json_decref(single);
}

/* Requests sharing a prompt prefix on one replica reuse its KV: hits are
 * counted, prefix_tokens reported, and tokens equal the cache-off run. */
static void test_batch_prefix_cache_hits_change_nothing(void **state)
{
	(void)state;
	char in[8192] = "", path[512];
	const char *base = "Once upon a time, there was a little girl named";
	const char *tails[] = {" Lily", " Sue", " Amy", " Mia", " Lily. She"};
	for (size_t i = 0; i < 10; i++) {
		char id[16], p[256];
		snprintf(id, sizeof id, "p%zu", i);
		snprintf(p, sizeof p, "%s%s", base, tails[i % 5]);
		add_line(in, sizeof in, id, p, 12, 0.0, 0,
			 i % 2 ? "story-a" : "story-b");
	}
	cli_tmpdir(path, sizeof path, "batch_prefix");
	strcat(path, "/t.json");
	const char *on[] = {"--device", "cpu", "--gpus", "2",
			    "--spill-threshold", "1000000", "--telemetry", path,
			    NULL};
	const char *off[] = {"--device", "cpu", "--gpus", "2",
			     "--prefix-cache", "0", NULL};
	json_t *hit = batch(in, on), *miss = batch(in, off);
	long long reused = 0;
	for (size_t i = 0; i < 10; i++) {
		json_t *h = json_array_get(hit, i), *m = json_array_get(miss, i);
		reused += field_i(h, "prefix_tokens");
		assert_int_equal(field_i(m, "prefix_tokens"), 0);
		assert_true(json_equal(json_object_get(h, "tokens"),
				       json_object_get(m, "tokens")));
		assert_string_equal(field_s(h, "text"), field_s(m, "text"));
	}
	assert_true(reused > 0);
	json_error_t je;
	json_t *t = json_load_file(path, 0, &je);
	assert_non_null(t);
	json_t *router = json_object_get(t, "router");
	/* two keys, each on one replica: all but its first request hit */
	assert_int_equal(field_i(router, "prefix_lookups"), 10);
	assert_true(field_i(router, "prefix_hits") >= 8);
	assert_true(json_number_value(json_object_get(router, "home_hit_rate")) ==
		    1.0);
	json_decref(t);
	json_decref(hit);
	json_decref(miss);
}

/* Runs `strata plan MODEL --json` with extra args; the document. */
static json_t *plan_json(const char *const *extra)
{
	const char *argv[32] = {"plan", MODEL, "--json"};
	size_t n = 3;
	for (size_t i = 0; extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	if (r.exit_code != 0)
		fail_msg("plan exit %d: %s", r.exit_code, r.err);
	json_error_t je;
	json_t *doc = json_loads(r.out, 0, &je);
	if (!doc)
		fail_msg("plan output is not JSON: %s", je.text);
	cli_result_free(&r);
	return doc;
}

/* Telemetry's per-replica prefix cache objects after a batch of 24
 * distinct prompts on 2 replicas with extra options. */
static json_t *cache_figures(const char *const *extra, const char *name)
{
	char in[16384] = "", path[512];
	static const char *const who[] = {"girl", "dog", "bird", "cat",
					  "bear", "fox"};
	for (int i = 0; i < 24; i++) {
		char id[16], p[256];
		snprintf(id, sizeof id, "c%d", i);
		snprintf(p, sizeof p, "%d. Once upon a time a little %s "
			 "found %d red apples in the park", i, who[i % 6], i);
		add_line(in, sizeof in, id, p, 4, 0.0, 0, NULL);
	}
	cli_tmpdir(path, sizeof path, name);
	strcat(path, "/t.json");
	const char *argv[24];
	size_t n = 0;
	for (; extra[n]; n++)
		argv[n] = extra[n];
	argv[n++] = "--telemetry";
	argv[n++] = path;
	argv[n] = NULL;
	json_decref(batch(in, argv));
	json_error_t je;
	json_t *t = json_load_file(path, 0, &je);
	assert_non_null(t);
	json_t *per = json_incref(json_object_get(json_object_get(t, "router"),
						  "per_device"));
	json_decref(t);
	assert_int_equal(json_array_size(per), 2);
	return per;
}

/* By default each replica's prefix cache is bounded by what its plan
 * leaves spare (host budget, split between replicas, less the plan's host
 * total; on cpu plus the RAM arena's spare): the bound `strata plan
 * --gpus` shows, never exceeded; --prefix-cache SIZE overrides it. */
static void test_batch_prefix_cache_bounded_by_plan(void **state)
{
	(void)state;
	const char *shape[] = {"--device", "cpu", "--residency", "resident",
			       "--context", "64", "--prefill-chunk", "32",
			       "--device-memory", "1GiB", "--host-memory",
			       "0", NULL};
	json_t *alone = plan_json(shape);
	uint64_t total = (uint64_t)field_i(json_object_get(alone, "selected"),
					   "device_bytes");
	json_decref(alone);
	/* each arena 100 KiB over the plan; a 64 KiB host pool, 32 each */
	char dev[32];
	snprintf(dev, sizeof dev, "%llu",
		 (unsigned long long)(total + 100 * 1024));
	const char *opts[] = {"--device", "cpu", "--gpus", "2",
			      "--residency", "resident", "--context", "64",
			      "--prefill-chunk", "32", "--device-memory", dev,
			      "--host-memory", "64KiB", NULL};
	const long long bound = 132 * 1024;
	json_t *plan = plan_json(opts);
	json_t *per = cache_figures(opts, "batch_cache_plan");
	long long evictions = 0;
	for (size_t i = 0; i < 2; i++) {
		json_t *e = json_array_get(json_object_get(plan, "devices"), i);
		assert_int_equal(field_i(e, "prefix_cache_budget_bytes"),
				 bound);
		json_t *c = json_object_get(json_array_get(per, i),
					    "prefix_cache");
		assert_string_equal(field_s(c, "budget_source"), "plan");
		assert_int_equal(field_i(c, "budget_bytes"), bound);
		assert_true(field_i(c, "saved") > 0);
		assert_true(field_i(c, "peak_bytes") <= bound);
		assert_true(field_i(c, "bytes") <= field_i(c, "peak_bytes"));
		assert_true(field_i(c, "pool_bytes") > 0);
		assert_true(field_i(c, "pool_bytes") <= bound);
		evictions += field_i(c, "evictions");
	}
	assert_true(evictions > 0); /* the bound was what held it */
	json_decref(per);
	json_decref(plan);

	const char *small[] = {"--device", "cpu", "--gpus", "2",
			       "--prefix-cache", "40KiB", NULL};
	per = cache_figures(small, "batch_cache_option");
	for (size_t i = 0; i < 2; i++) {
		json_t *c = json_object_get(json_array_get(per, i),
					    "prefix_cache");
		assert_string_equal(field_s(c, "budget_source"), "option");
		assert_int_equal(field_i(c, "budget_bytes"), 40 * 1024);
		assert_true(field_i(c, "peak_bytes") <= 40 * 1024);
		assert_true(field_i(c, "pool_bytes") <= 40 * 1024);
		assert_true(field_i(c, "evictions") > 0);
	}
	json_decref(per);
}

/* The router's load figures: load_total is the cost charged for the
 * requests run on a replica, prompt + max tokens each, whole even when
 * the prefix cache supplies most of the prompt; positions_computed is the
 * work done, which prefix hits make smaller; max/mean of each. */
static void test_batch_load_figures_say_what_they_mean(void **state)
{
	(void)state;
	char in[8192] = "", path[512];
	const char *base = "Once upon a time, there was a little girl named";
	const char *tails[] = {" Lily", " Sue", " Amy", " Mia"};
	for (size_t i = 0; i < 12; i++) {
		char id[16], p[256];
		snprintf(id, sizeof id, "l%zu", i);
		snprintf(p, sizeof p, "%s%s", base, tails[i % 4]);
		add_line(in, sizeof in, id, p, 6, 0.0, 0,
			 i % 3 ? "story-a" : "story-b");
	}
	cli_tmpdir(path, sizeof path, "batch_load");
	strcat(path, "/t.json");
	const char *extra[] = {"--device", "cpu", "--gpus", "3",
			       "--spill-threshold", "1000000", "--telemetry",
			       path, NULL};
	json_t *res = batch(in, extra);
	long long cost = 0, fresh = 0, generated = 0;
	for (size_t i = 0; i < 12; i++) {
		json_t *o = json_array_get(res, i);
		long long prompt = field_i(o, "prompt_tokens");
		cost += prompt + 6;
		fresh += prompt - field_i(o, "prefix_tokens");
		generated += (long long)json_array_size(
			json_object_get(o, "tokens"));
	}
	json_decref(res);
	json_error_t je;
	json_t *t = json_load_file(path, 0, &je);
	assert_non_null(t);
	json_t *router = json_object_get(t, "router");
	json_t *per = json_object_get(router, "per_device");
	long long load = 0, work = 0, max_load = 0, max_work = 0;
	for (size_t i = 0; i < json_array_size(per); i++) {
		json_t *d = json_array_get(per, i);
		long long l = field_i(d, "load_total");
		long long w = field_i(d, "positions_computed");
		assert_int_equal(field_i(d, "load_now"), 0);
		load += l;
		work += w;
		max_load = l > max_load ? l : max_load;
		max_work = w > max_work ? w : max_work;
	}
	assert_int_equal(load, cost); /* charged whole, each once */
	assert_true(work >= fresh && work <= fresh + generated);
	assert_true(work < load); /* the hits saved work, not charge */
	assert_int_equal(field_i(router, "max_load"), max_load);
	assert_int_equal(field_i(router, "max_positions"), max_work);
	double mean = json_number_value(json_object_get(router, "mean_load"));
	assert_true(mean * 3 == (double)load);
	assert_true(json_number_value(json_object_get(router,
						      "max_over_mean")) ==
		    max_load / mean);
	double wmean = json_number_value(json_object_get(router,
							 "mean_positions"));
	assert_true(wmean * 3 == (double)work);
	json_decref(t);
}

/* A bad line anywhere fails the whole batch: exit 1, "line N" named with a
 * fix, and nothing on stdout. */
static void test_batch_bad_lines_run_nothing(void **state)
{
	(void)state;
	static const struct {
		const char *input, *line, *words;
	} cases[] = {
		{"{\"id\":1,\"prompt\":\"a\"}\nnot json\n", "line 2:",
		 "not a JSON object"},
		{"{\"id\":1}\n", "line 1:", "'prompt'"},
		{"{\"prompt\":\"a\"}\n", "line 1:", "'id'"},
		{"\n{\"id\":1,\"prompt\":\"a\",\"top_p\":0}\n", "line 2:",
		 "'top_p' is not a number in (0, 1]"},
		{"{\"id\":1,\"prompt\":\"a\",\"max_tokens\":-1}\n", "line 1:",
		 "'max_tokens'"},
		{"{\"id\":1,\"prompt\":\"a\",\"temperature\":\"hot\"}\n",
		 "line 1:", "'temperature'"},
		{"{\"id\":1,\"prompt\":\"a\",\"key\":5}\n", "line 1:", "'key'"},
		{"{\"id\":1,\"prompt\":\"a\"}\n{\"id\":1,\"prompt\":\"b\"}\n",
		 "line 2:", "line 1"},
		{"[1,2]\n", "line 1:", "not a JSON object"},
		{"{\"id\":1,\"id\":2,\"prompt\":\"a\"}\n", "line 1:",
		 "duplicate"},
		{"\n\n", "no requests", "no requests"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const char *argv[] = {"batch", MODEL, NULL};
		cli_result r;
		assert_int_equal(cli_run(argv, cases[i].input,
					 strlen(cases[i].input), NULL, &r),
				 0);
		if (r.exit_code != 1 || r.out_len != 0 ||
		    !strstr(r.err, cases[i].line) ||
		    !strstr(r.err, cases[i].words) || !strstr(r.err, "fix:"))
			fail_msg("case %zu: exit %d, out '%s', err '%s'", i,
				 r.exit_code, r.out, r.err);
		cli_result_free(&r);
	}
}

/* Usage errors exit 2: --batch past the forward pass's cap, CPU replicas
 * without --device cpu, a bad --gpus. */
static void test_batch_usage_errors(void **state)
{
	(void)state;
	static const char *const cases[][8] = {
		{"batch", MODEL, "--batch", "257", NULL},
		{"batch", MODEL, "--gpus", "2", NULL},
		{"batch", MODEL, "--device", "cpu", "--gpus", "0", NULL},
		{"batch", MODEL, "--device", "cpu", "--gpus", "1,1", NULL},
		{"batch", MODEL, "--device", "cpu", "--gpus", "x", NULL},
		{"batch", MODEL, "--route", "random", NULL},
		{"batch", NULL},
	};
	const char *in = "{\"id\":1,\"prompt\":\"a\"}\n";
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		cli_result r;
		assert_int_equal(cli_run(cases[i], in, strlen(in), NULL, &r),
				 0);
		if (r.exit_code != 2 || r.out_len != 0)
			fail_msg("case %zu: exit %d, err '%s'", i,
				 r.exit_code, r.err);
		cli_result_free(&r);
	}
	const char *argv[] = {"batch", MODEL, "--batch", "300", NULL};
	cli_result r;
	assert_int_equal(cli_run(argv, in, strlen(in), NULL, &r), 0);
	assert_non_null(strstr(r.err, "at most 256"));
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_results_in_input_order),
		cmocka_unit_test(test_batch_greedy_equals_run),
		cmocka_unit_test(test_batch_text_continues_the_prompt),
		cmocka_unit_test(test_batch_same_output_any_replica_count),
		cmocka_unit_test(test_batch_every_residency_mode),
		cmocka_unit_test(test_batch_several_sequences_same_output),
		cmocka_unit_test(test_batch_same_key_same_device),
		cmocka_unit_test(test_batch_round_robin),
		cmocka_unit_test(test_batch_spills_keep_outputs),
		cmocka_unit_test(test_batch_prefix_cache_hits_change_nothing),
		cmocka_unit_test(test_batch_prefix_cache_bounded_by_plan),
		cmocka_unit_test(test_batch_load_figures_say_what_they_mean),
		cmocka_unit_test(test_batch_bad_lines_run_nothing),
		cmocka_unit_test(test_batch_usage_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
