/* tokenize.c - example: the token ids of a text, through the installed
 * libstrata. Build: cc tokenize.c $(pkg-config --cflags --libs strata)
 * Usage: tokenize MODEL TEXT   (MODEL: a folder with tokenizer.json, or a
 * .gguf file). Prints one id per line, then the text decoded back. */
#include <stdio.h>
#include <string.h>

#include <strata/base.h>
#include <strata/text.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: tokenize MODEL TEXT\n");
		return 2;
	}
	strata_error err;
	strata_tokenizer *tok = NULL;
	int32_t *ids = NULL;
	size_t n = 0;
	char *text = NULL;
	size_t len = 0;
	/* Every fallible call fills err with what went wrong and how to fix
	 * it; objects are either made whole or not at all. */
	strata_status st = strata_tokenizer_load(argv[1], &tok, &err);
	if (st == STRATA_OK)
		st = strata_tokenizer_encode(tok, argv[2], strlen(argv[2]),
					     true, &ids, &n, &err);
	if (st == STRATA_OK)
		st = strata_tokenizer_decode(tok, ids, n, true, &text, &len,
					     &err);
	if (st == STRATA_OK) {
		for (size_t i = 0; i < n; i++)
			printf("%d\n", ids[i]);
		printf("%s\n", text);
	} else {
		fprintf(stderr, "tokenize: error: %s\n  fix: %s\n",
			err.message, err.fix);
	}
	strata_free(text);
	strata_free(ids);
	strata_tokenizer_destroy(tok);
	return st == STRATA_OK ? 0 : 1;
}
