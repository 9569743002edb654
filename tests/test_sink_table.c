/* Table sinks (tzr_sink_host_table_new, tzr_sink_cuda_table_new) and the
 * mask filter: the load lands in caller memory given up front, the table
 * is copied, unselected tensors are never touched, and a missing or short
 * entry fails the load naming the tensor. The CUDA one runs against the
 * fake runtime (device memory is host memory there, readable here). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gen.h"
#include "tzr_load.h"

static char fake_lib[512], path[512];
static gen_spec spec = {40, 3 << 20, 20000, 1, NULL};

typedef struct table {
    size_t n;
    void **ptrs;
    uint64_t *lens;
    unsigned char *mask;
} table;

/* One buffer per tensor with a guard byte after it, filled with 0xAB. */
static void table_make(table *t, tzr_reader *r, int every) {
    t->n = tzr_reader_count(r);
    t->ptrs = calloc(t->n, sizeof *t->ptrs);
    t->lens = calloc(t->n, sizeof *t->lens);
    t->mask = calloc(t->n, 1);
    for (size_t i = 0; i < t->n; i++) {
        uint64_t nb = tzr_reader_tensor(r, i)->nbytes;
        t->lens[i] = nb;
        t->ptrs[i] = malloc(nb + 1);
        memset(t->ptrs[i], 0xAB, nb + 1);
        t->mask[i] = (i % every) == 0;
    }
}

static void table_free(table *t) {
    for (size_t i = 0; i < t->n; i++) free(t->ptrs[i]);
    free(t->ptrs);
    free(t->lens);
    free(t->mask);
}

static int load(tzr_reader *r, tzr_sink *s, unsigned char *mask) {
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    o.chunk_bytes = 1 << 20;
    o.ring_bytes = 4 << 20;
    o.threads = 3;
    if (mask) {
        o.filter = tzr_filter_mask;
        o.filter_ctx = mask;
    }
    return tzr_load(r, s, &o, NULL);
}

static void check_bytes(const table *t, int selected_only) {
    for (size_t i = 0; i < t->n; i++) {
        uint64_t len;
        int meta;
        uint8_t *want = gen_expected(&spec, i, &len, &meta);
        uint8_t *got = t->ptrs[i];
        if (selected_only && !t->mask[i]) {
            int untouched = 1;
            for (uint64_t k = 0; k < len; k++) untouched &= got[k] == 0xAB;
            CHECK(untouched);
        } else {
            CHECK(len == t->lens[i] && memcmp(got, want, len) == 0);
        }
        CHECK(got[len] == 0xAB); /* nothing past the entry */
        free(want);
    }
}

static void host_table(void) {
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, path, NULL));
    table t;
    table_make(&t, r, 1);
    tzr_sink *s;
    CHECK_OK(tzr_sink_host_table_new(&s, t.ptrs, t.lens, t.n));
    /* The sink copied the table: scribbling on ours changes nothing. */
    void **saved = malloc(t.n * sizeof *saved);
    memcpy(saved, t.ptrs, t.n * sizeof *saved);
    memset(t.ptrs, 0, t.n * sizeof *t.ptrs);
    CHECK_OK(load(r, s, NULL));
    memcpy(t.ptrs, saved, t.n * sizeof *saved);
    free(saved);
    check_bytes(&t, 0);
    void *d;
    uint64_t len;
    CHECK_OK(tzr_sink_host_data(s, 1, &d, &len));
    CHECK(d == t.ptrs[1] && len == t.lens[1]);
    tzr_sink_free(s);
    table_free(&t);
    tzr_reader_free(r);
}

static void host_table_mask(void) {
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, path, NULL));
    table t;
    table_make(&t, r, 3);
    /* Unselected tensors need no entry at all. */
    for (size_t i = 0; i < t.n; i++)
        if (!t.mask[i]) t.lens[i] = 0;
    tzr_sink *s;
    CHECK_OK(tzr_sink_host_table_new(&s, t.ptrs, t.lens, t.n));
    CHECK_OK(load(r, s, t.mask));
    for (size_t i = 0; i < t.n; i++) t.lens[i] = tzr_reader_tensor(r, i)->nbytes;
    check_bytes(&t, 1);
    tzr_sink_free(s);
    table_free(&t);
    tzr_reader_free(r);
}

/* Tensor 7 is a big one: a short entry, a NULL entry and a table too
 * short for the file each fail with its name in the message. */
static void host_table_errors(void) {
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, path, NULL));
    table t;
    table_make(&t, r, 1);
    const char *name = tzr_reader_tensor(r, 7)->name;
    tzr_sink *s;
    for (int kind = 0; kind < 3; kind++) {
        uint64_t len7 = t.lens[7];
        void *p7 = t.ptrs[7];
        size_t n = t.n;
        if (kind == 0) t.lens[7] = len7 - 1;
        if (kind == 1) t.ptrs[7] = NULL;
        if (kind == 2) n = 7;
        CHECK_OK(tzr_sink_host_table_new(&s, t.ptrs, t.lens, n));
        CHECK_RC(load(r, s, NULL), TZR_EINVAL);
        CHECK(strstr(tzr_last_error(), name) != NULL);
        tzr_sink_free(s);
        t.lens[7] = len7;
        t.ptrs[7] = p7;
    }
    CHECK_RC(tzr_sink_host_table_new(&s, NULL, t.lens, 3), TZR_EINVAL);
    /* An empty table is fine for an empty selection. */
    unsigned char *none = calloc(t.n, 1);
    CHECK_OK(tzr_sink_host_table_new(&s, NULL, NULL, 0));
    CHECK_OK(load(r, s, none));
    tzr_sink_free(s);
    free(none);
    table_free(&t);
    tzr_reader_free(r);
}

/* Device buffers from the fake's own cudaMalloc (it checks every copy
 * lands inside a live allocation). */
static void cuda_table(void) {
    setenv("TZR_CUDART", fake_lib, 1);
    void *lib = dlopen(fake_lib, RTLD_NOW);
    CHECK(lib != NULL);
    if (!lib) return;
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(lib, "cudaMalloc");
    int (*cuda_free)(void *) = (int (*)(void *))dlsym(lib, "cudaFree");
    CHECK(cuda_malloc && cuda_free);
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, path, NULL));
    table t;
    table_make(&t, r, 2);
    void **dev = calloc(t.n, sizeof *dev);
    for (size_t i = 0; i < t.n; i++) {
        CHECK(cuda_malloc(&dev[i], t.lens[i] + 1) == 0);
        memset(dev[i], 0xAB, t.lens[i] + 1);
    }
    tzr_sink *s;
    CHECK_OK(tzr_sink_cuda_table_new(&s, 0, dev, t.lens, t.n));
    if (s) {
        CHECK_OK(load(r, s, t.mask));
        void *d;
        uint64_t len;
        CHECK_OK(tzr_sink_cuda_data(s, 0, &d, &len));
        CHECK(d == dev[0]);
        tzr_sink_free(s); /* synchronises the streams; does not free ours */
    }
    for (size_t i = 0; i < t.n; i++) memcpy(t.ptrs[i], dev[i], t.lens[i] + 1);
    check_bytes(&t, 1);
    /* A short device entry fails before any copy to it. */
    t.lens[0] -= 1;
    CHECK_OK(tzr_sink_cuda_table_new(&s, 0, dev, t.lens, t.n));
    if (s) {
        CHECK_RC(load(r, s, t.mask), TZR_EINVAL);
        CHECK(strstr(tzr_last_error(), tzr_reader_tensor(r, 0)->name) != NULL);
        tzr_sink_free(s);
    }
    t.lens[0] += 1;
    for (size_t i = 0; i < t.n; i++) CHECK(cuda_free(dev[i]) == 0);
    free(dev);
    table_free(&t);
    tzr_reader_free(r);
}

int main(void) {
    const char *build = getenv("TZR_BUILD");
    snprintf(fake_lib, sizeof fake_lib, "%s/tests/libfakecudart.so", build ? build : "build");
    char *abs = realpath(fake_lib, NULL);
    if (!abs) {
        printf("FAIL setup: %s missing\n", fake_lib);
        return 1;
    }
    snprintf(fake_lib, sizeof fake_lib, "%s", abs);
    free(abs);
    snprintf(path, sizeof path, "%s/table.tensors", check_tmpdir());
    if (gen_write(&spec, path)) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(host_table);
    RUN(host_table_mask);
    RUN(host_table_errors);
    RUN(cuda_table);
    return check_done();
}
