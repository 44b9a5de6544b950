/* test_quant_dequant.c - every GGUF block type strata decodes equals
 * gguf-py's dequantization bit for bit (SHA-256 of every tensor of every
 * file in tests/data/quant, as dequant.json lists them); NaN or infinite
 * scales and values are refused naming the block; other types are refused
 * naming how to convert the file (strata quantize). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "checkpoint/sha256.h"
#include "strata/checkpoint.h"

#define QUANT STRATA_SOURCE_DIR "/tests/data/quant/"

static unsigned char *tensor_bytes(const strata_catalog *c,
				   const strata_tensor *t)
{
	FILE *f = fopen(strata_catalog_file_at(c, t->file)->path, "rb");
	assert_non_null(f);
	unsigned char *p = malloc(t->bytes ? t->bytes : 1);
	assert_int_equal(fseek(f, (long)t->offset, SEEK_SET), 0);
	assert_int_equal(fread(p, 1, t->bytes, f), t->bytes);
	fclose(f);
	return p;
}

static void sha256_matches_the_fips_vector(void **state)
{
	(void)state;
	sha256 s;
	char hex[65];
	sha256_init(&s);
	sha256_update(&s, "abc", 3);
	sha256_hex(&s, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a3"
				 "96177a9cb410ff61f20015ad");
	/* two blocks: 56 bytes force a second padding block */
	sha256_init(&s);
	sha256_update(&s, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		      56);
	sha256_hex(&s, hex);
	assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce459"
				 "64ff2167f6ecedd419db06c1");
}

/* Checks one tensor: type name, first values and the digest. */
static void check_tensor(const char *file, const strata_catalog *c,
			 const char *name, json_t *want, int *types_seen)
{
	const strata_tensor *t = strata_catalog_find(c, name);
	if (!t)
		fail_msg("%s: tensor '%s' missing", file, name);
	const strata_dtype_info *info = strata_dtype_get(t->dtype);
	const char *type = json_string_value(json_object_get(want, "type"));
	if (strcmp(info->name, type))
		fail_msg("%s '%s': type %s, gguf-py says %s", file, name,
			 info->name, type);
	types_seen[t->dtype] = 1;
	unsigned char *raw = tensor_bytes(c, t);
	float *y = malloc(t->elements * sizeof *y);
	strata_error e;
	if (strata_dtype_to_f32(t->dtype, raw, t->elements, y, &e))
		fail_msg("%s '%s': %s", file, name, e.message);
	json_t *first = json_object_get(want, "first8");
	for (size_t i = 0; i < json_array_size(first); i++)
		if (y[i] != (float)json_real_value(json_array_get(first, i)))
			fail_msg("%s '%s'[%zu] = %.9g, gguf-py %.9g", file,
				 name, i, (double)y[i],
				 json_real_value(json_array_get(first, i)));
	sha256 s;
	char hex[65];
	sha256_init(&s);
	sha256_update(&s, y, t->elements * sizeof *y);
	sha256_hex(&s, hex);
	const char *digest =
		json_string_value(json_object_get(want, "sha256_f32"));
	if (strcmp(hex, digest))
		fail_msg("%s '%s' (%s): SHA-256 %s, gguf-py %s", file, name,
			 type, hex, digest);
	free(y);
	free(raw);
}

static void every_tensor_of_every_file_is_bit_exact(void **state)
{
	(void)state;
	json_error_t je;
	json_t *root = json_load_file(QUANT "dequant.json", 0, &je);
	if (!root)
		fail_msg("dequant.json: %s", je.text);
	int seen[STRATA_DTYPE_COUNT] = {0};
	size_t tensors = 0;
	const char *file;
	json_t *entry;
	json_object_foreach(root, file, entry) {
		char path[512];
		snprintf(path, sizeof path, QUANT "%s", file);
		strata_catalog *c = NULL;
		strata_error e;
		if (strata_catalog_open(path, &c, &e))
			fail_msg("%s: %s", path, e.message);
		json_t *ts = json_object_get(entry, "tensors");
		assert_int_equal(json_object_size(ts), strata_catalog_count(c));
		const char *name;
		json_t *want;
		json_object_foreach(ts, name, want) {
			check_tensor(file, c, name, want, seen);
			tensors++;
		}
		strata_catalog_destroy(c);
	}
	json_decref(root);
	assert_int_equal(tensors, 13 * 21);
	/* the twelve files between them hold every type but BF16 */
	static const strata_dtype all[] = {
		STRATA_DTYPE_F32,  STRATA_DTYPE_F16,  STRATA_DTYPE_Q8_0,
		STRATA_DTYPE_Q4_0, STRATA_DTYPE_Q4_1, STRATA_DTYPE_Q5_0,
		STRATA_DTYPE_Q5_1, STRATA_DTYPE_Q2_K, STRATA_DTYPE_Q3_K,
		STRATA_DTYPE_Q4_K, STRATA_DTYPE_Q5_K, STRATA_DTYPE_Q6_K,
		STRATA_DTYPE_IQ4_NL, STRATA_DTYPE_IQ4_XS,
	};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		if (!seen[all[i]])
			fail_msg("no tensor of type %s was checked",
				 strata_dtype_get(all[i])->name);
}

static void bf16_is_the_top_half_of_f32(void **state)
{
	(void)state;
	const unsigned char b[6] = {0x80, 0x3f, 0xc0, 0xbf, 0x01, 0x00};
	float y[3];
	strata_error e;
	assert_int_equal(strata_dtype_to_f32(STRATA_DTYPE_BF16, b, 3, y, &e),
			 STRATA_OK);
	assert_true(y[0] == 1.0f && y[1] == -1.5f);
	assert_true(y[2] == ldexpf(1.0f, -133)); /* subnormal kept */
}

/* Byte offset of the first f16 factor of each block type, and the block. */
static const struct {
	strata_dtype t;
	size_t scale_at;
} scale_sites[] = {
	{STRATA_DTYPE_Q4_0, 0},	  {STRATA_DTYPE_Q4_1, 2},
	{STRATA_DTYPE_Q5_0, 0},	  {STRATA_DTYPE_Q5_1, 2},
	{STRATA_DTYPE_Q8_0, 0},	  {STRATA_DTYPE_IQ4_NL, 0},
	{STRATA_DTYPE_Q2_K, 82},  {STRATA_DTYPE_Q3_K, 108},
	{STRATA_DTYPE_Q4_K, 2},	  {STRATA_DTYPE_Q5_K, 0},
	{STRATA_DTYPE_Q6_K, 208}, {STRATA_DTYPE_IQ4_XS, 0},
};

static void a_nan_or_infinite_scale_names_its_block(void **state)
{
	(void)state;
	unsigned char blocks[2 * 292];
	float y[512];
	for (size_t i = 0; i < sizeof scale_sites / sizeof *scale_sites; i++) {
		const strata_dtype_info *d = strata_dtype_get(scale_sites[i].t);
		memset(blocks, 0, sizeof blocks);
		strata_error e;
		assert_int_equal(strata_dtype_to_f32(scale_sites[i].t, blocks,
						     2 * d->block_elements, y,
						     &e),
				 STRATA_OK);
		/* the second block's factor: +inf, then NaN */
		for (int nan = 0; nan < 2; nan++) {
			unsigned char *s =
				blocks + d->block_bytes + scale_sites[i].scale_at;
			s[0] = nan ? 0x01 : 0x00;
			s[1] = 0x7c;
			assert_int_equal(strata_dtype_to_f32(scale_sites[i].t,
							     blocks,
							     2 * d->block_elements,
							     y, &e),
					 STRATA_E_CKPT_VALUE);
			assert_non_null(strstr(e.message, "block 1 of 2"));
			assert_non_null(strstr(e.message, d->name));
		}
	}
}

static void a_nan_value_of_a_float_type_is_refused(void **state)
{
	(void)state;
	const unsigned char f16[4] = {0x00, 0x3c, 0x00, 0xfe}; /* 1, NaN */
	const unsigned char f32[8] = {0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xff};
	float y[2];
	strata_error e;
	assert_int_equal(strata_dtype_to_f32(STRATA_DTYPE_F16, f16, 2, y, &e),
			 STRATA_E_CKPT_VALUE);
	assert_non_null(strstr(e.message, "F16 element 1 of 2"));
	assert_int_equal(strata_dtype_to_f32(STRATA_DTYPE_F32, f32, 2, y, &e),
			 STRATA_E_CKPT_VALUE);
}

static void other_types_name_strata_quantize(void **state)
{
	(void)state;
	unsigned char b[66] = {0};
	float y[256];
	strata_error e;
	assert_int_equal(strata_dtype_to_f32(STRATA_DTYPE_IQ2_XXS, b, 256, y,
					     &e),
			 STRATA_E_UNSUPPORTED);
	assert_non_null(strstr(e.message, "IQ2_XXS"));
	assert_non_null(strstr(e.fix, "strata quantize MODEL OUT.gguf --type"));
	assert_int_equal(strata_dtype_to_f32(STRATA_DTYPE_Q4_K, b, 128, y, &e),
			 STRATA_E_CKPT_SHAPE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sha256_matches_the_fips_vector),
		cmocka_unit_test(every_tensor_of_every_file_is_bit_exact),
		cmocka_unit_test(bf16_is_the_top_half_of_f32),
		cmocka_unit_test(a_nan_or_infinite_scale_names_its_block),
		cmocka_unit_test(a_nan_value_of_a_float_type_is_refused),
		cmocka_unit_test(other_types_name_strata_quantize),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
