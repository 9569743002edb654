/* One policy for every writer's runs: small pieces written next to one
 * another are gathered in memory and written with one positional write.
 * Why: 4 KiB writes leave the page cache in 4 KiB folios, and the file then
 * reads back at about half the speed of the same bytes written in large
 * pieces (as `cat` writes them). The `.tensors` writer builds its records
 * in place in a run (writer_run.c), the safetensors writer copies puts
 * into one of several open runs (st_run.c); both take these sizes and this
 * switch. */
#ifndef TZR_WRITE_RUNS_H
#define TZR_WRITE_RUNS_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

#define TZR_RUN_SMALL ((size_t)512 << 10) /* larger pieces are written on their own */
#define TZR_RUN_BYTES ((size_t)2 << 20)   /* a run is written once this full */

/* Runs are on unless TZR_WRITER_RUNS=0 is in the environment (the output
 * is byte for byte the same either way; the switch is for measuring). */
TZR_HIDDEN int tzr_write_runs_on(void);

/* Whether n bytes at file offset `at` join an open run of len bytes
 * starting at run_at: they follow it and it has room. */
static inline int tzr_run_extends(uint64_t run_at, size_t len, uint64_t at, size_t n) {
    return run_at + len == at && len + n <= TZR_RUN_BYTES;
}
#endif
