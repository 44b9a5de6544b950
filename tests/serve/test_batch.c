/* test_batch.c - the batch runner's parts on the shipped stories260K: KV
 * save/restore gives the same logits as recomputing, the prefix cache's
 * longest match, budget and eviction at the exact edge, its allocation
 * failures, and a failing request failing the whole batch with nothing
 * answered (layer: serve). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/serve.h"

#define MODEL STRATA_SOURCE_DIR "/models/stories260K"

/* As `strata run` with no residency options: plan chooses, on the CPU. */
static void plan_defaults(strata_plan_options *p)
{
	memset(p, 0, sizeof *p);
	p->mode = STRATA_RESIDENCY_AUTO;
	p->device = STRATA_PLAN_DEVICE_CPU;
}

static strata_session *open_session(uint32_t positions)
{
	strata_session_options o = {.model_path = MODEL,
				    .threads = 1,
				    .positions = positions,
				    .prefill = positions};
	plan_defaults(&o.plan);
	strata_session *s = NULL;
	strata_error err;
	if (strata_session_open(&o, &s, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return s;
}

static void ids(int32_t *out, uint32_t n, int32_t first)
{
	for (uint32_t i = 0; i < n; i++)
		out[i] = 1 + (first + (int32_t)i * 7) % 500;
}

/* Runs prompt (n tokens) from position 0 and saves it into c. */
static void run_and_save(strata_prefix_cache *c, strata_forward *f,
			 const int32_t *prompt, uint32_t n, bool guest)
{
	strata_error err;
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, prompt, n, 0, NULL, NULL, &err),
			 0);
	assert_int_equal(strata_prefix_cache_save(c, f, prompt, n, guest, &err),
			 0);
}

/* The bytes one saved entry of prompt (n tokens) takes in a cache of s. */
static uint64_t entry_bytes(strata_session *s, const int32_t *prompt,
			    uint32_t n)
{
	strata_prefix_cache *c;
	strata_error err;
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    1u << 20, &c, &err),
			 0);
	run_and_save(c, strata_session_forward(s), prompt, n, false);
	strata_prefix_cache_stats st;
	strata_prefix_cache_get_stats(c, &st);
	strata_prefix_cache_destroy(c);
	return st.bytes;
}

/* ------------------------------------------------------------------------ */

/* Restoring a saved prefix then running the rest gives the bits of running
 * the whole prompt: K/V of [0, m) depend on tokens [0, m) only. */
static void test_kv_restore_same_logits(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	const strata_infer_hparams *hp = strata_session_hparams(s);
	uint32_t vocab = hp->vocab;
	int32_t p[20], other[5];
	ids(p, 20, 3);
	ids(other, 5, 99);
	float *want = test_calloc(vocab, sizeof(float));
	float *got = test_calloc(vocab, sizeof(float));
	strata_error err;
	assert_int_equal(strata_forward_run(f, p, 20, 0, NULL, want, &err), 0);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, p, 12, 0, NULL, NULL, &err), 0);
	uint64_t bytes, part;
	assert_int_equal(strata_kv_cache_bytes(strata_forward_kv_cache(f), 12,
					       &bytes, &err),
			 0);
	assert_int_equal(bytes, (uint64_t)hp->layers * 2 * 12 * hp->kv_heads *
					hp->head_dim * 4);
	assert_int_equal(strata_kv_cache_part_bytes(strata_forward_kv_cache(f),
						    12, &part, &err),
			 0);
	assert_int_equal(part * 2 * hp->layers, bytes);
	uint32_t count = 2 * hp->layers;
	float *saved = test_malloc(bytes);
	float **parts = test_calloc(count, sizeof *parts);
	for (uint32_t i = 0; i < count; i++)
		parts[i] = saved + i * (part / sizeof(float));
	assert_int_equal(strata_kv_cache_save(strata_forward_kv_cache(f),
					      strata_forward_selected(f), 12,
					      parts, count, part, &err),
			 0);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, other, 5, 0, NULL, NULL, &err),
			 0); /* overwrite the cache */
	const float *const *in = (const float *const *)parts;
	assert_int_equal(strata_kv_cache_restore(strata_forward_kv_cache(f),
						 strata_forward_selected(f), in,
						 count, 12, 8, &err),
			 0);
	assert_int_equal(strata_forward_position(f), 8);
	assert_int_equal(strata_forward_run(f, p + 8, 12, 8, NULL, got, &err),
			 0);
	assert_memory_equal(got, want, vocab * sizeof(float));
	/* misuse is refused and changes nothing */
	assert_int_equal(strata_kv_cache_save(strata_forward_kv_cache(f),
					      strata_forward_selected(f), 21,
					      parts, count, part, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_kv_cache_save(strata_forward_kv_cache(f),
					      strata_forward_selected(f), 12,
					      parts, count, part - 1, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_kv_cache_save(strata_forward_kv_cache(f),
					      strata_forward_selected(f), 12,
					      parts, count - 1, part, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_kv_cache_restore(strata_forward_kv_cache(f),
						 strata_forward_selected(f), in,
						 count, 12, 13, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_kv_cache_restore(strata_forward_kv_cache(f),
						 strata_forward_selected(f), in,
						 count + 1, 12, 8, &err),
			 STRATA_E_INVALID_ARG);
	assert_int_equal(strata_forward_position(f), 20);
	test_free(parts);
	test_free(saved);
	test_free(want);
	test_free(got);
	strata_session_close(s);
}

/* The longest token-exact prefix wins; the last prompt token is always
 * computed; a budget of exactly one entry keeps one, one byte less keeps
 * none; a prompt already held is not stored twice. */
static void test_prefix_cache_match_budget_eviction(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	int32_t a[10], b[10], q[13];
	ids(a, 10, 1);
	ids(b, 10, 200);
	/* learn one entry's size */
	strata_prefix_cache *c;
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    1u << 20, &c, &err),
			 0);
	assert_int_equal(strata_forward_run(f, a, 10, 0, NULL, NULL, &err), 0);
	assert_int_equal(strata_prefix_cache_save(c, f, a, 10, false, &err), 0);
	assert_int_equal(strata_prefix_cache_save(c, f, a, 10, false, &err), 0);
	strata_prefix_cache_stats st;
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.saved, 1);
	assert_int_equal(st.entries, 1);
	uint64_t one = st.bytes;
	strata_prefix_cache_destroy(c);

	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    one, &c, &err),
			 0);
	assert_int_equal(strata_prefix_cache_save(c, f, a, 10, false, &err), 0);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, b, 10, 0, NULL, NULL, &err), 0);
	assert_int_equal(strata_prefix_cache_save(c, f, b, 10, false, &err), 0);
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.bytes, one);
	assert_int_equal(st.peak_bytes, one); /* never two at once */
	uint32_t reused;
	memcpy(q, b, sizeof b);
	ids(q + 10, 3, 7);
	assert_int_equal(strata_prefix_cache_apply(c, f, q, 13, &reused, &err),
			 0);
	assert_int_equal(reused, 10);
	assert_int_equal(strata_forward_position(f), 10);
	/* the same prompt as the entry: all but its last token reused */
	assert_int_equal(strata_prefix_cache_apply(c, f, b, 10, &reused, &err),
			 0);
	assert_int_equal(reused, 9);
	/* a's entry was evicted: a miss, position 0 */
	assert_int_equal(strata_prefix_cache_apply(c, f, a, 10, &reused, &err),
			 0);
	assert_int_equal(reused, 0);
	assert_int_equal(strata_forward_position(f), 0);
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.lookups, 3);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.reused_tokens, 19);
	strata_prefix_cache_destroy(c);

	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    one - 1, &c, &err),
			 0);
	assert_int_equal(strata_forward_run(f, a, 10, 0, NULL, NULL, &err), 0);
	assert_int_equal(strata_prefix_cache_save(c, f, a, 10, false, &err), 0);
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.skipped, 1);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.bytes, 0);
	strata_prefix_cache_destroy(c);
	strata_session_close(s);
}

/* However large the budget, the cache holds at most
 * STRATA_PREFIX_CACHE_MAX_ENTRIES entries, the least recently used going
 * first: the newest prompts still hit, the oldest miss. */
static void test_prefix_cache_entry_cap(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	strata_prefix_cache *c;
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    (uint64_t)1 << 30, &c, &err),
			 0);
	const uint32_t n = STRATA_PREFIX_CACHE_MAX_ENTRIES + 40;
	int32_t p[4];
	for (uint32_t i = 0; i < n; i++) {
		/* distinct from the first token on: no entry cuts another */
		p[0] = 1 + (int32_t)(i % 500);
		p[1] = 1 + (int32_t)(i / 500);
		p[2] = 7;
		p[3] = 9;
		run_and_save(c, f, p, 4, false);
	}
	strata_prefix_cache_stats st;
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.saved, n);
	assert_int_equal(st.entries, STRATA_PREFIX_CACHE_MAX_ENTRIES);
	assert_int_equal(st.evictions, n - STRATA_PREFIX_CACHE_MAX_ENTRIES);
	uint32_t reused;
	/* the last saved (i = n - 1) hits; the first (i = 0) was evicted */
	uint32_t last = n - 1;
	int32_t q[5] = {1 + (int32_t)(last % 500), 1 + (int32_t)(last / 500), 7,
			9, 11};
	assert_int_equal(strata_prefix_cache_apply(c, f, q, 5, &reused, &err),
			 0);
	assert_int_equal(reused, 4);
	int32_t first[5] = {1, 1, 7, 9, 11};
	assert_int_equal(strata_prefix_cache_apply(c, f, first, 5, &reused, &err),
			 0);
	/* its own entry gone: only the first token, which i = 500's
	 * prompt {1, 2, 7, 9} shares */
	assert_int_equal(reused, 1);
	strata_prefix_cache_destroy(c);
	strata_session_close(s);
}

/* Many tails of one prefix keep one entry: a hit covering at least half of
 * an entry cuts it to the shared part (fewer bytes), and the cut entry
 * still gives the same logits as recomputing. */
static void test_prefix_cache_cuts_to_shared_part(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	uint32_t vocab = strata_session_hparams(s)->vocab;
	strata_error err;
	int32_t x[12], y[12], z[12];
	ids(x, 12, 1);
	memcpy(y, x, sizeof x);
	memcpy(z, x, sizeof x);
	ids(y + 9, 3, 333);
	ids(z + 9, 3, 444);
	strata_prefix_cache *c;
	uint32_t reused;
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    1u << 20, &c, &err),
			 0);
	assert_int_equal(strata_prefix_cache_apply(c, f, x, 12, &reused, &err),
			 0);
	assert_int_equal(strata_forward_run(f, x, 12, 0, NULL, NULL, &err), 0);
	assert_int_equal(strata_prefix_cache_save(c, f, x, 12, false, &err), 0);
	strata_prefix_cache_stats st;
	strata_prefix_cache_get_stats(c, &st);
	uint64_t whole = st.bytes;
	assert_int_equal(strata_prefix_cache_apply(c, f, y, 12, &reused, &err),
			 0);
	assert_int_equal(reused, 9);
	assert_int_equal(strata_forward_run(f, y + 9, 3, 9, NULL, NULL, &err),
			 0);
	assert_int_equal(strata_prefix_cache_save(c, f, y, 12, false, &err), 0);
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.truncated, 1);
	assert_true(st.bytes < whole);
	float *want = test_calloc(vocab, sizeof(float));
	float *got = test_calloc(vocab, sizeof(float));
	assert_int_equal(strata_prefix_cache_apply(c, f, z, 12, &reused, &err),
			 0);
	assert_int_equal(reused, 9);
	assert_int_equal(strata_forward_run(f, z + 9, 3, 9, NULL, got, &err),
			 0);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, z, 12, 0, NULL, want, &err), 0);
	assert_memory_equal(got, want, vocab * sizeof(float));
	test_free(want);
	test_free(got);
	strata_prefix_cache_destroy(c);
	strata_session_close(s);
}

/* A guest entry (a spilled request's) goes first when room is needed,
 * though it was saved after an older home entry. */
static void test_prefix_cache_guest_evicted_first(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	int32_t a[10], b[10], c3[10];
	ids(a, 10, 1);
	ids(b, 10, 100);
	ids(c3, 10, 200);
	strata_prefix_cache *c;
	uint64_t one = entry_bytes(s, a, 10);
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    2 * one, &c, &err),
			 0);
	const int32_t *order[3] = {a, b, c3};
	for (int i = 0; i < 3; i++)
		run_and_save(c, f, order[i], 10, i == 1);
	uint32_t reused;
	assert_int_equal(strata_prefix_cache_apply(c, f, a, 10, &reused, &err),
			 0);
	assert_int_equal(reused, 9); /* the older home entry stayed */
	assert_int_equal(strata_prefix_cache_apply(c, f, b, 10, &reused, &err),
			 0);
	assert_int_equal(reused, 0); /* the guest went */
	strata_prefix_cache_destroy(c);
	strata_session_close(s);
}

/* A guest's prompt is saved only into free room or a guest's: with room
 * for two entries held by two home keys, a guest is declined and both
 * stay; with one home entry and one guest, a second guest replaces the
 * first. */
static void test_prefix_cache_guest_never_evicts_a_home_key(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	int32_t a[10], b[10], g1[10], g2[10];
	ids(a, 10, 1);
	ids(b, 10, 100);
	ids(g1, 10, 200);
	ids(g2, 10, 300);
	strata_prefix_cache *c;
	strata_prefix_cache_stats st;
	uint64_t one = entry_bytes(s, a, 10);
	typedef struct {
		const int32_t *prompt;
		bool guest;
	} save_step;
	const save_step first[] = {{a, false}, {b, false}, {g1, true}};
	const save_step second[] = {{a, false}, {g1, true}, {g2, true}};
	for (int round = 0; round < 2; round++) {
		const save_step *order = round ? second : first;
		assert_int_equal(
			strata_prefix_cache_create(strata_session_backend(s),
						   2 * one, &c, &err),
			0);
		for (int i = 0; i < 3; i++)
			run_and_save(c, f, order[i].prompt, 10, order[i].guest);
		strata_prefix_cache_get_stats(c, &st);
		assert_int_equal(st.entries, 2);
		assert_int_equal(st.guests_declined, round ? 0 : 1);
		assert_int_equal(st.evictions, round ? 1 : 0);
		uint32_t reused;
		for (int i = 0; i < 3; i++) {
			assert_int_equal(strata_prefix_cache_apply(
						 c, f, order[i].prompt, 10,
						 &reused, &err),
					 0);
			/* kept: both home keys; or the home key and the
			 * second guest */
			bool kept = round ? i != 1 : i != 2;
			assert_int_equal(reused, kept ? 9 : 0);
		}
		strata_prefix_cache_destroy(c);
	}
	strata_session_close(s);
}

/* The KV memory is reused, never above the budget: with room for two
 * 10-token entries, a 20-token prompt (blocks twice their size) evicts
 * entries until its blocks fit, both here (the first one's room alone is
 * too small), without taking a second chunk; the restored KV is the
 * prompt's own. */
static void test_prefix_cache_evicts_until_blocks_fit(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	int32_t a[10], b[10], big[21];
	ids(a, 10, 1);
	ids(b, 10, 100);
	ids(big, 21, 300);
	strata_prefix_cache *c;
	uint64_t one = entry_bytes(s, a, 10);
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    2 * one, &c, &err),
			 0);
	strata_prefix_cache_stats st;
	run_and_save(c, f, a, 10, false);
	run_and_save(c, f, b, 10, false);
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.pool_chunks, 1);
	assert_true(st.pool_bytes <= 2 * one);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, big, 20, 0, NULL, NULL, &err),
			 0);
	assert_int_equal(strata_prefix_cache_save(c, f, big, 20, false, &err),
			 0);
	strata_prefix_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 2);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.pool_chunks, 1);
	assert_true(st.pool_bytes <= 2 * one && st.bytes <= 2 * one);
	uint32_t vocab = strata_session_hparams(s)->vocab, reused;
	float *want = test_calloc(vocab, sizeof(float));
	float *got = test_calloc(vocab, sizeof(float));
	assert_int_equal(strata_forward_run(f, big + 20, 1, 20, NULL, want,
					    &err),
			 0);
	int32_t other[20]; /* the sequence's KV overwritten before the apply */
	ids(other, 20, 77);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, other, 20, 0, NULL, NULL, &err),
			 0);
	assert_int_equal(strata_prefix_cache_apply(c, f, big, 21, &reused,
						   &err),
			 0);
	assert_int_equal(reused, 20);
	assert_int_equal(strata_forward_run(f, big + 20, 1, 20, NULL, got,
					    &err),
			 0);
	assert_memory_equal(got, want, vocab * sizeof(float));
	test_free(want);
	test_free(got);
	strata_prefix_cache_destroy(c);
	strata_session_close(s);
}

/* Every allocation of a save fails cleanly: E_NOMEM, the cache as before
 * (STYLE.md's OOM loop). */
static void test_prefix_cache_save_oom(void **state)
{
	(void)state;
	strata_session *s = open_session(64);
	strata_forward *f = strata_session_forward(s);
	strata_error err;
	int32_t a[10], b[10];
	ids(a, 10, 1);
	ids(b, 10, 300);
	strata_prefix_cache *c;
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    1u << 20, &c, &err),
			 0);
	assert_int_equal(strata_forward_run(f, a, 10, 0, NULL, NULL, &err), 0);
	assert_int_equal(strata_prefix_cache_save(c, f, a, 10, false, &err), 0);
	strata_forward_reset(f);
	assert_int_equal(strata_forward_run(f, b, 10, 0, NULL, NULL, &err), 0);
	strata_prefix_cache_stats before, after;
	strata_prefix_cache_get_stats(c, &before);
	long n = 0;
	for (;; n++) {
		strata_alloc_fail_after(n);
		strata_status st =
			strata_prefix_cache_save(c, f, b, 10, false, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		strata_prefix_cache_get_stats(c, &after);
		assert_memory_equal(&after, &before, sizeof before);
	}
	assert_true(n >= 2); /* entry, ids: the KV fits the chunk held */
	strata_prefix_cache_get_stats(c, &after);
	assert_int_equal(after.entries, 2);
	assert_int_equal(after.pool_chunks, 1);
	strata_prefix_cache_destroy(c);

	/* the first save also takes the chunk: its record and its memory */
	assert_int_equal(strata_prefix_cache_create(strata_session_backend(s),
						    1u << 20, &c, &err),
			 0);
	strata_prefix_cache_get_stats(c, &before);
	for (n = 0;; n++) {
		strata_alloc_fail_after(n);
		strata_status st =
			strata_prefix_cache_save(c, f, b, 10, false, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		assert_int_equal(st, STRATA_E_NOMEM);
		strata_prefix_cache_get_stats(c, &after);
		assert_memory_equal(&after, &before, sizeof before);
	}
	assert_true(n >= 4);
	strata_prefix_cache_get_stats(c, &after);
	assert_int_equal(after.entries, 1);
	assert_int_equal(after.pool_chunks, 1);
	strata_prefix_cache_destroy(c);
	strata_session_close(s);
}

static strata_batch *open_batch(uint32_t replicas)
{
	strata_batch_options o = {.replicas = replicas,
				  .spill_threshold = 1000,
				  .prefix_cache_bytes = 1u << 20,
				  .eos = -1};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 64;
	o.session.prefill = 32;
	plan_defaults(&o.session.plan);
	strata_batch *b = NULL;
	strata_error err;
	if (strata_batch_create(&o, &b, &err))
		fail_msg("%s / %s", err.message, err.fix);
	return b;
}

/* A request the forward pass refuses (an id outside the vocabulary) fails
 * its replica: the batch returns E_INFER_REPLICA naming it, no result
 * keeps tokens, every load is released, and the batch runs again. */
static void test_batch_failed_request_fails_batch(void **state)
{
	(void)state;
	strata_batch *b = open_batch(2);
	int32_t good[6], bad[6];
	ids(good, 6, 5);
	memcpy(bad, good, sizeof good);
	bad[3] = 1 << 20;
	strata_batch_request q[8];
	strata_batch_result r[8];
	for (int i = 0; i < 8; i++) {
		q[i] = (strata_batch_request){.prompt = i == 5 ? bad : good,
					      .n_prompt = 6,
					      .max_tokens = 4,
					      .key = &q[i],
					      .key_bytes = 1 + (size_t)i};
		strata_sampler_params_default(&q[i].sampler);
		q[i].sampler.temperature = 0;
	}
	strata_error err;
	assert_int_equal(strata_batch_run(b, q, 8, r, NULL, &err),
			 STRATA_E_INFER_REPLICA);
	assert_non_null(strstr(err.message, "request 5"));
	assert_non_null(strstr(err.message, "another replica too"));
	assert_int_equal(strata_batch_failed_request(b), 5);
	assert_non_null(strstr(err.message, "vocabulary"));
	for (int i = 0; i < 8; i++)
		assert_null(r[i].tokens);
	for (uint32_t d = 0; d < 2; d++) {
		strata_shard_device_stats ds;
		assert_int_equal(
			strata_batch_router_device_stats(b, d, &ds, &err), 0);
		assert_int_equal(ds.load, 0);
	}
	q[5].prompt = good;
	assert_int_equal(strata_batch_run(b, q, 8, r, NULL, &err), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(r[i].n_tokens, 4);
		assert_memory_equal(r[i].tokens, r[0].tokens, 4 * sizeof(int32_t));
	}
	strata_batch_results_free(r, 8);
	strata_batch_destroy(b);
}

/* Every allocation of a run fails cleanly (one replica, so the order of
 * allocations is fixed): E_NOMEM, or E_INFER_REPLICA when a worker's
 * allocation failed; no result keeps tokens, loads all released. */
static void test_batch_run_oom(void **state)
{
	(void)state;
	strata_batch *b = open_batch(1);
	int32_t p[3][6];
	strata_batch_request q[3];
	strata_batch_result r[3];
	for (int i = 0; i < 3; i++) {
		ids(p[i], 6, 11 * i);
		q[i] = (strata_batch_request){.prompt = p[i],
					      .n_prompt = 6,
					      .max_tokens = 3,
					      .key = "k",
					      .key_bytes = 1};
		strata_sampler_params_default(&q[i].sampler);
		q[i].sampler.temperature = 0;
	}
	strata_error err;
	long n = 0;
	for (;; n++) {
		strata_alloc_fail_after(n);
		strata_status st = strata_batch_run(b, q, 3, r, NULL, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			break;
		if (st != STRATA_E_NOMEM && st != STRATA_E_INFER_REPLICA)
			fail_msg("n=%ld: %s", n, err.message);
		for (int i = 0; i < 3; i++)
			assert_null(r[i].tokens);
		strata_shard_device_stats ds;
		assert_int_equal(
			strata_batch_router_device_stats(b, 0, &ds, &err), 0);
		assert_int_equal(ds.load, 0);
	}
	assert_true(n >= 4); /* dispatch times, then tokens per request */
	for (int i = 0; i < 3; i++)
		assert_int_equal(r[i].n_tokens, 3);
	strata_batch_results_free(r, 3);
	strata_batch_destroy(b);
}

/* A replica failing mid-run hands its request and its queue to the live
 * replicas: every result arrives once, with the tokens of a run without
 * the failure; the failed replica is counted and takes no more work; a
 * failure on every replica fails the run. */
static void test_batch_failed_replica_moves_work(void **state)
{
	(void)state;
	strata_batch *b = open_batch(3);
	int32_t p[12][6];
	strata_batch_request q[12];
	strata_batch_result want[12], got[12];
	for (int i = 0; i < 12; i++) {
		ids(p[i], 6, 13 * i);
		q[i] = (strata_batch_request){.prompt = p[i],
					      .n_prompt = 6,
					      .max_tokens = 5,
					      .key = &q[i],
					      .key_bytes = sizeof q[i]};
		strata_sampler_params_default(&q[i].sampler);
		q[i].sampler.temperature = 0;
	}
	strata_error err;
	assert_int_equal(strata_batch_run(b, q, 12, want, NULL, &err), 0);
	/* the totals add up the replicas' counts */
	strata_batch_totals t;
	strata_batch_get_totals(b, &t);
	assert_int_equal(t.routed, 12);
	assert_true(t.routed_home <= t.routed);
	assert_true(t.decode_steps > 0 && t.decode_rows >= t.decode_steps);
	/* fail the busiest replica (keys are addresses, so homes vary from
	 * run to run) on its second request: it has at least 4 of 12 */
	uint32_t count[3] = {0, 0, 0}, victim = 0;
	for (int i = 0; i < 12; i++)
		count[want[i].device]++;
	for (uint32_t d = 1; d < 3; d++)
		victim = count[d] > count[victim] ? d : victim;
	strata_batch_replica_stats before, was[3];
	for (uint32_t d = 0; d < 3; d++)
		strata_batch_replica_get_stats(b, d, &was[d]);
	before = was[victim];
	strata_batch_inject_failure(b, victim, 1);
	assert_int_equal(strata_batch_run(b, q, 12, got, NULL, &err), 0);
	for (int i = 0; i < 12; i++) {
		assert_int_equal(got[i].n_tokens, want[i].n_tokens);
		assert_memory_equal(got[i].tokens, want[i].tokens,
				    want[i].n_tokens * sizeof(int32_t));
	}
	strata_batch_replica_stats st;
	strata_batch_replica_get_stats(b, victim, &st);
	assert_int_equal(st.failures, 1);
	assert_true(st.moved_away >= 1);
	assert_true(st.requests - before.requests <= 1); /* then no more */
	/* each request's cost (6 + 5) is charged once, where it finished */
	assert_true(st.load_charged - before.load_charged <= 11);
	uint64_t charged = 0;
	for (uint32_t d = 0; d < 3; d++) {
		strata_batch_replica_stats now;
		strata_batch_replica_get_stats(b, d, &now);
		charged += now.load_charged - was[d].load_charged;
	}
	assert_int_equal(charged, 12 * 11);
	for (uint32_t d = 0; d < 3; d++) {
		strata_shard_device_stats ds;
		assert_int_equal(
			strata_batch_router_device_stats(b, d, &ds, &err), 0);
		assert_int_equal(ds.load, 0);
	}
	strata_batch_results_free(got, 12);
	/* every replica failing: the run fails, nothing answered */
	for (uint32_t d = 0; d < 3; d++)
		strata_batch_inject_failure(b, d, 0);
	assert_int_equal(strata_batch_run(b, q, 12, got, NULL, &err),
			 STRATA_E_INFER_REPLICA);
	assert_non_null(strstr(err.message, "injected"));
	for (int i = 0; i < 12; i++)
		assert_null(got[i].tokens);
	strata_batch_results_free(want, 12);
	strata_batch_destroy(b);
}

/* STRATA_BATCH_PREFIX_CACHE_FROM_PLAN: replicas share the host budget
 * (each plans with a third here) and each cache's bound is what its own
 * plan leaves spare. */
static void test_batch_prefix_cache_from_plan(void **state)
{
	(void)state;
	strata_batch_options o = {
		.replicas = 3, .spill_threshold = 1000, .eos = -1,
		.prefix_cache_bytes = STRATA_BATCH_PREFIX_CACHE_FROM_PLAN};
	o.session.model_path = MODEL;
	o.session.threads = 1;
	o.session.positions = 64;
	o.session.prefill = 32;
	plan_defaults(&o.session.plan);
	o.session.plan.has_device_budget = true;
	o.session.plan.device_budget_bytes = 8u << 20;
	o.session.plan.has_host_budget = true;
	o.session.plan.host_budget_bytes = 3u << 20;
	strata_batch *b = NULL;
	strata_error err;
	if (strata_batch_create(&o, &b, &err))
		fail_msg("%s / %s", err.message, err.fix);
	for (uint32_t i = 0; i < 3; i++) {
		const strata_plan *p = strata_session_plan(
			strata_batch_session(b, i));
		const strata_plan_budgets *pb = strata_plan_get_budgets(p);
		assert_int_equal(pb->shared_by, 3);
		assert_int_equal(pb->host_budget_bytes, 1u << 20);
		strata_batch_replica_stats st;
		strata_batch_replica_get_stats(b, i, &st);
		assert_true(st.prefix_budget_from_plan);
		assert_int_equal(st.prefix_budget_bytes,
				 strata_plan_host_spare_bytes(p));
		/* cpu: the spare host share and the spare RAM arena */
		assert_int_equal(st.prefix_budget_bytes,
				 (1u << 20) - strata_plan_host_total(p) +
					 (8u << 20) -
					 strata_plan_device_total(p));
	}
	strata_batch_destroy(b);
}

/* Bad options are refused before anything opens. */
static void test_batch_create_bad_options(void **state)
{
	(void)state;
	strata_batch_options o = {.replicas = 0};
	strata_batch *b = NULL;
	strata_error err;
	assert_int_equal(strata_batch_create(&o, &b, &err),
			 STRATA_E_INVALID_ARG);
	o.replicas = STRATA_BATCH_MAX_REPLICAS + 1;
	assert_int_equal(strata_batch_create(&o, &b, &err),
			 STRATA_E_INVALID_ARG);
	o.replicas = 2;
	o.session.model_path = STRATA_SOURCE_DIR "/no/such/model";
	plan_defaults(&o.session.plan);
	o.session.positions = 8;
	o.session.prefill = 8;
	assert_int_not_equal(strata_batch_create(&o, &b, &err), STRATA_OK);
	assert_non_null(strstr(err.message, "replica 0: "));
	assert_null(strstr(err.message, ": :")); /* the prefix adds ": " */
	assert_null(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kv_restore_same_logits),
		cmocka_unit_test(test_prefix_cache_match_budget_eviction),
		cmocka_unit_test(test_prefix_cache_entry_cap),
		cmocka_unit_test(test_prefix_cache_cuts_to_shared_part),
		cmocka_unit_test(test_prefix_cache_guest_evicted_first),
		cmocka_unit_test(test_prefix_cache_guest_never_evicts_a_home_key),
		cmocka_unit_test(test_prefix_cache_evicts_until_blocks_fit),
		cmocka_unit_test(test_prefix_cache_save_oom),
		cmocka_unit_test(test_batch_failed_request_fails_batch),
		cmocka_unit_test(test_batch_failed_replica_moves_work),
		cmocka_unit_test(test_batch_run_oom),
		cmocka_unit_test(test_batch_create_bad_options),
		cmocka_unit_test(test_batch_prefix_cache_from_plan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
