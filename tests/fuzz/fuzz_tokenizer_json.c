/* fuzz_tokenizer_json.c - libFuzzer target for tokenizer.json loading: any
 * bytes give a tokenizer or an error, never a crash, leak, hang or
 * undefined behaviour; a tokenizer that loads must then encode, decode
 * and stream-decode a few texts with every id in range and every output
 * valid UTF-8 (layer: text). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/internal.h"

#include "../text/stream_oracle.h"

static void check_utf8(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = strata__utf8_valid_len((const unsigned char *)s + i,
						  n - i);
		if (!k)
			abort(); /* output must always be valid UTF-8 */
		i += k;
	}
}

static void exercise(const strata_tokenizer *t, const char *text, size_t len)
{
	strata_error err;
	int32_t *ids;
	size_t n;
	if (strata_tokenizer_encode(t, text, len, true, &ids, &n, &err))
		return;
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= strata_tokenizer_vocab_count(t))
			abort();
	char *s;
	size_t sl;
	if (!strata_tokenizer_decode(t, ids, n, false, &s, &sl, &err)) {
		check_utf8(s, sl);
		strata_free(s);
	}
	/* Whatever decoder chain the file builds, the stream gives what the
	 * whole decoder gives, for any prompt split. */
	if (so_check(t, ids, n, 0, true) || so_check(t, ids, n, n / 2, false))
		abort();
	strata_free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	strata_tokenizer *t = NULL;
	strata_error err;
	if (strata_tokenizer_from_json((const char *)data, size, "fuzz", &t,
				       &err))
		return 0;
	static const char *texts[] = {
		"The cat and the hat's 12345 ab, \xc3\xbf! <|eot|>  x",
		"", " ", "\n\n\t  ", "<s>a</s>", "\xff\xfe\xe2\x82",
		"\xe2\x96\x81\xe2\x96\x81 e\xcc\x81 \xf0\x9f\x98\x80",
	};
	for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
		exercise(t, texts[i], strlen(texts[i]));
	strata_tokenizer_destroy(t);
	return 0;
}
