/* The CUDA device sink, driven through the real dlopen path against the
 * fake runtime in tests/fake_cuda (asynchronous streams, events, pinned
 * host memory checks). Also: a missing runtime and a machine with the
 * runtime but no device both give TZR_ENODEV, not a crash. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "gen.h"
#include "tzr_load.h"

static char fake_lib[512], path[512], small_path[512];
static gen_spec spec = {60, 3 << 20, 30000, 1, NULL};
static gen_spec small_spec = {3000, 9000, 700, 1, NULL}; /* hundreds of tensors a slot */

/* A counter of the fake runtime's (test-only symbols): batched copy
 * calls, host registrations, live pinned allocations. */
static long fake_count(const char *name) {
    void *h = dlopen(fake_lib, RTLD_NOW | RTLD_NOLOAD);
    long (*f)(void) = h ? (long (*)(void))dlsym(h, name) : NULL;
    return f ? f() : -1;
}
static int fake_live_pinned(void) {
    void *h = dlopen(fake_lib, RTLD_NOW | RTLD_NOLOAD);
    int (*f)(int) = h ? (int (*)(int))dlsym(h, "fake_cuda_live") : NULL;
    return f ? f(1) : -1;
}

/* Every tensor of the file at p, loaded into library device memory with
 * small slots (many slots, many copies each), equals the generator's. */
static void load_and_compare(const char *p, const gen_spec *g) {
    tzr_reader *r;
    CHECK_OK(tzr_reader_open(&r, p, NULL));
    tzr_sink *sink = NULL;
    if (r) CHECK_OK(tzr_sink_cuda_new(&sink, 0, NULL, NULL));
    if (!sink) {
        tzr_reader_free(r);
        return;
    }
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    o.chunk_bytes = 65536;
    o.ring_bytes = 8 * o.chunk_bytes;
    o.threads = 3;
    CHECK_OK(tzr_load(r, sink, &o, NULL));
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        uint64_t len, glen;
        int meta;
        uint8_t *want = gen_expected(g, i, &len, &meta);
        void *dev = NULL;
        CHECK_OK(tzr_sink_cuda_data(sink, i, &dev, &glen));
        CHECKF(dev && glen == len && memcmp(dev, want, len) == 0, "tensor %zu differs", i);
        free(want);
    }
    tzr_sink_free(sink);
    tzr_reader_free(r);
}

/* Library-allocated device tensors come from one cudaMalloc (reserve):
 * 256-byte aligned, disjoint, inside one span; with FAKE_CUDA_MAX_ALLOC
 * below the total, that cudaMalloc fails and each tensor gets its own. */
static void device_load(void) {
    setenv("TZR_CUDART", fake_lib, 1);
    for (int verify = 0; verify < 3; verify++) {
        if (verify == 2) setenv("FAKE_CUDA_MAX_ALLOC", "4194304", 1);
        tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
        ro.verify = verify;
        tzr_reader *r;
        CHECK_OK(tzr_reader_open(&r, path, &ro));
        tzr_sink *sink;
        CHECK_OK(tzr_sink_cuda_new(&sink, 0, NULL, NULL));
        if (!sink) return;
        tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
        o.chunk_bytes = verify ? 65536 : 1 << 20;
        o.ring_bytes = 4 * o.chunk_bytes;
        o.threads = 3;
        tzr_load_stats st;
        CHECK_OK(tzr_load(r, sink, &o, &st));
        CHECK(st.staging_bytes <= 4 * o.chunk_bytes);
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        uint64_t total = 0;
        size_t n = tzr_reader_count(r);
        for (size_t i = 0; i < n; i++) {
            uint64_t len, glen;
            int meta;
            uint8_t *want = gen_expected(&spec, i, &len, &meta);
            void *dev;
            CHECK_OK(tzr_sink_cuda_data(sink, i, &dev, &glen));
            /* The fake's device memory is host memory, readable here. */
            CHECK(glen == len && memcmp(dev, want, len) == 0);
            CHECK((uintptr_t)dev % 256 == 0);
            if ((uintptr_t)dev < lo) lo = (uintptr_t)dev;
            if ((uintptr_t)dev + len > hi) hi = (uintptr_t)dev + len;
            total += len;
            for (size_t j = 0; j < i; j++) { /* disjoint */
                void *other;
                uint64_t olen;
                tzr_sink_cuda_data(sink, j, &other, &olen);
                CHECK(len == 0 || olen == 0 || (uint8_t *)dev + len <= (uint8_t *)other ||
                      (uint8_t *)other + olen <= (uint8_t *)dev);
            }
            free(want);
        }
        /* One span (one allocation), or, when that was refused, not. */
        if (verify < 2) CHECK(hi - lo <= total + 256 * n);
        else CHECK(hi - lo > total + 256 * n);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    unsetenv("FAKE_CUDA_MAX_ALLOC");
    double gbps = 0;
    CHECK_OK(tzr_cuda_h2d_bandwidth(0, 1 << 20, 2, &gbps));
    CHECK(gbps > 0);
}

/* Run fn in a child so the once-only runtime loading starts fresh. */
static int in_child(const char *cudart, const char *devices) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv("TZR_CUDART", cudart, 1);
        if (devices) setenv("FAKE_CUDA_DEVICES", devices, 1);
        tzr_sink *s;
        int rc = tzr_sink_cuda_new(&s, 0, NULL, NULL);
        int ok = rc == TZR_ENODEV && strlen(tzr_last_error()) > 0;
        if (!ok) fprintf(stderr, "  child: rc %d: %s\n", rc, tzr_last_error());
        _exit(ok ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static void no_runtime(void) { CHECK(in_child("/nonexistent/libcudart.so", NULL) == 0); }

/* A runtime with batched copies gets a slot's copies in one call; one
 * without (version below 13.0) gets them one by one; staging is pinned
 * in place (cudaHostRegister) or, where that is refused, by
 * cudaHostAlloc: the same bytes every way, and no pinned memory left.
 * Each in a child: the runtime is loaded once a process. */
static void staging_and_copy_modes(void) {
    static const char *const modes[] = {"batched, registered", "runtime 12.8", "no register"};
    for (int m = 0; m < 3; m++) {
        pid_t pid = fork();
        if (pid == 0) {
            setenv("TZR_CUDART", fake_lib, 1);
            if (m == 1) setenv("FAKE_CUDA_RUNTIME_VERSION", "12080", 1);
            if (m == 2) setenv("FAKE_CUDA_NO_REGISTER", "1", 1);
            load_and_compare(small_path, &small_spec);
            load_and_compare(path, &spec);
            long calls = fake_count("fake_cuda_batch_calls"), regs = fake_count("fake_cuda_register_calls");
            /* 3000 tensors in 64 KiB slots: dozens of batches, each of many copies. */
            CHECKF(m == 1 ? calls == 0 : calls >= 10, "%ld batched calls (%s)", calls, modes[m]);
            CHECKF(m == 2 ? regs == 0 : regs >= 2, "%ld registrations (%s)", regs, modes[m]);
            CHECKF(fake_live_pinned() == 0, "%d pinned blocks left (%s)", fake_live_pinned(), modes[m]);
            _exit(check_case_failed ? 1 : 0);
        }
        int st;
        waitpid(pid, &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child (%s) failed", modes[m]);
    }
}
static void no_device(void) { CHECK(in_child(fake_lib, "0") == 0); }

int main(void) {
    const char *build = getenv("TZR_BUILD");
    snprintf(fake_lib, sizeof fake_lib, "%s/tests/libfakecudart.so", build ? build : "build");
    if (access(fake_lib, R_OK) != 0) {
        printf("FAIL setup: %s missing\n", fake_lib);
        return 1;
    }
    char *abs = realpath(fake_lib, NULL);
    snprintf(fake_lib, sizeof fake_lib, "%s", abs);
    free(abs);
    snprintf(path, sizeof path, "%s/dev.tensors", check_tmpdir());
    if (gen_write(&spec, path)) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(no_runtime);
    RUN(no_device);
    snprintf(small_path, sizeof small_path, "%s/small.tensors", check_tmpdir());
    if (gen_write(&small_spec, small_path)) {
        printf("FAIL setup: %s\n", tzr_last_error());
        return 1;
    }
    RUN(staging_and_copy_modes);
    RUN(device_load);
    return check_done();
}
