/* text_out.c - generated text as the commands print it: each token
 * through the streaming decoder, then the stop-string matcher, the text
 * that settles written out and/or kept (layer: cli). */
#include <string.h>

#include "cli/commands.h"
#include "cli/text_out.h"

int strata_cli_stops_add(const char *cmd, strata_cli_stops *s, const char *v)
{
	strata_error err;
	if (s->count == STRATA_STOP_MAX_COUNT)
		return strata_cli_usage(cmd, "--stop: at most %u stop strings",
					STRATA_STOP_MAX_COUNT);
	/* each string checked alone here, so the error names the option */
	strata_stop_matcher *m = NULL;
	if (strata_stop_matcher_create(&v, NULL, 1, &m, &err)) {
		if (err.code == STRATA_E_NOMEM)
			return strata_cli_fail(&err);
		return strata_cli_usage(cmd, "--stop '%s': %s", v,
					strstr(err.message, "is empty")
						? "an empty stop string"
						: err.message);
	}
	strata_stop_matcher_destroy(m);
	if (strata_grow((void **)&s->v, &s->cap, s->count + 1, sizeof *s->v,
			"stop strings", &err))
		return strata_cli_fail(&err);
	s->v[s->count++] = v;
	return 0;
}

void strata_cli_stops_fini(strata_cli_stops *s)
{
	strata_free(s->v);
	memset(s, 0, sizeof *s);
}

strata_status strata_cli_text_out_init(strata_cli_text_out *o,
				       const strata_tokenizer *tok,
				       const int32_t *prompt, size_t n,
				       const char *const *stops,
				       const size_t *lens, size_t count,
				       FILE *f, bool keep, strata_error *err)
{
	memset(o, 0, sizeof *o);
	o->f = f;
	o->keep = keep;
	o->matched = -1;
	strata_status st = strata_text_stream_create(tok, prompt, n, true,
						     &o->stream, err);
	if (st == STRATA_OK)
		st = strata_stop_matcher_create(stops, lens, count, &o->stop,
						err);
	if (st)
		strata_cli_text_out_fini(o);
	return st;
}

static strata_status put(strata_cli_text_out *o, const char *p, size_t n,
			 strata_error *err)
{
	if (!n)
		return STRATA_OK;
	if (o->f && fwrite(p, 1, n, o->f) != n)
		return strata_fail(err, STRATA_E_IO, "check where the output "
				   "goes", "cannot write the generated text");
	/* a failed flush stays on the stream: main's check of stdout
	 * reports it at the end (exit 1) */
	if (o->f)
		fflush(o->f);
	if (!o->keep)
		return STRATA_OK;
	if (strata_grow((void **)&o->text, &o->cap, o->len + n + 1, 1,
			"the generated text", err))
		return STRATA_E_NOMEM;
	memcpy(o->text + o->len, p, n);
	o->len += n;
	o->text[o->len] = '\0';
	return STRATA_OK;
}

strata_status strata_cli_text_out_token(strata_cli_text_out *o, int32_t token,
					strata_error *err)
{
	const char *p, *q;
	size_t pn, qn;
	int matched;
	strata_status st = strata_text_stream_push(o->stream, token, &p, &pn,
						   err);
	if (st == STRATA_OK)
		st = strata_stop_matcher_push(o->stop, p, pn, &q, &qn, &matched,
					      err);
	if (st == STRATA_OK)
		st = put(o, q, qn, err);
	if (st)
		return st;
	o->tokens++;
	if (matched >= 0) {
		o->matched = matched;
		return STRATA_E_INFER_STOP;
	}
	return STRATA_OK;
}

strata_status strata_cli_text_out_finish(strata_cli_text_out *o,
					 strata_error *err)
{
	if (o->matched >= 0)
		return STRATA_OK;
	const char *p, *q;
	size_t pn, qn;
	int matched;
	strata_status st = strata_text_stream_finish(o->stream, &p, &pn, err);
	if (st == STRATA_OK && pn)
		st = strata_stop_matcher_push(o->stop, p, pn, &q, &qn, &matched,
					      err);
	if (st == STRATA_OK && pn)
		st = put(o, q, qn, err);
	if (st == STRATA_OK && pn && matched >= 0) {
		o->matched = matched;
		return STRATA_OK;
	}
	if (st == STRATA_OK)
		st = strata_stop_matcher_finish(o->stop, &q, &qn, err);
	if (st == STRATA_OK)
		st = put(o, q, qn, err);
	return st;
}

void strata_cli_text_out_fini(strata_cli_text_out *o)
{
	strata_text_stream_destroy(o->stream);
	strata_stop_matcher_destroy(o->stop);
	strata_free(o->text);
	memset(o, 0, sizeof *o);
	o->matched = -1;
}
