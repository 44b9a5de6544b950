/* backend.h - one interface over the machines strata computes on: memory,
 * copies, streams and events, then compute kernels (layer: backend).
 *
 * A backend is an object {ops, ctx}: `ops` is one const table per kind of
 * backend (cpu, cuda), `ctx` its private state. Every slot returns
 * strata_status. Callers use the strata_backend_* wrappers below, never the
 * slots directly: the wrappers check arguments once, so implementations can
 * trust them, and supply defaults for optional slots. These tables are the
 * only door to a device: code outside this layer names a kind of backend
 * by its text ("cpu", "cuda") and never calls one backend's own functions
 * (backend_cuda.h is for the backend's own tests and benches).
 *
 * Memory model. The "device" tier is one planned arena per run: a single
 * region of a fixed byte budget (one cudaMalloc on CUDA; a separate bounded
 * block of RAM on the CPU backend) that strata sub-allocates itself with
 * 256-byte alignment, so exceeding the plan is impossible by construction:
 * the arena refuses, and its own high-water mark proves the peak. Host
 * buffers that feed copies come from host_alloc (pinned on CUDA). Copies run
 * asynchronously on a copy stream; events recorded on a stream complete when
 * everything queued before them has, and carry a timestamp so the time
 * between two events is measurable (wall clock on the CPU backend).
 */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/backend_kernels.h"
#include "strata/base.h"

/* Every sub-allocation in an arena starts on STRATA_ALIGN (base.h). */

typedef struct strata_stream strata_stream; /* a queue of async work */
typedef struct strata_event strata_event;   /* a point in a stream */

/* What a backend can do, reported once instead of by trial calls. */
typedef struct strata_backend_caps {
	const char *name;	 /* "cpu", "cuda:0" */
	bool device_addressable; /* host code may read/write device pointers
				    (CPU: yes), so disk reads can land there */
	bool pinned_host;	 /* host_alloc can pin pages for faster copies */
	bool async_copy;	 /* copies overlap host work (a copy thread or
				    DMA engine) */
} strata_backend_caps;

/* Device memory as the backend sees it now. */
typedef struct strata_backend_memory {
	uint64_t total_bytes; /* the device's size (CPU: the configured bound) */
	uint64_t free_bytes;  /* not yet given to an arena */
} strata_backend_memory;

/* The slots. `ctx` is the backend's own state; stream and event pointers are
 * those the same backend returned. Arguments are already checked by the
 * wrappers (non-NULL, bytes > 0 where it matters). */
typedef struct strata_backend_ops {
	/* ---- memory, transfers, streams and events (residency) ---- */
	void (*destroy)(void *ctx);
	strata_status (*get_caps)(void *ctx, strata_backend_caps *out,
				  strata_error *err);
	strata_status (*memory_info)(void *ctx, strata_backend_memory *out,
				     strata_error *err);
	/* One region of `bytes` device memory, aligned to at least
	 * STRATA_ALIGN; E_DEVICE_OOM when it does not fit. */
	strata_status (*device_alloc)(void *ctx, uint64_t bytes, void **out,
				      strata_error *err);
	strata_status (*device_free)(void *ctx, void *ptr, strata_error *err);
	/* Host memory for copy sources; `pinned` asks for page-locked memory
	 * and is ignored where caps.pinned_host is false. */
	strata_status (*host_alloc)(void *ctx, uint64_t bytes, bool pinned,
				    void **out, strata_error *err);
	strata_status (*host_free)(void *ctx, void *ptr, strata_error *err);
	strata_status (*stream_create)(void *ctx, strata_stream **out,
				       strata_error *err);
	/* Waits for the stream's queued work, then frees it. */
	strata_status (*stream_destroy)(void *ctx, strata_stream *s,
					strata_error *err);
	/* Queues a host-to-device copy; `src` must stay valid and unchanged
	 * until an event recorded after it completes. */
	strata_status (*copy_h2d_async)(void *ctx, strata_stream *s, void *dst,
					const void *src, uint64_t bytes,
					strata_error *err);
	/* Queues a device-to-host copy; `dst` holds the bytes once an event
	 * recorded after it completes. */
	strata_status (*copy_d2h_async)(void *ctx, strata_stream *s, void *dst,
					const void *src, uint64_t bytes,
					strata_error *err);
	strata_status (*event_create)(void *ctx, strata_event **out,
				      strata_error *err);
	strata_status (*event_destroy)(void *ctx, strata_event *e,
				       strata_error *err);
	/* Marks the point after everything queued on `s` so far. Recording
	 * again moves the mark. */
	strata_status (*event_record)(void *ctx, strata_event *e,
				      strata_stream *s, strata_error *err);
	/* Blocks the calling thread until the event's point is reached; an
	 * event never recorded is complete. */
	strata_status (*event_wait)(void *ctx, strata_event *e,
				    strata_error *err);
	strata_status (*event_query)(void *ctx, strata_event *e, bool *done,
				     strata_error *err);
	/* Seconds between two completed events (end after start). */
	strata_status (*event_elapsed)(void *ctx, strata_event *start,
				       strata_event *end, double *seconds,
				       strata_error *err);
	/* Blocks until all work queued on `s` (or every stream, s == NULL) is
	 * done. */
	strata_status (*synchronize)(void *ctx, strata_stream *s,
				     strata_error *err);
	/* Optional (NULL: the wrapper waits for `e` on the host, which
	 * orders the same work without overlapping it): makes later work
	 * queued on `s` wait until `e` completes, without blocking the
	 * host. How compute waits for a unit's copy. */
	strata_status (*stream_wait_event)(void *ctx, strata_stream *s,
					   strata_event *e, strata_error *err);
	/* Optional (NULL: nothing to do): makes the calling thread able to
	 * use this backend's streams and events (CUDA: cudaSetDevice), for
	 * background threads that queue copies. */
	strata_status (*bind_thread)(void *ctx, strata_error *err);

	/* ---- compute kernels (infer): slots below belong to the inference
	 * work and are added there; residency never calls them. ---- */
	/* The backend's kernel table (backend_kernels.h); NULL when it
	 * cannot compute. Compute contexts are made from it with
	 * strata_compute_create. */
	const strata_kernel_ops *kernels;
} strata_backend_ops;

typedef struct strata_backend {
	const strata_backend_ops *ops;
	void *ctx;
} strata_backend;

/* ------------------------------------------------------------------------ */
/* The CPU backend                                                          */
/* ------------------------------------------------------------------------ */

typedef struct strata_backend_cpu_options {
	/* Bound on the simulated device memory (all arenas together);
	 * 0: unbounded (limited only by host memory). */
	uint64_t device_budget_bytes;
	/* For tests: report the device as not host-addressable (as CUDA is),
	 * so callers' staged paths run without a GPU. The memory stays RAM. */
	bool hide_addressable;
} strata_backend_cpu_options;

/* Creates the CPU backend; opt may be NULL. Its device memory is RAM kept
 * apart from host buffers and bounded by the option; copies are memcpy run
 * by one thread per stream, so copies really overlap compute. The caller
 * owns *out and frees it with strata_backend_destroy. */
strata_status strata_backend_cpu_create(const strata_backend_cpu_options *opt,
					strata_backend **out,
					strata_error *err);

/* The memory calls the CPU backend's device regions go through, so tests can
 * inject device OOM (STYLE.md: replaceable tables). Not to be changed while
 * a backend is allocating; strata_backend_cpu_sys_reset restores them. */
typedef struct strata_backend_cpu_sys_table {
	void *(*region_alloc)(size_t alignment, size_t bytes); /* NULL: OOM */
	void (*region_free)(void *ptr);
} strata_backend_cpu_sys_table;

extern strata_backend_cpu_sys_table strata_backend_cpu_sys;
void strata_backend_cpu_sys_reset(void);

/* ------------------------------------------------------------------------ */
/* Kinds of backend                                                         */
/* ------------------------------------------------------------------------ */

/* Devices of a kind usable now: "cpu" is 1; "cuda" the CUDA devices (0
 * without a driver or a GPU, or where strata was built without CUDA); 0
 * for any other text. */
uint32_t strata_backend_device_count(const char *kind);
/* Whether this build has the kind ("cuda" in a build with CUDA), asking no
 * driver: instant, for --version. */
bool strata_backend_has_kind(const char *kind);

/* The device memory a compute context takes at least on a device of this
 * kind (CUDA: its cuBLAS workspace and scratch), for plans made before any
 * context exists, also where the kind is not built (planning for another
 * machine); 0 for the CPU and unknown text. */
uint64_t strata_backend_compute_bytes(const char *kind);

/* The device memory the kind's runtime takes after a compute context is
 * made, as kernels first run (CUDA: each kernel's code as lazy loading
 * brings it in, and local memory grown for kernels that spill): no
 * measurement at context creation sees it, so plans add it to the
 * context's bytes, measured or not; 0 for the CPU and unknown text. */
uint64_t strata_backend_runtime_bytes(const char *kind);

/* The weight types (STRATA_WEIGHT_BIT of each, backend_kernels.h) the
 * kernel table of this kind computes on as stored, known also where the
 * kind is not built (planning for another machine); 0 for unknown text. */
uint32_t strata_backend_weight_types(const char *kind);

/* Creates the backend of `kind` ("cpu" or "cuda") on device `device` (cuda
 * only; the CPU has one), with cpu_opt for the CPU (may be NULL). E_USAGE
 * naming the text for an unknown kind; E_BACKEND_UNAVAILABLE with a fix
 * where the kind was not built or the device is missing; otherwise what
 * that backend's creation returns. The caller owns *out. */
strata_status strata_backend_create(const char *kind, uint32_t device,
				    const strata_backend_cpu_options *cpu_opt,
				    strata_backend **out, strata_error *err);

/* The backend named by --device: "cpu" (with cpu_opt, which may be NULL),
 * "cuda" (device 0) or "cuda:N". E_USAGE naming the text for anything else;
 * otherwise what strata_backend_create returns. */
strata_status strata_backend_create_named(const char *device,
					  const strata_backend_cpu_options *cpu_opt,
					  strata_backend **out,
					  strata_error *err);

/* ------------------------------------------------------------------------ */
/* Wrappers (use these)                                                     */
/* ------------------------------------------------------------------------ */

/* Frees the backend and its context. Streams, events and arenas made from it
 * must be destroyed first. NULL is fine. */
void strata_backend_destroy(strata_backend *b);

strata_status strata_backend_get_caps(strata_backend *b,
				      strata_backend_caps *out,
				      strata_error *err);
strata_status strata_backend_memory_info(strata_backend *b,
					 strata_backend_memory *out,
					 strata_error *err);

/* Host buffer of `bytes` (> 0) for copy sources; free with
 * strata_backend_host_free (NULL is fine). */
strata_status strata_backend_host_alloc(strata_backend *b, uint64_t bytes,
					bool pinned, void **out,
					strata_error *err);
void strata_backend_host_free(strata_backend *b, void *ptr);

strata_status strata_stream_create(strata_backend *b, strata_stream **out,
				   strata_error *err);
/* Drains then frees; NULL is fine. */
void strata_stream_destroy(strata_backend *b, strata_stream *s);

/* Queues a copy of `bytes` from host `src` to device `dst` on `s`. If this
 * returns an error nothing was queued and no later event covers it. */
strata_status strata_backend_copy_h2d_async(strata_backend *b,
					    strata_stream *s, void *dst,
					    const void *src, uint64_t bytes,
					    strata_error *err);
/* The same from device `src` to host `dst` (logits, saved KV). */
strata_status strata_backend_copy_d2h_async(strata_backend *b,
					    strata_stream *s, void *dst,
					    const void *src, uint64_t bytes,
					    strata_error *err);
/* Later work on `s` waits until `e` completes (a never-recorded event is
 * complete); the host is not blocked where the backend can avoid it. */
strata_status strata_stream_wait_event(strata_backend *b, strata_stream *s,
				       strata_event *e, strata_error *err);

strata_status strata_event_create(strata_backend *b, strata_event **out,
				  strata_error *err);
void strata_event_destroy(strata_backend *b, strata_event *e); /* NULL ok */
strata_status strata_event_record(strata_backend *b, strata_event *e,
				  strata_stream *s, strata_error *err);
strata_status strata_event_wait(strata_backend *b, strata_event *e,
				strata_error *err);
strata_status strata_event_query(strata_backend *b, strata_event *e,
				 bool *done, strata_error *err);
strata_status strata_event_elapsed(strata_backend *b, strata_event *start,
				   strata_event *end, double *seconds,
				   strata_error *err);
/* s == NULL: every stream of the backend. */
strata_status strata_backend_synchronize(strata_backend *b, strata_stream *s,
					 strata_error *err);
/* Call once on a thread other than the creating one before it queues work
 * (the residency engine's readers do). */
strata_status strata_backend_bind_thread(strata_backend *b, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Arenas: one bounded region, sub-allocated with 256-byte alignment        */
/* ------------------------------------------------------------------------ */

typedef enum strata_arena_kind {
	STRATA_ARENA_DEVICE,	  /* device memory (device_alloc) */
	STRATA_ARENA_HOST_PINNED, /* host memory for copies (host_alloc) */
} strata_arena_kind;

typedef struct strata_arena strata_arena;

typedef struct strata_arena_stats {
	uint64_t capacity_bytes;   /* the budget it was created with */
	uint64_t used_bytes;	   /* live blocks, alignment padding included */
	uint64_t high_water_bytes; /* most used_bytes ever */
	uint64_t live_blocks;
	uint64_t refused;	   /* allocations refused for lack of room */
} strata_arena_stats;

/* Takes one region of `capacity_bytes` from the backend (nothing when 0) and
 * hands out blocks from it. `what` names it in errors ("device window").
 * E_DEVICE_OOM (device) or E_NOMEM (host) when the region cannot be had.
 * The caller owns *out; destroy it before the backend. */
strata_status strata_arena_create(strata_backend *b, strata_arena_kind kind,
				  uint64_t capacity_bytes, const char *what,
				  strata_arena **out, strata_error *err);
/* Frees the region and the arena, live blocks included. NULL is fine. */
void strata_arena_destroy(strata_arena *a);

/* A block of `bytes` (> 0) starting on a STRATA_ALIGN boundary,
 * first fit. E_RES_BUDGET when no free run is large enough: the message
 * names the arena, the request, the bytes in use and the capacity. The
 * arena is unchanged on error. */
strata_status strata_arena_alloc(strata_arena *a, uint64_t bytes, void **out,
				 strata_error *err);
/* Returns a block; NULL is fine. A pointer the arena did not hand out is
 * E_INVALID_ARG and changes nothing. */
strata_status strata_arena_free(strata_arena *a, void *ptr, strata_error *err);
void strata_arena_get_stats(const strata_arena *a, strata_arena_stats *out);

#endif
