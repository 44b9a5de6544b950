/* backend.c - the public wrappers over a backend's ops table: arguments are
 * checked here once so implementations can trust them (layer: backend). */
#include <inttypes.h>

#include "strata/backend.h"

/* ------------------------------------------------------------------------ */

static strata_status need(bool ok, const char *what, strata_error *err)
{
	if (ok)
		return STRATA_OK;
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "this is a bug in the caller; report it",
			   "backend call with %s", what);
}

#define CHECK(cond, what)                                                      \
	do {                                                                   \
		strata_status s_ = need((cond), (what), err);                  \
		if (s_ != STRATA_OK)                                           \
			return s_;                                             \
	} while (0)

/* ------------------------------------------------------------------------ */

void strata_backend_destroy(strata_backend *b)
{
	if (!b)
		return;
	b->ops->destroy(b->ctx);
	strata_free(b);
}

strata_status strata_backend_get_caps(strata_backend *b,
				      strata_backend_caps *out,
				      strata_error *err)
{
	CHECK(b && out, "a NULL backend or output");
	return b->ops->get_caps(b->ctx, out, err);
}

strata_status strata_backend_memory_info(strata_backend *b,
					 strata_backend_memory *out,
					 strata_error *err)
{
	CHECK(b && out, "a NULL backend or output");
	return b->ops->memory_info(b->ctx, out, err);
}

strata_status strata_backend_host_alloc(strata_backend *b, uint64_t bytes,
					bool pinned, void **out,
					strata_error *err)
{
	CHECK(b && out, "a NULL backend or output");
	CHECK(bytes > 0, "a zero-byte host allocation");
	return b->ops->host_alloc(b->ctx, bytes, pinned, out, err);
}

void strata_backend_host_free(strata_backend *b, void *ptr)
{
	if (b && ptr)
		b->ops->host_free(b->ctx, ptr, NULL);
}

strata_status strata_stream_create(strata_backend *b, strata_stream **out,
				   strata_error *err)
{
	CHECK(b && out, "a NULL backend or output");
	return b->ops->stream_create(b->ctx, out, err);
}

void strata_stream_destroy(strata_backend *b, strata_stream *s)
{
	if (b && s)
		b->ops->stream_destroy(b->ctx, s, NULL);
}

strata_status strata_backend_copy_h2d_async(strata_backend *b,
					    strata_stream *s, void *dst,
					    const void *src, uint64_t bytes,
					    strata_error *err)
{
	CHECK(b && s, "a NULL backend or stream");
	if (bytes == 0)
		return STRATA_OK; /* nothing to move; ordering is unaffected */
	CHECK(dst && src, "a NULL copy source or destination");
	return b->ops->copy_h2d_async(b->ctx, s, dst, src, bytes, err);
}

strata_status strata_backend_copy_d2h_async(strata_backend *b,
					    strata_stream *s, void *dst,
					    const void *src, uint64_t bytes,
					    strata_error *err)
{
	CHECK(b && s, "a NULL backend or stream");
	if (bytes == 0)
		return STRATA_OK; /* nothing to move; ordering is unaffected */
	CHECK(dst && src, "a NULL copy source or destination");
	return b->ops->copy_d2h_async(b->ctx, s, dst, src, bytes, err);
}

strata_status strata_stream_wait_event(strata_backend *b, strata_stream *s,
				       strata_event *e, strata_error *err)
{
	CHECK(b && s && e, "a NULL backend, stream or event");
	if (!b->ops->stream_wait_event)
		return b->ops->event_wait(b->ctx, e, err);
	return b->ops->stream_wait_event(b->ctx, s, e, err);
}

strata_status strata_event_create(strata_backend *b, strata_event **out,
				  strata_error *err)
{
	CHECK(b && out, "a NULL backend or output");
	return b->ops->event_create(b->ctx, out, err);
}

void strata_event_destroy(strata_backend *b, strata_event *e)
{
	if (b && e)
		b->ops->event_destroy(b->ctx, e, NULL);
}

strata_status strata_event_record(strata_backend *b, strata_event *e,
				  strata_stream *s, strata_error *err)
{
	CHECK(b && e && s, "a NULL backend, event or stream");
	return b->ops->event_record(b->ctx, e, s, err);
}

strata_status strata_event_wait(strata_backend *b, strata_event *e,
				strata_error *err)
{
	CHECK(b && e, "a NULL backend or event");
	return b->ops->event_wait(b->ctx, e, err);
}

strata_status strata_event_query(strata_backend *b, strata_event *e,
				 bool *done, strata_error *err)
{
	CHECK(b && e && done, "a NULL backend, event or output");
	return b->ops->event_query(b->ctx, e, done, err);
}

strata_status strata_event_elapsed(strata_backend *b, strata_event *start,
				   strata_event *end, double *seconds,
				   strata_error *err)
{
	CHECK(b && start && end && seconds, "a NULL backend, event or output");
	return b->ops->event_elapsed(b->ctx, start, end, seconds, err);
}

strata_status strata_backend_synchronize(strata_backend *b, strata_stream *s,
					 strata_error *err)
{
	CHECK(b, "a NULL backend");
	return b->ops->synchronize(b->ctx, s, err);
}

strata_status strata_backend_bind_thread(strata_backend *b, strata_error *err)
{
	CHECK(b, "a NULL backend");
	return b->ops->bind_thread ? b->ops->bind_thread(b->ctx, err) : STRATA_OK;
}
