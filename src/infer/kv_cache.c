/* kv_cache.c - the KV cache: the keys and values of each sequence in one
 * pair of blocks of a backend arena, each sequence's cached positions, and
 * save and restore of a sequence's prefix for a prefix cache (issue 9;
 * src/serve/prefix_cache.c) (layer: infer). */
#include "infer/forward_internal.h"

/* A saved prefix is 2 x layers parts, one per layer's keys and one per its
 * values, each (positions, kv_dim) from position 0: the very rows of the
 * sequence's cache, so each part is one copy, through the compute
 * context's copies (a memcpy on the CPU; device-to-host and host-to-device
 * on CUDA), all of them queued before the one wait at the end: a wait per
 * copy would idle the copy engine between them. */

static float *part_at(const strata_kv_cache *kv, uint32_t seq, uint32_t part)
{
	return part % 2 ? strata__kv_values(kv, seq, part / 2, 0)
			: strata__kv_keys(kv, seq, part / 2, 0);
}

static strata_status check_count(const strata_kv_cache *kv, uint32_t seq,
				 uint32_t count, const char *what,
				 strata_error *err)
{
	uint32_t layers = kv->shape.layers;
	if (seq >= kv->shape.sequences)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV %s: sequence %u of %u", what, seq,
				   kv->shape.sequences);
	if (count == 2 * layers)
		return STRATA_OK;
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller",
			   "KV %s: %u parts given, %u needed (keys and values "
			   "of %u layers)",
			   what, count, 2 * layers, layers);
}

/* ------------------------------------------------------------------------ */

strata_status strata_kv_cache_keys_bytes(const strata_kv_cache_shape *s,
					 uint64_t *out, strata_error *err)
{
	if (!s || !out || !s->layers || !s->kv_dim || !s->context ||
	    !s->sequences || s->sequences > STRATA_FORWARD_MAX_SEQUENCES)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV cache: NULL argument, a zero count or "
				   "more than %u sequences",
				   STRATA_FORWARD_MAX_SEQUENCES);
	/* (sequences x layers x context) cannot overflow: each is 32 bits */
	uint64_t rows = (uint64_t)s->sequences * s->layers * s->context, n;
	if (strata_checked_mul(rows, s->kv_dim, &n, "key cache", err) ||
	    strata_checked_mul(n, sizeof(float), out, "key cache", err))
		return err ? err->code : STRATA_E_OVERFLOW;
	return STRATA_OK;
}

strata_status strata_kv_cache_create(const strata_kv_cache_shape *shape,
				     strata_arena *arena,
				     strata_compute *compute,
				     strata_kv_cache **out, strata_error *err)
{
	uint64_t bytes;
	strata_status st = strata_kv_cache_keys_bytes(shape, &bytes, err);
	if (st)
		return st;
	if (!arena || !compute || !out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV cache: NULL arena, compute or output");
	strata_kv_cache *kv = strata_calloc_or_error(1, sizeof *kv, "KV cache",
						     err);
	if (!kv)
		return STRATA_E_NOMEM;
	kv->shape = *shape;
	kv->arena = arena;
	kv->c = compute;
	void *k = NULL, *v = NULL;
	if ((st = strata_arena_alloc(arena, bytes, &k, err)) ||
	    (st = strata_arena_alloc(arena, bytes, &v, err))) {
		strata_arena_free(arena, k, NULL);
		strata_free(kv);
		return st;
	}
	kv->k = k;
	kv->v = v;
	*out = kv;
	return STRATA_OK;
}

void strata_kv_cache_destroy(strata_kv_cache *kv)
{
	if (!kv)
		return;
	strata_arena_free(kv->arena, kv->k, NULL);
	strata_arena_free(kv->arena, kv->v, NULL);
	strata_free(kv);
}

const strata_kv_cache_shape *strata_kv_cache_get_shape(const strata_kv_cache *kv)
{
	return &kv->shape;
}

uint32_t strata_kv_cache_position(const strata_kv_cache *kv, uint32_t seq)
{
	return seq < kv->shape.sequences ? kv->pos[seq] : 0;
}

void strata_kv_cache_reset(strata_kv_cache *kv, uint32_t seq)
{
	if (seq < kv->shape.sequences)
		kv->pos[seq] = 0;
}

strata_status strata_kv_cache_part_bytes(const strata_kv_cache *kv,
					 uint32_t positions, uint64_t *out,
					 strata_error *err)
{
	uint64_t floats;
	if (strata_checked_mul(positions, kv->shape.kv_dim, &floats,
			       "saved KV part floats", err) ||
	    strata_checked_mul(floats, sizeof(float), out,
			       "saved KV part bytes", err))
		return err ? err->code : STRATA_E_OVERFLOW;
	return STRATA_OK;
}

strata_status strata_kv_cache_bytes(const strata_kv_cache *kv,
				    uint32_t positions, uint64_t *out,
				    strata_error *err)
{
	uint64_t part;
	strata_status st = strata_kv_cache_part_bytes(kv, positions, &part,
						      err);
	if (st == STRATA_OK)
		st = strata_checked_mul((uint64_t)kv->shape.layers * 2, part,
					out, "saved KV bytes", err);
	return st;
}

strata_status strata_kv_cache_save(const strata_kv_cache *kv, uint32_t seq,
				   uint32_t positions, float *const *parts,
				   uint32_t count, uint64_t part_bytes,
				   strata_error *err)
{
	uint64_t need;
	strata_status st = strata_kv_cache_part_bytes(kv, positions, &need,
						      err);
	if (st || (st = check_count(kv, seq, count, "save", err)))
		return st;
	if (positions > kv->pos[seq] || part_bytes < need)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV save: %u positions asked, %u cached; "
				   "%llu bytes a part given, %llu needed",
				   positions, kv->pos[seq],
				   (unsigned long long)part_bytes,
				   (unsigned long long)need);
	for (uint32_t i = 0; need && st == STRATA_OK && i < count; i++)
		st = strata_compute_download(kv->c, parts[i],
					     part_at(kv, seq, i), need, err);
	/* Waited for even after a failed queueing: what is queued writes
	 * into the parts, which the caller may free once this returns. */
	strata_status fin = strata_compute_finish(kv->c, st ? NULL : err);
	return st ? st : fin;
}

strata_status strata_kv_cache_restore(strata_kv_cache *kv, uint32_t seq,
				      const float *const *parts,
				      uint32_t count, uint32_t saved,
				      uint32_t positions, strata_error *err)
{
	strata_status st = check_count(kv, seq, count, "restore", err);
	if (st)
		return st;
	if (positions > saved)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV restore: %u positions asked of %u saved",
				   positions, saved);
	if (positions > kv->shape.context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "raise --context",
				   "KV restore: %u positions do not fit the "
				   "context of %u",
				   positions, kv->shape.context);
	uint64_t bytes = (uint64_t)positions * kv->shape.kv_dim * sizeof(float);
	for (uint32_t i = 0; bytes && st == STRATA_OK && i < count; i++)
		st = strata_compute_upload(kv->c, part_at(kv, seq, i), parts[i],
					   bytes, err);
	strata_status fin = strata_compute_finish(kv->c, st ? NULL : err);
	if (st == STRATA_OK)
		st = fin;
	if (st) {
		kv->pos[seq] = 0; /* part of the cache was overwritten */
		return st;
	}
	kv->pos[seq] = positions;
	return STRATA_OK;
}
