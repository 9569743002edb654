/* Cutting one whole checkpoint into N shards plus a manifest: every tensor
 * is read once, hashed, and its slices handed to the N shard writers. */
#include "hash.h"
#include "shard_internal.h"

#include <string.h>

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

static int split_one(tzr_reader *in, size_t i, tzr_shard_writer **w, int n, const shard_rules *rules,
                     uint64_t min_bytes) {
    const tzr_tensor_info *t = tzr_reader_tensor(in, i);
    uint8_t *data = malloc(t->nbytes ? (size_t)t->nbytes : 1), *part = NULL;
    if (!data) return tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)t->nbytes);
    int rc = tzr_reader_read(in, i, data, (size_t)t->nbytes);
    int dim = pick_dim(rules, t, n, min_bytes);
    uint8_t sha[32];
    if (!rc) tzr_sha256(data, (size_t)t->nbytes, sha);
    if (!rc && dim != TZR_SHARD_REPLICATED && !(part = malloc(t->nbytes ? (size_t)t->nbytes : 1)))
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
    for (int k = 0; k < n && !rc; k++) {
        tzr_shard_tensor_desc d = {t->name, t->name_len, t->dtype_str, t->dtype_len, t->dtype, t->ndim, t->shape,
                                   dim, 0, 0, sha};
        const uint8_t *src = data;
        if (dim != TZR_SHARD_REPLICATED) {
            tzr_shard_chunk(t->shape[dim], n, k, &d.offset, &d.length);
            extract(part, data, t->ndim, t->shape, t->itemsize, dim, d.offset, d.length);
            src = part;
        }
        rc = tzr_shard_writer_add(w[k], &d, src);
    }
    free(part);
    free(data);
    return rc;
}

int tzr_shard_split(tzr_reader *in, const char *prefix, int nshards, const char *rules,
                    const tzr_shard_split_options *opt) {
    tzr_shard_split_options o = TZR_SHARD_SPLIT_OPTIONS_INIT;
    if (TZR_OPTS(tzr_shard_split_options, o, opt, sizeof o)) return TZR_EINVAL;
    opt = &o;
    if (!in || !prefix || nshards < 1 || nshards > TZR_SHARD_MAX)
        return tzr_fail(TZR_EINVAL, "split: bad reader, prefix or shard count %d", nshards);
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl);
    if (rc) return rc;
    if ((rc = check_rules(in, &rl))) {
        shard_rules_free(&rl);
        return rc;
    }
    uint64_t min_bytes = opt && opt->min_split_bytes ? opt->min_split_bytes : (uint64_t)1 << 20;
    tzr_shard_writer_options wo = TZR_SHARD_WRITER_OPTIONS_INIT;
    if (opt) wo.metadata_size = opt->metadata_size;
    tzr_shard_writer **w = calloc((size_t)nshards, sizeof *w);
    if (!w) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    for (int k = 0; k < nshards && !rc; k++) rc = tzr_shard_writer_open(&w[k], prefix, k, nshards, &wo);
    for (size_t i = 0; i < tzr_reader_count(in) && !rc; i++) rc = split_one(in, i, w, nshards, &rl, min_bytes);
    for (int k = 0; w && k < nshards; k++) {
        if (!w[k]) continue;
        if (rc) tzr_shard_writer_abort(w[k]);
        else rc = tzr_shard_writer_close(w[k]);
    }
    free(w);
    shard_rules_free(&rl);
    if (!rc) rc = tzr_shard_manifest_build(prefix, nshards);
    return rc;
}
