/* fuzz_tokenizer_encode.c - libFuzzer target for encoding arbitrary bytes
 * with real tokenizers (GPT-2 byte-level, Llama-2 SentencePiece-style,
 * the generated Llama-3-style and Metaspace ones, and two GGUF
 * vocabularies): the first byte picks one, the rest is the text. Every id
 * must be in range, decode must give valid UTF-8, the streaming decoder
 * must give what the whole decoder gives for any prompt split,
 * and for byte-level GPT-2 decode(encode(s)) must equal s whenever s is
 * valid UTF-8 (layer: text). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/internal.h"

#include "../text/stream_oracle.h"

static const char *const sources[] = {
	"tests/data/tokenizers/hf-gpt2",
	"tests/data/tokenizers/hf-llama2-spm-bpe",
	"tests/data/tokenizers/generated/bytelevel-l3.tokenizer.json",
	"tests/data/tokenizers/generated/spm-meta.tokenizer.json",
	"tests/data/vocab/ggml-vocab-llama-spm.gguf",
	"tests/data/vocab/ggml-vocab-falcon.gguf",
};
#define N_SOURCES (sizeof sources / sizeof *sources)
static strata_tokenizer *toks[N_SOURCES];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	for (size_t i = 0; i < N_SOURCES; i++) {
		char path[4096];
		strata_error err;
		snprintf(path, sizeof path, "%s/%s", STRATA_SOURCE_DIR,
			 sources[i]);
		if (strata_tokenizer_load(path, &toks[i], &err)) {
			fprintf(stderr, "%s: %s\n", path, err.message);
			abort();
		}
	}
	return 0;
}

static bool valid_utf8(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = strata__utf8_valid_len((const unsigned char *)s + i,
						  n - i);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	size_t which = data[0] % N_SOURCES;
	const strata_tokenizer *t = toks[which];
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	strata_error err;
	int32_t *ids;
	size_t n;
	if (strata_tokenizer_encode(t, text, len, which & 1, &ids, &n, &err))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= strata_tokenizer_vocab_count(t))
			abort();
	char *s;
	size_t sl;
	if (!strata_tokenizer_decode(t, ids, n, true, &s, &sl, &err)) {
		if (!valid_utf8(s, sl))
			abort();
		/* GPT-2 is lossless on valid UTF-8 without its special text. */
		if (which == 0 && valid_utf8(text, len) &&
		    !memmem(text, len, "<|endoftext|>", 13) &&
		    (sl != len || memcmp(s, text, len)))
			abort();
		strata_free(s);
	}
	/* The stream is the whole decode, and continues any prefix as the
	 * whole decode does. */
	if (so_check(t, ids, n, 0, false) || so_check(t, ids, n, n / 2, true) ||
	    so_check(t, ids, n, len % (n + 1), false))
		abort();
	strata_free(ids);
	return 0;
}
