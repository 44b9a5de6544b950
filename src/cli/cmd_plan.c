/* cmd_plan.c - `strata plan MODEL`: size every residency mode of a model
 * from its headers, check each against the budgets, predict its speed and
 * choose one, as a table or one JSON object; with --gpus, one plan per
 * device with a total (layer: cli). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/gpus.h"
#include "strata/backend.h"
#include "strata/checkpoint.h"
#include "strata/infer.h"
#include "strata/model.h"
#include "strata/plan.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata plan MODEL [options] [--json]\n\n"
		"Sizes every way of running MODEL (resident, host:D, disk) to the\n"
		"byte from its headers alone, checks each against the budgets and\n"
		"chooses the fastest that fits.\n\n"
		"options:\n");
	strata_cli_residency_print_help(f, STRATA_CLI_HELP_NO_LOAD);
	fprintf(f,
		"  --gpus all|N|LIST     one plan per device: all visible GPUs,\n"
		"                        the first N or the listed indices, each\n"
		"                        with its own device budget, sharing the\n"
		"                        host budget evenly; with no GPU here,\n"
		"                        GPUs of --device-memory each, or with\n"
		"                        --device cpu, N CPU replicas\n"
		"  --json                one JSON object (docs/plan.md)\n");
}

/* The architecture from config.json or the GGUF metadata, read by the
 * infer layer's hyper-parameter reader (the forward pass's own view of the
 * model), which makes run's checks too (strata_model_check_tensors:
 * family, every tensor, its shape and type). A checkpoint it refuses is
 * planned with its weights only; run's error is kept in *why (its message
 * is the architecture's unknown_reason) and reported, never guessed
 * around. */
static void describe_arch(const char *model, const strata_catalog *c,
			  strata_plan_arch *out, strata_error *why)
{
	memset(out, 0, sizeof *out);
	strata_infer_hparams hp;
	if (strata_infer_hparams_read(model, c, &hp, why) != STRATA_OK) {
		out->unknown_reason = why->message;
		return;
	}
	strata_infer_plan_arch(&hp, out);
}

/* What `strata run` would refuse: run's own error from describe_arch,
 * said as such, with run's fix (or, where it has none, how plan read it).
 * Returns true and fills err when the checkpoint cannot run. */
static bool cannot_run(const strata_plan_arch *arch, const strata_error *why,
		       strata_error *err)
{
	if (arch->known)
		return false;
	*err = *why;
	strata_error_prefix(err, "strata cannot run this checkpoint");
	if (!err->fix[0])
		strata_error_set_fix(err, "plan sized the weights only; use a checkpoint of a family strata runs (docs/infer.md)");
	return true;
}

/* Budget facts from the machine: MemAvailable always; on cuda, where the
 * device is visible, its free memory and the bytes a compute context takes
 * on it (*reserved, at least the options' own), through the CUDA backend (a
 * context is made and dropped; no payload is involved). Failures leave a
 * fact unknown, and the planner then asks for the option. */
static void machine_facts(const strata_cli_residency *r, uint32_t index,
			  strata_plan_machine *m, uint64_t *reserved)
{
	memset(m, 0, sizeof *m);
	strata_error ignored;
	m->host_available_known =
		strata_plan_host_available(&m->host_available_bytes,
					   &ignored) == STRATA_OK;
	*reserved = r->plan.backend_reserved_bytes;
	if (r->plan.device != STRATA_PLAN_DEVICE_CUDA ||
	    index >= strata_backend_device_count("cuda"))
		return;
	/* The device is here: its free memory, and what a compute context
	 * takes on it, measured as `strata run` measures it, so both plan
	 * alike. */
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	strata_backend_memory mem;
	uint64_t ctx = 0;
	if (strata_backend_create("cuda", index, NULL, &b, &ignored) ==
		    STRATA_OK &&
	    strata_backend_memory_info(b, &mem, &ignored) == STRATA_OK &&
	    !r->plan.has_device_budget) {
		m->device_free_known = true;
		m->device_free_bytes = mem.free_bytes;
	}
	if (b && strata_compute_create_measured(b, 1, &c, &ctx, &ignored) ==
			 STRATA_OK &&
	    ctx + strata_backend_runtime_bytes("cuda") > *reserved)
		*reserved = ctx + strata_backend_runtime_bytes("cuda"); /* as run */
	strata_compute_destroy(c);
	strata_backend_destroy(b);
}

/* --device absent: cuda if one is visible, else cpu (DESIGN.md). */
static void pick_device(strata_cli_residency *r)
{
	if (!r->device_given && strata_backend_device_count("cuda") > 0)
		r->plan.device = STRATA_PLAN_DEVICE_CUDA;
	if (r->plan.device == STRATA_PLAN_DEVICE_CUDA)
		r->plan.backend_reserved_bytes =
			strata_backend_compute_bytes("cuda") +
			strata_backend_runtime_bytes("cuda");
}

static const char *cell(uint64_t v, bool known, char buf[32])
{
	if (!known)
		return "unknown";
	return strata_size_format(v, buf, 32);
}

static void print_model(FILE *f, const char *model, const strata_plan *p)
{
	const strata_plan_arch *a = strata_plan_get_arch(p);
	fprintf(f, "model: %s (architecture %s)\n", model,
		a->known && a->family ? a->family : "unknown");
}

/* Where the host budget came from; a replica's share says so. */
static const char *host_source(const strata_plan_budgets *b, char *buf,
			       size_t cap)
{
	const char *from = b->host_from_option ? "--host-memory"
					       : "MemAvailable minus headroom";
	char pool[32];
	if (b->shared_by <= 1)
		return from;
	snprintf(buf, cap, "1/%u of %s, %s", b->shared_by,
		 strata_size_format(b->host_pool_bytes, pool, sizeof pool),
		 from);
	return buf;
}

/* Each candidate's predicted terms per pass (docs/plan.md "Cost model"):
 * every candidate when there are few, else those that fit. */
static void print_terms(FILE *f, const strata_plan *p)
{
	size_t n = strata_plan_candidate_count(p);
	fprintf(f, "\npredicted terms, ms: %-22s %7s %9s %9s %9s %8s %8s %9s %9s %9s  %s\n",
		"candidate", "pass", "resident", "streamed", "cpu", "statics",
		"overhead", "link", "host mem", "total", "bound");
	for (size_t i = 0; i < n; i++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, i);
		if (n > 16 && !c->fits)
			continue;
		char name[96];
		strata_plan_candidate_name(c, name, sizeof name);
		const strata_plan_cost *k[2] = {&c->decode_cost,
						&c->prefill_cost};
		for (int j = 0; j < 2; j++)
			fprintf(f, "  %-40s %7s %9.3f %9.3f %9.3f %8.3f %8.3f %9.3f %9.3f %9.3f  %s\n",
				j ? "" : name, j ? "prefill" : "decode",
				k[j]->resident_ms, k[j]->streamed_ms,
				k[j]->cpu_ms, k[j]->statics_ms,
				k[j]->overhead_ms, k[j]->link_ms,
				k[j]->host_memory_ms, k[j]->total_ms,
				strata_plan_bound_name(k[j]->bound));
	}
}

static void print_plan(FILE *f, const strata_plan *p)
{
	const strata_plan_options *o = strata_plan_get_options(p);
	const strata_plan_budgets *b = strata_plan_get_budgets(p);
	const strata_plan_memory *m = strata_plan_get_memory(p);
	char s1[32], s2[32], s3[32], s4[32], s5[32], s6[32], s7[80];
	fprintf(f, "device: %s, context %llu, batch %llu, prefill chunk %llu\n",
		strata_plan_device_name(o->device),
		(unsigned long long)o->shape.context,
		(unsigned long long)o->shape.batch,
		(unsigned long long)o->shape.prefill_chunk);
	if (m->arch_known)
		fprintf(f, "KV cache: %s, %s (--kv-type)\n",
			strata_weight_type_name(o->shape.kv_type),
			strata_size_format(m->kv_cache_bytes, s1, 32));
	fprintf(f, "budgets: device %s (%s%s), host %s (%s)\n",
		strata_size_format(b->device_budget_bytes, s1, 32),
		b->shared_by > 1 && !b->device_from_option &&
				o->device == STRATA_PLAN_DEVICE_CPU
			? "a share of " : "",
		b->device_from_option ? "--device-memory"
		: o->device == STRATA_PLAN_DEVICE_CUDA ? "free memory minus headroom"
						       : "MemAvailable minus headroom",
		strata_size_format(b->host_budget_bytes, s2, 32),
		host_source(b, s7, sizeof s7));
	if (!b->device_from_option || !b->host_from_option)
		fprintf(f, "headroom kept free: device %s, host %s\n",
			strata_size_format(b->device_headroom_bytes, s1, 32),
			strata_size_format(b->host_headroom_bytes, s2, 32));
	fprintf(f, "\n%-10s %6s %11s %11s %11s %11s %11s %11s %4s %10s %10s\n",
		"mode", "depth", "static", "window", "KV", "workspace",
		"device", "host", "fits", "decode ms", "prefill ms");
	long sel = strata_plan_selected_index(p);
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, i);
		char name[96];
		strata_plan_candidate_name(c, name, sizeof name);
		bool placed = c->mode == STRATA_RESIDENCY_PLACEMENT;
		char depth[24];
		snprintf(depth, sizeof depth, "%llu",
			 (unsigned long long)c->weights.depth);
		fprintf(f, "%-10s %6s %11s %11s %11s %11s %11s %11s %4s %10.3f %10.3f%s\n",
			placed ? "placement" : name,
			strlen(depth) > 6 ? "huge" : depth,
			strata_size_format(c->static_device_bytes, s1, 32),
			strata_size_format(c->window_device_bytes, s2, 32),
			cell(m->kv_cache_bytes, m->arch_known, s3),
			cell(m->workspace_bytes, m->arch_known, s4),
			strata_size_format(c->device_bytes, s5, 32),
			strata_size_format(c->host_bytes, s6, 32),
			c->fits ? "yes" : "no", c->predicted_decode_ms,
			c->predicted_prefill_ms,
			(long)i == sel ? "  <- selected" : "");
		if (placed)
			fprintf(f, "  %s: %llu resident, %llu on the CPU, %llu streamed%s\n",
				name + strlen("placement:"),
				(unsigned long long)c->resident_units,
				(unsigned long long)c->cpu_units,
				(unsigned long long)c->window_units,
				c->statics_on_cpu ? ", statics on the CPU" : "");
	}
	print_terms(f, p);
	const strata_plan_candidate *c = strata_plan_selected(p);
	char cname[96];
	if (c)
		fprintf(f, "\nselected: %s, depth %llu (%.1f tokens/s predicted; decode %.3f ms, prefill chunk %.3f ms)\n",
			strata_plan_candidate_name(c, cname, sizeof cname),
			(unsigned long long)c->weights.depth,
			c->tokens_per_second, c->predicted_decode_ms,
			c->predicted_prefill_ms);
	else
		fprintf(f, "\nselected: none\n");
	fprintf(f, "because:\n");
	for (size_t i = 0; i < strata_plan_explanation_count(p); i++) {
		const strata_plan_explanation *e = strata_plan_explanation_at(p, i);
		fprintf(f, "  %-34s %s\n", strata_explain_code(e->code), e->text);
	}
}

/* The table of one plan, then its throughput against --batch. */
static void print_table(FILE *f, const char *model, const strata_plan *p)
{
	print_model(f, model, p);
	print_plan(f, p);
	strata_cli_print_batch_curve(f, p);
}

/* The weight store's figures: the proof that planning read no payload. */
static void write_store(strata_json *j, const strata_weight_store_stats *ws)
{
	strata_json_key(j, "weight_store");
	strata_json_object_begin(j);
	strata_json_kv_string(j, "backend", ws->backend ? ws->backend : "none");
	strata_json_kv_u64(j, "physical_reads", ws->physical_reads);
	strata_json_kv_u64(j, "physical_read_bytes", ws->physical_read_bytes);
	strata_json_kv_u64(j, "payload_shards", ws->payload_count);
	strata_json_object_end(j);
}

/* Finishes j, writes it to stdout and frees it; the exit code. */
static int emit(strata_json *j)
{
	strata_error err;
	if (strata_json_finish(j, &err) != STRATA_OK) {
		strata_json_fini(j);
		return strata_cli_fail(&err);
	}
	fwrite(j->buf, 1, j->len, stdout);
	strata_json_fini(j);
	return STRATA_EXIT_OK;
}

/* The JSON document of one plan: the plan's keys plus the weight store. */
static int print_json(const char *model, const strata_plan *p,
		      const strata_weight_store_stats *ws)
{
	strata_json j;
	strata_json_init(&j, true);
	strata_json_object_begin(&j);
	strata_plan_write_json_fields(p, model, &j);
	strata_cli_write_batch_curve(&j, p);
	write_store(&j, ws);
	strata_json_object_end(&j);
	return emit(&j);
}

/* ------------------------------------------------------------------------ */
/* Several devices (--gpus)                                                 */
/* ------------------------------------------------------------------------ */

/* Sums over the devices' selected candidates. */
typedef struct plan_total {
	uint32_t selected;
	uint64_t device_bytes, host_bytes, prefix_bytes;
	double tokens_per_second;
} plan_total;

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static void total_of(strata_plan *const *plans, uint32_t n, plan_total *t)
{
	memset(t, 0, sizeof *t);
	for (uint32_t i = 0; i < n; i++) {
		const strata_plan_candidate *c = strata_plan_selected(plans[i]);
		if (!c)
			continue;
		t->selected++;
		t->device_bytes = add_sat(t->device_bytes, c->device_bytes);
		t->host_bytes = add_sat(t->host_bytes, c->host_bytes);
		t->prefix_bytes = add_sat(t->prefix_bytes,
					  strata_plan_host_spare_bytes(plans[i]));
		t->tokens_per_second += c->tokens_per_second;
	}
}

/* One section per device, then the total. */
static void print_devices_table(FILE *f, const char *model,
				strata_plan *const *plans,
				const strata_cli_gpus *g)
{
	const strata_plan_budgets *b = strata_plan_get_budgets(plans[0]);
	char s1[32], s2[32], s3[32];
	print_model(f, model, plans[0]);
	fprintf(f, "devices: %u, each planned with its own device budget; "
		"host budget %s (%s)%s\n", g->count,
		strata_size_format(b->host_pool_bytes, s1, 32),
		b->host_from_option ? "--host-memory"
				    : "MemAvailable minus headroom",
		g->count > 1 ? " split evenly between them" : "");
	for (uint32_t i = 0; i < g->count; i++) {
		fprintf(f, "\n== %s (device %u of %u) ==\n", g->names[i], i + 1,
			g->count);
		print_plan(f, plans[i]);
		fprintf(f, "prefix cache bound (strata batch): %s, the host "
			"budget this plan leaves spare\n",
			strata_size_format(strata_plan_host_spare_bytes(plans[i]),
					   s1, 32));
	}
	plan_total t;
	total_of(plans, g->count, &t);
	fprintf(f, "\n== total: %u device%s ==\n", g->count,
		g->count == 1 ? "" : "s");
	fprintf(f, "selected on %u of %u devices\n", t.selected, g->count);
	fprintf(f, "device memory: %s over the devices\n",
		strata_size_format(t.device_bytes, s1, 32));
	fprintf(f, "host memory: %s of the %s host budget; prefix caches up "
		"to %s\n", strata_size_format(t.host_bytes, s1, 32),
		strata_size_format(b->host_pool_bytes, s2, 32),
		strata_size_format(t.prefix_bytes, s3, 32));
	if (g->cuda)
		fprintf(f, "predicted: %.1f tokens/s over the devices (each "
			"decodes its own requests)\n", t.tokens_per_second);
	else
		fprintf(f, "predicted: not the sum: CPU replicas share the "
			"cores and the memory bandwidth\n");
}

/* {"model", "device", "devices": [each plan's object with replica,
 * device_name, device_index and prefix_cache_budget_bytes], "total",
 * "weight_store"} (docs/plan.md). */
static int print_devices_json(const char *model, strata_plan *const *plans,
			      const strata_cli_gpus *g,
			      const strata_weight_store_stats *ws)
{
	const strata_plan_budgets *b = strata_plan_get_budgets(plans[0]);
	strata_json j;
	strata_json_init(&j, true);
	strata_json_object_begin(&j);
	strata_json_kv_string(&j, "model", model);
	strata_json_kv_string(&j, "device", g->cuda ? "cuda" : "cpu");
	strata_json_key(&j, "devices");
	strata_json_array_begin(&j);
	for (uint32_t i = 0; i < g->count; i++) {
		strata_json_object_begin(&j);
		strata_json_kv_u64(&j, "replica", i);
		strata_json_kv_string(&j, "device_name", g->names[i]);
		strata_json_kv_u64(&j, "device_index",
				   g->cuda ? g->index[i] : i);
		strata_plan_write_json_fields(plans[i], model, &j);
		strata_cli_write_batch_curve(&j, plans[i]);
		strata_json_kv_u64(&j, "prefix_cache_budget_bytes",
				   strata_plan_host_spare_bytes(plans[i]));
		strata_json_object_end(&j);
	}
	strata_json_array_end(&j);
	plan_total t;
	total_of(plans, g->count, &t);
	strata_json_key(&j, "total");
	strata_json_object_begin(&j);
	strata_json_kv_u64(&j, "devices", g->count);
	strata_json_kv_u64(&j, "selected", t.selected);
	strata_json_kv_bool(&j, "fits", t.selected == g->count);
	strata_json_kv_u64(&j, "device_bytes", t.device_bytes);
	strata_json_kv_u64(&j, "host_bytes", t.host_bytes);
	strata_json_kv_u64(&j, "host_budget_bytes", b->host_pool_bytes);
	strata_json_kv_string(&j, "host_budget_source",
			      b->host_from_option ? "option" : "machine");
	strata_json_kv_u64(&j, "prefix_cache_budget_bytes", t.prefix_bytes);
	/* CPU replicas share cores and memory bandwidth: not additive */
	strata_json_key(&j, "tokens_per_second");
	if (g->cuda)
		strata_json_double(&j, t.tokens_per_second);
	else
		strata_json_null(&j);
	strata_json_object_end(&j);
	write_store(&j, ws);
	strata_json_object_end(&j);
	return emit(&j);
}

/* --gpus for planning (docs/plan.md): GPUs visible here, each measured;
 * with --device-memory, GPUs of that memory each, visible or not (cuda
 * assumed unless --device says otherwise: planning for another machine
 * needs no device); CPU replicas with --device cpu. Anything else is
 * refused: nothing would give a GPU's budget. Sets the device kind. 0 or
 * an exit code. */
static int plan_gpus(const char *spec, strata_cli_residency *r,
		     strata_cli_gpus *g)
{
	uint32_t visible = strata_backend_device_count("cuda");
	if (!r->device_given && (visible || r->plan.has_device_budget))
		r->plan.device = STRATA_PLAN_DEVICE_CUDA;
	bool cuda = r->plan.device == STRATA_PLAN_DEVICE_CUDA;
	strata_error err;
	if ((cuda || !r->device_given) && !visible &&
	    !r->plan.has_device_budget) {
		char shown[64];
		strata_escape(shown, sizeof shown, spec, strlen(spec));
		strata_fail(&err, STRATA_E_PLAN_OPTIONS,
			    "give --device-memory SIZE (each GPU's memory) to "
			    "plan GPUs of another machine, or --device cpu to "
			    "plan CPU replicas",
			    "--gpus %s: no CUDA device is visible here, so "
			    "nothing gives each GPU's memory", shown);
		return strata_cli_fail(&err);
	}
	bool measured = visible > 0 && !r->plan.has_device_budget;
	if (strata_cli_gpus_parse(spec, cuda, cuda ? visible : 1, measured, g,
				  &err))
		return strata_cli_fail(&err);
	return 0;
}

/* ------------------------------------------------------------------------ */

typedef struct plan_run {
	strata_catalog *catalog;
	strata_plan_source *source;
	strata_weight_store *store;
	strata_plan *plans[STRATA_CLI_MAX_DEVICES]; /* one per device */
	uint32_t count;
	uint32_t failed;	     /* plans where nothing fits */
	uint32_t first_failed;	     /* the first of them, and its error */
	strata_error failure;
	bool unrunnable;	     /* what strata run would refuse */
	strata_error why;	     /* run's error (arch unknown_reason) */
	strata_error refusal;
} plan_run;

static void plan_run_fini(plan_run *r)
{
	for (uint32_t i = 0; i < r->count; i++)
		strata_plan_destroy(r->plans[i]);
	strata_weight_store_destroy(r->store);
	strata_plan_source_destroy(r->source);
	strata_catalog_destroy(r->catalog);
}

/* One plan per device of g (NULL: the one --device names, alone). A plan
 * where nothing fits is kept (its candidates are shown) and counted in
 * r->failed; any other error stops, named by device. */
static strata_status plan_devices(plan_run *r, const char *model,
				  const strata_cli_residency *opts,
				  const strata_cli_gpus *g, strata_error *err)
{
	strata_plan_arch arch;
	describe_arch(model, r->catalog, &arch, &r->why);
	r->unrunnable = cannot_run(&arch, &r->why, &r->refusal);
	strata_plan_rates rates;
	bool have_rates = false;
	strata_status rs = strata_cli_load_rates(&rates, &have_rates, err);
	if (rs != STRATA_OK)
		return rs;
	uint32_t n = g ? g->count : 1;
	for (uint32_t i = 0; i < n; i++) {
		strata_plan_options po = opts->plan;
		po.host_shared_by = g ? g->count : 0;
		/* select a placement where run would (the same rule) */
		po.mixed_placements = strata_session_runs_placements(&po);
		uint32_t index = g ? g->index[i] : opts->device_index;
		if (have_rates)
			strata_plan_rates_apply(&rates, index, &po);
		strata_plan_machine machine;
		machine_facts(opts, index, &machine, &po.backend_reserved_bytes);
		strata_error e;
		strata_status s = strata_plan_create(
			strata_plan_source_layout(r->source), &arch,
			strata_plan_source_weight_dtype(r->source), &po,
			&machine, &r->plans[i], &e);
		if (r->plans[i])
			r->count = i + 1;
		if (s != STRATA_OK && !r->plans[i]) {
			*err = e;
			if (g)
				strata_error_prefix(err, "%s", g->names[i]);
			return s;
		}
		if (s != STRATA_OK && !r->failed++) {
			r->failure = e;
			r->first_failed = i;
		}
	}
	return STRATA_OK;
}

/* The plan source as run makes it (strata_session_plan_source): with
 * --n-cpu-moe or --expert-cache the experts leave their units, which
 * needs the hyper-parameters (a model run refuses gets no experts
 * sizing: plan shows the refusal as ever). */
static strata_status plan_source(plan_run *r, const char *model,
				 strata_cli_residency *opts, strata_error *err)
{
	const char *const *ex = (const char *const *)opts->exclude;
	strata_infer_hparams hp;
	strata_error ignored;
	strata_plan_experts *x = &opts->plan.experts;
	if ((x->layers || x->cache_slots) &&
	    strata_infer_hparams_read(model, r->catalog, &hp, &ignored) ==
		    STRATA_OK)
		return strata_session_plan_source(r->catalog, &hp, ex,
						  opts->exclude_count,
						  &opts->plan, &r->source, err);
	return strata_plan_source_create(r->catalog, opts->plan.device, ex,
					 opts->exclude_count, &r->source, err);
}

static int parse_args(int argc, char **argv, strata_cli_residency *opts,
		      const char **model, const char **gpus, bool *json)
{
	strata_error err;
	for (int i = 1; i < argc; i++) {
		int used = strata_cli_residency_option(opts, argc, argv, &i,
						       &err);
		if (used < 0)
			return strata_cli_fail(&err);
		if (used)
			continue;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			help(stdout);
			return -1;
		}
		if (!strcmp(argv[i], "--json")) {
			*json = true;
		} else if (!strncmp(argv[i], "--gpus=", 7)) {
			*gpus = argv[i] + 7;
		} else if (!strcmp(argv[i], "--gpus")) {
			if (i + 1 >= argc)
				return strata_cli_usage("plan", "--gpus needs "
							"a value");
			*gpus = argv[++i];
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			return strata_cli_unknown_option("plan", argv[i], help);
		} else if (*model) {
			return strata_cli_usage("plan", "more than one MODEL ('%s')",
						argv[i]);
		} else {
			*model = argv[i];
		}
	}
	if (!*model)
		return strata_cli_usage("plan", "MODEL is missing");
	return 0;
}

int strata_cmd_plan(int argc, char **argv)
{
	strata_cli_residency opts;
	strata_cli_residency_init(&opts);
	const char *model = NULL, *gpus = NULL;
	bool json = false;
	strata_cli_gpus g;
	int rc = parse_args(argc, argv, &opts, &model, &gpus, &json);
	if (rc == 0 && gpus)
		rc = plan_gpus(gpus, &opts, &g);
	if (rc) {
		strata_cli_residency_fini(&opts);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	pick_device(&opts);
	plan_run r = {0};
	strata_error err;
	strata_status s = strata_catalog_open(model, &r.catalog, &err);
	if (s == STRATA_OK)
		s = plan_source(&r, model, &opts, &err);
	if (s == STRATA_OK)
		s = strata_weight_store_create(r.catalog, NULL, &r.store, &err);
	if (s == STRATA_OK)
		s = plan_devices(&r, model, &opts, gpus ? &g : NULL, &err);
	if (s != STRATA_OK) {
		rc = strata_cli_fail(&err);
		goto done;
	}
	/* also when nothing fits: show every candidate */
	strata_weight_store_stats ws;
	strata_weight_store_get_stats(r.store, &ws);
	if (!gpus && json)
		rc = print_json(model, r.plans[0], &ws);
	else if (!gpus)
		print_table(stdout, model, r.plans[0]);
	else if (json)
		rc = print_devices_json(model, r.plans, &g, &ws);
	else
		print_devices_table(stdout, model, r.plans, &g);
	if (r.failed && gpus)
		strata_error_prefix(&r.failure, "%s%s", g.names[r.first_failed],
				    r.failed > 1 ? " (and the other devices)"
						 : "");
	if (r.failed)
		rc = strata_cli_fail(&r.failure);
	if (r.unrunnable) /* after the plan: it still shows the sizes */
		rc = strata_cli_fail(&r.refusal);
done:
	plan_run_fini(&r);
	strata_cli_residency_fini(&opts);
	return rc;
}
