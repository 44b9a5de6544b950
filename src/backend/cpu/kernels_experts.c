/* kernels_experts.c - the CPU's experts slot: a mixture-of-experts layer's
 * routed experts (their gate and up with the SwiGLU, then their downs) in
 * one job of the pool, then their weighted sum (layer: backend).
 *
 * Why: composed one expert at a time, a hit is a gated product and a down,
 * each a job of the pool; a Qwen3-30B-A3B-shaped expert's products are
 * 768 x 2048 (1.7 MB in Q8_0), so on the GPU host's 16 threads a thread
 * got a few microseconds of rows a job and the wake-up and the wait for
 * the slowest thread, twice an expert, ~6 missed experts a layer, were a
 * large share of the CPU's decode step (issue 22). Here every hit's gate
 * and up rows and every hit's down rows are the tasks of one job, runs of
 * rows claimed in order across the hits (a thread that finishes takes the
 * next); a hit's downs wait for its SwiGLU rows, which the last of its
 * gate/up tasks to finish has quantized for the down. The pool claims
 * tasks in increasing order and every gate/up task comes before every
 * down task, so a down task waits only for tasks already running on other
 * threads: no deadlock, whatever the thread count.
 *
 * The same bits as the composition (test_cpu_experts checks it): each
 * hit's rows of x gathered and quantized as the plain product quantizes
 * them (strata__qdot_quantize_x, m rows at once), each run of rows through
 * the row kernel the plain product picks, whose outputs do not depend on
 * which rows a call takes (qdot_rows.h); bf16, f16 and f32 through the
 * fused decode products' sums (kernels_decode.c), the plain product's bits
 * for any row count; the SwiGLU and the scatter-add the plain kernels'
 * expressions, the sum hit by hit in order on the calling thread (no
 * FMA: this function has no target attribute). Declined (the wrapper
 * composes): a hit of more than STRATA__CPU_EXPERTS_ROWS rows (prefill;
 * the plain product takes other paths there), a bf16, f16 or f32 matrix
 * in a hit of more than one row, block types under --precision exact, a
 * type the fused decode products do not take. */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/kernels_internal.h"
#include "backend/cpu/qdot.h"

/* The weight bytes a task aims for, the tasks a thread at least, rows
 * taken in multiples of ROWS_STEP: kernels_decode_q8.c's figures, over
 * all the hits' rows together. */
#define TASK_BYTES (192u << 10)
#define TASKS_PER_THREAD 6u
#define ROWS_STEP 4u
/* Outputs of one row of x a kernel call makes into the stack (the up
 * product beside the gate's). */
#define TMP_ROWS 64u
/* Pauses of a waiting down task before it yields its core. */
#define SPIN_YIELD 256

/* One matrix of a hit as this job reads it. */
typedef struct ex_mat {
	const unsigned char *w;
	strata_weight_type type;
	bool q8;	 /* through qdot.h; else the fused decode sums */
	strata__qjob j;  /* q8: set up, x quantized; y set per hit */
} ex_mat;

typedef struct ex_hit {
	ex_mat gate, up, down;
	uint32_t m;
	const float *in;  /* (m, dim) its rows of x gathered */
	float *h;	  /* (m, ffn) silu(gate) * up */
	float *out;	  /* (m, dim) the down's */
	uint32_t first_a, tasks_a, first_b, tasks_b;
	atomic_uint done_a; /* gate/up tasks finished */
	atomic_uint ready;  /* 1: h is final and quantized for the down */
} ex_hit;

typedef struct ex_job {
	strata__pool *pool;
	strata__qdot_rows_fn rows;
	uint32_t dim, ffn, hits, tasks_a;
	uint32_t rows_a, rows_b; /* rows per gate/up task, per down task */
	ex_hit *h;		 /* [hits], the hits with rows */
} ex_job;

/* ------------------------------------------------------------------------ */

static bool mat_takes(void *ctx, const strata_weight *w, bool *q8)
{
	*q8 = false;
	if (w->type == STRATA_WEIGHT_F32 || w->type == STRATA_WEIGHT_BF16 ||
	    w->type == STRATA_WEIGHT_F16)
		return strata__cpu_decode_usable();
	strata_block_type bt = strata_weight_type_block(w->type);
	*q8 = true;
	return strata__pool_decode_mode(ctx) == STRATA__DECODE_Q8 &&
	       strata__qdot_has(bt) && !(w->cols % strata_block_elements(bt));
}

/* Rows [o0, o1) of matrix a for the hit's m rows of x (xf: f32, rows of
 * `in`; q8: a's j.x): outputs into y (m rows of `out`). */
static void mat_rows(const ex_job *job, const ex_mat *a, float *y,
		     uint32_t out, const float *xf, uint32_t in, uint32_t m,
		     uint32_t o0, uint32_t o1)
{
	if (!a->q8) {
		for (uint32_t c = 0; c < m; c++)
			strata__cpu_decode_rows(y + (uint64_t)c * out, a->w,
						a->type, xf + (uint64_t)c * in,
						in, o0, o1);
		return;
	}
	strata__qjob j = a->j;
	j.y = y;
	j.xs = m <= QDOT_W ? strata__pool_scratch(job->pool) : NULL;
	job->rows(&j, o0, o1);
}

/* Gate/up rows [o0, o1) of hit h with the SwiGLU (the kernel's expression,
 * kernels_elementwise.c): the gate into h->h, the up into the stack. */
static void gate_up(const ex_job *job, ex_hit *h, uint32_t o0, uint32_t o1)
{
	float tmp[STRATA__CPU_EXPERTS_ROWS * TMP_ROWS];
	const uint32_t ffn = job->ffn, m = h->m;
	for (uint32_t a = o0; a < o1; a += TMP_ROWS) {
		uint32_t b = o1 - a < TMP_ROWS ? o1 : a + TMP_ROWS, r = b - a;
		mat_rows(job, &h->gate, h->h, ffn, h->in, job->dim, m, a, b);
		/* the up's rows [a, b) written from tmp: shifted so */
		ex_mat up = h->up;
		if (up.q8) {
			up.j.w += (uint64_t)a * up.j.row_bytes;
			up.j.out = r;
		} else {
			up.w += (uint64_t)a * job->dim *
				(up.type == STRATA_WEIGHT_F32 ? 4 : 2);
		}
		mat_rows(job, &up, tmp, r, h->in, job->dim, m, 0, r);
		for (uint32_t c = 0; c < m; c++) {
			float *y = h->h + (uint64_t)c * ffn + a;
			const float *u = tmp + (uint64_t)c * r;
			for (uint32_t i = 0; i < r; i++)
				y[i] = y[i] / (1.0f + expf(-y[i])) * u[i];
		}
	}
}

static void wait_ready(ex_hit *h)
{
	for (int spin = 0;
	     !atomic_load_explicit(&h->ready, memory_order_acquire); spin++) {
		if (spin >= SPIN_YIELD) {
			sched_yield(); /* more threads than cores */
			spin = 0;
		}
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
}

static void ex_task(void *arg, uint32_t task)
{
	const ex_job *job = arg;
	bool down = task >= job->tasks_a;
	uint32_t i = 0;
	while (i + 1 < job->hits &&
	       task >= (down ? job->h[i + 1].first_b : job->h[i + 1].first_a))
		i++;
	ex_hit *h = &job->h[i];
	if (!down) {
		uint32_t o0 = (task - h->first_a) * job->rows_a;
		uint32_t o1 = job->ffn - o0 < job->rows_a ? job->ffn
							  : o0 + job->rows_a;
		gate_up(job, h, o0, o1);
		if (atomic_fetch_add_explicit(&h->done_a, 1,
					      memory_order_acq_rel) +
			    1 <
		    h->tasks_a)
			return;
		/* the hit's last gate/up task: h for the down, once */
		if (h->down.q8)
			strata__qdot_quantize_x(h->down.j.type, h->h, h->m,
						job->ffn, (void *)h->down.j.x.q,
						&h->down.j.x);
		atomic_store_explicit(&h->ready, 1, memory_order_release);
		return;
	}
	uint32_t o0 = (task - h->first_b) * job->rows_b;
	uint32_t o1 = job->dim - o0 < job->rows_b ? job->dim : o0 + job->rows_b;
	wait_ready(h);
	mat_rows(job, &h->down, h->out, job->dim, h->h, job->ffn, h->m, o0, o1);
}

/* Rows a task of `rows` rows of `row_bytes` takes (kernels_decode_q8.c's
 * rule, over every hit's rows). */
static uint32_t task_rows(uint64_t rows, uint64_t row_bytes, uint64_t threads)
{
	uint64_t by_bytes = TASK_BYTES / (row_bytes ? row_bytes : 1);
	uint64_t by_threads = rows / (threads * TASKS_PER_THREAD);
	uint64_t r = by_bytes < by_threads ? by_bytes : by_threads;
	r = r / ROWS_STEP * ROWS_STEP;
	return (uint32_t)(r < ROWS_STEP ? ROWS_STEP : r);
}

static uint64_t mat_row_bytes(const ex_mat *a, uint32_t cols)
{
	if (a->q8)
		return a->j.row_bytes;
	return (uint64_t)cols * (a->type == STRATA_WEIGHT_F32 ? 4 : 2);
}

static uint64_t align64(uint64_t b)
{
	return (b + 63) / 64 * 64;
}

static void mat_of(ex_mat *a, const strata_weight *w, bool q8)
{
	*a = (ex_mat){.w = w->data, .type = w->type, .q8 = q8};
	if (q8)
		strata__qdot_setup(&a->j, NULL, w->data,
				   strata_weight_type_block(w->type), NULL, 1,
				   w->cols, w->rows);
}

/* Bytes of hit e's buffers in the pool's shared buffer: its rows gathered
 * (more than one), x quantized for the gate, h, h quantized, out. */
static uint64_t hit_bytes(const strata_kernel_expert *e, const ex_hit *h,
			  uint32_t dim, uint32_t ffn)
{
	uint64_t m = e->m, b = 0;
	if (m > 1)
		b += align64(m * dim * sizeof(float));
	if (h->gate.q8)
		b += align64(strata__qdot_x_bytes(e->m, dim));
	b += align64(m * ffn * sizeof(float)) + align64(m * dim * sizeof(float));
	if (h->down.q8)
		b += align64(strata__qdot_x_bytes(e->m, ffn));
	return b;
}

/* Lays hit h's buffers out at *at, gathers and quantizes its rows of x. */
static void hit_place(const strata_kernel_expert *e, ex_hit *h,
		      const float *x, uint32_t dim, uint32_t ffn,
		      unsigned char **at)
{
	const uint64_t m = e->m;
	h->m = e->m;
	h->in = x + (uint64_t)e->rows[0] * dim;
	if (m > 1) {
		float *g = (float *)*at;
		for (uint32_t r = 0; r < e->m; r++)
			memcpy(g + r * dim, x + (uint64_t)e->rows[r] * dim,
			       dim * sizeof *g);
		h->in = g;
		*at += align64(m * dim * sizeof(float));
	}
	if (h->gate.q8) {
		strata__qdot_quantize_x(h->gate.j.type, h->in, e->m, dim, *at,
					&h->gate.j.x);
		h->gate.j.n = e->m;
		h->up.j.n = e->m;
		/* gate and up of one type (experts_take): the same bits */
		h->up.j.x = h->gate.j.x;
		*at += align64(strata__qdot_x_bytes(e->m, dim));
	}
	h->h = (float *)*at;
	*at += align64(m * ffn * sizeof(float));
	h->out = (float *)*at;
	*at += align64(m * dim * sizeof(float));
	if (h->down.q8) {
		/* filled by the hit's last gate/up task */
		h->down.j.x.q = (int8_t *)*at;
		h->down.j.n = e->m;
		*at += align64(strata__qdot_x_bytes(e->m, ffn));
	}
}

/* ------------------------------------------------------------------------ */

bool strata__cpu_experts_take(void *ctx, uint32_t n,
			      const strata_kernel_expert *e, uint32_t count)
{
	(void)n;
	if (count > STRATA__CPU_EXPERTS_HITS)
		return false;
	for (uint32_t i = 0; i < count; i++) {
		bool g, u, d;
		if (e[i].m > STRATA__CPU_EXPERTS_ROWS ||
		    e[i].gate.type != e[i].up.type ||
		    !mat_takes(ctx, &e[i].gate, &g) ||
		    !mat_takes(ctx, &e[i].up, &u) ||
		    !mat_takes(ctx, &e[i].down, &d))
			return false;
		/* the fused decode sums read a weight once a row of x: on
		 * more rows the plain product, which reads it once for all
		 * (a 4-token prompt of bf16 experts took twice as long) */
		if (e[i].m > 1 && !(g && d))
			return false;
	}
	return true;
}

strata_status strata__cpu_experts(void *ctx, float *y, const float *x,
				  uint32_t n, const strata_kernel_expert *e,
				  uint32_t count, strata_error *err)
{
	(void)n;
	strata__pool *p = ctx;
	ex_hit hits[STRATA__CPU_EXPERTS_HITS];
	uint32_t at[STRATA__CPU_EXPERTS_HITS]; /* hit i: e[at[i]] */
	const uint32_t dim = e[0].gate.cols, ffn = e[0].gate.rows;
	ex_job job = {.pool = p, .dim = dim, .ffn = ffn, .h = hits};
	uint64_t bytes = 0, rows_a = 0, rows_b = 0, rb_a = 0, rb_b = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (!e[i].m)
			continue;
		ex_hit *h = &hits[job.hits];
		bool q8;
		(void)mat_takes(ctx, &e[i].gate, &q8);
		mat_of(&h->gate, &e[i].gate, q8);
		mat_of(&h->up, &e[i].up, q8);
		(void)mat_takes(ctx, &e[i].down, &q8);
		mat_of(&h->down, &e[i].down, q8);
		bytes += hit_bytes(&e[i], h, dim, ffn);
		uint64_t a = mat_row_bytes(&h->gate, dim) +
			     mat_row_bytes(&h->up, dim);
		uint64_t b = mat_row_bytes(&h->down, ffn);
		rb_a = a > rb_a ? a : rb_a;
		rb_b = b > rb_b ? b : rb_b;
		rows_a += ffn;
		rows_b += dim;
		at[job.hits++] = i;
	}
	if (!job.hits)
		return STRATA_OK;
	unsigned char *buf = strata__pool_shared(p, bytes, "expert activations",
						 err);
	if (!buf)
		return STRATA_E_NOMEM;
	strata_status st = strata__pool_reserve(
		p, strata__qdot_xs_bytes(QDOT_W, dim > ffn ? dim : ffn), err);
	if (st)
		return st;
	uint64_t threads = strata__pool_threads(p);
	job.rows_a = task_rows(rows_a, rb_a, threads);
	job.rows_b = task_rows(rows_b, rb_b, threads);
	uint32_t t = 0;
	for (uint32_t i = 0; i < job.hits; i++) {
		ex_hit *h = &hits[i];
		hit_place(&e[at[i]], h, x, dim, ffn, &buf);
		h->first_a = t;
		h->tasks_a = (ffn + job.rows_a - 1) / job.rows_a;
		t += h->tasks_a;
		atomic_init(&h->done_a, 0);
		atomic_init(&h->ready, 0);
	}
	job.tasks_a = t;
	for (uint32_t i = 0; i < job.hits; i++) {
		hits[i].first_b = t;
		hits[i].tasks_b = (dim + job.rows_b - 1) / job.rows_b;
		t += hits[i].tasks_b;
	}
	job.rows = strata__qdot_pick_rows();
	strata__pool_run(p, ex_task, &job, t);
	/* y[rows[j]] += weight[j] * out[j], hit by hit in order: the
	 * scatter-add kernel's expression (kernels_elementwise.c) */
	for (uint32_t i = 0; i < job.hits; i++) {
		const strata_kernel_expert *h = &e[at[i]];
		for (uint32_t r = 0; r < h->m; r++) {
			float *yr = y + (uint64_t)h->rows[r] * dim;
			const float *o = hits[i].out + (uint64_t)r * dim;
			const float w = h->weight[r];
			for (uint32_t c = 0; c < dim; c++)
				yr[c] += w * o[c];
		}
	}
	return STRATA_OK;
}
