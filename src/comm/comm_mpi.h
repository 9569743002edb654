/* MPI internals shared by comm_mpi.c, comm_stream.c and comm_nccl.c. Only
 * included where TZR_HAVE_MPI is defined. */
#ifndef TZR_COMM_MPI_H
#define TZR_COMM_MPI_H

#include <mpi.h>

#include "comm_internal.h"

struct tzr_comm {
    MPI_Comm comm;
    int rank, size;
    int finalize;    /* we initialised MPI */
    int agreed_fail; /* a status agreement of this load already failed */
    int peer_failed; /* this rank's error only reflects a peer's failure */
};

TZR_HIDDEN double comm_now(void);
/* The caller's options with the defaults filled in (TZR_EINVAL: bad size). */
TZR_HIDDEN int comm_take_options(const tzr_comm_load_options *opt, tzr_comm_load_options *out);
TZR_HIDDEN int comm_ends_with_json(const char *path);
/* This rank stops because a peer's reader failed at chunk idx. */
TZR_HIDDEN int comm_peer_failed(tzr_comm *c, const char *what, long idx);
TZR_HIDDEN int comm_mpi_fail(tzr_comm *c, int err, const char *what);
/* Wait for n requests, polling, at most timeout seconds (<= 0: forever). */
TZR_HIDDEN int comm_wait(tzr_comm *c, MPI_Request *req, int n, double timeout, const char *what, long idx);
/* Status agreement (see tzr_comm_agree). */
TZR_HIDDEN int comm_agree(tzr_comm *c, int rc, double timeout);
/* Drives MPI progress while a thread waits for its reader (ctx: the
 * tzr_comm); nonblocking collectives advance only inside MPI calls. */
TZR_HIDDEN void comm_poll(void *ctx);
/* Open path (with the options' key) and build the packed layout of every
 * tensor; alloc_arena: host memory for it. */
TZR_HIDDEN int comm_open_layout(const char *path, const tzr_comm_load_options *o, int alloc_arena, tzr_reader **r,
                                comm_layout *L);
/* Rank 0 opens path and sends its tensor table; every rank builds the
 * layout (alloc_arena: host memory for it). *r stays NULL elsewhere. */
TZR_HIDDEN int comm_root_layout(tzr_comm *c, const char *path, const tzr_comm_load_options *o, int alloc_arena,
                                tzr_reader **r, comm_layout *L);
/* Stream bytes rank `q` of n reads in allgather mode. */
static inline void comm_part(const comm_layout *L, int n, int q, uint64_t *off, uint64_t *len) {
    tzr_shard_chunk(L->stream, n, q, off, len);
}
/* The data phases (comm_stream.c); feed is NULL on ranks that do not read. */
struct comm_feed;
TZR_HIDDEN int comm_bcast_stream(tzr_comm *c, struct comm_feed *feed, const comm_layout *L,
                                 const tzr_comm_load_options *o);
TZR_HIDDEN int comm_gather_stream(tzr_comm *c, struct comm_feed *feed, const comm_layout *L,
                                  const tzr_comm_load_options *o);
#endif
