/* A multi-rank load's reading side: one pipelined tzr_load of a byte range
 * of the concatenated tensor data (the comm_layout stream) into a sink,
 * running on a thread of its own, so the calling thread (the only one that
 * calls MPI or NCCL) forwards each chunk as soon as the bytes before it
 * are complete. Decrypting, decompressing and verifying happen in the
 * pipeline, as for a single-file load. No MPI here. */
#ifndef TZR_COMM_FEED_H
#define TZR_COMM_FEED_H

#include "comm_internal.h"
#include "tzr_load.h"

typedef struct comm_feed comm_feed;

/* Start loading stream bytes [lo, hi) of L from r into sink (whose tensor
 * index is the reader's; offsets stay each tensor's own). Tensors that
 * straddle lo or hi deliver only their bytes inside the range (verified,
 * encrypted and compressed ones are still read and checked whole). */
TZR_HIDDEN int comm_feed_start(comm_feed **out, tzr_reader *r, const comm_layout *L, tzr_sink *sink, uint64_t lo,
                               uint64_t hi, int verify);
/* Wait until every byte of [lo, upto) is in place, calling poll(ctx)
 * about every 50 us meanwhile (to drive MPI progress). Returns the load's
 * error once it has failed. */
TZR_HIDDEN int comm_feed_wait(comm_feed *f, uint64_t upto, void (*poll)(void *), void *ctx);
/* Cancel (when asked) and join the load, then free the feed. Returns the
 * load's status; *bytes_read (may be NULL) gets what it read. */
TZR_HIDDEN int comm_feed_finish(comm_feed *f, int cancel, uint64_t *bytes_read);
#endif
