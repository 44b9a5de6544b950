/* quant_fit.c - the scale searches the block encoders share: the best
 * scale (and min) of one run of values for a given code range, symmetric,
 * affine or over IQ4's non-linear levels (layer: base).
 *
 * Each search tries a spread of inverse scales around the one that maps
 * the extreme value onto the extreme code, chooses the codes by rounding,
 * solves the least-squares scale (and offset) for those codes, re-chooses
 * the codes for it, and keeps the candidate of least squared error. The
 * spread (20 steps over one code either way) is wide enough that the
 * extreme value may be clipped when that lowers the error.
 *
 * Speed (issue 18: the K-quant encoders ran at 1-5 MB/s a core): one pass
 * over a run chooses its codes, measures their error and gathers the sums
 * the next least-squares solve needs, with no branch per element, the
 * rounding done by conversion instead of libm and the IQ4 level found by
 * counting the midpoints below the value, LANES elements at a time in
 * vector registers (GCC's and clang's vector extensions: SSE on any
 * x86-64, NEON on Arm); partial sums are per lane, added pairwise at the
 * end; a run's rest past whole lanes is summed one by one. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/quant_internal.h"

#define SPREAD_STEPS 10 /* candidates each side of the extreme's scale */
#define SPREAD_STEP 0.1f /* their spacing, in codes */
#define SOLVES 3 /* least-squares re-solves per candidate */

/* ------------------------------------------------------------------------ */
/* Lanes                                                                    */
/* ------------------------------------------------------------------------ */

#define LANES 4
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));

static inline vf loadv(const float *p)
{
	vf v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline vf splat(float f)
{
	return (vf){f, f, f, f};
}

/* m ? a : b, lane by lane (m all ones or all zeros). */
static inline vf pick(vi m, vf a, vf b)
{
	return (vf)((m & (vi)a) | (~m & (vi)b));
}

static inline float lanes_sum(vf a)
{
	return (a[0] + a[2]) + (a[1] + a[3]);
}

/* strata__search_round of each lane without branches, as a float: f + 0.5
 * toward its sign, truncated (|f| capped far above any code first, so the
 * conversion is exact), hi from hi + 0.5 up, lo below lo - 0.5 and for
 * NaN. */
static inline vf round_codes(vf f, float lo, float hi)
{
	const vi sign = (vi)f & (int32_t)0x80000000u;
	vf a = (vf)((vi)f & 0x7fffffff);
	a = pick(a < 4096.0f, a, splat(4096.0f));
	vf r = __builtin_convertvector(__builtin_convertvector(a + 0.5f, vi), vf);
	r = (vf)((vi)r | sign);
	r = pick(f >= hi + 0.5f, splat(hi), r);
	return pick(f > lo - 0.5f, r, splat(lo));
}

/* The same for one value (the rest of a run that is not whole lanes). */
static inline float round_code(float f, float lo, float hi)
{
	if (!(f > lo - 0.5f))
		return lo;
	if (f >= hi + 0.5f)
		return hi;
	float a = fabsf(f) < 4096.0f ? fabsf(f) : 4096.0f;
	float r = (float)(int)(a + 0.5f);
	return f < 0.0f ? -r : r;
}

/* What a pass gathers for the solve after it: sums of the codes (or
 * levels) v, v^2 and x v. */
typedef struct pass_sums {
	double v, vv, xv;
} pass_sums;

/* ------------------------------------------------------------------------ */
/* Symmetric: x ~ s * q, q in [lo, hi]                                      */
/* ------------------------------------------------------------------------ */

/* Codes for s into q (unless q is NULL: a search keeps only the scale);
 * returns the squared error (as the decoders compute s * q); with `sums`,
 * fills ps. The sums of codes are exact (integers far below 2^24); x v
 * is summed in float by lanes. */
static inline float sym_pass(const float *x, int n, float lo, float hi,
			     float s, int8_t *q, bool sums, pass_sums *ps)
{
	const float is = s != 0.0f ? 1.0f / s : 0.0f;
	vf acc = {0}, vv = {0}, xv = {0};
	int j = 0;
	for (; j + LANES <= n; j += LANES) {
		vf x4 = loadv(x + j), r = round_codes(x4 * is, lo, hi);
		vi c = __builtin_convertvector(r, vi);
		for (int k = 0; q && k < LANES; k++)
			q[j + k] = (int8_t)c[k];
		vf e = x4 - r * s;
		acc += e * e;
		if (sums) {
			vv += r * r;
			xv += x4 * r;
		}
	}
	float err = lanes_sum(acc), svv = lanes_sum(vv), sxv = lanes_sum(xv);
	for (; j < n; j++) {
		float r = round_code(x[j] * is, lo, hi);
		if (q)
			q[j] = (int8_t)(int)r;
		float e = x[j] - s * r;
		err += e * e;
		svv += r * r;
		sxv += x[j] * r;
	}
	if (sums)
		*ps = (pass_sums){0.0, svv, sxv};
	return err;
}

float strata__sym_assign(const float *x, int n, int lo, int hi, float s,
			int8_t *q)
{
	return sym_pass(x, n, (float)lo, (float)hi, s, q, false, NULL);
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
				pass_sums ps;
				bool more = round + 1 < SOLVES;
				float err = sym_pass(x, n, (float)lo, (float)hi,
						     s, NULL, more, &ps);
				if (err < best_err) {
					best_err = err;
					best = s;
				}
				if (!more)
					break;
				/* the least-squares s for these codes */
				float ns = ps.vv > 0.0 ? (float)ps.xv / (float)ps.vv
						       : 0.0f;
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

static inline float aff_pass(const float *x, int n, float top, float s,
			     float m, uint8_t *q, bool sums, pass_sums *ps)
{
	const float is = s != 0.0f ? 1.0f / s : 0.0f;
	vf acc = {0}, v = {0}, vv = {0}, xv = {0};
	int j = 0;
	for (; j + LANES <= n; j += LANES) {
		vf x4 = loadv(x + j), r = round_codes((x4 + m) * is, 0.0f, top);
		vi c = __builtin_convertvector(r, vi);
		for (int k = 0; q && k < LANES; k++)
			q[j + k] = (uint8_t)c[k];
		vf e = x4 - (r * s - m);
		acc += e * e;
		if (sums) {
			v += r;
			vv += r * r;
			xv += x4 * r;
		}
	}
	float err = lanes_sum(acc);
	double sv = lanes_sum(v), svv = lanes_sum(vv), sxv = lanes_sum(xv);
	for (; j < n; j++) {
		float r = round_code((x[j] + m) * is, 0.0f, top);
		if (q)
			q[j] = (uint8_t)(int)r;
		float e = x[j] - (s * r - m);
		err += e * e;
		sv += r;
		svv += (double)r * r;
		sxv += (double)x[j] * r;
	}
	if (sums)
		*ps = (pass_sums){sv, svv, sxv};
	return err;
}

float strata__aff_assign(const float *x, int n, int top, float s, float m,
			uint8_t *q)
{
	return aff_pass(x, n, (float)top, s, m, q, false, NULL);
}

/* Least squares of x ~ s q + c over a pass's codes with c <= 0 (the min
 * cannot be negative); m = -c; sx is the sum of x. False when the codes
 * are all equal and give no scale. */
static bool aff_solve(int n, const pass_sums *ps, double sx, float *s,
		      float *m)
{
	double sq = ps->v, sqq = ps->vv, sxq = ps->xv;
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
	double sx = 0;
	for (int j = 0; j < n; j++) {
		lo = fminf(lo, x[j]);
		hi = fmaxf(hi, x[j]);
		sx += x[j];
	}
	*s_out = 0.0f;
	*m_out = -lo;
	if (!(hi > lo))
		return;
	float best_err = FLT_MAX;
	for (int t = -SPREAD_STEPS; t <= SPREAD_STEPS; t++) {
		float s = (hi - lo) / ((float)top + SPREAD_STEP * (float)t), m = -lo;
		if (!(s > 0.0f))
			continue;
		for (int round = 0; round < SOLVES; round++) {
			pass_sums ps;
			bool more = round + 1 < SOLVES;
			float err = aff_pass(x, n, (float)top, s, m, NULL, more,
					     &ps);
			if (err < best_err) {
				best_err = err;
				*s_out = s;
				*m_out = m;
			}
			float ns, nm;
			if (!more || !aff_solve(n, &ps, sx, &ns, &nm) ||
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

/* Level steps: levels[k + 1] - levels[k]. */
static const float iq4_steps[15] = {
	23.0f, 21.0f, 18.0f, 16.0f, 14.0f, 13.0f, 12.0f, 11.0f,
	12.0f, 12.0f, 13.0f, 15.0f, 16.0f, 20.0f, 24.0f,
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

/* The index of each lane is the count of midpoints below v (what
 * strata__iq4_nearest answers), its level -127 plus the steps passed. */
static inline float iq4_pass(const float *x, int n, float d, uint8_t *q,
			     bool sums, pass_sums *ps)
{
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	vf acc = {0}, ll = {0}, xl = {0};
	int j = 0;
	for (; j + LANES <= n; j += LANES) {
		vf x4 = loadv(x + j), v = x4 * id, level = splat(-127.0f);
		vi c = {0};
		for (int i = 0; i < 15; i++) {
			vi above = v > iq4_mids[i];
			c -= above;
			level += (vf)(above & (vi)splat(iq4_steps[i]));
		}
		for (int k = 0; q && k < LANES; k++)
			q[j + k] = (uint8_t)c[k];
		vf e = x4 - level * d;
		acc += e * e;
		if (sums) {
			ll += level * level;
			xl += x4 * level;
		}
	}
	float err = lanes_sum(acc), sll = lanes_sum(ll), sxl = lanes_sum(xl);
	for (; j < n; j++) {
		int c = strata__iq4_nearest(x[j] * id);
		if (q)
			q[j] = (uint8_t)c;
		float l = (float)strata__iq4nl_levels[c];
		float e = x[j] - d * l;
		err += e * e;
		sll += l * l;
		sxl += x[j] * l;
	}
	if (sums)
		*ps = (pass_sums){0.0, sll, sxl};
	return err;
}

float strata__iq4_assign(const float *x, int n, float d, uint8_t *q)
{
	return iq4_pass(x, n, d, q, false, NULL);
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
				pass_sums ps;
				bool more = round + 1 < SOLVES;
				float err = iq4_pass(x, n, d, NULL, more, &ps);
				if (err < best_err) {
					best_err = err;
					best = d;
				}
				if (!more)
					break;
				float nd = ps.vv > 0.0 ? (float)ps.xv / (float)ps.vv
						       : 0.0f;
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
