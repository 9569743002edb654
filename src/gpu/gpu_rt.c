/* The GPU runtime table: a new runtime (HIP) adds its row here. */
#include "gpu_rt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tzr_gpu_runtime *const ROWS[] = {&tzr_gpu_cuda};
#define NROWS (sizeof ROWS / sizeof ROWS[0])

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tzr_gpu_api api;
static int load_rc;
static char load_msg[512];

static int load_row(const tzr_gpu_runtime *rt) {
    void *fns[TZR_GPU_NFUNCTIONS];
    tzr_dl_spec spec = {rt->name, rt->env, rt->libs, rt->symbols, TZR_GPU_NFUNCTIONS, TZR_GPU_NOPTIONAL};
    char what[64];
    snprintf(what, sizeof what, "%s runtime", rt->name);
    spec.what = what;
    if (tzr_dl_load(&spec, fns, load_msg, sizeof load_msg)) return TZR_ENODEV;
#define TZR_GPU_SET(field, ret, args) memcpy(&api.field, &fns[TZR_GPU_F(field)], sizeof(void *));
    TZR_GPU_FUNCTIONS(TZR_GPU_SET)
#undef TZR_GPU_SET
    api.rt = rt;
    int version = 0;
    if (!api.runtime_version || api.runtime_version(&version) != 0 || version < rt->batch_min_version)
        api.copy_batch_async = NULL;
    int count = 0, err = api.device_count(&count);
    if (err != 0 || count <= 0) {
        if (err)
            snprintf(load_msg, sizeof load_msg, "no %s device: %s", rt->name, api.error_string(err));
        else
            snprintf(load_msg, sizeof load_msg, "no %s device: %s found 0 devices", rt->name,
                     rt->symbols[TZR_GPU_F(device_count)]);
        return TZR_ENODEV;
    }
    return 0;
}

static void load(void) {
    /* A runtime named by its variable is the only one tried. */
    for (size_t k = 0; k < NROWS; k++) {
        const char *v = getenv(ROWS[k]->env);
        if (v && *v) {
            load_rc = load_row(ROWS[k]);
            return;
        }
    }
    for (size_t k = 0; k < NROWS; k++)
        if (!(load_rc = load_row(ROWS[k]))) return;
}

int tzr_gpu_load(const tzr_gpu_api **out) {
    pthread_once(&once, load);
    if (load_rc) return tzr_fail(load_rc, "%s", load_msg);
    *out = &api;
    return 0;
}

int tzr_gpu_fail(const tzr_gpu_api *a, int err, int function, const char *note) {
    return tzr_fail(TZR_EDEVICE, "%s%s%s%s failed: %s (%s %d)", a->rt->symbols[function], note ? " (" : "",
                    note ? note : "", note ? ")" : "", a->error_string(err),
                    a->rt->error_type, err);
}
