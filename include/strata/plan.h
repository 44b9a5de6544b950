/* plan.h - exact sizing of bounded weight residency (seed 001), the memory
 * model of a forward pass, the automatic planner with its explanation codes,
 * and throughput prediction (layer: plan).
 *
 * Planning reads headers only: every number here comes from tensor names,
 * dtypes and shapes, never from payload bytes.
 *
 * THE RUNTIME ALLOCATES THROUGH THESE NUMBERS. The residency engine takes
 * the selected candidate's own sizes (strata_residency_config_from_plan,
 * the one route) and enforces them; the forward pass sizes its buffers with
 * strata_plan_memory_compute (the function the planner used). So a plan
 * that fits is a run that fits: the device and host totals of the selected
 * candidate are ceilings the runtime never exceeds. Changing a buffer in
 * the engine means changing its formula here, in one place.
 */
#ifndef STRATA_PLAN_H
#define STRATA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/backend_kernels.h"
#include "strata/base.h"
#include "strata/checkpoint.h"
#include "strata/topology.h"

/* ------------------------------------------------------------------------ */
/* Modes and devices                                                        */
/* ------------------------------------------------------------------------ */

/* X(NAME, "text") */
#define STRATA_RESIDENCY_MAP(X)                                                \
	X(AUTO, "auto")                                                        \
	X(RESIDENT, "resident")                                                \
	X(HOST, "host")                                                        \
	X(DISK, "disk")                                                        \
	X(PLACEMENT, "placement")

/* PLACEMENT: units placed one by one (resident, window, cpu), the general
 * case; the other modes are its uniform special cases (DESIGN.md). */
typedef enum strata_residency_mode {
#define STRATA_RESIDENCY_ENUM(name, text) STRATA_RESIDENCY_##name,
	STRATA_RESIDENCY_MAP(STRATA_RESIDENCY_ENUM)
#undef STRATA_RESIDENCY_ENUM
} strata_residency_mode;

#define STRATA_PLAN_DEVICE_MAP(X)                                              \
	X(CPU, "cpu")                                                          \
	X(CUDA, "cuda")

typedef enum strata_plan_device {
#define STRATA_PLAN_DEVICE_ENUM(name, text) STRATA_PLAN_DEVICE_##name,
	STRATA_PLAN_DEVICE_MAP(STRATA_PLAN_DEVICE_ENUM)
#undef STRATA_PLAN_DEVICE_ENUM
} strata_plan_device;

/* Where one execution unit runs: X(NAME, "text"). resident: on a device
 * for the whole run; window: streamed through a device's window from host
 * memory; cpu: computed on the CPU from host memory; disk: read from the
 * checkpoint through the host lookahead. */
#define STRATA_PLACE_MAP(X)                                                    \
	X(RESIDENT, "resident")                                                \
	X(WINDOW, "window")                                                    \
	X(CPU, "cpu")                                                          \
	X(DISK, "disk")

typedef enum strata_place {
#define STRATA_PLACE_ENUM(name, text) STRATA_PLACE_##name,
	STRATA_PLACE_MAP(STRATA_PLACE_ENUM)
#undef STRATA_PLACE_ENUM
	STRATA_PLACE_COUNT
} strata_place;

/* "resident", "cpu", ...; "unknown" outside the enums. */
const char *strata_residency_mode_name(strata_residency_mode m);
const char *strata_plan_device_name(strata_plan_device d);
const char *strata_place_name(strata_place w);

/* Every buffer the plan sizes is rounded up to STRATA_ALIGN (base.h), the
 * arenas' alignment, with strata_checked_align. */

/* How one tensor executes on device d: the one rule the plan's sizes and
 * the residency window (infer) share, so what is planned is what is held
 * (DESIGN.md: weights stay in their stored type):
 * - a matrix (two or more dimensions) of a weight type d's kernel table
 *   takes (strata_backend_weight_types: every GGUF block type, F16, BF16
 *   and F32 on the CPU and on CUDA) stays as stored;
 * - a vector (norms, biases, rope factors) stays as stored when f32, or
 *   f16/bf16 on CUDA, whose norm and conversion kernels read them;
 * - integer and bool types stay as they are;
 * - every other floating tensor is converted to f32 at load (4 bytes an
 *   element).
 * `bytes` are unaligned (the file's bytes, or elements x 4). Errors:
 * E_CKPT_DTYPE for a type outside the table, E_OVERFLOW naming "tensor
 * device bytes". */
typedef struct strata_plan_exec {
	bool convert;	/* converted to f32 at load */
	uint64_t bytes; /* where it executes, unaligned */
} strata_plan_exec;
strata_status strata_plan_tensor_exec(const strata_tensor *t,
				      strata_plan_device d,
				      strata_plan_exec *out, strata_error *err);

/* Where-it-executes bytes of a matrix of `elements` elements of type t
 * (strata_plan_tensor_exec's rule, two dimensions), rounded up to
 * STRATA_ALIGN, because each tensor is its own aligned buffer. Errors as
 * strata_plan_tensor_exec's. */
strata_status strata_plan_tensor_device_bytes(strata_dtype t,
					      uint64_t elements,
					      strata_plan_device d,
					      uint64_t *out, strata_error *err);

/* ------------------------------------------------------------------------ */
/* Exact sizing (seed 001)                                                  */
/* ------------------------------------------------------------------------ */

/* The seed's four numbers for one residency mode. */
typedef struct strata_plan_weights {
	uint64_t static_bytes;	 /* sum of static tensors */
	uint64_t window_bytes;	 /* max over groups of `depth` consecutive units */
	uint64_t required_bytes; /* static + window */
	uint64_t depth;		 /* units of one group on the device at once */
} strata_plan_weights;

/* One tensor to size. file_bytes (its bytes in the checkpoint, for disk
 * read time) may be 0 when unknown; the device bytes come from a callback
 * so that excluded tensors are never evaluated. */
typedef struct strata_plan_param {
	const char *name;
	strata_owner owner;
	uint64_t file_bytes;
	/* The block type it computes as where it executes (F32 when
	 * converted, strata_plan_tensor_exec), for time prediction only: the
	 * product rate of that type prices it. 0 (F32) when not filled. */
	strata_block_type type;
} strata_plan_param;

/* Device bytes of params[index]. Called at most once per tensor, never for
 * an excluded one. A failure stops sizing and is returned as is. */
typedef strata_status (*strata_plan_bytes_fn)(void *ctx, size_t index,
					      uint64_t *bytes,
					      strata_error *err);

/* A sized layout: static bytes and, per group, the units sorted by index
 * (sparse: absent indices are simply not stored). Built once, then asked
 * for the window of any depth. */
typedef struct strata_plan_layout strata_plan_layout;

/* Builds a layout from n params, skipping those matching one of the
 * n_exclude fnmatch globs BEFORE asking their bytes (DESIGN.md). Time
 * O(n log n), memory O(n), whatever the unit indices. Every sum is checked:
 * E_OVERFLOW names "static bytes", "unit bytes", "group unit count" or
 * "total unit count". Allocation failure is E_NOMEM. The caller owns *out
 * (strata_plan_layout_destroy) and the params may go away afterwards only if
 * the layout's names are not needed (it keeps pointers to group names). */
strata_status strata_plan_layout_create(const strata_plan_param *params,
					size_t n, strata_plan_bytes_fn bytes,
					void *ctx, const char *const *exclude,
					size_t n_exclude,
					strata_plan_layout **out,
					strata_error *err);
void strata_plan_layout_destroy(strata_plan_layout *l); /* NULL is fine */

/* The same, with every tensor also in its own slot of `alignment` bytes
 * (the arenas' STRATA_ALIGN; 0 or 1: none): the callback gives each
 * tensor's exact bytes, which the seed's figures sum
 * (strata_plan_layout_weights, strata_plan_layout_exact_window_of, the
 * info's exact_* fields); every other sum (strata_plan_unit.bytes,
 * strata_plan_layout_window_of, static_bytes, all_units_bytes) is of the
 * slots, what a device or host region holds. Errors as above, and
 * E_OVERFLOW "tensor device bytes" when a slot does not fit in u64. */
strata_status strata_plan_layout_create_aligned(
	const strata_plan_param *params, size_t n, strata_plan_bytes_fn bytes,
	void *ctx, const char *const *exclude, size_t n_exclude,
	uint64_t alignment, strata_plan_layout **out, strata_error *err);

/* Summary of a layout. unit_count is the seed's: per group the last index
 * + 1 (absent indices count), summed over groups. span is the largest
 * last - first + 1 of one group: a window that deep holds a whole group. */
typedef struct strata_plan_layout_info {
	uint64_t static_bytes;
	uint64_t unit_count;
	uint64_t span;
	uint64_t groups;
	uint64_t occupied_units;     /* distinct {group, unit} present */
	uint64_t all_units_bytes;    /* sum of every unit of every group */
	uint64_t largest_unit_bytes; /* one {group, unit}, device bytes */
	uint64_t largest_static_bytes; /* one static tensor, in its slot */
	uint64_t unit_file_bytes;    /* sum of file_bytes of unit tensors */
	uint64_t sized_tensors, excluded_tensors;
	/* the seed's sums of the tensors' own bytes (no slots): equal to
	 * static_bytes and all_units_bytes in a layout without alignment */
	uint64_t exact_static_bytes, exact_all_units_bytes;
	/* The static bytes a pass computes on, per block type (exact): every
	 * static tensor but the embedding when an output head exists (the
	 * embedding is then a row lookup; tied, it is the head). */
	uint64_t static_compute_type_bytes[STRATA_BLOCK_COUNT];
} strata_plan_layout_info;

void strata_plan_layout_get_info(const strata_plan_layout *l,
				 strata_plan_layout_info *out);

/* The largest sum of bytes over `depth` consecutive unit indices of one
 * group, maximised over groups (absent indices weigh 0; depth 0 gives 0).
 * O(occupied units). E_OVERFLOW names "window bytes". */
strata_status strata_plan_layout_window(const strata_plan_layout *l,
					uint64_t depth, uint64_t *out,
					strata_error *err);

/* One occupied {group, unit} of a layout, in layout order (group, then
 * index): what a placement assigns. group points into the layout's names. */
typedef struct strata_plan_unit {
	const char *group;
	size_t group_len;
	uint64_t unit;
	uint64_t bytes;	      /* device bytes of its tensors, in their slots */
	uint64_t exact_bytes; /* the same without the slots (the seed's) */
	/* exact_bytes by the block type each tensor computes as */
	uint64_t type_bytes[STRATA_BLOCK_COUNT];
	/* the part of type_bytes that is routed experts' tensors
	 * (strata_plan_expert_layer): a pass reads and computes only the
	 * experts its rows route to (docs/plan.md "Cost model") */
	uint64_t expert_type_bytes[STRATA_BLOCK_COUNT];
} strata_plan_unit;

/* Occupied units (layout_info.occupied_units) and the i-th of them. */
size_t strata_plan_layout_unit_count(const strata_plan_layout *l);
void strata_plan_layout_unit_at(const strata_plan_layout *l, size_t i,
				strata_plan_unit *out);

/* The seed's window over a subset of the units: the largest sum of bytes
 * over `depth` consecutive unit indices of one group where only units i
 * with streamed[i] (layout order) weigh, the others weighing 0 like absent
 * indices. streamed NULL: every unit (= strata_plan_layout_window). */
strata_status strata_plan_layout_window_of(const strata_plan_layout *l,
					   uint64_t depth,
					   const bool *streamed,
					   uint64_t *out, strata_error *err);
/* The same window of the tensors' exact bytes (the seed's figure). */
strata_status strata_plan_layout_exact_window_of(const strata_plan_layout *l,
						 uint64_t depth,
						 const bool *streamed,
						 uint64_t *out,
						 strata_error *err);

/* The seed's numbers for a mode, of the tensors' exact bytes (a layout
 * made with an alignment keeps its slots out of them): RESIDENT -> depth
 * = unit count, window =
 * every unit of every group; HOST -> depth = host_depth (not clamped);
 * DISK -> depth = min(unit count, 2). AUTO is E_INVALID_ARG. E_OVERFLOW
 * names "window bytes" or "total bytes". */
strata_status strata_plan_layout_weights(const strata_plan_layout *l,
					 strata_residency_mode mode,
					 uint64_t host_depth,
					 strata_plan_weights *out,
					 strata_error *err);

/* One call: layout_create + layout_weights + destroy. */
strata_status strata_plan_size(const strata_plan_param *params, size_t n,
			       strata_plan_bytes_fn bytes, void *ctx,
			       const char *const *exclude, size_t n_exclude,
			       strata_residency_mode mode, uint64_t host_depth,
			       strata_plan_weights *out, strata_error *err);

/* ------------------------------------------------------------------------ */
/* From a checkpoint catalog                                                */
/* ------------------------------------------------------------------------ */

/* A catalog's tensors as sizing params for one device: owners from the
 * topology rule, device bytes from strata_plan_tensor_device_bytes, file
 * bytes from the catalog, excluded tensors never sized. Reads no payload. */
typedef struct strata_plan_source strata_plan_source;

/* The catalog and the exclude globs must outlive the source. Errors: a
 * tensor name the topology refuses (E_OVERFLOW), an unsized dtype
 * (E_CKPT_DTYPE naming the tensor), sizing overflows, E_NOMEM. The caller
 * owns *out. */
strata_status strata_plan_source_create(const strata_catalog *c,
					strata_plan_device device,
					const char *const *exclude,
					size_t n_exclude,
					strata_plan_source **out,
					strata_error *err);
void strata_plan_source_destroy(strata_plan_source *s); /* NULL is fine */
const strata_plan_layout *strata_plan_source_layout(const strata_plan_source *s);
/* The floating dtype holding the most file bytes among sized tensors; F32
 * when there is none. (It once decided the KV element on cuda; the KV cache
 * is f32 everywhere now, and the parameter it feeds is kept for callers.) */
strata_dtype strata_plan_source_weight_dtype(const strata_plan_source *s);
/* Owner of catalog tensor i (as classified), for callers that group the
 * tensors the same way the plan did (the residency config). */
const strata_owner *strata_plan_source_owner(const strata_plan_source *s,
					     size_t i);
/* Whether catalog tensor i was excluded by a glob. */
bool strata_plan_source_excluded(const strata_plan_source *s, size_t i);

/* ------------------------------------------------------------------------ */
/* Memory model beyond weights                                              */
/* ------------------------------------------------------------------------ */

/* What the memory model needs from the architecture. known == false: the
 * checkpoint's family is unknown (no config.json, or one strata cannot
 * run); the fields are then ignored and reported as unknown. */
typedef struct strata_plan_arch {
	bool known;
	const char *family; /* NULL when unknown */
	uint64_t layers, hidden, intermediate, heads, kv_heads, head_dim;
	uint64_t vocab, max_context;
	/* What the forward pass's buffers need beyond the shapes (the infer
	 * layer's strata_infer_plan_arch fills them from the model): routed
	 * experts a layer (0: dense), sliding layers with a rope base of
	 * their own, and norms computed as 1 + w from f32 copies. */
	uint64_t experts, experts_used; /* and routed to a token */
	bool local_rope, norm_plus_one;
	/* known == false: why, copied into the architecture_unknown
	 * explanation; may be NULL. */
	const char *unknown_reason;
} strata_plan_arch;

/* Token geometry of a run. Tokens in flight per forward pass are
 * max(prefill_chunk, batch): a pass is a prefill chunk or one step of the
 * batch (decode tokens and prompt chunks together, issue 19); the chunk is
 * at most context x batch (a step's prompt chunks of every sequence). */
typedef struct strata_plan_shape {
	uint64_t context, batch, prefill_chunk;
	/* The KV cache's elements (--kv-type): STRATA_WEIGHT_F32 (0, the
	 * default: exact), _F16 or _BF16 (half the bytes); any other type
	 * is the planner's E_PLAN_OPTIONS. */
	strata_weight_type kv_type;
} strata_plan_shape;

/* The one set of shape defaults `strata plan` and `strata run` share, so
 * that the same options size the same shapes in both (issue 17): a field
 * left 0 takes
 * - context: the trained context, at most STRATA_PLAN_DEFAULT_CONTEXT
 *   (STRATA_PLAN_UNKNOWN_CONTEXT when trained is 0, unknown), raised to
 *   `needed` positions when the run in hand needs more (plan: 0);
 * - batch: 1;
 * - prefill chunk: STRATA_PLAN_DEFAULT_PREFILL_CHUNK, at most the context.
 * Given fields stay as they are (an explicit chunk above the context is
 * the planner's E_PLAN_OPTIONS, a context above the trained one the
 * session's E_INFER_CONTEXT). */
#define STRATA_PLAN_DEFAULT_CONTEXT 4096u
#define STRATA_PLAN_UNKNOWN_CONTEXT 2048u
#define STRATA_PLAN_DEFAULT_PREFILL_CHUNK 512u
void strata_plan_shape_defaults(strata_plan_shape *s, uint64_t trained,
				uint64_t needed);

/* The buffers of one forward pass on each site that computes (a device,
 * or the CPU computing units or the statics from host memory), exactly the
 * ones the forward pass takes (src/infer/forward_create.c sizes its arenas
 * with strata_plan_site_bytes), all f32, each its own buffer rounded up to
 * STRATA_ALIGN. T = max(prefill_chunk, batch) rows in flight. Keys and
 * values go straight into an f32 KV cache of one sequence (an f16/bf16
 * cache's pass through the key and value buffers) and the tiled attention
 * keeps no score matrix. X(field, "json name", "shape") */
#define STRATA_PLAN_ACTIVATION_MAP(X)                                          \
	X(x, "residual", "[T, hidden]")                                        \
	X(xb, "normed", "[T, hidden]")                                         \
	X(xb2, "attention_out", "[T, heads * head_dim]")                       \
	X(q, "query", "[T, heads * head_dim]")                                 \
	X(k, "key", "[T, kv_heads * head_dim] with batch > 1 or an f16/bf16 " \
		    "KV cache (new keys before they are stored), else 0")       \
	X(v, "value", "the same, values")                                      \
	X(hb, "mlp_gate", "[T, intermediate]")                                 \
	X(hb2, "mlp_up", "[T, intermediate]")                                  \
	X(rope, "rope_frequencies", "[head_dim / 2], twice with local rope")  \
	X(moe, "expert_rows", "[T, experts] + 2 x [T, hidden], with experts")  \
	X(norms, "norm_weights", "[4 hidden + 2 head_dim] with 1 + w norms")   \
	X(bias, "biases", "[max(heads * head_dim + 2 kv_heads * head_dim, "    \
			  "head_dim / 2)] when T x intermediate is smaller")

/* Device and host buffers besides the weights, in bytes. All zero and
 * arch_known false when the architecture is unknown. */
typedef struct strata_plan_memory {
	bool arch_known;
	uint64_t kv_element_bytes; /* 4 (f32, the default), 2 (f16, bf16) */
	uint64_t kv_buffer_bytes;  /* one K or one V of one layer, aligned:
				      [batch, context, kv_heads * head_dim] */
	uint64_t kv_cache_bytes;   /* layers x 2 x kv_buffer_bytes */
#define STRATA_PLAN_ACT_FIELD(field, json, shape) uint64_t field##_bytes;
	STRATA_PLAN_ACTIVATION_MAP(STRATA_PLAN_ACT_FIELD)
#undef STRATA_PLAN_ACT_FIELD
	uint64_t workspace_bytes; /* sum of the activation buffers above:
				     every computing site takes them */
	/* [batch, vocab]: the logits rows of the head's site where host code
	 * cannot address it (CUDA; on the CPU they go to the caller's
	 * buffer): counted on that site only. */
	uint64_t logits_bytes;
	/* CUDA with bf16/f16 weights: the several-row products' input, x
	 * split in two half terms, for max(prefill chunk, batch) rows of the
	 * widest input (hidden, intermediate, heads x head_dim); else 0. */
	uint64_t product_workspace_bytes;
	/* Pinned host staging ring: slots x slot bytes (largest unit). */
	uint64_t staging_slots, staging_slot_bytes, staging_bytes;
} strata_plan_memory;

/* The one function that sizes every non-weight buffer (formulas above).
 * weight_dtype is the dominant floating dtype of the weights (on CUDA, half
 * weights need the product workspace); the KV cache's elements are
 * shape->kv_type's (E_PLAN_OPTIONS for a type no KV cache holds). largest_unit_bytes and staging_slots size the ring.
 * E_OVERFLOW names the buffer whose size overflowed. */
strata_status strata_plan_memory_compute(const strata_plan_arch *arch,
					 const strata_plan_shape *shape,
					 strata_plan_device device,
					 strata_dtype weight_dtype,
					 uint64_t largest_unit_bytes,
					 uint64_t staging_slots,
					 strata_plan_memory *out,
					 strata_error *err);

/* The bytes of one forward-pass site's arena, exactly what the forward
 * pass takes there (m from strata_plan_memory_compute): the workspace;
 * the KV cache of kv_layers layers, each layer's pair its own
 * (kv_layers == UINT64_MAX: one site holding every layer, the cache as one
 * pair of blocks, kv_cache_bytes); a staged layer's keys and values when
 * the site stages (a layer the prefill split computes here and decode
 * elsewhere); and the logits rows when it is the head's site and host code
 * cannot address it (CUDA). Saturates. 0 when the architecture is
 * unknown. */
uint64_t strata_plan_site_bytes(const strata_plan_memory *m,
				uint64_t kv_layers, bool stages,
				bool head_unaddressable);

/* ------------------------------------------------------------------------ */
/* Budgets                                                                  */
/* ------------------------------------------------------------------------ */

/* Headroom left free when a budget comes from the machine rather than an
 * option: cpu (RAM) max(10% of MemAvailable, 1 GiB); cuda max(5% of free
 * device memory, 512 MiB) for the CUDA context and cuBLAS workspace. */
uint64_t strata_plan_headroom(strata_plan_device d, uint64_t available);

/* Parses /proc/meminfo text for MemAvailable (kB) into bytes. E_PARSE when
 * the field is missing or malformed, E_OVERFLOW when it does not fit. */
strata_status strata_plan_parse_meminfo(const char *text, size_t len,
					uint64_t *bytes, strata_error *err);

/* Reads /proc/meminfo through the base file reader. */
strata_status strata_plan_host_available(uint64_t *bytes, strata_error *err);

/* ------------------------------------------------------------------------ */
/* The automatic planner                                                    */
/* ------------------------------------------------------------------------ */

/* Stable explanation codes: X(NAME, "code"). Scripts match on the code. */
#define STRATA_EXPLAIN_MAP(X)                                                  \
	X(RESIDENT_FITS, "resident_fits")                                      \
	X(RESIDENT_EXCEEDS_DEVICE_BUDGET, "resident_exceeds_device_budget")    \
	X(HOST_WINDOW_SELECTED, "host_window_selected")                        \
	X(HOST_WINDOW_EXCEEDS_HOST_BUDGET, "host_window_exceeds_host_budget")  \
	X(HOST_WINDOW_EXCEEDS_DEVICE_BUDGET,                                   \
	  "host_window_exceeds_device_budget")                                 \
	X(DISK_SELECTED, "disk_selected")                                      \
	X(DISK_EXCEEDS_DEVICE_BUDGET, "disk_exceeds_device_budget")            \
	X(DISK_EXCEEDS_HOST_BUDGET, "disk_exceeds_host_budget")                \
	X(NOTHING_FITS, "nothing_fits")                                        \
	X(FORCED_BY_OPTION, "forced_by_option")                                \
	X(FORCED_MODE_DOES_NOT_FIT, "forced_mode_does_not_fit")                \
	X(NO_EXECUTION_UNITS, "no_execution_units")                            \
	X(ARCHITECTURE_UNKNOWN, "architecture_unknown")                        \
	X(DEVICE_BUDGET_FROM_OPTION, "device_budget_from_option")              \
	X(DEVICE_BUDGET_FROM_MACHINE, "device_budget_from_machine")            \
	X(HOST_BUDGET_FROM_OPTION, "host_budget_from_option")                  \
	X(HOST_BUDGET_FROM_MACHINE, "host_budget_from_machine")                \
	X(HOST_WINDOW_LIST_TRUNCATED, "host_window_list_truncated")            \
	X(DISK_DIRECT_TO_DEVICE, "disk_direct_to_device")                      \
	X(UNITS_RESIDENT_FILL, "units_resident_fill")                          \
	X(CPU_UNITS_SELECTED, "cpu_units_selected")                            \
	X(STREAM_CPU_INTERLEAVED, "stream_cpu_interleaved")                    \
	X(SPLIT_OVER_DEVICES, "split_over_devices")                            \
	X(STATICS_ON_CPU, "statics_on_cpu")                                    \
	X(PLACEMENT_SELECTED, "placement_selected")                            \
	X(PLACEMENT_FORCED, "placement_forced")                                \
	X(PLACEMENT_NOT_RUN_YET, "placement_not_run_yet")                      \
	X(PREFILL_PLACEMENT, "prefill_placement")                              \
	X(RATES_DEFAULT, "rates_default")                                      \
	X(RATES_CALIBRATED, "rates_calibrated")                                \
	X(RATES_TYPE_DEFAULT, "rates_type_default")                            \
	X(PREDICTION_TERMS, "prediction_terms")                                \
	X(ONE_RAM_SHARED, "one_ram_shared")

typedef enum strata_explain {
#define STRATA_EXPLAIN_ENUM(name, code) STRATA_EXPLAIN_##name,
	STRATA_EXPLAIN_MAP(STRATA_EXPLAIN_ENUM)
#undef STRATA_EXPLAIN_ENUM
	STRATA_EXPLAIN_COUNT
} strata_explain;

const char *strata_explain_code(strata_explain e); /* "unknown" outside */

/* Default link and memory bandwidths, bytes per second (GPU-MACHINE.md:
 * pinned h2d 55 GB/s, O_DIRECT disk 1.1 GB/s, H200 HBM 4.8 TB/s). The cpu
 * memory bandwidth is not measured: 20 GB/s is a stated default for one
 * socket of a current server, overridable. */
#define STRATA_PLAN_DEFAULT_H2D_BW 55e9
#define STRATA_PLAN_DEFAULT_DISK_BW 1.1e9
#define STRATA_PLAN_DEFAULT_HBM_BW 4.8e12
#define STRATA_PLAN_DEFAULT_CPU_MEM_BW 20e9
/* Compute rates for the prefill model (floating-point operations per
 * second): a dense product of T tokens over a unit of E elements costs
 * 2 x E x T. Defaults, not measured (strata calibrate measures them):
 * the CPU's 0.2 TFLOP/s is strata's f32 kernels on a current 16-core
 * server; the device's 130 TFLOP/s is strata's bf16 prefill on an H200
 * (GPU-MACHINE.md: 512 tokens over 7.5 GB in 28 ms). */
#define STRATA_PLAN_DEFAULT_CPU_FLOPS 0.2e12
#define STRATA_PLAN_DEFAULT_DEVICE_FLOPS 130e12
/* Fixed costs of a pass (seconds), defaults until strata calibrate
 * measures them: a kernel on the CPU's thread pool (its wake-up and
 * join), a kernel launch on the device (a floor: launches queue behind
 * longer kernels), and one round trip of the residual stream between the
 * CPU and the device (an upload, a download and the wait for it). */
#define STRATA_PLAN_DEFAULT_CPU_LAUNCH_S 10e-6
#define STRATA_PLAN_DEFAULT_DEVICE_LAUNCH_S 4e-6
#define STRATA_PLAN_DEFAULT_CROSSING_S 40e-6
/* Kernels one execution unit runs per pass (a llama layer: q/k/v with
 * the norm folded in, rope, attention, output, gate/up, down), the count
 * the fixed costs above are multiplied by. */
#define STRATA_PLAN_KERNELS_PER_UNIT 6u
/* A device layer's fixed costs (seconds) where strata calibrate measured
 * none for a unit's type (docs/plan.md "Cost model", issue 17): the time
 * of a layer beyond its weight products, per decode step and per row of
 * a prefill chunk. From the bench/gpu llama (16 layers of 4096/14336) on
 * the H200, 2026-12-02, resident: Q8_0 decoded 0.39 ms a token and
 * prefilled 512 tokens 3.5 ms slower than its products (24 us and
 * 0.43 us a row a layer), bf16 about 12 us and 0.28 us; the defaults sit
 * between (each type within ~5% there). On cpu 0: the CPU's kernels'
 * fixed costs stay STRATA_PLAN_KERNELS_PER_UNIT x its kernel cost unless
 * measured. */
#define STRATA_PLAN_DEFAULT_DEVICE_LAYER_S 18e-6
#define STRATA_PLAN_DEFAULT_DEVICE_ROW_S 0.35e-6

/* Devices a planned layer split spans at most. */
#define STRATA_PLAN_MAX_DEVICES 8

/* The rates a plan predicts with: X(NAME, options field, "json key").
 * Each comes from an option, from the rates file `strata calibrate`
 * writes (options.calibrated_rates), or from the defaults above. */
#define STRATA_PLAN_RATE_MAP(X)                                                \
	X(H2D, h2d_bandwidth, "h2d_bytes_per_second")                          \
	X(D2H, d2h_bandwidth, "d2h_bytes_per_second")                          \
	X(DISK, disk_bandwidth, "disk_bytes_per_second")                       \
	X(MEMORY, memory_bandwidth, "memory_bytes_per_second")                 \
	X(HOST_MEMORY, host_memory_bandwidth, "host_memory_bytes_per_second")  \
	X(DEVICE_FLOPS, device_flops, "device_flops")                          \
	X(CPU_FLOPS, cpu_flops, "cpu_flops")                                   \
	X(CPU_LAUNCH, cpu_launch_seconds, "cpu_launch_seconds")                \
	X(DEVICE_LAUNCH, device_launch_seconds, "device_launch_seconds")       \
	X(CROSSING, crossing_seconds, "crossing_seconds")                      \
	X(H2D_SHARED, h2d_shared_bandwidth, "h2d_shared_bytes_per_second")     \
	X(HOST_MEMORY_SHARED, host_memory_shared_bandwidth,                    \
	  "host_memory_shared_bytes_per_second")                               \
	X(DEVICE_LAYER, device_layer_seconds, "device_layer_fixed_seconds")    \
	X(DEVICE_ROW, device_row_seconds, "device_row_fixed_seconds")

typedef enum strata_plan_rate {
#define STRATA_PLAN_RATE_ENUM(name, field, json) STRATA_PLAN_RATE_##name,
	STRATA_PLAN_RATE_MAP(STRATA_PLAN_RATE_ENUM)
#undef STRATA_PLAN_RATE_ENUM
	STRATA_PLAN_RATE_COUNT
} strata_plan_rate;

/* "h2d_bytes_per_second", ...; "unknown" outside the enum. */
const char *strata_plan_rate_name(strata_plan_rate r);

/* The products of one stored type on one processor, as strata calibrate
 * measures them through the backend's kernels (0: not measured). */
typedef struct strata_plan_type_rate {
	double gemv; /* weight bytes read per second, one row (decode) */
	double gemm; /* operations per second, prefill rows (2 x E x T) */
	/* A whole layer of this type run as the forward pass runs it
	 * (calibrate_layer.c), less its products priced at gemv / gemm:
	 * seconds per decode step (norms, rope, KV write, attention, the
	 * quantization of x, launch gaps), and the seconds per row a
	 * prefill chunk adds beyond that (0: not measured; the plan then
	 * takes device_layer_seconds / device_row_seconds) */
	double layer_seconds;
	double row_seconds;
} strata_plan_type_rate;

/* host:D candidates listed at most; past it the planner jumps to the depth
 * that holds a whole group (explained by host_window_list_truncated). */
#define STRATA_PLAN_MAX_HOST_CANDIDATES 256

/* Routed experts computed on the CPU from host memory (llama.cpp's
 * --n-cpu-moe, KTransformers), with a device cache of the most routed
 * ones. The experts of the first `layers` MoE layers leave their units
 * (strata_plan_experts_size names them, so the layout never sizes them);
 * the plan adds host_bytes to every candidate's host total,
 * cache_bytes to device 0's, and the CPU's time for the experts a token
 * routes past the cache to its predictions (docs/plan.md "Experts"). */
typedef struct strata_plan_experts {
	uint64_t layers;	   /* MoE layers whose experts run on the CPU */
	uint64_t experts, experts_used; /* per layer; per token */
	uint64_t expert_bytes;	   /* one expert's three tensors, host */
	uint64_t expert_elements;  /* one expert's weights (products) */
	uint64_t host_bytes;	   /* every such expert, exact */
	uint64_t cache_slots;	   /* experts the device cache holds */
	uint64_t slot_bytes;	   /* one slot: three aligned device buffers */
	uint64_t cache_bytes;	   /* slots x slot_bytes */
	uint64_t scratch_bytes;	   /* the CPU's activation buffers (host) */
	/* --expert-stream-rows N: a missed expert routed N rows or more in
	 * a pass is copied to the device through one slot of its own and
	 * computed there (a prompt's experts, as llama.cpp offloads large
	 * batches); 0: chosen by the plan (on cuda where the copy is
	 * predicted faster than the CPU's rows, strata_plan_experts_stream_rows;
	 * never on cpu). The stream slot adds slot_bytes to device 0. */
	uint64_t stream_rows;
	/* the stored type the CPU computes the experts in (the largest
	 * layer's first expert tensor's) */
	strata_block_type type;
	/* the share of routed calls the cache hits, to predict with (a
	 * run's: telemetry hits / routed, bench_forward's routing line);
	 * 0: routing taken as uniform, slots / (layers x experts). Kept by
	 * strata_plan_experts_size, like stream_rows. */
	double hit_rate;
	/* the share of decode's misses the cache admits (a run's: telemetry
	 * admissions / misses over decode steps); 0: taken as rare, as in a
	 * long run under uniform routing. Kept like hit_rate. */
	double admit_rate;
} strata_plan_experts;

/* What the plan expects one pass of `rows` rows to do with the experts on
 * the CPU, summed over their layers (docs/plan.md "Experts"): the calls
 * (routed, as the expert store counts them), cache hits, misses the CPU
 * computes, misses streamed through the stream slot, admissions into the
 * cache; the expert weight bytes the CPU reads (misses), the device reads
 * (hits and streamed) and the link copies (streamed and admissions), the
 * expert store's cpu_bytes, device_bytes and upload_bytes; and the
 * seconds: the CPU's misses, the device's hits and streamed experts, the
 * admissions' copies, the layers' round trips, and what the pass waits
 * for in all (cpu and device overlap on CUDA). */
typedef struct strata_plan_experts_figures {
	double calls, hits, misses, streamed, admissions;
	double cpu_bytes, device_bytes, upload_bytes;
	double cpu_ms, device_ms, admit_ms, sync_ms, total_ms;
} strata_plan_experts_figures;

/* Fills out's sizes from catalog c for `layers` layers (at most the
 * model's; 0: none) and `slots` cache slots, the expert tensors being HF's
 * model.layers.N.*.experts.E.* or GGUF's blk.N.ffn_*_exps; experts and
 * experts_used as the caller read them (the hyper-parameters). *globs (an
 * owned array of owned strings, *n_globs of them; free with
 * strata_plan_experts_globs_free) matches exactly those tensors: the
 * caller adds them to its --exclude globs for the plan source. E_NOMEM,
 * E_OVERFLOW naming the sum. */
strata_status strata_plan_experts_size(const strata_catalog *c,
				       strata_plan_device device,
				       uint64_t layers, uint64_t slots,
				       uint64_t experts, uint64_t experts_used,
				       strata_plan_experts *out, char ***globs,
				       size_t *n_globs, strata_error *err);
void strata_plan_experts_globs_free(char **globs, size_t n);
/* The layer of an expert tensor name (HF or GGUF), or -1 when name is not
 * one of a layer's routed experts (shared experts are not). */
int64_t strata_plan_expert_layer(const char *name);

/* What the caller asks. Zero fields take defaults: the shape's from
 * strata_plan_shape_defaults (context min(arch max_context, 4096) or 2048
 * when unknown, batch 1, prefill chunk min(512, context)), bandwidths from
 * the defaults above. */
typedef struct strata_plan_options {
	strata_residency_mode mode; /* AUTO: choose */
	uint64_t host_depth;	    /* HOST: 0 = choose the depth */
	strata_plan_device device;
	/* --device-memory and --host-memory: the one name of each budget
	 * from the option to the CPU backend's bound (device_budget_bytes
	 * here, in strata_plan_budgets, strata_plan_device_budget_bytes and
	 * strata_backend_cpu_options) */
	bool has_device_budget, has_host_budget;
	uint64_t device_budget_bytes, host_budget_bytes;
	bool has_lookahead, has_queue;
	uint64_t lookahead, queue;
	strata_plan_shape shape;
	double h2d_bandwidth, disk_bandwidth, memory_bandwidth; /* bytes/s */
	double d2h_bandwidth;	      /* device to host, bytes/s */
	double host_memory_bandwidth; /* the CPU reading host memory, bytes/s */
	/* the link and the CPU's reads while both run (cost.c): default the
	 * rates alone */
	double h2d_shared_bandwidth, host_memory_shared_bandwidth;
	double device_flops, cpu_flops; /* dense products, operations/s */
	/* fixed costs, seconds (STRATA_PLAN_DEFAULT_*_S) */
	double cpu_launch_seconds, device_launch_seconds, crossing_seconds;
	/* a device layer's fixed costs for types without a measure of their
	 * own (strata_plan_type_rate.layer_seconds / row_seconds):
	 * seconds per decode step and per prefill row
	 * (STRATA_PLAN_DEFAULT_DEVICE_LAYER_S / _ROW_S on cuda, 0 on cpu) */
	double device_layer_seconds, device_row_seconds;
	/* Product rates per block type of the weights where they execute
	 * (index: strata_block_type), on the CPU and on the device; a type
	 * left 0 is priced at the rates above (host_memory_bandwidth and
	 * cpu_flops; memory_bandwidth and device_flops), and the plan says
	 * which types took that fallback. The bit (1 << type) of
	 * calibrated_*_types says the file gave it. */
	strata_plan_type_rate cpu_types[STRATA_BLOCK_COUNT];
	strata_plan_type_rate device_types[STRATA_BLOCK_COUNT];
	uint32_t calibrated_cpu_types, calibrated_device_types;
	/* Per stored type, the CPU's weight bytes per second over a whole
	 * decode layer (strata_plan_rates.cpu_layer; 0: not measured): what
	 * units computed on the CPU are priced at in decode (cost.c). */
	double cpu_layer[STRATA_BLOCK_COUNT];
	/* Bit (1 << STRATA_PLAN_RATE_x) set: that rate came from the rates
	 * file, not an option (for the explanation of where rates come
	 * from). A zero rate takes its default whatever the bit. */
	uint32_t calibrated_rates;
	/* Placements of units (resident, window, cpu per unit): they are
	 * always sized and listed; the planner may select one only when
	 * this is true, i.e. when the caller's forward pass runs them.
	 * Forcing them (below) implies it. */
	bool mixed_placements;
	/* --resident-units N / --cpu-units N: exactly min(N, units) units
	 * resident on the devices / computed on the CPU from host memory;
	 * the rest chosen by the planner. Not with a mode other than AUTO. */
	bool has_resident_units, has_cpu_units;
	uint64_t resident_units, cpu_units;
	/* A planned layer split over device_count devices of `device` (0 or
	 * 1: one device): device i holds the next run of resident units and
	 * has its own budget, device_budgets[i], or device_budget_bytes when that
	 * is 0; a split needs has_device_budget. Uniform modes use device 0. */
	uint32_t device_count;
	uint64_t device_budgets[STRATA_PLAN_MAX_DEVICES];
	/* Device bytes the backend takes for itself outside the plan's
	 * buffers (cuda: STRATA_CUDA_COMPUTE_DEVICE_BYTES of the compute
	 * context, cuBLAS workspace and scratch, or more where measured, plus
	 * STRATA_CUDA_RUNTIME_DEVICE_BYTES the runtime takes as kernels first
	 * run); added to every device total. The caller fills it: the
	 * backend is below this layer. */
	uint64_t backend_reserved_bytes;
	/* Replicas of the model planned on one machine (strata batch, strata
	 * plan --gpus): the host budget, given or measured, is split evenly
	 * between them, and on cpu so is the RAM of their device arenas
	 * when no device budget is given. 0 or 1: this plan is alone. */
	uint32_t host_shared_by;
	/* --n-cpu-moe N / --expert-cache N: the experts of the first N MoE
	 * layers on the CPU, a cache of that many on the device; the caller
	 * sizes the rest of the struct (strata_plan_experts_size) */
	strata_plan_experts experts;
} strata_plan_options;

/* What the machine has, measured by the caller (the backend and
 * strata_plan_host_available); *_known false when it could not be told. */
typedef struct strata_plan_machine {
	bool device_free_known, host_available_known;
	uint64_t device_free_bytes, host_available_bytes;
} strata_plan_machine;

typedef struct strata_plan_budgets {
	uint64_t device_budget_bytes, host_budget_bytes; /* as resolved */
	uint64_t device_headroom_bytes, host_headroom_bytes; /* 0: from option */
	bool device_from_option, host_from_option;
	uint32_t shared_by;	  /* replicas sharing the host (1: alone) */
	uint64_t host_pool_bytes; /* the host budget before the split */
	/* cpu with neither budget given: device arena and host tier are one
	 * RAM of ram_bytes (both budgets say so); a candidate fits when its
	 * device and host bytes together fit it, so every mode that fits
	 * the RAM runs. 0: the two budgets are separate. */
	uint64_t ram_bytes;
	/* each device of a split (device_bytes is device 0's) */
	uint32_t devices;
	uint64_t split_device_bytes[STRATA_PLAN_MAX_DEVICES];
} strata_plan_budgets;

/* What the CUDA driver takes of device memory beyond what is asked for,
 * for a run that pins `pinned_bytes` of host memory: page tables for the
 * pinned memory (measured on an H200, CUDA 13: 16 MiB for 7 GB pinned, 2
 * MiB for each further GB; one 8-byte entry per 4 KiB page in whole 2 MiB
 * granules, and one granule more) and the last granule of each of a run's
 * three device allocations (the window's arena, the forward pass's, the
 * product workspace). Every CUDA candidate counts it. */
#define STRATA_PLAN_CUDA_GRANULE ((uint64_t)2 << 20)
uint64_t strata_plan_cuda_pinned_bytes(uint64_t pinned_bytes);
uint64_t strata_plan_cuda_driver_bytes(uint64_t pinned_bytes);

/* The term that bounds a pass's predicted time: X(NAME, "text"). link:
 * the streamed bytes over the link (disk: the reads) outlast the compute
 * they overlap; device / cpu: the chain of compute (device and CPU work in
 * layer order, one after the other), the larger share named. */
#define STRATA_PLAN_BOUND_MAP(X)                                               \
	X(LINK, "link")                                                        \
	X(DISK, "disk")                                                        \
	X(DEVICE, "device")                                                    \
	X(CPU, "cpu")                                                          \
	X(HOST_MEMORY, "host_memory")

typedef enum strata_plan_bound {
#define STRATA_PLAN_BOUND_ENUM(name, text) STRATA_PLAN_BOUND_##name,
	STRATA_PLAN_BOUND_MAP(STRATA_PLAN_BOUND_ENUM)
#undef STRATA_PLAN_BOUND_ENUM
} strata_plan_bound;

/* "link", "device", ...; "unknown" outside the enum. */
const char *strata_plan_bound_name(strata_plan_bound b);

/* One pass's predicted time by term, milliseconds (docs/plan.md "Cost
 * model"): with chain = resident + streamed + cpu + statics + overhead,
 * total = max(link, chain, host memory) where the window prefetches, and
 * for a pass that starts with an empty window (a placement's prompt)
 * max(link + link tail, chain + window fill, host memory); link + chain
 * where it cannot prefetch. */
typedef struct strata_plan_cost {
	double resident_ms; /* device compute of resident units, their KV */
	double streamed_ms; /* device compute of the streamed units, their KV */
	double cpu_ms;	    /* CPU compute of the cpu units, their KV */
	double statics_ms;  /* the statics (head, norms) on their tier */
	double link_ms;	    /* streamed bytes over the link; disk: the reads */
	double overhead_ms; /* crossings, CPU kernels' fixed costs, launches */
	double host_memory_ms; /* everything read from host memory per pass
				  (CPU units, the statics there, streamed
				  bytes) at the host's memory rate */
	double window_fill_ms; /* prefill of a placement: the first streamed
				  unit's copy into the empty window, less the
				  resident units' compute before it */
	double total_ms;
	strata_plan_bound bound;
	uint64_t crossings; /* CPU-device round trips of the residual stream */
	double link_tail_ms; /* prefill of a placement: what follows its last
				copy (that unit's compute, the statics) */
} strata_plan_cost;

/* One way of running the model, fully sized. */
typedef struct strata_plan_candidate {
	strata_residency_mode mode;	/* RESIDENT, HOST or DISK */
	strata_plan_weights weights;	/* the seed's numbers */
	uint64_t lookahead, queue;	/* DISK only (0, 0: direct) */
	uint64_t static_device_bytes;	/* static weights, aligned region */
	uint64_t window_device_bytes;	/* window weights, aligned region */
	uint64_t driver_bytes;		/* cuda: strata_plan_cuda_driver_bytes
					   of host_bytes; else 0 */
	uint64_t device_bytes;		/* static + window + KV + workspace
					   + product workspace + backend
					   reserved + driver */
	uint64_t host_weight_bytes;	/* HOST: every unit; DISK: lookahead */
	uint64_t staging_bytes;		/* pinned host buffers besides the
					   tiers: DISK's lookahead ring, and
					   on cuda the load staging */
	uint64_t load_staging_bytes;	/* cuda: the buffer the residency
					   engine loads the device's weights
					   through (its share of staging) */
	uint64_t host_bytes;		/* host weights + staging (+ the CPU
					   site's workspace and KV cache) */
	bool fits_device, fits_host, fits;
	uint64_t device_shortfall_bytes, host_shortfall_bytes;
	uint64_t moved_bytes_per_forward; /* over the slowest link */
	double predicted_ms_per_forward, tokens_per_second;
	/* The placement (every candidate has one; the uniform modes place
	 * every unit alike). Units in layout order: the first resident_units
	 * are resident (device 0 holds the first device_resident_units[0] of
	 * them, device 1 the next ...), the rest are cpu or window units,
	 * interleaved evenly (strata_plan_unit_place), or all disk. */
	bool statics_on_cpu;
	uint64_t resident_units, window_units, cpu_units, disk_units;
	uint32_t devices; /* devices holding units: 1, or the split's */
	uint64_t device_resident_units[STRATA_PLAN_MAX_DEVICES];
	uint64_t split_device_bytes[STRATA_PLAN_MAX_DEVICES]; /* each total */
	uint64_t cpu_bytes;	 /* unit and static bytes the CPU computes */
	uint64_t streamed_bytes; /* bytes over the link per pass */
	/* The prefill pass's own split of the non-resident units (the same
	 * resident units, so switching copies nothing resident again). */
	uint64_t prefill_cpu_units, prefill_window_units;
	/* one token per sequence; one chunk of prefill_chunk tokens */
	double predicted_decode_ms, predicted_prefill_ms;
	strata_plan_cost decode_cost, prefill_cost; /* their terms */
	/* The smallest chunk from which the prefill split is predicted
	 * faster than the decode split (0: never, or they are the same). */
	uint64_t crossing_chunk;
	/* What the residency engine runs a placement with: each device's
	 * resident units' bytes (aligned, as device_total counts them), and
	 * the window depth of each split (weights.depth is the larger
	 * window's; each split streams through its own). */
	uint64_t device_weight_bytes[STRATA_PLAN_MAX_DEVICES];
	uint64_t decode_depth, prefill_depth;
} strata_plan_candidate;

typedef struct strata_plan_explanation {
	strata_explain code;
	char text[256];
} strata_plan_explanation;

typedef struct strata_plan strata_plan;

/* Sizes every candidate (resident; host:D for D = 1.. until one does not
 * fit or D holds a whole group; disk) and selects one: resident if it fits,
 * else the fitting host window with the best predicted time (ties: the
 * smaller D), else disk. A forced mode (options->mode != AUTO) selects only
 * among that mode's candidates. Returns STRATA_OK with a selection, or
 * E_PLAN_NOTHING_FITS with *out STILL SET (so callers can show the
 * candidates) and err naming each mode's shortfall and the smallest budgets
 * that would fit. Other errors (E_PLAN_OPTIONS for invalid lookahead/queue
 * combinations or an unknown budget, E_OVERFLOW, E_NOMEM) leave *out NULL.
 * The layout and arch must outlive the plan; the caller destroys *out. */
strata_status strata_plan_create(const strata_plan_layout *layout,
				 const strata_plan_arch *arch,
				 strata_dtype weight_dtype,
				 const strata_plan_options *options,
				 const strata_plan_machine *machine,
				 strata_plan **out, strata_error *err);
void strata_plan_destroy(strata_plan *p); /* NULL is fine */

/* A candidate's name: "resident", "host:3", "disk", or for a placement
 * "placement:rR,cC,wW" (R as "R0+R1" over a split; ",statics:cpu" when
 * the statics are on the CPU). Returns buf. */
const char *strata_plan_candidate_name(const strata_plan_candidate *c,
				       char *buf, size_t cap);

/* Writes bytes as a size the options take, never below bytes: a whole
 * number of the largest binary unit it reaches, else hundredths rounded
 * up ("2GiB", "1.51GiB", "36.01MiB", "512"). */
strata_status strata_plan_size_option(uint64_t bytes, char *buf, size_t cap);

/* Where unit i (layout order) of candidate c runs, and on which device
 * (0 for cpu and disk); prefill: the prefill pass's split. */
void strata_plan_unit_place(const strata_plan_candidate *c, uint64_t units,
			    uint64_t i, bool prefill, strata_place *where,
			    uint32_t *device);

/* The rows from which the selected plan's run streams a missed expert to
 * the device (0: never): options.experts.stream_rows when given, else on
 * cuda the fewest rows whose CPU products (2 x rows x expert_elements at
 * cpu_flops) take longer than the expert's copy (slot_bytes at h2d), at
 * least 2; 0 without experts. */
uint64_t strata_plan_experts_stream_rows(const strata_plan *p);
/* The plan's figures for one pass of `rows` rows (a decode step: the
 * batch; a prompt pass: batch x chunk, prefill true) of p's experts on
 * the CPU; all zero without. */
void strata_plan_experts_pass(const strata_plan *p, double rows, bool prefill,
			      strata_plan_experts_figures *out);

/* Accessors. selected returns NULL when nothing fits. */
size_t strata_plan_candidate_count(const strata_plan *p);
const strata_plan_candidate *strata_plan_candidate_at(const strata_plan *p,
						      size_t i);
const strata_plan_candidate *strata_plan_selected(const strata_plan *p);
long strata_plan_selected_index(const strata_plan *p); /* -1: none */
size_t strata_plan_explanation_count(const strata_plan *p);
const strata_plan_explanation *strata_plan_explanation_at(const strata_plan *p,
							  size_t i);
const strata_plan_budgets *strata_plan_get_budgets(const strata_plan *p);
/* Memory model of the plan; staging fields are those of the selected
 * candidate (of disk when nothing is selected). */
const strata_plan_memory *strata_plan_get_memory(const strata_plan *p);
const strata_plan_options *strata_plan_get_options(const strata_plan *p);
const strata_plan_arch *strata_plan_get_arch(const strata_plan *p);
/* The sized layout's summary (every unit's and the static bytes, counts). */
const strata_plan_layout_info *strata_plan_get_layout_info(const strata_plan *p);

/* The selected candidate's settings for the residency engine; all return
 * 0 / AUTO when nothing is selected. */
strata_residency_mode strata_plan_mode(const strata_plan *p);
uint64_t strata_plan_depth(const strata_plan *p);
uint64_t strata_plan_lookahead(const strata_plan *p);
uint64_t strata_plan_queue(const strata_plan *p);
uint64_t strata_plan_device_budget_bytes(const strata_plan *p);
uint64_t strata_plan_host_budget_bytes(const strata_plan *p);
uint64_t strata_plan_device_total(const strata_plan *p);
uint64_t strata_plan_host_total(const strata_plan *p);
/* Host memory the budgets leave unused by the selected candidate: host
 * budget - host total, plus on cpu (where the device arena is the same
 * RAM) device budget - device total; on cuda, where whoever takes it pins
 * it, no more than the device budget left after the device total pays
 * the page tables for (strata_plan_cuda_driver_bytes); 0 when nothing is
 * selected. What a replica may spend on memory the plan does not size:
 * the batch prefix cache's default bound (docs/batch.md). */
uint64_t strata_plan_host_spare_bytes(const strata_plan *p);
/* The weights' share of the device total (aligned static + window): the
 * residency engine's device arena (strata_residency_config_from_plan);
 * KV cache and workspace are the forward pass's own buffers. */
uint64_t strata_plan_weight_device_bytes(const strata_plan *p);

/* Writes the plan as one JSON object (docs/plan.md) into j, which the
 * caller has initialised. `model` may be NULL. */
void strata_plan_write_json(const strata_plan *p, const char *model,
			    strata_json *j);
/* The same keys without the enclosing braces, for a caller that adds keys
 * of its own to the object (the CLI's weight_store, telemetry's plan). */
void strata_plan_write_json_fields(const strata_plan *p, const char *model,
				   strata_json *j);

/* ------------------------------------------------------------------------ */
/* Throughput against the batch (issue 19, src/plan/throughput.c)           */
/* ------------------------------------------------------------------------ */

/* The plan at one batch size: p's inputs (options, budgets from the same
 * machine facts) with --batch `batch`. In streamed modes a pass of the
 * weights serves every sequence of the batch (FlexGen's lesson), so
 * tokens per second grow with the batch until the device's compute, the
 * KV cache's reads or the budgets stop them. */
typedef struct strata_plan_batch_point {
	uint64_t batch;
	bool fits;		  /* a candidate fits at this batch */
	char selected[96];	  /* its name; "" when nothing fits */
	double decode_ms;	  /* one step: a token of every sequence */
	double tokens_per_second; /* batch / step */
	uint64_t device_bytes, host_bytes;
	uint64_t kv_cache_bytes;  /* of the batch at the plan's context */
	uint64_t streamed_bytes;  /* over the link per step */
} strata_plan_batch_point;

#define STRATA_PLAN_BATCH_POINTS_MAX 24u

/* The plans at batch 1, 2, 4 ... (powers of two up to max_batch), p's own
 * batch and max_batch, in increasing order, into out[0 .. *count) (at most
 * cap, which STRATA_PLAN_BATCH_POINTS_MAX always suffices for). A batch at
 * which nothing fits is a point with fits false. Errors other than nothing
 * fitting (E_NOMEM, E_OVERFLOW, E_PLAN_OPTIONS) are returned as they come
 * from strata_plan_create, out then undefined. */
strata_status strata_plan_batch_curve(const strata_plan *p, uint64_t max_batch,
				      strata_plan_batch_point *out, size_t cap,
				      size_t *count, strata_error *err);
/* The batch with the most tokens per second among the points that fit (the
 * smaller on a tie); 0 when none fits. */
uint64_t strata_plan_batch_best(const strata_plan_batch_point *points,
				size_t count);
/* The points as a JSON array of {"batch", "fits", "selected",
 * "predicted_decode_ms", "tokens_per_second", "device_bytes",
 * "host_bytes", "kv_cache_bytes", "streamed_bytes"} into j. */
void strata_plan_batch_curve_json(const strata_plan_batch_point *points,
				  size_t count, strata_json *j);


/* ------------------------------------------------------------------------ */
/* Measured rates: strata calibrate and its file                            */
/* ------------------------------------------------------------------------ */

/* The rates one device of the machine was measured at. */
typedef struct strata_plan_device_rates {
	char name[16];	      /* "cuda:0" */
	double h2d, d2h;      /* pinned copies, bytes/s */
	double memory;	      /* weight-streaming product (GEMV), bytes/s */
	double flops;	      /* dense product of many rows, operations/s */
	/* the products per stored type (index: strata_block_type) */
	strata_plan_type_rate types[STRATA_BLOCK_COUNT];
	double launch_seconds;	 /* a tiny kernel, queued back to back */
	double crossing_seconds; /* a residual row up, down, and the wait */
	/* the link and the CPU's GEMV over host memory while both run: one
	 * host memory feeds them (0: not measured) */
	double h2d_shared, host_memory_shared;
} strata_plan_device_rates;

/* What `strata calibrate` measured (0: not measured). A file of an
 * earlier strata has no per-type rates, launch or crossing: they read as
 * 0, and plans price those types at the f32 rates (and say so). */
typedef struct strata_plan_rates {
	double host_memory; /* the CPU kernels' GEMV over host memory, bytes/s */
	/* the matrix it was read over (calibrate's memory_bytes; not in the
	 * rates file, 0 when read from one) */
	uint64_t host_memory_bytes;
	double cpu_flops;   /* the CPU kernels' dense product, operations/s */
	uint32_t threads;   /* CPU threads it used */
	uint32_t gemm_rows; /* rows the per-type gemm rates were taken at */
	strata_plan_type_rate cpu_types[STRATA_BLOCK_COUNT];
	/* per type, weight bytes per second of one token through a whole
	 * llama decode layer on the CPU (its norms, rope, attention, SwiGLU
	 * and residual adds included; 0: not measured) */
	double cpu_layer[STRATA_BLOCK_COUNT];
	double cpu_launch_seconds; /* a tiny kernel on the thread pool */
	uint32_t device_count;
	strata_plan_device_rates devices[STRATA_PLAN_MAX_DEVICES];
} strata_plan_rates;

/* The rates file: $XDG_CACHE_HOME/strata/rates.json, else
 * $HOME/.cache/strata/rates.json (XDG base directory spec; an empty or
 * relative XDG_CACHE_HOME is ignored). E_INVALID_ARG when neither gives a
 * path, E_OVERFLOW when it does not fit cap. */
strata_status strata_plan_rates_path(char *buf, size_t cap, strata_error *err);

/* Reads a rates file. E_IO (naming the file; *found false when it does
 * not exist, which callers treat as "no rates"), E_PARSE for anything but
 * the schema strata_plan_rates_save writes, naming the key. */
strata_status strata_plan_rates_load(const char *path, strata_plan_rates *out,
				     bool *found, strata_error *err);

/* Writes r to path as JSON, creating the directory above it (one level,
 * and its parent); the file is replaced whole (written aside, renamed). */
strata_status strata_plan_rates_save(const char *path,
				     const strata_plan_rates *r,
				     strata_error *err);

/* Fills the rates of o that are 0 from r for o's device (cpu: the host's
 * rates stand for the device's too; cuda: the entry "cuda:INDEX") and
 * marks them in o->calibrated_rates. A rate an option gave stays. */
void strata_plan_rates_apply(const strata_plan_rates *r, uint32_t index,
			     strata_plan_options *o);

/* What to measure and how much. */
typedef struct strata_plan_calibrate_options {
	uint64_t bytes;	  /* weight bytes read per measure (0: 256 MiB) */
	/* The host memory read's matrix, and the CPU's in the shared
	 * link/CPU measure (0: past the last-level cache, the larger of 1 GiB
	 * and 4x the caches /sys describes, at most 8 GiB and a quarter of the
	 * physical memory; tests give a small one) */
	uint64_t memory_bytes;
	uint32_t repeats; /* best of (0: 3) */
	uint32_t threads; /* CPU threads (0: one per processor) */
	bool cpu_only;	  /* skip the CUDA devices */
	/* Block types whose products are measured (bit 1 << strata_block_type;
	 * 0: every type the backend's table takes) and the rows of their
	 * dense product (0: STRATA_PLAN_DEFAULT_PREFILL_CHUNK). */
	uint32_t types;
	uint32_t gemm_rows;
	/* Time a whole layer per type on each CUDA device, one decode step
	 * and one chunk of gemm_rows rows (calibrate_layer.c), for its fixed
	 * costs (strata_plan_type_rate.layer_seconds / row_seconds) */
	bool device_layers;
} strata_plan_calibrate_options;

/* Measures the host memory read rate through the CPU kernels (a GEMV over
 * an f32 matrix of `memory_bytes`), the CPU's dense product rate, and for each
 * CUDA device the pinned link both ways, its GEMV rate and its dense
 * product rate. Then, on the CPU and each device, for every block type of
 * o->types: the GEMV rate over a matrix of that type of `bytes` (one row,
 * the decode shape) and the dense product rate at gemm_rows rows (the
 * prefill shape; on CUDA the half types' tensor-core path), through the
 * kernels a run calls; the fixed cost of a tiny kernel; and on each
 * device the round trip of a residual row. On a machine without CUDA, the
 * host's only. Errors are the backend's (E_NOMEM, E_DEVICE_OOM ...),
 * naming the measure; E_INVALID_ARG for a type no table takes. */
strata_status strata_plan_calibrate(const strata_plan_calibrate_options *o,
				    strata_plan_rates *out, strata_error *err);

#endif
