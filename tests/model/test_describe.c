/* test_describe.c - the model description against the config values
 * transformers wrote (tests/data/checkpoints/expected.json) and real GGUF
 * metadata, and the tensor-set check with its three errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "strata/model.h"

#define DATA STRATA_SOURCE_DIR "/tests/data/"

static strata_catalog *open_ok(const char *path)
{
	strata_catalog *c = NULL;
	strata_error e;
	if (strata_catalog_open(path, &c, &e))
		fail_msg("%s: %s", path, e.message);
	return c;
}

static uint64_t jint(json_t *o, const char *k)
{
	return (uint64_t)json_integer_value(json_object_get(o, k));
}

/* Describes and checks one generated model, comparing every hyperparameter
 * with the transformers config object's value. */
static void compare(const char *model, strata_model_desc *d)
{
	json_error_t je;
	json_t *x = json_load_file(DATA "checkpoints/expected.json", 0, &je);
	json_t *cfg = json_object_get(json_object_get(x, model), "config");
	assert_non_null(cfg);
	char path[512];
	snprintf(path, sizeof path, DATA "checkpoints/%s", model);
	strata_catalog *c = open_ok(path);
	strata_error e;
	if (strata_model_describe(path, c, d, &e))
		fail_msg("%s: %s", model, e.message);
	assert_string_equal(d->architecture,
			    json_string_value(json_object_get(cfg, "model_type")));
	assert_int_equal(d->hidden, jint(cfg, "hidden_size"));
	assert_int_equal(d->intermediate, jint(cfg, "intermediate_size"));
	assert_int_equal(d->layers, jint(cfg, "num_hidden_layers"));
	assert_int_equal(d->heads, jint(cfg, "num_attention_heads"));
	assert_int_equal(d->kv_heads, jint(cfg, "num_key_value_heads"));
	assert_int_equal(d->head_dim, jint(cfg, "head_dim"));
	assert_int_equal(d->vocab, jint(cfg, "vocab_size"));
	assert_int_equal(d->max_positions, jint(cfg, "max_position_embeddings"));
	assert_true(d->rms_eps == json_real_value(json_object_get(cfg, "rms_norm_eps")));
	assert_true(d->rope_theta == json_number_value(json_object_get(cfg, "rope_theta")));
	assert_int_equal(d->tied_embeddings,
			 json_is_true(json_object_get(cfg, "tie_word_embeddings")));
	json_t *sw = json_object_get(cfg, "sliding_window");
	if (d->family == STRATA_FAMILY_MISTRAL)
		assert_int_equal(d->sliding_window, json_integer_value(sw));
	if (strata_model_check_tensors(d, c, &e))
		fail_msg("%s: %s", model, e.message);
	strata_catalog_destroy(c);
	json_decref(x);
}

static void tiny_llama_with_llama3_rope(void **s)
{
	(void)s;
	strata_model_desc d;
	compare("tiny-llama", &d);
	assert_int_equal(d.family, STRATA_FAMILY_LLAMA);
	assert_int_equal(d.rope_scaling.kind, STRATA_ROPE_LLAMA3);
	assert_true(d.rope_scaling.factor == 8.0);
	assert_true(d.rope_scaling.low_freq_factor == 1.0);
	assert_true(d.rope_scaling.high_freq_factor == 4.0);
	assert_int_equal(d.rope_scaling.original_max_position_embeddings, 32);
	assert_false(d.attention_bias);
	assert_string_equal(d.dtype, "bfloat16");
}

static void sharded_qwen2_tied_with_qkv_bias(void **s)
{
	(void)s;
	strata_model_desc d;
	compare("tiny-qwen2-sharded", &d);
	assert_int_equal(d.family, STRATA_FAMILY_QWEN2);
	assert_true(d.attention_bias);
	assert_false(d.attention_out_bias);
	assert_true(d.tied_embeddings);
	assert_int_equal(d.sliding_window, 0); /* use_sliding_window false */
	assert_string_equal(d.dtype, "float16");
}

static void tiny_mistral_sliding_window(void **s)
{
	(void)s;
	strata_model_desc d;
	compare("tiny-mistral", &d);
	assert_int_equal(d.family, STRATA_FAMILY_MISTRAL);
	assert_int_equal(d.sliding_window, 32);
}

static void gguf_llama_from_metadata(void **s)
{
	(void)s;
	strata_catalog *c = open_ok(DATA "gguf/stories260K.gguf");
	strata_model_desc d;
	strata_error e;
	assert_int_equal(strata_model_describe(DATA "gguf/stories260K.gguf", c,
					       &d, &e), STRATA_OK);
	/* stories260K: dim 64, 5 layers, 8 heads / 4 KV heads, ffn 172 */
	assert_int_equal(d.family, STRATA_FAMILY_LLAMA);
	assert_int_equal(d.source, STRATA_FORMAT_GGUF);
	assert_int_equal(d.hidden, 64);
	assert_int_equal(d.layers, 5);
	assert_int_equal(d.heads, 8);
	assert_int_equal(d.kv_heads, 4);
	assert_int_equal(d.head_dim, 8);
	assert_int_equal(d.intermediate, 172);
	assert_int_equal(d.vocab, 512);
	assert_false(d.tied_embeddings);
	assert_false(d.tied_given);
	assert_int_equal(d.bos_token_id, 1); /* llama2.c's tokenizer */
	assert_int_equal(d.eos_token_id, 2);
	assert_int_equal(strata_model_check_tensors(&d, c, &e), STRATA_OK);
	strata_catalog_destroy(c);
	c = open_ok(DATA "gguf/llama-2-tiny-random.gguf");
	assert_int_equal(strata_model_describe("x.gguf", c, &d, &e), STRATA_OK);
	assert_int_equal(d.hidden, 8);
	assert_int_equal(d.vocab, 32000);
	assert_int_equal(strata_model_check_tensors(&d, c, &e), STRATA_OK);
	strata_catalog_destroy(c);
}

static void unknown_architectures_are_reported_not_refused(void **s)
{
	(void)s;
	strata_catalog *c = open_ok(DATA "gguf/ggml-vocab-bert-bge.gguf");
	strata_model_desc d;
	strata_error e;
	assert_int_equal(strata_model_describe("v.gguf", c, &d, &e), STRATA_OK);
	assert_int_equal(d.family, STRATA_FAMILY_UNKNOWN);
	assert_string_equal(d.architecture, "bert");
	assert_int_equal(strata_model_check_tensors(&d, c, &e),
			 STRATA_E_MODEL_ARCH);
	assert_non_null(strstr(e.message, "'bert'"));
	strata_catalog_destroy(c);
	/* no config.json at all */
	c = open_ok(DATA "checkpoints/mixed-dtypes");
	assert_int_equal(strata_model_describe(DATA "checkpoints/mixed-dtypes",
					       c, &d, &e), STRATA_OK);
	assert_int_equal(d.family, STRATA_FAMILY_UNKNOWN);
	strata_catalog_destroy(c);
	const char *gpt2 = "{\"model_type\":\"gpt2\",\"n_embd\":768}";
	assert_int_equal(strata_model_describe_config(gpt2, strlen(gpt2), "c",
						      &d, &e), STRATA_OK);
	assert_int_equal(d.family, STRATA_FAMILY_UNKNOWN);
	assert_string_equal(d.architecture, "gpt2");
}

/* A temporary model: tiny-llama's weights under an edited config. */
static strata_status check_with_config(const char *edit_key, json_t *value,
				       strata_error *e)
{
	json_error_t je;
	json_t *cfg = json_load_file(DATA "checkpoints/tiny-llama/config.json",
				     0, &je);
	json_object_set_new(cfg, edit_key, value);
	char dir[] = "/tmp/strata-model-XXXXXX", p[600];
	assert_non_null(mkdtemp(dir));
	snprintf(p, sizeof p, "%s/config.json", dir);
	assert_int_equal(json_dump_file(cfg, p, 0), 0);
	json_decref(cfg);
	char link[600];
	snprintf(link, sizeof link, "%s/model.safetensors", dir);
	assert_int_equal(symlink(DATA "checkpoints/tiny-llama/model.safetensors",
				 link), 0);
	strata_catalog *c = open_ok(dir);
	strata_model_desc d;
	strata_status s = strata_model_describe(dir, c, &d, e);
	if (!s)
		s = strata_model_check_tensors(&d, c, e);
	strata_catalog_destroy(c);
	unlink(link);
	unlink(p);
	rmdir(dir);
	return s;
}

static void tensor_set_mismatches_name_the_tensor(void **s)
{
	(void)s;
	strata_error e;
	assert_int_equal(check_with_config("intermediate_size", json_integer(48), &e),
			 STRATA_E_MODEL_TENSOR_SHAPE);
	assert_non_null(strstr(e.message, "'model.layers.0.mlp.gate_proj.weight' has shape [40, 16], but the config implies [48, 16]"));
	assert_int_equal(check_with_config("num_hidden_layers", json_integer(3), &e),
			 STRATA_E_MODEL_TENSOR_MISSING);
	assert_non_null(strstr(e.message, "'model.layers.2.input_layernorm.weight'"));
	assert_int_equal(check_with_config("num_hidden_layers", json_integer(1), &e),
			 STRATA_E_MODEL_TENSOR_EXTRA);
	assert_non_null(strstr(e.message, "'model.layers.1."));
	assert_int_equal(check_with_config("tie_word_embeddings", json_true(), &e),
			 STRATA_OK); /* a tied model may still ship lm_head */
	assert_int_equal(check_with_config("attention_bias", json_true(), &e),
			 STRATA_E_MODEL_TENSOR_MISSING);
	assert_non_null(strstr(e.message, "q_proj.bias"));
}

static void bad_config_values_name_the_key(void **s)
{
	(void)s;
	strata_error e;
	assert_int_equal(check_with_config("hidden_size", json_string("16"), &e),
			 STRATA_E_MODEL_CONFIG);
	assert_non_null(strstr(e.message, "\"hidden_size\""));
	assert_int_equal(check_with_config("num_key_value_heads", json_integer(3), &e),
			 STRATA_E_MODEL_CONFIG);
	assert_non_null(strstr(e.message, "num_key_value_heads"));
	assert_int_equal(check_with_config("num_hidden_layers", json_integer(-1), &e),
			 STRATA_E_MODEL_CONFIG);
	assert_int_equal(check_with_config("rope_parameters",
			 json_pack("{s:s,s:f}", "rope_type", "llama3", "factor", 8.0), &e),
			 STRATA_E_MODEL_CONFIG);
	assert_non_null(strstr(e.message, "rope_parameters"));
	const char *bad = "{\"model_type\":\"llama\",";
	strata_model_desc d;
	assert_int_equal(strata_model_describe_config(bad, strlen(bad), "cfg",
						      &d, &e),
			 STRATA_E_MODEL_CONFIG);
	assert_non_null(strstr(e.message, "not valid JSON"));
}

/* The facts the forward pass refuses from (describing never does): token
 * ids (an eos list gives its first), hidden_act, whether the tie was said,
 * qwen2's per-layer window. */
static void runtime_facts_are_described(void **s)
{
	(void)s;
	strata_error e;
	strata_model_desc d;
	const char *q = "{\"model_type\":\"qwen2\",\"hidden_size\":8,"
			"\"intermediate_size\":16,\"num_hidden_layers\":1,"
			"\"num_attention_heads\":2,\"vocab_size\":10,"
			"\"bos_token_id\":3,\"eos_token_id\":[7,8],"
			"\"hidden_act\":\"gelu\",\"use_sliding_window\":true,"
			"\"tie_word_embeddings\":false}";
	assert_int_equal(strata_model_describe_config(q, strlen(q), "c", &d, &e),
			 STRATA_OK);
	assert_int_equal(d.bos_token_id, 3);
	assert_int_equal(d.eos_token_id, 7);
	assert_string_equal(d.hidden_act, "gelu");
	assert_true(d.layer_windows);
	assert_true(d.tied_given);
	assert_false(d.tied_embeddings);
	const char *l = "{\"model_type\":\"llama\",\"hidden_size\":8,"
			"\"intermediate_size\":16,\"num_hidden_layers\":1,"
			"\"num_attention_heads\":2,\"vocab_size\":10,"
			"\"eos_token_id\":\"x\"}";
	assert_int_equal(strata_model_describe_config(l, strlen(l), "c", &d, &e),
			 STRATA_OK);
	assert_int_equal(d.bos_token_id, -1);
	assert_int_equal(d.eos_token_id, -1);
	assert_string_equal(d.hidden_act, "");
	assert_false(d.layer_windows);
	assert_false(d.tied_given);
	/* rope_scaling and rope_parameters: either may carry the scaling;
	 * two different ones are refused, not one silently ignored */
	const char *both = "{\"model_type\":\"gpt2\","
			   "\"rope_parameters\":{\"rope_type\":\"default\","
			   "\"rope_theta\":500000},"
			   "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}";
	assert_int_equal(strata_model_describe_config(both, strlen(both), "c",
						      &d, &e), STRATA_OK);
	assert_int_equal(d.rope_scaling.kind, STRATA_ROPE_OTHER);
	assert_string_equal(d.rope_scaling.type, "yarn");
	assert_true(d.rope_theta == 500000);
	const char *clash = "{\"model_type\":\"gpt2\","
			    "\"rope_parameters\":{\"rope_type\":\"linear\","
			    "\"factor\":2},"
			    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}";
	assert_int_equal(strata_model_describe_config(clash, strlen(clash),
						      "cfg", &d, &e),
			 STRATA_E_MODEL_CONFIG);
	assert_non_null(strstr(e.message, "cfg: \"rope_parameters\""));
	const char *act = "{\"model_type\":\"gpt2\",\"hidden_act\":3}";
	assert_int_equal(strata_model_describe_config(act, strlen(act), "cfg",
						      &d, &e),
			 STRATA_E_MODEL_CONFIG);
	assert_non_null(strstr(e.message, "cfg: \"hidden_act\""));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tiny_llama_with_llama3_rope),
		cmocka_unit_test(sharded_qwen2_tied_with_qkv_bias),
		cmocka_unit_test(tiny_mistral_sliding_window),
		cmocka_unit_test(gguf_llama_from_metadata),
		cmocka_unit_test(unknown_architectures_are_reported_not_refused),
		cmocka_unit_test(tensor_set_mismatches_name_the_tensor),
		cmocka_unit_test(bad_config_values_name_the_key),
		cmocka_unit_test(runtime_facts_are_described),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
