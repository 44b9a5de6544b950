/* prefix_pool.h - the host memory of one prefix cache's saved KV: chunks
 * taken once from the backend (pinned on CUDA, so the copies to and from
 * the device are real DMA) and handed out again and again as blocks, so a
 * save neither maps, pins nor frees memory (layer: serve). Not a public
 * header: src/serve/prefix_cache.c and its tests use it.
 *
 * Blocks are first fit over each chunk's free runs, which are kept in
 * address order and merged with their neighbours when a block comes back.
 * The free runs' bookkeeping lives in the free memory itself (a run's first
 * bytes), so giving a block back never allocates and never fails. Every
 * size is rounded up to STRATA_ALIGN; a chunk's memory is the
 * backend's pinned host memory, or strata_alloc memory without a backend.
 * One thread at a time (a cache belongs to one replica).
 */
#ifndef STRATA_SERVE_PREFIX_POOL_H
#define STRATA_SERVE_PREFIX_POOL_H

#include "strata/backend.h"

typedef struct strata__pool_chunk strata__pool_chunk;

typedef struct strata__prefix_pool {
	strata_backend *b; /* where chunks come from; NULL: strata_alloc */
	strata__pool_chunk *chunks;
	uint64_t held_bytes; /* every chunk's bytes, free runs included */
	uint64_t used_bytes; /* the blocks handed out (rounded sizes) */
	uint32_t chunk_count;
} strata__prefix_pool;

/* An empty pool drawing its chunks from b (NULL: plain memory). */
void strata__pool_init(strata__prefix_pool *p, strata_backend *b);
/* Frees every chunk, blocks still handed out included. */
void strata__pool_fini(strata__prefix_pool *p);

/* Adds a chunk of `bytes` (a nonzero multiple of STRATA_ALIGN),
 * wholly free. E_NOMEM (or the backend's error) leaves the pool as it
 * was. */
strata_status strata__pool_grow(strata__prefix_pool *p, uint64_t bytes,
				strata_error *err);

/* A block of `bytes` (> 0, rounded up) from the first free run that holds
 * it, in chunk order; NULL when no run does (the pool is unchanged). The
 * block starts on a STRATA_ALIGN boundary of its chunk. */
void *strata__pool_take(strata__prefix_pool *p, uint64_t bytes);

/* Returns the block `ptr` of `bytes` (as taken, or as last shrunk), merging
 * it with free neighbours. */
void strata__pool_give(strata__prefix_pool *p, void *ptr, uint64_t bytes);

/* Keeps the first `keep` bytes of the block `ptr` of `bytes` and returns
 * the rest (nothing when both round alike). keep 0 returns all of it. */
void strata__pool_shrink(strata__prefix_pool *p, void *ptr, uint64_t bytes,
			 uint64_t keep);

/* Frees the chunks no block lives in; returns the bytes freed. */
uint64_t strata__pool_release_empty(strata__prefix_pool *p);

#endif
