/* test_forward_sites.c - the forward pass over sites (forward_sites.c): the
 * layers of every reference model spread over three CPU "devices" (one of
 * them out of host code's reach, as CUDA is, so its copies go through
 * downloads and its logits through the logits rows) and the CPU, with a
 * prefill split unlike the decode split, so chunks run layers away from
 * their KV cache through the staging pair: logits within 1e-5 of one site
 * and greedy text equal; the copies between sites are counted (layer:
 * infer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/refmodel.h"

#define SITES 4
#define CONTEXT 64
#define CHUNK 4

static void check_model(const char *name)
{
	char path[1024];
	ref_path(path, sizeof path, name, NULL);
	ref_data r;
	ref_load(name, &r);
	ref_open m;
	ref_open_model(path, &m);
	uint64_t cells = (uint64_t)r.n_tokens * r.vocab;
	float *want = strata_alloc(cells * sizeof(float));
	float *got = strata_alloc(cells * sizeof(float));
	int32_t want_g[65], got_g[65];
	strata_error err;

	ref_pass one;
	ref_pass_open(name, 1,
		      (strata_forward_options){.hp = &m.hp, .src = &m.src,
					       .context = CONTEXT,
					       .batch = CHUNK},
		      &one);
	ref_run_greedy(one.f, &r, r.vocab, want, want_g);
	ref_pass_close(&one);

	/* devices 0 .. 2 (1 hides its memory from host code), site 3 the CPU */
	strata_backend *b[SITES];
	strata_compute *c[SITES];
	strata_forward_site sites[SITES];
	for (int i = 0; i < SITES; i++) {
		strata_backend_cpu_options co = {.hide_addressable = i == 1};
		assert_int_equal(strata_backend_cpu_create(&co, &b[i], &err),
				 STRATA_OK);
		assert_int_equal(strata_compute_create_on(b[i], 1, &c[i], &err),
				 STRATA_OK);
		sites[i] = (strata_forward_site){b[i], c[i], i < 3};
	}
	uint8_t dec[256], pre[256];
	assert_true(m.hp.layers <= 256);
	for (uint32_t l = 0; l < m.hp.layers; l++) {
		/* layer 0 on the CPU in decode, on device 0 in prefill */
		dec[l] = (uint8_t)((l + SITES - 1) % SITES);
		pre[l] = (uint8_t)(l % SITES);
	}
	strata_telemetry tel;
	assert_int_equal(strata_telemetry_init(&tel, &err), STRATA_OK);
	strata_forward_options o = {
		.hp = &m.hp, .src = &m.src, .context = CONTEXT,
		.batch = CHUNK, .site_count = SITES, .sites = sites,
		.decode_site = dec, .prefill_site = pre, .head_site = 1,
		.prefill_from = 2, .telemetry = &tel};
	strata_forward *f;
	if (strata_forward_create(&o, &f, &err))
		fail_msg("%s: %s", name, err.message);
	ref_run_greedy(f, &r, r.vocab, got, got_g);
	double d = ref_max_diff(got, want, cells);
	if (d > 1e-5)
		fail_msg("%s: sites %g from one site", name, d);
	assert_memory_equal(got_g, want_g, (1 + r.n_greedy) * sizeof(int32_t));

	/* each site's arena is its buffer list; together the device bytes */
	uint64_t bytes = 0, sum = 0;
	assert_int_equal(strata_forward_device_bytes(&o, &bytes, &err),
			 STRATA_OK);
	for (uint32_t s = 0; s < SITES; s++) {
		strata_arena_stats a;
		strata_forward_site_arena_stats(f, s, &a);
		sum += a.capacity_bytes;
	}
	assert_int_equal(sum, bytes);
	strata_telemetry_snapshot t;
	strata_telemetry_get(&tel, &t);
	/* the chunks after the first staged layers away from their cache */
	assert_true(r.n_tokens <= CHUNK || t.kv_staged[0].count > 0);
	/* every staged layer's new rows go back; the first chunk has no
	 * prefix to stage up */
	assert_true(t.kv_staged[1].count > 0 &&
		    t.kv_staged[1].count >= t.kv_staged[0].count);
	assert_true(t.activations[STRATA_ACT_HOST_TO_DEVICE].count > 0);
	assert_true(t.activations[STRATA_ACT_DEVICE_TO_HOST].count > 0);
	assert_true(t.activations[STRATA_ACT_DEVICE_TO_DEVICE].count > 0);
	strata_forward_destroy(f);
	strata_telemetry_fini(&tel);
	for (int i = 0; i < SITES; i++) {
		strata_compute_destroy(c[i]);
		strata_backend_destroy(b[i]);
	}
	strata_free(want);
	strata_free(got);
	ref_close_model(&m);
	ref_free(&r);
}

static void test_sites_every_reference_model(void **state)
{
	(void)state;
	for (int i = 0; i < REF_MODEL_COUNT; i++)
		check_model(ref_models[i]);
}

/* Bad site lists are refused with E_INVALID_ARG, nothing made. */
static void test_bad_sites_are_refused(void **state)
{
	(void)state;
	char path[1024];
	ref_path(path, sizeof path, "llama_gqa2_f32", NULL);
	ref_open m;
	ref_open_model(path, &m);
	strata_error err;
	strata_backend *b;
	strata_compute *c;
	assert_int_equal(strata_backend_cpu_create(NULL, &b, &err), STRATA_OK);
	assert_int_equal(strata_compute_create_on(b, 1, &c, &err), STRATA_OK);
	strata_forward_site sites[2] = {{b, c, true}, {b, c, false}};
	uint8_t far[8] = {0, 5, 0, 0, 0, 0, 0, 0};
	strata_forward_options o = {
		.hp = &m.hp, .src = &m.src, .context = 16, .batch = 2,
		.site_count = 2, .sites = sites, .decode_site = far};
	strata_forward *f = NULL;
	assert_int_equal(strata_forward_create(&o, &f, &err),
			 STRATA_E_INVALID_ARG);
	assert_null(f);
	o.decode_site = NULL;
	assert_int_equal(strata_forward_create(&o, &f, &err),
			 STRATA_E_INVALID_ARG);
	uint8_t ok[8] = {0};
	o.decode_site = ok;
	o.head_site = 2;
	assert_int_equal(strata_forward_create(&o, &f, &err),
			 STRATA_E_INVALID_ARG);
	strata_compute_destroy(c);
	strata_backend_destroy(b);
	ref_close_model(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sites_every_reference_model),
		cmocka_unit_test(test_bad_sites_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
