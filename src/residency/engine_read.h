/* engine_read.h - the residency engine's reads: tensors from the checkpoint
 * into a block of one tier (at create on the calling thread, and by the
 * background readers of the disk mode), the readers' queue and threads
 * (layer: residency). Not a public header.
 *
 * The reads know nothing of the window: a finished background read is
 * handed to the engine's read_done hook (the window's, set by the life
 * cycle), which decides what the unit's new bytes mean. */
#ifndef STRATA_RESIDENCY_ENGINE_READ_H
#define STRATA_RESIDENCY_ENGINE_READ_H

#include "strata/residency.h"

/* A background read of one unit into a block of one tier. */
typedef struct read_job {
	size_t pos; /* the unit's position in execution order */
	unsigned char *dst;
	strata_direction dir;
} read_job;

/* Buffers one reading thread owns. */
typedef struct reader_buffers {
	const strata_tensor **tensors; /* max_tensors */
	void **dst;		       /* max_tensors */
	unsigned char *scratch;	       /* file bytes of the largest converted tensor */
	/* max_tensors: a tensor already mapped (non-NULL) is not read; only
	 * during the loads at create (engine_load.c), else NULL */
	const void **mapped;
} reader_buffers;

/* A background read finished (status s, its error jerr, ns taken); called
 * on the reader's thread with the engine's lock held. */
typedef void (*strata__res_read_done_fn)(strata_residency *e, const read_job *j,
					 strata_status s, const strata_error *jerr,
					 uint64_t ns);

/* Reads `count` tensors into block at their offsets: file bytes, or read
 * into the scratch and converted in place; those buf->mapped names are
 * left alone. */
strata_status strata__res_read_tensors(strata_residency *e,
				       const strata_residency_tensor *t,
				       size_t count, const uint64_t *offsets,
				       unsigned char *block,
				       reader_buffers *buf, strata_error *err);
/* The buffers of one reader, sized by the engine's largest unit. */
strata_status strata__res_buffers_init(strata_residency *e, reader_buffers *b,
				       strata_error *err);
void strata__res_buffers_fini(reader_buffers *b);
/* Starts config.reader_threads readers over the queue; each finished job
 * goes to e->read_done. */
strata_status strata__res_start_readers(strata_residency *e, strata_error *err);
/* Stops after the reads in progress; queued reads are dropped. */
void strata__res_stop_readers(strata_residency *e);
/* Queues a read of unit `pos` into dst; lock held. False when the queue is
 * full. */
bool strata__res_enqueue(strata_residency *e, size_t pos, unsigned char *dst,
			 strata_direction dir);

#endif
