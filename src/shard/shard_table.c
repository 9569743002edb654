/* The shard table: global tensors and the slices each shard holds, and the
 * tiling check every manifest and merge goes through. */
#include "shard_internal.h"

#include <string.h>

void shard_table_free(shard_table *tb) {
    if (!tb) return;
    for (size_t i = 0; i < tb->n; i++) {
        free(tb->t[i].name);
        free(tb->t[i].dtype);
        free(tb->t[i].shape);
        free(tb->t[i].slices);
    }
    free(tb->t);
    if (tb->files)
        for (int k = 0; k < tb->nshards; k++) free(tb->files[k]);
    free(tb->files);
    free(tb->sizes);
    memset(tb, 0, sizeof *tb);
}

shard_entry *shard_table_add(shard_table *tb, const char *name, size_t name_len, const char *dtype,
                             size_t dtype_len, uint32_t ndim, const uint64_t *shape, int dim) {
    if (tb->n == tb->cap) {
        size_t cap = tb->cap ? tb->cap * 2 : 16;
        shard_entry *g = realloc(tb->t, cap * sizeof *g);
        if (!g) return tzr_fail(TZR_ENOMEM, "out of memory"), NULL;
        tb->t = g;
        tb->cap = cap;
    }
    shard_entry *e = &tb->t[tb->n];
    memset(e, 0, sizeof *e);
    e->name = malloc(name_len + 1);
    e->dtype = malloc(dtype_len + 1);
    e->shape = malloc((ndim ? ndim : 1) * sizeof *e->shape);
    if (!e->name || !e->dtype || !e->shape) {
        free(e->name), free(e->dtype), free(e->shape);
        return tzr_fail(TZR_ENOMEM, "out of memory"), NULL;
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = 0;
    memcpy(e->dtype, dtype, dtype_len);
    e->dtype[dtype_len] = 0;
    if (ndim) memcpy(e->shape, shape, ndim * sizeof *shape);
    tzr_shard_tensor *p = &e->pub;
    p->name = e->name;
    p->name_len = name_len;
    p->dtype_str = e->dtype;
    p->dtype_len = dtype_len;
    p->ndim = ndim;
    p->shape = e->shape;
    p->dim = dim;
    int opaque;
    if (tzr_dtype_parse(e->dtype, dtype_len, &p->dtype, &p->itemsize, &opaque)) p->itemsize = 0;
    uint64_t nb = p->itemsize;
    for (uint32_t d = 0; d < ndim; d++)
        if (!tzr_mul_ok(nb, shape[d], &nb)) nb = UINT64_MAX;
    p->nbytes = nb;
    tb->n++;
    return e;
}

int shard_entry_add_slice(shard_entry *e, int shard, uint64_t offset, uint64_t length) {
    shard_slice *g = realloc(e->slices, (e->nslices + 1) * sizeof *g);
    if (!g) return tzr_fail(TZR_ENOMEM, "out of memory");
    e->slices = g;
    g[e->nslices++] = (shard_slice){shard, offset, length, 0, 0, {0}};
    return 0;
}

int shard_table_find(const shard_table *tb, const char *name, size_t name_len, size_t *idx) {
    for (size_t i = 0; i < tb->n; i++)
        if (tb->t[i].pub.name_len == name_len && memcmp(tb->t[i].name, name, name_len) == 0) {
            *idx = i;
            return 0;
        }
    return TZR_ENOTFOUND;
}

void shard_local_shape(const shard_entry *e, const shard_slice *sl, uint64_t *out) {
    for (uint32_t d = 0; d < e->pub.ndim; d++) out[d] = e->shape[d];
    if (e->pub.dim >= 0) out[e->pub.dim] = sl->length;
}

static int by_offset(const void *a, const void *b) {
    const shard_slice *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

int shard_table_validate(const shard_table *tb, const char *what) {
    for (size_t i = 0; i < tb->n; i++) {
        const shard_entry *e = &tb->t[i];
        char nb[TZR_NAMEBUF];
        const char *nm = tzr_printable(e->name, e->pub.name_len, nb, sizeof nb);
        if (!e->pub.itemsize)
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': bad dtype string", what, nm);
        if (e->pub.nbytes == UINT64_MAX)
            return tzr_fail(TZR_ELIMIT, "%s: tensor '%s': shape overflows", what, nm);
        if (!e->nslices) return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': no shard holds it", what, nm);
        for (size_t k = 0; k < e->nslices; k++)
            if (e->slices[k].shard < 0 || e->slices[k].shard >= tb->nshards)
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d out of range (%d shards)", what, nm,
                                e->slices[k].shard, tb->nshards);
        if (e->pub.dim == TZR_SHARD_REPLICATED) {
            for (size_t a = 0; a < e->nslices; a++)
                for (size_t b = a + 1; b < e->nslices; b++)
                    if (e->slices[a].shard == e->slices[b].shard)
                        return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d listed twice", what, nm,
                                        e->slices[a].shard);
            continue;
        }
        if (e->pub.dim < 0 || (uint32_t)e->pub.dim >= e->pub.ndim)
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': split dim %d but %u dims", what, nm, e->pub.dim,
                            e->pub.ndim);
        shard_slice *s = malloc(e->nslices * sizeof *s);
        if (!s) return tzr_fail(TZR_ENOMEM, "out of memory");
        memcpy(s, e->slices, e->nslices * sizeof *s);
        qsort(s, e->nslices, sizeof *s, by_offset);
        uint64_t at = 0, len = e->shape[e->pub.dim];
        int rc = 0;
        for (size_t k = 0; k < e->nslices && !rc; k++) {
            uint64_t end;
            if (!tzr_add_ok(s[k].offset, s[k].length, &end) || end > len)
                rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d slice [%llu, +%llu) of dim %d passes its length %llu",
                              what, nm, s[k].shard, (unsigned long long)s[k].offset,
                              (unsigned long long)s[k].length, e->pub.dim, (unsigned long long)len);
            else if (s[k].offset < at)
                rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d slice at %llu of dim %d overlaps the previous one (ends at %llu)",
                              what, nm, s[k].shard, (unsigned long long)s[k].offset, e->pub.dim,
                              (unsigned long long)at);
            else if (s[k].offset > at)
                rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': gap in dim %d: [%llu, %llu) is held by no shard", what,
                              nm, e->pub.dim, (unsigned long long)at, (unsigned long long)s[k].offset);
            else
                at = end;
        }
        free(s);
        if (rc) return rc;
        if (at != len)
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': gap in dim %d: [%llu, %llu) is held by no shard", what, nm,
                            e->pub.dim, (unsigned long long)at, (unsigned long long)len);
    }
    return 0;
}
