/* test_long_prompt.c - a prompt of each reference model's whole context
 * (256 positions) on the CPU backend, through the session `strata run`
 * opens (issue 19): the logits of every position, prefilled in chunks of
 * 1 (token by token), 7 and 64 tokens, within 1e-5 of the one-pass
 * prefill of all 256, and in fact the same bits (the CPU kernels promise
 * that the batch size never changes a result; the tiled attention keeps
 * its tiles counted from each query's first key, not from the chunk)
 * (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define CONTEXT 256u
#define TOL 1e-5

/* Logits (CONTEXT, vocab) of the prompt, prefilled `chunk` tokens a pass. */
static float *prompt_logits(const char *model, const int32_t *tokens,
			    uint32_t chunk, uint32_t *vocab)
{
	strata_session_options o = {.model_path = model,
				    .threads = 2,
				    .positions = CONTEXT,
				    .prefill = chunk};
	o.plan.mode = STRATA_RESIDENCY_RESIDENT;
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s: %s / %s", model, err.message, err.fix);
	*vocab = strata_session_hparams(s)->vocab;
	float *logits = calloc((size_t)CONTEXT * *vocab, sizeof *logits);
	assert_non_null(logits);
	strata_forward *f = strata_session_forward(s);
	strata_forward_reset(f);
	/* one call: the pass cuts it into chunks of the session's prefill */
	if (strata_forward_run(f, tokens, CONTEXT, 0, logits, NULL, &err))
		fail_msg("%s chunk %u: %s / %s", model, chunk, err.message,
			 err.fix);
	assert_int_equal(strata_session_finish(s, &err), STRATA_OK);
	strata_session_close(s);
	return logits;
}

static void test_chunked_prefill_matches_one_pass(void **state)
{
	(void)state;
	static const uint32_t chunks[] = {1, 7, 64};
	for (size_t m = 0; m < REF_MODEL_COUNT; m++) {
		char path[1024];
		ref_path(path, sizeof path, ref_models[m], NULL);
		int32_t tokens[CONTEXT];
		uint32_t vocab = 0;
		/* ids spread over the vocabulary (every model's holds 200) */
		for (uint32_t i = 0; i < CONTEXT; i++)
			tokens[i] = (int32_t)((i * 7919u + 13u) % 199u);
		float *one = prompt_logits(path, tokens, CONTEXT, &vocab);
		for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
			uint32_t v2 = 0;
			float *got = prompt_logits(path, tokens, chunks[c], &v2);
			assert_int_equal(v2, vocab);
			double worst = 0.0;
			size_t n = (size_t)CONTEXT * vocab;
			for (size_t i = 0; i < n; i++) {
				double d = fabs((double)got[i] - one[i]);
				if (!(d <= worst))
					worst = d;
			}
			bool same = memcmp(got, one, n * sizeof *got) == 0;
			print_message("%-22s chunk %2u: max |dlogit| %.3g%s\n",
				      ref_models[m], chunks[c], worst,
				      same ? " (same bits)" : "");
			if (!(worst <= TOL))
				fail_msg("%s chunk %u: %g > %g", ref_models[m],
					 chunks[c], worst, TOL);
			free(got);
		}
		free(one);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chunked_prefill_matches_one_pass),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
