/* test_weight_store.c - payload reads: bytes equal the file's, f32
 * conversion equals the values torch wrote, coalescing, the LRU bound,
 * O_DIRECT and its fallback, threads, injected I/O faults, OOM, and that
 * opening a model reads headers only. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

#define DATA STRATA_SOURCE_DIR "/tests/data/"
#define QWEN DATA "checkpoints/tiny-qwen2-sharded"

static strata_catalog *open_ok(const char *path)
{
	strata_catalog *c = NULL;
	strata_error e;
	if (strata_catalog_open(path, &c, &e))
		fail_msg("%s: %s", path, e.message);
	return c;
}

/* The tensor's bytes as stdio reads them. */
static unsigned char *file_bytes(const strata_catalog *c, const strata_tensor *t)
{
	FILE *f = fopen(strata_catalog_file_at(c, t->file)->path, "rb");
	assert_non_null(f);
	unsigned char *p = malloc(t->bytes ? t->bytes : 1);
	assert_int_equal(fseek(f, (long)t->offset, SEEK_SET), 0);
	assert_int_equal(fread(p, 1, t->bytes, f), t->bytes);
	fclose(f);
	return p;
}

/* Reads every tensor of c in one call and compares with stdio. */
static void read_all_and_compare(const strata_catalog *c,
				 strata_weight_store *ws)
{
	size_t n = strata_catalog_count(c);
	const strata_tensor **ts = calloc(n, sizeof *ts);
	void **dst = calloc(n, sizeof *dst);
	for (size_t i = 0; i < n; i++) {
		ts[n - 1 - i] = strata_catalog_tensor(c, i); /* any order */
		dst[n - 1 - i] = malloc(ts[n - 1 - i]->bytes + 1);
	}
	strata_error e;
	if (strata_weight_store_read(ws, ts, dst, n, &e))
		fail_msg("read: %s", e.message);
	for (size_t i = 0; i < n; i++) {
		unsigned char *want = file_bytes(c, ts[i]);
		assert_memory_equal(dst[i], want, ts[i]->bytes);
		free(want);
		free(dst[i]);
	}
	free(ts);
	free(dst);
}

static void values_match_what_torch_wrote(void **s)
{
	(void)s;
	json_error_t je;
	json_t *x = json_load_file(DATA "checkpoints/expected.json", 0, &je);
	json_t *values = json_object_get(json_object_get(x, "mixed-dtypes"),
					 "values");
	strata_catalog *c = open_ok(DATA "checkpoints/mixed-dtypes");
	strata_weight_store *ws;
	strata_error e;
	assert_int_equal(strata_weight_store_create(c, NULL, &ws, &e), STRATA_OK);
	const char *names[] = {"f32", "f16", "bf16"};
	for (int k = 0; k < 3; k++) {
		const strata_tensor *t = strata_catalog_find(c, names[k]);
		unsigned char buf[64];
		float f[64];
		void *dst = buf;
		assert_int_equal(strata_weight_store_read(ws, &t, &dst, 1, &e),
				 STRATA_OK);
		assert_int_equal(strata_dtype_to_f32(t->dtype, buf, t->elements,
						     f, &e), STRATA_OK);
		json_t *want = json_object_get(values, names[k]);
		assert_int_equal(json_array_size(want), t->elements);
		for (size_t i = 0; i < t->elements; i++)
			assert_true(f[i] == (float)json_real_value(
						     json_array_get(want, i)));
	}
	const strata_tensor *t = strata_catalog_find(c, "i8");
	float f[8];
	assert_int_equal(strata_dtype_to_f32(t->dtype, "", 8, f, &e),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(e.message, "I8"));
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
	json_decref(x);
}

static void q8_0_dequantises(void **s)
{
	(void)s;
	unsigned char blk[34] = {0x00, 0x38}; /* f16 0.5 */
	for (int j = 0; j < 32; j++)
		blk[2 + j] = (unsigned char)(int8_t)(j - 16);
	float f[32];
	strata_error e;
	assert_int_equal(strata_dtype_to_f32(STRATA_DTYPE_Q8_0, blk, 32, f, &e),
			 STRATA_OK);
	for (int j = 0; j < 32; j++)
		assert_true(f[j] == 0.5f * (float)(j - 16));
	assert_true(strata_f16_to_f32(0x3c00) == 1.0f);
	assert_true(strata_f16_to_f32(0x0001) == 5.9604644775390625e-8f);
	assert_true(strata_f16_to_f32(0xfc00) < -1e38f);
}

static void sharded_reads_coalesce_and_respect_the_lru_bound(void **s)
{
	(void)s;
	strata_catalog *c = open_ok(QWEN);
	size_t files = strata_catalog_file_count(c), n = strata_catalog_count(c);
	assert_int_equal(files, 9);
	strata_weight_store_options opt = {.max_open_shards = 2};
	strata_weight_store *ws;
	strata_error e;
	assert_int_equal(strata_weight_store_create(c, &opt, &ws, &e), STRATA_OK);
	read_all_and_compare(c, ws);
	strata_weight_store_stats st;
	strata_weight_store_get_stats(ws, &st);
	assert_string_equal(st.backend, "pread");
	/* each shard's tensors tile it: one read per shard */
	assert_int_equal(st.physical_reads, 9);
	assert_int_equal(st.coalesced_group_hits, n - 9);
	assert_int_equal(st.cache_misses, 9);
	assert_int_equal(st.cache_hits, 0);
	assert_int_equal(st.evictions, 7);
	assert_int_equal(st.currently_cached_shards, 2);
	assert_int_equal(st.touched_count, 9);
	assert_int_equal(st.payload_count, 9);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += strata_catalog_tensor(c, i)->bytes;
	assert_int_equal(st.physical_read_bytes, total);
	assert_null(st.note);
	/* the last shard read is still open: reading from it is a hit */
	const strata_tensor *last = strata_catalog_tensor(c, n - 1);
	unsigned char buf[8192];
	void *dst = buf;
	assert_int_equal(strata_weight_store_read(ws, &last, &dst, 1, &e), 0);
	strata_weight_store_get_stats(ws, &st);
	assert_int_equal(st.cache_hits, 1);
	assert_int_equal(st.physical_reads, 10);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static void gguf_payloads_read_back(void **s)
{
	(void)s;
	strata_catalog *c = open_ok(DATA "gguf/stories260K.gguf");
	strata_weight_store *ws;
	strata_error e;
	assert_int_equal(strata_weight_store_create(c, NULL, &ws, &e), STRATA_OK);
	read_all_and_compare(c, ws);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static int refuse_direct(const char *path, int flags, mode_t mode)
{
	if (flags & O_DIRECT) {
		errno = EINVAL;
		return -1;
	}
	return open(path, flags, mode);
}

static ssize_t refuse_direct_read(int fd, void *buf, size_t n, off_t off)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl != -1 && (fl & O_DIRECT)) {
		errno = EINVAL;
		return -1;
	}
	return pread(fd, buf, n, off);
}

static void direct_io_reads_or_falls_back_with_a_note(void **s)
{
	(void)s;
	/* the repository's filesystem: O_DIRECT or a note, same bytes */
	strata_catalog *c = open_ok(QWEN);
	strata_weight_store_options opt = {.direct_io = true};
	strata_weight_store *ws;
	strata_error e;
	strata_weight_store_stats st;
	assert_int_equal(strata_weight_store_create(c, &opt, &ws, &e), 0);
	read_all_and_compare(c, ws);
	strata_weight_store_get_stats(ws, &st);
	assert_true(!strcmp(st.backend, "o_direct") ? st.note == NULL
						    : st.note != NULL);
	if (!strcmp(st.backend, "o_direct"))
		assert_int_equal(st.physical_read_bytes % 4096, 0);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
	/* a filesystem that refuses O_DIRECT (as tmpfs did before Linux
	 * 6.6) answers EINVAL: injected here */
	strata_sys.open = refuse_direct;
	c = open_ok(QWEN);
	assert_int_equal(strata_weight_store_create(c, &opt, &ws, &e), 0);
	read_all_and_compare(c, ws);
	strata_weight_store_get_stats(ws, &st);
	strata_sys_reset();
	assert_string_equal(st.backend, "pread");
	assert_non_null(st.note);
	assert_non_null(strstr(st.note, "refused O_DIRECT"));
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
	/* a filesystem that opens with O_DIRECT but refuses the reads */
	strata_sys.pread = refuse_direct_read;
	c = open_ok(QWEN);
	assert_int_equal(strata_weight_store_create(c, &opt, &ws, &e), 0);
	read_all_and_compare(c, ws);
	strata_weight_store_get_stats(ws, &st);
	strata_sys_reset();
	assert_string_equal(st.backend, "pread");
	assert_non_null(st.note);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

typedef struct worker {
	const strata_catalog *c;
	strata_weight_store *ws;
	unsigned seed;
	int bad;
} worker;

static void *work(void *arg)
{
	worker *w = arg;
	size_t n = strata_catalog_count(w->c);
	unsigned char buf[8192];
	for (int k = 0; k < 200; k++) {
		w->seed = w->seed * 1103515245u + 12345u;
		const strata_tensor *t =
			strata_catalog_tensor(w->c, (w->seed >> 8) % n);
		void *dst = buf;
		strata_error e;
		if (t->bytes > sizeof buf ||
		    strata_weight_store_read(w->ws, &t, &dst, 1, &e)) {
			w->bad++;
			continue;
		}
		FILE *f = fopen(strata_catalog_file_at(w->c, t->file)->path, "rb");
		unsigned char want[8192];
		fseek(f, (long)t->offset, SEEK_SET);
		if (fread(want, 1, t->bytes, f) != t->bytes ||
		    memcmp(want, buf, t->bytes))
			w->bad++;
		fclose(f);
	}
	return NULL;
}

static void concurrent_reads_are_correct(void **s)
{
	(void)s;
	strata_catalog *c = open_ok(QWEN);
	strata_weight_store_options opt = {.max_open_shards = 2};
	strata_weight_store *ws;
	strata_error e;
	assert_int_equal(strata_weight_store_create(c, &opt, &ws, &e), 0);
	pthread_t th[4];
	worker w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (worker){c, ws, (unsigned)i * 7919u + 1, 0};
		assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].bad, 0);
	}
	strata_weight_store_stats st;
	strata_weight_store_get_stats(ws, &st);
	assert_true(st.currently_cached_shards <= 2);
	assert_int_equal(st.cache_hits + st.cache_misses, 800);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* Injected faults                                                          */
/* ------------------------------------------------------------------------ */

static uint64_t pread_bytes;
static int pread_mode; /* 0 count, 1 EIO, 2 short reads */

static ssize_t fake_pread(int fd, void *buf, size_t n, off_t off)
{
	if (pread_mode == 1) {
		errno = EIO;
		return -1;
	}
	if (pread_mode == 2 && n > 1)
		n /= 2;
	ssize_t r = pread(fd, buf, n, off);
	if (r > 0)
		pread_bytes += (uint64_t)r;
	return r;
}

static void io_faults_are_named_and_short_reads_retried(void **s)
{
	(void)s;
	strata_catalog *c = open_ok(QWEN);
	strata_weight_store *ws;
	strata_error e;
	assert_int_equal(strata_weight_store_create(c, NULL, &ws, &e), 0);
	strata_sys.pread = fake_pread;
	pread_mode = 2;
	read_all_and_compare(c, ws);
	pread_mode = 1;
	const strata_tensor *t = strata_catalog_tensor(c, 0);
	unsigned char buf[8192];
	void *dst = buf;
	assert_int_equal(strata_weight_store_read(ws, &t, &dst, 1, &e),
			 STRATA_E_CKPT_READ);
	assert_non_null(strstr(e.message, t->name));
	assert_non_null(strstr(e.message, "model-0000"));
	strata_sys_reset();
	/* a pointer that is not one of the catalog's tensors */
	strata_tensor fake = *t;
	const strata_tensor *fp = &fake;
	assert_int_equal(strata_weight_store_read(ws, &fp, &dst, 1, &e),
			 STRATA_E_INVALID_ARG);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static void opening_reads_headers_only(void **s)
{
	(void)s;
	strata_sys.pread = fake_pread;
	pread_mode = 0;
	pread_bytes = 0;
	strata_catalog *c = open_ok(QWEN);
	strata_sys_reset();
	uint64_t headers = 0;
	for (size_t i = 0; i < strata_catalog_file_count(c); i++)
		headers += strata_catalog_file_at(c, i)->data_offset;
	struct stat sb;
	assert_int_equal(stat(QWEN "/model.safetensors.index.json", &sb), 0);
	/* 8 + JSON per shard, and the index */
	assert_int_equal(pread_bytes, headers + (uint64_t)sb.st_size);
	strata_catalog_destroy(c);
}

/* GGUF's header end is known only once parsed: the read-ahead may fetch
 * a little past it, bounded as gguf.c states. */
static void gguf_opening_reads_little_past_the_header(void **s)
{
	(void)s;
	const char *files[] = {DATA "gguf/stories260K.gguf",
			       DATA "gguf/llama-2-tiny-random.gguf"};
	for (int i = 0; i < 2; i++) {
		strata_sys.pread = fake_pread;
		pread_mode = 0;
		pread_bytes = 0;
		strata_catalog *c = open_ok(files[i]);
		strata_sys_reset();
		uint64_t header = strata_catalog_file_at(c, 0)->data_offset;
		uint64_t past = pread_bytes - header;
		assert_true(pread_bytes >= header - 32); /* padding may be unread */
		assert_true(past <= 4096 || past <= header / 4);
		strata_catalog_destroy(c);
	}
}

static void oom_in_create_and_read_fails_cleanly(void **s)
{
	(void)s;
	strata_catalog *c = open_ok(QWEN);
	size_t n = strata_catalog_count(c);
	const strata_tensor **ts = calloc(n, sizeof *ts);
	void **dst = calloc(n, sizeof *dst);
	for (size_t i = 0; i < n; i++) {
		ts[i] = strata_catalog_tensor(c, i);
		dst[i] = malloc(ts[i]->bytes + 1);
	}
	for (long k = 0;; k++) {
		strata_weight_store *ws = NULL;
		strata_error e;
		strata_alloc_fail_after(k);
		strata_status st = strata_weight_store_create(c, NULL, &ws, &e);
		if (!st)
			st = strata_weight_store_read(ws, ts, dst, n, &e);
		strata_alloc_fail_after(-1);
		strata_weight_store_destroy(ws);
		if (!st)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_true(k < 1000);
	}
	for (size_t i = 0; i < n; i++)
		free(dst[i]);
	free(ts);
	free(dst);
	strata_catalog_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(values_match_what_torch_wrote),
		cmocka_unit_test(q8_0_dequantises),
		cmocka_unit_test(sharded_reads_coalesce_and_respect_the_lru_bound),
		cmocka_unit_test(gguf_payloads_read_back),
		cmocka_unit_test(direct_io_reads_or_falls_back_with_a_note),
		cmocka_unit_test(concurrent_reads_are_correct),
		cmocka_unit_test(io_faults_are_named_and_short_reads_retried),
		cmocka_unit_test(opening_reads_headers_only),
		cmocka_unit_test(gguf_opening_reads_little_past_the_header),
		cmocka_unit_test(oom_in_create_and_read_fails_cleanly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
