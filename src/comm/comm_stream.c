/* The data phases of broadcast and allgather loads into host memory: the
 * concatenated tensor data moves straight between the pipeline (a
 * comm_feed), the network and the result arena in chunks, with a window
 * of nonblocking collectives in flight so reading the next chunk overlaps
 * sending the previous ones. Each chunk carries a status so all ranks stop
 * at the same chunk when a reader fails. */
#ifdef TZR_HAVE_MPI
#include "comm_feed.h"
#include "comm_mpi.h"

#include <string.h>

int comm_peer_failed(tzr_comm *c, const char *what, long idx) {
    c->peer_failed = 1;
    return tzr_fail(TZR_ECOMM, "rank %d: a peer failed during the %s (chunk %ld)", c->rank, what, idx);
}

/* Wait for chunks [from, to), `per` requests each in a ring of `slots`. */
static int drain(tzr_comm *c, MPI_Request *rq, int per, int slots, long from, long to, double timeout,
                 const char *what) {
    for (long j = from; j < to; j++) {
        int rc = comm_wait(c, &rq[(size_t)per * (size_t)(j % slots)], per, timeout, what, j);
        if (rc) return rc;
    }
    return 0;
}

int comm_bcast_stream(tzr_comm *c, comm_feed *feed, const comm_layout *L, const tzr_comm_load_options *o) {
    uint8_t *arena = L->res->arena;
    uint64_t C = o->chunk_bytes, S = L->stream;
    long n = (long)((S + C - 1) / C), K = o->window, i, waited = 0;
    int *st = calloc((size_t)(n ? n : 1), sizeof *st);
    MPI_Request *rq = malloc((size_t)(2 * K) * sizeof *rq);
    int local = 0, rc = 0, stop = 0;
    if (!st || !rq) local = tzr_fail(TZR_ENOMEM, "out of memory");
    if ((rc = comm_agree(c, local, o->timeout_s))) {
        free(st), free(rq);
        return rc;
    }
    for (i = 0; i < n && !local && !stop; i++) {
        if (i >= K) {
            if ((rc = comm_wait(c, &rq[2 * ((i - K) % K)], 2, o->timeout_s, "broadcast chunk", i - K))) break;
            waited = i - K + 1;
            if (st[i - K]) break;
        }
        uint64_t off = (uint64_t)i * C, len = S - off < C ? S - off : C;
        if (c->rank == 0) {
            if (!st[i ? i - 1 : 0]) st[i] = comm_feed_wait(feed, off + len, comm_poll, c);
            else st[i] = st[i - 1];
        }
        MPI_Request *q = &rq[2 * (i % K)];
        int e = MPI_Ibcast(&st[i], 1, MPI_INT, 0, c->comm, &q[0]);
        if (e == MPI_SUCCESS) e = MPI_Ibcast(arena + off, (int)len, MPI_BYTE, 0, c->comm, &q[1]);
        if (e != MPI_SUCCESS) {
            rc = comm_mpi_fail(c, e, "MPI_Ibcast");
            stop = 1;
        }
    }
    long posted = i;
    if (!rc) rc = drain(c, rq, 2, (int)K, waited, posted, o->timeout_s, "broadcast chunk");
    long failed = -1;
    for (long j = 0; !rc && j < posted && failed < 0; j++)
        if (st[j]) failed = j;
    if (!rc && local) rc = local;
    if (!rc && failed >= 0) rc = c->rank == 0 ? st[failed] : comm_peer_failed(c, "broadcast", failed);
    free(st);
    free(rq);
    return rc;
}

int comm_gather_stream(tzr_comm *c, comm_feed *feed, const comm_layout *L, const tzr_comm_load_options *o) {
    uint8_t *arena = L->res->arena;
    int N = c->size, me = c->rank;
    uint64_t C = o->chunk_bytes, S = L->stream, max_part = (S + (uint64_t)N - 1) / (uint64_t)N;
    long R = (long)((max_part + C - 1) / C), W = 2, j, waited = 0;
    uint64_t *p0 = calloc((size_t)N, sizeof *p0), *pl = calloc((size_t)N, sizeof *pl);
    int *st = calloc((size_t)(R ? R : 1), sizeof *st), *agreed = calloc((size_t)(R ? R : 1), sizeof *agreed);
    MPI_Request *rq = malloc((size_t)(W * (N + 1)) * sizeof *rq);
    int local = 0, rc = 0;
    if (!p0 || !pl || !st || !agreed || !rq) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    rc = comm_agree(c, rc, o->timeout_s);
    for (int q = 0; q < N && !rc; q++) tzr_shard_chunk(S, N, q, &p0[q], &pl[q]);
    for (j = 0; j < R && !rc; j++) {
        if (j >= W) {
            if ((rc = comm_wait(c, &rq[(N + 1) * ((j - W) % W)], N + 1, o->timeout_s, "allgather round", j - W)))
                break;
            waited = j - W + 1;
            if (agreed[j - W]) break;
        }
        uint64_t done = (uint64_t)j * C;
        if (!local && pl[me] > done) {
            uint64_t len = pl[me] - done < C ? pl[me] - done : C;
            local = comm_feed_wait(feed, p0[me] + done + len, comm_poll, c);
        }
        st[j] = local;
        MPI_Request *q = &rq[(N + 1) * (j % W)];
        int e = MPI_Iallreduce(&st[j], &agreed[j], 1, MPI_INT, MPI_MIN, c->comm, &q[0]);
        for (int k = 0; k < N && e == MPI_SUCCESS; k++) {
            uint64_t len = pl[k] > done ? (pl[k] - done < C ? pl[k] - done : C) : 0;
            e = MPI_Ibcast(arena + p0[k] + (len ? done : 0), (int)len, MPI_BYTE, k, c->comm, &q[1 + k]);
        }
        if (e != MPI_SUCCESS) rc = comm_mpi_fail(c, e, "MPI_Iallreduce/MPI_Ibcast");
    }
    long posted = j;
    if (!rc) rc = drain(c, rq, N + 1, (int)W, waited, posted, o->timeout_s, "allgather round");
    long failed = -1;
    for (long k = 0; !rc && k < posted && failed < 0; k++)
        if (agreed[k]) failed = k;
    if (!rc && local) rc = local;
    if (!rc && failed >= 0) rc = comm_peer_failed(c, "allgather", failed);
    free(p0), free(pl), free(st), free(agreed), free(rq);
    return rc;
}
#endif
