/* error.c - status names, error values with a fix, escaping and checked
 * arithmetic that names what overflowed (layer: base). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "strata/base.h"

/* ------------------------------------------------------------------------ */

static void vformat(char *dst, size_t cap, const char *fmt, va_list ap)
{
	int n = vsnprintf(dst, cap, fmt, ap);
	if (n < 0)
		dst[0] = '\0';
}

/* ------------------------------------------------------------------------ */

const char *strata_status_name(strata_status code)
{
	switch (code) {
#define NAME_CASE(name, value, text)                                           \
	case STRATA_##name:                                                    \
		return #name;
		STRATA_STATUS_MAP(NAME_CASE)
#undef NAME_CASE
	}
	return "unknown";
}

const char *strata_status_text(strata_status code)
{
	switch (code) {
#define TEXT_CASE(name, value, text)                                           \
	case STRATA_##name:                                                    \
		return text;
		STRATA_STATUS_MAP(TEXT_CASE)
#undef TEXT_CASE
	}
	return "unknown";
}

void strata_error_clear(strata_error *err)
{
	if (!err)
		return;
	err->code = STRATA_OK;
	err->message[0] = '\0';
	err->fix[0] = '\0';
}

strata_status strata_fail(strata_error *err, strata_status code,
			  const char *fix, const char *fmt, ...)
{
	if (!err)
		return code;
	err->code = code;
	va_list ap;
	va_start(ap, fmt);
	vformat(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	snprintf(err->fix, sizeof err->fix, "%s", fix ? fix : "");
	return code;
}

strata_status strata_error_set_fix(strata_error *err, const char *fmt, ...)
{
	if (!err)
		return STRATA_E_INTERNAL;
	va_list ap;
	va_start(ap, fmt);
	vformat(err->fix, sizeof err->fix, fmt, ap);
	va_end(ap);
	return err->code;
}

strata_status strata_error_prefix(strata_error *err, const char *fmt, ...)
{
	if (!err)
		return STRATA_E_INTERNAL;
	char prefix[STRATA_ERROR_MESSAGE_BYTES];
	char joined[STRATA_ERROR_MESSAGE_BYTES];
	va_list ap;
	va_start(ap, fmt);
	vformat(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	/* Truncation is intended: a long message keeps its beginning. */
	size_t pl = strlen(prefix), ml = strlen(err->message);
	size_t cap = sizeof joined - 1;
	size_t o = pl < cap ? pl : cap;
	memcpy(joined, prefix, o);
	for (const char *sep = ": "; *sep && o < cap; sep++)
		joined[o++] = *sep;
	size_t take = ml < cap - o ? ml : cap - o;
	memcpy(joined + o, err->message, take);
	joined[o + take] = '\0';
	memcpy(err->message, joined, sizeof joined);
	return err->code;
}

char *strata_escape(char *dst, size_t cap, const void *bytes, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = bytes;
	size_t o = 0, whole = 0;
	if (cap == 0)
		return dst;
	for (size_t i = 0; i < len && whole < cap; i++)
		whole += (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') ? 1 : 4;
	/* Reserve room for "..." only when the whole text cannot fit. */
	size_t reserve = whole < cap ? 1 : 4;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = p[i];
		size_t need = (c >= 0x20 && c < 0x7f && c != '\\') ? 1 : 4;
		if (o + need + reserve > cap) { /* room for "..." and NUL */
			if (o + 4 <= cap) {
				memcpy(dst + o, "...", 3);
				o += 3;
			}
			break;
		}
		if (need == 1) {
			dst[o++] = (char)c;
		} else {
			dst[o++] = '\\';
			dst[o++] = 'x';
			dst[o++] = hex[c >> 4];
			dst[o++] = hex[c & 15];
		}
	}
	dst[o] = '\0';
	return dst;
}

strata_status strata_checked_add(uint64_t a, uint64_t b, uint64_t *out,
				 const char *what, strata_error *err)
{
	if (strata_add_u64(a, b, out))
		return STRATA_OK;
	return strata_fail(err, STRATA_E_OVERFLOW,
			   "the input declares sizes too large to be real; check it is not corrupt",
			   "%s overflowed: %" PRIu64 " + %" PRIu64
			   " exceeds 2^64-1",
			   what, a, b);
}

strata_status strata_checked_mul(uint64_t a, uint64_t b, uint64_t *out,
				 const char *what, strata_error *err)
{
	if (strata_mul_u64(a, b, out))
		return STRATA_OK;
	return strata_fail(err, STRATA_E_OVERFLOW,
			   "the input declares sizes too large to be real; check it is not corrupt",
			   "%s overflowed: %" PRIu64 " * %" PRIu64
			   " exceeds 2^64-1",
			   what, a, b);
}

strata_status strata_checked_align(uint64_t bytes, uint64_t *out,
				   const char *what, strata_error *err)
{
	if (bytes > UINT64_MAX - (STRATA_ALIGN - 1))
		return strata_fail(err, STRATA_E_OVERFLOW,
				   "the input declares sizes too large to be real; check it is not corrupt",
				   "%s overflowed: %" PRIu64
				   " bytes rounded up to %u exceeds 2^64-1",
				   what, bytes, STRATA_ALIGN);
	*out = (bytes + (STRATA_ALIGN - 1)) & ~(uint64_t)(STRATA_ALIGN - 1);
	return STRATA_OK;
}
