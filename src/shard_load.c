/* Loading one rank's slices of a sharded checkpoint for any rank count.
 *
 * A target piece and a source slice are both boxes in the global index
 * space: full in every dimension except their split dimension. Their
 * intersection is copied as runs: dimensions after the last restricted one
 * are whole in both arrays, so each run is contiguous on both sides. One
 * run (a dim-0 slice, or a whole tensor) is read straight into the result;
 * otherwise rows of the source are read into staging and the runs copied
 * out (stride math). A source slice needed whole goes through
 * tzr_reader_read, which checks its hashes; whole global tensors are
 * checked against the manifest sha256. */
#include "hash.h"
#include "shard_internal.h"

#include <string.h>

#define STAGE_MAX ((uint64_t)64 << 20)

int tzr_shard_target(const tzr_shard_set *s, size_t i, int rank, int nranks, const char *rules, int *dim,
                     uint64_t *offset, uint64_t *length) {
    if (!s || i >= s->tb.n || nranks < 1 || rank < 0 || rank >= nranks)
        return tzr_fail(TZR_EINVAL, "target: bad tensor %zu or rank %d of %d", i, rank, nranks);
    const shard_entry *e = &s->tb.t[i];
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl);
    if (rc) return rc;
    int d = e->pub.dim;
    shard_rules_match(&rl, e->name, e->pub.name_len, e->pub.ndim, &d);
    shard_rules_free(&rl);
    *offset = *length = 0;
    if (nranks == 1 || e->pub.ndim == 0) d = TZR_SHARD_REPLICATED;
    *dim = d;
    if (d != TZR_SHARD_REPLICATED) tzr_shard_chunk(e->shape[d], nranks, rank, offset, length);
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

/* Row-major byte strides of the array box a (local shape hi-lo). */
static void strides(const box *a, uint32_t itemsize, uint64_t *st) {
    uint64_t acc = itemsize;
    for (uint32_t d = a->ndim; d-- > 0;) {
        st[d] = acc;
        acc *= a->hi[d] - a->lo[d];
    }
}

static uint64_t offset_in(const box *a, const uint64_t *st, const uint64_t *x) {
    uint64_t o = 0;
    for (uint32_t d = 0; d < a->ndim; d++) o += (x[d] - a->lo[d]) * st[d];
    return o;
}

typedef struct copy_job {
    tzr_shard_set *s;
    const shard_entry *e;
    const shard_slice *sl;
    box src, dst, cut;     /* source array, destination array, intersection */
    uint8_t *out;
    uint64_t bytes_read;
} copy_job;

/* Copy every run of cut with x[0] in [r0, r1) from staging holding source
 * bytes starting at base. */
static void scatter(copy_job *j, int k, uint64_t run, const uint8_t *stage, uint64_t base, uint64_t r0,
                    uint64_t r1) {
    uint64_t ss[TZR_MAX_DIMS], ds[TZR_MAX_DIMS], x[TZR_MAX_DIMS];
    strides(&j->src, j->e->pub.itemsize, ss);
    strides(&j->dst, j->e->pub.itemsize, ds);
    for (uint32_t d = 0; d < j->cut.ndim; d++) x[d] = j->cut.lo[d];
    x[0] = r0;
    for (;;) {
        memcpy(j->out + offset_in(&j->dst, ds, x), stage + offset_in(&j->src, ss, x) - base, (size_t)run);
        int d = k - 1;
        for (; d >= 0; d--) {
            if (++x[d] < (d == 0 ? r1 : j->cut.hi[d])) break;
            x[d] = j->cut.lo[d];
        }
        if (d < 0) break;
    }
}

static int copy_cut(copy_job *j) {
    const tzr_shard_tensor *p = &j->e->pub;
    tzr_reader *r = j->s->readers[j->sl->shard];
    const tzr_tensor_info *t = tzr_reader_tensor(r, j->sl->local);
    uint32_t nd = p->ndim;
    int k = -1, whole_src = 1;
    for (uint32_t d = 0; d < nd; d++) {
        if (j->cut.lo[d] != 0 || j->cut.hi[d] != p->shape[d]) k = (int)d;
        if (j->cut.lo[d] != j->src.lo[d] || j->cut.hi[d] != j->src.hi[d]) whole_src = 0;
    }
    if (k < 0) k = 0;
    uint64_t inner = p->itemsize;
    for (uint32_t d = (uint32_t)k + 1; d < nd; d++) inner *= p->shape[d];
    uint64_t run = nd ? (j->cut.hi[k] - j->cut.lo[k]) * inner : inner;
    uint64_t runs = 1;
    for (int d = 0; d < k; d++) runs *= j->cut.hi[d] - j->cut.lo[d];
    if (run == 0 || runs == 0) return 0;
    uint64_t ss[TZR_MAX_DIMS], ds[TZR_MAX_DIMS], x[TZR_MAX_DIMS];
    strides(&j->src, p->itemsize, ss);
    strides(&j->dst, p->itemsize, ds);
    for (uint32_t d = 0; d < nd; d++) x[d] = j->cut.lo[d];
    uint64_t s0 = offset_in(&j->src, ss, x), d0 = offset_in(&j->dst, ds, x);
    char nb[TZR_NAMEBUF];
    int raw_ok = !tzr_reader_encrypted(r) && !t->meta && t->data_length == t->nbytes;
    int rc = 0;
    if (whole_src || !raw_ok) { /* whole source tensor: hash-checked read */
        if (runs == 1 && whole_src) {
            rc = tzr_reader_read(r, j->sl->local, j->out + d0, (size_t)t->nbytes);
        } else {
            uint8_t *stage = malloc(t->nbytes ? (size_t)t->nbytes : 1);
            if (!stage) return tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)t->nbytes);
            rc = tzr_reader_read(r, j->sl->local, stage, (size_t)t->nbytes);
            if (!rc) scatter(j, k, run, stage, 0, j->cut.lo[0], j->cut.hi[0]);
            free(stage);
        }
        j->bytes_read += t->nbytes;
        return rc;
    }
    tzr_source *src = tzr_reader_source(r);
    if (runs == 1) {
        rc = src->read_at(src, j->out + d0, (size_t)run, t->data_offset + s0);
        j->bytes_read += run;
    } else {
        uint64_t row = ss[0], group = STAGE_MAX / row ? STAGE_MAX / row : 1;
        uint8_t *stage = malloc((size_t)(group < j->cut.hi[0] - j->cut.lo[0] ? group : j->cut.hi[0] - j->cut.lo[0]) * row);
        if (!stage) return tzr_fail(TZR_ENOMEM, "out of memory");
        for (uint64_t r0 = j->cut.lo[0]; r0 < j->cut.hi[0] && !rc; r0 += group) {
            uint64_t r1 = r0 + group < j->cut.hi[0] ? r0 + group : j->cut.hi[0];
            uint64_t base = (r0 - j->src.lo[0]) * row, len = (r1 - r0) * row;
            rc = src->read_at(src, stage, (size_t)len, t->data_offset + base);
            j->bytes_read += len;
            if (!rc) scatter(j, k, run, stage, base, r0, r1);
        }
        free(stage);
    }
    if (rc)
        tzr_fail_prefix(rc, "tensor '%s' in shard %d at offset %llu: ",
                        tzr_printable(p->name, p->name_len, nb, sizeof nb), j->sl->shard,
                        (unsigned long long)(t->data_offset + s0));
    return rc;
}

/* Fill one target piece from the source slices that intersect it. */
static int fill_piece(tzr_shard_set *s, int rank, tzr_shard_piece *pc, uint64_t *bytes_read) {
    const shard_entry *e = &s->tb.t[pc->tensor];
    copy_job j = {.s = s, .e = e, .out = pc->data};
    box_of(&j.dst, e, pc->dim, pc->offset, pc->length);
    int rc = 0;
    if (e->pub.dim == TZR_SHARD_REPLICATED) {
        j.sl = &e->slices[(size_t)rank % e->nslices]; /* spread the reads over the holders */
        box_of(&j.src, e, TZR_SHARD_REPLICATED, 0, 0);
        j.cut = j.dst;
        rc = copy_cut(&j);
    } else {
        for (size_t q = 0; q < e->nslices && !rc; q++) {
            j.sl = &e->slices[q];
            box_of(&j.src, e, e->pub.dim, j.sl->offset, j.sl->length);
            j.cut = j.dst;
            int d = e->pub.dim, empty = 0;
            if (j.src.lo[d] > j.cut.lo[d]) j.cut.lo[d] = j.src.lo[d];
            if (j.src.hi[d] < j.cut.hi[d]) j.cut.hi[d] = j.src.hi[d];
            if (j.cut.lo[d] >= j.cut.hi[d]) empty = 1;
            if (!empty) rc = copy_cut(&j);
        }
    }
    *bytes_read += j.bytes_read;
    if (!rc && s->verify && e->pub.has_sha256 && pc->nbytes == e->pub.nbytes) {
        uint8_t sha[32];
        tzr_sha256(pc->data, (size_t)pc->nbytes, sha);
        if (memcmp(sha, e->pub.sha256, 32)) {
            char nb[TZR_NAMEBUF];
            rc = tzr_fail(TZR_EHASH, "%s: tensor '%s': sha256 of the assembled tensor does not match the manifest",
                          s->path, tzr_printable(e->name, e->pub.name_len, nb, sizeof nb));
        }
    }
    return rc;
}

void tzr_shard_result_free(tzr_shard_result *r) {
    TZR_KEEP_ERROR;
    if (!r) return;
    free(r->pieces);
    free(r->arena);
    free(r);
}

int tzr_shard_load_rank(tzr_shard_set *s, int rank, int nranks, const char *rules, tzr_shard_result **out) {
    *out = NULL;
    if (!s || nranks < 1 || rank < 0 || rank >= nranks)
        return tzr_fail(TZR_EINVAL, "load: bad set or rank %d of %d", rank, nranks);
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl); /* fail early on a bad rule */
    if (rc) return rc;
    shard_rules_free(&rl);
    size_t n = s->tb.n, dims = 0;
    for (size_t i = 0; i < n; i++) dims += s->tb.t[i].pub.ndim;
    tzr_shard_result *res = calloc(1, sizeof *res);
    if (!res || !(res->pieces = calloc(1, (n ? n : 1) * sizeof *res->pieces + (dims + 1) * sizeof(uint64_t)))) {
        tzr_shard_result_free(res);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    uint64_t *shapes = (uint64_t *)(res->pieces + (n ? n : 1));
    uint64_t total = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const shard_entry *e = &s->tb.t[i];
        tzr_shard_piece *pc = &res->pieces[i];
        pc->tensor = i;
        pc->name = e->name;
        pc->name_len = e->pub.name_len;
        pc->dtype = e->pub.dtype;
        pc->ndim = e->pub.ndim;
        pc->shape = shapes;
        shapes += e->pub.ndim;
        rc = tzr_shard_target(s, i, rank, nranks, rules, &pc->dim, &pc->offset, &pc->length);
        memcpy(pc->shape, e->shape, e->pub.ndim * sizeof *e->shape);
        if (!rc && pc->dim >= 0) pc->shape[pc->dim] = pc->length;
        pc->nbytes = e->pub.itemsize;
        for (uint32_t d = 0; d < pc->ndim; d++) pc->nbytes *= pc->shape[d];
        total += (pc->nbytes + 63) & ~(uint64_t)63;
    }
    res->count = n;
    if (!rc && !(res->arena = malloc(total ? (size_t)total : 1)))
        rc = tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes for rank %d", (unsigned long long)total, rank);
    uint64_t at = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        tzr_shard_piece *pc = &res->pieces[i];
        pc->data = (uint8_t *)res->arena + at;
        at += (pc->nbytes + 63) & ~(uint64_t)63;
        rc = fill_piece(s, rank, pc, &res->bytes_read);
        res->bytes += pc->nbytes;
    }
    if (rc) {
        tzr_shard_result_free(res);
        return rc;
    }
    *out = res;
    return 0;
}
