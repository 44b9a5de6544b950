/* test_plan_user.c - `strata plan` and `strata run` tried as a new user
 * would (issue 17, "fixes found trying it"): on the CPU with no budgets
 * every mode that fits runs; plan and run size the same shape from the
 * same options and say so; plan refuses, exit 1, what run refuses, for the
 * same reason; a nothing-fits fix is one change, in the options' units,
 * that makes the plan fit when typed back (layer: cli). */
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
#include "strata/base.h"

#define STORIES STRATA_SOURCE_DIR "/models/stories260K"

static cli_result run(const char *const *argv)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	return r;
}

/* The line of `text` that starts with `prefix`, copied (without its
 * newline) into out; fails when there is none. */
static void line_of(const char *text, const char *prefix, char *out,
		    size_t cap)
{
	const char *p = strstr(text, prefix);
	if (!p)
		fail_msg("no line '%s' in:\n%s", prefix, text);
	size_t n = strcspn(p, "\n");
	assert_true(n < cap);
	memcpy(out, p, n);
	out[n] = '\0';
}

/* ------------------------------------------------------------------------ */
/* One RAM: every mode that fits runs                                       */
/* ------------------------------------------------------------------------ */

/* cpu, no budgets: the device arena and the host tier share the RAM, so
 * host:1 (and every other uniform mode) runs a small model; the device
 * budget does not take all of it. */
static void every_mode_runs_on_the_cpu_without_budgets(void **state)
{
	(void)state;
	const char *modes[] = {"host:1", "host:2", "resident", "disk"};
	for (size_t i = 0; i < 4; i++) {
		const char *argv[] = {"run", STORIES, "--device", "cpu",
				      "--residency", modes[i], "-p", "Once",
				      "-n", "4", "--temperature", "0", NULL};
		cli_result r = run(argv);
		if (r.exit_code != 0)
			fail_msg("%s: exit %d: %s", modes[i], r.exit_code, r.err);
		char want[64];
		snprintf(want, sizeof want, "plan: %s, ", modes[i]);
		assert_non_null(strstr(r.err, want));
		assert_null(strstr(r.err, "host budget 0"));
		cli_result_free(&r);
	}
}

/* ------------------------------------------------------------------------ */
/* One set of shape defaults                                                */
/* ------------------------------------------------------------------------ */

/* "context C, batch 1, prefill chunk P" of plan's table and of run's
 * summary, for the same options. */
static void shapes_of(const char *const *opts, char *plan_shape,
		      char *run_shape, size_t cap)
{
	const char *pa[24] = {"plan", STORIES, "--device", "cpu"};
	const char *ra[24] = {"run", STORIES, "--device", "cpu", "-p", "Once",
			      "-n", "3", "--temperature", "0"};
	size_t np = 4, nr = 10;
	for (; *opts; opts++)
		pa[np++] = ra[nr++] = *opts;
	pa[np] = ra[nr] = NULL;
	cli_result p = run(pa), r = run(ra);
	assert_int_equal(p.exit_code, 0);
	if (r.exit_code != 0)
		fail_msg("run: %s", r.err);
	char line[256];
	line_of(p.out, "device: cpu, ", line, sizeof line);
	snprintf(plan_shape, cap, "%s", strstr(line, "context "));
	line_of(r.err, "plan: ", line, sizeof line);
	const char *at = strstr(line, "context ");
	assert_non_null(at);
	snprintf(run_shape, cap, "%.*s", (int)strcspn(at, ";"), at);
	cli_result_free(&p);
	cli_result_free(&r);
}

static void plan_and_run_size_the_same_shape(void **state)
{
	(void)state;
	char ps[128], rs[128];
	/* defaults: the trained context (512 here, under 4096), a chunk of
	 * 512 at most the context */
	const char *none[] = {NULL};
	shapes_of(none, ps, rs, sizeof ps);
	assert_string_equal(ps, "context 512, batch 1, prefill chunk 512");
	assert_string_equal(rs, ps);
	const char *ctx[] = {"--context", "128", NULL};
	shapes_of(ctx, ps, rs, sizeof ps);
	assert_string_equal(ps, "context 128, batch 1, prefill chunk 128");
	assert_string_equal(rs, ps);
	const char *both[] = {"--context", "256", "--prefill-chunk", "16",
			      NULL};
	shapes_of(both, ps, rs, sizeof ps);
	assert_string_equal(ps, "context 256, batch 1, prefill chunk 16");
	assert_string_equal(rs, ps);
	/* and so the same candidate: the device and host totals agree */
	const char *pa[] = {"plan", STORIES, "--device", "cpu", "--json",
			    "--residency", "host:1", NULL};
	cli_result p = run(pa);
	json_t *doc = json_loads(p.out, 0, NULL);
	assert_non_null(doc);
	json_t *sel = json_object_get(doc, "selected");
	uint64_t dev = (uint64_t)json_integer_value(
		json_object_get(sel, "device_bytes"));
	const char *ra[] = {"run", STORIES, "--device", "cpu", "--residency",
			    "host:1", "-p", "Once", "-n", "2", NULL};
	cli_result r = run(ra);
	assert_int_equal(r.exit_code, 0);
	char size[32], want[64];
	strata_size_format(dev, size, sizeof size);
	snprintf(want, sizeof want, "; device %s, host", size);
	assert_non_null(strstr(r.err, want));
	json_decref(doc);
	cli_result_free(&p);
	cli_result_free(&r);
}

/* plan's "selected: NAME," and run's "plan: NAME," for the same options:
 * the same candidate, placements included (a layer split over two CPU
 * devices, where run picks placements) and forced ones. */
static void plan_and_run_select_alike(void **state)
{
	(void)state;
	static const char *const cases[][8] = {
		{"--device-memory", "600KiB,600KiB", "--host-memory", "1GiB",
		 "--context", "64", "--prefill-chunk", "1"},
		{"--device-memory", "1MiB", "--host-memory", "1GiB", "--context",
		 "64", "--prefill-chunk", "1"},
		{"--resident-units", "2", "--cpu-units", "3", "--context", "64",
		 "--device-memory", "1GiB"},
		{"--residency", "host:2", "--context", "128", "--prefill-chunk",
		 "8", "--host-memory", "1GiB"},
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		const char *pa[24] = {"plan", STORIES, "--device", "cpu"};
		const char *ra[24] = {"run", STORIES, "--device", "cpu", "-p",
				      "Once", "-n", "3", "--temperature", "0"};
		size_t np = 4, nr = 10;
		for (size_t i = 0; i < 8; i++)
			pa[np++] = ra[nr++] = cases[k][i];
		pa[np] = ra[nr] = NULL;
		cli_result p = run(pa), r = run(ra);
		if (p.exit_code || r.exit_code)
			fail_msg("case %zu: plan %d, run %d: %s%s", k,
				 p.exit_code, r.exit_code, p.err, r.err);
		char pl[256], rl[256];
		line_of(p.out, "selected: ", pl, sizeof pl);
		line_of(r.err, "plan: ", rl, sizeof rl);
		size_t pn = strcspn(pl + 10, ","), rn = strcspn(rl + 6, ",");
		if (pn != rn || strncmp(pl + 10, rl + 6, pn))
			fail_msg("case %zu: plan '%s', run '%s'", k, pl, rl);
		if (k == 0)
			assert_non_null(strstr(rl, "plan: placement:r"));
		cli_result_free(&p);
		cli_result_free(&r);
	}
}

/* Both helps say the defaults the commands take. */
static void help_tells_the_shape_defaults(void **state)
{
	(void)state;
	const char *cmds[] = {"plan", "run"};
	for (size_t i = 0; i < 2; i++) {
		const char *argv[] = {cmds[i], "--help", NULL};
		cli_result r = run(argv);
		assert_int_equal(r.exit_code, 0);
		assert_non_null(strstr(r.out, "--prefill-chunk N     prompt tokens "
					      "per forward pass (default 512, at\n"
					      "                        most the context"));
		assert_non_null(strstr(r.out, "the trained context, at most 4096"));
		assert_null(strstr(r.out, "per forward pass (default 1"));
		cli_result_free(&r);
	}
}

/* ------------------------------------------------------------------------ */
/* What run refuses, plan refuses                                           */
/* ------------------------------------------------------------------------ */

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	b[n] = '\0';
	*len = (size_t)n;
	return b;
}

static void spill(const char *path, const char *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	fclose(f);
}

/* dir: stories260K with `from` replaced by `to` (same length) in the
 * file `name` (the others copied as they are). */
static void bent_stories(const char *dir, const char *name, const char *from,
			 const char *to)
{
	const char *files[] = {"config.json", "tokenizer.json",
			       "model.safetensors"};
	for (size_t i = 0; i < 3; i++) {
		char src[1024], dst[1024];
		snprintf(src, sizeof src, "%s/%s", STORIES, files[i]);
		snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
		size_t n;
		char *b = slurp(src, &n);
		if (!strcmp(files[i], name)) {
			char *at = memmem(b, n, from, strlen(from));
			assert_non_null(at);
			assert_int_equal(strlen(from), strlen(to));
			memcpy(at, to, strlen(to));
		}
		spill(dst, b, n);
		free(b);
	}
}

/* run's refusal and plan's: both exit 1, plan's names what run's does
 * (after its table: the sizes are still shown). */
static void refused_alike(const char *dir, const char *reason)
{
	const char *ra[] = {"run", dir, "--device", "cpu", "-p", "Once", "-n",
			    "2", NULL};
	const char *pa[] = {"plan", dir, "--device", "cpu", NULL};
	const char *pj[] = {"plan", dir, "--device", "cpu", "--json", NULL};
	cli_result r = run(ra), p = run(pa), j = run(pj);
	assert_int_equal(r.exit_code, 1);
	assert_int_equal(p.exit_code, 1);
	assert_int_equal(j.exit_code, 1);
	if (!strstr(r.err, reason) || !strstr(p.err, reason))
		fail_msg("'%s' not in run's\n%s\nor plan's\n%s", reason, r.err,
			 p.err);
	assert_non_null(strstr(p.err, "strata cannot run this checkpoint"));
	json_t *doc = json_loads(j.out, 0, NULL);
	assert_non_null(doc); /* the sizes, still */
	json_decref(doc);
	cli_result_free(&r);
	cli_result_free(&p);
	cli_result_free(&j);
}

static void plan_refuses_what_run_refuses(void **state)
{
	(void)state;
	char dir[512];
	/* a layer's tensor of an integer type strata cannot compute */
	cli_tmpdir(dir, sizeof dir, "plan_user_i32");
	bent_stories(dir, "model.safetensors",
		     "\"model.layers.0.mlp.down_proj.weight\":{\"dtype\":\"F32\"",
		     "\"model.layers.0.mlp.down_proj.weight\":{\"dtype\":\"I32\"");
	refused_alike(dir, "model.layers.0.mlp.down_proj.weight");
	/* a family strata does not run */
	cli_tmpdir(dir, sizeof dir, "plan_user_family");
	bent_stories(dir, "config.json", "\"model_type\": \"llama\"",
		     "\"model_type\": \"gemma\"");
	refused_alike(dir, "model_type 'gemma' is not a family strata can run");
}

/* ------------------------------------------------------------------------ */
/* Nothing fits: the one change, typed back                                 */
/* ------------------------------------------------------------------------ */

/* Plans with the budgets given; when nothing fits, the fix must name only
 * `option` (never the other budget), with a size the options take; typed
 * back in place of the budget it names, the plan fits. */
static void one_change_fits(const char *device, const char *host,
			    const char *option, const char *other)
{
	const char *argv[] = {"plan", STORIES, "--device", "cpu",
			      "--residency", "host", "--context", "256",
			      "--device-memory", device, "--host-memory", host,
			      NULL};
	cli_result r = run(argv);
	assert_int_equal(r.exit_code, 1);
	char fix[512];
	line_of(r.err, "  fix: ", fix, sizeof fix);
	char want[64];
	snprintf(want, sizeof want, "  fix: give %s ", option);
	if (strncmp(fix, want, strlen(want)) || strstr(fix, other))
		fail_msg("not one change of %s: %s", option, fix);
	/* the size, as typed: digits, an optional .dd, a binary unit */
	char size[32];
	sscanf(fix + strlen(want), "%31s", size);
	size_t k = strspn(size, "0123456789.");
	assert_true(k > 0 && (!strcmp(size + k, "KiB") ||
			      !strcmp(size + k, "MiB") ||
			      !strcmp(size + k, "GiB")));
	const char *again[] = {"plan", STORIES, "--device", "cpu",
			       "--residency", "host", "--context", "256",
			       "--device-memory",
			       !strcmp(option, "--device-memory") ? size : device,
			       "--host-memory",
			       !strcmp(option, "--host-memory") ? size : host,
			       NULL};
	cli_result a = run(again);
	if (a.exit_code != 0)
		fail_msg("the fix '%s' does not fit: %s", fix, a.err);
	cli_result_free(&a);
	cli_result_free(&r);
}

static void nothing_fits_names_the_one_change(void **state)
{
	(void)state;
	/* only the host budget short: never cut or raise the device's */
	one_change_fits("1GiB", "1KiB", "--host-memory", "--device-memory");
	/* only the device budget short */
	one_change_fits("100KiB", "1GiB", "--device-memory", "--host-memory");
}

/* ------------------------------------------------------------------------ */
/* Measured expert shares                                                   */
/* ------------------------------------------------------------------------ */

#define MOE STRATA_SOURCE_DIR "/tests/data/families/qwen3_moe_f32"

/* `plan --json`'s experts object for the MoE model, --n-cpu-moe 2
 * --expert-cache 2 and `more` options (NULL-terminated). */
static json_t *expert_plan(const char *const *more)
{
	const char *argv[32] = {"plan", MOE, "--n-cpu-moe", "2",
				"--expert-cache", "2", "--json"};
	size_t n = 7;
	while (*more)
		argv[n++] = *more++;
	argv[n] = NULL;
	cli_result r = run(argv);
	if (r.exit_code != 0)
		fail_msg("plan exited %d: %s", r.exit_code, r.err);
	json_error_t je;
	json_t *doc = json_loads(r.out, 0, &je);
	if (!doc)
		fail_msg("plan --json: %s", je.text);
	cli_result_free(&r);
	json_t *x = json_incref(json_object_get(doc, "experts"));
	json_decref(doc);
	assert_non_null(x);
	return x;
}

static double number(json_t *o, const char *pass, const char *key)
{
	json_t *v = json_object_get(pass ? json_object_get(o, pass) : o, key);
	assert_true(json_is_number(v));
	return json_number_value(v);
}

/* A run's measured shares given to plan take the place of uniform
 * routing's: a hit rate of 1 predicts every decode call a hit, an admit
 * rate the admissions per miss; values outside 0..1 are usage errors
 * naming the option. */
static void plan_takes_measured_expert_shares(void **state)
{
	(void)state;
	const char *none[] = {NULL};
	json_t *u = expert_plan(none);
	assert_true(number(u, NULL, "hit_rate") == 0.0);
	double calls = number(u, "decode", "calls");
	assert_true(number(u, "decode", "hits") < calls);
	const char *all[] = {"--expert-hit-rate", "1", NULL};
	json_t *h = expert_plan(all);
	assert_true(number(h, NULL, "hit_rate") == 1.0);
	assert_true(number(h, "decode", "hits") == calls);
	assert_true(number(h, "decode", "misses") == 0.0);
	const char *half[] = {"--expert-hit-rate", "0.5", "--expert-admit-rate",
			      "0.25", NULL};
	json_t *a = expert_plan(half);
	double misses = number(a, "decode", "misses");
	assert_true(number(a, "decode", "hits") == 0.5 * calls);
	assert_true(number(a, "decode", "admissions") == 0.25 * misses);
	json_decref(u), json_decref(h), json_decref(a);
	static const char *const bad[][2] = {
		{"--expert-hit-rate", "1.5"}, {"--expert-hit-rate", "-0.1"},
		{"--expert-admit-rate", "half"}, {"--expert-admit-rate", "nan"}};
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		const char *argv[] = {"plan", MOE, "--n-cpu-moe", "2",
				      "--expert-cache", "2", bad[k][0],
				      bad[k][1], NULL};
		cli_result r = run(argv);
		assert_int_equal(r.exit_code, 2);
		assert_non_null(strstr(r.err, bad[k][0]));
		assert_non_null(strstr(r.err, "from 0 to 1"));
		cli_result_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_mode_runs_on_the_cpu_without_budgets),
		cmocka_unit_test(plan_and_run_size_the_same_shape),
		cmocka_unit_test(plan_and_run_select_alike),
		cmocka_unit_test(help_tells_the_shape_defaults),
		cmocka_unit_test(plan_refuses_what_run_refuses),
		cmocka_unit_test(nothing_fits_names_the_one_change),
		cmocka_unit_test(plan_takes_measured_expert_shares),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
