/* batch_residence.c - where each routing key's prefix state lives, for the
 * `follow` route, and how much work each key brings (layer: infer).
 *
 * A key lives on one replica, so its requests find their prefix cache warm
 * there instead of splitting the key over every replica. Three rules decide
 * where, on the keys' recent demand (the cost of their requests, halved
 * every STRATA__RESIDENCE_EPOCH_PER_REPLICA requests per replica) summed
 * per replica:
 *
 * - A key seen for the first time lives on its BLAKE3 home unless the home
 *   already carries more than its share (the mean) of the demand; then on
 *   the replica that carries the least. Waiting for spills to move keys
 *   off an overfull home (the first follow route) cost a miss per move and
 *   left keys moving back and forth.
 * - A key moves after STRATA__RESIDENCE_MOVE_AFTER of its requests in a
 *   row were spilled away from where it lives (repeated spills mean its
 *   replica has more work than it can serve; one is a moment's
 *   imbalance), to where the last one ran, and only when that evens the
 *   demand out: its replica carries more than the other by more than the
 *   key's own demand. A move that would only shift the imbalance (a key
 *   hotter than the difference) is not made, so keys do not ping-pong.
 * - A key not seen for STRATA__RESIDENCE_FORGET epochs is forgotten: its
 *   demand leaves its replica's sum and its slot is freed. The table so
 *   holds at most the keys of the last FORGET + 1 epochs, however many
 *   keys a long run sees.
 *
 * Measured with bench_multi on the CPU (1000 requests over 16 keys homed
 * 11/5 on 2 replicas, 9 cache entries each, --spill-requests 6; the
 * command is in docs/batch.md): 91.7-93.9% prefix hits over five runs at
 * max/mean load 1.00-1.02, where the first follow route (a key moved to
 * where its second spill in a row ran, with no demand) got 89.5-91.3%.
 * The keys split 8/8 on their first requests and none moved. The misses
 * left are the keys' first requests (1.6%), spilled requests, guests on
 * the other replica (2.5-3.4%), and as many again of resident keys whose
 * entries those guests' saves evicted (a guest's entry is its whole
 * prompt, larger than the cut-down entries the bench sizes the caches by).
 *
 * Keys are remembered by 64 bits of their BLAKE3 digest (bytes 4..11, past
 * the 4 the home is taken from) in an open-addressing table with linear
 * probing that doubles at half full and deletes by shifting back. A
 * collision of two keys' 64 bits would route one by the other's residence:
 * a placement choice, never a wrong answer.
 */
#include <string.h>

#include "batch_internal.h"

#define FIRST_CAPACITY 64u

void strata__residence_init(strata__residence *t, uint32_t replicas)
{
	memset(t, 0, sizeof *t);
	t->replicas = replicas;
}

void strata__residence_fini(strata__residence *t)
{
	uint32_t replicas = t->replicas;
	strata_free(t->slot);
	strata__residence_init(t, replicas);
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
	}
}

/* The replica carrying the least demand (lowest index on ties). */
static uint32_t lightest(const strata__residence *t)
{
	uint32_t best = 0;
	for (uint32_t d = 1; d < t->replicas; d++)
		if (t->load[d] < t->load[best])
			best = d;
	return best;
}

uint32_t strata__residence_route(strata__residence *t, uint64_t tag,
				 uint32_t home, uint64_t cost)
{
	if (t->placed >=
	    (uint64_t)STRATA__RESIDENCE_EPOCH_PER_REPLICA * t->replicas)
		end_epoch(t);
	t->placed++;
	size_t i = slot_of(t, tag);
	strata__residence_key *k = &t->slot[i];
	if (!k->tag) {
		/* new: home unless home carries more than the mean */
		uint64_t total = 0;
		for (uint32_t d = 0; d < t->replicas; d++)
			total += t->load[d];
		uint32_t at = home;
		if (t->load[home] * t->replicas > total)
			at = lightest(t);
		*k = (strata__residence_key){.tag = tag, .device = at};
		t->count++;
	}
	k->seen = t->epoch;
	k->demand += cost;
	t->load[k->device] += cost;
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
	t->load[k->device] -= k->demand;
	t->load[device] += k->demand;
	k->device = device;
}
