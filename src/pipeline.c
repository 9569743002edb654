/* The pipelined loader. The selected tensors' data is cut into units: one
 * unit is either a run of small tensors coalesced into one read, or one
 * chunk of a large tensor. Unit u uses staging slot u % nslots, so at most
 * nslots units are in flight and host memory stays at nslots * slot_size.
 *
 * Per unit: acquire the slot (waiting for its previous unit's fence), read
 * (straight into the destination when the sink allows it and the unit is a
 * single piece), decrypt each piece in place, hash pieces in tensor order
 * (SHA-256 is sequential; a piece that arrives early is parked and hashed
 * by whoever hashes its predecessor), submit to the sink, fence. A tensor
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
#include "compress.h"
#include "crypt.h"
#include "mem.h"
#include "reader_internal.h"
#include "tzr_load.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_RING ((size_t)256 << 20)
#define DEFAULT_CHUNK ((size_t)8 << 20)
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
/* A compressed tensor's first read carries its header up to this size. */
#define MAX_INLINE_HEADER ((uint64_t)64 << 10)

typedef struct piece {
    size_t tensor;       /* index in the reader */
    uint64_t toff, len;  /* tensor bytes [toff, toff+len) */
    uint64_t uoff;       /* where they sit inside the unit */
    size_t unit;
    struct piece *next_parked;
} piece;

typedef struct unit {
    uint64_t off, len;   /* file range */
    size_t first, count; /* pieces */
    atomic_size_t left;  /* pieces not yet submitted */
    int direct;          /* read straight into the sink's memory */
    int comp;            /* zstd frames [f0, f1), expanded after the read */
    int zdirect;         /* expanded straight into the sink's memory */
    int scatter;         /* coalesced tensors read with one vectored read
                            straight into the sink's memory; the headers
                            between them land in the slot */
    uint64_t f0, f1;
    uint64_t skip;       /* read bytes before frame f0 (crypt chunk alignment,
                            or the tensor's header) */
    uint64_t hdr_len;    /* the read starts with the tensor's header, this long */
    int zpack;           /* whole small compressed tensors, one piece each,
                            records back to back (remote sources) */
    uint64_t first_chunk;/* crypt chunk at the start of the read */
} unit;

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
    size_t n;               /* tensors in the reader */
    tstate *ts;
    thash *th;              /* verifying loads only */
    unsigned char *want;    /* selected, as a byte map */
    unsigned char *hdr_want;/* headers phase 1 reads: want, or (frame directory) only
                               those no unit of the tensor will carry */
    piece *pieces;
    size_t npieces;
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
    size_t nrequested;      /* selected by the filter (nselected less bad headers) */
    pthread_mutex_t progress_lock;
    /* Tensors share TENSOR_LOCKS locks by index: a mutex per tensor cost
     * 100k initialisations (and 4 MB) on many-tensor files. */
    pthread_mutex_t tensor_locks[TENSOR_LOCKS];
    size_t staging_bytes;
    size_t header_batch;    /* tensors per phase-1 task */
    int keep_headers;       /* headers read with the data are installed, not only checked */
    int headers_read;       /* phase 1 ran: every selected header is installed */
    size_t last_comp;       /* last selected compressed tensor, or (size_t)-1 */
    int taper;              /* its last this many frames are units of their own */
} pipeline;

static const uint8_t zeros[1 << 16];

/* Record the first error (with this thread's message) and stop everyone;
 * `tensor` is the tensor it concerns, or (size_t)-1. */
static int fail_at(pipeline *p, int rc, size_t tensor) {
    pthread_mutex_lock(&p->err_lock);
    if (!p->err_code) {
        if (tensor != (size_t)-1 && !tzr_last_error_tensor()) {
            char nb[TZR_NAMEBUF];
            const tzr_tensor_info *t = tzr_reader_tensor(p->r, tensor);
            tzr_error_where(tzr_printable(t->name, t->name_len, nb, sizeof nb), TZR_NO_OFFSET);
        }
        tzr_error_keep(&p->err);
        p->err_code = rc;
        p->err_tensor = tensor;
    }
    pthread_mutex_unlock(&p->err_lock);
    atomic_store(&p->failed, 1);
    pthread_mutex_lock(&p->slot_lock);
    pthread_cond_broadcast(&p->slot_cond);
    pthread_mutex_unlock(&p->slot_lock);
    return rc;
}

static int fail(pipeline *p, int rc) { return fail_at(p, rc, (size_t)-1); }

/* ---- byte selections (tzr_load_options.select) ---------------------- */
static const tzr_byte_selection *selection(const pipeline *p, size_t i) {
    return p->has_sel && p->has_sel[i] ? &p->sel[i] : NULL;
}

static uint64_t sel_runs(const tzr_byte_selection *s) { return s->count * s->outer_count; }

static uint64_t sel_run_at(const tzr_byte_selection *s, uint64_t r) {
    return s->offset + r / s->count * s->outer_stride + r % s->count * s->stride;
}

/* The first run that ends after byte `off`. */
static uint64_t sel_first_after(const tzr_byte_selection *s, uint64_t off) {
    if (off < s->offset) return 0;
    uint64_t o = (off - s->offset) / s->outer_stride, rem = off - s->offset - o * s->outer_stride;
    if (o >= s->outer_count) return sel_runs(s);
    uint64_t j = rem / s->stride;
    if (j < s->count && rem - j * s->stride >= s->run) j++;
    if (j >= s->count) return (o + 1) * s->count;
    return o * s->count + j;
}

/* Selected bytes within [off, off + len). */
static uint64_t sel_overlap(const tzr_byte_selection *s, uint64_t off, uint64_t len) {
    uint64_t n = 0, end = off + len;
    for (uint64_t r = sel_first_after(s, off); r < sel_runs(s); r++) {
        uint64_t a = sel_run_at(s, r), b = a + s->run;
        if (a >= end) break;
        n += (b < end ? b : end) - (a > off ? a : off);
    }
    return n;
}

/* [off, off + len) lies inside one run (or the tensor has no selection). */
static int sel_holds(const pipeline *p, size_t i, uint64_t off, uint64_t len) {
    const tzr_byte_selection *s = selection(p, i);
    if (!s) return 1;
    uint64_t r = sel_first_after(s, off);
    return r < sel_runs(s) && sel_run_at(s, r) <= off && off + len <= sel_run_at(s, r) + s->run;
}

/* The bytes of a piece that reach the sink. */
static uint64_t piece_delivers(const pipeline *p, const piece *pc) {
    const tzr_byte_selection *s = selection(p, pc->tensor);
    return s ? sel_overlap(s, pc->toff, pc->len) : pc->len;
}

static int sel_check(const tzr_byte_selection *s, const tzr_tensor_info *t, const char *what) {
    uint64_t last;
    int ok = s->run > 0 && s->count > 0 && s->outer_count > 0 && (s->count == 1 || s->stride >= s->run);
    uint64_t group = ok ? (s->count - 1) * s->stride + s->run : 0;
    ok = ok && (s->count == 1 || (s->count - 1) <= UINT64_MAX / s->stride) &&
         (s->outer_count == 1 || s->outer_stride >= group) &&
         tzr_mul_ok(s->outer_count - 1, s->outer_count == 1 ? 0 : s->outer_stride, &last) &&
         tzr_add_ok(last, group, &last) && tzr_add_ok(last, s->offset, &last) && last <= t->nbytes;
    if (ok) return 0;
    return tzr_fail(TZR_EINVAL, "%s: byte selection (offset %llu, %llu x %llu runs of %llu bytes) is not inside its %llu "
                    "bytes or overlaps itself", what, (unsigned long long)s->offset, (unsigned long long)s->outer_count,
                    (unsigned long long)s->count, (unsigned long long)s->run, (unsigned long long)t->nbytes);
}

static int is_bad(pipeline *p, size_t tensor) {
    return p->bad && __atomic_load_n(&p->bad[tensor], __ATOMIC_ACQUIRE) != 0;
}

/* A failure of one tensor's data or header (this thread's message). A
 * load with on_tensor_error marks the tensor bad and goes on (returns 0);
 * any other failure, or any failure of a plain load, stops everything. */
static int tensor_fail(pipeline *p, int rc, size_t tensor) {
    int data_error = rc == TZR_EHASH || rc == TZR_ECRYPT || rc == TZR_EFORMAT;
    if (!p->bad || !data_error || tensor >= p->n || atomic_load(&p->failed)) return fail_at(p, rc, tensor);
    pthread_mutex_lock(&p->err_lock);
    int ok = 1;
    if (!p->bad[tensor]) {
        if (p->nbads == p->bads_cap) {
            size_t cap = p->bads_cap ? 2 * p->bads_cap : 16;
            bad_tensor *grown = realloc(p->bads, cap * sizeof *grown);
            if (grown) {
                p->bads = grown;
                p->bads_cap = cap;
            }
        }
        char *msg = p->nbads < p->bads_cap ? strdup(tzr_last_error()) : NULL;
        ok = msg != NULL;
        if (ok) {
            p->bads[p->nbads++] = (bad_tensor){tensor, rc, msg};
            __atomic_store_n(&p->bad[tensor], p->nbads, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&p->err_lock);
    return ok ? 0 : fail_at(p, rc, tensor); /* no memory to remember it: stop with it */
}

/* A tensor did not decrypt. With a key that opens no other tensor the file
 * is not bad, the key is: stop with one message rather than report every
 * tensor. Decided once per load, and only on a failure. */
static void check_key_after(pipeline *p, size_t tensor) {
    if (!p->bad || atomic_load(&p->key_state)) return;
    pthread_mutex_lock(&p->key_lock);
    if (!atomic_load(&p->key_state)) {
        char saved[1024];
        int code, opens = -1;
        tzr_error_save(saved, sizeof saved, &code);
        int rc = tzr_reader_key_opens_others(p->r, tensor, &opens);
        tzr_error_restore(saved, code);
        atomic_store(&p->key_state, rc == 0 && opens == 0 ? 2 : 1);
        if (rc == 0 && opens == 0) {
            int e = tzr_fail(TZR_ECRYPT, "%s: wrong key or password: no tensor decrypts with it (first tried: %s)",
                             tzr_reader_source(p->r)->name, saved);
            tzr_error_set_cause(TZR_CAUSE_KEY);
            fail(p, e);
        }
    }
    pthread_mutex_unlock(&p->key_lock);
}

static void key_opened(pipeline *p) {
    if (p->bad && !atomic_load_explicit(&p->key_state, memory_order_relaxed)) atomic_store(&p->key_state, 1);
}

/* Report tensor i's failure to the caller (under report_lock). */
static int report_bad(pipeline *p, size_t i) {
    pthread_mutex_lock(&p->err_lock);
    bad_tensor b = p->bads[p->bad[i] - 1];
    pthread_mutex_unlock(&p->err_lock);
    int rc = p->opt->on_tensor_error(p->opt->on_tensor_error_ctx, i, tzr_reader_tensor(p->r, i), b.code, b.msg);
    if (rc) {
        char what[TZR_NAMEBUF + 256];
        tzr_fail(rc, "%s: canceled by the caller's callback", tzr_reader_what(p->r, i, what, sizeof what));
    }
    return rc;
}

static int stopped(pipeline *p) {
    if (atomic_load(&p->failed)) return 1;
    if (p->opt->cancel && __atomic_load_n(p->opt->cancel, __ATOMIC_RELAXED)) {
        fail(p, tzr_fail(TZR_ECANCELED, "load canceled"));
        return 1;
    }
    return 0;
}

/* Report completed tensors in index order. Caller holds report_lock. */
static int report_ready(pipeline *p) {
    while (p->next_report < p->n) {
        size_t i = p->next_report;
        tstate *t = &p->ts[i];
        if (p->want[i] && t->pieces_retired < t->pieces_total) break;
        p->next_report++;
        if (stopped(p)) continue;
        if (is_bad(p, i)) {
            int rc = report_bad(p, i);
            if (rc) return fail_at(p, rc, i);
            continue;
        }
        if (!p->want[i]) continue;
        const tzr_tensor_info *info = tzr_reader_tensor(p->r, i);
        int rc = p->sink->end_tensor ? p->sink->end_tensor(p->sink, i, info) : 0;
        if (!rc && p->opt->on_tensor) {
            rc = p->opt->on_tensor(p->opt->on_tensor_ctx, i, info);
            if (rc) {
                char what[TZR_NAMEBUF + 256];
                tzr_fail(rc, "%s: canceled by the caller's callback", tzr_reader_what(p->r, i, what, sizeof what));
            }
        }
        if (rc) return fail_at(p, rc, i);
    }
    return 0;
}

/* A unit's fence has passed: its pieces count towards their tensors. */
static int retire_unit(pipeline *p, size_t u) {
    pthread_mutex_lock(&p->report_lock);
    unit *un = &p->units[u];
    for (size_t k = 0; k < un->count; k++) p->ts[p->pieces[un->first + k].tensor].pieces_retired++;
    int rc = report_ready(p);
    pthread_mutex_unlock(&p->report_lock);
    return rc;
}

static void progress(pipeline *p, uint64_t add) {
    uint64_t done = atomic_fetch_add(&p->bytes_done, add) + add;
    if (!p->opt->progress) return;
    pthread_mutex_lock(&p->progress_lock);
    p->opt->progress(p->opt->progress_ctx, done, p->total_bytes);
    pthread_mutex_unlock(&p->progress_lock);
}

/* Deliver one piece (decrypted, in unit memory or already in place). The
 * caller counts its bytes as done: once per unit where it can, since a
 * shared counter bumped per piece bounces between cores on many-tensor
 * files. */
static int deliver(pipeline *p, piece *pc, const uint8_t *bytes, int s) {
    unit *un = &p->units[pc->unit];
    if (un->direct || un->zdirect || un->scatter || is_bad(p, pc->tensor)) return 0;
    const tzr_byte_selection *sel = selection(p, pc->tensor);
    if (!sel) return p->sink->submit(p->sink, s, pc->tensor, pc->toff, bytes, (size_t)pc->len);
    uint64_t end = pc->toff + pc->len;
    int rc = 0;
    for (uint64_t r = sel_first_after(sel, pc->toff); r < sel_runs(sel) && !rc; r++) {
        uint64_t a = sel_run_at(sel, r), b = a + sel->run;
        if (a >= end) break;
        if (a < pc->toff) a = pc->toff;
        if (b > end) b = end;
        rc = p->sink->submit(p->sink, s, pc->tensor, a, bytes + (a - pc->toff), (size_t)(b - a));
    }
    return rc;
}

static int unit_piece_done(pipeline *p, size_t u, int s) {
    if (atomic_fetch_sub(&p->units[u].left, 1) != 1) return 0;
    int rc = 0;
    pthread_mutex_lock(&p->slot_lock);
    slot *sl = &p->slots[s];
    if (p->sink->fence && !p->units[u].direct && !p->units[u].zdirect && !p->units[u].scatter) {
        rc = p->sink->fence(p->sink, s, &sl->fence);
        sl->has_fence = rc == 0;
    }
    sl->processed = 1;
    pthread_cond_broadcast(&p->slot_cond);
    pthread_mutex_unlock(&p->slot_lock);
    return rc;
}

/* Where unit u's bytes start in its slot: with O_DIRECT, at the unit's
 * file offset modulo the alignment, so the source can read its aligned
 * middle around the page cache straight into the slot. */
static uint8_t *unit_base(pipeline *p, size_t u) {
    uint8_t *b = p->slots[u % (size_t)p->nslots].buf;
    if (!b) return NULL; /* a unit read in place has no staging */
    return p->direct_align ? b + p->units[u].off % p->direct_align : b;
}

static uint8_t *piece_base(pipeline *p, piece *pc) { return unit_base(p, pc->unit); }

/* Where a piece's finished bytes are: the sink's memory or the slot. */
static uint8_t *piece_bytes(pipeline *p, piece *pc) {
    unit *un = &p->units[pc->unit];
    if (un->direct || un->zdirect || un->scatter) return p->sink->direct(p->sink, pc->tensor, pc->toff, pc->len);
    return (un->comp ? p->slots[pc->unit % (size_t)p->nslots].buf : piece_base(p, pc)) + pc->uoff;
}

static pthread_mutex_t *tensor_lock(pipeline *p, size_t tensor) { return &p->tensor_locks[tensor % TENSOR_LOCKS]; }

/* Hash pieces of one tensor strictly in order, delivering each after its
 * hash. Called with the piece that may be next; parks it otherwise. */
static int hash_in_order(pipeline *p, piece *pc) {
    thash *t = &p->th[pc->tensor];
    pthread_mutex_t *lock = tensor_lock(p, pc->tensor);
    pthread_mutex_lock(lock);
    if (t->hashing || t->hashed_upto != pc->toff) {
        pc->next_parked = t->parked;
        t->parked = pc;
        pthread_mutex_unlock(lock);
        return 0;
    }
    t->hashing = 1;
    pthread_mutex_unlock(lock);
    int rc = 0;
    while (pc) {
        int s = (int)(pc->unit % (size_t)p->nslots);
        const uint8_t *bytes = piece_bytes(p, pc);
        /* A bad tensor's remaining pieces are only counted. */
        int skip = is_bad(p, pc->tensor);
        if (!rc && !skip && pc->toff == 0) {
            rc = tzr_reader_hash_begin(p->r, pc->tensor, &t->hs); /* reads the header if needed */
            t->hs_live = rc == 0;
            if (rc) rc = tensor_fail(p, rc, pc->tensor), skip = 1;
        }
        if (!rc && !skip) tzr_hasher_update(&t->hs, bytes, (size_t)pc->len);
        const tzr_tensor_info *info = tzr_reader_tensor(p->r, pc->tensor);
        if (!rc && !skip && pc->toff + pc->len == info->uncompressed_length) {
            t->hs_live = 0;
            rc = tzr_reader_hash_check(p->r, pc->tensor, &t->hs);
            if (rc) rc = tensor_fail(p, rc, pc->tensor);
        }
        if (!rc) rc = deliver(p, pc, bytes, s);
        if (!rc) progress(p, piece_delivers(p, pc));
        if (!rc) rc = unit_piece_done(p, pc->unit, s);
        if (rc) {
            fail_at(p, rc, pc->tensor);
            /* Keep draining so parked pieces do not hold slots forever. */
        }
        pthread_mutex_lock(lock);
        t->hashed_upto = pc->toff + pc->len;
        piece *next = NULL, **pp = &t->parked;
        while (*pp) {
            if ((*pp)->toff == t->hashed_upto) {
                next = *pp;
                *pp = next->next_parked;
                break;
            }
            pp = &(*pp)->next_parked;
        }
        if (!next) t->hashing = 0;
        pthread_mutex_unlock(lock);
        pc = next;
        if (rc) break;
    }
    return rc;
}

static int decrypt_piece(pipeline *p, piece *pc, uint8_t *bytes) {
    /* The file-level flag is fixed at open; per-tensor flags are written
     * when a header is installed, possibly by another thread right now. */
    if (!tzr_reader_encrypted(p->r) || is_bad(p, pc->tensor)) return 0;
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(p->r, pc->tensor, &h);
    if (rc) return rc;
    if (!h->crypt.encrypted) return 0;
    uint8_t key[32];
    rc = tzr_reader_tensor_key(p->r, pc->tensor, key);
    if (rc) return fail_at(p, rc, pc->tensor); /* no key: no tensor's fault */
    const tzr_tensor_info *info = tzr_reader_tensor(p->r, pc->tensor);
    uint64_t first = h->crypt.num_macs > 1 ? pc->toff / h->crypt.chunk_size : 0;
    rc = tzr_crypt_open(&h->crypt, key, info->data_length, first, bytes, (size_t)pc->len);
    memset(key, 0, sizeof key);
    if (rc) {
        char what[TZR_NAMEBUF + 256];
        tzr_fail_prefix(rc, "%s at offset %llu: ", tzr_reader_what(p->r, pc->tensor, what, sizeof what),
                        (unsigned long long)(info->data_offset + pc->toff));
        tzr_error_where(NULL, info->data_offset + pc->toff);
        check_key_after(p, pc->tensor);
    } else {
        key_opened(p);
    }
    return rc;
}

/* Wait until slot s may take unit u; retire its previous unit. */
static int acquire_slot(pipeline *p, size_t u, int s) {
    slot *sl = &p->slots[s];
    long expect = u >= (size_t)p->nslots ? (long)(u - (size_t)p->nslots) : -1;
    pthread_mutex_lock(&p->slot_lock);
    while (!atomic_load(&p->failed) && (sl->unit != expect || (expect >= 0 && !sl->processed)))
        pthread_cond_wait(&p->slot_cond, &p->slot_lock);
    if (atomic_load(&p->failed)) {
        pthread_mutex_unlock(&p->slot_lock);
        return TZR_ECANCELED;
    }
    long prev = sl->unit;
    int has_fence = sl->has_fence;
    uint64_t fence = sl->fence;
    pthread_mutex_unlock(&p->slot_lock);
    int rc = 0;
    if (prev >= 0) {
        if (has_fence) rc = p->sink->wait(p->sink, fence);
        if (!rc) rc = retire_unit(p, (size_t)prev);
        if (rc) return fail(p, rc);
    }
    if (!sl->buf && !p->units[u].direct) {
        sl->buf = p->sink->alloc_staging ? p->sink->alloc_staging(p->sink, p->slot_size) : tzr_alloc_big(p->slot_size);
        if (!sl->buf) return fail(p, tzr_fail(TZR_ENOMEM, "cannot allocate a %zu-byte staging slot", p->slot_size));
        pthread_mutex_lock(&p->slot_lock);
        p->staging_bytes += p->slot_size;
        pthread_mutex_unlock(&p->slot_lock);
    }
    pthread_mutex_lock(&p->slot_lock);
    sl->unit = (long)u;
    sl->processed = 0;
    sl->has_fence = 0;
    pthread_mutex_unlock(&p->slot_lock);
    return 0;
}

/* Expand frames [f0, f1) of piece pc's tensor from `in` (stored bytes
 * starting at frame f0, file offset `at` for messages) into its place:
 * the sink's memory or the slot's output area. */
static int expand_frames(pipeline *p, size_t u, piece *pc, const tzr_comp_info *ci, uint64_t f0, uint64_t f1,
                         const uint8_t *in, size_t inlen, uint64_t at, tzr_zctx **zp) {
    char what[TZR_NAMEBUF + 256];
    if (!*zp && !(*zp = tzr_zctx_new())) return tzr_fail(TZR_ENOMEM, "out of memory for a zstd context");
    uint8_t *dst = piece_bytes(p, pc);
    if (!dst) return tzr_fail(TZR_EINVAL, "sink gave no destination");
    uint8_t *scratch = p->slots[u % (size_t)p->nslots].buf + p->zout_at + p->zout_max;
    int rc = tzr_zdecompress(*zp, ci, f0, f1, in, inlen, dst, scratch, at);
    if (rc) tzr_fail_prefix(rc, "%s: ", tzr_reader_what(p->r, pc->tensor, what, sizeof what));
    return rc;
}

/* A compressed unit after its read: decrypt the read (whole crypt chunks),
 * expand its frames into the slot's output area or the sink's memory. */
static int expand_unit(pipeline *p, size_t u, uint8_t *buf, tzr_zctx **zp) {
    unit *un = &p->units[u];
    piece *pc = &p->pieces[un->first];
    const tzr_tensor_info *info = tzr_reader_tensor(p->r, pc->tensor);
    const tzr_tensor_header *h = NULL;
    const tzr_comp_info *ci = NULL;
    char what[TZR_NAMEBUF + 256];
    int rc = tzr_reader_comp(p->r, pc->tensor, &ci);
    /* Encrypted files read every header in phase 1. */
    if (!rc && tzr_reader_encrypted(p->r)) rc = tzr_reader_header(p->r, pc->tensor, &h);
    if (!rc && h && h->crypt.encrypted) {
        uint8_t key[32];
        rc = tzr_reader_tensor_key(p->r, pc->tensor, key);
        if (rc) return fail_at(p, rc, pc->tensor); /* no key: no tensor's fault */
        rc = tzr_crypt_open(&h->crypt, key, info->data_length, un->first_chunk, buf, (size_t)un->len);
        memset(key, 0, sizeof key);
        if (rc) {
            if (!tzr_last_error_tensor()) {
                tzr_fail_prefix(rc, "%s at offset %llu: ", tzr_reader_what(p->r, pc->tensor, what, sizeof what),
                                (unsigned long long)un->off);
                tzr_error_where(NULL, un->off);
            }
            check_key_after(p, pc->tensor);
        } else {
            key_opened(p);
        }
    }
    if (rc) return rc;
    return expand_frames(p, u, pc, ci, un->f0, un->f1, buf + un->skip, (size_t)(un->len - un->skip),
                         un->off + un->skip, zp);
}

/* A pack of whole compressed tensors: per piece, check and keep its header
 * (installing is a no-op when an earlier read did), then expand all its
 * frames in place. */
static int expand_pack(pipeline *p, size_t u, const uint8_t *buf, tzr_zctx **zp) {
    unit *un = &p->units[u];
    int rc = 0;
    for (size_t k = 0; k < un->count && !rc; k++) {
        piece *pc = &p->pieces[un->first + k];
        const tzr_tensor_info *t = tzr_reader_tensor(p->r, pc->tensor);
        const tzr_comp_info *ci = NULL;
        rc = tzr_reader_install_header(p->r, pc->tensor, buf + (t->header_offset - un->off),
                                       (size_t)(t->data_offset - t->header_offset));
        if (!rc) rc = tzr_reader_comp(p->r, pc->tensor, &ci);
        if (!rc)
            rc = expand_frames(p, u, pc, ci, 0, ci->nframes, buf + (t->data_offset - un->off), (size_t)t->data_length,
                               t->data_offset, zp);
        if (rc) rc = tensor_fail(p, rc, pc->tensor);
    }
    return rc;
}

/* One vectored read for a coalesced unit: each piece's data straight into
 * the sink's memory, the bytes between (headers) packed into the slot.
 * gap_at[k] is where the gap before piece k ends in the slot. */
static int scatter_read(pipeline *p, unit *un, uint8_t *gaps, tzr_source *src, uint64_t **gap_at_out) {
    tzr_iovec *iov = malloc(2 * un->count * sizeof *iov);
    uint64_t *gap_at = malloc(un->count * sizeof *gap_at);
    if (!iov || !gap_at) {
        free(iov);
        free(gap_at);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    int n = 0;
    uint64_t at = un->off, used = 0;
    for (size_t k = 0; k < un->count; k++) {
        piece *pc = &p->pieces[un->first + k];
        uint64_t data = un->off + pc->uoff;
        if (data > at) {
            iov[n++] = (tzr_iovec){gaps + used, (size_t)(data - at)};
            used += data - at;
        }
        gap_at[k] = used;
        iov[n++] = (tzr_iovec){p->sink->direct(p->sink, pc->tensor, pc->toff, pc->len), (size_t)pc->len};
        at = data + pc->len;
    }
    int rc = src->readv_at(src, iov, n, un->off);
    free(iov);
    if (rc) {
        free(gap_at);
        return rc;
    }
    *gap_at_out = gap_at;
    return 0;
}

/* A remote read waits on the network: map its destination first (other
 * threads' requests keep the link busy meanwhile) rather than after the
 * bytes arrive, when first-touch faults (microseconds a page on VMs whose
 * host reclaims free memory) would add to the copy or decompression.
 * MADV_POPULATE_WRITE only maps pages; it never changes their bytes. */
static void prefault(void *at, size_t len) {
#ifdef MADV_POPULATE_WRITE
    tzr_advise_inside(at, len, (size_t)sysconf(_SC_PAGESIZE), MADV_POPULATE_WRITE); /* best effort */
#else
    (void)at;
    (void)len;
#endif
}

static int run_unit(pipeline *p, size_t u, tzr_zctx **zp) {
    int s = (int)(u % (size_t)p->nslots);
    int rc = acquire_slot(p, u, s);
    if (rc) return rc;
    unit *un = &p->units[u];
    uint8_t *buf = un->direct ? NULL : unit_base(p, u);
    tzr_source *src = tzr_reader_source(p->r);
    if (un->direct) {
        piece *pc = &p->pieces[un->first];
        buf = p->sink->direct(p->sink, pc->tensor, pc->toff, pc->len);
        if (!buf) return fail(p, tzr_fail(TZR_EINVAL, "sink gave no destination"));
    }
    if (src->pack_reads && un->direct) prefault(buf, (size_t)un->len);
    if (src->pack_reads && un->zdirect) prefault(piece_bytes(p, &p->pieces[un->first]), (size_t)p->pieces[un->first].len);
    uint64_t *gap_at = NULL; /* scatter: where each piece's preceding gap sits in the slot */
    if (un->scatter) rc = scatter_read(p, un, buf, src, &gap_at);
    else rc = src->read_at(src, buf, (size_t)un->len, un->off);
    atomic_fetch_add(&p->reads, 1);
    atomic_fetch_add(&p->bytes_read, un->len);
    if (rc) {
        piece *pc = &p->pieces[un->first];
        char what[TZR_NAMEBUF + 256];
        return fail_at(p, tzr_fail_prefix(rc, "%s: reading [%llu, +%llu): ",
                                       tzr_reader_what(p->r, pc->tensor, what, sizeof what),
                                       (unsigned long long)un->off, (unsigned long long)un->len),
                       pc->tensor);
    }
    if (un->zpack) {
        rc = expand_pack(p, u, buf, zp);
        if (rc) return rc;
        buf = p->slots[s].buf; /* pieces' uoff is relative to the slot */
    } else if (un->comp) {
        size_t tensor = p->pieces[un->first].tensor;
        if (un->hdr_len) {
            rc = tzr_reader_install_header(p->r, tensor, buf, (size_t)un->hdr_len);
            if (rc && (rc = tensor_fail(p, rc, tensor))) return rc;
        }
        if (!is_bad(p, tensor)) rc = expand_unit(p, u, buf, zp);
        if (rc && (rc = tensor_fail(p, rc, tensor))) return rc;
        buf = p->slots[s].buf; /* pieces' uoff is relative to the slot */
    }
    uint64_t delivered = 0;
    for (size_t k = 0; k < un->count; k++) {
        if (stopped(p)) {
            free(gap_at);
            return TZR_ECANCELED;
        }
        piece *pc = &p->pieces[un->first + k];
        uint8_t *bytes = un->scatter ? piece_bytes(p, pc) : buf + pc->uoff;
        const tzr_tensor_info *info = tzr_reader_tensor(p->r, pc->tensor);
        if (!un->direct && !un->comp && pc->toff == 0 && info->header_offset >= un->off) {
            /* Scatter: the header is the tail of the gap before the data. */
            const uint8_t *hdr = un->scatter ? buf + gap_at[k] - (info->data_offset - info->header_offset)
                                             : buf + (info->header_offset - un->off);
            size_t hlen = (size_t)(info->data_offset - info->header_offset);
            rc = p->keep_headers ? tzr_reader_install_header(p->r, pc->tensor, hdr, hlen)
                                 : tzr_reader_check_header(p->r, pc->tensor, hdr, hlen);
            if (rc && (rc = tensor_fail(p, rc, pc->tensor))) {
                free(gap_at);
                return rc;
            }
        }
        if (!un->comp) rc = decrypt_piece(p, pc, bytes);
        if (rc && (rc = tensor_fail(p, rc, pc->tensor))) {
            free(gap_at);
            return rc;
        }
        if (p->verify) {
            rc = hash_in_order(p, pc);
        } else {
            rc = deliver(p, pc, bytes, s);
            delivered += piece_delivers(p, pc);
            if (!rc && k + 1 == un->count) progress(p, delivered);
            if (!rc) rc = unit_piece_done(p, pc->unit, s);
        }
        if (rc) {
            free(gap_at);
            return fail_at(p, rc, pc->tensor);
        }
    }
    free(gap_at);
    return 0;
}

static void *worker(void *arg) {
    pipeline *p = arg;
    tzr_zctx *z = NULL; /* per thread, made on first use */
    for (;;) {
        if (stopped(p)) break;
        size_t u = atomic_fetch_add(&p->next_unit, 1);
        if (u >= p->nunits) break;
        if (run_unit(p, u, &z)) break;
    }
    tzr_zctx_free(z);
    return NULL;
}

/* Phase 1: headers of the selected tensors, in batches of consecutive
 * tensors so each batch is a few large reads, and at least four batches
 * per thread: a header between two large tensors is a read (a request on
 * S3) of its own, and those must run side by side, not one after another. */
#define HEADER_BATCH 4096

static void *header_worker(void *arg) {
    pipeline *p = arg;
    for (;;) {
        if (atomic_load(&p->failed)) break;
        size_t i = atomic_fetch_add(&p->next_unit, p->header_batch);
        if (i >= p->n) break;
        int rc = tzr_reader_load_headers(p->r, i, i + p->header_batch, p->hdr_want);
        /* Going on past bad tensors: find this batch's, one by one. */
        for (size_t k = i; rc && p->bad && k < i + p->header_batch && k < p->n; k++) {
            rc = tzr_reader_load_headers(p->r, k, k + 1, p->hdr_want);
            if (rc) rc = tensor_fail(p, rc, k);
        }
        if (rc) {
            fail(p, rc);
            break;
        }
    }
    return NULL;
}

/* Runs fn on nthreads threads; `beside`, when given, runs meanwhile on the
 * calling thread. */
static int run_threads(pipeline *p, int nthreads, void *(*fn)(void *), void (*beside)(pipeline *)) {
    pthread_t th[MAX_THREADS];
    int started = 0;
    atomic_store(&p->next_unit, 0);
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, fn, p) != 0) break;
    if (beside) beside(p);
    if (started == 0) fn(p);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    return atomic_load(&p->failed) ? p->err_code : 0;
}

/* Open leaves the end-of-tensors marker to the first load where reads are
 * requests: read here, beside the data. */
static void check_end_marker(pipeline *p) {
    int rc = tzr_reader_check_end_marker(p->r);
    if (rc) fail(p, rc);
}

static int add_piece(pipeline *p, size_t *cap, size_t tensor, uint64_t toff, uint64_t len, uint64_t uoff) {
    if (p->npieces == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        piece *np = tzr_grow_big(p->pieces, *cap * sizeof *np, nc * sizeof *np);
        if (!np) return tzr_fail(TZR_ENOMEM, "out of memory");
        p->pieces = np;
        *cap = nc;
    }
    piece *pc = &p->pieces[p->npieces++];
    memset(pc, 0, sizeof *pc);
    pc->tensor = tensor;
    pc->toff = toff;
    pc->len = len;
    pc->uoff = uoff;
    pc->unit = p->nunits;
    return 0;
}

static int add_unit(pipeline *p, size_t *cap, uint64_t off, uint64_t len, size_t first) {
    if (p->nunits == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        unit *nu = tzr_grow_big(p->units, *cap * sizeof *nu, nc * sizeof *nu);
        if (!nu) return tzr_fail(TZR_ENOMEM, "out of memory");
        p->units = nu;
        *cap = nc;
    }
    unit *un = &p->units[p->nunits++];
    un->off = off;
    un->len = len;
    un->first = first;
    un->count = p->npieces - first;
    atomic_init(&un->left, un->count);
    un->direct = 0;
    un->comp = un->zdirect = un->scatter = 0;
    un->f0 = un->f1 = un->skip = un->first_chunk = un->hdr_len = 0;
    un->zpack = 0;
    return 0;
}

/* How many bytes of tensor i decrypt as one: 0 when it is not encrypted,
 * else its crypt chunk, or the whole box when it carries one MAC. */
static int crypt_granule(pipeline *p, size_t i, uint64_t *cs) {
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    *cs = 0;
    if (!t->encrypted) return 0;
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(p->r, i, &h);
    if (!rc) *cs = h->crypt.num_macs > 1 ? h->crypt.chunk_size : t->data_length;
    return rc;
}

/* Units for the selected bytes of tensor i (plaintext or encrypted, not
 * verified): each run widened to whole crypt chunks, runs less than
 * MAX_GAP apart read together, at most `step` bytes a unit. A piece covers
 * its unit; delivery keeps only the selection. */
static int emit_span(pipeline *p, size_t i, uint64_t lo, uint64_t hi, uint64_t step, size_t *pcap, size_t *ucap) {
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    int rc = 0;
    for (uint64_t off = lo; off < hi && !rc; off += step) {
        uint64_t len = hi - off < step ? hi - off : step;
        size_t first = p->npieces;
        rc = add_piece(p, pcap, i, off, len, 0);
        if (!rc) rc = add_unit(p, ucap, t->data_offset + off, len, first);
        p->ts[i].pieces_total++;
    }
    return rc;
}

static int plan_selected(pipeline *p, size_t i, size_t chunk, size_t *pcap, size_t *ucap) {
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    const tzr_byte_selection *sel = selection(p, i);
    uint64_t cs, step = chunk;
    int rc = crypt_granule(p, i, &cs);
    if (cs) step = cs >= chunk ? cs : chunk - chunk % cs;
    uint64_t lo = 0, hi = 0;
    int open = 0;
    for (uint64_t r = 0; r < sel_runs(sel) && !rc; r++) {
        uint64_t a = sel_run_at(sel, r), b = a + sel->run;
        if (cs) {
            a = a / cs * cs;
            b = b % cs ? b - b % cs + cs : b;
            if (b > t->data_length) b = t->data_length;
        }
        if (open && a < hi) a = hi; /* a crypt chunk already read */
        if (a >= b) continue;
        if (open && a - hi <= MAX_GAP && b - lo <= step) {
            hi = b;
            continue;
        }
        if (open) rc = emit_span(p, i, lo, hi, step, pcap, ucap);
        lo = a;
        hi = b;
        open = 1;
    }
    if (!rc && open) rc = emit_span(p, i, lo, hi, step, pcap, ucap);
    return rc;
}

/* Read only the selection: plaintext or encrypted tensors not verified. */
static int plans_selected(const pipeline *p, const tzr_tensor_info *t, size_t i) {
    return selection(p, i) && !p->verify && t->compression != TZR_COMPRESSION_ZSTD;
}

/* Units of whole frames for a zstd tensor (see the top comment). */
static int plan_compressed(pipeline *p, size_t i, size_t chunk, size_t ring, size_t *pcap, size_t *ucap) {
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    const tzr_comp_info *ci;
    int rc = tzr_reader_comp(p->r, i, &ci);
    if (rc) return rc;
    uint64_t cs;
    if ((rc = crypt_granule(p, i, &cs))) return rc;
    /* Without phase 1 (a frame directory gave the tables), the first unit
     * also reads the header, which is checked and kept before its frames
     * are expanded (headers too large to ride along were read in phase 1). */
    uint64_t hdr_len = tzr_reader_has_header(p->r, i) ? 0 : t->data_offset - t->header_offset;
    /* Stored bytes per unit: the chunk; with encryption at least 4 crypt
     * chunks, since the read is widened to whole chunks and a boundary
     * chunk is read by both neighbours (overhead <= cs / smax). Expanded
     * bytes per unit: twice that, or one frame. */
    uint64_t smax = chunk;
    if (cs) {
        uint64_t want = 4 * cs < ring / 8 ? 4 * cs : ring / 8; /* within budget where it can */
        if (want < cs) want = cs;
        if (want > smax) smax = want;
    }
    uint64_t umax = 2 * smax > ci->frame_size ? 2 * smax : ci->frame_size;
    uint64_t f = 0, soff = 0;
    /* The load ends with the last units' decompression, one thread per
     * unit: the last compressed tensor ends in single-frame units, so that
     * tail is one frame's work spread over the threads, not several. */
    /* (Not when encrypted: each unit is widened to whole crypt chunks, and
     * single frames would read and decrypt a shared chunk many times.) */
    int taper = i == p->last_comp && !cs;
    uint64_t single_from = !taper ? ci->nframes : ci->nframes > (uint64_t)p->taper ? ci->nframes - (uint64_t)p->taper : 0;
    while (f < ci->nframes && !rc) {
        uint64_t f1 = f + 1, s1 = soff + tzr_comp_frame(ci, f);
        while (f1 < ci->nframes && f1 < single_from && s1 + tzr_comp_frame(ci, f1) - soff <= smax &&
               tzr_zframes_len(ci, f, f1 + 1) <= umax)
            s1 += tzr_comp_frame(ci, f1++);
        uint64_t lo = soff, hi = s1;
        if (cs) {
            lo = soff / cs * cs;
            hi = (s1 + cs - 1) / cs * cs;
            if (hi > t->data_length) hi = t->data_length;
        }
        uint64_t ulen = tzr_zframes_len(ci, f, f1);
        uint64_t with_hdr = f == 0 ? hdr_len : 0;
        size_t first = p->npieces;
        rc = add_piece(p, pcap, i, f * ci->frame_size, ulen, 0);
        if (!rc) rc = add_unit(p, ucap, t->data_offset + lo - with_hdr, hi - lo + with_hdr, first);
        if (rc) break;
        unit *un = &p->units[p->nunits - 1];
        un->comp = 1;
        un->f0 = f;
        un->f1 = f1;
        un->skip = with_hdr + soff - lo;
        un->hdr_len = with_hdr;
        un->first_chunk = cs ? lo / cs : 0;
        p->ts[i].pieces_total++;
        if (ulen > p->zout_max) p->zout_max = (size_t)ulen;
        if (ci->planes > 1 && ci->frame_size > p->zscratch_max) p->zscratch_max = ci->frame_size;
        f = f1;
        soff = s1;
    }
    return rc;
}

/* Sources with costly reads (pack_reads): the data stream is cut into
 * reads of `chunk` bytes wherever the layout allows, so a read usually
 * holds the tail of one tensor, small tensors whole and the head of the
 * next. A unit that would hold one tensor's chunk alone starts at its
 * data (read in place, no copy) unless headers are wanted (verify). */
/* Close the open pack of small compressed tensors (see plan_packed). */
static int close_pack(pipeline *p, size_t *ucap, int *zopen, uint64_t zoff, uint64_t zend, size_t zfirst,
                      uint64_t zulen) {
    if (!*zopen) return 0;
    *zopen = 0;
    int rc = add_unit(p, ucap, zoff, zend - zoff, zfirst);
    if (rc) return rc;
    unit *un = &p->units[p->nunits - 1];
    un->comp = un->zpack = 1;
    if (zulen > p->zout_max) p->zout_max = (size_t)zulen;
    return 0;
}

static int plan_packed(pipeline *p, size_t chunk, size_t ring, size_t *pcap, size_t *ucap) {
    int open = 0, rc = 0;
    uint64_t uoff = 0, uend = 0;
    size_t ufirst = 0;
    /* Small compressed tensors whose records lie back to back share a read
     * (a pack), as small plaintext tensors do: a request each would cost a
     * round trip each (norm weights are a few KiB). Not when encrypted:
     * their crypt chunks are per tensor. */
    int zopen = 0;
    uint64_t zoff = 0, zend = 0, zulen = 0;
    size_t zfirst = 0;
    for (size_t i = 0; i < p->n && !rc; i++) {
        if (!p->want[i]) continue;
        const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
        if (t->data_length == 0) continue;
        if (t->compression == TZR_COMPRESSION_ZSTD) {
            if (open && (rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
            open = 0;
            uint64_t hlen = t->data_offset - t->header_offset;
            int small = !tzr_reader_encrypted(p->r) && t->data_length <= chunk / 8 && t->nbytes <= chunk / 4 &&
                        hlen <= MAX_INLINE_HEADER;
            if (small && zopen && (t->header_offset != zend || t->data_offset + t->data_length - zoff > chunk ||
                                   zulen + t->nbytes > 2 * (uint64_t)chunk))
                rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen);
            if (rc) break;
            if (!small) {
                if ((rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen))) break;
                rc = plan_compressed(p, i, chunk, ring, pcap, ucap);
                continue;
            }
            if (!zopen) {
                zopen = 1;
                zoff = t->header_offset;
                zfirst = p->npieces;
                zulen = 0;
            }
            const tzr_comp_info *ci;
            if ((rc = tzr_reader_comp(p->r, i, &ci))) break;
            if (ci->planes > 1 && ci->frame_size > p->zscratch_max) p->zscratch_max = ci->frame_size;
            rc = add_piece(p, pcap, i, 0, t->nbytes, zulen);
            p->ts[i].pieces_total = 1;
            zulen += t->nbytes;
            zend = t->data_offset + t->data_length;
            continue;
        }
        if ((rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen))) break;
        if (plans_selected(p, t, i)) {
            if (open && (rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
            open = 0;
            rc = plan_selected(p, i, chunk, pcap, ucap);
            continue;
        }
        uint64_t cs; /* pieces hold whole crypt chunks (or the whole box) */
        if ((rc = crypt_granule(p, i, &cs))) break;
        uint64_t toff = 0;
        while (toff < t->data_length && !rc) {
            uint64_t dstart = t->data_offset + toff, left = t->data_length - toff;
            /* A tensor's first piece joins the open unit across its header. */
            if (open && toff == 0 &&
                (t->header_offset < uend || t->header_offset - uend > MAX_GAP || dstart >= uoff + chunk)) {
                if ((rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
                open = 0;
            }
            if (!open) {
                uoff = toff == 0 && (left < chunk || p->verify) ? t->header_offset : dstart;
                if (dstart - uoff >= chunk) uoff = dstart; /* a header larger than a read */
                ufirst = p->npieces;
                open = 1;
            }
            uint64_t len = uoff + chunk - dstart;
            if (len > left) len = left;
            if (cs && len < left) len -= len % cs;
            if (len == 0 && p->npieces > ufirst) { /* no whole crypt chunk fits: next unit */
                if ((rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
                open = 0;
                continue;
            }
            if (len == 0) len = left < cs ? left : cs; /* one crypt chunk above `chunk` */
            rc = add_piece(p, pcap, i, toff, len, dstart - uoff);
            p->ts[i].pieces_total++;
            uend = dstart + len;
            toff += len;
            if (!rc && uend - uoff >= chunk) {
                rc = add_unit(p, ucap, uoff, uend - uoff, ufirst);
                open = 0;
            }
        }
    }
    if (!rc && open) rc = add_unit(p, ucap, uoff, uend - uoff, ufirst);
    if (!rc) rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen);
    return rc;
}

/* Cut the selected tensors' data into units and pieces. */
static int plan(pipeline *p, size_t chunk, size_t ring) {
    size_t pcap = 0, ucap = 0;
    int open_unit = 0;
    uint64_t uoff = 0, uend = 0;
    size_t ufirst = 0;
    int rc = 0;
    /* Room for the usual plan up front (one piece per tensor plus one per
     * chunk; more grows by doubling): growing from small copies the
     * arrays a dozen times on 100k-tensor files. */
    size_t est = 16 + p->nselected + (size_t)(p->stored_bytes / (chunk / 2));
    if (est > ((size_t)1 << 22)) est = (size_t)1 << 22; /* beyond that, doubling */
    if ((p->pieces = tzr_alloc_big(est * sizeof *p->pieces))) pcap = est;
    if ((p->units = tzr_alloc_big(est * sizeof *p->units))) ucap = est;
    if (tzr_reader_source(p->r)->pack_reads) {
        rc = plan_packed(p, chunk, ring, &pcap, &ucap);
        goto assign;
    }
    for (size_t i = 0; i < p->n && !rc; i++) {
        if (!p->want[i]) continue;
        const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
        if (t->data_length == 0) continue;
        if (t->compression == TZR_COMPRESSION_ZSTD || plans_selected(p, t, i)) {
            if (open_unit && (rc = add_unit(p, &ucap, uoff, uend - uoff, ufirst))) break;
            open_unit = 0;
            rc = t->compression == TZR_COMPRESSION_ZSTD ? plan_compressed(p, i, chunk, ring, &pcap, &ucap)
                                                        : plan_selected(p, i, chunk, &pcap, &ucap);
            continue;
        }
        uint64_t step = chunk, cs;
        /* Pieces must hold whole crypt chunks (or the whole box). */
        if ((rc = crypt_granule(p, i, &cs))) break;
        if (cs) step = cs >= chunk ? cs : chunk - chunk % cs;
        uint64_t dend = t->data_offset + t->data_length;
        if (t->data_length <= step && t->data_length <= chunk) {
            int small = t->data_length < COALESCE_MAX;
            if (small && open_unit && t->header_offset >= uend && t->header_offset - uend <= MAX_GAP &&
                dend - uoff <= chunk) {
                rc = add_piece(p, &pcap, i, 0, t->data_length, t->data_offset - uoff);
                uend = dend;
                p->ts[i].pieces_total = 1;
                continue;
            }
            if (open_unit && (rc = add_unit(p, &ucap, uoff, uend - uoff, ufirst))) break;
            open_unit = small;
            if (!small) {
                size_t first = p->npieces;
                rc = add_piece(p, &pcap, i, 0, t->data_length, 0);
                if (!rc) rc = add_unit(p, &ucap, t->data_offset, t->data_length, first);
                p->ts[i].pieces_total = 1;
                continue;
            }
            /* A coalesced unit starts at its first header: every tensor in
             * it then has its header in the same read. */
            uoff = t->header_offset;
            uend = dend;
            ufirst = p->npieces;
            rc = add_piece(p, &pcap, i, 0, t->data_length, t->data_offset - uoff);
            p->ts[i].pieces_total = 1;
            continue;
        }
        if (open_unit && (rc = add_unit(p, &ucap, uoff, uend - uoff, ufirst))) break;
        open_unit = 0;
        for (uint64_t off = 0; off < t->data_length && !rc; off += step) {
            uint64_t len = t->data_length - off < step ? t->data_length - off : step;
            size_t first = p->npieces;
            rc = add_piece(p, &pcap, i, off, len, 0);
            if (!rc) rc = add_unit(p, &ucap, t->data_offset + off, len, first);
            p->ts[i].pieces_total++;
        }
    }
    if (!rc && open_unit) rc = add_unit(p, &ucap, uoff, uend - uoff, ufirst);
assign:
    if (rc) return rc;
    for (size_t u = 0; u < p->nunits; u++) {
        unit *un = &p->units[u];
        for (size_t k = 0; k < un->count; k++) p->pieces[un->first + k].unit = u;
        if (un->len > p->slot_size) p->slot_size = (size_t)un->len;
    }
    return 0;
}

/* O_DIRECT: on when asked, or (auto) when the source supports it and the
 * data is not in the page cache, where bypassing it saves a copy and keeps
 * the cache for others; a warm cache is faster buffered. */
static int choose_direct(pipeline *p, tzr_source *src) {
    int want = p->opt->direct_io == TZR_DIRECT_ON;
    if (p->opt->direct_io == TZR_DIRECT_AUTO && src->set_direct && src->is_cached && p->nunits) {
        uint64_t lo = p->units[0].off, hi = p->units[p->nunits - 1].off + p->units[p->nunits - 1].len;
        want = !src->is_cached(src, lo, hi - lo);
    }
    if (!want) return 0;
    if (!src->set_direct || !src->direct_align) {
        if (p->opt->direct_io == TZR_DIRECT_ON)
            return tzr_fail(TZR_ENOTSUP, "%s: this source cannot read with O_DIRECT", src->name);
        return 0;
    }
    int rc = src->set_direct(src, 1);
    if (rc) return p->opt->direct_io == TZR_DIRECT_ON ? rc : 0;
    p->direct_align = src->direct_align;
    p->direct_was_set = 1;
    return 0;
}

/* Meta tensors: zeros; tensors without data: nothing to read. */
static int fill_empty(pipeline *p, size_t i, const tzr_tensor_info *t) {
    int rc = 0;
    if (p->verify) {
        tzr_hasher hs;
        rc = tzr_reader_hash_begin(p->r, i, &hs);
        if (!rc) rc = tzr_reader_hash_check(p->r, i, &hs);
        if (rc) return rc;
    }
    const tzr_byte_selection *sel = selection(p, i);
    uint64_t runs = sel ? sel_runs(sel) : 1;
    for (uint64_t r = 0; r < runs && !rc; r++) {
        uint64_t lo = sel ? sel_run_at(sel, r) : 0, hi = sel ? lo + sel->run : t->nbytes;
        for (uint64_t off = lo; off < hi && !rc; off += sizeof zeros) {
            size_t len = hi - off < sizeof zeros ? (size_t)(hi - off) : sizeof zeros;
            void *dst = p->sink->direct ? p->sink->direct(p->sink, i, off, len) : NULL;
            if (dst) memset(dst, 0, len);
            else rc = p->sink->submit(p->sink, -1, i, off, zeros, len);
            if (!rc) progress(p, len); /* zeros are delivered bytes too: progress reaches its total */
        }
    }
    if (!rc && p->sink->fence && t->nbytes) {
        uint64_t f;
        rc = p->sink->fence(p->sink, -1, &f);
        if (!rc) rc = p->sink->wait(p->sink, f);
    }
    return rc;
}

int tzr_load(tzr_reader *r, tzr_sink *sink, const tzr_load_options *opt_in, tzr_load_stats *stats) {
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    int orc = TZR_OPTS(tzr_load_options, o, opt_in, offsetof(tzr_load_options, on_tensor_error));
    if (orc) return orc;
    const tzr_load_options *opt = &o;
    if (!r || !sink || !sink->submit) return tzr_fail(TZR_EINVAL, "tzr_load: NULL reader or incomplete sink");
    if (sink->fence && !sink->wait) return tzr_fail(TZR_EINVAL, "tzr_load: sink has fence() without wait()");
    double t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    pipeline *p = calloc(1, sizeof *p);
    if (!p) return tzr_fail(TZR_ENOMEM, "out of memory");
    p->r = r;
    p->sink = sink;
    p->opt = opt;
    p->verify = opt->verify >= 0 ? opt->verify : tzr_reader_verifying(r);
    /* Only verification needs a header after its check (plaintext: no
     * crypt or frame tables); not keeping 100k parsed copies saves time. */
    p->keep_headers = p->verify || tzr_reader_encrypted(r) || tzr_reader_compressed(r);
    p->n = tzr_reader_count(r);
    pthread_mutex_init(&p->slot_lock, NULL);
    pthread_cond_init(&p->slot_cond, NULL);
    pthread_mutex_init(&p->err_lock, NULL);
    pthread_mutex_init(&p->key_lock, NULL);
    pthread_mutex_init(&p->report_lock, NULL);
    pthread_mutex_init(&p->progress_lock, NULL);
    for (int k = 0; k < TENSOR_LOCKS; k++) pthread_mutex_init(&p->tensor_locks[k], NULL);
    tzr_source *src = tzr_reader_source(r);
    size_t chunk = opt->chunk_bytes ? opt->chunk_bytes : src->preferred_chunk ? src->preferred_chunk : DEFAULT_CHUNK;
    size_t ring = opt->ring_bytes ? opt->ring_bytes : DEFAULT_RING;
    if (chunk < 4096) chunk = 4096;
    if (ring < 2 * chunk) ring = 2 * chunk;
    int nthreads = opt->threads > 0 ? opt->threads : src->preferred_inflight;
    if (nthreads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = cpus < 2 ? 2 : cpus > 16 ? 16 : (int)cpus;
    }
    if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
    int rc = 0;
    p->ts = tzr_calloc_big(p->n ? p->n : 1, sizeof *p->ts);
    p->want = tzr_calloc_big(p->n ? p->n : 1, 1);
    if (p->verify) p->th = tzr_calloc_big(p->n ? p->n : 1, sizeof *p->th);
    int go_on = opt->struct_size >= offsetof(tzr_load_options, on_tensor_error_ctx) + sizeof(void *) &&
                opt->on_tensor_error;
    if (go_on) p->bad = tzr_calloc_big(p->n ? p->n : 1, sizeof *p->bad);
    if (!p->ts || !p->want || (p->verify && !p->th) || (go_on && !p->bad)) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    int selecting = opt->struct_size >= offsetof(tzr_load_options, select_ctx) + sizeof(void *) && opt->select;
    if (!rc && selecting) {
        p->sel = tzr_alloc_big((p->n ? p->n : 1) * sizeof *p->sel);
        p->has_sel = tzr_calloc_big(p->n ? p->n : 1, 1);
        if (!p->sel || !p->has_sel) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    }
    for (size_t i = 0; !rc && i < p->n; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        p->want[i] = !opt->filter || opt->filter(opt->filter_ctx, i, t);
        if (p->want[i] && selecting && opt->select(opt->select_ctx, i, t, &p->sel[i])) {
            char what[TZR_NAMEBUF + 256];
            rc = sel_check(&p->sel[i], t, tzr_reader_what(r, i, what, sizeof what));
            p->has_sel[i] = 1;
        }
        if (p->want[i]) {
            const tzr_byte_selection *sel = selection(p, i);
            p->total_bytes += sel ? sel->run * sel_runs(sel) : t->nbytes;
            p->stored_bytes += t->data_length;
            p->nselected++;
        }
    }
    p->nrequested = p->nselected;
    /* Phase 1: every selected header (parallel for remote sources). */
    /* Plaintext files need no header to plan: each unit read carries its
     * tensors' headers. Encrypted ones need the crypt chunk sizes first. */
    /* Compressed ones need their frame tables. */
    p->header_batch = p->n / (4 * (size_t)nthreads);
    if (p->header_batch < 1) p->header_batch = 1;
    if (p->header_batch > HEADER_BATCH) p->header_batch = HEADER_BATCH;
    /* A compressed file with a frame directory has its tables already:
     * phase 1 then reads only the headers no unit will carry (tensors
     * stored raw or without data, and headers too large to add to a read),
     * so every header of a compressed file is still checked. A verifying
     * load also needs the hashes of tensors without data, which no unit
     * carries: read here, side by side, rather than one after another
     * (a request each on S3) while destinations are set up. */
    p->headers_read = tzr_reader_encrypted(r) || (tzr_reader_compressed(r) && !tzr_reader_has_dir(r));
    p->hdr_want = p->want;
    int some_headers = 0;
    if (!rc && !p->headers_read && (tzr_reader_compressed(r) || p->verify || p->has_sel)) {
        p->hdr_want = tzr_calloc_big(p->n ? p->n : 1, 1);
        if (!p->hdr_want) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        for (size_t i = 0; !rc && i < p->n; i++) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            int no_unit = t->data_length == 0 ||
                          (tzr_reader_compressed(r) && (t->compression != TZR_COMPRESSION_ZSTD ||
                                                        t->data_offset - t->header_offset > MAX_INLINE_HEADER));
            /* a selection's reads need not start at the header */
            no_unit |= plans_selected(p, t, i);
            p->hdr_want[i] = p->want[i] && no_unit;
            some_headers |= p->hdr_want[i];
        }
    }
    if (!rc && (p->headers_read || some_headers)) rc = run_threads(p, nthreads, header_worker, NULL);
    /* Tensors whose header failed are reported, not planned. */
    for (size_t i = 0; !rc && p->bad && i < p->n; i++)
        if (p->want[i] && is_bad(p, i)) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            p->want[i] = 0;
            if (p->hdr_want != p->want) p->hdr_want[i] = 0;
            const tzr_byte_selection *sel = selection(p, i);
            p->total_bytes -= sel ? sel->run * sel_runs(sel) : t->nbytes;
            p->stored_bytes -= t->data_length;
            p->nselected--;
        }
    p->last_comp = (size_t)-1;
    for (size_t i = p->n; i-- > 0 && !rc;)
        if (p->want[i] && tzr_reader_tensor(r, i)->compression == TZR_COMPRESSION_ZSTD) {
            p->last_comp = i;
            break;
        }
    p->taper = nthreads;
    if (!rc) rc = plan(p, chunk, ring);
    if (!rc) {
        if (p->slot_size < chunk) p->slot_size = chunk;
        rc = choose_direct(p, src);
        p->slot_size += p->direct_align;
        /* Compressed units: expanded frames and plane scratch follow the
         * read area in the same slot, inside the same budget. */
        if (p->zout_max) {
            p->zout_at = p->slot_size;
            p->slot_size += p->zout_max + p->zscratch_max;
        }
        /* Encrypted chunks (2 MiB from tensorizer) cannot be split: a
         * smaller budget grows to two of them rather than failing. */
        if (p->slot_size > ring / 2 && p->slot_size <= MAX_FORCED_SLOT) ring = 2 * p->slot_size;
        if (p->slot_size > ring / 2)
            rc = tzr_fail(TZR_ELIMIT, "%s: a tensor needs a %zu-byte read, above half the %zu-byte ring budget",
                          src->name, p->slot_size, ring);
        p->nslots = (int)(ring / p->slot_size);
        /* A synchronous sink frees a slot once its unit is processed: one
         * per thread and two spare suffice, and every further slot would
         * only cost first-touch page faults. */
        int most = sink->fence ? SLOTS_PER_THREAD * nthreads : nthreads + 2;
        if (p->nslots > most) p->nslots = most;
        if (p->nslots < 2) p->nslots = 2;
        if ((size_t)p->nslots > p->nunits) p->nslots = p->nunits ? (int)p->nunits : 1;
    }
    if (!rc) {
        p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
        if (!p->slots) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        for (int s = 0; !rc && s < p->nslots; s++) p->slots[s].unit = -1;
    }
    /* Destinations, then the units that can be read in place. */
    if (!rc && sink->reserve) {
        rc = sink->reserve(sink, p->nselected, p->total_bytes);
        if (rc) fail(p, rc);
    }
    for (size_t i = 0; !rc && i < p->n; i++) {
        if (!p->want[i]) continue;
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (sink->begin_tensor) rc = sink->begin_tensor(sink, i, t);
        if (!rc && t->data_length == 0 && (rc = fill_empty(p, i, t))) rc = tensor_fail(p, rc, i);
        if (rc) fail_at(p, rc, i);
    }
    for (size_t u = 0; !rc && u < p->nunits; u++) {
        unit *un = &p->units[u];
        piece *pc = &p->pieces[un->first];
        if (un->comp) {
            /* Expanded pieces follow one another in the output area (a
             * pack's pieces carry their offset in it from planning). */
            un->zdirect = sink->direct != NULL;
            for (size_t k = 0; k < un->count; k++) {
                piece *q = &p->pieces[un->first + k];
                q->uoff = p->zout_at + (un->zpack ? q->uoff : 0);
                if (un->zdirect)
                    un->zdirect = sel_holds(p, q->tensor, q->toff, q->len) &&
                                  sink->direct(sink, q->tensor, q->toff, q->len) != NULL;
            }
            continue;
        }
        un->direct = un->count == 1 && pc->uoff == 0 && un->len == pc->len && sink->direct &&
                     sel_holds(p, pc->tensor, pc->toff, pc->len) &&
                     sink->direct(sink, pc->tensor, pc->toff, pc->len) != NULL;
        /* Many small plaintext tensors: scatter them in place with one
         * vectored read instead of staging plus a copy each. */
        un->scatter = !un->direct && un->count > 1 && src->readv_at && sink->direct && !tzr_reader_encrypted(r) &&
                      !tzr_reader_compressed(r) && !p->direct_align;
        for (size_t k = 0; un->scatter && k < un->count; k++) {
            piece *q = &p->pieces[un->first + k];
            un->scatter = sel_holds(p, q->tensor, q->toff, q->len) &&
                          sink->direct(sink, q->tensor, q->toff, q->len) != NULL;
        }
    }
    if (rc) {
        fail(p, rc);
    } else {
        pthread_mutex_lock(&p->report_lock);
        report_ready(p); /* tensors with no data */
        pthread_mutex_unlock(&p->report_lock);
        if (!atomic_load(&p->failed)) run_threads(p, nthreads, worker, check_end_marker);
    }
    /* Drain: wait every outstanding fence (also after a failure, so no
     * copy still reads a slot we free), retire in unit order. */
    for (int s = 0; p->slots && s < p->nslots; s++) {
        slot *sl = &p->slots[s];
        /* A unit stopped part way (a failure elsewhere) has submitted
         * pieces but no fence yet: fence the slot now, the workers are
         * done, so its copies end before the slot is freed. */
        if (!sl->has_fence && sink->fence && sl->buf && sl->unit >= 0 && !sl->processed)
            sl->has_fence = sink->fence(sink, s, &sl->fence) == 0;
        if (sl->has_fence) {
            int wrc = sink->wait(sink, sl->fence);
            sl->has_fence = 0;
            if (wrc && !atomic_load(&p->failed)) fail(p, wrc);
        }
    }
    if (!atomic_load(&p->failed)) {
        size_t lo = p->nunits > (size_t)p->nslots ? p->nunits - (size_t)p->nslots : 0;
        for (size_t u = lo; u < p->nunits; u++) {
            slot *sl = &p->slots[u % (size_t)p->nslots];
            if (sl->unit == (long)u && sl->processed) retire_unit(p, u);
        }
        if (!atomic_load(&p->failed) && p->next_report < p->n)
            fail(p, tzr_fail(TZR_EIO, "internal error: %zu of %zu tensors not completed", p->n - p->next_report, p->n));
    }
    rc = atomic_load(&p->failed) ? p->err_code : 0;
    if (!rc && p->nbads) { /* everything else loaded: the first bad tensor is the result */
        bad_tensor *first = &p->bads[0];
        for (size_t k = 1; k < p->nbads; k++)
            if (p->bads[k].tensor < first->tensor) first = &p->bads[k];
        rc = tzr_fail(first->code, "%zu of %zu tensors failed their checks; the first: %s", p->nbads, p->nrequested,
                      first->msg);
        tzr_error_about(tzr_reader_tensor(r, first->tensor)->name);
        tzr_error_keep(&p->err);
        p->err_code = rc;
        p->err_tensor = first->tensor;
    }
    for (size_t k = 0; k < p->nbads; k++) free(p->bads[k].msg);
    free(p->bads);
    free(p->bad);
    free(p->sel);
    free(p->has_sel);
    if (p->direct_was_set) src->set_direct(src, 0);
    for (int s = 0; p->slots && s < p->nslots; s++) {
        if (!p->slots[s].buf) continue;
        if (sink->free_staging) sink->free_staging(sink, p->slots[s].buf, p->slot_size);
        else free(p->slots[s].buf);
    }
    for (size_t i = 0; p->th && i < p->n; i++) {
        if (p->th[i].hs_live) tzr_hasher_free(&p->th[i].hs);
    }
    if (stats) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        memset(stats, 0, sizeof *stats);
        stats->tensors = p->nselected;
        stats->bytes = atomic_load(&p->bytes_done);
        stats->bytes_read = atomic_load(&p->bytes_read);
        stats->reads = atomic_load(&p->reads);
        stats->staging_bytes = p->staging_bytes;
        stats->seconds = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - t0;
        stats->error_tensor = rc ? p->err_tensor : (size_t)-1;
    }
    if (rc) {
        p->err.code = p->err_code;
        tzr_error_put(&p->err);
    }
    free(p->ts);
    free(p->th);
    if (p->hdr_want != p->want) free(p->hdr_want);
    free(p->want);
    free(p->pieces);
    free(p->units);
    free(p->slots);
    pthread_mutex_destroy(&p->slot_lock);
    pthread_cond_destroy(&p->slot_cond);
    pthread_mutex_destroy(&p->err_lock);
    pthread_mutex_destroy(&p->key_lock);
    pthread_mutex_destroy(&p->report_lock);
    pthread_mutex_destroy(&p->progress_lock);
    for (int k = 0; k < TENSOR_LOCKS; k++) pthread_mutex_destroy(&p->tensor_locks[k]);
    free(p);
    return rc;
}

void tzr_sink_free(tzr_sink *s) {
    TZR_KEEP_ERROR;
    if (s && s->destroy) s->destroy(s);
}
