/* kernels_quant.c - the CPU matrix product on weights in their stored type
 * (F16, BF16 and the GGUF block types, base's strata_block_type): y = x . w^T
 * (+ bias) with w's rows read as stored, activations f32 (layer: backend).
 *
 * Each task decodes one weight row at a time into a stack buffer (exactly:
 * base's decoders, or the AVX2 ones of quant_avx2.c, which give the same
 * bits) and takes its dot product with every row of x in f32: eight
 * lane sums over k in steps of 8, reduced in a fixed tree. So a row is
 * decoded once per product whatever n is, and an output does not depend on
 * the thread count, on n or on the tile it is in; decode and prefill agree
 * bit for bit. Rows wider than ROW_CHUNK are decoded chunk by chunk for
 * each row of x, with the same lane sums. llama.cpp instead quantizes x to
 * 8 bits for its integer dot products; keeping x f32 is what keeps strata
 * within 1e-3 of the exact logits (tests/infer/test_quant_logits.c).
 */
#include "backend/cpu/dot8.h"
#include "backend/cpu/kernels_internal.h"

/* Floats of one decoded chunk on a task's stack (64 KiB): a multiple of
 * 256, so chunks hold whole blocks of every type. */
#define ROW_CHUNK 16384u

typedef void (*decode_fn)(strata_block_type t, const unsigned char *src,
			  float *dst, uint32_t elements);

typedef struct mq_job {
	float *y;
	const float *x, *bias;
	const unsigned char *w;
	strata_block_type type;
	uint64_t row_bytes;
	uint32_t block_elements, block_bytes;
	uint32_t n, in, out, rows_per_task;
} mq_job;

/* ------------------------------------------------------------------------ */

/* acc += w[0..k8) * x[0..k8) lane by lane, k8 = k rounded down to 8. */
static inline __attribute__((always_inline)) void
lanes(v8 *acc, const float *w, const float *x, uint32_t k8, int fused)
{
	v8 a = *acc;
	for (uint32_t i = 0; i < k8; i += 8)
		dot8_madd8(&a, (const v8 *)(w + i), (const v8 *)(x + i),
			   fused);
	*acc = a;
}

/* The lane sums reduced, then the tail w[k8..k) . x[k8..k) added in order:
 * the f32 product's order (kernels_matmul.c), so a stored row and its f32
 * decoding give the same bits. */
static inline __attribute__((always_inline)) float
finish(const v8 *acc, const float *w, const float *x, uint32_t k8,
       uint32_t k, int fused)
{
	float s = dot8_reduce(acc);
	for (uint32_t i = k8; i < k; i++)
		s = dot8_madd1(s, w[i], x[i], fused);
	return s;
}

static void decode_exact(strata_block_type t, const unsigned char *src, float *dst,
			 uint32_t elements)
{
	(void)strata_block_decode(t, src, dst, elements);
}

/* Row o against row t of x when the row is wider than one chunk: decoded
 * chunk by chunk (ROW_CHUNK is a multiple of 8, so the lanes see the same
 * elements as one pass and only the last chunk, still in buf at the end,
 * has a tail). */
static inline __attribute__((always_inline)) float
dot_chunked(const mq_job *j, const unsigned char *wr, const float *xr,
	    float *buf, decode_fn decode, int fused)
{
	v8 acc = {0};
	uint32_t k = 0, m = 0;
	for (;; k += ROW_CHUNK) {
		m = j->in - k < ROW_CHUNK ? j->in - k : ROW_CHUNK;
		decode(j->type,
		       wr + (uint64_t)k / j->block_elements * j->block_bytes,
		       buf, m);
		lanes(&acc, buf, xr + k, m & ~7u, fused);
		if (k + m == j->in)
			break;
	}
	return finish(&acc, buf, xr + k, m & ~7u, m, fused);
}

/* Rows o0..o1 of the job with one decoder. */
static inline __attribute__((always_inline)) void
rows(const mq_job *j, uint32_t o0, uint32_t o1, decode_fn decode,
     int fused)
{
	float buf[ROW_CHUNK];
	const uint32_t in = j->in, in8 = in & ~7u;
	for (uint32_t o = o0; o < o1; o++) {
		const unsigned char *wr = j->w + (uint64_t)o * j->row_bytes;
		if (in <= ROW_CHUNK)
			decode(j->type, wr, buf, in);
		for (uint32_t t = 0; t < j->n; t++) {
			const float *xr = j->x + (uint64_t)t * in;
			float s;
			if (in <= ROW_CHUNK) {
				v8 acc = {0};
				lanes(&acc, buf, xr, in8, fused);
				s = finish(&acc, buf, xr, in8, in, fused);
			} else {
				s = dot_chunked(j, wr, xr, buf, decode, fused);
			}
			if (j->bias)
				s += j->bias[o];
			j->y[(uint64_t)t * j->out + o] = s;
		}
	}
}

static void task_generic(void *arg, uint32_t task)
{
	const mq_job *j = arg;
	uint32_t o0 = task * j->rows_per_task, o1 = o0 + j->rows_per_task;
	rows(j, o0, o1 < j->out ? o1 : j->out, decode_exact, 0);
}

#if defined(__x86_64__)
/* The AVX2 decoders (kernels_quant_avx2.c): the same bits as
 * decode_exact, faster for the types they cover. */
void strata__quant_decode_avx2(strata_block_type t, const unsigned char *src,
			       float *dst, uint32_t elements);
bool strata__quant_avx2_usable(void);

__attribute__((target("avx2,fma"), flatten)) static void
task_avx2(void *arg, uint32_t task)
{
	const mq_job *j = arg;
	uint32_t o0 = task * j->rows_per_task, o1 = o0 + j->rows_per_task;
	rows(j, o0, o1 < j->out ? o1 : j->out, strata__quant_decode_avx2, 1);
}
#endif

static strata__pool_fn pick_task(void)
{
#if defined(__x86_64__)
	if (strata__quant_avx2_usable())
		return task_avx2;
#endif
	return task_generic;
}

/* ------------------------------------------------------------------------ */

strata_status strata__cpu_matmul_stored(void *ctx, float *y, const float *x,
					const void *w, strata_block_type type,
					const float *bias, uint32_t n,
					uint32_t in, uint32_t out,
					strata_error *err)
{
	(void)err;
	strata__pool *p = ctx;
	mq_job j = {.y = y, .x = x, .bias = bias, .w = w, .type = type,
		    .block_elements = strata_block_elements(type),
		    .block_bytes = strata_block_bytes(type), .n = n, .in = in,
		    .out = out};
	j.row_bytes = (uint64_t)in / j.block_elements * j.block_bytes;
	uint64_t threads = strata__pool_threads(p);
	uint64_t rpt = (out + 4 * threads - 1) / (4 * threads);
	if (rpt < 4)
		rpt = 4;
	if ((uint64_t)n * in * out < 65536)
		rpt = out;
	j.rows_per_task = (uint32_t)rpt;
	strata__pool_run(p, pick_task(), &j,
			 (uint32_t)((out + rpt - 1) / rpt));
	return STRATA_OK;
}
