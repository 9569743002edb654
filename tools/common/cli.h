/* Shared command-line helpers for the libtzr tools. */
#ifndef TZR_CLI_H
#define TZR_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "tzr.h"
#include "tzr_http.h"

/* Exit codes shared by the tools. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

extern const char *cli_prog;

/* Print "prog: message" to stderr (one line). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "prog: <library message>" for a failed libtzr call; returns EXIT_FAIL. */
int cli_lib_error(int rc);
/* The tool's option for the index reservation ("--index-bytes"), named by
 * cli_lib_error in an "index full" message; NULL: the tool has none. */
extern const char *cli_index_option;
/* name for a terminal: control bytes, DEL and backslash as \xNN (as the
 * library's messages show them), cut with "..." to fit cap (>= 16). */
const char *cli_printable(const char *name, char *buf, size_t cap);
/* Print "prog: msg" for a library message kept earlier (as cli_lib_error). */
void cli_lib_message(const char *msg);

/* Key material from --key-file (exactly 32 raw bytes) or --password-file
 * (contents less one trailing newline). Returns 0 or prints and returns -1. */
typedef struct cli_crypt {
    uint8_t key[32];
    int have_key;
    char *password;
    size_t password_len;
} cli_crypt;
int cli_load_key_file(cli_crypt *c, const char *path);
int cli_load_password_file(cli_crypt *c, const char *path);
void cli_crypt_apply(const cli_crypt *c, tzr_crypt_params *p);
void cli_crypt_clear(cli_crypt *c);

/* The network settings of every URL the tool opens (inputs, shard files,
 * listings, outputs): passed to the library per call, never through the
 * environment. The flags below fill them; $TZR_HTTP_TIMEOUT (seconds) is
 * the tools' default --timeout. */
const tzr_http_options *cli_http(void);

/* --ca-bundle PEM: trust the CAs in PEM for https:// and s3:// (every URL
 * the library opens, shard files included). Returns 0 or prints and
 * returns -1. */
int cli_set_ca_bundle(const char *path);

/* --timeout SECONDS: how long a server may stay silent (no answer, or a
 * stalled body) and a connect may take, for every URL the library opens.
 * Returns 0 or prints and returns -1 for a value that is not a positive
 * number. */
int cli_set_timeout(const char *seconds);

/* Progress on stderr, only when it is a terminal: bytes done, GB/s, ETA. */
typedef struct cli_progress {
    int enabled;
    uint64_t total;
    double start, last;
    const char *label;
} cli_progress;
void cli_progress_begin(cli_progress *p, const char *label, uint64_t total);
void cli_progress_update(cli_progress *p, uint64_t done);
void cli_progress_end(cli_progress *p);
double cli_now(void);
/* Benchmarks: run fn(ctx, out) in a child process (its peak RSS is its
 * own; CUDA contexts never cross a fork), copy the out_len bytes it filled
 * back into out, and give fn's return value in *status and the child's
 * peak RSS in KiB (either may be NULL). Returns CLI_CHILD_OK, or
 * CLI_CHILD_NOT_STARTED (no pipe or fork; nothing ran) or CLI_CHILD_DIED
 * (it ended without reporting). */
enum { CLI_CHILD_OK = 0, CLI_CHILD_NOT_STARTED = 1, CLI_CHILD_DIED = 2 };
int cli_run_child(int (*fn)(void *ctx, void *out), void *ctx, void *out, size_t out_len, int *status,
                  long *maxrss_kib);

/* Strict option values: the whole of s must be the number, in [lo, hi];
 * anything else (empty, a sign where none is allowed, spaces, a trailing
 * suffix, overflow, out of range) prints "prog: OPT: 'S' is not ..." and
 * returns -1, so the tool exits with a usage error instead of falling back
 * to a default. Decimal digits only for the integer forms. */
int cli_uint(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
int cli_int(const char *opt, const char *s, int lo, int hi, int *out);
/* A count of MiB in [lo, hi], returned in bytes. */
int cli_mib(const char *opt, const char *s, uint64_t lo, uint64_t hi, size_t *bytes);
/* A finite decimal number ("2.5", "200") in [lo, hi]. */
int cli_double(const char *opt, const char *s, double lo, double hi, double *out);
/* A byte count with an optional binary suffix K, M or G ("512M", "1.5G"),
 * in [lo, hi] bytes. */
int cli_bytes(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* A comma-separated list of at most cap integers, each in [lo, hi] (lo >= 0);
 * returns how many, or -1 (printed) when any is bad or there are too many. */
int cli_int_list(const char *opt, const char *s, int lo, int hi, long *out, int cap);

/* Shell-style glob match (fnmatch) used by --filter. */
/* 1 for s3://, http:// and https:// paths (tzr_path_kind). */
int cli_is_url(const char *path);
/* 1 for s3:// paths, the URLs the library can write. */
int cli_is_s3(const char *path);
/* 1 for a local directory or a URL naming a prefix (ending in '/'). */
int cli_is_directory(const char *path);
/* 1 if path (a URL: less its query) ends in suffix. */
int cli_ends_with(const char *path, const char *suffix);
int cli_match(const char *pattern, const char *name);
/* Human size, e.g. "1.50 GiB". */
const char *cli_size(uint64_t bytes, char *buf, size_t cap);

#endif
