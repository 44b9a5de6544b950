/* bench_multi.c - the batch runner on one replica, on G replicas with
 * affinity routing, with the follow route (where keys live follows their
 * demand), and on G replicas round-robin, in one invocation, over the
 * same requests: R requests over P shared prefixes of L tokens, each with
 * its own S-token tail and M new greedy tokens (issue 9's evidence
 * shape). Prints requests/s, tokens/s, prefix hit rate and max/mean load of
 * each, and the ratios the issue asks about (layer: bench).
 *
 * Prompts are token ids drawn from the vocabulary with a fixed seed, so
 * any model works. Each replica's prefix cache holds --cache-prefixes
 * entries (default 1.25 x P, all of them); affinity keeps each prefix on
 * one replica, round-robin makes every replica see (and miss) every
 * prefix. Spilling is past --spill-requests whole requests of load.
 * Prefixes are equally popular unless --skew S draws prefix k with weight
 * 1 / (k + 1)^S (Zipf: at 1, the first of 16 takes 30% of the requests).
 *
 * --batch B runs the three at --batch B (each replica decoding up to B
 * requests per forward step) and adds one replica at --batch 1, so one
 * invocation shows what B buys; --residency, --device-memory and
 * --host-memory force a streamed mode, where one pass of the weights then
 * serves B tokens.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/serve.h"

typedef struct cfg {
	const char *model, *device;
	uint32_t requests, prefixes, prefix_len, tail, max_tokens, gpus;
	uint32_t threads, spill_requests, cache_prefixes, batch;
	double skew; /* prefix k drawn with weight 1 / (k + 1)^skew */
	strata_residency_mode mode;
	uint64_t depth, device_memory, host_memory;
	bool has_device_memory, has_host_memory; /* else the planner's */
	const char *residency;
} cfg;

typedef struct figures {
	double seconds, requests_s, tokens_s, hit_rate, max_over_mean;
	uint64_t hits, lookups;
	uint32_t differ; /* requests whose tokens differ from the first run's */
} figures;

/* Each request's tokens as one FNV-1a digest: the first run's are kept and
 * every later run's compared with them (greedy requests must not depend on
 * where or with whom they ran). */
static uint64_t *first_tokens;

static uint64_t token_digest(const strata_batch_result *r)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint32_t t = 0; t < r->n_tokens; t++) {
		h ^= (uint32_t)r->tokens[t];
		h *= 0x100000001b3ull;
	}
	return h ^ r->n_tokens;
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* resident | host[:D] | disk | auto into c; false when it is none. */
static bool parse_residency(const char *v, cfg *c)
{
	c->residency = v;
	c->depth = 0;
	if (!strcmp(v, "auto"))
		c->mode = STRATA_RESIDENCY_AUTO;
	else if (!strcmp(v, "resident"))
		c->mode = STRATA_RESIDENCY_RESIDENT;
	else if (!strcmp(v, "disk"))
		c->mode = STRATA_RESIDENCY_DISK;
	else if (!strncmp(v, "host", 4) && (!v[4] || v[4] == ':')) {
		c->mode = STRATA_RESIDENCY_HOST;
		c->depth = v[4] ? strtoull(v + 5, NULL, 10) : 0;
		return !v[4] || c->depth > 0;
	} else
		return false;
	return true;
}

/* The size and residency options; 0 when handled, 1 not one, 2 bad. */
static int parse_memory(const char *a, const char *v, cfg *c)
{
	strata_error err;
	uint64_t *dst = !strcmp(a, "--device-memory") ? &c->device_memory
			: !strcmp(a, "--host-memory")  ? &c->host_memory
						       : NULL;
	if (!strcmp(a, "--residency")) {
		if (parse_residency(v, c))
			return 0;
		fprintf(stderr, "bench_multi: --residency %s: not auto, "
			"resident, host[:D] or disk\n", v);
		return 2;
	}
	if (!dst)
		return 1;
	if (strata_size_parse(v, dst, &err) == STRATA_OK) {
		/* host 0: disk mode reads straight to the device */
		*(dst == &c->device_memory ? &c->has_device_memory
					   : &c->has_host_memory) = true;
		return 0;
	}
	fprintf(stderr, "bench_multi: %s %s: not a size\n", a, v);
	return 2;
}

static int parse(int argc, char **argv, cfg *c)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick")) {
			c->requests = 48;
			c->prefixes = 4;
			c->prefix_len = 48;
			c->max_tokens = 4;
			continue;
		}
		if (!v) {
			fprintf(stderr, "bench_multi: %s needs a value\n", a);
			return 2;
		}
		i++;
		int m = parse_memory(a, v, c);
		if (m == 0)
			continue;
		if (m == 2)
			return 2;
		if (!strcmp(a, "--model"))
			c->model = v;
		else if (!strcmp(a, "--device"))
			c->device = v;
		else if (!strcmp(a, "--requests"))
			c->requests = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--prefixes"))
			c->prefixes = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--prefix-len"))
			c->prefix_len = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--tail"))
			c->tail = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--max-tokens"))
			c->max_tokens = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--gpus"))
			c->gpus = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--cache-prefixes"))
			c->cache_prefixes = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--spill-requests"))
			c->spill_requests = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--threads"))
			c->threads = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--batch"))
			c->batch = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--skew"))
			c->skew = strtod(v, NULL);
		else {
			fprintf(stderr, "bench_multi: unknown option %s\n", a);
			return 2;
		}
	}
	if (!c->requests || !c->prefixes || !c->prefix_len || !c->gpus ||
	    c->gpus > STRATA_BATCH_MAX_REPLICAS || !c->batch ||
	    c->batch > STRATA_FORWARD_MAX_SEQUENCES || !(c->skew >= 0) ||
	    c->skew > 8) {
		fprintf(stderr, "bench_multi: counts must be positive, "
			"--skew within 0..8\n");
		return 2;
	}
	return 0;
}

/* Runs the requests once on `replicas` replicas routed by `route`, each
 * decoding up to `batch` of them per forward step. */
static int measure(const cfg *c, uint32_t replicas, strata_batch_route route,
		   uint32_t batch, uint64_t cache_bytes,
		   const strata_batch_request *q, figures *out)
{
	strata_batch_options o = {.replicas = replicas,
				  .spill_threshold = 0,
				  .prefix_cache_bytes = cache_bytes,
				  .eos = -1,
				  .route = route};
	o.session.model_path = c->model;
	o.session.threads = c->threads;
	o.session.positions = c->prefix_len + c->tail + c->max_tokens;
	o.session.prefill = c->prefix_len + c->tail;
	o.session.plan.mode = c->mode;
	o.session.plan.host_depth = c->depth;
	o.session.plan.has_device_budget = c->has_device_memory;
	o.session.plan.device_budget_bytes = c->device_memory;
	o.session.plan.has_host_budget = c->has_host_memory;
	o.session.plan.host_budget_bytes = c->host_memory;
	o.session.plan.shape.batch = batch;
	o.session.plan.device = strcmp(c->device, "cpu")
					? STRATA_PLAN_DEVICE_CUDA
					: STRATA_PLAN_DEVICE_CPU;
	/* Replica i on cuda:i: without the list every replica would share
	 * the session's one device (cuda:0). */
	uint32_t devices[STRATA_BATCH_MAX_REPLICAS];
	for (uint32_t i = 0; i < replicas; i++)
		devices[i] = i;
	o.device_indices = devices;
	/* The threshold in whole requests: spill only past real imbalance. */
	o.spill_threshold = (uint64_t)c->spill_requests *
			    (o.session.prefill + c->max_tokens);
	strata_batch *b = NULL;
	strata_error err;
	strata_batch_result *r = calloc(c->requests, sizeof *r);
	uint64_t wall = 0;
	if (!r || strata_batch_create(&o, &b, &err) ||
	    strata_batch_run(b, q, c->requests, r, &wall, &err)) {
		fprintf(stderr, "bench_multi: %s\n  fix: %s\n", err.message,
			err.fix);
		strata_batch_destroy(b);
		free(r);
		return 1;
	}
	uint64_t tokens = 0, max = 0, sum = 0;
	for (uint32_t i = 0; i < c->requests; i++)
		tokens += r[i].n_tokens;
	memset(out, 0, sizeof *out);
	for (uint32_t d = 0; d < replicas; d++) {
		strata_batch_replica_stats s;
		strata_shard_device_stats ds;
		strata_batch_replica_get_stats(b, d, &s);
		strata_batch_router_device_stats(b, d, &ds, &err);
		uint64_t load = ds.released_load + ds.load;
		max = load > max ? load : max;
		sum += load;
		out->hits += s.prefix_hits;
		out->lookups += s.prefix_lookups;
		char where[24] = "cpu";
		if (strcmp(c->device, "cpu"))
			snprintf(where, sizeof where, "cuda:%u", d);
		if (replicas > 1)
			printf("  replica %u (%s): %llu requests (%llu at "
			       "home, %llu of its own sent away), prefix hits "
			       "%llu of %llu, %llu saved, %llu evicted\n", d,
			       where,
			       (unsigned long long)s.requests,
			       (unsigned long long)s.routed_home,
			       (unsigned long long)s.routed_away,
			       (unsigned long long)s.prefix_hits,
			       (unsigned long long)s.prefix_lookups,
			       (unsigned long long)s.prefix_saved,
			       (unsigned long long)s.prefix_evictions);
		/* where a replica's time went: idle is the wall less busy */
		printf("  replica %u time: busy %.3f s of %.3f (prefix cache "
		       "%.3f, prefills %.3f, %llu decode steps %.3f = %.3f "
		       "ms each, sampling %.3f)\n", d, s.busy_ns / 1e9,
		       wall / 1e9, s.prefix_ns / 1e9, s.prefill_ns / 1e9,
		       (unsigned long long)s.decode_steps, s.step_ns / 1e9,
		       s.decode_steps ? s.step_ns / 1e6 / s.decode_steps : 0.0,
		       (s.busy_ns - s.prefix_ns - s.prefill_ns - s.step_ns) /
			       1e9);
	}
	out->seconds = wall / 1e9;
	out->requests_s = c->requests / out->seconds;
	out->tokens_s = tokens / out->seconds;
	out->hit_rate = out->lookups ? (double)out->hits / out->lookups : 0;
	for (uint32_t i = 0; first_tokens && i < c->requests; i++) {
		uint64_t d = token_digest(&r[i]);
		if (first_tokens[c->requests])
			out->differ += d != first_tokens[i];
		else
			first_tokens[i] = d;
	}
	if (first_tokens)
		first_tokens[c->requests] = 1; /* the first run is kept */
	out->max_over_mean = sum ? max / ((double)sum / replicas) : 0;
	strata_batch_results_free(r, c->requests);
	free(r);
	strata_batch_destroy(b);
	return 0;
}

static void print(const char *name, const figures *f)
{
	printf("%-32s %8.3f s %9.1f req/s %10.1f tok/s  prefix hits "
	       "%5.1f %%  max/mean %.3f  outputs differing from the first "
	       "run: %u\n",
	       name, f->seconds, f->requests_s, f->tokens_s,
	       100 * f->hit_rate, f->max_over_mean, f->differ);
}

/* The runs: 1 replica, G with affinity and G round-robin (G > 1) at
 * --batch B, then 1 replica at --batch 1 when B > 1; each cache holds
 * `cache` bytes (the single replica G times that). */
static int run_all(const cfg *c, uint64_t cache, const strata_batch_request *q)
{
	figures one, aff, fol, rr, single;
	char name[64];
	if (measure(c, 1, STRATA_BATCH_ROUTE_AFFINITY, c->batch,
		    cache * c->gpus, q, &one))
		return 1;
	snprintf(name, sizeof name, "1 replica, batch %u", c->batch);
	print(name, &one);
	if (c->gpus > 1) {
		if (measure(c, c->gpus, STRATA_BATCH_ROUTE_AFFINITY, c->batch,
			    cache, q, &aff) ||
		    measure(c, c->gpus, STRATA_BATCH_ROUTE_FOLLOW, c->batch,
			    cache, q, &fol) ||
		    measure(c, c->gpus, STRATA_BATCH_ROUTE_ROUND_ROBIN,
			    c->batch, cache, q, &rr))
			return 1;
		snprintf(name, sizeof name, "%u replicas, affinity, batch %u",
			 c->gpus, c->batch);
		print(name, &aff);
		snprintf(name, sizeof name, "%u replicas, follow, batch %u",
			 c->gpus, c->batch);
		print(name, &fol);
		snprintf(name, sizeof name, "%u replicas, round-robin, batch %u",
			 c->gpus, c->batch);
		print(name, &rr);
		printf("affinity vs 1 replica: %.2fx requests/s; affinity vs "
		       "round-robin: %.2fx\n",
		       aff.requests_s / one.requests_s,
		       aff.requests_s / rr.requests_s);
		printf("follow vs 1 replica: %.2fx requests/s; follow vs "
		       "round-robin: %.2fx\n",
		       fol.requests_s / one.requests_s,
		       fol.requests_s / rr.requests_s);
	}
	if (c->batch == 1)
		return 0;
	if (measure(c, 1, STRATA_BATCH_ROUTE_AFFINITY, 1, cache * c->gpus, q,
		    &single))
		return 1;
	print("1 replica, batch 1", &single);
	printf("batch %u vs batch 1 (1 replica): %.2fx tokens/s\n", c->batch,
	       one.tokens_s / single.tokens_s);
	return 0;
}

/* Prefix k with weight 1 / (k + 1)^skew (Zipf; uniform at 0), drawn by
 * inverting the cumulative weights. */
static uint32_t draw_prefix(const cfg *c, const double *cum, uint64_t *s)
{
	if (c->skew == 0)
		return (uint32_t)(rng(s) % c->prefixes);
	double u = (double)(rng(s) >> 11) / 9007199254740992.0 *
		   cum[c->prefixes - 1];
	uint32_t k = 0;
	while (k + 1 < c->prefixes && cum[k] <= u)
		k++;
	return k;
}

/* R requests: prefix k (random, --skew) then a random tail, greedy; keyed
 * by k. */
static void make_requests(const cfg *c, int32_t *prefix, int32_t *prompts,
			  uint32_t *keys, strata_batch_request *q,
			  double *cum)
{
	uint32_t n = c->prefix_len + c->tail;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	const uint32_t vocab = 500; /* stories260K has 512 ids */
	for (size_t i = 0; i < (size_t)c->prefixes * c->prefix_len; i++)
		prefix[i] = (int32_t)(1 + rng(&s) % (vocab - 1));
	for (uint32_t k = 0; k < c->prefixes; k++)
		cum[k] = (k ? cum[k - 1] : 0) + pow(k + 1.0, -c->skew);
	for (uint32_t i = 0; i < c->requests; i++) {
		uint32_t k = draw_prefix(c, cum, &s);
		int32_t *p = prompts + (size_t)i * n;
		memcpy(p, prefix + (size_t)k * c->prefix_len,
		       c->prefix_len * sizeof *p);
		for (uint32_t t = 0; t < c->tail; t++)
			p[c->prefix_len + t] = (int32_t)(1 + rng(&s) % (vocab - 1));
		keys[i] = k;
		q[i] = (strata_batch_request){.prompt = p, .n_prompt = n,
					      .max_tokens = c->max_tokens,
					      .key = &keys[i],
					      .key_bytes = sizeof keys[i]};
		strata_sampler_params_default(&q[i].sampler);
		q[i].sampler.temperature = 0;
	}
}

int main(int argc, char **argv)
{
	cfg c = {.model = STRATA_SOURCE_DIR "/models/stories260K",
		 .device = "cpu", .requests = 1000, .prefixes = 16,
		 .prefix_len = 448, .tail = 8, .max_tokens = 16, .gpus = 2,
		 .threads = 1, .spill_requests = 4, .batch = 1,
		 .mode = STRATA_RESIDENCY_AUTO, .residency = "auto"};
	int rc = parse(argc, argv, &c);
	if (rc)
		return rc;
	uint32_t n = c.prefix_len + c.tail;
	int32_t *prefix = calloc((size_t)c.prefixes * c.prefix_len, 4);
	int32_t *prompts = calloc((size_t)c.requests * n, 4);
	strata_batch_request *q = calloc(c.requests, sizeof *q);
	uint32_t *keys = calloc(c.requests, sizeof *keys);
	double *cum = calloc(c.prefixes, sizeof *cum);
	if (!prefix || !prompts || !q || !keys || !cum)
		return 1;
	make_requests(&c, prefix, prompts, keys, q, cum);
	free(cum);
	/* The cache holds one entry per prefix (entries are cut to the
	 * shared part); each replica gets room for --cache-prefixes of them
	 * (default 1.25 x P: every prefix fits, as on a large GPU), the
	 * single replica the same total. */
	uint64_t per_entry = 0;
	{
		/* bytes of one prefix entry from the model's geometry */
		strata_session_options so = {.model_path = c.model,
					     .threads = 1, .positions = n,
					     .prefill = n};
		so.plan.mode = STRATA_RESIDENCY_AUTO;
		so.plan.device = STRATA_PLAN_DEVICE_CPU;
		strata_session *ss = NULL;
		strata_error err;
		if (strata_session_open(&so, &ss, &err)) {
			fprintf(stderr, "bench_multi: %s\n", err.message);
			return 1;
		}
		strata_kv_cache_bytes(
			strata_forward_kv_cache(strata_session_forward(ss)),
			c.prefix_len, &per_entry, &err);
		per_entry += c.prefix_len * sizeof(int32_t) + 256;
		strata_session_close(ss);
	}
	uint64_t fit = c.cache_prefixes ? c.cache_prefixes
					: (c.prefixes * 5 + 3) / 4;
	uint64_t cache = fit * per_entry;
	printf("bench_multi: %u requests, %u prefixes x %u tokens + %u-token "
	       "tails, %u new tokens, %s, residency %s, %u threads per "
	       "replica, prefix cache %llu entries per replica, spill past %u "
	       "requests, prefix popularity skew %g\n",
	       c.requests, c.prefixes, c.prefix_len, c.tail, c.max_tokens,
	       c.device, c.residency, c.threads, (unsigned long long)fit,
	       c.spill_requests, c.skew);
	first_tokens = calloc((size_t)c.requests + 1, sizeof *first_tokens);
	if (!first_tokens || run_all(&c, cache, q))
		return 1;
	free(first_tokens);
	free(prefix);
	free(prompts);
	free(q);
	free(keys);
	return 0;
}
