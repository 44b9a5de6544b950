/* prefix_pool.c - the prefix cache's KV memory: chunks taken once (pinned
 * on CUDA) and reused as first-fit blocks with merged free runs
 * (layer: serve; see prefix_pool.h).
 *
 * Why not one allocation per saved prefix: a fresh 25 MB malloc maps pages
 * (page faults under the process's memory lock, contended by every
 * replica's thread) and free() unmaps them again; and pageable memory makes
 * every device copy go through the driver's staging buffers. A chunk is
 * paid for once and pinned once (~0.7 s/GiB), then reused until the cache
 * goes.
 */
#include "serve/prefix_pool.h"

/* A free run, written in the first bytes of the free memory it describes
 * (every run is at least STRATA_ALIGN bytes, far more than this). */
typedef struct run {
	struct run *next; /* the next free run of the chunk, higher address */
	uint64_t bytes;
} run;

struct strata__pool_chunk {
	strata__pool_chunk *next;
	char *base;
	uint64_t bytes;
	run *free; /* free runs in address order, none adjacent */
};

/* ------------------------------------------------------------------------ */

static void chunk_free(strata__prefix_pool *p, strata__pool_chunk *ch)
{
	if (p->b)
		strata_backend_host_free(p->b, ch->base);
	else
		strata_free(ch->base);
	strata_free(ch);
}

static strata__pool_chunk *chunk_of(const strata__prefix_pool *p,
				    const char *ptr)
{
	for (strata__pool_chunk *ch = p->chunks; ch; ch = ch->next)
		if (ptr >= ch->base && ptr < ch->base + ch->bytes)
			return ch;
	return NULL;
}

static uint64_t rounded(uint64_t bytes)
{
	return (bytes + STRATA_ALIGN - 1) & ~(uint64_t)(STRATA_ALIGN - 1);
}

/* ------------------------------------------------------------------------ */

void strata__pool_init(strata__prefix_pool *p, strata_backend *b)
{
	*p = (strata__prefix_pool){.b = b};
}

void strata__pool_fini(strata__prefix_pool *p)
{
	while (p->chunks) {
		strata__pool_chunk *ch = p->chunks;
		p->chunks = ch->next;
		chunk_free(p, ch);
	}
	*p = (strata__prefix_pool){.b = p->b};
}


strata_status strata__pool_grow(strata__prefix_pool *p, uint64_t bytes,
				strata_error *err)
{
	if (bytes == 0 || bytes % STRATA_ALIGN || bytes > SIZE_MAX)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller; report it",
				   "prefix cache chunk of %llu bytes (a nonzero "
				   "multiple of %u is needed)",
				   (unsigned long long)bytes, STRATA_ALIGN);
	strata__pool_chunk *ch = strata_calloc_or_error(
		1, sizeof *ch, "prefix cache chunk", err);
	if (!ch)
		return STRATA_E_NOMEM;
	void *mem = NULL;
	strata_status st = STRATA_OK;
	if (p->b)
		st = strata_backend_host_alloc(p->b, bytes, true, &mem, err);
	else if (!(mem = strata_alloc_or_error((size_t)bytes,
					       "prefix cache chunk memory",
					       err)))
		st = STRATA_E_NOMEM;
	if (st) {
		strata_free(ch);
		return st;
	}
	ch->base = mem;
	ch->bytes = bytes;
	ch->free = (run *)mem;
	*ch->free = (run){.next = NULL, .bytes = bytes};
	/* Appended: blocks fill the older chunks first. */
	strata__pool_chunk **tail = &p->chunks;
	while (*tail)
		tail = &(*tail)->next;
	*tail = ch;
	p->held_bytes += bytes;
	p->chunk_count++;
	return STRATA_OK;
}

void *strata__pool_take(strata__prefix_pool *p, uint64_t bytes)
{
	if (bytes == 0 || bytes > UINT64_MAX - STRATA_ALIGN)
		return NULL;
	uint64_t need = rounded(bytes);
	for (strata__pool_chunk *ch = p->chunks; ch; ch = ch->next)
		for (run **at = &ch->free; *at; at = &(*at)->next) {
			run *r = *at;
			if (r->bytes < need)
				continue;
			if (r->bytes == need) {
				*at = r->next;
			} else {
				run *rest = (run *)((char *)r + need);
				*rest = (run){.next = r->next,
					      .bytes = r->bytes - need};
				*at = rest;
			}
			p->used_bytes += need;
			return r;
		}
	return NULL;
}

void strata__pool_give(strata__prefix_pool *p, void *ptr, uint64_t bytes)
{
	if (!ptr || bytes == 0)
		return;
	strata__pool_chunk *ch = chunk_of(p, ptr);
	if (!ch)
		return; /* not ours: nothing to merge it into */
	uint64_t size = rounded(bytes);
	char *at = ptr;
	run *prev = NULL, *next = ch->free;
	while (next && (char *)next < at) {
		prev = next;
		next = next->next;
	}
	run *r = (run *)(void *)at;
	*r = (run){.next = next, .bytes = size};
	if (next && at + size == (char *)next) {
		r->bytes += next->bytes;
		r->next = next->next;
	}
	if (prev && (char *)prev + prev->bytes == at) {
		prev->bytes += r->bytes;
		prev->next = r->next;
	} else if (prev) {
		prev->next = r;
	} else {
		ch->free = r;
	}
	p->used_bytes -= size;
}

void strata__pool_shrink(strata__prefix_pool *p, void *ptr, uint64_t bytes,
			 uint64_t keep)
{
	uint64_t old = rounded(bytes), now = rounded(keep);
	if (now < old)
		strata__pool_give(p, (char *)ptr + now, old - now);
}

uint64_t strata__pool_release_empty(strata__prefix_pool *p)
{
	uint64_t freed = 0;
	strata__pool_chunk **at = &p->chunks;
	while (*at) {
		strata__pool_chunk *ch = *at;
		if (ch->free && ch->free->bytes == ch->bytes) {
			*at = ch->next;
			freed += ch->bytes;
			p->held_bytes -= ch->bytes;
			p->chunk_count--;
			chunk_free(p, ch);
		} else {
			at = &ch->next;
		}
	}
	return freed;
}
