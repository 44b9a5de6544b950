/* memory.c - where-it-executes tensor bytes and the memory model of a
 * forward pass: KV cache, activations, logits, staging ring, alignment, and
 * the budgets' headroom (layer: plan).
 *
 * The runtime allocates through these same functions (plan.h), so every
 * formula here is a buffer the engine really holds. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "strata/backend.h"
#include "strata/plan.h"

/* ------------------------------------------------------------------------ */
/* Names                                                                    */
/* ------------------------------------------------------------------------ */

const char *strata_residency_mode_name(strata_residency_mode m)
{
	switch (m) {
#define STRATA_RESIDENCY_CASE(name, text)                                      \
	case STRATA_RESIDENCY_##name:                                          \
		return text;
		STRATA_RESIDENCY_MAP(STRATA_RESIDENCY_CASE)
#undef STRATA_RESIDENCY_CASE
	}
	return "unknown";
}

const char *strata_plan_device_name(strata_plan_device d)
{
	switch (d) {
#define STRATA_PLAN_DEVICE_CASE(name, text)                                    \
	case STRATA_PLAN_DEVICE_##name:                                        \
		return text;
		STRATA_PLAN_DEVICE_MAP(STRATA_PLAN_DEVICE_CASE)
#undef STRATA_PLAN_DEVICE_CASE
	}
	return "unknown";
}

/* ------------------------------------------------------------------------ */
/* Tensor bytes where they execute                                          */
/* ------------------------------------------------------------------------ */

/* The weight type of dtype t, false for a type no kernel table names
 * (the two maps share their names: STRATA_WEIGHT_TYPE_MAP). */
static bool weight_type_of(strata_dtype t, strata_weight_type *out)
{
	switch (t) {
#define DTYPE_WEIGHT(name, text) \
	case STRATA_DTYPE_##name: *out = STRATA_WEIGHT_##name; return true;
		STRATA_WEIGHT_TYPE_MAP(DTYPE_WEIGHT)
#undef DTYPE_WEIGHT
	default: return false;
	}
}

/* Whether a tensor of type t stays as stored on d (plan.h's rule). */
static bool stays_stored(strata_dtype t, bool vector, strata_plan_device d)
{
	switch (t) {
	case STRATA_DTYPE_I64: case STRATA_DTYPE_I32: case STRATA_DTYPE_I16:
	case STRATA_DTYPE_I8: case STRATA_DTYPE_U64: case STRATA_DTYPE_U32:
	case STRATA_DTYPE_U16: case STRATA_DTYPE_U8: case STRATA_DTYPE_BOOL:
		return true; /* integer and bool types */
	default:
		break;
	}
	strata_weight_type w;
	if (!weight_type_of(t, &w))
		return false;
	if (vector)
		return w == STRATA_WEIGHT_F32 ||
		       (d == STRATA_PLAN_DEVICE_CUDA &&
			(w == STRATA_WEIGHT_BF16 || w == STRATA_WEIGHT_F16));
	const char *kind = d == STRATA_PLAN_DEVICE_CUDA ? "cuda" : "cpu";
	return (strata_backend_weight_types(kind) & STRATA_WEIGHT_BIT(w)) != 0;
}

/* plan.h's rule on a tensor of `elements` elements of type t. */
static strata_status exec_of(strata_dtype t, uint64_t elements, bool vector,
			     strata_plan_device d, strata_plan_exec *out,
			     strata_error *err)
{
	const strata_dtype_info *info =
		(unsigned)t < STRATA_DTYPE_COUNT ? strata_dtype_get(t) : NULL;
	if (!info)
		return strata_fail(err, STRATA_E_CKPT_DTYPE,
				   "re-export the checkpoint with a supported tensor type",
				   "tensor type %d is not in strata's dtype table",
				   (int)t);
	strata_plan_exec e = {.convert = !stays_stored(t, vector, d)};
	uint64_t per = e.convert ? 4 : info->block_bytes;
	uint64_t blocks = e.convert ? elements
				    : elements / info->block_elements +
					      (elements % info->block_elements != 0);
	strata_status s = strata_checked_mul(blocks, per, &e.bytes,
					     "tensor device bytes", err);
	if (s == STRATA_OK)
		*out = e;
	return s;
}

strata_status strata_plan_tensor_exec(const strata_tensor *t,
				      strata_plan_device d,
				      strata_plan_exec *out, strata_error *err)
{
	return exec_of(t->dtype, t->elements, t->n_dims < 2, d, out, err);
}

strata_status strata_plan_tensor_device_bytes(strata_dtype t,
					      uint64_t elements,
					      strata_plan_device d,
					      uint64_t *out, strata_error *err)
{
	strata_plan_exec e = {0};
	strata_status s = exec_of(t, elements, false, d, &e, err);
	if (s != STRATA_OK)
		return s;
	return strata_checked_align(e.bytes, out, "tensor device bytes", err);
}

/* ------------------------------------------------------------------------ */
/* The memory model                                                         */
/* ------------------------------------------------------------------------ */

/* Product of n factors, then aligned; E_OVERFLOW names `what`. */
static strata_status buffer_bytes(const uint64_t *f, size_t n,
				  const char *what, uint64_t *out,
				  strata_error *err)
{
	uint64_t p = 1;
	for (size_t i = 0; i < n; i++) {
		strata_status s = strata_checked_mul(p, f[i], &p, what, err);
		if (s != STRATA_OK)
			return s;
	}
	return strata_checked_align(p, out, what, err);
}

#define BUFFER(out, what, ...)                                                 \
	do {                                                                   \
		const uint64_t f_[] = {__VA_ARGS__};                           \
		s = buffer_bytes(f_, sizeof f_ / sizeof *f_, what, (out), err); \
		if (s != STRATA_OK)                                            \
			return s;                                              \
	} while (0)

/* Sum of n buffers of `per` floats each, each aligned, into *out. */
static strata_status floats(uint64_t per, uint64_t n, const char *what,
			    uint64_t *out, strata_error *err)
{
	uint64_t one = 0;
	strata_status s = STRATA_OK;
	if (per) {
		const uint64_t f[] = {per, 4};
		s = buffer_bytes(f, 2, what, &one, err);
	}
	if (s == STRATA_OK)
		s = strata_checked_mul(one, n, out, what, err);
	return s;
}

/* The buffers only some families take: the rotary frequencies (twice with
 * sliding layers of their own base), the router's and experts' rows, the
 * f32 copies of 1 + w norms, and the biases' f32 copies where the MLP
 * gate they borrow is smaller. */
static strata_status extras(const strata_plan_arch *a, uint64_t T,
			    uint64_t hd, uint64_t kvd, strata_plan_memory *m,
			    strata_error *err)
{
	strata_status s;
	uint64_t in, bias, mlp, norms;
	if ((s = floats(a->head_dim / 2, a->local_rope ? 2 : 1,
			"rope frequencies", &m->rope_bytes, err)))
		return s;
	m->moe_bytes = m->norms_bytes = m->bias_bytes = 0;
	if (a->experts) {
		BUFFER(&m->moe_bytes, "router logits buffer", T, a->experts, 4);
		/* the experts' input and output rows, one buffer each */
		BUFFER(&in, "expert rows buffer", T, a->hidden, 4);
		if ((s = strata_checked_mul(in, 2, &in, "expert rows buffer",
					    err)) ||
		    (s = strata_checked_add(m->moe_bytes, in, &m->moe_bytes,
					    "expert rows buffer", err)))
			return s;
	}
	if (a->norm_plus_one &&
	    ((s = strata_checked_mul(a->hidden, 4, &norms, "norm weights",
				     err)) ||
	     (s = strata_checked_add(norms, a->head_dim * 2, &norms,
				     "norm weights", err)) ||
	     (s = floats(norms, 1, "norm weights", &m->norms_bytes, err))))
		return s;
	if ((s = strata_checked_mul(kvd, 2, &bias, "biases", err)) ||
	    (s = strata_checked_add(bias, hd, &bias, "biases", err)) ||
	    (s = strata_checked_mul(T, a->intermediate, &mlp, "mlp rows", err)))
		return s;
	if (bias < a->head_dim / 2)
		bias = a->head_dim / 2;
	if (mlp < bias && (s = floats(bias, 1, "biases", &m->bias_bytes, err)))
		return s;
	return STRATA_OK;
}

/* The forward pass's buffers of one computing site for T rows in flight
 * (plan.h map; forward_create.c's buffer_list takes exactly these). */
static strata_status activations(const strata_plan_arch *a,
				 const strata_plan_shape *sh, uint64_t T,
				 strata_plan_memory *m, strata_error *err)
{
	strata_status s;
	uint64_t hd, kvd;
	s = strata_checked_mul(a->heads, a->head_dim, &hd,
			       "heads x head_dim", err);
	if (s != STRATA_OK)
		return s;
	s = strata_checked_mul(a->kv_heads, a->head_dim, &kvd,
			       "kv_heads x head_dim", err);
	if (s != STRATA_OK)
		return s;
	BUFFER(&m->x_bytes, "residual buffer", T, a->hidden, 4);
	BUFFER(&m->xb_bytes, "normed buffer", T, a->hidden, 4);
	BUFFER(&m->xb2_bytes, "attention output buffer", T, hd, 4);
	BUFFER(&m->q_bytes, "query buffer", T, hd, 4);
	/* a step of several sequences writes its new keys and values beside
	 * the cache before attention (a prompt chunk beside decodes); so does
	 * every pass over an f16/bf16 cache (f32 rows, then stored) */
	m->k_bytes = m->v_bytes = 0;
	if (sh->batch > 1 || sh->kv_type != STRATA_WEIGHT_F32) {
		BUFFER(&m->k_bytes, "step keys buffer", T, kvd, 4);
		BUFFER(&m->v_bytes, "step values buffer", T, kvd, 4);
	}
	BUFFER(&m->hb_bytes, "mlp gate buffer", T, a->intermediate, 4);
	BUFFER(&m->hb2_bytes, "mlp up buffer", T, a->intermediate, 4);
	if ((s = extras(a, T, hd, kvd, m, err)))
		return s;
	BUFFER(&m->logits_bytes, "logits buffer", sh->batch, a->vocab, 4);
	uint64_t sum = 0;
#define STRATA_PLAN_ACT_SUM(field, json, shape)                                \
	s = strata_checked_add(sum, m->field##_bytes, &sum, "workspace bytes", \
			       err);                                           \
	if (s != STRATA_OK)                                                    \
		return s;
	STRATA_PLAN_ACTIVATION_MAP(STRATA_PLAN_ACT_SUM)
#undef STRATA_PLAN_ACT_SUM
	m->workspace_bytes = sum;
	return STRATA_OK;
}

/* The CUDA half products' input for several rows: x split in two half
 * terms (2 x 2 bytes an element) for the most rows a pass multiplies, a
 * prefill chunk or a batched decode step, of the widest input. One row is
 * a GEMV on f32 x and needs none. */
static strata_status product_workspace(const strata_plan_arch *a,
				       const strata_plan_shape *sh,
				       strata_plan_memory *m,
				       strata_error *err)
{
	uint64_t rows = sh->prefill_chunk > sh->batch ? sh->prefill_chunk
						      : sh->batch;
	uint64_t widest = a->hidden > a->intermediate ? a->hidden
						      : a->intermediate, hd;
	strata_status s = strata_checked_mul(a->heads, a->head_dim, &hd,
					     "heads x head_dim", err);
	if (s != STRATA_OK)
		return s;
	widest = hd > widest ? hd : widest;
	if (rows < 2) {
		m->product_workspace_bytes = 0;
		return STRATA_OK;
	}
	BUFFER(&m->product_workspace_bytes, "product workspace", rows, widest,
	       4);
	return STRATA_OK;
}

uint64_t strata_plan_cuda_pinned_bytes(uint64_t pinned_bytes)
{
	uint64_t entries = pinned_bytes / 512, g = STRATA_PLAN_CUDA_GRANULE;
	if (!pinned_bytes)
		return 0;
	return entries / g * g + (entries % g ? g : 0) + g;
}

uint64_t strata_plan_cuda_driver_bytes(uint64_t pinned_bytes)
{
	return strata_plan_cuda_pinned_bytes(pinned_bytes) +
	       3 * STRATA_PLAN_CUDA_GRANULE;
}

strata_status strata_plan_memory_compute(const strata_plan_arch *arch,
					 const strata_plan_shape *shape,
					 strata_plan_device device,
					 strata_dtype weight_dtype,
					 uint64_t largest_unit_bytes,
					 uint64_t staging_slots,
					 strata_plan_memory *out,
					 strata_error *err)
{
	strata_plan_memory m;
	memset(&m, 0, sizeof m);
	strata_status s;
	/* the ring does not depend on the architecture */
	m.staging_slots = staging_slots;
	m.staging_slot_bytes = staging_slots ? largest_unit_bytes : 0;
	s = strata_checked_mul(staging_slots, largest_unit_bytes,
			       &m.staging_bytes, "staging ring bytes", err);
	if (s != STRATA_OK)
		return s;
	if (!arch || !arch->known) {
		*out = m;
		return STRATA_OK;
	}
	m.arch_known = true;
	/* The KV cache holds the elements --kv-type names, on every backend
	 * (f32 by default, whatever the weights: half weights change only
	 * the weight bytes); an f16/bf16 cache's new rows pass through the
	 * key and value buffers below, f32, before they are stored. */
	m.kv_element_bytes = strata_kv_type_bytes(shape->kv_type);
	if (!m.kv_element_bytes)
		return strata_fail(err, STRATA_E_PLAN_OPTIONS,
				   "use --kv-type f32, f16 or bf16",
				   "the KV cache cannot hold %s elements",
				   strata_weight_type_name(shape->kv_type));
	/* Rows of one pass: a prefill chunk, or one step of every sequence,
	 * whose rows (decode tokens and prompt chunks together, issue 19)
	 * are at most the larger of the two: what the forward pass holds. */
	uint64_t T = shape->prefill_chunk > shape->batch ? shape->prefill_chunk
							 : shape->batch;
	BUFFER(&m.kv_buffer_bytes, "KV buffer", shape->batch, shape->context,
	       arch->kv_heads, arch->head_dim, m.kv_element_bytes);
	/* one site holding every layer: one block of every layer's keys and
	 * one of their values (strata_kv_cache_create); split over sites,
	 * each layer's pair is its own (kv_buffer_bytes each) */
	BUFFER(&m.kv_cache_bytes, "KV cache", arch->layers, shape->batch,
	       shape->context, arch->kv_heads, arch->head_dim,
	       m.kv_element_bytes);
	s = strata_checked_mul(m.kv_cache_bytes, 2, &m.kv_cache_bytes,
			       "KV cache", err);
	if (s != STRATA_OK)
		return s;
	s = activations(arch, shape, T, &m, err);
	if (s == STRATA_OK && device == STRATA_PLAN_DEVICE_CUDA &&
	    (unsigned)weight_dtype < STRATA_DTYPE_COUNT &&
	    weight_dtype != STRATA_DTYPE_F32 &&
	    stays_stored(weight_dtype, false, device))
		s = product_workspace(arch, shape, &m, err);
	if (s != STRATA_OK)
		return s;
	*out = m;
	return STRATA_OK;
}

#undef BUFFER

uint64_t strata_plan_site_bytes(const strata_plan_memory *m,
				uint64_t kv_layers, bool stages,
				bool head_unaddressable)
{
	if (!m->arch_known)
		return 0;
	uint64_t t = m->workspace_bytes, pair = 0;
	(void)strata_mul_u64(m->kv_buffer_bytes, 2, &pair);
	uint64_t kv = UINT64_MAX;
	if (kv_layers == UINT64_MAX)
		kv = m->kv_cache_bytes;
	else if (!strata_mul_u64(pair, kv_layers, &kv))
		kv = UINT64_MAX;
	t = strata_sat_add_u64(t, kv);
	if (stages)
		t = strata_sat_add_u64(t, pair);
	if (head_unaddressable)
		t = strata_sat_add_u64(t, m->logits_bytes);
	return t;
}

/* ------------------------------------------------------------------------ */
/* Budgets                                                                  */
/* ------------------------------------------------------------------------ */

uint64_t strata_plan_headroom(strata_plan_device d, uint64_t available)
{
	uint64_t floor_bytes, share;
	if (d == STRATA_PLAN_DEVICE_CUDA) {
		floor_bytes = 512ull << 20;
		share = available / 20;
	} else {
		floor_bytes = 1ull << 30;
		share = available / 10;
	}
	uint64_t h = share > floor_bytes ? share : floor_bytes;
	return h < available ? h : available;
}

strata_status strata_plan_parse_meminfo(const char *text, size_t len,
					uint64_t *bytes, strata_error *err)
{
	static const char key[] = "MemAvailable:";
	const size_t klen = sizeof key - 1;
	for (size_t i = 0; i + klen <= len; i++) {
		if ((i > 0 && text[i - 1] != '\n') ||
		    memcmp(text + i, key, klen) != 0)
			continue;
		size_t j = i + klen;
		while (j < len && (text[j] == ' ' || text[j] == '\t'))
			j++;
		uint64_t kb = 0;
		size_t digits = 0;
		for (; j < len && text[j] >= '0' && text[j] <= '9';
		     j++, digits++) {
			if (!strata_mul_u64(kb, 10, &kb) ||
			    !strata_add_u64(kb, (uint64_t)(text[j] - '0'), &kb))
				return strata_fail(
					err, STRATA_E_OVERFLOW,
					"give --host-memory explicitly",
					"/proc/meminfo MemAvailable does not fit in 64 bits");
		}
		if (digits == 0 || len - j < 3 || memcmp(text + j, " kB", 3))
			return strata_fail(err, STRATA_E_PARSE,
					   "give --host-memory explicitly",
					   "/proc/meminfo MemAvailable is not 'N kB'");
		return strata_checked_mul(kb, 1024, bytes,
					  "MemAvailable bytes", err);
	}
	return strata_fail(err, STRATA_E_PARSE, "give --host-memory explicitly",
			   "/proc/meminfo has no MemAvailable line");
}

strata_status strata_plan_host_available(uint64_t *bytes, strata_error *err)
{
	/* /proc files report size 0, so read until EOF into a fixed buffer
	 * rather than through strata_file_read_all (which trusts fstat). */
	static const char path[] = "/proc/meminfo";
	char text[16384];
	size_t len = 0;
	int fd = strata_sys.open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return strata_fail(err, STRATA_E_IO,
				   "give --host-memory explicitly",
				   "cannot open %s: %s", path, strerror(errno));
	while (len < sizeof text) {
		ssize_t r = strata_sys.pread(fd, text + len, sizeof text - len,
					     (off_t)len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			strata_sys.close(fd);
			return strata_fail(err, STRATA_E_IO,
					   "give --host-memory explicitly",
					   "cannot read %s: %s", path,
					   strerror(e));
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	strata_sys.close(fd);
	return strata_plan_parse_meminfo(text, len, bytes, err);
}
