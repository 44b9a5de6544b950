/* test_quant_products.c - the CPU product on weights in their stored type,
 * on llama.cpp's own files: for every 2-D tensor of every file in
 * tests/data/quant (every GGUF type strata runs), the product on the
 * stored blocks equals, bit for bit, the f32 product on the exact decoding
 * (layer: infer, which may read checkpoints and call the kernels). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"
#include "strata/checkpoint.h"
#include "strata/infer.h"

#define QUANT STRATA_SOURCE_DIR "/tests/data/quant/"


static uint32_t rng = 12345;
static float frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)(rng >> 8) / (float)(1 << 24) * 2.0f - 1.0f;
}

static strata_compute *cpu(uint32_t threads)
{
	strata_compute *c;
	strata_error e;
	/* the f32-activation path (the claims above); test_quant_logits and
	 * test_cpu_qdot cover the default quantized decode path */
	assert_int_equal(strata_compute_create_with(
				 &strata_cpu_kernel_ops,
				 &(strata_compute_options){
					 .threads = threads,
					 .precision = STRATA_PRECISION_EXACT},
				 &c, &e),
			 STRATA_OK);
	return c;
}

static unsigned char *payload(const strata_catalog *c, const strata_tensor *t)
{
	FILE *f = fopen(strata_catalog_file_at(c, t->file)->path, "rb");
	assert_non_null(f);
	unsigned char *p = malloc(t->bytes);
	assert_int_equal(fseek(f, (long)t->offset, SEEK_SET), 0);
	assert_int_equal(fread(p, 1, t->bytes, f), t->bytes);
	fclose(f);
	return p;
}

/* Stored product against the f32 product of the decoding, n rows of x. */
static void compare(strata_compute *c, const char *what, strata_dtype type,
		    const void *w, uint32_t in, uint32_t out, uint32_t n,
		    bool bias)
{
	float *wf = malloc((size_t)in * out * sizeof *wf);
	float *x = malloc((size_t)n * in * sizeof *x);
	float *b = malloc(out * sizeof *b);
	float *y0 = malloc((size_t)n * out * sizeof *y0);
	float *y1 = malloc((size_t)n * out * sizeof *y1);
	strata_error e;
	assert_int_equal(strata_dtype_to_f32(type, w, (uint64_t)in * out, wf,
					     &e),
			 STRATA_OK);
	for (size_t i = 0; i < (size_t)n * in; i++)
		x[i] = frand();
	for (uint32_t i = 0; i < out; i++)
		b[i] = frand();
	strata_weight w32 = {STRATA_WEIGHT_F32, wf, out, in};
	uint8_t elem;
	assert_true(strata_infer_elem_of(type, &elem));
	strata_weight ws = {(strata_weight_type)elem, w, out, in};
	assert_int_equal(strata_kernel_matmul(c, y0, x, &w32, bias ? b : NULL,
					      n, &e),
			 STRATA_OK);
	if (strata_kernel_matmul(c, y1, x, &ws, bias ? b : NULL, n, &e))
		fail_msg("%s: %s", what, e.message);
	for (size_t i = 0; i < (size_t)n * out; i++)
		if (memcmp(&y0[i], &y1[i], sizeof *y0))
			fail_msg("%s (%s, n %u) output %zu: stored %.9g, f32 %.9g",
				 what, strata_dtype_get(type)->name, n, i,
				 (double)y1[i], (double)y0[i]);
	free(wf);
	free(x);
	free(b);
	free(y0);
	free(y1);
}

static void stored_products_equal_f32_products_of_the_decoding(void **state)
{
	(void)state;
	strata_compute *c = cpu(3);
	DIR *d = opendir(QUANT);
	assert_non_null(d);
	struct dirent *de;
	int seen[STRATA_DTYPE_COUNT] = {0};
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 5 || strcmp(de->d_name + len - 5, ".gguf"))
			continue;
		char path[512];
		snprintf(path, sizeof path, QUANT "%s", de->d_name);
		strata_catalog *cat;
		strata_error e;
		assert_int_equal(strata_catalog_open(path, &cat, &e), STRATA_OK);
		for (size_t i = 0; i < strata_catalog_count(cat); i++) {
			const strata_tensor *t = strata_catalog_tensor(cat, i);
			if (t->n_dims != 2)
				continue;
			unsigned char *w = payload(cat, t);
			char what[600];
			snprintf(what, sizeof what, "%s '%s'", de->d_name,
				 t->name);
			uint32_t in = (uint32_t)t->shape_hf[1],
				 out = (uint32_t)t->shape_hf[0];
			compare(c, what, t->dtype, w, in, out, 1, false);
			compare(c, what, t->dtype, w, in, out, 5, true);
			seen[t->dtype] = 1;
			free(w);
		}
		strata_catalog_destroy(cat);
	}
	closedir(d);
	const strata_dtype want[] = {
		STRATA_DTYPE_F16,  STRATA_DTYPE_Q8_0, STRATA_DTYPE_Q4_0,
		STRATA_DTYPE_Q4_1, STRATA_DTYPE_Q5_0, STRATA_DTYPE_Q5_1,
		STRATA_DTYPE_Q2_K, STRATA_DTYPE_Q3_K, STRATA_DTYPE_Q4_K,
		STRATA_DTYPE_Q5_K, STRATA_DTYPE_Q6_K, STRATA_DTYPE_IQ4_NL,
		STRATA_DTYPE_IQ4_XS,
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++)
		if (!seen[want[i]])
			fail_msg("no %s tensor was multiplied",
				 strata_dtype_get(want[i])->name);
	strata_compute_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stored_products_equal_f32_products_of_the_decoding),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
