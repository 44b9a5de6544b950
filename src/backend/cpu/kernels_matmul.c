/* kernels_matmul.c - the CPU matrix product y = x . w^T (+ bias), for prefill
 * (many rows of x) and decode (one row), threaded over blocks of w's rows
 * (layer: backend).
 *
 * Each output element is one dot product summed the same way whatever the
 * tile it is computed in: eight lane sums over k in steps of 8, reduced in a
 * fixed tree, then the tail k added in order, then the bias. So a logit does
 * not depend on the thread count, on n, or on which tile shape produced it.
 * The AVX2+FMA variant is chosen at run time where the processor has it;
 * its multiply-adds are fused explicitly (dot8.h), the generic variant's
 * are not, and the file is built -ffp-contract=off so no compiler decides.
 */
#include "backend/cpu/dot8.h"
#include "backend/cpu/kernels_internal.h"

#define TILE_W DOT8_TILE_W
#define TILE_X DOT8_TILE_X

typedef struct mm_job {
	float *y;
	const float *x, *w, *bias;
	uint32_t n, in, out;
	uint32_t rows_per_task; /* multiple of TILE_W */
} mm_job;

/* ------------------------------------------------------------------------ */

/* y[c][r] for R rows of w starting at o and C rows of x starting at t. */
static inline __attribute__((always_inline)) void
tile(const mm_job *j, uint32_t o, uint32_t t, int R, int C, int fused)
{
	dot8_tile(j->y + (uint64_t)t * j->out + o, j->out,
		  j->x + (uint64_t)t * j->in, j->w + (uint64_t)o * j->in,
		  j->bias ? j->bias + o : NULL, j->in, R, C, fused);
}

static inline __attribute__((always_inline)) void
rows(const mm_job *j, uint32_t o0, uint32_t o1, int fused)
{
	uint32_t o = o0;
	for (; o + TILE_W <= o1; o += TILE_W) {
		uint32_t t = 0;
		for (; t + TILE_X <= j->n; t += TILE_X)
			tile(j, o, t, TILE_W, TILE_X, fused);
		for (; t < j->n; t++)
			tile(j, o, t, TILE_W, 1, fused);
	}
	for (; o < o1; o++)
		for (uint32_t t = 0; t < j->n; t++)
			tile(j, o, t, 1, 1, fused);
}

static void task_generic(void *arg, uint32_t task)
{
	const mm_job *j = arg;
	uint32_t o0 = task * j->rows_per_task;
	uint32_t o1 = o0 + j->rows_per_task;
	rows(j, o0, o1 < j->out ? o1 : j->out, 0);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"), flatten)) static void
task_avx2(void *arg, uint32_t task)
{
	const mm_job *j = arg;
	uint32_t o0 = task * j->rows_per_task;
	uint32_t o1 = o0 + j->rows_per_task;
	rows(j, o0, o1 < j->out ? o1 : j->out, 1);
}
#endif

/* The widest path the tests let the products take (both products, so
 * they stay comparable). */
static _Atomic int isa_limit = 2;

void strata__cpu_isa_limit(int level)
{
	isa_limit = level;
}

int strata__cpu_isa_max(void)
{
	return isa_limit;
}

static strata__pool_fn pick_task(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (strata__cpu_isa_max() >= 1 && __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("fma"))
		return task_avx2;
#endif
	return task_generic;
}

/* ------------------------------------------------------------------------ */

strata_status strata__cpu_matmul(void *ctx, float *y, const float *x,
				 const float *w, const float *bias, uint32_t n,
				 uint32_t in, uint32_t out, strata_error *err)
{
	(void)err;
	strata__pool *p = ctx;
	mm_job j = {.y = y, .x = x, .w = w, .bias = bias,
		    .n = n, .in = in, .out = out};
	/* About four tasks per thread for balance, at least 16 rows each so
	 * a task is worth waking a thread for; tiny products run inline. */
	uint64_t threads = strata__pool_threads(p);
	uint64_t rpt = (out + 4 * threads - 1) / (4 * threads);
	if (rpt < 16)
		rpt = 16;
	if ((uint64_t)n * in * out < 65536)
		rpt = out;
	rpt = (rpt + TILE_W - 1) / TILE_W * TILE_W;
	j.rows_per_task = (uint32_t)rpt;
	uint32_t tasks = (uint32_t)((out + rpt - 1) / rpt);
	strata__pool_run(p, pick_task(), &j, tasks);
	return STRATA_OK;
}
