/* fuzz_model_config.c - libFuzzer target for the model description from
 * config.json text: any bytes give a description or an E_MODEL_CONFIG with
 * a message and a fix; a description of a known family has every size. */
#include <stddef.h>
#include <stdint.h>

#include "strata/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	strata_model_desc d;
	strata_error e;
	strata_status s = strata_model_describe_config((const char *)data, size,
						       "fuzz config.json", &d,
						       &e);
	if (s && (s != STRATA_E_MODEL_CONFIG || !e.message[0] || !e.fix[0]))
		__builtin_trap();
	if (!s && d.family != STRATA_FAMILY_UNKNOWN &&
	    (!d.hidden || !d.layers || !d.heads || !d.kv_heads ||
	     d.heads % d.kv_heads || !d.head_dim || !d.vocab))
		__builtin_trap();
	return 0;
}
