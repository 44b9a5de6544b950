/* cmd_calibrate.c - `strata calibrate`: measures the host memory read rate
 * and product rate of the CPU kernels and, on each CUDA device, the pinned
 * link both ways and the GEMV and product rates, and writes them to the
 * rates file that `strata plan` reads (layer: cli). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "strata/plan.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata calibrate [options]\n\n"
		"Measures the rates strata plan predicts with and writes them to\n"
		"$XDG_CACHE_HOME/strata/rates.json (else ~/.cache/strata/rates.json):\n"
		"the host memory read rate and dense product rate of the CPU\n"
		"kernels, and for each CUDA device the pinned link both ways, its\n"
		"GEMV (weight-streaming) rate and its dense product rate; per stored\n"
		"type, on the CPU and each device, the GEMV rate (decode) and the\n"
		"dense product rate at the prefill rows, the fixed cost of a kernel,\n"
		"and a device's residual-row round trip. strata\n"
		"plan uses a rate from the file unless an option gives it\n"
		"(--h2d-bandwidth, --memory-bandwidth, --host-memory-bandwidth ...).\n\n"
		"options:\n"
		"  --bytes SIZE     weight bytes read per measure (default 256MiB)\n"
		"  --memory-bytes SIZE  the host memory read's matrix (default:\n"
		"                   past the last-level cache, at least 1GiB)\n"
		"  --repeats N      best of N timed runs (default 3)\n"
		"  --threads N      CPU threads (default: one per processor)\n"
		"  --cpu-only       skip the CUDA devices\n"
		"  --no-device-layers  skip timing a whole layer per type on each\n"
		"                   CUDA device (a decode step, a chunk of --rows):\n"
		"                   plan then takes its default fixed layer costs\n"
		"  --types LIST     stored types whose products are measured, e.g.\n"
		"                   BF16,Q8_0 (default: every type the kernels take)\n"
		"  --rows N         rows of the per-type dense product, the prefill\n"
		"                   shape (default 512)\n"
		"  --out FILE       write there instead of the cache directory\n"
		"  --json           print the file's JSON instead of a summary\n");
}

typedef struct args {
	strata_plan_calibrate_options o;
	const char *out;
	bool json;
} args;

/* --types F32,bf16,Q8_0: block type names, any case. */
static int parse_types(args *a, const char *v)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", v);
	a->o.types = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int found = -1;
		for (int t = 0; t < STRATA_BLOCK_COUNT && found < 0; t++)
			if (!strcasecmp(tok, strata_block_name((strata_block_type)t)))
				found = t;
		if (found < 0)
			return strata_cli_usage("calibrate",
						"--types: '%s' is not a stored type "
						"(F32, F16, BF16, Q8_0, Q4_0 ... Q6_K, IQ4_NL, IQ4_XS)",
						tok);
		a->o.types |= 1u << found;
	}
	if (!a->o.types)
		return strata_cli_usage("calibrate", "--types needs at least one type");
	return 0;
}

/* One option with a value; 0, -1 (help) or an exit code. */
static int take(args *a, const char *opt, const char *v)
{
	strata_error err;
	uint64_t u;
	if (!strcmp(opt, "--out")) {
		a->out = v;
		return 0;
	}
	if (!strcmp(opt, "--types"))
		return parse_types(a, v);
	if (!strcmp(opt, "--bytes") || !strcmp(opt, "--memory-bytes")) {
		if (strata_size_parse(v, opt[2] == 'b' ? &a->o.bytes
						       : &a->o.memory_bytes,
				      &err))
			return strata_cli_usage("calibrate", "%s: '%s' is not a size",
						opt, v);
		return 0;
	}
	if (strata_cli_parse_u64(opt, v, &u, &err) || u == 0 || u > 4096)
		return strata_cli_usage("calibrate", "%s: '%s' is not a count from 1 to 4096",
					opt, v);
	if (!strcmp(opt, "--repeats"))
		a->o.repeats = (uint32_t)u;
	else if (!strcmp(opt, "--rows"))
		a->o.gemm_rows = (uint32_t)u;
	else
		a->o.threads = (uint32_t)u;
	return 0;
}

static int parse(int argc, char **argv, args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			help(stdout);
			return -1;
		}
		if (!strcmp(arg, "--cpu-only")) {
			a->o.cpu_only = true;
		} else if (!strcmp(arg, "--no-device-layers")) {
			a->o.device_layers = false;
		} else if (!strcmp(arg, "--json")) {
			a->json = true;
		} else if (!strcmp(arg, "--bytes") || !strcmp(arg, "--repeats") ||
			   !strcmp(arg, "--memory-bytes") ||
			   !strcmp(arg, "--threads") || !strcmp(arg, "--out") ||
			   !strcmp(arg, "--types") || !strcmp(arg, "--rows")) {
			if (i + 1 >= argc)
				return strata_cli_usage("calibrate", "%s needs a value", arg);
			int rc = take(a, arg, argv[++i]);
			if (rc)
				return rc;
		} else {
			return strata_cli_usage("calibrate", "unknown argument '%s'", arg);
		}
	}
	return 0;
}

/* One line per measured type: GEMV GB/s (decode), dense product at the
 * prefill rows, and on the CPU a whole decode layer's GB/s. */
static void type_lines(const char *who, const strata_plan_type_rate *t,
		       const double *layer, uint32_t rows)
{
	for (int k = 0; k < STRATA_BLOCK_COUNT; k++) {
		if (!(t[k].gemv > 0))
			continue;
		printf("  %s %-6s GEMV %8.1f GB/s, %u-row product %8.1f GFLOP/s",
		       who, strata_block_name((strata_block_type)k),
		       t[k].gemv / 1e9, rows, t[k].gemm / 1e9);
		if (layer && layer[k] > 0)
			printf(", decode layer %6.1f GB/s", layer[k] / 1e9);
		if (t[k].layer_seconds > 0)
			printf(", layer fixed %.1f us + %.3f us a row",
			       t[k].layer_seconds * 1e6, t[k].row_seconds * 1e6);
		printf("\n");
	}
}

static void summary(const char *path, const strata_plan_rates *r)
{
	char m[32];
	printf("host memory read (CPU kernels, %u threads, a %s matrix): "
	       "%.2f GB/s\n", r->threads,
	       strata_size_format(r->host_memory_bytes, m, sizeof m),
	       r->host_memory / 1e9);
	printf("CPU dense product: %.1f GFLOP/s; a kernel's fixed cost %.1f us\n",
	       r->cpu_flops / 1e9, r->cpu_launch_seconds * 1e6);
	type_lines("cpu", r->cpu_types, r->cpu_layer, r->gemm_rows);
	for (uint32_t i = 0; i < r->device_count; i++) {
		const strata_plan_device_rates *d = &r->devices[i];
		printf("%s: host to device %.2f GB/s, device to host %.2f GB/s, "
		       "GEMV %.1f GB/s, dense product %.1f TFLOP/s; launch %.1f us, "
		       "residual round trip %.1f us\n",
		       d->name, d->h2d / 1e9, d->d2h / 1e9, d->memory / 1e9,
		       d->flops / 1e12, d->launch_seconds * 1e6,
		       d->crossing_seconds * 1e6);
		if (d->h2d_shared > 0)
			printf("%s: with the CPU reading host memory, host to "
			       "device %.2f GB/s and the CPU %.2f GB/s "
			       "(%.2f together)\n",
			       d->name, d->h2d_shared / 1e9,
			       d->host_memory_shared / 1e9,
			       (d->h2d_shared + d->host_memory_shared) / 1e9);
		type_lines(d->name, d->types, NULL, r->gemm_rows);
	}
	if (!r->device_count)
		printf("no CUDA device: the host's rates only\n");
	printf("written to %s (strata plan reads it)\n", path);
}

int strata_cmd_calibrate(int argc, char **argv)
{
	args a;
	memset(&a, 0, sizeof a);
	/* on the H200 a layer's fixed costs came out as the bench/gpu llama
	 * runs them (Q8_0 23-25 us + 0.41 us a row): measured by default */
	a.o.device_layers = true;
	int rc = parse(argc, argv, &a);
	if (rc)
		return rc < 0 ? STRATA_EXIT_OK : rc;
	char path[4096];
	strata_error err;
	if (a.out)
		snprintf(path, sizeof path, "%s", a.out);
	else if (strata_plan_rates_path(path, sizeof path, &err))
		return strata_cli_fail(&err);
	if (a.out && strata_file_check_output(path, &err))
		return strata_cli_fail(&err);
	strata_plan_rates r;
	if (strata_plan_calibrate(&a.o, &r, &err) ||
	    strata_plan_rates_save(path, &r, &err))
		return strata_cli_fail(&err);
	if (!a.json) {
		summary(path, &r);
		return STRATA_EXIT_OK;
	}
	char *text = NULL;
	size_t len = 0;
	if (strata_file_read_all(path, 1u << 20, &text, &len, &err))
		return strata_cli_fail(&err);
	fwrite(text, 1, len, stdout);
	strata_free(text);
	return STRATA_EXIT_OK;
}
