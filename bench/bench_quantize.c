/* bench_quantize.c - strata quantize's encoders: MB of f32 input encoded
 * per second, one core, per block type, with the relative RMS error of the
 * round trip beside it, and the decoder's rate as the peer measured in the
 * same run (bench, layer: base). Input: N(0, 0.02) values, the spread of
 * real weights.
 *
 * usage: bench_quantize [--mib N] [--quick]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/base.h"

static void gaussian(float *x, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		double u = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		double v = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
		x[i] = (float)(0.02 * sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
	}
}

int main(int argc, char **argv)
{
	double mib = 16;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			mib = 0.25;
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = atof(argv[++i]);
	}
	size_t n = (size_t)(mib * 1048576 / 4) / 256 * 256;
	if (n < 256)
		n = 256;
	float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
	unsigned char *b = malloc(n * 4);
	if (!x || !y || !b)
		return 1;
	gaussian(x, n, 1);
	memset(b, 0, n * 4); /* first touch outside the timing */
	printf("bench_quantize: %zu f32 values (%.1f MB) per type, one core\n", n,
	       n * 4 / 1e6);
	printf("%-7s %12s %12s %10s\n", "type", "encode MB/s", "decode MB/s",
	       "rel rmse");
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		uint64_t t0 = strata_now_ns();
		if (strata_block_encode((strata_block_type)t, x, b, n) !=
		    STRATA_BLOCK_ALL_FINITE)
			return 1;
		uint64_t t1 = strata_now_ns();
		strata_block_decode((strata_block_type)t, b, y, n);
		uint64_t t2 = strata_now_ns();
		double e = 0, s = 0;
		for (size_t i = 0; i < n; i++) {
			e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
			s += (double)x[i] * x[i];
		}
		printf("%-7s %12.1f %12.1f %10.5f\n",
		       strata_block_name((strata_block_type)t),
		       n * 4 / 1e6 / ((double)(t1 - t0 + 1) / 1e9),
		       n * 4 / 1e6 / ((double)(t2 - t1 + 1) / 1e9), sqrt(e / s));
	}
	free(x);
	free(y);
	free(b);
	return 0;
}
