/* test_plan_peer.c - `strata plan` on the GPU machine's peer model (a
 * 7.5 GB bf16 llama written as real headers over a sparse file): its
 * static and window bytes exact, host:3 fitting 2 GiB where host:4 does
 * not (no score matrix is counted: the tiled attention keeps none), host:2
 * at the link's predicted rate, a placement chosen over streaming,
 * the prompt pass pricing the head once, and a window kept for the
 * prompt where filling the device computes it on the CPU (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli/plan_support.h"
#include "support/ckpt_writer.h"

/* The peer model of shared/GPU-MACHINE.md: bf16, hidden 4096, 16 layers,
 * GQA 32/8, intermediate 14336, vocab 32000. Planning reads headers only,
 * so a sparse file of the real size is a faithful stand-in. */
static const struct {
	const char *name;
	uint64_t rows, cols;
} layer_tensors[] = {
	{"input_layernorm.weight", 4096, 0},
	{"self_attn.q_proj.weight", 4096, 4096},
	{"self_attn.k_proj.weight", 1024, 4096},
	{"self_attn.v_proj.weight", 1024, 4096},
	{"self_attn.o_proj.weight", 4096, 4096},
	{"post_attention_layernorm.weight", 4096, 0},
	{"mlp.gate_proj.weight", 14336, 4096},
	{"mlp.up_proj.weight", 14336, 4096},
	{"mlp.down_proj.weight", 4096, 14336},
};

static void add_tensor(ckw_tensor *t, size_t *n, char (*names)[96],
		       const char *name, uint64_t rows, uint64_t cols,
		       uint64_t *off)
{
	snprintf(names[*n], sizeof names[*n], "%s", name);
	t[*n] = (ckw_tensor){.name = names[*n], .type = CKW_BF16,
			     .n_dims = cols ? 2 : 1, .shape = {rows, cols}};
	*off += ckw_tensor_bytes(&t[*n]);
	(*n)++;
}

/* A bf16 llama of 7.5 GB as a sparse file: its headers are real, its
 * payloads holes. */
static void write_big_llama(const char *dir, uint64_t *layer_bytes,
			    uint64_t *static_bytes)
{
	enum { MAX = 3 + 16 * 9 };
	ckw_tensor *t = calloc(MAX, sizeof *t);
	char (*names)[96] = calloc(MAX, sizeof *names);
	assert_non_null(t);
	assert_non_null(names);
	size_t n = 0;
	uint64_t off = 0;
	add_tensor(t, &n, names, "model.embed_tokens.weight", 32000, 4096, &off);
	add_tensor(t, &n, names, "model.norm.weight", 4096, 0, &off);
	add_tensor(t, &n, names, "lm_head.weight", 32000, 4096, &off);
	*static_bytes = off;
	for (int l = 0; l < 16; l++) {
		uint64_t before = off;
		for (size_t i = 0; i < sizeof layer_tensors / sizeof *layer_tensors;
		     i++) {
			char name[96];
			snprintf(name, sizeof name, "model.layers.%d.%s", l,
				 layer_tensors[i].name);
			add_tensor(t, &n, names, name, layer_tensors[i].rows,
				   layer_tensors[i].cols, &off);
		}
		*layer_bytes = off - before;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	ckw_options o = {.metadata = "{\"format\":\"pt\"}", .sparse = true};
	ckw_safetensors_file(path, t, n, &o);
	free(names);
	free(t);
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\","
	      "\"hidden_size\":4096,\"intermediate_size\":14336,"
	      "\"num_hidden_layers\":16,\"num_attention_heads\":32,"
	      "\"num_key_value_heads\":8,\"vocab_size\":32000,"
	      "\"max_position_embeddings\":4096,\"rms_norm_eps\":1e-05,"
	      "\"rope_theta\":10000.0,\"tie_word_embeddings\":false,"
	      "\"dtype\":\"bfloat16\"}",
	      f);
	fclose(f);
}

/* The peer model in a fresh folder `name` of the build tree (dir: its
 * path), with its bytes per layer and static bytes. */
static void big_llama_in(char *dir, size_t cap, const char *name,
			 uint64_t *layer_bytes, uint64_t *static_bytes)
{
	cli_tmpdir(dir, cap, name);
	write_big_llama(dir, layer_bytes, static_bytes);
}

static void remove_dir(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void gpu_machine_peer_model_streams_at_2GiB(void **state)
{
	(void)state;
	char dir[4096];
	uint64_t layer, st;
	big_llama_in(dir, sizeof dir, "plan-big-llama", &layer, &st);
	const char *argv[] = {"plan", dir, "--json", "--device", "cuda",
			      "--device-memory", "2GiB", "--host-memory",
			      "100GiB", "--context", "1024", NULL};
	json_t *doc = plan_run_json(argv);
	json_t *c0 = json_array_get(json_object_get(doc, "candidates"), 0);
	json_t *w = json_object_get(c0, "weights");
	assert_true(plan_u(w, "static_bytes") == st); /* bf16 kept, all 256-aligned */
	assert_true(plan_u(w, "window_bytes") == 16 * layer);
	/* 2 GiB holds static + the KV cache + 3 layers, not 4 (the plan
	 * counts no score matrix: the tiled attention keeps none) */
	json_t *cs = json_object_get(doc, "candidates"), *host2 = NULL;
	for (size_t i = 0; i < json_array_size(cs); i++) {
		json_t *c = json_array_get(cs, i);
		const char *name = json_string_value(json_object_get(c, "name"));
		if (!strcmp(name, "host:2"))
			host2 = c;
		if (!strcmp(name, "host:3"))
			assert_true(json_is_true(json_object_get(c, "fits")));
		if (!strcmp(name, "host:4"))
			assert_false(json_is_true(json_object_get(c, "fits")));
	}
	assert_non_null(host2);
	assert_true(json_is_true(json_object_get(host2, "fits")));
	double ms = json_real_value(
		json_object_get(host2, "predicted_ms_per_forward"));
	/* streaming limit: every layer over 55 GB/s pinned h2d */
	double limit = (double)(16 * layer) / 55e9 * 1e3;
	assert_true(ms >= limit - 1e-6 && ms < limit * 1.01);
	/* run picks placements on CUDA, and so does plan: one that decodes
	 * faster than streaming every layer (issue 17) */
	json_t *sel = json_object_get(doc, "selected");
	assert_string_equal(json_string_value(json_object_get(sel, "mode")),
			    "placement");
	assert_true(json_real_value(json_object_get(sel, "predicted_decode_ms")) <
		    ms);
	json_t *ws = json_object_get(doc, "weight_store");
	assert_true(plan_u(ws, "physical_read_bytes") == 0);
	json_decref(doc);
	remove_dir(dir);
}

/* The prompt pass of the GPU machine's run (bf16 peer model, 2 GiB, 512
 * tokens, the rates it planned with): the LM head computes the last row
 * only and the embedding is a lookup, so the statics cost a prompt pass
 * what they cost a decode step. Priced at 512 rows on the CPU they made
 * the prediction 1369.7 ms where the run, streaming, took 133 ms. */
static void peer_model_prompt_prices_the_head_once(void **state)
{
	(void)state;
	char dir[4096];
	uint64_t layer, st;
	big_llama_in(dir, sizeof dir, "plan-big-llama-prompt", &layer, &st);
	const char *argv[] = {"plan", dir, "--json", "--device", "cuda",
			      "--device-memory", "2GiB", "--host-memory",
			      "100GiB", "--context", "512", "--prefill-chunk",
			      "512", "--host-memory-bandwidth", "20GB", NULL};
	json_t *doc = plan_run_json(argv);
	json_t *sel = json_object_get(doc, "selected");
	size_t at = (size_t)plan_u(sel, "index");
	json_t *c = json_array_get(json_object_get(doc, "candidates"), at);
	assert_string_equal(json_string_value(json_object_get(c, "mode")),
			    "placement");
	json_t *pp = json_object_get(c, "prefill_placement");
	uint64_t streamed = plan_u(pp, "window_units");
	uint64_t cpu = plan_u(pp, "cpu_units");
	/* the prompt streams what it does not hold: the CPU is slower than
	 * the link for 512 tokens */
	assert_true(cpu == 0);
	assert_true(streamed > 0);
	assert_true(plan_u(c, "crossing_chunk") <= 512);
	double link = (double)(streamed * layer) / 55e9 * 1e3;
	double ms = json_real_value(json_object_get(sel, "predicted_prefill_ms"));
	/* at least the link time, and not the head priced at 512 rows on
	 * the CPU (2 x 262 MB at 512 tokens on 0.2 TFLOP/s is 1.3 s) */
	assert_true(ms >= link);
	assert_true(ms < 1.5 * (double)(16 * layer) / 55e9 * 1e3);
	json_decref(doc);
	remove_dir(dir);
}

/* The placement of the peer model at 7100 MiB with 136 GB/s host reads.
 * The fastest decode fills the device (r15, c1, no window) and computes a
 * 512-token prompt on the CPU in over a second; the plan chooses on
 * decode + prompt / 256 (docs/plan.md "Choosing"): every unit resident,
 * the statics on the CPU, the prompt on the device. */
static json_t *plan_7100(const char *dir, bool force)
{
	const char *argv[] = {"plan", dir, "--json", "--device", "cuda",
			      "--device-memory", "7100MiB", "--host-memory",
			      "100GiB", "--context", "512", "--prefill-chunk",
			      "512", "--host-memory-bandwidth", "136GB",
			      force ? "--resident-units" : NULL, "15",
			      "--cpu-units", "1", NULL};
	return plan_run_json(argv);
}

static double objective(json_t *doc)
{
	json_t *sel = json_object_get(doc, "selected");
	return json_real_value(json_object_get(sel, "predicted_decode_ms")) +
	       json_real_value(json_object_get(sel, "predicted_prefill_ms")) /
		       256.0;
}

static void peer_model_keeps_a_window_for_the_prompt(void **state)
{
	(void)state;
	char dir[4096];
	uint64_t layer, st;
	big_llama_in(dir, sizeof dir, "plan-big-llama-window", &layer, &st);
	json_t *all = plan_7100(dir, false), *full = plan_7100(dir, true);
	json_t *fs = json_object_get(full, "selected");
	json_t *as = json_object_get(all, "selected");
	/* filling the device (the fastest decode, forced): no window, the
	 * prompt on the CPU */
	json_t *fc = json_array_get(json_object_get(full, "candidates"),
				    (size_t)plan_u(fs, "index"));
	assert_true(plan_u(json_object_get(fc, "prefill_placement"),
			   "window_units") == 0);
	double fp = json_real_value(json_object_get(fs, "predicted_prefill_ms"));
	assert_true(fp > 500);
	/* the choice computes no unit of the prompt on the CPU and wins
	 * the request objective */
	json_t *ac = json_array_get(json_object_get(all, "candidates"),
				    (size_t)plan_u(as, "index"));
	assert_true(plan_u(json_object_get(ac, "prefill_placement"),
			   "cpu_units") == 0);
	double ap = json_real_value(json_object_get(as, "predicted_prefill_ms"));
	assert_true(ap * 5 < fp);
	assert_true(objective(all) < objective(full));
	/* and decodes at most 256 x the prompt's saving slower */
	double ad = json_real_value(json_object_get(as, "predicted_decode_ms"));
	double fd = json_real_value(json_object_get(fs, "predicted_decode_ms"));
	assert_true(ad - fd < (fp - ap) / 256.0);
	json_decref(all);
	json_decref(full);
	remove_dir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(gpu_machine_peer_model_streams_at_2GiB),
		cmocka_unit_test(peer_model_prompt_prices_the_head_once),
		cmocka_unit_test(peer_model_keeps_a_window_for_the_prompt),
	};
	return cmocka_run_group_tests(tests, plan_cache_make, plan_cache_remove);
}
