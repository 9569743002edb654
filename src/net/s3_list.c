/* The objects directly under an s3:// prefix (ListObjectsV2 with
 * delimiter '/', every page): how a Hugging Face "directory" in a bucket
 * without an index is turned into its files. */
#include "http_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* XML character data back to bytes: the five entities and &#N; / &#xN;
 * (ASCII only: S3 escapes just these in keys). 0, or -1 on a bad one. */
static int xml_unescape(const char *s, size_t n, char *out, size_t cap) {
    static const struct { const char *e; char c; } ents[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t o = 0;
    for (size_t i = 0; i < n; o++) {
        if (o + 1 >= cap) return -1;
        if (s[i] != '&') {
            out[o] = s[i++];
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof ents / sizeof ents[0]; k++) {
            size_t l = strlen(ents[k].e);
            if (n - i >= l && memcmp(s + i, ents[k].e, l) == 0) {
                out[o] = ents[k].c, i += l;
                break;
            }
        }
        if (k < sizeof ents / sizeof ents[0]) continue;
        if (n - i < 4 || s[i + 1] != '#') return -1;
        char *e;
        long v = s[i + 2] == 'x' ? strtol(s + i + 3, &e, 16) : strtol(s + i + 2, &e, 10);
        if (e >= s + n || *e != ';' || v <= 0 || v > 127) return -1;
        out[o] = (char)v, i = (size_t)(e - s) + 1;
    }
    out[o] = 0;
    return 0;
}

static int add_url(char ***urls, size_t *n, size_t *cap, const char *bucket, const char *key) {
    if (*n == *cap) {
        char **g = realloc(*urls, (*cap = *cap ? 2 * *cap : 16) * sizeof *g);
        if (!g) return tzr_fail(TZR_ENOMEM, "out of memory");
        *urls = g;
    }
    size_t l = strlen(bucket) + strlen(key) + 7;
    if (!((*urls)[*n] = malloc(l))) return tzr_fail(TZR_ENOMEM, "out of memory");
    snprintf((*urls)[(*n)++], l, "s3://%s/%s", bucket, key);
    return 0;
}

int tzr_s3_list_page(const char *body, size_t len, const char *what, const char *bucket, const char *prefix,
                     size_t prefix_len, const char *suffix, char ***urls, size_t *n, size_t *cap, int *more, char **token) {
    const char *end = body + len;
    int rc = 0;
    *more = 0, *token = NULL;
    for (const char *p = body; !rc;) {
        size_t bl, kl;
        const char *blk = tzr_xml_find(p, end, "Contents", &bl);
        if (!blk) break;
        const char *k = tzr_xml_find(blk, blk + bl, "Key", &kl);
        char key[2048];
        if (!k || xml_unescape(k, kl, key, sizeof key))
            rc = tzr_fail(TZR_EHTTP, "%s: ListObjectsV2 answer has a bad <Key> at byte %zu", what, (size_t)(blk - body));
        size_t l = rc ? 0 : strlen(key), sl = strlen(suffix);
        /* Directly under the prefix asked for (a server may list others:
         * they are not followed), and not a hidden (dot) file; so no dot
         * segment past the prefix. */
        if (!rc && l > sl && l > prefix_len && strncmp(key, prefix, prefix_len) == 0 &&
            strcmp(key + l - sl, suffix) == 0 && !strchr(key + prefix_len, '/') && key[prefix_len] != '.')
            rc = add_url(urls, n, cap, bucket, key);
        p = blk + bl;
    }
    size_t tl, nl;
    const char *tr = tzr_xml_find(body, end, "IsTruncated", &tl);
    const char *nt = tzr_xml_find(body, end, "NextContinuationToken", &nl);
    *more = !rc && tr && tl == 4 && strncasecmp(tr, "true", 4) == 0;
    if (*more && !nt) rc = tzr_fail(TZR_EHTTP, "%s: ListObjectsV2 says more keys follow but gives no token", what);
    if (*more && !rc) {
        char raw[8192];
        if (xml_unescape(nt, nl, raw, sizeof raw)) rc = tzr_fail(TZR_EHTTP, "%s: bad continuation token", what);
        else if (!(*token = tzr_uri_encode(raw, strlen(raw), 0))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    }
    return rc;
}

int tzr_s3_list(const char *prefix_url, const char *suffix, const tzr_http_options *opt, char ***urls, size_t *n) {
    *urls = NULL, *n = 0;
    size_t cap = 0;
    tzr_s3_config cfg = {0};
    tzr_s3_target tgt = {0};
    tzr_http_common *common = NULL;
    char *enc_prefix = NULL, *token = NULL, *prev = NULL, *q = NULL, probe[4200];
    /* A target for a key under the bucket, then its path cut to the bucket. */
    if ((size_t)snprintf(probe, sizeof probe, "%sx", prefix_url) >= sizeof probe)
        return tzr_fail(TZR_ELIMIT, "%.200s...: URL over %zu bytes", prefix_url, sizeof probe - 2);
    int rc = tzr_http_common_new(&common, opt);
    if (!rc) rc = tzr_s3_config_resolve(&cfg, opt);
    if (!rc) rc = tzr_s3_target_make(&tgt, probe, &cfg);
    if (rc) goto out;
    size_t klen = strlen(tgt.key) - 1; /* the prefix: the probe key less its 'x' */
    size_t plen = strlen(tgt.path) - strlen(tgt.key);
    tgt.path[plen > 1 ? plen - 1 : 1] = 0; /* "/bucket" (path style) or "/" */
    if (!(enc_prefix = tzr_uri_encode(tgt.key, klen, 0))) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto out;
    }
    const tzr_http_options *ho = tzr_http_common_opts(common);
    for (int page = 0; !rc; page++) {
        size_t qcap = (token ? strlen(token) : 0) + strlen(enc_prefix) + 64;
        free(q);
        if (!(q = malloc(qcap))) {
            rc = tzr_fail(TZR_ENOMEM, "out of memory");
            break;
        }
        snprintf(q, qcap, "%s%s&delimiter=%%2F&list-type=2&prefix=%s", token ? "continuation-token=" : "",
                 token ? token : "", enc_prefix);
        tzr_http_call c;
        memset(&c, 0, sizeof c);
        c.method = "GET";
        c.cfg = &cfg;
        c.tgt = &tgt;
        c.query = token ? q : q + 1; /* no leading '&' without a token */
        c.deadline = tzr_now_s() + ho->total_timeout_s;
        c.max_retries = ho->max_retries;
        c.what = prefix_url;
        rc = tzr_http_perform(common, &c);
        if (!rc && (c.status < 200 || c.status >= 300))
            rc = tzr_fail_prefix(tzr_http_status_error(&c, &cfg), "%s: listing the prefix (ListObjectsV2): ",
                                 prefix_url);
        int more = 0;
        free(prev);
        prev = token; /* the token this page was asked with */
        token = NULL;
        if (!rc) rc = tzr_s3_list_page(c.resp ? c.resp : "", c.resp_len, prefix_url, tgt.bucket, tgt.key, klen, suffix, urls, n,
                                       &cap, &more, &token);
        /* A server that hands back the token it was given would have us
         * ask for the same page until the page cap. */
        if (!rc && more && prev && strcmp(prev, token) == 0)
            rc = tzr_fail(TZR_EHTTP, "%s: ListObjectsV2 page %d gives back the continuation token it was asked with; "
                                     "the listing would never end", prefix_url, page + 1);
        if (!rc && more && page > 10000)
            rc = tzr_fail(TZR_EHTTP, "%s: ListObjectsV2 gives more than 10000 pages", prefix_url);
        tzr_http_call_reset(&c);
        if (rc || !more) break;
    }
out:
    if (rc) {
        for (size_t i = 0; i < *n; i++) free((*urls)[i]);
        free(*urls);
        *urls = NULL, *n = 0;
    }
    free(token);
    free(prev);
    free(q);
    free(enc_prefix);
    tzr_s3_target_free(&tgt);
    tzr_s3_config_free(&cfg);
    tzr_http_common_free(common);
    return rc;
}
