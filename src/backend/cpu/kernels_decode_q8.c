/* kernels_decode_q8.c - the fused one-row products (kernels_decode.c's
 * scheme) on weights in the GGUF block types, through the
 * activation-quantized decode kernels (qdot.h): products sharing their
 * input in one parallel region (q, k and v), added into their output in
 * place (the residual products), and the MLP's gate and up with their
 * SwiGLU (layer: backend).
 *
 * Why: run as the plain products run them, a decode layer is seven jobs of
 * the pool, each ending with the threads waiting for the slowest, then an
 * add and a SwiGLU each on a job of its own; a layer read its quantized
 * weights at 0.65 (Q8_0) and 0.67 (Q4_K) of the memory rate on 2 threads
 * where one product reached 0.77 and 0.82. Here, as bf16 and f16 do, a
 * product set is one job of many small runs of rows claimed in order (a
 * thread that finishes takes the next), the add and the SwiGLU done by the
 * thread that made the rows.
 *
 * The same bits as the plain path (test_cpu_decode_q8 checks it): x is
 * quantized once a product as matmul_qdot quantizes it (once for products
 * of one type), each run of rows goes to the row kernel the plain product
 * picks (strata__qdot_pick_rows), whose outputs do not depend on which
 * rows a call takes (qdot_rows.h), and the add and the SwiGLU are the
 * plain kernels' expressions. Only in the Q8 decode mode (--precision
 * exact keeps the exact kernels) and one row of x. */
#include <math.h>

#include "backend/cpu/kernels_internal.h"
#include "backend/cpu/qdot.h"

/* The weight bytes a task aims for, the tasks a thread at least (where
 * the rows allow), rows taken in multiples of ROWS_STEP: kernels_decode.c's
 * figures. Products of fewer than SMALL_ELEMENTS weights in all are one
 * task a part on the calling thread. */
#define TASK_BYTES (192u << 10)
#define TASKS_PER_THREAD 6u
#define ROWS_STEP 4u
#define SMALL_ELEMENTS 65536u
/* Outputs a kernel call makes into the stack (added, or gated). */
#define TMP_ROWS 256u

typedef struct q8_part {
	strata__qjob j; /* x, y and bias set; gated: j the gate, up below */
	uint32_t rows_per_task, first_task;
} q8_part;

typedef struct q8_job {
	strata__pool *pool;
	strata__qdot_rows_fn rows;
	bool accumulate, gated;
	uint32_t parts, tasks; /* gated: parts 2, gate then up, one task set */
	q8_part p[STRATA_KERNEL_PRODUCTS_MAX];
} q8_job;

/* Outputs [a, b) of j (b - a <= TMP_ROWS) into tmp[0 .. b - a): the same
 * rows of the weight, shifted so that the kernel writes from tmp. */
static void rows_into(const q8_job *job, const strata__qjob *j, float *tmp,
		      uint32_t a, uint32_t b)
{
	strata__qjob jt = *j;
	jt.w = j->w + (uint64_t)a * j->row_bytes;
	jt.bias = j->bias ? j->bias + a : NULL;
	jt.y = tmp;
	jt.out = b - a;
	job->rows(&jt, 0, b - a);
}

static void q8_task(void *arg, uint32_t task)
{
	const q8_job *job = arg;
	uint32_t i = 0;
	while (i + 1 < job->parts && !job->gated &&
	       task >= job->p[i + 1].first_task)
		i++;
	const q8_part *q = &job->p[i];
	uint32_t o0 = (task - q->first_task) * q->rows_per_task;
	uint32_t o1 = q->j.out - o0 < q->rows_per_task ? q->j.out
						       : o0 + q->rows_per_task;
	strata__qjob j = q->j;
	j.xs = strata__pool_scratch(job->pool);
	if (!job->accumulate && !job->gated) {
		job->rows(&j, o0, o1);
		return;
	}
	float tmp[TMP_ROWS];
	for (uint32_t a = o0; a < o1; a += TMP_ROWS) {
		uint32_t b = o1 - a < TMP_ROWS ? o1 : a + TMP_ROWS;
		float *y = j.y + a;
		if (job->gated) {
			strata__qjob u = job->p[1].j;
			u.xs = j.xs;
			job->rows(&j, a, b);
			rows_into(job, &u, tmp, a, b);
			/* the SwiGLU kernel's expression (kernels_elementwise.c) */
			for (uint32_t r = 0; r < b - a; r++)
				y[r] = y[r] / (1.0f + expf(-y[r])) * tmp[r];
			continue;
		}
		rows_into(job, &j, tmp, a, b);
		for (uint32_t r = 0; r < b - a; r++)
			y[r] += tmp[r]; /* the add kernel's */
	}
}

/* Rows a task of `rows` rows of `row_bytes` (both matrices for gated)
 * takes: about TASK_BYTES, at least TASKS_PER_THREAD tasks a thread
 * where the rows allow, a multiple of ROWS_STEP. */
static uint32_t task_rows(uint64_t rows, uint64_t row_bytes, uint64_t threads)
{
	uint64_t by_bytes = TASK_BYTES / (row_bytes ? row_bytes : 1);
	uint64_t by_threads = rows / (threads * TASKS_PER_THREAD);
	uint64_t r = by_bytes < by_threads ? by_bytes : by_threads;
	r = r / ROWS_STEP * ROWS_STEP;
	return (uint32_t)(r < ROWS_STEP ? ROWS_STEP : r);
}

/* Tasks of every part (one a part when small); whether small. */
static bool plan_tasks(q8_job *job)
{
	uint64_t threads = strata__pool_threads(job->pool), elements = 0;
	for (uint32_t i = 0; i < job->parts; i++)
		elements += (uint64_t)job->p[i].j.out * job->p[i].j.in;
	bool small = elements < SMALL_ELEMENTS;
	uint32_t parts = job->gated ? 1 : job->parts, t = 0;
	for (uint32_t i = 0; i < parts; i++) {
		q8_part *q = &job->p[i];
		uint64_t rb = q->j.row_bytes;
		if (job->gated)
			rb += job->p[1].j.row_bytes;
		q->rows_per_task = small ? q->j.out
					 : task_rows(q->j.out, rb, threads);
		if (!q->rows_per_task)
			q->rows_per_task = 1; /* no rows: one empty task */
		q->first_task = t;
		t += (q->j.out + q->rows_per_task - 1) / q->rows_per_task;
	}
	job->tasks = t;
	return small;
}

typedef struct one_task {
	q8_job *job;
	uint32_t task;
} one_task;

static void run_one(void *arg, uint32_t task)
{
	(void)task;
	const one_task *o = arg;
	q8_task(o->job, o->task);
}

/* x quantized for every part (once for parts of one type) into the pool's
 * shared buffer, the threads' scratch made room for x's prepared chunks,
 * then the job. */
static strata_status run_job(q8_job *job, const float *x, strata_error *err)
{
	strata__pool *p = job->pool;
	const uint32_t in = job->p[0].j.in;
	uint64_t xb = strata__qdot_x_bytes(1, in);
	xb = (xb + 63) / 64 * 64; /* each part's x 64-byte aligned */
	unsigned char *buf = strata__pool_shared(p, xb * job->parts,
						 "quantized activations", err);
	if (!buf)
		return STRATA_E_NOMEM;
	strata_status st = strata__pool_reserve(p, strata__qdot_xs_bytes(1, in),
						err);
	if (st != STRATA_OK)
		return st;
	for (uint32_t i = 0; i < job->parts; i++) {
		strata__qjob *j = &job->p[i].j;
		uint32_t k = 0;
		while (k < i && job->p[k].j.type != j->type)
			k++;
		if (k < i)
			j->x = job->p[k].j.x; /* the same bits: same type */
		else
			strata__qdot_quantize_x(j->type, x, 1, in, buf + xb * i,
						&j->x);
	}
	job->rows = strata__qdot_pick_rows();
	if (plan_tasks(job)) {
		/* small: not worth waking the pool; one task a call runs on
		 * this thread, in the scratch slot of the pool's caller */
		for (uint32_t t = 0; t < job->tasks; t++) {
			one_task one = {job, t};
			strata__pool_run(p, run_one, &one, 1);
		}
		return STRATA_OK;
	}
	strata__pool_run(p, q8_task, job, job->tasks);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

bool strata__cpu_decode_q8_take(void *ctx, uint32_t n,
				const strata_weight *const *w, uint32_t count)
{
	if (n != 1 || strata__pool_decode_mode(ctx) != STRATA__DECODE_Q8)
		return false;
	for (uint32_t i = 0; i < count; i++) {
		strata_block_type bt = strata_weight_type_block(w[i]->type);
		if (w[i]->type == STRATA_WEIGHT_F32 ||
		    w[i]->type == STRATA_WEIGHT_BF16 ||
		    w[i]->type == STRATA_WEIGHT_F16 || !strata__qdot_has(bt) ||
		    w[i]->cols % strata_block_elements(bt))
			return false; /* the plain path says what is wrong */
	}
	return true;
}

static void part_of(q8_part *q, float *y, const strata_weight *w,
		    const float *bias)
{
	*q = (q8_part){0};
	strata__qdot_setup(&q->j, y, w->data, strata_weight_type_block(w->type),
			   bias, 1, w->cols, w->rows);
}

strata_status strata__cpu_decode_q8_products(void *ctx, const float *x,
					     const strata_kernel_product *p,
					     uint32_t count, bool accumulate,
					     strata_error *err)
{
	q8_job job = {.pool = ctx, .accumulate = accumulate, .parts = count};
	for (uint32_t i = 0; i < count; i++)
		part_of(&job.p[i], p[i].y, &p[i].w, p[i].bias);
	return run_job(&job, x, err);
}

strata_status strata__cpu_decode_q8_gated(void *ctx, float *y, const float *x,
					  const strata_weight *gate,
					  const strata_weight *up,
					  strata_error *err)
{
	q8_job job = {.pool = ctx, .gated = true, .parts = 2};
	part_of(&job.p[0], y, gate, NULL);
	part_of(&job.p[1], NULL, up, NULL);
	return run_job(&job, x, err);
}
