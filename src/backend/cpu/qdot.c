/* qdot.c - the activation-quantized decode product's portable half: x
 * quantized to 8 bits, every block type's chunk unpacked into codes and
 * factors, and the reference row kernel of the integer scheme (qdot.h)
 * that the AVX2 and AVX-512 VNNI kernels reproduce (layer: backend).
 *
 * Why: decoding every weight to f32 and multiplying by f32 x costs about
 * as many instructions per weight as the weight has bits, so the block
 * types are compute-bound on the decode shape (bench_quant --kernels);
 * integer dot products of 8-bit x against the stored codes take one
 * instruction per 64 weights (vpdpbusd), as llama.cpp computes.
 * Accuracy: the product is w . x^ (x^ = q dx, min terms included: they
 * take the sums of x^), and each x^ is within dx / 2 of x (dx = max|x| /
 * 127 over its 16), so an output moves by at most the sum over 16s of
 * dx / 2 times the sum of |w|, plus f32 rounding.
 * test_cpu_qdot checks that bound, and test_quant_logits that the model's
 * logits stay within llama.cpp's own distance from the exact ones. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels_internal.h"
#include "backend/cpu/qdot.h"

/* ------------------------------------------------------------------------ */
/* Types                                                                    */
/* ------------------------------------------------------------------------ */

static const int8_t iq4_levels[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10,
	1,    13,   25,  38,  53,  69,  89,  113,
};

/* Slot p of a chunk holds the type's 32-element group order[p]. */
static const uint8_t order_natural[8] = {0, 1, 2, 3, 4, 5, 6, 7};
static const uint8_t order_q4k[8] = {0, 2, 1, 3, 4, 6, 5, 7};

static const uint8_t *slot_order(strata_block_type t)
{
	return t == STRATA_BLOCK_Q4_K || t == STRATA_BLOCK_Q5_K
		       ? order_q4k : order_natural;
}

bool strata__qdot_has(strata_block_type t)
{
	switch (t) {
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_Q4_0: case STRATA_BLOCK_Q4_1:
	case STRATA_BLOCK_Q5_0: case STRATA_BLOCK_Q5_1:
	case STRATA_BLOCK_IQ4_NL: case STRATA_BLOCK_Q2_K:
	case STRATA_BLOCK_Q3_K: case STRATA_BLOCK_Q4_K: case STRATA_BLOCK_Q5_K:
	case STRATA_BLOCK_Q6_K: case STRATA_BLOCK_IQ4_XS:
		return true;
	default:
		return false;
	}
}

int strata__qdot_offset(strata_block_type t)
{
	switch (t) {
	case STRATA_BLOCK_Q8_0: case STRATA_BLOCK_IQ4_NL:
	case STRATA_BLOCK_IQ4_XS:
		return 128; /* signed values, biased to unsigned codes */
	case STRATA_BLOCK_Q4_0: return 8;
	case STRATA_BLOCK_Q5_0: return 16;
	case STRATA_BLOCK_Q3_K: return 4;
	case STRATA_BLOCK_Q6_K: return 32;
	default: return 0;
	}
}

/* The little-endian IEEE half at p, exactly (subnormals, infinities and
 * NaN included). */
static float f16(const unsigned char *p)
{
	uint32_t h = (uint32_t)(p[0] | (p[1] << 8));
	uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023;
	uint32_t bits;
	float v;
	if (e == 0) {
		v = (float)m * 0x1p-24f; /* zero or subnormal: exact */
		return sign ? -v : v;
	}
	bits = sign | (e == 31 ? 0x7f800000u : (e + 112) << 23) | m << 13;
	memcpy(&v, &bits, sizeof v);
	return v;
}

/* ------------------------------------------------------------------------ */
/* x                                                                        */
/* ------------------------------------------------------------------------ */

static uint32_t groups_of(uint32_t in)
{
	return (in + QDOT_CHUNK - 1) / QDOT_CHUNK * (QDOT_CHUNK / 32);
}

uint64_t strata__qdot_xs_bytes(uint32_t n, uint32_t in)
{
	return (uint64_t)n * (groups_of(in) / (QDOT_CHUNK / 32)) *
	       QDOT_XCHUNK_BYTES;
}

uint64_t strata__qdot_x_bytes(uint32_t n, uint32_t in)
{
	return (uint64_t)n * groups_of(in) * (32 + 4 * sizeof(float));
}

/* One 16-element run (m <= 16 values, zeros past them) of x: its codes,
 * factor, and dx times the codes' sum, so the min terms multiply the same
 * x^ as the codes and the whole product is w . x^: x's rounding errors
 * then meet w's own values, centred on zero, not its codes' (all of one
 * sign), and partly cancel. A factor per 16 rather than llama.cpp's per 32
 * (per 256 for the K-quants) costs no instruction in the kernels (the
 * weights' factors are per 16 already) and puts the logits of
 * tests/data/quant closer to the exact ones. */
static void quantize16(const float *x, uint32_t m, int8_t *q, float *d,
		       float *s)
{
	float v[16], amax = 0;
	bool bad = false;
	for (uint32_t i = 0; i < 16; i++) {
		v[i] = i < m ? x[i] : 0;
		float a = fabsf(v[i]);
		bad |= !(a <= FLT_MAX); /* NaN or infinite */
		amax = a > amax ? a : amax;
	}
	float dx = amax / 127;
	if (!(dx > 0))
		dx = 1; /* every v is 0 (or tiny past f32's reach): codes 0 */
	int32_t sum = 0;
	for (uint32_t i = 0; i < 16; i++) {
		/* |v / dx| <= 127 (to rounding; a quotient, so no reciprocal
		 * overflows on tiny groups): adding and taking away 1.5 * 2^23
		 * rounds it to the nearest integer, ties to even */
		float r = v[i] / dx;
		r = r > 127 ? 127 : r < -127 ? -127 : r;
		r = (r + 12582912.0f) - 12582912.0f;
		q[i] = bad ? 0 : (int8_t)r;
		sum += q[i];
	}
	*d = bad ? NAN : amax / 127; /* a non-finite x makes its outputs NaN */
	*s = *d * (float)sum;
}

void strata__qdot_quantize_x(strata_block_type t, const float *x, uint32_t n,
			     uint32_t in, void *buf, strata__qx *qx)
{
	uint32_t g = groups_of(in);
	qx->groups = g;
	qx->q = buf;
	qx->d = (float *)(qx->q + (uint64_t)n * g * 32);
	qx->s = qx->d + (uint64_t)n * g * 2;
	const uint8_t *order = slot_order(t);
	bool vec = false;
#if defined(__x86_64__)
	vec = strata__cpu_isa_max() >= 1 && strata__quant_avx2_usable();
#endif
	for (uint32_t c = 0; c < n; c++)
		for (uint32_t p = 0; p < 2 * g; p++) {
			uint64_t e = (uint64_t)p / 16 * QDOT_CHUNK +
				     32u * order[p / 2 % 8] + 16 * (p % 2);
			uint32_t m = e >= in ? 0 : in - e < 16 ? in - (uint32_t)e : 16;
			uint64_t at = (uint64_t)c * 2 * g + p;
			const float *xs = x + (uint64_t)c * in + (m ? e : 0);
#if defined(__x86_64__)
			if (vec && m == 16) {
				strata__qdot_quantize16_avx2(xs, qx->q + at * 16,
							     qx->d + at,
							     qx->s + at);
				continue;
			}
#endif
			quantize16(xs, m, qx->q + at * 16, qx->d + at,
				   qx->s + at);
		}
}

/* ------------------------------------------------------------------------ */
/* Weights: codes and factors of a chunk, in natural order, then slotted    */
/* ------------------------------------------------------------------------ */

static int nibble32(const unsigned char *qs, int j)
{
	return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
}

static int bit32(const unsigned char *qh, int j)
{
	return (qh[j >> 3] >> (j & 7)) & 1;
}

static void q4k_scale_min(const unsigned char *s, int j, int *sc, int *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
		*m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
	}
}

static int q3k_scale(const unsigned char *s, int i)
{
	int lo = (s[i % 8] >> (4 * (i / 8))) & 0x0f;
	int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
	return (lo | hi << 4) - 32;
}

/* Code of element e (< 32) of a 32-element block b. */
static int code32(strata_block_type t, const unsigned char *b, int e)
{
	switch (t) {
	case STRATA_BLOCK_Q8_0: return (int8_t)b[2 + e] + 128;
	case STRATA_BLOCK_Q4_0: return nibble32(b + 2, e);
	case STRATA_BLOCK_Q4_1: return nibble32(b + 4, e);
	case STRATA_BLOCK_Q5_0: return nibble32(b + 6, e) | bit32(b + 2, e) << 4;
	case STRATA_BLOCK_Q5_1: return nibble32(b + 8, e) | bit32(b + 4, e) << 4;
	default: return iq4_levels[nibble32(b + 2, e)] + 128; /* IQ4_NL */
	}
}

/* Code of element e (< 256) of a super-block b. */
static int code256(strata_block_type t, const unsigned char *b, int e)
{
	int j = e % 128 / 32, l = e % 32, r = e % 128;
	switch (t) {
	case STRATA_BLOCK_Q2_K:
		return (b[16 + 32 * (e / 128) + l] >> (2 * j)) & 3;
	case STRATA_BLOCK_Q3_K:
		return ((b[32 + 32 * (e / 128) + l] >> (2 * j)) & 3) |
		       ((b[l] >> (e / 32)) & 1) << 2;
	case STRATA_BLOCK_Q4_K:
		return (b[16 + 32 * (e / 64) + l] >> (4 * (e % 64 / 32))) & 15;
	case STRATA_BLOCK_Q5_K:
		return ((b[48 + 32 * (e / 64) + l] >> (4 * (e % 64 / 32))) & 15) |
		       ((b[16 + l] >> (e / 32)) & 1) << 4;
	case STRATA_BLOCK_Q6_K:
		return ((b[64 * (e / 128) + r % 64] >> (4 * (r / 64))) & 15) |
		       ((b[128 + 32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3)
			       << 4;
	default: /* IQ4_XS */
		return iq4_levels[(b[8 + 16 * (e / 32) + l % 16] >> (4 * (l / 16))) &
				  15] + 128;
	}
}

void strata__qdot_codes(strata_block_type t, const unsigned char *p,
			uint32_t elements, strata__qw *w)
{
	const uint8_t *order = slot_order(t);
	uint32_t be = strata_block_elements(t), bb = strata_block_bytes(t);
	for (uint32_t s = 0; s < 8; s++) {
		uint32_t e0 = 32u * order[s];
		for (uint32_t i = 0; i < 32; i++) {
			uint32_t e = e0 + i;
			int u = 0;
			if (e < elements && be == 32)
				u = code32(t, p + e / 32 * bb, (int)(e % 32));
			else if (e < elements)
				u = code256(t, p, (int)e);
			w->u[32 * s + i] = (uint8_t)u;
		}
	}
}

/* Factor and min term of each 16 elements of a 32-element block. */
static void factors32(strata_block_type t, const unsigned char *b, float *ws,
		      float *mw)
{
	float d = f16(b), m = 0;
	if (t == STRATA_BLOCK_Q4_1 || t == STRATA_BLOCK_Q5_1)
		m = f16(b + 2);
	ws[0] = ws[1] = d;
	mw[0] = mw[1] = m;
}

/* The same for a super-block: natural order, 16 each. */
static void factors256(strata_block_type t, const unsigned char *b, float *ws,
		       float *mw)
{
	for (int k = 0; k < 16; k++)
		mw[k] = 0;
	if (t == STRATA_BLOCK_Q2_K) {
		float d = f16(b + 80), dmin = f16(b + 82);
		for (int k = 0; k < 16; k++) {
			ws[k] = d * (float)(b[k] & 15);
			mw[k] = -(dmin * (float)(b[k] >> 4));
		}
	} else if (t == STRATA_BLOCK_Q3_K) {
		float d = f16(b + 108);
		for (int k = 0; k < 16; k++)
			ws[k] = d * (float)q3k_scale(b + 96, k);
	} else if (t == STRATA_BLOCK_Q6_K) {
		float d = f16(b + 208);
		for (int k = 0; k < 16; k++)
			ws[k] = d * (float)(int8_t)b[192 + k];
	} else if (t == STRATA_BLOCK_IQ4_XS) {
		float d = f16(b);
		unsigned sh = (unsigned)(b[2] | (b[3] << 8));
		for (int ib = 0; ib < 8; ib++) {
			int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) |
				 (int)((sh >> (2 * ib)) & 3) << 4;
			ws[2 * ib] = ws[2 * ib + 1] = d * (float)(ls - 32);
		}
	} else { /* Q4_K, Q5_K */
		float d = f16(b), dmin = f16(b + 2);
		for (int j = 0; j < 8; j++) {
			int sc, m;
			q4k_scale_min(b + 4, j, &sc, &m);
			ws[2 * j] = ws[2 * j + 1] = d * (float)sc;
			mw[2 * j] = mw[2 * j + 1] = -(dmin * (float)m);
		}
	}
}

void strata__qdot_factors(strata_block_type t, const unsigned char *p,
			  uint32_t elements, strata__qw *w)
{
	float ws[16] = {0}, mw[16] = {0};
	uint32_t be = strata_block_elements(t), bb = strata_block_bytes(t);
	if (be == 32)
		for (uint32_t b = 0; b < elements / 32; b++)
			factors32(t, p + b * bb, ws + 2 * b, mw + 2 * b);
	else if (elements)
		factors256(t, p, ws, mw);
	const uint8_t *order = slot_order(t);
	for (int s = 0; s < 8; s++)
		for (int h = 0; h < 2; h++) {
			w->ws[2 * s + h] = ws[2 * order[s] + h];
			w->mw[2 * s + h] = mw[2 * order[s] + h];
		}
}

/* ------------------------------------------------------------------------ */
/* The reference kernel                                                     */
/* ------------------------------------------------------------------------ */

/* The scheme's sum for one weight row chunk against x row c's chunk:
 * integers per 16, then f32. */
static float chunk_dot(const strata__qw *w, const int8_t *q, const float *d,
		       const float *s, int off)
{
	float acc = 0, mins = 0;
	for (int k = 0; k < 16; k++) {
		int32_t dot = 0;
		for (int i = 0; i < 16; i++)
			dot += ((int32_t)w->u[16 * k + i] - off) * q[16 * k + i];
		acc += w->ws[k] * d[k] * (float)dot;
		mins += w->mw[k] * s[k];
	}
	return acc + mins;
}

void strata__qdot_rows_c(const strata__qjob *j, uint32_t o0, uint32_t o1)
{
	strata__qw w;
	const uint32_t g = j->x.groups;
	for (uint32_t o = o0; o < o1; o++) {
		const unsigned char *row = j->w + (uint64_t)o * j->row_bytes;
		for (uint32_t c = 0; c < j->n; c++) {
			float sum = 0;
			for (uint32_t k = 0, ch = 0; k < j->in;
			     k += QDOT_CHUNK, ch++) {
				uint32_t m = j->in - k < QDOT_CHUNK ? j->in - k
								    : QDOT_CHUNK;
				const unsigned char *p =
					row + (uint64_t)ch * j->chunk_bytes;
				strata__qdot_codes(j->type, p, m, &w);
				strata__qdot_factors(j->type, p, m, &w);
				uint64_t at = (uint64_t)c * g + 8u * ch;
				sum += chunk_dot(&w, j->x.q + at * 32,
						 j->x.d + 2 * at, j->x.s + 2 * at,
						 j->off);
			}
			if (j->bias)
				sum += j->bias[o];
			j->y[(uint64_t)c * j->out + o] = sum;
		}
	}
}
