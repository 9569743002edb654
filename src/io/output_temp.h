/* Temporary files of atomic local outputs: their names, the removal of
 * stale ones left by dead processes, and a registry a signal handler can
 * empty (tzr_output_remove_temporaries). */
#ifndef TZR_OUTPUT_TEMP_H
#define TZR_OUTPUT_TEMP_H

#include "internal.h"

#include <sys/types.h>

/* Bytes of the target's name kept in a temporary name: the rest of
 * ".NAME.HASH8.PID.XXXXXX.tmp" stays within NAME_MAX (255). */
#define TZR_TEMP_NAME_KEEP 200

/* The prefix every temporary file of target file name `base` starts with:
 * "." + base cut to TZR_TEMP_NAME_KEEP bytes (not inside a UTF-8 sequence)
 * + "." + 8 hex digits of a hash of the whole base + ".". Returns its
 * length, or -1 when cap is too small. */
TZR_HIDDEN int tzr_temp_prefix(char *buf, size_t cap, const char *base);
/* The pid in a temporary name "PREFIX" PID ".XXXXXX.tmp", or -1 when
 * name is not one of prefix's temporary files. */
TZR_HIDDEN long tzr_temp_pid(const char *name, const char *prefix);
/* Remove the temporary files of prefix in directory dir whose process is
 * gone (kill(pid, 0) fails with ESRCH) and whose file no writer holds
 * locked. Best effort; returns how many were removed. */
TZR_HIDDEN int tzr_temp_remove_stale(const char *dir, const char *prefix);

/* Registry of temporary files being written: register returns a slot (or
 * -1 when full: the file then only gets stale removal); claim takes the
 * slot back and returns 1 when it was still registered, 0 when a signal
 * handler removed the file first (the output must then not be committed). */
TZR_HIDDEN int tzr_temp_register(const char *path);
TZR_HIDDEN int tzr_temp_claim(int slot);

#endif
