/* test_changed.c - a checkpoint changed while the weight store uses it is
 * an error at the next open, never read without notice (issue 20, defects
 * 3 and 4): a same-size shard renamed over the original, a new mtime, a
 * truncation, and a FIFO in a shard's place (refused at once, no hang);
 * for a mapped shard (strata_weight_store_map, issue 25), what a mapping
 * can and cannot see. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "strata/checkpoint.h"

#define QWEN STRATA_SOURCE_DIR "/tests/data/checkpoints/tiny-qwen2-sharded"

static char dir[4096];

static char *shard(int i)
{
	static char p[2][4300];
	snprintf(p[i & 1], sizeof p[0], "%s/model-%05d-of-00009.safetensors",
		 dir, i);
	return p[i & 1];
}

/* A fresh copy of the sharded checkpoint and a store over it that keeps one
 * shard open, so every other shard's read is a reopen. */
static void open_copy(strata_catalog **c, strata_weight_store **ws)
{
	char cmd[9000];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, QWEN,
		 dir);
	assert_int_equal(system(cmd), 0);
	strata_error e;
	if (strata_catalog_open(dir, c, &e))
		fail_msg("%s", e.message);
	strata_weight_store_options o = {.max_open_shards = 1};
	assert_int_equal(strata_weight_store_create(*c, &o, ws, &e), STRATA_OK);
}

/* Reads the first tensor stored in file f. */
static strata_status read_from(const strata_catalog *c, strata_weight_store *ws,
			       uint32_t f, strata_error *e)
{
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		if (t->file != f)
			continue;
		void *buf = malloc(t->bytes + 1);
		strata_status s = strata_weight_store_read(ws, &t, &buf, 1, e);
		free(buf);
		return s;
	}
	fail_msg("no tensor in file %u", f);
	return STRATA_E_INVALID_ARG;
}

static uint32_t file_of(const strata_catalog *c, const char *path)
{
	for (size_t i = 0; i < strata_catalog_file_count(c); i++)
		if (!strcmp(strata_catalog_file_at(c, i)->path, path))
			return (uint32_t)i;
	fail_msg("%s not in the catalog", path);
	return 0;
}

static void expect_changed(const strata_catalog *c, strata_weight_store *ws,
			   uint32_t f, const char *what)
{
	strata_error e;
	assert_int_equal(read_from(c, ws, f, &e), STRATA_E_CKPT_READ);
	if (!strstr(e.message, what) || !strstr(e.message, "model-00001"))
		fail_msg("message '%s' does not say '%s'", e.message, what);
}

static void test_same_size_shard_renamed_over_is_refused(void **state)
{
	(void)state;
	strata_catalog *c;
	strata_weight_store *ws;
	open_copy(&c, &ws);
	uint32_t f1 = file_of(c, shard(1)), f2 = file_of(c, shard(2));
	strata_error e;
	assert_int_equal(read_from(c, ws, f1, &e), STRATA_OK);
	assert_int_equal(read_from(c, ws, f2, &e), STRATA_OK); /* closes 1 */
	/* the same bytes but one, same size, renamed over the original */
	char tmp[4400], cmd[9000];
	snprintf(tmp, sizeof tmp, "%s/new", dir);
	snprintf(cmd, sizeof cmd, "cp '%s' '%s'", shard(1), tmp);
	assert_int_equal(system(cmd), 0);
	struct stat st;
	assert_int_equal(stat(shard(1), &st), 0);
	int fd = open(tmp, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\x7f", 1, st.st_size - 1), 1);
	close(fd);
	/* the same mtime as the original too: only the inode tells */
	struct timespec times[2] = {st.st_atim, st.st_mtim};
	assert_int_equal(utimensat(AT_FDCWD, tmp, times, 0), 0);
	assert_int_equal(rename(tmp, shard(1)), 0);
	expect_changed(c, ws, f1, "another inode");
	/* the shard still open reads on */
	assert_int_equal(read_from(c, ws, f2, &e), STRATA_OK);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static void test_new_mtime_or_size_is_refused(void **state)
{
	(void)state;
	strata_catalog *c;
	strata_weight_store *ws;
	open_copy(&c, &ws);
	uint32_t f1 = file_of(c, shard(1)), f2 = file_of(c, shard(2));
	strata_error e;
	assert_int_equal(read_from(c, ws, f2, &e), STRATA_OK);
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT},
				    {.tv_sec = 1000000000}};
	assert_int_equal(utimensat(AT_FDCWD, shard(1), times, 0), 0);
	expect_changed(c, ws, f1, "modification time");
	struct stat st;
	assert_int_equal(stat(shard(1), &st), 0);
	assert_int_equal(truncate(shard(1), st.st_size - 1), 0);
	expect_changed(c, ws, f1, "its size");
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static void test_fifo_in_a_shards_place_fails_at_once(void **state)
{
	(void)state;
	strata_catalog *c;
	strata_weight_store *ws;
	open_copy(&c, &ws);
	uint32_t f1 = file_of(c, shard(1)), f2 = file_of(c, shard(2));
	strata_error e;
	assert_int_equal(read_from(c, ws, f2, &e), STRATA_OK);
	assert_int_equal(unlink(shard(1)), 0);
	assert_int_equal(mkfifo(shard(1), 0644), 0);
	/* a blocking open would wait here for a writer, forever */
	alarm(20);
	assert_int_equal(read_from(c, ws, f1, &e), STRATA_E_CKPT_READ);
	alarm(0);
	assert_non_null(strstr(e.message, "FIFO"));
	/* and the store is not wedged: the other shard still reads */
	assert_int_equal(read_from(c, ws, f2, &e), STRATA_OK);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static void test_fifo_model_file_is_refused(void **state)
{
	(void)state;
	char p[4400];
	snprintf(p, sizeof p, "%s-fifo.gguf", dir);
	unlink(p);
	assert_int_equal(mkfifo(p, 0644), 0);
	strata_catalog *c = NULL;
	strata_error e;
	alarm(20);
	assert_int_not_equal(strata_catalog_open(p, &c, &e), STRATA_OK);
	alarm(0);
	assert_null(c);
	assert_non_null(strstr(e.message, "regular file"));
	unlink(p);
}

/* The first tensor stored in file f. */
static const strata_tensor *first_in(const strata_catalog *c, uint32_t f)
{
	for (size_t i = 0; i < strata_catalog_count(c); i++)
		if (strata_catalog_tensor(c, i)->file == f)
			return strata_catalog_tensor(c, i);
	fail_msg("no tensor in file %u", f);
	return NULL;
}

static void test_mapping_checks_identity_and_keeps_its_file(void **state)
{
	(void)state;
	strata_catalog *c;
	strata_weight_store *ws;
	open_copy(&c, &ws);
	uint32_t f1 = file_of(c, shard(1)), f2 = file_of(c, shard(2));
	const strata_tensor *t1 = first_in(c, f1), *t2 = first_in(c, f2);
	strata_error e;
	/* shard 1 mapped; then both are replaced by renamed copies with
	 * other bytes */
	const void *m1 = NULL, *m2 = NULL;
	assert_int_equal(strata_weight_store_map(ws, t1, &m1, &e), STRATA_OK);
	unsigned char *was = malloc(t1->bytes);
	void *dst = was;
	assert_int_equal(strata_weight_store_read(ws, &t1, &dst, 1, &e),
			 STRATA_OK);
	assert_memory_equal(m1, was, t1->bytes);
	for (int i = 1; i <= 2; i++) {
		char tmp[4400], cmd[9000];
		snprintf(tmp, sizeof tmp, "%s/new", dir);
		snprintf(cmd, sizeof cmd, "cp '%s' '%s'", shard(i), tmp);
		assert_int_equal(system(cmd), 0);
		int fd = open(tmp, O_WRONLY);
		unsigned char junk[64];
		memset(junk, 0x5a, sizeof junk);
		assert_int_equal(pwrite(fd, junk, sizeof junk,
					(off_t)first_in(c, (uint32_t)(i == 1 ? f1 : f2))->offset),
				 (ssize_t)sizeof junk);
		close(fd);
		assert_int_equal(rename(tmp, shard(i)), 0);
	}
	/* the mapping made before holds the old file: its bytes, unchanged
	 * (a later map of shard 1 is the same mapping) */
	assert_memory_equal(m1, was, t1->bytes);
	assert_int_equal(strata_weight_store_map(ws, t1, &m1, &e), STRATA_OK);
	assert_memory_equal(m1, was, t1->bytes);
	/* a shard first mapped after its change fails the identity check */
	assert_int_equal(strata_weight_store_map(ws, t2, &m2, &e),
			 STRATA_E_CKPT_READ);
	assert_non_null(strstr(e.message, "another inode"));
	assert_null(m2);
	/* and a tensor of another catalog is refused */
	strata_tensor foreign = *t1;
	assert_int_equal(strata_weight_store_map(ws, &foreign, &m2, &e),
			 STRATA_E_INVALID_ARG);
	free(was);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static void test_mapped_shard_truncated_in_place_is_an_error(void **state)
{
	(void)state;
	strata_catalog *c;
	strata_weight_store *ws;
	open_copy(&c, &ws);
	uint32_t f1 = file_of(c, shard(1));
	/* the tensor ending last in shard 1 */
	const strata_tensor *last = NULL;
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		if (t->file == f1 && (!last || t->offset > last->offset))
			last = t;
	}
	strata_error e;
	const void *m = NULL;
	assert_int_equal(strata_weight_store_map(ws, first_in(c, f1), &m, &e),
			 STRATA_OK);
	/* cut in place under the mapping: the pages past the new end are
	 * gone, and bringing them in is an error, not SIGBUS */
	assert_int_equal(truncate(shard(1), 0), 0);
	m = NULL;
	assert_int_equal(strata_weight_store_map(ws, last, &m, &e),
			 STRATA_E_CKPT_READ);
	assert_null(m);
	assert_non_null(strstr(e.message, last->name));
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/tests/tmp-ckpt-changed-%ld",
		 STRATA_BINARY_DIR, (long)getpid());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[4300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_size_shard_renamed_over_is_refused),
		cmocka_unit_test(test_new_mtime_or_size_is_refused),
		cmocka_unit_test(test_fifo_in_a_shards_place_fails_at_once),
		cmocka_unit_test(test_fifo_model_file_is_refused),
		cmocka_unit_test(test_mapping_checks_identity_and_keeps_its_file),
		cmocka_unit_test(test_mapped_shard_truncated_in_place_is_an_error),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
