/* populate.c - a mapped tensor's pages brought in, and with its values
 * checked for NaN and infinities piece by piece, just after each piece's
 * pages, on up to POPULATE_THREADS threads for a large tensor (layer:
 * checkpoint). What weight_store.c's checked mappings run. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint/catalog.h"

#define PIECE_BYTES (4u << 20)	/* populated, then checked */
#define POPULATE_THREADS 8	/* at most; the online processors bound it */

/* One tensor's pieces shared by its workers: each takes the next piece;
 * the first failure in file order wins, so the error is the one a
 * single thread would give. */
typedef struct job {
	const strata_tensor *t;
	const unsigned char *p;
	pthread_mutex_t mu;
	uint64_t next;	    /* the next piece's byte in t */
	uint64_t fail_at;   /* the failed piece's byte, UINT64_MAX: none */
	int fail_errno;	    /* its errno, or -1: a value error in fail_err */
	strata_error fail_err;
} job;

/* ------------------------------------------------------------------------ */

uint64_t strata__piece_bytes(const strata_tensor *t, uint64_t at,
			     uint64_t room)
{
	uint64_t unit = strata__tensor_check_unit(t), left = t->bytes - at;
	if (!unit)
		unit = 1;
	if (left <= room)
		return left;
	uint64_t n = room / unit * unit;
	return n ? n : unit < left ? unit : left;
}

int strata__populate(const unsigned char *p, uint64_t bytes, bool ahead)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(page - 1);
	size_t len = (size_t)((uintptr_t)p + bytes - lo);
	if (ahead)
		(void)madvise((void *)lo, len, MADV_WILLNEED);
#ifdef MADV_POPULATE_READ
	if (madvise((void *)lo, len, MADV_POPULATE_READ) == 0)
		return 0;
	if (errno != EINVAL)
		return errno;
#endif
	unsigned sum = 0;
	for (uintptr_t a = lo; a < (uintptr_t)p + bytes; a += page)
		sum += *(const volatile unsigned char *)a;
	(void)sum;
	return 0;
}

static void *worker(void *arg)
{
	job *j = arg;
	const strata_tensor *t = j->t;
	for (;;) {
		pthread_mutex_lock(&j->mu);
		uint64_t at = j->next;
		bool done = at >= t->bytes || at > j->fail_at;
		uint64_t n = done ? 0 : strata__piece_bytes(t, at, PIECE_BYTES);
		j->next += n;
		pthread_mutex_unlock(&j->mu);
		if (done)
			return NULL;
		strata_error e;
		int rc = strata__populate(j->p + at, n, false);
		if (rc == 0 && strata__tensor_check_values(t, j->p + at, at, n, &e))
			rc = -1;
		if (!rc)
			continue;
		pthread_mutex_lock(&j->mu);
		if (at < j->fail_at) {
			j->fail_at = at;
			j->fail_errno = rc;
			if (rc < 0)
				j->fail_err = e;
		}
		pthread_mutex_unlock(&j->mu);
	}
}

/* Workers for a tensor of `pieces` pieces: one per online processor up to
 * POPULATE_THREADS, none past the pieces (the caller is one of them). */
static long helpers_for(uint64_t pieces)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus > POPULATE_THREADS)
		cpus = POPULATE_THREADS;
	if (cpus < 1)
		cpus = 1;
	return (uint64_t)cpus < pieces ? cpus - 1 : (long)pieces - 1;
}

int strata__populate_checked(const strata_tensor *t, const unsigned char *p,
			     strata_error *err)
{
	if (!strata__tensor_check_unit(t))
		return strata__populate(p, t->bytes, true);
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(page - 1);
	/* the whole tensor's read-ahead starts now; the pieces follow it */
	(void)madvise((void *)lo, (size_t)((uintptr_t)p + t->bytes - lo),
		      MADV_WILLNEED);
	job j = {.t = t, .p = p, .fail_at = UINT64_MAX};
	pthread_mutex_init(&j.mu, NULL);
	pthread_t th[POPULATE_THREADS];
	long want = helpers_for((t->bytes + PIECE_BYTES - 1) / PIECE_BYTES), n = 0;
	/* a helper that cannot start leaves its pieces to the others */
	while (n < want && pthread_create(&th[n], NULL, worker, &j) == 0)
		n++;
	worker(&j);
	for (long i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&j.mu);
	if (j.fail_at == UINT64_MAX)
		return 0;
	if (j.fail_errno < 0)
		*err = j.fail_err;
	return j.fail_errno;
}
