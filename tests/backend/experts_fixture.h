/* experts_fixture.h - what the tests of strata_kernel_experts share
 * (test_cpu_experts.c, test_cuda_kernels_experts.c): a layer's routed
 * experts as a case (stacked expert weights of a stored type, encoded by
 * base's quantizers from random values; x and the residual rows; hits
 * with their rows and routing weights, a hit of no rows and rows routed
 * to several hits among them), the case placed in a backend's memory, the
 * one-expert-at-a-time composition forward_moe.c ran before the slot, and
 * a float64 reference on the decoded weights (layer: backend tests).
 *
 * Included by exactly one file of each executable (the state is static). */
#ifndef STRATA_TESTS_BACKEND_EXPERTS_FIXTURE_H
#define STRATA_TESTS_BACKEND_EXPERTS_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/backend_kernels.h"

#define EXPERTS_HITS_MAX 16u
#define EXPERTS_ROWS_MAX 8u

enum { W_GATE, W_UP, W_DOWN };

/* One case: `experts` stacked experts of each matrix (gate and up (ffn,
 * dim) of gate_t, down (dim, ffn) of down_t), x and y0 (n, dim), and
 * `count` hits: hit i is expert expert_of[i] over rows[i][0 .. m[i]). */
typedef struct experts_case {
	strata_weight_type gate_t, down_t;
	uint32_t dim, ffn, n, experts, count;
	unsigned char *w[3];
	uint64_t expert_bytes[3]; /* one expert's bytes of each matrix */
	float *x, *y0;
	uint32_t expert_of[EXPERTS_HITS_MAX], m[EXPERTS_HITS_MAX];
	int32_t rows[EXPERTS_HITS_MAX][EXPERTS_ROWS_MAX];
	float weight[EXPERTS_HITS_MAX][EXPERTS_ROWS_MAX];
} experts_case;

static uint32_t experts_rng = 12345u;

/* Uniform in [-1, 1). */
static inline float experts_uniform(void)
{
	experts_rng = experts_rng * 1664525u + 1013904223u;
	return (float)((double)(experts_rng >> 8) / 8388608.0 - 1.0);
}

static inline uint64_t experts_type_bytes(strata_weight_type t, uint32_t rows,
					  uint32_t cols)
{
	strata_block_type b = strata_weight_type_block(t);
	return (uint64_t)rows * (cols / strata_block_elements(b)) *
	       strata_block_bytes(b);
}

/* `experts` matrices of (rows, cols) of type t, encoded from values of
 * scale `scale`. */
static inline unsigned char *experts_matrices(strata_weight_type t,
					      uint32_t experts, uint32_t rows,
					      uint32_t cols, float scale,
					      uint64_t *one)
{
	uint64_t elems = (uint64_t)rows * cols;
	*one = experts_type_bytes(t, rows, cols);
	unsigned char *p = malloc(*one * experts);
	float *v = malloc(elems * sizeof *v);
	if (!p || !v)
		abort();
	for (uint32_t e = 0; e < experts; e++) {
		for (uint64_t i = 0; i < elems; i++)
			v[i] = scale * experts_uniform();
		if (strata_block_encode(strata_weight_type_block(t), v,
					p + *one * e, elems) !=
		    STRATA_BLOCK_ALL_FINITE)
			abort();
	}
	free(v);
	return p;
}

/* A case of `count` hits; hit i's rows are the set bits of masks[i] (rows
 * below n <= 8), its expert (5 i + 3) mod experts: not in order, so the
 * table's order is the hits' and not the experts'. */
static inline void experts_case_init(experts_case *c, strata_weight_type gate_t,
				     strata_weight_type down_t, uint32_t dim,
				     uint32_t ffn, uint32_t n, uint32_t count,
				     const uint8_t *masks)
{
	memset(c, 0, sizeof *c);
	c->gate_t = gate_t, c->down_t = down_t;
	c->dim = dim, c->ffn = ffn, c->n = n, c->count = count;
	c->experts = count + 3;
	const float ws = 1.0f / sqrtf((float)dim), ds = 1.0f / sqrtf((float)ffn);
	c->w[W_GATE] = experts_matrices(gate_t, c->experts, ffn, dim, 2 * ws,
					&c->expert_bytes[W_GATE]);
	c->w[W_UP] = experts_matrices(gate_t, c->experts, ffn, dim, 2 * ws,
				      &c->expert_bytes[W_UP]);
	c->w[W_DOWN] = experts_matrices(down_t, c->experts, dim, ffn, 2 * ds,
					&c->expert_bytes[W_DOWN]);
	c->x = malloc((size_t)n * dim * sizeof *c->x);
	c->y0 = malloc((size_t)n * dim * sizeof *c->y0);
	if (!c->x || !c->y0)
		abort();
	for (uint64_t i = 0; i < (uint64_t)n * dim; i++) {
		c->x[i] = 2.0f * experts_uniform();
		c->y0[i] = 0.25f * experts_uniform();
	}
	for (uint32_t h = 0; h < count; h++) {
		c->expert_of[h] = (5 * h + 3) % c->experts;
		for (uint32_t r = 0; r < n; r++)
			if (masks[h] >> r & 1) {
				c->rows[h][c->m[h]] = (int32_t)r;
				c->weight[h][c->m[h]++] =
					0.5f + 0.5f * experts_uniform();
			}
	}
}

static inline void experts_case_fini(experts_case *c)
{
	for (int k = 0; k < 3; k++)
		free(c->w[k]);
	free(c->x);
	free(c->y0);
}

/* Backend memory for a copy of host bytes (the caller's put). */
typedef void *(*experts_put_fn)(const void *host, uint64_t bytes);

/* The case in a backend's memory: the hits e (count), x and y (the
 * residual, y0's values) through put. */
static inline void experts_case_place(const experts_case *c,
				      experts_put_fn put,
				      strata_kernel_expert *e, float **x,
				      float **y)
{
	unsigned char *dw[3];
	for (int k = 0; k < 3; k++)
		dw[k] = put(c->w[k], c->expert_bytes[k] * c->experts);
	*x = put(c->x, (uint64_t)c->n * c->dim * sizeof(float));
	*y = put(c->y0, (uint64_t)c->n * c->dim * sizeof(float));
	for (uint32_t h = 0; h < c->count; h++) {
		uint64_t at = c->expert_of[h];
		e[h] = (strata_kernel_expert){
			.gate = {c->gate_t, dw[W_GATE] + at * c->expert_bytes[W_GATE],
				 c->ffn, c->dim},
			.up = {c->gate_t, dw[W_UP] + at * c->expert_bytes[W_UP],
			       c->ffn, c->dim},
			.down = {c->down_t, dw[W_DOWN] + at * c->expert_bytes[W_DOWN],
				 c->dim, c->ffn},
			.rows = c->rows[h],
			.weight = c->weight[h],
			.m = c->m[h],
		};
	}
}

/* What forward_moe.c's expert_run did for each hit, on c: the gather,
 * the gated product, the down, the scatter-add. */
static inline strata_status experts_compose(strata_compute *c, float *y,
					    const float *x, uint32_t n,
					    const strata_kernel_expert *e,
					    uint32_t count,
					    const strata_kernel_experts_scratch *s,
					    strata_error *err)
{
	strata_status st = STRATA_OK;
	for (uint32_t i = 0; st == STRATA_OK && i < count; i++) {
		if (!e[i].m)
			continue;
		const strata_weight normed =
			strata_weight_f32(x, n, e[i].gate.cols);
		st = strata_kernel_embed(c, s->in, &normed, e[i].rows, e[i].m,
					 err);
		if (st == STRATA_OK)
			st = strata_kernel_gated(c, s->h, s->in, NULL, NULL,
						 &e[i].gate, &e[i].up, s->h2,
						 e[i].m, err);
		if (st == STRATA_OK)
			st = strata_kernel_matmul(c, s->out, s->h, &e[i].down,
						  NULL, e[i].m, err);
		if (st == STRATA_OK)
			st = strata_kernel_scatter_add(c, y, n, s->out,
						       e[i].rows, e[i].weight,
						       e[i].m, e[i].gate.cols,
						       err);
	}
	return st;
}

/* The exact result (float64 over the decoded weights) into want (n,
 * dim). */
static inline void experts_reference(const experts_case *c, double *want)
{
	const uint32_t dim = c->dim, ffn = c->ffn;
	float *g = malloc((size_t)ffn * dim * sizeof *g);
	float *u = malloc((size_t)ffn * dim * sizeof *u);
	float *d = malloc((size_t)dim * ffn * sizeof *d);
	double *h = malloc((size_t)ffn * sizeof *h);
	if (!g || !u || !d || !h)
		abort();
	for (uint64_t i = 0; i < (uint64_t)c->n * dim; i++)
		want[i] = c->y0[i];
	for (uint32_t k = 0; k < c->count; k++) {
		uint64_t at = c->expert_of[k];
		strata_block_decode(strata_weight_type_block(c->gate_t),
				    c->w[W_GATE] + at * c->expert_bytes[W_GATE],
				    g, (uint64_t)ffn * dim);
		strata_block_decode(strata_weight_type_block(c->gate_t),
				    c->w[W_UP] + at * c->expert_bytes[W_UP], u,
				    (uint64_t)ffn * dim);
		strata_block_decode(strata_weight_type_block(c->down_t),
				    c->w[W_DOWN] + at * c->expert_bytes[W_DOWN],
				    d, (uint64_t)dim * ffn);
		for (uint32_t j = 0; j < c->m[k]; j++) {
			const float *xr = c->x + (uint64_t)c->rows[k][j] * dim;
			for (uint32_t o = 0; o < ffn; o++) {
				double a = 0, b = 0;
				for (uint32_t i = 0; i < dim; i++) {
					a += (double)g[(uint64_t)o * dim + i] * xr[i];
					b += (double)u[(uint64_t)o * dim + i] * xr[i];
				}
				h[o] = a / (1.0 + exp(-a)) * b;
			}
			double *yr = want + (uint64_t)c->rows[k][j] * dim;
			for (uint32_t o = 0; o < dim; o++) {
				double v = 0;
				for (uint32_t i = 0; i < ffn; i++)
					v += (double)d[(uint64_t)o * ffn + i] * h[i];
				yr[o] += c->weight[k][j] * v;
			}
		}
	}
	free(g);
	free(u);
	free(d);
	free(h);
}

/* The worst error of got's change from y0 against want's, relative to
 * |want's change| plus the rms of want's changes; 0 everywhere no hit
 * routes a row to. */
static inline double experts_change_err(const experts_case *c,
					const float *got, const double *want,
					uint64_t *worst_at)
{
	const uint64_t count = (uint64_t)c->n * c->dim;
	double ss = 0;
	for (uint64_t i = 0; i < count; i++)
		ss += (want[i] - c->y0[i]) * (want[i] - c->y0[i]);
	const double rms = sqrt(ss / (double)count);
	double worst = 0;
	*worst_at = 0;
	for (uint64_t i = 0; i < count; i++) {
		const double dw = want[i] - c->y0[i];
		const double dg = (double)got[i] - c->y0[i];
		const double r = fabs(dg - dw) / (fabs(dw) + rms + 1e-30);
		if (!(r <= worst)) {
			worst = isnan(r) ? INFINITY : r;
			*worst_at = i;
		}
	}
	return worst;
}

/* The rms of got's change from y0 less want's, over the rms of want's
 * changes: the 8-bit x of the fast precision moves single elements by a
 * few percent of the rms (a near-cancelling sum), but the whole by ~1%. */
static inline double experts_change_rms_err(const experts_case *c,
					    const float *got,
					    const double *want)
{
	const uint64_t count = (uint64_t)c->n * c->dim;
	double ss = 0, se = 0;
	for (uint64_t i = 0; i < count; i++) {
		const double dw = want[i] - c->y0[i];
		const double dg = (double)got[i] - c->y0[i];
		ss += dw * dw;
		se += (dg - dw) * (dg - dw);
	}
	return ss > 0 ? sqrt(se / ss) : sqrt(se);
}

/* Whether row r of the case is routed to some hit. */
static inline int experts_row_routed(const experts_case *c, uint32_t r)
{
	for (uint32_t k = 0; k < c->count; k++)
		for (uint32_t j = 0; j < c->m[k]; j++)
			if ((uint32_t)c->rows[k][j] == r)
				return 1;
	return 0;
}

#endif /* STRATA_TESTS_BACKEND_EXPERTS_FIXTURE_H */
