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
void strata__plan_predict_passes(const strata_plan *p,
				 strata_plan_candidate *c);
void strata__plan_uniform_placement(const strata_plan *p,
				    strata_plan_candidate *c);
strata_status strata__plan_placements(strata_plan *p, strata_error *err);

/* Adds the options' experts on the CPU (experts.c) to candidate c: its
 * host and device-0 totals, fit and predicted times; a no-op without. */
void strata__plan_experts_apply(const strata_plan *p,
				strata_plan_candidate *c);

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
	double element_bytes; /* of the weights where they execute */
	uint32_t default_rates; /* bit per rate that took its default */
	strata_plan_explanation explanations[STRATA__PLAN_MAX_EXPLANATIONS];
	size_t explanation_count;
};

#endif
