/* arena.c - one bounded region taken from a backend and sub-allocated with
 * STRATA_ALIGN (base.h) alignment, first fit, with its own high-water mark
 * (layer: backend).
 *
 * Blocks are few (a unit's tensors share one block), so live blocks are kept
 * in an array sorted by offset and a request scans the gaps between them.
 * The region is taken once: the arena can never hold more than its capacity,
 * which is how a plan's budget becomes impossible to exceed.
 */
#include <inttypes.h>
#include <string.h>

#include "strata/backend.h"

typedef struct block {
	uint64_t offset, bytes; /* bytes already rounded to the alignment */
} block;

struct strata_arena {
	strata_backend *backend;
	strata_arena_kind kind;
	char what[64];
	unsigned char *base; /* NULL when capacity is 0 */
	block *blocks;	     /* live, sorted by offset */
	size_t count, cap;
	strata_arena_stats stats;
};

/* ------------------------------------------------------------------------ */

/* Index of the block starting at offset, or count when none does. */
static size_t find_block(const strata_arena *a, uint64_t offset)
{
	size_t lo = 0, hi = a->count;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->blocks[mid].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < a->count && a->blocks[lo].offset == offset ? lo : a->count;
}

/* ------------------------------------------------------------------------ */

strata_status strata_arena_create(strata_backend *b, strata_arena_kind kind,
				  uint64_t capacity_bytes, const char *what,
				  strata_arena **out, strata_error *err)
{
	if (!b || !out || !what || (kind != STRATA_ARENA_DEVICE &&
				    kind != STRATA_ARENA_HOST_PINNED))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "arena created with a NULL argument or bad kind");
	strata_arena *a = strata_calloc(1, sizeof *a);
	if (!a)
		return strata_fail(err, STRATA_E_NOMEM,
				   "free host memory and retry",
				   "cannot allocate the %s arena", what);
	a->backend = b;
	a->kind = kind;
	snprintf(a->what, sizeof a->what, "%s", what);
	a->stats.capacity_bytes = capacity_bytes;
	if (capacity_bytes > 0) {
		void *p = NULL;
		strata_status s =
			kind == STRATA_ARENA_DEVICE
				? b->ops->device_alloc(b->ctx, capacity_bytes, &p, err)
				: b->ops->host_alloc(b->ctx, capacity_bytes, true, &p, err);
		if (s != STRATA_OK) {
			strata_free(a);
			return strata_error_prefix(err, "%s arena", what);
		}
		a->base = p;
	}
	*out = a;
	return STRATA_OK;
}

void strata_arena_destroy(strata_arena *a)
{
	if (!a)
		return;
	if (a->base) {
		if (a->kind == STRATA_ARENA_DEVICE)
			a->backend->ops->device_free(a->backend->ctx, a->base, NULL);
		else
			a->backend->ops->host_free(a->backend->ctx, a->base, NULL);
	}
	strata_free(a->blocks);
	strata_free(a);
}

strata_status strata_arena_alloc(strata_arena *a, uint64_t bytes, void **out,
				 strata_error *err)
{
	if (!a || !out || bytes == 0)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "arena allocation of zero bytes or with NULL");
	uint64_t need;
	strata_status s = strata_checked_align(bytes, &need, a->what, err);
	if (s != STRATA_OK)
		return s;
	/* First fit: the gap before block i starts at the end of block i-1. */
	uint64_t start = 0;
	size_t at = 0;
	bool found = false;
	for (; at <= a->count; at++) {
		uint64_t end = at < a->count ? a->blocks[at].offset
					     : a->stats.capacity_bytes;
		if (end >= start && end - start >= need) {
			found = true;
			break;
		}
		if (at < a->count)
			start = a->blocks[at].offset + a->blocks[at].bytes;
	}
	if (!found) {
		a->stats.refused = strata_sat_add_u64(a->stats.refused, 1);
		return strata_fail(err, STRATA_E_RES_BUDGET,
				   "raise the memory budget for this tier or lower the residency depth",
				   "%s: no room for %" PRIu64 " bytes (%" PRIu64
				   " of %" PRIu64 " bytes in use)",
				   a->what, need, a->stats.used_bytes,
				   a->stats.capacity_bytes);
	}
	s = strata_grow((void **)&a->blocks, &a->cap, a->count + 1,
			sizeof *a->blocks, "arena block list", err);
	if (s != STRATA_OK)
		return s;
	memmove(a->blocks + at + 1, a->blocks + at,
		(a->count - at) * sizeof *a->blocks);
	a->blocks[at] = (block){start, need};
	a->count++;
	a->stats.used_bytes += need;
	a->stats.live_blocks = a->count;
	if (a->stats.used_bytes > a->stats.high_water_bytes)
		a->stats.high_water_bytes = a->stats.used_bytes;
	*out = a->base + start;
	return STRATA_OK;
}

strata_status strata_arena_free(strata_arena *a, void *ptr, strata_error *err)
{
	if (!a || !ptr)
		return STRATA_OK;
	unsigned char *p = ptr;
	size_t i = a->count;
	if (a->base && p >= a->base && p < a->base + a->stats.capacity_bytes)
		i = find_block(a, (uint64_t)(p - a->base));
	if (i == a->count)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "%s: freeing a pointer it did not hand out",
				   a->what);
	a->stats.used_bytes -= a->blocks[i].bytes;
	memmove(a->blocks + i, a->blocks + i + 1,
		(a->count - i - 1) * sizeof *a->blocks);
	a->count--;
	a->stats.live_blocks = a->count;
	return STRATA_OK;
}

void strata_arena_get_stats(const strata_arena *a, strata_arena_stats *out)
{
	*out = a->stats;
}
