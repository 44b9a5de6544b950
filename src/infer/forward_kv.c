/* forward_kv.c - KV save and restore of the forward pass's selected
 * sequence, for a replica's prefix cache (issue 9; src/infer/batch.c)
 * (layer: infer). */
#include "infer/forward_internal.h"

/* The layout of a saved prefix is, per layer in order, the key rows then the
 * value rows of positions [0, positions): (layers, 2, positions, kv_dim).
 * A host-memory cache is copied directly; a device one (device mode) goes
 * through the backend's copies (CUDA: device-to-host and host-to-device). */

static float *k_at(const strata_forward *f, uint32_t layer)
{
	return strata__forward_k_at(f, f->seq, layer, 0);
}

static float *v_at(const strata_forward *f, uint32_t layer)
{
	return strata__forward_v_at(f, f->seq, layer, 0);
}

/* ------------------------------------------------------------------------ */

strata_status strata_forward_kv_bytes(const strata_forward *f,
				      uint32_t positions, uint64_t *out,
				      strata_error *err)
{
	uint64_t rows, floats;
	if (strata_checked_mul((uint64_t)f->hp->layers * 2, positions, &rows,
			       "saved KV rows", err) ||
	    strata_checked_mul(rows, f->kv_dim, &floats, "saved KV floats",
			       err) ||
	    strata_checked_mul(floats, sizeof(float), out, "saved KV bytes",
			       err))
		return err ? err->code : STRATA_E_OVERFLOW;
	return STRATA_OK;
}

strata_status strata_forward_kv_save(const strata_forward *f,
				     uint32_t positions, float *dst,
				     uint64_t dst_bytes, strata_error *err)
{
	uint64_t need;
	strata_status st = strata_forward_kv_bytes(f, positions, &need, err);
	if (st)
		return st;
	if (positions > f->pos[f->seq] || dst_bytes < need)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "KV save: %u positions asked, %u cached; "
				   "%llu bytes given, %llu needed",
				   positions, f->pos[f->seq],
				   (unsigned long long)dst_bytes,
				   (unsigned long long)need);
	size_t row = (size_t)positions * f->kv_dim;
	/* device mode: the cache is device memory, read back by copies */
	for (uint32_t l = 0; row && st == STRATA_OK && l < f->hp->layers; l++) {
		st = strata__forward_download(f, dst, k_at(f, l),
					      row * sizeof(float), err);
		if (st == STRATA_OK)
			st = strata__forward_download(f, dst + row, v_at(f, l),
						      row * sizeof(float), err);
		dst += 2 * row;
	}
	return st ? st : strata__forward_finish(f, err);
}

strata_status strata_forward_kv_restore(strata_forward *f, const float *src,
					uint32_t saved, uint32_t positions,
					strata_error *err)
{
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
	size_t row = (size_t)positions * f->kv_dim;
	size_t stride = (size_t)saved * f->kv_dim;
	strata_status st = STRATA_OK;
	for (uint32_t l = 0; row && st == STRATA_OK && l < f->hp->layers; l++) {
		st = strata__forward_upload(f, k_at(f, l), src,
					    row * sizeof(float), err);
		if (st == STRATA_OK)
			st = strata__forward_upload(f, v_at(f, l), src + stride,
						    row * sizeof(float), err);
		src += 2 * stride;
	}
	if (st) {
		f->pos[f->seq] = 0; /* part of the cache was overwritten */
		return st;
	}
	f->pos[f->seq] = positions;
	return STRATA_OK;
}
