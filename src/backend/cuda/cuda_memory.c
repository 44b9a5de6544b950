/* cuda_memory.c - the CUDA backend's memory half: one cudaMalloc per arena,
 * pinned host buffers, non-blocking streams, timed events, and the mapping
 * of CUDA errors to strata errors (layer: backend).
 *
 * The backend keeps the regions it handed out (device and pinned host) in
 * two lists, so a pointer it did not make is refused with a clear error
 * instead of reaching cudaFree, and destroy releases whatever is left. All
 * allocation and copy calls go through strata_backend_cuda_sys so tests can
 * make the device run out of memory on demand.
 */
#include <inttypes.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

typedef struct region {
	void *ptr;
	uint64_t bytes;
} region;

typedef struct region_list {
	region *items;
	size_t count, cap;
} region_list;

typedef struct cuda_ctx {
	pthread_mutex_t lock; /* guards the lists */
	int device;
	char name[32]; /* "cuda:N" */
	region_list device_regions, pinned_regions;
	strata_stream *streams;
} cuda_ctx;

/* ------------------------------------------------------------------------ */
/* The replaceable calls                                                    */
/* ------------------------------------------------------------------------ */

static int sys_device_malloc(void **p, size_t bytes)
{
	return (int)cudaMalloc(p, bytes);
}

static int sys_device_free(void *p)
{
	return (int)cudaFree(p);
}

static int sys_host_alloc(void **p, size_t bytes, unsigned int flags)
{
	return (int)cudaHostAlloc(p, bytes, flags);
}

static int sys_host_free(void *p)
{
	return (int)cudaFreeHost(p);
}

static int sys_memcpy_async(void *dst, const void *src, size_t bytes, int kind,
			    void *stream)
{
	return (int)cudaMemcpyAsync(dst, src, bytes, (enum cudaMemcpyKind)kind,
				    (cudaStream_t)stream);
}

static int sys_mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
	return (int)cudaMemGetInfo(free_bytes, total_bytes);
}

static const strata_backend_cuda_sys_table sys_defaults = {
	.device_malloc = sys_device_malloc,
	.device_free = sys_device_free,
	.host_alloc = sys_host_alloc,
	.host_free = sys_host_free,
	.memcpy_async = sys_memcpy_async,
	.mem_get_info = sys_mem_get_info,
};

strata_backend_cuda_sys_table strata_backend_cuda_sys = {
	.device_malloc = sys_device_malloc,
	.device_free = sys_device_free,
	.host_alloc = sys_host_alloc,
	.host_free = sys_host_free,
	.memcpy_async = sys_memcpy_async,
	.mem_get_info = sys_mem_get_info,
};

void strata_backend_cuda_sys_reset(void)
{
	strata_backend_cuda_sys = sys_defaults;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

strata_status strata__cuda_fail(strata_error *err, cudaError_t e,
				const char *what)
{
	/* Allocation failures and "not ready" are not sticky; reading the
	 * last error clears them so the next call does not see them again. */
	(void)cudaGetLastError();
	const char *name = cudaGetErrorName(e), *text = cudaGetErrorString(e);
	switch (e) {
	case cudaErrorMemoryAllocation:
		return strata_fail(err, STRATA_E_DEVICE_OOM,
				   "lower --device-memory or the residency depth (strata plan shows what fits)",
				   "%s: the device is out of memory (%s)", what,
				   name);
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorDevicesUnavailable:
		return strata_fail(err, STRATA_E_BACKEND_UNAVAILABLE,
				   "check nvidia-smi and --device cuda:N, or run with --device cpu",
				   "%s: no usable CUDA device (%s: %s)", what,
				   name, text);
	default:
		return strata_fail(err, STRATA_E_DEVICE,
				   "if the device is healthy (nvidia-smi) this is a bug in strata; report it with the message",
				   "%s: CUDA failed (%s: %s)", what, name, text);
	}
}

/* Switches the calling thread to the backend's device. */
static strata_status use_device(const cuda_ctx *c, strata_error *err)
{
	cudaError_t e = cudaSetDevice(c->device);
	return e == cudaSuccess ? STRATA_OK
				: strata__cuda_fail(err, e, c->name);
}

static strata_status list_add(region_list *l, void *p, uint64_t bytes,
			      strata_error *err)
{
	strata_status s = strata_grow((void **)&l->items, &l->cap, l->count + 1,
				      sizeof *l->items, "CUDA region list", err);
	if (s == STRATA_OK)
		l->items[l->count++] = (region){p, bytes};
	return s;
}

/* Removes p from l; false when l does not hold it. */
static bool list_remove(region_list *l, void *p)
{
	for (size_t i = 0; i < l->count; i++)
		if (l->items[i].ptr == p) {
			l->items[i] = l->items[--l->count];
			return true;
		}
	return false;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                   */
/* ------------------------------------------------------------------------ */

static void cuda_destroy(void *ctx)
{
	cuda_ctx *c = ctx;
	(void)cudaSetDevice(c->device);
	for (size_t i = 0; i < c->device_regions.count; i++)
		strata_backend_cuda_sys.device_free(c->device_regions.items[i].ptr);
	for (size_t i = 0; i < c->pinned_regions.count; i++)
		strata_backend_cuda_sys.host_free(c->pinned_regions.items[i].ptr);
	strata_free(c->device_regions.items);
	strata_free(c->pinned_regions.items);
	pthread_mutex_destroy(&c->lock);
	strata_free(c);
}

static strata_status cuda_get_caps(void *ctx, strata_backend_caps *out,
				   strata_error *err)
{
	cuda_ctx *c = ctx;
	(void)err;
	*out = (strata_backend_caps){.name = c->name,
				     .device_addressable = false,
				     .pinned_host = true,
				     .async_copy = true};
	return STRATA_OK;
}

static strata_status cuda_memory_info(void *ctx, strata_backend_memory *out,
				      strata_error *err)
{
	cuda_ctx *c = ctx;
	strata_status s = use_device(c, err);
	if (s != STRATA_OK)
		return s;
	size_t free_bytes = 0, total_bytes = 0;
	int e = strata_backend_cuda_sys.mem_get_info(&free_bytes, &total_bytes);
	if (e != cudaSuccess)
		return strata__cuda_fail(err, (cudaError_t)e, c->name);
	out->total_bytes = total_bytes;
	out->free_bytes = free_bytes;
	return STRATA_OK;
}

static strata_status cuda_device_alloc(void *ctx, uint64_t bytes, void **out,
				       strata_error *err)
{
	cuda_ctx *c = ctx;
	strata_status s = use_device(c, err);
	if (s != STRATA_OK)
		return s;
	void *p = NULL;
	int e = bytes <= SIZE_MAX
			? strata_backend_cuda_sys.device_malloc(&p, (size_t)bytes)
			: (int)cudaErrorMemoryAllocation;
	if (e != cudaSuccess) {
		s = strata__cuda_fail(err, (cudaError_t)e, c->name);
		if (s != STRATA_E_DEVICE_OOM)
			return s;
		/* Name the request and what the device had, so the budget
		 * can be set from the message alone. */
		size_t free_bytes = 0, total_bytes = 0;
		if (strata_backend_cuda_sys.mem_get_info(&free_bytes,
							 &total_bytes) != cudaSuccess) {
			(void)cudaGetLastError();
			free_bytes = total_bytes = 0;
		}
		return strata_fail(err, STRATA_E_DEVICE_OOM,
				   "lower --device-memory or the residency depth (strata plan shows what fits)",
				   "%s: cannot allocate %" PRIu64
				   " bytes of device memory (%" PRIu64 " of %" PRIu64
				   " bytes free)",
				   c->name, bytes, (uint64_t)free_bytes,
				   (uint64_t)total_bytes);
	}
	pthread_mutex_lock(&c->lock);
	s = list_add(&c->device_regions, p, bytes, err);
	pthread_mutex_unlock(&c->lock);
	if (s != STRATA_OK) {
		strata_backend_cuda_sys.device_free(p);
		return s;
	}
	*out = p;
	return STRATA_OK;
}

static strata_status cuda_device_free(void *ctx, void *ptr, strata_error *err)
{
	cuda_ctx *c = ctx;
	pthread_mutex_lock(&c->lock);
	bool ours = list_remove(&c->device_regions, ptr);
	pthread_mutex_unlock(&c->lock);
	if (!ours)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "%s: freeing a device pointer it did not allocate",
				   c->name);
	(void)cudaSetDevice(c->device);
	int e = strata_backend_cuda_sys.device_free(ptr);
	return e == cudaSuccess ? STRATA_OK
				: strata__cuda_fail(err, (cudaError_t)e, c->name);
}

static strata_status cuda_host_alloc(void *ctx, uint64_t bytes, bool pinned,
				     void **out, strata_error *err)
{
	cuda_ctx *c = ctx;
	if (bytes > SIZE_MAX)
		return strata_fail(err, STRATA_E_NOMEM, "lower --host-memory",
				   "%" PRIu64 " bytes of host memory do not fit size_t",
				   bytes);
	if (!pinned) {
		void *p = strata_alloc_aligned(STRATA_ALIGN, (size_t)bytes);
		if (!p)
			return strata_fail(err, STRATA_E_NOMEM,
					   "free host memory or lower --host-memory",
					   "cannot allocate %" PRIu64 " bytes of host memory",
					   bytes);
		*out = p;
		return STRATA_OK;
	}
	void *p = NULL;
	/* Portable: the pages count as pinned for every device's copies. */
	int e = strata_backend_cuda_sys.host_alloc(&p, (size_t)bytes,
						   cudaHostAllocPortable);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return strata_fail(err, STRATA_E_NOMEM,
				   "lower --host-memory, or raise the locked-memory limit (ulimit -l)",
				   "%s: cannot pin %" PRIu64 " bytes of host memory (%s)",
				   c->name, bytes, cudaGetErrorName((cudaError_t)e));
	}
	pthread_mutex_lock(&c->lock);
	strata_status s = list_add(&c->pinned_regions, p, bytes, err);
	pthread_mutex_unlock(&c->lock);
	if (s != STRATA_OK) {
		strata_backend_cuda_sys.host_free(p);
		return s;
	}
	*out = p;
	return STRATA_OK;
}

static strata_status cuda_host_free(void *ctx, void *ptr, strata_error *err)
{
	cuda_ctx *c = ctx;
	pthread_mutex_lock(&c->lock);
	bool pinned = list_remove(&c->pinned_regions, ptr);
	pthread_mutex_unlock(&c->lock);
	if (!pinned) {
		strata_free(ptr); /* an unpinned buffer from strata_alloc */
		return STRATA_OK;
	}
	int e = strata_backend_cuda_sys.host_free(ptr);
	return e == cudaSuccess ? STRATA_OK
				: strata__cuda_fail(err, (cudaError_t)e, c->name);
}

/* ------------------------------------------------------------------------ */
/* Streams and events                                                       */
/* ------------------------------------------------------------------------ */

static strata_status cuda_stream_create(void *ctx, strata_stream **out,
					strata_error *err)
{
	cuda_ctx *c = ctx;
	strata_status s = use_device(c, err);
	if (s != STRATA_OK)
		return s;
	strata_stream *st = strata_calloc(1, sizeof *st);
	if (!st)
		return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
				   "cannot allocate a CUDA stream");
	/* Non-blocking: no implicit ordering with the legacy default stream,
	 * so a copy stream and a compute stream really run side by side. */
	cudaError_t e = cudaStreamCreateWithFlags(&st->cuda, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		strata_free(st);
		return strata__cuda_fail(err, e, "creating a CUDA stream");
	}
	st->device = c->device;
	pthread_mutex_lock(&c->lock);
	st->next_stream = c->streams;
	c->streams = st;
	pthread_mutex_unlock(&c->lock);
	*out = st;
	return STRATA_OK;
}

static strata_status cuda_stream_destroy(void *ctx, strata_stream *st,
					 strata_error *err)
{
	cuda_ctx *c = ctx;
	pthread_mutex_lock(&c->lock);
	for (strata_stream **p = &c->streams; *p; p = &(*p)->next_stream)
		if (*p == st) {
			*p = st->next_stream;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	cudaError_t e = cudaStreamSynchronize(st->cuda);
	cudaError_t e2 = cudaStreamDestroy(st->cuda);
	strata_free(st);
	if (e == cudaSuccess)
		e = e2;
	return e == cudaSuccess
		       ? STRATA_OK
		       : strata__cuda_fail(err, e, "destroying a CUDA stream");
}

static strata_status copy_async(cuda_ctx *c, strata_stream *st, void *dst,
				const void *src, uint64_t bytes, int kind,
				const char *what, strata_error *err)
{
	if (bytes > SIZE_MAX)
		return strata_fail(err, STRATA_E_OVERFLOW, "copy in smaller pieces",
				   "a copy of %" PRIu64 " bytes does not fit size_t",
				   bytes);
	int e = strata_backend_cuda_sys.memcpy_async(dst, src, (size_t)bytes,
						     kind, (void *)st->cuda);
	if (e == cudaSuccess)
		return STRATA_OK;
	strata__cuda_fail(err, (cudaError_t)e, c->name);
	return strata_error_prefix(err, "%s copy of %" PRIu64 " bytes", what,
				   bytes);
}

static strata_status cuda_copy_h2d_async(void *ctx, strata_stream *st,
					 void *dst, const void *src,
					 uint64_t bytes, strata_error *err)
{
	return copy_async(ctx, st, dst, src, bytes, cudaMemcpyHostToDevice,
			  "host-to-device", err);
}

static strata_status cuda_event_create(void *ctx, strata_event **out,
				       strata_error *err)
{
	strata_status s = use_device(ctx, err);
	if (s != STRATA_OK)
		return s;
	strata_event *ev = strata_calloc(1, sizeof *ev);
	if (!ev)
		return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
				   "cannot allocate a CUDA event");
	/* Default flags keep timing on: event_elapsed is the transfer clock. */
	cudaError_t e = cudaEventCreate(&ev->cuda);
	if (e != cudaSuccess) {
		strata_free(ev);
		return strata__cuda_fail(err, e, "creating a CUDA event");
	}
	*out = ev;
	return STRATA_OK;
}

static strata_status cuda_event_destroy(void *ctx, strata_event *ev,
					strata_error *err)
{
	(void)ctx;
	/* CUDA defers the release of an event still pending on a stream. */
	cudaError_t e = cudaEventDestroy(ev->cuda);
	strata_free(ev);
	return e == cudaSuccess
		       ? STRATA_OK
		       : strata__cuda_fail(err, e, "destroying a CUDA event");
}

static strata_status cuda_event_record(void *ctx, strata_event *ev,
				       strata_stream *st, strata_error *err)
{
	(void)ctx;
	cudaError_t e = cudaEventRecord(ev->cuda, st->cuda);
	if (e != cudaSuccess)
		return strata__cuda_fail(err, e, "recording a CUDA event");
	ev->recorded = true;
	return STRATA_OK;
}

static strata_status cuda_event_wait(void *ctx, strata_event *ev,
				     strata_error *err)
{
	(void)ctx;
	if (!ev->recorded)
		return STRATA_OK;
	cudaError_t e = cudaEventSynchronize(ev->cuda);
	return e == cudaSuccess
		       ? STRATA_OK
		       : strata__cuda_fail(err, e, "waiting for a CUDA event");
}

static strata_status cuda_event_query(void *ctx, strata_event *ev, bool *done,
				      strata_error *err)
{
	(void)ctx;
	if (!ev->recorded) {
		*done = true;
		return STRATA_OK;
	}
	cudaError_t e = cudaEventQuery(ev->cuda);
	if (e == cudaSuccess || e == cudaErrorNotReady) {
		*done = e == cudaSuccess;
		return STRATA_OK;
	}
	return strata__cuda_fail(err, e, "querying a CUDA event");
}

static strata_status cuda_event_elapsed(void *ctx, strata_event *start,
					strata_event *end, double *seconds,
					strata_error *err)
{
	(void)ctx;
	float ms = 0.0f;
	cudaError_t e = cudaErrorNotReady;
	if (start->recorded && end->recorded)
		e = cudaEventElapsedTime(&ms, start->cuda, end->cuda);
	if (e == cudaErrorNotReady) {
		(void)cudaGetLastError();
		return strata_fail(err, STRATA_E_DEVICE,
				   "wait for both events before timing them",
				   "elapsed time asked of an event not yet complete");
	}
	if (e != cudaSuccess)
		return strata__cuda_fail(err, e, "timing two CUDA events");
	*seconds = ms > 0.0f ? (double)ms / 1e3 : 0.0;
	return STRATA_OK;
}

static strata_status cuda_synchronize(void *ctx, strata_stream *st,
				      strata_error *err)
{
	cuda_ctx *c = ctx;
	cudaError_t e;
	if (st) {
		e = cudaStreamSynchronize(st->cuda);
	} else {
		/* Every stream of the device: the backend's and the compute
		 * contexts' alike. */
		strata_status s = use_device(c, err);
		if (s != STRATA_OK)
			return s;
		e = cudaDeviceSynchronize();
	}
	return e == cudaSuccess ? STRATA_OK
				: strata__cuda_fail(err, e, "synchronizing");
}

static strata_status cuda_copy_d2h_async(void *ctx, strata_stream *st,
					 void *dst, const void *src,
					 uint64_t bytes, strata_error *err)
{
	return copy_async(ctx, st, dst, src, bytes, cudaMemcpyDeviceToHost,
			  "device-to-host", err);
}

static strata_status cuda_stream_wait_event(void *ctx, strata_stream *st,
					    strata_event *ev,
					    strata_error *err)
{
	(void)ctx;
	if (!ev->recorded)
		return STRATA_OK; /* a never-recorded event is complete */
	cudaError_t ce = cudaStreamWaitEvent(st->cuda, ev->cuda, 0);
	return ce == cudaSuccess
		       ? STRATA_OK
		       : strata__cuda_fail(err, ce, "making a stream wait for an event");
}

/* CUDA's current device is per host thread: a reader thread that queues
 * copies must switch to the backend's device first. */
static strata_status cuda_bind_thread(void *ctx, strata_error *err)
{
	return use_device(ctx, err);
}

/* ------------------------------------------------------------------------ */

static const strata_backend_ops cuda_ops = {
	.destroy = cuda_destroy,
	.get_caps = cuda_get_caps,
	.memory_info = cuda_memory_info,
	.device_alloc = cuda_device_alloc,
	.device_free = cuda_device_free,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.copy_h2d_async = cuda_copy_h2d_async,
	.copy_d2h_async = cuda_copy_d2h_async,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_wait = cuda_event_wait,
	.event_query = cuda_event_query,
	.event_elapsed = cuda_event_elapsed,
	.synchronize = cuda_synchronize,
	.stream_wait_event = cuda_stream_wait_event,
	.bind_thread = cuda_bind_thread,
	.kernels = &strata_cuda_kernel_ops,
};

static strata_status not_cuda(strata_error *err, const char *call)
{
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller; report it",
			   "%s needs a CUDA backend and its own streams/events",
			   call);
}

uint32_t strata_backend_cuda_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 0) {
		(void)cudaGetLastError();
		return 0;
	}
	return (uint32_t)n;
}

strata_status strata_backend_cuda_create(const strata_backend_cuda_options *opt,
					 strata_backend **out,
					 strata_error *err)
{
	if (!out)
		return not_cuda(err, "strata_backend_cuda_create (NULL output)");
	uint32_t device = opt ? opt->device : 0;
	uint32_t count = strata_backend_cuda_device_count();
	if (device >= count)
		return strata_fail(err, STRATA_E_BACKEND_UNAVAILABLE,
				   count ? "pick --device cuda:N with N below the device count (nvidia-smi lists them)"
					 : "run with --device cpu, or check the NVIDIA driver with nvidia-smi",
				   "CUDA device %u asked for, %u present", device,
				   count);
	cudaError_t e = cudaSetDevice((int)device);
	if (e == cudaSuccess)
		e = cudaFree(NULL); /* creates the context now, not mid-run */
	if (e != cudaSuccess)
		return strata__cuda_fail(err, e, "starting CUDA");
	strata_backend *b = strata_calloc(1, sizeof *b);
	cuda_ctx *c = strata_calloc(1, sizeof *c);
	if (!b || !c) {
		strata_free(b);
		strata_free(c);
		return strata_fail(err, STRATA_E_NOMEM, "free host memory and retry",
				   "cannot allocate the CUDA backend");
	}
	if (pthread_mutex_init(&c->lock, NULL) != 0) {
		strata_free(b);
		strata_free(c);
		return strata_fail(err, STRATA_E_THREAD, "retry",
				   "cannot make the CUDA backend's mutex");
	}
	c->device = (int)device;
	snprintf(c->name, sizeof c->name, "cuda:%u", device);
	b->ops = &cuda_ops;
	b->ctx = c;
	*out = b;
	return STRATA_OK;
}
