/* dot8.h - the one summation order of the CPU matrix products, shared by the
 * f32 product (kernels_matmul.c) and the stored-type one (kernels_quant.c):
 * eight lane sums acc += w * x, reduced in a fixed tree, then the tail
 * added in order (layer: backend).
 *
 * Whether acc + w * x rounds once (FMA) or twice is written out here, never
 * left to the compiler: both files are built -ffp-contract=off, because
 * with contraction on the compiler chooses per loop. gcc's FMA-chain
 * avoidance (--param avoid-fma-max-bits, on in gcc 13's tuning) keeps a
 * loop with one accumulator as multiply then add but fuses the tile's
 * twelve, so the two products differed in the last bit. The AVX2 tasks pass
 * fused = 1 (one rounding); the generic ones fused = 0 (two). fused must be
 * a constant after inlining: the fused helpers only exist for AVX2+FMA.
 */
#ifndef STRATA_BACKEND_CPU_DOT8_H
#define STRATA_BACKEND_CPU_DOT8_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Eight floats; alignment 4 so loads from any float address are legal. */
typedef float v8 __attribute__((vector_size(32), aligned(4)));

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static inline void
dot8_fma8(v8 *a, const v8 *w, const v8 *x)
{
	*a = (v8)_mm256_fmadd_ps((__m256)*w, (__m256)*x, (__m256)*a);
}

__attribute__((target("fma"))) static inline float dot8_fma1(float a, float w,
							     float x)
{
	return __builtin_fmaf(w, x, a);
}
#endif

/* *a += *w * *x lane by lane, rounded once where fused, else twice (by
 * pointer: a v8 argument or result outside AVX code changes the ABI). */
static inline __attribute__((always_inline)) void
dot8_madd8(v8 *a, const v8 *w, const v8 *x, int fused)
{
#if defined(__x86_64__)
	if (fused) {
		dot8_fma8(a, w, x);
		return;
	}
#endif
	(void)fused;
	*a = *a + *w * *x;
}

/* a + w * x, rounded once where fused, else twice. */
static inline __attribute__((always_inline)) float
dot8_madd1(float a, float w, float x, int fused)
{
#if defined(__x86_64__)
	if (fused)
		return dot8_fma1(a, w, x);
#endif
	(void)fused;
	return a + w * x;
}

/* The eight lane sums reduced in a fixed tree. */
static inline __attribute__((always_inline)) float dot8_reduce(const v8 *a)
{
	float l[8];
	memcpy(l, a, sizeof l);
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

/* A micro-tile of the products: y[c * ldy + r] = w_r . x_c (+ bias[r]) for
 * R rows of w (stride in) and C rows of x (stride in), 0 <= r < R <= 4,
 * 0 <= c < C <= 3. R and C are constants after inlining, so acc lives in
 * registers: 12 accumulators, 3 x vectors and 1 w vector fill the 16 AVX
 * registers; 7 loads feed 12 FMAs, so the FMA units, not the loads, set
 * the pace (4x2 ran 1.4-2.8x slower). Every output is summed the one way
 * whatever R and C are. */
#define DOT8_TILE_W 4
#define DOT8_TILE_X 3
static inline __attribute__((always_inline)) void
dot8_tile(float *y, uint64_t ldy, const float *x, const float *w,
	  const float *bias, uint32_t in, int R, int C, int fused)
{
	const uint32_t in8 = in & ~7u;
	const float *wr[DOT8_TILE_W], *xr[DOT8_TILE_X];
	v8 acc[DOT8_TILE_W][DOT8_TILE_X];
	for (int r = 0; r < R; r++)
		wr[r] = w + (uint64_t)r * in;
	for (int c = 0; c < C; c++)
		xr[c] = x + (uint64_t)c * in;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = (v8){0};
	for (uint32_t k = 0; k < in8; k += 8) {
		v8 xv[DOT8_TILE_X];
		for (int c = 0; c < C; c++)
			xv[c] = *(const v8 *)(xr[c] + k);
		for (int r = 0; r < R; r++) {
			v8 wv = *(const v8 *)(wr[r] + k);
			for (int c = 0; c < C; c++)
				dot8_madd8(&acc[r][c], &wv, &xv[c], fused);
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float s = dot8_reduce(&acc[r][c]);
			for (uint32_t k = in8; k < in; k++)
				s = dot8_madd1(s, wr[r][k], xr[c][k], fused);
			if (bias)
				s += bias[r];
			y[(uint64_t)c * ldy + r] = s;
		}
}

#endif
