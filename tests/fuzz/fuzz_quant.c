/* fuzz_quant.c - libFuzzer target for the block decoders and encoders
 * (strata_block_decode, strata_block_encode), under ASan and UBSan.
 *
 * Input: byte 0 picks the type, byte 1 bit 0 the direction; the rest is
 * either file bytes (whole blocks of the type) to decode, or f32 values
 * (whole blocks) to encode and decode again. Checked: a decode that
 * reports every block finite wrote only finite values, and one that
 * reports a block names one that exists; an encode of input holding NaN or
 * infinity names its first such element and writes nothing; a finite
 * input encodes, and F32 comes back bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strata/base.h"

#define MAX_ELEMENTS 4096

static void check_decode(strata_block_type t, const uint8_t *p, size_t n)
{
	uint32_t be = strata_block_elements(t), bb = strata_block_bytes(t);
	uint64_t blocks = n / bb;
	if (blocks * be > MAX_ELEMENTS)
		blocks = MAX_ELEMENTS / be;
	static float y[MAX_ELEMENTS];
	uint64_t bad = strata_block_decode(t, p, y, blocks * be);
	if (bad == STRATA_BLOCK_ALL_FINITE) {
		for (uint64_t i = 0; i < blocks * be; i++)
			if (!isfinite(y[i]))
				abort(); /* a non-finite value went unreported */
	} else if (bad >= blocks) {
		abort(); /* names a block (F32/F16/BF16: an element) that
			  * does not exist */
	}
}

static void check_encode(strata_block_type t, const uint8_t *p, size_t n)
{
	uint32_t be = strata_block_elements(t), bb = strata_block_bytes(t);
	uint64_t count = n / 4 / be * be;
	if (count > MAX_ELEMENTS)
		count = MAX_ELEMENTS / be * be;
	static float x[MAX_ELEMENTS], y[MAX_ELEMENTS];
	static unsigned char b[MAX_ELEMENTS * 4 + 512];
	memcpy(x, p, count * 4);
	uint64_t first = STRATA_BLOCK_ALL_FINITE;
	for (uint64_t i = 0; i < count && first == STRATA_BLOCK_ALL_FINITE; i++)
		if (!isfinite(x[i]))
			first = i;
	size_t bytes = (size_t)(count / be * bb);
	memset(b, 0x5a, bytes + 1);
	uint64_t got = strata_block_encode(t, x, b, count);
	if (got != first)
		abort(); /* the wrong element named, or none */
	if (b[bytes] != 0x5a)
		abort(); /* wrote past the blocks */
	if (first != STRATA_BLOCK_ALL_FINITE) {
		for (size_t i = 0; i < bytes; i++)
			if (b[i] != 0x5a)
				abort(); /* refused input, yet written */
		return;
	}
	uint64_t bad = strata_block_decode(t, b, y, count);
	if (t == STRATA_BLOCK_F32 &&
	    (bad != STRATA_BLOCK_ALL_FINITE || memcmp(x, y, count * 4)))
		abort(); /* F32 must round-trip exactly */
	if (bad == STRATA_BLOCK_ALL_FINITE)
		for (uint64_t i = 0; i < count; i++)
			if (!isfinite(y[i]))
				abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	strata_block_type t = (strata_block_type)(data[0] % STRATA_BLOCK_COUNT);
	if (data[1] & 1)
		check_encode(t, data + 2, size - 2);
	else
		check_decode(t, data + 2, size - 2);
	return 0;
}
