/* AWS Signature Version 4 (header and query/presigned forms) with OpenSSL's
 * HMAC-SHA256 and SHA-256. Written for S3: the path is encoded once and
 * never normalized (S3 keys may contain "//", "." and ".." segments). */
#include "http_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

/* ------------------------------------------------------------ buffers */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_putc(sbuf *b, char c) { sb_add(b, &c, 1); }
static char *sb_take(sbuf *b) {
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    if (!b->p) return strdup("");
    return b->p;
}

static const char hexd[] = "0123456789abcdef";
static void to_hex(const unsigned char *d, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexd[d[i] >> 4];
        out[2 * i + 1] = hexd[d[i] & 15];
    }
    out[2 * n] = 0;
}

void tzr_sha256_hex(const void *data, size_t len, char out[65]) {
    unsigned char md[32];
    SHA256(data, len, md);
    to_hex(md, 32, out);
}

static void hmac(const void *key, size_t klen, const char *msg, unsigned char out[32]) {
    unsigned int olen = 32;
    HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &olen);
}

void tzr_amz_date(time_t t, char buf[17]) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, 17, "%Y%m%dT%H%M%SZ", &tm);
}

static int unreserved(unsigned char c) {
    return isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

static void sb_encode(sbuf *b, const char *s, size_t len, int keep_slash) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c) || (keep_slash && c == '/')) {
            sb_putc(b, (char)c);
        } else {
            char e[3] = {'%', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]};
            sb_add(b, e, 3);
        }
    }
}

char *tzr_uri_encode(const char *s, size_t len, int keep_slash) {
    sbuf b = {0};
    sb_encode(&b, s, len, keep_slash);
    return sb_take(&b);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode %XX (only valid escapes; others stay literal). */
static char *pct_decode(const char *s, size_t len, size_t *olen) {
    char *o = malloc(len + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            o[j++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            o[j++] = s[i];
        }
    }
    o[j] = 0;
    *olen = j;
    return o;
}

/* ------------------------------------------------------------ pieces */
typedef struct kv {
    char *k, *v; /* encoded (query) or lower-case name / normalized value (header) */
    size_t order;
} kv;

static int kv_cmp(const void *a, const void *b) {
    const kv *x = a, *y = b;
    int c = strcmp(x->k, y->k);
    if (c) return c;
    c = strcmp(x->v, y->v);
    if (c) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}
static int kv_cmp_name_stable(const void *a, const void *b) {
    const kv *x = a, *y = b;
    int c = strcmp(x->k, y->k);
    if (c) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void kv_free(kv *a, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(a[i].k);
        free(a[i].v);
    }
    free(a);
}

/* Split a query string into encoded pairs. extra (NULL-ended pairs of raw
 * name, raw value) are appended. */
static int query_pairs(const char *q, const char *const *extra, kv **out, size_t *n_out) {
    size_t cap = 8, n = 0;
    kv *a = calloc(cap, sizeof *a);
    if (!a) return TZR_ENOMEM;
    const char *p = q ? q : "";
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t seg = amp ? (size_t)(amp - p) : strlen(p);
        if (seg > 0) {
            const char *eq = memchr(p, '=', seg);
            size_t kl = eq ? (size_t)(eq - p) : seg;
            size_t dk, dv;
            char *k = pct_decode(p, kl, &dk);
            char *v = eq ? pct_decode(eq + 1, seg - kl - 1, &dv) : (dv = 0, strdup(""));
            if (n == cap) {
                kv *na = realloc(a, 2 * cap * sizeof *a);
                if (!na) {
                    free(k);
                    free(v);
                    kv_free(a, n);
                    return TZR_ENOMEM;
                }
                a = na;
                cap *= 2;
            }
            a[n].k = k ? tzr_uri_encode(k, dk, 0) : NULL;
            a[n].v = v ? tzr_uri_encode(v, dv, 0) : NULL;
            a[n].order = n;
            free(k);
            free(v);
            if (!a[n].k || !a[n].v) {
                kv_free(a, n + 1);
                return TZR_ENOMEM;
            }
            n++;
        }
        p += seg;
        if (*p == '&') p++;
    }
    for (size_t i = 0; extra && extra[i]; i += 2) {
        if (n == cap) {
            kv *na = realloc(a, 2 * cap * sizeof *a);
            if (!na) {
                kv_free(a, n);
                return TZR_ENOMEM;
            }
            a = na;
            cap *= 2;
        }
        a[n].k = tzr_uri_encode(extra[i], strlen(extra[i]), 0);
        a[n].v = tzr_uri_encode(extra[i + 1], strlen(extra[i + 1]), 0);
        a[n].order = n;
        if (!a[n].k || !a[n].v) {
            kv_free(a, n + 1);
            return TZR_ENOMEM;
        }
        n++;
    }
    qsort(a, n, sizeof *a, kv_cmp);
    *out = a;
    *n_out = n;
    return 0;
}

/* Header "Name:value" -> lower-case name, trimmed value with runs of
 * whitespace (including folded line breaks) collapsed to one space. */
static int header_pair(const char *h, kv *out, size_t order) {
    const char *colon = strchr(h, ':');
    if (!colon) return TZR_EINVAL;
    size_t nl = (size_t)(colon - h);
    while (nl > 0 && isspace((unsigned char)h[nl - 1])) nl--;
    out->k = malloc(nl + 1);
    const char *v = colon + 1;
    size_t vl = strlen(v);
    out->v = malloc(vl + 1);
    out->order = order;
    if (!out->k || !out->v) return TZR_ENOMEM;
    for (size_t i = 0; i < nl; i++) out->k[i] = (char)tolower((unsigned char)h[i]);
    out->k[nl] = 0;
    size_t j = 0;
    int space = 0;
    for (size_t i = 0; i < vl; i++) {
        unsigned char c = (unsigned char)v[i];
        if (isspace(c)) {
            space = 1;
            continue;
        }
        if (space && j > 0) out->v[j++] = ' ';
        space = 0;
        out->v[j++] = (char)c;
    }
    out->v[j] = 0;
    return 0;
}

typedef struct signed_hdrs {
    char *canon;  /* "name:value\n..." */
    char *names;  /* "a;b;c" */
} signed_hdrs;

static int canonical_headers(const tzr_sigv4_input *in, const char *const *extra,
                             signed_hdrs *sh) {
    size_t n_extra = 0;
    while (extra && extra[n_extra]) n_extra++;
    size_t n = in->n_headers + n_extra;
    kv *a = calloc(n ? n : 1, sizeof *a);
    if (!a) return TZR_ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = header_pair(i < in->n_headers ? in->headers[i] : extra[i - in->n_headers], &a[i], i);
    if (rc) {
        kv_free(a, n);
        return rc;
    }
    qsort(a, n, sizeof *a, kv_cmp_name_stable);
    sbuf c = {0}, names = {0};
    for (size_t i = 0; i < n;) {
        size_t j = i;
        sb_puts(&c, a[i].k);
        sb_putc(&c, ':');
        if (names.len) sb_putc(&names, ';');
        sb_puts(&names, a[i].k);
        for (; j < n && strcmp(a[j].k, a[i].k) == 0; j++) {
            if (j > i) sb_putc(&c, ',');
            sb_puts(&c, a[j].v);
        }
        sb_putc(&c, '\n');
        i = j;
    }
    kv_free(a, n);
    sh->canon = sb_take(&c);
    sh->names = sb_take(&names);
    if (!sh->canon || !sh->names) {
        free(sh->canon);
        free(sh->names);
        return TZR_ENOMEM;
    }
    return 0;
}

static void signing_key(const tzr_sigv4_input *in, const char *day, unsigned char key[32]) {
    size_t sl = strlen(in->secret_key);
    char *k0 = malloc(sl + 5);
    if (!k0) {
        memset(key, 0, 32);
        return;
    }
    memcpy(k0, "AWS4", 4);
    memcpy(k0 + 4, in->secret_key, sl + 1);
    unsigned char a[32], b[32];
    hmac(k0, sl + 4, day, a);
    OPENSSL_cleanse(k0, sl + 4);
    free(k0);
    hmac(a, 32, in->region, b);
    hmac(b, 32, in->service, a);
    hmac(a, 32, "aws4_request", key);
    OPENSSL_cleanse(a, 32);
    OPENSSL_cleanse(b, 32);
}

static int check_input(const tzr_sigv4_input *in) {
    if (!in || !in->method || !in->path || !in->amz_date || strlen(in->amz_date) != 16 ||
        !in->region || !in->service || !in->access_key || !in->secret_key)
        return tzr_fail(TZR_EINVAL, "sigv4: incomplete request description");
    return 0;
}

static const char EMPTY_SHA[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/* Common core: builds canonical request from method, path, canonical query
 * string, headers; then string to sign and signature. */
static int finish_sig(const tzr_sigv4_input *in, const char *cquery, const signed_hdrs *sh,
                      const char *payload, const char *scope, tzr_sigv4_result *out) {
    sbuf cr = {0};
    sb_puts(&cr, in->method);
    sb_putc(&cr, '\n');
    sb_puts(&cr, out->path);
    sb_putc(&cr, '\n');
    sb_puts(&cr, cquery);
    sb_putc(&cr, '\n');
    sb_puts(&cr, sh->canon);
    sb_putc(&cr, '\n');
    sb_puts(&cr, sh->names);
    sb_putc(&cr, '\n');
    sb_puts(&cr, payload);
    out->canonical_request = sb_take(&cr);
    if (!out->canonical_request) return tzr_fail(TZR_ENOMEM, "out of memory");
    char crh[65];
    tzr_sha256_hex(out->canonical_request, strlen(out->canonical_request), crh);
    sbuf sts = {0};
    sb_puts(&sts, "AWS4-HMAC-SHA256\n");
    sb_puts(&sts, in->amz_date);
    sb_putc(&sts, '\n');
    sb_puts(&sts, scope);
    sb_putc(&sts, '\n');
    sb_puts(&sts, crh);
    out->string_to_sign = sb_take(&sts);
    if (!out->string_to_sign) return tzr_fail(TZR_ENOMEM, "out of memory");
    char day[9];
    memcpy(day, in->amz_date, 8);
    day[8] = 0;
    unsigned char key[32], sig[32];
    signing_key(in, day, key);
    hmac(key, 32, out->string_to_sign, sig);
    OPENSSL_cleanse(key, 32);
    to_hex(sig, 32, out->signature);
    return 0;
}

static int make_scope(const tzr_sigv4_input *in, char **scope) {
    sbuf s = {0};
    sb_add(&s, in->amz_date, 8);
    sb_putc(&s, '/');
    sb_puts(&s, in->region);
    sb_putc(&s, '/');
    sb_puts(&s, in->service);
    sb_puts(&s, "/aws4_request");
    *scope = sb_take(&s);
    return *scope ? 0 : TZR_ENOMEM;
}

static char *join_pairs(const kv *a, size_t n) {
    sbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (i) sb_putc(&b, '&');
        sb_puts(&b, a[i].k);
        sb_putc(&b, '=');
        sb_puts(&b, a[i].v);
    }
    return sb_take(&b);
}

int tzr_sigv4_sign(const tzr_sigv4_input *in, tzr_sigv4_result *out) {
    memset(out, 0, sizeof *out);
    int rc = check_input(in);
    if (rc) return rc;
    const char *payload = in->payload_hash ? in->payload_hash : EMPTY_SHA;
    char *scope = NULL, *cq = NULL;
    kv *q = NULL;
    size_t nq = 0;
    signed_hdrs sh = {0};
    sbuf xd = {0}, xs = {0}, xt = {0};
    sb_puts(&xd, "x-amz-date:");
    sb_puts(&xd, in->amz_date);
    const char *extra[4];
    int ne = 0;
    extra[ne++] = xd.p;
    if (in->content_sha_header) {
        sb_puts(&xs, "x-amz-content-sha256:");
        sb_puts(&xs, payload);
        extra[ne++] = xs.p;
    }
    if (in->session_token && *in->session_token) {
        sb_puts(&xt, "x-amz-security-token:");
        sb_puts(&xt, in->session_token);
        extra[ne++] = xt.p;
    }
    extra[ne] = NULL;
    if (xd.oom || xs.oom || xt.oom) {
        rc = TZR_ENOMEM;
        goto done;
    }
    out->path = tzr_uri_encode(in->path, strlen(in->path), 1);
    if (!out->path || make_scope(in, &scope) || (rc = query_pairs(in->query, NULL, &q, &nq)) ||
        !(cq = join_pairs(q, nq)) || (rc = canonical_headers(in, extra, &sh))) {
        if (!rc) rc = TZR_ENOMEM;
        goto done;
    }
    if ((rc = finish_sig(in, cq, &sh, payload, scope, out))) goto done;
    sbuf a = {0};
    sb_puts(&a, "AWS4-HMAC-SHA256 Credential=");
    sb_puts(&a, in->access_key);
    sb_putc(&a, '/');
    sb_puts(&a, scope);
    sb_puts(&a, ", SignedHeaders=");
    sb_puts(&a, sh.names);
    sb_puts(&a, ", Signature=");
    sb_puts(&a, out->signature);
    out->authorization = sb_take(&a);
    if (!out->authorization) rc = TZR_ENOMEM;
    for (int i = 0; i < ne && !rc; i++) {
        out->extra_headers[i] = strdup(extra[i]);
        if (!out->extra_headers[i]) rc = TZR_ENOMEM;
    }
    out->query = cq;
    cq = NULL;
done:
    free(xd.p);
    free(xs.p);
    free(xt.p);
    free(scope);
    free(cq);
    kv_free(q, nq);
    free(sh.canon);
    free(sh.names);
    if (rc) {
        tzr_sigv4_result_free(out);
        if (rc == TZR_ENOMEM) return tzr_fail(TZR_ENOMEM, "out of memory");
        return rc;
    }
    return 0;
}

int tzr_sigv4_presign(const tzr_sigv4_input *in, tzr_sigv4_result *out) {
    memset(out, 0, sizeof *out);
    int rc = check_input(in);
    if (rc) return rc;
    const char *payload = in->payload_hash ? in->payload_hash : EMPTY_SHA;
    char *scope = NULL, *cq = NULL, *cred = NULL;
    kv *q = NULL;
    size_t nq = 0;
    signed_hdrs sh = {0};
    char expires[32];
    snprintf(expires, sizeof expires, "%ld", in->expires > 0 ? in->expires : 3600);
    out->path = tzr_uri_encode(in->path, strlen(in->path), 1);
    if (!out->path || make_scope(in, &scope) || (rc = canonical_headers(in, NULL, &sh))) {
        if (!rc) rc = TZR_ENOMEM;
        goto done;
    }
    sbuf c = {0};
    sb_puts(&c, in->access_key);
    sb_putc(&c, '/');
    sb_puts(&c, scope);
    cred = sb_take(&c);
    if (!cred) {
        rc = TZR_ENOMEM;
        goto done;
    }
    const char *extra[16];
    int ne = 0;
    extra[ne++] = "X-Amz-Algorithm";
    extra[ne++] = "AWS4-HMAC-SHA256";
    extra[ne++] = "X-Amz-Credential";
    extra[ne++] = cred;
    extra[ne++] = "X-Amz-Date";
    extra[ne++] = in->amz_date;
    extra[ne++] = "X-Amz-Expires";
    extra[ne++] = expires;
    if (in->session_token && *in->session_token) {
        extra[ne++] = "X-Amz-Security-Token";
        extra[ne++] = in->session_token;
    }
    extra[ne++] = "X-Amz-SignedHeaders";
    extra[ne++] = sh.names;
    extra[ne] = NULL;
    if ((rc = query_pairs(in->query, extra, &q, &nq)) || !(cq = join_pairs(q, nq))) {
        if (!rc) rc = TZR_ENOMEM;
        goto done;
    }
    if ((rc = finish_sig(in, cq, &sh, payload, scope, out))) goto done;
    sbuf fq = {0};
    sb_puts(&fq, cq);
    sb_puts(&fq, "&X-Amz-Signature=");
    sb_puts(&fq, out->signature);
    out->query = sb_take(&fq);
    if (!out->query) rc = TZR_ENOMEM;
done:
    free(scope);
    free(cq);
    free(cred);
    kv_free(q, nq);
    free(sh.canon);
    free(sh.names);
    if (rc) {
        tzr_sigv4_result_free(out);
        if (rc == TZR_ENOMEM) return tzr_fail(TZR_ENOMEM, "out of memory");
        return rc;
    }
    return 0;
}

void tzr_sigv4_result_free(tzr_sigv4_result *r) {
    if (!r) return;
    free(r->canonical_request);
    free(r->string_to_sign);
    free(r->authorization);
    for (int i = 0; i < 3; i++) free(r->extra_headers[i]);
    free(r->query);
    free(r->path);
    memset(r, 0, sizeof *r);
}
