/* bench_load.c - how fast `strata run` opens and loads a model against the
 * disk's own speed (issue 25), both measured in the same run, one row per
 * model given (f32, bf16, f16 safetensors, a GGUF Q8_0, ...):
 *   - warm (the files in the page cache): strata_session_open against a
 *     cat-like read of the same files (read() of 128 KiB, what cat does);
 *     target <= 1.5x;
 *   - cold (the files evicted from the page cache with
 *     posix_fadvise(POSIX_FADV_DONTNEED) on each file before each run, no
 *     root needed; mincore says what stayed cached): strata_session_open
 *     against reading the files with O_DIRECT in 64 MiB reads into one
 *     reused buffer (dd iflag=direct bs=64M); target <= 1.2x. A second
 *     cold peer reads with O_DIRECT into fresh memory the size of the
 *     files, keeping every byte as a loader must: on a machine where the
 *     first touch of a page is dear (a VM whose host backs guest memory
 *     lazily), it pays what strata pays and dd does not.
 * Each cold run waits --settle seconds (default 3) after the eviction,
 * so freed pages go back to a VM's host as before a real cold start.
 * Each model ends with one `row:` line: strata's, cat's and O_DIRECT's
 * times of the same run and each ratio against its target, met or not.
 * Each figure is the median of --runs runs (default 3), the runs of the
 * two sides alternating. The session is opened as `strata run MODEL
 * --device cpu` opens it (--residency auto; --residency MODE to force).
 *
 *   bench_load MODEL... [--runs N] [--residency MODE] [--warm-only]
 *              [--device cpu|cuda]   (cuda: resident on the GPU, each
 *              tensor's copy overlapping the next one's read)
 *   bench_load --quick   (the shipped 1 MB model, one run: it must work)
 *
 * Models to measure with: tools/make_sparse_llama.py DIR --fill --dim 2048
 * --ffn 5632 --layers 9 --dtype F32 (2.15 GB; --layers 18 --dtype BF16 or
 * F16: 1.89 GB), and `strata quantize DIR q8.gguf --type Q8_0`. */
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

static strata_plan_device device = STRATA_PLAN_DEVICE_CPU;
static double context_s; /* subtracted from each open (--device cuda) */

static double strata_open(const char *model, strata_residency_mode mode,
			  const char **mode_name)
{
	strata_session_options o = {.model_path = model, .positions = 16,
				    .prefill = 8};
	o.plan.mode = mode;
	o.plan.device = device;
	strata_session *s = NULL;
	strata_error e;
	double t0 = now_s();
	if (strata_session_open(&o, &s, &e))
		die("strata_session_open", &e);
	double t = now_s() - t0 - context_s;
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

/* O_DIRECT into fresh memory the size of the files: the bytes kept. */
static bool direct_read_fresh(const files *f, double *secs)
{
	uint64_t total = 0;
	for (size_t i = 0; i < f->count; i++)
		total += (f->size[i] + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
	unsigned char *m = total ? mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
				 : MAP_FAILED;
	if (m == MAP_FAILED)
		return false;
	double t0 = now_s();
	bool ok = true;
	unsigned char *at = m;
	for (size_t i = 0; ok && i < f->count; i++) {
		int fd = open(f->path[i], O_RDONLY | O_DIRECT);
		ok = fd >= 0;
		uint64_t len = (f->size[i] + DIRECT_ALIGN - 1) / DIRECT_ALIGN *
			       DIRECT_ALIGN;
		for (uint64_t o = 0; ok && o < len; o += DIRECT_BYTES) {
			size_t n = len - o < DIRECT_BYTES ? (size_t)(len - o)
							  : DIRECT_BYTES;
			ok = pread(fd, at + o, n, (off_t)o) >= 0;
		}
		at += len;
		if (fd >= 0)
			close(fd);
	}
	*secs = now_s() - t0;
	munmap(m, (size_t)total);
	return ok;
}

/* The type holding most of the model's bytes ("BF16", "Q8_0"). */
static const char *main_type(const char *model)
{
	static char name[32];
	strata_catalog *c = NULL;
	strata_error e;
	if (strata_catalog_open(model, &c, &e))
		die("opening the model", &e);
	uint64_t bytes[256] = {0};
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		bytes[(unsigned)t->dtype & 255] += t->bytes;
	}
	unsigned best = 0;
	for (unsigned k = 1; k < 256; k++)
		if (bytes[k] > bytes[best])
			best = k;
	const strata_dtype_info *d = strata_dtype_get((strata_dtype)best);
	snprintf(name, sizeof name, "%s %s",
		 strata_catalog_format(c) == STRATA_FORMAT_GGUF ? "gguf"
								 : "safetensors",
		 d ? d->name : "?");
	strata_catalog_destroy(c);
	return name;
}

typedef struct options {
	int runs;
	bool warm_only;
	strata_residency_mode mode;
	unsigned settle_s; /* after each eviction, before the cold run */
} options;

static const char *verdict(double ratio, double target)
{
	return ratio <= target ? "met" : "not met";
}

/* Evicts the files, then waits settle_s: on a VM with free page reporting
 * (virtio-balloon, reported after 2 s) the pages just freed are handed back
 * to the host meanwhile, as they are before any real cold start; without
 * the wait a run reuses the pages the run before freed and skips the
 * first-touch cost a cold start pays (docs/infer.md). */
static double evict_settled(const files *f, const options *o)
{
	double left = evict(f);
	if (o->settle_s)
		sleep(o->settle_s);
	return left;
}

/* One row: the model's warm and cold figures against its peers. */
static void bench_model(const char *model, const options *o)
{
	const char *mode_name = "?";
	int runs = o->runs;
	files f;
	list_files(model, &f);
	double gb = (double)f.bytes / 1e9;
	double cat[MAX_RUNS], st[MAX_RUNS], dio[MAX_RUNS], stc[MAX_RUNS];
	double fresh[MAX_RUNS];
	cat_read(&f); /* warm the cache */
	for (int r = 0; r < runs; r++) {
		cat[r] = cat_read(&f);
		st[r] = strata_open(model, o->mode, &mode_name);
	}
	double c = median(cat, runs), s = median(st, runs);
	const char *type = main_type(model);
	printf("%s (%s), %zu file%s, %.3f GB, --residency %s\n", model, type,
	       f.count, f.count == 1 ? "" : "s", gb, mode_name);
	printf("  warm: strata open+load %.3f s (%.2f GB/s), cat %.3f s "
	       "(%.2f GB/s): %.2fx (target <= 1.5x: %s)\n",
	       s, gb / s, c, gb / c, s / c, verdict(s / c, 1.5));
	if (o->warm_only) {
		printf("  row: %s %.2f GB | warm strata %.3f s, cat %.3f s, "
		       "%.2fx of cat (<= 1.5x: %s)\n",
		       type, gb, s, c, s / c, verdict(s / c, 1.5));
		free_files(&f);
		return;
	}
	double warm = s;
	double left = 0;
	bool direct = true;
	for (int r = 0; r < runs && direct; r++) {
		left += evict_settled(&f, o);
		direct = direct_read(&f, &dio[r]);
		left += evict_settled(&f, o);
		direct = direct && direct_read_fresh(&f, &fresh[r]);
		left += evict_settled(&f, o);
		stc[r] = strata_open(model, o->mode, &mode_name);
	}
	if (!direct) {
		printf("  cold: the filesystem refuses O_DIRECT; no peer\n");
		free_files(&f);
		return;
	}
	double d = median(dio, runs), fr = median(fresh, runs);
	s = median(stc, runs);
	printf("  cold: strata open+load %.3f s (%.2f GB/s), O_DIRECT %.3f s "
	       "(%.2f GB/s): %.2fx (target <= 1.2x: %s); O_DIRECT into fresh "
	       "memory %.3f s: %.2fx (%s); %.1f%% of pages still cached after "
	       "eviction\n",
	       s, gb / s, d, gb / d, s / d, verdict(s / d, 1.2), fr, s / fr,
	       verdict(s / fr, 1.2), 100 * left / (3 * runs));
	printf("  row: %s %.2f GB | warm strata %.3f s, cat %.3f s, %.2fx of "
	       "cat (<= 1.5x: %s) | cold strata %.3f s, O_DIRECT %.3f s, "
	       "%.2fx of O_DIRECT (<= 1.2x: %s); into fresh memory %.3f s, "
	       "%.2fx (%s)\n",
	       type, gb, warm, c, warm / c, verdict(warm / c, 1.5), s, d,
	       s / d, verdict(s / d, 1.2), fr, s / fr, verdict(s / fr, 1.2));
	free_files(&f);
}

int main(int argc, char **argv)
{
	const char *models[MAX_FILES];
	int n = 0;
	bool quick = false;
	options o = {.runs = 3, .mode = STRATA_RESIDENCY_AUTO, .settle_s = 3};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--warm-only"))
			o.warm_only = true;
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			o.runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--settle") && i + 1 < argc)
			o.settle_s = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--residency") && i + 1 < argc) {
			if (!parse_mode(argv[++i], &o.mode))
				die("--residency: auto, resident, host or disk",
				    NULL);
		} else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
			const char *v = argv[++i];
			if (strcmp(v, "cpu") && strcmp(v, "cuda"))
				die("--device: cpu or cuda", NULL);
			device = strcmp(v, "cuda") ? STRATA_PLAN_DEVICE_CPU
						   : STRATA_PLAN_DEVICE_CUDA;
		} else if (n < MAX_FILES)
			models[n++] = argv[i];
	}
	if (quick) {
		if (!n)
			models[n++] = STRATA_SOURCE_DIR "/models/stories260K";
		o.runs = 1;
		o.warm_only = true;
	}
	if (!n || o.runs < 1 || o.runs > MAX_RUNS) {
		fprintf(stderr, "usage: bench_load MODEL... [--runs 1..%d] "
			"[--residency MODE] [--device cpu|cuda] [--warm-only] "
			"[--settle SECONDS] | --quick\n",
			MAX_RUNS);
		return 2;
	}
	if (!o.warm_only)
		printf("bench_load: cold runs evict with posix_fadvise(DONTNEED) "
		       "per file (no root needed), checked with mincore, then "
		       "wait %u s (--settle)\n", o.settle_s);
	if (device == STRATA_PLAN_DEVICE_CUDA) {
		/* the CUDA context and a 1 MB model's open: what every CUDA
		 * open pays before the first weight byte moves */
		const char *ignored;
		(void)strata_open(STRATA_SOURCE_DIR "/models/stories260K",
				  STRATA_RESIDENCY_RESIDENT, &ignored);
		context_s = strata_open(STRATA_SOURCE_DIR "/models/stories260K",
					STRATA_RESIDENCY_RESIDENT, &ignored);
		printf("bench_load: --device cuda; a 1 MB model opens in %.3f s "
		       "(context, plan, tokenizer): the rows show strata's time "
		       "less that\n", context_s);
	}
	for (int i = 0; i < n; i++)
		bench_model(models[i], &o);
	return 0;
}
