/* test_memory.c - the CPU backend's memory half: arenas, device
 * bounds, injected device OOM, copy streams and events (layer: backend). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"

static strata_backend *make_cpu(uint64_t limit)
{
	strata_backend *b = NULL;
	strata_error err;
	strata_backend_cpu_options opt = {.device_budget_bytes = limit};
	assert_int_equal(strata_backend_cpu_create(&opt, &b, &err), STRATA_OK);
	return b;
}

static void test_caps_report_cpu_addressable_async(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(0);
	strata_backend_caps caps;
	strata_error err;
	assert_int_equal(strata_backend_get_caps(b, &caps, &err), STRATA_OK);
	assert_string_equal(caps.name, "cpu");
	assert_true(caps.device_addressable);
	assert_true(caps.async_copy);
	strata_backend_destroy(b);
}

static void test_arena_aligns_first_fit_and_tracks_high_water(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(0);
	strata_arena *a = NULL;
	strata_error err;
	assert_int_equal(strata_arena_create(b, STRATA_ARENA_DEVICE, 1024,
					     "test window", &a, &err),
			 STRATA_OK);
	void *p1, *p2, *p3, *p4;
	assert_int_equal(strata_arena_alloc(a, 1, &p1, &err), STRATA_OK);
	assert_int_equal(strata_arena_alloc(a, 257, &p2, &err), STRATA_OK);
	assert_int_equal((uintptr_t)p1 % STRATA_ALIGN, 0);
	assert_int_equal((char *)p2 - (char *)p1, 256);
	strata_arena_stats st;
	strata_arena_get_stats(a, &st);
	assert_int_equal(st.used_bytes, 768);
	assert_int_equal(st.high_water_bytes, 768);
	/* 256 left: 257 bytes round to 512 and are refused */
	assert_int_equal(strata_arena_alloc(a, 257, &p3, &err), STRATA_E_RES_BUDGET);
	assert_non_null(strstr(err.message, "test window"));
	assert_non_null(strstr(err.message, "768 of 1024"));
	strata_arena_get_stats(a, &st);
	assert_int_equal(st.refused, 1);
	assert_int_equal(st.used_bytes, 768);
	/* freeing the first block opens a 256-byte gap that first fit reuses */
	assert_int_equal(strata_arena_free(a, p1, &err), STRATA_OK);
	assert_int_equal(strata_arena_alloc(a, 200, &p3, &err), STRATA_OK);
	assert_ptr_equal(p3, p1);
	assert_int_equal(strata_arena_alloc(a, 256, &p4, &err), STRATA_OK);
	assert_ptr_equal((char *)p4, (char *)p2 + 512);
	strata_arena_get_stats(a, &st);
	assert_int_equal(st.used_bytes, 1024);
	assert_int_equal(st.high_water_bytes, 1024);
	/* a pointer it did not hand out changes nothing */
	assert_int_equal(strata_arena_free(a, (char *)p2 + 8, &err),
			 STRATA_E_INVALID_ARG);
	strata_arena_get_stats(a, &st);
	assert_int_equal(st.live_blocks, 3);
	strata_arena_destroy(a);
	strata_backend_destroy(b);
}

static void test_device_bound_refuses_second_region(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(4096);
	strata_arena *a = NULL, *a2 = NULL;
	strata_error err;
	assert_int_equal(strata_arena_create(b, STRATA_ARENA_DEVICE, 3000,
					     "first", &a, &err),
			 STRATA_OK);
	strata_backend_memory mem;
	assert_int_equal(strata_backend_memory_info(b, &mem, &err), STRATA_OK);
	assert_int_equal(mem.total_bytes, 4096);
	assert_int_equal(mem.free_bytes, 1096);
	assert_int_equal(strata_arena_create(b, STRATA_ARENA_DEVICE, 2000,
					     "second", &a2, &err),
			 STRATA_E_DEVICE_OOM);
	assert_null(a2);
	assert_non_null(strstr(err.message, "second arena"));
	strata_arena_destroy(a);
	assert_int_equal(strata_backend_memory_info(b, &mem, &err), STRATA_OK);
	assert_int_equal(mem.free_bytes, 4096);
	strata_backend_destroy(b);
}

static void *refuse_region(size_t alignment, size_t bytes)
{
	(void)alignment;
	(void)bytes;
	return NULL;
}

static void test_injected_device_oom_is_a_clear_error(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(0);
	strata_arena *a = NULL;
	strata_error err;
	strata_backend_cpu_sys.region_alloc = refuse_region;
	strata_status s = strata_arena_create(b, STRATA_ARENA_DEVICE, 1 << 20,
					      "device window", &a, &err);
	strata_backend_cpu_sys_reset();
	assert_int_equal(s, STRATA_E_DEVICE_OOM);
	assert_null(a);
	assert_non_null(strstr(err.message, "device window"));
	assert_true(err.fix[0] != '\0');
	strata_backend_destroy(b);
}

static void test_arena_create_and_alloc_survive_oom_loop(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(0);
	for (long n = 0;; n++) {
		strata_arena *a = NULL;
		strata_error err;
		strata_alloc_fail_after(n);
		strata_status s = strata_arena_create(b, STRATA_ARENA_HOST_PINNED,
						      4096, "host cache", &a, &err);
		void *p = NULL;
		if (s == STRATA_OK)
			s = strata_arena_alloc(a, 100, &p, &err);
		strata_alloc_fail_after(-1);
		if (s == STRATA_OK) {
			assert_non_null(p);
			strata_arena_destroy(a);
			break;
		}
		assert_int_equal(s, STRATA_E_NOMEM);
		strata_arena_destroy(a);
		assert_true(n < 10);
	}
	strata_backend_destroy(b);
}

static void test_copies_complete_in_order_with_events(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(0);
	strata_error err;
	strata_stream *s = NULL;
	strata_event *e0 = NULL, *e1 = NULL, *never = NULL;
	assert_int_equal(strata_stream_create(b, &s, &err), STRATA_OK);
	assert_int_equal(strata_event_create(b, &e0, &err), STRATA_OK);
	assert_int_equal(strata_event_create(b, &e1, &err), STRATA_OK);
	assert_int_equal(strata_event_create(b, &never, &err), STRATA_OK);
	bool done = false;
	assert_int_equal(strata_event_query(b, never, &done, &err), STRATA_OK);
	assert_true(done); /* never recorded: complete */
	enum { N = 8 << 20 };
	unsigned char *src = strata_alloc(N), *dst = strata_alloc(N);
	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < N; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	memset(dst, 0, N);
	/* elapsed before completion is an error, not a guess */
	double sec = -1;
	assert_int_equal(strata_event_record(b, e0, s, &err), STRATA_OK);
	for (int i = 0; i < 4; i++)
		assert_int_equal(strata_backend_copy_h2d_async(
					 b, s, dst + i * (N / 4), src + i * (N / 4),
					 N / 4, &err),
				 STRATA_OK);
	assert_int_equal(strata_event_record(b, e1, s, &err), STRATA_OK);
	assert_int_equal(strata_event_wait(b, e1, &err), STRATA_OK);
	assert_int_equal(strata_event_query(b, e1, &done, &err), STRATA_OK);
	assert_true(done);
	assert_memory_equal(src, dst, N);
	assert_int_equal(strata_event_elapsed(b, e0, e1, &sec, &err), STRATA_OK);
	assert_true(sec >= 0.0 && sec < 10.0);
	/* recording again moves the mark: not complete until reached */
	assert_int_equal(strata_backend_copy_h2d_async(b, s, dst, src, N, &err),
			 STRATA_OK);
	assert_int_equal(strata_event_record(b, e0, s, &err), STRATA_OK);
	assert_int_equal(strata_backend_synchronize(b, NULL, &err), STRATA_OK);
	assert_int_equal(strata_event_query(b, e0, &done, &err), STRATA_OK);
	assert_true(done);
	strata_free(src);
	strata_free(dst);
	strata_event_destroy(b, e0);
	strata_event_destroy(b, e1);
	strata_event_destroy(b, never);
	strata_stream_destroy(b, s);
	strata_backend_destroy(b);
}

static void test_elapsed_of_pending_event_is_an_error(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(0);
	strata_error err;
	strata_event *e0 = NULL, *e1 = NULL;
	assert_int_equal(strata_event_create(b, &e0, &err), STRATA_OK);
	assert_int_equal(strata_event_create(b, &e1, &err), STRATA_OK);
	double sec;
	assert_int_equal(strata_event_elapsed(b, e0, e1, &sec, &err),
			 STRATA_E_DEVICE);
	strata_event_destroy(b, e0);
	strata_event_destroy(b, e1);
	strata_backend_destroy(b);
}

static void test_copy_overlaps_host_work(void **state)
{
	(void)state;
	/* A 64 MiB copy queued on the stream returns before it is done: the
	 * caller's thread is free while the copy thread works. One try could
	 * lose the race if this thread is descheduled for the whole copy, so
	 * three tries must see it in progress at least once. */
	strata_backend *b = make_cpu(0);
	strata_error err;
	strata_stream *s = NULL;
	strata_event *e = NULL;
	assert_int_equal(strata_stream_create(b, &s, &err), STRATA_OK);
	assert_int_equal(strata_event_create(b, &e, &err), STRATA_OK);
	size_t n = 64u << 20;
	unsigned char *src = strata_alloc(n), *dst = strata_alloc(n);
	assert_non_null(src);
	assert_non_null(dst);
	memset(src, 0x5a, n);
	int in_progress = 0;
	for (int attempt = 0; attempt < 3; attempt++) {
		memset(dst, 0, n);
		assert_int_equal(strata_backend_copy_h2d_async(b, s, dst, src, n, &err),
				 STRATA_OK);
		assert_int_equal(strata_event_record(b, e, s, &err), STRATA_OK);
		bool done = true;
		assert_int_equal(strata_event_query(b, e, &done, &err), STRATA_OK);
		in_progress += !done;
		assert_int_equal(strata_event_wait(b, e, &err), STRATA_OK);
		assert_int_equal(dst[n - 1], 0x5a);
	}
	assert_true(in_progress > 0);
	strata_free(src);
	strata_free(dst);
	strata_event_destroy(b, e);
	strata_stream_destroy(b, s);
	strata_backend_destroy(b);
}

static void test_stream_and_event_survive_oom_loop(void **state)
{
	(void)state;
	strata_backend *b = make_cpu(0);
	char src[64] = "payload", dst[64] = {0};
	for (long n = 0;; n++) {
		strata_error err;
		strata_stream *s = NULL;
		strata_event *e = NULL;
		strata_alloc_fail_after(n);
		strata_status st = strata_stream_create(b, &s, &err);
		if (st == STRATA_OK)
			st = strata_event_create(b, &e, &err);
		if (st == STRATA_OK)
			st = strata_backend_copy_h2d_async(b, s, dst, src, 64, &err);
		if (st == STRATA_OK)
			st = strata_event_record(b, e, s, &err);
		strata_alloc_fail_after(-1);
		if (st == STRATA_OK)
			assert_int_equal(strata_event_wait(b, e, &err), STRATA_OK);
		strata_event_destroy(b, e);
		strata_stream_destroy(b, s);
		if (st == STRATA_OK) {
			assert_string_equal(dst, "payload");
			break;
		}
		assert_int_equal(st, STRATA_E_NOMEM);
		assert_true(n < 10);
	}
	strata_backend_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_caps_report_cpu_addressable_async),
		cmocka_unit_test(test_arena_aligns_first_fit_and_tracks_high_water),
		cmocka_unit_test(test_device_bound_refuses_second_region),
		cmocka_unit_test(test_injected_device_oom_is_a_clear_error),
		cmocka_unit_test(test_arena_create_and_alloc_survive_oom_loop),
		cmocka_unit_test(test_copies_complete_in_order_with_events),
		cmocka_unit_test(test_elapsed_of_pending_event_is_an_error),
		cmocka_unit_test(test_copy_overlaps_host_work),
		cmocka_unit_test(test_stream_and_event_survive_oom_loop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
