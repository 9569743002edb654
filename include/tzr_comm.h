/* libtzr multi-rank loading over MPI (host memory) and NCCL (device).
 * The MPI communicator is passed as an opaque pointer to an MPI_Comm so
 * this header needs only standard headers. Built without MPI, every call
 * returns TZR_ENOTSUP with a message saying so.
 *
 * Modes (all ranks call tzr_comm_load collectively with the same path and
 * options; every rank ends with identical bytes for the same tensor):
 *   independent  each rank reads everything it needs itself;
 *   broadcast    rank 0 loads the tensor data through the pipeline and
 *                broadcasts each chunk (MPI_Ibcast, a window of chunks in
 *                flight) as soon as it is complete, while the next ones
 *                are read; other ranks do not open the file at all (the
 *                tensor table comes from rank 0 too);
 *   allgather    each of N ranks loads ~1/N of the data bytes (a byte
 *                range of the concatenated tensor data; a tensor cut by a
 *                boundary is still verified whole by both ranks), and the
 *                ranges are exchanged chunk by chunk while being read;
 *   sharded      each rank reads only its own slices (tzr_shard_load_rank
 *                with rank/size of the communicator); path may be a
 *                manifest or a plain file.
 * The first three deliver whole tensors of a `.tensors` file (plain,
 * encrypted or compressed: the reading ranks run the pipeline, so they
 * decrypt, decompress and verify), or, independent only, a manifest
 * loaded whole.
 *
 * Failures: ranks agree on the status after every phase and before the
 * data exchange; a rank that fails makes every rank return (the failing
 * one its own error, the others TZR_ECOMM naming the failing rank and its
 * message). Every wait is bounded by timeout_s; a timed-out wait returns
 * TZR_ECOMM and leaves the communicator unusable (abort the job). */
#ifndef TZR_COMM_H
#define TZR_COMM_H

#include "tzr_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tzr_comm_mode {
    TZR_COMM_INDEPENDENT = 0,
    TZR_COMM_BROADCAST = 1,
    TZR_COMM_ALLGATHER = 2,
    TZR_COMM_SHARDED = 3,
} tzr_comm_mode;
#define TZR_COMM_MODES 4

TZR_API const char *tzr_comm_mode_name(tzr_comm_mode m);
/* "independent", "broadcast", "allgather", "sharded"; TZR_EINVAL otherwise. */
TZR_API int tzr_comm_mode_parse(const char *s, tzr_comm_mode *m);

typedef struct tzr_comm tzr_comm;
/* mpi_comm: a pointer to an MPI_Comm (duplicated; the caller keeps its
 * own), or NULL for MPI_COMM_WORLD, initialising MPI when nobody has (then
 * tzr_comm_free finalises it). */
TZR_API int tzr_comm_open(tzr_comm **out, void *mpi_comm);
TZR_API void tzr_comm_free(tzr_comm *c);
TZR_API int tzr_comm_rank(const tzr_comm *c);
TZR_API int tzr_comm_size(const tzr_comm *c);
TZR_API int tzr_comm_barrier(tzr_comm *c);
/* Replace *v with its maximum over all ranks (for benchmarks). */
TZR_API int tzr_comm_max(tzr_comm *c, double *v);
/* Replace *v with its sum over all ranks. */
TZR_API int tzr_comm_sum(tzr_comm *c, double *v);
/* Agree on a status: 0 when every rank passed 0, else the failing rank's
 * own code there and TZR_ECOMM naming the failing rank elsewhere. */
TZR_API int tzr_comm_agree(tzr_comm *c, int rc);

typedef struct tzr_comm_load_options {
    size_t struct_size;
    tzr_comm_mode mode;
    size_t chunk_bytes;   /* broadcast/allgather unit; default 8 MiB */
    int window;           /* broadcast chunks in flight; default 4 */
    int verify;           /* check hashes; default 1 */
    const char *rules;    /* sharded: target layout rules (NULL: default) */
    double timeout_s;     /* bound on any wait; default 300; < 0: none */
    tzr_crypt_params crypt; /* key or password of encrypted files (needed on
                               the ranks that read: rank 0 for broadcast) */
    const tzr_crypt_params *crypt_params; /* added later: used instead of
                               `crypt` when set */
    const struct tzr_http_options *http; /* added later: a URL path's network
                               settings (tzr_http.h); NULL: the defaults */
} tzr_comm_load_options;
#define TZR_COMM_LOAD_OPTIONS_INIT \
    { sizeof(tzr_comm_load_options), TZR_COMM_INDEPENDENT, 0, 0, 1, 0, 0, {0, 0, 0, 0, 0, 0}, 0, 0 }

typedef struct tzr_comm_stats {
    uint64_t bytes;       /* tensor bytes this rank ended with */
    uint64_t bytes_read;  /* bytes this rank read from storage */
    double seconds;
} tzr_comm_stats;

/* Collective load. Whole-tensor modes give pieces with dim
 * TZR_SHARD_REPLICATED; tensors sit back to back in the arena (file order,
 * no padding). Free with tzr_shard_result_free. */
TZR_API int tzr_comm_load(tzr_comm *c, const char *path, const tzr_comm_load_options *opt,
                          tzr_shard_result **out, tzr_comm_stats *stats);

/* A load's result in device memory: the pieces' data are device pointers
 * on `device`, inside one cudaMalloc'd block. A type of its own, freed
 * only by tzr_device_result_free, so no host free() can reach it. */
typedef struct tzr_device_result {
    size_t count;
    tzr_shard_piece *pieces;
    uint64_t bytes;         /* tensor bytes this rank holds */
    uint64_t bytes_read;    /* bytes this rank read from storage */
    int device;
    void *internal_;        /* private */
} tzr_device_result;
TZR_API void tzr_device_result_free(tzr_device_result *r);

/* Collective load into GPU `device` of every rank, in any mode, through
 * the pipeline (pinned staging ring, cudaMemcpyAsync): host memory stays
 * within the ring budget whatever the model size.
 *   independent  each rank loads the file (or manifest) itself;
 *   broadcast    rank 0 loads into its GPU; each chunk is ncclBroadcast
 *                from there as soon as it is in place, while the next
 *                ones are read;
 *   allgather    each rank loads its 1/N of the bytes into its GPU, and
 *                rounds of grouped ncclBroadcasts (one per rank's part)
 *                exchange them, overlapping the reads;
 *   sharded      each rank loads its slices of a manifest (or file).
 * Encrypted and compressed files work in every mode (the reading rank
 * decrypts and decompresses). Ranks agree on a status before each chunk
 * goes to NCCL, so a failing reader ends every rank without a hanging
 * collective. libnccl.so.2 ($TZR_NCCL) and the CUDA runtime are loaded at
 * run time; without them or a device on any rank: TZR_ENODEV on every
 * rank. Whole-tensor modes pack tensors back to back in file order. */
TZR_API int tzr_comm_load_device(tzr_comm *c, const char *path, const tzr_comm_load_options *opt, int device,
                                 tzr_device_result **out, tzr_comm_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
