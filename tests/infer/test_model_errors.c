/* test_model_errors.c - hostile or inconsistent models get a named error,
 * never a crash: a catalogue of config.json faults, tensors that do not
 * match the configuration, forward-pass misuse, and OOM loops over every
 * allocation of loading and of the forward pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/ckpt_writer.h"
#include "support/refmodel.h"

#define BASE_MODEL "llama_gqa2_f32" /* 2 layers, dim 32, 4/2 heads */

/* The reference config with one key replaced (or removed when value is
 * NULL), next to a link to the real weights. */
static void make_model(const char *dir, const char *key, const char *value)
{
	char src[1024], path[1200];
	ref_path(src, sizeof src, BASE_MODEL, "config.json");
	mkdir(dir, 0755);
	char *text = NULL;
	size_t len = 0;
	strata_error err;
	assert_int_equal(strata_file_read_all(src, 1 << 20, &text, &len, &err),
			 STRATA_OK);
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	/* config.json is one key per line ("key": value,): swap the line,
	 * or add the key first when it is absent. */
	char want0[128];
	snprintf(want0, sizeof want0, "\n  \"%s\":", key);
	bool present = strstr(text, want0) != NULL;
	char *line = text;
	if (!present && value) {
		fprintf(f, "{\n  \"%s\": %s,\n", key, value);
		line = strchr(text, '\n') + 1;
	}
	while (line && *line) {
		char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) + 1 : strlen(line);
		char want[128];
		snprintf(want, sizeof want, "\"%s\":", key);
		if (strstr(line, want) && strstr(line, want) < line + n &&
		    line[2] == '"') {
			if (value)
				fprintf(f, "  \"%s\": %s%s", key, value,
					memchr(line, ',', n) ? ",\n" : "\n");
		} else {
			fwrite(line, 1, n, f);
		}
		line = nl ? nl + 1 : NULL;
	}
	fclose(f);
	strata_free(text);
	ref_path(src, sizeof src, BASE_MODEL, "model.safetensors");
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	unlink(path);
	assert_int_equal(symlink(src, path), 0);
}

typedef struct fault {
	const char *key, *value;
	strata_status code;
	const char *says;
} fault;

static void test_config_faults_are_named(void **state)
{
	(void)state;
	static const fault faults[] = {
		{"hidden_size", NULL, STRATA_E_MODEL_CONFIG, "hidden_size"},
		{"hidden_size", "\"big\"", STRATA_E_MODEL_CONFIG,
		 "hidden_size"},
		{"hidden_size", "-4", STRATA_E_MODEL_CONFIG, "hidden_size"},
		{"num_hidden_layers", "0", STRATA_E_MODEL_CONFIG,
		 "num_hidden_layers"},
		{"num_key_value_heads", "3", STRATA_E_MODEL_CONFIG,
		 "config.json: \"num_key_value_heads\" must be a divisor"},
		{"model_type", "\"gpt2\"", STRATA_E_MODEL_ARCH, "gpt2"},
		{"rms_norm_eps", "-1", STRATA_E_MODEL_CONFIG, "rms_norm_eps"},
		{"head_dim", "7", STRATA_E_MODEL_CONFIG, "head size"},
		{"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 2}",
		 STRATA_E_UNSUPPORTED, "yarn"},
		{"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 0}",
		 STRATA_E_MODEL_CONFIG, "rope_scaling"},
		/* The forward pass's own caps and features, on a description
		 * the model layer accepts. */
		{"hidden_size", "1", STRATA_E_MODEL_CONFIG,
		 "config.json: 'hidden_size' is 1"},
		{"num_hidden_layers", "5000", STRATA_E_MODEL_CONFIG,
		 "'num_hidden_layers' is 5000"},
		{"max_position_embeddings", "5000000000", STRATA_E_MODEL_CONFIG,
		 "'max_position_embeddings'"},
		{"hidden_act", "3", STRATA_E_MODEL_CONFIG, "\"hidden_act\""},
		{"rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2}",
		 STRATA_E_UNSUPPORTED, "'dynamic'"},
		{"rope_scaling",
		 "{\"type\": \"longrope\", \"short_factor\": [1, 2], "
		 "\"long_factor\": [1, 2], "
		 "\"original_max_position_embeddings\": 64}",
		 STRATA_E_MODEL_CONFIG, "longrope needs"},
		{"rope_scaling",
		 "{\"type\": \"longrope\", \"short_factor\": [1, 2], "
		 "\"long_factor\": [1]}",
		 STRATA_E_MODEL_CONFIG, "short_factor and long_factor"},
		{"rope_scaling",
		 "{\"rope_type\": \"llama3\", \"factor\": 8, "
		 "\"low_freq_factor\": 0, \"high_freq_factor\": 4, "
		 "\"original_max_position_embeddings\": 64}",
		 STRATA_E_MODEL_CONFIG, "'rope_scaling' needs"},
		/* Consistent config, inconsistent tensors. */
		{"hidden_size", "40", STRATA_E_MODEL_TENSOR_SHAPE,
		 "model.embed_tokens.weight"},
		{"intermediate_size", "70", STRATA_E_MODEL_TENSOR_SHAPE,
		 "mlp.gate_proj.weight' has shape [72, 32], but the config "
		 "implies [70, 32]"},
		/* the reader makes inspect's one check: a vocab_size the
		 * embedding contradicts is refused, not overridden */
		{"vocab_size", "100", STRATA_E_MODEL_TENSOR_SHAPE,
		 "model.embed_tokens.weight"},
		{"model_type", "\"\"", STRATA_E_MODEL_CONFIG,
		 "\"model_type\" must be a non-empty string"},
		{"rope_scaling", "{\"rope_type\": \"\", \"factor\": 2}",
		 STRATA_E_MODEL_CONFIG, "\"rope_type\" must be a non-empty"},
		{"num_hidden_layers", "3", STRATA_E_MODEL_TENSOR_MISSING,
		 "model.layers.2.input_layernorm.weight"},
	};
	char dir[1024];
	for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
		snprintf(dir, sizeof dir, "%s/tests/infer-fault-%zu",
			 STRATA_BINARY_DIR, i);
		make_model(dir, faults[i].key, faults[i].value);
		strata_catalog *c;
		strata_error err;
		assert_int_equal(strata_catalog_open(dir, &c, &err), STRATA_OK);
		strata_infer_hparams hp;
		strata_infer_tensors t = {0};
		strata_status st = strata_infer_hparams_read(dir, c, &hp, &err);
		if (st == STRATA_OK) {
			st = strata_infer_tensors_find(c, &hp, &t, &err);
			strata_infer_tensors_fini(&t);
		}
		if (st != faults[i].code || !strstr(err.message, faults[i].says))
			fail_msg("fault %zu (%s): got %s '%s'", i, faults[i].key,
				 strata_status_name(st), err.message);
		assert_true(err.fix[0] != '\0');
		strata_catalog_destroy(c);
	}
}

/* The reference model's safetensors with one more tensor the forward pass
 * has no slot for (an MLP bias, zeros) after the others. */
static void make_model_with_extra(const char *dir)
{
	make_model(dir, "hidden_size", "32");
	char src[1024], path[1200];
	ref_path(src, sizeof src, BASE_MODEL, "model.safetensors");
	char *bytes = NULL;
	size_t len = 0;
	strata_error err;
	assert_int_equal(strata_file_read_all(src, 1 << 24, &bytes, &len, &err),
			 STRATA_OK);
	strata_catalog *c = NULL;
	assert_int_equal(strata_catalog_open(src, &c, &err), STRATA_OK);
	size_t n = strata_catalog_count(c);
	ckw_tensor *t = calloc(n + 1, sizeof *t);
	assert_non_null(t);
	for (size_t i = 0; i < n; i++) {
		const strata_tensor *x = strata_catalog_tensor(c, i);
		t[i] = (ckw_tensor){.name = x->name,
				    .dtype = strata_dtype_get(x->dtype)->name,
				    .n_dims = x->n_dims, .data = bytes + x->offset,
				    .bytes = x->bytes};
		memcpy(t[i].shape, x->shape, sizeof t[i].shape);
	}
	t[n] = (ckw_tensor){.name = "model.layers.1.mlp.gate_proj.bias",
			    .type = CKW_F32, .n_dims = 1, .shape = {72}};
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	unlink(path);
	ckw_safetensors_file(path, t, n + 1, NULL);
	free(t);
	strata_catalog_destroy(c);
	strata_free(bytes);
}

static void test_unexplained_and_untied_tensors_are_refused(void **state)
{
	(void)state;
	char dir[1024];
	strata_error err;
	strata_catalog *c;
	strata_infer_hparams hp;
	snprintf(dir, sizeof dir, "%s/tests/infer-extra", STRATA_BINARY_DIR);
	make_model_with_extra(dir);
	assert_int_equal(strata_catalog_open(dir, &c, &err), STRATA_OK);
	/* refused by the reader's check (inspect's), as run and plan see it */
	assert_int_equal(strata_infer_hparams_read(dir, c, &hp, &err),
			 STRATA_E_MODEL_TENSOR_EXTRA);
	assert_non_null(strstr(err.message, "mlp.gate_proj.bias"));
	strata_catalog_destroy(c);

	/* Tied in fact (no lm_head.weight) but untied by the config. */
	snprintf(dir, sizeof dir, "%s/tests/infer-untied", STRATA_BINARY_DIR);
	make_model(dir, "tie_word_embeddings", "false");
	assert_int_equal(strata_catalog_open(dir, &c, &err), STRATA_OK);
	assert_int_equal(strata_infer_hparams_read(dir, c, &hp, &err),
			 STRATA_E_MODEL_TENSOR_MISSING);
	assert_non_null(strstr(err.message, "lm_head.weight"));
	strata_catalog_destroy(c);
	/* and with no tie_word_embeddings at all: untied, as transformers'
	 * llama defaults (inspect and run said different things) */
	snprintf(dir, sizeof dir, "%s/tests/infer-untold", STRATA_BINARY_DIR);
	make_model(dir, "tie_word_embeddings", NULL);
	assert_int_equal(strata_catalog_open(dir, &c, &err), STRATA_OK);
	assert_int_equal(strata_infer_hparams_read(dir, c, &hp, &err),
			 STRATA_E_MODEL_TENSOR_MISSING);
	assert_non_null(strstr(err.message, "lm_head.weight"));

	strata_catalog_destroy(c);

	snprintf(dir, sizeof dir, "%s/tests/infer-gelu", STRATA_BINARY_DIR);
	make_model(dir, "hidden_act", "\"gelu\"");
	assert_int_equal(strata_catalog_open(dir, &c, &err), STRATA_OK);
	assert_int_equal(strata_infer_hparams_read(dir, c, &hp, &err),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "gelu"));
	strata_catalog_destroy(c);
}

/* A RoPE base of 0 made every logit NaN and the sampler emit the last id
 * (issue 20, defect 7): refused wherever it is given. */
static void test_zero_rope_base_is_refused(void **state)
{
	(void)state;
	static const char *const texts[] = {
		"{\"model_type\":\"llama\",\"hidden_size\":32,"
		"\"intermediate_size\":64,\"num_hidden_layers\":2,"
		"\"num_attention_heads\":4,\"vocab_size\":100,"
		"\"rope_theta\":0}",
		"{\"model_type\":\"llama\",\"hidden_size\":32,"
		"\"intermediate_size\":64,\"num_hidden_layers\":2,"
		"\"num_attention_heads\":4,\"vocab_size\":100,"
		"\"rope_theta\":10000,\"rope_parameters\":{\"rope_theta\":0,"
		"\"rope_type\":\"default\"}}",
	};
	for (size_t i = 0; i < 2; i++) {
		strata_infer_hparams hp;
		strata_error err;
		assert_int_equal(strata_infer_config_parse(texts[i],
							   strlen(texts[i]),
							   &hp, &err),
				 STRATA_E_MODEL_CONFIG);
		assert_non_null(strstr(err.message, "\"rope_theta\" must be a "
						    "positive number"));
	}
}

/* The infer reader is the model layer's description plus the forward
 * pass's refusals: what it cannot run is named, and a model without its
 * config.json is refused, not run with guessed sizes. */
static void test_unrunnable_descriptions_are_refused(void **state)
{
	(void)state;
	strata_infer_hparams hp;
	strata_error err;
	const char *qwen =
		"{\"model_type\":\"qwen2\",\"hidden_size\":32,"
		"\"intermediate_size\":64,\"num_hidden_layers\":2,"
		"\"num_attention_heads\":4,\"vocab_size\":100,"
		"\"use_sliding_window\":%s,\"sliding_window\":16,"
		"\"eos_token_id\":[5,6],\"bos_token_id\":4}";
	char text[512];
	snprintf(text, sizeof text, qwen, "false");
	assert_int_equal(strata_infer_config_parse(text, strlen(text), &hp,
						   &err),
			 STRATA_OK);
	assert_int_equal(hp.family, STRATA_FAMILY_QWEN2);
	assert_int_equal(hp.window, 0);
	assert_int_equal(hp.bos, 4);
	assert_int_equal(hp.eos, 5);
	assert_int_equal(hp.vocab, 100);
	assert_int_equal(hp.tied, -1);
	snprintf(text, sizeof text, qwen, "true");
	assert_int_equal(strata_infer_config_parse(text, strlen(text), &hp,
						   &err),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "per-layer sliding window"));

	char dir[1024], path[1200];
	snprintf(dir, sizeof dir, "%s/tests/infer-noconfig", STRATA_BINARY_DIR);
	make_model(dir, "hidden_size", "32");
	snprintf(path, sizeof path, "%s/config.json", dir);
	assert_int_equal(unlink(path), 0);
	strata_catalog *c;
	assert_int_equal(strata_catalog_open(dir, &c, &err), STRATA_OK);
	assert_int_equal(strata_infer_hparams_read(dir, c, &hp, &err),
			 STRATA_E_MODEL_CONFIG);
	assert_non_null(strstr(err.message, "no config.json"));
	assert_non_null(strstr(err.fix, "config.json"));
	strata_catalog_destroy(c);
}

static void test_forward_misuse_is_refused(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, BASE_MODEL, NULL);
	ref_open m;
	ref_open_model(path, &m);
	ref_pass p;
	ref_pass_open(BASE_MODEL, 1,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = 8, .batch = 4},
		      &p);
	strata_forward *f = p.f;
	strata_error err;
	float last[256];
	int32_t ok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
	int32_t big[2] = {1, 200}, neg[1] = {-1};
	assert_int_equal(strata_forward_run(f, big, 2, 0, NULL, last, &err),
			 STRATA_E_INFER_TOKEN);
	assert_non_null(strstr(err.message, "token 200"));
	assert_int_equal(strata_forward_run(f, neg, 1, 0, NULL, last, &err),
			 STRATA_E_INFER_TOKEN);
	assert_int_equal(strata_forward_run(f, ok, 9, 0, NULL, last, &err),
			 STRATA_E_INFER_CONTEXT);
	assert_int_equal(strata_forward_position(f), 0);
	assert_int_equal(strata_forward_run(f, ok, 8, 0, NULL, last, &err),
			 STRATA_OK);
	assert_int_equal(strata_forward_run(f, ok, 1, 8, NULL, last, &err),
			 STRATA_E_INFER_CONTEXT);
	assert_int_equal(strata_forward_run(f, ok, 1, 3, NULL, last, &err),
			 STRATA_E_INVALID_ARG);
	ref_pass_close(&p);
	ref_close_model(&m);
}

/* Every allocation of opening, loading and the forward pass can fail:
 * each failing run returns E_NOMEM and leaks nothing (ASan checks). */
static void test_loading_and_forward_survive_oom(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, "qwen2_bias_tied_f16", NULL);
	int32_t tokens[3] = {1, 7, 9};
	float last[256];
	for (long n = 0;; n++) {
		strata_error err;
		strata_catalog *cat = NULL;
		strata_infer_hparams hp;
		strata_infer_tensors t = {0};
		strata_infer_loaded *ld = NULL;
		strata_infer_source src;
		strata_compute *c = NULL;
		strata_forward *f = NULL;
		strata_alloc_fail_after(n);
		strata_status st = strata_catalog_open(path, &cat, &err);
		if (!st)
			st = strata_infer_hparams_read(path, cat, &hp, &err);
		if (!st)
			st = strata_infer_tensors_find(cat, &hp, &t, &err);
		if (!st)
			st = strata_infer_load_all(cat, &t, &ld, &src, &err);
		if (!st)
			st = strata_compute_create(&strata_cpu_kernel_ops, 2,
						   &c, &err);
		if (!st)
			st = strata_forward_create(
				&(strata_forward_options){.hp = &hp,
							  .compute = c,
							  .src = &src,
							  .context = 16,
							  .batch = 4},
				&f, &err);
		if (!st)
			st = strata_forward_run(f, tokens, 3, 0, NULL, last,
						&err);
		strata_alloc_fail_after(-1);
		strata_forward_destroy(f);
		strata_compute_destroy(c);
		strata_infer_loaded_destroy(ld);
		strata_infer_tensors_fini(&t);
		strata_catalog_destroy(cat);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM)
			fail_msg("allocation %ld: %s %s", n,
				 strata_status_name(st), err.message);
		assert_true(n < 100000);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_faults_are_named),
		cmocka_unit_test(test_unexplained_and_untied_tensors_are_refused),
		cmocka_unit_test(test_zero_rope_base_is_refused),
		cmocka_unit_test(test_unrunnable_descriptions_are_refused),
		cmocka_unit_test(test_forward_misuse_is_refused),
		cmocka_unit_test(test_loading_and_forward_survive_oom),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
