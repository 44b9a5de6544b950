/* test_quantize.c - strata quantize's type rule and its failure paths: the
 * llama-quantize mixes on a 32-layer GQA-8 model (which attn_v and
 * ffn_down get more bits), the output head, the fallbacks for rows that
 * are not whole blocks; strata_quantize under an allocation failure at
 * every point and under a full disk returns the error and leaves OUT as it
 * was (layer: model). */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/quantize_internal.h"

#define STORIES STRATA_SOURCE_DIR "/tests/data/gguf/stories260K.gguf"
#define STORIES_HF STRATA_SOURCE_DIR "/models/stories260K"

static char dir[4096];

static strata_dtype type_of(const char *preset, const char *name,
			    uint64_t row, uint64_t layer, uint64_t gqa,
			    bool *fell)
{
	const strata__quant_preset *p = strata__quant_preset_find(preset);
	assert_non_null(p);
	strata__quant_tensor t = {name, 2, row, layer, 32, gqa, true};
	return strata__quant_tensor_type(p, &t, fell);
}

static strata_dtype layer_type(const char *preset, const char *part,
			       uint64_t layer, uint64_t gqa)
{
	char name[64];
	bool fell;
	snprintf(name, sizeof name, "blk.%u.%s", (unsigned)layer, part);
	return type_of(preset, name, 4096, layer, gqa, &fell);
}

static void mixes_follow_llama_quantize(void **state)
{
	(void)state;
	/* Q4_K_M / Q5_K_M: attn_v and ffn_down in Q6_K on the first and last
	 * eighth of the layers and every third between */
	static const int more[32] = {1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0,
				     0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1,
				     1, 1, 1, 1};
	for (uint64_t i = 0; i < 32; i++) {
		strata_dtype want = more[i] ? STRATA_DTYPE_Q6_K : STRATA_DTYPE_Q4_K;
		assert_int_equal(layer_type("Q4_K_M", "attn_v.weight", i, 8), want);
		assert_int_equal(layer_type("Q4_K_M", "ffn_down.weight", i, 8), want);
		assert_int_equal(layer_type("Q4_K_M", "attn_q.weight", i, 8),
				 STRATA_DTYPE_Q4_K);
		assert_int_equal(layer_type("Q5_K_M", "ffn_down.weight", i, 8),
				 more[i] ? STRATA_DTYPE_Q6_K : STRATA_DTYPE_Q5_K);
		/* Q3_K_M: attn_v Q5_K on the first two, else Q4_K; ffn_down
		 * Q5_K on the first sixteenth, else Q4_K; attn_output Q4_K */
		assert_int_equal(layer_type("Q3_K_M", "attn_v.weight", i, 8),
				 i < 2 ? STRATA_DTYPE_Q5_K : STRATA_DTYPE_Q4_K);
		assert_int_equal(layer_type("Q3_K_M", "ffn_down.weight", i, 8),
				 i < 2 ? STRATA_DTYPE_Q5_K : STRATA_DTYPE_Q4_K);
		assert_int_equal(layer_type("Q3_K_M", "attn_output.weight", i, 8),
				 STRATA_DTYPE_Q4_K);
		assert_int_equal(layer_type("Q3_K_M", "ffn_up.weight", i, 8),
				 STRATA_DTYPE_Q3_K);
		/* Q2_K: attn_v Q4_K at 4+ heads per KV head, else Q3_K */
		assert_int_equal(layer_type("Q2_K", "attn_v.weight", i, 8),
				 STRATA_DTYPE_Q4_K);
		assert_int_equal(layer_type("Q2_K", "attn_v.weight", i, 2),
				 STRATA_DTYPE_Q3_K);
		assert_int_equal(layer_type("Q2_K", "ffn_down.weight", i, 2),
				 STRATA_DTYPE_Q3_K);
		/* IQ4_XS: ffn_down Q5_K on the first eighth; attn_v Q5_K at
		 * 4+ heads per KV head */
		assert_int_equal(layer_type("IQ4_XS", "ffn_down.weight", i, 1),
				 i < 4 ? STRATA_DTYPE_Q5_K : STRATA_DTYPE_IQ4_XS);
		assert_int_equal(layer_type("IQ4_XS", "attn_v.weight", i, 4),
				 STRATA_DTYPE_Q5_K);
		assert_int_equal(layer_type("IQ4_XS", "attn_v.weight", i, 2),
				 STRATA_DTYPE_IQ4_XS);
		/* the legacy presets and Q6_K do not mix */
		assert_int_equal(layer_type("Q4_0", "ffn_down.weight", i, 8),
				 STRATA_DTYPE_Q4_0);
		assert_int_equal(layer_type("Q6_K", "attn_v.weight", i, 8),
				 STRATA_DTYPE_Q6_K);
	}
}

static void head_embedding_and_fallbacks(void **state)
{
	(void)state;
	bool fell;
	/* the head is Q6_K (Q8_0 stays Q8_0), the embedding the base type */
	assert_int_equal(type_of("Q4_0", "output.weight", 4096, 0, 1, &fell),
			 STRATA_DTYPE_Q6_K);
	assert_int_equal(type_of("Q8_0", "output.weight", 4096, 0, 1, &fell),
			 STRATA_DTYPE_Q8_0);
	assert_int_equal(type_of("Q2_K", "token_embd.weight", 4096, 0, 1, &fell),
			 STRATA_DTYPE_Q2_K);
	/* a tied embedding is the head */
	const strata__quant_preset *p = strata__quant_preset_find("Q4_K_M");
	strata__quant_tensor tied = {"token_embd.weight", 2, 4096, 0, 32, 1, false};
	assert_int_equal(strata__quant_tensor_type(p, &tied, &fell), STRATA_DTYPE_Q6_K);
	/* a head row of 64: not whole 256-blocks, Q8_0 */
	assert_int_equal(type_of("Q4_K_M", "output.weight", 64, 0, 1, &fell),
			 STRATA_DTYPE_Q8_0);
	/* rows of 64: K types fall back as llama.cpp does */
	static const struct {
		const char *preset;
		strata_dtype want;
	} fb[] = {
		{"Q2_K", STRATA_DTYPE_IQ4_NL}, {"Q3_K_M", STRATA_DTYPE_IQ4_NL},
		{"Q4_K_M", STRATA_DTYPE_Q5_0}, {"Q5_K_M", STRATA_DTYPE_Q5_1},
		{"Q6_K", STRATA_DTYPE_Q8_0},   {"IQ4_XS", STRATA_DTYPE_IQ4_NL},
		{"Q4_0", STRATA_DTYPE_Q4_0},
	};
	for (size_t i = 0; i < sizeof fb / sizeof *fb; i++) {
		fell = false;
		assert_int_equal(type_of(fb[i].preset, "blk.0.attn_q.weight", 64,
					 0, 1, &fell), fb[i].want);
		assert_true(fell == (fb[i].want != STRATA_DTYPE_Q4_0));
	}
	/* rows of 48 are not even whole 32-blocks: F16 */
	assert_int_equal(type_of("Q4_K_M", "blk.0.attn_q.weight", 48, 0, 1, &fell),
			 STRATA_DTYPE_F16);
	assert_int_equal(type_of("Q8_0", "blk.0.attn_q.weight", 48, 0, 1, &fell),
			 STRATA_DTYPE_F16);
	assert_true(fell);
	/* 1-D tensors stay F32, the float presets keep their type */
	strata__quant_tensor norm = {"blk.0.attn_norm.weight", 1, 4096, 0, 32, 1, true};
	assert_int_equal(strata__quant_tensor_type(p, &norm, &fell), STRATA_DTYPE_F32);
	assert_int_equal(type_of("BF16", "blk.0.attn_q.weight", 48, 0, 1, &fell),
			 STRATA_DTYPE_BF16);
	assert_null(strata__quant_preset_find("Q4_K_S"));
}

static void expect_old(const char *path)
{
	char buf[8] = {0};
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(buf, 1, sizeof buf, f), 3);
	fclose(f);
	assert_string_equal(buf, "old");
}

static void only_out_in_folder(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && strcmp(e->d_name, "out.gguf"))
			fail_msg("'%s' left behind", e->d_name);
	closedir(d);
}

static int write_calls, write_fail_at;
static ssize_t fake_write(int fd, const void *b, size_t n)
{
	if (++write_calls == write_fail_at) {
		errno = ENOSPC;
		return -1;
	}
	return write(fd, b, n);
}

static void failures_leave_out_as_it_was(void **state)
{
	(void)state;
	char out[4200];
	snprintf(out, sizeof out, "%s/out.gguf", dir);
	FILE *f = fopen(out, "wb");
	assert_non_null(f);
	fputs("old", f);
	fclose(f);
	strata_quantize_options o = {"Q4_K_M", 2};
	strata_error err;
	const char *ins[] = {STORIES, STORIES_HF};
	for (size_t k = 0; k < 2; k++) {
		for (long n = 0;; n++) {
			strata_alloc_fail_after(n);
			strata_status s = strata_quantize(ins[k], out, &o, NULL, &err);
			strata_alloc_fail_after(-1);
			if (!s)
				break;
			if (s != STRATA_E_NOMEM)
				fail_msg("allocation %ld: %s", n, err.message);
			expect_old(out);
			only_out_in_folder();
			assert_true(n < 100000);
		}
		/* it did succeed: put the old bytes back */
		f = fopen(out, "wb");
		fputs("old", f);
		fclose(f);
	}
	/* disk full at the header and at a tensor */
	for (int at = 1; at <= 3; at++) {
		write_calls = 0;
		write_fail_at = at;
		strata_sys.write = fake_write;
		strata_status s = strata_quantize(STORIES, out, &o, NULL, &err);
		strata_sys_reset();
		assert_int_equal(s, STRATA_E_IO);
		assert_non_null(strstr(err.message, strerror(ENOSPC)));
		expect_old(out);
		only_out_in_folder();
	}
	strata_quantize_options bad = {"Q4_K_S", 0};
	assert_int_equal(strata_quantize(STORIES, out, &bad, NULL, &err),
			 STRATA_E_USAGE);
	assert_non_null(strstr(err.message, "'Q4_K_S'"));
	assert_non_null(strstr(err.fix, "Q4_K_M"));
	expect_old(out);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/tests/tmp-model-quantize-%ld",
		 STRATA_BINARY_DIR, (long)getpid());
	char cmd[8400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
	return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%.4000s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mixes_follow_llama_quantize),
		cmocka_unit_test(head_embedding_and_fallbacks),
		cmocka_unit_test(failures_leave_out_as_it_was),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
