/* quant_kquants.c - decoders of ggml's 256-element super-block types Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS, written from the block definitions
 * ggml documents (ggml-common.h), bit-exact against gguf-py
 * (layer: base).
 *
 * A super-block holds one or two f16 factors and per-sub-block integer
 * scales; a sub-block's factor is rounded to f32 first (d * scale), then
 * each element is one more product (and one difference for the types with
 * a min), the order gguf-py computes in. Contraction is off (see CMake). */
#include <math.h>

#include "base/quant_internal.h"

/* Q2_K (84 bytes): 16 scale bytes (low nibble scale, high nibble min),
 * 64 bytes of 2-bit q, f16 d, f16 dmin. Element e: q is bits 2j..2j+1 of
 * byte 32 * (e / 128) + e % 32 with j = e % 128 / 32; its sub-block is
 * e / 16; x = (d * sc) * q - (dmin * m). */
bool strata__dq_q2_k(const unsigned char *b, float *y)
{
	const unsigned char *sc = b, *qs = b + 16;
	float d = strata__load_f16(b + 80), dmin = strata__load_f16(b + 82);
	for (int s = 0; s < 16; s++) {
		float dl = d * (float)(sc[s] & 0x0f);
		float ml = dmin * (float)(sc[s] >> 4);
		for (int i = 0; i < 16; i++) {
			int e = 16 * s + i, j = e % 128 / 32;
			int q = (qs[32 * (e / 128) + e % 32] >> (2 * j)) & 3;
			y[e] = dl * (float)q - ml;
		}
	}
	return isfinite(d) && isfinite(dmin);
}

/* Q3_K's 16 six-bit scales, offset by 32: the low four bits of scale i are
 * nibble i / 8 of byte i % 8, the high two bits are bits 2 (i / 4) of byte
 * 8 + i % 4. */
static int q3k_scale(const unsigned char *s, int i)
{
	int lo = (s[i % 8] >> (4 * (i / 8))) & 0x0f;
	int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
	return (lo | hi << 4) - 32;
}

/* Q3_K (110 bytes): 32 bytes of high-bit mask, 64 bytes of 2-bit q, 12
 * bytes of packed scales, f16 d. Element e: low bits as Q2_K's, the mask
 * bit is bit e / 32 of mask byte e % 32, and a clear bit subtracts 4;
 * x = (d * scale) * q. */
bool strata__dq_q3_k(const unsigned char *b, float *y)
{
	const unsigned char *hm = b, *qs = b + 32, *sc = b + 96;
	float d = strata__load_f16(b + 108);
	for (int s = 0; s < 16; s++) {
		float dl = d * (float)q3k_scale(sc, s);
		for (int i = 0; i < 16; i++) {
			int e = 16 * s + i, j = e % 128 / 32, l = e % 32;
			int q = (qs[32 * (e / 128) + l] >> (2 * j)) & 3;
			int h = (hm[l] >> (e / 32)) & 1;
			y[e] = dl * (float)(q - ((h ^ 1) << 2));
		}
	}
	return isfinite(d);
}

/* Q4_K/Q5_K scales: bytes 0-3 hold scales 0-3 in their low six bits,
 * bytes 4-7 mins 0-3; sub-blocks 4-7 take their low four bits from bytes
 * 8-11 (scale low nibble, min high nibble) and their top two bits from the
 * top bits of bytes 0-3 (scale) and 4-7 (min). */
void strata__q4k_scale_min(const unsigned char *s, int j, uint8_t *sc,
			   uint8_t *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30));
		*m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 2) & 0x30));
	}
}

/* Q4_K (144 bytes): f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles.
 * Element e: nibble (e % 64) / 32 of byte 32 * (e / 64) + e % 32; its
 * sub-block is e / 32; x = (d * sc) * q - (dmin * m). */
bool strata__dq_q4_k(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b), dmin = strata__load_f16(b + 2);
	const unsigned char *qs = b + 16;
	for (int s = 0; s < 8; s++) {
		uint8_t sc, m;
		strata__q4k_scale_min(b + 4, s, &sc, &m);
		float dl = d * (float)sc, ml = dmin * (float)m;
		const unsigned char *q = qs + 32 * (s / 2);
		int shift = 4 * (s % 2);
		for (int l = 0; l < 32; l++)
			y[32 * s + l] =
				dl * (float)((q[l] >> shift) & 0x0f) - ml;
	}
	return isfinite(d) && isfinite(dmin);
}

/* Q5_K (176 bytes): Q4_K's header and nibbles (at 48) with 32 bytes of high
 * bits at 16: element e's fifth bit is bit e / 32 of byte e % 32. */
bool strata__dq_q5_k(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b), dmin = strata__load_f16(b + 2);
	const unsigned char *qh = b + 16, *qs = b + 48;
	for (int s = 0; s < 8; s++) {
		uint8_t sc, m;
		strata__q4k_scale_min(b + 4, s, &sc, &m);
		float dl = d * (float)sc, ml = dmin * (float)m;
		const unsigned char *q = qs + 32 * (s / 2);
		int shift = 4 * (s % 2);
		for (int l = 0; l < 32; l++) {
			int v = ((q[l] >> shift) & 0x0f) |
				((qh[l] >> s) & 1) << 4;
			y[32 * s + l] = dl * (float)v - ml;
		}
	}
	return isfinite(d) && isfinite(dmin);
}

/* Q6_K (210 bytes): 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16
 * int8 scales, f16 d. Element e, r = e % 128: low nibble r / 64 of byte
 * 64 * (e / 128) + r % 64, high bits 2 (r / 32) of byte 32 * (e / 128) +
 * r % 32; x = (d * scale[e / 16]) * (q - 32). */
bool strata__dq_q6_k(const unsigned char *b, float *y)
{
	const unsigned char *ql = b, *qh = b + 128, *sc = b + 192;
	float d = strata__load_f16(b + 208);
	for (int s = 0; s < 16; s++) {
		float dl = d * (float)(int8_t)sc[s];
		for (int i = 0; i < 16; i++) {
			int e = 16 * s + i, h = e / 128, r = e % 128;
			int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
			int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
			y[e] = dl * (float)((lo | hi << 4) - 32);
		}
	}
	return isfinite(d);
}

/* IQ4_XS (136 bytes): f16 d, a 16-bit word of scale high bits, 4 bytes of
 * scale low nibbles, 128 bytes of nibbles; 8 sub-blocks of 32. Sub-block
 * ib's scale is nibble ib % 2 of byte ib / 2 with bits 2 ib..2 ib+1 of the
 * word above, offset by 32; its element l is nibble l / 16 of byte
 * 16 ib + l % 16; x = (d * scale) * level[q]. */
bool strata__dq_iq4_xs(const unsigned char *b, float *y)
{
	float d = strata__load_f16(b);
	unsigned sh = (unsigned)(b[2] | (b[3] << 8));
	const unsigned char *sl = b + 4, *qs = b + 8;
	for (int ib = 0; ib < 8; ib++) {
		int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
			 (int)((sh >> (2 * ib)) & 3) << 4;
		float dl = d * (float)(ls - 32);
		for (int l = 0; l < 32; l++) {
			int q = (qs[16 * ib + l % 16] >> (4 * (l / 16))) & 0x0f;
			y[32 * ib + l] = dl * (float)strata__iq4nl_levels[q];
		}
	}
	return isfinite(d);
}
