/* fuzz_batch_input.c - libFuzzer target for `strata batch`'s JSONL request
 * parser over arbitrary bytes, with the shipped stories260K tokenizer.
 * Either every line is accepted (each request then has at least one prompt
 * id inside the vocabulary, a key within the line's bytes and max_tokens
 * within its cap) or the error is E_INFER_BATCH_INPUT / a tokenizer error
 * naming a line, and nothing is kept (layer: cli). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch_input.h"

static strata_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	strata_error err;
	if (strata_tokenizer_load(STRATA_SOURCE_DIR "/models/stories260K", &tok,
				  &err)) {
		fprintf(stderr, "%s\n", err.message);
		abort();
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	batch_input_options bo = {.tok = tok, .default_max_tokens = 16};
	strata_sampler_params_default(&bo.sampler);
	batch_input in;
	strata_error err;
	strata_status st = batch_input_parse(&bo, (const char *)data, size,
					     &in, &err);
	if (st != STRATA_OK) {
		if (in.count || in.items)
			abort(); /* a failure keeps nothing */
		if (st != STRATA_E_NOMEM && !strstr(err.message, "line ") &&
		    !strstr(err.message, "no requests"))
			abort(); /* errors name the line */
		return 0;
	}
	size_t vocab = strata_tokenizer_vocab_count(tok);
	for (size_t i = 0; i < in.count; i++) {
		const strata_batch_request *q = &in.items[i].req;
		if (q->n_prompt == 0 || q->max_tokens > (1u << 24) ||
		    !q->key || q->key_bytes > size)
			abort();
		for (uint32_t k = 0; k < q->n_prompt; k++)
			if (q->prompt[k] < 0 || (size_t)q->prompt[k] >= vocab)
				abort();
	}
	batch_input_fini(&in);
	return 0;
}
