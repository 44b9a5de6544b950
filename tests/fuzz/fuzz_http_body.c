/* fuzz_http_body.c - libFuzzer target for the server's request bodies: the
 * parse of a /v1/completions or /v1/chat/completions body into a request
 * (strata__http_parse_body), with the chat-stories260K tokenizer and chat
 * template. The first byte picks the endpoint (odd: chat), the rest is
 * the body. Either the request is accepted (at least one prompt id, each
 * inside the vocabulary; max_tokens, stop strings and sampling within
 * their bounds) or the answer is a 400 naming what is wrong (or a 503 out
 * of memory) as an OpenAI error object, and nothing leaks (layer: serve). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http_internal.h"

#define MODEL STRATA_SOURCE_DIR "/tests/data/chat-stories260K"

static strata_tokenizer *tok;
static strata_chat_format *chat_format;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	strata_error err;
	if (strata_tokenizer_load(MODEL, &tok, &err) ||
	    strata_chat_format_load(MODEL, NULL, tok, &chat_format, &err)) {
		fprintf(stderr, "%s\n", err.message);
		abort();
	}
	return 0;
}

/* An error answer: {"error": {"message": non-empty string, "type": string,
 * "param", "code"}} with 400 or 503. */
static void check_error(const strata__http_reply *r)
{
	if (r->status != 400 && r->status != 503)
		abort();
	json_t *e = json_object_get(r->body, "error");
	const char *m = json_string_value(json_object_get(e, "message"));
	if (!m || !m[0] || !json_is_string(json_object_get(e, "type")) ||
	    !json_object_get(e, "param") || !json_object_get(e, "code"))
		abort();
}

static void check_request(const strata__http_params *g)
{
	uint32_t vocab = strata_tokenizer_vocab_count(tok);
	if (!g->ids || g->n_ids == 0 || g->n_ids > (1u << 24))
		abort();
	for (size_t i = 0; i < g->n_ids; i++)
		if (g->ids[i] < 0 || (uint32_t)g->ids[i] >= vocab)
			abort();
	if ((g->max_given && (g->max_tokens < 1 || g->max_tokens > (1u << 30))) ||
	    g->n_stops > STRATA__HTTP_MAX_STOPS)
		abort();
	for (size_t i = 0; i < g->n_stops; i++)
		if (!g->stops[i] || g->stop_lens[i] == 0)
			abort();
	const strata_sampler_params *sp = &g->sp;
	if (!(sp->temperature >= 0 && sp->temperature <= 2) ||
	    !(sp->top_p > 0 && sp->top_p <= 1) ||
	    !(sp->min_p >= 0 && sp->min_p <= 1))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	bool chat = data[0] & 1;
	strata__http_params g = {.tok = tok, .chat_format = chat_format,
				 .stop_token = -1};
	strata__http_reply r = {0};
	json_t *req = NULL;
	bool ok = strata__http_parse_body(chat, (const char *)data + 1,
					  size - 1, &g, &req, &r);
	if (ok) {
		if (r.body)
			abort(); /* an accepted request has no answer yet */
		check_request(&g);
	} else {
		check_error(&r);
	}
	json_decref(r.body);
	json_decref(req);
	strata_free(g.ids);
	return 0;
}
