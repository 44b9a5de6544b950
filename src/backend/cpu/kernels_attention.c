/* kernels_attention.c - CPU rotary position embedding and grouped-query
 * attention over the KV cache, causal and optionally windowed (layer:
 * backend).
 *
 * Attention is one pass per (query, head) with a running softmax: the
 * running maximum rescales the partial sums when it grows, so no score
 * buffer is needed and context length costs no memory here.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels_internal.h"

typedef struct attn_job {
	float *out;
	const float *q, *k, *v;
	strata_attention_shape s;
	uint32_t pairs_per_task; /* (query, head) pairs */
} attn_job;

typedef struct rope_job {
	float *x;
	uint32_t pos0, heads, head_dim;
	const float *inv_freq;
	strata_rope_layout layout;
} rope_job;

/* ------------------------------------------------------------------------ */

/* out (head_dim) for query row i, head h. */
static void attend_one(const attn_job *j, uint32_t i, uint32_t h)
{
	const strata_attention_shape *s = &j->s;
	const uint32_t d = s->head_dim;
	const uint64_t q_stride = (uint64_t)s->heads * d;
	const uint64_t kv_stride = (uint64_t)s->kv_heads * d;
	const uint32_t kvh = h / (s->heads / s->kv_heads);
	const float *q = j->q + i * q_stride + (uint64_t)h * d;
	float *o = j->out + i * q_stride + (uint64_t)h * d;
	const uint64_t p = (uint64_t)s->pos0 + i;
	uint64_t first = 0;
	if (s->window && p + 1 > s->window)
		first = p + 1 - s->window;

	float m = -INFINITY, l = 0.0f;
	memset(o, 0, d * sizeof *o);
	for (uint64_t t = first; t <= p; t++) {
		const float *k = j->k + t * kv_stride + (uint64_t)kvh * d;
		const float *v = j->v + t * kv_stride + (uint64_t)kvh * d;
		float score = 0.0f;
		for (uint32_t e = 0; e < d; e++)
			score += q[e] * k[e];
		score *= s->scale;
		if (score > m) {
			/* The new maximum rescales what was summed so far. */
			float c = expf(m - score);
			l *= c;
			for (uint32_t e = 0; e < d; e++)
				o[e] *= c;
			m = score;
		}
		float w = expf(score - m);
		l += w;
		for (uint32_t e = 0; e < d; e++)
			o[e] += w * v[e];
	}
	float inv = 1.0f / l;
	for (uint32_t e = 0; e < d; e++)
		o[e] *= inv;
}

static void attn_task(void *arg, uint32_t task)
{
	const attn_job *j = arg;
	uint64_t total = (uint64_t)j->s.n * j->s.heads;
	uint64_t a = (uint64_t)task * j->pairs_per_task;
	uint64_t b = a + j->pairs_per_task;
	if (b > total)
		b = total;
	for (uint64_t pr = a; pr < b; pr++)
		attend_one(j, (uint32_t)(pr / j->s.heads),
			   (uint32_t)(pr % j->s.heads));
}

/* Row i of x: every head rotated by position pos0 + i. */
static void rope_task(void *arg, uint32_t i)
{
	const rope_job *j = arg;
	const uint32_t d = j->head_dim, half = d / 2;
	const float pos = (float)((uint64_t)j->pos0 + i);
	float *row = j->x + (uint64_t)i * j->heads * d;
	for (uint32_t f = 0; f < half; f++) {
		/* The angle is one float product, as transformers forms it. */
		float angle = pos * j->inv_freq[f];
		float c = cosf(angle), sn = sinf(angle);
		for (uint32_t h = 0; h < j->heads; h++) {
			float *x = row + (uint64_t)h * d;
			float *a, *b;
			if (j->layout == STRATA_ROPE_HALF) {
				a = &x[f];
				b = &x[f + half];
			} else {
				a = &x[2 * f];
				b = &x[2 * f + 1];
			}
			float x0 = *a, x1 = *b;
			*a = x0 * c - x1 * sn;
			*b = x1 * c + x0 * sn;
		}
	}
}

/* ------------------------------------------------------------------------ */

strata_status strata__cpu_attention(void *ctx, float *out, const float *q,
				    const float *k, const float *v,
				    const strata_attention_shape *shape,
				    strata_error *err)
{
	(void)err;
	strata__pool *p = ctx;
	attn_job j = {.out = out, .q = q, .k = k, .v = v, .s = *shape};
	uint64_t total = (uint64_t)shape->n * shape->heads;
	uint64_t per = (total + 4 * strata__pool_threads(p) - 1) /
		       (4 * strata__pool_threads(p));
	if (per == 0)
		per = 1;
	/* Short decode steps are cheaper inline than waking the pool. */
	uint64_t work = total * ((uint64_t)shape->pos0 + shape->n) *
			shape->head_dim;
	if (work < 65536)
		per = total;
	j.pairs_per_task = (uint32_t)per;
	strata__pool_run(p, attn_task, &j, (uint32_t)((total + per - 1) / per));
	return STRATA_OK;
}

strata_status strata__cpu_rope(void *ctx, float *x, uint32_t n, uint32_t pos0,
			       uint32_t heads, uint32_t head_dim,
			       const float *inv_freq, strata_rope_layout layout,
			       strata_error *err)
{
	(void)err;
	rope_job j = {.x = x, .pos0 = pos0, .heads = heads,
		      .head_dim = head_dim, .inv_freq = inv_freq,
		      .layout = layout};
	strata__pool_run(ctx, rope_task, &j, n);
	return STRATA_OK;
}
