/* On a real GPU: load a generated checkpoint through the CUDA sink (real
 * libcudart, pinned staging, async copies, events), copy every tensor back
 * with the runtime itself and compare with the generator's bytes. Also with
 * caller-supplied device buffers. Prints PASS/FAIL lines. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "gen.h"
#include "tzr_load.h"

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
    return check_done();
}
