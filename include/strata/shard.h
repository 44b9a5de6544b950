/* shard.h - the stream shard allocator that places keyed work on devices,
 * and BLAKE3 hashing through the official C implementation (layer: shard).
 *
 * Seed 000. Each item (key, cost) lands on its home device, the first four
 * bytes of BLAKE3(key) read as a little-endian u32 modulo the device count,
 * unless the home is loaded more than `spill_threshold` above the
 * least-loaded device; then it spills there (ties: lowest index). Loads are
 * taken before the item. docs/shard.md states the semantics in full.
 *
 * An allocator allocates only in strata_shard_create: assigning, seeding and
 * releasing never allocate, and every failed call leaves it exactly as it
 * was. It is not thread-safe; use one per thread or lock around it.
 */
#ifndef STRATA_SHARD_H
#define STRATA_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "strata/base.h"

/* The device reported for a zero-cost item, which goes nowhere. */
#define STRATA_SHARD_NO_DEVICE UINT32_MAX

/* The most devices an allocator takes (2^24). No real machine comes near
 * it; the cap bounds what creation allocates and touches (about 72 bytes
 * per device, 1.1 GiB at the cap), so a mistyped count is an error rather
 * than a machine pushed out of memory. */
#define STRATA_SHARD_MAX_DEVICES (1u << 24)

/* ------------------------------------------------------------------------ */
/* Hashing                                                                  */
/* ------------------------------------------------------------------------ */

/* BLAKE3 (default hash mode) of `bytes` bytes at data, written as out_bytes
 * bytes of extended output (32 is the standard digest). Never fails. */
void strata_shard_hash(const void *data, size_t bytes, uint8_t *out,
		       size_t out_bytes);

/* The home device of a key: the first 4 bytes of BLAKE3(key) as a
 * little-endian u32, modulo device_count. A device count of 0 is
 * E_SHARD_ZERO_DEVICES (a configuration error, never "device 0"). */
strata_status strata_shard_home(const void *key, size_t key_bytes,
				uint32_t device_count, uint32_t *device,
				strata_error *err);

/* ------------------------------------------------------------------------ */
/* The allocator                                                            */
/* ------------------------------------------------------------------------ */

typedef struct strata_shard strata_shard;

/* Per-device statistics. Loads are in the caller's cost units. */
typedef struct strata_shard_device_stats {
	uint64_t load;	       /* now: seeded + assigned - released */
	uint64_t seeded_load;  /* total added by strata_shard_seed_load */
	uint64_t released_load; /* total removed by strata_shard_release */
	uint64_t items;	       /* items placed here, home or spilled in */
	uint64_t spilled_in;   /* items placed here whose home was another */
	uint64_t spilled_away; /* items whose home was here, placed elsewhere */
} strata_shard_device_stats;

/* Allocator-wide statistics. Counters saturate at 2^64-1, never wrap. */
typedef struct strata_shard_stats {
	uint32_t device_count;
	uint64_t spill_threshold;
	uint64_t items;	      /* items of non-zero cost placed */
	uint64_t home_hits;   /* ... of which on their home device */
	uint64_t spills;      /* ... of which spilled (items - home_hits) */
	uint64_t releases;    /* successful strata_shard_release calls */
	uint64_t largest_cost; /* the largest single item cost placed */
	uint64_t min_load;    /* now */
	uint64_t max_load;    /* now */
	uint64_t largest_gap; /* largest max - min after any change so far */
} strata_shard_stats;

/* Creates an allocator for device_count devices (all loads 0) that spills
 * an item when its home is loaded more than spill_threshold above the least
 * loaded device. *out is the caller's, freed with strata_shard_destroy.
 * Errors: E_SHARD_ZERO_DEVICES, E_SHARD_DEVICE_RANGE above
 * STRATA_SHARD_MAX_DEVICES, E_NOMEM (nothing allocated survives). */
strata_status strata_shard_create(uint32_t device_count,
				  uint64_t spill_threshold, strata_shard **out,
				  strata_error *err);

/* Frees the allocator; NULL is fine. */
void strata_shard_destroy(strata_shard *s);

/* Adds pre-existing load (work already queued) to a device. Errors:
 * E_SHARD_DEVICE_RANGE, E_SHARD_LOAD_OVERFLOW; either leaves s unchanged. */
strata_status strata_shard_seed_load(strata_shard *s, uint32_t device,
				     uint64_t cost, strata_error *err);

/* Places one item. *device receives the chosen device, or
 * STRATA_SHARD_NO_DEVICE for cost 0, which changes nothing at all (not even
 * statistics). The chosen device's load grows by cost. Error:
 * E_SHARD_LOAD_OVERFLOW (s unchanged, *device untouched). */
strata_status strata_shard_assign(strata_shard *s, const void *key,
				  size_t key_bytes, uint64_t cost,
				  uint32_t *device, strata_error *err);

/* As strata_shard_assign for a caller that already knows the item's home
 * device (from strata_shard_home with the same device count). A home out
 * of range is E_SHARD_DEVICE_RANGE. */
strata_status strata_shard_assign_home(strata_shard *s, uint32_t home,
				       uint64_t cost, uint32_t *device,
				       strata_error *err);

/* One item of a batch: key and cost in, the chosen device out (what
 * strata_shard_assign writes to *device). */
typedef struct strata_shard_item {
	const void *key;
	size_t key_bytes;
	uint64_t cost;
	uint32_t device;
} strata_shard_item;

/* Places items[0..count) in order exactly as count calls of
 * strata_shard_assign would: the same devices, loads and statistics. It
 * is faster per item (bench/shard): it hashes a few keys back to back
 * before placing them, which the CPU overlaps better than one call at a
 * time, where each item's placement sits between two hashes.
 * *placed (may be NULL) receives the number of items placed: count on
 * success. On E_SHARD_LOAD_OVERFLOW it is the index of the item that
 * failed; s is as after the calls for the items before it, and the failed
 * item and those after it have their .device untouched. */
strata_status strata_shard_assign_batch(strata_shard *s,
					strata_shard_item *items, size_t count,
					size_t *placed, strata_error *err);

/* In-flight mode: work of `cost` finished on `device`, so its load drops by
 * cost. Errors: E_SHARD_DEVICE_RANGE, E_SHARD_RELEASE when cost exceeds the
 * device's load (s unchanged). */
strata_status strata_shard_release(strata_shard *s, uint32_t device,
				   uint64_t cost, strata_error *err);

uint32_t strata_shard_device_count(const strata_shard *s);

/* The current loads, indexed by device; owned by s and valid until the next
 * call that changes it or strata_shard_destroy. */
const uint64_t *strata_shard_loads(const strata_shard *s);

/* Fills *out with the allocator-wide statistics. */
void strata_shard_get_stats(const strata_shard *s, strata_shard_stats *out);

/* Fills *out for one device; E_SHARD_DEVICE_RANGE for a bad index. */
strata_status strata_shard_get_device_stats(const strata_shard *s,
					    uint32_t device,
					    strata_shard_device_stats *out,
					    strata_error *err);

/* Entries in a least-loaded heap (diagnostics for the seed's bound of
 * max(4n, 8)): always 0, since the allocator keeps cached indexes of the
 * least-loaded device overall and per group of devices instead
 * (src/shard/allocator.c says why). */
size_t strata_shard_heap_entries(const strata_shard *s);

/* ------------------------------------------------------------------------ */
/* The `strata shard` input format                                          */
/* ------------------------------------------------------------------------ */

/* Splits one input line (without its '\n'; a trailing '\r' is dropped) of
 * the form KEY<TAB>COST: KEY is every byte before the last tab (it may hold
 * spaces, tabs and any other byte), COST a decimal u64 with digits only.
 * On success *key_bytes is the key's length (the key starts at line) and
 * *cost its cost. Malformed lines are E_SHARD_INPUT naming line_number.
 * The line is untrusted: any bytes are safe to pass. */
strata_status strata_shard_parse_line(const char *line, size_t len,
				      uint64_t line_number, size_t *key_bytes,
				      uint64_t *cost, strata_error *err);

#endif
