/* test_quantize_hf.c - strata quantize from Hugging Face checkpoints: the
 * reference models and stories260K converted to F32 GGUF give
 * transformers' logits (llama.cpp's names, metadata and q/k permutation);
 * stories260K's tokenizer.json becomes the tokenizer.ggml.* pairs
 * llama.cpp wrote into stories260K.gguf; quantizing an HF model equals
 * quantizing its F32 GGUF; and bad input (unknown type, no --type, a
 * missing IN, OUT in a missing folder, a tensor with no GGUF name, a
 * GGUF block with a NaN scale, named by its tensor) is a
 * clear error that leaves OUT as it was, with no temporary file (layer:
 * cli). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "quantize_support.h"
#include "support/ckpt_writer.h"
#include "support/refmodel.h"

#define STORIES STRATA_SOURCE_DIR "/models/stories260K"
#define STORIES_GGUF STRATA_SOURCE_DIR "/tests/data/gguf/stories260K.gguf"

static char dir[4096];

static void ids_text(const int32_t *ids, size_t n, char *out, size_t cap)
{
	size_t k = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n && k + 16 < cap; i++)
		k += (size_t)snprintf(out + k, cap - k, i ? " %d" : "%d", ids[i]);
}

/* transformers' float32 logits within 1e-4 (strata's tolerance for its
 * own safetensors path): a wrong name, permutation, norm epsilon or rope
 * factor moves them by far more. The mistral models are converted but
 * not compared: GGUF has no sliding window for llama.cpp's llama (its
 * converter drops it, and so does strata's; docs/quantize.md), and their
 * windows (4 and 5 tokens) are shorter than the 12-token test. */
/* A checkpoint without tokenizer.json converts to a GGUF llama.cpp still
 * loads (its "no vocabulary" convention): tokenizer.ggml.model 'none' and
 * ARCH.vocab_size, from which it makes that many dummy tokens. */
static void vocabless_as_llama_cpp_reads_it(const char *gguf, uint32_t vocab)
{
	strata_catalog *c = q_open(gguf);
	const strata_gguf *g = strata_catalog_gguf(c);
	strata_error err;
	const char *model, *arch;
	size_t ml, al;
	assert_int_equal(strata_gguf_get_string(g, "tokenizer.ggml.model", &model, &ml, &err), 0);
	assert_true(ml == 4 && !memcmp(model, "none", 4));
	assert_int_equal(strata_gguf_get_string(g, "general.architecture", &arch, &al, &err), 0);
	char key[96];
	snprintf(key, sizeof key, "%.*s.vocab_size", (int)al, arch);
	uint64_t n = 0;
	assert_int_equal(strata_gguf_get_u64(g, key, &n, &err), 0);
	assert_int_equal(n, vocab);
	strata_catalog_destroy(c);
}

static void reference_models_convert_to_transformers_logits(void **state)
{
	(void)state;
	for (size_t m = 0; m < REF_MODEL_COUNT; m++) {
		char in[4200], out[4200], lp[4200], text[1024];
		ref_path(in, sizeof in, ref_models[m], NULL);
		snprintf(out, sizeof out, "%s/%s.gguf", dir, ref_models[m]);
		snprintf(lp, sizeof lp, "%s/%s.f32", dir, ref_models[m]);
		q_quantize(in, out, "F32");
		ref_data r;
		ref_load(ref_models[m], &r);
		vocabless_as_llama_cpp_reads_it(out, r.vocab);
		if (strstr(ref_models[m], "mistral_window")) {
			ref_free(&r);
			continue;
		}
		ids_text(r.tokens, r.n_tokens, text, sizeof text);
		size_t n;
		float *got = q_logits(out, text, lp, &n);
		assert_int_equal(n, (size_t)r.n_tokens * r.vocab);
		double max, rms;
		q_diff(got, r.logits, n, &max, &rms);
		if (max > 1e-4)
			fail_msg("%s: F32 GGUF logits %g from transformers'",
				 ref_models[m], max);
		free(got);
		ref_free(&r);
	}
}

static void stories_converts_like_llama_cpp(void **state)
{
	(void)state;
	char out[4200], lp[4200];
	snprintf(out, sizeof out, "%s/stories-f32.gguf", dir);
	snprintf(lp, sizeof lp, "%s/stories.f32", dir);
	q_quantize(STORIES, out, "F32");
	size_t n, nr;
	float *got = q_logits(out, "1 403 407 261 378 432 383 286 261 376 298 "
				   "315 421 395 317 426", lp, &n);
	float *want = q_read_f32(STRATA_SOURCE_DIR "/tests/data/stories260k/logits.f32",
				 &nr);
	assert_int_equal(n, nr);
	double max, rms;
	q_diff(got, want, n, &max, &rms);
	assert_true(max < 1e-4);
	free(got);
	free(want);
	/* the tokenizer pairs llama.cpp's converter wrote */
	strata_catalog *a = q_open(out), *b = q_open(STORIES_GGUF);
	const strata_gguf *ga = strata_catalog_gguf(a), *gb = strata_catalog_gguf(b);
	static const char *const arrays[] = {"tokenizer.ggml.tokens",
					     "tokenizer.ggml.scores",
					     "tokenizer.ggml.token_type"};
	strata_error err;
	for (size_t k = 0; k < 3; k++) {
		strata_gguf_type ea, eb;
		uint64_t ca, cb;
		assert_int_equal(strata_gguf_get_array(ga, arrays[k], &ea, &ca, &err), 0);
		assert_int_equal(strata_gguf_get_array(gb, arrays[k], &eb, &cb, &err), 0);
		assert_int_equal(ca, cb);
		long ka = strata_gguf_find(ga, arrays[k]), kb = strata_gguf_find(gb, arrays[k]);
		for (uint64_t i = 0; i < ca; i++) {
			if (ea == STRATA_GGUF_STRING) {
				const char *sa, *sb;
				size_t la, lb;
				strata_gguf_array_string(ga, ka, i, &sa, &la);
				strata_gguf_array_string(gb, kb, i, &sb, &lb);
				assert_true(la == lb && !memcmp(sa, sb, la));
			} else {
				assert_true(strata_gguf_array_f64(ga, ka, i) ==
					    strata_gguf_array_f64(gb, kb, i));
			}
		}
	}
	static const char *const ids[] = {"tokenizer.ggml.bos_token_id",
					  "tokenizer.ggml.eos_token_id",
					  "tokenizer.ggml.unknown_token_id",
					  "llama.block_count", "llama.attention.head_count_kv",
					  "llama.rope.dimension_count"};
	for (size_t k = 0; k < sizeof ids / sizeof *ids; k++) {
		uint64_t va, vb;
		assert_int_equal(strata_gguf_get_u64(ga, ids[k], &va, &err), 0);
		assert_int_equal(strata_gguf_get_u64(gb, ids[k], &vb, &err), 0);
		assert_int_equal(va, vb);
	}
	/* every tensor under llama.cpp's name and shape (the tied head is
	 * left out, as llama.cpp's converter leaves it out) */
	for (size_t i = 0; i < strata_catalog_count(a); i++) {
		const strata_tensor *t = strata_catalog_tensor(a, i);
		const strata_tensor *u = strata_catalog_find(b, t->name);
		assert_non_null(u);
		assert_int_equal(t->n_dims, u->n_dims);
		assert_memory_equal(t->shape, u->shape, t->n_dims * sizeof *t->shape);
	}
	assert_null(strata_catalog_find(a, "output.weight"));
	strata_catalog_destroy(a);
	strata_catalog_destroy(b);
}

/* The HF path and the GGUF path share the encoders and the type rule. */
static void hf_quantizes_as_its_f32_gguf_does(void **state)
{
	(void)state;
	const char *models[] = {STORIES, NULL};
	char gqa4[4200];
	ref_path(gqa4, sizeof gqa4, "llama_gqa4_f16", NULL);
	models[1] = gqa4;
	static const char *const types[] = {"Q4_K_M", "Q8_0", "IQ4_XS"};
	for (size_t m = 0; m < 2; m++)
		for (size_t k = 0; k < 3; k++) {
			char f32[4200], direct[4200], via[4200];
			snprintf(f32, sizeof f32, "%s/c%zu-f32.gguf", dir, m);
			snprintf(direct, sizeof direct, "%s/c%zu-%s.gguf", dir, m, types[k]);
			snprintf(via, sizeof via, "%s/c%zu-via-%s.gguf", dir, m, types[k]);
			q_quantize(models[m], f32, "F32");
			q_quantize(models[m], direct, types[k]);
			q_quantize(f32, via, types[k]);
			strata_catalog *a = q_open(direct), *b = q_open(via);
			assert_int_equal(strata_catalog_count(a), strata_catalog_count(b));
			for (size_t i = 0; i < strata_catalog_count(a); i++) {
				const strata_tensor *t = strata_catalog_tensor(a, i);
				const strata_tensor *u = strata_catalog_find(b, t->name);
				assert_non_null(u);
				assert_int_equal(t->dtype, u->dtype);
				unsigned char *x = q_payload(a, t), *y = q_payload(b, u);
				assert_int_equal(t->bytes, u->bytes);
				assert_memory_equal(x, y, t->bytes);
				free(x);
				free(y);
			}
			strata_catalog_destroy(a);
			strata_catalog_destroy(b);
		}
}

/* ------------------------------------------------------------------------ */
/* Bad input                                                                */
/* ------------------------------------------------------------------------ */

/* Runs quantize expecting `code`, stderr holding `want` and a fix. */
static void refused(const char *const *argv, int code, const char *want)
{
	cli_result r;
	assert_int_equal(cli_run(argv, NULL, 0, NULL, &r), 0);
	if (r.exit_code != code || !strstr(r.err, want) ||
	    !strstr(r.err, "strata: error: ") || !strstr(r.err, "  fix: "))
		fail_msg("strata quantize: exit %d (want %d), stderr: %s",
			 r.exit_code, code, r.err);
	cli_result_free(&r);
}

/* No name in the folder but `keep` (temporary files included). */
static void folder_holds_only(const char *folder, const char *keep)
{
	DIR *d = opendir(folder);
	assert_non_null(d);
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && (!keep || strcmp(e->d_name, keep)))
			fail_msg("'%s' left in %s", e->d_name, folder);
	closedir(d);
}

static void bad_input_is_a_clear_error_leaving_out_as_it_was(void **state)
{
	(void)state;
	char sub[4200], out[4300], missing[4300];
	cli_tmpdir(sub, sizeof sub, "quantize-bad");
	snprintf(out, sizeof out, "%s/out.gguf", sub);
	assert_int_equal(ckw_write_file(out, "old", 3), 0);
	const char *unknown[] = {"quantize", STORIES, out, "--type", "Q4_K_S", NULL};
	refused(unknown, 2, "unknown quantization type 'Q4_K_S'");
	const char *no_type[] = {"quantize", STORIES, out, NULL};
	refused(no_type, 2, "--type is required");
	const char *no_in[] = {"quantize", "/nonexistent/model", out, "--type",
			       "Q8_0", NULL};
	refused(no_in, 1, "/nonexistent/model");
	snprintf(missing, sizeof missing, "%s/no/such/folder/out.gguf", sub);
	const char *no_dir[] = {"quantize", STORIES, missing, "--type", "Q8_0", NULL};
	refused(no_dir, 1, "there is no folder");
	/* a llama whose safetensors hold a tensor GGUF has no name for */
	char model[4300], cfg[4400], st[4400];
	cli_tmpdir(model, sizeof model, "quantize-odd");
	snprintf(cfg, sizeof cfg, "%s/config.json", model);
	snprintf(st, sizeof st, "%s/model.safetensors", model);
	const char *config =
		"{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": "
		"\"llama\", \"hidden_size\": 32, \"intermediate_size\": 64, "
		"\"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
		"\"num_key_value_heads\": 2, \"vocab_size\": 32, "
		"\"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-5}";
	assert_int_equal(ckw_write_file(cfg, config, strlen(config)), 0);
	ckw_tensor t[] = {
		{.name = "model.embed_tokens.weight", .type = CKW_F32, .n_dims = 2,
		 .shape = {32, 32}},
		{.name = "model.vision_tower.proj.weight", .type = CKW_F32,
		 .n_dims = 2, .shape = {32, 32}},
	};
	ckw_safetensors_file(st, t, 2, NULL);
	const char *odd[] = {"quantize", model, out, "--type", "Q8_0", NULL};
	refused(odd, 1, "'model.vision_tower.proj.weight' has no GGUF name");
	/* a GGUF whose Q8_0 block has a NaN scale: the tensor is named */
	char nan_gguf[4400];
	snprintf(nan_gguf, sizeof nan_gguf, "%s/nan.gguf", model);
	unsigned char block[2 * 34] = {0};
	block[34] = 0x00;
	block[35] = 0x7e; /* the second block's f16 scale: NaN */
	ckw_tensor q[] = {{.name = "blk.0.attn_q.weight", .type = CKW_Q8_0,
			   .n_dims = 2, .shape = {1, 64}, .data = block}};
	ckw_kv kv[] = {CKW_KV_STR("general.architecture", "llama")};
	ckw_gguf_file(nan_gguf, kv, 1, q, 1, NULL);
	const char *nan_in[] = {"quantize", nan_gguf, out, "--type", "F32", NULL};
	refused(nan_in, 1, "tensor 'blk.0.attn_q.weight'");
	const char *nan_q[] = {"quantize", nan_gguf, out, "--type", "Q8_0", NULL};
	refused(nan_q, 1, "blk.0.attn_q.weight");
	/* OUT kept its old bytes and nothing else appeared beside it */
	FILE *f = fopen(out, "rb");
	char buf[8] = {0};
	assert_non_null(f);
	assert_int_equal(fread(buf, 1, sizeof buf, f), 3);
	fclose(f);
	assert_string_equal(buf, "old");
	folder_holds_only(sub, "out.gguf");
}

static int setup(void **state)
{
	(void)state;
	cli_tmpdir(dir, sizeof dir, "quantize-hf");
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reference_models_convert_to_transformers_logits),
		cmocka_unit_test(stories_converts_like_llama_cpp),
		cmocka_unit_test(hf_quantizes_as_its_f32_gguf_does),
		cmocka_unit_test(bad_input_is_a_clear_error_leaving_out_as_it_was),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
