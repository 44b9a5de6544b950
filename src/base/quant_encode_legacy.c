/* quant_encode_legacy.c - encoders of ggml's 32-element block types Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL, written from the block definitions
 * (layer: base).
 *
 * Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 have one defined rounding: the scale is
 * the block's extreme over the largest code (for the symmetric types the
 * signed value of largest magnitude over the most negative code, so that
 * code is used), each value times the inverse scale is rounded, and the
 * scale is stored as f16 after the codes are chosen with its f32 value.
 * That is the rounding llama.cpp's reference quantizer applies, so these
 * blocks equal llama.cpp's bytes (tests/base/test_quant_encode.c checks it
 * against its files). IQ4_NL has no such rule: its scale is searched.
 * Built with contraction off (CMake) so the error measured here is the
 * decoder's. */
#include <math.h>
#include <string.h>

#include "base/quant_internal.h"

/* The signed value of largest magnitude (the first one on a tie). */
static float signed_extreme(const float *x, int n)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < n; j++)
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	return max;
}

static void min_max(const float *x, int n, float *lo, float *hi)
{
	*lo = x[0];
	*hi = x[0];
	for (int j = 1; j < n; j++) {
		if (x[j] < *lo)
			*lo = x[j];
		if (x[j] > *hi)
			*hi = x[j];
	}
}

/* Packs 32 codes (0..15) as nibbles: j < 16 low nibble of byte j, j >= 16
 * high nibble of byte j - 16 (the decoders' nibble()). */
static void pack_nibbles(const uint8_t *q, unsigned char *qs)
{
	for (int j = 0; j < 16; j++)
		qs[j] = (unsigned char)((q[j] & 0x0f) | (q[j + 16] << 4));
}

/* Packs the fifth bit of 32 codes into the little-endian word at qh. */
static void pack_high_bits(const uint8_t *q, unsigned char *qh)
{
	memset(qh, 0, 4);
	for (int j = 0; j < 32; j++)
		qh[j >> 3] |= (unsigned char)(((q[j] >> 4) & 1) << (j & 7));
}

/* ------------------------------------------------------------------------ */
/* The types with a defined rounding                                        */
/* ------------------------------------------------------------------------ */

void strata__qe_q8_0(const float *x, unsigned char *b)
{
	float amax = 0.0f;
	for (int j = 0; j < 32; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
	strata__store_f16(b, d);
	for (int j = 0; j < 32; j++)
		b[2 + j] = (unsigned char)(int8_t)strata__clamp_round(
			x[j] * id, -127, 127);
}

/* The symmetric 4- and 5-bit types: d = extreme / -half, code =
 * trunc(x / d + half + 0.5) capped at the largest code. */
static void symmetric(const float *x, int half, uint8_t *q, float *d_out)
{
	float d = signed_extreme(x, 32) / (float)-half;
	float id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int j = 0; j < 32; j++) {
		float v = x[j] * id + ((float)half + 0.5f);
		/* v lies in [0.5, 2 half + 0.5]: truncation is floor */
		int c = v >= 0.0f ? (int)fminf(v, (float)(2 * half)) : 0;
		q[j] = (uint8_t)(c > 2 * half - 1 ? 2 * half - 1 : c);
	}
	*d_out = d;
}

/* The affine 4- and 5-bit types: d = (max - min) / top, m = min, code =
 * trunc((x - min) / d + 0.5) capped at top. */
static void affine(const float *x, int top, uint8_t *q, float *d_out,
		   float *m_out)
{
	float lo, hi;
	min_max(x, 32, &lo, &hi);
	float d = (hi - lo) / (float)top, id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int j = 0; j < 32; j++) {
		float v = (x[j] - lo) * id + 0.5f;
		int c = v >= 0.0f ? (int)fminf(v, (float)top) : 0;
		q[j] = (uint8_t)c;
	}
	*d_out = d;
	*m_out = lo;
}

void strata__qe_q4_0(const float *x, unsigned char *b)
{
	uint8_t q[32];
	float d;
	symmetric(x, 8, q, &d);
	strata__store_f16(b, d);
	pack_nibbles(q, b + 2);
}

void strata__qe_q5_0(const float *x, unsigned char *b)
{
	uint8_t q[32];
	float d;
	symmetric(x, 16, q, &d);
	strata__store_f16(b, d);
	pack_high_bits(q, b + 2);
	pack_nibbles(q, b + 6);
}

void strata__qe_q4_1(const float *x, unsigned char *b)
{
	uint8_t q[32];
	float d, m;
	affine(x, 15, q, &d, &m);
	strata__store_f16(b, d);
	strata__store_f16(b + 2, m);
	pack_nibbles(q, b + 4);
}

void strata__qe_q5_1(const float *x, unsigned char *b)
{
	uint8_t q[32];
	float d, m;
	affine(x, 31, q, &d, &m);
	strata__store_f16(b, d);
	strata__store_f16(b + 2, m);
	pack_high_bits(q, b + 4);
	pack_nibbles(q, b + 8);
}

/* ------------------------------------------------------------------------ */
/* IQ4_NL: a searched scale over the non-linear levels                      */
/* ------------------------------------------------------------------------ */

void strata__qe_iq4_nl(const float *x, unsigned char *b)
{
	uint8_t q[32];
	float d = strata__iq4_fit(x, 32, q);
	strata__store_f16(b, d);
	/* the codes again for the scale as stored */
	float ds = strata__load_f16(b);
	strata__iq4_assign(x, 32, ds, q);
	pack_nibbles(q, b + 2);
}
