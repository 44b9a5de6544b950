/* kernels_decode.c - the CPU's one-row products (a decode step), fused as a
 * layer runs them: products sharing their input in one parallel region
 * (q, k and v), added into their output in place (the residual products),
 * and the MLP's gate and up with their SwiGLU, on weights bf16 or f16
 * as stored (layer: backend).
 *
 * Why: a decode layer is seven products of very different sizes (k and v a
 * quarter of q, the MLP's three 3.5x it), each run as its own job of two
 * runs of rows a thread, then a norm, a residual add and a SwiGLU each on
 * a job of its own. A whole decode step read its weights at 0.61 of the
 * memory rate where one large product reaches 0.71: each job ends with the
 * threads waiting for the last run of rows, and the small ones spread over
 * few rows a thread. Here a step is one job of many small runs claimed in
 * order (a thread that finishes takes the next), the SwiGLU and the adds
 * done by the thread that made the row, no job of their own.
 *
 * Every output is the f32 product's one sum (dot8.h): eight lane sums of
 * fused multiply-adds over k in steps of 8, the fixed tree, the tail in
 * order, then the bias; weights decoded exactly as the stored product
 * decodes them (bf16 and f16 are exact in f32). So each output has the
 * bits of the unfused kernels', whatever the thread count or run size
 * (test_cpu_kernels checks it against them). Only with AVX2, FMA and F16C
 * (else decode_take says no and the plain kernels run); one row of x only.
 */
#include <math.h>

#include "backend/cpu/dot8.h"
#include "backend/cpu/kernels_internal.h"

/* Weight rows a task takes at least, and the weight bytes it aims for (a
 * run long enough for the prefetchers, short enough that the last one
 * ends soon after the others). Rows are taken DECODE_W at a time. */
#define DECODE_W 4u
#define TASK_BYTES (192u << 10)
#define TASKS_PER_THREAD 6u
/* Bytes ahead of the multiply-adds that each weight row is prefetched. */
#define PREFETCH_BYTES 1024u

typedef struct dec_part {
	float *y;		/* (w.rows) */
	const unsigned char *w; /* (rows, in) as stored */
	const float *bias;	/* (rows) or NULL */
	strata_weight_type type;
	uint32_t rows;
	uint32_t rows_per_task, first_task;
} dec_part;

typedef struct dec_job {
	const float *x; /* (in) */
	uint32_t in;
	bool accumulate, gated;
	uint32_t parts; /* products; gated: 2, gate then up, into parts[0].y */
	dec_part p[STRATA_KERNEL_PRODUCTS_MAX];
	uint32_t tasks;
	bool small; /* one task a part, on the calling thread */
} dec_job;

/* ------------------------------------------------------------------------ */

#if defined(__x86_64__)
#define DEC_ISA __attribute__((target("avx2,fma,f16c")))

/* Eight weights of row w at element k as f32 (exact). */
DEC_ISA static inline __attribute__((always_inline)) __m256
load8(const unsigned char *w, uint32_t k, strata_weight_type t)
{
	if (t == STRATA_WEIGHT_BF16) {
		__m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * (uint64_t)k));
		return _mm256_castsi256_ps(
			_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	if (t == STRATA_WEIGHT_F16)
		return _mm256_cvtph_ps(
			_mm_loadu_si128((const __m128i *)(w + 2 * (uint64_t)k)));
	return _mm256_loadu_ps((const float *)(w + 4 * (uint64_t)k));
}

DEC_ISA static inline __attribute__((always_inline)) float
load1(const unsigned char *w, uint32_t k, strata_weight_type t)
{
	if (t == STRATA_WEIGHT_F32)
		return ((const float *)w)[k];
	uint16_t h;
	memcpy(&h, w + 2 * (uint64_t)k, 2);
	if (t == STRATA_WEIGHT_BF16) {
		uint32_t b = (uint32_t)h << 16;
		float f;
		memcpy(&f, &b, 4);
		return f;
	}
	return _cvtsh_ss(h);
}

/* s[r] = row r . x for R rows starting at w (stride rb bytes), the dot8
 * order: eight lane sums, the tree, the tail. */
DEC_ISA static inline __attribute__((always_inline)) void
dot_rows(float *s, const unsigned char *w, uint64_t rb, const float *x,
	 uint32_t in, strata_weight_type t, int R)
{
	const uint32_t in8 = in & ~7u, esz = t == STRATA_WEIGHT_F32 ? 4 : 2;
	v8 acc[DECODE_W];
	for (int r = 0; r < R; r++)
		acc[r] = (v8){0};
	for (uint32_t k = 0; k < in8; k += 8) {
		if ((k * esz) % 64 == 0)
			for (int r = 0; r < R; r++)
				__builtin_prefetch(w + r * rb + (uint64_t)k * esz +
							   PREFETCH_BYTES,
						   0, 0);
		v8 xv = *(const v8 *)(x + k);
		for (int r = 0; r < R; r++) {
			v8 wv = (v8)load8(w + r * rb, k, t);
			dot8_madd8(&acc[r], &wv, &xv, 1);
		}
	}
	for (int r = 0; r < R; r++) {
		float v = dot8_reduce(&acc[r]);
		for (uint32_t k = in8; k < in; k++)
			v = dot8_madd1(v, load1(w + r * rb, k, t), x[k], 1);
		s[r] = v;
	}
}

/* s[r] = row o + r . x for the R rows of q from o, four at a time. */
DEC_ISA static inline __attribute__((always_inline)) void
dots(float *s, const dec_part *q, uint64_t rb, uint32_t o, int R,
     const dec_job *j, strata_weight_type t)
{
	if (R == (int)DECODE_W) {
		dot_rows(s, q->w + o * rb, rb, j->x, j->in, t, DECODE_W);
		return;
	}
	for (int r = 0; r < R; r++)
		dot_rows(s + r, q->w + (o + r) * rb, rb, j->x, j->in, t, 1);
}

/* Outputs o0 .. o1 of part q: s = row . x (+ bias), then stored, added
 * (accumulate), or, gated, silu(gate) * up into the gate's output. */
DEC_ISA static inline __attribute__((always_inline)) void
part_rows(const dec_job *j, const dec_part *q, uint32_t o0, uint32_t o1,
	  strata_weight_type t)
{
	const uint64_t rb = (uint64_t)j->in * (t == STRATA_WEIGHT_F32 ? 4 : 2);
	float s[DECODE_W], u[DECODE_W];
	for (uint32_t o = o0; o < o1; o += DECODE_W) {
		int R = o1 - o < DECODE_W ? (int)(o1 - o) : (int)DECODE_W;
		dots(s, q, rb, o, R, j, t);
		if (j->gated) { /* up has gate's type (decode_take) */
			dots(u, &j->p[1], rb, o, R, j, t);
			/* the SwiGLU kernel's expression (kernels_elementwise.c) */
			for (int r = 0; r < R; r++)
				q->y[o + r] = s[r] / (1.0f + expf(-s[r])) * u[r];
			continue;
		}
		for (int r = 0; r < R; r++) {
			float v = q->bias ? s[r] + q->bias[o + r] : s[r];
			if (j->accumulate)
				q->y[o + r] += v;
			else
				q->y[o + r] = v;
		}
	}
}

DEC_ISA static void decode_task(void *arg, uint32_t task)
{
	const dec_job *j = arg;
	uint32_t i = 0;
	while (i + 1 < j->parts && !j->gated && task >= j->p[i + 1].first_task)
		i++;
	const dec_part *q = &j->p[i];
	uint32_t o0 = (task - q->first_task) * q->rows_per_task;
	uint32_t o1 = o0 + q->rows_per_task < q->rows ? o0 + q->rows_per_task
						       : q->rows;
	/* one copy of the loop per type, the type a constant in each */
	switch (q->type) {
	case STRATA_WEIGHT_BF16: part_rows(j, q, o0, o1, STRATA_WEIGHT_BF16); break;
	case STRATA_WEIGHT_F16: part_rows(j, q, o0, o1, STRATA_WEIGHT_F16); break;
	default: part_rows(j, q, o0, o1, STRATA_WEIGHT_F32); break;
	}
}
#endif

/* bf16 and f16 only: on the GPU machine's 16-core host the f32 one-row
 * product through these tasks read 64.3 GB/s where the plain f32 kernel
 * had read 111.7 (strata calibrate's host memory rate, same machine, same
 * day), so f32 keeps the plain kernels until that is understood. */
static bool type_ok(strata_weight_type t)
{
	return t == STRATA_WEIGHT_BF16 || t == STRATA_WEIGHT_F16;
}

/* Rows a task of a part of `rows` rows of `row_bytes` takes: about
 * TASK_BYTES (both matrices for gated), at least TASKS_PER_THREAD tasks a
 * thread where the rows allow, a multiple of DECODE_W. */
static uint32_t task_rows(uint64_t rows, uint64_t row_bytes, uint64_t threads)
{
	if (!threads)
		return (uint32_t)rows;
	uint64_t by_bytes = TASK_BYTES / (row_bytes ? row_bytes : 1);
	uint64_t by_threads = rows / (threads * TASKS_PER_THREAD);
	uint64_t r = by_bytes < by_threads ? by_bytes : by_threads;
	r = r / DECODE_W * DECODE_W;
	return (uint32_t)(r < DECODE_W ? DECODE_W : r);
}

/* Tasks of every part; products of fewer than SMALL_ELEMENTS weights in
 * all are one task a part, run on the calling thread (run_job). */
#define SMALL_ELEMENTS 65536u
static void plan_tasks(strata__pool *p, dec_job *j)
{
	uint64_t threads = strata__pool_threads(p), elements = 0;
	for (uint32_t i = 0; i < j->parts; i++)
		elements += (uint64_t)j->p[i].rows * j->in;
	j->small = elements < SMALL_ELEMENTS;
	if (j->small)
		threads = 0;
	uint32_t parts = j->gated ? 1 : j->parts, t = 0;
	for (uint32_t i = 0; i < parts; i++) {
		dec_part *q = &j->p[i];
		uint64_t rb = (uint64_t)j->in * (q->type == STRATA_WEIGHT_F32 ? 4 : 2);
		if (j->gated)
			rb += (uint64_t)j->in *
			      (j->p[1].type == STRATA_WEIGHT_F32 ? 4 : 2);
		q->rows_per_task = threads ? task_rows(q->rows, rb, threads)
					   : q->rows;
		q->first_task = t;
		t += (q->rows + q->rows_per_task - 1) / q->rows_per_task;
	}
	j->tasks = t;
}

static void run_job(strata__pool *p, dec_job *j)
{
	plan_tasks(p, j);
#if defined(__x86_64__)
	if (j->small) {
		for (uint32_t t = 0; t < j->tasks; t++)
			decode_task(j, t); /* small: not worth waking the pool */
		return;
	}
	strata__pool_run(p, decode_task, j, j->tasks);
#endif
}

/* ------------------------------------------------------------------------ */

bool strata__cpu_decode_usable(void)
{
#if defined(__x86_64__)
	return strata__cpu_isa_max() >= 1 && strata__quant_avx2_usable();
#else
	return false;
#endif
}

#if defined(__x86_64__)
DEC_ISA void strata__cpu_decode_rows(float *y, const void *w,
				     strata_weight_type t, const float *x,
				     uint32_t in, uint32_t o0, uint32_t o1)
{
	dec_job j = {.x = x, .in = in, .parts = 1};
	j.p[0] = (dec_part){y, w, NULL, t, o1, o1 - o0, 0};
	/* decode_task's part_rows, the type a constant in each copy */
	switch (t) {
	case STRATA_WEIGHT_BF16: part_rows(&j, &j.p[0], o0, o1, STRATA_WEIGHT_BF16); break;
	case STRATA_WEIGHT_F16: part_rows(&j, &j.p[0], o0, o1, STRATA_WEIGHT_F16); break;
	default: part_rows(&j, &j.p[0], o0, o1, STRATA_WEIGHT_F32); break;
	}
}
#else
void strata__cpu_decode_rows(float *y, const void *w, strata_weight_type t,
			     const float *x, uint32_t in, uint32_t o0,
			     uint32_t o1)
{
	/* unreachable: strata__cpu_decode_usable says no here */
	(void)y, (void)w, (void)t, (void)x, (void)in, (void)o0, (void)o1;
}
#endif

bool strata__cpu_decode_take(uint32_t n, const strata_weight *const *w,
			     uint32_t count)
{
	if (n != 1 || !strata__cpu_decode_usable())
		return false;
	for (uint32_t i = 0; i < count; i++)
		if (!type_ok(w[i]->type))
			return false;
	return true;
}

strata_status strata__cpu_decode_products(void *ctx, const float *x,
					  const strata_kernel_product *p,
					  uint32_t count, bool accumulate,
					  strata_error *err)
{
	(void)err;
	dec_job j = {.x = x, .in = p[0].w.cols, .accumulate = accumulate,
		     .parts = count};
	for (uint32_t i = 0; i < count; i++)
		j.p[i] = (dec_part){p[i].y, p[i].w.data, p[i].bias,
				    p[i].w.type, p[i].w.rows, 0, 0};
	run_job(ctx, &j);
	return STRATA_OK;
}

strata_status strata__cpu_decode_gated(void *ctx, float *y, const float *x,
				       const strata_weight *gate,
				       const strata_weight *up,
				       strata_error *err)
{
	(void)err;
	dec_job j = {.x = x, .in = gate->cols, .gated = true, .parts = 2};
	j.p[0] = (dec_part){y, gate->data, NULL, gate->type, gate->rows, 0, 0};
	j.p[1] = (dec_part){NULL, up->data, NULL, up->type, up->rows, 0, 0};
	run_job(ctx, &j);
	return STRATA_OK;
}
