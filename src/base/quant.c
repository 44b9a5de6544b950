/* quant.c - decoding the weight block formats to f32: the float types
 * element by element, the block types through their per-family decoders
 * (quant_legacy.c, quant_kquants.c); a non-finite value or factor is
 * reported by block so the caller can name the tensor (layer: base). */
#include <math.h>
#include <string.h>

#include "base/quant_internal.h"

typedef bool (*block_fn)(const unsigned char *b, float *y);

static const struct {
	const char *name;
	uint32_t elements, bytes;
} table[STRATA_BLOCK_COUNT] = {
#define ROW(n, be, bb) [STRATA_BLOCK_##n] = {#n, be, bb},
	STRATA_BLOCK_MAP(ROW)
#undef ROW
};

/* The block decoder of t, NULL for the float types. */
static block_fn block_decoder(strata_block_type t)
{
	switch (t) {
	case STRATA_BLOCK_Q4_0: return strata__dq_q4_0;
	case STRATA_BLOCK_Q4_1: return strata__dq_q4_1;
	case STRATA_BLOCK_Q5_0: return strata__dq_q5_0;
	case STRATA_BLOCK_Q5_1: return strata__dq_q5_1;
	case STRATA_BLOCK_Q8_0: return strata__dq_q8_0;
	case STRATA_BLOCK_IQ4_NL: return strata__dq_iq4_nl;
	case STRATA_BLOCK_Q2_K: return strata__dq_q2_k;
	case STRATA_BLOCK_Q3_K: return strata__dq_q3_k;
	case STRATA_BLOCK_Q4_K: return strata__dq_q4_k;
	case STRATA_BLOCK_Q5_K: return strata__dq_q5_k;
	case STRATA_BLOCK_Q6_K: return strata__dq_q6_k;
	case STRATA_BLOCK_IQ4_XS: return strata__dq_iq4_xs;
	default: return NULL;
	}
}

float strata__f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13);
	} else if (exp != 0) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else {
		/* zero or subnormal: man * 2^-24, exact in float */
		float v = ldexpf((float)man, -24);
		return sign ? -v : v;
	}
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

const char *strata_block_name(strata_block_type t)
{
	return (unsigned)t < STRATA_BLOCK_COUNT ? table[t].name : NULL;
}

uint32_t strata_block_elements(strata_block_type t)
{
	return (unsigned)t < STRATA_BLOCK_COUNT ? table[t].elements : 0;
}

uint32_t strata_block_bytes(strata_block_type t)
{
	return (unsigned)t < STRATA_BLOCK_COUNT ? table[t].bytes : 0;
}

/* The float types: one element per block; returns the first non-finite
 * element's index. */
static uint64_t float_decode(strata_block_type t, const unsigned char *p,
			     float *dst, uint64_t n)
{
	uint64_t bad = STRATA_BLOCK_ALL_FINITE;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t bits;
		if (t == STRATA_BLOCK_F32) {
			bits = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
			       (uint32_t)p[4 * i + 2] << 16 |
			       (uint32_t)p[4 * i + 3] << 24;
			memcpy(&dst[i], &bits, sizeof bits);
		} else if (t == STRATA_BLOCK_F16) {
			dst[i] = strata__load_f16(p + 2 * i);
		} else {
			bits = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16;
			memcpy(&dst[i], &bits, sizeof bits);
		}
		if (!isfinite(dst[i]) && bad == STRATA_BLOCK_ALL_FINITE)
			bad = i;
	}
	return bad;
}

uint64_t strata_block_decode(strata_block_type t, const void *src, float *dst,
			     uint64_t elements)
{
	if ((unsigned)t >= STRATA_BLOCK_COUNT)
		return 0;
	const unsigned char *p = src;
	block_fn fn = block_decoder(t);
	if (!fn)
		return float_decode(t, p, dst, elements);
	uint64_t blocks = elements / table[t].elements;
	uint64_t bad = STRATA_BLOCK_ALL_FINITE;
	for (uint64_t b = 0; b < blocks; b++)
		if (!fn(p + b * table[t].bytes, dst + b * table[t].elements) &&
		    bad == STRATA_BLOCK_ALL_FINITE)
			bad = b;
	return bad;
}
