/* Device loading (tzr_comm_load_device, include/tzr_comm.h). Every mode
 * runs the pipeline into one device block per rank through the CUDA table
 * sink (pinned staging, so host memory stays within the ring budget);
 * broadcast and allgather forward each complete chunk of that block with
 * NCCL while the next ones are read. Chunk statuses travel over MPI before
 * the matching collective is posted, so no rank ever waits in NCCL for a
 * peer whose reader has failed. NCCL and the GPU runtime come from the
 * GPU layer (src/gpu/), loaded at run time. */
#include "comm_internal.h"
#include "gpu_rt.h"

#include <stdlib.h>

typedef struct device_hold {
    tzr_shard_result *layout; /* pieces, shapes and names (no host arena) */
    void *dev;                /* the runtime's device block */
} device_hold;

void tzr_device_result_free(tzr_device_result *r) {
    TZR_KEEP_ERROR;
    if (!r) return;
    device_hold *h = r->internal_;
    const tzr_gpu_api *cu;
    if (h && h->dev && tzr_gpu_load(&cu) == 0) {
        cu->set_device(r->device);
        cu->dev_free(h->dev);
    }
    if (h) tzr_shard_result_free(h->layout);
    free(h);
    free(r);
}

#ifndef TZR_HAVE_MPI
int tzr_comm_load_device(tzr_comm *c, const char *path, const tzr_comm_load_options *opt, int device,
                         tzr_device_result **out, tzr_comm_stats *stats) {
    (void)c, (void)path, (void)opt, (void)device, (void)stats;
    *out = NULL;
    return tzr_fail(TZR_ENOTSUP, "libtzr was built without MPI (install an MPI with pkg-config ompi-c and rebuild)");
}
#else
#include "comm_feed.h"
#include "comm_mpi.h"
#include "gpu_ccl.h"
#include "shard_internal.h"
#include "tzr_load.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* One rank's device load in progress. */
typedef struct dev_load {
    tzr_comm *c;
    const tzr_comm_load_options *o;
    const tzr_gpu_api *cu;
    const tzr_nccl_api *nc;
    int device;
    tzr_nccl_comm ncomm;
    tzr_gpu_stream stream;
    uint8_t *dev;
} dev_load;

/* Wait for the NCCL stream, bounded: a collective whose peer is gone
 * never finishes, and then the communicator is aborted. */
static int stream_wait(dev_load *d) {
    double deadline = d->o->timeout_s > 0 ? comm_now() + d->o->timeout_s : 0;
    struct timespec nap = {0, 50000};
    for (;;) {
        int e = d->cu->stream_query(d->stream);
        if (e == 0) return 0;
        if (e != TZR_GPU_NOT_READY) return tzr_gpu_fail(d->cu, e, TZR_GPU_F(stream_query), "NCCL stream");
        if (deadline && comm_now() > deadline) {
            d->nc->ncclCommAbort(d->ncomm);
            d->ncomm = NULL;
            return tzr_fail(TZR_ECOMM, "rank %d: timed out after %.0f s waiting for NCCL (a peer is stuck or gone)",
                            d->c->rank, d->o->timeout_s);
        }
        comm_poll(d->c);
        nanosleep(&nap, NULL);
    }
}

static int nccl_setup(dev_load *d) {
    tzr_comm *c = d->c;
    tzr_nccl_id id;
    memset(&id, 0, sizeof id);
    int e, rc = 0;
    if (c->rank == 0 && (e = d->nc->ncclGetUniqueId(&id))) rc = tzr_nccl_fail(d->nc, e, "ncclGetUniqueId");
    rc = comm_agree(c, rc, d->o->timeout_s);
    MPI_Request q;
    if (!rc) {
        e = MPI_Ibcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm, &q);
        rc = e ? comm_mpi_fail(c, e, "MPI_Ibcast") : comm_wait(c, &q, 1, d->o->timeout_s, "NCCL id", 0);
    }
    if (!rc && (e = d->nc->ncclCommInitRank(&d->ncomm, c->size, id, c->rank)))
        rc = tzr_nccl_fail(d->nc, e, "ncclCommInitRank");
    if (!rc && (e = d->cu->stream_create(&d->stream, TZR_GPU_STREAM_NONBLOCKING)))
        rc = tzr_gpu_fail(d->cu, e, TZR_GPU_F(stream_create), NULL);
    return comm_agree(c, rc, d->o->timeout_s);
}

static void nccl_teardown(dev_load *d) {
    if (d->stream) d->cu->stream_destroy(d->stream);
    if (d->ncomm) d->nc->ncclCommDestroy(d->ncomm);
    d->stream = d->ncomm = NULL;
}

/* Broadcast: rank 0 posts chunk i's status (a window of them in flight)
 * and then its ncclBroadcast; the others wait for the status first. */
static int dev_bcast(dev_load *d, comm_feed *feed, const comm_layout *L) {
    tzr_comm *c = d->c;
    uint64_t C = d->o->chunk_bytes, S = L->stream;
    long n = (long)((S + C - 1) / C), K = d->o->window, i;
    int *st = calloc((size_t)K, sizeof *st);
    MPI_Request *rq = malloc((size_t)K * sizeof *rq);
    if (!st || !rq) {
        free(st), free(rq);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    int rc = 0, failed = 0, e;
    long posted = 0, waited = 0;
    for (i = 0; i < n && !rc && !failed; i++) {
        uint64_t off = (uint64_t)i * C, len = S - off < C ? S - off : C;
        if (i >= K && (rc = comm_wait(c, &rq[(i - K) % K], 1, d->o->timeout_s, "broadcast status", i - K))) break;
        waited = i >= K ? i - K + 1 : 0;
        int *s = &st[i % K];
        *s = c->rank == 0 ? comm_feed_wait(feed, off + len, comm_poll, c) : 0;
        if ((e = MPI_Ibcast(s, 1, MPI_INT, 0, c->comm, &rq[i % K]))) {
            rc = comm_mpi_fail(c, e, "MPI_Ibcast");
            break;
        }
        posted = i + 1;
        if (c->rank && (rc = comm_wait(c, &rq[i % K], 1, d->o->timeout_s, "broadcast status", i))) break;
        if (c->rank) waited = i + 1;
        if (*s) failed = *s;
        else if ((e = d->nc->ncclBroadcast(d->dev + off, d->dev + off, (size_t)len, TZR_NCCL_INT8, 0, d->ncomm,
                                           d->stream)))
            rc = tzr_nccl_fail(d->nc, e, "ncclBroadcast");
    }
    for (long j = waited; !rc && j < posted; j++)
        rc = comm_wait(c, &rq[j % K], 1, d->o->timeout_s, "broadcast status", j);
    if (!rc) rc = stream_wait(d);
    if (!rc && failed) rc = c->rank == 0 ? failed : comm_peer_failed(c, "broadcast", i - 1);
    free(st), free(rq);
    return rc;
}

/* Allgather: round j agrees on every rank's j-th chunk, then one grouped
 * ncclBroadcast per rank's part exchanges them. */
static int dev_gather(dev_load *d, comm_feed *feed, const comm_layout *L) {
    tzr_comm *c = d->c;
    int N = c->size, me = c->rank, rc = 0, local = 0, agreed = 0, e;
    uint64_t C = d->o->chunk_bytes, me0, melen, max_part = 0;
    uint64_t *p0 = calloc((size_t)N, sizeof *p0), *pl = calloc((size_t)N, sizeof *pl);
    if (!p0 || !pl) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    for (int q = 0; q < N && !rc; q++) {
        comm_part(L, N, q, &p0[q], &pl[q]);
        if (pl[q] > max_part) max_part = pl[q];
    }
    me0 = rc ? 0 : p0[me], melen = rc ? 0 : pl[me];
    long R = (long)((max_part + C - 1) / C), j;
    for (j = 0; j < R && !rc; j++) {
        uint64_t done = (uint64_t)j * C;
        if (!local && melen > done) {
            uint64_t len = melen - done < C ? melen - done : C;
            local = comm_feed_wait(feed, me0 + done + len, comm_poll, c);
        }
        MPI_Request q;
        if ((e = MPI_Iallreduce(&local, &agreed, 1, MPI_INT, MPI_MIN, c->comm, &q))) {
            rc = comm_mpi_fail(c, e, "MPI_Iallreduce");
            break;
        }
        if ((rc = comm_wait(c, &q, 1, d->o->timeout_s, "allgather round", j)) || agreed) break;
        if ((e = d->nc->ncclGroupStart())) rc = tzr_nccl_fail(d->nc, e, "ncclGroupStart");
        for (int k = 0; k < N && !rc; k++) {
            uint64_t len = pl[k] > done ? (pl[k] - done < C ? pl[k] - done : C) : 0;
            uint8_t *at = d->dev + p0[k] + done;
            if (len && (e = d->nc->ncclBroadcast(at, at, (size_t)len, TZR_NCCL_INT8, k, d->ncomm, d->stream)))
                rc = tzr_nccl_fail(d->nc, e, "ncclBroadcast");
        }
        if ((e = d->nc->ncclGroupEnd()) && !rc) rc = tzr_nccl_fail(d->nc, e, "ncclGroupEnd");
    }
    if (!rc) rc = stream_wait(d);
    if (!rc && local) rc = local;
    if (!rc && agreed) rc = comm_peer_failed(c, "allgather", j);
    free(p0), free(pl);
    return rc;
}

static int zero_device(const tzr_gpu_api *cu, uint8_t *at, uint64_t len) {
    static const uint8_t zeros[1 << 16];
    for (uint64_t done = 0; done < len;) {
        size_t n = len - done < sizeof zeros ? (size_t)(len - done) : sizeof zeros;
        int e = cu->copy(at + done, zeros, n, TZR_GPU_MEMCPY_H2D);
        if (e) return tzr_gpu_fail(cu, e, TZR_GPU_F(copy), "zeroing meta tensors");
        done += n;
    }
    return 0;
}

/* Every rank can use CUDA (and NCCL where the mode needs it), or every
 * rank returns: TZR_ENODEV when some rank has no device or library. */
static int dev_setup(dev_load *d, int need_nccl) {
    tzr_comm *c = d->c;
    int e, rc = need_nccl ? tzr_nccl_load(&d->nc) : 0;
    if (!rc) rc = tzr_gpu_load(&d->cu);
    if (!rc && (e = d->cu->set_device(d->device))) rc = tzr_gpu_fail(d->cu, e, TZR_GPU_F(set_device), NULL);
    int worst = 0;
    e = MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, c->comm);
    if (e != MPI_SUCCESS) return comm_mpi_fail(c, e, "MPI_Allreduce");
    if (rc) return rc;
    if (worst == TZR_ENODEV) return tzr_fail(TZR_ENODEV, "rank %d: another rank has no NCCL or CUDA device", c->rank);
    if (worst) return tzr_fail(TZR_ECOMM, "rank %d: another rank could not set up NCCL/CUDA", c->rank);
    return 0;
}

int tzr_comm_load_device(tzr_comm *c, const char *path, const tzr_comm_load_options *opt, int device,
                         tzr_device_result **out, tzr_comm_stats *stats) {
    *out = NULL;
    if (!c || !path) return tzr_fail(TZR_EINVAL, "device load: no communicator or path");
    tzr_comm_load_options o;
    if (comm_take_options(opt, &o)) return TZR_EINVAL;
    double t0 = comm_now();
    c->agreed_fail = c->peer_failed = 0;
    int whole = o.mode == TZR_COMM_BROADCAST || o.mode == TZR_COMM_ALLGATHER;
    int sharded = o.mode == TZR_COMM_SHARDED || (o.mode == TZR_COMM_INDEPENDENT && comm_ends_with_json(path));
    /* a manifest in independent mode is every rank loading it whole */
    int me = o.mode == TZR_COMM_SHARDED ? c->rank : 0, nranks = o.mode == TZR_COMM_SHARDED ? c->size : 1;
    if ((unsigned)o.mode >= TZR_COMM_MODES) return tzr_fail(TZR_EINVAL, "unknown mode %d", (int)o.mode);
    dev_load d = {c, &o, NULL, NULL, device, NULL, NULL, NULL};
    int rc = dev_setup(&d, whole);
    if (rc) return rc;

    /* The layout: pieces whose data hold offsets in the device block. */
    tzr_reader *r = NULL;
    tzr_shard_set *set = NULL;
    comm_layout L = {0};
    tzr_shard_result *res = NULL;
    uint64_t total = 0;
    if (sharded) {
        tzr_shard_open_options so = TZR_SHARD_OPEN_OPTIONS_INIT;
        so.verify = o.verify;
        so.crypt = o.crypt;
        so.http = o.http;
        rc = tzr_shard_open(&set, path, &so);
        if (!rc) rc = shard_rank_layout(set, me, nranks, o.rules, &res, &total);
    } else {
        rc = o.mode == TZR_COMM_BROADCAST ? comm_root_layout(c, path, &o, 0, &r, &L)
                                          : comm_open_layout(path, &o, 0, &r, &L);
        if (!rc) res = L.res, total = res->bytes;
    }
    rc = comm_agree(c, rc, o.timeout_s);
    int e;
    if (!rc && (e = d.cu->dev_alloc((void **)&d.dev, total ? (size_t)total : 1)))
        rc = tzr_gpu_fail(d.cu, e, TZR_GPU_F(dev_alloc), "the rank's tensors");
    for (size_t i = 0; !rc && i < res->count; i++)
        res->pieces[i].data = d.dev + (uintptr_t)res->pieces[i].data;
    if (!rc && whole) rc = zero_device(d.cu, d.dev + L.stream, total - L.stream); /* meta tensors */
    rc = comm_agree(c, rc, o.timeout_s);

    tzr_sink *sink = NULL;
    uint64_t bytes_read = 0;
    if (!rc && (r || set)) rc = comm_table_sink(res, device, &sink);
    if (!rc && sharded) {
        tzr_load_stats st = {0};
        rc = tzr_shard_load_rank_into(set, me, nranks, o.rules, sink, NULL, &st);
        bytes_read = st.bytes_read;
    } else if (!rc && o.mode == TZR_COMM_INDEPENDENT) {
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.verify = o.verify && tzr_reader_format(r) == TZR_FORMAT_TENSORIZER; /* safetensors: no hashes */
        tzr_load_stats st = {0};
        rc = tzr_load(r, sink, &lo, &st);
        bytes_read = st.bytes_read;
    } else if (!rc) {
        rc = nccl_setup(&d);
        comm_feed *feed = NULL;
        uint64_t lo = 0, len = L.stream;
        if (!rc && o.mode == TZR_COMM_ALLGATHER) comm_part(&L, c->size, c->rank, &lo, &len);
        if (!rc && r) rc = comm_feed_start(&feed, r, &L, sink, lo, lo + len, o.verify);
        rc = comm_agree(c, rc, o.timeout_s);
        if (!rc) rc = o.mode == TZR_COMM_BROADCAST ? dev_bcast(&d, feed, &L) : dev_gather(&d, feed, &L);
        int frc = comm_feed_finish(feed, rc != 0, &bytes_read);
        if (!rc) rc = frc;
        nccl_teardown(&d);
    }
    tzr_sink_free(sink);
    rc = comm_agree(c, rc, o.timeout_s);
    tzr_reader_free(r);
    tzr_shard_close(set);
    comm_layout_free(&L);

    tzr_device_result *dr = NULL;
    device_hold *h = NULL;
    if (!rc && (!(dr = calloc(1, sizeof *dr)) || !(h = calloc(1, sizeof *h))))
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
    if (rc) {
        free(dr);
        if (d.dev) d.cu->dev_free(d.dev);
        tzr_shard_result_free(res);
        return rc;
    }
    h->layout = res, h->dev = d.dev;
    dr->count = res->count, dr->pieces = res->pieces, dr->bytes = res->bytes, dr->bytes_read = bytes_read;
    dr->device = device, dr->internal_ = h;
    if (stats) {
        stats->bytes = res->bytes;
        stats->bytes_read = bytes_read;
        stats->seconds = comm_now() - t0;
    }
    *out = dr;
    return 0;
}
#endif
