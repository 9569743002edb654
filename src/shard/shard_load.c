/* Loading one rank's slices of a sharded checkpoint for any rank count,
 * through the pipeline (tzr_load).
 *
 * A target piece and a source slice are both boxes in the global index
 * space: full in every dimension except their split dimension. For every
 * shard file one pipelined load reads the shard tensors the rank needs,
 * each with the byte selection of its intersection ("cut") with the
 * target: within the source array the cut differs from it in at most the
 * target's split dimension, so it is a run of bytes repeated at a stride.
 * A mapping sink turns each delivered source range into the target's
 * offsets: it cuts the range into runs contiguous in both arrays (all
 * dimensions after the last one the cut restricts are whole in both) and
 * hands each to the destination sink, whose tensor index is the index in
 * the set. Verified loads read whole shard tensors (their hashes cover
 * them whole); whole global tensors loaded into host memory are also
 * checked against the manifest sha256. */
#include "thread.h"
#include "hash.h"
#include "mem.h"
#include "reader_internal.h"
#include "shard_internal.h"
#include "tzr_load.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* The split dim and this rank's chunk of entry e under parsed rules. */
static void target_of(const shard_entry *e, const shard_rules *rl, int rank, int nranks, int *dim, uint64_t *offset,
                      uint64_t *length) {
    int d = e->pub.dim;
    shard_rules_match(rl, e->name, e->pub.name_len, e->pub.ndim, &d);
    *offset = *length = 0;
    if (nranks == 1 || e->pub.ndim == 0) d = TZR_SHARD_REPLICATED;
    *dim = d;
    if (d != TZR_SHARD_REPLICATED) tzr_shard_chunk(e->shape[d], nranks, rank, offset, length);
}

int tzr_shard_target(const tzr_shard_set *s, size_t i, int rank, int nranks, const char *rules, int *dim,
                     uint64_t *offset, uint64_t *length) {
    if (!s || i >= s->tb.n || nranks < 1 || rank < 0 || rank >= nranks)
        return tzr_fail(TZR_EINVAL, "target: bad tensor %zu or rank %d of %d", i, rank, nranks);
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl);
    if (rc) return rc;
    target_of(&s->tb.t[i], &rl, rank, nranks, dim, offset, length);
    shard_rules_free(&rl);
    return 0;
}

typedef struct box {
    uint32_t ndim;
    uint64_t lo[TZR_MAX_DIMS], hi[TZR_MAX_DIMS];
} box;

/* Global box of a piece held along dim (or whole). */
static void box_of(box *b, const shard_entry *e, int dim, uint64_t off, uint64_t len) {
    b->ndim = e->pub.ndim;
    for (uint32_t d = 0; d < b->ndim; d++) b->lo[d] = 0, b->hi[d] = e->shape[d];
    if (dim >= 0) b->lo[dim] = off, b->hi[dim] = off + len;
}

/* Only the first ndim bounds: a box is 4 KiB, a tensor has a few dims. */
static void box_copy(box *to, const box *from) {
    to->ndim = from->ndim;
    memcpy(to->lo, from->lo, from->ndim * sizeof *to->lo);
    memcpy(to->hi, from->hi, from->ndim * sizeof *to->hi);
}

/* Row-major byte strides of the array lo..hi. */
static void strides(const uint64_t *lo, const uint64_t *hi, uint32_t nd, uint32_t itemsize, uint64_t *st) {
    uint64_t acc = itemsize;
    for (uint32_t d = nd; d-- > 0;) {
        st[d] = acc;
        acc *= hi[d] - lo[d];
    }
}

static uint64_t offset_in(const uint64_t *lo, uint32_t nd, const uint64_t *st, const uint64_t *x) {
    uint64_t o = 0;
    for (uint32_t d = 0; d < nd; d++) o += (x[d] - lo[d]) * st[d];
    return o;
}

/* How one shard tensor's bytes reach one target. Its bounds and strides
 * live in a per-load arena, ndim of each (MAPPING_WORDS arrays): with
 * TZR_MAX_DIMS-sized arrays a mapping was 16 KiB, and a 100k-tensor set
 * cleared and touched 1.6 GB of them per shard. */
#define MAPPING_WORDS 8
typedef struct mapping {
    size_t target;               /* index in the set = the destination's index */
    uint32_t ndim;
    uint64_t *src_lo, *src_hi, *dst_lo, *dst_hi, *cut_lo, *cut_hi, *ss, *ds;
    int last;                    /* last dim the cut restricts (global), -1: none */
    uint64_t run;                /* bytes contiguous in both arrays */
    uint64_t itemsize;
} mapping;

/* One shard's load: local tensor index -> the target's index + 1 (0: not
 * needed) and its mapping, NULL where the shard tensor is one run of the
 * target (a replicated tensor, the rank's own slice, a slice of a tensor
 * cut along its first dim): its bytes go to at[] plus the same offsets,
 * through the destination's own direct path, with no box work. */
typedef struct shard_job {
    tzr_sink base;
    tzr_sink *dest;
    size_t *tgt;
    mapping **map;
    uint64_t *at;          /* without a mapping: where in the target its bytes start */
    size_t nlocal, nwhole; /* nwhole: local tensors read whole into one run of their target */
} shard_job;

/* words: MAPPING_WORDS * ndim of the arena, for this mapping alone. */
static void mapping_init(mapping *m, const shard_entry *e, size_t target, const box *src, const box *dst,
                         const box *cut, uint64_t *words) {
    uint32_t nd = src->ndim;
    size_t sz = nd * sizeof *words;
    m->target = target;
    m->ndim = nd;
    uint64_t **arr[MAPPING_WORDS] = {&m->src_lo, &m->src_hi, &m->dst_lo, &m->dst_hi,
                                     &m->cut_lo, &m->cut_hi, &m->ss,     &m->ds};
    for (int k = 0; k < MAPPING_WORDS; k++) *arr[k] = words + (size_t)k * nd;
    memcpy(m->src_lo, src->lo, sz);
    memcpy(m->src_hi, src->hi, sz);
    memcpy(m->dst_lo, dst->lo, sz);
    memcpy(m->dst_hi, dst->hi, sz);
    memcpy(m->cut_lo, cut->lo, sz);
    memcpy(m->cut_hi, cut->hi, sz);
    m->itemsize = e->pub.itemsize;
    strides(src->lo, src->hi, nd, e->pub.itemsize, m->ss);
    strides(dst->lo, dst->hi, nd, e->pub.itemsize, m->ds);
    m->last = -1;
    for (uint32_t d = 0; d < e->pub.ndim; d++)
        if (cut->lo[d] != 0 || cut->hi[d] != e->shape[d]) m->last = (int)d;
    uint64_t inner = e->pub.itemsize;
    for (uint32_t d = m->last < 0 ? 0 : (uint32_t)m->last + 1; d < e->pub.ndim; d++) inner *= e->shape[d];
    m->run = m->last < 0 ? inner : (cut->hi[m->last] - cut->lo[m->last]) * inner;
}

/* The cut as bytes of the source array: it differs from the source box in
 * the target's split dim at most, so its last differing dim k gives runs of
 * its extent times the inner bytes, at the stride of dim k - 1. */
static int mapping_selection(const mapping *m, tzr_byte_selection *sel) {
    int k = -1;
    uint32_t nd = m->ndim;
    for (uint32_t d = 0; d < nd; d++)
        if (m->cut_lo[d] != m->src_lo[d] || m->cut_hi[d] != m->src_hi[d]) k = (int)d;
    if (k < 0) return 0; /* the whole source tensor */
    uint64_t runs = 1;
    for (int d = 0; d < k; d++) runs *= m->cut_hi[d] - m->cut_lo[d];
    sel->offset = offset_in(m->src_lo, nd, m->ss, m->cut_lo);
    sel->run = (m->cut_hi[k] - m->cut_lo[k]) * m->ss[k];
    sel->stride = k > 0 ? m->ss[k - 1] : sel->run;
    sel->count = runs;
    sel->outer_count = 1;
    sel->outer_stride = runs * sel->stride;
    return 1;
}

/* Source byte `off` (inside the cut): where it goes in the target, and how
 * many bytes from there are contiguous in both arrays. */
static uint64_t mapping_dest(const mapping *m, uint64_t off, uint64_t *contiguous) {
    uint64_t x[TZR_MAX_DIMS], rest = off;
    for (uint32_t d = 0; d < m->ndim; d++) {
        x[d] = m->src_lo[d] + rest / m->ss[d];
        rest %= m->ss[d];
    }
    uint64_t in_run = rest; /* bytes into the run, counted from the cut's start along `last` */
    for (uint32_t d = m->last < 0 ? 0 : (uint32_t)m->last; d < m->ndim; d++)
        in_run += (x[d] - (m->last >= 0 && d == (uint32_t)m->last ? m->cut_lo[d] : 0)) * m->ss[d];
    *contiguous = m->run - in_run;
    return offset_in(m->dst_lo, m->ndim, m->ds, x) + rest;
}

static void *job_direct(tzr_sink *s, size_t index, uint64_t off, uint64_t len) {
    shard_job *j = (shard_job *)s;
    mapping *m = j->map[index];
    if (!j->dest->direct || !j->tgt[index]) return NULL;
    if (!m) return j->dest->direct(j->dest, j->tgt[index] - 1, j->at[index] + off, len);
    uint64_t room, at = mapping_dest(m, off, &room);
    return len <= room ? j->dest->direct(j->dest, m->target, at, len) : NULL;
}

static int job_submit(tzr_sink *s, int slot, size_t index, uint64_t off, const void *src, size_t len) {
    shard_job *j = (shard_job *)s;
    mapping *m = j->map[index];
    if (!m) return j->dest->submit(j->dest, slot, j->tgt[index] - 1, j->at[index] + off, src, len);
    const uint8_t *b = src;
    int rc = 0;
    while (len && !rc) {
        uint64_t room, at = mapping_dest(m, off, &room);
        size_t n = len < room ? len : (size_t)room;
        rc = j->dest->submit(j->dest, slot, m->target, at, b, n);
        off += n;
        b += n;
        len -= n;
    }
    return rc;
}

static int job_fence(tzr_sink *s, int slot, uint64_t *fence) {
    shard_job *j = (shard_job *)s;
    return j->dest->fence(j->dest, slot, fence);
}

static int job_wait(tzr_sink *s, uint64_t fence) {
    shard_job *j = (shard_job *)s;
    return j->dest->wait(j->dest, fence);
}

static void *job_alloc_staging(tzr_sink *s, size_t len) {
    shard_job *j = (shard_job *)s;
    return j->dest->alloc_staging(j->dest, len);
}

static void job_free_staging(tzr_sink *s, void *p, size_t len) {
    shard_job *j = (shard_job *)s;
    j->dest->free_staging(j->dest, p, len);
}

/* One progress over all shard loads. */
typedef struct overall {
    const tzr_load_options *opt;
    uint64_t before, total;
} overall;

static void overall_progress(void *ctx, uint64_t done, uint64_t total) {
    (void)total;
    overall *o = ctx;
    o->opt->progress(o->opt->progress_ctx, o->before + done, o->total);
}

static int job_filter(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)t;
    shard_job *j = ctx;
    return index < j->nlocal && j->tgt[index] != 0;
}

static int job_select(void *ctx, size_t index, const tzr_tensor_info *t, tzr_byte_selection *sel) {
    (void)t;
    const mapping *m = ((shard_job *)ctx)->map[index];
    return m ? mapping_selection(m, sel) : 0;
}

/* The target's tensor_info handed to the destination sink. */
typedef struct target {
    tzr_tensor_info info;
    uint64_t *shape; /* the local shape: ndim words of the load's arena */
    int dim;
    uint64_t offset, length;
} target;

/* The rules parsed once (per tensor, their parse was a tenth of the set's
 * load layer). */
static int make_targets(tzr_shard_set *s, int rank, int nranks, const char *rules, target *tg, uint64_t *shapes) {
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl);
    if (rc) return rc;
    for (size_t i = 0; i < s->tb.n; i++) {
        const shard_entry *e = &s->tb.t[i];
        if (i + 8 < s->tb.n) __builtin_prefetch(&s->tb.t[i + 8]);
        target *t = &tg[i];
        t->shape = shapes;
        shapes += e->pub.ndim;
        target_of(e, &rl, rank, nranks, &t->dim, &t->offset, &t->length);
        memcpy(t->shape, e->shape, e->pub.ndim * sizeof *t->shape);
        if (t->dim >= 0) t->shape[t->dim] = t->length;
        tzr_tensor_info *f = &t->info;
        memset(f, 0, sizeof *f);
        f->name = e->name;
        f->name_len = e->pub.name_len;
        f->type = TZR_STATE_DICT;
        f->module_idx = 0;
        f->dtype_str = e->dtype;
        f->dtype_len = e->pub.dtype_len;
        f->dtype = e->pub.dtype;
        f->itemsize = e->pub.itemsize;
        f->ndim = e->pub.ndim;
        f->shape = t->shape;
        f->numel = 1;
        for (uint32_t d = 0; d < f->ndim; d++) f->numel *= t->shape[d];
        f->nbytes = f->numel * f->itemsize;
        f->uncompressed_length = f->stored_length = f->data_length = f->nbytes;
        f->byte_planes = 1;
    }
    shard_rules_free(&rl);
    return 0;
}

/* How slice sl of e meets target t where the split dim alone decides it
 * (the slice and the target cut the same dim, or the target is whole;
 * every other dim is whole in both and not empty, as empty targets are
 * skipped): -1 not at all; 1 its bytes are one run of the target's, from
 * byte *at on (0: the slice is the target, N shards onto N ranks); 0: in
 * part, strided, or along two dims, for the boxes to work out. Per slice,
 * the boxes were a third of a rank's load of a 100k-tensor set, and a
 * mapping each most of a whole set's onto one rank. */
static int slice_fit(const shard_entry *e, const shard_slice *sl, const target *t, uint64_t *at) {
    int d = e->pub.dim;
    if (d == TZR_SHARD_REPLICATED || (t->dim != TZR_SHARD_REPLICATED && t->dim != d)) return 0;
    uint64_t lo = sl->offset, hi = sl->offset + sl->length;
    uint64_t tlo = t->dim == d ? t->offset : 0, thi = t->dim == d ? t->offset + t->length : e->shape[d];
    if ((lo > tlo ? lo : tlo) >= (hi < thi ? hi : thi)) return -1;
    if (lo < tlo || hi > thi) return 0; /* partly the target's */
    *at = 0;
    if (lo == tlo && hi == thi) return 1; /* the same array */
    /* Inside it: one run of its bytes when no dim before the cut one has
     * more than one index (a tensor cut along its first dim). */
    uint64_t inner = e->pub.itemsize;
    for (uint32_t k = 0; k < e->pub.ndim; k++) {
        if ((int)k < d && e->shape[k] != 1) return 0;
        if ((int)k > d) inner *= e->shape[k];
    }
    *at = (lo - tlo) * inner;
    return 1;
}

/* What one shard slice gives a target: whole to whole (m NULL), or
 * through a mapping. */
typedef struct hit {
    size_t target;
    const shard_slice *sl;
    mapping *m;
    uint64_t at; /* without m: where in the target its bytes start */
} hit;

/* Every slice the wanted targets need, in one pass over the tensors (a
 * pass per shard read every entry and its slices once per shard: cache
 * misses, a third of a 100k-tensor null load), with its mapping where it
 * needs one; any[k]: shard k gives some. Which tensor of its shard a
 * slice is becomes known when the shard opens (place_hits). */
static size_t find_hits(tzr_shard_set *s, int rank, const target *tg, const unsigned char *want, mapping *pool,
                        uint64_t *words, hit *hits, unsigned char *any) {
    size_t used = 0, wused = 0, nh = 0;
    for (size_t i = 0; i < s->tb.n; i++) {
        const shard_entry *e = &s->tb.t[i];
        /* Entries and their slices ahead of use: each was a cache miss. */
        if (i + 16 < s->tb.n) __builtin_prefetch(&s->tb.t[i + 16]);
        if (i + 8 < s->tb.n) __builtin_prefetch(s->tb.t[i + 8].slices);
        if (!want[i] || tg[i].info.nbytes == 0) continue;
        /* a replicated tensor is read from one holder, spread over ranks */
        if (e->pub.dim == TZR_SHARD_REPLICATED && tg[i].dim == TZR_SHARD_REPLICATED && e->nslices) {
            const shard_slice *sl = &e->slices[(size_t)rank % e->nslices];
            any[sl->shard] = 1;
            hits[nh++] = (hit){i, sl, NULL, 0}; /* whole to whole: no mapping */
            continue;
        }
        box dst;
        int have_dst = 0;
        size_t q = 0, qend = e->nslices;
        if (e->in_order && e->pub.dim >= 0 && tg[i].dim == e->pub.dim) {
            /* Only the slices meeting the target's range: a rank of N
             * read all N of every tensor's (cache misses over 800k
             * slices of an 8-shard 100k-tensor set). */
            uint64_t tlo = tg[i].offset, thi = tg[i].offset + tg[i].length, ext = e->shape[e->pub.dim];
            /* The first slice ending past tlo, from where an even cut puts
             * it (a search's first probes were cache misses of their own). */
            q = ext ? (size_t)((double)tlo / (double)ext * (double)e->nslices) : 0;
            if (q >= e->nslices) q = e->nslices - 1;
            while (q > 0 && e->slices[q - 1].offset + e->slices[q - 1].length > tlo) q--;
            while (q < e->nslices && e->slices[q].offset + e->slices[q].length <= tlo) q++;
            for (qend = q; qend < e->nslices && e->slices[qend].offset < thi;) qend++;
        }
        for (; q < qend; q++) {
            const shard_slice *sl = &e->slices[q];
            if (e->pub.dim == TZR_SHARD_REPLICATED && q != (size_t)rank % e->nslices) continue;
            uint64_t at;
            int fit = slice_fit(e, sl, &tg[i], &at);
            if (fit < 0) continue;
            if (fit > 0) { /* one run of the target: no mapping */
                any[sl->shard] = 1;
                hits[nh++] = (hit){i, sl, NULL, at};
                continue;
            }
            if (!have_dst) box_of(&dst, e, tg[i].dim, tg[i].offset, tg[i].length), have_dst = 1;
            box src, cut;
            box_copy(&cut, &dst);
            box_of(&src, e, e->pub.dim, sl->offset, sl->length);
            int empty = 0;
            for (uint32_t d = 0; d < e->pub.ndim; d++) {
                if (src.lo[d] > cut.lo[d]) cut.lo[d] = src.lo[d];
                if (src.hi[d] < cut.hi[d]) cut.hi[d] = src.hi[d];
                empty |= cut.lo[d] >= cut.hi[d];
            }
            if (empty) continue;
            any[sl->shard] = 1;
            mapping *m = &pool[used++];
            mapping_init(m, e, i, &src, &dst, &cut, words + wused);
            wused += (size_t)MAPPING_WORDS * e->pub.ndim;
            hits[nh++] = (hit){i, sl, m, 0};
        }
    }
    return nh;
}

/* jobs[k].tgt/map[local] for every hit, once its shard is open. */
static void place_hits(const shard_table *tb, shard_job *jobs, const hit *hits, size_t nh) {
    for (size_t h = 0; h < nh; h++) {
        if (h + 8 < nh) __builtin_prefetch(hits[h + 8].sl); /* a cache miss each */
        shard_job *j = &jobs[hits[h].sl->shard];
        size_t local = shard_slice_local_of(tb, hits[h].target, hits[h].sl);
        j->tgt[local] = hits[h].target + 1;
        j->map[local] = hits[h].m;
        if (hits[h].at) j->at[local] = hits[h].at; /* untouched zero pages otherwise */
        j->nwhole += hits[h].m == NULL;
    }
}

/* Whether slice sl of entry e gave bytes to a rank's piece (split dim,
 * offset and length along it, as tzr_shard_target gives them). */
static int slice_used(const shard_entry *e, const shard_slice *sl, int dim, uint64_t offset, uint64_t length) {
    if (e->pub.dim == TZR_SHARD_REPLICATED) return 1;
    if (!sl->length) return 0;
    if (dim != e->pub.dim) return 1; /* whole along the split dim */
    return sl->offset < offset + length && offset < sl->offset + sl->length;
}

/* The shard tensors global tensor i of rank `rank`'s piece came from,
 * against the header SHA-256 the manifest records for each (the headers
 * were checked against their bytes by the verifying load). A recorded one
 * that differs is an error: the shard is not the file the manifest lists.
 * *proven: every one is recorded and equal. */
static int check_headers(const tzr_shard_set *s, size_t i, int rank, int dim, uint64_t offset, uint64_t length,
                         int *proven) {
    const shard_entry *e = &s->tb.t[i];
    size_t q0 = 0, q1 = e->nslices;
    if (e->pub.dim == TZR_SHARD_REPLICATED && e->nslices) q0 = (size_t)rank % e->nslices, q1 = q0 + 1;
    *proven = e->nslices > 0;
    for (size_t q = q0; q < q1; q++) {
        const shard_slice *sl = &e->slices[q];
        if (!slice_used(e, sl, dim, offset, length)) continue;
        tzr_reader *r = shard_if_open(s, sl->shard); /* every shard a used slice is in was loaded */
        const uint8_t *sha = r ? shard_slice_sha_of(&s->tb, i, sl) : NULL;
        uint8_t stated[32];
        int has = 0;
        if (!sha || tzr_reader_header_sha(r, shard_slice_local_of(&s->tb, i, sl), stated, &has) || !has) {
            *proven = 0;
            continue;
        }
        if (memcmp(stated, sha, 32)) {
            char nb[TZR_NAMEBUF];
            return tzr_fail(TZR_EHASH, "%s: shard %d: tensor '%s': its header sha256 differs from the manifest's "
                            "(the shard file was replaced or rewritten after the manifest was made)", s->path,
                            sl->shard, tzr_printable(e->name, e->pub.name_len, nb, sizeof nb));
        }
    }
    return 0;
}

int tzr_shard_check_headers(tzr_shard_set *s, int k) {
    if (!s || k < 0 || k >= s->tb.nshards) return tzr_fail(TZR_EINVAL, "check headers: bad set or shard %d", k);
    if (!shard_ready(s, k)) return tzr_last_error_code();
    int rc = tzr_reader_load_headers(s->readers[k], 0, tzr_reader_count(s->readers[k]), NULL); /* coalesced */
    if (rc) return rc;
    for (size_t i = 0; i < s->tb.n; i++) {
        const shard_entry *e = &s->tb.t[i];
        for (size_t q = 0; q < e->nslices; q++) {
            const shard_slice *sl = &e->slices[q];
            const uint8_t *sha = sl->shard == k ? shard_slice_sha_of(&s->tb, i, sl) : NULL;
            if (!sha) continue;
            size_t local = shard_slice_local_of(&s->tb, i, sl);
            const tzr_tensor_header *h = NULL;
            char nb[TZR_NAMEBUF];
            const char *nm = tzr_printable(e->name, e->pub.name_len, nb, sizeof nb);
            uint64_t at = tzr_reader_tensor(s->readers[k], local)->header_offset;
            if ((rc = tzr_reader_header(s->readers[k], local, &h))) return rc;
            if (!h->has_sha256 || memcmp(h->sha256, sha, 32))
                return tzr_fail_at(TZR_EHASH, nm, at,
                                   "%s: shard %d: tensor '%s' (header at byte %llu): its header sha256 differs from "
                                   "the manifest's (the shard file was replaced or rewritten after the manifest was "
                                   "made)", s->path, k, nm, (unsigned long long)at);
        }
    }
    return 0;
}

/* tzr_shard_load_rank_into; proven (may be NULL, else one byte per set
 * tensor) gets which pieces the header checks proved. */
static int load_rank_into(tzr_shard_set *s, int rank, int nranks, const char *rules, tzr_sink *dest,
                          const tzr_load_options *opt, tzr_load_stats *stats, unsigned char *proven) {
    if (!s || !dest || nranks < 1 || rank < 0 || rank >= nranks)
        return tzr_fail(TZR_EINVAL, "load: bad set, sink or rank %d of %d", rank, nranks);
    size_t n = s->tb.n, nmap = 0, nwords = 0, ndims = 0;
    for (size_t i = 0; i < n; i++) {
        ndims += s->tb.t[i].pub.ndim;
        nmap += s->tb.t[i].nslices;
        nwords += s->tb.t[i].nslices * MAPPING_WORDS * s->tb.t[i].pub.ndim;
    }
    /* Huge pages (free() frees): for 100k tensors these are ~50 MB, and
     * their 4 KiB first-touch faults were most of a fresh process's load. */
    target *tg = tzr_map_zeroed(n ? n : 1, sizeof *tg); /* fresh zero pages: no clearing pass */
    mapping *pool = tzr_alloc_big((nmap ? nmap : 1) * sizeof *pool);
    uint64_t *words = tzr_alloc_big((nwords ? nwords : 1) * sizeof *words);
    uint64_t *shapes = tzr_alloc_big((ndims ? ndims : 1) * sizeof *shapes);
    unsigned char *want = tzr_calloc_big(n ? n : 1, 1);
    hit *hits = tzr_alloc_big((nmap ? nmap : 1) * sizeof *hits); /* a hit per slice at most */
    size_t nhits = 0;
    int rc = !tg || !pool || !words || !shapes || !want || !hits ? tzr_fail(TZR_ENOMEM, "out of memory") : 0;
    if (!rc) rc = make_targets(s, rank, nranks, rules, tg, shapes);
    uint64_t total = 0;
    size_t wanted = 0;
    /* opt's filter picks global tensors (index in the set, the rank's piece) */
    int filtered = opt && opt->struct_size >= offsetof(tzr_load_options, filter_ctx) + sizeof(void *) && opt->filter;
    for (size_t i = 0; !rc && i < n; i++) {
        want[i] = !filtered || opt->filter(opt->filter_ctx, i, &tg[i].info);
        if (want[i]) total += tg[i].info.nbytes, wanted++;
    }
    /* Every destination exists before any bytes move, from any shard. */
    if (!rc && dest->reserve) rc = dest->reserve(dest, wanted, total);
    for (size_t i = 0; !rc && i < n; i++)
        if (want[i] && dest->begin_tensor) rc = dest->begin_tensor(dest, i, &tg[i].info);
    tzr_load_stats sum = {0};
    int progress = opt && opt->struct_size >= offsetof(tzr_load_options, progress_ctx) + sizeof(void *) && opt->progress;
    overall all = {opt, 0, total};
    int ns = s->tb.nshards;
    shard_job *jobs = rc ? NULL : calloc((size_t)ns, sizeof *jobs);
    unsigned char *any = rc ? NULL : calloc((size_t)ns, 1);
    if (!rc && (!jobs || !any)) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    /* Only the shards this rank reads are opened (and given tables). */
    if (!rc) nhits = find_hits(s, rank, tg, want, pool, words, hits, any);
    if (!rc) rc = shard_ready_all(s, any);
    for (int k = 0; !rc && k < ns; k++) {
        shard_job *j = &jobs[k];
        if (!any[k]) continue;
        j->base = (tzr_sink){.direct = job_direct, .submit = job_submit, .name = "shard",
                             .struct_size = sizeof(tzr_sink)};
        if (dest->fence) j->base.fence = job_fence, j->base.wait = job_wait;
        if (dest->alloc_staging) j->base.alloc_staging = job_alloc_staging, j->base.free_staging = job_free_staging;
        j->dest = dest;
        j->nlocal = tzr_reader_count(s->readers[k]);
        /* Fresh zero pages: a rank of many writes the entries of the few
         * shards it reads, and clearing every shard's (8 shards of 100k
         * tensors: 13 MB) was a fifth of its load. */
        j->map = tzr_map_zeroed(j->nlocal ? j->nlocal : 1, sizeof *j->map);
        j->tgt = tzr_map_zeroed(j->nlocal ? j->nlocal : 1, sizeof *j->tgt);
        j->at = tzr_map_zeroed(j->nlocal ? j->nlocal : 1, sizeof *j->at);
        if (!j->map || !j->tgt || !j->at) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    }
    if (!rc) place_hits(&s->tb, jobs, hits, nhits);
    for (int k = 0; !rc && k < ns; k++) {
        shard_job *j = &jobs[k];
        if (any[k]) {
            tzr_reader *r = s->readers[k]; /* ready; others may be opening meanwhile */
            tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
            if (opt) {
                size_t copy = opt->struct_size < sizeof lo ? opt->struct_size : sizeof lo;
                memcpy(&lo, opt, copy);
                lo.struct_size = sizeof lo;
            }
            lo.verify = s->verify && tzr_reader_format(r) == TZR_FORMAT_TENSORIZER; /* safetensors: no hashes */
            if (lo.verify && (rc = tzr_reader_want_header_sha(r))) break; /* for check_headers after the load */
            /* A shard wholly wanted as whole targets loads as a plain file
             * (no per-tensor filter and select pass over its table). */
            int whole = j->nwhole == j->nlocal;
            lo.filter = whole ? NULL : job_filter;
            lo.filter_ctx = j;
            lo.select = whole ? NULL : job_select;
            lo.select_ctx = j;
            lo.on_tensor = NULL; /* shard tensors are not the caller's tensors */
            lo.on_tensor_error = NULL;
            lo.progress = progress ? overall_progress : NULL;
            lo.progress_ctx = &all;
            tzr_load_stats st;
            rc = tzr_load(r, &j->base, &lo, &st);
            sum.tensors += st.tensors;
            sum.bytes += st.bytes;
            all.before += st.bytes;
            sum.bytes_read += st.bytes_read;
            sum.reads += st.reads;
            sum.seconds += st.seconds;
            if (st.staging_bytes > sum.staging_bytes) sum.staging_bytes = st.staging_bytes;
        }
    }
    for (int k = 0; jobs && k < ns; k++) {
        size_t nl = jobs[k].nlocal ? jobs[k].nlocal : 1;
        tzr_unmap_zeroed(jobs[k].map, nl, sizeof *jobs[k].map);
        tzr_unmap_zeroed(jobs[k].tgt, nl, sizeof *jobs[k].tgt);
        tzr_unmap_zeroed(jobs[k].at, nl, sizeof *jobs[k].at);
    }
    free(jobs);
    free(any);
    for (size_t i = 0; !rc && s->verify && i < n; i++) {
        int ok = 0;
        if (want[i] && tg[i].info.nbytes) rc = check_headers(s, i, rank, tg[i].dim, tg[i].offset, tg[i].length, &ok);
        if (proven) proven[i] = (unsigned char)ok;
    }
    for (size_t i = 0; !rc && i < n; i++)
        if (want[i] && dest->end_tensor) rc = dest->end_tensor(dest, i, &tg[i].info);
    if (stats) {
        sum.tensors = wanted;
        sum.error_tensor = (size_t)-1;
        tzr_opts_put(stats, &sum, offsetof(tzr_load_stats, struct_size), sizeof sum);
    }
    tzr_unmap_zeroed(tg, n ? n : 1, sizeof *tg);
    free(hits);
    free(pool);
    free(words);
    free(shapes);
    free(want);
    return rc;
}

void tzr_shard_result_free(tzr_shard_result *r) {
    TZR_KEEP_ERROR;
    if (!r) return;
    free(r->pieces);
    free(r->arena);
    free(r);
}

int tzr_shard_load_rank_into(tzr_shard_set *s, int rank, int nranks, const char *rules, tzr_sink *dest,
                             const tzr_load_options *opt, tzr_load_stats *stats) {
    return load_rank_into(s, rank, nranks, rules, dest, opt, stats, NULL);
}

static void *result_dest(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)t;
    return ((tzr_shard_result *)ctx)->pieces[index].data;
}

/* Whole global tensors against the manifest sha256. Where the manifest
 * records the header SHA-256 of every shard tensor a piece came from, and
 * the shards' headers (checked against their bytes by the verifying load)
 * carry exactly those, the piece is proven without a second pass; the
 * others are hashed, on a few threads. */
typedef struct sha_job {
    const tzr_shard_set *s;
    const tzr_shard_result *res;
    const unsigned char *todo;
    atomic_size_t next;
    atomic_size_t bad; /* first mismatching tensor + 1 */
} sha_job;

static void *sha_worker(void *arg) {
    sha_job *j = arg;
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->res->count && !atomic_load(&j->bad);) {
        if (!j->todo[i]) continue;
        uint8_t sha[32];
        tzr_sha256(j->res->pieces[i].data, (size_t)j->res->pieces[i].nbytes, sha);
        if (memcmp(sha, j->s->tb.t[i].pub.sha256, 32)) atomic_store(&j->bad, i + 1);
    }
    return NULL;
}

/* proven: from the load's header checks (load_rank_into). */
static int check_manifest_sha(const tzr_shard_set *s, const tzr_shard_result *res, const unsigned char *proven) {
    unsigned char *todo = calloc(res->count ? res->count : 1, 1);
    if (!todo) return tzr_fail(TZR_ENOMEM, "out of memory");
    uint64_t bytes = 0;
    for (size_t i = 0; i < res->count; i++) {
        const shard_entry *e = &s->tb.t[i];
        const tzr_shard_piece *pc = &res->pieces[i];
        if (!e->pub.has_sha256 || pc->nbytes != e->pub.nbytes || !pc->nbytes || proven[i]) continue;
        todo[i] = 1;
        bytes += pc->nbytes;
    }
    sha_job j = {s, res, todo, 0, 0};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nth = bytes < ((uint64_t)64 << 20) ? 0 : cpus > 8 ? 8 : cpus > 1 ? (int)cpus : 0, started = 0;
    pthread_t th[8];
    for (; started < nth; started++)
        if (tzr_thread_start(&th[started], sha_worker, &j) != 0) break;
    if (!started) sha_worker(&j);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    free(todo);
    size_t bad = atomic_load(&j.bad);
    if (!bad) return 0;
    const shard_entry *e = &s->tb.t[bad - 1];
    char nb[TZR_NAMEBUF];
    return tzr_fail(TZR_EHASH, "%s: tensor '%s': sha256 of the assembled tensor does not match the manifest", s->path,
                    tzr_printable(e->name, e->pub.name_len, nb, sizeof nb));
}

int shard_rank_layout(tzr_shard_set *s, int rank, int nranks, const char *rules, tzr_shard_result **out,
                      uint64_t *total_out) {
    *out = NULL;
    if (!s || nranks < 1 || rank < 0 || rank >= nranks)
        return tzr_fail(TZR_EINVAL, "load: bad set or rank %d of %d", rank, nranks);
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl); /* fail early on a bad rule */
    if (rc) return rc;
    shard_rules_free(&rl);
    size_t n = s->tb.n, dims = 0, names = 0;
    for (size_t i = 0; i < n; i++) dims += s->tb.t[i].pub.ndim, names += s->tb.t[i].pub.name_len + 1;
    tzr_shard_result *res = calloc(1, sizeof *res);
    size_t np = n ? n : 1;
    if (!res || !(res->pieces = calloc(1, np * sizeof *res->pieces + (dims + 1) * sizeof(uint64_t) + names))) {
        tzr_shard_result_free(res);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    uint64_t *shapes = (uint64_t *)(res->pieces + np);
    char *strs = (char *)(shapes + dims + 1); /* the result outlives the set */
    uint64_t total = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const shard_entry *e = &s->tb.t[i];
        tzr_shard_piece *pc = &res->pieces[i];
        pc->tensor = i;
        memcpy(strs, e->name, e->pub.name_len);
        pc->name = strs;
        pc->name_len = e->pub.name_len;
        strs += e->pub.name_len + 1;
        pc->dtype = e->pub.dtype;
        pc->ndim = e->pub.ndim;
        pc->shape = shapes;
        shapes += e->pub.ndim;
        rc = tzr_shard_target(s, i, rank, nranks, rules, &pc->dim, &pc->offset, &pc->length);
        memcpy(pc->shape, e->shape, e->pub.ndim * sizeof *e->shape);
        if (!rc && pc->dim >= 0) pc->shape[pc->dim] = pc->length;
        pc->nbytes = e->pub.itemsize;
        for (uint32_t d = 0; d < pc->ndim; d++) pc->nbytes *= pc->shape[d];
        pc->data = (void *)(uintptr_t)total; /* offset until there is memory */
        total += (pc->nbytes + 63) & ~(uint64_t)63;
        res->bytes += pc->nbytes;
    }
    res->count = n;
    if (rc) {
        tzr_shard_result_free(res);
        return rc;
    }
    *out = res;
    *total_out = total;
    return 0;
}

int tzr_shard_load_rank(tzr_shard_set *s, int rank, int nranks, const char *rules, tzr_shard_result **out) {
    *out = NULL;
    tzr_shard_result *res = NULL;
    uint64_t total = 0;
    int rc = shard_rank_layout(s, rank, nranks, rules, &res, &total);
    if (rc) return rc;
    /* One huge-page block: fresh 4 KiB pages cost more than the reads. */
    if (!(res->arena = tzr_alloc_big(total ? (size_t)total : 1)))
        rc = tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes for rank %d", (unsigned long long)total, rank);
    for (size_t i = 0; i < res->count && !rc; i++)
        res->pieces[i].data = (uint8_t *)res->arena + (uintptr_t)res->pieces[i].data;
    unsigned char *proven = rc ? NULL : calloc(res->count ? res->count : 1, 1);
    if (!rc && !proven) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    tzr_sink *sink = NULL;
    if (!rc) rc = tzr_sink_host_new(&sink, result_dest, res);
    tzr_load_stats st;
    if (!rc) rc = load_rank_into(s, rank, nranks, rules, sink, NULL, &st, proven);
    tzr_sink_free(sink);
    if (!rc) res->bytes_read = st.bytes_read;
    if (!rc && s->verify) rc = check_manifest_sha(s, res, proven);
    free(proven);
    if (rc) {
        tzr_shard_result_free(res);
        return rc;
    }
    *out = res;
    return 0;
}
