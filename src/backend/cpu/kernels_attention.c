/* kernels_attention.c - CPU rotary position embedding and grouped-query
 * attention over the KV cache, causal and optionally windowed (layer:
 * backend).
 *
 * Attention is flash-attention style: for one query row and the query
 * heads of one kv head together, keys are taken in tiles; a tile's scores
 * (one small stack buffer, whatever the context) update each head's
 * running maximum and sum, which rescale what was summed so far, and then
 * the tile's value rows are added in once for all the group's heads. No
 * score matrix exists, so context length costs no memory here, and the
 * key and value rows are read once per group instead of once per head.
 * A KV cache in f16 or bf16 is read the same way, each row converted to
 * f32 once per group as it is reached (kernels_kv.c), so the scores and
 * sums are those of an f32 cache holding the rounded values.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels_internal.h"

/* Keys per tile: a tile's scores are formed before any value is read, so
 * the running maximum moves once per tile, not once per key. */
#define ATT_TILE 64u
/* Query heads of one group taken together (each K and V row read once for
 * all of them while it is in cache); larger groups go in parts. */
#define ATT_GROUP_MAX 16u
/* Head sizes a KV cache of f16 or bf16 takes (a row's f32 copy is on the
 * stack). */
#define ATT_TYPED_HEAD_MAX 1024u

typedef struct attn_job {
	float *out;
	const float *q;
	const unsigned char *k, *v;
	strata__kv_load_fn load; /* NULL: the cache is f32 */
	strata_attention_shape s;
	uint32_t parts;		 /* ceil(group / ATT_GROUP_MAX) */
	uint32_t items_per_task; /* (query, kv head, part) items */
} attn_job;

typedef struct rope_job {
	float *x;
	uint32_t pos0, heads, head_dim;
	const float *inv_freq;
	strata_rope_layout layout;
} rope_job;

/* ------------------------------------------------------------------------ */

static float dot(const float *a, const float *b, uint32_t d)
{
	float s = 0.0f;
	for (uint32_t e = 0; e < d; e++)
		s += a[e] * b[e];
	return s;
}

/* Row `row` of kv head kvh of a cache (k or v) as f32: the row itself in
 * an f32 cache, else its conversion into buf. */
static const float *kv_row(const attn_job *j, const unsigned char *cache,
			   uint64_t row, uint32_t kvh, float *buf)
{
	const uint32_t d = j->s.head_dim;
	uint64_t at = row * j->s.kv_heads * d + (uint64_t)kvh * d;
	if (!j->load)
		return (const float *)cache + at;
	j->load(buf, cache + at * 2, d);
	return buf;
}

/* Scores of a tile's keys t0 .. t0+cnt-1 for each head (scaled, capped),
 * into sc; each key row is read (converted) once for the group. */
static void tile_scores(const attn_job *j, const float *qr, uint32_t kvh,
			uint32_t count, uint64_t t0, uint32_t cnt,
			float sc[][ATT_TILE])
{
	const strata_attention_shape *s = &j->s;
	const uint32_t d = s->head_dim;
	float buf[ATT_TYPED_HEAD_MAX];
	for (uint32_t t = 0; t < cnt; t++) {
		const float *kr = kv_row(j, j->k, t0 + t, kvh, buf);
		for (uint32_t h = 0; h < count; h++) {
			float x = dot(qr + (uint64_t)h * d, kr, d) * s->scale;
			if (s->softcap > 0) /* Gemma 2 */
				x = s->softcap * tanhf(x / s->softcap);
			sc[h][t] = x;
		}
	}
}

/* Query row i, heads h0 .. h0+count-1 (all of kv head kvh): out rows =
 * softmax(q k^T * scale) v over keys first .. p, in tiles of ATT_TILE
 * counted from `first`. A row's result depends on its query, its keys and
 * p only, so chunked and one-pass prefill give the same bits. */
static void attend_heads(const attn_job *j, uint32_t i, uint32_t kvh,
			 uint32_t h0, uint32_t count)
{
	const strata_attention_shape *s = &j->s;
	const uint32_t d = s->head_dim;
	const uint64_t q_stride = (uint64_t)s->heads * d;
	const uint64_t p = (uint64_t)s->pos0 + i;
	uint64_t first = 0;
	if (s->window && p + 1 > s->window)
		first = p + 1 - s->window;
	const float *qr = j->q + i * q_stride + (uint64_t)h0 * d;
	float *orow = j->out + i * q_stride + (uint64_t)h0 * d;
	float m[ATT_GROUP_MAX], l[ATT_GROUP_MAX];
	float sc[ATT_GROUP_MAX][ATT_TILE];
	float buf[ATT_TYPED_HEAD_MAX];
	for (uint32_t h = 0; h < count; h++)
		m[h] = -INFINITY, l[h] = 0.0f;
	memset(orow, 0, (size_t)count * d * sizeof *orow);
	for (uint64_t t0 = first; t0 <= p; t0 += ATT_TILE) {
		const uint32_t cnt = (uint32_t)(p + 1 - t0 < ATT_TILE ? p + 1 - t0
								      : ATT_TILE);
		tile_scores(j, qr, kvh, count, t0, cnt, sc);
		for (uint32_t h = 0; h < count; h++) {
			float tm = -INFINITY;
			for (uint32_t t = 0; t < cnt; t++)
				tm = sc[h][t] > tm ? sc[h][t] : tm;
			/* the new maximum rescales what was summed so far
			 * (c = 0 on the first tile, where m is -inf) */
			const float nm = m[h] > tm ? m[h] : tm;
			const float c = expf(m[h] - nm);
			float *o = orow + (uint64_t)h * d;
			for (uint32_t e = 0; e < d; e++)
				o[e] *= c;
			l[h] *= c;
			for (uint32_t t = 0; t < cnt; t++) {
				sc[h][t] = expf(sc[h][t] - nm);
				l[h] += sc[h][t];
			}
			m[h] = nm;
		}
		for (uint32_t t = 0; t < cnt; t++) {
			const float *v = kv_row(j, j->v, t0 + t, kvh, buf);
			for (uint32_t h = 0; h < count; h++) {
				float *o = orow + (uint64_t)h * d;
				const float w = sc[h][t];
				for (uint32_t e = 0; e < d; e++)
					o[e] += w * v[e];
			}
		}
	}
	for (uint32_t h = 0; h < count; h++) {
		float inv = 1.0f / l[h], *o = orow + (uint64_t)h * d;
		for (uint32_t e = 0; e < d; e++)
			o[e] *= inv;
	}
}

/* Items are (query, kv head, part of its group), queries outermost. */
static void attn_task(void *arg, uint32_t task)
{
	const attn_job *j = arg;
	const uint32_t group = j->s.heads / j->s.kv_heads;
	const uint64_t per_query = (uint64_t)j->s.kv_heads * j->parts;
	const uint64_t total = (uint64_t)j->s.n * per_query;
	uint64_t a = (uint64_t)task * j->items_per_task;
	uint64_t b = a + j->items_per_task;
	if (b > total)
		b = total;
	for (uint64_t it = a; it < b; it++) {
		uint32_t i = (uint32_t)(it / per_query);
		uint32_t kvh = (uint32_t)(it % per_query / j->parts);
		uint32_t part = (uint32_t)(it % j->parts);
		uint32_t h0 = part * ATT_GROUP_MAX;
		uint32_t count = group - h0 < ATT_GROUP_MAX ? group - h0
							    : ATT_GROUP_MAX;
		attend_heads(j, i, kvh, kvh * group + h0, count);
	}
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
				    const void *k, const void *v,
				    const strata_attention_shape *shape,
				    strata_error *err)
{
	strata__pool *p = ctx;
	const uint32_t group = shape->heads / shape->kv_heads;
	bool typed = shape->kv_type != STRATA_WEIGHT_F32;
	if (typed && shape->head_dim > ATT_TYPED_HEAD_MAX)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "use --kv-type f32 for this model",
				   "CPU attention: head size %u is above %u "
				   "with a %s KV cache",
				   shape->head_dim, ATT_TYPED_HEAD_MAX,
				   strata_weight_type_name(shape->kv_type));
	attn_job j = {.out = out, .q = q, .k = k, .v = v, .s = *shape,
		      .load = typed ? strata__cpu_kv_loader(shape->kv_type)
				    : NULL,
		      .parts = (group + ATT_GROUP_MAX - 1) / ATT_GROUP_MAX};
	uint64_t total = (uint64_t)shape->n * shape->kv_heads * j.parts;
	uint64_t per = (total + 4 * strata__pool_threads(p) - 1) /
		       (4 * strata__pool_threads(p));
	if (per == 0)
		per = 1;
	/* Short decode steps are cheaper inline than waking the pool. */
	uint64_t work = (uint64_t)shape->n * shape->heads *
			((uint64_t)shape->pos0 + shape->n) * shape->head_dim;
	if (work < 65536)
		per = total;
	j.items_per_task = (uint32_t)per;
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
