/* A fake NCCL for machines without GPUs, over MPI and the fake CUDA
 * runtime (fake_cudart.c): the symbols libtzr loads, with the real ones'
 * behaviour where it matters to a caller:
 *   - a collective is queued on the caller's stream (cudaLaunchHostFunc)
 *     and runs on the stream's thread after the copies queued before it,
 *     so it is asynchronous and ordered as on a GPU, and the caller must
 *     wait for the stream before using the bytes;
 *   - buffers must lie in live fake device allocations (else
 *     ncclInvalidArgument), as NCCL needs device memory;
 *   - ncclGroupStart/End queue the group's collectives and launch them
 *     together at the end.
 * The data moves with MPI_Bcast on a communicator of the fake's own (a
 * duplicate of MPI_COMM_WORLD, so nranks must be the world's size), from
 * stream threads while the main thread uses MPI too: MPI must run with
 * MPI_THREAD_MULTIPLE (else ncclCommInitRank fails, ncclInvalidUsage).
 * fake_nccl_live() counts communicators not yet destroyed. */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_SUCCESS 0
#define NCCL_SYSTEM_ERROR 2
#define NCCL_INTERNAL_ERROR 3
#define NCCL_INVALID_ARGUMENT 4
#define NCCL_INVALID_USAGE 5

typedef struct { char internal[128]; } ncclUniqueId;

typedef struct fake_comm {
    MPI_Comm comm;
    int rank, size;
    atomic_int failed; /* an MPI call on a stream thread failed */
} fake_comm;

/* From fake_cudart.c. */
int cudaLaunchHostFunc(void *stream, void (*fn)(void *), void *arg);
int fake_cuda_is_device(const void *p, size_t n);

static atomic_int live;
static const char ID_TAG[] = "fake-nccl-id";

int fake_nccl_live(void) { return atomic_load(&live); }

const char *ncclGetErrorString(int r) {
    switch (r) {
    case NCCL_SUCCESS: return "no error";
    case NCCL_SYSTEM_ERROR: return "unhandled system error (fake NCCL: MPI failed)";
    case NCCL_INTERNAL_ERROR: return "internal error";
    case NCCL_INVALID_ARGUMENT: return "invalid argument (fake NCCL: not device memory)";
    case NCCL_INVALID_USAGE: return "invalid usage (fake NCCL needs MPI_THREAD_MULTIPLE and the world's ranks)";
    default: return "unknown result";
    }
}

int ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return NCCL_INVALID_ARGUMENT;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID_TAG, sizeof ID_TAG);
    return NCCL_SUCCESS;
}

int ncclCommInitRank(fake_comm **out, int nranks, ncclUniqueId id, int rank) {
    int inited = 0, provided = 0, world = 0, me = 0;
    MPI_Initialized(&inited);
    if (!inited || !out) return NCCL_INVALID_USAGE;
    MPI_Query_thread(&provided);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (provided < MPI_THREAD_MULTIPLE || nranks != world || rank != me) return NCCL_INVALID_USAGE;
    if (memcmp(id.internal, ID_TAG, sizeof ID_TAG) != 0) return NCCL_INVALID_ARGUMENT;
    fake_comm *c = calloc(1, sizeof *c);
    if (!c) return NCCL_SYSTEM_ERROR;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &c->comm) != MPI_SUCCESS) {
        free(c);
        return NCCL_SYSTEM_ERROR;
    }
    c->rank = rank, c->size = nranks;
    atomic_fetch_add(&live, 1);
    *out = c;
    return NCCL_SUCCESS;
}

static void comm_free(fake_comm *c) {
    MPI_Comm_free(&c->comm);
    free(c);
    atomic_fetch_sub(&live, 1);
}

int ncclCommDestroy(fake_comm *c) {
    if (!c) return NCCL_INVALID_ARGUMENT;
    comm_free(c); /* callers destroy after their streams are done */
    return NCCL_SUCCESS;
}

int ncclCommAbort(fake_comm *c) {
    if (!c) return NCCL_INVALID_ARGUMENT;
    /* A collective may still be stuck in MPI on a stream thread: leave the
     * MPI communicator to it, drop the count (the job is going down). */
    atomic_fetch_sub(&live, 1);
    return NCCL_SUCCESS;
}

typedef struct bcast_op {
    fake_comm *comm;
    const void *send;
    void *recv;
    size_t n;
    int root;
    void *stream;
    struct bcast_op *next;
} bcast_op;

static void run_bcast(void *arg) {
    bcast_op *b = arg;
    if (b->comm->rank == b->root && b->send != b->recv) memmove(b->recv, b->send, b->n);
    for (size_t done = 0; done < b->n && !atomic_load(&b->comm->failed);) {
        size_t len = b->n - done < (size_t)INT_MAX ? b->n - done : (size_t)INT_MAX;
        if (MPI_Bcast((uint8_t *)b->recv + done, (int)len, MPI_BYTE, b->root, b->comm->comm) != MPI_SUCCESS)
            atomic_store(&b->comm->failed, 1);
        done += len;
    }
    free(b);
}

/* Operations of an open group, per thread, launched by ncclGroupEnd. */
static _Thread_local int group_depth;
static _Thread_local bcast_op *group_head, *group_tail;

static int launch(bcast_op *b) {
    int e = cudaLaunchHostFunc(b->stream, run_bcast, b);
    if (e) free(b);
    return e ? NCCL_INVALID_ARGUMENT : NCCL_SUCCESS;
}

int ncclBroadcast(const void *send, void *recv, size_t count, int datatype, int root, fake_comm *comm,
                  void *stream) {
    if (!comm || datatype != 0 /* ncclInt8: libtzr moves bytes */ || root < 0 || root >= comm->size || !stream)
        return NCCL_INVALID_ARGUMENT;
    if (count && (!fake_cuda_is_device(recv, count) || (comm->rank == root && !fake_cuda_is_device(send, count))))
        return NCCL_INVALID_ARGUMENT;
    if (atomic_load(&comm->failed)) return NCCL_SYSTEM_ERROR;
    bcast_op *b = calloc(1, sizeof *b);
    if (!b) return NCCL_SYSTEM_ERROR;
    *b = (bcast_op){comm, send, recv, count, root, stream, NULL};
    if (!group_depth) return launch(b);
    if (group_tail) group_tail->next = b;
    else group_head = b;
    group_tail = b;
    return NCCL_SUCCESS;
}

int ncclGroupStart(void) {
    group_depth++;
    return NCCL_SUCCESS;
}

int ncclGroupEnd(void) {
    if (group_depth <= 0) return NCCL_INVALID_USAGE;
    if (--group_depth) return NCCL_SUCCESS;
    int rc = NCCL_SUCCESS;
    for (bcast_op *b = group_head, *next; b; b = next) {
        next = b->next;
        b->next = NULL;
        if (rc == NCCL_SUCCESS) rc = launch(b);
        else free(b);
    }
    group_head = group_tail = NULL;
    return rc;
}
