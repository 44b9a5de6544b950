/* weight_store.c - payload reads into caller buffers: pread by default,
 * O_DIRECT through aligned bounce buffers where asked, adjacent tensors of a
 * shard coalesced into one read (a scatter read straight into the callers'
 * buffers, or one O_DIRECT read into a bounce buffer), tensors mapped
 * from their shard where the caller computes on them in place, the
 * checked reads and mappings (every half or block value checked for NaN
 * and infinities piece by piece as it lands, while in cache), a bounded
 * LRU of open shards, diagnostics (the checked reads themselves in
 * read_checked.c, a cold checked mapping's reads in read_cold.c)
 * (layer: checkpoint). Thread-safe: a mutex guards the shard cache and the
 * counters; reads themselves run outside it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "checkpoint/catalog.h"

#define DEFAULT_MAX_OPEN 4
#define DIRECT_ALIGN 4096u		 /* covers common logical block sizes */
#define MAX_GROUP_BYTES (64u << 20)	 /* one coalesced read at most */
/* A checked read lands in pieces this large and checks each at once, while
 * it is in the core's cache (2 MiB of L2 here); a checked mapping is
 * populated and checked as populate.c says. */
#define CHECK_READ_BYTES (512u << 10)

typedef struct shard {
	uint32_t file;
	int fd;
	bool direct;	/* opened with O_DIRECT */
	uint32_t users; /* reads in flight: not evictable */
	uint64_t last_use;
} shard;

struct strata_weight_store {
	const strata_catalog *c;
	uint32_t max_open;
	bool want_direct, direct_refused;
	pthread_mutex_t mu;
	pthread_cond_t idle;
	shard *open; /* [max_open], n_open used */
	uint32_t n_open;
	uint64_t tick;
	uint64_t hits, misses, evictions, reads, read_bytes, coalesced;
	/* per catalog file: first touch / first payload order */
	bool *touched, *payload;
	void **maps; /* per catalog file: its whole mapping, or NULL */
	strata__cold_region *colds; /* cold tensors read for their mapping */
	size_t cold_count, cold_cap;
	const char **touched_paths, **payload_paths;
	size_t touched_count, payload_count;
	char note[512];
	/* Read buffers of coalesced groups kept for reuse (at most one per
	 * concurrent reader), so steady streaming allocates nothing. */
	struct bounce *spare_bounces;
};

typedef struct bounce {
	struct bounce *next;
	size_t cap;
	unsigned char *data; /* DIRECT_ALIGN-aligned, cap bytes */
} bounce;

/* One run of tensors read with one call: order[first..first+count). */
typedef struct group {
	uint32_t file;
	uint64_t offset, bytes;
	size_t first, count;
} group;

/* ------------------------------------------------------------------------ */
/* The shard cache                                                          */
/* ------------------------------------------------------------------------ */

static void note_refusal(strata_weight_store *ws, const char *path, int e)
{
	if (!ws->direct_refused)
		snprintf(ws->note, sizeof ws->note,
			 "'%s' refused O_DIRECT (%s); reading with pread", path,
			 strerror(e));
	ws->direct_refused = true;
}

/* Opens file f (mutex held). O_DIRECT falls back to plain reads where the
 * filesystem refuses it (tmpfs says EINVAL). */
static strata_status open_file(strata_weight_store *ws, uint32_t f, shard *sh,
			       strata_error *err)
{
	const strata_catalog_file *cf = &ws->c->files[f];
	int fd = -1;
	sh->direct = false;
	strata_status s = STRATA_E_IO;
	if (ws->want_direct && !ws->direct_refused) {
		int e = 0;
		s = strata_catalog_file_open(ws->c, f, O_DIRECT, &fd, err);
		if (s == STRATA_OK)
			sh->direct = true;
		else if ((e = errno) == EINVAL)
			note_refusal(ws, cf->path, e);
	}
	/* the plain open, or the same again: its error is the one to tell */
	if (s != STRATA_OK)
		s = strata_catalog_file_open(ws->c, f, 0, &fd, err);
	if (s)
		return s;
	sh->fd = fd;
	sh->file = f;
	sh->users = 0;
	if (!ws->touched[f]) {
		ws->touched[f] = true;
		ws->touched_paths[ws->touched_count++] = cf->path;
	}
	return STRATA_OK;
}

/* Returns the cache slot of file f with one more user (mutex held). */
static strata_status acquire(strata_weight_store *ws, uint32_t f, shard **out,
			     strata_error *err)
{
	for (;;) {
		for (uint32_t i = 0; i < ws->n_open; i++)
			if (ws->open[i].file == f) {
				ws->hits++;
				ws->open[i].users++;
				ws->open[i].last_use = ++ws->tick;
				*out = &ws->open[i];
				return STRATA_OK;
			}
		if (ws->n_open < ws->max_open)
			break;
		shard *victim = NULL;
		for (uint32_t i = 0; i < ws->n_open; i++)
			if (!ws->open[i].users &&
			    (!victim || ws->open[i].last_use < victim->last_use))
				victim = &ws->open[i];
		if (victim) {
			strata_sys.close(victim->fd);
			*victim = ws->open[--ws->n_open];
			ws->evictions++;
			break;
		}
		/* every open shard is being read: wait for one to finish */
		pthread_cond_wait(&ws->idle, &ws->mu);
	}
	shard *sh = &ws->open[ws->n_open];
	strata_status s = open_file(ws, f, sh, err);
	if (s)
		return s;
	ws->misses++;
	ws->n_open++;
	sh->users = 1;
	sh->last_use = ++ws->tick;
	*out = sh;
	return STRATA_OK;
}

/* Finds the slot again by file (slots move on eviction) and drops a user. */
static void release(strata_weight_store *ws, uint32_t f)
{
	for (uint32_t i = 0; i < ws->n_open; i++)
		if (ws->open[i].file == f && ws->open[i].users) {
			ws->open[i].users--;
			break;
		}
	pthread_cond_broadcast(&ws->idle);
}

/* ------------------------------------------------------------------------ */
/* Reading one group                                                        */
/* ------------------------------------------------------------------------ */

/* O_DIRECT: aligned offset, length and buffer; the tail past EOF reads
 * short, which is fine once the wanted bytes are in. */
static strata_status read_direct(int fd, unsigned char *buf, uint64_t start,
				 uint64_t len, uint64_t need, const char *path,
				 bool *refused, strata_error *err)
{
	uint64_t done = 0;
	while (done < need) {
		ssize_t n = strata_sys.pread(fd, buf + done, (size_t)(len - done),
					     (off_t)(start + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && done == 0) {
			/* opened, but the filesystem refuses the direct read:
			 * drop O_DIRECT on this descriptor and read plainly */
			int fl = fcntl(fd, F_GETFL);
			if (fl != -1 && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0) {
				*refused = true;
				return strata_pread_full(fd, buf, (size_t)need,
							 (off_t)start, path, err);
			}
		}
		if (n <= 0)
			return strata_fail(err, STRATA_E_IO, "check the disk",
					   "O_DIRECT read of '%s' at %" PRIu64 " failed: %s",
					   path, start + done,
					   n < 0 ? strerror(errno) : "end of file");
		done += (uint64_t)n;
		if (done % DIRECT_ALIGN)
			break; /* short read at EOF */
	}
	return done >= need ? STRATA_OK
			    : strata_fail(err, STRATA_E_IO, "check the disk",
					  "'%s' ended early", path);
}

/* A read buffer of at least len bytes: a spare one that is large enough,
 * else a new one (a spare too small is freed in its place, so the pool never
 * holds more buffers than there were concurrent reads). NULL: out of
 * memory. */
static bounce *bounce_take(strata_weight_store *ws, size_t len)
{
	pthread_mutex_lock(&ws->mu);
	bounce **pp = &ws->spare_bounces, *b = NULL, *small = NULL;
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->cap >= len)
			break;
	if (*pp) {
		b = *pp;
		*pp = b->next;
	} else if (ws->spare_bounces) {
		small = ws->spare_bounces;
		ws->spare_bounces = small->next;
	}
	pthread_mutex_unlock(&ws->mu);
	if (small) {
		strata_free(small->data);
		strata_free(small);
	}
	if (b)
		return b;
	b = strata_alloc(sizeof *b);
	unsigned char *data = b ? strata_alloc_aligned(DIRECT_ALIGN, len) : NULL;
	if (!data) {
		strata_free(b);
		return NULL;
	}
	*b = (bounce){.cap = len, .data = data};
	return b;
}

static void bounce_give(strata_weight_store *ws, bounce *b)
{
	pthread_mutex_lock(&ws->mu);
	b->next = ws->spare_bounces;
	ws->spare_bounces = b;
	pthread_mutex_unlock(&ws->mu);
}

/* Copies t's bytes out of a bounce buffer into d, checking each piece
 * while it is in cache where `check`. */
static strata_status copy_out(const strata_tensor *t, unsigned char *d,
			      const unsigned char *src, bool check,
			      strata_error *err)
{
	if (!check) {
		memcpy(d, src, (size_t)t->bytes);
		return STRATA_OK;
	}
	for (uint64_t at = 0, n; at < t->bytes; at += n) {
		n = strata__piece_bytes(t, at, CHECK_READ_BYTES);
		memcpy(d + at, src + at, (size_t)n);
		strata_status s = strata__tensor_check_values(t, d + at, at, n,
							      err);
		if (s)
			return s;
	}
	return STRATA_OK;
}

static strata_status read_group(strata_weight_store *ws, const shard *sh,
				const group *g,
				const strata_tensor *const *tensors,
				void *const *dst, const size_t *order,
				bool check, uint64_t *physical, bool *refused,
				strata_error *err)
{
	const char *path = ws->c->files[g->file].path;
	strata_status s;
	if (!sh->direct && check) {
		strata__read_group rg = {.bytes = g->bytes, .count = g->count};
		for (size_t i = 0; i < g->count; i++) {
			rg.tensors[i] = tensors[order[g->first + i]];
			rg.dst[i] = dst[order[g->first + i]];
		}
		*physical = g->bytes;
		return strata__read_checked(sh->fd, &rg, path, err);
	}
	if (!sh->direct) {
		/* one scatter read into the callers' buffers: no second copy
		 * (a group's tensors are back to back in the file) */
		struct iovec iov[STRATA_PREADV_MAX];
		for (size_t i = 0; i < g->count; i++)
			iov[i] = (struct iovec){
				.iov_base = dst[order[g->first + i]],
				.iov_len = (size_t)tensors[order[g->first + i]]->bytes};
		*physical = g->bytes;
		return strata_preadv_full(sh->fd, iov, (int)g->count,
					  (off_t)g->offset, path, err);
	}
	uint64_t start = g->offset / DIRECT_ALIGN * DIRECT_ALIGN;
	uint64_t skip = g->offset - start;
	uint64_t len = (skip + g->bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN *
		       DIRECT_ALIGN;
	bounce *buf = bounce_take(ws, (size_t)len);
	unsigned char *data = buf ? buf->data : NULL;
	if (!data)
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory for a %" PRIu64 "-byte read buffer",
				   len);
	*physical = len;
	s = read_direct(sh->fd, data, start, len, skip + g->bytes, path,
			refused, err);
	for (size_t i = 0; i < g->count && !s; i++) {
		const strata_tensor *t = tensors[order[g->first + i]];
		s = copy_out(t, dst[order[g->first + i]],
			     data + skip + (t->offset - g->offset), check, err);
	}
	bounce_give(ws, buf);
	return s;
}

static strata_status do_group(strata_weight_store *ws, const group *g,
			      const strata_tensor *const *tensors,
			      void *const *dst, const size_t *order,
			      bool check, strata_error *err)
{
	shard *sh;
	pthread_mutex_lock(&ws->mu);
	strata_status s = acquire(ws, g->file, &sh, err);
	shard copy = s ? (shard){0} : *sh;
	pthread_mutex_unlock(&ws->mu);
	if (s)
		return s;
	uint64_t physical = 0;
	bool refused = false;
	s = read_group(ws, &copy, g, tensors, dst, order, check, &physical,
		       &refused, err);
	pthread_mutex_lock(&ws->mu);
	release(ws, g->file);
	if (refused) {
		note_refusal(ws, ws->c->files[g->file].path, EINVAL);
		for (uint32_t i = 0; i < ws->n_open; i++)
			if (ws->open[i].file == g->file)
				ws->open[i].direct = false;
	}
	if (!s) {
		ws->reads++;
		ws->read_bytes += physical;
		ws->coalesced += g->count - 1;
		if (!ws->payload[g->file]) {
			ws->payload[g->file] = true;
			ws->payload_paths[ws->payload_count++] =
				ws->c->files[g->file].path;
		}
	}
	pthread_mutex_unlock(&ws->mu);
	if (s && s != STRATA_E_NOMEM && s != STRATA_E_CKPT_VALUE) {
		const strata_tensor *t = tensors[order[g->first]];
		s = err->code = STRATA_E_CKPT_READ;
		strata_error_prefix(err, "reading tensor '%s'%s", t->name,
				    g->count > 1 ? " and its neighbours" : "");
	}
	return s;
}

/* ------------------------------------------------------------------------ */
/* Public                                                                   */
/* ------------------------------------------------------------------------ */

strata_status strata_weight_store_create(const strata_catalog *c,
					 const strata_weight_store_options *opt,
					 strata_weight_store **out,
					 strata_error *err)
{
	strata_weight_store *ws = strata_calloc_or_error(1, sizeof *ws,
							 "weight store", err);
	if (!ws)
		return STRATA_E_NOMEM;
	ws->c = c;
	ws->max_open = opt && opt->max_open_shards ? opt->max_open_shards
						   : DEFAULT_MAX_OPEN;
	ws->want_direct = opt && opt->direct_io;
	size_t nf = c->file_count ? c->file_count : 1;
	ws->open = strata_calloc(ws->max_open, sizeof *ws->open);
	ws->touched = strata_calloc(nf, sizeof *ws->touched);
	ws->payload = strata_calloc(nf, sizeof *ws->payload);
	ws->touched_paths = strata_calloc(nf, sizeof *ws->touched_paths);
	ws->payload_paths = strata_calloc(nf, sizeof *ws->payload_paths);
	ws->maps = strata_calloc(nf, sizeof *ws->maps);
	if (!ws->open || !ws->touched || !ws->payload || !ws->touched_paths ||
	    !ws->payload_paths || !ws->maps) {
		strata_free(ws->maps);
		strata_free(ws->open);
		strata_free(ws->touched);
		strata_free(ws->payload);
		strata_free(ws->touched_paths);
		strata_free(ws->payload_paths);
		strata_free(ws);
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory creating the weight store");
	}
	pthread_mutex_init(&ws->mu, NULL);
	pthread_cond_init(&ws->idle, NULL);
	*out = ws;
	return STRATA_OK;
}

void strata_weight_store_destroy(strata_weight_store *ws)
{
	if (!ws)
		return;
	for (uint32_t i = 0; i < ws->n_open; i++)
		strata_sys.close(ws->open[i].fd);
	for (size_t f = 0; f < ws->c->file_count; f++)
		if (ws->maps[f])
			munmap(ws->maps[f], (size_t)ws->c->files[f].size);
	for (size_t i = 0; i < ws->cold_count; i++)
		munmap(ws->colds[i].base, ws->colds[i].bytes);
	strata_free(ws->colds);
	strata_free(ws->maps);
	pthread_mutex_destroy(&ws->mu);
	pthread_cond_destroy(&ws->idle);
	while (ws->spare_bounces) {
		bounce *b = ws->spare_bounces;
		ws->spare_bounces = b->next;
		strata_free(b->data);
		strata_free(b);
	}
	strata_free(ws->open);
	strata_free(ws->touched);
	strata_free(ws->payload);
	strata_free(ws->touched_paths);
	strata_free(ws->payload_paths);
	strata_free(ws);
}

/* A read request's place in the files, to sort requests by. */
typedef struct place {
	uint32_t file;
	uint64_t offset;
	size_t index;
} place;

static int by_place(const void *a, const void *b)
{
	const place *x = a, *y = b;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

strata_status strata_weight_store_reserve(strata_weight_store *ws,
					  uint32_t count, uint64_t bytes,
					  strata_error *err)
{
	if (bytes > SIZE_MAX - DIRECT_ALIGN)
		return strata_fail(err, STRATA_E_OVERFLOW, "read smaller units",
				   "cannot reserve %" PRIu64 "-byte read buffers",
				   bytes);
	/* Room for an O_DIRECT read's alignment on both ends. */
	size_t cap = (size_t)bytes + 2 * DIRECT_ALIGN;
	bounce *made = NULL;
	for (uint32_t i = 0; i < count; i++) {
		bounce *b = strata_alloc(sizeof *b);
		unsigned char *data = b ? strata_alloc_aligned(DIRECT_ALIGN, cap)
					: NULL;
		if (!data) {
			strata_free(b);
			while (made) {
				bounce *next = made->next;
				strata_free(made->data);
				strata_free(made);
				made = next;
			}
			return strata_fail(err, STRATA_E_NOMEM, "free some memory",
					   "cannot reserve %u read buffers of %zu bytes",
					   count, cap);
		}
		*b = (bounce){.next = made, .cap = cap, .data = data};
		made = b;
	}
	pthread_mutex_lock(&ws->mu);
	while (made) {
		bounce *next = made->next;
		made->next = ws->spare_bounces;
		ws->spare_bounces = made;
		made = next;
	}
	pthread_mutex_unlock(&ws->mu);
	return STRATA_OK;
}

static strata_status store_read(strata_weight_store *ws,
				const strata_tensor *const *tensors,
				void *const *dst, size_t n, bool check,
				strata_error *err)
{
	const strata_catalog *c = ws->c;
	for (size_t i = 0; i < n; i++)
		if (tensors[i] < c->tensors || tensors[i] >= c->tensors + c->count ||
		    (!dst[i] && tensors[i]->bytes))
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "pass tensors of the store's own catalog and a buffer for each",
					   "weight store read: entry %zu is not a tensor of this catalog or has no buffer",
					   i);
	/* A unit's tensors (a dozen or so) are ordered on the stack, so a
	 * streamed run's steady reads allocate nothing. */
	enum { SMALL_READ = 64 };
	place pl_small[SMALL_READ];
	size_t order_small[SMALL_READ];
	bool small = n <= SMALL_READ;
	place *pl = small ? pl_small
			  : strata_calloc_or_error(n, sizeof *pl, "read order",
						   err);
	size_t *order = !pl ? NULL
		       : small ? order_small
			       : strata_calloc(n, sizeof *order);
	if (!order) {
		if (!small)
			strata_free(pl);
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory ordering %zu reads", n);
	}
	for (size_t i = 0; i < n; i++)
		pl[i] = (place){tensors[i]->file, tensors[i]->offset, i};
	qsort(pl, n, sizeof *pl, by_place);
	for (size_t i = 0; i < n; i++)
		order[i] = pl[i].index;
	if (!small)
		strata_free(pl);
	strata_status s = STRATA_OK;
	for (size_t i = 0; i < n && !s;) {
		const strata_tensor *t = tensors[order[i]];
		group g = {t->file, t->offset, t->bytes, i, 1};
		while (i + g.count < n) {
			const strata_tensor *u = tensors[order[i + g.count]];
			if (u->file != g.file || u->offset != g.offset + g.bytes ||
			    g.bytes + u->bytes > MAX_GROUP_BYTES ||
			    g.count == STRATA_PREADV_MAX)
				break;
			g.bytes += u->bytes;
			g.count++;
		}
		if (g.bytes)
			s = do_group(ws, &g, tensors, dst, order, check, err);
		i += g.count;
	}
	if (!small)
		strata_free(order);
	return s;
}

strata_status strata_weight_store_read(strata_weight_store *ws,
				       const strata_tensor *const *tensors,
				       void *const *dst, size_t n,
				       strata_error *err)
{
	return store_read(ws, tensors, dst, n, false, err);
}

strata_status strata_weight_store_read_checked(
	strata_weight_store *ws, const strata_tensor *const *tensors,
	void *const *dst, size_t n, strata_error *err)
{
	return store_read(ws, tensors, dst, n, true, err);
}

/* ------------------------------------------------------------------------ */
/* Mapping                                                                  */
/* ------------------------------------------------------------------------ */

/* Maps file f whole (mutex held). */
static strata_status map_file(strata_weight_store *ws, uint32_t f,
			      strata_error *err)
{
	const strata_catalog_file *cf = &ws->c->files[f];
	int fd = -1;
	strata_status s = strata_catalog_file_open(ws->c, f, 0, &fd, err);
	if (s)
		return s;
	void *m = cf->size <= SIZE_MAX
			  ? mmap(NULL, (size_t)cf->size, PROT_READ, MAP_PRIVATE,
				 fd, 0)
			  : MAP_FAILED;
	int e = errno;
	strata_sys.close(fd);
	if (m == MAP_FAILED)
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "read the file instead (--no-mmap)",
				   "cannot map '%s': %s", cf->path, strerror(e));
	ws->maps[f] = m;
	if (!ws->touched[f]) {
		ws->touched[f] = true;
		ws->touched_paths[ws->touched_count++] = cf->path;
	}
	return STRATA_OK;
}

/* A checked mapping of tensor t whose pages are not in the page cache:
 * read with O_DIRECT into memory of its own (read_cold.c), which on the CPU
 * VM costs a fraction of faulting the cold file's pages in and checking
 * them. E_UNSUPPORTED: the file takes no O_DIRECT; map it. */
static strata_status map_cold(strata_weight_store *ws, const strata_tensor *t,
			      const void **data, strata_error *err)
{
	pthread_mutex_lock(&ws->mu);
	strata_status s = STRATA_OK;
	if (ws->cold_count == ws->cold_cap) {
		size_t cap = ws->cold_cap ? 2 * ws->cold_cap : 64;
		strata__cold_region *g = strata_realloc(ws->colds, cap * sizeof *g);
		if (g) {
			ws->colds = g;
			ws->cold_cap = cap;
		} else {
			s = strata_fail(err, STRATA_E_NOMEM, "free some memory",
					"out of memory listing read tensors");
		}
	}
	pthread_mutex_unlock(&ws->mu);
	if (s)
		return s;
	strata_error ignored;
	int fd = -1;
	if (strata_catalog_file_open(ws->c, t->file, O_DIRECT, &fd, &ignored))
		return STRATA_E_UNSUPPORTED;
	strata__cold_region r;
	s = strata__read_cold(t, fd, ws->c->files[t->file].path, &r, err);
	strata_sys.close(fd);
	if (s)
		return s;
	pthread_mutex_lock(&ws->mu);
	if (ws->cold_count < ws->cold_cap) {
		ws->colds[ws->cold_count++] = r;
	} else { /* another thread took the room made: make more */
		size_t cap = 2 * ws->cold_cap;
		strata__cold_region *g = strata_realloc(ws->colds, cap * sizeof *g);
		if (g) {
			ws->colds = g;
			ws->cold_cap = cap;
			ws->colds[ws->cold_count++] = r;
		}
		s = g ? STRATA_OK
		      : strata_fail(err, STRATA_E_NOMEM, "free some memory",
				    "out of memory listing read tensors");
	}
	pthread_mutex_unlock(&ws->mu);
	if (s) {
		munmap(r.base, r.bytes);
		return s;
	}
	*data = r.data;
	return STRATA_OK;
}

static strata_status store_map(strata_weight_store *ws, const strata_tensor *t,
			       const void **data, bool check,
			       strata_error *err)
{
	const strata_catalog *c = ws->c;
	if (t < c->tensors || t >= c->tensors + c->count || !t->bytes)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "map a non-empty tensor of the store's own catalog",
				   "weight store map: not a tensor of this catalog, or empty");
	pthread_mutex_lock(&ws->mu);
	strata_status s = ws->maps[t->file] ? STRATA_OK
					    : map_file(ws, t->file, err);
	unsigned char *base = ws->maps[t->file];
	pthread_mutex_unlock(&ws->mu);
	if (s == STRATA_E_UNSUPPORTED)
		return s;
	if (s) {
		err->code = STRATA_E_CKPT_READ;
		return strata_error_prefix(err, "mapping tensor '%s'", t->name);
	}
	const char *path = c->files[t->file].path;
	const void *cold = NULL;
	if (check && strata__tensor_check_unit(t) &&
	    strata__range_cold(base, t->offset, t->bytes)) {
		s = map_cold(ws, t, &cold, err);
		if (s == STRATA_E_CKPT_VALUE || s == STRATA_E_NOMEM)
			return s;
		if (s != STRATA_OK && s != STRATA_E_UNSUPPORTED) {
			err->code = STRATA_E_CKPT_READ;
			return strata_error_prefix(err, "reading tensor '%s'",
						   t->name);
		}
	}
	int e = cold ? 0
	       : check ? strata__populate_checked(t, base + t->offset, err)
		       : strata__populate(base + t->offset, t->bytes, true);
	if (e < 0)
		return STRATA_E_CKPT_VALUE;
	if (e)
		return strata_fail(err, STRATA_E_CKPT_READ,
				   "check the disk, and that nothing rewrites the file while strata runs",
				   "reading tensor '%s' of '%s' through its mapping failed: %s",
				   t->name, path, strerror(e));
	pthread_mutex_lock(&ws->mu);
	ws->reads++;
	ws->read_bytes += t->bytes;
	if (!ws->payload[t->file]) {
		ws->payload[t->file] = true;
		ws->payload_paths[ws->payload_count++] = path;
	}
	pthread_mutex_unlock(&ws->mu);
	*data = cold ? cold : base + t->offset;
	return STRATA_OK;
}

strata_status strata_weight_store_map(strata_weight_store *ws,
				      const strata_tensor *t,
				      const void **data, strata_error *err)
{
	return store_map(ws, t, data, false, err);
}

strata_status strata_weight_store_map_checked(strata_weight_store *ws,
					      const strata_tensor *t,
					      const void **data,
					      strata_error *err)
{
	return store_map(ws, t, data, true, err);
}

void strata_weight_store_get_stats(const strata_weight_store *ws,
				   strata_weight_store_stats *out)
{
	strata_weight_store *w = (strata_weight_store *)ws;
	pthread_mutex_lock(&w->mu);
	bool direct = w->want_direct && !w->direct_refused;
	*out = (strata_weight_store_stats){
		.backend = direct ? "o_direct" : "pread",
		.cache_hits = w->hits,
		.cache_misses = w->misses,
		.evictions = w->evictions,
		.currently_cached_shards = w->n_open,
		.touched_count = w->touched_count,
		.touched_shard_paths = w->touched_paths,
		.payload_count = w->payload_count,
		.payload_shard_paths = w->payload_paths,
		.physical_reads = w->reads,
		.physical_read_bytes = w->read_bytes,
		.coalesced_group_hits = w->coalesced,
		.note = w->direct_refused ? w->note : NULL,
	};
	pthread_mutex_unlock(&w->mu);
}
