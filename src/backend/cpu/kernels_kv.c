/* kernels_kv.c - the CPU KV cache in f16 or bf16: f32 rows stored in the
 * cache's type (rounded to nearest even) and cache rows read back as f32
 * for attention, with AVX-512 and AVX2/F16C paths chosen at run time
 * beside a scalar one of the same bits (layer: backend).
 *
 * The rounding is base's encoder's (strata_block_encode, which refuses
 * non-finite input; here NaN stays a quiet NaN and overflow becomes
 * infinity, as in the encoder's own conversion): F16C's VCVTPS2PH with
 * round-to-nearest-even gives the same bits, and bf16 is the integer
 * rounding x + 0x7fff + lsb, which the vector paths compute lane by lane.
 */
#include <string.h>

#include "backend/cpu/kernels_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/* Elements converted per pool task: big enough that a wake-up pays. */
#define KV_TASK_ELEMENTS 16384u

typedef void (*store_fn)(uint16_t *dst, const float *src, uint64_t n);
typedef strata__kv_load_fn load_fn;

/* ------------------------------------------------------------------------ */
/* Scalar conversions (the reference the vector paths are tested against)  */
/* ------------------------------------------------------------------------ */

static uint16_t f16_of(float f)
{
	uint32_t x, ax;
	memcpy(&x, &f, sizeof x);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) /* NaN: quiet, the payload's top bits kept */
		return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
	if (ax >= 0x477ff000u) /* 65520 and above: infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) { /* a half subnormal (or zero) */
		/* the value in units of 2^-24, rounded half to even */
		uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
		if (e < 102) /* below 2^-25: rounds to zero */
			return sign;
		uint32_t shift = 126 - e; /* 14 .. 24 */
		uint32_t q = m >> shift, rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);
		q += rem > half || (rem == half && (q & 1u));
		return (uint16_t)(sign | q);
	}
	uint32_t r = ax + 0x0fffu + ((ax >> 13) & 1u);
	return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
}

static float f32_of_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 31u, m = h & 0x3ffu, x;
	if (e == 31)
		x = sign | 0x7f800000u | (m << 13);
	else if (e)
		x = sign | ((e + 112u) << 23) | (m << 13);
	else if (!m)
		x = sign;
	else { /* subnormal: normalise */
		uint32_t s = 0;
		while (!(m & 0x400u))
			m <<= 1, s++;
		x = sign | ((113u - s) << 23) | ((m & 0x3ffu) << 13);
	}
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

static uint16_t bf16_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static void store_f16_c(uint16_t *dst, const float *src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] = f16_of(src[i]);
}

static void store_bf16_c(uint16_t *dst, const float *src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] = bf16_of(src[i]);
}

static void load_f16_c(float *dst, const void *from, uint64_t n)
{
	const uint16_t *src = from;
	for (uint64_t i = 0; i < n; i++)
		dst[i] = f32_of_f16(src[i]);
}

static void load_bf16_c(float *dst, const void *from, uint64_t n)
{
	const uint16_t *src = from;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t x = (uint32_t)src[i] << 16;
		memcpy(&dst[i], &x, sizeof x);
	}
}

/* ------------------------------------------------------------------------ */
/* AVX2 + F16C and AVX-512                                                  */
/* ------------------------------------------------------------------------ */

#if defined(__x86_64__)
#define KV_AVX2 __attribute__((target("avx2,f16c")))
#define KV_AVX512 __attribute__((target("avx512f,avx512bw,avx2,f16c")))

KV_AVX2 static void store_f16_avx2(uint16_t *dst, const float *src,
				   uint64_t n)
{
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
					    _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(dst + i), h);
	}
	store_f16_c(dst + i, src + i, n - i);
}

KV_AVX2 static void load_f16_avx2(float *dst, const void *from, uint64_t n)
{
	const uint16_t *src = from;
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
						  (const __m128i *)(src + i))));
	load_f16_c(dst + i, src + i, n - i);
}

/* Eight floats' bf16 bits in the low halves of eight 32-bit lanes. */
KV_AVX2 static __m256i bf16_lanes_avx2(__m256 f)
{
	const __m256i x = _mm256_castps_si256(f);
	const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
	const __m256i nan = _mm256_cmpgt_epi32(abs,
					       _mm256_set1_epi32(0x7f800000));
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16),
				       _mm256_set1_epi32(1));
	__m256i r = _mm256_srli_epi32(
		_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
				 lsb),
		16);
	__m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16),
				    _mm256_set1_epi32(0x40));
	return _mm256_blendv_epi8(r, q, nan);
}

KV_AVX2 static void store_bf16_avx2(uint16_t *dst, const float *src,
				    uint64_t n)
{
	uint64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i a = bf16_lanes_avx2(_mm256_loadu_ps(src + i));
		__m256i b = bf16_lanes_avx2(_mm256_loadu_ps(src + i + 8));
		/* packus works per 128-bit lane: put the halves back in order */
		__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b),
						     0xd8);
		_mm256_storeu_si256((__m256i *)(dst + i), p);
	}
	store_bf16_c(dst + i, src + i, n - i);
}

KV_AVX2 static void load_bf16_avx2(float *dst, const void *from, uint64_t n)
{
	const uint16_t *src = from;
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i w = _mm256_cvtepu16_epi32(
			_mm_loadu_si128((const __m128i *)(src + i)));
		_mm256_storeu_si256((__m256i *)(dst + i),
				    _mm256_slli_epi32(w, 16));
	}
	load_bf16_c(dst + i, src + i, n - i);
}

KV_AVX512 static void store_f16_avx512(uint16_t *dst, const float *src,
				       uint64_t n)
{
	uint64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
					    _MM_FROUND_TO_NEAREST_INT);
		_mm256_storeu_si256((__m256i *)(dst + i), h);
	}
	store_f16_avx2(dst + i, src + i, n - i);
}

KV_AVX512 static void load_f16_avx512(float *dst, const void *from,
				      uint64_t n)
{
	const uint16_t *src = from;
	uint64_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(dst + i,
				 _mm512_cvtph_ps(_mm256_loadu_si256(
					 (const __m256i *)(src + i))));
	load_f16_avx2(dst + i, src + i, n - i);
}

KV_AVX512 static void store_bf16_avx512(uint16_t *dst, const float *src,
					uint64_t n)
{
	uint64_t i = 0;
	const __m512i one = _mm512_set1_epi32(1);
	for (; i + 16 <= n; i += 16) {
		__m512i x = _mm512_castps_si512(_mm512_loadu_ps(src + i));
		__m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
		__mmask16 nan = _mm512_cmpgt_epi32_mask(
			abs, _mm512_set1_epi32(0x7f800000));
		__m512i hi = _mm512_srli_epi32(x, 16);
		__m512i r = _mm512_srli_epi32(
			_mm512_add_epi32(
				_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
				_mm512_and_si512(hi, one)),
			16);
		r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
		_mm256_storeu_si256((__m256i *)(dst + i),
				    _mm512_cvtepi32_epi16(r));
	}
	store_bf16_avx2(dst + i, src + i, n - i);
}

KV_AVX512 static void load_bf16_avx512(float *dst, const void *from,
				       uint64_t n)
{
	const uint16_t *src = from;
	uint64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512i w = _mm512_cvtepu16_epi32(
			_mm256_loadu_si256((const __m256i *)(src + i)));
		_mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
	}
	load_bf16_avx2(dst + i, src + i, n - i);
}

static bool has_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

/* The widest path this processor takes (read once: CPUID is slow under a
 * hypervisor), within strata__cpu_isa_max's test limit: 2 AVX-512, 1
 * AVX2/F16C, 0 scalar. */
static int kv_level(void)
{
	static int hw = -1; /* a race stores the same value */
	int level = __atomic_load_n(&hw, __ATOMIC_RELAXED);
	if (level < 0) {
		level = 0;
#if defined(__x86_64__)
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx2") && has_f16c())
			level = 1;
		if (level && __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw"))
			level = 2;
#endif
		__atomic_store_n(&hw, level, __ATOMIC_RELAXED);
	}
	int limit = strata__cpu_isa_max();
	return level < limit ? level : limit;
}

static store_fn store_for(strata_weight_type t, int level)
{
	bool f16 = t == STRATA_WEIGHT_F16;
#if defined(__x86_64__)
	if (level >= 2)
		return f16 ? store_f16_avx512 : store_bf16_avx512;
	if (level == 1)
		return f16 ? store_f16_avx2 : store_bf16_avx2;
#endif
	(void)level;
	return f16 ? store_f16_c : store_bf16_c;
}

static load_fn load_for(strata_weight_type t, int level)
{
	bool f16 = t == STRATA_WEIGHT_F16;
#if defined(__x86_64__)
	if (level >= 2)
		return f16 ? load_f16_avx512 : load_bf16_avx512;
	if (level == 1)
		return f16 ? load_f16_avx2 : load_bf16_avx2;
#endif
	(void)level;
	return f16 ? load_f16_c : load_bf16_c;
}

/* ------------------------------------------------------------------------ */

typedef struct store_job {
	uint16_t *dst;
	const float *src;
	uint64_t count;
	store_fn fn;
} store_job;

static void store_task(void *arg, uint32_t task)
{
	const store_job *j = arg;
	uint64_t a = (uint64_t)task * KV_TASK_ELEMENTS;
	uint64_t n = j->count - a < KV_TASK_ELEMENTS ? j->count - a
						     : KV_TASK_ELEMENTS;
	j->fn(j->dst + a, j->src + a, n);
}

strata_status strata__cpu_kv_store(void *ctx, void *dst,
				   strata_weight_type type, const float *src,
				   uint64_t count, strata_error *err)
{
	(void)err;
	if (type == STRATA_WEIGHT_F32) {
		memmove(dst, src, count * sizeof(float));
		return STRATA_OK;
	}
	store_job j = {dst, src, count, store_for(type, kv_level())};
	uint64_t tasks = (count + KV_TASK_ELEMENTS - 1) / KV_TASK_ELEMENTS;
	if (tasks == 1)
		store_task(&j, 0);
	else
		strata__pool_run(ctx, store_task, &j, (uint32_t)tasks);
	return STRATA_OK;
}

strata__kv_load_fn strata__cpu_kv_loader(strata_weight_type type)
{
	return load_for(type, kv_level());
}

void strata__cpu_kv_convert_at(int level, strata_weight_type type, bool store,
			       void *dst, const void *src, uint64_t count)
{
	if (level > kv_level())
		level = kv_level();
	if (store)
		store_for(type, level)(dst, src, count);
	else
		load_for(type, level)(dst, src, count);
}
