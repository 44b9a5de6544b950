/* fuzz_size.c - libFuzzer target for SIZE parsing (layer: base): any text
 * either parses or fails with a message and a fix, and a plain decimal
 * that parses agrees with strtoull. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strata/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[128];
	if (size >= sizeof text)
		size = sizeof text - 1;
	memcpy(text, data, size);
	text[size] = '\0';
	uint64_t v = 0;
	strata_error e;
	strata_status st = strata_size_parse(text, &v, &e);
	if (st == STRATA_OK) {
		char buf[32];
		strata_size_format(v, buf, sizeof buf);
		if (strspn(text, "0123456789") == strlen(text)) {
			errno = 0;
			unsigned long long w = strtoull(text, NULL, 10);
			if (errno || w != v)
				abort();
		}
	} else if ((st != STRATA_E_SIZE_SYNTAX && st != STRATA_E_OVERFLOW) ||
		   !e.message[0] || !e.fix[0]) {
		abort();
	}
	return 0;
}
