/* quant_fit.c - the scale searches the block encoders share: the best
 * scale (and min) of one run of values for a given code range, symmetric,
 * affine or over IQ4's non-linear levels (layer: base).
 *
 * Each search tries a spread of inverse scales around the one that maps
 * the extreme value onto the extreme code, chooses the codes by rounding,
 * solves the least-squares scale (and offset) for those codes, re-chooses
 * the codes for it, and keeps the candidate of least squared error. The
 * spread (20 steps over one code either way) is wide enough that the
 * extreme value may be clipped when that lowers the error. */
#include <float.h>
#include <math.h>

#include "base/quant_internal.h"

#define SPREAD_STEPS 10 /* candidates each side of the extreme's scale */
#define SPREAD_STEP 0.1f /* their spacing, in codes */
#define SOLVES 3 /* least-squares re-solves per candidate */

/* ------------------------------------------------------------------------ */
/* Symmetric: x ~ s * q, q in [lo, hi]                                      */
/* ------------------------------------------------------------------------ */

/* The squared error of x ~ s * q with the codes re-chosen for s; the
 * codes go to q. */
float strata__sym_assign(const float *x, int n, int lo, int hi, float s,
			int8_t *q)
{
	float is = s != 0.0f ? 1.0f / s : 0.0f, err = 0.0f;
	for (int j = 0; j < n; j++) {
		q[j] = (int8_t)strata__search_round(x[j] * is, lo, hi);
		float e = x[j] - s * (float)q[j];
		err += e * e;
	}
	return err;
}

/* The least-squares s for fixed codes, or 0 when every code is 0. */
static float sym_solve(const float *x, int n, const int8_t *q)
{
	float xq = 0.0f, qq = 0.0f;
	for (int j = 0; j < n; j++) {
		xq += x[j] * (float)q[j];
		qq += (float)q[j] * (float)q[j];
	}
	return qq > 0.0f ? xq / qq : 0.0f;
}

float strata__fit_symmetric(const float *x, int n, int lo, int hi)
{
	float amax = 0.0f, mx = 0.0f;
	for (int j = 0; j < n; j++)
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			mx = x[j];
		}
	if (amax == 0.0f)
		return 0.0f;
	int8_t q[256];
	float best = 0.0f, best_err = FLT_MAX;
	/* the extreme on the negative end (one code more) or the positive */
	for (int side = 0; side < 2; side++) {
		float top = side == 0 ? (float)-lo : (float)hi;
		float sign = side == 0 ? -1.0f : 1.0f;
		for (int t = -SPREAD_STEPS; t <= SPREAD_STEPS; t++) {
			float is = sign * (top + SPREAD_STEP * (float)t) / mx;
			if (is == 0.0f)
				continue;
			float s = 1.0f / is;
			for (int round = 0; round < SOLVES; round++) {
				float err = strata__sym_assign(x, n, lo, hi, s, q);
				if (err < best_err) {
					best_err = err;
					best = s;
				}
				float ns = sym_solve(x, n, q);
				if (ns == 0.0f || ns == s)
					break;
				s = ns;
			}
		}
	}
	return best;
}

/* ------------------------------------------------------------------------ */
/* Affine: x ~ s * q - m, q in [0, top], s >= 0, m >= 0                     */
/* ------------------------------------------------------------------------ */

float strata__aff_assign(const float *x, int n, int top, float s, float m,
			uint8_t *q)
{
	float is = s != 0.0f ? 1.0f / s : 0.0f, err = 0.0f;
	for (int j = 0; j < n; j++) {
		q[j] = (uint8_t)strata__search_round((x[j] + m) * is, 0, top);
		float e = x[j] - (s * (float)q[j] - m);
		err += e * e;
	}
	return err;
}

/* Least squares of x ~ s q + c over fixed codes with c <= 0 (the min
 * cannot be negative); m = -c. False when the codes are all equal and
 * give no scale. */
static bool aff_solve(const float *x, int n, const uint8_t *q, float *s,
		      float *m)
{
	double sq = 0, sqq = 0, sx = 0, sxq = 0;
	for (int j = 0; j < n; j++) {
		sq += q[j];
		sqq += (double)q[j] * q[j];
		sx += x[j];
		sxq += (double)x[j] * q[j];
	}
	double det = n * sqq - sq * sq;
	if (det <= 0 || sqq <= 0)
		return false;
	double a = (n * sxq - sq * sx) / det, c = (sqq * sx - sq * sxq) / det;
	if (c > 0) { /* the offset would be a negative min: pin it at 0 */
		c = 0;
		a = sxq / sqq;
	}
	if (a < 0)
		return false;
	*s = (float)a;
	*m = (float)-c;
	return true;
}

void strata__fit_affine(const float *x, int n, int top, float *s_out,
			float *m_out)
{
	float lo = 0.0f, hi = x[0];
	for (int j = 0; j < n; j++) {
		lo = fminf(lo, x[j]);
		hi = fmaxf(hi, x[j]);
	}
	*s_out = 0.0f;
	*m_out = -lo;
	if (!(hi > lo))
		return;
	uint8_t q[256];
	float best_err = FLT_MAX;
	for (int t = -SPREAD_STEPS; t <= SPREAD_STEPS; t++) {
		float s = (hi - lo) / ((float)top + SPREAD_STEP * (float)t), m = -lo;
		if (!(s > 0.0f))
			continue;
		for (int round = 0; round < SOLVES; round++) {
			float err = strata__aff_assign(x, n, top, s, m, q);
			if (err < best_err) {
				best_err = err;
				*s_out = s;
				*m_out = m;
			}
			float ns, nm;
			if (!aff_solve(x, n, q, &ns, &nm) ||
			    (ns == s && nm == m))
				break;
			s = ns;
			m = nm;
		}
	}
}

/* ------------------------------------------------------------------------ */
/* IQ4: x ~ d * level[q]                                                    */
/* ------------------------------------------------------------------------ */

/* The midpoints between consecutive IQ4 levels: v above mids[k] is
 * nearer level k + 1 than level k. */
static const float iq4_mids[15] = {
	-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
	7.0f,	 19.0f,	 31.5f,	 45.5f,	 61.0f,	 79.0f,	 101.0f,
};

int strata__iq4_nearest(float v)
{
	/* a binary search over the midpoints: four comparisons */
	int k = v > iq4_mids[7] ? 8 : 0;
	if (v > iq4_mids[k + 3])
		k += 4;
	if (v > iq4_mids[k + 1])
		k += 2;
	if (v > iq4_mids[k])
		k += 1;
	return k;
}

float strata__iq4_assign(const float *x, int n, float d, uint8_t *q)
{
	float id = d != 0.0f ? 1.0f / d : 0.0f, err = 0.0f;
	for (int j = 0; j < n; j++) {
		q[j] = (uint8_t)strata__iq4_nearest(x[j] * id);
		float e = x[j] - d * (float)strata__iq4nl_levels[q[j]];
		err += e * e;
	}
	return err;
}

static float iq4_solve(const float *x, int n, const uint8_t *q)
{
	float xl = 0.0f, ll = 0.0f;
	for (int j = 0; j < n; j++) {
		float l = (float)strata__iq4nl_levels[q[j]];
		xl += x[j] * l;
		ll += l * l;
	}
	return ll > 0.0f ? xl / ll : 0.0f;
}

float strata__iq4_search(const float *x, int n, bool f16, uint8_t *q)
{
	float amax = 0.0f, mx = 0.0f;
	for (int j = 0; j < n; j++)
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			mx = x[j];
		}
	if (amax == 0.0f) {
		strata__iq4_assign(x, n, 0.0f, q);
		return 0.0f;
	}
	float best = 0.0f, best_err = FLT_MAX;
	for (int side = 0; side < 2; side++) {
		float top = side == 0 ? -127.0f : 113.0f;
		for (int t = -SPREAD_STEPS; t <= SPREAD_STEPS; t++) {
			float d = mx / (top + 15.0f * SPREAD_STEP * (float)t);
			for (int round = 0; round < SOLVES; round++) {
				if (f16)
					d = strata__f16_round(d);
				float err = strata__iq4_assign(x, n, d, q);
				if (err < best_err) {
					best_err = err;
					best = d;
				}
				float nd = iq4_solve(x, n, q);
				if (nd == 0.0f || nd == d)
					break;
				d = nd;
			}
		}
	}
	strata__iq4_assign(x, n, best, q);
	return best;
}

float strata__iq4_fit(const float *x, int n, uint8_t *q)
{
	return strata__iq4_search(x, n, true, q);
}
