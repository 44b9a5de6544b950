/* plan_support.h - what the strata plan tests share: running the built
 * tool on an argument list, its JSON document, an integer of it, a plan
 * on the CPU under given budgets, and a fresh XDG_CACHE_HOME for every
 * test so no rates file of the machine's user changes a figure (tests/cli,
 * header-only). */
#ifndef STRATA_TESTS_CLI_PLAN_SUPPORT_H
#define STRATA_TESTS_CLI_PLAN_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "support/cli_runner.h"

/* argv (NULL-terminated, without argv[0]) through the built tool, with
 * empty stdin; the caller frees the result. */
static inline cli_result plan_run(const char *const *argv)
{
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	return r;
}

/* The JSON document printed by argv, which must exit 0; the caller owns
 * it. */
static inline json_t *plan_run_json(const char *const *argv)
{
	cli_result r = plan_run(argv);
	if (r.exit_code != 0)
		fail_msg("exit %d: %s", r.exit_code, r.err);
	json_error_t e;
	json_t *doc = json_loads(r.out, 0, &e);
	if (!doc)
		fail_msg("not JSON (%s): %s", e.text, r.out);
	cli_result_free(&r);
	return doc;
}

/* The integer o[k]; fails the test where it is not one. */
static inline uint64_t plan_u(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v))
		fail_msg("'%s' is not an integer", k);
	return (uint64_t)json_integer_value(v);
}

/* `strata plan MODEL --json --device cpu --device-memory DEVICE
 * --host-memory HOST` and the options of extra (NULL-terminated, at most
 * 16; NULL: none): its document, exit 0 asserted. */
static inline json_t *plan_cpu_json(const char *model, const char *device,
				    const char *host, const char *const *extra)
{
	const char *argv[11 + 16] = {"plan", model, "--json", "--device", "cpu",
				     "--device-memory", device,
				     "--host-memory", host};
	size_t n = 9;
	for (; extra && *extra; extra++) {
		assert_true(n < 9 + 16);
		argv[n++] = *extra;
	}
	argv[n] = NULL;
	return plan_run_json(argv);
}

/* Every test's XDG_CACHE_HOME (cmocka group setup and teardown). */
static char plan_cache_dir[64];

static inline int plan_cache_make(void **state)
{
	(void)state;
	snprintf(plan_cache_dir, sizeof plan_cache_dir,
		 "/tmp/strata-cli-plan-XXXXXX");
	if (!mkdtemp(plan_cache_dir))
		return -1;
	return setenv("XDG_CACHE_HOME", plan_cache_dir, 1);
}

static inline int plan_cache_remove(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", plan_cache_dir);
	return system(cmd);
}

#endif
