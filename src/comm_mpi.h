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
TZR_HIDDEN int comm_mpi_fail(tzr_comm *c, int err, const char *what);
/* Wait for n requests, polling, at most timeout seconds (<= 0: forever). */
TZR_HIDDEN int comm_wait(tzr_comm *c, MPI_Request *req, int n, double timeout, const char *what, long idx);
/* Status agreement (see tzr_comm_agree). */
TZR_HIDDEN int comm_agree(tzr_comm *c, int rc, double timeout);
/* Read stream bytes [off, off+len) into the arena. */
TZR_HIDDEN int comm_read_stream(tzr_reader *r, const comm_layout *L, uint8_t *arena, uint64_t off, uint64_t len,
                                uint64_t *bytes_read);
/* Hash-check a whole tensor sitting in memory (no-op without stored hashes). */
TZR_HIDDEN int comm_verify(tzr_reader *r, const tzr_shard_piece *p);
TZR_HIDDEN int comm_open_layout(const char *path, int verify, int raw, tzr_reader **r, comm_layout *L);
/* The data phases (comm_stream.c). r is NULL on ranks that do not read. */
TZR_HIDDEN int comm_bcast_stream(tzr_comm *c, tzr_reader *r, const comm_layout *L, const tzr_comm_load_options *o,
                                 uint64_t *bytes_read);
TZR_HIDDEN int comm_gather_stream(tzr_comm *c, tzr_reader *r, const comm_layout *L, const tzr_comm_load_options *o,
                                  uint64_t *bytes_read);
#endif
