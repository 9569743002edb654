/* Positional source over HTTP ranged GETs (plain http(s):// or SigV4-signed
 * s3://). One HEAD at open learns the size and ETag. readv_at (and read_at,
 * its one-buffer case) splits the request into ranges of range_bytes, runs
 * up to max_inflight of them at once on a private curl_multi, writes each
 * straight into the caller's buffers at its place in the iovec list
 * (bounds-checked, Content-Range verified) and retries a failed range from
 * the bytes already received, re-signed, with exponential backoff and
 * jitter (at least the server's Retry-After on 429/503), within
 * total_timeout_s. Every GET carries If-Match with the ETag seen at open and
 * every answer's ETag (or Last-Modified) must be that one: a replaced
 * object gives TZR_ECHANGED even from a server that ignores If-Match.
 * Easy handles come from a pool; connections, DNS and TLS sessions are
 * shared through a locked CURLSH, so reads are safe from many threads. */
#include "http_internal.h"

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
    char *last_modified; /* the pin when there is no ETag; NULL: none */
    char *if_match;  /* "If-Match: <etag>" */
    tzr_http_common *common;
    _Atomic uint64_t requests, retries; /* for tzr_source_http_stats */
} http_src;

/* One ranged GET: object bytes [off, off+len), scattered into the caller's
 * iovecs from position (iov0, skip0) on. */
typedef struct range_task {
    http_src *h;
    const tzr_iovec *iov; /* the caller's buffers (shared by all tasks) */
    int iovcnt;
    int iov0;       /* where byte 0 of this range goes: iov index, offset */
    size_t skip0;
    int ci;         /* where byte `got` goes (set on every attempt) */
    size_t co;
    uint64_t off;   /* object offset of the range */
    size_t len;
    size_t got;     /* bytes already in the iovecs */
    size_t got_at_start;
    int attempts;   /* requests made for this range, all told */
    int failures;   /* attempts since the last one that moved real data */
    int noanswer;   /* attempts that timed out before any answer */
    double next_at;
    int active, done;
    CURL *easy;
    struct curl_slist *hdrs;
    char *url;
    /* per attempt */
    long status;
    double retry_after; /* seconds the server asked for, -1 none */
    int checked;    /* status + Content-Range validated for this attempt */
    int bad;        /* fatal validation failure: TZR_E* code */
    char cr[128];
    char etag[256]; /* this answer's validators and encoding */
    char lm[64];
    char ce[64];
    char errbody[2048];
    size_t errlen;
    char errbuf[CURL_ERROR_SIZE];
} range_task;

/* Move an iovec position (*i, *o) forward by n bytes and past empty
 * buffers, so it rests on a buffer with room or at the end. */
static void iov_advance(const tzr_iovec *iov, int cnt, int *i, size_t *o, size_t n) {
    while (*i < cnt && n >= iov[*i].len - *o) {
        n -= iov[*i].len - *o;
        (*i)++;
        *o = 0;
    }
    *o += n;
}

static size_t rt_header(char *b, size_t sz, size_t n, void *u) {
    range_task *t = u;
    size_t len = sz * n;
    if (len >= 5 && strncmp(b, "HTTP/", 5) == 0) {
        t->cr[0] = t->etag[0] = t->lm[0] = t->ce[0] = 0;
        t->checked = 0;
        t->retry_after = -1;
    } else if (len > 14 && strncasecmp(b, "Content-Range:", 14) == 0) {
        tzr_http_copy_hval(t->cr, sizeof t->cr, b + 14, len - 14);
    } else if (len > 5 && strncasecmp(b, "ETag:", 5) == 0) {
        tzr_http_copy_hval(t->etag, sizeof t->etag, b + 5, len - 5);
    } else if (len > 14 && strncasecmp(b, "Last-Modified:", 14) == 0) {
        tzr_http_copy_hval(t->lm, sizeof t->lm, b + 14, len - 14);
    } else if (len > 17 && strncasecmp(b, "Content-Encoding:", 17) == 0) {
        tzr_http_copy_hval(t->ce, sizeof t->ce, b + 17, len - 17);
    } else if (len > 12 && strncasecmp(b, "Retry-After:", 12) == 0) {
        char v[64];
        tzr_http_copy_hval(v, sizeof v, b + 12, len - 12);
        t->retry_after = tzr_http_retry_after_parse(v);
    }
    return len;
}

/* 0 if a 2xx answer is the pinned object's bytes as stored; else the
 * error. A server that ignores If-Match still names the version it sends:
 * its ETag (Last-Modified when either side has no ETag) must be the one
 * seen at open. Neither compression nor a new version is cured by a retry. */
static int rt_check_object(range_task *t, uint64_t a, uint64_t b) {
    http_src *h = t->h;
    if (tzr_http_encoded(t->ce))
        return tzr_fail(TZR_EHTTP,
                        "%s: bytes %" PRIu64 "-%" PRIu64 " came with Content-Encoding '%s' although"
                        " identity was asked for; refusing the encoded body",
                        h->name, a, b, t->ce);
    if (h->etag && t->etag[0]) {
        if (strcmp(h->etag, t->etag) != 0)
            return tzr_fail(TZR_ECHANGED,
                            "%s: the object changed during the load: bytes %" PRIu64 "-%" PRIu64
                            " came with ETag %s, not %s as at open (the server ignored If-Match)",
                            h->name, a, b, t->etag, h->etag);
    } else if (h->last_modified && t->lm[0] && strcmp(h->last_modified, t->lm) != 0) {
        return tzr_fail(TZR_ECHANGED,
                        "%s: the object changed during the load: bytes %" PRIu64 "-%" PRIu64
                        " came with Last-Modified '%s', not '%s' as at open",
                        h->name, a, b, t->lm, h->last_modified);
    }
    return 0;
}

/* Decide at the first body byte whether this response's body is ours. */
static void rt_check(range_task *t) {
    t->checked = 1;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
    uint64_t want_start = t->off + t->got, want_end = t->off + t->len - 1;
    uint64_t size = t->h->base.size;
    if ((t->status == 200 || t->status == 206) &&
        (t->bad = rt_check_object(t, want_start, want_end)))
        return;
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

/* Copy body bytes to the iovecs at the cursor. -1 if they run out (the
 * caller checked the range length, so only on an internal mismatch). */
static int rt_scatter(range_task *t, const char *b, size_t len) {
    while (len > 0) {
        if (t->ci >= t->iovcnt) return -1;
        const tzr_iovec *v = &t->iov[t->ci];
        size_t room = v->len - t->co, take = len < room ? len : room;
        if (take) memcpy((uint8_t *)v->base + t->co, b, take);
        b += take;
        len -= take;
        t->co += take;
        t->got += take;
        if (t->co == v->len) {
            t->ci++;
            t->co = 0;
        }
    }
    return 0;
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
        t->bad = tzr_fail(TZR_EHTTP,
                          "%s: server sent more bytes than requested for bytes %" PRIu64 "-%" PRIu64,
                          t->h->name, t->off, t->off + t->len - 1);
        return 0;
    }
    if (rt_scatter(t, b, len)) {
        t->bad = tzr_fail(TZR_EINVAL, "%s: buffers end before bytes %" PRIu64 "-%" PRIu64,
                          t->h->name, t->off, t->off + t->len - 1);
        return 0;
    }
    return len;
}

static int rt_prepare(range_task *t, double remaining) {
    http_src *h = t->h;
    /* A finished range is never asked for again: "bytes=N-(N-1)" is an
     * inverted range that servers answer with 416. */
    if (t->got >= t->len)
        return tzr_fail(TZR_EINVAL, "%s: internal error: range %" PRIu64 "-%" PRIu64
                        " restarted after all its bytes arrived",
                        h->name, t->off, t->off + t->len - 1);
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
    t->retry_after = -1;
    t->checked = 0;
    t->bad = 0;
    t->cr[0] = t->etag[0] = t->lm[0] = t->ce[0] = 0;
    t->errlen = 0;
    t->errbody[0] = 0;
    t->got_at_start = t->got;
    /* A resume continues at byte `got`, wherever that is in the iovecs. */
    t->ci = t->iov0;
    t->co = t->skip0;
    iov_advance(t->iov, t->iovcnt, &t->ci, &t->co, t->got);
    return 0;
}

/* Outcome of a finished attempt: 0 done, 1 retry, <0 fatal (message set). */
static int rt_finish(range_task *t, CURLcode cc) {
    http_src *h = t->h;
    long st = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &st);
    if (t->bad) return t->bad;
    t->status = st; /* also for bodiless answers (503 with no body) */
    if (!t->errbuf[0]) snprintf(t->errbuf, sizeof t->errbuf, "%s", curl_easy_strerror(cc));
    /* Every byte of the range arrived and was checked: done, even when the
     * transfer then failed (a chunked body cut before its last chunk, a
     * Content-Length larger than the body: curl error 18). */
    if ((st == 200 || st == 206) && t->checked && t->got == t->len) return 0;
    if (cc == CURLE_TOO_MANY_REDIRECTS)
        return tzr_fail(TZR_EHTTP, "%s: GET bytes %" PRIu64 "-%" PRIu64
                        ": redirect loop (more than %d redirects)",
                        h->name, t->off + t->got, t->off + t->len - 1, TZR_HTTP_MAX_REDIRS);
    if (cc == CURLE_OPERATION_TIMEDOUT && st == 0 && ++t->noanswer >= TZR_HTTP_NOANSWER_TRIES)
        return tzr_fail(TZR_ENET, "%s: GET bytes %" PRIu64 "-%" PRIu64
                        ": no answer from the server, %d tries (%s)",
                        h->name, t->off + t->got, t->off + t->len - 1, t->noanswer, t->errbuf);
    if (cc == CURLE_OK && (st == 200 || st == 206)) {
        if (t->got == t->len) return 0;
        snprintf(t->errbuf, sizeof t->errbuf, "short body: %zu of %zu bytes", t->got - t->got_at_start,
                 t->len - t->got_at_start);
        return 1; /* resume from t->got */
    }
    if (cc != CURLE_OK) {
        if (tzr_http_curl_retryable((int)cc)) return 1;
        return tzr_fail(TZR_ENET, "%s: GET bytes %" PRIu64 "-%" PRIu64 " failed: %s (curl %d)%s",
                        h->name, t->off + t->got, t->off + t->len - 1, t->errbuf, (int)cc,
                        tzr_http_curl_hint((int)cc));
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

/* One vectored read: its ranges, the curl_multi running them, the budget. */
typedef struct read_job {
    http_src *h;
    const tzr_http_options *o;
    uint64_t off;
    size_t len;
    range_task *tasks;
    size_t n, done, next;
    int active, retries;
    CURLM *m;
    double deadline;
    char last_err[CURL_ERROR_SIZE + 64];
} read_job;

/* Cut [off, off+len) into ranges of range_bytes, each knowing where in the
 * iovecs its first byte goes. */
static int job_plan(read_job *j, const tzr_iovec *iov, int iovcnt) {
    size_t rb = j->o->range_bytes;
    j->n = j->len / rb + (j->len % rb != 0);
    j->tasks = calloc(j->n, sizeof *j->tasks);
    j->m = curl_multi_init();
    if (!j->tasks || !j->m) return tzr_fail(TZR_ENOMEM, "out of memory");
    int i = 0;
    size_t o = 0;
    iov_advance(iov, iovcnt, &i, &o, 0);
    for (size_t k = 0; k < j->n; k++) {
        range_task *t = &j->tasks[k];
        t->h = j->h;
        t->iov = iov;
        t->iovcnt = iovcnt;
        t->off = j->off + k * rb;
        t->len = k + 1 < j->n ? rb : j->len - k * rb;
        t->iov0 = i;
        t->skip0 = o;
        iov_advance(iov, iovcnt, &i, &o, t->len);
    }
    return 0;
}

static void job_free(read_job *j) {
    for (size_t i = 0; j->tasks && i < j->n; i++) {
        if (j->tasks[i].active) curl_multi_remove_handle(j->m, j->tasks[i].easy);
        rt_release(j->h, &j->tasks[i]);
    }
    if (j->m) curl_multi_cleanup(j->m);
    free(j->tasks);
}

/* Start ranges up to max_inflight: retries whose wait is over first (they
 * sit earlier in the array), new ranges in order. */
static int job_start(read_job *j, double now) {
    for (size_t i = 0; i < j->n && j->active < j->o->max_inflight; i++) {
        range_task *t = &j->tasks[i];
        if (t->done || t->active || (t->attempts == 0 && i != j->next)) continue;
        if (t->attempts > 0 && t->next_at > now) continue;
        int rc = rt_prepare(t, j->deadline - now);
        if (rc) return rc;
        if (curl_multi_add_handle(j->m, t->easy) != CURLM_OK)
            return tzr_fail(TZR_ENOMEM, "curl_multi_add_handle failed");
        t->active = 1;
        t->attempts++;
        j->h->requests++;
        j->active++;
        if (i == j->next) j->next++;
    }
    return 0;
}

/* Schedule a failed range again after the backoff (at least what the
 * server's Retry-After asked for), or give up: too many attempts, or a
 * wait that would end past the time budget. */
static int job_retry(read_job *j, range_task *t) {
    snprintf(j->last_err, sizeof j->last_err, "%s", t->errbuf);
    /* Real progress resets the retry count: at least what the low-speed
     * limit asks of one stall window (a server trickling a few bytes per
     * attempt would otherwise be retried until the whole budget is spent).
     * Messages give the attempts actually made. */
    size_t real = (size_t)(1024 * (j->o->stall_timeout_s + 0.5));
    if (t->got - t->got_at_start >= real || t->got == t->len) t->failures = 0;
    t->failures++;
    int code = t->status && t->status != 200 && t->status != 206 ? TZR_EHTTP : TZR_ENET;
    uint64_t a = t->off + t->got, b = t->off + t->len - 1;
    const char *name = j->h->name;
    if (t->failures > j->o->max_retries)
        return tzr_fail(code, "%s: GET bytes %" PRIu64 "-%" PRIu64 " failed after %d attempts: %s",
                        name, a, b, t->attempts, t->errbuf);
    int asked = 0;
    double wait = tzr_http_retry_delay_s(t->failures, t->status, t->retry_after, &asked);
    double now = tzr_now_s();
    if (asked && now + wait > j->deadline)
        return tzr_fail(code,
                        "%s: GET bytes %" PRIu64 "-%" PRIu64 " got HTTP %ld with Retry-After %.0f s,"
                        " past the %.1f s time budget (%.1f s left); not waiting",
                        name, a, b, t->status, wait, j->o->total_timeout_s, j->deadline - now);
    if (now + wait > j->deadline)
        return tzr_fail(code,
                        "%s: GET bytes %" PRIu64 "-%" PRIu64 " failed and the %.1f s time budget"
                        " ends before the next retry (%d attempts): %s",
                        name, a, b, j->o->total_timeout_s, t->attempts, t->errbuf);
    j->retries++;
    j->h->retries++;
    t->next_at = now + wait;
    return 0;
}

/* Collect finished transfers: done, retry later, or fail the read. */
static int job_reap(read_job *j) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(j->m, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        range_task *t = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        CURLcode cc = msg->data.result;
        curl_multi_remove_handle(j->m, t->easy);
        t->active = 0;
        j->active--;
        int r = rt_finish(t, cc);
        if (r == 0) {
            t->done = 1;
            j->done++;
            rt_release(j->h, t);
        } else if (r == 1) {
            if ((r = job_retry(j, t))) return r;
        } else {
            return r;
        }
    }
    return 0;
}

/* How long to poll: short while transfers run, else until the earliest
 * retry is due (at most 1 s, so the deadline is checked). */
static int job_wait_ms(const read_job *j) {
    if (j->active > 0) return 100;
    double soonest = j->deadline;
    for (size_t i = 0; i < j->n; i++) {
        const range_task *t = &j->tasks[i];
        if (!t->done && !t->active && t->attempts > 0 && t->next_at < soonest) soonest = t->next_at;
    }
    double d = soonest - tzr_now_s();
    int ms = d > 0 ? (int)(d * 1000) + 1 : 0;
    return ms > 1000 ? 1000 : ms;
}

static int job_run(read_job *j) {
    while (j->done < j->n) {
        double now = tzr_now_s();
        if (now >= j->deadline)
            return tzr_fail(TZR_ENET,
                            "%s: read of %zu bytes at offset %" PRIu64
                            " did not finish within %.1f s (%d retries; last error: %s)",
                            j->h->name, j->len, j->off, j->o->total_timeout_s, j->retries,
                            j->last_err[0] ? j->last_err : "none");
        int rc = job_start(j, now);
        if (rc) return rc;
        int running = 0;
        curl_multi_perform(j->m, &running);
        if ((rc = job_reap(j))) return rc;
        if (j->done == j->n) break;
        curl_multi_poll(j->m, NULL, 0, job_wait_ms(j), NULL);
    }
    return 0;
}

/* Total length of an iovec list; TZR_EINVAL for a malformed one. */
static int iov_total(const http_src *h, const tzr_iovec *iov, int iovcnt, size_t *total) {
    *total = 0;
    if (iovcnt < 0 || (iovcnt > 0 && !iov))
        return tzr_fail(TZR_EINVAL, "%s: bad iovec list (%d entries)", h->name, iovcnt);
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].len && !iov[i].base)
            return tzr_fail(TZR_EINVAL, "%s: iovec %d has no buffer", h->name, i);
        if (__builtin_add_overflow(*total, iov[i].len, total))
            return tzr_fail(TZR_EINVAL, "%s: iovec lengths overflow", h->name);
    }
    return 0;
}

/* The read: split into ranges fetched concurrently, each written at its
 * place in the iovecs (read_at is the one-buffer case). */
static int http_readv_at(tzr_source *s, const tzr_iovec *iov, int iovcnt, uint64_t off) {
    http_src *h = (http_src *)s;
    size_t len;
    int rc = iov_total(h, iov, iovcnt, &len);
    if (rc || len == 0) return rc;
    if (off > s->size || len > s->size - off)
        return tzr_fail(TZR_ETRUNC, "%s: read of %zu bytes at offset %" PRIu64
                        " goes past the end (%" PRIu64 " bytes)",
                        h->name, len, off, s->size);
    read_job j = {0};
    j.h = h;
    j.o = tzr_http_common_opts(h->common);
    j.off = off;
    j.len = len;
    j.deadline = tzr_now_s() + j.o->total_timeout_s;
    rc = job_plan(&j, iov, iovcnt);
    if (!rc) rc = job_run(&j);
    job_free(&j);
    return rc;
}

static int http_read_at(tzr_source *s, void *buf, size_t len, uint64_t off) {
    tzr_iovec v = {buf, len};
    return http_readv_at(s, &v, 1, off);
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
    free(h->last_modified);
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
    if (tzr_http_encoded(c.content_encoding)) {
        rc = tzr_fail(TZR_EHTTP,
                      "%s: the server answers with Content-Encoding '%s' although identity was"
                      " asked for; its bytes would not be the object's",
                      h->name, c.content_encoding);
        tzr_http_call_reset(&c);
        return rc;
    }
    h->base.size = (uint64_t)size;
    if (c.last_modified[0] && !(h->last_modified = strdup(c.last_modified))) {
        tzr_http_call_reset(&c);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
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
    tzr_http_options ho = TZR_HTTP_OPTIONS_INIT;
    if (TZR_OPTS(tzr_http_options, ho, opt, offsetof(tzr_http_options, stall_timeout_s))) return TZR_EINVAL;
    opt = &ho;
    if (!url || (strncasecmp(url, "s3://", 5) && strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8)))
        return tzr_fail(TZR_EINVAL, "%s: not an http(s):// or s3:// URL", url ? url : "(null)");
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
    h->base.struct_size = sizeof h->base;
    h->base.readv_at = http_readv_at;
    h->base.destroy = http_destroy;
    h->base.name = h->name;
    h->base.preferred_chunk = o->range_bytes;
    h->base.preferred_inflight = o->max_inflight;
    h->base.pack_reads = 1;
    h->base.ctx = h;
    *out = &h->base;
    return 0;
}
