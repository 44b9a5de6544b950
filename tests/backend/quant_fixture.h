/* quant_fixture.h - what the CUDA kernel tests on weights of GGUF block
 * types share (test_cuda_kernels_quant.c, test_cuda_kernels_q8.c): random
 * blocks whose factors are finite and small, a weight's bytes, the types
 * the memory-rate and q8 GEMVs take, and the fused decode slots' case,
 * set up on both backends and checked against the CPU (layer: backend
 * tests).
 *
 * Included after kernels_fixture.h by exactly one file of each executable,
 * which defines QUANT_FIXTURE_SEED first: the random bytes' sequence
 * starts there, so each test keeps its own. */
#ifndef STRATA_TESTS_BACKEND_QUANT_FIXTURE_H
#define STRATA_TESTS_BACKEND_QUANT_FIXTURE_H

#include <stdlib.h>

#include "backend/kernels_fixture.h"

#ifndef QUANT_FIXTURE_SEED
#error "define QUANT_FIXTURE_SEED (the random bytes' first state) before including quant_fixture.h"
#endif

/* The types the memory-rate GEMV (kernels_qgemv.cu) and the q8 GEMV
 * (kernels_qgemv_q8.cu) take. */
static const strata_weight_type fast_types[] = {
	STRATA_WEIGHT_Q8_0, STRATA_WEIGHT_Q4_0, STRATA_WEIGHT_Q4_K,
	STRATA_WEIGHT_Q5_K, STRATA_WEIGHT_Q6_K,
};
#define FAST_TYPES (sizeof fast_types / sizeof *fast_types)

/* ------------------------------------------------------------------------ */
/* Random blocks                                                            */
/* ------------------------------------------------------------------------ */

static uint32_t rng = QUANT_FIXTURE_SEED;

static inline unsigned char rbyte(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (unsigned char)(rng >> 24);
}

/* Byte offsets of each block type's f16 factors (ggml's layouts). */
static inline void factor_offsets(strata_block_type t, int at[2], int *count)
{
	*count = 1;
	at[0] = 0;
	switch (t) {
	case STRATA_BLOCK_Q4_1: case STRATA_BLOCK_Q5_1:
	case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K:
		at[1] = 2, *count = 2;
		break;
	case STRATA_BLOCK_Q2_K:
		at[0] = 80, at[1] = 82, *count = 2;
		break;
	case STRATA_BLOCK_Q3_K: at[0] = 108; break;
	case STRATA_BLOCK_Q6_K: at[0] = 208; break;
	default: break;
	}
}

/* Random blocks whose f16 factors are finite and small (exponent bits of
 * the high byte kept low), so products stay in range; the caller frees
 * them. */
static inline unsigned char *random_blocks(strata_block_type t,
					   uint64_t bytes)
{
	unsigned char *p = malloc(bytes);
	assert_non_null(p);
	for (uint64_t i = 0; i < bytes; i++)
		p[i] = rbyte();
	int at[2], count;
	factor_offsets(t, at, &count);
	uint32_t bb = strata_block_bytes(t);
	for (uint64_t b = 0; b < bytes / bb; b++)
		for (int k = 0; k < count; k++)
			p[b * bb + (uint64_t)at[k] + 1] &= 0x2b;
	return p;
}

/* The stored bytes of a (rows, cols) weight of type t. */
static inline uint64_t weight_bytes(strata_weight_type t, uint32_t rows,
				    uint32_t cols)
{
	strata_block_type b = strata_weight_type_block(t);
	return (uint64_t)rows * (cols / strata_block_elements(b)) *
	       strata_block_bytes(b);
}

/* ------------------------------------------------------------------------ */
/* The fused decode slots' case                                             */
/* ------------------------------------------------------------------------ */

#define FUSED_IN 1280u

/* One row of x (FUSED_IN), three parts of one type (outs[i] rows, a bias
 * on part 1, y filled), and an f32 norm, on the host (hp, hn) and the
 * device (dp, dnrm); cn and dn take the normed row. */
typedef struct fused_case {
	strata_weight_type t;
	const uint32_t *outs;
	float *x, *g, *cn, *hb, *dx, *dg, *dn;
	unsigned char *hw[3];
	float *hy[3], *dy[3];
	strata_kernel_product hp[3], dp[3];
	strata_kernel_norm hn, dnrm;
} fused_case;

/* x and the norm's weights from seeds 41 + seed and 43 + seed. */
static inline void fused_case_init(fused_case *c, strata_weight_type t,
				   uint64_t seed, const uint32_t outs[3])
{
	const uint32_t in = FUSED_IN;
	strata_block_type bt = strata_weight_type_block(t);
	c->t = t;
	c->outs = outs;
	c->x = host_floats(in), c->g = host_floats(in), c->cn = host_floats(in);
	cuda_test_fill(c->x, in, 41 + seed, 3.0f);
	cuda_test_fill(c->g, in, 43 + seed, 1.0f);
	c->dx = upload(c->x, in * 4), c->dg = upload(c->g, in * 4);
	c->dn = dev_alloc(in * 4);
	for (int i = 0; i < 3; i++) {
		uint64_t bytes = weight_bytes(t, outs[i], in);
		c->hw[i] = random_blocks(bt, bytes);
		c->hy[i] = host_floats(outs[i]);
		cuda_test_fill(c->hy[i], outs[i], 7 + i, 1.0f);
		c->dy[i] = upload(c->hy[i], outs[i] * 4);
		c->hp[i] = (strata_kernel_product){c->hy[i], {t, c->hw[i], outs[i], in}, NULL};
		c->dp[i] = (strata_kernel_product){c->dy[i], {t, upload(c->hw[i], bytes), outs[i], in}, NULL};
	}
	c->hb = host_floats(outs[1]);
	cuda_test_fill(c->hb, outs[1], 99, 1.0f);
	c->hp[1].bias = c->hb, c->dp[1].bias = upload(c->hb, outs[1] * 4);
	c->hn = (strata_kernel_norm){{STRATA_WEIGHT_F32, c->g, 1, in}, 1e-5f};
	c->dnrm = (strata_kernel_norm){{STRATA_WEIGHT_F32, c->dg, 1, in}, 1e-5f};
}

/* Device y (rows) against the host's, named "<type> <label> <what>". */
static inline void fused_expect(const fused_case *c, const char *label,
				const char *what, const float *want,
				const float *dy, uint32_t rows, double tol)
{
	char name[96];
	float *got = host_floats(rows);
	download(got, dy, rows * 4);
	snprintf(name, sizeof name, "%s %s %s", strata_weight_type_name(c->t),
		 label, what);
	expect_close(name, want, got, rows, tol);
	free(got);
}

/* The CUDA fused slots against the CPU's through the same wrappers,
 * within tol: the three parts with the norm folded in, part 0
 * accumulating into y (a residual, no norm), then gate/up of part 0's
 * rows (fresh up weights) with the norm and SwiGLU. */
static inline void fused_check(fused_case *c, const char *label, double tol)
{
	const uint32_t in = FUSED_IN, *outs = c->outs;
	assert_true(F.gpu->ops->products_take(F.gpu->ctx, &c->dnrm, 1, c->dp, 3));
	OK(strata_kernel_products(F.cpu, c->x, &c->hn, c->cn, 1, c->hp, 3, false, NULL, ERR));
	OK(strata_kernel_products(F.gpu, c->dx, &c->dnrm, c->dn, 1, c->dp, 3, false, NULL, ERR));
	for (int i = 0; i < 3; i++) {
		char what[32];
		snprintf(what, sizeof what, "part %d + norm", i);
		fused_expect(c, label, what, c->hy[i], c->dy[i], outs[i], tol);
	}
	float *sh = host_floats(outs[0]), *sd = dev_alloc(outs[0] * 4);
	OK(strata_kernel_products(F.cpu, c->x, NULL, NULL, 1, c->hp, 1, true, sh, ERR));
	OK(strata_kernel_products(F.gpu, c->dx, NULL, NULL, 1, c->dp, 1, true, sd, ERR));
	fused_expect(c, label, "y += (residual)", c->hy[0], c->dy[0], outs[0], tol);
	strata_weight hg = c->hp[0].w, hu = c->hp[0].w;
	strata_weight dgw = c->dp[0].w, duw = c->dp[0].w;
	uint64_t ub = weight_bytes(c->t, outs[0], in);
	unsigned char *up = random_blocks(strata_weight_type_block(c->t), ub);
	hu.data = up, duw.data = upload(up, ub);
	assert_true(F.gpu->ops->gated_take(F.gpu->ctx, &c->dnrm, 1, &dgw, &duw));
	float *hyg = host_floats(outs[0]), *hup = host_floats(outs[0]);
	float *dyg = dev_alloc(outs[0] * 4), *dup = dev_alloc(outs[0] * 4);
	OK(strata_kernel_gated(F.cpu, hyg, c->x, &c->hn, c->cn, &hg, &hu, hup, 1, ERR));
	OK(strata_kernel_gated(F.gpu, dyg, c->dx, &c->dnrm, c->dn, &dgw, &duw, dup, 1, ERR));
	fused_expect(c, label, "gate/up + norm", hyg, dyg, outs[0], tol);
	free(sh), free(up), free(hyg), free(hup);
}

/* Frees the case's host buffers and every device buffer. */
static inline void fused_case_fini(fused_case *c)
{
	dev_free_all();
	for (int i = 0; i < 3; i++)
		free(c->hw[i]), free(c->hy[i]);
	free(c->x), free(c->g), free(c->cn), free(c->hb);
}

#endif
