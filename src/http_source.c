/* Positional source over HTTP ranged GETs (plain http(s):// or SigV4-signed
 * s3://). One HEAD at open learns the size and ETag. read_at splits the
 * request into ranges of range_bytes, runs up to max_inflight of them at
 * once on a private curl_multi, writes each straight into the caller's
 * buffer (bounds-checked, Content-Range verified) and retries a failed
 * range from the bytes already received, re-signed, with exponential
 * backoff and jitter, within total_timeout_s. Every GET carries If-Match
 * with the ETag seen at open: a replaced object gives TZR_ECHANGED.
 * Easy handles come from a pool; connections, DNS and TLS sessions are
 * shared through a locked CURLSH, so read_at is safe from many threads. */
#include "http_internal.h"
#include "source_path.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct http_src {
    tzr_source base;
    char *name;      /* URL without query string (no signatures/tokens) */
    char *url;       /* plain http(s) URL as given */
    int is_s3;
    tzr_s3_config cfg;
    tzr_s3_target tgt;
    char *etag;      /* NULL when the server sent none */
    char *if_match;  /* "If-Match: <etag>" */
    tzr_http_common *common;
    _Atomic uint64_t requests, retries; /* for tzr_source_http_stats */
} http_src;

typedef struct range_task {
    http_src *h;
    uint8_t *dst;
    uint64_t off;   /* object offset of dst[0] */
    size_t len;
    size_t got;     /* bytes already in dst */
    size_t got_at_start;
    int attempts;
    double next_at;
    int active, done;
    CURL *easy;
    struct curl_slist *hdrs;
    char *url;
    /* per attempt */
    long status;
    int checked;    /* status + Content-Range validated for this attempt */
    int bad;        /* fatal validation failure: TZR_E* code */
    char cr[128];
    char errbody[2048];
    size_t errlen;
    char errbuf[CURL_ERROR_SIZE];
} range_task;


static size_t rt_header(char *b, size_t sz, size_t n, void *u) {
    range_task *t = u;
    size_t len = sz * n;
    if (len >= 5 && strncmp(b, "HTTP/", 5) == 0) {
        t->cr[0] = 0;
        t->checked = 0;
    } else if (len > 14 && strncasecmp(b, "Content-Range:", 14) == 0) {
        tzr_http_copy_hval(t->cr, sizeof t->cr, b + 14, len - 14);
    }
    return len;
}

/* Decide at the first body byte whether this response's body is ours. */
static void rt_check(range_task *t) {
    t->checked = 1;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
    uint64_t want_start = t->off + t->got, want_end = t->off + t->len - 1;
    uint64_t size = t->h->base.size;
    if (t->status == 206) {
        unsigned long long a, b, total;
        if (sscanf(t->cr, "bytes %llu-%llu/%llu", &a, &b, &total) != 3) {
            t->bad = tzr_fail(TZR_EHTTP, "%s: HTTP 206 without a usable Content-Range ('%s')",
                              t->h->name, t->cr);
            return;
        }
        if (total != size) {
            t->bad = tzr_fail(TZR_ECHANGED,
                              "%s: object size changed during the load (%llu bytes now, %" PRIu64
                              " at open)",
                              t->h->name, total, size);
            return;
        }
        if (a != want_start || b != want_end)
            t->bad = tzr_fail(TZR_EHTTP,
                              "%s: server sent bytes %llu-%llu for a request of %" PRIu64 "-%" PRIu64,
                              t->h->name, a, b, want_start, want_end);
    } else if (t->status == 200) {
        if (!(want_start == 0 && want_end + 1 == size))
            t->bad = tzr_fail(TZR_EHTTP,
                              "%s: server ignored the Range header (HTTP 200 for bytes %" PRIu64
                              "-%" PRIu64 ")",
                              t->h->name, want_start, want_end);
    }
    /* other statuses: body collected as error text */
}

static size_t rt_write(char *b, size_t sz, size_t n, void *u) {
    range_task *t = u;
    size_t len = sz * n;
    if (!t->checked) rt_check(t);
    if (t->bad) return 0;
    if (t->status != 200 && t->status != 206) {
        size_t room = sizeof t->errbody - 1 - t->errlen;
        size_t take = len < room ? len : room;
        memcpy(t->errbody + t->errlen, b, take);
        t->errlen += take;
        t->errbody[t->errlen] = 0;
        return len;
    }
    if (len > t->len - t->got) {
        t->bad = tzr_fail(TZR_EHTTP, "%s: server sent more bytes than requested at offset %" PRIu64,
                          t->h->name, t->off);
        return 0;
    }
    memcpy(t->dst + t->got, b, len);
    t->got += len;
    return len;
}

static int rt_prepare(range_task *t, double remaining) {
    http_src *h = t->h;
    curl_slist_free_all(t->hdrs);
    t->hdrs = NULL;
    free(t->url);
    t->url = NULL;
    if (h->is_s3) {
        int rc = tzr_s3_sign_request(&h->cfg, &h->tgt, "GET", NULL, NULL, &t->hdrs, &t->url);
        if (rc) return rc;
    } else {
        t->url = strdup(h->url);
        if (!t->url) return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    char range[96];
    snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-%" PRIu64, t->off + t->got,
             t->off + t->len - 1);
    struct curl_slist *l = curl_slist_append(t->hdrs, range);
    if (l) l = curl_slist_append(t->hdrs = l, "Accept-Encoding: identity");
    if (l && h->if_match) l = curl_slist_append(t->hdrs = l, h->if_match);
    if (!l) return tzr_fail(TZR_ENOMEM, "out of memory");
    t->hdrs = l;
    if (!t->easy) t->easy = tzr_http_easy_get(h->common);
    else curl_easy_reset(t->easy);
    if (!t->easy) return tzr_fail(TZR_ENOMEM, "curl_easy_init failed");
    tzr_http_easy_common(h->common, t->easy, remaining);
    curl_easy_setopt(t->easy, CURLOPT_URL, t->url);
    curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->hdrs);
    curl_easy_setopt(t->easy, CURLOPT_HEADERFUNCTION, rt_header);
    curl_easy_setopt(t->easy, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, rt_write);
    curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, t);
    /* A large receive buffer: fewer recv/poll round trips per range (the
     * 16 KiB default capped loopback reads near 1 GB/s). */
    curl_easy_setopt(t->easy, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t);
    curl_easy_setopt(t->easy, CURLOPT_ERRORBUFFER, t->errbuf);
    if (!h->is_s3) curl_easy_setopt(t->easy, CURLOPT_FOLLOWLOCATION, 1L);
    t->errbuf[0] = 0;
    t->status = 0;
    t->checked = 0;
    t->bad = 0;
    t->cr[0] = 0;
    t->errlen = 0;
    t->errbody[0] = 0;
    t->got_at_start = t->got;
    return 0;
}

/* Outcome of a finished attempt: 0 done, 1 retry, <0 fatal (message set). */
static int rt_finish(range_task *t, CURLcode cc) {
    http_src *h = t->h;
    long st = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &st);
    if (t->bad) return t->bad;
    if (!t->errbuf[0]) snprintf(t->errbuf, sizeof t->errbuf, "%s", curl_easy_strerror(cc));
    if (cc == CURLE_OK && (st == 200 || st == 206)) {
        if (t->got == t->len) return 0;
        snprintf(t->errbuf, sizeof t->errbuf, "short body: %zu of %zu bytes", t->got - t->got_at_start,
                 t->len - t->got_at_start);
        return 1; /* resume from t->got */
    }
    if (cc != CURLE_OK) {
        if (tzr_http_curl_retryable((int)cc)) return 1;
        return tzr_fail(TZR_ENET, "%s: GET bytes %" PRIu64 "-%" PRIu64 " failed: %s (curl %d)", h->name,
                        t->off + t->got, t->off + t->len - 1, t->errbuf, (int)cc);
    }
    if (tzr_http_status_retryable(st)) {
        snprintf(t->errbuf, sizeof t->errbuf, "HTTP %ld", st);
        return 1;
    }
    tzr_http_call c = {0};
    c.method = "GET";
    c.what = h->name;
    c.status = st;
    c.resp = t->errbody;
    c.resp_len = t->errlen;
    return tzr_http_status_error(&c, h->is_s3 ? &h->cfg : NULL);
}

static void rt_release(http_src *h, range_task *t) {
    if (t->easy) tzr_http_easy_put(h->common, t->easy);
    t->easy = NULL;
    curl_slist_free_all(t->hdrs);
    t->hdrs = NULL;
    free(t->url);
    t->url = NULL;
}

static int http_read_at(tzr_source *s, void *buf, size_t len, uint64_t off) {
    http_src *h = (http_src *)s;
    if (len == 0) return 0;
    if (off > s->size || len > s->size - off)
        return tzr_fail(TZR_ETRUNC, "%s: read of %zu bytes at offset %" PRIu64
                        " goes past the end (%" PRIu64 " bytes)",
                        h->name, len, off, s->size);
    const tzr_http_options *o = tzr_http_common_opts(h->common);
    size_t rb = o->range_bytes;
    size_t n = (len + rb - 1) / rb;
    range_task *tasks = calloc(n, sizeof *tasks);
    CURLM *m = curl_multi_init();
    if (!tasks || !m) {
        free(tasks);
        if (m) curl_multi_cleanup(m);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        tasks[i].h = h;
        tasks[i].off = off + i * rb;
        tasks[i].dst = (uint8_t *)buf + i * rb;
        tasks[i].len = i + 1 < n ? rb : len - i * rb;
    }
    double start = tzr_now_s(), deadline = start + o->total_timeout_s;
    size_t done = 0, next = 0;
    int active = 0, rc = 0, retries = 0;
    char last_err[CURL_ERROR_SIZE + 64] = "";
    while (done < n && rc == 0) {
        double now = tzr_now_s();
        if (now >= deadline) {
            rc = tzr_fail(TZR_ENET,
                          "%s: read of %zu bytes at offset %" PRIu64
                          " did not finish within %.1f s (%d retries; last error: %s)",
                          h->name, len, off, o->total_timeout_s, retries,
                          last_err[0] ? last_err : "none");
            break;
        }
        /* Start waiting tasks (retries first: they are earlier in the array). */
        for (size_t i = 0; i < n && active < o->max_inflight; i++) {
            range_task *t = &tasks[i];
            if (t->done || t->active || (i >= next && t->attempts == 0 && i != next)) continue;
            if (t->attempts > 0 && t->next_at > now) continue;
            if ((rc = rt_prepare(t, deadline - now))) break;
            if (curl_multi_add_handle(m, t->easy) != CURLM_OK) {
                rc = tzr_fail(TZR_ENOMEM, "curl_multi_add_handle failed");
                break;
            }
            t->active = 1;
            t->attempts++;
            h->requests++;
            active++;
            if (i == next) next++;
        }
        if (rc) break;
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            range_task *t = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
            CURLcode cc = msg->data.result;
            curl_multi_remove_handle(m, t->easy);
            t->active = 0;
            active--;
            int r = rt_finish(t, cc);
            if (r == 0) {
                t->done = 1;
                done++;
                rt_release(h, t);
            } else if (r == 1) {
                snprintf(last_err, sizeof last_err, "%s", t->errbuf);
                /* Progress resets the per-range retry count. */
                if (t->got > t->got_at_start && t->attempts > 1) t->attempts = 1;
                if (t->attempts > o->max_retries) {
                    rc = tzr_fail(t->status && t->status != 200 && t->status != 206 ? TZR_EHTTP
                                                                                      : TZR_ENET,
                                  "%s: GET bytes %" PRIu64 "-%" PRIu64 " failed after %d attempts: %s",
                                  h->name, t->off + t->got, t->off + t->len - 1, t->attempts,
                                  t->errbuf);
                } else {
                    retries++;
                    h->retries++;
                    t->next_at = tzr_now_s() + tzr_http_backoff_s(t->attempts);
                }
            } else {
                rc = r;
            }
            if (rc) break;
        }
        if (rc || done == n) break;
        int wait_ms = 100;
        if (active == 0) {
            /* Only backoff waits pending: sleep until the earliest. */
            double soonest = deadline;
            for (size_t i = 0; i < n; i++)
                if (!tasks[i].done && !tasks[i].active && tasks[i].attempts > 0 &&
                    tasks[i].next_at < soonest)
                    soonest = tasks[i].next_at;
            double d = soonest - tzr_now_s();
            wait_ms = d > 0 ? (int)(d * 1000) + 1 : 0;
            if (wait_ms > 1000) wait_ms = 1000;
        }
        curl_multi_poll(m, NULL, 0, wait_ms, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        if (tasks[i].active) curl_multi_remove_handle(m, tasks[i].easy);
        rt_release(h, &tasks[i]);
    }
    curl_multi_cleanup(m);
    free(tasks);
    return rc;
}

static void http_destroy(tzr_source *s);

int tzr_source_http_stats(tzr_source *src, tzr_http_stats *st) {
    if (!src || src->destroy != http_destroy) return tzr_fail(TZR_EINVAL, "not an HTTP/S3 source");
    http_src *h = (http_src *)src;
    st->requests = h->requests;
    st->retries = h->retries;
    return 0;
}

static void http_destroy(tzr_source *s) {
    http_src *h = (http_src *)s;
    if (!h) return;
    tzr_http_common_free(h->common);
    tzr_s3_config_free(&h->cfg);
    tzr_s3_target_free(&h->tgt);
    free(h->name);
    free(h->url);
    free(h->etag);
    free(h->if_match);
    free(h);
}

/* Size from a HEAD (or, when HEAD gives no answer we can use, a GET of
 * bytes 0-0, which also brings S3's XML error body for the message). */
static int http_probe(http_src *h) {
    const tzr_http_options *o = tzr_http_common_opts(h->common);
    tzr_http_call c = {0};
    c.method = "HEAD";
    c.cfg = h->is_s3 ? &h->cfg : NULL;
    c.tgt = h->is_s3 ? &h->tgt : NULL;
    c.url = h->url;
    c.deadline = tzr_now_s() + o->total_timeout_s;
    c.max_retries = o->max_retries;
    c.what = h->name;
    int rc = tzr_http_perform(h->common, &c);
    if (rc) return rc;
    long long size = -1;
    if (c.status >= 200 && c.status < 300 && c.content_length >= 0) {
        size = c.content_length;
    } else {
        const char *hdr[] = {"Range: bytes=0-0"};
        tzr_http_call_reset(&c);
        c.method = "GET";
        c.headers = hdr;
        c.n_headers = 1;
        rc = tzr_http_perform(h->common, &c);
        if (rc) {
            tzr_http_call_reset(&c);
            return rc;
        }
        unsigned long long a, b, total;
        if (c.status == 206 && sscanf(c.content_range, "bytes %llu-%llu/%llu", &a, &b, &total) == 3)
            size = (long long)total;
        else if (c.status == 200 && c.content_length >= 0)
            size = c.content_length;
        else if (c.status == 416 && sscanf(c.content_range, "bytes */%llu", &total) == 1)
            size = (long long)total;
        else if (c.status < 200 || c.status >= 300) {
            rc = tzr_http_status_error(&c, h->is_s3 ? &h->cfg : NULL);
            tzr_http_call_reset(&c);
            return rc;
        }
    }
    if (size < 0) {
        tzr_http_call_reset(&c);
        return tzr_fail(TZR_EHTTP, "%s: server reported no object size", h->name);
    }
    h->base.size = (uint64_t)size;
    if (c.etag[0]) {
        h->etag = strdup(c.etag);
        size_t n = strlen(c.etag) + 12;
        h->if_match = malloc(n);
        if (!h->etag || !h->if_match) {
            tzr_http_call_reset(&c);
            return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        snprintf(h->if_match, n, "If-Match: %s", c.etag);
    }
    tzr_http_call_reset(&c);
    return 0;
}

int tzr_source_open_url(tzr_source **out, const char *url, const tzr_http_options *opt) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL output pointer");
    *out = NULL;
    if (!url || !tzr_is_url(url)) return tzr_fail(TZR_EINVAL, "%s: not an http(s):// or s3:// URL",
                                                   url ? url : "(null)");
    http_src *h = calloc(1, sizeof *h);
    if (!h) return tzr_fail(TZR_ENOMEM, "out of memory");
    int rc = tzr_http_common_new(&h->common, opt);
    if (rc) {
        free(h);
        return rc;
    }
    h->is_s3 = strncasecmp(url, "s3://", 5) == 0;
    h->name = strndup(url, strcspn(url, "?#"));
    h->url = strdup(url);
    if (!h->name || !h->url) {
        http_destroy(&h->base);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    if (h->is_s3) {
        if ((rc = tzr_s3_config_resolve(&h->cfg, opt)) ||
            (rc = tzr_s3_target_make(&h->tgt, url, &h->cfg))) {
            http_destroy(&h->base);
            return rc;
        }
    }
    if ((rc = http_probe(h))) {
        http_destroy(&h->base);
        return rc;
    }
    const tzr_http_options *o = tzr_http_common_opts(h->common);
    h->base.read_at = http_read_at;
    h->base.destroy = http_destroy;
    h->base.name = h->name;
    h->base.preferred_chunk = o->range_bytes;
    h->base.preferred_inflight = o->max_inflight;
    h->base.pack_reads = 1;
    h->base.ctx = h;
    *out = &h->base;
    return 0;
}
