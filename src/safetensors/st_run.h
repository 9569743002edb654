/* The safetensors writer's run: consecutive small puts gathered and
 * written with one positional write (small writes leave small page-cache
 * folios, and the file then reads back at half speed). Not thread-safe,
 * like the writer's puts. TZR_WRITER_RUNS=0 turns it off. */
#ifndef TZR_ST_RUN_H
#define TZR_ST_RUN_H

#include "internal.h"
#include "tzr.h"

typedef struct st_run {
    int off;            /* runs turned off */
    uint8_t *buf;       /* ST_RUN_BYTES, on first use */
    uint64_t at;        /* file offset of buf[0] */
    size_t len;
    size_t first, last; /* the tensors in it, for messages */
    int run_failed;     /* the last failure was writing the run (first..last) */
} st_run;

TZR_HIDDEN void st_run_init(st_run *r);
/* Write data (of tensor i) at file offset at: into the run when small and
 * it follows the run, else the run first, then the data directly. */
TZR_HIDDEN int st_run_put(st_run *r, tzr_output *out, const void *data, size_t len, uint64_t at, size_t i);
TZR_HIDDEN int st_run_flush(st_run *r, tzr_output *out);
TZR_HIDDEN void st_run_free(st_run *r);
#endif
