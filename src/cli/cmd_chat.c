/* cmd_chat.c - `strata chat MODEL`: an interactive conversation, each
 * line a user's message rendered with the whole conversation through the
 * model's chat template, the reply streamed as it is generated; the KV
 * cache kept between turns for the part of the rendering that did not
 * change (layer: cli).
 *
 * Input: with a terminal on stdin, lines come through libedit (line
 * editing, history); otherwise plain lines from stdin, so a pipe drives
 * it. "/exit" or the end of input ends the conversation, "/reset" starts
 * a new one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#ifdef STRATA_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#include "cli/commands.h"
#include "cli/text_out.h"
#include "strata/infer.h"
#include "strata/text.h"

#define DEFAULT_NEW_TOKENS 512
#define MAX_LINE_BYTES (1u << 20)

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata chat MODEL [options]\n\n"
		"A conversation with MODEL: each line is a user's message; the\n"
		"whole conversation goes through the model's chat template and\n"
		"the reply streams to stdout. With a terminal the line can be\n"
		"edited (history with the arrow keys); otherwise lines are read\n"
		"from stdin. /exit or the end of input ends it, /reset starts\n"
		"over. The KV cache of the unchanged start of the conversation\n"
		"is kept between turns.\n\n"
		"options:\n"
		"  --chat-template FILE  the template instead of the model's own\n"
		"  --system TEXT         a system message first\n"
		"  -n TOKENS             tokens per reply at most (default %d)\n"
		"  --temperature T       0 is greedy (default 0.8)\n"
		"  --top-k K             keep the K likeliest (default 40, 0 off)\n"
		"  --top-p P             nucleus mass (default 0.95, 1 off)\n"
		"  --min-p P             drop p < P x p_max (default 0.05)\n"
		"  --repeat-penalty R    penalise the last 64 tokens (default 1)\n"
		"  --seed S              random seed (default: a new one, printed\n"
		"                        on stderr)\n"
		"  --stop STR            end a reply before STR (repeatable)\n"
		"  --threads N           compute threads (default: every "
		"processor)\n",
		DEFAULT_NEW_TOKENS);
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

typedef struct chat_args {
	const char *model, *chat_template, *system;
	uint64_t n, threads;
	bool seed_given;
	bool quiet; /* --quiet: nothing on stderr but errors */
	strata_sampler_params sp;
	strata_cli_stops stops;
} chat_args;

static int value_option(void *ctx, const char *opt, const char *v,
			bool *known)
{
	chat_args *a = ctx;
	*known = true;
	if (!strcmp(opt, "--chat-template"))
		a->chat_template = v;
	else if (!strcmp(opt, "--system"))
		a->system = v;
	else if (!strcmp(opt, "--stop"))
		return strata_cli_stops_add("chat", &a->stops, v);
	else
		return strata_cli_generation_option(
			"chat", opt, v,
			&(strata_cli_generation){&a->sp, &a->n, &a->threads,
						 &a->seed_given},
			known);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Input lines                                                              */
/* ------------------------------------------------------------------------ */

typedef struct reader {
	bool edit; /* libedit on a terminal */
	char *line; /* the last line (libedit's or getline's) */
	size_t cap;
} reader;

/* The next line without its line end, or NULL at the end of input. */
static const char *next_line(reader *r)
{
#ifdef STRATA_HAVE_LIBEDIT
	if (r->edit) {
		free(r->line);
		r->line = readline("> ");
		if (r->line && r->line[0])
			add_history(r->line);
		return r->line;
	}
#endif
	ssize_t n = getline(&r->line, &r->cap, stdin);
	if (n < 0)
		return NULL;
	while (n > 0 && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r'))
		r->line[--n] = '\0';
	return r->line;
}

/* ------------------------------------------------------------------------ */
/* The conversation                                                         */
/* ------------------------------------------------------------------------ */

typedef struct chat {
	const chat_args *a;
	strata_session *s;
	strata_forward *f;
	const strata_tokenizer *tok;
	strata_chat_format *fmt;
	strata_sampler *smp;
	int32_t eos;
	json_t *messages; /* the conversation so far */
	int32_t *cached;  /* the ids whose KV the forward pass holds */
	size_t n_cached, cap_cached;
} chat;

static strata_status add_message(chat *c, const char *role, const char *text,
				 size_t len, strata_error *err)
{
	json_t *content = json_stringn(text, len);
	json_t *m = content ? json_pack("{s:s,s:o}", "role", role, "content",
					content) : NULL;
	if (!content)
		return strata_fail(err, STRATA_E_TEXT_ENCODING, "type UTF-8 text",
				   "the message is not valid UTF-8");
	if (!m || json_array_append_new(c->messages, m))
		return strata_fail(err, STRATA_E_NOMEM, "free memory",
				   "no memory for the conversation");
	return STRATA_OK;
}

static strata_status start(chat *c, strata_error *err)
{
	json_decref(c->messages);
	c->messages = json_array();
	if (!c->messages)
		return strata_fail(err, STRATA_E_NOMEM, "free memory",
				   "no memory for the conversation");
	return c->a->system ? add_message(c, "system", c->a->system,
					  strlen(c->a->system), err)
			    : STRATA_OK;
}

/* Keeps the KV of the longest prefix ids shares with what is cached (at
 * least the last id is computed again, for its logits); *reused. */
static strata_status reuse(chat *c, const int32_t *ids, size_t n,
			   size_t *reused, strata_error *err)
{
	size_t p = 0;
	while (p < n && p < c->n_cached && ids[p] == c->cached[p])
		p++;
	if (p == n)
		p--;
	*reused = p;
	c->n_cached = p;
	return strata_forward_truncate(c->f, (uint32_t)p, err);
}

/* After a reply: the forward pass holds ids and the generated tokens it
 * was fed (all but a last one that ended the reply unfed). */
static strata_status remember(chat *c, const int32_t *ids, size_t n,
			      const int32_t *gen, size_t n_gen,
			      strata_error *err)
{
	size_t held = strata_forward_position(c->f);
	size_t fed = held > n ? held - n : 0;
	fed = fed < n_gen ? fed : n_gen;
	if (strata_grow((void **)&c->cached, &c->cap_cached, n + fed,
			sizeof *c->cached, "the cached ids", err))
		return STRATA_E_NOMEM;
	memcpy(c->cached, ids, n * sizeof *ids);
	memcpy(c->cached + n, gen, fed * sizeof *gen);
	c->n_cached = n + fed;
	return STRATA_OK;
}

typedef struct reply {
	strata_cli_text_out out;
	int32_t *gen; /* the generated ids */
	size_t n_gen, cap;
	strata_error *err;
} reply;

static strata_status on_token(void *user, int32_t token, strata_error *err)
{
	reply *r = user;
	if (strata_grow((void **)&r->gen, &r->cap, r->n_gen + 1, sizeof *r->gen,
			"the reply's ids", err))
		return STRATA_E_NOMEM;
	r->gen[r->n_gen++] = token;
	return strata_cli_text_out_token(&r->out, token, err);
}

/* One turn: the user's line, the reply streamed, the reply kept in the
 * conversation. A conversation the context cannot hold is refused (the
 * message dropped), not fatal. */
static strata_status turn(chat *c, const char *line, strata_error *err)
{
	strata_status st = add_message(c, "user", line, strlen(line), err);
	int32_t *ids = NULL;
	size_t n = 0, reused = 0;
	reply r = {.err = err};
	strata_generate_stats g = {0};
	if (st == STRATA_OK)
		st = strata_chat_format_encode(c->fmt, c->tok, c->messages, true,
					       &ids, &n, err);
	uint32_t context = strata_forward_context(c->f);
	if (st == STRATA_OK && n >= context) {
		st = strata_fail(err, STRATA_E_INFER_CONTEXT, "type /reset to "
				 "start over, or give a larger --context",
				 "the conversation is %zu tokens, the context "
				 "%u", n, context);
	}
	if (st == STRATA_OK)
		st = reuse(c, ids, n, &reused, err);
	if (st == STRATA_OK)
		st = strata_cli_text_out_init(&r.out, c->tok, ids, n,
					      c->a->stops.v, NULL,
					      c->a->stops.count, stdout, true,
					      err);
	if (st == STRATA_OK)
		st = strata_generate(c->f, c->smp, ids + reused,
				     (uint32_t)(n - reused), (uint32_t)c->a->n,
				     c->eos, on_token, &r, &g, err);
	if (st == STRATA_OK)
		st = strata_cli_text_out_finish(&r.out, err);
	if (st == STRATA_OK) {
		fputc('\n', stdout);
		fflush(stdout);
		st = remember(c, ids, n, r.gen, r.n_gen, err);
	}
	if (st == STRATA_OK)
		st = add_message(c, "assistant", r.out.text ? r.out.text : "",
				 r.out.len, err);
	if (st == STRATA_OK && !c->a->quiet)
		fprintf(stderr, "strata: prompt %zu tokens (%zu reused), "
			"generated %llu tokens (%.1f tokens/s)%s\n", n, reused,
			(unsigned long long)g.generated_tokens,
			g.generate_ns ? (g.generated_tokens > 1
						 ? g.generated_tokens - 1 : 0) /
						(g.generate_ns / 1e9)
				      : 0.0,
			g.stopped_at_eos ? "; end of turn"
			: g.stopped_by_caller ? "; stopped at a stop string"
					      : "");
	else if (json_array_size(c->messages))
		/* the user's message goes; so does a broken cache */
		json_array_remove(c->messages, json_array_size(c->messages) - 1);
	if (st && st != STRATA_E_INFER_CONTEXT &&
	    st != STRATA_E_TEXT_TEMPLATE_RAISED && st != STRATA_E_TEXT_ENCODING)
		c->n_cached = 0;
	strata_cli_text_out_fini(&r.out);
	strata_free(r.gen);
	strata_free(ids);
	return st;
}

/* The turns until /exit or the end of input. Errors of one turn the
 * conversation survives (too long, refused by the template) are printed
 * and the loop goes on; others end it. */
static strata_status converse(chat *c, strata_error *err)
{
	reader rd = {0};
#ifdef STRATA_HAVE_LIBEDIT
	rd.edit = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
#endif
	strata_status st = start(c, err);
	for (const char *line; st == STRATA_OK && (line = next_line(&rd));) {
		if (!strcmp(line, "/exit"))
			break;
		if (!strcmp(line, "/reset")) {
			st = start(c, err);
			continue;
		}
		if (!line[0])
			continue;
		if (strlen(line) > MAX_LINE_BYTES) {
			fprintf(stderr, "strata: error: a message of more than "
				"1 MiB\n  fix: send a shorter message\n");
			continue;
		}
		st = turn(c, line, err);
		if (st == STRATA_E_INFER_CONTEXT ||
		    st == STRATA_E_TEXT_TEMPLATE_RAISED ||
		    st == STRATA_E_TEXT_ENCODING) {
			strata_cli_fail(err);
			st = STRATA_OK;
		}
	}
	free(rd.line);
	return st;
}

static strata_status open_chat(const chat_args *a, strata_cli_residency *r,
			       chat *c, strata_tokenizer **tok,
			       strata_error *err)
{
	strata_status st = strata_cli_residency_rates(r, err);
	if (st == STRATA_OK)
		st = strata_tokenizer_load(a->model, tok, err);
	c->tok = *tok;
	if (st == STRATA_OK)
		st = strata_chat_format_load(a->model, a->chat_template, *tok,
					     &c->fmt, err);
	if (st == STRATA_OK) {
		strata_session_options so =
			strata_cli_session_options(r, a->model, a->threads);
		so.positions = so.prefill = 1;
		so.plan_shape = true;
		strata_progress bar;
		so.load_progress = strata_cli_load_bar_update;
		so.load_progress_user = &bar;
		strata_cli_load_bar_init(&bar, r);
		st = strata_session_open(&so, &c->s, err);
		strata_progress_finish(&bar);
	}
	if (st == STRATA_OK)
		st = strata_sampler_create(&a->sp,
					   strata_session_hparams(c->s)->vocab,
					   &c->smp, err);
	if (st)
		return st;
	c->f = strata_session_forward(c->s);
	strata_tokenizer_specials sp;
	strata_tokenizer_get_specials(*tok, &sp);
	const char *e = strata_chat_format_eos(c->fmt);
	int32_t id = e ? strata_tokenizer_find(*tok, e, strlen(e)) : -1;
	c->eos = id >= 0 ? id : sp.eos >= 0 ? sp.eos
					    : strata_session_hparams(c->s)->eos;
	return STRATA_OK;
}

int strata_cmd_chat(int argc, char **argv)
{
	chat_args a = {.n = DEFAULT_NEW_TOKENS};
	strata_sampler_params_default(&a.sp);
	strata_cli_residency r;
	strata_cli_residency_init(&r);
	int rc = strata_cli_model_args("chat", argc, argv, &r, help,
				       value_option, &a, &a.model);
	if (rc == 0)
		rc = strata_cli_one_sequence("chat", &r);
	if (rc) {
		strata_cli_residency_fini(&r);
		strata_cli_stops_fini(&a.stops);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	if (!a.seed_given)
		a.sp.seed = strata_random_seed();
	a.quiet = r.quiet;
	if (!r.device_given && strata_backend_device_count("cuda") > 0)
		r.plan.device = STRATA_PLAN_DEVICE_CUDA;
	strata_error err;
	strata_tokenizer *tok = NULL;
	chat c = {.a = &a};
	strata_status st = open_chat(&a, &r, &c, &tok, &err);
	if (st == STRATA_OK && !a.quiet)
		fprintf(stderr, "strata: chat with %s; seed %llu; /exit ends\n",
			a.model, (unsigned long long)a.sp.seed);
	if (st == STRATA_OK)
		st = converse(&c, &err);
	rc = st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
	json_decref(c.messages);
	strata_free(c.cached);
	strata_sampler_destroy(c.smp);
	strata_session_close(c.s);
	strata_chat_format_destroy(c.fmt);
	strata_tokenizer_destroy(tok);
	strata_cli_residency_fini(&r);
	strata_cli_stops_fini(&a.stops);
	return rc;
}
