/* prefix_cache.c - one replica's prefix cache: saved KV of earlier prompts,
 * reused by a later prompt that starts with the same tokens (layer: infer).
 *
 * Entries are prompts; a later prompt reuses the longest token-exact
 * common prefix with any entry, since the keys and values of positions
 * [0, m) depend on tokens [0, m) only. A hit covering at least half of its
 * entry cuts the entry down to the shared part rather than saving the new
 * prompt too, so many tails of one prefix keep one entry. Bytes (KV, ids
 * and the entry itself) stay within the budget by evicting the least
 * recently used entries; a guest (a spilled request's prompt) enters as
 * the least recently used. The lookup is a linear scan: a replica holds
 * tens of entries, and one scan costs far less than one forward
 * position.
 */
#include <string.h>

#include "strata/batch.h"

typedef struct entry {
	struct entry *next;
	int32_t *tokens; /* (n) */
	float *kv;	 /* (layers, 2, n, kv_dim), strata_forward_kv_save */
	uint32_t n;
	uint64_t bytes; /* everything this entry holds */
	uint64_t last_used;
} entry;

struct strata_prefix_cache {
	entry *head;
	entry *last_hit;   /* the entry the last apply restored from, or NULL */
	uint32_t last_reused;
	uint64_t clock;
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

static void entry_free(entry *e)
{
	if (!e)
		return;
	strata_free(e->tokens);
	strata_free(e->kv);
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
	entry_free(e);
}

/* ------------------------------------------------------------------------ */

strata_status strata_prefix_cache_create(uint64_t budget_bytes,
					 strata_prefix_cache **out,
					 strata_error *err)
{
	strata_prefix_cache *c = strata_calloc_or_error(1, sizeof *c,
							"prefix cache", err);
	if (!c)
		return STRATA_E_NOMEM;
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
		entry_free(e);
	}
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
	strata_status st = strata_forward_kv_restore(f, best->kv, best->n,
						     best_m, err);
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

/* Cuts e down to its first m positions, in place: the layout
 * (layers, 2, n, kv_dim) becomes (layers, 2, m, kv_dim). Each block moves
 * to an offset no later than its own and past every block already moved. */
static void truncate_entry(strata_prefix_cache *c, const strata_forward *f,
			   entry *e, uint32_t m)
{
	const strata_infer_hparams *hp = strata_forward_hparams(f);
	size_t kv = (size_t)hp->kv_heads * hp->head_dim;
	size_t old_row = (size_t)e->n * kv, row = (size_t)m * kv;
	for (uint32_t l = 0; l < hp->layers; l++) {
		memmove(e->kv + 2 * l * row, e->kv + 2 * l * old_row,
			row * sizeof(float));
		memmove(e->kv + (2 * l + 1) * row,
			e->kv + (2 * l + 1) * old_row, row * sizeof(float));
	}
	uint64_t freed = (uint64_t)(e->n - m) *
			 (2 * hp->layers * kv * sizeof(float) + sizeof(int32_t));
	/* Shrinking in place keeps the pointers valid if the allocator
	 * declines; the bytes counted are the ones still needed. */
	float *kv_small = strata_realloc(e->kv, 2 * hp->layers * row *
						       sizeof(float));
	if (kv_small)
		e->kv = kv_small;
	e->n = m;
	e->bytes -= freed;
	c->stats.bytes -= freed;
	c->stats.truncated++;
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
	uint64_t kv_bytes, bytes;
	strata_status st = strata_forward_kv_bytes(f, n_prompt, &kv_bytes,
						   err);
	if (st)
		return st;
	bytes = kv_bytes + (uint64_t)n_prompt * sizeof(int32_t) +
		sizeof(entry);
	if (bytes > c->stats.budget_bytes || kv_bytes > SIZE_MAX) {
		c->stats.skipped++;
		return STRATA_OK;
	}
	entry *e = strata_calloc_or_error(1, sizeof *e, "prefix cache entry",
					  err);
	if (!e)
		return STRATA_E_NOMEM;
	e->tokens = strata_alloc_or_error(n_prompt * sizeof(int32_t),
					  "prefix cache ids", err);
	e->kv = e->tokens ? strata_alloc_or_error((size_t)kv_bytes,
						  "prefix cache KV", err)
			  : NULL;
	if (!e->kv) {
		entry_free(e);
		return STRATA_E_NOMEM;
	}
	if ((st = strata_forward_kv_save(f, n_prompt, e->kv, kv_bytes, err))) {
		entry_free(e);
		return st;
	}
	memcpy(e->tokens, prompt, n_prompt * sizeof(int32_t));
	e->n = n_prompt;
	e->bytes = bytes;
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

void strata_prefix_cache_get_stats(const strata_prefix_cache *c,
				   strata_prefix_cache_stats *out)
{
	*out = c->stats;
}
