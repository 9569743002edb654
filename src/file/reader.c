/* Reader: validates the prologue and index up front, reads tensor headers
 * on demand (or all at open), then data with decryption and verification.
 * Positional reads only, so any thread may read any tensor. */
#include "thread.h"
#include "codec.h"
#include "compress.h"
#include "crypt.h"
#include "mem.h"
#include "names.h"
#include "reader_internal.h"
#include "reader_struct.h"
#include "scheme.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

#define DEFAULT_MAX_TENSORS (1u << 24)
#define DEFAULT_MAX_INDEX ((uint64_t)1 << 30)
#define MAX_HEADER_BYTES ((uint64_t)64 << 20)
#define FIRST_INDEX_READ ((size_t)64 << 10)
#define PADDING_SEEN ((size_t)4 << 10) /* index bytes past the entries checked, at least */


const char *tzr_reader_what(const tzr_reader *r, size_t i, char *buf, size_t cap) {
    char nb[TZR_NAMEBUF];
    const tzr_tensor_info *t = &r->t[i].info;
    snprintf(buf, cap, "%s: tensor '%s'", r->src->name, tzr_printable(t->name, t->name_len, nb, sizeof nb));
    tzr_error_about(nb); /* messages that name it record it too */
    return buf;
}

int tzr_reader_verifying(const tzr_reader *r) { return r->verify; }
/* The digest table's states. Atomic, as ranks of one shard set may load
 * on several threads at once. */
enum { HDR_SHA_EMPTY, HDR_SHA_WRITING, HDR_SHA_KNOWN };

int tzr_reader_want_header_sha(tzr_reader *r) {
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    if (!r->hdr_sha) {
        uint8_t (*t)[33] = tzr_map_zeroed(r->n ? r->n : 1, 33);
        if (t) __atomic_store_n(&r->hdr_sha, t, __ATOMIC_RELEASE);
        else rc = tzr_fail(TZR_ENOMEM, "out of memory");
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* Record tensor i's digest from its checked header h, once: two loads of
 * one reader may check the same header at the same time. */
static void note_header_sha(tzr_reader *r, size_t i, const tzr_tensor_header *h) {
    uint8_t (*t)[33] = __atomic_load_n(&r->hdr_sha, __ATOMIC_ACQUIRE);
    if (!t || !h->has_sha256) return;
    uint8_t empty = HDR_SHA_EMPTY;
    if (!__atomic_compare_exchange_n(&t[i][32], &empty, HDR_SHA_WRITING, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    memcpy(t[i], h->sha256, 32);
    __atomic_store_n(&t[i][32], HDR_SHA_KNOWN, __ATOMIC_RELEASE);
}

int tzr_reader_header_sha(tzr_reader *r, size_t i, uint8_t out[32], int *has) {
    uint8_t (*t)[33] = __atomic_load_n(&r->hdr_sha, __ATOMIC_ACQUIRE);
    if (t && __atomic_load_n(&t[i][32], __ATOMIC_ACQUIRE) == HDR_SHA_KNOWN) {
        memcpy(out, t[i], 32);
        *has = 1;
        return 0;
    }
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(r, i, &h);
    if (rc) return rc;
    *has = h->has_sha256;
    if (*has) memcpy(out, h->sha256, 32);
    return 0;
}

int tzr_reader_totals(const tzr_reader *r, uint64_t *nbytes, uint64_t *stored, size_t *empty) {
    if (!r->totals_known) return 1;
    *nbytes = r->total_nbytes;
    *stored = r->total_stored;
    *empty = r->total_empty;
    return 0;
}

/* A bucket holds the high half of the name's hash beside the index, so a
 * probe compares names only when those agree: most probes then never touch
 * the tensor table, whose entries are far apart in memory. */
static uint64_t bucket_tag(uint64_t hash) { return hash & ~(uint64_t)0xffffffffu; }

static int find_slot(const tzr_reader *r, const char *name, size_t len, size_t *index) {
    if (!r->nbuckets) return TZR_ENOTFOUND;
    uint64_t hash = tzr_name_hash(name, len), tag = bucket_tag(hash);
    for (size_t b = (size_t)(hash & (r->nbuckets - 1)); r->buckets[b]; b = (b + 1) & (r->nbuckets - 1)) {
        if (bucket_tag(r->buckets[b]) != tag) continue;
        size_t k = (size_t)(uint32_t)r->buckets[b] - 1;
        const tzr_tensor_info *t = &r->t[k].info;
        if (t->name_len == len && memcmp(t->name, name, len) == 0) {
            *index = k;
            return 0;
        }
    }
    return TZR_ENOTFOUND;
}

int reader_memo_dtype(dtype_memo *m, const char *dtype, size_t len) {
    tzr_dtype parsed;
    uint32_t itemsize;
    int opaque;
    int rc = tzr_dtype_parse(dtype, len, &parsed, &itemsize, &opaque);
    if (rc) return rc;
    *m = (dtype_memo){dtype, len, parsed, itemsize, opaque};
    return 0;
}

int reader_fill_info(tzr_tensor_info *t, const tensor_row *row, const dtype_memo *m) {
    t->name = row->name;
    t->name_len = row->name_len;
    t->type = row->type;
    t->module_idx = row->module_idx;
    t->dtype_str = m->dtype;
    t->dtype_len = m->dtype_len;
    t->dtype = m->parsed;
    t->itemsize = m->itemsize;
    t->opaque = m->opaque;
    t->ndim = row->ndim;
    t->shape = row->shape;
    t->numel = 1;
    for (uint32_t d = 0; d < row->ndim; d++)
        if (!tzr_mul_ok(t->numel, row->shape[d], &t->numel)) return READER_FILL_NUMEL;
    if (!tzr_mul_ok(t->numel, t->itemsize, &t->nbytes)) return READER_FILL_NBYTES;
    t->header_offset = row->header_offset;
    t->data_offset = row->data_offset;
    t->data_length = row->data_length;
    t->meta = row->data_length == 0 && t->nbytes > 0;
    t->stored_length = row->data_length;
    t->uncompressed_length = t->meta ? 0 : t->nbytes;
    t->compression = row->compression;
    t->byte_planes = 1;
    return 0;
}

/* Index entry e becomes tensor i; every field is checked before use. */
static int load_entry(tzr_reader *r, size_t i, const tzr_index_entry *e, uint64_t entry_off, uint64_t data_start,
                      uint64_t *prev_end, size_t *dims_used, dtype_memo *memo, tzr_arena *strings) {
    tensor_slot *s = &r->t[i];
    tzr_tensor_info *t = &s->info;
    /* The printable name is made only for a message: this runs per tensor. */
#define BAD(code, ...)                                                                                    \
    do {                                                                                                  \
        char m_[512], nb_[TZR_NAMEBUF];                                                                   \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                                             \
        return tzr_fail(code, "%s: tensor '%s' (index entry %zu at offset %llu): %s", r->src->name,       \
                        tzr_printable((const char *)e->name, e->name_len, nb_, sizeof nb_), i,             \
                        (unsigned long long)entry_off, m_);                                               \
    } while (0)
    char *name = tzr_arena_alloc(strings, (size_t)e->name_len + 1);
    if (!name) return tzr_fail(TZR_ENOMEM, "out of memory");
    memcpy(name, e->name, e->name_len);
    name[e->name_len] = 0;
    if (tzr_name_check(name, e->name_len, &t->structured)) BAD(TZR_EFORMAT, "%s", tzr_last_error());
    if (e->type > TZR_STATE_DICT) BAD(TZR_EFORMAT, "unknown tensor type %u", e->type);
    if (t->structured && e->type != TZR_STATE_DICT)
        BAD(TZR_EFORMAT, "structured names are only allowed on state_dict tensors");
    /* Checkpoints repeat a few dtypes: one copy, parsed once. */
    if (!memo->dtype || memo->dtype_len != e->dtype_len || memcmp(memo->dtype, e->dtype, e->dtype_len) != 0) {
        char *dtype = tzr_arena_alloc(strings, (size_t)e->dtype_len + 1);
        if (!dtype) return tzr_fail(TZR_ENOMEM, "out of memory");
        memcpy(dtype, e->dtype, e->dtype_len);
        dtype[e->dtype_len] = 0;
        if (reader_memo_dtype(memo, dtype, e->dtype_len)) BAD(TZR_EFORMAT, "dtype: %s", tzr_last_error());
    }
    /* Dims live in one pool sized by the index (4 bytes each on disk). */
    uint64_t *shape = r->dims + *dims_used;
    *dims_used += e->ndim;
    for (uint32_t d = 0; d < e->ndim; d++) shape[d] = tzr_ld32(e->dims + 4 * d);
    tensor_row row = {name,           e->name_len,     (tzr_tensor_type)e->type, -1, e->ndim, shape,
                      e->header_offset, e->data_offset, e->data_length,
                      r->comp_info ? -1 : TZR_COMPRESSION_NONE}; /* compression: known with the header */
    int over = reader_fill_info(t, &row, memo);
    if (over == READER_FILL_NUMEL) BAD(TZR_ELIMIT, "shape overflows");
    if (over) BAD(TZR_ELIMIT, "byte size overflows");
    uint64_t end;
    if (e->header_offset < data_start || e->header_offset < *prev_end)
        BAD(TZR_EFORMAT, "header offset %llu overlaps the index or the previous tensor",
            (unsigned long long)e->header_offset);
    if (e->data_offset <= e->header_offset || e->data_offset - e->header_offset > MAX_HEADER_BYTES ||
        e->data_offset - e->header_offset < 66)
        BAD(TZR_EFORMAT, "data offset %llu is inconsistent with header offset %llu",
            (unsigned long long)e->data_offset, (unsigned long long)e->header_offset);
    if (!tzr_add_ok(e->data_offset, e->data_length, &end) || end > r->src->size)
        BAD(TZR_ETRUNC, "data [%llu, +%llu) runs past the end of the file (%llu bytes)",
            (unsigned long long)e->data_offset, (unsigned long long)e->data_length,
            (unsigned long long)r->src->size);
    /* Compressed files store at most the tensor's bytes (checked exactly
     * against the header's compression block later). */
    if (!t->meta && (r->comp_info ? e->data_length > t->nbytes : e->data_length != t->nbytes))
        BAD(TZR_EFORMAT, "data length %llu disagrees with shape and dtype (%llu bytes)",
            (unsigned long long)e->data_length, (unsigned long long)t->nbytes);
    *prev_end = end;
#undef BAD
    return 0;
}

/* Names are entered in passes that prefetch buckets PREFETCH names ahead:
 * each insert is a cache miss in a table of megabytes (about 130 ns each
 * here, 13 ms for 100k tensors, most of an open), and misses issued side
 * by side overlap. Names [from, to) go in, in order, so the first
 * duplicate found is the first in the index. */
#define PREFETCH 16

static int index_names_range(tzr_reader *r, size_t from, size_t to, size_t *dup, size_t *other) {
    uint64_t hashes[PREFETCH];
    size_t mask = r->nbuckets - 1;
    for (size_t j = from; j < to + PREFETCH; j++) {
        if (j >= from + PREFETCH) { /* insert name i, hashed PREFETCH steps ago (its slot is reused below) */
            size_t i = j - PREFETCH;
            const tzr_tensor_info *t = &r->t[i].info;
            uint64_t hash = hashes[i % PREFETCH], tag = bucket_tag(hash);
            size_t b = (size_t)(hash & mask);
            for (; r->buckets[b]; b = (b + 1) & mask) {
                if (bucket_tag(r->buckets[b]) != tag) continue;
                size_t k = (size_t)(uint32_t)r->buckets[b] - 1;
                const tzr_tensor_info *o = &r->t[k].info;
                if (o->name_len == t->name_len && memcmp(o->name, t->name, t->name_len) == 0) {
                    *dup = i;
                    *other = k;
                    return TZR_EDUP;
                }
            }
            r->buckets[b] = tag | (uint64_t)(i + 1);
        }
        if (j < to) {
            const tzr_tensor_info *t = &r->t[j].info;
            hashes[j % PREFETCH] = tzr_name_hash(t->name, t->name_len);
            __builtin_prefetch(&r->buckets[hashes[j % PREFETCH] & mask], 1);
        }
    }
    return 0;
}

int reader_index_names(tzr_reader *r, size_t *dup, size_t *other) { return index_names_range(r, 0, r->n, dup, other); }

/* Large indexes: the names go in on a helper thread that follows the
 * parse a batch at a time, on a core that would otherwise idle through the
 * open (the insert pass was 18% of a 100k-tensor open's CPU). Batches go in
 * in order, each claimed under the mutex, so only one thread writes the
 * buckets at a time and the first duplicate found is the first in the
 * index. When the parse ends, the opening thread takes what the helper has
 * not claimed (waiting at most for the batch in hand): a helper kept off
 * the CPU by other work then costs no wait. Results and messages are those
 * of the one-thread order: a parse error anywhere wins, then the first
 * duplicate. TZR_INDEX_THREAD=0 keeps it all on the opening thread.
 *
 * A split parse (below) fills the table in two lanes at once, the first
 * part and the second; the helper takes whole batches of either, so names
 * then go in out of order, and a duplicate is looked for again in order. */
#define NAMES_THREAD_MIN 16384
#define NAMES_BATCH 2048

typedef struct names_lane {
    size_t next;   /* names in (or claimed, while busy) */
    size_t ready;  /* entries parsed and handed over */
    size_t end;
} names_lane;

typedef struct names_helper {
    tzr_reader *r;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu: */
    names_lane lane[2];
    int busy;      /* the helper holds a claimed batch */
    int finished;  /* the parse ended: the helper claims no more */
    int rc;        /* the helper's TZR_EDUP, with dup and other */
    size_t dup, other;
} names_helper;

/* Names the helper entered, over all opens; with sync set, the parse waits
 * for the helper after each batch (tests: the path is then certain). */
TZR_HIDDEN atomic_size_t tzr_reader_helper_names;
TZR_HIDDEN atomic_int tzr_reader_helper_sync;

static int index_threads_off(void) {
    const char *env = getenv("TZR_INDEX_THREAD");
    return sysconf(_SC_NPROCESSORS_ONLN) < 2 || (env && strcmp(env, "0") == 0);
}

static names_lane *names_claimable(names_helper *h) {
    for (int l = 0; l < 2; l++)
        if (h->lane[l].ready >= h->lane[l].next + NAMES_BATCH) return &h->lane[l];
    return NULL;
}

static void *names_main(void *arg) {
    names_helper *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        names_lane *l;
        while (!(l = names_claimable(h)) && !h->finished && !h->rc) pthread_cond_wait(&h->cv, &h->mu);
        if (h->finished || h->rc) break;
        size_t from = l->next, to = from + NAMES_BATCH; /* one at a time: the opener may take the rest */
        h->busy = 1;
        pthread_mutex_unlock(&h->mu);
        size_t dup = 0, other = 0;
        int rc = index_names_range(h->r, from, to, &dup, &other);
        atomic_fetch_add_explicit(&tzr_reader_helper_names, to - from, memory_order_relaxed);
        pthread_mutex_lock(&h->mu);
        h->busy = 0;
        l->next = to;
        h->rc = rc, h->dup = dup, h->other = other;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Lanes [0, split) and [split, n); split == n: one lane, in order. */
static int names_helper_start(names_helper *h, tzr_reader *r, size_t split) {
    if (r->n < NAMES_THREAD_MIN || index_threads_off()) return 0;
    memset(h, 0, sizeof *h);
    h->r = r;
    h->lane[0] = (names_lane){0, 0, split};
    h->lane[1] = (names_lane){split, split, r->n};
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (tzr_thread_start(&h->th, names_main, h) == 0) return 1;
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    return 0; /* the names go in after the parse, as without the helper */
}

static void names_helper_post(names_helper *h, int lane, size_t ready) {
    names_lane *l = &h->lane[lane];
    pthread_mutex_lock(&h->mu);
    l->ready = ready;
    pthread_cond_broadcast(&h->cv);
    while (atomic_load(&tzr_reader_helper_sync) && !h->rc && !h->finished &&
           (l->next + NAMES_BATCH <= l->ready || h->busy))
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

/* The parse has ended: stop the helper after its batch in hand; leaves in
 * next[] where its names end in each lane (the rest is the caller's), its
 * result in *rc. */
static void names_helper_end(names_helper *h, size_t next[2], int *rc, size_t *dup, size_t *other) {
    pthread_mutex_lock(&h->mu);
    h->finished = 1;
    pthread_cond_broadcast(&h->cv);
    while (h->busy) pthread_cond_wait(&h->cv, &h->mu);
    next[0] = h->lane[0].next, next[1] = h->lane[1].next;
    *rc = h->rc, *dup = h->dup, *other = h->other;
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
}

static int check_comp_vs_index(const tzr_tensor_info *t, const tzr_comp_info *ci) {
    /* Only codecs with a row can be expanded; any other id would be
     * planned and delivered as if its stored bytes were the tensor. */
    if (ci->codec != TZR_CODEC_NONE && !tzr_codec_find(ci->codec)) return tzr_codec_unknown(ci->codec);
    if (ci->uncompressed_length != (t->meta ? 0 : t->nbytes))
        return tzr_fail(TZR_EFORMAT, "uncompressed length %llu disagrees with shape and dtype (%llu bytes)",
                        (unsigned long long)ci->uncompressed_length, (unsigned long long)(t->meta ? 0 : t->nbytes));
    if (ci->planes > 1 && ci->planes != t->itemsize)
        return tzr_fail(TZR_EFORMAT, "%u byte planes for %u-byte elements", ci->planes, t->itemsize);
    return 0;
}

/* The tensor_info fields a compression block decides. */
static void set_comp_fields(tzr_tensor_info *t, const tzr_comp_info *ci) {
    int coded = tzr_codec_find(ci->codec) != NULL; /* checked before */
    t->compression = coded ? ci->codec : TZR_COMPRESSION_NONE;
    t->byte_planes = coded ? ci->planes : 1;
    t->frame_size = ci->frame_size;
    t->frames = ci->nframes;
}

/* Parse header bytes of tensor i and check them against its index entry. */
static int check_header(tzr_reader *r, size_t i, const uint8_t *bytes, size_t len, tzr_tensor_header *h) {
    const tzr_tensor_info *t = &r->t[i].info;
    char what[TZR_NAMEBUF + 256]; /* filled only on failure: this runs per tensor */
    int rc = tzr_parse_tensor_header(bytes, len, r->crypt_info, r->comp_info, h);
    if (rc) tzr_reader_what(r, i, what, sizeof what);
    if (rc) return tzr_fail_prefix(rc, "%s: header at offset %llu: ", what, (unsigned long long)t->header_offset);
    const char *field = NULL;
    if (h->name_len != t->name_len || memcmp(h->name, t->name, t->name_len) != 0) field = "name";
    else if (h->type != t->type) field = "tensor type";
    else if (h->dtype_len != t->dtype_len || memcmp(h->dtype, t->dtype_str, t->dtype_len) != 0) field = "dtype";
    else if (h->ndim != t->ndim) field = "shape";
    else if ((uint64_t)h->data_length != t->data_length) field = "data length";
    if (!field)
        for (uint32_t d = 0; d < t->ndim; d++)
            if (tzr_ld32(h->dims + 4 * d) != t->shape[d]) field = "shape";
    if (field)
        return tzr_fail(TZR_EFORMAT, "%s: header at offset %llu disagrees with the index on the %s",
                        tzr_reader_what(r, i, what, sizeof what),
                        (unsigned long long)t->header_offset, field);
    if (r->crypt_info && !h->crypt.encrypted && t->data_length > 0)
        return tzr_fail(TZR_ECRYPT, "%s: header at offset %llu: data is not encrypted in an encrypted file",
                        tzr_reader_what(r, i, what, sizeof what), (unsigned long long)t->header_offset);
    if (h->crypt.encrypted && h->crypt.chunk_type == TZR_CHUNK_XSALSA_PARALLEL && h->crypt.num_macs != 1 &&
        tzr_crypt_num_chunks(t->data_length, h->crypt.chunk_size) != h->crypt.num_macs)
        return tzr_fail(TZR_EFORMAT, "%s: header at offset %llu: %llu MACs for %llu bytes",
                        tzr_reader_what(r, i, what, sizeof what),
                        (unsigned long long)t->header_offset, (unsigned long long)h->crypt.num_macs,
                        (unsigned long long)t->data_length);
    const tzr_comp_info *ci = &h->comp;
    if (r->dir && (h->comp_end - h->comp_start != r->dir[i].len ||
                   memcmp(bytes + h->comp_start, r->dir_bytes + r->dir[i].at, r->dir[i].len) != 0))
        return tzr_fail(TZR_EFORMAT, "%s: header at offset %llu: compression block disagrees with the frame directory",
                        tzr_reader_what(r, i, what, sizeof what), (unsigned long long)t->header_offset);
    if (ci->present && (rc = check_comp_vs_index(t, ci)))
        return tzr_fail_prefix(rc, "%s: header at offset %llu: ", tzr_reader_what(r, i, what, sizeof what),
                               (unsigned long long)t->header_offset);
    note_header_sha(r, i, h);
    return 0;
}

/* A plaintext header (no crypt or compression block) that says what the
 * index says, checked in place: 1 when check_header would accept it, 0
 * for anything else, which check_header then parses for its message.
 * Per tensor on every load; the full parse cost 3x this on 100k tensors. */
static int header_agrees(const tzr_tensor_info *t, const uint8_t *b, size_t len, uint16_t *module_idx) {
    size_t at = 8 + 2 + 1 + 2 + t->name_len + 1 + t->dtype_len + 1 + 4 * (size_t)t->ndim;
    if (len < at + 2 + 8 || tzr_ld64(b) != len || b[10] != (unsigned)t->type || tzr_ld16(b + 11) != t->name_len ||
        memcmp(b + 13, t->name, t->name_len) != 0)
        return 0;
    const uint8_t *c = b + 13 + t->name_len;
    if (c[0] != t->dtype_len || memcmp(c + 1, t->dtype_str, t->dtype_len) != 0 || c[1 + t->dtype_len] != t->ndim)
        return 0;
    c += 2 + t->dtype_len;
    for (uint32_t d = 0; d < t->ndim; d++)
        if (tzr_ld32(c + 4 * d) != t->shape[d]) return 0;
    size_t hash_len = tzr_ld16(b + at), left = len - at - 2;
    if (hash_len > left || left - hash_len < 8) return 0;
    const uint8_t *hs = b + at + 2;
    size_t pos = 1;
    for (unsigned k = 0, count = hash_len ? hs[0] : 0; k < count; k++) {
        if (pos + 2 > hash_len) return 0;
        unsigned type = hs[pos], hlen = hs[pos + 1];
        if (pos + 2 + hlen > hash_len ||
            !((type == TZR_HASH_CRC32 && hlen == 4) || (type == TZR_HASH_SHA256 && hlen == 32)))
            return 0;
        pos += 2 + hlen;
    }
    uint64_t dl = tzr_ld64(b + len - 8);
    if (dl != t->data_length || (int64_t)dl < 0) return 0;
    *module_idx = tzr_ld16(b + 8);
    return 1;
}

int tzr_reader_check_header(tzr_reader *r, size_t i, const uint8_t *bytes, size_t len) {
    if (r->safetensors) return 0; /* no headers: nothing to check */
    uint16_t module_idx;
    if (!r->crypt_info && !r->comp_info && !r->dir && header_agrees(&r->t[i].info, bytes, len, &module_idx)) {
        __atomic_store_n(&r->t[i].info.module_idx, module_idx, __ATOMIC_RELAXED);
        return 0;
    }
    tzr_tensor_header h;
    int rc = check_header(r, i, bytes, len, &h);
    if (rc) return rc;
    /* A relaxed atomic store, not the reader lock: this runs once per
     * tensor from every pipeline thread. */
    __atomic_store_n(&r->t[i].info.module_idx, h.module_idx, __ATOMIC_RELAXED);
    return 0;
}

int tzr_reader_install_header(tzr_reader *r, size_t i, const uint8_t *bytes, size_t len) {
    tensor_slot *s = &r->t[i];
    pthread_mutex_lock(&r->lock);
    kept_header *kept = s->hdr_bytes ? NULL : tzr_arena_alloc(&r->headers, sizeof *kept + len);
    int have = s->hdr_bytes != NULL;
    pthread_mutex_unlock(&r->lock);
    if (have) return 0;
    if (!kept) return tzr_fail(TZR_ENOMEM, "out of memory");
    uint8_t *copy = kept->bytes;
    memcpy(copy, bytes, len);
    tzr_tensor_header h;
    int rc = check_header(r, i, copy, len, &h);
    if (rc) return rc; /* the arena space is simply not reused */
    pthread_mutex_lock(&r->lock);
    if (!s->hdr_bytes) {
        kept->h = h;
        s->hdr = &kept->h;
        /* Written only where the header changes them: another load of
         * this reader may be planning from these fields meanwhile, and for
         * a plain file (the headers agree with the index) that is no race. */
        if (__atomic_load_n(&s->info.module_idx, __ATOMIC_RELAXED) != h.module_idx)
            __atomic_store_n(&s->info.module_idx, h.module_idx, __ATOMIC_RELAXED);
        if (s->info.encrypted != h.crypt.encrypted) s->info.encrypted = h.crypt.encrypted;
        tzr_tensor_info with = {0}; /* set_comp_fields reads nothing of it (module_idx is another's) */
        set_comp_fields(&with, &h.comp);
        if (with.compression != s->info.compression || with.byte_planes != s->info.byte_planes ||
            with.frame_size != s->info.frame_size || with.frames != s->info.frames)
            set_comp_fields(&s->info, &h.comp);
        s->hdr_bytes = copy;
    }
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int tzr_reader_header(tzr_reader *r, size_t i, const tzr_tensor_header **h) {
    tensor_slot *s = &r->t[i];
    if (!tzr_reader_has_header(r, i)) {
        size_t len = (size_t)(s->info.data_offset - s->info.header_offset);
        uint8_t *buf = malloc(len);
        if (!buf) return tzr_fail(TZR_ENOMEM, "out of memory");
        int rc = r->src->read_at(r->src, buf, len, s->info.header_offset);
        if (!rc) rc = tzr_reader_install_header(r, i, buf, len);
        free(buf);
        if (rc) return rc;
    }
    *h = s->hdr;
    return 0;
}

/* Headers of consecutive records are read together: records are
 * contiguous, so one read of up to HEADER_SPAN bytes covers the headers
 * (and small data) of many tensors instead of one syscall or request each. */
#define HEADER_SPAN ((uint64_t)8 << 20)
#define HEADER_GAP ((uint64_t)1 << 20)

int tzr_reader_load_headers(tzr_reader *r, size_t from, size_t to, const unsigned char *want) {
    if (r->safetensors) return 0;
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    size_t i = from;
    if (to > r->n) to = r->n;
    while (i < to && !rc) {
        if ((want && !want[i]) || tzr_reader_has_header(r, i)) {
            i++;
            continue;
        }
        uint64_t start = r->t[i].info.header_offset, end = r->t[i].info.data_offset;
        size_t j = i + 1;
        /* Only across small data: reading a large tensor's data just to
         * reach the next header costs more than another request. */
        while (j < to && r->t[j].info.data_offset - start <= HEADER_SPAN && r->t[j - 1].info.data_length <= HEADER_GAP &&
               (!want || want[j])) {
            end = r->t[j].info.data_offset;
            j++;
        }
        if (end - start > cap) { /* grows to the largest batch (or one huge header) */
            uint8_t *grown = realloc(buf, (size_t)(end - start));
            if (!grown) {
                free(buf);
                return tzr_fail(TZR_ENOMEM, "out of memory");
            }
            buf = grown;
            cap = (size_t)(end - start);
        }
        rc = r->src->read_at(r->src, buf, (size_t)(end - start), start);
        if (rc) {
            char what[TZR_NAMEBUF + 256];
            rc = tzr_fail_prefix(rc, "%s: reading its header at offset %llu: ", tzr_reader_what(r, i, what, sizeof what),
                                 (unsigned long long)start);
        }
        for (size_t k = i; k < j && !rc; k++) {
            const tzr_tensor_info *t = &r->t[k].info;
            rc = tzr_reader_install_header(r, k, buf + (t->header_offset - start),
                                           (size_t)(t->data_offset - t->header_offset));
        }
        i = j;
    }
    free(buf);
    return rc;
}

int tzr_reader_tensor_key(tzr_reader *r, size_t i, uint8_t key[32]) {
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(r, i, &h);
    if (rc) return rc;
    char what[TZR_NAMEBUF + 256];
    const tzr_crypt_info *ci = &h->crypt;
    /* Messages name the offset too (tzr.h: "tensor name and byte offset
     * where known"); the crypt parameters live in the header. */
    unsigned long long hoff = (unsigned long long)r->t[i].info.header_offset;
    if (r->password) {
        if (!ci->has_kdf)
            return tzr_fail(TZR_ECRYPT,
                            "%s: header at offset %llu: no key derivation parameters stored; decrypt with the raw key",
                            tzr_reader_what(r, i, what, sizeof what), hoff);
        if (ci->salt_len != TZR_SALT_BYTES)
            return tzr_fail(TZR_ECRYPT, "%s: header at offset %llu: salt of %u bytes",
                            tzr_reader_what(r, i, what, sizeof what), hoff, ci->salt_len);
        pthread_mutex_lock(&r->lock);
        for (size_t k = 0; k < r->ndkeys; k++) {
            derived_key *d = &r->dkeys[k];
            if (d->ops == ci->opslimit && d->mem == ci->memlimit && d->alg == ci->alg &&
                memcmp(d->salt, ci->salt, TZR_SALT_BYTES) == 0) {
                memcpy(key, d->key, 32);
                pthread_mutex_unlock(&r->lock);
                return 0;
            }
        }
        /* Derive under the lock: parallel loaders would otherwise all run
         * the same memory-hard function at once. */
        derived_key d = {ci->opslimit, ci->memlimit, ci->alg, {0}, {0}};
        memcpy(d.salt, ci->salt, TZR_SALT_BYTES);
        rc = tzr_crypt_derive(d.key, r->password, r->password_len, ci->salt, ci->salt_len, ci->opslimit,
                              ci->memlimit, ci->alg);
        if (!rc) {
            derived_key *grown = realloc(r->dkeys, (r->ndkeys + 1) * sizeof *grown);
            if (grown) {
                r->dkeys = grown;
                r->dkeys[r->ndkeys++] = d;
            }
            memcpy(key, d.key, 32);
        }
        pthread_mutex_unlock(&r->lock);
        if (rc) return tzr_fail_prefix(rc, "%s: header at offset %llu: ", tzr_reader_what(r, i, what, sizeof what), hoff);
        return 0;
    }
    if (!r->have_key) {
        tzr_fail(TZR_ECRYPT, "%s at offset %llu is encrypted: a key or password is needed",
                 tzr_reader_what(r, i, what, sizeof what), (unsigned long long)r->t[i].info.data_offset);
        tzr_error_set_cause(TZR_CAUSE_KEY);
        return TZR_ECRYPT;
    }
    memcpy(key, r->key, 32);
    return 0;
}

/* Bytes of tensor i's first crypt chunk (the whole tensor when it is one
 * secretbox), or 0 when it carries no encrypted data. */
static uint64_t first_crypt_chunk(tzr_reader *r, size_t i, const tzr_tensor_header **hp) {
    const tzr_tensor_info *t = &r->t[i].info;
    if (!t->data_length || tzr_reader_header(r, i, hp) || !(*hp)->crypt.encrypted) return 0;
    const tzr_crypt_info *ci = &(*hp)->crypt;
    return ci->num_macs > 1 && ci->chunk_size < t->data_length ? ci->chunk_size : t->data_length;
}

int tzr_reader_key_opens_others(tzr_reader *r, size_t failed, int *opens) {
    enum { TRIES = 3 };
    size_t pick[TRIES];
    uint64_t len[TRIES];
    int n = 0;
    *opens = -1;
    /* The smallest first chunks: the fewest bytes to read. Candidates with
     * unreadable headers are simply not candidates. */
    for (size_t i = 0; i < r->n; i++) {
        const tzr_tensor_header *h;
        uint64_t l = i == failed ? 0 : first_crypt_chunk(r, i, &h);
        if (!l || (n == TRIES && l >= len[n - 1])) continue;
        int at = n < TRIES ? n++ : TRIES - 1; /* kept sorted; a full list drops its largest */
        while (at > 0 && len[at - 1] > l) {
            pick[at] = pick[at - 1];
            len[at] = len[at - 1];
            at--;
        }
        pick[at] = i;
        len[at] = l;
    }
    for (int k = 0; k < n; k++) {
        const tzr_tensor_header *h;
        if (!first_crypt_chunk(r, pick[k], &h)) continue;
        const tzr_tensor_info *t = &r->t[pick[k]].info;
        uint8_t key[32], *buf = malloc((size_t)len[k]);
        if (!buf) return tzr_fail(TZR_ENOMEM, "out of memory");
        int rc = r->src->read_at(r->src, buf, (size_t)len[k], t->data_offset);
        if (!rc) rc = tzr_reader_tensor_key(r, pick[k], key);
        if (!rc) rc = tzr_crypt_open(&h->crypt, key, t->data_length, 0, buf, (size_t)len[k]);
        memset(key, 0, sizeof key);
        free(buf);
        if (rc && rc != TZR_ECRYPT) return rc;
        *opens = rc == 0;
        if (!rc) return 0;
    }
    return 0;
}

static int no_hashes_in_safetensors(tzr_reader *r, size_t i) {
    char what[TZR_NAMEBUF + 256];
    return tzr_fail(TZR_ENOTSUP, "%s: a safetensors file stores no hashes to verify",
                    tzr_reader_what(r, i, what, sizeof what));
}

/* Start a hash with header h parsed from bytes (its raw header). */
static int hash_begin(tzr_reader *r, size_t i, const tzr_tensor_header *h, const uint8_t *bytes, int sha,
                      tzr_hasher *hs) {
    int rc;
    if (!h->has_crc32 && !h->has_sha256) {
        char what[TZR_NAMEBUF + 256];
        return tzr_fail(TZR_EHASH, "%s: header at offset %llu: no hashes stored to verify",
                        tzr_reader_what(r, i, what, sizeof what), (unsigned long long)r->t[i].info.header_offset);
    }
    /* CRC32 level: SHA-256 only where nothing else covers the data (no
     * CRC32 stored, no MACs). */
    rc = tzr_hasher_init(hs, h->has_crc32, h->has_sha256 && (sha || (!h->has_crc32 && !h->crypt.encrypted)));
    if (rc) return rc;
    size_t len = (size_t)h->header_size;
    uint8_t stackbuf[512];
    uint8_t *tmp = len <= sizeof stackbuf ? stackbuf : malloc(len);
    if (!tmp) {
        tzr_hasher_free(hs);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    size_t n = tzr_hashable_header(bytes, len, h, tmp);
    tzr_hasher_update(hs, tmp, n);
    if (tmp != stackbuf) free(tmp);
    return 0;
}

int tzr_reader_hash_begin(tzr_reader *r, size_t i, int sha, tzr_hasher *hs) {
    if (r->safetensors) return no_hashes_in_safetensors(r, i);
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(r, i, &h);
    if (rc) return rc;
    return hash_begin(r, i, h, r->t[i].hdr_bytes, sha, hs);
}

int tzr_reader_hash_begin_bytes(tzr_reader *r, size_t i, const uint8_t *bytes, size_t len, int sha, tzr_hasher *hs,
                                tzr_tensor_header *h) {
    if (r->safetensors) return no_hashes_in_safetensors(r, i);
    int rc = check_header(r, i, bytes, len, h);
    if (rc) return rc;
    __atomic_store_n(&r->t[i].info.module_idx, h->module_idx, __ATOMIC_RELAXED);
    return hash_begin(r, i, h, bytes, sha, hs);
}

int tzr_reader_hash_check_with(tzr_reader *r, size_t i, const tzr_tensor_header *h, tzr_hasher *hs) {
    uint32_t crc = 0;
    uint8_t sha[32];
    tzr_hasher_final(hs, &crc, sha);
    char what[TZR_NAMEBUF + 256];
    const tzr_tensor_info *t = &r->t[i].info;
    if (hs->want_crc && crc != h->crc32)
        return tzr_fail(TZR_EHASH, "%s at offset %llu: crc32 mismatch (stored %08x, computed %08x)",
                        tzr_reader_what(r, i, what, sizeof what), (unsigned long long)t->data_offset, h->crc32, crc);
    if (hs->want_sha && memcmp(sha, h->sha256, 32) != 0)
        return tzr_fail(TZR_EHASH, "%s at offset %llu: sha256 mismatch", tzr_reader_what(r, i, what, sizeof what),
                        (unsigned long long)t->data_offset);
    return 0;
}

int tzr_reader_hash_check(tzr_reader *r, size_t i, tzr_hasher *hs) {
    return tzr_reader_hash_check_with(r, i, r->t[i].hdr, hs);
}

/* Where the index's n entries end within the first `have` bytes of it, or
 * 0 when they do not all fit there (then the whole index is read). */
static size_t entries_end(const uint8_t *index, size_t have, uint64_t n) {
    tzr_cursor c = tzr_cursor_make(index, have);
    for (uint64_t i = 0; i < n; i++) {
        tzr_index_entry e;
        if (tzr_parse_index_entry(&c, &e)) return 0;
    }
    return n ? c.pos : 0;
}

/* How much of the index region must be read: through the entries and, in
 * a compressed file, through its frame directory. 0: the first `have`
 * bytes cannot tell (then the whole region is read). */
static size_t index_needed(const uint8_t *index, size_t have, uint64_t n, int comp, uint64_t mlen) {
    size_t end = entries_end(index, have, n);
    if (!end || !comp || mlen - end < TZR_DIR_PREFIX) return end;
    if (have - end < TZR_DIR_PREFIX) return 0;
    if (memcmp(index + end, TZR_DIR_MAGIC, 8) != 0) return end;
    uint64_t d = tzr_ld64(index + end + 8);
    if (d > mlen - end - TZR_DIR_PREFIX) return 0; /* parse_dir reports it */
    return end + TZR_DIR_PREFIX + (size_t)d;
}

/* The frame directory of a compressed file (§11.5), when present right
 * after the entries (which end at `end`) in index[0, have): every tensor's
 * compression block, checked as a header's would be; a header read later
 * must carry the same bytes. */
static int parse_dir(tzr_reader *r, const uint8_t *index, size_t have, size_t end, size_t *dir_end) {
    if (have - end < TZR_DIR_PREFIX || memcmp(index + end, TZR_DIR_MAGIC, 8) != 0) return 0;
    uint64_t at = TZR_PROLOGUE_LEN + end; /* file offset, for messages */
    uint64_t d = tzr_ld64(index + end + 8);
    if (d > have - end - TZR_DIR_PREFIX)
        return tzr_fail(TZR_EFORMAT, "%s: frame directory at offset %llu: %llu bytes run past the %llu-byte index",
                        r->src->name, (unsigned long long)at, (unsigned long long)d,
                        (unsigned long long)r->fh.metadata_len);
    r->dir_bytes = malloc(d ? (size_t)d : 1);
    r->dir = tzr_calloc_big(r->n ? r->n : 1, sizeof *r->dir);
    if (!r->dir_bytes || !r->dir) return tzr_fail(TZR_ENOMEM, "out of memory for the frame directory");
    memcpy(r->dir_bytes, index + end + TZR_DIR_PREFIX, (size_t)d);
    size_t pos = 0;
    char what[TZR_NAMEBUF + 256];
    for (size_t i = 0; i < r->n; i++) {
        dir_entry *de = &r->dir[i];
        tzr_tensor_info *t = &r->t[i].info;
        de->at = pos;
        int rc = tzr_parse_comp_block_at(r->dir_bytes, (size_t)d, &pos, &de->ci);
        if (!rc) rc = tzr_check_comp_info(&de->ci, t->data_length);
        if (!rc) rc = check_comp_vs_index(t, &de->ci);
        if (rc)
            return tzr_fail_prefix(rc, "%s: frame directory entry at offset %llu: ",
                                   tzr_reader_what(r, i, what, sizeof what),
                                   (unsigned long long)(at + TZR_DIR_PREFIX + de->at));
        de->len = pos - de->at;
        set_comp_fields(t, &de->ci);
    }
    if (pos != d)
        return tzr_fail(TZR_EFORMAT, "%s: frame directory at offset %llu: %llu bytes after the last tensor's block",
                        r->src->name, (unsigned long long)at, (unsigned long long)(d - pos));
    *dir_end = end + TZR_DIR_PREFIX + (size_t)d;
    return 0;
}

/* The index region as parse_index reads it: all of it in memory, or (a
 * large index on a local source) a window that slides along it, refilled
 * by reads. The window is the buffer open read the prologue into, already
 * mapped and in cache; a whole 6 MB index (100k tensors) would be read
 * into fresh memory, each page faulted and cleared first, then read back
 * from RAM. It grows only for an entry larger than itself (names run to
 * 64 KiB). */
typedef struct index_window {
    tzr_source *src;    /* NULL: buf holds the whole of [0, total) */
    uint8_t *buf;       /* region bytes [base, base + len) */
    size_t cap;         /* of buf (sliding) */
    uint8_t *grown;     /* buf, when it had to grow: freed by the owner */
    uint64_t base;
    size_t len;
    uint64_t total;     /* the region's length */
} index_window;

/* Drop the window's bytes before `keep_from` and read on after the rest. */
static int window_slide(index_window *w, size_t keep_from) {
    size_t keep = w->len - keep_from;
    if (keep == w->cap) { /* one entry fills the window */
        uint8_t *g = malloc(2 * w->cap);
        if (!g) return tzr_fail(TZR_ENOMEM, "out of memory for the index");
        memcpy(g, w->buf + keep_from, keep);
        free(w->grown);
        w->buf = w->grown = g;
        w->cap *= 2;
    } else {
        memmove(w->buf, w->buf + keep_from, keep);
    }
    w->base += keep_from;
    uint64_t left = w->total - (w->base + keep);
    size_t more = w->cap - keep < left ? w->cap - keep : (size_t)left;
    w->len = keep;
    int rc = more ? w->src->read_at(w->src, w->buf + keep, more, TZR_PROLOGUE_LEN + w->base + keep) : 0;
    if (rc)
        return tzr_fail_prefix(rc, "%s: reading the index at offset %llu: ", w->src->name,
                               (unsigned long long)(TZR_PROLOGUE_LEN + w->base + keep));
    w->len += more;
    return 0;
}

/* The next entry at window offset *pos (sliding the window when the entry
 * runs past it); TZR_ETRUNC when it runs past the region. */
static int window_entry(index_window *w, size_t *pos, tzr_index_entry *e) {
    for (;;) {
        tzr_cursor c = tzr_cursor_make(w->buf + *pos, w->len - *pos);
        if (!tzr_parse_index_entry(&c, e)) {
            *pos += c.pos;
            return 0;
        }
        if (!w->src || w->base + w->len >= w->total) return TZR_ETRUNC;
        int rc = window_slide(w, *pos);
        if (rc) return rc;
        *pos = 0;
    }
}

/* Region offset of entry k (a duplicate's, for its message): read again. */
static uint64_t entry_offset(const index_window *w, size_t k) {
    if (!w->src) {
        tzr_cursor d = tzr_cursor_make(w->buf, w->len);
        tzr_index_entry e;
        for (size_t i = 0; i < k; i++) tzr_parse_index_entry(&d, &e);
        return d.pos;
    }
    index_window again = {w->src, malloc(w->cap), w->cap, NULL, 0, 0, w->total};
    size_t pos = 0;
    tzr_index_entry e;
    int rc = again.buf ? window_slide(&again, 0) : TZR_ENOMEM;
    for (size_t i = 0; i < k && !rc; i++) rc = window_entry(&again, &pos, &e);
    free(again.grown ? again.grown : again.buf);
    return rc ? 0 : again.base + pos;
}

/* Entries [from, to) of the index, in order, into the tensor table. The
 * whole index is one lane; a split parse (below) has two, one a thread. */
typedef struct parse_lane {
    size_t from, to;
    int id;                 /* the names helper's lane */
    tzr_arena *strings;     /* names and dtypes go here */
    size_t dims_used;       /* r->dims from here on */
    uint64_t prev_end;      /* where the last record parsed ends */
    uint64_t first_header;  /* entry `from`'s header offset */
    uint64_t data_sum;
    uint64_t nbytes, stored; /* as reader_count_tensor, added to r's at the end */
    size_t empty;
    int overflow;
} parse_lane;

/* *pos ends after the lane's last entry (in the window). */
static int parse_entries(tzr_reader *r, index_window *w, size_t *pos, parse_lane *l, names_helper *names) {
    uint64_t data_start = TZR_PROLOGUE_LEN + r->fh.metadata_len;
    dtype_memo memo = {0};
    for (size_t i = l->from; i < l->to; i++) {
        tzr_index_entry e;
        int rc = window_entry(w, pos, &e);
        uint64_t at = w->base + *pos; /* where the entry starts (or the window, when it ran past) */
        if (rc == TZR_ETRUNC)
            rc = tzr_fail(TZR_EFORMAT, "%s: index entry %zu at offset %llu runs past the %llu-byte index",
                          r->src->name, i, (unsigned long long)(TZR_PROLOGUE_LEN + at), (unsigned long long)w->total);
        if (!rc) {
            at -= tzr_index_entry_size(e.name_len, e.dtype_len, e.ndim);
            if (i == l->from) l->first_header = e.header_offset;
            rc = load_entry(r, i, &e, TZR_PROLOGUE_LEN + at, data_start, &l->prev_end, &l->dims_used, &memo,
                            l->strings);
        }
        if (rc) return rc;
        const tzr_tensor_info *t = &r->t[i].info;
        if (__builtin_add_overflow(l->nbytes, t->nbytes, &l->nbytes) ||
            __builtin_add_overflow(l->stored, t->data_length, &l->stored))
            l->overflow = 1;
        l->empty += t->data_length == 0;
        if (!tzr_add_ok(l->data_sum, e.data_length, &l->data_sum)) l->data_sum = UINT64_MAX;
        if (names && (i + 1 - l->from) % NAMES_BATCH == 0) names_helper_post(names, l->id, i + 1);
    }
    return 0;
}

/* The lanes' sums into the reader's totals and *data_sum. */
static void add_lane(tzr_reader *r, const parse_lane *l, uint64_t *data_sum) {
    if (l->overflow || __builtin_add_overflow(r->total_nbytes, l->nbytes, &r->total_nbytes) ||
        __builtin_add_overflow(r->total_stored, l->stored, &r->total_stored))
        r->totals_known = 0;
    r->total_empty += l->empty;
    if (!tzr_add_ok(*data_sum, l->data_sum, data_sum)) *data_sum = UINT64_MAX;
}

/* Split parse, for large indexes: a thread parses the second part of the
 * entries while the opening thread parses the first, each filling its own
 * rows of the table (and its faults: fresh table pages cost as much as the
 * parse here). Entries carry no length, so the thread first finds where
 * its part starts by a pass that reads only lengths, through a window of
 * its own. Its first entry is checked against the first part's last
 * record at the join. Any error, in either part or at the join, and any
 * duplicate name, has the whole index parsed again in order on one
 * thread: what is reported is exactly what the one-thread parse reports.
 * A thread that has not begun its part when the opener reaches it (kept
 * off the CPU on a busy machine) loses it: the opener parses on, in order.
 * From SPLIT_MIN entries; TZR_INDEX_SPLIT=0 (or TZR_INDEX_THREAD=0) off. */
#define SPLIT_MIN 16384
#define SPLIT_CHECK 512 /* length-pass entries between looks at the claim */

enum { PART_FINDING, PART_PARSING, PART_TAKEN, PART_FAILED };

typedef struct split_part {
    tzr_reader *r;
    pthread_t th;
    index_window w;         /* its own, or the one in memory */
    uint8_t *own;           /* w's first buffer (sliding) */
    size_t pos;
    parse_lane lane;
    tzr_arena strings;
    names_helper *names;
    atomic_int state;       /* PART_*: who parses the part */
    int rc;
} split_part;

/* Split threads started and parts the opener took back, over all opens;
 * tests set order to 1 to have the thread always parse its part, 2 to
 * have the opener always take it back. */
TZR_HIDDEN atomic_size_t tzr_reader_split_parts, tzr_reader_split_taken;
TZR_HIDDEN atomic_int tzr_reader_split_order;

static int split_find_start(split_part *p) {
    index_window *w = &p->w;
    if (w->src) {
        p->own = malloc(w->cap);
        if (!p->own) return TZR_ENOMEM;
        w->buf = p->own;
        int rc = window_slide(w, 0);
        if (rc) return rc;
    }
    size_t dims = 0;
    for (size_t i = 0; i < p->lane.from;) {
        if (i % SPLIT_CHECK == 0 && atomic_load(&p->state) == PART_TAKEN) return 0;
        uint32_t ndim = 0;
        size_t sz = tzr_index_entry_skip(w->buf + p->pos, w->len - p->pos, &ndim);
        if (!sz) {
            if (!w->src || w->base + w->len >= w->total) return TZR_ETRUNC; /* the first part reports it */
            int rc = window_slide(w, p->pos);
            if (rc) return rc;
            p->pos = 0;
            continue;
        }
        p->pos += sz;
        dims += ndim;
        i++;
    }
    p->lane.dims_used = dims;
    return 0;
}

static void *split_main(void *arg) {
    split_part *p = arg;
    p->rc = split_find_start(p);
    while (!p->rc && atomic_load(&tzr_reader_split_order) == 2 && atomic_load(&p->state) != PART_TAKEN) sched_yield();
    int expect = PART_FINDING;
    if (!atomic_compare_exchange_strong(&p->state, &expect, p->rc ? PART_FAILED : PART_PARSING)) return NULL;
    if (!p->rc) p->rc = parse_entries(p->r, &p->w, &p->pos, &p->lane, p->names);
    return NULL;
}

/* 1: the thread runs the part [from, n). */
static int split_start(split_part *p, tzr_reader *r, const index_window *w, size_t from, names_helper *names) {
    memset(p, 0, sizeof *p);
    atomic_init(&p->state, PART_FINDING);
    p->r = r;
    p->w = *w;
    if (w->src) p->w = (index_window){w->src, NULL, w->cap, NULL, 0, 0, w->total};
    p->lane = (parse_lane){.from = from, .to = r->n, .id = 1, .strings = &p->strings};
    /* Its names and dtypes fit in what is left of the index after where it starts. */
    p->strings.block_size = (size_t)w->total + 64;
    p->names = names;
    if (tzr_thread_start(&p->th, split_main, p) != 0) return 0;
    atomic_fetch_add_explicit(&tzr_reader_split_parts, 1, memory_order_relaxed);
    return 1;
}

static size_t split_point(const tzr_reader *r) {
    const char *env = getenv("TZR_INDEX_SPLIT");
    if (r->n < SPLIT_MIN || index_threads_off() || (env && strcmp(env, "0") == 0)) return r->n;
    /* Past the middle: the thread starts late by its length pass (0.8 ms
     * of a 6 ms parse of 100k entries, measured). Whole names batches, so
     * the helper takes the first part in full. */
    return (size_t)((uint64_t)r->n * 37 / 64) / NAMES_BATCH * NAMES_BATCH;
}

static int dup_error(tzr_reader *r, index_window *w, size_t dup, size_t other) {
    char nb[TZR_NAMEBUF];
    const tzr_tensor_info *t = &r->t[dup].info;
    return tzr_fail(TZR_EDUP, "%s: tensor '%s' (index entry %zu at offset %llu): duplicate name (also entry %zu)",
                    r->src->name, tzr_printable(t->name, t->name_len, nb, sizeof nb), dup,
                    (unsigned long long)(TZR_PROLOGUE_LEN + entry_offset(w, dup)), other);
}

static int parse_index(tzr_reader *r, index_window *w, size_t *end, uint64_t *records_end, uint64_t *data_bytes) {
    uint64_t n = r->fh.tensor_count, len = w->total;
    r->n = (size_t)n;
    r->t = tzr_map_zeroed(n ? n : 1, sizeof *r->t);
    r->t_cap = n ? n : 1;
    r->dims = tzr_alloc_big(((size_t)(len / 4) + 1) * sizeof *r->dims); /* filled as entries parse */
    r->nbuckets = 16;
    while (r->nbuckets < 2 * n) r->nbuckets *= 2;
    r->buckets = tzr_map_zeroed(r->nbuckets, sizeof *r->buckets);
    if (!r->t || !r->dims || !r->buckets) return tzr_fail(TZR_ENOMEM, "out of memory for %llu tensors", (unsigned long long)n);
    r->strings.block_size = (size_t)len + 64; /* names and dtypes fit in the index */
    size_t pos = 0;
    r->totals_known = 1;
    size_t split = split_point(r);
    names_helper names;
    int helped = names_helper_start(&names, r, split);
    split_part part;
    int split_on = split < r->n && split_start(&part, r, w, split, helped ? &names : NULL);
    if (!split_on) split = r->n; /* the helper's first lane then runs on to the end, in order */
    parse_lane a = {.from = 0, .to = split_on ? split : r->n, .id = 0, .strings = &r->strings};
    int rc = parse_entries(r, w, &pos, &a, helped ? &names : NULL);
    if (split_on) {
        while (atomic_load(&tzr_reader_split_order) == 1 && atomic_load(&part.state) == PART_FINDING) sched_yield();
        int expect = PART_FINDING;
        if (atomic_compare_exchange_strong(&part.state, &expect, PART_TAKEN) && !rc) {
            /* The thread has not begun: parse on from here, as one thread would. */
            atomic_fetch_add_explicit(&tzr_reader_split_taken, 1, memory_order_relaxed);
            a.from = a.to;
            a.to = r->n;
            rc = parse_entries(r, w, &pos, &a, helped ? &names : NULL);
        }
        pthread_join(part.th, NULL);
        if (atomic_load(&part.state) == PART_TAKEN) {
            tzr_arena_adopt(&r->strings, &part.strings);
            free(part.w.grown);
            free(part.own);
            split_on = 0;
            split = r->n; /* names: the helper's first lane ran on to the end */
        }
    }
    size_t dup = 0, other = 0, next[2] = {0, split}; /* without a helper: all names are ours */
    int drc = 0;
    if (helped) names_helper_end(&names, next, &drc, &dup, &other);
    if (split_on) {
        tzr_arena_adopt(&r->strings, &part.strings); /* freed with the reader, whatever follows */
        int again = rc || part.rc || part.lane.first_header < a.prev_end;
        if (!again && !drc) drc = index_names_range(r, next[0], split, &dup, &other);
        if (!again && !drc) drc = index_names_range(r, next[1], r->n, &dup, &other);
        if (!again && !drc) { /* the second part's window goes on to the padding check */
            free(w->grown);
            *w = part.w;
            if (part.w.grown) free(part.own);
            w->grown = part.w.grown ? part.w.grown : part.own;
            pos = part.pos;
            add_lane(r, &a, data_bytes);
            add_lane(r, &part.lane, data_bytes);
            *end = pos;
            *records_end = part.lane.prev_end;
            return 0;
        }
        free(part.w.grown);
        free(part.own);
        /* Again in order, on this thread, for the one-thread result. */
        memset(r->buckets, 0, r->nbuckets * sizeof *r->buckets);
        r->total_nbytes = r->total_stored = 0;
        r->total_empty = 0;
        r->totals_known = 1;
        pos = 0;
        if (w->src) {
            w->base = w->len = 0;
            rc = window_slide(w, 0);
            if (rc) return rc;
        }
        a = (parse_lane){.from = 0, .to = r->n, .id = 0, .strings = &r->strings};
        rc = parse_entries(r, w, &pos, &a, NULL);
        next[0] = next[1] = 0;
        split = r->n;
        drc = 0;
    }
    if (rc) return rc;
    if (!drc) drc = index_names_range(r, next[0], split, &dup, &other);
    if (drc) return dup_error(r, w, dup, other); /* find the entry again, for its offset */
    add_lane(r, &a, data_bytes);
    *end = pos; /* in the window */
    *records_end = n ? a.prev_end : TZR_PROLOGUE_LEN + r->fh.metadata_len;
    return 0;
}

/* The prologue's total (offset 41; tensorizer writes it with the count)
 * must be what the entries hold. */
static int check_data_total(const tzr_reader *r, uint64_t data_bytes) {
    if (data_bytes == r->fh.tensor_size) return 0;
    return tzr_fail(TZR_EFORMAT,
                    "%s: offset 41: the prologue's total data size says %llu bytes but the %llu index entries "
                    "hold %llu: the tensor count (offset 57) or the index is wrong",
                    r->src->name, (unsigned long long)r->fh.tensor_size, (unsigned long long)r->n,
                    (unsigned long long)data_bytes);
}

/* After the counted entries (and a frame directory) the index region is
 * zero padding. Anything else means the count at offset 57 is lower than
 * the entries written: a damaged prologue or a write that never finished
 * (tensorizer stores the count only when it rewrites the header). */
static int check_index_padding(const tzr_reader *r, index_window *w, size_t end) {
    for (;;) {
        for (size_t k = end; k < w->len; k++)
            if (w->buf[k])
                return tzr_fail(TZR_EFORMAT,
                                "%s: offset %llu: the index holds more entries than the %llu the prologue counts "
                                "(offset 57): a damaged prologue or an unfinished write",
                                r->src->name, (unsigned long long)(TZR_PROLOGUE_LEN + w->base + k),
                                (unsigned long long)r->fh.tensor_count);
        if (!w->src || w->base + w->len >= w->total) return 0;
        int rc = window_slide(w, w->len);
        if (rc) return rc;
        end = 0;
    }
}

/* The marker's 8 bytes must be zero. */
static int check_marker_bytes(tzr_reader *r, const uint8_t m[8]) {
    if (tzr_ld64(m) == 0) return 0;
    return tzr_fail(TZR_EFORMAT,
                    "%s: offset %llu: the end-of-tensors marker is not zero: more records follow than the "
                    "index lists (tensor count at offset 57)",
                    r->src->name, (unsigned long long)r->records_end);
}

int tzr_reader_check_end_marker(tzr_reader *r) {
    if (__atomic_load_n(&r->marker_checked, __ATOMIC_ACQUIRE)) return 0;
    uint8_t m[8];
    int rc = r->src->read_at(r->src, m, sizeof m, r->records_end);
    if (rc)
        return tzr_fail_prefix(rc, "%s: reading the end-of-tensors marker at offset %llu: ", r->src->name,
                               (unsigned long long)r->records_end);
    rc = check_marker_bytes(r, m);
    if (!rc) __atomic_store_n(&r->marker_checked, 1, __ATOMIC_RELEASE);
    return rc;
}

/* The records account for every byte: the last one ends 8 bytes before the
 * end of the file, and those 8 bytes are the zero end-of-tensors marker.
 * `head` holds the file's first `head_len` bytes (read at open). Where
 * each read is a request, a marker outside them is read by the first load,
 * beside its data, rather than by one more round trip at open. */
static int check_end_marker(tzr_reader *r, uint64_t records_end, const uint8_t *head, size_t head_len) {
    tzr_source *src = r->src;
    r->records_end = records_end;
    unsigned long long e = (unsigned long long)records_end, size = (unsigned long long)src->size;
    if (src->size < records_end + 8)
        return tzr_fail(TZR_ETRUNC,
                        "%s: offset %llu: the file ends %llu bytes after the last record, before the 8-byte "
                        "end-of-tensors marker: truncated",
                        src->name, e, size - e);
    if (src->size > records_end + 8)
        return tzr_fail(TZR_EFORMAT,
                        "%s: offset %llu: %llu bytes follow the end-of-tensors marker: the tensor count (offset 57) "
                        "or the index is wrong, or the file has trailing data",
                        src->name, e + 8, size - e - 8);
    if (records_end + 8 <= head_len) {
        r->marker_checked = 1;
        return check_marker_bytes(r, head + records_end);
    }
    return src->pack_reads ? 0 : tzr_reader_check_end_marker(r);
}

int tzr_reader_open_source(tzr_reader **out, tzr_source *src, const tzr_reader_options *opt) {
    *out = NULL;
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    /* The first layout ends before crypt_params (added later, then http). */
    int orc = TZR_OPTS(tzr_reader_options, o, opt, offsetof(tzr_reader_options, crypt_params));
    if (o.crypt_params) o.crypt = *o.crypt_params; /* by pointer wins */
    opt = &o;
    if (!src) return tzr_fail(TZR_EINVAL, "NULL source");
    if (orc) {
        tzr_source_free(src);
        return orc;
    }
    tzr_reader *r = calloc(1, sizeof *r);
    if (!r) {
        tzr_source_free(src);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    r->src = src;
    pthread_mutex_init(&r->lock, NULL);
    r->verify = opt->verify;
    int rc = 0;
    if (opt->crypt.key) {
        memcpy(r->key, opt->crypt.key, 32);
        r->have_key = 1;
    }
    if (opt->crypt.password) {
        r->password = malloc(opt->crypt.password_len + 1);
        if (!r->password) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        else memcpy(r->password, opt->crypt.password, opt->crypt.password_len);
        r->password_len = opt->crypt.password_len;
    }
    /* One read for the prologue and the start of the index: on S3 that is
     * one request at open instead of two, and the index's entries usually
     * end well before its reservation (tensorizer reserves 256 KiB). */
    size_t first = src->size < TZR_PROLOGUE_LEN + FIRST_INDEX_READ ? (size_t)src->size
                                                                   : TZR_PROLOGUE_LEN + FIRST_INDEX_READ;
    uint8_t *head = malloc(first ? first : 1);
    if (!rc && !head) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    size_t plen = first < TZR_PROLOGUE_LEN ? first : TZR_PROLOGUE_LEN;
    if (!rc) rc = src->read_at(src, head, first, 0);
    int kind = rc ? TZR_FORMAT_UNKNOWN : tzr_sniff_format(head, first, src->size);
    if (!rc && kind == TZR_FORMAT_SAFETENSORS) {
        rc = (r->have_key || r->password) ? tzr_fail(TZR_ECRYPT, "%s: a key was given but safetensors files are never encrypted", src->name)
                                          : reader_open_safetensors(r, head, first);
        free(head);
        if (rc) {
            tzr_reader_free(r);
            return rc;
        }
        *out = r;
        return 0;
    }
    if (!rc && kind == TZR_FORMAT_ST_CUT)
        rc = tzr_fail(TZR_ETRUNC, "%s: truncated safetensors file: its header length (byte 0) is %llu, so the "
                      "header ends at byte %llu, but the file is %llu bytes", src->name,
                      (unsigned long long)tzr_ld64(head), (unsigned long long)tzr_ld64(head) + 8,
                      (unsigned long long)src->size);
    if (!rc && kind != TZR_FORMAT_TENSORIZER) rc = tzr_fail(TZR_EFORMAT, "%s: %s", src->name, tzr_format_what(kind));
    if (!rc) rc = tzr_parse_prologue(head, plen, &r->fh);
    if (rc && tzr_last_error()[0] && strncmp(tzr_last_error(), src->name, strlen(src->name)) != 0)
        tzr_fail_prefix(rc, "%s: ", src->name);
    uint64_t max_index = opt->max_index_bytes ? opt->max_index_bytes : DEFAULT_MAX_INDEX;
    uint64_t max_tensors = opt->max_tensors ? opt->max_tensors : DEFAULT_MAX_TENSORS;
    if (max_tensors > UINT32_MAX - 1) max_tensors = UINT32_MAX - 1; /* buckets hold index + 1 in 32 bits */
    if (!rc && r->fh.metadata_len > src->size - TZR_PROLOGUE_LEN)
        rc = tzr_fail(TZR_ETRUNC, "%s: offset 65: index length %llu runs past the end of the file (%llu bytes)",
                      src->name, (unsigned long long)r->fh.metadata_len, (unsigned long long)src->size);
    if (!rc && r->fh.metadata_len > max_index)
        rc = tzr_fail(TZR_ELIMIT, "%s: offset 65: index length %llu exceeds the limit %llu", src->name,
                      (unsigned long long)r->fh.metadata_len, (unsigned long long)max_index);
    if (!rc && (r->fh.tensor_count > max_tensors || r->fh.tensor_count > r->fh.metadata_len / 29))
        rc = tzr_fail(TZR_EFORMAT, "%s: offset 57: tensor count %llu cannot fit in a %llu-byte index", src->name,
                      (unsigned long long)r->fh.tensor_count, (unsigned long long)r->fh.metadata_len);
    r->crypt_info = tzr_has_crypt_info(&r->fh);
    r->comp_info = tzr_has_comp_info(&r->fh);
    if (!rc && (r->have_key || r->password) && !r->crypt_info)
        rc = tzr_fail(TZR_ECRYPT, "%s: a key was given but the file is not encrypted", src->name);
    if (!rc) {
        size_t have = first - plen; /* index bytes read with the prologue */
        if (have > r->fh.metadata_len) have = (size_t)r->fh.metadata_len;
        const uint8_t *index = head + plen;
        size_t need = index_needed(index, have, r->fh.tensor_count, r->comp_info, r->fh.metadata_len);
        uint8_t *full = NULL;
        index_window w = {NULL, (uint8_t *)index, have, NULL, 0, have, have};
        /* Entries past the first read, no frame directory, a local source:
         * the rest slides through the first read's buffer (index_window;
         * the records, and so the end marker, lie past that read). */
        if (need == 0 && !r->comp_info && !src->pack_reads && r->fh.metadata_len > have) {
            w.src = src;
            w.cap = first - plen;
            w.total = r->fh.metadata_len;
        } else if (need == 0 || need > have) { /* the rest, in one more read: what is needed, when known */
            /* and a little more, so the padding check sees where a next entry would be */
            size_t want = need && r->fh.metadata_len - need > PADDING_SEEN ? need + PADDING_SEEN
                                                                             : (size_t)r->fh.metadata_len;
            full = tzr_alloc_big(want);
            if (!full) rc = tzr_fail(TZR_ENOMEM, "out of memory for a %zu-byte index", want);
            if (!rc) memcpy(full, index, have);
            if (!rc && want > have) rc = src->read_at(src, full + have, want - have, TZR_PROLOGUE_LEN + have);
            index = full;
            have = want;
            if (!need) need = want;
            w = (index_window){NULL, (uint8_t *)index, have, NULL, 0, have, have};
        }
        size_t end = 0;
        uint64_t records_end = 0, data_bytes = 0;
        if (!rc) rc = parse_index(r, &w, &end, &records_end, &data_bytes);
        if (!rc && r->comp_info) rc = parse_dir(r, index, have, end, &end);
        if (!rc) rc = check_index_padding(r, &w, end);
        if (!rc) rc = check_data_total(r, data_bytes);
        if (!rc) rc = check_end_marker(r, records_end, head, first);
        free(full);
        free(w.grown);
    }
    free(head);
    if (!rc && opt->read_headers) rc = tzr_reader_load_headers(r, 0, r->n, NULL);
    if (rc) {
        tzr_reader_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int tzr_reader_open(tzr_reader **out, const char *path, const tzr_reader_options *opt) {
    *out = NULL;
    tzr_source *src;
    const struct tzr_http_options *http =
        opt && opt->struct_size > offsetof(tzr_reader_options, http) ? opt->http : NULL;
    int rc = tzr_source_open_path(&src, path, 0, http);
    if (rc) return rc;
    return tzr_reader_open_source(out, src, opt);
}

void tzr_reader_free(tzr_reader *r) {
    TZR_KEEP_ERROR;
    if (!r) return;
    tzr_arena_free(&r->strings);
    free(r->st_json);
    tzr_arena_free(&r->headers);
    tzr_unmap_zeroed(r->t, r->t_cap, sizeof *r->t);
    free(r->dims);
    tzr_unmap_zeroed(r->buckets, r->nbuckets, sizeof *r->buckets);
    if (r->hdr_sha) tzr_unmap_zeroed(r->hdr_sha, r->n ? r->n : 1, 33);
    free(r->dir);
    free(r->dir_bytes);
    if (r->password) {
        memset(r->password, 0, r->password_len);
        free(r->password);
    }
    if (r->dkeys) memset(r->dkeys, 0, r->ndkeys * sizeof *r->dkeys);
    free(r->dkeys);
    memset(r->key, 0, sizeof r->key);
    pthread_mutex_destroy(&r->lock);
    tzr_source_free(r->src);
    free(r);
}

uint32_t tzr_reader_data_version(const tzr_reader *r) { return r->fh.version; }
int tzr_reader_format(const tzr_reader *r) { return r->safetensors ? TZR_FORMAT_SAFETENSORS : TZR_FORMAT_TENSORIZER; }
int tzr_reader_encrypted(const tzr_reader *r) { return r->crypt_info; }
int tzr_reader_compressed(const tzr_reader *r) { return r->comp_info; }

int tzr_reader_has_dir(const tzr_reader *r) { return r->dir != NULL; }

int tzr_reader_has_header(tzr_reader *r, size_t i) {
    pthread_mutex_lock(&r->lock);
    int have = r->t[i].hdr_bytes != NULL;
    pthread_mutex_unlock(&r->lock);
    return have;
}

int tzr_reader_comp(tzr_reader *r, size_t i, const tzr_comp_info **ci) {
    if (r->dir) {
        *ci = &r->dir[i].ci;
        return 0;
    }
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(r, i, &h);
    if (!rc) *ci = &h->comp;
    return rc;
}
size_t tzr_reader_count(const tzr_reader *r) { return r->n; }
tzr_source *tzr_reader_source(const tzr_reader *r) { return r->src; }

const tzr_tensor_info *tzr_reader_tensor(const tzr_reader *r, size_t i) {
    return i < r->n ? &r->t[i].info : NULL;
}

int tzr_reader_find(const tzr_reader *r, const char *name, size_t name_len, size_t *index) {
    if (find_slot(r, name, name_len, index) != 0) {
        char nb[TZR_NAMEBUF];
        return tzr_fail(TZR_ENOTFOUND, "%s: no tensor named '%s'", r->src->name,
                        tzr_printable(name, name_len, nb, sizeof nb));
    }
    return 0;
}

/* Read, decrypt and (optionally) verify tensor i into dst. */
static int read_tensor(tzr_reader *r, size_t i, void *dst, size_t dst_len, int verify) {
    if (i >= r->n) return tzr_fail(TZR_EINVAL, "tensor index %zu out of range (%zu tensors)", i, r->n);
    const tzr_tensor_info *t = &r->t[i].info;
    char what[TZR_NAMEBUF + 256];
    if (dst && dst_len < t->nbytes)
        return tzr_fail(TZR_EINVAL, "%s: buffer of %zu bytes is smaller than the tensor (%llu)",
                        tzr_reader_what(r, i, what, sizeof what), dst_len, (unsigned long long)t->nbytes);
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(r, i, &h);
    if (rc) return rc;
    /* Compressed data is read into its own buffer, then expanded into dst
     * (or a buffer of its own when only verifying). */
    int coded = tzr_codec_find(h->comp.codec) != NULL; /* framed by a codec */
    uint8_t *buf = coded ? NULL : dst, *out = dst, *scratch = NULL;
    if (!buf && t->data_length) {
        buf = malloc((size_t)t->data_length);
        if (!buf) return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    if (coded && !out && !(out = malloc((size_t)t->nbytes))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    if (coded && !rc && h->comp.planes > 1 && !(scratch = malloc(h->comp.frame_size)))
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
    if (rc) {
        free(buf);
        if (out != dst) free(out);
        return rc;
    }
    if (t->data_length) rc = r->src->read_at(r->src, buf, (size_t)t->data_length, t->data_offset);
    if (rc) rc = tzr_fail_prefix(rc, "%s: ", tzr_reader_what(r, i, what, sizeof what));
    if (!rc && h->crypt.encrypted && t->data_length) {
        uint8_t key[32];
        rc = tzr_reader_tensor_key(r, i, key);
        if (!rc) rc = tzr_crypt_open(&h->crypt, key, t->data_length, 0, buf, (size_t)t->data_length);
        if (rc && tzr_last_error_code() == rc && !tzr_last_error_tensor()) {
            tzr_fail_prefix(rc, "%s at offset %llu: ", tzr_reader_what(r, i, what, sizeof what),
                            (unsigned long long)t->data_offset);
            tzr_error_where(NULL, t->data_offset);
        }
        memset(key, 0, sizeof key);
    }
    if (!rc && coded) {
        tzr_zctx *z = tzr_zctx_new();
        if (!z) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        else rc = tzr_zdecompress(z, &h->comp, 0, h->comp.nframes, buf, t->data_length, out, scratch, t->data_offset);
        tzr_zctx_free(z);
        if (rc) tzr_fail_prefix(rc, "%s: ", tzr_reader_what(r, i, what, sizeof what));
    }
    if (!rc && verify) {
        tzr_hasher hs;
        rc = tzr_reader_hash_begin(r, i, 1, &hs);
        if (!rc) {
            tzr_hasher_update(&hs, coded ? out : buf, (size_t)t->uncompressed_length);
            rc = tzr_reader_hash_check(r, i, &hs);
        }
    }
    if (!rc && t->meta && dst) memset(dst, 0, (size_t)t->nbytes);
    if (buf != dst) free(buf);
    if (out != dst) free(out);
    free(scratch);
    return rc;
}

int tzr_reader_read(tzr_reader *r, size_t i, void *dst, size_t dst_len) {
    if (!dst && i < r->n && r->t[i].info.nbytes) return tzr_fail(TZR_EINVAL, "NULL destination");
    return read_tensor(r, i, dst, dst_len, r->verify);
}

int tzr_reader_verify(tzr_reader *r, size_t i) { return read_tensor(r, i, NULL, 0, 1); }
