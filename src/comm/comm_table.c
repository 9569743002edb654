/* The tensor table of a whole-file multi-rank load: serialised on one rank
 * (so broadcast mode needs the file on rank 0 only), and the packed result
 * layout every rank builds from it. Blob entry, little-endian:
 *   u32 name_len, name, u32 dtype, u32 ndim, u64 shape[ndim],
 *   u64 data_offset, u64 nbytes, u8 meta */
#include "comm_internal.h"
#include "mem.h"
#include "tzr_load.h"

#include <string.h>

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

static int put(buf *b, const void *d, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *g = realloc(b->p, cap);
        if (!g) return tzr_fail(TZR_ENOMEM, "out of memory");
        b->p = g, b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return 0;
}
static int put32(buf *b, uint32_t v) { uint8_t x[4]; tzr_st32(x, v); return put(b, x, 4); }
static int put64(buf *b, uint64_t v) { uint8_t x[8]; tzr_st64(x, v); return put(b, x, 8); }

int comm_table_from_reader(tzr_reader *r, uint8_t **blob, size_t *len) {
    buf b = {0};
    int rc = put64(&b, tzr_reader_count(r));
    for (size_t i = 0; i < tzr_reader_count(r) && !rc; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        char nb[TZR_NAMEBUF];
        if (t->dtype == TZR_DTYPE_UNKNOWN)
            rc = tzr_fail(TZR_ENOTSUP, "tensor '%s': dtype not known to libtzr",
                          tzr_printable(t->name, t->name_len, nb, sizeof nb));
        if (rc) break;
        rc = put32(&b, (uint32_t)t->name_len) || put(&b, t->name, t->name_len) || put32(&b, (uint32_t)t->dtype) ||
             put32(&b, t->ndim);
        for (uint32_t d = 0; d < t->ndim && !rc; d++) rc = put64(&b, t->shape[d]);
        if (!rc) rc = put64(&b, t->data_offset) || put64(&b, t->nbytes) || put(&b, &(uint8_t){(uint8_t)!!t->meta}, 1);
        if (rc) rc = TZR_ENOMEM;
    }
    if (rc) {
        free(b.p);
        return rc;
    }
    *blob = b.p;
    *len = b.len;
    return 0;
}

typedef struct cur {
    const uint8_t *p;
    size_t left;
    int bad;
} cur;
static const uint8_t *take(cur *c, size_t n) {
    if (c->bad || n > c->left) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *p = c->p;
    c->p += n, c->left -= n;
    return p;
}
static uint64_t get64(cur *c) { const uint8_t *p = take(c, 8); return p ? tzr_ld64(p) : 0; }
static uint32_t get32(cur *c) { const uint8_t *p = take(c, 4); return p ? tzr_ld32(p) : 0; }

int comm_table_sink(const tzr_shard_result *res, int device, tzr_sink **out) {
    size_t n = res->count;
    void **ptrs = malloc((n ? n : 1) * sizeof *ptrs);
    uint64_t *lens = malloc((n ? n : 1) * sizeof *lens);
    int rc = ptrs && lens ? 0 : tzr_fail(TZR_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) ptrs[i] = res->pieces[i].data, lens[i] = res->pieces[i].nbytes;
    if (!rc) rc = device < 0 ? tzr_sink_host_table_new(out, ptrs, lens, n)
                             : tzr_sink_cuda_table_new(out, device, ptrs, lens, n);
    free(ptrs);
    free(lens);
    return rc;
}

void comm_layout_free(comm_layout *l) {
    free(l->spans);
    l->spans = NULL;
}

int comm_layout_build(const uint8_t *blob, size_t len, int alloc_arena, comm_layout *out) {
    memset(out, 0, sizeof *out);
    cur c = {blob, len, 0};
    uint64_t n = get64(&c);
    if (c.bad || n > len) return tzr_fail(TZR_EFORMAT, "tensor table: bad count");
    /* First pass: sizes. */
    size_t dims = 0, names = 0;
    cur c2 = c;
    for (uint64_t i = 0; i < n && !c2.bad; i++) {
        uint32_t nl = get32(&c2);
        take(&c2, nl);
        get32(&c2);
        uint32_t nd = get32(&c2);
        if (nd > TZR_MAX_DIMS) c2.bad = 1;
        take(&c2, (size_t)nd * 8 + 17);
        dims += nd, names += nl + 1;
    }
    if (c2.bad || c2.left) return tzr_fail(TZR_EFORMAT, "tensor table is truncated");
    tzr_shard_result *res = calloc(1, sizeof *res);
    size_t np = n ? (size_t)n : 1;
    if (res) res->pieces = calloc(1, np * sizeof *res->pieces + (dims + 1) * sizeof(uint64_t) + names);
    out->spans = calloc(np, sizeof *out->spans);
    if (!res || !res->pieces || !out->spans) {
        tzr_shard_result_free(res);
        free(out->spans);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    uint64_t *shapes = (uint64_t *)(res->pieces + np);
    char *strs = (char *)(shapes + dims + 1);
    uint64_t at = 0, meta_bytes = 0;
    res->count = (size_t)n;
    for (size_t i = 0; i < n; i++) {
        tzr_shard_piece *p = &res->pieces[i];
        uint32_t nl = get32(&c);
        memcpy(strs, take(&c, nl), nl);
        p->tensor = i;
        p->name = strs, p->name_len = nl;
        strs += nl + 1;
        p->dtype = (tzr_dtype)get32(&c);
        p->ndim = get32(&c);
        p->shape = shapes;
        shapes += p->ndim;
        for (uint32_t d = 0; d < p->ndim; d++) p->shape[d] = get64(&c);
        p->dim = TZR_SHARD_REPLICATED;
        uint64_t off = get64(&c);
        p->nbytes = get64(&c);
        int meta = *take(&c, 1);
        if (meta) {
            meta_bytes += p->nbytes;
            p->length = 1; /* marker, cleared below */
            continue;
        }
        out->spans[out->nspans++] = (comm_span){i, off, p->nbytes, at};
        p->data = (void *)(uintptr_t)at; /* offset until the arena exists */
        at += p->nbytes;
    }
    out->stream = at;
    uint64_t total = at + meta_bytes;
    /* Huge pages: fresh 4 KiB pages fault slower than the reads fill them. */
    if (alloc_arena && !(res->arena = tzr_alloc_big(total ? (size_t)total : 1))) {
        tzr_shard_result_free(res);
        free(out->spans);
        return tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)total);
    }
    uint64_t mat = at;
    for (size_t i = 0; i < n; i++) {
        tzr_shard_piece *p = &res->pieces[i];
        res->bytes += p->nbytes;
        int is_meta = p->length == 1;
        p->length = 0;
        uint64_t off = is_meta ? mat : (uint64_t)(uintptr_t)p->data;
        if (is_meta) mat += p->nbytes;
        /* without an arena, data holds the offset in it */
        p->data = res->arena ? (uint8_t *)res->arena + off : (void *)(uintptr_t)off;
        if (is_meta && res->arena) memset(p->data, 0, (size_t)p->nbytes);
    }
    out->res = res;
    return 0;
}
