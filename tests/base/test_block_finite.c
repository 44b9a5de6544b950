/* test_block_finite.c - strata_block_first_nonfinite gives
 * strata_block_decode's verdict on every block format: all finite on
 * random finite blocks, and the index of the first block whose factor (or,
 * for the float types, element) is NaN or infinite, from the factor bits
 * alone (layer: base). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/base.h"

#define BLOCKS 24

static uint32_t rng = 4242;
static unsigned char rbyte(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (unsigned char)(rng >> 24);
}

/* Random bytes with every 16-bit word's exponent kept low: finite f16
 * factors and f16/bf16 elements, f32 elements (whose high word it is). */
static void finite_random(unsigned char *p, size_t bytes)
{
	for (size_t i = 0; i < bytes; i++)
		p[i] = rbyte();
	for (size_t i = 1; i < bytes; i += 2)
		p[i] &= 0x3b;
}

static uint64_t decode_verdict(strata_block_type t, const unsigned char *p,
			       uint64_t elements)
{
	float *y = malloc(elements * sizeof *y);
	assert_non_null(y);
	uint64_t v = strata_block_decode(t, p, y, elements);
	free(y);
	return v;
}

static void every_format_agrees_with_the_decoder(void **state)
{
	(void)state;
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		strata_block_type bt = (strata_block_type)t;
		uint64_t elements = (uint64_t)BLOCKS * strata_block_elements(bt);
		size_t bytes = (size_t)BLOCKS * strata_block_bytes(bt);
		unsigned char *p = malloc(bytes);
		assert_non_null(p);
		finite_random(p, bytes);
		assert_true(strata_block_first_nonfinite(bt, p, elements) ==
			    STRATA_BLOCK_ALL_FINITE);
		assert_true(decode_verdict(bt, p, elements) ==
			    STRATA_BLOCK_ALL_FINITE);
		/* each byte pair of block 17 set to infinity, then NaN, in
		 * turn: whatever the decoder says, the scan says too */
		uint32_t bb = strata_block_bytes(bt);
		int flagged = 0;
		for (uint32_t at = 0; at + 1 < bb; at += 2) {
			for (int nan = 0; nan < 2; nan++) {
				unsigned char keep[4];
				unsigned char *q = p + 17 * (size_t)bb + at;
				memcpy(keep, q, 2);
				/* f16 inf/NaN bits; for bf16 and f32 (high
				 * word) the same bits are inf/NaN too */
				q[0] = nan ? 0x01 : 0x00;
				q[1] = bt == STRATA_BLOCK_F16 ? 0x7c : 0x7f;
				if (bt == STRATA_BLOCK_BF16 || bt == STRATA_BLOCK_F32)
					q[0] = (unsigned char)(0x80 | nan);
				uint64_t want = decode_verdict(bt, p, elements);
				uint64_t got = strata_block_first_nonfinite(
					bt, p, elements);
				if (want != got)
					fail_msg("%s: byte %u of block 17: decoder "
						 "%llu, scan %llu",
						 strata_block_name(bt), at,
						 (unsigned long long)want,
						 (unsigned long long)got);
				flagged += want != STRATA_BLOCK_ALL_FINITE;
				memcpy(q, keep, 2);
			}
		}
		assert_true(flagged > 0); /* some word is a factor */
		free(p);
	}
	assert_true(strata_block_first_nonfinite(STRATA_BLOCK_COUNT, "", 0) ==
		    0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_format_agrees_with_the_decoder),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
