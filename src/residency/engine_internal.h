/* engine_internal.h - the residency engine's state, shared by its three
 * parts: the life cycle (engine.c, with the steps of its create in
 * engine_config.c, engine_sizes.c and engine_load.c), the window
 * (engine_window.c) and the reads (engine_read.c), each with its own
 * header (layer: residency). Not a public header; it declares no part's
 * functions. */
#ifndef STRATA_RESIDENCY_ENGINE_INTERNAL_H
#define STRATA_RESIDENCY_ENGINE_INTERNAL_H

#include <pthread.h>

#include "residency/engine_read.h"
#include "strata/residency.h"

typedef enum host_state { HOST_NONE, HOST_READING, HOST_CACHED } host_state;
typedef enum dev_state { DEV_NONE, DEV_LOADING, DEV_READY, DEV_HELD } dev_state;

/* One execution unit at its position in execution order. Its tensors sit
 * in one block per tier at the same offsets (each STRATA_ALIGN-aligned), so a host
 * copy and a device copy of a unit have one layout. */
typedef struct unit_slot {
	const strata_residency_unit *cfg;
	uint64_t exec_bytes;  /* sum of the tensors' exec bytes */
	uint64_t file_bytes;  /* sum of the tensors' checkpoint bytes */
	uint64_t block_bytes; /* the aligned layout's size */
	uint64_t *offsets;    /* per tensor, into the block */
	void **data;	      /* per tensor device pointers (the view) */
	host_state host;
	unsigned char *host_block;
	dev_state dev;
	unsigned char *dev_block;
	bool dev_by_reader; /* the device load is a disk read (host 0) */
	bool copy_pending;  /* a host-to-device copy from host_block is queued */
	strata_event *ev_start, *ev_end;
	uint64_t last_use, uses; /* host cache policy */
	/* PLACEMENT: where it runs in each split ([0] decode, [1] prefill);
	 * a resident unit (fixed) stays DEV_READY in its device's arena, a
	 * cpu unit of the current split is DEV_NONE or DEV_HELD with its
	 * view on the host block. Other modes: one uniform kind, not fixed. */
	strata_place place[2];
	bool fixed;
	uint64_t held_at; /* when acquired, for the per-kind telemetry */
} unit_slot;

struct strata_residency {
	strata_backend *b;
	strata_backend_caps caps;
	strata_residency_config cfg; /* cfg.sizes: the plan's, enforced */
	uint64_t host_slot_bytes; /* disk mode: one lookahead slot (largest unit) */
	strata_arena *dev_arena, *host_arena; /* dev_arena: the window's device */
	strata_stream *copy_stream;
	/* PLACEMENT: every device of the split (the last is b, its arena
	 * dev_arena); one device elsewhere. prefill: the current split. */
	uint32_t device_count;
	strata_backend *devices[STRATA_PLAN_MAX_DEVICES];
	strata_backend_caps dev_caps[STRATA_PLAN_MAX_DEVICES];
	strata_arena *dev_arenas[STRATA_PLAN_MAX_DEVICES];
	bool prefill;
	unit_slot *units; /* by (group, unit) */
	size_t n;
	size_t *group_begin; /* group g is positions [group_begin[g], group_begin[g + 1]) */
	void **static_data;
	size_t max_tensors;
	uint64_t scratch_bytes;
	reader_buffers main_buf;
	unsigned char *staging; /* create only, when the device is not addressable */
	uint64_t staging_bytes;

	/* forward-pass position */
	size_t cursor;	   /* position of the last acquired unit */
	bool cursor_valid; /* any unit acquired yet */
	bool cursor_done;  /* the cursor's unit has been handed out */
	uint32_t cur_group;
	uint64_t tick;

	/* background readers; lock guards the unit states they touch, the
	 * queue and the failure */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a job finished, or stop */
	bool lock_ok, cond_ok;
	pthread_t *threads;
	reader_buffers *thread_buf;
	uint32_t thread_count;
	bool stop;
	read_job *queue; /* ring of queue_cap */
	size_t q_head, q_len, q_cap;
	size_t in_flight; /* queued + being read */
	strata__res_read_done_fn read_done; /* the window's (engine_window.h) */
	bool failed;
	strata_error fail_err;

	strata_telemetry tel;
	bool tel_ok;
};

/* The window depth of the current split. */
static inline uint64_t strata__res_depth(const struct strata_residency *e)
{
	return e->cfg.mode == STRATA_RESIDENCY_PLACEMENT && e->prefill
		       ? e->cfg.sizes.prefill_depth
		       : e->cfg.sizes.depth;
}

/* Whether unit u streams through the window in the current split. */
static inline bool strata__res_streams(const struct strata_residency *e,
				       const unit_slot *u)
{
	if (e->cfg.mode != STRATA_RESIDENCY_PLACEMENT)
		return e->cfg.mode != STRATA_RESIDENCY_RESIDENT;
	return u->place[e->prefill] == STRATA_PLACE_WINDOW;
}

static inline uint64_t strata__res_tensor_exec(const strata_residency_tensor *t)
{
	return t->exec_bytes ? t->exec_bytes : t->tensor->bytes;
}

#endif
