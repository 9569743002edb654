/* Fuzz the safetensors parser: any input must parse or fail cleanly; a
 * parsed file's every tensor is touched, and writing it back with the
 * writer must give a file that parses to the same tensors and metadata. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tzr_safetensors.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) __builtin_trap(); \
    } while (0)

typedef struct memout {
    tzr_output base;
    uint8_t *buf;
    size_t len, cap;
    uint8_t **keep; /* gets buf at destroy after a finish */
    size_t *keep_len;
    int finished;
} memout;

static int mo_pwrite(tzr_output *o, const void *p, size_t n, uint64_t off) {
    memout *m = (memout *)o;
    if (off > SIZE_MAX - n) return TZR_EINVAL;
    size_t end = (size_t)off + n;
    if (end > m->cap) {
        size_t cap = m->cap ? m->cap : 256;
        while (cap < end) cap *= 2;
        uint8_t *b = realloc(m->buf, cap);
        if (!b) return TZR_ENOMEM;
        memset(b + m->cap, 0, cap - m->cap);
        m->buf = b;
        m->cap = cap;
    }
    memcpy(m->buf + off, p, n);
    if (end > m->len) m->len = end;
    return 0;
}
static int mo_finish(tzr_output *o) {
    ((memout *)o)->finished = 1;
    return 0;
}
static void mo_abort(tzr_output *o) { ((memout *)o)->finished = 0; }
static void mo_destroy(tzr_output *o) {
    memout *m = (memout *)o;
    if (m->finished) {
        *m->keep = m->buf;
        *m->keep_len = m->len;
    } else {
        free(m->buf);
    }
    free(m);
}

/* Write f back out; returns the new file's bytes (malloc'd) or NULL. */
static uint8_t *rewrite(const tzr_st_file *f, size_t *out_len) {
    size_t n = tzr_st_count(f), nm = tzr_st_metadata_count(f);
    tzr_st_tensor *t = calloc(n ? n : 1, sizeof *t);
    const char **k = calloc(nm ? nm : 1, sizeof *k), **v = calloc(nm ? nm : 1, sizeof *v);
    memout *m = calloc(1, sizeof *m);
    uint8_t *result = NULL;
    if (!t || !k || !v || !m) {
        free(t), free(k), free(v), free(m);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) t[i] = *tzr_st_get(f, i);
    for (size_t i = 0; i < nm; i++) REQUIRE(tzr_st_metadata_get(f, i, &k[i], &v[i]) == 0);
    m->base.pwrite_at = mo_pwrite;
    m->base.finish = mo_finish;
    m->base.abort = mo_abort;
    m->base.destroy = mo_destroy;
    m->base.name = "rewrite";
    m->keep = &result;
    m->keep_len = out_len;
    tzr_st_writer *w;
    int rc = tzr_st_writer_open(&w, &m->base, t, n, k, v, nm);
    if (rc == 0) {
        /* Put each tensor in two halves, second half first. */
        for (size_t i = 0; i < n && rc == 0; i++) {
            const uint8_t *d = tzr_st_data(f, i);
            size_t len = (size_t)t[i].nbytes, h = len / 2;
            rc = tzr_st_writer_put(w, i, h, d + h, len - h);
            if (rc == 0) rc = tzr_st_writer_put(w, i, 0, d, h);
        }
        if (rc == 0) rc = tzr_st_writer_close(w);
        else tzr_st_writer_abort(w);
    }
    /* Everything the parser accepted must be writable (only allocation
     * failures may stop it). */
    REQUIRE(rc == 0 || rc == TZR_ENOMEM);
    free(t), free(k), free(v);
    return result;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tzr_st_file *f = NULL;
    int rc = tzr_st_parse(&f, data, size, "fuzz");
    if (rc != 0) {
        REQUIRE(f == NULL && rc < 0 && tzr_last_error()[0] != 0);
        return 0;
    }
    size_t n = tzr_st_count(f);
    volatile uint8_t sink = 0;
    uint64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        const tzr_st_tensor *t = tzr_st_get(f, i);
        const uint8_t *d = tzr_st_data(f, i);
        REQUIRE(t && d);
        REQUIRE(t->name_len == strlen(t->name) && t->name_len > 0);
        REQUIRE(t->data_offset >= prev);
        REQUIRE(t->data_offset <= size && t->nbytes <= size - t->data_offset);
        REQUIRE(d == data + t->data_offset);
        prev = t->data_offset;
        for (uint64_t k = 0; k < t->nbytes; k++) sink ^= d[k];
        for (uint32_t k = 0; k < t->ndim; k++) sink ^= (uint8_t)t->shape[k];
        sink ^= (uint8_t)t->st_dtype[0];
        size_t idx;
        REQUIRE(tzr_st_find(f, t->name, t->name_len, &idx) == 0 && idx == i);
    }
    REQUIRE(tzr_st_get(f, n) == NULL);
    for (size_t i = 0; i < tzr_st_metadata_count(f); i++) {
        const char *k, *v;
        REQUIRE(tzr_st_metadata_get(f, i, &k, &v) == 0);
        sink ^= (uint8_t)(k[0] ^ v[0]);
    }

    size_t len2 = 0;
    uint8_t *b2 = rewrite(f, &len2);
    if (b2) {
        tzr_st_file *g = NULL;
        REQUIRE(tzr_st_parse(&g, b2, len2, "rewritten") == 0);
        REQUIRE(tzr_st_count(g) == n && tzr_st_metadata_count(g) == tzr_st_metadata_count(f));
        for (size_t i = 0; i < n; i++) {
            const tzr_st_tensor *a = tzr_st_get(f, i), *b = tzr_st_get(g, i);
            REQUIRE(a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0);
            REQUIRE(a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes);
            REQUIRE(a->ndim == 0 || memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0);
            REQUIRE(a->nbytes == 0 ||
                    memcmp(tzr_st_data(f, i), tzr_st_data(g, i), (size_t)a->nbytes) == 0);
        }
        for (size_t i = 0; i < tzr_st_metadata_count(f); i++) {
            const char *k1, *v1, *k2, *v2;
            REQUIRE(tzr_st_metadata_get(f, i, &k1, &v1) == 0 && tzr_st_metadata_get(g, i, &k2, &v2) == 0);
            REQUIRE(strcmp(k1, k2) == 0 && strcmp(v1, v2) == 0);
        }
        tzr_st_free(g);
        free(b2);
    }
    tzr_st_free(f);
    (void)sink;
    return 0;
}
