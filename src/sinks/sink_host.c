/* Host-memory sink: the pipeline reads straight into each tensor's final
 * buffer (library-allocated, or handed out by the caller). Also the null
 * sink, which only accepts bytes (verification, benchmarks). */
#include "internal.h"
#include "mem.h"
#include "tzr_load.h"

#include <stdint.h>
#include <string.h>

/* Shared with sink_cuda.c: checks a table entry for tensor `index`. */
TZR_HIDDEN int tzr_table_entry(size_t index, const tzr_tensor_info *t, size_t n, const void *ptr,
                               uint64_t len, const char *what);

typedef struct host_tensor {
    uint8_t *data;
    uint64_t len;
} host_tensor;

/* Library-allocated tensors are packed into large huge-page blocks: one
 * allocation per tensor would cost a page fault per 4 KiB of every tensor
 * under 2 MiB, which bounds loads on many machines. */
#define BLOCK_BYTES ((size_t)64 << 20)
#define ALIGN 64

typedef struct host_sink {
    tzr_sink base;
    tzr_host_dest_fn dest;
    void *dest_ctx;
    host_tensor *tab; /* tzr_sink_host_table_new: the caller's table, copied */
    size_t tab_n;
    host_tensor *t;   /* grown in begin_tensor, which runs before any copy */
    size_t n;
    uint8_t **blocks;
    size_t nblocks;
    size_t block_left; /* bytes free at the end of the last block */
    uint8_t *block_next;
} host_sink;

static uint8_t *arena_alloc(host_sink *h, uint64_t len) {
    size_t need = (size_t)((len + ALIGN - 1) / ALIGN * ALIGN);
    if (need == 0) need = ALIGN;
    if (need > h->block_left) {
        size_t size = need > BLOCK_BYTES ? need : BLOCK_BYTES;
        uint8_t **grown = realloc(h->blocks, (h->nblocks + 1) * sizeof *grown);
        if (!grown) return NULL;
        h->blocks = grown;
        uint8_t *b = tzr_alloc_big(size);
        if (!b) return NULL;
        h->blocks[h->nblocks++] = b;
        h->block_next = b;
        h->block_left = size;
    }
    uint8_t *p = h->block_next;
    h->block_next += need;
    h->block_left -= need;
    return p;
}

/* The tensor table, grown to n entries (new ones zero). Huge pages once
 * large: realloc's fresh 4 KiB pages cost a fault each, and 100k tensors
 * take 2 MB of this table. */
static int grow_table(host_sink *h, size_t n) {
    host_tensor *grown = tzr_grow_big(h->t, h->n * sizeof *grown, n * sizeof *grown);
    if (!grown) return tzr_fail(TZR_ENOMEM, "out of memory");
    memset(grown + h->n, 0, (n - h->n) * sizeof *grown);
    h->t = grown;
    h->n = n;
    return 0;
}

/* Every selected tensor in one block (plus alignment), and the table at
 * its final size: a 64 MiB block per 64 MiB costs an mmap and a munmap
 * each (~0.1 ms apiece here), 1,000 of them for 64 GiB. */
static int host_reserve(tzr_sink *s, size_t count, uint64_t bytes) {
    host_sink *h = (host_sink *)s;
    if (h->dest || h->tab || h->nblocks || count == 0) return 0;
    if (count > h->n && grow_table(h, count)) return 0; /* begin_tensor grows it */
    uint64_t size = bytes + (uint64_t)count * ALIGN;
    if (size < bytes || size > SIZE_MAX / 2) return 0;
    uint8_t **blocks = malloc(sizeof *blocks);
    uint8_t *b = blocks ? tzr_alloc_big((size_t)size) : NULL;
    if (!b) { /* per-block allocation still works */
        free(blocks);
        return 0;
    }
    h->blocks = blocks;
    h->blocks[0] = b;
    h->nblocks = 1;
    h->block_next = b;
    h->block_left = (size_t)size;
    return 0;
}

static int host_begin(tzr_sink *s, size_t index, const tzr_tensor_info *t) {
    host_sink *h = (host_sink *)s;
    if (index >= h->n) {
        size_t n = h->n ? h->n : 64;
        while (n <= index) n *= 2;
        int rc = grow_table(h, n);
        if (rc) return rc;
    }
    host_tensor *ht = &h->t[index];
    memset(ht, 0, sizeof *ht);
    ht->len = t->nbytes;
    if (h->tab) {
        host_tensor e = index < h->tab_n ? h->tab[index] : (host_tensor){0};
        int rc = tzr_table_entry(index, t, h->tab_n, e.data, e.len, "host");
        if (rc) return rc;
        ht->data = e.data;
    } else if (h->dest) {
        ht->data = h->dest(h->dest_ctx, index, t);
        if (!ht->data && t->nbytes) {
            char nb[TZR_NAMEBUF];
            return tzr_fail(TZR_EINVAL, "tensor '%s': the destination callback returned NULL",
                            tzr_printable(t->name, t->name_len, nb, sizeof nb));
        }
    } else {
        ht->data = arena_alloc(h, t->nbytes);
        if (!ht->data) return tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)t->nbytes);
    }
    return 0;
}

static void *host_direct(tzr_sink *s, size_t index, uint64_t off, uint64_t len) {
    host_sink *h = (host_sink *)s;
    if (index >= h->n || off > h->t[index].len || len > h->t[index].len - off) return NULL;
    return h->t[index].data + off;
}

static int host_submit(tzr_sink *s, int slot, size_t index, uint64_t off, const void *src, size_t len) {
    (void)slot;
    uint8_t *dst = host_direct(s, index, off, len);
    if (!dst) return tzr_fail(TZR_EINVAL, "host sink: copy outside tensor %zu", index);
    memcpy(dst, src, len);
    return 0;
}

static void host_destroy(tzr_sink *s) {
    host_sink *h = (host_sink *)s;
    for (size_t i = 0; i < h->nblocks; i++) free(h->blocks[i]);
    free(h->blocks);
    free(h->tab);
    free(h->t);
    free(h);
}

int tzr_sink_host_new(tzr_sink **out, tzr_host_dest_fn dest, void *dest_ctx) {
    host_sink *h = calloc(1, sizeof *h);
    if (!h) return tzr_fail(TZR_ENOMEM, "out of memory");
    h->dest = dest;
    h->dest_ctx = dest_ctx;
    h->base.begin_tensor = host_begin;
    h->base.reserve = host_reserve;
    h->base.direct = host_direct;
    h->base.submit = host_submit;
    h->base.struct_size = sizeof h->base;
    h->base.destroy = host_destroy;
    h->base.name = "host";
    h->base.ctx = h;
    *out = &h->base;
    return 0;
}

/* A caller-made table turns the per-tensor callback into a lookup, so a
 * caller in another language (Python over ctypes) runs no code of its own
 * during the load. */
int tzr_sink_host_table_new(tzr_sink **out, void *const *ptrs, const uint64_t *lens, size_t n) {
    if (!out || (n && (!ptrs || !lens))) return tzr_fail(TZR_EINVAL, "host table sink: NULL table");
    *out = NULL;
    host_tensor *tab = calloc(n ? n : 1, sizeof *tab);
    if (!tab) return tzr_fail(TZR_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        tab[i].data = ptrs[i];
        tab[i].len = lens[i];
    }
    int rc = tzr_sink_host_new(out, NULL, NULL);
    if (rc) {
        free(tab);
        return rc;
    }
    host_sink *h = (host_sink *)*out;
    h->tab = tab;
    h->tab_n = n;
    return 0;
}

int tzr_table_entry(size_t index, const tzr_tensor_info *t, size_t n, const void *ptr, uint64_t len,
                    const char *what) {
    char nb[TZR_NAMEBUF];
    const char *name = tzr_printable(t->name, t->name_len, nb, sizeof nb);
    if (index >= n)
        return tzr_fail(TZR_EINVAL, "tensor '%s' (index %zu): not in the %s destination table of %zu entries",
                        name, index, what, n);
    if (t->nbytes && !ptr)
        return tzr_fail(TZR_EINVAL, "tensor '%s': no %s destination in the table", name, what);
    if (len < t->nbytes)
        return tzr_fail(TZR_EINVAL, "tensor '%s': %s destination holds %llu bytes, the tensor needs %llu",
                        name, what, (unsigned long long)len, (unsigned long long)t->nbytes);
    return 0;
}

int tzr_filter_mask(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)t;
    return ((const unsigned char *)ctx)[index] != 0;
}

int tzr_sink_host_data(tzr_sink *s, size_t index, void **data, uint64_t *len) {
    host_sink *h = (host_sink *)s;
    if (!s || s->destroy != host_destroy) return tzr_fail(TZR_EINVAL, "not a host sink");
    if (index >= h->n || !h->t[index].data) return tzr_fail(TZR_ENOTFOUND, "tensor %zu was not loaded", index);
    *data = h->t[index].data;
    *len = h->t[index].len;
    return 0;
}

static int null_submit(tzr_sink *s, int slot, size_t index, uint64_t off, const void *src, size_t len) {
    (void)s; (void)slot; (void)index; (void)off; (void)src; (void)len;
    return 0;
}

static void null_destroy(tzr_sink *s) { free(s); }

int tzr_sink_null_new(tzr_sink **out) {
    tzr_sink *s = calloc(1, sizeof *s);
    if (!s) return tzr_fail(TZR_ENOMEM, "out of memory");
    s->submit = null_submit;
    s->struct_size = sizeof *s;
    s->destroy = null_destroy;
    s->name = "null";
    *out = s;
    return 0;
}
