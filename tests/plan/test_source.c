/* test_source.c - planning committed checkpoints from their catalog:
 * owners and exec bytes per tensor, the dominant dtype, excludes, and the
 * proof that planning reads headers only (every pread is watched through
 * the base syscall table and must end before the file's data section,
 * while a real payload read through the weight store is seen). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "strata/plan.h"

#define DATA STRATA_SOURCE_DIR "/tests/data"

/* ------------------------------------------------------------------------ */
/* Watching reads                                                           */
/* ------------------------------------------------------------------------ */

#define MAX_FDS 1024
static char fd_path[MAX_FDS][512];
static uint64_t fd_max_end[MAX_FDS];

static int watch_open(const char *path, int flags, mode_t mode)
{
	int fd = open(path, flags, mode);
	if (fd >= 0 && fd < MAX_FDS) {
		snprintf(fd_path[fd], sizeof fd_path[fd], "%s", path);
		fd_max_end[fd] = 0;
	}
	return fd;
}

static ssize_t watch_pread(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);
	if (r > 0 && fd >= 0 && fd < MAX_FDS &&
	    (uint64_t)off + (uint64_t)r > fd_max_end[fd])
		fd_max_end[fd] = (uint64_t)off + (uint64_t)r;
	return r;
}

/* Furthest byte read of `path` over every fd that opened it since reset.
 * Closed fds keep their record until reused. */
static uint64_t furthest(const char *path)
{
	uint64_t m = 0;
	for (int fd = 0; fd < MAX_FDS; fd++)
		if (!strcmp(fd_path[fd], path) && fd_max_end[fd] > m)
			m = fd_max_end[fd];
	return m;
}

static void watch_begin(void)
{
	memset(fd_path, 0, sizeof fd_path);
	memset(fd_max_end, 0, sizeof fd_max_end);
	strata_sys.open = watch_open;
	strata_sys.pread = watch_pread;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void plan_model(const char *path, strata_plan_device dev,
		       strata_catalog **c, strata_plan_source **src,
		       strata_plan **p)
{
	strata_error err;
	assert_int_equal(strata_catalog_open(path, c, &err), STRATA_OK);
	assert_int_equal(strata_plan_source_create(*c, dev, NULL, 0, src, &err),
			 STRATA_OK);
	strata_plan_arch arch = {0};
	strata_plan_options o = {.device = dev, .has_device_budget = true,
				 .device_budget_bytes = 1u << 30,
				 .has_host_budget = true,
				 .host_budget_bytes = 1u << 30};
	strata_plan_machine m = {0};
	assert_int_equal(strata_plan_create(strata_plan_source_layout(*src),
					    &arch,
					    strata_plan_source_weight_dtype(*src),
					    &o, &m, p, &err),
			 STRATA_OK);
}

static void planning_reads_headers_only(void **state)
{
	(void)state;
	const char *models[] = {DATA "/gguf/stories260K.gguf",
				DATA "/checkpoints/tiny-qwen2-sharded",
				DATA "/checkpoints/tiny-llama"};
	for (size_t k = 0; k < 3; k++) {
		watch_begin();
		strata_catalog *c;
		strata_plan_source *src;
		strata_plan *p;
		plan_model(models[k], STRATA_PLAN_DEVICE_CPU, &c, &src, &p);
		for (size_t f = 0; f < strata_catalog_file_count(c); f++) {
			const strata_catalog_file *cf = strata_catalog_file_at(c, f);
			/* The GGUF reader fills its header buffer in 256 KiB
			 * chunks, so on a file whose header is shorter it may
			 * read into the data section once: bounded, never a
			 * payload read per tensor. safetensors: strict. */
			uint64_t limit = cf->data_offset;
			if (strata_catalog_format(c) == STRATA_FORMAT_GGUF &&
			    limit < (256u << 10))
				limit = 256u << 10;
			if (furthest(cf->path) > limit)
				fail_msg("%s: read up to %llu, data starts at %llu",
					 cf->path,
					 (unsigned long long)furthest(cf->path),
					 (unsigned long long)cf->data_offset);
		}
		/* the weight store agrees, and a real read is seen by both */
		strata_weight_store *ws;
		strata_error err;
		assert_int_equal(strata_weight_store_create(c, NULL, &ws, &err),
				 STRATA_OK);
		strata_weight_store_stats st;
		strata_weight_store_get_stats(ws, &st);
		assert_true(st.physical_reads == 0 && st.physical_read_bytes == 0);
		const strata_tensor *t = strata_catalog_tensor(c, 0);
		void *buf = malloc(t->bytes ? t->bytes : 1);
		void *const dst[] = {buf};
		assert_int_equal(strata_weight_store_read(ws, &t, dst, 1, &err),
				 STRATA_OK);
		strata_weight_store_get_stats(ws, &st);
		assert_true(st.physical_read_bytes >= t->bytes);
		const strata_catalog_file *cf = strata_catalog_file_at(c, t->file);
		assert_true(furthest(cf->path) > cf->data_offset);
		free(buf);
		strata_weight_store_destroy(ws);
		strata_plan_destroy(p);
		strata_plan_source_destroy(src);
		strata_catalog_destroy(c);
		strata_sys_reset();
	}
}

static void catalog_tensors_get_owners_and_exec_bytes(void **state)
{
	(void)state;
	strata_catalog *c;
	strata_plan_source *src;
	strata_plan *p;
	plan_model(DATA "/checkpoints/tiny-qwen2-sharded",
		   STRATA_PLAN_DEVICE_CUDA, &c, &src, &p);
	assert_int_equal(strata_plan_source_weight_dtype(src), STRATA_DTYPE_F16);
	uint64_t st = 0, units = 0, st_slots = 0, unit_slots = 0;
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		const strata_owner *o = strata_plan_source_owner(src, i);
		bool in_layer = strstr(t->name, "model.layers.") == t->name;
		assert_int_equal(o->kind == STRATA_OWNER_UNIT, in_layer);
		uint64_t b = t->bytes; /* f16 kept on cuda */
		uint64_t slot = (b + 255) / 256 * 256;
		*(in_layer ? &units : &st) += b;
		*(in_layer ? &unit_slots : &st_slots) += slot;
	}
	/* the seed's figures are the tensors' own bytes; the regions hold
	 * each in its 256-byte slot */
	const strata_plan_candidate *r = strata_plan_candidate_at(p, 0);
	assert_true(r->weights.static_bytes == st);
	assert_true(r->weights.window_bytes == units);
	assert_true(r->weights.required_bytes == st + units);
	assert_true(r->static_device_bytes == st_slots);
	assert_true(r->window_device_bytes == unit_slots);
	assert_true(st_slots + unit_slots > st + units); /* the case differs */
	strata_plan_destroy(p);
	strata_plan_source_destroy(src);
	strata_catalog_destroy(c);
}

static void excluded_catalog_tensors_are_flagged(void **state)
{
	(void)state;
	strata_catalog *c;
	strata_error err;
	assert_int_equal(strata_catalog_open(DATA "/gguf/stories260K.gguf", &c,
					     &err),
			 STRATA_OK);
	const char *excl[] = {"blk.*"};
	strata_plan_source *src;
	assert_int_equal(strata_plan_source_create(c, STRATA_PLAN_DEVICE_CPU,
						   excl, 1, &src, &err),
			 STRATA_OK);
	strata_plan_layout_info info;
	strata_plan_layout_get_info(strata_plan_source_layout(src), &info);
	assert_true(info.occupied_units == 0);
	size_t flagged = 0;
	for (size_t i = 0; i < strata_catalog_count(c); i++)
		flagged += strata_plan_source_excluded(src, i);
	assert_true(flagged == info.excluded_tensors && flagged > 0);
	strata_plan_source_destroy(src);
	/* allocation failures: E_NOMEM, nothing leaked */
	for (long k = 0;; k++) {
		strata_plan_source *s2 = NULL;
		strata_alloc_fail_after(k);
		strata_status s = strata_plan_source_create(
			c, STRATA_PLAN_DEVICE_CPU, excl, 1, &s2, &err);
		strata_alloc_fail_after(-1);
		if (s == STRATA_OK) {
			strata_plan_source_destroy(s2);
			break;
		}
		assert_int_equal(s, STRATA_E_NOMEM);
	}
	strata_catalog_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(planning_reads_headers_only),
		cmocka_unit_test(catalog_tensors_get_owners_and_exec_bytes),
		cmocka_unit_test(excluded_catalog_tensors_are_flagged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
