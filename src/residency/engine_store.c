/* engine_store.c - the engine's read and convert hooks over the checkpoint
 * layer: reads and maps through a weight store, conversion to f32 at load
 * (layer: residency). */
#include <inttypes.h>

#include "strata/residency.h"

strata_status strata_residency_read_store(void *store,
					  const strata_tensor *const *tensors,
					  void *const *dst, size_t n,
					  strata_error *err)
{
	return strata_weight_store_read(store, tensors, dst, n, err);
}

strata_status strata_residency_map_store(void *store, const strata_tensor *t,
					 const void **data, strata_error *err)
{
	return strata_weight_store_map(store, t, data, err);
}

strata_status strata_residency_convert_f32(void *user, const strata_tensor *t,
					   const void *src, void *dst,
					   uint64_t dst_bytes, strata_error *err)
{
	(void)user;
	uint64_t need;
	strata_status s = strata_checked_mul(t->elements, 4, &need,
					     "converted tensor bytes", err);
	if (s != STRATA_OK)
		return s;
	if (need != dst_bytes)
		return strata_fail(err, STRATA_E_INTERNAL,
				   "this is a bug in the residency config; report it",
				   "tensor '%s': converting %" PRIu64
				   " elements to f32 needs %" PRIu64 " bytes, the slot has %" PRIu64,
				   t->name, t->elements, need, dst_bytes);
	s = strata_dtype_to_f32(t->dtype, src, t->elements, dst, err);
	if (s != STRATA_OK)
		strata_error_prefix(err, "converting tensor '%s' to f32", t->name);
	return s;
}
