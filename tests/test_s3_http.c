/* HTTP source and S3 multipart output against local servers only
 * (127.0.0.1).
 *   test_s3_http              fault-injecting server cases (starts
 *                             tests/util/faulty_http.py itself; SKIP when
 *                             python3 is missing)
 *   test_s3_http --s3 URL     cases against a real S3 server at endpoint
 *                             URL (tests/s3_test.sh starts Swift + s3api and
 *                             passes it), bucket "tzr", user test:tester.
 * Every case is bounded by small total_timeout_s values. */
#include "check.h"
#include "gen.h"
#include "golden.h"
#include "http_internal.h"
#include "scheme.h"
#include "tzr_http.h"
#include "tzr_load.h"
#include "tzr_shard.h"

#include <pthread.h>
#include <signal.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BIG (40u << 20)

static char base_url[256];  /* http://127.0.0.1:PORT */
static char srv_dir[512];
static pid_t srv_pid;
static unsigned char *big;  /* BIG bytes of pseudo-random data */
static const char *s3_endpoint;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void make_big(void) {
    big = malloc(BIG);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < BIG; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(big + i, &x, 8);
    }
}

static int start_server(void) {
    snprintf(srv_dir, sizeof srv_dir, "%s/www", check_tmpdir());
    mkdir(srv_dir, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s/big.bin", srv_dir);
    if (check_write_file(path, big, BIG)) return -1;
    char portfile[600];
    snprintf(portfile, sizeof portfile, "%s/port", check_tmpdir());
    srv_pid = fork();
    if (srv_pid == 0) {
        char logp[700];
        snprintf(logp, sizeof logp, "%s/server.err", check_tmpdir());
        if (!freopen(logp, "a", stderr)) _exit(126);
        execlp("python3", "python3", "tests/util/faulty_http.py", srv_dir, portfile, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        size_t n;
        unsigned char *p = check_read_file(portfile, &n);
        if (p) {
            snprintf(base_url, sizeof base_url, "http://127.0.0.1:%.*s", (int)n, (char *)p);
            free(p);
            return 0;
        }
        int st;
        if (waitpid(srv_pid, &st, WNOHANG) == srv_pid) return -1;
        usleep(50000);
    }
    return -1;
}

static void stop_server(void) {
    if (srv_pid > 0) {
        kill(srv_pid, SIGTERM);
        waitpid(srv_pid, NULL, 0);
        srv_pid = 0;
    }
}

static void restart_server(void) {
    stop_server();
    char portfile[600];
    snprintf(portfile, sizeof portfile, "%s/port", check_tmpdir());
    unlink(portfile);
    start_server();
}

static tzr_http_options fast_opts(void) {
    tzr_http_options o = TZR_HTTP_OPTIONS_INIT;
    o.range_bytes = 1u << 20;
    o.max_inflight = 8;
    o.total_timeout_s = 20;
    return o;
}

static void url_of(char *buf, size_t cap, const char *mode, const char *name) {
    snprintf(buf, cap, "%s/%s/%s", base_url, mode, name);
}

static size_t log_count(const char *needle) {
    char path[600];
    snprintf(path, sizeof path, "%s/requests.log", srv_dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    size_t n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) n++;
    fclose(f);
    return n;
}

static void clear_log(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/requests.log", srv_dir);
    unlink(path);
}

/* Read the whole object in one call and compare with big. */
static int read_all_equal(const char *mode, const tzr_http_options *o) {
    char url[512];
    url_of(url, sizeof url, mode, "big.bin");
    tzr_source *s = NULL;
    int rc = tzr_source_open_url(&s, url, o);
    if (rc) {
        fprintf(stderr, "  open %s: %s\n", url, tzr_last_error());
        return rc;
    }
    unsigned char *buf = malloc(BIG);
    rc = s->read_at(s, buf, BIG, 0);
    if (rc) fprintf(stderr, "  read %s: %s\n", url, tzr_last_error());
    else if (memcmp(buf, big, BIG) != 0) rc = -100;
    free(buf);
    tzr_source_free(s);
    return rc;
}

static void http_read_identical(void) {
    tzr_http_options o = fast_opts();
    clear_log();
    double t0 = now_s();
    CHECK_RC(read_all_equal("ok", &o), 0);
    double dt = now_s() - t0;
    fprintf(stderr, "  40 MiB over loopback in %.3f s (%.0f MiB/s), 1 MiB ranges x8\n", dt,
            40 / dt);
    CHECK(log_count("GET /ok/big.bin bytes=") == 40);
    CHECK(log_count("HEAD /ok/big.bin") == 1);
}

typedef struct rd_arg {
    tzr_source *s;
    int bad;
    unsigned seed;
} rd_arg;

static void *rd_thread(void *p) {
    rd_arg *a = p;
    unsigned char *buf = malloc(3u << 20);
    for (int i = 0; i < 20; i++) {
        size_t len = (size_t)rand_r(&a->seed) % (3u << 20) + 1;
        uint64_t off = (uint64_t)rand_r(&a->seed) % (BIG - len);
        if (a->s->read_at(a->s, buf, len, off) != 0 || memcmp(buf, big + off, len) != 0) a->bad++;
    }
    free(buf);
    return NULL;
}

static void http_threads(void) {
    tzr_http_options o = fast_opts();
    o.range_bytes = 256u << 10;
    char url[512];
    url_of(url, sizeof url, "ok", "big.bin");
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    CHECK(s->size == BIG);
    CHECK(s->preferred_chunk == (256u << 10) && s->preferred_inflight == 8);
    pthread_t th[8];
    rd_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (rd_arg){s, 0, (unsigned)i + 1};
        pthread_create(&th[i], NULL, rd_thread, &a[i]);
    }
    int bad = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        bad += a[i].bad;
    }
    CHECK(bad == 0);
    /* past the end */
    unsigned char b[16];
    CHECK_RC(s->read_at(s, b, 16, BIG - 8), TZR_ETRUNC);
    CHECK_OK(s->read_at(s, b, 0, BIG));
    tzr_source_free(s);
}

static void retry_case(const char *mode) {
    tzr_http_options o = fast_opts();
    /* "every 2nd GET fails" is global: with requests interleaved, one range
     * can draw the failing turn many times in a row. */
    o.max_retries = 40;
    clear_log();
    CHECK_RC(read_all_equal(mode, &o), 0);
    char needle[64];
    snprintf(needle, sizeof needle, "GET /%s/big.bin", mode);
    size_t gets = log_count(needle);
    fprintf(stderr, "  %s: %zu GETs for 40 ranges\n", mode, gets);
    CHECK(gets > 40); /* faults happened and were retried */
}
static void retry_503(void) { retry_case("e503"); }
static void retry_429(void) { retry_case("e429"); }
static void retry_cut_resumes(void) {
    retry_case("cut");
    /* a resumed range starts half-way through a 1 MiB range */
    CHECK(log_count("bytes=524288-1048575") + log_count("-2097151") >= 1);
}

static void stall_low_speed(void) {
    tzr_http_options o = fast_opts();
    o.range_bytes = 8u << 20;
    o.total_timeout_s = 12; /* low-speed window 3 s */
    char url[512];
    url_of(url, sizeof url, "stall", "big.bin");
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    unsigned char *buf = malloc(16u << 20);
    double t0 = now_s();
    CHECK_OK(s->read_at(s, buf, 16u << 20, 0));
    double dt = now_s() - t0;
    fprintf(stderr, "  stalled ranges detected and retried in %.1f s\n", dt);
    CHECK(memcmp(buf, big, 16u << 20) == 0);
    CHECK(dt < 12);
    free(buf);
    tzr_source_free(s);
}

static void etag_change(void) {
    tzr_http_options o = fast_opts();
    tzr_source *s = NULL;
    char url[512];
    url_of(url, sizeof url, "etag", "big.bin");
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    unsigned char *buf = malloc(BIG);
    CHECK_OK(s->read_at(s, buf, 3u << 20, 0)); /* 3 GETs with the old ETag */
    CHECK_RC(s->read_at(s, buf, BIG, 0), TZR_ECHANGED);
    CHECK(strstr(tzr_last_error(), "changed") != NULL);
    free(buf);
    tzr_source_free(s);
}

static void server_dies(void) {
    tzr_http_options o = fast_opts();
    o.total_timeout_s = 3;
    tzr_source *s = NULL;
    char url[512];
    url_of(url, sizeof url, "die", "big.bin");
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    unsigned char *buf = malloc(BIG);
    double t0 = now_s();
    int rc = s->read_at(s, buf, BIG, 0);
    double dt = now_s() - t0;
    fprintf(stderr, "  failed with %d after %.2f s: %s\n", rc, dt, tzr_last_error());
    CHECK(rc == TZR_ENET || rc == TZR_EHTTP);
    CHECK(dt < 3.0 + 1.0);
    free(buf);
    tzr_source_free(s);
    restart_server();
    /* connection refused at open is also bounded */
    char dead[128];
    snprintf(dead, sizeof dead, "http://127.0.0.1:1/ok/big.bin");
    t0 = now_s();
    CHECK_RC(tzr_source_open_url(&s, dead, &o), TZR_ENET);
    CHECK(now_s() - t0 < 4.0);
}

static void not_found(void) {
    tzr_source *s = NULL;
    tzr_http_options o = fast_opts();
    char url[512];
    url_of(url, sizeof url, "ok", "missing.bin");
    CHECK_RC(tzr_source_open_url(&s, url, &o), TZR_ENOTFOUND);
    CHECK(strstr(tzr_last_error(), "HTTP 404") != NULL);
    CHECK(s == NULL);
}

static void protocol_violations(void) {
    tzr_http_options o = fast_opts();
    tzr_source *s = NULL;
    char url[512];
    unsigned char *buf = malloc(BIG + 16);
    /* server ignoring Range: partial reads refused, whole-object read ok */
    url_of(url, sizeof url, "norange", "big.bin");
    o.range_bytes = 64u << 20;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (s) {
        CHECK_RC(s->read_at(s, buf, 100, 10), TZR_EHTTP);
        CHECK(strstr(tzr_last_error(), "ignored the Range") != NULL);
        CHECK_OK(s->read_at(s, buf, BIG, 0));
        CHECK(memcmp(buf, big, BIG) == 0);
        tzr_source_free(s);
    }
    /* one byte too many: rejected, never written past the buffer */
    o = fast_opts();
    url_of(url, sizeof url, "longer", "big.bin");
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (s) {
        memset(buf, 0xAB, BIG + 16);
        CHECK_RC(s->read_at(s, buf, 1000, 0), TZR_EHTTP);
        CHECK(buf[1000] == 0xAB);
        tzr_source_free(s);
    }
    free(buf);
}

static void name_has_no_query(void) {
    tzr_http_options o = fast_opts();
    tzr_source *s = NULL;
    char url[600];
    snprintf(url, sizeof url, "%s/ok/big.bin?X-Amz-Signature=SECRETSIG&X-Amz-Security-Token=TOK",
             base_url);
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    CHECK(strstr(s->name, "SECRET") == NULL && strstr(s->name, "TOK") == NULL);
    tzr_source_free(s);
    /* source_path dispatch */
    CHECK_OK(tzr_source_open_path(&s, url, 0, NULL));
    if (s) {
        CHECK(s->size == BIG);
        tzr_source_free(s);
    }
}

static void sparse_10g(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/sparse.bin", srv_dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        check_fail("cannot create %s", path);
        return;
    }
    fwrite(big, 1, 1u << 20, f);
    fclose(f);
    if (truncate(path, 10ull << 30) != 0) {
        check_skip("cannot make a 10 GiB sparse file here");
        unlink(path);
        return;
    }
    tzr_http_options o = fast_opts();
    o.range_bytes = 64u << 10;
    clear_log();
    tzr_source *s = NULL;
    char url[512];
    url_of(url, sizeof url, "ok", "sparse.bin");
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (s) {
        CHECK(s->size == 10ull << 30);
        unsigned char *buf = malloc(256u << 10);
        CHECK_OK(s->read_at(s, buf, 256u << 10, 0));
        CHECK(memcmp(buf, big, 256u << 10) == 0);
        CHECK_OK(s->read_at(s, buf, 4096, (10ull << 30) - 4096));
        free(buf);
        tzr_source_free(s);
    }
    /* exactly four 64 KiB GETs plus the tail one: nothing unbounded */
    CHECK(log_count("GET /ok/sparse.bin bytes=") == 5);
    CHECK(log_count("GET /ok/sparse.bin -") == 0);
    CHECK(log_count("bytes=196608-262143") == 1);
    unlink(path);
}

static void golden_via_reader(void) {
    char src[512], dst[700];
    snprintf(src, sizeof src, "%s/plain_v1.tensors", check_golden_dir());
    size_t n;
    unsigned char *g = check_read_file(src, &n);
    if (!g) {
        check_fail("golden file %s missing", src);
        return;
    }
    snprintf(dst, sizeof dst, "%s/plain_v1.tensors", srv_dir);
    CHECK(check_write_file(dst, g, n) == 0);
    char url[512];
    url_of(url, sizeof url, "ok", "plain_v1.tensors");
    tzr_http_options o = fast_opts();
    o.range_bytes = 4096; /* many ranges */
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (s) {
        unsigned char *b = malloc(n);
        CHECK_OK(s->read_at(s, b, n, 0));
        CHECK(memcmp(b, g, n) == 0);
        free(b);
        tzr_reader *r = NULL;
        tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
        ro.verify = 1;
        int rc = tzr_reader_open_source(&r, s, &ro); /* takes s */
        CHECK_OK(rc);
        if (r) {
            CHECK(tzr_reader_count(r) > 0);
            for (size_t i = 0; i < tzr_reader_count(r); i++) {
                const tzr_tensor_info *ti = tzr_reader_tensor(r, i);
                void *d = malloc(ti->nbytes ? ti->nbytes : 1);
                CHECK_OK(tzr_reader_read(r, i, d, ti->nbytes));
                free(d);
            }
            tzr_reader_free(r);
        }
    }
    free(g);
}

/* ------------------------------------------------------------ vectored reads */
/* Odd-sized buffers, each followed by guard bytes: empty ones (some with no
 * buffer at all), single bytes and sizes around the 4 KiB range size, so
 * buffers straddle range boundaries and resumed ranges start mid-buffer. */
#define GUARD 16
typedef struct iov_set {
    tzr_iovec iov[4096];
    int n;
    size_t total;
} iov_set;

static iov_set *iovs_make(size_t want, unsigned seed) {
    static const size_t sizes[] = {0, 1, 7, 4095, 0, 4096, 4097, 13, 0, 12288, 30001, 2, 8191, 65537, 3};
    iov_set *v = calloc(1, sizeof *v);
    while (v->total < want && v->n < 4096) {
        size_t len = sizes[(size_t)rand_r(&seed) % (sizeof sizes / sizeof *sizes)];
        if (len > want - v->total) len = want - v->total;
        uint8_t *b = len || v->n % 2 ? malloc(len + GUARD) : NULL;
        if (b) memset(b, 0xAB, len + GUARD);
        v->iov[v->n++] = (tzr_iovec){b, len};
        v->total += len;
    }
    return v;
}

/* 1 when no byte after any buffer was touched. */
static int iovs_guards_ok(const iov_set *v) {
    for (int i = 0; i < v->n; i++) {
        const uint8_t *b = v->iov[i].base;
        for (size_t g = 0; b && g < GUARD; g++)
            if (b[v->iov[i].len + g] != 0xAB) return 0;
    }
    return 1;
}

/* 0 when the buffers hold want's bytes in order and no guard was touched. */
static int iovs_check(const iov_set *v, const unsigned char *want) {
    size_t at = 0;
    for (int i = 0; i < v->n; i++) {
        size_t len = v->iov[i].len;
        if (len && memcmp(v->iov[i].base, want + at, len) != 0) return -1;
        at += len;
    }
    return iovs_guards_ok(v) ? 0 : -2;
}

static void iovs_free(iov_set *v) {
    for (int i = 0; i < v->n; i++) free(v->iov[i].base);
    free(v);
}

/* readv_at straight on the source under a fault mode, at offsets that are
 * and are not range-aligned, the last one ending at the object's end. */
static void readv_mode(const char *mode) {
    tzr_http_options o = fast_opts();
    o.range_bytes = 4096;
    char url[512];
    url_of(url, sizeof url, mode, "big.bin");
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    CHECK(s->readv_at != NULL && s->pack_reads);
    clear_log();
    size_t ranges = 0;
    for (unsigned round = 0; s->readv_at && round < 4; round++) {
        iov_set *v = iovs_make(200000 + round * 777, round + 1);
        uint64_t offs[4] = {0, 4095, 12345 + round, BIG - v->total};
        uint64_t off = offs[round];
        CHECK_OK(s->readv_at(s, v->iov, v->n, off));
        CHECK(iovs_check(v, big + off) == 0);
        ranges += (off + v->total - 1) / 4096 - off / 4096 + 1;
        iovs_free(v);
    }
    char needle[64];
    snprintf(needle, sizeof needle, "GET /%s/big.bin", mode);
    size_t gets = log_count(needle);
    fprintf(stderr, "  %s: %zu GETs for at most %zu ranges\n", mode, gets, ranges);
    if (strcmp(mode, "ok") != 0) CHECK(gets > ranges); /* faults happened and were retried */
    tzr_source_free(s);
}

static void readv_scatter(void) {
    readv_mode("ok");
    readv_mode("cut");
    readv_mode("e503once");
}

/* Argument checks and a server sending too much: nothing written past the
 * buffers. */
static void readv_bounds(void) {
    tzr_http_options o = fast_opts();
    o.range_bytes = 4096;
    char url[512];
    url_of(url, sizeof url, "ok", "big.bin");
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    CHECK(s && s->readv_at);
    if (!s || !s->readv_at) return;
    unsigned char a[64], b[64];
    tzr_iovec none[3] = {{NULL, 0}, {a, 0}, {NULL, 0}};
    CHECK_OK(s->readv_at(s, none, 0, 0));
    CHECK_OK(s->readv_at(s, none, 3, BIG));
    CHECK_RC(s->readv_at(s, none, -1, 0), TZR_EINVAL);
    tzr_iovec nobuf[2] = {{a, 8}, {NULL, 8}};
    CHECK_RC(s->readv_at(s, nobuf, 2, 0), TZR_EINVAL);
    tzr_iovec huge[2] = {{a, SIZE_MAX}, {b, 2}};
    CHECK_RC(s->readv_at(s, huge, 2, 0), TZR_EINVAL);
    tzr_iovec two[2] = {{a, 40}, {b, 40}};
    CHECK_RC(s->readv_at(s, two, 2, BIG - 79), TZR_ETRUNC);
    CHECK_OK(s->readv_at(s, two, 2, BIG - 80));
    CHECK(memcmp(a, big + BIG - 80, 40) == 0 && memcmp(b, big + BIG - 40, 40) == 0);
    tzr_source_free(s);
    url_of(url, sizeof url, "longer", "big.bin");
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    iov_set *v = iovs_make(3000, 7);
    CHECK_RC(s->readv_at(s, v->iov, v->n, 100), TZR_EHTTP);
    fprintf(stderr, "  message: %s\n", tzr_last_error());
    CHECK(strstr(tzr_last_error(), "more bytes than requested") != NULL);
    CHECK(iovs_guards_ok(v));
    iovs_free(v);
    tzr_source_free(s);
}

/* A source forwarding to the HTTP one, counting vectored reads: shows the
 * loader scattered packed tensors through readv_at. */
typedef struct count_src {
    tzr_source base;
    tzr_source *inner;
    atomic_int readv_calls;
} count_src;

static int count_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    count_src *c = (count_src *)s;
    return c->inner->read_at(c->inner, buf, len, off);
}

static int count_readv(tzr_source *s, const tzr_iovec *iov, int n, uint64_t off) {
    count_src *c = (count_src *)s;
    atomic_fetch_add(&c->readv_calls, 1);
    return c->inner->readv_at(c->inner, iov, n, off);
}

static void count_destroy(tzr_source *s) {
    count_src *c = (count_src *)s;
    tzr_source_free(c->inner);
    free(c);
}

/* tzr_load of an http:// URL into the host sink: many small tensors packed
 * into reads of 64 KiB over 4 KiB ranges, under faults; every tensor's
 * bytes equal the generator's. */
static void load_host_over_http(void) {
    gen_spec spec = {150, 16u << 10, 2500, 1, NULL};
    char path[700];
    snprintf(path, sizeof path, "%s/many.tensors", srv_dir);
    CHECK_OK(gen_write(&spec, path));
    const char *modes[] = {"ok", "cut", "e503once"};
    for (int m = 0; m < 3; m++) {
        tzr_http_options o = fast_opts();
        o.range_bytes = 4096;
        char url[512];
        url_of(url, sizeof url, modes[m], "many.tensors");
        count_src *c = calloc(1, sizeof *c);
        CHECK_OK(tzr_source_open_url(&c->inner, url, &o));
        if (!c->inner) {
            free(c);
            return;
        }
        c->base = *c->inner;
        c->base.read_at = count_read;
        c->base.readv_at = count_readv;
        c->base.destroy = count_destroy;
        c->base.ctx = c;
        tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
        ro.verify = 1;
        tzr_reader *r = NULL;
        CHECK_OK(tzr_reader_open_source(&r, &c->base, &ro));
        if (!r) continue;
        tzr_sink *sink = NULL;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.chunk_bytes = 64u << 10;
        lo.ring_bytes = 1u << 20;
        lo.threads = 2; /* the Python server is slow with many connections */
        tzr_load_stats st = {0};
        double t0 = now_s();
        CHECK_OK(tzr_load(r, sink, &lo, &st));
        double dt = now_s() - t0;
        tzr_http_stats hs = {0};
        tzr_source_http_stats(c->inner, &hs);
        size_t bad = 0;
        for (size_t i = 0; i < tzr_reader_count(r); i++) {
            uint64_t len, glen;
            int meta;
            uint8_t *want = gen_expected(&spec, i, &len, &meta);
            void *got = NULL;
            if (tzr_sink_host_data(sink, i, &got, &glen) || glen != len ||
                (len && memcmp(got, want, len) != 0))
                bad++;
            free(want);
        }
        fprintf(stderr,
                "  %s: %zu tensors in %.2f s: %" PRIu64 " reads, %d vectored; %" PRIu64
                " GETs, %" PRIu64 " retried; %zu differ\n",
                modes[m], tzr_reader_count(r), dt, st.reads, atomic_load(&c->readv_calls),
                hs.requests, hs.retries, bad);
        CHECK(bad == 0);
        CHECK(atomic_load(&c->readv_calls) > 0);
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
    unlink(path);
}

/* ------------------------------------------------------------ Retry-After */
/* Arrival times (server clock) of the GETs of one range, from the log. */
static size_t log_times(const char *needle, double *t, size_t cap) {
    char path[600];
    snprintf(path, sizeof path, "%s/requests.log", srv_dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    size_t n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        const char *sp = strrchr(line, ' ');
        if (strstr(line, needle) && sp) t[n++] = strtod(sp + 1, NULL);
    }
    fclose(f);
    return n;
}

/* 429 with Retry-After: 1 on every 2nd GET: the same range is asked for
 * again no sooner than 1 s later (server clock; only a lower bound). */
static void retry_after_waits(void) {
    tzr_http_options o = fast_opts();
    o.range_bytes = 64u << 10;
    o.max_inflight = 2;
    char url[512];
    url_of(url, sizeof url, "ra1", "big.bin");
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    clear_log();
    unsigned char *buf = malloc(256u << 10);
    CHECK_OK(s->read_at(s, buf, 256u << 10, 0));
    CHECK(memcmp(buf, big, 256u << 10) == 0);
    size_t retried = 0;
    double min_gap = 1e9;
    for (int k = 0; k < 4; k++) {
        char needle[96];
        double t[16];
        snprintf(needle, sizeof needle, "GET /ra1/big.bin bytes=%d-%d ", k << 16, ((k + 1) << 16) - 1);
        size_t n = log_times(needle, t, 16);
        if (n > 1) retried++;
        for (size_t i = 1; i < n; i++)
            if (t[i] - t[i - 1] < min_gap) min_gap = t[i] - t[i - 1];
    }
    fprintf(stderr, "  %zu of 4 ranges retried; shortest gap before a retry %.3f s\n", retried,
            min_gap);
    CHECK(retried >= 1);
    CHECK(min_gap >= 0.9);
    free(buf);
    tzr_source_free(s);
}

/* 503 with Retry-After: 3600 against a 20 s budget: fails at once, saying
 * why, instead of sleeping past the budget. */
static void retry_after_past_budget(void) {
    tzr_http_options o = fast_opts();
    char url[512];
    url_of(url, sizeof url, "ralong", "big.bin");
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    unsigned char *buf = malloc(4u << 20);
    double t0 = now_s();
    int rc = s->read_at(s, buf, 4u << 20, 0);
    double dt = now_s() - t0;
    const char *m = tzr_last_error();
    fprintf(stderr, "  failed with %d after %.2f s: %s\n", rc, dt, m);
    CHECK(rc == TZR_EHTTP || rc == TZR_ENET);
    CHECK(dt < o.total_timeout_s / 2);
    CHECK(strstr(m, "/ralong/big.bin") != NULL && strstr(m, "GET bytes ") != NULL);
    CHECK(strstr(m, "Retry-After") != NULL && strstr(m, "time budget") != NULL);
    free(buf);
    tzr_source_free(s);
}

/* ------------------------------------------------------------ S3 (Swift) */
static tzr_http_options s3_opts(void) {
    tzr_http_options o = TZR_HTTP_OPTIONS_INIT;
    o.access_key = "test:tester";
    o.secret_key = "testing";
    o.endpoint = s3_endpoint;
    o.region = "us-east-1";
    o.range_bytes = 1u << 20;
    o.max_inflight = 8;
    o.total_timeout_s = 30;
    return o;
}

/* Write data like the tensorizer writer: everything after the first 262218
 * bytes sequentially in 1 MiB pieces, then the prologue/index last. */
static int s3_put(const char *url, const void *data, size_t len, size_t part) {
    tzr_http_options o = s3_opts();
    tzr_output *out = NULL;
    int rc = tzr_output_open_s3(&out, url, &o, part);
    if (rc) return rc;
    const unsigned char *p = data;
    size_t head = len < 262218 ? len : 262218;
    for (size_t off = head; off < len && !rc; off += 1u << 20) {
        size_t n = len - off < (1u << 20) ? len - off : (1u << 20);
        rc = out->pwrite_at(out, p + off, n, off);
    }
    if (!rc) rc = out->pwrite_at(out, p, head, 0);
    if (!rc) rc = out->finish(out);
    else out->abort(out);
    out->destroy(out);
    return rc;
}

static int s3_read_equal(const char *url, const void *want, size_t len) {
    tzr_http_options o = s3_opts();
    tzr_source *s = NULL;
    int rc = tzr_source_open_url(&s, url, &o);
    if (rc) return rc;
    if (s->size != len) {
        tzr_source_free(s);
        return -101;
    }
    unsigned char *buf = malloc(len ? len : 1);
    rc = s->read_at(s, buf, len, 0);
    if (!rc && memcmp(buf, want, len) != 0) rc = -100;
    free(buf);
    tzr_source_free(s);
    return rc;
}

static void s3_multipart_roundtrip(void) {
    double t0 = now_s();
    CHECK_OK(s3_put("s3://tzr/big.tensors", big, BIG, 5u << 20));
    double t1 = now_s();
    CHECK_OK(s3_read_equal("s3://tzr/big.tensors", big, BIG));
    double t2 = now_s();
    fprintf(stderr, "  40 MiB: multipart upload %.2f s, ranged read %.2f s\n", t1 - t0, t2 - t1);
}

/* Writers on several threads at once (as the writer's workers do): each
 * of 4 threads fills every 4th part from the start, so several parts fill
 * while the upload is still being created. One upload must take them all. */
typedef struct put_thread { tzr_output *out; int t, rc; } put_thread;
static void *put_parts(void *arg) {
    put_thread *pt = arg;
    const size_t part = 5u << 20;
    for (size_t i = 1 + (size_t)pt->t; i * part < BIG && !pt->rc; i += 4) {
        size_t n = BIG - i * part < part ? BIG - i * part : part;
        pt->rc = pt->out->pwrite_at(pt->out, big + i * part, n, i * part);
    }
    return NULL;
}

static void s3_concurrent_writers(void) {
    tzr_http_options o = s3_opts();
    tzr_output *out = NULL;
    CHECK_OK(tzr_output_open_s3(&out, "s3://tzr/concurrent.tensors", &o, 5u << 20));
    if (!out) return;
    put_thread pt[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) pt[t] = (put_thread){out, t, 0}, pthread_create(&th[t], NULL, put_parts, &pt[t]);
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK_OK(pt[t].rc);
    }
    CHECK_OK(out->pwrite_at(out, big, 5u << 20, 0));
    CHECK_OK(out->finish(out));
    out->destroy(out);
    CHECK_OK(s3_read_equal("s3://tzr/concurrent.tensors", big, BIG));
}

/* Every golden file through S3: uploaded by libtzr's S3 output, read back
 * byte for byte, then loaded (verified, decrypted where encrypted) through
 * the pipeline from s3:// and checked against tensorizer's manifest. */
static golden_file *gf; /* kept for the process, like test_golden's */

static void s3_goldens_roundtrip(void) {
    int ng = golden_load(&gf);
    CHECK(ng > 0);
    for (int f = 0; f < ng; f++) {
        const golden_file *g = &gf[f];
        char path[512], url[600];
        golden_path(g, path, sizeof path);
        size_t n;
        unsigned char *bytes = check_read_file(path, &n);
        CHECK(bytes != NULL);
        if (!bytes) continue;
        snprintf(url, sizeof url, "s3://tzr/golden/%s", g->file);
        CHECK_OK(s3_put(url, bytes, n, 0));
        CHECK_OK(s3_read_equal(url, bytes, n));
        free(bytes);
        tzr_http_options o = s3_opts();
        tzr_source *src = NULL;
        CHECK_OK(tzr_source_open_url(&src, url, &o));
        if (!src) continue;
        tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
        ro.verify = 1;
        if (g->has_key) ro.crypt.key = g->key;
        else if (g->password) {
            ro.crypt.password = g->password;
            ro.crypt.password_len = strlen(g->password);
        }
        tzr_reader *r = NULL;
        CHECK_OK(tzr_reader_open_source(&r, src, &ro)); /* takes src */
        if (!r) continue;
        tzr_sink *sink = NULL;
        CHECK_OK(tzr_sink_host_new(&sink, NULL, NULL));
        CHECK_OK(tzr_load(r, sink, NULL, NULL));
        CHECK(tzr_reader_count(r) == g->n);
        for (size_t i = 0; i < g->n && i < tzr_reader_count(r); i++) {
            const golden_tensor *e = &g->t[i];
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            CHECK(t->name_len == e->name_len && memcmp(t->name, e->name, e->name_len) == 0);
            void *d = NULL;
            uint64_t len = 0;
            CHECK_OK(tzr_sink_host_data(sink, i, &d, &len));
            if (!d && len) continue;
            CHECK(golden_data_ok(e, d, len));
        }
        tzr_sink_free(sink);
        tzr_reader_free(r);
    }
}

static void s3_wrong_secret(void) {
    tzr_http_options o = s3_opts();
    o.secret_key = "not-the-secret-XYZ";
    tzr_source *s = NULL;
    CHECK_RC(tzr_source_open_url(&s, "s3://tzr/big.tensors", &o), TZR_EHTTP);
    const char *m = tzr_last_error();
    fprintf(stderr, "  message: %s\n", m);
    CHECK(strstr(m, "403") != NULL);
    CHECK(strstr(m, "check the secret") != NULL);
    CHECK(strstr(m, "not-the-secret") == NULL);
    CHECK(strstr(m, "s3://tzr/big.tensors") != NULL);
}

static void s3_missing(void) {
    tzr_http_options o = s3_opts();
    tzr_source *s = NULL;
    CHECK_RC(tzr_source_open_url(&s, "s3://tzr/no-such-key.tensors", &o), TZR_ENOTFOUND);
    fprintf(stderr, "  message: %s\n", tzr_last_error());
    CHECK(strstr(tzr_last_error(), "s3://tzr/no-such-key.tensors: no such key (HTTP 404") != NULL);
    CHECK_RC(tzr_source_open_url(&s, "s3://no-such-bucket-tzr/k", &o), TZR_ENOTFOUND);
    fprintf(stderr, "  message: %s\n", tzr_last_error());
}

static void s3_clock_skew(void) {
    tzr_http_options o = s3_opts();
    tzr_source *s = NULL;
    setenv("TZR_S3_CLOCK_SKEW", "3600", 1);
    int rc = tzr_source_open_url(&s, "s3://tzr/big.tensors", &o);
    unsetenv("TZR_S3_CLOCK_SKEW");
    CHECK(rc == TZR_EHTTP);
    fprintf(stderr, "  message: %s\n", tzr_last_error());
    CHECK(strstr(tzr_last_error(), "RequestTimeTooSkewed") != NULL);
    CHECK(strstr(tzr_last_error(), "clock") != NULL);
    if (!rc) tzr_source_free(s);
    /* 5 minutes off is within S3's 15 minute window */
    setenv("TZR_S3_CLOCK_SKEW", "-300", 1);
    CHECK_OK(tzr_source_open_url(&s, "s3://tzr/big.tensors", &o));
    unsetenv("TZR_S3_CLOCK_SKEW");
    if (s) tzr_source_free(s);
}

static void s3_replaced_during_load(void) {
    CHECK_OK(s3_put("s3://tzr/replace.tensors", big, 8u << 20, 0));
    tzr_http_options o = s3_opts();
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, "s3://tzr/replace.tensors", &o));
    if (!s) return;
    unsigned char *buf = malloc(8u << 20);
    CHECK_OK(s->read_at(s, buf, 1u << 20, 0));
    CHECK_OK(s3_put("s3://tzr/replace.tensors", big + 1, 8u << 20, 0));
    CHECK_RC(s->read_at(s, buf, 8u << 20, 0), TZR_ECHANGED);
    fprintf(stderr, "  message: %s\n", tzr_last_error());
    free(buf);
    tzr_source_free(s);
}

static void s3_abort_leaves_nothing(void) {
    tzr_http_options o = s3_opts();
    tzr_output *out = NULL;
    CHECK_OK(tzr_output_open_s3(&out, "s3://tzr/aborted.tensors", &o, 5u << 20));
    if (!out) return;
    CHECK_OK(out->pwrite_at(out, big, 12u << 20, 0)); /* part 2 uploads */
    /* a write into the uploaded part 2 is refused */
    CHECK_RC(out->pwrite_at(out, big, 10, 6u << 20), TZR_EINVAL);
    /* part 1 stays writable */
    CHECK_OK(out->pwrite_at(out, big, 10, 100));
    out->abort(out);
    out->destroy(out);
    tzr_source *s = NULL;
    CHECK_RC(tzr_source_open_url(&s, "s3://tzr/aborted.tensors", &o), TZR_ENOTFOUND);
}

static void s3_env_chain(void) {
    /* tzr_source_open_path / tzr_output_open_path with the default chain. */
    char home[600];
    snprintf(home, sizeof home, "%s/home", check_tmpdir());
    mkdir(home, 0700);
    char cfg[700];
    snprintf(cfg, sizeof cfg, "%s/.s3cfg", home);
    FILE *f = fopen(cfg, "w");
    const char *hb = strstr(s3_endpoint, "://") ? strstr(s3_endpoint, "://") + 3 : s3_endpoint;
    fprintf(f, "[default]\naccess_key = test:tester\nsecret_key = testing\nhost_base = %s\n"
               "use_https = False\n", hb);
    fclose(f);
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("HOME", home, 1);
    tzr_output *out = NULL;
    CHECK_OK(tzr_output_open_path(&out, "s3://tzr/via-path.bin", 0, NULL));
    if (out) {
        CHECK_OK(out->pwrite_at(out, big, 1000, 0));
        CHECK_OK(out->finish(out));
        out->destroy(out);
    }
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_path(&s, "s3://tzr/via-path.bin", 0, NULL));
    if (s) {
        unsigned char b[1000];
        CHECK_OK(s->read_at(s, b, 1000, 0));
        CHECK(memcmp(b, big, 1000) == 0);
        tzr_source_free(s);
    }
    if (old_home) setenv("HOME", old_home, 1);
    free(old_home);
}

static void s3_anonymous_denied(void) {
    tzr_http_options o = s3_opts();
    o.anonymous = 1;
    tzr_source *s = NULL;
    int rc = tzr_source_open_url(&s, "s3://tzr/big.tensors", &o);
    CHECK(rc == TZR_EHTTP || rc == TZR_ENOTFOUND);
    fprintf(stderr, "  message: %s\n", tzr_last_error());
    if (!rc) tzr_source_free(s);
}

/* A small checkpoint written to and read back from url with per-call
 * settings o only (writer, reader and shard set opens). */
static int write_small(const char *url, const tzr_http_options *o, uint32_t seed) {
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    wo.http = o;
    tzr_writer *w = NULL;
    int rc = tzr_writer_open(&w, url, &wo);
    if (rc) return rc;
    uint64_t shape[1] = {1024};
    uint32_t v[1024];
    for (int i = 0; i < 1024; i++) v[i] = seed + (uint32_t)i;
    tzr_tensor_desc d = {"t", 1, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_I32, 1, shape, 0, sizeof d};
    rc = tzr_writer_add(w, &d, v);
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}

static int read_small(const char *url, const tzr_http_options *o, uint32_t seed) {
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.http = o;
    ro.verify = 1;
    tzr_reader *r = NULL;
    int rc = tzr_reader_open(&r, url, &ro);
    if (rc) return rc;
    uint32_t v[1024];
    rc = tzr_reader_count(r) == 1 ? tzr_reader_read(r, 0, v, sizeof v) : -102;
    for (int i = 0; !rc && i < 1024; i++)
        if (v[i] != seed + (uint32_t)i) rc = -100;
    tzr_reader_free(r);
    if (rc) return rc;
    tzr_shard_open_options so = TZR_SHARD_OPEN_OPTIONS_INIT;
    so.http = o;
    tzr_shard_set *s = NULL;
    if ((rc = tzr_shard_open(&s, url, &so))) return rc;
    rc = tzr_shard_count(s) == 1 ? 0 : -103;
    tzr_shard_close(s);
    return rc;
}

/* Two loads in one process, each with its own credentials (two Swift
 * accounts, each bucket visible to its own account only) given per call,
 * while the environment names a wrong endpoint and wrong keys that a
 * library reading setenv'd settings would use. */
static void s3_two_accounts(void) {
    tzr_http_options a = s3_opts(), b = s3_opts();
    b.access_key = "test2:tester2";
    b.secret_key = "testing2";
    setenv("AWS_ACCESS_KEY_ID", "env-key", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    CHECK_OK(write_small("s3://tzr/acct-a.tensors", &a, 1000));
    CHECK_OK(write_small("s3://tzr2/acct-b.tensors", &b, 2000));
    CHECK_OK(read_small("s3://tzr/acct-a.tensors", &a, 1000));
    CHECK_OK(read_small("s3://tzr2/acct-b.tensors", &b, 2000));
    /* The settings matter: each account's key cannot see the other's bucket. */
    int rc = read_small("s3://tzr2/acct-b.tensors", &a, 2000);
    fprintf(stderr, "  account a on b's bucket: %d %s\n", rc, tzr_last_error());
    CHECK(rc == TZR_ENOTFOUND || rc == TZR_EHTTP);
    /* And without per-call settings the environment's wrong endpoint is used. */
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    tzr_reader *r = NULL;
    tzr_http_options env_only = TZR_HTTP_OPTIONS_INIT;
    env_only.total_timeout_s = 2;
    ro.http = &env_only;
    CHECK_RC(tzr_reader_open(&r, "s3://tzr/acct-a.tensors", &ro), TZR_ENET);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_ENDPOINT_URL");
}

/* Create a bucket with a signed S3 PUT (used by tests/s3_test.sh). */
static int make_bucket(const char *endpoint, const char *bucket, const char *key, const char *secret) {
    tzr_http_options o = TZR_HTTP_OPTIONS_INIT;
    o.access_key = key;
    o.secret_key = secret;
    o.endpoint = endpoint;
    o.total_timeout_s = 20;
    tzr_s3_config cfg;
    tzr_s3_target t;
    tzr_http_common *cm = NULL;
    char url[300];
    snprintf(url, sizeof url, "s3://%s/x", bucket);
    if (tzr_s3_config_resolve(&cfg, &o) || tzr_s3_target_make(&t, url, &cfg) ||
        tzr_http_common_new(&cm, &o)) {
        fprintf(stderr, "mkbucket: %s\n", tzr_last_error());
        return 1;
    }
    free(t.path);
    t.path = malloc(strlen(bucket) + 2);
    sprintf(t.path, "/%s", bucket);
    tzr_http_call c = {0};
    c.method = "PUT";
    c.cfg = &cfg;
    c.tgt = &t;
    c.sign_body = 1;
    c.deadline = tzr_now_s() + 20;
    c.max_retries = 20;
    c.what = url;
    int rc = tzr_http_perform(cm, &c);
    if (rc || (c.status != 200 && c.status != 409)) {
        fprintf(stderr, "mkbucket: rc %d status %ld %s %.300s\n", rc, c.status, tzr_last_error(),
                c.resp ? c.resp : "");
        rc = 1;
    }
    tzr_http_call_reset(&c);
    tzr_http_common_free(cm);
    tzr_s3_target_free(&t);
    tzr_s3_config_free(&cfg);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (access("tests/util/faulty_http.py", F_OK) != 0 && chdir("..") != 0) return 2;
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 4 && strcmp(argv[1], "--mkbucket") == 0)
        return make_bucket(argv[2], argv[3], argc >= 6 ? argv[4] : "test:tester", argc >= 6 ? argv[5] : "testing");
    make_big();
    if (argc >= 3 && strcmp(argv[1], "--s3") == 0) {
        s3_endpoint = argv[2];
        RUN(s3_multipart_roundtrip);
        RUN(s3_concurrent_writers);
        RUN(s3_goldens_roundtrip);
        RUN(s3_wrong_secret);
        RUN(s3_missing);
        RUN(s3_clock_skew);
        RUN(s3_replaced_during_load);
        RUN(s3_abort_leaves_nothing);
        RUN(s3_env_chain);
        RUN(s3_anonymous_denied);
        RUN(s3_two_accounts);
        free(big);
        return check_done();
    }
    if (system("python3 -c 'import http.server' >/dev/null 2>&1") != 0 || start_server() != 0) {
        fprintf(stderr, "python3 fault server could not start\n");
        printf("SKIP http_fault_server: python3 fault server could not start\n");
        free(big);
        return 77;
    }
    RUN(http_read_identical);
    RUN(http_threads);
    RUN(retry_503);
    RUN(retry_429);
    RUN(retry_cut_resumes);
    RUN(stall_low_speed);
    RUN(etag_change);
    RUN(not_found);
    RUN(protocol_violations);
    RUN(name_has_no_query);
    RUN(sparse_10g);
    RUN(golden_via_reader);
    RUN(readv_scatter);
    RUN(readv_bounds);
    RUN(load_host_over_http);
    RUN(retry_after_waits);
    RUN(retry_after_past_budget);
    RUN(server_dies);
    stop_server();
    free(big);
    return check_done();
}
