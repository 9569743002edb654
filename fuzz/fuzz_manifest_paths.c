/* Differential: a shard manifest read as libtzr reads it (the scan of
 * shard_manifest_fast.c first) against the same document with one more
 * member in front whose escaped key the scan declines, so that jansson's
 * tree reads all of it. Both must give the same table, or fail with the
 * same code and message. Inputs of odd length have the scan read their
 * entry list in two halves on two threads however short it is, so the
 * split (where the middle falls anywhere) is compared too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard_internal.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) __builtin_trap(); \
    } while (0)

static char dir[64];
static void remove_dir(void) { rmdir(dir); }

/* The document at a fixed path (messages name it): 0 and *tb, or the
 * error code with its message in msg. */
static int read_doc(const uint8_t *data, size_t size, shard_table *tb, char *msg, size_t cap) {
    char path[128];
    snprintf(path, sizeof path, "%s/m.tzr-index.json", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(data, 1, size, f) == size || size == 0);
    fclose(f);
    int side = 0;
    int rc = shard_json_read(path, NULL, tb, &side);
    if (!rc && (rc = shard_table_validate(tb, path))) shard_table_free(tb);
    snprintf(msg, cap, "%s", rc ? tzr_last_error() : "");
    unlink(path);
    return rc;
}

static void same_tables(const shard_table *a, const shard_table *b) {
    REQUIRE(a->nshards == b->nshards && a->n == b->n);
    for (int k = 0; k < a->nshards; k++) {
        REQUIRE(!a->files[k] == !b->files[k]);
        REQUIRE(!a->files[k] || strcmp(a->files[k], b->files[k]) == 0);
        REQUIRE(a->sizes[k] == b->sizes[k]);
    }
    for (size_t i = 0; i < a->n; i++) {
        const shard_entry *x = &a->t[i], *y = &b->t[i];
        const tzr_shard_tensor *p = &x->pub, *q = &y->pub;
        REQUIRE(p->name_len == q->name_len && memcmp(p->name, q->name, p->name_len + 1) == 0);
        REQUIRE(p->dtype_len == q->dtype_len && memcmp(p->dtype_str, q->dtype_str, p->dtype_len + 1) == 0);
        REQUIRE(p->dtype == q->dtype && p->itemsize == q->itemsize && p->nbytes == q->nbytes);
        REQUIRE(p->ndim == q->ndim && memcmp(p->shape, q->shape, p->ndim * sizeof *p->shape) == 0);
        REQUIRE(p->dim == q->dim && p->has_sha256 == q->has_sha256);
        REQUIRE(!p->has_sha256 || memcmp(p->sha256, q->sha256, 32) == 0);
        REQUIRE(x->nslices == y->nslices && x->shared == y->shared);
        for (size_t s = 0; s < x->nslices; s++) {
            const shard_slice *u = &x->slices[s], *v = &y->slices[s];
            REQUIRE(u->shard == v->shard && u->offset == v->offset && u->length == v->length);
            REQUIRE(!u->header_sha == !v->header_sha);
            REQUIRE(!u->header_sha || memcmp(u->header_sha, v->header_sha, 32) == 0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/tzr-fuzz-paths-XXXXXX");
        REQUIRE(mkdtemp(dir));
        atexit(remove_dir);
    }
    /* After the opening brace of a non-empty object, on its line (so
     * jansson's line numbers stay). */
    size_t i = 0, j;
    while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r')) i++;
    if (i >= size || data[i] != '{') return 0;
    for (j = i + 1; j < size && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r'); j++) {}
    if (j >= size || data[j] == '}') return 0;
    static const char extra[] = "\"\\u0078\": 0, "; /* "x": 0, which no reader looks at */
    size_t el = sizeof extra - 1;
    uint8_t *b = malloc(size + el);
    REQUIRE(b);
    memcpy(b, data, i + 1);
    memcpy(b + i + 1, extra, el);
    memcpy(b + i + 1 + el, data + i + 1, size - i - 1);
    shard_table ta, tb;
    char ma[1024], mb[1024];
    size_t keep = shard_scan_split_min;
    if (size & 1) shard_scan_split_min = 0;
    int ra = read_doc(data, size, &ta, ma, sizeof ma);
    shard_scan_split_min = keep;
    int rb = read_doc(b, size + el, &tb, mb, sizeof mb);
    free(b);
    /* (A document with its own "x" member: jansson keeps the last, no
     * difference.) The same code, and the same message, except for
     * jansson's syntax errors ("...: line N: ..."), whose wording may
     * depend on what precedes the fault, the added member included. */
    REQUIRE(ra == rb);
    if (ra) {
        REQUIRE(strcmp(ma, mb) == 0 || (strstr(ma, ": line ") && strstr(mb, ": line ")));
    } else {
        same_tables(&ta, &tb);
        shard_table_free(&ta);
        shard_table_free(&tb);
    }
    return 0;
}
