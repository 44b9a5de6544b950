/* refmodel.h - the reference-model fixture: the committed reference models
 * (tests/data/reference) and a model opened with the plain loader (support
 * for every test folder, layer: infer; prefix ref). */
#ifndef STRATA_TESTS_SUPPORT_REFMODEL_H
#define STRATA_TESTS_SUPPORT_REFMODEL_H

#include "strata/infer.h"

#define REF_MODEL_COUNT 10
extern const char *const ref_models[REF_MODEL_COUNT];

/* What reference.json says about one model. */
typedef struct ref_data {
	int32_t tokens[64];
	uint32_t n_tokens;
	int32_t greedy[64];
	uint32_t n_greedy;
	float *logits; /* (n_tokens, vocab) from logits.f32 */
	uint32_t vocab;
} ref_data;

/* Fills path with STRATA_SOURCE_DIR/tests/data/reference/<name>[/file]. */
void ref_path(char *path, size_t cap, const char *name, const char *file);
/* Reads reference.json and logits.f32; asserts on failure. */
void ref_load(const char *name, ref_data *r);
/* The same for a model of tests/data/families (float64 logits, rounded to
 * float here: 1e-7 relative, far inside every tolerance). */
#define REF_FAMILY_COUNT 11
extern const char *const ref_families[REF_FAMILY_COUNT];
void ref_family_path(char *path, size_t cap, const char *name,
		     const char *file);
void ref_load_family(const char *name, ref_data *r);
void ref_free(ref_data *r);

/* A model opened end to end with the plain loader. */
typedef struct ref_open {
	strata_catalog *cat;
	strata_infer_hparams hp;
	strata_infer_tensors t;
	strata_infer_loaded *loaded;
	strata_infer_source src;
} ref_open;

void ref_open_model(const char *model_path, ref_open *m);
/* The same through strata_infer_load_stored (matrices as stored). */
void ref_open_model_stored(const char *model_path, ref_open *m);
void ref_close_model(ref_open *m);

/* The plan's figure for a one-site forward pass host code addresses (KV
 * cache and workspace, strata_plan_site_bytes), planned on CUDA with an
 * f32 cache, for hp at this context, batch (sequences) and prefill chunk:
 * exactly what such a forward pass's buffers take. */
uint64_t ref_planned_buffers(const strata_infer_hparams *hp, uint32_t context,
			     uint32_t batch, uint32_t prefill_chunk);

/* A plan over a model's catalog, as a run makes one (architecture left
 * unknown: the weights are what the residency engine is sized by), for
 * the window's options: {.plan = p->plan}. o->device is set to `device`.
 * Asserts that the plan selects a candidate. */
typedef struct ref_plan {
	strata_plan_source *src;
	strata_plan *plan;
	strata_plan_arch arch;
} ref_plan;
void ref_plan_make(const strata_catalog *cat, strata_plan_device device,
		   strata_plan_options *o, ref_plan *p);
void ref_plan_destroy(ref_plan *p);

/* The precision ref_pass_open (and so ref_logits) makes its contexts at:
 * STRATA_PRECISION_FAST, the library's default, unless a test sets it. */
extern strata_precision ref_precision;

/* A forward pass and the compute context it runs on: the context is made
 * on o.backend (`threads` threads, at ref_precision), or over the CPU
 * kernels where o has no backend, and set as o.compute. Fails the test, naming `what`, when
 * either cannot be made. ref_pass_close destroys both. */
typedef struct ref_pass {
	strata_compute *c;
	strata_forward *f;
} ref_pass;
void ref_pass_open(const char *what, uint32_t threads,
		   strata_forward_options o, ref_pass *p);
void ref_pass_close(ref_pass *p);

/* The logits of tokens[0..n) into out (n, vocab) through a fresh forward
 * pass over m on 2 CPU threads (`context` positions, prompt chunks of
 * `batch`). Fails the test, naming `what`, on an error. */
void ref_logits(const char *what, const ref_open *m, const int32_t *tokens,
		uint32_t n, uint32_t context, uint32_t batch, float *out);

/* A strata_generate token callback: user is an int32_t array, out[0]
 * the count so far, out[1..] the tokens. */
strata_status ref_collect(void *user, int32_t tok, strata_error *err);

/* Through f: the logits of r's tokens into logits (n_tokens, vocab),
 * then, after a reset, r->n_greedy greedy tokens after them into greedy
 * (1 + n_greedy cells: greedy[0] their count). Fails the test on an
 * error. */
void ref_run_greedy(strata_forward *f, const ref_data *r, uint32_t vocab,
		    float *logits, int32_t *greedy);

/* A residency window over m's tensors on a fresh CPU backend, from the
 * weight store ws (borrowed), by a plan for `device` with options po (its
 * device set; reader_threads as the window options'): src feeds a
 * forward pass. Fails the test, naming `what`, when it cannot be made.
 * ref_window_close destroys the window, the backend and the plan. */
typedef struct ref_window {
	ref_plan plan;
	strata_backend *b;
	strata_infer_window *w;
	strata_infer_source src;
} ref_window;
void ref_window_open(const ref_open *m, strata_weight_store *ws,
		     strata_plan_device device, strata_plan_options po,
		     uint32_t reader_threads, const char *what,
		     ref_window *w);
void ref_window_close(ref_window *w);

/* max |a - b| over n floats. */
double ref_max_diff(const float *a, const float *b, uint64_t n);

/* Run and compare to the reference: r's prompt through f from position 0
 * into logits (r->n_tokens, r->vocab) and, where greedy is not NULL, after
 * a reset r->n_greedy greedy tokens into greedy as ref_run_greedy makes
 * them; then every position's logits against want (n_tokens, vocab: the
 * reference's or another run's). Fails the test, naming `what`, the
 * position and its difference, where one lies beyond `tolerance` (a NaN
 * fails). Returns the largest difference. */
double ref_run_compare(const char *what, strata_forward *f, const ref_data *r,
		       const float *want, double tolerance, float *logits,
		       int32_t *greedy);

#endif
