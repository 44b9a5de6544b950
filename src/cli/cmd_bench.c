/* cmd_bench.c - `strata bench MODEL [plan options] [-p 512,2048] [-n 128]
 * [-r REPS] [--json]`: prompt processing and text generation throughput of
 * a model under its plan, in the form llama-bench prints, so users compare
 * like for like (issue 19) (layer: cli).
 *
 * Test ppN: one prefill of N tokens from position 0 (in chunks of the
 * session's prefill pass, --prefill-chunk, as llama-bench's micro-batches
 * of 512), only the last position's logits formed. Test tgN: N single-token
 * steps from position 0, each forming its logits. Each test runs once
 * untimed (warm-up: first loads, workspaces), then -r times timed; a run's
 * tokens per second is N over its wall time, reported as the mean and the
 * sample standard deviation over the runs. Token ids are a fixed
 * pseudo-random sequence over the vocabulary.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/checkpoint.h"
#include "strata/infer.h"

#define MAX_TESTS 16
#define MAX_TEST_TOKENS (1u << 20)
#define MAX_REPS 1000u

typedef struct bench_args {
	const char *model;
	uint32_t pp[MAX_TESTS], tg[MAX_TESTS];
	size_t n_pp, n_tg;
	uint64_t reps, threads;
	bool json;
} bench_args;

/* One test's runs. */
typedef struct bench_test {
	bool prompt; /* pp, else tg */
	uint32_t tokens;
	uint64_t ns[MAX_REPS];
	double mean_ts, sd_ts, mean_ns, sd_ns;
} bench_test;

/* What the table's first columns say about the model and its run. */
typedef struct bench_model {
	char name[160], size[32], params[32], backend[16], residency[64];
	const char *precision; /* --precision, as the contexts were made */
	uint64_t bytes, elements;
} bench_model;

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata bench MODEL [options]\n\n"
		"Measures MODEL's prompt processing and text generation speed\n"
		"under its plan and prints them as llama-bench does: for each\n"
		"prompt size N of -p a prefill of N tokens (test ppN), for each\n"
		"length N of -n N single-token steps (test tgN), both from\n"
		"position 0; each run once untimed, then -r times, reported in\n"
		"tokens per second, mean +- standard deviation over the runs.\n"
		"Prompts longer than the prefill pass (--prefill-chunk, default\n"
		"at most 512) run in chunks of it.\n\n"
		"options:\n"
		"  -p, --n-prompt LIST   prompt sizes, comma-separated (default "
		"512; 0: none)\n"
		"  -n, --n-gen LIST      generation lengths, comma-separated "
		"(default 128; 0: none)\n"
		"  -r, --repetitions N   timed runs of each test (default 5)\n"
		"  --threads N           compute threads (default: every "
		"processor)\n"
		"  --json                one JSON array, an object per test, "
		"instead of the table\n");
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

/* "512,2048" into list (0 entries dropped: "-p 0" asks for no test). */
static int parse_list(const char *opt, const char *text, uint32_t *list,
		      size_t *n)
{
	*n = 0;
	const char *p = text;
	for (;;) {
		size_t k = strcspn(p, ",");
		char one[24];
		uint64_t v = 0;
		strata_error err;
		if (k == 0 || k >= sizeof one)
			return strata_cli_usage("bench", "%s: give sizes such "
						"as 512,2048", opt);
		memcpy(one, p, k);
		one[k] = '\0';
		if (strata_cli_parse_u64(opt, one, &v, &err) ||
		    v > MAX_TEST_TOKENS)
			return strata_cli_usage("bench", "%s: '%s' is not a "
						"size of 0 to %u tokens",
						opt, one, MAX_TEST_TOKENS);
		if (v && *n == MAX_TESTS)
			return strata_cli_usage("bench", "%s: at most %d sizes",
						opt, MAX_TESTS);
		if (v)
			list[(*n)++] = (uint32_t)v;
		if (!p[k])
			return 0;
		p += k + 1;
	}
}

/* Options with a value; 0 when handled, else an exit code. */
static int value_option(void *ctx, const char *opt, const char *v,
			bool *known)
{
	bench_args *a = ctx;
	strata_error err;
	*known = true;
	if (!strcmp(opt, "-p") || !strcmp(opt, "--n-prompt"))
		return parse_list(opt, v, a->pp, &a->n_pp);
	if (!strcmp(opt, "-n") || !strcmp(opt, "--n-gen"))
		return parse_list(opt, v, a->tg, &a->n_tg);
	if (!strcmp(opt, "-r") || !strcmp(opt, "--repetitions")) {
		if (strata_cli_parse_u64(opt, v, &a->reps, &err) || !a->reps ||
		    a->reps > MAX_REPS)
			return strata_cli_usage("bench", "%s: give 1 to %u",
						opt, MAX_REPS);
		return 0;
	}
	if (!strcmp(opt, "--threads")) {
		if (strata_cli_parse_u64(opt, v, &a->threads, &err) ||
		    a->threads > 4096)
			return strata_cli_usage("bench",
						"--threads: give 0 to 4096");
		return 0;
	}
	*known = false;
	return 0;
}

/* 0: parsed; -1: help shown; else the exit code. --json, the one flag, is
 * taken out before the shared loop, which gives every option a value. */
static int parse_args(int argc, char **argv, bench_args *a,
		      strata_cli_residency *r)
{
	char **rest = calloc((size_t)argc + 1, sizeof *rest);
	if (!rest) {
		fprintf(stderr, "strata: error: out of memory\n");
		return STRATA_EXIT_ERROR;
	}
	int n = 0;
	for (int i = 0; i < argc; i++) {
		if (i > 0 && !strcmp(argv[i], "--json"))
			a->json = true;
		else
			rest[n++] = argv[i];
	}
	int rc = strata_cli_model_args("bench", n, rest, r, help,
				       value_option, a, &a->model);
	free(rest);
	if (rc || (rc = strata_cli_one_sequence("bench", r)))
		return rc;
	if (a->n_pp + a->n_tg == 0)
		return strata_cli_usage("bench", "-p and -n ask for no test");
	return 0;
}

/* ------------------------------------------------------------------------ */

/* "260.42 K", "6.74 B": parameters as llama-bench writes them. */
static void format_count(uint64_t n, char *buf, size_t cap)
{
	static const char *const unit[] = {"", " K", " M", " B", " T"};
	double v = (double)n;
	size_t u = 0;
	while (v >= 1000.0 && u + 1 < sizeof unit / sizeof *unit)
		v /= 1000.0, u++;
	snprintf(buf, cap, u ? "%.2f%s" : "%.0f%s", v, unit[u]);
}

/* Name, stored size and parameter count from the checkpoint's catalog;
 * backend and residency from the session's plan. */
static strata_status describe(const char *model, const strata_session *s,
			      const strata_cli_residency *r, bench_model *m,
			      strata_error *err)
{
	strata_catalog *cat = NULL;
	strata_status st = strata_catalog_open(model, &cat, err);
	if (st)
		return st;
	uint64_t by_type[STRATA_DTYPE_COUNT] = {0};
	m->bytes = m->elements = 0;
	for (size_t i = 0; i < strata_catalog_count(cat); i++) {
		const strata_tensor *t = strata_catalog_tensor(cat, i);
		m->bytes += t->bytes;
		m->elements += t->elements;
		if ((unsigned)t->dtype < STRATA_DTYPE_COUNT)
			by_type[t->dtype] += t->bytes;
	}
	strata_catalog_destroy(cat);
	size_t most = 0;
	for (size_t t = 1; t < STRATA_DTYPE_COUNT; t++)
		if (by_type[t] > by_type[most])
			most = t;
	const strata_dtype_info *di = strata_dtype_get((strata_dtype)most);
	const char *base = strrchr(model, '/');
	base = base && base[1] ? base + 1 : model;
	snprintf(m->name, sizeof m->name, "%s %.100s %s",
		 strata_infer_family_name(strata_session_hparams(s)->family),
		 base, di ? di->name : "?");
	strata_size_format(m->bytes, m->size, sizeof m->size);
	format_count(m->elements, m->params, sizeof m->params);
	snprintf(m->backend, sizeof m->backend, "%s",
		 r->plan.device == STRATA_PLAN_DEVICE_CUDA ? "CUDA" : "CPU");
	const strata_plan_candidate *c =
		strata_plan_selected(strata_session_plan(s));
	m->precision = strata_precision_name(strata_session_precision(s));
	snprintf(m->residency, sizeof m->residency, "%s", "?");
	if (c)
		strata_plan_candidate_name(c, m->residency, sizeof m->residency);
	return STRATA_OK;
}

/* One run of a test, its wall time into *ns. */
static strata_status run_once(strata_session *s, const bench_test *t,
			      const int32_t *tok, float *last, uint64_t *ns,
			      strata_error *err)
{
	strata_forward *f = strata_session_forward(s);
	strata_forward_reset(f);
	strata_status st = STRATA_OK;
	uint64_t t0 = strata_now_ns();
	if (t->prompt)
		st = strata_forward_run(f, tok, t->tokens, 0, NULL, last, err);
	for (uint32_t i = 0; !t->prompt && st == STRATA_OK && i < t->tokens; i++)
		st = strata_forward_run(f, tok + i, 1, i, NULL, last, err);
	*ns = strata_now_ns() - t0;
	return st;
}

/* The warm-up, the timed runs, and their statistics. */
static strata_status measure(strata_session *s, bench_test *t, uint64_t reps,
			     const int32_t *tok, float *last, strata_error *err)
{
	uint64_t ignored;
	strata_status st = run_once(s, t, tok, last, &ignored, err);
	double sum_ts = 0, sum_ns = 0;
	for (uint64_t r = 0; st == STRATA_OK && r < reps; r++) {
		st = run_once(s, t, tok, last, &t->ns[r], err);
		if (!t->ns[r])
			t->ns[r] = 1; /* a clock too coarse to tell */
		sum_ts += t->tokens * 1e9 / (double)t->ns[r];
		sum_ns += (double)t->ns[r];
	}
	if (st)
		return st;
	t->mean_ts = sum_ts / (double)reps;
	t->mean_ns = sum_ns / (double)reps;
	double ss_ts = 0, ss_ns = 0;
	for (uint64_t r = 0; r < reps; r++) {
		double ts = t->tokens * 1e9 / (double)t->ns[r] - t->mean_ts;
		double d = (double)t->ns[r] - t->mean_ns;
		ss_ts += ts * ts, ss_ns += d * d;
	}
	t->sd_ts = reps > 1 ? sqrt(ss_ts / (double)(reps - 1)) : 0.0;
	t->sd_ns = reps > 1 ? sqrt(ss_ns / (double)(reps - 1)) : 0.0;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

#define COLUMNS 7

static void test_name(const bench_test *t, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%u", t->prompt ? "pp" : "tg", t->tokens);
}

/* The markdown table llama-bench prints: text columns left-aligned,
 * figures right-aligned, each as wide as its widest cell. */
static void print_table(const bench_model *m, const bench_test *t, size_t n)
{
	static const char *const head[COLUMNS] = {
		"model", "size", "params", "backend", "residency", "test", "t/s"};
	static const bool right[COLUMNS] = {false, true, true, false,
					    false, true, true};
	char cell[MAX_TESTS * 2][COLUMNS][160];
	size_t w[COLUMNS];
	for (size_t c = 0; c < COLUMNS; c++)
		w[c] = strlen(head[c]);
	for (size_t i = 0; i < n; i++) {
		snprintf(cell[i][0], 160, "%s", m->name);
		snprintf(cell[i][1], 160, "%s", m->size);
		snprintf(cell[i][2], 160, "%s", m->params);
		snprintf(cell[i][3], 160, "%s", m->backend);
		snprintf(cell[i][4], 160, "%s", m->residency);
		test_name(&t[i], cell[i][5], 160);
		snprintf(cell[i][6], 160, "%.2f \u00b1 %.2f", t[i].mean_ts,
			 t[i].sd_ts);
		for (size_t c = 0; c < COLUMNS; c++) {
			/* the ± sign is two bytes and one column */
			size_t len = strlen(cell[i][c]) - (c == 6 ? 1 : 0);
			if (len > w[c])
				w[c] = len;
		}
	}
	for (size_t c = 0; c < COLUMNS; c++)
		printf(right[c] ? "| %*s " : "| %-*s ", (int)w[c], head[c]);
	printf("|\n");
	for (size_t c = 0; c < COLUMNS; c++) {
		printf("| ");
		for (size_t k = 0; k + 1 < w[c]; k++)
			putchar('-');
		putchar(right[c] ? ':' : '-');
		putchar(' ');
	}
	printf("|\n");
	for (size_t i = 0; i < n; i++) {
		for (size_t c = 0; c < COLUMNS; c++)
			printf(right[c] ? "| %*s " : "| %-*s ",
			       (int)(w[c] + (c == 6 ? 1 : 0)), cell[i][c]);
		printf("|\n");
	}
}

/* One JSON array, an object per test, with llama-bench's names for the
 * figures (model_size, model_n_params, n_prompt, n_gen, avg_ns, stddev_ns,
 * avg_ts, stddev_ts, samples_ns, samples_ts). */
static strata_status print_json(const bench_model *m, const bench_test *t,
				size_t n, uint64_t reps, strata_error *err)
{
	strata_json j;
	strata_json_init(&j, true);
	strata_json_array_begin(&j);
	for (size_t i = 0; i < n; i++) {
		char name[24];
		test_name(&t[i], name, sizeof name);
		strata_json_object_begin(&j);
		strata_json_kv_string(&j, "model", m->name);
		strata_json_kv_u64(&j, "model_size", m->bytes);
		strata_json_kv_u64(&j, "model_n_params", m->elements);
		strata_json_kv_string(&j, "backend", m->backend);
		strata_json_kv_string(&j, "residency", m->residency);
		strata_json_kv_string(&j, "precision", m->precision);
		strata_json_kv_string(&j, "test", name);
		strata_json_kv_u64(&j, "n_prompt", t[i].prompt ? t[i].tokens : 0);
		strata_json_kv_u64(&j, "n_gen", t[i].prompt ? 0 : t[i].tokens);
		strata_json_kv_u64(&j, "repetitions", reps);
		strata_json_kv_double(&j, "avg_ns", t[i].mean_ns);
		strata_json_kv_double(&j, "stddev_ns", t[i].sd_ns);
		strata_json_kv_double(&j, "avg_ts", t[i].mean_ts);
		strata_json_kv_double(&j, "stddev_ts", t[i].sd_ts);
		strata_json_key(&j, "samples_ns");
		strata_json_array_begin(&j);
		for (uint64_t r = 0; r < reps; r++)
			strata_json_u64(&j, t[i].ns[r]);
		strata_json_array_end(&j);
		strata_json_key(&j, "samples_ts");
		strata_json_array_begin(&j);
		for (uint64_t r = 0; r < reps; r++)
			strata_json_double(&j, t[i].tokens * 1e9 /
						       (double)t[i].ns[r]);
		strata_json_array_end(&j);
		strata_json_object_end(&j);
	}
	strata_json_array_end(&j);
	strata_status st = strata_json_finish(&j, err);
	if (st == STRATA_OK)
		fputs(j.buf, stdout);
	strata_json_fini(&j);
	return st;
}

/* ------------------------------------------------------------------------ */

static strata_status bench(strata_session *s, const bench_args *a,
			   const strata_cli_residency *r, bench_test *tests,
			   size_t n, uint32_t longest, strata_error *err)
{
	bench_model m;
	strata_status st = describe(a->model, s, r, &m, err);
	if (st)
		return st;
	uint32_t vocab = strata_session_hparams(s)->vocab;
	int32_t *tok = strata_alloc_or_error((uint64_t)longest * sizeof *tok,
					     "bench token ids", err);
	float *last = strata_alloc_or_error((uint64_t)vocab * sizeof *last,
					    "bench logits", err);
	st = tok && last ? STRATA_OK : STRATA_E_NOMEM;
	for (uint32_t i = 0; st == STRATA_OK && i < longest; i++)
		tok[i] = (int32_t)((i * 7919ull + 13u) % vocab);
	for (size_t i = 0; st == STRATA_OK && i < n; i++)
		st = measure(s, &tests[i], a->reps, tok, last, err);
	if (st == STRATA_OK)
		st = strata_session_finish(s, err);
	if (st == STRATA_OK && a->json)
		st = print_json(&m, tests, n, a->reps, err);
	else if (st == STRATA_OK)
		print_table(&m, tests, n);
	strata_free(tok);
	strata_free(last);
	return st;
}

int strata_cmd_bench(int argc, char **argv)
{
	bench_args a = {.pp = {512}, .n_pp = 1, .tg = {128}, .n_tg = 1,
			.reps = 5};
	strata_cli_residency r;
	strata_cli_residency_init(&r);
	int rc = parse_args(argc, argv, &a, &r);
	if (rc) {
		strata_cli_residency_fini(&r);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	/* --device absent: cuda if one is visible, else cpu (DESIGN.md) */
	if (!r.device_given && strata_backend_device_count("cuda") > 0)
		r.plan.device = STRATA_PLAN_DEVICE_CUDA;
	size_t n = a.n_pp + a.n_tg;
	bench_test *tests = calloc(n, sizeof *tests);
	uint32_t longest = 1, longest_pp = 1;
	for (size_t i = 0; tests && i < n; i++) {
		tests[i].prompt = i < a.n_pp;
		tests[i].tokens = i < a.n_pp ? a.pp[i] : a.tg[i - a.n_pp];
		longest = tests[i].tokens > longest ? tests[i].tokens : longest;
		if (tests[i].prompt && tests[i].tokens > longest_pp)
			longest_pp = tests[i].tokens;
	}
	strata_error err;
	strata_session *s = NULL;
	strata_progress bar;
	strata_status st = tests ? STRATA_OK
				 : strata_fail(&err, STRATA_E_NOMEM,
					       "free memory and retry",
					       "cannot allocate %zu bench tests",
					       n);
	if (st == STRATA_OK)
		st = strata_cli_residency_rates(&r, &err);
	if (st == STRATA_OK) {
		strata_session_options so =
			strata_cli_session_options(&r, a.model, a.threads);
		so.positions = longest;
		so.prefill = longest_pp;
		so.load_progress = strata_cli_load_bar_update;
		so.load_progress_user = &bar;
		strata_cli_load_bar_init(&bar, &r);
		st = strata_session_open(&so, &s, &err);
		strata_progress_finish(&bar);
	}
	if (st == STRATA_OK)
		st = bench(s, &a, &r, tests, n, longest, &err);
	rc = st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
	strata_session_close(s);
	free(tests);
	strata_cli_residency_fini(&r);
	return rc;
}
