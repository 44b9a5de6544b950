/* workload_fixture.c - see workload_fixture.h. The file is written by the tests' one
 * checkpoint writer (support/ckpt_writer.h) (layer: residency tests). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "residency/workload_fixture.h"
#include "support/ckpt_writer.h"
#include "strata/topology.h"

/* Value j of tensor id k: small integers, exact in f32 and bf16. */
static float value(size_t k, uint64_t j)
{
	return (float)((k * 7 + j) % 251);
}

typedef struct wl_tensor {
	char name[96];
	bool bf16;
	uint64_t elements;
} wl_tensor;

static size_t plan_tensors(const wl_spec *s, wl_tensor *t)
{
	size_t n = 0;
	snprintf(t[n].name, sizeof t[n].name, "model.embed_tokens.weight");
	t[n++].elements = 320;
	snprintf(t[n].name, sizeof t[n].name, "model.norm.weight");
	t[n++].elements = 64;
	snprintf(t[n].name, sizeof t[n].name, "lm_head.weight");
	t[n].bf16 = s->bf16;
	t[n++].elements = 192;
	for (size_t i = 0; i < s->text_count; i++) {
		uint64_t u = s->text_units[i];
		snprintf(t[n].name, sizeof t[n].name, "model.layers.%llu.attn.weight",
			 (unsigned long long)u);
		t[n++].elements = 64 * (u % 5 + 1);
		snprintf(t[n].name, sizeof t[n].name, "model.layers.%llu.mlp.weight",
			 (unsigned long long)u);
		t[n].bf16 = s->bf16;
		t[n++].elements = 100 + 3 * (u % 4); /* not a multiple of 64 */
		snprintf(t[n].name, sizeof t[n].name, "model.layers.%llu.norm.weight",
			 (unsigned long long)u);
		t[n++].elements = 64;
	}
	for (size_t u = 0; u < s->vision_count; u++) {
		snprintf(t[n].name, sizeof t[n].name, "model.vision.layers.%zu.proj.weight", u);
		t[n++].elements = 128 + 64 * u;
	}
	return n;
}

/* The tensors as one safetensors file, each value from value(). */
static void write_file(const char *path, const wl_tensor *t, size_t n)
{
	ckw_tensor *ct = calloc(n, sizeof *ct);
	void **data = calloc(n, sizeof *data);
	assert_non_null(ct);
	assert_non_null(data);
	for (size_t i = 0; i < n; i++) {
		data[i] = malloc(t[i].elements * (t[i].bf16 ? 2 : 4));
		assert_non_null(data[i]);
		for (uint64_t j = 0; j < t[i].elements; j++) {
			float v = value(i, j);
			uint32_t bits;
			memcpy(&bits, &v, 4);
			if (t[i].bf16)
				((uint16_t *)data[i])[j] = (uint16_t)(bits >> 16);
			else
				((float *)data[i])[j] = v;
		}
		ct[i] = (ckw_tensor){.name = t[i].name,
				     .type = t[i].bf16 ? CKW_BF16 : CKW_F32,
				     .n_dims = 1, .shape = {t[i].elements},
				     .data = data[i]};
	}
	ckw_safetensors_file(path, ct, n, NULL);
	for (size_t i = 0; i < n; i++)
		free(data[i]);
	free(data);
	free(ct);
}

static size_t group_index(workload *w, const char *g, size_t len)
{
	for (size_t i = 0; i < w->group_count; i++)
		if (strlen(w->groups[i]) == len && !memcmp(w->groups[i], g, len))
			return i;
	assert_true(w->group_count < 2);
	w->groups[w->group_count] = len == 5 ? "model" : "model.vision";
	assert_int_equal(strlen(w->groups[w->group_count]), len);
	return w->group_count++;
}

static uint64_t round256(uint64_t b)
{
	return (b + 255) / 256 * 256;
}

/* Classifies every catalog tensor with the topology rule and fills the
 * config arrays: statics, then units with their tensors (exec bytes: f32
 * on the CPU, so bf16 doubles and converts). */
static void classify(workload *w)
{
	size_t n = strata_catalog_count(w->catalog), used = 0;
	for (size_t i = 0; i < n; i++) {
		const strata_tensor *t = strata_catalog_tensor(w->catalog, i);
		strata_owner o;
		strata_error err;
		assert_int_equal(strata_topology_owner(t->name, &o, &err), STRATA_OK);
		bool conv = t->dtype == STRATA_DTYPE_BF16;
		strata_residency_tensor rt = {.tensor = t, .convert = conv,
					      .exec_bytes = conv ? t->elements * 4 : 0};
		uint64_t exec = conv ? t->elements * 4 : t->bytes;
		if (o.kind == STRATA_OWNER_STATIC) {
			w->statics[w->static_count++] = rt;
			w->static_file_bytes += t->bytes;
			w->static_aligned_bytes += round256(exec);
			continue;
		}
		uint32_t g = (uint32_t)group_index(w, o.group, o.group_len);
		strata_residency_unit *u = NULL;
		for (size_t k = 0; k < w->unit_count; k++)
			if (w->units[k].group == g && w->units[k].unit == o.unit)
				u = &w->units[k];
		if (!u) {
			u = &w->units[w->unit_count++];
			*u = (strata_residency_unit){.group = g, .unit = o.unit};
		}
		/* the tensors of one unit are adjacent in the file */
		if (!u->tensors)
			u->tensors = &w->unit_tensors[used];
		assert_ptr_equal(u->tensors + u->tensor_count, &w->unit_tensors[used]);
		w->unit_tensors[used++] = rt;
		u->tensor_count++;
		w->unit_file_bytes += t->bytes;
		w->unit_exec_bytes += exec;
	}
}

const wl_spec wl_dense = {.text_units = {0, 1, 2, 3, 4, 5}, .text_count = 6,
			  .vision_count = 2};

void wl_create(workload *w, const wl_spec *spec)
{
	memset(w, 0, sizeof *w);
	snprintf(w->dir, sizeof w->dir, "/tmp/strata-residency-XXXXXX");
	const char *tmp = getenv("TMPDIR");
	if (tmp && strlen(tmp) < 80)
		snprintf(w->dir, sizeof w->dir, "%s/strata-residency-XXXXXX", tmp);
	assert_non_null(mkdtemp(w->dir));
	snprintf(w->path, sizeof w->path, "%s/model.safetensors", w->dir);
	wl_tensor *t = calloc(WL_MAX_TENSORS, sizeof *t);
	assert_non_null(t);
	w->count = plan_tensors(spec, t);
	assert_true(w->count <= WL_MAX_TENSORS);
	write_file(w->path, t, w->count);
	for (size_t i = 0; i < w->count; i++)
		w->names[i] = strdup(t[i].name);
	free(t);
	strata_error err;
	assert_int_equal(strata_catalog_open(w->path, &w->catalog, &err), STRATA_OK);
	assert_int_equal(strata_weight_store_create(w->catalog, NULL, &w->store, &err),
			 STRATA_OK);
	classify(w);
}

void wl_destroy(workload *w)
{
	strata_weight_store_destroy(w->store);
	strata_catalog_destroy(w->catalog);
	for (size_t i = 0; i < w->count; i++)
		free(w->names[i]);
	unlink(w->path);
	rmdir(w->dir);
}

strata_status wl_plan(workload *w, strata_plan_options *o, wl_planned *p,
		      strata_error *err)
{
	memset(p, 0, sizeof *p);
	assert_int_equal(strata_plan_source_create(w->catalog, STRATA_PLAN_DEVICE_CPU,
						   NULL, 0, &p->src, err),
			 STRATA_OK);
	strata_plan_machine m = {.device_free_known = true, .host_available_known = true,
				 .device_free_bytes = 1 << 30,
				 .host_available_bytes = 1 << 30};
	o->device = STRATA_PLAN_DEVICE_CPU;
	return strata_plan_create(strata_plan_source_layout(p->src), &p->arch,
				  strata_plan_source_weight_dtype(p->src), o, &m,
				  &p->plan, err);
}

void wl_plan_destroy(wl_planned *p)
{
	strata_plan_destroy(p->plan);
	strata_plan_source_destroy(p->src);
}

strata_residency_config wl_config_planned(workload *w,
					  const strata_plan_options *o)
{
	strata_residency_config c = {
		.group_count = w->group_count, .groups = w->groups,
		.static_count = w->static_count, .statics = w->statics,
		.unit_count = w->unit_count, .units = w->units,
		.read = strata_residency_read_store, .read_user = w->store,
		.convert = strata_residency_convert_f32};
	strata_plan_options po = *o;
	wl_planned p;
	strata_error err;
	if (wl_plan(w, &po, &p, &err) != STRATA_OK)
		fail_msg("workload plan: %s", err.message);
	assert_int_equal(strata_residency_config_from_plan(p.plan, &c, &err),
			 STRATA_OK);
	wl_plan_destroy(&p);
	return c;
}

strata_residency_config wl_config(workload *w, strata_residency_mode mode,
				  uint64_t depth)
{
	strata_plan_options o = {
		.mode = mode, .host_depth = depth,
		.has_device_budget = true, .device_budget_bytes = 1 << 24,
		.has_host_budget = true, .host_budget_bytes = 1 << 24,
		.has_lookahead = mode == STRATA_RESIDENCY_DISK, .lookahead = 2,
		.has_queue = mode == STRATA_RESIDENCY_DISK, .queue = 1};
	return wl_config_planned(w, &o);
}

strata_residency_config wl_config_disk(workload *w, uint64_t lookahead,
				       uint64_t queue)
{
	strata_plan_options o = {
		.mode = STRATA_RESIDENCY_DISK,
		.has_device_budget = true, .device_budget_bytes = 1 << 24,
		.has_host_budget = true, .host_budget_bytes = lookahead ? 1 << 24 : 0,
		.has_lookahead = true, .lookahead = lookahead,
		.has_queue = true, .queue = queue};
	return wl_config_planned(w, &o);
}

void wl_check_tensor(const workload *w, const strata_residency_tensor *t,
		     const void *data)
{
	size_t k = 0;
	while (k < w->count && strcmp(w->names[k], t->tensor->name))
		k++;
	assert_true(k < w->count);
	const float *f = data;
	for (uint64_t j = 0; j < t->tensor->elements; j++)
		if (f[j] != value(k, j))
			fail_msg("tensor %s element %llu: %g, expected %g",
				 t->tensor->name, (unsigned long long)j, f[j],
				 value(k, j));
}

void wl_check_view(const workload *w, const strata_residency_view *v)
{
	for (size_t i = 0; i < v->count; i++) {
		assert_int_equal((uintptr_t)v->data[i] % STRATA_ALIGN, 0);
		wl_check_tensor(w, &v->tensors[i], v->data[i]);
	}
}

static int by_unit(const void *a, const void *b)
{
	const strata_residency_unit *x = a, *y = b;
	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	return x->unit < y->unit ? -1 : x->unit > y->unit;
}

strata_status wl_pass(workload *w, strata_residency *e, strata_error *err)
{
	strata_residency_unit order[2 * WL_MAX_UNITS];
	memcpy(order, w->units, w->unit_count * sizeof *order);
	qsort(order, w->unit_count, sizeof *order, by_unit);
	for (size_t i = 0; i < w->unit_count; i++) {
		strata_residency_view v;
		strata_status s = strata_residency_acquire(e, order[i].group,
							   order[i].unit, &v, err);
		if (s != STRATA_OK)
			return s;
		wl_check_view(w, &v);
		s = strata_residency_release(e, order[i].group, order[i].unit, err);
		if (s != STRATA_OK)
			return s;
	}
	return STRATA_OK;
}

strata_backend *wl_cpu(bool hidden)
{
	strata_backend *b = NULL;
	strata_error err;
	strata_backend_cpu_options o = {.hide_addressable = hidden};
	assert_int_equal(strata_backend_cpu_create(&o, &b, &err), STRATA_OK);
	return b;
}

void wl_create_expect(strata_backend *b, const strata_residency_config *c,
		      strata_status want, const char *says)
{
	strata_residency *e = NULL;
	strata_error err;
	strata_status s = strata_residency_create(b, c, &e, &err);
	if (s != want)
		fail_msg("create: %s, expected %s (%s)", strata_status_name(s),
			 strata_status_name(want), s ? err.message : "");
	if (s == STRATA_OK) {
		strata_residency_destroy(e);
		return;
	}
	assert_null(e);
	if (says && !strstr(err.message, says))
		fail_msg("'%s' does not name '%s'", err.message, says);
}
