/* cuda_none.c - the CUDA backend's entry points in a build without CUDA:
 * each says so with a fix, so callers need no #ifdef (layer: backend). */
#include "strata/backend.h"

static strata_status unavailable(strata_error *err)
{
	return strata_fail(err, STRATA_E_BACKEND_UNAVAILABLE,
			   "run with --device cpu, or rebuild strata where nvcc is installed",
			   "this strata was built without CUDA");
}

static int no_cuda_call(void)
{
	return 35; /* cudaErrorInsufficientDriver */
}

static int sys_device_malloc(void **p, size_t b)
{
	(void)p;
	(void)b;
	return no_cuda_call();
}
static int sys_device_free(void *p)
{
	(void)p;
	return no_cuda_call();
}
static int sys_host_alloc(void **p, size_t b, unsigned int f)
{
	(void)p;
	(void)b;
	(void)f;
	return no_cuda_call();
}
static int sys_host_free(void *p)
{
	(void)p;
	return no_cuda_call();
}
static int sys_memcpy_async(void *d, const void *s, size_t b, int k, void *st)
{
	(void)d;
	(void)s;
	(void)b;
	(void)k;
	(void)st;
	return no_cuda_call();
}
static int sys_mem_get_info(size_t *f, size_t *t)
{
	(void)f;
	(void)t;
	return no_cuda_call();
}

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
}

static strata_status none_compute_create(uint32_t threads, void **ctx,
					 strata_error *err)
{
	(void)threads;
	(void)ctx;
	return unavailable(err);
}

static void none_compute_destroy(void *ctx)
{
	(void)ctx;
}

static uint32_t none_compute_threads(void *ctx)
{
	(void)ctx;
	return 0;
}

/* Only compute_create is reachable: no context is ever made. */
const strata_kernel_ops strata_cuda_kernel_ops = {
	.name = "cuda",
	.compute_create = none_compute_create,
	.compute_destroy = none_compute_destroy,
	.compute_threads = none_compute_threads,
};

uint32_t strata_backend_cuda_device_count(void)
{
	return 0;
}

strata_status strata_backend_cuda_create(const strata_backend_cuda_options *opt,
					 strata_backend **out,
					 strata_error *err)
{
	(void)opt;
	(void)out;
	return unavailable(err);
}

strata_stream *strata_cuda_compute_stream(strata_compute *c)
{
	(void)c;
	return NULL;
}

strata_status strata_cuda_stream_wait_event(strata_backend *b,
					    strata_stream *s, strata_event *e,
					    strata_error *err)
{
	(void)b;
	(void)s;
	(void)e;
	return unavailable(err);
}

strata_status strata_cuda_copy_d2h_async(strata_backend *b, strata_stream *s,
					 void *dst, const void *src,
					 uint64_t bytes, strata_error *err)
{
	(void)b;
	(void)s;
	(void)dst;
	(void)src;
	(void)bytes;
	return unavailable(err);
}

strata_status strata_cuda_matmul_half(strata_compute *c, float *y,
				      const float *x, const void *w,
				      strata_cuda_half type, const float *bias,
				      uint32_t n, uint32_t in, uint32_t out,
				      strata_error *err)
{
	(void)c;
	(void)y;
	(void)x;
	(void)w;
	(void)type;
	(void)bias;
	(void)n;
	(void)in;
	(void)out;
	return unavailable(err);
}

strata_status strata_cuda_rope_qk(strata_compute *c, float *q, float *k,
				  uint32_t n, uint32_t pos0, uint32_t heads,
				  uint32_t kv_heads, uint32_t head_dim,
				  const float *inv_freq,
				  strata_rope_layout layout, strata_error *err)
{
	(void)c;
	(void)q;
	(void)k;
	(void)n;
	(void)pos0;
	(void)heads;
	(void)kv_heads;
	(void)head_dim;
	(void)inv_freq;
	(void)layout;
	return unavailable(err);
}

strata_status strata_cuda_gated_half(strata_compute *c, float *y,
				     const float *x,
				     const strata_cuda_half_norm *norm,
				     const void *gate,
				     const void *up, strata_cuda_half type,
				     uint32_t in, uint32_t out,
				     strata_error *err)
{
	(void)c;
	(void)y;
	(void)x;
	(void)norm;
	(void)gate;
	(void)up;
	(void)type;
	(void)in;
	(void)out;
	return unavailable(err);
}

strata_status strata_cuda_rmsnorm_half(strata_compute *c, float *y,
				       const float *x, const void *w,
				       strata_cuda_half type, uint32_t n,
				       uint32_t dim, float eps,
				       strata_error *err)
{
	(void)c;
	(void)y;
	(void)x;
	(void)w;
	(void)type;
	(void)n;
	(void)dim;
	(void)eps;
	return unavailable(err);
}

strata_status strata_cuda_matmul_half_reserve(strata_compute *c,
					      uint64_t bytes,
					      strata_error *err)
{
	(void)c;
	(void)bytes;
	return unavailable(err);
}

strata_status strata_cuda_matmul_half_parts(strata_compute *c, const float *x,
					    const strata_cuda_half_norm *norm,
					    strata_cuda_half type, uint32_t n,
					    uint32_t in,
					    const strata_cuda_half_part *parts,
					    uint32_t count, bool accumulate,
					    strata_error *err)
{
	(void)c;
	(void)x;
	(void)norm;
	(void)type;
	(void)n;
	(void)in;
	(void)parts;
	(void)count;
	(void)accumulate;
	return unavailable(err);
}

strata_status strata_cuda_topk(strata_compute *c, const float *logits,
			       uint32_t vocab, uint32_t k, float *values,
			       int32_t *ids, strata_error *err)
{
	(void)c;
	(void)logits;
	(void)vocab;
	(void)k;
	(void)values;
	(void)ids;
	return unavailable(err);
}
