/* planner_fixture.h - the planner tests' synthetic model (1 MiB
 * embedding, 8 layers of 4 MiB, a tiny llama arch), their options and
 * their lookups. Include after cmocka.h and strata/plan.h. */
#ifndef STRATA_TESTS_PLANNER_FIXTURE_H
#define STRATA_TESTS_PLANNER_FIXTURE_H

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* ------------------------------------------------------------------------ */
/* A synthetic model: 1 MiB embedding, 8 layers of 4 MiB, a tiny arch      */
/* ------------------------------------------------------------------------ */

typedef struct fixture {
	strata_plan_param params[16];
	uint64_t bytes[16];
	size_t n;
	strata_plan_layout *layout;
	strata_plan_arch arch;
	char names[16][48];
} fixture;

static inline strata_status fixture_bytes(void *ctx, size_t i, uint64_t *out,
				   strata_error *err)
{
	(void)err;
	*out = ((fixture *)ctx)->bytes[i];
	return STRATA_OK;
}

static inline void add_param(fixture *f, const char *name, uint64_t bytes)
{
	size_t i = f->n++;
	snprintf(f->names[i], sizeof f->names[i], "%s", name);
	strata_error err;
	assert_int_equal(strata_topology_owner(f->names[i], &f->params[i].owner,
					       &err),
			 STRATA_OK);
	f->params[i].name = f->names[i];
	f->params[i].file_bytes = bytes / 2; /* bf16 on disk, f32 on cpu */
	f->bytes[i] = bytes;
}

static inline fixture *fixture_make(size_t layers)
{
	fixture *f = calloc(1, sizeof *f);
	add_param(f, "model.embed_tokens.weight", 1 * MiB);
	for (size_t l = 0; l < layers; l++) {
		char name[48];
		snprintf(name, sizeof name, "model.layers.%zu.mlp.weight", l);
		add_param(f, name, 4 * MiB);
	}
	strata_error err;
	assert_int_equal(strata_plan_layout_create(f->params, f->n,
						   fixture_bytes, f, NULL, 0,
						   &f->layout, &err),
			 STRATA_OK);
	f->arch = (strata_plan_arch){.known = true, .family = "llama",
				     .layers = layers, .hidden = 64,
				     .intermediate = 128, .heads = 4,
				     .kv_heads = 2, .head_dim = 16,
				     .vocab = 100, .max_context = 512};
	return f;
}

static inline void fixture_free(fixture *f)
{
	strata_plan_layout_destroy(f->layout);
	free(f);
}

static inline strata_plan_options opts(uint64_t device, uint64_t host)
{
	return (strata_plan_options){
		.device = STRATA_PLAN_DEVICE_CPU,
		.has_device_budget = true, .device_budget_bytes = device,
		.has_host_budget = true, .host_budget_bytes = host,
		.shape = {.context = 256, .batch = 1, .prefill_chunk = 1},
	};
}

static const strata_plan_machine no_machine = {0};

static inline bool has_code(const strata_plan *p, strata_explain code)
{
	for (size_t i = 0; i < strata_plan_explanation_count(p); i++)
		if (strata_plan_explanation_at(p, i)->code == code)
			return true;
	return false;
}

/* Candidates of the uniform modes (resident, host:D, disk), listed
 * before the placements. */
static inline size_t uniform_count(const strata_plan *p)
{
	size_t n = 0;
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++)
		n += strata_plan_candidate_at(p, i)->mode !=
		     STRATA_RESIDENCY_PLACEMENT;
	return n;
}

/* The last candidate of a mode, or NULL. */
static inline const strata_plan_candidate *last_of(const strata_plan *p,
						   strata_residency_mode m)
{
	const strata_plan_candidate *c = NULL;
	for (size_t i = 0; i < strata_plan_candidate_count(p); i++)
		if (strata_plan_candidate_at(p, i)->mode == m)
			c = strata_plan_candidate_at(p, i);
	return c;
}

/* Plans the fixture's bf16 model with options o on no machine facts. */
static inline strata_status plan_bf16(const fixture *f,
				      const strata_plan_options *o,
				      strata_plan **p, strata_error *err)
{
	return strata_plan_create(f->layout, &f->arch, STRATA_DTYPE_BF16, o,
				  &no_machine, p, err);
}

/* KV: 8 layers x 2 x [1, 256, 2*16] f32 = 8 x 2 x 32768; workspace 2304
 * (computed by hand in test_memory_model.c,
 * memory_model_formulas_are_exact). */
#define KV_CPU (UINT64_C(8) * 2 * 32768)
#define WS 2304u
#define RESIDENT_DEVICE (1 * MiB + 32 * MiB + KV_CPU + WS)

#endif
