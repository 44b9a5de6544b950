/* random_blocks.h - random bytes of a stored weight type whose every value
 * decodes finite, for the tests and benches of the stored products
 * (support for every test folder and bench/, layer: base). */
#ifndef STRATA_TESTS_SUPPORT_RANDOM_BLOCKS_H
#define STRATA_TESTS_SUPPORT_RANDOM_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "strata/base.h"

/* The next of a linear congruential sequence kept in *state: 24 bits. */
uint32_t rb_next(uint32_t *state);

/* Fills `bytes` bytes (whole blocks of t) at p from *state: random codes,
 * every f16 factor (and every F16 / BF16 element) finite and small, its
 * exponent kept low. */
void rb_fill(strata_block_type t, unsigned char *p, size_t bytes,
	     uint32_t *state);

#endif
