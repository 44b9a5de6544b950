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

#include "base/quant_internal.h"
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

/* Every level's answer on p, which must be level 0's (the scalar scan,
 * checked against the decoder above); returns it. */
static uint64_t all_levels(strata_block_type t, const unsigned char *p,
			   uint64_t elements)
{
	strata__finite_set_level(0);
	uint64_t want = strata_block_first_nonfinite(t, p, elements);
	for (int l = 1; l <= 2; l++) {
		if (strata__finite_set_level(l) != l)
			continue; /* this processor lacks it */
		uint64_t got = strata_block_first_nonfinite(t, p, elements);
		if (got != want)
			fail_msg("%s, %llu elements, level %d: %llu, scalar %llu",
				 strata_block_name(t),
				 (unsigned long long)elements, l,
				 (unsigned long long)got,
				 (unsigned long long)want);
	}
	strata__finite_set_level(-1);
	return want;
}

/* Writes the 16-bit word v at unit u, byte `at` of it, keeping the rest. */
static void put16(unsigned char *p, uint32_t bb, uint64_t u, uint32_t at,
		  unsigned v)
{
	p[u * bb + at] = (unsigned char)v;
	p[u * bb + at + 1] = (unsigned char)(v >> 8);
}

/* The vector kernels (AVX2, AVX-512BW) give the scalar scan's index on
 * every type, for lengths around their vector widths, chunk sizes and
 * tails, with the bad value first, last, at a chunk's edge, signed or
 * not, after an earlier one, and never flag the largest finite value. */
static void every_kernel_level_gives_the_scalar_index(void **state)
{
	(void)state;
	static const uint64_t lengths[] = {1, 7, 15, 16, 17, 31, 63, 64, 65,
					   127, 129, 255, 481, 482, 963,
					   4095, 4097, 8191, 8193, 20011};
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		strata_block_type bt = (strata_block_type)t;
		uint32_t bb = strata_block_bytes(bt), be = strata_block_elements(bt);
		bool fl = be == 1;
		/* the word that makes a unit non-finite: its high word for
		 * f32, itself for f16/bf16, a factor for a block (found by the
		 * scalar scan below) */
		unsigned inf = bt == STRATA_BLOCK_BF16 || bt == STRATA_BLOCK_F32
				       ? 0x7f80u : 0x7c00u;
		unsigned big = inf - 1 - (bt == STRATA_BLOCK_F32 ? 0x7f : 0);
		for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
			uint64_t units = lengths[k];
			size_t bytes = (size_t)(units * bb);
			unsigned char *p = malloc(bytes);
			assert_non_null(p);
			finite_random(p, bytes);
			uint64_t n = units * be;
			uint32_t hi = bt == STRATA_BLOCK_F32 ? 2 : 0;
			assert_true(all_levels(bt, p, n) == STRATA_BLOCK_ALL_FINITE);
			/* a block's factor: the first word pair that flags */
			uint32_t at = hi;
			for (; !fl && at + 1 < bb; at += 2) {
				unsigned char keep[2];
				memcpy(keep, p + at, 2);
				put16(p, bb, 0, at, inf);
				bool flags = all_levels(bt, p, n) == 0;
				memcpy(p + at, keep, 2);
				if (flags)
					break;
			}
			assert_true(at + 1 < bb);
			uint64_t pos[] = {0, units / 2, units - 1, 480 % units,
					  4096 % units, 8192 % units};
			for (size_t j = 0; j < sizeof pos / sizeof *pos; j++) {
				unsigned char keep[2];
				uint64_t u = pos[j];
				memcpy(keep, p + u * bb + at, 2);
				put16(p, bb, u, at, big | 0x8000u);
				assert_true(all_levels(bt, p, n) == STRATA_BLOCK_ALL_FINITE);
				put16(p, bb, u, at, inf | 0x8000u); /* -inf */
				assert_true(all_levels(bt, p, n) == u);
				put16(p, bb, u, at, inf | 1u);	/* NaN */
				assert_true(all_levels(bt, p, n) == u);
				if (u + 1 < units) { /* a later one too */
					unsigned char k2[2];
					memcpy(k2, p + (u + 1) * bb + at, 2);
					put16(p, bb, u + 1, at, inf);
					assert_true(all_levels(bt, p, n) == u);
					memcpy(p + (u + 1) * bb + at, k2, 2);
				}
				memcpy(p + u * bb + at, keep, 2);
			}
			free(p);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_format_agrees_with_the_decoder),
		cmocka_unit_test(every_kernel_level_gives_the_scalar_index),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
