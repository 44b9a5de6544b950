/* allocator.c - the stream shard allocator of seed 000: home device by
 * BLAKE3, spill to the least-loaded device past a threshold (layer: shard).
 *
 * Least-loaded selection. The seed keeps a heap that gets one pushed entry
 * per load change, pops stale entries lazily and rebuilds itself once it
 * passes max(4n, 8) entries. Here the devices are split into groups of
 * about sqrt(n) (at least 8) and two kinds of index are cached: each
 * group's least-loaded device and the least-loaded device overall (lowest
 * index among equals). A device that grows can only move its group's least
 * if it was that device, and the overall least only if it was that one;
 * only then are its group (sqrt n loads) and the groups' least devices
 * (n / sqrt n) scanned. A device that shrinks is compared with both cached
 * ones. Most assignments stay home and cost no scan, and a spill costs
 * 16 compares at n = 64 where one scan of all loads cost 64.
 * tests/shard compares every choice with a linear scan.
 * Measured with bench/shard (allocator path alone, 16-byte keys): 70 / 60 /
 * 52 M assignments/s at n = 2 / 8 / 64, against 65 / 51 / 36 for one cached
 * index with a full scan, 68 / 41 / 24 for an indexed heap and 66 / 27 / 16
 * for the seed's lazy heap.
 * There is no heap to grow, compact or rebuild.
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
	uint32_t least;		       /* least-loaded device, lowest index */
	uint32_t group_shift;	       /* devices per group: 1 << group_shift */
	uint32_t groups;
	uint32_t *group_least;	       /* (groups) least device of each group */
	strata_shard_device_stats *dev; /* (n) statistics; .load unused */
	uint64_t max_load;
	uint64_t largest_gap;
	uint64_t largest_cost;
	uint64_t items, home_hits, spills, releases;
};


#define OVERFLOW_FIX                                                           \
	"loads are summed per device in 64 bits: split the stream or use "     \
	"smaller cost units"

/* ------------------------------------------------------------------------ */
/* The least-loaded device                                                  */
/* ------------------------------------------------------------------------ */

/* Is device a before device b in least-loaded order (load, then index)? */
static inline bool lighter(const strata_shard *s, uint32_t a, uint32_t b)
{
	return s->load[a] < s->load[b] || (s->load[a] == s->load[b] && a < b);
}

/* The least-loaded device of group g (lowest index among equals): a group
 * is at most a few dozen devices, scanned with conditional moves. */
static uint32_t scan_group(const strata_shard *s, uint32_t g)
{
	uint32_t d = g << s->group_shift, end = d + (1u << s->group_shift);
	if (end > s->n)
		end = s->n;
	uint32_t best = d;
	uint64_t min = s->load[d];
	for (d++; d < end; d++) {
		bool lower = s->load[d] < min;
		min = lower ? s->load[d] : min;
		best = lower ? d : best;
	}
	return best;
}

/* The least-loaded device overall from the groups' least devices; groups
 * are in index order, so a strict compare keeps the lowest index. */
static uint32_t scan_groups(const strata_shard *s)
{
	uint32_t best = s->group_least[0];
	uint64_t min = s->load[best];
	for (uint32_t g = 1; g < s->groups; g++) {
		uint32_t d = s->group_least[g];
		bool lower = s->load[d] < min;
		min = lower ? s->load[d] : min;
		best = lower ? d : best;
	}
	return best;
}

static inline uint32_t least_device(const strata_shard *s)
{
	return s->least;
}

/* After device's load grew: only if it was its group's least can that
 * move, and only if it was the least overall can the least move. */
static inline void grew(strata_shard *s, uint32_t device)
{
	uint32_t g = device >> s->group_shift;
	if (device != s->group_least[g])
		return;
	s->group_least[g] = scan_group(s, g);
	if (device == s->least)
		s->least = scan_groups(s);
}

/* After device's load shrank: it may have become the least. */
static inline void shrank(strata_shard *s, uint32_t device)
{
	uint32_t g = device >> s->group_shift;
	if (lighter(s, device, s->group_least[g]))
		s->group_least[g] = device;
	if (lighter(s, device, s->least))
		s->least = device;
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

/* Devices per group, as a power of two: at least 8, and about the square
 * root of the device count, so a rescan touches O(sqrt n) loads. */
static uint32_t group_shift_for(uint32_t n)
{
	uint32_t bits = 0;
	while (bits < 32 && (1ull << bits) < n)
		bits++; /* ceil(log2 n) */
	uint32_t shift = (bits + 1) / 2;
	return shift < 3 ? 3 : shift;
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
	s->group_shift = group_shift_for(device_count);
	s->groups = (uint32_t)(((uint64_t)device_count + (1u << s->group_shift) -
				1) >> s->group_shift);
	s->load = strata_calloc(device_count, sizeof *s->load);
	s->dev = strata_calloc(device_count, sizeof *s->dev);
	s->group_least = strata_calloc(s->groups, sizeof *s->group_least);
	if (!s->load || !s->dev || !s->group_least) {
		strata_shard_destroy(s);
		return strata_fail(err, STRATA_E_NOMEM,
				   "use fewer devices or free host memory",
				   "cannot allocate the shard allocator's state for %" PRIu32
				   " devices (%zu bytes per device)",
				   device_count,
				   sizeof(uint64_t) +
					   sizeof(strata_shard_device_stats));
	}
	/* All loads 0: each group's first device, and device 0 overall. */
	for (uint32_t g = 0; g < s->groups; g++)
		s->group_least[g] = g << s->group_shift;
	s->least = 0;
	*out = s;
	return STRATA_OK;
}

void strata_shard_destroy(strata_shard *s)
{
	if (!s)
		return;
	strata_free(s->load);
	strata_free(s->group_least);
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
	grew(s, device);
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
	uint32_t least = s->least;
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
	grew(s, target);
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
	note_gap(s, s->load[s->least]);
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

/* Keys hashed ahead of their placement in a batch: measured with
 * bench/shard, 4 already gives the whole gain over one at a time. */
#define HASH_AHEAD 8

strata_status strata_shard_assign_batch(strata_shard *s,
					strata_shard_item *items, size_t count,
					size_t *placed, strata_error *err)
{
	strata_status st = STRATA_OK;
	size_t done = 0;
	while (done < count && st == STRATA_OK) {
		size_t k = count - done < HASH_AHEAD ? count - done : HASH_AHEAD;
		uint32_t home[HASH_AHEAD];
		/* The hashes first: none waits for a placement. Zero-cost
		 * items go nowhere and are not hashed (strata_shard_assign). */
		for (size_t i = 0; i < k; i++) {
			const strata_shard_item *it = &items[done + i];
			home[i] = it->cost == 0
					  ? 0
					  : strata__fastmod(strata__shard_hash_word(
								    it->key,
								    it->key_bytes),
							    s->mod_magic, s->n);
		}
		for (size_t i = 0; i < k; i++, done++) {
			strata_shard_item *it = &items[done];
			st = strata_shard_assign_home(s, home[i], it->cost,
						      &it->device, err);
			if (st != STRATA_OK)
				break;
		}
	}
	if (placed)
		*placed = done;
	return st;
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
	shrank(s, device);
	if (cost > 0 && old == s->max_load) {
		/* The heaviest device got lighter: rescan (O(n)). Releases are
		 * rare next to assignments, and tracking the maximum the way
		 * the minimum is would cost every assignment a compare. */
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
	(void)s;
	return 0;
}
