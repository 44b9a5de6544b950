/* internal.h - what the plan layer's files share (layer: plan). Not a
 * public API: names are strata__ and may change. */
#ifndef STRATA_PLAN_INTERNAL_H
#define STRATA_PLAN_INTERNAL_H

#include "strata/plan.h"

/* The request a placement is chosen for: one prompt pass (a prefill
 * chunk) and this many decode steps; placements are compared on decode
 * + prompt / this (docs/plan.md "Choosing"). */
#define STRATA_PLAN_DECODE_STEPS_PER_PROMPT 256.0

/* Fills c's moved bytes, predicted ms per forward and tokens/s from its
 * mode, depth and lookahead (predict.c). o holds resolved bandwidths. */
void strata__plan_predict(const strata_plan_layout_info *info,
			  const strata_plan_memory *mem,
			  const strata_plan_options *o,
			  strata_plan_candidate *c);

/* The placement planner (placement.c). predict_passes fills a
 * candidate's decode and prefill predictions, its CPU and streamed bytes
 * and its crossing chunk; uniform_placement the placement fields of a
 * resident, host:D or disk candidate (then predicts); placements searches
 * and appends the placement candidates (strata__plan_push). */
/* The load staging of a run on CUDA (the buffer the residency engine
 * loads the device's weights through, pinned, taken beside the host tier
 * while it loads): the largest unit when units are resident, at least the
 * largest static tensor; 0 on cpu, whose device is host memory. */
uint64_t strata__plan_load_staging(const strata_plan *p, bool units_resident);
void strata__plan_predict_passes(const strata_plan *p,
				 strata_plan_candidate *c);
void strata__plan_uniform_placement(const strata_plan *p,
				    strata_plan_candidate *c);
strata_status strata__plan_placements(strata_plan *p, strata_error *err);

/* Adds the options' experts on the CPU (experts.c) to candidate c: its
 * host and device-0 totals, fit and predicted times; a no-op without. */
void strata__plan_experts_apply(const strata_plan *p,
				strata_plan_candidate *c);

/* One layer's time as calibrate_layer.c takes it: seconds of one pass
 * (best of repeats), its weight bytes and elements, the hidden size and
 * the rows it ran at. */
typedef struct strata__plan_layer_time {
	double seconds;
	uint64_t bytes;
	double elements;
	uint32_t dim, rows;
} strata__plan_layer_time;

/* A llama layer of block type t (hidden 4096, halved while the layer is
 * over 4 x bytes; as many copies as fill bytes) in backend b's memory,
 * run on c through the kernel table: rows 1, a decode step over a short
 * cache; else a prefill chunk of `rows` from position 0. Best of
 * repeats, after a warm-up (calibrate_layer.c). E_NOMEM / E_DEVICE_OOM,
 * or a kernel's error, naming the type. */
struct strata_compute;
struct strata_backend;
strata_status strata__plan_calibrate_layer(struct strata_backend *b,
					   struct strata_compute *c,
					   strata_block_type t, uint64_t bytes,
					   uint32_t rows, uint32_t repeats,
					   strata__plan_layer_time *out,
					   strata_error *err);
/* A layer's fixed costs from its decode (and prefill, NULL: none) time
 * and its type's product rates, as the cost model adds them (cost.c):
 * layer = decode - bytes / gemv; row = (prefill - max(bytes / gemv,
 * 2 E rows / gemm) - layer) / rows; each at least 1 ns (a measure at or
 * below the products: none). */
void strata__plan_layer_fixed(const strata__plan_layer_time *decode,
			      const strata__plan_layer_time *prefill,
			      double gemv, double gemm, double *layer_seconds,
			      double *row_seconds);
/* The host memory read's matrix when calibrate's options give none: the
 * larger of 1 GiB and 4x the last-level caches /sys describes, at most
 * 8 GiB and a quarter of the physical memory (calibrate.c). */
uint64_t strata__plan_memory_matrix_bytes(void);

/* Appends a copy of c to the candidates (planner.c). */
strata_status strata__plan_push(strata_plan *p, const strata_plan_candidate *c,
				strata_error *err);

/* Appends an explanation (planner.c). */
void strata__plan_explain(strata_plan *p, strata_explain code,
			  const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Selects a candidate with its explanations; the nothing-fits error
 * (select.c). */
void strata__plan_select(strata_plan *p);
strata_status strata__plan_nothing_fits(const strata_plan *p,
					strata_error *err);

/* The bytes of one split of a placement that the cost model prices
 * (cost.c): per tier by type (index into the plan's type_of), the units
 * and bytes per tier, the KV each tier reads, and the changes of site of
 * the residual stream along the layer order (statics included). */
typedef struct strata__plan_split {
	uint64_t res[STRATA_BLOCK_COUNT], str[STRATA_BLOCK_COUNT],
		cpu[STRATA_BLOCK_COUNT];
	/* the routed experts' part of res, str and cpu, and the units of
	 * each tier that hold experts (a mixture-of-experts layer) */
	uint64_t res_x[STRATA_BLOCK_COUNT], str_x[STRATA_BLOCK_COUNT],
		cpu_x[STRATA_BLOCK_COUNT];
	uint64_t res_moe, str_moe, cpu_moe;
	uint64_t res_units, str_units, cpu_units;
	uint64_t cpu_bytes; /* slots of the cpu units */
	uint64_t streamed;  /* over the link (or from disk) per pass */
	uint64_t kv_res, kv_str, kv_cpu;
	uint64_t changes;
	uint64_t first_streamed; /* bytes of the first streamed unit */
	bool statics_cpu;
	bool cold_window; /* the pass starts with an empty window (cost.c) */
	bool started, last_cpu; /* the walk's state */
} strata__plan_split;

/* Adds occupied unit i (layout order) placed `where` to b; units in
 * layout order, statics_cpu set first; then split_end. */
void strata__plan_split_add(const strata_plan *p, strata__plan_split *b,
			    size_t i, strata_place where);
void strata__plan_split_end(strata__plan_split *b);
/* The predicted terms of a pass of T tokens of candidate c over b. */
void strata__plan_cost(const strata_plan *p, const strata_plan_candidate *c,
		       const strata__plan_split *b, double T,
		       strata_plan_cost *out);
/* The product rates of type t on the CPU (cpu) or the device, after
 * fallbacks; *measured (may be NULL): a per-type rate was used. */
void strata__plan_type_rates(const strata_plan *p, bool cpu,
			     strata_block_type t, double *gemv, double *gemm,
			     bool *measured);

#define STRATA__PLAN_MAX_EXPLANATIONS 48

struct strata_plan {
	const strata_plan_layout *layout;
	strata_plan_layout_info info;
	strata_plan_arch arch;
	strata_plan_options options; /* defaults resolved */
	/* what strata_plan_create was given, for the plans at other batch
	 * sizes (throughput.c) */
	strata_plan_options given;
	strata_plan_machine machine;
	strata_plan_budgets budgets;
	strata_plan_memory memory; /* staging of the selected candidate */
	strata_dtype weight_dtype;
	strata_plan_candidate *candidates;
	size_t candidate_count, candidate_cap;
	long selected;
	/* each occupied unit's device bytes in layout order, and their
	 * prefix sums ([n + 1]) */
	uint64_t *unit_bytes, *unit_prefix;
	/* the block types present (units or statics), each unit's exact
	 * bytes by them ([n][type_count]) and the statics' computed bytes */
	uint32_t type_count;
	strata_block_type type_of[STRATA_BLOCK_COUNT];
	uint64_t *unit_types;
	/* the part of unit_types that is routed experts' (same shape, in
	 * unit_types' block) */
	uint64_t *unit_expert_types;
	uint64_t static_types[STRATA_BLOCK_COUNT];
	double element_bytes; /* of the weights where they execute */
	uint32_t default_rates; /* bit per rate that took its default */
	strata_plan_explanation explanations[STRATA__PLAN_MAX_EXPLANATIONS];
	size_t explanation_count;
};

#endif
