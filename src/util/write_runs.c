/* See write_runs.h. */
#include "write_runs.h"

#include <stdlib.h>
#include <string.h>

int tzr_write_runs_on(void) {
    const char *v = getenv("TZR_WRITER_RUNS");
    return !(v && strcmp(v, "0") == 0);
}
