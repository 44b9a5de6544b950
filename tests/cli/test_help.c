/* test_help.c - every command's --help lists exactly what it accepts
 * (issue 25): for each command of `strata --help`, the options its help
 * lists are parsed from it, none is listed twice, and each one, given a
 * value its help's metavar describes, is taken by the command (no
 * "unknown option"); run and logits, one sequence each, list no --batch
 * (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/cli_runner.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"
#define MAX_OPTS 64
#define MAX_NAME 64

typedef struct help_opt {
	char name[MAX_NAME];
	char metavar[MAX_NAME]; /* "" for a flag */
} help_opt;

static char dir[4096], file[4200];

static cli_result run_in(const char *const *argv, const char *in)
{
	cli_result r;
	assert_int_equal(cli_run(argv, in, in ? strlen(in) : 0, NULL, &r), 0);
	return r;
}

/* The metavar after an option name: one word after one space ("--seed S
 * random..."), or a quoted one ("--tokens \"ID ...\""); none after two
 * spaces (a flag: "--json    one JSON object"). */
static void read_metavar(const char *p, char *out)
{
	out[0] = '\0';
	if (p[0] != ' ' || p[1] == ' ' || p[1] == '\n' || !p[1])
		return;
	p++;
	size_t k = *p == '"' ? (size_t)(strchr(p + 1, '"') - p) + 1
			     : strcspn(p, " \n");
	assert_true(k < MAX_NAME);
	memcpy(out, p, k);
	out[k] = '\0';
}

/* The options of a help text: the names opening its indented lines
 * ("  --top-k K ..."), with ", -x" alternatives ("  -p, --prompt TEXT"). */
static size_t parse_help(const char *help, help_opt *opts)
{
	size_t n = 0;
	for (const char *line = help; line && *line;) {
		const char *end = strchr(line, '\n');
		const char *p = line + 2;
		size_t first = n;
		while (!strncmp(line, "  -", 3) && *p == '-') {
			size_t k = strcspn(p, " ,=\n");
			assert_true(k > 1 && k < MAX_NAME && n < MAX_OPTS);
			memcpy(opts[n].name, p, k);
			opts[n++].name[k] = '\0';
			p += k;
			if (strncmp(p, ", -", 3))
				break;
			p += 2;
		}
		if (n > first) {
			char mv[MAX_NAME];
			read_metavar(p, mv);
			for (size_t i = first; i < n; i++)
				snprintf(opts[i].metavar, MAX_NAME, "%s", mv);
		}
		line = end ? end + 1 : NULL;
	}
	return n;
}

/* A plausible value for a metavar: its first alternative when it lists
 * them ("cpu|cuda[:N]" -> "cpu"), else by what it names. */
static const char *value_for(const char *metavar, char *buf, size_t cap)
{
	size_t k = strcspn(metavar, "|[");
	snprintf(buf, cap, "%.*s", (int)k, metavar);
	static const struct {
		const char *metavar, *value;
	} known[] = {
		{"FILE", file},	     {"PROMPT", "x"},	 {"TEXT", "x"},
		{"MODE", "auto"},    {"SIZE", "1GiB"},	 {"GLOB", "none*"},
		{"DEV:COST", "0:1"},
	};
	for (size_t i = 0; i < sizeof known / sizeof *known; i++)
		if (!strcmp(buf, known[i].metavar))
			return known[i].value;
	if (buf[0] == '"') /* "ID ..." */
		return "1";
	for (const char *c = buf; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			return "1"; /* N, K, T, TOKENS: a number */
	return buf; /* a literal: cpu, all, affinity */
}

/* What each command needs to run at all, and its stdin. */
static void base_args(const char *cmd, const char **argv, size_t *n,
		      const char **in)
{
	static char out_path[4200];
	snprintf(out_path, sizeof out_path, "%s/logits.bin", dir);
	*in = NULL;
	argv[(*n)++] = cmd;
	if (!strcmp(cmd, "shard")) {
		const char *a[] = {"--gpus", "1", "--spill-threshold", "1"};
		for (size_t i = 0; i < 4; i++)
			argv[(*n)++] = a[i];
		*in = "k\t1\n";
		return;
	}
	argv[(*n)++] = MODEL;
	if (!strcmp(cmd, "quantize")) {
		static char q_path[4200];
		snprintf(q_path, sizeof q_path, "%s/quantized.gguf", dir);
		argv[(*n)++] = q_path;
	}
	if (!strcmp(cmd, "run") || !strcmp(cmd, "tokenize")) {
		argv[(*n)++] = "-p";
		argv[(*n)++] = "x";
	}
	if (!strcmp(cmd, "run") || !strcmp(cmd, "batch")) {
		argv[(*n)++] = "-n";
		argv[(*n)++] = "1";
	}
	if (!strcmp(cmd, "logits")) {
		argv[(*n)++] = "--tokens";
		argv[(*n)++] = "1";
		argv[(*n)++] = "--out";
		argv[(*n)++] = out_path;
	}
	if (!strcmp(cmd, "bench")) { /* a few tokens, one run */
		const char *a[] = {"-p", "4", "-n", "2", "-r", "1"};
		for (size_t i = 0; i < 6; i++)
			argv[(*n)++] = a[i];
	}
	if (!strcmp(cmd, "serve")) { /* parses all, then cannot listen */
		argv[(*n)++] = "--host";
		argv[(*n)++] = "none";
	}
	if (!strcmp(cmd, "run") || !strcmp(cmd, "logits") ||
	    !strcmp(cmd, "batch") || !strcmp(cmd, "bench") ||
	    !strcmp(cmd, "serve"))
		argv[(*n)++] = "--device=cpu";
	if (!strcmp(cmd, "batch"))
		*in = "{\"id\": \"a\", \"prompt\": \"x\", \"max_tokens\": 1}\n";
}

static void check_accepted(const char *cmd, const help_opt *o)
{
	const char *argv[32];
	size_t n = 0;
	const char *in;
	char buf[MAX_NAME];
	base_args(cmd, argv, &n, &in);
	argv[n++] = o->name;
	if (o->metavar[0])
		argv[n++] = value_for(o->metavar, buf, sizeof buf);
	argv[n] = NULL;
	cli_result r = run_in(argv, in);
	if (r.exit_code < 0 || strstr(r.err, "unknown option") ||
	    strstr(r.err, "unexpected argument"))
		fail_msg("strata %s %s %s: listed in its --help but refused "
			 "(exit %d): %s", cmd, o->name,
			 o->metavar[0] ? argv[n - 1] : "", r.exit_code, r.err);
	cli_result_free(&r);
}

static char *help_of(const char *cmd)
{
	const char *argv[] = {cmd, "--help", NULL};
	cli_result r = run_in(cmd ? argv : argv + 1, NULL);
	assert_int_equal(r.exit_code, 0);
	char *out = r.out;
	r.out = NULL;
	cli_result_free(&r);
	return out;
}

/* The command names of `strata --help`'s "commands:" list. */
static size_t commands(char names[][MAX_NAME], size_t cap)
{
	char *top = help_of(NULL);
	char *p = strstr(top, "commands:\n");
	assert_non_null(p);
	size_t n = 0;
	for (p = strchr(p, '\n') + 1; !strncmp(p, "  ", 2) && n < cap;) {
		assert_int_equal(sscanf(p, "%63s", names[n]), 1);
		n++;
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	free(top);
	return n;
}

static void test_cli_help_lists_what_each_command_takes(void **state)
{
	(void)state;
	char names[32][MAX_NAME];
	size_t nc = commands(names, 32);
	assert_true(nc >= 7); /* shard inspect plan tokenize run logits batch */
	for (size_t c = 0; c < nc; c++) {
		char *help = help_of(names[c]);
		help_opt opts[MAX_OPTS];
		size_t n = parse_help(help, opts);
		if (n == 0)
			fail_msg("strata %s --help lists no option", names[c]);
		for (size_t i = 0; i < n; i++)
			for (size_t j = i + 1; j < n; j++)
				if (!strcmp(opts[i].name, opts[j].name))
					fail_msg("strata %s --help lists %s twice",
						 names[c], opts[i].name);
		for (size_t i = 0; i < n; i++)
			check_accepted(names[c], &opts[i]);
		free(help);
	}
}

static bool lists(const char *cmd, const char *name)
{
	char *help = help_of(cmd);
	help_opt opts[MAX_OPTS];
	size_t n = parse_help(help, opts);
	free(help);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(opts[i].name, name))
			return true;
	return false;
}

static void test_cli_help_batch_only_where_taken(void **state)
{
	(void)state;
	/* run and logits refuse --batch above 1 (use strata batch) */
	assert_false(lists("run", "--batch"));
	assert_false(lists("logits", "--batch"));
	assert_true(lists("batch", "--batch"));
	assert_true(lists("plan", "--batch"));
	/* the rest of the shared residency part is still there */
	assert_true(lists("run", "--residency"));
	assert_true(lists("logits", "--prefill-chunk"));
	assert_true(lists("batch", "--cpu-units"));
}

static int setup(void **state)
{
	(void)state;
	cli_tmpdir(dir, sizeof dir, "help");
	snprintf(file, sizeof file, "%s/file.txt", dir);
	FILE *f = fopen(file, "w");
	if (!f || fputs("x", f) < 0 || fclose(f))
		return -1;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_help_lists_what_each_command_takes),
		cmocka_unit_test(test_cli_help_batch_only_where_taken),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
