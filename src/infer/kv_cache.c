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

static void *part_at(const strata_kv_cache *kv, uint32_t seq, uint32_t part)
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
	uint32_t eb = strata_kv_type_bytes(s->kv_type);
	if (!eb)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "use --kv-type f32, f16 or bf16",
				   "KV cache: no KV cache holds %s elements",
				   strata_weight_type_name(s->kv_type));
	/* (sequences x layers x context) cannot overflow: each is 32 bits */
	uint64_t rows = (uint64_t)s->sequences * s->layers * s->context, n;
	if (strata_checked_mul(rows, s->kv_dim, &n, "key cache", err) ||
	    strata_checked_mul(n, eb, out, "key cache", err))
		return err ? err->code : STRATA_E_OVERFLOW;
	return STRATA_OK;
}

/* The cache object and its per-layer arrays, no blocks yet. */
static strata_status start(const strata_kv_cache_shape *shape,
			   strata_kv_cache **out, strata_error *err)
{
	strata_kv_cache *kv = strata_calloc_or_error(1, sizeof *kv, "KV cache",
						     err);
	if (!kv)
		return STRATA_E_NOMEM;
	kv->shape = *shape;
	kv->elem_bytes = strata_kv_type_bytes(shape->kv_type);
	uint32_t n = shape->layers;
	kv->k = strata_calloc_or_error(n, sizeof *kv->k, "KV cache layers", err);
	kv->v = kv->k ? strata_calloc_or_error(n, sizeof *kv->v,
					       "KV cache layers", err)
		      : NULL;
	kv->c = kv->v ? strata_calloc_or_error(n, sizeof *kv->c,
					       "KV cache layers", err)
		      : NULL;
	kv->arena = kv->c ? strata_calloc_or_error(n, sizeof *kv->arena,
						   "KV cache layers", err)
			  : NULL;
	if (!kv->arena) {
		strata_kv_cache_destroy(kv);
		return STRATA_E_NOMEM;
	}
	*out = kv;
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
	if (!strata_kernel_kv_takes(compute, shape->kv_type))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "use --kv-type f32, or a backend that keeps "
				   "this KV type",
				   "KV cache: the %s kernels keep no %s KV cache",
				   compute->ops->name,
				   strata_weight_type_name(shape->kv_type));
	strata_kv_cache *kv = NULL;
	if ((st = start(shape, &kv, err)))
		return st;
	void *k = NULL, *v = NULL;
	if ((st = strata_arena_alloc(arena, bytes, &k, err)) ||
	    (st = strata_arena_alloc(arena, bytes, &v, err))) {
		strata_arena_free(arena, k, NULL);
		strata_kv_cache_destroy(kv);
		return st;
	}
	/* layer-major: each layer's (sequences, context, kv_dim) in turn */
	uint64_t per = bytes / shape->layers;
	for (uint32_t l = 0; l < shape->layers; l++) {
		kv->k[l] = (char *)k + l * per;
		kv->v[l] = (char *)v + l * per;
		kv->c[l] = compute;
		kv->arena[l] = arena;
	}
	*out = kv;
	return STRATA_OK;
}

strata_status strata__kv_cache_create_sites(const strata_kv_cache_shape *shape,
					    strata_arena *const *arenas,
					    strata_compute *const *computes,
					    strata_kv_cache **out,
					    strata_error *err)
{
	uint64_t bytes;
	strata_kv_cache_shape one = *shape;
	one.layers = 1;
	strata_status st = strata_kv_cache_keys_bytes(&one, &bytes, err);
	strata_kv_cache *kv = NULL;
	for (uint32_t l = 0; st == STRATA_OK && l < shape->layers; l++)
		if (!strata_kernel_kv_takes(computes[l], shape->kv_type))
			st = strata_fail(err, STRATA_E_UNSUPPORTED,
					 "use --kv-type f32, or a backend "
					 "that keeps this KV type",
					 "KV cache of layer %u: the %s kernels "
					 "keep no %s KV cache",
					 l, computes[l]->ops->name,
					 strata_weight_type_name(
						 shape->kv_type));
	if (st || (st = start(shape, &kv, err)))
		return st;
	kv->split = true;
	for (uint32_t l = 0; st == STRATA_OK && l < shape->layers; l++) {
		void *k = NULL, *v = NULL;
		kv->arena[l] = arenas[l];
		kv->c[l] = computes[l];
		if ((st = strata_arena_alloc(arenas[l], bytes, &k, err)) == STRATA_OK &&
		    (st = strata_arena_alloc(arenas[l], bytes, &v, err)) != STRATA_OK)
			strata_arena_free(arenas[l], k, NULL);
		if (st == STRATA_OK) {
			kv->k[l] = k;
			kv->v[l] = v;
		}
	}
	if (st) {
		strata_kv_cache_destroy(kv);
		return st;
	}
	*out = kv;
	return STRATA_OK;
}

void strata_kv_cache_destroy(strata_kv_cache *kv)
{
	if (!kv)
		return;
	for (uint32_t l = 0; kv->arena && l < kv->shape.layers; l++) {
		if (!kv->split && l > 0)
			break;
		strata_arena_free(kv->arena[l], kv->k[l], NULL);
		strata_arena_free(kv->arena[l], kv->v[l], NULL);
	}
	strata_free(kv->k);
	strata_free(kv->v);
	strata_free(kv->c);
	strata_free(kv->arena);
	strata_free(kv);
}

/* Waits for every compute context the cache copies through (each once). */
static strata_status finish_all(const strata_kv_cache *kv, strata_error *err)
{
	strata_status st = STRATA_OK;
	for (uint32_t l = 0; l < kv->shape.layers; l++) {
		bool seen = false;
		for (uint32_t m = 0; m < l && !seen; m++)
			seen = kv->c[m] == kv->c[l];
		if (seen)
			continue;
		strata_status f = strata_compute_finish(kv->c[l],
							st ? NULL : err);
		if (st == STRATA_OK)
			st = f;
	}
	return st;
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
			       "saved KV part elements", err) ||
	    strata_checked_mul(floats, kv->elem_bytes, out,
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
		st = strata_compute_download(kv->c[i / 2], parts[i],
					     part_at(kv, seq, i), need, err);
	/* Waited for even after a failed queueing: what is queued writes
	 * into the parts, which the caller may free once this returns. */
	strata_status fin = finish_all(kv, st ? NULL : err);
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
	uint64_t bytes = (uint64_t)positions * kv->shape.kv_dim * kv->elem_bytes;
	for (uint32_t i = 0; bytes && st == STRATA_OK && i < count; i++)
		st = strata_compute_upload(kv->c[i / 2], part_at(kv, seq, i),
					   parts[i], bytes, err);
	strata_status fin = finish_all(kv, st ? NULL : err);
	if (st == STRATA_OK)
		st = fin;
	if (st) {
		kv->pos[seq] = 0; /* part of the cache was overwritten */
		return st;
	}
	kv->pos[seq] = positions;
	return STRATA_OK;
}
