/* hash.c - BLAKE3 through the official C implementation, and the home
 * device of a key (layer: shard). */
#include "blake3.h"

#include "strata/shard.h"

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
	uint8_t d[4];
	strata_shard_hash(key, key_bytes, d, sizeof d);
	/* Little-endian on every host, spelled out rather than memcpy'd. */
	uint32_t h = (uint32_t)d[0] | (uint32_t)d[1] << 8 |
		     (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
	*device = h % device_count;
	return STRATA_OK;
}
