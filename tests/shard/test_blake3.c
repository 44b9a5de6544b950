/* test_blake3.c - BLAKE3 as built from Debian's official C sources against
 * the published test vectors (tests/data/blake3, layer: shard). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "blake3.h"
#include "strata/shard.h"

#define VECTORS STRATA_SOURCE_DIR "/tests/data/blake3/test_vectors.json"
#define OUT_BYTES 131 /* every case gives 131 bytes of extended output */

static json_t *vectors;

static int load(void **state)
{
	(void)state;
	json_error_t e;
	vectors = json_load_file(VECTORS, 0, &e);
	if (!vectors) {
		fprintf(stderr, "cannot read %s: %s\n", VECTORS, e.text);
		return -1;
	}
	return 0;
}

static int unload(void **state)
{
	(void)state;
	json_decref(vectors);
	return 0;
}

static void unhex(const char *hex, uint8_t *out, size_t n)
{
	assert_int_equal(strlen(hex), 2 * n);
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* The input of every case: bytes i % 251 (the vectors' own definition). */
static uint8_t *input_of(size_t len)
{
	uint8_t *in = malloc(len ? len : 1);
	assert_non_null(in);
	for (size_t i = 0; i < len; i++)
		in[i] = (uint8_t)(i % 251);
	return in;
}

typedef enum mode { HASH, KEYED, DERIVE } mode;

static void run_mode(mode m, const char *field)
{
	const char *key = json_string_value(json_object_get(vectors, "key"));
	const char *ctx =
		json_string_value(json_object_get(vectors, "context_string"));
	json_t *cases = json_object_get(vectors, "cases");
	assert_non_null(key);
	assert_non_null(ctx);
	assert_int_equal(strlen(key), BLAKE3_KEY_LEN);
	assert_true(json_array_size(cases) >= 20);
	size_t i;
	json_t *c;
	json_array_foreach(cases, i, c) {
		size_t len = (size_t)json_integer_value(json_object_get(c, "input_len"));
		uint8_t want[OUT_BYTES], got[OUT_BYTES];
		unhex(json_string_value(json_object_get(c, field)), want,
		      OUT_BYTES);
		uint8_t *in = input_of(len);
		blake3_hasher h;
		if (m == HASH)
			blake3_hasher_init(&h);
		else if (m == KEYED)
			blake3_hasher_init_keyed(&h, (const uint8_t *)key);
		else
			blake3_hasher_init_derive_key(&h, ctx);
		/* Feed in uneven pieces so the chunk buffering is covered. */
		for (size_t o = 0, step = 1; o < len; o += step, step = step * 3 + 1)
			blake3_hasher_update(&h, in + o,
					     step < len - o ? step : len - o);
		blake3_hasher_finalize(&h, got, OUT_BYTES);
		if (memcmp(got, want, OUT_BYTES) != 0)
			fail_msg("%s mismatch at input_len %zu", field, len);
		/* The default-length output is the first 32 bytes. */
		blake3_hasher_finalize(&h, got, BLAKE3_OUT_LEN);
		assert_memory_equal(got, want, BLAKE3_OUT_LEN);
		if (m == HASH) {
			/* The project's one-shot wrapper gives the same. */
			memset(got, 0, sizeof got);
			strata_shard_hash(in, len, got, OUT_BYTES);
			assert_memory_equal(got, want, OUT_BYTES);
		}
		free(in);
	}
}

static void test_hash_mode_matches_vectors(void **state)
{
	(void)state;
	run_mode(HASH, "hash");
}

static void test_keyed_mode_matches_vectors(void **state)
{
	(void)state;
	run_mode(KEYED, "keyed_hash");
}

static void test_derive_key_mode_matches_vectors(void **state)
{
	(void)state;
	run_mode(DERIVE, "derive_key");
}

/* The home device reads the digest's first four bytes little-endian. */
static void test_home_is_first_four_bytes_le_mod_n(void **state)
{
	(void)state;
	/* BLAKE3("") starts af 13 49 b9 (the vectors, input_len 0). */
	uint32_t h = 0xb94913afu;
	for (uint32_t n = 1; n <= 300; n++) {
		uint32_t d;
		assert_int_equal(strata_shard_home("", 0, n, &d, NULL), STRATA_OK);
		assert_int_equal(d, h % n);
	}
	uint32_t d;
	assert_int_equal(strata_shard_home("", 0, UINT32_MAX, &d, NULL),
			 STRATA_OK);
	assert_int_equal(d, h % UINT32_MAX);
}

/* The one-block fast path of strata_shard_home agrees with the full hasher
 * at every length around the block edge, for many device counts. */
static void test_home_fast_path_matches_hasher(void **state)
{
	(void)state;
	static const uint32_t counts[] = {1, 2, 3, 7, 64, 1000003, UINT32_MAX};
	uint8_t key[200];
	uint64_t x = 7;
	for (size_t len = 0; len <= sizeof key; len++) {
		for (int rep = 0; rep < 4; rep++) {
			for (size_t i = 0; i < len; i++) {
				x = x * 6364136223846793005ull + 1442695040888963407ull;
				key[i] = (uint8_t)(x >> 56);
			}
			uint8_t d[4];
			blake3_hasher h;
			blake3_hasher_init(&h);
			blake3_hasher_update(&h, key, len);
			blake3_hasher_finalize(&h, d, 4);
			uint32_t w = (uint32_t)d[0] | (uint32_t)d[1] << 8 |
				     (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
			for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
				uint32_t got;
				assert_int_equal(strata_shard_home(key, len, counts[c],
								   &got, NULL),
						 STRATA_OK);
				if (got != w % counts[c])
					fail_msg("len %zu n %u: %u, hasher says %u", len,
						 counts[c], got, w % counts[c]);
			}
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hash_mode_matches_vectors),
		cmocka_unit_test(test_keyed_mode_matches_vectors),
		cmocka_unit_test(test_derive_key_mode_matches_vectors),
		cmocka_unit_test(test_home_is_first_four_bytes_le_mod_n),
		cmocka_unit_test(test_home_fast_path_matches_hasher),
	};
	return cmocka_run_group_tests(tests, load, unload);
}
