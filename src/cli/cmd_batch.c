/* cmd_batch.c - `strata batch MODEL`: generation requests as JSONL on
 * stdin, spread over replicas of the model by the shard allocator, results
 * as JSONL on stdout in input order, each written as soon as it and all
 * before it are done (layer: cli). docs/batch.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/batch_input.h"
#include "cli/commands.h"
#include "cli/gpus.h"
#include "cli/text_out.h"
#include "strata/backend.h"

#define DEFAULT_NEW_TOKENS 256

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata batch MODEL [options] < requests.jsonl\n\n"
		"Runs one generation per input line, {\"id\", \"prompt\" or\n"
		"\"messages\", optional \"max_tokens\", \"temperature\", \"top_p\",\n"
		"\"top_k\", \"min_p\", \"seed\", \"stop\", \"key\"} (OpenAI's names;\n"
		"other fields are ignored), over replicas of the model, one per\n"
		"device; writes one JSON result per request to stdout in input\n"
		"order. Every line is checked before anything runs: a bad line\n"
		"runs nothing.\n\n"
		"options:\n"
		"  --gpus all|N|LIST     replicas: all GPUs, the first N, or the\n"
		"                        listed indices (0,2); with --device cpu,\n"
		"                        N (or the LIST's length) CPU replicas\n"
		"                        (default: one, on --device's device)\n"
		"  --spill-threshold T   spill a request when its home replica is\n"
		"                        loaded more than T (prompt + max tokens)\n"
		"                        above the least loaded (default: twice\n"
		"                        the largest request)\n"
		"  --prefix-cache SIZE|plan  KV of earlier prompts kept per\n"
		"                        replica for reuse, at most SIZE (0 off)\n"
		"                        or (default: plan) the host memory the\n"
		"                        replica's plan leaves spare\n"
		"  --route affinity|follow|round-robin  how requests pick a replica\n"
		"                        (default affinity: home by key)\n"
		"  --batch B|auto        requests each replica runs together: every\n"
		"                        forward pass carries a token of each\n"
		"                        decoding and chunks of the prompts of\n"
		"                        those joining (one pass of streamed\n"
		"                        weights serves B); 1 to %u (default 1);\n"
		"                        auto: the batch of most predicted\n"
		"                        tokens/s (strata plan's best_batch)\n"
		"  -n TOKENS             default max_tokens (default %d)\n"
		"  --temperature T       default temperature (default 0.8)\n"
		"  --stop STR            default stop string (repeatable)\n"
		"  --chat-template FILE  the template for \"messages\" instead of\n"
		"                        the model's own\n"
		"  --seed S              default seed (default: a new one each\n"
		"                        run, printed on stderr)\n"
		"  --threads N           compute threads per replica (default:\n"
		"                        processors / replicas)\n"
		"  --telemetry FILE      write the telemetry document with one\n"
		"                        devices[] entry per replica and the router\n",
		STRATA_FORWARD_MAX_SEQUENCES, DEFAULT_NEW_TOKENS);
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

typedef struct batch_args {
	const char *model, *gpus, *telemetry, *chat_template;
	uint64_t n, threads, spill, prefix_bytes;
	bool spill_given, seed_given;
	bool batch_auto; /* --batch auto */
	strata_batch_route route;
	strata_sampler_params sp;
	strata_cli_stops stops;
} batch_args;

/* Options with a value; 0 when handled, else an exit code. */
static int value_option(void *ctx, const char *opt, const char *v,
			bool *known)
{
	batch_args *a = ctx;
	strata_error err;
	uint64_t u;
	*known = true;
	if (!strcmp(opt, "--gpus")) {
		a->gpus = v;
	} else if (!strcmp(opt, "--stop")) {
		return strata_cli_stops_add("batch", &a->stops, v);
	} else if (!strcmp(opt, "--chat-template")) {
		a->chat_template = v;
	} else if (!strcmp(opt, "--telemetry")) {
		a->telemetry = v;
		return strata_cli_output(opt, v);
	} else if (!strcmp(opt, "--route")) {
		if (!strcmp(v, "affinity"))
			a->route = STRATA_BATCH_ROUTE_AFFINITY;
		else if (!strcmp(v, "round-robin"))
			a->route = STRATA_BATCH_ROUTE_ROUND_ROBIN;
		else if (!strcmp(v, "follow"))
			a->route = STRATA_BATCH_ROUTE_FOLLOW;
		else
			return strata_cli_usage("batch", "--route: '%s' is not "
						"affinity, follow or "
						"round-robin", v);
	} else if (!strcmp(opt, "--prefix-cache")) {
		if (!strcmp(v, "plan"))
			a->prefix_bytes = STRATA_BATCH_PREFIX_CACHE_FROM_PLAN;
		else if (strata_size_parse(v, &a->prefix_bytes, &err) ||
			 a->prefix_bytes == STRATA_BATCH_PREFIX_CACHE_FROM_PLAN)
			return strata_cli_usage("batch", "--prefix-cache: '%s' "
						"is not plan or a size", v);
	} else if (!strcmp(opt, "--temperature")) {
		return strata_cli_parse_float("batch", opt, v, 0, 1e6f,
					      &a->sp.temperature);
	} else if (!strcmp(opt, "-n") || !strcmp(opt, "--seed") ||
		   !strcmp(opt, "--threads") ||
		   !strcmp(opt, "--spill-threshold")) {
		if (strata_cli_parse_u64(opt, v, &u, &err))
			return strata_cli_fail(&err);
		if (!strcmp(opt, "-n"))
			a->n = u;
		else if (!strcmp(opt, "--seed"))
			a->sp.seed = u, a->seed_given = true;
		else if (!strcmp(opt, "--threads"))
			a->threads = u;
		else
			a->spill = u, a->spill_given = true;
		if (a->n > (1u << 24) || a->threads > 4096)
			return strata_cli_usage("batch", "%s: '%s' is too large",
						opt, v);
	} else {
		*known = false;
	}
	return 0;
}

/* --batch auto (or --batch=auto) is batch's own: taken out of argv
 * (kept: the residency options parse every other --batch) into a copy
 * the caller frees. NULL on allocation failure. */
static char **take_batch_auto(int argc, char **argv, int *out_argc,
			      bool *found)
{
	char **v = strata_calloc(argc ? (size_t)argc : 1, sizeof *v);
	int n = 0;
	*found = false;
	for (int i = 0; v && i < argc; i++) {
		if (i + 1 < argc && !strcmp(argv[i], "--batch") &&
		    !strcmp(argv[i + 1], "auto")) {
			*found = true;
			i++;
			continue;
		}
		if (!strcmp(argv[i], "--batch=auto")) {
			*found = true;
			continue;
		}
		v[n++] = argv[i];
	}
	*out_argc = n;
	return v;
}

/* 0: parsed; -1: help shown; else the exit code. */
static int parse_args(int argc, char **argv, batch_args *a,
		      strata_cli_residency *r)
{
	int n;
	char **v = take_batch_auto(argc, argv, &n, &a->batch_auto);
	if (!v) {
		strata_error err;
		strata_fail(&err, STRATA_E_NOMEM, "free memory",
			    "cannot copy the arguments");
		return strata_cli_fail(&err);
	}
	int rc = strata_cli_model_args("batch", n, v, r, help, value_option,
				       a, &a->model);
	strata_free(v);
	if (rc == 0 && a->batch_auto && r->plan.shape.batch)
		return strata_cli_usage("batch", "--batch auto and --batch "
					"%llu: give one",
					(unsigned long long)r->plan.shape.batch);
	if (rc)
		return rc;
	if (r->plan.shape.batch > STRATA_FORWARD_MAX_SEQUENCES)
		return strata_cli_usage("batch", "--batch %llu: at most %u "
					"sequences per forward pass",
					(unsigned long long)r->plan.shape.batch,
					STRATA_FORWARD_MAX_SEQUENCES);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Devices                                                                  */
/* ------------------------------------------------------------------------ */

/* --gpus all|N|LIST into replicas (gpus.c): cpu:i on the CPU (N replicas,
 * or one per LIST entry), cuda:K on CUDA (all visible, the first N, or the
 * listed K, each visible). Without --gpus one replica, on --device's
 * device. 0 or an exit code. */
static int parse_gpus(const char *spec, const strata_cli_residency *r,
		      strata_cli_gpus *d)
{
	bool cuda = r->plan.device == STRATA_PLAN_DEVICE_CUDA;
	if (!spec) {
		strata_cli_gpus_single(cuda, cuda ? r->device_index : 0, d);
		return 0;
	}
	strata_error err;
	uint32_t visible = cuda ? strata_backend_device_count("cuda") : 1;
	if (strata_cli_gpus_parse(spec, cuda, visible, true, d, &err))
		return strata_cli_fail(&err);
	if (!cuda && d->count > 1 && !r->device_given)
		return strata_cli_usage("batch", "--gpus %s: CPU replicas are "
					"made only with --device cpu", spec);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                   */
/* ------------------------------------------------------------------------ */

/* What the results are written with. */
typedef struct out_ctx {
	const batch_input *in;
	const strata_tokenizer *tok;
	const strata_cli_gpus *d;
	const strata_cli_stops *stops; /* --stop: for requests without "stop" */
	int32_t chat_eos; /* ends a "messages" request's text; -1: none */
} out_ctx;

/* One result's text and where it ended. */
typedef struct result_text {
	strata_cli_text_out o;
	uint32_t used;	    /* tokens up to the end of the text */
	const char *finish; /* OpenAI's finish_reason: "stop" or "length" */
} result_text;

/* One result line as a jansson object (NULL on allocation failure). */
static json_t *result_json(const out_ctx *c, size_t i,
			   const strata_batch_result *r, const result_text *t)
{
	const batch_item *it = &c->in->items[i];
	size_t id_len;
	const char *id_text = batch_input_id(c->in, i, &id_len);
	json_t *o = json_object(), *toks = json_array(), *tm = json_object();
	json_t *id = json_loadb(id_text, id_len, JSON_DECODE_ANY, NULL);
	if (!o || !toks || !tm || !id) {
		json_decref(o);
		json_decref(toks);
		json_decref(tm);
		json_decref(id);
		return NULL;
	}
	int bad = 0;
	for (uint32_t k = 0; k < t->used; k++)
		bad |= json_array_append_new(toks, json_integer(r->tokens[k]));
	const strata_generate_stats *g = &r->gen;
	bad |= json_object_set_new(tm, "queue_s", json_real(r->queue_ns / 1e9));
	bad |= json_object_set_new(tm, "prompt_s", json_real(g->prompt_ns / 1e9));
	bad |= json_object_set_new(tm, "first_token_s",
				   json_real(g->first_token_ns / 1e9));
	bad |= json_object_set_new(tm, "generate_s",
				   json_real(g->generate_ns / 1e9));
	bad |= json_object_set_new(o, "id", id);
	bad |= json_object_set_new(o, "text", json_stringn(t->o.text ? t->o.text
								      : "",
							     t->o.len));
	bad |= json_object_set_new(o, "tokens", toks);
	bad |= json_object_set_new(o, "finish_reason", json_string(t->finish));
	bad |= json_object_set_new(o, "device", json_integer(r->device));
	bad |= json_object_set_new(o, "device_name",
				   json_string(c->d->names[r->device]));
	bad |= json_object_set_new(o, "home_device",
				   json_integer(r->home_device));
	bad |= json_object_set_new(o, "resident_device",
				   json_integer(r->resident_device));
	bad |= json_object_set_new(o, "prompt_tokens",
				   json_integer(it->req.n_prompt));
	bad |= json_object_set_new(o, "generated_tokens",
				   json_integer(r->gen.generated_tokens));
	bad |= json_object_set_new(o, "prefix_tokens",
				   json_integer(r->prefix_tokens));
	bad |= json_object_set_new(o, "stopped_at_eos",
				   json_boolean(g->stopped_at_eos));
	bad |= json_object_set_new(o, "timings", tm);
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* Text of one result through the streaming decoder, the way `strata run`
 * prints it (the continuation of the prompt's text), ended at the first
 * of its stop strings and, for a "messages" request, at the chat
 * template's end of turn. The runner ended the request at the token that
 * completed the stop (request_stops), so the cut falls on its last token;
 * the search here finds it where it is and keeps the tokens up to it. */
static strata_status detok(const out_ctx *c, size_t i,
			   const strata_batch_result *r, result_text *t,
			   strata_error *err)
{
	const strata_batch_request *q = &c->in->items[i].req;
	const char *own[STRATA_STOP_MAX_COUNT];
	size_t lens[STRATA_STOP_MAX_COUNT];
	long n = batch_input_stops(c->in, i, own, lens);
	strata_status st = strata_cli_text_out_init(
		&t->o, c->tok, q->prompt, q->n_prompt,
		n < 0 ? c->stops->v : own, n < 0 ? NULL : lens,
		n < 0 ? c->stops->count : (size_t)n, NULL, true, err);
	bool chat = c->in->items[i].chat;
	t->used = r->n_tokens;
	t->finish = r->gen.stopped_at_eos || r->stopped ? "stop" : "length";
	for (uint32_t k = 0; st == STRATA_OK && k < r->n_tokens; k++) {
		if (chat && r->tokens[k] == c->chat_eos) {
			t->used = k;
			t->finish = "stop";
			break;
		}
		st = strata_cli_text_out_token(&t->o, r->tokens[k], err);
		if (st == STRATA_E_INFER_STOP) {
			st = STRATA_OK;
			t->used = k + 1;
			t->finish = "stop";
			break;
		}
	}
	if (st == STRATA_OK)
		st = strata_cli_text_out_finish(&t->o, err);
	return st;
}

/* Writes each result as one JSON line as soon as it and every request
 * before it are done (strata_batch_options.on_result), so what is done
 * is on stdout even if a later request fails the run. */
static strata_status write_one(void *user, size_t i,
			       const strata_batch_result *r, strata_error *err)
{
	const out_ctx *c = user;
	result_text t = {0};
	strata_status st = detok(c, i, r, &t, err);
	json_t *o = st ? NULL : result_json(c, i, r, &t);
	if (st == STRATA_OK && !o)
		st = strata_fail(err, STRATA_E_NOMEM, "free memory",
				 "cannot build result %zu", i);
	if (st == STRATA_OK &&
	    /* 9 digits: timings to the nanosecond, not %.17g noise */
	    (json_dumpf(o, stdout,
			JSON_COMPACT | JSON_ENSURE_ASCII |
				JSON_REAL_PRECISION(9)) ||
	     fputc('\n', stdout) == EOF || fflush(stdout)))
		st = strata_fail(err, STRATA_E_IO, "check where stdout goes",
				 "cannot write the results");
	json_decref(o);
	strata_cli_text_out_fini(&t.o);
	return st;
}

/* A replica that failed and whose work moved on is worth a line: the
 * results are complete, but a device is misbehaving. */
static void warn_failures(const strata_batch *b, const strata_cli_gpus *d)
{
	for (uint32_t i = 0; i < strata_batch_replicas(b); i++) {
		strata_batch_replica_stats r;
		strata_batch_replica_get_stats(b, i, &r);
		if (r.failures)
			fprintf(stderr,
				"strata: warning: replica %u (%s) failed; its "
				"%llu unfinished requests ran on the others\n",
				i, d->names[i],
				(unsigned long long)r.moved_away);
	}
}

static void print_summary(const strata_batch *b, size_t requests,
			  uint64_t gen, uint64_t wall_ns, uint64_t seed)
{
	strata_batch_totals s;
	strata_batch_get_totals(b, &s);
	double t = wall_ns / 1e9;
	fprintf(stderr,
		"strata: batch of %zu request%s on %u replica%s (%s) in %.3f s "
		"(%.2f requests/s, %.1f generated tokens/s); home %llu of "
		"%llu; prefix cache hits %llu of %llu; --batch %u%s, %.2f "
		"sequences per decode step, %llu weight passes; seed %llu\n",
		requests, requests == 1 ? "" : "s", strata_batch_replicas(b),
		strata_batch_replicas(b) == 1 ? "" : "s",
		strata_batch_route_name(strata_batch_route_of(b)), t,
		t > 0 ? requests / t : 0.0, t > 0 ? gen / t : 0.0,
		(unsigned long long)s.routed_home, (unsigned long long)s.routed,
		(unsigned long long)s.prefix_hits,
		(unsigned long long)s.prefix_lookups, strata_batch_sequences(b),
		strata_batch_sequences_auto(b) ? " (auto: the plan's best)" : "",
		s.decode_steps ? (double)s.decode_rows / s.decode_steps : 0.0,
		(unsigned long long)s.passes, (unsigned long long)seed);
}

/* ------------------------------------------------------------------------ */

/* The positions one forward pass takes (the session's prefill chunk, which
 * it caps at 512): a prompt of every request of a full batch at once, B x
 * the longest prompt, so the prompts of the requests that join together
 * cost one pass of the weights beside the others' decode tokens. With
 * --batch auto, *auto_max is the most the plan may pick: the requests per
 * replica (more slots than requests would stay empty), at most the
 * forward pass's most sequences. */
static uint32_t step_positions(const batch_args *a,
			       const strata_cli_residency *r,
			       const strata_cli_gpus *d, size_t requests,
			       uint64_t longest, uint32_t *auto_max)
{
	uint64_t b = r->plan.shape.batch ? r->plan.shape.batch : 1;
	*auto_max = 0;
	if (a->batch_auto) {
		uint64_t per = (requests + d->count - 1) / d->count;
		b = per < 1 ? 1
		    : per > STRATA_FORWARD_MAX_SEQUENCES
			    ? STRATA_FORWARD_MAX_SEQUENCES
			    : per;
		*auto_max = (uint32_t)b;
	}
	uint64_t p = b * longest;
	return (uint32_t)(p < 512 ? p : longest > 512 ? longest : 512);
}

/* The requests' ends (a window's): every request's stop strings, its own
 * "stop" or else --stop, in one array, and for each request needing one,
 * its strata_batch_ends. */
typedef struct request_ends {
	const char **sv;
	size_t *sl;
	strata_batch_ends *e;
	bool *any; /* request i has a stop string or a stop token */
} request_ends;

static void request_ends_fini(request_ends *re)
{
	strata_free(re->sv);
	strata_free(re->sl);
	strata_free(re->e);
	strata_free(re->any);
	memset(re, 0, sizeof *re);
}

/* The requests to run: the input's, each with its stop strings and, for a
 * "messages" request, the template's end of turn as its stop token, so
 * the runner ends each at the step its text is cut at. */
static strata_status request_stops(const batch_input *in,
				   const strata_cli_stops *dflt,
				   int32_t chat_eos, strata_batch_request *reqs,
				   request_ends *re, strata_error *err)
{
	const char *own[STRATA_STOP_MAX_COUNT];
	size_t lens[STRATA_STOP_MAX_COUNT], total = 0;
	for (size_t i = 0; i < in->count; i++) {
		long n = batch_input_stops(in, i, own, lens);
		total += n < 0 ? dflt->count : (size_t)n;
	}
	re->e = strata_calloc_or_error(in->count, sizeof *re->e,
				       "request ends", err);
	re->any = re->e ? strata_calloc_or_error(in->count, sizeof *re->any,
						 "request ends", err)
			: NULL;
	if (!re->any)
		return STRATA_E_NOMEM;
	re->sv = re->e && total ? strata_calloc_or_error(
					  total, sizeof *re->sv,
					  "stop strings", err)
				: NULL;
	re->sl = re->sv ? strata_calloc_or_error(total, sizeof *re->sl,
						 "stop string lengths", err)
			: NULL;
	if (!re->e || (total && !re->sl))
		return STRATA_E_NOMEM;
	for (size_t i = 0, at = 0; i < in->count; i++) {
		reqs[i] = in->items[i].req;
		long n = batch_input_stops(in, i, own, lens);
		size_t k = n < 0 ? dflt->count : (size_t)n;
		for (size_t j = 0; j < k; j++) {
			re->sv[at + j] = n < 0 ? dflt->v[j] : own[j];
			re->sl[at + j] = n < 0 ? strlen(dflt->v[j]) : lens[j];
		}
		strata_batch_ends *e = &re->e[i];
		*e = (strata_batch_ends){
			.stops = k ? re->sv + at : NULL,
			.stop_lens = k ? re->sl + at : NULL,
			.n_stops = (uint32_t)k,
			.has_stop_token = in->items[i].chat && chat_eos >= 0,
			.stop_token = chat_eos};
		re->any[i] = k || e->has_stop_token;
		at += k;
	}
	return STRATA_OK;
}

/* strata_batch_options.ends_of over request_stops' table. */
static const strata_batch_ends *ends_of(void *user, size_t i)
{
	const request_ends *re = user;
	return re->any[i] ? &re->e[i] : NULL;
}

/* Requests parsed per window (batch_source_next): enough to keep every
 * replica's slots and queue fed many times over, so the drain at a
 * window's end costs little, and few enough that a window's parsed state
 * and results stay small whatever the input's length. */
static size_t window_of(const strata_batch *b)
{
	size_t w = (size_t)strata_batch_replicas(b) *
		   strata_batch_sequences(b) * 64;
	return w > 4096 ? w : 4096;
}

/* What the windows' runs add up to. */
typedef struct run_totals {
	uint64_t tokens;    /* positions computed and generated */
	uint64_t generated; /* tokens generated */
} run_totals;

/* The source's requests, a window at a time: each window parsed, run to
 * its end (results streamed in input order) and dropped before the next. */
static strata_status run_windows(strata_batch *b, batch_source *src,
				 const batch_input_options *bo, out_ctx *w,
				 request_ends *ends, run_totals *t,
				 strata_error *err)
{
	size_t window = window_of(b);
	batch_input in = {0};
	strata_batch_result *res = strata_calloc_or_error(
		window, sizeof *res, "results", err);
	strata_batch_request *reqs = res ? strata_calloc_or_error(
		window, sizeof *reqs, "requests", err) : NULL;
	strata_status st = reqs ? STRATA_OK : STRATA_E_NOMEM;
	while (st == STRATA_OK &&
	       (st = batch_source_next(bo, src, window, &in, err)) ==
		       STRATA_OK &&
	       in.count) {
		w->in = &in;
		request_ends_fini(ends);
		st = request_stops(&in, w->stops, w->chat_eos, reqs, ends, err);
		if (st == STRATA_OK)
			st = strata_batch_run(b, reqs, in.count, res, NULL, err);
		size_t bad = strata_batch_failed_request(b);
		if (st == STRATA_E_INFER_REPLICA && bad < in.count)
			strata_error_prefix(err, "line %llu",
					    (unsigned long long)in.items[bad]
						    .line);
		for (size_t i = 0; st == STRATA_OK && i < in.count; i++) {
			t->tokens += res[i].gen.prompt_tokens -
				     res[i].prefix_tokens + res[i].n_tokens;
			t->generated += res[i].n_tokens;
		}
		strata_batch_results_free(res, in.count);
	}
	w->in = NULL;
	request_ends_fini(ends);
	batch_input_fini(&in);
	strata_free(res);
	strata_free(reqs);
	return st;
}

static strata_status run_batch(const batch_args *a, strata_cli_residency *r,
			       const strata_cli_gpus *d, batch_source *src,
			       const batch_input_options *bo,
			       int32_t chat_eos, strata_error *err)
{
	strata_batch_options o = {
		.session = {.model_path = a->model, .plan = r->plan,
			    .exclude = (const char *const *)r->exclude,
			    .exclude_count = r->exclude_count,
			    .no_map = r->no_map, .precision = r->precision},
		.replicas = d->count,
		.prefix_cache_bytes = a->prefix_bytes,
		.route = a->route,
		.device_indices = d->index,
	};
	out_ctx w = {.tok = bo->tok, .d = d, .stops = &a->stops,
		     .chat_eos = chat_eos};
	o.on_result = write_one;
	o.on_result_user = &w;
	o.tokenizer = bo->tok;
	request_ends ends = {0}; /* each window's, filled before its run */
	o.ends_of = ends_of;
	o.ends_user = &ends;
	o.session.positions = (uint32_t)src->positions;
	o.session.prefill = step_positions(a, r, d, src->count, src->prefill,
					   &o.session.batch_auto_max);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	o.session.threads = a->threads ? (uint32_t)a->threads
			    : cpus > d->count ? (uint32_t)(cpus / d->count)
					      : 1;
	/* the largest request's cost is prompt + max_tokens: positions */
	o.spill_threshold = a->spill_given ? a->spill : 2 * src->positions;
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(bo->tok, &sp);
	o.eos = sp.eos;
	strata_batch *b = NULL;
	run_totals t = {0};
	strata_status st = strata_batch_create(&o, &b, err);
	uint64_t t0 = strata_now_ns();
	if (st == STRATA_OK)
		st = run_windows(b, src, bo, &w, &ends, &t, err);
	uint64_t wall = strata_now_ns() - t0;
	if (st == STRATA_OK && !r->quiet) {
		warn_failures(b, d);
		print_summary(b, src->count, t.generated, wall, a->sp.seed);
	}
	strata_session_run run = {.run_ns = wall, .tokens = t.tokens,
				  .has_seed = true, .seed = a->sp.seed};
	if (st == STRATA_OK && a->telemetry)
		st = strata_batch_write_telemetry(b, a->telemetry, d->ptrs, &run,
						  err);
	strata_batch_destroy(b);
	return st;
}

/* The model's chat format for "messages" (or --chat-template's): a
 * model without one is an error only for the lines that need it, unless
 * --chat-template was given and fails. *eos: the id of its eos text. */
static strata_status load_chat(const batch_args *a, const strata_tokenizer *tok,
			       strata_chat_format **f, batch_input_options *bo,
			       int32_t *eos, strata_error *err)
{
	strata_status st = strata_chat_format_load(a->model, a->chat_template,
						   tok, f, err);
	if (st && a->chat_template)
		return st;
	if (st) {
		bo->chat_error = *err;
		return STRATA_OK;
	}
	bo->chat = *f;
	const char *e = strata_chat_format_eos(*f);
	*eos = e ? strata_tokenizer_find(tok, e, strlen(e)) : -1;
	return STRATA_OK;
}

int strata_cmd_batch(int argc, char **argv)
{
	batch_args a = {.n = DEFAULT_NEW_TOKENS,
			.prefix_bytes = STRATA_BATCH_PREFIX_CACHE_FROM_PLAN};
	strata_sampler_params_default(&a.sp);
	strata_cli_residency r;
	strata_cli_residency_init(&r);
	strata_cli_gpus d;
	int rc = parse_args(argc, argv, &a, &r);
	/* as `strata run`: CUDA when a device is visible, unless told */
	if (rc == 0 && !r.device_given && strata_backend_device_count("cuda"))
		r.plan.device = STRATA_PLAN_DEVICE_CUDA;
	if (rc == 0)
		rc = parse_gpus(a.gpus, &r, &d);
	if (rc) {
		strata_cli_residency_fini(&r);
		strata_cli_stops_fini(&a.stops);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	/* 63 bits: results and telemetry are read by JSON libraries that
	 * hold integers as int64 (jansson) */
	if (!a.seed_given)
		a.sp.seed = strata_random_seed() & INT64_MAX;
	strata_error err;
	strata_tokenizer *tok = NULL;
	strata_chat_format *chat = NULL;
	int32_t chat_eos = -1;
	batch_source src = {0};
	batch_input_options bo = {.sampler = a.sp, .default_max_tokens = a.n};
	strata_status st = strata_cli_residency_rates(&r, &err);
	if (st == STRATA_OK)
		st = strata_tokenizer_load(a.model, &tok, &err);
	if (st == STRATA_OK)
		st = load_chat(&a, tok, &chat, &bo, &chat_eos, &err);
	if (st == STRATA_OK) {
		bo.tok = tok;
		st = batch_source_read(&bo, &src, &err);
	}
	if (st == STRATA_OK)
		st = run_batch(&a, &r, &d, &src, &bo, chat_eos, &err);
	rc = st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
	batch_source_fini(&src);
	strata_chat_format_destroy(chat);
	strata_tokenizer_destroy(tok);
	strata_cli_residency_fini(&r);
	strata_cli_stops_fini(&a.stops);
	return rc;
}
