/* test_rates.c - the rates file: its place in the XDG cache directory,
 * its round trip, its refusal of anything else, how its rates fill a
 * plan's options (an option's rate stays), and a real calibration of the
 * CPU (layer: plan). Every test points XDG_CACHE_HOME at its own folder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "plan/internal.h"
#include "strata/backend.h"
#include "strata/plan.h"

static char dir[64];

static int make_dir(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/strata-rates-XXXXXX");
	assert_non_null(mkdtemp(dir));
	setenv("XDG_CACHE_HOME", dir, 1);
	return 0;
}

static int remove_dir(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* ------------------------------------------------------------------------ */

static void path_follows_xdg_then_home(void **state)
{
	(void)state;
	char p[256], want[256];
	strata_error err;
	assert_int_equal(strata_plan_rates_path(p, sizeof p, &err), STRATA_OK);
	snprintf(want, sizeof want, "%s/strata/rates.json", dir);
	assert_string_equal(p, want);
	/* a relative XDG_CACHE_HOME is ignored (the spec) */
	setenv("XDG_CACHE_HOME", "relative", 1);
	setenv("HOME", "/home/someone", 1);
	assert_int_equal(strata_plan_rates_path(p, sizeof p, &err), STRATA_OK);
	assert_string_equal(p, "/home/someone/.cache/strata/rates.json");
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HOME");
	assert_int_equal(strata_plan_rates_path(p, sizeof p, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.fix, "XDG_CACHE_HOME"));
	setenv("XDG_CACHE_HOME", dir, 1);
	assert_int_equal(strata_plan_rates_path(p, 8, &err), STRATA_E_OVERFLOW);
}

static void file_round_trips_and_creates_its_folder(void **state)
{
	(void)state;
	char p[256];
	strata_error err;
	assert_int_equal(strata_plan_rates_path(p, sizeof p, &err), STRATA_OK);
	strata_plan_rates r = {.host_memory = 106e9, .cpu_flops = 2e12,
			       .threads = 16, .device_count = 2};
	r.devices[0] = (strata_plan_device_rates){.name = "cuda:0", .h2d = 55e9, .d2h = 54e9, .memory = 4.1e12, .flops = 600e12};
	r.devices[1] = (strata_plan_device_rates){.name = "cuda:1", .h2d = 50e9, .d2h = 49e9, .memory = 4e12, .flops = 590e12};
	assert_int_equal(strata_plan_rates_save(p, &r, &err), STRATA_OK);
	strata_plan_rates back;
	bool found;
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_OK);
	assert_true(found);
	assert_true(back.host_memory == 106e9 && back.cpu_flops == 2e12 &&
		    back.threads == 16 && back.device_count == 2);
	assert_string_equal(back.devices[1].name, "cuda:1");
	assert_true(back.devices[1].h2d == 50e9 && back.devices[1].flops == 590e12);
	/* no file: not found, distinct from a bad one */
	char missing[300];
	snprintf(missing, sizeof missing, "%s/none.json", dir);
	assert_int_not_equal(strata_plan_rates_load(missing, &back, &found, &err),
			     STRATA_OK);
	assert_false(found);
}

/* Each malformed file is E_PARSE naming what is wrong; the fix says to
 * calibrate again. */
static void malformed_files_are_refused_by_key(void **state)
{
	(void)state;
	const struct {
		const char *text, *names;
	} bad[] = {
		{"[]", "not a JSON object"},
		{"{", "not a JSON object"},
		{"{\"schema_version\": 2, \"host\": {}}", "schema_version"},
		{"{\"schema_version\": 1}", "'host'"},
		{"{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": -1}}",
		 "host_memory_bytes_per_second"},
		{"{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, \"cpu_flops\": 1e9, \"threads\": 0}, \"devices\": []}",
		 "host.threads"},
		{"{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, \"cpu_flops\": 1e9, \"threads\": 2}}",
		 "devices"},
		{"{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, \"cpu_flops\": 1e9, \"threads\": 2}, \"devices\": [{\"device\": \"cuda:0\", \"h2d_bytes_per_second\": \"fast\"}]}",
		 "h2d_bytes_per_second"},
	};
	char p[300];
	snprintf(p, sizeof p, "%s/bad.json", dir);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		write_text(p, bad[i].text);
		strata_plan_rates r;
		bool found;
		strata_error err;
		assert_int_equal(strata_plan_rates_load(p, &r, &found, &err),
				 STRATA_E_PARSE);
		assert_true(found);
		if (!strstr(err.message, bad[i].names))
			fail_msg("case %zu: '%s' lacks '%s'", i, err.message,
				 bad[i].names);
		assert_non_null(strstr(err.fix, "strata calibrate"));
	}
}

/* Measured rates fill what no option gave, for the plan's own device;
 * the plan then names them calibrated, and the rest defaults. */
static void rates_fill_what_options_leave(void **state)
{
	(void)state;
	strata_plan_rates r = {.host_memory = 100e9, .cpu_flops = 1e12,
			       .threads = 4, .device_count = 1};
	r.devices[0] = (strata_plan_device_rates){.name = "cuda:1", .h2d = 50e9, .d2h = 45e9, .memory = 4e12, .flops = 500e12};
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CUDA,
				 .h2d_bandwidth = 10e9};
	strata_plan_rates_apply(&r, 1, &o);
	assert_true(o.h2d_bandwidth == 10e9); /* the option's */
	assert_true(o.d2h_bandwidth == 45e9 && o.memory_bandwidth == 4e12);
	assert_true(o.host_memory_bandwidth == 100e9 && o.device_flops == 500e12);
	assert_false(o.calibrated_rates & (1u << STRATA_PLAN_RATE_H2D));
	assert_true(o.calibrated_rates & (1u << STRATA_PLAN_RATE_D2H));
	/* another device index takes only the host's */
	strata_plan_options other = {.device = STRATA_PLAN_DEVICE_CUDA};
	strata_plan_rates_apply(&r, 0, &other);
	assert_true(other.memory_bandwidth == 0 && other.host_memory_bandwidth == 100e9);
	/* cpu: the host's rates are the device's */
	strata_plan_options cpu = {.device = STRATA_PLAN_DEVICE_CPU};
	strata_plan_rates_apply(&r, 0, &cpu);
	assert_true(cpu.memory_bandwidth == 100e9 && cpu.device_flops == 1e12);
}

/* A real, small calibration of this machine's CPU. */
static void calibration_measures_the_cpu(void **state)
{
	(void)state;
	strata_plan_calibrate_options o = {
		.bytes = 32u << 20, .memory_bytes = 32u << 20, .repeats = 1,
		.cpu_only = true,
		.types = 1u << STRATA_BLOCK_F32 | 1u << STRATA_BLOCK_Q8_0,
		.gemm_rows = 16};
	strata_plan_rates r;
	strata_error err;
	assert_int_equal(strata_plan_calibrate(&o, &r, &err), STRATA_OK);
	assert_true(r.host_memory > 1e8 && r.host_memory < 1e13);
	assert_int_equal(r.host_memory_bytes, 32u << 20);
	assert_true(r.cpu_flops > 1e7 && r.cpu_flops < 1e15);
	assert_true(r.threads >= 1 && r.device_count == 0);
	/* the types asked for, through the CPU kernels, and none other */
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		bool asked = t == STRATA_BLOCK_F32 || t == STRATA_BLOCK_Q8_0;
		const strata_plan_type_rate *k = &r.cpu_types[t];
		double layer = r.cpu_layer[t]; /* the decode layer's */
		if (asked)
			assert_true(k->gemv > 1e7 && k->gemv < 1e13 &&
				    k->gemm > 1e6 && k->gemm < 1e15 &&
				    layer > 1e6 && layer < 1e13);
		else
			assert_true(k->gemv == 0 && k->gemm == 0 && layer == 0);
	}
	assert_int_equal(r.gemm_rows, 16);
	assert_true(r.cpu_launch_seconds > 0 && r.cpu_launch_seconds < 0.1);
	/* a list with no type the CPU takes, and too many rows */
	o.types = 1u << 30;
	assert_int_equal(strata_plan_calibrate(&o, &r, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.fix, "Q8_0"));
	o.types = 1u << STRATA_BLOCK_F32;
	o.gemm_rows = 9000;
	assert_int_equal(strata_plan_calibrate(&o, &r, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.fix, "--rows"));
	o.gemm_rows = 16;
	o.memory_bytes = 1u << 20;
	assert_int_equal(strata_plan_calibrate(&o, &r, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.fix, "--memory-bytes"));
	o.memory_bytes = 32u << 20;
	o.bytes = 1u << 20;
	assert_int_equal(strata_plan_calibrate(&o, &r, &err),
			 STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.fix, "--bytes"));
}

/* Without a size the host memory read goes past the last-level cache:
 * at least 1 GiB and 4x the caches /sys names (the 256 MiB of the other
 * measures sat partly in the GPU host's cache, 89-147 GB/s from run to
 * run), within 8 GiB and a quarter of the memory. */
static void the_host_read_goes_past_the_last_level_cache(void **state)
{
	(void)state;
	uint64_t m = strata__plan_memory_matrix_bytes();
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t quarter = (uint64_t)pages * (uint64_t)page / 4;
	uint64_t floor = quarter < (1ull << 30) ? quarter : 1ull << 30;
	assert_true(m >= floor && m <= 8ull << 30 && m <= quarter);
	/* every cache level cpu0 has, the largest times its instances */
	uint64_t largest = 0;
	for (int i = 0; i < 16; i++) {
		char path[96];
		snprintf(path, sizeof path,
			 "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		FILE *f = fopen(path, "r");
		if (!f)
			break;
		unsigned long long k = 0;
		char unit = 0;
		if (fscanf(f, "%llu%c", &k, &unit) == 2)
			k <<= unit == 'K' ? 10 : unit == 'M' ? 20 : 0;
		largest = k > largest ? k : largest;
		fclose(f);
	}
	if (4 * largest <= (8ull << 30) && 4 * largest <= quarter)
		assert_true(m >= 4 * largest);
	print_message("host memory matrix %llu MiB (largest cache %llu KiB)\n",
		      (unsigned long long)(m >> 20),
		      (unsigned long long)(largest >> 10));
}

/* The per-type rates, fixed costs and rows read back; a file without
 * them (an earlier strata's) still reads, with those 0; a type name a
 * later strata may add is skipped, a known one with a bad value is not. */
static void type_rates_round_trip_and_old_files_read(void **state)
{
	(void)state;
	char p[300];
	strata_error err;
	snprintf(p, sizeof p, "%s/typed.json", dir);
	strata_plan_rates r = {.host_memory = 100e9, .cpu_flops = 1e12,
			       .threads = 16, .gemm_rows = 512,
			       .cpu_launch_seconds = 6e-6, .device_count = 1};
	r.cpu_types[STRATA_BLOCK_BF16] = (strata_plan_type_rate){.gemv = 40e9, .gemm = 0.4e12};
	r.cpu_types[STRATA_BLOCK_Q8_0] = (strata_plan_type_rate){.gemv = 30e9, .gemm = 0.3e12};
	r.cpu_layer[STRATA_BLOCK_BF16] = 31e9;
	r.devices[0] = (strata_plan_device_rates){
		.name = "cuda:0", .h2d = 55e9, .d2h = 54e9, .memory = 3e12,
		.flops = 14e12, .launch_seconds = 3e-6,
		.crossing_seconds = 25e-6, .h2d_shared = 49e9,
		.host_memory_shared = 64e9};
	r.devices[0].types[STRATA_BLOCK_BF16] =
		(strata_plan_type_rate){.gemv = 3.4e12, .gemm = 300e12};
	assert_int_equal(strata_plan_rates_save(p, &r, &err), STRATA_OK);
	strata_plan_rates back;
	bool found;
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_OK);
	assert_true(back.gemm_rows == 512 && back.cpu_launch_seconds == 6e-6);
	assert_true(back.cpu_types[STRATA_BLOCK_BF16].gemv == 40e9 &&
		    back.cpu_layer[STRATA_BLOCK_BF16] == 31e9 &&
		    back.cpu_layer[STRATA_BLOCK_Q8_0] == 0 &&
		    back.cpu_types[STRATA_BLOCK_Q8_0].gemm == 0.3e12 &&
		    back.cpu_types[STRATA_BLOCK_F32].gemv == 0);
	assert_true(back.devices[0].launch_seconds == 3e-6 &&
		    back.devices[0].crossing_seconds == 25e-6 &&
		    back.devices[0].h2d_shared == 49e9 &&
		    back.devices[0].host_memory_shared == 64e9 &&
		    back.devices[0].types[STRATA_BLOCK_BF16].gemm == 300e12);
	write_text(p, "{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, "
		      "\"cpu_flops\": 1e9, \"threads\": 2}, \"devices\": [{\"device\": \"cuda:0\", "
		      "\"h2d_bytes_per_second\": 1e9, \"d2h_bytes_per_second\": 1e9, "
		      "\"memory_bytes_per_second\": 1e9, \"device_flops\": 1e9}]}");
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_OK);
	assert_true(back.gemm_rows == 0 && back.cpu_launch_seconds == 0 &&
		    back.devices[0].crossing_seconds == 0 &&
		    back.devices[0].h2d_shared == 0 &&
		    back.cpu_types[STRATA_BLOCK_F32].gemv == 0);
	write_text(p, "{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, "
		      "\"cpu_flops\": 1e9, \"threads\": 2, \"types\": {\"MXFP9\": {}, "
		      "\"Q8_0\": {\"gemv_bytes_per_second\": 2e9}}}, \"devices\": []}");
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_OK);
	assert_true(back.cpu_types[STRATA_BLOCK_Q8_0].gemv == 2e9 &&
		    back.cpu_types[STRATA_BLOCK_Q8_0].gemm == 0);
	write_text(p, "{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, "
		      "\"cpu_flops\": 1e9, \"threads\": 2, \"types\": {\"Q8_0\": "
		      "{\"gemv_bytes_per_second\": -2}}}, \"devices\": []}");
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_E_PARSE);
	assert_non_null(strstr(err.message, "gemv_bytes_per_second"));
	/* applied: the file's types where the options have none, marked */
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CUDA};
	o.cpu_types[STRATA_BLOCK_Q8_0] = (strata_plan_type_rate){.gemv = 1e9, .gemm = 1e9};
	strata_plan_rates_apply(&r, 0, &o);
	assert_true(o.cpu_types[STRATA_BLOCK_BF16].gemv == 40e9);
	assert_true(o.cpu_types[STRATA_BLOCK_Q8_0].gemv == 1e9); /* kept */
	assert_true(o.cpu_layer[STRATA_BLOCK_BF16] == 31e9 &&
		    o.cpu_layer[STRATA_BLOCK_Q8_0] == 0);
	assert_true(o.calibrated_cpu_types == 1u << STRATA_BLOCK_BF16);
	assert_true(o.device_types[STRATA_BLOCK_BF16].gemm == 300e12 &&
		    o.calibrated_device_types == 1u << STRATA_BLOCK_BF16);
	assert_true(o.h2d_shared_bandwidth == 49e9 &&
		    o.host_memory_shared_bandwidth == 64e9 &&
		    (o.calibrated_rates >> STRATA_PLAN_RATE_H2D_SHARED & 1));
	assert_true(o.crossing_seconds == 25e-6 &&
		    o.device_launch_seconds == 3e-6 &&
		    o.cpu_launch_seconds == 6e-6);
}

/* A type's fixed layer costs round-trip through the file; a file of an
 * earlier strata (none) reads them as 0, a bad one is refused by key. */
static void layer_fixed_costs_round_trip(void **state)
{
	(void)state;
	char p[300];
	strata_error err;
	snprintf(p, sizeof p, "%s/fixed.json", dir);
	strata_plan_rates r = {.host_memory = 100e9, .cpu_flops = 1e12,
			       .threads = 16, .device_count = 1};
	r.devices[0] = (strata_plan_device_rates){
		.name = "cuda:0", .h2d = 55e9, .d2h = 54e9, .memory = 3e12,
		.flops = 14e12};
	r.devices[0].types[STRATA_BLOCK_Q8_0] = (strata_plan_type_rate){
		.gemv = 2.3e12, .gemm = 265e12, .layer_seconds = 24e-6,
		.row_seconds = 0.43e-6};
	assert_int_equal(strata_plan_rates_save(p, &r, &err), STRATA_OK);
	strata_plan_rates back;
	bool found;
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_OK);
	const strata_plan_type_rate *q = &back.devices[0].types[STRATA_BLOCK_Q8_0];
	assert_true(q->layer_seconds == 24e-6 && q->row_seconds == 0.43e-6 &&
		    q->gemv == 2.3e12);
	assert_true(back.devices[0].types[STRATA_BLOCK_F32].layer_seconds == 0);
	strata_plan_options o = {.device = STRATA_PLAN_DEVICE_CUDA};
	strata_plan_rates_apply(&back, 0, &o);
	assert_true(o.device_types[STRATA_BLOCK_Q8_0].layer_seconds == 24e-6);
	write_text(p, "{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, "
		      "\"cpu_flops\": 1e9, \"threads\": 2, \"types\": {\"Q8_0\": "
		      "{\"gemv_bytes_per_second\": 2e9}}}, \"devices\": []}");
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_OK);
	assert_true(back.cpu_types[STRATA_BLOCK_Q8_0].layer_seconds == 0 &&
		    back.cpu_types[STRATA_BLOCK_Q8_0].row_seconds == 0);
	write_text(p, "{\"schema_version\": 1, \"host\": {\"host_memory_bytes_per_second\": 1e9, "
		      "\"cpu_flops\": 1e9, \"threads\": 2, \"types\": {\"Q8_0\": "
		      "{\"row_fixed_seconds\": 0}}}, \"devices\": []}");
	assert_int_equal(strata_plan_rates_load(p, &back, &found, &err),
			 STRATA_E_PARSE);
	assert_non_null(strstr(err.message, "row_fixed_seconds"));
}

/* A whole layer timed on the CPU backend through the kernel table, a
 * decode step and a prefill chunk (the code calibrate runs on each CUDA
 * device), and the fixed costs the plan takes from them. */
static void a_layer_is_timed_and_its_fixed_costs_derived(void **state)
{
	(void)state;
	strata_backend *b = NULL;
	strata_compute *c = NULL;
	strata_error err;
	assert_int_equal(strata_backend_create("cpu", 0, NULL, &b, &err),
			 STRATA_OK);
	assert_int_equal(strata_compute_create_on(b, 0, &c, &err), STRATA_OK);
	strata__plan_layer_time dec, pre;
	/* 1 MiB: the smallest shape, hidden 512 (kv 128, FFN 1792) */
	assert_int_equal(strata__plan_calibrate_layer(b, c, STRATA_BLOCK_Q8_0,
						      1u << 20, 1, 1, &dec,
						      &err),
			 STRATA_OK);
	assert_int_equal(strata__plan_calibrate_layer(b, c, STRATA_BLOCK_Q8_0,
						      1u << 20, 32, 1, &pre,
						      &err),
			 STRATA_OK);
	const double elements = 512.0 * 512 * 2 + 128.0 * 512 * 2 +
				3.0 * 1792 * 512;
	assert_true(dec.dim == 512 && dec.rows == 1 && pre.rows == 32);
	assert_true(dec.elements == elements && pre.elements == elements);
	assert_int_equal(dec.bytes, (uint64_t)elements / 32 * 34);
	assert_true(dec.seconds > 0 && pre.seconds > dec.seconds);
	strata_compute_destroy(c);
	strata_backend_destroy(b);
	/* the derivation, on numbers chosen to be exact: 1 MB at 1 GB/s is
	 * 1 ms of products; a 3 ms decode leaves 2 ms; a 32-row chunk of 1e6
	 * elements at 64 GFLOP/s is 1 ms dense, below the 1 ms read, and
	 * 3 ms + 32 x 0.25 ms = 11 ms */
	strata__plan_layer_time d = {.seconds = 3e-3, .bytes = 1000000,
				     .elements = 1e6, .rows = 1};
	strata__plan_layer_time q = {.seconds = 11e-3, .bytes = 1000000,
				     .elements = 1e6, .rows = 32};
	double l, r;
	strata__plan_layer_fixed(&d, &q, 1e9, 64e9, &l, &r);
	assert_true(fabs(l - 2e-3) < 1e-12 && fabs(r - 0.25e-3) < 1e-12);
	/* a layer faster than its products: measured, none (1 ns) */
	d.seconds = 0.5e-3;
	strata__plan_layer_fixed(&d, NULL, 1e9, 64e9, &l, &r);
	assert_true(l == 1e-9 && r == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(path_follows_xdg_then_home),
		cmocka_unit_test(file_round_trips_and_creates_its_folder),
		cmocka_unit_test(malformed_files_are_refused_by_key),
		cmocka_unit_test(rates_fill_what_options_leave),
		cmocka_unit_test(calibration_measures_the_cpu),
		cmocka_unit_test(the_host_read_goes_past_the_last_level_cache),
		cmocka_unit_test(type_rates_round_trip_and_old_files_read),
		cmocka_unit_test(layer_fixed_costs_round_trip),
		cmocka_unit_test(a_layer_is_timed_and_its_fixed_costs_derived),
	};
	return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
