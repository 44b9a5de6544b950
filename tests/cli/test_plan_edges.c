/* test_plan_edges.c - every budget one byte short is refused (issue 17):
 * for every reference model, on both device kinds, every candidate the
 * plan lists (resident, each host:D, disk, each placement) is planned
 * again forced, with budgets of exactly its device and host totals, where
 * the plan must select it, and with one byte less of either, where it must
 * not (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/cli_runner.h"

#define DATA STRATA_SOURCE_DIR "/tests/data"

static const char *const models[] = {
	DATA "/reference/llama3_rope_bf16",   DATA "/reference/llama3_rope_f32",
	DATA "/reference/llama_gqa1_f32",     DATA "/reference/llama_gqa2_f32",
	DATA "/reference/llama_gqa2_tied_bf16",
	DATA "/reference/llama_gqa4_f16",     DATA "/reference/mistral_window_bf16",
	DATA "/reference/mistral_window_f32", DATA "/reference/qwen2_bias_f32",
	DATA "/reference/qwen2_bias_tied_f16", DATA "/gguf/stories260K.gguf",
};

static uint64_t u(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v))
		fail_msg("'%s' is not an integer", k);
	return (uint64_t)json_integer_value(v);
}

/* `strata plan MODEL --json` with argv's options: the document (NULL
 * when it is not JSON) and the exit code. */
static json_t *plan(const char *const *argv, int *exit_code)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	*exit_code = r.exit_code;
	json_t *doc = json_loads(r.out, 0, NULL);
	if (!doc)
		fail_msg("exit %d, not JSON: %s", r.exit_code, r.err);
	cli_result_free(&r);
	return doc;
}

/* The options that force candidate c alone (as its name says). */
static size_t forcing(json_t *c, char (*buf)[32], const char **argv)
{
	const char *mode = json_string_value(json_object_get(c, "mode"));
	const char *name = json_string_value(json_object_get(c, "name"));
	size_t n = 0;
	if (!strcmp(mode, "placement")) {
		snprintf(buf[0], 32, "%llu",
			 (unsigned long long)u(c, "resident_units"));
		snprintf(buf[1], 32, "%llu", (unsigned long long)u(c, "cpu_units"));
		argv[n++] = "--resident-units";
		argv[n++] = buf[0];
		argv[n++] = "--cpu-units";
		argv[n++] = buf[1];
		return n;
	}
	snprintf(buf[0], 32, "%s", name);
	argv[n++] = "--residency";
	argv[n++] = buf[0];
	if (!strcmp(mode, "disk")) {
		snprintf(buf[1], 32, "%llu", (unsigned long long)u(c, "lookahead"));
		snprintf(buf[2], 32, "%llu", (unsigned long long)u(c, "queue"));
		argv[n++] = "--lookahead";
		argv[n++] = buf[1];
		argv[n++] = "--queue";
		argv[n++] = buf[2];
	}
	return n;
}

/* The candidate of the document named `name`, or NULL. */
static json_t *named(json_t *doc, const char *name)
{
	json_t *cs = json_object_get(doc, "candidates");
	for (size_t i = 0; i < json_array_size(cs); i++) {
		json_t *c = json_array_get(cs, i);
		if (!strcmp(json_string_value(json_object_get(c, "name")), name))
			return c;
	}
	return NULL;
}

static const char *selected_name(json_t *doc)
{
	json_t *s = json_object_get(doc, "selected");
	return json_is_object(s) ? json_string_value(json_object_get(s, "name"))
				 : NULL;
}

/* Plans c forced with device budget dev and host budget host: whether the
 * plan selected a candidate of c's name (a placement: one of c's name
 * that fits, since a forced placement's statics are still searched). */
static bool selects(const char *model, const char *device, json_t *c,
		    uint64_t dev, uint64_t host, int *exit_code)
{
	char force[3][32], d[32], h[32];
	const char *argv[24] = {"plan", model, "--json", "--device", device,
				"--device-memory", d, "--host-memory", h};
	size_t n = 9;
	snprintf(d, sizeof d, "%llu", (unsigned long long)dev);
	snprintf(h, sizeof h, "%llu", (unsigned long long)host);
	n += forcing(c, force, argv + n);
	argv[n] = NULL;
	json_t *doc = plan(argv, exit_code);
	const char *name = json_string_value(json_object_get(c, "name"));
	const char *sel = selected_name(doc);
	bool placement = !strcmp(json_string_value(json_object_get(c, "mode")),
				 "placement");
	json_t *same = named(doc, name);
	bool ok = sel && (placement ? same && json_is_true(json_object_get(
						      same, "fits"))
				    : !strcmp(sel, name));
	json_decref(doc);
	return ok;
}

/* The candidate of c's name in the plan that forces it, budgets ample
 * (a new reference the caller drops). */
static json_t *forced_twin(const char *model, const char *device, json_t *c)
{
	char force[3][32];
	const char *argv[24] = {"plan", model, "--json", "--device", device,
				"--device-memory", "64GiB", "--host-memory",
				"64GiB"};
	size_t n = 9;
	n += forcing(c, force, argv + n);
	argv[n] = NULL;
	int rc;
	json_t *doc = plan(argv, &rc);
	const char *name = json_string_value(json_object_get(c, "name"));
	json_t *twin = named(doc, name);
	if (rc != 0 || !twin)
		fail_msg("%s %s: forcing %s lists no such candidate", model,
			 device, name);
	json_incref(twin);
	json_decref(doc);
	return twin;
}

static void edges_of(const char *model, const char *device)
{
	int rc;
	const char *argv[] = {"plan", model, "--json", "--device", device,
			      "--device-memory", "64GiB", "--host-memory",
			      "64GiB", NULL};
	json_t *doc = plan(argv, &rc);
	assert_int_equal(rc, 0);
	json_t *cs = json_object_get(doc, "candidates");
	size_t checked = 0;
	for (size_t i = 0; i < json_array_size(cs); i++) {
		json_t *c = json_array_get(cs, i);
		const char *name = json_string_value(json_object_get(c, "name"));
		if (!json_is_true(json_object_get(c, "fits")))
			continue; /* sized past the budgets above: not a case */
		/* a placement the options force (--cpu-units) has one split
		 * for both passes: its totals are the forced plan's own */
		json_t *forced = NULL;
		if (!strcmp(json_string_value(json_object_get(c, "mode")),
			    "placement")) {
			forced = forced_twin(model, device, c);
			c = forced;
		}
		uint64_t dev = u(c, "device_bytes"), host = u(c, "host_bytes");
		if (!selects(model, device, c, dev, host, &rc) || rc != 0)
			fail_msg("%s %s: %s not selected at its own totals "
				 "(device %llu, host %llu; exit %d)", model,
				 device, name, (unsigned long long)dev,
				 (unsigned long long)host, rc);
		if (selects(model, device, c, dev - 1, host, &rc) || rc != 1)
			fail_msg("%s %s: %s selected one device byte short "
				 "(exit %d)", model, device, name, rc);
		if (host && (selects(model, device, c, dev, host - 1, &rc) ||
			     rc != 1))
			fail_msg("%s %s: %s selected one host byte short "
				 "(exit %d)", model, device, name, rc);
		checked++;
		json_decref(forced);
	}
	assert_true(checked >= 4); /* resident, a host window, disk, ... */
	json_decref(doc);
}

static void every_budget_one_byte_short_is_refused(void **state)
{
	(void)state;
	for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
		edges_of(models[m], "cpu");
		edges_of(models[m], "cuda");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_budget_one_byte_short_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
