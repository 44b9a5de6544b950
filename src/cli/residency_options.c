/* residency_options.c - the residency options plan, run and logits share:
 * mode, budgets, disk lookahead and queue, token shape, the KV cache's
 * type, excludes, device and link bandwidths (layer: cli). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"

static const char residency_help[] =
	"  --residency MODE      auto (default), resident, host, host:DEPTH or disk\n"
	"  --device cpu|cuda[:N] where the model runs (default: cuda if visible, else cpu)\n"
	"  --device-memory SIZE  device budget (default: free memory minus headroom);\n"
	"                        SIZE,SIZE,... plans a layer split over that many\n"
	"                        devices, each with its own budget\n"
	"  --host-memory SIZE    host budget (default: MemAvailable minus headroom)\n"
	"  --lookahead N         disk: units read ahead into host memory\n"
	"  --queue N             disk: background reads in flight (<= lookahead)\n"
	"  --context N           tokens of context the KV cache holds (default:\n"
	"                        the trained context, at most 4096, or more when\n"
	"                        run's prompt and -n need it; logits and batch:\n"
	"                        the positions their input needs)\n"
	"  --batch N             sequences decoded together (default 1)\n"
	"  --prefill-chunk N     prompt tokens per forward pass (default 512, at\n"
	"                        most the context; logits and batch: the longest\n"
	"                        prompt, at most 512)\n"
	"  --kv-type f32|f16|bf16 the KV cache's elements (default f32, exact;\n"
	"                        f16 and bf16 take half the bytes)\n"
	"  --exclude GLOB        tensors held in independent storage (repeatable)\n"
	"  --h2d-bandwidth SIZE  host-to-device bytes per second (default 55GB)\n"
	"  --disk-bandwidth SIZE disk bytes per second (default 1.1GB)\n"
	"  --memory-bandwidth SIZE device memory bytes per second\n"
	"  --host-memory-bandwidth SIZE the CPU's host memory read rate per second\n"
	"                        (rates not given come from `strata calibrate`'s\n"
	"                        file, else defaults the plan names)\n"
	"  --resident-units N    exactly N units resident on the device(s)\n"
	"  --cpu-units N         exactly N units computed on the CPU from host memory\n"
	"  --n-cpu-moe N         the routed experts of the first N layers computed\n"
	"                        on the CPU from host memory (mixture of experts)\n"
	"  --expert-cache N      with --n-cpu-moe: N of those experts cached on the\n"
	"                        device, the most routed (default 0)\n"
	"  --expert-stream-rows N with --n-cpu-moe: a missed expert given N rows\n"
	"                        or more in a pass is copied to the device and\n"
	"                        computed there (default: the plan's, cuda only)\n"
	"  --expert-hit-rate R   with --expert-cache: the share of decode's routed\n"
	"                        calls the cache hits, to predict with (a run's:\n"
	"                        telemetry hits / routed; default: routing taken\n"
	"                        as uniform, slots / every expert)\n"
	"  --expert-admit-rate R with --expert-cache: the share of decode's misses\n"
	"                        the cache admits (a run's: telemetry admissions /\n"
	"                        misses; default 0, rare in a long run)\n"
	"  --precision fast|exact the numerics (default fast: as llama.cpp and\n"
	"                        transformers compute, x quantized to 8 bits on\n"
	"                        quantized weights, CUDA prefill in bf16; exact:\n"
	"                        f32 activations everywhere, slower)\n"
	"  --no-mmap             read resident CPU weights into memory instead of\n"
	"                        mapping them from the checkpoint's files\n"
	"  --quiet               no progress bar, summary or warnings on stderr\n"
	"                        (errors still print)\n";

/* The option names strata_cli_residency_print_help can leave out. */
static const struct {
	unsigned flag;
	const char *name;
} omittable[] = {
	{STRATA_CLI_HELP_NO_BATCH, "--batch"},
	{STRATA_CLI_HELP_NO_LOAD, "--precision"},
	{STRATA_CLI_HELP_NO_LOAD, "--no-mmap"},
	{STRATA_CLI_HELP_NO_LOAD, "--quiet"},
};

/* Does the help entry starting at `line` ("  --name ...") name an option
 * that omit leaves out? */
static bool omitted(const char *line, unsigned omit)
{
	for (size_t k = 0; k < sizeof omittable / sizeof *omittable; k++) {
		size_t n = strlen(omittable[k].name);
		if ((omit & omittable[k].flag) &&
		    !strncmp(line + 2, omittable[k].name, n) &&
		    line[2 + n] == ' ')
			return true;
	}
	return false;
}

void strata_cli_residency_print_help(FILE *f, unsigned omit)
{
	bool skipping = false;
	for (const char *line = residency_help; *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
		/* an entry is its "  --name" line and the deeper-indented
		 * lines that continue it */
		if (!strncmp(line, "  -", 3))
			skipping = omitted(line, omit);
		if (!skipping)
			fwrite(line, 1, len, f);
		line += len;
	}
}

typedef enum opt_kind {
	OPT_RESIDENCY, OPT_DEVICE, OPT_DEVICE_MEMORY, OPT_HOST_MEMORY,
	OPT_LOOKAHEAD, OPT_QUEUE, OPT_CONTEXT, OPT_BATCH, OPT_CHUNK,
	OPT_EXCLUDE, OPT_H2D, OPT_DISK, OPT_MEMBW, OPT_HOSTBW,
	OPT_RESIDENT_UNITS, OPT_CPU_UNITS, OPT_CPU_MOE, OPT_EXPERT_CACHE,
	OPT_EXPERT_STREAM, OPT_EXPERT_HIT, OPT_EXPERT_ADMIT, OPT_KV_TYPE,
} opt_kind;

static const struct {
	const char *name;
	opt_kind kind;
} options[] = {
	{"--residency", OPT_RESIDENCY},
	{"--device", OPT_DEVICE},
	{"--device-memory", OPT_DEVICE_MEMORY},
	{"--host-memory", OPT_HOST_MEMORY},
	{"--lookahead", OPT_LOOKAHEAD},
	{"--queue", OPT_QUEUE},
	{"--context", OPT_CONTEXT},
	{"--batch", OPT_BATCH},
	{"--prefill-chunk", OPT_CHUNK},
	{"--exclude", OPT_EXCLUDE},
	{"--h2d-bandwidth", OPT_H2D},
	{"--disk-bandwidth", OPT_DISK},
	{"--memory-bandwidth", OPT_MEMBW},
	{"--host-memory-bandwidth", OPT_HOSTBW},
	{"--resident-units", OPT_RESIDENT_UNITS},
	{"--cpu-units", OPT_CPU_UNITS},
	{"--n-cpu-moe", OPT_CPU_MOE},
	{"--expert-cache", OPT_EXPERT_CACHE},
	{"--expert-stream-rows", OPT_EXPERT_STREAM},
	{"--expert-hit-rate", OPT_EXPERT_HIT},
	{"--expert-admit-rate", OPT_EXPERT_ADMIT},
	{"--kv-type", OPT_KV_TYPE},
};

void strata_cli_residency_init(strata_cli_residency *r)
{
	memset(r, 0, sizeof *r);
	r->plan.mode = STRATA_RESIDENCY_AUTO;
	r->plan.device = STRATA_PLAN_DEVICE_CPU;
}

void strata_cli_residency_fini(strata_cli_residency *r)
{
	strata_free(r->exclude);
	r->exclude = NULL;
	r->exclude_count = 0;
}

static int usage_error(strata_error *err, const char *fix, const char *opt,
		       const char *value, const char *what)
{
	char shown[64];
	strata_escape(shown, sizeof shown, value, strlen(value));
	strata_fail(err, STRATA_E_USAGE, fix, "%s: '%s' is not %s", opt, shown,
		    what);
	return -1;
}

static int parse_mode(strata_cli_residency *r, const char *v,
		      strata_error *err)
{
	static const strata_residency_mode modes[] = {
		STRATA_RESIDENCY_AUTO, STRATA_RESIDENCY_RESIDENT,
		STRATA_RESIDENCY_HOST, STRATA_RESIDENCY_DISK};
	for (size_t i = 0; i < 4; i++)
		if (!strcmp(v, strata_residency_mode_name(modes[i]))) {
			r->plan.mode = modes[i];
			r->plan.host_depth = 0;
			return 1;
		}
	uint64_t depth;
	if (!strncmp(v, "host:", 5) &&
	    strata_cli_parse_u64("--residency", v + 5, &depth, err) ==
		    STRATA_OK &&
	    depth > 0) {
		r->plan.mode = STRATA_RESIDENCY_HOST;
		r->plan.host_depth = depth;
		return 1;
	}
	return usage_error(err, "use auto, resident, host, host:DEPTH (DEPTH >= 1) or disk",
			   "--residency", v, "a residency mode");
}

static int parse_device(strata_cli_residency *r, const char *v,
			strata_error *err)
{
	uint64_t index = 0;
	if (!strcmp(v, "cpu")) {
		r->plan.device = STRATA_PLAN_DEVICE_CPU;
	} else if (!strcmp(v, "cuda") ||
		   (!strncmp(v, "cuda:", 5) &&
		    strata_cli_parse_u64("--device", v + 5, &index, err) ==
			    STRATA_OK &&
		    index < 1024)) {
		r->plan.device = STRATA_PLAN_DEVICE_CUDA;
	} else {
		return usage_error(err, "use cpu, cuda or cuda:N", "--device",
				   v, "a device");
	}
	r->device_given = true;
	r->device_index = (unsigned)index;
	return 1;
}

/* SIZE or SIZE/s, above zero. */
static int parse_bandwidth(const char *opt, const char *v, double *out,
			   strata_error *err)
{
	char buf[64];
	size_t n = strlen(v);
	if (n >= 2 && !strcmp(v + n - 2, "/s"))
		n -= 2;
	uint64_t bytes;
	if (n == 0 || n >= sizeof buf)
		return usage_error(err, "give bytes per second, e.g. 55GB or 55GB/s",
				   opt, v, "a bandwidth");
	memcpy(buf, v, n);
	buf[n] = '\0';
	if (strata_size_parse(buf, &bytes, err) != STRATA_OK || bytes == 0)
		return usage_error(err, "give bytes per second above 0, e.g. 55GB or 55GB/s",
				   opt, v, "a bandwidth");
	*out = (double)bytes;
	return 1;
}

/* A share from 0 to 1, e.g. 0.81 (a measured hit rate). */
static int parse_share(const char *opt, const char *v, double *out,
		       strata_error *err)
{
	char *end = NULL;
	double d = strtod(v, &end);
	if (end == v || *end || !(d >= 0.0 && d <= 1.0))
		return usage_error(err, "give a share from 0 to 1, e.g. 0.81",
				   opt, v, "a share");
	*out = d;
	return 1;
}

static int parse_size(const char *opt, const char *v, bool *has,
		      uint64_t *out, strata_error *err)
{
	if (strata_size_parse(v, out, err) != STRATA_OK)
		return usage_error(err, "give bytes or a size like 24GiB", opt,
				   v, "a size");
	*has = true;
	return 1;
}

/* SIZE, or SIZE,SIZE,... for a layer split: one budget per device. */
static int parse_device_memory(strata_plan_options *o, const char *v,
			       strata_error *err)
{
	uint64_t sizes[STRATA_PLAN_MAX_DEVICES];
	uint32_t n = 0;
	const char *at = v;
	for (;;) {
		const char *comma = strchr(at, ',');
		size_t len = comma ? (size_t)(comma - at) : strlen(at);
		char buf[64];
		if (n == STRATA_PLAN_MAX_DEVICES || len == 0 ||
		    len >= sizeof buf)
			return usage_error(err, "give SIZE, or SIZE,SIZE,... for at most 8 devices",
					   "--device-memory", v, "a size list");
		memcpy(buf, at, len);
		buf[len] = '\0';
		if (strata_size_parse(buf, &sizes[n++], err) != STRATA_OK)
			return usage_error(err, "give bytes or a size like 24GiB",
					   "--device-memory", v, "a size");
		if (!comma)
			break;
		at = comma + 1;
	}
	o->has_device_budget = true;
	o->device_budget_bytes = sizes[0];
	o->device_count = n > 1 ? n : 0;
	memset(o->device_budgets, 0, sizeof o->device_budgets);
	for (uint32_t i = 0; n > 1 && i < n; i++)
		o->device_budgets[i] = sizes[i];
	return 1;
}

/* f32, f16 or bf16 (any case); q8_0 is named and refused: a block type
 * would need its own attention kernels, which strata does not have. */
static int parse_kv_type(strata_plan_options *o, const char *v,
			 strata_error *err)
{
	static const strata_weight_type types[] = {
		STRATA_WEIGHT_F32, STRATA_WEIGHT_F16, STRATA_WEIGHT_BF16};
	for (size_t i = 0; i < sizeof types / sizeof *types; i++)
		if (!strcasecmp(v, strata_weight_type_name(types[i]))) {
			o->shape.kv_type = types[i];
			return 1;
		}
	if (!strcasecmp(v, "q8_0")) {
		strata_fail(err, STRATA_E_USAGE,
			    "use --kv-type f16 or bf16 (half of f32's bytes)",
			    "--kv-type q8_0: a quantized KV cache is not "
			    "supported");
		return -1;
	}
	return usage_error(err, "use f32 (the default), f16 or bf16",
			   "--kv-type", v, "a KV cache type");
}

static int parse_count(const char *opt, const char *v, bool positive,
		       uint64_t *out, strata_error *err)
{
	if (strata_cli_parse_u64(opt, v, out, err) != STRATA_OK)
		return -1;
	if (positive && *out == 0)
		return usage_error(err, "give a number of at least 1", opt, v,
				   "at least 1");
	return 1;
}

static int apply(strata_cli_residency *r, opt_kind k, const char *opt,
		 const char *v, strata_error *err)
{
	strata_plan_options *o = &r->plan;
	switch (k) {
	case OPT_RESIDENCY: return parse_mode(r, v, err);
	case OPT_DEVICE: return parse_device(r, v, err);
	case OPT_DEVICE_MEMORY:
		return parse_device_memory(o, v, err);
	case OPT_HOST_MEMORY:
		return parse_size(opt, v, &o->has_host_budget, &o->host_budget_bytes,
				  err);
	case OPT_LOOKAHEAD:
		o->has_lookahead = true;
		return parse_count(opt, v, false, &o->lookahead, err);
	case OPT_QUEUE:
		o->has_queue = true;
		return parse_count(opt, v, false, &o->queue, err);
	case OPT_CONTEXT:
		/* positions are 32-bit: a larger --context is out of range like
		 * any other option value (usage, exit 2) */
		if (parse_count(opt, v, true, &o->shape.context, err) < 0)
			return -1;
		if (o->shape.context > UINT32_MAX)
			return usage_error(err, "give a context below 2^32", opt,
					   v, "at most 4294967295");
		return 1;
	case OPT_BATCH: return parse_count(opt, v, true, &o->shape.batch, err);
	case OPT_CHUNK:
		return parse_count(opt, v, true, &o->shape.prefill_chunk, err);
	case OPT_EXCLUDE: {
		size_t cap = r->exclude_count;
		if (strata_grow((void **)&r->exclude, &cap,
				r->exclude_count + 1, sizeof *r->exclude,
				"exclude list", err) != STRATA_OK)
			return -1;
		r->exclude[r->exclude_count++] = v;
		return 1;
	}
	case OPT_H2D: return parse_bandwidth(opt, v, &o->h2d_bandwidth, err);
	case OPT_DISK: return parse_bandwidth(opt, v, &o->disk_bandwidth, err);
	case OPT_MEMBW:
		return parse_bandwidth(opt, v, &o->memory_bandwidth, err);
	case OPT_HOSTBW:
		return parse_bandwidth(opt, v, &o->host_memory_bandwidth, err);
	case OPT_RESIDENT_UNITS:
		o->has_resident_units = true;
		return parse_count(opt, v, false, &o->resident_units, err);
	case OPT_CPU_UNITS:
		o->has_cpu_units = true;
		return parse_count(opt, v, false, &o->cpu_units, err);
	case OPT_CPU_MOE:
		return parse_count(opt, v, false, &o->experts.layers, err);
	case OPT_EXPERT_CACHE:
		return parse_count(opt, v, false, &o->experts.cache_slots, err);
	case OPT_EXPERT_STREAM:
		return parse_count(opt, v, true, &o->experts.stream_rows, err);
	case OPT_EXPERT_HIT:
		return parse_share(opt, v, &o->experts.hit_rate, err);
	case OPT_EXPERT_ADMIT:
		return parse_share(opt, v, &o->experts.admit_rate, err);
	case OPT_KV_TYPE: return parse_kv_type(o, v, err);
	}
	return 0;
}

/* --precision fast|exact (or --precision=...), the numerics of every
 * compute context the command's session makes. */
static int parse_precision(strata_cli_residency *r, int argc, char **argv,
			   int *i, strata_error *err)
{
	const char *v = strchr(argv[*i], '=');
	if (v) {
		v++;
	} else if (*i + 1 < argc) {
		v = argv[++*i];
	} else {
		strata_fail(err, STRATA_E_USAGE, "give it fast or exact",
			    "--precision needs a value");
		return -1;
	}
	if (strata_precision_parse(v, &r->precision, err) != STRATA_OK)
		return usage_error(err, "use fast (the default) or exact",
				   "--precision", v, "fast or exact");
	return 1;
}

int strata_cli_residency_option(strata_cli_residency *r, int argc,
				char **argv, int *i, strata_error *err)
{
	const char *arg = argv[*i];
	/* the flags of the commands that load a model (strata_cli_model_args) */
	if (r->loads && !strcmp(arg, "--no-mmap"))
		return r->no_map = true, 1;
	if (r->loads && !strcmp(arg, "--quiet"))
		return r->quiet = true, 1;
	if (r->loads && (!strcmp(arg, "--precision") ||
			 !strncmp(arg, "--precision=", 12)))
		return parse_precision(r, argc, argv, i, err);
	for (size_t k = 0; k < sizeof options / sizeof *options; k++) {
		size_t n = strlen(options[k].name);
		if (strncmp(arg, options[k].name, n) != 0 ||
		    (arg[n] != '\0' && arg[n] != '='))
			continue;
		const char *v;
		if (arg[n] == '=') {
			v = arg + n + 1;
		} else if (*i + 1 < argc) {
			v = argv[++*i];
		} else {
			strata_fail(err, STRATA_E_USAGE,
				    "give the option a value",
				    "%s needs a value", options[k].name);
			return -1;
		}
		return apply(r, options[k].kind, options[k].name, v, err);
	}
	return 0;
}

int strata_cli_model_args(const char *cmd, int argc, char **argv,
			  strata_cli_residency *r, void (*help)(FILE *),
			  strata_cli_option_fn option, void *ctx,
			  const char **model)
{
	strata_error err;
	r->loads = true;
	for (int i = 1; i < argc; i++) {
		int used = strata_cli_residency_option(r, argc, argv, &i, &err);
		if (used < 0)
			return strata_cli_fail(&err);
		if (used)
			continue;
		const char *arg = argv[i];
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			help(stdout);
			return -1;
		}
		if (arg[0] == '-' && arg[1]) {
			/* a last option is asked with a stand-in value only
			 * to learn whether it is known */
			bool known, last = i + 1 >= argc;
			int rc = option(ctx, arg, last ? "0" : argv[i + 1],
					&known);
			if (!known)
				return strata_cli_unknown_option(cmd, arg, help);
			if (rc == STRATA_CLI_FLAG)
				continue;
			if (last)
				return strata_cli_usage(cmd, "%s needs a value",
							arg);
			if (rc)
				return rc;
			i++;
		} else if (*model) {
			return strata_cli_usage(cmd, "more than one MODEL ('%s')",
						arg);
		} else {
			*model = arg;
		}
	}
	if (!*model)
		return strata_cli_usage(cmd, "MODEL is missing");
	return 0;
}

int strata_cli_one_sequence(const char *cmd, const strata_cli_residency *r)
{
	if (r->plan.shape.batch <= 1)
		return 0;
	return strata_cli_usage(cmd, "--batch %llu: strata %s runs one "
				"sequence (several per forward pass are "
				"strata batch's --batch)",
				(unsigned long long)r->plan.shape.batch, cmd);
}

strata_status strata_cli_load_rates(strata_plan_rates *out, bool *found,
				    strata_error *err)
{
	char path[4096];
	*found = false;
	if (strata_plan_rates_path(path, sizeof path, err) != STRATA_OK)
		return STRATA_OK; /* no cache directory: no rates, defaults */
	bool exists;
	strata_status s = strata_plan_rates_load(path, out, &exists, err);
	if (s == STRATA_OK)
		*found = true;
	return s == STRATA_OK || !exists ? STRATA_OK : s;
}

strata_status strata_cli_residency_rates(strata_cli_residency *r,
					 strata_error *err)
{
	strata_plan_rates rates;
	bool found = false;
	strata_status s = strata_cli_load_rates(&rates, &found, err);
	if (s == STRATA_OK && found)
		strata_plan_rates_apply(&rates, r->device_index, &r->plan);
	return s;
}

strata_session_options strata_cli_session_options(const strata_cli_residency *r,
						  const char *model,
						  uint64_t threads)
{
	return (strata_session_options){
		.model_path = model, .plan = r->plan,
		.exclude = (const char *const *)r->exclude,
		.exclude_count = r->exclude_count,
		.device_index = r->device_index,
		.threads = (uint32_t)threads,
		.precision = r->precision,
		.no_map = r->no_map,
	};
}
