/* fuzz_tokenizer_gguf.c - libFuzzer target for building a tokenizer from
 * GGUF vocabulary metadata: any bytes, read as a GGUF file, give a
 * tokenizer or an error, never a crash, leak, hang or undefined
 * behaviour; a tokenizer that loads must encode and decode a few texts
 * with every id in range and valid UTF-8 out (layer: text). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/internal.h"

static char path[64];
static int fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* One scratch file for every input: the GGUF reader opens paths. */
	snprintf(path, sizeof path, "/tmp/strata-fuzz-vocab-XXXXXX");
	fd = mkstemp(path);
	if (fd < 0)
		abort();
	return 0;
}

static void check_utf8(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = strata__utf8_valid_len((const unsigned char *)s + i,
						  n - i);
		if (!k)
			abort();
		i += k;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (ftruncate(fd, 0) != 0 ||
	    pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	strata_tokenizer *t = NULL;
	strata_error err;
	if (strata_tokenizer_load(path, &t, &err))
		return 0;
	static const char *texts[] = {
		" ab", "Hello, world! 123", "", "\xe2\x96\x81\xe2\x96\x81x",
		"\xff\xfe <s><|endoftext|>", "a\n\n\tb  c",
	};
	for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
		int32_t *ids;
		size_t n;
		if (strata_tokenizer_encode(t, texts[k], strlen(texts[k]), true,
					    &ids, &n, &err))
			continue;
		for (size_t i = 0; i < n; i++)
			if (ids[i] < 0 ||
			    (uint32_t)ids[i] >= strata_tokenizer_vocab_count(t))
				abort();
		char *s;
		size_t sl;
		if (!strata_tokenizer_decode(t, ids, n, false, &s, &sl, &err)) {
			check_utf8(s, sl);
			strata_free(s);
		}
		strata_free(ids);
	}
	strata_tokenizer_destroy(t);
	return 0;
}
