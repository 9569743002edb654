/* Atomic S3 output via multipart upload.
 *
 * The object is cut into parts of part_bytes (default 16 MiB, at least
 * 5 MiB: S3's minimum for every part but the last). pwrite_at copies into
 * the buffer of each part it touches. A part other than part 1 is uploaded
 * (UploadPart, up to max_inflight at once, each retried by
 * tzr_http_perform) as soon as its last byte was written; its buffer is
 * then freed. Part 1 — bytes [0, part_bytes), holding the tensorizer
 * prologue and index that the writer rewrites at the very end — stays in
 * memory until finish, whose uploads (the tail part, any holes, part 1)
 * then run in parallel (S3 accepts parts in any order).
 * CONSTRAINT: a part is uploaded once all its bytes were written (each byte
 * once), so a pwrite_at into it afterwards fails with TZR_EINVAL. The
 * tensorizer writer writes each byte once: a tensor's data, then its
 * header just before it, and the prologue/index in part 1 at the end.
 * finish: upload what is left (in parallel), CompleteMultipartUpload (the object appears
 * atomically). An output smaller than one part is sent as one PUT at
 * finish. abort: AbortMultipartUpload; nothing becomes visible. PUT
 * bodies are signed over http:// and UNSIGNED-PAYLOAD over https://. */
#include "thread.h"
#include "http_internal.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_INFLIGHT 8
#define MIN_PART (5u << 20)

typedef struct part {
    uint8_t *buf;       /* part_bytes, or NULL once uploaded/not yet touched */
    size_t hw;          /* high-water mark of bytes written in this part */
    size_t filled;      /* bytes written into it; writers write each byte once */
    size_t len;         /* bytes uploaded (set when its upload starts) */
    int state;          /* 0 buffering, 1 uploading, 2 uploaded */
    char etag[256];
    pthread_t th;
    int has_thread;
    struct s3_out *o;
    size_t index;
} part;

typedef struct s3_out {
    tzr_output base;
    char *name;
    tzr_s3_config cfg;
    tzr_s3_target tgt;
    tzr_http_common *common;
    size_t part_bytes;
    int max_inflight;   /* parts uploading at once (the options' max_inflight) */
    part **parts;
    size_t nparts;
    uint64_t size;      /* highest byte written + 1 */
    char *upload_id;    /* encoded for queries */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight;
    int failed;         /* an upload failed: err_* hold the cause */
    char err_msg[1024];
    int err_code;
    int finished;
} s3_out;

static double deadline_for(s3_out *o) {
    return tzr_now_s() + tzr_http_common_opts(o->common)->total_timeout_s;
}

static int s3_call(s3_out *o, tzr_http_call *c, const char *method, const char *query,
                   const void *body, size_t len) {
    memset(c, 0, sizeof *c);
    c->method = method;
    c->cfg = &o->cfg;
    c->tgt = &o->tgt;
    c->query = query;
    c->body = body;
    c->body_len = len;
    /* Over TLS part bodies go as UNSIGNED-PAYLOAD, as botocore sends them:
     * TLS already protects the bytes, and a SigV4 body hash would be one
     * more SHA-256 pass over every byte (the format's own hashes are in
     * the file). Over plain HTTP the signature covers the body. */
    c->sign_body = !(strncasecmp(o->tgt.url_base, "https://", 8) == 0 && strcmp(method, "PUT") == 0);
    c->deadline = deadline_for(o);
    c->max_retries = tzr_http_common_opts(o->common)->max_retries;
    c->what = o->name;
    int rc = tzr_http_perform(o->common, c);
    if (rc) return rc;
    if (c->status < 200 || c->status >= 300 || (c->resp && strstr(c->resp, "<Error>"))) {
        if (c->status >= 200 && c->status < 300) c->status = 500;
        rc = tzr_http_status_error(c, &o->cfg);
        return tzr_fail_prefix(rc, "%s %s: ", method, query ? query : "");
    }
    return 0;
}

static int completed_before(s3_out *o, size_t n);

static int initiate(s3_out *o) {
    if (o->upload_id) return 0;
    tzr_http_call c;
    int rc = s3_call(o, &c, "POST", "uploads=", NULL, 0);
    if (rc) {
        tzr_http_call_reset(&c);
        return rc;
    }
    size_t idl = 0;
    const char *p = c.resp ? tzr_xml_find(c.resp, c.resp + c.resp_len, "UploadId", &idl) : NULL;
    if (!p) {
        tzr_http_call_reset(&c);
        return tzr_fail(TZR_EHTTP, "%s: CreateMultipartUpload answer has no UploadId", o->name);
    }
    o->upload_id = tzr_uri_encode(p, idl, 0);
    tzr_http_call_reset(&c);
    return o->upload_id ? 0 : tzr_fail(TZR_ENOMEM, "out of memory");
}

/* An ETag as XML character data (it is the server's text: quotes always,
 * and nothing keeps it from holding & or <). Returns the bytes written;
 * dst has room for 6 per byte of s. */
static size_t xml_escape(char *dst, const char *s) {
    size_t l = 0;
    for (; *s; s++) {
        const char *e = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '"' ? "&quot;"
                      : *s == '\'' ? "&apos;" : NULL;
        if (e) l += (size_t)sprintf(dst + l, "%s", e);
        else dst[l++] = *s;
    }
    dst[l] = 0;
    return l;
}

static size_t part_len(s3_out *o, size_t i) {
    uint64_t start = (uint64_t)i * o->part_bytes;
    uint64_t end = start + o->part_bytes;
    if (end > o->size) end = o->size;
    return end > start ? (size_t)(end - start) : 0;
}

static int upload_part_sync(s3_out *o, part *p, size_t len) {
    char q[600];
    snprintf(q, sizeof q, "partNumber=%zu&uploadId=%s", p->index + 1, o->upload_id);
    tzr_http_call c;
    int rc = s3_call(o, &c, "PUT", q, p->buf, len);
    if (!rc && !c.etag[0]) rc = tzr_fail(TZR_EHTTP, "%s: UploadPart %zu returned no ETag", o->name,
                                         p->index + 1);
    if (!rc) snprintf(p->etag, sizeof p->etag, "%s", c.etag);
    tzr_http_call_reset(&c);
    return rc;
}

static void *upload_thread(void *arg) {
    part *p = arg;
    s3_out *o = p->o;
    int rc = upload_part_sync(o, p, p->len);
    pthread_mutex_lock(&o->mu);
    if (rc) {
        if (!o->failed) tzr_error_save(o->err_msg, sizeof o->err_msg, &o->err_code);
        o->failed = 1;
        p->state = 0;
    } else {
        p->state = 2;
        free(p->buf);
        p->buf = NULL;
    }
    o->inflight--;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static int restore_failure(s3_out *o) {
    /* called with mu held */
    tzr_error_restore(o->err_msg, o->err_code);
    return o->err_code ? o->err_code : TZR_EHTTP;
}

/* Start uploading part p (a full one during writes; at finish also the
 * tail and part 1). mu held; may wait for a slot. */
static int start_upload(s3_out *o, part *p) {
    while (o->inflight >= o->max_inflight && !o->failed) pthread_cond_wait(&o->cv, &o->mu);
    if (o->failed) return restore_failure(o);
    /* Under the lock: writers call in from several threads, and a second
     * CreateMultipartUpload would send parts to two uploads. */
    if (!o->upload_id) {
        int rc = initiate(o);
        if (rc) return rc;
    }
    p->state = 1;
    p->len = part_len(o, p->index); /* full, but the tail at finish */
    o->inflight++;
    if (tzr_thread_start(&p->th, upload_thread, p) != 0) {
        o->inflight--;
        p->state = 0;
        return tzr_fail(TZR_ENOMEM, "%s: cannot start an upload thread", o->name);
    }
    p->has_thread = 1;
    return 0;
}

static int ensure_parts(s3_out *o, size_t n) {
    if (n <= o->nparts) return 0;
    size_t cap = o->nparts ? o->nparts : 8;
    while (cap < n) cap *= 2;
    part **np = realloc(o->parts, cap * sizeof *np);
    if (!np) return tzr_fail(TZR_ENOMEM, "out of memory");
    for (size_t i = o->nparts; i < cap; i++) np[i] = NULL;
    o->parts = np;
    o->nparts = cap;
    return 0;
}

static int s3_pwrite(tzr_output *out, const void *buf, size_t len, uint64_t off) {
    s3_out *o = (s3_out *)out;
    const uint8_t *src = buf;
    pthread_mutex_lock(&o->mu);
    int rc = 0;
    if (o->failed) rc = restore_failure(o);
    if (o->finished) rc = tzr_fail(TZR_EINVAL, "%s: write after finish", o->name);
    while (!rc && len > 0) {
        size_t i = (size_t)(off / o->part_bytes);
        size_t in = (size_t)(off % o->part_bytes);
        size_t take = o->part_bytes - in < len ? o->part_bytes - in : len;
        if ((rc = ensure_parts(o, i + 1))) break;
        part *p = o->parts[i];
        if (!p) {
            p = calloc(1, sizeof *p);
            if (p) p->buf = calloc(1, o->part_bytes);
            if (!p || !p->buf) {
                if (p) free(p);
                rc = tzr_fail(TZR_ENOMEM, "out of memory (part buffer of %zu bytes)", o->part_bytes);
                break;
            }
            p->o = o;
            p->index = i;
            o->parts[i] = p;
        }
        if (p->state != 0) {
            rc = tzr_fail(TZR_EINVAL,
                          "%s: write at offset %llu lands in part %zu, which was already uploaded "
                          "(S3 output writes must be sequential outside the first %zu bytes)",
                          o->name, (unsigned long long)off, i + 1, o->part_bytes);
            break;
        }
        memcpy(p->buf + in, src, take);
        if (in + take > p->hw) p->hw = in + take;
        p->filled += take;
        if (off + take > o->size) o->size = off + take;
        /* Upload once every byte of the part was written, not when the
         * high-water mark reaches its end: the tensorizer writer puts a
         * tensor's header after its data. */
        if (i > 0 && p->filled >= o->part_bytes) rc = start_upload(o, p);
        src += take;
        off += take;
        len -= take;
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

static void join_all(s3_out *o) {
    for (size_t i = 0; i < o->nparts; i++) {
        part *p = o->parts[i];
        if (p && p->has_thread) {
            pthread_join(p->th, NULL);
            p->has_thread = 0;
        }
    }
}

static int s3_finish(tzr_output *out) {
    s3_out *o = (s3_out *)out;
    pthread_mutex_lock(&o->mu);
    o->finished = 1;
    pthread_mutex_unlock(&o->mu);
    join_all(o);
    if (o->failed) return restore_failure(o);
    size_t n = o->size ? (size_t)((o->size + o->part_bytes - 1) / o->part_bytes) : 0;
    int rc = 0;
    if (!o->upload_id) {
        /* Small output (or nothing uploaded yet): one PUT. */
        if (n <= 1) {
            tzr_http_call c;
            const uint8_t *body = n ? o->parts[0]->buf : NULL;
            rc = s3_call(o, &c, "PUT", NULL, body, n ? part_len(o, 0) : 0);
            tzr_http_call_reset(&c);
            return rc;
        }
        if ((rc = initiate(o))) return rc;
    }
    /* Upload the rest at once (max_inflight at a time): the tail part,
     * any never-filled part, and part 1 with the prologue and index, so
     * the end of a save waits for one part's upload, not for each in turn. */
    if ((rc = ensure_parts(o, n))) return rc;
    pthread_mutex_lock(&o->mu);
    for (size_t k = 0; k < n && !rc; k++) {
        size_t i = (k + 1) % n; /* 1, 2, ..., n-1, then 0 */
        part *p = o->parts[i];
        if (!p) {
            p = calloc(1, sizeof *p); /* a hole: zeros */
            if (p) p->buf = calloc(1, o->part_bytes);
            if (!p || !p->buf) {
                free(p);
                rc = tzr_fail(TZR_ENOMEM, "out of memory");
                break;
            }
            p->o = o;
            p->index = i;
            o->parts[i] = p;
        }
        if (p->state == 0) rc = start_upload(o, p);
    }
    pthread_mutex_unlock(&o->mu);
    join_all(o);
    pthread_mutex_lock(&o->mu);
    if (!rc && o->failed) rc = restore_failure(o);
    pthread_mutex_unlock(&o->mu);
    if (rc) return rc;
    size_t cap = 128 + n * (80 + 6 * sizeof o->parts[0]->etag); /* every ETag byte may become "&quot;" */
    char *xml = malloc(cap);
    if (!xml) return tzr_fail(TZR_ENOMEM, "out of memory");
    size_t l = (size_t)snprintf(xml, cap, "<CompleteMultipartUpload>");
    for (size_t i = 0; i < n; i++) {
        l += (size_t)snprintf(xml + l, cap - l, "<Part><PartNumber>%zu</PartNumber><ETag>", i + 1);
        l += xml_escape(xml + l, o->parts[i]->etag);
        l += (size_t)snprintf(xml + l, cap - l, "</ETag></Part>");
    }
    l += (size_t)snprintf(xml + l, cap - l, "</CompleteMultipartUpload>");
    char q[600];
    snprintf(q, sizeof q, "uploadId=%s", o->upload_id);
    tzr_http_call c;
    rc = s3_call(o, &c, "POST", q, xml, l);
    /* NoSuchUpload: an earlier send of this Complete (ours, or curl's own
     * resend on a reused connection) may have been carried out and only
     * its answer lost. The object at the key tells. */
    if (rc && c.status == 404 && c.resp && strstr(c.resp, "NoSuchUpload"))
        rc = completed_before(o, n);
    tzr_http_call_reset(&c);
    free(xml);
    if (!rc) {
        free(o->upload_id);
        o->upload_id = NULL;
    }
    return rc;
}

/* The ETag S3 gives an object completed from these parts: the MD5 of
 * the parts' binary MD5s, "-N". 0, or -1 when a part's ETag is not an MD5
 * (some servers' are not: then only the size can be compared). */
static int multipart_etag(s3_out *o, size_t n, char out[64]) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_md5(), NULL);
    for (size_t i = 0; ok && i < n; i++) {
        const char *e = o->parts[i]->etag;
        if (*e == '"') e++;
        uint8_t md5[16];
        for (int k = 0; ok && k < 16; k++) {
            unsigned v = 0;
            ok = isxdigit((unsigned char)e[2 * k]) && isxdigit((unsigned char)e[2 * k + 1]) &&
                 sscanf(e + 2 * k, "%2x", &v) == 1;
            md5[k] = (uint8_t)v;
        }
        ok = ok && (e[32] == '"' || e[32] == 0) && EVP_DigestUpdate(ctx, md5, 16);
    }
    uint8_t d[16];
    ok = ok && EVP_DigestFinal_ex(ctx, d, NULL);
    EVP_MD_CTX_free(ctx);
    if (!ok) return -1;
    int l = snprintf(out, 64, "\"");
    for (int k = 0; k < 16; k++) l += snprintf(out + l, 64 - (size_t)l, "%02x", d[k]);
    snprintf(out + l, 64 - (size_t)l, "-%zu\"", n);
    return 0;
}

/* After a Complete retried into NoSuchUpload: 0 when the object at the key
 * is the one these parts make (its ETag is theirs, its size ours), else
 * the error saying nothing was written. */
static int completed_before(s3_out *o, size_t n) {
    char want[64], saved[1024];
    int code, have = multipart_etag(o, n, want) == 0;
    tzr_error_save(saved, sizeof saved, &code);
    tzr_http_call h;
    int rc = s3_call(o, &h, "HEAD", NULL, NULL, 0);
    int ours = !rc && have && strcmp(h.etag, want) == 0 && h.content_length == (long long)o->size;
    char got[256];
    snprintf(got, sizeof got, "%s", rc ? "none" : h.etag);
    tzr_http_call_reset(&h);
    if (ours) {
        tzr_clear_error();
        return 0;
    }
    tzr_error_restore(saved, code);
    return tzr_fail_prefix(code, "%s: the upload is gone and the object there is not the one its parts make "
                                 "(ETag %s, expected %s): ", o->name, got, have ? want : "unknown");
}

static void s3_abort(tzr_output *out) {
    s3_out *o = (s3_out *)out;
    pthread_mutex_lock(&o->mu);
    o->finished = 1;
    pthread_mutex_unlock(&o->mu);
    join_all(o);
    if (o->upload_id) {
        char q[600];
        snprintf(q, sizeof q, "uploadId=%s", o->upload_id);
        char saved[1024];
        int code;
        tzr_error_save(saved, sizeof saved, &code);
        tzr_http_call c;
        int rc = s3_call(o, &c, "DELETE", q, NULL, 0);
        tzr_http_call_reset(&c);
        char why[400];
        snprintf(why, sizeof why, "%s", rc ? tzr_last_error() : "");
        tzr_error_restore(saved, code);
        /* The upload stays on the server with its parts (and is billed):
         * say which one, after the failure that led here. */
        if (rc)
            tzr_error_note("; and aborting multipart upload %s of %s failed too (%s): it is left on the server, "
                           "abort it with 'aws s3api abort-multipart-upload --bucket %s --key %s --upload-id %s'",
                           o->upload_id, o->name, why, o->tgt.bucket, o->tgt.key, o->upload_id);
        free(o->upload_id);
        o->upload_id = NULL;
    }
}

static void s3_destroy(tzr_output *out) {
    s3_out *o = (s3_out *)out;
    if (!o) return;
    s3_abort(out); /* no-op after a successful finish */
    for (size_t i = 0; i < o->nparts; i++) {
        if (o->parts[i]) free(o->parts[i]->buf);
        free(o->parts[i]);
    }
    free(o->parts);
    tzr_http_common_free(o->common);
    tzr_s3_config_free(&o->cfg);
    tzr_s3_target_free(&o->tgt);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->name);
    free(o);
}

int tzr_output_open_s3(tzr_output **out, const char *url, const tzr_http_options *opt,
                       size_t part_bytes) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL output pointer");
    *out = NULL;
    tzr_http_options ho = TZR_HTTP_OPTIONS_INIT;
    if (TZR_OPTS(tzr_http_options, ho, opt, offsetof(tzr_http_options, stall_timeout_s))) return TZR_EINVAL;
    opt = &ho;
    if (!url || strncasecmp(url, "s3://", 5) != 0)
        return tzr_fail(TZR_EINVAL, "%s: not an s3:// URL", url ? url : "(null)");
    if (part_bytes == 0) part_bytes = 16u << 20;
    if (part_bytes < MIN_PART) part_bytes = MIN_PART;
    s3_out *o = calloc(1, sizeof *o);
    if (!o) return tzr_fail(TZR_ENOMEM, "out of memory");
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->part_bytes = part_bytes;
    o->max_inflight = opt->max_inflight > 0 ? opt->max_inflight : DEFAULT_INFLIGHT;
    o->base.pwrite_at = s3_pwrite;
    o->base.struct_size = sizeof o->base;
    o->base.finish = s3_finish;
    o->base.abort = s3_abort;
    o->base.destroy = s3_destroy;
    o->base.ctx = o;
    o->name = strndup(url, strcspn(url, "?#"));
    int rc = o->name ? 0 : tzr_fail(TZR_ENOMEM, "out of memory");
    o->base.name = o->name;
    if (!rc) rc = tzr_http_common_new(&o->common, opt);
    if (!rc) rc = tzr_s3_config_resolve(&o->cfg, opt);
    if (!rc) rc = tzr_s3_target_make(&o->tgt, url, &o->cfg);
    if (rc) {
        s3_destroy(&o->base);
        return rc;
    }
    *out = &o->base;
    return 0;
}
