/* The scheme table (scheme.h): one row per thing a user may type where a
 * path goes. Rows adapt each layer's open functions to one signature; the
 * http(s) and s3 rows take the caller's tzr_http_options (NULL: the
 * defaults, see tzr_http.h), the local row ignores them. */
#include "scheme.h"
#include "dir_list.h"
#include "http_internal.h"
#include "tzr_http.h"

#include <string.h>
#include <strings.h>

static int file_source(tzr_source **out, const char *path, unsigned flags, const tzr_http_options *http) {
    return tzr_source_open_file(out, path, flags);
}
static int file_output(tzr_output **out, const char *path, unsigned flags, const tzr_http_options *http) {
    return flags ? tzr_output_open_file_flags(out, path, flags) : tzr_output_open_file(out, path);
}
static int url_source(tzr_source **out, const char *url, unsigned flags, const tzr_http_options *http) {
    return tzr_source_open_url(out, url, http);
}
static int s3_output(tzr_output **out, const char *url, unsigned flags, const tzr_http_options *http) {
    return tzr_output_open_s3(out, url, http, 0); /* flags are local-file ones */
}

/* First match wins; the local row (prefix "") matches everything. */
static const tzr_scheme rows[] = {
    {"s3://", TZR_PATH_S3, "s3", url_source, s3_output, tzr_s3_list},
    {"https://", TZR_PATH_HTTPS, "https", url_source, NULL, NULL},
    {"http://", TZR_PATH_HTTP, "http", url_source, NULL, NULL},
    {"", TZR_PATH_FILE, "file", file_source, file_output, tzr_dir_list},
};

const tzr_scheme *tzr_scheme_of(const char *path) {
    size_t i = 0;
    while (rows[i].prefix[0] && strncasecmp(path, rows[i].prefix, strlen(rows[i].prefix)) != 0) i++;
    return &rows[i];
}

int tzr_path_kind(const char *path) {
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    return tzr_scheme_of(path)->kind;
}

int tzr_is_url(const char *path) { return tzr_scheme_of(path)->kind != TZR_PATH_FILE; }

int tzr_source_open_path(tzr_source **out, const char *path, unsigned flags, const tzr_http_options *http) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL source pointer");
    *out = NULL;
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    return tzr_scheme_of(path)->open_source(out, path, flags, http);
}

int tzr_output_open_path(tzr_output **out, const char *path, unsigned flags, const tzr_http_options *http) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL output pointer");
    *out = NULL;
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    const tzr_scheme *s = tzr_scheme_of(path);
    if (!s->open_output)
        return tzr_fail(TZR_ENOTSUP, "%s: writing to %s:// URLs is not supported; use s3://", path, s->name);
    return s->open_output(out, path, flags, http);
}

int tzr_path_list(const char *prefix, const char *suffix, const tzr_http_options *http, char ***urls, size_t *n) {
    *urls = NULL, *n = 0;
    const tzr_scheme *s = tzr_scheme_of(prefix);
    if (!s->list) return tzr_fail(TZR_ENOTSUP, "%s: %s:// prefixes cannot be listed", prefix, s->name);
    return s->list(prefix, suffix, http, urls, n);
}
