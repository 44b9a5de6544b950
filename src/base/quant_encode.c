/* quant_encode.c - encoding f32 into the weight block formats: the float
 * types element by element (f16 and bf16 rounded to nearest even), the
 * block types through their per-family encoders (quant_encode_legacy.c,
 * quant_encode_kquants.c) (layer: base).
 *
 * The encoders are the project's own, written from the block definitions
 * ggml documents; the decoders (quant.c) are their specification: every
 * block an encoder writes decodes, through strata_block_decode, to the
 * values the encoder measured its error on. */
#include <math.h>
#include <string.h>

#include "base/quant_internal.h"

typedef void (*encode_fn)(const float *x, unsigned char *b);

/* The block encoder of t, NULL for the float types. */
static encode_fn block_encoder(strata_block_type t)
{
	switch (t) {
	case STRATA_BLOCK_Q4_0: return strata__qe_q4_0;
	case STRATA_BLOCK_Q4_1: return strata__qe_q4_1;
	case STRATA_BLOCK_Q5_0: return strata__qe_q5_0;
	case STRATA_BLOCK_Q5_1: return strata__qe_q5_1;
	case STRATA_BLOCK_Q8_0: return strata__qe_q8_0;
	case STRATA_BLOCK_IQ4_NL: return strata__qe_iq4_nl;
	case STRATA_BLOCK_Q2_K: return strata__qe_q2_k;
	case STRATA_BLOCK_Q3_K: return strata__qe_q3_k;
	case STRATA_BLOCK_Q4_K: return strata__qe_q4_k;
	case STRATA_BLOCK_Q5_K: return strata__qe_q5_k;
	case STRATA_BLOCK_Q6_K: return strata__qe_q6_k;
	case STRATA_BLOCK_IQ4_XS: return strata__qe_iq4_xs;
	default: return NULL;
	}
}

uint16_t strata__f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) /* NaN: kept quiet, top payload bits kept */
		return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
	if (ax >= 0x477ff000u) /* 65520 and above round to infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) { /* below 2^-14: a half subnormal */
		float v;
		memcpy(&v, &ax, sizeof v);
		/* v * 2^24 is exact; nearbyintf rounds half to even */
		return (uint16_t)(sign | (uint16_t)nearbyintf(v * 0x1p24f));
	}
	/* normal: round the 13 dropped bits half to even; a carry moves into
	 * the exponent, which is the right result */
	uint32_t r = ax + 0x0fffu + ((ax >> 13) & 1u);
	return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
}

uint16_t strata__f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: forced quiet */
		return (uint16_t)((x >> 16) | 0x40u);
	return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* The float types: one element per block. */
static void float_encode(strata_block_type t, const float *x,
			 unsigned char *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t bits;
		if (t == STRATA_BLOCK_F32) {
			memcpy(&bits, &x[i], sizeof bits);
			p[4 * i] = (unsigned char)bits;
			p[4 * i + 1] = (unsigned char)(bits >> 8);
			p[4 * i + 2] = (unsigned char)(bits >> 16);
			p[4 * i + 3] = (unsigned char)(bits >> 24);
			continue;
		}
		uint16_t h = t == STRATA_BLOCK_F16 ? strata__f32_to_f16(x[i])
						   : strata__f32_to_bf16(x[i]);
		p[2 * i] = (unsigned char)h;
		p[2 * i + 1] = (unsigned char)(h >> 8);
	}
}

uint64_t strata_block_encode(strata_block_type t, const float *src,
			     void *dst, uint64_t elements)
{
	if ((unsigned)t >= STRATA_BLOCK_COUNT)
		return 0;
	for (uint64_t i = 0; i < elements; i++)
		if (!isfinite(src[i]))
			return i;
	unsigned char *p = dst;
	encode_fn fn = block_encoder(t);
	if (!fn) {
		float_encode(t, src, p, elements);
		return STRATA_BLOCK_ALL_FINITE;
	}
	uint32_t be = strata_block_elements(t), bb = strata_block_bytes(t);
	uint64_t blocks = elements / be;
	for (uint64_t b = 0; b < blocks; b++)
		fn(src + b * be, p + b * bb);
	return STRATA_BLOCK_ALL_FINITE;
}
