/* residency.h - memory tiers, the unit window with background prefetch and
 * eviction, budget enforcement, and the telemetry recorder with its JSON
 * projection (layer: residency).
 *
 * The engine keeps a model's weights where the plan says: static tensors
 * pinned on the device for the whole run, execution units streamed through a
 * bounded device window (resident, host:D, disk modes of DESIGN.md). The
 * forward pass asks for a unit with acquire() and hands it back with
 * release(); everything else (reads, copies, eviction) happens behind those
 * two calls, on background threads, and is counted by the recorder.
 */
#ifndef STRATA_RESIDENCY_H
#define STRATA_RESIDENCY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/backend.h"
#include "strata/base.h"
#include "strata/checkpoint.h"
#include "strata/plan.h"

/* ------------------------------------------------------------------------ */
/* Tiers and transfer directions (seed 001; the order is part of the JSON)  */
/* ------------------------------------------------------------------------ */

#define STRATA_TIER_MAP(X)                                                     \
	X(DISK, "disk")                                                        \
	X(HOST, "host")                                                        \
	X(DEVICE, "device")

typedef enum strata_tier {
#define STRATA_TIER_ENUM(name, text) STRATA_TIER_##name,
	STRATA_TIER_MAP(STRATA_TIER_ENUM)
#undef STRATA_TIER_ENUM
	STRATA_TIER_COUNT
} strata_tier;

/* Fixed order: device_to_host, device_to_disk, host_to_device, host_to_disk,
 * disk_to_device, disk_to_host (DESIGN.md, telemetry document). */
#define STRATA_DIRECTION_MAP(X)                                                \
	X(DEVICE_TO_HOST, "device_to_host")                                    \
	X(DEVICE_TO_DISK, "device_to_disk")                                    \
	X(HOST_TO_DEVICE, "host_to_device")                                    \
	X(HOST_TO_DISK, "host_to_disk")                                        \
	X(DISK_TO_DEVICE, "disk_to_device")                                    \
	X(DISK_TO_HOST, "disk_to_host")

typedef enum strata_direction {
#define STRATA_DIRECTION_ENUM(name, text) STRATA_DIR_##name,
	STRATA_DIRECTION_MAP(STRATA_DIRECTION_ENUM)
#undef STRATA_DIRECTION_ENUM
	STRATA_DIRECTION_COUNT
} strata_direction;

const char *strata_tier_name(strata_tier t);	    /* "unknown" if out of range */
const char *strata_direction_name(strata_direction d); /* likewise */

/* ------------------------------------------------------------------------ */
/* The telemetry recorder                                                   */
/* ------------------------------------------------------------------------ */

typedef struct strata_transfer_stats {
	uint64_t count, bytes, ns;
} strata_transfer_stats;

/* A copy of the recorder's figures at one moment. Every counter saturates at
 * UINT64_MAX instead of wrapping. */
typedef struct strata_telemetry_snapshot {
	uint64_t planned_bytes[STRATA_TIER_COUNT];
	uint64_t budget_bytes[STRATA_TIER_COUNT]; /* 0: no budget given */
	uint64_t current_bytes[STRATA_TIER_COUNT];
	uint64_t peak_bytes[STRATA_TIER_COUNT];
	strata_transfer_stats transfers[STRATA_DIRECTION_COUNT];
	uint64_t prefetch_requests; /* unit loads started ahead of need */
	uint64_t prefetch_hits;	    /* acquires that found the unit ready */
	uint64_t prefetch_misses;   /* acquires whose unit was not yet asked for */
	uint64_t stalls;	    /* acquires that had to wait */
	uint64_t stall_ns;	    /* total time waited */
	uint64_t evictions, evicted_bytes; /* host lookahead cache */
	/* Per unit kind (strata_place: resident, window, cpu, disk): units
	 * acquired, their block bytes, and the time they were held (acquire
	 * to release: the compute of the unit where it runs; a cpu unit's is
	 * the CPU's compute time). */
	strata_transfer_stats units[STRATA_PLACE_COUNT];
	/* Activations crossing between the sites of a placement (the
	 * residual stream): host_to_device (CPU to a device),
	 * device_to_host, device_to_device. And the KV staging of a layer
	 * computed away from its cache: [0] to the computing site, [1] the
	 * new rows back. */
	strata_transfer_stats activations[3];
	strata_transfer_stats kv_staged[2];
} strata_telemetry_snapshot;

/* The activation links, in the order of snapshot.activations. */
#define STRATA_ACT_HOST_TO_DEVICE 0
#define STRATA_ACT_DEVICE_TO_HOST 1
#define STRATA_ACT_DEVICE_TO_DEVICE 2

/* The recorder itself: a snapshot behind a mutex, so background threads may
 * record while the forward pass does. Caller-owned storage (init/fini). */
typedef struct strata_telemetry {
	pthread_mutex_t lock;
	strata_telemetry_snapshot s;
} strata_telemetry;

/* E_THREAD if the mutex cannot be made; t is then not initialised. */
strata_status strata_telemetry_init(strata_telemetry *t, strata_error *err);
void strata_telemetry_fini(strata_telemetry *t);

void strata_telemetry_set_planned(strata_telemetry *t, strata_tier tier,
				  uint64_t bytes);
void strata_telemetry_set_budget(strata_telemetry *t, strata_tier tier,
				 uint64_t bytes);
/* Sets a tier's current resident bytes; its peak follows. */
void strata_telemetry_set_resident(strata_telemetry *t, strata_tier tier,
				   uint64_t bytes);
/* Adds to / subtracts from the current bytes (saturating at both ends). */
void strata_telemetry_add_resident(strata_telemetry *t, strata_tier tier,
				   uint64_t bytes);
void strata_telemetry_sub_resident(strata_telemetry *t, strata_tier tier,
				   uint64_t bytes);
void strata_telemetry_record_transfer(strata_telemetry *t, strata_direction d,
				      uint64_t bytes, uint64_t ns);
void strata_telemetry_record_prefetch(strata_telemetry *t);
void strata_telemetry_record_hit(strata_telemetry *t);
void strata_telemetry_record_miss(strata_telemetry *t);
void strata_telemetry_record_stall(strata_telemetry *t, uint64_t ns);
void strata_telemetry_record_eviction(strata_telemetry *t, uint64_t bytes);
/* A unit of kind `where` held for ns (bytes: its block). */
void strata_telemetry_record_unit(strata_telemetry *t, strata_place where,
				  uint64_t bytes, uint64_t ns);
/* An activation copy over link `link` (STRATA_ACT_*), and a KV staging
 * copy (up: to the computing site; else back). */
void strata_telemetry_record_activation(strata_telemetry *t, unsigned link,
					uint64_t bytes, uint64_t ns);
void strata_telemetry_record_kv_stage(strata_telemetry *t, bool up,
				      uint64_t bytes, uint64_t ns);
void strata_telemetry_get(strata_telemetry *t, strata_telemetry_snapshot *out);

/* ------------------------------------------------------------------------ */
/* The telemetry document (docs/telemetry.md)                               */
/* ------------------------------------------------------------------------ */

#define STRATA_TELEMETRY_SCHEMA_VERSION 1

/* One device's figures (one engine per device). */
typedef struct strata_telemetry_device {
	const char *name; /* "cpu", "cuda:0" */
	const strata_telemetry_snapshot *snapshot;
} strata_telemetry_device;

/* Everything the document says; pointers are borrowed for the call. */
/* The routed experts computed on the CPU with a device cache of hot ones
 * (infer's strata_infer_experts_stats, as the document shows them in
 * "experts"): expert calls routed, hits run on the device from the cache,
 * misses run on the CPU, experts copied into and out of the cache, and
 * the expert weight bytes each side computed with or copied. */
typedef struct strata_telemetry_experts {
	uint64_t layers, cache_slots;
	uint64_t routed, hits, misses, streamed, admissions, evictions;
	uint64_t cpu_bytes, device_bytes, upload_bytes;
} strata_telemetry_experts;

typedef struct strata_telemetry_report {
	const char *model;	  /* MODEL as given on the command line */
	const char *mode;	  /* "resident", "host", "disk" */
	uint64_t depth;		  /* device window depth in units */
	uint64_t lookahead_units; /* disk mode; else 0 */
	uint64_t queue_depth;	  /* disk mode; else 0 */
	uint64_t static_bytes;	  /* plan: pinned static tensors */
	uint64_t window_bytes;	  /* plan: the largest device window */
	/* plan: the KV cache's element type ("f32", "f16", "bf16"; NULL
	 * writes "f32") and its bytes (layers x keys and values) */
	const char *kv_type;
	uint64_t kv_cache_bytes;
	/* the compute contexts' numerics, --precision ("fast", "exact";
	 * NULL writes "fast", the default) */
	const char *precision;
	double load_seconds;	  /* opening, planning, first loads */
	double run_seconds;	  /* the forward passes */
	uint64_t tokens;	  /* positions computed */
	/* The sampler's seed, so a run can be repeated ("sampling": {"seed"});
	 * has_seed false: no sampling (logits), no object. */
	bool has_seed;
	uint64_t seed;
	/* Totals over every device. */
	const strata_telemetry_snapshot *residency;
	/* NULL: the document shows an empty store ("none"). */
	const strata_weight_store_stats *weight_store;
	size_t device_count;
	const strata_telemetry_device *devices;
	/* NULL: no experts on the CPU, no "experts" object */
	const strata_telemetry_experts *experts;
} strata_telemetry_report;

/* Writes the document as one JSON object into j (which the caller inits and
 * finishes); writer failures stick in j and show at strata_json_finish. */
void strata_telemetry_write_json(strata_json *j,
				 const strata_telemetry_report *r);

/* Adds b's counters into a (saturating; peaks and plans add too, since
 * devices are disjoint). For the document's totals over devices. */
void strata_telemetry_snapshot_add(strata_telemetry_snapshot *a,
				   const strata_telemetry_snapshot *b);

/* The end-of-run summary for people: bytes moved per direction with GB/s,
 * peak per tier against its budget, prefetch and stall figures. Writes to f
 * (the CLI passes stderr). */
void strata_telemetry_print_summary(FILE *f, const strata_telemetry_snapshot *s);

/* ------------------------------------------------------------------------ */
/* The engine                                                               */
/* ------------------------------------------------------------------------ */

/* Modes are the plan's (plan.h: strata_residency_mode, its names from
 * strata_residency_mode_name); AUTO is the planner's to resolve and is not a
 * mode the engine runs. */

typedef enum strata_eviction {
	STRATA_EVICT_LRU, /* least recently used, then lowest position */
	STRATA_EVICT_LFU, /* least often used, then least recent, then position */
} strata_eviction;

/* One tensor as the engine moves it. */
typedef struct strata_residency_tensor {
	const strata_tensor *tensor; /* the catalog's entry: file, offset, bytes */
	/* Bytes where it executes; 0: tensor->bytes. Differs when the tensor is
	 * converted at load (bf16 on disk, f32 on the CPU: twice the bytes). */
	uint64_t exec_bytes;
	bool convert; /* pass through config.convert after reading */
} strata_residency_tensor;

/* One execution unit: unit index `unit` of group `group`. */
typedef struct strata_residency_unit {
	uint32_t group; /* index into config.groups */
	uint64_t unit;
	size_t tensor_count;
	const strata_residency_tensor *tensors;
	/* PLACEMENT mode only: where the unit runs in a decode pass and in a
	 * prefill pass (strata_residency_set_pass): resident (then in both),
	 * window (streamed to the window's device) or cpu (handed out as its
	 * host copy), and the device index of a resident unit. */
	strata_place place, prefill_place;
	uint32_t device;
} strata_residency_unit;

/* Reads tensors[i]'s payload (tensors[i]->bytes, file dtype) into dst[i].
 * Called from background threads; must be thread-safe. */
typedef strata_status (*strata_residency_read_fn)(
	void *user, const strata_tensor *const *tensors, void *const *dst,
	size_t n, strata_error *err);

/* Maps one tensor kept as stored from its file (read-only, valid for the
 * engine's life) and sets *data to it: a resident tensor on a backend whose
 * device memory is this process's (the CPU) is then computed on in place,
 * never read or copied. E_UNSUPPORTED: this file cannot be mapped, the
 * engine reads the tensor instead; any other error fails the load. */
typedef strata_status (*strata_residency_map_fn)(void *user,
						 const strata_tensor *t,
						 const void **data,
						 strata_error *err);

/* The load's progress, on the creating thread: file bytes loaded so far of
 * those the create loads in all (statics, and every unit when resident or
 * host). */
typedef void (*strata_residency_progress_fn)(void *user, uint64_t done_bytes,
					     uint64_t total_bytes);

/* Converts one tensor from its file form (src, t->bytes) to its compute form
 * (dst, dst_bytes). Called from background threads. */
typedef strata_status (*strata_residency_convert_fn)(
	void *user, const strata_tensor *t, const void *src, void *dst,
	uint64_t dst_bytes, strata_error *err);

/* The plan's sizes the engine works to: strata_residency_config_from_plan
 * copies them from the plan's selected candidate, and nothing else sizes
 * the engine. Each tensor takes its own STRATA_ALIGN-aligned slot (the
 * plan's strata_plan_tensor_device_bytes), and a unit's tensors one block.
 * The engine takes its arenas of exactly these bytes and refuses at create
 * (E_RES_BUDGET naming the tier, what its tensors need and what the plan
 * gave) a config whose tensors they do not hold. */
typedef struct strata_residency_sizes {
	uint64_t depth;		      /* device window depth in units */
	uint64_t static_bytes;	      /* the seed's static sum (telemetry) */
	uint64_t window_bytes;	      /* the seed's largest window (telemetry) */
	uint64_t static_device_bytes; /* device: the static tensors' slots */
	uint64_t window_device_bytes; /* device: the window's unit blocks
					 (resident: every unit) */
	/* Host: host mode, every unit's block; disk mode, lookahead_units
	 * slots of the largest block (the plan's staging ring), or 0 to read
	 * straight into the device window (only where the device is
	 * host-addressable); resident, 0. Where the device is not
	 * host-addressable (CUDA), static tensors and resident units load
	 * through a pinned staging buffer of one slot that exists during
	 * create only. */
	uint64_t host_bytes;
	/* PLACEMENT: the window depth of the prefill split (depth is the
	 * decode split's), the devices and each one's resident units' bytes
	 * (device 0 also holds static_device_bytes, the last the window),
	 * and whether the statics sit in host memory (host_bytes counts them
	 * then) instead of on device 0. host_bytes: every unit not resident. */
	uint64_t prefill_depth;
	uint32_t device_count;
	uint64_t device_weight_bytes[STRATA_PLAN_MAX_DEVICES];
	bool statics_on_host;
} strata_residency_sizes;

typedef struct strata_residency_config {
	strata_residency_mode mode;
	strata_residency_sizes sizes; /* the plan's (config_from_plan) */
	uint64_t lookahead_units;  /* disk: units read ahead (>= 1) */
	uint64_t queue_depth;	   /* disk: background reads in flight (>= 1) */
	uint32_t reader_threads;   /* disk: 0 = 1 */
	strata_eviction eviction;  /* disk: host cache policy */
	size_t group_count;
	const char *const *groups; /* execution order of the groups */
	size_t static_count;
	const strata_residency_tensor *statics;
	size_t unit_count;
	const strata_residency_unit *units; /* any order; executed by (group, unit) */
	strata_residency_read_fn read;
	void *read_user;
	strata_residency_convert_fn convert; /* needed if any tensor converts */
	void *convert_user;
	/* PLACEMENT: the backends of devices 0 .. sizes.device_count - 1
	 * (borrowed, outliving the engine); the window streams to the last,
	 * which must be the engine's own backend. NULL: one device, b. */
	strata_backend *const *devices;
	strata_residency_map_fn map; /* optional, given read_user */
	strata_residency_progress_fn progress; /* optional */
	void *progress_user;
} strata_residency_config;

/* A unit's tensors on the device, valid until its release. */
typedef struct strata_residency_view {
	size_t count;
	const strata_residency_tensor *tensors; /* the config's, in its order */
	void *const *data;			/* device pointers, one per tensor */
} strata_residency_view;

typedef struct strata_residency strata_residency;

/* Checks the config and that the plan's sizes hold its tensors (the
 * static slots, the largest window of sizes.depth units of one group or
 * every unit when resident, the host blocks: measured with the plan's own
 * sizing, plan/sizing.c), takes the device arena (static + window device
 * bytes) and the host arena (host bytes), loads the static tensors (and in
 * resident mode every unit, in host mode every unit into host memory) and
 * starts the background reader (disk mode). The config's arrays and the
 * catalog tensors they point to must outlive the engine; nothing else is
 * retained. E_RES_BUDGET when a tier's size does not hold what it must
 * (naming the tier, the need and the size), E_INVALID_ARG for a bad
 * config, read and allocation errors as they come. On error nothing is
 * left allocated. The caller owns *out (strata_residency_destroy). */
strata_status strata_residency_create(strata_backend *b,
				      const strata_residency_config *cfg,
				      strata_residency **out,
				      strata_error *err);

/* Stops the background threads (after their current read), waits for copies
 * and frees everything, held units included. NULL is fine. */
void strata_residency_destroy(strata_residency *e);

/* Makes unit `unit` of group `group` (index into config.groups) resident on
 * the device and fills *view, waiting only if its load is not finished (a
 * recorded stall). Starts loads of the next units of the window. Errors:
 * E_NOT_FOUND for a unit not in the config, E_RES_STATE when the unit is
 * already held or a unit of another group is still held, E_RES_READER when a
 * background read failed (its message says which unit and why; the engine
 * stays failed). Not thread-safe: one forward pass drives one engine. */
strata_status strata_residency_acquire(strata_residency *e, uint32_t group,
				       uint64_t unit,
				       strata_residency_view *view,
				       strata_error *err);

/* PLACEMENT: switches between the decode split (prefill false, the
 * start) and the prefill split of the units not resident; window units
 * of the other split already on the device are dropped (resident units
 * never move). E_RES_STATE while a unit is held. A no-op in other modes
 * and when the split does not change. */
strata_status strata_residency_set_pass(strata_residency *e, bool prefill,
					strata_error *err);

/* Hands a held unit back: its device slot is free for the next prefetch.
 * E_RES_STATE when it is not held. */
strata_status strata_residency_release(strata_residency *e, uint32_t group,
				       uint64_t unit, strata_error *err);

/* Waits for the background work already started (reads, copies) and
 * records it, starting nothing new: the figures are then final, for the
 * telemetry document at the end of a run. E_RES_READER if a read failed. */
strata_status strata_residency_quiesce(strata_residency *e, strata_error *err);

/* A static tensor's device pointer by name; E_NOT_FOUND when absent. */
strata_status strata_residency_static(strata_residency *e, const char *name,
				      void **data,
				      const strata_residency_tensor **tensor,
				      strata_error *err);

/* The sizes the engine works to (the config's, as the plan gave them). */
void strata_residency_get_sizes(const strata_residency *e,
				strata_residency_sizes *out);
/* The engine's recorder (owned by the engine), for snapshots. */
strata_telemetry *strata_residency_telemetry(strata_residency *e);
/* The arena's own figures, for proving the peak (tests). */
void strata_residency_device_arena_stats(const strata_residency *e,
					 strata_arena_stats *out);
void strata_residency_host_arena_stats(const strata_residency *e,
				       strata_arena_stats *out);
/* Device d's arena (PLACEMENT: device d of the split; else d 0 is the
 * one device arena); zeros past the last. */
void strata_residency_device_arena_stats_at(const strata_residency *e,
					    uint32_t d,
					    strata_arena_stats *out);

/* A read hook over a weight store: pass the store as read_user. */
strata_status strata_residency_read_store(void *store,
					  const strata_tensor *const *tensors,
					  void *const *dst, size_t n,
					  strata_error *err);

/* The map hook over a weight store (strata_weight_store_map). */
strata_status strata_residency_map_store(void *store, const strata_tensor *t,
					 const void **data, strata_error *err);

/* A convert hook to f32 (F32, F16, BF16, Q8_0 through the checkpoint
 * layer's converter); dst_bytes must be 4 bytes per element. */
strata_status strata_residency_convert_f32(void *user, const strata_tensor *t,
					   const void *src, void *dst,
					   uint64_t dst_bytes, strata_error *err);

/* THE route from the plan to the engine: fills the mode, the sizes,
 * lookahead and queue of cfg from the plan's selected candidate (the other
 * fields are the caller's: groups, tensors, read hook). The sizes are the
 * candidate's own figures (static and window device bytes, depth, host
 * weights or lookahead ring), so the engine's arenas are the plan's bytes
 * and a run cannot take more than its plan; the rest of the device total
 * (KV cache, workspace) is the forward pass's. E_PLAN_NOTHING_FITS when the
 * plan selected nothing. */
strata_status strata_residency_config_from_plan(const strata_plan *p,
						strata_residency_config *cfg,
						strata_error *err);

#endif
