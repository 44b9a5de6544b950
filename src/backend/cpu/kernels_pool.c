/* kernels_pool.c - the CPU kernels' persistent thread pool: workers are
 * started once per compute context and woken per parallel region, so a token
 * costs no thread creation and no allocation (layer: backend).
 *
 * Waking sleeps on a condition variable only after a short spin: a decode
 * step runs a few hundred parallel regions back to back, and a futex wake
 * per region would cost more than a small matrix-vector product.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "backend/cpu/kernels_internal.h"

#define POOL_MAX_THREADS 512u
#define POOL_SPIN 4096

struct strata__pool {
	pthread_t *threads;	/* n_workers */
	uint32_t n_workers;
	pthread_mutex_t mu;
	pthread_cond_t wake;	/* a new generation was published */
	pthread_cond_t done;	/* busy reached 0 */
	atomic_uint_fast64_t generation;
	atomic_uint next_task;
	atomic_uint busy;	/* workers still inside the current job */
	atomic_bool stop;
	/* The current job, written before generation is bumped. */
	strata__pool_fn fn;
	void *arg;
	uint32_t n_tasks;
};

/* ------------------------------------------------------------------------ */

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void drain(strata__pool *p)
{
	for (;;) {
		uint32_t t = atomic_fetch_add_explicit(&p->next_task, 1,
						       memory_order_relaxed);
		if (t >= p->n_tasks)
			return;
		p->fn(p->arg, t);
	}
}

static uint_fast64_t wait_generation(strata__pool *p, uint_fast64_t seen)
{
	uint_fast64_t g;
	for (int spin = 0; spin < POOL_SPIN; spin++) {
		g = atomic_load_explicit(&p->generation, memory_order_acquire);
		if (g != seen)
			return g;
		relax();
	}
	pthread_mutex_lock(&p->mu);
	while ((g = atomic_load_explicit(&p->generation,
					 memory_order_acquire)) == seen)
		pthread_cond_wait(&p->wake, &p->mu);
	pthread_mutex_unlock(&p->mu);
	return g;
}

static void *worker(void *arg)
{
	strata__pool *p = arg;
	uint_fast64_t seen = 0;
	for (;;) {
		seen = wait_generation(p, seen);
		if (atomic_load(&p->stop))
			return NULL;
		drain(p);
		if (atomic_fetch_sub(&p->busy, 1) == 1) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

static void publish(strata__pool *p)
{
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
}

static void stop_workers(strata__pool *p, uint32_t started)
{
	atomic_store(&p->stop, true);
	publish(p);
	for (uint32_t i = 0; i < started; i++)
		pthread_join(p->threads[i], NULL);
}

/* ------------------------------------------------------------------------ */

strata_status strata__pool_create(uint32_t threads, strata__pool **out,
				  strata_error *err)
{
	if (threads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		threads = n > 0 ? (uint32_t)n : 1;
	}
	if (threads > POOL_MAX_THREADS)
		threads = POOL_MAX_THREADS;
	strata__pool *p = strata_calloc_or_error(1, sizeof *p, "thread pool",
						 err);
	if (!p)
		return STRATA_E_NOMEM;
	p->n_workers = threads - 1;
	p->threads = strata_calloc_or_error(p->n_workers ? p->n_workers : 1,
					    sizeof *p->threads,
					    "thread pool workers", err);
	if (!p->threads) {
		strata_free(p);
		return STRATA_E_NOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	atomic_init(&p->generation, 0);
	atomic_init(&p->next_task, 0);
	atomic_init(&p->busy, 0);
	atomic_init(&p->stop, false);
	for (uint32_t i = 0; i < p->n_workers; i++) {
		int rc = pthread_create(&p->threads[i], NULL, worker, p);
		if (rc != 0) {
			stop_workers(p, i);
			p->n_workers = 0;
			strata__pool_destroy(p);
			return strata_fail(err, STRATA_E_THREAD,
					   "lower --threads or raise the "
					   "process limit (ulimit -u)",
					   "cannot start compute thread %u of "
					   "%u (error %d)",
					   i + 1, threads - 1, rc);
		}
	}
	*out = p;
	return STRATA_OK;
}

void strata__pool_destroy(strata__pool *p)
{
	if (!p)
		return;
	if (p->n_workers)
		stop_workers(p, p->n_workers);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->mu);
	strata_free(p->threads);
	strata_free(p);
}

uint32_t strata__pool_threads(const strata__pool *p)
{
	return p->n_workers + 1;
}

void strata__pool_run(strata__pool *p, strata__pool_fn fn, void *arg,
		      uint32_t n_tasks)
{
	if (p->n_workers == 0 || n_tasks <= 1) {
		for (uint32_t t = 0; t < n_tasks; t++)
			fn(arg, t);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	p->n_tasks = n_tasks;
	atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
	atomic_store_explicit(&p->busy, p->n_workers, memory_order_relaxed);
	publish(p);
	drain(p);
	for (int spin = 0; spin < POOL_SPIN; spin++) {
		if (atomic_load_explicit(&p->busy, memory_order_acquire) == 0)
			return;
		relax();
	}
	pthread_mutex_lock(&p->mu);
	while (atomic_load_explicit(&p->busy, memory_order_acquire) != 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
