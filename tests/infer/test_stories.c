/* test_stories.c - a real trained model: Karpathy's stories260K, as GGUF
 * (llama.cpp layout, interleaved rope) and as a Hugging Face directory
 * (rotate-half). Greedy from BOS over 200 positions reproduces llama2.c's
 * known-good text byte for byte (tests/data/reference/
 * stories260K-greedy-200.txt), and prompt logits match transformers'
 * (tests/data/stories260k) within 1e-3 in both layouts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/refmodel.h"

#define GGUF_PATH STRATA_SOURCE_DIR "/tests/data/gguf/stories260K.gguf"
#define HF_PATH STRATA_SOURCE_DIR "/models/stories260K"
#define TEXT_PATH                                                              \
	STRATA_SOURCE_DIR "/tests/data/reference/stories260K-greedy-200.txt"
#define REF_JSON STRATA_SOURCE_DIR "/tests/data/stories260k/reference.json"
#define REF_LOGITS STRATA_SOURCE_DIR "/tests/data/stories260k/logits.f32"

typedef struct run {
	int32_t ids[256];
	uint32_t n;
} run;

static strata_status collect(void *user, int32_t tok, strata_error *err)
{
	(void)err;
	run *r = user;
	if (r->n < 256)
		r->ids[r->n++] = tok;
	return STRATA_OK;
}

/* llama2.c's printing: a piece after BOS loses its leading space, <0xNN>
 * is the raw byte; the GGUF vocabulary writes spaces as U+2581. */
static size_t piece_text(const strata_gguf *g, long kv, int32_t prev,
			 int32_t id, char *out)
{
	const char *s;
	size_t len, n = 0;
	strata_gguf_array_string(g, kv, (uint64_t)id, &s, &len);
	unsigned byte;
	if (len == 6 && sscanf(s, "<0x%02X>", &byte) == 1) {
		out[0] = (char)byte;
		return 1;
	}
	for (size_t i = 0; i < len; i++) {
		if (i + 2 < len && (unsigned char)s[i] == 0xE2 &&
		    (unsigned char)s[i + 1] == 0x96 &&
		    (unsigned char)s[i + 2] == 0x81) {
			out[n++] = ' ';
			i += 2;
		} else {
			out[n++] = s[i];
		}
	}
	if (prev == 1 && n && out[0] == ' ') {
		memmove(out, out + 1, --n);
	}
	return n;
}

static void greedy_from_bos(ref_open *m, run *r)
{
	ref_pass p;
	ref_pass_open("stories260K", 2,
		      (strata_forward_options){.hp = &m->hp, .src = &m->src,
					       .context = 256, .batch = 32},
		      &p);
	strata_forward *f = p.f;
	strata_sampler *s;
	strata_error err;
	strata_sampler_params sp = {.temperature = 0, .top_p = 1,
				    .repeat_penalty = 1};
	assert_int_equal(strata_sampler_create(&sp, m->hp.vocab, &s, &err),
			 STRATA_OK);
	int32_t bos = 1;
	memset(r, 0, sizeof *r);
	/* 200 positions: BOS at 0, one token sampled after each of positions
	 * 0 .. 199. llama2.c stops only at BOS, never at EOS. */
	assert_int_equal(strata_generate(f, s, &bos, 1, 200, -1, collect, r,
					 NULL, &err),
			 STRATA_OK);
	assert_int_equal(r->n, 200);
	assert_int_equal(strata_forward_position(f), 200);
	strata_sampler_destroy(s);
	ref_pass_close(&p);
}

static void test_gguf_greedy_text_matches_llama2c(void **state)
{
	(void)state;
	ref_open m;
	ref_open_model(GGUF_PATH, &m);
	assert_true(m.hp.gguf);
	assert_int_equal(m.hp.rope_layout, STRATA_ROPE_INTERLEAVED);
	run r;
	greedy_from_bos(&m, &r);
	const strata_gguf *g = strata_catalog_gguf(m.cat);
	long kv = strata_gguf_find(g, "tokenizer.ggml.tokens");
	assert_true(kv >= 0);
	char text[8192];
	size_t len = 0;
	int32_t prev = 1;
	for (uint32_t i = 0; i < r.n; i++) {
		len += piece_text(g, kv, prev, r.ids[i], text + len);
		prev = r.ids[i];
		assert_true(len < sizeof text - 64);
	}
	char *want = NULL;
	size_t want_len = 0;
	strata_error err;
	assert_int_equal(strata_file_read_all(TEXT_PATH, 1 << 16, &want,
					      &want_len, &err),
			 STRATA_OK);
	if (len != want_len || memcmp(text, want, len)) {
		text[len] = '\0';
		fail_msg("greedy text differs from llama2.c's:\n%s", text);
	}
	strata_free(want);
	ref_close_model(&m);
}

static void load_json_ids(const char *key, int32_t *out, uint32_t *n)
{
	json_error_t je;
	json_t *root = json_load_file(REF_JSON, 0, &je);
	assert_non_null(root);
	json_t *a = json_object_get(root, key);
	*n = (uint32_t)json_array_size(a);
	assert_true(*n > 0 && *n <= 256);
	for (uint32_t i = 0; i < *n; i++)
		out[i] = (int32_t)json_integer_value(json_array_get(a, i));
	json_decref(root);
}

static void check_prompt_logits(const char *model)
{
	ref_open m;
	ref_open_model(model, &m);
	int32_t ids[256];
	uint32_t n;
	load_json_ids("prompt_ids", ids, &n);
	char *want = NULL;
	size_t len = 0;
	strata_error err;
	assert_int_equal(strata_file_read_all(REF_LOGITS, 1 << 20, &want, &len,
					      &err),
			 STRATA_OK);
	assert_int_equal(len, (size_t)n * m.hp.vocab * sizeof(float));
	float *logits = strata_alloc(len);
	ref_logits(model, &m, ids, n, 64, 64, logits);
	double d = ref_max_diff(logits, (const float *)want,
				(uint64_t)n * m.hp.vocab);
	print_message("%s: max |dlogit| vs transformers %.2e\n",
		      m.hp.gguf ? "gguf" : "safetensors", d);
	assert_true(d <= 1e-3);
	strata_free(logits);
	strata_free(want);
	ref_close_model(&m);
}

static void test_prompt_logits_match_transformers(void **state)
{
	(void)state;
	check_prompt_logits(GGUF_PATH);
	check_prompt_logits(HF_PATH);
}

static void test_hf_layout_greedy_ids_match(void **state)
{
	(void)state;
	ref_open m;
	ref_open_model(HF_PATH, &m);
	assert_false(m.hp.gguf);
	run r;
	greedy_from_bos(&m, &r);
	int32_t want[256];
	uint32_t n;
	load_json_ids("greedy_200_ids", want, &n);
	/* The reference lists BOS then the 200 sampled tokens. */
	assert_int_equal(n, 201);
	assert_int_equal(want[0], 1);
	assert_memory_equal(r.ids, want + 1, 200 * sizeof(int32_t));
	ref_close_model(&m);
}

/* A callback that has what it wants after `stop_after` tokens. */
typedef struct stop_run {
	run r;
	uint32_t stop_after;
} stop_run;

static strata_status collect_then_stop(void *user, int32_t tok,
				       strata_error *err)
{
	stop_run *s = user;
	collect(&s->r, tok, err);
	return s->r.n == s->stop_after ? STRATA_E_INFER_STOP : STRATA_OK;
}

/* STRATA_E_INFER_STOP from the callback ends generation successfully,
 * that token not fed back; a truncated cache then continues exactly as a
 * fresh one fed the same tokens (greedy ids equal the reference's). */
static void test_caller_stop_and_truncate_continue_exactly(void **state)
{
	(void)state;
	ref_open m;
	ref_open_model(HF_PATH, &m);
	int32_t want[256];
	uint32_t n;
	load_json_ids("greedy_200_ids", want, &n);
	ref_pass p;
	ref_pass_open("stories260K", 2,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = 256, .batch = 32},
		      &p);
	strata_forward *f = p.f;
	strata_sampler *s;
	strata_error err;
	strata_sampler_params sp = {.temperature = 0, .top_p = 1,
				    .repeat_penalty = 1};
	assert_int_equal(strata_sampler_create(&sp, m.hp.vocab, &s, &err),
			 STRATA_OK);
	stop_run sr = {.stop_after = 7};
	strata_generate_stats g;
	assert_int_equal(strata_generate(f, s, want, 1, 50, -1,
					 collect_then_stop, &sr, &g, &err),
			 STRATA_OK);
	assert_true(g.stopped_by_caller);
	assert_false(g.stopped_at_eos);
	assert_int_equal(g.generated_tokens, 7);
	assert_int_equal(sr.r.n, 7);
	assert_memory_equal(sr.r.ids, want + 1, 7 * sizeof(int32_t));
	/* BOS and 6 fed tokens; the 7th was not fed */
	assert_int_equal(strata_forward_position(f), 7);
	assert_int_equal(strata_forward_truncate(f, 8, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_forward_truncate(f, 3, &err), STRATA_OK);
	assert_int_equal(strata_forward_position(f), 3);
	/* continue from position 3 with the reference's tokens 3 .. 5 */
	run r = {0};
	assert_int_equal(strata_generate(f, s, want + 3, 3, 20, -1, collect,
					 &r, NULL, &err), STRATA_OK);
	assert_int_equal(r.n, 20);
	assert_memory_equal(r.ids, want + 6, 20 * sizeof(int32_t));
	strata_sampler_destroy(s);
	ref_pass_close(&p);
	ref_close_model(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gguf_greedy_text_matches_llama2c),
		cmocka_unit_test(test_prompt_logits_match_transformers),
		cmocka_unit_test(test_hf_layout_greedy_ids_match),
		cmocka_unit_test(test_caller_stop_and_truncate_continue_exactly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
