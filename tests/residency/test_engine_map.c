/* test_engine_map.c - resident tensors mapped from their files instead of
 * read (issue 25: loading at the page cache's speed), only where the
 * backend computes on this process's memory and the tensor stays as
 * stored; the fallbacks to reading; and the load's progress reports
 * (layer: residency). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "residency/workload_fixture.h"

/* A map hook over the weight store that records what it handed out, or
 * answers `status` without mapping. */
typedef struct mapper {
	strata_weight_store *store;
	strata_status status;
	size_t calls;
	const strata_tensor *tensor[WL_MAX_TENSORS];
	const void *data[WL_MAX_TENSORS];
} mapper;

static strata_status map_hook(void *user, const strata_tensor *t,
			      const void **data, strata_error *err)
{
	mapper *m = user;
	if (m->status != STRATA_OK)
		return strata_fail(err, m->status, "test", "map refused");
	strata_status s = strata_weight_store_map(m->store, t, data, err);
	if (s == STRATA_OK && m->calls < WL_MAX_TENSORS) {
		m->tensor[m->calls] = t;
		m->data[m->calls++] = *data;
	}
	return s;
}

/* The engine's hooks get the read_user: route it through the mapper. */
static strata_status read_hook(void *user, const strata_tensor *const *t,
			       void *const *dst, size_t n, strata_error *err)
{
	return strata_weight_store_read(((mapper *)user)->store, t, dst, n,
					err);
}

static const void *mapped_for(const mapper *m, const strata_tensor *t)
{
	for (size_t i = 0; i < m->calls; i++)
		if (m->tensor[i] == t)
			return m->data[i];
	return NULL;
}

typedef struct progress_log {
	size_t calls;
	uint64_t last_done, total;
	bool monotonic;
} progress_log;

static void on_progress(void *user, uint64_t done, uint64_t total)
{
	progress_log *p = user;
	if (done < p->last_done || (p->calls && total != p->total))
		p->monotonic = false;
	p->calls++;
	p->last_done = done;
	p->total = total;
}

static strata_residency_config with_hooks(workload *w,
					  strata_residency_mode mode,
					  mapper *m, progress_log *p)
{
	strata_residency_config c = wl_config(w, mode, 2);
	*m = (mapper){.store = w->store};
	*p = (progress_log){.monotonic = true};
	c.read = read_hook;
	c.read_user = m;
	c.map = map_hook;
	c.progress = on_progress;
	c.progress_user = p;
	return c;
}

/* Every unit's view and every static hold the written bytes; with
 * `mapped`, each tensor kept as stored points where the map hook said.
 * Returns how many tensors are served from the mapping. */
static size_t check_all(workload *w, strata_residency *e, const mapper *m,
			bool mapped)
{
	strata_error err;
	size_t served = 0;
	for (size_t i = 0; i < w->unit_count; i++) {
		strata_residency_view v;
		const strata_residency_unit *u = &w->units[i];
		assert_int_equal(strata_residency_acquire(e, u->group, u->unit,
							  &v, &err),
				 STRATA_OK);
		for (size_t t = 0; t < v.count; t++) {
			wl_check_tensor(w, &v.tensors[t], v.data[t]);
			const void *p = mapped_for(m, v.tensors[t].tensor);
			if (!mapped || v.tensors[t].convert)
				assert_null(p);
			else if ((uintptr_t)p % 4 == 0)
				assert_ptr_equal(v.data[t], p), served++;
			else /* its kernels could not read it there */
				assert_ptr_not_equal(v.data[t], p);
		}
		assert_int_equal(strata_residency_release(e, u->group, u->unit,
							  &err),
				 STRATA_OK);
	}
	for (size_t i = 0; i < w->static_count; i++) {
		void *data;
		const strata_residency_tensor *t;
		assert_int_equal(strata_residency_static(e, w->statics[i].tensor->name,
							 &data, &t, &err),
				 STRATA_OK);
		wl_check_tensor(w, t, data);
		const void *p = mapped_for(m, t->tensor);
		if (mapped && !t->convert && (uintptr_t)p % 4 == 0)
			assert_ptr_equal(data, p), served++;
		else if (p)
			assert_ptr_not_equal(data, p);
	}
	return served;
}

/* ------------------------------------------------------------------------ */

static void test_resident_cpu_tensors_are_mapped_not_read(void **state)
{
	(void)state;
	wl_spec spec = {.text_units = {0, 1, 2, 3}, .text_count = 4,
			.vision_count = 2, .bf16 = true};
	workload w;
	wl_create(&w, &spec);
	strata_backend *b = wl_cpu(false);
	mapper m;
	progress_log p;
	strata_residency_config c = with_hooks(&w, STRATA_RESIDENCY_RESIDENT,
					       &m, &p);
	strata_residency *e = NULL;
	strata_error err;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	/* bf16 tensors convert to f32 on the CPU: those are read, the rest
	 * mapped; the contents are the file's either way */
	size_t stored = 0;
	for (size_t i = 0; i < w.static_count; i++)
		stored += !w.statics[i].convert;
	for (size_t u = 0; u < w.unit_count; u++)
		for (size_t t = 0; t < w.units[u].tensor_count; t++)
			stored += !w.units[u].tensors[t].convert;
	assert_true(stored > 0 && m.calls == stored);
	assert_true(check_all(&w, e, &m, true) > 0);
	/* the transfers and tiers are counted as for a read */
	strata_telemetry_snapshot s;
	strata_telemetry_get(strata_residency_telemetry(e), &s);
	assert_int_equal(s.transfers[STRATA_DIR_DISK_TO_DEVICE].bytes,
			 w.static_file_bytes + w.unit_file_bytes);
	assert_int_equal(s.peak_bytes[STRATA_TIER_DEVICE],
			 s.planned_bytes[STRATA_TIER_DEVICE]);
	/* one report per static and per unit, the last one complete */
	assert_int_equal(p.calls, w.static_count + w.unit_count);
	assert_true(p.monotonic);
	assert_int_equal(p.total, w.static_file_bytes + w.unit_file_bytes);
	assert_int_equal(p.last_done, p.total);
	strata_weight_store_stats ws;
	strata_weight_store_get_stats(w.store, &ws);
	assert_true(ws.physical_reads >= stored);
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_map_refused_reads_and_map_failure_fails(void **state)
{
	(void)state;
	wl_spec spec = {.text_units = {0, 1, 2}, .text_count = 3};
	workload w;
	wl_create(&w, &spec);
	strata_backend *b = wl_cpu(false);
	mapper m;
	progress_log p;
	strata_residency_config c = with_hooks(&w, STRATA_RESIDENCY_RESIDENT,
					       &m, &p);
	strata_residency *e = NULL;
	strata_error err;
	/* a file that cannot be mapped is read instead */
	m.status = STRATA_E_UNSUPPORTED;
	assert_int_equal(strata_residency_create(b, &c, &e, &err), STRATA_OK);
	assert_int_equal(check_all(&w, e, &m, false), 0);
	strata_residency_destroy(e);
	/* any other failure is the load's, with nothing left behind */
	m.status = STRATA_E_CKPT_READ;
	e = NULL;
	assert_int_equal(strata_residency_create(b, &c, &e, &err),
			 STRATA_E_CKPT_READ);
	assert_null(e);
	assert_non_null(strstr(err.message, "map refused"));
	strata_residency_destroy(e);
	strata_backend_destroy(b);
	wl_destroy(&w);
}

static void test_no_map_off_the_process_memory_or_outside_resident(void **state)
{
	(void)state;
	workload w;
	wl_spec spec = {.text_units = {0, 1, 2, 3}, .text_count = 4};
	wl_create(&w, &spec);
	strata_error err;
	/* host and disk modes copy units into the window (their statics
	 * stay put, and are mapped); a device host code cannot read (CUDA's
	 * case, simulated) is loaded through staging: nothing mapped */
	struct {
		strata_residency_mode mode;
		bool hide;
		uint64_t total; /* the bytes the create loads */
	} cases[] = {
		{STRATA_RESIDENCY_HOST, false, w.static_file_bytes + w.unit_file_bytes},
		{STRATA_RESIDENCY_DISK, false, w.static_file_bytes},
		{STRATA_RESIDENCY_RESIDENT, true, w.static_file_bytes + w.unit_file_bytes},
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		strata_backend *b = wl_cpu(cases[k].hide);
		mapper m;
		progress_log p;
		strata_residency_config c = with_hooks(&w, cases[k].mode, &m, &p);
		strata_residency *e = NULL;
		assert_int_equal(strata_residency_create(b, &c, &e, &err),
				 STRATA_OK);
		if (cases[k].hide)
			assert_int_equal(m.calls, 0);
		for (size_t i = 0; i < m.calls; i++) {
			bool is_static = false;
			for (size_t j = 0; j < w.static_count; j++)
				is_static |= m.tensor[i] == w.statics[j].tensor;
			assert_true(is_static);
		}
		assert_int_equal(wl_pass(&w, e, &err), STRATA_OK);
		assert_int_equal(strata_residency_quiesce(e, &err), STRATA_OK);
		assert_true(p.monotonic);
		assert_int_equal(p.total, cases[k].total);
		assert_int_equal(p.last_done, cases[k].total);
		strata_residency_destroy(e);
		strata_backend_destroy(b);
	}
	wl_destroy(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resident_cpu_tensors_are_mapped_not_read),
		cmocka_unit_test(test_map_refused_reads_and_map_failure_fails),
		cmocka_unit_test(test_no_map_off_the_process_memory_or_outside_resident),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
