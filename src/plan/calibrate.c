/* calibrate.c - measures the rates plans predict with: the host memory
 * read rate and dense product rate of the CPU kernels, and for each CUDA
 * device its pinned link both ways, its GEMV rate and its dense product
 * rate; then per stored type, on the CPU and each device, the GEMV rate
 * (one row: decode) and the dense product rate at the prefill rows, the
 * fixed cost of a kernel, and a device's residual-row round trip, all
 * through the backend's tables, the kernels a run calls; and per type the
 * CPU's rate over a whole decode layer (calibrate_layer.c) (layer: plan).
 * The host memory read goes over a matrix past the last-level cache.
 *
 * Each measure is the best of `repeats` timed runs after one warm-up: the
 * rate a pass can reach, which is what the plan's model assumes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plan/internal.h"
#include "strata/backend.h"

#define COLS 4096u	 /* elements per weight row (a multiple of 256) */
#define PRODUCT_ROWS 64u /* tokens of the f32 dense product */
#define PRODUCT_BYTES ((uint64_t)32 << 20)
/* Weight rows of the per-type dense product: on the CPU a 4096-wide
 * matrix of this many rows (beyond the caches for every type), on a
 * device at most this many of the GEMV's matrix (the output stays small). */
#define CPU_GEMM_ROWS 1024u
#define DEVICE_GEMM_ROWS 16384u
/* The widest input of the product workspace a device's products get:
 * the forward pass reserves the plan's (rows x the model's widest input
 * x 4 bytes) before it runs, and a block type's tensor-core tiles grow
 * with it. Without it a 4096-wide product took 8 MiB and 512-row tiles:
 * Q8_0 measured 46 TFLOP/s on the H200 where the 7.5 GB llama's forward
 * pass, with its 29 MiB, multiplied at about twice that. 14336 is the
 * FFN width of the 7-8B llamas. */
#define DEVICE_WORKSPACE_WIDEST 14336u
#define LAUNCHES 64u	/* tiny kernels timed back to back */
#define TINY_ROWS 64u	/* (TINY_ROWS, TINY_COLS) f32: a tiny product */
#define TINY_COLS 256u
#define CROSSINGS 32u	/* residual row round trips timed */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* `count` products y (n, w.rows) = x (n, w.cols) . w^T queued back to
 * back, then one wait, timed best of repeats (after a warm-up). */
static strata_status time_weight(strata_backend *b, strata_compute *c,
				 float *y, const float *x,
				 const strata_weight *wt, uint32_t n,
				 uint32_t count, uint32_t repeats, double *best,
				 strata_error *err)
{
	*best = 0;
	for (uint32_t i = 0; i <= repeats; i++) {
		double t0 = now();
		strata_status s = STRATA_OK;
		for (uint32_t k = 0; k < count && s == STRATA_OK; k++)
			s = strata_kernel_matmul(c, y, x, wt, NULL, n, err);
		if (s == STRATA_OK)
			s = strata_backend_synchronize(b, NULL, err);
		if (s != STRATA_OK)
			return s;
		double t = now() - t0;
		if (i > 0 && (*best == 0 || t < *best)) /* 0: the warm-up */
			*best = t;
	}
	return STRATA_OK;
}

/* One f32 product y (n, rows) = x (n, COLS) . w^T, timed best of repeats
 * (the backend synchronised after each). */
static strata_status time_product(strata_backend *b, strata_compute *c,
				  float *y, const float *x, const void *w,
				  uint32_t rows, uint32_t n, uint32_t repeats,
				  double *best, strata_error *err)
{
	strata_weight wt = {.type = STRATA_WEIGHT_F32, .data = w, .rows = rows,
			    .cols = COLS};
	return time_weight(b, c, y, x, &wt, n, 1, repeats, best, err);
}

/* Small values that stay finite through any number of products. */
static void fill(float *v, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		v[i] = (float)(i % 7) * 1e-3f;
}

/* ------------------------------------------------------------------------ */
/* Per stored type                                                          */
/* ------------------------------------------------------------------------ */

/* The backend's weight type of block type t. */
static bool weight_of(strata_block_type t, strata_weight_type *out)
{
	for (int w = 0; w < STRATA_WEIGHT_TYPE_COUNT; w++)
		if (strata_weight_type_block((strata_weight_type)w) == t) {
			*out = (strata_weight_type)w;
			return true;
		}
	return false;
}

static uint64_t row_bytes(strata_block_type t)
{
	return (uint64_t)COLS / strata_block_elements(t) * strata_block_bytes(t);
}

/* The block types of `mask` a kind's table takes (its weight-type bits). */
static uint32_t types_of(const char *kind, uint32_t mask)
{
	uint32_t takes = strata_backend_weight_types(kind), out = 0;
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		strata_weight_type w;
		if ((mask >> t & 1) && weight_of((strata_block_type)t, &w) &&
		    (takes & STRATA_WEIGHT_BIT(w)))
			out |= 1u << t;
	}
	return out;
}

/* Rows of the longest GEMV output: `bytes` over the narrowest row. */
static uint64_t most_rows(uint64_t bytes, uint32_t types)
{
	uint64_t least = COLS * 4;
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++)
		if ((types >> t & 1) && row_bytes((strata_block_type)t) < least)
			least = row_bytes((strata_block_type)t);
	return bytes / least;
}

/* `rows` rows of type t at dst: one row encoded from small finite
 * values, copied into each (the products' speed does not depend on the
 * values; encoding every row would cost more than measuring). */
static void fill_type(strata_block_type t, void *dst, uint64_t rows)
{
	float v[COLS];
	for (uint32_t i = 0; i < COLS; i++)
		v[i] = ((float)((i * 37u) % 17u) - 8.0f) * 1e-2f;
	uint64_t rb = row_bytes(t);
	strata_block_encode(t, v, dst, COLS); /* finite: it cannot fail */
	for (uint64_t r = 1; r < rows; r++)
		memcpy((char *)dst + r * rb, dst, rb);
}

/* What one processor's per-type measures use: w (`bytes` where its
 * kernels read), host (w's staging on a device; NULL on the CPU), x
 * (gemm_rows, COLS) and y (large enough for either product). */
typedef struct type_bench {
	strata_backend *b;
	strata_compute *c;
	strata_stream *s;
	void *w, *host;
	float *x, *y;
	uint64_t bytes;
	uint32_t gemm_rows, gemm_cap, repeats;
} type_bench;

/* The GEMV rate over `bytes` of type t and its dense product rate at
 * gemm_rows rows (at most gemm_cap weight rows). */
static strata_status measure_type(type_bench *tb, strata_block_type t,
				  strata_plan_type_rate *out,
				  strata_error *err)
{
	strata_weight_type wt = STRATA_WEIGHT_F32;
	weight_of(t, &wt);
	uint64_t rb = row_bytes(t), rows = tb->bytes / rb;
	if (rows > UINT32_MAX)
		rows = UINT32_MAX;
	fill_type(t, tb->host ? tb->host : tb->w, rows);
	strata_status s = STRATA_OK;
	if (tb->host)
		s = strata_backend_copy_h2d_async(tb->b, tb->s, tb->w, tb->host,
						  rows * rb, err);
	if (s == STRATA_OK && tb->host)
		s = strata_backend_synchronize(tb->b, NULL, err);
	strata_weight w = {.type = wt, .data = tb->w, .rows = (uint32_t)rows,
			   .cols = COLS};
	double sec = 0;
	if (s == STRATA_OK)
		s = time_weight(tb->b, tb->c, tb->y, tb->x, &w, 1, 1,
				tb->repeats, &sec, err);
	if (s == STRATA_OK)
		out->gemv = (double)(rows * rb) / sec;
	w.rows = rows < tb->gemm_cap ? (uint32_t)rows : tb->gemm_cap;
	if (s == STRATA_OK)
		s = time_weight(tb->b, tb->c, tb->y, tb->x, &w, tb->gemm_rows,
				1, tb->repeats, &sec, err);
	if (s == STRATA_OK)
		out->gemm = 2.0 * w.rows * COLS * tb->gemm_rows / sec;
	if (s != STRATA_OK && err)
		strata_error_prefix(err, "%s products", strata_block_name(t));
	return s;
}

/* Every type of `types`, then the fixed cost of a tiny f32 kernel queued
 * LAUNCHES times back to back (w's first TINY_ROWS x TINY_COLS refilled
 * as f32 first). */
static strata_status measure_types(type_bench *tb, uint32_t types,
				   strata_plan_type_rate *out, double *launch,
				   strata_error *err)
{
	strata_status s = STRATA_OK;
	for (int t = 0; t < STRATA_BLOCK_COUNT && s == STRATA_OK; t++)
		if (types >> t & 1)
			s = measure_type(tb, (strata_block_type)t, &out[t], err);
	uint64_t tiny = (uint64_t)TINY_ROWS * TINY_COLS * 4;
	if (s == STRATA_OK) {
		fill(tb->host ? tb->host : tb->w, tiny / 4);
		if (tb->host)
			s = strata_backend_copy_h2d_async(tb->b, tb->s, tb->w,
							  tb->host, tiny, err);
	}
	strata_weight w = {.type = STRATA_WEIGHT_F32, .data = tb->w,
			   .rows = TINY_ROWS, .cols = TINY_COLS};
	double sec = 0;
	if (s == STRATA_OK)
		s = strata_backend_synchronize(tb->b, NULL, err);
	if (s == STRATA_OK)
		s = time_weight(tb->b, tb->c, tb->y, tb->x, &w, 1, LAUNCHES,
				tb->repeats, &sec, err);
	if (s == STRATA_OK)
		*launch = sec / LAUNCHES;
	return s;
}

/* ------------------------------------------------------------------------ */
/* Host memory, past the last-level cache                                   */
/* ------------------------------------------------------------------------ */

/* The host memory read's matrix when the options give none. With the
 * 256 MiB of the other measures the H200's host read it at 89-147 GB/s
 * from run to run: its last-level cache held part of the matrix (the
 * shared link/CPU measure moved to 1 GiB for the same reason, 211df65).
 * The larger of 1 GiB and 4x the caches /sys describes, at most 8 GiB
 * and a quarter of the physical memory. */
#define MEMORY_MATRIX_MIN ((uint64_t)1 << 30)
#define MEMORY_MATRIX_MAX ((uint64_t)8 << 30)
#define CPU_CACHE "/sys/devices/system/cpu/cpu0/cache/index"

/* The first line of a /sys file into buf; false when there is none. */
static bool sys_line(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool ok = fgets(buf, (int)cap, f) != NULL;
	fclose(f);
	return ok;
}

/* Processors in a list such as "0-15,32-47" (0 for a malformed one). */
static uint64_t cpus_in(const char *list)
{
	uint64_t n = 0;
	for (const char *p = list; *p && *p != '\n';) {
		char *end;
		unsigned long a = strtoul(p, &end, 10), b = a;
		if (end == p)
			return 0;
		if (*end == '-') {
			const char *q = end + 1;
			b = strtoul(q, &end, 10);
			if (end == q || b < a)
				return 0;
		}
		n += b - a + 1;
		if (*end == ',')
			end++;
		else if (*end && *end != '\n')
			return 0;
		p = end;
	}
	return n;
}

/* Bytes of every last-level cache of the machine: cpu0's highest level
 * (its size, "32768K"), times the instances of it (online processors
 * over those sharing cpu0's). 0 when /sys says nothing usable. */
static uint64_t last_level_cache_bytes(void)
{
	uint64_t best = 0, level = 0, sharing = 1;
	for (int i = 0; i < 16; i++) {
		char path[96], buf[256];
		snprintf(path, sizeof path, CPU_CACHE "%d/level", i);
		if (!sys_line(path, buf, sizeof buf))
			break;
		uint64_t lv = strtoull(buf, NULL, 10);
		snprintf(path, sizeof path, CPU_CACHE "%d/type", i);
		if (lv < level || !sys_line(path, buf, sizeof buf) ||
		    !strncmp(buf, "Instruction", 11))
			continue;
		snprintf(path, sizeof path, CPU_CACHE "%d/size", i);
		char *end;
		if (!sys_line(path, buf, sizeof buf))
			continue;
		uint64_t size = strtoull(buf, &end, 10);
		size <<= *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
		snprintf(path, sizeof path, CPU_CACHE "%d/shared_cpu_list", i);
		uint64_t n = sys_line(path, buf, sizeof buf) ? cpus_in(buf) : 0;
		level = lv, best = size, sharing = n ? n : 1;
	}
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t instances = online > 0 ? ((uint64_t)online + sharing - 1) / sharing
					: 1;
	return best * instances;
}

uint64_t strata__plan_memory_matrix_bytes(void)
{
	uint64_t m = 4 * last_level_cache_bytes();
	m = m > MEMORY_MATRIX_MIN ? m : MEMORY_MATRIX_MIN;
	m = m < MEMORY_MATRIX_MAX ? m : MEMORY_MATRIX_MAX;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	if (pages > 0 && page > 0 &&
	    m > (uint64_t)pages * (uint64_t)page / 4)
		m = (uint64_t)pages * (uint64_t)page / 4;
	return m;
}

/* The host memory read rate: the CPU kernels' f32 GEMV over a matrix of
 * `bytes` of its own (past the caches), best of repeats. */
static strata_status time_host_memory(strata_backend *b, strata_compute *c,
				      uint64_t bytes, uint32_t repeats,
				      double *rate, strata_error *err)
{
	uint32_t rows = (uint32_t)(bytes / (COLS * 4));
	float *w = strata_alloc_aligned(64, (size_t)rows * COLS * 4);
	float *x = strata_alloc((size_t)COLS * 4);
	float *y = strata_alloc((size_t)rows * 4);
	strata_status s = STRATA_OK;
	if (!w || !x || !y)
		s = strata_fail(err, STRATA_E_NOMEM, "give a smaller --memory-bytes",
				"calibrate: no memory for a %llu-byte host memory matrix",
				(unsigned long long)bytes);
	double t = 0;
	if (s == STRATA_OK) {
		fill(w, (uint64_t)rows * COLS);
		fill(x, COLS);
		s = time_product(b, c, y, x, w, rows, 1, repeats, &t, err);
	}
	if (s == STRATA_OK)
		*rate = (double)rows * COLS * 4 / t;
	strata_free(w);
	strata_free(x);
	strata_free(y);
	return s;
}

/* ------------------------------------------------------------------------ */
/* The CPU                                                                  */
/* ------------------------------------------------------------------------ */

static strata_status cpu_rates(const strata_plan_calibrate_options *o,
			       strata_plan_rates *r, strata_error *err)
{
	uint32_t rows = (uint32_t)(o->bytes / (COLS * 4));
	uint32_t prows = (uint32_t)(PRODUCT_BYTES / (COLS * 4));
	uint32_t types = types_of("cpu", o->types);
	uint32_t xrows = o->gemm_rows > PRODUCT_ROWS ? o->gemm_rows : PRODUCT_ROWS;
	uint64_t ylen = (uint64_t)PRODUCT_ROWS * rows;
	if ((uint64_t)o->gemm_rows * CPU_GEMM_ROWS > ylen)
		ylen = (uint64_t)o->gemm_rows * CPU_GEMM_ROWS;
	if (most_rows(o->bytes, types) > ylen)
		ylen = most_rows(o->bytes, types);
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	float *w = strata_alloc_aligned(64, (size_t)rows * COLS * 4);
	float *x = strata_alloc((size_t)xrows * COLS * 4);
	float *y = strata_alloc((size_t)ylen * 4);
	strata_status s = STRATA_E_NOMEM;
	if (!w || !x || !y) {
		strata_fail(err, STRATA_E_NOMEM, "give a smaller --bytes",
			    "calibrate: no memory for a %llu-byte matrix",
			    (unsigned long long)o->bytes);
		goto done;
	}
	fill(w, (uint64_t)rows * COLS);
	fill(x, (uint64_t)xrows * COLS);
	s = strata_backend_create("cpu", 0, NULL, &b, err);
	if (s == STRATA_OK)
		s = strata_compute_create_on(b, o->threads, &c, err);
	double t = 0;
	if (s == STRATA_OK)
		s = time_host_memory(b, c, o->memory_bytes, o->repeats,
				     &r->host_memory, err);
	r->host_memory_bytes = o->memory_bytes;
	if (s == STRATA_OK)
		s = time_product(b, c, y, x, w, prows, PRODUCT_ROWS, o->repeats,
				 &t, err);
	if (s == STRATA_OK) {
		r->cpu_flops = 2.0 * prows * COLS * PRODUCT_ROWS / t;
		r->threads = strata_compute_threads(c);
		r->gemm_rows = o->gemm_rows;
	}
	type_bench tb = {.b = b, .c = c, .w = w, .x = x, .y = y,
			 .bytes = (uint64_t)rows * COLS * 4,
			 .gemm_rows = o->gemm_rows, .gemm_cap = CPU_GEMM_ROWS,
			 .repeats = o->repeats};
	if (s == STRATA_OK)
		s = measure_types(&tb, types, r->cpu_types,
				  &r->cpu_launch_seconds, err);
	for (int k = 0; k < STRATA_BLOCK_COUNT && s == STRATA_OK; k++) {
		strata__plan_layer_time lt;
		if (!(types >> k & 1))
			continue;
		s = strata__plan_calibrate_layer(b, c, (strata_block_type)k,
						 o->bytes, 1, o->repeats, &lt,
						 err);
		if (s == STRATA_OK)
			r->cpu_layer[k] = (double)lt.bytes / lt.seconds;
	}
done:
	if (s != STRATA_OK && err)
		strata_error_prefix(err, "calibrate the CPU");
	strata_compute_destroy(c);
	strata_backend_destroy(b);
	strata_free(w);
	strata_free(x);
	strata_free(y);
	return s;
}

/* ------------------------------------------------------------------------ */
/* A CUDA device                                                            */
/* ------------------------------------------------------------------------ */

/* Device buffers of one device's measure. */
typedef struct dev_bufs {
	strata_backend *b;
	strata_compute *c;
	strata_stream *s;
	strata_event *e0, *e1;
	strata_arena *arena;
	void *host, *w, *x, *y;
} dev_bufs;

static void dev_fini(dev_bufs *d)
{
	strata_event_destroy(d->b, d->e0);
	strata_event_destroy(d->b, d->e1);
	strata_stream_destroy(d->b, d->s);
	strata_compute_destroy(d->c);
	strata_arena_destroy(d->arena);
	strata_backend_host_free(d->b, d->host);
	strata_backend_destroy(d->b);
}

/* A copy of bytes one way, timed by the stream's events, best of. */
static strata_status time_copy(dev_bufs *d, bool h2d, uint64_t bytes,
			       uint32_t repeats, double *best,
			       strata_error *err)
{
	*best = 0;
	for (uint32_t i = 0; i <= repeats; i++) {
		strata_status s = strata_event_record(d->b, d->e0, d->s, err);
		if (s == STRATA_OK)
			s = h2d ? strata_backend_copy_h2d_async(d->b, d->s, d->w,
								d->host, bytes, err)
				: strata_backend_copy_d2h_async(d->b, d->s, d->host,
								d->w, bytes, err);
		if (s == STRATA_OK)
			s = strata_event_record(d->b, d->e1, d->s, err);
		if (s == STRATA_OK)
			s = strata_event_wait(d->b, d->e1, err);
		double t = 0;
		if (s == STRATA_OK)
			s = strata_event_elapsed(d->b, d->e0, d->e1, &t, err);
		if (s != STRATA_OK)
			return s;
		if (i > 0 && t > 0 && (*best == 0 || t < *best))
			*best = t;
	}
	return STRATA_OK;
}

/* The link and the CPU reading host memory at the same time: SHARED_COPIES
 * copies of the pinned buffer queued to the device while the CPU's
 * threads run f32 GEMVs over a matrix of their own until the last copy
 * is done. Both come out of one host memory: on the H200's host a
 * 16-thread decode and a copy loop took 64 + 49 GB/s together where
 * they took 79 and 54 alone. */
#define SHARED_COPIES 40u
/* The CPU's matrix there: the host memory read's (memory_bytes), past the
 * last-level cache. With the 256 MiB of the other measures the H200's
 * host read it at 188 GB/s beside the copies where it read 119 alone:
 * the matrix sat in the cache. */
static strata_status time_shared(dev_bufs *d, uint64_t bytes,
				 uint64_t matrix_bytes, uint32_t threads,
				 double *h2d, double *cpu, strata_error *err)
{
	uint64_t mbytes = bytes > matrix_bytes ? bytes : matrix_bytes;
	uint32_t rows = (uint32_t)(mbytes / (COLS * 4));
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	float *w = strata_alloc_aligned(64, (size_t)rows * COLS * 4);
	float *x = strata_alloc((size_t)COLS * 4);
	float *y = strata_alloc((size_t)rows * 4);
	strata_status s = STRATA_OK;
	if (!w || !x || !y)
		s = strata_fail(err, STRATA_E_NOMEM, "give a smaller --bytes",
				"calibrate: no memory for the shared-memory measure");
	if (s == STRATA_OK) {
		fill(w, (uint64_t)rows * COLS);
		fill(x, COLS);
		s = strata_backend_create("cpu", 0, NULL, &b, err);
	}
	if (s == STRATA_OK)
		s = strata_compute_create_on(b, threads, &c, err);
	strata_weight wt = {.type = STRATA_WEIGHT_F32, .data = w, .rows = rows,
			    .cols = COLS};
	if (s == STRATA_OK) /* warm the pool and the matrix's pages */
		s = strata_kernel_matmul(c, y, x, &wt, NULL, 1, err);
	if (s == STRATA_OK)
		s = strata_event_record(d->b, d->e0, d->s, err);
	for (uint32_t k = 0; s == STRATA_OK && k < SHARED_COPIES; k++)
		s = strata_backend_copy_h2d_async(d->b, d->s, d->w, d->host,
						  bytes, err);
	if (s == STRATA_OK)
		s = strata_event_record(d->b, d->e1, d->s, err);
	double t0 = now(), t1 = t0;
	uint64_t products = 0;
	for (bool done = false; s == STRATA_OK && !done;) {
		s = strata_kernel_matmul(c, y, x, &wt, NULL, 1, err);
		if (s == STRATA_OK)
			s = strata_backend_synchronize(b, NULL, err);
		products++;
		t1 = now();
		if (s == STRATA_OK)
			s = strata_event_query(d->b, d->e1, &done, err);
	}
	double t = 0;
	if (s == STRATA_OK)
		s = strata_event_wait(d->b, d->e1, err);
	if (s == STRATA_OK)
		s = strata_event_elapsed(d->b, d->e0, d->e1, &t, err);
	if (s == STRATA_OK && t > 0 && t1 > t0) {
		*h2d = (double)SHARED_COPIES * (double)bytes / t;
		*cpu = (double)products * (double)rows * COLS * 4 / (t1 - t0);
	}
	strata_compute_destroy(c);
	strata_backend_destroy(b);
	strata_free(w);
	strata_free(x);
	strata_free(y);
	return s;
}

/* x (max(PRODUCT_ROWS, gemm_rows), COLS) and y (the longest output of
 * the f32 product, a per-type GEMV or dense product) of a device. */
static void dev_xy(const strata_plan_calibrate_options *o, uint32_t types,
		   uint64_t *xbytes, uint64_t *ybytes)
{
	uint64_t rows = o->gemm_rows > PRODUCT_ROWS ? o->gemm_rows : PRODUCT_ROWS;
	uint64_t y = (uint64_t)PRODUCT_ROWS * (o->bytes / (COLS * 4));
	if ((uint64_t)o->gemm_rows * DEVICE_GEMM_ROWS > y)
		y = (uint64_t)o->gemm_rows * DEVICE_GEMM_ROWS;
	if (most_rows(o->bytes, types) > y)
		y = most_rows(o->bytes, types);
	*xbytes = rows * COLS * 4;
	*ybytes = y * 4;
}

static strata_status dev_open(dev_bufs *d, uint32_t index,
			      const strata_plan_calibrate_options *o,
			      uint32_t types, strata_error *err)
{
	uint64_t bytes = o->bytes, xb, yb;
	dev_xy(o, types, &xb, &yb);
	uint64_t xy = xb + yb;
	strata_status s = strata_backend_create("cuda", index, NULL, &d->b, err);
	if (s == STRATA_OK)
		s = strata_compute_create_on(d->b, 0, &d->c, err);
	if (s == STRATA_OK)
		s = strata_stream_create(d->b, &d->s, err);
	if (s == STRATA_OK)
		s = strata_event_create(d->b, &d->e0, err);
	if (s == STRATA_OK)
		s = strata_event_create(d->b, &d->e1, err);
	if (s == STRATA_OK)
		s = strata_backend_host_alloc(d->b, bytes, true, &d->host, err);
	if (s == STRATA_OK)
		s = strata_arena_create(d->b, STRATA_ARENA_DEVICE,
					bytes + xy + 3 * STRATA_ALIGN,
					"calibration", &d->arena, err);
	if (s == STRATA_OK)
		s = strata_arena_alloc(d->arena, bytes, &d->w, err);
	if (s == STRATA_OK)
		s = strata_arena_alloc(d->arena, xb, &d->x, err);
	if (s == STRATA_OK)
		s = strata_arena_alloc(d->arena, yb, &d->y, err);
	if (s == STRATA_OK)
		fill(d->host, bytes / 4);
	return s;
}

/* One residual row (COLS floats) from pageable host memory to the device
 * and back, with the wait a CPU unit's input needs: what a change of
 * site costs the forward pass twice (forward_sites.c). Best of repeats
 * of CROSSINGS round trips, per round trip. */
static strata_status time_crossing(dev_bufs *d, uint32_t repeats,
				   double *out, strata_error *err)
{
	float *row = strata_alloc(COLS * sizeof *row);
	if (!row)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "calibrate: no memory for a residual row");
	fill(row, COLS);
	strata_status s = STRATA_OK;
	double best = 0;
	for (uint32_t i = 0; i <= repeats && s == STRATA_OK; i++) {
		double t0 = now();
		for (uint32_t k = 0; k < CROSSINGS && s == STRATA_OK; k++) {
			s = strata_compute_upload(d->c, d->x, row,
						  COLS * sizeof *row, err);
			if (s == STRATA_OK)
				s = strata_compute_download(d->c, row, d->x,
							    COLS * sizeof *row,
							    err);
			if (s == STRATA_OK)
				s = strata_compute_finish(d->c, err);
		}
		double t = (now() - t0) / CROSSINGS;
		if (s == STRATA_OK && i > 0 && (best == 0 || t < best))
			best = t;
	}
	strata_free(row);
	if (s == STRATA_OK)
		*out = best;
	return s;
}

/* Per type, a whole layer on the device, one decode step and one chunk
 * of gemm_rows rows (calibrate_layer.c, the kernels the forward pass
 * calls), less its products at the type's rates just measured: the
 * layer's fixed costs, which the plan adds per device unit (cost.c). */
static strata_status device_layers(dev_bufs *d,
				   const strata_plan_calibrate_options *o,
				   uint32_t types, strata_plan_device_rates *r,
				   strata_error *err)
{
	strata_status s = STRATA_OK;
	for (int t = 0; t < STRATA_BLOCK_COUNT && s == STRATA_OK; t++) {
		if (!(types >> t & 1))
			continue;
		strata__plan_layer_time dec, pre;
		s = strata__plan_calibrate_layer(d->b, d->c,
						 (strata_block_type)t, o->bytes,
						 1, o->repeats, &dec, err);
		if (s == STRATA_OK)
			s = strata__plan_calibrate_layer(
				d->b, d->c, (strata_block_type)t, o->bytes,
				o->gemm_rows, o->repeats, &pre, err);
		strata_plan_type_rate *tr = &r->types[t];
		if (s == STRATA_OK)
			strata__plan_layer_fixed(
				&dec, &pre, tr->gemv > 0 ? tr->gemv : r->memory,
				tr->gemm > 0 ? tr->gemm : r->flops,
				&tr->layer_seconds, &tr->row_seconds);
	}
	return s;
}

static strata_status device_rates(const strata_plan_calibrate_options *o,
				  uint32_t index, strata_plan_device_rates *r,
				  strata_error *err)
{
	dev_bufs d;
	memset(&d, 0, sizeof d);
	uint64_t bytes = o->bytes;
	uint32_t rows = (uint32_t)(bytes / (COLS * 4));
	uint32_t prows = (uint32_t)(PRODUCT_BYTES / (COLS * 4));
	uint32_t types = types_of("cuda", o->types);
	snprintf(r->name, sizeof r->name, "cuda:%u", index);
	strata_status s = dev_open(&d, index, o, types, err);
	double t = 0;
	if (s == STRATA_OK)
		s = time_copy(&d, true, bytes, o->repeats, &t, err);
	if (s == STRATA_OK)
		r->h2d = (double)bytes / t;
	if (s == STRATA_OK)
		s = time_shared(&d, bytes, o->memory_bytes, o->threads,
				&r->h2d_shared,
				&r->host_memory_shared, err);
	if (s == STRATA_OK)
		s = time_copy(&d, false, bytes, o->repeats, &t, err);
	if (s == STRATA_OK)
		r->d2h = (double)bytes / t;
	/* the weights on the device now hold the host's values; x too */
	if (s == STRATA_OK)
		s = strata_backend_copy_h2d_async(d.b, d.s, d.x, d.host,
						  (uint64_t)PRODUCT_ROWS * COLS * 4,
						  err);
	if (s == STRATA_OK)
		s = strata_backend_synchronize(d.b, NULL, err);
	if (s == STRATA_OK)
		s = time_product(d.b, d.c, d.y, d.x, d.w, rows, 1, o->repeats,
				 &t, err);
	if (s == STRATA_OK)
		r->memory = (double)rows * COLS * 4 / t;
	if (s == STRATA_OK)
		s = time_product(d.b, d.c, d.y, d.x, d.w, prows, PRODUCT_ROWS,
				 o->repeats, &t, err);
	if (s == STRATA_OK)
		r->flops = 2.0 * prows * COLS * PRODUCT_ROWS / t;
	type_bench tb = {.b = d.b, .c = d.c, .s = d.s, .w = d.w,
			 .host = d.host, .x = d.x, .y = d.y, .bytes = bytes,
			 .gemm_rows = o->gemm_rows,
			 .gemm_cap = DEVICE_GEMM_ROWS, .repeats = o->repeats};
	if (s == STRATA_OK)
		s = strata_compute_reserve(
			d.c, (uint64_t)o->gemm_rows * DEVICE_WORKSPACE_WIDEST * 4,
			err);
	if (s == STRATA_OK)
		s = measure_types(&tb, types, r->types, &r->launch_seconds,
				  err);
	if (s == STRATA_OK)
		s = time_crossing(&d, o->repeats, &r->crossing_seconds, err);
	if (s == STRATA_OK && o->device_layers)
		s = device_layers(&d, o, types, r, err);
	if (s != STRATA_OK && err)
		strata_error_prefix(err, "calibrate cuda:%u", index);
	dev_fini(&d);
	return s;
}

/* ------------------------------------------------------------------------ */

strata_status strata_plan_calibrate(const strata_plan_calibrate_options *opt,
				    strata_plan_rates *out, strata_error *err)
{
	strata_plan_calibrate_options o = opt ? *opt
					      : (strata_plan_calibrate_options){0};
	if (!o.bytes)
		o.bytes = (uint64_t)256 << 20;
	if (!o.repeats)
		o.repeats = 3;
	if (!o.gemm_rows)
		o.gemm_rows = STRATA_PLAN_DEFAULT_PREFILL_CHUNK;
	if (!o.types)
		o.types = (1u << STRATA_BLOCK_COUNT) - 1;
	if (o.gemm_rows > 8192)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give --rows between 1 and 8192",
				   "calibrate: %u rows of the dense product is more than 8192",
				   o.gemm_rows);
	if (!types_of("cpu", o.types))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "name types the CPU kernels take (F32, BF16, F16, Q8_0, Q4_K ...)",
				   "calibrate: no type of the list has CPU kernels");
	if (o.bytes < PRODUCT_BYTES || o.bytes > ((uint64_t)16 << 30))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give --bytes between 32MiB and 16GiB",
				   "calibrate: %llu bytes per measure is outside 32 MiB .. 16 GiB",
				   (unsigned long long)o.bytes);
	if (o.memory_bytes && (o.memory_bytes < PRODUCT_BYTES ||
			       o.memory_bytes > ((uint64_t)16 << 30)))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give --memory-bytes between 32MiB and 16GiB",
				   "calibrate: a %llu-byte host memory matrix is outside 32 MiB .. 16 GiB",
				   (unsigned long long)o.memory_bytes);
	if (!o.memory_bytes)
		o.memory_bytes = strata__plan_memory_matrix_bytes();
	o.bytes = o.bytes / (COLS * 4) * (COLS * 4);
	o.memory_bytes = o.memory_bytes / (COLS * 4) * (COLS * 4);
	strata_plan_rates r;
	memset(&r, 0, sizeof r);
	strata_status s = cpu_rates(&o, &r, err);
	uint32_t n = o.cpu_only ? 0 : strata_backend_device_count("cuda");
	if (n > STRATA_PLAN_MAX_DEVICES)
		n = STRATA_PLAN_MAX_DEVICES;
	for (uint32_t i = 0; s == STRATA_OK && i < n; i++) {
		s = device_rates(&o, i, &r.devices[i], err);
		r.device_count = i + 1;
	}
	if (s == STRATA_OK)
		*out = r;
	return s;
}
