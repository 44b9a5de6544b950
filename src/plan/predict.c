/* predict.c - predicted time per forward pass and tokens per second of a
 * candidate, from the bytes it moves per token and the link bandwidths
 * (layer: plan).
 *
 * The model is deliberately simple and stated in docs/plan.md: decoding is
 * memory bound, so compute time is the bytes read on the device (every
 * weight once, the whole KV cache at full context) over the device's memory
 * bandwidth; streamed units cross their link once per forward pass; stages
 * that run in the background overlap (the slowest one sets the pace), stages
 * that do not add up. */
#include "plan/internal.h"

static double seconds(uint64_t bytes, double per_second)
{
	return per_second > 0 ? (double)bytes / per_second : 0.0;
}

static double max2(double a, double b)
{
	return a > b ? a : b;
}

void strata__plan_predict(const strata_plan_layout_info *info,
			  const strata_plan_memory *mem,
			  const strata_plan_options *o,
			  strata_plan_candidate *c)
{
	double mem_bw = o->memory_bandwidth;
	uint64_t read = strata_sat_add_u64(info->static_bytes,
					   info->all_units_bytes);
	read = strata_sat_add_u64(read, mem->kv_cache_bytes);
	double compute = seconds(read, mem_bw);
	double t = compute;
	uint64_t units = info->all_units_bytes;
	uint64_t from_disk =
		info->unit_file_bytes ? info->unit_file_bytes : units;
	c->moved_bytes_per_forward = 0;
	switch (c->mode) {
	case STRATA_RESIDENCY_HOST:
		/* one group wholly in the window: nothing moves after the
		 * first pass; otherwise every unit crosses h2d once */
		if (info->groups <= 1 && c->weights.depth >= info->span)
			break;
		c->moved_bytes_per_forward = units;
		if (c->weights.depth >= 2) /* prefetch next while computing */
			t = max2(compute, seconds(units, o->h2d_bandwidth));
		else
			t = compute + seconds(units, o->h2d_bandwidth);
		break;
	case STRATA_RESIDENCY_DISK: {
		c->moved_bytes_per_forward = units;
		/* a lookahead cache holding every unit reads the disk once */
		double disk = c->lookahead >= info->occupied_units &&
					      info->occupied_units > 0
				      ? 0.0
				      : seconds(from_disk, o->disk_bandwidth);
		if (c->lookahead == 0) /* direct, no background reads */
			t = compute + seconds(from_disk, o->disk_bandwidth);
		else
			t = max2(max2(compute, disk),
				 seconds(units, o->h2d_bandwidth));
		break;
	}
	default:
		break;
	}
	c->predicted_ms_per_forward = t * 1e3;
	c->tokens_per_second = t > 0 ? (double)o->shape.batch / t : 0.0;
}
