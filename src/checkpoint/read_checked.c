/* read_checked.c - a checked read of one group of neighbouring tensors:
 * scatter reads of about CHECK_READ_BYTES straight into the tensors'
 * buffers, each piece's values checked as soon as it is in, while it is
 * in the core's cache; a group of READ_SPLIT_BYTES or more split in spans
 * read at once on up to READ_THREADS threads (layer: checkpoint). What
 * weight_store.c's checked reads run on descriptors without O_DIRECT.
 *
 * Why the threads (issue 25): a read from the page cache is the kernel's
 * copy, 4-10 GB/s on one core, the check at memory speed behind it, so a
 * load read on one thread (the CUDA one through its pinned staging, any
 * --no-mmap one) ran at a fraction of the machine's memory bandwidth and
 * under half the host-to-device link's 55 GB/s. */
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "checkpoint/catalog.h"

#define CHECK_READ_BYTES (512u << 10) /* one scatter read, then its check */
#define READ_SPLIT_BYTES (16u << 20)  /* groups this large read in spans */
#define READ_THREADS 8		      /* at most; the processors bound it */

/* A span of the group: from byte `at` of tensor `i` to byte `end_at` of
 * tensor `end` (end == count: the group's end); every bound a whole number
 * of its tensor's check units. */
typedef struct span {
	size_t i, end;
	uint64_t at, end_at;
} span;

typedef struct job {
	int fd;
	const strata__read_group *g;
	const char *path;
	span spans[READ_THREADS];
	strata_status st[READ_THREADS];
	strata_error err[READ_THREADS];
	size_t count;
	pthread_mutex_t mu;
	size_t next;
} job;

/* ------------------------------------------------------------------------ */

/* The bytes of tensor i that span s covers from byte `at` of it. */
static uint64_t left_in(const strata__read_group *g, const span *s, size_t i,
			uint64_t at)
{
	uint64_t stop = i == s->end ? s->end_at : g->tensors[i]->bytes;
	return stop - at;
}

/* Reads span s in pieces of about CHECK_READ_BYTES, each checked at once. */
static strata_status read_span(int fd, const strata__read_group *g,
			       const span *sp, const char *path,
			       strata_error *err)
{
	struct iovec iov[STRATA_PREADV_MAX];
	uint64_t from[STRATA_PREADV_MAX]; /* each piece's byte in its tensor */
	size_t who[STRATA_PREADV_MAX];	  /* and that tensor */
	size_t i = sp->i;
	uint64_t at = sp->at;
	while (i < sp->end || (i == sp->end && i < g->count && at < sp->end_at)) {
		const strata_tensor *t0 = g->tensors[i];
		uint64_t off = t0->offset + at;
		int n = 0;
		uint64_t room = CHECK_READ_BYTES;
		while ((i < sp->end || (i == sp->end && i < g->count && at < sp->end_at)) &&
		       n < STRATA_PREADV_MAX && room) {
			const strata_tensor *t = g->tensors[i];
			uint64_t left = left_in(g, sp, i, at);
			uint64_t take = strata__piece_bytes(t, at, room);
			if (take > left)
				take = left;
			if (take > room && n)
				break; /* a unit past the room: next piece */
			iov[n] = (struct iovec){
				.iov_base = (unsigned char *)g->dst[i] + at,
				.iov_len = (size_t)take};
			from[n] = at, who[n] = i, n++;
			at += take;
			room = take < room ? room - take : 0;
			if (at == t->bytes)
				i++, at = 0;
		}
		strata_status s = strata_preadv_full(fd, iov, n, (off_t)off, path,
						     err);
		for (int k = 0; s == STRATA_OK && k < n; k++)
			s = strata__tensor_check_values(g->tensors[who[k]],
							iov[k].iov_base, from[k],
							iov[k].iov_len, err);
		if (s)
			return s;
	}
	return STRATA_OK;
}

static void *worker(void *arg)
{
	job *j = arg;
	for (;;) {
		pthread_mutex_lock(&j->mu);
		size_t k = j->next++;
		pthread_mutex_unlock(&j->mu);
		if (k >= j->count)
			return NULL;
		j->st[k] = read_span(j->fd, j->g, &j->spans[k], j->path,
				     &j->err[k]);
	}
}

/* Where the k-th of n equal cuts of the group falls: the tensor holding
 * that byte and the first whole check unit at or after it. */
static void cut(const strata__read_group *g, size_t k, size_t n, size_t *i,
		uint64_t *at)
{
	uint64_t target = g->bytes / n * k, start = g->tensors[0]->offset;
	for (*i = 0; *i < g->count; (*i)++) {
		const strata_tensor *t = g->tensors[*i];
		uint64_t lo = t->offset - start;
		if (target < lo + t->bytes) {
			uint64_t unit = strata__tensor_check_unit(t);
			uint64_t in = target - lo;
			if (unit > 1)
				in = (in + unit - 1) / unit * unit;
			*at = in;
			if (in < t->bytes)
				return;
			(*i)++;
			*at = 0;
			return;
		}
	}
	*at = 0;
}

/* ------------------------------------------------------------------------ */

strata_status strata__read_checked(int fd, const strata__read_group *g,
				   const char *path, strata_error *err)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = cpus < 1 ? 1 : (size_t)cpus;
	if (n > READ_THREADS)
		n = READ_THREADS;
	if (g->bytes < READ_SPLIT_BYTES)
		n = 1;
	else if (n > g->bytes / (READ_SPLIT_BYTES / 2))
		n = (size_t)(g->bytes / (READ_SPLIT_BYTES / 2));
	if (n <= 1) {
		span whole = {.i = 0, .at = 0, .end = g->count, .end_at = 0};
		return read_span(fd, g, &whole, path, err);
	}
	job j = {.fd = fd, .g = g, .path = path};
	size_t pi = 0;
	uint64_t pat = 0;
	for (size_t k = 1; k <= n; k++) {
		size_t ci = g->count;
		uint64_t cat = 0;
		if (k < n)
			cut(g, k, n, &ci, &cat);
		if (ci > pi || (ci == pi && cat > pat)) /* not empty */
			j.spans[j.count++] = (span){pi, ci, pat, cat};
		pi = ci, pat = cat;
	}
	pthread_mutex_init(&j.mu, NULL);
	pthread_t th[READ_THREADS];
	size_t made = 0;
	/* a helper that cannot start leaves its spans to the others */
	while (made + 1 < j.count &&
	       pthread_create(&th[made], NULL, worker, &j) == 0)
		made++;
	worker(&j);
	for (size_t k = 0; k < made; k++)
		pthread_join(th[k], NULL);
	pthread_mutex_destroy(&j.mu);
	for (size_t k = 0; k < j.count; k++) /* the first in file order */
		if (j.st[k]) {
			*err = j.err[k];
			return j.st[k];
		}
	return STRATA_OK;
}
