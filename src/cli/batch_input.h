/* batch_input.h - `strata batch`'s requests as read from stdin
 * (cmd_batch_input.c; layer: cli). */
#ifndef STRATA_CLI_BATCH_INPUT_H
#define STRATA_CLI_BATCH_INPUT_H

#include <jansson.h>

#include "strata/serve.h"
#include "strata/text.h"

/* One request line: the runner's view of it (prompt and key point into
 * the input's pools) and where its id is. */
typedef struct batch_item {
	strata_batch_request req;
	uint64_t line;	 /* 1-based line number on stdin */
	size_t id_at;	 /* the id's compact JSON: text[id_at, + id_len) */
	uint32_t id_len;
} batch_item;

/* The requests and the pools they point into (no JSON is kept). */
typedef struct batch_input {
	batch_item *items;
	size_t count, items_cap;
	char *text; /* ids (compact JSON) and keys */
	size_t text_len, text_cap;
	int32_t *tokens; /* every prompt's ids */
	size_t tokens_len, tokens_cap;
} batch_input;

typedef struct batch_input_options {
	const strata_tokenizer *tok;
	strata_sampler_params sampler; /* defaults for every request */
	uint64_t default_max_tokens;
} batch_input_options;

/* Reads all of stdin, one JSON request per line (blank lines skipped), and
 * checks and encodes every one (at most 1048576 requests; a repeated id
 * is an error naming both lines). The first bad line is
 * E_INFER_BATCH_INPUT "line N: ..." (or the tokenizer's error prefixed by
 * its line) and *in is then empty. The caller frees with batch_input_fini. */
strata_status batch_input_read(const batch_input_options *bo, batch_input *in,
			       strata_error *err);
/* The same over len bytes at buf (untrusted; NUL bytes are data: a line
 * holding one is not valid JSON). buf is borrowed: *in keeps no pointer
 * into it. */
strata_status batch_input_parse(const batch_input_options *bo,
				const char *buf, size_t len, batch_input *in,
				strata_error *err);
/* Request i's id as compact JSON (len bytes, not NUL-terminated). */
const char *batch_input_id(const batch_input *in, size_t i, size_t *len);
void batch_input_fini(batch_input *in);

#endif
