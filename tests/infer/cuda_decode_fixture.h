/* cuda_decode_fixture.h - a resident CUDA session's prompt and decode
 * logits on a file, for the tests that compare one file's logits under two
 * settings of a kernel knob (test_cuda_chain.c, test_cuda_q8gemv_wide.c,
 * test_cuda_q8_0_wide.c; layer: infer): decode_logits_with sets the knob
 * for one run, and row_distance compares two runs' rows. */
#ifndef STRATA_TESTS_INFER_CUDA_DECODE_FIXTURE_H
#define STRATA_TESTS_INFER_CUDA_DECODE_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "strata/infer.h"

#define QUANT_DIR STRATA_SOURCE_DIR "/tests/data/quant/"
#define PROMPT 9u
#define DECODES 12u

static uint32_t argmax(const float *v, uint32_t n)
{
	uint32_t best = 0;
	for (uint32_t i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

/* The last prompt position's logits, then each decode step's, into a new
 * ((1 + DECODES), vocab) buffer, on `device` (a resident session); tokens[d]
 * the token fed at step d: the greedy one when `greedy` (and written
 * there), else read from it. */
static float *decode_logits_on(const char *path, strata_weight_type kv,
			       strata_plan_device device, bool greedy,
			       int32_t *tokens, uint32_t *vocab_out)
{
	strata_session_options so = {.model_path = path, .threads = 2,
				     .positions = 64, .prefill = 16,
				     .precision = STRATA_PRECISION_FAST};
	so.plan.mode = STRATA_RESIDENCY_RESIDENT;
	so.plan.device = device;
	so.plan.shape.kv_type = kv;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&so, &s, &err))
		fail_msg("%s: %s (%s)", path, err.message, err.fix);
	const uint32_t vocab = strata_session_hparams(s)->vocab;
	float *out = strata_alloc((size_t)(1 + DECODES) * vocab * sizeof *out);
	assert_non_null(out);
	strata_forward *f = strata_session_forward(s);
	int32_t prompt[PROMPT];
	for (uint32_t i = 0; i < PROMPT; i++)
		prompt[i] = (int32_t)((7 * i + 3) % vocab);
	if (strata_forward_run(f, prompt, PROMPT, 0, NULL, out, &err))
		fail_msg("%s: prompt: %s", path, err.message);
	for (uint32_t d = 0; d < DECODES; d++) {
		if (greedy)
			tokens[d] = (int32_t)argmax(out + (size_t)d * vocab, vocab);
		if (strata_forward_run(f, &tokens[d], 1, PROMPT + d, NULL,
				       out + (size_t)(d + 1) * vocab, &err))
			fail_msg("%s: decode %u: %s", path, d, err.message);
	}
	strata_session_close(s);
	*vocab_out = vocab;
	return out;
}

/* decode_logits_on a CUDA device. */
static float *decode_logits(const char *path, strata_weight_type kv,
			    bool greedy, int32_t *tokens, uint32_t *vocab_out)
{
	return decode_logits_on(path, kv, STRATA_PLAN_DEVICE_CUDA, greedy,
				tokens, vocab_out);
}

/* decode_logits with *knob at `value` for the run, restored after. */
static inline float *decode_logits_with(int *knob, int value,
					const char *path, strata_weight_type kv,
					bool greedy, int32_t *tokens,
					uint32_t *vocab_out)
{
	const int was = *knob;
	*knob = value;
	float *out = decode_logits(path, kv, greedy, tokens, vocab_out);
	*knob = was;
	return out;
}

/* Row r of two runs: the worst distance of other's logits from cur's
 * relative to |logit| + the row's rms, and whether the greedy tokens agree
 * or cur's top two are within twice the largest distance of each other (a
 * tie the runs may break apart). */
static inline double row_distance(const float *cur, const float *other,
				  uint32_t v, bool *tokens_ok)
{
	double ss = 0.0, worst = 0.0, far = 0.0;
	for (uint32_t i = 0; i < v; i++)
		ss += (double)cur[i] * cur[i];
	const double rms = sqrt(ss / v);
	for (uint32_t i = 0; i < v; i++) {
		const double d = fabs((double)other[i] - cur[i]);
		const double r = d / (fabs((double)cur[i]) + rms + 1e-30);
		if (!(r <= worst))
			worst = isnan(r) ? INFINITY : r;
		far = d > far ? d : far;
	}
	const uint32_t a = argmax(cur, v), b = argmax(other, v);
	float second = -INFINITY;
	for (uint32_t i = 0; i < v; i++)
		if (i != a && cur[i] > second)
			second = cur[i];
	*tokens_ok = a == b || (double)cur[a] - second <= 2 * far;
	return worst;
}

#endif
