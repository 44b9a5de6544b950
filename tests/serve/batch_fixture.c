/* batch_fixture.c - see batch_fixture.h (layer: serve tests). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "serve/batch_fixture.h"

strata_batch_options batch_fixture_options(uint32_t replicas,
					   uint64_t sequences)
{
	strata_batch_options o = {.replicas = replicas,
				  .spill_threshold = 1000,
				  .eos = -1};
	o.session.model_path = BATCH_FIXTURE_MODEL;
	o.session.threads = 1;
	o.session.positions = 64;
	o.session.prefill = 32;
	o.session.plan.mode = STRATA_RESIDENCY_AUTO;
	o.session.plan.device = STRATA_PLAN_DEVICE_CPU;
	o.session.plan.shape.batch = sequences;
	return o;
}

strata_batch *batch_fixture_open(const strata_batch_options *o)
{
	strata_batch *b = NULL;
	strata_error err;
	if (strata_batch_create(o, &b, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return b;
}
