/* refmodel.c - the reference-model fixture: the committed reference models
 * of tests/data/reference, their transformers data and a model opened with
 * the plain loader (support for every test folder, layer: infer; prefix
 * ref). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/refmodel.h"
#include "strata/plan.h"

const char *const ref_models[REF_MODEL_COUNT] = {
	"llama_gqa1_f32",      "llama_gqa2_tied_bf16", "llama_gqa4_f16",
	"llama_gqa2_f32",      "llama3_rope_f32",      "llama3_rope_bf16",
	"mistral_window_f32",  "mistral_window_bf16",  "qwen2_bias_f32",
	"qwen2_bias_tied_f16",
};

void ref_path(char *path, size_t cap, const char *name, const char *file)
{
	snprintf(path, cap, "%s/tests/data/reference/%s%s%s",
		 STRATA_SOURCE_DIR, name, file ? "/" : "", file ? file : "");
}

static uint32_t ids(json_t *arr, int32_t *out, uint32_t cap)
{
	assert_true(json_is_array(arr));
	uint32_t n = (uint32_t)json_array_size(arr);
	assert_true(n <= cap);
	for (uint32_t i = 0; i < n; i++)
		out[i] = (int32_t)json_integer_value(json_array_get(arr, i));
	return n;
}

const char *const ref_families[REF_FAMILY_COUNT] = {
	"qwen3_f32", "qwen3_tied_bf16", "gemma2_f32", "gemma3_f32",
	"gemma3_bf16", "phi3_f32", "phi3_longrope_f32", "mixtral_f32",
	"qwen3_moe_f32", "qwen3_moe_unnorm_bf16", "qwen2_moe_shared_f32",
};

void ref_family_path(char *path, size_t cap, const char *name,
		     const char *file)
{
	snprintf(path, cap, "%s/tests/data/families/%s%s%s", STRATA_SOURCE_DIR,
		 name, file ? "/" : "", file ? file : "");
}

/* reference.json and the logits (f32 or f64 little-endian) at dir. */
static void load_from(const char *json_path, const char *logits_path,
		      bool f64, ref_data *r)
{
	memset(r, 0, sizeof *r);
	json_error_t je;
	json_t *root = json_load_file(json_path, 0, &je);
	if (!root)
		fail_msg("%s: %s", json_path, je.text);
	r->n_tokens = ids(json_object_get(root, "tokens"), r->tokens, 64);
	r->n_greedy = ids(json_object_get(root, "greedy"), r->greedy, 64);
	r->vocab = (uint32_t)json_integer_value(json_object_get(root, "vocab"));
	json_decref(root);
	char *bytes = NULL;
	size_t len = 0;
	strata_error err;
	assert_int_equal(strata_file_read_all(logits_path, 1u << 24, &bytes,
					      &len, &err),
			 STRATA_OK);
	uint64_t cells = (uint64_t)r->n_tokens * r->vocab;
	assert_int_equal(len, cells * (f64 ? sizeof(double) : sizeof(float)));
	r->logits = strata_alloc(cells * sizeof(float));
	assert_non_null(r->logits);
	/* little-endian host assumed (x86) */
	for (uint64_t i = 0; f64 && i < cells; i++) {
		double v;
		memcpy(&v, bytes + i * sizeof v, sizeof v);
		r->logits[i] = (float)v;
	}
	if (!f64)
		memcpy(r->logits, bytes, len);
	strata_free(bytes);
}

void ref_load(const char *name, ref_data *r)
{
	char json[1024], logits[1024];
	ref_path(json, sizeof json, name, "reference.json");
	ref_path(logits, sizeof logits, name, "logits.f32");
	load_from(json, logits, false, r);
}

void ref_load_family(const char *name, ref_data *r)
{
	char json[1024], logits[1024];
	ref_family_path(json, sizeof json, name, "reference.json");
	ref_family_path(logits, sizeof logits, name, "logits.f64");
	load_from(json, logits, true, r);
}

void ref_free(ref_data *r)
{
	strata_free(r->logits);
	r->logits = NULL;
}

static void open_model(const char *model_path, ref_open *m, bool stored)
{
	strata_error err;
	memset(m, 0, sizeof *m);
	strata_status st = strata_catalog_open(model_path, &m->cat, &err);
	if (st)
		fail_msg("%s: %s", model_path, err.message);
	st = strata_infer_hparams_read(model_path, m->cat, &m->hp, &err);
	if (st)
		fail_msg("%s: %s", model_path, err.message);
	st = strata_infer_tensors_find(m->cat, &m->hp, &m->t, &err);
	if (st)
		fail_msg("%s: %s", model_path, err.message);
	st = stored ? strata_infer_load_stored(m->cat, &m->t, &m->loaded,
					       &m->src, &err)
		    : strata_infer_load_all(m->cat, &m->t, &m->loaded, &m->src,
					    &err);
	if (st)
		fail_msg("%s: %s", model_path, err.message);
}

void ref_open_model(const char *model_path, ref_open *m)
{
	open_model(model_path, m, false);
}

void ref_open_model_stored(const char *model_path, ref_open *m)
{
	open_model(model_path, m, true);
}

void ref_close_model(ref_open *m)
{
	strata_infer_loaded_destroy(m->loaded);
	strata_infer_tensors_fini(&m->t);
	strata_catalog_destroy(m->cat);
}

double ref_max_diff(const float *a, const float *b, uint64_t n)
{
	double m = 0;
	for (uint64_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (!(d <= m))
			m = d; /* NaN propagates as the max */
	}
	return m;
}

void ref_plan_make(const strata_catalog *cat, strata_plan_device device,
		   strata_plan_options *o, ref_plan *p)
{
	memset(p, 0, sizeof *p);
	strata_error err;
	o->device = device;
	assert_int_equal(strata_plan_source_create(cat, device, NULL, 0, &p->src,
						   &err),
			 STRATA_OK);
	strata_plan_machine m = {0};
	if (strata_plan_create(strata_plan_source_layout(p->src), &p->arch,
			       strata_plan_source_weight_dtype(p->src), o, &m,
			       &p->plan, &err))
		fail_msg("plan: %s", err.message);
}

void ref_plan_destroy(ref_plan *p)
{
	strata_plan_destroy(p->plan);
	strata_plan_source_destroy(p->src);
}

uint64_t ref_planned_buffers(const strata_infer_hparams *hp, uint32_t context,
			     uint32_t batch, uint32_t prefill_chunk)
{
	strata_plan_arch a;
	strata_infer_plan_arch(hp, &a);
	strata_plan_shape sh = {.context = context, .batch = batch,
				.prefill_chunk = prefill_chunk};
	strata_plan_memory m;
	strata_error err;
	assert_int_equal(strata_plan_memory_compute(&a, &sh,
						    STRATA_PLAN_DEVICE_CUDA,
						    STRATA_DTYPE_F32, 0, 0, &m,
						    &err),
			 STRATA_OK);
	return strata_plan_site_bytes(&m, UINT64_MAX, false, false);
}

strata_precision ref_precision = STRATA_PRECISION_FAST;

void ref_pass_open(const char *what, uint32_t threads,
		   strata_forward_options o, ref_pass *p)
{
	strata_error err;
	memset(p, 0, sizeof *p);
	const strata_compute_options co = {.threads = threads,
					   .precision = ref_precision};
	strata_status st =
		o.backend ? strata_compute_create_on_with(o.backend, &co, &p->c,
							  NULL, &err)
			  : strata_compute_create_with(&strata_cpu_kernel_ops,
						       &co, &p->c, &err);
	if (st)
		fail_msg("%s: compute create: %s", what, err.message);
	o.compute = p->c;
	if (strata_forward_create(&o, &p->f, &err))
		fail_msg("%s: forward create: %s", what, err.message);
}

void ref_pass_close(ref_pass *p)
{
	strata_forward_destroy(p->f);
	strata_compute_destroy(p->c);
	memset(p, 0, sizeof *p);
}

void ref_logits(const char *what, const ref_open *m, const int32_t *tokens,
		uint32_t n, uint32_t context, uint32_t batch, float *out)
{
	ref_pass p;
	ref_pass_open(what, 2,
		      (strata_forward_options){.hp = &m->hp, .src = &m->src,
					       .context = context,
					       .batch = batch},
		      &p);
	strata_error err;
	if (strata_forward_run(p.f, tokens, n, 0, out, NULL, &err))
		fail_msg("%s: forward: %s", what, err.message);
	ref_pass_close(&p);
}

strata_status ref_collect(void *user, int32_t tok, strata_error *err)
{
	(void)err;
	int32_t *out = user;
	out[++out[0]] = tok;
	return STRATA_OK;
}

void ref_run_greedy(strata_forward *f, const ref_data *r, uint32_t vocab,
		    float *logits, int32_t *greedy)
{
	strata_error err;
	if (strata_forward_run(f, r->tokens, r->n_tokens, 0, logits, NULL,
			       &err))
		fail_msg("forward: %s", err.message);
	strata_forward_reset(f);
	strata_sampler *s;
	strata_sampler_params sp = {.temperature = 0, .top_p = 1,
				    .repeat_penalty = 1};
	assert_int_equal(strata_sampler_create(&sp, vocab, &s, &err),
			 STRATA_OK);
	greedy[0] = 0;
	if (strata_generate(f, s, r->tokens, r->n_tokens, r->n_greedy, -1,
			    ref_collect, greedy, NULL, &err))
		fail_msg("generate: %s", err.message);
	strata_sampler_destroy(s);
}

double ref_run_compare(const char *what, strata_forward *f, const ref_data *r,
		       const float *want, double tolerance, float *logits,
		       int32_t *greedy)
{
	strata_error err;
	if (greedy)
		ref_run_greedy(f, r, r->vocab, logits, greedy);
	else if (strata_forward_run(f, r->tokens, r->n_tokens, 0, logits, NULL,
				    &err))
		fail_msg("%s: forward: %s", what, err.message);
	double worst = 0;
	for (uint32_t i = 0; i < r->n_tokens; i++) {
		double d = ref_max_diff(logits + (uint64_t)i * r->vocab,
					want + (uint64_t)i * r->vocab, r->vocab);
		if (!(d <= tolerance))
			fail_msg("%s: position %u max |dlogit| %.3g > %.0e", what,
				 i, d, tolerance);
		worst = d > worst ? d : worst;
	}
	return worst;
}

void ref_window_open(const ref_open *m, strata_weight_store *ws,
		     strata_plan_device device, strata_plan_options po,
		     uint32_t reader_threads, const char *what,
		     ref_window *w)
{
	strata_error err;
	memset(w, 0, sizeof *w);
	ref_plan_make(m->cat, device, &po, &w->plan);
	strata_infer_window_options o = {.plan = w->plan.plan,
					 .reader_threads = reader_threads};
	assert_int_equal(strata_backend_cpu_create(NULL, &w->b, &err),
			 STRATA_OK);
	if (strata_infer_window_create(w->b, &m->t, ws, &o, &w->w, &w->src,
				       &err))
		fail_msg("%s: %s", what, err.message);
}

void ref_window_close(ref_window *w)
{
	strata_infer_window_destroy(w->w);
	strata_backend_destroy(w->b);
	ref_plan_destroy(&w->plan);
	memset(w, 0, sizeof *w);
}
