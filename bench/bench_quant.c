/* bench_quant - CPU decode on weights in their stored type: for each model
 * (the first is the source, e.g. its bf16 file; then its Q8_0, Q4_K ...
 * files), the ms per token of single-token decode steps, the weight bytes
 * each token reads, the rate that makes against the machine's measured
 * host memory read rate, and the speed-up over the first model.
 *
 *   bench_quant [--threads N] [--decode D] [--quick] MODEL...
 *   bench_quant [--threads N] [--decode D] --synthetic [DIR] [--hidden H]
 *               [--layers L]
 *   bench_quant [--threads N] [--quick] --kernels [--in K] [--out M]
 *               [--prefetch C]
 *
 * Every model runs `strata run`'s way (a session, resident on the CPU),
 * the weights kept as stored (issue 18), so a Q8_0 token reads ~1.06 bytes
 * an element and a Q4_K one ~0.56 where the source reads 2. Bytes per
 * token count every weight (the embedding table too, of which a token
 * reads one row: exact for tied embeddings, an upper bound otherwise).
 * Without MODEL: the small llama of tests/data/quant (F16, Q8_0, Q4_K_M);
 * it fits in the caches, so its rates are not memory rates. --synthetic
 * writes a random llama (hidden H, default 1024; ffn 2.75 H; L layers,
 * default 8; heads of 64, 4 query heads a KV head; vocab 32000, tied) in
 * BF16, Q8_0 and Q4_K into DIR (a temporary folder by default, removed
 * after) and benches those three: large enough to leave the caches, so the
 * bytes a token reads decide its time. Prints a table, then one
 * "json {...}" line per model. --kernels benches the products alone
 * (quant_kernels.c): each stored type's decode rate at 1 and 4 rows against
 * the memory read rate, and its prefill rate against the f32 product;
 * matrices of M x K (default 4096 x 4096); --prefetch C sets how many
 * decoded chunks ahead the decode path prefetches each row (0: none).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/backend.h"
#include "strata/infer.h"
#include "support/ckpt_writer.h"

#include "quant_kernels.h"

/* The stored products' prefetch distance (backend/cpu/kernels_quant.c). */
void strata__quant_prefetch(uint32_t chunks);

#define MAX_MODELS 8
#define QUANT STRATA_SOURCE_DIR "/tests/data/quant/"

typedef struct row {
	const char *model;
	double decode_ms; /* median */
	uint64_t weight_bytes;
} row;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* ------------------------------------------------------------------------ */
/* Host memory read rate                                                    */
/* ------------------------------------------------------------------------ */

typedef struct reader {
	const uint64_t *p;
	size_t n;
	uint64_t sum;
} reader;

static void *read_part(void *arg)
{
	reader *r = arg;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	for (size_t i = 0; i + 4 <= r->n; i += 4) {
		s0 += r->p[i], s1 += r->p[i + 1];
		s2 += r->p[i + 2], s3 += r->p[i + 3];
	}
	r->sum = s0 + s1 + s2 + s3;
	return NULL;
}

/* Bytes per second `threads` threads read from `bytes` of memory, best of
 * three passes (the first touches the pages); 0 when it cannot be told. */
static double memory_read_rate(uint32_t threads, size_t bytes)
{
	uint64_t *buf = malloc(bytes);
	pthread_t *t = calloc(threads, sizeof *t);
	reader *r = calloc(threads, sizeof *r);
	double best = 0;
	if (!buf || !t || !r)
		goto done;
	memset(buf, 1, bytes);
	size_t words = bytes / 8, per = words / threads;
	for (int pass = 0; pass < 3; pass++) {
		uint64_t t0 = strata_now_ns();
		uint32_t started = 0;
		for (uint32_t i = 0; i < threads; i++) {
			r[i] = (reader){buf + i * per, per, 0};
			if (pthread_create(&t[i], NULL, read_part, &r[i]))
				break;
			started++;
		}
		for (uint32_t i = 0; i < started; i++)
			pthread_join(t[i], NULL);
		uint64_t ns = strata_now_ns() - t0;
		double rate = started == threads && ns
				      ? (double)(per * threads * 8) * 1e9 / ns
				      : 0;
		best = rate > best ? rate : best;
	}
done:
	free(buf), free(t), free(r);
	return best;
}

/* ------------------------------------------------------------------------ */
/* A synthetic llama                                                        */
/* ------------------------------------------------------------------------ */

enum { GGML_BF16 = 30, GGML_Q8_0 = 8, GGML_Q4_K = 12 };

static uint32_t rng = 99;
static uint32_t rnd(void)
{
	rng = rng * 1664525u + 1013904223u;
	return rng >> 8;
}

/* Random finite weights of rows x cols in ggml type `type`: bf16 values
 * near 2^-7, Q8_0 / Q4_K blocks with small f16 factors. */
static void *random_payload(uint32_t type, uint64_t rows, uint64_t cols,
			    uint64_t *bytes)
{
	uint64_t n = rows * cols;
	*bytes = type == GGML_BF16 ? n * 2
		 : type == GGML_Q8_0 ? n / 32 * 34
				     : n / 256 * 144;
	unsigned char *p = malloc(*bytes);
	if (!p)
		return NULL;
	for (uint64_t i = 0; i < *bytes; i++)
		p[i] = (unsigned char)rnd();
	if (type == GGML_BF16) {
		for (uint64_t i = 0; i < n; i++) {
			uint16_t v = (uint16_t)(0x3c00 | (rnd() & 0x807f));
			memcpy(p + 2 * i, &v, 2);
		}
	} else {
		uint64_t bb = type == GGML_Q8_0 ? 34 : 144;
		const uint16_t d = 0x1c00; /* 2^-8 */
		for (uint64_t b = 0; b < *bytes / bb; b++) {
			memcpy(p + b * bb, &d, 2);
			if (type == GGML_Q4_K)
				memcpy(p + b * bb + 2, &d, 2); /* dmin */
		}
	}
	return p;
}

typedef struct shape {
	uint32_t hidden, ffn, layers, heads, kv_heads, vocab;
} shape;

/* dir/model-NAME.gguf of the shape, matrices in `type`, norms f32 1.0. */
static int write_model(const char *path, const shape *sh, uint32_t type)
{
	uint32_t h = sh->hidden, kv = sh->kv_heads * 64, f = sh->ffn;
	size_t n = 0, cap = 2 + (size_t)sh->layers * 9;
	ckw_tensor *t = calloc(cap, sizeof *t);
	void **data = calloc(cap, sizeof *data);
	char (*names)[64] = calloc(cap, sizeof *names);
	float *ones = malloc((size_t)h * sizeof *ones);
	int rc = -1;
	if (!t || !data || !names || !ones)
		goto done;
	for (uint32_t i = 0; i < h; i++)
		ones[i] = 1.0f;
#define MATRIX(nm, r, c)                                                       \
	do {                                                                   \
		snprintf(names[n], sizeof names[n], "%s", nm);                 \
		uint64_t b_;                                                   \
		if (!(data[n] = random_payload(type, (r), (c), &b_)))          \
			goto done;                                             \
		t[n] = (ckw_tensor){.name = names[n], .type = type,            \
				    .n_dims = 2, .shape = {(r), (c)},          \
				    .data = data[n], .bytes = b_};             \
		n++;                                                           \
	} while (0)
#define NORM(nm)                                                               \
	do {                                                                   \
		snprintf(names[n], sizeof names[n], "%s", nm);                 \
		t[n] = (ckw_tensor){.name = names[n], .type = 0, .n_dims = 1,  \
				    .shape = {h}, .data = ones};               \
		n++;                                                           \
	} while (0)
	MATRIX("token_embd.weight", sh->vocab, h);
	NORM("output_norm.weight");
	for (uint32_t l = 0; l < sh->layers; l++) {
		char nm[64];
#define LAYER(kind, what, ...)                                                 \
	do {                                                                   \
		snprintf(nm, sizeof nm, "blk.%u.%s.weight", l, what);          \
		kind(nm, ##__VA_ARGS__);                                       \
	} while (0)
		LAYER(NORM, "attn_norm");
		LAYER(MATRIX, "attn_q", h, h);
		LAYER(MATRIX, "attn_k", kv, h);
		LAYER(MATRIX, "attn_v", kv, h);
		LAYER(MATRIX, "attn_output", h, h);
		LAYER(NORM, "ffn_norm");
		LAYER(MATRIX, "ffn_gate", f, h);
		LAYER(MATRIX, "ffn_up", f, h);
		LAYER(MATRIX, "ffn_down", h, f);
#undef LAYER
	}
#undef MATRIX
#undef NORM
	const ckw_kv meta[] = {
		CKW_KV_STR("general.architecture", "llama"),
		CKW_KV_U32("llama.context_length", 2048),
		CKW_KV_U32("llama.embedding_length", h),
		CKW_KV_U32("llama.feed_forward_length", f),
		CKW_KV_U32("llama.block_count", sh->layers),
		CKW_KV_U32("llama.attention.head_count", sh->heads),
		CKW_KV_U32("llama.attention.head_count_kv", sh->kv_heads),
		CKW_KV_F32("llama.attention.layer_norm_rms_epsilon", 1e-5f),
		CKW_KV_F32("llama.rope.freq_base", 10000.0f),
	};
	ckw_buf out = {0};
	ckw_gguf(&out, meta, sizeof meta / sizeof *meta, t, n, NULL);
	rc = ckw_write_file(path, out.p, out.len);
	ckw_free(&out);
done:
	for (size_t i = 0; data && i < n; i++)
		free(data[i]);
	free(t), free(data), free(names), free(ones);
	if (rc)
		fprintf(stderr, "bench_quant: cannot write %s\n", path);
	return rc;
}

/* ------------------------------------------------------------------------ */

/* One session, resident on the CPU: a one-token prompt, then `decode`
 * timed single-token steps. */
static int measure(const char *model, uint32_t threads, uint32_t decode,
		   row *out)
{
	strata_session_options so = {
		.model_path = model, .threads = threads,
		.positions = decode + 1, .prefill = 1,
		.plan = {.device = STRATA_PLAN_DEVICE_CPU,
			 .mode = STRATA_RESIDENCY_RESIDENT},
	};
	strata_session *s = NULL;
	strata_error err;
	uint64_t *ns = calloc(decode, sizeof *ns);
	float *last = NULL;
	int rc = 1;
	if (!ns || strata_session_open(&so, &s, &err) != STRATA_OK)
		goto fail;
	const strata_infer_hparams *hp = strata_session_hparams(s);
	strata_forward *f = strata_session_forward(s);
	if (!(last = calloc(hp->vocab, sizeof *last)))
		goto fail;
	int32_t tok = 1;
	strata_forward_reset(f);
	if (strata_forward_run(f, &tok, 1, 0, NULL, last, &err))
		goto fail;
	for (uint32_t d = 0; d < decode; d++) {
		tok = (int32_t)((d * 7919u + 13u) % hp->vocab);
		uint64_t t0 = strata_now_ns();
		if (strata_forward_run(f, &tok, 1, d + 1, NULL, last, &err))
			goto fail;
		ns[d] = strata_now_ns() - t0;
	}
	qsort(ns, decode, sizeof *ns, cmp_u64);
	const strata_plan_layout_info *info =
		strata_plan_get_layout_info(strata_session_plan(s));
	*out = (row){model, ns[decode / 2] / 1e6,
		     info->all_units_bytes + info->static_bytes};
	rc = 0;
fail:
	if (rc)
		fprintf(stderr, "bench_quant: %s: %s\n  fix: %s\n", model,
			err.message, err.fix);
	strata_session_close(s);
	free(ns), free(last);
	return rc;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s && s[1] ? s + 1 : p;
}

static void report(const row *r, size_t n, double mem_rate)
{
	printf("| model | bytes/token | decode ms/token | GB/s of weights | "
	       "%% of memory read rate | speed-up |\n"
	       "| --- | --- | --- | --- | --- | --- |\n");
	for (size_t i = 0; i < n; i++) {
		double rate = r[i].weight_bytes / (r[i].decode_ms * 1e6);
		printf("| %s | %.3f GB | %.3f | %.1f | %.0f%% | %.2fx |\n",
		       base_name(r[i].model), r[i].weight_bytes / 1e9,
		       r[i].decode_ms, rate,
		       mem_rate ? 100.0 * rate * 1e9 / mem_rate : 0.0,
		       r[0].decode_ms / r[i].decode_ms);
	}
	printf("host memory read rate: %.1f GB/s\n", mem_rate / 1e9);
	for (size_t i = 0; i < n; i++)
		printf("json {\"model\": \"%s\", \"bytes_per_token\": %" PRIu64
		       ", \"decode_ms\": %.4f, \"memory_read_rate\": %.0f, "
		       "\"speedup\": %.4f}\n",
		       base_name(r[i].model), r[i].weight_bytes, r[i].decode_ms,
		       mem_rate, r[0].decode_ms / r[i].decode_ms);
}

int main(int argc, char **argv)
{
	const char *models[MAX_MODELS];
	size_t n = 0;
	uint32_t threads = 0, decode = 32;
	bool quick = false, synthetic = false, kernels = false;
	uint32_t k_in = 4096, k_out = 4096;
	const char *k_types = NULL;
	const char *dir = NULL;
	shape sh = {.hidden = 1024, .layers = 8, .vocab = 32000};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick"))
			quick = true;
		else if (!strcmp(a, "--kernels"))
			kernels = true;
		else if (!strcmp(a, "--in") && v && atoi(v) >= 256 &&
			 atoi(v) % 256 == 0)
			k_in = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--out") && v && atoi(v) > 0)
			k_out = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--types") && v)
			k_types = argv[++i];
		else if (!strcmp(a, "--prefetch") && v && atoi(v) >= 0)
			strata__quant_prefetch((uint32_t)atoi(argv[++i]));
		else if (!strcmp(a, "--threads") && v && atoi(v) > 0)
			threads = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--decode") && v && atoi(v) > 0)
			decode = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--hidden") && v && atoi(v) >= 256 &&
			 atoi(v) % 256 == 0)
			sh.hidden = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--layers") && v && atoi(v) > 0)
			sh.layers = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--synthetic")) {
			synthetic = true;
			if (v && v[0] != '-')
				dir = argv[++i];
		} else if (a[0] != '-' && n < MAX_MODELS)
			models[n++] = a;
		else {
			fprintf(stderr,
				"usage: bench_quant [--threads N] [--decode D] "
				"[--quick] MODEL...\n"
				"       bench_quant [--threads N] [--decode D] "
				"--synthetic [DIR] [--hidden H] [--layers L]\n"
				"       bench_quant [--threads N] [--quick] "
				"--kernels [--in K] [--out M] [--prefetch C]\n"
				"       [--types Q8_0,Q4_K,...]\n"
				"  (H and K multiples of 256)\n");
			return 2;
		}
	}
	if (quick)
		decode = 4;
	char paths[3][1024];
	char *tmp = NULL;
	if (synthetic) {
		if (quick)
			sh.hidden = 256, sh.layers = 2, sh.vocab = 512;
		sh.ffn = sh.hidden * 11 / 4 / 256 * 256;
		sh.heads = sh.hidden / 64;
		sh.kv_heads = sh.heads / 4 ? sh.heads / 4 : 1;
		if (!dir && !(dir = tmp = ckw_temp_dir()))
			return 1;
		const char *name[3] = {"BF16", "Q8_0", "Q4_K"};
		const uint32_t type[3] = {GGML_BF16, GGML_Q8_0, GGML_Q4_K};
		n = 0;
		for (int k = 0; k < 3; k++) {
			snprintf(paths[k], sizeof paths[k],
				 "%s/synthetic-%s.gguf", dir, name[k]);
			if (write_model(paths[k], &sh, type[k]))
				return 1;
			models[n++] = paths[k];
		}
	}
	if (n == 0) {
		models[n++] = QUANT "model-F16.gguf";
		models[n++] = QUANT "model-Q8_0.gguf";
		models[n++] = QUANT "model-Q4_K_M.gguf";
	}
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t readers = threads ? threads
				   : (uint32_t)(online > 0 ? online : 1);
	double mem = memory_read_rate(readers, quick ? (size_t)64 << 20
						     : (size_t)1 << 30);
	if (kernels)
		return strata_bench_kernels(threads, quick, mem, k_in, k_out,
					    k_types);
	row r[MAX_MODELS];
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++)
		rc = measure(models[i], threads, decode, &r[i]);
	if (!rc)
		report(r, n, mem);
	if (tmp) {
		for (int k = 0; k < 3; k++)
			remove(paths[k]);
		remove(tmp);
		free(tmp);
	}
	return rc;
}
