/* qdot_rows.h - the loops the SIMD row kernels of the activation-quantized
 * decode product share: weight rows four at a time (a task's last one to
 * three together), x's rows four at a time, the chunks of a row with the
 * software prefetch and the padding of a partial last chunk, one copy of
 * it all per block type (layer: backend).
 *
 * Included once by qdot_avx2.c and qdot_vnni.c, each defining first
 * QDOT_TARGET (its __attribute__((target))), QDOT_ROWS (the name of its
 * strata__qdot_rows_* function) and, for its vectors:
 *   qacc          the lane sums of one output
 *   xchunk        a chunk of one row of x as the kernel takes it
 *   wchunk        a chunk of one weight row: its codes and factors
 *   acc_zero()    a qacc of zeros; acc_sum(qacc) its sum
 *   x_chunk(j, c, ch, off, tr, *x)   chunk ch of x row c
 *   w_chunk(t, p, bb, tr, *w)        the chunk of whole blocks at p
 *   chunk_row(*w, *x, off, tr, *acc) acc += that chunk's product
 * where tr (a constant: more than one row of x) lets a kernel lay out a
 * chunk so as to spend more on each weight row and x row and less on
 * each pair of them.
 * The inner functions are QDOT_INLINE (qdot.h), so each type's loops are one
 * straight piece of code without a switch per chunk.
 *
 * Up to four rows of x (decode, a batch of up to four) go otherwise: x's
 * chunks are prepared once a task into the thread's scratch (j->xs), then
 * the weight rows are read one after another, each from its start to its
 * end, so a task reads its rows as one forward stream that the hardware
 * prefetchers follow. Four weight rows in step read four streams a row
 * apart, each only a row long (Q4_K at 4096: 36 cache lines), and from
 * memory that ran at 0.2-0.45 of the read rate where the kernel alone runs
 * faster than memory (bench_quant --kernels); one stream keeps up with
 * memory. x costs less that way: its chunks are prepared once a task, not
 * once per four weight rows, and stay in L1 or L2 (7 KiB a row of x at
 * 4096). Five rows of x or more keep the four weight rows in step, which
 * read x's chunks a quarter as often. The sums are the same as in step, in
 * the same order, so the outputs are the same bits. */
#ifndef STRATA_BACKEND_CPU_QDOT_ROWS_H
#define STRATA_BACKEND_CPU_QDOT_ROWS_H

#include <string.h>

#include "backend/cpu/qdot.h"

/* The largest block of the 32-element types (Q8_0). */
#define QDOT_BLOCK32_MAX 34u

/* Outputs o .. o + R of x rows c0 .. c0 + C over the whole row. A partial
 * last chunk (the 32-element types) is copied first into zeroed blocks,
 * whose factors are 0, so that no load reads past the row. */
QDOT_TARGET static QDOT_INLINE void
rows_simd(const strata__qjob *j, uint32_t o, int R, uint32_t c0, int C)
{
	const uint32_t bb = j->block_bytes;
	qacc acc[QDOT_W][QDOT_W];
	unsigned char pad[8 * QDOT_BLOCK32_MAX];
	const unsigned char *w0 = j->w + (uint64_t)o * j->row_bytes;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = acc_zero();
	for (uint32_t k = 0, ch = 0; k < j->in; k += QDOT_CHUNK, ch++) {
		uint32_t m = j->in - k < QDOT_CHUNK ? j->in - k : QDOT_CHUNK;
		uint64_t at = (uint64_t)ch * j->chunk_bytes;
		xchunk x[QDOT_W];
		for (int c = 0; c < C; c++)
			x_chunk(j, c0 + c, ch, j->off, C > 1, &x[c]);
		for (int r = 0; r < R; r++) {
			const unsigned char *p = w0 + r * j->row_bytes + at;
			if (j->prefetch)
				for (uint32_t b = 0; b < j->chunk_bytes; b += 64)
					__builtin_prefetch(p + j->prefetch + b,
							   0, 3);
			if (m < QDOT_CHUNK) {
				memset(pad, 0, sizeof pad);
				memcpy(pad, p, m / 32 * bb);
				p = pad;
			}
			wchunk w;
			w_chunk(j->type, p, bb, C > 1, &w);
			for (int c = 0; c < C; c++)
				chunk_row(&w, &x[c], j->off, C > 1,
					  &acc[r][c]);
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float s = acc_sum(acc[r][c]);
			if (j->bias)
				s += j->bias[o + r];
			j->y[(uint64_t)(c0 + c) * j->out + o + r] = s;
		}
}

/* Output o of x's C rows over the whole weight row, against x's prepared
 * chunks (xs: chunk ch of row c at c * chunks + ch), the row read forward
 * chunk by chunk. */
QDOT_TARGET static QDOT_INLINE void
row_stream(const strata__qjob *j, uint32_t o, const xchunk *xs,
	   uint32_t chunks, int C)
{
	const uint32_t bb = j->block_bytes;
	unsigned char pad[8 * QDOT_BLOCK32_MAX];
	const unsigned char *p = j->w + (uint64_t)o * j->row_bytes;
	qacc acc[QDOT_W];
	for (int c = 0; c < C; c++)
		acc[c] = acc_zero();
	for (uint32_t k = 0, ch = 0; k < j->in;
	     k += QDOT_CHUNK, ch++, p += j->chunk_bytes) {
		const unsigned char *q = p;
		if (j->prefetch)
			for (uint32_t b = 0; b < j->chunk_bytes; b += 64)
				__builtin_prefetch(p + j->prefetch + b, 0, 3);
		if (j->in - k < QDOT_CHUNK) {
			memset(pad, 0, sizeof pad);
			memcpy(pad, p, (j->in - k) / 32 * bb);
			q = pad;
		}
		wchunk w;
		w_chunk(j->type, q, bb, C > 1, &w);
		for (int c = 0; c < C; c++)
			chunk_row(&w, &xs[(uint64_t)c * chunks + ch], j->off,
				  C > 1, &acc[c]);
	}
	for (int c = 0; c < C; c++) {
		float s = acc_sum(acc[c]);
		if (j->bias)
			s += j->bias[o];
		j->y[(uint64_t)c * j->out + o] = s;
	}
}

/* Outputs [o0, o1) of x's C rows (C <= QDOT_W, all of them): x's chunks
 * prepared into j->xs, then the weight rows one by one. */
QDOT_TARGET static QDOT_INLINE void
rows_stream(const strata__qjob *j, uint32_t o0, uint32_t o1, int C)
{
	_Static_assert(sizeof(xchunk) <= QDOT_XCHUNK_BYTES,
		       "QDOT_XCHUNK_BYTES holds an xchunk");
	xchunk *xs = j->xs;
	uint32_t chunks = (j->in + QDOT_CHUNK - 1) / QDOT_CHUNK;
	for (int c = 0; c < C; c++)
		for (uint32_t ch = 0; ch < chunks; ch++)
			x_chunk(j, (uint32_t)c, ch, j->off, C > 1,
				&xs[(uint64_t)c * chunks + ch]);
	for (uint32_t o = o0; o < o1; o++)
		row_stream(j, o, xs, chunks, C);
}

/* Every row of x, four at a time, for R weight rows. */
QDOT_TARGET static QDOT_INLINE void
group_simd(const strata__qjob *j, uint32_t o, int R)
{
	uint32_t c0 = 0;
	for (; c0 + 4 <= j->n; c0 += 4)
		rows_simd(j, o, R, c0, 4);
	switch (j->n - c0) {
	case 3: rows_simd(j, o, R, c0, 3); return;
	case 2: rows_simd(j, o, R, c0, 2); return;
	case 1: rows_simd(j, o, R, c0, 1); return;
	default: return;
	}
}

/* Outputs [o0, o1) with the type a constant t. */
QDOT_TARGET static QDOT_INLINE void
rows_typed(const strata__qjob *j, uint32_t o0, uint32_t o1, strata_block_type t)
{
	strata__qjob jt = *j;
	jt.type = t;
	if (j->xs) { /* n <= QDOT_W */
		switch (j->n) {
		case 1: rows_stream(&jt, o0, o1, 1); return;
		case 2: rows_stream(&jt, o0, o1, 2); return;
		case 3: rows_stream(&jt, o0, o1, 3); return;
		default: rows_stream(&jt, o0, o1, 4); return;
		}
	}
	uint32_t o = o0;
	for (; o + QDOT_W <= o1; o += QDOT_W)
		group_simd(&jt, o, QDOT_W);
	switch (o1 - o) {
	case 3: group_simd(&jt, o, 3); return;
	case 2: group_simd(&jt, o, 2); return;
	case 1: group_simd(&jt, o, 1); return;
	default: return;
	}
}

#define QDOT_ROWS_CASE(T)                                                      \
	case STRATA_BLOCK_##T:                                                 \
		rows_typed(j, o0, o1, STRATA_BLOCK_##T);                       \
		return;

QDOT_TARGET void QDOT_ROWS(const strata__qjob *j, uint32_t o0, uint32_t o1)
{
	switch (j->type) {
	QDOT_ROWS_CASE(Q8_0) QDOT_ROWS_CASE(Q4_0) QDOT_ROWS_CASE(Q4_1)
	QDOT_ROWS_CASE(Q5_0) QDOT_ROWS_CASE(Q5_1) QDOT_ROWS_CASE(IQ4_NL)
	QDOT_ROWS_CASE(Q2_K) QDOT_ROWS_CASE(Q3_K) QDOT_ROWS_CASE(Q4_K)
	QDOT_ROWS_CASE(Q5_K) QDOT_ROWS_CASE(Q6_K) QDOT_ROWS_CASE(IQ4_XS)
	default:
		strata__qdot_rows_c(j, o0, o1);
		return;
	}
}

#endif
