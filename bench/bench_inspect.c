/* bench_inspect.c - how long opening a sharded checkpoint takes: 1000
 * tensors in 30 safetensors shards plus an index (real files in a temporary
 * folder), strata_catalog_open (every validation included), median of many
 * runs, against the 20 ms target and two peers measured in the same run:
 *   - "bare headers": the same header and index bytes read with stdio and
 *     parsed by jansson with no checks and no catalog (the least any
 *     reader must do);
 *   - "full read": reading every shard in full, what a reader that touched
 *     the payload would pay at least.
 * It also proves opening reads no payload: every pread is counted through
 * the base syscall table and must equal the shards' headers plus the index,
 * and a weight store over the catalog must report zero physical reads.
 * Last, a real GGUF file with a 32000-token vocabulary: open time against
 * reading its header with stdio and walking it with no checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "strata/checkpoint.h"

#define SHARDS 30
#define TENSORS 1000
#define TARGET_MS 20.0
#define ROWS 64
#define COLS 128 /* BF16: 16 KiB per tensor, 16 MB in all */

static uint64_t read_bytes;

static ssize_t counting_pread(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);
	if (r > 0)
		read_bytes += (uint64_t)r;
	return r;
}

static double now_ms(void)
{
	return (double)strata_now_ns() / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[n / 2];
}

/* ------------------------------------------------------------------------ */
/* The checkpoint                                                           */
/* ------------------------------------------------------------------------ */

static void shard_name(int s, char *buf, size_t cap)
{
	snprintf(buf, cap, "model-%05d-of-%05d.safetensors", s + 1, SHARDS);
}

/* Tensor i goes to shard i * SHARDS / TENSORS, named like a llama layer. */
static void tensor_name(int i, char *buf, size_t cap)
{
	static const char *const parts[] = {
		"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
		"self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
		"mlp.down_proj", "input_layernorm", "post_attention_layernorm",
		"self_attn.q_norm"};
	snprintf(buf, cap, "model.layers.%d.%s.weight", i / 10, parts[i % 10]);
}

static uint64_t write_checkpoint(const char *dir, uint64_t *header_bytes)
{
	const size_t tensor_bytes = ROWS * COLS * 2;
	char *zeros = calloc(1, tensor_bytes), path[600], name[128];
	json_t *map = json_object();
	uint64_t total = 0;
	*header_bytes = 0;
	for (int s = 0; s < SHARDS; s++) {
		json_t *hdr = json_object();
		int first = s * TENSORS / SHARDS, end = (s + 1) * TENSORS / SHARDS;
		for (int i = first; i < end; i++) {
			uint64_t off = (uint64_t)(i - first) * tensor_bytes;
			tensor_name(i, name, sizeof name);
			json_object_set_new(hdr, name, json_pack("{s:s,s:[i,i],s:[I,I]}",
				"dtype", "BF16", "shape", ROWS, COLS, "data_offsets",
				(json_int_t)off, (json_int_t)(off + tensor_bytes)));
			shard_name(s, path, sizeof path);
			json_object_set_new(map, name, json_string(path));
		}
		char *text = json_dumps(hdr, JSON_COMPACT);
		uint64_t n = strlen(text);
		shard_name(s, name, sizeof name);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		FILE *f = fopen(path, "wb");
		unsigned char len8[8];
		for (int k = 0; k < 8; k++)
			len8[k] = (unsigned char)(n >> (8 * k));
		fwrite(len8, 1, 8, f);
		fwrite(text, 1, n, f);
		for (int i = first; i < end; i++)
			fwrite(zeros, 1, tensor_bytes, f);
		fclose(f);
		*header_bytes += 8 + n;
		total += 8 + n + (uint64_t)(end - first) * tensor_bytes;
		free(text);
		json_decref(hdr);
	}
	json_t *index = json_pack("{s:{s:I},s:o}", "metadata", "total_size",
				  (json_int_t)(TENSORS * tensor_bytes),
				  "weight_map", map);
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	json_dump_file(index, path, JSON_COMPACT);
	json_decref(index);
	struct stat st;
	stat(path, &st);
	*header_bytes += (uint64_t)st.st_size;
	free(zeros);
	return total;
}

/* ------------------------------------------------------------------------ */
/* Peers                                                                    */
/* ------------------------------------------------------------------------ */

/* The bare minimum: read each header and the index with stdio, parse them
 * with jansson, drop them: the same bytes strata reads, with no checks. */
static int bare_headers(const char *dir)
{
	char path[600], name[128];
	int tensors = 0;
	for (int s = 0; s < SHARDS; s++) {
		shard_name(s, name, sizeof name);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		FILE *f = fopen(path, "rb");
		unsigned char len8[8];
		if (!f || fread(len8, 1, 8, f) != 8)
			exit(1);
		uint64_t n = 0;
		for (int k = 7; k >= 0; k--)
			n = n << 8 | len8[k];
		char *text = malloc(n);
		if (fread(text, 1, n, f) != n)
			exit(1);
		json_error_t je;
		json_t *h = json_loadb(text, n, 0, &je);
		tensors += (int)json_object_size(h);
		json_decref(h);
		free(text);
		fclose(f);
	}
	/* and the index, as any reader of a sharded checkpoint must */
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	json_error_t je;
	json_t *index = json_load_file(path, 0, &je);
	if (!index || json_object_size(json_object_get(index, "weight_map")) !=
			      (size_t)tensors)
		exit(1);
	json_decref(index);
	return tensors;
}

static uint64_t full_read(const char *dir)
{
	char path[600], name[128];
	static char buf[1 << 20];
	uint64_t total = 0;
	for (int s = 0; s < SHARDS; s++) {
		shard_name(s, name, sizeof name);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		FILE *f = fopen(path, "rb");
		size_t n;
		while ((n = fread(buf, 1, sizeof buf, f)) > 0)
			total += n;
		fclose(f);
	}
	return total;
}

/* ------------------------------------------------------------------------ */
/* GGUF: a real file with a 32000-token vocabulary in its header            */
/* ------------------------------------------------------------------------ */

#define GGUF_FILE STRATA_SOURCE_DIR "/tests/data/gguf/llama-2-tiny-random.gguf"

/* The peer's walk: skips every value of a trusted header in memory, with
 * no checks, no copies and no allocation - the least a GGUF parser does. */
static const unsigned char *skip_value(const unsigned char *p, uint32_t t)
{
	static const int size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
	uint64_t n;
	if (t == 8) { /* string */
		memcpy(&n, p, 8);
		return p + 8 + n;
	}
	if (t != 9)
		return p + size[t];
	uint32_t et;
	memcpy(&et, p, 4);
	memcpy(&n, p + 4, 8);
	p += 12;
	if (et != 8 && et != 9)
		return p + n * (uint64_t)size[et];
	for (uint64_t i = 0; i < n; i++)
		p = skip_value(p, et);
	return p;
}

static uint64_t naive_walk(const unsigned char *p)
{
	uint64_t nt, nkv, n;
	memcpy(&nt, p + 8, 8);
	memcpy(&nkv, p + 16, 8);
	p += 24;
	for (uint64_t i = 0; i < nkv; i++) {
		uint32_t t;
		memcpy(&n, p, 8);
		memcpy(&t, p + 8 + n, 4);
		p = skip_value(p + 12 + n, t);
	}
	for (uint64_t i = 0; i < nt; i++) {
		uint32_t nd;
		memcpy(&n, p, 8);
		memcpy(&nd, p + 8 + n, 4);
		p += 8 + n + 4 + 8 * (uint64_t)nd + 4 + 8;
	}
	return nt;
}

/* Median open time of the real GGUF file, and of the peer: reading the
 * same header bytes with stdio and walking them naively (naive_walk). */
static int bench_gguf(int runs)
{
	double t_open[64], t_peer[64];
	uint64_t header = 0;
	static char buf[1 << 20];
	for (int r = 0; r < runs; r++) {
		strata_catalog *c = NULL;
		strata_error e;
		double t0 = now_ms();
		if (strata_catalog_open(GGUF_FILE, &c, &e)) {
			fprintf(stderr, "bench_inspect: %s\n", e.message);
			return 1;
		}
		t_open[r] = now_ms() - t0;
		header = strata_catalog_file_at(c, 0)->data_offset;
		strata_catalog_destroy(c);
		t0 = now_ms();
		FILE *f = fopen(GGUF_FILE, "rb");
		if (!f || header > sizeof buf || fread(buf, 1, header, f) != header)
			return 1;
		fclose(f);
		if (naive_walk((const unsigned char *)buf) != 12)
			return 1;
		t_peer[r] = now_ms() - t0;
	}
	double open = median(t_open, runs), peer = median(t_peer, runs);
	printf("  GGUF %s (%llu-byte header, 32000-token vocab): open median %.3f ms;\n"
	       "    peer, stdio read + naive unchecked walk of the same header: %.3f ms; strata/peer %.2fx\n",
	       "llama-2-tiny-random.gguf", (unsigned long long)header, open,
	       peer, open / peer);
	return 0;
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	int runs = quick ? 5 : 51;
	char dir[] = "/tmp/strata-bench-inspect-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	uint64_t headers, total = write_checkpoint(dir, &headers);
	double t_open[64], t_bare[64], t_full[8];
	int status = 0;
	for (int r = 0; r < runs; r++) {
		strata_catalog *c = NULL;
		strata_error e;
		read_bytes = 0;
		strata_sys.pread = counting_pread;
		double t0 = now_ms();
		strata_status s = strata_catalog_open(dir, &c, &e);
		t_open[r] = now_ms() - t0;
		strata_sys_reset();
		if (s || strata_catalog_count(c) != TENSORS || read_bytes != headers) {
			fprintf(stderr, "bench_inspect: open failed or read payload: %s (read %llu of %llu header bytes)\n",
				s ? e.message : "", (unsigned long long)read_bytes,
				(unsigned long long)headers);
			status = 1;
		}
		strata_weight_store *ws = NULL;
		strata_weight_store_stats st;
		if (!s && !strata_weight_store_create(c, NULL, &ws, &e)) {
			strata_weight_store_get_stats(ws, &st);
			if (st.physical_reads || st.touched_count)
				status = 1;
		}
		strata_weight_store_destroy(ws);
		strata_catalog_destroy(c);
		t0 = now_ms();
		if (bare_headers(dir) != TENSORS)
			status = 1;
		t_bare[r] = now_ms() - t0;
	}
	int full_runs = quick ? 1 : 5;
	for (int r = 0; r < full_runs; r++) {
		double t0 = now_ms();
		if (full_read(dir) != total)
			status = 1;
		t_full[r] = now_ms() - t0;
	}
	double open = median(t_open, runs), bare = median(t_bare, runs);
	double full = median(t_full, full_runs);
	printf("bench_inspect: %d shards, %d tensors, %llu header bytes, %llu bytes in all\n",
	       SHARDS, TENSORS, (unsigned long long)headers,
	       (unsigned long long)total);
	printf("  strata_catalog_open (validated catalog): median %.3f ms of %d runs; target %.0f ms: %s\n",
	       open, runs, TARGET_MS, open <= TARGET_MS ? "met" : "MISSED");
	printf("  peer, bare headers + index (stdio + jansson, no checks): median %.3f ms; strata/peer %.2fx\n",
	       bare, open / bare);
	printf("  peer, full read of every shard (page cache warm): median %.3f ms; peer/strata %.2fx\n",
	       full, full / open);
	printf("  payload bytes read while opening: %llu (pread bytes %llu = headers + index)\n",
	       (unsigned long long)(read_bytes - headers),
	       (unsigned long long)read_bytes);
	if (bench_gguf(runs))
		status = 1;
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		status = 1;
	return status ? 1 : (open <= TARGET_MS || quick ? 0 : 1);
}
