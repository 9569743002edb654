/* Multi-rank loading over MPI: the communicator wrapper, bounded waits,
 * status agreement and the four load modes (see include/tzr_comm.h).
 *
 * Broadcast and allgather move the concatenated tensor data (file order,
 * meta tensors excluded), which is also the layout of the result arena, so
 * every byte goes straight from the pipeline or the network into its
 * final place. The reading ranks run a comm_feed (tzr_load of their byte
 * range into the arena) and comm_stream.c forwards each chunk once it is
 * complete: broadcast posts MPI_Ibcast of it plus a status word, a window
 * of chunks in flight, and every rank stops at the same chunk once a
 * status says rank 0 failed; allgather, in round j, exchanges the j-th
 * chunk of every rank's 1/N range (an MPI_Iallreduce of the statuses and
 * one MPI_Ibcast per rank) while the next round is read. */
#include "comm_internal.h"

#include <stdio.h>
#include <string.h>

const char *tzr_comm_mode_name(tzr_comm_mode m) {
    static const char *names[] = {"independent", "broadcast", "allgather", "sharded"};
    return (unsigned)m < TZR_COMM_MODES ? names[m] : "unknown";
}

int tzr_comm_mode_parse(const char *s, tzr_comm_mode *m) {
    for (int i = 0; i < TZR_COMM_MODES; i++)
        if (s && strcmp(s, tzr_comm_mode_name((tzr_comm_mode)i)) == 0) {
            *m = (tzr_comm_mode)i;
            return 0;
        }
    return tzr_fail(TZR_EINVAL, "unknown mode '%s' (independent, broadcast, allgather, sharded)", s ? s : "");
}

#ifndef TZR_HAVE_MPI
#define NO_MPI tzr_fail(TZR_ENOTSUP, "libtzr was built without MPI (install an MPI with pkg-config ompi-c and rebuild)")
int tzr_comm_open(tzr_comm **out, void *mpi_comm) { *out = NULL; return NO_MPI; }
void tzr_comm_free(tzr_comm *c) { (void)c; }
int tzr_comm_rank(const tzr_comm *c) { return 0; }
int tzr_comm_size(const tzr_comm *c) { return 1; }
int tzr_comm_barrier(tzr_comm *c) { return NO_MPI; }
int tzr_comm_max(tzr_comm *c, double *v) { return NO_MPI; }
int tzr_comm_sum(tzr_comm *c, double *v) { return NO_MPI; }
int tzr_comm_agree(tzr_comm *c, int rc) { return NO_MPI; }
int tzr_comm_load(tzr_comm *c, const char *path, const tzr_comm_load_options *opt, tzr_shard_result **out,
                  tzr_comm_stats *stats) {
    *out = NULL;
    return NO_MPI;
}
#else
#include "comm_feed.h"
#include "comm_mpi.h"
#include "tzr_load.h"

#include <time.h>

double comm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int comm_mpi_fail(tzr_comm *c, int err, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    return tzr_fail(TZR_ECOMM, "rank %d: %s failed: %.*s", c->rank, what, len, msg);
}

int comm_wait(tzr_comm *c, MPI_Request *req, int n, double timeout, const char *what, long idx) {
    double deadline = timeout > 0 ? comm_now() + timeout : 0;
    struct timespec nap = {0, 20000};
    for (;;) {
        int flag = 0, e = MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
        if (e != MPI_SUCCESS) return comm_mpi_fail(c, e, what);
        if (flag) return 0;
        if (deadline && comm_now() > deadline)
            return tzr_fail(TZR_ECOMM, "rank %d: timed out after %.0f s waiting for %s %ld (a peer is stuck or gone)",
                            c->rank, timeout, what, idx);
        nanosleep(&nap, NULL);
    }
}

int tzr_comm_open(tzr_comm **out, void *mpi_comm) {
    *out = NULL;
    int inited = 0, finalized = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return tzr_fail(TZR_ECOMM, "MPI was already finalized");
    if (!inited) {
        if (mpi_comm) return tzr_fail(TZR_EINVAL, "a communicator was given but MPI is not initialised");
        int prov;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &prov) != MPI_SUCCESS)
            return tzr_fail(TZR_ECOMM, "MPI_Init_thread failed");
        fin = 1;
    }
    tzr_comm *c = calloc(1, sizeof *c);
    if (!c) return tzr_fail(TZR_ENOMEM, "out of memory");
    c->finalize = fin;
    int e = MPI_Comm_dup(mpi_comm ? *(MPI_Comm *)mpi_comm : MPI_COMM_WORLD, &c->comm);
    if (e != MPI_SUCCESS) {
        free(c);
        return tzr_fail(TZR_ECOMM, "MPI_Comm_dup failed");
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    *out = c;
    return 0;
}

void tzr_comm_free(tzr_comm *c) {
    TZR_KEEP_ERROR;
    if (!c) return;
    MPI_Comm_free(&c->comm);
    if (c->finalize) MPI_Finalize();
    free(c);
}

int tzr_comm_rank(const tzr_comm *c) { return c ? c->rank : 0; }
int tzr_comm_size(const tzr_comm *c) { return c ? c->size : 1; }

int tzr_comm_barrier(tzr_comm *c) {
    MPI_Request q;
    int e = MPI_Ibarrier(c->comm, &q);
    if (e != MPI_SUCCESS) return comm_mpi_fail(c, e, "MPI_Ibarrier");
    return comm_wait(c, &q, 1, 300, "barrier", 0);
}

int tzr_comm_max(tzr_comm *c, double *v) {
    double in = *v;
    int e = MPI_Allreduce(&in, v, 1, MPI_DOUBLE, MPI_MAX, c->comm);
    return e == MPI_SUCCESS ? 0 : comm_mpi_fail(c, e, "MPI_Allreduce");
}

int tzr_comm_sum(tzr_comm *c, double *v) {
    double in = *v;
    int e = MPI_Allreduce(&in, v, 1, MPI_DOUBLE, MPI_SUM, c->comm);
    return e == MPI_SUCCESS ? 0 : comm_mpi_fail(c, e, "MPI_Allreduce");
}

int comm_agree(tzr_comm *c, int rc, double timeout) {
    if (c->agreed_fail) return rc; /* every rank already knows */
    char saved[1000];
    int code = rc;
    if (rc) tzr_error_save(saved, sizeof saved, &code);
    /* real failures (0) win over failures caused by a peer (1) over ok (2) */
    struct { int v, r; } in = {!rc ? 2 : c->peer_failed ? 1 : 0, c->rank}, res;
    MPI_Request q;
    int e = MPI_Iallreduce(&in, &res, 1, MPI_2INT, MPI_MINLOC, c->comm, &q);
    if (e != MPI_SUCCESS) return comm_mpi_fail(c, e, "MPI_Iallreduce (status)");
    int w = comm_wait(c, &q, 1, timeout, "status agreement", 0);
    if (w) return w;
    if (res.v == 2) return 0;
    c->agreed_fail = 1;
    struct { int code; char msg[1020]; } m;
    if (c->rank == res.r) {
        m.code = rc;
        snprintf(m.msg, sizeof m.msg, "%s", saved);
    }
    e = MPI_Ibcast(&m, (int)sizeof m, MPI_BYTE, res.r, c->comm, &q);
    if (e != MPI_SUCCESS) return comm_mpi_fail(c, e, "MPI_Ibcast (error)");
    if ((w = comm_wait(c, &q, 1, timeout, "error message from rank", res.r))) return w;
    if (c->rank == res.r) {
        tzr_error_restore(saved, code);
        return rc;
    }
    m.msg[sizeof m.msg - 1] = 0;
    return tzr_fail(TZR_ECOMM, "rank %d failed (%s): %s", res.r, tzr_strerror(m.code), m.msg);
}

int tzr_comm_agree(tzr_comm *c, int rc) { return comm_agree(c, rc, 300); }

/* ------------------------------------------------------------ helpers */
int comm_take_options(const tzr_comm_load_options *opt, tzr_comm_load_options *out) {
    tzr_comm_load_options o = TZR_COMM_LOAD_OPTIONS_INIT;
    if (TZR_OPTS(tzr_comm_load_options, o, opt, offsetof(tzr_comm_load_options, crypt))) return TZR_EINVAL;
    if (o.crypt_params) o.crypt = *o.crypt_params; /* by pointer wins */
    o.crypt_params = NULL;
    if (!o.chunk_bytes) o.chunk_bytes = (size_t)8 << 20;
    if (o.chunk_bytes > ((size_t)1 << 30)) o.chunk_bytes = (size_t)1 << 30;
    if (o.window < 1) o.window = 4;
    if (o.timeout_s == 0) o.timeout_s = 300;
    *out = o;
    return 0;
}

void comm_poll(void *ctx) {
    tzr_comm *c = ctx;
    int flag;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->comm, &flag, MPI_STATUS_IGNORE);
}

int comm_ends_with_json(const char *p) {
    size_t n = strlen(p);
    return n >= 5 && strcmp(p + n - 5, ".json") == 0;
}

static int open_reader(const char *path, const tzr_comm_load_options *o, tzr_reader **r) {
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.verify = o->verify;
    ro.crypt = o->crypt;
    ro.http = o->http;
    return tzr_reader_open(r, path, &ro);
}

int comm_open_layout(const char *path, const tzr_comm_load_options *o, int alloc_arena, tzr_reader **r,
                     comm_layout *L) {
    uint8_t *blob = NULL;
    size_t len = 0;
    int rc = open_reader(path, o, r);
    if (!rc) rc = comm_table_from_reader(*r, &blob, &len);
    if (!rc) rc = comm_layout_build(blob, len, alloc_arena, L);
    free(blob);
    return rc;
}

int comm_root_layout(tzr_comm *c, const char *path, const tzr_comm_load_options *o, int alloc_arena,
                     tzr_reader **r, comm_layout *L) {
    uint8_t *blob = NULL;
    size_t blen = 0;
    int rc = 0;
    if (c->rank == 0) {
        rc = open_reader(path, o, r);
        if (!rc) rc = comm_table_from_reader(*r, &blob, &blen);
    }
    rc = comm_agree(c, rc, o->timeout_s);
    uint64_t len64 = blen;
    MPI_Request q;
    if (!rc) {
        int e = MPI_Ibcast(&len64, 1, MPI_UINT64_T, 0, c->comm, &q);
        rc = e ? comm_mpi_fail(c, e, "MPI_Ibcast") : comm_wait(c, &q, 1, o->timeout_s, "table size", 0);
    }
    if (!rc && c->rank && !(blob = malloc(len64 ? (size_t)len64 : 1))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    if (!rc && len64 > INT32_MAX) rc = tzr_fail(TZR_ELIMIT, "tensor table of %llu bytes", (unsigned long long)len64);
    rc = comm_agree(c, rc, o->timeout_s);
    if (!rc) {
        int e = MPI_Ibcast(blob, (int)len64, MPI_BYTE, 0, c->comm, &q);
        rc = e ? comm_mpi_fail(c, e, "MPI_Ibcast") : comm_wait(c, &q, 1, o->timeout_s, "tensor table", 0);
    }
    if (!rc) rc = comm_layout_build(blob, (size_t)len64, alloc_arena, L);
    free(blob);
    return comm_agree(c, rc, o->timeout_s);
}

/* ------------------------------------------------------------ modes */
static int load_sharded(tzr_comm *c, const char *path, const tzr_comm_load_options *o, int rank, int size,
                        tzr_shard_result **out, uint64_t *bytes_read) {
    tzr_shard_set *s = NULL;
    tzr_shard_open_options so = TZR_SHARD_OPEN_OPTIONS_INIT;
    so.verify = o->verify;
    so.crypt = o->crypt;
    so.http = o->http;
    int rc = comm_agree(c, tzr_shard_open(&s, path, &so), o->timeout_s);
    if (!rc) rc = tzr_shard_load_rank(s, rank, size, o->rules, out);
    if (*out) *bytes_read = (*out)->bytes_read;
    tzr_shard_close(s);
    return rc;
}

static int load_independent(tzr_comm *c, const char *path, const tzr_comm_load_options *o, tzr_shard_result **out,
                            uint64_t *bytes_read) {
    if (comm_ends_with_json(path)) return load_sharded(c, path, o, 0, 1, out, bytes_read);
    tzr_reader *r = NULL;
    comm_layout L = {0};
    int rc = comm_agree(c, comm_open_layout(path, o, 1, &r, &L), o->timeout_s);
    tzr_sink *sink = NULL;
    if (!rc) rc = comm_table_sink(L.res, -1, &sink);
    if (!rc) {
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.verify = o->verify && tzr_reader_format(r) == TZR_FORMAT_TENSORIZER; /* safetensors: no hashes */
        tzr_load_stats st = {0};
        rc = tzr_load(r, sink, &lo, &st);
        *bytes_read = st.bytes_read;
    }
    tzr_sink_free(sink);
    tzr_reader_free(r);
    comm_layout_free(&L);
    if (rc) tzr_shard_result_free(L.res);
    else *out = L.res;
    return rc;
}

/* Broadcast (rank 0 reads everything) or allgather (each rank its part):
 * the reading ranks run the pipeline into the arena, the stream phase
 * forwards each chunk once it is complete. */
static int load_streamed(tzr_comm *c, const char *path, const tzr_comm_load_options *o, int gather,
                         tzr_shard_result **out, uint64_t *bytes_read) {
    tzr_reader *r = NULL;
    comm_layout L = {0};
    int rc = gather ? comm_agree(c, comm_open_layout(path, o, 1, &r, &L), o->timeout_s)
                    : comm_root_layout(c, path, o, 1, &r, &L);
    tzr_sink *sink = NULL;
    comm_feed *feed = NULL;
    uint64_t lo = 0, len = L.stream;
    if (!rc && gather) comm_part(&L, c->size, c->rank, &lo, &len);
    if (!rc && r) rc = comm_table_sink(L.res, -1, &sink);
    if (!rc && r) rc = comm_feed_start(&feed, r, &L, sink, lo, lo + len, o->verify);
    rc = comm_agree(c, rc, o->timeout_s);
    if (!rc) rc = gather ? comm_gather_stream(c, feed, &L, o) : comm_bcast_stream(c, feed, &L, o);
    int frc = comm_feed_finish(feed, rc != 0, bytes_read);
    if (!rc) rc = frc;
    tzr_sink_free(sink);
    tzr_reader_free(r);
    comm_layout_free(&L);
    if (rc) tzr_shard_result_free(L.res);
    else *out = L.res;
    return rc;
}

int tzr_comm_load(tzr_comm *c, const char *path, const tzr_comm_load_options *opt, tzr_shard_result **out,
                  tzr_comm_stats *stats) {
    *out = NULL;
    if (!c || !path) return tzr_fail(TZR_EINVAL, "comm load: no communicator or path");
    tzr_comm_load_options o;
    if (comm_take_options(opt, &o)) return TZR_EINVAL;
    double t0 = comm_now();
    uint64_t bytes_read = 0;
    c->agreed_fail = c->peer_failed = 0;
    int rc;
    switch (o.mode) {
    case TZR_COMM_INDEPENDENT: rc = load_independent(c, path, &o, out, &bytes_read); break;
    case TZR_COMM_BROADCAST: rc = load_streamed(c, path, &o, 0, out, &bytes_read); break;
    case TZR_COMM_ALLGATHER: rc = load_streamed(c, path, &o, 1, out, &bytes_read); break;
    case TZR_COMM_SHARDED: rc = load_sharded(c, path, &o, c->rank, c->size, out, &bytes_read); break;
    default: rc = tzr_fail(TZR_EINVAL, "unknown mode %d", (int)o.mode);
    }
    rc = comm_agree(c, rc, o.timeout_s);
    if (rc) {
        tzr_shard_result_free(*out);
        *out = NULL;
        return rc;
    }
    if (stats) {
        stats->bytes = (*out)->bytes;
        stats->bytes_read = bytes_read;
        stats->seconds = comm_now() - t0;
    }
    return 0;
}
#endif
