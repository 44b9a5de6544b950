/* sizing.c - exact sizing of bounded weight residency: static bytes plus
 * the largest window of `depth` consecutive execution units per group
 * (seed 001) (layer: plan). */
#include <stdlib.h>
#include <string.h>

#include "strata/plan.h"

/* ------------------------------------------------------------------------ */
/* Types                                                                    */
/* ------------------------------------------------------------------------ */

/* One occupied {group, unit} with its device bytes: `bytes` with each
 * tensor in its own aligned slot (the arenas' region), `exact` the sum of
 * the tensors' own bytes (the seed's). Only present indices are stored, so
 * memory follows the tensor count, not the largest index (seed 001: sparse
 * indices). */
typedef struct unit_entry {
	const char *group;
	size_t group_len;
	uint64_t unit;
	uint64_t bytes, exact;
	strata_block_type type; /* one tensor's, before merging */
	bool expert;		/* a routed expert's (strata_plan_expert_layer) */
} unit_entry;

typedef struct group_range {
	size_t first, count; /* into units[] */
} group_range;

struct strata_plan_layout {
	unit_entry *units; /* sorted by (group, unit), one per {group, unit} */
	size_t unit_entries;
	group_range *groups;
	size_t group_count;
	bool all_units_overflow; /* resident window does not fit in u64 */
	bool exact_units_overflow; /* the same of the exact bytes */
	uint64_t alignment;	   /* each tensor's slot; 1: none */
	/* [unit_entries][STRATA_BLOCK_COUNT]: each unit's exact bytes by
	 * the block type its tensors compute as (time prediction) */
	uint64_t *type_bytes;
	/* the same of the routed experts' tensors only (a part of it): in
	 * type_bytes' block, after it */
	uint64_t *expert_type_bytes;
	uint64_t embed_type_bytes[STRATA_BLOCK_COUNT];
	bool has_output; /* a static of role "output" */
	strata_plan_layout_info info;
};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static int compare_group(const unit_entry *a, const unit_entry *b)
{
	size_t n = a->group_len < b->group_len ? a->group_len : b->group_len;
	int c = memcmp(a->group, b->group, n);
	if (c)
		return c;
	return (a->group_len > b->group_len) - (a->group_len < b->group_len);
}

static int compare_entry(const void *pa, const void *pb)
{
	const unit_entry *a = pa, *b = pb;
	int c = compare_group(a, b);
	if (c)
		return c;
	return (a->unit > b->unit) - (a->unit < b->unit);
}

/* Names the group and unit whose sum overflowed, escaped for printing. */
static strata_status unit_error(strata_error *err, const unit_entry *e,
				strata_status s)
{
	if (!err)
		return s;
	char shown[96];
	strata_escape(shown, sizeof shown, e->group, e->group_len);
	strata_error_prefix(err, "group '%s' unit %llu", shown,
			    (unsigned long long)e->unit);
	return s;
}

/* bytes rounded up to a multiple of a (a >= 1, not only powers of two). */
static strata_status align_to(uint64_t bytes, uint64_t a, uint64_t *out,
			      strata_error *err)
{
	uint64_t r = bytes % a;
	if (r == 0) {
		*out = bytes;
		return STRATA_OK;
	}
	return strata_checked_add(bytes, a - r, out, "tensor device bytes",
				  err);
}

static bool role_is(const strata_owner *o, const char *role)
{
	size_t n = strlen(role);
	return o->role && o->role_len == n && !memcmp(o->role, role, n);
}

/* Sums a static tensor into the bytes a pass computes on, by type: the
 * embedding apart (l->embed_type_bytes), for count_units to add back when
 * no output head exists (a tied head reads the embedding). */
static void static_compute(strata_plan_layout *l, const strata_owner *o,
			   strata_block_type type, uint64_t exact)
{
	uint64_t *into = role_is(o, "embedding")
				 ? &l->embed_type_bytes[type]
				 : &l->info.static_compute_type_bytes[type];
	*into = strata_sat_add_u64(*into, exact);
	l->has_output |= role_is(o, "output");
}

/* Reads the params into `units` (unsorted) and the static sum. Excluded
 * tensors are skipped before their bytes are asked (seed 001). */
static strata_status collect(strata_plan_layout *l,
			     const strata_plan_param *params, size_t n,
			     strata_plan_bytes_fn bytes, void *ctx,
			     const char *const *exclude, size_t n_exclude,
			     strata_error *err)
{
	strata_plan_layout_info *info = &l->info;
	for (size_t i = 0; i < n; i++) {
		const strata_plan_param *p = &params[i];
		if (strata_topology_excluded(p->name, exclude, n_exclude)) {
			info->excluded_tensors++;
			continue;
		}
		uint64_t exact = 0, b;
		strata_status s = bytes(ctx, i, &exact, err);
		if (s == STRATA_OK)
			s = align_to(exact, l->alignment, &b, err);
		if (s != STRATA_OK)
			return s;
		info->sized_tensors++;
		strata_block_type type = (unsigned)p->type < STRATA_BLOCK_COUNT
						 ? p->type : STRATA_BLOCK_F32;
		if (p->owner.kind == STRATA_OWNER_STATIC) {
			static_compute(l, &p->owner, type, exact);
			/* exact <= b: the region's sum overflows first */
			s = strata_checked_add(info->static_bytes, b,
					       &info->static_bytes,
					       "static bytes", err);
			if (s != STRATA_OK)
				return s;
			info->exact_static_bytes += exact;
			if (b > info->largest_static_bytes)
				info->largest_static_bytes = b;
			continue;
		}
		/* unit_file_bytes only feeds time prediction: saturate */
		info->unit_file_bytes =
			strata_sat_add_u64(info->unit_file_bytes, p->file_bytes);
		l->units[l->unit_entries++] = (unit_entry){
			.group = p->owner.group,
			.group_len = p->owner.group_len,
			.unit = p->owner.unit,
			.bytes = b,
			.exact = exact,
			.type = type,
			.expert = strata_plan_expert_layer(p->name) >= 0,
		};
	}
	return STRATA_OK;
}

/* Sorts, merges tensors of one {group, unit} and cuts the groups. */
static strata_status merge(strata_plan_layout *l, strata_error *err)
{
	if (l->unit_entries > 1)
		qsort(l->units, l->unit_entries, sizeof *l->units,
		      compare_entry);
	size_t distinct = 0;
	for (size_t i = 0; i < l->unit_entries; i++)
		distinct += i == 0 ||
			    compare_entry(&l->units[i - 1], &l->units[i]) != 0;
	size_t rows = distinct ? distinct : 1;
	l->type_bytes = strata_calloc_or_error(rows * 2 * STRATA_BLOCK_COUNT,
					       sizeof *l->type_bytes,
					       "plan layout unit types", err);
	if (!l->type_bytes)
		return STRATA_E_NOMEM;
	l->expert_type_bytes = l->type_bytes + rows * STRATA_BLOCK_COUNT;
	size_t out = 0;
	for (size_t i = 0; i < l->unit_entries; i++) {
		unit_entry *e = &l->units[i];
		if (out > 0 && compare_entry(&l->units[out - 1], e) == 0) {
			unit_entry *into = &l->units[out - 1];
			strata_status s = strata_checked_add(
				into->bytes, e->bytes, &into->bytes,
				"unit bytes", err);
			if (s != STRATA_OK)
				return unit_error(err, into, s);
			into->exact += e->exact; /* <= into->bytes */
			l->type_bytes[(out - 1) * STRATA_BLOCK_COUNT + e->type] +=
				e->exact; /* <= into->exact */
			if (e->expert)
				l->expert_type_bytes[(out - 1) * STRATA_BLOCK_COUNT +
						     e->type] += e->exact;
			continue;
		}
		l->type_bytes[out * STRATA_BLOCK_COUNT + e->type] = e->exact;
		if (e->expert)
			l->expert_type_bytes[out * STRATA_BLOCK_COUNT + e->type] =
				e->exact;
		l->units[out++] = *e;
	}
	l->unit_entries = out;
	for (size_t i = 0; i < out; i++) {
		if (i == 0 || compare_group(&l->units[i - 1], &l->units[i]))
			l->groups[l->group_count++] =
				(group_range){.first = i, .count = 0};
		l->groups[l->group_count - 1].count++;
	}
	return STRATA_OK;
}

/* Unit counts (last index + 1 per group, absent indices included, as the
 * seed counts them), span, largest unit and the resident sum. */
static strata_status count_units(strata_plan_layout *l, strata_error *err)
{
	strata_plan_layout_info *info = &l->info;
	uint64_t all = 0, exact = 0;
	for (size_t g = 0; g < l->group_count; g++) {
		const unit_entry *first = &l->units[l->groups[g].first];
		const unit_entry *last = first + l->groups[g].count - 1;
		uint64_t count;
		strata_status s = strata_checked_add(last->unit, 1, &count,
						     "group unit count", err);
		if (s != STRATA_OK)
			return unit_error(err, last, s);
		s = strata_checked_add(info->unit_count, count,
				       &info->unit_count, "total unit count",
				       err);
		if (s != STRATA_OK)
			return s;
		uint64_t span = last->unit - first->unit + 1;
		if (span == 0) /* 0 .. 2^64-1 is caught above */
			span = UINT64_MAX;
		if (span > info->span)
			info->span = span;
		for (const unit_entry *e = first; e <= last; e++) {
			if (e->bytes > info->largest_unit_bytes)
				info->largest_unit_bytes = e->bytes;
			if (!strata_add_u64(all, e->bytes, &all))
				l->all_units_overflow = true;
			if (!strata_add_u64(exact, e->exact, &exact))
				l->exact_units_overflow = true;
		}
	}
	info->all_units_bytes = l->all_units_overflow ? UINT64_MAX : all;
	info->exact_all_units_bytes =
		l->exact_units_overflow ? UINT64_MAX : exact;
	info->groups = l->group_count;
	info->occupied_units = l->unit_entries;
	for (int t = 0; !l->has_output && t < STRATA_BLOCK_COUNT; t++)
		info->static_compute_type_bytes[t] = strata_sat_add_u64(
			info->static_compute_type_bytes[t],
			l->embed_type_bytes[t]);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Public                                                                   */
/* ------------------------------------------------------------------------ */

strata_status strata_plan_layout_create(const strata_plan_param *params,
					size_t n, strata_plan_bytes_fn bytes,
					void *ctx, const char *const *exclude,
					size_t n_exclude,
					strata_plan_layout **out,
					strata_error *err)
{
	return strata_plan_layout_create_aligned(params, n, bytes, ctx, exclude,
						 n_exclude, 1, out, err);
}

strata_status strata_plan_layout_create_aligned(
	const strata_plan_param *params, size_t n, strata_plan_bytes_fn bytes,
	void *ctx, const char *const *exclude, size_t n_exclude,
	uint64_t alignment, strata_plan_layout **out, strata_error *err)
{
	if ((n > 0 && (!params || !bytes)) || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "pass the parameter list and a bytes callback",
				   "sizing called without parameters");
	strata_plan_layout *l =
		strata_calloc_or_error(1, sizeof *l, "plan layout", err);
	if (!l)
		return STRATA_E_NOMEM;
	l->alignment = alignment ? alignment : 1;
	strata_status s = STRATA_E_NOMEM;
	size_t cap = n ? n : 1;
	l->units = strata_calloc_or_error(cap, sizeof *l->units,
					  "plan layout units", err);
	if (!l->units)
		goto fail;
	l->groups = strata_calloc_or_error(cap, sizeof *l->groups,
					   "plan layout groups", err);
	if (!l->groups)
		goto fail;
	s = collect(l, params, n, bytes, ctx, exclude, n_exclude, err);
	if (s == STRATA_OK)
		s = merge(l, err);
	if (s == STRATA_OK)
		s = count_units(l, err);
	if (s != STRATA_OK)
		goto fail;
	*out = l;
	return STRATA_OK;
fail:
	strata_plan_layout_destroy(l);
	return s;
}

void strata_plan_layout_destroy(strata_plan_layout *l)
{
	if (!l)
		return;
	strata_free(l->units);
	strata_free(l->groups);
	strata_free(l->type_bytes);
	strata_free(l);
}

void strata_plan_layout_get_info(const strata_plan_layout *l,
				 strata_plan_layout_info *out)
{
	*out = l->info;
}

strata_status strata_plan_layout_window(const strata_plan_layout *l,
					uint64_t depth, uint64_t *out,
					strata_error *err)
{
	return strata_plan_layout_window_of(l, depth, NULL, out, err);
}

/* The seed's window over the streamed units (NULL: all), of the region
 * bytes or of the exact ones. */
static strata_status window_of(const strata_plan_layout *l, uint64_t depth,
			       const bool *streamed, bool exact, uint64_t *out,
			       strata_error *err)
{
	uint64_t best = 0;
	if (depth == 0)
		goto done;
	for (size_t g = 0; g < l->group_count; g++) {
		size_t first = l->groups[g].first;
		const unit_entry *u = &l->units[first];
		size_t count = l->groups[g].count, lo = 0;
		uint64_t current = 0;
		/* Two pointers over present indices: [u[lo], u[hi]] spans
		 * fewer than depth positions; absent ones (and units not
		 * streamed) weigh 0. */
		for (size_t hi = 0; hi < count; hi++) {
			while (u[hi].unit - u[lo].unit >= depth) {
				if (!streamed || streamed[first + lo])
					current -= exact ? u[lo].exact
							 : u[lo].bytes;
				lo++;
			}
			if (streamed && !streamed[first + hi])
				continue;
			strata_status s = strata_checked_add(
				current, exact ? u[hi].exact : u[hi].bytes,
				&current, "window bytes", err);
			if (s != STRATA_OK)
				return unit_error(err, &u[hi], s);
			if (current > best)
				best = current;
		}
	}
done:
	*out = best;
	return STRATA_OK;
}

strata_status strata_plan_layout_window_of(const strata_plan_layout *l,
					   uint64_t depth,
					   const bool *streamed,
					   uint64_t *out, strata_error *err)
{
	return window_of(l, depth, streamed, false, out, err);
}

strata_status strata_plan_layout_exact_window_of(const strata_plan_layout *l,
						 uint64_t depth,
						 const bool *streamed,
						 uint64_t *out,
						 strata_error *err)
{
	return window_of(l, depth, streamed, true, out, err);
}

size_t strata_plan_layout_unit_count(const strata_plan_layout *l)
{
	return l->unit_entries;
}

void strata_plan_layout_unit_at(const strata_plan_layout *l, size_t i,
				strata_plan_unit *out)
{
	const unit_entry *e = &l->units[i];
	*out = (strata_plan_unit){.group = e->group,
				  .group_len = e->group_len,
				  .unit = e->unit,
				  .bytes = e->bytes,
				  .exact_bytes = e->exact};
	memcpy(out->type_bytes, l->type_bytes + i * STRATA_BLOCK_COUNT,
	       sizeof out->type_bytes);
	memcpy(out->expert_type_bytes,
	       l->expert_type_bytes + i * STRATA_BLOCK_COUNT,
	       sizeof out->expert_type_bytes);
}

strata_status strata_plan_layout_weights(const strata_plan_layout *l,
					 strata_residency_mode mode,
					 uint64_t host_depth,
					 strata_plan_weights *out,
					 strata_error *err)
{
	/* the seed's figures: each tensor's own bytes, unaligned */
	strata_plan_weights w = {.static_bytes = l->info.exact_static_bytes};
	strata_status s = STRATA_OK;
	switch (mode) {
	case STRATA_RESIDENCY_RESIDENT:
		/* every unit of every group is on the device at once */
		w.depth = l->info.unit_count;
		if (l->exact_units_overflow)
			return strata_fail(
				err, STRATA_E_OVERFLOW,
				"the input declares sizes too large to be real; check it is not corrupt",
				"window bytes overflowed: the units of all groups together exceed 2^64-1");
		w.window_bytes = l->info.exact_all_units_bytes;
		break;
	case STRATA_RESIDENCY_HOST:
		w.depth = host_depth; /* not clamped (seed 001) */
		s = window_of(l, w.depth, NULL, true, &w.window_bytes, err);
		break;
	case STRATA_RESIDENCY_DISK:
		w.depth = l->info.unit_count < 2 ? l->info.unit_count : 2;
		s = window_of(l, w.depth, NULL, true, &w.window_bytes, err);
		break;
	case STRATA_RESIDENCY_AUTO:
	default:
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "size a concrete mode: resident, host or disk",
				   "cannot size residency mode '%s'",
				   strata_residency_mode_name(mode));
	}
	if (s != STRATA_OK)
		return s;
	s = strata_checked_add(w.static_bytes, w.window_bytes,
			       &w.required_bytes, "total bytes", err);
	if (s != STRATA_OK)
		return s;
	*out = w;
	return STRATA_OK;
}

strata_status strata_plan_size(const strata_plan_param *params, size_t n,
			       strata_plan_bytes_fn bytes, void *ctx,
			       const char *const *exclude, size_t n_exclude,
			       strata_residency_mode mode, uint64_t host_depth,
			       strata_plan_weights *out, strata_error *err)
{
	strata_plan_layout *l = NULL;
	strata_status s = strata_plan_layout_create(params, n, bytes, ctx,
						    exclude, n_exclude, &l, err);
	if (s != STRATA_OK)
		return s;
	s = strata_plan_layout_weights(l, mode, host_depth, out, err);
	strata_plan_layout_destroy(l);
	return s;
}
