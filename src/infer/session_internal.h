/* session_internal.h - what one session holds (layer: infer). Not a public
 * header: only session.c reads the fields; every other user, in serve, cli,
 * benches and tests, goes through the strata_session_* accessors of
 * include/strata/infer.h. */
#ifndef STRATA_INFER_SESSION_INTERNAL_H
#define STRATA_INFER_SESSION_INTERNAL_H

#include "strata/infer.h"

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
	const char *model_path; /* borrowed from the options */
	uint32_t context, batch; /* positions per sequence, prefill chunk */
	uint32_t sequences;	 /* the plan's --batch: KV caches */
	uint64_t load_ns; /* opening through the first loads */
	/* CUDA: device bytes the compute context took when it was made
	 * (cuBLAS and the runtime's own included), measured; the plan
	 * reserves this, not an estimate */
	uint64_t compute_device_bytes;
};

#endif
