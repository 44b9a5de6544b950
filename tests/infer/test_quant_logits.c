/* test_quant_logits.c - the small llama of tests/data/quant in every GGUF
 * type llama.cpp's presets write runs on the CPU with its matrices as
 * stored (strata_infer_load_stored) with logits within 1e-3 of the exact
 * float64 forward pass over the dequantized weights (activations stay
 * f32), closer than llama.cpp's own logits on the same file, and bit for
 * bit the logits of the f32 expansion. */
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

static void logits_of(const char *path, bool stored, const int32_t *tokens,
		      float *out)
{
	ref_open m;
	if (stored)
		ref_open_model_stored(path, &m);
	else
		ref_open_model(path, &m);
	/* every file's embedding is in a stored type (F16 or a block type) */
	assert_int_equal(m.src.statics.embed_elem != STRATA_ELEM_F32, stored);
	ref_logits(path, &m, tokens, POSITIONS, 64, 16, out);
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
		logits_of(path, true, tokens, got);
		logits_of(path, false, tokens, llama);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_type_is_within_1e_3_of_the_exact_logits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
