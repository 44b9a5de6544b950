/* bench_cpu_layer - where a CPU decode layer's time goes: a llama layer
 * (hidden 4096, GQA 32/8 of 128, FFN 14336 by default) of one stored type,
 * one token through the CPU kernel table's wrappers in the forward pass's
 * order, each step timed (q/k/v with the norm, rope, attention over the
 * cache, o added to the residual, gate/up with the norm and SwiGLU, down
 * added), against the memory rate (an f32 GEMV) and the type's GEMV over
 * one large matrix, measured in the same run.
 *
 *   bench_cpu_layer [--threads N] [--type BF16] [--dim 4096]
 *                   [--positions 64] [--bytes SIZE] [--repeats 5] [--quick]
 *
 * Copies of the layer fill at least --bytes (default 1 GiB), so no run
 * reads weights from cache. Each figure is the median of --repeats runs
 * after a warm-up. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "strata/backend.h"
#include "strata/backend_kernels.h"

#define HEAD_DIM 128u
#define MAX_REPEATS 64
enum { WQ, WK, WV, WO, WGATE, WUP, WDOWN, WEIGHTS };
enum { S_QKV, S_ROPE, S_ATT, S_O, S_GATED, S_DOWN, STEPS };
static const char *const step_name[STEPS] = {
	"q/k/v (norm folded)", "rope q, k", "attention", "o (+ residual)",
	"gate/up + SwiGLU", "down (+ residual)"};
/* the weights each step reads */
static const int step_weights[STEPS][3] = {
	{WQ, WK, WV}, {-1}, {-1}, {WO, -1}, {WGATE, WUP, -1}, {WDOWN, -1}};

typedef struct bench {
	strata_compute *c;
	strata_weight_type wt;
	strata_block_type bt;
	uint32_t dim, kv, ffn, heads, positions;
	uint32_t rows[WEIGHTS], cols[WEIGHTS];
	uint64_t wbytes[WEIGHTS], layer_bytes, copies;
	unsigned char *w;
	float *x, *xb, *q, *att, *hb, *hb2, *kc, *vc, *norm, *inv_freq;
} bench;

static double secs(void)
{
	return strata_now_ns() * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	return v[n / 2];
}

static float *floats(uint64_t n, float scale)
{
	float *v = strata_alloc(n * sizeof *v);
	if (!v) {
		fprintf(stderr, "bench_cpu_layer: out of memory\n");
		exit(1);
	}
	for (uint64_t i = 0; i < n; i++)
		v[i] = (float)((i * 13u) % 11u) * scale;
	return v;
}

static void setup(bench *b, uint64_t bytes)
{
	b->kv = b->dim / 4, b->ffn = b->dim / 2 * 7, b->heads = b->dim / HEAD_DIM;
	const uint32_t rows[WEIGHTS] = {b->dim, b->kv, b->kv, b->dim,
					b->ffn, b->ffn, b->dim};
	b->layer_bytes = 0;
	for (int i = 0; i < WEIGHTS; i++) {
		b->rows[i] = rows[i];
		b->cols[i] = i == WDOWN ? b->ffn : b->dim;
		b->wbytes[i] = (uint64_t)rows[i] *
			       (b->cols[i] / strata_block_elements(b->bt)) *
			       strata_block_bytes(b->bt);
		b->layer_bytes += b->wbytes[i];
	}
	b->copies = (bytes + b->layer_bytes - 1) / b->layer_bytes;
	b->w = strata_alloc_aligned(64, b->layer_bytes * b->copies);
	b->hb2 = floats(b->ffn, 1e-3f);
	if (!b->w) {
		fprintf(stderr, "bench_cpu_layer: no memory for %" PRIu64 " bytes\n",
			b->layer_bytes * b->copies);
		exit(1);
	}
	unsigned char *at = b->w;
	for (uint64_t k = 0; k < b->copies; k++)
		for (int i = 0; i < WEIGHTS; i++) {
			uint64_t rb = b->wbytes[i] / b->rows[i];
			strata_block_encode(b->bt, b->hb2, at, b->cols[i]);
			for (uint32_t r = 1; r < b->rows[i]; r++)
				memcpy(at + r * rb, at, rb);
			at += b->wbytes[i];
		}
	b->x = floats(b->dim, 1e-2f), b->xb = floats(b->ffn, 0);
	b->q = floats(b->dim, 0), b->att = floats(b->dim, 0);
	b->hb = floats(b->ffn, 0);
	b->kc = floats((uint64_t)b->positions * b->kv, 1e-2f);
	b->vc = floats((uint64_t)b->positions * b->kv, 1e-2f);
	b->norm = floats(b->dim, 0.1f);
	b->inv_freq = floats(HEAD_DIM / 2, 0);
	for (uint32_t i = 0; i < HEAD_DIM / 2; i++)
		b->inv_freq[i] = powf(10000.0f, -2.0f * (float)i / HEAD_DIM);
}

/* One step s of copy k; the layer's calls as forward.c makes them. */
static strata_status run_step(const bench *b, uint64_t k, int s,
			      strata_error *err)
{
	strata_weight m[WEIGHTS];
	const unsigned char *w = b->w + k * b->layer_bytes;
	for (int i = 0; i < WEIGHTS; i++, w += b->wbytes[i - 1])
		m[i] = (strata_weight){b->wt, w, b->rows[i], b->cols[i]};
	const uint32_t pos = b->positions - 1, kvh = b->heads / 4;
	float *kr = b->kc + (uint64_t)pos * b->kv, *vr = b->vc + (uint64_t)pos * b->kv;
	const strata_kernel_norm norm = {strata_weight_f32(b->norm, 1, b->dim),
					 1e-5f};
	const strata_attention_shape shape = {
		.n = 1, .pos0 = pos, .heads = b->heads, .kv_heads = kvh,
		.head_dim = HEAD_DIM, .scale = 1.0f / sqrtf((float)HEAD_DIM)};
	const strata_kernel_product qkv[] = {
		{b->q, m[WQ], NULL}, {kr, m[WK], NULL}, {vr, m[WV], NULL}};
	const strata_kernel_product o = {b->x, m[WO], NULL};
	const strata_kernel_product down = {b->x, m[WDOWN], NULL};
	switch (s) {
	case S_QKV:
		return strata_kernel_products(b->c, b->x, &norm, b->xb, 1, qkv,
					      3, false, NULL, err);
	case S_ROPE:
		return strata_kernel_rope_qk(b->c, b->q, kr, 1, pos, b->heads,
					     kvh, HEAD_DIM, b->inv_freq,
					     STRATA_ROPE_HALF, err);
	case S_ATT:
		return strata_kernel_attention(b->c, b->att, b->q, b->kc, b->vc,
					       &shape, err);
	case S_O:
		return strata_kernel_products(b->c, b->att, NULL, NULL, 1, &o, 1,
					      true, b->xb, err);
	case S_GATED:
		return strata_kernel_gated(b->c, b->hb, b->x, &norm, b->xb,
					   &m[WGATE], &m[WUP], b->hb2, 1, err);
	default:
		return strata_kernel_products(b->c, b->hb, NULL, NULL, 1, &down,
					      1, true, b->hb2, err);
	}
}

/* One GEMV over `bytes` of type t (rows of dim), median of repeats. */
static double gemv_rate(const bench *b, strata_weight_type t, const void *at,
			uint64_t bytes, int repeats)
{
	strata_block_type bt = strata_weight_type_block(t);
	uint64_t rb = (uint64_t)b->dim / strata_block_elements(bt) *
		      strata_block_bytes(bt);
	strata_weight w = {t, at, (uint32_t)(bytes / rb), b->dim};
	float *y = floats(w.rows, 0);
	double v[MAX_REPEATS];
	strata_error err;
	for (int r = -1; r < repeats; r++) {
		double t0 = secs();
		if (strata_kernel_matmul(b->c, y, b->x, &w, NULL, 1, &err)) {
			fprintf(stderr, "bench_cpu_layer: %s\n", err.message);
			exit(1);
		}
		if (r >= 0)
			v[r] = secs() - t0;
	}
	strata_free(y);
	return (double)w.rows * rb / median(v, repeats);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_cpu_layer [--threads N] [--type BF16] "
			"[--dim 4096] [--positions 64] [--bytes SIZE] "
			"[--repeats 5] [--quick]\n");
	exit(2);
}

static bool parse_type(const char *s, bench *b)
{
	for (int t = 0; t < STRATA_WEIGHT_TYPE_COUNT; t++) {
		strata_block_type bt = strata_weight_type_block((strata_weight_type)t);
		if (!strcasecmp(s, strata_block_name(bt))) {
			b->wt = (strata_weight_type)t;
			b->bt = bt;
			return true;
		}
	}
	return false;
}

/* Per step and whole layer, medians over repeats of every copy once. */
static void time_layer(const bench *b, int repeats, double step_s[STEPS],
		       double *layer_s)
{
	static double v[STEPS][MAX_REPEATS], whole[MAX_REPEATS];
	strata_error err;
	for (int r = -1; r < repeats; r++) {
		double acc[STEPS] = {0};
		double t0 = secs();
		for (uint64_t k = 0; k < b->copies; k++)
			for (int s = 0; s < STEPS; s++) {
				double a = secs();
				if (run_step(b, k, s, &err)) {
					fprintf(stderr, "bench_cpu_layer: %s\n",
						err.message);
					exit(1);
				}
				acc[s] += secs() - a;
			}
		if (r < 0)
			continue;
		whole[r] = (secs() - t0) / b->copies;
		for (int s = 0; s < STEPS; s++)
			v[s][r] = acc[s] / b->copies;
	}
	for (int s = 0; s < STEPS; s++)
		step_s[s] = median(v[s], repeats);
	*layer_s = median(whole, repeats);
}

int main(int argc, char **argv)
{
	bench b = {.dim = 4096, .positions = 64};
	uint32_t threads = 0;
	uint64_t bytes = (uint64_t)1 << 30;
	int repeats = 5;
	parse_type("BF16", &b);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		strata_error err;
		if (!strcmp(a, "--quick")) {
			b.dim = 512, threads = 1, repeats = 2;
			bytes = 8u << 20;
		} else if (!strcmp(a, "--threads") && v) {
			threads = (uint32_t)atoi(argv[++i]);
		} else if (!strcmp(a, "--type") && v && parse_type(v, &b)) {
			i++;
		} else if (!strcmp(a, "--dim") && v && atoi(v) >= 256 &&
			   atoi(v) % 256 == 0) {
			b.dim = (uint32_t)atoi(argv[++i]);
		} else if (!strcmp(a, "--positions") && v && atoi(v) > 0) {
			b.positions = (uint32_t)atoi(argv[++i]);
		} else if (!strcmp(a, "--bytes") && v &&
			   strata_size_parse(v, &bytes, &err) == STRATA_OK) {
			i++;
		} else if (!strcmp(a, "--repeats") && v && atoi(v) > 0 &&
			   atoi(v) <= MAX_REPEATS) {
			repeats = atoi(argv[++i]);
		} else {
			usage();
		}
	}
	strata_error err;
	if (strata_compute_create(&strata_cpu_kernel_ops, threads, &b.c, &err)) {
		fprintf(stderr, "bench_cpu_layer: %s\n", err.message);
		return 1;
	}
	setup(&b, bytes);
	uint64_t all = b.layer_bytes * b.copies;
	uint64_t gb = all < ((uint64_t)256 << 20) ? all : (uint64_t)256 << 20;
	/* The memory rate's GEMV on f32 weights of their own: the layer's
	 * blocks read as f32 hold denormals and NaNs, whose arithmetic is
	 * slow on x86, which put this figure anywhere from 11 to 78 GB/s on
	 * the H200 host (16 threads) where calibrate measured 101. */
	float *f32 = floats(gb / 4, 1e-3f);
	double mem = gemv_rate(&b, STRATA_WEIGHT_F32, f32, gb, repeats);
	strata_free(f32);
	double gemv = gemv_rate(&b, b.wt, b.w, gb, repeats);
	double step_s[STEPS], layer_s;
	time_layer(&b, repeats, step_s, &layer_s);
	const char *tn = strata_block_name(b.bt);
	printf("%u threads, %s decode layer: hidden %u, %u/%u heads of %u, FFN %u, "
	       "%u positions; %" PRIu64 " copies of %.1f MB\n",
	       strata_compute_threads(b.c), tn, b.dim, b.heads, b.heads / 4,
	       HEAD_DIM, b.ffn, b.positions, b.copies, b.layer_bytes / 1e6);
	printf("memory rate (f32 GEMV, %.0f MB): %.1f GB/s; %s GEMV %.1f GB/s "
	       "(%.2f of memory)\n", gb / 1e6, mem / 1e9, tn, gemv / 1e9,
	       gemv / mem);
	printf("whole layer: %.1f us, %.1f GB/s of weights (%.2f of memory, "
	       "%.2f of the %s GEMV)\n", layer_s * 1e6,
	       b.layer_bytes / layer_s / 1e9, b.layer_bytes / layer_s / mem,
	       b.layer_bytes / layer_s / gemv, tn);
	double sum = 0;
	for (int s = 0; s < STEPS; s++) {
		uint64_t wb = 0;
		for (int k = 0; k < 3 && step_weights[s][k] >= 0; k++)
			wb += b.wbytes[step_weights[s][k]];
		sum += step_s[s];
		printf("  %-22s %9.1f us", step_name[s], step_s[s] * 1e6);
		if (wb)
			printf("  %7.1f GB/s (%.2f of memory)", wb / step_s[s] / 1e9,
			       wb / step_s[s] / mem);
		printf("\n");
	}
	printf("  steps sum to %.1f us; at the %s GEMV's rate the weights "
	       "would take %.1f us\n", sum * 1e6, tn,
	       b.layer_bytes / gemv * 1e6);
	printf("json {\"threads\": %u, \"type\": \"%s\", \"memory_gbs\": %.3f, "
	       "\"gemv_gbs\": %.3f, \"layer_us\": %.3f, \"layer_gbs\": %.3f}\n",
	       strata_compute_threads(b.c), tn, mem / 1e9, gemv / 1e9,
	       layer_s * 1e6, b.layer_bytes / layer_s / 1e9);
	float *bufs[] = {b.x, b.xb, b.q, b.att, b.hb, b.hb2, b.kc, b.vc,
			 b.norm, b.inv_freq};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		strata_free(bufs[i]);
	strata_free(b.w);
	strata_compute_destroy(b.c);
	return 0;
}
