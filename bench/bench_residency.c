/* bench_residency.c - the residency engine's window against a serial peer
 * measured in the same run (bench).
 *
 * A synthetic model (U units of S bytes of f32, written as a real
 * safetensors file in a temporary folder) is run pass after pass: each unit
 * is acquired, "computed" (a fixed number of sweeps summing its floats,
 * standing in for a layer's matmuls), and released. The peer does the same
 * work without the engine: copy the unit from host memory (or read it from
 * the file) into one device buffer, then compute, strictly one after the
 * other. The ratio shows how much of the copy time the engine's background
 * copy thread and reader hide behind compute. Figures printed: seconds per
 * pass of both, their ratio, stall time, and the copy rate the engine's
 * telemetry measured against plain memcpy in the same process.
 *
 *   bench_residency [--quick] [--cuda] [--units U] [--unit-mib S]
 *                   [--passes P] [--sweeps K]
 *
 * --cuda runs the host:2 window on the CUDA backend instead, against
 * synchronous pinned copies of the same units.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/residency.h"

typedef struct bench {
	uint32_t units, passes, sweeps;
	uint64_t unit_bytes;
	char dir[64], path[96];
	strata_catalog *catalog;
	strata_weight_store *store;
	strata_residency_tensor *rt;
	strata_residency_unit *cu;
} bench;

static volatile float sink;

/* Stand-in for a layer's compute: `sweeps` passes over the unit's floats. */
static void compute(const float *w, uint64_t n, uint32_t sweeps)
{
	float acc = 0;
	for (uint32_t s = 0; s < sweeps; s++)
		for (uint64_t i = 0; i < n; i++)
			acc += w[i] * 0.5f;
	sink = acc;
}

static int write_model(bench *b)
{
	snprintf(b->dir, sizeof b->dir, "/tmp/strata-bench-XXXXXX");
	if (!mkdtemp(b->dir))
		return -1;
	snprintf(b->path, sizeof b->path, "%s/model.safetensors", b->dir);
	char hdr[8192];
	size_t len = (size_t)snprintf(hdr, sizeof hdr, "{");
	for (uint32_t u = 0; u < b->units; u++)
		len += (size_t)snprintf(hdr + len, sizeof hdr - len,
					"%s\"model.layers.%u.w\":{\"dtype\":\"F32\",\"shape\":[%" PRIu64
					"],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
					u ? "," : "", u, b->unit_bytes / 4,
					u * b->unit_bytes, (u + 1) * b->unit_bytes);
	len += (size_t)snprintf(hdr + len, sizeof hdr - len, "}");
	while (len % 8)
		hdr[len++] = ' ';
	FILE *f = fopen(b->path, "wb");
	if (!f)
		return -1;
	uint64_t l = len;
	fwrite(&l, 8, 1, f);
	fwrite(hdr, 1, len, f);
	float *buf = malloc(b->unit_bytes);
	if (!buf)
		return -1;
	for (uint64_t i = 0; i < b->unit_bytes / 4; i++)
		buf[i] = (float)(i % 97);
	for (uint32_t u = 0; u < b->units; u++)
		fwrite(buf, 1, b->unit_bytes, f);
	free(buf);
	return fclose(f);
}

static strata_residency_config config(bench *b, strata_residency_mode mode)
{
	static const char *groups[] = {"model"};
	/* the plan's sizes for equal units, by hand: a window of two, every
	 * unit in host memory (host) or two lookahead slots (disk) */
	uint64_t unit = (b->unit_bytes + STRATA_ALIGN - 1) / STRATA_ALIGN * STRATA_ALIGN;
	strata_residency_sizes z = {
		.depth = 2, .window_bytes = 2 * b->unit_bytes,
		.window_device_bytes = 2 * unit,
		.host_bytes = mode == STRATA_RESIDENCY_HOST ? b->units * unit : 2 * unit};
	return (strata_residency_config){
		.mode = mode, .sizes = z,
		.lookahead_units = 2, .queue_depth = 1,
		.group_count = 1, .groups = groups,
		.unit_count = b->units, .units = b->cu,
		.read = strata_residency_read_store, .read_user = b->store};
}

/* Seconds per pass through the engine; fills the snapshot. */
static double run_engine(bench *b, strata_backend *be, strata_residency_mode mode,
			 strata_telemetry_snapshot *snap)
{
	strata_residency_config c = config(b, mode);
	strata_residency *e = NULL;
	strata_error err;
	if (strata_residency_create(be, &c, &e, &err) != STRATA_OK) {
		strata_error_print(stderr, &err);
		exit(1);
	}
	uint64_t t0 = strata_now_ns();
	for (uint32_t p = 0; p < b->passes; p++)
		for (uint32_t u = 0; u < b->units; u++) {
			strata_residency_view v;
			if (strata_residency_acquire(e, 0, u, &v, &err) != STRATA_OK) {
				strata_error_print(stderr, &err);
				exit(1);
			}
			compute(v.data[0], b->unit_bytes / 4, b->sweeps);
			strata_residency_release(e, 0, u, &err);
		}
	double sec = (double)(strata_now_ns() - t0) / 1e9 / b->passes;
	strata_residency_quiesce(e, &err);
	strata_telemetry_get(strata_residency_telemetry(e), snap);
	strata_residency_destroy(e);
	return sec;
}

/* The serial peer: copy (host mode) or read (disk mode), then compute. */
static double run_serial(bench *b, bool from_disk, double *copy_gbs)
{
	size_t n = b->unit_bytes;
	float *host = malloc(n * b->units), *dev = malloc(n);
	int fd = open(b->path, O_RDONLY);
	if (!host || !dev || fd < 0)
		exit(1);
	const strata_tensor *t0 = strata_catalog_tensor(b->catalog, 0);
	for (uint32_t u = 0; u < b->units; u++)
		if (pread(fd, (char *)host + u * n, n, (off_t)(t0->offset + u * n)) != (ssize_t)n)
			exit(1);
	uint64_t copy_ns = 0, start = strata_now_ns();
	for (uint32_t p = 0; p < b->passes; p++)
		for (uint32_t u = 0; u < b->units; u++) {
			uint64_t c0 = strata_now_ns();
			if (from_disk) {
				if (pread(fd, dev, n, (off_t)(t0->offset + u * n)) != (ssize_t)n)
					exit(1);
			} else {
				memcpy(dev, (char *)host + u * n, n);
			}
			copy_ns += strata_now_ns() - c0;
			compute(dev, n / 4, b->sweeps);
		}
	double sec = (double)(strata_now_ns() - start) / 1e9 / b->passes;
	*copy_gbs = (double)n * b->units * b->passes / ((double)copy_ns / 1e9) / 1e9;
	close(fd);
	free(host);
	free(dev);
	return sec;
}

/* The CUDA peer: every unit in pinned host memory, copied to one device
 * block with a synchronous copy per unit (queue, then wait). GB/s. */
static double cuda_serial(bench *b, strata_backend *be)
{
	strata_error err;
	uint64_t n = b->unit_bytes;
	void *host = NULL, *dev = NULL;
	strata_stream *s = NULL;
	strata_arena *a = NULL;
	if (strata_backend_host_alloc(be, n * b->units, true, &host, &err) != STRATA_OK ||
	    strata_arena_create(be, STRATA_ARENA_DEVICE, n, "peer", &a, &err) != STRATA_OK ||
	    strata_arena_alloc(a, n, &dev, &err) != STRATA_OK ||
	    strata_stream_create(be, &s, &err) != STRATA_OK) {
		strata_error_print(stderr, &err);
		exit(1);
	}
	memset(host, 1, n * b->units);
	uint64_t t0 = strata_now_ns();
	for (uint32_t p = 0; p < b->passes; p++)
		for (uint32_t u = 0; u < b->units; u++) {
			strata_backend_copy_h2d_async(be, s, dev, (char *)host + u * n, n, &err);
			strata_backend_synchronize(be, s, &err);
		}
	double sec = (double)(strata_now_ns() - t0) / 1e9;
	strata_stream_destroy(be, s);
	strata_arena_destroy(a);
	strata_backend_host_free(be, host);
	return (double)n * b->units * b->passes / sec / 1e9;
}

/* On CUDA the window's copies are the whole work (no compute touches the
 * device here): pass time gives the engine's delivered rate. */
static void run_cuda(bench *b)
{
	strata_backend *be = NULL;
	strata_error err;
	if (strata_backend_create("cuda", 0, NULL, &be, &err) != STRATA_OK) {
		strata_error_print(stderr, &err);
		exit(1);
	}
	uint32_t sweeps = b->sweeps;
	b->sweeps = 0;
	double peer = cuda_serial(b, be);
	strata_residency_config c = config(b, STRATA_RESIDENCY_HOST);
	strata_residency *e = NULL;
	if (strata_residency_create(be, &c, &e, &err) != STRATA_OK) {
		strata_error_print(stderr, &err);
		exit(1);
	}
	uint64_t t0 = strata_now_ns();
	for (uint32_t p = 0; p < b->passes; p++)
		for (uint32_t u = 0; u < b->units; u++) {
			strata_residency_view v;
			if (strata_residency_acquire(e, 0, u, &v, &err) != STRATA_OK ||
			    strata_residency_release(e, 0, u, &err) != STRATA_OK) {
				strata_error_print(stderr, &err);
				exit(1);
			}
		}
	double sec = (double)(strata_now_ns() - t0) / 1e9;
	strata_telemetry_snapshot s;
	strata_residency_quiesce(e, &err);
	strata_telemetry_get(strata_residency_telemetry(e), &s);
	const strata_transfer_stats *x = &s.transfers[STRATA_DIR_HOST_TO_DEVICE];
	double delivered = (double)b->unit_bytes * b->units * b->passes / sec / 1e9;
	printf("cuda host:2 window delivers %.2f GB/s (copies alone %.2f GB/s by "
	       "events) vs synchronous pinned copies %.2f GB/s: %.2fx\n",
	       delivered, (double)x->bytes / ((double)x->ns / 1e9) / 1e9, peer,
	       delivered / peer);
	strata_residency_destroy(e);
	strata_backend_destroy(be);
	b->sweeps = sweeps;
}

static void report(const char *name, double engine, double serial,
		   const strata_telemetry_snapshot *s, strata_direction d,
		   double peer_gbs, uint32_t passes)
{
	const strata_transfer_stats *x = &s->transfers[d];
	double gbs = x->ns ? (double)x->bytes / ((double)x->ns / 1e9) / 1e9 : 0;
	printf("%-10s engine %.4f s/pass, serial peer %.4f s/pass: %.2fx; "
	       "stalls %" PRIu64 " (%.4f s/pass); %s %.2f GB/s vs peer %.2f GB/s\n",
	       name, engine, serial, serial / engine, s->stalls,
	       (double)s->stall_ns / 1e9 / passes, strata_direction_name(d), gbs,
	       peer_gbs);
}

int main(int argc, char **argv)
{
	bench b = {.units = 12, .passes = 5, .sweeps = 3, .unit_bytes = 16u << 20};
	bool cuda = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--cuda")) {
			cuda = true;
		} else if (!strcmp(argv[i], "--quick")) {
			b.units = 4;
			b.passes = 2;
			b.unit_bytes = 1u << 20;
		} else if (i + 1 < argc && !strcmp(argv[i], "--units")) {
			b.units = (uint32_t)atoi(argv[++i]);
		} else if (i + 1 < argc && !strcmp(argv[i], "--unit-mib")) {
			b.unit_bytes = (uint64_t)atoi(argv[++i]) << 20;
		} else if (i + 1 < argc && !strcmp(argv[i], "--passes")) {
			b.passes = (uint32_t)atoi(argv[++i]);
		} else if (i + 1 < argc && !strcmp(argv[i], "--sweeps")) {
			b.sweeps = (uint32_t)atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: bench_residency [--quick] [--cuda] [--units U] "
					"[--unit-mib S] [--passes P] [--sweeps K]\n");
			return 2;
		}
	}
	if (b.units < 2 || b.units > 100 || !b.passes || !b.unit_bytes)
		return 2;
	strata_error err;
	if (write_model(&b) != 0 ||
	    strata_catalog_open(b.path, &b.catalog, &err) != STRATA_OK ||
	    strata_weight_store_create(b.catalog, NULL, &b.store, &err) != STRATA_OK) {
		fprintf(stderr, "bench_residency: cannot set up the model\n");
		return 1;
	}
	b.rt = calloc(b.units, sizeof *b.rt);
	b.cu = calloc(b.units, sizeof *b.cu);
	for (uint32_t u = 0; u < b.units; u++) {
		b.rt[u].tensor = strata_catalog_tensor(b.catalog, u);
		b.cu[u] = (strata_residency_unit){.group = 0, .unit = u,
						  .tensor_count = 1, .tensors = &b.rt[u]};
	}
	if (cuda) {
		printf("%u units of %.1f MiB, %u passes\n", b.units,
		       (double)b.unit_bytes / (1 << 20), b.passes);
		run_cuda(&b);
		return 0;
	}
	strata_backend *be = NULL;
	if (strata_backend_cpu_create(NULL, &be, &err) != STRATA_OK)
		return 1;
	printf("%u units of %.1f MiB, %u passes, %u compute sweeps per unit\n",
	       b.units, (double)b.unit_bytes / (1 << 20), b.passes, b.sweeps);
	strata_telemetry_snapshot s;
	double peer_gbs;
	double serial = run_serial(&b, false, &peer_gbs);
	double engine = run_engine(&b, be, STRATA_RESIDENCY_HOST, &s);
	report("host:2", engine, serial, &s, STRATA_DIR_HOST_TO_DEVICE, peer_gbs, b.passes);
	serial = run_serial(&b, true, &peer_gbs);
	engine = run_engine(&b, be, STRATA_RESIDENCY_DISK, &s);
	report("disk", engine, serial, &s, STRATA_DIR_DISK_TO_HOST, peer_gbs, b.passes);
	strata_backend_destroy(be);
	strata_weight_store_destroy(b.store);
	strata_catalog_destroy(b.catalog);
	free(b.rt);
	free(b.cu);
	unlink(b.path);
	rmdir(b.dir);
	return 0;
}
