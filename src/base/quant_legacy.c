/* quant_legacy.c - decoders of ggml's 32-element block types Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 and IQ4_NL, written from the block definitions ggml
 * documents (ggml-common.h), bit-exact against gguf-py (layer: base).
 *
 * Every product and sum below is one float operation, rounded once, in the
 * order gguf-py computes it; this file is built with contraction off, so no
 * compiler fuses a multiply-add and changes a bit (-ffp-contract=off in
 * CMake). */
#include <math.h>

#include "base/quant_internal.h"

/* ggml's kvalues_iq4nl: the levels a 4-bit IQ4 index selects. */
const int8_t strata__iq4nl_levels[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10,
	1,    13,   25,  38,  53,  69,  89,  113,
};

/* Element j of a 32-element block of nibbles: j < 16 is the low nibble of
 * byte j, j >= 16 the high nibble of byte j - 16. */
static inline int nibble(const unsigned char *qs, int j)
{
	return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
}

/* Bit j of the 32-bit little-endian high-bit word at qh. */
static inline int high_bit(const unsigned char *qh, int j)
{
	return (qh[j >> 3] >> (j & 7)) & 1;
}

/* Q4_0 (18 bytes): f16 d, 16 bytes of nibbles; x = d * (q - 8). */
bool strata__dq_q4_0(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b);
	for (int j = 0; j < 32; j++)
		y[j] = d * (float)(nibble(b + 2, j) - 8);
	return isfinite(d);
}

/* Q4_1 (20 bytes): f16 d, f16 m, 16 bytes of nibbles; x = d * q + m. */
bool strata__dq_q4_1(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b), m = strata__load_f16(b + 2);
	for (int j = 0; j < 32; j++)
		y[j] = d * (float)nibble(b + 4, j) + m;
	return isfinite(d) && isfinite(m);
}

/* Q5_0 (22 bytes): f16 d, 32 high bits, 16 bytes of nibbles;
 * x = d * (q - 16) with q = nibble | high bit << 4. */
bool strata__dq_q5_0(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b);
	for (int j = 0; j < 32; j++) {
		int q = nibble(b + 6, j) | high_bit(b + 2, j) << 4;
		y[j] = d * (float)(q - 16);
	}
	return isfinite(d);
}

/* Q5_1 (24 bytes): f16 d, f16 m, 32 high bits, 16 bytes of nibbles;
 * x = d * q + m. */
bool strata__dq_q5_1(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b), m = strata__load_f16(b + 2);
	for (int j = 0; j < 32; j++) {
		int q = nibble(b + 8, j) | high_bit(b + 4, j) << 4;
		y[j] = d * (float)q + m;
	}
	return isfinite(d) && isfinite(m);
}

/* Q8_0 (34 bytes): f16 d, 32 int8 q; x = q * d. */
bool strata__dq_q8_0(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b);
	for (int j = 0; j < 32; j++)
		y[j] = (float)(int8_t)b[2 + j] * d;
	return isfinite(d);
}

/* IQ4_NL (18 bytes): f16 d, 16 bytes of nibbles indexing the levels;
 * x = d * level[q]. */
bool strata__dq_iq4_nl(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b);
	for (int j = 0; j < 32; j++)
		y[j] = d * (float)strata__iq4nl_levels[nibble(b + 2, j)];
	return isfinite(d);
}
