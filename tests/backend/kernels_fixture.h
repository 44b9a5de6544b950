/* kernels_fixture.h - what the CUDA kernel tests share (one file per
 * kernel family, test_cuda_kernels_*.c): a CUDA backend, a device arena, a
 * CPU and a CUDA compute context set up once per executable, device buffers,
 * uploads and downloads on the compute stream, half-precision weights and a
 * tolerance check that prints its worst element (layer: backend tests).
 *
 * Included by exactly one file of each executable: the fixture's state F
 * lives here as a static, one per test program. */
#ifndef STRATA_TESTS_BACKEND_KERNELS_FIXTURE_H
#define STRATA_TESTS_BACKEND_KERNELS_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backend/cuda_fixture.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.h"

#define F32_TOL 1e-4
/* x split into two half terms before cuBLAS: ~16 bits (bf16) of x kept */
#define SPLIT_TOL 1e-3
#define MAX_BLOCKS 64

static struct {
	strata_backend *b;
	strata_arena *arena;
	strata_compute *cpu, *gpu;
	strata_stream *gs; /* the CUDA compute stream */
	uint32_t gemv_default; /* strata__cuda_gemv_rows_max as shipped */
	void *blocks[MAX_BLOCKS];
	int count;
} F;

/* ------------------------------------------------------------------------ */

#define OK(call)                                                               \
	do {                                                                   \
		strata_error e_;                                               \
		strata_status s_ = (call);                                     \
		if (s_ != STRATA_OK)                                           \
			fail_msg("%s: %s (fix: %s)", #call, e_.message,        \
				 e_.fix);                                      \
	} while (0)
#define ERR (&e_)

static inline void dev_free_all(void)
{
	for (int i = 0; i < F.count; i++)
		assert_int_equal(strata_arena_free(F.arena, F.blocks[i], NULL),
				 STRATA_OK);
	F.count = 0;
}

static inline void *dev_alloc(uint64_t bytes)
{
	void *p = NULL;
	if (F.count == MAX_BLOCKS)
		dev_free_all(); /* left by a failed case */
	OK(strata_arena_alloc(F.arena, bytes, &p, ERR));
	F.blocks[F.count++] = p;
	return p;
}

/* Queued on the compute stream, so later kernels see the bytes. */
static inline void *upload(const void *h, uint64_t bytes)
{
	void *d = dev_alloc(bytes);
	OK(strata_backend_copy_h2d_async(F.b, F.gs, d, h, bytes, ERR));
	return d;
}

static inline void download(void *h, const void *d, uint64_t bytes)
{
	OK(strata_backend_copy_d2h_async(F.b, F.gs, h, d, bytes, ERR));
	OK(strata_backend_synchronize(F.b, F.gs, ERR));
}

static inline float *host_floats(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof *p);
	assert_non_null(p);
	return p;
}

static inline void expect_close(const char *what, const float *want,
				const float *got, size_t n, double tol)
{
	size_t at;
	double e = cuda_test_rel_err(want, got, n, &at);
	printf("  %-52s worst rel err %.3g (tol %.0e)\n", what, e, tol);
	if (!(e <= tol))
		fail_msg("%s: element %zu: want %.9g got %.9g (rel %.3g > %.0e)",
			 what, at, (double)want[at], (double)got[at], e, tol);
}


/* exact for values bf16 can hold */
static inline uint16_t bf16_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

/* exact for normal values f16 can hold */
static inline uint16_t f16_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) == 0)
		return (uint16_t)((u >> 16) & 0x8000u);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t exp = ((u >> 23) & 0xffu) - 127u + 15u;
	return (uint16_t)(sign | (exp << 10) | ((u >> 13) & 0x3ffu));
}

/* w (n) on the device as `type`'s bits (w's values must be exact in it). */
static inline void *upload_half(strata_cuda_half type, const float *w,
				size_t n)
{
	uint16_t *h = calloc(n, 2);
	assert_non_null(h);
	for (size_t i = 0; i < n; i++)
		h[i] = type == STRATA_CUDA_BF16 ? bf16_bits(w[i]) : f16_bits(w[i]);
	void *d = upload(h, (uint64_t)n * 2);
	OK(strata_backend_synchronize(F.b, F.gs, ERR)); /* h read: free it */
	free(h);
	return d;
}

/* k/64 with |k| <= 64: exact in f32, bf16 and f16 alike. */
static inline void fill_sixty_fourths(float *x, size_t n, uint64_t seed)
{
	cuda_test_fill(x, n, seed, 1.0f);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)lrintf(x[i] * 64.0f) / 64.0f;
}


/* ------------------------------------------------------------------------ */

/* Both contexts at KERNELS_FIXTURE_PRECISION, STRATA_PRECISION_EXACT
 * unless the test defines it before including this file: the CPU
 * reference is then the f32 product (fast quantizes x to 8 bits on block
 * types), and the CUDA context splits prefill inputs into bf16 hi + lo
 * and decodes on f32 x; tests of the rounded-once path set prefill_terms
 * themselves; test_cuda_kernels_q8 takes FAST, the 8-bit decode on both. */
#ifndef KERNELS_FIXTURE_PRECISION
#define KERNELS_FIXTURE_PRECISION STRATA_PRECISION_EXACT
#endif
static inline int setup(void **state)
{
	(void)state;
	strata_error err;
	const strata_compute_options exact_cpu = {
		.threads = 2, .precision = KERNELS_FIXTURE_PRECISION};
	const strata_compute_options exact = {
		.precision = KERNELS_FIXTURE_PRECISION};
	if (strata_backend_cuda_create(NULL, &F.b, &err) != STRATA_OK ||
	    strata_arena_create(F.b, STRATA_ARENA_DEVICE, (uint64_t)768 << 20,
				"kernel test", &F.arena, &err) != STRATA_OK ||
	    strata_compute_create_with(&strata_cpu_kernel_ops, &exact_cpu,
				       &F.cpu, &err) != STRATA_OK ||
	    strata_compute_create_on_with(F.b, &exact, &F.gpu, NULL, &err) !=
		    STRATA_OK) {
		fprintf(stderr, "setup: %s\n  fix: %s\n", err.message, err.fix);
		return -1;
	}
	F.gs = strata_compute_stream(F.gpu);
	F.gemv_default = strata__cuda_gemv_rows_max;
	return F.gs ? 0 : -1;
}

static inline int teardown(void **state)
{
	(void)state;
	strata_compute_destroy(F.gpu);
	strata_compute_destroy(F.cpu);
	strata_arena_destroy(F.arena);
	strata_backend_destroy(F.b);
	return 0;
}

#endif /* STRATA_TESTS_BACKEND_KERNELS_FIXTURE_H */
