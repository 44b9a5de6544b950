/* qdot_vnni.c - the activation-quantized decode product with AVX-512 VNNI:
 * vpdpbusd multiplies 64 unsigned codes by 64 signed 8-bit x and adds each
 * four products into one of 16 int32 lanes; the codes go from the stored
 * blocks to registers (qdot_codes.h), never through a buffer
 * (layer: backend).
 *
 * A chunk is four such vectors, each 128-bit lane one 16-element run of
 * x. Their products are summed in integers to one vector of the chunk's
 * 16 run sums (sums4), so the factors are applied once per run: one
 * conversion, one multiply and one FMA per chunk and row of x, the min
 * terms a second FMA into the same sums. The runs come out of sums4 in
 * its order (lane 4 b + i: run 4 i + b of the slot order), so the weights'
 * factors are made in that order and x's are permuted into it once per
 * chunk. The code offset is taken out in the integers (off times each
 * run's x sum, once per chunk and row of x). Same integers as
 * strata__qdot_rows_c, f32 sums in their own order. */
#include "backend/cpu/kernels_internal.h"

#if defined(__x86_64__)
#define QDOT_TARGET                                                            \
	__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,"  \
			      "f16c")))
#include "backend/cpu/qdot_codes.h"

bool strata__qdot_vnni_usable(void)
{
	__builtin_cpu_init();
	return strata__quant_avx512_usable() &&
	       __builtin_cpu_supports("avx512vnni");
}

/* ------------------------------------------------------------------------ */
/* Run sums                                                                 */
/* ------------------------------------------------------------------------ */

/* The run sums of a chunk's codes c against its x, 16 int32 lanes in one
 * order either way (lane 4 b + i: run 4 i + b of the slot order):
 * - c and x as loaded (tr false): vpdpbusd gives 4 lanes a run, summed
 *   in reduce4;
 * - both transposed by transpose4 (tr true), so that lane 4 b + i of the
 *   vectors holds four elements each of that one run and four vpdpbusd
 *   sum it whole in its lane: no sums after, the transposes once per chunk
 *   of a weight row or of x, so it pays with two rows of x or more. */
QDOT_TARGET static inline __m512i reduce4(const __m512i d[4])
{
	__m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]),
				     _mm512_unpackhi_epi32(d[0], d[1]));
	__m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]),
				     _mm512_unpackhi_epi32(d[2], d[3]));
	return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b),
				_mm512_unpackhi_epi64(a, b));
}

/* The 4 x 4 dwords at each 128-bit block position of v[0..3] transposed:
 * dword i of block b of v[k] was dword k of block b of v[i]. */
QDOT_TARGET static QDOT_INLINE void
transpose4(__m512i v[4])
{
	__m512i a = _mm512_unpacklo_epi32(v[0], v[1]),
		b = _mm512_unpackhi_epi32(v[0], v[1]),
		c = _mm512_unpacklo_epi32(v[2], v[3]),
		d = _mm512_unpackhi_epi32(v[2], v[3]);
	v[0] = _mm512_unpacklo_epi64(a, c);
	v[1] = _mm512_unpackhi_epi64(a, c);
	v[2] = _mm512_unpacklo_epi64(b, d);
	v[3] = _mm512_unpackhi_epi64(b, d);
}

QDOT_TARGET static QDOT_INLINE __m512i
sums4(const __m512i c[4], const __m512i x[4], bool tr)
{
	__m512i d[4];
	if (tr) {
		d[0] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], x[0]);
		for (int v = 1; v < 4; v++)
			d[0] = _mm512_dpbusd_epi32(d[0], c[v], x[v]);
		return d[0];
	}
	for (int v = 0; v < 4; v++)
		d[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[v], x[v]);
	return reduce4(d);
}

/* 16 values of the runs in slot order, in sums4's order. */
QDOT_TARGET static inline __m512 order16(__m512 v)
{
	const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
					      10, 14, 3, 7, 11, 15);
	return _mm512_permutexvar_ps(idx, v);
}

/* 8 values of the 32-element groups in group order (a factor for both of
 * a group's runs), in sums4's order: run 4 i + b is in slot 2 i + b / 2,
 * which holds group order[2 i + b / 2] (Q4_K and Q5_K: 0 2 1 3 4 6 5 7). */
QDOT_TARGET static inline __m512 order8(__m256 v, bool q45k)
{
	const __m512i nat = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5,
					      7, 1, 3, 5, 7);
	const __m512i k45 = _mm512_setr_epi32(0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6,
					      7, 2, 3, 6, 7);
	return _mm512_permutexvar_ps(q45k ? k45 : nat, _mm512_castps256_ps512(v));
}

/* ------------------------------------------------------------------------ */
/* A chunk of one weight row                                                */
/* ------------------------------------------------------------------------ */

/* The chunk's factors (ws) and min terms (mw) in sums4's order; *mins
 * false where the type has none. */
QDOT_TARGET static QDOT_INLINE void
factors4(strata_block_type t, const unsigned char *p, uint32_t bb,
	 __m512 *ws, __m512 *mw, bool *mins)
{
	*mins = false;
	*mw = _mm512_setzero_ps();
	switch (t) {
	case STRATA_BLOCK_Q4_1: case STRATA_BLOCK_Q5_1:
		*mins = true;
		*mw = order8(halves(p, bb, 2), false);
		/* fall through */
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_Q4_0: case STRATA_BLOCK_Q5_0:
	case STRATA_BLOCK_IQ4_NL:
		*ws = order8(halves(p, bb, 0), false);
		return;
	case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K: {
		__m128i sm = q45k_scales(p + 4);
		__m256 d = _mm256_set1_ps(half_at(p)),
		       dm = _mm256_set1_ps(-half_at(p + 2));
		*ws = order8(_mm256_mul_ps(d, _mm256_cvtepi32_ps(
						   _mm256_cvtepu8_epi32(sm))),
			     true);
		*mw = order8(_mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
						   _mm_unpackhi_epi64(sm, sm)))),
			     true);
		*mins = true;
		return;
	}
	case STRATA_BLOCK_IQ4_XS:
		*ws = order8(_mm256_mul_ps(_mm256_set1_ps(half_at(p)),
					   _mm256_cvtepi32_ps(iq4xs_scales(p))),
			     false);
		return;
	case STRATA_BLOCK_Q6_K:
		*ws = order16(_mm512_mul_ps(
			_mm512_set1_ps(half_at(p + 208)),
			_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(LOAD128(p + 192)))));
		return;
	case STRATA_BLOCK_Q3_K:
		*ws = order16(_mm512_mul_ps(
			_mm512_set1_ps(half_at(p + 108)),
			_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q3k_scales(p + 96)))));
		return;
	default: { /* Q2_K: scale in the low nibble, min in the high */
		__m512i v = _mm512_cvtepu8_epi32(LOAD128(p));
		*ws = order16(_mm512_mul_ps(
			_mm512_set1_ps(half_at(p + 80)),
			_mm512_cvtepi32_ps(
				_mm512_and_si512(v, _mm512_set1_epi32(15)))));
		*mw = order16(_mm512_mul_ps(
			_mm512_set1_ps(-half_at(p + 82)),
			_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4))));
		*mins = true;
		return;
	}
	}
}

/* ------------------------------------------------------------------------ */
/* The pieces qdot_rows.h puts together                                     */
/* ------------------------------------------------------------------------ */

typedef __m512 qacc;

/* A chunk of one row of x: its codes (transposed where tr), and its factors, min
 * sums and offset sums in sums4's order. */
typedef struct xchunk {
	__m512i q[4];
	__m512 d, s;
	__m512i off;
} xchunk;

/* A chunk of one weight row: codes (vector v: slots 2 v and 2 v + 1,
 * transposed where tr), factors and min terms in sums4's order (mins: whether
 * it has them). */
typedef struct wchunk {
	__m512i c[4];
	__m512 ws, mw;
	bool mins;
} wchunk;

QDOT_TARGET static inline qacc acc_zero(void)
{
	return _mm512_setzero_ps();
}

QDOT_TARGET static inline float acc_sum(qacc a)
{
	return _mm512_reduce_add_ps(a);
}

QDOT_TARGET static QDOT_INLINE void
x_chunk(const strata__qjob *j, uint32_t c, uint32_t ch, int off, bool tr,
	xchunk *x)
{
	uint64_t gi = (uint64_t)c * j->x.groups + 8u * ch;
	for (int v = 0; v < 4; v++)
		x->q[v] = _mm512_loadu_si512(j->x.q + gi * 32 + 64 * v);
	if (tr)
		transpose4(x->q);
	x->d = order16(_mm512_loadu_ps(j->x.d + 2 * gi));
	x->s = order16(_mm512_loadu_ps(j->x.s + 2 * gi));
	x->off = _mm512_setzero_si512();
	if (off) {
		const __m512i offv = _mm512_set1_epi8((char)off);
		const __m512i o[4] = {offv, offv, offv, offv};
		x->off = sums4(o, x->q, tr);
	}
}

QDOT_TARGET static QDOT_INLINE void
w_chunk(strata_block_type t, const unsigned char *p, uint32_t bb, bool tr,
	wchunk *w)
{
	for (int v = 0; v < 4; v++)
		w->c[v] = _mm512_inserti64x4(
			_mm512_castsi256_si512(code_slot(t, p, bb, 2 * v)),
			code_slot(t, p, bb, 2 * v + 1), 1);
	if (tr)
		transpose4(w->c);
	factors4(t, p, bb, &w->ws, &w->mw, &w->mins);
}

QDOT_TARGET static QDOT_INLINE void
chunk_row(const wchunk *w, const xchunk *x, int off, bool tr, qacc *acc)
{
	__m512i sums = sums4(w->c, x->q, tr);
	if (off)
		sums = _mm512_sub_epi32(sums, x->off);
	*acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
			       _mm512_mul_ps(w->ws, x->d), *acc);
	if (w->mins)
		*acc = _mm512_fmadd_ps(w->mw, x->s, *acc);
}

#define QDOT_ROWS strata__qdot_rows_vnni
#include "backend/cpu/qdot_rows.h"
#endif
