/* Runs of small records (see writer_internal.h): consecutive records
 * built in one buffer and written with one positional write. */
#include "writer_internal.h"
#include "write_runs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int writer_run_takes(const tzr_writer *w, const writer_record *rec) {
    return w->runs && rec->hsize + rec->stored_len <= TZR_RUN_SMALL;
}

int writer_run_extends(uint64_t run_at, size_t len, size_t count, uint64_t at, size_t n) {
    return tzr_run_extends(run_at, len, at, n) && count < RUN_RECORDS;
}

int writer_run_flush(tzr_writer *w, writer_run *r) {
    if (!r->len) return 0;
    int rc = writer_put(w, r->buf, r->len, r->at);
    if (rc)
        rc = tzr_fail_prefix(rc, "tensors '%s' to '%s' (%zu records at offsets %llu to %llu, written as one): ",
                             r->first, r->last, r->count, (unsigned long long)r->at,
                             (unsigned long long)(r->at + r->len));
    r->len = r->count = 0;
    return rc;
}

uint8_t *writer_run_place(tzr_writer *w, writer_run *r, const writer_record *rec, const char *name, int *rc) {
    size_t n = (size_t)(rec->hsize + rec->stored_len);
    *rc = 0;
    if (r->len && !writer_run_extends(r->at, r->len, r->count, rec->hdr_at, n))
        if ((*rc = writer_run_flush(w, r))) return NULL;
    if (!r->buf && !(r->buf = malloc(TZR_RUN_BYTES))) {
        *rc = tzr_fail(TZR_ENOMEM, "out of memory (writer run buffer)");
        return NULL;
    }
    if (!r->len) {
        r->at = rec->hdr_at;
        snprintf(r->first, sizeof r->first, "%s", name);
    }
    snprintf(r->last, sizeof r->last, "%s", name);
    uint8_t *p = r->buf + r->len;
    r->len += n;
    r->count++;
    return p;
}
