/* random_blocks.c - random finite blocks of every stored weight type for
 * the tests and benches of the stored products (support, layer: base; see
 * random_blocks.h). */
#include "support/random_blocks.h"

uint32_t rb_next(uint32_t *state)
{
	*state = *state * 1664525u + 1013904223u;
	return *state >> 8;
}

/* Byte offsets of each block type's f16 factors (ggml's layouts). */
static const struct {
	strata_block_type t;
	int at[2], count;
} factors[] = {
	{STRATA_BLOCK_Q8_0, {0}, 1},	  {STRATA_BLOCK_Q4_0, {0}, 1},
	{STRATA_BLOCK_Q4_1, {0, 2}, 2},	  {STRATA_BLOCK_Q5_0, {0}, 1},
	{STRATA_BLOCK_Q5_1, {0, 2}, 2},	  {STRATA_BLOCK_Q2_K, {80, 82}, 2},
	{STRATA_BLOCK_Q3_K, {108}, 1},	  {STRATA_BLOCK_Q4_K, {0, 2}, 2},
	{STRATA_BLOCK_Q5_K, {0, 2}, 2},	  {STRATA_BLOCK_Q6_K, {208}, 1},
	{STRATA_BLOCK_IQ4_NL, {0}, 1},	  {STRATA_BLOCK_IQ4_XS, {0}, 1},
};

void rb_fill(strata_block_type t, unsigned char *p, size_t bytes,
	     uint32_t *state)
{
	for (size_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)rb_next(state);
	if (t == STRATA_BLOCK_F16) {
		for (size_t i = 1; i < bytes; i += 2)
			p[i] &= 0xbb;
		return;
	}
	if (t == STRATA_BLOCK_BF16) {
		for (size_t i = 1; i < bytes; i += 2)
			p[i] = (unsigned char)((p[i] & 0x81) | 0x3c);
		return;
	}
	uint32_t bb = strata_block_bytes(t);
	for (size_t f = 0; f < sizeof factors / sizeof *factors; f++)
		if (factors[f].t == t)
			for (size_t b = 0; b < bytes / bb; b++)
				for (int k = 0; k < factors[f].count; k++)
					p[b * bb + factors[f].at[k] + 1] &= 0x3b;
}
