/* dtype.c - the table of tensor types both formats declare, exact sizing of
 * element counts (quantised blocks included) and conversion to f32 for the
 * types strata computes with, through base's block decoders (layer:
 * checkpoint). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "checkpoint/catalog.h"

typedef struct dtype_row {
	strata_dtype_info info;
	const char *st_name; /* safetensors spelling, NULL if none */
	int ggml_id;	     /* -1 if ggml has no such type */
} dtype_row;

static const dtype_row rows[STRATA_DTYPE_COUNT] = {
#define ROW(name, st, ggml, be, bb, fl) \
	[STRATA_DTYPE_##name] = {{#name, be, bb, fl}, st, ggml},
	STRATA_DTYPE_MAP(ROW)
#undef ROW
};

/* ggml ids go up to 39 (MXFP4); a reverse map built at compile time would
 * need the ids twice, so look up linearly: 44 rows, called per tensor. */
#define GGML_ID_LIMIT 64

/* ------------------------------------------------------------------------ */

const strata_dtype_info *strata_dtype_get(strata_dtype t)
{
	if ((unsigned)t >= STRATA_DTYPE_COUNT)
		return NULL;
	return &rows[t].info;
}

bool strata_dtype_from_safetensors(const char *name, strata_dtype *out)
{
	for (int t = 0; t < STRATA_DTYPE_COUNT; t++)
		if (rows[t].st_name && !strcmp(rows[t].st_name, name)) {
			*out = (strata_dtype)t;
			return true;
		}
	return false;
}

bool strata_dtype_from_ggml(uint32_t id, strata_dtype *out)
{
	if (id >= GGML_ID_LIMIT)
		return false;
	for (int t = 0; t < STRATA_DTYPE_COUNT; t++)
		if (rows[t].ggml_id == (int)id) {
			*out = (strata_dtype)t;
			return true;
		}
	return false;
}

int strata_dtype_ggml_id(strata_dtype t)
{
	return (unsigned)t < STRATA_DTYPE_COUNT ? rows[t].ggml_id : -1;
}

strata_status strata_dtype_bytes(strata_dtype t, uint64_t elements,
				 uint64_t *out, strata_error *err)
{
	const strata_dtype_info *d = strata_dtype_get(t);
	if (!d)
		return strata_fail(err, STRATA_E_CKPT_DTYPE,
				   "use a type from strata's dtype table",
				   "tensor type %d is not a known type", (int)t);
	if (elements % d->block_elements != 0)
		return strata_fail(err, STRATA_E_CKPT_SHAPE,
				   "the tensor's element count must be a whole number of blocks; the file is malformed",
				   "%" PRIu64 " elements of %s are not a whole number of %" PRIu32
				   "-element blocks",
				   elements, d->name, d->block_elements);
	uint64_t bytes;
	if (!strata_mul_u64(elements / d->block_elements, d->block_bytes,
			    &bytes))
		return strata_fail(err, STRATA_E_OVERFLOW,
				   "the tensor's shape is not plausible; the file is malformed",
				   "%" PRIu64 " elements of %s overflow a 64-bit byte count",
				   elements, d->name);
	*out = bytes;
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Conversion to f32                                                        */
/* ------------------------------------------------------------------------ */

/* IEEE half to float, subnormals and specials included. */
static float half_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13);
	} else if (exp != 0) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else {
		/* zero or subnormal: man * 2^-24, exact in float */
		float v = ldexpf((float)man, -24);
		return sign ? -v : v;
	}
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

float strata_f16_to_f32(uint16_t h)
{
	return half_to_f32(h);
}

bool strata_dtype_block(strata_dtype t, strata_block_type *out)
{
	switch (t) {
#define DTYPE_BLOCK(name, be, bb) \
	case STRATA_DTYPE_##name: *out = STRATA_BLOCK_##name; return true;
		STRATA_BLOCK_MAP(DTYPE_BLOCK)
#undef DTYPE_BLOCK
	default: return false;
	}
}

/* E_UNSUPPORTED for a type strata cannot decode, E_CKPT_SHAPE for a count
 * that is not whole blocks. */
static strata_status check_convertible(strata_dtype t, uint64_t elements,
				       strata_error *err)
{
	const strata_dtype_info *d = strata_dtype_get(t);
	strata_block_type b;
	if (!d || !strata_dtype_block(t, &b))
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   STRATA_FIX_CONVERT_TYPE,
				   "strata cannot compute with %s tensors",
				   d ? d->name : "unknown");
	if (elements % d->block_elements)
		return strata_fail(err, STRATA_E_CKPT_SHAPE,
				   "the tensor's element count must be a whole number of blocks; the file is malformed",
				   "%" PRIu64 " elements are not whole %s blocks of %" PRIu32,
				   elements, d->name, d->block_elements);
	return STRATA_OK;
}

static strata_status value_error(const strata_dtype_info *d, uint64_t bad,
				 uint64_t elements, strata_error *err)
{
	return strata_fail(err, STRATA_E_CKPT_VALUE,
			   "the file is damaged or was written from a diverged model; "
			   "re-download or re-convert it",
			   "%s %s %" PRIu64 " of %" PRIu64 " holds NaN or infinity",
			   d->name, d->block_elements > 1 ? "block" : "element",
			   bad, elements / d->block_elements);
}

strata_status strata_dtype_to_f32(strata_dtype t, const void *src,
				  uint64_t elements, float *dst,
				  strata_error *err)
{
	strata_status st = check_convertible(t, elements, err);
	if (st)
		return st;
	strata_block_type b;
	(void)strata_dtype_block(t, &b);
	uint64_t bad = strata_block_decode(b, src, dst, elements);
	if (bad != STRATA_BLOCK_ALL_FINITE)
		return value_error(strata_dtype_get(t), bad, elements, err);
	return STRATA_OK;
}

strata_status strata_dtype_check_finite(strata_dtype t, const void *src,
					uint64_t elements, strata_error *err)
{
	strata_status st = check_convertible(t, elements, err);
	if (st)
		return st;
	strata_block_type b;
	(void)strata_dtype_block(t, &b);
	/* the decoder's verdict from the factors' bits, at memory speed */
	uint64_t bad = strata_block_first_nonfinite(b, src, elements);
	if (bad != STRATA_BLOCK_ALL_FINITE)
		return value_error(strata_dtype_get(t), bad, elements, err);
	return STRATA_OK;
}

uint32_t strata__tensor_check_unit(const strata_tensor *t)
{
	strata_block_type b;
	if (t->dtype == STRATA_DTYPE_F32 || !strata_dtype_block(t->dtype, &b))
		return 0;
	return strata_block_bytes(b);
}

strata_status strata__tensor_check_values(const strata_tensor *t,
					  const void *p, uint64_t at,
					  uint64_t bytes, strata_error *err)
{
	uint32_t unit = strata__tensor_check_unit(t);
	if (!unit || !bytes)
		return STRATA_OK;
	const strata_dtype_info *d = strata_dtype_get(t->dtype);
	strata_block_type b;
	(void)strata_dtype_block(t->dtype, &b);
	uint64_t bad = strata_block_first_nonfinite(
		b, p, bytes / unit * d->block_elements);
	if (bad == STRATA_BLOCK_ALL_FINITE)
		return STRATA_OK;
	value_error(d, at / unit + bad, t->elements, err);
	return strata_error_prefix(err, "tensor '%s'", t->name);
}
