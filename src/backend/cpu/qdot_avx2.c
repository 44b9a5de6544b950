/* qdot_avx2.c - the activation-quantized decode product with AVX2: each 32
 * codes times 32 signed 8-bit x by vpmaddubsw (pairs into int16) and
 * vpmaddwd (into 8 int32 lanes of four elements), the lanes of four slots
 * summed in integers to their 8 run sums before the factors, as
 * qdot_vnni.c does with 16 (layer: backend).
 *
 * vpmaddubsw saturates its int16 pair sums: codes up to 63 against |x| <=
 * 127 stay below 2^15 (16002), but the biased signed types (offset 128:
 * Q8_0, IQ4) would not, so those multiply |w| by x carrying w's sign
 * (vpsign), at most 2 * 128 * 127 = 32512; the other offsets are taken
 * out in the integers. Same integers as strata__qdot_rows_c, f32 sums in
 * their own order. */
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

/* ------------------------------------------------------------------------ */
/* Run sums                                                                 */
/* ------------------------------------------------------------------------ */

/* Lane 4 b + i of reduce4's result: the sum of lane block b of d[i]; for
 * slots 4 h .. 4 h + 3 (h = 0, 1) that is run 8 h + 2 i + b of the chunk. */
QDOT_TARGET static inline __m256i reduce4(const __m256i d[4])
{
	__m256i a = _mm256_add_epi32(_mm256_unpacklo_epi32(d[0], d[1]),
				     _mm256_unpackhi_epi32(d[0], d[1]));
	__m256i b = _mm256_add_epi32(_mm256_unpacklo_epi32(d[2], d[3]),
				     _mm256_unpackhi_epi32(d[2], d[3]));
	return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b),
				_mm256_unpackhi_epi64(a, b));
}

/* The 4 x 4 dwords at each 128-bit block position of v[0..3] transposed
 * (qdot_vnni.c's transpose4: each lane then holds pieces of one run). */
QDOT_TARGET static QDOT_INLINE void
transpose4(__m256i v[4])
{
	__m256i a = _mm256_unpacklo_epi32(v[0], v[1]),
		b = _mm256_unpackhi_epi32(v[0], v[1]),
		c = _mm256_unpacklo_epi32(v[2], v[3]),
		d = _mm256_unpackhi_epi32(v[2], v[3]);
	v[0] = _mm256_unpacklo_epi64(a, c);
	v[1] = _mm256_unpackhi_epi64(a, c);
	v[2] = _mm256_unpacklo_epi64(b, d);
	v[3] = _mm256_unpackhi_epi64(b, d);
}

/* 8 values of runs 8 h .. 8 h + 7 in slot order, in reduce4's order. */
QDOT_TARGET static inline __m256 order16(__m256 v)
{
	return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 2, 4, 6, 1, 3,
							     5, 7));
}

/* The factors of the 32-element groups in group order (one for both of a
 * group's runs), in reduce4's order for half h: run 8 h + 2 i + b is in
 * slot 4 h + i, which holds group order[4 h + i] (Q4_K and Q5_K: 0 2 1 3
 * 4 6 5 7). */
QDOT_TARGET static inline void order8(__m256 v, bool q45k, __m256 o[2])
{
	o[0] = _mm256_permutevar8x32_ps(
		v, q45k ? _mm256_setr_epi32(0, 2, 1, 3, 0, 2, 1, 3)
			: _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3));
	o[1] = _mm256_permutevar8x32_ps(
		v, q45k ? _mm256_setr_epi32(4, 6, 5, 7, 4, 6, 5, 7)
			: _mm256_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7));
}

/* 16 signed bytes times f, as 16 factors in reduce4's order. */
QDOT_TARGET static inline void order16_i8(__m128i v, float f, __m256 o[2])
{
	__m256 fv = _mm256_set1_ps(f);
	o[0] = order16(_mm256_mul_ps(fv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
	o[1] = order16(_mm256_mul_ps(
		fv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)))));
}

/* The chunk's factors (ws) and min terms (mw) in reduce4's order; *mins
 * false where the type has none. */
QDOT_TARGET static QDOT_INLINE void
factors8(strata_block_type t, const unsigned char *p, uint32_t bb, __m256 ws[2],
	 __m256 mw[2], bool *mins)
{
	*mins = false;
	mw[0] = mw[1] = _mm256_setzero_ps();
	switch (t) {
	case STRATA_BLOCK_Q4_1: case STRATA_BLOCK_Q5_1:
		*mins = true;
		order8(halves(p, bb, 2), false, mw);
		/* fall through */
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_Q4_0: case STRATA_BLOCK_Q5_0:
	case STRATA_BLOCK_IQ4_NL:
		order8(halves(p, bb, 0), false, ws);
		return;
	case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K: {
		__m128i sm = q45k_scales(p + 4);
		__m256 d = _mm256_set1_ps(half_at(p)),
		       dm = _mm256_set1_ps(-half_at(p + 2));
		order8(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm))),
		       true, ws);
		order8(_mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
						 _mm_unpackhi_epi64(sm, sm)))),
		       true, mw);
		*mins = true;
		return;
	}
	case STRATA_BLOCK_IQ4_XS:
		order8(_mm256_mul_ps(_mm256_set1_ps(half_at(p)),
				     _mm256_cvtepi32_ps(iq4xs_scales(p))),
		       false, ws);
		return;
	case STRATA_BLOCK_Q6_K:
		order16_i8(LOAD128(p + 192), half_at(p + 208), ws);
		return;
	case STRATA_BLOCK_Q3_K:
		order16_i8(q3k_scales(p + 96), half_at(p + 108), ws);
		return;
	default: { /* Q2_K: scale in the low nibble, min in the high */
		__m256 d = _mm256_set1_ps(half_at(p + 80)),
		       dm = _mm256_set1_ps(-half_at(p + 82));
		for (int h = 0; h < 2; h++) {
			__m256i v = _mm256_cvtepu8_epi32(
				_mm_loadl_epi64((const __m128i *)(p + 8 * h)));
			ws[h] = order16(_mm256_mul_ps(
				d, _mm256_cvtepi32_ps(_mm256_and_si256(
					   v, _mm256_set1_epi32(15)))));
			mw[h] = order16(_mm256_mul_ps(
				dm, _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4))));
		}
		*mins = true;
		return;
	}
	}
}

/* The 8 int32 lanes of 32 codes u times 32 x bytes, sums of each four: of
 * (u - 128) x at offset 128 (w's sign moved onto x), else of u x (the
 * offset is taken out after reduce4). */
QDOT_TARGET static inline __m256i dot32(__m256i u, __m256i x, int off)
{
	const __m256i ones = _mm256_set1_epi16(1);
	if (off == 128) {
		__m256i s = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));
		return _mm256_madd_epi16(
			_mm256_maddubs_epi16(_mm256_abs_epi8(s),
					     _mm256_sign_epi8(x, s)),
			ones);
	}
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones);
}

/* The run sums of four slots' codes c against their x, in reduce4's order
 * either way: as loaded, reduce4 of the four lanes a run; both transposed
 * (tr), each lane one run's whole sum. */
QDOT_TARGET static QDOT_INLINE __m256i
sums4(const __m256i c[4], const __m256i x[4], int off, bool tr)
{
	__m256i d[4];
	for (int i = 0; i < 4; i++)
		d[i] = dot32(c[i], x[i], off);
	if (tr)
		return _mm256_add_epi32(_mm256_add_epi32(d[0], d[1]),
					_mm256_add_epi32(d[2], d[3]));
	return reduce4(d);
}

/* ------------------------------------------------------------------------ */
/* The pieces qdot_rows.h puts together                                     */
/* ------------------------------------------------------------------------ */

typedef __m256 qacc;

/* A chunk of one row of x: its codes (transposed where tr), and per half
 * (slots 0-3, 4-7) its factors, min sums and offset sums in reduce4's
 * order. */
typedef struct xchunk {
	__m256i q[8];
	__m256 d[2], s[2];
	__m256i off[2];
} xchunk;

/* A chunk of one weight row: the codes of each slot, factors and min
 * terms in reduce4's order (mins: whether it has them). */
typedef struct wchunk {
	__m256i c[8];
	__m256 ws[2], mw[2];
	bool mins;
} wchunk;

QDOT_TARGET static inline qacc acc_zero(void)
{
	return _mm256_setzero_ps();
}

QDOT_TARGET static inline float acc_sum(qacc v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
			      _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

QDOT_TARGET static QDOT_INLINE void
x_chunk(const strata__qjob *j, uint32_t c, uint32_t ch, int off, bool tr,
	xchunk *x)
{
	uint64_t gi = (uint64_t)c * j->x.groups + 8u * ch;
	const __m256i offv = _mm256_set1_epi8((char)off);
	for (int s = 0; s < 8; s++)
		x->q[s] = LOAD256(j->x.q + gi * 32 + 32 * s);
	for (int h = 0; h < 2; h++) {
		if (tr)
			transpose4(x->q + 4 * h);
		x->d[h] = order16(_mm256_loadu_ps(j->x.d + 2 * gi + 8 * h));
		x->s[h] = order16(_mm256_loadu_ps(j->x.s + 2 * gi + 8 * h));
		x->off[h] = _mm256_setzero_si256();
		if (off && off != 128) {
			const __m256i o[4] = {offv, offv, offv, offv};
			x->off[h] = sums4(o, x->q + 4 * h, 0, tr);
		}
	}
}

QDOT_TARGET static QDOT_INLINE void
w_chunk(strata_block_type t, const unsigned char *p, uint32_t bb, bool tr,
	wchunk *w)
{
	for (int s = 0; s < 8; s++)
		w->c[s] = code_slot(t, p, bb, s);
	if (tr) {
		transpose4(w->c);
		transpose4(w->c + 4);
	}
	factors8(t, p, bb, w->ws, w->mw, &w->mins);
}

QDOT_TARGET static QDOT_INLINE void
chunk_row(const wchunk *w, const xchunk *x, int off, bool tr, qacc *acc)
{
	for (int h = 0; h < 2; h++) {
		__m256i sums = sums4(w->c + 4 * h, x->q + 4 * h, off, tr);
		if (off && off != 128)
			sums = _mm256_sub_epi32(sums, x->off[h]);
		*acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums),
				       _mm256_mul_ps(w->ws[h], x->d[h]), *acc);
		if (w->mins)
			*acc = _mm256_fmadd_ps(w->mw[h], x->s[h], *acc);
	}
}

#define QDOT_ROWS strata__qdot_rows_avx2
#include "backend/cpu/qdot_rows.h"
#endif
