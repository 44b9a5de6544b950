/* kernels_elementwise.c - CPU RMSNorm, SwiGLU, residual add and embedding
 * lookup (layer: backend).
 *
 * These are light next to the matrix products: rows of RMSNorm and long
 * element runs are split over the pool only when there is enough work to pay
 * for waking it.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels_internal.h"

#define CHUNK_ELEMENTS 16384u /* elements per task for element-wise ops */

typedef struct ew_job {
	float *y;
	const float *x, *w;
	uint64_t count;
	uint32_t dim;
	float eps;
	strata_map_op op; /* map only */
	float a;
} ew_job;

/* ------------------------------------------------------------------------ */

static void rmsnorm_row(void *arg, uint32_t i)
{
	const ew_job *j = arg;
	const float *x = j->x + (uint64_t)i * j->dim;
	float *y = j->y + (uint64_t)i * j->dim;
	/* The mean of squares in double: the norm is then exact to float
	 * rounding whatever the width. */
	double ss = 0.0;
	for (uint32_t e = 0; e < j->dim; e++)
		ss += (double)x[e] * x[e];
	float r = 1.0f / sqrtf((float)(ss / j->dim) + j->eps);
	for (uint32_t e = 0; e < j->dim; e++)
		y[e] = (x[e] * r) * j->w[e];
}

static void chunk_range(const ew_job *j, uint32_t t, uint64_t *a, uint64_t *b)
{
	*a = (uint64_t)t * CHUNK_ELEMENTS;
	*b = *a + CHUNK_ELEMENTS < j->count ? *a + CHUNK_ELEMENTS : j->count;
}

static void swiglu_chunk(void *arg, uint32_t t)
{
	const ew_job *j = arg;
	uint64_t a, b;
	chunk_range(j, t, &a, &b);
	for (uint64_t e = a; e < b; e++) {
		float g = j->y[e];
		j->y[e] = g / (1.0f + expf(-g)) * j->x[e];
	}
}

static void add_chunk(void *arg, uint32_t t)
{
	const ew_job *j = arg;
	uint64_t a, b;
	chunk_range(j, t, &a, &b);
	for (uint64_t e = a; e < b; e++)
		j->y[e] += j->x[e];
}

/* gelu with tanh's approximation (gelu_pytorch_tanh), in float as torch
 * computes it for float tensors. */
static float gelu_tanh(float x)
{
	const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
	return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static void map_chunk(void *arg, uint32_t t)
{
	const ew_job *j = arg;
	uint64_t a, b;
	chunk_range(j, t, &a, &b);
	for (uint64_t e = a; e < b; e++) {
		float x = j->x[e];
		switch (j->op) {
		case STRATA_MAP_SCALE: j->y[e] = x * j->a; break;
		case STRATA_MAP_SOFTCAP: j->y[e] = j->a * tanhf(x / j->a); break;
		case STRATA_MAP_ADD_CONST: j->y[e] = x + j->a; break;
		case STRATA_MAP_GELU_MUL: j->y[e] = gelu_tanh(j->y[e]) * x; break;
		}
	}
}

static uint32_t chunks(uint64_t count)
{
	return (uint32_t)((count + CHUNK_ELEMENTS - 1) / CHUNK_ELEMENTS);
}

/* ------------------------------------------------------------------------ */

strata_status strata__cpu_rmsnorm(void *ctx, float *y, const float *x,
				  const float *w, uint32_t n, uint32_t dim,
				  float eps, strata_error *err)
{
	(void)err;
	ew_job j = {.y = y, .x = x, .w = w, .dim = dim, .eps = eps};
	if ((uint64_t)n * dim < CHUNK_ELEMENTS) {
		for (uint32_t i = 0; i < n; i++)
			rmsnorm_row(&j, i);
	} else {
		strata__pool_run(ctx, rmsnorm_row, &j, n);
	}
	return STRATA_OK;
}

strata_status strata__cpu_swiglu(void *ctx, float *gate, const float *up,
				 uint64_t count, strata_error *err)
{
	(void)err;
	ew_job j = {.y = gate, .x = up, .count = count};
	strata__pool_run(ctx, swiglu_chunk, &j, chunks(count));
	return STRATA_OK;
}

strata_status strata__cpu_add(void *ctx, float *y, const float *x,
			      uint64_t count, strata_error *err)
{
	(void)err;
	ew_job j = {.y = y, .x = x, .count = count};
	strata__pool_run(ctx, add_chunk, &j, chunks(count));
	return STRATA_OK;
}

typedef struct scatter_job {
	float *x;
	const float *y, *weight;
	const int32_t *rows;
	uint32_t dim;
} scatter_job;

/* Row i of the job: the product rounded before the sum, as the scale and
 * add it replaces (ISO C mode: the build does not contract to an FMA). */
static void scatter_chunk(void *arg, uint32_t i)
{
	const scatter_job *j = arg;
	float *x = j->x + (uint64_t)j->rows[i] * j->dim;
	const float *y = j->y + (uint64_t)i * j->dim;
	const float w = j->weight[i];
	for (uint32_t e = 0; e < j->dim; e++)
		x[e] += w * y[e];
}

strata_status strata__cpu_scatter_add(void *ctx, float *x, const float *y,
				      const int32_t *rows, const float *weight,
				      uint32_t m, uint32_t dim,
				      strata_error *err)
{
	(void)err;
	scatter_job j = {x, y, weight, rows, dim};
	strata__pool_run(ctx, scatter_chunk, &j, m);
	return STRATA_OK;
}

strata_status strata__cpu_map(void *ctx, float *y, const float *x,
			      uint64_t count, strata_map_op op, float a,
			      strata_error *err)
{
	(void)err;
	ew_job j = {.y = y, .x = x, .count = count, .op = op, .a = a};
	strata__pool_run(ctx, map_chunk, &j, chunks(count));
	return STRATA_OK;
}

strata_status strata__cpu_embed(void *ctx, float *x, const float *table,
				const int32_t *tokens, uint32_t n, uint32_t dim,
				strata_error *err)
{
	(void)ctx;
	(void)err;
	for (uint32_t i = 0; i < n; i++)
		memcpy(x + (uint64_t)i * dim,
		       table + (uint64_t)(uint32_t)tokens[i] * dim,
		       (size_t)dim * sizeof *x);
	return STRATA_OK;
}
