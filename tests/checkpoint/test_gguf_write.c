/* test_gguf_write.c - the GGUF writer: what it writes the reader reads
 * back (every scalar type, strings, arrays, tensors at aligned offsets,
 * general.alignment honoured); a real file's pairs copied through it come
 * back equal; setting a key twice keeps one pair; a failed write (disk
 * full), a failed fill or an allocation failure at any point leaves the
 * path as it was with no temporary file (layer: checkpoint). */
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

#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

#define STORIES STRATA_SOURCE_DIR "/tests/data/gguf/stories260K.gguf"

static char *dir;

/* Payload of tensor i: byte k is (i * 31 + k) & 0xff. */
static strata_status pattern(void *ctx, size_t i, void *dst, uint64_t bytes,
			     strata_error *err)
{
	(void)ctx;
	(void)err;
	unsigned char *p = dst;
	for (uint64_t k = 0; k < bytes; k++)
		p[k] = (unsigned char)(i * 31 + k);
	return STRATA_OK;
}

static strata_status failing(void *ctx, size_t i, void *dst, uint64_t bytes,
			     strata_error *err)
{
	size_t *fail_at = ctx;
	if (i == *fail_at)
		return strata_fail(err, STRATA_E_CKPT_VALUE, "fix the tensor",
				   "tensor %zu is bad", i);
	return pattern(ctx, i, dst, bytes, err);
}

/* A writer with one pair of each kind and three tensors. */
static strata_status build(strata_gguf_writer **out, strata_error *err)
{
	strata_gguf_writer *w = NULL;
	strata_status s = strata_gguf_writer_create(&w, err);
	static const int32_t ints[3] = {-1, 0, 7};
	static const float fl[2] = {0.5f, -2.0f};
	static const char *const strs[2] = {"a", "b c"};
	const uint64_t ne_a[2] = {64, 3}, ne_b[1] = {5}, ne_c[2] = {32, 2};
	if (!s) s = strata_gguf_writer_set_string(w, "general.architecture", "llama", 5, err);
	if (!s) s = strata_gguf_writer_set_uint(w, "k.u8", STRATA_GGUF_U8, 200, err);
	if (!s) s = strata_gguf_writer_set_uint(w, "k.i16", STRATA_GGUF_I16, (uint64_t)-3, err);
	if (!s) s = strata_gguf_writer_set_uint(w, "k.u64", STRATA_GGUF_U64, 1ull << 40, err);
	if (!s) s = strata_gguf_writer_set_uint(w, "k.bool", STRATA_GGUF_BOOL, 1, err);
	if (!s) s = strata_gguf_writer_set_f32(w, "k.f32", 0.25f, err);
	if (!s) s = strata_gguf_writer_set_array(w, "k.ints", STRATA_GGUF_I32, ints, 3, err);
	if (!s) s = strata_gguf_writer_set_array(w, "k.floats", STRATA_GGUF_F32, fl, 2, err);
	if (!s) s = strata_gguf_writer_set_array(w, "k.strs", STRATA_GGUF_STRING, strs, 2, err);
	if (!s) s = strata_gguf_writer_set_uint(w, "general.alignment", STRATA_GGUF_U32, 64, err);
	/* set again: replaced in place, still one pair */
	if (!s) s = strata_gguf_writer_set_uint(w, "k.u8", STRATA_GGUF_U8, 201, err);
	if (!s) s = strata_gguf_writer_add_tensor(w, "a", STRATA_DTYPE_F16, 2, ne_a, err);
	if (!s) s = strata_gguf_writer_add_tensor(w, "b", STRATA_DTYPE_F32, 1, ne_b, err);
	if (!s) s = strata_gguf_writer_add_tensor(w, "c", STRATA_DTYPE_Q8_0, 2, ne_c, err);
	if (s) {
		strata_gguf_writer_destroy(w);
		return s;
	}
	*out = w;
	return STRATA_OK;
}

static void what_it_writes_the_reader_reads(void **state)
{
	(void)state;
	char path[4200];
	snprintf(path, sizeof path, "%s/w.gguf", dir);
	strata_error err;
	strata_gguf_writer *w;
	assert_int_equal(build(&w, &err), 0);
	assert_int_equal(strata_gguf_writer_tensor_count(w), 3);
	assert_int_equal(strata_gguf_writer_write(w, path, pattern, NULL, &err), 0);
	strata_gguf_writer_destroy(w);
	strata_catalog *c;
	assert_int_equal(strata_catalog_open(path, &c, &err), 0);
	const strata_gguf *g = strata_catalog_gguf(c);
	uint64_t u;
	double f;
	bool b;
	assert_int_equal(strata_gguf_kv_count(g), 10);
	assert_int_equal(strata_gguf_get_u64(g, "k.u8", &u, &err), 0);
	assert_int_equal(u, 201);
	assert_int_equal(strata_gguf_kv_type(g, strata_gguf_find(g, "k.i16")),
			 STRATA_GGUF_I16);
	assert_int_equal(strata_gguf_get_u64(g, "k.u64", &u, &err), 0);
	assert_int_equal(u, 1ull << 40);
	assert_int_equal(strata_gguf_get_bool(g, "k.bool", &b, &err), 0);
	assert_true(b);
	assert_int_equal(strata_gguf_get_f64(g, "k.f32", &f, &err), 0);
	assert_true(f == 0.25);
	long kv = strata_gguf_find(g, "k.ints");
	assert_int_equal(strata_gguf_array_i64(g, kv, 0), -1);
	assert_int_equal(strata_gguf_array_i64(g, kv, 2), 7);
	kv = strata_gguf_find(g, "k.floats");
	assert_true(strata_gguf_array_f64(g, kv, 1) == -2.0);
	kv = strata_gguf_find(g, "k.strs");
	const char *s;
	size_t len;
	strata_gguf_array_string(g, kv, 1, &s, &len);
	assert_true(len == 3 && !memcmp(s, "b c", 3));
	assert_int_equal(strata_catalog_count(c), 3);
	for (size_t i = 0; i < 3; i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		assert_int_equal((t->offset - strata_catalog_file_at(c, 0)->data_offset) % 64, 0);
		FILE *fp = fopen(path, "rb");
		unsigned char *p = malloc(t->bytes);
		fseek(fp, (long)t->offset, SEEK_SET);
		assert_int_equal(fread(p, 1, t->bytes, fp), t->bytes);
		fclose(fp);
		for (uint64_t k = 0; k < t->bytes; k++)
			assert_int_equal(p[k], (unsigned char)(i * 31 + k));
		free(p);
	}
	assert_int_equal(strata_catalog_find(c, "c")->bytes, 2 * 34);
	strata_catalog_destroy(c);
}

static void copied_pairs_come_back_equal(void **state)
{
	(void)state;
	char path[4200];
	snprintf(path, sizeof path, "%s/copy.gguf", dir);
	strata_error err;
	strata_catalog *src, *c;
	assert_int_equal(strata_catalog_open(STORIES, &src, &err), 0);
	const strata_gguf *g = strata_catalog_gguf(src);
	strata_gguf_writer *w;
	assert_int_equal(strata_gguf_writer_create(&w, &err), 0);
	for (uint64_t i = 0; i < strata_gguf_kv_count(g); i++)
		assert_int_equal(strata_gguf_writer_copy(w, g, (long)i, &err), 0);
	assert_int_equal(strata_gguf_writer_copy(w, g, -1, &err), STRATA_E_INVALID_ARG);
	assert_int_equal(strata_gguf_writer_write(w, path, pattern, NULL, &err), 0);
	strata_gguf_writer_destroy(w);
	assert_int_equal(strata_catalog_open(path, &c, &err), 0);
	const strata_gguf *h = strata_catalog_gguf(c);
	assert_int_equal(strata_gguf_kv_count(h), strata_gguf_kv_count(g));
	/* the pairs' bytes: the copied file's header equals the source's up
	 * to the tensor infos (same pairs, same order) */
	FILE *a = fopen(STORIES, "rb"), *b = fopen(path, "rb");
	unsigned char x[1 << 16], y[1 << 16];
	size_t na = fread(x, 1, sizeof x, a), nb = fread(y, 1, sizeof y, b);
	fclose(a);
	fclose(b);
	assert_true(nb > 24 && na > 24);
	/* counts differ (no tensors); every pair after them is equal */
	assert_memory_equal(x + 16, y + 16, 8);
	for (uint64_t i = 0; i < strata_gguf_kv_count(g); i++) {
		const char *k = strata_gguf_kv_key(g, (long)i);
		assert_string_equal(k, strata_gguf_kv_key(h, (long)i));
		assert_int_equal(strata_gguf_kv_type(g, (long)i),
				 strata_gguf_kv_type(h, (long)i));
	}
	strata_gguf_type et;
	uint64_t n1, n2;
	assert_int_equal(strata_gguf_get_array(h, "tokenizer.ggml.scores", &et, &n1, &err), 0);
	assert_int_equal(strata_gguf_get_array(g, "tokenizer.ggml.scores", &et, &n2, &err), 0);
	assert_int_equal(n1, n2);
	long k1 = strata_gguf_find(h, "tokenizer.ggml.scores");
	long k2 = strata_gguf_find(g, "tokenizer.ggml.scores");
	for (uint64_t i = 0; i < n1; i++)
		assert_true(strata_gguf_array_f64(h, k1, i) == strata_gguf_array_f64(g, k2, i));
	strata_catalog_destroy(c);
	strata_catalog_destroy(src);
}

/* The folder holds exactly `keep` (or nothing): no temporary file. */
static void only(const char *keep)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && (!keep || strcmp(e->d_name, keep)))
			fail_msg("'%s' left behind", e->d_name);
	closedir(d);
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

static int write_calls, write_fail_at;
static ssize_t fake_write(int fd, const void *b, size_t n)
{
	if (++write_calls == write_fail_at) {
		errno = ENOSPC;
		return -1;
	}
	return write(fd, b, n);
}

static void failures_leave_the_path_as_it_was(void **state)
{
	(void)state;
	char path[4200];
	snprintf(path, sizeof path, "%s/keep.gguf", dir);
	/* clean folder but for the file that must survive */
	char cmd[4400];
	snprintf(cmd, sizeof cmd, "rm -f '%s'/*", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(ckw_write_file(path, "old", 3), 0);
	strata_error err;
	strata_gguf_writer *w;
	assert_int_equal(build(&w, &err), 0);
	/* disk full at the header, at each tensor */
	for (int at = 1; at <= 4; at++) {
		write_calls = 0;
		write_fail_at = at;
		strata_sys.write = fake_write;
		strata_status s = strata_gguf_writer_write(w, path, pattern, NULL, &err);
		strata_sys_reset();
		assert_int_equal(s, STRATA_E_IO);
		assert_non_null(strstr(err.message, strerror(ENOSPC)));
		expect_old(path);
		only("keep.gguf");
	}
	/* a fill that fails stops the write with its own error */
	for (size_t at = 0; at < 3; at++) {
		assert_int_equal(strata_gguf_writer_write(w, path, failing, &at, &err),
				 STRATA_E_CKPT_VALUE);
		assert_non_null(strstr(err.message, "is bad"));
		expect_old(path);
		only("keep.gguf");
	}
	/* an allocation failure anywhere (build and write): E_NOMEM */
	strata_gguf_writer_destroy(w);
	for (long n = 0;; n++) {
		strata_alloc_fail_after(n);
		strata_gguf_writer *v = NULL;
		strata_status s = build(&v, &err);
		if (!s)
			s = strata_gguf_writer_write(v, path, pattern, NULL, &err);
		strata_alloc_fail_after(-1);
		strata_gguf_writer_destroy(v);
		if (!s)
			break;
		assert_int_equal(s, STRATA_E_NOMEM);
		expect_old(path);
		only("keep.gguf");
		assert_true(n < 1000);
	}
	/* a folder that does not exist */
	char missing[4300];
	snprintf(missing, sizeof missing, "%s/none/x.gguf", dir);
	assert_int_equal(build(&w, &err), 0);
	assert_int_equal(strata_gguf_writer_write(w, missing, pattern, NULL, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "there is no folder"));
	/* a bad tensor: a type ggml lacks, a shape that is not whole blocks */
	const uint64_t ne[2] = {33, 1};
	assert_int_equal(strata_gguf_writer_add_tensor(w, "u", STRATA_DTYPE_U8, 2, ne, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_gguf_writer_add_tensor(w, "q", STRATA_DTYPE_Q8_0, 2, ne, &err),
			 STRATA_E_CKPT_SHAPE);
	assert_non_null(strstr(err.message, "'q'"));
	strata_gguf_writer_destroy(w);
}

static int setup(void **state)
{
	(void)state;
	dir = ckw_temp_dir();
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	(void)!system(cmd);
	free(dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(what_it_writes_the_reader_reads),
		cmocka_unit_test(copied_pairs_come_back_equal),
		cmocka_unit_test(failures_leave_the_path_as_it_was),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
