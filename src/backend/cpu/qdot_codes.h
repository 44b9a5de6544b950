/* qdot_codes.h - what the SIMD decode kernels read from the stored blocks:
 * a chunk's codes, slot by slot, unpacked with AVX2 byte instructions into
 * the registers the dot products take (the bytes strata__qdot_codes
 * gives, in the slot order of qdot.h), and the integer scales and f16
 * factors behind strata__qdot_factors' floats; included by qdot_avx2.c
 * and qdot_vnni.c, each defining QDOT_TARGET (its
 * __attribute__((target))) first, which put the factors in the order
 * their sums come in (layer: backend). */
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

/* Bit `from` of each byte of h moved to bit `to` of it, the other bits 0
 * (from and to constants: one shift of the 16-bit lanes, one mask, which
 * leaves out the bits a shift moves across a byte). */
QDOT_TARGET static QDOT_INLINE __m256i
bit_to(__m256i h, int from, int to)
{
	if (to > from)
		h = _mm256_slli_epi16(h, to - from);
	else if (from > to)
		h = _mm256_srli_epi16(h, from - to);
	return _mm256_and_si256(h, _mm256_set1_epi8((char)(1 << to)));
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

/* The 32 codes of slot s (0-7, a constant after inlining) of a chunk at
 * p, bb bytes a block for the 32-element types: the register each kernel
 * multiplies, no buffer in between (loads two slots share are one load
 * once inlined). */
QDOT_TARGET static QDOT_INLINE __m256i
code_slot(strata_block_type t, const unsigned char *p, uint32_t bb, int s)
{
	const __m256i m4 = _mm256_set1_epi8(15), k16 = _mm256_set1_epi8(16);
	const unsigned char *b = p + (uint64_t)s * bb;
	switch (t) {
	case STRATA_BLOCK_Q8_0:
		return _mm256_xor_si256(LOAD256(b + 2),
					_mm256_set1_epi8((char)0x80));
	case STRATA_BLOCK_Q4_0: return nibbles32(LOAD128(b + 2));
	case STRATA_BLOCK_Q4_1: return nibbles32(LOAD128(b + 4));
	case STRATA_BLOCK_Q5_0:
		return _mm256_or_si256(nibbles32(LOAD128(b + 6)),
				       _mm256_and_si256(bits32(b + 2), k16));
	case STRATA_BLOCK_Q5_1:
		return _mm256_or_si256(nibbles32(LOAD128(b + 8)),
				       _mm256_and_si256(bits32(b + 4), k16));
	case STRATA_BLOCK_IQ4_NL:
		return _mm256_shuffle_epi8(iq4_table(),
					   nibbles32(LOAD128(b + 2)));
	case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K: {
		/* bytes 32 q .. 32 q + 31 hold group 2 q (low nibbles) and
		 * 2 q + 1 (high); slots 0 2 1 3 4 6 5 7 hold groups g */
		int g = (s & 4) | (s & 1) << 1 | (s >> 1 & 1);
		bool five = t == STRATA_BLOCK_Q5_K;
		__m256i v = LOAD256(p + (five ? 48 : 16) + 32 * (g / 2));
		if (g & 1)
			v = _mm256_srli_epi16(v, 4);
		v = _mm256_and_si256(v, m4);
		if (five)
			v = _mm256_or_si256(v, bit_to(LOAD256(p + 16), g, 4));
		return v;
	}
	case STRATA_BLOCK_Q6_K: {
		/* element 128 h + r: low nibble r / 64 of ql[64 h + r % 64],
		 * bits 2 (r / 32) of qh[32 h + r % 32] */
		int h = s / 4, r = s % 4;
		__m256i ql = LOAD256(p + 64 * h + 32 * (r % 2));
		if (r >= 2)
			ql = _mm256_srli_epi16(ql, 4);
		__m256i hi = _mm256_and_si256(
			_mm256_srli_epi16(LOAD256(p + 128 + 32 * h), 2 * r),
			_mm256_set1_epi8(3));
		return _mm256_or_si256(_mm256_and_si256(ql, m4),
				       _mm256_slli_epi16(hi, 4));
	}
	case STRATA_BLOCK_IQ4_XS:
		/* element l of group s: nibble l / 16 of byte 16 s + l % 16 */
		return _mm256_shuffle_epi8(iq4_table(),
					   nibbles32(LOAD128(p + 8 + 16 * s)));
	default: { /* Q2_K, Q3_K */
		/* element 128 h + 32 j + l: bits 2 j of byte 32 h + l of the
		 * 2-bit codes (at 16 / at 32); Q3_K adds 4 where bit s of
		 * mask byte l is set */
		bool three = t == STRATA_BLOCK_Q3_K;
		int h = s / 4, j = s % 4;
		__m256i v = _mm256_and_si256(
			_mm256_srli_epi16(LOAD256(p + (three ? 32 : 16) + 32 * h),
					  2 * j),
			_mm256_set1_epi8(3));
		if (three)
			v = _mm256_or_si256(v, bit_to(LOAD256(p), s, 2));
		return v;
	}
	}
}

/* ------------------------------------------------------------------------ */
/* Factors                                                                  */
/* ------------------------------------------------------------------------ */

/* The f16 at byte `at` of each of 8 blocks of bb bytes, as floats. */
QDOT_TARGET static inline __m256 halves(const unsigned char *p, uint32_t bb,
					uint32_t at)
{
	short h[8]; /* inserted as words, not stored and reloaded whole */
	for (uint32_t b = 0; b < 8; b++) {
		uint16_t v;
		memcpy(&v, p + b * bb + at, 2);
		h[b] = (short)v;
	}
	return _mm256_cvtph_ps(
		_mm_setr_epi16(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]));
}

/* The f16 at p as a float. */
QDOT_TARGET static inline float half_at(const unsigned char *p)
{
	return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}

/* Q4_K / Q5_K: the eight 6-bit scales (bytes 0-7) and mins (8-15) of the
 * 12 bytes at s, in group order, four at a time in 32-bit words (the
 * layout of q4k_scale_min in qdot.c: words 0 and 1 hold scales and mins
 * 0-3; word 2 the low nibbles of 4-7, whose high bits are the top bits of
 * words 0 and 1). */
QDOT_TARGET static inline __m128i q45k_scales(const unsigned char *s)
{
	uint32_t w[3];
	memcpy(w, s, 12);
	return _mm_setr_epi32(
		(int)(w[0] & 0x3f3f3f3fu),
		(int)((w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u)),
		(int)(w[1] & 0x3f3f3f3fu),
		(int)(((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u)));
}

/* Q3_K: the sixteen signed scales of the 12 bytes at s (q3k_scale in
 * qdot.c): scale i has the nibble i / 8 of byte i % 8 and, above it, bits
 * 2 (i / 4) of byte 8 + i % 4, less 32. */
QDOT_TARGET static inline __m128i q3k_scales(const unsigned char *s)
{
	uint64_t l;
	uint32_t h;
	memcpy(&l, s, 8);
	memcpy(&h, s + 8, 4);
	const uint64_t m4 = 0x0f0f0f0f0f0f0f0full;
	const uint32_t m2 = 0x03030303u;
	uint64_t ha = (h & m2) | (uint64_t)((h >> 2) & m2) << 32;
	uint64_t hb = ((h >> 4) & m2) | (uint64_t)((h >> 6) & m2) << 32;
	__m128i v = _mm_set_epi64x((long long)(((l >> 4) & m4) | hb << 4),
				   (long long)((l & m4) | ha << 4));
	return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

/* IQ4_XS: the eight signed scales of the super-block at b as int32 lanes
 * (factors256 in qdot.c): the nibble ib of bytes 4-7 and, above it, bits
 * 2 ib of the u16 at 2, less 32. */
QDOT_TARGET static inline __m256i iq4xs_scales(const unsigned char *b)
{
	uint32_t lo;
	memcpy(&lo, b + 4, 4);
	const __m256i at = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i nib = _mm256_and_si256(
		_mm256_srlv_epi32(_mm256_set1_epi32((int)lo),
				  _mm256_slli_epi32(at, 2)),
		_mm256_set1_epi32(15));
	__m256i hi = _mm256_and_si256(
		_mm256_srlv_epi32(_mm256_set1_epi32(b[2] | b[3] << 8),
				  _mm256_slli_epi32(at, 1)),
		_mm256_set1_epi32(3));
	return _mm256_sub_epi32(_mm256_or_si256(nib, _mm256_slli_epi32(hi, 4)),
				_mm256_set1_epi32(32));
}

#endif
