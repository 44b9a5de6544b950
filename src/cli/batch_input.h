/* batch_input.h - `strata batch`'s requests as read from stdin
 * (cmd_batch_input.c; layer: cli). */
#ifndef STRATA_CLI_BATCH_INPUT_H
#define STRATA_CLI_BATCH_INPUT_H

#include <jansson.h>

#include "strata/serve.h"
#include "strata/text.h"

/* One request line: its parsed object (for echoing the id), its encoded
 * prompt, and the runner's view of it (pointing into both). */
typedef struct batch_item {
	json_t *json;
	int32_t *ids;
	uint64_t line; /* 1-based line number on stdin */
	strata_batch_request req;
} batch_item;

typedef struct batch_input {
	batch_item *items;
	size_t count;
} batch_input;

typedef struct batch_input_options {
	const strata_tokenizer *tok;
	strata_sampler_params sampler; /* defaults for every request */
	uint64_t default_max_tokens;
} batch_input_options;

/* Reads all of stdin, one JSON request per line (blank lines skipped), and
 * checks and encodes every one. The first bad line is
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
void batch_input_fini(batch_input *in);

#endif
