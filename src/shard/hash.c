/* hash.c - BLAKE3 through the official C implementation, and the home
 * device of a key (layer: shard). */
#include <string.h>

#include "blake3.h"
#include "blake3_impl.h" /* the implementation's own compression entry */

#include "shard/internal.h"
#include "strata/shard.h"

/* ------------------------------------------------------------------------ */

/* The first 4 bytes of BLAKE3(key) for a key of at most one block (64
 * bytes), the common case of the allocator. It makes the same single call
 * that blake3_hasher_finalize makes for such an input: the official
 * implementation's compress (with its SIMD dispatch) over the zero-padded
 * block, key = IV, counter 0, flags CHUNK_START | CHUNK_END | ROOT. It
 * skips the hasher's state set-up and copies, about a third of the time
 * for 16-byte keys (bench/shard). tests/shard/test_blake3.c checks it
 * against blake3_hasher for every length 0..64. */
static uint32_t first_word_one_block(const void *key, size_t key_bytes)
{
	uint8_t block[BLAKE3_BLOCK_LEN] = {0};
	uint8_t out[BLAKE3_BLOCK_LEN];
	memcpy(block, key, key_bytes);
	blake3_compress_xof(IV, block, (uint8_t)key_bytes, 0,
			    CHUNK_START | CHUNK_END | ROOT, out);
	return (uint32_t)out[0] | (uint32_t)out[1] << 8 |
	       (uint32_t)out[2] << 16 | (uint32_t)out[3] << 24;
}

/* ------------------------------------------------------------------------ */

void strata_shard_hash(const void *data, size_t bytes, uint8_t *out,
		       size_t out_bytes)
{
	blake3_hasher h;
	blake3_hasher_init(&h);
	blake3_hasher_update(&h, data, bytes);
	blake3_hasher_finalize(&h, out, out_bytes);
}

strata_status strata_shard_home(const void *key, size_t key_bytes,
				uint32_t device_count, uint32_t *device,
				strata_error *err)
{
	/* seed 000: zero devices is a configuration error, never device 0. */
	if (device_count == 0)
		return strata_fail(err, STRATA_E_SHARD_ZERO_DEVICES,
				   "give at least one device (probe the devices first; --gpus N needs N >= 1)",
				   "no devices to shard onto: the device count is 0");
	*device = strata__shard_hash_word(key, key_bytes) % device_count;
	return STRATA_OK;
}

uint32_t strata__shard_hash_word(const void *key, size_t key_bytes)
{
	if (key_bytes <= BLAKE3_BLOCK_LEN)
		return first_word_one_block(key, key_bytes);
	uint8_t d[4];
	strata_shard_hash(key, key_bytes, d, sizeof d);
	/* Little-endian on every host, spelled out. */
	return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 |
	       (uint32_t)d[3] << 24;
}
