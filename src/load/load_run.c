/* The loader's running part (see pipeline.h): workers run units (acquire
 * the slot, read, decrypt, expand, hash in order, deliver, fence), the
 * phase-1 header workers, and the bookkeeping of errors, bad tensors and
 * completions. */
#include "thread.h"
#include "mem.h"
#include "pipeline.h"

#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static const uint8_t zeros[1 << 16];

/* Record the first error (with this thread's message) and stop everyone;
 * `tensor` is the tensor it concerns, or (size_t)-1. */
int load_fail_at(pipeline *p, int rc, size_t tensor) {
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

int load_fail(pipeline *p, int rc) { return load_fail_at(p, rc, (size_t)-1); }

int load_is_bad(pipeline *p, size_t tensor) {
    return p->bad && __atomic_load_n(&p->bad[tensor], __ATOMIC_ACQUIRE) != 0;
}

/* A failure of one tensor's data or header (this thread's message). A
 * load with on_tensor_error marks the tensor bad and goes on (returns 0);
 * any other failure, or any failure of a plain load, stops everything. */
int load_tensor_fail(pipeline *p, int rc, size_t tensor) {
    int data_error = rc == TZR_EHASH || rc == TZR_ECRYPT || rc == TZR_EFORMAT;
    if (!p->bad || !data_error || tensor >= p->n || atomic_load(&p->failed)) return load_fail_at(p, rc, tensor);
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
    return ok ? 0 : load_fail_at(p, rc, tensor); /* no memory to remember it: stop with it */
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
            load_fail(p, e);
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

int load_stopped(pipeline *p) {
    if (atomic_load(&p->failed)) return 1;
    if (p->opt->cancel && __atomic_load_n(p->opt->cancel, __ATOMIC_RELAXED)) {
        load_fail(p, tzr_fail(TZR_ECANCELED, "load canceled"));
        return 1;
    }
    return 0;
}

/* Report completed tensors in index order. Caller holds report_lock. */
int load_report_ready(pipeline *p) {
    /* Overlapped planning: only tensors planned whole, once bound. */
    size_t upto = !p->overlap                                               ? p->n
                  : atomic_load_explicit(&p->bound, memory_order_acquire) ? atomic_load_explicit(&p->planned_to, memory_order_acquire)
                                                                          : 0;
    while (p->next_report < upto) {
        size_t i = p->next_report;
        tstate *t = &p->ts[i];
        if (p->want[i] && t->pieces_retired < t->pieces_total) break;
        p->next_report++;
        if (load_stopped(p)) continue;
        if (load_is_bad(p, i)) {
            int rc = report_bad(p, i);
            if (rc) return load_fail_at(p, rc, i);
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
        if (rc) return load_fail_at(p, rc, i);
    }
    return 0;
}

/* A unit's fence has passed: its pieces count towards their tensors. */
int load_retire_unit(pipeline *p, size_t u) {
    pthread_mutex_lock(&p->report_lock);
    unit *un = &p->units[u];
    for (size_t k = 0; k < un->count; k++) p->ts[p->pieces[un->first + k].tensor].pieces_retired++;
    int rc = load_report_ready(p);
    pthread_mutex_unlock(&p->report_lock);
    return rc;
}

static void progress(pipeline *p, uint64_t add) {
    if (!p->opt->progress) {
        atomic_fetch_add(&p->bytes_done, add);
        return;
    }
    /* Counted under the lock: callers see the count only go up. */
    pthread_mutex_lock(&p->progress_lock);
    uint64_t done = atomic_fetch_add(&p->bytes_done, add) + add;
    p->opt->progress(p->opt->progress_ctx, done, p->total_bytes);
    pthread_mutex_unlock(&p->progress_lock);
}

/* Deliver one piece (decrypted, in unit memory or already in place). The
 * caller counts its bytes as done: once per unit where it can, since a
 * shared counter bumped per piece bounces between cores on many-tensor
 * files. */
static int deliver(pipeline *p, piece *pc, const uint8_t *bytes, int s) {
    unit *un = &p->units[pc->unit];
    if (unit_in_place(un) || load_is_bad(p, pc->tensor)) return 0;
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

/* n more of unit u's pieces are submitted; the last one fences its slot. */
static int unit_pieces_done(pipeline *p, size_t u, int s, size_t n) {
    if (atomic_fetch_sub(&p->units[u].left, n) != n) return 0;
    int rc = 0;
    pthread_mutex_lock(&p->slot_lock);
    slot *sl = &p->slots[s];
    if (p->sink->fence && !unit_in_place(&p->units[u])) {
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
    if (unit_in_place(un)) return p->sink->direct(p->sink, pc->tensor, pc->toff, pc->len);
    return (unit_compressed(un) ? p->slots[pc->unit % (size_t)p->nslots].buf : piece_base(p, pc)) + pc->uoff;
}

static pthread_mutex_t *tensor_lock(pipeline *p, size_t tensor) { return &p->tensor_locks[tensor % TENSOR_LOCKS]; }

/* The piece's CRC32 is computed apart (run_unit) and only combined here. */
static int early_crc(const pipeline *p, const piece *pc) { return p->piece_crc && pc->len >= EARLY_CRC_MIN; }

/* A tensor of one piece, its header read with it (hdr, of hlen bytes):
 * hashed against that header where it lies, nothing kept in the reader
 * (see header_kept). */
static int hashed_alone(const pipeline *p, const piece *pc, const uint8_t *hdr) {
    return hdr && !p->keep_headers && p->ts[pc->tensor].pieces_total == 1;
}

/* Whether a header read with the data goes into the reader's cache:
 * always where decryption or expansion needs it later; for a verify, only
 * for a tensor of several pieces, whose hash is begun by whichever piece
 * comes first. Copying 100k small headers into the cache under its lock
 * was half of a verified load's time. */
static int header_kept(const pipeline *p, const piece *pc) {
    return p->keep_headers || (p->verify && p->ts[pc->tensor].pieces_total != 1);
}

/* Hash pieces of one tensor strictly in order, delivering each after its
 * hash. Called with the piece that may be next; parks it otherwise. Adds
 * the bytes it delivers to *delivered (the caller reports progress once a
 * unit). A tensor of one piece has nothing to order: no lock (on
 * many-tensor files the locks, shared by index, were contended); when
 * hashed_alone, hdr is its header. */
static int hash_in_order(pipeline *p, piece *pc, const uint8_t *hdr, size_t hlen, uint64_t *delivered) {
    thash *t = &p->th[pc->tensor];
    pthread_mutex_t *lock = tensor_lock(p, pc->tensor);
    int alone = p->ts[pc->tensor].pieces_total == 1;
    tzr_tensor_header own; /* hdr parsed, when hashed_alone */
    const tzr_tensor_header *with = hashed_alone(p, pc, hdr) ? &own : NULL;
    if (!alone) {
        pthread_mutex_lock(lock);
        if (t->hashing || t->hashed_upto != pc->toff) {
            pc->next_parked = t->parked;
            t->parked = pc;
            pthread_mutex_unlock(lock);
            return 0;
        }
        t->hashing = 1;
        pthread_mutex_unlock(lock);
    }
    int rc = 0;
    while (pc) {
        int s = (int)(pc->unit % (size_t)p->nslots);
        const uint8_t *bytes = piece_bytes(p, pc);
        /* A bad tensor's remaining pieces are only counted. */
        int skip = load_is_bad(p, pc->tensor);
        if (!rc && !skip && pc->toff == 0) {
            rc = with ? tzr_reader_hash_begin_bytes(p->r, pc->tensor, hdr, hlen, p->verify_sha, &t->hs, &own)
                      : tzr_reader_hash_begin(p->r, pc->tensor, p->verify_sha, &t->hs); /* reads the header if needed */
            t->hs_live = rc == 0;
            if (rc) rc = load_tensor_fail(p, rc, pc->tensor), skip = 1;
        }
        if (!rc && !skip) {
            /* A tensor that still wants SHA-256 (no CRC32 stored) hashes the bytes. */
            if (early_crc(p, pc) && !t->hs.want_sha) tzr_hasher_add_crc(&t->hs, p->piece_crc[pc - p->pieces], pc->len);
            else tzr_hasher_update(&t->hs, bytes, (size_t)pc->len);
        }
        const tzr_tensor_info *info = tzr_reader_tensor(p->r, pc->tensor);
        if (!rc && !skip && pc->toff + pc->len == info->uncompressed_length) {
            t->hs_live = 0;
            rc = with ? tzr_reader_hash_check_with(p->r, pc->tensor, with, &t->hs)
                      : tzr_reader_hash_check(p->r, pc->tensor, &t->hs);
            if (rc) rc = load_tensor_fail(p, rc, pc->tensor);
        }
        if (!rc) rc = deliver(p, pc, bytes, s);
        if (!rc) *delivered += piece_delivers(p, pc);
        if (!rc) rc = unit_pieces_done(p, pc->unit, s, 1);
        if (rc) {
            load_fail_at(p, rc, pc->tensor);
            /* Keep draining so parked pieces do not hold slots forever. */
        }
        if (alone) break;
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
    if (!tzr_reader_encrypted(p->r) || load_is_bad(p, pc->tensor)) return 0;
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(p->r, pc->tensor, &h);
    if (rc) return rc;
    if (!h->crypt.encrypted) return 0;
    uint8_t key[32];
    rc = tzr_reader_tensor_key(p->r, pc->tensor, key);
    if (rc) return load_fail_at(p, rc, pc->tensor); /* no key: no tensor's fault */
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
        if (!rc) rc = load_retire_unit(p, (size_t)prev);
        if (rc) return load_fail(p, rc);
    }
    if (!sl->buf && p->units[u].kind != UNIT_DIRECT) {
        sl->buf = p->sink->alloc_staging ? p->sink->alloc_staging(p->sink, p->slot_size) : tzr_alloc_big(p->slot_size);
        if (!sl->buf) return load_fail(p, tzr_fail(TZR_ENOMEM, "cannot allocate a %zu-byte staging slot", p->slot_size));
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
    if (!*zp && !(*zp = tzr_zctx_new())) return tzr_fail(TZR_ENOMEM, "out of memory for a decompression context");
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
        if (rc) return load_fail_at(p, rc, pc->tensor); /* no key: no tensor's fault */
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
        if (rc) rc = load_tensor_fail(p, rc, pc->tensor);
    }
    return rc;
}

/* One vectored read for a coalesced unit: each piece's data straight into
 * the sink's memory, the bytes between (headers) packed into the slot.
 * gap_at[k] is where the gap before piece k ends in the slot. SCATTER_NO
 * (nothing read) when a piece has no place in the sink's memory: the unit
 * is then staged. */
#define SCATTER_NO 1
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
        void *dst = sel_holds(p, pc->tensor, pc->toff, pc->len) ? p->sink->direct(p->sink, pc->tensor, pc->toff, pc->len)
                                                                 : NULL;
        if (!dst) {
            free(iov);
            free(gap_at);
            return SCATTER_NO;
        }
        iov[n++] = (tzr_iovec){dst, (size_t)pc->len};
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

/* Where piece k of a plain unit (read at `buf`) has its tensor's header,
 * or NULL when the read does not carry it. Scatter: the header is the
 * tail of the gap before the data. */
#define HEADER_PREFETCH 4
static const uint8_t *unit_header(pipeline *p, const unit *un, const uint8_t *buf, const uint64_t *gap_at, size_t k) {
    const piece *pc = &p->pieces[un->first + k];
    const tzr_tensor_info *info = tzr_reader_tensor(p->r, pc->tensor);
    if (un->kind == UNIT_DIRECT || unit_compressed(un) || pc->toff != 0 || info->header_offset < un->off) return NULL;
    return un->kind == UNIT_SCATTER ? buf + gap_at[k] - (info->data_offset - info->header_offset)
                                    : buf + (info->header_offset - un->off);
}

static int run_unit(pipeline *p, size_t u, tzr_zctx **zp) {
    int s = (int)(u % (size_t)p->nslots);
    int rc = acquire_slot(p, u, s);
    if (rc) return rc;
    unit *un = &p->units[u];
    uint8_t *buf = un->kind == UNIT_DIRECT ? NULL : unit_base(p, u);
    tzr_source *src = tzr_reader_source(p->r);
    if (un->kind == UNIT_DIRECT) {
        piece *pc = &p->pieces[un->first];
        buf = p->sink->direct(p->sink, pc->tensor, pc->toff, pc->len);
        if (!buf) return load_fail(p, tzr_fail(TZR_EINVAL, "sink gave no destination"));
    }
    if (src->pack_reads && un->kind == UNIT_DIRECT) prefault(buf, (size_t)un->len);
    if (src->pack_reads && un->expand_in_place) prefault(piece_bytes(p, &p->pieces[un->first]), (size_t)p->pieces[un->first].len);
    uint64_t *gap_at = NULL; /* scatter: where each piece's preceding gap sits in the slot */
    if (un->kind == UNIT_SCATTER && (rc = scatter_read(p, un, buf, src, &gap_at)) == SCATTER_NO)
        un->kind = UNIT_STAGED; /* its pieces are submitted from the slot */
    if (un->kind != UNIT_SCATTER) rc = src->read_at(src, buf, (size_t)un->len, un->off);
    atomic_fetch_add(&p->reads, 1);
    atomic_fetch_add(&p->bytes_read, un->len);
    if (rc) {
        piece *pc = &p->pieces[un->first];
        char what[TZR_NAMEBUF + 256];
        return load_fail_at(p, tzr_fail_prefix(rc, "%s: reading [%llu, +%llu): ",
                                       tzr_reader_what(p->r, pc->tensor, what, sizeof what),
                                       (unsigned long long)un->off, (unsigned long long)un->len),
                       pc->tensor);
    }
    if (un->kind == UNIT_PACK) {
        rc = expand_pack(p, u, buf, zp);
        if (rc) return rc;
        buf = p->slots[s].buf; /* pieces' uoff is relative to the slot */
    } else if (unit_compressed(un)) {
        size_t tensor = p->pieces[un->first].tensor;
        if (un->hdr_len) {
            rc = tzr_reader_install_header(p->r, tensor, buf, (size_t)un->hdr_len);
            if (rc && (rc = load_tensor_fail(p, rc, tensor))) return rc;
        }
        if (!load_is_bad(p, tensor)) rc = expand_unit(p, u, buf, zp);
        if (rc && (rc = load_tensor_fail(p, rc, tensor))) return rc;
        buf = p->slots[s].buf; /* pieces' uoff is relative to the slot */
    }
    uint64_t delivered = 0;
    for (size_t k = 0; k < un->count; k++) {
        if (load_stopped(p)) {
            free(gap_at);
            return TZR_ECANCELED;
        }
        piece *pc = &p->pieces[un->first + k];
        /* Scattered pieces are in place already: neither decryption
         * (plaintext only) nor delivery looks at their bytes, and the
         * ordered hash finds them itself. */
        uint8_t *bytes = un->kind == UNIT_SCATTER ? NULL : buf + pc->uoff;
        const tzr_tensor_info *info = tzr_reader_tensor(p->r, pc->tensor);
        size_t hlen = (size_t)(info->data_offset - info->header_offset);
        const uint8_t *hdr = unit_header(p, un, buf, gap_at, k);
        if (k + HEADER_PREFETCH < un->count) { /* overlap the next headers' cache misses with this one's check */
            const uint8_t *next = unit_header(p, un, buf, gap_at, k + HEADER_PREFETCH);
            if (next) __builtin_prefetch(next), __builtin_prefetch(next + 64);
        }
        if (k + 2 * HEADER_PREFETCH < un->count) /* and the offsets that find them */
            __builtin_prefetch(&tzr_reader_tensor(p->r, p->pieces[un->first + k + 2 * HEADER_PREFETCH].tensor)->header_offset);
        /* (A verify's own parse checks the header of a tensor hashed alone.) */
        if (hdr && !(p->verify && hashed_alone(p, pc, hdr))) {
            rc = header_kept(p, pc) ? tzr_reader_install_header(p->r, pc->tensor, hdr, hlen)
                                    : tzr_reader_check_header(p->r, pc->tensor, hdr, hlen);
            if (rc && (rc = load_tensor_fail(p, rc, pc->tensor))) {
                free(gap_at);
                return rc;
            }
        }
        if (!unit_compressed(un)) rc = decrypt_piece(p, pc, bytes);
        if (rc && (rc = load_tensor_fail(p, rc, pc->tensor))) {
            free(gap_at);
            return rc;
        }
        if (p->verify) {
            if (early_crc(p, pc) && !load_is_bad(p, pc->tensor))
                p->piece_crc[pc - p->pieces] = tzr_crc32(0, piece_bytes(p, pc), (size_t)pc->len);
            rc = hash_in_order(p, pc, hdr, hlen, &delivered);
            if (!rc && k + 1 == un->count) progress(p, delivered);
        } else {
            rc = deliver(p, pc, bytes, s);
            delivered += piece_delivers(p, pc);
            if (!rc && k + 1 == un->count) progress(p, delivered);
            /* This thread delivers every piece of the unit here: they count
             * as done at once, after the last (an atomic each, on a line
             * the other thread's units share, cost as much as the rest of
             * a small tensor's bookkeeping). */
            if (!rc && k + 1 == un->count) rc = unit_pieces_done(p, pc->unit, s, un->count);
        }
        if (rc) {
            free(gap_at);
            return load_fail_at(p, rc, pc->tensor);
        }
    }
    free(gap_at);
    return 0;
}

/* Overlapped planning: wait (no spin) until unit u is planned and the
 * tensors bound; 0 when it never will be (planning ended before it, or
 * the load failed). */
static int unit_ready(pipeline *p, size_t u) {
    if (atomic_load_explicit(&p->bound, memory_order_acquire) &&
        u < atomic_load_explicit(&p->units_ready, memory_order_acquire))
        return 1;
    pthread_mutex_lock(&p->slot_lock);
    while (!atomic_load(&p->failed) &&
           !(atomic_load(&p->bound) && (u < atomic_load(&p->units_ready) || atomic_load(&p->plan_done))))
        pthread_cond_wait(&p->slot_cond, &p->slot_lock);
    int ok = !atomic_load(&p->failed) && u < atomic_load(&p->units_ready);
    pthread_mutex_unlock(&p->slot_lock);
    return ok;
}

void *load_worker(void *arg) {
    pipeline *p = arg;
    tzr_zctx *z = NULL; /* per thread, made on first use */
    for (;;) {
        if (load_stopped(p)) break;
        size_t u = atomic_fetch_add(&p->next_unit, 1);
        if (p->overlap ? !unit_ready(p, u) : u >= p->nunits) break;
        if (p->overlap) load_bind_unit(p, u); /* planned without asking the sink */
        if (run_unit(p, u, &z)) break;
    }
    tzr_zctx_free(z);
    return NULL;
}

/* Phase 1: headers of the selected tensors, in batches of consecutive
 * tensors so each batch is a few large reads, and at least four batches
 * per thread: a header between two large tensors is a read (a request on
 * S3) of its own, and those must run side by side, not one after another. */

void *load_header_worker(void *arg) {
    pipeline *p = arg;
    for (;;) {
        if (atomic_load(&p->failed)) break;
        size_t i = atomic_fetch_add(&p->next_unit, p->header_batch);
        if (i >= p->n) break;
        int rc = tzr_reader_load_headers(p->r, i, i + p->header_batch, p->hdr_want);
        /* Going on past bad tensors: find this batch's, one by one. */
        for (size_t k = i; rc && p->bad && k < i + p->header_batch && k < p->n; k++) {
            rc = tzr_reader_load_headers(p->r, k, k + 1, p->hdr_want);
            if (rc) rc = load_tensor_fail(p, rc, k);
        }
        if (rc) {
            load_fail(p, rc);
            break;
        }
    }
    return NULL;
}

/* Runs fn on nthreads threads; `beside`, when given, runs meanwhile on the
 * calling thread. */
int load_run_threads(pipeline *p, int nthreads, void *(*fn)(void *), void (*beside)(pipeline *)) {
    pthread_t th[MAX_THREADS];
    int started = 0;
    atomic_store(&p->next_unit, 0);
    for (; started < nthreads; started++)
        if (tzr_thread_start(&th[started], fn, p) != 0) break;
    if (beside) beside(p);
    if (started == 0) fn(p);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    return atomic_load(&p->failed) ? p->err_code : 0;
}

/* Sets a flag and wakes every waiting worker. */
static void announce(pipeline *p, atomic_int *flag) {
    pthread_mutex_lock(&p->slot_lock);
    atomic_store(flag, 1);
    pthread_cond_broadcast(&p->slot_cond);
    pthread_mutex_unlock(&p->slot_lock);
    /* Tensors without data, or whose units all ran before this, are reported now. */
    pthread_mutex_lock(&p->report_lock);
    load_report_ready(p);
    pthread_mutex_unlock(&p->report_lock);
}

static void *bind_then_work(void *arg) {
    pipeline *p = arg;
    if (load_bind_tensors(p) == 0) announce(p, &p->bound);
    return load_worker(p);
}

int load_run_overlapped(pipeline *p, int nthreads, void (*plan)(pipeline *, void *), void *plan_ctx) {
    pthread_t th[MAX_THREADS];
    int started = 0;
    atomic_store(&p->next_unit, 0);
    /* The binder first (begin_tensor for every tensor, in order, on one
     * thread, as without overlap), then nthreads - 2 plain workers: with
     * the planner that makes nthreads threads. */
    if (tzr_thread_start(&th[0], bind_then_work, p) == 0) started = 1;
    else if (load_bind_tensors(p) == 0) announce(p, &p->bound);
    for (; started > 0 && started < nthreads - 1; started++)
        if (tzr_thread_start(&th[started], load_worker, p) != 0) break;
    plan(p, plan_ctx);
    if (!atomic_load(&p->failed)) load_check_end_marker(p);
    announce(p, &p->plan_done);
    load_worker(p);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    return atomic_load(&p->failed) ? p->err_code : 0;
}

/* Open leaves the end-of-tensors marker to the first load where reads are
 * requests: read here, beside the data. */
void load_check_end_marker(pipeline *p) {
    int rc = tzr_reader_check_end_marker(p->r);
    if (rc) load_fail(p, rc);
}


/* Meta tensors: zeros; tensors without data: nothing to read. */
int load_fill_empty(pipeline *p, size_t i, const tzr_tensor_info *t) {
    int rc = 0;
    if (p->verify) {
        tzr_hasher hs;
        rc = tzr_reader_hash_begin(p->r, i, p->verify_sha, &hs);
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
