/* text_fixture.h - shared helpers of the text layer's tests: reading
 * committed data, loading tokenizers, comparing id lists (layer: text). */
#ifndef STRATA_TESTS_TEXT_FIXTURE_H
#define STRATA_TESTS_TEXT_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "strata/text.h"

/* Reads STRATA_SOURCE_DIR/rel into a NUL-terminated malloc'd buffer. */
static inline char *tt_read(const char *rel, size_t *len)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", STRATA_SOURCE_DIR, rel);
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(f);
	if (b) {
		b[n] = '\0';
		if (len)
			*len = (size_t)n;
	}
	return b;
}

static inline strata_tokenizer *tt_load(const char *rel)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", STRATA_SOURCE_DIR, rel);
	strata_tokenizer *t = NULL;
	strata_error err;
	if (strata_tokenizer_load(path, &t, &err)) {
		fprintf(stderr, "load %s: %s (%s)\n", rel, err.message, err.fix);
		return NULL;
	}
	return t;
}

static inline void tt_hex(const char *hex, char *out, size_t *len)
{
	size_t n = strlen(hex) / 2;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		out[i] = (char)v;
	}
	out[n] = '\0';
	*len = n;
}

static inline void tt_print_ids(const char *label, const int32_t *ids,
				size_t n)
{
	fprintf(stderr, "  %s:", label);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fprintf(stderr, "\n");
}

/* tests/data/tokenizers/tiny/WHICH.json, parsed. */
static inline json_t *tiny(const char *which)
{
	char rel[256];
	snprintf(rel, sizeof rel, "tests/data/tokenizers/tiny/%s.json", which);
	size_t n = 0;
	char *s = tt_read(rel, &n);
	assert_non_null(s);
	json_t *j = json_loadb(s, n, 0, NULL);
	free(s);
	assert_non_null(j);
	return j;
}

/* text parsed as JSON (any value). */
static inline json_t *obj(const char *text)
{
	json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
	assert_non_null(j);
	return j;
}

#endif
