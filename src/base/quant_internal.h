/* quant_internal.h - what the block decoder files of base share: one block
 * decoder per type, written from ggml's block definitions, bit-exact
 * against gguf-py's reference dequantizer (tests/checkpoint/
 * test_quant_dequant.c), and the layout helpers (layer: base).
 * Not a public API: names are strata__ and may change. */
#ifndef STRATA_BASE_QUANT_INTERNAL_H
#define STRATA_BASE_QUANT_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "strata/base.h"

/* IQ4_NL's and IQ4_XS's 16 non-linear levels (ggml's kvalues_iq4nl). */
extern const int8_t strata__iq4nl_levels[16];

/* Per-family block decoders (quant_legacy.c, quant_kquants.c): decode one
 * block at b into y; false when one of its scales is not finite. */
bool strata__dq_q4_0(const unsigned char *b, float *y);
bool strata__dq_q4_1(const unsigned char *b, float *y);
bool strata__dq_q5_0(const unsigned char *b, float *y);
bool strata__dq_q5_1(const unsigned char *b, float *y);
bool strata__dq_q8_0(const unsigned char *b, float *y);
bool strata__dq_iq4_nl(const unsigned char *b, float *y);
bool strata__dq_q2_k(const unsigned char *b, float *y);
bool strata__dq_q3_k(const unsigned char *b, float *y);
bool strata__dq_q4_k(const unsigned char *b, float *y);
bool strata__dq_q5_k(const unsigned char *b, float *y);
bool strata__dq_q6_k(const unsigned char *b, float *y);
bool strata__dq_iq4_xs(const unsigned char *b, float *y);

/* Sets the kernel level of strata_block_first_nonfinite (quant_finite.c):
 * 0 scalar, 1 AVX2, 2 AVX-512BW, capped at what this processor runs; a
 * negative `want` restores the best. Returns the level now in force. For
 * tests, which compare every level on the same bytes. */
int strata__finite_set_level(int want);

/* Per-family block encoders (quant_encode_legacy.c, quant_encode_kquants.c):
 * encode one block of finite values at x into b. */
void strata__qe_q4_0(const float *x, unsigned char *b);
void strata__qe_q4_1(const float *x, unsigned char *b);
void strata__qe_q5_0(const float *x, unsigned char *b);
void strata__qe_q5_1(const float *x, unsigned char *b);
void strata__qe_q8_0(const float *x, unsigned char *b);
void strata__qe_iq4_nl(const float *x, unsigned char *b);
void strata__qe_q2_k(const float *x, unsigned char *b);
void strata__qe_q3_k(const float *x, unsigned char *b);
void strata__qe_q4_k(const float *x, unsigned char *b);
void strata__qe_q5_k(const float *x, unsigned char *b);
void strata__qe_q6_k(const float *x, unsigned char *b);
void strata__qe_iq4_xs(const float *x, unsigned char *b);

/* float to IEEE half / bfloat16 bits, rounded to nearest even (ggml's
 * conversions: NaN stays a quiet NaN, overflow becomes infinity). */
uint16_t strata__f32_to_f16(float f);
uint16_t strata__f32_to_bf16(float f);

/* Stores the half of f at p, little-endian. */
static inline void strata__store_f16(unsigned char *p, float f)
{
	uint16_t h = strata__f32_to_f16(f);
	p[0] = (unsigned char)h;
	p[1] = (unsigned char)(h >> 8);
}

/* f rounded to the nearest integer (half away from zero, as roundf),
 * clamped to [lo, hi] before any conversion, so no value is undefined. */
static inline int strata__clamp_round(float f, int lo, int hi)
{
	float r = roundf(f);
	if (!(r >= (float)lo))
		return lo;
	if (r > (float)hi)
		return hi;
	return (int)r;
}

/* The same for the scale searches, without the libm call: f + 0.5 toward
 * its sign, truncated; it may differ from roundf one ulp below a half,
 * which a search (that measures every candidate it keeps) does not mind. */
static inline int strata__search_round(float f, int lo, int hi)
{
	if (!(f > (float)lo - 0.5f))
		return lo;
	if (f >= (float)hi + 0.5f)
		return hi;
	return (int)(f >= 0.0f ? f + 0.5f : f - 0.5f);
}

/* The scale searches (quant_fit.c). Symmetric: the s of least squared
 * error for x[0..n) ~ s * q, q in [lo, hi] (0 for an all-zero run);
 * strata__sym_assign chooses the codes for s into q and returns the
 * squared error, computed as the decoders compute (s * q). */
float strata__fit_symmetric(const float *x, int n, int lo, int hi);
float strata__sym_assign(const float *x, int n, int lo, int hi, float s,
			 int8_t *q);
/* Affine: x ~ s * q - m with q in [0, top], s >= 0, m >= 0 (a run that
 * is all positive keeps m = 0, as the formats' unsigned mins require). */
void strata__fit_affine(const float *x, int n, int top, float *s, float *m);
float strata__aff_assign(const float *x, int n, int top, float s, float m,
			 uint8_t *q);
/* IQ4's levels: the index of the level nearest v; the codes of x for
 * factor d (returning the squared error d * level); the searched factor
 * (f16-rounded while searching when f16 is true) with its codes. */
int strata__iq4_nearest(float v);
float strata__iq4_assign(const float *x, int n, float d, uint8_t *q);
float strata__iq4_search(const float *x, int n, bool f16, uint8_t *q);
float strata__iq4_fit(const float *x, int n, uint8_t *q);

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's
 * 12 packed scale bytes. */
void strata__q4k_scale_min(const unsigned char *s, int j, uint8_t *sc,
			   uint8_t *m);

/* IEEE half (as its bits) to float, subnormals and specials kept. */
float strata__f16_to_f32(uint16_t h);

/* Little-endian f16 at p, as f32 (subnormals and specials kept). */
static inline float strata__load_f16(const unsigned char *p)
{
	return strata__f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* f rounded to the nearest f16 value, as f32. */
static inline float strata__f16_round(float f)
{
	return strata__f16_to_f32(strata__f32_to_f16(f));
}

#endif
