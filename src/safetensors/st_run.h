/* The safetensors writer's runs (sizes, reason and switch:
 * util/write_runs.h): consecutive small puts gathered and written with one
 * positional write. Several runs are open at once, since puts come from
 * several pipeline threads, each in order within its own range. Not
 * thread-safe, like the writer's puts. */
#ifndef TZR_ST_RUN_H
#define TZR_ST_RUN_H

#include "internal.h"
#include "tzr.h"

#define ST_RUNS 8

typedef struct st_slot {
    uint8_t *buf;       /* TZR_RUN_BYTES, on first use */
    uint64_t at;        /* file offset of buf[0] */
    size_t len;
    size_t first, last; /* the tensors in it, for messages */
    uint64_t used;      /* when last appended to: the oldest goes first */
} st_slot;

typedef struct st_run {
    int off; /* runs turned off */
    st_slot s[ST_RUNS];
    uint64_t tick;
    int run_failed;     /* the last failure was writing a run: */
    size_t first, last; /* its tensors */
} st_run;

TZR_HIDDEN void st_run_init(st_run *r);
/* Write data (of tensor i) at file offset at: appended to the run it
 * follows when small, else written directly (runs it overlaps first). */
TZR_HIDDEN int st_run_put(st_run *r, tzr_output *out, const void *data, size_t len, uint64_t at, size_t i);
/* Write every run out. */
TZR_HIDDEN int st_run_flush(st_run *r, tzr_output *out);
TZR_HIDDEN void st_run_free(st_run *r);
#endif
