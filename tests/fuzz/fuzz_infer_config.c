/* fuzz_infer_config.c - libFuzzer target for the infer layer's view of a
 * config.json (strata_infer_config_parse: the model layer's reader, which
 * fuzz_model_config covers alone, then the forward pass's caps and
 * refusals): any bytes give OK or a named error, and an accepted shape is
 * internally consistent. */
#include <stdlib.h>

#include "strata/infer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	strata_infer_hparams hp;
	strata_error err;
	if (strata_infer_config_parse((const char *)data, size, &hp, &err) ==
	    STRATA_OK) {
		if (hp.heads % hp.kv_heads || hp.head_dim % 2 || !hp.dim ||
		    !hp.layers)
			abort();
		float inv[512];
		if (hp.head_dim <= 1024)
			strata_infer_rope_freqs(&hp, inv);
	} else if (err.message[0] == '\0' || err.fix[0] == '\0') {
		abort();
	}
	return 0;
}
