/* cmd_logits.c - `strata logits MODEL --tokens "ID ID ..." --out FILE`: the
 * float32 logits of every position, row-major [tokens, vocab], written
 * atomically (layer: cli). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/infer.h"

#define MAX_TOKENS (1u << 20)

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata logits MODEL --tokens \"ID ID ...\" --out FILE "
		"[options]\n\n"
		"Runs the token ids through MODEL in one prefill and writes the\n"
		"logits of every position to FILE: float32 little-endian,\n"
		"row-major [tokens, vocab]. FILE is replaced atomically.\n\n"
		"options:\n"
		"  --tokens \"ID ...\"     token ids, separated by spaces\n"
		"  --out FILE            where the logits go\n"
		"  --threads N           compute threads (default: every "
		"processor)\n"
		"  --telemetry FILE      write the telemetry document\n");
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

/* Parses "ID ID ..." (spaces, tabs or commas between) into *ids. */
static strata_status parse_tokens(const char *text, int32_t **ids,
				  uint32_t *n, strata_error *err)
{
	size_t cap = 0, count = 0;
	int32_t *v = NULL;
	const char *p = text;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\n')
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long long id = strtoll(p, &end, 10);
		if (end == p || (*end && *end != ' ' && *end != '\t' &&
				 *end != ',' && *end != '\n') ||
		    errno || id < 0 || id > INT32_MAX) {
			char shown[48];
			strata_escape(shown, sizeof shown, p, strcspn(p, " \t,"));
			strata_free(v);
			return strata_fail(err, STRATA_E_USAGE,
					   "give non-negative integer ids "
					   "separated by spaces",
					   "--tokens: '%s' is not a token id",
					   shown);
		}
		if (count == MAX_TOKENS) {
			strata_free(v);
			return strata_fail(err, STRATA_E_USAGE,
					   "give fewer tokens",
					   "--tokens: more than %u ids",
					   MAX_TOKENS);
		}
		strata_status st = strata_grow((void **)&v, &cap, count + 1,
					       sizeof *v, "token ids", err);
		if (st) {
			strata_free(v);
			return st;
		}
		v[count++] = (int32_t)id;
		p = end;
	}
	if (count == 0) {
		strata_free(v);
		return strata_fail(err, STRATA_E_USAGE,
				   "give at least one token id",
				   "--tokens: no token ids");
	}
	*ids = v;
	*n = (uint32_t)count;
	return STRATA_OK;
}

typedef struct logits_args {
	const char *model, *tokens, *out, *telemetry;
	uint64_t threads;
	bool quiet; /* --quiet: nothing on stderr but errors */
} logits_args;

/* Options with a value; 0 when handled, else an exit code. */
static int value_option(void *ctx, const char *opt, const char *v,
			bool *known)
{
	logits_args *a = ctx;
	const char **slot = !strcmp(opt, "--tokens")	  ? &a->tokens
			    : !strcmp(opt, "--out")	  ? &a->out
			    : !strcmp(opt, "--telemetry") ? &a->telemetry
							  : NULL;
	strata_error err;
	*known = slot || !strcmp(opt, "--threads");
	if (slot) {
		*slot = v;
		if (slot != &a->tokens)
			return strata_cli_output(opt, v);
	} else if (*known && (strata_cli_parse_u64(opt, v, &a->threads, &err) ||
			    a->threads > 4096))
		return strata_cli_usage("logits", "--threads: give 0 to 4096");
	return 0;
}

/* 0: parsed; -1: help shown; else the exit code. */
static int parse_args(int argc, char **argv, logits_args *a,
		      strata_cli_residency *r)
{
	int rc = strata_cli_model_args("logits", argc, argv, r, help,
				       value_option, a, &a->model);
	if (rc || (rc = strata_cli_one_sequence("logits", r)))
		return rc;
	if (!a->tokens)
		return strata_cli_usage("logits", "--tokens is missing");
	if (!a->out)
		return strata_cli_usage("logits", "--out is missing");
	return 0;
}

static strata_status compute_and_write(strata_session *s, const int32_t *ids,
				       uint32_t n, const logits_args *a,
				       strata_error *err)
{
	uint64_t cells, bytes;
	strata_status st;
	if ((st = strata_checked_mul(n, strata_session_hparams(s)->vocab,
				     &cells, "logits cells", err)) ||
	    (st = strata_checked_mul(cells, sizeof(float), &bytes,
				     "logits bytes", err)))
		return st;
	float *logits = strata_alloc_or_error(bytes, "logits", err);
	if (!logits)
		return STRATA_E_NOMEM;
	uint64_t t0 = strata_now_ns();
	st = strata_forward_run(strata_session_forward(s), ids, n, 0, logits,
				NULL, err);
	uint64_t run_ns = strata_now_ns() - t0;
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	for (uint64_t i = 0; st == STRATA_OK && i < cells; i++) {
		uint32_t u;
		memcpy(&u, &logits[i], 4);
		u = __builtin_bswap32(u);
		memcpy(&logits[i], &u, 4);
	}
#endif
	if (st == STRATA_OK)
		st = strata_file_write_atomic(a->out, logits, bytes, err);
	if (st == STRATA_OK)
		st = strata_session_finish(s, err);
	if (st == STRATA_OK && !a->quiet)
		strata_session_print_summary(s, stderr);
	if (st == STRATA_OK && a->telemetry)
		st = strata_session_write_telemetry(
			s, a->telemetry,
			&(strata_session_run){.run_ns = run_ns, .tokens = n},
			err);
	strata_free(logits);
	return st;
}

int strata_cmd_logits(int argc, char **argv)
{
	logits_args a = {0};
	strata_cli_residency r;
	strata_cli_residency_init(&r);
	int rc = parse_args(argc, argv, &a, &r);
	if (rc) {
		strata_cli_residency_fini(&r);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	strata_error err;
	int32_t *ids = NULL;
	uint32_t n = 0;
	strata_session *s = NULL;
	strata_progress bar;
	a.quiet = r.quiet;
	/* --device absent: cuda if one is visible, else cpu (DESIGN.md) */
	if (!r.device_given && strata_backend_device_count("cuda") > 0)
		r.plan.device = STRATA_PLAN_DEVICE_CUDA;
	strata_status st = strata_cli_residency_rates(&r, &err);
	if (st == STRATA_OK)
		st = parse_tokens(a.tokens, &ids, &n, &err);
	if (st == STRATA_OK) {
		strata_session_options so =
			strata_cli_session_options(&r, a.model, a.threads);
		so.positions = so.prefill = n;
		so.load_progress = strata_cli_load_bar_update;
		so.load_progress_user = &bar;
		strata_cli_load_bar_init(&bar, &r);
		st = strata_session_open(&so, &s, &err);
		strata_progress_finish(&bar);
	}
	if (st == STRATA_OK)
		st = compute_and_write(s, ids, n, &a, &err);
	rc = st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
	strata_session_close(s);
	strata_free(ids);
	strata_cli_residency_fini(&r);
	return rc;
}
