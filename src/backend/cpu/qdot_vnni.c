/* qdot_vnni.c - the activation-quantized decode product with AVX-512 VNNI:
 * vpdpbusd multiplies 64 unsigned codes by 64 signed 8-bit x and adds each
 * four products into one of 16 int32 lanes; the codes go from the stored
 * blocks to registers (qdot_codes.h), never through a buffer
 * (layer: backend).
 *
 * A chunk is four such vectors, each 128-bit lane one 16-element run of
 * x. Their lanes are summed in integers to one vector of the chunk's 16
 * run sums (reduce4), so the factors are applied once per run: one
 * conversion, one multiply and one FMA per chunk and row of x, the min
 * terms a second FMA into the same sums. The runs come out of reduce4 in
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

/* The largest block of the 32-element types (Q8_0). */
#define BLOCK32_MAX 34u

bool strata__qdot_vnni_usable(void)
{
	__builtin_cpu_init();
	return strata__quant_avx512_usable() &&
	       __builtin_cpu_supports("avx512vnni");
}

/* ------------------------------------------------------------------------ */
/* The reduce4 order                                                        */
/* ------------------------------------------------------------------------ */

/* Lane 4 b + i of reduce4's result: the sum of lane block b of d[i]. */
QDOT_TARGET static inline __m512i reduce4(const __m512i d[4])
{
	__m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]),
				     _mm512_unpackhi_epi32(d[0], d[1]));
	__m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]),
				     _mm512_unpackhi_epi32(d[2], d[3]));
	return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b),
				_mm512_unpackhi_epi64(a, b));
}

/* 16 values of the runs in slot order, in reduce4's order. */
QDOT_TARGET static inline __m512 order16(__m512 v)
{
	const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
					      10, 14, 3, 7, 11, 15);
	return _mm512_permutexvar_ps(idx, v);
}

/* 8 values of the 32-element groups in group order (a factor for both of
 * a group's runs), in reduce4's order: run 4 i + b is in slot 2 i + b / 2,
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

/* The chunk's codes: vector v holds slots 2 v and 2 v + 1. */
QDOT_TARGET static inline __attribute__((always_inline)) void
codes4(strata_block_type t, const unsigned char *p, uint32_t bb, __m512i c[4])
{
	for (int v = 0; v < 4; v++)
		c[v] = _mm512_inserti64x4(
			_mm512_castsi256_si512(code_slot(t, p, bb, 2 * v)),
			code_slot(t, p, bb, 2 * v + 1), 1);
}

/* The chunk's factors (ws) and min terms (mw) in reduce4's order; *mins
 * false where the type has none. */
QDOT_TARGET static inline __attribute__((always_inline)) void
factors4(strata_block_type t, const unsigned char *p, uint32_t bb,
	 __m512 *ws, __m512 *mw, bool *mins)
{
	*mins = false;
	*mw = _mm512_setzero_ps();
	switch (t) {
	case STRATA_BLOCK_Q4_1: case STRATA_BLOCK_Q5_1:
		*mins = true;
		*mw = order8(halves(p, 8, bb, 2), false);
		/* fall through */
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_Q4_0: case STRATA_BLOCK_Q5_0:
	case STRATA_BLOCK_IQ4_NL:
		*ws = order8(halves(p, 8, bb, 0), false);
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
/* Rows                                                                     */
/* ------------------------------------------------------------------------ */

/* One chunk of one row of x: its codes, and its factors, min sums and
 * offset sums in reduce4's order. */
typedef struct xchunk {
	const int8_t *q;
	__m512 d, s;
	__m512i off;
} xchunk;

QDOT_TARGET static inline __attribute__((always_inline)) xchunk
x_chunk(const strata__qjob *j, uint32_t c, uint32_t ch, int off)
{
	uint64_t gi = (uint64_t)c * j->x.groups + 8u * ch;
	xchunk x = {.q = j->x.q + gi * 32,
		    .d = order16(_mm512_loadu_ps(j->x.d + 2 * gi)),
		    .s = order16(_mm512_loadu_ps(j->x.s + 2 * gi)),
		    .off = _mm512_setzero_si512()};
	if (off) {
		const __m512i offv = _mm512_set1_epi8((char)off);
		__m512i d[4];
		for (int v = 0; v < 4; v++)
			d[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offv,
						   _mm512_loadu_si512(x.q + 64 * v));
		x.off = reduce4(d);
	}
	return x;
}

/* acc += the chunk's terms of one weight row (codes c, factors ws, mw)
 * against one row of x. */
QDOT_TARGET static inline __attribute__((always_inline)) void
chunk_row(const __m512i c[4], __m512 ws, __m512 mw, bool mins,
	  const xchunk *x, int off, __m512 *acc)
{
	__m512i d[4];
	for (int v = 0; v < 4; v++)
		d[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[v],
					   _mm512_loadu_si512(x->q + 64 * v));
	__m512i sums = reduce4(d);
	if (off)
		sums = _mm512_sub_epi32(sums, x->off);
	*acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
			       _mm512_mul_ps(ws, x->d), *acc);
	if (mins)
		*acc = _mm512_fmadd_ps(mw, x->s, *acc);
}

/* Outputs o .. o + R of x rows c0 .. c0 + C over the whole row. A partial
 * last chunk (the 32-element types) is copied first into zeroed blocks,
 * whose factors are 0, so that no load reads past the row. */
QDOT_TARGET static inline __attribute__((always_inline)) void
rows_vnni(const strata__qjob *j, uint32_t o, int R, uint32_t c0, int C)
{
	const strata_block_type t = j->type;
	const int off = j->off;
	const uint32_t bb = j->block_bytes;
	__m512 acc[QDOT_W][QDOT_W];
	unsigned char pad[8 * BLOCK32_MAX];
	const unsigned char *w0 = j->w + (uint64_t)o * j->row_bytes;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (uint32_t k = 0, ch = 0; k < j->in; k += QDOT_CHUNK, ch++) {
		uint32_t m = j->in - k < QDOT_CHUNK ? j->in - k : QDOT_CHUNK;
		uint64_t at = (uint64_t)ch * j->chunk_bytes;
		xchunk x[QDOT_W];
		for (int c = 0; c < C; c++)
			x[c] = x_chunk(j, c0 + c, ch, off);
		for (int r = 0; r < R; r++) {
			const unsigned char *p = w0 + r * j->row_bytes + at;
			if (j->prefetch)
				for (uint32_t b = 0; b < j->chunk_bytes; b += 64)
					__builtin_prefetch(p + j->prefetch + b,
							   0, 3);
			if (m < QDOT_CHUNK) {
				memset(pad, 0, sizeof pad);
				memcpy(pad, p, m / 32 * bb);
				p = pad;
			}
			__m512i codes[4];
			__m512 ws, mw;
			bool mins;
			codes4(t, p, bb, codes);
			factors4(t, p, bb, &ws, &mw, &mins);
			for (int c = 0; c < C; c++)
				chunk_row(codes, ws, mw, mins, &x[c], off,
					  &acc[r][c]);
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float s = _mm512_reduce_add_ps(acc[r][c]);
			if (j->bias)
				s += j->bias[o + r];
			j->y[(uint64_t)(c0 + c) * j->out + o + r] = s;
		}
}

/* Every row of x, four at a time, for R weight rows. */
QDOT_TARGET static inline __attribute__((always_inline)) void
group_vnni(const strata__qjob *j, uint32_t o, int R)
{
	uint32_t c0 = 0;
	for (; c0 + 4 <= j->n; c0 += 4)
		rows_vnni(j, o, R, c0, 4);
	switch (j->n - c0) {
	case 3: rows_vnni(j, o, R, c0, 3); return;
	case 2: rows_vnni(j, o, R, c0, 2); return;
	case 1: rows_vnni(j, o, R, c0, 1); return;
	default: return;
	}
}

/* One copy of the loops per type (t a constant in each), so the codes'
 * and factors' unpacking is inlined without a switch per chunk; rows four
 * at a time, then the last one to three together. */
QDOT_TARGET static inline __attribute__((always_inline)) void
rows_typed(const strata__qjob *j, uint32_t o0, uint32_t o1, strata_block_type t)
{
	strata__qjob jt = *j;
	jt.type = t;
	uint32_t o = o0;
	for (; o + QDOT_W <= o1; o += QDOT_W)
		group_vnni(&jt, o, QDOT_W);
	switch (o1 - o) {
	case 3: group_vnni(&jt, o, 3); return;
	case 2: group_vnni(&jt, o, 2); return;
	case 1: group_vnni(&jt, o, 1); return;
	default: return;
	}
}

#define ROWS_CASE(T)                                                           \
	case STRATA_BLOCK_##T:                                                 \
		rows_typed(j, o0, o1, STRATA_BLOCK_##T);                       \
		return;

QDOT_TARGET void strata__qdot_rows_vnni(const strata__qjob *j, uint32_t o0,
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
