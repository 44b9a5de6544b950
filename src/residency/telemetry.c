/* telemetry.c - the residency recorder: saturating counters of planned,
 * current and peak bytes per tier, transfers per direction, prefetch, stalls
 * and evictions (layer: residency; seed 001's semantics). */
#include <string.h>

#include "strata/residency.h"

static const char *const tier_names[] = {
#define TIER_NAME(name, text) text,
	STRATA_TIER_MAP(TIER_NAME)
#undef TIER_NAME
};

static const char *const direction_names[] = {
#define DIRECTION_NAME(name, text) text,
	STRATA_DIRECTION_MAP(DIRECTION_NAME)
#undef DIRECTION_NAME
};

const char *strata_tier_name(strata_tier t)
{
	return (unsigned)t < STRATA_TIER_COUNT ? tier_names[t] : "unknown";
}

const char *strata_direction_name(strata_direction d)
{
	return (unsigned)d < STRATA_DIRECTION_COUNT ? direction_names[d]
						    : "unknown";
}

/* ------------------------------------------------------------------------ */

/* Out-of-range tiers and directions are ignored: a recorder never crashes
 * on a caller's mistake, and the tests check the projection's exact values. */
#define TIER_OK(t) ((unsigned)(t) < STRATA_TIER_COUNT)

static void set_current(strata_telemetry_snapshot *s, strata_tier t, uint64_t v)
{
	s->current_bytes[t] = v;
	if (v > s->peak_bytes[t]) /* seed 001: peak follows every change */
		s->peak_bytes[t] = v;
}

strata_status strata_telemetry_init(strata_telemetry *t, strata_error *err)
{
	memset(&t->s, 0, sizeof t->s);
	if (pthread_mutex_init(&t->lock, NULL) != 0)
		return strata_fail(err, STRATA_E_THREAD, "retry",
				   "cannot make the telemetry recorder's mutex");
	return STRATA_OK;
}

void strata_telemetry_fini(strata_telemetry *t)
{
	if (t)
		pthread_mutex_destroy(&t->lock);
}

void strata_telemetry_set_planned(strata_telemetry *t, strata_tier tier,
				  uint64_t bytes)
{
	if (!TIER_OK(tier))
		return;
	pthread_mutex_lock(&t->lock);
	t->s.planned_bytes[tier] = bytes;
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_set_budget(strata_telemetry *t, strata_tier tier,
				 uint64_t bytes)
{
	if (!TIER_OK(tier))
		return;
	pthread_mutex_lock(&t->lock);
	t->s.budget_bytes[tier] = bytes;
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_set_resident(strata_telemetry *t, strata_tier tier,
				   uint64_t bytes)
{
	if (!TIER_OK(tier))
		return;
	pthread_mutex_lock(&t->lock);
	set_current(&t->s, tier, bytes);
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_add_resident(strata_telemetry *t, strata_tier tier,
				   uint64_t bytes)
{
	if (!TIER_OK(tier))
		return;
	pthread_mutex_lock(&t->lock);
	set_current(&t->s, tier,
		    strata_sat_add_u64(t->s.current_bytes[tier], bytes));
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_sub_resident(strata_telemetry *t, strata_tier tier,
				   uint64_t bytes)
{
	if (!TIER_OK(tier))
		return;
	pthread_mutex_lock(&t->lock);
	uint64_t cur = t->s.current_bytes[tier];
	set_current(&t->s, tier, cur > bytes ? cur - bytes : 0);
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_record_transfer(strata_telemetry *t, strata_direction d,
				      uint64_t bytes, uint64_t ns)
{
	if ((unsigned)d >= STRATA_DIRECTION_COUNT)
		return;
	pthread_mutex_lock(&t->lock);
	strata_transfer_stats *x = &t->s.transfers[d];
	x->count = strata_sat_add_u64(x->count, 1);
	x->bytes = strata_sat_add_u64(x->bytes, bytes);
	x->ns = strata_sat_add_u64(x->ns, ns);
	pthread_mutex_unlock(&t->lock);
}

#define BUMP(field, v)                                                         \
	do {                                                                   \
		pthread_mutex_lock(&t->lock);                                  \
		t->s.field = strata_sat_add_u64(t->s.field, (v));              \
		pthread_mutex_unlock(&t->lock);                                \
	} while (0)

void strata_telemetry_record_prefetch(strata_telemetry *t)
{
	BUMP(prefetch_requests, 1);
}

void strata_telemetry_record_hit(strata_telemetry *t)
{
	BUMP(prefetch_hits, 1);
}

void strata_telemetry_record_miss(strata_telemetry *t)
{
	BUMP(prefetch_misses, 1);
}

void strata_telemetry_record_stall(strata_telemetry *t, uint64_t ns)
{
	pthread_mutex_lock(&t->lock);
	t->s.stalls = strata_sat_add_u64(t->s.stalls, 1);
	t->s.stall_ns = strata_sat_add_u64(t->s.stall_ns, ns);
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_record_eviction(strata_telemetry *t, uint64_t bytes)
{
	pthread_mutex_lock(&t->lock);
	t->s.evictions = strata_sat_add_u64(t->s.evictions, 1);
	t->s.evicted_bytes = strata_sat_add_u64(t->s.evicted_bytes, bytes);
	pthread_mutex_unlock(&t->lock);
}

static void add_stats(strata_transfer_stats *x, uint64_t bytes, uint64_t ns)
{
	x->count = strata_sat_add_u64(x->count, 1);
	x->bytes = strata_sat_add_u64(x->bytes, bytes);
	x->ns = strata_sat_add_u64(x->ns, ns);
}

static void sum_stats(strata_transfer_stats *x, const strata_transfer_stats *y)
{
	x->count = strata_sat_add_u64(x->count, y->count);
	x->bytes = strata_sat_add_u64(x->bytes, y->bytes);
	x->ns = strata_sat_add_u64(x->ns, y->ns);
}

void strata_telemetry_record_unit(strata_telemetry *t, strata_place where,
				  uint64_t bytes, uint64_t ns)
{
	if ((unsigned)where >= STRATA_PLACE_COUNT)
		return;
	pthread_mutex_lock(&t->lock);
	add_stats(&t->s.units[where], bytes, ns);
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_record_activation(strata_telemetry *t, unsigned link,
					uint64_t bytes, uint64_t ns)
{
	if (link > STRATA_ACT_DEVICE_TO_DEVICE)
		return;
	pthread_mutex_lock(&t->lock);
	add_stats(&t->s.activations[link], bytes, ns);
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_record_kv_stage(strata_telemetry *t, bool up,
				      uint64_t bytes, uint64_t ns)
{
	pthread_mutex_lock(&t->lock);
	add_stats(&t->s.kv_staged[up ? 0 : 1], bytes, ns);
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_get(strata_telemetry *t, strata_telemetry_snapshot *out)
{
	pthread_mutex_lock(&t->lock);
	*out = t->s;
	pthread_mutex_unlock(&t->lock);
}

void strata_telemetry_snapshot_add(strata_telemetry_snapshot *a,
				   const strata_telemetry_snapshot *b)
{
	for (int i = 0; i < STRATA_TIER_COUNT; i++) {
		a->planned_bytes[i] = strata_sat_add_u64(a->planned_bytes[i], b->planned_bytes[i]);
		a->budget_bytes[i] = strata_sat_add_u64(a->budget_bytes[i], b->budget_bytes[i]);
		a->current_bytes[i] = strata_sat_add_u64(a->current_bytes[i], b->current_bytes[i]);
		a->peak_bytes[i] = strata_sat_add_u64(a->peak_bytes[i], b->peak_bytes[i]);
	}
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++)
		sum_stats(&a->transfers[d], &b->transfers[d]);
	for (int k = 0; k < STRATA_PLACE_COUNT; k++)
		sum_stats(&a->units[k], &b->units[k]);
	for (int k = 0; k < 3; k++)
		sum_stats(&a->activations[k], &b->activations[k]);
	for (int k = 0; k < 2; k++)
		sum_stats(&a->kv_staged[k], &b->kv_staged[k]);
	a->prefetch_requests = strata_sat_add_u64(a->prefetch_requests, b->prefetch_requests);
	a->prefetch_hits = strata_sat_add_u64(a->prefetch_hits, b->prefetch_hits);
	a->prefetch_misses = strata_sat_add_u64(a->prefetch_misses, b->prefetch_misses);
	a->stalls = strata_sat_add_u64(a->stalls, b->stalls);
	a->stall_ns = strata_sat_add_u64(a->stall_ns, b->stall_ns);
	a->evictions = strata_sat_add_u64(a->evictions, b->evictions);
	a->evicted_bytes = strata_sat_add_u64(a->evicted_bytes, b->evicted_bytes);
}
