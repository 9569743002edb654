/* The CUDA runtime, loaded at run time from one symbol list so the same
 * binary runs (and reports TZR_ENODEV) where there is no GPU. No CUDA
 * headers are needed: the few types used are opaque pointers and ints. */
#ifndef TZR_CUDA_RT_H
#define TZR_CUDA_RT_H
#include "internal.h"

typedef void *tzr_cuda_stream;
typedef void *tzr_cuda_event;

#define TZR_CUDA_MEMCPY_H2D 1
#define TZR_CUDA_MEMCPY_D2H 2
#define TZR_CUDA_NOT_READY 600 /* cudaErrorNotReady */
#define TZR_CUDA_STREAM_NONBLOCKING 1u
#define TZR_CUDA_EVENT_DISABLE_TIMING 2u
#define TZR_CUDA_HOST_ALLOC_PORTABLE 1u

#define TZR_CUDA_SYMBOLS(X)                                                         \
    X(int, cudaGetDeviceCount, (int *))                                             \
    X(int, cudaSetDevice, (int))                                                    \
    X(int, cudaMalloc, (void **, size_t))                                           \
    X(int, cudaFree, (void *))                                                      \
    X(int, cudaHostAlloc, (void **, size_t, unsigned))                              \
    X(int, cudaFreeHost, (void *))                                                  \
    X(int, cudaMemcpy, (void *, const void *, size_t, int))                         \
    X(int, cudaMemcpyAsync, (void *, const void *, size_t, int, tzr_cuda_stream))   \
    X(int, cudaStreamCreateWithFlags, (tzr_cuda_stream *, unsigned))               \
    X(int, cudaStreamDestroy, (tzr_cuda_stream))                                    \
    X(int, cudaStreamSynchronize, (tzr_cuda_stream))                                \
    X(int, cudaStreamQuery, (tzr_cuda_stream))                                      \
    X(int, cudaEventCreateWithFlags, (tzr_cuda_event *, unsigned))                 \
    X(int, cudaEventRecord, (tzr_cuda_event, tzr_cuda_stream))                      \
    X(int, cudaEventSynchronize, (tzr_cuda_event))                                  \
    X(int, cudaEventDestroy, (tzr_cuda_event))                                      \
    X(int, cudaDeviceSynchronize, (void))                                           \
    X(const char *, cudaGetErrorString, (int))

typedef struct tzr_cuda_api {
#define TZR_CUDA_FIELD(ret, name, args) ret(*name) args;
    TZR_CUDA_SYMBOLS(TZR_CUDA_FIELD)
#undef TZR_CUDA_FIELD
} tzr_cuda_api;

/* The loaded runtime, or TZR_ENODEV with a message (no library, no
 * device). $TZR_CUDART names the library to load instead of libcudart. */
TZR_HIDDEN int tzr_cuda_load(const tzr_cuda_api **api);
/* Map a cudaError_t to TZR_EDEVICE with the call and CUDA's text. */
TZR_HIDDEN int tzr_cuda_fail(const tzr_cuda_api *api, int err, const char *call);
#endif
