/* The collective library the device loaders broadcast with (NCCL; RCCL
 * exports the same nccl* names, so a ROCm build is a second library list),
 * loaded through the GPU layer's loader. No vendor headers. */
#ifndef TZR_GPU_CCL_H
#define TZR_GPU_CCL_H
#include "gpu_dl.h"

typedef struct tzr_nccl_id { char internal[128]; } tzr_nccl_id;
typedef void *tzr_nccl_comm;
#define TZR_NCCL_INT8 0

#define TZR_NCCL_SYMBOLS(X)                                                                  \
    X(int, ncclGetUniqueId, (tzr_nccl_id *))                                                 \
    X(int, ncclCommInitRank, (tzr_nccl_comm *, int, tzr_nccl_id, int))                       \
    X(int, ncclBroadcast, (const void *, void *, size_t, int, int, tzr_nccl_comm, void *))   \
    X(int, ncclGroupStart, (void))                                                           \
    X(int, ncclGroupEnd, (void))                                                             \
    X(int, ncclCommDestroy, (tzr_nccl_comm))                                                 \
    X(int, ncclCommAbort, (tzr_nccl_comm))                                                   \
    X(const char *, ncclGetErrorString, (int))

typedef struct tzr_nccl_api {
#define TZR_NCCL_FIELD(ret, name, args) ret(*name) args;
    TZR_NCCL_SYMBOLS(TZR_NCCL_FIELD)
#undef TZR_NCCL_FIELD
} tzr_nccl_api;

/* The loaded library ($TZR_NCCL, else libnccl.so.2), or TZR_ENODEV. */
TZR_HIDDEN int tzr_nccl_load(const tzr_nccl_api **api);
/* TZR_EDEVICE naming the call and NCCL's text. */
TZR_HIDDEN int tzr_nccl_fail(const tzr_nccl_api *api, int err, const char *call);
#endif
