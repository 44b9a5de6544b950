/* test_writer.c - the tests' checkpoint writer (tests/support/
 * ckpt_writer.c) against the readers: every file it writes opens, with the
 * names, shapes, types, offsets, payloads and metadata it was given; its
 * fault hook sees each file's parts and what it bends reaches the reader
 * (layer: checkpoint). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

static strata_catalog *open_ok(const char *path)
{
	strata_catalog *c = NULL;
	strata_error e;
	if (strata_catalog_open(path, &c, &e))
		fail_msg("%s: %s", path, e.message);
	return c;
}

/* The payload of t as the weight store reads it (caller frees). */
static void *read_payload(const strata_catalog *c, const strata_tensor *t)
{
	strata_weight_store *ws = NULL;
	strata_error e;
	assert_int_equal(strata_weight_store_create(c, NULL, &ws, &e), STRATA_OK);
	void *p = malloc(t->bytes ? t->bytes : 1);
	assert_non_null(p);
	assert_int_equal(strata_weight_store_read(ws, &t, &p, 1, &e), STRATA_OK);
	strata_weight_store_destroy(ws);
	return p;
}

static const float A[6] = {1, 2, 3, 4, 5, 6};
static const uint16_t B[4] = {0x3f80, 0x4000, 0x4040, 0x4080}; /* bf16 1-4 */

static void safetensors_single_file_opens_as_written(void **state)
{
	(void)state;
	char *dir = ckw_temp_dir(), path[512];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	const ckw_tensor t[] = {
		{.name = "a", .type = CKW_F32, .n_dims = 2, .shape = {2, 3},
		 .data = A},
		{.name = "b", .type = CKW_BF16, .n_dims = 1, .shape = {4},
		 .data = B},
	};
	ckw_options o = {.metadata = "{\"format\":\"pt\"}"};
	ckw_safetensors_file(path, t, 2, &o);
	strata_catalog *c = open_ok(dir);
	assert_int_equal(strata_catalog_count(c), 2);
	const strata_tensor *a = strata_catalog_find(c, "a");
	const strata_tensor *b = strata_catalog_find(c, "b");
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(a->dtype, STRATA_DTYPE_F32);
	assert_int_equal(a->n_dims, 2);
	assert_int_equal(a->shape[0], 2);
	assert_int_equal(a->shape[1], 3);
	assert_int_equal(a->bytes, 24);
	assert_int_equal(b->dtype, STRATA_DTYPE_BF16);
	assert_int_equal(b->bytes, 8);
	assert_int_equal(b->offset, a->offset + 24); /* back to back */
	/* the header is padded with spaces to 8 bytes */
	assert_int_equal(strata_catalog_file_at(c, 0)->data_offset % 8, 0);
	void *pa = read_payload(c, a), *pb = read_payload(c, b);
	assert_memory_equal(pa, A, sizeof A);
	assert_memory_equal(pb, B, sizeof B);
	free(pa);
	free(pb);
	strata_catalog_destroy(c);
	free(dir);
}

static void safetensors_shards_and_index_open_as_one_catalog(void **state)
{
	(void)state;
	char *dir = ckw_temp_dir();
	ckw_tensor t[5];
	char names[5][16];
	float data[5][4];
	for (int i = 0; i < 5; i++) {
		snprintf(names[i], sizeof names[i], "w%d", i);
		for (int j = 0; j < 4; j++)
			data[i][j] = (float)(10 * i + j);
		t[i] = (ckw_tensor){.name = names[i], .type = CKW_F32,
				    .n_dims = 1, .shape = {4}, .data = data[i]};
	}
	ckw_safetensors_sharded(dir, t, 5, 3, NULL);
	strata_catalog *c = open_ok(dir);
	assert_int_equal(strata_catalog_count(c), 5);
	assert_int_equal(strata_catalog_file_count(c), 3);
	for (int i = 0; i < 5; i++) {
		const strata_tensor *x = strata_catalog_find(c, names[i]);
		assert_non_null(x);
		float *p = read_payload(c, x);
		assert_memory_equal(p, data[i], sizeof data[i]);
		free(p);
	}
	const char *f0 = strata_catalog_file_at(c, 0)->path;
	assert_non_null(strstr(f0, "model-00001-of-00003.safetensors"));
	strata_catalog_destroy(c);
	free(dir);
}

static void gguf_metadata_tensors_and_alignment_open_as_written(void **state)
{
	(void)state;
	char *dir = ckw_temp_dir(), path[512];
	snprintf(path, sizeof path, "%s/m.gguf", dir);
	static const char *const toks[] = {"<s>", "a", "b"};
	static const float scores[] = {0, -1, -2};
	const ckw_kv kv[] = {
		CKW_KV_STR("general.architecture", "llama"),
		CKW_KV_U32("llama.block_count", 7),
		CKW_KV_F32("llama.rope.freq_base", 10000.0),
		CKW_KV_ARRAY("tokenizer.ggml.tokens", STRATA_GGUF_STRING, 3, toks),
		CKW_KV_ARRAY("tokenizer.ggml.scores", STRATA_GGUF_F32, 3, scores),
	};
	unsigned char q8[34 * 2];
	for (size_t i = 0; i < sizeof q8; i++)
		q8[i] = (unsigned char)i;
	const ckw_tensor t[] = {
		{.name = "blk.0.w", .type = CKW_F32, .n_dims = 2, .shape = {2, 3},
		 .data = A},
		{.name = "blk.0.q", .type = CKW_Q8_0, .n_dims = 2,
		 .shape = {2, 32}, .data = q8},
	};
	ckw_options o = {.alignment = 64};
	ckw_gguf_file(path, kv, 5, t, 2, &o);
	strata_catalog *c = open_ok(path);
	const strata_gguf *g = strata_catalog_gguf(c);
	assert_non_null(g);
	uint64_t u = 0;
	double f = 0;
	const char *s = NULL;
	size_t len = 0;
	strata_error e;
	assert_int_equal(strata_gguf_get_u64(g, "llama.block_count", &u, &e), 0);
	assert_int_equal(u, 7);
	assert_int_equal(strata_gguf_get_u64(g, "general.alignment", &u, &e), 0);
	assert_int_equal(u, 64);
	assert_int_equal(strata_gguf_get_f64(g, "llama.rope.freq_base", &f, &e), 0);
	assert_true(f == 10000.0);
	assert_int_equal(strata_gguf_get_string(g, "general.architecture", &s,
						&len, &e), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(s, "llama", 5);
	strata_gguf_type et;
	uint64_t n = 0;
	assert_int_equal(strata_gguf_get_array(g, "tokenizer.ggml.tokens", &et,
					       &n, &e), 0);
	assert_int_equal(et, STRATA_GGUF_STRING);
	assert_int_equal(n, 3);
	strata_gguf_array_string(g, strata_gguf_find(g, "tokenizer.ggml.tokens"),
				 2, &s, &len);
	assert_int_equal(len, 1);
	assert_int_equal(s[0], 'b');
	assert_true(strata_gguf_array_f64(g, strata_gguf_find(
				g, "tokenizer.ggml.scores"), 2) == -2.0);
	const strata_tensor *w = strata_catalog_find(c, "blk.0.w");
	const strata_tensor *q = strata_catalog_find(c, "blk.0.q");
	assert_non_null(w);
	assert_non_null(q);
	assert_int_equal(w->shape[0], 3); /* GGUF order: ne0 first */
	assert_int_equal(w->shape_hf[0], 2);
	assert_int_equal(q->dtype, STRATA_DTYPE_Q8_0);
	assert_int_equal(q->bytes, 68);
	assert_int_equal(w->offset % 64, 0);
	assert_int_equal(q->offset % 64, 0);
	void *pw = read_payload(c, w), *pq = read_payload(c, q);
	assert_memory_equal(pw, A, sizeof A);
	assert_memory_equal(pq, q8, sizeof q8);
	free(pw);
	free(pq);
	strata_catalog_destroy(c);
	free(dir);
}

typedef struct seen {
	int calls;
	ckw_parts at;
	size_t len;
	size_t cut; /* 0: leave the file whole, else keep this many data bytes */
} seen;

static void record_and_cut(ckw_buf *file, const ckw_parts *at, void *ctx)
{
	seen *s = ctx;
	s->calls++;
	s->at = *at;
	s->len = file->len;
	if (s->cut)
		file->len = at->data + s->cut;
}

static void fault_hook_sees_the_parts_and_its_cut_reaches_the_reader(void **s_)
{
	(void)s_;
	char *dir = ckw_temp_dir(), path[512];
	snprintf(path, sizeof path, "%s/m.gguf", dir);
	const ckw_kv kv[] = {CKW_KV_STR("general.architecture", "llama")};
	const ckw_tensor t[] = {{.name = "w", .type = CKW_F32, .n_dims = 1,
				 .shape = {6}, .data = A}};
	seen s = {0};
	ckw_options o = {.fault = record_and_cut, .fault_ctx = &s};
	ckw_gguf_file(path, kv, 1, t, 1, &o);
	assert_int_equal(s.calls, 1);
	assert_string_equal(s.at.file, "m.gguf");
	assert_int_equal(s.at.header, 24); /* magic, version, two counts */
	assert_true(s.at.tensors > s.at.header && s.at.data > s.at.tensors);
	assert_int_equal(s.at.data % 32, 0);
	assert_int_equal(s.len, s.at.data + 32); /* 24 bytes padded to 32 */
	/* the same file cut inside the payload: the reader names it */
	s = (seen){.cut = 10};
	ckw_gguf_file(path, kv, 1, t, 1, &o);
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(strata_catalog_open(path, &c, &e), STRATA_E_CKPT_RANGE);
	assert_non_null(strstr(e.message, "tensor 'w' ends past the end"));
	assert_non_null(strstr(e.message, "m.gguf"));
	assert_null(c);
	/* safetensors: the parts of the header */
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	s = (seen){0};
	ckw_safetensors_file(path, t, 1, &o);
	assert_int_equal(s.at.header, 8);
	assert_int_equal((s.at.data - 8) % 8, 0);
	assert_int_equal(s.len, s.at.data + 24);
	free(dir);
}

static void sparse_files_have_their_size_without_their_bytes(void **state)
{
	(void)state;
	char *dir = ckw_temp_dir(), path[512];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	const ckw_tensor t[] = {
		{.name = "big", .type = CKW_BF16, .n_dims = 2,
		 .shape = {4096, 4096}},
		{.name = "small", .type = CKW_F32, .n_dims = 1, .shape = {6},
		 .data = A},
	};
	ckw_options o = {.sparse = true};
	ckw_safetensors_file(path, t, 2, &o);
	strata_catalog *c = open_ok(dir);
	const strata_catalog_file *f = strata_catalog_file_at(c, 0);
	assert_int_equal(f->size, f->data_offset + 4096ull * 4096 * 2 + 24);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 < 4096ull * 4096 * 2);
	const strata_tensor *sm = strata_catalog_find(c, "small");
	float *p = read_payload(c, sm);
	assert_memory_equal(p, A, sizeof A);
	free(p);
	strata_catalog_destroy(c);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(safetensors_single_file_opens_as_written),
		cmocka_unit_test(safetensors_shards_and_index_open_as_one_catalog),
		cmocka_unit_test(gguf_metadata_tensors_and_alignment_open_as_written),
		cmocka_unit_test(fault_hook_sees_the_parts_and_its_cut_reaches_the_reader),
		cmocka_unit_test(sparse_files_have_their_size_without_their_bytes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
