/* quant_kernels.c - bench_quant --kernels: the CPU matrix product on weights
 * in their stored type, alone, against the machine's memory read rate
 * measured in the same run (bench; issue 18: CPU decode at >= 70% of it).
 *
 * Decode shape: n = 1 and 4 activation rows times an (out x in) stored
 * matrix, on both decode paths (q8: x quantized to 8 bits and integer dot
 * products, the default: --precision fast; exact: f32 x, --precision exact), over enough matrices (a ring of about 512 MiB of stored bytes) that
 * every product reads its weights from memory, not from the caches; rate =
 * stored weight bytes / time. Prefill shape: n = 128 rows times one matrix,
 * in GFLOP/s (2 n in out / time), beside the f32 product of the same
 * weights decoded (the peer every stored type should come close to). Also
 * the fork/join cost of the compute pool (every thread one task), and the
 * one-row decode rate on a matrix that stays in the caches (64 rows a
 * thread): the kernel's own speed, which tells a memory-bound figure from
 * a compute-bound one. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"

#include "backend/cpu/kernels_internal.h"
#include "quant_kernels.h"
#include "support/random_blocks.h"

static uint32_t krng = 7;
static uint32_t krnd(void)
{
	krng = krng * 1664525u + 1013904223u;
	return krng >> 8;
}

static void random_blocks(strata_block_type t, unsigned char *p, size_t bytes)
{
	rb_fill(t, p, bytes, &krng);
}

static strata_weight_type weight_type_of(strata_block_type t)
{
	for (int w = 0; w < STRATA_WEIGHT_TYPE_COUNT; w++)
		if (strata_weight_type_block((strata_weight_type)w) == t)
			return (strata_weight_type)w;
	return STRATA_WEIGHT_TYPE_COUNT;
}

/* ------------------------------------------------------------------------ */

typedef struct kbench {
	strata_compute *c;  /* --precision fast: decode on quantized x */
	strata_compute *cx; /* --precision exact: f32 x */
	uint32_t in, out, passes;
	float *x, *y; /* (128, in), (128, out) */
	unsigned char *ring;
	uint64_t ring_bytes, matrix_bytes;
	uint32_t matrices;
} kbench;

/* Seconds of one product of n rows by matrix `m` of the ring on c. */
static double product_s(kbench *b, strata_compute *c, const strata_weight *w,
			uint32_t n)
{
	strata_error e;
	uint64_t t0 = strata_now_ns();
	if (strata_kernel_matmul(c, b->y, b->x, w, NULL, n, &e)) {
		fprintf(stderr, "bench_quant: %s\n  fix: %s\n", e.message,
			e.fix);
		return -1;
	}
	return (strata_now_ns() - t0) / 1e9;
}

/* Stored bytes per second of decode products (n rows) over the ring, best
 * of `passes` passes over every matrix. */
static double decode_rate(kbench *b, strata_compute *c, strata_weight_type wt,
			  uint32_t n)
{
	double best = 0;
	for (uint32_t pass = 0; pass < b->passes; pass++) {
		double s = 0;
		for (uint32_t m = 0; m < b->matrices; m++) {
			strata_weight w = {wt, b->ring + m * b->matrix_bytes,
					   b->out, b->in};
			double t = product_s(b, c, &w, n);
			if (t < 0)
				return -1;
			s += t;
		}
		double rate = (double)b->matrix_bytes * b->matrices / s;
		best = rate > best ? rate : best;
	}
	return best;
}

/* Stored bytes per second of a one-row decode product on a matrix small
 * enough to stay in the caches (64 rows a thread, from the ring's first
 * matrix), best of `reps`: the kernel's own rate, the ceiling that the
 * rate from memory can reach (far above it: memory sets the pace). */
static double cached_rate(kbench *b, strata_weight_type wt, uint64_t row_bytes,
			  uint32_t reps)
{
	uint32_t rows = 64 * strata_compute_threads(b->c);
	rows = rows < b->out ? rows : b->out;
	strata_weight w = {wt, b->ring, rows, b->in};
	double best = 0;
	for (uint32_t i = 0; i < reps; i++) {
		double t = product_s(b, b->c, &w, 1);
		if (t < 0)
			return -1;
		double r = t > 0 ? (double)row_bytes * rows / t : 0;
		best = r > best ? r : best;
	}
	return best;
}

/* FLOP per second of a prefill product (n rows), best of three. */
static double prefill_rate(kbench *b, const strata_weight *w, uint32_t n)
{
	double best = 0;
	for (int pass = 0; pass < 3; pass++) {
		double t = product_s(b, b->c, w, n);
		if (t < 0)
			return -1;
		double r = 2.0 * n * b->in * b->out / t;
		best = r > best ? r : best;
	}
	return best;
}

typedef struct meet {
	_Atomic uint32_t arrived;
	uint32_t target;
} meet;

/* Waits for every thread's task to start: so each run needs every worker
 * awake, not the caller alone. */
static void meet_task(void *arg, uint32_t task)
{
	meet *m = arg;
	(void)task;
	m->arrived++;
	while (m->arrived < m->target)
		;
}

/* Microseconds of one fork/join of the compute pool (the CPU kernels'
 * kernels_pool.c, a pool of the bench's thread count) running one task on
 * every thread (each waits for all to have started), median of 2001. */
static double fork_join_us(uint32_t threads)
{
	enum { RUNS = 2001 };
	static uint64_t ns[RUNS];
	strata__pool *p;
	strata_error e;
	if (strata__pool_create(threads, &p, &e))
		return -1;
	uint32_t tasks = strata__pool_threads(p);
	for (int i = 0; i < RUNS; i++) {
		meet m = {0, tasks};
		uint64_t t0 = strata_now_ns();
		strata__pool_run(p, meet_task, &m, tasks);
		ns[i] = strata_now_ns() - t0;
	}
	strata__pool_destroy(p);
	for (int i = 1; i < RUNS; i++) /* insertion sort: small */
		for (int j = i; j > 0 && ns[j - 1] > ns[j]; j--) {
			uint64_t s = ns[j];
			ns[j] = ns[j - 1], ns[j - 1] = s;
		}
	return ns[RUNS / 2] / 1e3;
}

static const strata_block_type all_types[] = {
	STRATA_BLOCK_BF16, STRATA_BLOCK_F16,  STRATA_BLOCK_Q8_0,
	STRATA_BLOCK_Q4_K, STRATA_BLOCK_Q6_K, STRATA_BLOCK_Q4_0,
	STRATA_BLOCK_Q5_K, STRATA_BLOCK_IQ4_XS, STRATA_BLOCK_Q4_1,
	STRATA_BLOCK_Q5_0, STRATA_BLOCK_Q5_1, STRATA_BLOCK_IQ4_NL,
	STRATA_BLOCK_Q2_K, STRATA_BLOCK_Q3_K,
};

/* One type's row of the table: 1 and 4 rows decode on each path (the
 * same as each other for bf16 and f16, which have no quantized path),
 * prefill 128 rows. */
static int bench_type(kbench *b, strata_block_type t, double mem_rate,
		      uint32_t prefill_n, float *wf)
{
	strata_weight_type wt = weight_type_of(t);
	b->matrix_bytes = (uint64_t)b->in / strata_block_elements(t) *
			  strata_block_bytes(t) * b->out;
	b->matrices = (uint32_t)(b->ring_bytes / b->matrix_bytes);
	if (b->matrices == 0)
		b->matrices = 1;
	random_blocks(t, b->ring, b->matrix_bytes * b->matrices);
	double r1 = decode_rate(b, b->c, wt, 1), r4 = decode_rate(b, b->c, wt, 4);
	double x1 = decode_rate(b, b->cx, wt, 1), x4 = decode_rate(b, b->cx, wt, 4);
	double c1 = cached_rate(b, wt, b->matrix_bytes / b->out,
				b->passes == 1 ? 5 : 300);
	strata_weight w = {wt, b->ring, b->out, b->in};
	strata_weight w32 = {STRATA_WEIGHT_F32, wf, b->out, b->in};
	(void)strata_block_decode(t, b->ring, wf, (uint64_t)b->in * b->out);
	double pf = prefill_rate(b, &w, prefill_n);
	double pf32 = prefill_rate(b, &w32, prefill_n);
	if (r1 < 0 || r4 < 0 || x1 < 0 || x4 < 0 || c1 < 0 || pf < 0 ||
	    pf32 < 0)
		return 1;
	printf("| %s | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f "
	       "| %.1f | %.2f | %.1f |\n",
	       strata_block_name(t), r1 / 1e9, r1 / mem_rate, r4 / 1e9,
	       r4 / mem_rate, x1 / 1e9, x1 / mem_rate, x4 / 1e9, x4 / mem_rate,
	       pf / 1e9, pf / pf32, c1 / 1e9);
	printf("json {\"kernel\": \"%s\", \"in\": %u, \"out\": %u, "
	       "\"decode1_bytes_per_s\": %.0f, \"decode4_bytes_per_s\": %.0f, "
	       "\"exact_decode1_bytes_per_s\": %.0f, "
	       "\"exact_decode4_bytes_per_s\": %.0f, "
	       "\"memory_read_rate\": %.0f, \"prefill%u_flops\": %.0f, "
	       "\"prefill_f32_flops\": %.0f, \"cached_decode1_bytes_per_s\": "
	       "%.0f}\n",
	       strata_block_name(t), b->in, b->out, r1, r4, x1, x4, mem_rate,
	       prefill_n, pf, pf32, c1);
	return 0;
}

/* Whether name is one of the comma list's (NULL: every name). */
/* Is `name` in the comma list (any case: "q4_k" is Q4_K)? No list: all. */
static bool listed(const char *list, const char *name)
{
	if (!list)
		return true;
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncasecmp(p, name, n))
			return true;
		p += len + (e != NULL);
	}
	return false;
}

/* Every name of the list is a type this bench measures; else says which
 * is not, and the names it takes (a list matching nothing once printed
 * the table's heading and no row, and exited 0). */
static bool list_known(const char *list)
{
	if (!list)
		return true;
	for (const char *p = list;;) {
		size_t len = strcspn(p, ",");
		bool found = false;
		for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++) {
			const char *name = strata_block_name(all_types[i]);
			found |= len && strlen(name) == len &&
				 !strncasecmp(p, name, len);
		}
		if (!found) {
			fprintf(stderr, "bench_quant: --types: '%.*s' is not a "
				"type this bench measures\n  fix: give some of",
				(int)len, p);
			for (size_t i = 0; i < sizeof all_types / sizeof *all_types;
			     i++)
				fprintf(stderr, "%s%s", i ? "," : " ",
					strata_block_name(all_types[i]));
			fprintf(stderr, " (any case)\n");
			return false;
		}
		if (!p[len])
			return true;
		p += len + 1;
	}
}

int strata_bench_kernels(uint32_t threads, bool quick, double mem_rate,
			 uint32_t in, uint32_t out, const char *types)
{
	if (!list_known(types))
		return 2;
	kbench b = {.in = quick ? 512 : in, .out = quick ? 256 : out,
		    .passes = quick ? 1 : 2,
		    .ring_bytes = (uint64_t)(quick ? 8 : 512) << 20};
	uint32_t prefill_n = quick ? 16 : 128;
	strata_error e;
	int rc = 1;
	float *wf = NULL;
	/* one context at each precision: fast (the default) and exact */
	if (strata_compute_create(&strata_cpu_kernel_ops, threads, &b.c, &e)) {
		fprintf(stderr, "bench_quant: %s\n  fix: %s\n", e.message,
			e.fix);
		return 1;
	}
	strata_status st = strata_compute_create_with(
		&strata_cpu_kernel_ops,
		&(strata_compute_options){.threads = threads,
					  .precision = STRATA_PRECISION_EXACT},
		&b.cx, &e);
	if (st) {
		fprintf(stderr, "bench_quant: %s\n  fix: %s\n", e.message,
			e.fix);
		strata_compute_destroy(b.c);
		return 1;
	}
	b.x = malloc((size_t)128 * b.in * sizeof *b.x);
	b.y = malloc((size_t)128 * b.out * sizeof *b.y);
	b.ring = malloc(b.ring_bytes);
	wf = malloc((size_t)b.in * b.out * sizeof *wf);
	if (!b.x || !b.y || !b.ring || !wf) {
		fprintf(stderr, "bench_quant: out of memory\n");
		goto done;
	}
	for (size_t i = 0; i < (size_t)128 * b.in; i++)
		b.x[i] = (float)(krnd() % 2001) / 1000.0f - 1.0f;
	printf("stored-type products, %u x %u (out x in), %u threads; "
	       "memory read rate %.1f GB/s; pool fork/join %.1f us\n",
	       b.out, b.in, strata_compute_threads(b.c), mem_rate / 1e9,
	       fork_join_us(strata_compute_threads(b.c)));
	printf("decode: q8 = x quantized to 8 bits, integer dot products "
	       "(--precision fast, the default); exact = f32 x (--precision "
	       "exact)\n");
	printf("| type | q8 1 row GB/s | of memory | q8 4 rows GB/s | "
	       "of memory | exact 1 row GB/s | of memory | exact 4 rows GB/s | "
	       "of memory | prefill %u rows GFLOP/s | of f32 product | "
	       "q8 1 row in cache GB/s |\n"
	       "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
	       "| --- | --- |\n",
	       prefill_n);
	rc = 0;
	for (size_t i = 0; i < sizeof all_types / sizeof *all_types && !rc; i++)
		if (listed(types, strata_block_name(all_types[i])))
			rc = bench_type(&b, all_types[i], mem_rate, prefill_n,
					wf);
done:
	free(b.x), free(b.y), free(b.ring), free(wf);
	strata_compute_destroy(b.c);
	strata_compute_destroy(b.cx);
	return rc;
}
