/* test_session_options.c - the one translation of the command line into
 * a session's options (strata_cli_session_options, residency_options.c)
 * that run, chat, bench and logits open their session with (layer: cli):
 * every option a loading command's help lists reaches the session
 * (--no-mmap and --precision among them: chat and bench once took
 * --no-mmap and dropped it), the defaults map everything, and a command
 * that loads nothing (plan) does not take the loading options. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/commands.h"

/* No command option of its own but --threads; 0 or a usage code. */
static int threads_option(void *ctx, const char *opt, const char *v,
			  bool *known)
{
	*known = !strcmp(opt, "--threads");
	if (*known)
		*(uint64_t *)ctx = strtoull(v, NULL, 10);
	return 0;
}

static void help(FILE *f)
{
	fprintf(f, "usage: test\n");
}

/* argv through the loading commands' argument loop, then the
 * translation: into *so (r kept for the borrowed pointers). */
static void translate(const char *cmd, const char **argv, int argc,
		      strata_cli_residency *r, strata_session_options *so)
{
	uint64_t threads = 0;
	const char *model = NULL;
	argv[0] = cmd;
	strata_cli_residency_init(r);
	int rc = strata_cli_model_args(cmd, argc, (char **)argv, r, help,
				       threads_option, &threads, &model);
	if (rc != 0)
		fail_msg("%s: the arguments were refused (%d)", cmd, rc);
	*so = strata_cli_session_options(r, model, threads);
}

static void every_loading_option_reaches_the_session(void **state)
{
	(void)state;
	static const char *const cmds[] = {"run", "chat", "bench", "logits"};
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		const char *argv[] = {NULL, "m.gguf", "--no-mmap",
				      "--precision", "exact", "--device",
				      "cpu", "--exclude", "vision.*",
				      "--threads", "3", "--device-memory",
				      "1GiB", "--kv-type", "f16", NULL};
		strata_cli_residency r;
		strata_session_options so;
		translate(cmds[i], argv, 15, &r, &so);
		if (!so.no_map)
			fail_msg("%s --no-mmap: the session maps", cmds[i]);
		assert_int_equal(so.precision, STRATA_PRECISION_EXACT);
		assert_string_equal(so.model_path, "m.gguf");
		assert_int_equal(so.threads, 3);
		assert_int_equal(so.exclude_count, 1);
		assert_string_equal(so.exclude[0], "vision.*");
		assert_int_equal(so.plan.device, STRATA_PLAN_DEVICE_CPU);
		assert_true(so.plan.has_device_budget);
		assert_int_equal(so.plan.device_budget_bytes, (uint64_t)1 << 30);
		assert_int_equal(so.plan.shape.kv_type, STRATA_WEIGHT_F16);
		/* what each command adds itself is left to it */
		assert_int_equal(so.positions, 0);
		assert_null(so.load_progress);
		strata_cli_residency_fini(&r);
	}
}

static void the_defaults_map_and_compute_fast(void **state)
{
	(void)state;
	const char *argv[] = {NULL, "dir", NULL};
	strata_cli_residency r;
	strata_session_options so;
	translate("chat", argv, 2, &r, &so);
	assert_false(so.no_map);
	assert_int_equal(so.precision, STRATA_PRECISION_FAST);
	assert_int_equal(so.exclude_count, 0);
	assert_int_equal(so.threads, 0);
	strata_cli_residency_fini(&r);
}

/* plan loads nothing: --no-mmap is not a residency option there (the
 * command's own loop then calls it unknown). */
static void a_command_that_loads_nothing_takes_no_no_mmap(void **state)
{
	(void)state;
	strata_cli_residency r;
	strata_cli_residency_init(&r);
	char *argv[] = {"plan", "--no-mmap", NULL};
	int i = 1;
	strata_error err;
	assert_int_equal(strata_cli_residency_option(&r, 2, argv, &i, &err), 0);
	assert_false(r.no_map);
	r.loads = true;
	assert_int_equal(strata_cli_residency_option(&r, 2, argv, &i, &err), 1);
	assert_true(r.no_map);
	strata_cli_residency_fini(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_loading_option_reaches_the_session),
		cmocka_unit_test(the_defaults_map_and_compute_fast),
		cmocka_unit_test(a_command_that_loads_nothing_takes_no_no_mmap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
