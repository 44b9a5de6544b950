/* qdot_vnni.c - the activation-quantized decode product with AVX-512 VNNI:
 * vpdpbusd multiplies 64 unsigned codes by 64 signed 8-bit x and adds each
 * four products into one of 16 int32 lanes, which are converted and scaled
 * lane by lane (a lane's four elements share one weight factor and one x
 * factor), so no horizontal sum is taken before the end of a row
 * (layer: backend).
 *
 * The code offset is taken out in the integers: each lane starts at
 * -off times its four x bytes' sum (one vpdpbusd of off against x, shared
 * by the rows). Same integers as strata__qdot_rows_c, f32 sums in lane
 * order. */
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

typedef struct xrow {
	const int8_t *q;
	const float *d, *s;
} xrow;

/* acc[r][c] += the chunk's lanes for R weight rows and C rows of x;
 * mins[r][c] += its min terms. */
QDOT_TARGET static inline __attribute__((always_inline)) void
chunk_vnni(const strata__qw *w, const xrow *x, int R, int C, int off,
	   __m512 acc[QDOT_W][3], __m512 mins[QDOT_W][3])
{
	const __m512i idx4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2,
					       2, 2, 3, 3, 3, 3);
	const __m512i offv = _mm512_set1_epi8((char)off);
	for (int t = 0; t < 4; t++) {
		__m512i xv[3], init[3];
		__m512 dv[3];
		for (int c = 0; c < C; c++) {
			xv[c] = _mm512_loadu_si512(x[c].q + 64 * t);
			init[c] = _mm512_setzero_si512();
			if (off)
				init[c] = _mm512_sub_epi32(
					init[c],
					_mm512_dpbusd_epi32(
						_mm512_setzero_si512(), offv,
						xv[c]));
			dv[c] = _mm512_permutexvar_ps(
				idx4, _mm512_castps128_ps512(
					      _mm_loadu_ps(x[c].d + 4 * t)));
		}
		for (int r = 0; r < R; r++) {
			__m512i u = _mm512_load_si512(w[r].u + 64 * t);
			__m512 wl = _mm512_permutexvar_ps(
				idx4, _mm512_castps128_ps512(
					      _mm_loadu_ps(w[r].ws + 4 * t)));
			for (int c = 0; c < C; c++) {
				__m512i dot =
					_mm512_dpbusd_epi32(init[c], u, xv[c]);
				acc[r][c] = _mm512_fmadd_ps(
					_mm512_cvtepi32_ps(dot),
					_mm512_mul_ps(wl, dv[c]), acc[r][c]);
			}
		}
	}
	for (int r = 0; r < R; r++) {
		__m512 mw = _mm512_loadu_ps(w[r].mw);
		for (int c = 0; c < C; c++)
			mins[r][c] = _mm512_fmadd_ps(
				mw, _mm512_loadu_ps(x[c].s), mins[r][c]);
	}
}

/* Outputs o .. o + R of x rows c0 .. c0 + C over the whole row, the
 * chunks unpacked into w once per call. */
QDOT_TARGET static inline __attribute__((always_inline)) void
rows_vnni(const strata__qjob *j, uint32_t o, int R, uint32_t c0, int C,
	  strata__qw w[QDOT_W])
{
	__m512 acc[QDOT_W][3], mins[QDOT_W][3];
	const unsigned char *w0 = j->w + (uint64_t)o * j->row_bytes;
	const uint32_t g = j->x.groups;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = mins[r][c] = _mm512_setzero_ps();
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
		chunk_vnni(w, x, R, C, j->off, acc, mins);
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float s = _mm512_reduce_add_ps(
				_mm512_add_ps(acc[r][c], mins[r][c]));
			if (j->bias)
				s += j->bias[o + r];
			j->y[(uint64_t)(c0 + c) * j->out + o + r] = s;
		}
}

/* Every row of x, three at a time, for R weight rows. */
QDOT_TARGET static inline __attribute__((always_inline)) void
group_vnni(const strata__qjob *j, uint32_t o, int R, strata__qw w[QDOT_W])
{
	uint32_t c0 = 0;
	for (; c0 + 3 <= j->n; c0 += 3)
		rows_vnni(j, o, R, c0, 3, w);
	if (j->n - c0 == 2)
		rows_vnni(j, o, R, c0, 2, w);
	else if (j->n - c0 == 1)
		rows_vnni(j, o, R, c0, 1, w);
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
		group_vnni(&jt, o, QDOT_W, w);
	for (; o < o1; o++)
		group_vnni(&jt, o, 1, w);
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
