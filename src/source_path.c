/* Opens a source for anything a user may type where a path goes: a local
 * path, or (with the HTTP/S3 layer) http://, https:// and s3:// URLs. */
#include "internal.h"
#include "source_path.h"

#include <string.h>
#include <strings.h>

int tzr_is_url(const char *path) {
    return strncasecmp(path, "s3://", 5) == 0 || strncasecmp(path, "http://", 7) == 0 ||
           strncasecmp(path, "https://", 8) == 0;
}

int tzr_source_open_path(tzr_source **out, const char *path, unsigned flags) {
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    if (tzr_is_url(path))
        return tzr_fail(TZR_ENOTSUP, "%s: URLs are not supported in this build", path);
    return tzr_source_open_file(out, path, flags);
}

int tzr_output_open_path(tzr_output **out, const char *path) {
    if (!path) return tzr_fail(TZR_EINVAL, "NULL path");
    if (tzr_is_url(path))
        return tzr_fail(TZR_ENOTSUP, "%s: writing to URLs is not supported in this build", path);
    return tzr_output_open_file(out, path);
}
