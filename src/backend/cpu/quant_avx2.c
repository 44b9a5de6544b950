/* quant_avx2.c - AVX2 decoders of the stored weight types the CPU products
 * read most (F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K), bit-identical to the
 * exact decoders of base (strata_block_decode; tests/backend/
 * test_cpu_quant.c); the other types go to those (layer: backend).
 *
 * Built with -ffp-contract=off: d * q - m is a product then a difference,
 * as gguf-py rounds it, never a fused multiply-add. */
#include "strata/base.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

/* Whether this processor runs these decoders (AVX2, FMA and F16C). F16C
 * is read from CPUID leaf 1 (ECX bit 29): clang 14's
 * __builtin_cpu_supports does not know "f16c", and `make fuzz` builds with
 * clang. */
bool strata__quant_avx2_usable(void)
{
	/* asked once: every product asks, and CPUID traps to the hypervisor
	 * in a virtual machine (a quarter of a small decode product's time) */
	static _Atomic int known = -1;
	int k = known;
	if (k < 0) {
		unsigned a, b, c, d;
		__builtin_cpu_init();
		k = __builtin_cpu_supports("avx2") &&
		    __builtin_cpu_supports("fma") &&
		    __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
		known = k;
	}
	return k;
}

#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* Little-endian f16 at p as f32 (F16C's conversion is exact). */
AVX2 static inline float load_f16(const unsigned char *p)
{
	return _cvtsh_ss((unsigned short)(p[0] | (p[1] << 8)));
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

/* Eight bytes at p, zero-extended to eight int32. */
AVX2 static inline __m256i u8x8(const unsigned char *p)
{
	return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

AVX2 static void f16_row(const unsigned char *s, float *y, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(
						(const __m128i *)(s + 2 * i))));
	for (; i < n; i++)
		y[i] = load_f16(s + 2 * i);
}

AVX2 static void bf16_row(const unsigned char *s, float *y, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i h = _mm256_cvtepu16_epi32(
			_mm_loadu_si128((const __m128i *)(s + 2 * i)));
		_mm256_storeu_ps(y + i,
				 _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
	}
	if (i < n)
		(void)strata_block_decode(STRATA_BLOCK_BF16, s + 2 * i, y + i,
					    n - i);
}

/* Q8_0: x = q * d, 32 per block of 34 bytes. */
AVX2 static void q8_0_block(const unsigned char *b, float *y)
{
	__m256 d = _mm256_set1_ps(load_f16(b));
	for (int g = 0; g < 4; g++) {
		__m256i q = _mm256_cvtepi8_epi32(
			_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * g)));
		_mm256_storeu_ps(y + 8 * g,
				 _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
	}
}

/* Q4_0: x = d * (q - 8); bytes 0-15 hold elements 0-15 low, 16-31 high. */
AVX2 static void q4_0_block(const unsigned char *b, float *y)
{
	__m256 d = _mm256_set1_ps(load_f16(b));
	const __m256i mask = _mm256_set1_epi32(0x0f), eight = _mm256_set1_epi32(8);
	for (int g = 0; g < 2; g++) {
		__m256i v = u8x8(b + 2 + 8 * g);
		__m256i lo = _mm256_sub_epi32(_mm256_and_si256(v, mask), eight);
		__m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(v, 4), eight);
		_mm256_storeu_ps(y + 8 * g,
				 _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo)));
		_mm256_storeu_ps(y + 16 + 8 * g,
				 _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi)));
	}
}

/* Q4_K: x = (d * sc) * q - (dmin * m), eight sub-blocks of 32. */
AVX2 static void q4_k_block(const unsigned char *b, float *y)
{
	float d = load_f16(b), dmin = load_f16(b + 2);
	const __m256i mask = _mm256_set1_epi32(0x0f);
	for (int s = 0; s < 8; s++) {
		uint8_t sc, m;
		q4k_scale_min(b + 4, s, &sc, &m);
		__m256 dl = _mm256_set1_ps(d * (float)sc);
		__m256 ml = _mm256_set1_ps(dmin * (float)m);
		const unsigned char *q = b + 16 + 32 * (s / 2);
		for (int g = 0; g < 4; g++) {
			__m256i v = u8x8(q + 8 * g);
			v = _mm256_and_si256(
				_mm256_srli_epi32(v, 4 * (s % 2)), mask);
			__m256 p = _mm256_mul_ps(dl, _mm256_cvtepi32_ps(v));
			_mm256_storeu_ps(y + 32 * s + 8 * g,
					 _mm256_sub_ps(p, ml));
		}
	}
}

/* Q6_K: x = (d * scale) * (q - 32), sixteen sub-blocks of 16; element e,
 * r = e % 128: low nibble r / 64 of ql[64 (e / 128) + r % 64], high bits
 * 2 (r / 32) of qh[32 (e / 128) + r % 32]. */
AVX2 static void q6_k_block(const unsigned char *b, float *y)
{
	float d = load_f16(b + 208);
	const __m256i m4 = _mm256_set1_epi32(0x0f), m2 = _mm256_set1_epi32(3),
		      k32 = _mm256_set1_epi32(32);
	for (int e = 0; e < 256; e += 8) {
		int h = e / 128, r = e % 128;
		__m256i lo = u8x8(b + 64 * h + r % 64);
		lo = _mm256_and_si256(_mm256_srli_epi32(lo, 4 * (r / 64)), m4);
		__m256i hi = u8x8(b + 128 + 32 * h + r % 32);
		hi = _mm256_and_si256(_mm256_srli_epi32(hi, 2 * (r / 32)), m2);
		__m256i q = _mm256_sub_epi32(
			_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), k32);
		__m256 dl = _mm256_set1_ps(d * (float)(int8_t)b[192 + e / 16]);
		_mm256_storeu_ps(y + e, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(q)));
	}
}

typedef void (*block_fn)(const unsigned char *b, float *y);

AVX2 void strata__quant_decode_avx2(strata_block_type t, const unsigned char *src,
				    float *dst, uint32_t elements)
{
	block_fn fn;
	uint32_t be, bb;
	switch (t) {
	case STRATA_BLOCK_F16: f16_row(src, dst, elements); return;
	case STRATA_BLOCK_BF16: bf16_row(src, dst, elements); return;
	case STRATA_BLOCK_Q8_0: fn = q8_0_block; be = 32; bb = 34; break;
	case STRATA_BLOCK_Q4_0: fn = q4_0_block; be = 32; bb = 18; break;
	case STRATA_BLOCK_Q4_K: fn = q4_k_block; be = 256; bb = 144; break;
	case STRATA_BLOCK_Q6_K: fn = q6_k_block; be = 256; bb = 210; break;
	default:
		(void)strata_block_decode(t, src, dst, elements);
		return;
	}
	for (uint32_t i = 0; i < elements / be; i++)
		fn(src + (uint64_t)i * bb, dst + (uint64_t)i * be);
}
#endif
