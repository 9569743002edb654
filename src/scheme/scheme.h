/* The scheme table: what a path names (a local file, an http:// or
 * https:// URL, an s3:// URL) and which layer opens it. One row per
 * scheme, above io/ (local files) and net/ (HTTP, S3); every path-taking
 * open in the library goes through here. Adding a scheme (gs://, az://) is
 * a row in scheme.c plus the files that implement it. */
#ifndef TZR_SCHEME_H
#define TZR_SCHEME_H
#include "internal.h"

struct tzr_http_options;

typedef struct tzr_scheme {
    const char *prefix; /* "s3://", matched case-insensitively; "" (last row): local paths */
    int kind;           /* TZR_PATH_* (tzr.h) */
    const char *name;   /* for messages: "s3" */
    /* NULL where the scheme cannot do it (the message names the scheme).
     * http may be NULL (the defaults); local paths ignore it. */
    int (*open_source)(tzr_source **out, const char *path, unsigned flags, const struct tzr_http_options *http);
    int (*open_output)(tzr_output **out, const char *path, unsigned flags, const struct tzr_http_options *http);
    /* The URLs of the objects directly under prefix (ending in '/') whose
     * names end in suffix, in (byte) order; the caller frees each and the
     * array. */
    int (*list)(const char *prefix, const char *suffix, const struct tzr_http_options *http, char ***urls,
                size_t *n);
} tzr_scheme;

/* The row for path (the local-file row when no prefix matches). */
TZR_HIDDEN const tzr_scheme *tzr_scheme_of(const char *path);
/* 1 if path names a URL (any row but the local one). */
TZR_HIDDEN int tzr_is_url(const char *path);
/* A source, output or listing for path through its row; http may be NULL.
 * flags: TZR_SOURCE_* for sources, TZR_OUTPUT_* for outputs (local only). */
TZR_HIDDEN int tzr_source_open_path(tzr_source **out, const char *path, unsigned flags,
                                    const struct tzr_http_options *http);
TZR_HIDDEN int tzr_output_open_path(tzr_output **out, const char *path, unsigned flags,
                                    const struct tzr_http_options *http);
TZR_HIDDEN int tzr_path_list(const char *prefix, const char *suffix, const struct tzr_http_options *http,
                             char ***urls, size_t *n);
#endif
