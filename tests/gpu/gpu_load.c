/* On a real GPU: load a generated checkpoint through the CUDA sink (real
 * libcudart, pinned staging, async copies, events), copy every tensor back
 * with the runtime itself and compare with the generator's bytes. Also with
 * caller-supplied device buffers, and from a safetensors file of the same
 * bytes (the same reader and sink). Prints PASS/FAIL lines. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "gen.h"
#include "tzr_load.h"
#include "tzr_safetensors.h"

static int (*d2h)(void *, const void *, size_t, int);
static int (*dmalloc)(void **, size_t);
static int (*dfree)(void *);
static char path[512];
static gen_spec spec = {200, 24 << 20, 300000, 1, NULL};

static void compare_all(tzr_reader *r, void **ptrs) {
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        uint64_t len;
        int meta;
        uint8_t *want = gen_expected(&spec, i, &len, &meta);
        uint8_t *got = malloc(len + 1);
        CHECK(d2h(got, ptrs[i], len, 2 /* cudaMemcpyDeviceToHost */) == 0);
        CHECK(memcmp(got, want, len) == 0);
        free(got);
        free(want);
    }
}

static void device_load_library_memory(void) {
    for (int verify = 0; verify < 2; verify++) {
        tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
        ro.verify = verify;
        tzr_reader *r;
        CHECK_OK(tzr_reader_open(&r, path, &ro));
        tzr_sink *sink;
        CHECK_OK(tzr_sink_cuda_new(&sink, 0, NULL, NULL));
        if (!sink) return;
        CHECK_OK(tzr_load(r, sink, NULL, NULL));
        void **ptrs = calloc(tzr_reader_count(r), sizeof *ptrs);
        for (size_t i = 0; i < tzr_reader_count(r); i++) {
            uint64_t len;
            CHECK_OK(tzr_sink_cuda_data(sink, i, &ptrs[i], &len));
        }
        compare_all(r, ptrs);
        free(ptrs);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
}

static void *caller_dest(void *ctx, size_t i, const tzr_tensor_info *t) {
    void **ptrs = ctx;
    if (dmalloc(&ptrs[i], t->nbytes ? t->nbytes : 1) != 0) return NULL;
    return ptrs[i];
}

static void device_load_caller_memory(void) {
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, path, NULL));
    void **ptrs = calloc(tzr_reader_count(r), sizeof *ptrs);
    tzr_sink *sink;
    CHECK_OK(tzr_sink_cuda_new(&sink, 0, caller_dest, ptrs));
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    o.chunk_bytes = 2 << 20;
    o.ring_bytes = 16 << 20;
    CHECK_OK(tzr_load(r, sink, &o, NULL));
    compare_all(r, ptrs);
    tzr_sink_free(sink);
    for (size_t i = 0; i < tzr_reader_count(r); i++) dfree(ptrs[i]);
    free(ptrs);
    tzr_reader_free(r);
}

/* The generator's tensors (less the meta one) as a safetensors file, then
 * loaded through the reader into device memory and compared. */
static void device_load_safetensors(void) {
    size_t n = spec.count, k = 0;
    tzr_st_tensor *ts = calloc(n, sizeof *ts);
    uint64_t *shapes = calloc(n, sizeof *shapes);
    size_t *orig = calloc(n, sizeof *orig);
    char (*names)[24] = calloc(n, sizeof *names);
    uint8_t **data = calloc(n, sizeof *data);
    for (size_t i = 0; i < n; i++) {
        uint64_t len;
        int meta;
        uint8_t *b = gen_expected(&spec, i, &len, &meta);
        if (meta) {
            free(b);
            continue;
        }
        snprintf(names[k], sizeof names[k], "t%zu", i);
        shapes[k] = len;
        ts[k] = (tzr_st_tensor){names[k], strlen(names[k]), "U8", TZR_DTYPE_U8, 1, &shapes[k], 0, len};
        data[k] = b, orig[k++] = i;
    }
    char st[600];
    snprintf(st, sizeof st, "%s.safetensors", path);
    tzr_output *out = NULL;
    tzr_st_writer *w = NULL;
    CHECK_OK(tzr_output_open_file(&out, st));
    if (out) CHECK_OK(tzr_st_writer_open(&w, out, ts, k, NULL, NULL, 0));
    for (size_t j = 0; w && j < k; j++) CHECK_OK(tzr_st_writer_put(w, j, 0, data[j], shapes[j]));
    if (w) CHECK_OK(tzr_st_writer_close(w));
    tzr_reader *r = NULL;
    tzr_sink *sink = NULL;
    CHECK_OK(tzr_reader_open(&r, st, NULL));
    if (r) CHECK_OK(tzr_sink_cuda_new(&sink, 0, NULL, NULL));
    if (r && sink) {
        CHECK(tzr_reader_format(r) == TZR_FORMAT_SAFETENSORS && tzr_reader_count(r) == k);
        CHECK_OK(tzr_load(r, sink, NULL, NULL));
        for (size_t j = 0; j < k && j < tzr_reader_count(r); j++) {
            void *dev = NULL;
            uint64_t len = 0;
            CHECK_OK(tzr_sink_cuda_data(sink, j, &dev, &len));
            uint8_t *got = malloc(shapes[j] + 1);
            CHECK(len == shapes[j] && d2h(got, dev, shapes[j], 2) == 0);
            CHECKF(memcmp(got, data[j], shapes[j]) == 0, "tensor %zu differs in device memory", orig[j]);
            free(got);
        }
    }
    tzr_sink_free(sink);
    tzr_reader_free(r);
    for (size_t j = 0; j < k; j++) free(data[j]);
    free(data), free(names), free(orig), free(shapes), free(ts);
}

int main(int argc, char **argv) {
    void *h = dlopen(getenv("TZR_CUDART") ? getenv("TZR_CUDART") : "libcudart.so", RTLD_NOW);
    if (!h) h = dlopen("/usr/local/cuda/lib64/libcudart.so", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "no libcudart\n");
        return 77;
    }
    *(void **)&d2h = dlsym(h, "cudaMemcpy");
    *(void **)&dmalloc = dlsym(h, "cudaMalloc");
    *(void **)&dfree = dlsym(h, "cudaFree");
    snprintf(path, sizeof path, "%s/gpu.tensors", argc > 1 ? argv[1] : check_tmpdir());
    if (gen_write(&spec, path)) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(device_load_library_memory);
    RUN(device_load_caller_memory);
    RUN(device_load_safetensors);
    return check_done();
}
