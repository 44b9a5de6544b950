/* cmd_serve.c - `strata serve MODEL`: the OpenAI-compatible HTTP server
 * over the continuous scheduler, until SIGTERM or SIGINT, which end it
 * cleanly (in-flight requests finish within --shutdown-grace, the rest are
 * cancelled; exit 0) (layer: cli). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/checkpoint.h"
#include "strata/serve.h"
#include "strata/text.h"

#define DEFAULT_PORT 8080
#define DEFAULT_CONTEXT 4096u

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata serve MODEL [options]\n\n"
		"Serves MODEL over HTTP with OpenAI's API: POST "
		"/v1/completions,\n"
		"POST /v1/chat/completions (stream: server-sent events), GET\n"
		"/v1/models, GET /health, GET /metrics (Prometheus) and a chat\n"
		"page at /. Requests run together through one continuous\n"
		"scheduler (--batch sequences at once). SIGTERM or SIGINT end\n"
		"it cleanly (exit 0).\n\n"
		"options:\n"
		"  --host ADDR           address to listen on (default "
		"127.0.0.1)\n"
		"  --port N              port (default %d; 0 picks a free one, "
		"printed)\n"
		"  --api-key KEY         require 'Authorization: Bearer KEY'\n"
		"  --chat-template FILE  the chat template (default: the "
		"model's)\n"
		"  --name NAME           the model's name in answers (default:\n"
		"                        MODEL's file name)\n"
		"  --max-queue N         requests waiting for a sequence before "
		"503\n"
		"                        (default 64)\n"
		"  --max-tokens N        max_tokens when a request gives none\n"
		"                        (default 256)\n"
		"  --max-body SIZE       largest request body (default 4MiB; "
		"413 past it)\n"
		"  --shutdown-grace S    seconds in-flight requests get to "
		"finish\n"
		"                        after SIGTERM (default 10)\n"
		"  --threads N           compute threads (default: every "
		"processor)\n"
		"  --batch N             sequences running together (default "
		"8)\n",
		DEFAULT_PORT);
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

typedef struct serve_args {
	const char *model, *host, *api_key, *template_file, *name;
	uint64_t port, queue, max_tokens, max_body, threads, grace;
} serve_args;

static int value_option(void *ctx, const char *opt, const char *v,
			bool *known)
{
	serve_args *a = ctx;
	strata_error err;
	*known = true;
	if (!strcmp(opt, "--host"))
		a->host = v;
	else if (!strcmp(opt, "--api-key"))
		a->api_key = v;
	else if (!strcmp(opt, "--chat-template"))
		a->template_file = v;
	else if (!strcmp(opt, "--name"))
		a->name = v;
	else if (!strcmp(opt, "--max-body")) {
		if (strata_size_parse(v, &a->max_body, &err))
			return strata_cli_fail(&err);
	} else if (!strcmp(opt, "--port") || !strcmp(opt, "--max-queue") ||
		   !strcmp(opt, "--max-tokens") ||
		   !strcmp(opt, "--threads") ||
		   !strcmp(opt, "--shutdown-grace")) {
		uint64_t u;
		if (strata_cli_parse_u64(opt, v, &u, &err))
			return strata_cli_fail(&err);
		uint64_t cap = !strcmp(opt, "--port") ? 65535
			       : !strcmp(opt, "--threads") ? 4096
							   : 1u << 24;
		if (u > cap)
			return strata_cli_usage("serve",
						"%s: '%s' is above %llu", opt,
						v, (unsigned long long)cap);
		if (!strcmp(opt, "--port"))
			a->port = u;
		else if (!strcmp(opt, "--max-queue"))
			a->queue = u;
		else if (!strcmp(opt, "--max-tokens"))
			a->max_tokens = u;
		else if (!strcmp(opt, "--threads"))
			a->threads = u;
		else
			a->grace = u;
	} else {
		*known = false;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */

/* The model's name: its path's last part. */
static const char *base_name(const char *path, char *buf, size_t cap)
{
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--;
	size_t b = n;
	while (b > 0 && path[b - 1] != '/')
		b--;
	snprintf(buf, cap, "%.*s", (int)(n - b), path + b);
	return buf;
}

/* --chat-template FILE, else the model's own template; a model without
 * one serves completions only (chat requests get a 400 naming the
 * option). */
static strata_status load_chat(const serve_args *a, bool quiet,
			       const strata_tokenizer *tok,
			       strata_chat_format **out, strata_error *err)
{
	strata_status st = strata_chat_format_load(a->model, a->template_file,
						   tok, out, err);
	if (st == STRATA_E_NOT_FOUND && !a->template_file) {
		if (!quiet)
			fprintf(stderr, "strata serve: %s has no chat "
					"template; /v1/chat/completions needs "
					"--chat-template FILE\n",
				a->model);
		return STRATA_OK;
	}
	return st;
}

/* Blocks the signals that end the server in every thread (the ones made
 * after this inherit it), so only sigwait sees them; a broken connection
 * is an error on its write, not a signal. */
static void block_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static int serve(const serve_args *a, strata_cli_residency *r,
		 sigset_t set)
{
	strata_error err;
	strata_tokenizer *tok = NULL;
	strata_scheduler *sched = NULL;
	strata_server *srv = NULL;
	strata_chat_format *chat = NULL;
	strata_infer_hparams hp;
	strata_status st = strata_tokenizer_load(a->model, &tok, &err);
	if (st == STRATA_OK)
		st = load_chat(a, r->quiet, tok, &chat, &err);
	strata_catalog *cat = NULL;
	if (st == STRATA_OK)
		st = strata_catalog_open(a->model, &cat, &err);
	if (st == STRATA_OK)
		st = strata_infer_hparams_read(a->model, cat, &hp, &err);
	strata_catalog_destroy(cat);
	if (st == STRATA_OK) {
		strata_tokenizer_specials sp;
		strata_tokenizer_get_specials(tok, &sp);
		strata_scheduler_options so = {
			.queue_cap = (uint32_t)a->queue, .eos = sp.eos};
		so.session = (strata_session_options){
			.model_path = a->model, .plan = r->plan,
			.exclude = (const char *const *)r->exclude,
			.exclude_count = r->exclude_count,
			.device_index = r->device_index, .no_map = r->no_map,
			.threads = (uint32_t)a->threads,
			.positions = hp.context < DEFAULT_CONTEXT
					     ? hp.context
					     : DEFAULT_CONTEXT,
			.prefill = 512,
		};
		if (!so.session.plan.shape.batch)
			so.session.plan.shape.batch = 8;
		st = strata_scheduler_create(&so, &sched, &err);
	}
	char name[256];
	if (st == STRATA_OK) {
		strata_server_options o = {
			.host = a->host, .port = (uint16_t)a->port,
			.api_key = a->api_key,
			.model_name = a->name ? a->name
					      : base_name(a->model, name,
							  sizeof name),
			.scheduler = sched, .tokenizer = tok,
			.chat_format = chat, .max_body_bytes = a->max_body,
			.default_max_tokens = (uint32_t)a->max_tokens,
		};
		st = strata_server_create(&o, &srv, &err);
	}
	if (st == STRATA_OK) {
		const char *h = a->host ? a->host : "127.0.0.1";
		bool v6 = strchr(h, ':') != NULL;
		printf("strata serve: listening on http://%s%s%s:%u (%u "
		       "sequences, context %u)\n",
		       v6 ? "[" : "", h, v6 ? "]" : "",
		       (unsigned)strata_server_port(srv),
		       (unsigned)(r->plan.shape.batch ? r->plan.shape.batch
						      : 8),
		       strata_scheduler_context(sched));
		fflush(stdout);
		int sig = 0;
		while (sigwait(&set, &sig) != 0)
			;
		if (!r->quiet)
			fprintf(stderr, "strata serve: %s: finishing "
					"in-flight requests (up to %llu s)\n",
				strsignal(sig), (unsigned long long)a->grace);
		strata_server_quiesce(srv);
		strata_scheduler_drain(sched, a->grace * 1000000000ull);
	}
	strata_server_destroy(srv);
	strata_scheduler_destroy(sched);
	strata_chat_format_destroy(chat);
	strata_tokenizer_destroy(tok);
	return st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
}

int strata_cmd_serve(int argc, char **argv)
{
	serve_args a = {.port = DEFAULT_PORT, .queue = 64, .max_tokens = 256,
			.max_body = (uint64_t)4 << 20, .grace = 10};
	/* before any thread starts (the CUDA driver's included) */
	sigset_t set;
	block_signals(&set);
	strata_cli_residency r;
	strata_cli_residency_init(&r);
	int rc = strata_cli_model_args("serve", argc, argv, &r, help,
				       value_option, &a, &a.model);
	if (rc) {
		strata_cli_residency_fini(&r);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	if (!r.device_given && strata_backend_device_count("cuda") > 0)
		r.plan.device = STRATA_PLAN_DEVICE_CUDA;
	strata_error rerr;
	if (strata_cli_residency_rates(&r, &rerr) != STRATA_OK) {
		strata_cli_residency_fini(&r);
		return strata_cli_fail(&rerr);
	}
	if (a.max_body == 0 || a.queue == 0 || a.max_tokens == 0) {
		strata_cli_residency_fini(&r);
		return strata_cli_usage("serve", "--max-body, --max-queue and "
						 "--max-tokens must be above "
						 "0");
	}
	rc = serve(&a, &r, set);
	strata_cli_residency_fini(&r);
	return rc;
}
