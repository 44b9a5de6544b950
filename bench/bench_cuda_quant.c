/* bench_cuda_quant.c - the CUDA products on weights in their stored type
 * at the 7.5 GB llama's shapes (hidden 4096, GQA 32/8 heads of 128,
 * intermediate 14336, vocabulary 32000), against the device's own copy
 * rate measured in the same run (bench, layer: backend).
 *
 *   bench_cuda_quant [--quick] [--reps N] [--types Q8_0,Q4_K,...]
 *                    [--rows 512,2048] [--no-sweep] [--wide 0|1|both]
 *                    [--wide-q8-0 0|1|both]
 *
 * Decode: each type's one-row product (the GEMV) at every shape, in GB/s
 * of stored bytes and as a share of the copy rate, on the types the 8-bit
 * GEMV takes (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) with x quantized (the
 * default, "q8 x": the quantization's launch included) and with f32 x
 * ("f32 x", --precision exact), each row of figures for both; Q8_0 and Q4_K also
 * through the general block GEMV (kernels_quant.cu) and over every row
 * split and unroll (the tuning strata__cuda_qgemv_* picks from), 1..8
 * rows of x on the largest shape, and the sum of a token's products (16
 * layers of q, k, v, o, gate, up, down and the output head) as ms/token;
 * a decode layer's products through the fused slots as the forward pass
 * calls them (bf16, Q8_0, Q4_K, Q6_K; q8 and f32 x). --wide sets
 * strata__cuda_q8gemv_wide (0: the narrow lanes; 1, the default: the wide
 * K-quant lanes; both: Q4_K, Q5_K and Q6_K measured each way, one after
 * the other); --wide-q8-0 the same for Q8_0 (strata__cuda_q8gemv_wide_q8_0,
 * qgemv_q8_0_wide.cuh); rows and figures of the wide lanes say x "q8w".
 * Prefill: 512 and 2048 rows on the MLP and attention shapes in TFLOP/s:
 * tensor cores (bf16 hi + lo, the default; bf16 once) against the f32
 * SGEMM slices and the bf16 weights' own cuBLAS product, with the plan's
 * product workspace (rows x 14336 x 4 bytes). Values are random blocks
 * with small factors: the time does not depend on them. Prints a table,
 * then one "json {...}" line per figure. Exit 77 without a CUDA device.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.h"
#include "strata/backend_kernels.h"

typedef struct shape {
	const char *name;
	uint32_t out, in;
	uint32_t per_token; /* how many a token multiplies */
} shape;

/* A token of the 7.5 GB llama: 16 layers, then the output head. */
static const shape full_shapes[] = {
	{"q,o 4096x4096", 4096, 4096, 32},
	{"k,v 1024x4096", 1024, 4096, 32},
	{"gate,up 14336x4096", 14336, 4096, 32},
	{"down 4096x14336", 4096, 14336, 16},
	{"output 32000x4096", 32000, 4096, 1},
};
static const shape quick_shapes[] = {
	{"quick 512x1024", 512, 1024, 1},
	{"quick 256x2048", 256, 2048, 1},
};

typedef struct bench {
	strata_backend *b;
	strata_compute *c;
	strata_stream *s;
	strata__cuda_compute *k;
	int reps;
	double copy_rate; /* bytes of traffic per second */
} bench;

static void die(const char *what, const strata_error *e)
{
	fprintf(stderr, "bench_cuda_quant: %s: %s\n  fix: %s\n", what,
		e ? e->message : "", e ? e->fix : "");
	exit(1);
}

static void *dev(uint64_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		fprintf(stderr, "bench_cuda_quant: cudaMalloc of %" PRIu64 " bytes failed\n",
			bytes);
		exit(1);
	}
	return p;
}

/* ------------------------------------------------------------------------ */
/* Data and timing                                                          */
/* ------------------------------------------------------------------------ */

static uint64_t lcg = 12345;
static uint32_t rnd(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(lcg >> 33);
}

/* Random weights of type t (rows x cols) on the device: random bytes, each
 * block's f16 factors kept small and finite; bf16 values of |v| < 2. */
static void *random_weights(strata_weight_type t, uint32_t rows,
			    uint32_t cols, uint64_t *bytes_out)
{
	strata_block_type bt = strata_weight_type_block(t);
	uint64_t bytes = (uint64_t)rows * (cols / strata_block_elements(bt)) *
			 strata_block_bytes(bt);
	unsigned char *h = malloc(bytes);
	if (!h)
		exit(1);
	for (uint64_t i = 0; i < bytes; i++)
		h[i] = (unsigned char)rnd();
	uint32_t bb = strata_block_bytes(bt);
	if (t == STRATA_WEIGHT_BF16) {
		for (uint64_t i = 1; i < bytes; i += 2)
			h[i] &= 0xbf; /* exponent below 2^1 */
	} else {
		/* every layout keeps its f16 factors in a block's first or
		 * last 4 bytes: their high bytes get a small exponent */
		for (uint64_t i = 1; i < bytes; i += 2)
			h[i] &= (i % bb) < 4 || (i % bb) >= bb - 4 ? 0x2b : 0xff;
	}
	void *d = dev(bytes);
	if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
		exit(1);
	free(h);
	*bytes_out = bytes;
	return d;
}

typedef struct product {
	bench *B;
	strata_weight w;
	float *y;
	const float *x;
	uint32_t n;
} product;

static void run_product(product *p)
{
	strata_error e;
	if (strata_kernel_matmul(p->B->c, p->y, p->x, &p->w, NULL, p->n, &e) !=
	    STRATA_OK)
		die("matmul", &e);
}

/* Seconds per product, best of three runs of B->reps back to back. */
static double time_product(product *p)
{
	strata_error e;
	strata_event *a = NULL, *z = NULL;
	if (strata_event_create(p->B->b, &a, &e) ||
	    strata_event_create(p->B->b, &z, &e))
		die("event", &e);
	run_product(p); /* warm-up: workspace, cuBLAS heuristics */
	double best = 1e30;
	for (int round = 0; round < 3; round++) {
		double sec = 0;
		if (strata_event_record(p->B->b, a, p->B->s, &e))
			die("event record", &e);
		for (int i = 0; i < p->B->reps; i++)
			run_product(p);
		if (strata_event_record(p->B->b, z, p->B->s, &e) ||
		    strata_event_wait(p->B->b, z, &e) ||
		    strata_event_elapsed(p->B->b, a, z, &sec, &e))
			die("event timing", &e);
		if (sec / p->B->reps < best)
			best = sec / p->B->reps;
	}
	strata_event_destroy(p->B->b, a);
	strata_event_destroy(p->B->b, z);
	return best;
}

/* Device-to-device copy of `bytes`: read and written, so 2x of traffic. */
static double copy_rate(bench *B, uint64_t bytes)
{
	void *a = dev(bytes), *d = dev(bytes);
	cudaStream_t cs = B->k->stream.cuda;
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaMemsetAsync(a, 1, bytes, cs);
	cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, cs);
	float best = 1e30f;
	for (int round = 0; round < 3; round++) {
		float ms = 0;
		cudaEventRecord(e0, cs);
		for (int i = 0; i < 5; i++)
			cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, cs);
		cudaEventRecord(e1, cs);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&ms, e0, e1);
		best = ms / 5 < best ? ms / 5 : best;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(d);
	return 2.0 * (double)bytes / (best / 1e3);
}

/* ------------------------------------------------------------------------ */
/* Decode                                                                   */
/* ------------------------------------------------------------------------ */

/* Whether the decode products of t take x quantized now (the 8-bit
 * GEMV). */
static bool q8_x(const bench *B, strata_weight_type t)
{
	strata_block_type bt = strata_weight_type_block(t);
	return t != STRATA_WEIGHT_BF16 && bt < STRATA_BLOCK_COUNT &&
	       strata__cuda_q8gemv_takes((int)bt, (void *)(uintptr_t)256, 4096) &&
	       B->k->decode_q8;
}

/* The knob that picks t's 8-bit GEMV lanes (strata__cuda_q8gemv_wide for
 * the K-quants, _wide_q8_0 for Q8_0), or NULL where none has a say. */
static int *wide_knob(strata_weight_type t)
{
	if (t == STRATA_WEIGHT_Q4_K || t == STRATA_WEIGHT_Q5_K ||
	    t == STRATA_WEIGHT_Q6_K)
		return &strata__cuda_q8gemv_wide;
	return t == STRATA_WEIGHT_Q8_0 ? &strata__cuda_q8gemv_wide_q8_0 : NULL;
}

/* The activations the decode products take now: "q8" (quantized, the
 * 8-bit GEMV), "q8w" (the same on the wide lanes) or "f32". */
static const char *x_kind(const bench *B, strata_weight_type t)
{
	if (!q8_x(B, t))
		return "f32";
	const int *k = wide_knob(t);
	return k && *k ? "q8w" : "q8";
}

static void gemv_line(bench *B, const char *type, const char *x,
		      const shape *sh, const char *path, uint32_t n, double t,
		      uint64_t bytes)
{
	double rate = (double)bytes / t;
	printf("  %-7s %-3s x %-20s %-24s n=%u %9.1f us %7.0f GB/s %5.1f%% of copy\n",
	       type, x, sh->name, path, n, t * 1e6, rate / 1e9,
	       100.0 * rate / B->copy_rate);
	printf("json {\"figure\":\"gemv\",\"type\":\"%s\",\"x\":\"%s\",\"shape\":\"%s\",\"path\":\"%s\",\"n\":%u,\"us\":%.2f,\"gbps\":%.1f,\"copy_share\":%.4f}\n",
	       type, x, sh->name, path, n, t * 1e6, rate / 1e9, rate / B->copy_rate);
}

/* The product's time with the fast GEMV's split and unroll swept; prints
 * the best and what the automatic choice gives. */
static void sweep(bench *B, product *p, const char *type, const char *x,
		  const shape *sh, uint64_t bytes)
{
	double best = 1e30;
	int bs = 0, bu = 4;
	for (int split = 1; split <= 8; split *= 2)
		for (int unroll = 4; unroll <= 8; unroll += 4) {
			strata__cuda_qgemv_split = split;
			strata__cuda_qgemv_unroll = unroll;
			double t = time_product(p);
			if (t < best)
				best = t, bs = split, bu = unroll;
		}
	strata__cuda_qgemv_split = 0;
	strata__cuda_qgemv_unroll = 4;
	char path[48];
	snprintf(path, sizeof path, "best: split %d unroll %d", bs, bu);
	gemv_line(B, type, x, sh, path, 1, best, bytes);
}

/* One type's decode products; returns the ms of a token's products. */
static double decode_type(bench *B, strata_weight_type t, const shape *shapes,
			  size_t count, bool do_sweep)
{
	const char *name = strata_weight_type_name(t), *xk = x_kind(B, t);
	double token = 0, token_bytes = 0;
	for (size_t i = 0; i < count; i++) {
		const shape *sh = &shapes[i];
		uint64_t bytes = 0;
		void *w = random_weights(t, sh->out, sh->in, &bytes);
		float *x = dev((uint64_t)8 * sh->in * 4);
		float *y = dev((uint64_t)8 * sh->out * 4);
		cudaMemset(x, 0, (uint64_t)8 * sh->in * 4);
		product p = {B, {t, w, sh->out, sh->in}, y, x, 1};
		double tm = time_product(&p);
		token += tm * sh->per_token;
		token_bytes += (double)bytes * sh->per_token;
		gemv_line(B, name, xk, sh, "default", 1, tm, bytes);
		bool fast = t != STRATA_WEIGHT_BF16 &&
			    strata__cuda_qgemv_takes((int)strata_weight_type_block(t), w, sh->in);
		if (fast && do_sweep && (t == STRATA_WEIGHT_Q8_0 || t == STRATA_WEIGHT_Q4_K)) {
			if (!strcmp(xk, "f32")) { /* the q8 path has no other */
				strata__cuda_qgemv_enabled = 0;
				gemv_line(B, name, xk, sh, "general block GEMV",
					  1, time_product(&p), bytes);
				strata__cuda_qgemv_enabled = 1;
			} else {
				if (t == STRATA_WEIGHT_Q8_0) {
					strata__cuda_q8gemv_aligned = 0;
					gemv_line(B, name, xk, sh,
						  "funnel-shifted loads", 1,
						  time_product(&p), bytes);
					strata__cuda_q8gemv_aligned = 1;
				}
				strata__cuda_pdl = 0;
				gemv_line(B, name, xk, sh, "ordinary launch", 1,
					  time_product(&p), bytes);
				strata__cuda_pdl = 1;
			}
			sweep(B, &p, name, xk, sh, bytes);
		}
		if (i + 1 == count || sh->out == 14336)
			for (uint32_t n = 2; n <= 8 && do_sweep; n *= 2) {
				p.n = n;
				gemv_line(B, name, xk, sh, "default", n,
					  time_product(&p), bytes);
			}
		cudaFree(w);
		cudaFree(x);
		cudaFree(y);
	}
	printf("  %-7s %-3s x a token's products: %.3f ms (%.2f TB/s of %.2f GB of weights)\n",
	       name, xk, token * 1e3, token_bytes / token / 1e12, token_bytes / 1e9);
	printf("json {\"figure\":\"token\",\"type\":\"%s\",\"x\":\"%s\",\"ms\":%.4f,\"bytes\":%.0f}\n",
	       name, xk, token * 1e3, token_bytes);
	return token * 1e3;
}

/* The 8-bit GEMV's quantization of x alone (one row, the norm folded in),
 * per launch: what the q8 path adds to each product. */
static void quantize_time(bench *B, uint32_t in)
{
	float *x = dev((uint64_t)in * 4), *g = dev((uint64_t)in * 4);
	void *q = dev(strata__cuda_q8x_bytes(1, in));
	cudaMemset(x, 0, (uint64_t)in * 4);
	cudaMemset(g, 0, (uint64_t)in * 4);
	cudaStream_t cs = B->k->stream.cuda;
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	if (strata__cuda_quantize_x(cs, q, x, 1, in, g, 1e-5f) != cudaSuccess)
		die("quantize x", NULL);
	float ms = 0;
	cudaEventRecord(e0, cs);
	for (int i = 0; i < B->reps; i++)
		(void)strata__cuda_quantize_x(cs, q, x, 1, in, g, 1e-5f);
	cudaEventRecord(e1, cs);
	cudaEventSynchronize(e1);
	cudaEventElapsedTime(&ms, e0, e1);
	printf("  quantize x (1 row of %u, norm folded in): %.2f us a launch\n",
	       in, ms * 1e3 / B->reps);
	printf("json {\"figure\":\"quantize_x\",\"in\":%u,\"us\":%.3f}\n", in,
	       ms * 1e3 / B->reps);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(x);
	cudaFree(g);
	cudaFree(q);
}

/* A decode layer's products as the forward pass calls them (q,k,v with
 * the norm folded in, o into the residual, gate/up with SwiGLU and the
 * norm, down into the residual), back to back: the launches a token
 * makes per layer, without attention. */
typedef struct layer {
	bench *B;
	strata_weight q, k, v, o, gate, up, down;
	float *x, *xn, *qo, *ko, *vo, *h, *h2, *scratch, *norm;
} layer;

static void run_layer(layer *L)
{
	strata_error e;
	strata_compute *c = L->B->c;
	const strata_kernel_norm n = {{STRATA_WEIGHT_F32, L->norm, 1, L->q.cols}, 1e-5f};
	const strata_kernel_product qkv[3] = {{L->qo, L->q, NULL},
					      {L->ko, L->k, NULL},
					      {L->vo, L->v, NULL}};
	const strata_kernel_product o = {L->x, L->o, NULL};
	const strata_kernel_product d = {L->x, L->down, NULL};
	if (strata_kernel_products(c, L->x, &n, L->xn, 1, qkv, 3, false, NULL, &e) ||
	    strata_kernel_products(c, L->qo, NULL, NULL, 1, &o, 1, true, L->scratch, &e) ||
	    strata_kernel_gated(c, L->h, L->x, &n, L->xn, &L->gate, &L->up, L->h2, 1, &e) ||
	    strata_kernel_products(c, L->h, NULL, NULL, 1, &d, 1, true, L->scratch, &e))
		die("decode layer", &e);
}

static double layer_time(bench *B, strata_weight_type t)
{
	layer L = {.B = B};
	uint64_t bytes = 0, total = 0;
	struct { strata_weight *w; uint32_t out, in; } m[] = {
		{&L.q, 4096, 4096}, {&L.k, 1024, 4096}, {&L.v, 1024, 4096},
		{&L.o, 4096, 4096}, {&L.gate, 14336, 4096}, {&L.up, 14336, 4096},
		{&L.down, 4096, 14336},
	};
	for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
		void *w = random_weights(t, m[i].out, m[i].in, &bytes);
		*m[i].w = (strata_weight){t, w, m[i].out, m[i].in};
		total += bytes;
	}
	float **bufs[] = {&L.x, &L.xn, &L.qo, &L.ko, &L.vo, &L.h, &L.h2,
			  &L.scratch, &L.norm};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
		*bufs[i] = dev(14336 * 4);
		cudaMemset(*bufs[i], 0, 14336 * 4);
	}
	strata_error e;
	strata_event *a = NULL, *z = NULL;
	if (strata_event_create(B->b, &a, &e) || strata_event_create(B->b, &z, &e))
		die("event", &e);
	run_layer(&L);
	double sec = 0;
	if (strata_event_record(B->b, a, B->s, &e))
		die("event", &e);
	for (int i = 0; i < B->reps; i++)
		run_layer(&L);
	if (strata_event_record(B->b, z, B->s, &e) || strata_event_wait(B->b, z, &e) ||
	    strata_event_elapsed(B->b, a, z, &sec, &e))
		die("event timing", &e);
	sec /= B->reps;
	strata_event_destroy(B->b, a);
	strata_event_destroy(B->b, z);
	printf("  %-7s %-3s x decode layer's products (fused slots): %.1f us, %.0f GB/s of %.1f MB, x16 layers %.3f ms\n",
	       strata_weight_type_name(t), x_kind(B, t), sec * 1e6,
	       total / sec / 1e9, total / 1e6, 16 * sec * 1e3);
	printf("json {\"figure\":\"layer\",\"type\":\"%s\",\"x\":\"%s\",\"us\":%.2f,\"bytes\":%" PRIu64 "}\n",
	       strata_weight_type_name(t), x_kind(B, t), sec * 1e6, total);
	for (size_t i = 0; i < sizeof m / sizeof *m; i++)
		cudaFree((void *)m[i].w->data);
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		cudaFree(*bufs[i]);
	return sec;
}

/* ------------------------------------------------------------------------ */
/* Prefill                                                                  */
/* ------------------------------------------------------------------------ */

static void prefill_line(const char *type, const shape *sh, const char *path,
			 uint32_t n, double t)
{
	double fl = 2.0 * n * (double)sh->in * sh->out / t;
	printf("  %-7s %-20s %-26s n=%-5u %9.1f us %7.1f TFLOP/s\n", type,
	       sh->name, path, n, t * 1e6, fl / 1e12);
	printf("json {\"figure\":\"prefill\",\"type\":\"%s\",\"shape\":\"%s\",\"path\":\"%s\",\"n\":%u,\"us\":%.2f,\"tflops\":%.2f}\n",
	       type, sh->name, path, n, t * 1e6, fl / 1e12);
}

static void prefill_type(bench *B, strata_weight_type t, const shape *sh,
			 uint32_t n, uint32_t widest)
{
	const char *name = strata_weight_type_name(t);
	strata_error e;
	uint64_t bytes = 0;
	void *w = random_weights(t, sh->out, sh->in, &bytes);
	float *x = dev((uint64_t)n * sh->in * 4);
	float *y = dev((uint64_t)n * sh->out * 4);
	cudaMemset(x, 0, (uint64_t)n * sh->in * 4);
	/* the plan's product workspace: rows x the widest input x 4 */
	if (strata_compute_reserve(B->c, (uint64_t)n * widest * 4, &e))
		die("workspace", &e);
	product p = {B, {t, w, sh->out, sh->in}, y, x, n};
	const int terms = B->k->prefill_terms;
	if (t == STRATA_WEIGHT_BF16) {
		B->k->prefill_terms = 3; /* --precision exact */
		prefill_line(name, sh, "cuBLAS bf16 hi+lo x", n, time_product(&p));
		B->k->prefill_terms = 1;
		prefill_line(name, sh, "cuBLAS bf16 once", n, time_product(&p));
	} else {
		B->k->prefill_terms = 3;
		prefill_line(name, sh, "tensor cores hi+lo", n, time_product(&p));
		B->k->prefill_terms = 1;
		prefill_line(name, sh, "tensor cores bf16 once", n,
			     time_product(&p));
		B->k->prefill_terms = terms;
		strata__cuda_quant_prefill = 0;
		prefill_line(name, sh, "f32 SGEMM slices", n, time_product(&p));
		strata__cuda_quant_prefill = 1;
	}
	B->k->prefill_terms = terms;
	cudaFree(w);
	cudaFree(x);
	cudaFree(y);
}

/* ------------------------------------------------------------------------ */

/* Every type the bench measures somewhere, in the order it does. */
static const strata_weight_type all_types[] = {
	STRATA_WEIGHT_BF16, STRATA_WEIGHT_Q8_0,	 STRATA_WEIGHT_Q4_0,
	STRATA_WEIGHT_Q4_K, STRATA_WEIGHT_Q5_K,	 STRATA_WEIGHT_Q6_K,
	STRATA_WEIGHT_Q4_1, STRATA_WEIGHT_Q5_0,	 STRATA_WEIGHT_Q5_1,
	STRATA_WEIGHT_Q2_K, STRATA_WEIGHT_Q3_K,	 STRATA_WEIGHT_IQ4_NL,
	STRATA_WEIGHT_IQ4_XS,
};
#define ALL_TYPES (sizeof all_types / sizeof *all_types)
/* The types of the decode layer and prefill sections. */
static const strata_weight_type section_types[] = {
	STRATA_WEIGHT_BF16, STRATA_WEIGHT_Q8_0, STRATA_WEIGHT_Q4_K,
	STRATA_WEIGHT_Q6_K,
};
#define SECTION_TYPES (sizeof section_types / sizeof *section_types)

static bool listed(uint32_t chosen, strata_weight_type t)
{
	return chosen >> t & 1;
}

/* --types "Q8_0,q4_k,...": bits of strata_weight_type into *chosen. The
 * names are strata_weight_type_name's in any case (the weights' own names
 * are lower case, "q8_0": a case-sensitive match of "Q8_0,Q4_K,Q6_K"
 * once selected nothing, and every section printed its heading and no
 * row). An unknown or empty name is a usage error (exit 2). */
static int parse_types(const char *list, uint32_t *chosen)
{
	*chosen = 0;
	for (const char *p = list;;) {
		size_t n = strcspn(p, ",");
		bool found = false;
		for (size_t i = 0; i < ALL_TYPES && n; i++) {
			const char *name = strata_weight_type_name(all_types[i]);
			if (strlen(name) == n && !strncasecmp(p, name, n)) {
				*chosen |= 1u << all_types[i];
				found = true;
			}
		}
		if (!found) {
			fprintf(stderr, "bench_cuda_quant: --types: '%.*s' is "
				"not a type this bench measures\n  fix: give "
				"some of", (int)n, p);
			for (size_t i = 0; i < ALL_TYPES; i++)
				fprintf(stderr, "%s%s", i ? "," : " ",
					strata_weight_type_name(all_types[i]));
			fprintf(stderr, " (any case)\n");
			return 2;
		}
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

/* --rows "512,2048": 1 to 4 row counts of 1 to 16384; else exit 2. */
static int parse_rows(const char *list, uint32_t *rows, uint32_t *nrows)
{
	*nrows = 0;
	for (const char *p = list;;) {
		char *end = NULL;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p || (*end && *end != ',') || v < 1 || v > 16384 ||
		    *nrows == 4) {
			fprintf(stderr, "bench_cuda_quant: --rows '%s': give 1 "
				"to 4 row counts of 1 to 16384, comma-separated"
				"\n", list);
			return 2;
		}
		rows[(*nrows)++] = (uint32_t)v;
		if (!*end)
			return 0;
		p = end + 1;
	}
}

/* --wide or --wide-q8-0 (`opt`) 0|1|both: *knob (strata__cuda_q8gemv_wide
 * or _wide_q8_0; both: 0, then its types again at 1); else exit 2. */
static int parse_wide(const char *opt, const char *v, int *knob, bool *both)
{
	if (!strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "both")) {
		*knob = !strcmp(v, "1");
		*both = !strcmp(v, "both");
		return 0;
	}
	fprintf(stderr, "bench_cuda_quant: %s '%s': give 0, 1 or both\n", opt, v);
	return 2;
}

/* Whether t is measured on both of its lanes (--wide or --wide-q8-0 both). */
static bool both_lanes(strata_weight_type t, bool k_both, bool q8_0_both)
{
	const int *k = wide_knob(t);
	return k && (k == &strata__cuda_q8gemv_wide ? k_both : q8_0_both);
}

/* A section's heading, and why it has no row when none of its types was
 * chosen (rather than a heading with nothing under it). */
static bool section(const char *heading, uint32_t chosen)
{
	printf("%s\n", heading);
	for (size_t i = 0; i < SECTION_TYPES; i++)
		if (listed(chosen, section_types[i]))
			return true;
	printf("  (no row: --types names none of");
	for (size_t i = 0; i < SECTION_TYPES; i++)
		printf("%s%s", i ? "," : " ",
		       strata_weight_type_name(section_types[i]));
	printf(", the types this section measures)\n");
	return false;
}

int main(int argc, char **argv)
{
	bool quick = false, do_sweep = true, wide_both = false, q8_0_both = false;
	uint32_t chosen = UINT32_MAX; /* every type */
	uint32_t rows[4] = {512, 2048}, nrows = 2;
	bench B = {.reps = 20};
	int rc = 0;
	for (int i = 1; i < argc && !rc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--no-sweep"))
			do_sweep = false;
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			B.reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--types") && i + 1 < argc)
			rc = parse_types(argv[++i], &chosen);
		else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			rc = parse_rows(argv[++i], rows, &nrows);
		else if (!strcmp(argv[i], "--wide") && i + 1 < argc)
			rc = parse_wide("--wide", argv[++i],
					&strata__cuda_q8gemv_wide, &wide_both);
		else if (!strcmp(argv[i], "--wide-q8-0") && i + 1 < argc)
			rc = parse_wide("--wide-q8-0", argv[++i],
					&strata__cuda_q8gemv_wide_q8_0, &q8_0_both);
		else {
			fprintf(stderr, "usage: bench_cuda_quant [--quick] [--reps N] [--types T,...] [--rows N,...] [--no-sweep] [--wide 0|1|both] [--wide-q8-0 0|1|both]\n");
			rc = 2;
		}
	}
	if (rc)
		return rc;
	if (strata_backend_device_count("cuda") <= 0) {
		printf("bench_cuda_quant: no CUDA device visible: skipped\n");
		return 77;
	}
	if (B.reps < 1)
		B.reps = 1;
	if (quick) {
		B.reps = 2, do_sweep = false, nrows = 1, rows[0] = 64;
	}
	strata_error e;
	if (strata_backend_cuda_create(NULL, &B.b, &e) ||
	    strata_compute_create_on(B.b, 0, &B.c, &e))
		die("CUDA backend", &e);
	B.s = strata_compute_stream(B.c);
	B.k = strata__cuda_compute_of(B.c);
	B.copy_rate = copy_rate(&B, quick ? (16u << 20) : (512u << 20));
	printf("bench_cuda_quant: device-to-device copy %.0f GB/s of traffic (the reference)\n",
	       B.copy_rate / 1e9);
	printf("json {\"figure\":\"copy\",\"gbps\":%.1f}\n", B.copy_rate / 1e9);
	const shape *shapes = quick ? quick_shapes : full_shapes;
	size_t count = quick ? 2 : sizeof full_shapes / sizeof *full_shapes;
	printf("decode (one row of x unless n says otherwise):\n");
	quantize_time(&B, quick ? 1024 : 4096);
	if (!quick)
		quantize_time(&B, 14336);
	for (size_t i = 0; i < ALL_TYPES; i++) {
		if (!listed(chosen, all_types[i]))
			continue;
		decode_type(&B, all_types[i], shapes, count, do_sweep);
		if (q8_x(&B, all_types[i]) &&
		    both_lanes(all_types[i], wide_both, q8_0_both)) {
			int *k = wide_knob(all_types[i]); /* the other lanes too */
			*k = !*k;
			decode_type(&B, all_types[i], shapes, count, do_sweep);
			*k = !*k;
		}
		if (q8_x(&B, all_types[i])) { /* and f32 x */
			B.k->decode_q8 = 0;
			decode_type(&B, all_types[i], shapes, count, do_sweep);
			B.k->decode_q8 = 1;
		}
	}
	if (!quick && section("decode layer (4096 -> q,k,v; o; 2 x 14336; down):",
			      chosen))
		for (size_t i = 0; i < SECTION_TYPES; i++) {
			strata_weight_type t = section_types[i];
			if (!listed(chosen, t))
				continue;
			layer_time(&B, t);
			if (q8_x(&B, t) && both_lanes(t, wide_both, q8_0_both)) {
				int *k = wide_knob(t);
				*k = !*k;
				layer_time(&B, t);
				*k = !*k;
			}
			if (q8_x(&B, t)) {
				printf("  (ordinary launches:)\n");
				strata__cuda_pdl = 0;
				layer_time(&B, t);
				strata__cuda_pdl = 1;
				B.k->decode_q8 = 0;
				layer_time(&B, t);
				B.k->decode_q8 = 1;
			}
		}
	if (section("prefill:", chosen))
		for (uint32_t r = 0; r < nrows; r++)
			for (size_t i = 0; i < SECTION_TYPES; i++) {
				if (!listed(chosen, section_types[i]))
					continue;
				for (size_t j = 0; j < count; j++)
					if (quick || shapes[j].per_token >= 16)
						prefill_type(&B, section_types[i],
							     &shapes[j], rows[r],
							     quick ? 2048 : 14336);
			}
	strata_compute_destroy(B.c);
	strata_backend_destroy(B.b);
	return 0;
}
