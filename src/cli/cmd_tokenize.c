/* cmd_tokenize.c - `strata tokenize MODEL -p TEXT [--ids] [--no-special]`
 * (or -f FILE for long or binary text):
 * the token ids of a text, from a model's tokenizer.json or GGUF
 * vocabulary (layer: cli). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/text.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata tokenize MODEL (-p TEXT | -f FILE) [--ids] "
		"[--no-special]\n"
		"\n"
		"Tokenizes TEXT with MODEL's tokenizer: a directory holding\n"
		"tokenizer.json, or a .gguf file (vocabulary-only ones too).\n"
		"\n"
		"  -p, --prompt TEXT  the text to tokenize (any bytes)\n"
		"  -f, --file FILE    tokenize the whole content of FILE\n"
		"  --ids              print one line of space-separated ids\n"
		"  --no-special       add no special tokens (the default adds\n"
		"                     BOS/EOS where the tokenizer says to)\n"
		"\n"
		"Default output: one line per token, ID<TAB>PIECE, with the\n"
		"piece as stored in the vocabulary; control characters,\n"
		"backslash and invalid UTF-8 are written as \\xNN.\n");
}

/* Printable UTF-8 as is; control bytes, backslash and invalid bytes as
 * \xNN so every piece stays on its line. */
static void print_piece(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t i = 0;
	while (i < n) {
		size_t k = 0;
		if (u[i] >= 0xC2 && u[i] <= 0xF4) {
			k = u[i] < 0xE0 ? 2 : u[i] < 0xF0 ? 3 : 4;
			for (size_t j = 1; j < k; j++)
				if (i + j >= n || (u[i + j] & 0xC0) != 0x80)
					k = 0;
		}
		if (k) {
			fwrite(u + i, 1, k, stdout);
			i += k;
		} else if (u[i] >= 0x20 && u[i] < 0x7F && u[i] != '\\') {
			putchar(u[i++]);
		} else {
			printf("\\x%02x", u[i++]);
		}
	}
}

int strata_cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *text = NULL, *file = NULL;
	bool ids_only = false, special = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			help(stdout);
			return STRATA_EXIT_OK;
		} else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
			if (i + 1 >= argc)
				return strata_cli_usage("tokenize",
							"%s needs a text", a);
			text = argv[++i];
		} else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
			if (i + 1 >= argc)
				return strata_cli_usage("tokenize",
							"%s needs a file", a);
			file = argv[++i];
		} else if (!strcmp(a, "--ids")) {
			ids_only = true;
		} else if (!strcmp(a, "--no-special")) {
			special = false;
		} else if (a[0] == '-' && a[1]) {
			return strata_cli_unknown_option("tokenize", a, help);
		} else if (!model) {
			model = a;
		} else {
			return strata_cli_usage("tokenize",
						"more than one MODEL given");
		}
	}
	if (!model)
		return strata_cli_usage("tokenize", "no MODEL given");
	if (!text == !file)
		return strata_cli_usage("tokenize", "give the text with exactly "
					"one of -p TEXT and -f FILE");
	strata_error err;
	strata_tokenizer *t = NULL;
	int32_t *ids = NULL;
	size_t n = 0, len = text ? strlen(text) : 0;
	char *content = NULL;
	if ((file && strata_file_read_all(file, (uint64_t)1 << 32, &content,
					  &len, &err)) ||
	    strata_tokenizer_load(model, &t, &err) ||
	    strata_tokenizer_encode(t, file ? content : text, len, special,
				    &ids, &n, &err)) {
		strata_free(content);
		strata_tokenizer_destroy(t);
		return strata_cli_fail(&err);
	}
	strata_free(content);
	for (size_t i = 0; i < n; i++) {
		if (ids_only) {
			printf(i ? " %d" : "%d", ids[i]);
			continue;
		}
		size_t len = 0;
		const char *p = strata_tokenizer_piece(t, ids[i], &len);
		printf("%d\t", ids[i]);
		print_piece(p ? p : "", len);
		putchar('\n');
	}
	if (ids_only)
		putchar('\n');
	strata_free(ids);
	strata_tokenizer_destroy(t);
	if (fflush(stdout) != 0) {
		strata_fail(&err, STRATA_E_IO, "check the output",
			    "writing the tokens failed");
		return strata_cli_fail(&err);
	}
	return STRATA_EXIT_OK;
}
