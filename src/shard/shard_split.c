/* Cutting one whole checkpoint into N shards plus a manifest: every tensor
 * is read once, hashed, and its slices handed to the N shard writers. */
#include "hash.h"
#include "shard_internal.h"

#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* Copy the slice [off, off+len) of dim d out of a row-major tensor. */
static void extract(uint8_t *dst, const uint8_t *src, uint32_t ndim, const uint64_t *shape, uint32_t itemsize,
                    int d, uint64_t off, uint64_t len) {
    uint64_t outer = 1, inner = itemsize;
    for (int j = 0; j < d; j++) outer *= shape[j];
    for (uint32_t j = (uint32_t)d + 1; j < ndim; j++) inner *= shape[j];
    for (uint64_t o = 0; o < outer; o++)
        memcpy(dst + o * len * inner, src + (o * shape[d] + off) * inner, (size_t)(len * inner));
}

/* The split dimension of t; rules were checked against every tensor first. */
static int pick_dim(const shard_rules *rules, const tzr_tensor_info *t, int n, uint64_t min_bytes) {
    int dim;
    if (shard_rules_pick(rules, t->name, t->name_len, t->ndim, &dim) == 1) return dim;
    if (t->ndim >= 1 && t->shape[0] % (uint64_t)n == 0 && t->nbytes >= min_bytes) return 0;
    return TZR_SHARD_REPLICATED;
}

/* A rule naming a dimension some tensor lacks fails before any shard is opened. */
static int check_rules(tzr_reader *in, const shard_rules *rules) {
    int dim;
    for (size_t i = 0; i < tzr_reader_count(in); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(in, i);
        int rc = shard_rules_pick(rules, t->name, t->name_len, t->ndim, &dim);
        if (rc < 0) return tzr_fail_prefix(rc, "%s: ", tzr_reader_source(in)->name);
    }
    return 0;
}

struct tzr_shard_splitter {
    tzr_shard_writer **w;
    int n;
    shard_rules rules;
    uint64_t min_bytes;
    char *prefix, *pattern; /* pattern: shard file names (NULL: from prefix) */
    unsigned manifest_flags; /* TZR_OUTPUT_NOREPLACE when the shard files are */
    uint8_t *part; /* one slice at a time */
    size_t part_cap;
    tzr_source **views; /* strided slices the shard writers read until close */
    size_t nviews, views_cap;
};

static void free_views(tzr_shard_splitter *s) {
    for (size_t i = 0; i < s->nviews; i++) s->views[i]->destroy(s->views[i]);
    free(s->views);
    s->views = NULL;
    s->nviews = s->views_cap = 0;
}

void tzr_shard_splitter_abort(tzr_shard_splitter *s) {
    if (!s) return;
    TZR_KEEP_ERROR;
    for (int k = 0; s->w && k < s->n; k++) tzr_shard_writer_abort(s->w[k]);
    free_views(s); /* after the writers: their threads read from these */
    free(s->w);
    shard_rules_free(&s->rules);
    free(s->prefix);
    free(s->pattern);
    free(s->part);
    free(s);
}

int tzr_shard_splitter_open(tzr_shard_splitter **out, const char *prefix, int nshards, const char *rules,
                            const tzr_shard_split_options *opt) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL output pointer");
    *out = NULL;
    tzr_shard_split_options o = TZR_SHARD_SPLIT_OPTIONS_INIT;
    if (TZR_OPTS(tzr_shard_split_options, o, opt, offsetof(tzr_shard_split_options, file))) return TZR_EINVAL;
    if (!prefix || nshards < 1 || nshards > TZR_SHARD_MAX)
        return tzr_fail(TZR_EINVAL, "split: bad prefix or shard count %d", nshards);
    tzr_shard_splitter *s = calloc(1, sizeof *s);
    if (!s) return tzr_fail(TZR_ENOMEM, "out of memory");
    s->n = nshards;
    s->min_bytes = o.min_split_bytes ? o.min_split_bytes : (uint64_t)1 << 20;
    int rc = shard_rules_parse(rules, &s->rules);
    if (!rc && (!(s->prefix = strdup(prefix)) || !(s->w = calloc((size_t)nshards, sizeof *s->w))))
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
    tzr_shard_writer_options wo = TZR_SHARD_WRITER_OPTIONS_INIT;
    wo.metadata_size = o.metadata_size;
    wo.file_pattern = o.file_pattern;
    /* The shard files are written at once, so their writers share the
     * CPUs: each streams with CPUs / N threads (at least one). */
    tzr_writer_options fo = TZR_WRITER_OPTIONS_INIT;
    if (!rc && o.file && TZR_OPTS(tzr_writer_options, fo, o.file, offsetof(tzr_writer_options, compression)))
        rc = TZR_EINVAL;
    s->manifest_flags = fo.no_replace ? TZR_OUTPUT_NOREPLACE : 0;
    if (!rc && o.file_pattern && !(s->pattern = strdup(o.file_pattern))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!fo.threads && fo.compression == TZR_COMPRESSION_NONE)
        fo.threads = cpus / nshards > 1 ? (int)(cpus / nshards) : 1;
    wo.file = &fo;
    for (int k = 0; k < nshards && !rc; k++) rc = tzr_shard_writer_open(&s->w[k], prefix, k, nshards, &wo);
    if (rc) {
        tzr_shard_splitter_abort(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* How t is cut: its dtype, item size, byte size and split dim. */
typedef struct split_plan {
    const char *dstr;
    size_t dlen;
    tzr_dtype dtype;
    uint32_t itemsize;
    uint64_t nbytes;
    int dim;
} split_plan;

static int plan_tensor(const tzr_shard_splitter *s, const tzr_tensor_desc *t, split_plan *p) {
    if (!s || !t || !t->name || t->ndim > TZR_MAX_DIMS) return tzr_fail(TZR_EINVAL, "split: bad tensor description");
    int opaque = 0;
    p->dtype = t->dtype;
    p->dstr = t->dtype_str;
    p->dlen = t->dtype_len;
    if (!p->dstr && !(p->dstr = tzr_dtype_string(t->dtype, &p->dlen)))
        return tzr_fail(TZR_EINVAL, "split: tensor without dtype");
    int rc = tzr_dtype_parse(p->dstr, p->dlen, &p->dtype, &p->itemsize, &opaque);
    if (rc) return rc;
    p->nbytes = p->itemsize;
    for (uint32_t d = 0; d < t->ndim; d++)
        if (!tzr_mul_ok(p->nbytes, t->shape[d], &p->nbytes)) return tzr_fail(TZR_ELIMIT, "split: shape overflows");
    tzr_tensor_info info = {0}; /* what the rules and the default rule look at */
    info.name = t->name;
    info.name_len = t->name_len;
    info.ndim = t->ndim;
    info.shape = t->shape;
    info.nbytes = p->nbytes;
    int picked = shard_rules_pick(&s->rules, t->name, t->name_len, t->ndim, &p->dim);
    if (picked < 0) return picked; /* a rule naming a dimension the tensor lacks */
    p->dim = pick_dim(&s->rules, &info, s->n, s->min_bytes);
    return 0;
}

int tzr_shard_splitter_add(tzr_shard_splitter *s, const tzr_tensor_desc *t, const void *data) {
    split_plan p;
    int rc = plan_tensor(s, t, &p);
    if (rc) return rc;
    uint64_t nbytes = p.nbytes;
    int dim = p.dim;
    uint8_t *zeros = NULL;
    if (t->meta || !data) { /* meta tensors are written as zeros */
        if (!(zeros = calloc(1, nbytes ? (size_t)nbytes : 1))) return tzr_fail(TZR_ENOMEM, "out of memory");
        data = zeros;
    }
    uint8_t sha[32];
    tzr_sha256(data, (size_t)nbytes, sha);
    if (dim != TZR_SHARD_REPLICATED && s->part_cap < nbytes) {
        free(s->part);
        s->part_cap = 0;
        if (!(s->part = malloc(nbytes ? (size_t)nbytes : 1))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        else s->part_cap = (size_t)nbytes;
    }
    for (int k = 0; k < s->n && !rc; k++) {
        tzr_shard_tensor_desc d = {t->name, t->name_len, p.dstr, p.dlen, p.dtype, t->ndim, t->shape, dim, 0, 0, sha};
        const uint8_t *src = data;
        if (dim != TZR_SHARD_REPLICATED) {
            tzr_shard_chunk(t->shape[dim], s->n, k, &d.offset, &d.length);
            extract(s->part, data, t->ndim, t->shape, p.itemsize, dim, d.offset, d.length);
            src = s->part;
        }
        rc = tzr_shard_writer_add(s->w[k], &d, src);
    }
    free(zeros);
    return rc;
}

static int keep_view(tzr_shard_splitter *s, tzr_source *v) {
    if (s->nviews == s->views_cap) {
        size_t cap = s->views_cap ? 2 * s->views_cap : 64;
        tzr_source **g = realloc(s->views, cap * sizeof *g);
        if (!g) {
            v->destroy(v);
            return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        s->views = g;
        s->views_cap = cap;
    }
    s->views[s->nviews++] = v;
    return 0;
}

int tzr_shard_splitter_add_from(tzr_shard_splitter *s, const tzr_tensor_desc *t, tzr_source *src, uint64_t offset) {
    if (!src) return tzr_fail(TZR_EINVAL, "split: NULL source");
    split_plan p;
    int rc = plan_tensor(s, t, &p);
    if (rc) return rc;
    if (t->meta) return tzr_shard_splitter_add(s, t, NULL);
    uint64_t outer = 1, inner = p.itemsize;
    for (int j = 0; p.dim != TZR_SHARD_REPLICATED && j < p.dim; j++) outer *= t->shape[j];
    for (uint32_t j = (uint32_t)p.dim + 1; p.dim != TZR_SHARD_REPLICATED && j < t->ndim; j++) inner *= t->shape[j];
    for (int k = 0; k < s->n && !rc; k++) {
        tzr_shard_tensor_desc d = {t->name, t->name_len, p.dstr, p.dlen, p.dtype, t->ndim, t->shape, p.dim, 0, 0, NULL};
        tzr_source *from = src;
        uint64_t at = offset;
        if (p.dim != TZR_SHARD_REPLICATED) {
            tzr_shard_chunk(t->shape[p.dim], s->n, k, &d.offset, &d.length);
            at = offset + d.offset * inner; /* a contiguous slice when no dimension is outside it */
            if (outer > 1 && d.length) {
                if ((rc = shard_slice_source_open(&from, src, at, outer, d.length * inner, t->shape[p.dim] * inner)) ||
                    (rc = keep_view(s, from)))
                    break;
                at = 0;
            }
        }
        rc = tzr_shard_writer_add_from(s->w[k], &d, from, at);
    }
    return rc;
}

/* A close that failed removes the shard files and sidecars it published
 * (ranks below `done`): what another writer put at the other names, or a
 * manifest another writer published, is then not joined by a stray half
 * of this set. */
static void remove_published(const tzr_shard_splitter *s, int done) {
    char path[8300];
    for (int k = 0; k < done; k++) {
        if (!(s->pattern ? tzr_shard_rank_path(path, sizeof path, s->pattern, k)
                         : tzr_shard_file_name(path, sizeof path, s->prefix, k, s->n, ".tensors")))
            unlink(path);
        if (!tzr_shard_file_name(path, sizeof path, s->prefix, k, s->n, TZR_SHARD_PART_SUFFIX)) unlink(path);
    }
}

int tzr_shard_splitter_close(tzr_shard_splitter *s) {
    if (!s) return tzr_fail(TZR_EINVAL, "NULL splitter");
    int rc = 0, done = 0;
    for (int k = 0; k < s->n; k++) {
        if (rc) tzr_shard_writer_abort(s->w[k]);
        else if (!(rc = tzr_shard_writer_close(s->w[k]))) done = k + 1;
        s->w[k] = NULL;
    }
    free_views(s); /* the writers are closed: nothing reads them now */
    if (!rc) rc = shard_manifest_write(s->prefix, s->n, s->manifest_flags);
    if (rc) remove_published(s, done);
    tzr_shard_splitter_abort(s); /* frees what is left */
    return rc;
}

int tzr_shard_split(tzr_reader *in, const char *prefix, int nshards, const char *rules,
                    const tzr_shard_split_options *opt) {
    if (!in) return tzr_fail(TZR_EINVAL, "split: NULL reader");
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl);
    if (rc) return rc;
    rc = check_rules(in, &rl); /* before any shard is opened */
    shard_rules_free(&rl);
    if (rc) return rc;
    tzr_shard_splitter *s;
    if ((rc = tzr_shard_splitter_open(&s, prefix, nshards, rules, opt))) return rc;
    /* Every shard holds an entry for every tensor (a slice or the whole):
     * each index is sized for all of them, so an MoE-sized checkpoint
     * splits without a metadata_size (one given in opt still wins). */
    uint64_t names = 0, dtypes = 0, dims = 0, bytes = 0;
    for (size_t i = 0; i < tzr_reader_count(in); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(in, i);
        names += t->name_len;
        dtypes += t->dtype_len;
        dims += t->ndim;
        bytes += t->nbytes;
    }
    for (int k = 0; k < nshards && !rc; k++)
        rc = tzr_shard_writer_reserve(s->w[k], tzr_reader_count(in), names, dtypes, dims, bytes);
    uint8_t *data = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < tzr_reader_count(in) && !rc; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(in, i);
        if (t->nbytes > cap) {
            free(data);
            cap = 0;
            if (!(data = malloc((size_t)t->nbytes))) {
                rc = tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)t->nbytes);
                break;
            }
            cap = (size_t)t->nbytes;
        }
        rc = tzr_reader_read(in, i, data, (size_t)t->nbytes);
        tzr_tensor_desc d = {t->name, t->name_len, t->type, 0, t->dtype_str, t->dtype_len, t->dtype, t->ndim,
                             t->shape, 0, sizeof(tzr_tensor_desc)};
        if (!rc) rc = tzr_shard_splitter_add(s, &d, data ? data : (const void *)"");
    }
    free(data);
    if (rc) {
        tzr_shard_splitter_abort(s);
        return rc;
    }
    return tzr_shard_splitter_close(s);
}
