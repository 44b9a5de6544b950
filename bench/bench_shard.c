/* bench_shard.c - assignments per second of the stream shard allocator for
 * 16- and 64-byte keys at n = 2, 8, 64 devices, on one core, against two
 * peers measured in the same run (bench, layer: shard):
 *   linear - the seed's rule with a linear scan for the least-loaded device
 *   lazy   - the seed's own structure: a heap with one pushed entry per
 *            change, stale entries popped lazily, compacted past max(4n, 8)
 * Every peer must make the same choices as the library (checked by a
 * checksum of the chosen devices). The peers keep no statistics; the
 * library keeps all of docs/shard.md's, which is most of the gap to
 * them at small n.
 * "full" rows include BLAKE3 of each key, one strata_shard_assign call per
 * item; "batch" rows the same through strata_shard_assign_batch, BATCH
 * items per call as `strata shard` reads them (no peer: they hash one key
 * at a time); "alloc" rows feed precomputed home devices to isolate the
 * least-loaded structure.
 *
 * usage: bench_shard [--items N] [--quick]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strata/shard.h"

#define KEYS 4096u	/* distinct keys, cycled (fits in L1/L2) */
#define MAX_N 64
#define THRESHOLD 64
#define BATCH 32	/* items per strata_shard_assign_batch call, as the CLI */

/* ------------------------------------------------------------------------ */
/* Peers                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct linear {
	uint32_t n;
	uint64_t load[MAX_N];
} linear;

static uint32_t linear_assign(linear *m, uint32_t home, uint64_t cost)
{
	uint32_t least = 0;
	for (uint32_t d = 1; d < m->n; d++)
		if (m->load[d] < m->load[least])
			least = d;
	uint32_t t = home;
	if (m->load[home] > m->load[least] &&
	    m->load[home] - m->load[least] > THRESHOLD)
		t = least;
	m->load[t] += cost;
	return t;
}

typedef struct entry {
	uint64_t cost;
	uint32_t device;
} entry;

/* The seed's structure, preallocated to its bound plus one push. */
typedef struct lazy {
	uint32_t n;
	size_t len, limit;
	uint64_t load[MAX_N];
	entry heap[4 * MAX_N + 8];
} lazy;

static int less(entry a, entry b)
{
	return a.cost < b.cost || (a.cost == b.cost && a.device < b.device);
}

static void lazy_push(lazy *h, entry e)
{
	size_t i = h->len++;
	while (i > 0 && less(e, h->heap[(i - 1) / 2])) {
		h->heap[i] = h->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->heap[i] = e;
}

static void lazy_pop(lazy *h)
{
	entry e = h->heap[--h->len];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->len)
			break;
		if (c + 1 < h->len && less(h->heap[c + 1], h->heap[c]))
			c++;
		if (!less(h->heap[c], e))
			break;
		h->heap[i] = h->heap[c];
		i = c;
	}
	h->heap[i] = e;
}

static void lazy_rebuild(lazy *h)
{
	h->len = 0;
	for (uint32_t d = 0; d < h->n; d++)
		lazy_push(h, (entry){h->load[d], d});
}

static void lazy_init(lazy *h, uint32_t n)
{
	memset(h, 0, sizeof *h);
	h->n = n;
	h->limit = 4 * (size_t)n > 8 ? 4 * (size_t)n : 8;
	lazy_rebuild(h);
}

static uint32_t lazy_assign(lazy *h, uint32_t home, uint64_t cost)
{
	while (h->heap[0].cost != h->load[h->heap[0].device])
		lazy_pop(h); /* stale */
	entry least = h->heap[0];
	uint32_t t = home;
	if (h->load[home] > least.cost &&
	    h->load[home] - least.cost > THRESHOLD)
		t = least.device;
	h->load[t] += cost;
	lazy_push(h, (entry){h->load[t], t});
	if (h->len > h->limit)
		lazy_rebuild(h);
	return t;
}

/* ------------------------------------------------------------------------ */
/* Measurement                                                              */
/* ------------------------------------------------------------------------ */

/* CPU time of this thread: "per core" figures that other processes on a
 * shared machine cannot dilute (wall time would count their share). */
static uint64_t cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

typedef enum kind { LIBRARY, LINEAR, LAZY } kind;

typedef struct result {
	double per_s;
	uint64_t checksum;
} result;

static uint8_t keys[KEYS][64];

static result measure(kind k, uint32_t n, size_t key_bytes, bool hash,
		      const uint32_t *homes, uint64_t items)
{
	strata_shard *s = NULL;
	static linear lin;
	static lazy lz;
	if (k == LIBRARY && strata_shard_create(n, THRESHOLD, &s, NULL) != STRATA_OK) {
		fprintf(stderr, "bench_shard: cannot create the allocator\n");
		exit(1);
	}
	memset(&lin, 0, sizeof lin);
	lin.n = n;
	lazy_init(&lz, n);
	uint64_t sum = 0;
	uint64_t t0 = cpu_ns();
	for (uint64_t i = 0; i < items; i++) {
		uint32_t j = (uint32_t)(i % KEYS), home, d = 0;
		uint64_t cost = 1 + (i * 2654435761u >> 7) % 100;
		if (hash)
			strata_shard_home(keys[j], key_bytes, n, &home, NULL);
		else
			home = homes[j];
		switch (k) {
		case LIBRARY:
			strata_shard_assign_home(s, home, cost, &d, NULL);
			break;
		case LINEAR:
			d = linear_assign(&lin, home, cost);
			break;
		case LAZY:
			d = lazy_assign(&lz, home, cost);
			break;
		}
		sum = sum * 31 + d;
	}
	uint64_t ns = cpu_ns() - t0;
	strata_shard_destroy(s);
	return (result){(double)items * 1e9 / (double)(ns ? ns : 1), sum};
}

/* The library through its keyed entry point, exactly as the CLI calls it. */
static result measure_keyed(uint32_t n, size_t key_bytes, uint64_t items)
{
	strata_shard *s = NULL;
	if (strata_shard_create(n, THRESHOLD, &s, NULL) != STRATA_OK)
		exit(1);
	uint64_t sum = 0;
	uint64_t t0 = cpu_ns();
	for (uint64_t i = 0; i < items; i++) {
		uint32_t d = 0;
		uint64_t cost = 1 + (i * 2654435761u >> 7) % 100;
		strata_shard_assign(s, keys[i % KEYS], key_bytes, cost, &d, NULL);
		sum = sum * 31 + d;
	}
	uint64_t ns = cpu_ns() - t0;
	strata_shard_destroy(s);
	return (result){(double)items * 1e9 / (double)(ns ? ns : 1), sum};
}

/* The library through its batch entry point, as `strata shard` calls it:
 * the items array is filled inside the timed loop, as the CLI fills it. */
static result measure_batch(uint32_t n, size_t key_bytes, uint64_t items)
{
	strata_shard *s = NULL;
	if (strata_shard_create(n, THRESHOLD, &s, NULL) != STRATA_OK)
		exit(1);
	strata_shard_item batch[BATCH];
	uint64_t sum = 0;
	uint64_t t0 = cpu_ns();
	for (uint64_t i = 0; i < items; i += BATCH) {
		size_t k = items - i < BATCH ? (size_t)(items - i) : BATCH;
		for (size_t b = 0; b < k; b++) {
			uint64_t j = i + b;
			batch[b] = (strata_shard_item){
				.key = keys[j % KEYS],
				.key_bytes = key_bytes,
				.cost = 1 + (j * 2654435761u >> 7) % 100,
			};
		}
		if (strata_shard_assign_batch(s, batch, k, NULL, NULL) != STRATA_OK)
			exit(1);
		for (size_t b = 0; b < k; b++)
			sum = sum * 31 + batch[b].device;
	}
	uint64_t ns = cpu_ns() - t0;
	strata_shard_destroy(s);
	return (result){(double)items * 1e9 / (double)(ns ? ns : 1), sum};
}

int main(int argc, char **argv)
{
	uint64_t items = 5000000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			items = 20000;
		else if (!strcmp(argv[i], "--items") && i + 1 < argc)
			items = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: bench_shard [--items N] [--quick]\n");
			return 2;
		}
	}
	uint64_t x = 0x5eed;
	for (uint32_t j = 0; j < KEYS; j++)
		for (int b = 0; b < 64; b++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			keys[j][b] = (uint8_t)(x >> 56);
		}
	static const uint32_t ns[] = {2, 8, 64};
	static const size_t kbs[] = {16, 64};
	int bad = 0;
	printf("strata bench_shard: %" PRIu64 " items per row, one thread, "
	       "assignments per CPU-second, T=%d, costs 1..100\n",
	       items, THRESHOLD);
	printf("%-5s %3s %4s %14s %12s %12s %9s %9s\n", "row", "key", "n",
	       "library M/s", "linear M/s", "lazy M/s", "x linear", "x lazy");
	for (size_t a = 0; a < 2; a++)
		for (size_t b = 0; b < 3; b++) {
			uint32_t n = ns[b];
			size_t kb = kbs[a];
			static uint32_t homes[KEYS];
			for (uint32_t j = 0; j < KEYS; j++)
				strata_shard_home(keys[j], kb, n, &homes[j], NULL);
			for (int hash = 1; hash >= 0; hash--) {
				result lib = hash ? measure_keyed(n, kb, items)
						  : measure(LIBRARY, n, kb, false, homes, items);
				result lin = measure(LINEAR, n, kb, hash, homes, items);
				result lz = measure(LAZY, n, kb, hash, homes, items);
				if (lib.checksum != lin.checksum ||
				    lib.checksum != lz.checksum) {
					printf("MISMATCH: choices differ at key %zu n %u\n",
					       kb, n);
					bad = 1;
				}
				printf("%-5s %3zu %4u %14.2f %12.2f %12.2f %9.2f %9.2f\n",
				       hash ? "full" : "alloc", kb, n, lib.per_s / 1e6,
				       lin.per_s / 1e6, lz.per_s / 1e6,
				       lib.per_s / lin.per_s, lib.per_s / lz.per_s);
				if (!hash)
					continue;
				result bat = measure_batch(n, kb, items);
				if (bat.checksum != lib.checksum) {
					printf("MISMATCH: batch choices differ at key %zu n %u\n",
					       kb, n);
					bad = 1;
				}
				printf("%-5s %3zu %4u %14.2f %12s %12s %9s %9s\n",
				       "batch", kb, n, bat.per_s / 1e6, "-", "-", "-",
				       "-");
			}
		}
	return bad;
}
