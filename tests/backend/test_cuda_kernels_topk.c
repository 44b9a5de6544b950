/* test_cuda_kernels_topk.c - device top-k against a sorted reference, and
 * its refusal of k out of range (layer: backend tests).
 *
 * Tolerances: 1e-4 relative for f32 work (only the summation order
 * differs), 2e-2 for half-precision inputs (issue 8). Each case prints its
 * measured worst error. Skipped (77) where no CUDA device is present. */
#include "backend/kernels_fixture.h"

/* ------------------------------------------------------------------------ */
/* Top-k                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct ref_cand {
	float v;
	int32_t i;
} ref_cand;

static int rank_cmp(const void *pa, const void *pb)
{
	const ref_cand *a = pa, *b = pb;
	if (a->v != b->v)
		return a->v > b->v ? -1 : 1;
	return a->i < b->i ? -1 : (a->i > b->i);
}

static void check_topk(const float *logits, uint32_t vocab, uint32_t k,
		       const char *what)
{
	ref_cand *r = calloc(vocab, sizeof *r);
	assert_non_null(r);
	for (uint32_t i = 0; i < vocab; i++)
		r[i] = (ref_cand){isnan(logits[i]) ? -INFINITY : logits[i],
				  (int32_t)i};
	qsort(r, vocab, sizeof *r, rank_cmp);
	float *dl = upload(logits, (uint64_t)vocab * 4);
	float values[STRATA_CUDA_TOPK_MAX];
	int32_t ids[STRATA_CUDA_TOPK_MAX];
	OK(strata_cuda_topk(F.gpu, dl, vocab, k, values, ids, ERR));
	for (uint32_t j = 0; j < k; j++) {
		if (j >= vocab) {
			assert_int_equal(ids[j], -1);
			continue;
		}
		if (ids[j] != r[j].i || memcmp(&values[j], &r[j].v, 4) != 0)
			fail_msg("%s: rank %u: want id %d (%g), got id %d (%g)",
				 what, j, r[j].i, (double)r[j].v, ids[j],
				 (double)values[j]);
	}
	printf("  %-52s exact\n", what);
	dev_free_all();
	free(r);
}

static void test_topk_matches_sorted_reference(void **state)
{
	(void)state;
	float *l = host_floats(151936);
	cuda_test_fill(l, 32000, 100, 10.0f);
	check_topk(l, 32000, 1, "argmax vocab=32000");
	check_topk(l, 32000, 40, "top-40 vocab=32000");
	check_topk(l, 32000, 256, "top-256 vocab=32000");
	/* many ties: the lower id must come first */
	for (uint32_t i = 0; i < 151936; i++)
		l[i] = (float)((i * 7919u) % 1000u) - 500.0f;
	check_topk(l, 151936, 50, "top-50 with ties vocab=151936");
	check_topk(l, 151936, 1, "argmax with ties vocab=151936");
	/* NaN and -inf rank last, among themselves by id */
	cuda_test_fill(l, 300, 101, 1.0f);
	for (uint32_t i = 0; i < 300; i += 3)
		l[i] = NAN;
	for (uint32_t i = 1; i < 300; i += 7)
		l[i] = -INFINITY;
	check_topk(l, 300, 256, "top-256 with NaN and -inf vocab=300");
	/* fewer logits than k */
	cuda_test_fill(l, 10, 102, 1.0f);
	check_topk(l, 10, 20, "top-20 of vocab=10 pads with -1");
	free(l);
}

static void test_topk_refuses_k_out_of_range(void **state)
{
	(void)state;
	float *dl = dev_alloc(64);
	float v[1];
	int32_t id[1];
	strata_error err;
	assert_int_equal(strata_cuda_topk(F.gpu, dl, 16, 0, v, id, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_cuda_topk(F.gpu, dl, 16, STRATA_CUDA_TOPK_MAX + 1,
					  v, id, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "257"));
	assert_true(err.fix[0] != '\0');
	/* a CPU compute context is not a CUDA one */
	assert_int_equal(strata_cuda_topk(F.cpu, dl, 16, 1, v, id, &err),
			 STRATA_E_INVALID_ARG);
	dev_free_all();
}

/* ------------------------------------------------------------------------ */

int main(void)
{
	if (gpu_skip_without_device("test_cuda_kernels_topk"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_topk_matches_sorted_reference),
		cmocka_unit_test(test_topk_refuses_k_out_of_range),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
