/* readers.h - the readers that fill a catalog from safetensors and GGUF
 * bytes: strata_catalog_open (catalog_open.c) picks one, the tests and the
 * fuzzers call them on memory (layer: checkpoint). Not a public API. */
#ifndef STRATA_CHECKPOINT_READERS_H
#define STRATA_CHECKPOINT_READERS_H

#include "checkpoint/catalog.h"

/* ------------------------------------------------------------------------ */
/* Readers                                                                  */
/* ------------------------------------------------------------------------ */

/* GGUF from an open file or from memory (fuzzers); `name` names the file in
 * messages and in the catalog. Appends to a fresh catalog c. */
strata_status strata__gguf_read_fd(strata_catalog *c, int fd, uint64_t size,
				   const char *name, strata_error *err);
strata_status strata__gguf_read_mem(strata_catalog *c, const void *data,
				    size_t size, const char *name,
				    strata_error *err);

/* One safetensors header (the JSON text, header_len bytes) of a file of
 * file_size bytes: adds file and tensors to c. */
strata_status strata__safetensors_parse_header(strata_catalog *c,
					       const char *json,
					       size_t header_len,
					       uint64_t file_size,
					       const char *name,
					       strata_error *err);
strata_status strata__safetensors_read_mem(strata_catalog *c,
					   const void *data, size_t size,
					   const char *name, strata_error *err);
strata_status strata__safetensors_open_file(strata_catalog *c,
					    const char *path,
					    strata_error *err);
strata_status strata__safetensors_open_dir(strata_catalog *c, const char *dir,
					   strata_error *err);

#endif /* STRATA_CHECKPOINT_READERS_H */
