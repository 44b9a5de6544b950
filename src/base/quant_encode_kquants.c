/* quant_encode_kquants.c - encoders of ggml's 256-element super-block
 * types Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS, written from the block
 * definitions (layer: base).
 *
 * Two stages, for every type:
 *  1. each sub-block gets its own best float scale (and min) from the
 *     searches of quant_fit.c;
 *  2. the super-block factor (and min factor) is the largest sub-block
 *     scale over the largest integer scale code; each sub-block's integer
 *     scale is its nearest code or one either side, whichever decodes with
 *     the least squared error once its values are re-coded; then the
 *     factors are re-solved by least squares for those integers and the
 *     round repeats. The round of least error is kept.
 * Errors are measured with the decoder's own arithmetic (f16 factors, one
 * product per sub-block factor, one per element; contraction off in
 * CMake), so the block kept is the one that decodes best. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/quant_internal.h"

#define ROUNDS 3 /* factor re-solves per super-block */

/* ------------------------------------------------------------------------ */
/* Affine types: x ~ (d * sc) * q - (dmin * m)                              */
/* ------------------------------------------------------------------------ */

typedef struct affine_kind {
	int subs, len, top, smax; /* sub-blocks, their length, code, scale */
} affine_kind;

typedef struct affine_block {
	float d, dmin;	   /* as stored (f16 values) */
	uint8_t sc[16], m[16];
	uint8_t q[256];
	float err;
} affine_block;

/* Chooses every sub-block's integer scale and min near s/d, m/dmin (one
 * step either way) and its codes, for factors d and dmin as stored. */
static void affine_integers(const float *x, const affine_kind *k,
			    const float *s, const float *m, affine_block *b)
{
	b->err = 0.0f;
	for (int i = 0; i < k->subs; i++) {
		const float *xs = x + i * k->len;
		int bs = strata__search_round(b->d != 0.0f ? s[i] / b->d : 0.0f,
					     0, k->smax);
		int bm = strata__search_round(
			b->dmin != 0.0f ? m[i] / b->dmin : 0.0f, 0, k->smax);
		float best = FLT_MAX;
		uint8_t q[32];
		for (int a = bs - 1; a <= bs + 1; a++)
			for (int c = bm - 1; c <= bm + 1; c++) {
				if (a < 0 || a > k->smax || c < 0 ||
				    c > k->smax)
					continue;
				float dl = b->d * (float)a;
				float ml = b->dmin * (float)c;
				float e = strata__aff_assign(xs, k->len, k->top,
							     dl, ml, q);
				/* the first candidate is always taken, so an
				 * error that overflowed still leaves codes */
				if (e < best || best == FLT_MAX) {
					best = e;
					b->sc[i] = (uint8_t)a;
					b->m[i] = (uint8_t)c;
					memcpy(b->q + i * k->len, q,
					       (size_t)k->len);
				}
			}
		b->err += best;
	}
}

/* Least squares of x ~ d u - dmin v over the block's integers (u = sc q,
 * v = m); false when singular or a factor would be negative. */
static bool affine_resolve(const float *x, const affine_kind *k,
			   const affine_block *b, float *d, float *dmin)
{
	double A = 0, B = 0, C = 0, X1 = 0, X2 = 0;
	for (int i = 0; i < k->subs; i++)
		for (int l = 0; l < k->len; l++) {
			int e = i * k->len + l;
			double u = (double)b->sc[i] * b->q[e], v = b->m[i];
			A += u * u;
			B += u * v;
			C += v * v;
			X1 += x[e] * u;
			X2 += x[e] * v;
		}
	double det = B * B - A * C;
	if (det == 0)
		return false;
	double nd = (B * X2 - C * X1) / det, nm = (A * X2 - B * X1) / det;
	if (!(nd >= 0) || !(nm >= 0))
		return false;
	*d = (float)nd;
	*dmin = (float)nm;
	return true;
}

static void affine_encode(const float *x, const affine_kind *k,
			  affine_block *out)
{
	float s[16], m[16], smax = 0.0f, mmax = 0.0f;
	for (int i = 0; i < k->subs; i++) {
		strata__fit_affine(x + i * k->len, k->len, k->top, &s[i],
				   &m[i]);
		smax = fmaxf(smax, s[i]);
		mmax = fmaxf(mmax, m[i]);
	}
	float d = smax / (float)k->smax, dmin = mmax / (float)k->smax;
	affine_block b;
	out->err = FLT_MAX;
	for (int r = 0; r < ROUNDS; r++) {
		b.d = strata__f16_round(d);
		b.dmin = strata__f16_round(dmin);
		affine_integers(x, k, s, m, &b);
		if (r == 0 || b.err < out->err)
			*out = b;
		if (!affine_resolve(x, k, &b, &d, &dmin))
			break;
	}
}

static const affine_kind Q2K = {16, 16, 3, 15};
static const affine_kind Q4K = {8, 32, 15, 63};
static const affine_kind Q5K = {8, 32, 31, 63};

/* Q2_K (84 bytes): scale | min << 4 per sub-block of 16, the 2-bit codes
 * (element e at byte 32 (e / 128) + e % 32, bits 2 (e % 128 / 32)), f16 d
 * at 80, dmin at 82. */
void strata__qe_q2_k(const float *x, unsigned char *b)
{
	affine_block k;
	affine_encode(x, &Q2K, &k);
	memset(b, 0, 84);
	for (int s = 0; s < 16; s++)
		b[s] = (unsigned char)(k.sc[s] | k.m[s] << 4);
	for (int e = 0; e < 256; e++)
		b[16 + 32 * (e / 128) + e % 32] |=
			(unsigned char)(k.q[e] << (2 * (e % 128 / 32)));
	strata__store_f16(b + 80, k.d);
	strata__store_f16(b + 82, k.dmin);
}

/* The 12 scale bytes of Q4_K/Q5_K (strata__q4k_scale_min's inverse). */
static void pack_scale_min(const uint8_t *sc, const uint8_t *m,
			   unsigned char *s)
{
	for (int j = 0; j < 4; j++) {
		s[j] = (unsigned char)(sc[j] | (sc[j + 4] >> 4) << 6);
		s[j + 4] = (unsigned char)(m[j] | (m[j + 4] >> 4) << 6);
		s[j + 8] = (unsigned char)((sc[j + 4] & 0x0f) |
					   (m[j + 4] & 0x0f) << 4);
	}
}

/* Q4_K (144 bytes): f16 d, f16 dmin, 12 scale bytes, nibbles (sub-block
 * s at bytes 32 (s / 2), nibble s % 2). */
void strata__qe_q4_k(const float *x, unsigned char *b)
{
	affine_block k;
	affine_encode(x, &Q4K, &k);
	memset(b, 0, 144);
	strata__store_f16(b, k.d);
	strata__store_f16(b + 2, k.dmin);
	pack_scale_min(k.sc, k.m, b + 4);
	for (int e = 0; e < 256; e++) {
		int s = e / 32;
		b[16 + 32 * (s / 2) + e % 32] |=
			(unsigned char)((k.q[e] & 0x0f) << (4 * (s % 2)));
	}
}

/* Q5_K (176 bytes): Q4_K's header, 32 bytes of fifth bits (element e's is
 * bit e / 32 of byte e % 32), then the nibbles at 48. */
void strata__qe_q5_k(const float *x, unsigned char *b)
{
	affine_block k;
	affine_encode(x, &Q5K, &k);
	memset(b, 0, 176);
	strata__store_f16(b, k.d);
	strata__store_f16(b + 2, k.dmin);
	pack_scale_min(k.sc, k.m, b + 4);
	for (int e = 0; e < 256; e++) {
		int s = e / 32;
		b[16 + e % 32] |= (unsigned char)(((k.q[e] >> 4) & 1) << s);
		b[48 + 32 * (s / 2) + e % 32] |=
			(unsigned char)((k.q[e] & 0x0f) << (4 * (s % 2)));
	}
}

/* ------------------------------------------------------------------------ */
/* Symmetric types: x ~ (d * sc) * value(q)                                 */
/* ------------------------------------------------------------------------ */

typedef struct sym_kind {
	int subs, len;
	int qlo, qhi;	/* codes (values for Q3_K/Q6_K) */
	int slo, shi;	/* integer scales */
	bool iq4;	/* values are IQ4's levels, codes their indices */
} sym_kind;

typedef struct sym_block {
	float d;
	int8_t sc[16];
	int8_t q[256]; /* values, or level indices for IQ4 */
	float err;
} sym_block;

/* The codes of one sub-block for factor dl and their squared error. */
static float sym_sub_assign(const sym_kind *k, const float *x, float dl,
			    int8_t *q)
{
	if (!k->iq4)
		return strata__sym_assign(x, k->len, k->qlo, k->qhi, dl, q);
	uint8_t u[32];
	float e = strata__iq4_assign(x, k->len, dl, u);
	for (int j = 0; j < k->len; j++)
		q[j] = (int8_t)u[j];
	return e;
}

static void sym_integers(const float *x, const sym_kind *k, const float *s,
			 sym_block *b)
{
	b->err = 0.0f;
	for (int i = 0; i < k->subs; i++) {
		const float *xs = x + i * k->len;
		int base = strata__search_round(
			b->d != 0.0f ? s[i] / b->d : 0.0f, k->slo, k->shi);
		float best = FLT_MAX;
		int8_t q[32];
		for (int a = base - 1; a <= base + 1; a++) {
			if (a < k->slo || a > k->shi)
				continue;
			float e = sym_sub_assign(k, xs, b->d * (float)a, q);
			if (e < best || best == FLT_MAX) {
				best = e;
				b->sc[i] = (int8_t)a;
				memcpy(b->q + i * k->len, q, (size_t)k->len);
			}
		}
		b->err += best;
	}
}

/* Least squares of x ~ d u over the block's integers (u = sc value). */
static bool sym_resolve(const float *x, const sym_kind *k,
			const sym_block *b, float *d)
{
	double uu = 0, xu = 0;
	for (int i = 0; i < k->subs; i++)
		for (int l = 0; l < k->len; l++) {
			int e = i * k->len + l;
			double v = k->iq4 ? strata__iq4nl_levels[b->q[e]]
					  : b->q[e];
			double u = (double)b->sc[i] * v;
			uu += u * u;
			xu += x[e] * u;
		}
	if (uu <= 0)
		return false;
	*d = (float)(xu / uu);
	return true;
}

static void sym_encode(const float *x, const sym_kind *k, sym_block *out)
{
	float s[16], amax = 0.0f, mx = 0.0f;
	for (int i = 0; i < k->subs; i++) {
		const float *xs = x + i * k->len;
		if (k->iq4) {
			uint8_t u[32];
			s[i] = strata__iq4_search(xs, k->len, false, u);
		} else {
			s[i] = strata__fit_symmetric(xs, k->len, k->qlo,
						     k->qhi);
		}
		if (fabsf(s[i]) > amax) {
			amax = fabsf(s[i]);
			mx = s[i];
		}
	}
	/* the largest scale takes the most negative code (one more) */
	float d = mx / (float)k->slo;
	sym_block b;
	out->err = FLT_MAX;
	for (int r = 0; r < ROUNDS; r++) {
		b.d = strata__f16_round(d);
		sym_integers(x, k, s, &b);
		if (r == 0 || b.err < out->err)
			*out = b;
		if (!sym_resolve(x, k, &b, &d))
			break;
	}
}

static const sym_kind Q3K = {16, 16, -4, 3, -32, 31, false};
static const sym_kind Q6K = {16, 16, -32, 31, -128, 127, false};
static const sym_kind IQ4XS = {8, 32, 0, 15, -32, 31, true};

/* Q3_K (110 bytes): 32 bytes of high-bit mask, 64 bytes of 2-bit low
 * bits, 12 bytes of 6-bit scales (offset 32), f16 d. Value v in [-4, 3]
 * is stored as u = v + 4: low bits u & 3, mask bit u >> 2 (the decoder
 * subtracts 4 where the bit is clear). */
void strata__qe_q3_k(const float *x, unsigned char *b)
{
	sym_block k;
	sym_encode(x, &Q3K, &k);
	memset(b, 0, 110);
	unsigned char *hm = b, *qs = b + 32, *sc = b + 96;
	for (int e = 0; e < 256; e++) {
		int u = k.q[e] + 4, l = e % 32;
		qs[32 * (e / 128) + l] |=
			(unsigned char)((u & 3) << (2 * (e % 128 / 32)));
		hm[l] |= (unsigned char)((u >> 2) << (e / 32));
	}
	for (int i = 0; i < 16; i++) {
		int v = k.sc[i] + 32;
		sc[i % 8] |= (unsigned char)((v & 0x0f) << (4 * (i / 8)));
		sc[8 + i % 4] |= (unsigned char)((v >> 4) << (2 * (i / 4)));
	}
	strata__store_f16(b + 108, k.d);
}

/* Q6_K (210 bytes): low nibbles (128), high 2-bit pairs (64), 16 int8
 * scales, f16 d. Value v in [-32, 31] is u = v + 32; element e, r = e %
 * 128: nibble r / 64 of byte 64 (e / 128) + r % 64, high bits 2 (r / 32)
 * of byte 128 + 32 (e / 128) + r % 32. */
void strata__qe_q6_k(const float *x, unsigned char *b)
{
	sym_block k;
	sym_encode(x, &Q6K, &k);
	memset(b, 0, 210);
	for (int e = 0; e < 256; e++) {
		int u = k.q[e] + 32, h = e / 128, r = e % 128;
		b[64 * h + r % 64] |=
			(unsigned char)((u & 0x0f) << (4 * (r / 64)));
		b[128 + 32 * h + r % 32] |=
			(unsigned char)((u >> 4) << (2 * (r / 32)));
	}
	for (int i = 0; i < 16; i++)
		b[192 + i] = (unsigned char)k.sc[i];
	strata__store_f16(b + 208, k.d);
}

/* IQ4_XS (136 bytes): f16 d, a 16-bit word of the scales' high bit pairs,
 * 4 bytes of their low nibbles (scale offset 32), level indices as
 * nibbles (sub-block ib's element l: nibble l / 16 of byte 16 ib + l %
 * 16). */
void strata__qe_iq4_xs(const float *x, unsigned char *b)
{
	sym_block k;
	sym_encode(x, &IQ4XS, &k);
	memset(b, 0, 136);
	strata__store_f16(b, k.d);
	unsigned sh = 0;
	for (int ib = 0; ib < 8; ib++) {
		int v = k.sc[ib] + 32;
		b[4 + ib / 2] |= (unsigned char)((v & 0x0f) << (4 * (ib % 2)));
		sh |= (unsigned)(v >> 4) << (2 * ib);
		for (int l = 0; l < 32; l++)
			b[8 + 16 * ib + l % 16] |= (unsigned char)(
				k.q[32 * ib + l] << (4 * (l / 16)));
	}
	b[2] = (unsigned char)sh;
	b[3] = (unsigned char)(sh >> 8);
}
