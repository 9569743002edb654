/* Shared HTTP machinery: one CURLSH per source/output (connection, DNS and
 * TLS-session caches shared between threads, with locks), a pool of easy
 * handles, common options, retry policy and status -> error mapping. */
#include "http_internal.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct tzr_http_common {
    tzr_http_options opt;
    char *ca_bundle;
    CURLSH *share;
    pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_lock;
    CURL **pool;
    int npool, cap;
};

/* "libtzr/MAJOR.MINOR.PATCH": the version from tzr.h, its one source. */
static const char *user_agent(void) {
    static char ua[32];
    if (!ua[0]) snprintf(ua, sizeof ua, "libtzr/%s", tzr_version_string());
    return ua;
}

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

double tzr_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void lock_cb(CURL *h, curl_lock_data d, curl_lock_access a, void *u) {
    (void)h;
    (void)a;
    tzr_http_common *c = u;
    pthread_mutex_lock(&c->locks[d]);
}
static void unlock_cb(CURL *h, curl_lock_data d, void *u) {
    (void)h;
    tzr_http_common *c = u;
    pthread_mutex_unlock(&c->locks[d]);
}

int tzr_http_common_new(tzr_http_common **out, const tzr_http_options *opt) {
    *out = NULL;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return tzr_fail(TZR_ENET, "curl_global_init failed: %s", curl_easy_strerror(global_rc));
    tzr_http_common *c = calloc(1, sizeof *c);
    if (!c) return tzr_fail(TZR_ENOMEM, "out of memory");
    tzr_http_options d = TZR_HTTP_OPTIONS_INIT;
    if (opt) {
        size_t n = opt->struct_size < sizeof d ? opt->struct_size : sizeof d;
        memcpy(&d, opt, n);
        d.struct_size = sizeof d;
    }
    if (d.range_bytes == 0) d.range_bytes = 16u << 20; /* fewer requests: S3 servers charge CPU per request */
    if (d.range_bytes < 4096) d.range_bytes = 4096;
    if (d.max_inflight <= 0) d.max_inflight = 16;
    if (d.total_timeout_s <= 0) d.total_timeout_s = 300;
    if (d.max_retries == 0) d.max_retries = 8;
    if (d.max_retries < 0) d.max_retries = 0;
    /* Stall and connect limits: given (per call; the tools' --timeout
     * comes this way too), else 60 s (the AWS CLI's) cut to a quarter of
     * the budget so that a few retries fit in it. */
    double dflt = d.total_timeout_s / 4 < 60 ? d.total_timeout_s / 4 : 60;
    if (!(d.stall_timeout_s > 0)) d.stall_timeout_s = dflt;
    if (!(d.connect_timeout_s > 0)) d.connect_timeout_s = dflt;
    if (d.stall_timeout_s < 1) d.stall_timeout_s = 1; /* curl counts whole seconds */
    if (d.connect_timeout_s < 0.2) d.connect_timeout_s = 0.2;
    c->opt = d;
    /* The caller's strings need not outlive the open call. */
    c->opt.access_key = c->opt.secret_key = c->opt.session_token = NULL;
    c->opt.region = c->opt.endpoint = NULL;
    /* AWS_CA_BUNDLE, as the AWS CLI and SDKs read it: lets every tool (and
     * the shard files a manifest names) trust a private CA. */
    const char *ca = d.ca_bundle && *d.ca_bundle ? d.ca_bundle : getenv("AWS_CA_BUNDLE");
    if (ca && *ca && !(c->ca_bundle = strdup(ca))) {
        free(c);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    c->opt.ca_bundle = c->ca_bundle;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_init(&c->locks[i], NULL);
    pthread_mutex_init(&c->pool_lock, NULL);
    c->share = curl_share_init();
    if (!c->share) {
        tzr_http_common_free(c);
        return tzr_fail(TZR_ENOMEM, "curl_share_init failed");
    }
    curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, lock_cb);
    curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, unlock_cb);
    curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    *out = c;
    return 0;
}

void tzr_http_common_free(tzr_http_common *c) {
    if (!c) return;
    for (int i = 0; i < c->npool; i++) curl_easy_cleanup(c->pool[i]);
    free(c->pool);
    if (c->share) curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_destroy(&c->locks[i]);
    pthread_mutex_destroy(&c->pool_lock);
    free(c->ca_bundle);
    free(c);
}

const tzr_http_options *tzr_http_common_opts(const tzr_http_common *c) { return &c->opt; }

void *tzr_http_easy_get(tzr_http_common *c) {
    CURL *e = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool > 0) e = c->pool[--c->npool];
    pthread_mutex_unlock(&c->pool_lock);
    if (e) curl_easy_reset(e);
    else e = curl_easy_init();
    return e;
}

void tzr_http_easy_put(tzr_http_common *c, void *easy) {
    if (!easy) return;
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool == c->cap) {
        int nc = c->cap ? c->cap * 2 : 16;
        CURL **np = realloc(c->pool, (size_t)nc * sizeof *np);
        if (np) {
            c->pool = np;
            c->cap = nc;
        }
    }
    if (c->npool < c->cap) {
        c->pool[c->npool++] = easy;
        easy = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (easy) curl_easy_cleanup(easy);
}

void tzr_http_easy_common(tzr_http_common *c, void *easy, double remaining_s) {
    CURL *e = easy;
    const tzr_http_options *o = &c->opt;
    curl_easy_setopt(e, CURLOPT_SHARE, c->share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, user_agent());
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    /* S3 keys are opaque ("d/../x" is a key of its own): send the path as
     * it was signed, without curl's dot-segment squashing. */
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    /* A stalled server must not hang the load: fail a transfer that moves
     * less than 1 KiB/s for the stall time (waiting for the answer
     * included); it is then retried. */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)(o->stall_timeout_s + 0.5));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(o->connect_timeout_s * 1000));
    /* A redirect to itself must not loop for ever. */
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, (long)TZR_HTTP_MAX_REDIRS);
    long rem_ms = (long)(remaining_s * 1000);
    if (rem_ms < 1) rem_ms = 1;
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, rem_ms);
    if (o->ca_bundle) curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_bundle);
    if (o->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

double tzr_http_backoff_s(int attempt) {
    double base = 0.05;
    for (int i = 1; i < attempt && base < 5.0; i++) base *= 2;
    if (base > 5.0) base = 5.0;
    /* Full jitter in [base/2, base]. rand_r with a per-thread seed. */
    static _Thread_local unsigned seed;
    if (!seed) seed = (unsigned)((uint64_t)(tzr_now_s() * 1e6) & 0xFFFFFFFFu) ^ (unsigned)(uintptr_t)&seed;
    double r = (double)rand_r(&seed) / RAND_MAX;
    return base / 2 + r * base / 2;
}

double tzr_http_retry_after_parse(const char *v) {
    while (*v == ' ' || *v == '\t') v++;
    if (*v >= '0' && *v <= '9') {
        char *end;
        unsigned long long n = strtoull(v, &end, 10); /* saturates on overflow */
        if (*end) return -1;
        return n > 1000000000ull ? 1e9 : (double)n;
    }
    /* An HTTP-date in any of the three forms RFC 9110 has recipients
     * accept; curl's parser, unlike strptime, ignores the locale. */
    time_t at = curl_getdate(v, NULL);
    if (at == (time_t)-1) return -1;
    double d = difftime(at, time(NULL));
    return d > 0 ? d : 0;
}

double tzr_http_retry_delay_s(int attempt, long status, double retry_after, int *asked) {
    double d = tzr_http_backoff_s(attempt);
    *asked = 0;
    if ((status == 429 || status == 503) && retry_after > d) {
        d = retry_after;
        *asked = 1;
    }
    return d;
}

const char *tzr_http_curl_hint(int cc) {
    if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE)
        return "; if a private CA signed the server's certificate, give its PEM file "
               "(tzr_http_options.ca_bundle, AWS_CA_BUNDLE or the tools' --ca-bundle)";
    return "";
}

int tzr_http_encoded(const char *ce) {
    return ce && *ce && strcasecmp(ce, "identity") != 0;
}

int tzr_http_status_retryable(long s) {
    return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

int tzr_http_curl_retryable(int cc) {
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

/* ------------------------------------------------------------ blocking calls */
typedef struct call_io {
    tzr_http_call *call;
    size_t sent;
} call_io;

void tzr_http_copy_hval(char *dst, size_t cap, const char *v, size_t n) {
    while (n > 0 && (*v == ' ' || *v == '\t')) v++, n--;
    while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t call_header(char *b, size_t sz, size_t n, void *u) {
    call_io *io = u;
    tzr_http_call *c = io->call;
    size_t len = sz * n;
    if (len >= 5 && strncmp(b, "HTTP/", 5) == 0) {
        c->etag[0] = c->content_range[0] = c->location[0] = 0;
        c->last_modified[0] = c->content_encoding[0] = 0;
        c->content_length = -1;
        c->retry_after = -1;
    } else if (len > 14 && strncasecmp(b, "Last-Modified:", 14) == 0) {
        tzr_http_copy_hval(c->last_modified, sizeof c->last_modified, b + 14, len - 14);
    } else if (len > 17 && strncasecmp(b, "Content-Encoding:", 17) == 0) {
        tzr_http_copy_hval(c->content_encoding, sizeof c->content_encoding, b + 17, len - 17);
    } else if (len > 12 && strncasecmp(b, "Retry-After:", 12) == 0) {
        char v[64];
        tzr_http_copy_hval(v, sizeof v, b + 12, len - 12);
        c->retry_after = tzr_http_retry_after_parse(v);
    } else if (len > 5 && strncasecmp(b, "ETag:", 5) == 0) {
        tzr_http_copy_hval(c->etag, sizeof c->etag, b + 5, len - 5);
    } else if (len > 14 && strncasecmp(b, "Content-Range:", 14) == 0) {
        tzr_http_copy_hval(c->content_range, sizeof c->content_range, b + 14, len - 14);
    } else if (len > 9 && strncasecmp(b, "Location:", 9) == 0) {
        tzr_http_copy_hval(c->location, sizeof c->location, b + 9, len - 9);
    } else if (len > 15 && strncasecmp(b, "Content-Length:", 15) == 0) {
        char v[32];
        tzr_http_copy_hval(v, sizeof v, b + 15, len - 15);
        c->content_length = strtoll(v, NULL, 10);
    }
    return len;
}

static size_t call_write(char *b, size_t sz, size_t n, void *u) {
    call_io *io = u;
    tzr_http_call *c = io->call;
    size_t len = sz * n;
    if (len > TZR_HTTP_MAX_ANSWER - c->resp_len) {
        c->too_big = 1;
        return 0; /* curl stops the transfer: an answer cut short would be read wrong */
    }
    if (c->resp_len + len + 1 > c->resp_cap) {
        size_t cap = c->resp_cap ? c->resp_cap : 4096;
        while (cap < c->resp_len + len + 1) cap *= 2;
        char *nr = realloc(c->resp, cap);
        if (!nr) return 0;
        c->resp = nr;
        c->resp_cap = cap;
    }
    memcpy(c->resp + c->resp_len, b, len);
    c->resp_len += len;
    c->resp[c->resp_len] = 0;
    return len;
}

static size_t call_read(char *b, size_t sz, size_t n, void *u) {
    call_io *io = u;
    tzr_http_call *c = io->call;
    size_t left = c->body_len - io->sent;
    size_t take = sz * n < left ? sz * n : left;
    if (take) memcpy(b, (const char *)c->body + io->sent, take);
    io->sent += take;
    return take;
}

static int call_seek(void *u, curl_off_t off, int origin) {
    call_io *io = u;
    if (origin != SEEK_SET || off < 0 || (size_t)off > io->call->body_len) return CURL_SEEKFUNC_FAIL;
    io->sent = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

void tzr_http_call_reset(tzr_http_call *c) {
    free(c->resp);
    c->resp = NULL;
    c->resp_len = c->resp_cap = 0;
    c->too_big = 0;
}

int tzr_http_perform(tzr_http_common *cm, tzr_http_call *c) {
    const char *what = c->what ? c->what : (c->url ? c->url : "request");
    char payload[65];
    const char *ph = NULL;
    if (c->tgt && c->sign_body) {
        tzr_sha256_hex(c->body ? c->body : "", c->body_len, payload);
        ph = payload;
    } else if (c->tgt && !c->body_len) {
        ph = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    }
    char errbuf[CURL_ERROR_SIZE];
    int last_cc = 0, noanswer = 0;
    c->status = 0;
    for (c->attempts = 1;; c->attempts++) {
        double rem = c->deadline - tzr_now_s();
        if (rem <= 0) {
            if (last_cc)
                return tzr_fail(TZR_ENET, "%s: %s %s failed after %d attempts within the time budget: %s",
                                what, c->method, what, c->attempts - 1, errbuf);
            return tzr_fail(c->status ? TZR_EHTTP : TZR_ENET,
                            "%s: %s gave HTTP %ld after %d attempts (time budget spent)", what,
                            c->method, c->status, c->attempts - 1);
        }
        tzr_http_call_reset(c);
        c->status = 0;
        c->etag[0] = c->content_range[0] = c->location[0] = 0;
        c->last_modified[0] = c->content_encoding[0] = 0;
        c->content_length = -1;
        c->retry_after = -1;
        struct curl_slist *hdrs = NULL;
        char *url = NULL;
        if (c->tgt) {
            int rc = tzr_s3_sign_request(c->cfg, c->tgt, c->method, c->query, ph, &hdrs, &url);
            if (rc) return rc;
        } else {
            url = strdup(c->url);
            if (!url) return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < c->n_headers; i++) {
            struct curl_slist *nl = curl_slist_append(hdrs, c->headers[i]);
            if (nl) hdrs = nl;
        }
        struct curl_slist *nl = curl_slist_append(hdrs, "Accept-Encoding: identity");
        if (nl) hdrs = nl;
        nl = curl_slist_append(hdrs, "Expect:");
        if (nl) hdrs = nl;
        CURL *e = tzr_http_easy_get(cm);
        if (!e) {
            curl_slist_free_all(hdrs);
            free(url);
            return tzr_fail(TZR_ENOMEM, "curl_easy_init failed");
        }
        call_io io = {c, 0};
        tzr_http_easy_common(cm, e, rem);
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, call_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, &io);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, call_write);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &io);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
        errbuf[0] = 0;
        if (!c->tgt) curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        if (strcmp(c->method, "HEAD") == 0) {
            curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        } else if (strcmp(c->method, "GET") != 0) {
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c->method);
            if (c->body || strcmp(c->method, "PUT") == 0 || strcmp(c->method, "POST") == 0) {
                curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
                curl_easy_setopt(e, CURLOPT_READFUNCTION, call_read);
                curl_easy_setopt(e, CURLOPT_READDATA, &io);
                curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, call_seek);
                curl_easy_setopt(e, CURLOPT_SEEKDATA, &io);
                curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)c->body_len);
            }
        }
        CURLcode cc = curl_easy_perform(e);
        long st = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
        tzr_http_easy_put(cm, e);
        curl_slist_free_all(hdrs);
        free(url);
        if (!errbuf[0]) snprintf(errbuf, sizeof errbuf, "%s", curl_easy_strerror(cc));
        int retry;
        if (c->too_big)
            return tzr_fail(TZR_ELIMIT, "%s: %s: the answer is over %u MiB; refusing it rather than reading part of it",
                            what, c->method, TZR_HTTP_MAX_ANSWER >> 20);
        if (cc == CURLE_TOO_MANY_REDIRECTS)
            return tzr_fail(TZR_EHTTP, "%s: %s: redirect loop (more than %d redirects)", what,
                            c->method, TZR_HTTP_MAX_REDIRS);
        if (cc == CURLE_OPERATION_TIMEDOUT && st == 0 &&
            ++noanswer >= TZR_HTTP_NOANSWER_TRIES)
            return tzr_fail(TZR_ENET, "%s: %s: no answer from the server, %d tries (%s)", what,
                            c->method, noanswer, errbuf);
        if (cc != CURLE_OK) {
            last_cc = (int)cc;
            retry = tzr_http_curl_retryable((int)cc);
            if (!retry)
                return tzr_fail(TZR_ENET, "%s: %s failed: %s (curl %d)%s", what, c->method, errbuf,
                                (int)cc, tzr_http_curl_hint((int)cc));
        } else {
            last_cc = 0;
            c->status = st;
            retry = tzr_http_status_retryable(st);
            if (!retry) return 0;
        }
        if (c->attempts > c->max_retries) {
            if (cc != CURLE_OK)
                return tzr_fail(TZR_ENET, "%s: %s failed after %d attempts: %s (curl %d)", what,
                                c->method, c->attempts, errbuf, (int)cc);
            char s3msg[300];
            tzr_s3_error_text(c->resp, c->resp_len, s3msg, sizeof s3msg);
            return tzr_fail(TZR_EHTTP, "%s: %s gave HTTP %ld after %d attempts%s%s", what, c->method,
                            st, c->attempts, s3msg[0] ? ": " : "", s3msg);
        }
        int asked;
        double d = tzr_http_retry_delay_s(c->attempts, cc == CURLE_OK ? st : 0, c->retry_after, &asked);
        rem = c->deadline - tzr_now_s();
        if (asked && d > rem)
            return tzr_fail(TZR_EHTTP,
                            "%s: %s got HTTP %ld with Retry-After %.0f s, past the time budget "
                            "(%.1f s left); not waiting",
                            what, c->method, st, d, rem > 0 ? rem : 0);
        if (d > rem) d = rem > 0 ? rem : 0;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

int tzr_http_status_error(const tzr_http_call *c, const tzr_s3_config *cfg) {
    const char *what = c->what ? c->what : "request";
    char s3msg[400];
    tzr_s3_error_text(c->resp, c->resp_len, s3msg, sizeof s3msg);
    const char *sep = s3msg[0] ? ", " : "";
    long st = c->status;
    if (st == 404) {
        const char *thing = strstr(s3msg, "NoSuchBucket") ? "no such bucket" : "no such key";
        return tzr_fail(TZR_ENOTFOUND, "%s: %s (HTTP 404%s%s)", what, thing, sep, s3msg);
    }
    if (st == 412)
        return tzr_fail(TZR_ECHANGED,
                        "%s: the object changed during the load (HTTP 412: ETag no longer matches)",
                        what);
    if (strstr(s3msg, "RequestTimeTooSkewed"))
        return tzr_fail(TZR_EHTTP,
                        "%s: request time too skewed (HTTP %ld, %s): the local clock differs from "
                        "the server's by more than 15 minutes; fix the system clock (NTP)",
                        what, st, s3msg);
    if (st == 403) {
        if (cfg && cfg->anonymous)
            return tzr_fail(TZR_EHTTP,
                            "%s: access denied (HTTP 403%s%s): no credentials were found, the "
                            "request was anonymous",
                            what, sep, s3msg);
        if (cfg)
            return tzr_fail(TZR_EHTTP,
                            "%s: access denied (HTTP 403%s%s): check the secret/credentials "
                            "(access key %s from %s)",
                            what, sep, s3msg, cfg->access_key ? cfg->access_key : "?",
                            cfg->cred_source ? cfg->cred_source : "?");
        return tzr_fail(TZR_EHTTP, "%s: access denied (HTTP 403)", what);
    }
    if (st == 301 || st == 307 || st == 308)
        return tzr_fail(TZR_EHTTP, "%s: HTTP %ld redirect%s%s%s%s: wrong region or endpoint?", what,
                        st, c->location[0] ? " to " : "", c->location, sep, s3msg);
    if (st == 416) return tzr_fail(TZR_ETRUNC, "%s: range not satisfiable (HTTP 416)", what);
    return tzr_fail(TZR_EHTTP, "%s: %s gave HTTP %ld%s%s", what, c->method, st, sep, s3msg);
}
