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
#include "strata/backend.h"

#define DEFAULT_NEW_TOKENS 256

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata batch MODEL [options] < requests.jsonl\n\n"
		"Runs one generation per input line, {\"id\", \"prompt\",\n"
		"optional \"max_tokens\", \"temperature\", \"seed\", \"key\"},\n"
		"over replicas of the model, one per device; writes one JSON\n"
		"result per request to stdout in input order. Every line is\n"
		"checked before anything runs: a bad line runs nothing.\n\n"
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
		"  --batch B             requests each replica decodes together,\n"
		"                        one token each per forward pass (one\n"
		"                        pass of streamed weights serves B);\n"
		"                        1 to %u (default 1)\n"
		"  -n TOKENS             default max_tokens (default %d)\n"
		"  --temperature T       default temperature (default 0.8)\n"
		"  --seed S              default seed (default 0)\n"
		"  --threads N           compute threads per replica (default:\n"
		"                        processors / replicas)\n"
		"  --telemetry FILE      write the telemetry document with one\n"
		"                        devices[] entry per replica and the router\n",
		STRATA_FORWARD_MAX_SEQUENCES, DEFAULT_NEW_TOKENS);
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

typedef struct batch_args {
	const char *model, *gpus, *telemetry;
	uint64_t n, threads, spill, prefix_bytes;
	bool spill_given;
	strata_batch_route route;
	strata_sampler_params sp;
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
			a->sp.seed = u;
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

/* 0: parsed; -1: help shown; else the exit code. */
static int parse_args(int argc, char **argv, batch_args *a,
		      strata_cli_residency *r)
{
	int rc = strata_cli_model_args("batch", argc, argv, r, help,
				       value_option, a, &a->model);
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

/* One result line as a jansson object (NULL on allocation failure). */
static json_t *result_json(const batch_input *in, size_t i,
			   const strata_batch_result *r, const char *text,
			   size_t len, const strata_cli_gpus *d)
{
	const batch_item *it = &in->items[i];
	size_t id_len;
	const char *id_text = batch_input_id(in, i, &id_len);
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
	for (uint32_t k = 0; k < r->n_tokens; k++)
		bad |= json_array_append_new(toks, json_integer(r->tokens[k]));
	const strata_generate_stats *g = &r->gen;
	bad |= json_object_set_new(tm, "queue_s", json_real(r->queue_ns / 1e9));
	bad |= json_object_set_new(tm, "prompt_s", json_real(g->prompt_ns / 1e9));
	bad |= json_object_set_new(tm, "first_token_s",
				   json_real(g->first_token_ns / 1e9));
	bad |= json_object_set_new(tm, "generate_s",
				   json_real(g->generate_ns / 1e9));
	bad |= json_object_set_new(o, "id", id);
	bad |= json_object_set_new(o, "text", json_stringn(text, len));
	bad |= json_object_set_new(o, "tokens", toks);
	bad |= json_object_set_new(o, "device", json_integer(r->device));
	bad |= json_object_set_new(o, "device_name",
				   json_string(d->names[r->device]));
	bad |= json_object_set_new(o, "home_device",
				   json_integer(r->home_device));
	bad |= json_object_set_new(o, "resident_device",
				   json_integer(r->resident_device));
	bad |= json_object_set_new(o, "prompt_tokens",
				   json_integer(it->req.n_prompt));
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
 * prints it (the continuation of the prompt's text), into *buf (grown as
 * needed). */
static strata_status detok(const strata_tokenizer *tok,
			   const strata_batch_request *q,
			   const strata_batch_result *r, char **buf,
			   size_t *len, size_t *cap, strata_error *err)
{
	strata_text_stream *d = NULL;
	strata_status st = strata_text_stream_create(tok, q->prompt, q->n_prompt,
						     true, &d, err);
	*len = 0;
	for (uint32_t i = 0; st == STRATA_OK && i <= r->n_tokens; i++) {
		const char *t;
		size_t n;
		st = i < r->n_tokens
			     ? strata_text_stream_push(d, r->tokens[i], &t, &n, err)
			     : strata_text_stream_finish(d, &t, &n, err);
		if (st == STRATA_OK && *len + n + 1 > *cap) {
			size_t ncap = (*len + n + 1) * 2;
			char *nb = strata_realloc(*buf, ncap);
			if (!nb)
				st = strata_fail(err, STRATA_E_NOMEM,
						 "free memory",
						 "cannot hold a result's text");
			else
				*buf = nb, *cap = ncap;
		}
		if (st == STRATA_OK) {
			memcpy(*buf + *len, t, n);
			*len += n;
		}
	}
	strata_text_stream_destroy(d);
	return st;
}

/* Writes each result as one JSON line as soon as it and every request
 * before it are done (strata_batch_options.on_result), so what is done
 * is on stdout even if a later request fails the run. */
typedef struct writer {
	const batch_input *in;
	const strata_tokenizer *tok;
	const strata_cli_gpus *d;
	char *text; /* the decoder's buffer, reused */
	size_t len, cap;
} writer;

static strata_status write_one(void *user, size_t i,
			       const strata_batch_result *r, strata_error *err)
{
	writer *w = user;
	strata_status st = detok(w->tok, &w->in->items[i].req, r, &w->text,
				 &w->len, &w->cap, err);
	json_t *o = st ? NULL
		       : result_json(w->in, i, r, w->text ? w->text : "",
				     w->len, w->d);
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
			  const strata_batch_result *res, uint64_t wall_ns)
{
	uint64_t gen = 0;
	for (size_t i = 0; i < requests; i++)
		gen += res[i].n_tokens;
	strata_batch_totals s;
	strata_batch_get_totals(b, &s);
	double t = wall_ns / 1e9;
	fprintf(stderr,
		"strata: batch of %zu request%s on %u replica%s (%s) in %.3f s "
		"(%.2f requests/s, %.1f generated tokens/s); home %llu of "
		"%llu; prefix cache hits %llu of %llu; --batch %u, %.2f "
		"sequences per decode step\n",
		requests, requests == 1 ? "" : "s", strata_batch_replicas(b),
		strata_batch_replicas(b) == 1 ? "" : "s",
		strata_batch_route_name(strata_batch_route_of(b)), t,
		t > 0 ? requests / t : 0.0, t > 0 ? gen / t : 0.0,
		(unsigned long long)s.routed_home, (unsigned long long)s.routed,
		(unsigned long long)s.prefix_hits,
		(unsigned long long)s.prefix_lookups, strata_batch_sequences(b),
		s.decode_steps ? (double)s.decode_rows / s.decode_steps : 0.0);
}

/* ------------------------------------------------------------------------ */

static strata_status run_batch(const batch_args *a, strata_cli_residency *r,
			       const strata_cli_gpus *d, const batch_input *in,
			       const strata_tokenizer *tok, strata_error *err)
{
	strata_batch_options o = {
		.session = {.model_path = a->model, .plan = r->plan,
			    .exclude = (const char *const *)r->exclude,
			    .exclude_count = r->exclude_count,
			    .no_map = r->no_map},
		.replicas = d->count,
		.prefix_cache_bytes = a->prefix_bytes,
		.route = a->route,
		.device_indices = d->index,
	};
	writer w = {.in = in, .tok = tok, .d = d};
	o.on_result = write_one;
	o.on_result_user = &w;
	uint64_t positions = 0, prefill = 0, largest = 0;
	for (size_t i = 0; i < in->count; i++) {
		const strata_batch_request *q = &in->items[i].req;
		uint64_t need = (uint64_t)q->n_prompt + q->max_tokens;
		positions = need > positions ? need : positions;
		prefill = q->n_prompt > prefill ? q->n_prompt : prefill;
		largest = need > largest ? need : largest;
	}
	o.session.positions = (uint32_t)positions;
	o.session.prefill = (uint32_t)prefill;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	o.session.threads = a->threads ? (uint32_t)a->threads
			    : cpus > d->count ? (uint32_t)(cpus / d->count)
					      : 1;
	o.spill_threshold = a->spill_given ? a->spill : 2 * largest;
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(tok, &sp);
	o.eos = sp.eos;
	strata_batch *b = NULL;
	strata_batch_result *res = strata_calloc_or_error(
		in->count, sizeof *res, "results", err);
	if (!res)
		return STRATA_E_NOMEM;
	uint64_t wall = 0, tokens = 0;
	strata_status st = strata_batch_create(&o, &b, err);
	strata_batch_request *reqs = st ? NULL : strata_calloc_or_error(
		in->count, sizeof *reqs, "requests", err);
	if (st == STRATA_OK && !reqs)
		st = STRATA_E_NOMEM;
	for (size_t i = 0; reqs && i < in->count; i++)
		reqs[i] = in->items[i].req;
	if (st == STRATA_OK) {
		st = strata_batch_run(b, reqs, in->count, res, &wall, err);
		size_t bad = strata_batch_failed_request(b);
		if (st == STRATA_E_INFER_REPLICA && bad < in->count)
			strata_error_prefix(err, "line %llu",
					    (unsigned long long)in->items[bad]
						    .line);
	}
	if (st == STRATA_OK && !r->quiet)
		warn_failures(b, d);
	for (size_t i = 0; st == STRATA_OK && i < in->count; i++)
		tokens += res[i].gen.prompt_tokens - res[i].prefix_tokens +
			  res[i].n_tokens;
	if (st == STRATA_OK && !r->quiet)
		print_summary(b, in->count, res, wall);
	if (st == STRATA_OK && a->telemetry)
		st = strata_batch_write_telemetry(b, a->telemetry, d->ptrs,
						  wall, tokens, err);
	strata_batch_results_free(res, in->count);
	strata_free(res);
	strata_free(w.text);
	strata_free(reqs);
	strata_batch_destroy(b);
	return st;
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
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	strata_error err;
	strata_tokenizer *tok = NULL;
	batch_input in = {0};
	strata_status st = strata_cli_residency_rates(&r, &err);
	if (st == STRATA_OK)
		st = strata_tokenizer_load(a.model, &tok, &err);
	if (st == STRATA_OK) {
		batch_input_options bo = {.tok = tok, .sampler = a.sp,
					  .default_max_tokens = a.n};
		st = batch_input_read(&bo, &in, &err);
	}
	if (st == STRATA_OK)
		st = run_batch(&a, &r, &d, &in, tok, &err);
	rc = st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
	batch_input_fini(&in);
	strata_tokenizer_destroy(tok);
	strata_cli_residency_fini(&r);
	return rc;
}
