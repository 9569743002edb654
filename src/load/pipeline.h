/* Shared by the loader's three parts: planning (load_plan.c: the selected
 * bytes cut into units and pieces), running (load_run.c: the workers that
 * read, decrypt, expand, hash and deliver units, and the error and
 * completion bookkeeping) and the public entry (load.c: tzr_load, which
 * sets up a pipeline, binds destinations, runs it and drains it).
 *
 * The selected tensors' data is cut into units: one
 * unit is either a run of small tensors coalesced into one read, or one
 * chunk of a large tensor. Unit u uses staging slot u % nslots, so at most
 * nslots units are in flight and host memory stays at nslots * slot_size.
 *
 * Per unit: acquire the slot (waiting for its previous unit's fence), read
 * (straight into the destination when the sink allows it and the unit is a
 * single piece), decrypt each piece in place, hash pieces in tensor order
 * (SHA-256 is sequential; a piece that arrives early is parked and hashed
 * by whoever hashes its predecessor; at the CRC32 level a large piece's
 * CRC32 is computed before, by its reader, and only combined in order),
 * submit to the sink, fence. A tensor
 * is complete once every unit holding its pieces has passed its fence;
 * completions are reported in index order. The first error wins: it is
 * saved, everything else stops, and it is returned to the caller.
 *
 * Compressed tensors (libtzr's zstd extension): a unit is a run of whole
 * frames (at most S = `chunk` stored bytes; when encrypted, S grows to
 * 4 crypt chunks where an eighth of the ring allows, and max(2S, frame size) uncompressed bytes), read into
 * the slot's read area, decrypted (the read is widened to whole crypt
 * chunks, so neighbouring units both read and decrypt a boundary chunk:
 * at most cs/S extra), then expanded frame by frame into the slot's output
 * area, or straight into host destinations. Its one piece carries
 * uncompressed offsets, so hashing and delivery work as for plain data.
 * Such slots hold read area + output area + one frame of byte-plane
 * scratch, about 3-4x the chunk: the ring holds fewer slots, but the ring
 * budget still bounds the memory. Planning needs every frame table: from
 * the file's frame directory when it has one (then each tensor's first unit
 * also reads its header, checked before expanding), otherwise all selected
 * headers are read first, as for encrypted files. */
#ifndef TZR_PIPELINE_H
#define TZR_PIPELINE_H

#include "compress.h"
#include "crypt.h"
#include "reader_internal.h"
#include "tzr_load.h"

#include <pthread.h>
#include <stdatomic.h>

#define DEFAULT_RING ((size_t)256 << 20)
#define DEFAULT_CHUNK ((size_t)8 << 20)
/* For sinks with staging of their own (pinned, for a GPU): cudaHostAlloc
 * costs about 0.5 ms a MiB (an H200 host: 256 MiB took 0.12-0.17 s, more
 * than the copy of 4 GiB; huge pages registered in place cost less), so
 * a smaller ring of smaller slots. 4 GiB onto an H200, same run: 64 MiB
 * of 4 MiB 0.21 s, 128 of 4 0.18 s, 256 of 8 0.22 s. */
#define DEFAULT_PINNED_RING ((size_t)128 << 20)
#define DEFAULT_PINNED_CHUNK ((size_t)4 << 20)
#define MAX_GAP ((uint64_t)64 << 10) /* coalesce across gaps up to this */
/* Only tensors below this are coalesced: larger ones are read on their own,
 * straight into host destinations (a staging copy would cost more than the
 * extra read call saves). */
#define COALESCE_MAX ((uint64_t)1 << 20)
/* Asynchronous sinks (with fences) get up to 4 slots per thread. */
#define SLOTS_PER_THREAD 4
#define MAX_THREADS 64
#define MAX_FORCED_SLOT ((size_t)64 << 20)
#define TENSOR_LOCKS 64
/* Overlapped planning sizes slots before planning: a chunk plus this for
 * the header a coalesced unit starts with. */
#define OVERLAP_HDR_ROOM ((size_t)64 << 10)
/* CRC32-level loads: pieces from this size on have their CRC32 computed
 * by the thread that read them, right after the read (the bytes still in
 * cache, all threads at once), and only combined in tensor order; smaller
 * ones are hashed in order as they are (the combine would cost more). */
#define EARLY_CRC_MIN ((uint64_t)64 << 10)
/* A compressed tensor's first read carries its header up to this size. */
#define MAX_INLINE_HEADER ((uint64_t)64 << 10)
/* Tensors per phase-1 task (headers read in batches of consecutive
 * tensors: see load_header_worker). */
#define HEADER_BATCH 4096

typedef struct piece {
    size_t tensor;       /* index in the reader */
    uint64_t toff, len;  /* tensor bytes [toff, toff+len) */
    uint64_t uoff;       /* where they sit inside the unit */
    size_t unit;
    struct piece *next_parked;
} piece;

/* What a unit's read is and where its bytes go. Planning makes STAGED,
 * FRAMES and PACK units; binding the destinations (load.c) turns STAGED
 * ones the sink can take in place into DIRECT or SCATTER. */
typedef enum unit_kind {
    UNIT_STAGED,  /* read into the slot, pieces submitted from there */
    UNIT_DIRECT,  /* one piece, read straight into the sink's memory */
    UNIT_SCATTER, /* coalesced tensors, one vectored read straight into the
                     sink's memory; the headers between them land in the slot */
    UNIT_FRAMES,  /* zstd frames [f0, f1) of one tensor, expanded after the read */
    UNIT_PACK,    /* whole small compressed tensors, one piece each, records
                     back to back (remote sources) */
} unit_kind;

typedef struct unit {
    uint64_t off, len;   /* file range */
    size_t first, count; /* pieces */
    atomic_size_t left;  /* pieces not yet submitted */
    unit_kind kind;
    int expand_in_place; /* FRAMES/PACK: expanded straight into the sink's memory */
    uint64_t f0, f1;
    uint64_t skip;       /* read bytes before frame f0 (crypt chunk alignment,
                            or the tensor's header) */
    uint64_t hdr_len;    /* the read starts with the tensor's header, this long */
    uint64_t first_chunk;/* crypt chunk at the start of the read */
} unit;

static inline int unit_compressed(const unit *u) { return u->kind == UNIT_FRAMES || u->kind == UNIT_PACK; }
/* Its bytes land in the sink's memory, not submitted from the slot. */
static inline int unit_in_place(const unit *u) {
    return u->kind == UNIT_DIRECT || u->kind == UNIT_SCATTER || u->expand_in_place;
}

/* Per tensor, split by use: every load counts pieces, only verifying loads
 * hash. Kept apart, a 100k-tensor load without verification touches 1.6 MB
 * of this state rather than 8. Selection is the `want` byte map. */
typedef struct tstate {
    size_t pieces_total;
    size_t pieces_retired; /* guarded by the reporter lock */
} tstate;

typedef struct thash { /* ordered hashing, guarded by tensor_lock() */
    uint64_t hashed_upto;
    int hashing;
    int hs_live;
    tzr_hasher hs;
    piece *parked;
} thash;

/* A tensor that failed its checks in a load that goes on past it. */
typedef struct bad_tensor {
    size_t tensor;
    int code;
    char *msg;
} bad_tensor;

typedef struct slot {
    uint8_t *buf;
    long unit;           /* unit occupying it, -1 none */
    int processed;       /* that unit's pieces are all submitted */
    int retired;
    int has_fence;
    uint64_t fence;
} slot;

typedef struct pipeline {
    tzr_reader *r;
    tzr_sink *sink;
    const tzr_load_options *opt;
    int verify;
    int verify_sha;         /* verifying: SHA-256 too (TZR_VERIFY_FULL) */
    size_t n;               /* tensors in the reader */
    tstate *ts;
    thash *th;              /* verifying loads only */
    unsigned char *want;    /* selected, as a byte map */
    unsigned char *hdr_want;/* headers phase 1 reads: want, or (frame directory) only
                               those no unit of the tensor will carry */
    piece *pieces;
    size_t npieces;
    uint32_t *piece_crc;    /* CRC32-level loads of plaintext files: see EARLY_CRC_MIN */
    unit *units;
    size_t nunits;
    slot *slots;
    int nslots;
    size_t slot_size;       /* bytes allocated per slot */
    size_t zout_at;         /* slot offset of the expanded-frames area */
    size_t zout_max, zscratch_max;
    size_t direct_align;    /* O_DIRECT on: unit data placed congruent to this */
    int direct_was_set;
    pthread_mutex_t slot_lock;
    pthread_cond_t slot_cond;
    atomic_size_t next_unit;
    atomic_int failed;
    tzr_error_state err; /* the first failure, whole (message, tensor, offset) */
    int err_code;
    size_t err_tensor;
    pthread_mutex_t err_lock;
    /* Loads with on_tensor_error: bad[i] = index + 1 into bads (under
     * err_lock once set, read without it). key_state: 0 unknown, 1 the key
     * opened a tensor, 2 it opens none (decided once, under key_lock). */
    size_t *bad;
    bad_tensor *bads;
    size_t nbads, bads_cap;
    atomic_int key_state;
    pthread_mutex_t key_lock;
    /* Loads with a byte selection: sel[i] for tensors where has_sel[i]. */
    tzr_byte_selection *sel;
    unsigned char *has_sel;
    pthread_mutex_t report_lock;
    size_t next_report;
    atomic_uint_fast64_t bytes_done, bytes_read, reads;
    uint64_t total_bytes;   /* of the selected tensors, loaded */
    uint64_t stored_bytes;  /* of the selected tensors, in the file */
    size_t nselected;
    size_t nempty;          /* selected tensors without data (meta or zero-size) */
    size_t nrequested;      /* selected by the filter (nselected less bad headers) */
    pthread_mutex_t progress_lock;
    /* Tensors share TENSOR_LOCKS locks by index: a mutex per tensor cost
     * 100k initialisations (and 4 MB) on many-tensor files. */
    pthread_mutex_t tensor_locks[TENSOR_LOCKS];
    size_t staging_bytes;
    size_t header_batch;    /* tensors per phase-1 task */
    int keep_headers;       /* headers read with the data are installed, not only checked (a verify: header_kept) */
    int headers_read;       /* phase 1 ran: every selected header is installed */
    /* Overlapped planning (local plaintext loads): workers run units while
     * the calling thread plans the rest and another thread calls
     * begin_tensor for every tensor. Units below units_ready are planned
     * (release/acquire; the arrays never move: plan_fixed); tensors below
     * planned_to are planned whole; no unit runs and no tensor is reported
     * before bound (every begin_tensor done). Waits are on slot_cond. */
    int overlap;
    int plan_fixed;
    atomic_size_t units_ready;
    atomic_size_t planned_to;
    atomic_int plan_done;
    atomic_int bound;
} pipeline;

/* How planning cuts the data: read size, budget, and the source's cost
 * model (pack_reads: reads are costly requests, so the stream is cut into
 * `chunk` reads across tensor boundaries; else small tensors coalesce and
 * large ones are read on their own, in place). */
typedef struct plan_policy {
    size_t chunk;      /* read size */
    size_t ring;       /* staging budget (sizes compressed units) */
    int pack_reads;
    size_t last_comp;  /* last selected compressed tensor, or (size_t)-1 */
    int taper;         /* its last this many frames are units of their own */
} plan_policy;

/* ---- byte selections (tzr_load_options.select) ---------------------- */
static inline const tzr_byte_selection *selection(const pipeline *p, size_t i) {
    return p->has_sel && p->has_sel[i] ? &p->sel[i] : NULL;
}

static inline uint64_t sel_runs(const tzr_byte_selection *s) { return s->count * s->outer_count; }

static inline uint64_t sel_run_at(const tzr_byte_selection *s, uint64_t r) {
    return s->offset + r / s->count * s->outer_stride + r % s->count * s->stride;
}

/* The first run that ends after byte `off`. */
static inline uint64_t sel_first_after(const tzr_byte_selection *s, uint64_t off) {
    if (off < s->offset) return 0;
    uint64_t o = (off - s->offset) / s->outer_stride, rem = off - s->offset - o * s->outer_stride;
    if (o >= s->outer_count) return sel_runs(s);
    uint64_t j = rem / s->stride;
    if (j < s->count && rem - j * s->stride >= s->run) j++;
    if (j >= s->count) return (o + 1) * s->count;
    return o * s->count + j;
}

/* Selected bytes within [off, off + len). */
static inline uint64_t sel_overlap(const tzr_byte_selection *s, uint64_t off, uint64_t len) {
    uint64_t n = 0, end = off + len;
    for (uint64_t r = sel_first_after(s, off); r < sel_runs(s); r++) {
        uint64_t a = sel_run_at(s, r), b = a + s->run;
        if (a >= end) break;
        n += (b < end ? b : end) - (a > off ? a : off);
    }
    return n;
}

/* [off, off + len) lies inside one run (or the tensor has no selection). */
static inline int sel_holds(const pipeline *p, size_t i, uint64_t off, uint64_t len) {
    const tzr_byte_selection *s = selection(p, i);
    if (!s) return 1;
    uint64_t r = sel_first_after(s, off);
    return r < sel_runs(s) && sel_run_at(s, r) <= off && off + len <= sel_run_at(s, r) + s->run;
}

/* The bytes of a piece that reach the sink. */
static inline uint64_t piece_delivers(const pipeline *p, const piece *pc) {
    const tzr_byte_selection *s = selection(p, pc->tensor);
    return s ? sel_overlap(s, pc->toff, pc->len) : pc->len;
}

/* Where resumable local planning stands (load_plan_local_step). */
typedef struct plan_state {
    size_t i;           /* next tensor */
    int open_unit;      /* a unit of coalesced tensors is open: */
    uint64_t uoff, uend;/* its file range so far */
    size_t ufirst;      /* and first piece */
    size_t pcap, ucap;
    uint64_t slot_cap;  /* slots sized before planning: a unit's most bytes (0: any) */
} plan_state;

/* ---- load_plan.c */
/* Cut the selected tensors' data into units and pieces (and size the slots). */
TZR_HIDDEN int load_plan(pipeline *p, const plan_policy *pol);
/* The same in steps (local sources): allocate (exact: at the bound, never
 * moved), plan until `target` units exist, say which tensors are done. */
TZR_HIDDEN int load_plan_begin(pipeline *p, const plan_policy *pol, plan_state *st, int exact);
TZR_HIDDEN int load_plan_local_step(pipeline *p, const plan_policy *pol, plan_state *st, size_t target);
TZR_HIDDEN size_t load_plan_local_done_below(const pipeline *p, const plan_state *st);
/* Tensor i is read selection only (plaintext or encrypted, not verified). */
TZR_HIDDEN int load_plans_selected(const pipeline *p, const tzr_tensor_info *t, size_t i);

/* ---- load_run.c */
/* Record the first error (with this thread's message) and stop everyone;
 * `tensor` is the tensor it concerns, or (size_t)-1. */
TZR_HIDDEN int load_fail_at(pipeline *p, int rc, size_t tensor);
TZR_HIDDEN int load_fail(pipeline *p, int rc);
TZR_HIDDEN int load_is_bad(pipeline *p, size_t tensor);
/* A tensor failed its checks: reported and skipped where the load goes
 * on past bad tensors, else the load's error. */
TZR_HIDDEN int load_tensor_fail(pipeline *p, int rc, size_t tensor);
/* Report completed tensors in index order. Caller holds report_lock. */
TZR_HIDDEN int load_report_ready(pipeline *p);
/* A unit's fence has passed: its pieces count towards their tensors. */
TZR_HIDDEN int load_retire_unit(pipeline *p, size_t u);
/* Meta tensors: zeros; tensors without data: nothing to read. */
TZR_HIDDEN int load_fill_empty(pipeline *p, size_t i, const tzr_tensor_info *t);
/* Runs fn on nthreads threads; `beside`, when given, runs meanwhile on the
 * calling thread. Returns the load's error. */
TZR_HIDDEN int load_run_threads(pipeline *p, int nthreads, void *(*fn)(void *), void (*beside)(pipeline *));
TZR_HIDDEN void *load_worker(void *arg);        /* runs units */
TZR_HIDDEN void *load_header_worker(void *arg); /* phase 1 */
/* Reads the end-of-tensors marker beside the data where open left it. */
TZR_HIDDEN void load_check_end_marker(pipeline *p);
/* A staged unit the sink can take in place becomes DIRECT or SCATTER
 * (compressed ones expand in place where they can). */
TZR_HIDDEN void load_bind_unit(pipeline *p, size_t u);
/* Destinations before any unit runs: reserve, begin_tensor, tensors
 * without data (load.c). */
TZR_HIDDEN int load_bind_tensors(pipeline *p);
/* The load failed or was canceled (a cancel is recorded as its error). */
TZR_HIDDEN int load_stopped(pipeline *p);
/* Overlapped planning: `plan` runs on the calling thread (which then
 * works too) beside the workers, one of which first binds the tensors
 * (load_bind_tensors). Returns the load's error. */
TZR_HIDDEN extern int (*tzr_load_plan_hook)(size_t units); /* tests only */
TZR_HIDDEN int load_run_overlapped(pipeline *p, int nthreads, void (*plan)(pipeline *, void *), void *plan_ctx);
#endif
