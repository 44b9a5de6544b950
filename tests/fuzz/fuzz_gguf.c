/* fuzz_gguf.c - libFuzzer target for the GGUF reader: any bytes must give
 * a catalog or an error, never a crash, leak or undefined behaviour; on
 * success the getters are exercised; and the buffered file reader must
 * agree with the memory reader on every input (differential). */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint/readers.h"

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

/* The same bytes through the buffered file reader (a memfd): it must
 * agree with the memory reader on the outcome and the tensor count. */
static void differential(const uint8_t *data, size_t size, strata_status want,
			 size_t want_count)
{
	static int fd = -2;
	if (fd == -2)
		fd = memfd_create("fuzz-gguf", 0);
	if (fd < 0 || ftruncate(fd, 0) != 0 ||
	    (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		return;
	strata_catalog *c = NULL;
	strata_error e;
	if (strata__catalog_create(STRATA_FORMAT_GGUF, &c, &e))
		return;
	strata_status s = strata__gguf_read_fd(c, fd, size, "fuzz.gguf", &e);
	if (s != want || (s == STRATA_OK && strata_catalog_count(c) != want_count))
		__builtin_trap();
	strata_catalog_destroy(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	strata_catalog *c = NULL;
	strata_error e;
	if (strata__catalog_create(STRATA_FORMAT_GGUF, &c, &e))
		return 0;
	strata_status s = strata__gguf_read_mem(c, data, size, "fuzz.gguf", &e);
	if (s == STRATA_OK)
		walk(strata_catalog_gguf(c), c);
	else if (e.message[0] == '\0' || e.fix[0] == '\0')
		__builtin_trap(); /* every error says what and how to fix */
	differential(data, size, s, s == STRATA_OK ? strata_catalog_count(c) : 0);
	strata_catalog_destroy(c);
	return 0;
}
