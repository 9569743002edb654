/* Internal pieces of the HTTP(S)/S3 layer: the SigV4 signer (sigv4.c), the
 * credential/endpoint chain (s3_config.c), the ranged-GET source
 * (http_source.c) and the multipart output (s3_output.c). */
#ifndef TZR_HTTP_INTERNAL_H
#define TZR_HTTP_INTERNAL_H

#include "internal.h"
#include "tzr_http.h"

#include <stddef.h>
#include <time.h>

/* ---------------------------------------------------------------- SigV4 */
/* One request to sign. headers are "Name:value" strings (the Host header
 * must be among them); the signer lower-cases names, trims values, folds
 * runs of spaces and joins repeated names with ','. The path is the raw
 * (decoded) path: every byte but unreserved characters and '/' is
 * percent-encoded exactly once. S3 does NOT normalize paths ("//", "/./",
 * "/.." are signed and sent as given), so neither does this signer. The
 * query string may be raw or percent-encoded; each name/value is decoded
 * and re-encoded with the strict SigV4 rules, then sorted. */
typedef struct tzr_sigv4_input {
    const char *method;
    const char *path;
    const char *query;          /* without '?', NULL or "" for none */
    const char *const *headers;
    size_t n_headers;
    const char *payload_hash;   /* hex SHA-256, "UNSIGNED-PAYLOAD"; NULL: empty body */
    int content_sha_header;     /* header mode: add x-amz-content-sha256 (S3: 1) */
    const char *amz_date;       /* "YYYYMMDDTHHMMSSZ" */
    const char *region;
    const char *service;
    const char *access_key;
    const char *secret_key;
    const char *session_token;  /* NULL: none */
    long expires;               /* presign: X-Amz-Expires seconds */
} tzr_sigv4_input;

typedef struct tzr_sigv4_result {
    char *canonical_request;
    char *string_to_sign;
    char signature[65];
    char *authorization;  /* header mode: the Authorization header value */
    char *extra_headers[3]; /* header mode: "x-amz-date: ..." etc. to send; NULL-ended */
    char *query;          /* presign: the full query string to send (incl. signature) */
    char *path;           /* the encoded path, as sent on the request line */
} tzr_sigv4_result;

/* Header signing (Authorization header). */
TZR_HIDDEN int tzr_sigv4_sign(const tzr_sigv4_input *in, tzr_sigv4_result *out);
/* Query signing (presigned URL). */
TZR_HIDDEN int tzr_sigv4_presign(const tzr_sigv4_input *in, tzr_sigv4_result *out);
TZR_HIDDEN void tzr_sigv4_result_free(tzr_sigv4_result *r);
/* "YYYYMMDDTHHMMSSZ" for t (UTC). */
TZR_HIDDEN void tzr_amz_date(time_t t, char buf[17]);
TZR_HIDDEN void tzr_sha256_hex(const void *data, size_t len, char out[65]);
/* Strict SigV4 percent-encoding (A-Z a-z 0-9 - _ . ~ kept; '/' kept when
 * keep_slash). malloc'd, NULL on ENOMEM. */
TZR_HIDDEN char *tzr_uri_encode(const char *s, size_t len, int keep_slash);

/* ---------------------------------------------------------------- config */
typedef struct tzr_s3_config {
    char *access_key, *secret_key, *session_token;
    char *region;
    char *endpoint;      /* "scheme://host[:port]" (no trailing '/'); NULL: AWS */
    int anonymous;
    int path_style;      /* 1: scheme://host/bucket/key; 0: scheme://bucket.host/key */
    const char *cred_source; /* "options", "env", "shared credentials file", ... */
} tzr_s3_config;

/* Resolve credentials, region and endpoint: explicit options, environment,
 * ~/.aws/credentials + ~/.aws/config (AWS_PROFILE), tensorizer's ~/.s3cfg.
 * opt may be NULL. No credentials at all means anonymous requests. */
TZR_HIDDEN int tzr_s3_config_resolve(tzr_s3_config *cfg, const tzr_http_options *opt);
TZR_HIDDEN void tzr_s3_config_free(tzr_s3_config *cfg);

/* A parsed s3:// URL turned into an HTTP URL. */
typedef struct tzr_s3_target {
    char *bucket, *key;
    char *url_base;  /* "scheme://host[:port]" actually contacted */
    char *host;      /* Host header value ("host[:port]") */
    char *path;      /* raw (decoded) path: "/bucket/key" or "/key" */
} tzr_s3_target;
TZR_HIDDEN int tzr_s3_target_make(tzr_s3_target *t, const char *s3url, const tzr_s3_config *cfg);
TZR_HIDDEN void tzr_s3_target_free(tzr_s3_target *t);

/* Build a signed request's header list (curl_slist of "Name: value") and
 * the full URL. query may be NULL. payload_hash NULL: UNSIGNED-PAYLOAD.
 * Anonymous configs produce unsigned requests. Returns 0 or TZR_E*. */
struct curl_slist;
TZR_HIDDEN int tzr_s3_sign_request(const tzr_s3_config *cfg, const tzr_s3_target *t,
                                   const char *method, const char *query,
                                   const char *payload_hash, struct curl_slist **headers,
                                   char **url);
/* Current time used for signing; tests may shift it with TZR_S3_CLOCK_SKEW
 * (seconds, to test the server's RequestTimeTooSkewed answer). */
TZR_HIDDEN time_t tzr_s3_now(void);

/* The text between <tag> and the next </tag> in [p, end): its start and
 * *len, or NULL. S3's answers are flat enough for this (no attributes on
 * the tags read). */
TZR_HIDDEN const char *tzr_xml_find(const char *p, const char *end, const char *tag, size_t *len);
/* Copy of the <Code>..</Code> and <Message>..</Message> of an S3 XML error
 * body into buf ("" if none). */
TZR_HIDDEN void tzr_s3_error_text(const char *body, size_t len, char *buf, size_t cap);

/* ---------------------------------------------------------------- common */
/* Shared per-source/per-output HTTP state: a CURLSH (connection, DNS and
 * TLS session cache shared by every easy handle, locked for threads), a
 * pool of easy handles and the options. */
typedef struct tzr_http_common tzr_http_common;

TZR_HIDDEN int tzr_http_common_new(tzr_http_common **out, const tzr_http_options *opt);
TZR_HIDDEN void tzr_http_common_free(tzr_http_common *c);
TZR_HIDDEN const tzr_http_options *tzr_http_common_opts(const tzr_http_common *c);
/* Take/return an easy handle (reset, with the shared cache attached). */
TZR_HIDDEN void *tzr_http_easy_get(tzr_http_common *c);
TZR_HIDDEN void tzr_http_easy_put(tzr_http_common *c, void *easy);
/* Options every request gets: share, TLS (CA bundle from the options, else
 * $AWS_CA_BUNDLE, else the system's), connect/stall timeouts, an
 * overall timeout of remaining_s, at most TZR_HTTP_MAX_REDIRS redirects,
 * no signals, no compression. */
TZR_HIDDEN void tzr_http_easy_common(tzr_http_common *c, void *easy, double remaining_s);
TZR_HIDDEN double tzr_now_s(void);
/* Delay before retry number attempt (1-based): exponential, full jitter. */
TZR_HIDDEN double tzr_http_backoff_s(int attempt);
/* Seconds a Retry-After value asks for: delta-seconds or an HTTP-date
 * (RFC 9110 10.2.3); -1 when unparseable. */
TZR_HIDDEN double tzr_http_retry_after_parse(const char *v);
/* Delay before retry number attempt after an answer with this status and
 * Retry-After (-1: none): the backoff, raised to Retry-After on 429/503
 * (then *asked = 1: the server set the wait, not us). */
TZR_HIDDEN double tzr_http_retry_delay_s(int attempt, long status, double retry_after, int *asked);
/* A hint to append to a curl failure message ("" when none): names the CA
 * bundle settings when a certificate did not verify. */
TZR_HIDDEN const char *tzr_http_curl_hint(int curlcode);
TZR_HIDDEN int tzr_http_status_retryable(long status);
TZR_HIDDEN int tzr_http_curl_retryable(int curlcode);
/* The largest answer body a call reads (a ListObjectsV2 page of 1000
 * long keys, a Complete answer padded with keep-alive blanks): read whole
 * up to this, refused past it, never cut silently. */
#define TZR_HTTP_MAX_ANSWER (64u << 20)
/* Redirects followed per request; more is reported as a redirect loop. */
#define TZR_HTTP_MAX_REDIRS 10
/* Attempts at a request the server never answers (stall timeout before
 * any response byte): a server that accepts and stays silent fails after
 * this many stall timeouts, not after every retry of the budget. */
#define TZR_HTTP_NOANSWER_TRIES 3
/* 1 if a Content-Encoding value is other than identity (the body would
 * not be the object's bytes). */
TZR_HIDDEN int tzr_http_encoded(const char *content_encoding);

/* One blocking request with retries (429/5xx/transport errors, re-signed
 * every attempt, waiting at least a 429/503's Retry-After) until
 * max_retries or the deadline. Returns 0 when a final
 * answer arrived (any HTTP status, see call->status), TZR_ENET when the
 * transport kept failing, TZR_EHTTP when retryable statuses persisted. */
typedef struct tzr_http_call {
    const char *method;                 /* GET HEAD PUT POST DELETE */
    const tzr_s3_config *cfg;           /* S3: sign with cfg for tgt */
    const tzr_s3_target *tgt;
    const char *query;                  /* S3 query, canonical-encoded */
    const char *url;                    /* plain http(s) when tgt == NULL */
    const char *const *headers;         /* extra "Name: value" */
    size_t n_headers;
    const void *body;                   /* PUT/POST body */
    size_t body_len;
    int sign_body;                      /* S3: hash the body (else UNSIGNED-PAYLOAD) */
    double deadline;                    /* tzr_now_s() based */
    int max_retries;
    const char *what;                   /* for messages: "s3://b/k" */
    /* results */
    long status;
    char etag[256];
    char content_range[128];
    char location[512];
    long long content_length;           /* -1 unknown */
    double retry_after;                 /* Retry-After seconds, -1 none */
    char *resp;                         /* body, NUL-ended; over TZR_HTTP_MAX_ANSWER fails */
    size_t resp_len, resp_cap;
    int too_big;                        /* the answer went past TZR_HTTP_MAX_ANSWER */
    int attempts;
    char last_modified[64];
    char content_encoding[64];
} tzr_http_call;
TZR_HIDDEN int tzr_http_perform(tzr_http_common *c, tzr_http_call *call);
TZR_HIDDEN void tzr_http_call_reset(tzr_http_call *call); /* frees resp */
/* Error for a final non-2xx status: 404 -> TZR_ENOTFOUND, 412 ->
 * TZR_ECHANGED, else TZR_EHTTP, with S3's Code/Message when present. */
TZR_HIDDEN int tzr_http_status_error(const tzr_http_call *call, const tzr_s3_config *cfg);

/* The s3:// URLs of the objects directly under prefix_url (which ends in
 * '/') whose names end in suffix, in the listing's (byte) order: the s3
 * row's listing in the scheme table. opt may be NULL. The caller frees
 * each URL and the array. */
TZR_HIDDEN int tzr_s3_list(const char *prefix_url, const char *suffix, const tzr_http_options *opt, char ***urls,
                           size_t *n);
/* One ListObjectsV2 answer (body NUL-ended at len): appends
 * "s3://bucket/KEY" for each key that starts with the prefix_len bytes of
 * prefix and ends in suffix, with no '/' after the prefix, to *urls (*n of
 * *cap used); *more and *token
 * (percent-encoded, malloc'd) say whether and how to ask for the next page.
 * what names the listing in messages. */
TZR_HIDDEN int tzr_s3_list_page(const char *body, size_t len, const char *what, const char *bucket,
                                const char *prefix, size_t prefix_len,
                                const char *suffix, char ***urls, size_t *n, size_t *cap, int *more, char **token);

/* A header value without surrounding blanks and line end, cut to cap. */
TZR_HIDDEN void tzr_http_copy_hval(char *dst, size_t cap, const char *v, size_t n);
#endif
