/* SigV4 signer against (1) the AWS signing test suite (tests/data/sigv4,
 * the *-unnormalized and plain cases; the "*-normalized" variants are not
 * copied because S3 does not normalize paths and neither does our signer),
 * (2) the S3 documentation example, (3) vectors from botocore's S3 signers
 * (tests/data/sigv4_botocore.txt, regenerated and compared again when
 * python3 + botocore are present). */
#include "check.h"
#include "http_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DATA "tests/data"

static char *slurp(const char *path) {
    size_t n;
    unsigned char *b = check_read_file(path, &n);
    if (!b) return NULL;
    char *s = realloc(b, n + 1);
    if (!s) {
        free(b);
        return NULL;
    }
    s[n] = 0;
    return s;
}

/* Parse an aws-c-auth request.txt. */
typedef struct req {
    char method[16];
    char *path, *query;
    char *headers[32];
    size_t nh;
    char *body;
    size_t body_len;
} req;

static void req_free(req *r) {
    free(r->path);
    free(r->query);
    for (size_t i = 0; i < r->nh; i++) free(r->headers[i]);
    memset(r, 0, sizeof *r);
}

static int parse_request(const char *text, req *r) {
    memset(r, 0, sizeof *r);
    const char *eol = strchr(text, '\n');
    if (!eol) return -1;
    const char *sp = memchr(text, ' ', (size_t)(eol - text));
    if (!sp || sp - text >= 15) return -1;
    memcpy(r->method, text, (size_t)(sp - text));
    const char *http = NULL;
    for (const char *p = sp; p < eol; p++)
        if (strncmp(p, " HTTP/", 6) == 0) http = p;
    if (!http) return -1;
    const char *uri = sp + 1;
    const char *q = memchr(uri, '?', (size_t)(http - uri));
    const char *pend = q ? q : http;
    r->path = strndup(uri, (size_t)(pend - uri));
    r->query = q ? strndup(q + 1, (size_t)(http - q - 1)) : strdup("");
    const char *p = eol + 1;
    while (*p && *p != '\n') {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if ((*p == ' ' || *p == '\t') && r->nh > 0) {
            /* folded continuation line */
            char *prev = r->headers[r->nh - 1];
            size_t pl = strlen(prev);
            char *n = realloc(prev, pl + l + 2);
            if (!n) return -1;
            n[pl] = ' ';
            memcpy(n + pl + 1, p, l);
            n[pl + 1 + l] = 0;
            r->headers[r->nh - 1] = n;
        } else if (r->nh < 32) {
            r->headers[r->nh++] = strndup(p, l);
        }
        p += l;
        if (*p == '\n') p++;
    }
    if (*p == '\n') p++;
    r->body = (char *)p;
    r->body_len = strlen(p);
    return 0;
}

static int file_eq(const char *dir, const char *name, const char *got) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *want = slurp(path);
    if (!want) {
        fprintf(stderr, "  missing %s\n", path);
        return 0;
    }
    size_t wl = strlen(want);
    while (wl > 0 && want[wl - 1] == '\n') wl--;
    int ok = strlen(got) == wl && memcmp(got, want, wl) == 0;
    if (!ok) fprintf(stderr, "  %s differs:\n--- want\n%.*s\n--- got\n%s\n", path, (int)wl, want, got);
    free(want);
    return ok;
}

static const char *aws_cases[] = {
    "get-header-key-duplicate", "get-header-value-multiline", "get-header-value-order",
    "get-header-value-trim", "get-relative-relative-unnormalized", "get-relative-unnormalized",
    "get-slash-dot-slash-unnormalized", "get-slash-pointless-dot-unnormalized",
    "get-slash-unnormalized", "get-slashes-unnormalized", "get-space-unnormalized",
    "get-unreserved", "get-utf8", "get-vanilla", "get-vanilla-empty-query-key",
    "get-vanilla-query", "get-vanilla-query-order-encoded", "get-vanilla-query-order-key-case",
    "get-vanilla-query-unreserved", "get-vanilla-utf8-query", "get-vanilla-with-session-token",
    "post-header-key-case", "post-header-key-sort", "post-header-value-case",
    "post-sts-header-after", "post-sts-header-before", "post-vanilla",
    "post-vanilla-empty-query-value", "post-vanilla-query", "post-x-www-form-urlencoded",
    "post-x-www-form-urlencoded-parameters", NULL};

static int run_aws_case(const char *name, int *n_checked) {
    char dir[256], path[512];
    snprintf(dir, sizeof dir, DATA "/sigv4/%s", name);
    snprintf(path, sizeof path, "%s/context.json", dir);
    json_error_t jerr;
    json_t *ctx = json_load_file(path, 0, &jerr);
    if (!ctx) {
        fprintf(stderr, "  %s: %s\n", path, jerr.text);
        return 0;
    }
    json_t *cred = json_object_get(ctx, "credentials");
    const char *ak = json_string_value(json_object_get(cred, "access_key_id"));
    const char *sk = json_string_value(json_object_get(cred, "secret_access_key"));
    const char *tok = json_string_value(json_object_get(cred, "token"));
    if (json_is_true(json_object_get(ctx, "omit_session_token"))) tok = NULL;
    const char *ts = json_string_value(json_object_get(ctx, "timestamp"));
    int sign_body = json_is_true(json_object_get(ctx, "sign_body"));
    long expires = (long)json_integer_value(json_object_get(ctx, "expiration_in_seconds"));
    char date[17];
    /* 2015-08-30T12:36:00Z -> 20150830T123600Z */
    snprintf(date, sizeof date, "%.4s%.2s%.2sT%.2s%.2s%.2sZ", ts, ts + 5, ts + 8, ts + 11, ts + 14,
             ts + 17);
    snprintf(path, sizeof path, "%s/request.txt", dir);
    char *text = slurp(path);
    req r;
    int ok = text && parse_request(text, &r) == 0;
    if (!ok) {
        fprintf(stderr, "  %s: cannot parse request\n", name);
        free(text);
        json_decref(ctx);
        return 0;
    }
    char body_hash[65];
    tzr_sha256_hex(r.body, r.body_len, body_hash);
    tzr_sigv4_input in = {
        .method = r.method, .path = r.path, .query = r.query,
        .headers = (const char *const *)r.headers, .n_headers = r.nh,
        .payload_hash = body_hash, .content_sha_header = sign_body, .amz_date = date,
        .region = json_string_value(json_object_get(ctx, "region")),
        .service = json_string_value(json_object_get(ctx, "service")),
        .access_key = ak, .secret_key = sk, .session_token = tok, .expires = expires,
    };
    tzr_sigv4_result res;
    if (tzr_sigv4_sign(&in, &res) != 0) {
        fprintf(stderr, "  %s: sign failed: %s\n", name, tzr_last_error());
        ok = 0;
    } else {
        ok &= file_eq(dir, "header-canonical-request.txt", res.canonical_request);
        ok &= file_eq(dir, "header-string-to-sign.txt", res.string_to_sign);
        ok &= file_eq(dir, "header-signature.txt", res.signature);
        tzr_sigv4_result_free(&res);
        (*n_checked)++;
    }
    /* Query signing: the suite's presigned form never signs the body. */
    in.content_sha_header = 0;
    if (tzr_sigv4_presign(&in, &res) != 0) {
        fprintf(stderr, "  %s: presign failed: %s\n", name, tzr_last_error());
        ok = 0;
    } else {
        ok &= file_eq(dir, "query-canonical-request.txt", res.canonical_request);
        ok &= file_eq(dir, "query-string-to-sign.txt", res.string_to_sign);
        ok &= file_eq(dir, "query-signature.txt", res.signature);
        tzr_sigv4_result_free(&res);
        (*n_checked)++;
    }
    req_free(&r);
    free(text);
    json_decref(ctx);
    if (!ok) fprintf(stderr, "  case %s failed\n", name);
    return ok;
}

static void aws_test_suite(void) {
    int n = 0, bad = 0;
    for (int i = 0; aws_cases[i]; i++)
        if (!run_aws_case(aws_cases[i], &n)) bad++;
    CHECK(bad == 0);
    CHECK(n == 2 * 31);
}

/* The S3 documentation's own example (GET /test.txt, Range bytes=0-9). */
static void s3_doc_example(void) {
    const char *h[] = {"Host:examplebucket.s3.amazonaws.com", "Range:bytes=0-9"};
    tzr_sigv4_input in = {
        .method = "GET", .path = "/test.txt", .headers = h, .n_headers = 2,
        .content_sha_header = 1, .amz_date = "20130524T000000Z", .region = "us-east-1",
        .service = "s3", .access_key = "AKIAIOSFODNN7EXAMPLE",
        .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    };
    tzr_sigv4_result res;
    CHECK_OK(tzr_sigv4_sign(&in, &res));
    CHECK(strcmp(res.signature,
                 "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41") == 0);
    CHECK(strstr(res.authorization, "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date") !=
          NULL);
    /* The secret never appears in anything we send. */
    CHECK(strstr(res.authorization, "wJalr") == NULL);
    for (int i = 0; res.extra_headers[i]; i++) CHECK(strstr(res.extra_headers[i], "wJalr") == NULL);
    tzr_sigv4_result_free(&res);
}

static void encode_rules(void) {
    char *e = tzr_uri_encode("a b/c+d~e_f.g-h\xc3\xa9*", 18, 1);
    CHECK(e && strcmp(e, "a%20b/c%2Bd~e_f.g-h%C3%A9%2A") == 0);
    free(e);
    e = tzr_uri_encode("x/y=", 4, 0);
    CHECK(e && strcmp(e, "x%2Fy%3D") == 0);
    free(e);
    char d[17];
    tzr_amz_date(0, d);
    CHECK(strcmp(d, "19700101T000000Z") == 0);
}

static int hexdec(const char *hex, char **out) {
    size_t n;
    unsigned char *b = check_unhex(hex, &n);
    if (!b && *hex) return -1;
    char *s = malloc(n + 1);
    if (!s) {
        free(b);
        return -1;
    }
    if (n) memcpy(s, b, n);
    s[n] = 0;
    free(b);
    *out = s;
    return 0;
}

/* Compare every case of a botocore vector file; returns cases checked or -1. */
static int botocore_file(const char *path, int *bad) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[8192];
    int n = 0;
    char mode[16] = "", method[16] = "", name[128] = "", payload[80] = "", date[17] = "",
         region[64] = "", ak[128] = "", sk[128] = "", token[256] = "", sig[65] = "";
    char *pathv = NULL, *query = NULL, *creq = NULL, *hdrs[16];
    size_t nh = 0;
    long expires = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *sp = strchr(line, ' ');
        if (!sp) sp = line + strlen(line);
        char *v = *sp ? sp + 1 : sp;
        *sp = 0;
#define CP(field) snprintf(field, sizeof field, "%s", v)
        if (!strcmp(line, "case")) CP(name);
        else if (!strcmp(line, "mode")) CP(mode);
        else if (!strcmp(line, "method")) CP(method);
        else if (!strcmp(line, "path_hex")) hexdec(v, &pathv);
        else if (!strcmp(line, "query")) query = strdup(strcmp(v, "-") ? v : "");
        else if (!strcmp(line, "header") && nh < 16) hdrs[nh++] = strdup(v);
        else if (!strcmp(line, "payload")) CP(payload);
        else if (!strcmp(line, "date")) CP(date);
        else if (!strcmp(line, "region")) CP(region);
        else if (!strcmp(line, "access_key")) CP(ak);
        else if (!strcmp(line, "secret_key")) CP(sk);
        else if (!strcmp(line, "token")) CP(token);
        else if (!strcmp(line, "expires")) expires = atol(v);
        else if (!strcmp(line, "creq_hex")) hexdec(v, &creq);
        else if (!strcmp(line, "signature")) CP(sig);
        else if (!strcmp(line, "end")) {
            tzr_sigv4_input in = {
                .method = method, .path = pathv, .query = query,
                .headers = (const char *const *)hdrs, .n_headers = nh, .payload_hash = payload,
                .content_sha_header = 1, .amz_date = date, .region = region, .service = "s3",
                .access_key = ak, .secret_key = sk,
                .session_token = strcmp(token, "-") ? token : NULL, .expires = expires,
            };
            tzr_sigv4_result res;
            int rc = strcmp(mode, "query") == 0 ? tzr_sigv4_presign(&in, &res)
                                                : tzr_sigv4_sign(&in, &res);
            if (rc || !creq || strcmp(res.canonical_request, creq) || strcmp(res.signature, sig)) {
                fprintf(stderr, "  botocore case %s differs (rc %d)\n--- want\n%s\n%s\n--- got\n%s\n%s\n",
                        name, rc, creq ? creq : "?", sig, rc ? "" : res.canonical_request,
                        rc ? "" : res.signature);
                (*bad)++;
            }
            if (!rc) tzr_sigv4_result_free(&res);
            n++;
            free(pathv);
            free(query);
            free(creq);
            pathv = query = creq = NULL;
            for (size_t i = 0; i < nh; i++) free(hdrs[i]);
            nh = 0;
        }
#undef CP
    }
    fclose(f);
    return n;
}

static void botocore_committed(void) {
    int bad = 0;
    int n = botocore_file(DATA "/sigv4_botocore.txt", &bad);
    CHECK(n >= 13);
    CHECK(bad == 0);
}

static void botocore_live(void) {
    if (system("python3 -c 'import botocore' >/dev/null 2>&1") != 0) {
        check_skip("python3 with botocore not available");
        return;
    }
    char out[512], cmd[1024];
    snprintf(out, sizeof out, "%s/botocore_live.txt", check_tmpdir());
    snprintf(cmd, sizeof cmd, "python3 " DATA "/gen_botocore_vectors.py > '%s'", out);
    CHECK(system(cmd) == 0);
    int bad = 0;
    int n = botocore_file(out, &bad);
    CHECK(n >= 13);
    CHECK(bad == 0);
}

int main(void) {
    /* Run from the repository root (tests/run.sh does). */
    if (access(DATA "/sigv4", F_OK) != 0 && chdir("..") != 0) return 2;
    RUN(encode_rules);
    RUN(s3_doc_example);
    RUN(aws_test_suite);
    RUN(botocore_committed);
    RUN(botocore_live);
    return check_done();
}
