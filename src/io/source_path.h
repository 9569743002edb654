#ifndef TZR_SOURCE_PATH_H
#define TZR_SOURCE_PATH_H
#include "internal.h"
/* 1 if path is an s3:// or http(s):// URL. */
TZR_HIDDEN int tzr_is_url(const char *path);
/* Local path or URL to a source (URLs: tzr_source_open_url, default options). */
TZR_HIDDEN int tzr_source_open_path(tzr_source **out, const char *path, unsigned flags);
/* Local path (atomic file, tzr_output_open_file) or s3:// URL (multipart
 * upload, tzr_output_open_s3 with default options) to an output. */
TZR_HIDDEN int tzr_output_open_path(tzr_output **out, const char *path);
/* The s3:// URLs of the objects directly under prefix_url (which ends in
 * '/') whose names end in suffix, in the listing's (byte) order. opt may
 * be NULL. The caller frees each URL and the array. */
struct tzr_http_options;
TZR_HIDDEN int tzr_s3_list(const char *prefix_url, const char *suffix, const struct tzr_http_options *opt,
                           char ***urls, size_t *n);
#endif
