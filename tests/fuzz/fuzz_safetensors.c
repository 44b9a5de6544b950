/* fuzz_safetensors.c - libFuzzer target for the safetensors header parser:
 * the input is a whole file (8-byte length, JSON header, data). Any bytes
 * must give a catalog whose ranges tile the data section, or an error with
 * a message and a fix. */
#include <stddef.h>
#include <stdint.h>

#include "checkpoint/readers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	strata_catalog *c = NULL;
	strata_error e;
	if (strata__catalog_create(STRATA_FORMAT_SAFETENSORS, &c, &e))
		return 0;
	if (strata__safetensors_read_mem(c, data, size, "fuzz.safetensors",
					 &e) == STRATA_OK) {
		uint64_t sum = 0;
		const strata_catalog_file *f = strata_catalog_file_at(c, 0);
		for (size_t i = 0; i < strata_catalog_count(c); i++) {
			const strata_tensor *t = strata_catalog_tensor(c, i);
			if (strata_catalog_find(c, t->name) != t ||
			    t->offset + t->bytes > size)
				__builtin_trap();
			sum += t->bytes;
		}
		if (sum != f->size - f->data_offset)
			__builtin_trap(); /* the ranges must tile the data */
	} else if (e.message[0] == '\0' || e.fix[0] == '\0') {
		__builtin_trap();
	}
	strata_catalog_destroy(c);
	return 0;
}
