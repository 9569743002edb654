/* See st_run.h. */
#include "st_run.h"
#include "write_runs.h"

#include <stdlib.h>
#include <string.h>

void st_run_init(st_run *r) {
    memset(r, 0, sizeof *r);
    r->off = !tzr_write_runs_on();
}

static int slot_flush(st_run *r, st_slot *s, tzr_output *out) {
    if (!s->len) return 0;
    int rc = out->pwrite_at(out, s->buf, s->len, s->at);
    s->len = 0;
    if (rc) r->run_failed = 1, r->first = s->first, r->last = s->last;
    return rc;
}

int st_run_flush(st_run *r, tzr_output *out) {
    r->run_failed = 0;
    int rc = 0;
    for (int k = 0; k < ST_RUNS; k++) {
        int src = slot_flush(r, &r->s[k], out);
        if (!rc) rc = src;
    }
    return rc;
}

int st_run_put(st_run *r, tzr_output *out, const void *data, size_t len, uint64_t at, size_t i) {
    r->run_failed = 0;
    int small = !r->off && len <= TZR_RUN_SMALL && len > 0;
    st_slot *to = NULL, *oldest = NULL, *empty = NULL;
    for (int k = 0; k < ST_RUNS; k++) {
        st_slot *s = &r->s[k];
        if (s->len && s->at < at + len && at < s->at + s->len) { /* overlap: a later put of a byte wins */
            int rc = slot_flush(r, s, out);
            if (rc) return rc;
        }
        if (s->len && s->at + s->len == at) to = s;
        else if (!s->len && !empty) empty = s;
        else if (s->len && (!oldest || s->used < oldest->used)) oldest = s;
    }
    if (!small) return out->pwrite_at(out, data, len, at);
    if (to && !tzr_run_extends(to->at, to->len, at, len)) { /* full: out, and start again here */
        int rc = slot_flush(r, to, out);
        if (rc) return rc;
    }
    if (!to) to = empty ? empty : oldest;
    if (to->len && to->at + to->len != at) {
        int rc = slot_flush(r, to, out);
        if (rc) return rc;
    }
    if (!to->buf && !(to->buf = malloc(TZR_RUN_BYTES))) return out->pwrite_at(out, data, len, at);
    if (!to->len) to->at = at, to->first = i;
    memcpy(to->buf + to->len, data, len);
    to->len += len;
    to->last = i;
    to->used = ++r->tick;
    return 0;
}

void st_run_free(st_run *r) {
    for (int k = 0; k < ST_RUNS; k++) free(r->s[k].buf), r->s[k].buf = NULL, r->s[k].len = 0;
}
