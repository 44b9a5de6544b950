/* read_cold.c - a checked mapping of a tensor the page cache does not
 * hold: its file range read with O_DIRECT straight into fresh anonymous
 * memory laid out as the file is (the same place within a page), in
 * pieces spread over up to COLD_THREADS threads, each piece's values
 * checked as soon as it lands; and whether a range is cached at all
 * (layer: checkpoint). What weight_store.c's checked mappings run for
 * cold tensors.
 *
 * Why (issue 25, measured on the 2-core CPU VM, 1.89 GB of bf16, load
 * average 8-14 from other work): there the first touch from user code of
 * a page the page cache has just read in costs 10 us or more (mapping and
 * checking the cold file: 7-13 s; touching it once a page after
 * MADV_POPULATE_READ: 3.4-11 s; a second process touching the same pages:
 * 0.02 s), and so does user code's first write to fresh memory (a copy out
 * of a reused O_DIRECT buffer: 6.2-7.4 s), while O_DIRECT into fresh
 * memory, whose pages the kernel faults in itself, took 3.2-5.6 s and a
 * check after it 0.2-0.4 s (dd into one reused buffer: 2.1-2.6 s). The
 * cost: the page cache is left as it was, so the next run reads the disk
 * again (a warm file is still mapped). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint/catalog.h"

#define DIRECT_ALIGN 4096u
#define COLD_PIECE_BYTES (4u << 20) /* one O_DIRECT read, then its check */
#define COLD_THREADS 4		    /* at most; two reads in flight per core */
#define MINCORE_BATCH 4096	    /* pages asked per mincore call */

/* One tensor's pieces, shared by its workers (each takes the next); the
 * first failure in file order wins, so the error is a single thread's. */
typedef struct job {
	const strata_tensor *t;
	int fd;
	const char *path;
	unsigned char *m; /* the region: file bytes from lo */
	uint64_t lo, hi;  /* [lo, hi): the aligned file range read */
	pthread_mutex_t mu;
	uint64_t next;	  /* the next piece's file position */
	uint64_t fail_at; /* the failed piece's position, UINT64_MAX: none */
	strata_status fail;
	bool refused;	  /* EINVAL: no O_DIRECT here after all */
	strata_error fail_err;
} job;

/* ------------------------------------------------------------------------ */

/* Reads [at, at + len) of the file into buf (aligned for O_DIRECT); the
 * file may end inside it (short), as long as `need` bytes came. EINVAL
 * before any byte: *refused. */
static strata_status direct_read(const job *j, unsigned char *buf,
				 uint64_t at, uint64_t len, uint64_t need,
				 bool *refused, strata_error *err)
{
	uint64_t done = 0;
	while (done < need) {
		ssize_t n = strata_sys.pread(j->fd, buf + done,
					     (size_t)(len - done),
					     (off_t)(at + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && done == 0) {
			*refused = true;
			return STRATA_E_UNSUPPORTED;
		}
		if (n <= 0)
			return strata_fail(err, STRATA_E_CKPT_READ, "check the disk",
					   "O_DIRECT read of '%s' at %" PRIu64 " failed: %s",
					   j->path, at + done,
					   n < 0 ? strerror(errno) : "end of file");
		done += (uint64_t)n;
		if (done % DIRECT_ALIGN)
			break; /* short: the end of the file */
	}
	return done >= need ? STRATA_OK
			    : strata_fail(err, STRATA_E_CKPT_READ, "check the disk",
					  "'%s' ended early at %" PRIu64, j->path,
					  at + done);
}

/* The one check unit that starts in a piece (at tensor offset u) and
 * ends in the next, from the file position `from` where the next piece
 * starts. Its bytes past `from` are the next piece's, which another
 * worker may be reading into the region at this moment: they are read
 * again into this worker's own buffer, and the unit is checked there. */
static strata_status check_crossing(const job *j, uint64_t from, uint64_t u,
				    bool *refused, strata_error *err)
{
	const strata_tensor *t = j->t;
	uint32_t unit = strata__tensor_check_unit(t);
	_Alignas(DIRECT_ALIGN) unsigned char next[DIRECT_ALIGN];
	unsigned char whole[DIRECT_ALIGN];
	uint64_t head = from - (t->offset + u); /* the bytes in this piece */
	uint64_t tail = unit - head;
	uint64_t end = t->offset + t->bytes;
	if (unit > DIRECT_ALIGN || tail > end - from)
		return strata_fail(err, STRATA_E_CKPT_READ, "check the file",
				   "'%s': tensor '%s' has a %u-byte block across "
				   "a %u-byte read", j->path, t->name, unit,
				   COLD_PIECE_BYTES);
	uint64_t want = end - from < DIRECT_ALIGN ? end - from : DIRECT_ALIGN;
	strata_status s = direct_read(j, next, from, DIRECT_ALIGN, want,
				      refused, err);
	if (s)
		return s;
	memcpy(whole, j->m + (from - head - j->lo), head);
	memcpy(whole + head, next, tail);
	return strata__tensor_check_values(t, whole, u, unit, err);
}

/* Piece [at, at + len) read and the tensor's whole check units in it
 * checked (a unit across a piece's end is checked with the piece that
 * ends it: pieces start where the previous one's units end). */
static strata_status do_piece(job *j, uint64_t at, bool *refused,
			      strata_error *err)
{
	const strata_tensor *t = j->t;
	uint64_t len = j->hi - at < COLD_PIECE_BYTES ? j->hi - at
						     : COLD_PIECE_BYTES;
	uint64_t end = t->offset + t->bytes;
	uint64_t need = end - at < len ? end - at : len;
	strata_status s = direct_read(j, j->m + (at - j->lo), at, len, need,
				      refused, err);
	if (s)
		return s;
	uint64_t unit = strata__tensor_check_unit(t);
	if (!unit)
		return STRATA_OK;
	/* the units that start in this piece: from the first unit boundary
	 * at or after the piece's start to the first at or after its end */
	uint64_t a = at > t->offset ? at - t->offset : 0;
	uint64_t b = at + need - t->offset;
	a = (a + unit - 1) / unit * unit;
	b = b == t->bytes ? b : (b + unit - 1) / unit * unit;
	if (b > t->bytes)
		b = t->bytes;
	if (b <= a)
		return STRATA_OK;
	/* the units wholly inside this piece, where they landed */
	uint64_t whole = (at + need - t->offset) / unit * unit;
	if (whole > b)
		whole = b;
	if (whole > a) {
		s = strata__tensor_check_values(
			t, j->m + (t->offset - j->lo) + a, a, whole - a, err);
		if (s)
			return s;
	}
	if (b <= whole)
		return STRATA_OK;
	return check_crossing(j, at + len, whole, refused, err);
}

static void *worker(void *arg)
{
	job *j = arg;
	for (;;) {
		pthread_mutex_lock(&j->mu);
		uint64_t at = j->next;
		bool done = at >= j->hi || at > j->fail_at;
		j->next += COLD_PIECE_BYTES;
		pthread_mutex_unlock(&j->mu);
		if (done)
			return NULL;
		strata_error e;
		bool refused = false;
		strata_status s = do_piece(j, at, &refused, &e);
		if (!s)
			continue;
		pthread_mutex_lock(&j->mu);
		if (at < j->fail_at) {
			j->fail_at = at;
			j->fail = s;
			j->refused = refused;
			j->fail_err = e;
		}
		pthread_mutex_unlock(&j->mu);
	}
}

/* ------------------------------------------------------------------------ */

bool strata__range_cold(const unsigned char *base, uint64_t offset,
			uint64_t bytes)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t lo = offset / page * page, hi = offset + bytes;
	uint64_t pages = 0, cached = 0;
	unsigned char vec[MINCORE_BATCH];
	for (uint64_t at = lo; at < hi;) {
		uint64_t len = hi - at < (uint64_t)MINCORE_BATCH * page
				       ? hi - at
				       : (uint64_t)MINCORE_BATCH * page;
		uint64_t n = (len + page - 1) / page;
		if (mincore((void *)(base + at), (size_t)len, vec) != 0)
			return false; /* cannot tell: map it as ever */
		for (uint64_t k = 0; k < n; k++)
			cached += vec[k] & 1;
		pages += n;
		at += len;
	}
	return cached * 10 < pages; /* at most a tenth cached */
}

strata_status strata__read_cold(const strata_tensor *t, int fd,
				const char *path, strata__cold_region *out,
				strata_error *err)
{
	uint64_t lo = t->offset / DIRECT_ALIGN * DIRECT_ALIGN;
	uint64_t hi = (t->offset + t->bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN *
		      DIRECT_ALIGN;
	if (hi - lo > SIZE_MAX)
		return STRATA_E_UNSUPPORTED;
	size_t len = (size_t)(hi - lo);
	unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory for tensor '%s' (%" PRIu64 " bytes)",
				   t->name, t->bytes);
	job j = {.t = t, .fd = fd, .path = path, .m = m, .lo = lo, .hi = hi,
		 .next = lo, .fail_at = UINT64_MAX};
	pthread_mutex_init(&j.mu, NULL);
	uint64_t pieces = (hi - lo + COLD_PIECE_BYTES - 1) / COLD_PIECE_BYTES;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long want = 2 * (cpus < 1 ? 1 : cpus);
	if (want > COLD_THREADS)
		want = COLD_THREADS;
	if ((uint64_t)want > pieces)
		want = (long)pieces;
	pthread_t th[COLD_THREADS];
	long n = 0;
	/* a helper that cannot start leaves its pieces to the others */
	while (n < want - 1 && pthread_create(&th[n], NULL, worker, &j) == 0)
		n++;
	worker(&j);
	for (long i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&j.mu);
	if (j.fail_at != UINT64_MAX) {
		munmap(m, len);
		if (j.refused)
			return STRATA_E_UNSUPPORTED;
		*err = j.fail_err;
		return j.fail;
	}
	(void)mprotect(m, len, PROT_READ); /* read-only, as a mapping is */
	*out = (strata__cold_region){.base = m, .bytes = len,
				     .data = m + (t->offset - lo)};
	return STRATA_OK;
}
