/* batch_fixture.h - the batch runner over the shipped stories260K on the
 * CPU as the batch tests open it: the options every one of them starts
 * from, and a create that fails the test with the error's message and fix
 * (layer: serve tests). */
#ifndef STRATA_TESTS_SERVE_BATCH_FIXTURE_H
#define STRATA_TESTS_SERVE_BATCH_FIXTURE_H

#include <stdint.h>

#include "strata/serve.h"

#define BATCH_FIXTURE_MODEL STRATA_SOURCE_DIR "/models/stories260K"

/* Options for `replicas` replicas of `sequences` sequences each (--batch)
 * over stories260K: one thread, 64 positions, prefill chunks of 32,
 * automatic residency on the CPU, spill threshold 1000, the model's EOS
 * not used (-1). The caller sets what its test varies (prefix cache,
 * ends_of, tokenizer). */
strata_batch_options batch_fixture_options(uint32_t replicas,
					   uint64_t sequences);

/* strata_batch_create over o; fails the cmocka test (message / fix) when
 * it cannot. The caller destroys the batch. */
strata_batch *batch_fixture_open(const strata_batch_options *o);

#endif
