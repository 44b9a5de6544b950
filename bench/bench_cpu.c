/* bench_cpu.c - CPU inference speed: prefill and decode tokens/s of a
 * generated ~100M-parameter llama model, against the machine's memory
 * bandwidth bound measured in the same run (bench, layer: infer).
 *
 * The model (dim 768, 12 layers, 12 heads / 4 KV heads, ffn 2048, vocab
 * 32000, tied embeddings: 101M parameters) is written as a temporary
 * safetensors directory in bf16, read back through the checkpoint layer and
 * converted to f32, exactly as `strata run` loads it. Decode streams every
 * f32 weight once per token, so its bound is bandwidth / weight bytes; the
 * bench measures that bandwidth itself with a multi-threaded streaming read
 * and prints the fraction of the bound reached.
 *
 *   bench_cpu [--threads N] [--quick]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/infer.h"

typedef struct shape {
	uint32_t dim, ffn, layers, heads, kv_heads, vocab;
	uint32_t prompt, decode; /* tokens prefilled, tokens decoded */
} shape;

static const shape full = {768, 2048, 12, 12, 4, 32000, 128, 32};
static const shape quick = {64, 172, 2, 8, 4, 512, 16, 8};

/* ------------------------------------------------------------------------ */
/* The generated model                                                      */
/* ------------------------------------------------------------------------ */

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) / 16777216.0) * 2.0f - 1.0f;
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7FFF + ((u >> 16) & 1); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

typedef struct tensor_spec {
	char name[96];
	uint64_t rows, cols; /* cols 0: a vector */
	float scale;	     /* uniform(-scale, scale); 0: ones (norms) */
} tensor_spec;

static size_t specs(const shape *s, tensor_spec *t)
{
	size_t n = 0;
	uint64_t q = s->dim, kv = (uint64_t)s->dim / s->heads * s->kv_heads;
	float in_d = 1.7f / 27.7f, in_f = 1.7f / 45.2f; /* ~1/sqrt(fan_in) */
	if (s->dim < 256) {
		in_d = 0.2f;
		in_f = 0.1f;
	}
	t[n++] = (tensor_spec){"model.embed_tokens.weight", s->vocab, s->dim,
			       1.0f};
	t[n++] = (tensor_spec){"model.norm.weight", s->dim, 0, 0};
	for (uint32_t l = 0; l < s->layers; l++) {
		const struct {
			const char *suffix;
			uint64_t rows, cols;
			float scale;
		} per[] = {
			{"input_layernorm.weight", s->dim, 0, 0},
			{"self_attn.q_proj.weight", q, s->dim, in_d},
			{"self_attn.k_proj.weight", kv, s->dim, in_d},
			{"self_attn.v_proj.weight", kv, s->dim, in_d},
			{"self_attn.o_proj.weight", s->dim, q, in_d},
			{"post_attention_layernorm.weight", s->dim, 0, 0},
			{"mlp.gate_proj.weight", s->ffn, s->dim, in_d},
			{"mlp.up_proj.weight", s->ffn, s->dim, in_d},
			{"mlp.down_proj.weight", s->dim, s->ffn, in_f},
		};
		for (size_t i = 0; i < sizeof per / sizeof *per; i++) {
			snprintf(t[n].name, sizeof t[n].name,
				 "model.layers.%u.%s", l, per[i].suffix);
			t[n].rows = per[i].rows;
			t[n].cols = per[i].cols;
			t[n].scale = per[i].scale;
			n++;
		}
	}
	return n;
}

static int write_model(const char *dir, const shape *s, uint64_t *params)
{
	tensor_spec *t = calloc(2 + 9 * (size_t)s->layers, sizeof *t);
	size_t n = specs(s, t);
	char path[1200];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f,
		"{\"model_type\": \"llama\", \"hidden_size\": %u, "
		"\"intermediate_size\": %u, \"num_hidden_layers\": %u, "
		"\"num_attention_heads\": %u, \"num_key_value_heads\": %u, "
		"\"vocab_size\": %u, \"max_position_embeddings\": 2048, "
		"\"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, "
		"\"tie_word_embeddings\": true}\n",
		s->dim, s->ffn, s->layers, s->heads, s->kv_heads, s->vocab);
	fclose(f);

	/* Header: every tensor bf16, laid out in order. */
	size_t hcap = 256 + n * 200, hlen = 0;
	char *h = malloc(hcap);
	uint64_t off = 0;
	*params = 0;
	hlen += (size_t)snprintf(h + hlen, hcap - hlen, "{");
	for (size_t i = 0; i < n; i++) {
		uint64_t el = t[i].rows * (t[i].cols ? t[i].cols : 1);
		*params += el;
		char shp[64];
		if (t[i].cols)
			snprintf(shp, sizeof shp, "[%llu, %llu]",
				 (unsigned long long)t[i].rows,
				 (unsigned long long)t[i].cols);
		else
			snprintf(shp, sizeof shp, "[%llu]",
				 (unsigned long long)t[i].rows);
		hlen += (size_t)snprintf(h + hlen, hcap - hlen,
					 "%s\"%s\": {\"dtype\": \"BF16\", "
					 "\"shape\": %s, \"data_offsets\": "
					 "[%llu, %llu]}",
					 i ? ", " : "", t[i].name, shp,
					 (unsigned long long)off,
					 (unsigned long long)(off + el * 2));
		off += el * 2;
	}
	hlen += (size_t)snprintf(h + hlen, hcap - hlen, "}");
	while (hlen % 8)
		h[hlen++] = ' ';
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	f = fopen(path, "wb");
	if (!f)
		return -1;
	uint64_t hl = hlen;
	fwrite(&hl, 8, 1, f);
	fwrite(h, 1, hlen, f);
	uint16_t *row = malloc(sizeof *row * 32768);
	for (size_t i = 0; i < n; i++) {
		uint64_t el = t[i].rows * (t[i].cols ? t[i].cols : 1);
		for (uint64_t done = 0; done < el;) {
			uint64_t m = el - done < 32768 ? el - done : 32768;
			for (uint64_t k = 0; k < m; k++)
				row[k] = to_bf16(t[i].scale
							 ? t[i].scale * uniform()
							 : 1.0f);
			fwrite(row, 2, m, f);
			done += m;
		}
	}
	int rc = fclose(f) == 0 ? 0 : -1;
	free(row);
	free(h);
	free(t);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* The peer: memory bandwidth by a streaming read                           */
/* ------------------------------------------------------------------------ */

typedef struct bw_slice {
	const float *p;
	size_t n;
	float sum;
} bw_slice;

static void *bw_read(void *arg)
{
	bw_slice *s = arg;
	float acc[16] = {0};
	for (size_t i = 0; i + 16 <= s->n; i += 16)
		for (int k = 0; k < 16; k++)
			acc[k] += s->p[i + k];
	float t = 0;
	for (int k = 0; k < 16; k++)
		t += acc[k];
	s->sum = t;
	return NULL;
}

/* Best of five passes over `bytes`, with `threads` readers; bytes/s. */
static double bandwidth(uint64_t bytes, uint32_t threads)
{
	size_t n = bytes / sizeof(float);
	float *buf = malloc(n * sizeof *buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)(i & 7);
	pthread_t tid[256];
	bw_slice sl[256];
	double best = 0;
	for (int rep = 0; rep < 5; rep++) {
		uint64_t t0 = strata_now_ns();
		for (uint32_t t = 0; t < threads; t++) {
			sl[t].p = buf + n / threads * t;
			sl[t].n = n / threads;
			pthread_create(&tid[t], NULL, bw_read, &sl[t]);
		}
		float check = 0;
		for (uint32_t t = 0; t < threads; t++) {
			pthread_join(tid[t], NULL);
			check += sl[t].sum;
		}
		double s = (strata_now_ns() - t0) / 1e9;
		double bw = (double)(n / threads * threads * sizeof(float)) / s;
		if (bw > best && check > 0)
			best = bw;
	}
	free(buf);
	return best;
}

/* ------------------------------------------------------------------------ */

static int fail(const strata_error *err)
{
	fprintf(stderr, "bench_cpu: %s\n  fix: %s\n", err->message, err->fix);
	return 1;
}

typedef struct loaded {
	strata_catalog *cat;
	strata_infer_hparams hp;
	strata_infer_tensors tens;
	strata_infer_loaded *ld;
	strata_infer_source src;
	strata_compute *c;
	strata_forward *f;
} loaded;

static strata_status load(const char *dir, const shape *s, uint32_t threads,
			  loaded *m, strata_error *err)
{
	strata_status st;
	if ((st = strata_catalog_open(dir, &m->cat, err)) ||
	    (st = strata_infer_hparams_read(dir, m->cat, &m->hp, err)) ||
	    (st = strata_infer_tensors_find(m->cat, &m->hp, &m->tens, err)) ||
	    (st = strata_infer_load_all(m->cat, &m->tens, &m->ld, &m->src,
					err)) ||
	    (st = strata_compute_create(&strata_cpu_kernel_ops, threads, &m->c,
					err)))
		return st;
	return strata_forward_create(
		&(strata_forward_options){.hp = &m->hp,
					  .compute = m->c,
					  .src = &m->src,
					  .context = s->prompt + s->decode + 1,
					  .batch = s->prompt},
		&m->f, err);
}

static void unload(loaded *m, const char *dir)
{
	strata_forward_destroy(m->f);
	strata_compute_destroy(m->c);
	strata_infer_loaded_destroy(m->ld);
	strata_infer_tensors_fini(&m->tens);
	strata_catalog_destroy(m->cat);
	char path[1200];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/config.json", dir);
	unlink(path);
	rmdir(dir);
}

/* Prefill s->prompt tokens in one pass, then decode s->decode one by one. */
static strata_status measure(const shape *s, loaded *m, double *prefill_s,
			     double *decode_s, strata_error *err)
{
	int32_t tok[4096];
	float *logits = calloc(s->vocab, sizeof *logits);
	for (uint32_t i = 0; i < s->prompt + s->decode; i++)
		tok[i] = (int32_t)((i * 7919u + 1) % s->vocab);
	uint64_t t0 = strata_now_ns();
	strata_status st = strata_forward_run(m->f, tok, s->prompt, 0, NULL,
					      logits, err);
	*prefill_s = (strata_now_ns() - t0) / 1e9;
	t0 = strata_now_ns();
	for (uint32_t i = 0; st == STRATA_OK && i < s->decode; i++)
		st = strata_forward_run(m->f, tok + s->prompt + i, 1,
					s->prompt + i, NULL, logits, err);
	*decode_s = (strata_now_ns() - t0) / 1e9;
	free(logits);
	return st;
}

static void report(const shape *s, uint64_t params, uint32_t threads,
		   double prefill_s, double decode_s, double bw)
{
	/* Bytes one decode step streams: every f32 weight (the tied head is
	 * the embedding, read in full for the logits). */
	uint64_t weight_bytes = params * sizeof(float);
	double prefill_tps = s->prompt / prefill_s;
	double decode_tps = s->decode / decode_s;
	double bound = bw / weight_bytes;
	printf("prefill: %u tokens in %.3f s = %.1f tokens/s (%.1f GFLOP/s)\n",
	       s->prompt, prefill_s, prefill_tps,
	       prefill_tps * 2.0 * params / 1e9);
	printf("decode:  %u tokens in %.3f s = %.2f tokens/s (%.1f ms/token)\n",
	       s->decode, decode_s, decode_tps, 1e3 * decode_s / s->decode);
	printf("memory bandwidth (streaming read, %u threads, same run): "
	       "%.2f GB/s\n",
	       threads, bw / 1e9);
	printf("decode bound: %.2f GB/s / %.1f MB of f32 weights per token = "
	       "%.2f tokens/s\n",
	       bw / 1e9, weight_bytes / 1e6, bound);
	printf("decode reaches %.1f%% of the memory-bandwidth bound "
	       "(%.2f GB/s effective)\n",
	       100.0 * decode_tps / bound, decode_tps * weight_bytes / 1e9);
	printf("prefill/decode speed ratio: %.1fx\n", prefill_tps / decode_tps);
}

int main(int argc, char **argv)
{
	const shape *s = &full;
	uint32_t threads = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			s = &quick;
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = (uint32_t)atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: bench_cpu [--threads N] "
					"[--quick]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > 256)
		threads = 1;
	char dir[] = "/tmp/strata-bench-cpu-XXXXXX";
	uint64_t params = 0, t0 = strata_now_ns();
	if (!mkdtemp(dir) || write_model(dir, s, &params)) {
		fprintf(stderr, "bench_cpu: cannot write the model in %s\n",
			dir);
		return 1;
	}
	printf("model: llama dim %u, %u layers, %u/%u heads, ffn %u, vocab "
	       "%u: %.1fM parameters (bf16 file, f32 compute), written in "
	       "%.2f s\n",
	       s->dim, s->layers, s->heads, s->kv_heads, s->ffn, s->vocab,
	       params / 1e6, (strata_now_ns() - t0) / 1e9);
	strata_error err;
	loaded m = {0};
	double prefill_s, decode_s;
	t0 = strata_now_ns();
	if (load(dir, s, threads, &m, &err))
		return fail(&err);
	printf("loaded and converted in %.2f s; %u compute threads\n",
	       (strata_now_ns() - t0) / 1e9, threads);
	if (measure(s, &m, &prefill_s, &decode_s, &err))
		return fail(&err);
	double bw = bandwidth(s == &quick ? (64u << 20) : (1024ull << 20),
			      threads);
	report(s, params, threads, prefill_s, decode_s, bw);
	unload(&m, dir);
	return 0;
}
