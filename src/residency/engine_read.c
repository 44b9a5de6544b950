/* engine_read.c - the residency engine's reads: the read routine shared by
 * the loads at create and the background readers of the disk mode, and
 * those reader threads with their queue (layer: residency). A finished
 * background read goes to the engine's read_done hook: the reads know
 * nothing of the window (engine_read.h). */
#include <inttypes.h>
#include <string.h>

#include "residency/engine_internal.h"

/* ------------------------------------------------------------------------ */
/* Reading one set of tensors into a block                                  */
/* ------------------------------------------------------------------------ */

strata_status strata__res_buffers_init(strata_residency *e, reader_buffers *b,
				       strata_error *err)
{
	memset(b, 0, sizeof *b);
	size_t n = e->max_tensors ? e->max_tensors : 1;
	b->tensors = strata_calloc_or_error(n, sizeof *b->tensors,
					    "reader tensor list", err);
	b->dst = b->tensors ? strata_calloc_or_error(n, sizeof *b->dst,
						     "reader destination list", err)
			    : NULL;
	if (b->dst && e->scratch_bytes) {
		if (e->scratch_bytes > SIZE_MAX)
			strata_fail(err, STRATA_E_OVERFLOW, "convert smaller tensors",
				    "conversion scratch of %" PRIu64 " bytes",
				    e->scratch_bytes);
		else
			b->scratch = strata_alloc_or_error(
				(size_t)e->scratch_bytes, "conversion scratch", err);
		if (!b->scratch) {
			strata__res_buffers_fini(b);
			return err ? err->code : STRATA_E_NOMEM;
		}
	}
	if (!b->dst) {
		strata__res_buffers_fini(b);
		return STRATA_E_NOMEM;
	}
	return STRATA_OK;
}

void strata__res_buffers_fini(reader_buffers *b)
{
	strata_free(b->tensors);
	strata_free(b->dst);
	strata_free(b->scratch);
	strata_free(b->mapped);
	memset(b, 0, sizeof *b);
}

/* Tensors kept in their file form go in one read call (the store coalesces
 * neighbours); converted ones are read into the scratch and converted into
 * place one at a time. */
strata_status strata__res_read_tensors(strata_residency *e,
				       const strata_residency_tensor *t,
				       size_t count, const uint64_t *offsets,
				       unsigned char *block,
				       reader_buffers *buf, strata_error *err)
{
	const strata_residency_config *c = &e->cfg;
	size_t n = 0;
	for (size_t i = 0; i < count; i++) {
		if (t[i].convert || (buf->mapped && buf->mapped[i]))
			continue;
		buf->tensors[n] = t[i].tensor;
		buf->dst[n] = block + offsets[i];
		n++;
	}
	if (n) {
		strata_status s = c->read(c->read_user, buf->tensors, buf->dst, n, err);
		if (s != STRATA_OK)
			return s;
	}
	for (size_t i = 0; i < count; i++) {
		if (!t[i].convert)
			continue;
		const strata_tensor *tt = t[i].tensor;
		void *scratch = buf->scratch;
		strata_status s = c->read(c->read_user, &tt, &scratch, 1, err);
		if (s == STRATA_OK)
			s = c->convert(c->convert_user, tt, buf->scratch,
				       block + offsets[i],
				       strata__res_tensor_exec(&t[i]), err);
		if (s != STRATA_OK)
			return s;
	}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Background readers (disk mode)                                           */
/* ------------------------------------------------------------------------ */

bool strata__res_enqueue(strata_residency *e, size_t pos, unsigned char *dst,
			 strata_direction dir)
{
	if (e->q_len == e->q_cap)
		return false;
	e->queue[(e->q_head + e->q_len) % e->q_cap] =
		(read_job){.pos = pos, .dst = dst, .dir = dir};
	e->q_len++;
	e->in_flight++;
	pthread_cond_broadcast(&e->cond);
	return true;
}

typedef struct reader_arg {
	strata_residency *e;
	reader_buffers *buf;
} reader_arg;

static void *reader_main(void *p)
{
	reader_arg *a = p;
	strata_residency *e = a->e;
	strata_error berr;
	strata_status bound = strata_backend_bind_thread(e->b, &berr);
	pthread_mutex_lock(&e->lock);
	if (bound != STRATA_OK && !e->failed) {
		e->failed = true;
		e->fail_err = berr;
		strata_error_prefix(&e->fail_err, "starting a background reader");
	}
	for (;;) {
		while (!e->q_len && !e->stop)
			pthread_cond_wait(&e->cond, &e->lock);
		if (e->stop)
			break;
		read_job j = e->queue[e->q_head];
		e->q_head = (e->q_head + 1) % e->q_cap;
		e->q_len--;
		const unit_slot *u = &e->units[j.pos];
		pthread_mutex_unlock(&e->lock);

		strata_error jerr;
		strata_error_clear(&jerr);
		uint64_t t0 = strata_now_ns();
		strata_status s = strata__res_read_tensors(
			e, u->cfg->tensors, u->cfg->tensor_count, u->offsets,
			j.dst, a->buf, &jerr);
		uint64_t ns = strata_now_ns() - t0;

		pthread_mutex_lock(&e->lock);
		e->in_flight--;
		e->read_done(e, &j, s, &jerr, ns);
		pthread_cond_broadcast(&e->cond);
	}
	pthread_mutex_unlock(&e->lock);
	strata_free(a);
	return NULL;
}

strata_status strata__res_start_readers(strata_residency *e, strata_error *err)
{
	uint32_t want = e->cfg.reader_threads ? e->cfg.reader_threads : 1;
	e->threads = strata_calloc_or_error(want, sizeof *e->threads,
					    "reader threads", err);
	if (!e->threads)
		return STRATA_E_NOMEM;
	e->thread_buf = strata_calloc_or_error(want, sizeof *e->thread_buf,
					       "reader buffers", err);
	if (!e->thread_buf)
		return STRATA_E_NOMEM;
	for (uint32_t i = 0; i < want; i++) {
		strata_status s = strata__res_buffers_init(e, &e->thread_buf[i], err);
		if (s != STRATA_OK)
			return s;
		reader_arg *a = strata_alloc_or_error(sizeof *a, "reader argument", err);
		if (!a)
			return STRATA_E_NOMEM;
		a->e = e;
		a->buf = &e->thread_buf[i];
		int rc = pthread_create(&e->threads[i], NULL, reader_main, a);
		if (rc != 0) {
			strata_free(a);
			return strata_fail(err, STRATA_E_THREAD,
					   "raise the process's thread limit or use fewer reader threads",
					   "cannot start background reader %u: %s",
					   i, strerror(rc));
		}
		e->thread_count++;
	}
	return STRATA_OK;
}

void strata__res_stop_readers(strata_residency *e)
{
	if (e->thread_count) {
		pthread_mutex_lock(&e->lock);
		e->stop = true;
		pthread_cond_broadcast(&e->cond);
		pthread_mutex_unlock(&e->lock);
		for (uint32_t i = 0; i < e->thread_count; i++)
			pthread_join(e->threads[i], NULL);
		e->thread_count = 0;
	}
	if (e->thread_buf) {
		uint32_t want = e->cfg.reader_threads ? e->cfg.reader_threads : 1;
		for (uint32_t i = 0; i < want; i++)
			strata__res_buffers_fini(&e->thread_buf[i]);
	}
	strata_free(e->thread_buf);
	strata_free(e->threads);
	e->thread_buf = NULL;
	e->threads = NULL;
}
