/* What the tools do around an output file: refuse to replace an existing
 * one without --force, and stop cleanly on SIGINT, SIGTERM and SIGHUP. */
#ifndef TZR_CLI_OUTPUT_H
#define TZR_CLI_OUTPUT_H

#include <signal.h>

/* The signal that asked the tool to stop (0: none). Also a load's
 * tzr_load_options.cancel. */
extern volatile sig_atomic_t cli_stop_signal;

/* Before any input is read: a local target that is a directory, device,
 * FIFO or socket (after symbolic links) or whose directory is missing is
 * refused, and without force so is an existing one (a symbolic link
 * counts): prints "PATH exists; give --force to replace it". Returns 0 or
 * -1 (printed). URLs are not checked. */
int cli_output_check(const char *path, int force);

/* From now on SIGINT, SIGTERM and SIGHUP stop the tool: the handler removes
 * every temporary output file (and `extra`, a finished intermediate file,
 * when not NULL), prints what was kept and exits 128+N. When nothing was
 * being written, or the output is already being committed, it only sets
 * cli_stop_signal: the tool then reports through cli_output_stopped; a
 * second signal exits at once. SIGPIPE is ignored while writing: a closed
 * stderr must not leave a half-written output. */
void cli_output_guard(const char *target, const char *extra);
/* Replace the handler's "nothing written, ..." text (e.g. once shards are
 * being committed). */
void cli_output_note(const char *kept);
/* After noticing cli_stop_signal: prints what was kept (committed: target
 * is complete) and returns the exit status 128+N. */
int cli_output_stopped(int committed);

#endif
