/* forward_kv.c - KV save and restore of the forward pass's selected
 * sequence, for a replica's prefix cache (issue 9; src/infer/batch.c)
 * (layer: infer). */
#include "infer/forward_internal.h"

/* A saved prefix is 2 x layers parts, one per layer's keys and one per its
 * values, each (positions, kv_dim) from position 0: the very rows of the
 * sequence's cache, so each part is one copy, through the compute
 * context's copies (a memcpy on the CPU; device-to-host and host-to-device
 * on CUDA), all of them queued before the one wait at the end: a wait per
 * copy would idle the copy engine between them. */

static float *k_at(const strata_forward *f, uint32_t layer)
{
	return strata__forward_k_at(f, f->seq, layer, 0);
}

static float *v_at(const strata_forward *f, uint32_t layer)
{
	return strata__forward_v_at(f, f->seq, layer, 0);
}

static float *part_at(const strata_forward *f, uint32_t part)
{
	return part % 2 ? v_at(f, part / 2) : k_at(f, part / 2);
}

static strata_status check_count(const strata_forward *f, uint32_t count,
				 const char *what, strata_error *err)
{
	if (count == 2 * f->hp->layers)
		return STRATA_OK;
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller",
			   "KV %s: %u parts given, %u needed (keys and values "
			   "of %u layers)",
			   what, count, 2 * f->hp->layers, f->hp->layers);
}

/* ------------------------------------------------------------------------ */

strata_status strata_forward_kv_part_bytes(const strata_forward *f,
					   uint32_t positions, uint64_t *out,
					   strata_error *err)
{
	uint64_t floats;
	if (strata_checked_mul(positions, f->kv_dim, &floats,
			       "saved KV part floats", err) ||
	    strata_checked_mul(floats, sizeof(float), out,
			       "saved KV part bytes", err))
		return err ? err->code : STRATA_E_OVERFLOW;
	return STRATA_OK;
}

strata_status strata_forward_kv_bytes(const strata_forward *f,
				      uint32_t positions, uint64_t *out,
				      strata_error *err)
{
	uint64_t part;
	strata_status st = strata_forward_kv_part_bytes(f, positions, &part,
							err);
	if (st == STRATA_OK)
		st = strata_checked_mul((uint64_t)f->hp->layers * 2, part, out,
					"saved KV bytes", err);
	return st;
}

strata_status strata_forward_kv_save(const strata_forward *f,
				     uint32_t positions, float *const *parts,
				     uint32_t count, uint64_t part_bytes,
				     strata_error *err)
{
	uint64_t need;
	strata_status st = strata_forward_kv_part_bytes(f, positions, &need,
							err);
	if (st || (st = check_count(f, count, "save", err)))
		return st;
	if (positions > f->pos[f->seq] || part_bytes < need)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV save: %u positions asked, %u cached; "
				   "%llu bytes a part given, %llu needed",
				   positions, f->pos[f->seq],
				   (unsigned long long)part_bytes,
				   (unsigned long long)need);
	for (uint32_t i = 0; need && st == STRATA_OK && i < count; i++)
		st = strata_compute_download(f->c, parts[i], part_at(f, i), need,
					      err);
	/* Waited for even after a failed queueing: what is queued writes
	 * into the parts, which the caller may free once this returns. */
	strata_status fin = strata_compute_finish(f->c, st ? NULL : err);
	return st ? st : fin;
}

strata_status strata_forward_kv_restore(strata_forward *f,
					const float *const *parts,
					uint32_t count, uint32_t saved,
					uint32_t positions, strata_error *err)
{
	strata_status st = check_count(f, count, "restore", err);
	if (st)
		return st;
	if (positions > saved)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV restore: %u positions asked of %u saved",
				   positions, saved);
	if (positions > f->context)
		return strata_fail(err, STRATA_E_INFER_CONTEXT,
				   "raise --context",
				   "KV restore: %u positions do not fit the "
				   "context of %u",
				   positions, f->context);
	uint64_t bytes = (uint64_t)positions * f->kv_dim * sizeof(float);
	for (uint32_t i = 0; bytes && st == STRATA_OK && i < count; i++)
		st = strata_compute_upload(f->c, part_at(f, i), parts[i], bytes,
					    err);
	strata_status fin = strata_compute_finish(f->c, st ? NULL : err);
	if (st == STRATA_OK)
		st = fin;
	if (st) {
		f->pos[f->seq] = 0; /* part of the cache was overwritten */
		return st;
	}
	f->pos[f->seq] = positions;
	return STRATA_OK;
}
