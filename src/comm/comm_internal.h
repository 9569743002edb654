/* Shared by comm_table.c, comm_mpi.c and comm_nccl.c: the whole-file
 * tensor table that rank 0 can send to the others, and the packed result
 * layout (non-meta tensors back to back in file order, so a byte range of
 * the concatenated tensor data is a byte range of the arena). */
#ifndef TZR_COMM_INTERNAL_H
#define TZR_COMM_INTERNAL_H

#include "internal.h"
#include "tzr_comm.h"

typedef struct comm_span {
    size_t tensor;
    uint64_t file_off;  /* where the tensor's data starts in the file */
    uint64_t len;
    uint64_t arena_off; /* == offset in the concatenated data stream */
} comm_span;

typedef struct comm_layout {
    tzr_shard_result *res;
    comm_span *spans;   /* non-meta tensors in file order */
    size_t nspans;
    uint64_t stream;    /* bytes of the concatenated data */
} comm_layout;

/* Serialise the reader's tensor table. */
TZR_HIDDEN int comm_table_from_reader(tzr_reader *r, uint8_t **blob, size_t *len);
/* Build the result and spans from a table; the arena is allocated and
 * meta tensors zeroed. */
TZR_HIDDEN int comm_layout_build(const uint8_t *blob, size_t len, int alloc_arena, comm_layout *out);
TZR_HIDDEN void comm_layout_free(comm_layout *l); /* frees spans only */
/* A table sink over the pieces' data (already where they go): host
 * memory, or (device >= 0) device pointers on that CUDA device. */
TZR_HIDDEN int comm_table_sink(const tzr_shard_result *res, int device, tzr_sink **out);
#endif
