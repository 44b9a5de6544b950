/* kernels_quant.c - the CPU matrix product on weights in their stored type
 * (F16, BF16 and the GGUF block types, base's strata_block_type): y = x . w^T
 * (+ bias) with w's rows read as stored, activations f32 (layer: backend).
 *
 * Every output is summed in the f32 product's one order (dot8.h: eight
 * lane sums over k in steps of 8, a fixed tree, the tail in order, then
 * the bias), on weights decoded exactly (base's decoders, or the AVX2 /
 * AVX-512 ones of quant_avx2.c / quant_avx512.c, which give the same bits).
 * So a stored product equals the f32 product of its decoding bit for bit,
 * and an output does not depend on the thread count, on n or on the path.
 *
 * Two paths, both reading each weight once per product:
 * - decode (n <= GEMV_ROWS, one token per sequence): each task streams its
 *   own contiguous rows, GEMV_W at a time; a chunk of GEMV_CHUNK elements of
 *   each row is decoded into a buffer that stays in L1 and multiplied into
 *   every row of x at once, the lane sums kept across chunks. Memory, not
 *   decoding, sets the pace (bench_quant --kernels).
 * - prefill (more rows): a panel of rows, as many as fit PANEL_BYTES of
 *   f32, is decoded once into the thread's scratch, then multiplied by
 *   dot8_tile, the f32 product's own micro-tile, x tile by x tile: the f32
 *   product's speed plus one decoding per panel.
 * The block types' decode shape goes by default to qdot.h's path instead
 * (x quantized to 8 bits, integer dot products, as llama.cpp computes):
 * decoding to f32 is compute-bound there. --precision exact (the
 * compute context's decode mode) keeps it here, bit-exact.
 */
#include "backend/cpu/dot8.h"
#include "backend/cpu/kernels_internal.h"
#include "backend/cpu/qdot.h"

/* Rows of x the decode path takes; weights per group; elements of a row
 * decoded at a time (a multiple of 256, so chunks hold whole blocks of
 * every type: 4 rows x 512 floats = 8 KiB of buffer). */
#define GEMV_ROWS 8u
#define GEMV_W 4
#define GEMV_CHUNK 512u
/* f32 bytes of a prefill panel of decoded rows (in L2 with the x tile). */
#define PANEL_BYTES (256u << 10)
/* Default software prefetch distance of the decode path, in chunks. */
#define PREFETCH_CHUNKS 4u

/* Chunks ahead of the decoding that the decode path asks the caches for
 * (0: the hardware prefetchers alone); bench_quant --prefetch sets it. */
static _Atomic uint32_t prefetch_chunks = PREFETCH_CHUNKS;

void strata__quant_prefetch(uint32_t chunks)
{
	prefetch_chunks = chunks;
}

typedef void (*decode_fn)(strata_block_type t, const unsigned char *src,
			  float *dst, uint32_t elements);

typedef struct mq_job {
	strata__pool *pool;
	float *y;
	const float *x, *bias;
	const unsigned char *w;
	strata_block_type type;
	uint64_t row_bytes;
	uint32_t block_elements, block_bytes;
	uint32_t n, in, out, rows_per_task;
	uint32_t panel; /* prefill: rows decoded at once, multiple of 4 */
	uint32_t chunk_bytes, prefetch;
} mq_job;

/* ------------------------------------------------------------------------ */
/* Decode: n <= GEMV_ROWS                                                   */
/* ------------------------------------------------------------------------ */

/* acc[r][c0 + c] += buf row r . x row c0 + c over m8 elements (a multiple
 * of 8) of one chunk, for R weight rows and C rows of x (x at the chunk). */
static inline __attribute__((always_inline)) void
chunk_madd(v8 acc[GEMV_W][GEMV_ROWS], const float *buf, const float *x,
	   uint32_t in, uint32_t m8, int R, uint32_t c0, int C, int fused)
{
	v8 a[GEMV_W][3];
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			a[r][c] = acc[r][c0 + c];
	for (uint32_t i = 0; i < m8; i += 8) {
		v8 xv[3];
		for (int c = 0; c < C; c++)
			xv[c] = *(const v8 *)(x + (uint64_t)(c0 + c) * in + i);
		for (int r = 0; r < R; r++) {
			v8 wv = *(const v8 *)(buf + r * GEMV_CHUNK + i);
			for (int c = 0; c < C; c++)
				dot8_madd8(&a[r][c], &wv, &xv[c], fused);
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c0 + c] = a[r][c];
}

/* Outputs o .. o + R of every row of x: the weight rows chunk by chunk,
 * each chunk decoded once and multiplied into all n rows, three at a time
 * (12 accumulators, as dot8_tile). The last chunk, still in buf at the
 * end, holds the tail. */
static inline __attribute__((always_inline)) void
gemv_rows(const mq_job *j, uint32_t o, int R, decode_fn decode, int fused)
{
	float buf[GEMV_W * GEMV_CHUNK] __attribute__((aligned(64)));
	v8 acc[GEMV_W][GEMV_ROWS];
	const uint32_t in = j->in, n = j->n;
	const unsigned char *w0 = j->w + (uint64_t)o * j->row_bytes;
	for (int r = 0; r < R; r++)
		for (uint32_t c = 0; c < n; c++)
			acc[r][c] = (v8){0};
	uint32_t k = 0, m;
	for (;;) {
		m = in - k < GEMV_CHUNK ? in - k : GEMV_CHUNK;
		uint64_t at = (uint64_t)k / j->block_elements * j->block_bytes;
		if (j->prefetch)
			for (int r = 0; r < R; r++) {
				const char *pf = (const char *)w0 +
						 r * j->row_bytes + at +
						 j->prefetch;
				for (uint32_t b = 0; b < j->chunk_bytes; b += 64)
					__builtin_prefetch(pf + b, 0, 3);
			}
		for (int r = 0; r < R; r++)
			decode(j->type, w0 + r * j->row_bytes + at,
			       buf + r * GEMV_CHUNK, m);
		const float *x = j->x + k;
		uint32_t c0 = 0, m8 = m & ~7u;
		for (; c0 + 3 <= n; c0 += 3)
			chunk_madd(acc, buf, x, in, m8, R, c0, 3, fused);
		if (n - c0 == 2)
			chunk_madd(acc, buf, x, in, m8, R, c0, 2, fused);
		else if (n - c0 == 1)
			chunk_madd(acc, buf, x, in, m8, R, c0, 1, fused);
		if (k + m == in)
			break;
		k += m;
	}
	for (int r = 0; r < R; r++)
		for (uint32_t c = 0; c < n; c++) {
			const float *x = j->x + (uint64_t)c * in + k;
			float s = dot8_reduce(&acc[r][c]);
			for (uint32_t i = m & ~7u; i < m; i++)
				s = dot8_madd1(s, buf[r * GEMV_CHUNK + i], x[i],
					       fused);
			if (j->bias)
				s += j->bias[o + r];
			j->y[(uint64_t)c * j->out + o + r] = s;
		}
}

static inline __attribute__((always_inline)) void
gemv(const mq_job *j, uint32_t o0, uint32_t o1, decode_fn decode, int fused)
{
	uint32_t o = o0;
	for (; o + GEMV_W <= o1; o += GEMV_W)
		gemv_rows(j, o, GEMV_W, decode, fused);
	for (; o < o1; o++)
		gemv_rows(j, o, 1, decode, fused);
}

/* ------------------------------------------------------------------------ */
/* Prefill: panels decoded once, then the f32 micro-tile                    */
/* ------------------------------------------------------------------------ */

/* Rows t .. t + C of x against the `rows` decoded rows of a panel (wf)
 * whose first output is p0: four weight rows a tile, then one. */
static inline __attribute__((always_inline)) void
panel_x(const mq_job *j, const float *wf, uint32_t p0, uint32_t rows,
	uint32_t t, int C, int fused)
{
	const uint32_t in = j->in, out = j->out;
	float *y = j->y + (uint64_t)t * out + p0;
	const float *x = j->x + (uint64_t)t * in;
	const float *b = j->bias ? j->bias + p0 : NULL;
	uint32_t r = 0;
	for (; r + 4 <= rows; r += 4)
		dot8_tile(y + r, out, x, wf + (uint64_t)r * in, b ? b + r : NULL,
			  in, 4, C, fused);
	for (; r < rows; r++)
		for (int c = 0; c < C; c++)
			dot8_tile(y + (uint64_t)c * out + r, out,
				  x + (uint64_t)c * in, wf + (uint64_t)r * in,
				  b ? b + r : NULL, in, 1, 1, fused);
}

/* Outputs p0 .. p1 (at most j->panel rows) of every row of x: the rows
 * decoded once, then every x tile against them (x read once a panel). */
static inline __attribute__((always_inline)) void
panel(const mq_job *j, uint32_t p0, uint32_t p1, float *wf, decode_fn decode,
      int fused)
{
	for (uint32_t p = p0; p < p1; p++)
		decode(j->type, j->w + (uint64_t)p * j->row_bytes,
		       wf + (uint64_t)(p - p0) * j->in, j->in);
	uint32_t t = 0;
	for (; t + DOT8_TILE_X <= j->n; t += DOT8_TILE_X)
		panel_x(j, wf, p0, p1 - p0, t, DOT8_TILE_X, fused);
	for (; t < j->n; t++)
		panel_x(j, wf, p0, p1 - p0, t, 1, fused);
}

static inline __attribute__((always_inline)) void
prefill(const mq_job *j, uint32_t o0, uint32_t o1, decode_fn decode,
	int fused)
{
	float *wf = strata__pool_scratch(j->pool);
	for (uint32_t p = o0; p < o1; p += j->panel)
		panel(j, p, o1 - p < j->panel ? o1 : p + j->panel, wf, decode,
		      fused);
}

/* ------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void
task_rows(const mq_job *j, uint32_t task, decode_fn decode, int fused)
{
	uint32_t o0 = task * j->rows_per_task, o1 = o0 + j->rows_per_task;
	if (o1 > j->out)
		o1 = j->out;
	if (j->n <= GEMV_ROWS)
		gemv(j, o0, o1, decode, fused);
	else
		prefill(j, o0, o1, decode, fused);
}

static void decode_exact(strata_block_type t, const unsigned char *src,
			 float *dst, uint32_t elements)
{
	(void)strata_block_decode(t, src, dst, elements);
}

static void task_generic(void *arg, uint32_t task)
{
	task_rows(arg, task, decode_exact, 0);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"), flatten)) static void
task_avx2(void *arg, uint32_t task)
{
	task_rows(arg, task, strata__quant_decode_avx2, 1);
}

/* The same sums as task_avx2 (eight-lane FMAs); the AVX-512 decoders, and
 * 32 vector registers for the lane sums. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"), flatten))
static void task_avx512(void *arg, uint32_t task)
{
	task_rows(arg, task, strata__quant_decode_avx512, 1);
}
#endif

static strata__pool_fn pick_task(void)
{
#if defined(__x86_64__)
	int limit = strata__cpu_isa_max();
	if (limit >= 2 && strata__quant_avx512_usable())
		return task_avx512;
	if (limit >= 1 && strata__quant_avx2_usable())
		return task_avx2;
#endif
	return task_generic;
}

/* ------------------------------------------------------------------------ */
/* Decode on quantized x (qdot.h), the default for the block types          */
/* ------------------------------------------------------------------------ */

/* Up to QDOT_W rows of x: the task's copy of the job points at its
 * thread's scratch, where the kernel prepares x once (qdot_rows.h). */
static inline void qtask_rows(const strata__qjob *j, uint32_t task,
			      void (*rows)(const strata__qjob *, uint32_t,
					   uint32_t))
{
	uint32_t o0 = task * j->rows_per_task, o1 = o0 + j->rows_per_task;
	strata__qjob jt = *j;
	if (j->pool)
		jt.xs = strata__pool_scratch(j->pool);
	rows(&jt, o0, o1 > j->out ? j->out : o1);
}

static void qtask_c(void *arg, uint32_t task)
{
	qtask_rows(arg, task, strata__qdot_rows_c);
}

#if defined(__x86_64__)
static void qtask_avx2(void *arg, uint32_t task)
{
	qtask_rows(arg, task, strata__qdot_rows_avx2);
}

static void qtask_vnni(void *arg, uint32_t task)
{
	qtask_rows(arg, task, strata__qdot_rows_vnni);
}
#endif

static strata__pool_fn pick_qtask(void)
{
#if defined(__x86_64__)
	int limit = strata__cpu_isa_max();
	if (limit >= 2 && strata__qdot_vnni_usable())
		return qtask_vnni;
	if (limit >= 1 && strata__quant_avx2_usable())
		return qtask_avx2;
#endif
	return qtask_c;
}

strata__qdot_rows_fn strata__qdot_pick_rows(void)
{
#if defined(__x86_64__)
	strata__pool_fn t = pick_qtask();
	if (t == qtask_vnni)
		return strata__qdot_rows_vnni;
	if (t == qtask_avx2)
		return strata__qdot_rows_avx2;
#endif
	return strata__qdot_rows_c;
}

void strata__qdot_setup(strata__qjob *j, float *y, const void *w,
			strata_block_type type, const float *bias, uint32_t n,
			uint32_t in, uint32_t out)
{
	uint32_t be = strata_block_elements(type), bb = strata_block_bytes(type);
	*j = (strata__qjob){.y = y, .bias = bias, .w = w, .type = type,
			    .row_bytes = (uint64_t)in / be * bb, .n = n,
			    .in = in, .out = out,
			    .off = strata__qdot_offset(type)};
	j->block_bytes = bb;
	j->chunk_bytes = QDOT_CHUNK / be * bb;
	/* the decode path's distance (GEMV_CHUNK's bytes a chunk) */
	j->prefetch = prefetch_chunks * (GEMV_CHUNK / be * bb);
}

/* x quantized once into the pool's shared buffer, then the rows spread as
 * the exact decode path spreads them; up to QDOT_W rows of x also take
 * each thread's scratch for their prepared chunks. */
static strata_status matmul_qdot(strata__pool *p, const mq_job *mj,
				 strata_error *err)
{
	uint64_t bytes = strata__qdot_x_bytes(mj->n, mj->in);
	void *buf = strata__pool_shared(p, bytes, "quantized activations", err);
	if (!buf)
		return STRATA_E_NOMEM;
	strata__qjob j;
	strata__qdot_setup(&j, mj->y, mj->w, mj->type, mj->bias, mj->n, mj->in,
			   mj->out);
	j.rows_per_task = mj->rows_per_task;
	if (mj->n <= QDOT_W) {
		strata_status st = strata__pool_reserve(
			p, strata__qdot_xs_bytes(mj->n, mj->in), err);
		if (st != STRATA_OK)
			return st;
		j.pool = p;
	}
	strata__qdot_quantize_x(mj->type, mj->x, mj->n, mj->in, buf, &j.x);
	strata__pool_run(p, pick_qtask(), &j,
			 (mj->out + mj->rows_per_task - 1) / mj->rows_per_task);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status strata__cpu_matmul_stored(void *ctx, float *y, const float *x,
					const void *w, strata_block_type type,
					const float *bias, uint32_t n,
					uint32_t in, uint32_t out,
					strata_error *err)
{
	strata__pool *p = ctx;
	mq_job j = {.pool = p, .y = y, .x = x, .bias = bias, .w = w,
		    .type = type,
		    .block_elements = strata_block_elements(type),
		    .block_bytes = strata_block_bytes(type), .n = n, .in = in,
		    .out = out};
	j.row_bytes = (uint64_t)in / j.block_elements * j.block_bytes;
	j.chunk_bytes = GEMV_CHUNK / j.block_elements * j.block_bytes;
	j.prefetch = prefetch_chunks * j.chunk_bytes;
	/* Decode: two contiguous runs of rows a thread (the second balances
	 * a thread that woke late); prefill: four. Tiny products inline. */
	uint64_t threads = strata__pool_threads(p);
	uint64_t per = n <= GEMV_ROWS ? 2 * threads : 4 * threads;
	uint64_t rpt = (out + per - 1) / per;
	rpt = (rpt + 3) / 4 * 4;
	if ((uint64_t)n * in * out < 65536)
		rpt = out;
	j.rows_per_task = (uint32_t)rpt;
	if (n <= GEMV_ROWS && strata__qdot_has(type) &&
	    strata__pool_decode_mode(p) == STRATA__DECODE_Q8)
		return matmul_qdot(p, &j, err);
	if (n > GEMV_ROWS) {
		uint64_t pr = PANEL_BYTES / ((uint64_t)in * sizeof(float));
		pr = pr < 4 ? 4 : pr / 4 * 4;
		j.panel = (uint32_t)(pr < rpt ? pr : rpt);
		strata_status st = strata__pool_reserve(
			p, (uint64_t)j.panel * in * sizeof(float), err);
		if (st != STRATA_OK)
			return st;
	}
	strata__pool_run(p, pick_task(), &j,
			 (uint32_t)((out + rpt - 1) / rpt));
	return STRATA_OK;
}
