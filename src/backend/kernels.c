/* kernels.c - compute contexts, their copies, and the checked wrappers
 * over a backend's kernel slots, with the default compositions of the
 * optional fused slots (layer: backend).
 *
 * Arguments are checked here once, so each backend's kernels can trust
 * them: a shape error is E_INVALID_ARG naming the kernel and the numbers,
 * a weight type the table does not take is E_UNSUPPORTED.
 */
#include <string.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"

static const char *const rope_layout_names[] = {
#define STRATA_ROPE_LAYOUT_NAME(name, text) text,
	STRATA_ROPE_LAYOUT_MAP(STRATA_ROPE_LAYOUT_NAME)
#undef STRATA_ROPE_LAYOUT_NAME
};

static const char *const precision_names[] = {
#define STRATA_PRECISION_NAME(name, text) text,
	STRATA_PRECISION_MAP(STRATA_PRECISION_NAME)
#undef STRATA_PRECISION_NAME
};

static const char *const weight_type_names[] = {
#define STRATA_WEIGHT_TYPE_NAME(name, text) text,
	STRATA_WEIGHT_TYPE_MAP(STRATA_WEIGHT_TYPE_NAME)
#undef STRATA_WEIGHT_TYPE_NAME
};

/* ------------------------------------------------------------------------ */

static strata_status bad(strata_error *err, const char *kernel,
			 const char *what)
{
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller of the kernel",
			   "%s kernel: %s", kernel, what);
}

/* A weight of a type the table takes, with its data and shape. */
static strata_status check_weight(const strata_compute *c,
				  const strata_weight *w, const char *kernel,
				  strata_error *err)
{
	if (!w || !w->data)
		return bad(err, kernel, "NULL weight");
	if (!w->rows || !w->cols)
		return bad(err, kernel, "zero weight dimension");
	if ((unsigned)w->type >= STRATA_WEIGHT_TYPE_COUNT ||
	    !(c->ops->weight_types & STRATA_WEIGHT_BIT(w->type)))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "run the model on a backend that computes "
				   "on this type, or convert it to f32",
				   "%s kernel: the %s kernels take no %s "
				   "weights",
				   kernel, c->ops->name,
				   strata_weight_type_name(w->type));
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

const char *strata_weight_type_name(strata_weight_type t)
{
	if ((unsigned)t >= STRATA_WEIGHT_TYPE_COUNT)
		return "unknown";
	return weight_type_names[t];
}

strata_block_type strata_weight_type_block(strata_weight_type t)
{
	switch (t) {
#define WEIGHT_BLOCK(name, text) \
	case STRATA_WEIGHT_##name: return STRATA_BLOCK_##name;
		STRATA_WEIGHT_TYPE_MAP(WEIGHT_BLOCK)
#undef WEIGHT_BLOCK
	default: return STRATA_BLOCK_COUNT;
	}
}

const char *strata_rope_layout_name(strata_rope_layout l)
{
	if ((unsigned)l >= sizeof rope_layout_names / sizeof *rope_layout_names)
		return "unknown";
	return rope_layout_names[l];
}

const char *strata_precision_name(strata_precision p)
{
	if ((unsigned)p >= STRATA_PRECISION_COUNT)
		return "unknown";
	return precision_names[p];
}

strata_status strata_precision_parse(const char *text, strata_precision *out,
				     strata_error *err)
{
	if (!text || !out)
		return bad(err, "precision", "NULL text or result");
	for (unsigned p = 0; p < STRATA_PRECISION_COUNT; p++)
		if (!strcmp(text, precision_names[p])) {
			*out = (strata_precision)p;
			return STRATA_OK;
		}
	char shown[64];
	strata_escape(shown, sizeof shown, text, strlen(text));
	return strata_fail(err, STRATA_E_USAGE,
			   "use fast (the default: llama.cpp's and "
			   "transformers' numerics) or exact (f32 activations)",
			   "precision '%s' is not fast or exact", shown);
}

strata_status strata_compute_create_with(const strata_kernel_ops *ops,
					 const strata_compute_options *o,
					 strata_compute **out,
					 strata_error *err)
{
	const strata_compute_options defaults = {0};
	if (!o)
		o = &defaults;
	if (!ops || !out)
		return bad(err, "compute", "NULL ops or result");
	if ((unsigned)o->precision >= STRATA_PRECISION_COUNT)
		return bad(err, "compute", "precision out of range");
	strata_compute *c = strata_alloc_or_error(sizeof *c, "compute context",
						  err);
	if (!c)
		return STRATA_E_NOMEM;
	c->ops = ops;
	c->backend = NULL;
	c->precision = o->precision;
	strata_status st = ops->compute_create(o, &c->ctx, err);
	if (st != STRATA_OK) {
		strata_free(c);
		return st;
	}
	*out = c;
	return STRATA_OK;
}

strata_status strata_compute_create(const strata_kernel_ops *ops,
				    uint32_t threads, strata_compute **out,
				    strata_error *err)
{
	const strata_compute_options o = {.threads = threads};
	return strata_compute_create_with(ops, &o, out, err);
}

/* On b's kernel table. */
static strata_status create_on(strata_backend *b,
			       const strata_compute_options *o,
			       strata_compute **out, strata_error *err)
{
	if (!b)
		return bad(err, "compute", "NULL backend");
	if (!b->ops->kernels)
		return strata_fail(err, STRATA_E_BACKEND_UNAVAILABLE,
				   "run with --device cpu",
				   "this backend has no compute kernels");
	strata_status st = strata_compute_create_with(b->ops->kernels, o, out,
						      err);
	if (st == STRATA_OK)
		(*out)->backend = b;
	return st;
}

strata_status strata_compute_create_on_with(strata_backend *b,
					    const strata_compute_options *o,
					    strata_compute **out,
					    uint64_t *device_bytes,
					    strata_error *err)
{
	if (!device_bytes)
		return create_on(b, o, out, err);
	strata_backend_memory before = {0}, after = {0};
	strata_backend_caps caps = {0};
	strata_error ignored;
	*device_bytes = 0;
	/* Only a device of its own says anything: where host code addresses
	 * the device memory (the CPU backend), it is RAM, which moves with
	 * everything else the machine does. */
	bool own = b && strata_backend_get_caps(b, &caps, &ignored) ==
				STRATA_OK &&
		   !caps.device_addressable;
	bool known = own && strata_backend_memory_info(b, &before,
						      &ignored) == STRATA_OK;
	strata_status st = create_on(b, o, out, err);
	known = known && st == STRATA_OK &&
		strata_backend_memory_info(b, &after, &ignored) == STRATA_OK;
	if (known && before.free_bytes > after.free_bytes)
		*device_bytes = before.free_bytes - after.free_bytes;
	return st;
}

strata_status strata_compute_create_on(strata_backend *b, uint32_t threads,
				       strata_compute **out, strata_error *err)
{
	const strata_compute_options o = {.threads = threads};
	return create_on(b, &o, out, err);
}

strata_status strata_compute_create_measured(strata_backend *b,
					     uint32_t threads,
					     strata_compute **out,
					     uint64_t *device_bytes,
					     strata_error *err)
{
	const strata_compute_options o = {.threads = threads};
	return strata_compute_create_on_with(b, &o, out, device_bytes, err);
}

void strata_compute_destroy(strata_compute *c)
{
	if (!c)
		return;
	c->ops->compute_destroy(c->ctx);
	strata_free(c);
}

uint32_t strata_compute_threads(const strata_compute *c)
{
	return c->ops->compute_threads(c->ctx);
}

strata_stream *strata_compute_stream(const strata_compute *c)
{
	return c && c->ops->compute_stream ? c->ops->compute_stream(c->ctx)
					   : NULL;
}

/* The context's stream and backend, for a copy or a wait; *s NULL when the
 * context has no stream (kernels done at return, host memory). */
static strata_status copy_route(strata_compute *c, strata_stream **s,
				const char *what, strata_error *err)
{
	if (!c)
		return bad(err, what, "NULL compute context");
	*s = strata_compute_stream(c);
	if (*s && !c->backend)
		return bad(err, what, "a context made without its backend");
	return STRATA_OK;
}

strata_status strata_compute_upload(strata_compute *c, void *dst,
				    const void *src, uint64_t bytes,
				    strata_error *err)
{
	strata_stream *s = NULL; /* set on success; gcc 13 -O3 cannot tell */
	strata_status st = copy_route(c, &s, "upload", err);
	if (st || bytes == 0)
		return st;
	if (!dst || !src)
		return bad(err, "upload", "NULL buffer");
	if (s)
		return strata_backend_copy_h2d_async(c->backend, s, dst, src,
						     bytes, err);
	memcpy(dst, src, (size_t)bytes);
	return STRATA_OK;
}

strata_status strata_compute_download(strata_compute *c, void *dst,
				      const void *src, uint64_t bytes,
				      strata_error *err)
{
	strata_stream *s = NULL; /* set on success; gcc 13 -O3 cannot tell */
	strata_status st = copy_route(c, &s, "download", err);
	if (st || bytes == 0)
		return st;
	if (!dst || !src)
		return bad(err, "download", "NULL buffer");
	if (s)
		return strata_backend_copy_d2h_async(c->backend, s, dst, src,
						     bytes, err);
	memcpy(dst, src, (size_t)bytes);
	return STRATA_OK;
}

strata_status strata_compute_finish(strata_compute *c, strata_error *err)
{
	strata_stream *s = NULL; /* set on success; gcc 13 -O3 cannot tell */
	strata_status st = copy_route(c, &s, "finish", err);
	if (st || !s)
		return st;
	return strata_backend_synchronize(c->backend, s, err);
}

strata_status strata_compute_reserve(strata_compute *c, uint64_t bytes,
				     strata_error *err)
{
	if (!c)
		return bad(err, "reserve", "NULL compute context");
	if (!bytes || !c->ops->reserve)
		return STRATA_OK;
	return c->ops->reserve(c->ctx, bytes, err);
}

strata_status strata_kernel_matmul(strata_compute *c, float *y, const float *x,
				   const strata_weight *w, const float *bias,
				   uint32_t n, strata_error *err)
{
	if (!c || !y || !x)
		return bad(err, "matmul", "NULL buffer");
	strata_status st = check_weight(c, w, "matmul", err);
	if (st)
		return st;
	if (!n)
		return bad(err, "matmul", "zero dimension");
	if (y == x || (const void *)y == w->data)
		return bad(err, "matmul", "output aliases an input");
	return c->ops->matmul(c->ctx, y, x, w, bias, n, err);
}

strata_status strata_kernel_rmsnorm(strata_compute *c, float *y,
				    const float *x, const strata_weight *w,
				    uint32_t n, float eps, strata_error *err)
{
	if (!c || !y || !x)
		return bad(err, "rmsnorm", "NULL buffer");
	strata_status st = check_weight(c, w, "rmsnorm", err);
	if (st)
		return st;
	if (!n || w->rows != 1)
		return bad(err, "rmsnorm", "zero rows or a weight of several rows");
	if (!(eps >= 0.0f))
		return bad(err, "rmsnorm", "negative or NaN epsilon");
	return c->ops->rmsnorm(c->ctx, y, x, w, n, eps, err);
}

strata_status strata_kernel_rope(strata_compute *c, float *x, uint32_t n,
				 uint32_t pos0, uint32_t heads,
				 uint32_t head_dim, const float *inv_freq,
				 strata_rope_layout layout, strata_error *err)
{
	if (!c || !x || !inv_freq)
		return bad(err, "rope", "NULL buffer");
	if (!n || !heads || !head_dim || head_dim % 2)
		return bad(err, "rope", "zero dimension or odd head size");
	if (layout != STRATA_ROPE_HALF && layout != STRATA_ROPE_INTERLEAVED)
		return bad(err, "rope", "unknown layout");
	if ((uint64_t)pos0 + n > UINT32_MAX)
		return bad(err, "rope", "position past 2^32");
	return c->ops->rope(c->ctx, x, n, pos0, heads, head_dim, inv_freq,
			    layout, err);
}

bool strata_kernel_kv_takes(const strata_compute *c, strata_weight_type t)
{
	if (t == STRATA_WEIGHT_F32)
		return true;
	return c && strata_kv_type_bytes(t) && c->ops->kv_store &&
	       (c->ops->kv_types & STRATA_WEIGHT_BIT(t));
}

uint32_t strata_kv_type_bytes(strata_weight_type t)
{
	switch (t) {
	case STRATA_WEIGHT_F32:
		return 4;
	case STRATA_WEIGHT_F16:
	case STRATA_WEIGHT_BF16:
		return 2;
	default:
		return 0;
	}
}

static strata_status kv_unsupported(const strata_compute *c,
				    strata_weight_type t, const char *kernel,
				    strata_error *err)
{
	return strata_fail(err, STRATA_E_UNSUPPORTED,
			   "use --kv-type f32, or a backend that keeps this "
			   "KV type",
			   "%s kernel: the %s kernels keep no %s KV cache",
			   kernel, c->ops->name, strata_weight_type_name(t));
}

strata_status strata_kernel_kv_store(strata_compute *c, void *dst,
				     strata_weight_type type, const float *src,
				     uint64_t count, strata_error *err)
{
	if (!c || !dst || !src)
		return bad(err, "kv_store", "NULL buffer");
	if (!count)
		return STRATA_OK;
	if (!strata_kernel_kv_takes(c, type))
		return kv_unsupported(c, type, "kv_store", err);
	if (count > UINT64_MAX / 4)
		return bad(err, "kv_store", "count overflows the bytes");
	if (!c->ops->kv_store) { /* F32 on a table without the slot */
		if (c->ops->compute_stream)
			return kv_unsupported(c, type, "kv_store", err);
		memcpy(dst, src, count * sizeof(float));
		return STRATA_OK;
	}
	return c->ops->kv_store(c->ctx, dst, type, src, count, err);
}

strata_status strata_kernel_attention(strata_compute *c, float *out,
				      const float *q, const void *k,
				      const void *v,
				      const strata_attention_shape *s,
				      strata_error *err)
{
	if (!c || !out || !q || !k || !v || !s)
		return bad(err, "attention", "NULL buffer");
	if (!strata_kernel_kv_takes(c, s->kv_type))
		return kv_unsupported(c, s->kv_type, "attention", err);
	if (!s->n || !s->heads || !s->kv_heads || !s->head_dim)
		return bad(err, "attention", "zero dimension");
	if (s->heads % s->kv_heads)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "use a model whose query heads are a "
				   "multiple of its key/value heads",
				   "attention kernel: %u query heads are not "
				   "a multiple of %u key/value heads",
				   s->heads, s->kv_heads);
	if ((uint64_t)s->pos0 + s->n > UINT32_MAX)
		return bad(err, "attention", "position past 2^32");
	return c->ops->attention(c->ctx, out, q, k, v, s, err);
}

strata_status strata_kernel_swiglu(strata_compute *c, float *gate,
				   const float *up, uint64_t count,
				   strata_error *err)
{
	if (!c || !gate || !up)
		return bad(err, "swiglu", "NULL buffer");
	if (!count)
		return STRATA_OK;
	return c->ops->swiglu(c->ctx, gate, up, count, err);
}

strata_status strata_kernel_add(strata_compute *c, float *y, const float *x,
				uint64_t count, strata_error *err)
{
	if (!c || !y || !x)
		return bad(err, "add", "NULL buffer");
	if (!count)
		return STRATA_OK;
	return c->ops->add(c->ctx, y, x, count, err);
}

strata_status strata_kernel_map(strata_compute *c, float *y, const float *x,
				uint64_t count, strata_map_op op, float a,
				strata_error *err)
{
	if (!c || !y || !x)
		return bad(err, "map", "NULL buffer");
	if ((unsigned)op > STRATA_MAP_GELU_MUL ||
	    (op == STRATA_MAP_SOFTCAP && !(a > 0)))
		return bad(err, "map", "unknown operation or a cap not above 0");
	if (!count)
		return STRATA_OK;
	return c->ops->map(c->ctx, y, x, count, op, a, err);
}

strata_status strata_kernel_scatter_add(strata_compute *c, float *x,
					uint32_t x_rows, float *y,
					const int32_t *rows,
					const float *weight, uint32_t m,
					uint32_t dim, strata_error *err)
{
	if (!c || !x || !y || (m && (!rows || !weight)))
		return bad(err, "scatter_add", "NULL buffer");
	if (!m)
		return STRATA_OK;
	for (uint32_t i = 0; i < m; i++)
		if (rows[i] < 0 || (uint32_t)rows[i] >= x_rows)
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "give rows of x",
					   "scatter_add kernel: row %d at %u "
					   "is outside x's %u rows",
					   rows[i], i, x_rows);
	if (c->ops->scatter_add)
		return c->ops->scatter_add(c->ctx, x, y, rows, weight, m, dim,
					   err);
	/* without the op: y scaled in place, then added, a row at a time */
	strata_status st = STRATA_OK;
	for (uint32_t i = 0; st == STRATA_OK && i < m; i++) {
		float *o = y + (uint64_t)i * dim;
		st = c->ops->map(c->ctx, o, o, dim, STRATA_MAP_SCALE, weight[i],
				 err);
		if (st == STRATA_OK)
			st = c->ops->add(c->ctx, x + (uint64_t)rows[i] * dim, o,
					 dim, err);
	}
	return st;
}

strata_status strata_kernel_embed(strata_compute *c, float *x,
				  const strata_weight *table,
				  const int32_t *tokens, uint32_t n,
				  strata_error *err)
{
	if (!c || !x || !tokens)
		return bad(err, "embed", "NULL buffer");
	strata_status st = check_weight(c, table, "embed", err);
	if (st)
		return st;
	if (!n)
		return bad(err, "embed", "zero dimension");
	for (uint32_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint32_t)tokens[i] >= table->rows)
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "give token ids below the "
					   "vocabulary size",
					   "embed kernel: token %d at %u is "
					   "outside the vocabulary of %u",
					   tokens[i], i, table->rows);
	return c->ops->embed(c->ctx, x, table, tokens, n, err);
}
