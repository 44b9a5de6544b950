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
#define TASK_BITS 20
#define TASK_MASK ((1u << TASK_BITS) - 1)
#define GEN_MASK 0xFFFFFFu

typedef struct sub_job {
	strata__pool_fn fn;
	void *arg;
	uint32_t base;
} sub_job;

typedef struct worker_arg {
	struct strata__pool *p;
	uint32_t slot;
} worker_arg;

struct strata__pool {
	pthread_t *threads;	/* n_workers */
	worker_arg *args;	/* n_workers */
	uint32_t n_workers;
	pthread_mutex_t mu;
	pthread_cond_t wake;	/* a new generation was published */
	pthread_cond_t done;	/* the last task of a job finished */
	atomic_uint_fast64_t generation;
	/* generation (24 bits) | task count (20) | next task (20): a task is
	 * claimed by one CAS that also checks the job, so a worker that slept
	 * through a job can never claim a task of the next one, and reads
	 * nothing else of the job before its claim succeeds. */
	atomic_uint_fast64_t claim;
	atomic_uint done_tasks;
	atomic_bool stop;
	/* The current job: written before generation is bumped, stable until
	 * its last task is done. */
	strata__pool_fn fn;
	void *arg;
	/* threads slots of scratch_bytes each: slot 0 the caller's, slot
	 * i + 1 worker i's */
	unsigned char *scratch;
	uint64_t scratch_bytes;
	/* one buffer for the caller (strata__pool_shared) */
	unsigned char *shared;
	uint64_t shared_bytes;
	/* the decode products' path (strata__pool_decode_mode) */
	int decode_mode;
};

/* The slot of the thread running a task (strata__pool_scratch). */
static _Thread_local uint32_t current_slot;

/* ------------------------------------------------------------------------ */

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Runs tasks of job `gen` until none is left or a later job replaced it;
 * slot: the running thread's scratch slot. */
static void drain(strata__pool *p, uint_fast64_t gen, uint32_t slot)
{
	current_slot = slot;
	for (;;) {
		uint_fast64_t c = atomic_load_explicit(&p->claim,
						       memory_order_acquire);
		if ((c >> (2 * TASK_BITS)) != (gen & GEN_MASK))
			return; /* a later job: not ours to touch */
		uint32_t n = (uint32_t)(c >> TASK_BITS) & TASK_MASK;
		uint32_t t = (uint32_t)c & TASK_MASK;
		if (t >= n)
			return;
		if (!atomic_compare_exchange_weak_explicit(
			    &p->claim, &c, c + 1, memory_order_acq_rel,
			    memory_order_acquire))
			continue;
		/* Claimed: the job cannot end before this task does. */
		p->fn(p->arg, t);
		if (atomic_fetch_add_explicit(&p->done_tasks, 1,
					      memory_order_acq_rel) +
			    1 ==
		    n) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

static void sub_task(void *arg, uint32_t t)
{
	sub_job *s = arg;
	s->fn(s->arg, s->base + t);
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
	strata__pool *p = ((worker_arg *)arg)->p;
	uint32_t slot = ((worker_arg *)arg)->slot;
	uint_fast64_t seen = 0;
	for (;;) {
		seen = wait_generation(p, seen);
		if (atomic_load(&p->stop))
			return NULL;
		drain(p, seen, slot);
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
	p->args = p->threads ? strata_calloc_or_error(
					       p->n_workers ? p->n_workers : 1,
					       sizeof *p->args,
					       "thread pool workers", err)
			     : NULL;
	if (!p->args) {
		strata_free(p->threads);
		strata_free(p);
		return STRATA_E_NOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	atomic_init(&p->generation, 0);
	atomic_init(&p->claim, 0);
	atomic_init(&p->done_tasks, 0);
	atomic_init(&p->stop, false);
	for (uint32_t i = 0; i < p->n_workers; i++) {
		p->args[i] = (worker_arg){p, i + 1};
		int rc = pthread_create(&p->threads[i], NULL, worker,
					&p->args[i]);
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
	strata_free(p->scratch);
	strata_free(p->shared);
	strata_free(p->args);
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
		current_slot = 0;
		for (uint32_t t = 0; t < n_tasks; t++)
			fn(arg, t);
		return;
	}
	if (n_tasks > TASK_MASK) { /* more than the claim word counts */
		for (uint32_t base = 0; base < n_tasks; base += TASK_MASK) {
			sub_job sj = {fn, arg, base};
			uint32_t m = n_tasks - base < TASK_MASK
					     ? n_tasks - base : TASK_MASK;
			strata__pool_run(p, sub_task, &sj, m);
		}
		return;
	}
	/* Every task of the previous job is done, so nobody reads these. */
	p->fn = fn;
	p->arg = arg;
	atomic_store_explicit(&p->done_tasks, 0, memory_order_relaxed);
	uint_fast64_t gen = atomic_load(&p->generation) + 1;
	atomic_store_explicit(&p->claim,
			      ((gen & GEN_MASK) << (2 * TASK_BITS)) |
				      ((uint_fast64_t)n_tasks << TASK_BITS),
			      memory_order_release);
	publish(p);
	drain(p, gen, 0);
	/* Wait for tasks, not for workers: one that slept through the job
	 * is not waited for. */
	for (int spin = 0; spin < POOL_SPIN; spin++) {
		if (atomic_load_explicit(&p->done_tasks,
					 memory_order_acquire) == n_tasks)
			return;
		relax();
	}
	pthread_mutex_lock(&p->mu);
	while (atomic_load_explicit(&p->done_tasks, memory_order_acquire) !=
	       n_tasks)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

strata_status strata__pool_reserve(strata__pool *p, uint64_t bytes,
				   strata_error *err)
{
	if (bytes <= p->scratch_bytes)
		return STRATA_OK;
	bytes = (bytes + 63) / 64 * 64;
	uint64_t threads = strata__pool_threads(p);
	if (bytes > UINT64_MAX / threads)
		return strata_fail(err, STRATA_E_NOMEM,
				   "use smaller matrices or fewer threads",
				   "compute scratch: %u threads of %llu bytes "
				   "overflow",
				   (unsigned)threads, (unsigned long long)bytes);
	void *s = strata_alloc_aligned(64, bytes * threads);
	if (!s)
		return strata_fail(err, STRATA_E_NOMEM,
				   "free memory or use fewer threads",
				   "cannot allocate %llu bytes of compute "
				   "scratch (%u threads)",
				   (unsigned long long)(bytes * threads),
				   (unsigned)threads);
	strata_free(p->scratch);
	p->scratch = s;
	p->scratch_bytes = bytes;
	return STRATA_OK;
}

void *strata__pool_scratch(strata__pool *p)
{
	return p->scratch + (uint64_t)current_slot * p->scratch_bytes;
}

void *strata__pool_shared(strata__pool *p, uint64_t bytes, const char *what,
			  strata_error *err)
{
	if (bytes <= p->shared_bytes)
		return p->shared;
	bytes = (bytes + 63) / 64 * 64;
	void *s = strata_alloc_aligned(64, bytes);
	if (!s) {
		(void)strata_fail(err, STRATA_E_NOMEM,
				  "free memory or use smaller matrices",
				  "cannot allocate %llu bytes of %s",
				  (unsigned long long)bytes, what);
		return NULL;
	}
	strata_free(p->shared);
	p->shared = s;
	p->shared_bytes = bytes;
	return s;
}

int strata__pool_decode_mode(const strata__pool *p)
{
	return p->decode_mode;
}

void strata__pool_set_decode_mode(strata__pool *p, int mode)
{
	p->decode_mode = mode;
}
