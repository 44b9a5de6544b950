/* test_plan_seed.c - the seed's sizing cases (seed 001) read back through
 * `strata plan --json`: checkpoints whose tensors are the seed's byte
 * counts (U8 tensors: one byte per element where they execute), whose
 * candidates' `weights` must be the seed's exact figures, with the
 * 256-byte slots in their own keys (layer: cli). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/ckpt_writer.h"
#include "support/cli_runner.h"

/* An integer of the document. jansson's integers are signed and the
 * sparse case has a depth of 2^64 - 1, so plan_text decodes every integer
 * as a double: exact below 2^53, which every figure compared here is but
 * that depth, which is checked in the text as well. */
static uint64_t u(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	if (json_is_integer(v))
		return (uint64_t)json_integer_value(v);
	if (!json_is_real(v))
		fail_msg("'%s' is not a number", k);
	double d = json_real_value(v);
	return d >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)d;
}

static uint64_t slot(uint64_t b)
{
	return (b + 255) / 256 * 256;
}

/* dir/model.safetensors of U8 tensors of the given byte counts. */
static void write_u8(const char *dir, const char *const *names,
		     const uint64_t *bytes, size_t n)
{
	ckw_tensor t[16];
	assert_true(n <= 16);
	for (size_t i = 0; i < n; i++)
		t[i] = (ckw_tensor){.name = names[i], .dtype = "U8",
				    .n_dims = 1, .shape = {bytes[i]},
				    .bytes = bytes[i]};
	char path[512];
	int len = snprintf(path, sizeof path, "%s/model.safetensors", dir);
	assert_true(len > 0 && (size_t)len < sizeof path); /* and gcc 13 sees it */
	ckw_safetensors_file(path, t, n, NULL);
}

/* `strata plan DIR --json` with extra options: the document. The seed's
 * checkpoints have no config.json, so strata run would refuse them: plan
 * prints the sizes and exits 1 saying so. */
static json_t *plan_text(const char *dir, const char *const *extra,
			 char **text)
{
	const char *argv[24] = {"plan", dir, "--json", "--device", "cpu",
				"--device-memory", "1GiB", "--host-memory",
				"1GiB"};
	size_t n = 9;
	for (; extra && *extra; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	cli_result r;
	assert_int_equal(cli_run(argv, "", 0, NULL, &r), 0);
	if (r.exit_code != 1 || !strstr(r.err, "cannot run"))
		fail_msg("exit %d: %s", r.exit_code, r.err);
	json_error_t e;
	json_t *doc = json_loads(r.out, JSON_DECODE_INT_AS_REAL,
				 &e);
	if (!doc)
		fail_msg("not JSON (%s): %s", e.text, r.out);
	if (text) {
		*text = r.out;
		r.out = NULL;
	}
	cli_result_free(&r);
	return doc;
}

static json_t *plan(const char *dir, const char *const *extra)
{
	return plan_text(dir, extra, NULL);
}

/* The candidate named `name`; fails when absent. */
static json_t *candidate(json_t *doc, const char *name)
{
	json_t *cs = json_object_get(doc, "candidates");
	for (size_t i = 0; i < json_array_size(cs); i++) {
		json_t *c = json_array_get(cs, i);
		if (!strcmp(json_string_value(json_object_get(c, "name")), name))
			return c;
	}
	fail_msg("no candidate '%s'", name);
	return NULL;
}

static void expect_weights(json_t *c, uint64_t st, uint64_t win,
			   uint64_t depth)
{
	json_t *w = json_object_get(c, "weights");
	assert_int_equal(json_object_size(w), 4); /* the seed's four only */
	assert_true(u(w, "static_bytes") == st);
	assert_true(u(w, "window_bytes") == win);
	assert_true(u(w, "required_bytes") == st + win);
	assert_true(u(w, "depth") == depth);
}

/* seed 001: sizing_keeps_group_windows_and_excluded_parameters_exact.
 * embedding 7 static; decoder units 0: 2, 1: 3 + 5, 2: 11; vision units
 * 0: 13, 2: 17; the bank at index 2^64 - 1 excluded. */
static const char *const seed_names[] = {
	"embedding", "decoder.layers.0.a", "decoder.layers.1.b",
	"decoder.layers.1.c", "decoder.layers.2.d", "vision.layers.0.e",
	"vision.layers.2.f", "decoder.layers.18446744073709551615.bank"};
static const uint64_t seed_bytes[] = {7, 2, 3, 5, 11, 13, 17, 1};

static void seed_group_windows_read_back_exact(void **state)
{
	(void)state;
	char dir[512];
	cli_tmpdir(dir, sizeof dir, "plan_seed_groups");
	write_u8(dir, seed_names, seed_bytes, 8);
	const char *extra[] = {"--exclude", "*.bank", NULL};
	json_t *doc = plan(dir, extra);
	json_t *layout = json_object_get(doc, "layout");
	assert_true(u(layout, "excluded_tensors") == 1);
	assert_true(u(layout, "exact_static_bytes") == 7);
	assert_true(u(layout, "static_bytes") == 256);
	/* host:2 -> {7, 19, 26, 2}: decoder 1+2 = 8 + 11 */
	expect_weights(candidate(doc, "host:2"), 7, 19, 2);
	/* host:3 -> window 30: vision 0..2 = 13 + 17 */
	expect_weights(candidate(doc, "host:3"), 7, 30, 3);
	/* the disk stream's depth is 2 */
	expect_weights(candidate(doc, "disk"), 7, 19, 2);
	/* resident: every unit, depth = the seed's unit count (3 + 3) */
	expect_weights(candidate(doc, "resident"), 7, 2 + 3 + 5 + 11 + 13 + 17,
		       6);
	/* the regions: each tensor in its own 256-byte slot */
	json_t *h2 = candidate(doc, "host:2");
	assert_true(u(h2, "static_device_bytes") == slot(7));
	assert_true(u(h2, "window_device_bytes") == 3 * 256); /* b, c, d */
	assert_true(u(candidate(doc, "host:3"), "window_device_bytes") ==
		    4 * 256); /* a, b, c, d: decoder's 0..2 has the most slots */
	json_decref(doc);
}

/* seed 001: sparse_unit_indices_do_not_expand_all_intervening_positions. */
static void seed_sparse_indices_read_back_exact(void **state)
{
	(void)state;
	char dir[512];
	cli_tmpdir(dir, sizeof dir, "plan_seed_sparse");
	const char *names[] = {"decoder.layers.0.a",
			       "decoder.layers.18446744073709551614.b"};
	const uint64_t bytes[] = {11, 17};
	write_u8(dir, names, bytes, 2);
	const char *deep[] = {"--residency", "host:18446744073709551615",
			      NULL};
	char *text = NULL;
	json_t *doc = plan_text(dir, deep, &text);
	expect_weights(candidate(doc, "host:18446744073709551615"), 0, 28,
		       UINT64_C(18446744073709551615));
	assert_non_null(strstr(text, "\"depth\": 18446744073709551615"));
	free(text);
	json_decref(doc);
	const char *two[] = {"--residency", "host:2", NULL};
	doc = plan(dir, two);
	expect_weights(candidate(doc, "host:2"), 0, 17, 2);
	json_decref(doc);
}

/* seed 001: sparse_windows_equal_the_dense_geometry_for_every_small_
 * occupancy, through the tool for a sample of occupancies (the library
 * test walks all 256): units 0..7 of bytes unit + 1 where occupied. */
static void seed_dense_geometry_read_back_exact(void **state)
{
	(void)state;
	static const unsigned masks[] = {0x01, 0x81, 0x5a, 0xa5, 0xff, 0x3c};
	for (size_t m = 0; m < sizeof masks / sizeof *masks; m++) {
		char dir[512], label[64];
		snprintf(label, sizeof label, "plan_seed_dense_%02x", masks[m]);
		cli_tmpdir(dir, sizeof dir, label);
		char names[8][48];
		const char *np[8];
		uint64_t bytes[8], dense[8] = {0};
		size_t n = 0;
		for (unsigned k = 0; k < 8; k++) {
			if (!(masks[m] & (1u << k)))
				continue;
			snprintf(names[n], sizeof names[n],
				 "decoder.layers.%u.w", k);
			np[n] = names[n];
			bytes[n++] = dense[k] = k + 1;
		}
		write_u8(dir, np, bytes, n);
		json_t *doc = plan(dir, NULL);
		json_t *cs = json_object_get(doc, "candidates");
		for (size_t i = 0; i < json_array_size(cs); i++) {
			json_t *c = json_array_get(cs, i);
			if (strcmp(json_string_value(json_object_get(c, "mode")),
				   "host"))
				continue;
			uint64_t d = u(json_object_get(c, "weights"), "depth");
			uint64_t want = 0;
			for (unsigned s = 0; s < 8; s++) {
				uint64_t sum = 0;
				for (unsigned k = s; k < 8 && k < s + d; k++)
					sum += dense[k];
				want = sum > want ? sum : want;
			}
			expect_weights(c, 0, want, d);
		}
		json_decref(doc);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(seed_group_windows_read_back_exact),
		cmocka_unit_test(seed_sparse_indices_read_back_exact),
		cmocka_unit_test(seed_dense_geometry_read_back_exact),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
