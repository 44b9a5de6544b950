/* test_cuda_chain.c - the decode chain's programmatic launches
 * (strata__cuda_pdl, cuda_common.cuh) change no bit: a CUDA session's
 * prompt and greedy decode give logits equal, byte for byte, with the
 * kernels chained and with ordinary launches, on stored-type GGUF files
 * (Q8_0, Q4_K_M, Q6_K: the 8-bit-activation GEMVs) and an f16 one, with an
 * f32 and a bf16 KV cache (the cache stores are chained too). A kernel that
 * read its predecessor's output before waiting for it would differ here
 * (or, at worst, by chance not). Exits 77 (skipped) where no CUDA device is
 * visible (layer: infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/gpu_skip.h"
#include "strata/infer.h"
#include "infer/cuda_decode_fixture.h"

/* backend/cuda/cuda_launch.h: 1 chained, 0 ordinary launches */
extern int strata__cuda_pdl;

/* The logits of the file's greedy decode with the chain on (pdl 1) or off. */
static float *chain_logits(const char *path, strata_weight_type kv, int pdl,
			   uint32_t *vocab_out)
{
	int32_t tokens[DECODES];
	return decode_logits_with(&strata__cuda_pdl, pdl, path, kv, true,
				  tokens, vocab_out);
}

static void check_file(const char *file, strata_weight_type kv)
{
	char path[1024];
	snprintf(path, sizeof path, QUANT_DIR "%s", file);
	uint32_t v0, v1;
	float *plain = chain_logits(path, kv, 0, &v0);
	float *chained = chain_logits(path, kv, 1, &v1);
	assert_int_equal(v0, v1);
	const size_t bytes = (size_t)(1 + DECODES) * v0 * sizeof(float);
	printf("  %-18s kv %-4s chained == ordinary launches over %u steps\n",
	       file, strata_weight_type_name(kv), 1 + DECODES);
	if (memcmp(plain, chained, bytes))
		fail_msg("%s (kv %s): chained launches changed the logits", file,
			 strata_weight_type_name(kv));
	strata_free(plain);
	strata_free(chained);
}

static void test_chained_launches_change_no_bit(void **state)
{
	(void)state;
	static const char *files[] = {"model-Q8_0.gguf", "model-Q4_K_M.gguf",
				      "model-Q6_K.gguf", "model-F16.gguf"};
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		check_file(files[i], STRATA_WEIGHT_F32);
		check_file(files[i], STRATA_WEIGHT_BF16);
	}
}

int main(void)
{
	if (gpu_skip_without_device("test_infer_cuda_chain"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chained_launches_change_no_bit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
