/* test_cuda_q8_0_wide.c - Q8_0's wide lanes of the 8-bit decode GEMV
 * (strata__cuda_q8gemv_wide_q8_0 1, qgemv_q8_0_wide.cuh) in a whole
 * forward pass: a resident CUDA session's prompt and greedy decode of the
 * Q8_0 file (hidden 256, FFN 768: rows of whole groups of 8 blocks, which
 * the wide lanes take) give, with the knob 1, the current lanes' greedy
 * tokens, and on an f32 KV cache logits within WIDE_TOL (the same codes
 * and factors, f32 sums in another order). On a bf16 KV cache only the
 * tokens are held: rounding the cache to bf16 turns an f32-rounding change
 * of k or v into a bf16 step, so the logits may move by far more than the
 * products did. The wide run is fed the current run's tokens, so a near
 * tie cannot make the sequences part; a greedy token must still agree
 * wherever the current run's top two logits are further apart than twice
 * the two runs' distance. And the logits must differ in some bit: if they
 * did not, the wide lanes took none of the products (layer: infer). Exits
 * 77 (skipped) where no CUDA device is visible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/gpu_skip.h"
#include "strata/infer.h"
#include "infer/cuda_decode_fixture.h"

/* backend/cuda/cuda_launch.h: 0 Q8_0's current lanes, 1 the wide ones */
extern int strata__cuda_q8gemv_wide_q8_0;

/* Each logit within WIDE_TOL of (|logit| + the row's rms) of the current
 * lanes' on an f32 cache (the kernel tests hold each product to 1e-4 of
 * that; layers carry it forward). */
#define WIDE_TOL 1e-3

static void check_kv(strata_weight_type kv, bool logits)
{
	const char *path = QUANT_DIR "model-Q8_0.gguf";
	int32_t tokens[DECODES];
	uint32_t v0, v1;
	float *cur = decode_logits_with(&strata__cuda_q8gemv_wide_q8_0, 0, path, kv,
					true, tokens, &v0);
	float *wide = decode_logits_with(&strata__cuda_q8gemv_wide_q8_0, 1, path, kv,
					 false, tokens, &v1);
	assert_int_equal(v0, v1);
	double worst = 0.0;
	for (uint32_t r = 0; r <= DECODES; r++) {
		bool tokens_ok;
		const double d = row_distance(cur + (size_t)r * v0,
					      wide + (size_t)r * v0, v0, &tokens_ok);
		if (logits && !(d <= WIDE_TOL))
			fail_msg("Q8_0 (kv %s) step %u: wide lanes' logits %.3g "
				 "from the current lanes' (tolerance %.0e)",
				 strata_weight_type_name(kv), r, d, WIDE_TOL);
		if (!tokens_ok)
			fail_msg("Q8_0 (kv %s) step %u: the wide lanes' greedy "
				 "token differs without a tie",
				 strata_weight_type_name(kv), r);
		worst = d > worst ? d : worst;
	}
	const size_t bytes = (size_t)(1 + DECODES) * v0 * sizeof(float);
	if (!memcmp(cur, wide, bytes))
		fail_msg("Q8_0 (kv %s): the knob changed no bit: the wide lanes "
			 "took no product", strata_weight_type_name(kv));
	printf("  model-Q8_0.gguf kv %-4s wide lanes within %.3g of the current "
	       "over %u steps, same greedy tokens\n",
	       strata_weight_type_name(kv), worst, 1 + DECODES);
	strata_free(cur);
	strata_free(wide);
}

static void test_q8_0_wide_lanes_keep_tokens_and_logits(void **state)
{
	(void)state;
	check_kv(STRATA_WEIGHT_F32, true);
	check_kv(STRATA_WEIGHT_BF16, false);
}

int main(void)
{
	if (gpu_skip_without_device("test_infer_cuda_q8_0_wide"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_q8_0_wide_lanes_keep_tokens_and_logits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
