/* session_internal.h - what one session holds (layer: infer). Not a public
 * header: only session.c reads the fields; every other user, in serve, cli,
 * benches and tests, goes through the strata_session_* accessors of
 * include/strata/infer.h. */
#ifndef STRATA_INFER_SESSION_INTERNAL_H
#define STRATA_INFER_SESSION_INTERNAL_H

#include "strata/infer.h"

typedef struct strata_session_placement strata_session_placement;

/* Everything one run holds, opened in order: catalog, hyper-parameters,
 * tensors, plan, weight store, backend, residency window, compute, forward
 * pass. */
struct strata_session {
	strata_catalog *catalog;
	strata_infer_hparams hp;
	strata_infer_tensors tensors;
	strata_plan_source *plan_source;
	strata_plan *plan;
	strata_weight_store *store;
	strata_backend *backend;
	strata_infer_window *window;
	strata_infer_source source;
	strata_compute *compute;
	strata_forward *forward;
	char *model_path; /* a copy of the options' */
	uint32_t context, batch; /* positions per sequence, prefill chunk */
	uint32_t sequences;	 /* the plan's --batch: KV caches */
	uint64_t load_ns; /* opening through the first loads */
	/* CUDA: device bytes the compute context took when it was made
	 * (cuBLAS and the runtime's own included), measured; the plan
	 * reserves this, not an estimate */
	uint64_t compute_device_bytes;
	/* A placement (session_place.c): devices 1 .. of the split with
	 * their compute contexts (device 0 is backend / compute), the CPU's
	 * backend and compute where the CPU computes units or the statics,
	 * the forward pass's sites and each layer's site in either split. */
	strata_session_placement *place;
	/* The routed experts the plan puts on the CPU, or NULL */
	strata_infer_experts *experts;
};

/* session.c: the expert store's counts as the telemetry shows them */
void strata__session_experts_telemetry(const strata_session *s,
				       strata_telemetry_experts *out);

/* session_place.c */
/* Opens the split's other devices and the CPU site of a placement (a
 * no-op for the uniform modes), after the plan and the first backend;
 * their compute contexts take s->compute's precision. */
strata_status strata__session_place_open(strata_session *s, uint32_t threads,
					 uint32_t device_index,
					 strata_error *err);
/* The window's and the forward pass's options for the placement: the
 * window's device (the split's last) and the device list, the forward
 * pass's sites. Uniform modes leave both as they are. */
void strata__session_place_window(strata_session *s,
				  strata_infer_window_options *wo,
				  strata_backend **window_backend);
void strata__session_place_forward(strata_session *s,
				   strata_forward_options *fo);
/* Every product workspace the plan sized, on each device. */
strata_status strata__session_place_reserve(strata_session *s, uint64_t bytes,
					    strata_error *err);
void strata__session_place_close(strata_session *s);

#endif
