/* session_place.c - the run of a placement: the split's devices beyond the
 * first (on the CPU, CPU backends each bounded by its device budget, so CI
 * runs a layer split; on CUDA the next GPUs), the CPU site that computes
 * cpu units and statics from host memory, and the forward pass's sites,
 * each layer on the one the plan's selected candidate names in decode and
 * in prefill (layer: infer).
 *
 * The window streams to the split's last device (the plan's rule,
 * strata_plan_unit_place), so the residency engine is made on it; the
 * resident units of every device and the host copies of the others are
 * the engine's too (one engine, per-unit placement).
 */
#include <string.h>

#include "infer/session_internal.h"

struct strata_session_placement {
	const strata_plan_candidate *c;
	uint32_t devices; /* of the split */
	strata_backend *device[STRATA_PLAN_MAX_DEVICES]; /* [0]: s->backend */
	strata_compute *compute[STRATA_PLAN_MAX_DEVICES]; /* [0]: s->compute */
	strata_backend *cpu_b;	/* the CPU site, or NULL */
	strata_compute *cpu_c;
	strata_forward_site sites[STRATA_FORWARD_MAX_SITES];
	uint32_t site_count, head_site;
	uint8_t *site_of[2]; /* [layers]: decode, prefill */
};

/* ------------------------------------------------------------------------ */

/* Whether the CPU computes anything: a cpu unit of either split, or the
 * statics. */
static bool cpu_computes(const strata_plan_candidate *c)
{
	return c->statics_on_cpu || c->cpu_units || c->prefill_cpu_units;
}

/* Device d > 0 of the split and its compute context: a CPU backend
 * bounded by the split's budget for d, or the CUDA device after the
 * first. */
static strata_status open_device(strata_session *s, strata_session_placement *p,
				 uint32_t d, uint32_t threads,
				 uint32_t device_index, strata_error *err)
{
	const strata_plan_options *o = strata_plan_get_options(s->plan);
	bool cpu = o->device == STRATA_PLAN_DEVICE_CPU;
	strata_backend_cpu_options co = {
		.device_budget_bytes =
			strata_plan_get_budgets(s->plan)->split_device_bytes[d],
	};
	strata_status st = strata_backend_create(cpu ? "cpu" : "cuda",
						 cpu ? 0 : device_index + d,
						 cpu ? &co : NULL,
						 &p->device[d], err);
	if (st == STRATA_OK)
		st = strata_compute_create_on_with(
			p->device[d],
			&(strata_compute_options){
				.threads = threads,
				.precision = s->compute->precision},
			&p->compute[d], NULL, err);
	if (st)
		strata_error_prefix(err, "device %u of the layer split", d);
	return st;
}

/* Each layer's site in either split: its device when resident, the last
 * device when streamed, the CPU site when computed there. */
static void place_layers(strata_session *s, strata_session_placement *p)
{
	uint32_t cpu = p->devices;
	for (uint32_t l = 0; l < s->hp.layers; l++)
		for (int k = 0; k < 2; k++) {
			strata_place where;
			uint32_t dev = 0;
			strata_plan_unit_place(p->c, s->hp.layers, l, k == 1,
					       &where, &dev);
			p->site_of[k][l] = (uint8_t)(where == STRATA_PLACE_CPU
							     ? cpu : dev);
		}
}

/* ------------------------------------------------------------------------ */

strata_status strata__session_place_open(strata_session *s, uint32_t threads,
					 uint32_t device_index,
					 strata_error *err)
{
	const strata_plan_candidate *c = strata_plan_selected(s->plan);
	if (!c || c->mode != STRATA_RESIDENCY_PLACEMENT)
		return STRATA_OK;
	strata_session_placement *p = strata_calloc_or_error(
		1, sizeof *p, "session placement", err);
	if (!p)
		return STRATA_E_NOMEM;
	s->place = p;
	p->c = c;
	p->devices = c->devices ? c->devices : 1;
	p->device[0] = s->backend;
	p->compute[0] = s->compute;
	strata_status st = STRATA_OK;
	for (uint32_t d = 1; st == STRATA_OK && d < p->devices; d++)
		st = open_device(s, p, d, threads, device_index, err);
	if (st == STRATA_OK && cpu_computes(c)) {
		st = strata_backend_cpu_create(NULL, &p->cpu_b, err);
		if (st == STRATA_OK)
			st = strata_compute_create_on_with(
				p->cpu_b,
				&(strata_compute_options){
					.threads = threads,
					.precision = s->compute->precision},
				&p->cpu_c, NULL, err);
	}
	for (int k = 0; st == STRATA_OK && k < 2; k++) {
		p->site_of[k] = strata_calloc_or_error(s->hp.layers, 1,
						       "layer sites", err);
		if (!p->site_of[k])
			st = STRATA_E_NOMEM;
	}
	if (st)
		return st;
	for (uint32_t d = 0; d < p->devices; d++)
		p->sites[d] = (strata_forward_site){p->device[d], p->compute[d],
						    true};
	p->site_count = p->devices;
	if (p->cpu_b)
		p->sites[p->site_count++] =
			(strata_forward_site){p->cpu_b, p->cpu_c, false};
	p->head_site = c->statics_on_cpu ? p->devices : 0;
	place_layers(s, p);
	return STRATA_OK;
}

void strata__session_place_window(strata_session *s,
				  strata_infer_window_options *wo,
				  strata_backend **window_backend)
{
	strata_session_placement *p = s->place;
	if (!p)
		return;
	*window_backend = p->device[p->devices - 1];
	wo->devices = p->device;
	wo->compute_stream = strata_compute_stream(p->compute[p->devices - 1]);
}

void strata__session_place_forward(strata_session *s,
				   strata_forward_options *fo)
{
	strata_session_placement *p = s->place;
	if (!p)
		return;
	fo->site_count = p->site_count;
	fo->sites = p->sites;
	fo->decode_site = p->site_of[0];
	fo->prefill_site = p->site_of[1];
	fo->head_site = p->head_site;
	fo->prefill_from = (uint32_t)p->c->crossing_chunk;
	fo->telemetry = strata_residency_telemetry(
		strata_infer_window_engine(s->window));
}

strata_status strata__session_place_reserve(strata_session *s, uint64_t bytes,
					    strata_error *err)
{
	strata_session_placement *p = s->place;
	strata_status st = strata_compute_reserve(s->compute, bytes, err);
	for (uint32_t d = 1; p && st == STRATA_OK && d < p->devices; d++)
		st = strata_compute_reserve(p->compute[d], bytes, err);
	return st;
}

void strata__session_place_close(strata_session *s)
{
	strata_session_placement *p = s->place;
	if (!p)
		return;
	for (uint32_t d = 1; d < p->devices; d++) {
		strata_compute_destroy(p->compute[d]);
		strata_backend_destroy(p->device[d]);
	}
	strata_compute_destroy(p->cpu_c);
	strata_backend_destroy(p->cpu_b);
	strata_free(p->site_of[0]);
	strata_free(p->site_of[1]);
	strata_free(p);
	s->place = NULL;
}
