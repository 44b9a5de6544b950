/* test_engine_faults.c - the residency engine under faults: EIO and short
 * reads at every read (at create and in the background reader), allocation
 * failure at every allocation site, device OOM, a slow disk (stalls), and
 * the eviction policies (layer: residency). Every failing run must end with
 * a clear error, never a hang, and leak nothing (ASan). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "residency/engine_window.h"
#include "residency/workload_fixture.h"

/* ------------------------------------------------------------------------ */
/* Injected read faults                                                     */
/* ------------------------------------------------------------------------ */

typedef enum fault { FAULT_EIO, FAULT_EOF, FAULT_HALF } fault;

static atomic_long reads_left;
static fault kind;
static atomic_bool half_given;

static ssize_t faulty_pread(int fd, void *buf, size_t count, off_t off)
{
	if (atomic_fetch_sub(&reads_left, 1) > 0)
		return pread(fd, buf, count, off);
	switch (kind) {
	case FAULT_EIO:
		errno = EIO;
		return -1;
	case FAULT_EOF:
		return 0;
	case FAULT_HALF:
		/* half of what was asked, then the file "ends" */
		if (!atomic_exchange(&half_given, true) && count > 1)
			return pread(fd, buf, count / 2, off);
		return 0;
	}
	return -1;
}

static const strata_residency_mode modes[] = {
	STRATA_RESIDENCY_RESIDENT, STRATA_RESIDENCY_HOST, STRATA_RESIDENCY_DISK,
	STRATA_RESIDENCY_DISK};

static strata_residency_config mode_config(workload *w, size_t m)
{
	if (m == 3) /* disk, host 0: reads straight into the device */
		return wl_config_disk(w, 0, 0);
	return wl_config(w, modes[m], 2);
}

/* Fails the n-th read for n = 0, 1, ... until a create and two passes
 * succeed without reaching it. Every failure must be a clear error. */
static void read_fault_loop(fault f)
{
	workload w;
	wl_create(&w, &wl_dense);
	for (int hidden = 0; hidden < 2; hidden++)
	for (size_t m = 0; m < (hidden ? 3u : 4u); m++) {
		strata_backend *b = wl_cpu(hidden);
		int created_failures = 0, background_failures = 0;
		for (long n = 0;; n++) {
			kind = f;
			atomic_store(&half_given, false);
			atomic_store(&reads_left, n);
			strata_sys.pread = faulty_pread;
			strata_residency_config c = mode_config(&w, m);
			strata_residency *e = NULL;
			strata_error err;
			strata_error_clear(&err);
			strata_status s = strata_residency_create(b, &c, &e, &err);
			bool at_create = s != STRATA_OK;
			for (int tok = 0; s == STRATA_OK && tok < 2; tok++)
				s = wl_pass(&w, e, &err);
			if (s == STRATA_OK)
				s = strata_residency_quiesce(e, &err);
			strata_residency_destroy(e);
			strata_sys_reset();
			if (s == STRATA_OK) {
				assert_true(atomic_load(&reads_left) >= 0);
				break;
			}
			if (at_create)
				created_failures++;
			else
				background_failures++;
			/* at create the load's own error; later the reader's,
			 * naming the unit it was reading */
			if (at_create || modes[m] != STRATA_RESIDENCY_DISK) {
				assert_int_equal(s, STRATA_E_CKPT_READ);
				assert_non_null(strstr(err.message, "loading"));
			} else {
				assert_int_equal(s, STRATA_E_RES_READER);
				assert_non_null(strstr(err.message, "background read of unit"));
			}
			assert_non_null(strstr(err.message, "model.safetensors"));
			assert_true(err.fix[0] != '\0');
			assert_true(n < 200);
		}
		/* every mode failed at create (statics, loads); the disk
		 * modes' readers failed later in the run too */
		assert_true(created_failures > 0);
		if (modes[m] == STRATA_RESIDENCY_DISK)
			assert_true(background_failures > 0);
		strata_backend_destroy(b);
	}
	wl_destroy(&w);
}

static void test_eio_at_every_read_is_a_clear_error(void **state)
{
	(void)state;
	read_fault_loop(FAULT_EIO);
}

static void test_truncated_read_at_every_read_is_a_clear_error(void **state)
{
	(void)state;
	read_fault_loop(FAULT_EOF);
}

static void test_half_read_then_end_is_a_clear_error(void **state)
{
	(void)state;
	read_fault_loop(FAULT_HALF);
}

static void test_reader_failure_sticks_until_destroy(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_DISK, 0);
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	kind = FAULT_EIO;
	atomic_store(&reads_left, 0);
	strata_sys.pread = faulty_pread;
	strata_residency_view v;
	assert_int_equal(strata_residency_acquire(e, 0, 0, &v, &err), STRATA_E_RES_READER);
	assert_non_null(strstr(err.message, "unit 0 of group 'model'"));
	assert_int_equal(strata_residency_acquire(e, 0, 1, &v, &err), STRATA_E_RES_READER);
	assert_int_equal(strata_residency_quiesce(e, &err), STRATA_E_RES_READER);
	strata_sys_reset();
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

/* ------------------------------------------------------------------------ */
/* Allocation failure at every site                                         */
/* ------------------------------------------------------------------------ */

static void test_oom_at_every_allocation_site(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	for (int hidden = 0; hidden < 2; hidden++)
	for (size_t m = 0; m < (hidden ? 3u : 4u); m++) {
		strata_backend *b = wl_cpu(hidden);
		for (long n = 0;; n++) {
			strata_residency_config c = mode_config(&w, m);
			strata_residency *e = NULL;
			strata_error err;
			strata_alloc_fail_after(n);
			strata_status s = strata_residency_create(b, &c, &e, &err);
			for (int tok = 0; s == STRATA_OK && tok < 2; tok++)
				s = wl_pass(&w, e, &err);
			if (s == STRATA_OK)
				s = strata_residency_quiesce(e, &err);
			strata_alloc_fail_after(-1);
			strata_residency_destroy(e);
			if (s == STRATA_OK)
				break;
			/* the engine's own sites say E_NOMEM; a failed allocation
			 * inside a background read comes back as the reader's
			 * error, with the allocation named */
			if (s == STRATA_E_RES_READER) {
				if (!strstr(err.message, "allocate") &&
				    !strstr(err.message, "memory"))
					fail_msg("n=%ld: %s", n, err.message);
			} else {
				assert_int_equal(s, STRATA_E_NOMEM);
			}
			assert_true(n < 400);
		}
		strata_backend_destroy(b);
	}
	wl_destroy(&w);
}

static void *no_region(size_t alignment, size_t bytes)
{
	(void)alignment;
	(void)bytes;
	return NULL;
}

static void test_device_oom_at_create_is_named(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_HOST, 2);
	strata_residency *e = NULL;
	strata_error err;
	strata_backend_cpu_sys.region_alloc = no_region;
	strata_status s = strata_residency_create(b, &c, &e, &err);
	strata_backend_cpu_sys_reset();
	assert_int_equal(s, STRATA_E_DEVICE_OOM);
	assert_null(e);
	assert_non_null(strstr(err.message, "device weights"));
	/* a bounded device smaller than the plan: the backend refuses too */
	strata_backend *small = NULL;
	strata_backend_cpu_options o = {.device_budget_bytes = 4096};
	assert_int_equal(strata_backend_cpu_create(&o, &small, &err), STRATA_OK);
	assert_int_equal(strata_residency_create(small, &c, &e, &err), STRATA_E_DEVICE_OOM);
	strata_backend_destroy(small);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

/* ------------------------------------------------------------------------ */
/* A slow disk: the waits are recorded stalls                               */
/* ------------------------------------------------------------------------ */

static strata_status slow_read(void *user, const strata_tensor *const *t,
			       void *const *dst, size_t n, strata_error *err)
{
	struct timespec ts = {0, 5 * 1000 * 1000};
	nanosleep(&ts, NULL);
	return strata_residency_read_store(user, t, dst, n, err);
}

static void test_slow_reader_stalls_are_counted(void **state)
{
	(void)state;
	workload w;
	wl_create(&w, &wl_dense);
	strata_backend *b = wl_cpu(false);
	strata_residency_config c = wl_config(&w, STRATA_RESIDENCY_DISK, 0);
	c.read = slow_read;
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
	strata_telemetry_snapshot s;
	strata_telemetry_get(strata_residency_telemetry(e), &s);
	/* nothing computes between acquires, so each unit's read (5 ms)
	 * is waited for; the first is not even asked for in advance */
	assert_true(s.stalls >= 1);
	assert_true(s.prefetch_misses >= 1);
	assert_true(s.stall_ns >= 5 * 1000 * 1000);
	assert_int_equal(s.prefetch_hits + s.stalls, w.unit_count);
	assert_true(s.transfers[STRATA_DIR_DISK_TO_HOST].ns >= 5ull * 1000 * 1000 * w.unit_count);
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

/* ------------------------------------------------------------------------ */
/* Eviction policy                                                          */
/* ------------------------------------------------------------------------ */

static void test_lru_and_lfu_pick_their_victims(void **state)
{
	(void)state;
	/* six units; cursor at 4 (handed out), lookahead 1: position 5 is
	 * protected. Units 0-3 cached with these uses and recency. */
	unit_slot u[6];
	memset(u, 0, sizeof u);
	struct strata_residency e;
	memset(&e, 0, sizeof e);
	e.units = u;
	e.n = 6;
	e.cursor = 4;
	e.cursor_valid = true;
	e.cursor_done = true;
	e.cfg.lookahead_units = 1;
	const uint64_t uses[] = {5, 1, 1, 2}, last[] = {3, 7, 4, 2};
	for (int i = 0; i < 4; i++) {
		u[i].host = HOST_CACHED;
		u[i].uses = uses[i];
		u[i].last_use = last[i];
	}
	u[5].host = HOST_CACHED; /* in the lookahead: never a victim */
	u[5].last_use = 0;
	e.cfg.eviction = STRATA_EVICT_LRU;
	assert_int_equal(strata__res_victim(&e, false), 3); /* least recent */
	e.cfg.eviction = STRATA_EVICT_LFU;
	assert_int_equal(strata__res_victim(&e, false), 2); /* 1 use, older */
	/* ties on recency fall to the lower position */
	u[1].last_use = 4;
	assert_int_equal(strata__res_victim(&e, false), 1);
	e.cfg.eviction = STRATA_EVICT_LRU;
	u[3].last_use = 9;
	u[0].last_use = 4;
	assert_int_equal(strata__res_victim(&e, false), 0);
	/* a unit whose copy to the device is still running stays */
	u[0].copy_pending = true;
	assert_int_equal(strata__res_victim(&e, false), 1);
	/* nothing outside the lookahead: only an urgent need takes the
	 * farthest-ahead unit of the lookahead */
	for (int i = 0; i < 4; i++)
		u[i].host = HOST_NONE;
	e.cfg.lookahead_units = 6;
	assert_int_equal(strata__res_victim(&e, false), SIZE_MAX);
	u[0].copy_pending = false;
	u[0].host = HOST_CACHED;
	assert_int_equal(strata__res_victim(&e, true), 0); /* 0 is 2 ahead of 5, farther than 5 */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_eio_at_every_read_is_a_clear_error),
		cmocka_unit_test(test_truncated_read_at_every_read_is_a_clear_error),
		cmocka_unit_test(test_half_read_then_end_is_a_clear_error),
		cmocka_unit_test(test_reader_failure_sticks_until_destroy),
		cmocka_unit_test(test_oom_at_every_allocation_site),
		cmocka_unit_test(test_device_oom_at_create_is_named),
		cmocka_unit_test(test_slow_reader_stalls_are_counted),
		cmocka_unit_test(test_lru_and_lfu_pick_their_victims),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
