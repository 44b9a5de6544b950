/* calibrate.c - measures the rates plans predict with: the host memory
 * read rate and dense product rate of the CPU kernels, and for each CUDA
 * device its pinned link both ways, its GEMV rate and its dense product
 * rate, all through the backend's tables (layer: plan).
 *
 * Each measure is the best of `repeats` timed runs after one warm-up: the
 * rate a pass can reach, which is what the plan's model assumes. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "strata/backend.h"
#include "strata/plan.h"

#define COLS 4096u	 /* elements per weight row */
#define PRODUCT_ROWS 64u /* tokens of the dense product */
#define PRODUCT_BYTES ((uint64_t)32 << 20)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One f32 product y (n, rows) = x (n, COLS) . w^T, timed best of repeats
 * (the backend synchronised after each). */
static strata_status time_product(strata_backend *b, strata_compute *c,
				  float *y, const float *x, const void *w,
				  uint32_t rows, uint32_t n, uint32_t repeats,
				  double *best, strata_error *err)
{
	strata_weight wt = {.type = STRATA_WEIGHT_F32, .data = w, .rows = rows,
			    .cols = COLS};
	*best = 0;
	for (uint32_t i = 0; i <= repeats; i++) {
		double t0 = now();
		strata_status s = strata_kernel_matmul(c, y, x, &wt, NULL, n, err);
		if (s == STRATA_OK)
			s = strata_backend_synchronize(b, NULL, err);
		if (s != STRATA_OK)
			return s;
		double t = now() - t0;
		if (i > 0 && (*best == 0 || t < *best)) /* 0: the warm-up */
			*best = t;
	}
	return STRATA_OK;
}

/* Small values that stay finite through any number of products. */
static void fill(float *v, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		v[i] = (float)(i % 7) * 1e-3f;
}

/* ------------------------------------------------------------------------ */
/* The CPU                                                                  */
/* ------------------------------------------------------------------------ */

static strata_status cpu_rates(const strata_plan_calibrate_options *o,
			       strata_plan_rates *r, strata_error *err)
{
	uint32_t rows = (uint32_t)(o->bytes / (COLS * 4));
	uint32_t prows = (uint32_t)(PRODUCT_BYTES / (COLS * 4));
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	float *w = strata_alloc_aligned(64, (size_t)rows * COLS * 4);
	float *x = strata_alloc((size_t)PRODUCT_ROWS * COLS * 4);
	float *y = strata_alloc((size_t)PRODUCT_ROWS * rows * 4);
	strata_status s = STRATA_E_NOMEM;
	if (!w || !x || !y) {
		strata_fail(err, STRATA_E_NOMEM, "give a smaller --bytes",
			    "calibrate: no memory for a %llu-byte matrix",
			    (unsigned long long)o->bytes);
		goto done;
	}
	fill(w, (uint64_t)rows * COLS);
	fill(x, (uint64_t)PRODUCT_ROWS * COLS);
	s = strata_backend_create("cpu", 0, NULL, &b, err);
	if (s == STRATA_OK)
		s = strata_compute_create_on(b, o->threads, &c, err);
	double t = 0;
	if (s == STRATA_OK)
		s = time_product(b, c, y, x, w, rows, 1, o->repeats, &t, err);
	if (s == STRATA_OK)
		r->host_memory = (double)rows * COLS * 4 / t;
	if (s == STRATA_OK)
		s = time_product(b, c, y, x, w, prows, PRODUCT_ROWS, o->repeats,
				 &t, err);
	if (s == STRATA_OK) {
		r->cpu_flops = 2.0 * prows * COLS * PRODUCT_ROWS / t;
		r->threads = strata_compute_threads(c);
	}
done:
	if (s != STRATA_OK && err)
		strata_error_prefix(err, "calibrate the CPU");
	strata_compute_destroy(c);
	strata_backend_destroy(b);
	strata_free(w);
	strata_free(x);
	strata_free(y);
	return s;
}

/* ------------------------------------------------------------------------ */
/* A CUDA device                                                            */
/* ------------------------------------------------------------------------ */

/* Device buffers of one device's measure. */
typedef struct dev_bufs {
	strata_backend *b;
	strata_compute *c;
	strata_stream *s;
	strata_event *e0, *e1;
	strata_arena *arena;
	void *host, *w, *x, *y;
} dev_bufs;

static void dev_fini(dev_bufs *d)
{
	strata_event_destroy(d->b, d->e0);
	strata_event_destroy(d->b, d->e1);
	strata_stream_destroy(d->b, d->s);
	strata_compute_destroy(d->c);
	strata_arena_destroy(d->arena);
	strata_backend_host_free(d->b, d->host);
	strata_backend_destroy(d->b);
}

/* A copy of bytes one way, timed by the stream's events, best of. */
static strata_status time_copy(dev_bufs *d, bool h2d, uint64_t bytes,
			       uint32_t repeats, double *best,
			       strata_error *err)
{
	*best = 0;
	for (uint32_t i = 0; i <= repeats; i++) {
		strata_status s = strata_event_record(d->b, d->e0, d->s, err);
		if (s == STRATA_OK)
			s = h2d ? strata_backend_copy_h2d_async(d->b, d->s, d->w,
								d->host, bytes, err)
				: strata_backend_copy_d2h_async(d->b, d->s, d->host,
								d->w, bytes, err);
		if (s == STRATA_OK)
			s = strata_event_record(d->b, d->e1, d->s, err);
		if (s == STRATA_OK)
			s = strata_event_wait(d->b, d->e1, err);
		double t = 0;
		if (s == STRATA_OK)
			s = strata_event_elapsed(d->b, d->e0, d->e1, &t, err);
		if (s != STRATA_OK)
			return s;
		if (i > 0 && t > 0 && (*best == 0 || t < *best))
			*best = t;
	}
	return STRATA_OK;
}

static strata_status dev_open(dev_bufs *d, uint32_t index, uint64_t bytes,
			      strata_error *err)
{
	uint64_t xy = (uint64_t)PRODUCT_ROWS * (COLS + bytes / (COLS * 4)) * 4;
	strata_status s = strata_backend_create("cuda", index, NULL, &d->b, err);
	if (s == STRATA_OK)
		s = strata_compute_create_on(d->b, 0, &d->c, err);
	if (s == STRATA_OK)
		s = strata_stream_create(d->b, &d->s, err);
	if (s == STRATA_OK)
		s = strata_event_create(d->b, &d->e0, err);
	if (s == STRATA_OK)
		s = strata_event_create(d->b, &d->e1, err);
	if (s == STRATA_OK)
		s = strata_backend_host_alloc(d->b, bytes, true, &d->host, err);
	if (s == STRATA_OK)
		s = strata_arena_create(d->b, STRATA_ARENA_DEVICE,
					bytes + xy + 3 * STRATA_ALIGN,
					"calibration", &d->arena, err);
	if (s == STRATA_OK)
		s = strata_arena_alloc(d->arena, bytes, &d->w, err);
	if (s == STRATA_OK)
		s = strata_arena_alloc(d->arena, (uint64_t)PRODUCT_ROWS * COLS * 4,
				       &d->x, err);
	if (s == STRATA_OK)
		s = strata_arena_alloc(d->arena, xy - (uint64_t)PRODUCT_ROWS * COLS * 4,
				       &d->y, err);
	if (s == STRATA_OK)
		fill(d->host, bytes / 4);
	return s;
}

static strata_status device_rates(const strata_plan_calibrate_options *o,
				  uint32_t index, strata_plan_device_rates *r,
				  strata_error *err)
{
	dev_bufs d;
	memset(&d, 0, sizeof d);
	uint64_t bytes = o->bytes;
	uint32_t rows = (uint32_t)(bytes / (COLS * 4));
	uint32_t prows = (uint32_t)(PRODUCT_BYTES / (COLS * 4));
	snprintf(r->name, sizeof r->name, "cuda:%u", index);
	strata_status s = dev_open(&d, index, bytes, err);
	double t = 0;
	if (s == STRATA_OK)
		s = time_copy(&d, true, bytes, o->repeats, &t, err);
	if (s == STRATA_OK)
		r->h2d = (double)bytes / t;
	if (s == STRATA_OK)
		s = time_copy(&d, false, bytes, o->repeats, &t, err);
	if (s == STRATA_OK)
		r->d2h = (double)bytes / t;
	/* the weights on the device now hold the host's values; x too */
	if (s == STRATA_OK)
		s = strata_backend_copy_h2d_async(d.b, d.s, d.x, d.host,
						  (uint64_t)PRODUCT_ROWS * COLS * 4,
						  err);
	if (s == STRATA_OK)
		s = strata_backend_synchronize(d.b, NULL, err);
	if (s == STRATA_OK)
		s = time_product(d.b, d.c, d.y, d.x, d.w, rows, 1, o->repeats,
				 &t, err);
	if (s == STRATA_OK)
		r->memory = (double)rows * COLS * 4 / t;
	if (s == STRATA_OK)
		s = time_product(d.b, d.c, d.y, d.x, d.w, prows, PRODUCT_ROWS,
				 o->repeats, &t, err);
	if (s == STRATA_OK)
		r->flops = 2.0 * prows * COLS * PRODUCT_ROWS / t;
	if (s != STRATA_OK && err)
		strata_error_prefix(err, "calibrate cuda:%u", index);
	dev_fini(&d);
	return s;
}

/* ------------------------------------------------------------------------ */

strata_status strata_plan_calibrate(const strata_plan_calibrate_options *opt,
				    strata_plan_rates *out, strata_error *err)
{
	strata_plan_calibrate_options o = opt ? *opt
					      : (strata_plan_calibrate_options){0};
	if (!o.bytes)
		o.bytes = (uint64_t)256 << 20;
	if (!o.repeats)
		o.repeats = 3;
	if (o.bytes < PRODUCT_BYTES || o.bytes > ((uint64_t)16 << 30))
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "give --bytes between 32MiB and 16GiB",
				   "calibrate: %llu bytes per measure is outside 32 MiB .. 16 GiB",
				   (unsigned long long)o.bytes);
	o.bytes = o.bytes / (COLS * 4) * (COLS * 4);
	strata_plan_rates r;
	memset(&r, 0, sizeof r);
	strata_status s = cpu_rates(&o, &r, err);
	uint32_t n = o.cpu_only ? 0 : strata_backend_device_count("cuda");
	if (n > STRATA_PLAN_MAX_DEVICES)
		n = STRATA_PLAN_MAX_DEVICES;
	for (uint32_t i = 0; s == STRATA_OK && i < n; i++) {
		s = device_rates(&o, i, &r.devices[i], err);
		r.device_count = i + 1;
	}
	if (s == STRATA_OK)
		*out = r;
	return s;
}
