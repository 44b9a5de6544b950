/* internal.h - cross-file internals of the shard layer (layer: shard). */
#ifndef STRATA_SHARD_INTERNAL_H
#define STRATA_SHARD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The first 4 bytes of BLAKE3(key) as a little-endian u32 (hash.c). */
uint32_t strata__shard_hash_word(const void *key, size_t key_bytes);

/* x mod d for 32-bit x and d >= 1 by one multiply instead of a division,
 * with m = strata__fastmod_magic(d) (Lemire, Kaser and Kurz, "Faster
 * remainder by direct computation", 2019: exact for all 32-bit x and d).
 * For d = 1 the magic wraps to 0, which gives the right answer 0. */
static inline uint64_t strata__fastmod_magic(uint32_t d)
{
	return UINT64_MAX / d + 1;
}

static inline uint32_t strata__fastmod(uint32_t x, uint64_t m, uint32_t d)
{
	uint64_t low = m * x;
	return (uint32_t)(((unsigned __int128)low * d) >> 64);
}

#endif
