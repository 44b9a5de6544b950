/* forward_sites.c - a forward pass over a placement: each layer on the
 * site (a device of the split, or the CPU) its placement names, the
 * residual stream copied across when consecutive layers run on different
 * sites, and the KV cache of a layer computed away from its home staged
 * through a one-layer copy on the computing site (layer: infer).
 *
 * Every copy goes through the sites' compute contexts, ordered after the
 * kernels queued before it: where host code addresses the source (the CPU,
 * a CPU "device") the destination's context uploads from it; where it
 * addresses the destination the source's context downloads into it and
 * waits; between two sites out of host code's reach (two GPUs) through a
 * host buffer. On CPU sites each is a memcpy, so CI runs the same code
 * over several CPU backends.
 *
 * A layer's KV cache stays on its decode site for the run: decode, one
 * token per sequence, runs each layer where its cache is. A prefill chunk
 * may run a layer elsewhere (a cpu unit streamed to the GPU for a long
 * prompt, where the GPU wins): its positions [0, pos) are copied to the
 * computing site's staging pair first, and the chunk's new rows back after.
 * Resident units never move; the residency engine switches only the
 * streamed and cpu units between the two splits.
 */
#include <string.h>

#include "infer/forward_internal.h"

/* ------------------------------------------------------------------------ */

static uint32_t site_of(const strata_forward *f, uint32_t layer)
{
	return f->placed ? f->layer_site[f->prefill][layer] : 0;
}

static uint32_t kv_home(const strata_forward *f, uint32_t layer)
{
	return f->placed ? f->layer_site[0][layer] : 0;
}

/* The link a copy from site a to site b uses (STRATA_ACT_*). */
static unsigned link_of(const strata_forward *f, uint32_t a, uint32_t b)
{
	if (!f->site[a].device)
		return STRATA_ACT_HOST_TO_DEVICE;
	return f->site[b].device ? STRATA_ACT_DEVICE_TO_DEVICE
				 : STRATA_ACT_DEVICE_TO_HOST;
}

/* Copies bytes from src on site a to dst on site b, done when this
 * returns where b cannot be read by host code only once b's queue runs
 * (b's queue is ordered: its kernels see the bytes). */
static strata_status site_copy(strata_forward *f, uint32_t b, void *dst,
			       uint32_t a, const void *src, uint64_t bytes,
			       strata_error *err)
{
	strata_forward_site_state *from = &f->site[a], *to = &f->site[b];
	strata_status st;
	if (from->addressable)
		return strata_compute_upload(to->c, dst, src, bytes, err);
	if (to->addressable) {
		st = strata_compute_download(from->c, dst, src, bytes, err);
		return st ? st : strata_compute_finish(from->c, err);
	}
	if (!f->bounce || bytes > (uint64_t)f->rows * f->hp->dim * sizeof(float))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "keep a layer's KV cache on a site the host "
				   "addresses, or use one device",
				   "forward pass: %llu bytes between two sites "
				   "out of host code's reach",
				   (unsigned long long)bytes);
	if ((st = strata_compute_download(from->c, f->bounce, src, bytes, err)) ||
	    (st = strata_compute_finish(from->c, err)) ||
	    (st = strata_compute_upload(to->c, dst, f->bounce, bytes, err)))
		return st;
	/* the bounce buffer is the next copy's too */
	return strata_compute_finish(to->c, err);
}

/* Points f's working fields at site s's. */
static void use_site(strata_forward *f, uint32_t s)
{
	strata_forward_site_state *site = &f->site[s];
	f->cur = s;
	f->b = site->b;
	f->c = site->c;
	f->x = site->x;
	f->xb = site->xb;
	f->q = site->q;
	f->att = site->att;
	f->hb = site->hb;
	f->hb2 = site->hb2;
	f->k_new = site->k_new;
	f->v_new = site->v_new;
	f->inv_freq = site->inv_freq;
	f->inv_freq_local = site->inv_freq_local;
	f->norm_f32 = site->norm_f32;
	f->moe_logits = site->moe_logits;
	f->moe_in = site->moe_in;
	f->moe_out = site->moe_out;
	f->bias_f32 = site->bias_f32;
	f->own_bias = site->own_bias;
	f->logit_row = site->logit_row;
	f->logits_in_place = site->addressable;
}

/* ------------------------------------------------------------------------ */

strata_status strata__forward_move(strata_forward *f, uint32_t s,
				   uint32_t rows, bool copy, strata_error *err)
{
	uint32_t from = f->cur;
	if (s == from && f->x)
		return STRATA_OK;
	strata_status st = STRATA_OK;
	if (copy && rows && s != from) {
		uint64_t bytes = (uint64_t)rows * f->hp->dim * sizeof(float);
		uint64_t t0 = strata_now_ns();
		st = site_copy(f, s, f->site[s].x, from, f->site[from].x, bytes,
			       err);
		if (st)
			return strata_error_prefix(err, "residual stream from "
						   "site %u to %u", from, s);
		if (f->tel)
			strata_telemetry_record_activation(
				f->tel, link_of(f, from, s), bytes,
				strata_now_ns() - t0);
	}
	use_site(f, s);
	return st;
}

strata_status strata__forward_pass(strata_forward *f, bool prefill,
				   strata_error *err)
{
	if (!f->placed || f->prefill == prefill)
		return STRATA_OK;
	if (f->src->pass) {
		strata_status st = f->src->pass(f->src->user, prefill, err);
		if (st)
			return st;
	}
	f->prefill = prefill;
	return STRATA_OK;
}

/* Copies rows [p0, p1) of the selected sequence's keys and values of
 * `layer` between its home and the staging pair of site s (up: to s). */
static strata_status stage(strata_forward *f, uint32_t layer, uint32_t s,
			   void *const home[2], uint32_t p0, uint32_t p1,
			   bool up, strata_error *err)
{
	strata_forward_site_state *site = &f->site[s];
	uint32_t h = kv_home(f, layer);
	uint64_t off = strata__kv_offset(f->kv, f->seq, p0);
	uint64_t bytes = (uint64_t)(p1 - p0) * f->kv_dim * f->kv->elem_bytes;
	char *staged[2] = {(char *)site->k_stage + off,
			   (char *)site->v_stage + off};
	if (!bytes)
		return STRATA_OK;
	uint64_t t0 = strata_now_ns();
	strata_status st = STRATA_OK;
	for (int i = 0; i < 2 && st == STRATA_OK; i++)
		st = up ? site_copy(f, s, staged[i], h, (char *)home[i] + off,
				    bytes, err)
			: site_copy(f, h, (char *)home[i] + off, s, staged[i],
				    bytes, err);
	/* the staging pair is the next staged layer's too: the copy back
	 * must be done before it is overwritten */
	if (st == STRATA_OK && !up)
		st = strata_compute_finish(f->site[h].c, err);
	if (st == STRATA_OK && f->tel)
		strata_telemetry_record_kv_stage(f->tel, up, 2 * bytes,
						 strata_now_ns() - t0);
	return st;
}

strata_status strata__forward_layer_at(strata_forward *f, uint32_t layer,
				       uint32_t n, uint32_t pos,
				       strata_forward_layer_fn step, void *arg,
				       strata_error *err)
{
	uint32_t s = site_of(f, layer);
	strata_status st = strata__forward_move(f, s, n, true, err);
	if (st || kv_home(f, layer) == s)
		return st ? st : strata__forward_layer(f, layer, step, arg, err);
	/* computed away from its cache: through the staging pair (only a
	 * site some layer of the prefill split visits has one) */
	strata_kv_cache *kv = f->kv;
	void *home[2] = {kv->k[layer], kv->v[layer]};
	if (!f->site[s].stages)
		return strata_fail(err, STRATA_E_INTERNAL,
				   "this is a bug in strata; report it",
				   "layer %u runs on site %u, away from its KV "
				   "cache, without a staging buffer there",
				   layer, s);
	if ((st = stage(f, layer, s, home, 0, pos, true, err)))
		return strata_error_prefix(err, "layer %u's KV cache", layer);
	kv->k[layer] = f->site[s].k_stage;
	kv->v[layer] = f->site[s].v_stage;
	st = strata__forward_layer(f, layer, step, arg, err);
	kv->k[layer] = home[0];
	kv->v[layer] = home[1];
	if (st == STRATA_OK)
		st = stage(f, layer, s, home, pos, pos + n, false, err);
	return st;
}
