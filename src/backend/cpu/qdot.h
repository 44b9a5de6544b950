/* qdot.h - what the activation-quantized decode product shares between its
 * files: the 8-bit x, the portable unpacking of a chunk into codes and
 * factors (the SIMD kernels keep theirs in registers: qdot_codes.h,
 * qdot_rows.h), and each instruction set's row kernel (layer: backend).
 *
 * The scheme (qdot.c says why and what it costs in accuracy): x is
 * quantized once per product, per 16 elements, to q = round(x / dx) with
 * dx = max|x| / 127 (an f32 factor), keeping also s = dx times the sum of
 * each 16 codes. A weight's value is ws * (u - off) + mw, with u an unsigned 8-bit
 * code, ws a factor per 16 elements, off a constant of its type and mw a
 * term per 16 elements (0 for the types without a min); so
 *     w . x = sum over 16s of ws dx (sum u q - off sum q) + sum of mw s
 * where the first sum is exact in integers. Codes are laid out in the
 * type's slot order: the 32-element groups of a 256-element chunk in the
 * order its unpacking yields them (Q4_K and Q5_K give groups 0 2 1 3 4 6 5
 * 7, every other type 0 .. 7), and x is quantized in the same order, so
 * both are read contiguously. Not a public API. */
#ifndef STRATA_BACKEND_CPU_QDOT_H
#define STRATA_BACKEND_CPU_QDOT_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/base.h"

/* The SIMD kernels' inner functions: inlined into one copy per type and
 * shape when optimising (their loops and switches on constants fold
 * away); left as calls at -O0 and under ASan (these files are -O3 in
 * every build type), where forcing it makes 192 instrumented copies of
 * every kernel a file: the ASan build of qdot_vnni.c took over 18 minutes
 * on two loaded cores, and the inlining is for speed, not checking. */
#if defined(__SANITIZE_ADDRESS__)
#define QDOT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QDOT_SANITIZED 1
#endif
#endif
#if defined(__OPTIMIZE__) && !defined(QDOT_SANITIZED)
#define QDOT_INLINE inline __attribute__((always_inline))
#else
#define QDOT_INLINE inline
#endif

/* Elements of a chunk: one super-block, eight 32-element blocks. */
#define QDOT_CHUNK 256u
/* Weight rows a kernel call takes together (x read once for them). */
#define QDOT_W 4
/* Bytes of scratch a SIMD kernel takes per chunk of x on one row of x
 * (its x_chunk of the chunk, prepared once a task): at least the size of
 * either kernel's xchunk (448), a multiple of 64. */
#define QDOT_XCHUNK_BYTES 512u

/* One weight row's chunk, unpacked by the portable code (a partial last
 * chunk is zero past its elements, so it adds nothing). */
typedef struct strata__qw {
	uint8_t u[QDOT_CHUNK] __attribute__((aligned(64))); /* slot order */
	float ws[QDOT_CHUNK / 16]; /* factor of each 16 codes, slot order */
	float mw[QDOT_CHUNK / 16]; /* min term of each 16, slot order */
} strata__qw;

/* x of one product, quantized: n rows of `groups` 32-element groups (the
 * row padded to whole chunks with zeros), each row's groups in slot order. */
typedef struct strata__qx {
	int8_t *q;  /* (n, groups * 32) */
	float *d;   /* (n, 2 groups): dx of each 16 */
	float *s;   /* (n, 2 groups): dx * sum of each 16 codes */
	uint32_t groups;
} strata__qx;

/* A decode product on quantized x: rows [o0, o1) of w for every row of x. */
typedef struct strata__qjob {
	float *y;
	const float *bias;
	const unsigned char *w;
	strata_block_type type;
	uint64_t row_bytes;
	uint32_t block_bytes, chunk_bytes; /* stored bytes of a block, of a
					    * whole chunk */
	uint32_t n, in, out, rows_per_task;
	uint32_t prefetch; /* bytes ahead of the chunk being read */
	int off;	   /* the type's code offset */
	strata__qx x;
	/* At most QDOT_W rows of x: the running thread's scratch of
	 * strata__qdot_xs_bytes (64-byte aligned), where a SIMD kernel
	 * prepares x's chunks once and then streams its weight rows one after
	 * another; NULL: the rows four at a time (qdot_rows.h says why).
	 * pool: whose scratch the task sets xs to (NULL: none). */
	void *xs;
	struct strata__pool *pool;
} strata__qjob;

/* Whether type t has the integer scheme; its code offset. */
bool strata__qdot_has(strata_block_type t);
int strata__qdot_offset(strata_block_type t);
/* Bytes of the scratch (strata__qjob.xs) a product of n (<= QDOT_W) rows
 * of `in` elements takes. */
uint64_t strata__qdot_xs_bytes(uint32_t n, uint32_t in);
/* Bytes strata__qdot_quantize_x lays out for n rows of `in` elements. */
uint64_t strata__qdot_x_bytes(uint32_t n, uint32_t in);
/* Quantizes x (n, in) for type t into buf (strata__qdot_x_bytes of it,
 * 64-byte aligned), filling *qx with pointers into buf. */
void strata__qdot_quantize_x(strata_block_type t, const float *x, uint32_t n,
			     uint32_t in, void *buf, strata__qx *qx);
/* Factors (ws, mw) of the chunk of `elements` elements at p (its first
 * block); the portable code unpacking (u) beside it. */
void strata__qdot_factors(strata_block_type t, const unsigned char *p,
			  uint32_t elements, strata__qw *w);
void strata__qdot_codes(strata_block_type t, const unsigned char *p,
			uint32_t elements, strata__qw *w);

/* A row kernel (below); the one the decode product takes on this processor
 * within the ISA limit (kernels_quant.c), so that every caller of it gets
 * the same bits. */
typedef void (*strata__qdot_rows_fn)(const strata__qjob *j, uint32_t o0,
				     uint32_t o1);
strata__qdot_rows_fn strata__qdot_pick_rows(void);
/* *j for y (n, out) = x (n, in) . w^T (+ bias) on w of `type` as the
 * decode product reads it (prefetch distance included); x, rows_per_task,
 * xs and pool left zero. */
void strata__qdot_setup(strata__qjob *j, float *y, const void *w,
			strata_block_type type, const float *bias, uint32_t n,
			uint32_t in, uint32_t out);

/* Row kernels: outputs [o0, o1) of every row of x. The portable one is the
 * reference of the scheme; the others give its integers exactly and its
 * f32 sums in their own order. */
void strata__qdot_rows_c(const strata__qjob *j, uint32_t o0, uint32_t o1);
#if defined(__x86_64__)
void strata__qdot_rows_avx2(const strata__qjob *j, uint32_t o0, uint32_t o1);
void strata__qdot_rows_vnni(const strata__qjob *j, uint32_t o0, uint32_t o1);
bool strata__qdot_vnni_usable(void);
/* 16 values of x quantized (qdot.c's quantize16, bit for bit). */
void strata__qdot_quantize16_avx2(const float *x, int8_t *q, float *d,
				  float *s);
#endif

#endif
