/* cmd_plan.c - `strata plan MODEL`: size every residency mode of a model
 * from its headers, check each against the budgets, predict its speed and
 * choose one, as a table or one JSON object (layer: cli). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/backend.h"
#include "strata/checkpoint.h"
#include "strata/infer.h"
#include "strata/plan.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata plan MODEL [options] [--json]\n\n"
		"Sizes every way of running MODEL (resident, host:D, disk) to the\n"
		"byte from its headers alone, checks each against the budgets and\n"
		"chooses the fastest that fits.\n\n"
		"options:\n%s"
		"  --json                one JSON object (docs/plan.md)\n",
		strata_cli_residency_help);
}

/* The architecture from config.json or the GGUF metadata, read by the
 * infer layer's hyper-parameter reader (the forward pass's own view of the
 * model). A checkpoint it cannot describe (no config.json, a family strata
 * cannot run) is planned with its weights only; the reason is kept in
 * `reason` and reported, never guessed around. */
static void describe_arch(const char *model, const strata_catalog *c,
			  strata_plan_arch *out, char *reason, size_t cap)
{
	memset(out, 0, sizeof *out);
	strata_infer_hparams hp;
	strata_error err;
	if (strata_infer_hparams_read(model, c, &hp, &err) != STRATA_OK) {
		snprintf(reason, cap, "%s", err.message);
		out->unknown_reason = reason;
		return;
	}
	*out = (strata_plan_arch){
		.known = true,
		.family = strata_infer_family_name(hp.family),
		.layers = hp.layers, .hidden = hp.dim, .intermediate = hp.ffn,
		.heads = hp.heads, .kv_heads = hp.kv_heads,
		.head_dim = hp.head_dim, .vocab = hp.vocab,
		.max_context = hp.context,
	};
}

/* Budget facts from the machine: MemAvailable always; on cuda the
 * device's free memory through the CUDA backend (a context is made and
 * dropped; no payload is involved). Failures leave a fact unknown, and the
 * planner then asks for the option. */
static void machine_facts(const strata_cli_residency *r,
			  strata_plan_machine *m)
{
	memset(m, 0, sizeof *m);
	strata_error ignored;
	m->host_available_known =
		strata_plan_host_available(&m->host_available_bytes,
					   &ignored) == STRATA_OK;
	if (r->plan.device != STRATA_PLAN_DEVICE_CUDA ||
	    r->plan.has_device_budget)
		return;
	strata_backend_cuda_options co = {.device = r->device_index};
	strata_backend *b = NULL;
	strata_backend_memory mem;
	if (strata_backend_cuda_create(&co, &b, &ignored) == STRATA_OK &&
	    strata_backend_memory_info(b, &mem, &ignored) == STRATA_OK) {
		m->device_free_known = true;
		m->device_free_bytes = mem.free_bytes;
	}
	strata_backend_destroy(b);
}

/* --device absent: cuda if one is visible, else cpu (DESIGN.md). */
static void pick_device(strata_cli_residency *r)
{
	if (!r->device_given && strata_backend_cuda_device_count() > 0)
		r->plan.device = STRATA_PLAN_DEVICE_CUDA;
	if (r->plan.device == STRATA_PLAN_DEVICE_CUDA)
		r->plan.backend_reserved_bytes =
			STRATA_CUDA_COMPUTE_DEVICE_BYTES;
}

static const char *cell(uint64_t v, bool known, char buf[32])
{
	if (!known)
		return "unknown";
	return strata_size_format(v, buf, 32);
}

static void print_table(FILE *f, const char *model, const strata_plan *p)
{
	const strata_plan_options *o = strata_plan_get_options(p);
	const strata_plan_budgets *b = strata_plan_get_budgets(p);
	const strata_plan_memory *m = strata_plan_get_memory(p);
	const strata_plan_arch *a = strata_plan_get_arch(p);
	char s1[32], s2[32], s3[32], s4[32], s5[32], s6[32], s7[32];
	fprintf(f, "model: %s (architecture %s)\n", model,
		a->known && a->family ? a->family : "unknown");
	fprintf(f, "device: %s, context %llu, batch %llu, prefill chunk %llu\n",
		strata_plan_device_name(o->device),
		(unsigned long long)o->shape.context,
		(unsigned long long)o->shape.batch,
		(unsigned long long)o->shape.prefill_chunk);
	fprintf(f, "budgets: device %s (%s), host %s (%s)\n",
		strata_size_format(b->device_bytes, s1, 32),
		b->device_from_option ? "--device-memory"
		: o->device == STRATA_PLAN_DEVICE_CUDA ? "free memory minus headroom"
						       : "MemAvailable minus headroom",
		strata_size_format(b->host_bytes, s2, 32),
		b->host_from_option ? "--host-memory" : "MemAvailable minus headroom");
	if (!b->device_from_option || !b->host_from_option)
		fprintf(f, "headroom kept free: device %s, host %s\n",
			strata_size_format(b->device_headroom_bytes, s1, 32),
			strata_size_format(b->host_headroom_bytes, s2, 32));
	fprintf(f, "\n%-10s %6s %11s %11s %11s %11s %11s %11s %4s %11s\n",
		"mode", "depth", "static", "window", "KV", "workspace",
		"device", "host", "fits", "ms/forward");
	long sel = strata_plan_selected_index(p);
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++) {
		const strata_plan_candidate *c = strata_plan_candidate_at(p, i);
		char name[40];
		if (c->mode == STRATA_RESIDENCY_HOST)
			snprintf(name, sizeof name, "host:%llu",
				 (unsigned long long)c->weights.depth);
		else
			snprintf(name, sizeof name, "%s",
				 strata_residency_mode_name(c->mode));
		char depth[24];
		snprintf(depth, sizeof depth, "%llu",
			 (unsigned long long)c->weights.depth);
		fprintf(f, "%-10s %6s %11s %11s %11s %11s %11s %11s %4s %11.3f%s\n",
			name, strlen(depth) > 6 ? "huge" : depth,
			strata_size_format(c->weights.static_bytes, s1, 32),
			strata_size_format(c->weights.window_bytes, s2, 32),
			cell(m->kv_cache_bytes, m->arch_known, s3),
			cell(m->workspace_bytes, m->arch_known, s4),
			strata_size_format(c->device_bytes, s5, 32),
			strata_size_format(c->host_bytes, s6, 32),
			c->fits ? "yes" : "no", c->predicted_ms_per_forward,
			(long)i == sel ? "  <- selected" : "");
	}
	(void)s7;
	const strata_plan_candidate *c = strata_plan_selected(p);
	if (c)
		fprintf(f, "\nselected: %s, depth %llu (%.1f tokens/s predicted)\n",
			strata_residency_mode_name(c->mode),
			(unsigned long long)c->weights.depth,
			c->tokens_per_second);
	else
		fprintf(f, "\nselected: none\n");
	fprintf(f, "because:\n");
	for (size_t i = 0; i < strata_plan_explanation_count(p); i++) {
		const strata_plan_explanation *e = strata_plan_explanation_at(p, i);
		fprintf(f, "  %-34s %s\n", strata_explain_code(e->code), e->text);
	}
}

/* The JSON document: the plan's keys plus the weight store's figures,
 * the proof that planning read no payload. */
static int print_json(const char *model, const strata_plan *p,
		      const strata_weight_store_stats *ws)
{
	strata_json j;
	strata_json_init(&j, true);
	strata_json_object_begin(&j);
	strata_plan_write_json_fields(p, model, &j);
	strata_json_key(&j, "weight_store");
	strata_json_object_begin(&j);
	strata_json_kv_string(&j, "backend", ws->backend ? ws->backend : "none");
	strata_json_kv_u64(&j, "physical_reads", ws->physical_reads);
	strata_json_kv_u64(&j, "physical_read_bytes", ws->physical_read_bytes);
	strata_json_kv_u64(&j, "payload_shards", ws->payload_count);
	strata_json_object_end(&j);
	strata_json_object_end(&j);
	strata_error err;
	if (strata_json_finish(&j, &err) != STRATA_OK) {
		strata_json_fini(&j);
		return strata_cli_fail(&err);
	}
	fwrite(j.buf, 1, j.len, stdout);
	strata_json_fini(&j);
	return STRATA_EXIT_OK;
}

typedef struct plan_run {
	strata_catalog *catalog;
	strata_plan_source *source;
	strata_weight_store *store;
	strata_plan *plan;
} plan_run;

static void plan_run_fini(plan_run *r)
{
	strata_plan_destroy(r->plan);
	strata_weight_store_destroy(r->store);
	strata_plan_source_destroy(r->source);
	strata_catalog_destroy(r->catalog);
}

int strata_cmd_plan(int argc, char **argv)
{
	strata_cli_residency opts;
	strata_cli_residency_init(&opts);
	const char *model = NULL;
	bool json = false;
	strata_error err;
	int rc = STRATA_EXIT_OK;
	for (int i = 1; i < argc; i++) {
		int used = strata_cli_residency_option(&opts, argc, argv, &i,
						       &err);
		if (used < 0) {
			strata_cli_residency_fini(&opts);
			return strata_cli_fail(&err);
		}
		if (used)
			continue;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			help(stdout);
			strata_cli_residency_fini(&opts);
			return STRATA_EXIT_OK;
		}
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			strata_cli_residency_fini(&opts);
			return strata_cli_usage("plan", "unknown option '%s'",
						argv[i]);
		} else if (model) {
			strata_cli_residency_fini(&opts);
			return strata_cli_usage("plan", "more than one MODEL ('%s')",
						argv[i]);
		} else {
			model = argv[i];
		}
	}
	if (!model) {
		strata_cli_residency_fini(&opts);
		return strata_cli_usage("plan", "MODEL is missing");
	}
	pick_device(&opts);
	plan_run r = {0};
	strata_status s = strata_catalog_open(model, &r.catalog, &err);
	if (s == STRATA_OK)
		s = strata_plan_source_create(
			r.catalog, opts.plan.device,
			(const char *const *)opts.exclude, opts.exclude_count,
			&r.source, &err);
	if (s == STRATA_OK)
		s = strata_weight_store_create(r.catalog, NULL, &r.store, &err);
	if (s != STRATA_OK) {
		rc = strata_cli_fail(&err);
		goto done;
	}
	strata_plan_arch arch;
	char reason[STRATA_ERROR_MESSAGE_BYTES];
	describe_arch(model, r.catalog, &arch, reason, sizeof reason);
	strata_plan_machine machine;
	machine_facts(&opts, &machine);
	s = strata_plan_create(strata_plan_source_layout(r.source), &arch,
			       strata_plan_source_weight_dtype(r.source),
			       &opts.plan, &machine, &r.plan, &err);
	if (r.plan) { /* also when nothing fits: show every candidate */
		strata_weight_store_stats ws;
		strata_weight_store_get_stats(r.store, &ws);
		if (json)
			rc = print_json(model, r.plan, &ws);
		else
			print_table(stdout, model, r.plan);
	}
	if (s != STRATA_OK)
		rc = strata_cli_fail(&err);
done:
	plan_run_fini(&r);
	strata_cli_residency_fini(&opts);
	return rc;
}
