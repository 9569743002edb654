/* The GPU runtime the device sink and the device loaders call: a function
 * table with vendor-neutral field names, filled from a runtime row that
 * names each function in one vendor's API (gpu_cuda.c names CUDA's; a HIP
 * row would name hipMalloc, ... in a file of its own and join the list in
 * gpu_rt.c). The constants below are those of both APIs (HIP mirrors the
 * CUDA runtime's values). */
#ifndef TZR_GPU_RT_H
#define TZR_GPU_RT_H
#include "gpu_dl.h"

typedef void *tzr_gpu_stream;
typedef void *tzr_gpu_event;

/* cudaMemcpyAttributes: how a batch's copies may read their sources. */
typedef struct tzr_gpu_copy_attrs {
    int src_access_order; /* TZR_GPU_SRC_ACCESS_STREAM */
    int src_loc_type, src_loc_id, dst_loc_type, dst_loc_id;
    unsigned flags;
} tzr_gpu_copy_attrs;
#define TZR_GPU_SRC_ACCESS_STREAM 1 /* cudaMemcpySrcAccessOrderStream */

#define TZR_GPU_MEMCPY_H2D 1           /* cudaMemcpyHostToDevice */
#define TZR_GPU_MEMCPY_D2H 2           /* cudaMemcpyDeviceToHost */
#define TZR_GPU_NOT_READY 600          /* cudaErrorNotReady */
#define TZR_GPU_STREAM_NONBLOCKING 1u  /* cudaStreamNonBlocking */
#define TZR_GPU_EVENT_DISABLE_TIMING 2u /* cudaEventDisableTiming */
#define TZR_GPU_HOST_ALLOC_PORTABLE 1u /* cudaHostAllocPortable */
#define TZR_GPU_HOST_REGISTER_PORTABLE 1u /* cudaHostRegisterPortable */

/* field, return type, arguments */
#define TZR_GPU_FUNCTIONS(X)                                              \
    X(device_count, int, (int *))                                         \
    X(set_device, int, (int))                                             \
    X(dev_alloc, int, (void **, size_t))                                  \
    X(dev_free, int, (void *))                                            \
    X(host_alloc, int, (void **, size_t, unsigned))                       \
    X(host_free, int, (void *))                                           \
    X(host_register, int, (void *, size_t, unsigned))                     \
    X(host_unregister, int, (void *))                                     \
    X(copy, int, (void *, const void *, size_t, int))                     \
    X(copy_async, int, (void *, const void *, size_t, int, tzr_gpu_stream)) \
    X(stream_create, int, (tzr_gpu_stream *, unsigned))                   \
    X(stream_destroy, int, (tzr_gpu_stream))                              \
    X(stream_sync, int, (tzr_gpu_stream))                                 \
    X(stream_query, int, (tzr_gpu_stream))                                \
    X(event_create, int, (tzr_gpu_event *, unsigned))                     \
    X(event_record, int, (tzr_gpu_event, tzr_gpu_stream))                 \
    X(event_sync, int, (tzr_gpu_event))                                   \
    X(event_destroy, int, (tzr_gpu_event))                                \
    X(device_sync, int, (void))                                           \
    X(error_string, const char *, (int))                                  \
    /* optional (NULL where the runtime lacks them): */                   \
    X(runtime_version, int, (int *))                                      \
    X(copy_batch_async, int, (void *const *, const void *const *, const size_t *, size_t, \
                              tzr_gpu_copy_attrs *, size_t *, size_t, tzr_gpu_stream))
#define TZR_GPU_NOPTIONAL 2

/* TZR_GPU_F(copy): a function's place in a row's symbol list. */
enum {
#define TZR_GPU_ENUM(field, ret, args) TZR_GPU_F_##field,
    TZR_GPU_FUNCTIONS(TZR_GPU_ENUM)
#undef TZR_GPU_ENUM
    TZR_GPU_NFUNCTIONS
};
#define TZR_GPU_F(field) TZR_GPU_F_##field

/* A runtime row: how to find the library and what its functions are called. */
typedef struct tzr_gpu_runtime {
    const char *name;                        /* "CUDA" */
    const char *error_type;                  /* "cudaError", in messages */
    const char *const *libs;                 /* NULL-terminated */
    const char *env;                         /* "TZR_CUDART" */
    const char *symbols[TZR_GPU_NFUNCTIONS]; /* indexed by TZR_GPU_F() */
    /* The runtime version from which copy_batch_async has the signature
     * above (CUDA 12.8-12.9 had another): older ones leave it NULL. */
    int batch_min_version;
} tzr_gpu_runtime;

typedef struct tzr_gpu_api {
#define TZR_GPU_FIELD(field, ret, args) ret(*field) args;
    TZR_GPU_FUNCTIONS(TZR_GPU_FIELD)
#undef TZR_GPU_FIELD
    const tzr_gpu_runtime *rt;
} tzr_gpu_api;

/* The loaded runtime, or TZR_ENODEV with a message (no library, no
 * device). A runtime whose variable is set ($TZR_CUDART) is the only one
 * tried, as that library. */
TZR_HIDDEN int tzr_gpu_load(const tzr_gpu_api **api);
/* TZR_EDEVICE naming the failed call in the runtime's own terms
 * ("cudaMalloc failed: ... (cudaError 2)"), with an optional note. */
TZR_HIDDEN int tzr_gpu_fail(const tzr_gpu_api *api, int err, int function, const char *note);

extern TZR_HIDDEN const tzr_gpu_runtime tzr_gpu_cuda;
#endif
