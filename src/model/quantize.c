/* quantize.c - strata quantize: a model directory of safetensors or a GGUF
 * file in, a GGUF file of the chosen preset out, one tensor at a time,
 * written whole or not at all (layer: model).
 *
 * Each output tensor is read in its stored type, decoded to f32 exactly,
 * (for llama Hugging Face checkpoints, its q/k rows permuted as llama.cpp's
 * converter does; Gemma's norms stored as 1 + w), encoded by strata_block_encode on several threads, and
 * its encoding decoded again to check every value is finite. A tensor
 * whose type does not change is copied as stored (after the same finite
 * check). Memory: three buffers of the largest tensor. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/quantize_internal.h"

#define MAX_THREADS 64u
#define MIN_BLOCKS_PER_THREAD 64u

typedef struct engine {
	const strata__quant_preset *p;
	const strata_catalog *c;
	strata_weight_store *ws;
	strata__quant_job *jobs;
	size_t n_jobs;
	unsigned threads;
	float *f32, *tmp; /* the largest tensor's elements, twice */
	unsigned char *raw; /* the largest source payload */
	strata_quantize_stats stats;
} engine;

/* ------------------------------------------------------------------------ */
/* Encoding on several threads                                              */
/* ------------------------------------------------------------------------ */

typedef struct slice {
	strata_block_type t;
	const float *x;
	unsigned char *dst;
	uint64_t elements;
} slice;

static void *encode_slice(void *arg)
{
	slice *s = arg;
	(void)strata_block_encode(s->t, s->x, s->dst, s->elements);
	return NULL;
}

/* Encodes n finite elements (whole blocks of t) on up to `threads`
 * threads; a thread that cannot be started leaves its share to this one. */
static void encode_parallel(strata_block_type t, const float *x, void *dst,
			    uint64_t n, unsigned threads)
{
	uint64_t be = strata_block_elements(t), bb = strata_block_bytes(t);
	uint64_t blocks = n / be;
	unsigned k = threads;
	if (blocks / MIN_BLOCKS_PER_THREAD < k)
		k = (unsigned)(blocks / MIN_BLOCKS_PER_THREAD);
	if (k < 2) {
		(void)strata_block_encode(t, x, dst, n);
		return;
	}
	pthread_t tid[MAX_THREADS];
	slice sl[MAX_THREADS];
	bool started[MAX_THREADS];
	for (unsigned i = 0; i < k; i++) {
		uint64_t b0 = blocks * i / k, b1 = blocks * (i + 1) / k;
		sl[i] = (slice){t, x + b0 * be, (unsigned char *)dst + b0 * bb,
				(b1 - b0) * be};
		started[i] = i > 0 &&
			     pthread_create(&tid[i], NULL, encode_slice, &sl[i]) == 0;
	}
	for (unsigned i = 0; i < k; i++)
		if (!started[i])
			encode_slice(&sl[i]);
	for (unsigned i = 1; i < k; i++)
		if (started[i])
			pthread_join(tid[i], NULL);
}

/* ------------------------------------------------------------------------ */
/* One tensor                                                               */
/* ------------------------------------------------------------------------ */

/* llama.cpp's converter permutation of a llama q or k projection: within
 * each of `heads` heads, row 2 i + j of the output is row j (hd / 2) + i
 * of the input (rotary pairs interleaved instead of split in halves). */
static void permute_rows(const float *in, float *out, uint64_t rows,
			 uint64_t cols, uint32_t heads)
{
	uint64_t hd = rows / heads, half = hd / 2;
	for (uint64_t h = 0; h < heads; h++)
		for (uint64_t i = 0; i < half; i++)
			for (uint64_t j = 0; j < 2; j++)
				memcpy(out + (h * hd + 2 * i + j) * cols,
				       in + (h * hd + j * half + i) * cols,
				       cols * sizeof *out);
}

static uint64_t job_elements(const strata__quant_job *j)
{
	uint64_t n = 1;
	for (uint32_t i = 0; i < j->n_dims; i++)
		n *= j->ne[i]; /* checked when the writer added it */
	return n;
}

/* Encodes x (n finite elements) as j's type into dst, then checks that
 * the encoding decodes to finite values. */
static strata_status encode_checked(engine *e, const strata__quant_job *j,
				    const float *x, void *dst, uint64_t n,
				    uint64_t bytes, strata_error *err)
{
	strata_block_type bt;
	if (!strata_dtype_block(j->out, &bt))
		return strata_fail(err, STRATA_E_INTERNAL, "report this bug",
				   "tensor '%s': no encoder", j->name);
	encode_parallel(bt, x, dst, n, e->threads);
	uint64_t bad = strata_block_decode(bt, dst, e->tmp, n);
	if (bad != STRATA_BLOCK_ALL_FINITE)
		return strata_fail(err, STRATA_E_CKPT_VALUE,
				   "use a wider type (F16 or F32) for this model",
				   "tensor '%s': its values are too large for %s "
				   "(block %" PRIu64 " decodes to infinity)",
				   j->name, strata_block_name(bt), bad);
	e->stats.out_bytes += bytes;
	return STRATA_OK;
}

/* An expert stack: each expert's tensor read in turn, copied as stored
 * when every one already has the output type, else decoded to f32 at its
 * place in the stack and the whole stack encoded. */
static strata_status fill_stack(engine *e, const strata__quant_job *j,
				void *dst, uint64_t bytes, strata_error *err)
{
	bool same = true;
	for (uint32_t k = 0; k < j->stack_count; k++)
		same = same && j->stack[k]->dtype == j->out;
	uint64_t n = job_elements(j), per = n / j->stack_count, at = 0;
	for (uint32_t k = 0; k < j->stack_count; k++) {
		const strata_tensor *t = j->stack[k];
		void *where = same ? (unsigned char *)dst + at : (void *)e->raw;
		void *const dsts[1] = {where};
		strata_status s = strata_weight_store_read(e->ws, &t, dsts, 1,
							   err);
		if (!s && same)
			s = strata_dtype_check_finite(t->dtype, where,
						      t->elements, err);
		if (!s && !same)
			s = strata_dtype_to_f32(t->dtype, e->raw, t->elements,
						e->f32 + k * per, err);
		if (s)
			return strata_error_prefix(err, "tensor '%s'", t->name);
		e->stats.in_bytes += t->bytes;
		at += t->bytes;
	}
	if (!same)
		return encode_checked(e, j, e->f32, dst, n, bytes, err);
	e->stats.out_bytes += bytes;
	return STRATA_OK;
}

static strata_status fill(void *ctx, size_t i, void *dst, uint64_t bytes,
			  strata_error *err)
{
	engine *e = ctx;
	const strata__quant_job *j = &e->jobs[i];
	uint64_t n = job_elements(j);
	strata_status s;
	const float *x = j->values;
	if (j->stack)
		return fill_stack(e, j, dst, bytes, err);
	if (j->src) {
		bool same = j->src->dtype == j->out && !j->permute_heads &&
			    !j->add_one;
		void *where = same ? dst : (void *)e->raw;
		void *const dsts[1] = {where};
		if ((s = strata_weight_store_read(e->ws, &j->src, dsts, 1, err)))
			return s;
		e->stats.in_bytes += j->src->bytes;
		if (same) {
			if ((s = strata_dtype_check_finite(j->out, dst, n, err)))
				return strata_error_prefix(err, "tensor '%s'",
							   j->src->name);
			e->stats.out_bytes += bytes;
			return STRATA_OK;
		}
		if ((s = strata_dtype_to_f32(j->src->dtype, e->raw, n, e->f32,
					     err)))
			return strata_error_prefix(err, "tensor '%s'",
						   j->src->name);
		x = e->f32;
		for (uint64_t i = 0; j->add_one && i < n; i++)
			e->f32[i] += 1.0f; /* as llama.cpp's converter, in f32 */
		if (j->permute_heads) {
			permute_rows(e->f32, e->tmp, n / j->ne[0], j->ne[0],
				     j->permute_heads);
			x = e->tmp;
		}
	}
	return encode_checked(e, j, x, dst, n, bytes, err);
}

/* ------------------------------------------------------------------------ */
/* The jobs                                                                 */
/* ------------------------------------------------------------------------ */

static void jobs_free(engine *e)
{
	for (size_t i = 0; i < e->n_jobs; i++) {
		strata_free(e->jobs[i].name);
		strata_free(e->jobs[i].values);
		strata_free(e->jobs[i].stack);
	}
	strata_free(e->jobs);
	e->jobs = NULL;
	e->n_jobs = 0;
}

/* N of a name starting "blk.N.", else 0. */
static uint64_t layer_of(const char *name)
{
	uint64_t n = 0;
	if (strncmp(name, "blk.", 4))
		return 0;
	for (const char *p = name + 4; *p >= '0' && *p <= '9'; p++)
		n = n * 10 + (uint64_t)(*p - '0');
	return n;
}

/* The model facts the type rule needs, from GGUF metadata or config. */
typedef struct rule_facts {
	uint64_t layers, gqa;
	bool has_output;
} rule_facts;

static strata_status add_job(engine *e, strata_gguf_writer *w,
			     strata__quant_job *j, const rule_facts *f,
			     strata_error *err)
{
	strata__quant_tensor t = {j->name, j->n_dims, j->ne[0],
				  layer_of(j->name), f->layers, f->gqa,
				  f->has_output};
	bool fell = false;
	j->out = strata__quant_tensor_type(e->p, &t, &fell);
	strata_status s = strata_gguf_writer_add_tensor(w, j->name, j->out,
							j->n_dims, j->ne, err);
	if (s) {
		strata_free(j->name);
		strata_free(j->values);
		strata_free(j->stack);
		return s;
	}
	e->jobs[e->n_jobs++] = *j;
	e->stats.tensors++;
	e->stats.fallbacks += fell;
	if (j->out != STRATA_DTYPE_F32 && j->out != STRATA_DTYPE_F16 &&
	    j->out != STRATA_DTYPE_BF16)
		e->stats.quantized++;
	return STRATA_OK;
}

static char *dup_str(const char *s, strata_error *err)
{
	size_t n = strlen(s);
	char *d = strata_alloc_or_error(n + 1, "a tensor name", err);
	if (d)
		memcpy(d, s, n + 1);
	return d;
}

static strata_status jobs_alloc(engine *e, size_t n, strata_error *err)
{
	e->jobs = strata_alloc_or_error((n ? n : 1) * sizeof *e->jobs,
					"the tensor list", err);
	return e->jobs ? STRATA_OK : STRATA_E_NOMEM;
}

/* general.file_type and general.quantization_version, as llama-quantize
 * sets them. */
static strata_status set_file_type(engine *e, strata_gguf_writer *w,
				   strata_error *err)
{
	strata_status s = strata_gguf_writer_set_uint(
		w, "general.quantization_version", STRATA_GGUF_U32, 2, err);
	return s ? s
		 : strata_gguf_writer_set_uint(w, "general.file_type",
					       STRATA_GGUF_U32, e->p->ftype,
					       err);
}

/* ARCH.KEY of g as an integer, or 0 when absent or not one. */
static uint64_t arch_uint(const strata_gguf *g, const char *arch, size_t alen,
			  const char *key)
{
	char k[160];
	uint64_t v = 0;
	snprintf(k, sizeof k, "%.*s.%s", (int)alen, arch, key);
	if (strata_gguf_get_u64(g, k, &v, NULL))
		return 0;
	return v;
}

/* GGUF in: every pair copied, then the file type; every tensor kept by
 * name and shape. */
static strata_status gguf_jobs(engine *e, strata_gguf_writer *w,
			       strata_error *err)
{
	const strata_gguf *g = strata_catalog_gguf(e->c);
	strata_status s = STRATA_OK;
	for (uint64_t i = 0; i < strata_gguf_kv_count(g) && !s; i++)
		s = strata_gguf_writer_copy(w, g, (long)i, err);
	if (s || (s = set_file_type(e, w, err)))
		return s;
	const char *arch = "";
	size_t alen = 0;
	(void)strata_gguf_get_string(g, "general.architecture", &arch, &alen,
				     NULL);
	rule_facts f = {arch_uint(g, arch, alen, "block_count"), 1,
			strata_catalog_find(e->c, "output.weight") != NULL};
	uint64_t heads = arch_uint(g, arch, alen, "attention.head_count");
	uint64_t kv = arch_uint(g, arch, alen, "attention.head_count_kv");
	if (heads && kv && heads % kv == 0)
		f.gqa = heads / kv;
	size_t n = strata_catalog_count(e->c);
	for (size_t i = 0; i < n && !f.layers; i++) /* no block_count */
		if (layer_of(strata_catalog_tensor(e->c, i)->name) + 1 > f.layers)
			f.layers = layer_of(strata_catalog_tensor(e->c, i)->name) + 1;
	if ((s = jobs_alloc(e, n, err)))
		return s;
	for (size_t i = 0; i < n && !s; i++) {
		const strata_tensor *t = strata_catalog_tensor(e->c, i);
		strata__quant_job j = {0};
		j.src = t;
		j.n_dims = t->n_dims;
		memcpy(j.ne, t->shape, t->n_dims * sizeof *j.ne);
		if (!(j.name = dup_str(t->name, err)))
			return STRATA_E_NOMEM;
		s = add_job(e, w, &j, &f, err);
	}
	return s;
}

/* Whether GGUF name `name` ends with `part`. */
static bool ends(const char *name, const char *part)
{
	return strata_str_ends_with(name, part);
}

/* llama, mistral and mixtral q/k projections are permuted (qwen2, qwen3, gemma
 * and phi3 are not: their GGUF rope stays in halves). */
static strata_status hf_permute(const strata_model_desc *d,
				const strata_tensor *t, strata__quant_job *j,
				strata_error *err)
{
	if (d->family != STRATA_FAMILY_LLAMA &&
	    d->family != STRATA_FAMILY_MISTRAL &&
	    d->family != STRATA_FAMILY_MIXTRAL) /* written as llama */
		return STRATA_OK; /* NEOX rope: halves stay */
	bool q = ends(j->name, "attn_q.weight") || ends(j->name, "attn_q.bias");
	bool k = ends(j->name, "attn_k.weight") || ends(j->name, "attn_k.bias");
	if (!q && !k)
		return STRATA_OK;
	uint64_t heads = q ? d->heads : d->kv_heads;
	if (!heads || d->head_dim % 2 || t->shape_hf[0] != heads * d->head_dim)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
				   "check config.json's head counts",
				   "tensor '%s' has %" PRIu64 " rows, not %" PRIu64
				   " heads of %" PRIu64, t->name, t->shape_hf[0],
				   heads, d->head_dim);
	j->permute_heads = (uint32_t)heads;
	return STRATA_OK;
}

/* The HF name of expert e's tensor from expert x's (name), or false when
 * it does not fit. */
static bool expert_hf_name(const char *name, int64_t x, int64_t e, char *out,
			   size_t cap)
{
	char num[48];
	snprintf(num, sizeof num, ".experts.%" PRId64 ".", x);
	const char *at = strstr(name, num);
	if (!at)
		return false;
	int n = snprintf(out, cap, "%.*s.experts.%" PRId64 ".%s",
			 (int)(at - name), name, e, at + strlen(num));
	return n > 0 && (size_t)n < cap;
}

/* Expert 0's tensor t of a layer (kind k) starts the stack of all
 * d->experts of them: each there, of one shape; other experts' tensors
 * are taken with it (an expert past the count is an error). */
static strata_status hf_stack(engine *e, const strata_model_desc *d,
			      const strata_tensor *t, int64_t expert,
			      strata__quant_job *j, strata_error *err)
{
	char esc[160];
	if (expert >= (int64_t)d->experts)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_EXTRA,
				   "check config.json's expert count",
				   "tensor '%s' is of expert %" PRId64
				   " but the model has %" PRIu64 " experts",
				   strata_escape(esc, sizeof esc, t->name,
						 strlen(t->name)),
				   expert, d->experts);
	j->stack = strata_calloc_or_error(d->experts, sizeof *j->stack,
					  "an expert stack", err);
	if (!j->stack)
		return STRATA_E_NOMEM;
	j->stack_count = (uint32_t)d->experts;
	for (uint64_t x = 0; x < d->experts; x++) {
		char hf[256];
		const strata_tensor *m = NULL;
		if (expert_hf_name(t->name, expert, (int64_t)x, hf, sizeof hf))
			m = strata_catalog_find(e->c, hf);
		if (!m)
			return strata_fail(err, STRATA_E_MODEL_TENSOR_MISSING,
					   "use a complete checkpoint",
					   "expert %" PRIu64 " of '%s' is missing",
					   x, strata_escape(esc, sizeof esc,
							    t->name,
							    strlen(t->name)));
		if (m->n_dims != 2 || m->shape_hf[0] != t->shape_hf[0] ||
		    m->shape_hf[1] != t->shape_hf[1] || t->n_dims != 2)
			return strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
					   "use a checkpoint whose experts "
					   "are of one shape",
					   "tensor '%s' is not of expert 0's "
					   "2-D shape", m->name);
		j->stack[x] = m;
	}
	j->src = j->stack[0];
	j->n_dims = 3;
	j->ne[0] = t->shape_hf[1];
	j->ne[1] = t->shape_hf[0];
	j->ne[2] = d->experts;
	return STRATA_OK;
}

static strata_status hf_tensor(engine *e, strata_gguf_writer *w,
			       const strata_model_desc *d,
			       const strata_tensor *t, const rule_facts *f,
			       strata_error *err)
{
	char name[256];
	bool skip = false;
	int64_t expert;
	strata_status s = strata__quant_hf_name(t->name, d->family, name,
						sizeof name, &skip, &expert,
						err);
	if (s || skip || (!f->has_output && !strcmp(name, "output.weight")))
		return s;
	if (expert >= 0 && expert < (int64_t)d->experts && expert != 0)
		return STRATA_OK; /* in expert 0's stack */
	if (expert >= 0) {
		strata__quant_job j = {0};
		if ((s = hf_stack(e, d, t, expert, &j, err)) ||
		    !(j.name = dup_str(name, err))) {
			strata_free(j.stack);
			return s ? s : STRATA_E_NOMEM;
		}
		return add_job(e, w, &j, f, err);
	}
	if (t->n_dims < 1 || t->n_dims > 4)
		return strata_fail(err, STRATA_E_MODEL_TENSOR_SHAPE,
				   "GGUF holds 1 to 4 dimensions",
				   "tensor '%s' has %u dimensions", t->name,
				   t->n_dims);
	strata__quant_job j = {0};
	j.src = t;
	j.n_dims = t->n_dims;
	for (uint32_t i = 0; i < t->n_dims; i++)
		j.ne[i] = t->shape_hf[t->n_dims - 1 - i];
	if (ends(name, "ffn_gate_inp_shexp.weight") && t->n_dims == 2 &&
	    t->shape_hf[0] == 1)
		j.n_dims = 1; /* llama.cpp's shared-expert gate: a vector */
	if (!(j.name = dup_str(name, err)))
		return STRATA_E_NOMEM;
	/* llama.cpp's Gemma converters store every norm as 1 + w */
	j.add_one = (d->family == STRATA_FAMILY_GEMMA2 ||
		     d->family == STRATA_FAMILY_GEMMA3) &&
		    ends(name, "norm.weight");
	if ((s = hf_permute(d, t, &j, err))) {
		strata_free(j.name);
		return s;
	}
	return add_job(e, w, &j, f, err);
}

/* Phi-3 longrope's two divisor lists as llama.cpp's converter writes
 * them: rope_factors_long.weight and rope_factors_short.weight, f32. */
static strata_status longrope_jobs(engine *e, strata_gguf_writer *w,
				   const strata_model_desc *d,
				   const rule_facts *f, strata_error *err)
{
	const strata_rope_scaling *r = &d->rope_scaling;
	if (r->kind != STRATA_ROPE_LONGROPE)
		return STRATA_OK;
	const char *names[2] = {"rope_factors_long.weight",
				"rope_factors_short.weight"};
	const float *lists[2] = {r->long_factor, r->short_factor};
	for (int i = 0; i < 2; i++) {
		strata__quant_job j = {0};
		j.n_dims = 1;
		j.ne[0] = r->factor_count;
		j.values = strata_alloc_or_error(r->factor_count * sizeof(float),
						 "rope factors", err);
		if (!j.values)
			return STRATA_E_NOMEM;
		memcpy(j.values, lists[i], r->factor_count * sizeof(float));
		if (!(j.name = dup_str(names[i], err))) {
			strata_free(j.values);
			return STRATA_E_NOMEM;
		}
		strata_status s = add_job(e, w, &j, f, err);
		if (s)
			return s;
	}
	return STRATA_OK;
}

/* Hugging Face in: llama.cpp's converter metadata and names, the q/k
 * permutation, llama3's rope factors as rope_freqs.weight. */
static strata_status hf_jobs(engine *e, const char *in, strata_gguf_writer *w,
			     strata_error *err)
{
	strata_model_desc d;
	strata_status s = strata_model_describe(in, e->c, &d, err);
	if (s)
		return s;
	if (!strata__quant_hf_arch(d.family))
		return strata_fail(err, STRATA_E_MODEL_ARCH,
				   "convert it with llama.cpp's convert_hf_to_gguf.py, "
				   "then quantize the GGUF",
				   "strata quantize converts llama, mistral, qwen2, "
				   "qwen3, gemma2, gemma3_text, phi3, mixtral, "
				   "qwen2_moe and qwen3_moe checkpoints; '%s' is %s", in,
				   d.headers_only ? "without config.json"
						  : d.architecture);
	if ((s = strata__quant_hf_metadata(w, in, &d, err)) ||
	    (s = set_file_type(e, w, err)))
		return s;
	rule_facts f = {d.layers, d.kv_heads && d.heads % d.kv_heads == 0
					  ? d.heads / d.kv_heads : 1,
			!d.tied_embeddings &&
				strata_catalog_find(e->c, "lm_head.weight")};
	float *rf = NULL;
	size_t n = strata_catalog_count(e->c);
	if ((s = strata__quant_rope_factors(&d, &rf, err)) ||
	    (s = jobs_alloc(e, n + 3, err))) {
		strata_free(rf);
		return s;
	}
	if (rf) {
		strata__quant_job j = {0};
		j.values = rf;
		j.n_dims = 1;
		j.ne[0] = d.head_dim / 2;
		if (!(j.name = dup_str("rope_freqs.weight", err))) {
			strata_free(rf);
			return STRATA_E_NOMEM;
		}
		if ((s = add_job(e, w, &j, &f, err)))
			return s;
	}
	if ((s = longrope_jobs(e, w, &d, &f, err)))
		return s;
	for (size_t i = 0; i < n && !s; i++)
		s = hf_tensor(e, w, &d, strata_catalog_tensor(e->c, i), &f, err);
	return s;
}

/* ------------------------------------------------------------------------ */
/* The command                                                              */
/* ------------------------------------------------------------------------ */

static strata_status scratch(engine *e, strata_error *err)
{
	uint64_t most = 1, raw = 1;
	for (size_t i = 0; i < e->n_jobs; i++) {
		uint64_t n = job_elements(&e->jobs[i]);
		if (n > most)
			most = n;
		if (e->jobs[i].src && e->jobs[i].src->bytes > raw)
			raw = e->jobs[i].src->bytes;
		for (uint32_t k = 0; k < e->jobs[i].stack_count; k++)
			if (e->jobs[i].stack[k]->bytes > raw)
				raw = e->jobs[i].stack[k]->bytes;
	}
	if (most > SIZE_MAX / sizeof(float) || raw > SIZE_MAX)
		return strata_fail(err, STRATA_E_OVERFLOW, "use a 64-bit build",
				   "a tensor of %" PRIu64 " elements", most);
	e->f32 = strata_alloc_or_error((size_t)most * sizeof(float),
				       "quantize buffers", err);
	e->tmp = e->f32 ? strata_alloc_or_error((size_t)most * sizeof(float),
						"quantize buffers", err)
			: NULL;
	e->raw = e->tmp ? strata_alloc_or_error((size_t)raw, "quantize buffers",
						err)
			: NULL;
	return e->raw ? STRATA_OK : STRATA_E_NOMEM;
}

static unsigned default_threads(unsigned asked)
{
	long n = asked ? (long)asked : sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 1)
		n = 1;
	return n > (long)MAX_THREADS ? MAX_THREADS : (unsigned)n;
}

strata_status strata_quantize(const char *in, const char *out,
			      const strata_quantize_options *o,
			      strata_quantize_stats *stats, strata_error *err)
{
	engine e;
	memset(&e, 0, sizeof e);
	e.p = o && o->type ? strata__quant_preset_find(o->type) : NULL;
	if (!e.p)
		return strata_fail(err, STRATA_E_USAGE,
				   "use --type with one of F32|F16|BF16|Q8_0|"
				   "Q4_0|Q4_1|Q5_0|Q5_1|Q2_K|Q3_K_M|Q4_K_M|"
				   "Q5_K_M|Q6_K|IQ4_XS",
				   "unknown quantization type '%s'",
				   o && o->type ? o->type : "");
	e.threads = default_threads(o->threads);
	uint64_t t0 = strata_now_ns();
	strata_catalog *c = NULL;
	strata_gguf_writer *w = NULL;
	strata_status s = strata_file_check_output(out, err);
	if (!s)
		s = strata_catalog_open(in, &c, err);
	e.c = c;
	if (!s)
		s = strata_gguf_writer_create(&w, err);
	if (!s)
		s = strata_catalog_format(c) == STRATA_FORMAT_GGUF
			    ? gguf_jobs(&e, w, err)
			    : hf_jobs(&e, in, w, err);
	if (!s)
		s = strata_weight_store_create(c, NULL, &e.ws, err);
	if (!s)
		s = scratch(&e, err);
	if (!s)
		s = strata_gguf_writer_write(w, out, fill, &e, err);
	e.stats.elapsed_ns = strata_now_ns() - t0;
	if (!s && stats)
		*stats = e.stats;
	strata_free(e.f32);
	strata_free(e.tmp);
	strata_free(e.raw);
	jobs_free(&e);
	strata_weight_store_destroy(e.ws);
	strata_gguf_writer_destroy(w);
	strata_catalog_destroy(c);
	return s;
}
