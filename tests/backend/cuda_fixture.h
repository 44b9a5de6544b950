/* cuda_fixture.h - what the CUDA tests share: device buffers from one
 * arena, uploads and downloads, seeded random data and a tolerance check
 * that reports its worst element (layer: backend tests; the skip without a
 * device is support/gpu_skip.h). */
#ifndef STRATA_TESTS_BACKEND_CUDA_FIXTURE_H
#define STRATA_TESTS_BACKEND_CUDA_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/backend_cuda.h"
#include "support/gpu_skip.h"

/* xorshift64*: the same numbers on every machine. */
static inline float cuda_test_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	uint64_t r = *s * 0x2545F4914F6CDD1DULL;
	return (float)((double)(r >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
}

static inline void cuda_test_fill(float *x, size_t n, uint64_t seed,
				  float scale)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
	for (size_t i = 0; i < n; i++)
		x[i] = cuda_test_rand(&s) * scale;
}

/* Worst |got - want| / (|want| + rms(want)) over n: a relative error that
 * does not blow up where a reference element happens to be near zero. */
static inline double cuda_test_rel_err(const float *want, const float *got,
				       size_t n, size_t *worst_at)
{
	double ss = 0.0;
	for (size_t i = 0; i < n; i++)
		ss += (double)want[i] * want[i];
	double rms = sqrt(ss / (double)(n ? n : 1));
	double worst = 0.0;
	*worst_at = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - want[i]);
		double r = d / (fabs((double)want[i]) + rms + 1e-30);
		if (!(r <= worst)) { /* NaN counts as worst */
			worst = isnan(r) ? INFINITY : r;
			*worst_at = i;
		}
	}
	return worst;
}

#endif
