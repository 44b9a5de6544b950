/* fuzz_shard_line.c - libFuzzer target for the `strata shard` input parser
 * and the allocator it feeds (layer: shard). The input is a whole stdin
 * stream: its first byte picks the device count and threshold, the rest
 * is split into lines as the CLI splits them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strata/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint32_t n = 1 + data[0] % 70;
	uint64_t t = data[0] & 0x80 ? UINT64_MAX - data[0] : data[0] % 9;
	strata_shard *s;
	if (strata_shard_create(n, t, &s, NULL) != STRATA_OK)
		abort();
	const char *p = (const char *)data + 1, *end = (const char *)data + size;
	uint64_t line = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		size_t key;
		uint64_t cost;
		uint32_t d;
		strata_error e;
		if (strata_shard_parse_line(p, len, ++line, &key, &cost, &e) ==
		    STRATA_OK) {
			if (key > len)
				abort();
			strata_status st = strata_shard_assign(s, p, key, cost, &d, &e);
			if (st == STRATA_OK && cost && d >= n)
				abort();
			if (st == STRATA_OK && !cost && d != STRATA_SHARD_NO_DEVICE)
				abort();
			if (st != STRATA_OK && st != STRATA_E_SHARD_LOAD_OVERFLOW)
				abort();
		} else if (e.code != STRATA_E_SHARD_INPUT || !e.message[0] ||
			   !e.fix[0]) {
			abort();
		}
		p += len + 1;
	}
	strata_shard_stats st;
	strata_shard_get_stats(s, &st);
	if (st.home_hits + st.spills != st.items || st.min_load > st.max_load)
		abort();
	strata_shard_destroy(s);
	return 0;
}
