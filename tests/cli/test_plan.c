/* test_plan.c - `strata plan` end to end on committed checkpoints: the
 * JSON contract, sizes checked against the catalog independently, zero
 * payload reads, the table, --gpus, the placement options, calibrate's
 * rates, errors and exit codes (the peer model: test_plan_peer.c)
 * (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli/plan_support.h"
#include "support/gpu_skip.h"
#include "strata/backend.h"
#include "strata/checkpoint.h"

#define DATA STRATA_SOURCE_DIR "/tests/data"
#define STORIES DATA "/gguf/stories260K.gguf"
#define QWEN DATA "/checkpoints/tiny-qwen2-sharded"
#define MIXED DATA "/checkpoints/mixed-dtypes"

static const char *const context_256[] = {"--context", "256", NULL};

static uint64_t round256(uint64_t b)
{
	return (b + 255) / 256 * 256;
}

/* Expected static and unit sums straight from the catalog: every tensor of
 * stories260K is f32, `blk.N.` tensors are units, the rest static. */
static void catalog_sums(const char *path, uint64_t *st, uint64_t *units)
{
	strata_catalog *c;
	assert_int_equal(strata_catalog_open(path, &c, NULL), STRATA_OK);
	*st = *units = 0;
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		assert_int_equal(t->dtype, STRATA_DTYPE_F32);
		uint64_t b = round256(t->elements * 4);
		if (!strncmp(t->name, "blk.", 4))
			*units += b;
		else
			*st += b;
	}
	strata_catalog_destroy(c);
}

static void json_plan_of_stories_is_exact(void **state)
{
	(void)state;
	json_t *doc = plan_cpu_json(STORIES, "1GiB", "1GiB", context_256);
	uint64_t st, units;
	catalog_sums(STORIES, &st, &units);
	json_t *c0 = json_array_get(json_object_get(doc, "candidates"), 0);
	json_t *w = json_object_get(c0, "weights");
	assert_int_equal(json_object_size(w), 4);
	assert_true(plan_u(w, "static_bytes") == st);
	assert_true(plan_u(w, "window_bytes") == units);
	assert_true(plan_u(w, "required_bytes") == st + units);
	assert_true(plan_u(w, "depth") == 5);
	json_t *arch = json_object_get(doc, "architecture");
	assert_true(json_is_true(json_object_get(arch, "known")));
	assert_true(plan_u(arch, "layers") == 5);
	/* KV: layers x 2 x [context, kv_heads * head_dim] f32 on cpu */
	uint64_t kvd = plan_u(arch, "kv_heads") * plan_u(arch, "head_dim");
	json_t *mem = json_object_get(doc, "memory");
	assert_true(plan_u(mem, "kv_cache_bytes") ==
		    5 * 2 * round256(256 * kvd * 4));
	assert_true(plan_u(c0, "device_bytes") ==
		    st + units + plan_u(mem, "kv_cache_bytes") +
			    plan_u(mem, "workspace_bytes"));
	json_t *sel = json_object_get(doc, "selected");
	assert_string_equal(json_string_value(json_object_get(sel, "mode")),
			    "resident");
	bool resident_fits = false;
	json_t *exs = json_object_get(doc, "explanations");
	for (size_t i = 0; i < json_array_size(exs); i++)
		resident_fits |= !strcmp(json_string_value(json_object_get(
						 json_array_get(exs, i), "code")),
					 "resident_fits");
	assert_true(resident_fits);
	/* planning read headers only */
	json_t *ws = json_object_get(doc, "weight_store");
	assert_true(plan_u(ws, "physical_reads") == 0);
	assert_true(plan_u(ws, "physical_read_bytes") == 0);
	json_decref(doc);
}

static void budgets_drive_the_choice(void **state)
{
	(void)state;
	/* device room for static + 2 layers + KV + workspace (a one-token
	 * pass), plenty of host */
	const char *one_token[] = {"--context", "256", "--prefill-chunk", "1",
				   NULL};
	json_t *doc = plan_cpu_json(STORIES, "1MiB", "1GiB", one_token);
	json_t *sel = json_object_get(doc, "selected");
	assert_string_equal(json_string_value(json_object_get(sel, "mode")),
			    "host");
	assert_true(plan_u(sel, "device_bytes") <= 1u << 20);
	json_decref(doc);
	/* host memory 0: disk straight to the device */
	doc = plan_cpu_json(STORIES, "1MiB", "0", one_token);
	sel = json_object_get(doc, "selected");
	assert_string_equal(json_string_value(json_object_get(sel, "mode")),
			    "disk");
	assert_true(plan_u(sel, "lookahead") == 0 && plan_u(sel, "queue") == 0);
	json_decref(doc);
	/* bandwidths as SIZE or SIZE/s, --opt VALUE or --opt=VALUE */
	const char *bw[] = {"--h2d-bandwidth", "10GB/s", "--disk-bandwidth=1GiB",
			    "--memory-bandwidth", "5GB", NULL};
	doc = plan_cpu_json(STORIES, "1GiB", "0", bw);
	json_t *b = json_object_get(doc, "bandwidths");
	assert_true(json_number_value(json_object_get(
			    b, "h2d_bytes_per_second")) == 1e10);
	assert_true(json_number_value(json_object_get(
			    b, "disk_bytes_per_second")) == 1073741824.0);
	assert_true(json_number_value(json_object_get(
			    b, "memory_bytes_per_second")) == 5e9);
	json_decref(doc);
}

static void nothing_fits_exits_1_with_every_shortfall(void **state)
{
	(void)state;
	const char *argv[] = {"plan", STORIES, "--device-memory", "1KiB",
			      "--host-memory", "1KiB", "--device", "cpu", NULL};
	cli_result r = plan_run(argv);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "strata: error: nothing fits"));
	assert_non_null(strstr(r.err, "resident needs "));
	assert_non_null(strstr(r.err, "host:1 needs "));
	assert_non_null(strstr(r.err, "disk needs "));
	/* sizes in the options' units, never raw byte counts */
	assert_non_null(strstr(r.err, "(device 1KiB, host 1KiB)"));
	assert_non_null(strstr(r.err, "  fix: give --device-memory "));
	assert_non_null(strstr(r.out, "selected: none"));
	assert_non_null(strstr(r.out, "nothing_fits"));
	cli_result_free(&r);
}

static void table_lists_candidates_and_reasons(void **state)
{
	(void)state;
	const char *argv[] = {"plan", QWEN, "--device-memory", "150KiB",
			      "--host-memory", "1MiB", "--device", "cpu",
			      "--prefill-chunk", "1", NULL};
	cli_result r = plan_run(argv);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "decode ms"));
	assert_non_null(strstr(r.out, "prefill ms"));
	assert_non_null(strstr(r.out, "resident "));
	assert_non_null(strstr(r.out, "host:1 "));
	assert_non_null(strstr(r.out, "<- selected"));
	assert_non_null(strstr(r.out, "resident_exceeds_device_budget"));
	assert_non_null(strstr(r.out, "host_window_selected"));
	cli_result_free(&r);
}

static void cpu_and_cuda_keep_half_precision_bytes(void **state)
{
	(void)state;
	const char *cuda[] = {"plan", QWEN, "--json", "--device", "cuda:0",
			      "--device-memory", "1GiB", "--host-memory",
			      "1GiB", NULL};
	json_t *a = plan_cpu_json(QWEN, "1GiB", "1GiB", NULL);
	json_t *b = plan_run_json(cuda);
	json_t *la = json_object_get(a, "layout"), *lb = json_object_get(b, "layout");
	/* the checkpoint is f16: both keep its matrices as stored; the cpu
	 * converts only the vectors (norms, biases) to f32, which here stay
	 * within their 256-byte rounding */
	assert_true(plan_u(la, "all_units_bytes") >= plan_u(lb, "all_units_bytes"));
	assert_true(plan_u(la, "all_units_bytes") <
		    plan_u(lb, "all_units_bytes") + plan_u(lb, "all_units_bytes") / 16);
	json_t *mb = json_object_get(b, "memory");
	/* the CUDA attention reads an f32 KV cache, as `strata run` plans */
	assert_true(plan_u(mb, "kv_element_bytes") == 4);
	json_decref(a);
	json_decref(b);
}

static void exclude_removes_tensors_before_sizing(void **state)
{
	(void)state;
	const char *argv[] = {"plan", STORIES, "--json", "--device-memory",
			      "1GiB", "--host-memory", "0", "--exclude",
			      "blk.*", "--exclude=output.weight", NULL};
	json_t *doc = plan_run_json(argv);
	json_t *l = json_object_get(doc, "layout");
	assert_true(plan_u(l, "occupied_units") == 0);
	assert_true(plan_u(l, "excluded_tensors") == 5 * 9 + 1);
	json_decref(doc);
}

static void unknown_architecture_still_sizes_weights(void **state)
{
	(void)state;
	const char *argv[] = {"plan", MIXED, "--json", "--device-memory",
			      "1GiB", "--host-memory", "0", NULL};
	/* sized and shown, but strata run refuses it: plan says so, exit 1 */
	cli_result r = plan_run(argv);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "strata: error: strata cannot run this checkpoint"));
	assert_non_null(strstr(r.err, "  fix: "));
	json_error_t je;
	json_t *doc = json_loads(r.out, 0, &je);
	cli_result_free(&r);
	assert_non_null(doc);
	json_t *arch = json_object_get(doc, "architecture");
	assert_true(json_is_false(json_object_get(arch, "known")));
	assert_true(json_is_null(json_object_get(arch, "layers")));
	json_t *c0 = json_array_get(json_object_get(doc, "candidates"), 0);
	assert_true(json_is_null(json_object_get(c0, "kv_cache_bytes")));
	assert_true(plan_u(json_object_get(c0, "weights"), "static_bytes") > 0);
	json_decref(doc);
}

/* The keys of a single plan's document (docs/plan.md); --gpus must leave
 * it as it is. */
static const char *const single_keys[] = {
	"model", "device", "shape", "budgets", "bandwidths", "layout",
	"rates", "type_rates", "architecture", "memory", "candidates",
	"selected",
	"explanations", "throughput_by_batch", "best_batch", "weight_store",
};

static void without_gpus_the_document_is_unchanged(void **state)
{
	(void)state;
	json_t *doc = plan_cpu_json(STORIES, "4MiB", "3MiB", context_256);
	assert_int_equal(json_object_size(doc),
			 sizeof single_keys / sizeof *single_keys);
	for (size_t i = 0; i < sizeof single_keys / sizeof *single_keys; i++)
		assert_non_null(json_object_get(doc, single_keys[i]));
	json_t *b = json_object_get(doc, "budgets");
	assert_int_equal(json_object_size(b), 6);
	assert_true(plan_u(b, "host_bytes") == 3u << 20);
	json_decref(doc);
}

/* --device cpu --gpus 3: three CPU replicas, each entry the single plan's
 * object (its candidates those of the single plan given the replica's
 * share of the host budget) plus replica, device_name, device_index and
 * the prefix cache bound; a total over them. */
static void gpus_plans_each_device_and_a_total(void **state)
{
	(void)state;
	const char *three[] = {"--gpus", "3", "--context", "256", NULL};
	json_t *doc = plan_cpu_json(STORIES, "4MiB", "3MiB", three);
	json_t *one = plan_cpu_json(STORIES, "4MiB", "1MiB", context_256);
	assert_string_equal(json_string_value(json_object_get(doc, "device")),
			    "cpu");
	json_t *devs = json_object_get(doc, "devices");
	assert_int_equal(json_array_size(devs), 3);
	uint64_t dev_sum = 0, host_sum = 0, spare_sum = 0;
	for (size_t i = 0; i < 3; i++) {
		json_t *e = json_array_get(devs, i);
		char name[16];
		snprintf(name, sizeof name, "cpu:%zu", i);
		assert_string_equal(json_string_value(json_object_get(
					    e, "device_name")), name);
		assert_true(plan_u(e, "replica") == i && plan_u(e, "device_index") == i);
		for (size_t k = 0; k + 1 < sizeof single_keys /
						  sizeof *single_keys; k++)
			assert_non_null(json_object_get(e, single_keys[k]));
		/* the single plan's keys, the four above, no weight_store */
		assert_int_equal(json_object_size(e),
				 sizeof single_keys / sizeof *single_keys + 3);
		json_t *b = json_object_get(e, "budgets");
		assert_true(plan_u(b, "device_bytes") == 4u << 20); /* each its own */
		assert_true(plan_u(b, "host_bytes") == 1u << 20);   /* a third */
		assert_true(plan_u(b, "shared_by") == 3);
		assert_true(plan_u(b, "host_pool_bytes") == 3u << 20);
		assert_true(json_equal(json_object_get(e, "candidates"),
				       json_object_get(one, "candidates")));
		json_t *sel = json_object_get(e, "selected");
		/* cpu: the spare host budget and the spare RAM arena */
		uint64_t spare = (1u << 20) - plan_u(sel, "host_bytes") +
				 (4u << 20) - plan_u(sel, "device_bytes");
		assert_true(plan_u(e, "prefix_cache_budget_bytes") == spare);
		dev_sum += plan_u(sel, "device_bytes");
		host_sum += plan_u(sel, "host_bytes");
		spare_sum += spare;
	}
	json_t *t = json_object_get(doc, "total");
	assert_true(plan_u(t, "devices") == 3 && plan_u(t, "selected") == 3);
	assert_true(json_is_true(json_object_get(t, "fits")));
	assert_true(plan_u(t, "device_bytes") == dev_sum);
	assert_true(plan_u(t, "host_bytes") == host_sum);
	assert_true(plan_u(t, "host_budget_bytes") == 3u << 20);
	assert_true(plan_u(t, "prefix_cache_budget_bytes") == spare_sum);
	/* CPU replicas share cores and bandwidth: no summed speed */
	assert_true(json_is_null(json_object_get(t, "tokens_per_second")));
	assert_true(plan_u(json_object_get(doc, "weight_store"),
		      "physical_reads") == 0);
	json_decref(doc);
	json_decref(one);
}

/* The table: one section per device, then the total. */
static void gpus_table_has_a_section_per_device(void **state)
{
	(void)state;
	const char *argv[] = {"plan", STORIES, "--device", "cpu", "--gpus",
			      "0,1", "--device-memory", "4MiB",
			      "--host-memory", "2MiB", "--prefill-chunk", "1",
			      NULL};
	cli_result r = plan_run(argv);
	assert_int_equal(r.exit_code, 0);
	const char *want[] = {
		"host budget 2.00 MiB (--host-memory) split evenly",
		"== cpu:0 (device 1 of 2) ==", "== cpu:1 (device 2 of 2) ==",
		"host 1.00 MiB (1/2 of 2.00 MiB, --host-memory)",
		"prefix cache bound (strata batch): ",
		"== total: 2 devices ==", "selected on 2 of 2 devices",
		"split between 2 replicas",
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++)
		if (!strstr(r.out, want[i]))
			fail_msg("'%s' missing from:\n%s", want[i], r.out);
	cli_result_free(&r);
}

/* Where no GPU is visible, --gpus N plans GPUs of --device-memory each
 * (cuda assumed), and refuses with a fix when nothing gives their memory.
 * (On a GPU machine these plan the visible GPUs instead: skipped.) */
static void gpus_without_a_gpu(void **state)
{
	(void)state;
	if (gpu_skip_with_device())
		skip();
	const char *argv[] = {"plan", QWEN, "--json", "--gpus", "0,2",
			      "--device-memory", "64MiB", "--host-memory",
			      "2GiB", NULL};
	json_t *doc = plan_run_json(argv);
	assert_string_equal(json_string_value(json_object_get(doc, "device")),
			    "cuda");
	json_t *devs = json_object_get(doc, "devices");
	assert_int_equal(json_array_size(devs), 2);
	double tps = 0;
	for (size_t i = 0; i < 2; i++) {
		json_t *e = json_array_get(devs, i);
		assert_string_equal(json_string_value(json_object_get(
					    e, "device_name")),
				    i ? "cuda:2" : "cuda:0");
		assert_true(plan_u(e, "device_index") == 2 * i);
		/* the constant, or more where the GPU is here and its
		 * compute context was measured */
		assert_true(plan_u(json_object_get(e, "memory"),
			      "backend_reserved_bytes") >=
			    strata_backend_compute_bytes("cuda"));
		json_t *sel = json_object_get(e, "selected");
		/* cuda: only host memory is spare for a host-side cache */
		assert_true(plan_u(e, "prefix_cache_budget_bytes") ==
			    (1u << 30) - plan_u(sel, "host_bytes"));
		json_t *c = json_array_get(json_object_get(e, "candidates"),
					   (size_t)plan_u(sel, "index"));
		tps += json_number_value(json_object_get(c,
							 "tokens_per_second"));
	}
	json_t *t = json_object_get(doc, "total");
	assert_true(json_number_value(json_object_get(
			    t, "tokens_per_second")) == tps);
	json_decref(doc);

	const char *none[] = {"plan", STORIES, "--gpus", "2", NULL};
	cli_result r = plan_run(none);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "no CUDA device is visible"));
	assert_non_null(strstr(r.err, "fix: give --device-memory SIZE"));
	assert_non_null(strstr(r.err, "--device cpu"));
	assert_int_equal(r.out_len, 0);
	cli_result_free(&r);
	const char *cuda[] = {"plan", STORIES, "--device", "cuda", "--gpus",
			      "2", "--host-memory", "1GiB", NULL};
	r = plan_run(cuda);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "no CUDA device is visible"));
	cli_result_free(&r);
	const char *all[] = {"plan", STORIES, "--gpus", "all",
			     "--device-memory", "1GiB", NULL};
	r = plan_run(all);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "fix: give a count instead"));
	cli_result_free(&r);
	/* --gpus 0 (device 0 meant) is told how to say it */
	const char *zero[] = {"plan", STORIES, "--device", "cpu", "--gpus",
			      "0", NULL};
	r = plan_run(zero);
	assert_int_equal(r.exit_code, 2);
	assert_non_null(strstr(r.err, "'0' is a count of none"));
	assert_non_null(strstr(r.err, "--gpus 1 is the first device alone"));
	cli_result_free(&r);
}

/* Nothing fits on the devices: every section is printed, exit 1, the
 * error names a device, and its fix (in the pool's units) does fit. */
static void gpus_nothing_fits_names_the_device(void **state)
{
	(void)state;
	const char *argv[] = {"plan", STORIES, "--device", "cpu", "--gpus",
			      "2", "--device-memory", "256KiB",
			      "--host-memory", "1KiB", NULL};
	cli_result r = plan_run(argv);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "strata: error: cpu:0 (and the other "
				      "devices): nothing fits"));
	assert_non_null(strstr(r.out, "== cpu:1 (device 2 of 2) =="));
	assert_non_null(strstr(r.out, "selected on 0 of 2 devices"));
	/* the fix's budgets, typed back as given: the one change, the rest
	 * as before */
	char d[32] = "256KiB", h[32] = "1KiB";
	const char *fix = strstr(r.err, "fix: give ");
	assert_non_null(fix);
	const char *at = strstr(fix, "--device-memory ");
	if (at)
		assert_int_equal(sscanf(at, "--device-memory %31s", d), 1);
	at = strstr(fix, "--host-memory ");
	if (at)
		assert_int_equal(sscanf(at, "--host-memory %31s", h), 1);
	cli_result_free(&r);
	const char *again[] = {"plan", STORIES, "--device", "cpu", "--gpus",
			       "2", "--device-memory", d, "--host-memory", h,
			       NULL};
	r = plan_run(again);
	if (r.exit_code != 0)
		fail_msg("the fix does not fit: %s", r.err);
	cli_result_free(&r);
}

/* --resident-units and --cpu-units place units exactly; a SIZE list of
 * --device-memory plans a layer split; --host-memory-bandwidth feeds the
 * prediction; with --residency the forced units are refused. */
static void placement_options_are_honoured(void **state)
{
	(void)state;
	const char *forced[] = {"--resident-units", "3", "--cpu-units", "1",
				"--host-memory-bandwidth", "7GB", NULL};
	json_t *doc = plan_cpu_json(STORIES, "64MiB,64MiB", "64MiB", forced);
	json_t *sel = json_object_get(doc, "selected");
	const char *name = json_string_value(json_object_get(sel, "name"));
	assert_non_null(strstr(name, "placement:r"));
	assert_non_null(strstr(name, ",c1,w1"));
	json_t *cands = json_object_get(doc, "candidates");
	json_t *c = json_array_get(cands, plan_u(sel, "index"));
	assert_true(plan_u(c, "resident_units") == 3 && plan_u(c, "cpu_units") == 1);
	assert_true(json_array_size(json_object_get(c, "devices")) == 2);
	json_t *pl = json_object_get(c, "placement");
	assert_true(json_array_size(pl) == 5); /* stories: 5 layers */
	size_t cpu = 0;
	for (size_t i = 0; i < 5; i++)
		cpu += !strcmp(json_string_value(json_object_get(
				       json_array_get(pl, i), "where")), "cpu");
	assert_true(cpu == 1);
	json_t *h = json_object_get(json_object_get(doc, "rates"),
				    "host_memory_bytes_per_second");
	assert_true(json_number_value(json_object_get(h, "value")) == 7e9);
	json_decref(doc);
	const char *clash[] = {"plan", STORIES, "--device", "cpu",
			       "--residency", "host", "--cpu-units", "1", NULL};
	cli_result r = plan_run(clash);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "--residency"));
	cli_result_free(&r);
}

/* Each of the n argument lists exits `code` with an error and its fix. */
static void each_fails(const char *const (*cases)[12], size_t n, int code)
{
	for (size_t i = 0; i < n; i++) {
		cli_result r = plan_run(cases[i]);
		if (r.exit_code != code || !strstr(r.err, "strata: error: ") ||
		    !strstr(r.err, "  fix: "))
			fail_msg("case %zu: exit %d, stderr '%s'", i,
				 r.exit_code, r.err);
		cli_result_free(&r);
	}
}

static void usage_errors_exit_2(void **state)
{
	(void)state;
	const char *const cases[][12] = {
		{"plan", NULL},
		{"plan", STORIES, "--residency", "sideways", NULL},
		{"plan", STORIES, "--residency", "host:0", NULL},
		{"plan", STORIES, "--lookahead", "x", NULL},
		{"plan", STORIES, "--device-memory", "lots", NULL},
		{"plan", STORIES, "--device", "tpu", NULL},
		{"plan", STORIES, "--context", "0", NULL},
		{"plan", STORIES, "--frobnicate", NULL},
		{"plan", STORIES, STORIES, NULL},
		{"plan", STORIES, "--h2d-bandwidth", "0GB/s", NULL},
		{"plan", STORIES, "--queue", NULL},
		{"plan", STORIES, "--device", "cpu", "--gpus", NULL},
		{"plan", STORIES, "--device", "cpu", "--gpus", "0", NULL},
		{"plan", STORIES, "--device", "cpu", "--gpus=1,1", NULL},
		{"plan", STORIES, "--device", "cpu", "--gpus", "65", NULL},
		{"plan", STORIES, "--resident-units", "many", NULL},
		{"plan", STORIES, "--cpu-units", NULL},
		{"plan", STORIES, "--host-memory-bandwidth", "0", NULL},
		{"plan", STORIES, "--device-memory", "1GiB,,2GiB", NULL},
		{"plan", STORIES, "--device-memory", "1,2,3,4,5,6,7,8,9", NULL},
	};
	each_fails(cases, sizeof cases / sizeof *cases, 2);
}

static void input_errors_exit_1(void **state)
{
	(void)state;
	const char *const cases[][12] = {
		{"plan", DATA "/no-such-model", NULL},
		/* lookahead with host memory 0 */
		{"plan", STORIES, "--residency", "disk", "--host-memory", "0",
		 "--lookahead", "1", "--device-memory", "1GiB", NULL},
		/* lookahead for a mode that has none */
		{"plan", STORIES, "--residency", "resident", "--lookahead",
		 "2", "--device-memory", "1GiB", "--host-memory", "1GiB",
		 NULL},
		/* cuda without a way to tell its memory (where none is
		 * visible; on a GPU machine this plans instead) */
		{"plan", STORIES, "--device", "cuda", "--host-memory", "1GiB",
		 NULL},
	};
	size_t n = sizeof cases / sizeof *cases;
	if (gpu_skip_with_device())
		n--;
	each_fails(cases, n, 1);
}

static const char *source_of(json_t *doc, const char *rate)
{
	json_t *r = json_object_get(json_object_get(doc, "rates"), rate);
	return json_string_value(json_object_get(r, "source"));
}

/* Without a rates file the plan names its defaults; strata calibrate
 * writes the file in XDG_CACHE_HOME and plan then uses its rates, an
 * option's rate winning; a broken file is an error saying to calibrate
 * again. */
static void calibrate_writes_the_rates_plan_reads(void **state)
{
	(void)state;
	const char *plan[] = {"plan", STORIES, "--json", "--device", "cpu",
			      "--device-memory", "1GiB", "--host-memory", "1GiB",
			      "--memory-bandwidth", "5GB", NULL};
	json_t *doc = plan_run_json(plan);
	assert_string_equal(source_of(doc, "host_memory_bytes_per_second"),
			    "default");
	json_decref(doc);
	/* two types: the file and its reading are the claim here, and the
	 * sanitizer build measures the fifteen types for minutes */
	const char *cal[] = {"calibrate", "--cpu-only", "--bytes", "32MiB",
			     "--memory-bytes", "32MiB", "--repeats", "1",
			     "--types", "BF16,Q8_0", NULL};
	cli_result r = plan_run(cal);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "host memory read"));
	assert_non_null(strstr(r.out, "a 32.00 MiB matrix"));
	assert_non_null(strstr(r.out, "written to "));
	assert_non_null(strstr(r.out, plan_cache_dir));
	cli_result_free(&r);
	doc = plan_run_json(plan);
	assert_string_equal(source_of(doc, "host_memory_bytes_per_second"),
			    "calibrated");
	assert_string_equal(source_of(doc, "cpu_flops"), "calibrated");
	assert_string_equal(source_of(doc, "memory_bytes_per_second"), "option");
	assert_string_equal(source_of(doc, "disk_bytes_per_second"), "default");
	json_decref(doc);
	char path[128];
	snprintf(path, sizeof path, "%s/strata/rates.json", plan_cache_dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"schema_version\": 9}", f);
	fclose(f);
	r = plan_run(plan);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "schema_version"));
	assert_non_null(strstr(r.err, "strata calibrate"));
	cli_result_free(&r);
	/* run, logits and bench plan with the same file (their plans are the
	 * plan command's): the broken one stops them too */
	const char *users[][12] = {
		{"run", STORIES, "-p", "Once", "-n", "1", "--device", "cpu", NULL},
		{"logits", STORIES, "--tokens", "1 2", "--out", "/dev/null",
		 "--device", "cpu", NULL},
		{"bench", STORIES, "-p", "4", "-n", "2", "-r", "1", "--device",
		 "cpu", NULL},
	};
	for (int i = 0; i < 3; i++) {
		r = plan_run(users[i]);
		if (r.exit_code != 1 || !strstr(r.err, "schema_version"))
			fail_msg("%s with a broken rates file: exit %d, %s",
				 users[i][0], r.exit_code, r.err);
		cli_result_free(&r);
	}
	unlink(path);
	for (int i = 0; i < 3; i++) { /* and run with none */
		r = plan_run(users[i]);
		if (r.exit_code != 0)
			fail_msg("%s without a rates file: exit %d, %s",
				 users[i][0], r.exit_code, r.err);
		cli_result_free(&r);
	}
	const char *bad[] = {"calibrate", "--bytes", "1MiB", "--cpu-only", NULL};
	r = plan_run(bad);
	assert_int_equal(r.exit_code, 1);
	cli_result_free(&r);
	const char *usage[] = {"calibrate", "--repeats", "0", NULL};
	r = plan_run(usage);
	assert_int_equal(r.exit_code, 2);
	cli_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(calibrate_writes_the_rates_plan_reads),
		cmocka_unit_test(json_plan_of_stories_is_exact),
		cmocka_unit_test(budgets_drive_the_choice),
		cmocka_unit_test(nothing_fits_exits_1_with_every_shortfall),
		cmocka_unit_test(table_lists_candidates_and_reasons),
		cmocka_unit_test(cpu_and_cuda_keep_half_precision_bytes),
		cmocka_unit_test(exclude_removes_tensors_before_sizing),
		cmocka_unit_test(unknown_architecture_still_sizes_weights),
		cmocka_unit_test(without_gpus_the_document_is_unchanged),
		cmocka_unit_test(gpus_plans_each_device_and_a_total),
		cmocka_unit_test(gpus_table_has_a_section_per_device),
		cmocka_unit_test(gpus_without_a_gpu),
		cmocka_unit_test(gpus_nothing_fits_names_the_device),
		cmocka_unit_test(placement_options_are_honoured),
		cmocka_unit_test(usage_errors_exit_2),
		cmocka_unit_test(input_errors_exit_1),
	};
	return cmocka_run_group_tests(tests, plan_cache_make,
				      plan_cache_remove);
}
