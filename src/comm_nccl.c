/* Device loading with NCCL: rank 0 loads the file into host memory, copies
 * it to its GPU and ncclBroadcasts it to every rank's GPU. libnccl.so.2
 * and the CUDA runtime are loaded at run time from one symbol list each;
 * the ncclUniqueId travels over MPI. Any rank without NCCL, CUDA or a
 * device makes every rank return TZR_ENODEV. */
#include "comm_internal.h"

#ifndef TZR_HAVE_MPI
int tzr_comm_load_device(tzr_comm *c, const char *path, const tzr_comm_load_options *opt, int device,
                         tzr_shard_result **layout) {
    *layout = NULL;
    return tzr_fail(TZR_ENOTSUP, "libtzr was built without MPI (install an MPI with pkg-config ompi-c and rebuild)");
}
void tzr_comm_device_free(tzr_shard_result *layout) { tzr_shard_result_free(layout); }
#else
#include "comm_mpi.h"
#include "cuda_rt.h"
#include "tzr_load.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tzr_nccl_id { char internal[128]; } tzr_nccl_id;
typedef void *tzr_nccl_comm;
#define TZR_NCCL_INT8 0

#define TZR_NCCL_SYMBOLS(X)                                                                  \
    X(int, ncclGetUniqueId, (tzr_nccl_id *))                                                 \
    X(int, ncclCommInitRank, (tzr_nccl_comm *, int, tzr_nccl_id, int))                       \
    X(int, ncclBroadcast, (const void *, void *, size_t, int, int, tzr_nccl_comm, void *))   \
    X(int, ncclCommDestroy, (tzr_nccl_comm))                                                 \
    X(const char *, ncclGetErrorString, (int))

typedef struct tzr_nccl_api {
#define TZR_NCCL_FIELD(ret, name, args) ret(*name) args;
    TZR_NCCL_SYMBOLS(TZR_NCCL_FIELD)
#undef TZR_NCCL_FIELD
} tzr_nccl_api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tzr_nccl_api api;
static int load_rc;
static char load_msg[512];

static void load(void) {
    const char *name = getenv("TZR_NCCL");
    if (!name || !*name) name = "libnccl.so.2";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        load_rc = TZR_ENODEV;
        snprintf(load_msg, sizeof load_msg, "NCCL not found (%s): %s", name, dlerror());
        return;
    }
#define TZR_NCCL_LOAD(ret, sym, args)                                                    \
    if (!(*(void **)&api.sym = dlsym(h, #sym))) {                                        \
        load_rc = TZR_ENODEV;                                                            \
        snprintf(load_msg, sizeof load_msg, "NCCL library %s lacks %s", name, #sym);     \
        return;                                                                          \
    }
    TZR_NCCL_SYMBOLS(TZR_NCCL_LOAD)
#undef TZR_NCCL_LOAD
}

static int nccl_load(const tzr_nccl_api **out) {
    pthread_once(&once, load);
    if (load_rc) return tzr_fail(load_rc, "%s", load_msg);
    *out = &api;
    return 0;
}

static int nccl_fail(const tzr_nccl_api *n, int err, const char *call) {
    return tzr_fail(TZR_EDEVICE, "%s failed: %s (ncclResult %d)", call, n->ncclGetErrorString(err), err);
}

void tzr_comm_device_free(tzr_shard_result *layout) {
    TZR_KEEP_ERROR;
    const tzr_cuda_api *cu;
    if (!layout) return;
    if (layout->arena && tzr_cuda_load(&cu) == 0) cu->cudaFree(layout->arena);
    layout->arena = NULL;
    tzr_shard_result_free(layout);
}

/* Rank 0: the whole file in host memory plus its table. */
static int root_host_load(const char *path, int verify, uint8_t **blob, size_t *blen, comm_layout *L) {
    tzr_reader *r = NULL;
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.verify = verify;
    int rc = tzr_reader_open(&r, path, &ro);
    if (!rc) rc = comm_table_from_reader(r, 0, blob, blen);
    if (!rc) rc = comm_layout_build(*blob, *blen, 1, L);
    tzr_sink *sink = NULL;
    if (!rc) rc = tzr_sink_host_new(&sink, NULL, NULL);
    if (!rc) {
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.verify = verify;
        rc = tzr_load(r, sink, &lo, NULL);
    }
    for (size_t i = 0; !rc && i < L->res->count; i++) {
        void *d;
        uint64_t n;
        if (!(rc = tzr_sink_host_data(sink, i, &d, &n)) && n) memcpy(L->res->pieces[i].data, d, (size_t)n);
    }
    tzr_sink_free(sink);
    tzr_reader_free(r);
    return rc;
}

int tzr_comm_load_device(tzr_comm *c, const char *path, const tzr_comm_load_options *opt, int device,
                         tzr_shard_result **layout) {
    *layout = NULL;
    if (!c || !path) return tzr_fail(TZR_EINVAL, "device load: no communicator or path");
    tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
    if (TZR_OPTS(tzr_comm_load_options, o, opt, sizeof o)) return TZR_EINVAL;
    opt = &o;
    double timeout = opt && opt->timeout_s ? opt->timeout_s : 300;
    int verify = opt ? opt->verify : 1;
    c->agreed_fail = c->peer_failed = 0;
    const tzr_nccl_api *nc = NULL;
    const tzr_cuda_api *cu = NULL;
    int rc = nccl_load(&nc);
    if (!rc) rc = tzr_cuda_load(&cu);
    if (!rc && (rc = cu->cudaSetDevice(device))) rc = tzr_cuda_fail(cu, rc, "cudaSetDevice");
    int worst = 0, e = MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, c->comm);
    if (e != MPI_SUCCESS) return comm_mpi_fail(c, e, "MPI_Allreduce");
    if (rc) return rc;
    if (worst == TZR_ENODEV) return tzr_fail(TZR_ENODEV, "rank %d: another rank has no NCCL or CUDA device", c->rank);
    if (worst) return tzr_fail(TZR_ECOMM, "rank %d: another rank could not set up NCCL/CUDA", c->rank);

    uint8_t *blob = NULL;
    size_t blen = 0;
    comm_layout L = {0};
    if (c->rank == 0) rc = root_host_load(path, verify, &blob, &blen, &L);
    uint64_t len64 = blen;
    rc = comm_agree(c, rc, timeout);
    if (!rc && (e = MPI_Bcast(&len64, 1, MPI_UINT64_T, 0, c->comm))) rc = comm_mpi_fail(c, e, "MPI_Bcast");
    if (!rc && c->rank && !(blob = malloc(len64 ? (size_t)len64 : 1))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    rc = comm_agree(c, rc, timeout);
    if (!rc && (e = MPI_Bcast(blob, (int)len64, MPI_BYTE, 0, c->comm))) rc = comm_mpi_fail(c, e, "MPI_Bcast");
    if (!rc && c->rank) rc = comm_layout_build(blob, (size_t)len64, 0, &L);
    free(blob);
    rc = comm_agree(c, rc, timeout);
    uint64_t total = 0;
    void *dev = NULL;
    if (!rc) {
        total = L.res->bytes;
        if ((e = cu->cudaMalloc(&dev, total ? (size_t)total : 1))) rc = tzr_cuda_fail(cu, e, "cudaMalloc");
    }
    if (!rc && c->rank == 0 && total &&
        (e = cu->cudaMemcpy(dev, L.res->arena, (size_t)total, TZR_CUDA_MEMCPY_H2D)))
        rc = tzr_cuda_fail(cu, e, "cudaMemcpy");
    tzr_nccl_id id;
    memset(&id, 0, sizeof id);
    if (!rc && c->rank == 0 && (e = nc->ncclGetUniqueId(&id))) rc = nccl_fail(nc, e, "ncclGetUniqueId");
    rc = comm_agree(c, rc, timeout);
    if (!rc && (e = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm))) rc = comm_mpi_fail(c, e, "MPI_Bcast");
    tzr_nccl_comm ncomm = NULL;
    if (!rc && (e = nc->ncclCommInitRank(&ncomm, c->size, id, c->rank))) rc = nccl_fail(nc, e, "ncclCommInitRank");
    rc = comm_agree(c, rc, timeout);
    tzr_cuda_stream stream = NULL;
    if (!rc && (e = cu->cudaStreamCreateWithFlags(&stream, TZR_CUDA_STREAM_NONBLOCKING)))
        rc = tzr_cuda_fail(cu, e, "cudaStreamCreateWithFlags");
    size_t chunk = (size_t)1 << 30;
    for (uint64_t off = 0; !rc && off < total; off += chunk) {
        size_t n = total - off < chunk ? (size_t)(total - off) : chunk;
        if ((e = nc->ncclBroadcast((uint8_t *)dev + off, (uint8_t *)dev + off, n, TZR_NCCL_INT8, 0, ncomm, stream)))
            rc = nccl_fail(nc, e, "ncclBroadcast");
    }
    if (!rc && stream && (e = cu->cudaStreamSynchronize(stream))) rc = tzr_cuda_fail(cu, e, "cudaStreamSynchronize");
    if (stream) cu->cudaStreamDestroy(stream);
    if (ncomm) nc->ncclCommDestroy(ncomm);
    rc = comm_agree(c, rc, timeout);
    comm_layout_free(&L);
    if (L.res) {
        uint8_t *base = L.res->arena;
        for (size_t i = 0; i < L.res->count; i++) { /* host arena or offsets -> device pointers */
            uintptr_t off = base ? (uintptr_t)((uint8_t *)L.res->pieces[i].data - base) : (uintptr_t)L.res->pieces[i].data;
            L.res->pieces[i].data = dev ? (uint8_t *)dev + off : NULL;
        }
        free(L.res->arena);
        L.res->arena = dev;
        dev = NULL;
    }
    if (rc) {
        tzr_comm_device_free(L.res);
        return rc;
    }
    *layout = L.res;
    return 0;
}
#endif
