/* qdot_codes.h - a chunk's codes unpacked with AVX2 byte instructions, in
 * the slot order of qdot.h, the bytes strata__qdot_codes gives, and its
 * factors with F16C, the floats strata__qdot_factors gives: included
 * by qdot_avx2.c and qdot_vnni.c, each defining QDOT_TARGET (its
 * __attribute__((target))) first (layer: backend). The types without an
 * unpacking here go to the portable one. */
#ifndef STRATA_BACKEND_CPU_QDOT_CODES_H
#define STRATA_BACKEND_CPU_QDOT_CODES_H

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/qdot.h"

#define LOAD128(p) _mm_loadu_si128((const __m128i *)(p))
#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(p))
#define STORE256(p, v) _mm256_storeu_si256((__m256i *)(p), (v))

/* Bytes 0-15 of v's low and high nibbles: a 32-element nibble block. */
QDOT_TARGET static inline __m256i nibbles32(__m128i v)
{
	const __m128i m = _mm_set1_epi8(15);
	return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m),
				_mm_and_si128(v, m));
}

/* Bytes whose bit (set in `bits`, one per byte) is set in h: 0 or 0xff. */
QDOT_TARGET static inline __m256i bit_set(__m256i h, __m256i bits)
{
	return _mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits);
}

/* The 32 bits of the little-endian word at p spread one per byte (bit i
 * of the word in byte i: 0 or 0xff). */
QDOT_TARGET static inline __m256i bits32(const unsigned char *p)
{
	uint32_t w;
	memcpy(&w, p, 4);
	const __m256i pick = _mm256_setr_epi8(
		0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
		2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w), pick);
	return bit_set(v, bit);
}

/* The IQ4 levels plus 128, as a shuffle table in both lanes. */
QDOT_TARGET static inline __m256i iq4_table(void)
{
	return _mm256_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129,
				(char)141, (char)153, (char)166, (char)181,
				(char)197, (char)217, (char)241, 1, 24, 45, 63,
				79, 93, 106, 118, (char)129, (char)141,
				(char)153, (char)166, (char)181, (char)197,
				(char)217, (char)241);
}

/* Whole 32-element blocks: nb (<= 8) blocks at p of bb bytes. */
QDOT_TARGET static inline void codes32(strata_block_type t,
				       const unsigned char *p, uint32_t nb,
				       uint32_t bb, uint8_t *u)
{
	const __m256i k80 = _mm256_set1_epi8((char)0x80),
		      k16 = _mm256_set1_epi8(16);
	for (uint32_t b = 0; b < nb; b++, p += bb) {
		__m256i v;
		switch (t) {
		case STRATA_BLOCK_Q8_0:
			v = _mm256_xor_si256(LOAD256(p + 2), k80);
			break;
		case STRATA_BLOCK_Q4_0: v = nibbles32(LOAD128(p + 2)); break;
		case STRATA_BLOCK_Q4_1: v = nibbles32(LOAD128(p + 4)); break;
		case STRATA_BLOCK_Q5_0:
			v = _mm256_or_si256(nibbles32(LOAD128(p + 6)),
					    _mm256_and_si256(bits32(p + 2), k16));
			break;
		case STRATA_BLOCK_Q5_1:
			v = _mm256_or_si256(nibbles32(LOAD128(p + 8)),
					    _mm256_and_si256(bits32(p + 4), k16));
			break;
		default: /* IQ4_NL */
			v = _mm256_shuffle_epi8(iq4_table(),
						nibbles32(LOAD128(p + 2)));
			break;
		}
		STORE256(u + 32 * b, v);
	}
	memset(u + 32 * nb, 0, QDOT_CHUNK - 32 * nb);
}

/* Q4_K (nibbles at 16) and Q5_K (at 48, fifth bits at 16): bytes 32 p ..
 * 32 p + 31 hold sub-blocks 2 p (low) and 2 p + 1 (high); slots 0 2 1 3
 * 4 6 5 7 put the low nibbles of two such runs before their high ones. */
QDOT_TARGET static inline void codes_q45k(const unsigned char *b, bool five,
					  uint8_t *u)
{
	const __m256i m = _mm256_set1_epi8(15), k16 = _mm256_set1_epi8(16);
	const unsigned char *qs = b + (five ? 48 : 16);
	__m256i h = five ? LOAD256(b + 16) : _mm256_setzero_si256();
	for (int p = 0; p < 4; p++) {
		__m256i v = LOAD256(qs + 32 * p);
		__m256i lo = _mm256_and_si256(v, m);
		__m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
		if (five) {
			__m256i bl = _mm256_set1_epi8((char)(1 << (2 * p)));
			__m256i bh = _mm256_set1_epi8((char)(2 << (2 * p)));
			lo = _mm256_or_si256(
				lo, _mm256_and_si256(bit_set(h, bl), k16));
			hi = _mm256_or_si256(
				hi, _mm256_and_si256(bit_set(h, bh), k16));
		}
		/* pair p -> slots: p even: 2p/2*4 + {0, 2}; odd: + {1, 3} */
		int base = 128 * (p / 2) + 32 * (p % 2);
		STORE256(u + base, lo);
		STORE256(u + base + 64, hi);
	}
}

/* Q6_K: element 128 h + r: low nibble r / 64 of ql[64 h + r % 64], bits
 * 2 (r / 32) of qh[32 h + r % 32]; natural order. */
QDOT_TARGET static inline void codes_q6k(const unsigned char *b, uint8_t *u)
{
	const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
	for (int h = 0; h < 2; h++) {
		__m256i qh = LOAD256(b + 128 + 32 * h);
		for (int r = 0; r < 4; r++) {
			__m256i ql = LOAD256(b + 64 * h + 32 * (r % 2));
			if (r >= 2)
				ql = _mm256_srli_epi16(ql, 4);
			__m256i hi = _mm256_and_si256(
				_mm256_srli_epi16(qh, 2 * r), m2);
			__m256i v = _mm256_or_si256(_mm256_and_si256(ql, m4),
						    _mm256_slli_epi16(hi, 4));
			STORE256(u + 128 * h + 32 * r, v);
		}
	}
}

/* IQ4_XS: sub-block ib's element l is nibble l / 16 of byte 16 ib + l % 16. */
QDOT_TARGET static inline void codes_iq4xs(const unsigned char *b, uint8_t *u)
{
	for (int ib = 0; ib < 8; ib++)
		STORE256(u + 32 * ib,
			 _mm256_shuffle_epi8(iq4_table(),
					     nibbles32(LOAD128(b + 8 + 16 * ib))));
}

/* Q2_K / Q3_K: element 128 h + 32 j + l has bits 2 j of byte 32 h + l of
 * the 2-bit codes (at 16 / at 32); Q3_K adds 4 where bit (e / 32) of mask
 * byte l is set. Natural order. */
QDOT_TARGET static inline void codes_q23k(const unsigned char *b, bool three,
					  uint8_t *u)
{
	const __m256i m2 = _mm256_set1_epi8(3), k4 = _mm256_set1_epi8(4);
	const unsigned char *qs = b + (three ? 32 : 16);
	__m256i hm = LOAD256(b);
	for (int h = 0; h < 2; h++) {
		__m256i q = LOAD256(qs + 32 * h);
		for (int j = 0; j < 4; j++) {
			__m256i v = _mm256_and_si256(
				_mm256_srli_epi16(q, 2 * j), m2);
			if (three) {
				__m256i bit = _mm256_set1_epi8(
					(char)(1 << (4 * h + j)));
				v = _mm256_or_si256(
					v, _mm256_and_si256(bit_set(hm, bit), k4));
			}
			STORE256(u + 128 * h + 32 * j, v);
		}
	}
}

/* The codes of a chunk (elements: a multiple of 32, at most QDOT_CHUNK;
 * bb: the type's block bytes). */
QDOT_TARGET static inline __attribute__((always_inline)) void
qdot_codes_simd(strata_block_type t,
					       const unsigned char *p,
					       uint32_t elements, uint32_t bb,
					       strata__qw *w)
{
	switch (t) {
	case STRATA_BLOCK_Q4_K: codes_q45k(p, false, w->u); return;
	case STRATA_BLOCK_Q5_K: codes_q45k(p, true, w->u); return;
	case STRATA_BLOCK_Q6_K: codes_q6k(p, w->u); return;
	case STRATA_BLOCK_IQ4_XS: codes_iq4xs(p, w->u); return;
	case STRATA_BLOCK_Q2_K: codes_q23k(p, false, w->u); return;
	case STRATA_BLOCK_Q3_K: codes_q23k(p, true, w->u); return;
	default:
		codes32(t, p, elements / 32, bb, w->u);
		return;
	}
}

/* ------------------------------------------------------------------------ */
/* Factors                                                                  */
/* ------------------------------------------------------------------------ */

/* v's 8 floats each twice, in v's order: 16 floats at p. */
QDOT_TARGET static inline void store_twice(float *p, __m256 v)
{
	_mm256_storeu_ps(p, _mm256_permutevar8x32_ps(
				    v, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
	_mm256_storeu_ps(p + 8,
			 _mm256_permutevar8x32_ps(
				 v, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
}

/* The f16 at byte `at` of each of nb (<= 8) blocks of bb bytes, as floats
 * (0 past nb). */
QDOT_TARGET static inline __m256 halves(const unsigned char *p, uint32_t nb,
					uint32_t bb, uint32_t at)
{
	uint16_t h[8] = {0};
	for (uint32_t b = 0; b < nb; b++)
		memcpy(&h[b], p + b * bb + at, 2);
	return _mm256_cvtph_ps(LOAD128(h));
}

/* Q4_K / Q5_K: eight 6-bit scales and mins from 12 bytes, four at a time
 * in 32-bit words (the layout of q4k_scale_min in qdot.c: words 0 and 1
 * hold scales and mins 0-3; word 2 the low nibbles of 4-7, whose high
 * bits are the top bits of words 0 and 1). */
QDOT_TARGET static inline void factors_q45k(const unsigned char *b,
					    strata__qw *w)
{
	uint32_t s[3], sc[2], m[2];
	memcpy(s, b + 4, 12);
	sc[0] = s[0] & 0x3f3f3f3fu;
	m[0] = s[1] & 0x3f3f3f3fu;
	sc[1] = (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u);
	m[1] = ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u);
	/* slots 0 2 1 3 4 6 5 7, each factor for two 16s */
	const __m256i slots = _mm256_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7);
	__m256 d = _mm256_set1_ps(_cvtsh_ss((unsigned short)(b[0] | b[1] << 8)));
	__m256 dm = _mm256_set1_ps(_cvtsh_ss((unsigned short)(b[2] | b[3] << 8)));
	__m256 fs = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
		_mm_loadl_epi64((const __m128i *)sc)));
	__m256 fm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
		_mm_loadl_epi64((const __m128i *)m)));
	store_twice(w->ws, _mm256_permutevar8x32_ps(_mm256_mul_ps(d, fs), slots));
	__m256 mins = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(dm, fm));
	store_twice(w->mw, _mm256_permutevar8x32_ps(mins, slots));
}

/* The factors of a chunk; the types not here go to the portable one. */
QDOT_TARGET static inline __attribute__((always_inline)) void
qdot_factors_simd(strata_block_type t,
						 const unsigned char *p,
						 uint32_t elements, uint32_t bb,
						 strata__qw *w)
{
	const __m256 zero = _mm256_setzero_ps();
	switch (t) {
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_Q4_0: case STRATA_BLOCK_Q5_0:
	case STRATA_BLOCK_IQ4_NL:
		store_twice(w->ws, halves(p, elements / 32, bb, 0));
		_mm256_storeu_ps(w->mw, zero);
		_mm256_storeu_ps(w->mw + 8, zero);
		return;
	case STRATA_BLOCK_Q4_1: case STRATA_BLOCK_Q5_1:
		store_twice(w->ws, halves(p, elements / 32, bb, 0));
		store_twice(w->mw, halves(p, elements / 32, bb, 2));
		return;
	case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K:
		factors_q45k(p, w);
		return;
	case STRATA_BLOCK_Q6_K: {
		__m256 d = _mm256_set1_ps(
			_cvtsh_ss((unsigned short)(p[208] | p[209] << 8)));
		for (int h = 0; h < 2; h++)
			_mm256_storeu_ps(
				w->ws + 8 * h,
				_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
							 _mm_loadl_epi64((const __m128i *)(p + 192 + 8 * h))))));
		_mm256_storeu_ps(w->mw, zero);
		_mm256_storeu_ps(w->mw + 8, zero);
		return;
	}
	case STRATA_BLOCK_Q2_K: {
		__m256 d = _mm256_set1_ps(
			_cvtsh_ss((unsigned short)(p[80] | p[81] << 8)));
		__m256 dm = _mm256_set1_ps(
			_cvtsh_ss((unsigned short)(p[82] | p[83] << 8)));
		for (int h = 0; h < 2; h++) {
			__m256i v = _mm256_cvtepu8_epi32(
				_mm_loadl_epi64((const __m128i *)(p + 8 * h)));
			__m256 sc = _mm256_cvtepi32_ps(
				_mm256_and_si256(v, _mm256_set1_epi32(15)));
			__m256 m = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
			_mm256_storeu_ps(w->ws + 8 * h, _mm256_mul_ps(d, sc));
			_mm256_storeu_ps(w->mw + 8 * h,
					 _mm256_sub_ps(zero, _mm256_mul_ps(dm, m)));
		}
		return;
	}
	default:
		strata__qdot_factors(t, p, elements, w);
		return;
	}
}

#endif
