/* cpu_memory.c - the CPU backend's memory half: a bounded "device" made of
 * separate RAM regions, host buffers, and streams whose copies run on their
 * own thread so copy and compute truly overlap (layer: backend).
 *
 * One mutex per backend guards every queue and event; each stream has one
 * worker thread and a FIFO of jobs (a copy, or an event mark). Events carry
 * a generation so recording again supersedes older marks, and a count of
 * marks still queued so destroying one never leaves a dangling mark.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "strata/backend.h"

typedef enum job_kind { JOB_COPY, JOB_MARK } job_kind;

/* Jobs made with each stream: a window's copies and event marks in flight
 * stay well below this. */
#define JOBS_PER_STREAM 64

typedef struct job {
	struct job *next;
	job_kind kind;
	void *dst;
	const void *src;
	size_t bytes;
	strata_event *event;
	uint64_t gen;
	bool from_block; /* part of its stream's job block, not freed alone */
} job;

typedef struct cpu_ctx cpu_ctx;

struct strata_stream {
	cpu_ctx *ctx;
	pthread_t thread;
	pthread_cond_t work;
	job *head, *tail;
	uint64_t queued, completed;
	bool stop;
	struct strata_stream *next_stream;
	/* Finished jobs kept for reuse, first from one block made with the
	 * stream, so a steady run of copies and event marks (one per layer
	 * per token) allocates nothing. */
	job *spare;
	job *block;
};

struct strata_event {
	uint64_t gen;	   /* current recording; marks of older ones are stale */
	uint64_t pending;  /* marks still queued */
	uint64_t ns;	   /* when the current mark completed */
	bool recorded, done;
};

typedef struct region {
	void *ptr;
	uint64_t bytes;
} region;

struct cpu_ctx {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a job completed */
	uint64_t limit_bytes;	/* 0: unbounded */
	bool hide_addressable;	/* test option */
	uint64_t used_bytes;
	region *regions;
	size_t region_count, region_cap;
	strata_stream *streams;
};

/* ------------------------------------------------------------------------ */

static void *default_region_alloc(size_t alignment, size_t bytes)
{
	void *p = NULL;
	return posix_memalign(&p, alignment, bytes) == 0 ? p : NULL;
}

static const strata_backend_cpu_sys_table sys_defaults = {
	.region_alloc = default_region_alloc,
	.region_free = free,
};

strata_backend_cpu_sys_table strata_backend_cpu_sys = {
	.region_alloc = default_region_alloc,
	.region_free = free,
};

void strata_backend_cpu_sys_reset(void)
{
	strata_backend_cpu_sys = sys_defaults;
}

/* ------------------------------------------------------------------------ */

static void *stream_main(void *arg)
{
	strata_stream *s = arg;
	cpu_ctx *c = s->ctx;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->work, &c->lock);
		if (!s->head)
			break;
		job *j = s->head;
		s->head = j->next;
		if (!s->head)
			s->tail = NULL;
		if (j->kind == JOB_COPY) {
			pthread_mutex_unlock(&c->lock);
			memcpy(j->dst, j->src, j->bytes);
			pthread_mutex_lock(&c->lock);
		} else {
			strata_event *e = j->event;
			e->pending--;
			if (e->gen == j->gen) {
				e->ns = strata_now_ns();
				e->done = true;
			}
		}
		s->completed++;
		pthread_cond_broadcast(&c->changed);
		j->next = s->spare;
		s->spare = j;
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Appends j to s; called with the lock held. */
static void enqueue(strata_stream *s, job *j)
{
	j->next = NULL;
	if (s->tail)
		s->tail->next = j;
	else
		s->head = j;
	s->tail = j;
	s->queued++;
	pthread_cond_signal(&s->work);
}

/* A zeroed job: a spare one of the stream when there is one, else a new
 * allocation (kept as a spare afterwards). */
static job *job_get(cpu_ctx *c, strata_stream *s)
{
	pthread_mutex_lock(&c->lock);
	job *j = s->spare;
	if (j)
		s->spare = j->next;
	pthread_mutex_unlock(&c->lock);
	if (!j)
		return strata_calloc(1, sizeof *j);
	bool from_block = j->from_block;
	memset(j, 0, sizeof *j);
	j->from_block = from_block;
	return j;
}

static strata_status no_job(strata_error *err, const char *what)
{
	return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
			   "out of memory queueing %s on a CPU stream", what);
}

/* ------------------------------------------------------------------------ */

static void cpu_destroy(void *ctx)
{
	cpu_ctx *c = ctx;
	for (size_t i = 0; i < c->region_count; i++)
		strata_backend_cpu_sys.region_free(c->regions[i].ptr);
	strata_free(c->regions);
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
	strata_free(c);
}

static strata_status cpu_get_caps(void *ctx, strata_backend_caps *out,
				  strata_error *err)
{
	cpu_ctx *c = ctx;
	(void)err;
	*out = (strata_backend_caps){.name = "cpu",
				     .device_addressable = !c->hide_addressable,
				     .pinned_host = false,
				     .async_copy = true};
	return STRATA_OK;
}

static strata_status cpu_memory_info(void *ctx, strata_backend_memory *out,
				     strata_error *err)
{
	cpu_ctx *c = ctx;
	(void)err;
	pthread_mutex_lock(&c->lock);
	out->total_bytes = c->limit_bytes ? c->limit_bytes : UINT64_MAX;
	out->free_bytes = out->total_bytes - c->used_bytes;
	pthread_mutex_unlock(&c->lock);
	return STRATA_OK;
}

static strata_status cpu_device_alloc(void *ctx, uint64_t bytes, void **out,
				      strata_error *err)
{
	cpu_ctx *c = ctx;
	strata_status s = STRATA_OK;
	pthread_mutex_lock(&c->lock);
	if (c->limit_bytes && bytes > c->limit_bytes - c->used_bytes) {
		s = strata_fail(err, STRATA_E_DEVICE_OOM,
				"lower the device memory asked for or raise the CPU backend's bound",
				"CPU device memory: %" PRIu64 " bytes asked, %" PRIu64
				" of %" PRIu64 " free",
				bytes, c->limit_bytes - c->used_bytes, c->limit_bytes);
		goto done;
	}
	s = strata_grow((void **)&c->regions, &c->region_cap,
			c->region_count + 1, sizeof *c->regions,
			"CPU device region list", err);
	if (s != STRATA_OK)
		goto done;
	void *p = bytes <= SIZE_MAX ? strata_backend_cpu_sys.region_alloc(
					      STRATA_ALIGN, (size_t)bytes)
				    : NULL;
	if (!p) {
		s = strata_fail(err, STRATA_E_DEVICE_OOM,
				"free memory or lower the device memory asked for",
				"CPU device memory: cannot allocate a region of %" PRIu64
				" bytes", bytes);
		goto done;
	}
	c->regions[c->region_count++] = (region){p, bytes};
	c->used_bytes += bytes;
	*out = p;
done:
	pthread_mutex_unlock(&c->lock);
	return s;
}

static strata_status cpu_device_free(void *ctx, void *ptr, strata_error *err)
{
	cpu_ctx *c = ctx;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->region_count; i++) {
		if (c->regions[i].ptr != ptr)
			continue;
		c->used_bytes -= c->regions[i].bytes;
		c->regions[i] = c->regions[--c->region_count];
		pthread_mutex_unlock(&c->lock);
		strata_backend_cpu_sys.region_free(ptr);
		return STRATA_OK;
	}
	pthread_mutex_unlock(&c->lock);
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller; report it",
			   "freeing a CPU device pointer that was not allocated");
}

static strata_status cpu_host_alloc(void *ctx, uint64_t bytes, bool pinned,
				    void **out, strata_error *err)
{
	(void)ctx;
	(void)pinned; /* nothing to pin on the CPU backend */
	void *p = bytes <= SIZE_MAX
			  ? strata_alloc_aligned(STRATA_ALIGN, (size_t)bytes)
			  : NULL;
	if (!p)
		return strata_fail(err, STRATA_E_NOMEM,
				   "free host memory or lower --host-memory",
				   "cannot allocate %" PRIu64 " bytes of host memory",
				   bytes);
	*out = p;
	return STRATA_OK;
}

static strata_status cpu_host_free(void *ctx, void *ptr, strata_error *err)
{
	(void)ctx;
	(void)err;
	strata_free(ptr);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Streams and events                                                       */
/* ------------------------------------------------------------------------ */

static strata_status cpu_stream_create(void *ctx, strata_stream **out,
				       strata_error *err)
{
	cpu_ctx *c = ctx;
	strata_stream *s = strata_calloc(1, sizeof *s);
	job *block = s ? strata_calloc(JOBS_PER_STREAM, sizeof *block) : NULL;
	if (!block) {
		strata_free(s);
		return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
				   "cannot allocate a CPU stream");
	}
	for (int i = 0; i < JOBS_PER_STREAM; i++) {
		block[i].from_block = true;
		block[i].next = i + 1 < JOBS_PER_STREAM ? &block[i + 1] : NULL;
	}
	s->block = s->spare = block;
	s->ctx = c;
	if (pthread_cond_init(&s->work, NULL) != 0) {
		strata_free(block);
		strata_free(s);
		return strata_fail(err, STRATA_E_THREAD, "retry; the system is short of resources",
				   "cannot make a CPU stream's condition variable");
	}
	int rc = pthread_create(&s->thread, NULL, stream_main, s);
	if (rc != 0) {
		pthread_cond_destroy(&s->work);
		strata_free(block);
		strata_free(s);
		return strata_fail(err, STRATA_E_THREAD,
				   "raise the process's thread limit or retry",
				   "cannot start a CPU stream's copy thread: %s",
				   strerror(rc));
	}
	pthread_mutex_lock(&c->lock);
	s->next_stream = c->streams;
	c->streams = s;
	pthread_mutex_unlock(&c->lock);
	*out = s;
	return STRATA_OK;
}

static strata_status cpu_stream_destroy(void *ctx, strata_stream *s,
					strata_error *err)
{
	cpu_ctx *c = ctx;
	(void)err;
	pthread_mutex_lock(&c->lock);
	s->stop = true; /* the worker drains its queue before it exits */
	pthread_cond_signal(&s->work);
	for (strata_stream **p = &c->streams; *p; p = &(*p)->next_stream)
		if (*p == s) {
			*p = s->next_stream;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->work);
	while (s->spare) {
		job *j = s->spare;
		s->spare = j->next;
		if (!j->from_block)
			strata_free(j);
	}
	strata_free(s->block);
	strata_free(s);
	return STRATA_OK;
}

static strata_status cpu_copy_h2d_async(void *ctx, strata_stream *s,
					void *dst, const void *src,
					uint64_t bytes, strata_error *err)
{
	cpu_ctx *c = ctx;
	if (bytes > SIZE_MAX)
		return strata_fail(err, STRATA_E_OVERFLOW, "copy in smaller pieces",
				   "a copy of %" PRIu64 " bytes does not fit size_t",
				   bytes);
	job *j = job_get(c, s);
	if (!j)
		return no_job(err, "a copy");
	j->kind = JOB_COPY;
	j->dst = dst;
	j->src = src;
	j->bytes = (size_t)bytes;
	pthread_mutex_lock(&c->lock);
	enqueue(s, j);
	pthread_mutex_unlock(&c->lock);
	return STRATA_OK;
}

static strata_status cpu_event_create(void *ctx, strata_event **out,
				      strata_error *err)
{
	(void)ctx;
	strata_event *e = strata_calloc(1, sizeof *e);
	if (!e)
		return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
				   "cannot allocate a CPU event");
	*out = e;
	return STRATA_OK;
}

static strata_status cpu_event_destroy(void *ctx, strata_event *e,
				       strata_error *err)
{
	cpu_ctx *c = ctx;
	(void)err;
	pthread_mutex_lock(&c->lock);
	while (e->pending)
		pthread_cond_wait(&c->changed, &c->lock);
	pthread_mutex_unlock(&c->lock);
	strata_free(e);
	return STRATA_OK;
}

static strata_status cpu_event_record(void *ctx, strata_event *e,
				      strata_stream *s, strata_error *err)
{
	cpu_ctx *c = ctx;
	job *j = job_get(c, s);
	if (!j)
		return no_job(err, "an event");
	pthread_mutex_lock(&c->lock);
	e->gen++;
	e->recorded = true;
	e->done = false;
	e->pending++;
	j->kind = JOB_MARK;
	j->event = e;
	j->gen = e->gen;
	enqueue(s, j);
	pthread_mutex_unlock(&c->lock);
	return STRATA_OK;
}

static strata_status cpu_event_wait(void *ctx, strata_event *e,
				    strata_error *err)
{
	cpu_ctx *c = ctx;
	(void)err;
	pthread_mutex_lock(&c->lock);
	while (e->recorded && !e->done)
		pthread_cond_wait(&c->changed, &c->lock);
	pthread_mutex_unlock(&c->lock);
	return STRATA_OK;
}

static strata_status cpu_event_query(void *ctx, strata_event *e, bool *done,
				     strata_error *err)
{
	cpu_ctx *c = ctx;
	(void)err;
	pthread_mutex_lock(&c->lock);
	*done = !e->recorded || e->done;
	pthread_mutex_unlock(&c->lock);
	return STRATA_OK;
}

static strata_status cpu_event_elapsed(void *ctx, strata_event *start,
				       strata_event *end, double *seconds,
				       strata_error *err)
{
	cpu_ctx *c = ctx;
	strata_status s = STRATA_OK;
	pthread_mutex_lock(&c->lock);
	if (!start->recorded || !end->recorded || !start->done || !end->done)
		s = strata_fail(err, STRATA_E_DEVICE,
				"wait for both events before timing them",
				"elapsed time asked of an event not yet complete");
	else
		*seconds = end->ns >= start->ns
				   ? (double)(end->ns - start->ns) / 1e9
				   : 0.0;
	pthread_mutex_unlock(&c->lock);
	return s;
}

static strata_status cpu_synchronize(void *ctx, strata_stream *s,
				     strata_error *err)
{
	cpu_ctx *c = ctx;
	(void)err;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		bool idle = true;
		for (strata_stream *t = s ? s : c->streams; t;
		     t = s ? NULL : t->next_stream)
			if (t->completed != t->queued)
				idle = false;
		if (idle)
			break;
		pthread_cond_wait(&c->changed, &c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

static const strata_backend_ops cpu_ops = {
	.destroy = cpu_destroy,
	.get_caps = cpu_get_caps,
	.memory_info = cpu_memory_info,
	.device_alloc = cpu_device_alloc,
	.device_free = cpu_device_free,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.stream_create = cpu_stream_create,
	.stream_destroy = cpu_stream_destroy,
	.copy_h2d_async = cpu_copy_h2d_async,
	/* both memories are RAM: a copy either way is the same job */
	.copy_d2h_async = cpu_copy_h2d_async,
	.event_create = cpu_event_create,
	.event_destroy = cpu_event_destroy,
	.event_record = cpu_event_record,
	.event_wait = cpu_event_wait,
	.event_query = cpu_event_query,
	.event_elapsed = cpu_event_elapsed,
	.synchronize = cpu_synchronize,
	/* stream_wait_event: none, the wrapper waits on the host */
	.kernels = &strata_cpu_kernel_ops,
};

strata_status strata_backend_cpu_create(const strata_backend_cpu_options *opt,
					strata_backend **out,
					strata_error *err)
{
	if (!out)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "CPU backend created with a NULL output");
	strata_backend *b = strata_calloc(1, sizeof *b);
	cpu_ctx *c = strata_calloc(1, sizeof *c);
	if (!b || !c) {
		strata_free(b);
		strata_free(c);
		return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
				   "cannot allocate the CPU backend");
	}
	if (pthread_mutex_init(&c->lock, NULL) != 0) {
		strata_free(b);
		strata_free(c);
		return strata_fail(err, STRATA_E_THREAD, "retry",
				   "cannot make the CPU backend's mutex");
	}
	if (pthread_cond_init(&c->changed, NULL) != 0) {
		pthread_mutex_destroy(&c->lock);
		strata_free(b);
		strata_free(c);
		return strata_fail(err, STRATA_E_THREAD, "retry",
				   "cannot make the CPU backend's condition variable");
	}
	c->limit_bytes = opt ? opt->device_budget_bytes : 0;
	c->hide_addressable = opt && opt->hide_addressable;
	b->ops = &cpu_ops;
	b->ctx = c;
	*out = b;
	return STRATA_OK;
}
