/* test_telemetry.c - the residency recorder and its JSON projection: the
 * seed's projection test ported, saturation, peaks, the human summary
 * (layer: residency). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/residency.h"

/* seed 001: residency_projection_preserves_every_tier_and_ordered_transfer */
static void feed_seed_events(strata_telemetry *t)
{
	strata_telemetry_set_planned(t, STRATA_TIER_DEVICE, 303);
	strata_telemetry_set_planned(t, STRATA_TIER_HOST, 202);
	strata_telemetry_set_planned(t, STRATA_TIER_DISK, 101);
	strata_telemetry_set_resident(t, STRATA_TIER_HOST, 90);
	strata_telemetry_set_resident(t, STRATA_TIER_HOST, 70);
	strata_telemetry_set_resident(t, STRATA_TIER_DEVICE, 60);
	strata_telemetry_set_resident(t, STRATA_TIER_DEVICE, 40);
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++) {
		strata_telemetry_record_transfer(t, d, 10 + (uint64_t)d, 125000000);
		strata_telemetry_record_transfer(t, d, 20, 375000000);
	}
}

static const char expected_residency[] =
	"{\"planned_disk_bytes\":101,\"planned_host_bytes\":202,"
	"\"planned_device_bytes\":303,\"current_host_bytes\":70,"
	"\"current_device_bytes\":40,\"peak_host_bytes\":90,"
	"\"peak_device_bytes\":60,\"transfers\":["
	"{\"direction\":\"device_to_host\",\"count\":2,\"bytes\":30,\"seconds\":0.5},"
	"{\"direction\":\"device_to_disk\",\"count\":2,\"bytes\":31,\"seconds\":0.5},"
	"{\"direction\":\"host_to_device\",\"count\":2,\"bytes\":32,\"seconds\":0.5},"
	"{\"direction\":\"host_to_disk\",\"count\":2,\"bytes\":33,\"seconds\":0.5},"
	"{\"direction\":\"disk_to_device\",\"count\":2,\"bytes\":34,\"seconds\":0.5},"
	"{\"direction\":\"disk_to_host\",\"count\":2,\"bytes\":35,\"seconds\":0.5}]}";

static void test_projection_preserves_every_tier_and_ordered_transfer(void **state)
{
	(void)state;
	strata_telemetry t;
	strata_error err;
	assert_int_equal(strata_telemetry_init(&t, &err), STRATA_OK);
	feed_seed_events(&t);
	strata_telemetry_snapshot snap;
	strata_telemetry_get(&t, &snap);
	strata_weight_store_stats ws = {.backend = "pread"};
	strata_telemetry_device dev = {.name = "cpu", .snapshot = &snap};
	strata_telemetry_report r = {
		.model = "m", .mode = "host", .depth = 2, .static_bytes = 7,
		.window_bytes = 19, .kv_type = "bf16", .kv_cache_bytes = 64,
		.precision = "exact", .load_seconds = 0.25, .run_seconds = 2,
		.tokens = 8, .residency = &snap, .weight_store = &ws,
		.device_count = 1, .devices = &dev};
	strata_json j;
	strata_json_init(&j, false);
	strata_telemetry_write_json(&j, &r);
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	char expected[4096];
	snprintf(expected, sizeof expected,
		 "{\"schema_version\":1,\"model\":{\"path\":\"m\"},"
		 "\"plan\":{\"mode\":\"host\",\"depth\":2,\"lookahead_units\":0,"
		 "\"queue_depth\":0,\"static_bytes\":7,\"window_bytes\":19,"
		 "\"kv_type\":\"bf16\",\"kv_cache_bytes\":64,"
		 "\"precision\":\"exact\"},"
		 "\"timing\":{\"load_seconds\":0.25,\"run_seconds\":2,\"tokens\":8,"
		 "\"tokens_per_second\":4},"
		 "\"residency\":%s,"
		 "\"weight_store\":{\"backend\":\"pread\",\"cache_hits\":0,"
		 "\"cache_misses\":0,\"evictions\":0,\"currently_cached_shards\":0,"
		 "\"touched_shard_paths\":[],\"payload_shard_paths\":[],"
		 "\"physical_reads\":0,\"physical_read_bytes\":0,"
		 "\"coalesced_group_hits\":0},"
		 "\"devices\":[{\"name\":\"cpu\",\"budget_device_bytes\":0,"
		 "\"budget_host_bytes\":0,\"residency\":%s,\"prefetch_requests\":0,"
		 "\"prefetch_hits\":0,\"prefetch_misses\":0,\"stalls\":0,"
		 "\"stall_seconds\":0,\"evictions\":0,\"evicted_bytes\":0}],"
		 "\"placement\":{\"units\":{"
		 "\"resident\":{\"count\":0,\"bytes\":0,\"seconds\":0},"
		 "\"window\":{\"count\":0,\"bytes\":0,\"seconds\":0},"
		 "\"cpu\":{\"count\":0,\"bytes\":0,\"seconds\":0},"
		 "\"disk\":{\"count\":0,\"bytes\":0,\"seconds\":0}},"
		 "\"activations\":["
		 "{\"link\":\"host_to_device\",\"count\":0,\"bytes\":0,\"seconds\":0},"
		 "{\"link\":\"device_to_host\",\"count\":0,\"bytes\":0,\"seconds\":0},"
		 "{\"link\":\"device_to_device\",\"count\":0,\"bytes\":0,\"seconds\":0}],"
		 "\"kv_staged\":["
		 "{\"direction\":\"to_computing_site\",\"count\":0,\"bytes\":0,\"seconds\":0},"
		 "{\"direction\":\"back_to_cache\",\"count\":0,\"bytes\":0,\"seconds\":0}],"
		 /* h2d 0.5 s of a 2 s run; disk 0.5 + 0.5 s */
		 "\"busy_fraction\":{\"host_to_device\":0.25,\"disk\":0.5,"
		 "\"cpu_compute\":0,\"activations\":0}}}\n",
		 expected_residency, expected_residency);
	assert_string_equal(j.buf, expected);
	strata_json_fini(&j);
	strata_telemetry_fini(&t);
}

static void test_weight_store_paths_and_counts_are_projected(void **state)
{
	(void)state;
	const char *touched[] = {"a.safetensors", "b.safetensors"};
	const char *payload[] = {"b.safetensors"};
	strata_weight_store_stats ws = {
		.backend = "o_direct", .cache_hits = 1, .cache_misses = 2,
		.evictions = 3, .currently_cached_shards = 4, .touched_count = 2,
		.touched_shard_paths = touched, .payload_count = 1,
		.payload_shard_paths = payload, .physical_reads = 5,
		.physical_read_bytes = 6, .coalesced_group_hits = 7};
	strata_telemetry_report r = {.model = "m", .mode = "disk", .weight_store = &ws};
	strata_json j;
	strata_error err;
	strata_json_init(&j, false);
	strata_telemetry_write_json(&j, &r);
	assert_int_equal(strata_json_finish(&j, &err), STRATA_OK);
	assert_non_null(strstr(j.buf,
		"\"weight_store\":{\"backend\":\"o_direct\",\"cache_hits\":1,"
		"\"cache_misses\":2,\"evictions\":3,\"currently_cached_shards\":4,"
		"\"touched_shard_paths\":[\"a.safetensors\",\"b.safetensors\"],"
		"\"payload_shard_paths\":[\"b.safetensors\"],\"physical_reads\":5,"
		"\"physical_read_bytes\":6,\"coalesced_group_hits\":7}"));
	assert_non_null(strstr(j.buf, "\"devices\":[]"));
	/* no precision given: the default's name */
	assert_non_null(strstr(j.buf, "\"precision\":\"fast\"}"));
	strata_json_fini(&j);
}

static void test_counters_saturate_instead_of_wrapping(void **state)
{
	(void)state;
	strata_telemetry t;
	strata_error err;
	assert_int_equal(strata_telemetry_init(&t, &err), STRATA_OK);
	strata_telemetry_record_transfer(&t, STRATA_DIR_DISK_TO_HOST, UINT64_MAX - 1, UINT64_MAX);
	strata_telemetry_record_transfer(&t, STRATA_DIR_DISK_TO_HOST, 5, 5);
	strata_telemetry_add_resident(&t, STRATA_TIER_HOST, UINT64_MAX);
	strata_telemetry_add_resident(&t, STRATA_TIER_HOST, 1);
	strata_telemetry_record_stall(&t, UINT64_MAX);
	strata_telemetry_record_stall(&t, 1);
	strata_telemetry_record_eviction(&t, UINT64_MAX);
	strata_telemetry_record_eviction(&t, UINT64_MAX);
	strata_telemetry_snapshot s;
	strata_telemetry_get(&t, &s);
	assert_int_equal(s.transfers[STRATA_DIR_DISK_TO_HOST].count, 2);
	assert_true(s.transfers[STRATA_DIR_DISK_TO_HOST].bytes == UINT64_MAX);
	assert_true(s.transfers[STRATA_DIR_DISK_TO_HOST].ns == UINT64_MAX);
	assert_true(s.current_bytes[STRATA_TIER_HOST] == UINT64_MAX);
	assert_true(s.stall_ns == UINT64_MAX);
	assert_int_equal(s.stalls, 2);
	assert_true(s.evicted_bytes == UINT64_MAX);
	/* subtracting below zero stops at zero; the peak keeps the maximum */
	strata_telemetry_sub_resident(&t, STRATA_TIER_HOST, UINT64_MAX);
	strata_telemetry_sub_resident(&t, STRATA_TIER_HOST, 3);
	strata_telemetry_get(&t, &s);
	assert_int_equal(s.current_bytes[STRATA_TIER_HOST], 0);
	assert_true(s.peak_bytes[STRATA_TIER_HOST] == UINT64_MAX);
	/* an out-of-range tier or direction is ignored, never a crash */
	strata_telemetry_set_resident(&t, (strata_tier)7, 1);
	strata_telemetry_record_transfer(&t, (strata_direction)99, 1, 1);
	strata_telemetry_fini(&t);
}

static void test_names_follow_the_fixed_order(void **state)
{
	(void)state;
	const char *want[] = {"device_to_host", "device_to_disk", "host_to_device",
			      "host_to_disk", "disk_to_device", "disk_to_host"};
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++)
		assert_string_equal(strata_direction_name(d), want[d]);
	assert_string_equal(strata_direction_name(STRATA_DIRECTION_COUNT), "unknown");
	assert_string_equal(strata_tier_name(STRATA_TIER_DISK), "disk");
	assert_string_equal(strata_tier_name(STRATA_TIER_DEVICE), "device");
}

static void test_summary_shows_rates_peaks_and_stalls(void **state)
{
	(void)state;
	strata_telemetry_snapshot s = {0};
	s.transfers[STRATA_DIR_HOST_TO_DEVICE] = (strata_transfer_stats){4, 2000000000, 1000000000};
	s.peak_bytes[STRATA_TIER_DEVICE] = 1 << 20;
	s.planned_bytes[STRATA_TIER_DEVICE] = 2 << 20;
	s.budget_bytes[STRATA_TIER_DEVICE] = 4 << 20;
	s.stalls = 3;
	s.stall_ns = 250000000;
	s.prefetch_hits = 5;
	s.prefetch_misses = 2;
	s.prefetch_requests = 9;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	strata_telemetry_print_summary(f, &s);
	fclose(f);
	assert_non_null(strstr(buf, "host_to_device"));
	assert_non_null(strstr(buf, "(2.00 GB/s)"));
	assert_null(strstr(buf, "disk_to_host")); /* nothing moved that way */
	assert_non_null(strstr(buf, "peak device   1.00 MiB of 2.00 MiB planned, budget 4.00 MiB"));
	/* Each figure says what it counts; acquires = ready + waited. */
	assert_non_null(strstr(buf, "units acquired: 8; 5 found ready, 3 waited "
				    "0.250 s in all (2 of them before their load "
				    "had started)"));
	assert_non_null(strstr(buf, "prefetch: 9 unit loads started ahead of "
				    "need"));
	free(buf);
}

static void test_device_totals_add_and_saturate(void **state)
{
	(void)state;
	strata_telemetry_snapshot a = {0}, b = {0};
	a.planned_bytes[STRATA_TIER_DEVICE] = 100;
	b.planned_bytes[STRATA_TIER_DEVICE] = 50;
	a.peak_bytes[STRATA_TIER_HOST] = UINT64_MAX - 1;
	b.peak_bytes[STRATA_TIER_HOST] = 5;
	a.transfers[STRATA_DIR_HOST_TO_DEVICE] = (strata_transfer_stats){1, 10, 100};
	b.transfers[STRATA_DIR_HOST_TO_DEVICE] = (strata_transfer_stats){2, 20, 200};
	b.stalls = 3;
	b.evicted_bytes = 7;
	strata_telemetry_snapshot_add(&a, &b);
	assert_int_equal(a.planned_bytes[STRATA_TIER_DEVICE], 150);
	assert_true(a.peak_bytes[STRATA_TIER_HOST] == UINT64_MAX);
	assert_int_equal(a.transfers[STRATA_DIR_HOST_TO_DEVICE].count, 3);
	assert_int_equal(a.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes, 30);
	assert_int_equal(a.transfers[STRATA_DIR_HOST_TO_DEVICE].ns, 300);
	assert_int_equal(a.stalls, 3);
	assert_int_equal(a.evicted_bytes, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_projection_preserves_every_tier_and_ordered_transfer),
		cmocka_unit_test(test_weight_store_paths_and_counts_are_projected),
		cmocka_unit_test(test_counters_saturate_instead_of_wrapping),
		cmocka_unit_test(test_names_follow_the_fixed_order),
		cmocka_unit_test(test_summary_shows_rates_peaks_and_stalls),
		cmocka_unit_test(test_device_totals_add_and_saturate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
