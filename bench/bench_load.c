/* bench_load.c - how fast `strata run` opens and loads a model against the
 * disk's own speed (issue 25), both measured in the same run:
 *   - warm (the files in the page cache): strata_session_open against a
 *     cat-like read of the same files (read() of 128 KiB, what cat does);
 *     target <= 1.5x;
 *   - cold (the files evicted from the page cache with
 *     posix_fadvise(POSIX_FADV_DONTNEED) before each run, checked with
 *     mincore): strata_session_open against reading the files with
 *     O_DIRECT in 64 MiB reads (dd iflag=direct bs=64M); target <= 1.2x.
 * Each figure is the median of --runs runs (default 3), the runs of the
 * two sides alternating. The session is opened as `strata run MODEL
 * --device cpu` opens it (--residency auto; --residency MODE to force).
 *
 *   bench_load MODEL [--runs N] [--residency MODE] [--warm-only]
 *   bench_load --quick   (the shipped 1 MB model, one run: it must work)
 *
 * A large model to measure with: tools/make_sparse_llama.py DIR --fill
 * (--dim 2048 --ffn 5632 --layers 9 --dtype F32: 1.85 GB). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/infer.h"

#define MAX_FILES 256
#define CAT_BYTES (128u << 10)
#define DIRECT_BYTES (64u << 20)
#define DIRECT_ALIGN 4096u
#define MAX_RUNS 15

typedef struct files {
	char *path[MAX_FILES];
	uint64_t size[MAX_FILES];
	size_t count;
	uint64_t bytes;
} files;

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

static double now_s(void)
{
	return (double)strata_now_ns() / 1e9;
}

static void free_files(files *f)
{
	for (size_t i = 0; i < f->count; i++)
		free(f->path[i]);
}

static void die(const char *what, const strata_error *e)
{
	fprintf(stderr, "bench_load: %s: %s\n", what, e ? e->message : "");
	exit(1);
}

/* The model's payload files, from its catalog. */
static void list_files(const char *model, files *f)
{
	strata_catalog *c = NULL;
	strata_error e;
	if (strata_catalog_open(model, &c, &e))
		die("opening the model", &e);
	memset(f, 0, sizeof *f);
	for (size_t i = 0; i < strata_catalog_file_count(c) && i < MAX_FILES;
	     i++) {
		const strata_catalog_file *cf = strata_catalog_file_at(c, i);
		f->path[i] = strdup(cf->path);
		f->size[i] = cf->size;
		f->bytes += cf->size;
		f->count++;
	}
	strata_catalog_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* The peers and the page cache                                             */
/* ------------------------------------------------------------------------ */

static double cat_read(const files *f)
{
	static char buf[CAT_BYTES];
	double t0 = now_s();
	for (size_t i = 0; i < f->count; i++) {
		int fd = open(f->path[i], O_RDONLY);
		if (fd < 0)
			die(f->path[i], NULL);
		while (read(fd, buf, sizeof buf) > 0)
			;
		close(fd);
	}
	return now_s() - t0;
}

/* dd iflag=direct bs=64M; false where the filesystem refuses O_DIRECT. */
static bool direct_read(const files *f, double *secs)
{
	void *buf = NULL;
	if (posix_memalign(&buf, DIRECT_ALIGN, DIRECT_BYTES))
		return false;
	double t0 = now_s();
	bool ok = true;
	for (size_t i = 0; ok && i < f->count; i++) {
		int fd = open(f->path[i], O_RDONLY | O_DIRECT);
		ok = fd >= 0;
		ssize_t n = 1;
		for (off_t at = 0; ok && n > 0; at += n)
			ok = (n = pread(fd, buf, DIRECT_BYTES, at)) >= 0;
		if (fd >= 0)
			close(fd);
	}
	*secs = now_s() - t0;
	free(buf);
	return ok;
}

/* Drops the files' pages from the page cache; returns the fraction still
 * resident afterwards (mincore), so a failed eviction shows. */
static double evict(const files *f)
{
	uint64_t pages = 0, resident = 0;
	long page = sysconf(_SC_PAGESIZE);
	for (size_t i = 0; i < f->count; i++) {
		int fd = open(f->path[i], O_RDONLY);
		if (fd < 0)
			die(f->path[i], NULL);
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		size_t len = (size_t)f->size[i];
		void *m = len ? mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0)
			      : MAP_FAILED;
		size_t n = (len + (size_t)page - 1) / (size_t)page;
		unsigned char *vec = m != MAP_FAILED ? malloc(n) : NULL;
		if (vec && mincore(m, len, vec) == 0)
			for (size_t k = 0; k < n; k++)
				resident += vec[k] & 1;
		pages += n;
		free(vec);
		if (m != MAP_FAILED)
			munmap(m, len);
		close(fd);
	}
	return pages ? (double)resident / (double)pages : 0;
}

/* ------------------------------------------------------------------------ */
/* strata                                                                   */
/* ------------------------------------------------------------------------ */

static double strata_open(const char *model, strata_residency_mode mode,
			  const char **mode_name)
{
	strata_session_options o = {.model_path = model, .positions = 16,
				    .prefill = 8};
	o.plan.mode = mode;
	o.plan.device = STRATA_PLAN_DEVICE_CPU;
	strata_session *s = NULL;
	strata_error e;
	double t0 = now_s();
	if (strata_session_open(&o, &s, &e))
		die("strata_session_open", &e);
	double t = now_s() - t0;
	*mode_name = strata_residency_mode_name(
		strata_plan_mode(strata_session_plan(s)));
	strata_session_close(s);
	return t;
}

static bool parse_mode(const char *v, strata_residency_mode *m)
{
	static const struct {
		const char *name;
		strata_residency_mode mode;
	} modes[] = {{"auto", STRATA_RESIDENCY_AUTO},
		     {"resident", STRATA_RESIDENCY_RESIDENT},
		     {"host", STRATA_RESIDENCY_HOST},
		     {"disk", STRATA_RESIDENCY_DISK}};
	for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
		if (!strcmp(v, modes[i].name))
			return (*m = modes[i].mode), true;
	return false;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *mode_name = "?";
	int runs = 3;
	bool quick = false, warm_only = false;
	strata_residency_mode mode = STRATA_RESIDENCY_AUTO;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--warm-only"))
			warm_only = true;
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--residency") && i + 1 < argc) {
			if (!parse_mode(argv[++i], &mode))
				die("--residency: auto, resident, host or disk",
				    NULL);
		} else
			model = argv[i];
	}
	if (quick) {
		model = model ? model : STRATA_SOURCE_DIR "/models/stories260K";
		runs = 1;
	}
	if (!model || runs < 1 || runs > MAX_RUNS) {
		fprintf(stderr, "usage: bench_load MODEL [--runs 1..%d] "
			"[--residency MODE] [--warm-only] | --quick\n",
			MAX_RUNS);
		return 2;
	}
	files f;
	list_files(model, &f);
	double gb = (double)f.bytes / 1e9;
	double cat[MAX_RUNS], st[MAX_RUNS], dio[MAX_RUNS], stc[MAX_RUNS];
	cat_read(&f); /* warm the cache */
	for (int r = 0; r < runs; r++) {
		cat[r] = cat_read(&f);
		st[r] = strata_open(model, mode, &mode_name);
	}
	double c = median(cat, runs), s = median(st, runs);
	printf("bench_load: %s, %zu file%s, %.3f GB, --residency %s\n",
	       model, f.count, f.count == 1 ? "" : "s", gb, mode_name);
	printf("  warm: strata open+load %.3f s (%.2f GB/s), cat %.3f s "
	       "(%.2f GB/s): %.2fx (target <= 1.5x)\n",
	       s, gb / s, c, gb / c, s / c);
	if (warm_only || quick) {
		free_files(&f);
		return 0;
	}
	double left = 0, d = 0;
	bool direct = true;
	for (int r = 0; r < runs && direct; r++) {
		left += evict(&f);
		direct = direct_read(&f, &dio[r]);
		left += evict(&f);
		stc[r] = strata_open(model, mode, &mode_name);
	}
	if (!direct) {
		printf("  cold: the filesystem refuses O_DIRECT; no peer\n");
		free_files(&f);
		return 0;
	}
	d = median(dio, runs);
	s = median(stc, runs);
	printf("  cold: strata open+load %.3f s (%.2f GB/s), O_DIRECT %.3f s "
	       "(%.2f GB/s): %.2fx (target <= 1.2x); %.1f%% of pages still "
	       "cached after eviction\n",
	       s, gb / s, d, gb / d, s / d, 100 * left / (2 * runs));
	free_files(&f);
	return 0;
}
