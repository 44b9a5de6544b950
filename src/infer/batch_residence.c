/* batch_residence.c - where each routing key's prefix state lives, for the
 * `follow` route: a key's home is BLAKE3's until spills move it, then the
 * replica it moved to, so its later requests find their prefix cache warm
 * there instead of splitting the key over every replica (layer: infer).
 *
 * A key moves when STRATA__RESIDENCE_MOVE_AFTER of its requests in a row
 * were spilled away from where it lives: one spill is a moment's
 * imbalance (moving on it made keys ping-pong and halved the hits the move
 * was for), repeated spills mean its replica has more keys than it can
 * serve. Measured with bench_multi on the CPU (16 keys, 2 replicas, 9
 * cache entries each, --spill-requests 6): moving on every spill 84.8%
 * prefix hits, on the second spill in a row 89.5-91.3%, on the third
 * 79.7-83.6% (keys stay too long where they are spilled from); max/mean
 * load 1.00-1.05 throughout.
 *
 * Keys are remembered by 64 bits of their BLAKE3 digest (bytes 4..11, past
 * the 4 the home is taken from) in an open-addressing table that doubles at
 * half full. A collision of two keys' 64 bits would route one by the
 * other's residence: a placement choice, never a wrong answer.
 */
#include <string.h>

#include "batch_internal.h"

#define FIRST_CAPACITY 64u

void strata__residence_fini(strata__residence *t)
{
	strata_free(t->tag);
	strata_free(t->device);
	strata_free(t->strikes);
	memset(t, 0, sizeof *t);
}

uint64_t strata__residence_tag(const void *key, size_t key_bytes)
{
	uint8_t d[12];
	strata_shard_hash(key, key_bytes, d, sizeof d);
	uint64_t tag = 0;
	for (int i = 11; i >= 4; i--)
		tag = tag << 8 | d[i];
	return tag ? tag : 1; /* 0 marks an empty slot */
}

/* The slot holding tag, or the empty slot where it would go. */
static size_t slot_of(const strata__residence *t, uint64_t tag)
{
	size_t mask = t->cap - 1, i = (size_t)(tag ^ tag >> 29) & mask;
	while (t->tag[i] && t->tag[i] != tag)
		i = (i + 1) & mask;
	return i;
}

uint32_t strata__residence_home(const strata__residence *t, uint64_t tag,
				uint32_t home)
{
	if (!t->cap)
		return home;
	size_t i = slot_of(t, tag);
	return t->tag[i] ? t->device[i] : home;
}

static strata_status grow(strata__residence *t, strata_error *err)
{
	strata__residence n = {.cap = t->cap ? 2 * t->cap : FIRST_CAPACITY};
	const char *what = "routing residence table";
	n.tag = strata_calloc_or_error(n.cap, sizeof *n.tag, what, err);
	n.device = n.tag ? strata_calloc_or_error(n.cap, sizeof *n.device,
						  what, err)
			 : NULL;
	n.strikes = n.device ? strata_calloc_or_error(n.cap, sizeof *n.strikes,
						      what, err)
			     : NULL;
	if (!n.strikes) {
		strata__residence_fini(&n);
		return STRATA_E_NOMEM;
	}
	for (size_t i = 0; i < t->cap; i++) {
		if (!t->tag[i])
			continue;
		size_t j = slot_of(&n, t->tag[i]);
		n.tag[j] = t->tag[i];
		n.device[j] = t->device[i];
		n.strikes[j] = t->strikes[i];
		n.count++;
	}
	strata__residence_fini(t);
	*t = n;
	return STRATA_OK;
}

strata_status strata__residence_note(strata__residence *t, uint64_t tag,
				     uint32_t resident, uint32_t device,
				     strata_error *err)
{
	if (2 * (t->count + 1) > t->cap) {
		strata_status st = grow(t, err);
		if (st)
			return st;
	}
	size_t i = slot_of(t, tag);
	if (!t->tag[i]) {
		t->tag[i] = tag;
		t->device[i] = resident;
		t->strikes[i] = 0;
		t->count++;
	}
	if (device == t->device[i]) {
		t->strikes[i] = 0;
	} else if (++t->strikes[i] >= STRATA__RESIDENCE_MOVE_AFTER) {
		t->device[i] = device;
		t->strikes[i] = 0;
	}
	return STRATA_OK;
}
