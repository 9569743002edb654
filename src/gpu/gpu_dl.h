/* The one run-time library loader of the GPU layer: a library chosen by
 * an environment variable or from a list of names, and a table of symbol
 * names resolved in order. The GPU runtime (gpu_rt.h) and the collective
 * library (gpu_ccl.h) are two uses of it; neither needs vendor headers. */
#ifndef TZR_GPU_DL_H
#define TZR_GPU_DL_H
#include "internal.h"

typedef struct tzr_dl_spec {
    const char *what;               /* for messages: "CUDA runtime", "NCCL" */
    const char *env;                /* names the library; when set, no fallback */
    const char *const *libs;        /* names tried in order, NULL-terminated */
    const char *const *symbols;     /* nsymbols names, the function table's order */
    size_t nsymbols;
    size_t noptional;               /* the last ones may be missing: NULL then */
} tzr_dl_spec;

/* dlopen the library and resolve every symbol into fns[0, nsymbols)
 * (an optional one the library lacks is NULL):
 * 0, or TZR_ENODEV with the reason in msg (nothing is set as the last
 * error: callers load once and report the reason on every call). */
TZR_HIDDEN int tzr_dl_load(const tzr_dl_spec *spec, void **fns, char *msg, size_t msg_cap);
#endif
