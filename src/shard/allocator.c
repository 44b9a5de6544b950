/* allocator.c - the stream shard allocator of seed 000: home device by
 * BLAKE3, spill to the least-loaded device past a threshold (layer: shard).
 *
 * Least-loaded selection. The seed keeps a heap that gets one pushed entry
 * per load change, pops stale entries lazily and rebuilds itself once it
 * passes max(4n, 8) entries. This file uses two structures with the same
 * answer (minimum load, then lowest index; tests/shard compares every
 * choice with a linear scan) chosen by device count, from bench/shard:
 *   n <= SCAN_MAX: a scan of the n loads (one or two cache lines, no
 *     sifting). The allocator path runs 1.2-1.3x as fast as with the
 *     indexed heap below at n = 2 and 8, and as fast as the seed's heap.
 *   n >  SCAN_MAX: an indexed binary min-heap ordered by (load, device),
 *     with a position map: exactly n entries, the least-loaded device at
 *     the root, and a load change re-sifts that one entry in O(log n).
 *     At n = 64 it runs the allocator path 1.5x as fast as the seed's lazy
 *     heap (no stale pops, n rather than up to 4n entries) and 2x as fast
 *     as scanning with the statistics kept here, and it has no rebuild
 *     step that could fail or stall.
 * All memory is taken in strata_shard_create; nothing after it allocates.
 */
#include <inttypes.h>
#include <string.h>

#include "shard/internal.h"
#include "strata/shard.h"

struct strata_shard {
	uint32_t n;
	uint64_t mod_magic; /* strata__fastmod_magic(n): home without a divide */
	uint64_t threshold;
	uint64_t *load;		       /* (n) current load per device */
	uint32_t *heap;		       /* (n) device ids, min-heap by (load, id) */
	uint32_t *pos;		       /* (n) index of each device in heap */
	strata_shard_device_stats *dev; /* (n) statistics; .load unused */
	uint64_t max_load;
	uint64_t largest_gap;
	uint64_t largest_cost;
	uint64_t items, home_hits, spills, releases;
};

/* Up to this many devices a scan beats the heap (bench/shard). */
#define SCAN_MAX 16

#define OVERFLOW_FIX                                                           \
	"loads are summed per device in 64 bits: split the stream or use "     \
	"smaller cost units"

/* ------------------------------------------------------------------------ */
/* The indexed heap                                                         */
/* ------------------------------------------------------------------------ */

static inline bool lighter(const strata_shard *s, uint32_t a, uint32_t b)
{
	return s->load[a] < s->load[b] || (s->load[a] == s->load[b] && a < b);
}

static inline void place(strata_shard *s, uint32_t i, uint32_t device)
{
	s->heap[i] = device;
	s->pos[device] = i;
}

/* After a device's load grew: move it towards the leaves. */
static void sift_down(strata_shard *s, uint32_t i)
{
	uint32_t d = s->heap[i];
	for (;;) {
		uint64_t l = 2 * (uint64_t)i + 1;
		if (l >= s->n)
			break;
		uint32_t c = (uint32_t)l;
		if (c + 1 < s->n && lighter(s, s->heap[c + 1], s->heap[c]))
			c++;
		if (!lighter(s, s->heap[c], d))
			break;
		place(s, i, s->heap[c]);
		i = c;
	}
	place(s, i, d);
}

/* After a device's load shrank: move it towards the root. */
static void sift_up(strata_shard *s, uint32_t i)
{
	uint32_t d = s->heap[i];
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (!lighter(s, d, s->heap[p]))
			break;
		place(s, i, s->heap[p]);
		i = p;
	}
	place(s, i, d);
}

/* The least-loaded device, ties to the lowest index. */
static inline uint32_t least_device(const strata_shard *s)
{
	if (s->n > SCAN_MAX)
		return s->heap[0];
	uint32_t best = 0;
	for (uint32_t d = 1; d < s->n; d++)
		if (s->load[d] < s->load[best])
			best = d;
	return best;
}

/* As least_device, also giving the least load among the other devices
 * (UINT64_MAX for one device), so that after the least device grows the
 * new least load is known without a second pass. */
static inline uint32_t least_two(const strata_shard *s, uint64_t *second)
{
	*second = UINT64_MAX;
	if (s->n > SCAN_MAX)
		return s->heap[0];
	uint32_t best = 0;
	for (uint32_t d = 1; d < s->n; d++) {
		uint64_t l = s->load[d];
		if (l < s->load[best]) {
			*second = s->load[best];
			best = d;
		} else if (l < *second) {
			*second = l;
		}
	}
	return best;
}

/* After device's load changed: restore the heap order (heap mode only). */
static inline void reposition(strata_shard *s, uint32_t device, bool grew)
{
	if (s->n <= SCAN_MAX)
		return;
	if (grew)
		sift_down(s, s->pos[device]);
	else
		sift_up(s, s->pos[device]);
}

/* Called after every change with the least load now: the widest spread
 * of loads ever seen. */
static void note_gap(strata_shard *s, uint64_t min_load)
{
	uint64_t gap = s->max_load - min_load;
	if (gap > s->largest_gap)
		s->largest_gap = gap;
}

static strata_status range_error(const strata_shard *s, uint32_t device,
				 const char *what, strata_error *err)
{
	return strata_fail(err, STRATA_E_SHARD_DEVICE_RANGE,
			   "use a device index from 0 to the device count - 1",
			   "%s: device %" PRIu32
			   " is out of range (the allocator has %" PRIu32
			   " devices, 0 to %" PRIu32 ")",
			   what, device, s->n, s->n - 1);
}

/* ------------------------------------------------------------------------ */
/* Public functions                                                         */
/* ------------------------------------------------------------------------ */

strata_status strata_shard_create(uint32_t device_count,
				  uint64_t spill_threshold, strata_shard **out,
				  strata_error *err)
{
	if (device_count == 0)
		return strata_fail(err, STRATA_E_SHARD_ZERO_DEVICES,
				   "give at least one device (probe the devices first; --gpus N needs N >= 1)",
				   "no devices to shard onto: the device count is 0");
	if (device_count > STRATA_SHARD_MAX_DEVICES)
		return strata_fail(err, STRATA_E_SHARD_DEVICE_RANGE,
				   "give the real device count (at most 16777216)",
				   "%" PRIu32 " devices is more than the %u an allocator takes",
				   device_count, STRATA_SHARD_MAX_DEVICES);
	strata_shard *s = strata_calloc_or_error(1, sizeof *s,
						 "the shard allocator", err);
	if (!s)
		return STRATA_E_NOMEM;
	s->n = device_count;
	s->mod_magic = strata__fastmod_magic(device_count);
	s->threshold = spill_threshold;
	s->load = strata_calloc(device_count, sizeof *s->load);
	s->heap = strata_calloc(device_count, sizeof *s->heap);
	s->pos = strata_calloc(device_count, sizeof *s->pos);
	s->dev = strata_calloc(device_count, sizeof *s->dev);
	if (!s->load || !s->heap || !s->pos || !s->dev) {
		strata_shard_destroy(s);
		return strata_fail(err, STRATA_E_NOMEM,
				   "use fewer devices or free host memory",
				   "cannot allocate the shard allocator's state for %" PRIu32
				   " devices (%zu bytes per device)",
				   device_count,
				   sizeof(uint64_t) + 2 * sizeof(uint32_t) +
					   sizeof(strata_shard_device_stats));
	}
	/* All loads 0: identity order is already a valid heap. */
	for (uint32_t d = 0; d < device_count; d++)
		place(s, d, d);
	*out = s;
	return STRATA_OK;
}

void strata_shard_destroy(strata_shard *s)
{
	if (!s)
		return;
	strata_free(s->load);
	strata_free(s->heap);
	strata_free(s->pos);
	strata_free(s->dev);
	strata_free(s);
}

strata_status strata_shard_seed_load(strata_shard *s, uint32_t device,
				     uint64_t cost, strata_error *err)
{
	if (device >= s->n)
		return range_error(s, device, "seed load", err);
	uint64_t next;
	if (!strata_add_u64(s->load[device], cost, &next))
		return strata_fail(err, STRATA_E_SHARD_LOAD_OVERFLOW, OVERFLOW_FIX,
				   "seed load: device %" PRIu32 " load overflowed: %" PRIu64
				   " + %" PRIu64 " exceeds 2^64-1",
				   device, s->load[device], cost);
	/* Everything checked; commit. */
	s->load[device] = next;
	s->dev[device].seeded_load =
		strata_sat_add_u64(s->dev[device].seeded_load, cost);
	reposition(s, device, true);
	if (next > s->max_load)
		s->max_load = next;
	note_gap(s, s->load[least_device(s)]);
	return STRATA_OK;
}

strata_status strata_shard_assign_home(strata_shard *s, uint32_t home,
				       uint64_t cost, uint32_t *device,
				       strata_error *err)
{
	if (home >= s->n)
		return range_error(s, home, "assign", err);
	if (cost == 0) { /* seed 000: no device, no state change */
		*device = STRATA_SHARD_NO_DEVICE;
		return STRATA_OK;
	}
	/* seed 000: spill exactly when home_load > min_load and
	 * home_load - min_load > T, loads taken before this item. */
	uint64_t second;
	uint32_t least = least_two(s, &second);
	uint64_t home_load = s->load[home], min_load = s->load[least];
	uint32_t target = home;
	if (home_load > min_load && home_load - min_load > s->threshold)
		target = least;
	uint64_t next;
	if (!strata_add_u64(s->load[target], cost, &next))
		return strata_fail(err, STRATA_E_SHARD_LOAD_OVERFLOW, OVERFLOW_FIX,
				   "assign: device %" PRIu32 " load overflowed: %" PRIu64
				   " + %" PRIu64 " exceeds 2^64-1",
				   target, s->load[target], cost);
	/* Everything checked; commit. */
	s->load[target] = next;
	reposition(s, target, true);
	if (next > s->max_load)
		s->max_load = next;
	if (cost > s->largest_cost)
		s->largest_cost = cost;
	s->items = strata_sat_add_u64(s->items, 1);
	strata_shard_device_stats *t = &s->dev[target];
	t->items = strata_sat_add_u64(t->items, 1);
	if (target == home) {
		s->home_hits = strata_sat_add_u64(s->home_hits, 1);
	} else {
		s->spills = strata_sat_add_u64(s->spills, 1);
		t->spilled_in = strata_sat_add_u64(t->spilled_in, 1);
		s->dev[home].spilled_away =
			strata_sat_add_u64(s->dev[home].spilled_away, 1);
	}
	/* Only the target grew: the least load moved only if it was the
	 * target (always so for a spill), to the target's new load or the
	 * next-least load, whichever is smaller (the heap knows directly). */
	uint64_t now_min = min_load;
	if (target == least)
		now_min = s->n > SCAN_MAX ? s->load[s->heap[0]]
					  : (next < second ? next : second);
	note_gap(s, now_min);
	*device = target;
	return STRATA_OK;
}

strata_status strata_shard_assign(strata_shard *s, const void *key,
				  size_t key_bytes, uint64_t cost,
				  uint32_t *device, strata_error *err)
{
	if (cost == 0) { /* no hashing needed for an item that goes nowhere */
		*device = STRATA_SHARD_NO_DEVICE;
		return STRATA_OK;
	}
	/* Same home as strata_shard_home (tests/shard checks it), with the
	 * modulo by multiplication: a divide is a fifth of an assignment. */
	uint32_t home = strata__fastmod(strata__shard_hash_word(key, key_bytes),
					s->mod_magic, s->n);
	return strata_shard_assign_home(s, home, cost, device, err);
}

strata_status strata_shard_release(strata_shard *s, uint32_t device,
				   uint64_t cost, strata_error *err)
{
	if (device >= s->n)
		return range_error(s, device, "release", err);
	uint64_t old = s->load[device];
	if (cost > old)
		return strata_fail(err, STRATA_E_SHARD_RELEASE,
				   "release only work that was assigned or seeded on that device",
				   "release: device %" PRIu32 " holds load %" PRIu64
				   ", less than the %" PRIu64 " released",
				   device, old, cost);
	/* Everything checked; commit. */
	s->load[device] = old - cost;
	s->dev[device].released_load =
		strata_sat_add_u64(s->dev[device].released_load, cost);
	s->releases = strata_sat_add_u64(s->releases, 1);
	reposition(s, device, false);
	if (cost > 0 && old == s->max_load) {
		/* The heaviest device got lighter: rescan (O(n)). Releases are
		 * rare next to assignments, and a second heap for the maximum
		 * would cost every assignment a second sift. */
		uint64_t m = 0;
		for (uint32_t d = 0; d < s->n; d++)
			if (s->load[d] > m)
				m = s->load[d];
		s->max_load = m;
	}
	note_gap(s, s->load[least_device(s)]);
	return STRATA_OK;
}

uint32_t strata_shard_device_count(const strata_shard *s)
{
	return s->n;
}

const uint64_t *strata_shard_loads(const strata_shard *s)
{
	return s->load;
}

void strata_shard_get_stats(const strata_shard *s, strata_shard_stats *out)
{
	memset(out, 0, sizeof *out);
	out->device_count = s->n;
	out->spill_threshold = s->threshold;
	out->items = s->items;
	out->home_hits = s->home_hits;
	out->spills = s->spills;
	out->releases = s->releases;
	out->largest_cost = s->largest_cost;
	out->min_load = s->load[least_device(s)];
	out->max_load = s->max_load;
	out->largest_gap = s->largest_gap;
}

strata_status strata_shard_get_device_stats(const strata_shard *s,
					    uint32_t device,
					    strata_shard_device_stats *out,
					    strata_error *err)
{
	if (device >= s->n)
		return range_error(s, device, "device statistics", err);
	*out = s->dev[device];
	out->load = s->load[device];
	return STRATA_OK;
}

size_t strata_shard_heap_entries(const strata_shard *s)
{
	return s->n > SCAN_MAX ? s->n : 0;
}
