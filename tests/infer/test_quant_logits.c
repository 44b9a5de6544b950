/* test_quant_logits.c - the small llama of tests/data/quant in every GGUF
 * type llama.cpp's presets write runs on the CPU with its matrices as
 * stored (strata_infer_load_stored). At STRATA_PRECISION_EXACT
 * (activations stay f32) its logits are within 1e-3 of the exact float64
 * forward pass over the dequantized weights, closer than llama.cpp's own
 * logits on the same file, and bit for bit the logits of the f32
 * expansion. On the default decode path (x quantized to 8 bits for the
 * block types' integer dot products, as llama.cpp computes), run in
 * batches of 8 tokens so that every product takes it, they are within
 * llama.cpp's own distance from the exact logits, both the largest
 * difference and the root mean square (0.074-0.094 and 0.018-0.019
 * against llama.cpp's 0.094-0.15 and 0.022-0.032). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"
#include "strata/backend.h"

#define QUANT STRATA_SOURCE_DIR "/tests/data/quant/"
#define VOCAB 512
#define POSITIONS 40

static const char *const types[] = {
	"F16",	  "Q8_0",   "Q4_0",   "Q4_1",	"Q5_0",	  "Q5_1",   "Q2_K",
	"Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K",	"IQ4_NL", "IQ4_XS",
};

static void read_floats(const char *path, float *out, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	assert_int_equal(fread(out, sizeof *out, n, f), n);
	fclose(f);
}

static void read_tokens(int32_t *tokens)
{
	FILE *f = fopen(QUANT "tokens.txt", "r");
	assert_non_null(f);
	for (int i = 0; i < POSITIONS; i++)
		assert_int_equal(fscanf(f, "%d", &tokens[i]), 1);
	fclose(f);
}

/* Root mean square of a - b. */
static double rms_diff(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
	return sqrt(s / (double)n);
}

static void logits_of(const char *path, bool stored, uint32_t batch,
		      const int32_t *tokens, float *out)
{
	ref_open m;
	if (stored)
		ref_open_model_stored(path, &m);
	else
		ref_open_model(path, &m);
	/* every file's embedding is in a stored type (F16 or a block type) */
	assert_int_equal(m.src.statics.embed_elem != STRATA_ELEM_F32, stored);
	ref_logits(path, &m, tokens, POSITIONS, 64, batch, out);
	ref_close_model(&m);
}

static void every_type_is_within_1e_3_of_the_exact_logits(void **state)
{
	(void)state;
	int32_t tokens[POSITIONS];
	read_tokens(tokens);
	size_t n = (size_t)POSITIONS * VOCAB;
	float *got = malloc(n * sizeof *got), *exact = malloc(n * sizeof *got),
	      *llama = malloc(n * sizeof *got);
	for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
		char path[512];
		snprintf(path, sizeof path, QUANT "model-%s.gguf", types[i]);
		logits_of(path, true, 16, tokens, got);
		logits_of(path, false, 16, tokens, llama);
		/* the stored products equal the f32 ones on the decoding */
		if (memcmp(got, llama, n * sizeof *got))
			fail_msg("%s: stored weights' logits differ from the "
				 "f32 expansion's", types[i]);
		snprintf(path, sizeof path, QUANT "model-%s.ref.f32", types[i]);
		read_floats(path, exact, n);
		snprintf(path, sizeof path, QUANT "model-%s.logits.f32",
			 types[i]);
		read_floats(path, llama, n);
		double d = ref_max_diff(got, exact, n);
		double dl = ref_max_diff(llama, exact, n);
		print_message("%-7s strata %.3g from exact, llama.cpp %.3g\n",
			      types[i], d, dl);
		if (!(d < 1e-3))
			fail_msg("%s: logits %.3g from exact (bound 1e-3)",
				 types[i], d);
		assert_true(d < dl);
	}
	free(got);
	free(exact);
	free(llama);
}

static void exact_path_is_within_1e_3_of_the_exact_logits(void **state)
{
	(void)state;
	ref_precision = STRATA_PRECISION_EXACT;
	every_type_is_within_1e_3_of_the_exact_logits(state);
	ref_precision = STRATA_PRECISION_FAST;
}

static void quantized_decode_is_within_llama_cpp_distance(void **state)
{
	(void)state;
	ref_precision = STRATA_PRECISION_FAST; /* the default */
	int32_t tokens[POSITIONS];
	read_tokens(tokens);
	size_t n = (size_t)POSITIONS * VOCAB;
	float *got = malloc(n * sizeof *got), *exact = malloc(n * sizeof *got),
	      *llama = malloc(n * sizeof *got);
	for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
		char path[512];
		snprintf(path, sizeof path, QUANT "model-%s.gguf", types[i]);
		logits_of(path, true, 8, tokens, got);
		snprintf(path, sizeof path, QUANT "model-%s.ref.f32", types[i]);
		read_floats(path, exact, n);
		snprintf(path, sizeof path, QUANT "model-%s.logits.f32",
			 types[i]);
		read_floats(path, llama, n);
		double d = ref_max_diff(got, exact, n);
		double dl = ref_max_diff(llama, exact, n);
		double r = rms_diff(got, exact, n), rl = rms_diff(llama, exact, n);
		print_message("%-7s q8 decode %.3g from exact (rms %.3g), "
			      "llama.cpp %.3g (rms %.3g)\n",
			      types[i], d, r, dl, rl);
		if (!(d <= dl) || !(r <= rl))
			fail_msg("%s: logits %.3g (rms %.3g) from exact, "
				 "llama.cpp's %.3g (rms %.3g)",
				 types[i], d, r, dl, rl);
	}
	free(got);
	free(exact);
	free(llama);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exact_path_is_within_1e_3_of_the_exact_logits),
		cmocka_unit_test(quantized_decode_is_within_llama_cpp_distance),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
