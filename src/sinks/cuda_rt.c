#include "cuda_rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tzr_cuda_api api;
static int load_rc;
static char load_msg[512];

static void load(void) {
    const char *names[] = {getenv("TZR_CUDART"), "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "/usr/local/cuda/lib64/libcudart.so"};
    void *h = NULL;
    const char *tried = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
        if (!names[i] || !*names[i]) continue;
        tried = names[i];
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (i == 0 && !h) break; /* an explicit choice must not fall back */
    }
    if (!h) {
        load_rc = TZR_ENODEV;
        snprintf(load_msg, sizeof load_msg, "CUDA runtime not found (%s): %s", tried ? tried : "libcudart.so",
                 dlerror());
        return;
    }
#define TZR_CUDA_LOAD(ret, name, args)                                                             \
    if (!(*(void **)&api.name = dlsym(h, #name))) {                                               \
        load_rc = TZR_ENODEV;                                                                      \
        snprintf(load_msg, sizeof load_msg, "CUDA runtime %s lacks %s", tried, #name);             \
        return;                                                                                    \
    }
    TZR_CUDA_SYMBOLS(TZR_CUDA_LOAD)
#undef TZR_CUDA_LOAD
    int count = 0;
    int err = api.cudaGetDeviceCount(&count);
    if (err != 0 || count <= 0) {
        load_rc = TZR_ENODEV;
        snprintf(load_msg, sizeof load_msg, "no CUDA device: %s",
                 err ? api.cudaGetErrorString(err) : "cudaGetDeviceCount found 0 devices");
    }
}

int tzr_cuda_load(const tzr_cuda_api **out) {
    pthread_once(&once, load);
    if (load_rc) return tzr_fail(load_rc, "%s", load_msg);
    *out = &api;
    return 0;
}

int tzr_cuda_fail(const tzr_cuda_api *a, int err, const char *call) {
    return tzr_fail(TZR_EDEVICE, "%s failed: %s (cudaError %d)", call, a->cudaGetErrorString(err), err);
}
