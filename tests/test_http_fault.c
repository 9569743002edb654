/* HTTP source against misbehaving origins (tests/util/faulty_http.py):
 * an object replaced mid-load by a server that ignores If-Match, range
 * bodies whose framing is cut after the last byte, redirect loops,
 * compressed answers and servers that accept and never answer. Each case
 * asserts the outcome and the number of requests, never a duration.
 * SKIP (exit 77) when python3 is missing. */
#include "check.h"
#include "tzr_http.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define OBJ (8u << 20) /* 8 ranges of 1 MiB */

static char base_url[256];
static char srv_dir[512];
static pid_t srv_pid;
static unsigned char *obj;

static int start_server(void) {
    snprintf(srv_dir, sizeof srv_dir, "%s/www", check_tmpdir());
    mkdir(srv_dir, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s/obj.bin", srv_dir);
    if (check_write_file(path, obj, OBJ)) return -1;
    /* compressible, as a checkpoint of zeros: gzip makes its body short */
    unsigned char *zeros = calloc(1, OBJ);
    snprintf(path, sizeof path, "%s/zeros.bin", srv_dir);
    int bad = !zeros || check_write_file(path, zeros, OBJ);
    free(zeros);
    if (bad) return -1;
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

static tzr_http_options opts(void) {
    tzr_http_options o = TZR_HTTP_OPTIONS_INIT;
    o.range_bytes = 1u << 20;
    o.max_inflight = 8;
    o.total_timeout_s = 20;
    return o;
}

static void url_of(char *buf, size_t cap, const char *mode, const char *name) {
    snprintf(buf, cap, "%s/%s/%s", base_url, mode, name);
}

/* Lines of the server's request log containing needle. */
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

/* A log line asking for an inverted range "bytes=N-M", M < N. */
static int log_has_inverted_range(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/requests.log", srv_dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int bad = 0;
    while (fgets(line, sizeof line, f)) {
        const char *r = strstr(line, "bytes=");
        unsigned long long a, b;
        if (r && sscanf(r, "bytes=%llu-%llu", &a, &b) == 2 && b < a) bad = 1;
    }
    fclose(f);
    return bad;
}

static void msg_has(const char *want) {
    if (!strstr(tzr_last_error(), want)) {
        fprintf(stderr, "  message '%s' lacks '%s'\n", tzr_last_error(), want);
        check_case_failed = 1;
    }
}

/* Open mode/name and read all of it; returns the read's code (the open's
 * when it fails, then *opened = 0). */
static int read_whole(const char *mode, const char *name, const tzr_http_options *o, int *opened,
                      unsigned char *buf) {
    char url[512];
    url_of(url, sizeof url, mode, name);
    tzr_source *s = NULL;
    int rc = tzr_source_open_url(&s, url, o);
    *opened = rc == 0;
    if (rc) return rc;
    rc = s->read_at(s, buf, OBJ, 0);
    tzr_source_free(s);
    return rc;
}

/* Replaced mid-load by a server that ignores If-Match: the ranges after
 * the third carry the new ETag and must not be mixed in. */
static void replaced_ignoring_if_match(void) {
    tzr_http_options o = opts();
    unsigned char *buf = malloc(OBJ);
    int opened;
    CHECK_RC(read_whole("replace", "obj.bin", &o, &opened, buf), TZR_ECHANGED);
    CHECK(opened);
    msg_has("/replace/obj.bin");
    msg_has("ETag \"v2\"");
    msg_has("bytes ");
    /* no retry can cure it: one GET per range at most */
    CHECK(log_count("GET /replace/") <= OBJ / (1u << 20));
    free(buf);
}

/* No ETag at all: Last-Modified is the pin. */
static void replaced_last_modified(void) {
    tzr_http_options o = opts();
    unsigned char *buf = malloc(OBJ);
    int opened;
    CHECK_RC(read_whole("replacelm", "obj.bin", &o, &opened, buf), TZR_ECHANGED);
    CHECK(opened);
    msg_has("/replacelm/obj.bin");
    msg_has("Last-Modified");
    CHECK(log_count("GET /replacelm/") <= OBJ / (1u << 20));
    free(buf);
}

/* Every byte arrived, then the transfer failed (curl error 18): the range
 * is done; it is never asked for again as an inverted range. */
static void complete_then_cut(const char *mode) {
    tzr_http_options o = opts();
    unsigned char *buf = malloc(OBJ);
    int opened;
    CHECK_OK(read_whole(mode, "obj.bin", &o, &opened, buf));
    CHECK(memcmp(buf, obj, OBJ) == 0);
    char needle[64];
    snprintf(needle, sizeof needle, "GET /%s/", mode);
    size_t gets = log_count(needle);
    if (gets != OBJ / (1u << 20)) fprintf(stderr, "  %zu GETs for %u ranges\n", gets, OBJ >> 20);
    CHECK(gets == OBJ / (1u << 20));
    CHECK(!log_has_inverted_range());
    free(buf);
}
static void chunked_cut_after_last_byte(void) { complete_then_cut("chunkcut"); }
static void content_length_past_body(void) { complete_then_cut("shortbody"); }

static void redirect_loop_at_open(void) {
    tzr_http_options o = opts();
    char url[512];
    url_of(url, sizeof url, "loop", "obj.bin");
    tzr_source *s = NULL;
    CHECK_RC(tzr_source_open_url(&s, url, &o), TZR_EHTTP);
    CHECK(s == NULL);
    msg_has("redirect loop");
    msg_has("/loop/obj.bin");
    size_t heads = log_count("HEAD /loop/");
    fprintf(stderr, "  %zu HEADs\n", heads);
    CHECK(heads <= 11); /* the first request and 10 redirects */
}

static void redirect_loop_on_get(void) {
    tzr_http_options o = opts();
    o.max_inflight = 1;
    unsigned char *buf = malloc(OBJ);
    int opened;
    CHECK_RC(read_whole("loopget", "obj.bin", &o, &opened, buf), TZR_EHTTP);
    CHECK(opened);
    msg_has("redirect loop");
    msg_has("/loopget/obj.bin");
    CHECK(log_count("GET /loopget/") <= 11);
    free(buf);
}

/* A gzip body is not the object's bytes: refused at the first answer. */
static void gzip_body_refused(void) {
    tzr_http_options o = opts();
    o.max_inflight = 1;
    unsigned char *buf = malloc(OBJ);
    int opened;
    CHECK_RC(read_whole("gzip", "zeros.bin", &o, &opened, buf), TZR_EHTTP);
    CHECK(opened);
    msg_has("Content-Encoding 'gzip'");
    msg_has("/gzip/zeros.bin");
    CHECK(log_count("GET /gzip/") == 1);
    free(buf);
}

static void gzip_head_refused(void) {
    tzr_http_options o = opts();
    char url[512];
    url_of(url, sizeof url, "gziphead", "obj.bin");
    tzr_source *s = NULL;
    CHECK_RC(tzr_source_open_url(&s, url, &o), TZR_EHTTP);
    msg_has("Content-Encoding 'gzip'");
    msg_has("/gziphead/obj.bin");
}

/* Accepts, never answers: 3 tries of the stall timeout, not every retry
 * the budget allows (20 s here would hold 19 one-second tries). */
static void silent_server_at_open(void) {
    tzr_http_options o = opts();
    o.stall_timeout_s = 1;
    char url[512];
    url_of(url, sizeof url, "silent", "obj.bin");
    tzr_source *s = NULL;
    CHECK_RC(tzr_source_open_url(&s, url, &o), TZR_ENET);
    msg_has("no answer");
    msg_has("/silent/obj.bin");
    size_t heads = log_count("HEAD /silent/");
    fprintf(stderr, "  %zu HEADs: %s\n", heads, tzr_last_error());
    CHECK(heads == 3);
}

static void silent_server_on_get(void) {
    tzr_http_options o = opts();
    o.stall_timeout_s = 1;
    char url[512];
    url_of(url, sizeof url, "silentget", "obj.bin");
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_url(&s, url, &o));
    if (!s) return;
    unsigned char b[4096];
    CHECK_RC(s->read_at(s, b, sizeof b, 0), TZR_ENET);
    msg_has("no answer");
    msg_has("bytes 0-4095");
    CHECK(log_count("GET /silentget/") == 3);
    tzr_source_free(s);
}

/* The library reads no setting of its own from the environment: with
 * TZR_HTTP_TIMEOUT=1000 set (what the tools once set for --timeout), a
 * path opened with per-call options whose stall time is unset still gets
 * the default stall (a quarter of the 4 s budget: 1 s, 3 tries). Read by
 * mistake, 1000 s would allow one try only. Through the reader's path
 * open, so the per-call options travel from tzr_reader_options. */
static void env_timeout_not_read(void) {
    setenv("TZR_HTTP_TIMEOUT", "1000", 1);
    tzr_http_options o = opts();
    o.total_timeout_s = 4;
    char url[512];
    url_of(url, sizeof url, "silent", "zeros.bin");
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.http = &o;
    tzr_reader *r = NULL;
    CHECK_RC(tzr_reader_open(&r, url, &ro), TZR_ENET);
    unsetenv("TZR_HTTP_TIMEOUT");
    msg_has("no answer");
    CHECK(log_count("HEAD /silent/zeros.bin") == 3);
}

/* A caller built against the struct before the timeout fields: its
 * struct_size stops before them, so what lies beyond is never read and
 * they take their defaults (a quarter of the 4 s budget: 1 s, 3 tries;
 * a stall time of 1000 s read by mistake would allow one try only). */
static void old_struct_size(void) {
    tzr_http_options o = opts();
    o.total_timeout_s = 4;
    o.struct_size = offsetof(tzr_http_options, stall_timeout_s);
    o.stall_timeout_s = 1000;
    char url[512];
    url_of(url, sizeof url, "silent", "old.bin");
    char path[700];
    snprintf(path, sizeof path, "%s/old.bin", srv_dir);
    CHECK(check_write_file(path, obj, 4096) == 0);
    tzr_source *s = NULL;
    CHECK_RC(tzr_source_open_url(&s, url, &o), TZR_ENET);
    msg_has("no answer");
    CHECK(log_count("HEAD /silent/old.bin") == 3);
}

int main(void) {
    if (access("tests/util/faulty_http.py", F_OK) != 0 && chdir("..") != 0) return 2;
    signal(SIGPIPE, SIG_IGN);
    obj = malloc(OBJ);
    uint64_t x = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < OBJ; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(obj + i, &x, 8);
    }
    if (system("python3 -c 'import http.server' >/dev/null 2>&1") != 0 || start_server() != 0) {
        fprintf(stderr, "python3 fault server could not start\n");
        free(obj);
        return 77;
    }
    RUN(replaced_ignoring_if_match);
    RUN(replaced_last_modified);
    RUN(chunked_cut_after_last_byte);
    RUN(content_length_past_body);
    RUN(redirect_loop_at_open);
    RUN(redirect_loop_on_get);
    RUN(gzip_body_refused);
    RUN(gzip_head_refused);
    RUN(silent_server_at_open);
    RUN(silent_server_on_get);
    RUN(env_timeout_not_read);
    RUN(old_struct_size);
    kill(srv_pid, SIGTERM);
    waitpid(srv_pid, NULL, 0);
    free(obj);
    return check_done();
}
