/* qdot_avx2.c - the activation-quantized decode product with AVX2: each 32
 * codes times 32 signed 8-bit x by vpmaddubsw (pairs into int16) and
 * vpmaddwd (into 8 int32 lanes of four elements), scaled lane by lane as
 * qdot_vnni.c does (layer: backend).
 *
 * vpmaddubsw saturates its int16 pair sums: codes up to 63 against |x| <=
 * 127 stay below 2^15 (16002), but the biased signed types (offset 128:
 * Q8_0, IQ4) would not, so those multiply |w| by x carrying w's sign
 * (vpsign), at most 2 * 128 * 127 = 32512. Same integers as
 * strata__qdot_rows_c, f32 sums in lane order. */
#include "backend/cpu/kernels_internal.h"

#if defined(__x86_64__)
#define QDOT_TARGET __attribute__((target("avx2,fma,f16c")))
#include <float.h>
#include <math.h>

#include "backend/cpu/qdot_codes.h"

/* 16 values of x (all present) as quantize16 in qdot.c makes them, bit for
 * bit: the same maximum, quotient, clamp and rounding, in vectors. */
QDOT_TARGET void strata__qdot_quantize16_avx2(const float *x, int8_t *q,
					      float *d, float *s)
{
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
	__m256 a0 = _mm256_and_ps(v0, absm), a1 = _mm256_and_ps(v1, absm);
	const __m256 big = _mm256_set1_ps(FLT_MAX);
	int bad = _mm256_movemask_ps(_mm256_or_ps(
		_mm256_cmp_ps(a0, big, _CMP_NLE_UQ),
		_mm256_cmp_ps(a1, big, _CMP_NLE_UQ)));
	__m256 m = _mm256_max_ps(a0, a1);
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(m),
			      _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	float amax = _mm_cvtss_f32(h), dx = amax / 127;
	if (bad) {
		memset(q, 0, 16);
		*d = *s = NAN;
		return;
	}
	__m256 div = _mm256_set1_ps(dx > 0 ? dx : 1);
	const __m256 lo = _mm256_set1_ps(-127), hi = _mm256_set1_ps(127),
		     magic = _mm256_set1_ps(12582912.0f);
	__m256 r0 = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(v0, div), lo), hi);
	__m256 r1 = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(v1, div), lo), hi);
	r0 = _mm256_sub_ps(_mm256_add_ps(r0, magic), magic);
	r1 = _mm256_sub_ps(_mm256_add_ps(r1, magic), magic);
	__m256i i0 = _mm256_cvtps_epi32(r0), i1 = _mm256_cvtps_epi32(r1);
	__m256i sum = _mm256_add_epi32(i0, i1);
	__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum),
				   _mm256_extracti128_si256(sum, 1));
	s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
	s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
	__m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(i0),
				      _mm256_extracti128_si256(i0, 1));
	__m128i p16b = _mm_packs_epi32(_mm256_castsi256_si128(i1),
				       _mm256_extracti128_si256(i1, 1));
	_mm_storeu_si128((__m128i *)q, _mm_packs_epi16(p16, p16b));
	*d = dx;
	*s = dx * (float)_mm_cvtsi128_si32(s4);
}

typedef struct xrow {
	const int8_t *q;
	const float *d, *s;
} xrow;

/* The 8 int32 lanes of 32 codes u (offset off) times 32 x bytes, exact
 * signed sums (code - off) * x of each four; corr: off times x's four-byte
 * sums (unused at 0 and 128). */
QDOT_TARGET static inline __m256i dot32(__m256i u, __m256i x, __m256i corr,
					int off)
{
	const __m256i ones = _mm256_set1_epi16(1);
	if (off == 128) {
		__m256i s = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));
		__m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(s),
						 _mm256_sign_epi8(x, s));
		return _mm256_madd_epi16(p, ones);
	}
	__m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones);
	return off ? _mm256_sub_epi32(d, corr) : d;
}

QDOT_TARGET static inline __attribute__((always_inline)) void
chunk_avx2(const strata__qw *w, const xrow *x, int R, int C, int off,
	   __m256 acc[QDOT_W][3], __m256 mins[QDOT_W][3])
{
	const __m256i ones = _mm256_set1_epi16(1);
	const __m256i offv = _mm256_set1_epi8((char)off);
	for (int g = 0; g < 8; g++) {
		__m256i xv[3], corr[3];
		__m256 dv[3];
		for (int c = 0; c < C; c++) {
			xv[c] = LOAD256(x[c].q + 32 * g);
			corr[c] = _mm256_setzero_si256();
			if (off && off != 128)
				corr[c] = _mm256_madd_epi16(
					_mm256_maddubs_epi16(offv, xv[c]), ones);
			dv[c] = _mm256_set_m128(
				_mm_broadcast_ss(x[c].d + 2 * g + 1),
				_mm_broadcast_ss(x[c].d + 2 * g));
		}
		for (int r = 0; r < R; r++) {
			__m256i u = _mm256_load_si256(
				(const __m256i *)(w[r].u + 32 * g));
			__m256 wl = _mm256_set_m128(
				_mm_broadcast_ss(w[r].ws + 2 * g + 1),
				_mm_broadcast_ss(w[r].ws + 2 * g));
			for (int c = 0; c < C; c++)
				acc[r][c] = _mm256_fmadd_ps(
					_mm256_cvtepi32_ps(
						dot32(u, xv[c], corr[c], off)),
					_mm256_mul_ps(wl, dv[c]), acc[r][c]);
		}
	}
	for (int r = 0; r < R; r++) {
		__m256 m0 = _mm256_loadu_ps(w[r].mw),
		       m1 = _mm256_loadu_ps(w[r].mw + 8);
		for (int c = 0; c < C; c++) {
			mins[r][c] = _mm256_fmadd_ps(
				m0, _mm256_loadu_ps(x[c].s), mins[r][c]);
			mins[r][c] = _mm256_fmadd_ps(
				m1, _mm256_loadu_ps(x[c].s + 8), mins[r][c]);
		}
	}
}

QDOT_TARGET static inline float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
			      _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

QDOT_TARGET static inline __attribute__((always_inline)) void
rows_avx2(const strata__qjob *j, uint32_t o, int R, uint32_t c0, int C,
	  strata__qw w[QDOT_W])
{
	__m256 acc[QDOT_W][3], mins[QDOT_W][3];
	const unsigned char *w0 = j->w + (uint64_t)o * j->row_bytes;
	const uint32_t g = j->x.groups;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = mins[r][c] = _mm256_setzero_ps();
	for (uint32_t k = 0, ch = 0; k < j->in; k += QDOT_CHUNK, ch++) {
		uint32_t m = j->in - k < QDOT_CHUNK ? j->in - k : QDOT_CHUNK;
		uint64_t at = (uint64_t)ch * j->chunk_bytes;
		for (int r = 0; r < R; r++) {
			const unsigned char *p = w0 + r * j->row_bytes + at;
			if (j->prefetch)
				for (uint32_t b = 0; b < j->chunk_bytes; b += 64)
					__builtin_prefetch(p + j->prefetch + b,
							   0, 3);
			qdot_codes_simd(j->type, p, m, j->block_bytes, &w[r]);
			qdot_factors_simd(j->type, p, m, j->block_bytes,
					  &w[r]);
		}
		xrow x[3];
		for (int c = 0; c < C; c++) {
			uint64_t gi = (uint64_t)(c0 + c) * g + 8u * ch;
			x[c] = (xrow){j->x.q + gi * 32, j->x.d + 2 * gi,
				      j->x.s + 2 * gi};
		}
		chunk_avx2(w, x, R, C, j->off, acc, mins);
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float s = hsum(_mm256_add_ps(acc[r][c], mins[r][c]));
			if (j->bias)
				s += j->bias[o + r];
			j->y[(uint64_t)(c0 + c) * j->out + o + r] = s;
		}
}

QDOT_TARGET static inline __attribute__((always_inline)) void
group_avx2(const strata__qjob *j, uint32_t o, int R, strata__qw w[QDOT_W])
{
	uint32_t c0 = 0;
	for (; c0 + 3 <= j->n; c0 += 3)
		rows_avx2(j, o, R, c0, 3, w);
	if (j->n - c0 == 2)
		rows_avx2(j, o, R, c0, 2, w);
	else if (j->n - c0 == 1)
		rows_avx2(j, o, R, c0, 1, w);
}

/* One copy of the loops per type (t a constant in each), so the codes'
 * and factors' unpacking is inlined without a switch per chunk. */
QDOT_TARGET static inline __attribute__((always_inline)) void
rows_typed(const strata__qjob *j, uint32_t o0, uint32_t o1, strata_block_type t)
{
	strata__qjob jt = *j;
	jt.type = t;
	strata__qw w[QDOT_W];
	uint32_t o = o0;
	for (; o + QDOT_W <= o1; o += QDOT_W)
		group_avx2(&jt, o, QDOT_W, w);
	for (; o < o1; o++)
		group_avx2(&jt, o, 1, w);
}

#define ROWS_CASE(T)                                                           \
	case STRATA_BLOCK_##T:                                                 \
		rows_typed(j, o0, o1, STRATA_BLOCK_##T);                       \
		return;

QDOT_TARGET void strata__qdot_rows_avx2(const strata__qjob *j, uint32_t o0,
					uint32_t o1)
{
	switch (j->type) {
	ROWS_CASE(Q8_0) ROWS_CASE(Q4_0) ROWS_CASE(Q4_1) ROWS_CASE(Q5_0)
	ROWS_CASE(Q5_1) ROWS_CASE(IQ4_NL) ROWS_CASE(Q2_K) ROWS_CASE(Q3_K)
	ROWS_CASE(Q4_K) ROWS_CASE(Q5_K) ROWS_CASE(Q6_K) ROWS_CASE(IQ4_XS)
	default:
		strata__qdot_rows_c(j, o0, o1);
		return;
	}
}
#endif
