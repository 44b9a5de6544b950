/* quant.c - decoding any type strata computes with to f32: the float types
 * element by element, the block types through their per-family decoders
 * (quant_legacy.c, quant_kquants.c); a non-finite value or scale is
 * reported by block so the caller can name the tensor (layer: checkpoint). */
#include <math.h>
#include <string.h>

#include "checkpoint/quant.h"

typedef bool (*block_fn)(const unsigned char *b, float *y);

/* The block decoder of t, NULL for the float types and unsupported ones. */
static block_fn block_decoder(strata_dtype t)
{
	switch (t) {
	case STRATA_DTYPE_Q4_0: return strata__dq_q4_0;
	case STRATA_DTYPE_Q4_1: return strata__dq_q4_1;
	case STRATA_DTYPE_Q5_0: return strata__dq_q5_0;
	case STRATA_DTYPE_Q5_1: return strata__dq_q5_1;
	case STRATA_DTYPE_Q8_0: return strata__dq_q8_0;
	case STRATA_DTYPE_IQ4_NL: return strata__dq_iq4_nl;
	case STRATA_DTYPE_Q2_K: return strata__dq_q2_k;
	case STRATA_DTYPE_Q3_K: return strata__dq_q3_k;
	case STRATA_DTYPE_Q4_K: return strata__dq_q4_k;
	case STRATA_DTYPE_Q5_K: return strata__dq_q5_k;
	case STRATA_DTYPE_Q6_K: return strata__dq_q6_k;
	case STRATA_DTYPE_IQ4_XS: return strata__dq_iq4_xs;
	default: return NULL;
	}
}

bool strata__quant_supported(strata_dtype t)
{
	return t == STRATA_DTYPE_F32 || t == STRATA_DTYPE_F16 ||
	       t == STRATA_DTYPE_BF16 || block_decoder(t) != NULL;
}

/* The float types: one element per block; returns the first non-finite
 * element's index. */
static uint64_t float_decode(strata_dtype t, const unsigned char *p,
			     float *dst, uint64_t n)
{
	uint64_t bad = STRATA_QUANT_ALL_FINITE;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t bits;
		if (t == STRATA_DTYPE_F32) {
			bits = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
			       (uint32_t)p[4 * i + 2] << 16 |
			       (uint32_t)p[4 * i + 3] << 24;
			memcpy(&dst[i], &bits, sizeof bits);
		} else if (t == STRATA_DTYPE_F16) {
			dst[i] = strata__load_f16(p + 2 * i);
		} else {
			bits = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16;
			memcpy(&dst[i], &bits, sizeof bits);
		}
		if (!isfinite(dst[i]) && bad == STRATA_QUANT_ALL_FINITE)
			bad = i;
	}
	return bad;
}

uint64_t strata__quant_dequant(strata_dtype t, const void *src, float *dst,
			       uint64_t elements)
{
	if (!strata__quant_supported(t))
		return 0;
	const unsigned char *p = src;
	block_fn fn = block_decoder(t);
	if (!fn)
		return float_decode(t, p, dst, elements);
	const strata_dtype_info *info = strata_dtype_get(t);
	uint64_t blocks = elements / info->block_elements;
	uint64_t bad = STRATA_QUANT_ALL_FINITE;
	for (uint64_t b = 0; b < blocks; b++)
		if (!fn(p + b * info->block_bytes,
			dst + b * info->block_elements) &&
		    bad == STRATA_QUANT_ALL_FINITE)
			bad = b;
	return bad;
}
