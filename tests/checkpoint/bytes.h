/* bytes.h - a growable byte buffer for building checkpoint files in tests
 * (GGUF headers, safetensors headers) and writing them to a temp dir. */
#ifndef STRATA_TESTS_CHECKPOINT_BYTES_H
#define STRATA_TESTS_CHECKPOINT_BYTES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct bytes {
	unsigned char *p;
	size_t len, cap;
} bytes;

static inline void b_put(bytes *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p)
			abort();
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
}

static inline void b_u8(bytes *b, uint8_t v) { b_put(b, &v, 1); }
static inline void b_u32(bytes *b, uint32_t v)
{
	unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8),
			      (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
	b_put(b, x, 4);
}
static inline void b_u64(bytes *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b_u8(b, (uint8_t)(v >> (8 * i)));
}
static inline void b_str(bytes *b, const char *s) /* GGUF string */
{
	b_u64(b, strlen(s));
	b_put(b, s, strlen(s));
}
static inline void b_zero(bytes *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b_u8(b, 0);
}
static inline void b_pad(bytes *b, size_t align)
{
	while (b->len % align)
		b_u8(b, 0);
}
static inline void b_free(bytes *b)
{
	free(b->p);
	*b = (bytes){0};
}

/* Writes n bytes to path; returns 0 on success. */
static inline int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(p, 1, n, f);
	return (fclose(f) != 0 || w != n) ? -1 : 0;
}

/* A fresh temporary directory (caller frees the string). */
static inline char *temp_dir(void)
{
	char *t = strdup("/tmp/strata-ckpt-XXXXXX");
	if (!t || !mkdtemp(t))
		abort();
	return t;
}

#endif
