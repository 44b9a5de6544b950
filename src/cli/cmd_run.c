/* cmd_run.c - `strata run MODEL (-p PROMPT | -f FILE)`: encode the prompt,
 * prefill it in one pass, sample and stream the text to stdout as tokens
 * come, with speed figures on stderr (layer: cli). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/commands.h"
#include "cli/text_out.h"
#include "strata/infer.h"
#include "strata/text.h"

#define MAX_PROMPT_BYTES (64u << 20)
#define DEFAULT_NEW_TOKENS 256

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata run MODEL (-p PROMPT | -f FILE) [options]\n\n"
		"Generates text after PROMPT and streams it to stdout; prompt\n"
		"and generation speed and time to first token go to stderr.\n\n"
		"options:\n"
		"  -p PROMPT             the prompt text (may be empty)\n"
		"  -f FILE               read the prompt from FILE (- reads stdin)\n"
		"  --chat                the prompt is a user's message, rendered\n"
		"                        through the model's chat template\n"
		"  --chat-template FILE  the template for --chat instead of the\n"
		"                        model's own (implies --chat)\n"
		"  -n TOKENS             tokens to generate at most (default %d)\n"
		"  --stop STR            end the text before STR (repeatable)\n"
		"  --temperature T       0 is greedy (default 0.8)\n"
		"  --top-k K             keep the K likeliest (default 40, 0 off)\n"
		"  --top-p P             nucleus mass (default 0.95, 1 off)\n"
		"  --min-p P             drop p < P x p_max (default 0.05)\n"
		"  --repeat-penalty R    penalise the last 64 tokens (default 1)\n"
		"  --seed S              random seed; same seed, same text "
		"(default:\n"
		"                        a new one each run, printed on "
		"stderr)\n"
		"  --threads N           compute threads (default: every "
		"processor)\n"
		"  --telemetry FILE      write the telemetry document\n",
		DEFAULT_NEW_TOKENS);
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_BATCH);
}

typedef struct run_args {
	const char *model, *prompt, *prompt_file, *telemetry, *chat_template;
	uint64_t n, threads;
	bool seed_given, chat;
	bool quiet; /* --quiet: nothing on stderr but errors */
	strata_sampler_params sp;
	strata_cli_stops stops;
} run_args;

/* Options with a value; 0 when handled, else an exit code. */
static int value_option(void *ctx, const char *opt, const char *v,
			bool *known)
{
	run_args *a = ctx;
	*known = true;
	if (!strcmp(opt, "--chat"))
		return (a->chat = true, STRATA_CLI_FLAG);
	if (!strcmp(opt, "-p"))
		a->prompt = v;
	else if (!strcmp(opt, "--stop"))
		return strata_cli_stops_add("run", &a->stops, v);
	else if (!strcmp(opt, "--chat-template"))
		a->chat_template = v, a->chat = true;
	else if (!strcmp(opt, "-f"))
		a->prompt_file = v;
	else if (!strcmp(opt, "--telemetry"))
		return (a->telemetry = v, strata_cli_output(opt, v));
	else
		return strata_cli_generation_option(
			"run", opt, v,
			&(strata_cli_generation){&a->sp, &a->n, &a->threads,
						 &a->seed_given},
			known);
	return 0;
}

/* 0: parsed; -1: help shown; else the exit code. */
static int parse_args(int argc, char **argv, run_args *a,
		      strata_cli_residency *r)
{
	int rc = strata_cli_model_args("run", argc, argv, r, help,
				       value_option, a, &a->model);
	if (rc || (rc = strata_cli_one_sequence("run", r)))
		return rc;
	if (!a->prompt == !a->prompt_file)
		return strata_cli_usage("run", "give exactly one of -p PROMPT "
					"and -f FILE");
	return 0;
}

/* ------------------------------------------------------------------------ */

typedef struct stream {
	strata_cli_text_out text; /* the continuation, to stdout */
	/* Tokens generated so far, drawn on stderr only when stdout is not
	 * the same terminal (the text would tear the bar apart). */
	bool show_progress;
	uint64_t generated;
	strata_progress progress;
} stream;

static strata_status emit(void *user, int32_t token, strata_error *err)
{
	stream *s = user;
	strata_status st = strata_cli_text_out_token(&s->text, token, err);
	if (s->show_progress && (st == STRATA_OK || st == STRATA_E_INFER_STOP))
		strata_progress_update(&s->progress, ++s->generated);
	return st;
}

static strata_status read_prompt(const run_args *a, char **file,
				 const char **text, size_t *len,
				 strata_error *err)
{
	*file = NULL;
	*text = a->prompt;
	if (!a->prompt_file) {
		*len = strlen(a->prompt);
		return STRATA_OK;
	}
	strata_status st = strcmp(a->prompt_file, "-")
		? strata_file_read_all(a->prompt_file, MAX_PROMPT_BYTES, file,
				       len, err)
		: strata_cli_read_stdin(MAX_PROMPT_BYTES, file, len, err);
	*text = *file;
	return st;
}

/* --chat: the prompt as the one user message of a conversation, through
 * the chat template; *eos becomes the id of the template's eos text (the
 * end of the assistant's turn) when the vocabulary has it. */
static strata_status encode_chat(const run_args *a, const strata_tokenizer *tok,
				 const char *text, size_t len, int32_t **ids,
				 size_t *n, int32_t *eos, strata_error *err)
{
	strata_chat_format *f = NULL;
	strata_status st = strata_chat_format_load(a->model, a->chat_template,
						   tok, &f, err);
	if (st)
		return st;
	json_t *content = json_stringn(text, len), *m = NULL;
	/* jansson refuses text that is not UTF-8 (or finds no memory) */
	if (!content)
		st = strata_fail(err, STRATA_E_TEXT_ENCODING, "give the prompt "
				 "as UTF-8 text", "the --chat prompt is not "
				 "valid UTF-8");
	else if (!(m = json_pack("[{s:s,s:o}]", "role", "user", "content",
				 content)))
		st = strata_fail(err, STRATA_E_NOMEM, "free memory", "no memory "
				 "for the conversation");
	else
		st = strata_chat_format_encode(f, tok, m, true, ids, n, err);
	const char *e = strata_chat_format_eos(f);
	int32_t id = e ? strata_tokenizer_find(tok, e, strlen(e)) : -1;
	if (id >= 0)
		*eos = id;
	json_decref(m);
	strata_chat_format_destroy(f);
	return st;
}

static strata_status encode_prompt(const run_args *a,
				   const strata_tokenizer *tok, int32_t **ids,
				   size_t *n, int32_t *eos, strata_error *err)
{
	char *file = NULL;
	const char *text = NULL;
	size_t len = 0;
	strata_status st = read_prompt(a, &file, &text, &len, err);
	if (st)
		return st;
	if (a->chat)
		st = encode_chat(a, tok, text, len, ids, n, eos, err);
	else
		st = strata_tokenizer_encode(tok, text, len, true, ids, n, err);
	strata_free(file);
	if (st == STRATA_OK && *n == 0) {
		strata_free(*ids);
		*ids = NULL;
		return strata_fail(err, STRATA_E_USAGE,
				   "give a non-empty prompt (this tokenizer "
				   "adds no BOS token)",
				   "the prompt encodes to no tokens");
	}
	return st;
}

static void print_stats(const strata_generate_stats *g, uint64_t seed)
{
	double p = g->prompt_ns / 1e9, t = g->generate_ns / 1e9;
	double after = g->generated_tokens > 1 ? g->generated_tokens - 1 : 0;
	fprintf(stderr,
		"strata: prompt %llu tokens in %.3f s (%.1f tokens/s); "
		"generated %llu tokens (%.1f tokens/s); "
		"time to first token %.3f s; seed %llu%s\n",
		(unsigned long long)g->prompt_tokens, p,
		p > 0 ? g->prompt_tokens / p : 0.0,
		(unsigned long long)g->generated_tokens,
		t > 0 ? after / t : 0.0, g->first_token_ns / 1e9,
		(unsigned long long)seed,
		g->stopped_at_eos      ? "; stopped at end of text"
		: g->stopped_by_caller ? "; stopped at a stop string"
				       : "");
}

/* The text after the last token: what was held back, and the line end
 * (so the shell's prompt or the summary starts on a line of its own). */
static strata_status finish_text(stream *out, strata_error *err)
{
	strata_status st = strata_cli_text_out_finish(&out->text, err);
	if (st == STRATA_OK)
		fputc('\n', stdout);
	fflush(stdout);
	if (out->show_progress)
		strata_progress_finish(&out->progress);
	return st;
}

static strata_status generate(const run_args *a, strata_session *s,
			      const strata_tokenizer *tok, const int32_t *ids,
			      size_t n, int32_t eos, strata_error *err)
{
	strata_sampler *smp = NULL;
	stream out = {0};
	strata_generate_stats g = {0};
	strata_status st = strata_sampler_create(
		&a->sp, strata_session_hparams(s)->vocab, &smp, err);
	if (st == STRATA_OK)
		st = strata_cli_text_out_init(&out.text, tok, ids, n,
					      a->stops.v, NULL, a->stops.count,
					      stdout, false, err);
	out.show_progress = !a->quiet && !isatty(STDOUT_FILENO);
	strata_progress_init(&out.progress, stderr, "generating", a->n);
	if (st == STRATA_OK)
		st = strata_generate(strata_session_forward(s), smp, ids,
				     (uint32_t)n, (uint32_t)a->n, eos, emit,
				     &out, &g, err);
	if (st == STRATA_OK)
		st = finish_text(&out, err);
	if (st == STRATA_OK)
		st = strata_session_finish(s, err);
	if (st == STRATA_OK && !a->quiet) {
		print_stats(&g, a->sp.seed);
		strata_session_print_summary(s, stderr);
	}
	if (st == STRATA_OK && a->telemetry)
		st = strata_session_write_telemetry(
			s, a->telemetry,
			&(strata_session_run){
				.run_ns = g.prompt_ns + g.generate_ns,
				.tokens = g.prompt_tokens + g.generated_tokens,
				.has_seed = true, .seed = a->sp.seed},
			err);
	strata_cli_text_out_fini(&out.text);
	strata_sampler_destroy(smp);
	return st;
}

int strata_cmd_run(int argc, char **argv)
{
	run_args a = {.n = DEFAULT_NEW_TOKENS};
	strata_sampler_params_default(&a.sp);
	strata_cli_residency r;
	strata_cli_residency_init(&r);
	int rc = parse_args(argc, argv, &a, &r);
	if (rc) {
		strata_cli_residency_fini(&r);
		strata_cli_stops_fini(&a.stops);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	if (!a.seed_given)
		a.sp.seed = strata_random_seed();
	a.quiet = r.quiet;
	strata_error err;
	strata_tokenizer *tok = NULL;
	strata_session *s = NULL;
	int32_t *ids = NULL;
	size_t n = 0;
	strata_progress bar;
	/* --device absent: cuda if one is visible, else cpu (DESIGN.md) */
	if (!r.device_given && strata_backend_device_count("cuda") > 0)
		r.plan.device = STRATA_PLAN_DEVICE_CUDA;
	int32_t eos = -1;
	strata_status st = strata_cli_residency_rates(&r, &err);
	if (st == STRATA_OK)
		st = strata_tokenizer_load(a.model, &tok, &err);
	if (st == STRATA_OK) {
		strata_tokenizer_specials sp;
		strata_tokenizer_get_specials(tok, &sp);
		eos = sp.eos;
		st = encode_prompt(&a, tok, &ids, &n, &eos, &err);
	}
	if (st == STRATA_OK) {
		strata_session_options so =
			strata_cli_session_options(&r, a.model, a.threads);
		so.positions = (uint32_t)(n + a.n);
		so.prefill = (uint32_t)n;
		so.plan_shape = true; /* the shape strata plan sizes */
		so.load_progress = strata_cli_load_bar_update;
		so.load_progress_user = &bar;
		strata_cli_load_bar_init(&bar, &r);
		st = strata_session_open(&so, &s, &err);
		strata_progress_finish(&bar);
	}
	if (st == STRATA_OK && eos < 0)
		eos = strata_session_hparams(s)->eos;
	if (st == STRATA_OK && a.n)
		st = generate(&a, s, tok, ids, n, eos, &err);
	rc = st == STRATA_OK ? STRATA_EXIT_OK : strata_cli_fail(&err);
	strata_session_close(s);
	strata_free(ids);
	strata_tokenizer_destroy(tok);
	strata_cli_residency_fini(&r);
	strata_cli_stops_fini(&a.stops);
	return rc;
}
