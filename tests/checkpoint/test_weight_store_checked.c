/* test_weight_store_checked.c - the checked reads and mappings of the
 * weight store: the file's bytes when every value is finite; a NaN or
 * infinity anywhere in a half or block tensor (first, last, inside any of
 * the pieces a large tensor is read, mapped and spread over threads in)
 * is E_CKPT_VALUE naming the tensor and its first bad element or block,
 * by pread, O_DIRECT and mapping alike, and by the mapping of a file out
 * of the page cache (read with O_DIRECT into memory of its own, the page
 * cache left alone, a check unit across two of its pieces checked whole);
 * f32 and the unchecked calls pass as before (layer: checkpoint). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "strata/checkpoint.h"
#include "support/ckpt_writer.h"

/* "big": 3 Mi BF16 elements (6 MiB: pieces of 512 KiB read, 4 MiB
 * mapped); "half": F16; "f32": F32; "small": 3 BF16 elements. */
#define BIG (3u << 20)
#define HALF 5000u
#define SMALL 3u

enum { FLOAT_ONE_BF16 = 0x3f80, FLOAT_ONE_F16 = 0x3c00 };

typedef struct model {
	char *dir, path[512];
	uint16_t *big, *half, small[SMALL];
	float f32[64];
} model;

static void fill16(uint16_t *p, size_t n, uint16_t v)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint16_t)(v ^ (i & 0x7f)); /* finite, varied */
}

static void write_model(model *m)
{
	ckw_tensor t[] = {
		{"small", CKW_BF16, "BF16", 1, {SMALL}, m->small, 0},
		{"big", CKW_BF16, "BF16", 2, {BIG / 1024, 1024}, m->big, 0},
		{"f32", CKW_F32, "F32", 1, {64}, m->f32, 0},
		{"half", CKW_F16, "F16", 1, {HALF}, m->half, 0},
	};
	ckw_safetensors_file(m->path, t, sizeof t / sizeof *t, NULL);
}

static void model_init(model *m)
{
	m->dir = ckw_temp_dir();
	snprintf(m->path, sizeof m->path, "%s/model.safetensors", m->dir);
	m->big = malloc(BIG * 2);
	m->half = malloc(HALF * 2);
	assert_non_null(m->big);
	assert_non_null(m->half);
	fill16(m->big, BIG, FLOAT_ONE_BF16);
	fill16(m->half, HALF, FLOAT_ONE_F16);
	fill16(m->small, SMALL, FLOAT_ONE_BF16);
	for (int i = 0; i < 64; i++)
		m->f32[i] = (float)i;
	write_model(m);
}

static void model_fini(model *m)
{
	unlink(m->path);
	rmdir(m->dir);
	free(m->dir);
	free(m->big);
	free(m->half);
}

typedef enum way { BY_PREAD, BY_DIRECT, BY_MAP, BY_MAP_COLD, WAYS } way;

/* Drops the file's pages from the page cache; whether they went (not on
 * tmpfs, whose pages are the file). */
static bool evict(const char *path)
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	(void)fdatasync(fd);
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	off_t size = lseek(fd, 0, SEEK_END);
	void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(m != MAP_FAILED);
	long page = sysconf(_SC_PAGESIZE);
	size_t n = ((size_t)size + (size_t)page - 1) / (size_t)page, cached = 0;
	unsigned char *vec = malloc(n);
	assert_non_null(vec);
	assert_int_equal(mincore(m, (size_t)size, vec), 0);
	for (size_t i = 0; i < n; i++)
		cached += vec[i] & 1;
	free(vec);
	munmap(m, (size_t)size);
	close(fd);
	return cached * 10 < n;
}

/* How many pages of the file's [at, at + bytes) are in the page cache. */
static size_t cached_pages(const char *path, uint64_t at, uint64_t bytes)
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t lo = at / page * page;
	size_t len = (size_t)(at + bytes - lo), n = (len + page - 1) / page;
	void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)lo);
	assert_true(m != MAP_FAILED);
	unsigned char *v = malloc(n);
	assert_non_null(v);
	assert_int_equal(mincore(m, len, v), 0);
	size_t cached = 0;
	for (size_t i = 0; i < n; i++)
		cached += v[i] & 1;
	free(v);
	munmap(m, len);
	close(fd);
	return cached;
}

/* Maps t checked, the file evicted first where `cold`; a cold mapping of
 * a checked type must leave the page cache as it was (the tensor read
 * around it); f32, and a tensor sharing a page the store has mapped (the
 * eviction keeps that page), are mapped from the cache as ever. */
static strata_status map_one(strata_weight_store *ws, const char *path,
			     const strata_tensor *t, bool cold,
			     const void **p, strata_error *e)
{
	bool proof = cold && evict(path) && t->dtype != STRATA_DTYPE_F32 &&
		     !cached_pages(path, t->offset, t->bytes);
	strata_status s = strata_weight_store_map_checked(ws, t, p, e);
	if (proof)
		assert_int_equal(cached_pages(path, t->offset, t->bytes), 0);
	return s;
}

/* Reads (or maps) every tensor of the model checked, `way`; the status,
 * and with STRATA_OK each tensor's bytes compared with the file's. */
static strata_status load_checked(const model *m, way w, strata_error *e)
{
	strata_catalog *c = NULL;
	assert_int_equal(strata_catalog_open(m->path, &c, e), STRATA_OK);
	strata_weight_store_options o = {.direct_io = w == BY_DIRECT};
	strata_weight_store *ws = NULL;
	assert_int_equal(strata_weight_store_create(c, &o, &ws, e), STRATA_OK);
	const char *names[] = {"small", "big", "f32", "half"};
	const void *want[] = {m->small, m->big, m->f32, m->half};
	const strata_tensor *ts[4];
	void *dst[4];
	for (int i = 0; i < 4; i++) {
		ts[i] = strata_catalog_find(c, names[i]);
		assert_non_null(ts[i]);
		dst[i] = malloc((size_t)ts[i]->bytes);
	}
	strata_status s = STRATA_OK;
	if (w == BY_MAP || w == BY_MAP_COLD) {
		for (int i = 0; s == STRATA_OK && i < 4; i++) {
			const void *p = NULL;
			s = map_one(ws, m->path, ts[i], w == BY_MAP_COLD, &p, e);
			if (s == STRATA_OK)
				memcpy(dst[i], p, (size_t)ts[i]->bytes);
		}
	} else {
		s = strata_weight_store_read_checked(ws, ts, dst, 4, e);
	}
	for (int i = 0; s == STRATA_OK && i < 4; i++)
		assert_memory_equal(dst[i], want[i], (size_t)ts[i]->bytes);
	for (int i = 0; i < 4; i++)
		free(dst[i]);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
	return s;
}

static void expect_value_error(const model *m, const char *tensor,
			       const char *where)
{
	for (int w = 0; w < WAYS; w++) {
		strata_error e;
		strata_status s = load_checked(m, (way)w, &e);
		char name[64];
		snprintf(name, sizeof name, "tensor '%s'", tensor);
		if (s != STRATA_E_CKPT_VALUE || !strstr(e.message, name) ||
		    !strstr(e.message, where) ||
		    !strstr(e.message, "NaN or infinity") || !e.fix[0])
			fail_msg("way %d: status %d: %s (want %s, %s)", w, s,
				 s ? e.message : "", name, where);
	}
}

/* ------------------------------------------------------------------------ */

static void finite_values_read_and_map_as_stored(void **state)
{
	(void)state;
	model m;
	model_init(&m);
	for (int w = 0; w < WAYS; w++) {
		strata_error e;
		if (load_checked(&m, (way)w, &e))
			fail_msg("way %d: %s", w, e.message);
	}
	model_fini(&m);
}

static void a_bad_value_anywhere_names_its_tensor_and_element(void **state)
{
	(void)state;
	model m;
	model_init(&m);
	/* first, the edge of a 512 KiB read piece, inside the second 4 MiB
	 * map piece, last; +inf, -inf, NaN */
	static const uint32_t at[] = {0, 262143, 262144, 2200001, BIG - 1};
	static const uint16_t bad[] = {0x7f80, 0xff80, 0x7fc1, 0xff81, 0x7f80};
	for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
		uint16_t keep = m.big[at[k]];
		m.big[at[k]] = bad[k];
		write_model(&m);
		char where[96];
		snprintf(where, sizeof where, "BF16 element %u of %u", at[k], BIG);
		expect_value_error(&m, "big", where);
		m.big[at[k]] = keep;
	}
	/* two bad values: the first is named, whichever thread meets it */
	m.big[2900000] = 0x7f80;
	m.big[1500000] = 0x7f80;
	m.big[BIG - 7] = 0x7f80;
	write_model(&m);
	expect_value_error(&m, "big", "BF16 element 1500000 of");
	fill16(m.big, BIG, FLOAT_ONE_BF16);
	/* f16's infinity, and a tensor too small for a vector */
	m.half[HALF - 1] = 0xfc00;
	write_model(&m);
	expect_value_error(&m, "half", "F16 element 4999 of 5000");
	fill16(m.half, HALF, FLOAT_ONE_F16);
	m.small[2] = 0x7fff;
	write_model(&m);
	expect_value_error(&m, "small", "BF16 element 2 of 3");
	model_fini(&m);
}

static void f32_and_unchecked_calls_pass_as_before(void **state)
{
	(void)state;
	model m;
	model_init(&m);
	uint32_t nan_bits = 0x7fc00000u;
	memcpy(&m.f32[10], &nan_bits, 4);
	m.big[5] = 0x7f80;
	write_model(&m);
	expect_value_error(&m, "big", "BF16 element 5 of");
	m.big[5] = FLOAT_ONE_BF16;
	write_model(&m);
	for (int w = 0; w < WAYS; w++) {
		strata_error e;
		if (load_checked(&m, (way)w, &e))
			fail_msg("way %d: f32 NaN refused: %s", w, e.message);
	}
	/* the plain calls read what is there */
	m.big[5] = 0x7f80;
	write_model(&m);
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(strata_catalog_open(m.path, &c, &e), STRATA_OK);
	strata_weight_store *ws = NULL;
	assert_int_equal(strata_weight_store_create(c, NULL, &ws, &e), STRATA_OK);
	const strata_tensor *t = strata_catalog_find(c, "big");
	void *dst = malloc((size_t)t->bytes);
	const void *p = NULL;
	assert_int_equal(strata_weight_store_read(ws, &t, &dst, 1, &e), STRATA_OK);
	assert_int_equal(strata_weight_store_map(ws, t, &p, &e), STRATA_OK);
	assert_memory_equal(p, dst, (size_t)t->bytes);
	free(dst);
	strata_weight_store_destroy(ws);
	strata_catalog_destroy(c);
	model_fini(&m);
}

/* A GGUF Q8_0 tensor's bad block factor, by every way. */
static void a_bad_q8_0_block_is_named(void **state)
{
	(void)state;
	enum { BLOCKS = 40000 }; /* 1.36 MB: several read pieces */
	unsigned char *q = calloc(BLOCKS, 34);
	assert_non_null(q);
	for (size_t b = 0; b < BLOCKS; b++)
		q[b * 34 + 1] = 0x3c; /* d = 1.0 */
	q[31234 * 34 + 1] = 0x7c; /* d = +inf */
	char *dir = ckw_temp_dir(), path[512];
	snprintf(path, sizeof path, "%s/q.gguf", dir);
	ckw_tensor t = {"blk.0.ffn_down.weight", CKW_Q8_0, NULL, 2,
			{BLOCKS / 4, 128}, q, 0};
	ckw_gguf_file(path, NULL, 0, &t, 1, NULL);
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(strata_catalog_open(path, &c, &e), STRATA_OK);
	const strata_tensor *ct = strata_catalog_find(c, t.name);
	assert_non_null(ct);
	for (int w = 0; w < WAYS; w++) {
		strata_weight_store_options o = {.direct_io = w == BY_DIRECT};
		strata_weight_store *ws = NULL;
		assert_int_equal(strata_weight_store_create(c, &o, &ws, &e), 0);
		void *dst = malloc((size_t)ct->bytes);
		const void *p = NULL;
		strata_status s = w == BY_MAP || w == BY_MAP_COLD
			? map_one(ws, path, ct, w == BY_MAP_COLD, &p, &e)
			: strata_weight_store_read_checked(ws, &ct, &dst, 1, &e);
		assert_int_equal(s, STRATA_E_CKPT_VALUE);
		assert_non_null(strstr(e.message, "tensor 'blk.0.ffn_down.weight'"));
		assert_non_null(strstr(e.message, "Q8_0 block 31234 of 40000"));
		free(dst);
		strata_weight_store_destroy(ws);
	}
	strata_catalog_destroy(c);
	unlink(path);
	rmdir(dir);
	free(dir);
	free(q);
}

/* One cold tensor of `blocks` blocks of `bb` bytes (ggml type `type`,
 * `per` elements a block, named `name` in errors) read in 4 MiB pieces
 * (aligned in the file), each block's f16 factor 1.0 at byte `d_at`: the
 * block across the first piece's end is checked whole, its bad factor
 * found; every block's bytes are the file's. */
static void cold_block_across_pieces(uint32_t type, const char *name,
				     uint32_t bb, uint32_t per, uint32_t d_at,
				     size_t blocks)
{
	unsigned char *q = calloc(blocks, bb);
	assert_non_null(q);
	for (size_t b = 0; b < blocks; b++) {
		q[b * bb + d_at + 1] = 0x3c; /* d = 1.0 */
		q[b * bb + (d_at ? 0 : 2) + b % 32] = (unsigned char)b;
	}
	char *dir = ckw_temp_dir(), path[512];
	snprintf(path, sizeof path, "%s/q.gguf", dir);
	ckw_tensor t = {"blk.0.ffn_up.weight", type, NULL, 2,
			{blocks * per / 256, 256}, q, (uint64_t)blocks * bb};
	ckw_gguf_file(path, NULL, 0, &t, 1, NULL);
	strata_catalog *c = NULL;
	strata_error e;
	assert_int_equal(strata_catalog_open(path, &c, &e), STRATA_OK);
	const strata_tensor *ct = strata_catalog_find(c, t.name);
	assert_non_null(ct);
	uint64_t edge = ct->offset / 4096 * 4096 + (4u << 20);
	uint64_t across = (edge - ct->offset) / bb;
	if ((edge - ct->offset) % bb == 0)
		across--; /* a block ending on the edge: take the one before */
	for (int bad = 0; bad < 2; bad++) {
		if (bad) {
			q[across * bb + d_at + 1] = 0x7c; /* d = +inf */
			ckw_gguf_file(path, NULL, 0, &t, 1, NULL);
			strata_catalog_destroy(c);
			assert_int_equal(strata_catalog_open(path, &c, &e), 0);
			ct = strata_catalog_find(c, t.name);
		}
		strata_weight_store *ws = NULL;
		assert_int_equal(strata_weight_store_create(c, NULL, &ws, &e), 0);
		const void *p = NULL;
		strata_status s = map_one(ws, path, ct, true, &p, &e);
		if (!bad) {
			assert_int_equal(s, STRATA_OK);
			assert_memory_equal(p, q, (size_t)ct->bytes);
		} else {
			char want[64];
			snprintf(want, sizeof want, "%s block %" PRIu64 " of %zu",
				 name, across, blocks);
			assert_int_equal(s, STRATA_E_CKPT_VALUE);
			if (!strstr(e.message, want))
				fail_msg("%s: want '%s' in: %s", name, want,
					 e.message);
		}
		strata_weight_store_destroy(ws);
	}
	strata_catalog_destroy(c);
	unlink(path);
	rmdir(dir);
	free(dir);
	free(q);
}

/* Q8_0: the factor in the crossing block's first bytes, before the edge. */
static void a_cold_block_across_two_pieces_is_checked_whole(void **state)
{
	(void)state;
	cold_block_across_pieces(CKW_Q8_0, "Q8_0", 34, 32, 0, 200000);
}

/* Q6_K: the factor in the crossing block's last bytes, past the edge,
 * where the next piece's worker reads (read_cold.c check_crossing). */
static void a_cold_block_factor_past_the_edge_is_found(void **state)
{
	(void)state;
	cold_block_across_pieces(CKW_Q6_K, "Q6_K", 210, 256, 208, 25000);
}

/* A group of 16 MiB or more is read in spans on several threads: a BF16
 * tensor and a Q8_0 one (34-byte blocks) back to back, cut anywhere; the
 * bytes are the file's, a bad value on either side of the middle (a cut
 * with two processors) is named, and of two bad values in different spans
 * the first in the file, whichever thread meets its own first. */
static void a_large_group_read_in_spans_is_checked_whole(void **state)
{
	(void)state;
	enum { ELEMS = 2u << 20, BLOCKS = 400000 }; /* 4 MiB + 13.6 MB */
	uint16_t *h = malloc(ELEMS * 2);
	unsigned char *q = calloc(BLOCKS, 34);
	assert_non_null(h);
	assert_non_null(q);
	fill16(h, ELEMS, FLOAT_ONE_BF16);
	for (size_t b = 0; b < BLOCKS; b++) {
		q[b * 34 + 1] = 0x3c;
		q[b * 34 + 2 + b % 32] = (unsigned char)(b * 7);
	}
	char *dir = ckw_temp_dir(), path[512];
	snprintf(path, sizeof path, "%s/g.gguf", dir);
	ckw_tensor t[] = {
		{"blk.0.attn_q.weight", CKW_BF16, NULL, 2, {ELEMS / 1024, 1024}, h, 0},
		{"blk.0.ffn_up.weight", CKW_Q8_0, NULL, 2, {BLOCKS / 4, 128}, q, 0},
	};
	/* the middle of the group's bytes: inside the Q8_0 tensor */
	uint64_t mid_block = ((uint64_t)ELEMS * 2 + (uint64_t)BLOCKS * 34) / 2;
	mid_block = (mid_block - (uint64_t)ELEMS * 2) / 34;
	struct {
		size_t elem, block; /* SIZE_MAX: none */
		const char *want;
	} cases[] = {
		{SIZE_MAX, SIZE_MAX, NULL},
		{SIZE_MAX, mid_block, "Q8_0 block"},
		{SIZE_MAX, mid_block + 1, "Q8_0 block"},
		{ELEMS - 1, BLOCKS - 1, "BF16 element 2097151 of"},
		{SIZE_MAX, 3, "Q8_0 block"},
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		if (cases[k].elem != SIZE_MAX)
			h[cases[k].elem] = 0x7f80;
		if (cases[k].block != SIZE_MAX)
			q[cases[k].block * 34 + 1] = 0x7c;
		ckw_gguf_file(path, NULL, 0, t, 2, NULL);
		strata_catalog *c = NULL;
		strata_error e;
		assert_int_equal(strata_catalog_open(path, &c, &e), STRATA_OK);
		const strata_tensor *ts[2] = {strata_catalog_find(c, t[0].name),
					      strata_catalog_find(c, t[1].name)};
		assert_int_equal(ts[1]->offset, ts[0]->offset + ts[0]->bytes);
		void *dst[2] = {malloc((size_t)ts[0]->bytes),
				malloc((size_t)ts[1]->bytes)};
		strata_weight_store *ws = NULL;
		assert_int_equal(strata_weight_store_create(c, NULL, &ws, &e), 0);
		strata_status s = strata_weight_store_read_checked(ws, ts, dst, 2, &e);
		if (!cases[k].want) {
			assert_int_equal(s, STRATA_OK);
			assert_memory_equal(dst[0], h, (size_t)ts[0]->bytes);
			assert_memory_equal(dst[1], q, (size_t)ts[1]->bytes);
		} else {
			char want[96];
			if (cases[k].elem == SIZE_MAX)
				snprintf(want, sizeof want, "%s %zu of %u",
					 cases[k].want, cases[k].block,
					 (unsigned)BLOCKS);
			else
				snprintf(want, sizeof want, "%s", cases[k].want);
			if (s != STRATA_E_CKPT_VALUE || !strstr(e.message, want))
				fail_msg("case %zu: status %d: %s (want %s)", k, s,
					 s ? e.message : "", want);
		}
		strata_weight_store_destroy(ws);
		strata_catalog_destroy(c);
		free(dst[0]);
		free(dst[1]);
		if (cases[k].elem != SIZE_MAX)
			h[cases[k].elem] = FLOAT_ONE_BF16;
		if (cases[k].block != SIZE_MAX)
			q[cases[k].block * 34 + 1] = 0x3c;
	}
	unlink(path);
	rmdir(dir);
	free(dir);
	free(h);
	free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(finite_values_read_and_map_as_stored),
		cmocka_unit_test(a_bad_value_anywhere_names_its_tensor_and_element),
		cmocka_unit_test(f32_and_unchecked_calls_pass_as_before),
		cmocka_unit_test(a_bad_q8_0_block_is_named),
		cmocka_unit_test(a_cold_block_across_two_pieces_is_checked_whole),
		cmocka_unit_test(a_cold_block_factor_past_the_edge_is_found),
		cmocka_unit_test(a_large_group_read_in_spans_is_checked_whole),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
