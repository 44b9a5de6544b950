/* quant_finite.c - whether weights in a block format hold NaN or
 * infinities, from the bits of their factors alone: the verdict
 * strata_block_decode gives, without decoding (layer: base).
 *
 * A block type's values are small integers times its f16 factors (and
 * minus a second factor for the types with a min), each finite when the
 * factors are (|d x scale x q| stays far below f32's range), so checking
 * the factors is checking the block. Float types are checked element by
 * element on their exponent bits. */
#include <string.h>

#include "strata/base.h"

/* Byte offsets of the f16 factors in one block of t (ggml's layouts);
 * their count, 0 for the float types. */
static int factors(strata_block_type t, int at[2])
{
	switch (t) {
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_Q4_0:
	case STRATA_BLOCK_Q5_0: case STRATA_BLOCK_IQ4_NL:
	case STRATA_BLOCK_IQ4_XS:
		at[0] = 0;
		return 1;
	case STRATA_BLOCK_Q4_1: case STRATA_BLOCK_Q5_1:
	case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K:
		at[0] = 0, at[1] = 2;
		return 2;
	case STRATA_BLOCK_Q2_K:
		at[0] = 80, at[1] = 82;
		return 2;
	case STRATA_BLOCK_Q3_K:
		at[0] = 108;
		return 1;
	case STRATA_BLOCK_Q6_K:
		at[0] = 208;
		return 1;
	default:
		return 0;
	}
}

static inline unsigned u16_at(const unsigned char *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

uint64_t strata_block_first_nonfinite(strata_block_type t, const void *src,
				      uint64_t elements)
{
	const unsigned char *p = src;
	if ((unsigned)t >= STRATA_BLOCK_COUNT)
		return 0;
	if (t == STRATA_BLOCK_F32) {
		for (uint64_t i = 0; i < elements; i++) {
			uint32_t u;
			memcpy(&u, p + 4 * i, 4);
			if ((u & 0x7f800000u) == 0x7f800000u)
				return i;
		}
		return STRATA_BLOCK_ALL_FINITE;
	}
	if (t == STRATA_BLOCK_F16 || t == STRATA_BLOCK_BF16) {
		unsigned mask = t == STRATA_BLOCK_F16 ? 0x7c00u : 0x7f80u;
		for (uint64_t i = 0; i < elements; i++)
			if ((u16_at(p + 2 * i) & mask) == mask)
				return i;
		return STRATA_BLOCK_ALL_FINITE;
	}
	int at[2];
	int n = factors(t, at);
	uint64_t blocks = elements / strata_block_elements(t);
	uint32_t bb = strata_block_bytes(t);
	for (uint64_t b = 0; b < blocks; b++)
		for (int k = 0; k < n; k++)
			if ((u16_at(p + b * bb + (uint64_t)at[k]) & 0x7c00u) ==
			    0x7c00u)
				return b;
	return STRATA_BLOCK_ALL_FINITE;
}
