/* quant_avx512.c - AVX-512 (F, BW, VL) decoders of every stored weight
 * type: sixteen elements an instruction where quant_avx2.c does eight, the
 * same bits as base's exact decoders (strata_block_decode; tests/backend/
 * test_cpu_quant.c). The 2- to 5-bit types are table lookups: a block's
 * (or sub-block's) 4 to 32 values are computed once with base's own
 * arithmetic, then vpermps / vpermt2ps pick each element; Q8_0 and Q6_K
 * are converted, Q6_K's codes formed in bytes (layer: backend).
 *
 * Built with -ffp-contract=off: d * q - m is a product then a difference,
 * as gguf-py rounds it, never a fused multiply-add. */
#include "backend/cpu/kernels_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* Whether this processor (and its operating system) runs these decoders:
 * AVX-512 F, BW and VL, and the AVX2 set quant_avx2.c needs. */
bool strata__quant_avx512_usable(void)
{
	__builtin_cpu_init();
	return strata__quant_avx2_usable() &&
	       __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl");
}

#define AVX512                                                                 \
	__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

AVX512 static inline float load_f16(const unsigned char *p)
{
	return _cvtsh_ss((unsigned short)(p[0] | (p[1] << 8)));
}

/* Sixteen bytes at p, zero-extended to sixteen int32. */
AVX512 static inline __m512i u8x16(const unsigned char *p)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

AVX512 static void f16_row(const unsigned char *s, float *y, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(
						(const __m256i *)(s + 2 * i))));
	if (i < n)
		strata__quant_decode_avx2(STRATA_BLOCK_F16, s + 2 * i, y + i,
					  n - i);
}

AVX512 static void bf16_row(const unsigned char *s, float *y, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512i h = _mm512_cvtepu16_epi32(
			_mm256_loadu_si256((const __m256i *)(s + 2 * i)));
		_mm512_storeu_ps(y + i,
				 _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
	}
	if (i < n)
		strata__quant_decode_avx2(STRATA_BLOCK_BF16, s + 2 * i, y + i,
					  n - i);
}

/* Q8_0: x = q * d, 32 per block of 34 bytes. */
AVX512 static void q8_0_block(const unsigned char *b, float *y)
{
	__m512 d = _mm512_set1_ps(load_f16(b));
	for (int g = 0; g < 2; g++) {
		__m512i q = _mm512_cvtepi8_epi32(
			_mm_loadu_si128((const __m128i *)(b + 2 + 16 * g)));
		_mm512_storeu_ps(y + 16 * g,
				 _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
	}
}

/* The floats 0, 1, ... 15: a 4-bit code's value as its table's index. */
AVX512 static inline __m512 iota16(void)
{
	return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
			      15);
}

/* Q4_0: x = d * (q - 8); bytes 0-15 hold elements 0-15 low, 16-31 high.
 * The 16 values a block can hold are computed once (the same product per
 * code as base's), then every element is a lookup: vpermps reads the low
 * four bits of each index, so a byte or its high nibble shifted down is
 * its own index. */
AVX512 static void q4_0_block(const unsigned char *b, float *y)
{
	__m512 d = _mm512_set1_ps(load_f16(b));
	__m512 t = _mm512_mul_ps(d, _mm512_sub_ps(iota16(), _mm512_set1_ps(8)));
	__m512i v = u8x16(b + 2);
	_mm512_storeu_ps(y, _mm512_permutexvar_ps(v, t));
	_mm512_storeu_ps(y + 16,
			 _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
}

/* Q4_1: x = d * q + m, Q4_0's layout after two f16 factors. */
AVX512 static void q4_1_block(const unsigned char *b, float *y)
{
	__m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(load_f16(b)),
					       iota16()),
				 _mm512_set1_ps(load_f16(b + 2)));
	__m512i v = u8x16(b + 4);
	_mm512_storeu_ps(y, _mm512_permutexvar_ps(v, t));
	_mm512_storeu_ps(y + 16,
			 _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
}

/* The IQ4_NL / IQ4_XS levels as floats (base's strata__iq4nl_levels). */
AVX512 static inline __m512 iq4_levels(void)
{
	return _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13,
			      25, 38, 53, 69, 89, 113);
}

/* IQ4_NL: x = d * level[q], Q4_0's layout. */
AVX512 static void iq4_nl_block(const unsigned char *b, float *y)
{
	__m512 t = _mm512_mul_ps(_mm512_set1_ps(load_f16(b)), iq4_levels());
	__m512i v = u8x16(b + 2);
	_mm512_storeu_ps(y, _mm512_permutexvar_ps(v, t));
	_mm512_storeu_ps(y + 16,
			 _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
}

/* IQ4_XS: x = (d * (ls - 32)) * level[q], eight sub-blocks of 32; ls is
 * nibble ib % 2 of byte 4 + ib / 2 with bits 2 ib, 2 ib + 1 of the word
 * at 2 above it; sub-block ib's elements are the low then the high
 * nibbles of bytes 8 + 16 ib ... */
AVX512 static void iq4_xs_block(const unsigned char *b, float *y)
{
	float d = load_f16(b);
	unsigned sh = (unsigned)(b[2] | (b[3] << 8));
	const __m512 lv = iq4_levels();
	for (int ib = 0; ib < 8; ib++) {
		int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f) |
			 (int)((sh >> (2 * ib)) & 3) << 4;
		__m512 t = _mm512_mul_ps(_mm512_set1_ps(d * (float)(ls - 32)),
					 lv);
		__m512i v = u8x16(b + 8 + 16 * ib);
		_mm512_storeu_ps(y + 32 * ib, _mm512_permutexvar_ps(v, t));
		_mm512_storeu_ps(y + 32 * ib + 16,
				 _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4),
						       t));
	}
}

/* The fifth bits of Q5_0 / Q5_1 (a little-endian word at qh, element j's
 * bit j) as 16 for elements j0 .. j0 + 15, else 0. */
AVX512 static inline __m512i q5_high(const unsigned char *qh, int j0)
{
	uint32_t w = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 |
		     (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
	__m512i sh = _mm512_add_epi32(_mm512_set1_epi32(j0),
				      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7,
							8, 9, 10, 11, 12, 13,
							14, 15));
	__m512i bit = _mm512_and_si512(
		_mm512_srlv_epi32(_mm512_set1_epi32((int)w), sh),
		_mm512_set1_epi32(1));
	return _mm512_slli_epi32(bit, 4);
}

/* A 32-value block of 5-bit codes (qh: fifth bits, qs: nibbles) looked
 * up in the tables lo (codes 0-15) and hi (16-31). */
AVX512 static inline void q5_lookup(const unsigned char *qh,
				    const unsigned char *qs, __m512 lo,
				    __m512 hi, float *y)
{
	const __m512i m4 = _mm512_set1_epi32(0x0f);
	__m512i v = u8x16(qs);
	__m512i i0 = _mm512_or_si512(_mm512_and_si512(v, m4), q5_high(qh, 0));
	__m512i i1 = _mm512_or_si512(_mm512_srli_epi32(v, 4), q5_high(qh, 16));
	_mm512_storeu_ps(y, _mm512_permutex2var_ps(lo, i0, hi));
	_mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(lo, i1, hi));
}

/* Q5_0: x = d * (q - 16). */
AVX512 static void q5_0_block(const unsigned char *b, float *y)
{
	__m512 d = _mm512_set1_ps(load_f16(b)), io = iota16();
	__m512 lo = _mm512_mul_ps(d, _mm512_sub_ps(io, _mm512_set1_ps(16)));
	__m512 hi = _mm512_mul_ps(d, io);
	q5_lookup(b + 2, b + 6, lo, hi, y);
}

/* Q5_1: x = d * q + m. */
AVX512 static void q5_1_block(const unsigned char *b, float *y)
{
	__m512 d = _mm512_set1_ps(load_f16(b)), m = _mm512_set1_ps(load_f16(b + 2));
	__m512 io = iota16();
	__m512 lo = _mm512_add_ps(_mm512_mul_ps(d, io), m);
	__m512 hi = _mm512_add_ps(
		_mm512_mul_ps(d, _mm512_add_ps(io, _mm512_set1_ps(16))), m);
	q5_lookup(b + 4, b + 8, lo, hi, y);
}

/* Q4_K's scale and min of sub-block j from its 12 packed bytes, as ggml
 * packs them (base's decoder reads the same layout). */
static inline void q4k_scale_min(const unsigned char *s, int j, uint8_t *sc,
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

/* Q4_K: x = (d * sc) * q - (dmin * m), eight sub-blocks of 32; sub-blocks
 * 2i and 2i + 1 are the low and high nibbles of the same 32 bytes. Each
 * sub-block's 16 values are computed once, as base computes each element
 * (a product, then a difference), and looked up (as for Q4_0). */
AVX512 static void q4_k_block(const unsigned char *b, float *y)
{
	float d = load_f16(b), dmin = load_f16(b + 2);
	const __m512 iota = iota16();
	for (int i = 0; i < 4; i++) {
		__m512 t[2];
		for (int h = 0; h < 2; h++) {
			uint8_t sc, m;
			q4k_scale_min(b + 4, 2 * i + h, &sc, &m);
			__m512 p = _mm512_mul_ps(_mm512_set1_ps(d * (float)sc),
						 iota);
			t[h] = _mm512_sub_ps(p, _mm512_set1_ps(dmin * (float)m));
		}
		const unsigned char *q = b + 16 + 32 * i;
		for (int g = 0; g < 2; g++) {
			__m512i v = u8x16(q + 16 * g);
			_mm512_storeu_ps(y + 64 * i + 16 * g,
					 _mm512_permutexvar_ps(v, t[0]));
			_mm512_storeu_ps(y + 64 * i + 32 + 16 * g,
					 _mm512_permutexvar_ps(
						 _mm512_srli_epi32(v, 4), t[1]));
		}
	}
}

/* Q5_K: Q4_K with a fifth bit (bit s of byte 16 + l for element l of
 * sub-block s), the 32 values of each sub-block in two tables. */
AVX512 static void q5_k_block(const unsigned char *b, float *y)
{
	float d = load_f16(b), dmin = load_f16(b + 2);
	const __m512 iota = iota16(), iota_hi = _mm512_add_ps(
					      iota16(), _mm512_set1_ps(16));
	const __m512i m4 = _mm512_set1_epi32(0x0f), one = _mm512_set1_epi32(1);
	for (int s = 0; s < 8; s++) {
		uint8_t sc, m;
		q4k_scale_min(b + 4, s, &sc, &m);
		__m512 dl = _mm512_set1_ps(d * (float)sc);
		__m512 ml = _mm512_set1_ps(dmin * (float)m);
		__m512 lo = _mm512_sub_ps(_mm512_mul_ps(dl, iota), ml);
		__m512 hi = _mm512_sub_ps(_mm512_mul_ps(dl, iota_hi), ml);
		const unsigned char *q = b + 48 + 32 * (s / 2);
		for (int g = 0; g < 2; g++) {
			__m512i v = _mm512_and_si512(
				_mm512_srli_epi32(u8x16(q + 16 * g), 4 * (s % 2)),
				m4);
			__m512i h = _mm512_and_si512(
				_mm512_srli_epi32(u8x16(b + 16 + 16 * g), s), one);
			__m512i idx = _mm512_or_si512(v, _mm512_slli_epi32(h, 4));
			_mm512_storeu_ps(y + 32 * s + 16 * g,
					 _mm512_permutex2var_ps(lo, idx, hi));
		}
	}
}

/* Q2_K: x = (d * sc) * q - (dmin * m), sixteen sub-blocks of 16; sub-block
 * s's codes are bits 2 j of the 16 bytes at 16 + 32 (s / 8) + 16 (s % 2),
 * j = s % 8 / 2; four values a sub-block, looked up. */
AVX512 static void q2_k_block(const unsigned char *b, float *y)
{
	float d = load_f16(b + 80), dmin = load_f16(b + 82);
	const __m512 iota = iota16();
	const __m512i m2 = _mm512_set1_epi32(3);
	for (int s = 0; s < 16; s++) {
		__m512 t = _mm512_sub_ps(
			_mm512_mul_ps(_mm512_set1_ps(d * (float)(b[s] & 0x0f)),
				      iota),
			_mm512_set1_ps(dmin * (float)(b[s] >> 4)));
		__m512i v = u8x16(b + 16 + 32 * (s / 8) + 16 * (s % 2));
		v = _mm512_and_si512(_mm512_srli_epi32(v, 2 * (s % 8 / 2)), m2);
		_mm512_storeu_ps(y + 16 * s, _mm512_permutexvar_ps(v, t));
	}
}

/* Q3_K's 16 six-bit scales, offset by 32 (base's layout). */
static inline int q3k_scale(const unsigned char *s, int i)
{
	int lo = (s[i % 8] >> (4 * (i / 8))) & 0x0f;
	int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
	return (lo | hi << 4) - 32;
}

/* Q3_K: x = (d * scale) * (q - 4 (1 - h)), sixteen sub-blocks of 16: q as
 * Q2_K's codes (at 32), h bit s / 2 of the mask bytes 16 (s % 2) ...; the
 * index q | h << 2 picks one of the eight values (d * scale) * (-4 .. 3). */
AVX512 static void q3_k_block(const unsigned char *b, float *y)
{
	float d = load_f16(b + 108);
	const __m512 vals = _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, 0, 0, 0,
					   0, 0, 0, 0, 0);
	const __m512i m2 = _mm512_set1_epi32(3), one = _mm512_set1_epi32(1);
	for (int s = 0; s < 16; s++) {
		__m512 t = _mm512_mul_ps(
			_mm512_set1_ps(d * (float)q3k_scale(b + 96, s)), vals);
		__m512i q = u8x16(b + 32 + 32 * (s / 8) + 16 * (s % 2));
		q = _mm512_and_si512(_mm512_srli_epi32(q, 2 * (s % 8 / 2)), m2);
		__m512i h = u8x16(b + 16 * (s % 2));
		h = _mm512_and_si512(_mm512_srli_epi32(h, s / 2), one);
		__m512i idx = _mm512_or_si512(q, _mm512_slli_epi32(h, 2));
		_mm512_storeu_ps(y + 16 * s, _mm512_permutexvar_ps(idx, t));
	}
}

/* Q6_K: x = (d * scale) * (q - 32), sixteen sub-blocks of 16. In each half
 * h of 128 elements, element r's low nibble is nibble r / 64 of ql[64 h +
 * r % 64] and its high bits are bits 2 (r / 32) of qh[32 h + r % 32]: so
 * 64 codes at a time are formed in bytes (the low nibbles of 64 ql bytes
 * with qh and qh >> 2 above them, then the high nibbles with qh >> 4 and
 * qh >> 6), and each sixteen widened, converted and scaled. */
AVX512 static void q6_k_block(const unsigned char *b, float *y)
{
	float d = load_f16(b + 208);
	const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30),
		      k32 = _mm512_set1_epi8(32);
	for (int h = 0; h < 2; h++) {
		__m512i ql = _mm512_loadu_si512((const void *)(b + 64 * h));
		__m256i qh = _mm256_loadu_si256(
			(const __m256i *)(b + 128 + 32 * h));
		for (int half = 0; half < 2; half++) {
			/* codes of elements 128 h + 64 half + 0..63 */
			__m512i lo = half ? _mm512_srli_epi16(ql, 4) : ql;
			lo = _mm512_and_si512(lo, m4);
			__m256i h0 = _mm256_srli_epi16(qh, 4 * half);
			__m256i h1 = _mm256_srli_epi16(qh, 4 * half + 2);
			__m512i hi = _mm512_inserti64x4(
				_mm512_castsi256_si512(h0), h1, 1);
			hi = _mm512_and_si512(_mm512_slli_epi16(hi, 4), m30);
			__m512i q = _mm512_sub_epi8(_mm512_or_si512(lo, hi), k32);
			int e0 = 128 * h + 64 * half;
			float *o = y + e0;
			__m128i q0 = _mm512_castsi512_si128(q);
			__m128i q1 = _mm512_extracti32x4_epi32(q, 1);
			__m128i q2 = _mm512_extracti32x4_epi32(q, 2);
			__m128i q3 = _mm512_extracti32x4_epi32(q, 3);
			const __m128i qs[4] = {q0, q1, q2, q3};
			for (int g = 0; g < 4; g++) {
				int8_t sc = (int8_t)b[192 + (e0 + 16 * g) / 16];
				__m512 dl = _mm512_set1_ps(d * (float)sc);
				__m512 x = _mm512_cvtepi32_ps(
					_mm512_cvtepi8_epi32(qs[g]));
				_mm512_storeu_ps(o + 16 * g, _mm512_mul_ps(dl, x));
			}
		}
	}
}

typedef void (*block_fn)(const unsigned char *b, float *y);

AVX512 void strata__quant_decode_avx512(strata_block_type t,
					const unsigned char *src, float *dst,
					uint32_t elements)
{
	block_fn fn;
	uint32_t be, bb;
	switch (t) {
	case STRATA_BLOCK_F16: f16_row(src, dst, elements); return;
	case STRATA_BLOCK_BF16: bf16_row(src, dst, elements); return;
	case STRATA_BLOCK_Q8_0: fn = q8_0_block; be = 32; bb = 34; break;
	case STRATA_BLOCK_Q4_0: fn = q4_0_block; be = 32; bb = 18; break;
	case STRATA_BLOCK_Q4_1: fn = q4_1_block; be = 32; bb = 20; break;
	case STRATA_BLOCK_Q5_0: fn = q5_0_block; be = 32; bb = 22; break;
	case STRATA_BLOCK_Q5_1: fn = q5_1_block; be = 32; bb = 24; break;
	case STRATA_BLOCK_IQ4_NL: fn = iq4_nl_block; be = 32; bb = 18; break;
	case STRATA_BLOCK_IQ4_XS: fn = iq4_xs_block; be = 256; bb = 136; break;
	case STRATA_BLOCK_Q2_K: fn = q2_k_block; be = 256; bb = 84; break;
	case STRATA_BLOCK_Q3_K: fn = q3_k_block; be = 256; bb = 110; break;
	case STRATA_BLOCK_Q4_K: fn = q4_k_block; be = 256; bb = 144; break;
	case STRATA_BLOCK_Q5_K: fn = q5_k_block; be = 256; bb = 176; break;
	case STRATA_BLOCK_Q6_K: fn = q6_k_block; be = 256; bb = 210; break;
	default:
		strata__quant_decode_avx2(t, src, dst, elements);
		return;
	}
	for (uint32_t i = 0; i < elements / be; i++)
		fn(src + (uint64_t)i * bb, dst + (uint64_t)i * be);
}
#endif
