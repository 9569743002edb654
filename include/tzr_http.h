/* libtzr HTTP(S)/S3 layer: a positional tzr_source over ranged GETs and an
 * atomic S3 multipart tzr_output. Include after (or instead of) tzr.h; this
 * header includes only standard C headers.
 *
 * Every open that takes a path takes these options per call too
 * (tzr_reader_options.http, tzr_writer_options.http,
 * tzr_shard_open_options.http, tzr_comm_load_options.http): two loads in
 * one process may use two endpoints and two sets of credentials.
 *
 * URLs: http://host/path, https://host/path (plain ranged GETs, no signing)
 * and s3://bucket/key (SigV4-signed; credentials, region and endpoint from
 * the options, else the environment, ~/.aws/credentials, ~/.aws/config,
 * tensorizer's ~/.s3cfg; no credentials at all means anonymous requests).
 *
 * S3 addressing: path-style (endpoint/bucket/key) for any custom endpoint
 * (an IP, localhost or any explicitly configured endpoint URL),
 * virtual-hosted (bucket.s3.REGION.amazonaws.com/key) for AWS itself.
 *
 * Clock: SigV4 requests carry the local time; S3 rejects requests more than
 * 15 minutes off the server's clock (HTTP 403 RequestTimeTooSkewed). That
 * answer is reported as TZR_EHTTP with a message naming the skew.
 */
#ifndef TZR_HTTP_H
#define TZR_HTTP_H

#include <stddef.h>

#include "tzr.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tzr_http_options {
    size_t struct_size;
    /* S3 credentials/endpoint; NULL = resolve from env/config files. */
    const char *access_key;
    const char *secret_key;
    const char *session_token;
    const char *region;        /* default us-east-1 */
    const char *endpoint;      /* "http://127.0.0.1:8080", "https://s3.example" */
    int anonymous;             /* 1: never sign (public buckets) */
    const char *ca_bundle;     /* PEM file of trusted CAs; NULL: $AWS_CA_BUNDLE, else system */
    int insecure;              /* 1: do not verify TLS certificates */
    size_t range_bytes;        /* bytes per ranged GET (0: 16 MiB) */
    int max_inflight;          /* concurrent GETs per read_at (0: 16); S3
                                  output: parts uploading at once (0: 8) */
    double total_timeout_s;    /* budget for one read_at incl. retries (0: 300) */
    int max_retries;           /* per range (0: 8; -1: none) */
    /* Added later; struct_size tells which fields a caller's struct has.
     * Stall: a request whose server sends nothing for this long (no answer
     * at all, or a body slower than 1 KiB/s) fails and is retried; one the
     * server never answers is tried 3 times at most. Connect: limit for
     * opening a connection. 0: 60 s as the AWS CLI's read and connect
     * timeouts, cut to total_timeout_s / 4 so that retries fit in the
     * budget. (The library reads no environment of its own: only the
     * standard AWS variables and files named above are defaults; the
     * tools read $TZR_HTTP_TIMEOUT and pass it here.) */
    double stall_timeout_s;
    double connect_timeout_s;
} tzr_http_options;

#define TZR_HTTP_OPTIONS_INIT \
    { sizeof(tzr_http_options), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* Open an http(s):// or s3:// URL as a positional source. One HEAD at open
 * learns the size and ETag; every later ranged GET carries If-Match with
 * that ETag, so a replaced object fails with TZR_ECHANGED instead of mixing
 * versions. Errors: TZR_ENOTFOUND (404: no such bucket/key), TZR_EHTTP
 * (403 and other statuses, after retries for 429/5xx), TZR_ENET (connect
 * failures, resets, timeouts after retries). opt may be NULL.
 * read_at and readv_at are thread-safe; large reads are split into ranges
 * of range_bytes fetched concurrently straight into the caller's buffers.
 * A 429/503 answer's Retry-After is the least wait before that range is
 * retried; one that would end past total_timeout_s fails the read at once.
 * Every range answer must carry the ETag seen at open (Last-Modified when
 * there is no ETag): a server that ignores If-Match still cannot mix two
 * versions (TZR_ECHANGED, not retried). Identity encoding is asked for and
 * any other Content-Encoding is refused at once (TZR_EHTTP), as is a chain
 * of more than 10 redirects ("redirect loop"). */
TZR_API int tzr_source_open_url(tzr_source **out, const char *url, const tzr_http_options *opt);

/* Ranged GETs issued so far by a source from tzr_source_open_url (the
 * object's HEAD at open not counted), and how many of them were retries. */
typedef struct tzr_http_stats {
    uint64_t requests;
    uint64_t retries;
} tzr_http_stats;
TZR_API int tzr_source_http_stats(tzr_source *src, tzr_http_stats *st);

/* 1 when s3://bucket/key exists (HEAD answers 2xx), 0 when it does not
 * (404), else a TZR_E* error (403, network). opt may be NULL. */
TZR_API int tzr_s3_exists(const char *url, const tzr_http_options *opt);

/* Multipart S3 output for s3://bucket/key. part_bytes 0 = 16 MiB (min
 * 5 MiB). Parts are uploaded as they fill, opt->max_inflight of them at
 * once (0: 8; a writer that gets ahead waits, so host memory stays about
 * (max_inflight + writer threads + 1) parts); part 1 (bytes [0, part_bytes),
 * which holds the tensorizer prologue and index that the writer rewrites
 * last) stays buffered until finish and is uploaded last. A pwrite_at into
 * a part that was already uploaded fails with TZR_EINVAL: writes must be
 * sequential apart from the first part (this is how the tensorizer writer
 * behaves). finish = CompleteMultipartUpload (the object appears
 * atomically); outputs smaller than one part use a single PUT at finish;
 * abort = AbortMultipartUpload (nothing becomes visible). */
TZR_API int tzr_output_open_s3(tzr_output **out, const char *url, const tzr_http_options *opt,
                               size_t part_bytes);

#ifdef __cplusplus
}
#endif
#endif
