/* prefix_cache.c - one replica's prefix cache: saved KV of earlier prompts,
 * reused by a later prompt that starts with the same tokens (layer: serve).
 *
 * Entries are prompts; a later prompt reuses the longest token-exact
 * common prefix with any entry, since the keys and values of positions
 * [0, m) depend on tokens [0, m) only. A hit covering at least half of its
 * entry cuts the entry down to the shared part rather than saving the new
 * prompt too, so many tails of one prefix keep one entry. Bytes (KV, ids
 * and the entry itself) stay within the budget by evicting the least
 * recently used entries; a guest (a spilled request's prompt) enters as
 * the least recently used. The lookup is a linear scan: a replica holds
 * tens of entries, and at most STRATA_PREFIX_CACHE_MAX_ENTRIES, so one
 * scan costs far less than one forward position.
 */
#include <string.h>

#include "serve/prefix_pool.h"
#include "strata/serve.h"

typedef struct entry {
	struct entry *next;
	int32_t *tokens; /* (ids) */
	uint32_t n;	 /* positions held */
	uint32_t ids;	 /* token ids allocated: n, or more after a cut */
	uint32_t parts;	 /* 2 x layers */
	uint64_t block;	 /* bytes of each part's block, rounded */
	uint64_t bytes;	 /* everything this entry holds */
	uint64_t last_used;
	/* (parts) blocks of the pool, (n, kv_dim) f32 each: layer l's keys
	 * at 2 l, its values at 2 l + 1 (strata_kv_cache_save) */
	float *part[];
} entry;

struct strata_prefix_cache {
	entry *head;
	entry *last_hit;   /* the entry the last apply restored from, or NULL */
	uint32_t last_reused;
	uint64_t clock;
	strata__prefix_pool pool;
	strata_prefix_cache_stats stats;
};

/* ------------------------------------------------------------------------ */

static uint32_t common_prefix(const int32_t *a, uint32_t na, const int32_t *b,
			      uint32_t nb)
{
	uint32_t n = na < nb ? na : nb, i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* The bytes of an entry's records: itself, its block list, its ids. */
static uint64_t record_bytes(uint32_t parts, uint32_t ids)
{
	return sizeof(entry) + (uint64_t)parts * sizeof(float *) +
	       (uint64_t)ids * sizeof(int32_t);
}

/* Frees e and gives its blocks (those taken) back to the pool. */
static void entry_free(strata_prefix_cache *c, entry *e)
{
	if (!e)
		return;
	for (uint32_t i = 0; i < e->parts; i++)
		if (e->part[i])
			strata__pool_give(&c->pool, e->part[i], e->block);
	strata_free(e->tokens);
	strata_free(e);
}

/* Unlinks and frees the least recently used entry. */
static void evict_one(strata_prefix_cache *c)
{
	entry **victim = &c->head;
	for (entry **p = &c->head; *p; p = &(*p)->next)
		if ((*p)->last_used < (*victim)->last_used)
			victim = p;
	entry *e = *victim;
	*victim = e->next;
	c->stats.bytes -= e->bytes;
	c->stats.entries--;
	c->stats.evictions++;
	if (c->last_hit == e)
		c->last_hit = NULL;
	entry_free(c, e);
}

/* Takes a block for every part of e, or none: false (and every block given
 * back) when the pool's free runs cannot hold them all. */
static bool take_all(strata_prefix_cache *c, entry *e)
{
	for (uint32_t i = 0; i < e->parts; i++)
		if (!(e->part[i] = strata__pool_take(&c->pool, e->block))) {
			while (i--) {
				strata__pool_give(&c->pool, e->part[i],
						  e->block);
				e->part[i] = NULL;
			}
			return false;
		}
	return true;
}

/* Finds room for e's blocks (e not yet linked): free runs first, then a
 * new chunk while the chunks stay within the budget, then the room evicted
 * entries leave; with nothing left to evict, the empty chunks go (they may
 * be too small for this entry's blocks) and a fresh one is taken. Ends:
 * each turn adds a chunk (the room left shrinking by at least a block),
 * evicts an entry, or frees chunks only when no entry is left, after
 * which one chunk of up to the whole budget holds every block (the entry
 * is within the budget). */
static strata_status place(strata_prefix_cache *c, entry *e,
			   strata_error *err)
{
	uint64_t budget = c->stats.budget_bytes & ~(uint64_t)(STRATA_ALIGN - 1);
	uint64_t all = e->block * e->parts;
	for (;;) {
		if (take_all(c, e))
			return STRATA_OK;
		uint64_t room = budget > c->pool.held_bytes
					? budget - c->pool.held_bytes
					: 0;
		if (room >= e->block) {
			uint64_t chunk = all > STRATA_PREFIX_CACHE_CHUNK_BYTES
						 ? all
						 : STRATA_PREFIX_CACHE_CHUNK_BYTES;
			strata_status st = strata__pool_grow(
				&c->pool, chunk < room ? chunk : room, err);
			if (st)
				return st;
		} else if (c->head) {
			evict_one(c);
		} else if (!strata__pool_release_empty(&c->pool)) {
			return strata_fail(err, STRATA_E_INVALID_ARG,
					   "this is a bug; report it",
					   "prefix cache: %llu bytes of KV do "
					   "not fit an empty budget of %llu",
					   (unsigned long long)all,
					   (unsigned long long)budget);
		}
	}
}

/* ------------------------------------------------------------------------ */

strata_status strata_prefix_cache_create(strata_backend *b,
					 uint64_t budget_bytes,
					 strata_prefix_cache **out,
					 strata_error *err)
{
	strata_prefix_cache *c = strata_calloc_or_error(1, sizeof *c,
							"prefix cache", err);
	if (!c)
		return STRATA_E_NOMEM;
	strata__pool_init(&c->pool, b);
	c->stats.budget_bytes = budget_bytes;
	*out = c;
	return STRATA_OK;
}

void strata_prefix_cache_destroy(strata_prefix_cache *c)
{
	if (!c)
		return;
	while (c->head) {
		entry *e = c->head;
		c->head = e->next;
		entry_free(c, e);
	}
	strata__pool_fini(&c->pool);
	strata_free(c);
}

strata_status strata_prefix_cache_apply(strata_prefix_cache *c,
					strata_forward *f,
					const int32_t *prompt,
					uint32_t n_prompt, uint32_t *reused,
					strata_error *err)
{
	strata_forward_reset(f);
	*reused = 0;
	c->last_hit = NULL;
	c->stats.lookups++;
	if (n_prompt < 2)
		return STRATA_OK;
	entry *best = NULL;
	uint32_t best_m = 0;
	for (entry *e = c->head; e; e = e->next) {
		uint32_t m = common_prefix(e->tokens, e->n, prompt,
					   n_prompt - 1);
		if (m > best_m) {
			best = e;
			best_m = m;
		}
	}
	if (!best)
		return STRATA_OK;
	strata_status st = strata_kv_cache_restore(
		strata_forward_kv_cache(f), strata_forward_selected(f),
		(const float *const *)best->part, best->parts, best->n, best_m,
		err);
	if (st) {
		strata_forward_reset(f);
		return st;
	}
	best->last_used = ++c->clock;
	c->last_hit = best;
	c->last_reused = best_m;
	c->stats.hits++;
	c->stats.reused_tokens += best_m;
	*reused = best_m;
	return STRATA_OK;
}

/* Cuts e down to its first m positions: each block keeps its first m rows
 * and gives the rest back to the pool; the ids shrink too where the
 * allocator obliges (else the old ones stay, counted). */
static void truncate_entry(strata_prefix_cache *c, const strata_forward *f,
			   entry *e, uint32_t m)
{
	const strata_infer_hparams *hp = strata_forward_hparams(f);
	uint64_t row = (uint64_t)hp->kv_heads * hp->head_dim * sizeof(float);
	uint64_t block = 0;
	(void)strata_checked_align(row * m, &block, "cut KV block", NULL);
	for (uint32_t i = 0; i < e->parts; i++)
		strata__pool_shrink(&c->pool, e->part[i], e->block, block);
	int32_t *ids = strata_realloc(e->tokens, m * sizeof(int32_t));
	if (ids) {
		e->tokens = ids;
		e->ids = m;
	}
	uint64_t bytes = block * e->parts + record_bytes(e->parts, e->ids);
	c->stats.bytes -= e->bytes - bytes;
	e->block = block;
	e->bytes = bytes;
	e->n = m;
	c->stats.truncated++;
}

/* A new entry for prompt, its blocks not yet taken; NULL on E_NOMEM. */
static entry *entry_new(uint32_t parts, const int32_t *prompt,
			uint32_t n_prompt, uint64_t block, strata_error *err)
{
	entry *e = strata_calloc_or_error(
		1, sizeof *e + (size_t)parts * sizeof(float *),
		"prefix cache entry", err);
	if (!e)
		return NULL;
	if (!(e->tokens = strata_alloc_or_error(n_prompt * sizeof(int32_t),
						"prefix cache ids", err))) {
		strata_free(e);
		return NULL;
	}
	memcpy(e->tokens, prompt, n_prompt * sizeof(int32_t));
	e->n = e->ids = n_prompt;
	e->parts = parts;
	e->block = block;
	e->bytes = block * parts + record_bytes(parts, n_prompt);
	return e;
}

strata_status strata_prefix_cache_save(strata_prefix_cache *c,
				       const strata_forward *f,
				       const int32_t *prompt,
				       uint32_t n_prompt, bool guest,
				       strata_error *err)
{
	/* A hit covering at least half its entry proves that part shared:
	 * keep just that part instead of a second near-copy per prompt (a
	 * shared prefix with many different tails then holds one entry). */
	entry *hit = c->last_hit;
	c->last_hit = NULL;
	if (hit && (uint64_t)c->last_reused * 2 >= hit->n) {
		if (c->last_reused < hit->n && c->last_reused > 0)
			truncate_entry(c, f, hit, c->last_reused);
		return STRATA_OK;
	}
	for (entry *e = c->head; e; e = e->next)
		if (e->n >= n_prompt &&
		    common_prefix(e->tokens, e->n, prompt, n_prompt) ==
			    n_prompt) {
			e->last_used = ++c->clock;
			return STRATA_OK; /* already held */
		}
	uint32_t parts = 2 * strata_forward_hparams(f)->layers;
	uint64_t part_bytes, block, kv_bytes, bytes;
	strata_status st = strata_kv_cache_part_bytes(
		strata_forward_kv_cache(f), n_prompt, &part_bytes, err);
	if (st || (st = strata_checked_align(part_bytes, &block,
					     "saved KV block bytes", err)) ||
	    (st = strata_checked_mul(block, parts, &kv_bytes,
				     "saved KV bytes", err)) ||
	    (st = strata_checked_add(kv_bytes, record_bytes(parts, n_prompt),
				     &bytes, "prefix cache entry bytes", err)))
		return st;
	if (bytes > c->stats.budget_bytes || block > SIZE_MAX || block == 0) {
		c->stats.skipped++;
		return STRATA_OK;
	}
	/* A guest takes only room that is free or held by guests: evicting
	 * an entry of a key that lives here costs that key's next request a
	 * miss, for a prompt whose key may not spill here again. On the CPU
	 * bench (16 keys, 2 replicas of 9 entries) this took the follow
	 * route from 92.6-93.3% prefix hits to 95.7-96.8%. */
	if (guest) {
		uint64_t guests = 0;
		for (entry *g = c->head; g; g = g->next)
			guests += g->last_used == 0 ? g->bytes : 0;
		if (c->stats.bytes - guests + bytes > c->stats.budget_bytes) {
			c->stats.guests_declined++;
			return STRATA_OK;
		}
	}
	while (c->head && c->stats.entries >= STRATA_PREFIX_CACHE_MAX_ENTRIES)
		evict_one(c);
	entry *e = entry_new(parts, prompt, n_prompt, block, err);
	if (!e)
		return STRATA_E_NOMEM;
	if ((st = place(c, e, err)) ||
	    (st = strata_kv_cache_save(strata_forward_kv_cache(f),
				       strata_forward_selected(f), n_prompt,
				       e->part, parts, part_bytes, err))) {
		entry_free(c, e);
		return st;
	}
	while (c->head && c->stats.bytes + bytes > c->stats.budget_bytes)
		evict_one(c);
	/* A guest's entry is the first evicted until a hit warms it. */
	e->last_used = guest ? 0 : ++c->clock;
	e->next = c->head;
	c->head = e;
	c->stats.bytes += bytes;
	if (c->stats.bytes > c->stats.peak_bytes)
		c->stats.peak_bytes = c->stats.bytes;
	c->stats.entries++;
	c->stats.saved++;
	return STRATA_OK;
}

/* The entry holding the longest token-exact prefix of prompt[0..n) and
 * that prefix's length (NULL, 0: none), as apply finds it. */
static entry *best_match(const strata_prefix_cache *c, const int32_t *prompt,
			 uint32_t n, uint32_t *m_out)
{
	entry *best = NULL;
	uint32_t best_m = 0;
	for (entry *e = c->head; e; e = e->next) {
		uint32_t m = common_prefix(e->tokens, e->n, prompt, n);
		if (m > best_m) {
			best = e;
			best_m = m;
		}
	}
	*m_out = best_m;
	return best;
}

/* Frees every entry holding a strict prefix of prompt[0..n) when one
 * entry holds it all (a longer entry replaced them: any later match on
 * them matches it at least as far). Not counted as evictions. */
static void drop_prefixes_of(strata_prefix_cache *c, const int32_t *prompt,
			     uint32_t n)
{
	uint32_t m = 0;
	if (!best_match(c, prompt, n, &m) || m != n)
		return;
	for (entry **p = &c->head; *p;) {
		entry *e = *p;
		if (e->n >= n || common_prefix(e->tokens, e->n, prompt, n) !=
					 e->n) {
			p = &e->next;
			continue;
		}
		*p = e->next;
		c->stats.bytes -= e->bytes;
		c->stats.entries--;
		c->stats.replaced++;
		entry_free(c, e);
	}
}

strata_status strata_prefix_cache_save_extending(strata_prefix_cache *c,
						 const strata_forward *f,
						 const int32_t *prompt,
						 uint32_t n_prompt,
						 strata_error *err)
{
	uint32_t m = 0;
	entry *e = n_prompt >= 2 ? best_match(c, prompt, n_prompt - 1, &m)
				 : NULL;
	c->last_hit = NULL;
	if (e && m == e->n && n_prompt > e->n) {
		/* The whole entry is this prompt's start (a conversation
		 * resent with a new turn): the longer prompt replaces it, so
		 * the next turn reuses all of this one. */
		strata_status st = strata_prefix_cache_save(c, f, prompt,
							    n_prompt, false,
							    err);
		if (st == STRATA_OK)
			drop_prefixes_of(c, prompt, n_prompt);
		return st;
	}
	c->last_hit = e;
	c->last_reused = m;
	return strata_prefix_cache_save(c, f, prompt, n_prompt, false, err);
}

void strata_prefix_cache_get_stats(const strata_prefix_cache *c,
				   strata_prefix_cache_stats *out)
{
	*out = c->stats;
	out->pool_bytes = c->pool.held_bytes;
	out->pool_chunks = c->pool.chunk_count;
}
