/* text_out.h - generated text as the commands print it: the streaming
 * decoder, then the --stop strings, to a stream and/or a kept copy (run,
 * chat, batch; text_out.c; layer: cli). */
#ifndef STRATA_CLI_TEXT_OUT_H
#define STRATA_CLI_TEXT_OUT_H

#include <stdio.h>

#include "strata/text.h"

/* The --stop values (repeatable), pointers into argv. */
typedef struct strata_cli_stops {
	const char **v;
	size_t count, cap;
} strata_cli_stops;

/* Adds one --stop value: 0, or the exit code of a usage error (an empty
 * string, too many, too long, not UTF-8) naming command cmd. */
int strata_cli_stops_add(const char *cmd, strata_cli_stops *s, const char *v);
void strata_cli_stops_fini(strata_cli_stops *s);

typedef struct strata_cli_text_out {
	strata_text_stream *stream;
	strata_stop_matcher *stop;
	FILE *f;	   /* NULL: not printed */
	bool keep;	   /* the text is kept in text / len */
	char *text;	   /* strata_alloc'd, NUL-terminated */
	size_t len, cap;
	int matched;	   /* index of the stop string that ended it, or -1 */
	uint64_t tokens;   /* tokens pushed */
} strata_cli_text_out;

/* The continuation of prompt (n ids) through tok, ended by the stops (may
 * be NULL when count is 0; lens NULL: NUL-terminated), written to f as it settles (flushed each
 * token) and/or kept. On failure o holds nothing to free. */
strata_status strata_cli_text_out_init(strata_cli_text_out *o,
				       const strata_tokenizer *tok,
				       const int32_t *prompt, size_t n,
				       const char *const *stops,
				       const size_t *lens, size_t count,
				       FILE *f, bool keep, strata_error *err);
/* One generated token: STRATA_OK, or STRATA_E_INFER_STOP when a stop
 * string matched (the text before it is out; strata_generate ends there),
 * or an error. A token after the match is E_INVALID_ARG. */
strata_status strata_cli_text_out_token(strata_cli_text_out *o, int32_t token,
					strata_error *err);
/* The end of the text: what was held back comes out (nothing after a
 * match). */
strata_status strata_cli_text_out_finish(strata_cli_text_out *o,
					 strata_error *err);
void strata_cli_text_out_fini(strata_cli_text_out *o);

#endif
