#include "gpu_ccl.h"

#include <pthread.h>
#include <string.h>

static const char *const NCCL_LIBS[] = {"libnccl.so.2", NULL};
static const char *const NCCL_NAMES[] = {
#define TZR_NCCL_NAME(ret, name, args) #name,
    TZR_NCCL_SYMBOLS(TZR_NCCL_NAME)
#undef TZR_NCCL_NAME
};
#define NNAMES (sizeof NCCL_NAMES / sizeof NCCL_NAMES[0])

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tzr_nccl_api api;
static int load_rc;
static char load_msg[512];

static void load(void) {
    void *fns[NNAMES];
    tzr_dl_spec spec = {"NCCL", "TZR_NCCL", NCCL_LIBS, NCCL_NAMES, NNAMES, 0};
    if ((load_rc = tzr_dl_load(&spec, fns, load_msg, sizeof load_msg))) return;
    size_t k = 0;
#define TZR_NCCL_SET(ret, name, args) memcpy(&api.name, &fns[k++], sizeof(void *));
    TZR_NCCL_SYMBOLS(TZR_NCCL_SET)
#undef TZR_NCCL_SET
}

int tzr_nccl_load(const tzr_nccl_api **out) {
    pthread_once(&once, load);
    if (load_rc) return tzr_fail(load_rc, "%s", load_msg);
    *out = &api;
    return 0;
}

int tzr_nccl_fail(const tzr_nccl_api *n, int err, const char *call) {
    return tzr_fail(TZR_EDEVICE, "%s failed: %s (ncclResult %d)", call, n->ncclGetErrorString(err), err);
}
