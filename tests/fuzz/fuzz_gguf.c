/* fuzz_gguf.c - libFuzzer target for the GGUF reader: any bytes must give
 * a catalog or an error, never a crash, leak or undefined behaviour; on
 * success every getter is exercised over every key. */
#include <stddef.h>
#include <stdint.h>

#include "checkpoint/internal.h"

static void walk(const strata_gguf *g, const strata_catalog *c)
{
	/* keys are not enumerable through the public API: probe the ones
	 * the model and text layers read, plus every tensor by name */
	static const char *keys[] = {
		"general.architecture", "general.alignment",
		"llama.embedding_length", "llama.block_count",
		"llama.rope.freq_base", "tokenizer.ggml.tokens",
		"tokenizer.ggml.scores", "tokenizer.ggml.merges",
		"tokenizer.ggml.token_type", "a",
	};
	strata_error e;
	for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
		uint64_t u;
		double d;
		bool b;
		const char *s;
		size_t len;
		strata_gguf_type et;
		uint64_t n;
		strata_gguf_get_u64(g, keys[k], &u, &e);
		strata_gguf_get_f64(g, keys[k], &d, &e);
		strata_gguf_get_bool(g, keys[k], &b, &e);
		strata_gguf_get_string(g, keys[k], &s, &len, &e);
		if (strata_gguf_get_array(g, keys[k], &et, &n, &e) == STRATA_OK) {
			long kv = strata_gguf_find(g, keys[k]);
			for (uint64_t i = 0; i < n && i < 64; i++) {
				strata_gguf_array_string(g, kv, i, &s, &len);
				(void)strata_gguf_array_f64(g, kv, i);
				(void)strata_gguf_array_i64(g, kv, i);
			}
		}
	}
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		if (strata_catalog_find(c, t->name) != t)
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	strata_catalog *c = NULL;
	strata_error e;
	if (strata__catalog_create(STRATA_FORMAT_GGUF, &c, &e))
		return 0;
	if (strata__gguf_read_mem(c, data, size, "fuzz.gguf", &e) == STRATA_OK)
		walk(strata_catalog_gguf(c), c);
	else if (e.message[0] == '\0' || e.fix[0] == '\0')
		__builtin_trap(); /* every error says what and how to fix */
	strata_catalog_destroy(c);
	return 0;
}
