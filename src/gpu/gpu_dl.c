#include "gpu_dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int tzr_dl_load(const tzr_dl_spec *s, void **fns, char *msg, size_t cap) {
    const char *chosen = s->env ? getenv(s->env) : NULL;
    const char *tried = NULL;
    void *h = NULL;
    if (chosen && *chosen) { /* an explicit choice must not fall back */
        tried = chosen;
        h = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; s->libs[i] && !h; i++) h = dlopen(tried = s->libs[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        const char *why = dlerror();
        snprintf(msg, cap, "%s not found (%s): %s", s->what, tried ? tried : "no library named",
                 why ? why : "not loadable");
        return TZR_ENODEV;
    }
    for (size_t k = 0; k < s->nsymbols; k++) {
        fns[k] = s->symbols[k] ? dlsym(h, s->symbols[k]) : NULL;
        if (!fns[k] && k >= s->nsymbols - s->noptional) continue;
        if (!fns[k]) {
            snprintf(msg, cap, "%s %s lacks %s", s->what, tried, s->symbols[k] ? s->symbols[k] : "(unnamed)");
            dlclose(h);
            return TZR_ENODEV;
        }
    }
    return 0; /* the handle stays open for the process */
}
