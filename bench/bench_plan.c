/* bench_plan.c - how long `strata plan` takes on a sharded checkpoint:
 * 1000 tensors in 30 safetensors shards (real files written to a temporary
 * folder), catalog open + topology + sizing + planner, median of many runs,
 * against the 20 ms target and against a peer measured in the same run:
 * reading every shard in full, what sizing from the payload would cost.
 * It also proves planning read no payload: every pread is counted through
 * the base syscall table and must stay inside the shards' headers and the
 * index, and the weight store's diagnostics must show zero reads. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/checkpoint.h"
#include "strata/plan.h"

#define SHARDS 30
#define TENSORS 1000
#define TARGET_MS 20.0

/* ------------------------------------------------------------------------ */
/* Counting reads                                                           */
/* ------------------------------------------------------------------------ */

static uint64_t read_bytes;

static ssize_t counting_pread(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);
	if (r > 0)
		read_bytes += (uint64_t)r;
	return r;
}

/* ------------------------------------------------------------------------ */
/* The checkpoint                                                           */
/* ------------------------------------------------------------------------ */

/* Tensor i: 8 static tensors, then 32 layers of up to 31 tensors. */
static void tensor_name(int i, char *buf, size_t cap, uint64_t *rows,
			uint64_t *cols)
{
	static const char *const statics[] = {
		"model.embed_tokens.weight", "model.norm.weight",
		"lm_head.weight", "model.rotary.inv_freq",
		"model.extra.a", "model.extra.b", "model.extra.c",
		"model.extra.d"};
	if (i < 8) {
		snprintf(buf, cap, "%s", statics[i]);
		*rows = 512;
		*cols = 256;
		return;
	}
	int k = i - 8;
	snprintf(buf, cap, "model.layers.%d.block.w%d.weight", k / 31, k % 31);
	*rows = 256;
	*cols = 256;
}

static int write_file(const char *path, const char *data, size_t len,
		      uint64_t pad_to)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	int ok = write(fd, data, len) == (ssize_t)len &&
		 (pad_to == 0 || ftruncate(fd, (off_t)pad_to) == 0);
	close(fd);
	return ok ? 0 : -1;
}

/* Writes 30 shards (payload as sparse zero bytes) and the index; returns
 * the total file bytes, or 0 on failure. */
static uint64_t write_checkpoint(const char *dir, uint64_t *header_bytes)
{
	size_t cap = 1 << 20;
	char *index = malloc(cap), *hdr = malloc(cap);
	size_t il = (size_t)snprintf(index, cap,
				     "{\"metadata\": {}, \"weight_map\": {");
	uint64_t total = 0;
	*header_bytes = 0;
	for (int s = 0; s < SHARDS; s++) {
		int first = s * TENSORS / SHARDS, end = (s + 1) * TENSORS / SHARDS;
		size_t hl = (size_t)snprintf(hdr, cap, "{");
		uint64_t off = 0;
		char file[64];
		snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors",
			 s + 1, SHARDS);
		for (int i = first; i < end; i++) {
			char name[96];
			uint64_t r, c;
			tensor_name(i, name, sizeof name, &r, &c);
			uint64_t b = r * c * 2;
			hl += (size_t)snprintf(hdr + hl, cap - hl,
				"%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%llu,%llu],\"data_offsets\":[%llu,%llu]}",
				i > first ? "," : "", name,
				(unsigned long long)r, (unsigned long long)c,
				(unsigned long long)off,
				(unsigned long long)(off + b));
			il += (size_t)snprintf(index + il, cap - il,
					       "%s\"%s\":\"%s\"",
					       i ? "," : "", name, file);
			off += b;
		}
		hl += (size_t)snprintf(hdr + hl, cap - hl, "}");
		while (hl % 8) /* the header length stays 8-aligned */
			hdr[hl++] = ' ';
		char *blob = malloc(8 + hl);
		uint64_t n = hl;
		for (int k = 0; k < 8; k++)
			blob[k] = (char)(n >> (8 * k));
		memcpy(blob + 8, hdr, hl);
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, file);
		int bad = write_file(path, blob, 8 + hl, 8 + hl + off);
		free(blob);
		if (bad)
			return 0;
		*header_bytes += 8 + hl;
		total += 8 + hl + off;
	}
	il += (size_t)snprintf(index + il, cap - il, "}}");
	char path[4096];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	if (write_file(path, index, il, 0))
		return 0;
	*header_bytes += il;
	free(index);
	free(hdr);
	return total;
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                   */
/* ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* One plan from nothing: open, classify, size, plan. Returns ms or -1. */
static double plan_once(const char *dir, uint64_t *payload_reads)
{
	uint64_t t0 = strata_now_ns();
	strata_catalog *c = NULL;
	strata_plan_source *src = NULL;
	strata_plan *p = NULL;
	strata_weight_store *ws = NULL;
	strata_error err;
	strata_plan_arch arch = {0};
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CUDA,
				 .has_device_budget = true,
				 .device_budget_bytes = 16ull << 20,
				 .has_host_budget = true,
				 .host_budget_bytes = 1ull << 30};
	strata_plan_machine m = {0};
	double ms = -1;
	if (strata_catalog_open(dir, &c, &err) ||
	    strata_plan_source_create(c, o.device, NULL, 0, &src, &err) ||
	    strata_plan_create(strata_plan_source_layout(src), &arch,
			       strata_plan_source_weight_dtype(src), &o, &m, &p,
			       &err)) {
		fprintf(stderr, "bench_plan: %s\n", err.message);
		goto done;
	}
	ms = (double)(strata_now_ns() - t0) / 1e6;
	if (strata_weight_store_create(c, NULL, &ws, &err) == STRATA_OK) {
		strata_weight_store_stats st;
		strata_weight_store_get_stats(ws, &st);
		*payload_reads += st.physical_read_bytes;
	}
done:
	strata_weight_store_destroy(ws);
	strata_plan_destroy(p);
	strata_plan_source_destroy(src);
	strata_catalog_destroy(c);
	return ms;
}

/* The peer: read every shard in full, as sizing from payload would. */
static double read_all_once(const char *dir)
{
	static char buf[1 << 20];
	uint64_t t0 = strata_now_ns();
	for (int s = 0; s < SHARDS; s++) {
		char path[4096];
		snprintf(path, sizeof path,
			 "%s/model-%05d-of-%05d.safetensors", dir, s + 1,
			 SHARDS);
		int fd = open(path, O_RDONLY);
		if (fd < 0)
			return -1;
		while (read(fd, buf, sizeof buf) > 0)
			;
		close(fd);
	}
	return (double)(strata_now_ns() - t0) / 1e6;
}

int main(int argc, char **argv)
{
	int runs = argc > 1 && !strcmp(argv[1], "--quick") ? 5 : 101;
	char dir[] = "/tmp/strata-bench-plan-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("bench_plan: mkdtemp");
		return 1;
	}
	uint64_t headers;
	uint64_t total = write_checkpoint(dir, &headers);
	if (!total) {
		fprintf(stderr, "bench_plan: cannot write the checkpoint\n");
		return 1;
	}
	double *t = calloc((size_t)runs, sizeof *t);
	double *peer = calloc((size_t)runs, sizeof *peer);
	uint64_t store_reads = 0;
	strata_sys.pread = counting_pread;
	int rc = 0;
	for (int i = 0; i < runs; i++) {
		read_bytes = 0;
		t[i] = plan_once(dir, &store_reads);
		if (t[i] < 0 || read_bytes > headers) {
			fprintf(stderr,
				"bench_plan: run %d read %llu bytes, more than the %llu header bytes\n",
				i, (unsigned long long)read_bytes,
				(unsigned long long)headers);
			rc = 1;
			break;
		}
		peer[i] = read_all_once(dir);
	}
	strata_sys_reset();
	if (rc == 0) {
		qsort(t, (size_t)runs, sizeof *t, cmp_double);
		qsort(peer, (size_t)runs, sizeof *peer, cmp_double);
		double med = t[runs / 2], pmed = peer[runs / 2];
		printf("bench_plan: %d tensors in %d safetensors shards (%.1f MiB, headers %.1f KiB)\n",
		       TENSORS, SHARDS, (double)total / 1048576.0,
		       (double)headers / 1024.0);
		printf("  open + plan, median of %d: %.3f ms (target %.0f ms: %s)\n",
		       runs, med, TARGET_MS, med <= TARGET_MS ? "met" : "MISSED");
		printf("  peer, reading every shard in full: %.3f ms (plan is %.1fx faster)\n",
		       pmed, pmed / med);
		printf("  payload bytes read while planning: %llu (weight store), reads stayed within the %llu header bytes\n",
		       (unsigned long long)store_reads,
		       (unsigned long long)headers);
		if (store_reads != 0)
			rc = 1;
	}
	for (int s = 0; s < SHARDS; s++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors",
			 dir, s + 1, SHARDS);
		unlink(path);
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	unlink(path);
	rmdir(dir);
	free(t);
	free(peer);
	return rc;
}
