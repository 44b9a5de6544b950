/* cmd_serve.c - `strata serve MODEL`: the OpenAI-compatible HTTP server
 * over the continuous scheduler, until SIGTERM or SIGINT, which end it
 * cleanly (in-flight requests finish within --shutdown-grace, the rest are
 * cancelled; exit 0) (layer: cli). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/gpus.h"
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
		"page at /. Requests run together through a continuous\n"
		"scheduler per replica (--batch sequences at once each), routed\n"
		"over the replicas by their prompt's start. SIGTERM or SIGINT\n"
		"end it cleanly (exit 0).\n\n"
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
		"8)\n"
		"  --gpus all|N|LIST     replicas: all GPUs, the first N, or the\n"
		"                        listed indices (with --device cpu: N "
		"CPU\n"
		"                        replicas)\n"
		"  --replicas-per-device K  K replicas on each of those devices\n"
		"                        (default 1)\n"
		"  --route affinity|round-robin  how requests pick a replica\n"
		"                        (default affinity: home by their "
		"prompt's\n"
		"                        start or prompt_cache_key)\n"
		"  --spill-threshold T   spill a request when its home replica "
		"is\n"
		"                        loaded T above the least (prompt + "
		"max\n"
		"                        tokens in flight; default: the "
		"context)\n"
		"  --prefix-cache SIZE|plan  each replica's prefix cache (0: "
		"none;\n"
		"                        default plan: host memory its plan "
		"leaves)\n",
		DEFAULT_PORT);
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

typedef struct serve_args {
	const char *model, *host, *api_key, *template_file, *name, *gpus;
	uint64_t port, queue, max_tokens, max_body, threads, grace;
	uint64_t per_device, spill, prefix_bytes;
	strata_batch_route route;
} serve_args;

/* --route, --prefix-cache and --gpus (its value kept for later). */
static int routing_option(serve_args *a, const char *opt, const char *v,
			  bool *known)
{
	strata_error err;
	*known = true;
	if (!strcmp(opt, "--gpus")) {
		a->gpus = v;
	} else if (!strcmp(opt, "--route")) {
		if (!strcmp(v, "affinity"))
			a->route = STRATA_BATCH_ROUTE_AFFINITY;
		else if (!strcmp(v, "round-robin"))
			a->route = STRATA_BATCH_ROUTE_ROUND_ROBIN;
		else
			return strata_cli_usage("serve", "--route: '%s' is not "
						"affinity or round-robin", v);
	} else if (!strcmp(opt, "--prefix-cache")) {
		if (!strcmp(v, "plan"))
			a->prefix_bytes = STRATA_BATCH_PREFIX_CACHE_FROM_PLAN;
		else if (strata_size_parse(v, &a->prefix_bytes, &err) ||
			 a->prefix_bytes == STRATA_BATCH_PREFIX_CACHE_FROM_PLAN)
			return strata_cli_usage("serve", "--prefix-cache: '%s' "
						"is not plan or a size", v);
	} else {
		*known = false;
	}
	return 0;
}

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
	else if (!strcmp(opt, "--gpus") || !strcmp(opt, "--route") ||
		 !strcmp(opt, "--prefix-cache"))
		return routing_option(a, opt, v, known);
	else if (!strcmp(opt, "--max-body")) {
		if (strata_size_parse(v, &a->max_body, &err))
			return strata_cli_fail(&err);
	} else if (!strcmp(opt, "--port") || !strcmp(opt, "--max-queue") ||
		   !strcmp(opt, "--max-tokens") ||
		   !strcmp(opt, "--threads") ||
		   !strcmp(opt, "--shutdown-grace") ||
		   !strcmp(opt, "--replicas-per-device") ||
		   !strcmp(opt, "--spill-threshold")) {
		uint64_t u;
		if (strata_cli_parse_u64(opt, v, &u, &err))
			return strata_cli_fail(&err);
		uint64_t cap = !strcmp(opt, "--port") ? 65535
			       : !strcmp(opt, "--threads") ? 4096
			       : !strcmp(opt, "--replicas-per-device")
				       ? STRATA_BATCH_MAX_REPLICAS
			       : !strcmp(opt, "--spill-threshold") ? UINT64_MAX
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
		else if (!strcmp(opt, "--replicas-per-device"))
			a->per_device = u;
		else if (!strcmp(opt, "--spill-threshold") && u == 0)
			return strata_cli_usage("serve", "--spill-threshold "
						"must be above 0");
		else if (!strcmp(opt, "--spill-threshold"))
			a->spill = u;
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

/* The replicas: one scheduler per --gpus device (K each with
 * --replicas-per-device), and the router over them. */
typedef struct replicas {
	strata_cli_gpus d;
	uint32_t count;
	strata_scheduler *s[STRATA_BATCH_MAX_REPLICAS];
	const char *names[STRATA_BATCH_MAX_REPLICAS];
	strata_router *router;
} replicas;

/* --gpus as batch reads it (gpus.c): cpu:i on the CPU, cuda:K on CUDA;
 * without it one device, --device's. 0 or an exit code. */
static int parse_gpus(const serve_args *a, const strata_cli_residency *r,
		      replicas *rp)
{
	bool cuda = r->plan.device == STRATA_PLAN_DEVICE_CUDA;
	strata_error err;
	if (!a->gpus)
		strata_cli_gpus_single(cuda, cuda ? r->device_index : 0, &rp->d);
	else if (strata_cli_gpus_parse(a->gpus, cuda,
				       cuda ? strata_backend_device_count("cuda")
					    : 1,
				       true, &rp->d, &err))
		return strata_cli_fail(&err);
	else if (!cuda && rp->d.count > 1 && !r->device_given)
		return strata_cli_usage("serve", "--gpus %s: CPU replicas are "
					"made only with --device cpu", a->gpus);
	uint64_t n = (uint64_t)rp->d.count * (a->per_device ? a->per_device : 1);
	if (n > STRATA_BATCH_MAX_REPLICAS)
		return strata_cli_usage("serve", "%llu replicas: at most %u",
					(unsigned long long)n,
					STRATA_BATCH_MAX_REPLICAS);
	rp->count = (uint32_t)n;
	return 0;
}

/* Opens every replica's scheduler (its session on its device, the host
 * budget split between them as batch splits it) and the router. */
static strata_status open_replicas(const serve_args *a,
				   const strata_cli_residency *r,
				   const strata_infer_hparams *hp, int32_t eos,
				   replicas *rp, strata_error *err)
{
	uint32_t per = a->per_device ? (uint32_t)a->per_device : 1;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t threads = a->threads ? (uint32_t)a->threads
			   : rp->count == 1 ? 0
			   : cpus > rp->count ? (uint32_t)(cpus / rp->count)
					      : 1;
	strata_status st = STRATA_OK;
	for (uint32_t i = 0; st == STRATA_OK && i < rp->count; i++) {
		strata_scheduler_options so = {
			.queue_cap = (uint32_t)a->queue, .eos = eos,
			.prefix_cache_bytes = a->prefix_bytes};
		so.session = (strata_session_options){
			.model_path = a->model, .plan = r->plan,
			.exclude = (const char *const *)r->exclude,
			.exclude_count = r->exclude_count,
			.device_index = rp->d.index[i / per],
			.no_map = r->no_map, .threads = threads,
			.precision = r->precision,
			.positions = hp->context < DEFAULT_CONTEXT
					     ? hp->context
					     : DEFAULT_CONTEXT,
			.prefill = 512,
		};
		if (!so.session.plan.shape.batch)
			so.session.plan.shape.batch = 8;
		if (rp->count > 1 && !so.session.plan.host_shared_by)
			so.session.plan.host_shared_by = rp->count;
		rp->names[i] = rp->d.ptrs[i / per];
		st = strata_scheduler_create(&so, &rp->s[i], err);
		if (st && rp->count > 1)
			strata_error_prefix(err, "replica %u (%s)", i,
					    rp->names[i]);
	}
	if (st == STRATA_OK) {
		strata_router_options ro = {.schedulers = rp->s,
					    .names = rp->names,
					    .count = rp->count,
					    .spill_threshold = a->spill,
					    .route = a->route};
		st = strata_router_create(&ro, &rp->router, err);
	}
	return st;
}

static void close_replicas(replicas *rp)
{
	strata_router_destroy(rp->router);
	for (uint32_t i = 0; i < rp->count; i++)
		strata_scheduler_destroy(rp->s[i]);
}

/* Until SIGTERM / SIGINT: then no new connection, in-flight requests get
 * --shutdown-grace on every replica at once, the rest are cancelled. */
static void run_until_signal(const serve_args *a, const strata_cli_residency *r,
			     const replicas *rp, strata_server *srv,
			     sigset_t set)
{
	const char *h = a->host ? a->host : "127.0.0.1";
	bool v6 = strchr(h, ':') != NULL;
	printf("strata serve: listening on http://%s%s%s:%u (%u sequences, "
	       "context %u, %u replica%s:",
	       v6 ? "[" : "", h, v6 ? "]" : "",
	       (unsigned)strata_server_port(srv),
	       (unsigned)(r->plan.shape.batch ? r->plan.shape.batch : 8),
	       strata_router_context(rp->router), rp->count,
	       rp->count == 1 ? "" : "s");
	for (uint32_t i = 0; i < rp->count; i++)
		printf(" %s", rp->names[i]);
	printf(")\n");
	fflush(stdout);
	int sig = 0;
	while (sigwait(&set, &sig) != 0)
		;
	if (!r->quiet)
		fprintf(stderr, "strata serve: %s: finishing in-flight "
				"requests (up to %llu s)\n",
			strsignal(sig), (unsigned long long)a->grace);
	strata_server_quiesce(srv);
	strata_router_drain(rp->router, a->grace * 1000000000ull);
}

static int serve(const serve_args *a, strata_cli_residency *r, replicas *rp,
		 sigset_t set)
{
	strata_error err;
	strata_tokenizer *tok = NULL;
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
		st = open_replicas(a, r, &hp, sp.eos, rp, &err);
	}
	char name[256];
	if (st == STRATA_OK) {
		strata_server_options o = {
			.host = a->host, .port = (uint16_t)a->port,
			.api_key = a->api_key,
			.model_name = a->name ? a->name
					      : base_name(a->model, name,
							  sizeof name),
			.router = rp->router, .tokenizer = tok,
			.chat_format = chat, .max_body_bytes = a->max_body,
			.default_max_tokens = (uint32_t)a->max_tokens,
			.precision = r->precision,
		};
		st = strata_server_create(&o, &srv, &err);
	}
	if (st == STRATA_OK)
		run_until_signal(a, r, rp, srv, set);
	strata_server_destroy(srv);
	close_replicas(rp);
	strata_chat_format_destroy(chat);
	strata_tokenizer_destroy(tok);
	return st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
}

int strata_cmd_serve(int argc, char **argv)
{
	serve_args a = {.port = DEFAULT_PORT, .queue = 64, .max_tokens = 256,
			.max_body = (uint64_t)4 << 20, .grace = 10,
			.per_device = 1,
			.prefix_bytes = STRATA_BATCH_PREFIX_CACHE_FROM_PLAN};
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
	if (a.max_body == 0 || a.queue == 0 || a.max_tokens == 0 ||
	    a.per_device == 0) {
		strata_cli_residency_fini(&r);
		return strata_cli_usage("serve", "--max-body, --max-queue, "
						 "--max-tokens and "
						 "--replicas-per-device must "
						 "be above 0");
	}
	replicas rp = {0};
	rc = parse_gpus(&a, &r, &rp);
	if (rc == 0)
		rc = serve(&a, &r, &rp, set);
	strata_cli_residency_fini(&r);
	return rc;
}
