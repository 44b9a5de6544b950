/* gpus.h - the --gpus all|N|LIST option that `strata batch` and `strata
 * plan` share: which devices, by index and by name (gpus.c; layer: cli). */
#ifndef STRATA_CLI_GPUS_H
#define STRATA_CLI_GPUS_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/base.h"
#include "strata/serve.h"

/* Batch and plan take the same lists, so the cap is the batch runner's. */
#define STRATA_CLI_MAX_DEVICES STRATA_BATCH_MAX_REPLICAS

typedef struct strata_cli_gpus {
	uint32_t count;
	bool cuda;				/* cuda:K names, else cpu:i */
	uint32_t index[STRATA_CLI_MAX_DEVICES]; /* K of cuda:K; 0 on cpu */
	char names[STRATA_CLI_MAX_DEVICES][24]; /* "cuda:K" or "cpu:i" */
	const char *ptrs[STRATA_CLI_MAX_DEVICES]; /* names[i], as an array */
} strata_cli_gpus;

/* Parses `spec` (the value of --gpus) into g:
 * - "all": every one of `visible` devices (0 visible: E_USAGE);
 * - "N": the first N, indices 0..N-1 (N in [1, STRATA_CLI_MAX_DEVICES]);
 * - "K,L,...": the listed indices (no repeats, at least one comma).
 * cuda devices are named cuda:K; cpu ones cpu:i by position (index 0: a
 * CPU replica has no device index). With `check_visible`, a cuda index at
 * or past `visible` is E_USAGE; without, indices name devices of another
 * machine (planning). Errors name --gpus and the text and say what to
 * give; g is unchanged on an error. */
strata_status strata_cli_gpus_parse(const char *spec, bool cuda,
				    uint32_t visible, bool check_visible,
				    strata_cli_gpus *g, strata_error *err);

/* One device, index `index` (no --gpus: the device --device names). */
void strata_cli_gpus_single(bool cuda, uint32_t index, strata_cli_gpus *g);

#endif
