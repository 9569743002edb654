/* Opens a source or output for anything a user may type where a path goes:
 * a local path, or an http://, https:// or s3:// URL (HTTP/S3 layer with
 * default options: credentials and endpoint from the environment/config
 * files, see tzr_http.h). */
#include "internal.h"
#include "source_path.h"
#include "tzr_http.h"

#include <string.h>
#include <strings.h>

int tzr_is_url(const char *path) {
    return strncasecmp(path, "s3://", 5) == 0 || strncasecmp(path, "http://", 7) == 0 ||
           strncasecmp(path, "https://", 8) == 0;
}

int tzr_source_open_path(tzr_source **out, const char *path, unsigned flags) {
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    if (tzr_is_url(path)) return tzr_source_open_url(out, path, NULL);
    return tzr_source_open_file(out, path, flags);
}

int tzr_output_open_path(tzr_output **out, const char *path) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL output pointer");
    *out = NULL;
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    if (strncasecmp(path, "s3://", 5) == 0) return tzr_output_open_s3(out, path, NULL, 0);
    if (tzr_is_url(path))
        return tzr_fail(TZR_ENOTSUP, "%s: writing to http(s) URLs is not supported; use s3://",
                        path);
    return tzr_output_open_file(out, path);
}
