/* safetensors.c - the safetensors reader (layer: checkpoint). */
#include "checkpoint/internal.h"

strata_status strata__safetensors_open_file(strata_catalog *c,
					    const char *path,
					    strata_error *err)
{
	(void)c;
	return strata_fail(err, STRATA_E_UNSUPPORTED, "use a GGUF file for now",
			   "'%s': the safetensors reader is not written yet", path);
}

strata_status strata__safetensors_open_dir(strata_catalog *c, const char *dir,
					   strata_error *err)
{
	return strata__safetensors_open_file(c, dir, err);
}
