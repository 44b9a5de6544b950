/* generate.c - example: open a model, let strata plan how to run it, generate
 * text, write the telemetry document, all through the installed libstrata.
 * Build: cc generate.c $(pkg-config --cflags --libs strata)
 * Usage: generate MODEL PROMPT N [TELEMETRY.json]
 * MODEL is a folder (config.json, *.safetensors, tokenizer.json) or a .gguf
 * file. The text goes to stdout; the plan and the speed to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/base.h>
#include <strata/infer.h>
#include <strata/plan.h>
#include <strata/text.h>

/* Called for every generated token: turn ids into text as they come (the
 * continuation of the prompt's text, as strata run prints it). */
static strata_status print_token(void *user, int32_t token, strata_error *err)
{
	const char *text;
	size_t len;
	strata_status st = strata_text_stream_push(user, token, &text, &len,
						   err);
	if (st == STRATA_OK && len) {
		fwrite(text, 1, len, stdout);
		fflush(stdout);
	}
	return st;
}

static strata_status generate(strata_session *s, strata_tokenizer *tok,
			      const int32_t *ids, size_t n, uint32_t max_new,
			      strata_error *err)
{
	strata_sampler_params sp;
	strata_sampler_params_default(&sp);
	sp.temperature = 0; /* greedy: the same text every run */
	const strata_infer_hparams *hp = strata_session_hparams(s);
	strata_tokenizer_specials specials;
	strata_tokenizer_get_specials(tok, &specials);
	int32_t eos = specials.eos >= 0 ? specials.eos : hp->eos;

	strata_sampler *smp = NULL;
	strata_text_stream *text = NULL;
	strata_generate_stats stats;
	strata_status st = strata_sampler_create(&sp, hp->vocab, &smp, err);
	if (st == STRATA_OK)
		st = strata_text_stream_create(tok, ids, n, true, &text, err);
	if (st == STRATA_OK)
		st = strata_generate(strata_session_forward(s), smp, ids,
				     (uint32_t)n, max_new, eos, print_token,
				     text, &stats, err);
	if (st == STRATA_OK) {
		const char *rest;
		size_t len;
		st = strata_text_stream_finish(text, &rest, &len, err);
		if (st == STRATA_OK)
			printf("%.*s\n", (int)len, rest);
		fprintf(stderr, "generate: %llu tokens, %.3f s after the "
			"first\n", (unsigned long long)stats.generated_tokens,
			stats.generate_ns / 1e9);
	}
	strata_text_stream_destroy(text);
	strata_sampler_destroy(smp);
	return st;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: generate MODEL PROMPT N [TELEMETRY]\n");
		return 2;
	}
	uint32_t max_new = (uint32_t)strtoul(argv[3], NULL, 10);
	strata_error err;
	strata_tokenizer *tok = NULL;
	strata_session *s = NULL;
	int32_t *ids = NULL;
	size_t n = 0;
	strata_status st = strata_tokenizer_load(argv[1], &tok, &err);
	if (st == STRATA_OK)
		st = strata_tokenizer_encode(tok, argv[2], strlen(argv[2]),
					     true, &ids, &n, &err);
	if (st == STRATA_OK) {
		/* Zeroed plan options: strata measures the machine and picks
		 * the fastest way to run the model that fits. */
		strata_session_options o = {
			.model_path = argv[1],
			.positions = (uint32_t)n + max_new,
			.prefill = (uint32_t)n,
		};
		st = strata_session_open(&o, &s, &err);
	}
	if (st == STRATA_OK) {
		const strata_plan_candidate *c =
			strata_plan_selected(strata_session_plan(s));
		fprintf(stderr, "generate: plan %s, %.1f tokens/s predicted\n",
			c ? strata_residency_mode_name(c->mode) : "forced",
			c ? c->tokens_per_second : 0.0);
		st = generate(s, tok, ids, n, max_new, &err);
	}
	if (st == STRATA_OK)
		st = strata_session_finish(s, &err);
	if (st == STRATA_OK && argc == 5)
		st = strata_session_write_telemetry(
			s, argv[4],
			&(strata_session_run){.tokens = n + max_new}, &err);
	if (st != STRATA_OK)
		fprintf(stderr, "generate: error: %s\n  fix: %s\n",
			err.message, err.fix);
	strata_session_close(s);
	strata_free(ids);
	strata_tokenizer_destroy(tok);
	return st == STRATA_OK ? 0 : 1;
}
