/* test_engine.c - the residency engine in each mode over a real safetensors
 * file read through the weight store: bytes per direction, peaks within the
 * plan (and the arena's own high-water mark), prefetch and stall counts,
 * budgets one byte short refused (the seed's layouts to the byte:
 * test_engine_sizing.c) (layer: residency). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "residency/workload_fixture.h"

static uint64_t round256(uint64_t b)
{
	return (b + 255) / 256 * 256;
}

static uint64_t unit_block(const strata_residency_unit *u)
{
	uint64_t s = 0;
	for (size_t i = 0; i < u->tensor_count; i++) {
		const strata_residency_tensor *t = &u->tensors[i];
		s += round256(t->exec_bytes ? t->exec_bytes : t->tensor->bytes);
	}
	return s;
}

/* The window by brute force: every start index of every group, `depth`
 * indices, absent ones weighing 0. */
static uint64_t brute_window(const workload *w, uint64_t depth, bool aligned)
{
	uint64_t best = 0;
	for (size_t a = 0; a < w->unit_count; a++) {
		uint64_t sum = 0;
		for (size_t b = 0; b < w->unit_count; b++) {
			const strata_residency_unit *x = &w->units[a], *y = &w->units[b];
			if (y->group != x->group || y->unit < x->unit ||
			    y->unit - x->unit >= depth)
				continue;
			if (aligned) {
				sum += unit_block(y);
			} else {
				for (size_t i = 0; i < y->tensor_count; i++)
					sum += y->tensors[i].exec_bytes
						       ? y->tensors[i].exec_bytes
						       : y->tensors[i].tensor->bytes;
			}
		}
		if (sum > best)
			best = sum;
	}
	return best;
}

static uint64_t all_blocks(const workload *w)
{
	uint64_t s = 0;
	for (size_t i = 0; i < w->unit_count; i++)
		s += unit_block(&w->units[i]);
	return s;
}

static void snap(strata_residency *e, strata_telemetry_snapshot *s)
{
	strata_telemetry_get(strata_residency_telemetry(e), s);
}

static void assert_within_plan(strata_residency *e)
{
	strata_telemetry_snapshot s;
	strata_arena_stats dev, host;
	strata_residency_sizes z;
	snap(e, &s);
	strata_residency_device_arena_stats(e, &dev);
	strata_residency_host_arena_stats(e, &host);
	strata_residency_get_sizes(e, &z);
	assert_true(s.peak_bytes[STRATA_TIER_DEVICE] <= s.planned_bytes[STRATA_TIER_DEVICE]);
	assert_true(s.peak_bytes[STRATA_TIER_HOST] <= s.planned_bytes[STRATA_TIER_HOST]);
	assert_true(dev.high_water_bytes <= z.static_device_bytes + z.window_device_bytes);
	assert_int_equal(dev.capacity_bytes, z.static_device_bytes + z.window_device_bytes);
	assert_true(host.high_water_bytes <= z.host_bytes);
	/* the recorder and the arena agree on what the device holds */
	assert_int_equal(s.peak_bytes[STRATA_TIER_DEVICE], dev.high_water_bytes);
	assert_int_equal(s.current_bytes[STRATA_TIER_DEVICE], dev.used_bytes);
}

static void assert_within_plan_device(strata_residency *e)
{
	strata_telemetry_snapshot s;
	strata_arena_stats dev;
	snap(e, &s);
	strata_residency_device_arena_stats(e, &dev);
	assert_true(s.peak_bytes[STRATA_TIER_DEVICE] <= s.planned_bytes[STRATA_TIER_DEVICE]);
	assert_int_equal(s.peak_bytes[STRATA_TIER_DEVICE], dev.high_water_bytes);
}

/* ------------------------------------------------------------------------ */

static void test_resident_loads_once_and_every_acquire_hits(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_RESIDENT, 0);
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	for (int tok = 0; tok < 3; tok++)
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
	strata_telemetry_snapshot s;
	snap(e, &s);
	const strata_transfer_stats *x = s.transfers;
	assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].count, w.static_count + w.unit_count);
	assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].bytes,
			 w.static_file_bytes + w.unit_file_bytes);
	for (int d = 0; d < STRATA_DIRECTION_COUNT; d++)
		if (d != STRATA_DIR_DISK_TO_DEVICE)
			assert_int_equal(x[d].count, 0);
	assert_int_equal(s.prefetch_hits, 3 * w.unit_count);
	assert_int_equal(s.stalls, 0);
	/* resident: the plan is static + every unit, and it is all held */
	assert_int_equal(s.planned_bytes[STRATA_TIER_DEVICE],
			 w.static_aligned_bytes + all_blocks(&w));
	assert_int_equal(s.peak_bytes[STRATA_TIER_DEVICE],
			 s.planned_bytes[STRATA_TIER_DEVICE]);
	assert_int_equal(s.peak_bytes[STRATA_TIER_HOST], 0);
	assert_within_plan(e);
	void *data = NULL;
	const strata_residency_tensor *t = NULL;
	assert_int_equal(strata_residency_static(e, "model.norm.weight", &data, &t, &err),
			 STRATA_OK);
	wl_check_tensor(&w, t, data);
	assert_int_equal(strata_residency_static(e, "model.missing", &data, &t, &err),
			 STRATA_E_NOT_FOUND);
	assert_non_null(strstr(err.message, "model.missing"));
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void run_host(uint64_t depth)
{
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_HOST, depth);
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	strata_residency_sizes z;
	strata_residency_get_sizes(e, &z);
	assert_int_equal(z.depth, depth);
	/* the plan's figures: the seed's window of the tensors' own bytes,
	 * the device region of their slots (issue 17) */
	assert_int_equal(z.window_bytes, brute_window(&w, depth, false));
	assert_true(z.window_device_bytes > z.window_bytes);
	assert_int_equal(z.static_device_bytes + z.window_device_bytes,
			 w.static_aligned_bytes + brute_window(&w, depth, true));
	assert_int_equal(z.host_bytes, all_blocks(&w));
	enum { TOKENS = 3 };
	for (int tok = 0; tok < TOKENS; tok++) {
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
		assert_within_plan(e);
	}
	strata_telemetry_snapshot s;
	snap(e, &s);
	const strata_transfer_stats *x = s.transfers;
	/* every unit read from disk once, into host memory */
	assert_int_equal(x[STRATA_DIR_DISK_TO_HOST].count, w.unit_count);
	assert_int_equal(x[STRATA_DIR_DISK_TO_HOST].bytes, w.unit_file_bytes);
	assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].count, w.static_count);
	assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].bytes, w.static_file_bytes);
	/* and copied to the device once per pass */
	assert_int_equal(x[STRATA_DIR_HOST_TO_DEVICE].count, TOKENS * w.unit_count);
	assert_int_equal(x[STRATA_DIR_HOST_TO_DEVICE].bytes, TOKENS * w.unit_exec_bytes);
	assert_int_equal(s.peak_bytes[STRATA_TIER_HOST], all_blocks(&w));
	assert_int_equal(s.planned_bytes[STRATA_TIER_DEVICE],
			 z.static_device_bytes + z.window_device_bytes);
	/* misses: the first unit of each group per pass (the window never
	 * crosses a group boundary); every other unit was prefetched, while
	 * its predecessor was held (depth >= 2) or at its release (depth 1) */
	uint64_t acquires = TOKENS * w.unit_count, firsts = TOKENS * w.group_count;
	assert_int_equal(s.prefetch_requests, acquires - firsts);
	assert_int_equal(s.prefetch_misses, firsts);
	assert_int_equal(s.prefetch_hits + s.stalls, acquires);
	/* after the pass only the static tensors stay on the device */
	assert_int_equal(s.current_bytes[STRATA_TIER_DEVICE], w.static_aligned_bytes);
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_host_window_depth_1(void **state)
{
	(void)state;
	run_host(1);
}

static void test_host_window_depth_2(void **state)
{
	(void)state;
	run_host(2);
}

static void test_host_window_depth_3(void **state)
{
	(void)state;
	run_host(3);
}

static void test_disk_small_cache_rereads_and_evicts(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_DISK, 0);
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	strata_residency_sizes z;
	strata_residency_get_sizes(e, &z);
	assert_int_equal(z.depth, 2);
	enum { TOKENS = 3 };
	for (int tok = 0; tok < TOKENS; tok++) {
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
		assert_within_plan(e);
	}
	assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
	strata_telemetry_snapshot s;
	snap(e, &s);
	const strata_transfer_stats *x = s.transfers;
	/* two slots for eight units: every pass reads every unit again; the
	 * lookahead already started the next pass's first reads (one or two,
	 * depending on how fast the reader was), each evicting one more */
	uint64_t reads = x[STRATA_DIR_DISK_TO_HOST].count;
	assert_true(reads == TOKENS * w.unit_count + 1 || reads == TOKENS * w.unit_count + 2);
	assert_true(x[STRATA_DIR_DISK_TO_HOST].bytes > TOKENS * w.unit_file_bytes);
	assert_int_equal(x[STRATA_DIR_HOST_TO_DEVICE].count, TOKENS * w.unit_count);
	assert_int_equal(x[STRATA_DIR_HOST_TO_DEVICE].bytes, TOKENS * w.unit_exec_bytes);
	assert_int_equal(s.evictions, reads - 2);
	assert_int_equal(s.planned_bytes[STRATA_TIER_HOST], z.host_bytes);
	assert_int_equal(s.peak_bytes[STRATA_TIER_HOST], z.host_bytes);
	assert_int_equal(s.planned_bytes[STRATA_TIER_DISK], w.unit_file_bytes);
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_disk_cache_holding_every_unit_reads_once(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config_disk(&w, w.unit_count, 3);
	c.reader_threads = 2;
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	for (int tok = 0; tok < 3; tok++)
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
	assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
	assert_within_plan(e);
	strata_telemetry_snapshot s;
	snap(e, &s);
	assert_int_equal(s.transfers[STRATA_DIR_DISK_TO_HOST].count, w.unit_count);
	assert_int_equal(s.transfers[STRATA_DIR_DISK_TO_HOST].bytes, w.unit_file_bytes);
	assert_int_equal(s.transfers[STRATA_DIR_HOST_TO_DEVICE].count, 3 * w.unit_count);
	assert_int_equal(s.evictions, 0);
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

/* A disk that takes 10 ms per read call. */
static strata_status slow_read(void *user, const strata_tensor *const *t,
			       void *const *dst, size_t n, strata_error *err)
{
	struct timespec ts = {0, 10 * 1000 * 1000};
	nanosleep(&ts, NULL);
	return strata_residency_read_store(user, t, dst, n, err);
}

static void test_disk_prefetch_is_ready_after_compute(void **state)
{
	(void)state;
	/* With compute taking 30 ms per unit and reads 10 ms, the reader
	 * reads the next unit
	 * and promotes it to the device while the current one computes (not
	 * at the next release), so every unit but the first of each group
	 * (the window does not cross groups) is a hit. One late wake-up on a
	 * busy machine is tolerated. */
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_DISK, 0);
	c.read = slow_read; /* the next read ends during compute, not before */
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	uint64_t ahead = 0;
	for (uint32_t g = 0; g < w.group_count; g++)
		for (uint64_t u = 0; u < 8; u++) {
			strata_residency_view v;
			strata_status st = strata_residency_acquire(e, g, u, &v, &err);
			if (st == STRATA_E_NOT_FOUND)
				break;
			assert_int_equal(st, STRATA_OK);
			struct timespec ts = {0, 30 * 1000 * 1000};
			nanosleep(&ts, NULL);
			wl_check_view(&w, &v);
			/* still computing unit u: is u + 1 on its way to the
			 * device already (charged at placement)? */
			strata_telemetry_snapshot now;
			snap(e, &now);
			uint64_t mine = 0;
			for (size_t t = 0; t < v.count; t++)
				mine += round256(v.tensors[t].exec_bytes ? v.tensors[t].exec_bytes
									 : v.tensors[t].tensor->bytes);
			if (now.current_bytes[STRATA_TIER_DEVICE] > w.static_aligned_bytes + mine)
				ahead++;
			assert_int_equal(strata_residency_release(e, g, u, &err), STRATA_OK);
		}
	strata_telemetry_snapshot s;
	snap(e, &s);
	assert_true(ahead + 1 >= w.unit_count - w.group_count);
	assert_true(s.prefetch_hits + 1 >= w.unit_count - w.group_count);
	assert_int_equal(s.prefetch_hits + s.stalls, w.unit_count);
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_disk_host_zero_reads_straight_to_device(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config_disk(&w, 0, 0);
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(c.sizes.host_bytes, 0);
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	for (int tok = 0; tok < 2; tok++) {
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
		assert_within_plan(e);
	}
	assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
	strata_telemetry_snapshot s;
	snap(e, &s);
	const strata_transfer_stats *x = s.transfers;
	assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].count, w.static_count + 2 * w.unit_count);
	assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].bytes,
			 w.static_file_bytes + 2 * w.unit_file_bytes);
	assert_int_equal(x[STRATA_DIR_DISK_TO_HOST].count, 0);
	assert_int_equal(x[STRATA_DIR_HOST_TO_DEVICE].count, 0);
	assert_int_equal(s.peak_bytes[STRATA_TIER_HOST], 0);
	assert_int_equal(s.prefetch_requests, 2 * (w.unit_count - w.group_count));
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_budgets_one_byte_short_are_refused(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	/* each size the plan gives, one byte short, in every mode */
	strata_residency_config cs[] = {
		wl_config(&w, STRATA_RESIDENCY_RESIDENT, 0),
		wl_config(&w, STRATA_RESIDENCY_HOST, 2),
		wl_config(&w, STRATA_RESIDENCY_DISK, 0),
	};
	for (size_t m = 0; m < 3; m++) {
		strata_residency_config c = cs[m];
		c.sizes.static_device_bytes--;
		wl_create_expect(b, &c, STRATA_E_RES_BUDGET, "device memory: the static tensors");
		c = cs[m];
		c.sizes.window_device_bytes--;
		wl_create_expect(b, &c, STRATA_E_RES_BUDGET, "device memory: the units");
		if (c.mode != STRATA_RESIDENCY_RESIDENT) {
			c = cs[m];
			c.sizes.host_bytes--;
			wl_create_expect(b, &c, STRATA_E_RES_BUDGET, "host memory");
		}
		wl_create_expect(b, &cs[m], STRATA_OK, NULL); /* the exact edge fits */
	}
	strata_residency_config c = cs[1];
	assert_int_equal(c.sizes.host_bytes, all_blocks(&w));
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
	assert_within_plan(e);
	strata_residency_destroy(e);
	/* a deeper window than the plan's sizes were made for is refused */
	c.sizes.depth = 3;
	wl_create_expect(b, &c, STRATA_E_RES_BUDGET, "largest window");
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_bf16_is_converted_to_f32_at_load(void **state)
{
	(void)state;
	wl_spec spec = wl_dense;
	spec.bf16 = true;
	workload w;
	wl_create(&w, &spec);
	strata_backend *b = wl_cpu(false);
	strata_residency_mode modes[] = {STRATA_RESIDENCY_RESIDENT, STRATA_RESIDENCY_HOST,
					 STRATA_RESIDENCY_DISK};
	for (size_t m = 0; m < 3; m++) {
		strata_residency_config c = wl_config(&w, modes[m], 2);
		strata_residency *e = NULL;
		strata_error err;
		assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK); /* checks values */
		void *data;
		const strata_residency_tensor *t;
		assert_int_equal(strata_residency_static(e, "lm_head.weight", &data, &t, &err),
				 STRATA_OK);
		assert_int_equal(t->tensor->dtype, STRATA_DTYPE_BF16);
		wl_check_tensor(&w, t, data);
		strata_telemetry_snapshot s;
		snap(e, &s);
		/* disk bytes are file bytes; device copies carry f32 */
		if (modes[m] == STRATA_RESIDENCY_HOST) {
			assert_int_equal(s.transfers[STRATA_DIR_DISK_TO_HOST].bytes, w.unit_file_bytes);
			assert_int_equal(s.transfers[STRATA_DIR_HOST_TO_DEVICE].bytes, w.unit_exec_bytes);
			assert_true(w.unit_exec_bytes > w.unit_file_bytes);
		}
		strata_residency_destroy(e);
	}
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_acquire_release_order_errors(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_HOST, 2);
	strata_residency *e = NULL;
	strata_error err;
	strata_residency_view v;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	assert_int_equal(strata_residency_release(e, 0, 0, &err), STRATA_E_RES_STATE);
	assert_int_equal(strata_residency_acquire(e, 0, 99, &v, &err), STRATA_E_NOT_FOUND);
	assert_int_equal(strata_residency_acquire(e, 7, 0, &v, &err), STRATA_E_NOT_FOUND);
	assert_int_equal(strata_residency_acquire(e, 0, 0, &v, &err), STRATA_OK);
	assert_int_equal(strata_residency_acquire(e, 0, 0, &v, &err), STRATA_E_RES_STATE);
	assert_non_null(strstr(err.message, "already held"));
	/* holding unit 0 while asking for unit 2 exceeds a window of 2 */
	assert_int_equal(strata_residency_acquire(e, 0, 2, &v, &err), STRATA_E_RES_STATE);
	/* another group while one is held: the window drains per group */
	assert_int_equal(strata_residency_acquire(e, 1, 0, &v, &err), STRATA_E_RES_STATE);
	assert_non_null(strstr(err.message, "still held"));
	/* within the window two units may be held at once */
	assert_int_equal(strata_residency_acquire(e, 0, 1, &v, &err), STRATA_OK);
	wl_check_view(&w, &v);
	assert_int_equal(strata_residency_release(e, 0, 0, &err), STRATA_OK);
	assert_int_equal(strata_residency_release(e, 0, 1, &err), STRATA_OK);
	/* skipping ahead and switching groups work once nothing is held */
	assert_int_equal(strata_residency_acquire(e, 0, 4, &v, &err), STRATA_OK);
	wl_check_view(&w, &v);
	assert_int_equal(strata_residency_release(e, 0, 4, &err), STRATA_OK);
	assert_int_equal(strata_residency_acquire(e, 1, 1, &v, &err), STRATA_OK);
	wl_check_view(&w, &v);
	assert_int_equal(strata_residency_release(e, 1, 1, &err), STRATA_OK);
	assert_within_plan(e);
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static strata_status never_read(void *user, const strata_tensor *const *t,
				void *const *dst, size_t n, strata_error *err)
{
	(void)user;
	(void)t;
	(void)dst;
	(void)n;
	return strata_fail(err, STRATA_E_INTERNAL, "none", "read of an empty model");
}

static void test_empty_model_and_bad_configs(void **state)
{
	(void)state;
	strata_backend *b = wl_cpu(false);
	strata_error err;
	strata_residency *e = NULL;
	strata_residency_view v;
	for (int m = STRATA_RESIDENCY_RESIDENT; m <= STRATA_RESIDENCY_DISK; m++) {
		strata_residency_config c = {.mode = (strata_residency_mode)m, .sizes.depth = 1,
					     .lookahead_units = 1, .queue_depth = 1,
					     .read = never_read};
		assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
		assert_int_equal(strata_residency_acquire(e, 0, 0, &v, &err), STRATA_E_NOT_FOUND);
		assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
		strata_residency_destroy(e);
		e = NULL;
	}
	strata_residency_config c = {.mode = STRATA_RESIDENCY_AUTO, .read = never_read};
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_E_INVALID_ARG);
	c.mode = STRATA_RESIDENCY_HOST; /* depth 0 */
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_E_INVALID_ARG);
	c = (strata_residency_config){.mode = STRATA_RESIDENCY_DISK, .sizes.host_bytes = 1,
				      .read = never_read};
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_E_INVALID_ARG);
	assert_non_null(strstr(err.message, "lookahead"));
	c = (strata_residency_config){.mode = STRATA_RESIDENCY_RESIDENT};
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_E_INVALID_ARG);
	assert_null(e);
	strata_backend_destroy(b);
}

static void test_destroy_with_held_units_and_reads_in_flight(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config_disk(&w, 6, 4);
	c.reader_threads = 3;
	strata_residency *e = NULL;
	strata_error err;
	strata_residency_view v;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	assert_int_equal(strata_residency_acquire(e, 0, 0, &v, &err), STRATA_OK);
	strata_residency_destroy(e); /* ASan: nothing leaks, no thread left */
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_unaddressable_device_loads_through_staging(void **state)
{
	(void)state;
	/* a device host code cannot write (CUDA's case), simulated on the CPU
	 * backend: static tensors and resident units go disk -> host staging
	 * -> device, and every mode still computes on the right bytes */
	wl_spec spec = wl_dense;
	spec.bf16 = true;
	workload w;
	wl_create(&w, &spec);
	strata_backend *b = NULL;
	strata_backend_cpu_options o = {.hide_addressable = true};
	strata_error err;
	assert_int_equal(strata_backend_cpu_create(&o, &b, &err), STRATA_OK);
	strata_residency_mode modes[] = {STRATA_RESIDENCY_RESIDENT, STRATA_RESIDENCY_HOST,
					 STRATA_RESIDENCY_DISK};
	for (size_t m = 0; m < 3; m++) {
		strata_residency_config c = wl_config(&w, modes[m], 2);
		strata_residency *e = NULL;
		assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
		assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
		void *data;
		const strata_residency_tensor *t;
		assert_int_equal(strata_residency_static(e, "lm_head.weight", &data, &t, &err),
				 STRATA_OK);
		wl_check_tensor(&w, t, data);
		strata_telemetry_snapshot s;
		snap(e, &s);
		const strata_transfer_stats *x = s.transfers;
		assert_int_equal(x[STRATA_DIR_DISK_TO_DEVICE].count, 0);
		uint64_t static_exec = 0;
		for (size_t i = 0; i < w.static_count; i++)
			static_exec += w.statics[i].exec_bytes ? w.statics[i].exec_bytes
							       : w.statics[i].tensor->bytes;
		uint64_t units_h2d = modes[m] == STRATA_RESIDENCY_DISK
					     ? x[STRATA_DIR_HOST_TO_DEVICE].bytes - static_exec
					     : w.unit_exec_bytes;
		assert_int_equal(x[STRATA_DIR_HOST_TO_DEVICE].bytes, static_exec + units_h2d);
		assert_int_equal(units_h2d, w.unit_exec_bytes);
		if (modes[m] != STRATA_RESIDENCY_DISK)
			assert_int_equal(x[STRATA_DIR_DISK_TO_HOST].bytes,
					 w.static_file_bytes + w.unit_file_bytes);
		/* the staging buffer is gone once create returns */
		if (modes[m] == STRATA_RESIDENCY_RESIDENT)
			assert_int_equal(s.current_bytes[STRATA_TIER_HOST], 0);
		assert_within_plan_device(e);
		strata_residency_destroy(e);
	}
	/* disk reads cannot land in such a device without host memory */
	strata_residency_config c = wl_config_disk(&w, 0, 0);
	strata_residency *e = NULL;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(err.message, "straight into device memory"));
	strata_backend_destroy(b);
	wl_destroy(&w);
}

/* ------------------------------------------------------------------------ */
/* The seed's layouts: the plan's sizes, enforced to the byte               */
/* ------------------------------------------------------------------------ */

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resident_loads_once_and_every_acquire_hits),
		cmocka_unit_test(test_host_window_depth_1),
		cmocka_unit_test(test_host_window_depth_2),
		cmocka_unit_test(test_host_window_depth_3),
		cmocka_unit_test(test_disk_small_cache_rereads_and_evicts),
		cmocka_unit_test(test_disk_cache_holding_every_unit_reads_once),
		cmocka_unit_test(test_disk_prefetch_is_ready_after_compute),
		cmocka_unit_test(test_disk_host_zero_reads_straight_to_device),
		cmocka_unit_test(test_budgets_one_byte_short_are_refused),
		cmocka_unit_test(test_bf16_is_converted_to_f32_at_load),
		cmocka_unit_test(test_acquire_release_order_errors),
		cmocka_unit_test(test_empty_model_and_bad_configs),
		cmocka_unit_test(test_destroy_with_held_units_and_reads_in_flight),
		cmocka_unit_test(test_unaddressable_device_loads_through_staging),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
