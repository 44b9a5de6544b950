/* dtype.c - the table of tensor types both formats declare, exact sizing of
 * element counts (quantised blocks included) and conversion to f32 for the
 * types strata computes with (layer: checkpoint). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "strata/checkpoint.h"

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

static uint16_t load_u16le(const unsigned char *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

float strata_f16_to_f32(uint16_t h)
{
	return half_to_f32(h);
}

strata_status strata_dtype_to_f32(strata_dtype t, const void *src,
				  uint64_t elements, float *dst,
				  strata_error *err)
{
	const unsigned char *p = src;
	switch (t) {
	case STRATA_DTYPE_F32:
		for (uint64_t i = 0; i < elements; i++) {
			uint32_t b = (uint32_t)p[4 * i] |
				     (uint32_t)p[4 * i + 1] << 8 |
				     (uint32_t)p[4 * i + 2] << 16 |
				     (uint32_t)p[4 * i + 3] << 24;
			memcpy(&dst[i], &b, sizeof b);
		}
		return STRATA_OK;
	case STRATA_DTYPE_F16:
		for (uint64_t i = 0; i < elements; i++)
			dst[i] = half_to_f32(load_u16le(p + 2 * i));
		return STRATA_OK;
	case STRATA_DTYPE_BF16:
		for (uint64_t i = 0; i < elements; i++) {
			uint32_t b = (uint32_t)load_u16le(p + 2 * i) << 16;
			memcpy(&dst[i], &b, sizeof b);
		}
		return STRATA_OK;
	case STRATA_DTYPE_Q8_0:
		/* block: f16 scale d, then 32 int8 q; x = d * q */
		if (elements % 32)
			return strata_fail(err, STRATA_E_CKPT_SHAPE,
					   "Q8_0 data comes in blocks of 32 elements",
					   "%" PRIu64 " elements are not whole Q8_0 blocks",
					   elements);
		for (uint64_t b = 0; b < elements / 32; b++) {
			const unsigned char *blk = p + 34 * b;
			float d = half_to_f32(load_u16le(blk));
			for (int j = 0; j < 32; j++)
				dst[32 * b + j] =
					d * (float)(int8_t)blk[2 + j];
		}
		return STRATA_OK;
	default: {
		const strata_dtype_info *d = strata_dtype_get(t);
		return strata_fail(err, STRATA_E_UNSUPPORTED,
				   "convert the checkpoint to F32, F16, BF16 or Q8_0",
				   "converting %s tensors to f32 is not supported yet",
				   d ? d->name : "unknown");
	}
	}
}
