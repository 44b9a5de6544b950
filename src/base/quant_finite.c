/* quant_finite.c - whether weights in a block format hold NaN or
 * infinities, from the bits of their factors alone: the verdict
 * strata_block_decode gives, without decoding, at memory speed (AVX-512BW
 * or AVX2 where the processor has them, chosen at run time) (layer: base).
 *
 * A block type's values are small integers times its f16 factors (and
 * minus a second factor for the types with a min), each finite when the
 * factors are (|d x scale x q| stays far below f32's range), so checking
 * the factors is checking the block. Float types are checked element by
 * element on their exponent bits.
 *
 * The test is on magnitudes: a value is NaN or infinite exactly when its
 * bits without the sign are at least those of infinity (0x7f800000 for
 * f32, 0x7f80 for bf16, 0x7c00 for f16), so the vector code keeps the
 * largest such magnitude of a chunk in a few registers and compares once
 * (a block type's factors, one word per block, are tested without a
 * branch instead); a chunk over the limit is scanned again element by
 * element for the first index (the scalar code, which is also the reference:
 * tests/base/test_block_finite.c runs every level on the same bytes). */
#include <stdatomic.h>
#include <string.h>

#include "base/quant_internal.h"

#define CHUNK_BYTES 16384u /* one vector pass, then the verdict */
#define F16_INF 0x7c00u

/* The bytes each block type's factors sit at: the 32-bit word at `word`
 * (inside the block) whose halves in `mask` are the f16 factors; `n` 0 for
 * the float types. Two factors are adjacent in every type that has two
 * (ggml's layouts), so one word holds both. */
typedef struct factor_word {
	int n;
	uint32_t word, mask;
} factor_word;

static factor_word factors(strata_block_type t)
{
	switch (t) {
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_Q4_0:
	case STRATA_BLOCK_Q5_0: case STRATA_BLOCK_IQ4_NL:
	case STRATA_BLOCK_IQ4_XS:
		return (factor_word){1, 0, 0x00007fffu};
	case STRATA_BLOCK_Q4_1: case STRATA_BLOCK_Q5_1:
	case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K:
		return (factor_word){2, 0, 0x7fff7fffu};
	case STRATA_BLOCK_Q2_K: /* d at 80, dmin at 82 of 84 bytes */
		return (factor_word){2, 80, 0x7fff7fffu};
	case STRATA_BLOCK_Q3_K: /* d at 108 of 110: the word from 106 */
		return (factor_word){1, 106, 0x7fff0000u};
	case STRATA_BLOCK_Q6_K: /* d at 208 of 210: the word from 206 */
		return (factor_word){1, 206, 0x7fff0000u};
	default:
		return (factor_word){0, 0, 0};
	}
}

static inline uint32_t u32_at(const unsigned char *p)
{
	uint32_t u;
	memcpy(&u, p, 4);
	return u; /* little-endian hosts only, as the file formats */
}

static inline unsigned u16_at(const unsigned char *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

/* ------------------------------------------------------------------------ */
/* Scalar: the reference, and the exact index once a chunk is over          */
/* ------------------------------------------------------------------------ */

static uint64_t first_f32(const unsigned char *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if ((u32_at(p + 4 * i) & 0x7fffffffu) >= 0x7f800000u)
			return i;
	return STRATA_BLOCK_ALL_FINITE;
}

static uint64_t first_u16(const unsigned char *p, uint64_t n, unsigned limit)
{
	for (uint64_t i = 0; i < n; i++)
		if ((u16_at(p + 2 * i) & 0x7fffu) >= limit)
			return i;
	return STRATA_BLOCK_ALL_FINITE;
}

static bool word_over(uint32_t w, uint32_t mask)
{
	w &= mask;
	return (w & 0xffffu) >= F16_INF || (w >> 16) >= F16_INF;
}

static uint64_t first_block(const unsigned char *p, uint64_t blocks,
			    uint32_t bb, factor_word f)
{
	for (uint64_t b = 0; b < blocks; b++)
		if (word_over(u32_at(p + b * bb + f.word), f.mask))
			return b;
	return STRATA_BLOCK_ALL_FINITE;
}

/* Whether any factor of `blocks` blocks is over, without a branch per
 * block: a 15-bit magnitude h is at least 0x7c00 exactly when h + 0x400
 * sets bit 15, for both halves of a word at once (no carry crosses: each
 * half stays below 0x10000). The block types' factors are one word in
 * 18 to 210 bytes, so this keeps the memory's pace without vectors (a
 * gather measured slower on 34-byte blocks). */
static bool over_blocks(const unsigned char *p, uint64_t blocks, uint32_t bb,
			factor_word f)
{
	uint32_t acc = 0;
	p += f.word;
	uint64_t b = 0;
	for (; b + 4 <= blocks; b += 4, p += 4 * (size_t)bb)
		acc |= ((u32_at(p) & f.mask) + 0x04000400u) |
		       ((u32_at(p + bb) & f.mask) + 0x04000400u) |
		       ((u32_at(p + 2 * (size_t)bb) & f.mask) + 0x04000400u) |
		       ((u32_at(p + 3 * (size_t)bb) & f.mask) + 0x04000400u);
	for (; b < blocks; b++, p += bb)
		acc |= (u32_at(p) & f.mask) + 0x04000400u;
	return (acc & 0x80008000u) != 0;
}

/* ------------------------------------------------------------------------ */
/* Vector: whether any magnitude of a chunk reaches the limit               */
/* ------------------------------------------------------------------------ */

/* The largest kernel level this processor runs: 2 AVX-512BW, 1 AVX2,
 * 0 scalar; -1 until known. Tests lower it (strata__finite_set_level). */
static _Atomic int level = -1;

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw")))
#define AVX2 __attribute__((target("avx2")))

static int detect(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw"))
		return 2;
	return __builtin_cpu_supports("avx2") ? 1 : 0;
}

/* n 16-bit words at p: any (x & 0x7fff) >= limit. Four accumulators of
 * 64 bytes each keep the loads in flight; the tail is one masked load. */
AVX512 static bool over_u16_512(const unsigned char *p, size_t n,
				unsigned limit)
{
	const __m512i abs = _mm512_set1_epi16(0x7fff);
	__m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
	size_t i = 0;
	for (; i + 128 <= n; i += 128) {
		const unsigned char *q = p + 2 * i;
		m0 = _mm512_max_epu16(m0, _mm512_and_si512(abs, _mm512_loadu_si512(q)));
		m1 = _mm512_max_epu16(m1, _mm512_and_si512(abs, _mm512_loadu_si512(q + 64)));
		m2 = _mm512_max_epu16(m2, _mm512_and_si512(abs, _mm512_loadu_si512(q + 128)));
		m3 = _mm512_max_epu16(m3, _mm512_and_si512(abs, _mm512_loadu_si512(q + 192)));
	}
	for (; i < n; i += 32) {
		__mmask32 k = n - i >= 32 ? ~(__mmask32)0
					  : ((__mmask32)1 << (n - i)) - 1;
		m0 = _mm512_max_epu16(m0, _mm512_and_si512(
			abs, _mm512_maskz_loadu_epi16(k, p + 2 * i)));
	}
	__m512i m = _mm512_max_epu16(_mm512_max_epu16(m0, m1),
				     _mm512_max_epu16(m2, m3));
	return _mm512_cmpge_epu16_mask(m, _mm512_set1_epi16((short)limit)) != 0;
}

/* n 32-bit words at p: any (x & 0x7fffffff) >= limit. */
AVX512 static bool over_u32_512(const unsigned char *p, size_t n,
				uint32_t limit)
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	__m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		const unsigned char *q = p + 4 * i;
		m0 = _mm512_max_epu32(m0, _mm512_and_si512(abs, _mm512_loadu_si512(q)));
		m1 = _mm512_max_epu32(m1, _mm512_and_si512(abs, _mm512_loadu_si512(q + 64)));
		m2 = _mm512_max_epu32(m2, _mm512_and_si512(abs, _mm512_loadu_si512(q + 128)));
		m3 = _mm512_max_epu32(m3, _mm512_and_si512(abs, _mm512_loadu_si512(q + 192)));
	}
	for (; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff
					  : (__mmask16)((1u << (n - i)) - 1);
		m0 = _mm512_max_epu32(m0, _mm512_and_si512(
			abs, _mm512_maskz_loadu_epi32(k, p + 4 * i)));
	}
	__m512i m = _mm512_max_epu32(_mm512_max_epu32(m0, m1),
				     _mm512_max_epu32(m2, m3));
	return _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32((int)limit)) != 0;
}

AVX2 static bool over_u16_256(const unsigned char *p, size_t n,
			      unsigned limit)
{
	const __m256i abs = _mm256_set1_epi16(0x7fff);
	__m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		const __m256i *q = (const __m256i *)(p + 2 * i);
		m0 = _mm256_max_epu16(m0, _mm256_and_si256(abs, _mm256_loadu_si256(q)));
		m1 = _mm256_max_epu16(m1, _mm256_and_si256(abs, _mm256_loadu_si256(q + 1)));
		m2 = _mm256_max_epu16(m2, _mm256_and_si256(abs, _mm256_loadu_si256(q + 2)));
		m3 = _mm256_max_epu16(m3, _mm256_and_si256(abs, _mm256_loadu_si256(q + 3)));
	}
	__m256i m = _mm256_max_epu16(_mm256_max_epu16(m0, m1),
				     _mm256_max_epu16(m2, m3));
	/* m >= limit exactly where max(m, limit) == m */
	__m256i lim = _mm256_set1_epi16((short)limit);
	if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_max_epu16(m, lim), m)))
		return true;
	return first_u16(p + 2 * i, n - i, limit) != STRATA_BLOCK_ALL_FINITE;
}

AVX2 static bool over_u32_256(const unsigned char *p, size_t n,
			      uint32_t limit)
{
	const __m256i abs = _mm256_set1_epi32(0x7fffffff);
	__m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		const __m256i *q = (const __m256i *)(p + 4 * i);
		m0 = _mm256_max_epu32(m0, _mm256_and_si256(abs, _mm256_loadu_si256(q)));
		m1 = _mm256_max_epu32(m1, _mm256_and_si256(abs, _mm256_loadu_si256(q + 1)));
		m2 = _mm256_max_epu32(m2, _mm256_and_si256(abs, _mm256_loadu_si256(q + 2)));
		m3 = _mm256_max_epu32(m3, _mm256_and_si256(abs, _mm256_loadu_si256(q + 3)));
	}
	__m256i m = _mm256_max_epu32(_mm256_max_epu32(m0, m1),
				     _mm256_max_epu32(m2, m3));
	__m256i lim = _mm256_set1_epi32((int)limit);
	if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(_mm256_max_epu32(m, lim), m)))
		return true;
	return first_f32(p + 4 * i, n - i) != STRATA_BLOCK_ALL_FINITE;
}

#else
static int detect(void)
{
	return 1; /* the block types' word scan; floats scan as level 0 */
}
#endif

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                 */
/* ------------------------------------------------------------------------ */

static int current_level(void)
{
	int l = atomic_load_explicit(&level, memory_order_relaxed);
	if (l < 0) {
		l = detect();
		atomic_store_explicit(&level, l, memory_order_relaxed);
	}
	return l;
}

int strata__finite_set_level(int want)
{
	int best = detect();
	int l = want < 0 || want > best ? best : want;
	atomic_store_explicit(&level, l, memory_order_relaxed);
	return l;
}

/* Whether the chunk [p, p + n units) may hold a value over the limit: the
 * kernels' verdict (exact: none missed, and none flagged that is not);
 * true at level 0, so the scalar scan decides. */
static bool chunk_over(int l, strata_block_type t, const unsigned char *p,
		       size_t n, uint32_t bb, factor_word f)
{
#if defined(__x86_64__)
	unsigned lim = t == STRATA_BLOCK_F16 ? F16_INF : 0x7f80u;
	if (l >= 1 && f.n)
		return over_blocks(p, n, bb, f);
	if (l == 2)
		return t == STRATA_BLOCK_F32 ? over_u32_512(p, n, 0x7f800000u)
					     : over_u16_512(p, n, lim);
	if (l == 1)
		return t == STRATA_BLOCK_F32 ? over_u32_256(p, n, 0x7f800000u)
					     : over_u16_256(p, n, lim);
#else
	if (l >= 1 && f.n)
		return over_blocks(p, n, bb, f);
#endif
	(void)l, (void)t, (void)p, (void)n, (void)bb, (void)f;
	return true;
}

static uint64_t first_in(strata_block_type t, const unsigned char *p,
			 uint64_t n, uint32_t bb, factor_word f)
{
	if (t == STRATA_BLOCK_F32)
		return first_f32(p, n);
	if (f.n)
		return first_block(p, n, bb, f);
	return first_u16(p, n, t == STRATA_BLOCK_F16 ? F16_INF : 0x7f80u);
}

/* ------------------------------------------------------------------------ */

uint64_t strata_block_first_nonfinite(strata_block_type t, const void *src,
				      uint64_t elements)
{
	const unsigned char *p = src;
	if ((unsigned)t >= STRATA_BLOCK_COUNT)
		return 0;
	factor_word f = factors(t);
	bool is_float = t == STRATA_BLOCK_F32 || t == STRATA_BLOCK_F16 ||
			t == STRATA_BLOCK_BF16;
	if (!is_float && !f.n)
		return STRATA_BLOCK_ALL_FINITE; /* no factor to check */
	/* units: elements of a float type, blocks of a block type */
	uint32_t bb = strata_block_bytes(t);
	uint64_t units = is_float ? elements : elements / strata_block_elements(t);
	uint64_t per = CHUNK_BYTES / bb;
	int l = current_level();
	for (uint64_t at = 0; at < units; at += per) {
		uint64_t n = units - at < per ? units - at : per;
		const unsigned char *q = p + at * bb;
		if (!chunk_over(l, t, q, (size_t)n, bb, f))
			continue;
		uint64_t i = first_in(t, q, n, bb, f);
		if (i != STRATA_BLOCK_ALL_FINITE)
			return at + i;
	}
	return STRATA_BLOCK_ALL_FINITE;
}
