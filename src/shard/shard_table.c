/* The shard table: global tensors and the slices each shard holds, and the
 * tiling check every manifest and merge goes through. */
#include "names.h"
#include "shard_internal.h"

#include <string.h>

void shard_table_free(shard_table *tb) {
    if (!tb) return;
    tzr_arena_free(&tb->arena);
    free(tb->slots);
    free(tb->t);
    if (tb->files)
        for (int k = 0; k < tb->nshards; k++) free(tb->files[k]);
    free(tb->files);
    free(tb->sizes);
    free(tb->hashes_file);
    for (int k = 0; tb->hashes && k < tb->nshards; k++) free(tb->hashes[k].digests);
    free(tb->hashes);
    for (int k = 0; tb->side && k < tb->nshards; k++) {
        if (tb->side[k].local) tzr_unmap_zeroed(tb->side[k].local, tb->side_n, sizeof *tb->side[k].local);
        if (tb->side[k].sha) tzr_unmap_zeroed(tb->side[k].sha, tb->side_n, sizeof *tb->side[k].sha);
    }
    free(tb->side);
    memset(tb, 0, sizeof *tb);
}

void shard_table_prefetch(const shard_table *tb, uint64_t h) {
    if (tb->slots) __builtin_prefetch(&tb->slots[(size_t)h & (tb->nslots - 1)]);
}

/* The index's slot holds the top half of the name's hash as a tag beside
 * the entry, so a probe reads an entry only on a likely match: a lookup
 * is then about one cache miss. */
#define SLOT_TAG(h) ((h) & ~(uint64_t)0xffffffffu)
#define SLOT_ENTRY(s) ((size_t)(uint32_t)(s) - 1)

/* The slot holding name (of hash h), or the empty one where it would go. */
static size_t slot_of(const shard_table *tb, const char *name, size_t len, uint64_t h) {
    size_t mask = tb->nslots - 1, b = (size_t)h & mask;
    for (uint64_t s; (s = tb->slots[b]); b = (b + 1) & mask) {
        if (SLOT_TAG(s) != SLOT_TAG(h)) continue;
        const shard_entry *e = &tb->t[SLOT_ENTRY(s)];
        if (e->pub.name_len == len && memcmp(e->name, name, len) == 0) break;
    }
    return b;
}

/* Room for `want` entries in the index (at most half full). */
static int index_size(shard_table *tb, size_t want) {
    if (2 * want <= tb->nslots) return 0;
    if (want >= UINT32_MAX) return tzr_fail(TZR_ELIMIT, "%zu tensors in one set: at most %u", want, UINT32_MAX - 1);
    size_t ns = tb->nslots ? tb->nslots : 64;
    while (ns < 2 * want) ns *= 2;
    uint64_t *old = tb->slots;
    size_t on = tb->nslots;
    if (!(tb->slots = tzr_calloc_big(ns, sizeof *tb->slots))) {
        tb->slots = old;
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    tb->nslots = ns;
    for (size_t b = 0; b < on; b++)
        if (old[b]) {
            const shard_entry *e = &tb->t[SLOT_ENTRY(old[b])];
            uint64_t h = tzr_name_hash(e->name, e->pub.name_len);
            /* names are unique in the index: the first empty slot */
            size_t c = (size_t)h & (ns - 1);
            while (tb->slots[c]) c = (c + 1) & (ns - 1);
            tb->slots[c] = old[b];
        }
    free(old);
    return 0;
}

int shard_table_reserve(shard_table *tb, size_t n) {
    if (n > tb->cap) {
        /* Huge pages, of which those never used are never touched (a
         * manifest reserves for as many entries as its text could hold). */
        shard_entry *g = n > SIZE_MAX / sizeof *g ? NULL : tzr_grow_big(tb->t, tb->n * sizeof *g, n * sizeof *g);
        if (!g) return tzr_fail(TZR_ENOMEM, "out of memory");
        tb->t = g;
        tb->cap = n;
    }
    return 0;
}

void shard_table_drop_last(shard_table *tb) {
    const shard_entry *e = &tb->t[tb->n - 1];
    /* Added last, so no probe chain runs through its slot. */
    if (tb->slots) {
        size_t b = slot_of(tb, e->name, e->pub.name_len, tzr_name_hash(e->name, e->pub.name_len));
        if (SLOT_ENTRY(tb->slots[b]) == tb->n - 1) tb->slots[b] = 0; /* not an earlier entry of that name */
    }
    tb->n--;
}

/* The entry added at the end, and (if `index`) entered at slot b of the
 * index with name hash h. */
static shard_entry *add_at(shard_table *tb, const char *name, size_t name_len, const char *dtype, size_t dtype_len,
                           uint32_t ndim, const uint64_t *shape, int dim, int index, uint64_t h, size_t b) {
    shard_entry *e = &tb->t[tb->n];
    /* Runs of one dtype are the rule: share the previous entry's copy
     * and parse. */
    const shard_entry *prev = tb->n ? e - 1 : NULL;
    int same = prev && prev->pub.dtype_len == dtype_len && memcmp(prev->dtype, dtype, dtype_len) == 0;
    memset(e, 0, sizeof *e);
    /* shape, then name, then (unless shared) dtype, in one piece */
    uint64_t *sh = tzr_arena_alloc(&tb->arena, ndim * sizeof *sh + name_len + 1 + (same ? 0 : dtype_len + 1));
    if (!sh) return tzr_fail(TZR_ENOMEM, "out of memory"), NULL;
    e->shape = sh;
    e->name = (char *)(sh + ndim);
    memcpy(e->name, name, name_len);
    e->name[name_len] = 0;
    if (same) {
        e->dtype = prev->dtype;
    } else {
        e->dtype = e->name + name_len + 1;
        memcpy(e->dtype, dtype, dtype_len);
        e->dtype[dtype_len] = 0;
    }
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
    if (same) p->dtype = prev->pub.dtype, p->itemsize = prev->pub.itemsize;
    else if (tzr_dtype_parse(e->dtype, dtype_len, &p->dtype, &p->itemsize, &opaque)) p->itemsize = 0;
    uint64_t nb = p->itemsize;
    for (uint32_t d = 0; d < ndim; d++)
        if (!tzr_mul_ok(nb, shape[d], &nb)) nb = UINT64_MAX;
    p->nbytes = nb;
    if (index) tb->slots[b] = SLOT_TAG(h) | (tb->n + 1);
    tb->n++;
    return e;
}

/* Room for one more entry, and in the index if one is kept. */
static int add_room(shard_table *tb) {
    if (tb->n == tb->cap) {
        size_t cap = tb->cap ? tb->cap * 2 : 16;
        shard_entry *g = realloc(tb->t, cap * sizeof *g);
        if (!g) return tzr_fail(TZR_ENOMEM, "out of memory");
        tb->t = g;
        tb->cap = cap;
    }
    return tb->slots ? index_size(tb, tb->n + 1) : 0;
}

shard_entry *shard_table_add(shard_table *tb, const char *name, size_t name_len, const char *dtype,
                             size_t dtype_len, uint32_t ndim, const uint64_t *shape, int dim) {
    if (add_room(tb)) return NULL;
    /* A name given twice keeps the first in the index (what a linear
     * find gave); callers that refuse duplicates use shard_table_add_new. */
    uint64_t h = 0;
    size_t b = 0;
    if (tb->slots) {
        h = tzr_name_hash(name, name_len);
        b = slot_of(tb, name, name_len, h);
    }
    return add_at(tb, name, name_len, dtype, dtype_len, ndim, shape, dim, tb->slots && !tb->slots[b], h, b);
}

int shard_table_add_new(shard_table *tb, const char *name, size_t name_len, uint64_t h, const char *dtype,
                        size_t dtype_len, uint32_t ndim, const uint64_t *shape, int dim, shard_entry **out,
                        size_t *other) {
    if ((!tb->slots && shard_table_index_reserve(tb, tb->n + 1)) || add_room(tb)) return TZR_ENOMEM;
    size_t b = slot_of(tb, name, name_len, h);
    if (tb->slots[b]) {
        *other = SLOT_ENTRY(tb->slots[b]);
        return TZR_EDUP;
    }
    *out = add_at(tb, name, name_len, dtype, dtype_len, ndim, shape, dim, 1, h, b);
    return *out ? 0 : TZR_ENOMEM;
}

/* Slices grow in the arena by doubling (what they outgrow stays there:
 * at most as much again). */
int shard_entry_add_slice(shard_table *tb, shard_entry *e, int shard, uint64_t offset, uint64_t length) {
    if (e->nslices == e->slice_cap) {
        size_t cap = e->slice_cap ? 2 * e->slice_cap : 1;
        shard_slice *g = cap > SIZE_MAX / sizeof *g ? NULL : tzr_arena_alloc(&tb->arena, cap * sizeof *g);
        if (!g) return tzr_fail(TZR_ENOMEM, "out of memory");
        if (e->nslices) memcpy(g, e->slices, e->nslices * sizeof *g);
        e->slices = g;
        e->slice_cap = cap;
    }
    e->slices[e->nslices++] = (shard_slice){shard, offset, length, 0, NULL};
    return 0;
}

int shard_slice_set_sha(tzr_arena *a, shard_slice *sl, const uint8_t *sha) {
    uint8_t *copy = tzr_arena_alloc(a, 32);
    if (!copy) return tzr_fail(TZR_ENOMEM, "out of memory");
    memcpy(copy, sha, 32);
    sl->header_sha = copy;
    return 0;
}

int shard_entry_split(shard_table *tb, shard_entry *e, int share) {
    int d = e->pub.dim, n = tb->nshards;
    uint64_t len = e->shape[d];
    size_t c = (size_t)((len * 0x9e3779b97f4a7c15ull) >> 58) % SHARD_SPLIT_CACHE;
    shard_slice *sl = NULL;
    if (share && tb->split_cache[c].sl && tb->split_cache[c].len == len) {
        sl = tb->split_cache[c].sl;
    } else {
        if (!(sl = n > 0 && !e->nslices ? tzr_arena_alloc(&tb->arena, (size_t)n * sizeof *sl) : NULL)) return TZR_ENOMEM;
        for (int p = 0; p < n; p++) {
            sl[p] = (shard_slice){p, 0, 0, 0, NULL};
            tzr_shard_chunk(len, n, p, &sl[p].offset, &sl[p].length);
        }
        if (share) tb->split_cache[c].len = len, tb->split_cache[c].sl = sl;
    }
    e->slices = sl;
    e->nslices = e->slice_cap = (size_t)n;
    e->shared = share;
    tb->nshared += (size_t)share;
    return 0;
}

int shard_table_sides(shard_table *tb) {
    if (!tb->nshared || tb->side) return 0;
    if (!(tb->side = calloc((size_t)tb->nshards, sizeof *tb->side))) return tzr_fail(TZR_ENOMEM, "out of memory");
    tb->side_n = tb->n ? tb->n : 1; /* a read table: no entries come after */
    return 0;
}

/* Fresh zero pages: a rank opening one shard of many touches only that
 * shard's, and only where its entries are shared. */
int shard_side_make(shard_table *tb, int k) {
    if (!tb->side || tb->side[k].local) return 0;
    size_t n = tb->side_n;
    shard_side sd = {tzr_map_zeroed(n, sizeof *sd.local), tzr_map_zeroed(n, sizeof *sd.sha)};
    if (!sd.local || !sd.sha) {
        if (sd.local) tzr_unmap_zeroed(sd.local, n, sizeof *sd.local);
        if (sd.sha) tzr_unmap_zeroed(sd.sha, n, sizeof *sd.sha);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    tb->side[k] = sd;
    return 0;
}

int shard_entry_is_split(const shard_entry *e, int nshards) {
    if (e->pub.dim < 0 || nshards < 1 || e->nslices != (size_t)nshards) return 0;
    for (int p = 0; p < nshards; p++) {
        uint64_t off, len;
        tzr_shard_chunk(e->shape[e->pub.dim], nshards, p, &off, &len);
        const shard_slice *sl = &e->slices[p];
        if (sl->shard != p || sl->offset != off || sl->length != len) return 0;
    }
    return 1;
}

int shard_table_index_reserve(shard_table *tb, size_t n) {
    if (tb->slots) return index_size(tb, n);
    if (index_size(tb, n > tb->n ? n : tb->n)) return TZR_ENOMEM;
    for (size_t i = 0; i < tb->n; i++) {
        uint64_t h = tzr_name_hash(tb->t[i].name, tb->t[i].pub.name_len);
        size_t b = slot_of(tb, tb->t[i].name, tb->t[i].pub.name_len, h);
        if (!tb->slots[b]) tb->slots[b] = SLOT_TAG(h) | (i + 1);
    }
    return 0;
}

int shard_table_find(shard_table *tb, const char *name, size_t name_len, size_t *idx) {
    return shard_table_find_hashed(tb, name, name_len, tzr_name_hash(name, name_len), idx);
}

int shard_table_find_hashed(shard_table *tb, const char *name, size_t name_len, uint64_t h, size_t *idx) {
    /* the first find builds the index; adds then keep it */
    if (!tb->slots && shard_table_index_reserve(tb, tb->n > 32 ? tb->n : 32)) return TZR_ENOMEM;
    size_t b = slot_of(tb, name, name_len, h);
    if (!tb->slots[b]) return TZR_ENOTFOUND;
    *idx = SLOT_ENTRY(tb->slots[b]);
    return 0;
}

void shard_local_shape(const shard_entry *e, const shard_slice *sl, uint64_t *out) {
    for (uint32_t d = 0; d < e->pub.ndim; d++) out[d] = e->shape[d];
    if (e->pub.dim >= 0) out[e->pub.dim] = sl->length;
}

/* Offset, then length: an empty slice where another begins sorts first,
 * so the order (and so the check) never depends on qsort's stability. */
static int slice_before(const shard_slice *x, const shard_slice *y) {
    return x->offset != y->offset ? x->offset < y->offset : x->length < y->length;
}
static int by_offset(const void *a, const void *b) {
    const shard_slice *x = a, *y = b;
    return slice_before(x, y) ? -1 : slice_before(y, x);
}

/* An entry's printable name, made only for a message (making it for
 * every entry was a tenth of a 100k-tensor open's checks). */
static const char *ename(const shard_entry *e, char *nb) {
    return tzr_printable(e->name, e->pub.name_len, nb, TZR_NAMEBUF);
}

int shard_table_validate(shard_table *tb, const char *what) {
    for (size_t i = 0; i < tb->n; i++) {
        shard_entry *e = &tb->t[i];
        char nb[TZR_NAMEBUF];
        if (!e->pub.itemsize)
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': bad dtype string", what, ename(e, nb));
        if (e->pub.nbytes == UINT64_MAX)
            return tzr_fail(TZR_ELIMIT, "%s: tensor '%s': shape overflows", what, ename(e, nb));
        if (!e->nslices) return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': no shard holds it", what, ename(e, nb));
        if (e->shared) { /* shard p holds tzr_shard_chunk's part p: they tile the dim, in order */
            e->by_shard = e->in_order = 1;
            continue;
        }
        e->by_shard = 1;
        for (size_t k = 1; k < e->nslices && e->by_shard; k++) e->by_shard = e->slices[k].shard > e->slices[k - 1].shard;
        for (size_t k = 0; k < e->nslices; k++)
            if (e->slices[k].shard < 0 || e->slices[k].shard >= tb->nshards)
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d out of range (%d shards)", what, ename(e, nb),
                                e->slices[k].shard, tb->nshards);
        if (e->pub.dim == TZR_SHARD_REPLICATED) {
            for (size_t a = 0; a < e->nslices; a++)
                for (size_t b = a + 1; b < e->nslices; b++)
                    if (e->slices[a].shard == e->slices[b].shard)
                        return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d listed twice", what, ename(e, nb),
                                        e->slices[a].shard);
            continue;
        }
        if (e->pub.dim < 0 || (uint32_t)e->pub.dim >= e->pub.ndim)
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': split dim %d but %u dims", what, ename(e, nb), e->pub.dim,
                            e->pub.ndim);
        /* Already in order as written: the copy and sort were a tenth of
         * an open. */
        size_t k0 = 1;
        while (k0 < e->nslices && !slice_before(&e->slices[k0], &e->slices[k0 - 1])) k0++;
        e->in_order = k0 >= e->nslices;
        shard_slice *s = e->in_order ? e->slices : malloc(e->nslices * sizeof *s);
        if (!s) return tzr_fail(TZR_ENOMEM, "out of memory");
        if (s != e->slices) {
            memcpy(s, e->slices, e->nslices * sizeof *s);
            qsort(s, e->nslices, sizeof *s, by_offset);
        }
        uint64_t at = 0, len = e->shape[e->pub.dim];
        int rc = 0;
        for (size_t k = 0; k < e->nslices && !rc; k++) {
            uint64_t end;
            if (!tzr_add_ok(s[k].offset, s[k].length, &end) || end > len)
                rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d slice [%llu, +%llu) of dim %d passes its length %llu",
                              what, ename(e, nb), s[k].shard, (unsigned long long)s[k].offset,
                              (unsigned long long)s[k].length, e->pub.dim, (unsigned long long)len);
            else if (s[k].offset < at)
                rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': shard %d slice at %llu of dim %d overlaps the previous one (ends at %llu)",
                              what, ename(e, nb), s[k].shard, (unsigned long long)s[k].offset, e->pub.dim,
                              (unsigned long long)at);
            else if (s[k].offset > at)
                rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': gap in dim %d: [%llu, %llu) is held by no shard", what,
                              ename(e, nb), e->pub.dim, (unsigned long long)at, (unsigned long long)s[k].offset);
            else
                at = end;
        }
        if (s != e->slices) free(s);
        if (rc) return rc;
        if (at != len)
            return tzr_fail(TZR_EFORMAT, "%s: tensor '%s': gap in dim %d: [%llu, %llu) is held by no shard", what,
                            ename(e, nb), e->pub.dim, (unsigned long long)at, (unsigned long long)len);
    }
    return 0;
}
