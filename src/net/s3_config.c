/* S3 credentials, region and endpoint resolution, s3:// URL addressing and
 * request signing glue.
 *
 * Order (first hit wins, per item):
 *  credentials: explicit options (access_key + secret_key [+ session_token])
 *      -> env AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY [/ AWS_SESSION_TOKEN]
 *      -> shared credentials file (AWS_SHARED_CREDENTIALS_FILE or
 *         ~/.aws/credentials), section [PROFILE]
 *      -> config file (AWS_CONFIG_FILE or ~/.aws/config), section
 *         [profile PROFILE] ([default] for "default")
 *      -> tensorizer/s3cmd ~/.s3cfg [default] access_key / secret_key
 *      -> none: anonymous (unsigned) requests.
 *     PROFILE = AWS_PROFILE or "default". opt->anonymous skips all of it.
 *  region: options -> AWS_REGION -> AWS_DEFAULT_REGION -> config profile
 *      `region` -> us-east-1.
 *  endpoint: options -> AWS_ENDPOINT_URL_S3 -> AWS_ENDPOINT_URL -> config
 *      profile `s3 = \n endpoint_url = ...` or `endpoint_url` -> ~/.s3cfg
 *      host_base (https unless use_https = False) -> AWS
 *      (https://BUCKET.s3.REGION.amazonaws.com, virtual-hosted).
 *  A custom endpoint always uses path-style addressing (endpoint/bucket/key);
 *  endpoints without a scheme get https://.
 */
#include "http_internal.h"

#include <ctype.h>
#include <curl/curl.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ------------------------------------------------------------ INI files */
/* Look up key in section of an INI file. Nested blocks ("s3 =" followed by
 * indented "endpoint_url = x") are found as "s3.endpoint_url". */
static char *ini_get(const char *path, const char *section, const char *key) {
    if (!path) return NULL;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char line[4096], parent[128] = "";
    int in_sec = 0;
    char *result = NULL;
    while (!result && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        int indented = line[0] == ' ' || line[0] == '\t';
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#' || *p == ';') continue;
        if (*p == '[' && !indented) {
            char *e = strchr(p, ']');
            if (!e) continue;
            *e = 0;
            char *s = p + 1;
            while (isspace((unsigned char)*s)) s++;
            size_t l = strlen(s);
            while (l > 0 && isspace((unsigned char)s[l - 1])) s[--l] = 0;
            in_sec = strcmp(s, section) == 0;
            parent[0] = 0;
            continue;
        }
        if (!in_sec) continue;
        char *eq = strchr(p, '=');
        if (!eq) continue;
        char *k = p, *ke = eq;
        while (ke > k && isspace((unsigned char)ke[-1])) ke--;
        *ke = 0;
        char *v = eq + 1;
        while (isspace((unsigned char)*v)) v++;
        size_t vl = strlen(v);
        while (vl > 0 && isspace((unsigned char)v[vl - 1])) v[--vl] = 0;
        char full[300];
        if (indented && parent[0]) {
            snprintf(full, sizeof full, "%.120s.%.170s", parent, k);
        } else {
            snprintf(full, sizeof full, "%.290s", k);
            if (!*v) snprintf(parent, sizeof parent, "%.120s", k);
            else parent[0] = 0;
        }
        if (strcasecmp(full, key) == 0 && *v) result = strdup(v);
    }
    fclose(f);
    return result;
}

static char *home_path(const char *rel) {
    const char *home = getenv("HOME");
    if (!home || !*home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : NULL;
    }
    if (!home) return NULL;
    size_t n = strlen(home) + strlen(rel) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", home, rel);
    return p;
}

static char *dup_env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? strdup(v) : NULL;
}

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

void tzr_s3_config_free(tzr_s3_config *c) {
    if (!c) return;
    if (c->secret_key) memset(c->secret_key, 0, strlen(c->secret_key));
    free(c->access_key);
    free(c->secret_key);
    free(c->session_token);
    free(c->region);
    free(c->endpoint);
    memset(c, 0, sizeof *c);
}

/* Normalise an endpoint: scheme added, trailing slashes removed. */
static char *norm_endpoint(const char *e, int https) {
    if (!e || !*e) return NULL;
    size_t n = strlen(e) + 16;
    char *o = malloc(n);
    if (!o) return NULL;
    if (strstr(e, "://")) snprintf(o, n, "%s", e);
    else snprintf(o, n, "%s://%s", https ? "https" : "http", e);
    size_t l = strlen(o);
    while (l > 0 && o[l - 1] == '/') o[--l] = 0;
    return o;
}

int tzr_s3_config_resolve(tzr_s3_config *c, const tzr_http_options *opt) {
    memset(c, 0, sizeof *c);
    tzr_http_options dflt = TZR_HTTP_OPTIONS_INIT;
    if (!opt) opt = &dflt;
    char *profile = dup_env("AWS_PROFILE");
    if (!profile) profile = strdup("default");
    char *cred_file = dup_env("AWS_SHARED_CREDENTIALS_FILE");
    if (!cred_file) cred_file = home_path(".aws/credentials");
    char *conf_file = dup_env("AWS_CONFIG_FILE");
    if (!conf_file) conf_file = home_path(".aws/config");
    char *s3cfg = home_path(".s3cfg");
    char conf_sec[200];
    if (profile && strcmp(profile, "default") == 0) snprintf(conf_sec, sizeof conf_sec, "default");
    else snprintf(conf_sec, sizeof conf_sec, "profile %s", profile ? profile : "default");
    int rc = 0;
    if (!profile) {
        rc = TZR_ENOMEM;
        goto done;
    }

    if (opt->anonymous) {
        c->anonymous = 1;
        c->cred_source = "anonymous (requested)";
    } else if (opt->access_key && opt->secret_key) {
        c->access_key = strdup(opt->access_key);
        c->secret_key = strdup(opt->secret_key);
        c->session_token = dup_or_null(opt->session_token);
        c->cred_source = "options";
    } else if (getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY") &&
               *getenv("AWS_ACCESS_KEY_ID")) {
        c->access_key = dup_env("AWS_ACCESS_KEY_ID");
        c->secret_key = dup_env("AWS_SECRET_ACCESS_KEY");
        c->session_token = dup_env("AWS_SESSION_TOKEN");
        c->cred_source = "environment";
    } else {
        char *ak = ini_get(cred_file, profile, "aws_access_key_id");
        char *sk = ini_get(cred_file, profile, "aws_secret_access_key");
        if (ak && sk) {
            c->access_key = ak;
            c->secret_key = sk;
            c->session_token = ini_get(cred_file, profile, "aws_session_token");
            c->cred_source = "shared credentials file";
        } else {
            free(ak);
            free(sk);
            ak = ini_get(conf_file, conf_sec, "aws_access_key_id");
            sk = ini_get(conf_file, conf_sec, "aws_secret_access_key");
            if (ak && sk) {
                c->access_key = ak;
                c->secret_key = sk;
                c->session_token = ini_get(conf_file, conf_sec, "aws_session_token");
                c->cred_source = "config file";
            } else {
                free(ak);
                free(sk);
                ak = ini_get(s3cfg, "default", "access_key");
                sk = ini_get(s3cfg, "default", "secret_key");
                if (ak && sk) {
                    c->access_key = ak;
                    c->secret_key = sk;
                    c->cred_source = "~/.s3cfg";
                } else {
                    free(ak);
                    free(sk);
                    c->anonymous = 1;
                    c->cred_source = "none found (anonymous)";
                }
            }
        }
    }
    if (!c->anonymous && (!c->access_key || !c->secret_key)) {
        rc = TZR_ENOMEM;
        goto done;
    }

    if (opt->region && *opt->region) c->region = strdup(opt->region);
    if (!c->region) c->region = dup_env("AWS_REGION");
    if (!c->region) c->region = dup_env("AWS_DEFAULT_REGION");
    if (!c->region) c->region = ini_get(conf_file, conf_sec, "region");
    if (!c->region) c->region = strdup("us-east-1");

    char *ep = NULL;
    int https = 1;
    if (opt->endpoint && *opt->endpoint) ep = strdup(opt->endpoint);
    if (!ep) ep = dup_env("AWS_ENDPOINT_URL_S3");
    if (!ep) ep = dup_env("AWS_ENDPOINT_URL");
    if (!ep) ep = ini_get(conf_file, conf_sec, "s3.endpoint_url");
    if (!ep) ep = ini_get(conf_file, conf_sec, "endpoint_url");
    if (!ep) {
        ep = ini_get(s3cfg, "default", "host_base");
        char *uh = ep ? ini_get(s3cfg, "default", "use_https") : NULL;
        if (uh && strcasecmp(uh, "False") == 0) https = 0;
        free(uh);
    }
    if (ep) {
        c->endpoint = norm_endpoint(ep, https);
        free(ep);
        if (!c->endpoint) {
            rc = TZR_ENOMEM;
            goto done;
        }
        c->path_style = 1;
    }
    if (!c->region) rc = TZR_ENOMEM;
done:
    free(profile);
    free(cred_file);
    free(conf_file);
    free(s3cfg);
    if (rc) {
        tzr_s3_config_free(c);
        return tzr_fail(rc, "out of memory");
    }
    return 0;
}

/* ------------------------------------------------------------ targets */
void tzr_s3_target_free(tzr_s3_target *t) {
    if (!t) return;
    free(t->bucket);
    free(t->key);
    free(t->url_base);
    free(t->host);
    free(t->path);
    memset(t, 0, sizeof *t);
}

static int dns_bucket(const char *b) {
    size_t n = strlen(b);
    if (n < 3 || n > 63) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)b[i];
        if (!(islower(ch) || isdigit(ch) || ch == '-')) return 0; /* dots break TLS */
    }
    return b[0] != '-' && b[n - 1] != '-';
}

int tzr_s3_target_make(tzr_s3_target *t, const char *url, const tzr_s3_config *cfg) {
    memset(t, 0, sizeof *t);
    if (strncasecmp(url, "s3://", 5) != 0) return tzr_fail(TZR_EINVAL, "%s: not an s3:// URL", url);
    const char *b = url + 5;
    const char *slash = strchr(b, '/');
    if (!slash || slash == b || !slash[1])
        return tzr_fail(TZR_EINVAL, "%s: expected s3://bucket/key", url);
    t->bucket = strndup(b, (size_t)(slash - b));
    t->key = strdup(slash + 1);
    if (!t->bucket || !t->key) goto oom;
    int path_style = cfg->path_style || !dns_bucket(t->bucket);
    const char *scheme = "https";
    char hostbuf[512];
    if (cfg->endpoint) {
        const char *e = cfg->endpoint;
        const char *hs = strstr(e, "://");
        size_t sl = hs ? (size_t)(hs - e) : 0;
        scheme = (sl == 4 && strncasecmp(e, "http", 4) == 0) ? "http" : "https";
        const char *h = hs ? hs + 3 : e;
        size_t hl = strcspn(h, "/");
        snprintf(hostbuf, sizeof hostbuf, "%.*s", (int)hl, h);
        /* Drop a default port: the Host header must match what curl sends
         * and what the server reconstructs. */
        size_t L = strlen(hostbuf);
        if (strcmp(scheme, "http") == 0 && L > 3 && strcmp(hostbuf + L - 3, ":80") == 0)
            hostbuf[L - 3] = 0;
        if (strcmp(scheme, "https") == 0 && L > 4 && strcmp(hostbuf + L - 4, ":443") == 0)
            hostbuf[L - 4] = 0;
    } else {
        snprintf(hostbuf, sizeof hostbuf, "s3.%s.amazonaws.com", cfg->region);
    }
    if (!path_style) {
        size_t n = strlen(t->bucket) + strlen(hostbuf) + 2;
        t->host = malloc(n);
        if (t->host) snprintf(t->host, n, "%s.%s", t->bucket, hostbuf);
        t->path = malloc(strlen(t->key) + 2);
        if (t->path) sprintf(t->path, "/%s", t->key);
    } else {
        t->host = strdup(hostbuf);
        size_t n = strlen(t->bucket) + strlen(t->key) + 3;
        t->path = malloc(n);
        if (t->path) snprintf(t->path, n, "/%s/%s", t->bucket, t->key);
    }
    if (!t->host || !t->path) goto oom;
    size_t n = strlen(scheme) + strlen(t->host) + 4;
    t->url_base = malloc(n);
    if (!t->url_base) goto oom;
    snprintf(t->url_base, n, "%s://%s", scheme, t->host);
    return 0;
oom:
    tzr_s3_target_free(t);
    return tzr_fail(TZR_ENOMEM, "out of memory");
}

time_t tzr_s3_now(void) {
    time_t now = time(NULL);
    const char *skew = getenv("TZR_S3_CLOCK_SKEW");
    if (skew && *skew) now += (time_t)atol(skew);
    return now;
}

static int slist_add(struct curl_slist **l, const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (!s) return -1;
    snprintf(s, n, "%s%s", a, b);
    struct curl_slist *nl = curl_slist_append(*l, s);
    free(s);
    if (!nl) return -1;
    *l = nl;
    return 0;
}

int tzr_s3_sign_request(const tzr_s3_config *cfg, const tzr_s3_target *t, const char *method,
                        const char *query, const char *payload_hash, struct curl_slist **headers,
                        char **url) {
    *url = NULL;
    char *host_hdr = malloc(strlen(t->host) + 6);
    if (!host_hdr) return tzr_fail(TZR_ENOMEM, "out of memory");
    sprintf(host_hdr, "Host:%s", t->host);
    const char *hs[1] = {host_hdr};
    char date[17];
    tzr_amz_date(tzr_s3_now(), date);
    tzr_sigv4_input in = {
        .method = method, .path = t->path, .query = query, .headers = hs, .n_headers = 1,
        .payload_hash = payload_hash ? payload_hash : "UNSIGNED-PAYLOAD",
        .content_sha_header = 1, .amz_date = date, .region = cfg->region, .service = "s3",
        .access_key = cfg->access_key ? cfg->access_key : "",
        .secret_key = cfg->secret_key ? cfg->secret_key : "",
        .session_token = cfg->session_token,
    };
    tzr_sigv4_result res;
    int rc;
    if (cfg->anonymous) {
        memset(&res, 0, sizeof res);
        res.path = tzr_uri_encode(t->path, strlen(t->path), 1);
        res.query = strdup(query ? query : "");
        rc = res.path && res.query ? 0 : tzr_fail(TZR_ENOMEM, "out of memory");
    } else {
        rc = tzr_sigv4_sign(&in, &res);
    }
    if (rc) {
        free(host_hdr);
        tzr_sigv4_result_free(&res);
        return rc;
    }
    struct curl_slist *l = NULL;
    int bad = slist_add(&l, "Host: ", t->host);
    for (int i = 0; i < 3 && res.extra_headers[i] && !bad; i++) {
        /* "x-amz-date:v" -> "x-amz-date: v" */
        bad = !(l = curl_slist_append(l, res.extra_headers[i]));
    }
    if (!bad && res.authorization) bad = slist_add(&l, "Authorization: ", res.authorization);
    /* Send the query exactly as given (we only re-encode for signing; the
     * caller passes queries that are already in canonical form). */
    size_t n = strlen(t->url_base) + strlen(res.path) + (query ? strlen(query) : 0) + 4;
    char *u = malloc(n);
    if (u) snprintf(u, n, "%s%s%s%s", t->url_base, res.path, query && *query ? "?" : "",
                    query ? query : "");
    free(host_hdr);
    tzr_sigv4_result_free(&res);
    if (bad || !u) {
        curl_slist_free_all(l);
        free(u);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    *headers = l;
    *url = u;
    return 0;
}

const char *tzr_xml_find(const char *p, const char *end, const char *tag, size_t *len) {
    char open[64], close[64];
    int ol = snprintf(open, sizeof open, "<%s>", tag), cl = snprintf(close, sizeof close, "</%s>", tag);
    if (!p || p >= end || ol <= 0 || cl <= 0 || (size_t)ol >= sizeof open || (size_t)cl >= sizeof close) return NULL;
    const char *a = memmem(p, (size_t)(end - p), open, (size_t)ol);
    if (!a) return NULL;
    a += ol;
    const char *b = memmem(a, (size_t)(end - a), close, (size_t)cl);
    if (!b) return NULL;
    *len = (size_t)(b - a);
    return a;
}

static void xml_tag(const char *body, size_t len, const char *tag, char *out, size_t cap) {
    out[0] = 0;
    size_t n;
    const char *p = tzr_xml_find(body, body + len, tag, &n);
    if (!p) return;
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 32) out[i] = ' ';
}

void tzr_s3_error_text(const char *body, size_t len, char *buf, size_t cap) {
    buf[0] = 0;
    if (!body || !len || cap < 8) return;
    char code[96], msg[256];
    xml_tag(body, len, "Code", code, sizeof code);
    xml_tag(body, len, "Message", msg, sizeof msg);
    if (code[0] && msg[0]) snprintf(buf, cap, "%s: %s", code, msg);
    else if (code[0]) snprintf(buf, cap, "%s", code);
}
