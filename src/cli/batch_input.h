/* batch_input.h - `strata batch`'s requests as read from stdin: checked
 * whole, then parsed a window at a time (cmd_batch_input.c; layer: cli). */
#ifndef STRATA_CLI_BATCH_INPUT_H
#define STRATA_CLI_BATCH_INPUT_H

#include <jansson.h>

#include "strata/serve.h"
#include "strata/text.h"

/* One request line: the runner's view of it (prompt and key point into
 * the input's pools), where its id is and its stop strings. */
typedef struct batch_item {
	strata_batch_request req;
	uint64_t line;	 /* 1-based line number on stdin */
	size_t id_at;	 /* the id's compact JSON: text[id_at, + id_len) */
	uint32_t id_len;
	/* its stop strings: stops[stop_at, + stop_count), or the options'
	 * defaults when it has no "stop" (stop_default) */
	size_t stop_at;
	uint32_t stop_count;
	bool stop_default;
	bool chat; /* the prompt was rendered from "messages" */
} batch_item;

/* One stop string: text[at, + len). */
typedef struct batch_stop {
	size_t at, len;
} batch_stop;

/* The requests and the pools they point into (no JSON is kept). */
typedef struct batch_input {
	batch_item *items;
	size_t count, items_cap;
	char *text; /* ids (compact JSON) and keys */
	size_t text_len, text_cap;
	int32_t *tokens; /* every prompt's ids */
	size_t tokens_len, tokens_cap;
	batch_stop *stops; /* every request's stop strings */
	size_t stops_len, stops_cap;
} batch_input;

typedef struct batch_input_options {
	const strata_tokenizer *tok;
	strata_sampler_params sampler; /* defaults for every request */
	uint64_t default_max_tokens;
	/* The model's chat format for "messages"; NULL: chat_error says why
	 * there is none (code 0: no format was asked for). */
	const strata_chat_format *chat;
	strata_error chat_error;
} batch_input_options;

/* The checked input of a run: its bytes, how many requests it holds and
 * the figures the runner is sized by, with a cursor over it. No parsed
 * request is kept: batch_source_next parses them again, a window at a
 * time, so the parsed state is bounded by the window, not by the input. */
typedef struct batch_source {
	char *buf; /* the input's bytes (owned when read from stdin) */
	size_t len;
	bool owned;
	size_t count;	    /* requests in it (its non-blank lines) */
	uint64_t positions; /* the largest prompt + max_tokens of a request */
	uint32_t prefill;   /* the longest prompt, in tokens */
	/* where the next window starts: byte offset, the line before it */
	size_t at;
	uint64_t line;
	size_t taken; /* requests handed out by batch_source_next so far */
} batch_source;

/* Reads all of stdin (at most 1 GiB) and checks it with
 * batch_source_check; the source owns the bytes. */
strata_status batch_source_read(const batch_input_options *bo,
				batch_source *src, strata_error *err);
/* Checks len bytes at buf, one JSON request per line (blank lines
 * skipped): every line parsed and its prompt encoded, then dropped, at
 * most 1048576 requests, and no id repeated (the first line repeating an
 * earlier id is the error, naming that line). Fields are OpenAI's
 * (docs/batch.md): "prompt" or "messages" (rendered through bo->chat),
 * "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop"
 * (a string or an array), plus "id" and "key"; null is the same as absent,
 * unknown fields are ignored as OpenAI does. The first bad line is
 * E_INFER_BATCH_INPUT "line N: ..." (or the tokenizer's or template's
 * error prefixed by its line) and *src is then empty. buf is untrusted
 * (NUL bytes are data: a line holding one is not valid JSON) and
 * borrowed: it must outlive *src. Memory: 16 bytes per request for the id
 * check, freed before it returns, and one line's parse at a time. */
strata_status batch_source_check(const batch_input_options *bo,
				 const char *buf, size_t len,
				 batch_source *src, strata_error *err);
/* The next at most max requests of a checked source into *in (emptied
 * first; its pools reused), in input order; in->count is 0 once every
 * request was handed out. The lines were checked, so the only errors are
 * allocation failures (E_NOMEM, or the tokenizer's or template's error
 * carrying one), which leave *in empty and the cursor where it was. */
strata_status batch_source_next(const batch_input_options *bo,
				batch_source *src, size_t max,
				batch_input *in, strata_error *err);
void batch_source_fini(batch_source *src);

/* Every request of len bytes at buf at once (batch_source_check, then one
 * window of all of them): for tests and the fuzz target. buf is borrowed:
 * *in keeps no pointer into it. The caller frees with batch_input_fini. */
strata_status batch_input_parse(const batch_input_options *bo,
				const char *buf, size_t len, batch_input *in,
				strata_error *err);
/* Request i's id as compact JSON (len bytes, not NUL-terminated). */
const char *batch_input_id(const batch_input *in, size_t i, size_t *len);
/* Request i's own stop strings into v / lens (room for
 * STRATA_STOP_MAX_COUNT); returns their count, or -1 when it has none of
 * its own (the command's --stop apply). */
long batch_input_stops(const batch_input *in, size_t i, const char **v,
		       size_t *lens);
void batch_input_fini(batch_input *in);

#endif
