/* internal.h - what the plan layer's files share (layer: plan). Not a
 * public API: names are strata__ and may change. */
#ifndef STRATA_PLAN_INTERNAL_H
#define STRATA_PLAN_INTERNAL_H

#include "strata/plan.h"

/* Fills c's moved bytes, predicted ms per forward and tokens/s from its
 * mode, depth and lookahead (predict.c). o holds resolved bandwidths. */
void strata__plan_predict(const strata_plan_layout_info *info,
			  const strata_plan_memory *mem,
			  const strata_plan_options *o,
			  strata_plan_candidate *c);

#define STRATA__PLAN_MAX_EXPLANATIONS 24

struct strata_plan {
	const strata_plan_layout *layout;
	strata_plan_layout_info info;
	strata_plan_arch arch;
	strata_plan_options options; /* defaults resolved */
	strata_plan_budgets budgets;
	strata_plan_memory memory; /* staging of the selected candidate */
	strata_dtype weight_dtype;
	strata_plan_candidate *candidates;
	size_t candidate_count, candidate_cap;
	long selected;
	strata_plan_explanation explanations[STRATA__PLAN_MAX_EXPLANATIONS];
	size_t explanation_count;
};

#endif
