/* See st_run.h. */
#include "st_run.h"

#include <stdlib.h>
#include <string.h>

#define ST_RUN_BYTES ((size_t)2 << 20)
#define ST_RUN_SMALL ((size_t)512 << 10)

void st_run_init(st_run *r) {
    memset(r, 0, sizeof *r);
    const char *v = getenv("TZR_WRITER_RUNS");
    r->off = v && strcmp(v, "0") == 0;
}

int st_run_flush(st_run *r, tzr_output *out) {
    r->run_failed = 0;
    if (!r->len) return 0;
    int rc = out->pwrite_at(out, r->buf, r->len, r->at);
    r->len = 0;
    r->run_failed = rc != 0;
    return rc;
}

int st_run_put(st_run *r, tzr_output *out, const void *data, size_t len, uint64_t at, size_t i) {
    int small = !r->off && len <= ST_RUN_SMALL;
    if (r->len && (!small || r->at + r->len != at || r->len + len > ST_RUN_BYTES)) {
        /* Also before a direct write: a later put of the same bytes wins. */
        int rc = st_run_flush(r, out);
        if (rc) return rc;
    }
    r->run_failed = 0;
    if (small && !r->buf && !(r->buf = malloc(ST_RUN_BYTES))) small = 0; /* no memory: write directly */
    if (!small) return out->pwrite_at(out, data, len, at);
    if (!r->len) r->at = at, r->first = i;
    memcpy(r->buf + r->len, data, len);
    r->len += len;
    r->last = i;
    return 0;
}

void st_run_free(st_run *r) {
    free(r->buf);
    r->buf = NULL;
    r->len = 0;
}
