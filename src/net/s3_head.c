/* Whether an S3 object exists (one HEAD): the tools refuse to replace one
 * without --force, as they do for local files. */
#include "http_internal.h"

#include <string.h>
#include <strings.h>

int tzr_s3_exists(const char *url, const tzr_http_options *opt) {
    if (!url || strncasecmp(url, "s3://", 5) != 0)
        return tzr_fail(TZR_EINVAL, "%s: not an s3:// URL", url ? url : "(null)");
    tzr_s3_config cfg = {0};
    tzr_s3_target tgt = {0};
    tzr_http_common *common = NULL;
    int rc = tzr_http_common_new(&common, opt);
    if (!rc) rc = tzr_s3_config_resolve(&cfg, opt);
    if (!rc) rc = tzr_s3_target_make(&tgt, url, &cfg);
    if (!rc) {
        const tzr_http_options *ho = tzr_http_common_opts(common);
        tzr_http_call c;
        memset(&c, 0, sizeof c);
        c.method = "HEAD";
        c.cfg = &cfg;
        c.tgt = &tgt;
        c.deadline = tzr_now_s() + ho->total_timeout_s;
        c.max_retries = ho->max_retries;
        c.what = url;
        rc = tzr_http_perform(common, &c);
        if (!rc && c.status >= 200 && c.status < 300) rc = 1;
        else if (!rc && c.status != 404) rc = tzr_http_status_error(&c, &cfg);
        tzr_http_call_reset(&c);
    }
    tzr_s3_target_free(&tgt);
    tzr_s3_config_free(&cfg);
    tzr_http_common_free(common);
    return rc;
}
