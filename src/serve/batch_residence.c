/* batch_residence.c - where each routing key's prefix state lives, for the
 * `follow` route, and how much work each key brings (layer: serve).
 *
 * A key lives on one replica, so its requests find their prefix cache warm
 * there instead of splitting the key over every replica. Three rules decide
 * where, on the keys' recent demand (the cost of their requests, halved
 * every STRATA__RESIDENCE_EPOCH_PER_REPLICA requests per replica) summed
 * per replica:
 *
 * - A key seen for the first time lives on its BLAKE3 home unless the home
 *   already carries more than its share (the mean) of the demand, or its
 *   prefix cache has no room left for the key's prompt (the bytes of the
 *   keys living there, one prompt each, against the cache's bound) where
 *   another's has; then on the replica with room that carries the least.
 *   Waiting for spills to move keys off an overfull home (the first follow
 *   route) cost a miss per move and left keys moving back and forth; a key
 *   placed where its prefix does not fit pushes another key's out.
 * - A key moves after STRATA__RESIDENCE_MOVE_AFTER of its requests in a
 *   row were spilled away from where it lives (repeated spills mean its
 *   replica has more work than it can serve; one is a moment's
 *   imbalance), to where the last one ran, and only when that evens the
 *   demand out: its replica carries more than the other by more than the
 *   key's own demand, and the other's cache has room for it. A move that
 *   would only shift the imbalance (a key hotter than the difference) is
 *   not made, so keys do not ping-pong.
 * - A key not seen for STRATA__RESIDENCE_FORGET epochs is forgotten: its
 *   demand leaves its replica's sum and its slot is freed. The table so
 *   holds at most the keys of the last FORGET + 1 epochs, however many
 *   keys a long run sees.
 *
 * Measured with bench_multi on the CPU (1000 requests over 16 keys homed
 * 11/5 on 2 replicas, 9 cache entries each, --spill-requests 6; the
 * command is in docs/batch.md), on a shared 2-core machine: 92.6-93.3%
 * prefix hits in three runs at max/mean load 1.01-1.02 (91.7-93.9% in a
 * dozen more while the rules were measured), where the first follow route
 * (a key moved to where its second spill in a row ran, no demand, no
 * room) got 89.5-91.3% and affinity 72-74%. The keys split 8/8 on their
 * first requests and none moved. The misses left are the keys' first
 * requests (1.5%), spilled requests, guests on the other replica (2.5-
 * 3.5%), and about as many of resident keys whose entries those guests'
 * saves evicted: a guest's entry is its whole prompt, larger than the cut
 * entries the caches are sized by, so it does not fit beside 8 of them.
 * With a guest's save taking only free or guest-held room (prefix_cache.c
 * does so now) the same bench reached 95.4-96.8%. On 4 replicas with 5-entry caches: 87.8%
 * (affinity 67.5%), and 88.8% at --skew 1, where the hot key's replica
 * carries 1.44 x the mean load (affinity 76.8% at 1.83).
 *
 * Keys are remembered by 64 bits of their BLAKE3 digest (bytes 4..11, past
 * the 4 the home is taken from) in an open-addressing table with linear
 * probing that doubles at half full and deletes by shifting back. A
 * collision of two keys' 64 bits would route one by the other's residence:
 * a placement choice, never a wrong answer.
 */
#include <string.h>

#include "serve/batch_internal.h"

#define FIRST_CAPACITY 64u

void strata__residence_init(strata__residence *t, uint32_t replicas)
{
	memset(t, 0, sizeof *t);
	t->replicas = replicas;
	for (uint32_t d = 0; d < STRATA_BATCH_MAX_REPLICAS; d++)
		t->room[d] = UINT64_MAX;
}

void strata__residence_fini(strata__residence *t)
{
	strata__residence keep = *t;
	strata_free(t->slot);
	strata__residence_init(t, keep.replicas);
	memcpy(t->room, keep.room, sizeof t->room);
	t->bytes_per_position = keep.bytes_per_position;
}

void strata__residence_set_room(strata__residence *t, uint32_t device,
				uint64_t bytes, uint64_t per_position)
{
	if (device < t->replicas)
		t->room[device] = bytes;
	t->bytes_per_position = per_position;
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

static size_t ideal_slot(const strata__residence *t, uint64_t tag)
{
	return (size_t)(tag ^ tag >> 29) & (t->cap - 1);
}

/* The slot holding tag, or the empty slot where it would go. */
static size_t slot_of(const strata__residence *t, uint64_t tag)
{
	size_t mask = t->cap - 1, i = ideal_slot(t, tag);
	while (t->slot[i].tag && t->slot[i].tag != tag)
		i = (i + 1) & mask;
	return i;
}

static strata__residence_key *find(const strata__residence *t, uint64_t tag)
{
	if (!t->cap)
		return NULL;
	strata__residence_key *k = &t->slot[slot_of(t, tag)];
	return k->tag ? k : NULL;
}

uint32_t strata__residence_home(const strata__residence *t, uint64_t tag,
				uint32_t home)
{
	const strata__residence_key *k = find(t, tag);
	return k ? k->device : home;
}

uint64_t strata__residence_demand(const strata__residence *t, uint64_t tag)
{
	const strata__residence_key *k = find(t, tag);
	return k ? k->demand : 0;
}

strata_status strata__residence_reserve(strata__residence *t,
					strata_error *err)
{
	if (2 * (t->count + 1) <= t->cap)
		return STRATA_OK;
	strata__residence n = *t;
	n.cap = t->cap ? 2 * t->cap : FIRST_CAPACITY;
	n.slot = strata_calloc_or_error(n.cap, sizeof *n.slot,
					"routing residence table", err);
	if (!n.slot)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < t->cap; i++)
		if (t->slot[i].tag)
			n.slot[slot_of(&n, t->slot[i].tag)] = t->slot[i];
	strata_free(t->slot);
	*t = n;
	return STRATA_OK;
}

/* Frees slot i, shifting later keys of its probe run back so that every
 * key stays reachable from its ideal slot. */
static void delete_at(strata__residence *t, size_t i)
{
	size_t mask = t->cap - 1, j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (!t->slot[j].tag)
			break;
		size_t want = ideal_slot(t, t->slot[j].tag);
		/* j's key may fill the hole at i unless its ideal slot lies
		 * cyclically in (i, j] */
		bool stays = i <= j ? (i < want && want <= j)
				    : (i < want || want <= j);
		if (stays)
			continue;
		t->slot[i] = t->slot[j];
		i = j;
	}
	memset(&t->slot[i], 0, sizeof t->slot[i]);
	t->count--;
}

/* An epoch ends: every key's demand halves, the keys not seen for FORGET
 * epochs go, and the replicas' sums are counted again from the keys (so
 * halving's rounding never drifts them). */
static void end_epoch(strata__residence *t)
{
	t->epoch++;
	t->placed = 0;
	memset(t->load, 0, sizeof t->load);
	memset(t->held, 0, sizeof t->held);
	/* Deleting shifts keys back from later in their probe run, which a
	 * wrapped run can bring from a slot already passed: the halving waits
	 * for a second pass so that no key is halved twice. */
	for (size_t i = 0; i < t->cap; i++)
		while (t->slot[i].tag &&
		       t->epoch - t->slot[i].seen > STRATA__RESIDENCE_FORGET)
			delete_at(t, i); /* may shift another key into i */
	for (size_t i = 0; i < t->cap; i++) {
		strata__residence_key *k = &t->slot[i];
		if (!k->tag)
			continue;
		k->demand /= 2;
		t->load[k->device] += k->demand;
		t->held[k->device] += k->bytes;
	}
}

/* Whether replica d's cache has room for `bytes` more of resident keys. */
static bool fits(const strata__residence *t, uint32_t d, uint64_t bytes)
{
	return t->held[d] <= t->room[d] && bytes <= t->room[d] - t->held[d];
}

/* The replica carrying the least demand among those with room for bytes
 * (all of them when none has; lowest index on ties). */
static uint32_t lightest(const strata__residence *t, uint64_t bytes)
{
	uint32_t best = UINT32_MAX;
	for (int pass = 0; pass < 2 && best == UINT32_MAX; pass++)
		for (uint32_t d = 0; d < t->replicas; d++)
			if ((pass || fits(t, d, bytes)) &&
			    (best == UINT32_MAX || t->load[d] < t->load[best]))
				best = d;
	return best;
}

/* Where a new key goes: home unless home carries more than the mean
 * demand or lacks the room another has. */
static uint32_t place_new(const strata__residence *t, uint32_t home,
			  uint64_t bytes)
{
	uint64_t total = 0;
	bool room_elsewhere = false;
	for (uint32_t d = 0; d < t->replicas; d++) {
		total += t->load[d];
		room_elsewhere |= d != home && fits(t, d, bytes);
	}
	if (t->load[home] * t->replicas > total ||
	    (!fits(t, home, bytes) && room_elsewhere))
		return lightest(t, bytes);
	return home;
}

uint32_t strata__residence_route(strata__residence *t, uint64_t tag,
				 uint32_t home, uint64_t cost,
				 uint32_t n_prompt)
{
	/* capped where no cache could hold it, so that sums cannot wrap */
	const uint64_t most = (uint64_t)1 << 40;
	uint64_t per = t->bytes_per_position;
	uint64_t bytes = per && n_prompt > most / per ? most : n_prompt * per;
	if (t->placed >=
	    (uint64_t)STRATA__RESIDENCE_EPOCH_PER_REPLICA * t->replicas)
		end_epoch(t);
	t->placed++;
	size_t i = slot_of(t, tag);
	strata__residence_key *k = &t->slot[i];
	if (!k->tag) {
		*k = (strata__residence_key){
			.tag = tag, .device = place_new(t, home, bytes)};
		t->count++;
	}
	k->seen = t->epoch;
	k->demand += cost;
	t->load[k->device] += cost;
	t->held[k->device] += bytes - k->bytes; /* held includes k->bytes */
	k->bytes = bytes;
	return k->device;
}

void strata__residence_ran(strata__residence *t, uint64_t tag,
			   uint32_t device)
{
	strata__residence_key *k = find(t, tag);
	if (!k || device >= t->replicas)
		return;
	if (device == k->device) {
		k->strikes = 0;
		return;
	}
	if (++k->strikes < STRATA__RESIDENCE_MOVE_AFTER)
		return;
	k->strikes = 0;
	uint64_t from = t->load[k->device], to = t->load[device];
	if (from <= to || from - to <= k->demand)
		return; /* moving would not even the demand out */
	if (!fits(t, device, k->bytes))
		return; /* it would push another key out of that cache */
	t->load[k->device] -= k->demand;
	t->load[device] += k->demand;
	t->held[k->device] -= k->bytes;
	t->held[device] += k->bytes;
	k->device = device;
}
