/* engine_load.c - the residency engine's loads at create: the static
 * tensors and every unit that does not stream from disk, read (or mapped)
 * into their arenas, through a staging buffer where host code cannot
 * write the device (layer: residency). The background reads of the disk
 * mode are in engine_read.c. Called by the create (engine.c) through
 * engine_create.h. */
#include <inttypes.h>

#include "residency/engine_create.h"

/* A load through the staging buffer onto device `dev` (its own stream,
 * made for the load, where it is not the window's device): each tensor
 * read into the staging buffer, then its copy to the device queued at
 * once, so the link copies tensor i while tensor i+1 is read from disk or
 * the page cache and the load takes about the longer of the two, not
 * their sum (issue 25). The buffer is not reused within the call (each
 * tensor has its own offset), and the call waits for every copy before it
 * returns, so the next load may fill it again. *read_ns: the time spent
 * reading; *copy_ns: from the first copy queued to the last done (the
 * span the copies were in flight, overlapping the reads). */
static strata_status load_staged(strata_residency *e, uint32_t dev,
				 unsigned char *block,
				 const strata_residency_tensor *t, size_t count,
				 const uint64_t *offsets, uint64_t *moved,
				 uint64_t *read_ns, uint64_t *copy_ns,
				 strata_error *err)
{
	strata_backend *b = e->devices[dev];
	strata_stream *stream = e->copy_stream, *own = NULL;
	strata_status s = STRATA_OK;
	if (b != e->b || !stream) {
		s = strata_stream_create(b, &own, err);
		stream = own;
	}
	uint64_t first = 0;
	for (size_t i = 0; s == STRATA_OK && i < count; i++) {
		uint64_t t0 = strata_now_ns();
		s = strata__res_read_tensors(e, t + i, 1, offsets + i, e->staging,
					     &e->main_buf, err);
		uint64_t t1 = strata_now_ns();
		*read_ns += t1 - t0;
		if (s != STRATA_OK)
			break;
		uint64_t n = strata__res_tensor_exec(&t[i]);
		*moved += n;
		if (!first)
			first = t1;
		s = strata_backend_copy_h2d_async(b, stream, block + offsets[i],
						  e->staging + offsets[i], n, err);
	}
	/* wait even after an error: the staging buffer is reused */
	if (stream) {
		strata_status w = strata_backend_synchronize(b, stream,
							     s == STRATA_OK ? err : NULL);
		if (s == STRATA_OK)
			s = w;
	}
	*copy_ns = first ? strata_now_ns() - first : 0;
	if (own)
		strata_stream_destroy(b, own);
	return s;
}

/* On a backend whose device memory is this process's (the CPU), each
 * tensor of a device block kept as stored is mapped from its file
 * (cfg.map) rather than read into the block: no copy, and none of the
 * block's fresh pages faulted in, which was most of a load's time (issue
 * 25). A file that cannot be mapped, or a tensor at an address its
 * kernels could not read (below 4-byte alignment), is read as before. The
 * block stays allocated, so the tiers' figures are the plan's either way.
 * Fills e->main_buf.mapped[0..count). */
static strata_status map_tensors(strata_residency *e, strata_tier tier,
				 uint32_t dev, const strata_residency_tensor *t,
				 size_t count, strata_error *err)
{
	const void **m = e->main_buf.mapped;
	if (!m)
		return STRATA_OK;
	bool may = tier == STRATA_TIER_DEVICE &&
		   e->dev_caps[dev].device_addressable;
	for (size_t i = 0; i < count; i++) {
		m[i] = NULL;
		if (!may || t[i].convert || !t[i].tensor->bytes)
			continue;
		const void *p = NULL;
		strata_status s = e->cfg.map(e->cfg.read_user, t[i].tensor, &p,
					     err);
		if (s == STRATA_E_UNSUPPORTED)
			continue;
		if (s != STRATA_OK)
			return s;
		if ((uintptr_t)p % 4 == 0)
			m[i] = p;
	}
	return STRATA_OK;
}

/* Reads tensors into a fresh block of arena `a` on the calling thread
 * (or maps them, map_tensors: e->main_buf.mapped says which), charging
 * `tier` and recording the transfer; a device tier's block is on device
 * `dev`. */
static strata_status load_now(strata_residency *e, strata_arena *a,
			      strata_tier tier, strata_direction dir,
			      uint32_t dev,
			      const strata_residency_tensor *t, size_t count,
			      const uint64_t *offsets, uint64_t block_bytes,
			      uint64_t file_bytes,
			      unsigned char **out, strata_error *err)
{
	void *block = NULL;
	strata_status s = strata_arena_alloc(a, block_bytes, &block, err);
	if (s != STRATA_OK)
		return s;
	strata_telemetry_add_resident(&e->tel, tier, block_bytes);
	/* a device host code cannot write (CUDA) is loaded through the staging
	 * buffer, each tensor's copy overlapping the next one's read */
	bool staged = tier == STRATA_TIER_DEVICE &&
		      !e->dev_caps[dev].device_addressable;
	if (staged) {
		uint64_t moved = 0, read_ns = 0, copy_ns = 0;
		/* maps nothing here (the device is not addressable): clears
		 * the list the per-tensor reads and the caller look at */
		s = map_tensors(e, tier, dev, t, count, err);
		if (s == STRATA_OK)
			s = load_staged(e, dev, block, t, count, offsets, &moved, &read_ns,
				&copy_ns, err);
		if (s != STRATA_OK)
			return s; /* the block goes with the arena at destroy */
		strata_telemetry_record_transfer(&e->tel, STRATA_DIR_DISK_TO_HOST,
						 file_bytes, read_ns);
		strata_telemetry_record_transfer(&e->tel, STRATA_DIR_HOST_TO_DEVICE,
						 moved, copy_ns);
		*out = block;
		return STRATA_OK;
	}
	uint64_t t0 = strata_now_ns();
	s = map_tensors(e, tier, dev, t, count, err);
	if (s != STRATA_OK)
		return s;
	s = strata__res_read_tensors(e, t, count, offsets, (unsigned char *)block,
				     &e->main_buf, err);
	if (s != STRATA_OK)
		return s; /* the block goes with the arena at destroy */
	strata_telemetry_record_transfer(&e->tel, dir, file_bytes,
					 strata_now_ns() - t0);
	*out = block;
	return STRATA_OK;
}

/* The load-time staging buffer of a device host code cannot write: one
 * unit block or static tensor slot, charged to the host tier while it
 * exists (create only). */
strata_status strata__res_take_staging(strata_residency *e, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	bool addressable = true, units = c->mode == STRATA_RESIDENCY_RESIDENT;
	for (uint32_t d = 0; d < e->device_count; d++)
		addressable &= e->dev_caps[d].device_addressable;
	for (size_t i = 0; i < e->n; i++)
		units |= e->units[i].fixed;
	uint64_t need = units ? e->host_slot_bytes : 0;
	for (size_t i = 0; i < c->static_count; i++) {
		uint64_t b = 0;
		strata_status s = strata_checked_align(strata__res_tensor_exec(&c->statics[i]),
						       &b, "static tensor bytes", err);
		if (s != STRATA_OK)
			return s;
		if (b > need)
			need = b;
	}
	if (addressable || need == 0)
		return STRATA_OK;
	void *p = NULL;
	strata_status s = strata_backend_host_alloc(e->b, need, true, &p, err);
	if (s != STRATA_OK)
		return strata_error_prefix(err, "load staging buffer");
	e->staging = p;
	e->staging_bytes = need;
	strata_telemetry_add_resident(&e->tel, STRATA_TIER_HOST, need);
	return STRATA_OK;
}

void strata__res_drop_staging(strata_residency *e)
{
	if (!e->staging)
		return;
	strata_backend_host_free(e->b, e->staging);
	strata_telemetry_sub_resident(&e->tel, STRATA_TIER_HOST, e->staging_bytes);
	e->staging = NULL;
	e->staging_bytes = 0;
}

/* The file bytes the create loads: the statics, and every unit unless
 * they stream from disk. */
static uint64_t load_total(const strata_residency *e)
{
	const strata_residency_config *c = &e->cfg;
	uint64_t total = 0;
	for (size_t i = 0; i < c->static_count; i++)
		total = strata_sat_add_u64(total, c->statics[i].tensor->bytes);
	for (size_t i = 0; c->mode != STRATA_RESIDENCY_DISK && i < e->n; i++)
		total = strata_sat_add_u64(total, e->units[i].file_bytes);
	return total;
}

static void progress(const strata_residency *e, uint64_t *done,
		     uint64_t bytes, uint64_t total)
{
	*done = strata_sat_add_u64(*done, bytes);
	if (e->cfg.progress)
		e->cfg.progress(e->cfg.progress_user, *done, total);
}

/* Every unit, onto its device (resident, or fixed by the placement) or
 * into host memory. */
static strata_status load_units(strata_residency *e, uint64_t *done,
				uint64_t total, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	strata_status s = STRATA_OK;
	for (size_t i = 0; s == STRATA_OK && i < e->n; i++) {
		unit_slot *u = &e->units[i];
		unsigned char *block = NULL;
		bool resident = c->mode == STRATA_RESIDENCY_RESIDENT || u->fixed;
		uint32_t dev = u->fixed ? u->cfg->device : 0;
		s = load_now(e, resident ? e->dev_arenas[dev] : e->host_arena,
			     resident ? STRATA_TIER_DEVICE : STRATA_TIER_HOST,
			     resident ? STRATA_DIR_DISK_TO_DEVICE : STRATA_DIR_DISK_TO_HOST,
			     dev, u->cfg->tensors, u->cfg->tensor_count, u->offsets,
			     u->block_bytes, u->file_bytes, &block, err);
		if (s != STRATA_OK) {
			strata_error_prefix(err, "loading unit %" PRIu64 " of group '%s'",
					    u->cfg->unit, c->groups[u->cfg->group]);
			break;
		}
		if (resident) {
			const void **m = e->main_buf.mapped;
			u->dev_block = block;
			u->dev = DEV_READY;
			for (size_t t = 0; t < u->cfg->tensor_count; t++)
				u->data[t] = m && m[t] ? (void *)m[t]
						       : block + u->offsets[t];
		} else {
			u->host_block = block;
			u->host = HOST_CACHED;
		}
		progress(e, done, u->file_bytes, total);
	}
	return s;
}

strata_status strata__res_load_fixed(strata_residency *e, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	static const uint64_t zero_offset = 0;
	strata_status s = STRATA_OK;
	uint64_t done = 0, total = load_total(e);
	if (c->map && !(e->main_buf.mapped = strata_calloc_or_error(
				e->max_tensors ? e->max_tensors : 1,
				sizeof *e->main_buf.mapped, "mapped tensor list",
				err)))
		return STRATA_E_NOMEM;
	for (size_t i = 0; s == STRATA_OK && i < c->static_count; i++) {
		const strata_residency_tensor *t = &c->statics[i];
		unsigned char *block = NULL;
		uint64_t aligned = 0;
		s = strata_checked_align(strata__res_tensor_exec(t), &aligned,
					 "static tensor bytes", err);
		bool host = c->sizes.statics_on_host &&
			    c->mode == STRATA_RESIDENCY_PLACEMENT;
		if (s == STRATA_OK)
			s = load_now(e, host ? e->host_arena : e->dev_arenas[0],
				     host ? STRATA_TIER_HOST : STRATA_TIER_DEVICE,
				     host ? STRATA_DIR_DISK_TO_HOST
					  : STRATA_DIR_DISK_TO_DEVICE,
				     0, t, 1, &zero_offset, aligned,
				     t->tensor->bytes, &block, err);
		if (s == STRATA_OK) {
			const void **m = e->main_buf.mapped;
			e->static_data[i] = m && m[0] ? (void *)m[0] : block;
			progress(e, &done, t->tensor->bytes, total);
		} else {
			strata_error_prefix(err, "loading static tensor '%s'", t->tensor->name);
		}
	}
	if (s == STRATA_OK && c->mode != STRATA_RESIDENCY_DISK)
		s = load_units(e, &done, total, err);
	/* later reads on this thread (the window's) map nothing */
	strata_free(e->main_buf.mapped);
	e->main_buf.mapped = NULL;
	return s;
}
