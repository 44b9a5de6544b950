/* test_cuda_moe_group.c - strata__moe_group on CUDA (issue 22: a layer's
 * device experts in the grouped decode kernels, kernels_experts.cu): a
 * small Qwen3-MoE written here (hidden 128, 16 experts of 64, top 4, two
 * layers, random weights) and quantized by strata quantize to Q8_0 and to
 * Q4_0, whose experts the grouped kernels take, decodes greedily on CUDA
 * (--precision fast) resident and with every layer's experts on the CPU
 * and a device cache of 6 (hits grouped, misses on the CPU); the same
 * tokens fed with the knob 1 give every step's logits within 1e-4 of the
 * knob 0's (relative to the step's largest |logit|: the grouped products
 * are the one-expert kernels' lane for lane, so equal bits are expected;
 * a wrong slot, weight or row moves them by the order of 1), and on the
 * CPU the same bits. Skipped (77) without a GPU (layer: infer). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "infer/forward_internal.h"
#include "support/ckpt_writer.h"
#include "support/gpu_skip.h"
#include "strata/infer.h"
#include "strata/model.h"

#define DIM 128
#define HEADS 4
#define KV_HEADS 2
#define HEAD_DIM 32
#define FFN 64
#define EXPERTS 16
#define TOP 4
#define LAYERS 2
#define VOCAB 256
#define PROMPT 4
#define STEPS 12
#define TOLERANCE 1e-4

static char *dir;

static const char config[] =
	"{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": "
	"\"qwen3_moe\", \"attention_bias\": false, \"bos_token_id\": 1, "
	"\"eos_token_id\": 2, \"decoder_sparse_step\": 1, \"head_dim\": 32, "
	"\"hidden_act\": \"silu\", \"hidden_size\": 128, "
	"\"intermediate_size\": 256, \"max_position_embeddings\": 256, "
	"\"mlp_only_layers\": [], \"moe_intermediate_size\": 64, "
	"\"norm_topk_prob\": true, \"num_attention_heads\": 4, "
	"\"num_experts_per_tok\": 4, \"num_experts\": 16, "
	"\"num_hidden_layers\": 2, \"num_key_value_heads\": 2, "
	"\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, "
	"\"tie_word_embeddings\": false, \"torch_dtype\": \"float32\", "
	"\"use_sliding_window\": false, \"vocab_size\": 256}\n";

static uint32_t rng = 2026u;

static float uniform(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)((double)(rng >> 8) / 8388608.0 - 1.0);
}

#define TENSORS_MAX 160
static ckw_tensor tensors[TENSORS_MAX];
static char names[TENSORS_MAX][96];
static float *datas[TENSORS_MAX];
static size_t count;

/* A tensor (rows, cols; cols 0: a vector of rows) of values base +
 * scale * uniform. */
static void add(const char *name, uint64_t rows, uint64_t cols, float base,
		float scale)
{
	assert_true(count < TENSORS_MAX);
	uint64_t n = rows * (cols ? cols : 1);
	float *v = malloc(n * sizeof *v);
	assert_non_null(v);
	for (uint64_t i = 0; i < n; i++)
		v[i] = base + scale * uniform();
	snprintf(names[count], sizeof names[count], "%s", name);
	datas[count] = v;
	tensors[count] = (ckw_tensor){.name = names[count], .type = CKW_F32,
				      .n_dims = cols ? 2 : 1,
				      .shape = {rows, cols},
				      .data = v};
	count++;
}

static void write_model(const char *path)
{
	char name[96];
	const float w = 1.7f / sqrtf((float)DIM), wf = 1.7f / sqrtf((float)FFN);
	add("model.embed_tokens.weight", VOCAB, DIM, 0.0f, 1.0f);
	for (int l = 0; l < LAYERS; l++) {
#define LAYER(fmt, ...)                                                        \
	(snprintf(name, sizeof name, "model.layers.%d." fmt, l, ##__VA_ARGS__), \
	 name)
		add(LAYER("input_layernorm.weight"), DIM, 0, 1.0f, 0.1f);
		add(LAYER("post_attention_layernorm.weight"), DIM, 0, 1.0f, 0.1f);
		add(LAYER("self_attn.q_proj.weight"), HEADS * HEAD_DIM, DIM, 0, w);
		add(LAYER("self_attn.k_proj.weight"), KV_HEADS * HEAD_DIM, DIM, 0, w);
		add(LAYER("self_attn.v_proj.weight"), KV_HEADS * HEAD_DIM, DIM, 0, w);
		add(LAYER("self_attn.o_proj.weight"), DIM, HEADS * HEAD_DIM, 0, w);
		add(LAYER("self_attn.q_norm.weight"), HEAD_DIM, 0, 1.0f, 0.1f);
		add(LAYER("self_attn.k_norm.weight"), HEAD_DIM, 0, 1.0f, 0.1f);
		add(LAYER("mlp.gate.weight"), EXPERTS, DIM, 0, 3 * w);
		for (int e = 0; e < EXPERTS; e++) {
			add(LAYER("mlp.experts.%d.gate_proj.weight", e), FFN, DIM,
			    0, w);
			add(LAYER("mlp.experts.%d.up_proj.weight", e), FFN, DIM, 0,
			    w);
			add(LAYER("mlp.experts.%d.down_proj.weight", e), DIM, FFN,
			    0, wf);
		}
#undef LAYER
	}
	add("model.norm.weight", DIM, 0, 1.0f, 0.1f);
	add("lm_head.weight", VOCAB, DIM, 0, w);
	char file[1100];
	snprintf(file, sizeof file, "%s/model.safetensors", path);
	ckw_safetensors_file(file, tensors, count, NULL);
	snprintf(file, sizeof file, "%s/config.json", path);
	assert_int_equal(ckw_write_file(file, config, strlen(config)), 0);
	for (size_t i = 0; i < count; i++)
		free(datas[i]);
}

static int setup(void **state)
{
	(void)state;
	dir = ckw_temp_dir();
	if (!dir)
		return -1;
	char model[1100];
	snprintf(model, sizeof model, "%s/hf", dir);
	return mkdir(model, 0755) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	int rc = system(cmd);
	free(dir);
	return rc == 0 ? 0 : -1;
}

/* experts on the CPU (0: none) and their device cache */
typedef struct group_case {
	const char *name;
	uint32_t layers, slots;
} group_case;

static const group_case cases[] = {
	{"resident", 0, 0},
	{"experts on the cpu, 6 cached", LAYERS, 6},
};

static strata_session *open_on(const char *gguf, const group_case *k,
			       strata_plan_device device)
{
	strata_session_options o = {.model_path = gguf, .threads = 2,
				    .positions = PROMPT + STEPS,
				    .prefill = PROMPT,
				    .precision = STRATA_PRECISION_FAST};
	o.plan = (strata_plan_options){.mode = STRATA_RESIDENCY_RESIDENT,
				       .has_device_budget = true,
				       .device_budget_bytes = 1ull << 30,
				       .has_host_budget = true,
				       .host_budget_bytes = 1ull << 30};
	o.plan.device = device;
	o.plan.experts.layers = k->layers;
	o.plan.experts.cache_slots = k->slots;
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s (%s): %s / %s", gguf, k->name, err.message, err.fix);
	return s;
}

static int32_t argmax(const float *v)
{
	int32_t best = 0;
	for (int32_t i = 1; i < VOCAB; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

/* The prompt, then STEPS steps: greedy where tokens[PROMPT + i] is -1
 * (filled), else those tokens; every step's logits into out (STEPS + 1,
 * VOCAB). */
static void decode(strata_session *s, int32_t *tokens, float *out, int group)
{
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	strata__moe_group = group;
	for (uint32_t t = 0; t < PROMPT + STEPS; t++) {
		float *row = out + (t < PROMPT ? 0 : (t - PROMPT + 1)) * VOCAB;
		if (strata_forward_run(f, tokens + t, 1, t, row, NULL, &err))
			fail_msg("step %u: %s", t, err.message);
		if (t + 1 < PROMPT + STEPS && t + 1 >= PROMPT &&
		    tokens[t + 1] < 0)
			tokens[t + 1] = argmax(row);
	}
	strata__moe_group = 0;
}

static void check_type(const char *type)
{
	char hf[1100], gguf[1100];
	snprintf(hf, sizeof hf, "%s/hf", dir);
	snprintf(gguf, sizeof gguf, "%s/model-%s.gguf", dir, type);
	strata_quantize_options qo = {.type = type, .threads = 2};
	strata_error err;
	if (strata_quantize(hf, gguf, &qo, NULL, &err))
		fail_msg("quantize %s: %s / %s", type, err.message, err.fix);
	const size_t cells = (size_t)(STEPS + 1) * VOCAB;
	float *off = malloc(cells * sizeof *off), *on = malloc(cells * sizeof *on);
	assert_non_null(off);
	assert_non_null(on);
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
		for (int dev = 0; dev < 2; dev++) {
			int32_t tokens[PROMPT + STEPS];
			for (int i = 0; i < PROMPT + STEPS; i++)
				tokens[i] = i < PROMPT ? 10 + 37 * i : -1;
			const strata_plan_device where =
				dev ? STRATA_PLAN_DEVICE_CPU : STRATA_PLAN_DEVICE_CUDA;
			/* a session each: the expert cache starts empty */
			strata_session *s = open_on(gguf, &cases[c], where);
			decode(s, tokens, off, 0); /* greedy: fills tokens */
			strata_session_close(s);
			s = open_on(gguf, &cases[c], where);
			decode(s, tokens, on, 1); /* the same tokens */
			strata_session_close(s);
			double worst = 0;
			for (uint32_t st = 0; st <= STEPS; st++) {
				double big = 0, d = 0;
				for (uint32_t v = 0; v < VOCAB; v++) {
					const size_t i = (size_t)st * VOCAB + v;
					big = fmax(big, fabs(off[i]));
					d = fmax(d, fabs((double)off[i] - on[i]));
				}
				worst = fmax(worst, d / big);
			}
			const bool same = !memcmp(off, on, cells * sizeof *off);
			print_message("%s %-30s %-4s: knob 1 vs 0 %s, worst %.3g\n",
				      type, cases[c].name, dev ? "cpu" : "cuda",
				      same ? "same bits" : "differs", worst);
			if (dev ? !same : !(worst <= TOLERANCE))
				fail_msg("%s %s on %s: knob 1 moved the logits by "
					 "%.3g of the largest", type,
					 cases[c].name, dev ? "the cpu" : "cuda",
					 worst);
		}
	free(off);
	free(on);
	unlink(gguf);
}

static void test_moe_group_q8_0_decode(void **state)
{
	(void)state;
	char hf[1100];
	snprintf(hf, sizeof hf, "%s/hf", dir);
	if (!count)
		write_model(hf);
	check_type("Q8_0");
}

static void test_moe_group_q4_0_decode(void **state)
{
	(void)state;
	char hf[1100];
	snprintf(hf, sizeof hf, "%s/hf", dir);
	if (!count)
		write_model(hf);
	check_type("Q4_0");
}

int main(void)
{
	if (gpu_skip_without_device("test_infer_cuda_moe_group"))
		return GPU_SKIP_EXIT;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_moe_group_q8_0_decode),
		cmocka_unit_test(test_moe_group_q4_0_decode),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
